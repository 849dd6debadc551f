/* The element-wise ops on the GPU: GELU (tanh form) and the residual add
 * (gelu_* and residual_* of ops.h). Grid-stride loops, one element per
 * iteration; the GELU formulas are px_gelu / px_gelu_grad from ops_math.h,
 * the very functions the CPU op calls, so CPU and GPU round alike. */
#include "cuda_common.cuh"
#include "ops_math.h"

__global__ void gelu_forward_kernel(float *out, const float *inp, size_t n) {
    PX_GRID_STRIDE(i, n) { out[i] = px_gelu(inp[i]); }
}

__global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n) {
    PX_GRID_STRIDE(i, n) { dinp[i] += px_gelu_grad(inp[i]) * dout[i]; }
}

__global__ void gelu_backward_inplace_kernel(float *d, const float *inp, size_t n) {
    PX_GRID_STRIDE(i, n) { d[i] = px_gelu_grad(inp[i]) * d[i]; }
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
    gelu_forward_kernel<<<px_grid(N), PX_THREADS, 0, stream>>>(out, inp, N);
    PX_CUDA_LAUNCH_CHECK();
}

extern "C" void gelu_backward_cuda(float *dinp, const float *inp, const float *dout, size_t N,
                                   cudaStream_t stream) {
    gelu_backward_kernel<<<px_grid(N), PX_THREADS, 0, stream>>>(dinp, inp, dout, N);
    PX_CUDA_LAUNCH_CHECK();
}

extern "C" void gelu_backward_inplace_cuda(float *d, const float *inp, size_t N, cudaStream_t stream) {
    gelu_backward_inplace_kernel<<<px_grid(N), PX_THREADS, 0, stream>>>(d, inp, N);
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
