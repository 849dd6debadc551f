/* LayerNorm on the GPU (layernorm_forward/backward of ops.h), eps 1e-5 and the
 * biased variance, as PyTorch and the CPU op.
 *
 * Rows (B*T of them) are independent: one warp per row, reductions by shuffle
 * trees. The mean and variance are two passes over the row (mean first, then
 * squared deviations), as on the CPU, rather than the one-pass E[x^2]-E[x]^2,
 * which cancels badly when the mean is large.
 *
 * The backward is one pass over the rows: a warp takes LN_BWD_ROWS
 * consecutive rows, adds each row's input gradient, and sums the rows'
 * dweight and dbias terms in order, each lane its own channels, into a
 * partial row of its block; the column sums of the partial rows (a fixed
 * tree, px_cuda_colsum_add) then add into dweight and dbias. dout and the
 * input are read once (a separate pass for dweight and dbias read them
 * again). Fixed order, no atomics. */
#include "cuda_common.cuh"

#define LN_EPS 1e-5f
#define ROWS_PER_BLOCK (PX_THREADS / 32)

template <typename O>
__global__ void layernorm_forward_kernel(O *out, float *mean, float *rstd, const float *inp,
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
    O *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) px_st(&o[c], (x[c] - mu) * rs * weight[c] + bias[c]);
    if (lane == 0) {
        mean[row] = mu;
        rstd[row] = rs;
    }
}

/* As layernorm_forward_kernel, of the row res = a + b, which it also
 * writes: the residual add and the LayerNorm after it in one pass. The same
 * arithmetic in the same order as residual_forward then layernorm_forward,
 * so the results are bitwise theirs. */
template <typename O>
__global__ void residual_layernorm_forward_kernel(float *res, O *out, float *mean, float *rstd, const float *a,
                                                  const float *b, const float *weight, const float *bias, int N,
                                                  int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    size_t off = (size_t)row * C;
    float *x = res + off;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float v = a[off + c] + b[off + c];
        x[c] = v;
        s += v;
    }
    float mu = px_warp_sum(s) / (float)C;
    float q = 0.0f;
    for (int c = lane; c < C; c += 32) { /* each lane reads back only what it wrote */
        float d = x[c] - mu;
        q += d * d;
    }
    float var = px_warp_sum(q) / (float)C;
    float rs = 1.0f / sqrtf(var + LN_EPS);
    O *o = out + off;
    for (int c = lane; c < C; c += 32) px_st(&o[c], (x[c] - mu) * rs * weight[c] + bias[c]);
    if (lane == 0) {
        mean[row] = mu;
        rstd[row] = rs;
    }
}

#define LN_BWD_ROWS 8 /* rows per warp in the backward: N/8 partial rows */

/* One warp a block, rows LN_BWD_ROWS * blockIdx.x on: for each row,
 * dinp += (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd with
 * dnorm = weight * dout and norm = (x - mean) * rstd; and the block's row of
 * part_w (sum of dout * norm) and part_b (sum of dout) over its rows; with
 * dinp_bf16, the updated dinp rounded to bf16 there too.
 * Dynamic shared memory: 2C floats, each lane owning channels lane + 32k. */
__global__ void layernorm_backward_kernel(float *dinp, bf16 *dinp_bf16, float *part_w, float *part_b, const float *dout,
                                         const float *inp, const float *weight, const float *mean,
                                         const float *rstd, int N, int C) {
    extern __shared__ float acc[];
    int lane = threadIdx.x;
    for (int c = lane; c < 2 * C; c += 32) acc[c] = 0.0f;
    int r0 = blockIdx.x * LN_BWD_ROWS, r1 = r0 + LN_BWD_ROWS < N ? r0 + LN_BWD_ROWS : N;
    for (int row = r0; row < r1; row++) {
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
            float g = di[c] + (weight[c] * d[c] - dn_mean - norm * dnn_mean) * rs;
            di[c] = g;
            if (dinp_bf16) px_st(&dinp_bf16[(size_t)row * C + c], g);
            acc[c] += d[c] * norm;
            acc[C + c] += d[c];
        }
    }
    for (int c = lane; c < C; c += 32) {
        part_w[(size_t)blockIdx.x * C + c] = acc[c];
        part_b[(size_t)blockIdx.x * C + c] = acc[C + c];
    }
}

template <typename O>
static void forward(O *out, float *mean, float *rstd, const float *inp, const float *weight, const float *bias, int N,
                    int C, cudaStream_t stream) {
    unsigned grid = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    layernorm_forward_kernel<O><<<grid, PX_THREADS, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C);
    PX_CUDA_LAUNCH_CHECK();
}

extern "C" void layernorm_forward_cuda(float *out, float *mean, float *rstd, const float *inp,
                                       const float *weight, const float *bias, int B, int T, int C,
                                       cudaStream_t stream) {
    forward(out, mean, rstd, inp, weight, bias, B * T, C, stream);
}
void layernorm_forward_cuda(bf16 *out, float *mean, float *rstd, const float *inp, const float *weight,
                            const float *bias, int B, int T, int C, cudaStream_t stream) {
    forward(out, mean, rstd, inp, weight, bias, B * T, C, stream);
}

template <typename O>
static void residual_forward(float *res, O *out, float *mean, float *rstd, const float *a, const float *b,
                             const float *weight, const float *bias, int N, int C, cudaStream_t stream) {
    unsigned grid = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    residual_layernorm_forward_kernel<O><<<grid, PX_THREADS, 0, stream>>>(res, out, mean, rstd, a, b, weight, bias,
                                                                           N, C);
    PX_CUDA_LAUNCH_CHECK();
}

extern "C" void residual_layernorm_forward_cuda(float *res, float *out, float *mean, float *rstd, const float *a,
                                                const float *b, const float *weight, const float *bias, int B, int T,
                                                int C, cudaStream_t stream) {
    residual_forward(res, out, mean, rstd, a, b, weight, bias, B * T, C, stream);
}
void residual_layernorm_forward_cuda(float *res, bf16 *out, float *mean, float *rstd, const float *a, const float *b,
                                     const float *weight, const float *bias, int B, int T, int C,
                                     cudaStream_t stream) {
    residual_forward(res, out, mean, rstd, a, b, weight, bias, B * T, C, stream);
}

void layernorm_backward_cuda(float *dinp, bf16 *dinp_bf16, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, const float *mean, const float *rstd, int B,
                             int T, int C, cudaStream_t stream) {
    int N = B * T, nb = (N + LN_BWD_ROWS - 1) / LN_BWD_ROWS;
    size_t smem = 2 * (size_t)C * sizeof(float);
    if (smem > 48 * 1024)
        px_cuda_fail(__FILE__, __LINE__, "layernorm_backward_cuda", "cuda", 0,
                     "more than 6144 channels: the backward's per-warp sums do not fit in shared memory");
    float *part_w = (float *)px_cuda_scratch(2 * (size_t)nb * C * sizeof(float)), *part_b = part_w + (size_t)nb * C;
    layernorm_backward_kernel<<<(unsigned)nb, 32, smem, stream>>>(dinp, dinp_bf16, part_w, part_b, dout, inp, weight,
                                                                   mean, rstd, N, C);
    PX_CUDA_LAUNCH_CHECK();
    px_cuda_colsum_add(dweight, part_w, nb, C, stream);
    px_cuda_colsum_add(dbias, part_b, nb, C, stream);
}

void layernorm_backward_cuda(float *dinp, float *dinp_fp32, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, const float *mean, const float *rstd, int B,
                             int T, int C, cudaStream_t stream) {
    if (dinp_fp32 != dinp)
        px_cuda_fail(__FILE__, __LINE__, "layernorm_backward_cuda", "cuda", 0,
                     "an FP32 copy of dinp must be dinp itself (FP32 storage keeps one)");
    layernorm_backward_cuda(dinp, (bf16 *)NULL, dweight, dbias, dout, inp, weight, mean, rstd, B, T, C, stream);
}

extern "C" void layernorm_backward_cuda(float *dinp, float *dweight, float *dbias,
                                        const float *dout, const float *inp, const float *weight,
                                        const float *mean, const float *rstd, int B, int T, int C,
                                        cudaStream_t stream) {
    layernorm_backward_cuda(dinp, (bf16 *)NULL, dweight, dbias, dout, inp, weight, mean, rstd, B, T, C, stream);
}
