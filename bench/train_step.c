/* Benchmark of one CPU training step (forward, backward, gradient clipping,
 * AdamW) of a preset (default `small`, B=8, T = its context), at each thread
 * count asked for. Reports tokens/s and achieved FLOP/s (px_gpt_flops_per_step:
 * matmuls plus the causal half of attention), next to the measured rate of one
 * large cblas_sgemm on the same threads and the CPU's FMA peak on as many
 * threads (a register-only loop), and prints both fractions.
 *
 * The sgemm reference is the better of two ways to use n threads: OpenBLAS's
 * own threading, and n OpenMP threads each running single-threaded sgemm on a
 * block of rows (what the model's matmuls do). Taking the better one keeps the
 * fraction honest. Reference and step are measured alternately, best of each.
 *
 * --dump DIR writes the model (llm.c file) and the batch (int32 inputs then
 * targets) so bench/train_step.py can time PyTorch on exactly the same step;
 * bench/train_step.sh runs both and prints the ratio.
 *   train_step [--model small] [--batch 8] [--seq T] [--threads 1,2] [--steps 5]
 *              [--warmup 2] [--sgemm 2048] [--dump DIR] */
#include <cblas.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "gpt.h"
#include "llmc.h"
#include "ops.h"
#include "px_err.h"
#include "px_flags.h"
#include "px_time.h"

static const char *PROG = "train_step";

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One n x n x n sgemm on `threads` threads; returns GFLOP/s. openblas: use
 * OpenBLAS's own threading; else OpenMP row blocks with single-threaded sgemm. */
static double sgemm_once(int n, int threads, int openblas, const float *a, const float *b,
                         float *c) {
    double flops = 2.0 * n * (double)n * n;
    openblas_set_num_threads(openblas ? threads : 1);
    int64_t t0 = px_now_us();
    if (openblas) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    } else {
#pragma omp parallel num_threads(threads)
        {
            int nt = omp_get_num_threads(), id = omp_get_thread_num();
            int lo = (int)((long)n * id / nt), hi = (int)((long)n * (id + 1) / nt);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, hi - lo, n, n, 1.0f,
                        a + (size_t)lo * n, n, b, n, 0.0f, c + (size_t)lo * n, n);
        }
    }
    double r = flops / ((double)(px_now_us() - t0) * 1e3);
    openblas_set_num_threads(1);
    return r;
}

/* The FMA peak of `threads` threads in GFLOP/s: each thread runs a loop of
 * independent fused multiply-adds that never leaves registers, 12 chains deep
 * (more than an FMA's latency times the units that issue it on current x86),
 * on the widest vectors the CPU has. No float32 training step can run faster
 * than this: every matmul multiply-add is one FMA lane. */
#define FMA_CHAINS 12
#define FMA_ITERS 4000000L

__attribute__((target("avx512f"))) static float fma_loop512(float seed) {
    __m512 acc[FMA_CHAINS], a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(seed * 1e-7f);
    for (int j = 0; j < FMA_CHAINS; j++) acc[j] = _mm512_set1_ps(seed + (float)j);
    for (long i = 0; i < FMA_ITERS; i++)
#pragma GCC unroll 12 /* the chains in registers, not in memory */
        for (int j = 0; j < FMA_CHAINS; j++) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
    float s = 0;
    for (int j = 0; j < FMA_CHAINS; j++) s += _mm512_reduce_add_ps(acc[j]);
    return s;
}

__attribute__((target("avx2,fma"))) static float fma_loop256(float seed) {
    __m256 acc[FMA_CHAINS], a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(seed * 1e-7f);
    for (int j = 0; j < FMA_CHAINS; j++) acc[j] = _mm256_set1_ps(seed + (float)j);
    for (long i = 0; i < FMA_ITERS; i++)
#pragma GCC unroll 12
        for (int j = 0; j < FMA_CHAINS; j++) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
    float lanes[8], s = 0;
    for (int j = 0; j < FMA_CHAINS; j++) {
        _mm256_storeu_ps(lanes, acc[j]);
        for (int k = 0; k < 8; k++) s += lanes[k];
    }
    return s;
}

/* Returns 0 where the CPU has no FMA. */
static double fma_peak(int threads) {
    int wide = __builtin_cpu_supports("avx512f");
    if (!wide && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return 0;
    double flops = (double)threads * FMA_ITERS * FMA_CHAINS * (wide ? 16 : 8) * 2.0;
    volatile float sink = 0;
    int64_t t0 = px_now_us();
#pragma omp parallel num_threads(threads)
    {
        float seed = (float)(omp_get_thread_num() + 1);
        float r = wide ? fma_loop512(seed) : fma_loop256(seed);
#pragma omp atomic
        sink += r;
    }
    (void)sink;
    return flops / ((double)(px_now_us() - t0) * 1e3);
}

static void make_batch(int *x, int *y, int n, int V) {
    uint64_t s = 0x1234567;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (int)((s >> 33) % (uint64_t)V);
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        y[i] = (int)((s >> 33) % (uint64_t)V);
    }
}

int main(int argc, char **argv) {
    const char *model_name = "small", *dump = NULL, *thread_list = "1,2";
    int B = 8, T = 0, steps = 5, warmup = 2, sgemm_n = 2048;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0) {
            printf("usage: %s [--model small] [--batch 8] [--seq T] [--threads 1,2] [--steps 5] "
                   "[--warmup 2] [--sgemm 2048] [--dump DIR]\n", PROG);
            return 0;
        } else if (strcmp(a, "--model") == 0) {
            model_name = px_flag_str(PROG, a, v, 64), i++;
        } else if (strcmp(a, "--batch") == 0) {
            B = (int)px_flag_int(PROG, a, v, 1, 4096), i++;
        } else if (strcmp(a, "--seq") == 0) {
            T = (int)px_flag_int(PROG, a, v, 1, 65536), i++;
        } else if (strcmp(a, "--threads") == 0) {
            thread_list = px_flag_str(PROG, a, v, 256), i++;
        } else if (strcmp(a, "--steps") == 0) {
            steps = (int)px_flag_int(PROG, a, v, 1, 10000), i++;
        } else if (strcmp(a, "--warmup") == 0) {
            warmup = (int)px_flag_int(PROG, a, v, 0, 10000), i++;
        } else if (strcmp(a, "--sgemm") == 0) {
            sgemm_n = (int)px_flag_int(PROG, a, v, 64, 16384), i++;
        } else if (strcmp(a, "--dump") == 0) {
            dump = px_flag_str(PROG, a, v, 4096), i++;
        } else {
            px_flag_unknown(PROG, a);
        }
    }
    px_gpt_config_t cfg;
    if (px_gpt_config_preset(model_name, &cfg) != 0) {
        fprintf(stderr, "%s: --model: bad value '%s': expected one of %s\n", PROG, model_name,
                px_gpt_preset_names());
        return 2;
    }
    if (T == 0) T = cfg.max_seq_len;
    if (T > cfg.max_seq_len) {
        fprintf(stderr, "%s: --seq: bad value %d: at most %d\n", PROG, T, cfg.max_seq_len);
        return 2;
    }
    px_ops_init();
    size_t bt = (size_t)B * T;
    int *x = malloc(bt * sizeof(int)), *y = malloc(bt * sizeof(int));
    make_batch(x, y, (int)bt, cfg.vocab_size);
    double flops = px_gpt_flops_per_step(&cfg, B, T);
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("bench=train_step impl=phalanx model=%s B=%d T=%d flops_per_step=%.3e "
           "openblas_coretype=%s openblas_config=\"%s\"\n",
           model_name, B, T, flops, ct ? ct : "(unset: auto-detected)", openblas_get_config());

    if (dump) {
        mkdir(dump, 0777);
        px_gpt_t *m = px_gpt_new(&cfg, 1);
        char path[4200], err[PX_ERRLEN];
        snprintf(path, sizeof path, "%s/model.bin", dump);
        if (px_gpt_save(m, path, err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", PROG, err);
            return 1;
        }
        snprintf(path, sizeof path, "%s/batch.bin", dump);
        FILE *f = fopen(path, "wb");
        int32_t hdr[2] = {B, T};
        if (!f || fwrite(hdr, sizeof hdr, 1, f) != 1 || fwrite(x, sizeof(int), bt, f) != bt ||
            fwrite(y, sizeof(int), bt, f) != bt || fclose(f) != 0) {
            fprintf(stderr, "%s: cannot write %s\n", PROG, path);
            return 1;
        }
        px_gpt_destroy(&m);
    }

    char list[256];
    snprintf(list, sizeof list, "%s", thread_list);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int threads = (int)px_flag_int(PROG, "--threads", tok, 1, 1024);
        omp_set_num_threads(threads);
        size_t nn = (size_t)sgemm_n * sgemm_n;
        float *ga = malloc(nn * sizeof(float)), *gb = malloc(nn * sizeof(float));
        float *gc = malloc(nn * sizeof(float));
        for (size_t i = 0; i < nn; i++) {
            ga[i] = (float)((i * 7) % 13) * 0.01f;
            gb[i] = (float)((i * 5) % 11) * 0.01f;
        }
        /* Steps and sgemm references alternate, so both see the same machine;
         * the best of each is kept (on a shared machine the best is the least
         * disturbed). CPU time per step is kept too: it does not count time
         * spent descheduled, so at 1 thread it is a load-independent check. */
        px_gpt_t *m = px_gpt_new(&cfg, 1);
        double *ms = malloc(sizeof(double) * (size_t)steps);
        double blas_rate = 0, omp_rate = 0, peak = 0, best_cpu = 1e30;
        float first_loss = 0;
        for (int s = 0; s < warmup + steps; s++) {
            double r1 = sgemm_once(sgemm_n, threads, 1, ga, gb, gc);
            double r2 = sgemm_once(sgemm_n, threads, 0, ga, gb, gc);
            double r3 = fma_peak(threads);
            double c0 = cpu_ms();
            int64_t t0 = px_now_us();
            px_gpt_zero_grad(m);
            float loss = px_gpt_forward(m, x, y, B, T);
            px_gpt_backward(m, 1.0f);
            px_gpt_clip_grads(m, 1.0f);
            px_gpt_adamw_step(m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, s + 1);
            double dt = (double)(px_now_us() - t0) / 1000.0, dc = cpu_ms() - c0;
            if (s == 0) first_loss = loss;
            if (s >= warmup) {
                ms[s - warmup] = dt;
                best_cpu = fmin(best_cpu, dc);
                blas_rate = fmax(blas_rate, r1);
                omp_rate = fmax(omp_rate, r2);
                peak = fmax(peak, r3);
            }
        }
        double ref = fmax(blas_rate, omp_rate);
        double med = median(ms, steps), best = ms[0]; /* sorted by median() */
        double gflops = flops / (best * 1e6);
        printf("impl=phalanx threads=%d cores=%d ms_per_step=%.1f median_ms=%.1f cpu_ms=%.1f "
               "tok_s=%.0f gflops=%.1f sgemm_gflops=%.1f (openblas_threads=%.1f "
               "omp_blocks=%.1f, n=%d) fraction_of_sgemm=%.2f fma_peak_gflops=%.1f "
               "fraction_of_peak=%.2f first_loss=%.6f\n",
               threads, threads, best, med, best_cpu, (double)bt / (best / 1000.0), gflops, ref,
               blas_rate, omp_rate, sgemm_n, gflops / ref, peak, peak > 0 ? gflops / peak : 0.0,
               first_loss);
        free(ms);
        free(ga), free(gb), free(gc);
        px_gpt_destroy(&m);
    }
    free(x), free(y);
    return 0;
}
