/* The device side of CUDA C++ as the kernel emulator runs it on the CPU
 * (tests/emu/emu.cpp). A launch runs its blocks one after another; a block's
 * threads are fibers on one OS thread, each running until it reaches a
 * barrier (__syncthreads, __syncwarp, a shuffle or a wmma call, which are
 * warp-collective on the hardware) or returns. So every thread of a block
 * sees what the others wrote before the barrier, as on a GPU, and a kernel
 * that reads another thread's write without a barrier between them gets a
 * result that depends on the order the fibers run in, which the emulator
 * changes from launch to launch (a rerun that must be bitwise equal then
 * catches the race). A barrier that some live threads never reach is
 * reported as a deadlock. What it cannot show: timing, occupancy, shared
 * memory limits, bank conflicts, or faults of the real memory model.
 *
 * Kernel sources reach this header through tests/emu/cu2cpp.py, which
 * rewrites the two pieces of syntax C++ lacks: launches (k<<<g, b, s, st>>>(...))
 * and dynamic shared memory (extern __shared__ T name[]). */
#ifndef PX_EMU_CUDA_EMU_DEVICE_H
#define PX_EMU_CUDA_EMU_DEVICE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <functional>

#include "cuda_runtime_api.h"

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef dim3 uint3;

namespace emu {
extern dim3 block_idx, block_dim, grid_dim;
const dim3 &thread_idx();
void sync_block();
void sync_warp();
/* Lane `lane ^ mask`'s value of v, exchanged through the warp's slots. */
uint64_t exchange(uint64_t v, int src_lane);
void *dyn_smem();
/* 256 floats of the current warp's own, for warp-collective results. */
float *warp_scratch();
[[noreturn]] void trap(const char *why);
void run(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body);

template <class F>
void launch(F body, dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = 0) {
    (void)stream;
    run(grid, block, smem, std::function<void()>(body));
}

template <class T>
T shfl_xor(T v, int mask) {
    static_assert(sizeof(T) <= 8, "shuffle of a type over 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = exchange(bits, (int)(thread_idx().x & 31) ^ mask);
    T out;
    memcpy(&out, &bits, sizeof out);
    return out;
}
} // namespace emu

#define threadIdx (emu::thread_idx())
#define blockIdx (emu::block_idx)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static
#define __syncthreads() emu::sync_block()
#define __syncwarp(...) emu::sync_warp()
#define __shfl_xor_sync(mask, v, m) emu::shfl_xor((v), (m))
#define __trap() emu::trap("__trap()")
#define __expf(x) expf(x)
#define __logf(x) logf(x)

template <class K>
cudaError_t cudaFuncSetAttribute(K, cudaFuncAttribute, int) {
    return cudaSuccess;
}
template <class T>
cudaError_t cudaMalloc(T **p, size_t bytes) { /* cuda_runtime.h's typed overload */
    return cudaMalloc((void **)p, bytes);
}
template <class K>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *attr, K) {
    attr->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}

#endif
