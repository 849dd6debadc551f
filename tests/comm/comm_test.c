/* px_comm tests: real rank processes on loopback, real signals.
 *
 *   comm_test basic [--small]  3 ranks: every operation gives exact values
 *                              (integer-valued floats, so sums are exact),
 *                              bad arguments are refused, size-1 works
 *   comm_test kill             SIGKILL a rank mid-allreduce: every survivor
 *                              gets PX_COMM_PEER_FAILED well under the timeout,
 *                              then the survivors re-form (new prefix, n-1)
 *   comm_test stop             SIGSTOP a rank: survivors get PX_COMM_TIMEOUT at
 *                              about the timeout; SIGCONT, the rank fails too
 *   comm_test abort            px_comm_abort from another thread ends a blocked
 *                              allreduce with PX_COMM_ABORTED at once, and the
 *                              peer's next operation fails with PEER_FAILED
 *   comm_test rendezvous       reused prefix fails fast; a missing rank times
 *                              out in about the timeout; a late rank is waited for
 *   comm_test mismatch         ranks that disagree on a size, an operation or a
 *                              root get PX_COMM_TIMEOUT, and nobody crashes
 *   comm_test shutdown         ranks that finish an operation and destroy the
 *                              communicator at once never fail a slower rank's
 *                              same operation (40 rounds, seeded jitter)
 *   comm_test pace             with a rate limit, an allreduce and a message
 *                              of known size take at least bytes / rate on
 *                              both ranks (a lower bound only); an abort
 *                              during the paced sleep ends it promptly with
 *                              PX_COMM_ABORTED
 *   comm_test nccl             without a GPU px_comm_new_nccl returns NULL with
 *                              a clear message (with one: a 1-rank smoke test)
 *
 * Random choices (which rank dies, when) come from a fixed seed, printed with
 * every failure; PX_TEST_SEED overrides it. Every wait has a deadline: a hung
 * rank is killed and fails the test. Latency bounds ("promptly") are far
 * below the timeouts yet loose enough for a loaded 2-core machine; under
 * valgrind ctest sets PX_TEST_SLOW (a multiplier, e.g. 4) to widen them.
 * Exit status 0 pass, 1 fail. */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mesh_comm.h"
#include "px_comm.h"
#include "px_dir_store.h"
#include "px_procs.h"
#include "px_time.h"

static unsigned g_seed = 20240611u;
static int g_rank = -1;
static int g_slow = 1; /* PX_TEST_SLOW: multiplies latency bounds */

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "FAIL rank=%d seed=%u %s:%d: ", g_rank, g_seed, __FILE__,      \
                    __LINE__);                                                             \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fputc('\n', stderr);                                                           \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

#define CHECK_OK(c, call)                                                                  \
    do {                                                                                   \
        px_comm_status_t st_ = (call);                                                     \
        CHECK(st_ == PX_COMM_OK, "%s -> %s: %s", #call, px_comm_status_str(st_),           \
              px_comm_last_error(c));                                                      \
    } while (0)

/* xorshift32: tiny, seeded, the same on every run. */
static unsigned rnd(unsigned *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* A generator state for `stream` under the test seed. Mixed first, because
 * xorshift's first outputs for small seeds (1, 2, 3...) are alike. */
static unsigned rnd_init(unsigned stream) {
    unsigned s = (g_seed ^ 0x9e3779b9u) * 2654435761u + stream * 40503u + 1u;
    if (!s) s = 1;
    for (int i = 0; i < 8; i++) rnd(&s);
    return s;
}

static void store_dir(px_dir_store_t *s, const char *test) {
    char dir[200];
    snprintf(dir, sizeof(dir), "/tmp/px_comm_%s_%d", test, (int)getpid());
    if (px_dir_store_init(s, dir) != 0) {
        fprintf(stderr, "cannot create store directory %s\n", dir);
        exit(1);
    }
}

/* ---------------------------------------------------------------- basic */

typedef struct {
    px_dir_store_t store;
    int small;
} basic_arg_t;

static int check_floats(const float *got, const float *want, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        CHECK(got[i] == want[i], "%s: element %zu is %g, expected %g", what, i, got[i], want[i]);
    return 0;
}

static int basic_collectives(px_comm_t *c, int rank, int size, int small) {
    const float tri = (float)(size * (size - 1) / 2); /* sum of ranks */
    const float tri1 = (float)(size * (size + 1) / 2); /* sum of rank+1 */
    size_t n = small ? 1001 : 100003; /* not a multiple of size: uneven ring chunks */
    float *buf = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));

    for (size_t i = 0; i < n; i++) buf[i] = (float)(rank * 1000 + (int)(i % 997));
    for (size_t i = 0; i < n; i++) want[i] = (float)(size * (int)(i % 997)) + 1000.0f * tri;
    CHECK_OK(c, px_comm_allreduce_sum_f32(c, buf, n));
    if (check_floats(buf, want, n, "allreduce sum")) return 1;

    for (size_t i = 0; i < n; i++) buf[i] = (float)(rank * 10 + (int)(i % 7));
    CHECK_OK(c, px_comm_allreduce_f32(c, buf, n, PX_COMM_MAX));
    for (size_t i = 0; i < n; i++) want[i] = (float)((size - 1) * 10 + (int)(i % 7));
    if (check_floats(buf, want, n, "allreduce max")) return 1;
    for (size_t i = 0; i < n; i++) buf[i] = (float)(rank * 10 + (int)(i % 7));
    CHECK_OK(c, px_comm_allreduce_f32(c, buf, n, PX_COMM_MIN));
    for (size_t i = 0; i < n; i++) want[i] = (float)(i % 7);
    if (check_floats(buf, want, n, "allreduce min")) return 1;
    free(buf);
    free(want);

    if (!small) { /* 16 MiB: many ring segments */
        size_t big = 4u << 20;
        float *b = malloc(big * sizeof(float));
        for (size_t i = 0; i < big; i++) b[i] = (float)(rank + 1) + (float)(i & 1023);
        CHECK_OK(c, px_comm_allreduce_sum_f32(c, b, big));
        for (size_t i = 0; i < big; i++)
            CHECK(b[i] == tri1 + (float)size * (float)(i & 1023), "big allreduce element %zu: %g",
                  i, b[i]);
        free(b);
    }

    size_t k = small ? 257 : 10007;
    float *in = malloc((size_t)size * k * sizeof(float)), *out = malloc(k * sizeof(float));
    for (size_t j = 0; j < (size_t)size * k; j++) in[j] = (float)((rank + 1) * (int)(j % 1009));
    CHECK_OK(c, px_comm_reduce_scatter_sum_f32(c, in, out, k));
    for (size_t i = 0; i < k; i++)
        CHECK(out[i] == tri1 * (float)(((size_t)rank * k + i) % 1009),
              "reduce_scatter element %zu: %g", i, out[i]);

    float *gat = malloc((size_t)size * k * sizeof(float));
    for (size_t i = 0; i < k; i++) out[i] = (float)(rank * 100000 + (int)i);
    CHECK_OK(c, px_comm_allgather_f32(c, out, gat, k));
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < k; i++)
            CHECK(gat[(size_t)r * k + i] == (float)(r * 100000 + (int)i),
                  "allgather rank %d element %zu: %g", r, i, gat[(size_t)r * k + i]);
    memset(gat, 0, (size_t)size * k * sizeof(float)); /* in place: input in our slot */
    for (size_t i = 0; i < k; i++) gat[(size_t)rank * k + i] = (float)(rank * 7 + (int)i);
    CHECK_OK(c, px_comm_allgather_f32(c, gat + (size_t)rank * k, gat, k));
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < k; i++)
            CHECK(gat[(size_t)r * k + i] == (float)(r * 7 + (int)i),
                  "in-place allgather rank %d element %zu", r, i);
    free(in);
    free(out);
    free(gat);
    return 0;
}

static int basic_bytes(px_comm_t *c, int rank, int size, int small) {
    for (int root = 0; root < size; root++) {
        size_t nb = 12345;
        unsigned char *b = calloc(nb, 1);
        if (rank == root)
            for (size_t i = 0; i < nb; i++) b[i] = (unsigned char)(i * 7 + (size_t)root);
        CHECK_OK(c, px_comm_broadcast(c, b, nb, root));
        for (size_t i = 0; i < nb; i++)
            CHECK(b[i] == (unsigned char)(i * 7 + (size_t)root), "broadcast root %d byte %zu",
                  root, i);
        free(b);
    }

    /* Send/recv around the ring: 0 -> 1 -> 2 -> 0, in that order, because a
     * send returns only once its receiver is there. */
    size_t nb = small ? 1000 : (1u << 20);
    unsigned char *msg = malloc(nb), *got = malloc(nb);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    for (size_t i = 0; i < nb; i++) msg[i] = (unsigned char)(i + (size_t)rank * 31);
    if (rank == 0) {
        CHECK_OK(c, px_comm_send(c, msg, nb, right, 5));
        CHECK_OK(c, px_comm_recv(c, got, nb, left, 5));
    } else {
        CHECK_OK(c, px_comm_recv(c, got, nb, left, 5));
        CHECK_OK(c, px_comm_send(c, msg, nb, right, 5));
    }
    for (size_t i = 0; i < nb; i++)
        CHECK(got[i] == (unsigned char)(i + (size_t)left * 31), "recv byte %zu from %d", i, left);
    /* Two tags in a row between the same pair keep their order. */
    if (rank == 0) {
        int a = 11, b = 22;
        CHECK_OK(c, px_comm_send(c, &a, sizeof(a), 1, 1));
        CHECK_OK(c, px_comm_send(c, &b, sizeof(b), 1, 2));
    } else if (rank == 1) {
        int a = 0, b = 0;
        CHECK_OK(c, px_comm_recv(c, &a, sizeof(a), 0, 1));
        CHECK_OK(c, px_comm_recv(c, &b, sizeof(b), 0, 2));
        CHECK(a == 11 && b == 22, "tagged recv got %d %d", a, b);
    }
    free(msg);
    free(got);
    CHECK_OK(c, px_comm_barrier(c));
    return 0;
}

static int basic_edges(px_comm_t *c, int rank, int size) {
    /* Empty operations succeed without talking to anyone. */
    CHECK_OK(c, px_comm_allreduce_sum_f32(c, NULL, 0));
    CHECK_OK(c, px_comm_reduce_scatter_sum_f32(c, NULL, NULL, 0));
    CHECK_OK(c, px_comm_allgather_f32(c, NULL, NULL, 0));
    CHECK_OK(c, px_comm_broadcast(c, NULL, 0, 0));
    /* Bad arguments: refused locally, the communicator stays usable. */
    int x = 0;
    CHECK(px_comm_send(c, &x, sizeof(x), rank, 0) == PX_COMM_ERROR, "send to self accepted");
    CHECK(strstr(px_comm_last_error(c), "peer"), "error text: %s", px_comm_last_error(c));
    CHECK(px_comm_recv(c, &x, sizeof(x), size, 0) == PX_COMM_ERROR, "recv from rank=size");
    CHECK(px_comm_send(c, &x, sizeof(x), (rank + 1) % size, -1) == PX_COMM_ERROR, "tag -1");
    CHECK(px_comm_broadcast(c, &x, sizeof(x), size) == PX_COMM_ERROR, "root out of range");
    CHECK(px_comm_allreduce_sum_f32(c, NULL, 4) == PX_COMM_ERROR, "NULL buffer accepted");
    CHECK(px_comm_health(c) == PX_COMM_OK, "bad argument broke the communicator");
    float v = 1.0f;
    CHECK_OK(c, px_comm_allreduce_sum_f32(c, &v, 1));
    CHECK(v == (float)size, "allreduce after refused calls: %g", v);
    CHECK(px_comm_allreduce_sum_f32(NULL, &v, 1) == PX_COMM_ERROR, "NULL communicator");
    return 0;
}

static int basic_single(px_store_t *st, int rank) {
    char prefix[64], err[512];
    snprintf(prefix, sizeof(prefix), "basic/solo%d", rank);
    px_comm_t *c = px_comm_new_gloo(st, prefix, 0, 1, 5000, err, sizeof(err));
    CHECK(c, "size-1 communicator: %s", err);
    float v[3] = {1, 2, 3}, out[3] = {0};
    CHECK_OK(c, px_comm_allreduce_sum_f32(c, v, 3));
    CHECK(v[0] == 1 && v[2] == 3, "size-1 allreduce changed data");
    CHECK_OK(c, px_comm_reduce_scatter_sum_f32(c, v, out, 3));
    CHECK(out[1] == 2, "size-1 reduce_scatter");
    CHECK_OK(c, px_comm_allgather_f32(c, v, out, 3));
    CHECK_OK(c, px_comm_broadcast(c, v, sizeof(v), 0));
    CHECK_OK(c, px_comm_barrier(c));
    px_comm_abort(c);
    CHECK(px_comm_barrier(c) == PX_COMM_ABORTED, "size-1 abort not seen");
    px_comm_destroy(&c);
    CHECK(c == NULL, "destroy did not clear the pointer");
    px_comm_destroy(&c); /* NULL is fine */
    return 0;
}

static int basic_rank(int rank, int size, void *argp) {
    basic_arg_t *a = argp;
    g_rank = rank;
    px_store_t st = px_dir_store(&a->store);
    char err[512];
    /* Generous timeout: this test also runs under valgrind. */
    px_comm_t *c = px_comm_new_gloo(&st, "basic/dp", rank, size, 30000, err, sizeof(err));
    CHECK(c, "px_comm_new_gloo: %s", err);
    CHECK(px_comm_rank(c) == rank && px_comm_size(c) == size, "rank/size accessors");
    CHECK(!strcmp(px_comm_backend(c), "gloo"), "backend name %s", px_comm_backend(c));
    CHECK(px_comm_timeout(c) == 30000, "timeout accessor");
    if (basic_collectives(c, rank, size, a->small)) return 1;
    if (basic_bytes(c, rank, size, a->small)) return 1;
    if (basic_edges(c, rank, size)) return 1;
    CHECK_OK(c, px_comm_barrier(c));
    px_comm_destroy(&c);
    return basic_single(&st, rank);
}

static int test_basic(int argc, char **argv) {
    basic_arg_t a = {.small = argc > 0 && !strcmp(argv[0], "--small")};
    store_dir(&a.store, "basic");
    pid_t pids[3];
    int codes[3];
    int64_t t0 = px_now_ms();
    if (px_procs_spawn(3, basic_rank, &a, pids) != 0) return 1;
    int bad = px_procs_wait(3, pids, t0 + 100000, codes, -1);
    px_dir_store_remove(&a.store);
    printf("basic: %s in %lld ms (exit codes %d %d %d)\n", bad ? "FAIL" : "ok",
           (long long)(px_now_ms() - t0), codes[0], codes[1], codes[2]);
    return bad ? 1 : 0;
}

/* ----------------------------------------------------------------- kill */

#define KILL_RANKS 3
#define KILL_TIMEOUT_MS 5000
#define KILL_BOUND_MS (1000 * g_slow) /* detection: well under the timeout */

typedef struct {
    px_dir_store_t store;
    int round, victim;
    volatile int ready[KILL_RANKS];
    volatile int status[KILL_RANKS];
    volatile int64_t fail_us[KILL_RANKS];
    volatile int64_t teardown_us[KILL_RANKS];
    volatile int64_t reform_us[KILL_RANKS]; /* failure to first allreduce done */
    volatile int reform_ok[KILL_RANKS];
    char msg[KILL_RANKS][512];
} kill_shared_t;

static int kill_rank(int rank, int size, void *argp) {
    kill_shared_t *sh = argp;
    g_rank = rank;
    px_store_t st = px_dir_store(&sh->store);
    char prefix[64], err[512];
    snprintf(prefix, sizeof(prefix), "kill%d/q1", sh->round);
    px_comm_t *c = px_comm_new_gloo(&st, prefix, rank, size, KILL_TIMEOUT_MS, err, sizeof(err));
    CHECK(c, "new: %s", err);
    size_t n = 1u << 20; /* 4 MiB per allreduce: the kill lands mid-transfer */
    float *buf = malloc(n * sizeof(float));
    px_comm_status_t s;
    for (;;) {
        for (size_t i = 0; i < n; i++) buf[i] = (float)(rank + 1);
        s = px_comm_allreduce_sum_f32(c, buf, n);
        if (s != PX_COMM_OK) break;
        CHECK(buf[0] == 6.0f && buf[n - 1] == 6.0f, "allreduce value %g", buf[0]);
        sh->ready[rank] = 1;
    }
    sh->fail_us[rank] = px_now_us();
    sh->status[rank] = s;
    snprintf(sh->msg[rank], sizeof(sh->msg[rank]), "%s", px_comm_last_error(c));
    CHECK(px_comm_barrier(c) == s, "failure is not sticky");

    int64_t t = px_now_us();
    px_comm_destroy(&c);
    sh->teardown_us[rank] = px_now_us() - t;

    /* Re-form without the victim: fresh prefix, size n-1, ranks renumbered. */
    int nrank = rank - (rank > sh->victim);
    snprintf(prefix, sizeof(prefix), "kill%d/q2", sh->round);
    c = px_comm_new_gloo(&st, prefix, nrank, size - 1, KILL_TIMEOUT_MS, err, sizeof(err));
    CHECK(c, "re-form: %s", err);
    for (size_t i = 0; i < n; i++) buf[i] = (float)(nrank + 1);
    CHECK_OK(c, px_comm_allreduce_sum_f32(c, buf, n));
    sh->reform_us[rank] = px_now_us() - sh->fail_us[rank];
    CHECK(buf[0] == 3.0f && buf[n - 1] == 3.0f, "re-formed allreduce value %g", buf[0]);
    CHECK_OK(c, px_comm_barrier(c));
    sh->reform_ok[rank] = 1;
    px_comm_destroy(&c);
    free(buf);
    return 0;
}

static int kill_round(int round, unsigned *rs) {
    kill_shared_t *sh = px_procs_shared(sizeof(*sh));
    store_dir(&sh->store, "kill");
    sh->round = round;
    sh->victim = (int)(rnd(rs) % KILL_RANKS);
    int delay_ms = 10 + (int)(rnd(rs) % 150);
    pid_t pids[KILL_RANKS];
    int codes[KILL_RANKS];
    if (px_procs_spawn(KILL_RANKS, kill_rank, sh, pids) != 0) return 1;
    int64_t deadline = px_now_ms() + 20000;
    int ready = 0;
    while (!ready && px_now_ms() < deadline) {
        ready = 1;
        for (int r = 0; r < KILL_RANKS; r++) ready &= sh->ready[r];
        px_sleep_ms(1);
    }
    int64_t kill_us = 0;
    if (ready) {
        px_sleep_ms(delay_ms);
        kill_us = px_now_us();
        kill(pids[sh->victim], SIGKILL);
    } else {
        fprintf(stderr, "FAIL seed=%u: ranks never became ready\n", g_seed);
    }
    int bad = px_procs_wait(KILL_RANKS, pids, px_now_ms() + 15000, codes, sh->victim);
    px_dir_store_remove(&sh->store);
    int fail = !ready || bad;
    printf("kill round %d: victim=%d delay=%dms", round, sh->victim, delay_ms);
    for (int r = 0; r < KILL_RANKS; r++) {
        if (r == sh->victim) continue;
        double detect = (double)(sh->fail_us[r] - kill_us) / 1000.0;
        printf(" | rank%d %s detect=%.1fms teardown=%.1fms reform=%.1fms", r,
               px_comm_status_str((px_comm_status_t)sh->status[r]), detect,
               (double)sh->teardown_us[r] / 1000.0, (double)sh->reform_us[r] / 1000.0);
        if (sh->status[r] != PX_COMM_PEER_FAILED) {
            fprintf(stderr, "FAIL seed=%u round=%d rank=%d: status %s, expected peer_failed: %s\n",
                    g_seed, round, r, px_comm_status_str((px_comm_status_t)sh->status[r]),
                    sh->msg[r]);
            fail = 1;
        }
        if (!(detect >= 0 && detect < KILL_BOUND_MS)) {
            fprintf(stderr, "FAIL seed=%u round=%d rank=%d: detection took %.1f ms (bound %d)\n",
                    g_seed, round, r, detect, KILL_BOUND_MS);
            fail = 1;
        }
        if (!sh->reform_ok[r]) {
            fprintf(stderr, "FAIL seed=%u round=%d rank=%d: did not re-form\n", g_seed, round, r);
            fail = 1;
        }
    }
    printf("\n");
    if (codes[sh->victim] != 128 + SIGKILL) {
        fprintf(stderr, "FAIL seed=%u: victim exit code %d, expected SIGKILL\n", g_seed,
                codes[sh->victim]);
        fail = 1;
    }
    return fail;
}

static int test_kill(void) {
    unsigned rs = rnd_init(1);
    int fail = 0;
    for (int round = 0; round < 3; round++) fail |= kill_round(round, &rs);
    printf("kill: %s (seed %u)\n", fail ? "FAIL" : "ok", g_seed);
    return fail;
}

/* ----------------------------------------------------------------- stop */

#define STOP_TIMEOUT_MS 1500

typedef struct {
    px_dir_store_t store;
    int victim;
    volatile int ready[3];
    volatile int status[3];
    volatile int64_t fail_us[3];
    char msg[3][512];
} stop_shared_t;

static int stop_rank(int rank, int size, void *argp) {
    stop_shared_t *sh = argp;
    g_rank = rank;
    px_store_t st = px_dir_store(&sh->store);
    char err[512];
    px_comm_t *c = px_comm_new_gloo(&st, "stop/q1", rank, size, STOP_TIMEOUT_MS, err, sizeof(err));
    CHECK(c, "new: %s", err);
    size_t n = 1u << 18;
    float *buf = malloc(n * sizeof(float));
    px_comm_status_t s;
    for (;;) {
        for (size_t i = 0; i < n; i++) buf[i] = 1.0f;
        s = px_comm_allreduce_sum_f32(c, buf, n);
        if (s != PX_COMM_OK) break;
        sh->ready[rank] = 1;
    }
    sh->fail_us[rank] = px_now_us();
    sh->status[rank] = s;
    snprintf(sh->msg[rank], sizeof(sh->msg[rank]), "%s", px_comm_last_error(c));
    px_comm_destroy(&c);
    free(buf);
    return 0;
}

static int test_stop(void) {
    stop_shared_t *sh = px_procs_shared(sizeof(*sh));
    store_dir(&sh->store, "stop");
    unsigned rs = rnd_init(2);
    sh->victim = (int)(rnd(&rs) % 3);
    pid_t pids[3];
    int codes[3];
    if (px_procs_spawn(3, stop_rank, sh, pids) != 0) return 1;
    int64_t deadline = px_now_ms() + 20000;
    int ready = 0;
    while (!ready && px_now_ms() < deadline) {
        ready = sh->ready[0] && sh->ready[1] && sh->ready[2];
        px_sleep_ms(1);
    }
    int fail = !ready;
    int64_t stop_us = px_now_us(), cont_us = 0;
    if (ready) {
        px_sleep_ms(20 + (int)(rnd(&rs) % 100));
        stop_us = px_now_us();
        kill(pids[sh->victim], SIGSTOP);
        /* Wait for both survivors to report, then wake the victim. */
        int64_t until = px_now_ms() + STOP_TIMEOUT_MS + 5000;
        for (;;) {
            int both = 1;
            for (int r = 0; r < 3; r++)
                if (r != sh->victim && !sh->fail_us[r]) both = 0;
            if (both || px_now_ms() >= until) break;
            px_sleep_ms(1);
        }
        cont_us = px_now_us();
    }
    kill(pids[sh->victim], SIGCONT);
    int bad = px_procs_wait(3, pids, px_now_ms() + 10000, codes, -1);
    px_dir_store_remove(&sh->store);
    fail |= bad != 0;
    printf("stop: victim=%d timeout=%dms", sh->victim, STOP_TIMEOUT_MS);
    for (int r = 0; r < 3; r++) {
        double after = (double)(sh->fail_us[r] - (r == sh->victim ? cont_us : stop_us)) / 1000.0;
        printf(" | rank%d %s %.1fms after %s", r,
               px_comm_status_str((px_comm_status_t)sh->status[r]), after,
               r == sh->victim ? "SIGCONT" : "SIGSTOP");
        if (r == sh->victim) {
            if (sh->status[r] == PX_COMM_OK || !(after >= 0 && after < 3000)) {
                fprintf(stderr, "FAIL seed=%u: resumed rank %d: %s after %.1f ms: %s\n", g_seed,
                        r, px_comm_status_str((px_comm_status_t)sh->status[r]), after,
                        sh->msg[r]);
                fail = 1;
            }
            continue;
        }
        if (sh->status[r] != PX_COMM_TIMEOUT) {
            fprintf(stderr, "FAIL seed=%u rank=%d: status %s, expected timeout: %s\n", g_seed, r,
                    px_comm_status_str((px_comm_status_t)sh->status[r]), sh->msg[r]);
            fail = 1;
        }
        if (!(after >= STOP_TIMEOUT_MS - 250 && after <= STOP_TIMEOUT_MS + 1000)) {
            fprintf(stderr, "FAIL seed=%u rank=%d: failed %.1f ms after SIGSTOP, expected about %d\n",
                    g_seed, r, after, STOP_TIMEOUT_MS);
            fail = 1;
        }
    }
    printf("\nstop: %s (seed %u)\n", fail ? "FAIL" : "ok", g_seed);
    return fail;
}

/* ---------------------------------------------------------------- abort */

#define ABORT_TIMEOUT_MS 10000
#define ABORT_AFTER_MS 300

typedef struct {
    px_dir_store_t store;
    volatile int64_t abort_us;     /* when rank 0's helper thread aborted */
    volatile int64_t returned_us;  /* when rank 0's allreduce returned */
} abort_shared_t;

typedef struct {
    px_comm_t *c;
    volatile int64_t *abort_us; /* set when it aborts */
} aborter_t;

static void *aborter(void *p) {
    aborter_t *a = p;
    px_sleep_ms(ABORT_AFTER_MS);
    *a->abort_us = px_now_us();
    px_comm_abort(a->c);
    return NULL;
}

static int abort_rank(int rank, int size, void *argp) {
    abort_shared_t *sh = argp;
    g_rank = rank;
    px_store_t st = px_dir_store(&sh->store);
    char err[512];
    px_comm_t *c = px_comm_new_gloo(&st, "abort/q1", rank, size, ABORT_TIMEOUT_MS, err, sizeof(err));
    CHECK(c, "new: %s", err);
    CHECK_OK(c, px_comm_barrier(c));
    float buf[1000];
    for (int i = 0; i < 1000; i++) buf[i] = 1.0f;
    if (rank == 0) {
        /* Rank 1 never joins this allreduce: only the abort can end it early. */
        aborter_t a = {c, &sh->abort_us};
        pthread_t th;
        pthread_create(&th, NULL, aborter, &a);
        int64_t t0 = px_now_us();
        px_comm_status_t s = px_comm_allreduce_sum_f32(c, buf, 1000);
        sh->returned_us = px_now_us();
        pthread_join(th, NULL);
        double blocked = (double)(sh->returned_us - t0) / 1000.0;
        double lag = (double)(sh->returned_us - sh->abort_us) / 1000.0;
        printf("abort: rank0 %s after blocking %.1f ms, %.2f ms after px_comm_abort\n",
               px_comm_status_str(s), blocked, lag);
        CHECK(s == PX_COMM_ABORTED, "status %s: %s", px_comm_status_str(s), px_comm_last_error(c));
        CHECK(blocked >= ABORT_AFTER_MS - 20, "returned before the abort (%.1f ms)", blocked);
        CHECK(lag < 500 * g_slow, "returned %.1f ms after the abort", lag);
        int64_t t1 = px_now_us();
        CHECK(px_comm_barrier(c) == PX_COMM_ABORTED, "later operation not aborted");
        CHECK(px_now_us() - t1 < 200000 * g_slow, "later operation was not immediate");
        CHECK(px_comm_health(c) == PX_COMM_ABORTED, "health after abort");
    } else {
        /* Wait until rank 0 has aborted, then use the communicator: the
         * aborted peer closed its connections, so this fails at once. */
        int64_t until = px_now_ms() + ABORT_TIMEOUT_MS;
        while (!sh->returned_us && px_now_ms() < until) px_sleep_ms(1);
        px_sleep_ms(100);
        int64_t t0 = px_now_us();
        px_comm_status_t s = px_comm_allreduce_sum_f32(c, buf, 1000);
        double took = (double)(px_now_us() - t0) / 1000.0;
        printf("abort: rank1 (peer) %s after %.1f ms\n", px_comm_status_str(s), took);
        CHECK(s == PX_COMM_PEER_FAILED, "peer status %s: %s", px_comm_status_str(s),
              px_comm_last_error(c));
        CHECK(took < 1000 * g_slow, "peer took %.1f ms to fail", took);
    }
    px_comm_destroy(&c);
    return 0;
}

static int test_abort(void) {
    abort_shared_t *sh = px_procs_shared(sizeof(*sh));
    store_dir(&sh->store, "abort");
    pid_t pids[2];
    int codes[2];
    if (px_procs_spawn(2, abort_rank, sh, pids) != 0) return 1;
    int bad = px_procs_wait(2, pids, px_now_ms() + 30000, codes, -1);
    px_dir_store_remove(&sh->store);
    printf("abort: %s\n", bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}

/* ----------------------------------------------------------- rendezvous */

#define RV_TIMEOUT_MS 800

static int rv_rank(int rank, int size, void *argp) {
    px_dir_store_t *store = argp;
    g_rank = rank;
    (void)size;
    px_store_t st = px_dir_store(store);
    char err[512];

    /* A late rank is waited for (within the timeout). */
    if (rank == 1) px_sleep_ms(300);
    px_comm_t *c = px_comm_new_gloo(&st, "rv/q1", rank, 2, 3000, err, sizeof(err));
    CHECK(c, "late-rank rendezvous: %s", err);
    CHECK_OK(c, px_comm_barrier(c));
    px_comm_destroy(&c);

    /* The same prefix again: refused at once, whatever the timing. */
    int64_t t0 = px_now_ms();
    c = px_comm_new_gloo(&st, "rv/q1", rank, 2, 3000, err, sizeof(err));
    int64_t took = px_now_ms() - t0;
    printf("rendezvous: rank%d reused prefix refused in %lld ms: %s\n", rank, (long long)took,
           err);
    CHECK(!c, "reused prefix accepted");
    CHECK(strstr(err, "already used"), "message: %s", err);
    CHECK(took < 300, "reused prefix took %lld ms to fail", (long long)took);

    /* A missing rank: size 3, only two show up. */
    t0 = px_now_ms();
    c = px_comm_new_gloo(&st, "rv/q2", rank, 3, RV_TIMEOUT_MS, err, sizeof(err));
    took = px_now_ms() - t0;
    printf("rendezvous: rank%d missing rank reported in %lld ms: %s\n", rank, (long long)took,
           err);
    CHECK(!c, "rendezvous with a missing rank succeeded");
    CHECK(strstr(err, "timed out"), "message: %s", err);
    CHECK(took >= RV_TIMEOUT_MS - 50 && took < 2 * RV_TIMEOUT_MS + 1000,
          "missing rank reported after %lld ms (timeout %d)", (long long)took, RV_TIMEOUT_MS);

    /* Bad arguments never reach the network. */
    CHECK(!px_comm_new_gloo(&st, "rv/q3", 2, 2, 1000, err, sizeof(err)) && strstr(err, "rank"),
          "rank >= size accepted: %s", err);
    CHECK(!px_comm_new_gloo(&st, "", 0, 2, 1000, err, sizeof(err)), "empty prefix accepted");
    CHECK(!px_comm_new_gloo(&st, "rv/q4", 0, 2, 0, err, sizeof(err)), "timeout 0 accepted");
    CHECK(!px_comm_new_gloo(NULL, "rv/q5", 0, 2, 1000, err, sizeof(err)), "NULL store accepted");
    return 0;
}

/* Runs fn on `size` rank processes that share a fresh directory store
 * (passed as fn's argument), within timeout_ms; prints "NAME: ok|FAIL". */
static int run_with_store(const char *name, const char *dir, int size, px_rank_fn fn, int64_t timeout_ms) {
    px_dir_store_t *store = px_procs_shared(sizeof(*store));
    store_dir(store, dir);
    pid_t pids[PX_PROCS_MAX];
    int codes[PX_PROCS_MAX];
    if (px_procs_spawn(size, fn, store, pids) != 0) return 1;
    int bad = px_procs_wait(size, pids, px_now_ms() + timeout_ms, codes, -1);
    px_dir_store_remove(store);
    printf("%s: %s\n", name, bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}

static int test_rendezvous(void) { return run_with_store("rendezvous", "rv", 2, rv_rank, 20000); }

/* ----------------------------------------------------------------- pace */

#define PACE_FLOATS 250000 /* 2 ranks: 2(R-1)/R * n * 4 = 1e6 bytes per allreduce */
#define PACE_RATE 2e6      /* bytes/s: 0.5 s per allreduce or 1 MB message */

static double ms_since(int64_t t0_us) { return (double)(px_now_us() - t0_us) / 1000.0; }

static int pace_rank(int rank, int size, void *store) {
    g_rank = rank;
    px_store_t st = px_dir_store(store);
    char err[512];
    px_comm_t *c = px_comm_new_gloo(&st, "pace/q1", rank, size, ABORT_TIMEOUT_MS, err, sizeof(err));
    CHECK(c, "new: %s", err);
    CHECK_OK(c, px_comm_barrier(c));
    px_comm_set_rate_limit(c, PACE_RATE);
    CHECK(px_comm_rate_limit(c) == PACE_RATE, "rate limit not kept");
    const double want_ms = 1e6 / PACE_RATE * 1000.0;
    float *buf = malloc(PACE_FLOATS * sizeof(float));
    for (int i = 0; i < PACE_FLOATS; i++) buf[i] = (float)(rank + 1);

    int64_t t0 = px_now_us();
    CHECK_OK(c, px_comm_allreduce_sum_f32(c, buf, PACE_FLOATS));
    double took = ms_since(t0);
    printf("pace: rank%d allreduce of 1e6 ring bytes at %.0f bytes/s took %.1f ms (>= %.0f)\n", rank,
           PACE_RATE, took, want_ms);
    CHECK(took >= want_ms, "paced allreduce took %.1f ms, below %.0f ms", took, want_ms);
    CHECK(buf[0] == 3.0f && buf[PACE_FLOATS - 1] == 3.0f, "paced allreduce sum %g", buf[0]);

    t0 = px_now_us();
    if (rank == 0) CHECK_OK(c, px_comm_send(c, buf, PACE_FLOATS * sizeof(float), 1, 7));
    else CHECK_OK(c, px_comm_recv(c, buf, PACE_FLOATS * sizeof(float), 0, 7));
    took = ms_since(t0);
    printf("pace: rank%d %s of 1e6 bytes took %.1f ms (>= %.0f)\n", rank, rank ? "recv" : "send", took,
           want_ms);
    CHECK(took >= want_ms, "paced message took %.1f ms, below %.0f ms", took, want_ms);

    /* At 1e6/30 bytes/s the next allreduce would sleep 30 s: each rank
     * aborts itself 300 ms in, during the sleep. */
    CHECK_OK(c, px_comm_barrier(c));
    px_comm_set_rate_limit(c, 1e6 / 30.0);
    volatile int64_t abort_us = 0;
    aborter_t a = {c, &abort_us};
    pthread_t th;
    pthread_create(&th, NULL, aborter, &a);
    t0 = px_now_us();
    px_comm_status_t s = px_comm_allreduce_sum_f32(c, buf, PACE_FLOATS);
    int64_t returned = px_now_us();
    pthread_join(th, NULL);
    double lag = (double)(returned - abort_us) / 1000.0;
    printf("pace: rank%d %s after %.1f ms, %.1f ms after px_comm_abort: %s\n", rank,
           px_comm_status_str(s), ms_since(t0), lag, px_comm_last_error(c));
    CHECK(s == PX_COMM_ABORTED, "status %s: %s", px_comm_status_str(s), px_comm_last_error(c));
    CHECK(lag < 2000 * g_slow, "paced sleep ended %.1f ms after the abort", lag);
    CHECK(px_comm_health(c) == PX_COMM_ABORTED, "health after an abort in the pacing");
    CHECK(px_comm_barrier(c) == PX_COMM_ABORTED, "later operation not aborted");
    free(buf);
    px_comm_destroy(&c);
    return 0;
}

static int test_pace(void) { return run_with_store("pace", "pace", 2, pace_rank, 60000); }

/* ----------------------------------------------------------------- mesh */

/* The in-group mesh's axis communicators (parallel/mesh_comm.h), for real:
 * pp2 x fsdp2 x tp2 over 8 ranks, then fsdp2 x tp2 over the first 4 with a
 * new quorum prefix. On every axis each rank allreduces (its rank, 1): the
 * sums must be those of the axis group the mesh names, and the member's
 * place in the communicator its coordinate. */
static int mesh_round(px_store_t *st, const px_mesh_t *m, int rank, const char *base) {
    char err[600];
    px_mesh_comms_t mc;
    CHECK(px_mesh_comms_new_gloo(st, m, rank, base, 10000, &mc, err, sizeof err) == 0, "%s: %s", base, err);
    px_mesh_coord_t c = px_mesh_coord(m, rank);
    for (int a = 0; a < PX_MESH_AXES; a++) {
        if (m->size[a] == 1) {
            CHECK(!mc.axis[a], "%s: no communicator on a size-1 axis", base);
            continue;
        }
        px_comm_t *comm = mc.axis[a];
        CHECK(comm && px_comm_rank(comm) == c.c[a] && px_comm_size(comm) == m->size[a],
              "%s %s: member %d of %d, want %d of %d", base, px_mesh_axis_name((px_mesh_axis_t)a),
              comm ? px_comm_rank(comm) : -1, comm ? px_comm_size(comm) : -1, c.c[a], m->size[a]);
        float v[2] = {(float)rank, 1.0f};
        CHECK_OK(comm, px_comm_allreduce_f32(comm, v, 2, PX_COMM_SUM));
        int g[PX_PROCS_MAX];
        px_mesh_axis_ranks(m, rank, (px_mesh_axis_t)a, g);
        float want = 0;
        for (int i = 0; i < m->size[a]; i++) want += (float)g[i];
        CHECK(v[0] == want && v[1] == (float)m->size[a], "%s %s: rank %d sums %g/%g, want %g/%d", base,
              px_mesh_axis_name((px_mesh_axis_t)a), rank, v[0], v[1], want, m->size[a]);
    }
    px_mesh_comms_destroy(&mc);
    CHECK(!mc.axis[0] && !mc.axis[1] && !mc.axis[2], "destroy clears the communicators");
    return 0;
}

static int mesh_rank(int rank, int size, void *argp) {
    g_rank = rank;
    px_store_t st = px_dir_store((px_dir_store_t *)argp);
    px_mesh_t m8 = {.size = {2, 2, 2}}, m4 = {.size = {1, 2, 2}};
    char err[200];
    CHECK(px_mesh_check(&m8, size, err, sizeof err) == 0, "%s", err);
    if (mesh_round(&st, &m8, rank, "q1/g0") != 0) return 1;
    if (rank < 4 && mesh_round(&st, &m4, rank, "q2/g0") != 0) return 1;
    return 0;
}

static int test_mesh(void) { return run_with_store("mesh", "mesh", 8, mesh_rank, 60000); }

/* ------------------------------------------------------------- mismatch */

#define MM_TIMEOUT_MS 500

/* Runs one deliberately mismatched call on a fresh communicator; both ranks
 * must get PX_COMM_TIMEOUT at about the timeout (Gloo itself would abort the
 * process on a size mismatch; px_comm keeps mismatches from ever matching). */
static int mismatch_case(px_store_t *st, const char *prefix, int rank, int which) {
    char err[512];
    px_comm_t *c = px_comm_new_gloo(st, prefix, rank, 2, 5000, err, sizeof(err));
    CHECK(c, "new %s: %s", prefix, err);
    CHECK_OK(c, px_comm_barrier(c));
    px_comm_set_timeout(c, MM_TIMEOUT_MS);
    CHECK(px_comm_timeout(c) == MM_TIMEOUT_MS, "set_timeout");
    char bytes[100] = {0};
    float v[10] = {0};
    px_comm_status_t s = PX_COMM_OK;
    int64_t t0 = px_now_ms();
    if (which == 0) /* send 100 bytes, receive 50 */
        s = rank == 0 ? px_comm_send(c, bytes, 100, 1, 3) : px_comm_recv(c, bytes, 50, 0, 3);
    else if (which == 1) /* allreduce of 10 against 7 elements */
        s = px_comm_allreduce_sum_f32(c, v, rank == 0 ? 10 : 7);
    else if (which == 2) /* broadcast from different roots */
        s = px_comm_broadcast(c, bytes, sizeof(bytes), rank);
    else /* allreduce against allgather */
        s = rank == 0 ? px_comm_allreduce_sum_f32(c, v, 10) : px_comm_allgather_f32(c, v, v, 5);
    int64_t took = px_now_ms() - t0;
    printf("mismatch %s: rank%d %s after %lld ms\n", prefix, rank, px_comm_status_str(s),
           (long long)took);
    CHECK(s == PX_COMM_TIMEOUT, "%s: %s: %s", prefix, px_comm_status_str(s),
          px_comm_last_error(c));
    CHECK(took < MM_TIMEOUT_MS + 1500, "%s took %lld ms", prefix, (long long)took);
    px_comm_destroy(&c);
    return 0;
}

static int mismatch_rank(int rank, int size, void *argp) {
    (void)size;
    g_rank = rank;
    px_store_t st = px_dir_store(argp);
    const char *names[] = {"mm/p2p", "mm/count", "mm/root", "mm/op"};
    for (int i = 0; i < 4; i++)
        if (mismatch_case(&st, names[i], rank, i)) return 1;
    return 0;
}

static int test_mismatch(void) {
    px_dir_store_t *store = px_procs_shared(sizeof(*store));
    store_dir(store, "mm");
    pid_t pids[2];
    int codes[2];
    if (px_procs_spawn(2, mismatch_rank, store, pids) != 0) return 1;
    int bad = px_procs_wait(2, pids, px_now_ms() + 30000, codes, -1);
    px_dir_store_remove(store);
    printf("mismatch: %s (exit codes %d %d)\n", bad ? "FAIL" : "ok", codes[0], codes[1]);
    return bad ? 1 : 0;
}

/* ------------------------------------------------------------- shutdown */

#define SD_ROUNDS 40

static int shutdown_rank(int rank, int size, void *argp) {
    g_rank = rank;
    px_store_t st = px_dir_store(argp);
    unsigned rs = rnd_init(100u + (unsigned)rank);
    float buf[1024];
    char err[512], prefix[64];
    for (int round = 0; round < SD_ROUNDS; round++) {
        snprintf(prefix, sizeof(prefix), "sd/q%d", round);
        px_comm_t *c = px_comm_new_gloo(&st, prefix, rank, size, 10000, err, sizeof(err));
        CHECK(c, "round %d: new: %s", round, err);
        for (int i = 0; i < 1024; i++) buf[i] = (float)(rank + 1);
        /* Jitter so that different ranks are the last to finish. */
        if (rnd(&rs) % 2) px_sleep_ms(rnd(&rs) % 4);
        px_comm_status_t s = (round % 2) ? px_comm_barrier(c)
                                         : px_comm_allreduce_sum_f32(c, buf, 1024);
        CHECK(s == PX_COMM_OK, "round %d: %s: %s", round, px_comm_status_str(s),
              px_comm_last_error(c));
        CHECK(round % 2 || buf[1023] == 6.0f, "round %d: sum %g", round, buf[1023]);
        px_comm_destroy(&c); /* at once: a slower rank may still be inside the call */
    }
    return 0;
}

static int test_shutdown(void) {
    px_dir_store_t *store = px_procs_shared(sizeof(*store));
    store_dir(store, "sd");
    pid_t pids[3];
    int codes[3];
    int64_t t0 = px_now_ms();
    if (px_procs_spawn(3, shutdown_rank, store, pids) != 0) return 1;
    int bad = px_procs_wait(3, pids, px_now_ms() + 60000, codes, -1);
    px_dir_store_remove(store);
    printf("shutdown: %s, %d rounds in %lld ms (seed %u)\n", bad ? "FAIL" : "ok", SD_ROUNDS,
           (long long)(px_now_ms() - t0), g_seed);
    return bad ? 1 : 0;
}

/* ----------------------------------------------------------------- nccl */

static int test_nccl(void) {
    px_dir_store_t store;
    store_dir(&store, "nccl");
    px_store_t st = px_dir_store(&store);
    char err[512] = "";
    int64_t t0 = px_now_ms();
    px_comm_t *c = px_comm_new_nccl(&st, "nccl/q1", 0, 1, 0, 20000, err, sizeof(err));
    int64_t took = px_now_ms() - t0;
    int fail = 0;
    if (!px_comm_nccl_built()) {
        printf("nccl: backend not built: %s\n", err);
        fail = c != NULL || !strstr(err, "not built");
    } else if (!c) {
        /* Any failure must say why; on a machine without a GPU, exactly this. */
        printf("nccl: px_comm_new_nccl -> NULL in %lld ms: %s\n", (long long)took, err);
        fail = !strstr(err, "no CUDA device: cudaGetDeviceCount returned");
    } else {
        printf("nccl: GPU present, 1-rank communicator created in %lld ms\n", (long long)took);
        fail = px_comm_barrier(c) != PX_COMM_OK || strcmp(px_comm_backend(c), "nccl") != 0;
        px_comm_destroy(&c);
    }
    px_dir_store_remove(&store);
    printf("nccl: %s\n", fail ? "FAIL" : "ok");
    return fail;
}

int main(int argc, char **argv) {
    const char *seed = getenv("PX_TEST_SEED");
    if (seed && *seed) g_seed = (unsigned)strtoul(seed, NULL, 10);
    const char *slow = getenv("PX_TEST_SLOW");
    if (slow && atoi(slow) > 1) g_slow = atoi(slow);
    if (!g_seed) g_seed = 1;
    if (argc < 2) {
        fprintf(stderr, "usage: %s basic [--small] | kill | stop | abort | pace | rendezvous | mismatch | shutdown | mesh | nccl\n",
                argv[0]);
        return 2;
    }
    const char *t = argv[1];
    if (!strcmp(t, "basic")) return test_basic(argc - 2, argv + 2);
    if (!strcmp(t, "kill")) return test_kill();
    if (!strcmp(t, "stop")) return test_stop();
    if (!strcmp(t, "abort")) return test_abort();
    if (!strcmp(t, "pace")) return test_pace();
    if (!strcmp(t, "rendezvous")) return test_rendezvous();
    if (!strcmp(t, "nccl")) return test_nccl();
    if (!strcmp(t, "mismatch")) return test_mismatch();
    if (!strcmp(t, "shutdown")) return test_shutdown();
    if (!strcmp(t, "mesh")) return test_mesh();
    fprintf(stderr, "%s: unknown test '%s'\n", argv[0], t);
    return 2;
}
