/* Benchmark of block activation recomputation (px_gpt_set_recompute, the
 * worker's --recompute block): what it saves in activation memory and what
 * it costs in step time.
 *
 * For each run (a preset with a batch shape), two models from the same seed,
 * one recomputing, take the same forward and backward on the same batch,
 * alternately (off, on, off, on, ...), so both sides see the same machine in
 * the same process. Printed per run: each side's activation bytes
 * (px_gpt_activation_bytes: the model allocates all of them at once, so this
 * is its activation peak), the best and median milliseconds of a forward
 * plus backward, and the ratios on/off. Every step also checks that the two
 * sides give the same loss and gradients bit for bit: exit 1 if not, since
 * then the times compare different computations.
 *
 *   recompute [--runs small:4:256,gpt2-124m:1:256] [--steps 3] [--warmup 1] [--threads 1]
 *
 * OPENBLAS_CORETYPE, when set, applies to both sides alike (one process);
 * it is printed. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "ops.h"
#include "px_flags.h"
#include "px_time.h"

static const char *PROG = "recompute";

/* best and median of n values, sorted in place (n is a handful). */
static void best_median(double *x, int n, double *best, double *med) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && x[j - 1] > x[j]; j--) {
            double t = x[j];
            x[j] = x[j - 1];
            x[j - 1] = t;
        }
    *best = x[0];
    *med = n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* One forward+backward of m on (x, y); returns its milliseconds, the loss in *loss. */
static double step_ms(px_gpt_t *m, const int *x, const int *y, int B, int T, float *loss) {
    int64_t t0 = px_now_us();
    px_gpt_zero_grad(m);
    *loss = px_gpt_forward(m, x, y, B, T);
    px_gpt_backward(m, 1.0f);
    return (double)(px_now_us() - t0) / 1000.0;
}

/* One run: preset `name` at B x T. 0, or 1 when the two sides differ or a model cannot be made. */
static int run(const char *name, int B, int T, int steps, int warmup, int threads) {
    px_gpt_config_t cfg;
    if (px_gpt_config_preset(name, &cfg) != 0 || T < 1 || T > cfg.max_seq_len) {
        fprintf(stderr, "%s: --runs: '%s:%d:%d': expected a preset (%s) and 1 <= T <= its context\n", PROG, name, B, T,
                px_gpt_preset_names());
        return 1;
    }
    size_t bt = (size_t)B * (size_t)T;
    int *x = malloc(bt * sizeof(int)), *y = malloc(bt * sizeof(int));
    px_gpt_t *m[2] = {px_gpt_new(&cfg, 1), px_gpt_new(&cfg, 1)}; /* off, on */
    if (!x || !y || !m[0] || !m[1] || px_gpt_set_recompute(m[1], 1) != 0) {
        fprintf(stderr, "%s: %s: out of memory\n", PROG, name);
        return 1;
    }
    for (size_t i = 0; i < bt; i++) {
        x[i] = (int)((i * 7919 + 13) % (size_t)cfg.vocab_size);
        y[i] = (int)((i * 104729 + 7) % (size_t)cfg.vocab_size);
    }
    double *ms = calloc(2 * (size_t)steps, sizeof(double));
    int rc = 0;
    for (int s = 0; s < warmup + steps && rc == 0; s++) {
        float loss[2];
        for (int k = 0; k < 2; k++) {
            double t = step_ms(m[k], x, y, B, T, &loss[k]);
            if (s >= warmup) ms[k * steps + s - warmup] = t;
        }
        if (memcmp(&loss[0], &loss[1], sizeof(float)) != 0 ||
            memcmp(m[0]->grads, m[1]->grads, m[0]->num_params * sizeof(float)) != 0) {
            fprintf(stderr, "%s: %s: recomputation changed the loss (%.9g vs %.9g) or the gradients\n", PROG, name,
                    loss[0], loss[1]);
            rc = 1;
        }
    }
    if (rc == 0) {
        double best[2], med[2];
        for (int k = 0; k < 2; k++) best_median(ms + k * steps, steps, &best[k], &med[k]);
        size_t bytes[2] = {px_gpt_activation_bytes(m[0]), px_gpt_activation_bytes(m[1])};
        printf("model=%s B=%d T=%d threads=%d steps=%d act_mb_off=%.1f act_mb_on=%.1f act_ratio=%.3f "
               "ms_off=%.1f ms_on=%.1f time_ratio=%.3f median_ms_off=%.1f median_ms_on=%.1f median_ratio=%.3f "
               "bitwise_equal=1\n",
               name, B, T, threads, steps, bytes[0] / 1e6, bytes[1] / 1e6, (double)bytes[1] / (double)bytes[0],
               best[0], best[1], best[1] / best[0], med[0], med[1], med[1] / med[0]);
        fflush(stdout);
    }
    free(ms);
    free(x), free(y);
    px_gpt_destroy(&m[0]);
    px_gpt_destroy(&m[1]);
    return rc;
}

int main(int argc, char **argv) {
    const char *runs = "small:4:256,gpt2-124m:1:256";
    int steps = 3, warmup = 1, threads = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0) {
            printf("usage: %s [--runs small:4:256,gpt2-124m:1:256 (preset:B:T,...)] [--steps 3] [--warmup 1] "
                   "[--threads 1]\n", PROG);
            return 0;
        } else if (strcmp(a, "--runs") == 0) {
            runs = px_flag_str(PROG, a, v, 1024), i++;
        } else if (strcmp(a, "--steps") == 0) {
            steps = (int)px_flag_int(PROG, a, v, 1, 1000), i++;
        } else if (strcmp(a, "--warmup") == 0) {
            warmup = (int)px_flag_int(PROG, a, v, 0, 1000), i++;
        } else if (strcmp(a, "--threads") == 0) {
            threads = (int)px_flag_int(PROG, a, v, 1, 1024), i++;
        } else {
            px_flag_unknown(PROG, a);
        }
    }
    px_ops_init();
    omp_set_num_threads(threads);
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("bench=recompute openblas_coretype=%s (both sides: one process)\n", ct ? ct : "(unset: auto-detected)");
    char list[1024];
    snprintf(list, sizeof list, "%s", runs);
    int rc = 0;
    for (char *save, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char name[64];
        int B, T;
        if (sscanf(tok, "%63[^:]:%d:%d", name, &B, &T) != 3 || B < 1 || B > 4096) {
            fprintf(stderr, "%s: --runs: bad value '%s': expected preset:B:T, e.g. small:4:256\n", PROG, tok);
            return 2;
        }
        rc |= run(name, B, T, steps, warmup, threads);
    }
    return rc;
}
