/* Training data for a fixed global batch: which tokens sample i of step s
 * reads is a pure function of (seed, s, i, B_global, T, number of tokens), so
 * any replica group can compute any subset of a step's samples, and a step
 * retried after a failure reads exactly the same samples.
 *
 * Sampling without replacement: the token stream is cut into
 * nwin = (n - 1) / T windows of T+1 tokens (inputs and the targets shifted by
 * one) starting at multiples of T. Global sample g = s * B_global + i falls in
 * epoch g / nwin at position g % nwin, and a seeded permutation of the windows,
 * new each epoch, maps the position to a window. Within an epoch no window is
 * read twice; across a run no window is skipped. */
#ifndef PX_DATASET_H
#define PX_DATASET_H

#include <stddef.h>
#include <stdint.h>

/* Token offset of sample i of step s: the window start, a multiple of T, with
 * offset + T + 1 <= ntokens. Requires ntokens >= T + 1, 0 <= i < B_global. Pure. */
uint64_t px_sample_offset(uint64_t seed, int64_t step, int64_t i, int64_t B_global, int T,
                          uint64_t ntokens);

/* The permutation behind it: a bijection on [0, n) chosen by key (4-round
 * Feistel network on the next even power of two, cycle-walking into range). */
uint64_t px_permute(uint64_t x, uint64_t n, uint64_t key);

typedef struct px_dataset px_dataset_t;

/* Loads every DIR/<split>_*.bin shard (sorted by name) into memory, as one
 * token stream. Fails (message names the file or directory) on any bad shard,
 * on no shard at all, or on fewer than min_tokens tokens in total. */
px_dataset_t *px_dataset_open(const char *dir, const char *split, int vocab_size,
                              size_t min_tokens, char *err, size_t errlen);
void px_dataset_destroy(px_dataset_t **self);
size_t px_dataset_num_tokens(const px_dataset_t *self);

/* Training samples i0 .. i0+count-1 of step `step` of a global batch of
 * B_global: inputs and targets (count, T). */
void px_dataset_fill(const px_dataset_t *self, uint64_t seed, int64_t step, int64_t i0, int count,
                     int64_t B_global, int T, int *inputs, int *targets);

/* Evaluation batch `batch`: sequential windows (batch*B + i) mod nwin, the
 * same every time, so eval losses are comparable across steps and runs. */
void px_dataset_fill_eval(const px_dataset_t *self, int64_t batch, int B, int T, int *inputs,
                          int *targets);

#endif
