/* Fused softmax + cross-entropy on the GPU (crossentropy_softmax_* of ops.h),
 * over the real vocabulary V of each (B,T,Vp) logits row; the padding columns
 * take no part in the forward and get gradient 0.
 *
 * Forward: one block per row (a row is up to ~50k logits): block max, then the
 * block sum of px_expf(x - max), both by fixed trees; lse = max + log(sum).
 * Backward: element-wise, (px_expf(x - lse) - onehot) * dloss, written over
 * dlogits; each element reads only its own logit first, so dlogits may be the
 * logits buffer itself (in place), as the model does.
 * Fused (crossentropy_fused_cuda, the bf16 math's classifier): one block
 * per row finds the row's maximum and its sum of exponentials in one read
 * (each thread keeps a running maximum and rescales its sum when the
 * maximum grows; the block then combines them: the maximum by a fixed tree,
 * the sums rescaled to it by another), then writes the backward's gradient
 * over the row: two passes over the logits where forward then backward
 * make four. Its exponentials are the GPU's fast ones (__expf), not the
 * CPU-matching px_expf: the fused path is bf16's, which is not compared
 * bitwise with the CPU. */
#include <math.h>

#include "cuda_common.cuh"
#include "ops_math.h"

__global__ void crossentropy_forward_kernel(float *losses, float *lse, const float *logits,
                                            const int *targets, int V, int Vp) {
    __shared__ float shared[PX_THREADS / 32];
    size_t row = blockIdx.x;
    const float *x = logits + row * (size_t)Vp;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < V; i += PX_THREADS) mx = fmaxf(mx, x[i]);
    mx = px_block_max(mx, shared);
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += PX_THREADS) s += px_expf(x[i] - mx);
    s = px_block_sum(s, shared);
    if (threadIdx.x == 0) {
        float l = mx + logf(s);
        lse[row] = l;
        losses[row] = l - x[targets[row]];
    }
}

/* The forward's losses and lse in one read of the row (the online
 * softmax), then logits[row] = its gradient (dloss). X: the logits'
 * storage (FP32 or bf16); the arithmetic is FP32. */
template <typename X>
__global__ void crossentropy_fused_kernel(float *losses, float *lse, X *logits, const int *targets, float dloss,
                                          int V, int Vp) {
    __shared__ float shared[PX_THREADS / 32];
    size_t row = blockIdx.x;
    X *x = logits + row * (size_t)Vp;
    int target = targets[row];
    float xt = px_ld(x[target]); /* read before any thread of the block writes the row */
    float m = -INFINITY, s = 0.0f; /* this thread's running maximum, and its sum of exp(x - m) */
    for (int i = threadIdx.x; i < V; i += PX_THREADS) {
        float v = px_ld(x[i]);
        if (v > m) {
            s = s * __expf(m - v) + 1.0f; /* m = -inf at first: s is 0 then */
            m = v;
        } else if (m != -INFINITY) { /* (-inf - -inf is no number) */
            s += __expf(v - m);
        }
    }
    float mx = px_block_max(m, shared);
    s = px_block_sum(m == -INFINITY ? 0.0f : s * __expf(m - mx), shared); /* every thread past its reads of x */
    float l = mx + logf(s);
    if (threadIdx.x == 0) {
        lse[row] = l;
        losses[row] = l - xt;
    }
    for (int i = threadIdx.x; i < Vp; i += PX_THREADS) {
        float d = 0.0f;
        if (i < V) {
            d = __expf(px_ld(x[i]) - l) * dloss;
            if (i == target) d -= dloss;
        }
        px_st(&x[i], d);
    }
}

__global__ void crossentropy_backward_kernel(float *dlogits, const float *logits, const float *lse,
                                             const int *targets, float dloss, int BT, int V,
                                             int Vp) {
    size_t n = (size_t)BT * Vp;
    PX_GRID_STRIDE(i, n) {
        size_t row = i / (size_t)Vp;
        int col = (int)(i % (size_t)Vp);
        float d = 0.0f;
        if (col < V) {
            d = px_expf(logits[i] - lse[row]) * dloss;
            if (col == targets[row]) d -= dloss;
        }
        dlogits[i] = d;
    }
}

extern "C" void crossentropy_softmax_forward_cuda(float *losses, float *lse, const float *logits,
                                                  const int *targets, int B, int T, int V, int Vp,
                                                  cudaStream_t stream) {
    crossentropy_forward_kernel<<<(unsigned)(B * T), PX_THREADS, 0, stream>>>(losses, lse, logits,
                                                                             targets, V, Vp);
    PX_CUDA_LAUNCH_CHECK();
}

extern "C" void crossentropy_softmax_backward_cuda(float *dlogits, const float *logits,
                                                   const float *lse, const int *targets,
                                                   float dloss, int B, int T, int V, int Vp,
                                                   cudaStream_t stream) {
    size_t n = (size_t)B * T * Vp;
    crossentropy_backward_kernel<<<px_grid(n), PX_THREADS, 0, stream>>>(dlogits, logits, lse,
                                                                        targets, dloss, B * T, V,
                                                                        Vp);
    PX_CUDA_LAUNCH_CHECK();
}

extern "C" void crossentropy_fused_cuda(float *losses, float *lse, float *logits, const int *targets, float dloss,
                                        int B, int T, int V, int Vp, cudaStream_t stream) {
    crossentropy_fused_kernel<float><<<(unsigned)(B * T), PX_THREADS, 0, stream>>>(losses, lse, logits, targets, dloss,
                                                                                   V, Vp);
    PX_CUDA_LAUNCH_CHECK();
}

void crossentropy_fused_cuda(float *losses, float *lse, bf16 *logits, const int *targets, float dloss, int B, int T,
                             int V, int Vp, cudaStream_t stream) {
    crossentropy_fused_kernel<bf16><<<(unsigned)(B * T), PX_THREADS, 0, stream>>>(losses, lse, logits, targets, dloss,
                                                                                  V, Vp);
    PX_CUDA_LAUNCH_CHECK();
}
