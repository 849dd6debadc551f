/* Prints one hash of the outputs of every CPU op on fixed inputs. Built twice
 * by tests/model.cmake: against px_kernels (element loops dispatched to the
 * widest ISA this CPU has: AVX-512, AVX2 or baseline) and against ops_cpu.c
 * compiled with PX_NO_CLONES (baseline only). The test compares the two
 * hashes: equal means the ISA clones compute bitwise the same results, the
 * property ops_cpu.c's header comment promises. (OpenBLAS picks its own kernel
 * per CPU; that part is out of this test's reach, and it uses one thread.) */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

static uint64_t g_hash = 1469598103934665603ULL;

static void mix(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) g_hash = (g_hash ^ b[i]) * 1099511628211ULL;
}

static float *frand(size_t n, float scale, uint64_t *s) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = ((float)(*s >> 40) / 16777216.0f - 0.5f) * 2.0f * scale;
    }
    return x;
}

int main(void) {
    omp_set_num_threads(1);
    uint64_t s = 42;
    enum { B = 2, T = 70, C = 40, NH = 4, V = 50, Vp = 64 };
    size_t btc = (size_t)B * T * C, bt = (size_t)B * T;
    int inp[B * T], tg[B * T];
    for (size_t i = 0; i < bt; i++) {
        inp[i] = (int)(i * 7 % V);
        tg[i] = (int)(i * 13 % V);
    }
    float *wte = frand((size_t)Vp * C, 1, &s), *wpe = frand((size_t)T * C, 1, &s);
    float *x = malloc(btc * sizeof(float));
    encoder_forward(x, inp, wte, wpe, B, T, C);
    mix(x, btc * sizeof(float));
    float *w = frand(C, 1, &s), *b = frand(C, 1, &s), *ln = malloc(btc * sizeof(float));
    float mean[B * T], rstd[B * T];
    layernorm_forward(ln, mean, rstd, x, w, b, B, T, C);
    mix(ln, btc * sizeof(float));
    float *dln = frand(btc, 1, &s), *dx = calloc(btc, sizeof(float)), dw[C] = {0}, db[C] = {0};
    layernorm_backward(dx, dw, db, dln, x, w, mean, rstd, B, T, C);
    mix(dx, btc * sizeof(float)), mix(dw, sizeof dw), mix(db, sizeof db);
    float *qkv = frand(btc * 3, 2, &s), *att = malloc((size_t)B * NH * T * T * sizeof(float));
    float *y = malloc(btc * sizeof(float)), *dqkv = calloc(btc * 3, sizeof(float));
    attention_forward(y, att, qkv, B, T, C, NH);
    mix(y, btc * sizeof(float));
    attention_backward(dqkv, dln, qkv, att, B, T, C, NH);
    mix(dqkv, btc * 3 * sizeof(float));
    float *g = malloc(btc * sizeof(float)), *dg = calloc(btc, sizeof(float));
    gelu_forward(g, qkv, btc);
    gelu_backward(dg, qkv, dln, btc);
    mix(g, btc * sizeof(float)), mix(dg, btc * sizeof(float));
    residual_forward(g, x, ln, btc);
    residual_backward(dg, dx, dln, btc);
    mix(g, btc * sizeof(float)), mix(dg, btc * sizeof(float)), mix(dx, btc * sizeof(float));
    float *logits = frand(bt * Vp, 5, &s), losses[B * T], lse[B * T];
    crossentropy_softmax_forward(losses, lse, logits, tg, B, T, V, Vp);
    crossentropy_softmax_backward(logits, logits, lse, tg, 0.01f, B, T, V, Vp);
    mix(losses, sizeof losses), mix(logits, bt * Vp * sizeof(float));
    float *dwte = calloc((size_t)Vp * C, sizeof(float)), *dwpe = calloc((size_t)T * C, sizeof(float));
    encoder_backward(dwte, dwpe, dln, inp, B, T, C);
    mix(dwte, (size_t)Vp * C * sizeof(float)), mix(dwpe, (size_t)T * C * sizeof(float));
    float *m = calloc(btc, sizeof(float)), *v = calloc(btc, sizeof(float));
    for (int t = 1; t <= 3; t++) adamw_update(x, m, v, dln, btc, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    mix(x, btc * sizeof(float)), mix(m, btc * sizeof(float)), mix(v, btc * sizeof(float));
    float dbias[3 * C] = {0}; /* matmul's bias gradient: the column sums, no sgemm */
    matmul_backward(NULL, NULL, dbias, qkv, NULL, NULL, B, T, C, 3 * C);
    mix(dbias, sizeof dbias);
    double n2 = norm_squared(dqkv, btc * 3);
    mix(&n2, sizeof n2);
    scale_inplace(dqkv, btc * 3, 0.3f);
    mix(dqkv, btc * 3 * sizeof(float));
    printf("%016llx\n", (unsigned long long)g_hash);
    return 0;
}
