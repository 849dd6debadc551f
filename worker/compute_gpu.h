/* Internal to worker/compute.c: the GPU half of px_compute_t. Defined by
 * compute_cuda.c in a CUDA build and by compute_nocuda.c (which only says
 * that the build has no CUDA) otherwise, so compute.c has no #ifdef. */
#ifndef PX_COMPUTE_GPU_H
#define PX_COMPUTE_GPU_H

#include <stddef.h>

#include "device.h" /* px_precision_t */
#include "gpt.h"
#include "pipeline.h"
#include "sharded.h"

typedef struct px_compute_gpu px_compute_gpu_t;

/* px_compute_warm's work on GPU rank % devices (a no-op without CUDA). */
void px_compute_gpu_warm(int rank);
/* px_compute_set_math's work (a no-op without CUDA). */
void px_compute_gpu_set_math(px_precision_t precision, int tf32, int unfused_attention);
/* 1 when a GPU can run this build's kernels; else 0 with the reason. */
int px_compute_gpu_usable(char *why, size_t len);
/* The model of `host` on GPU rank % devices, its params, m and v uploaded
 * (host must outlive it: its buffers are the mirror). */
px_compute_gpu_t *px_compute_gpu_new(px_gpt_t *host, int rank, char *err, size_t errlen);
/* A sharded group's rank on GPU rank % devices: the CUDA model computes with
 * the shard's source, and the shard computes in GPU memory
 * (px_shard_use_memory); its host buffers become the mirror. */
px_compute_gpu_t *px_compute_gpu_new_shard(px_shard_t *shard, int rank, char *err, size_t errlen);
void px_compute_gpu_destroy(px_compute_gpu_t **g);
int px_compute_gpu_device(const px_compute_gpu_t *g);

void px_compute_gpu_zero_grad(px_compute_gpu_t *g);
float px_compute_gpu_forward(px_compute_gpu_t *g, const int *inputs, const int *targets, int B, int T);
int px_compute_gpu_backward(px_compute_gpu_t *g, float loss_scale);
float px_compute_gpu_clip_adamw(px_compute_gpu_t *g, float grad_clip, float lr, float beta1, float beta2, float eps,
                                float weight_decay, int t);
/* The CUDA model as a pipeline's stage model (device buffers). */
px_pipe_model_t px_compute_gpu_pipe_model(px_compute_gpu_t *g);
float *px_compute_gpu_grads(px_compute_gpu_t *g); /* device: (n + PX_GPT_GRADS_SPARE), n the state's floats */
/* n floats between the host and the grads' spare room (past the state's).
 * put first waits for the gradient work queued on the model's stream. */
void px_compute_gpu_spare_put(px_compute_gpu_t *g, const float *host, size_t n);
void px_compute_gpu_spare_get(px_compute_gpu_t *g, float *host, size_t n);
/* params, m and v from the device to the host mirror: begin queues the copy
 * behind the work queued so far, on a stream of its own, and returns; the
 * next optimizer step on the device waits for it (not the host). wait
 * blocks until the last copy begun has landed; any thread may call it. A
 * shard's copy has landed when begin returns (its optimizer steps are the
 * shard's, which do not wait for a copy). */
void px_compute_gpu_download_begin(px_compute_gpu_t *g);
void px_compute_gpu_download_wait(px_compute_gpu_t *g);
/* params, m and v from the host mirror to the device (after any download). */
void px_compute_gpu_upload(px_compute_gpu_t *g);

#endif
