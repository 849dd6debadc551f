/* Element math shared by the CPU ops (ops_cpu.c) and the CUDA kernels (*.cu):
 * written once, as static inline functions marked PX_HD, so the CPU tests
 * exercise exactly the arithmetic the GPU runs.
 *
 * px_expf is a portable polynomial exp rather than libm's expf: plain C with no
 * calls and no branches, so gcc vectorizes the softmax and GELU loops that use
 * it, and so CPU and GPU round the same way. Its error is within 2 ulp over the
 * clamped range, far inside the tolerances of the PyTorch reference test. */
#ifndef PX_OPS_MATH_H
#define PX_OPS_MATH_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define PX_HD __host__ __device__
#else
#define PX_HD
#endif

/* float <-> bits without violating aliasing rules on either compiler. */
PX_HD static inline float px_bits_to_float(int32_t i) {
#ifdef __CUDA_ARCH__
    return __int_as_float(i);
#else
    union {
        int32_t i;
        float f;
    } u;
    u.i = i;
    return u.f;
#endif
}

/* e^x. Inputs are clamped to [-87, 88] so 2^n stays a normal float: exp(-inf)
 * gives ~1.6e-38, not 0 (callers skip masked entries instead of passing -inf).
 * NaN propagates. Cody-Waite range reduction x = n*ln2 + r, |r| <= ln2/2, then
 * a degree-7 Taylor polynomial (truncation error < 1e-8 relative). */
PX_HD static inline float px_expf(float x) {
    float xc = x > -87.0f ? x : -87.0f; /* NaN lands here too: n stays in range */
    xc = xc < 88.0f ? xc : 88.0f;
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float n = (xc * 1.44269504088896341f + shifter) - shifter;
    float r = xc - n * 0.693145751953125f; /* ln2 high part, exact in float */
    r = r - n * 1.42860682030941723e-06f;  /* ln2 low part */
    r = x == x ? r : x;                    /* NaN in, NaN out */
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* n is in [-126, 127], so the biased exponent n + 127 is in [1, 254] */
    return p * px_bits_to_float((int32_t)((uint32_t)((int32_t)n + 127) << 23));
}

/* GELU, tanh form: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
 * Evaluated through the identity 0.5 (1 + tanh(u)) = 1 / (1 + e^(-2u)), which
 * needs one exp and no tanh; the gate is a reciprocal times x rather than x
 * divided by (1 + e), so the clamped branches of px_expf fold to constants
 * and a vectorized loop needs one division per element, not two. */
#define PX_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define PX_GELU_A 0.044715f

/* 1 / (1 + e^(-2u)) = 0.5 (1 + tanh(u)): the factor GELU applies to x. */
PX_HD static inline float px_gelu_gate(float x) {
    float u = PX_GELU_K * (x + PX_GELU_A * x * x * x);
    return 1.0f / (1.0f + px_expf(-2.0f * u));
}

PX_HD static inline float px_gelu(float x) { return x * px_gelu_gate(x); }

/* d gelu / dx = s + x * 2 s (1 - s) du/dx with s the gate above. */
PX_HD static inline float px_gelu_grad(float x) {
    float s = px_gelu_gate(x);
    float du = PX_GELU_K * (1.0f + 3.0f * PX_GELU_A * x * x);
    return s + x * 2.0f * s * (1.0f - s) * du;
}

/* AdamW coefficients of one step, computed once in double (as PyTorch does in
 * Python) and rounded to float, so the element update below rounds like
 * torch.optim.AdamW. t is the 1-based step count. */
typedef struct {
    float beta1, beta2;
    float one_minus_beta1, one_minus_beta2;
    float eps;
    float decay;     /* 1 - lr * weight_decay */
    float step_size; /* lr / (1 - beta1^t) */
    float bc2_sqrt;  /* sqrt(1 - beta2^t) */
} px_adamw_coef_t;

PX_HD static inline px_adamw_coef_t px_adamw_coef(float lr, float beta1, float beta2, float eps,
                                                  float weight_decay, int t) {
    px_adamw_coef_t c;
    double b1 = beta1, b2 = beta2;
    c.beta1 = beta1;
    c.beta2 = beta2;
    c.one_minus_beta1 = (float)(1.0 - b1);
    c.one_minus_beta2 = (float)(1.0 - b2);
    c.eps = eps;
    c.decay = (float)(1.0 - (double)lr * (double)weight_decay);
    c.step_size = (float)((double)lr / (1.0 - pow(b1, t)));
    c.bc2_sqrt = (float)sqrt(1.0 - pow(b2, t));
    return c;
}

/* One AdamW element in torch.optim.AdamW's order of operations: decoupled
 * decay, moment updates, then p += (-step_size * m) / (sqrt(v) / bc2_sqrt + eps). */
PX_HD static inline void px_adamw_element(float *p, float *m, float *v, float g,
                                          const px_adamw_coef_t *c) {
    float param = *p * c->decay;
    float mt = *m * c->beta1 + c->one_minus_beta1 * g;
    float vt = *v * c->beta2 + c->one_minus_beta2 * g * g;
    float denom = sqrtf(vt) / c->bc2_sqrt + c->eps;
    *p = param + (-c->step_size * mt) / denom;
    *m = mt;
    *v = vt;
}

#endif
