/* The training state of one replica: what a group must hold to go on with
 * the job from where it is, described once, so that healing (worker/heal.c)
 * sends it and checkpoints (checkpoint/) write it the
 * same way. It lives next to the model because both users link the model
 * library, and neither should have to include the other's folder.
 *
 *   params, m, v  three buffers of n floats each, in px_gpt_t's layout: the
 *                 parameters and AdamW's two moments. Gradients are not
 *                 state: every step recomputes them from scratch.
 *   outer_m       DiLoCo only (nbuf 4): the outer optimizer's momentum. In
 *                 that mode params are the global parameters of the round's
 *                 start (the local ones are inner progress, not state), and
 *                 m and v are the group's own inner moments: `local` marks
 *                 them, and the state checksum leaves them out, so that
 *                 groups holding the same global state agree on it.
 *                 Under --mode auto the mask is also the mode the state is
 *                 in (none local: sync): it travels with a heal, and since
 *                 it decides which entries the checksum covers, states in
 *                 different modes never agree.
 *   step          optimizer steps committed. It is also the data cursor:
 *                 step s reads the samples px_dataset_fill(seed, s, i), so
 *                 nothing else about the data position needs keeping.
 *   seed          the job's seed (initialisation and data order), the same
 *                 for every replica: part of what the state means.
 *
 * Slices: every buffer is cut into PX_STATE_CHUNK_FLOATS chunks, hashed
 * independently (and in parallel). The digest is the list of chunk hashes,
 * buffer by buffer in order; the state checksum is a hash of the digest's
 * shared (not local) entries and the step. A heal sends the chunks and then the digest, so
 * the receiver proves every chunk and the checksum in one pass over the
 * data; a checkpoint can store the digest to verify a restore the same way. */
#ifndef PX_TRAIN_STATE_H
#define PX_TRAIN_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h"

enum { PX_STATE_PARAMS, PX_STATE_M, PX_STATE_V, PX_STATE_OUTER_M, PX_STATE_MAXBUF };
#define PX_STATE_NBUF 3 /* buffers of a synchronous job's state: params, m, v */

/* 16 MiB chunks: few enough round trips on a fast link, many enough to hash
 * a large model on every core. */
#define PX_STATE_CHUNK_FLOATS ((size_t)1 << 22)

typedef struct {
    float *buf[PX_STATE_MAXBUF]; /* (n) each: params, m, v[, outer_m] */
    size_t n;                    /* floats per buffer: the model's num_params */
    int64_t step;                /* committed steps = the data cursor */
    uint64_t seed;               /* initialisation and data order */
    int owned;                   /* 1: buffers are one block from px_state_alloc_like */
    int nbuf;                    /* buffers in use: PX_STATE_NBUF, or 4 (DiLoCo) */
    unsigned local;              /* bit b: buffer b is the group's own, not in the checksum */
} px_train_state_t;

/* "params", "m", "v", "outer_m" */
extern const char *const px_state_buf_names[PX_STATE_MAXBUF];

/* The model's state as views into its buffers (nothing copied or owned). */
px_train_state_t px_state_of_model(px_gpt_t *model, int64_t step, uint64_t seed);
/* A private state shaped like `like` (buffers allocated, contents
 * undefined): a staging copy for a heal, a checkpoint's snapshot. Its
 * buffers are one page-aligned block, each buffer starting on a page
 * (train_state.c says why). 0, or -1 when out of memory. */
int px_state_alloc_like(px_train_state_t *dst, const px_train_state_t *like);
/* Frees the buffers of an owned state; a view is left alone. */
void px_state_free(px_train_state_t *s);
/* dst's buffers, step and local mask become src's (same n). */
void px_state_copy(px_train_state_t *dst, const px_train_state_t *src);
/* dst's buffers become src's (same n), chunk by chunk on `threads` OpenMP
 * threads; with streaming, through copy_streaming (kernels/ops.h: stores
 * that bypass the caches, for a copy read only later, as a checkpoint's
 * snapshot), else memcpy. Step and seed are left to the caller. */
void px_state_copy_chunks(px_train_state_t *dst, const px_train_state_t *src, int threads, int streaming);

/* Chunks per buffer, and digest entries (s->nbuf buffers of chunks). */
size_t px_state_chunks(size_t n);
size_t px_state_digest_len(const px_train_state_t *s);
/* Bytes of the state's buffers. */
size_t px_state_bytes(const px_train_state_t *s);
/* Digest entry k's chunk: its buffer and float range [*off, *off + *len). */
void px_state_chunk(size_t n, size_t k, int *buffer, size_t *off, size_t *len);
/* digest[px_state_digest_len(s)] = every chunk's hash, on every core. */
void px_state_digest(const px_train_state_t *s, uint64_t *digest);
/* The state checksum of s's digest: its shared buffers' entries and s->step. */
uint64_t px_state_checksum(const px_train_state_t *s, const uint64_t *digest);
/* A hash of len values and a step (the checksum's function, for combining
 * checksums). */
uint64_t px_state_hash(const uint64_t *values, size_t len, int64_t step);

#endif
