/* One pipeline stage's part of a training step (pipeline parallelism inside
 * a replica group; docs/architecture.md, "Pipelined groups"): the stage
 * runs its schedule's ops (parallel/schedule.h) in order on its model (a
 * px_gpt_t made a stage, px_gpt_set_stage), and the activations and their
 * gradients cross to the neighbouring stages over the point-to-point links
 * (mesh_comm.h, PX_LINK_*).
 *
 * Communication: a forward on a later stage first receives its input from
 * the previous stage; a backward before the last stage first receives its
 * output's gradient from the next. Receives run on the caller's thread in
 * schedule order; sends run on one thread per outgoing link, straight from
 * the model's activation slot (the slot is not reused until its sends are
 * done), so a stage never waits for a neighbour to take what it sent. Each
 * direction of a link carries the micro-batches in order 0..M-1. Every wait
 * is a px_comm call, bounded by its timeout; a failure ends the step (-1),
 * aborting the stage's links so that its neighbours fail at once too, and
 * the caller retries it with new communicators, as for any collective.
 *
 * Micro-batch k occupies an activation slot from its forward to the end of
 * its backward (its weight half in a zero-bubble schedule); the model has as
 * many slots as the schedule's peak in flight on this stage.
 *
 * The stage model is a table of calls (px_pipe_model_t): the CPU model's
 * (px_pipe_model_cpu) or a GPU's (worker/compute_cuda.c), whose activations,
 * outputs, input gradients and receive buffer are device memory, moved by
 * NCCL links. */
#ifndef PX_PIPELINE_H
#define PX_PIPELINE_H

#include <stddef.h>

#include "gpt.h"
#include "px_comm.h"
#include "schedule.h"

typedef struct px_pipe px_pipe_t;

/* A stage model: gpt.h's px_gpt_set_stage and px_gpt_stage_* calls, on the
 * model's own memory. output and input_grad return buffers complete and
 * readable by the links' communicators; fence waits until the compute
 * queued so far is done (before the receive buffer is written again);
 * alloc and release make the receive buffer. */
typedef struct {
    void *ctx;
    int channels;
    int (*set_stage)(void *ctx, const px_gpt_stage_t *st, int slots, int split);
    float (*forward)(void *ctx, int slot, const int *inputs, const float *x, const int *targets, int B, int T);
    const float *(*output)(void *ctx, int slot);
    int (*batch)(void *ctx, int slot);
    int (*backward)(void *ctx, int slot, const float *dout, float loss_scale, int weights);
    int (*backward_weights)(void *ctx, int slot);
    const float *(*input_grad)(void *ctx, int slot);
    void (*fence)(void *ctx);
    float *(*alloc)(void *ctx, size_t n);
    void (*release)(void *ctx, float *p);
} px_pipe_model_t;

/* The CPU model's table (model must outlive the pipeline). */
px_pipe_model_t px_pipe_model_cpu(px_gpt_t *model);

/* Micro-batch k of the step, as the caller hands it out. */
typedef struct {
    const int *inputs, *targets; /* (B,T) tokens; read during the call that asked for them only */
    int B;
    float loss_scale; /* its weight in the step's mean loss (0 for a padding micro-batch) */
} px_pipe_mb_t;
/* Fills *mb for micro-batch k: 0, or -1 (the step fails). */
typedef int (*px_pipe_fill_fn)(void *ctx, int k, px_pipe_mb_t *mb);

/* Stage `stage` of a P-stage pipeline running `kind` over M micro-batches of
 * T positions, on model (made the stage here: its activations are dropped).
 * NULL with the problem in err. */
px_pipe_t *px_pipe_new(const px_pipe_model_t *model, const px_gpt_stage_t *st, int stage, int P, px_sched_kind_t kind,
                       int M, int T, char *err, size_t errlen);
void px_pipe_destroy(px_pipe_t **p);
/* A new M (the quorum changed the share of samples): the schedule rebuilt,
 * the model's slots with it. 0, or -1 with err. */
int px_pipe_set_microbatches(px_pipe_t *p, int M, char *err, size_t errlen);
int px_pipe_microbatches(const px_pipe_t *p);
/* The links of the current quorum (link[PX_LINK_*], NULL at the ends or to
 * detach). Waits for the send threads to finish what they were given, so
 * abort the links being replaced first. */
void px_pipe_set_links(px_pipe_t *p, px_comm_t *const link[4]);

/* One step's forwards and backwards: the gradients accumulate into the
 * model's source; *loss gets the last stage's sum of loss x loss_scale (0
 * elsewhere). 0, or -1 (px_pipe_last_error says why). */
int px_pipe_step(px_pipe_t *p, px_pipe_fill_fn fill, void *ctx, double *loss);
/* Forwards only (evaluation), n micro-batches one after another: *loss_sum
 * the last stage's sum of their mean losses. 0 or -1. */
int px_pipe_forward(px_pipe_t *p, px_pipe_fill_fn fill, void *ctx, int n, double *loss_sum);
const char *px_pipe_last_error(const px_pipe_t *p);

/* Seconds this stage spent computing (forwards and backwards) and in whole
 * steps since it was made: the stage's idle share is 1 - busy/total. */
void px_pipe_times(const px_pipe_t *p, double *busy_s, double *total_s);

#endif
