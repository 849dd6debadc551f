/* Token + position embedding on the GPU (encoder_forward/backward of ops.h).
 *
 * The backward is a scatter-add: many positions may carry the same token, so
 * a thread per position would race on dwte. Instead each thread owns a set of
 * dwte elements, (channel c, every token v with v % ENC_BUCKETS == bucket), and
 * walks all positions in order adding the ones whose token it owns. No two
 * threads touch the same element, there are no atomics, and each element
 * receives its terms in position order, which is the CPU's order too. The
 * price is that every thread reads every token id; those reads are broadcast
 * within a block (all threads of a block read the same id at once). */
#include "cuda_common.cuh"

/* Vocabulary buckets per channel: parallelism is C * ENC_BUCKETS threads. */
#define ENC_BUCKETS 32

__global__ void encoder_forward_kernel(float *out, const int *inp, const float *wte,
                                       const float *wpe, int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    PX_GRID_STRIDE(i, n) {
        size_t bt = i / (size_t)C;
        int c = (int)(i % (size_t)C);
        int t = (int)(bt % (size_t)T);
        out[i] = wte[(size_t)inp[bt] * C + c] + wpe[(size_t)t * C + c];
    }
}

/* grid (ceil(C/blockDim.x), ENC_BUCKETS); thread (c, bucket). */
__global__ void encoder_backward_wte_kernel(float *dwte, const float *dout, const int *inp, int BT,
                                            int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int bucket = blockIdx.y;
    if (c >= C) return;
    for (int bt = 0; bt < BT; bt++) {
        int v = inp[bt];
        if (v % ENC_BUCKETS == bucket) dwte[(size_t)v * C + c] += dout[(size_t)bt * C + c];
    }
}

/* One thread per (t, c): dwpe[t,c] += dout[b,t,c] for b in order. */
__global__ void encoder_backward_wpe_kernel(float *dwpe, const float *dout, int B, int T, int C) {
    size_t n = (size_t)T * C;
    PX_GRID_STRIDE(i, n) {
        float acc = dwpe[i];
        for (int b = 0; b < B; b++) acc += dout[(size_t)b * T * C + i];
        dwpe[i] = acc;
    }
}

extern "C" void encoder_forward_cuda(float *out, const int *inp, const float *wte,
                                     const float *wpe, int B, int T, int C, cudaStream_t stream) {
    size_t n = (size_t)B * T * C;
    encoder_forward_kernel<<<px_grid(n), PX_THREADS, 0, stream>>>(out, inp, wte, wpe, B, T, C);
    PX_CUDA_LAUNCH_CHECK();
}

extern "C" void encoder_backward_cuda(float *dwte, float *dwpe, const float *dout, const int *inp,
                                      int B, int T, int C, cudaStream_t stream) {
    dim3 grid((unsigned)((C + 63) / 64), ENC_BUCKETS);
    encoder_backward_wte_kernel<<<grid, 64, 0, stream>>>(dwte, dout, inp, B * T, C);
    PX_CUDA_LAUNCH_CHECK();
    size_t n = (size_t)T * C;
    encoder_backward_wpe_kernel<<<px_grid(n), PX_THREADS, 0, stream>>>(dwpe, dout, B, T, C);
    PX_CUDA_LAUNCH_CHECK();
}
