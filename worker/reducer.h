/* Bucketed gradient reduction overlapped with the backward, for groups of
 * whole replicas (data parallel; PyTorch DDP's scheme on our step protocol).
 *
 * Without it the trainer reduces the whole gradient buffer after the last
 * backward, in place (step.c, reduce). With it, the model tells the
 * reducer (gpt.h, px_gpt_source_t.release) each time a unit's gradients are
 * final during the last micro-batch's backward: layer L-1 first, layer 0,
 * then unit 0 (embeddings, final LayerNorm). The reducer copies them into a
 * staging bucket of up to --bucket-mb; a full bucket goes to a communication
 * thread, which sums it inside the group, then across groups, and copies
 * the sums back, while the backward goes on with the next layers. Two
 * staging buckets alternate. The commit vote's tail travels at the end of
 * the last bucket, and is checked and relayed between the bucket's group sum
 * and its cross-group sum, exactly as in the one-shot reduction.
 *
 * A failed collective fails the rest of the step's buckets at once (the
 * communicators are broken for good) and px_reducer_finish reports it; the
 * grads then hold partial sums, which the retried step zeroes. Buckets are
 * summed whole, so the per-element summation order differs from the one-
 * shot reduction's: every rank still gets the same bits (the rings give
 * every rank the same result), but not the same bits as without buckets. */
#ifndef PX_REDUCER_H
#define PX_REDUCER_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h"
#include "px_comm.h"

typedef struct px_reducer px_reducer_t;

/* A reducer for `model` (which must be a plain px_gpt_t with its own
 * buffers, and gets this reducer as its source) with buckets of
 * bucket_floats floats (>= 1024). NULL when out of memory. */
px_reducer_t *px_reducer_new(px_gpt_t *model, size_t bucket_floats);
void px_reducer_destroy(px_reducer_t **r);

/* The communicators of the current quorum (intra NULL for one rank per
 * group; both NULL to detach). Waits until the thread is idle: abort the
 * old communicators before replacing them. */
void px_reducer_set_comms(px_reducer_t *r, px_comm_t *intra, px_comm_t *cross);

/* The next backward is the step's last: reduce its units as they finish.
 * The vote's tail (grads + num_params, PX_VOTE_N floats) must be filled;
 * `members` and `step` are what px_vote_relay needs. */
void px_reducer_arm(px_reducer_t *r, int members, int64_t step);
/* Reduces every unit now, in the order a backward finishes them: for a
 * rank without samples this step (its zero gradients still take part in
 * every bucket's sums). Call after px_reducer_arm. */
void px_reducer_release_all(px_reducer_t *r);
/* Waits for the armed backward's buckets. 0 when every sum finished, -1
 * on a communicator failure (px_reducer_error says which). Disarms. */
int px_reducer_finish(px_reducer_t *r);
const char *px_reducer_error(const px_reducer_t *r);

/* Buckets reduced so far, for reports. */
uint64_t px_reducer_buckets(const px_reducer_t *r);

#endif
