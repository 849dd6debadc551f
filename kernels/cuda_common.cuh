/* Internal to the CUDA ops (the kernels/ .cu files): error checks, the shared library
 * context (cuBLAS handles, the cuBLASLt workspace, one scratch buffer), launch
 * helpers and deterministic reductions. Not part of the public API; C callers
 * use ops_cuda.h.
 *
 * Errors: every CUDA and cuBLAS call goes through PX_CUDA_CHECK / PX_CUBLAS_CHECK,
 * which on failure log the call, file:line, the error string and a hint, then
 * exit the process. A GPU fault is not recoverable inside a rank; in phalanx
 * the rank's replica group is dropped and restarted, the design's unit of
 * failure (docs/architecture.md, "Design"), so dying loudly is the honest
 * behaviour.
 *
 * Threading: the context (handles, workspace, scratch) is process-wide and
 * bound to the device current at px_cuda_ops_init(). Ops must be issued from
 * one host thread, on one stream at a time, because they share the scratch
 * buffer (see ops_cuda.h). */
#ifndef PX_CUDA_COMMON_CUH
#define PX_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "ops_cuda.h"

/* Reports a failed call and exits. lib is "cuda" or "cublas". */
[[noreturn]] void px_cuda_fail(const char *file, int line, const char *call, const char *lib,
                               int code, const char *msg);

#define PX_CUDA_CHECK(call)                                                                   \
    do {                                                                                      \
        cudaError_t px_err_ = (call);                                                         \
        if (px_err_ != cudaSuccess)                                                           \
            px_cuda_fail(__FILE__, __LINE__, #call, "cuda", (int)px_err_,                     \
                         cudaGetErrorString(px_err_));                                        \
    } while (0)

#define PX_CUBLAS_CHECK(call)                                                                 \
    do {                                                                                      \
        cublasStatus_t px_st_ = (call);                                                       \
        if (px_st_ != CUBLAS_STATUS_SUCCESS)                                                  \
            px_cuda_fail(__FILE__, __LINE__, #call, "cublas", (int)px_st_,                    \
                         cublasGetStatusString(px_st_));                                      \
    } while (0)

/* After every kernel launch: catches bad launch configurations at once
 * (asynchronous faults surface at the next synchronizing call). */
#define PX_CUDA_LAUNCH_CHECK() PX_CUDA_CHECK(cudaGetLastError())

/* The cuBLAS handle, bound to `stream` for the calls that follow. */
cublasHandle_t px_cuda_blas(cudaStream_t stream);
/* The cuBLASLt handle and its workspace. */
cublasLtHandle_t px_cuda_lt(void);
void *px_cuda_lt_workspace(size_t *bytes);
/* 1 when matmul_forward_cuda may use the cuBLASLt bias epilogue. */
int px_cuda_lt_enabled(void);
/* The cuBLAS compute type of the math mode (px_cuda_ops_set_math). */
cublasComputeType_t px_cuda_compute_type(void);
/* GEMMs in the math mode (matmul.cu), column-major, FP32 storage. */
void px_cuda_gemm(cudaStream_t stream, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                  float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
void px_cuda_gemm_batched(cudaStream_t stream, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                          float alpha, const float *A, int lda, long long sa, const float *B, int ldb,
                          long long sb, float beta, float *C, int ldc, long long sc, int batch);
/* The strided-batched GEMM on any storage: A, B and C all of type t. */
void px_cuda_gemm_batched_ex(cudaStream_t stream, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                             float alpha, const void *A, int lda, long long sa, const void *B, int ldb, long long sb,
                             cudaDataType_t t, float beta, void *C, int ldc, long long sc, int batch);
/* A GEMM on any storage (matmul.cu): A and B of type ab, C of type ct,
 * FP32 alpha and beta. FP32 operands compute in the math mode (exactly
 * px_cuda_gemm when C is FP32 too); bf16 operands in FP32 on tensor cores
 * (CUBLAS_COMPUTE_32F: the inputs are bf16 already). */
void px_cuda_gemm_ex(cudaStream_t stream, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                     float alpha, const void *A, int lda, const void *B, int ldb, cudaDataType_t ab, float beta,
                     void *C, int ldc, cudaDataType_t ct);
/* Frees matmul.cu's cached cuBLASLt plans (px_cuda_ops_shutdown). */
void px_cuda_lt_plans_free(void);
/* A device buffer of at least `bytes`, shared by all ops and valid until the
 * next call. Growing it synchronizes the device first, so the old buffer is
 * never freed under a running kernel. */
void *px_cuda_scratch(size_t bytes);
/* The same for one of a few independent buffers, so that an op may use
 * one while its caller holds another: PX_SCRATCH_OPS is px_cuda_scratch's,
 * PX_SCRATCH_COLSUM px_cuda_colsum_add's partial sums. */
enum { PX_SCRATCH_OPS = 0, PX_SCRATCH_COLSUM = 1, PX_SCRATCH_SLOTS = 2 };
void *px_cuda_scratch_slot(int slot, size_t bytes);

/* ---- bf16 storage ---- */

typedef __nv_bfloat16 bf16;

/* Loads and stores of either storage type, the arithmetic always in FP32
 * (stores to bf16 round to nearest even). */
__device__ __host__ inline float px_ld(float x) { return x; }
__device__ __host__ inline float px_ld(bf16 x) { return __bfloat162float(x); }
__device__ __host__ inline void px_st(float *p, float v) { *p = v; }
__device__ __host__ inline void px_st(bf16 *p, float v) { *p = __float2bfloat16(v); }

/* The cuBLAS data type of a storage type. */
template <typename X>
inline cudaDataType_t px_data_type();
template <>
inline cudaDataType_t px_data_type<float>() { return CUDA_R_32F; }
template <>
inline cudaDataType_t px_data_type<bf16>() { return CUDA_R_16BF; }

/* ---- launch helpers ---- */

#define PX_THREADS 256

/* Blocks for a grid-stride loop over n items: enough to fill the GPU, capped
 * so the grid size never overflows whatever n is. */
static inline unsigned px_grid(size_t n) {
    size_t blocks = (n + PX_THREADS - 1) / PX_THREADS;
    if (blocks < 1) blocks = 1;
    if (blocks > 65536) blocks = 65536;
    return (unsigned)blocks;
}

#define PX_GRID_STRIDE(i, n)                                                                  \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                   \
         i += (size_t)gridDim.x * blockDim.x)

/* ---- deterministic reductions: fixed shuffle trees, no atomics ---- */

__device__ inline float px_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ inline float px_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over a block of PX_THREADS threads; every thread gets the result.
 * shared must hold PX_THREADS/32 floats. */
__device__ inline float px_block_sum(float v, float *shared) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = px_warp_sum(v);
    __syncthreads(); /* shared may still be read by a previous call */
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < PX_THREADS / 32 ? shared[lane] : 0.0f;
    return px_warp_sum(v);
}

__device__ inline float px_block_max(float v, float *shared) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = px_warp_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < PX_THREADS / 32 ? shared[lane] : -INFINITY;
    return px_warp_max(v);
}

/* Sum of `acc` over the 32 rows (threadIdx.y) of a 32x32 block, for the
 * column sums below: a fixed tree through shared memory. The result is valid
 * in threadIdx.y == 0. shared is a [32][33] tile (padded against bank
 * conflicts). */
__device__ inline float px_column_tree(float acc, float (*shared)[33]) {
    shared[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    for (int s = 16; s > 0; s >>= 1) {
        if ((int)threadIdx.y < s) shared[threadIdx.y][threadIdx.x] += shared[threadIdx.y + s][threadIdx.x];
        __syncthreads();
    }
    return shared[0][threadIdx.x];
}

/* out (N) += column sums of a (M,N) row-major matrix; deterministic (each
 * column has one fixed summation order), no atomics. Used for bias
 * gradients. Tall matrices are cut into chunks of rows summed in parallel,
 * then the chunks' sums added in order. */
void px_cuda_colsum_add(float *out, const float *a, int M, int N, cudaStream_t stream);
void px_cuda_colsum_add(float *out, const bf16 *a, int M, int N, cudaStream_t stream);

#endif
