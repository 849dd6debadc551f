/* GPT-2 on the GPU: the CUDA twin of the CPU model (model/gpt.h), built from
 * the ops in kernels/ops_cuda.h in the same order as the CPU model calls the
 * ops in kernels/ops.h.
 *
 * State is four flat device buffers of num_params floats each (params, grads,
 * AdamW m and v) in llm.c's tensor order, the same layout as the CPU model's:
 * wte (Vp,C), wpe (maxT,C), ln1w (L,C), ln1b (L,C), qkvw (L,3C,C), qkvb (L,3C),
 * attprojw (L,C,C), attprojb (L,C), ln2w (L,C), ln2b (L,C), fcw (L,4C,C),
 * fcb (L,4C), fcprojw (L,C,4C), fcprojb (L,C), lnfw (C), lnfb (C).
 * The config type, the layout (px_gpt_tensor_sizes) and the config check are
 * the CPU model's own (gpt.h), so the layout is defined once, and a blob
 * downloaded from here is a CPU model's blob (checksums, checkpoints, llm.c
 * files, healing), and the reverse: px_gpt_cuda_upload().
 *
 * There is no initializer here: a new model is all zeros. Initialize on the
 * host (px_gpt_new, seeded) and upload, so CPU and GPU runs start from the
 * same bits and the init code exists once.
 *
 * Training step:
 *     px_gpt_cuda_zero_grad(m);
 *     for each of k micro-batches: px_gpt_cuda_forward(m, x, y, B, T);
 *                                  px_gpt_cuda_backward(m, 1.0f/k);
 *     float norm = px_gpt_cuda_clip_grads(m, 1.0f);
 *     px_gpt_cuda_adamw_step(m, lr, 0.9f, 0.95f, 1e-8f, 0.1f, step + 1);
 * Token arrays are host memory; everything else stays on the device. All work
 * is queued on the model's own stream; functions returning host values
 * (forward's loss, the norm, downloads) synchronize it. A CUDA or cuBLAS
 * failure exits the process (see ops_cuda.h); bad arguments return an error. */
#ifndef PX_GPT_CUDA_H
#define PX_GPT_CUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "gpt.h" /* px_gpt_config_t and the blob layout (px_gpt_tensor_sizes) */

/* The four state buffers. */
typedef enum {
    PX_GPT_CUDA_PARAMS = 0,
    PX_GPT_CUDA_GRADS = 1,
    PX_GPT_CUDA_M = 2, /* AdamW first moment */
    PX_GPT_CUDA_V = 3  /* AdamW second moment */
} px_gpt_cuda_buf_t;

typedef struct px_gpt_cuda px_gpt_cuda_t;

/* A model on the current CUDA device with all four buffers zero. Returns NULL
 * (logged, with the reason) on an invalid config, no usable GPU, or out of
 * GPU memory. */
px_gpt_cuda_t *px_gpt_cuda_new(const px_gpt_config_t *cfg);
/* A sharded model (gpt.h, "sharded models"): activations only, no state
 * buffers (num_params 0; the buffer, transfer and optimizer calls do not
 * apply). Every unit's parameters and gradients come from src as views of
 * device memory, one unit at a time, in the CPU model's order; with
 * tp.size > 1 a layer's tensors are this rank's Megatron slices and
 * src->tp_sum sums a device buffer over the tensor-parallel ranks (after
 * waiting for this model's stream: px_gpt_cuda_stream). A source's
 * acquire, release and tp_sum are called from the host thread that runs
 * the pass, between the kernels it queues. NULL (logged) on a bad config
 * or tp, or no usable GPU. */
px_gpt_cuda_t *px_gpt_cuda_new_sharded(const px_gpt_config_t *cfg, px_gpt_tp_t tp, const px_gpt_source_t *src);
void px_gpt_cuda_destroy(px_gpt_cuda_t **self);

const px_gpt_config_t *px_gpt_cuda_config(const px_gpt_cuda_t *self);
/* 1 when the activations are stored in bf16: with bf16 math
 * (px_cuda_ops_set_math, read at creation). The parameters, their
 * gradients and the AdamW moments are FP32 either way. */
int px_gpt_cuda_bf16_activations(const px_gpt_cuda_t *self);
/* 1 when attention runs fused (flash_attention_*_cuda): bf16 math, a head
 * size the fused kernels take, sm_80 or newer, and
 * px_cuda_ops_fused_attention() at creation. */
int px_gpt_cuda_fused_attention(const px_gpt_cuda_t *self);
size_t px_gpt_cuda_num_params(const px_gpt_cuda_t *self);
/* Offset of tensor i (PX_WTE..PX_LNFB) in each of the four buffers: the
 * same as the CPU model's tensor_offsets. */
size_t px_gpt_cuda_tensor_offset(const px_gpt_cuda_t *self, int tensor);
/* Device pointer to one state buffer (num_params floats): for collectives.
 * grads has PX_GPT_GRADS_SPARE floats of room past num_params that the model
 * never reads or writes, as the CPU model's (gpt.h). */
float *px_gpt_cuda_buffer(px_gpt_cuda_t *self, px_gpt_cuda_buf_t which);
/* The stream all of this model's work is queued on. */
cudaStream_t px_gpt_cuda_stream(const px_gpt_cuda_t *self);

/* Copies a whole state buffer from / to host memory; n must equal num_params
 * (a px_gpt_t's params/grads/m/v buffer fits exactly).
 * Return 0, or -1 (logged) on a size mismatch. Synchronous. */
int px_gpt_cuda_upload(px_gpt_cuda_t *self, px_gpt_cuda_buf_t which, const float *host, size_t n);
int px_gpt_cuda_download(px_gpt_cuda_t *self, px_gpt_cuda_buf_t which, float *host, size_t n);

/* Forward pass on host inputs (B,T) of token ids in [0,V), T <= maxT. With
 * host targets (B,T) it returns the mean cross-entropy loss; with targets NULL
 * it returns -1 and only the logits are meaningful. Returns NAN (logged) on a
 * bad shape or token. Activations are (re)allocated for the largest B*T seen. */
float px_gpt_cuda_forward(px_gpt_cuda_t *self, const int *inputs, const int *targets, int B,
                          int T);
/* ---- pipeline stages (gpt.h's px_gpt_stage_t, as px_gpt_set_stage) ----
 * set_stage makes the model the stage st with `slots` micro-batches'
 * activations held at once (split 1: the backward may run as an input half
 * and a weight half) and drops the activations held so far; 0, or -1
 * (logged). A later stage's forward takes its input x (B,T,C) in device
 * memory; its output and a backward's input gradient are device memory too,
 * complete when the calls below return them. The last stage's forward
 * returns the mean loss against host targets (0 on other stages, NAN
 * logged on failure); a backward ACCUMULATES into the gradients (0, or -1).
 * px_gpt_cuda_forward and _backward are slot 0's. */
int px_gpt_cuda_set_stage(px_gpt_cuda_t *self, const px_gpt_stage_t *st, int slots, int split);
/* Block-level activation recomputation, as the CPU model's
 * (px_gpt_set_recompute in gpt.h): with on, a slot keeps each layer's input
 * and one layer's worth of the other activations; a layer's backward runs
 * its forward again first, with the parameters it acquired for the
 * backward. Losses and gradients are bitwise those without. A model
 * setting, kept across px_gpt_cuda_set_stage; drops the activations held.
 * 0, or -1 (logged): on neither 0 nor 1, or out of memory. */
int px_gpt_cuda_set_recompute(px_gpt_cuda_t *self, int on);
float px_gpt_cuda_stage_forward(px_gpt_cuda_t *self, int slot, const int *inputs, const float *x, const int *targets,
                                int B, int T);
const float *px_gpt_cuda_stage_output(px_gpt_cuda_t *self, int slot);
int px_gpt_cuda_stage_batch(const px_gpt_cuda_t *self, int slot);
/* dout: the output's gradient (device) on a stage before the last; weights
 * 0 runs the input half only (split stages). */
int px_gpt_cuda_stage_backward(px_gpt_cuda_t *self, int slot, const float *dout, float loss_scale, int weights);
int px_gpt_cuda_stage_backward_weights(px_gpt_cuda_t *self, int slot);
const float *px_gpt_cuda_stage_input_grad(px_gpt_cuda_t *self, int slot);

/* Copies the last forward's logits (B,T,Vp) / per-position losses (B,T) to
 * host memory (as FP32, also when stored in bf16); n must equal the
 * element count. The logits are destroyed by
 * px_gpt_cuda_backward, and with bf16 math already by a forward with
 * targets (the fused classifier writes the gradient over them): then
 * download_logits refuses. Return 0, or -1 (logged). */
int px_gpt_cuda_download_logits(px_gpt_cuda_t *self, float *host, size_t n);
int px_gpt_cuda_download_losses(px_gpt_cuda_t *self, float *host, size_t n);

void px_gpt_cuda_zero_grad(px_gpt_cuda_t *self);
/* Backward pass of the last forward (which must have had targets):
 * ACCUMULATES loss_scale * d(mean loss)/d(params) into grads. Returns 0, or -1
 * (logged) when there is no forward with targets to differentiate. */
int px_gpt_cuda_backward(px_gpt_cuda_t *self, float loss_scale);

/* Global L2 norm of grads (double accumulation, fixed order). */
float px_gpt_cuda_grad_norm(px_gpt_cuda_t *self);
/* torch.nn.utils.clip_grad_norm_: when norm > max_norm, grads *= max_norm /
 * (norm + 1e-6). max_norm <= 0 disables clipping. Returns the norm before. */
float px_gpt_cuda_clip_grads(px_gpt_cuda_t *self, float max_norm);
/* One AdamW step over all tensors; weight decay only on the 2-D matrices (wte,
 * wpe, qkvw, attprojw, fcw, fcprojw). t is the 1-based step (bias correction). */
void px_gpt_cuda_adamw_step(px_gpt_cuda_t *self, float lr, float beta1, float beta2, float eps,
                            float weight_decay, int t);

#ifdef __cplusplus
}
#endif

#endif
