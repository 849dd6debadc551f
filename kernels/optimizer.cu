/* The optimizer ops on the GPU: AdamW (per tensor, or all of a model's
 * tensors in one launch), the squared gradient norm and the in-place scale
 * used for clipping (adamw_update, norm_squared, scale_inplace of ops.h).
 *
 * AdamW: the step's coefficients come from px_adamw_coef on the host (double
 * precision, as PyTorch computes them in Python) and every element goes
 * through px_adamw_element, the CPU's own function, so both round alike.
 *
 * Norm: the CPU sums squares in double over fixed 16384-element blocks and
 * adds the blocks in order. Here one thread block takes each 16384-element
 * block (a fixed tree inside it), and one final block adds the block sums in a
 * fixed tree. Same blocking, a different but fixed order inside each: equal
 * to the CPU to double rounding, bitwise reproducible run to run. */
#include <string.h>

#include "cuda_common.cuh"
#include "ops_math.h"

#define NORM_BLOCK 16384

__global__ void adamw_kernel(float *params, float *m, float *v, const float *grads, size_t n,
                             px_adamw_coef_t c) {
    PX_GRID_STRIDE(i, n) { px_adamw_element(&params[i], &m[i], &v[i], grads[i], &c); }
}

/* The tensors of adamw_update_tensors_cuda: where each ends in the
 * buffers, and whether it takes weight decay (passed by value). */
typedef struct {
    size_t end[PX_ADAMW_TENSORS];
    int decay[PX_ADAMW_TENSORS];
    int n;
} adamw_table_t;

/* Each element finds its tensor (a short scan of the ends) and takes that
 * tensor's coefficients: with decay (cd) or without (c0). */
__global__ void adamw_tensors_kernel(float *params, float *m, float *v, const float *grads, adamw_table_t tab,
                                     px_adamw_coef_t cd, px_adamw_coef_t c0) {
    size_t n = tab.end[tab.n - 1];
    PX_GRID_STRIDE(i, n) {
        int k = 0;
        while (i >= tab.end[k]) k++;
        px_adamw_element(&params[i], &m[i], &v[i], grads[i], tab.decay[k] ? &cd : &c0);
    }
}

/* Fixed-tree sum of one double per thread over a block of PX_THREADS. */
__device__ static double block_sum_double(double v, double *shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int s = PX_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    return shared[0];
}

/* One block per NORM_BLOCK elements: part[blockIdx.x] = sum of squares. */
__global__ void norm_blocks_kernel(double *part, const float *x, size_t n) {
    __shared__ double shared[PX_THREADS];
    size_t lo = (size_t)blockIdx.x * NORM_BLOCK;
    size_t hi = lo + NORM_BLOCK < n ? lo + NORM_BLOCK : n;
    double acc = 0.0;
    for (size_t i = lo + threadIdx.x; i < hi; i += PX_THREADS) acc += (double)x[i] * (double)x[i];
    double s = block_sum_double(acc, shared);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

/* One block: *total = sum of part[0..nb). */
__global__ void norm_total_kernel(double *total, const double *part, size_t nb) {
    __shared__ double shared[PX_THREADS];
    double acc = 0.0;
    for (size_t i = threadIdx.x; i < nb; i += PX_THREADS) acc += part[i];
    double s = block_sum_double(acc, shared);
    if (threadIdx.x == 0) *total = s;
}

__global__ void scale_kernel(float *x, size_t n, float scale) {
    PX_GRID_STRIDE(i, n) { x[i] *= scale; }
}

extern "C" void adamw_update_cuda(float *params, float *m, float *v, const float *grads, size_t n,
                                  float lr, float beta1, float beta2, float eps,
                                  float weight_decay, int t, cudaStream_t stream) {
    px_adamw_coef_t c = px_adamw_coef(lr, beta1, beta2, eps, weight_decay, t);
    adamw_kernel<<<px_grid(n), PX_THREADS, 0, stream>>>(params, m, v, grads, n, c);
    PX_CUDA_LAUNCH_CHECK();
}

extern "C" void adamw_update_tensors_cuda(float *params, float *m, float *v, const float *grads, const size_t *sizes,
                                          const int *decay, int ntensors, float lr, float beta1, float beta2,
                                          float eps, float weight_decay, int t, cudaStream_t stream) {
    if (ntensors < 1 || ntensors > PX_ADAMW_TENSORS)
        px_cuda_fail(__FILE__, __LINE__, "adamw_update_tensors_cuda", "cuda", 0,
                     "the tensor count is not in 1..PX_ADAMW_TENSORS");
    adamw_table_t tab;
    memset(&tab, 0, sizeof tab);
    size_t end = 0;
    for (int i = 0; i < ntensors; i++) {
        end += sizes[i];
        tab.end[i] = end;
        tab.decay[i] = decay[i] != 0;
    }
    tab.n = ntensors;
    if (end == 0) return;
    px_adamw_coef_t cd = px_adamw_coef(lr, beta1, beta2, eps, weight_decay, t);
    px_adamw_coef_t c0 = px_adamw_coef(lr, beta1, beta2, eps, 0.0f, t);
    adamw_tensors_kernel<<<px_grid(end), PX_THREADS, 0, stream>>>(params, m, v, grads, tab, cd, c0);
    PX_CUDA_LAUNCH_CHECK();
}

extern "C" double norm_squared_cuda(const float *x, size_t n, cudaStream_t stream) {
    if (n == 0) return 0.0;
    size_t nb = (n + NORM_BLOCK - 1) / NORM_BLOCK;
    double *part = (double *)px_cuda_scratch((nb + 1) * sizeof(double));
    double *total = part + nb;
    norm_blocks_kernel<<<(unsigned)nb, PX_THREADS, 0, stream>>>(part, x, n);
    PX_CUDA_LAUNCH_CHECK();
    norm_total_kernel<<<1, PX_THREADS, 0, stream>>>(total, part, nb);
    PX_CUDA_LAUNCH_CHECK();
    double result = 0.0;
    PX_CUDA_CHECK(cudaMemcpyAsync(&result, total, sizeof result, cudaMemcpyDeviceToHost, stream));
    PX_CUDA_CHECK(cudaStreamSynchronize(stream));
    return result;
}

extern "C" void scale_inplace_cuda(float *x, size_t n, float scale, cudaStream_t stream) {
    scale_kernel<<<px_grid(n), PX_THREADS, 0, stream>>>(x, n, scale);
    PX_CUDA_LAUNCH_CHECK();
}
