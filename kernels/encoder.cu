/* Token + position embedding on the GPU (encoder_forward/backward of ops.h).
 *
 * The backward is a scatter-add: many positions may carry the same token, so
 * a thread per position would race on dwte. Instead the host groups the
 * positions by token first (encoder_backward_plan: a counting sort, stable,
 * so each group lists its positions in order), and the kernel gives each
 * (token, channel) element of dwte to one thread, which adds its group's
 * rows of dout in that order. No two threads touch the same element, there
 * are no atomics, every thread reads only its own token's positions, and
 * each element receives its terms in position order, which is the CPU's
 * order too (so the two agree bit for bit). */
#include <stdlib.h>

#include "cuda_common.cuh"

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

/* grid (groups, ceil(C/PX_THREADS)); thread (group, c). plan: the positions
 * grouped by token (BT ints), then each group's start (groups + 1 ints). */
__global__ void encoder_backward_wte_kernel(float *dwte, const float *dout, const int *inp, const int *plan,
                                            int BT, int C) {
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int *start = plan + BT;
    int lo = start[blockIdx.x], hi = start[blockIdx.x + 1];
    float *w = dwte + (size_t)inp[plan[lo]] * C + c;
    float acc = *w;
    for (int i = lo; i < hi; i++) acc += dout[(size_t)plan[i] * C + c];
    *w = acc;
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

extern "C" size_t encoder_backward_plan_ints(int B, int T) { return 2 * (size_t)B * T + 1; }

extern "C" int encoder_backward_plan(int *plan, const int *inp, int B, int T, int V) {
    int BT = B * T;
    int *count = (int *)calloc((size_t)V + 1, sizeof(int));
    if (!count) return -1;
    for (int i = 0; i < BT; i++) {
        if (inp[i] < 0 || inp[i] >= V) {
            free(count);
            return -1;
        }
        count[inp[i] + 1]++;
    }
    int *start = plan + BT, groups = 0;
    for (int v = 0; v < V; v++) {
        if (count[v + 1]) start[groups++] = count[v];
        count[v + 1] += count[v]; /* count[v]: where token v's positions begin */
    }
    start[groups] = BT;
    for (int i = 0; i < BT; i++) plan[count[inp[i]]++] = i; /* in order: stable */
    free(count);
    return groups;
}

extern "C" void encoder_backward_cuda(float *dwte, float *dwpe, const float *dout, const int *inp, const int *plan,
                                      int groups, int B, int T, int C, cudaStream_t stream) {
    if (groups > 0) {
        dim3 grid((unsigned)groups, (unsigned)((C + PX_THREADS - 1) / PX_THREADS));
        encoder_backward_wte_kernel<<<grid, PX_THREADS, 0, stream>>>(dwte, dout, inp, plan, B * T, C);
        PX_CUDA_LAUNCH_CHECK();
    }
    size_t n = (size_t)T * C;
    encoder_backward_wpe_kernel<<<px_grid(n), PX_THREADS, 0, stream>>>(dwpe, dout, B, T, C);
    PX_CUDA_LAUNCH_CHECK();
}
