/* The step protocol (sync mode), one rank's view.
 *
 * A job has P participating replica groups of W ranks; every rank holds a
 * full replica of the model (data parallel inside the group too). Step s:
 *
 *  1. The global batch of step s is B samples, sample i drawn by
 *     px_dataset_fill(seed, s, i): a pure function of the seed and the step,
 *     so a retried step sees the same samples. Group j of P takes samples
 *     [jB/P, (j+1)B/P), its rank r a contiguous part of that; micro-batches
 *     accumulate, each scaled by its size / B, so the sum over all ranks is
 *     the mean gradient of the whole batch whatever P is.
 *  2. One reduction: grads plus a tail [1, s mod 1024, newer-quorum flag,
 *     weighted loss], summed inside the group then across groups. The tail is
 *     the commit vote: every rank sees the same sums and applies the step only
 *     if all P*W ranks took part at the same step. No coordinator message.
 *  3. On any communicator error or timeout the step is discarded, the failure
 *     reported at once, a new quorum requested, and the same step retried.
 *     The agent aborts an in-flight collective as soon as the coordinator
 *     pushes a quorum without one of its peers (a stopped peer costs the
 *     heartbeat timeout, not the collective timeout).
 *  4. After every quorum change the participants exchange (step, state
 *     checksum) over the new communicator. Groups behind, or whose checksum
 *     disagrees with the majority, receive the whole state (params, AdamW
 *     moments, step; the data cursor is the step) from an up-to-date group,
 *     chosen round robin by the quorum rule itself, in checksummed chunks.
 *  5. A newly pushed quorum that adds groups is adopted at a step boundary
 *     that every participant agrees on: whoever has seen it raises the flag
 *     in the tail, and all switch after that step. */
#include "trainer.h"

#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset.h"
#include "gpt.h"
#include "llmc.h"
#include "px_comm.h"
#include "px_hash.h"
#include "px_log.h"
#include "px_time.h"
#include "px_wire.h"
#include "quorum.h"

enum { TAIL_COUNT, TAIL_STEP, TAIL_NEWER, TAIL_LOSS, TAIL_N };
#define HEAL_CHUNK_FLOATS ((size_t)1 << 22) /* 16 MiB: fewer round trips on a fast link */
#define HEAL_MAGIC 0x7068616c6865616cull

typedef struct {
    const px_trainer_config_t *cfg;
    px_agent_t *agent;
    volatile sig_atomic_t *stop;
    px_gpt_t *model;
    px_dataset_t *train, *val;
    int T;
    int *inputs, *targets;
    float *red; /* grads + tail */
    int64_t step;
    /* quorum and communicators; comm pointers guarded by comm_mu for the abort hook */
    px_quorum_t q;
    int64_t qid, store_qid;
    int my_index;
    pthread_mutex_t comm_mu;
    px_comm_t *cross, *intra;
    /* state checksum cache (see state_checksum) */
    uint64_t *hashes; /* 3 * chunks_per_buffer(num_params) chunk hashes */
    uint64_t ck;
    int64_t ck_step;
    int ck_valid;
    /* stats */
    int failures, heals;
    FILE *ledger;
} trainer_t;

/* ---- rendezvous store over the coordinator ----------------------------- */

static int store_set(void *ctx, const char *key, const void *value, size_t len) {
    trainer_t *t = ctx;
    return px_agent_store_set(t->agent, t->store_qid, key, value, len, 5000) == 0 ? 0 : -1;
}

static int store_get(void *ctx, const char *key, void *buf, size_t cap, size_t *len, int timeout_ms) {
    trainer_t *t = ctx;
    int rc = px_agent_store_get(t->agent, t->store_qid, key, buf, cap, len, timeout_ms);
    return rc == 0 ? 0 : rc == 1 ? 1 : -1;
}

/* ---- communicators ----------------------------------------------------- */

static void drop_comms(trainer_t *t) {
    pthread_mutex_lock(&t->comm_mu);
    px_comm_destroy(&t->cross);
    px_comm_destroy(&t->intra);
    pthread_mutex_unlock(&t->comm_mu);
}

/* Agent thread: a pushed quorum without one of our peers means the collective
 * in flight can never finish. Abort it now rather than wait for its timeout. */
static void on_quorum_pushed(void *ctx, const px_quorum_t *nq) {
    trainer_t *t = ctx;
    pthread_mutex_lock(&t->comm_mu);
    if ((t->cross || t->intra) && nq->id > t->qid) {
        for (int i = 0; i < t->q.n; i++) {
            if (px_quorum_find(nq, t->q.groups[i].name) < 0) {
                if (t->cross) px_comm_abort(t->cross);
                if (t->intra) px_comm_abort(t->intra);
                break;
            }
        }
    }
    pthread_mutex_unlock(&t->comm_mu);
}

/* The state digest: one hash per HEAL_CHUNK_FLOATS chunk of params, m and v
 * (in that order), and the state checksum = hash of those chunk hashes and
 * the step. Healing sends the chunk hashes with the data, so the receiver's
 * verification pass also yields the state checksum, and nobody hashes the
 * state twice. Cached per step (the state changes only through a step, a
 * heal, a group sync or a reset, each of which invalidates it). */
static size_t chunks_per_buffer(size_t n) { return (n + HEAL_CHUNK_FLOATS - 1) / HEAL_CHUNK_FLOATS; }

static void chunk_hashes(const float *buf, size_t n, uint64_t *out) {
    size_t nc = chunks_per_buffer(n);
    /* Chunks hash independently: use every core (during a heal or a quorum
     * check the training threads are idle), whatever --threads says. */
    int threads = omp_get_num_procs();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t k = 0; k < nc; k++) {
        size_t off = k * HEAL_CHUNK_FLOATS, len = n - off < HEAL_CHUNK_FLOATS ? n - off : HEAL_CHUNK_FLOATS;
        out[k] = px_hash64(buf + off, len * sizeof(float), off);
    }
}

static uint64_t digest_checksum(const uint64_t *hashes, size_t count, int64_t step) {
    px_hash_t h;
    px_hash_init(&h, 0x5048414c414e58ull);
    px_hash_update(&h, hashes, count * sizeof *hashes);
    px_hash_update(&h, &step, sizeof step);
    return px_hash_final(&h);
}

static uint64_t state_checksum(trainer_t *t) {
    if (t->ck_valid && t->ck_step == t->step) return t->ck;
    size_t n = t->model->num_params, nc = chunks_per_buffer(n);
    chunk_hashes(t->model->params, n, t->hashes);
    chunk_hashes(t->model->m, n, t->hashes + nc);
    chunk_hashes(t->model->v, n, t->hashes + 2 * nc);
    t->ck = digest_checksum(t->hashes, 3 * nc, t->step);
    t->ck_step = t->step;
    t->ck_valid = 1;
    return t->ck;
}

/* ---- healing ----------------------------------------------------------- */

/* Back to the seeded initial state at step 0 (after a torn heal). */
static void reset_state(trainer_t *t) {
    px_gpt_t *fresh = px_gpt_new(&t->model->config, t->cfg->seed);
    if (fresh) {
        size_t n = t->model->num_params;
        memcpy(t->model->params, fresh->params, n * sizeof(float));
        memset(t->model->m, 0, n * sizeof(float));
        memset(t->model->v, 0, n * sizeof(float));
        px_gpt_destroy(&fresh);
    }
    t->step = 0;
    t->ck_valid = 0;
}

/* Fault injection for tests: PX_TEST_HEAL_CHUNK_DELAY_MS slows a heal down
 * (a pause per chunk sent) so that a test can kill a process mid-heal. */
static int heal_chunk_delay_ms(void) {
    const char *v = getenv("PX_TEST_HEAL_CHUNK_DELAY_MS");
    return v ? atoi(v) : 0;
}

typedef struct {
    uint64_t magic, step, n_floats, checksum;
} heal_header_t;

static px_comm_status_t send_buffer(px_comm_t *c, const float *buf, size_t n, int peer, int *tag) {
    int delay = heal_chunk_delay_ms();
    for (size_t off = 0; off < n; off += HEAL_CHUNK_FLOATS) {
        if (delay > 0) px_sleep_ms(delay);
        size_t len = n - off < HEAL_CHUNK_FLOATS ? n - off : HEAL_CHUNK_FLOATS;
        px_comm_status_t st = px_comm_send(c, buf + off, len * sizeof(float), peer, (*tag)++);
        if (st != PX_COMM_OK) return st;
    }
    return PX_COMM_OK;
}

static px_comm_status_t recv_buffer(px_comm_t *c, float *buf, size_t n, int peer, int *tag) {
    for (size_t off = 0; off < n; off += HEAL_CHUNK_FLOATS) {
        size_t len = n - off < HEAL_CHUNK_FLOATS ? n - off : HEAL_CHUNK_FLOATS;
        px_comm_status_t st = px_comm_recv(c, buf + off, len * sizeof(float), peer, (*tag)++);
        if (st != PX_COMM_OK) return st;
    }
    return PX_COMM_OK;
}

/* Header, the three buffers in chunks, then every chunk's hash in one message. */
static int send_state(trainer_t *t, int peer) {
    size_t n = t->model->num_params, nc = chunks_per_buffer(n);
    heal_header_t hdr = {HEAL_MAGIC, (uint64_t)t->step, n, state_checksum(t)};
    int tag = 1;
    px_comm_status_t st = px_comm_send(t->cross, &hdr, sizeof hdr, peer, tag++);
    if (st == PX_COMM_OK) st = send_buffer(t->cross, t->model->params, n, peer, &tag);
    if (st == PX_COMM_OK) st = send_buffer(t->cross, t->model->m, n, peer, &tag);
    if (st == PX_COMM_OK) st = send_buffer(t->cross, t->model->v, n, peer, &tag);
    if (st == PX_COMM_OK) st = px_comm_send(t->cross, t->hashes, 3 * nc * sizeof *t->hashes, peer, tag++);
    return st == PX_COMM_OK ? 0 : -1;
}

/* Checks the received chunks against the sender's hashes; on success the
 * digest (and so the state checksum) is known without another pass. */
static int verify_received(trainer_t *t, const uint64_t *sent, const heal_header_t *hdr, char *why, size_t wlen) {
    size_t n = t->model->num_params, nc = chunks_per_buffer(n);
    chunk_hashes(t->model->params, n, t->hashes);
    chunk_hashes(t->model->m, n, t->hashes + nc);
    chunk_hashes(t->model->v, n, t->hashes + 2 * nc);
    for (size_t k = 0; k < 3 * nc; k++)
        if (t->hashes[k] != sent[k]) {
            snprintf(why, wlen, "chunk %zu of %s failed its checksum", k % nc, k < nc ? "params" : k < 2 * nc ? "m" : "v");
            return -1;
        }
    uint64_t ck = digest_checksum(t->hashes, 3 * nc, (int64_t)hdr->step);
    if (ck != hdr->checksum) {
        snprintf(why, wlen, "state checksum mismatch after transfer");
        return -1;
    }
    t->step = (int64_t)hdr->step;
    t->ck = ck;
    t->ck_step = t->step;
    t->ck_valid = 1;
    return 0;
}

static int recv_state(trainer_t *t, int peer, const char *source) {
    size_t n = t->model->num_params;
    int64_t t0 = px_now_ms();
    px_agent_set_progress(t->agent, t->step, PHALANX__MEMBER_STATE__HEALING, t->qid);
    if (t->cfg->rank == 0)
        px_agent_notify(t->agent, "heal_started", t->qid, t->step, source, 3 * n * sizeof(float), 0, "");
    heal_header_t hdr;
    char why[160] = "";
    int tag = 1;
    int rc = px_comm_recv(t->cross, &hdr, sizeof hdr, peer, tag++) == PX_COMM_OK ? 0 : -1;
    if (rc == 0 && (hdr.magic != HEAL_MAGIC || hdr.n_floats != n)) {
        snprintf(why, sizeof why, "bad heal header (model mismatch?)");
        rc = -1;
    }
    size_t nc = chunks_per_buffer(n);
    uint64_t *sent = rc == 0 ? malloc(3 * nc * sizeof *sent) : NULL;
    px_comm_status_t st = PX_COMM_OK;
    if (rc == 0 && !sent) {
        snprintf(why, sizeof why, "out of memory");
        rc = -1;
    }
    t->ck_valid = 0; /* the buffers are being overwritten */
    if (rc == 0) st = recv_buffer(t->cross, t->model->params, n, peer, &tag);
    if (rc == 0 && st == PX_COMM_OK) st = recv_buffer(t->cross, t->model->m, n, peer, &tag);
    if (rc == 0 && st == PX_COMM_OK) st = recv_buffer(t->cross, t->model->v, n, peer, &tag);
    if (rc == 0 && st == PX_COMM_OK) st = px_comm_recv(t->cross, sent, 3 * nc * sizeof *sent, peer, tag++);
    if (rc == 0 && st != PX_COMM_OK) {
        snprintf(why, sizeof why, "receive failed: %s", px_comm_status_str(st));
        rc = -1;
    }
    if (rc == 0) rc = verify_received(t, sent, &hdr, why, sizeof why);
    free(sent);
    int64_t ms = px_now_ms() - t0;
    if (rc != 0) {
        /* The partial state is garbage: start over from the initial state
         * (step 0) so that it can never be trained on; a later heal replaces it. */
        px_log_warn("heal_failed source=%s quorum_id=%lld reason=\"%s\" (state reset to step 0)", source,
                    (long long)t->qid, why);
        reset_state(t);
        return -1;
    }
    t->heals++;
    double mb = 3.0 * (double)n * sizeof(float) / 1e6;
    px_log_info("heal_finished source=%s quorum_id=%lld step=%lld bytes=%.1fMB ms=%lld rate=%.0fMB/s", source,
                (long long)t->qid, (long long)t->step, mb, (long long)ms, ms > 0 ? mb * 1000.0 / (double)ms : 0.0);
    if (t->cfg->rank == 0) {
        px_agent_notify(t->agent, "heal_finished", t->qid, t->step, source, 3 * n * sizeof(float), (unsigned)ms, "");
        printf("event kind=healed group=%s step=%lld source=%s ms=%lld\n", t->cfg->group, (long long)t->step, source,
               (long long)ms);
        fflush(stdout);
    }
    return 0;
}

/* Every rank of `c` learns every rank's (step, state checksum): out[2*r] is
 * rank r's step, out[2*r+1] its checksum (the bits travel as floats through
 * an allgather, which copies without arithmetic). Returns a malloc'd array
 * of 2 * size values, or NULL on failure. */
static uint64_t *allgather_state(trainer_t *t, px_comm_t *c) {
    int size = px_comm_size(c);
    uint64_t mine[2] = {(uint64_t)t->step, state_checksum(t)};
    uint64_t *all = calloc((size_t)size * 2, sizeof *all);
    if (!all) return NULL;
    if (px_comm_allgather_f32(c, (const float *)(const void *)mine, (float *)(void *)all, 4) != PX_COMM_OK) {
        free(all);
        return NULL;
    }
    return all;
}

/* Inside a group (W > 1): every rank must hold the same state before the
 * groups compare. A failure can leave ranks of one group a step apart (one
 * rank's cross-group ring committed a step, another's did not), so the rank
 * with the highest step (lowest rank among equals) broadcasts its state to
 * the others over the group's communicator. */
static int sync_group(trainer_t *t) {
    int W = t->cfg->ranks_per_group;
    uint64_t *all = allgather_state(t, t->intra);
    if (!all) return -1;
    int root = 0, same = 1;
    for (int r = 1; r < W; r++)
        if (all[2 * r] > all[2 * root]) root = r;
    uint64_t best[2] = {all[2 * root], all[2 * root + 1]};
    for (int r = 0; r < W; r++)
        if (all[2 * r] != best[0] || all[2 * r + 1] != best[1]) same = 0;
    free(all);
    if (same) return 0;
    size_t bytes = t->model->num_params * sizeof(float);
    int64_t step = t->step;
    if (t->cfg->rank != root) t->ck_valid = 0; /* the buffers are being overwritten */
    px_comm_status_t st = px_comm_broadcast(t->intra, &step, sizeof step, root);
    if (st == PX_COMM_OK) st = px_comm_broadcast(t->intra, t->model->params, bytes, root);
    if (st == PX_COMM_OK) st = px_comm_broadcast(t->intra, t->model->m, bytes, root);
    if (st == PX_COMM_OK) st = px_comm_broadcast(t->intra, t->model->v, bytes, root);
    if (st != PX_COMM_OK) {
        if (t->cfg->rank != root) reset_state(t); /* possibly torn */
        return -1;
    }
    t->step = step;
    if (state_checksum(t) != best[1]) {
        px_log_warn("group_sync_failed: state checksum differs from rank %d's after the broadcast", root);
        reset_state(t);
        return -1;
    }
    if (t->cfg->rank != root)
        px_log_info("group_synced from_rank=%d step=%lld", root, (long long)t->step);
    return 0;
}

/* Exchanges (step, checksum) with every participant and heals whoever is
 * behind or divergent. Every rank computes the same plan from the same data. */
static int sync_state(trainer_t *t) {
    if (t->intra && sync_group(t) != 0) return -1;
    int P = t->q.n;
    uint64_t *all = allgather_state(t, t->cross);
    if (!all) return -1;
    px_quorum_candidate_t *c = calloc((size_t)P, sizeof *c);
    if (!c) {
        free(all);
        return -1;
    }
    for (int i = 0; i < P; i++) {
        snprintf(c[i].name, sizeof c[i].name, "%s", t->q.groups[i].name);
        c[i].healthy = c[i].requested = c[i].has_checksum = 1;
        c[i].step = (int64_t)all[2 * i];
        c[i].checksum = all[2 * i + 1];
    }
    free(all);
    px_quorum_t none, plan;
    px_quorum_init(&none);
    px_quorum_init(&plan);
    px_quorum_config_t pc = {1, 0};
    char reason[256];
    int rc = px_quorum_compute(c, P, &none, &pc, 0, &plan, reason, sizeof reason) == 1 ? 0 : -1;
    free(c);
    /* plan is sorted by name, as the quorum is: index i is replica i. */
    for (int h = 0; rc == 0 && h < plan.n; h++) {
        if (!plan.groups[h].heal) continue;
        int s = px_quorum_find(&plan, plan.groups[h].heal_source);
        if (plan.groups[h].divergent && h == t->my_index) {
            px_log_warn("divergence_detected group=%s step=%lld healing_from=%s", t->cfg->group, (long long)t->step,
                        plan.groups[h].heal_source);
            if (t->cfg->rank == 0)
                px_agent_notify(t->agent, "divergence_detected", t->qid, t->step, plan.groups[h].heal_source, 0, 0,
                                "state checksum differs from the majority");
        }
        if (s == t->my_index) rc = send_state(t, h);
        else if (h == t->my_index) rc = recv_state(t, s, plan.groups[h].heal_source);
    }
    px_quorum_free(&plan);
    if (rc == 0 && px_comm_barrier(t->cross) != PX_COMM_OK) rc = -1;
    return rc;
}

/* A group finished the job (committed its last step) while this one is
 * behind: the result exists, and training on could only redo old steps
 * (alone, from the initial state, when no group holds the state any more). */
static int job_finished_elsewhere(trainer_t *t) {
    int64_t f = px_agent_finished_step(t->agent);
    if (f <= t->step) return 0;
    px_log_info("job_finished_elsewhere finished_step=%lld my_step=%lld: leaving", (long long)f, (long long)t->step);
    return 1;
}

/* Joins the next quorum: takes a pushed one that includes us, or asks for
 * one (after a failure, always asks: our communicators are broken). Creates
 * the communicators and brings the state in line. Retries until it works or
 * the worker is stopped. */
static int reconfigure(trainer_t *t, int failed) {
    const px_trainer_config_t *cfg = t->cfg;
    drop_comms(t);
    px_quorum_t nq;
    px_quorum_init(&nq);
    int64_t t0 = px_now_ms();
    for (int attempt = 0; !*t->stop && !job_finished_elsewhere(t); attempt++) {
        px_agent_latest_quorum(t->agent, &nq);
        if (failed || nq.id <= t->qid || px_quorum_find(&nq, cfg->group) < 0) {
            int r = px_agent_request_quorum(t->agent, t->step, t->qid, 0, 1, state_checksum(t), 1000, &nq);
            if (r == 1) continue;
            if (r < 0) {
                px_log_error("cannot join a quorum: %s", px_agent_fatal_error(t->agent)[0] ? px_agent_fatal_error(t->agent) : "agent stopped");
                px_quorum_free(&nq);
                return -1;
            }
        }
        int idx = px_quorum_find(&nq, cfg->group);
        t->store_qid = nq.id;
        px_store_t store = {t, store_set, store_get};
        char prefix[128], err[256] = "";
        snprintf(prefix, sizeof prefix, "q%lld/x%d", (long long)nq.id, cfg->rank);
        px_comm_t *cross = px_comm_new_gloo(&store, prefix, idx, nq.n, cfg->comm_timeout_ms, err, sizeof err);
        px_comm_t *intra = NULL;
        if (cross && cfg->ranks_per_group > 1) {
            snprintf(prefix, sizeof prefix, "q%lld/g%s", (long long)nq.id, cfg->group);
            intra = px_comm_new_gloo(&store, prefix, cfg->rank, cfg->ranks_per_group, cfg->comm_timeout_ms, err,
                                     sizeof err);
        }
        pthread_mutex_lock(&t->comm_mu);
        t->cross = cross;
        t->intra = intra;
        px_quorum_copy(&t->q, &nq);
        t->qid = nq.id;
        t->my_index = idx;
        pthread_mutex_unlock(&t->comm_mu);
        if (!cross || (cfg->ranks_per_group > 1 && !intra)) {
            px_log_warn("rendezvous_failed quorum_id=%lld attempt=%d reason=\"%s\"", (long long)nq.id, attempt, err);
            drop_comms(t);
            failed = 1;
            continue;
        }
        if (sync_state(t) != 0) {
            px_log_warn("state_sync_failed quorum_id=%lld attempt=%d reason=\"%s\"", (long long)nq.id, attempt,
                        px_comm_last_error(t->cross));
            px_agent_report_failure(t->agent, NULL, -1, t->qid, t->step, "state sync failed");
            drop_comms(t);
            failed = 1;
            continue;
        }
        px_agent_set_progress(t->agent, t->step, PHALANX__MEMBER_STATE__HEALTHY, t->qid);
        px_log_info("quorum_joined quorum_id=%lld groups=%d replica=%d step=%lld ms=%lld", (long long)t->qid, t->q.n,
                    idx, (long long)t->step, (long long)(px_now_ms() - t0));
        px_quorum_free(&nq);
        return 0;
    }
    px_quorum_free(&nq);
    return -1;
}

/* ---- one step ---------------------------------------------------------- */

/* Samples [lo, hi) of the global batch that this rank computes. */
static void my_share(const trainer_t *t, int *lo, int *hi) {
    int B = t->cfg->global_batch, P = t->q.n, W = t->cfg->ranks_per_group;
    int glo = (int)((int64_t)t->my_index * B / P), ghi = (int)((int64_t)(t->my_index + 1) * B / P);
    *lo = glo + (int)((int64_t)t->cfg->rank * (ghi - glo) / W);
    *hi = glo + (int)((int64_t)(t->cfg->rank + 1) * (ghi - glo) / W);
}

static float compute_grads(trainer_t *t, int lo, int hi) {
    const px_trainer_config_t *cfg = t->cfg;
    px_gpt_zero_grad(t->model);
    double loss = 0;
    for (int i0 = lo; i0 < hi; i0 += cfg->micro_batch) {
        int n = hi - i0 < cfg->micro_batch ? hi - i0 : cfg->micro_batch;
        px_dataset_fill(t->train, cfg->seed, t->step, i0, n, cfg->global_batch, t->T, t->inputs, t->targets);
        float l = px_gpt_forward(t->model, t->inputs, t->targets, n, t->T);
        px_gpt_backward(t->model, (float)n / (float)cfg->global_batch);
        loss += (double)l * n / cfg->global_batch;
    }
    return (float)loss;
}

static px_comm_status_t reduce(trainer_t *t, size_t n) {
    px_comm_status_t st = PX_COMM_OK;
    if (t->intra) st = px_comm_allreduce_sum_f32(t->intra, t->red, n);
    if (st == PX_COMM_OK) st = px_comm_allreduce_sum_f32(t->cross, t->red, n);
    return st;
}

static float eval_loss(trainer_t *t) {
    if (!t->val || t->cfg->eval_batches <= 0) return NAN;
    double sum = 0;
    for (int b = 0; b < t->cfg->eval_batches; b++) {
        px_dataset_fill_eval(t->val, b, t->cfg->micro_batch, t->T, t->inputs, t->targets);
        sum += px_gpt_forward(t->model, t->inputs, t->targets, t->cfg->micro_batch, t->T);
    }
    return (float)(sum / t->cfg->eval_batches);
}

/* 1: committed; 0: discarded (reconfigure, failed); -1: newer quorum to adopt after commit is signalled via *adopt. */
static int train_step(trainer_t *t, int *adopt, float *loss_out, float *norm_out) {
    const px_trainer_config_t *cfg = t->cfg;
    size_t n = t->model->num_params;
    int lo, hi;
    my_share(t, &lo, &hi);
    float local_loss = compute_grads(t, lo, hi);
    memcpy(t->red, t->model->grads, n * sizeof(float));
    t->red[n + TAIL_COUNT] = 1.0f;
    t->red[n + TAIL_STEP] = (float)(t->step % 1024);
    t->red[n + TAIL_NEWER] = px_agent_known_quorum_id(t->agent) > t->qid ? 1.0f : 0.0f;
    t->red[n + TAIL_LOSS] = local_loss;
    px_comm_status_t st = reduce(t, n + TAIL_N);
    if (st != PX_COMM_OK) {
        const char *why = t->cross ? px_comm_last_error(t->cross) : "no communicator";
        px_log_warn("step_failed step=%lld quorum_id=%lld status=%s reason=\"%s\"", (long long)t->step,
                    (long long)t->qid, px_comm_status_str(st), why);
        px_agent_report_failure(t->agent, NULL, -1, t->qid, t->step, why);
        if (cfg->rank == 0) {
            printf("event kind=step_failed group=%s step=%lld status=%s\n", cfg->group, (long long)t->step,
                   px_comm_status_str(st));
            fflush(stdout);
        }
        return 0;
    }
    float ranks = (float)(t->q.n * cfg->ranks_per_group);
    if (fabsf(t->red[n + TAIL_COUNT] - ranks) > 0.5f ||
        fabsf(t->red[n + TAIL_STEP] - ranks * (float)(t->step % 1024)) > 0.5f) {
        px_log_warn("vote_failed step=%lld quorum_id=%lld count=%.0f expected=%.0f: participants disagree on the step",
                    (long long)t->step, (long long)t->qid, t->red[n + TAIL_COUNT], ranks);
        px_agent_report_failure(t->agent, NULL, -1, t->qid, t->step, "commit vote disagreed");
        return 0;
    }
    memcpy(t->model->grads, t->red, n * sizeof(float));
    *norm_out = px_gpt_clip_grads(t->model, cfg->grad_clip);
    float lr = px_lr_at((int)t->step, cfg->warmup, (int)cfg->steps, cfg->lr, cfg->min_lr);
    px_gpt_adamw_step(t->model, lr, 0.9f, 0.95f, 1e-8f, cfg->weight_decay, (int)t->step + 1);
    *loss_out = t->red[n + TAIL_LOSS];
    *adopt = t->red[n + TAIL_NEWER] > 0.5f;
    if (t->ledger && cfg->rank == 0) {
        fprintf(t->ledger, "step=%lld quorum=%lld group=%s replica=%d of=%d lo=%d hi=%d groups=", (long long)t->step,
                (long long)t->qid, cfg->group, t->my_index, t->q.n, (int)((int64_t)t->my_index * cfg->global_batch / t->q.n),
                (int)((int64_t)(t->my_index + 1) * cfg->global_batch / t->q.n));
        for (int i = 0; i < t->q.n; i++) fprintf(t->ledger, "%s%s", i ? "," : "", t->q.groups[i].name);
        fprintf(t->ledger, "\n");
        fflush(t->ledger);
    }
    t->step++;
    return 1;
}

/* ---- setup and the loop ------------------------------------------------ */

static int setup(trainer_t *t) {
    const px_trainer_config_t *cfg = t->cfg;
    char err[512];
    if (cfg->threads > 0) omp_set_num_threads(cfg->threads);
    px_gpt_config_t mc;
    if (px_gpt_config_preset(cfg->model, &mc) == 0) {
        t->model = px_gpt_new(&mc, cfg->seed);
    } else if (px_gpt_load(cfg->model, &t->model, err, sizeof err) != 0) {
        px_log_error("--model: '%s' is neither a preset (%s) nor a readable model file: %s", cfg->model,
                     px_gpt_preset_names(), err);
        return -1;
    }
    if (!t->model) {
        px_log_error("out of memory creating the model");
        return -1;
    }
    t->T = cfg->seq_len > 0 ? cfg->seq_len : t->model->config.max_seq_len;
    if (t->T > t->model->config.max_seq_len) {
        px_log_error("--seq %d exceeds the model's context %d", t->T, t->model->config.max_seq_len);
        return -1;
    }
    t->train = px_dataset_open(cfg->data, "train", t->model->config.vocab_size, (size_t)t->T + 1, err, sizeof err);
    if (!t->train) {
        px_log_error("--data: %s", err);
        return -1;
    }
    t->val = px_dataset_open(cfg->data, "val", t->model->config.vocab_size, (size_t)t->T + 1, err, sizeof err);
    if (!t->val) px_log_warn("no validation data, eval loss disabled: %s", err);
    size_t mb = (size_t)cfg->micro_batch * (size_t)t->T;
    t->inputs = malloc(mb * sizeof(int));
    t->targets = malloc(mb * sizeof(int));
    t->red = malloc((t->model->num_params + TAIL_N) * sizeof(float));
    t->hashes = malloc(3 * chunks_per_buffer(t->model->num_params) * sizeof *t->hashes);
    if (!t->inputs || !t->targets || !t->red || !t->hashes) {
        px_log_error("out of memory");
        return -1;
    }
    if (cfg->ledger) {
        t->ledger = fopen(cfg->ledger, "a");
        if (!t->ledger) {
            px_log_error("--sample-ledger: cannot open '%s'", cfg->ledger);
            return -1;
        }
    }
    return 0;
}

static void teardown(trainer_t *t) {
    px_agent_set_quorum_hook(t->agent, NULL, NULL);
    drop_comms(t);
    px_gpt_destroy(&t->model);
    px_dataset_destroy(&t->train);
    px_dataset_destroy(&t->val);
    free(t->inputs);
    free(t->targets);
    free(t->red);
    free(t->hashes);
    px_quorum_free(&t->q);
    if (t->ledger) fclose(t->ledger);
    pthread_mutex_destroy(&t->comm_mu);
}

int px_trainer_run(px_agent_t *agent, const px_trainer_config_t *cfg, volatile sig_atomic_t *stop) {
    trainer_t t;
    memset(&t, 0, sizeof t);
    t.cfg = cfg;
    t.agent = agent;
    t.stop = stop;
    t.my_index = -1;
    px_quorum_init(&t.q);
    pthread_mutex_init(&t.comm_mu, NULL);
    if (setup(&t) != 0) {
        teardown(&t);
        return 4;
    }
    px_agent_set_quorum_hook(agent, on_quorum_pushed, &t);
    px_log_info("trainer_started group=%s rank=%d model=%s params=%zu steps=%lld global_batch=%d micro_batch=%d T=%d",
                cfg->group, cfg->rank, cfg->model, t.model->num_params, (long long)cfg->steps, cfg->global_batch,
                cfg->micro_batch, t.T);
    int need = 1, failed = 0, rc = 0;
    float loss = NAN, norm = 0, ev = NAN;
    while (t.step < cfg->steps && !*stop) {
        if (job_finished_elsewhere(&t)) {
            rc = 3;
            break;
        }
        if (need) {
            if (reconfigure(&t, failed) != 0) {
                rc = *stop ? 2 : job_finished_elsewhere(&t) ? 3 : 1;
                break;
            }
            need = failed = 0;
            if (t.step >= cfg->steps) break;
        }
        int64_t t0 = px_now_us();
        int adopt = 0;
        if (!train_step(&t, &adopt, &loss, &norm)) {
            t.failures++;
            need = failed = 1;
            drop_comms(&t);
            continue;
        }
        px_agent_set_progress(agent, t.step, PHALANX__MEMBER_STATE__HEALTHY, t.qid);
        double ms = (double)(px_now_us() - t0) / 1000.0;
        if (cfg->eval_every > 0 && t.step % cfg->eval_every == 0 && t.my_index == 0 && cfg->rank == 0) ev = eval_loss(&t);
        if (cfg->progress && cfg->rank == 0) {
            double tok_s = ms > 0 ? (double)cfg->global_batch * t.T * 1000.0 / ms : 0;
            printf("progress step=%lld loss=%.4f norm=%.3f ms=%.1f tok_s=%.0f groups=%d quorum=%lld group=%s",
                   (long long)t.step, loss, norm, ms, tok_s, t.q.n, (long long)t.qid, cfg->group);
            if (cfg->eval_every > 0 && t.step % cfg->eval_every == 0 && t.my_index == 0) printf(" eval_loss=%.4f", ev);
            printf("\n");
            fflush(stdout);
        }
        if (adopt) need = 1; /* everyone saw the flag: all switch now */
    }
    if (t.step >= cfg->steps) {
        ev = eval_loss(&t);
        uint64_t ck = state_checksum(&t);
        double pn = 0;
        for (size_t i = 0; i < t.model->num_params; i++) pn += (double)t.model->params[i] * t.model->params[i];
        if (cfg->rank == 0) {
            printf("final group=%s steps=%lld loss=%.6f eval_loss=%.6f checksum=%016" PRIx64 " param_norm=%.9g failures=%d heals=%d\n",
                   cfg->group, (long long)t.step, loss, ev, ck, sqrt(pn), t.failures, t.heals);
            fflush(stdout);
            px_agent_notify(agent, "run_finished", t.qid, t.step, "", 0, 0, "");
        }
        if (cfg->save && cfg->rank == 0) {
            char err[256];
            if (px_gpt_save(t.model, cfg->save, err, sizeof err) != 0) px_log_error("--save: %s", err);
        }
        rc = 0;
    } else if (*stop && rc != 3) {
        rc = 2;
    }
    teardown(&t);
    return rc;
}
