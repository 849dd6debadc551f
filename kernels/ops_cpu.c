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
 * sums instead of serial float accumulators, px_expf instead of libm calls),
 * and live in small helpers compiled for AVX-512, AVX2 and baseline x86-64
 * (PX_CLONES), picked at load time. The clones run the same IEEE operations in
 * the same order, only wider (no FMA contraction in ISO C mode, no
 * reassociation), so results are bitwise identical whichever one runs. */
#include "ops.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) && defined(__SSE__)
#include <immintrin.h>
#endif

#include "ops_math.h"

/* ---------------------------------------------------------------- helpers */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(PX_NO_CLONES)
#define PX_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PX_CLONES
#endif

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

/* Max of x[0..n), n >= 1, in 8 lanes (max is exact, so this is only for speed). */
static inline float max_f(const float *x, int n) {
    float acc[8];
    for (int k = 0; k < 8; k++) acc[k] = x[0];
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] = x[i + k] > acc[k] ? x[i + k] : acc[k];
    float m = acc[0];
    for (int k = 1; k < 8; k++) m = acc[k] > m ? acc[k] : m;
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
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

PX_CLONES static void add_span(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B, int T,
                     int C) {
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++)
        add_span(out + (size_t)bt * C, wte + (size_t)inp[bt] * C, wpe + (size_t)(bt % T) * C,
                 (size_t)C);
}

/* Columns [c0, c1) of the embedding gradients, every row in order. */
PX_CLONES static void encoder_backward_slice(float *dwte, float *dwpe, const float *dout,
                                             const int *inp, int BT, int T, int C, int c0,
                                             int c1) {
    for (int bt = 0; bt < BT; bt++) {
        const float *d = dout + (size_t)bt * C;
        float *gw = dwte + (size_t)inp[bt] * C;
        float *gp = dwpe + (size_t)(bt % T) * C;
        for (int c = c0; c < c1; c++) {
            gw[c] += d[c];
            gp[c] += d[c];
        }
    }
}

void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T,
                      int C) {
    int nslices = (C + COL_SLICE - 1) / COL_SLICE;
#pragma omp parallel for schedule(static)
    for (int s = 0; s < nslices; s++) {
        int c0 = s * COL_SLICE, c1 = c0 + COL_SLICE < C ? c0 + COL_SLICE : C;
        encoder_backward_slice(dwte, dwpe, dout, inp, B * T, T, C, c0, c1);
    }
}

/* -------------------------------------------------------------- layernorm */

#define LN_EPS 1e-5f

PX_CLONES static void layernorm_row(float *o, float *mean, float *rstd, const float *x,
                                    const float *weight, const float *bias, int C) {
    float mu = sum_f(x, C) / (float)C;
    float var = sum_sq_dev(x, mu, C) / (float)C;
    float rs = 1.0f / sqrtf(var + LN_EPS);
    for (int c = 0; c < C; c++) o[c] = (x[c] - mu) * rs * weight[c] + bias[c];
    *mean = mu;
    *rstd = rs;
}

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                       const float *weight, const float *bias, int B, int T, int C) {
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++)
        layernorm_row(out + (size_t)bt * C, mean + bt, rstd + bt, inp + (size_t)bt * C, weight,
                      bias, C);
}

/* Input gradient of one row. Two fixed-order row sums: mean(dnorm) and
 * mean(dnorm * norm), with dnorm = weight * dout. dn, dnn: (C) scratch. */
PX_CLONES static void layernorm_backward_row(float *di, const float *d, const float *x,
                                             const float *weight, float mu, float rs, float *dn,
                                             float *dnn, int C) {
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

/* Weight and bias gradients of columns [c0, c0+w), w <= COL_SLICE: column sums
 * over all N rows, in row order. */
PX_CLONES static void layernorm_backward_cols(float *dweight, float *dbias, const float *dout,
                                              const float *inp, const float *mean,
                                              const float *rstd, int N, int C, int c0, int w) {
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

void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const float *mean,
                        const float *rstd, int B, int T, int C) {
    int N = B * T;
    int nslices = (C + COL_SLICE - 1) / COL_SLICE;
#pragma omp parallel
    {
        float *buf = malloc(sizeof(float) * 2 * (size_t)C);
#pragma omp for schedule(static)
        for (int bt = 0; bt < N; bt++)
            layernorm_backward_row(dinp + (size_t)bt * C, dout + (size_t)bt * C,
                                   inp + (size_t)bt * C, weight, mean[bt], rstd[bt], buf,
                                   buf + C, C);
        free(buf);
        /* split by column slice so each sum runs in row order on one thread */
#pragma omp for schedule(static) nowait
        for (int s = 0; s < nslices; s++) {
            int c0 = s * COL_SLICE, w = (c0 + COL_SLICE < C ? COL_SLICE : C - c0);
            layernorm_backward_cols(dweight, dbias, dout, inp, mean, rstd, N, C, c0, w);
        }
    }
}

/* ----------------------------------------------------------------- matmul */

/* Sums of columns [c0, c0+w) of a (M,N) matrix, in row order, added into out. */
PX_CLONES static void colsum_slice(float *out, const float *a, int M, int N, int c0, int w) {
    float acc[COL_SLICE] = {0};
    for (int r = 0; r < M; r++) {
        const float *row = a + (size_t)r * N + c0;
        for (int c = 0; c < w; c++) acc[c] += row[c];
    }
    for (int c = 0; c < w; c++) out[c0 + c] += acc[c];
}

/* Column sums of a (M,N) matrix added into out (N), split by column slice.
 * A worksharing loop: call inside a parallel region. */
static void colsum_add(float *out, const float *a, int M, int N) {
    int nslices = (N + COL_SLICE - 1) / COL_SLICE;
#pragma omp for schedule(static) nowait
    for (int s = 0; s < nslices; s++) {
        int c0 = s * COL_SLICE, w = (c0 + COL_SLICE < N ? COL_SLICE : N - c0);
        colsum_slice(out, a, M, N, c0, w);
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

/* Rows [i0, i1) of one head's scores (row stride T), in place: softmax over
 * keys 0..i, zeros for keys i+1 .. i1-1 (read by the next sgemm). */
PX_CLONES static void causal_softmax_rows(float *a, int T, int i0, int i1) {
    for (int i = i0; i < i1; i++) {
        float *row = a + (size_t)i * T;
        float mx = max_f(row, i + 1);
        float inv = 1.0f / exp_shift_sum(row, mx, i + 1);
        for (int j = 0; j <= i; j++) row[j] *= inv;
        for (int j = i + 1; j < i1; j++) row[j] = 0.0f;
    }
}

/* Softmax backward of rows [i0, i1) of one head: ds (i1-i0, i1), row stride i1,
 * holds datt on entry and dscore = att * (datt - sum_j att*datt) on exit;
 * att rows have stride T. Keys past the row are zeroed. */
PX_CLONES static void causal_softmax_backward_rows(float *ds, const float *att, int T, int i0,
                                                   int i1) {
    for (int i = i0; i < i1; i++) {
        const float *p = att + (size_t)(i - i0) * T;
        float *d = ds + (size_t)(i - i0) * i1;
        float acc[8] = {0};
        int j = 0;
        for (; j + 8 <= i + 1; j += 8)
            for (int u = 0; u < 8; u++) acc[u] += p[j + u] * d[j + u];
        float dot = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        for (; j <= i; j++) dot += p[j] * d[j];
        for (j = 0; j <= i; j++) d[j] = p[j] * (d[j] - dot);
        for (; j < i1; j++) d[j] = 0.0f;
    }
}

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
            causal_softmax_rows(a, T, i0, i1);
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
                causal_softmax_backward_rows(ds, ab, T, i0, i1);
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

/* Element-wise loops run as one contiguous span per thread. */
#define PARALLEL_SPANS(N, CALL)                                          \
    _Pragma("omp parallel") {                                           \
        size_t lo_, hi_;                                                \
        split_range((N), omp_get_num_threads(), omp_get_thread_num(), &lo_, &hi_); \
        if (hi_ > lo_) CALL(lo_, hi_ - lo_);                            \
    }

PX_CLONES static void gelu_span(float *out, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = px_gelu(inp[i]);
}

PX_CLONES static void gelu_backward_span(float *dinp, const float *inp, const float *dout,
                                         size_t n) {
    for (size_t i = 0; i < n; i++) dinp[i] += px_gelu_grad(inp[i]) * dout[i];
}

void gelu_forward(float *out, const float *inp, size_t N) {
#define CALL(lo, n) gelu_span(out + (lo), inp + (lo), (n))
    PARALLEL_SPANS(N, CALL)
#undef CALL
}

void gelu_backward(float *dinp, const float *inp, const float *dout, size_t N) {
#define CALL(lo, n) gelu_backward_span(dinp + (lo), inp + (lo), dout + (lo), (n))
    PARALLEL_SPANS(N, CALL)
#undef CALL
}

/* --------------------------------------------------------------- residual */

PX_CLONES static void acc2_span(float *a, float *b, const float *d, size_t n) {
    for (size_t i = 0; i < n; i++) {
        a[i] += d[i];
        b[i] += d[i];
    }
}

void residual_forward(float *out, const float *inp1, const float *inp2, size_t N) {
#define CALL(lo, n) add_span(out + (lo), inp1 + (lo), inp2 + (lo), (n))
    PARALLEL_SPANS(N, CALL)
#undef CALL
}

void residual_backward(float *dinp1, float *dinp2, const float *dout, size_t N) {
#define CALL(lo, n) acc2_span(dinp1 + (lo), dinp2 + (lo), dout + (lo), (n))
    PARALLEL_SPANS(N, CALL)
#undef CALL
}

/* ------------------------------------------------ softmax + cross-entropy */

PX_CLONES static void crossentropy_row(float *loss, float *lse, const float *x, int target,
                                       float *buf, int V) {
    float mx = max_f(x, V);
    memcpy(buf, x, sizeof(float) * (size_t)V);
    float l = mx + logf(exp_shift_sum(buf, mx, V));
    *lse = l;
    *loss = l - x[target];
}

void crossentropy_softmax_forward(float *losses, float *lse, const float *logits,
                                  const int *targets, int B, int T, int V, int Vp) {
#pragma omp parallel
    {
        float *buf = malloc(sizeof(float) * (size_t)V);
#pragma omp for schedule(static)
        for (int bt = 0; bt < B * T; bt++)
            crossentropy_row(losses + bt, lse + bt, logits + (size_t)bt * Vp, targets[bt], buf, V);
        free(buf);
    }
}

PX_CLONES static void crossentropy_backward_row(float *d, const float *x, float lse, int target,
                                                float dloss, int V, int Vp) {
    for (int i = 0; i < V; i++) d[i] = px_expf(x[i] - lse) * dloss;
    d[target] -= dloss;
    for (int i = V; i < Vp; i++) d[i] = 0.0f;
}

void crossentropy_softmax_backward(float *dlogits, const float *logits, const float *lse,
                                   const int *targets, float dloss, int B, int T, int V, int Vp) {
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++)
        crossentropy_backward_row(dlogits + (size_t)bt * Vp, logits + (size_t)bt * Vp, lse[bt],
                                  targets[bt], dloss, V, Vp);
}

/* ------------------------------------------------------------------ adamw */

PX_CLONES static void adamw_span(float *params, float *m, float *v, const float *grads, size_t n,
                                 const px_adamw_coef_t *cp) {
    px_adamw_coef_t c = *cp;
    for (size_t i = 0; i < n; i++) px_adamw_element(&params[i], &m[i], &v[i], grads[i], &c);
}

void adamw_update(float *params, float *m, float *v, const float *grads, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int t) {
    px_adamw_coef_t c = px_adamw_coef(lr, beta1, beta2, eps, weight_decay, t);
#define CALL(lo, k) adamw_span(params + (lo), m + (lo), v + (lo), grads + (lo), (k), &c)
    PARALLEL_SPANS(n, CALL)
#undef CALL
}

void adamw_update_serial(float *params, float *m, float *v, const float *grads, size_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, int t) {
    px_adamw_coef_t c = px_adamw_coef(lr, beta1, beta2, eps, weight_decay, t);
    adamw_span(params, m, v, grads, n, &c);
}

/* ------------------------------------------------------------- grad norm */

#define NORM_BLOCK 16384

/* Sum of squares in double: 8 interleaved partial sums, combined in a fixed order. */
PX_CLONES static double sum_squares_d(const float *x, size_t n) {
    double acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += (double)x[i + k] * (double)x[i + k];
    double s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

double norm_squared(const float *x, size_t n) {
    size_t nb = (n + NORM_BLOCK - 1) / NORM_BLOCK;
    double stack_part[64];
    double *part = nb <= 64 ? stack_part : malloc(sizeof(double) * nb);
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * NORM_BLOCK, hi = lo + NORM_BLOCK < n ? lo + NORM_BLOCK : n;
        part[b] = sum_squares_d(x + lo, hi - lo);
    }
    double total = 0.0;
    for (size_t b = 0; b < nb; b++) total += part[b];
    if (part != stack_part) free(part);
    return total;
}

PX_CLONES static void scale_span(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] *= scale;
}

void scale_inplace(float *x, size_t n, float scale) {
#define CALL(lo, k) scale_span(x + (lo), (k), scale)
    PARALLEL_SPANS(n, CALL)
#undef CALL
}

void copy_streaming(float *dst, const float *src, size_t n) {
#if defined(__x86_64__) && defined(__SSE__)
    size_t i = 0;
    for (; i < n && ((uintptr_t)(dst + i) & 15); i++) dst[i] = src[i]; /* to a 16-byte boundary */
    for (; i + 16 <= n; i += 16) {
        __m128 a = _mm_loadu_ps(src + i), b = _mm_loadu_ps(src + i + 4);
        __m128 c = _mm_loadu_ps(src + i + 8), d = _mm_loadu_ps(src + i + 12);
        _mm_stream_ps(dst + i, a);
        _mm_stream_ps(dst + i + 4, b);
        _mm_stream_ps(dst + i + 8, c);
        _mm_stream_ps(dst + i + 12, d);
    }
    for (; i < n; i++) dst[i] = src[i];
    _mm_sfence(); /* streaming stores are weakly ordered: visible before whatever the caller does next */
#else
    memcpy(dst, src, n * sizeof(float));
#endif
}
