/* The CUDA ops' process-wide context and device detection: cuBLAS and cuBLASLt
 * handles, the cuBLASLt workspace, the shared scratch buffer, the error
 * reporter behind PX_CUDA_CHECK, and px_cuda_device_count().
 *
 * Device detection must never exit and must explain itself: on a machine
 * without an NVIDIA driver, cudaGetDeviceCount returns error 35 (insufficient
 * driver) and a count of 0, and `--device cuda` has to say so
 * in one line while the CPU path carries on. Beyond "a device exists" it checks
 * that the device can run this build's kernels (the fat binary has code for
 * CMAKE_CUDA_ARCHITECTURES only), because an older GPU would otherwise fail
 * later with "no kernel image is available". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"

extern "C" {
#include "px_log.h"
}

/* ------------------------------------------------------------------ errors */

static const char *hint_for(const char *lib, int code) {
    if (strcmp(lib, "cuda") == 0) {
        switch ((cudaError_t)code) {
        case cudaErrorMemoryAllocation:
            return "out of GPU memory: lower the batch size (B) or sequence length (T)";
        case cudaErrorNoKernelImageForDevice:
            return "this GPU's architecture is not in CMAKE_CUDA_ARCHITECTURES: reconfigure "
                   "with -DCMAKE_CUDA_ARCHITECTURES=<its sm number>";
        case cudaErrorInsufficientDriver:
        case cudaErrorNoDevice:
            return "no usable GPU: check nvidia-smi, or run with --device cpu";
        case cudaErrorIllegalAddress:
        case cudaErrorLaunchFailure:
            return "a kernel faulted: rerun with CUDA_LAUNCH_BLOCKING=1 or compute-sanitizer to "
                   "find which";
        default:
            return "see the CUDA runtime documentation for this error";
        }
    }
    switch ((cublasStatus_t)code) {
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "out of GPU memory while cuBLAS allocated its workspace";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "cuBLAS could not start: is a GPU present and the driver loaded?";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "a matmul shape or leading dimension is invalid: check B, T, C, OC";
    default:
        return "see the cuBLAS documentation for this status";
    }
}

void px_cuda_fail(const char *file, int line, const char *call, const char *lib, int code,
                  const char *msg) {
    px_die_at(file, line, "%s_error call=\"%s\" code=%d error=\"%s\" hint=\"%s\"", lib, call,
              code, msg ? msg : "?", hint_for(lib, code));
}

/* ---------------------------------------------------------- device presence */

/* The smallest kernel: cudaFuncGetAttributes on it fails with
 * cudaErrorNoKernelImageForDevice when the fat binary has no code this GPU
 * can run. */
__global__ void px_probe_kernel(void) {}

int px_cuda_device_count(char *why, size_t whylen) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        snprintf(why, whylen, "no CUDA device: cudaGetDeviceCount returned error %d (%s)",
                 (int)err, cudaGetErrorString(err));
        cudaGetLastError(); /* clear it, so later CUDA calls do not report it again */
        return 0;
    }
    if (n < 1) {
        snprintf(why, whylen, "no CUDA device: cudaGetDeviceCount found 0 devices");
        return 0;
    }
    int dev = 0;
    cudaDeviceProp prop;
    if ((err = cudaGetDevice(&dev)) != cudaSuccess ||
        (err = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess) {
        snprintf(why, whylen, "CUDA device unusable: %s (error %d)", cudaGetErrorString(err),
                 (int)err);
        cudaGetLastError();
        return 0;
    }
    cudaFuncAttributes attr;
    err = cudaFuncGetAttributes(&attr, px_probe_kernel);
    if (err != cudaSuccess) {
        snprintf(why, whylen,
                 "CUDA device %d (%s, sm_%d%d) cannot run this build's kernels: %s (error %d); "
                 "rebuild with -DCMAKE_CUDA_ARCHITECTURES=%d%d",
                 dev, prop.name, prop.major, prop.minor, cudaGetErrorString(err), (int)err,
                 prop.major, prop.minor);
        cudaGetLastError();
        return 0;
    }
    snprintf(why, whylen, "%d CUDA device(s); device %d: %s, sm_%d%d, %.1f GiB", n, dev,
             prop.name, prop.major, prop.minor, (double)prop.totalGlobalMem / (1u << 30));
    return n;
}

/* Defined here only when the CPU library does not define it (kernels/device.c
 * does, on top of px_cuda_device_count): see kernels/cuda.cmake. */
#ifdef PX_CUDA_DEFINE_AVAILABLE
int px_cuda_available(char *why, size_t whylen) { return px_cuda_device_count(why, whylen) > 0; }
#endif

/* ----------------------------------------------------------------- context */

#define LT_WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLASLt's recommendation for Hopper */

static struct {
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    void *lt_ws;
    void *scratch[PX_SCRATCH_SLOTS];
    size_t scratch_bytes[PX_SCRATCH_SLOTS];
    int lt_enabled;
    px_cuda_math_t math;
    int fused_attention;
    int ready;
} g_ctx = {NULL, NULL, NULL, {NULL}, {0}, 1, PX_CUDA_MATH_FP32, 1, 0};

static pthread_mutex_t g_ctx_lock = PTHREAD_MUTEX_INITIALIZER;

void px_cuda_ops_init(void) {
    pthread_mutex_lock(&g_ctx_lock);
    if (!g_ctx.ready) {
        PX_CUBLAS_CHECK(cublasCreate(&g_ctx.blas));
        /* FP32 everywhere: the default math mode never lowers FP32 to TF32
         * (that takes CUBLAS_TF32_TENSOR_OP_MATH), so results stay comparable
         * with the CPU ops. Atomics stay off (also the default), for
         * reproducibility. Both set explicitly so a reader need not know. */
        PX_CUBLAS_CHECK(cublasSetMathMode(g_ctx.blas, CUBLAS_DEFAULT_MATH));
        PX_CUBLAS_CHECK(cublasSetAtomicsMode(g_ctx.blas, CUBLAS_ATOMICS_NOT_ALLOWED));
        PX_CUBLAS_CHECK(cublasLtCreate(&g_ctx.lt));
        PX_CUDA_CHECK(cudaMalloc(&g_ctx.lt_ws, LT_WORKSPACE_BYTES));
        g_ctx.ready = 1;
    }
    pthread_mutex_unlock(&g_ctx_lock);
}

void px_cuda_ops_shutdown(void) {
    pthread_mutex_lock(&g_ctx_lock);
    if (g_ctx.ready) {
        PX_CUDA_CHECK(cudaDeviceSynchronize());
        px_cuda_lt_plans_free();
        PX_CUBLAS_CHECK(cublasDestroy(g_ctx.blas));
        PX_CUBLAS_CHECK(cublasLtDestroy(g_ctx.lt));
        PX_CUDA_CHECK(cudaFree(g_ctx.lt_ws));
        for (int i = 0; i < PX_SCRATCH_SLOTS; i++) {
            if (g_ctx.scratch[i]) PX_CUDA_CHECK(cudaFree(g_ctx.scratch[i]));
            g_ctx.scratch[i] = NULL;
            g_ctx.scratch_bytes[i] = 0;
        }
        g_ctx.blas = NULL;
        g_ctx.lt = NULL;
        g_ctx.lt_ws = NULL;
        g_ctx.ready = 0;
    }
    pthread_mutex_unlock(&g_ctx_lock);
}

void px_cuda_ops_set_lt(int enable) { g_ctx.lt_enabled = enable ? 1 : 0; }
int px_cuda_lt_enabled(void) { return g_ctx.lt_enabled; }

void px_cuda_ops_set_math(px_cuda_math_t math) { g_ctx.math = math; }
px_cuda_math_t px_cuda_ops_math(void) { return g_ctx.math; }
void px_cuda_ops_set_fused_attention(int enable) { g_ctx.fused_attention = enable ? 1 : 0; }
int px_cuda_ops_fused_attention(void) { return g_ctx.fused_attention; }

cublasComputeType_t px_cuda_compute_type(void) {
    switch (g_ctx.math) {
    case PX_CUDA_MATH_TF32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case PX_CUDA_MATH_BF16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    default: return CUBLAS_COMPUTE_32F;
    }
}

cublasHandle_t px_cuda_blas(cudaStream_t stream) {
    px_cuda_ops_init();
    PX_CUBLAS_CHECK(cublasSetStream(g_ctx.blas, stream));
    return g_ctx.blas;
}

cublasLtHandle_t px_cuda_lt(void) {
    px_cuda_ops_init();
    return g_ctx.lt;
}

void *px_cuda_lt_workspace(size_t *bytes) {
    px_cuda_ops_init();
    *bytes = LT_WORKSPACE_BYTES;
    return g_ctx.lt_ws;
}

void *px_cuda_scratch_slot(int slot, size_t bytes) {
    px_cuda_ops_init();
    if (bytes > g_ctx.scratch_bytes[slot]) {
        /* The old buffer may still be read by queued kernels: wait for them. */
        PX_CUDA_CHECK(cudaDeviceSynchronize());
        if (g_ctx.scratch[slot]) PX_CUDA_CHECK(cudaFree(g_ctx.scratch[slot]));
        g_ctx.scratch[slot] = NULL;
        g_ctx.scratch_bytes[slot] = 0;
        size_t grown = bytes + bytes / 4; /* headroom: fewer regrowths as shapes vary */
        PX_CUDA_CHECK(cudaMalloc(&g_ctx.scratch[slot], grown));
        g_ctx.scratch_bytes[slot] = grown;
    }
    return g_ctx.scratch[slot];
}

void *px_cuda_scratch(size_t bytes) { return px_cuda_scratch_slot(PX_SCRATCH_OPS, bytes); }
