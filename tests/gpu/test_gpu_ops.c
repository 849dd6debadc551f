/* Every CUDA op (kernels/ops_cuda.h) against its CPU twin (kernels/ops.h) on
 * seeded random inputs, over several shapes chosen to hit the edges: T and C
 * not multiples of 32, a head size that is not a power of two, V < Vp, many
 * repeated tokens, a misaligned bias pointer.
 *
 * What is checked, per op:
 * - forward outputs within tolerance of the CPU; bitwise equal where the
 *   arithmetic and order are the same on both (embedding, residual, scale);
 * - backward ACCUMULATES: every gradient buffer starts from random values on
 *   both sides, and NULL gradients are skipped;
 * - attention's backward never reads att above the diagonal: the CPU's att is
 *   poisoned with NaN there before it is handed to the GPU backward;
 * - crossentropy's backward works in place (dlogits == logits);
 * - both matmul forward paths (cuBLASLt bias epilogue and sgemm + bias kernel);
 * - run-to-run reproducibility: the ops that reduce (matmul and layernorm
 *   backward, embedding backward, attention, norm) give bitwise identical
 *   results when run twice.
 * Tolerances are relative to the largest magnitude in each tensor; they were
 * set without a GPU run (none was available when this was written) and allow
 * for FP32 sums taken in another order, while a wrong formula or index misses
 * by O(1). Exits 0 when all pass, 1 naming each op that missed, 77 (skipped)
 * without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "ops.h"
#include "ops_cuda.h"

typedef struct {
    int B, T, C, NH, V, Vp;
} shape_t;

static const shape_t g_shapes[] = {
    {2, 17, 48, 4, 100, 128},  /* odd T, head size 12 */
    {3, 64, 64, 4, 256, 256},  /* the tiny preset's widths */
    {2, 129, 96, 3, 999, 1024} /* T over 128, head size 32, V < Vp */
};

#define TAG(buf, s, name)                                                                      \
    snprintf(buf, sizeof buf, "%s B=%d T=%d C=%d", name, (s)->B, (s)->T, (s)->C)

static void test_encoder(const shape_t *s) {
    char tag[128];
    int B = s->B, T = s->T, C = s->C, Vp = s->Vp;
    size_t BT = (size_t)B * T, btc = BT * C;
    int *inp = gt_tokens(BT, 7); /* few distinct tokens: many repeats for the backward */
    for (size_t i = 0; i < BT; i += 2) inp[i] = (int)(gt_u32() % (uint32_t)Vp);
    float *wte = gt_random((size_t)Vp * C, 1.0f), *wpe = gt_random((size_t)T * C, 1.0f);
    float *out = gt_random(btc, 1.0f);
    encoder_forward(out, inp, wte, wpe, B, T, C);
    int *d_inp = gt_upi(inp, BT);
    float *d_wte = gt_upf(wte, (size_t)Vp * C), *d_wpe = gt_upf(wpe, (size_t)T * C);
    float *d_out = gt_upf(out, btc);
    encoder_forward_cuda(d_out, d_inp, d_wte, d_wpe, B, T, C, 0);
    float *got = gt_down(d_out, btc);
    TAG(tag, s, "encoder_forward out");
    gt_same(tag, got, out, btc);
    free(got);

    float *dout = gt_random(btc, 1.0f);
    float *dwte = gt_random((size_t)Vp * C, 1.0f), *dwpe = gt_random((size_t)T * C, 1.0f);
    float *d_dout = gt_upf(dout, btc);
    float *d_dwte = gt_upf(dwte, (size_t)Vp * C), *d_dwpe = gt_upf(dwpe, (size_t)T * C);
    encoder_backward(dwte, dwpe, dout, inp, B, T, C);
    int *plan = (int *)malloc(encoder_backward_plan_ints(B, T) * sizeof(int));
    if (!plan) exit(1);
    int groups = encoder_backward_plan(plan, inp, B, T, Vp);
    int *d_plan = gt_upi(plan, encoder_backward_plan_ints(B, T));
    int kept = inp[BT - 1];
    inp[BT - 1] = Vp; /* outside the vocabulary: the plan refuses it */
    gt_checks++;
    if (groups < 1 || encoder_backward_plan(plan + 0, inp, B, T, Vp) != -1) {
        printf("FAIL encoder_backward_plan groups=%d, or a token >= V accepted\n", groups);
        gt_failures++;
    }
    inp[BT - 1] = kept;
    encoder_backward_cuda(d_dwte, d_dwpe, d_dout, d_inp, d_plan, groups, B, T, C, 0);
    float *g1 = gt_down(d_dwte, (size_t)Vp * C), *g2 = gt_down(d_dwpe, (size_t)T * C);
    /* Same order of additions as the CPU (see encoder.cu): bitwise equal. */
    TAG(tag, s, "encoder_backward dwte");
    gt_same(tag, g1, dwte, (size_t)Vp * C);
    TAG(tag, s, "encoder_backward dwpe");
    gt_same(tag, g2, dwpe, (size_t)T * C);
    free(g1);
    free(g2);
    cudaFree(d_inp);
    cudaFree(d_plan);
    free(plan);
    cudaFree(d_wte);
    cudaFree(d_wpe);
    cudaFree(d_out);
    cudaFree(d_dout);
    cudaFree(d_dwte);
    cudaFree(d_dwpe);
    free(inp);
    free(wte);
    free(wpe);
    free(out);
    free(dout);
    free(dwte);
    free(dwpe);
}

static void test_layernorm(const shape_t *s) {
    char tag[128];
    int B = s->B, T = s->T, C = s->C;
    size_t BT = (size_t)B * T, btc = BT * C;
    float *inp = gt_random(btc, 2.0f);
    for (size_t i = 0; i < btc; i++) inp[i] += 0.5f; /* a non-zero mean */
    float *w = gt_random(C, 1.0f), *b = gt_random(C, 1.0f);
    float *out = (float *)malloc(btc * sizeof(float));
    float *mean = (float *)malloc(BT * sizeof(float)), *rstd = (float *)malloc(BT * sizeof(float));
    layernorm_forward(out, mean, rstd, inp, w, b, B, T, C);
    float *d_inp = gt_upf(inp, btc), *d_w = gt_upf(w, C), *d_b = gt_upf(b, C);
    float *d_out = gt_upf(out, btc), *d_mean = gt_upf(mean, BT), *d_rstd = gt_upf(rstd, BT);
    layernorm_forward_cuda(d_out, d_mean, d_rstd, d_inp, d_w, d_b, B, T, C, 0);
    float *g_out = gt_down(d_out, btc), *g_mean = gt_down(d_mean, BT),
          *g_rstd = gt_down(d_rstd, BT);
    TAG(tag, s, "layernorm_forward out");
    gt_close(tag, g_out, out, btc, 1e-5, 0);
    TAG(tag, s, "layernorm_forward mean");
    gt_close(tag, g_mean, mean, BT, 1e-5, 1e-7);
    TAG(tag, s, "layernorm_forward rstd");
    gt_close(tag, g_rstd, rstd, BT, 1e-5, 0);

    /* residual + LayerNorm in one pass: bitwise the two kernels (the row is
     * inp = half + rest, the residual add's own output). */
    float *half = gt_random(btc, 1.0f), *rest = (float *)malloc(btc * sizeof(float));
    if (!rest) exit(1);
    for (size_t i = 0; i < btc; i++) rest[i] = inp[i] - half[i];
    float *d_half = gt_upf(half, btc), *d_rest = gt_upf(rest, btc), *d_res = gt_upf(rest, btc);
    float *d_sum = gt_upf(rest, btc), *d_out2 = gt_upf(out, btc);
    residual_forward_cuda(d_sum, d_half, d_rest, btc, 0);
    layernorm_forward_cuda(d_out, d_mean, d_rstd, d_sum, d_w, d_b, B, T, C, 0);
    float *d_mean2 = gt_upf(mean, BT), *d_rstd2 = gt_upf(rstd, BT);
    residual_layernorm_forward_cuda(d_res, d_out2, d_mean2, d_rstd2, d_half, d_rest, d_w, d_b, B, T, C, 0);
    float *want[4] = {gt_down(d_sum, btc), gt_down(d_out, btc), gt_down(d_mean, BT), gt_down(d_rstd, BT)};
    float *got[4] = {gt_down(d_res, btc), gt_down(d_out2, btc), gt_down(d_mean2, BT), gt_down(d_rstd2, BT)};
    const char *names[4] = {"residual_layernorm res", "residual_layernorm out", "residual_layernorm mean",
                            "residual_layernorm rstd"};
    for (int i = 0; i < 4; i++) {
        TAG(tag, s, names[i]);
        gt_same(tag, got[i], want[i], i < 2 ? btc : BT);
        free(got[i]);
        free(want[i]);
    }
    float *dtmp[] = {d_half, d_rest, d_res, d_sum, d_out2, d_mean2, d_rstd2};
    for (size_t i = 0; i < sizeof dtmp / sizeof dtmp[0]; i++) cudaFree(dtmp[i]);
    free(half);
    free(rest);

    /* The backward uses the CPU's saved statistics on both sides. */
    GT_CUDA(cudaMemcpy(d_mean, mean, BT * sizeof(float), cudaMemcpyHostToDevice));
    GT_CUDA(cudaMemcpy(d_rstd, rstd, BT * sizeof(float), cudaMemcpyHostToDevice));
    float *dout = gt_random(btc, 1.0f), *dinp = gt_random(btc, 1.0f);
    float *dw = gt_random(C, 1.0f), *db = gt_random(C, 1.0f);
    float *d_dout = gt_upf(dout, btc), *d_dinp = gt_upf(dinp, btc);
    float *d_dw = gt_upf(dw, C), *d_db = gt_upf(db, C);
    float *d_dw2 = gt_upf(dw, C), *d_db2 = gt_upf(db, C), *d_dinp2 = gt_upf(dinp, btc);
    layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, B, T, C);
    layernorm_backward_cuda(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, B, T, C, 0);
    layernorm_backward_cuda(d_dinp2, d_dw2, d_db2, d_dout, d_inp, d_w, d_mean, d_rstd, B, T, C, 0);
    float *g_dinp = gt_down(d_dinp, btc), *g_dw = gt_down(d_dw, C), *g_db = gt_down(d_db, C);
    float *r_dinp = gt_down(d_dinp2, btc), *r_dw = gt_down(d_dw2, C), *r_db = gt_down(d_db2, C);
    /* 1e-4: the row sums cancel (dnorm - mean - norm * mean), and the two
     * sides add in different orders; a real bug misses by O(1). */
    TAG(tag, s, "layernorm_backward dinp");
    gt_close(tag, g_dinp, dinp, btc, 1e-4, 0);
    TAG(tag, s, "layernorm_backward dweight");
    gt_close(tag, g_dw, dw, C, 1e-4, 0);
    TAG(tag, s, "layernorm_backward dbias");
    gt_close(tag, g_db, db, C, 1e-4, 0);
    TAG(tag, s, "layernorm_backward rerun dinp");
    gt_same(tag, r_dinp, g_dinp, btc);
    TAG(tag, s, "layernorm_backward rerun dweight");
    gt_same(tag, r_dw, g_dw, C);
    TAG(tag, s, "layernorm_backward rerun dbias");
    gt_same(tag, r_db, g_db, C);

    float *frees[] = {inp,   w,     b,     out,    mean,   rstd,   g_out, g_mean, g_rstd,
                      dout,  dinp,  dw,    db,     g_dinp, g_dw,   g_db,  r_dinp, r_dw, r_db};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) free(frees[i]);
    float *dfrees[] = {d_inp, d_w,  d_b,  d_out, d_mean, d_rstd, d_dout,
                       d_dinp, d_dw, d_db, d_dw2, d_db2, d_dinp2};
    for (size_t i = 0; i < sizeof dfrees / sizeof dfrees[0]; i++) cudaFree(dfrees[i]);
}

/* One forward check of matmul_forward_cuda against the CPU. bias_shift moves
 * the bias pointer off 16-byte alignment (cuBLASLt must cope or fall back). */
static void matmul_forward_case(const shape_t *s, int OC, int with_bias, int use_lt,
                                int bias_shift) {
    char tag[160];
    int B = s->B, T = s->T, C = s->C;
    size_t BT = (size_t)B * T;
    float *inp = gt_random(BT * C, 1.0f), *w = gt_random((size_t)OC * C, 0.5f);
    float *bias = gt_random((size_t)OC + 1, 1.0f);
    float *out = (float *)malloc(BT * OC * sizeof(float));
    const float *hb = with_bias ? bias + bias_shift : NULL;
    matmul_forward(out, inp, w, hb, B, T, C, OC);
    float *d_inp = gt_upf(inp, BT * C), *d_w = gt_upf(w, (size_t)OC * C);
    float *d_bias = gt_upf(bias, (size_t)OC + 1);
    float *d_out = gt_upf(out, BT * OC);
    GT_CUDA(cudaMemset(d_out, 0x7f, BT * OC * sizeof(float))); /* the op must overwrite */
    px_cuda_ops_set_lt(use_lt);
    matmul_forward_cuda(d_out, d_inp, d_w, with_bias ? d_bias + bias_shift : NULL, B, T, C, OC, 0);
    px_cuda_ops_set_lt(1);
    float *got = gt_down(d_out, BT * OC);
    snprintf(tag, sizeof tag, "matmul_forward OC=%d bias=%d lt=%d shift=%d B=%d T=%d C=%d", OC,
             with_bias, use_lt, bias_shift, B, T, C);
    gt_close(tag, got, out, BT * OC, 1e-5, 0);
    free(inp);
    free(w);
    free(bias);
    free(out);
    free(got);
    cudaFree(d_inp);
    cudaFree(d_w);
    cudaFree(d_bias);
    cudaFree(d_out);
}

/* set: matmul_backward_set_cuda, whose dinp is overwritten (it starts as
 * garbage on the GPU, zeros on the CPU), for the output gradient 0.5 dout
 * (the CPU gets dout halved: exact, as the power of two is). */
static void matmul_backward_case(const shape_t *s, int OC, int with_dinp, int with_dbias, int set) {
    char tag[160];
    int B = s->B, T = s->T, C = s->C;
    size_t BT = (size_t)B * T;
    float *inp = gt_random(BT * C, 1.0f), *w = gt_random((size_t)OC * C, 0.5f);
    float *dout = gt_random(BT * OC, 1.0f);
    float *dinp = gt_random(BT * C, 1.0f), *dw = gt_random((size_t)OC * C, 1.0f);
    float *db = gt_random(OC, 1.0f);
    float *d_inp = gt_upf(inp, BT * C), *d_w = gt_upf(w, (size_t)OC * C);
    float *d_dout = gt_upf(dout, BT * OC);
    float *d_dinp = gt_upf(dinp, BT * C), *d_dw = gt_upf(dw, (size_t)OC * C), *d_db = gt_upf(db, OC);
    float *d_dinp2 = gt_upf(dinp, BT * C), *d_dw2 = gt_upf(dw, (size_t)OC * C);
    float *d_db2 = gt_upf(db, OC);
    if (set && with_dinp) memset(dinp, 0, BT * C * sizeof(float));
    float *half = gt_copy(dout, BT * OC);
    for (size_t i = 0; set && i < BT * OC; i++) half[i] *= 0.5f;
    matmul_backward(with_dinp ? dinp : NULL, dw, with_dbias ? db : NULL, half, inp, w, B, T, C, OC);
    free(half);
    for (int run = 0; run < 2; run++) {
        float *di = with_dinp ? (run ? d_dinp2 : d_dinp) : NULL, *dw_ = run ? d_dw2 : d_dw;
        float *db_ = with_dbias ? (run ? d_db2 : d_db) : NULL;
        if (set)
            matmul_backward_set_cuda(di, dw_, db_, d_dout, 0.5f, d_inp, d_w, B, T, C, OC, 0);
        else
            matmul_backward_cuda(di, dw_, db_, d_dout, d_inp, d_w, B, T, C, OC, 0);
    }
    float *g_dinp = gt_down(d_dinp, BT * C), *g_dw = gt_down(d_dw, (size_t)OC * C);
    float *g_db = gt_down(d_db, OC);
    float *r_dw = gt_down(d_dw2, (size_t)OC * C), *r_db = gt_down(d_db2, OC);
    /* Untouched buffers (NULL on the call) must still equal their start. */
    snprintf(tag, sizeof tag, "matmul_backward%s dinp OC=%d (passed=%d) C=%d", set ? "_set" : "", OC, with_dinp,
             C);
    gt_close(tag, g_dinp, dinp, BT * C, 1e-5, 0);
    snprintf(tag, sizeof tag, "matmul_backward dweight OC=%d C=%d", OC, C);
    gt_close(tag, g_dw, dw, (size_t)OC * C, 1e-5, 0);
    snprintf(tag, sizeof tag, "matmul_backward dbias OC=%d (passed=%d) C=%d", OC, with_dbias, C);
    gt_close(tag, g_db, db, OC, 1e-5, 0);
    snprintf(tag, sizeof tag, "matmul_backward rerun dweight OC=%d C=%d", OC, C);
    gt_same(tag, r_dw, g_dw, (size_t)OC * C);
    snprintf(tag, sizeof tag, "matmul_backward rerun dbias OC=%d C=%d", OC, C);
    gt_same(tag, r_db, g_db, OC);
    float *frees[] = {inp, w, dout, dinp, dw, db, g_dinp, g_dw, g_db, r_dw, r_db};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) free(frees[i]);
    float *dfrees[] = {d_inp, d_w, d_dout, d_dinp, d_dw, d_db, d_dinp2, d_dw2, d_db2};
    for (size_t i = 0; i < sizeof dfrees / sizeof dfrees[0]; i++) cudaFree(dfrees[i]);
}

/* The GELU epilogues (matmul_forward_gelu_cuda, matmul_backward_dgelu_cuda)
 * against the CPU's matmul then GELU, and GELU' times the matmul backward;
 * cuBLASLt's GELU need not round as px_gelu does: 1e-5 of the largest. */
static void matmul_gelu_case(const shape_t *s, int lt) {
    char tag[160];
    px_cuda_ops_set_lt(lt); /* 0: the fallback, separate kernels */
    int B = s->B, T = s->T, C = s->C, H = 4 * s->C;
    size_t BT = (size_t)B * T;
    float *inp = gt_random(BT * C, 1.0f), *w = gt_random((size_t)H * C, 0.5f), *bias = gt_random(H, 0.5f);
    float *pre = (float *)malloc(BT * H * sizeof(float)), *out = (float *)malloc(BT * H * sizeof(float));
    if (!pre || !out) exit(1);
    matmul_forward(pre, inp, w, bias, B, T, C, H);
    gelu_forward(out, pre, BT * H);
    float *d_inp = gt_upf(inp, BT * C), *d_w = gt_upf(w, (size_t)H * C), *d_bias = gt_upf(bias, H);
    float *d_pre = gt_upf(out, BT * H), *d_out = gt_upf(pre, BT * H); /* each starts as the other: garbage */
    matmul_forward_gelu_cuda(d_out, d_pre, d_inp, d_w, d_bias, B, T, C, H, 0);
    float *g_out = gt_down(d_out, BT * H), *g_pre = gt_down(d_pre, BT * H);
    TAG(tag, s, lt ? "matmul_forward_gelu pre" : "matmul_forward_gelu pre (lt off)");
    gt_close(tag, g_pre, pre, BT * H, 1e-5, 0);
    TAG(tag, s, lt ? "matmul_forward_gelu out" : "matmul_forward_gelu out (lt off)");
    gt_close(tag, g_out, out, BT * H, 1e-5, 0);

    /* backward through the second projection (H -> C) and the GELU */
    float *w2 = gt_random((size_t)C * H, 0.5f), *dout = gt_random(BT * C, 1.0f);
    float *dact = (float *)calloc(BT * H, sizeof(float)), *dpre = (float *)calloc(BT * H, sizeof(float));
    float *dw2 = (float *)calloc((size_t)C * H, sizeof(float));
    if (!dact || !dpre || !dw2) exit(1);
    matmul_backward(dact, dw2, NULL, dout, out, w2, B, T, H, C);
    gelu_backward(dpre, pre, dact, BT * H);
    float *d_w2 = gt_upf(w2, (size_t)C * H), *d_dout = gt_upf(dout, BT * C), *d_dpre = gt_upf(out, BT * H);
    GT_CUDA(cudaMemcpy(d_pre, pre, BT * H * sizeof(float), cudaMemcpyHostToDevice));
    matmul_backward_dgelu_cuda(d_dpre, d_dout, d_pre, d_w2, B, T, H, C, 0);
    float *g_dpre = gt_down(d_dpre, BT * H);
    TAG(tag, s, lt ? "matmul_backward_dgelu dpre" : "matmul_backward_dgelu dpre (lt off)");
    gt_close(tag, g_dpre, dpre, BT * H, 1e-5, 0);
    float *frees[] = {inp, w, bias, pre, out, g_out, g_pre, w2, dout, dact, dpre, dw2, g_dpre};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) free(frees[i]);
    float *dfrees[] = {d_inp, d_w, d_bias, d_pre, d_out, d_w2, d_dout, d_dpre};
    for (size_t i = 0; i < sizeof dfrees / sizeof dfrees[0]; i++) cudaFree(dfrees[i]);
    px_cuda_ops_set_lt(1);
}

static void test_matmul(const shape_t *s) {
    matmul_forward_case(s, 3 * s->C, 1, 1, 0);
    matmul_forward_case(s, 3 * s->C, 1, 0, 0);
    matmul_forward_case(s, 3 * s->C, 1, 1, 1); /* bias 4 bytes off alignment */
    matmul_forward_case(s, s->Vp, 0, 1, 0);
    matmul_forward_case(s, 4 * s->C + 1, 1, 1, 0); /* odd OC */
    matmul_backward_case(s, 4 * s->C, 1, 1, 0);
    matmul_backward_case(s, s->Vp, 1, 0, 0);
    matmul_backward_case(s, s->C, 0, 1, 0);
    matmul_backward_case(s, 4 * s->C, 1, 0, 1);
    matmul_gelu_case(s, 1);
    matmul_gelu_case(s, 0);
}

/* Lower triangle of att (rows of T, keys <= t) compared; the rest ignored. */
static void compare_att_lower(const char *tag, const float *got, const float *want, int rows,
                              int T) {
    float *a = (float *)calloc((size_t)rows * T, sizeof(float));
    float *b = (float *)calloc((size_t)rows * T, sizeof(float));
    for (int r = 0; r < rows; r++)
        for (int j = 0; j <= r % T; j++) {
            a[(size_t)r * T + j] = got[(size_t)r * T + j];
            b[(size_t)r * T + j] = want[(size_t)r * T + j];
        }
    gt_close(tag, a, b, (size_t)rows * T, 1e-5, 0);
    free(a);
    free(b);
}

static void test_attention(const shape_t *s) {
    char tag[128];
    int B = s->B, T = s->T, C = s->C, NH = s->NH;
    size_t BT = (size_t)B * T, btc = BT * C, natt = (size_t)B * NH * T * T;
    int rows = B * NH * T;
    float *qkv = gt_random(BT * 3 * C, 1.5f);
    float *out = (float *)malloc(btc * sizeof(float));
    float *att = (float *)malloc(natt * sizeof(float));
    for (size_t i = 0; i < natt; i++) att[i] = NAN; /* never read above the diagonal */
    attention_forward(out, att, qkv, B, T, C, NH);
    float *d_qkv = gt_upf(qkv, BT * 3 * C), *d_out = gt_upf(out, btc);
    float *d_att = gt_upf(att, natt);
    attention_forward_cuda(d_out, d_att, d_qkv, B, T, C, NH, 0);
    float *g_out = gt_down(d_out, btc), *g_att = gt_down(d_att, natt);
    TAG(tag, s, "attention_forward out");
    gt_close(tag, g_out, out, btc, 1e-5, 0);
    TAG(tag, s, "attention_forward att (keys <= t)");
    compare_att_lower(tag, g_att, att, rows, T);
    int upper_ok = 1;
    for (int r = 0; r < rows && upper_ok; r++)
        for (int j = r % T + 1; j < T; j++)
            if (g_att[(size_t)r * T + j] != 0.0f) upper_ok = 0;
    TAG(tag, s, "attention_forward att above diagonal is 0");
    gt_checks++;
    if (upper_ok) {
        printf("ok   %s\n", tag);
    } else {
        printf("FAIL %s\n", tag);
        gt_failures++;
    }

    float *dout = gt_random(btc, 1.0f), *dqkv = gt_random(BT * 3 * C, 1.0f);
    float *d_dout = gt_upf(dout, btc);
    float *d_dqkv = gt_upf(dqkv, BT * 3 * C), *d_dqkv2 = gt_upf(dqkv, BT * 3 * C);
    float *d_att_cpu = gt_upf(att, natt); /* the CPU's att, NaN above the diagonal */
    attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
    attention_backward_cuda(d_dqkv, d_dout, d_qkv, d_att_cpu, B, T, C, NH, 0);
    attention_backward_cuda(d_dqkv2, d_dout, d_qkv, d_att, B, T, C, NH, 0); /* its own att */
    float *g_dqkv = gt_down(d_dqkv, BT * 3 * C), *g_dqkv2 = gt_down(d_dqkv2, BT * 3 * C);
    /* 1e-4: the softmax backward cancels (datt - sum att*datt). */
    TAG(tag, s, "attention_backward dqkv (CPU att)");
    gt_close(tag, g_dqkv, dqkv, BT * 3 * C, 1e-4, 0);
    TAG(tag, s, "attention_backward dqkv (GPU att)");
    gt_close(tag, g_dqkv2, dqkv, BT * 3 * C, 1e-4, 0);

    /* Reproducibility: forward and backward again from the same inputs. */
    float *d_out3 = gt_upf(out, btc), *d_att3 = gt_upf(att, natt);
    attention_forward_cuda(d_out3, d_att3, d_qkv, B, T, C, NH, 0);
    float *r_out = gt_down(d_out3, btc);
    TAG(tag, s, "attention_forward rerun out");
    gt_same(tag, r_out, g_out, btc);
    float *d_dqkv4 = gt_upf(dqkv, BT * 3 * C), *d_dqkv5 = gt_upf(dqkv, BT * 3 * C);
    attention_backward_cuda(d_dqkv4, d_dout, d_qkv, d_att3, B, T, C, NH, 0);
    attention_backward_cuda(d_dqkv5, d_dout, d_qkv, d_att3, B, T, C, NH, 0);
    float *r4 = gt_down(d_dqkv4, BT * 3 * C), *r5 = gt_down(d_dqkv5, BT * 3 * C);
    TAG(tag, s, "attention_backward rerun dqkv");
    gt_same(tag, r5, r4, BT * 3 * C);

    float *frees[] = {qkv, out, att, g_out, g_att, dout, dqkv, g_dqkv, g_dqkv2, r_out, r4, r5};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) free(frees[i]);
    float *dfrees[] = {d_qkv, d_out, d_att, d_dout, d_dqkv, d_dqkv2, d_att_cpu,
                       d_out3, d_att3, d_dqkv4, d_dqkv5};
    for (size_t i = 0; i < sizeof dfrees / sizeof dfrees[0]; i++) cudaFree(dfrees[i]);
}

static void test_elementwise(size_t N) {
    char tag[128];
    float *x = gt_random(N, 6.0f), *y = gt_random(N, 1.0f), *dout = gt_random(N, 1.0f);
    float *d1 = gt_random(N, 1.0f), *d2 = gt_random(N, 1.0f);
    float *out = (float *)malloc(N * sizeof(float));
    float *d_x = gt_upf(x, N), *d_y = gt_upf(y, N), *d_dout = gt_upf(dout, N);
    float *d_out = gt_upf(out, N), *d_d1 = gt_upf(d1, N), *d_d2 = gt_upf(d2, N);

    gelu_forward(out, x, N);
    gelu_forward_cuda(d_out, d_x, N, 0);
    float *g = gt_down(d_out, N);
    snprintf(tag, sizeof tag, "gelu_forward N=%zu", N);
    gt_close(tag, g, out, N, 1e-6, 1e-7);
    free(g);

    gelu_backward(d1, x, dout, N);
    gelu_backward_cuda(d_d1, d_x, d_dout, N, 0);
    g = gt_down(d_d1, N);
    snprintf(tag, sizeof tag, "gelu_backward N=%zu", N);
    gt_close(tag, g, d1, N, 1e-6, 1e-7);
    free(g);

    /* in place: d_dout becomes GELU'(x) * dout, the CPU's from zeros */
    float *from0 = (float *)calloc(N, sizeof(float));
    if (!from0) exit(1);
    gelu_backward(from0, x, dout, N);
    gelu_backward_inplace_cuda(d_dout, d_x, N, 0);
    g = gt_down(d_dout, N);
    snprintf(tag, sizeof tag, "gelu_backward_inplace N=%zu", N);
    gt_close(tag, g, from0, N, 1e-6, 1e-7);
    GT_CUDA(cudaMemcpy(d_dout, dout, N * sizeof(float), cudaMemcpyHostToDevice)); /* as it was, for what follows */
    free(g);
    free(from0);

    residual_forward(out, x, y, N);
    residual_forward_cuda(d_out, d_x, d_y, N, 0);
    g = gt_down(d_out, N);
    snprintf(tag, sizeof tag, "residual_forward N=%zu", N);
    gt_same(tag, g, out, N);
    free(g);

    GT_CUDA(cudaMemcpy(d_d1, d1, N * sizeof(float), cudaMemcpyHostToDevice));
    residual_backward(d1, d2, dout, N);
    residual_backward_cuda(d_d1, d_d2, d_dout, N, 0);
    float *g1 = gt_down(d_d1, N), *g2 = gt_down(d_d2, N);
    snprintf(tag, sizeof tag, "residual_backward dinp1 N=%zu", N);
    gt_same(tag, g1, d1, N);
    snprintf(tag, sizeof tag, "residual_backward dinp2 N=%zu", N);
    gt_same(tag, g2, d2, N);
    free(g1);
    free(g2);

    scale_inplace(x, N, 0.3f);
    scale_inplace_cuda(d_x, N, 0.3f, 0);
    g = gt_down(d_x, N);
    snprintf(tag, sizeof tag, "scale_inplace N=%zu", N);
    gt_same(tag, g, x, N);
    free(g);

    double want = norm_squared(y, N);
    double got = norm_squared_cuda(d_y, N, 0);
    double again = norm_squared_cuda(d_y, N, 0);
    gt_checks++;
    if (fabs(got - want) <= 1e-10 * want && got == again) {
        printf("ok   %-44s got %.17g want %.17g\n", "norm_squared (and rerun bitwise)", got, want);
    } else {
        printf("FAIL %-44s got %.17g (rerun %.17g) want %.17g N=%zu\n", "norm_squared", got, again,
               want, N);
        gt_failures++;
    }
    free(x);
    free(y);
    free(dout);
    free(d1);
    free(d2);
    free(out);
    float *dfrees[] = {d_x, d_y, d_dout, d_out, d_d1, d_d2};
    for (size_t i = 0; i < sizeof dfrees / sizeof dfrees[0]; i++) cudaFree(dfrees[i]);
}

static void test_crossentropy(const shape_t *s) {
    char tag[128];
    int B = s->B, T = s->T, V = s->V, Vp = s->Vp;
    size_t BT = (size_t)B * T, n = BT * Vp;
    float *logits = gt_random(n, 4.0f);
    int *targets = gt_tokens(BT, V);
    float *losses = (float *)malloc(BT * sizeof(float)), *lse = (float *)malloc(BT * sizeof(float));
    crossentropy_softmax_forward(losses, lse, logits, targets, B, T, V, Vp);
    float *d_logits = gt_upf(logits, n);
    int *d_targets = gt_upi(targets, BT);
    float *d_losses = gt_upf(losses, BT), *d_lse = gt_upf(lse, BT);
    crossentropy_softmax_forward_cuda(d_losses, d_lse, d_logits, d_targets, B, T, V, Vp, 0);
    float *g_losses = gt_down(d_losses, BT), *g_lse = gt_down(d_lse, BT);
    TAG(tag, s, "crossentropy_forward losses");
    gt_close(tag, g_losses, losses, BT, 1e-5, 0);
    TAG(tag, s, "crossentropy_forward lse");
    gt_close(tag, g_lse, lse, BT, 1e-5, 0);

    /* Backward from the CPU's lse; out of place into garbage, then in place. */
    GT_CUDA(cudaMemcpy(d_lse, lse, BT * sizeof(float), cudaMemcpyHostToDevice));
    float dloss = 1.0f / (float)BT;
    float *dlogits = gt_random(n, 9.0f);
    float *d_dlogits = gt_upf(dlogits, n);
    crossentropy_softmax_backward(dlogits, logits, lse, targets, dloss, B, T, V, Vp);
    crossentropy_softmax_backward_cuda(d_dlogits, d_logits, d_lse, d_targets, dloss, B, T, V, Vp,
                                       0);
    crossentropy_softmax_backward_cuda(d_logits, d_logits, d_lse, d_targets, dloss, B, T, V, Vp,
                                       0);
    float *g1 = gt_down(d_dlogits, n), *g2 = gt_down(d_logits, n);
    TAG(tag, s, "crossentropy_backward dlogits");
    gt_close(tag, g1, dlogits, n, 1e-5, 1e-9);
    TAG(tag, s, "crossentropy_backward in place");
    gt_same(tag, g2, g1, n);

    /* Fused: the forward's losses and lse, and the backward's gradient over
     * the logits (the padding columns too, which start as garbage). */
    float *fused_in = gt_copy(logits, n);
    for (size_t r = 0; r < BT; r++)
        for (int c = V; c < Vp; c++) fused_in[r * Vp + c] = 1e30f;
    GT_CUDA(cudaMemcpy(d_logits, fused_in, n * sizeof(float), cudaMemcpyHostToDevice));
    GT_CUDA(cudaMemset(d_losses, 0xFF, BT * sizeof(float)));
    GT_CUDA(cudaMemset(d_lse, 0xFF, BT * sizeof(float)));
    crossentropy_fused_cuda(d_losses, d_lse, d_logits, d_targets, dloss, B, T, V, Vp, 0);
    float *f_losses = gt_down(d_losses, BT), *f_lse = gt_down(d_lse, BT), *f_grad = gt_down(d_logits, n);
    TAG(tag, s, "crossentropy_fused losses");
    gt_close(tag, f_losses, losses, BT, 1e-5, 0);
    TAG(tag, s, "crossentropy_fused lse");
    gt_close(tag, f_lse, lse, BT, 1e-5, 0);
    TAG(tag, s, "crossentropy_fused dlogits");
    gt_close(tag, f_grad, dlogits, n, 1e-5, 1e-9);
    free(fused_in);
    free(f_losses);
    free(f_lse);
    free(f_grad);
    free(logits);
    free(targets);
    free(losses);
    free(lse);
    free(g_losses);
    free(g_lse);
    free(dlogits);
    free(g1);
    free(g2);
    cudaFree(d_logits);
    cudaFree(d_targets);
    cudaFree(d_losses);
    cudaFree(d_lse);
    cudaFree(d_dlogits);
}

static void test_adamw(size_t n) {
    char tag[128];
    float *p = gt_random(n, 1.0f), *m = (float *)calloc(n, sizeof(float));
    float *v = (float *)calloc(n, sizeof(float));
    float *d_p = gt_upf(p, n), *d_m = gt_upf(m, n), *d_v = gt_upf(v, n);
    for (int t = 1; t <= 3; t++) {
        float *g = gt_random(n, t == 2 ? 1e-6f : 0.1f); /* include tiny gradients */
        float *d_g = gt_upf(g, n);
        float wd = t == 3 ? 0.0f : 0.1f;
        adamw_update(p, m, v, g, n, 1e-3f, 0.9f, 0.95f, 1e-8f, wd, t);
        adamw_update_cuda(d_p, d_m, d_v, d_g, n, 1e-3f, 0.9f, 0.95f, 1e-8f, wd, t, 0);
        free(g);
        cudaFree(d_g);
    }
    float *gp = gt_down(d_p, n), *gm = gt_down(d_m, n), *gv = gt_down(d_v, n);
    snprintf(tag, sizeof tag, "adamw_update params (3 steps) n=%zu", n);
    gt_close(tag, gp, p, n, 1e-6, 0);
    snprintf(tag, sizeof tag, "adamw_update m n=%zu", n);
    gt_close(tag, gm, m, n, 1e-6, 0);
    snprintf(tag, sizeof tag, "adamw_update v n=%zu", n);
    gt_close(tag, gv, v, n, 1e-6, 0);
    free(p);
    free(m);
    free(v);
    free(gp);
    free(gm);
    free(gv);
    cudaFree(d_p);
    cudaFree(d_m);
    cudaFree(d_v);
}

/* adamw_update_tensors_cuda against one adamw_update_cuda per tensor, from
 * the same state: bitwise, decay per tensor (sizes of 1, odd, and 0). */
static void test_adamw_tensors(void) {
    const size_t sizes[5] = {1000, 1, 3333, 0, 65537};
    const int decay[5] = {1, 0, 1, 0, 0};
    size_t n = 0;
    for (int i = 0; i < 5; i++) n += sizes[i];
    float *p = gt_random(n, 1.0f), *g = gt_random(n, 0.1f), *zeros = (float *)calloc(n, sizeof(float));
    float *one[4] = {gt_upf(p, n), gt_upf(zeros, n), gt_upf(zeros, n), gt_upf(g, n)};
    float *all[4] = {gt_upf(p, n), gt_upf(zeros, n), gt_upf(zeros, n), gt_upf(g, n)};
    for (int t = 1; t <= 2; t++) {
        size_t off = 0;
        for (int i = 0; i < 5; i++) {
            adamw_update_cuda(one[0] + off, one[1] + off, one[2] + off, one[3] + off, sizes[i], 1e-3f, 0.9f, 0.95f,
                              1e-8f, decay[i] ? 0.1f : 0.0f, t, 0);
            off += sizes[i];
        }
        adamw_update_tensors_cuda(all[0], all[1], all[2], all[3], sizes, decay, 5, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t,
                                  0);
    }
    const char *names[3] = {"adamw_update_tensors params", "adamw_update_tensors m", "adamw_update_tensors v"};
    for (int b = 0; b < 3; b++) {
        float *want = gt_down(one[b], n), *got = gt_down(all[b], n);
        gt_same(names[b], got, want, n);
        free(want);
        free(got);
    }
    for (int b = 0; b < 4; b++) {
        cudaFree(one[b]);
        cudaFree(all[b]);
    }
    free(p);
    free(g);
    free(zeros);
}

int main(void) {
    gt_require_gpu("test_gpu_ops");
    gt_seed(20240326);
    px_cuda_ops_init();
    for (size_t i = 0; i < sizeof g_shapes / sizeof g_shapes[0]; i++) {
        const shape_t *s = &g_shapes[i];
        test_encoder(s);
        test_layernorm(s);
        test_matmul(s);
        test_attention(s);
        test_crossentropy(s);
    }
    test_elementwise(100003);
    test_elementwise(1);
    test_adamw(100003);
    test_adamw_tensors();
    px_cuda_ops_shutdown();
    return gt_finish("test_gpu_ops");
}
