/* The GPU half of px_compute_t (compute_gpu.h) in a build without CUDA: it
 * only says so. px_compute_usable() refuses cuda with this reason before
 * anything is made, so the other functions are never reached. */
#include <stdio.h>
#include <stdlib.h>

#include "compute_gpu.h"
#include "px_log.h"

#define NO_CUDA                                                                                          \
    "phalanx was built without CUDA (no nvcc at configure time, or -DPHALANX_CUDA=OFF): rebuild with the " \
    "CUDA toolkit installed to train with --device cuda"

int px_compute_gpu_usable(char *why, size_t len) {
    snprintf(why, len, "%s", NO_CUDA);
    return 0;
}

void px_compute_gpu_warm(int rank) { (void)rank; }

void px_compute_gpu_set_math(px_precision_t precision, int tf32, int unfused_attention) {
    (void)precision, (void)tf32, (void)unfused_attention;
}

px_compute_gpu_t *px_compute_gpu_new(px_gpt_t *host, int rank, char *err, size_t errlen) {
    (void)host, (void)rank;
    snprintf(err, errlen, "%s", NO_CUDA);
    return NULL;
}

px_compute_gpu_t *px_compute_gpu_new_shard(px_shard_t *shard, int rank, char *err, size_t errlen) {
    (void)shard, (void)rank;
    snprintf(err, errlen, "%s", NO_CUDA);
    return NULL;
}

void px_compute_gpu_destroy(px_compute_gpu_t **g) { (void)g; }

static void unreachable(const char *what) {
    px_log_error("%s called in a build without CUDA", what);
    abort();
}

int px_compute_gpu_device(const px_compute_gpu_t *g) { (void)g; unreachable(__func__); return -1; }
void px_compute_gpu_zero_grad(px_compute_gpu_t *g) { (void)g; unreachable(__func__); }
float px_compute_gpu_forward(px_compute_gpu_t *g, const int *x, const int *y, int B, int T) {
    (void)g, (void)x, (void)y, (void)B, (void)T;
    unreachable(__func__);
    return 0;
}
int px_compute_gpu_backward(px_compute_gpu_t *g, float s) { (void)g, (void)s; unreachable(__func__); return -1; }
float px_compute_gpu_clip_adamw(px_compute_gpu_t *g, float c, float lr, float b1, float b2, float eps, float wd, int t) {
    (void)g, (void)c, (void)lr, (void)b1, (void)b2, (void)eps, (void)wd, (void)t;
    unreachable(__func__);
    return 0;
}
float *px_compute_gpu_grads(px_compute_gpu_t *g) { (void)g; unreachable(__func__); return NULL; }
px_pipe_model_t px_compute_gpu_pipe_model(px_compute_gpu_t *g) {
    (void)g;
    unreachable(__func__);
    return (px_pipe_model_t){0};
}
void px_compute_gpu_spare_put(px_compute_gpu_t *g, const float *h, size_t n) { (void)g, (void)h, (void)n; unreachable(__func__); }
void px_compute_gpu_spare_get(px_compute_gpu_t *g, float *h, size_t n) { (void)g, (void)h, (void)n; unreachable(__func__); }
void px_compute_gpu_download_begin(px_compute_gpu_t *g) { (void)g; unreachable(__func__); }
void px_compute_gpu_download_wait(px_compute_gpu_t *g) { (void)g; unreachable(__func__); }
void px_compute_gpu_upload(px_compute_gpu_t *g) { (void)g; unreachable(__func__); }
