/* Helpers shared by the GPU tests (tests/gpu/): the skip rule, a seeded RNG,
 * device buffers, and tolerance comparisons that name the tensor.
 *
 * Skip rule: without a usable GPU a test prints "SKIP: <reason>" and exits 77,
 * which tests/gpu.cmake maps to ctest's SKIPPED (SKIP_RETURN_CODE), so a
 * machine without a GPU never reports these tests as passed.
 *
 * Comparison rule: max |got - want| <= rtol * max |want| + atol over the
 * tensor, the "relative to the largest magnitude" rule of the CPU model's
 * reference test (tests/model/test_reference.c). A miss prints the worst index and both values and counts a
 * failure; main() exits non-zero when any failed. */
#ifndef PX_GPU_TEST_H
#define PX_GPU_TEST_H

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_cuda.h"

#define GT_SKIP 77

static int gt_failures;
static int gt_checks;

#define GT_CUDA(call)                                                                          \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,               \
                    cudaGetErrorString(e_));                                                   \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* Exits 77 with the reason when no usable GPU is present. */
static inline void gt_require_gpu(const char *prog) {
    char why[512];
    if (px_cuda_device_count(why, sizeof why) < 1) {
        printf("SKIP: %s needs a GPU: %s\n", prog, why);
        fflush(stdout);
        exit(GT_SKIP);
    }
    printf("%s: %s\n", prog, why);
}

/* xorshift64*: seeded, the same sequence everywhere. */
static uint64_t gt_rng_state = 0x9E3779B97F4A7C15ull;
static inline void gt_seed(uint64_t s) { gt_rng_state = s ? s : 1; }
static inline uint32_t gt_u32(void) {
    gt_rng_state ^= gt_rng_state >> 12;
    gt_rng_state ^= gt_rng_state << 25;
    gt_rng_state ^= gt_rng_state >> 27;
    return (uint32_t)((gt_rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}
/* Uniform in [-scale, scale). */
static inline float gt_uniform(float scale) {
    return scale * ((float)(gt_u32() >> 8) / 8388608.0f - 1.0f);
}

static inline float *gt_random(size_t n, float scale) {
    float *x = (float *)calloc(n ? n : 1, sizeof(float));
    if (!x) exit(1);
    for (size_t i = 0; i < n; i++) x[i] = gt_uniform(scale);
    return x;
}

static inline int *gt_tokens(size_t n, int range) {
    int *x = (int *)malloc(n * sizeof(int));
    if (!x) exit(1);
    for (size_t i = 0; i < n; i++) x[i] = (int)(gt_u32() % (uint32_t)range);
    return x;
}

static inline float *gt_copy(const float *x, size_t n) {
    float *y = (float *)malloc(n * sizeof(float));
    if (!y) exit(1);
    memcpy(y, x, n * sizeof(float));
    return y;
}

/* Device copy of n host elements of `size` bytes each. */
static inline void *gt_up(const void *host, size_t n, size_t size) {
    void *d = NULL;
    GT_CUDA(cudaMalloc(&d, n * size > 0 ? n * size : 1));
    if (n) GT_CUDA(cudaMemcpy(d, host, n * size, cudaMemcpyHostToDevice));
    return d;
}
#define gt_upf(h, n) ((float *)gt_up((h), (n), sizeof(float)))
#define gt_upi(h, n) ((int *)gt_up((h), (n), sizeof(int)))

/* Host copy of n floats of a device buffer (after the device is idle). */
static inline float *gt_down(const float *dev, size_t n) {
    float *h = (float *)malloc(n * sizeof(float) + 1);
    if (!h) exit(1);
    GT_CUDA(cudaDeviceSynchronize());
    GT_CUDA(cudaMemcpy(h, dev, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

/* Compares got against want; returns 1 when within tolerance. */
static inline int gt_close(const char *what, const float *got, const float *want, size_t n,
                           double rtol, double atol) {
    double scale = 0.0, worst = -1.0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double w = fabs((double)want[i]);
        if (w > scale) scale = w;
    }
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (d != d) d = INFINITY; /* NaN counts as the worst miss */
        if (d > worst) {
            worst = d;
            wi = i;
        }
    }
    double tol = rtol * scale + atol;
    gt_checks++;
    if (n == 0 || worst <= tol) {
        printf("ok   %-44s max_err=%.3g tol=%.3g (n=%zu)\n", what, n ? worst : 0.0, tol, n);
        return 1;
    }
    printf("FAIL %-44s max_err=%.3g > tol=%.3g at [%zu]: got %.9g want %.9g (n=%zu)\n", what,
           worst, tol, wi, (double)got[wi], (double)want[wi], n);
    gt_failures++;
    return 0;
}

/* Bitwise equality (for ops whose arithmetic and order match exactly). */
static inline int gt_same(const char *what, const float *got, const float *want, size_t n) {
    gt_checks++;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            printf("FAIL %-44s not bitwise equal at [%zu]: got %.9g want %.9g (n=%zu)\n", what, i,
                   (double)got[i], (double)want[i], n);
            gt_failures++;
            return 0;
        }
    printf("ok   %-44s bitwise equal (n=%zu)\n", what, n);
    return 1;
}

static inline int gt_finish(const char *prog) {
    if (gt_failures) {
        printf("%s: %d of %d checks FAILED\n", prog, gt_failures, gt_checks);
        return 1;
    }
    printf("%s: all %d checks passed\n", prog, gt_checks);
    return 0;
}

#endif
