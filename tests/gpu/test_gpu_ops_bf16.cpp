/* Every bf16-storage overload of the CUDA ops (the C++ half of
 * kernels/ops_cuda.h, what the model runs with `--precision bf16`) against
 * the FP32 op of the same name, so that a failing bf16 model run can be
 * traced to one op. Each case draws its inputs, rounds them to bf16 on the
 * host, and hands both sides the same numbers (bf16 tensors to the
 * overload, the same values in FP32 tensors to the FP32 op): what differs is
 * the overload's own rounding of what it stores in bf16. The bf16 ops run
 * under bf16 math (px_cuda_ops_set_math), as the model runs them, the FP32
 * references under FP32 math.
 *
 * Shapes: odd T, T over 64 and the tiny preset's widths, so head sizes 12,
 * 24 and 16 for the unfused attention and V < Vp for the classifier; the
 * model's matmuls (qkv, logits, fcproj and attproj with FP32 outputs, fc
 * with its GELU) with cuBLASLt on and off; head sizes 16, 32 and 64 for the
 * fused attention, T within one 64-row tile and across two and three (those
 * checks are skipped, with a line, on a GPU below sm_80). Outputs start as
 * NaN, so whatever an op leaves unwritten shows; attention backwards get
 * NaN above att's diagonal, which they must never read.
 *
 * Exact checks, where the overload is the FP32 op's own kernel with a bf16
 * load or store (a template over the storage; --fmad=false keeps the
 * arithmetic of both instantiations the same):
 * - conversions: bf16 -> float -> bf16 is the identity for all 65536
 *   patterns (NaN stays NaN); float -> bf16 is round-to-nearest-even, as a
 *   host function written from the definition says, over random bit
 *   patterns, ties, subnormals, overflow and infinities;
 *   px_cuda_to_bf16_many writes each job (one empty, one past 1024 blocks)
 *   and nothing between them;
 * - LayerNorm forward, residual + LayerNorm, GELU forward and backward, the
 *   fused classifier's gradient, and the fused attention's forward and
 *   backward: the bf16 output is the FP32 op's output rounded to bf16, bit
 *   for bit; mean, rstd, the residual sum, losses and lse (FP32 on both
 *   sides) are the FP32 op's bit for bit;
 * - layernorm_backward_cuda with a bf16 copy of dinp: dinp, dweight, dbias
 *   the FP32 op's bit for bit (all accumulate onto random values), the copy
 *   dinp rounded; its FP32-storage form (dinp passed twice) the same;
 * - bias gradients (column sums of a bf16 dout) the FP32 op's bit for bit;
 * - reruns of the reducing bf16 ops bitwise equal (determinism).
 * Tolerance checks, max |got - want| <= tol * max |want| over a tensor
 * (gpu_test.h), fixed before any GPU run:
 *   TOL_F32  1e-4  an FP32 output of a GEMM on bf16 operands: the same exact
 *                  products, summed in another order (tensor cores)
 *   TOL_R1   5e-3  a bf16 output rounded once (at most 2^-8 = 3.9e-3 of the
 *                  element, plus the sum-order noise above)
 *   TOL_R2   1e-2  rounded twice: a bias or the GELU applied to a GEMM's
 *                  bf16 output (the separate kernels, where cuBLASLt's
 *                  epilogue is off or unavailable)
 *   TOL_ATT  1e-2  the unfused attention, whose scores, probabilities and
 *                  intermediate gradients are all stored in bf16, each
 *                  rounding again (the worst under the emulator: 3.9e-3)
 * A wrong index, a missed mask, a dropped bias or term misses by O(1).
 * Exits 0 when all pass, 1 naming each miss, 77 without a GPU. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "gpu_test.h"
#include "ops_cuda.h"

typedef __nv_bfloat16 bf16;

#define TOL_F32 1e-4
#define TOL_R1 5e-3
#define TOL_R2 1e-2
#define TOL_ATT 1e-2

typedef struct {
    int B, T, C, NH, V, Vp;
} shape_t;

/* LayerNorm, the matmuls, the unfused attention, the classifier. */
static const shape_t g_shapes[] = {
    {2, 17, 48, 4, 100, 128}, /* odd T, head size 12, V < Vp */
    {1, 70, 48, 2, 250, 256}, /* head size 24, T over 64 */
    {3, 64, 64, 4, 256, 256}, /* the tiny preset's widths */
};
/* The fused attention (V, Vp unused). */
static const shape_t g_flash[] = {
    {2, 17, 48, 3, 0, 0},   /* head size 16, T under one tile */
    {1, 70, 64, 2, 0, 0},   /* head size 32, a second, partial tile */
    {1, 33, 64, 1, 0, 0},   /* head size 64 */
    {2, 150, 128, 2, 0, 0}, /* head size 64, three tiles */
};

/* ---- host bf16 ---- */

static float bf16_value(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int bf16_is_nan(uint16_t b) { return (b & 0x7FFF) > 0x7F80; }

/* Round to nearest, ties to even, from the definition (the two bf16
 * neighbours of x, the nearer one, on a tie the even one; past the largest
 * finite value the upper neighbour is 2^128, that is infinity) rather than
 * the usual bit trick, so that it checks the device's rounding. */
static uint16_t bf16_bits(float x) {
    if (isnan(x)) return 0x7FC0;
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1); /* toward zero, and one step away from it */
    if ((u & 0xFFFF) == 0) return lo;
    double vlo = bf16_value(lo), vhi = (hi & 0x7FFF) == 0x7F80 ? copysign(ldexp(1.0, 128), x) : bf16_value(hi);
    double dlo = fabs((double)x - vlo), dhi = fabs(vhi - (double)x);
    if (dlo != dhi) return dlo < dhi ? lo : hi;
    return (lo & 1) ? hi : lo;
}

static float round_bf16(float x) { return bf16_value(bf16_bits(x)); }

/* ---- buffers: host ones kept for release_all(), device ones too ---- */

static std::vector<void *> g_host, g_dev;

template <class T>
static T *keep(T *p) {
    g_host.push_back((void *)p);
    return p;
}

static void release_all(void) {
    for (void *p : g_host) free(p);
    for (void *p : g_dev) cudaFree(p);
    g_host.clear();
    g_dev.clear();
}

/* n random values in [-scale, scale), rounded to bf16. */
static float *random_bf16(size_t n, float scale) {
    float *x = keep(gt_random(n, scale));
    for (size_t i = 0; i < n; i++) x[i] = round_bf16(x[i]);
    return x;
}

static float *random_f32(size_t n, float scale) { return keep(gt_random(n, scale)); }

static float *rounded_copy(const float *x, size_t n) {
    float *y = keep((float *)malloc(n * sizeof(float) + 1));
    for (size_t i = 0; i < n; i++) y[i] = round_bf16(x[i]);
    return y;
}

static void *dev_alloc(size_t bytes) {
    void *d = NULL;
    GT_CUDA(cudaMalloc(&d, bytes > 0 ? bytes : 1));
    g_dev.push_back(d);
    return d;
}

static float *up_f32(const float *h, size_t n) {
    float *d = (float *)dev_alloc(n * sizeof(float));
    GT_CUDA(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

static bf16 *up_bits(const uint16_t *bits, size_t n) {
    bf16 *d = (bf16 *)dev_alloc(n * sizeof(bf16));
    GT_CUDA(cudaMemcpy(d, bits, n * sizeof(bf16), cudaMemcpyHostToDevice));
    return d;
}

/* h (n) rounded to bf16, on the device. */
static bf16 *up_bf16(const float *h, size_t n) {
    uint16_t *bits = keep((uint16_t *)malloc(n * sizeof(uint16_t) + 1));
    for (size_t i = 0; i < n; i++) bits[i] = bf16_bits(h[i]);
    return up_bits(bits, n);
}

/* Outputs start as NaN (all bytes 0xFF): what an op fails to write shows. */
static float *nan_f32(size_t n) {
    float *d = (float *)dev_alloc(n * sizeof(float));
    GT_CUDA(cudaMemset(d, 0xFF, n * sizeof(float)));
    return d;
}

static bf16 *nan_bf16(size_t n) {
    bf16 *d = (bf16 *)dev_alloc(n * sizeof(bf16));
    GT_CUDA(cudaMemset(d, 0xFF, n * sizeof(bf16)));
    return d;
}

static float *down_f32(const float *d, size_t n) { return keep(gt_down(d, n)); }

static uint16_t *down_bits(const bf16 *d, size_t n) {
    uint16_t *bits = keep((uint16_t *)malloc(n * sizeof(uint16_t) + 1));
    GT_CUDA(cudaDeviceSynchronize());
    GT_CUDA(cudaMemcpy(bits, d, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    return bits;
}

/* A bf16 device tensor's values, as floats on the host. */
static float *down_bf16(const bf16 *d, size_t n) {
    const uint16_t *bits = down_bits(d, n);
    float *x = keep((float *)malloc(n * sizeof(float) + 1));
    for (size_t i = 0; i < n; i++) x[i] = bf16_value(bits[i]);
    return x;
}

/* ---- checks ---- */

__attribute__((format(printf, 1, 2))) static const char *tag(const char *fmt, ...) {
    static char buf[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

#define SHAPE(s) (s)->B, (s)->T, (s)->C
#define SHAPE_FMT " B=%d T=%d C=%d"

/* got, a bf16 output, is want (the FP32 op's) rounded to bf16, bit for bit. */
static void same_rounded(const char *what, const float *got, const float *want, size_t n) {
    gt_same(what, got, rounded_copy(want, n), n);
}

/* bf16 patterns got against want: equal, or both NaN (the NaN's payload is
 * the converter's choice). src: what they were converted from, or NULL. */
static void same_bits(const char *what, const uint16_t *got, const uint16_t *want, const float *src, size_t n) {
    gt_checks++;
    for (size_t i = 0; i < n; i++) {
        if (got[i] == want[i] || (bf16_is_nan(got[i]) && bf16_is_nan(want[i]))) continue;
        printf("FAIL %-44s at [%zu]: got 0x%04x want 0x%04x", what, i, got[i], want[i]);
        if (src) printf(" (from %.9g)", (double)src[i]);
        printf(" (n=%zu)\n", n);
        gt_failures++;
        return;
    }
    printf("ok   %-44s bitwise equal, NaN as NaN (n=%zu)\n", what, n);
}

/* A check that counts what broke its rule: passes when nothing did. */
static void none_broken(const char *what, size_t broken) {
    gt_checks++;
    printf("%s %-44s (%zu not)\n", broken ? "FAIL" : "ok  ", what, broken);
    gt_failures += broken != 0;
}

/* ---- conversions ---- */

static void test_convert(void) {
    /* every bf16 pattern to float and back */
    size_t n = 65536;
    uint16_t *all = keep((uint16_t *)malloc(n * sizeof(uint16_t)));
    float *as_float = keep((float *)malloc(n * sizeof(float)));
    for (size_t i = 0; i < n; i++) all[i] = (uint16_t)i, as_float[i] = bf16_value((uint16_t)i);
    bf16 *d_all = up_bits(all, n), *d_back = nan_bf16(n);
    float *d_f = nan_f32(n);
    px_cuda_to_float(d_f, d_all, n, 0);
    px_cuda_to_bf16(d_back, d_f, n, 0);
    gt_same("px_cuda_to_float every bf16 pattern", down_f32(d_f, n), as_float, n);
    same_bits("px_cuda_to_bf16 of those: the same patterns", down_bits(d_back, n), all, NULL, n);

    /* float to bf16: random bit patterns (every exponent, NaNs among them),
     * exact ties and their neighbours, and the edges */
    const uint32_t edges[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x80008000u, 0x00018000u, 0x00008001u,
                              0x007FFFFFu, 0x00800000u, 0x3F808000u, 0x3F818000u, 0x3F807FFFu, 0x3F808001u,
                              0xBF808000u, 0xBF818000u, 0x7F7F7FFFu, 0x7F7F8000u, 0x7F7FFFFFu, 0xFF7FFFFFu,
                              0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu, 0x3F800000u};
    size_t ne = sizeof edges / sizeof edges[0], m = 20011;
    float *src = keep((float *)malloc(m * sizeof(float)));
    uint16_t *want = keep((uint16_t *)malloc(m * sizeof(uint16_t)));
    for (size_t i = 0; i < m; i++) {
        uint32_t u = gt_u32();
        if (i < ne) u = edges[i];
        else if (i % 3 == 0) u = (u & 0xFFFF0000u) | 0x8000u; /* a tie */
        else if (i % 3 == 1) u = (u & 0xFFFF0000u) | ((i & 8) ? 0x7FFFu : 0x8001u);
        memcpy(&src[i], &u, sizeof u);
        want[i] = bf16_bits(src[i]);
    }
    float *d_src = up_f32(src, m);
    bf16 *d_dst = nan_bf16(m);
    px_cuda_to_bf16(d_dst, d_src, m, 0);
    same_bits("px_cuda_to_bf16 round to nearest even", down_bits(d_dst, m), want, src, m);

    /* px_cuda_to_bf16_many: jobs of 1000, 0, 1, 270001 (past 1024 blocks of
     * 256: the grid-stride loop) and 77 elements, into one buffer with 8
     * guard elements after each job, which must keep their bits */
    const size_t sizes[5] = {1000, 0, 1, 270001, 77};
    size_t total = 0;
    for (int j = 0; j < 5; j++) total += sizes[j];
    float *x = random_f32(total, 3.0f);
    float *d_x = up_f32(x, total);
    size_t slots = total + 5 * 8;
    bf16 *d_many = (bf16 *)dev_alloc(slots * sizeof(bf16));
    GT_CUDA(cudaMemset(d_many, 0xAB, slots * sizeof(bf16)));
    px_cuda_convert_t jobs[5];
    size_t off = 0, doff = 0;
    for (int j = 0; j < 5; j++) {
        jobs[j].dst = d_many + doff;
        jobs[j].src = d_x + off;
        jobs[j].n = sizes[j];
        off += sizes[j];
        doff += sizes[j] + 8;
    }
    px_cuda_to_bf16_many(jobs, 5, 0);
    uint16_t *got = down_bits(d_many, slots);
    uint16_t *wantm = keep((uint16_t *)malloc(slots * sizeof(uint16_t)));
    off = doff = 0;
    for (int j = 0; j < 5; j++) {
        for (size_t i = 0; i < sizes[j]; i++) wantm[doff + i] = bf16_bits(x[off + i]);
        for (size_t i = 0; i < 8; i++) wantm[doff + sizes[j] + i] = 0xABAB;
        off += sizes[j];
        doff += sizes[j] + 8;
    }
    same_bits("px_cuda_to_bf16_many 5 jobs, guards untouched", got, wantm, NULL, slots);
    release_all();
}

/* ---- LayerNorm ---- */

static void test_layernorm(const shape_t *s) {
    int B = s->B, T = s->T, C = s->C;
    size_t BT = (size_t)B * T, btc = BT * C;
    float *inp = random_f32(btc, 2.0f);
    for (size_t i = 0; i < btc; i++) inp[i] += 0.5f; /* a non-zero mean */
    float *d_inp = up_f32(inp, btc), *d_w = up_f32(random_f32(C, 1.0f), C), *d_b = up_f32(random_f32(C, 1.0f), C);

    float *d_out = nan_f32(btc), *d_mean = nan_f32(BT), *d_rstd = nan_f32(BT);
    bf16 *d_out16 = nan_bf16(btc);
    float *d_mean16 = nan_f32(BT), *d_rstd16 = nan_f32(BT);
    layernorm_forward_cuda(d_out, d_mean, d_rstd, d_inp, d_w, d_b, B, T, C, 0);
    px_cuda_ops_set_math(PX_CUDA_MATH_BF16);
    layernorm_forward_cuda(d_out16, d_mean16, d_rstd16, d_inp, d_w, d_b, B, T, C, 0);
    px_cuda_ops_set_math(PX_CUDA_MATH_FP32);
    float *out = down_f32(d_out, btc), *out16 = down_bf16(d_out16, btc);
    gt_close(tag("layernorm_forward bf16 out" SHAPE_FMT, SHAPE(s)), out16, out, btc, TOL_R1, 0);
    same_rounded(tag("layernorm_forward bf16 out = FP32's rounded" SHAPE_FMT, SHAPE(s)), out16, out, btc);
    gt_same(tag("layernorm_forward bf16 mean" SHAPE_FMT, SHAPE(s)), down_f32(d_mean16, BT), down_f32(d_mean, BT), BT);
    gt_same(tag("layernorm_forward bf16 rstd" SHAPE_FMT, SHAPE(s)), down_f32(d_rstd16, BT), down_f32(d_rstd, BT), BT);

    /* residual + LayerNorm: the row is a + b, written to res */
    float *d_a = up_f32(random_f32(btc, 1.0f), btc), *d_bb = up_f32(random_f32(btc, 1.0f), btc);
    float *d_res = nan_f32(btc), *d_res16 = nan_f32(btc);
    residual_layernorm_forward_cuda(d_res, d_out, d_mean, d_rstd, d_a, d_bb, d_w, d_b, B, T, C, 0);
    px_cuda_ops_set_math(PX_CUDA_MATH_BF16);
    residual_layernorm_forward_cuda(d_res16, d_out16, d_mean16, d_rstd16, d_a, d_bb, d_w, d_b, B, T, C, 0);
    px_cuda_ops_set_math(PX_CUDA_MATH_FP32);
    out = down_f32(d_out, btc), out16 = down_bf16(d_out16, btc);
    gt_close(tag("residual_layernorm bf16 out" SHAPE_FMT, SHAPE(s)), out16, out, btc, TOL_R1, 0);
    same_rounded(tag("residual_layernorm bf16 out = FP32's rounded" SHAPE_FMT, SHAPE(s)), out16, out, btc);
    gt_same(tag("residual_layernorm bf16 res" SHAPE_FMT, SHAPE(s)), down_f32(d_res16, btc), down_f32(d_res, btc),
            btc);
    gt_same(tag("residual_layernorm bf16 mean" SHAPE_FMT, SHAPE(s)), down_f32(d_mean16, BT), down_f32(d_mean, BT),
            BT);
    gt_same(tag("residual_layernorm bf16 rstd" SHAPE_FMT, SHAPE(s)), down_f32(d_rstd16, BT), down_f32(d_rstd, BT),
            BT);

    /* Backward, from the FP32 forward's statistics (of the residual row);
     * every gradient starts random: they accumulate. Three forms: the C
     * op, the bf16 copy of dinp, and the FP32-storage form (dinp twice). */
    float *dout = random_f32(btc, 1.0f), *dinp = random_f32(btc, 1.0f);
    float *dw = random_f32(C, 1.0f), *db = random_f32(C, 1.0f);
    float *d_dout = up_f32(dout, btc);
    float *d_dinp[3], *d_dw[3], *d_db[3];
    for (int k = 0; k < 3; k++) d_dinp[k] = up_f32(dinp, btc), d_dw[k] = up_f32(dw, C), d_db[k] = up_f32(db, C);
    bf16 *d_dinp16 = nan_bf16(btc);
    layernorm_backward_cuda(d_dinp[0], d_dw[0], d_db[0], d_dout, d_res, d_w, d_mean, d_rstd, B, T, C, 0);
    px_cuda_ops_set_math(PX_CUDA_MATH_BF16);
    layernorm_backward_cuda(d_dinp[1], d_dinp16, d_dw[1], d_db[1], d_dout, d_res, d_w, d_mean, d_rstd, B, T, C, 0);
    px_cuda_ops_set_math(PX_CUDA_MATH_FP32);
    layernorm_backward_cuda(d_dinp[2], d_dinp[2], d_dw[2], d_db[2], d_dout, d_res, d_w, d_mean, d_rstd, B, T, C, 0);
    float *want_dinp = down_f32(d_dinp[0], btc), *want_dw = down_f32(d_dw[0], C), *want_db = down_f32(d_db[0], C);
    const char *form[3] = {"", "(dinp, dinp_bf16)", "(dinp, dinp)"}; /* [0]: the reference */
    for (int k = 1; k < 3; k++) {
        gt_same(tag("layernorm_backward%s dinp" SHAPE_FMT, form[k], SHAPE(s)), down_f32(d_dinp[k], btc), want_dinp,
                btc);
        gt_same(tag("layernorm_backward%s dweight" SHAPE_FMT, form[k], SHAPE(s)), down_f32(d_dw[k], C), want_dw, C);
        gt_same(tag("layernorm_backward%s dbias" SHAPE_FMT, form[k], SHAPE(s)), down_f32(d_db[k], C), want_db, C);
    }
    same_rounded(tag("layernorm_backward dinp_bf16 = dinp rounded" SHAPE_FMT, SHAPE(s)), down_bf16(d_dinp16, btc),
                 want_dinp, btc);
    release_all();
}

/* ---- matmuls ---- */

/* out (BT,OC) = inp (BT,Cin) W^T (+ bias), bf16 operands; out and bias bf16
 * (out_bf16) or FP32. */
static void matmul_forward_case(const shape_t *s, int Cin, int OC, int with_bias, int out_bf16, int lt) {
    int B = s->B, T = s->T;
    size_t BT = (size_t)B * T, no = BT * OC;
    float *inp = random_bf16(BT * Cin, 1.0f), *w = random_bf16((size_t)OC * Cin, 0.5f);
    float *bias = out_bf16 ? random_bf16(OC, 1.0f) : random_f32(OC, 1.0f);
    float *d_inp = up_f32(inp, BT * Cin), *d_w = up_f32(w, (size_t)OC * Cin), *d_bias = up_f32(bias, OC);
    bf16 *d_inp16 = up_bf16(inp, BT * Cin), *d_w16 = up_bf16(w, (size_t)OC * Cin), *d_bias16 = up_bf16(bias, OC);
    float *d_ref = nan_f32(no);
    px_cuda_ops_set_lt(lt);
    matmul_forward_cuda(d_ref, d_inp, d_w, with_bias ? d_bias : NULL, B, T, Cin, OC, 0);
    float *ref = down_f32(d_ref, no), *got;
    px_cuda_ops_set_math(PX_CUDA_MATH_BF16);
    if (out_bf16) {
        bf16 *d_out = nan_bf16(no);
        matmul_forward_cuda(d_out, d_inp16, d_w16, with_bias ? d_bias16 : (const bf16 *)NULL, B, T, Cin, OC, 0);
        got = down_bf16(d_out, no);
    } else {
        float *d_out = nan_f32(no);
        matmul_forward_cuda(d_out, d_inp16, d_w16, with_bias ? d_bias : (const float *)NULL, B, T, Cin, OC, 0);
        got = down_f32(d_out, no);
    }
    px_cuda_ops_set_math(PX_CUDA_MATH_FP32);
    px_cuda_ops_set_lt(1);
    /* a bias added to a bf16 GEMM output by the separate kernel rounds twice */
    double tol = !out_bf16 ? TOL_F32 : with_bias ? TOL_R2 : TOL_R1;
    gt_close(tag("matmul_forward %s out OC=%d bias=%d lt=%d" SHAPE_FMT, out_bf16 ? "bf16" : "FP32", OC, with_bias, lt,
                 B, T, Cin),
             got, ref, no, tol, 0);
    release_all();
}

/* The backward on bf16 operands against the FP32 op of the same name on the
 * same values. set: matmul_backward_set_cuda (dinp overwritten: it starts
 * as NaN), else matmul_backward_cuda (dinp accumulates onto random values).
 * dinp: 0 none (NULL, and the weight NULL too, as the model's
 * weight-gradient half passes it), 1 FP32, 2 bf16. dweight and dbias (when
 * with_dbias) accumulate onto random values. rerun: the bf16 op again from
 * the same start, bitwise. */
typedef struct {
    int set, dinp, with_dbias;
    float scale;
    int rerun;
} bwd_case_t;

static void matmul_backward_case(const shape_t *s, int Cin, int OC, bwd_case_t c) {
    int B = s->B, T = s->T;
    size_t BT = (size_t)B * T, ni = BT * Cin, nw = (size_t)OC * Cin;
    float *inp = random_bf16(ni, 1.0f), *w = random_bf16(nw, 0.5f), *dout = random_bf16(BT * OC, 1.0f);
    float *dinp0 = random_f32(ni, 1.0f), *dw0 = random_f32(nw, 1.0f), *db0 = random_f32(OC, 1.0f);
    float *d_inp = up_f32(inp, ni), *d_w = up_f32(w, nw), *d_dout = up_f32(dout, BT * OC);
    bf16 *d_inp16 = up_bf16(inp, ni), *d_w16 = up_bf16(w, nw), *d_dout16 = up_bf16(dout, BT * OC);
    const float *wf = c.dinp ? d_w : NULL;
    const bf16 *w16 = c.dinp ? d_w16 : NULL;
    const char *name = c.set ? "matmul_backward_set" : "matmul_backward";

    float *ref_dinp = c.dinp == 0 ? NULL : c.set ? nan_f32(ni) : up_f32(dinp0, ni);
    float *ref_dw = up_f32(dw0, nw), *ref_db = c.with_dbias ? up_f32(db0, OC) : NULL;
    if (c.set) matmul_backward_set_cuda(ref_dinp, ref_dw, ref_db, d_dout, c.scale, d_inp, wf, B, T, Cin, OC, 0);
    else matmul_backward_cuda(ref_dinp, ref_dw, ref_db, d_dout, d_inp, wf, B, T, Cin, OC, 0);

    float *got_dinp[2] = {NULL, NULL}, *got_dw[2], *got_db[2] = {NULL, NULL};
    px_cuda_ops_set_math(PX_CUDA_MATH_BF16);
    for (int run = 0; run < 1 + c.rerun; run++) {
        float *dw = up_f32(dw0, nw), *db = c.with_dbias ? up_f32(db0, OC) : NULL;
        if (c.dinp == 2) {
            bf16 *dinp = nan_bf16(ni);
            matmul_backward_set_cuda(dinp, dw, db, d_dout16, c.scale, d_inp16, w16, B, T, Cin, OC, 0);
            got_dinp[run] = down_bf16(dinp, ni);
        } else {
            float *dinp = c.dinp == 0 ? NULL : c.set ? nan_f32(ni) : up_f32(dinp0, ni);
            if (c.set) matmul_backward_set_cuda(dinp, dw, db, d_dout16, c.scale, d_inp16, w16, B, T, Cin, OC, 0);
            else matmul_backward_cuda(dinp, dw, db, d_dout16, d_inp16, w16, B, T, Cin, OC, 0);
            if (dinp) got_dinp[run] = down_f32(dinp, ni);
        }
        got_dw[run] = down_f32(dw, nw);
        if (db) got_db[run] = down_f32(db, OC);
    }
    px_cuda_ops_set_math(PX_CUDA_MATH_FP32);

    const char *kind = c.dinp == 2 ? "bf16" : c.dinp == 1 ? "FP32" : "no";
    if (c.dinp)
        gt_close(tag("%s %s dinp OC=%d scale=%g" SHAPE_FMT, name, kind, OC, (double)c.scale, B, T, Cin), got_dinp[0],
                 down_f32(ref_dinp, ni), ni, c.dinp == 2 ? TOL_R1 : TOL_F32, 0);
    gt_close(tag("%s (%s dinp) dweight OC=%d scale=%g" SHAPE_FMT, name, kind, OC, (double)c.scale, B, T, Cin),
             got_dw[0], down_f32(ref_dw, nw), nw, TOL_F32, 0);
    if (c.with_dbias) /* column sums of the same values in the same order */
        gt_same(tag("%s (%s dinp) dbias OC=%d" SHAPE_FMT, name, kind, OC, B, T, Cin), got_db[0], down_f32(ref_db, OC),
                OC);
    if (c.rerun) {
        if (c.dinp) gt_same(tag("%s rerun dinp OC=%d" SHAPE_FMT, name, OC, B, T, Cin), got_dinp[1], got_dinp[0], ni);
        gt_same(tag("%s rerun dweight OC=%d" SHAPE_FMT, name, OC, B, T, Cin), got_dw[1], got_dw[0], nw);
        if (c.with_dbias) gt_same(tag("%s rerun dbias OC=%d" SHAPE_FMT, name, OC, B, T, Cin), got_db[1], got_db[0], OC);
    }
    release_all();
}

/* The GELU matmuls against the FP32 ops, with cuBLASLt's epilogues (lt) or
 * the separate kernels: fc (C -> H, GELU) forward, and fcproj's input
 * gradient through the GELU (dinp (BT,H) = (dout W) * GELU'(pre)). Without
 * an epilogue the bias, the GELU and its gradient each round again. */
static void matmul_gelu_case(const shape_t *s, int lt) {
    int B = s->B, T = s->T, C = s->C, H = 4 * s->C;
    size_t BT = (size_t)B * T, nh = BT * H;
    float *inp = random_bf16(BT * C, 1.0f), *w = random_bf16((size_t)H * C, 0.5f), *bias = random_bf16(H, 0.5f);
    float *d_pre = nan_f32(nh), *d_out = nan_f32(nh);
    bf16 *d_pre16 = nan_bf16(nh), *d_out16 = nan_bf16(nh);
    px_cuda_ops_set_lt(lt);
    matmul_forward_gelu_cuda(d_out, d_pre, up_f32(inp, BT * C), up_f32(w, (size_t)H * C), up_f32(bias, H), B, T, C,
                             H, 0);
    px_cuda_ops_set_math(PX_CUDA_MATH_BF16);
    matmul_forward_gelu_cuda(d_out16, d_pre16, up_bf16(inp, BT * C), up_bf16(w, (size_t)H * C), up_bf16(bias, H), B,
                             T, C, H, 0);
    px_cuda_ops_set_math(PX_CUDA_MATH_FP32);
    float *pre16 = down_bf16(d_pre16, nh);
    gt_close(tag("matmul_forward_gelu bf16 pre lt=%d" SHAPE_FMT, lt, SHAPE(s)), pre16, down_f32(d_pre, nh), nh, TOL_R2,
             0);
    gt_close(tag("matmul_forward_gelu bf16 out lt=%d" SHAPE_FMT, lt, SHAPE(s)), down_bf16(d_out16, nh),
             down_f32(d_out, nh), nh, TOL_R2, 0);

    /* the bf16 forward's pre on both sides */
    float *w2 = random_bf16((size_t)C * H, 0.5f), *dout = random_bf16(BT * C, 1.0f);
    float *d_dinp = nan_f32(nh);
    bf16 *d_dinp16 = nan_bf16(nh);
    matmul_backward_dgelu_cuda(d_dinp, up_f32(dout, BT * C), up_f32(pre16, nh), up_f32(w2, (size_t)C * H), B, T, H, C,
                               0);
    px_cuda_ops_set_math(PX_CUDA_MATH_BF16);
    matmul_backward_dgelu_cuda(d_dinp16, up_bf16(dout, BT * C), d_pre16, up_bf16(w2, (size_t)C * H), B, T, H, C, 0);
    px_cuda_ops_set_math(PX_CUDA_MATH_FP32);
    px_cuda_ops_set_lt(1);
    gt_close(tag("matmul_backward_dgelu bf16 dinp lt=%d" SHAPE_FMT, lt, SHAPE(s)), down_bf16(d_dinp16, nh),
             down_f32(d_dinp, nh), nh, TOL_R2, 0);
    release_all();
}

static void test_matmul(const shape_t *s) {
    int C = s->C;
    for (int lt = 1; lt >= 0; lt--) {
        matmul_forward_case(s, C, 3 * C, 1, 1, lt); /* qkv */
        matmul_forward_case(s, C, s->Vp, 0, 1, lt); /* the logits, no bias */
        matmul_forward_case(s, 4 * C, C, 1, 0, lt); /* fcproj: FP32 out and bias */
        matmul_forward_case(s, C, C, 0, 0, lt);     /* attproj off tensor-parallel rank 0: no bias */
        matmul_gelu_case(s, lt);
    }
    matmul_backward_case(s, C, 4 * C, {0, 1, 1, 1.0f, 1});   /* accumulating dinp, dweight, dbias */
    matmul_backward_case(s, C, 3 * C, {0, 0, 1, 1.0f, 0});   /* the weight half: dinp and weight NULL */
    matmul_backward_case(s, C, 4 * C, {1, 1, 1, 1.0f, 1});   /* FP32 dinp overwritten */
    matmul_backward_case(s, 4 * C, C, {1, 2, 1, 1.0f, 1});   /* bf16 dinp overwritten */
    matmul_backward_case(s, C, s->Vp, {1, 1, 0, 0.375f, 0}); /* the classifier: a loss scale, no bias */
    matmul_backward_case(s, C, s->Vp, {1, 2, 0, 0.375f, 0}); /* the same into bf16 */
    matmul_backward_case(s, C, s->Vp, {1, 0, 0, 0.375f, 0}); /* its weight half */
}

/* ---- the unfused attention ---- */

/* a (rows of T) with the entries above each row's diagonal set to 0. */
static float *lower(const float *a, int rows, int T) {
    float *b = keep((float *)calloc((size_t)rows * T, sizeof(float)));
    for (int r = 0; r < rows; r++)
        for (int j = 0; j <= r % T; j++) b[(size_t)r * T + j] = a[(size_t)r * T + j];
    return b;
}

static void test_attention(const shape_t *s) {
    int B = s->B, T = s->T, C = s->C, NH = s->NH, hs = C / NH, rows = B * NH * T;
    size_t BT = (size_t)B * T, btc = BT * C, natt = (size_t)rows * T;
    float *qkv = random_bf16(BT * 3 * C, 1.5f);
    float *d_qkv = up_f32(qkv, BT * 3 * C), *d_out = nan_f32(btc), *d_att = nan_f32(natt);
    bf16 *d_qkv16 = up_bf16(qkv, BT * 3 * C), *d_out16 = nan_bf16(btc), *d_att16 = nan_bf16(natt);
    attention_forward_cuda(d_out, d_att, d_qkv, B, T, C, NH, 0);
    px_cuda_ops_set_math(PX_CUDA_MATH_BF16);
    attention_forward_cuda(d_out16, d_att16, d_qkv16, B, T, C, NH, 0);
    px_cuda_ops_set_math(PX_CUDA_MATH_FP32);
    float *att16 = down_bf16(d_att16, natt);
    gt_close(tag("attention_forward bf16 out hs=%d" SHAPE_FMT, hs, SHAPE(s)), down_bf16(d_out16, btc),
             down_f32(d_out, btc), btc, TOL_ATT, 0);
    gt_close(tag("attention_forward bf16 att (keys <= t) hs=%d" SHAPE_FMT, hs, SHAPE(s)), lower(att16, rows, T),
             lower(down_f32(d_att, natt), rows, T), natt, TOL_ATT, 0);
    size_t bad = 0;
    for (int r = 0; r < rows; r++)
        for (int j = r % T + 1; j < T; j++) bad += att16[(size_t)r * T + j] != 0.0f;
    none_broken(tag("attention_forward bf16 att above the diagonal is 0" SHAPE_FMT, SHAPE(s)), bad);

    /* Backward from the bf16 forward's att, NaN above the diagonal (never
     * read), on both sides; dqkv overwritten (it starts as NaN). */
    float *att_in = keep((float *)malloc(natt * sizeof(float)));
    for (size_t i = 0; i < natt; i++) att_in[i] = (int)(i % T) > (int)((i / T) % T) ? NAN : att16[i];
    float *dout = random_bf16(btc, 1.0f);
    float *d_dout = up_f32(dout, btc), *d_att_in = up_f32(att_in, natt), *d_dqkv = nan_f32(BT * 3 * C);
    bf16 *d_dout16 = up_bf16(dout, btc), *d_att_in16 = up_bf16(att_in, natt);
    attention_backward_set_cuda(d_dqkv, d_dout, d_qkv, d_att_in, B, T, C, NH, 0);
    float *want = down_f32(d_dqkv, BT * 3 * C), *got[2];
    px_cuda_ops_set_math(PX_CUDA_MATH_BF16);
    for (int run = 0; run < 2; run++) {
        bf16 *d_dqkv16 = nan_bf16(BT * 3 * C);
        attention_backward_set_cuda(d_dqkv16, d_dout16, d_qkv16, d_att_in16, B, T, C, NH, 0);
        got[run] = down_bf16(d_dqkv16, BT * 3 * C);
    }
    px_cuda_ops_set_math(PX_CUDA_MATH_FP32);
    gt_close(tag("attention_backward_set bf16 dqkv hs=%d" SHAPE_FMT, hs, SHAPE(s)), got[0], want, BT * 3 * C, TOL_ATT,
             0);
    gt_same(tag("attention_backward_set bf16 rerun dqkv" SHAPE_FMT, SHAPE(s)), got[1], got[0], BT * 3 * C);

    /* The FP32 form overwrites what attention_backward_cuda adds to zeros:
     * equal values (tolerance 0; +0 and -0 alike). */
    float *d_acc = up_f32(keep((float *)calloc(BT * 3 * C, sizeof(float))), BT * 3 * C);
    attention_backward_cuda(d_acc, d_dout, d_qkv, d_att_in, B, T, C, NH, 0);
    gt_close(tag("attention_backward_set FP32 = backward from 0" SHAPE_FMT, SHAPE(s)), want,
             down_f32(d_acc, BT * 3 * C), BT * 3 * C, 0, 0);
    release_all();
}

/* ---- the fused attention ---- */

static void test_flash(const shape_t *s) {
    int B = s->B, T = s->T, C = s->C, NH = s->NH, hs = C / NH;
    if (!flash_attention_supported(hs)) {
        printf("skip flash_attention hs=%d" SHAPE_FMT ": not supported on this GPU (sm_80 and newer)\n", hs, SHAPE(s));
        return;
    }
    size_t BT = (size_t)B * T, btc = BT * C, nq = BT * 3 * C, nl = (size_t)B * NH * T;
    float *qkv = random_bf16(nq, 1.5f);
    float *d_qkv = up_f32(qkv, nq), *d_out = nan_f32(btc), *d_lse = nan_f32(nl), *d_lse16 = nan_f32(nl);
    bf16 *d_qkv16 = up_bf16(qkv, nq), *d_out16 = nan_bf16(btc);
    flash_attention_forward_cuda(d_out, d_lse, d_qkv, B, T, C, NH, 0);
    px_cuda_ops_set_math(PX_CUDA_MATH_BF16);
    flash_attention_forward_cuda(d_out16, d_lse16, d_qkv16, B, T, C, NH, 0);
    px_cuda_ops_set_math(PX_CUDA_MATH_FP32);
    float *out = down_f32(d_out, btc), *out16 = down_bf16(d_out16, btc);
    gt_close(tag("flash_attention_forward bf16 out hs=%d" SHAPE_FMT, hs, SHAPE(s)), out16, out, btc, TOL_R1, 0);
    same_rounded(tag("flash_attention_forward bf16 out = FP32's rounded hs=%d" SHAPE_FMT, hs, SHAPE(s)), out16, out,
                 btc);
    gt_same(tag("flash_attention_forward bf16 lse hs=%d" SHAPE_FMT, hs, SHAPE(s)), down_f32(d_lse16, nl),
            down_f32(d_lse, nl), nl);

    /* Backward from the bf16 forward's out and lse on both sides. */
    float *dout = random_bf16(btc, 1.0f), *d_dqkv = nan_f32(nq);
    flash_attention_backward_set_cuda(d_dqkv, up_f32(dout, btc), d_qkv, up_f32(out16, btc), d_lse16, B, T, C, NH, 0);
    float *want = down_f32(d_dqkv, nq), *got[2];
    bf16 *d_dout16 = up_bf16(dout, btc);
    px_cuda_ops_set_math(PX_CUDA_MATH_BF16);
    for (int run = 0; run < 2; run++) {
        bf16 *d_dqkv16 = nan_bf16(nq);
        flash_attention_backward_set_cuda(d_dqkv16, d_dout16, d_qkv16, d_out16, d_lse16, B, T, C, NH, 0);
        got[run] = down_bf16(d_dqkv16, nq);
    }
    px_cuda_ops_set_math(PX_CUDA_MATH_FP32);
    gt_close(tag("flash_attention_backward_set bf16 dqkv hs=%d" SHAPE_FMT, hs, SHAPE(s)), got[0], want, nq, TOL_R1, 0);
    same_rounded(tag("flash_attention_backward_set bf16 = FP32's rounded hs=%d" SHAPE_FMT, hs, SHAPE(s)), got[0],
                 want, nq);
    gt_same(tag("flash_attention_backward_set bf16 rerun hs=%d" SHAPE_FMT, hs, SHAPE(s)), got[1], got[0], nq);
    release_all();
}

/* ---- GELU ---- */

static void test_gelu(size_t N) {
    float *x = random_bf16(N, 6.0f), *d = random_bf16(N, 1.0f);
    float *d_x = up_f32(x, N), *d_y = nan_f32(N), *d_d = up_f32(d, N);
    bf16 *d_x16 = up_bf16(x, N), *d_y16 = nan_bf16(N), *d_d16 = up_bf16(d, N);
    gelu_forward_cuda(d_y, d_x, N, 0);
    gelu_backward_inplace_cuda(d_d, d_x, N, 0);
    px_cuda_ops_set_math(PX_CUDA_MATH_BF16);
    gelu_forward_cuda(d_y16, d_x16, N, 0);
    gelu_backward_inplace_cuda(d_d16, d_x16, N, 0);
    px_cuda_ops_set_math(PX_CUDA_MATH_FP32);
    float *y = down_f32(d_y, N), *y16 = down_bf16(d_y16, N), *g = down_f32(d_d, N), *g16 = down_bf16(d_d16, N);
    gt_close(tag("gelu_forward bf16 N=%zu", N), y16, y, N, TOL_R1, 0);
    same_rounded(tag("gelu_forward bf16 = FP32's rounded N=%zu", N), y16, y, N);
    gt_close(tag("gelu_backward_inplace bf16 N=%zu", N), g16, g, N, TOL_R1, 0);
    same_rounded(tag("gelu_backward_inplace bf16 = FP32's rounded N=%zu", N), g16, g, N);
    release_all();
}

/* ---- the fused classifier ---- */

static void test_crossentropy(const shape_t *s) {
    int B = s->B, T = s->T, V = s->V, Vp = s->Vp;
    size_t BT = (size_t)B * T, n = BT * Vp;
    float *logits = random_bf16(n, 4.0f);
    for (size_t r = 0; r < BT; r++) /* the padding columns: garbage, never read */
        for (int c = V; c < Vp; c++) logits[r * Vp + c] = round_bf16(1e30f);
    int *targets = keep(gt_tokens(BT, V));
    targets[0] = V - 1, targets[BT - 1] = 0;
    int *d_targets = (int *)gt_up(targets, BT, sizeof(int));
    g_dev.push_back(d_targets);
    float dloss = 1.0f / (float)BT;
    float *d_logits = up_f32(logits, n), *d_losses = nan_f32(BT), *d_lse = nan_f32(BT);
    crossentropy_fused_cuda(d_losses, d_lse, d_logits, d_targets, dloss, B, T, V, Vp, 0);
    float *grad = down_f32(d_logits, n), *got[2];
    float *d_losses16 = nan_f32(BT), *d_lse16 = nan_f32(BT);
    px_cuda_ops_set_math(PX_CUDA_MATH_BF16);
    for (int run = 0; run < 2; run++) {
        bf16 *d_logits16 = up_bf16(logits, n);
        crossentropy_fused_cuda(d_losses16, d_lse16, d_logits16, d_targets, dloss, B, T, V, Vp, 0);
        got[run] = down_bf16(d_logits16, n);
    }
    px_cuda_ops_set_math(PX_CUDA_MATH_FP32);
    gt_same(tag("crossentropy_fused bf16 losses V=%d Vp=%d" SHAPE_FMT, V, Vp, SHAPE(s)), down_f32(d_losses16, BT),
            down_f32(d_losses, BT), BT);
    gt_same(tag("crossentropy_fused bf16 lse V=%d Vp=%d" SHAPE_FMT, V, Vp, SHAPE(s)), down_f32(d_lse16, BT),
            down_f32(d_lse, BT), BT);
    gt_close(tag("crossentropy_fused bf16 dlogits V=%d Vp=%d" SHAPE_FMT, V, Vp, SHAPE(s)), got[0], grad, n, TOL_R1, 0);
    same_rounded(tag("crossentropy_fused bf16 dlogits = FP32's rounded" SHAPE_FMT, SHAPE(s)), got[0], grad, n);
    size_t pad = 0;
    for (size_t r = 0; r < BT; r++)
        for (int c = V; c < Vp; c++) pad += got[0][r * Vp + c] != 0.0f;
    none_broken(tag("crossentropy_fused bf16 padding columns are 0" SHAPE_FMT, SHAPE(s)), pad);
    gt_same(tag("crossentropy_fused bf16 rerun dlogits" SHAPE_FMT, SHAPE(s)), got[1], got[0], n);
    release_all();
}

int main(void) {
    gt_require_gpu("test_gpu_ops_bf16");
    gt_seed(20240611);
    px_cuda_ops_init();
    test_convert();
    for (size_t i = 0; i < sizeof g_shapes / sizeof g_shapes[0]; i++) {
        test_layernorm(&g_shapes[i]);
        test_matmul(&g_shapes[i]);
        test_attention(&g_shapes[i]);
        test_crossentropy(&g_shapes[i]);
    }
    for (size_t i = 0; i < sizeof g_flash / sizeof g_flash[0]; i++) test_flash(&g_flash[i]);
    test_gelu(100003);
    test_gelu(1);
    px_cuda_ops_shutdown();
    return gt_finish("test_gpu_ops_bf16");
}
