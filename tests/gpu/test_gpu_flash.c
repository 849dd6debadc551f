/* The fused causal attention (flash_attention_*_cuda) against the CPU's
 * attention (kernels/ops.h), which materializes the (B,NH,T,T)
 * probabilities, for T in {1, 63, 64, 256, 1024, 2048} and head sizes 64
 * and 128 (and 16, 32: the small presets' heads), and two shapes whose keys
 * grow along the sequence, so that rows' maxima keep rising tile after
 * tile (the forward's output rescaling).
 *
 * The inputs (qkv and the output gradient) are drawn, then rounded to bf16
 * on the host, so both sides start from the same numbers and what differs
 * is the kernel's own rounding: the probabilities and dS are rounded to
 * bf16 for the tensor-core products (8 significant bits, a relative error
 * up to 2^-9 per element, averaging out over a row). Tolerances, fixed
 * before any GPU run, relative to the largest magnitude of each tensor:
 *   out 1e-2, lse 1e-3 (computed in FP32 from FP32 scores), dqkv 2e-2.
 * A wrong index or a missed mask misses by O(1).
 *
 * Also checked: the gradient accumulates (dqkv starts random on both
 * sides); forward and backward rerun give bitwise equal results
 * (determinism: no atomics). Exits 0 when all pass, 1 naming what missed,
 * 77 without a GPU, or a GPU the kernel does not support (below sm_80).
 *
 *   test_gpu_flash [MAX_T]   only the shapes with T <= MAX_T (the CPU
 *                            emulator of tests/emu runs the small ones) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "ops.h"
#include "ops_cuda.h"

typedef struct {
    int B, T, NH, hs;
    int grow; /* keys scaled up along the sequence: each row's maximum keeps growing, tile after tile */
} shape_t;

static const shape_t g_shapes[] = {
    {2, 1, 2, 64, 0},   {2, 63, 2, 64, 0},   {1, 64, 3, 64, 0},   {2, 256, 2, 64, 0},  {1, 1024, 2, 64, 0},
    {1, 2048, 2, 64, 0}, {2, 1, 2, 128, 0},  {2, 63, 2, 128, 0},  {1, 64, 3, 128, 0},  {2, 256, 2, 128, 0},
    {1, 1024, 2, 128, 0}, {1, 2048, 2, 128, 0}, {2, 100, 4, 16, 0}, {2, 130, 2, 32, 0}, {2, 256, 2, 64, 1},
    {1, 200, 2, 32, 1},
};

/* Rounds to the nearest bf16 (ties to even), kept in a float. */
static float to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    u &= 0xFFFF0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

static float *random_bf16(size_t n, float scale) {
    float *x = gt_random(n, scale);
    for (size_t i = 0; i < n; i++) x[i] = to_bf16(x[i]);
    return x;
}

/* Each row's log-sum-exp of the scaled causal scores, in double. */
static float *reference_lse(const float *qkv, int B, int T, int NH, int hs) {
    int C = NH * hs;
    float *lse = (float *)malloc((size_t)B * NH * T * sizeof(float));
    if (!lse) exit(1);
    double scale = 1.0 / sqrt((double)hs);
    double *s = (double *)malloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + (size_t)h * hs;
                double mx = -INFINITY;
                for (int k = 0; k <= t; k++) {
                    const float *kk = qkv + ((size_t)b * T + k) * 3 * C + C + (size_t)h * hs;
                    double dot = 0.0;
                    for (int d = 0; d < hs; d++) dot += (double)q[d] * kk[d];
                    s[k] = dot * scale;
                    if (s[k] > mx) mx = s[k];
                }
                double sum = 0.0;
                for (int k = 0; k <= t; k++) sum += exp(s[k] - mx);
                lse[((size_t)b * NH + h) * T + t] = (float)(mx + log(sum));
            }
    free(s);
    return lse;
}

static void test_shape(const shape_t *s) {
    char tag[128];
    int B = s->B, T = s->T, NH = s->NH, hs = s->hs, C = NH * hs;
    size_t BT = (size_t)B * T, btc = BT * C, n3 = 3 * btc, nrow = (size_t)B * NH * T;
    size_t natt = nrow * (size_t)T;
#define TAG(name) snprintf(tag, sizeof tag, "%s B=%d T=%d NH=%d hs=%d%s", name, B, T, NH, hs, s->grow ? " grow" : "")

    float *qkv = random_bf16(n3, 1.5f), *dout = random_bf16(btc, 1.0f), *dqkv = gt_random(n3, 1.0f);
    if (s->grow) /* key t times 1 + t/16: the fused forward must rescale its output along the way */
        for (size_t bt = 0; bt < BT; bt++)
            for (int c = 0; c < C; c++) {
                float *k = &qkv[bt * 3 * C + C + c];
                *k = to_bf16(*k * (1.0f + (float)(bt % T) / 16.0f));
            }
    float *out = (float *)malloc(btc * sizeof(float)), *att = (float *)malloc(natt * sizeof(float));
    if (!out || !att) exit(1);
    attention_forward(out, att, qkv, B, T, C, NH);
    float *lse = reference_lse(qkv, B, T, NH, hs);

    float *d_qkv = gt_upf(qkv, n3), *d_out = gt_upf(out, btc), *d_lse = gt_upf(lse, nrow);
    GT_CUDA(cudaMemset(d_out, 0xFF, btc * sizeof(float))); /* NaN: every element must be written */
    flash_attention_forward_cuda(d_out, d_lse, d_qkv, B, T, C, NH, 0);
    float *g_out = gt_down(d_out, btc), *g_lse = gt_down(d_lse, nrow);
    TAG("flash forward out");
    gt_close(tag, g_out, out, btc, 1e-2, 0);
    TAG("flash forward lse");
    gt_close(tag, g_lse, lse, nrow, 1e-3, 0);

    float *d_dout = gt_upf(dout, btc), *d_dqkv = gt_upf(dqkv, n3);
    attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
    /* The backward from the CPU's forward output, so that its error is the
     * backward's own. */
    float *d_ref_out = gt_upf(out, btc);
    flash_attention_backward_cuda(d_dqkv, d_dout, d_qkv, d_ref_out, d_lse, B, T, C, NH, 0);
    float *g_dqkv = gt_down(d_dqkv, n3);
    TAG("flash backward dqkv (+=)");
    gt_close(tag, g_dqkv, dqkv, n3, 2e-2, 0);
    /* overwritten: from NaN garbage, the CPU's gradient from zeros */
    float *dqkv0 = (float *)calloc(n3, sizeof(float));
    if (!dqkv0) exit(1);
    attention_backward(dqkv0, dout, qkv, att, B, T, C, NH);
    float *d_set = gt_upf(dqkv0, n3);
    GT_CUDA(cudaMemset(d_set, 0xFF, n3 * sizeof(float)));
    flash_attention_backward_set_cuda(d_set, d_dout, d_qkv, d_ref_out, d_lse, B, T, C, NH, 0);
    float *g_set = gt_down(d_set, n3);
    TAG("flash backward dqkv (=)");
    gt_close(tag, g_set, dqkv0, n3, 2e-2, 0);
    free(dqkv0);
    free(g_set);
    cudaFree(d_set);

    /* Reruns: bitwise the same. */
    float *d_out2 = gt_upf(out, btc), *d_lse2 = gt_upf(lse, nrow);
    flash_attention_forward_cuda(d_out2, d_lse2, d_qkv, B, T, C, NH, 0);
    float *r_out = gt_down(d_out2, btc), *r_lse = gt_down(d_lse2, nrow);
    TAG("flash forward rerun out");
    gt_same(tag, r_out, g_out, btc);
    TAG("flash forward rerun lse");
    gt_same(tag, r_lse, g_lse, nrow);
    float *d_a = gt_upf(dqkv, n3), *d_b = gt_upf(dqkv, n3);
    flash_attention_backward_cuda(d_a, d_dout, d_qkv, d_out2, d_lse2, B, T, C, NH, 0);
    flash_attention_backward_cuda(d_b, d_dout, d_qkv, d_out2, d_lse2, B, T, C, NH, 0);
    float *ra = gt_down(d_a, n3), *rb = gt_down(d_b, n3);
    TAG("flash backward rerun dqkv");
    gt_same(tag, rb, ra, n3);
#undef TAG

    float *frees[] = {qkv, dout, dqkv, out, att, lse, g_out, g_lse, g_dqkv, r_out, r_lse, ra, rb};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) free(frees[i]);
    float *dfrees[] = {d_qkv, d_out, d_lse, d_dout, d_dqkv, d_ref_out, d_out2, d_lse2, d_a, d_b};
    for (size_t i = 0; i < sizeof dfrees / sizeof dfrees[0]; i++) cudaFree(dfrees[i]);
}

int main(int argc, char **argv) {
    int max_t = argc > 1 ? atoi(argv[1]) : 1 << 30;
    if (argc > 2 || max_t < 1) {
        fprintf(stderr, "usage: test_gpu_flash [MAX_T]\n");
        return 2;
    }
    gt_require_gpu("test_gpu_flash");
    if (!flash_attention_supported(64)) {
        printf("SKIP: test_gpu_flash needs a GPU of compute capability 8.0 or newer\n");
        return GT_SKIP;
    }
    gt_seed(20261129);
    px_cuda_ops_init();
    for (size_t i = 0; i < sizeof g_shapes / sizeof g_shapes[0]; i++)
        if (g_shapes[i].T <= max_t) test_shape(&g_shapes[i]);
    px_cuda_ops_shutdown();
    return gt_finish("test_gpu_flash");
}
