/* The element-wise ops on the GPU: GELU (tanh form) and the residual add
 * (gelu_* and residual_* of ops.h), and the conversions between FP32 and
 * bf16 storage. Grid-stride loops, one element per iteration; the GELU
 * formulas are px_gelu / px_gelu_grad from ops_math.h, the very functions
 * the CPU op calls, so CPU and GPU round alike. */
#include <string.h>

#include "cuda_common.cuh"
#include "ops_math.h"

template <typename X>
__global__ void gelu_forward_kernel(X *out, const X *inp, size_t n) {
    PX_GRID_STRIDE(i, n) { px_st(&out[i], px_gelu(px_ld(inp[i]))); }
}

__global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n) {
    PX_GRID_STRIDE(i, n) { dinp[i] += px_gelu_grad(inp[i]) * dout[i]; }
}

template <typename X>
__global__ void gelu_backward_inplace_kernel(X *d, const X *inp, size_t n) {
    PX_GRID_STRIDE(i, n) { px_st(&d[i], px_gelu_grad(px_ld(inp[i])) * px_ld(d[i])); }
}

template <typename D, typename S>
__global__ void convert_kernel(D *dst, const S *src, size_t n) {
    PX_GRID_STRIDE(i, n) { px_st(&dst[i], px_ld(src[i])); }
}

typedef struct {
    px_cuda_convert_t job[PX_CUDA_CONVERT_MAX];
} convert_table_t;

/* blockIdx.y: the job; a grid-stride loop over its elements. */
__global__ void convert_many_kernel(convert_table_t t) {
    px_cuda_convert_t j = t.job[blockIdx.y];
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < j.n; i += (size_t)gridDim.x * blockDim.x)
        j.dst[i] = __float2bfloat16(j.src[i]);
}

__global__ void residual_forward_kernel(float *out, const float *inp1, const float *inp2,
                                        size_t n) {
    PX_GRID_STRIDE(i, n) { out[i] = inp1[i] + inp2[i]; }
}

__global__ void residual_backward_kernel(float *dinp1, float *dinp2, const float *dout, size_t n) {
    PX_GRID_STRIDE(i, n) {
        float d = dout[i];
        dinp1[i] += d;
        dinp2[i] += d;
    }
}

extern "C" void gelu_forward_cuda(float *out, const float *inp, size_t N, cudaStream_t stream) {
    gelu_forward_kernel<float><<<px_grid(N), PX_THREADS, 0, stream>>>(out, inp, N);
    PX_CUDA_LAUNCH_CHECK();
}

void gelu_forward_cuda(bf16 *out, const bf16 *inp, size_t N, cudaStream_t stream) {
    gelu_forward_kernel<bf16><<<px_grid(N), PX_THREADS, 0, stream>>>(out, inp, N);
    PX_CUDA_LAUNCH_CHECK();
}

extern "C" void gelu_backward_cuda(float *dinp, const float *inp, const float *dout, size_t N,
                                   cudaStream_t stream) {
    gelu_backward_kernel<<<px_grid(N), PX_THREADS, 0, stream>>>(dinp, inp, dout, N);
    PX_CUDA_LAUNCH_CHECK();
}

extern "C" void gelu_backward_inplace_cuda(float *d, const float *inp, size_t N, cudaStream_t stream) {
    gelu_backward_inplace_kernel<float><<<px_grid(N), PX_THREADS, 0, stream>>>(d, inp, N);
    PX_CUDA_LAUNCH_CHECK();
}

void gelu_backward_inplace_cuda(bf16 *d, const bf16 *inp, size_t N, cudaStream_t stream) {
    gelu_backward_inplace_kernel<bf16><<<px_grid(N), PX_THREADS, 0, stream>>>(d, inp, N);
    PX_CUDA_LAUNCH_CHECK();
}

void px_cuda_to_bf16(bf16 *dst, const float *src, size_t n, cudaStream_t stream) {
    convert_kernel<bf16, float><<<px_grid(n), PX_THREADS, 0, stream>>>(dst, src, n);
    PX_CUDA_LAUNCH_CHECK();
}

void px_cuda_to_float(float *dst, const bf16 *src, size_t n, cudaStream_t stream) {
    convert_kernel<float, bf16><<<px_grid(n), PX_THREADS, 0, stream>>>(dst, src, n);
    PX_CUDA_LAUNCH_CHECK();
}

void px_cuda_to_bf16_many(const px_cuda_convert_t *jobs, int njobs, cudaStream_t stream) {
    if (njobs < 1) return;
    if (njobs > PX_CUDA_CONVERT_MAX)
        px_cuda_fail(__FILE__, __LINE__, "px_cuda_to_bf16_many", "cuda", 0, "more tensors than PX_CUDA_CONVERT_MAX");
    convert_table_t t;
    memset(&t, 0, sizeof t);
    size_t most = 0;
    for (int i = 0; i < njobs; i++) {
        t.job[i] = jobs[i];
        if (jobs[i].n > most) most = jobs[i].n;
    }
    dim3 grid(px_grid(most) < 1024 ? px_grid(most) : 1024, (unsigned)njobs);
    convert_many_kernel<<<grid, PX_THREADS, 0, stream>>>(t);
    PX_CUDA_LAUNCH_CHECK();
}

extern "C" void residual_forward_cuda(float *out, const float *inp1, const float *inp2, size_t N,
                                      cudaStream_t stream) {
    residual_forward_kernel<<<px_grid(N), PX_THREADS, 0, stream>>>(out, inp1, inp2, N);
    PX_CUDA_LAUNCH_CHECK();
}

extern "C" void residual_backward_cuda(float *dinp1, float *dinp2, const float *dout, size_t N,
                                       cudaStream_t stream) {
    residual_backward_kernel<<<px_grid(N), PX_THREADS, 0, stream>>>(dinp1, dinp2, dout, N);
    PX_CUDA_LAUNCH_CHECK();
}
