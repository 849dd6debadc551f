/* Text from a model: the next token drawn from the logits, and a whole
 * continuation of a prompt. What phalanx-sample prints, and the sample a
 * training job shows every --sample-every steps.
 *
 * Deterministic for a seed: token i of a continuation is drawn with a coin
 * that is a pure function of (seed, i), and the model's forward is
 * deterministic for a thread count, so the same checkpoint, prompt, flags
 * and seed give the same text. The model runs on a fixed window of its
 * context length (the prompt's end when longer), padded after the last
 * token, as llm.c's sampler does: the causal mask makes the padding
 * invisible to the positions that are read, and the activations are
 * allocated once. */
#ifndef PX_SAMPLE_H
#define PX_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h"

typedef struct {
    float temperature; /* 0: always the most likely token; else logits / temperature */
    int top_k;         /* draw among the k most likely (0: all) */
    uint64_t seed;
} px_sample_opts_t;

/* The token drawn from logits[V] with coin in [0, 1): softmax of
 * logits / temperature over the top_k largest (ties to the lower id), or the
 * argmax at temperature 0. scratch holds V ints. Pure. */
int px_sample_pick(const float *logits, int V, float temperature, int top_k, double coin, int *scratch);

/* A forward pass of one sequence window[T] (T the model's context): its
 * logits (T, Vp) into *logits, valid until the next call. 0, or -1. */
typedef int (*px_sample_forward_fn)(void *ctx, const int *window, int T, const float **logits);

/* Continues prompt[np] (np >= 1) with n tokens of the model of config c,
 * whose forward is `forward`, handing each token to on_token (which may
 * stop the generation by returning non-zero). 0, or -1 when out of memory
 * or a forward fails. */
int px_sample_generate_with(const px_gpt_config_t *c, px_sample_forward_fn forward, void *ctx, const int *prompt,
                            int np, int n, const px_sample_opts_t *o, int (*on_token)(void *arg, int token),
                            void *arg);
/* The same on the model's CPU path. */
int px_sample_generate(px_gpt_t *m, const int *prompt, int np, int n, const px_sample_opts_t *o,
                       int (*on_token)(void *arg, int token), void *arg);

#endif
