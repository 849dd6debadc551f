/* LayerNorm on the GPU (layernorm_forward/backward of ops.h), eps 1e-5 and the
 * biased variance, as PyTorch and the CPU op.
 *
 * Rows (B*T of them) are independent: one warp per row, reductions by shuffle
 * trees. The mean and variance are two passes over the row (mean first, then
 * squared deviations), as on the CPU, rather than the one-pass E[x^2]-E[x]^2,
 * which cancels badly when the mean is large.
 *
 * dweight and dbias are sums over all rows per channel. A 32x32 block takes 32
 * channels; its 32 rows of threads stride over the rows, then a fixed shared-
 * memory tree adds the 32 partial sums. Fixed order, no atomics. */
#include "cuda_common.cuh"

#define LN_EPS 1e-5f
#define ROWS_PER_BLOCK (PX_THREADS / 32)

__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                                         const float *weight, const float *bias, int N, int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return; /* whole warps leave together: the shuffles stay full */
    const float *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += x[c];
    float mu = px_warp_sum(s) / (float)C;
    float q = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = x[c] - mu;
        q += d * d;
    }
    float var = px_warp_sum(q) / (float)C;
    float rs = 1.0f / sqrtf(var + LN_EPS);
    float *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) o[c] = (x[c] - mu) * rs * weight[c] + bias[c];
    if (lane == 0) {
        mean[row] = mu;
        rstd[row] = rs;
    }
}

/* dinp += (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd, with
 * dnorm = weight * dout and norm = (x - mean) * rstd. */
__global__ void layernorm_backward_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                               const float *weight, const float *mean,
                                               const float *rstd, int N, int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    const float *d = dout + (size_t)row * C;
    float mu = mean[row], rs = rstd[row];
    float a = 0.0f, b = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float dn = weight[c] * d[c];
        a += dn;
        b += dn * ((x[c] - mu) * rs);
    }
    float dn_mean = px_warp_sum(a) / (float)C;
    float dnn_mean = px_warp_sum(b) / (float)C;
    float *di = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float norm = (x[c] - mu) * rs;
        di[c] += (weight[c] * d[c] - dn_mean - norm * dnn_mean) * rs;
    }
}

/* block (32,32), grid ceil(C/32): dweight[c] += sum_rows dout * norm,
 * dbias[c] += sum_rows dout. */
__global__ void layernorm_backward_params_kernel(float *dweight, float *dbias, const float *dout,
                                                 const float *inp, const float *mean,
                                                 const float *rstd, int N, int C) {
    __shared__ float tile[32][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float aw = 0.0f, ab = 0.0f;
    if (c < C)
        for (int r = threadIdx.y; r < N; r += 32) {
            size_t i = (size_t)r * C + c;
            aw += dout[i] * ((inp[i] - mean[r]) * rstd[r]);
            ab += dout[i];
        }
    float sw = px_column_tree(aw, tile);
    __syncthreads(); /* everyone has read tile[0] before it is reused */
    float sb = px_column_tree(ab, tile);
    if (threadIdx.y == 0 && c < C) {
        dweight[c] += sw;
        dbias[c] += sb;
    }
}

extern "C" void layernorm_forward_cuda(float *out, float *mean, float *rstd, const float *inp,
                                       const float *weight, const float *bias, int B, int T, int C,
                                       cudaStream_t stream) {
    int N = B * T;
    unsigned grid = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    layernorm_forward_kernel<<<grid, PX_THREADS, 0, stream>>>(out, mean, rstd, inp, weight, bias,
                                                               N, C);
    PX_CUDA_LAUNCH_CHECK();
}

extern "C" void layernorm_backward_cuda(float *dinp, float *dweight, float *dbias,
                                        const float *dout, const float *inp, const float *weight,
                                        const float *mean, const float *rstd, int B, int T, int C,
                                        cudaStream_t stream) {
    int N = B * T;
    unsigned grid = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    layernorm_backward_dinp_kernel<<<grid, PX_THREADS, 0, stream>>>(dinp, dout, inp, weight, mean,
                                                                     rstd, N, C);
    PX_CUDA_LAUNCH_CHECK();
    layernorm_backward_params_kernel<<<(unsigned)((C + 31) / 32), dim3(32, 32), 0, stream>>>(
        dweight, dbias, dout, inp, mean, rstd, N, C);
    PX_CUDA_LAUNCH_CHECK();
}
