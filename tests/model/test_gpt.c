/* Model-level properties beyond the PyTorch match (test_reference.c):
 * - determinism: the same seed and thread count give bitwise identical losses
 *   and parameters over several training steps; initialisation is the same on
 *   any thread count; a different seed gives different weights;
 * - initialisation statistics (N(0, 0.02), residual projections scaled by
 *   1/sqrt(2L), LayerNorm 1/0, zero padding rows);
 * - gradient accumulation: two half batches with loss_scale 1/2 give the
 *   gradient of the whole batch;
 * - parameter counts of the presets (gpt2-124m: llm.c's 124,475,904);
 * - the learning-rate schedule;
 * - pipeline stages: two stages of a model (activations passed along by
 *   hand, micro-batches in flight in their own slots, the second stage's
 *   backward split into input and weight halves) give the whole model's
 *   losses and layer gradients bitwise, and the tied embedding's gradient
 *   as the sum of the two stages' parts; a stage holds fewer activations;
 * - block recomputation: with it on, a whole model and two stages (the
 *   second's backward split) give the same losses and gradients bitwise as
 *   with it off, over accumulated micro-batches, and hold fewer bytes of
 *   activations;
 * - the optimizer step in parts (px_gpt_adamw_step_parts, a checkpoint
 *   snapshot's way in): bitwise px_gpt_adamw_step's params, m and v, on 1
 *   and 3 threads, for parts that cut tensors, rows and blocks, with every
 *   float visited once, each part's blocks in order;
 * - misuse is refused (backward without a loss, bad token, T > maxT). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "px_hash.h"
#include "px_log.h"

static int g_failures;

#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                       \
            printf(__VA_ARGS__);                                                              \
            printf("\n");                                                                     \
            g_failures++;                                                                     \
        }                                                                                     \
    } while (0)

static void make_batch(int *x, int *y, int n, int V, unsigned seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = (int)((seed >> 8) % (unsigned)V);
        y[i] = (x[i] * 7 + 3) % V; /* learnable */
    }
}

/* Trains `steps` steps of tiny at `threads` threads; fills losses, returns the params hash. */
static uint64_t train_run(uint64_t seed, int threads, int steps, float *losses) {
    omp_set_num_threads(threads);
    px_gpt_config_t cfg;
    px_gpt_config_preset("tiny", &cfg);
    px_gpt_t *m = px_gpt_new(&cfg, seed);
    int B = 4, T = 64;
    int *x = malloc(sizeof(int) * B * T), *y = malloc(sizeof(int) * B * T);
    for (int s = 0; s < steps; s++) {
        make_batch(x, y, B * T, cfg.vocab_size, 1000u + (unsigned)s);
        px_gpt_zero_grad(m);
        losses[s] = px_gpt_forward(m, x, y, B, T);
        px_gpt_backward(m, 1.0f);
        px_gpt_clip_grads(m, 1.0f);
        px_gpt_adamw_step(m, px_lr_at(s, 2, steps, 3e-3f, 3e-4f), 0.9f, 0.95f, 1e-8f, 0.1f, s + 1);
    }
    uint64_t h = px_hash64(m->params, m->num_params * sizeof(float), 0) ^
                 px_hash64(m->m, m->num_params * sizeof(float), 1) ^
                 px_hash64(m->v, m->num_params * sizeof(float), 2);
    free(x), free(y);
    px_gpt_destroy(&m);
    return h;
}

static void test_determinism(void) {
    enum { STEPS = 8 };
    float a[STEPS], b[STEPS];
    uint64_t ha = train_run(42, 2, STEPS, a), hb = train_run(42, 2, STEPS, b);
    CHECK(memcmp(a, b, sizeof a) == 0, "same seed, 2 threads: losses differ between runs");
    CHECK(ha == hb, "same seed, 2 threads: final state hashes differ (%016llx vs %016llx)",
          (unsigned long long)ha, (unsigned long long)hb);
    CHECK(a[STEPS - 1] < a[0] - 0.5f, "loss did not fall: %g -> %g", a[0], a[STEPS - 1]);
    printf("determinism: losses %.6f .. %.6f bitwise equal over 2 runs, state hash %016llx\n",
           a[0], a[STEPS - 1], (unsigned long long)ha);
    float c[STEPS];
    uint64_t hc = train_run(43, 2, STEPS, c);
    CHECK(hc != ha && c[0] != a[0], "a different seed gave the same run");

    px_gpt_config_t cfg;
    px_gpt_config_preset("small", &cfg);
    omp_set_num_threads(1);
    px_gpt_t *m1 = px_gpt_new(&cfg, 7);
    omp_set_num_threads(3);
    px_gpt_t *m3 = px_gpt_new(&cfg, 7);
    CHECK(memcmp(m1->params, m3->params, m1->num_params * sizeof(float)) == 0,
          "initialisation depends on the thread count");
    px_gpt_destroy(&m1);
    px_gpt_destroy(&m3);
    omp_set_num_threads(2);
}

static void stats(const float *x, size_t n, double *mean, double *std) {
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        s += x[i];
        s2 += (double)x[i] * x[i];
    }
    *mean = s / n;
    *std = sqrt(s2 / n - *mean * *mean);
}

static void test_init(void) {
    px_gpt_config_t cfg = {.max_seq_len = 128, .vocab_size = 250, .padded_vocab_size = 256,
                           .num_layers = 3, .num_heads = 4, .channels = 128};
    px_gpt_t *m = px_gpt_new(&cfg, 1);
    CHECK(m != NULL, "px_gpt_new failed");
    size_t C = 128, L = 3;
    double mean, std;
    stats(m->p.wte, 250 * C, &mean, &std);
    CHECK(fabs(mean) < 1e-3 && fabs(std - 0.02) < 5e-4, "wte mean %g std %g", mean, std);
    double wte_std = std;
    stats(m->p.fcw, L * 4 * C * C, &mean, &std);
    CHECK(fabs(mean) < 1e-3 && fabs(std - 0.02) < 5e-4, "fcw mean %g std %g", mean, std);
    double rstd = 0.02 / sqrt(2.0 * L);
    stats(m->p.fcprojw, L * 4 * C * C, &mean, &std);
    CHECK(fabs(std - rstd) < 3e-4, "fcprojw std %g, want %g", std, rstd);
    stats(m->p.attprojw, L * C * C, &mean, &std);
    CHECK(fabs(std - rstd) < 3e-4, "attprojw std %g, want %g", std, rstd);
    int pad_zero = 1;
    for (size_t i = 250 * C; i < 256 * C; i++) pad_zero &= m->p.wte[i] == 0.0f;
    CHECK(pad_zero, "padded wte rows are not zero");
    int ln_ok = 1;
    for (size_t i = 0; i < L * C; i++)
        ln_ok &= m->p.ln1w[i] == 1.0f && m->p.ln2w[i] == 1.0f && m->p.ln1b[i] == 0.0f &&
                 m->p.qkvb[i] == 0.0f;
    for (size_t i = 0; i < C; i++) ln_ok &= m->p.lnfw[i] == 1.0f && m->p.lnfb[i] == 0.0f;
    CHECK(ln_ok, "LayerNorm weights/biases or linear biases not initialised to 1/0");
    /* named views and offsets agree, and the views tile the buffer in llm.c order */
    CHECK(m->p.wte == m->params && m->p.lnfb + C == m->params + m->num_params,
          "views do not tile the params buffer");
    CHECK(m->g.fcw - m->grads == m->p.fcw - m->params, "grads views differ from params views");
    printf("init: wte std %.5f, residual projections std %.5f (want %.5f)\n", wte_std, std, rstd);
    px_gpt_destroy(&m);
}

static void test_accumulation(void) {
    px_gpt_config_t cfg;
    px_gpt_config_preset("tiny", &cfg);
    px_gpt_t *m = px_gpt_new(&cfg, 5);
    int B = 4, T = 32;
    int x[128], y[128];
    make_batch(x, y, B * T, cfg.vocab_size, 77);
    px_gpt_zero_grad(m);
    float full = px_gpt_forward(m, x, y, B, T);
    px_gpt_backward(m, 1.0f);
    float *g_full = malloc(m->num_params * sizeof(float));
    memcpy(g_full, m->grads, m->num_params * sizeof(float));
    px_gpt_zero_grad(m);
    float h1 = px_gpt_forward(m, x, y, 2, T);
    px_gpt_backward(m, 0.5f);
    float h2 = px_gpt_forward(m, x + 2 * T, y + 2 * T, 2, T);
    px_gpt_backward(m, 0.5f);
    double maxabs = 0, maxerr = 0;
    for (size_t i = 0; i < m->num_params; i++) {
        maxabs = fmax(maxabs, fabs(g_full[i]));
        maxerr = fmax(maxerr, fabs(g_full[i] - m->grads[i]));
    }
    CHECK(fabs(0.5 * (h1 + h2) - full) < 1e-5 * full, "half-batch losses %g %g vs %g", h1, h2,
          full);
    CHECK(maxerr <= 1e-5 * maxabs, "accumulated grads differ: %g (max %g)", maxerr, maxabs);
    printf("accumulation: 2 x B/2 with loss_scale 1/2 vs B: max grad error %.2e (max %.2e)\n",
           maxerr, maxabs);
    free(g_full);
    px_gpt_destroy(&m);
}

static void test_counts(void) {
    struct {
        const char *name;
        size_t params;
    } want[] = {{"tiny", 120576}, {"small", 3290624}, {"gpt2-124m", 124475904}};
    for (int i = 0; i < 3; i++) {
        px_gpt_config_t cfg;
        CHECK(px_gpt_config_preset(want[i].name, &cfg) == 0, "preset %s missing", want[i].name);
        size_t s[PX_GPT_NUM_TENSORS];
        size_t n = px_gpt_tensor_sizes(&cfg, s);
        CHECK(n == want[i].params, "%s: %zu params, want %zu", want[i].name, n, want[i].params);
    }
    px_gpt_config_t cfg;
    CHECK(px_gpt_config_preset("gpt3", &cfg) != 0, "unknown preset accepted");
}

static void test_lr(void) {
    struct {
        int step, warmup, total;
        float max, min, want;
    } t[] = {
        {0, 10, 100, 1.0f, 0.1f, 0.1f},   {4, 10, 100, 1.0f, 0.1f, 0.5f},
        {9, 10, 100, 1.0f, 0.1f, 1.0f},   {10, 10, 100, 1.0f, 0.1f, 1.0f},
        {55, 10, 100, 1.0f, 0.1f, 0.55f}, {100, 10, 100, 1.0f, 0.1f, 0.1f},
        {500, 10, 100, 1.0f, 0.1f, 0.1f}, {0, 0, 10, 2.0f, 0.0f, 2.0f},
        {5, 0, 10, 2.0f, 0.0f, 1.0f},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        float got = px_lr_at(t[i].step, t[i].warmup, t[i].total, t[i].max, t[i].min);
        CHECK(fabsf(got - t[i].want) < 1e-6f, "px_lr_at(%d, %d, %d) = %g, want %g", t[i].step,
              t[i].warmup, t[i].total, got, t[i].want);
    }
}

static void test_misuse(void) {
    px_gpt_config_t cfg;
    px_gpt_config_preset("tiny", &cfg);
    px_gpt_t *m = px_gpt_new(&cfg, 1);
    int x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8] = {2, 3, 4, 5, 6, 7, 8, 9};
    px_log_set_quiet(0);
    CHECK(px_gpt_backward(m, 1.0f) != 0, "backward without a forward accepted");
    px_gpt_forward(m, x, NULL, 1, 8);
    CHECK(px_gpt_backward(m, 1.0f) != 0, "backward after a forward without targets accepted");
    px_gpt_forward(m, x, y, 1, 8);
    CHECK(px_gpt_backward(m, 1.0f) == 0, "backward refused after a good forward");
    CHECK(px_gpt_backward(m, 1.0f) != 0, "second backward on destroyed logits accepted");
    y[3] = 256;
    CHECK(isnan(px_gpt_forward(m, x, y, 1, 8)), "out-of-range target accepted");
    x[0] = -1;
    CHECK(isnan(px_gpt_forward(m, x, NULL, 1, 8)), "negative token accepted");
    CHECK(isnan(px_gpt_forward(m, x, NULL, 1, 65)), "T > max_seq_len accepted");
    px_gpt_config_t bad = cfg;
    bad.num_heads = 5;
    CHECK(px_gpt_new(&bad, 1) == NULL, "config with heads not dividing channels accepted");
    px_gpt_destroy(&m);
    CHECK(m == NULL, "destroy did not clear the pointer");
    px_gpt_destroy(&m); /* harmless */
}

static void test_stages(void) {
    px_gpt_config_t cfg;
    px_gpt_config_preset("tiny", &cfg);
    enum { M = 4, B = 2, T = 32 };
    int x[M][B * T], y[M][B * T];
    for (int k = 0; k < M; k++) make_batch(x[k], y[k], B * T, cfg.vocab_size, 77u + (unsigned)k);
    px_gpt_t *whole = px_gpt_new(&cfg, 5), *s0 = px_gpt_new(&cfg, 5), *s1 = px_gpt_new(&cfg, 5);
    float lw[M], lp[M];
    for (int k = 0; k < M; k++) {
        lw[k] = px_gpt_forward(whole, x[k], y[k], B, T);
        px_gpt_backward(whole, 1.0f / M);
    }
    px_gpt_stage_t st0 = {0, 1, 1, 0}, st1 = {1, 1, 0, 1};
    CHECK(px_gpt_set_stage(s0, &st0, M, 0) == 0 && px_gpt_set_stage(s1, &st1, M, 1) == 0, "stages refused");
    px_gpt_stage_t bad = {1, 1, 1, 0};
    CHECK(px_gpt_set_stage(s0, &bad, 1, 0) != 0, "a first stage not starting at layer 0 accepted");
    CHECK(px_gpt_stage_backward(s1, 0, NULL, 1.0f, 1) != 0, "a stage backward before its forward accepted");
    for (int k = 0; k < M; k++) { /* gpipe: every forward, then the backwards */
        CHECK(px_gpt_stage_forward(s0, k, x[k], NULL, NULL, B, T) == 0.0f, "stage 0 forward of %d failed", k);
        lp[k] = px_gpt_stage_forward(s1, k, NULL, px_gpt_stage_output(s0, k), y[k], B, T);
    }
    for (int k = 0; k < M; k++) {
        CHECK(px_gpt_stage_backward(s1, k, NULL, 1.0f / M, 0) == 0, "stage 1 input half of %d failed", k);
        CHECK(px_gpt_stage_backward(s0, k, px_gpt_stage_input_grad(s1, k), 1.0f, 1) == 0, "stage 0 backward %d", k);
    }
    CHECK(px_gpt_stage_backward_weights(s0, 0) != 0, "a weight half on an unsplit stage accepted");
    for (int k = 0; k < M; k++) CHECK(px_gpt_stage_backward_weights(s1, k) == 0, "stage 1 weight half %d failed", k);
    CHECK(px_gpt_stage_backward_weights(s1, 0) != 0, "a second weight half accepted");
    CHECK(memcmp(lw, lp, sizeof lw) == 0, "pipelined losses differ: %.9g vs %.9g", lw[0], lp[0]);
    for (int t = PX_LN1W; t <= PX_FCPROJB; t++) {
        size_t per = whole->tensor_sizes[t] / (size_t)cfg.num_layers, off = whole->tensor_offsets[t];
        CHECK(memcmp(whole->grads + off, s0->grads + off, per * sizeof(float)) == 0, "layer 0 %s grads differ",
              px_gpt_tensor_names[t]);
        CHECK(memcmp(whole->grads + off + per, s1->grads + off + per, per * sizeof(float)) == 0,
              "layer 1 %s grads differ", px_gpt_tensor_names[t]);
    }
    int outer[] = {PX_WTE, PX_WPE, PX_LNFW, PX_LNFB};
    double worst = 0, biggest = 0; /* the sum's rounding differs from one buffer's: relative to the largest */
    for (int i = 0; i < 4; i++) {
        size_t off = whole->tensor_offsets[outer[i]];
        for (size_t j = 0; j < whole->tensor_sizes[outer[i]]; j++) {
            double want = whole->grads[off + j], got = (double)s0->grads[off + j] + s1->grads[off + j];
            worst = fmax(worst, fabs(want - got));
            biggest = fmax(biggest, fabs(want));
        }
    }
    CHECK(biggest > 0 && worst <= 1e-6 * biggest, "outer gradients: the stages' sum is %.3g off (largest %.3g)", worst,
          biggest);
    CHECK(px_gpt_activation_bytes(s0) / M < px_gpt_activation_bytes(whole), "stage 0 holds %zu bytes a slot, whole %zu",
          px_gpt_activation_bytes(s0) / M, px_gpt_activation_bytes(whole));
    px_gpt_destroy(&whole);
    px_gpt_destroy(&s0);
    px_gpt_destroy(&s1);
}

enum { RC_M = 3, RC_B = 2, RC_T = 64 }; /* test_recompute's micro-batches and their shape */

/* Accumulates RC_M micro-batches of (x, y) into a whole "small" model and
 * into its two stages (the second's backward split: input halves, then the
 * weight halves), with block recomputation `on`; losses into lw (whole) and
 * lp (stages). The three models come back in m for their gradients. */

static void recompute_run(int on, const int x[RC_M][RC_B * RC_T], const int y[RC_M][RC_B * RC_T], float *lw,
                          float *lp, px_gpt_t *m[3]) {
    px_gpt_config_t cfg;
    px_gpt_config_preset("small", &cfg);
    for (int i = 0; i < 3; i++) {
        m[i] = px_gpt_new(&cfg, 9);
        CHECK(px_gpt_set_recompute(m[i], on) == 0, "px_gpt_set_recompute(%d) refused", on);
    }
    px_gpt_t *whole = m[0], *s0 = m[1], *s1 = m[2];
    for (int k = 0; k < RC_M; k++) {
        lw[k] = px_gpt_forward(whole, x[k], y[k], RC_B, RC_T);
        CHECK(px_gpt_backward(whole, 1.0f / RC_M) == 0, "recompute %d: backward %d failed", on, k);
    }
    px_gpt_stage_t st0 = {0, 2, 1, 0}, st1 = {2, 2, 0, 1};
    CHECK(px_gpt_set_stage(s0, &st0, RC_M, 0) == 0 && px_gpt_set_stage(s1, &st1, RC_M, 1) == 0, "stages refused");
    CHECK(s0->recompute == on && s1->recompute == on, "px_gpt_set_stage dropped the recompute setting");
    for (int k = 0; k < RC_M; k++) {
        CHECK(px_gpt_stage_forward(s0, k, x[k], NULL, NULL, RC_B, RC_T) == 0.0f, "stage 0 forward %d failed", k);
        lp[k] = px_gpt_stage_forward(s1, k, NULL, px_gpt_stage_output(s0, k), y[k], RC_B, RC_T);
    }
    for (int k = 0; k < RC_M; k++) {
        CHECK(px_gpt_stage_backward(s1, k, NULL, 1.0f / RC_M, 0) == 0, "stage 1 input half %d failed", k);
        CHECK(px_gpt_stage_backward(s0, k, px_gpt_stage_input_grad(s1, k), 1.0f, 1) == 0, "stage 0 backward %d", k);
    }
    for (int k = 0; k < RC_M; k++) CHECK(px_gpt_stage_backward_weights(s1, k) == 0, "stage 1 weight half %d", k);
}

static void test_recompute(void) {
    px_gpt_config_t cfg;
    px_gpt_config_preset("small", &cfg);
    int x[RC_M][RC_B * RC_T], y[RC_M][RC_B * RC_T];
    for (int k = 0; k < RC_M; k++) make_batch(x[k], y[k], RC_B * RC_T, cfg.vocab_size, 300u + (unsigned)k);
    float lw[2][RC_M], lp[2][RC_M];
    px_gpt_t *m[2][3];
    for (int on = 0; on < 2; on++) recompute_run(on, x, y, lw[on], lp[on], m[on]);
    const char *what[3] = {"whole model", "stage 0", "stage 1 (split)"};
    CHECK(memcmp(lw[0], lw[1], sizeof lw[0]) == 0, "whole model: losses differ with recompute (%.9g vs %.9g)",
          lw[0][0], lw[1][0]);
    CHECK(memcmp(lp[0], lp[1], sizeof lp[0]) == 0, "stages: losses differ with recompute (%.9g vs %.9g)", lp[0][0],
          lp[1][0]);
    CHECK(memcmp(lw[0], lp[0], sizeof lw[0]) == 0, "stages and whole model: losses differ");
    for (int i = 0; i < 3; i++) {
        size_t n = m[0][i]->num_params, differ = 0;
        for (size_t j = 0; j < n; j++) differ += memcmp(&m[0][i]->grads[j], &m[1][i]->grads[j], sizeof(float)) != 0;
        CHECK(differ == 0, "%s: %zu of %zu gradients differ with recompute", what[i], differ, n);
        size_t off = px_gpt_activation_bytes(m[0][i]), on = px_gpt_activation_bytes(m[1][i]);
        CHECK(on < off, "%s: recompute holds %zu bytes of activations, without %zu", what[i], on, off);
        printf("recompute: %s B=%d T=%d x%d micro-batches: %zu of %zu grads differ; activations %zu -> %zu bytes "
               "(%.3f)\n", what[i], RC_B, RC_T, RC_M, differ, n, off, on, (double)on / (double)off);
    }
    CHECK(px_gpt_set_recompute(m[0][0], 2) != 0, "px_gpt_set_recompute(2) accepted");
    for (int on = 0; on < 2; on++)
        for (int i = 0; i < 3; i++) px_gpt_destroy(&m[on][i]);
}

/* What px_gpt_adamw_step_parts visited: per part, the next float expected
 * (blocks in order), and whether anything came out of order. */
typedef struct {
    size_t part, n, *next;
    int bad;
} visits_t;

static void visit(void *ctx, int k, size_t lo, size_t hi) {
    visits_t *v = ctx;
    size_t first = (size_t)k * v->part;
    if (k < 0 || lo != first + v->next[k] || hi <= lo || hi > first + v->part || hi > v->n) {
#pragma omp atomic write
        v->bad = 1;
        return;
    }
    v->next[k] = hi - first;
}

static void test_adamw_parts(void) {
    px_gpt_config_t cfg;
    px_gpt_config_preset("tiny", &cfg);
    px_gpt_t *a = px_gpt_new(&cfg, 5), *b = px_gpt_new(&cfg, 5);
    size_t n = a->num_params;
    const size_t parts[] = {1000, 3 * 1024, 16384 + 7, n};
    const int threads[] = {1, 3};
    for (int t = 1; t <= 3; t++) { /* three steps: the moments matter */
        for (size_t i = 0; i < n; i++) a->grads[i] = b->grads[i] = (float)((i * 2654435761u + (size_t)t) % 2001) * 1e-3f - 1.0f;
        px_gpt_adamw_step(a, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        for (size_t p = 0; p < sizeof parts / sizeof *parts; p++)
            for (int th = 0; th < 2; th++) {
                px_gpt_t *c = px_gpt_new(&cfg, 5);
                memcpy(c->params, b->params, n * sizeof(float));
                memcpy(c->m, b->m, n * sizeof(float));
                memcpy(c->v, b->v, n * sizeof(float));
                memcpy(c->grads, b->grads, n * sizeof(float));
                size_t k = (n + parts[p] - 1) / parts[p];
                visits_t v = {parts[p], n, calloc(k, sizeof(size_t)), 0};
                omp_set_num_threads(threads[th]);
                px_gpt_adamw_step_parts(c, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, parts[p], visit, &v);
                omp_set_num_threads(2);
                int all = !v.bad;
                for (size_t j = 0; j < k; j++) all &= v.next[j] == (j + 1 < k ? parts[p] : n - j * parts[p]);
                CHECK(all, "step %d, parts of %zu, %d threads: floats visited out of order or not once", t, parts[p],
                      threads[th]);
                CHECK(!memcmp(a->params, c->params, n * sizeof(float)) && !memcmp(a->m, c->m, n * sizeof(float)) &&
                          !memcmp(a->v, c->v, n * sizeof(float)),
                      "step %d, parts of %zu, %d threads: not bitwise the whole step", t, parts[p], threads[th]);
                free(v.next);
                px_gpt_destroy(&c);
            }
        px_gpt_adamw_step(b, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    }
    CHECK(memcmp(a->params, b->params, n * sizeof(float)) == 0, "the reference runs differ");
    px_gpt_destroy(&a);
    px_gpt_destroy(&b);
}

int main(void) {
    omp_set_num_threads(2);
    test_adamw_parts();
    test_counts();
    test_lr();
    test_init();
    test_accumulation();
    test_determinism();
    test_misuse();
    test_stages();
    test_recompute();
    if (g_failures) {
        printf("test_gpt: %d check(s) FAILED\n", g_failures);
        return 1;
    }
    printf("test_gpt: all checks passed\n");
    return 0;
}
