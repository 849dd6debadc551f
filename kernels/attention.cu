/* Causal multi-head self-attention on the GPU (attention_forward/backward of
 * ops.h), the llm.c way: permute q, k, v into head-major (B,NH,T,hs) arrays,
 * do the two products per (batch, head) with strided-batched cuBLAS GEMMs, and
 * run the causal softmax (and its backward) as a kernel, one warp per row.
 * Simple and correct rather than fused: the (B,NH,T,T) score matrix is
 * materialized, as ops.h's `att` argument requires anyway. The products
 * follow the math mode (px_cuda_ops_set_math); the fused kernels of
 * flash_attention.cu serve the bf16 mode where the head size allows.
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
 * backward 7 (B,T,C) arrays and one (B,NH,T,T). */
#include <math.h>

#include "cuda_common.cuh"
#include "ops_math.h"

/* q, k, v (B,NH,T,hs) from qkv (B,T,3C). One thread per (b,h,t,d). */
__global__ void permute_qkv_kernel(float *q, float *k, float *v, const float *qkv, int B, int T,
                                   int NH, int hs) {
    size_t n = (size_t)B * NH * T * hs;
    int C = NH * hs;
    PX_GRID_STRIDE(i, n) {
        int d = (int)(i % hs);
        size_t r = i / hs;
        int t = (int)(r % T);
        r /= T;
        int h = (int)(r % NH);
        int b = (int)(r / NH);
        size_t src = ((size_t)b * T + t) * 3 * C + (size_t)h * hs + d;
        q[i] = qkv[src];
        k[i] = qkv[src + C];
        v[i] = qkv[src + 2 * C];
    }
}

/* out (B,T,C) = y (B,NH,T,hs) with heads concatenated. */
__global__ void unpermute_kernel(float *out, const float *y, int B, int T, int NH, int hs) {
    size_t n = (size_t)B * NH * T * hs;
    int C = NH * hs;
    PX_GRID_STRIDE(i, n) {
        int d = (int)(i % hs);
        size_t r = i / hs;
        int t = (int)(r % T);
        r /= T;
        int h = (int)(r % NH);
        int b = (int)(r / NH);
        out[((size_t)b * T + t) * C + (size_t)h * hs + d] = y[i];
    }
}

/* dy (B,NH,T,hs) = dout (B,T,C) in head-major order (the unpermute's backward). */
__global__ void unpermute_backward_kernel(float *dy, const float *dout, int B, int T, int NH,
                                          int hs) {
    size_t n = (size_t)B * NH * T * hs;
    int C = NH * hs;
    PX_GRID_STRIDE(i, n) {
        int d = (int)(i % hs);
        size_t r = i / hs;
        int t = (int)(r % T);
        r /= T;
        int h = (int)(r % NH);
        int b = (int)(r / NH);
        dy[i] = dout[((size_t)b * T + t) * C + (size_t)h * hs + d];
    }
}

/* dqkv (B,T,3C) += dq, dk, dv (B,NH,T,hs) (the permute's backward). */
__global__ void permute_qkv_backward_kernel(float *dqkv, const float *dq, const float *dk,
                                            const float *dv, int B, int T, int NH, int hs) {
    size_t n = (size_t)B * NH * T * hs;
    int C = NH * hs;
    PX_GRID_STRIDE(i, n) {
        int d = (int)(i % hs);
        size_t r = i / hs;
        int t = (int)(r % T);
        r /= T;
        int h = (int)(r % NH);
        int b = (int)(r / NH);
        size_t dst = ((size_t)b * T + t) * 3 * C + (size_t)h * hs + d;
        dqkv[dst] += dq[i];
        dqkv[dst + C] += dk[i];
        dqkv[dst + 2 * C] += dv[i];
    }
}

#define ROWS_PER_BLOCK (PX_THREADS / 32)

/* In place on att (B*NH*T rows of T): row t holds scaled scores for keys
 * 0..t; it becomes softmax over them, and 0 for keys > t. One warp per row.
 * Same arithmetic as the CPU: x - max through px_expf, then times 1/sum. */
__global__ void causal_softmax_kernel(float *att, int rows, int T) {
    int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    int t = row % T;
    float *x = att + (size_t)row * T;
    float mx = -INFINITY;
    for (int j = lane; j <= t; j += 32) mx = fmaxf(mx, x[j]);
    mx = px_warp_max(mx);
    float s = 0.0f;
    for (int j = lane; j <= t; j += 32) {
        float e = px_expf(x[j] - mx);
        x[j] = e;
        s += e;
    }
    float inv = 1.0f / px_warp_sum(s);
    for (int j = lane; j < T; j += 32) x[j] = j <= t ? x[j] * inv : 0.0f;
}

/* masked (rows,T) = att with entries above the diagonal set to 0. */
__global__ void causal_mask_copy_kernel(float *masked, const float *att, size_t rows, int T) {
    size_t n = rows * (size_t)T;
    PX_GRID_STRIDE(i, n) {
        int j = (int)(i % T);
        int t = (int)((i / T) % T);
        masked[i] = j <= t ? att[i] : 0.0f;
    }
}

/* In place on datt: dscore = att * (datt - sum_{j<=t} att*datt) for keys <= t,
 * 0 above the diagonal. Reads att only at keys <= t. One warp per row. */
__global__ void causal_softmax_backward_kernel(float *datt, const float *att, int rows, int T) {
    int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    int t = row % T;
    const float *p = att + (size_t)row * T;
    float *d = datt + (size_t)row * T;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += 32) dot += p[j] * d[j];
    dot = px_warp_sum(dot);
    for (int j = lane; j < T; j += 32) d[j] = j <= t ? p[j] * (d[j] - dot) : 0.0f;
}

static void gemm_batched(cudaStream_t stream, cublasOperation_t ta, cublasOperation_t tb, int m,
                          int n, int k, float alpha, const float *A, int lda, long long sa,
                          const float *Bm, int ldb, long long sb, float *Cm, int ldc, long long sc,
                          int batch) {
    px_cuda_gemm_batched(stream, ta, tb, m, n, k, alpha, A, lda, sa, Bm, ldb, sb, 0.0f, Cm, ldc, sc, batch);
}

extern "C" void attention_forward_cuda(float *out, float *att, const float *qkv, int B, int T,
                                       int C, int NH, cudaStream_t stream) {
    int hs = C / NH, batch = B * NH;
    size_t btc = (size_t)B * T * C;
    long long sh = (long long)T * hs, stt = (long long)T * T;
    float *q = (float *)px_cuda_scratch(4 * btc * sizeof(float));
    float *k = q + btc, *v = k + btc, *y = v + btc;
    float scale = 1.0f / sqrtf((float)hs);

    permute_qkv_kernel<<<px_grid(btc), PX_THREADS, 0, stream>>>(q, k, v, qkv, B, T, NH, hs);
    PX_CUDA_LAUNCH_CHECK();
    gemm_batched(stream, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, scale, k, hs, sh, q, hs, sh, att, T,
                  stt, batch);
    int rows = batch * T;
    causal_softmax_kernel<<<(unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK), PX_THREADS, 0,
                            stream>>>(att, rows, T);
    PX_CUDA_LAUNCH_CHECK();
    gemm_batched(stream, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, v, hs, sh, att, T, stt, y, hs,
                  sh, batch);
    unpermute_kernel<<<px_grid(btc), PX_THREADS, 0, stream>>>(out, y, B, T, NH, hs);
    PX_CUDA_LAUNCH_CHECK();
}

extern "C" void attention_backward_cuda(float *dqkv, const float *dout, const float *qkv,
                                        const float *att, int B, int T, int C, int NH,
                                        cudaStream_t stream) {
    int hs = C / NH, batch = B * NH, rows = batch * T;
    size_t btc = (size_t)B * T * C, btt = (size_t)rows * T;
    long long sh = (long long)T * hs, stt = (long long)T * T;
    float *q = (float *)px_cuda_scratch((7 * btc + btt) * sizeof(float));
    float *k = q + btc, *v = k + btc, *dy = v + btc;
    float *dq = dy + btc, *dk = dq + btc, *dv = dk + btc, *s = dv + btc;
    float scale = 1.0f / sqrtf((float)hs);
    unsigned row_grid = (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);

    permute_qkv_kernel<<<px_grid(btc), PX_THREADS, 0, stream>>>(q, k, v, qkv, B, T, NH, hs);
    PX_CUDA_LAUNCH_CHECK();
    unpermute_backward_kernel<<<px_grid(btc), PX_THREADS, 0, stream>>>(dy, dout, B, T, NH, hs);
    PX_CUDA_LAUNCH_CHECK();
    /* dV = tril(att)^T dY */
    causal_mask_copy_kernel<<<px_grid(btt), PX_THREADS, 0, stream>>>(s, att, (size_t)rows, T);
    PX_CUDA_LAUNCH_CHECK();
    gemm_batched(stream, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, dy, hs, sh, s, T, stt, dv, hs,
                  sh, batch);
    /* datt = dY V^T, then the softmax backward in place */
    gemm_batched(stream, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, v, hs, sh, dy, hs, sh, s, T,
                  stt, batch);
    causal_softmax_backward_kernel<<<row_grid, PX_THREADS, 0, stream>>>(s, att, rows, T);
    PX_CUDA_LAUNCH_CHECK();
    /* dQ = scale dS K, dK = scale dS^T Q */
    gemm_batched(stream, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, scale, k, hs, sh, s, T, stt, dq, hs,
                  sh, batch);
    gemm_batched(stream, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, scale, q, hs, sh, s, T, stt, dk, hs,
                  sh, batch);
    permute_qkv_backward_kernel<<<px_grid(btc), PX_THREADS, 0, stream>>>(dqkv, dq, dk, dv, B, T,
                                                                         NH, hs);
    PX_CUDA_LAUNCH_CHECK();
}
