/* Where the distributed trainer computes: the one place where the CPU and
 * the GPU differ for it (the trainer's files never ask which device they have).
 *
 * A px_compute_t wraps the replica's model on its device and covers what the
 * trainer does with it: zero the gradients, forward, backward, hand the
 * gradient buffer to the reduction, clip + AdamW, and make the gradient
 * reduction's communicators.
 *
 *   cpu   (compute.c) the px_gpt_t itself. Every call is the model's own
 *         function; the host state is the model's buffers, no copy; the
 *         gradients are reduced in place in the model's grads, the vote's
 *         tail in their spare room. Communicators: Gloo.
 *   cuda  (compute_cuda.c) a px_gpt_cuda_t on GPU rank % cudaGetDeviceCount.
 *         The gradients and their spare room are device memory; the vote's
 *         tail is kept on the host and copied into the spare room and back
 *         (px_compute_tail_put/get). Communicators: NCCL.
 *
 * Training state on the host. Healing, checkpoints, checksums and --save
 * work on host buffers (model/train_state.h): the host px_gpt_t's params, m
 * and v. On the CPU they are the live state. On the GPU they are a mirror
 * (pinned, where the driver allows): px_compute_host_state_begin starts
 * downloading them when the mirror is stale (every optimizer step makes it
 * stale) and px_compute_host_wait waits for the download, and
 * px_compute_host_written uploads them after the host state was written (a
 * heal, a restore, a rebuild of the initial state). A checkpoint's download
 * overlaps the next step: the saver calls px_compute_host_wait before it
 * reads. All are no-ops on the CPU.
 *
 * A build without CUDA links compute_nocuda.c instead of compute_cuda.c:
 * asking for cuda there fails with "built without CUDA". */
#ifndef PX_COMPUTE_H
#define PX_COMPUTE_H

#include <stddef.h>

#include "device.h" /* px_device_t, px_device_parse, px_cuda_available */
#include "gpt.h"
#include "pipeline.h"
#include "px_comm.h"
#include "sharded.h"
#include "vote.h"

typedef struct px_compute px_compute_t;

/* Whether `device` can be used by this process: 1, or 0 with the reason in
 * why (no GPU, built without CUDA or without NCCL). Never exits. */
int px_compute_usable(px_device_t device, char *why, size_t len);

/* A rank about to train on a GPU pays the one-time costs of its device and
 * of NCCL (px_comm_nccl_warm) before it registers: a restarted rank would
 * otherwise pay them inside its first quorum's rendezvous, with every other
 * group waiting. Logs what it took; a failure is only logged (the trainer
 * reports it properly). */
void px_compute_warm(int rank);

/* The compute of `host` (a whole replica; or, with shard, a sharded group's
 * rank: host is px_shard_model(shard)) on `device`; `rank` picks the GPU
 * (rank % devices). On cuda the host state (the model's params, m and v, or
 * the shard's buffers) is uploaded: restore or build it first; a shard then
 * computes in GPU memory (px_shard_use_memory), so px_shard_zero_grad,
 * _grad_sumsq, _step and _gather work there. NULL with a message in err.
 * `host` and shard must outlive the compute. */
px_compute_t *px_compute_new(px_device_t device, px_gpt_t *host, px_shard_t *shard, int rank, char *err,
                             size_t errlen);
void px_compute_destroy(px_compute_t **c);
/* How GPU computes made after this call compute, process-wide (a no-op on
 * the CPU, which computes in FP32): bf16 tensor-core math with the state in
 * FP32 (attention by the fused kernels unless unfused_attention), or FP32
 * (with tf32: products in TF32). */
void px_compute_set_math(px_precision_t precision, int tf32, int unfused_attention);
const char *px_compute_name(const px_compute_t *c); /* "cpu" or "cuda:N" */

void px_compute_zero_grad(px_compute_t *c);
/* The model's forward; the mean loss, or NAN on a bad input. */
float px_compute_forward(px_compute_t *c, const int *inputs, const int *targets, int B, int T);
/* Accumulates loss_scale * gradients of the last forward. 0, or -1. */
int px_compute_backward(px_compute_t *c, float loss_scale);
/* Clips the (reduced) gradients by their global norm and takes one AdamW
 * step (t: 1-based; beta1, beta2, eps as px_gpt_adamw_step). Returns the
 * norm before clipping. Not for a shard (px_shard_step: its norm is the
 * group's). */
float px_compute_clip_adamw(px_compute_t *c, float grad_clip, float lr, float beta1, float beta2, float eps,
                            float weight_decay, int t);
/* The same step on the host state in parts (px_gpt_adamw_step_parts:
 * visit sees each block as soon as it has its new values): a checkpoint's
 * snapshot taken by the step. Only where px_compute_state_on_host. */
float px_compute_clip_adamw_parts(px_compute_t *c, float grad_clip, float lr, float beta1, float beta2, float eps,
                                  float weight_decay, int t, size_t part_floats,
                                  void (*visit)(void *ctx, int k, size_t lo, size_t hi), void *ctx);

/* The buffer the reduction sums in place: num_params gradients (a shard's
 * n), then PX_GPT_GRADS_SPARE floats of room whose first PX_VOTE_N hold the
 * vote's tail. Device memory on cuda. */
float *px_compute_grads(px_compute_t *c);
/* The vote's tail as host memory (PX_VOTE_N floats): grads + num_params on
 * the CPU; on the GPU a host copy, moved into the grads' spare room by
 * tail_put (which also waits for the queued gradient work) and out of it by
 * tail_get. */
float *px_compute_tail(px_compute_t *c);
void px_compute_tail_put(px_compute_t *c);
void px_compute_tail_get(px_compute_t *c);

/* The stage model a pipeline runs on this compute (pipeline.h): the host
 * model's calls on the CPU, the CUDA model's on a GPU (device buffers; the
 * links must be this compute's communicators). */
px_pipe_model_t px_compute_pipe_model(px_compute_t *c);

/* A communicator for the gradient reduction (px_comm_new_gloo on the CPU,
 * px_comm_new_nccl on this compute's GPU). */
px_comm_t *px_compute_comm_new(px_compute_t *c, const px_store_t *store, const char *prefix, int rank, int size,
                               int timeout_ms, char *err, size_t errlen);
/* 1 when the reduction's communicators take host buffers (heal.c's
 * transfers can share them); 0 when the state needs Gloo communicators of
 * its own (NCCL moves device memory only). */
int px_compute_comms_take_host(const px_compute_t *c);

/* The device's state was written by someone else than this compute (a
 * shard's optimizer step, px_shard_step): the host copy is stale. */
void px_compute_state_changed(px_compute_t *c);
/* 1 when the host copy is older than the device's state (cuda, after an
 * optimizer step); always 0 on the CPU. */
int px_compute_host_stale(const px_compute_t *c);
/* Starts making them current and returns at once: on the GPU the download
 * runs while the next step's forward and backward compute (its optimizer
 * step waits for it on the device). Nothing may read the host copy before
 * px_compute_host_wait returns. */
void px_compute_host_state_begin(px_compute_t *c);
/* Blocks until the download begun last has landed; any thread (a
 * checkpoint saver's) may call it. No-op on the CPU. */
void px_compute_host_wait(px_compute_t *c);
/* 1 when the host model's buffers are the training state itself (the CPU:
 * every optimizer step writes them); 0 when they are a mirror that only a
 * download writes (cuda). */
int px_compute_state_on_host(const px_compute_t *c);
/* The host params, m and v were written: the device takes them. */
void px_compute_host_written(px_compute_t *c);

#endif
