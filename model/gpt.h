/* GPT-2 (pre-LayerNorm, learned positions, output projection tied to the
 * token embedding): the model every phalanx worker trains.
 *
 * State is four flat float buffers of num_params floats each, in llm.c's
 * tensor order: params, grads, and AdamW's m and v. One buffer is what gets
 * checksummed, sent to a healing peer, written to a checkpoint, and averaged
 * across replica groups with a single allreduce, so the layout is part of the
 * API: px_gpt_tensor_sizes() and the named views say where each tensor lives.
 *
 * Training step, single process:
 *     px_gpt_zero_grad(m);
 *     for each of k micro-batches: px_gpt_forward(m, x, y, B, T); px_gpt_backward(m, 1.0f/k);
 *     float norm = px_gpt_clip_grads(m, 1.0f);
 *     px_gpt_adamw_step(m, px_lr_at(step, ...), 0.9f, 0.95f, 1e-8f, 0.1f, step + 1);
 * The same seed and OpenMP thread count give bitwise identical results. */
#ifndef PX_GPT_H
#define PX_GPT_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int max_seq_len;       /* maxT: context length, rows of wpe */
    int vocab_size;        /* V: real vocabulary */
    int padded_vocab_size; /* Vp >= V: rows of wte, padded for aligned matmuls */
    int num_layers;        /* L */
    int num_heads;         /* NH, divides C */
    int channels;          /* C */
} px_gpt_config_t;

/* Presets: "tiny" (L=2 C=64 NH=4 maxT=64 V=256), "small" (L=4 C=256 NH=8
 * maxT=256 V=256), "gpt2-124m" (L=12 C=768 NH=12 maxT=1024 V=50257, Vp=50304).
 * Returns 0, or -1 for an unknown name. */
int px_gpt_config_preset(const char *name, px_gpt_config_t *cfg);
/* Comma-separated preset names, for --help. */
const char *px_gpt_preset_names(void);
/* 0 when the config is usable; else -1 with the problem written to err. */
int px_gpt_config_check(const px_gpt_config_t *cfg, char *err, size_t errlen);

/* The parameter tensors, in llm.c order. */
enum {
    PX_WTE, PX_WPE, PX_LN1W, PX_LN1B, PX_QKVW, PX_QKVB, PX_ATTPROJW, PX_ATTPROJB,
    PX_LN2W, PX_LN2B, PX_FCW, PX_FCB, PX_FCPROJW, PX_FCPROJB, PX_LNFW, PX_LNFB,
    PX_GPT_NUM_TENSORS
};

/* Named views into one buffer (params or grads). */
typedef struct {
    float *wte;      /* (Vp, C) */
    float *wpe;      /* (maxT, C) */
    float *ln1w;     /* (L, C) */
    float *ln1b;     /* (L, C) */
    float *qkvw;     /* (L, 3C, C) */
    float *qkvb;     /* (L, 3C) */
    float *attprojw; /* (L, C, C) */
    float *attprojb; /* (L, C) */
    float *ln2w;     /* (L, C) */
    float *ln2b;     /* (L, C) */
    float *fcw;      /* (L, 4C, C) */
    float *fcb;      /* (L, 4C) */
    float *fcprojw;  /* (L, C, 4C) */
    float *fcprojb;  /* (L, C) */
    float *lnfw;     /* (C) */
    float *lnfb;     /* (C) */
} px_gpt_tensors_t;

extern const char *const px_gpt_tensor_names[PX_GPT_NUM_TENSORS];
/* Element count of each tensor, in order; returns the total. */
size_t px_gpt_tensor_sizes(const px_gpt_config_t *cfg, size_t sizes[PX_GPT_NUM_TENSORS]);
/* 1 for the 2-D weight matrices (wte, wpe, qkvw, attprojw, fcw, fcprojw), which take weight decay. */
int px_gpt_tensor_is_matrix(int tensor);

struct px_gpt_acts; /* activations and scratch, private to gpt.c */

/* ---- sharded models (parallel/sharded.h builds on these) ----
 *
 * A sharded rank does not hold the four buffers. Its parameters come, one
 * unit at a time, from a source: unit 0 is the outer unit (wte, wpe, lnfw,
 * lnfb: embeddings, final LayerNorm and the tied LM head), unit 1 + l is
 * layer l. The forward acquires unit 0, then each layer in order, and
 * releases each layer after it; the backward acquires unit 0 again, then the
 * layers in reverse, releasing each (with its gradients) as soon as its
 * backward is done, and unit 0 last. A unit's view fills only its own fields
 * of px_gpt_tensors_t; a layer's fields point at that one layer's tensors.
 *
 * Tensor parallelism (Megatron): with tp.size = T > 1 a layer's tensors are
 * this rank's slices: qkvw (3C/T, C) and qkvb (3C/T) hold heads
 * [r*NH/T, (r+1)*NH/T) of q, k and v; fcw (4C/T, C), fcb (4C/T) a block of
 * the MLP's hidden units (column parallel); attprojw (C, C/T) and fcprojw
 * (C, 4C/T) the matching input columns (row parallel). Their biases, the
 * LayerNorms and the outer unit are replicated. The forward sums the two
 * row-parallel outputs over the T ranks (tp_sum; rank 0 adds the bias), the
 * backward sums the input gradients of the two column-parallel layers. */
typedef struct {
    int size; /* T: ranks that split each layer, 1 for none */
    int rank; /* this rank's coordinate, 0..T-1 */
} px_gpt_tp_t;

typedef enum { PX_GPT_FWD = 0, PX_GPT_BWD = 1 } px_gpt_pass_t;

/* Units of a model: 1 + num_layers. */
#define PX_GPT_UNITS(cfg) (1 + (cfg)->num_layers)

/* A model with its own buffers may have a source too, with acquire NULL
 * (views into the buffers) and only release set: a data-parallel trainer
 * learns there when a unit's gradients are final (worker/reducer.h). */
typedef struct {
    void *ctx;
    /* Unit `unit`'s parameters into p; in the backward also its gradients
     * into g (buffers the backward ACCUMULATES into). 0, or -1 (the pass
     * fails: forward NAN, backward -1). */
    int (*acquire)(void *ctx, int unit, px_gpt_pass_t pass, px_gpt_tensors_t *p, px_gpt_tensors_t *g);
    /* Done with the unit in this pass (its gradients are final after a
     * backward release). 0 or -1. */
    int (*release)(void *ctx, int unit, px_gpt_pass_t pass);
    /* buf[n] summed over the tensor-parallel ranks, in place. 0 or -1. */
    int (*tp_sum)(void *ctx, float *buf, size_t n);
} px_gpt_source_t;

/* A whole model's views v (every layer stacked, llm.c order) moved to
 * layer l's tensors: the per-layer fields then point at that one layer's,
 * the outer ones are left as they are. For host or device memory alike. */
void px_gpt_layer_view(px_gpt_tensors_t *v, const px_gpt_config_t *cfg, int l);

/* Element counts of tensor `tensor`'s slice in one unit on a rank of tp:
 * for a per-layer tensor one layer's slice, for the outer tensors the whole
 * tensor. 0 for a tensor that is not in `unit`. */
size_t px_gpt_unit_tensor_size(const px_gpt_config_t *cfg, px_gpt_tp_t tp, int unit, int tensor);
/* 0 when cfg can be split over tp.size ranks; else -1 with the problem
 * (heads or hidden units not divisible) in err. */
int px_gpt_tp_check(const px_gpt_config_t *cfg, int tp_size, char *err, size_t errlen);

/* Pipeline stages. A stage runs layers [first_layer, first_layer +
 * num_layers) of the model; the first stage also embeds the tokens, the last
 * runs the final LayerNorm, the tied LM head and the loss. Its source hands
 * it only those layers' units and, on the first and the last stage, unit 0
 * (acquired around the whole pass, as in a whole model). A whole model is
 * the stage {0, L, 1, 1}. */
typedef struct {
    int first_layer, num_layers;
    int first, last;
} px_gpt_stage_t;

/* Stage s of P (P <= num_layers): the layers cut into P contiguous runs of
 * at least one layer each, balanced by forward FLOPs per token at context
 * T (a layer 24C^2 + 2TC, the LM head 2VpC on the last stage; the embedding
 * is a lookup), minimising the most any stage costs; ties go to the cut
 * that puts more layers earlier. Pure. */
px_gpt_stage_t px_gpt_pipeline_stage(const px_gpt_config_t *cfg, int T, int P, int s);

/* Floats of room past num_params in grads that the model never reads or
 * writes: a data-parallel trainer appends a few values of its own there (the
 * commit vote, worker/vote.h) and reduces them with the gradients in one
 * collective, in place, instead of copying the gradients out and back. */
#define PX_GPT_GRADS_SPARE 16

typedef struct {
    px_gpt_config_t config;
    size_t num_params;
    size_t tensor_sizes[PX_GPT_NUM_TENSORS];
    size_t tensor_offsets[PX_GPT_NUM_TENSORS]; /* into each of the four buffers */
    float *params;         /* (num_params) */
    float *grads;          /* (num_params + PX_GPT_GRADS_SPARE), same layout; the spare
                              floats past num_params are the caller's (see below) */
    float *m;              /* (num_params), AdamW first moment */
    float *v;              /* (num_params), AdamW second moment */
    px_gpt_tensors_t p;    /* views into params */
    px_gpt_tensors_t g;    /* views into grads */
    float mean_loss;       /* of the last forward with targets, else -1 */
    struct px_gpt_acts *acts;     /* [nslots]: one micro-batch's activations each */
    int nslots;
    px_gpt_stage_t stage;         /* the whole model unless px_gpt_set_stage */
    int split;                    /* backward may run as two halves (px_gpt_stage_backward) */
    int recompute;                /* block recomputation on (px_gpt_set_recompute) */
    px_gpt_tp_t tp;               /* {1, 0} unless sharded */
    const px_gpt_source_t *src;   /* NULL: the four buffers above hold the model */
} px_gpt_t;

/* A model with seeded initialisation: weights N(0, 0.02), the two residual
 * projections (attprojw, fcprojw) N(0, 0.02/sqrt(2L)), LayerNorm weights 1,
 * biases 0, padded wte rows 0; grads, m, v zero. Each tensor draws from its own
 * stream (seed, tensor, chunk), so the result does not depend on threads.
 * Returns NULL on an invalid config (logged) or out of memory. */
px_gpt_t *px_gpt_new(const px_gpt_config_t *cfg, uint64_t seed);
/* Part of px_gpt_new's initial parameters without the whole model: the
 * elements of tensor `tensor` (logical, llm.c order, all layers stacked)
 * in the runs run(ctx, k, &lo, &len) gives for k = 0, 1, ... until it
 * returns 0, written one after another into out. The same bits as
 * px_gpt_new(cfg, seed)'s; each random chunk is drawn once when the runs
 * come in increasing order. 0, or -1 when out of memory. */
typedef int (*px_gpt_init_run_t)(void *ctx, size_t k, size_t *lo, size_t *len);
int px_gpt_init_slice(const px_gpt_config_t *cfg, uint64_t seed, int tensor, px_gpt_init_run_t run, void *run_ctx,
                      float *out);
/* Same, with every buffer zero: for loaders and healing receivers that fill params. */
px_gpt_t *px_gpt_new_zeroed(const px_gpt_config_t *cfg);
void px_gpt_destroy(px_gpt_t **self);
/* A sharded model: activations only (params, grads, m and v are NULL and
 * num_params 0); every unit's parameters come from src, which must outlive
 * it. Forward and backward work as below; the optimizer calls do not apply
 * (the source's owner updates its shards). NULL on a bad config or split
 * (logged) or out of memory. */
px_gpt_t *px_gpt_new_sharded(const px_gpt_config_t *cfg, px_gpt_tp_t tp, const px_gpt_source_t *src);

/* Forward pass on inputs (B,T) of token ids in [0, V), T <= maxT. With targets
 * (B,T) it computes the per-position cross-entropy and returns the mean loss;
 * with targets NULL it returns -1 and only the logits are meaningful. Returns NAN
 * (and logs why) on a bad shape or token. Activations are (re)allocated for the
 * largest B*T seen. */
float px_gpt_forward(px_gpt_t *self, const int *inputs, const int *targets, int B, int T);
/* Logits (B,T,Vp) of the last forward. Destroyed by px_gpt_backward. */
const float *px_gpt_logits(const px_gpt_t *self);
/* Per-position losses (B,T) of the last forward with targets. */
const float *px_gpt_losses(const px_gpt_t *self);

void px_gpt_zero_grad(px_gpt_t *self);
/* Backward pass of the last forward (which must have had targets): ACCUMULATES
 * loss_scale * d(mean loss)/d(params) into grads. k micro-batches with
 * loss_scale 1/k give the gradient of one batch k times as large. Returns 0, or -1
 * (logged) when there is no forward with targets to differentiate. */
int px_gpt_backward(px_gpt_t *self, float loss_scale);

/* ---- pipeline stages ----
 * Makes self the stage st with `slots` micro-batches' activations held at
 * once (a pipeline schedule's peak in flight); with split, the backward may
 * run as an input half and a weight half (zero-bubble schedules), which
 * keeps the output gradients of every matmul in between. Drops the
 * activations held so far. 0, or -1 (logged) on a stage outside the model. */
int px_gpt_set_stage(px_gpt_t *self, const px_gpt_stage_t *st, int slots, int split);
/* Forward of one micro-batch into activation slot `slot`: the first stage
 * embeds inputs (B,T) of tokens, a later one reads x (B,T,C), the previous
 * stage's output. The last stage returns the mean loss against targets (or
 * -1 without); another returns 0 and leaves its output (B,T,C) at
 * px_gpt_stage_output. NAN (logged) on failure. */
float px_gpt_stage_forward(px_gpt_t *self, int slot, const int *inputs, const float *x, const int *targets, int B,
                           int T);
const float *px_gpt_stage_output(const px_gpt_t *self, int slot);
/* Samples (B) of the slot's last forward. */
int px_gpt_stage_batch(const px_gpt_t *self, int slot);
/* Backward of slot's forward: the last stage from its loss (scaled by
 * loss_scale), another from dout (B,T,C), the gradient of its output.
 * ACCUMULATES into the gradients; a stage after the first leaves its input's
 * gradient (B,T,C) at px_gpt_stage_input_grad. With weights 0 (split
 * stages) only the input half runs; px_gpt_stage_backward_weights runs the
 * other later. 0, or -1 (logged) out of order. */
int px_gpt_stage_backward(px_gpt_t *self, int slot, const float *dout, float loss_scale, int weights);
int px_gpt_stage_backward_weights(px_gpt_t *self, int slot);
const float *px_gpt_stage_input_grad(const px_gpt_t *self, int slot);
/* Block-level activation recomputation (Korthikanti et al. 2022, "full"
 * recompute with one layer a block, as Megatron's --recompute-granularity
 * full --recompute-method uniform --recompute-num-layers 1). With on, a
 * slot keeps only each layer's input (the residual stream) and one layer's
 * worth of the other activations, shared by the slot's layers; the backward
 * of a layer runs the layer's forward again first, with the parameters it
 * acquired for the backward (no second acquire; on tensor-parallel ranks the
 * forward's sums run again, in the same order on every rank). About one more
 * forward per step; losses and gradients are bitwise those without it. A
 * split backward runs the forward again in each half (the weight half needs
 * the layer's inputs to its matmuls): two more forwards per layer. A model
 * setting, kept across px_gpt_set_stage. Drops the activations held, like
 * px_gpt_set_stage. 0, or -1: on neither 0 nor 1 (logged), or out of memory. */
int px_gpt_set_recompute(px_gpt_t *self, int on);
/* Bytes of activations allocated, all slots. */
size_t px_gpt_activation_bytes(const px_gpt_t *self);

/* Global L2 norm of grads (double accumulation, fixed order). */
float px_gpt_grad_norm(px_gpt_t *self);
/* torch.nn.utils.clip_grad_norm_: when norm > max_norm, scale grads by
 * max_norm / (norm + 1e-6). max_norm <= 0 disables clipping. Returns the norm
 * before clipping. */
float px_gpt_clip_grads(px_gpt_t *self, float max_norm);
/* One AdamW step over all tensors (torch.optim.AdamW arithmetic); weight decay
 * only on the 2-D matrices. t is the 1-based step count (bias correction). */
void px_gpt_adamw_step(px_gpt_t *self, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int t);
/* The same step (bitwise) over the parameter vector cut into parts of
 * part_floats (the last one shorter), part k on one OpenMP thread in
 * blocks; visit(ctx, k, lo, hi) runs on that thread right after floats
 * [lo, hi) of params, m and v got their new values, while they are in its
 * cache, for each part's blocks in order (a checkpoint's snapshot taken
 * during the step: checkpoint/ckpt.h, px_ckpt_pass_*). */
void px_gpt_adamw_step_parts(px_gpt_t *self, float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                             size_t part_floats, void (*visit)(void *ctx, int k, size_t lo, size_t hi), void *ctx);

/* Learning rate at 0-based `step`: linear warmup to max_lr over `warmup` steps
 * ((step+1)/warmup * max_lr), then cosine decay to min_lr at step `total`;
 * min_lr from then on. Pure. */
float px_lr_at(int step, int warmup, int total, float max_lr, float min_lr);

/* Training FLOPs of one forward+backward on B x T tokens, for reporting
 * achieved FLOP/s: 3x the forward's matmul FLOPs plus attention counted over
 * the causal half only (the T(T+1)/2 query-key pairs actually needed). This is
 * below the usual 6N + 12LTC per token, which counts the full score matrix. */
double px_gpt_flops_per_step(const px_gpt_config_t *cfg, int B, int T);

#endif
