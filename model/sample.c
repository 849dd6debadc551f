/* Sampling (sample.h). The top-k cut sorts the ids by logit once per token
 * (V log V: a few microseconds against a forward pass of the whole window),
 * and the softmax is taken in double so the draw does not depend on the
 * order of float sums. */
#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

static int by_logit(const void *a, const void *b, void *logits) {
    int i = *(const int *)a, j = *(const int *)b;
    float x = ((const float *)logits)[i], y = ((const float *)logits)[j];
    if (x != y) return x > y ? -1 : 1;
    return i - j;
}

int px_sample_pick(const float *logits, int V, float temperature, int top_k, double coin, int *scratch) {
    if (temperature <= 0.0f) {
        int best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        return best;
    }
    int k = top_k > 0 && top_k < V ? top_k : V;
    for (int i = 0; i < V; i++) scratch[i] = i;
    if (k < V) {
        qsort_r(scratch, (size_t)V, sizeof *scratch, by_logit, (void *)logits);
    }
    double top = -INFINITY;
    for (int i = 0; i < k; i++)
        if (logits[scratch[i]] > top) top = logits[scratch[i]];
    double total = 0.0;
    for (int i = 0; i < k; i++) total += exp(((double)logits[scratch[i]] - top) / temperature);
    double target = coin * total, acc = 0.0;
    for (int i = 0; i < k; i++) {
        acc += exp(((double)logits[scratch[i]] - top) / temperature);
        if (acc > target) return scratch[i];
    }
    return scratch[k - 1];
}

int px_sample_generate_with(const px_gpt_config_t *c, px_sample_forward_fn forward, void *ctx, const int *prompt,
                            int np, int n, const px_sample_opts_t *o, int (*on_token)(void *arg, int token),
                            void *arg) {
    int T = c->max_seq_len, V = c->vocab_size, Vp = c->padded_vocab_size;
    int *seq = malloc((size_t)(np + n) * sizeof *seq);
    int *window = calloc((size_t)T, sizeof *window);
    int *scratch = malloc((size_t)V * sizeof *scratch);
    int rc = seq && window && scratch ? 0 : -1;
    if (rc == 0) memcpy(seq, prompt, (size_t)np * sizeof *seq);
    int len = np;
    for (int i = 0; rc == 0 && i < n; i++) {
        int start = len > T ? len - T : 0, used = len - start;
        memcpy(window, seq + start, (size_t)used * sizeof *window);
        memset(window + used, 0, (size_t)(T - used) * sizeof *window);
        const float *logits = NULL;
        if (forward(ctx, window, T, &logits) != 0) {
            rc = -1;
            break;
        }
        px_rng_t r = {px_hash4(o->seed, 0x73616d706c65ull, (uint64_t)i, 0)}; /* "sample" */
        int tok = px_sample_pick(logits + (size_t)(used - 1) * (size_t)Vp, V, o->temperature, o->top_k,
                                 1.0 - px_rng_uniform(&r), scratch);
        seq[len++] = tok;
        if (on_token && on_token(arg, tok) != 0) break;
    }
    free(seq);
    free(window);
    free(scratch);
    return rc;
}

static int cpu_forward(void *ctx, const int *window, int T, const float **logits) {
    px_gpt_t *m = ctx;
    if (isnan(px_gpt_forward(m, window, NULL, 1, T))) return -1;
    *logits = px_gpt_logits(m);
    return 0;
}

int px_sample_generate(px_gpt_t *m, const int *prompt, int np, int n, const px_sample_opts_t *o,
                       int (*on_token)(void *arg, int token), void *arg) {
    return px_sample_generate_with(&m->config, cpu_forward, m, prompt, np, n, o, on_token, arg);
}
