/* Which compute device runs the ops, and whether CUDA can be used here.
 * The CPU path never depends on this: it only answers `--device cuda`.
 *
 * Contract for the CUDA build (kernels/cuda.cmake, owned with the .cu files):
 * compile a definition of px_cuda_device_count() into px_kernels and add
 * `target_compile_definitions(px_kernels PUBLIC PX_HAVE_CUDA_OPS=1)`. Without
 * that, px_cuda_available() reports that the binary has no CUDA support. */
#ifndef PX_DEVICE_H
#define PX_DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { PX_DEVICE_CPU = 0, PX_DEVICE_CUDA = 1 } px_device_t;
/* How a device computes: FP32 throughout, or bf16 tensor-core math with an
 * FP32 state (GPUs only). */
typedef enum { PX_PRECISION_FP32 = 0, PX_PRECISION_BF16 = 1 } px_precision_t;

/* Parses "cpu" or "cuda"; returns 0 on success, -1 on anything else. */
int px_device_parse(const char *name, px_device_t *out);

/* 1 when this binary has the CUDA ops and at least one GPU is usable; else 0,
 * with the reason (no CUDA support built in, no GPU, driver error) in why. */
int px_cuda_available(char *why, size_t whylen);

#ifdef PX_HAVE_CUDA_OPS
/* Number of usable GPUs, or 0 with the reason in why (implemented in a .cu file). */
int px_cuda_device_count(char *why, size_t whylen);
#endif

#ifdef __cplusplus
}
#endif

#endif
