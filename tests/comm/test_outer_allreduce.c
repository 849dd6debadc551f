/* px_outer_allreduce_mean (parallel/outer_codec.h) over Gloo, with 3 real
 * rank processes on loopback and a directory store (the comm tests'
 * harness, tests/lib/px_procs.h).
 *
 *   test_outer_allreduce [--small]
 *
 * For fp32, bf16 and int8, at n = 0, 1, 777 (with a NaN and an inf among
 * the inputs), 10^6, and 2 pieces + 12345 (int8 there with the caller's
 * scratch; --small leaves the big case out, for valgrind):
 *   - every rank ends with the same bits (the parent compares the ranks'
 *     hashes of their results);
 *   - bf16/int8: each rank recomputes the expected result itself (decode
 *     every rank's encoding in rank order onto -0, divide by 3) and gets the
 *     same bits, so pieces, padding and order are right;
 *   - the result is within the codec's error bound of the true mean
 *     (computed in double): bf16 2^-8 |x| per input, int8 scale/2 per input,
 *     fp32 float rounding; NaN/inf poison only their element (fp32, bf16)
 *     or their 256-float block (int8);
 *   - wire bytes are what the ring moves, the same on every rank, and for
 *     n = 10^6 printed as a fraction of fp32's.
 * Then, per rank alone: a 1-rank communicator gives decode(encode(x))
 * exactly and 0 wire bytes; and bad arguments are refused without
 * breaking the 3-rank communicator.
 *
 * Inputs are a pure function of (case, rank, index), so each rank can
 * regenerate its peers' inputs chunk by chunk without holding them.
 * Exit status 0 pass, 1 fail. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "outer_codec.h"
#include "px_comm.h"
#include "px_dir_store.h"
#include "px_procs.h"
#include "px_time.h"

#define RANKS 3
#define CHUNK ((size_t)1 << 16) /* verification chunk: a multiple of the int8 block */

#define CHECK PX_RANK_CHECK

typedef struct {
    const char *name;
    px_outer_dtype_t dt;
    size_t n;
    int poison;      /* rank 2 has a NaN at 300, rank 0 an inf at 700 */
    int own_scratch; /* pass a caller scratch instead of NULL */
    int big;         /* left out with --small */
} case_t;

#define BIG (2 * PX_OUTER_PIECE_FLOATS + 12345)
static const case_t cases[] = {
    {"fp32 n=0", PX_OUTER_FP32, 0, 0, 0, 0},
    {"bf16 n=0", PX_OUTER_BF16, 0, 0, 0, 0},
    {"int8 n=0", PX_OUTER_INT8, 0, 0, 0, 0},
    {"fp32 n=1", PX_OUTER_FP32, 1, 0, 0, 0},
    {"bf16 n=1", PX_OUTER_BF16, 1, 0, 0, 0},
    {"int8 n=1", PX_OUTER_INT8, 1, 0, 1, 0},
    {"fp32 n=777 nan/inf", PX_OUTER_FP32, 777, 1, 0, 0},
    {"bf16 n=777 nan/inf", PX_OUTER_BF16, 777, 1, 0, 0},
    {"int8 n=777 nan/inf", PX_OUTER_INT8, 777, 1, 0, 0},
    {"fp32 n=1e6", PX_OUTER_FP32, 1000000, 0, 0, 0},
    {"bf16 n=1e6", PX_OUTER_BF16, 1000000, 0, 0, 0},
    {"int8 n=1e6", PX_OUTER_INT8, 1000000, 0, 0, 0},
    {"fp32 n=2 pieces+12345", PX_OUTER_FP32, BIG, 0, 0, 1},
    {"bf16 n=2 pieces+12345", PX_OUTER_BF16, BIG, 0, 0, 1},
    {"int8 n=2 pieces+12345", PX_OUTER_INT8, BIG, 0, 1, 1},
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

typedef struct {
    px_dir_store_t store;
    int small;
    uint64_t hash[NCASES][RANKS];
    uint64_t wire[NCASES][RANKS];
    int64_t ms[NCASES][RANKS];
} shared_t;

static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Rank `rank`'s input element i in case ci: magnitudes from 2^-12 to 2^11
 * changing per (rank, block), so that ranks' int8 scales differ, and about
 * one block in 64 all zero. */
static float input(size_t ci, int rank, size_t i) {
    if (cases[ci].poison && rank == 2 && i == 300) return NAN;
    if (cases[ci].poison && rank == 0 && i == 700) return INFINITY;
    uint64_t hb = mix(ci * 0x100000001b3ull ^ (uint64_t)rank << 56 ^
                      (uint64_t)(i / PX_OUTER_INT8_BLOCK) * 0x9e3779b1ull);
    if ((hb & 63) == 5) return 0.0f;
    int e = (int)((hb >> 8) % 24) - 12;
    uint64_t h = mix(hb ^ (uint64_t)(i + 1) * 0xd6e8feb86659fd93ull);
    double u = (double)(h >> 11) / 9007199254740992.0 * 2 - 1;
    return (float)ldexp(u, e);
}

static uint64_t fnv1a(const void *p, size_t bytes) {
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < bytes; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

/* Bitwise against a local recomputation, and within the error bound of the
 * true mean, one chunk at a time. */
static int verify(size_t ci, const float *got) {
    const case_t *k = &cases[ci];
    size_t n = k->n;
    float *x = malloc(CHUNK * sizeof(float)), *ref = malloc(CHUNK * sizeof(float));
    double *mean = malloc(CHUNK * sizeof(double)), *bound = malloc(CHUNK * sizeof(double));
    unsigned char *enc = malloc(px_outer_encoded_bytes(PX_OUTER_FP32, CHUNK));
    CHECK(x && ref && mean && bound && enc, "out of memory");
    for (size_t c0 = 0; c0 < n; c0 += CHUNK) {
        size_t m = n - c0 < CHUNK ? n - c0 : CHUNK;
        for (size_t i = 0; i < m; i++) {
            ref[i] = -0.0f;
            mean[i] = 0;
            bound[i] = 0;
        }
        for (int r = 0; r < RANKS; r++) {
            for (size_t i = 0; i < m; i++) x[i] = input(ci, r, c0 + i);
            px_outer_encode(k->dt, x, m, enc);
            px_outer_decode_add(k->dt, enc, m, ref);
            for (size_t b = 0; b < m; b += PX_OUTER_INT8_BLOCK) {
                size_t e = b + PX_OUTER_INT8_BLOCK < m ? b + PX_OUTER_INT8_BLOCK : m;
                double absmax = 0;
                for (size_t i = b; i < e; i++)
                    if (fabs((double)x[i]) > absmax) absmax = fabs((double)x[i]);
                for (size_t i = b; i < e; i++) {
                    double a = fabs((double)x[i]), err;
                    if (k->dt == PX_OUTER_BF16)
                        err = a * 0x1p-8;
                    else if (k->dt == PX_OUTER_INT8)
                        err = absmax / 127 / 2 * (1 + 0x1p-14) + absmax * 0x1p-20;
                    else
                        err = 0;
                    mean[i] += (double)x[i] / RANKS;
                    bound[i] += (err + a * 0x1p-20) / RANKS;
                }
            }
        }
        for (size_t i = 0; i < m; i++) ref[i] /= (float)RANKS;
        for (size_t i = 0; i < m; i++) {
            size_t gi = c0 + i;
            if (k->dt != PX_OUTER_FP32)
                CHECK(bits_of(got[gi]) == bits_of(ref[i]),
                      "%s: element %zu is %08x (%.9g), recomputed %08x (%.9g)", k->name, gi,
                      bits_of(got[gi]), got[gi], bits_of(ref[i]), ref[i]);
            if (!isfinite(mean[i])) continue; /* the poison checks below */
            if (k->poison && k->dt == PX_OUTER_INT8 && gi >= 256 && gi < 768) continue;
            CHECK(isfinite(got[gi]) && fabs((double)got[gi] - mean[i]) <= bound[i],
                  "%s: element %zu is %.9g, true mean %.9g, bound %g", k->name, gi, got[gi],
                  mean[i], bound[i]);
        }
    }
    if (k->poison) {
        if (k->dt == PX_OUTER_INT8) {
            /* Blocks 1 (256..511, the NaN) and 2 (512..767, the inf) are
             * poisoned whole; blocks 0 and 3 (768..776) are not. */
            for (size_t i = 0; i < n; i++) {
                int poisoned = i >= 256 && i < 768;
                CHECK(poisoned ? isnan(got[i]) : isfinite(got[i]), "%s: element %zu of a %s block is %g",
                      k->name, i, poisoned ? "poisoned" : "clean", got[i]);
            }
        } else {
            CHECK(isnan(got[300]), "%s: NaN input gave %g", k->name, got[300]);
            CHECK(isinf(got[700]) && got[700] > 0, "%s: inf input gave %g", k->name, got[700]);
            for (size_t i = 0; i < n; i++)
                CHECK(i == 300 || i == 700 || isfinite(got[i]), "%s: element %zu is %g",
                      k->name, i, got[i]);
        }
    }
    free(x);
    free(ref);
    free(mean);
    free(bound);
    free(enc);
    return 0;
}

static int run_case(px_comm_t *c, shared_t *sh, size_t ci, int rank) {
    const case_t *k = &cases[ci];
    float *buf = malloc((k->n ? k->n : 1) * sizeof(float));
    CHECK(buf, "out of memory");
    for (size_t i = 0; i < k->n; i++) buf[i] = input(ci, rank, i);
    size_t sb = 0;
    void *scratch = NULL;
    if (k->own_scratch) {
        sb = px_outer_scratch_bytes(k->dt, k->n, RANKS);
        scratch = malloc(sb);
        CHECK(scratch, "out of memory");
    }
    char err[512] = "";
    uint64_t wire = 12345;
    int64_t t0 = px_now_ms();
    px_comm_status_t st =
        px_outer_allreduce_mean(c, buf, k->n, k->dt, scratch, sb, &wire, err, sizeof(err));
    sh->ms[ci][rank] = px_now_ms() - t0;
    CHECK(st == PX_COMM_OK, "%s: %s: %s", k->name, px_comm_status_str(st), err);
    sh->wire[ci][rank] = wire;
    sh->hash[ci][rank] = fnv1a(buf, k->n * sizeof(float));
    if (verify(ci, buf)) return 1;
    free(scratch);
    free(buf);
    return 0;
}

/* A 1-rank communicator: bf16/int8 give exactly decode(encode(x)), fp32
 * leaves x alone; nothing on the wire. */
static int solo(px_store_t *st, int rank) {
    char prefix[64], err[512];
    snprintf(prefix, sizeof(prefix), "outer/solo%d", rank);
    px_comm_t *c = px_comm_new_gloo(st, prefix, 0, 1, 10000, err, sizeof(err));
    CHECK(c, "1-rank communicator: %s", err);
    size_t n = 1000;
    float *x = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
    unsigned char *enc = malloc(n * sizeof(float));
    CHECK(x && want && enc, "out of memory");
    for (int d = PX_OUTER_FP32; d <= PX_OUTER_INT8; d++) {
        px_outer_dtype_t dt = (px_outer_dtype_t)d;
        for (size_t i = 0; i < n; i++) {
            x[i] = input(9, rank, i);
            want[i] = -0.0f;
        }
        x[5] = -0.0f;
        px_outer_encode(dt, x, n, enc);
        px_outer_decode_add(dt, enc, n, want);
        uint64_t wire = 1;
        px_comm_status_t s = px_outer_allreduce_mean(c, x, n, dt, NULL, 0, &wire, err, sizeof(err));
        CHECK(s == PX_COMM_OK, "1-rank %s: %s: %s", px_outer_dtype_name(dt),
              px_comm_status_str(s), err);
        CHECK(wire == 0, "1-rank %s: %llu wire bytes", px_outer_dtype_name(dt),
              (unsigned long long)wire);
        for (size_t i = 0; i < n; i++)
            CHECK(bits_of(x[i]) == bits_of(want[i]), "1-rank %s element %zu: %08x, want %08x",
                  px_outer_dtype_name(dt), i, bits_of(x[i]), bits_of(want[i]));
    }
    free(x);
    free(want);
    free(enc);
    px_comm_destroy(&c);
    return 0;
}

/* Refused locally, before anything is sent: the communicator stays healthy. */
static int bad_args(px_comm_t *c) {
    char err[512];
    float v[300];
    for (int i = 0; i < 300; i++) v[i] = 1.0f;
    size_t need = px_outer_scratch_bytes(PX_OUTER_INT8, 300, RANKS);
    float *scratch = malloc(need + sizeof(float));
    CHECK(scratch, "out of memory");
    uint64_t wire;
    CHECK(px_outer_allreduce_mean(c, v, 300, PX_OUTER_INT8, scratch, need - 1, &wire, err,
                                  sizeof(err)) == PX_COMM_ERROR &&
              strstr(err, "scratch"),
          "short scratch accepted (%s)", err);
    CHECK(px_outer_allreduce_mean(c, v, 300, PX_OUTER_INT8, (char *)scratch + 1, need, &wire,
                                  err, sizeof(err)) == PX_COMM_ERROR &&
              strstr(err, "aligned"),
          "misaligned scratch accepted (%s)", err);
    CHECK(px_outer_allreduce_mean(c, v, 300, (px_outer_dtype_t)9, NULL, 0, &wire, err,
                                  sizeof(err)) == PX_COMM_ERROR && strstr(err, "dtype"),
          "dtype 9 accepted (%s)", err);
    CHECK(px_outer_allreduce_mean(c, NULL, 300, PX_OUTER_BF16, NULL, 0, &wire, err,
                                  sizeof(err)) == PX_COMM_ERROR,
          "NULL buffer accepted");
    CHECK(px_outer_allreduce_mean(NULL, v, 300, PX_OUTER_BF16, NULL, 0, NULL, NULL, 0) ==
              PX_COMM_ERROR,
          "NULL communicator accepted");
    CHECK(px_comm_health(c) == PX_COMM_OK, "a refused call broke the communicator");
    /* Still usable, and a right-sized scratch is fine. */
    CHECK(px_outer_allreduce_mean(c, v, 300, PX_OUTER_INT8, scratch, need, NULL, err,
                                  sizeof(err)) == PX_COMM_OK,
          "after refusals: %s", err);
    for (int i = 0; i < 300; i++) CHECK(v[i] == 1.0f, "mean of ones: element %d is %g", i, v[i]);
    free(scratch);
    return 0;
}

static int rank_main(int rank, int size, void *arg) {
    shared_t *sh = arg;
    px_store_t st = px_dir_store(&sh->store);
    char err[512];
    px_comm_t *c = px_comm_new_gloo(&st, "outer/dp", rank, size, 60000, err, sizeof(err));
    CHECK(c, "px_comm_new_gloo: %s", err);
    for (size_t ci = 0; ci < NCASES; ci++) {
        if (cases[ci].big && sh->small) continue;
        if (run_case(c, sh, ci, rank)) return 1;
    }
    if (bad_args(c)) return 1;
    CHECK(px_comm_barrier(c) == PX_COMM_OK, "final barrier: %s", px_comm_last_error(c));
    px_comm_destroy(&c);
    return solo(&st, rank);
}

/* What one rank sends, computed here from the definitions (ring
 * all-reduce / ring all-gather), not from the library's code. */
static uint64_t expected_wire(const case_t *k) {
    if (k->dt == PX_OUTER_FP32) return 2ull * (RANKS - 1) * 4 * k->n / RANKS;
    uint64_t total = 0;
    for (size_t off = 0; off < k->n; off += PX_OUTER_PIECE_FLOATS) {
        size_t m = k->n - off < PX_OUTER_PIECE_FLOATS ? k->n - off : PX_OUTER_PIECE_FLOATS;
        size_t bytes = k->dt == PX_OUTER_BF16 ? 2 * m : m + 4 * ((m + 255) / 256);
        total += (RANKS - 1) * ((bytes + 3) / 4 * 4);
    }
    return total;
}

int main(int argc, char **argv) {
    shared_t *sh = px_procs_shared(sizeof(*sh));
    sh->small = argc > 1 && !strcmp(argv[1], "--small");
    char dir[200];
    snprintf(dir, sizeof(dir), "/tmp/px_comm_outer_%d", (int)getpid());
    if (px_dir_store_init(&sh->store, dir) != 0) {
        fprintf(stderr, "cannot create store directory %s\n", dir);
        return 1;
    }
    pid_t pids[RANKS];
    int codes[RANKS];
    int64_t t0 = px_now_ms();
    if (px_procs_spawn(RANKS, rank_main, sh, pids) != 0) return 1;
    int bad = px_procs_wait(RANKS, pids, t0 + 240000, codes, -1);
    px_dir_store_remove(&sh->store);

    /* ms: rank 0's call, including waiting for peers still checking the
     * previous case; not a benchmark. */
    printf("%-24s %14s %14s %8s\n", "case (3 ranks)", "wire bytes", "expected", "ms");
    uint64_t w1e6[3] = {0, 0, 0};
    for (size_t ci = 0; ci < NCASES && !bad; ci++) {
        const case_t *k = &cases[ci];
        if (k->big && sh->small) continue;
        for (int r = 1; r < RANKS; r++) {
            if (sh->hash[ci][r] != sh->hash[ci][0]) {
                fprintf(stderr, "FAIL %s: rank %d's result differs from rank 0's (%016llx %016llx)\n",
                        k->name, r, (unsigned long long)sh->hash[ci][r],
                        (unsigned long long)sh->hash[ci][0]);
                bad++;
            }
            if (sh->wire[ci][r] != sh->wire[ci][0]) {
                fprintf(stderr, "FAIL %s: wire bytes differ between ranks\n", k->name);
                bad++;
            }
        }
        uint64_t want = expected_wire(k);
        printf("%-24s %14llu %14llu %8lld\n", k->name, (unsigned long long)sh->wire[ci][0],
               (unsigned long long)want, (long long)sh->ms[ci][0]);
        if (sh->wire[ci][0] != want) {
            fprintf(stderr, "FAIL %s: %llu wire bytes, expected %llu\n", k->name,
                    (unsigned long long)sh->wire[ci][0], (unsigned long long)want);
            bad++;
        }
        if (k->n == 1000000) w1e6[k->dt] = sh->wire[ci][0];
    }
    if (!bad) {
        double rb = (double)w1e6[PX_OUTER_BF16] / (double)w1e6[PX_OUTER_FP32];
        double ri = (double)w1e6[PX_OUTER_INT8] / (double)w1e6[PX_OUTER_FP32];
        printf("n=1e6, 3 ranks: bf16 sends %.3f x fp32's bytes, int8 %.3f x (the all-gather "
               "sends (R-1) encodings, the fp32 ring all-reduce 2(R-1)/R x 4n)\n",
               rb, ri);
        /* The all-gather's volume grows with R where the ring all-reduce's
         * does not: at 3 ranks int8 sends 0.381 x fp32's bytes. */
        if (!(ri < 0.4 && rb < 0.8)) {
            fprintf(stderr, "FAIL wire bytes: int8 %.3f, bf16 %.3f of fp32's\n", ri, rb);
            bad++;
        }
    }
    printf("outer allreduce: %s in %lld ms (exit codes %d %d %d)\n", bad ? "FAIL" : "ok",
           (long long)(px_now_ms() - t0), codes[0], codes[1], codes[2]);
    return bad ? 1 : 0;
}
