/* The whole `tiny` model against PyTorch. tests/reference/make_fixture.py ran
 * the same GPT-2 in float64 on the same weights (tiny_gpt2.bin, an llm.c model
 * file written by Python, loaded here with px_gpt_load) and batch, and stored
 * the logits, the loss, every parameter gradient and 10 AdamW steps (loss and
 * pre-clip gradient norm each) in tiny_fixture.bin.
 *
 * Tolerances: logits and gradients within 1e-4 of the largest
 * magnitude in each tensor, losses within 1e-5 relative. Exits non-zero naming
 * every tensor that misses.
 *   usage: test_reference DIR   (DIR holds tiny_gpt2.bin and tiny_fixture.bin) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "llmc.h"
#include "px_err.h"

#define FIXTURE_MAGIC 20241103

static int g_failures;

static void check_tensor(const char *what, const float *got, const float *want, size_t n,
                         double rtol) {
    double maxabs = 0, maxerr = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double a = fabs(want[i]), e = fabs((double)got[i] - want[i]);
        if (a > maxabs) maxabs = a;
        if (!(e <= maxerr)) {
            maxerr = e;
            at = i;
        }
    }
    double tol = rtol * maxabs;
    int ok = maxerr <= tol;
    printf("%s %-14s max error %.3e at [%zu] (got %.7g, want %.7g), tolerance %.3e\n",
           ok ? "ok  " : "FAIL", what, maxerr, at, got[at], want[at], tol);
    if (!ok) g_failures++;
}

static void check_scalar(const char *what, double got, double want, double rtol) {
    double err = fabs(got - want), tol = rtol * fabs(want);
    int ok = err <= tol;
    printf("%s %-14s got %.8f want %.8f (error %.2e, tolerance %.2e)\n", ok ? "ok  " : "FAIL",
           what, got, want, err, tol);
    if (!ok) g_failures++;
}

static void *read_exact(FILE *f, size_t bytes, const char *what, const char *path) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p || fread(p, 1, bytes, f) != bytes) {
        fprintf(stderr, "test_reference: fixture '%s' is truncated reading %s "
                        "(regenerate with tests/reference/make_fixture.py)\n", path, what);
        exit(1);
    }
    return p;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_reference DIR\n");
        return 2;
    }
    char path[4096], err[PX_ERRLEN];
    snprintf(path, sizeof path, "%s/tiny_gpt2.bin", argv[1]);
    px_gpt_t *model = NULL;
    if (px_gpt_load(path, &model, err, sizeof err) != 0) {
        fprintf(stderr, "test_reference: %s\n", err);
        return 1;
    }
    px_gpt_config_t tiny;
    px_gpt_config_preset("tiny", &tiny);
    if (memcmp(&tiny, &model->config, sizeof tiny) != 0) {
        fprintf(stderr, "test_reference: %s does not have the tiny preset's config\n", path);
        return 1;
    }

    snprintf(path, sizeof path, "%s/tiny_fixture.bin", argv[1]);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "test_reference: cannot open fixture '%s'\n", path);
        return 1;
    }
    int32_t *h = read_exact(f, 256 * sizeof(int32_t), "header", path);
    float *hp = read_exact(f, 16 * sizeof(float), "hyperparameters", path);
    if (h[0] != FIXTURE_MAGIC || h[1] != 1 || (size_t)h[5] != model->num_params ||
        h[6] != tiny.vocab_size || h[7] != tiny.padded_vocab_size) {
        fprintf(stderr, "test_reference: fixture '%s' has a bad header or another model\n", path);
        return 1;
    }
    int B = h[2], T = h[3], nsteps = h[4], Vp = h[7];
    size_t BT = (size_t)B * T, np = model->num_params;
    int *inputs = read_exact(f, BT * sizeof(int), "inputs", path);
    int *targets = read_exact(f, BT * sizeof(int), "targets", path);
    float *logits = read_exact(f, BT * Vp * sizeof(float), "logits", path);
    float *loss = read_exact(f, sizeof(float), "loss", path);
    float *grads = read_exact(f, np * sizeof(float), "grads", path);
    float *step_losses = read_exact(f, nsteps * sizeof(float), "step losses", path);
    float *step_norms = read_exact(f, nsteps * sizeof(float), "step norms", path);
    fclose(f);
    float lr = hp[0], beta1 = hp[1], beta2 = hp[2], eps = hp[3], wd = hp[4], clip = hp[5];
    printf("fixture: B=%d T=%d steps=%d params=%zu lr=%g clip=%g\n", B, T, nsteps, np, lr, clip);

    /* logits (forward without targets), then loss and gradients */
    px_gpt_forward(model, inputs, NULL, B, T);
    check_tensor("logits", px_gpt_logits(model), logits, BT * Vp, 1e-4);
    float l0 = px_gpt_forward(model, inputs, targets, B, T);
    check_scalar("loss", l0, *loss, 1e-5);
    px_gpt_zero_grad(model);
    if (px_gpt_backward(model, 1.0f) != 0) return 1;
    for (int t = 0; t < PX_GPT_NUM_TENSORS; t++) {
        size_t off = model->tensor_offsets[t], n = model->tensor_sizes[t];
        char name[32];
        snprintf(name, sizeof name, "grad %s", px_gpt_tensor_names[t]);
        check_tensor(name, model->grads + off, grads + off, n, 1e-4);
    }

    /* AdamW steps on the same batch, with gradient clipping */
    for (int s = 0; s < nsteps; s++) {
        px_gpt_zero_grad(model);
        float l = px_gpt_forward(model, inputs, targets, B, T);
        px_gpt_backward(model, 1.0f);
        float norm = px_gpt_clip_grads(model, clip);
        px_gpt_adamw_step(model, lr, beta1, beta2, eps, wd, s + 1);
        char name[32];
        snprintf(name, sizeof name, "step %d loss", s);
        check_scalar(name, l, step_losses[s], 1e-5);
        snprintf(name, sizeof name, "step %d norm", s);
        check_scalar(name, norm, step_norms[s], 1e-4);
    }

    px_gpt_destroy(&model);
    free(h), free(hp), free(inputs), free(targets), free(logits), free(loss), free(grads);
    free(step_losses), free(step_norms);
    if (g_failures) {
        printf("test_reference: %d tensor(s) or value(s) out of tolerance\n", g_failures);
        return 1;
    }
    printf("test_reference: C model matches PyTorch\n");
    return 0;
}
