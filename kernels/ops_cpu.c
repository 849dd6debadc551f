/* CPU implementation of kernels/ops.h: C11 + OpenMP, matmuls through OpenBLAS.
 *
 * How the work is split, and why:
 * - Row-wise ops (LayerNorm, softmax, embedding lookup) run one row per
 *   iteration of a static OpenMP loop: rows are independent, so the result does
 *   not depend on the thread count at all.
 * - Sums over rows (bias, LayerNorm and embedding gradients) are split by
 *   columns instead: each thread owns a slice of columns and walks every row in
 *   order, so each sum has one fixed order and no two threads write the same
 *   element. No float atomics, no OpenMP reduction clauses (their combine order
 *   is unspecified).
 * - Matmuls: each OpenMP thread calls single-threaded cblas_sgemm on its own
 *   block of output rows. OpenBLAS's own pthreads are switched off (see
 *   px_ops_init) because two thread pools spinning on two cores starve each
 *   other; one pool with fixed blocks is also what makes the result repeatable.
 * - Attention: one (batch, head) pair per iteration, each computed with sgemm
 *   in blocks of query rows that only visit keys up to the block's last row,
 *   which skips most of the masked upper triangle.
 * Inner loops are written so gcc vectorizes them at -O3 (fixed-width partial
 * sums instead of serial float accumulators, px_expf instead of libm calls). */
#include "ops.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ops_math.h"

/* ---------------------------------------------------------------- helpers */

static pthread_once_t g_init_once = PTHREAD_ONCE_INIT;
static void ops_init_once(void) { openblas_set_num_threads(1); }
void px_ops_init(void) { pthread_once(&g_init_once, ops_init_once); }

/* [lo, hi) of part `idx` when n items are split into `parts` near-equal ranges. */
static inline void split_range(size_t n, int parts, int idx, size_t *lo, size_t *hi) {
    size_t base = n / (size_t)parts, rem = n % (size_t)parts, i = (size_t)idx;
    *lo = i * base + (i < rem ? i : rem);
    *hi = *lo + base + (i < rem ? 1 : 0);
}

/* Sum of x[0..n) in a fixed order: 8 interleaved partial sums (vectorizable),
 * combined pairwise, then the tail. */
static inline float sum_f(const float *x, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += x[i + k];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += x[i];
    return s;
}

/* Sum of (x[i] - mu)^2, same order as sum_f. */
static inline float sum_sq_dev(const float *x, float mu, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            float d = x[i + k] - mu;
            acc[k] += d * d;
        }
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += (x[i] - mu) * (x[i] - mu);
    return s;
}

static inline float max_f(const float *x, int n) {
    float m = x[0];
    for (int i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* y[i] = px_expf(x[i] - shift) in place; returns the sum in sum_f's order. */
static inline float exp_shift_sum(float *x, float shift, int n) {
    for (int i = 0; i < n; i++) x[i] = px_expf(x[i] - shift);
    return sum_f(x, n);
}

/* Columns are handled in slices of this many floats by the column-split sums. */
#define COL_SLICE 32

/* ---------------------------------------------------------------- encoder */

void encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B, int T,
                     int C) {
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        float *o = out + (size_t)bt * C;
        const float *w = wte + (size_t)inp[bt] * C;
        const float *p = wpe + (size_t)(bt % T) * C;
        for (int c = 0; c < C; c++) o[c] = w[c] + p[c];
    }
}

void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T,
                      int C) {
    int nslices = (C + COL_SLICE - 1) / COL_SLICE;
#pragma omp parallel for schedule(static)
    for (int s = 0; s < nslices; s++) {
        int c0 = s * COL_SLICE, c1 = c0 + COL_SLICE < C ? c0 + COL_SLICE : C;
        for (int bt = 0; bt < B * T; bt++) {
            const float *d = dout + (size_t)bt * C;
            float *gw = dwte + (size_t)inp[bt] * C;
            float *gp = dwpe + (size_t)(bt % T) * C;
            for (int c = c0; c < c1; c++) {
                gw[c] += d[c];
                gp[c] += d[c];
            }
        }
    }
}

/* -------------------------------------------------------------- layernorm */

#define LN_EPS 1e-5f

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                       const float *weight, const float *bias, int B, int T, int C) {
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const float *x = inp + (size_t)bt * C;
        float *o = out + (size_t)bt * C;
        float mu = sum_f(x, C) / (float)C;
        float var = sum_sq_dev(x, mu, C) / (float)C;
        float rs = 1.0f / sqrtf(var + LN_EPS);
        for (int c = 0; c < C; c++) o[c] = (x[c] - mu) * rs * weight[c] + bias[c];
        mean[bt] = mu;
        rstd[bt] = rs;
    }
}

void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const float *mean,
                        const float *rstd, int B, int T, int C) {
    int N = B * T;
    int nslices = (C + COL_SLICE - 1) / COL_SLICE;
#pragma omp parallel
    {
        /* Input gradient: rows are independent. Two fixed-order row sums:
         * mean(dnorm) and mean(dnorm * norm), with dnorm = weight * dout. */
        float *buf = malloc(sizeof(float) * 2 * (size_t)C);
        float *dn = buf, *dnn = buf + C;
#pragma omp for schedule(static)
        for (int bt = 0; bt < N; bt++) {
            const float *x = inp + (size_t)bt * C;
            const float *d = dout + (size_t)bt * C;
            float *di = dinp + (size_t)bt * C;
            float mu = mean[bt], rs = rstd[bt];
            for (int c = 0; c < C; c++) {
                dn[c] = weight[c] * d[c];
                dnn[c] = dn[c] * ((x[c] - mu) * rs);
            }
            float dn_mean = sum_f(dn, C) / (float)C;
            float dnn_mean = sum_f(dnn, C) / (float)C;
            for (int c = 0; c < C; c++) {
                float norm = (x[c] - mu) * rs;
                di[c] += (dn[c] - dn_mean - norm * dnn_mean) * rs;
            }
        }
        free(buf);

        /* Weight and bias gradients: column sums over all rows, split by column
         * slice so each sum runs in row order on one thread. */
#pragma omp for schedule(static) nowait
        for (int s = 0; s < nslices; s++) {
            int c0 = s * COL_SLICE, w = (c0 + COL_SLICE < C ? COL_SLICE : C - c0);
            float aw[COL_SLICE] = {0}, ab[COL_SLICE] = {0};
            for (int bt = 0; bt < N; bt++) {
                const float *x = inp + (size_t)bt * C + c0;
                const float *d = dout + (size_t)bt * C + c0;
                float mu = mean[bt], rs = rstd[bt];
                for (int c = 0; c < w; c++) {
                    aw[c] += d[c] * ((x[c] - mu) * rs);
                    ab[c] += d[c];
                }
            }
            for (int c = 0; c < w; c++) {
                dweight[c0 + c] += aw[c];
                dbias[c0 + c] += ab[c];
            }
        }
    }
}

/* ----------------------------------------------------------------- matmul */

/* Column sums of a (M,N) matrix added into out (N), split by column slice. */
static void colsum_add(float *out, const float *a, int M, int N) {
    int nslices = (N + COL_SLICE - 1) / COL_SLICE;
#pragma omp for schedule(static) nowait
    for (int s = 0; s < nslices; s++) {
        int c0 = s * COL_SLICE, w = (c0 + COL_SLICE < N ? COL_SLICE : N - c0);
        float acc[COL_SLICE] = {0};
        for (int r = 0; r < M; r++) {
            const float *row = a + (size_t)r * N + c0;
            for (int c = 0; c < w; c++) acc[c] += row[c];
        }
        for (int c = 0; c < w; c++) out[c0 + c] += acc[c];
    }
}

void matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int B,
                    int T, int C, int OC) {
    px_ops_init();
    int M = B * T;
#pragma omp parallel
    {
        int nth = omp_get_num_threads(), tid = omp_get_thread_num();
        /* Split the output by rows; a handful of rows (decoding, tiny tests)
         * is split by columns instead so every thread still has work. */
        size_t lo, hi;
        if (M >= 16 * nth) {
            split_range((size_t)M, nth, tid, &lo, &hi);
            int m = (int)(hi - lo);
            float *o = out + lo * OC;
            if (m > 0) {
                if (bias)
                    for (int r = 0; r < m; r++) memcpy(o + (size_t)r * OC, bias, sizeof(float) * OC);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, OC, C, 1.0f,
                            inp + lo * C, C, weight, C, bias ? 1.0f : 0.0f, o, OC);
            }
        } else {
            split_range((size_t)OC, nth, tid, &lo, &hi);
            int n = (int)(hi - lo);
            if (n > 0) {
                if (bias)
                    for (int r = 0; r < M; r++)
                        memcpy(out + (size_t)r * OC + lo, bias + lo, sizeof(float) * n);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, n, C, 1.0f, inp, C,
                            weight + lo * C, C, bias ? 1.0f : 0.0f, out + lo, OC);
            }
        }
    }
}

void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                     const float *inp, const float *weight, int B, int T, int C, int OC) {
    px_ops_init();
    int M = B * T;
#pragma omp parallel
    {
        int nth = omp_get_num_threads(), tid = omp_get_thread_num();
        size_t lo, hi;
        if (dinp) { /* dinp (M,C) += dout (M,OC) @ weight (OC,C), by row blocks */
            split_range((size_t)M, nth, tid, &lo, &hi);
            if (hi > lo)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(hi - lo), C, OC,
                            1.0f, dout + lo * OC, OC, weight, C, 1.0f, dinp + lo * C, C);
        }
        if (dweight) { /* dweight (OC,C) += dout^T (OC,M) @ inp (M,C), by blocks of OC */
            split_range((size_t)OC, nth, tid, &lo, &hi);
            if (hi > lo)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)(hi - lo), C, M, 1.0f,
                            dout + lo, OC, inp, C, 1.0f, dweight + lo * C, C);
        }
        if (dbias) colsum_add(dbias, dout, M, OC);
    }
}

/* -------------------------------------------------------------- attention */

/* Query rows are processed in blocks of ATT_BLOCK: block r only needs keys
 * [0, end of block r), so the sgemms skip the upper triangle block by block. */
#define ATT_BLOCK 64

void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    px_ops_init();
    int hs = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * ld + (size_t)h * hs;
        const float *k = q + C, *v = q + 2 * C;
        float *a = att + (size_t)bh * T * T;
        float *o = out + (size_t)b * T * C + (size_t)h * hs;
        for (int i0 = 0; i0 < T; i0 += ATT_BLOCK) {
            int i1 = i0 + ATT_BLOCK < T ? i0 + ATT_BLOCK : T, mb = i1 - i0;
            /* scores (mb, i1) = scale * q[i0:i1] @ k[0:i1]^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mb, i1, hs, scale,
                        q + (size_t)i0 * ld, ld, k, ld, 0.0f, a + (size_t)i0 * T, T);
            for (int i = i0; i < i1; i++) {
                float *row = a + (size_t)i * T;
                float mx = max_f(row, i + 1);
                float inv = 1.0f / exp_shift_sum(row, mx, i + 1);
                for (int j = 0; j <= i; j++) row[j] *= inv;
                for (int j = i + 1; j < i1; j++) row[j] = 0.0f; /* masked, read by the next sgemm */
            }
            /* out[i0:i1] = att (mb, i1) @ v[0:i1] */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mb, hs, i1, 1.0f,
                        a + (size_t)i0 * T, T, v, ld, 0.0f, o + (size_t)i0 * C, C);
        }
    }
}

void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                        int T, int C, int NH) {
    px_ops_init();
    int hs = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel
    {
        float *ds = malloc(sizeof(float) * (size_t)ATT_BLOCK * T); /* (ATT_BLOCK, T) */
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            int b = bh / NH, h = bh % NH;
            size_t qoff = (size_t)b * T * ld + (size_t)h * hs;
            const float *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + qoff, *dk = dq + C, *dv = dq + 2 * C;
            const float *a = att + (size_t)bh * T * T;
            const float *dy = dout + (size_t)b * T * C + (size_t)h * hs;
            for (int i0 = 0; i0 < T; i0 += ATT_BLOCK) {
                int i1 = i0 + ATT_BLOCK < T ? i0 + ATT_BLOCK : T, mb = i1 - i0;
                const float *ab = a + (size_t)i0 * T;
                const float *dyb = dy + (size_t)i0 * C;
                /* dv[0:i1] += att^T (i1, mb) @ dy[i0:i1] */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1, hs, mb, 1.0f, ab, T, dyb,
                            C, 1.0f, dv, ld);
                /* datt (mb, i1) = dy[i0:i1] @ v[0:i1]^T */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mb, i1, hs, 1.0f, dyb, C, v,
                            ld, 0.0f, ds, i1);
                /* softmax backward: dscore = att * (datt - sum_j att*datt), j <= i */
                for (int i = i0; i < i1; i++) {
                    const float *p = ab + (size_t)(i - i0) * T;
                    float *d = ds + (size_t)(i - i0) * i1;
                    float acc[8] = {0};
                    int j = 0;
                    for (; j + 8 <= i + 1; j += 8)
                        for (int u = 0; u < 8; u++) acc[u] += p[j + u] * d[j + u];
                    float dot = ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
                                ((acc[2] + acc[6]) + (acc[3] + acc[7]));
                    for (; j <= i; j++) dot += p[j] * d[j];
                    for (j = 0; j <= i; j++) d[j] = p[j] * (d[j] - dot);
                    for (; j < i1; j++) d[j] = 0.0f;
                }
                /* dq[i0:i1] += scale * dscore @ k[0:i1] */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mb, hs, i1, scale, ds, i1,
                            k, ld, 1.0f, dq + (size_t)i0 * ld, ld);
                /* dk[0:i1] += scale * dscore^T @ q[i0:i1] */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1, hs, mb, scale, ds, i1,
                            q + (size_t)i0 * ld, ld, 1.0f, dk, ld);
            }
        }
        free(ds);
    }
}

/* ------------------------------------------------------------------- gelu */

void gelu_forward(float *out, const float *inp, size_t N) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) out[i] = px_gelu(inp[i]);
}

void gelu_backward(float *dinp, const float *inp, const float *dout, size_t N) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) dinp[i] += px_gelu_grad(inp[i]) * dout[i];
}

/* --------------------------------------------------------------- residual */

void residual_forward(float *out, const float *inp1, const float *inp2, size_t N) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) out[i] = inp1[i] + inp2[i];
}

void residual_backward(float *dinp1, float *dinp2, const float *dout, size_t N) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) {
        dinp1[i] += dout[i];
        dinp2[i] += dout[i];
    }
}

/* ------------------------------------------------ softmax + cross-entropy */

void crossentropy_softmax_forward(float *losses, float *lse, const float *logits,
                                  const int *targets, int B, int T, int V, int Vp) {
#pragma omp parallel
    {
        float *buf = malloc(sizeof(float) * (size_t)V);
#pragma omp for schedule(static)
        for (int bt = 0; bt < B * T; bt++) {
            const float *x = logits + (size_t)bt * Vp;
            float mx = max_f(x, V);
            memcpy(buf, x, sizeof(float) * (size_t)V);
            float l = mx + logf(exp_shift_sum(buf, mx, V));
            lse[bt] = l;
            losses[bt] = l - x[targets[bt]];
        }
        free(buf);
    }
}

void crossentropy_softmax_backward(float *dlogits, const float *logits, const float *lse,
                                   const int *targets, float dloss, int B, int T, int V, int Vp) {
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const float *x = logits + (size_t)bt * Vp;
        float *d = dlogits + (size_t)bt * Vp;
        float l = lse[bt];
        for (int i = 0; i < V; i++) d[i] = px_expf(x[i] - l) * dloss;
        d[targets[bt]] -= dloss;
        for (int i = V; i < Vp; i++) d[i] = 0.0f;
    }
}

/* ------------------------------------------------------------------ adamw */

void adamw_update(float *params, float *m, float *v, const float *grads, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int t) {
    px_adamw_coef_t c = px_adamw_coef(lr, beta1, beta2, eps, weight_decay, t);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) px_adamw_element(&params[i], &m[i], &v[i], grads[i], &c);
}

/* ------------------------------------------------------------- grad norm */

#define NORM_BLOCK 16384

double norm_squared(const float *x, size_t n) {
    size_t nb = (n + NORM_BLOCK - 1) / NORM_BLOCK;
    double stack_part[64];
    double *part = nb <= 64 ? stack_part : malloc(sizeof(double) * nb);
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * NORM_BLOCK, hi = lo + NORM_BLOCK < n ? lo + NORM_BLOCK : n;
        double acc[4] = {0};
        size_t i = lo;
        for (; i + 4 <= hi; i += 4)
            for (int k = 0; k < 4; k++) acc[k] += (double)x[i + k] * (double)x[i + k];
        double s = (acc[0] + acc[2]) + (acc[1] + acc[3]);
        for (; i < hi; i++) s += (double)x[i] * (double)x[i];
        part[b] = s;
    }
    double total = 0.0;
    for (size_t b = 0; b < nb; b++) total += part[b];
    if (part != stack_part) free(part);
    return total;
}

void scale_inplace(float *x, size_t n, float scale) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= scale;
}
