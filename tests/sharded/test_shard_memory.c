/* A shard computing in a memory of its own (px_shard_use_memory), on the
 * CPU: the path a GPU takes (worker/compute_cuda.c gives the shard the
 * GPU's memory), with host operations standing in for the device's, so it
 * runs in every `make test`.
 *
 * 4 rank processes (fsdp2 x tp2 of `tiny`, Gloo over loopback, a directory
 * store) each train two shards of the same seed for 3 steps, side by side
 * and on the same communicators: A in its own host buffers (the default),
 * B in a second set of buffers made through counting memory operations.
 * Then on every rank:
 *   - B's compute copy holds A's params, m and v bit for bit, and its
 *     gathered model (px_shard_gather through the compute memory) is A's:
 *     every compute path (the parameter source, the fsdp gathers and
 *     reduce-scatters, the tp sums, zero_grad, the norms, the AdamW step)
 *     works on the compute copy;
 *   - B's host buffers still hold the initial state: nothing but the
 *     caller writes the mirror;
 *   - the operations were used: fences before collectives, one accumulate
 *     per reduce-scatter, buffers allocated and all released at destroy;
 *   - a memory that runs out (a GPU too small for the shard) makes
 *     px_shard_use_memory fail with the reason, every buffer it had made
 *     released, and the shard goes on computing in host memory: it still
 *     trains like A for a step.
 * Exit status 0 pass, 1 fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpt.h"
#include "ops.h"
#include "px_comm.h"
#include "px_dir_store.h"
#include "px_procs.h"
#include "px_time.h"
#include "sharded.h"

#define F 2
#define TP 2
#define RANKS (F * TP)
#define STEPS 3
#define BATCH 2
#define SEQ 16
#define SEED 7

#define CHECK PX_RANK_CHECK

/* ---- the other memory: host buffers of its own, every call counted ---- */

typedef struct {
    long allocs, releases, fences, zeros, accumulates, copies;
    long fail_after; /* allocations that succeed before the memory is "full" (0: never full) */
} counts_t;

static float *c_alloc(void *ctx, size_t n) {
    counts_t *c = ctx;
    if (c->fail_after && c->allocs >= c->fail_after) return NULL;
    c->allocs++;
    return calloc(n ? n : 1, sizeof(float));
}
static void c_release(void *ctx, float *p) {
    ((counts_t *)ctx)->releases++;
    free(p);
}
static void c_copy(void *ctx, float *dst, const float *src, size_t n) {
    ((counts_t *)ctx)->copies++;
    memcpy(dst, src, n * sizeof(float));
}
static void c_zero(void *ctx, float *p, size_t n) {
    ((counts_t *)ctx)->zeros++;
    memset(p, 0, n * sizeof(float));
}
static void c_fence(void *ctx) { ((counts_t *)ctx)->fences++; }
static void c_accumulate(void *ctx, float *dst, const float *src, size_t n) {
    __atomic_fetch_add(&((counts_t *)ctx)->accumulates, 1, __ATOMIC_RELAXED); /* the communication thread */
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}
static double c_sumsq(void *ctx, const float *x, size_t n) {
    (void)ctx;
    return norm_squared(x, n);
}
static void c_scale(void *ctx, float *x, size_t n, float coef) {
    (void)ctx;
    scale_inplace(x, n, coef);
}
static void c_adamw(void *ctx, float *p, float *m, float *v, const float *g, size_t n, float lr, float b1, float b2,
                    float eps, float wd, int t) {
    (void)ctx;
    adamw_update(p, m, v, g, n, lr, b1, b2, eps, wd, t);
}

/* ---- one rank ---- */

typedef struct {
    char dir[256];
} args_t;

/* One training step of sh: this fsdp coordinate's samples, the norm over
 * the group (each rank's unique part summed), clipped AdamW. */
static int step(px_shard_t *sh, px_comm_t *group, int f, int s) {
    int in[BATCH * SEQ], tg[BATCH * SEQ];
    for (int i = 0; i < BATCH * SEQ; i++) {
        in[i] = (i * 7 + f * 13 + s * 3) % 256;
        tg[i] = (i * 5 + f * 11 + s * 17 + 1) % 256;
    }
    px_gpt_t *m = px_shard_model(sh);
    px_shard_zero_grad(sh);
    float loss = px_gpt_forward(m, in, tg, BATCH, SEQ);
    if (!isfinite(loss) || px_gpt_backward(m, 1.0f) != 0 || px_shard_last_error(sh)[0]) return -1;
    float sumsq = (float)px_shard_grad_sumsq(sh);
    if (px_comm_allreduce_sum_f32(group, &sumsq, 1) != PX_COMM_OK) return -1;
    px_shard_step(sh, sqrtf(sumsq), 1.0f, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, s + 1);
    return 0;
}

static size_t differ(const float *a, const float *b, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

static int rank_main(int rank, int size, void *arg) {
    (void)size;
    const args_t *a = arg;
    px_dir_store_t ds;
    CHECK(px_dir_store_init(&ds, a->dir) == 0, "store");
    px_store_t store = px_dir_store(&ds);
    int f = rank / TP, t = rank % TP; /* tp fastest, as the mesh */
    char prefix[64], err[256];
    snprintf(prefix, sizeof prefix, "fsdp-t%d", t);
    px_comm_t *fsdp = px_comm_new_gloo(&store, prefix, f, F, 30000, err, sizeof err);
    CHECK(fsdp, "fsdp communicator: %s", err);
    snprintf(prefix, sizeof prefix, "tp-f%d", f);
    px_comm_t *tp = px_comm_new_gloo(&store, prefix, t, TP, 30000, err, sizeof err);
    CHECK(tp, "tp communicator: %s", err);
    px_comm_t *group = px_comm_new_gloo(&store, "group", rank, RANKS, 30000, err, sizeof err);
    CHECK(group, "group communicator: %s", err);

    px_gpt_config_t cfg;
    px_gpt_config_preset("tiny", &cfg);
    px_shard_layout_t lay = {.fsdp = F, .fsdp_rank = f, .tp = {TP, t}};
    px_shard_t *A = px_shard_new(&cfg, &lay, err, sizeof err), *B = px_shard_new(&cfg, &lay, err, sizeof err);
    CHECK(A && B, "shards: %s", err);
    CHECK(px_shard_init(A, SEED) == 0 && px_shard_init(B, SEED) == 0, "init");
    px_shard_bufs_t *hb = px_shard_bufs(B);
    size_t n = hb->n;
    float *initial = malloc(3 * n * sizeof(float));
    CHECK(initial, "out of memory");
    memcpy(initial, hb->params, n * sizeof(float));
    memcpy(initial + n, hb->m, n * sizeof(float));
    memcpy(initial + 2 * n, hb->v, n * sizeof(float));

    counts_t cnt = {0};
    px_shard_memory_t mem = {&cnt,   c_alloc,      c_release, c_copy,  c_zero,
                             c_fence, c_accumulate, c_sumsq,   c_scale, c_adamw};
    CHECK(px_shard_use_memory(B, &mem, err, sizeof err) == 0, "use_memory: %s", err);
    px_shard_bufs_t *db = px_shard_compute_bufs(B);
    CHECK(db->params != hb->params && db->grads != hb->grads && db->m != hb->m && db->v != hb->v && db->n == n,
          "the compute copy is another set of buffers");
    CHECK(differ(db->params, hb->params, n) == 0, "use_memory copied the params in");

    for (int s = 0; s < STEPS; s++) {
        px_shard_set_comms(A, fsdp, tp, NULL);
        CHECK(step(A, group, f, s) == 0, "A step %d: %s", s, px_shard_last_error(A));
        px_shard_set_comms(B, fsdp, tp, NULL);
        CHECK(step(B, group, f, s) == 0, "B step %d: %s", s, px_shard_last_error(B));
    }
    px_shard_bufs_t *ab = px_shard_bufs(A);
    CHECK(differ(ab->params, db->params, n) == 0, "compute copy params = host shard's after %d steps", STEPS);
    CHECK(differ(ab->m, db->m, n) == 0 && differ(ab->v, db->v, n) == 0, "compute copy m, v = host shard's");
    CHECK(differ(initial, hb->params, n) == 0 && differ(initial + n, hb->m, n) == 0 &&
              differ(initial + 2 * n, hb->v, n) == 0,
          "B's host buffers untouched by the compute");
    CHECK(differ(initial, db->params, n) != 0, "the steps changed the compute copy");
    CHECK(cnt.fences > 0 && cnt.zeros > 0, "fences %ld, zeros %ld", cnt.fences, cnt.zeros);
    /* reduce-scatters: every unit once per backward */
    long want = (long)STEPS * PX_GPT_UNITS(&cfg);
    CHECK(cnt.accumulates == want, "accumulates %ld, want %ld (one per unit per step)", cnt.accumulates, want);

    px_gpt_t *wa = px_gpt_new_zeroed(&cfg), *wb = px_gpt_new_zeroed(&cfg);
    CHECK(wa && wb, "out of memory");
    px_shard_set_comms(A, fsdp, tp, NULL);
    CHECK(px_shard_gather(A, wa) == 0, "gather A");
    px_shard_set_comms(B, fsdp, tp, NULL);
    CHECK(px_shard_gather(B, wb) == 0, "gather B through the compute memory");
    CHECK(differ(wa->params, wb->params, wa->num_params) == 0, "the gathered models are equal");

    /* a memory that fills up part way: refused, nothing leaked, the shard unchanged and still training */
    for (long k = 1; k <= 6; k++) {
        px_shard_t *C = px_shard_new(&cfg, &lay, err, sizeof err);
        CHECK(C && px_shard_init(C, SEED) == 0, "shard C");
        counts_t full = {.fail_after = k};
        px_shard_memory_t fm = mem;
        fm.ctx = &full;
        err[0] = '\0';
        CHECK(px_shard_use_memory(C, &fm, err, sizeof err) == -1 && strstr(err, "out of memory"),
              "a full memory after %ld buffers is refused with the reason: '%s'", k, err);
        CHECK(full.releases == full.allocs, "after %ld buffers: %ld made, %ld released", k, full.allocs, full.releases);
        CHECK(px_shard_compute_bufs(C)->params == px_shard_bufs(C)->params, "the shard still computes on the host");
        if (k == 6) { /* one more step, equal to A's next */
            px_shard_t *A2 = px_shard_new(&cfg, &lay, err, sizeof err);
            CHECK(A2 && px_shard_init(A2, SEED) == 0, "shard A2");
            px_shard_set_comms(A2, fsdp, tp, NULL);
            CHECK(step(A2, group, f, 0) == 0, "A2 step");
            px_shard_set_comms(C, fsdp, tp, NULL);
            CHECK(step(C, group, f, 0) == 0, "C step after the refusal: %s", px_shard_last_error(C));
            CHECK(differ(px_shard_bufs(A2)->params, px_shard_bufs(C)->params, n) == 0, "C trains as before");
            px_shard_set_comms(A2, NULL, NULL, NULL);
            px_shard_destroy(&A2);
        }
        px_shard_set_comms(C, NULL, NULL, NULL);
        px_shard_destroy(&C);
    }

    long allocs = cnt.allocs;
    px_shard_set_comms(A, NULL, NULL, NULL);
    px_shard_set_comms(B, NULL, NULL, NULL);
    px_shard_destroy(&A);
    px_shard_destroy(&B);
    CHECK(cnt.releases == allocs, "every buffer of the compute memory released: %ld of %ld", cnt.releases, allocs);
    printf("rank %d (fsdp %d, tp %d): %zu floats, %d steps equal bit for bit; fences %ld, accumulates %ld, "
           "buffers %ld\n", rank, f, t, n, STEPS, cnt.fences, cnt.accumulates, allocs);
    px_gpt_destroy(&wa);
    px_gpt_destroy(&wb);
    free(initial);
    px_comm_destroy(&fsdp);
    px_comm_destroy(&tp);
    px_comm_destroy(&group);
    return 0;
}

int main(void) {
    args_t a;
    snprintf(a.dir, sizeof a.dir, "/tmp/phalanx-shard-memory-%d", (int)getpid());
    px_dir_store_t ds;
    if (px_dir_store_init(&ds, a.dir) != 0) {
        fprintf(stderr, "cannot make the store in %s\n", a.dir);
        return 1;
    }
    pid_t pids[RANKS];
    int codes[RANKS];
    if (px_procs_spawn(RANKS, rank_main, &a, pids) != 0) {
        fprintf(stderr, "cannot start the ranks\n");
        px_dir_store_remove(&ds);
        return 1;
    }
    int bad = px_procs_wait(RANKS, pids, px_now_ms() + 120000, codes, -1);
    px_dir_store_remove(&ds);
    for (int r = 0; r < RANKS; r++)
        if (codes[r] != 0) fprintf(stderr, "rank %d exited %d\n", r, codes[r]);
    printf(bad ? "FAIL\n" : "PASS\n");
    return bad ? 1 : 0;
}
