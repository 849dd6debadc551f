/* The CUDA model (model/gpt_cuda.h) against the CPU model (model/gpt.h), both
 * starting from the same seeded parameters (initialized on the host by
 * px_gpt_new, then uploaded). For each of two configs (the `tiny` preset, and
 * an odd one: three layers, head size 24, V < Vp, T not a multiple of 32):
 *   - the blob layout: same tensor sizes, offsets and total, and an
 *     upload/download round trip that is bitwise exact;
 *   - forward: mean loss, per-position losses and logits; inference without
 *     targets; a bad token rejected with NAN;
 *   - backward: every parameter gradient, named by tensor; the global norm;
 *     two micro-batches with loss_scale 0.5 accumulating like the CPU's;
 *   - training: 10 steps of clip + AdamW (weight decay on matrices only),
 *     losses and norms step by step, then parameters and both moments;
 *   - reproducibility: a second GPU model replaying the 10 steps gives
 *     bitwise identical losses and parameters, and a third with block
 *     recomputation too;
 *   - pipeline stages (check_stages): two stages, one with a split
 *     backward, give the whole model's loss and gradients;
 *   - bf16 math (run_bf16): bf16 activations, with the fused attention
 *     and the unfused one; inference logits and training close to the CPU's, and
 *     reproducible (the replay recomputes); stages as above.
 * Tolerances are relative to the largest magnitude in each tensor (the rule
 * of the CPU model's reference test, tests/model/test_reference.c): loose
 * enough for FP32 summed in another order, tight enough that a wrong formula,
 * index or missing term (which miss by O(1)) fails. Exits 1 naming each miss, 77 without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "gpt_cuda.h"
#include "gpu_test.h"

#define STEPS 10

static void check_scalar(const char *what, double got, double want, double rtol) {
    gt_checks++;
    if (fabs(got - want) <= rtol * fabs(want) && got == got) {
        printf("ok   %-44s gpu %.9g cpu %.9g\n", what, got, want);
    } else {
        printf("FAIL %-44s gpu %.9g cpu %.9g (rtol %.1g)\n", what, got, want, rtol);
        gt_failures++;
    }
}

/* Per-tensor comparison of a GPU state buffer (downloaded) with the CPU's. */
static void compare_buffer(const char *cfgname, const char *what, const px_gpt_t *cpu,
                           const float *got, const float *want, double rtol) {
    char tag[160];
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) {
        size_t off = cpu->tensor_offsets[i], n = cpu->tensor_sizes[i];
        snprintf(tag, sizeof tag, "%s %s %s", cfgname, what, px_gpt_tensor_names[i]);
        gt_close(tag, got + off, want + off, n, rtol, 1e-12);
    }
}

static float *download(px_gpt_cuda_t *g, px_gpt_cuda_buf_t which, size_t n) {
    float *h = (float *)malloc(n * sizeof(float));
    if (!h || px_gpt_cuda_download(g, which, h, n) != 0) exit(1);
    return h;
}

static void check_layout(const char *name, const px_gpt_t *cpu, px_gpt_cuda_t *gpu) {
    char tag[160];
    int ok = px_gpt_cuda_num_params(gpu) == cpu->num_params;
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++)
        ok = ok && px_gpt_cuda_tensor_offset(gpu, i) == cpu->tensor_offsets[i];
    snprintf(tag, sizeof tag, "%s blob layout (%zu params)", name, cpu->num_params);
    gt_checks++;
    if (ok) {
        printf("ok   %s\n", tag);
    } else {
        printf("FAIL %s: size or tensor offsets differ from the CPU model\n", tag);
        gt_failures++;
    }
}

/* One training step on both sides of a batch; returns the GPU loss. */
static float train_step(px_gpt_t *cpu, px_gpt_cuda_t *gpu, const int *x, const int *y, int B,
                        int T, int step, float *cpu_loss, float *cpu_norm, float *gpu_norm) {
    float lg = 0.0f;
    if (cpu) {
        px_gpt_zero_grad(cpu);
        *cpu_loss = px_gpt_forward(cpu, x, y, B, T);
        px_gpt_backward(cpu, 1.0f);
        *cpu_norm = px_gpt_clip_grads(cpu, 1.0f);
        px_gpt_adamw_step(cpu, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
    }
    px_gpt_cuda_zero_grad(gpu);
    lg = px_gpt_cuda_forward(gpu, x, y, B, T);
    px_gpt_cuda_backward(gpu, 1.0f);
    *gpu_norm = px_gpt_cuda_clip_grads(gpu, 1.0f);
    px_gpt_cuda_adamw_step(gpu, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
    return lg;
}

/* Fresh gradients of two micro-batches at loss scale 0.5 on both models. */
static void two_micro_batches(px_gpt_t *cpu, px_gpt_cuda_t *gpu, const int *x, const int *y, const int *x2,
                              const int *y2, int B, int T) {
    px_gpt_zero_grad(cpu);
    px_gpt_cuda_zero_grad(gpu);
    px_gpt_forward(cpu, x, y, B, T);
    px_gpt_backward(cpu, 0.5f);
    px_gpt_forward(cpu, x2, y2, B, T);
    px_gpt_backward(cpu, 0.5f);
    px_gpt_cuda_forward(gpu, x, y, B, T);
    px_gpt_cuda_backward(gpu, 0.5f);
    px_gpt_cuda_forward(gpu, x2, y2, B, T);
    px_gpt_cuda_backward(gpu, 0.5f);
}

/* A fresh GPU model (block recomputation on or off) replays the STEPS steps
 * from init: its losses and parameters must be bitwise those given. */
static px_gpt_cuda_t *replay_bitwise(const char *name, const char *what, const px_gpt_config_t *cfg, int recompute,
                                     const float *init, size_t np, int *const *bx, int *const *by, int B, int T,
                                     const float *losses, const float *params) {
    char tag[160];
    px_gpt_cuda_t *gpu = px_gpt_cuda_new(cfg);
    if (!gpu || px_gpt_cuda_set_recompute(gpu, recompute) != 0) exit(1);
    px_gpt_cuda_upload(gpu, PX_GPT_CUDA_PARAMS, init, np);
    float replay[STEPS];
    for (int s = 0; s < STEPS; s++) {
        float gn = 0;
        replay[s] = train_step(NULL, gpu, bx[s], by[s], B, T, s + 1, NULL, NULL, &gn);
    }
    snprintf(tag, sizeof tag, "%s %s losses", name, what);
    gt_same(tag, replay, losses, STEPS);
    float *got = download(gpu, PX_GPT_CUDA_PARAMS, np);
    snprintf(tag, sizeof tag, "%s %s params", name, what);
    gt_same(tag, got, params, np);
    free(got);
    return gpu;
}

static void run_config(const char *name, const px_gpt_config_t *cfg, int B, int T) {
    char tag[160];
    px_gpt_t *cpu = px_gpt_new(cfg, 1337);
    px_gpt_cuda_t *gpu = px_gpt_cuda_new(cfg);
    if (!cpu || !gpu) {
        printf("FAIL %s: could not create the models\n", name);
        gt_failures++;
        return;
    }
    size_t np = cpu->num_params, BT = (size_t)B * T;
    size_t nlogits = BT * (size_t)cfg->padded_vocab_size;
    check_layout(name, cpu, gpu);

    float *init = gt_copy(cpu->params, np);
    px_gpt_cuda_upload(gpu, PX_GPT_CUDA_PARAMS, init, np);
    float *back = download(gpu, PX_GPT_CUDA_PARAMS, np);
    snprintf(tag, sizeof tag, "%s params upload/download", name);
    gt_same(tag, back, init, np);
    free(back);

    /* ---- forward ---- */
    int *x = gt_tokens(BT, cfg->vocab_size), *y = gt_tokens(BT, cfg->vocab_size);
    float lc = px_gpt_forward(cpu, x, y, B, T);
    float lg = px_gpt_cuda_forward(gpu, x, y, B, T);
    snprintf(tag, sizeof tag, "%s forward mean loss", name);
    check_scalar(tag, lg, lc, 1e-5);
    float *gl = (float *)malloc(nlogits * sizeof(float));
    float *glosses = (float *)malloc(BT * sizeof(float));
    px_gpt_cuda_download_logits(gpu, gl, nlogits);
    px_gpt_cuda_download_losses(gpu, glosses, BT);
    snprintf(tag, sizeof tag, "%s forward logits", name);
    gt_close(tag, gl, px_gpt_logits(cpu), nlogits, 1e-4, 0);
    snprintf(tag, sizeof tag, "%s forward losses", name);
    gt_close(tag, glosses, px_gpt_losses(cpu), BT, 1e-5, 0);

    /* ---- backward ---- */
    px_gpt_zero_grad(cpu);
    px_gpt_cuda_zero_grad(gpu);
    px_gpt_backward(cpu, 1.0f);
    px_gpt_cuda_backward(gpu, 1.0f);
    float *gg = download(gpu, PX_GPT_CUDA_GRADS, np);
    compare_buffer(name, "grad", cpu, gg, cpu->grads, 5e-4);
    free(gg);
    snprintf(tag, sizeof tag, "%s grad norm", name);
    check_scalar(tag, px_gpt_cuda_grad_norm(gpu), px_gpt_grad_norm(cpu), 1e-4);

    /* ---- two micro-batches of loss_scale 0.5 accumulate ---- */
    int *x2 = gt_tokens(BT, cfg->vocab_size), *y2 = gt_tokens(BT, cfg->vocab_size);
    two_micro_batches(cpu, gpu, x, y, x2, y2, B, T);
    gg = download(gpu, PX_GPT_CUDA_GRADS, np);
    compare_buffer(name, "accumulated grad", cpu, gg, cpu->grads, 5e-4);
    free(gg);

    /* ---- inference and bad input ---- */
    float li = px_gpt_cuda_forward(gpu, x2, NULL, B, T);
    px_gpt_forward(cpu, x2, NULL, B, T);
    px_gpt_cuda_download_logits(gpu, gl, nlogits);
    snprintf(tag, sizeof tag, "%s inference logits (no targets, returns -1)", name);
    if (li != -1.0f) {
        printf("FAIL %s: returned %g\n", tag, (double)li);
        gt_failures++;
    } else {
        gt_close(tag, gl, px_gpt_logits(cpu), nlogits, 1e-4, 0);
    }
    x2[BT - 1] = cfg->vocab_size; /* out of range */
    float lbad = px_gpt_cuda_forward(gpu, x2, y2, B, T);
    snprintf(tag, sizeof tag, "%s bad token rejected with NAN", name);
    gt_checks++;
    if (lbad != lbad) {
        printf("ok   %s\n", tag);
    } else {
        printf("FAIL %s: returned %g\n", tag, (double)lbad);
        gt_failures++;
    }

    /* ---- training: both models restart from init ---- */
    memcpy(cpu->params, init, np * sizeof(float));
    memset(cpu->m, 0, np * sizeof(float));
    memset(cpu->v, 0, np * sizeof(float));
    px_gpt_cuda_upload(gpu, PX_GPT_CUDA_PARAMS, init, np);
    float *zeros = (float *)calloc(np, sizeof(float));
    px_gpt_cuda_upload(gpu, PX_GPT_CUDA_M, zeros, np);
    px_gpt_cuda_upload(gpu, PX_GPT_CUDA_V, zeros, np);
    int *bx[STEPS], *by[STEPS];
    float gpu_losses[STEPS];
    for (int s = 0; s < STEPS; s++) {
        bx[s] = gt_tokens(BT, cfg->vocab_size);
        by[s] = gt_tokens(BT, cfg->vocab_size);
        float cl = 0, cn = 0, gn = 0;
        gpu_losses[s] = train_step(cpu, gpu, bx[s], by[s], B, T, s + 1, &cl, &cn, &gn);
        snprintf(tag, sizeof tag, "%s train step %d loss", name, s + 1);
        check_scalar(tag, gpu_losses[s], cl, 1e-4);
        snprintf(tag, sizeof tag, "%s train step %d grad norm", name, s + 1);
        check_scalar(tag, gn, cn, 1e-3);
    }
    float *gp = download(gpu, PX_GPT_CUDA_PARAMS, np);
    float *gm = download(gpu, PX_GPT_CUDA_M, np);
    float *gv = download(gpu, PX_GPT_CUDA_V, np);
    compare_buffer(name, "trained param", cpu, gp, cpu->params, 1e-3);
    compare_buffer(name, "adamw m", cpu, gm, cpu->m, 1e-3);
    compare_buffer(name, "adamw v", cpu, gv, cpu->v, 1e-3);

    /* ---- reproducibility: fresh GPU models replay the same steps, the
     * second with block recomputation ---- */
    px_gpt_cuda_t *gpu2 = replay_bitwise(name, "replay", cfg, 0, init, np, bx, by, B, T, gpu_losses, gp);
    px_gpt_cuda_t *gpu3 = replay_bitwise(name, "recompute", cfg, 1, init, np, bx, by, B, T, gpu_losses, gp);
    snprintf(tag, sizeof tag, "%s recompute 2 refused", name);
    gt_checks++;
    if (px_gpt_cuda_set_recompute(gpu3, 2) == -1) {
        printf("ok   %s\n", tag);
    } else {
        printf("FAIL %s\n", tag);
        gt_failures++;
    }
    px_gpt_cuda_destroy(&gpu3);

    for (int s = 0; s < STEPS; s++) {
        free(bx[s]);
        free(by[s]);
    }
    free(gp);
    free(gm);
    free(gv);
    free(zeros);
    free(init);
    free(gl);
    free(glosses);
    free(x);
    free(y);
    free(x2);
    free(y2);
    px_gpt_cuda_destroy(&gpu2);
    px_gpt_cuda_destroy(&gpu);
    px_gpt_destroy(&cpu);
}

/* Two pipeline stages (layers cut after the first; the second with two
 * activation slots and the backward split into its input and weight
 * halves) against the whole model, from the same parameters and batch: the
 * same loss, and gradients that are the whole model's (bitwise, but wte:
 * there the stages' two sums, the classifier's and the embedding's, are
 * added in another order). In the math mode set. */
static void check_stages(const char *name, const px_gpt_config_t *cfg, const float *params, int B, int T) {
    char tag[160];
    size_t BT = (size_t)B * T;
    px_gpt_cuda_t *whole = px_gpt_cuda_new(cfg), *s0 = px_gpt_cuda_new(cfg), *s1 = px_gpt_cuda_new(cfg);
    if (!whole || !s0 || !s1) exit(1);
    size_t np = px_gpt_cuda_num_params(whole);
    px_gpt_stage_t st0 = {0, 1, 1, 0}, st1 = {1, cfg->num_layers - 1, 0, 1};
    if (px_gpt_cuda_set_stage(s0, &st0, 1, 0) != 0 || px_gpt_cuda_set_stage(s1, &st1, 2, 1) != 0) exit(1);
    px_gpt_cuda_t *all[3] = {whole, s0, s1};
    for (int i = 0; i < 3; i++) {
        px_gpt_cuda_upload(all[i], PX_GPT_CUDA_PARAMS, params, np);
        px_gpt_cuda_zero_grad(all[i]);
    }
    int *x = gt_tokens(BT, cfg->vocab_size), *y = gt_tokens(BT, cfg->vocab_size);
    float lw = px_gpt_cuda_forward(whole, x, y, B, T);
    px_gpt_cuda_backward(whole, 1.0f);
    px_gpt_cuda_stage_forward(s0, 0, x, NULL, NULL, B, T);
    float ls = px_gpt_cuda_stage_forward(s1, 1, NULL, px_gpt_cuda_stage_output(s0, 0), y, B, T);
    if (px_gpt_cuda_stage_backward(s1, 1, NULL, 1.0f, 0) != 0 ||
        px_gpt_cuda_stage_backward(s0, 0, px_gpt_cuda_stage_input_grad(s1, 1), 1.0f, 1) != 0 ||
        px_gpt_cuda_stage_backward_weights(s1, 1) != 0)
        exit(1);
    snprintf(tag, sizeof tag, "%s stages loss", name);
    gt_same(tag, &ls, &lw, 1);
    float *gw = download(whole, PX_GPT_CUDA_GRADS, np), *g0 = download(s0, PX_GPT_CUDA_GRADS, np),
          *g1 = download(s1, PX_GPT_CUDA_GRADS, np);
    for (size_t i = 0; i < np; i++) g0[i] += g1[i]; /* each tensor but wte is one stage's, the other's is 0 */
    for (int t = 0; t < PX_GPT_NUM_TENSORS; t++) {
        size_t off = px_gpt_cuda_tensor_offset(whole, t), n = t + 1 < PX_GPT_NUM_TENSORS
                                                                 ? px_gpt_cuda_tensor_offset(whole, t + 1) - off
                                                                 : np - off;
        snprintf(tag, sizeof tag, "%s stages grad %s", name, px_gpt_tensor_names[t]);
        if (t == PX_WTE) gt_close(tag, g0 + off, gw + off, n, 1e-6, 0.0);
        else gt_same(tag, g0 + off, gw + off, n);
    }
    free(gw);
    free(g0);
    free(g1);
    free(x);
    free(y);
    for (int i = 0; i < 3; i++) px_gpt_cuda_destroy(&all[i]);
}

/* bf16 math (px_cuda_ops_set_math): STEPS training steps beside the CPU
 * model, losses within 2e-2 and gradient norms within 5e-2 of it (bf16
 * inputs to every product: 8 significant bits), then a second GPU model
 * replaying them bitwise. Activations are bf16 in every config; head
 * sizes 16 and 64 take the fused attention (unless turned off), 24 the
 * unfused one. */
static void run_bf16(const char *name, const px_gpt_config_t *cfg, int B, int T) {
    char tag[160];
    px_cuda_ops_set_math(PX_CUDA_MATH_BF16);
    px_gpt_t *cpu = px_gpt_new(cfg, 1337);
    size_t np = cpu->num_params, BT = (size_t)B * T;
    px_gpt_cuda_t *gpu = px_gpt_cuda_new(cfg), *gpu2 = px_gpt_cuda_new(cfg);
    if (!gpu || !gpu2 || px_gpt_cuda_set_recompute(gpu2, 1) != 0) exit(1); /* the replay recomputes */
    int hs = cfg->channels / cfg->num_heads;
    int fused = px_cuda_ops_fused_attention() && (hs == 16 || hs == 32 || hs == 64 || hs == 128);
    snprintf(tag, sizeof tag, "%s bf16 activations, %s attention", name, fused ? "fused" : "unfused");
    gt_checks++;
    if (px_gpt_cuda_bf16_activations(gpu) == 1 && px_gpt_cuda_fused_attention(gpu) == fused) {
        printf("ok   %s\n", tag);
    } else {
        printf("FAIL %s: the model says bf16 %d fused %d\n", tag, px_gpt_cuda_bf16_activations(gpu),
               px_gpt_cuda_fused_attention(gpu));
        gt_failures++;
    }
    char stages[96];
    snprintf(stages, sizeof stages, "%s bf16", name);
    check_stages(stages, cfg, cpu->params, B, T);
    /* inference: the logits (bf16 when stored so) against the CPU's, within
     * bf16's rounding of activations and weights */
    px_gpt_cuda_upload(gpu, PX_GPT_CUDA_PARAMS, cpu->params, np);
    int *xi = gt_tokens(BT, cfg->vocab_size);
    size_t nl = BT * (size_t)cfg->padded_vocab_size;
    float *li = (float *)malloc(nl * sizeof(float));
    if (!li) exit(1);
    px_gpt_forward(cpu, xi, NULL, B, T);
    px_gpt_cuda_forward(gpu, xi, NULL, B, T);
    snprintf(tag, sizeof tag, "%s bf16 inference logits", name);
    if (px_gpt_cuda_download_logits(gpu, li, nl) != 0) exit(1);
    gt_close(tag, li, px_gpt_logits(cpu), nl, 2e-2, 0);
    free(li);
    free(xi);
    float *zeros = (float *)calloc(np, sizeof(float));
    px_gpt_cuda_t *both[2] = {gpu, gpu2};
    for (int i = 0; i < 2; i++) {
        px_gpt_cuda_upload(both[i], PX_GPT_CUDA_PARAMS, cpu->params, np);
        px_gpt_cuda_upload(both[i], PX_GPT_CUDA_M, zeros, np);
        px_gpt_cuda_upload(both[i], PX_GPT_CUDA_V, zeros, np);
    }
    float losses[STEPS], replay[STEPS];
    for (int s = 0; s < STEPS; s++) {
        int *x = gt_tokens(BT, cfg->vocab_size), *y = gt_tokens(BT, cfg->vocab_size);
        float cl = 0, cn = 0, gn = 0, gn2 = 0;
        losses[s] = train_step(cpu, gpu, x, y, B, T, s + 1, &cl, &cn, &gn);
        replay[s] = train_step(NULL, gpu2, x, y, B, T, s + 1, NULL, NULL, &gn2);
        snprintf(tag, sizeof tag, "%s bf16 train step %d loss", name, s + 1);
        check_scalar(tag, losses[s], cl, 2e-2);
        snprintf(tag, sizeof tag, "%s bf16 train step %d grad norm", name, s + 1);
        check_scalar(tag, gn, cn, 5e-2);
        free(x);
        free(y);
    }
    snprintf(tag, sizeof tag, "%s bf16 replay losses", name);
    gt_same(tag, replay, losses, STEPS);

    /* Two micro-batches of loss scale 0.5 (the fused classifier's gradient,
     * for scale 1, is scaled in the backward): the CPU's gradient norm. */
    int *x = gt_tokens(BT, cfg->vocab_size), *y = gt_tokens(BT, cfg->vocab_size);
    int *x2 = gt_tokens(BT, cfg->vocab_size), *y2 = gt_tokens(BT, cfg->vocab_size);
    two_micro_batches(cpu, gpu, x, y, x2, y2, B, T);
    snprintf(tag, sizeof tag, "%s bf16 accumulated grad norm", name);
    check_scalar(tag, px_gpt_cuda_grad_norm(gpu), px_gpt_grad_norm(cpu), 5e-2);
    /* the logits of a forward with targets are the gradient's now: refused */
    size_t nlogits = BT * (size_t)cfg->padded_vocab_size;
    float *gl = (float *)malloc(nlogits * sizeof(float));
    if (!gl) exit(1);
    snprintf(tag, sizeof tag, "%s bf16 logits after a forward with targets refused", name);
    gt_checks++;
    if (px_gpt_cuda_download_logits(gpu, gl, nlogits) == -1) {
        printf("ok   %s\n", tag);
    } else {
        printf("FAIL %s\n", tag);
        gt_failures++;
    }
    free(gl);
    free(x);
    free(y);
    free(x2);
    free(y2);
    float *p1 = download(gpu, PX_GPT_CUDA_PARAMS, np), *p2 = download(gpu2, PX_GPT_CUDA_PARAMS, np);
    snprintf(tag, sizeof tag, "%s bf16 replay params", name);
    gt_same(tag, p2, p1, np);
    free(p1);
    free(p2);
    free(zeros);
    px_gpt_cuda_destroy(&gpu2);
    px_gpt_cuda_destroy(&gpu);
    px_gpt_destroy(&cpu);
    px_cuda_ops_set_math(PX_CUDA_MATH_FP32);
}

int main(void) {
    gt_require_gpu("test_gpu_model");
    gt_seed(20240520);
    px_gpt_config_t tiny;
    if (px_gpt_config_preset("tiny", &tiny) != 0) {
        printf("FAIL the CPU model has no `tiny` preset\n");
        return 1;
    }
    run_config("tiny", &tiny, 4, tiny.max_seq_len);
    px_gpt_config_t odd = {.max_seq_len = 40, .vocab_size = 97, .padded_vocab_size = 128,
                           .num_layers = 3, .num_heads = 2, .channels = 48};
    run_config("odd", &odd, 3, 33);
    px_gpt_t *init = px_gpt_new(&odd, 1337);
    if (!init) return 1;
    check_stages("odd fp32", &odd, init->params, 3, 33);
    px_gpt_destroy(&init);
    run_bf16("tiny", &tiny, 4, tiny.max_seq_len);
    run_bf16("odd", &odd, 3, 33);
    px_gpt_config_t hs64 = {.max_seq_len = 200, .vocab_size = 256, .padded_vocab_size = 256,
                            .num_layers = 2, .num_heads = 2, .channels = 128};
    run_bf16("hs64", &hs64, 2, 200);
    px_cuda_ops_set_fused_attention(0); /* --attention unfused */
    run_bf16("hs64 unfused", &hs64, 2, 200);
    px_cuda_ops_set_fused_attention(1);
    return gt_finish("test_gpu_model");
}
