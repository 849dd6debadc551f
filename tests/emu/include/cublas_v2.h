/* Only the cuBLAS names the kernel sources' shared header declares; the
 * emulator runs no cuBLAS call (the GEMM files are not emulated). */
#ifndef PX_EMU_CUBLAS_V2_H
#define PX_EMU_CUBLAS_V2_H
#include "cuda_runtime_api.h"
typedef struct px_emu_cublas *cublasHandle_t;
typedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_16BF = 75, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 } cublasComputeType_t;
static inline const char *cublasGetStatusString(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? "success" : "error"; }
#endif
