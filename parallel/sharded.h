/* The training state of one rank of a sharded replica group (FSDP x TP,
 * docs/architecture.md, "Sharded groups"), and the parameter source
 * that the model (model/gpt.h, px_gpt_source_t) computes with.
 *
 * Layout. The model is cut into units (gpt.h): unit 0 = wte, wpe, lnfw,
 * lnfb; unit 1 + l = layer l's twelve tensors, each as this rank's tensor-
 * parallel slice (gpt.h says which). A unit's tensors are laid end to end
 * in that order (its "flat" layout, the same on every rank of one tp
 * coordinate), padded with zeros to a multiple of F, and FSDP rank f owns
 * the f-th of F equal pieces. A rank's shard buffers (params, grads, m, v)
 * are its pieces of every unit, unit after unit: 1/(F*T) of the model's
 * matrices and 1/F of its replicated tensors. Checkpoints, healing and
 * checksums all see these buffers (px_train_state_t over them).
 *
 * Compute. The forward all-gathers each unit's pieces over the fsdp axis
 * just before the unit runs; the backward gathers again (or reuses the
 * forward's gather with keep_params), and reduce-scatters the unit's
 * gradients as soon as its backward is done, adding this rank's piece into
 * the shard's grads. The gathers of the next layer are prefetched on a
 * communication thread (the only thread that uses the fsdp communicator)
 * while the current layer computes: at most two layers are gathered at once
 * (all L with keep_params), plus unit 0, which stays gathered from the
 * forward to the end of the backward (it holds the tied LM head). Tensor-
 * parallel sums run on the caller's thread, on the tp communicator. With
 * F = 1 the pieces are whole units and nothing is gathered or scattered.
 *
 * Optimizer. Clipping needs the global gradient norm: px_shard_grad_sumsq
 * gives this rank's part (tensors replicated over tp counted by tp rank 0
 * only), summed over the group by the caller; the AdamW step then runs on
 * the shard alone, tensor segment by segment (weight decay on matrices). */
#ifndef PX_SHARDED_H
#define PX_SHARDED_H

#include <stddef.h>

#include "gpt.h"
#include "px_comm.h"
#include "train_state.h"

typedef struct px_shard px_shard_t;

typedef struct {
    int fsdp, fsdp_rank; /* F and this rank's coordinate */
    px_gpt_tp_t tp;      /* T and this rank's coordinate */
    int keep_params;     /* keep every layer gathered from the forward for the backward */
    /* A pipeline stage (num_layers 0: the whole model): the rank holds only
     * the units of its layers and, on the first and the last stage, unit 0
     * (the tied embedding: the first stage's copy counts as the unique one
     * in norms and checkpoints; the two copies' gradients are summed by the
     * caller before the step, px_shard_tie_outer). */
    px_gpt_stage_t stage;
} px_shard_layout_t;

/* Public state: the four shard buffers, n floats each (grads has
 * PX_GPT_GRADS_SPARE more: the caller's, as in px_gpt_t). */
typedef struct {
    float *params, *grads, *m, *v;
    size_t n;
} px_shard_bufs_t;

/* Where a shard computes. The buffers of px_shard_bufs are host memory:
 * what init, load, place, checkpoints and heals read and write. By default
 * the model computes in them too. px_shard_use_memory gives the shard
 * another memory (a GPU's: worker/compute_cuda.c): the shard then computes
 * in a copy of its buffers there (px_shard_compute_bufs), its working
 * buffers (gathered units) live there, and every compute-side function
 * below (the source, zero_grad, the sums of squares, step, gather) works on
 * that copy through these operations; the caller moves params, m and v
 * between the two copies. The communicators must take that memory (NCCL
 * for a GPU's). */
typedef struct {
    void *ctx;
    float *(*alloc)(void *ctx, size_t n); /* n zeroed floats; NULL when out of memory */
    void (*release)(void *ctx, float *p);
    void (*copy)(void *ctx, float *dst, const float *src, size_t n);        /* either side; done on return */
    void (*zero)(void *ctx, float *p, size_t n);                            /* queued behind the compute */
    void (*fence)(void *ctx);                                               /* the compute queued so far is done */
    void (*accumulate)(void *ctx, float *dst, const float *src, size_t n);  /* dst += src, done on return; any thread */
    double (*sumsq)(void *ctx, const float *x, size_t n);                   /* sum of squares (as ops.h's norm_squared) */
    void (*scale)(void *ctx, float *x, size_t n, float coef);
    void (*adamw)(void *ctx, float *p, float *m, float *v, const float *g, size_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int t); /* ops.h's adamw_update */
} px_shard_memory_t;

/* A shard of cfg for layout (checked: tp divides the heads, sizes >= 1),
 * every buffer zero. NULL with the problem in err. */
px_shard_t *px_shard_new(const px_gpt_config_t *cfg, const px_shard_layout_t *layout, char *err, size_t errlen);
void px_shard_destroy(px_shard_t **sh);

px_shard_bufs_t *px_shard_bufs(px_shard_t *sh);
/* Computes in `mem` from here on (see px_shard_memory_t): allocates the
 * compute copy there and copies params, m and v into it. Call before any
 * communicator is set. 0, or -1 with the problem in err (the shard is
 * unchanged). */
int px_shard_use_memory(px_shard_t *sh, const px_shard_memory_t *mem, char *err, size_t errlen);
/* The buffers the shard computes in: px_shard_bufs's own unless it uses
 * another memory. */
px_shard_bufs_t *px_shard_compute_bufs(px_shard_t *sh);
/* The parameter source the model computes with (its views point into the
 * compute memory), for a model made elsewhere (the GPU's). */
const px_gpt_source_t *px_shard_source(px_shard_t *sh);
/* The model that computes with this shard (owned by it). */
px_gpt_t *px_shard_model(px_shard_t *sh);

/* This rank's pieces of px_gpt_new(cfg, seed)'s parameters (m, v zero),
 * drawn without building the whole model: the same bits, in memory for one
 * random chunk. 0, or -1 when out of memory. */
int px_shard_init(px_shard_t *sh, uint64_t seed);
/* This rank's pieces of a whole model's params, m and v (src a plain
 * px_gpt_t of the same config). */
void px_shard_load(px_shard_t *sh, const px_gpt_t *src);
/* Collective over every axis: dst (a plain px_gpt_t of the same config) gets
 * the whole model's params on every rank. 0, or -1 on a communicator error. */
int px_shard_gather(px_shard_t *sh, px_gpt_t *dst);

/* The two copies of the tied embedding get the sum of their gradients:
 * this rank's unit 0 gradient piece is exchanged with the same piece of
 * rank `peer` of c (the other end of the pipeline; send_first on one end,
 * not on the other) and the peer's is added to it (a + b == b + a: both
 * copies stay equal to the bit). No-op without unit 0. 0, or -1 on a
 * communicator error or out of memory. */
int px_shard_tie_outer(px_shard_t *sh, px_comm_t *c, int peer, int send_first);

/* The communicators of the current quorum (NULL for an axis of size 1, or
 * to detach; pp is used only by px_shard_gather). Waits for the communication thread to finish what it was
 * given first, so call it only after aborting communicators that are
 * being replaced. */
void px_shard_set_comms(px_shard_t *sh, px_comm_t *fsdp, px_comm_t *tp, px_comm_t *pp);
/* Why the last compute failed ("" when it did not). */
const char *px_shard_last_error(const px_shard_t *sh);

void px_shard_zero_grad(px_shard_t *sh);
/* Sum of squares of this rank's unique gradients (see the top). */
double px_shard_grad_sumsq(const px_shard_t *sh);
/* Same for the parameters (the final parameter norm). */
double px_shard_param_sumsq(const px_shard_t *sh);
/* Clipping by the global norm (torch's clip_grad_norm_ arithmetic, as
 * px_gpt_clip_grads), then one AdamW step over the shard. */
void px_shard_step(px_shard_t *sh, float norm, float max_norm, float lr, float beta1, float beta2, float eps,
                   float weight_decay, int t);

/* Bytes of params + grads + m + v held by this rank, and the working
 * buffers (gathered units and their gradients) on top. */
size_t px_shard_state_bytes(const px_shard_t *sh);
size_t px_shard_work_bytes(const px_shard_t *sh);
/* Bytes this rank has sent so far in its fsdp collectives (ring all-gather
 * and reduce-scatter: (F-1) pieces each) and its tp sums (ring all-reduce:
 * 2(T-1)/T of the buffer), for reports and the benchmark. */
void px_shard_bytes_sent(const px_shard_t *sh, double *fsdp, double *tp);

/* A rectangle of one logical tensor (gpt.h's tensor kind, layer 0 for the
 * outer ones) that a rank holds: rows [row0, row0 + nrows) and columns
 * [col0, col0 + ncols) of the tensor seen as rows of K floats (a matrix's
 * own rows; a vector is one row, or K = 1 for a tensor-parallel bias). Its
 * floats lie row-major at shard_off in the rank's shard buffers. */
typedef struct {
    int tensor, layer;
    size_t K, row0, nrows, col0, ncols;
    size_t shard_off;
} px_shard_rect_t;
typedef int (*px_shard_rect_fn)(void *ctx, const px_shard_rect_t *r);

/* Every rectangle the rank of `layout` holds and no other rank holds too
 * (a tensor replicated over tp counts on tp rank 0 only), in shard order
 * (padding skipped), for any rank, without building its shard: the slices
 * of a checkpoint's manifest. Stops at and returns fn's first non-zero. */
int px_shard_rects(const px_gpt_config_t *cfg, const px_shard_layout_t *layout, px_shard_rect_fn fn, void *ctx);
/* The runs (shard offset, floats) behind those rectangles, in order, into
 * runs[cap] (may be NULL to count); returns how many there are. The
 * rectangles of px_shard_rects tile exactly these runs. */
size_t px_shard_runs(const px_shard_t *sh, size_t (*runs)[2], size_t cap);

/* A checkpoint's slice into this rank's shard (the restore sink of
 * checkpoint/ckpt.h, px_ckpt_sink_t): the logical tensor that starts at
 * float `offset` of a whole state's buffer, of shape shape[ndim], elements
 * start[] + count[] (row-major values); every element of it this rank
 * holds, replicated copies included, lands in place in dst, a buffer laid
 * out like the shard's (its params, m or v, or DiLoCo's global parameters
 * or outer momentum). 0, or -1 when out of memory. */
int px_shard_place(px_shard_t *sh, float *dst, size_t offset, int ndim, const int64_t *shape, const int64_t *start,
                   const int64_t *count, const float *values);

/* Pure layout queries, for tests: floats of unit u's flat layout (padded to
 * a multiple of F), and where this rank's piece of it starts in the shard. */
size_t px_shard_unit_padded(const px_shard_t *sh, int unit);
size_t px_shard_unit_offset(const px_shard_t *sh, int unit);

#endif
