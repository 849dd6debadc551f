/* The next-token draw (model/sample.h, px_sample_pick) as a table: the
 * argmax at temperature 0 and at top-k 1, ties to the lower id, coins at the
 * ends of [0, 1), the probabilities a sweep of coins reproduces (softmax at
 * temperature 1 and 0.5, renormalised over the top k), and a continuation of
 * a model that is the same for a seed and differs between seeds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpt.h"
#include "px_check.h"
#include "sample.h"

static int failed;

/* The share of a fine sweep of coins that draws each token. */
static void shares(const float *logits, int V, float temp, int k, double *out) {
    int scratch[16];
    const int N = 100000;
    for (int i = 0; i < V; i++) out[i] = 0;
    for (int i = 0; i < N; i++) out[px_sample_pick(logits, V, temp, k, (i + 0.5) / N, scratch)] += 1.0 / N;
}

static void test_pick(void) {
    int scratch[16];
    const float l[5] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
    CHECK(px_sample_pick(l, 5, 0, 0, 0.7, scratch) == 1, "temperature 0: the argmax, ties to the lower id");
    CHECK(px_sample_pick(l, 5, 1, 1, 0.99, scratch) == 1, "top-k 1: the argmax whatever the coin");
    CHECK(px_sample_pick(l, 5, 1, 0, 0.0, scratch) == 0, "coin 0: the first id's share");
    CHECK(px_sample_pick(l, 5, 1, 0, 0.999999, scratch) == 4, "a coin near 1: the last id");
    /* softmax at temperature 1 of {0, ln 3}: 1/4, 3/4 */
    const float two[2] = {0.0f, logf(3.0f)};
    double p[5];
    shares(two, 2, 1.0f, 0, p);
    CHECK(fabs(p[0] - 0.25) < 1e-3 && fabs(p[1] - 0.75) < 1e-3, "softmax shares %.4f %.4f, want 0.25 0.75", p[0],
          p[1]);
    /* temperature 0.5 squares the odds: 1/10, 9/10 */
    shares(two, 2, 0.5f, 0, p);
    CHECK(fabs(p[0] - 0.1) < 1e-3 && fabs(p[1] - 0.9) < 1e-3, "temperature 0.5: %.4f %.4f, want 0.1 0.9", p[0], p[1]);
    /* top-k 2 over l: only ids 1 and 3 (equal logits), half each */
    shares(l, 5, 1.0f, 2, p);
    CHECK(fabs(p[1] - 0.5) < 1e-3 && fabs(p[3] - 0.5) < 1e-3 && p[0] == 0 && p[2] == 0 && p[4] == 0,
          "top-k 2: %.4f %.4f %.4f %.4f %.4f", p[0], p[1], p[2], p[3], p[4]);
    /* top-k 3: ids 1, 3 and 4 renormalised: e^2, e^2, e^1 */
    shares(l, 5, 1.0f, 3, p);
    double z = 2 * exp(2.0) + exp(1.0);
    CHECK(fabs(p[4] - exp(1.0) / z) < 1e-3 && p[0] == 0 && p[2] == 0, "top-k 3: id 4 has %.4f, want %.4f", p[4],
          exp(1.0) / z);
}

typedef struct {
    int toks[32], n;
} got_t;

static int keep(void *arg, int token) {
    got_t *g = arg;
    g->toks[g->n++] = token;
    return 0;
}

static void test_generate(void) {
    px_gpt_config_t cfg;
    px_gpt_config_preset("tiny", &cfg);
    px_gpt_t *m = px_gpt_new(&cfg, 5);
    int prompt[80];
    for (int i = 0; i < 80; i++) prompt[i] = 'a' + i % 26; /* longer than the context (64): the window slides */
    got_t a = {0}, b = {0}, c = {0};
    px_sample_opts_t o = {.temperature = 1.0f, .seed = 1};
    CHECK(px_sample_generate(m, prompt, 80, 20, &o, keep, &a) == 0, "generate");
    CHECK(px_sample_generate(m, prompt, 80, 20, &o, keep, &b) == 0, "generate again");
    o.seed = 2;
    CHECK(px_sample_generate(m, prompt, 80, 20, &o, keep, &c) == 0, "generate with another seed");
    int same_ab = a.n == 20 && b.n == 20, same_ac = 1;
    for (int i = 0; i < 20; i++) {
        same_ab &= a.toks[i] == b.toks[i];
        same_ac &= a.toks[i] == c.toks[i];
        CHECK(a.toks[i] >= 0 && a.toks[i] < cfg.vocab_size, "token %d in the vocabulary", a.toks[i]);
    }
    CHECK(same_ab, "the same seed gives the same 20 tokens");
    CHECK(!same_ac, "another seed gives other tokens");
    px_gpt_destroy(&m);
}

int main(void) {
    test_pick();
    test_generate();
    if (failed) return 1;
    printf("ok   sampling: argmax, top-k, temperature shares, seeds\n");
    return 0;
}
