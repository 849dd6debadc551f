/* The CUDA model against PyTorch: the same committed fixture and the same
 * tolerances as the CPU's reference test (tests/model/test_reference.c;
 * fixture written by tests/reference/make_fixture.py). The weights come from
 * tiny_gpt2.bin, loaded on the host with px_gpt_load and uploaded.
 *
 * Checked: logits (forward without targets) and every parameter gradient within
 * 1e-4 of the largest magnitude in each tensor; the loss and the 10 AdamW
 * steps' losses within 1e-5 relative, their pre-clip gradient norms within
 * 1e-4. Exits 1 naming every miss, 77 (skipped) without a GPU.
 *   usage: test_gpu_reference DIR   (DIR holds tiny_gpt2.bin and tiny_fixture.bin) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "gpt_cuda.h"
#include "gpu_test.h"
#include "llmc.h"
#include "px_err.h"

#define FIXTURE_MAGIC 20241103

static void check_scalar(const char *what, double got, double want, double rtol) {
    gt_checks++;
    if (fabs(got - want) <= rtol * fabs(want)) {
        printf("ok   %-44s gpu %.8f torch %.8f\n", what, got, want);
    } else {
        printf("FAIL %-44s gpu %.8f torch %.8f (rtol %.1g)\n", what, got, want, rtol);
        gt_failures++;
    }
}

static void *read_exact(FILE *f, size_t bytes, const char *what, const char *path) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p || fread(p, 1, bytes, f) != bytes) {
        printf("FAIL fixture '%s' is truncated reading %s (regenerate with "
               "tests/reference/make_fixture.py)\n", path, what);
        exit(1);
    }
    return p;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_gpu_reference DIR\n");
        return 2;
    }
    gt_require_gpu("test_gpu_reference");
    char path[4096], err[PX_ERRLEN];
    snprintf(path, sizeof path, "%s/tiny_gpt2.bin", argv[1]);
    px_gpt_t *host = NULL;
    if (px_gpt_load(path, &host, err, sizeof err) != 0) {
        printf("FAIL %s\n", err);
        return 1;
    }
    size_t np = host->num_params;

    snprintf(path, sizeof path, "%s/tiny_fixture.bin", argv[1]);
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("FAIL cannot open fixture '%s'\n", path);
        return 1;
    }
    int32_t *h = read_exact(f, 256 * sizeof(int32_t), "header", path);
    float *hp = read_exact(f, 16 * sizeof(float), "hyperparameters", path);
    if (h[0] != FIXTURE_MAGIC || h[1] != 1 || (size_t)h[5] != np ||
        h[6] != host->config.vocab_size || h[7] != host->config.padded_vocab_size) {
        printf("FAIL fixture '%s' has a bad header or belongs to another model\n", path);
        return 1;
    }
    int B = h[2], T = h[3], nsteps = h[4], Vp = h[7];
    size_t BT = (size_t)B * T, nlogits = BT * (size_t)Vp;
    int *inputs = read_exact(f, BT * sizeof(int), "inputs", path);
    int *targets = read_exact(f, BT * sizeof(int), "targets", path);
    float *logits = read_exact(f, nlogits * sizeof(float), "logits", path);
    float *loss = read_exact(f, sizeof(float), "loss", path);
    float *grads = read_exact(f, np * sizeof(float), "grads", path);
    float *step_losses = read_exact(f, (size_t)nsteps * sizeof(float), "step losses", path);
    float *step_norms = read_exact(f, (size_t)nsteps * sizeof(float), "step norms", path);
    fclose(f);
    float lr = hp[0], beta1 = hp[1], beta2 = hp[2], eps = hp[3], wd = hp[4], clip = hp[5];
    printf("fixture: B=%d T=%d steps=%d params=%zu lr=%g clip=%g\n", B, T, nsteps, np, lr, clip);

    px_gpt_cuda_t *gpu = px_gpt_cuda_new(&host->config);
    if (!gpu || px_gpt_cuda_upload(gpu, PX_GPT_CUDA_PARAMS, host->params, np) != 0) {
        printf("FAIL could not create the CUDA model\n");
        return 1;
    }

    float *got = (float *)malloc((nlogits > np ? nlogits : np) * sizeof(float));
    px_gpt_cuda_forward(gpu, inputs, NULL, B, T);
    px_gpt_cuda_download_logits(gpu, got, nlogits);
    gt_close("logits", got, logits, nlogits, 1e-4, 0);
    float l0 = px_gpt_cuda_forward(gpu, inputs, targets, B, T);
    check_scalar("loss", l0, *loss, 1e-5);
    px_gpt_cuda_zero_grad(gpu);
    if (px_gpt_cuda_backward(gpu, 1.0f) != 0) return 1;
    px_gpt_cuda_download(gpu, PX_GPT_CUDA_GRADS, got, np);
    for (int t = 0; t < PX_GPT_NUM_TENSORS; t++) {
        size_t off = host->tensor_offsets[t];
        char name[64];
        snprintf(name, sizeof name, "grad %s", px_gpt_tensor_names[t]);
        gt_close(name, got + off, grads + off, host->tensor_sizes[t], 1e-4, 0);
    }

    for (int s = 0; s < nsteps; s++) {
        px_gpt_cuda_zero_grad(gpu);
        float l = px_gpt_cuda_forward(gpu, inputs, targets, B, T);
        px_gpt_cuda_backward(gpu, 1.0f);
        float norm = px_gpt_cuda_clip_grads(gpu, clip);
        px_gpt_cuda_adamw_step(gpu, lr, beta1, beta2, eps, wd, s + 1);
        char name[64];
        snprintf(name, sizeof name, "step %d loss", s);
        check_scalar(name, l, step_losses[s], 1e-5);
        snprintf(name, sizeof name, "step %d norm", s);
        check_scalar(name, norm, step_norms[s], 1e-4);
    }

    px_gpt_cuda_destroy(&gpu);
    px_gpt_destroy(&host);
    free(h), free(hp), free(inputs), free(targets), free(logits), free(loss), free(grads);
    free(step_losses), free(step_norms), free(got);
    return gt_finish("test_gpu_reference");
}
