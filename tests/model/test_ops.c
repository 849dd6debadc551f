/* Every op in kernels/ops.h against a double-precision reference: the forward
 * output against a plain double implementation, and the backward against
 * central finite differences of that double implementation (step 1e-6, so the
 * numeric gradient is accurate to ~1e-9 and any error seen is the op's own).
 * The objective is sum(out * w) for a random w, which exercises every output
 * element. Gradient buffers are pre-filled with random values to check that
 * backward ops accumulate (+=) rather than overwrite.
 *
 * Runs at 1 and 3 OpenMP threads (3 gives uneven splits). Exits non-zero,
 * naming the op and the tensor, on any miss. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "ops_math.h"

static int g_failures;
static unsigned long long g_rng = 88172645463325252ULL;

static double urand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 4503599627370496.0 - 1.0;
}

static float *frand(size_t n, double scale) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)(urand() * scale);
    return x;
}

static double *to_d(const float *x, size_t n) {
    double *d = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

static float *fcopy(const float *x, size_t n) {
    float *y = malloc(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

/* Fails when max |got - want| > rtol * max |want| (+ a tiny absolute floor). */
static void check(const char *op, const char *tensor, const float *got, const double *want,
                  size_t n, double rtol) {
    double maxabs = 0, maxerr = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double a = fabs(want[i]), e = fabs((double)got[i] - want[i]);
        if (a > maxabs) maxabs = a;
        if (!(e <= maxerr)) { /* also catches NaN */
            maxerr = e;
            at = i;
        }
    }
    double tol = rtol * maxabs + 1e-9;
    if (!(maxerr <= tol)) {
        printf("FAIL %s %s: max error %.3e at [%zu] (got %.8g, want %.8g), tolerance %.3e\n", op,
               tensor, maxerr, at, got[at], want[at], tol);
        g_failures++;
    } else {
        printf("ok   %-28s %-8s max error %.2e (max |value| %.2e)\n", op, tensor, maxerr, maxabs);
    }
}

/* Gradient check helpers: forward is a reference implementation writing nout
 * doubles; the objective is dot(out, w). */
typedef void (*ref_fn)(void *ctx, double *out);

static double objective(ref_fn f, void *ctx, double *out, const double *w, size_t nout) {
    f(ctx, out);
    double s = 0;
    for (size_t i = 0; i < nout; i++) s += out[i] * w[i];
    return s;
}

static double *numgrad(double *x, size_t n, ref_fn f, void *ctx, const double *w, size_t nout) {
    const double h = 1e-6;
    double *g = malloc(n * sizeof(double)), *out = malloc(nout * sizeof(double));
    for (size_t j = 0; j < n; j++) {
        double save = x[j];
        x[j] = save + h;
        double lp = objective(f, ctx, out, w, nout);
        x[j] = save - h;
        double lm = objective(f, ctx, out, w, nout);
        x[j] = save;
        g[j] = (lp - lm) / (2 * h);
    }
    free(out);
    return g;
}

/* got = backward result; pre = the buffer's content before backward. Checks got - pre. */
static void check_grad(const char *op, const char *tensor, const float *got, const float *pre,
                       const double *num, size_t n) {
    float *delta = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) delta[i] = got[i] - pre[i];
    check(op, tensor, delta, num, n, 1e-4);
    free(delta);
}

/* ---------------------------------------------------------------- encoder */

typedef struct {
    int B, T, C, V;
    const int *inp;
    double *wte, *wpe;
} enc_ctx;

static void enc_ref(void *p, double *out) {
    enc_ctx *c = p;
    for (int bt = 0; bt < c->B * c->T; bt++)
        for (int k = 0; k < c->C; k++)
            out[bt * c->C + k] = c->wte[c->inp[bt] * c->C + k] + c->wpe[(bt % c->T) * c->C + k];
}

static void test_encoder(void) {
    int B = 3, T = 5, C = 40, V = 7, maxT = 6;
    int inp[15];
    for (int i = 0; i < B * T; i++) inp[i] = (i * 5 + i / 3) % V; /* repeats on purpose */
    float *wte = frand((size_t)V * C, 1), *wpe = frand((size_t)maxT * C, 1);
    size_t nout = (size_t)B * T * C;
    float *out = malloc(nout * sizeof(float)), *w = frand(nout, 1);
    enc_ctx c = {B, T, C, V, inp, to_d(wte, (size_t)V * C), to_d(wpe, (size_t)maxT * C)};
    double *ref = malloc(nout * sizeof(double)), *wd = to_d(w, nout);
    encoder_forward(out, inp, wte, wpe, B, T, C);
    enc_ref(&c, ref);
    check("encoder_forward", "out", out, ref, nout, 1e-6);
    float *dwte = frand((size_t)V * C, 1), *dwpe = frand((size_t)maxT * C, 1);
    float *dwte0 = fcopy(dwte, (size_t)V * C), *dwpe0 = fcopy(dwpe, (size_t)maxT * C);
    encoder_backward(dwte, dwpe, w, inp, B, T, C);
    double *g = numgrad(c.wte, (size_t)V * C, enc_ref, &c, wd, nout);
    check_grad("encoder_backward", "dwte", dwte, dwte0, g, (size_t)V * C);
    free(g);
    g = numgrad(c.wpe, (size_t)maxT * C, enc_ref, &c, wd, nout);
    check_grad("encoder_backward", "dwpe", dwpe, dwpe0, g, (size_t)maxT * C);
    free(g);
    free(wte), free(wpe), free(out), free(w), free(c.wte), free(c.wpe), free(ref), free(wd);
    free(dwte), free(dwpe), free(dwte0), free(dwpe0);
}

/* -------------------------------------------------------------- layernorm */

typedef struct {
    int N, C;
    double *inp, *wt, *bias;
} ln_ctx;

static void ln_ref(void *p, double *out) {
    ln_ctx *c = p;
    for (int r = 0; r < c->N; r++) {
        const double *x = c->inp + r * c->C;
        double mu = 0, var = 0;
        for (int k = 0; k < c->C; k++) mu += x[k];
        mu /= c->C;
        for (int k = 0; k < c->C; k++) var += (x[k] - mu) * (x[k] - mu);
        var /= c->C;
        double rs = 1.0 / sqrt(var + 1e-5);
        for (int k = 0; k < c->C; k++) out[r * c->C + k] = (x[k] - mu) * rs * c->wt[k] + c->bias[k];
    }
}

static void test_layernorm(int B, int T, int C) {
    int N = B * T;
    size_t n = (size_t)N * C;
    float *inp = frand(n, 2), *wt = frand((size_t)C, 1), *bias = frand((size_t)C, 1);
    for (size_t i = 0; i < n; i++) inp[i] += 0.5f; /* nonzero mean */
    float *out = malloc(n * sizeof(float)), *mean = malloc(N * sizeof(float));
    float *rstd = malloc(N * sizeof(float)), *w = frand(n, 1);
    ln_ctx c = {N, C, to_d(inp, n), to_d(wt, C), to_d(bias, C)};
    double *ref = malloc(n * sizeof(double)), *wd = to_d(w, n);
    layernorm_forward(out, mean, rstd, inp, wt, bias, B, T, C);
    ln_ref(&c, ref);
    check("layernorm_forward", "out", out, ref, n, 1e-5);
    float *dinp = frand(n, 1), *dwt = frand(C, 1), *db = frand(C, 1);
    float *dinp0 = fcopy(dinp, n), *dwt0 = fcopy(dwt, C), *db0 = fcopy(db, C);
    layernorm_backward(dinp, dwt, db, w, inp, wt, mean, rstd, B, T, C);
    double *g = numgrad(c.inp, n, ln_ref, &c, wd, n);
    check_grad("layernorm_backward", "dinp", dinp, dinp0, g, n);
    free(g);
    g = numgrad(c.wt, C, ln_ref, &c, wd, n);
    check_grad("layernorm_backward", "dweight", dwt, dwt0, g, C);
    free(g);
    g = numgrad(c.bias, C, ln_ref, &c, wd, n);
    check_grad("layernorm_backward", "dbias", db, db0, g, C);
    free(g);
    free(inp), free(wt), free(bias), free(out), free(mean), free(rstd), free(w);
    free(c.inp), free(c.wt), free(c.bias), free(ref), free(wd);
    free(dinp), free(dwt), free(db), free(dinp0), free(dwt0), free(db0);
}

/* ----------------------------------------------------------------- matmul */

typedef struct {
    int M, C, OC;
    double *inp, *wt, *bias;
} mm_ctx;

static void mm_ref(void *p, double *out) {
    mm_ctx *c = p;
    for (int r = 0; r < c->M; r++)
        for (int o = 0; o < c->OC; o++) {
            double s = c->bias ? c->bias[o] : 0.0;
            for (int k = 0; k < c->C; k++) s += c->inp[r * c->C + k] * c->wt[o * c->C + k];
            out[r * c->OC + o] = s;
        }
}

static void test_matmul(int B, int T, int C, int OC, int with_bias) {
    int M = B * T;
    size_t ni = (size_t)M * C, nw = (size_t)OC * C, no = (size_t)M * OC;
    float *inp = frand(ni, 1), *wt = frand(nw, 1), *bias = with_bias ? frand(OC, 1) : NULL;
    float *out = malloc(no * sizeof(float)), *w = frand(no, 1);
    mm_ctx c = {M, C, OC, to_d(inp, ni), to_d(wt, nw), with_bias ? to_d(bias, OC) : NULL};
    double *ref = malloc(no * sizeof(double)), *wd = to_d(w, no);
    char name[64];
    snprintf(name, sizeof name, "matmul M=%d C=%d OC=%d%s", M, C, OC, with_bias ? "" : " nobias");
    matmul_forward(out, inp, wt, bias, B, T, C, OC);
    mm_ref(&c, ref);
    check(name, "out", out, ref, no, 1e-5);
    float *dinp = frand(ni, 1), *dwt = frand(nw, 1), *db = frand(OC, 1);
    float *dinp0 = fcopy(dinp, ni), *dwt0 = fcopy(dwt, nw), *db0 = fcopy(db, OC);
    matmul_backward(dinp, dwt, with_bias ? db : NULL, w, inp, wt, B, T, C, OC);
    double *g = numgrad(c.inp, ni, mm_ref, &c, wd, no);
    check_grad(name, "dinp", dinp, dinp0, g, ni);
    free(g);
    g = numgrad(c.wt, nw, mm_ref, &c, wd, no);
    check_grad(name, "dweight", dwt, dwt0, g, nw);
    free(g);
    if (with_bias) {
        g = numgrad(c.bias, OC, mm_ref, &c, wd, no);
        check_grad(name, "dbias", db, db0, g, OC);
        free(g);
    }
    free(inp), free(wt), free(bias), free(out), free(w), free(c.inp), free(c.wt), free(c.bias);
    free(ref), free(wd), free(dinp), free(dwt), free(db), free(dinp0), free(dwt0), free(db0);
}

/* -------------------------------------------------------------- attention */

typedef struct {
    int B, T, C, NH;
    double *qkv;
} att_ctx;

static void att_ref(void *p, double *out) {
    att_ctx *c = p;
    int hs = c->C / c->NH, T = c->T, C = c->C;
    double scale = 1.0 / sqrt((double)hs);
    double *row = malloc(T * sizeof(double));
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->NH; h++)
            for (int i = 0; i < T; i++) {
                const double *q = c->qkv + ((size_t)b * T + i) * 3 * C + h * hs;
                double mx = -1e300;
                for (int j = 0; j <= i; j++) {
                    const double *k = c->qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    double s = 0;
                    for (int d = 0; d < hs; d++) s += q[d] * k[d];
                    row[j] = s * scale;
                    if (row[j] > mx) mx = row[j];
                }
                double sum = 0;
                for (int j = 0; j <= i; j++) sum += (row[j] = exp(row[j] - mx));
                double *o = out + ((size_t)b * T + i) * C + h * hs;
                for (int d = 0; d < hs; d++) o[d] = 0;
                for (int j = 0; j <= i; j++) {
                    const double *v = c->qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * hs;
                    for (int d = 0; d < hs; d++) o[d] += row[j] / sum * v[d];
                }
            }
    free(row);
}

static void test_attention(int B, int T, int C, int NH) {
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
    float *qkv = frand(nq, 1.5), *out = malloc(no * sizeof(float)), *w = frand(no, 1);
    float *att = malloc((size_t)B * NH * T * T * sizeof(float));
    att_ctx c = {B, T, C, NH, to_d(qkv, nq)};
    double *ref = malloc(no * sizeof(double)), *wd = to_d(w, no);
    char name[64];
    snprintf(name, sizeof name, "attention B=%d T=%d NH=%d", B, T, NH);
    attention_forward(out, att, qkv, B, T, C, NH);
    att_ref(&c, ref);
    check(name, "out", out, ref, no, 1e-5);
    float *dqkv = frand(nq, 1), *dqkv0 = fcopy(dqkv, nq);
    attention_backward(dqkv, w, qkv, att, B, T, C, NH);
    double *g = numgrad(c.qkv, nq, att_ref, &c, wd, no);
    check_grad(name, "dqkv", dqkv, dqkv0, g, nq);
    free(g), free(qkv), free(out), free(w), free(att), free(c.qkv), free(ref), free(wd);
    free(dqkv), free(dqkv0);
}

/* ------------------------------------------------------ gelu and residual */

static double gelu_d(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

typedef struct {
    size_t n;
    double *x, *y;
} ew_ctx;

static void gelu_ref(void *p, double *out) {
    ew_ctx *c = p;
    for (size_t i = 0; i < c->n; i++) out[i] = gelu_d(c->x[i]);
}

static void residual_ref(void *p, double *out) {
    ew_ctx *c = p;
    for (size_t i = 0; i < c->n; i++) out[i] = c->x[i] + c->y[i];
}

static void test_gelu_residual(void) {
    size_t n = 1003;
    float *x = frand(n, 6), *y = frand(n, 1), *out = malloc(n * sizeof(float)), *w = frand(n, 1);
    ew_ctx c = {n, to_d(x, n), to_d(y, n)};
    double *ref = malloc(n * sizeof(double)), *wd = to_d(w, n);
    gelu_forward(out, x, n);
    gelu_ref(&c, ref);
    check("gelu_forward", "out", out, ref, n, 1e-6);
    float *dx = frand(n, 1), *dx0 = fcopy(dx, n);
    gelu_backward(dx, x, w, n);
    double *g = numgrad(c.x, n, gelu_ref, &c, wd, n);
    check_grad("gelu_backward", "dinp", dx, dx0, g, n);
    free(g);

    residual_forward(out, x, y, n);
    residual_ref(&c, ref);
    check("residual_forward", "out", out, ref, n, 1e-7);
    float *dy = frand(n, 1), *dy0 = fcopy(dy, n);
    memcpy(dx, dx0, n * sizeof(float));
    residual_backward(dx, dy, w, n);
    g = numgrad(c.x, n, residual_ref, &c, wd, n);
    check_grad("residual_backward", "dinp1", dx, dx0, g, n);
    free(g);
    g = numgrad(c.y, n, residual_ref, &c, wd, n);
    check_grad("residual_backward", "dinp2", dy, dy0, g, n);
    free(g);
    free(x), free(y), free(out), free(w), free(c.x), free(c.y), free(ref), free(wd);
    free(dx), free(dx0), free(dy), free(dy0);
}

/* ---------------------------------------------------------- cross-entropy */

typedef struct {
    int N, V, Vp;
    const int *tg;
    double *logits;
} ce_ctx;

static void ce_ref(void *p, double *out) {
    ce_ctx *c = p;
    for (int r = 0; r < c->N; r++) {
        const double *x = c->logits + (size_t)r * c->Vp;
        double mx = -1e300, s = 0;
        for (int v = 0; v < c->V; v++) mx = x[v] > mx ? x[v] : mx;
        for (int v = 0; v < c->V; v++) s += exp(x[v] - mx);
        out[r] = mx + log(s) - x[c->tg[r]];
    }
}

static void test_crossentropy(void) {
    int B = 3, T = 4, V = 37, Vp = 48, N = B * T;
    int tg[12];
    for (int i = 0; i < N; i++) tg[i] = (i * 11) % V;
    size_t nl = (size_t)N * Vp;
    float *logits = frand(nl, 4), *losses = malloc(N * sizeof(float));
    float *lse = malloc(N * sizeof(float));
    for (int r = 0; r < N; r++) /* padding columns hold garbage that must be ignored */
        for (int v = V; v < Vp; v++) logits[(size_t)r * Vp + v] = 1e3f;
    ce_ctx c = {N, V, Vp, tg, to_d(logits, nl)};
    double *ref = malloc(N * sizeof(double));
    crossentropy_softmax_forward(losses, lse, logits, tg, B, T, V, Vp);
    ce_ref(&c, ref);
    check("crossentropy_softmax_forward", "losses", losses, ref, N, 1e-6);
    /* objective: dloss * sum(losses) */
    float dloss = 0.37f;
    double *wd = malloc(N * sizeof(double));
    for (int i = 0; i < N; i++) wd[i] = dloss;
    double *g = numgrad(c.logits, nl, ce_ref, &c, wd, N);
    float *dl = malloc(nl * sizeof(float)), *zero = calloc(nl, sizeof(float));
    crossentropy_softmax_backward(dl, logits, lse, tg, dloss, B, T, V, Vp);
    check_grad("crossentropy_softmax_backward", "dlogits", dl, zero, g, nl);
    /* in place on the logits buffer gives the same bits */
    crossentropy_softmax_backward(logits, logits, lse, tg, dloss, B, T, V, Vp);
    if (memcmp(logits, dl, nl * sizeof(float)) != 0) {
        printf("FAIL crossentropy_softmax_backward dlogits: in-place result differs\n");
        g_failures++;
    }
    free(g), free(logits), free(losses), free(lse), free(c.logits), free(ref), free(wd), free(dl);
    free(zero);
}

/* ------------------------------------------------------ adamw, grad norm */

static void test_adamw(void) {
    size_t n = 777;
    float *p = frand(n, 1), *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
    double *pd = to_d(p, n), *md = calloc(n, sizeof(double)), *vd = calloc(n, sizeof(double));
    float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    for (int t = 1; t <= 3; t++) {
        float *g = frand(n, 0.5);
        adamw_update(p, m, v, g, n, lr, b1, b2, eps, wd, t);
        for (size_t i = 0; i < n; i++) {
            pd[i] *= 1.0 - (double)lr * wd;
            md[i] = b1 * md[i] + (1.0 - b1) * g[i];
            vd[i] = b2 * vd[i] + (1.0 - b2) * (double)g[i] * g[i];
            double mh = md[i] / (1.0 - pow(b1, t)), vh = vd[i] / (1.0 - pow(b2, t));
            pd[i] -= lr * mh / (sqrt(vh) + eps);
        }
        free(g);
    }
    check("adamw_update", "params", p, pd, n, 1e-6);
    check("adamw_update", "m", m, md, n, 1e-6);
    check("adamw_update", "v", v, vd, n, 1e-5);
    free(p), free(m), free(v), free(pd), free(md), free(vd);

    size_t big = 100003; /* several norm blocks plus a tail */
    float *x = frand(big, 1);
    double want = 0;
    for (size_t i = 0; i < big; i++) want += (double)x[i] * x[i];
    double got = norm_squared(x, big);
    if (fabs(got - want) > 1e-12 * want) {
        printf("FAIL norm_squared: got %.17g want %.17g\n", got, want);
        g_failures++;
    } else {
        printf("ok   norm_squared             rel error %.2e\n", fabs(got - want) / want);
    }
    double *xd = to_d(x, big);
    for (size_t i = 0; i < big; i++) xd[i] *= 0.25;
    scale_inplace(x, big, 0.25f);
    check("scale_inplace", "x", x, xd, big, 1e-7);
    free(x), free(xd);
}

/* ------------------------------------------------------- element math */

static void test_element_math(void) {
    /* px_expf over its whole clamped range: within 3 ulp of exp. */
    double worst = 0;
    float worst_x = 0;
    for (float x = -87.0f; x <= 88.0f; x += 0.000731f) {
        double want = exp((double)x), rel = fabs((double)px_expf(x) - want) / want;
        if (rel > worst) {
            worst = rel;
            worst_x = x;
        }
    }
    if (worst > 3 * 5.97e-8) {
        printf("FAIL px_expf: relative error %.3e at x=%g\n", worst, worst_x);
        g_failures++;
    } else {
        printf("ok   px_expf                  max rel error %.2e (%.1f ulp)\n", worst,
               worst / 5.97e-8);
    }
    if (!isnan(px_expf(NAN))) {
        printf("FAIL px_expf: NaN does not propagate\n");
        g_failures++;
    }
    /* px_gelu and px_gelu_grad against double, absolute error scaled by |x|+1. */
    double eg = 0, egg = 0;
    for (float x = -12.0f; x <= 12.0f; x += 0.00113f) {
        double xd = x, h = 1e-6;
        double dg = (gelu_d(xd + h) - gelu_d(xd - h)) / (2 * h);
        double e1 = fabs(px_gelu(x) - gelu_d(xd)) / (fabs(xd) + 1);
        double e2 = fabs(px_gelu_grad(x) - dg) / (fabs(xd) + 1);
        eg = e1 > eg ? e1 : eg;
        egg = e2 > egg ? e2 : egg;
    }
    if (eg > 1e-6 || egg > 1e-6) {
        printf("FAIL px_gelu / px_gelu_grad: errors %.3e / %.3e\n", eg, egg);
        g_failures++;
    } else {
        printf("ok   px_gelu, px_gelu_grad    max scaled error %.2e, %.2e\n", eg, egg);
    }
}

/* ------------------------------------------------------- streaming copy */

/* copy_streaming at every float offset of source and destination within 16
 * bytes and lengths around its 16-float blocks: bitwise the source, and
 * the floats just before and after the destination untouched. */
static void test_copy_streaming(void) {
    enum { MAXN = 200, PAD = 8 };
    float *src = malloc((MAXN + 2 * PAD) * sizeof(float)), *dst = malloc((MAXN + 2 * PAD) * sizeof(float));
    const size_t lens[] = {0, 1, 3, 4, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 199};
    int bad = 0;
    for (int i = 0; i < MAXN + 2 * PAD; i++) src[i] = (float)i * 0.37f - 11.0f;
    for (int so = 0; so < 4 && !bad; so++)
        for (int d0 = 0; d0 < 4 && !bad; d0++)
            for (size_t k = 0; k < sizeof lens / sizeof lens[0] && !bad; k++) {
                size_t n = lens[k];
                memset(dst, 0x5a, (MAXN + 2 * PAD) * sizeof(float));
                float *d = dst + PAD + d0;
                copy_streaming(d, src + PAD + so, n);
                unsigned char guard[sizeof(float)];
                memset(guard, 0x5a, sizeof guard);
                if (memcmp(d, src + PAD + so, n * sizeof(float)) || memcmp(d - 1, guard, sizeof guard) ||
                    memcmp(d + n, guard, sizeof guard)) {
                    printf("FAIL copy_streaming: source offset %d, destination offset %d, %zu floats\n", so, d0, n);
                    bad = 1;
                }
            }
    g_failures += bad;
    if (!bad) printf("ok   copy_streaming           every alignment, lengths 0-199\n");
    free(src), free(dst);
}

int main(void) {
    test_element_math();
    test_copy_streaming();
    int threads[] = {1, 3};
    for (int k = 0; k < 2; k++) {
        omp_set_num_threads(threads[k]);
        printf("== %d thread(s)\n", threads[k]);
        test_encoder();
        test_layernorm(2, 3, 40);
        test_layernorm(1, 2, 5);
        test_matmul(2, 3, 8, 12, 1);   /* few rows: split by columns */
        test_matmul(4, 16, 9, 70, 1);  /* split by rows, odd sizes */
        test_matmul(4, 16, 9, 5, 0);
        test_attention(1, 5, 8, 2);
        test_attention(2, 67, 8, 2);   /* crosses a 64-row attention block */
        test_gelu_residual();
        test_crossentropy();
        test_adamw();
    }
    if (g_failures) {
        printf("test_ops: %d check(s) FAILED\n", g_failures);
        return 1;
    }
    printf("test_ops: all checks passed\n");
    return 0;
}
