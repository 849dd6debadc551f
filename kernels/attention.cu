/* Causal multi-head self-attention on the GPU (attention_forward/backward of
 * ops.h), the llm.c way: permute q, k, v into head-major (B,NH,T,hs) arrays,
 * do the two products per (batch, head) with strided-batched cuBLAS GEMMs, and
 * run the causal softmax (and its backward) as a kernel, one warp per row.
 * Simple and correct rather than fused: the (B,NH,T,T) score matrix is
 * materialized, as ops.h's `att` argument requires anyway. The products
 * follow the math mode (px_cuda_ops_set_math); the fused kernels of
 * flash_attention.cu serve the bf16 mode where the head size allows.
 * Everything is a template over the storage X of qkv, att, the outputs and
 * the scratch: FP32 (the C ops), or bf16 (the C++ overloads, for the
 * model's bf16 activations: the products then run on bf16 operands with
 * FP32 accumulation, the softmax in FP32).
 *
 * Column-major bookkeeping, per (b,h), with Q, K, V, dY row-major (T,hs),
 * which cuBLAS reads as (hs,T); att row-major (T,T) is read as att^T:
 *   scores^T = K^T' Q      gemm(T,N, T,T,hs)     (scaled by 1/sqrt(hs) via alpha)
 *   Y        = att V       gemm(N,N, hs,T,T)
 *   dV       = att^T dY    gemm(N,T, hs,T,T)     with att masked to the lower triangle
 *   datt     = dY V^T      gemm(T,N, T,T,hs)
 *   dQ       = s dS K      gemm(N,N, hs,T,T)
 *   dK       = s dS^T Q    gemm(N,T, hs,T,T)
 *
 * ops.h says att entries above the diagonal are unspecified and never read.
 * The forward writes them as 0; the backward does not trust that and copies
 * att into scratch with the upper triangle zeroed before the dV product (the
 * only product that would read them), then reuses that scratch for datt.
 *
 * Scratch (library-owned, see cuda_common.cuh): forward 4 (B,T,C) arrays;
 * backward 7 (B,T,C) arrays and one (B,NH,T,T), all of X. */
#include <math.h>

#include "cuda_common.cuh"
#include "ops_math.h"

/* The (b,h,t,d) of head-major index i, and its column in a (B,T,C) row. */
__device__ inline size_t head_major_to_row(size_t i, int T, int NH, int hs, size_t row_width) {
    int d = (int)(i % hs);
    size_t r = i / hs;
    int t = (int)(r % T);
    r /= T;
    int h = (int)(r % NH);
    int b = (int)(r / NH);
    return ((size_t)b * T + t) * row_width + (size_t)h * hs + d;
}

/* q, k, v (B,NH,T,hs) from qkv (B,T,3C). One thread per (b,h,t,d). */
template <typename X>
__global__ void permute_qkv_kernel(X *q, X *k, X *v, const X *qkv, int B, int T, int NH, int hs) {
    size_t n = (size_t)B * NH * T * hs;
    int C = NH * hs;
    PX_GRID_STRIDE(i, n) {
        size_t src = head_major_to_row(i, T, NH, hs, 3 * (size_t)C);
        q[i] = qkv[src];
        k[i] = qkv[src + C];
        v[i] = qkv[src + 2 * C];
    }
}

/* out (B,T,C) = y (B,NH,T,hs) with heads concatenated. */
template <typename X>
__global__ void unpermute_kernel(X *out, const X *y, int B, int T, int NH, int hs) {
    size_t n = (size_t)B * NH * T * hs;
    PX_GRID_STRIDE(i, n) { out[head_major_to_row(i, T, NH, hs, (size_t)NH * hs)] = y[i]; }
}

/* dy (B,NH,T,hs) = dout (B,T,C) in head-major order (the unpermute's backward). */
template <typename X>
__global__ void unpermute_backward_kernel(X *dy, const X *dout, int B, int T, int NH, int hs) {
    size_t n = (size_t)B * NH * T * hs;
    PX_GRID_STRIDE(i, n) { dy[i] = dout[head_major_to_row(i, T, NH, hs, (size_t)NH * hs)]; }
}

/* dqkv (B,T,3C) += dq, dk, dv (B,NH,T,hs) (the permute's backward); = when
 * not accumulate. */
template <typename X>
__global__ void permute_qkv_backward_kernel(X *dqkv, const X *dq, const X *dk, const X *dv, int B, int T, int NH,
                                            int hs, int accumulate) {
    size_t n = (size_t)B * NH * T * hs;
    int C = NH * hs;
    PX_GRID_STRIDE(i, n) {
        size_t dst = head_major_to_row(i, T, NH, hs, 3 * (size_t)C);
        const X *src[3] = {dq, dk, dv};
        for (int j = 0; j < 3; j++) {
            X *o = &dqkv[dst + (size_t)j * C];
            px_st(o, accumulate ? px_ld(*o) + px_ld(src[j][i]) : px_ld(src[j][i]));
        }
    }
}

#define ROWS_PER_BLOCK (PX_THREADS / 32)

/* In place on att (B*NH*T rows of T): row t holds scaled scores for keys
 * 0..t; it becomes softmax over them, and 0 for keys > t. One warp per row.
 * Same arithmetic as the CPU: x - max through px_expf, then times 1/sum
 * (each exponential computed again for the write, so a bf16 row is rounded
 * once). */
template <typename X>
__global__ void causal_softmax_kernel(X *att, int rows, int T) {
    int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    int t = row % T;
    X *x = att + (size_t)row * T;
    float mx = -INFINITY;
    for (int j = lane; j <= t; j += 32) mx = fmaxf(mx, px_ld(x[j]));
    mx = px_warp_max(mx);
    float s = 0.0f;
    for (int j = lane; j <= t; j += 32) s += px_expf(px_ld(x[j]) - mx);
    float inv = 1.0f / px_warp_sum(s);
    for (int j = lane; j < T; j += 32) px_st(&x[j], j <= t ? px_expf(px_ld(x[j]) - mx) * inv : 0.0f);
}

/* masked (rows,T) = att with entries above the diagonal set to 0. */
template <typename X>
__global__ void causal_mask_copy_kernel(X *masked, const X *att, size_t rows, int T) {
    size_t n = rows * (size_t)T;
    PX_GRID_STRIDE(i, n) {
        int j = (int)(i % T);
        int t = (int)((i / T) % T);
        px_st(&masked[i], j <= t ? px_ld(att[i]) : 0.0f);
    }
}

/* In place on datt: dscore = att * (datt - sum_{j<=t} att*datt) for keys <= t,
 * 0 above the diagonal. Reads att only at keys <= t. One warp per row. */
template <typename X>
__global__ void causal_softmax_backward_kernel(X *datt, const X *att, int rows, int T) {
    int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    int t = row % T;
    const X *p = att + (size_t)row * T;
    X *d = datt + (size_t)row * T;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += 32) dot += px_ld(p[j]) * px_ld(d[j]);
    dot = px_warp_sum(dot);
    for (int j = lane; j < T; j += 32) px_st(&d[j], j <= t ? px_ld(p[j]) * (px_ld(d[j]) - dot) : 0.0f);
}

template <typename X>
static void gemm_batched(cudaStream_t stream, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                         float alpha, const X *A, int lda, long long sa, const X *Bm, int ldb, long long sb, X *Cm,
                         int ldc, long long sc, int batch) {
    px_cuda_gemm_batched_ex(stream, ta, tb, m, n, k, alpha, A, lda, sa, Bm, ldb, sb, px_data_type<X>(), 0.0f, Cm, ldc,
                            sc, batch);
}

template <typename X>
static void forward(X *out, X *att, const X *qkv, int B, int T, int C, int NH, cudaStream_t stream) {
    int hs = C / NH, batch = B * NH;
    size_t btc = (size_t)B * T * C;
    long long sh = (long long)T * hs, stt = (long long)T * T;
    X *q = (X *)px_cuda_scratch(4 * btc * sizeof(X));
    X *k = q + btc, *v = k + btc, *y = v + btc;
    float scale = 1.0f / sqrtf((float)hs);

    permute_qkv_kernel<X><<<px_grid(btc), PX_THREADS, 0, stream>>>(q, k, v, qkv, B, T, NH, hs);
    PX_CUDA_LAUNCH_CHECK();
    gemm_batched(stream, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, scale, k, hs, sh, q, hs, sh, att, T, stt, batch);
    int rows = batch * T;
    causal_softmax_kernel<X><<<(unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK), PX_THREADS, 0, stream>>>(
        att, rows, T);
    PX_CUDA_LAUNCH_CHECK();
    gemm_batched(stream, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, v, hs, sh, (const X *)att, T, stt, y, hs, sh,
                 batch);
    unpermute_kernel<X><<<px_grid(btc), PX_THREADS, 0, stream>>>(out, y, B, T, NH, hs);
    PX_CUDA_LAUNCH_CHECK();
}

template <typename X>
static void backward(X *dqkv, const X *dout, const X *qkv, const X *att, int B, int T, int C, int NH, int accumulate,
                     cudaStream_t stream) {
    int hs = C / NH, batch = B * NH, rows = batch * T;
    size_t btc = (size_t)B * T * C, btt = (size_t)rows * T;
    long long sh = (long long)T * hs, stt = (long long)T * T;
    X *q = (X *)px_cuda_scratch((7 * btc + btt) * sizeof(X));
    X *k = q + btc, *v = k + btc, *dy = v + btc;
    X *dq = dy + btc, *dk = dq + btc, *dv = dk + btc, *s = dv + btc;
    float scale = 1.0f / sqrtf((float)hs);
    unsigned row_grid = (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);

    permute_qkv_kernel<X><<<px_grid(btc), PX_THREADS, 0, stream>>>(q, k, v, qkv, B, T, NH, hs);
    PX_CUDA_LAUNCH_CHECK();
    unpermute_backward_kernel<X><<<px_grid(btc), PX_THREADS, 0, stream>>>(dy, dout, B, T, NH, hs);
    PX_CUDA_LAUNCH_CHECK();
    /* dV = tril(att)^T dY */
    causal_mask_copy_kernel<X><<<px_grid(btt), PX_THREADS, 0, stream>>>(s, att, (size_t)rows, T);
    PX_CUDA_LAUNCH_CHECK();
    gemm_batched(stream, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, (const X *)dy, hs, sh, (const X *)s, T, stt, dv,
                 hs, sh, batch);
    /* datt = dY V^T, then the softmax backward in place */
    gemm_batched(stream, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, (const X *)v, hs, sh, (const X *)dy, hs, sh, s, T,
                 stt, batch);
    causal_softmax_backward_kernel<X><<<row_grid, PX_THREADS, 0, stream>>>(s, att, rows, T);
    PX_CUDA_LAUNCH_CHECK();
    /* dQ = scale dS K, dK = scale dS^T Q */
    gemm_batched(stream, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, scale, (const X *)k, hs, sh, (const X *)s, T, stt, dq,
                 hs, sh, batch);
    gemm_batched(stream, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, scale, (const X *)q, hs, sh, (const X *)s, T, stt, dk,
                 hs, sh, batch);
    permute_qkv_backward_kernel<X><<<px_grid(btc), PX_THREADS, 0, stream>>>(dqkv, dq, dk, dv, B, T, NH, hs,
                                                                            accumulate);
    PX_CUDA_LAUNCH_CHECK();
}

extern "C" void attention_forward_cuda(float *out, float *att, const float *qkv, int B, int T, int C, int NH,
                                       cudaStream_t stream) {
    forward(out, att, qkv, B, T, C, NH, stream);
}
void attention_forward_cuda(bf16 *out, bf16 *att, const bf16 *qkv, int B, int T, int C, int NH, cudaStream_t stream) {
    forward(out, att, qkv, B, T, C, NH, stream);
}

extern "C" void attention_backward_cuda(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                                        int T, int C, int NH, cudaStream_t stream) {
    backward(dqkv, dout, qkv, att, B, T, C, NH, 1, stream);
}
void attention_backward_set_cuda(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const bf16 *att, int B, int T, int C,
                                 int NH, cudaStream_t stream) {
    backward(dqkv, dout, qkv, att, B, T, C, NH, 0, stream);
}
void attention_backward_set_cuda(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T,
                                 int C, int NH, cudaStream_t stream) {
    backward(dqkv, dout, qkv, att, B, T, C, NH, 0, stream);
}
