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
 *  2. One reduction: grads plus the commit vote's tail (vote.h: count, step
 *     mod 13 and its square, newer-quorum flag, weighted loss), summed inside
 *     the group, checked and relayed, then summed across groups. Every rank
 *     sees the same sums and applies the step only if every rank of every
 *     group voted for the same step. No coordinator message.
 *  3. On any communicator error or timeout the step is discarded, the failure
 *     reported at once, a new quorum requested, and the same step retried.
 *     The agent tells a hook about every newer quorum; it aborts the
 *     collectives in flight when they can no longer finish: the newer quorum
 *     drops one of our peers (or us), or was formed without being pushed to
 *     us (we were fenced out), or we were still joining the old one. A
 *     stopped peer costs the heartbeat timeout, not the collective timeout.
 *  4. After every quorum change the participants bring their state in line
 *     (heal.c): the ranks of a group first, then the groups, where those
 *     behind or divergent receive the whole state from an up-to-date group.
 *     A rendezvous or heal of a quorum that a newer one has replaced is given
 *     up at once (store reads poll the agent's newest quorum id between short
 *     waits), and the worker moves to the newest quorum.
 *  5. A newly pushed quorum that only adds groups is adopted at a step
 *     boundary that every participant agrees on: whoever has seen it raises
 *     the flag in the tail, and all switch after that step. Collectives in
 *     flight are not aborted for it (that would cost a retried step).
 *
 * A sharded group (--fsdp/--tp, parallel/sharded.h) differs in three places:
 * its ranks hold shards, so step 2 reduces only the vote inside the group
 * (the fsdp reduce-scatters already summed the gradients) and the gradient
 * shard across groups between same-coordinate ranks (HSDP); a step commits
 * only after a one-float sum inside the group that confirms every rank got
 * that far (shard_commit); and step 4 first brings the group's ranks to one
 * step (shard_group_sync), then heals groups whole, rank by rank. The
 * collective-by-collective picture is in docs/architecture.md.
 *
 * The device (--device, compute.h) changes none of this. With cuda the
 * model computes on a GPU, the gradients and the vote's tail are reduced by
 * NCCL communicators made like the Gloo ones, and the state moves between
 * the GPU and its host copy at the points that read or write it on the host:
 * checksums, heals, checkpoints, the final report. NCCL moves device memory
 * only, so heals (host buffers) run over Gloo communicators of their own,
 * made next to the NCCL ones (state_cross, state_intra). Sharded groups and
 * --bucket-mb are CPU-only (px_trainer_check).
 *
 * DiLoCo (--mode diloco, section "DiLoCo" below) replaces step 2 for H
 * steps at a time: each group's inner steps reduce inside the group only,
 * and an outer step every H steps averages the pseudo-gradients across
 * groups; the state is then the global
 * parameters, the outer momentum and the group's own moments. A group
 * moves to a newer quorum at its next inner step, keeping its round.
 *
 * --mode auto (section "automatic mode") trains in the mode each quorum
 * announces: the state keeps DiLoCo's four buffers throughout, and its mask
 * of group-own buffers says which mode it is in (it travels with heals).
 * Sync to DiLoCo right after joining a quorum that says diloco; back at the
 * next point where every group's parameters equal the global ones (an
 * outer step, or a round's start), averaging the groups' moments. */
#include "trainer.h"

#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute.h"
#include "dataset.h"
#include "gpt.h"
#include "heal.h"
#include "llmc.h"
#include "mesh_comm.h"
#include "outer_codec.h"
#include "persist.h"
#include "pipeline.h"
#include "px_comm.h"
#include "px_log.h"
#include "px_time.h"
#include "px_wire.h"
#include "quorum.h"
#include "reducer.h"
#include "sharded.h"
#include "train_state.h"
#include "vote.h"

/* A rendezvous read waits in slices this long, so that it notices a newer
 * quorum (the agent's known id) within one slice. */
#define STORE_POLL_MS 200

typedef enum { PHASE_JOINING, PHASE_TRAINING } phase_t;

typedef struct {
    size_t off, len; /* floats of the state's buffers */
    int frag;
} frag_run_t;

/* --outer-overlap: the round whose pseudo-gradients are being reduced on
 * a thread of their own while the next round trains ("Overlapped outer
 * steps" below). */
typedef struct {
    int active;          /* a round's outer step is pending: reduced (or reducing), not applied */
    int running;         /* its thread has not been joined */
    int counted;         /* its bytes counted and its failure logged, once */
    pthread_t thread;
    float *buf;          /* the fragment's pseudo-gradients, packed (st.n floats) */
    size_t m;            /* floats packed */
    int frag;            /* the fragment */
    float weight, loss, scale;
    int64_t from, to;    /* the round's steps */
    uint64_t wire;
    int64_t reduce_us;
    px_comm_status_t status;
} pending_t;

typedef struct {
    const px_trainer_config_t *cfg;
    px_agent_t *agent;
    volatile sig_atomic_t *stop;
    px_gpt_t *model;      /* the replica on the host; owned by shard when sharded */
    px_compute_t *dev;    /* computes with model (cpu) or a GPU copy of it (cuda) */
    px_dataset_t *train, *val;
    /* A sharded group (cfg->fsdp/tp set): this rank's place in the mesh,
     * its shard of the state, and the step whose reduced gradients it holds
     * but has not applied (the group's confirmation failed; see train_step). */
    px_shard_t *shard;
    px_mesh_t mesh;
    px_mesh_coord_t coord;
    px_mesh_comms_t axes;
    px_pipe_t *pipe;      /* a pipeline stage (pp > 1): its schedule's runtime */
    int64_t pending_step;
    float last_norm;      /* the clipping norm of the last step applied */
    double bytes_group, bytes_cross; /* sent by this rank's gradient reductions (ring estimate) */
    px_reducer_t *reducer; /* whole replicas with --bucket-mb: reduction overlapped with the backward */
    int T;
    int *inputs, *targets;
    /* DiLoCo (cfg->mode): the global parameters and the outer momentum, st's
     * params and outer_m (the model's params are the group's local ones),
     * and the inner steps this group has done in the round that starts at
     * st.step. */
    float *global, *outer_m;
    void *outer_scratch; /* the codec's (--outer-dtype bf16, int8), kept across outer steps */
    size_t outer_scratch_bytes;
    double outer_wire;   /* bytes this rank sent for pseudo-gradients */
    int inner;
    int round_full;      /* this round's inner steps all started from its global parameters: it has a round to give */
    int64_t round_samples; /* samples the group's inner steps of this round took (none: nothing learned to give) */
    int64_t outer_steps;
    double round_loss; /* sum of the round's inner losses */
    int64_t round_inner_us; /* wall time of the round's inner steps */
    /* Streaming DiLoCo (cfg->fragments F > 1): this rank's state cut into
     * runs of one fragment each (build_fragments), and which fragments the
     * group trained from their global values since each one's last outer
     * step (frag_full). With F = 1, one run of everything. */
    frag_run_t *runs;
    int nruns;
    unsigned char frag_full[PX_MAX_FRAGMENTS];
    pending_t pend;      /* --outer-overlap: the round in flight */
    /* --mode auto: the mode the state is in (1: DiLoCo), set with st.local
     * (set_state_mode; read by the agent's hook under comm_mu), and the
     * share of step time spent in cross-group communication, reported to
     * the coordinator on the heartbeat (note_comm_share). */
    int running_diloco;
    double comm_share;
    int comm_share_n;
    int64_t step_cross_us; /* this step's time in the cross-group reduction */
    px_train_state_t st; /* views into the model; st.step: steps committed (DiLoCo: the round's start) */
    px_heal_t heal;
    px_persist_t persist;
    /* Quorum and communicators. Written by the trainer thread under comm_mu,
     * read under it by the agent's hook. */
    pthread_mutex_t comm_mu;
    px_quorum_t q;
    int64_t qid;        /* the quorum that q and the communicators belong to */
    int64_t store_qid;  /* the quorum whose rendezvous runs */
    int my_index;
    phase_t phase;
    int64_t aborted_for; /* newest quorum id that aborted our collectives (logged once) */
    int64_t drain_only;  /* a newer quorum that only drops drained groups (its id; 0: none): DiLoCo adopts it at
                            the outer step, with them, instead of at once */
    int finishing;       /* past the last step: the group's own collectives (a sharded group's
                            final eval and report) must not be aborted because another group left */
    px_comm_t *cross, *intra; /* the gradient reduction's (Gloo on cpu, NCCL on cuda) */
    px_comm_t *state_cross, *state_intra; /* cuda: Gloo for heals; NULL on cpu (heals use cross, intra) */
    /* stats */
    int failures;
    FILE *ledger;
} trainer_t;

/* The state is in DiLoCo's mode: always with --mode diloco, as the quorums
 * say with --mode auto (section "Automatic mode"). */
static int diloco(const trainer_t *t) { return t->running_diloco; }

/* The step being computed: its samples and learning rate. */
static int64_t cur_step(const trainer_t *t) { return t->st.step + t->inner; }

/* ---- rendezvous store over the coordinator ----------------------------- */

/* A newer quorum than the one being formed is known: its rendezvous can
 * never complete (its other members moved on to the newer one). */
static int superseded(trainer_t *t, int64_t qid) { return px_agent_known_quorum_id(t->agent) > qid; }

static int store_set(void *ctx, const char *key, const void *value, size_t len) {
    trainer_t *t = ctx;
    return px_agent_store_set(t->agent, t->store_qid, key, value, len, 5000) == PX_STORE_OK ? 0 : -1;
}

/* Waits for key in slices of STORE_POLL_MS, giving up (-1) as soon as the
 * quorum is superseded; a stale-quorum refusal means the same. */
static int store_get(void *ctx, const char *key, void *buf, size_t cap, size_t *len, int timeout_ms) {
    trainer_t *t = ctx;
    int64_t deadline = px_now_ms() + timeout_ms;
    for (;;) {
        if (superseded(t, t->store_qid)) return -1;
        int64_t left = deadline - px_now_ms();
        int slice = left <= 0 ? 0 : left < STORE_POLL_MS ? (int)left : STORE_POLL_MS;
        px_store_status_t rc = px_agent_store_get(t->agent, t->store_qid, key, buf, cap, len, slice);
        if (rc != PX_STORE_MISSING) return rc == PX_STORE_OK ? 0 : -1;
        if (slice == 0 || px_now_ms() >= deadline) return 1;
    }
}

/* ---- communicators ----------------------------------------------------- */

static void abort_all_locked(trainer_t *t) {
    if (t->cross) px_comm_abort(t->cross);
    if (t->intra) px_comm_abort(t->intra);
    if (t->state_cross) px_comm_abort(t->state_cross);
    if (t->state_intra) px_comm_abort(t->state_intra);
    px_mesh_comms_abort(&t->axes);
}

/* --outer-overlap: waits for the thread reducing the pending round's
 * pseudo-gradients. 1 when a round is pending and its reduction succeeded
 * on this rank. */
static int pending_join(trainer_t *t) {
    if (t->pend.running) {
        pthread_join(t->pend.thread, NULL);
        t->pend.running = 0;
    }
    if (t->pend.active && !t->pend.counted) {
        t->pend.counted = 1;
        t->bytes_cross += (double)t->pend.wire;
        t->outer_wire += (double)t->pend.wire;
        if (t->pend.status != PX_COMM_OK)
            px_log_warn("outer_overlap_failed step=%lld quorum_id=%lld reason=\"%s\"", (long long)t->pend.to,
                        (long long)t->qid, px_comm_last_error(t->cross));
    }
    return t->pend.active && t->pend.status == PX_COMM_OK;
}

/* The pending round's outer step is not applied: every group drops it
 * alike (its fragment's local progress stays, for the fragment's next
 * outer step). */
static void pending_forget(trainer_t *t, const char *why) {
    if (!t->pend.active) return;
    px_log_warn("outer_step_dropped step=%lld from=%lld quorum_id=%lld reason=\"%s\"", (long long)t->pend.to,
                (long long)t->pend.from, (long long)t->qid, why);
    t->pend.active = 0;
}

static void drop_comms(trainer_t *t) {
    if (t->pend.running) { /* its collective returns once aborted; then the communicators can go */
        pthread_mutex_lock(&t->comm_mu);
        px_comm_abort(t->cross);
        pthread_mutex_unlock(&t->comm_mu);
        pending_join(t);
    }
    pending_forget(t, "its communicators are gone");
    if (t->shard || t->reducer) { /* the communication thread lets go of them first */
        pthread_mutex_lock(&t->comm_mu);
        abort_all_locked(t);
        pthread_mutex_unlock(&t->comm_mu);
        if (t->shard) px_shard_set_comms(t->shard, NULL, NULL, NULL);
        if (t->pipe) px_pipe_set_links(t->pipe, NULL);
        if (t->reducer) px_reducer_set_comms(t->reducer, NULL, NULL);
    }
    pthread_mutex_lock(&t->comm_mu);
    px_comm_destroy(&t->cross);
    px_comm_destroy(&t->intra);
    px_comm_destroy(&t->state_cross);
    px_comm_destroy(&t->state_intra);
    px_mesh_comms_destroy(&t->axes);
    t->phase = PHASE_JOINING;
    pthread_mutex_unlock(&t->comm_mu);
}

/* Why the collectives of quorum t->qid can never finish, now that `latest`
 * was pushed and quorum id `known` heard of; NULL when they can, with
 * *drained the groups of ours it leaves out as drained ones. Caller holds
 * comm_mu. */
static const char *stale_reason(const trainer_t *t, const px_quorum_t *latest, int64_t known, char *buf,
                                size_t len, int *drained) {
    *drained = 0;
    if (known <= t->qid) return NULL;
    if (t->phase == PHASE_JOINING) {
        snprintf(buf, len, "quorum %lld replaced the one being joined", (long long)known);
        return buf;
    }
    if (latest->id < known) {
        snprintf(buf, len, "quorum %lld formed without being pushed to us (fenced out)", (long long)known);
        return buf;
    }
    for (int i = 0; i < t->q.n; i++) {
        const char *g = t->q.groups[i].name;
        if (px_quorum_find(latest, g) >= 0) continue;
        /* A group drained (a planned leave) takes part until the boundary. */
        if (!(latest->id == t->qid + 1 && px_quorum_is_draining(latest, g))) {
            snprintf(buf, len, "quorum %lld drops group %s", (long long)latest->id, g);
            return buf;
        }
        (*drained)++;
    }
    return NULL; /* it only adds groups, or drops drained ones: adopted at a step boundary */
}

/* Aborts the communicators (caller holds comm_mu). */
static void abort_comms_locked(trainer_t *t, int64_t known, const char *why) {
    abort_all_locked(t);
    if (known > t->aborted_for) {
        t->aborted_for = known;
        px_log_info("collectives_aborted quorum_id=%lld newer=%lld reason=\"%s\"", (long long)t->qid,
                    (long long)known, why);
    }
}

/* Agent thread: a newer quorum was pushed or heard of. With DiLoCo a
 * quorum that drops other groups but keeps ours aborts only the cross-group
 * communicators: this group's inner steps go on, and its next outer step
 * fails at once and moves to the newer quorum. Once a group has finished the
 * job nothing is aborted: the quorum that drops it (it left) would cut the
 * others' last collective, which it finished, so the part it sent is there
 * (a peer that died instead fails the collective on its closed connection). */
static void on_quorum_news(void *ctx, const px_quorum_t *latest, int64_t known) {
    trainer_t *t = ctx;
    char buf[200];
    if (px_agent_finished_step(t->agent) == t->cfg->steps) return;
    pthread_mutex_lock(&t->comm_mu);
    int drained = 0;
    const char *why = (t->cross || t->intra) && !t->finishing
                          ? stale_reason(t, latest, known, buf, sizeof buf, &drained)
                          : NULL;
    int others_only = diloco(t) && t->phase == PHASE_TRAINING && latest->id == known &&
                      px_quorum_find(latest, t->cfg->group) >= 0;
    /* only drained groups gone, none new */
    t->drain_only = !why && drained > 0 && t->phase == PHASE_TRAINING && latest->id == known &&
                            latest->n == t->q.n - drained
                        ? known
                        : 0;
    if (why && others_only) {
        if (t->cross) px_comm_abort(t->cross);
        if (t->state_cross) px_comm_abort(t->state_cross);
        if (known > t->aborted_for) {
            t->aborted_for = known;
            px_log_info("cross_group_aborted quorum_id=%lld newer=%lld reason=\"%s\": inner steps go on",
                        (long long)t->qid, (long long)known, why);
        }
    } else if (why) {
        abort_comms_locked(t, known, why);
    }
    pthread_mutex_unlock(&t->comm_mu);
}

/* Quorum `known` only drops drained groups (on_quorum_news): every group,
 * the drained ones included, finishes the round and its outer step in the
 * quorum it is in, and moves after it (the vote's newer-quorum flag): a
 * group that moved at an inner step would fail the outer step of one that
 * had started it. */
static int drain_only_newer(trainer_t *t, int64_t known) {
    pthread_mutex_lock(&t->comm_mu);
    int yes = t->drain_only == known;
    pthread_mutex_unlock(&t->comm_mu);
    return yes;
}

/* A group finished the job (committed its last step) while this one is
 * behind: the result exists, and training on could only redo old steps
 * (alone, from the initial state, when no group holds the state any more). */
static int job_finished_elsewhere(trainer_t *t) {
    int64_t f = px_agent_finished_step(t->agent);
    if (f <= t->st.step) return 0;
    px_log_info("job_finished_elsewhere finished_step=%lld my_step=%lld: leaving", (long long)f,
                (long long)t->st.step);
    return 1;
}

/* The coordinator drains this group (phalanxctl drain): called where the
 * group is needed by nobody, that is wherever it would join a quorum (the
 * others adopted the one without it after a step we took part in, or we are
 * in none). */
static int drained(trainer_t *t) {
    if (!px_agent_draining(t->agent)) return 0;
    px_log_info("group_drained group=%s rank=%d step=%lld quorum_id=%lld: leaving the job (planned)", t->cfg->group,
                t->cfg->rank, (long long)t->st.step, (long long)t->qid);
    return 1;
}

/* The heals' communicators: the reduction's, or on a GPU Gloo ones. */
static px_comm_t *state_cross(const trainer_t *t) { return t->state_cross ? t->state_cross : t->cross; }
static px_comm_t *state_intra(const trainer_t *t) { return t->state_intra ? t->state_intra : t->intra; }

/* A mesh axis's communicator: on the compute's device (NCCL on a GPU). */
static px_comm_t *axis_comm(void *ctx, const px_store_t *store, const char *prefix, int rank, int size, int timeout_ms,
                            char *err, size_t errlen) {
    return px_compute_comm_new(ctx, store, prefix, rank, size, timeout_ms, err, errlen);
}

/* Rendezvous for quorum nq: the cross-group communicator (rank = replica
 * index) and, with W > 1, the group's; on a GPU then the same two on Gloo
 * for heals (prefixes h and hg). Publishes them to the hook. 0 when all
 * exist (they may have been aborted already: the next collective says). */
static int rendezvous(trainer_t *t, const px_quorum_t *nq, int idx, char *err, size_t errlen) {
    const px_trainer_config_t *cfg = t->cfg;
    px_store_t store = {t, store_set, store_get};
    char prefix[128];
    t->store_qid = nq->id;
    snprintf(prefix, sizeof prefix, "q%lld/x%d", (long long)nq->id, cfg->rank);
    px_comm_t *cross = px_compute_comm_new(t->dev, &store, prefix, idx, nq->n, cfg->comm_timeout_ms, err, errlen);
    px_comm_t *intra = NULL, *s_cross = NULL, *s_intra = NULL;
    px_mesh_comms_t axes;
    memset(&axes, 0, sizeof axes);
    int axes_ok = !t->shard;
    if (cross && cfg->ranks_per_group > 1) {
        snprintf(prefix, sizeof prefix, "q%lld/g%s", (long long)nq->id, cfg->group);
        intra = px_compute_comm_new(t->dev, &store, prefix, cfg->rank, cfg->ranks_per_group, cfg->comm_timeout_ms, err,
                                    errlen);
        if (intra && t->shard)
            axes_ok = px_mesh_comms_new(&store, &t->mesh, cfg->rank, prefix, cfg->comm_timeout_ms, axis_comm, t->dev,
                                        &axes, err, errlen) == 0;
    }
    int state_ok = px_compute_comms_take_host(t->dev);
    if (!state_ok && cross && (cfg->ranks_per_group == 1 || intra)) {
        snprintf(prefix, sizeof prefix, "q%lld/h%d", (long long)nq->id, cfg->rank);
        s_cross = px_comm_new_gloo(&store, prefix, idx, nq->n, cfg->comm_timeout_ms, err, errlen);
        if (s_cross && cfg->ranks_per_group > 1) {
            snprintf(prefix, sizeof prefix, "q%lld/hg%s", (long long)nq->id, cfg->group);
            s_intra = px_comm_new_gloo(&store, prefix, cfg->rank, cfg->ranks_per_group, cfg->comm_timeout_ms, err,
                                       errlen);
        }
        state_ok = s_cross && (cfg->ranks_per_group == 1 || s_intra);
    }
    px_comm_set_rate_limit(cross, cfg->cross_link_mbps * 1e6 / 8); /* the slow link between groups, heals too */
    px_comm_set_rate_limit(s_cross, cfg->cross_link_mbps * 1e6 / 8);
    pthread_mutex_lock(&t->comm_mu);
    t->cross = cross;
    t->intra = intra;
    t->state_cross = s_cross;
    t->state_intra = s_intra;
    t->axes = axes;
    int copied = px_quorum_copy(&t->q, nq) == 0;
    t->qid = nq->id;
    t->my_index = idx;
    t->phase = PHASE_JOINING;
    /* A newer quorum heard of before the hook could see these communicators. */
    if ((cross || intra || s_cross) && superseded(t, nq->id))
        abort_comms_locked(t, px_agent_known_quorum_id(t->agent), "superseded during rendezvous");
    pthread_mutex_unlock(&t->comm_mu);
    if (t->shard) px_shard_set_comms(t->shard, axes.axis[PX_MESH_FSDP], axes.axis[PX_MESH_TP], axes.axis[PX_MESH_PP]);
    if (t->pipe) px_pipe_set_links(t->pipe, axes.link);
    if (t->reducer) px_reducer_set_comms(t->reducer, intra, cross);
    if (!copied) snprintf(err, errlen, "out of memory copying quorum %lld", (long long)nq->id);
    return cross && (cfg->ranks_per_group == 1 || intra) && axes_ok && state_ok && copied ? 0 : -1;
}

/* Applies the reduced gradients of step `step` to the shard, clipped by
 * the group's global norm. */
static void shard_apply(trainer_t *t, int64_t step, float norm) {
    const px_trainer_config_t *cfg = t->cfg;
    float lr = px_lr_at((int)step, cfg->warmup, (int)cfg->steps, cfg->lr, cfg->min_lr);
    px_shard_step(t->shard, norm, cfg->grad_clip, lr, cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay, (int)step + 1);
    px_compute_state_changed(t->dev); /* a GPU's host copy is now stale */
    t->last_norm = norm;
    t->pending_step = -1;
}

static void host_state(trainer_t *t);

/* A sharded group's ranks to one step. A failure can leave them a step
 * apart: every rank's cross-group reduction of step s succeeded (so each
 * holds its final gradient shard), then the group's confirmation finished
 * on some ranks and failed on others. Those that finished applied step s;
 * the others hold it pending and apply it now, with the norm the others
 * used: the same arithmetic, so the same bits. A rank behind without
 * pending gradients cannot catch up; the group then reports itself behind
 * (heal.c, group_comm) and receives every shard from another group. */
static int shard_group_sync(trainer_t *t) {
    int W = t->cfg->ranks_per_group;
    uint64_t mine[3] = {(uint64_t)t->st.step, (uint64_t)t->pending_step, 0};
    double norm = t->last_norm;
    memcpy(&mine[2], &norm, sizeof norm);
    uint64_t *all = calloc((size_t)W * 3, sizeof *all);
    if (!all ||
        px_comm_allgather_f32(state_intra(t), (const float *)(const void *)mine, (float *)(void *)all, 6) != PX_COMM_OK) {
        free(all);
        return -1;
    }
    int top = 0;
    for (int r = 1; r < W; r++)
        if ((int64_t)all[3 * r] > (int64_t)all[3 * top]) top = r;
    int64_t s = (int64_t)all[3 * top];
    if (t->st.step == s - 1 && t->pending_step == s - 1) {
        memcpy(&norm, &all[3 * top + 2], sizeof norm);
        shard_apply(t, t->st.step, (float)norm);
        host_state(t); /* the heal that follows reads (and a GPU's upload then writes back) the host copy */
        t->st.step++;
        px_log_info("group_caught_up step=%lld norm=%.6g from_rank=%d", (long long)t->st.step, norm, top);
    }
    for (int r = 0; r < W; r++) {
        int64_t step = (int64_t)all[3 * r], pending = (int64_t)all[3 * r + 1];
        if (step != s && !(step == s - 1 && pending == s - 1)) {
            px_log_warn("group_inconsistent rank=%d step=%lld top_step=%lld: the group is healed whole from another group",
                        r, (long long)step, (long long)s);
            break;
        }
    }
    free(all);
    return 0;
}

/* Starts bringing the host copy of the state up to date (a GPU's state is
 * downloaded when an optimizer step made the copy stale), without holding
 * training: the download runs while the next step computes. Nothing reads
 * the copy before px_compute_host_wait (a save's saver: wait_host). */
static void host_state_begin(trainer_t *t) {
    if (px_compute_host_stale(t->dev)) {
        px_persist_fence(&t->persist); /* the download overwrites the state a save may be copying */
        /* and the digest cached at this step (a DiLoCo round's inner steps keep st.step) describes the old copy */
        t->heal.ck_valid = 0;
    }
    px_compute_host_state_begin(t->dev);
}

/* The host copy up to date: before it is read on the host. */
static void host_state(trainer_t *t) {
    host_state_begin(t);
    px_compute_host_wait(t->dev);
}

/* After committing a step: the checkpoint due at it, if this group writes. */
static void checkpoint_commit(trainer_t *t) {
    if (px_persist_due(&t->persist, &t->st, &t->q)) host_state_begin(t);
    px_persist_committed(&t->persist, &t->st, &t->q);
}

static void wait_host(void *ctx) {
    trainer_t *t = ctx;
    px_compute_host_wait(t->dev);
}

/* Before an optimizer step, the first write to the state since the last
 * commit: a save's overlapped copy of it must be done. A GPU's step writes
 * the device's state, not the host copy the saver reads: no wait. */
static void state_write_fence(trainer_t *t) {
    if (px_compute_state_on_host(t->dev)) px_persist_fence(&t->persist);
}

/* Every rank of the group, then every group, to one state. */
static int heal_all(trainer_t *t) {
    if (t->shard) {
        if (shard_group_sync(t) != 0) return -1;
        t->heal.group_comm = state_intra(t);
    } else if (state_intra(t) && px_heal_sync_group(&t->heal, state_intra(t)) != 0) {
        return -1;
    }
    return px_heal_sync_quorum(&t->heal, state_cross(t), &t->q, t->my_index);
}

static void follow_healed_mode(trainer_t *t);

/* heal_all on the host state; a GPU takes the result, whatever happened
 * (a failed heal at step 0 rebuilt the initial state on the host). */
static int sync_state(trainer_t *t) {
    px_persist_fence(&t->persist); /* a heal may overwrite the state a save is copying */
    host_state(t);
    int rc = heal_all(t);
    follow_healed_mode(t);
    px_compute_host_written(t->dev);
    return rc;
}

enum { JOINED, JOIN_FAILED, JOIN_SUPERSEDED };

/* Where a quorum change's time went (the quorum_joined line): the old
 * communicators dropped and the state brought to the host, the last
 * attempt's rendezvous (communicators made) and state sync (checksums,
 * heals). On a GPU the first two include NCCL's abort and init. */
typedef struct {
    int64_t teardown_ms, rendezvous_ms, sync_ms;
} join_times_t;

/* One attempt at quorum nq: rendezvous, then state sync. */
static int join(trainer_t *t, const px_quorum_t *nq, int attempt, join_times_t *jt) {
    int idx = px_quorum_find(nq, t->cfg->group);
    char err[256] = "";
    int64_t t0 = px_now_ms();
    int rv = rendezvous(t, nq, idx, err, sizeof err);
    jt->rendezvous_ms = px_now_ms() - t0;
    jt->sync_ms = 0;
    if (rv != 0) {
        int sup = superseded(t, nq->id);
        px_log_warn("rendezvous_%s quorum_id=%lld attempt=%d newest=%lld reason=\"%s\"", sup ? "superseded" : "failed",
                    (long long)nq->id, attempt, (long long)px_agent_known_quorum_id(t->agent), err);
        drop_comms(t);
        return sup ? JOIN_SUPERSEDED : JOIN_FAILED;
    }
    t0 = px_now_ms();
    int sv = sync_state(t);
    jt->sync_ms = px_now_ms() - t0;
    if (sv != 0) {
        int sup = superseded(t, nq->id);
        px_log_warn("state_sync_%s quorum_id=%lld attempt=%d newest=%lld reason=\"%s\"", sup ? "superseded" : "failed",
                    (long long)nq->id, attempt, (long long)px_agent_known_quorum_id(t->agent),
                    px_comm_last_error(state_cross(t)));
        if (!sup) px_agent_report_failure(t->agent, NULL, -1, t->qid, t->st.step, "state sync failed");
        drop_comms(t);
        return sup ? JOIN_SUPERSEDED : JOIN_FAILED;
    }
    pthread_mutex_lock(&t->comm_mu);
    t->phase = PHASE_TRAINING;
    pthread_mutex_unlock(&t->comm_mu);
    return JOINED;
}

/* Joins the next quorum: takes a pushed one that includes us, or asks for
 * one (after a failure, always asks: our communicators are broken). Creates
 * the communicators and brings the state in line. Retries until it works or
 * the worker is stopped; a superseded attempt moves on to the newest quorum
 * without reporting a failure. */
static int reconfigure(trainer_t *t, int failed) {
    const px_trainer_config_t *cfg = t->cfg;
    join_times_t jt = {0, 0, 0};
    int64_t t0 = px_now_ms();
    drop_comms(t);
    host_state(t); /* for the checksum the coordinator gets */
    jt.teardown_ms = px_now_ms() - t0;
    px_quorum_t nq;
    px_quorum_init(&nq);
    for (int attempt = 0; !*t->stop && !job_finished_elsewhere(t) && !px_agent_draining(t->agent); attempt++) {
        if (px_agent_latest_quorum(t->agent, &nq) != 0) { /* out of memory: ask the coordinator instead */
            px_quorum_free(&nq);
            px_quorum_init(&nq);
        }
        if (failed || nq.id <= t->qid || px_quorum_find(&nq, cfg->group) < 0) {
            px_quorum_request_t r =
                px_agent_request_quorum(t->agent, t->st.step, t->qid, 0, 1, px_heal_checksum(&t->heal), 1000, &nq);
            if (r == PX_QUORUM_TIMED_OUT) continue;
            if (r == PX_QUORUM_GAVE_UP) {
                const char *fatal = px_agent_fatal_error(t->agent);
                px_log_error("cannot join a quorum: %s", fatal[0] ? fatal : "agent stopped");
                px_quorum_free(&nq);
                return -1;
            }
        }
        if (nq.n > PX_VOTE_MAX_MEMBERS) {
            px_log_error("quorum %lld has %d groups: the commit vote is exact for at most %d", (long long)nq.id, nq.n,
                         PX_VOTE_MAX_MEMBERS);
            px_quorum_free(&nq);
            return -1;
        }
        int rc = join(t, &nq, attempt, &jt);
        if (rc == JOINED) {
            px_persist_joined(&t->persist, &t->q);
            px_agent_set_progress(t->agent, t->st.step, PHALANX__MEMBER_STATE__HEALTHY, t->qid);
            px_log_info("quorum_joined quorum_id=%lld groups=%d replica=%d step=%lld ms=%lld teardown_ms=%lld "
                        "rendezvous_ms=%lld sync_ms=%lld", (long long)t->qid, t->q.n, t->my_index,
                        (long long)t->st.step, (long long)(px_now_ms() - t0), (long long)jt.teardown_ms,
                        (long long)jt.rendezvous_ms, (long long)jt.sync_ms);
            px_quorum_free(&nq);
            return 0;
        }
        failed = rc == JOIN_FAILED;
    }
    px_quorum_free(&nq);
    return -1;
}

/* ---- one step ---------------------------------------------------------- */

/* The group's share of a step's global batch: samples [jB/P, (j+1)B/P). */
static int batch_of_group(const trainer_t *t) {
    int B = t->cfg->global_batch, P = t->q.n;
    return (int)((int64_t)(t->my_index + 1) * B / P) - (int)((int64_t)t->my_index * B / P);
}

/* The samples a step's gradient is the mean over: the global batch, or
 * with DiLoCo the group's share of it (its inner steps are its own). */
static int batch_of(const trainer_t *t) {
    if (!diloco(t)) return t->cfg->global_batch;
    int G = batch_of_group(t);
    return G > 0 ? G : 1; /* a group without samples (more groups than samples) computes nothing */
}

/* Samples [lo, hi) of the global batch that this rank computes. */
static void my_share(const trainer_t *t, int *lo, int *hi) {
    int B = t->cfg->global_batch, P = t->q.n, W = t->cfg->ranks_per_group, part = t->cfg->rank;
    if (t->shard) { /* fsdp ranks split the group's samples; tp ranks share them */
        W = t->mesh.size[PX_MESH_FSDP];
        part = t->coord.c[PX_MESH_FSDP];
    }
    int glo = (int)((int64_t)t->my_index * B / P), ghi = (int)((int64_t)(t->my_index + 1) * B / P);
    *lo = glo + (int)((int64_t)part * (ghi - glo) / W);
    *hi = glo + (int)((int64_t)(part + 1) * (ghi - glo) / W);
}

_Static_assert(PX_VOTE_N <= PX_GPT_GRADS_SPARE, "the vote's tail must fit in the grads' spare room");

/* Bytes this rank sends in ring all-reduces of `group` floats inside the
 * group and `cross` floats across groups. */
static void count_bytes(trainer_t *t, size_t group, size_t cross) {
    int W = t->cfg->ranks_per_group;
    t->bytes_group += 2.0 * (W - 1) / W * (double)group * sizeof(float);
    t->bytes_cross += 2.0 * (t->q.n - 1) / t->q.n * (double)cross * sizeof(float);
}

/* The share of step time spent in cross-group communication, averaged over
 * recent steps and put on the heartbeat: what the coordinator's --mode
 * auto compares with its --auto-comm-share. */
static void note_comm_share(trainer_t *t, double comm_us, double step_us) {
    double s = step_us > 0 ? comm_us / step_us : 0;
    s = s < 0 ? 0 : s > 1 ? 1 : s;
    t->comm_share = t->comm_share_n++ ? 0.8 * t->comm_share + 0.2 * s : s;
    px_agent_set_comm_share(t->agent, (float)t->comm_share);
}

/* A step's cross-group sum, timed for the comm share (note_comm_share). */
static px_comm_status_t cross_reduce(trainer_t *t, float *buf, size_t n) {
    int64_t t0 = px_now_us();
    px_comm_status_t st = px_comm_allreduce_sum_f32(t->cross, buf, n);
    t->step_cross_us += px_now_us() - t0;
    return st;
}

/* The grads and the vote's tail, which sits in the grads' spare room right
 * after them (PX_GPT_GRADS_SPARE), reduced in place: summed inside the group,
 * the group's vote checked and relayed as one contribution (vote.h), then
 * summed across groups. A failed reduction leaves partial sums in grads;
 * the retried step zeroes them first. */
static px_comm_status_t reduce(trainer_t *t, size_t n) {
    /* On a GPU buf is device memory and the tail moves between the host and
     * buf + n around each reduction (compute.h); on the CPU it is there. */
    float *buf = px_compute_grads(t->dev), *tail = px_compute_tail(t->dev);
    if (t->shard) { /* the grads are reduced inside the group already (fsdp reduce-scatters): only the vote is,
                     * on the host (over Gloo on a GPU too) */
        count_bytes(t, 0, n + PX_VOTE_N); /* (the 5-float in-group vote sum is left out, as the confirmation) */
        px_comm_status_t st = px_comm_allreduce_sum_f32(state_intra(t), tail, PX_VOTE_N);
        if (st != PX_COMM_OK) return st;
        px_vote_relay(tail, t->cfg->ranks_per_group, t->st.step);
        px_compute_tail_put(t->dev);
        st = cross_reduce(t, buf, n + PX_VOTE_N);
        if (st == PX_COMM_OK) px_compute_tail_get(t->dev);
        return st;
    }
    count_bytes(t, n + PX_VOTE_N, n + PX_VOTE_N);
    px_compute_tail_put(t->dev);
    if (t->intra) {
        px_comm_status_t st = px_comm_allreduce_sum_f32(t->intra, buf, n + PX_VOTE_N);
        if (st != PX_COMM_OK) return st;
        px_compute_tail_get(t->dev);
        px_vote_relay(tail, t->cfg->ranks_per_group, t->st.step);
        px_compute_tail_put(t->dev);
    }
    px_comm_status_t st = cross_reduce(t, buf, n + PX_VOTE_N);
    if (st == PX_COMM_OK) px_compute_tail_get(t->dev);
    return st;
}

/* Micro-batches every rank of a sharded group runs this step: enough for
 * the largest fsdp share of the group's samples (at least one). */
static int shard_rounds(const trainer_t *t) {
    int B = t->cfg->global_batch, P = t->q.n, F = t->mesh.size[PX_MESH_FSDP];
    int G = (int)((int64_t)(t->my_index + 1) * B / P) - (int)((int64_t)t->my_index * B / P);
    int most = (G + F - 1) / F, rounds = (most + t->cfg->micro_batch - 1) / t->cfg->micro_batch;
    return rounds > 0 ? rounds : 1;
}

/* The vote's tail filled (this rank's loss share) and the reducer told
 * that the next backward is the step's last. */
static void arm_reducer(trainer_t *t, float loss) {
    px_vote_fill(px_compute_tail(t->dev), t->st.step, px_agent_known_quorum_id(t->agent) > t->qid, loss);
    px_reducer_arm(t->reducer, t->cfg->ranks_per_group, t->st.step);
}

/* A pipeline's micro-batch k of M over this rank's samples [lo, hi): the
 * share cut into M nearly equal runs; an empty one is a padding micro-batch
 * (one sample, no weight), so that every fsdp rank runs M of them. */
typedef struct {
    trainer_t *t;
    int lo, hi, M;
    int eval; /* evaluation batches: validation data, weight 1 */
} pipe_batches_t;

static int pipe_fill(void *ctx, int k, px_pipe_mb_t *mb) {
    pipe_batches_t *c = ctx;
    trainer_t *t = c->t;
    const px_trainer_config_t *cfg = t->cfg;
    if (c->eval) {
        px_dataset_fill_eval(t->val, k, cfg->micro_batch, t->T, t->inputs, t->targets);
        *mb = (px_pipe_mb_t){t->inputs, t->targets, cfg->micro_batch, 1.0f};
        return 0;
    }
    int i0 = c->lo + (int)((int64_t)k * (c->hi - c->lo) / c->M), i1 = c->lo + (int)((int64_t)(k + 1) * (c->hi - c->lo) / c->M);
    int n = i1 - i0, at = i0;
    float scale = 1.0f;
    if (n <= 0) { /* padding: any valid sample, no weight */
        n = 1, scale = 0.0f;
        at = c->lo < cfg->global_batch ? c->lo : 0;
    }
    px_dataset_fill(t->train, cfg->seed, cur_step(t), at, n, cfg->global_batch, t->T, t->inputs, t->targets);
    *mb = (px_pipe_mb_t){t->inputs, t->targets, n, scale * (float)n / (float)batch_of(t)};
    return 0;
}

/* The two copies of the tied embedding (unit 0 on the first and the last
 * stage) get the sum of their gradients, over the pp axis: the first stage
 * sends, then receives; the last receives, then sends. */
static int tie_embeddings(trainer_t *t) {
    int P = t->mesh.size[PX_MESH_PP], s = t->coord.c[PX_MESH_PP];
    if (P == 1) return 0;
    return px_shard_tie_outer(t->shard, t->axes.axis[PX_MESH_PP], s == 0 ? P - 1 : 0, s == 0);
}

/* A pipeline stage's part of the step (compute_grads). */
static int pipeline_grads(trainer_t *t, int lo, int hi, float *loss_out) {
    char err[256];
    int M = t->cfg->microbatches ? t->cfg->microbatches : t->mesh.size[PX_MESH_PP];
    if (px_pipe_set_microbatches(t->pipe, M, err, sizeof err) != 0) {
        px_log_error("%s", err);
        return -1;
    }
    px_shard_zero_grad(t->shard);
    pipe_batches_t c = {t, lo, hi, M, 0};
    double loss = 0;
    if (px_pipe_step(t->pipe, pipe_fill, &c, &loss) != 0 || px_shard_last_error(t->shard)[0] || tie_embeddings(t) != 0)
        return -1;
    /* the last stage has the loss; tp ranks compute the same samples: one of them reports it */
    *loss_out = t->coord.c[PX_MESH_TP] == 0 ? (float)loss : 0.0f;
    return 0;
}

/* This rank's gradients of samples [lo, hi) into the grads (the model's,
 * or the shard's); *loss its share of the batch's mean loss. -1 when a
 * sharded group's collective failed. */
static int compute_grads(trainer_t *t, int lo, int hi, float *loss_out) {
    const px_trainer_config_t *cfg = t->cfg;
    if (t->pipe) return pipeline_grads(t, lo, hi, loss_out);
    px_compute_zero_grad(t->dev);
    double loss = 0;
    /* The fsdp ranks of a group must run as many forwards and backwards
     * (each one a sequence of collectives) although their shares of the
     * samples may differ by one or be empty: a rank short of micro-batches
     * runs one sample with a loss scale of 0 (zero gradients) instead. */
    int rounds = (hi - lo + cfg->micro_batch - 1) / cfg->micro_batch;
    if (t->shard) rounds = shard_rounds(t);
    float B = (float)batch_of(t);
    for (int r = 0, i0 = lo; r < rounds; r++, i0 += cfg->micro_batch) {
        int n = hi - i0 < cfg->micro_batch ? hi - i0 : cfg->micro_batch;
        float scale = 1.0f;
        int at = i0;
        if (n <= 0) { /* padding round: any valid sample, no weight */
            n = 1, scale = 0.0f;
            at = lo < cfg->global_batch ? lo : 0;
        }
        px_dataset_fill(t->train, cfg->seed, cur_step(t), at, n, cfg->global_batch, t->T, t->inputs, t->targets);
        float l = px_compute_forward(t->dev, t->inputs, t->targets, n, t->T);
        if (t->shard && px_shard_last_error(t->shard)[0]) return -1;
        loss += (double)l * n / B * scale;
        if (t->reducer && i0 + n >= hi) arm_reducer(t, (float)loss); /* the last backward reduces as it goes */
        px_compute_backward(t->dev, scale * (float)n / B);
        if (t->shard && px_shard_last_error(t->shard)[0]) return -1;
    }
    /* tp ranks compute the same samples: one of them reports the loss */
    *loss_out = t->shard && t->coord.c[PX_MESH_TP] != 0 ? 0.0f : (float)loss;
    if (t->reducer) {
        if (lo == hi) { /* no samples for this rank: zero gradients, in the same buckets as the others' */
            arm_reducer(t, 0.0f);
            px_reducer_release_all(t->reducer);
        }
        count_bytes(t, t->st.n + PX_VOTE_N, t->st.n + PX_VOTE_N);
        return px_reducer_finish(t->reducer);
    }
    return 0;
}

static float eval_loss(trainer_t *t) {
    if (!t->val || t->cfg->eval_batches <= 0) return NAN;
    double sum = 0;
    if (t->pipe) { /* through the stages; the last one's sum (each of its ranks has it) to the whole group, on the
                    * host (over Gloo on a GPU too) */
        pipe_batches_t c = {t, 0, 0, 0, 1};
        if (px_pipe_forward(t->pipe, pipe_fill, &c, t->cfg->eval_batches, &sum) != 0) return NAN;
        int last = t->coord.c[PX_MESH_PP] == t->mesh.size[PX_MESH_PP] - 1;
        float s = last && t->coord.c[PX_MESH_FSDP] == 0 && t->coord.c[PX_MESH_TP] == 0 ? (float)sum : 0.0f;
        if (px_comm_allreduce_sum_f32(state_intra(t), &s, 1) != PX_COMM_OK) return NAN;
        return s / (float)t->cfg->eval_batches;
    }
    for (int b = 0; b < t->cfg->eval_batches; b++) {
        px_dataset_fill_eval(t->val, b, t->cfg->micro_batch, t->T, t->inputs, t->targets);
        sum += px_compute_forward(t->dev, t->inputs, t->targets, t->cfg->micro_batch, t->T);
    }
    return (float)(sum / t->cfg->eval_batches);
}

/* Why a step's collectives failed. */
static const char *failure_reason(trainer_t *t) {
    if (t->shard && px_shard_last_error(t->shard)[0]) return px_shard_last_error(t->shard);
    if (t->reducer && px_reducer_error(t->reducer)[0]) return px_reducer_error(t->reducer);
    if (t->intra && px_comm_health(t->intra) != PX_COMM_OK) return px_comm_last_error(t->intra);
    return t->cross ? px_comm_last_error(t->cross) : "no communicator";
}

/* A sharded group commits only when every rank holds its final gradient
 * shard: after the cross-group reduction, one small in-group sum (which
 * also carries each rank's part of the squared gradient norm for clipping).
 * A rank that finishes it applies the step; one that does not keeps the
 * gradients pending (shard_group_sync). 0 with *norm, or -1. */
static int shard_commit(trainer_t *t, float *norm) {
    float sumsq = (float)px_shard_grad_sumsq(t->shard);
    t->pending_step = t->st.step;
    if (px_comm_allreduce_sum_f32(state_intra(t), &sumsq, 1) != PX_COMM_OK) return -1;
    *norm = sqrtf(sumsq);
    shard_apply(t, t->st.step, *norm);
    return 0;
}

/* 1: committed (*adopt: every rank saw a newer quorum, switch now); 0: discarded. */
static int train_step(trainer_t *t, int *adopt, float *loss_out, float *norm_out) {
    const px_trainer_config_t *cfg = t->cfg;
    size_t n = t->st.n;
    int lo, hi;
    my_share(t, &lo, &hi);
    float local_loss = 0;
    float *tail = px_compute_tail(t->dev);
    px_comm_status_t st = PX_COMM_ERROR;
    t->step_cross_us = 0;
    if (compute_grads(t, lo, hi, &local_loss) == 0) {
        if (t->reducer) { /* reduced during the backward */
            st = PX_COMM_OK;
        } else {
            px_vote_fill(tail, t->st.step, px_agent_known_quorum_id(t->agent) > t->qid, local_loss);
            st = reduce(t, n);
        }
    }
    if (st != PX_COMM_OK) {
        const char *why = failure_reason(t);
        px_log_warn("step_failed step=%lld quorum_id=%lld status=%s reason=\"%s\"", (long long)t->st.step,
                    (long long)t->qid, px_comm_status_str(st), why);
        px_agent_report_failure(t->agent, NULL, -1, t->qid, t->st.step, why);
        if (cfg->rank == 0) {
            printf("event kind=step_failed group=%s step=%lld status=%s\n", cfg->group, (long long)t->st.step,
                   px_comm_status_str(st));
            fflush(stdout);
        }
        return 0;
    }
    if (!px_vote_passed(tail, t->q.n, t->st.step)) {
        px_log_warn("vote_failed step=%lld quorum_id=%lld count=%.0f sum=%.0f sum_sq=%.0f groups=%d: participants "
                    "disagree on the step", (long long)t->st.step, (long long)t->qid, tail[PX_VOTE_COUNT],
                    tail[PX_VOTE_STEP], tail[PX_VOTE_STEP_SQ], t->q.n);
        px_agent_report_failure(t->agent, NULL, -1, t->qid, t->st.step, "commit vote disagreed");
        return 0;
    }
    state_write_fence(t);
    if (t->shard) {
        if (shard_commit(t, norm_out) != 0) {
            px_log_warn("step_unconfirmed step=%lld quorum_id=%lld reason=\"%s\": gradients kept pending",
                        (long long)t->st.step, (long long)t->qid, failure_reason(t));
            px_agent_report_failure(t->agent, NULL, -1, t->qid, t->st.step, failure_reason(t));
            return 0;
        }
    } else {
        float lr = px_lr_at((int)t->st.step, cfg->warmup, (int)cfg->steps, cfg->lr, cfg->min_lr);
        /* a step whose state the commit saves takes the snapshot as it goes */
        size_t part = 0;
        px_ckpt_pass_t *pass = px_compute_state_on_host(t->dev) ? px_persist_pass(&t->persist, &t->st, &t->q, &part) : NULL;
        if (pass)
            *norm_out = px_compute_clip_adamw_parts(t->dev, cfg->grad_clip, lr, cfg->beta1, cfg->beta2, cfg->eps,
                                                    cfg->weight_decay, (int)t->st.step + 1, part, px_persist_visit, pass);
        else
            *norm_out = px_compute_clip_adamw(t->dev, cfg->grad_clip, lr, cfg->beta1, cfg->beta2, cfg->eps,
                                              cfg->weight_decay, (int)t->st.step + 1);
        px_persist_passed(&t->persist, pass, t->st.step + 1);
    }
    *loss_out = tail[PX_VOTE_LOSS];
    *adopt = tail[PX_VOTE_NEWER] > 0.5f;
    if (t->ledger && cfg->rank == 0) {
        fprintf(t->ledger, "step=%lld quorum=%lld group=%s replica=%d of=%d lo=%d hi=%d groups=", (long long)t->st.step,
                (long long)t->qid, cfg->group, t->my_index, t->q.n, (int)((int64_t)t->my_index * cfg->global_batch / t->q.n),
                (int)((int64_t)(t->my_index + 1) * cfg->global_batch / t->q.n));
        for (int i = 0; i < t->q.n; i++) fprintf(t->ledger, "%s%s", i ? "," : "", t->q.groups[i].name);
        fprintf(t->ledger, "\n");
        fflush(t->ledger);
    }
    t->st.step++;
    return 1;
}

/* ---- DiLoCo ------------------------------------------------------------ */

/* Inner steps of the round starting at st.step: H, or fewer in the job's
 * last round. */
static int round_len(const trainer_t *t) {
    int64_t left = t->cfg->steps - t->st.step, L = t->cfg->inner_steps / t->cfg->fragments;
    return left < L ? (int)left : (int)L;
}

/* Streaming DiLoCo: a round is H/F inner steps, and its outer step syncs
 * one fragment, in turn: the one of the round starting at `start`. Every
 * fragment so comes every H steps, the fragments' outer steps staggered by
 * H/F. (F = 1: fragment 0, every parameter, every round.) */
static int fragment_of_round(const trainer_t *t, int64_t start) {
    return (int)(start / (t->cfg->inner_steps / t->cfg->fragments) % t->cfg->fragments);
}

/* The fragments as runs of this rank's state: layer l in fragment l mod F
 * (strided, so that every fragment holds layers from the whole depth), the
 * embeddings and the final norm in fragment 0. A whole replica's layers are
 * strided through llm.c's tensor-major layout (one run per tensor and
 * layer); a sharded rank's units lie one after another (sharded.h: unit 0
 * the embeddings, unit 1 + l layer l's piece). 0, or -1 when out of memory. */
static int build_fragments(trainer_t *t) {
    int F = t->cfg->fragments, L = t->model->config.num_layers;
    int cap = t->shard ? L + 1 : PX_GPT_NUM_TENSORS * L + 4;
    if (!(t->runs = calloc((size_t)cap, sizeof *t->runs))) return -1;
    if (F == 1) {
        t->runs[t->nruns++] = (frag_run_t){0, t->st.n, 0};
        return 0;
    }
    if (t->shard) {
        for (int u = 0; u <= L; u++) {
            size_t a = px_shard_unit_offset(t->shard, u), e = u < L ? px_shard_unit_offset(t->shard, u + 1) : t->st.n;
            if (e > a) t->runs[t->nruns++] = (frag_run_t){a, e - a, u == 0 ? 0 : (u - 1) % F};
        }
        return 0;
    }
    size_t sizes[PX_GPT_NUM_TENSORS], off = 0;
    px_gpt_tensor_sizes(&t->model->config, sizes);
    for (int k = 0; k < PX_GPT_NUM_TENSORS; off += sizes[k], k++) {
        if (k == PX_WTE || k == PX_WPE || k == PX_LNFW || k == PX_LNFB) {
            t->runs[t->nruns++] = (frag_run_t){off, sizes[k], 0};
            continue;
        }
        for (int l = 0; l < L; l++)
            t->runs[t->nruns++] = (frag_run_t){off + (size_t)l * (sizes[k] / (size_t)L), sizes[k] / (size_t)L, l % F};
    }
    return 0;
}

/* After the local parameters were set to the global ones at st.step (a
 * round's start) other than at an outer step: a fragment's inner progress
 * is whole only if its last outer step was right there (or at the job's
 * start); the others give nothing until theirs. */
static void reset_fragments(trainer_t *t) {
    int F = t->cfg->fragments, L = t->cfg->inner_steps / F;
    int last = t->st.step >= L ? fragment_of_round(t, t->st.step - L) : -1;
    for (int p = 0; p < F; p++) t->frag_full[p] = F == 1 || t->st.step == 0 || p == last;
}

/* The group's local parameters (this rank's shard of them in a sharded
 * group), st.n floats on the host: on a GPU the mirror of the device's, so
 * their readers and writers bracket themselves with local_read and
 * local_written. */
static float *local_params(trainer_t *t) { return t->shard ? px_shard_bufs(t->shard)->params : t->model->params; }

/* Host room for an outer step's pseudo-gradients (st.n floats) and its
 * tail after them (PX_GPT_GRADS_SPARE): the host model's or shard's
 * gradient buffer. On the CPU that is where the gradients are computed (an
 * outer step comes after the round's last inner step has used them); on a
 * GPU, whose gradients are device memory, it is otherwise unused. Outer
 * steps therefore reduce over the host communicators (state_cross and
 * state_intra: Gloo on a GPU, the reduction's own on the CPU): they carry
 * 1/H of sync's traffic, through host memory. */
static float *host_grads(trainer_t *t) { return t->shard ? px_shard_bufs(t->shard)->grads : t->model->grads; }

/* Before the host reads the local parameters or the moments (a GPU's
 * mirror downloaded when an inner step made it stale), and after it wrote
 * them (the GPU takes params, m and v back). No-ops on the CPU, and before
 * the compute exists (setup writes the host state it then uploads). */
static void local_read(trainer_t *t) {
    if (t->dev) host_state(t);
}
static void local_written(trainer_t *t) {
    if (t->dev) px_compute_host_written(t->dev);
}

/* The round's bookkeeping from its start. */
static void new_round(trainer_t *t) {
    t->inner = 0;
    t->round_full = 1;
    t->round_samples = 0;
    t->round_loss = 0;
    t->round_inner_us = 0;
}

/* A new round (or the current one again) from the global parameters. */
static void start_round(trainer_t *t) {
    local_read(t); /* the moments go back up with the parameters */
    memcpy(local_params(t), t->global, t->st.n * sizeof(float));
    local_written(t);
    reset_fragments(t);
    new_round(t);
}

/* An outer step syncs fragment p, or every fragment (SYNC_ALL). */
enum { SYNC_ALL = -1 };
static int synced(const frag_run_t *run, int p) { return p == SYNC_ALL || run->frag == p; }

/* The group trained fragment p (every one: SYNC_ALL) from its global
 * values since its last outer step. */
static int whole_fragment(const trainer_t *t, int p) {
    for (int q = 0; q < t->cfg->fragments; q++)
        if ((p == SYNC_ALL || q == p) && !t->frag_full[q]) return 0;
    return 1;
}

/* The next round after an outer step that synced fragment p: its local
 * parameters from its new global ones (F = 1: all of them). */
static void next_round(trainer_t *t, int p) {
    local_read(t);
    float *lp = local_params(t);
    for (int r = 0; r < t->nruns; r++)
        if (synced(&t->runs[r], p))
            memcpy(lp + t->runs[r].off, t->global + t->runs[r].off, t->runs[r].len * sizeof(float));
    local_written(t);
    for (int q = 0; q < t->cfg->fragments; q++)
        if (p == SYNC_ALL || q == p) t->frag_full[q] = 1;
    new_round(t);
}

/* After joining a quorum: where the groups are in the round. Groups that
 * kept their round go on from where they are (they adopted the quorum
 * within an inner step or two of each other); one that starts the round
 * (a joiner, a healed or restarted group) while others are k steps in
 * skips to step k with nothing to give, so that all reach the outer step
 * together rather than the others waiting a round in its collective. Its
 * steps up to there still train (on its shares), and are dropped at the
 * outer step. The furthest group's inner steps (0: every group is at the
 * round's start), or -1 when the cross-group all-gather failed. */
static int align_round(trainer_t *t) {
    int P = t->q.n;
    float mine = (float)t->inner, *all = malloc((size_t)P * sizeof *all);
    if (!all) return -1;
    int rc = px_comm_allgather_f32(state_cross(t), &mine, all, 1) == PX_COMM_OK ? 0 : -1;
    int k = 0;
    for (int i = 0; rc == 0 && i < P; i++)
        if ((int)all[i] > k) k = (int)all[i];
    free(all);
    if (rc == 0 && t->inner == 0 && k > 0) {
        start_round(t);
        t->inner = k < round_len(t) ? k : round_len(t);
        t->round_full = 0;
        px_log_info("round_joined step=%lld inner=%d: the others are that far into the round; this group gives "
                    "nothing at its outer step", (long long)t->st.step, t->inner);
    }
    return rc == 0 ? k : -1;
}

/* One inner step: the group's share of step cur_step's samples, reduced
 * inside the group only (its ranks split them) with a group-local vote,
 * then AdamW on the local parameters. 1: done; 0: the group's collective
 * failed (reported). */
static int inner_step(trainer_t *t, float *loss_out, float *norm_out) {
    const px_trainer_config_t *cfg = t->cfg;
    size_t n = t->st.n;
    int64_t s = cur_step(t);
    int lo, hi, W = cfg->ranks_per_group;
    my_share(t, &lo, &hi);
    float local_loss = 0, *tail = px_compute_tail(t->dev), sumsq = 0;
    px_comm_status_t st = compute_grads(t, lo, hi, &local_loss) == 0 ? PX_COMM_OK : PX_COMM_ERROR;
    px_vote_fill(tail, s, 0, local_loss);
    if (st == PX_COMM_OK && t->shard) { /* the fsdp reduce-scatters summed the gradients: the vote, then the norm
                                         * (host scalars: over Gloo on a GPU) */
        st = px_comm_allreduce_sum_f32(state_intra(t), tail, PX_VOTE_N);
        sumsq = (float)px_shard_grad_sumsq(t->shard);
        if (st == PX_COMM_OK) st = px_comm_allreduce_sum_f32(state_intra(t), &sumsq, 1);
    } else if (st == PX_COMM_OK && t->intra) { /* the gradients and the tail after them, where they are computed */
        t->bytes_group += 2.0 * (W - 1) / W * (double)(n + PX_VOTE_N) * sizeof(float);
        px_compute_tail_put(t->dev);
        st = px_comm_allreduce_sum_f32(t->intra, px_compute_grads(t->dev), n + PX_VOTE_N);
        if (st == PX_COMM_OK) px_compute_tail_get(t->dev);
    }
    if (st != PX_COMM_OK || !px_vote_passed(tail, W, s)) {
        const char *why = st != PX_COMM_OK ? failure_reason(t) : "the group's ranks disagree on the step";
        px_log_warn("inner_step_failed step=%lld quorum_id=%lld reason=\"%s\"", (long long)s, (long long)t->qid, why);
        px_agent_report_failure(t->agent, NULL, -1, t->qid, t->st.step, why);
        return 0;
    }
    state_write_fence(t);
    if (t->shard) {
        shard_apply(t, s, sqrtf(sumsq));
        *norm_out = t->last_norm;
    } else {
        float lr = px_lr_at((int)s, cfg->warmup, (int)cfg->steps, cfg->lr, cfg->min_lr);
        *norm_out = px_compute_clip_adamw(t->dev, cfg->grad_clip, lr, cfg->beta1, cfg->beta2, cfg->eps,
                                          cfg->weight_decay, (int)s + 1);
    }
    *loss_out = tail[PX_VOTE_LOSS];
    t->round_loss += tail[PX_VOTE_LOSS];
    t->round_samples += batch_of_group(t);
    t->inner++;
    t->heal.ck_valid = 0; /* the moments moved while the step (the round's start) did not: the cached digest is stale */
    return 1;
}

/* The pseudo-gradients g[n] reduced across groups: summed in fp32
 * (*scale 1), or averaged through the codec in bf16 or int8 (*scale the
 * groups: the mean times it is the sum), bitwise the same on every group.
 * *wire: the bytes this rank sent. */
static px_comm_status_t outer_reduce(trainer_t *t, float *g, size_t n, uint64_t *wire, float *scale) {
    px_outer_dtype_t dt = (px_outer_dtype_t)t->cfg->outer_dtype;
    int R = t->q.n;
    if (dt == PX_OUTER_FP32) {
        *wire = (uint64_t)(2.0 * (R - 1) / R * (double)n * sizeof(float));
        *scale = 1.0f;
        return px_comm_allreduce_sum_f32(state_cross(t), g, n);
    }
    size_t need = px_outer_scratch_bytes(dt, n, R);
    if (need > t->outer_scratch_bytes) {
        free(t->outer_scratch);
        t->outer_scratch_bytes = 0;
        if (!(t->outer_scratch = aligned_alloc(64, (need + 63) & ~(size_t)63))) {
            px_comm_abort(state_cross(t)); /* the others are in the collective: let them fail now */
            return PX_COMM_ERROR;
        }
        t->outer_scratch_bytes = need;
    }
    char err[200];
    *scale = (float)R;
    px_comm_status_t st = px_outer_allreduce_mean(state_cross(t), g, n, dt, t->outer_scratch, t->outer_scratch_bytes, wire,
                                                  err, sizeof err);
    if (st != PX_COMM_OK) px_log_warn("outer_reduce_failed dtype=%s reason=\"%s\"", px_outer_dtype_name(dt), err);
    return st;
}

static int leaving(const trainer_t *t);

/* The outer step's tail: the vote, then (--outer-overlap) whether the
 * pending round's reduction succeeded, reduced in the group with the vote,
 * then the group's weight, reduced across groups only. */
enum { OUTER_PENDING = PX_VOTE_N, OUTER_WEIGHT, OUTER_TAIL };
_Static_assert(OUTER_TAIL <= PX_GPT_GRADS_SPARE, "the outer step's tail must fit in the grads' spare room");

/* The mean pseudo-gradients d (packed: fragment p's runs in order, times
 * inv their sum) update those global parameters by SGD with Nesterov
 * momentum, the same arithmetic on every group:
 *   u = mu u + d;  global -= lr (d + mu u) */
static void outer_update(trainer_t *t, int p, const float *d, float inv) {
    float lr = t->cfg->outer_lr, mu = t->cfg->outer_momentum;
    size_t k = 0;
    for (int r = 0; r < t->nruns; r++) {
        const frag_run_t *run = &t->runs[r];
        if (!synced(run, p)) continue;
        float *u = t->outer_m + run->off, *gl = t->global + run->off;
        const float *dk = d + k;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < run->len; i++) {
            float di = dk[i] * inv;
            u[i] = mu * u[i] + di;
            gl[i] -= lr * (di + mu * u[i]);
        }
        k += run->len;
    }
    t->outer_steps++;
}

/* The log line, event and progress line of an applied outer step: the
 * round [from, to) of fragment p, m floats reduced in reduce_us. */
static void outer_report(trainer_t *t, int64_t from, int64_t to, int p, float weight, float loss, uint64_t wire,
                         int64_t reduce_us, size_t m, int overlapped) {
    const px_trainer_config_t *cfg = t->cfg;
    /* What sync would spend: the fp32 reduction of a vector this size (the
     * time scaled from the bytes sent), against itself plus an inner step. */
    double fp32 = 2.0 * (t->q.n - 1) / t->q.n * (double)m * sizeof(float);
    double sync_us = wire > 0 ? (double)reduce_us * fp32 / (double)wire : 0;
    note_comm_share(t, sync_us, sync_us + (t->inner > 0 ? (double)t->round_inner_us / t->inner : 0));
    char frag[32];
    if (p == SYNC_ALL) snprintf(frag, sizeof frag, "all/%d", cfg->fragments);
    else snprintf(frag, sizeof frag, "%d/%d", p, cfg->fragments);
    px_log_info("outer_step step=%lld from=%lld outer=%lld fragment=%s quorum_id=%lld groups=%d contributors=%.0f "
                "loss=%.6f overlapped=%d", (long long)to, (long long)from, (long long)t->outer_steps, frag,
                (long long)t->qid, t->q.n, weight, loss, overlapped);
    if (t->my_index == 0 && cfg->rank == 0) { /* one line and one event per outer step */
        char groups[PX_REASON_MAX / 2] = "";
        for (int i = 0, used = 0; i < t->q.n && used < (int)sizeof groups - 1; i++)
            used += snprintf(groups + used, sizeof groups - (size_t)used, "%s%s", i ? "," : "", t->q.groups[i].name);
        char detail[PX_REASON_MAX];
        snprintf(detail, sizeof detail, "outer=%lld contributors=%.0f dtype=%s fragment=%s groups=%s%s",
                 (long long)t->outer_steps, weight, px_outer_dtype_name((px_outer_dtype_t)cfg->outer_dtype), frag,
                 groups, overlapped ? " overlapped" : "");
        px_agent_notify(t->agent, "outer_step", t->qid, to, "", wire, 0, detail);
        px_progress_outer(cfg->progress_format, cfg->group, to, t->outer_steps, weight, groups, loss,
                          (unsigned long long)wire, frag);
    }
}

/* ---- Overlapped outer steps (--outer-overlap) ----------------------------
 *
 * Streaming DiLoCo's overlap of communication with compute. A round's outer
 * step does its small tail reduction (commit vote, weights, newer-quorum
 * flag) at once, as always; its pseudo-gradients are then packed into
 * pend.buf and reduced across groups on a thread of their own while the
 * next round trains (inner steps use the group's communicators, never the
 * cross-group one). At that round's end the thread is joined and the tail
 * carries, summed, whether every rank's reduction succeeded: only then does
 * every group apply it (outer_update), and each of the fragment's local
 * parameters, a round further along, is set halfway between its local value
 * and its new global one (the paper's mixing, alpha 0.5). Otherwise every
 * group drops it; the fragment's local progress stays for its next turn.
 * Synchronous still, after applying the one pending: the job's last outer
 * step, auto's way back to sync, one where every group saw a newer quorum
 * (the communicators change), and one a checkpoint is due at (a checkpoint
 * never misses a committed round's outer step). A failed collective, a
 * quorum change or a stop abandons a pending round (drop_comms): a stop's
 * checkpoint then holds the round's steps without that fragment's update. */

static void *pending_reduce(void *arg) {
    trainer_t *t = arg;
    int64_t t0 = px_now_us();
    t->pend.status = outer_reduce(t, t->pend.buf, t->pend.m, &t->pend.wire, &t->pend.scale);
    t->pend.reduce_us = px_now_us() - t0;
    return NULL;
}

/* Every group's pending reduction succeeded: applied as described above. */
static void pending_apply(trainer_t *t) {
    int p = t->pend.frag;
    px_persist_fence(&t->persist); /* the global parameters and outer momentum change */
    outer_update(t, p, t->pend.buf, t->pend.scale / t->pend.weight);
    local_read(t);
    float *lp = local_params(t);
    for (int r = 0; r < t->nruns; r++) {
        const frag_run_t *run = &t->runs[r];
        if (!synced(run, p)) continue;
        float *lo = lp + run->off;
        const float *gl = t->global + run->off;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < run->len; i++) lo[i] = 0.5f * (lo[i] + gl[i]);
    }
    local_written(t);
    t->heal.ck_valid = 0; /* the state changed at an unchanged step */
    t->pend.active = 0;
    outer_report(t, t->pend.from, t->pend.to, p, t->pend.weight, t->pend.loss, t->pend.wire, t->pend.reduce_us,
                 t->pend.m, 1);
}

/* Whether this round's outer step, ending at step `to`, must be
 * synchronous (see above). The same answer on every rank of every group:
 * from the flags, the steps, the quorum's mode and the tail's sums, never
 * from which group writes checkpoints (its ranks must all take the same
 * path: the group's collectives pair up). A writer's catch-up save waits
 * for a synchronous outer step (the main loop saves nothing while a round
 * is pending). */
static int outer_must_sync(const trainer_t *t, int newer, int p, int64_t to) {
    const px_trainer_config_t *cfg = t->cfg;
    if (!cfg->outer_overlap || newer || p == SYNC_ALL || to >= cfg->steps || leaving(t)) return 1;
    int64_t every = cfg->checkpoint_every;
    return cfg->checkpoint_dir && cfg->checkpoint_dir[0] && every > 0 && to / every > t->st.step / every;
}

/* The outer step, when a group's round is done (with weight 0 for a group
 * that joined the round late, see align_round, or has not trained the
 * fragment whole). First a small reduction of the tail: the commit vote on
 * the round's start, the newer-quorum flag, each group's weight (1 with a
 * full round) and loss, and with --outer-overlap whether the pending
 * round's reduction succeeded everywhere. Then, when some group has a round
 * to give, the pseudo-gradients (global minus local parameters) of the
 * round's fragment (every parameter without --fragments; every fragment at
 * the job's last outer step and where auto goes back to sync), packed and
 * summed across groups in the grads; their mean updates those global
 * parameters (outer_update), and every group starts the next round with
 * those local parameters set to them (or, overlapped, the reduction goes to
 * a thread and is applied at the next round's end). 1: done (*adopt: every
 * group saw a newer quorum); 0: a collective failed (reported): the round's
 * inner progress is kept, and the outer step is retried in the next quorum. */
static int outer_step(trainer_t *t, int *adopt, float *loss_out) {
    const px_trainer_config_t *cfg = t->cfg;
    size_t n = t->st.n;
    int W = cfg->ranks_per_group, H = round_len(t), F = cfg->fragments, p = fragment_of_round(t, t->st.step);
    /* the job's last outer step (every group ends with the global model), and the one where --mode auto goes
     * back to sync (which needs every local parameter at its global value): every fragment */
    if (F > 1 && (t->st.step + H >= cfg->steps || leaving(t))) p = SYNC_ALL;
    int pend_ok = pending_join(t);
    local_read(t);
    float *g = host_grads(t), *tail = g + n, *lp = local_params(t);
    float w = t->inner == H && H > 0 && t->round_full && whole_fragment(t, p) && t->round_samples > 0 ? 1.0f : 0.0f;
    px_vote_fill(tail, t->st.step, px_agent_known_quorum_id(t->agent) > t->qid,
                 cfg->rank == 0 && w > 0 ? (float)(t->round_loss / H) : 0.0f);
    tail[OUTER_WEIGHT] = w;
    tail[OUTER_PENDING] = pend_ok ? 1.0f : 0.0f;
    px_comm_status_t st = PX_COMM_OK;
    if (state_intra(t) && (st = px_comm_allreduce_sum_f32(state_intra(t), tail,
                                                         PX_VOTE_N + (cfg->outer_overlap ? 1 : 0))) == PX_COMM_OK) {
        px_vote_relay(tail, W, t->st.step);
        tail[OUTER_PENDING] = tail[OUTER_PENDING] > W - 0.5f ? 1.0f : 0.0f; /* every rank of the group */
    }
    if (st == PX_COMM_OK) st = px_comm_allreduce_sum_f32(state_cross(t), tail, OUTER_TAIL);
    int passed = st == PX_COMM_OK && px_vote_passed(tail, t->q.n, t->st.step);
    float weight = tail[OUTER_WEIGHT], loss = weight > 0 ? tail[PX_VOTE_LOSS] / weight : NAN;
    int newer = tail[PX_VOTE_NEWER] > 0.5f;
    t->bytes_cross += 2.0 * (t->q.n - 1) / t->q.n * OUTER_TAIL * sizeof(float);
    if (passed && t->pend.active) { /* the pending round first: every group alike */
        if (tail[OUTER_PENDING] > t->q.n - 0.5f) pending_apply(t);
        else pending_forget(t, "its reduction failed on some rank");
    }
    int overlap = passed && weight > 0 && !outer_must_sync(t, newer, p, t->st.step + H);
    uint64_t wire = 0;
    float scale = 1.0f; /* what turns the reduced vector into the sum over groups */
    int64_t reduce_us = 0;
    size_t m = 0; /* the fragment's floats, packed at the start of g (overlapped: of pend.buf) */
    if (passed && weight > 0) {
        float *dst = overlap ? t->pend.buf : g;
        for (int r = 0; r < t->nruns; r++) {
            const frag_run_t *run = &t->runs[r];
            if (!synced(run, p)) continue;
            const float *gl = t->global + run->off, *lo = lp + run->off;
            float *out = dst + m;
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < run->len; i++) out[i] = w > 0 ? gl[i] - lo[i] : 0.0f;
            m += run->len;
        }
        if (overlap) {
            t->pend = (pending_t){.active = 1, .buf = t->pend.buf, .m = m, .frag = p, .weight = weight, .loss = loss,
                                  .scale = 1.0f, .from = t->st.step, .to = t->st.step + H,
                                  .status = PX_COMM_ERROR};
            if (pthread_create(&t->pend.thread, NULL, pending_reduce, t) == 0)
                t->pend.running = 1;
            else /* no thread: reduced here, not overlapped, applied as the others apply theirs */
                pending_reduce(t);
        } else {
            reduce_us = px_now_us();
            if (m > 0) st = outer_reduce(t, g, m, &wire, &scale); /* (a pipeline stage may hold none of the fragment) */
            reduce_us = px_now_us() - reduce_us;
            t->bytes_cross += (double)wire;
            t->outer_wire += (double)wire;
        }
    }
    if (st != PX_COMM_OK || !passed) {
        const char *why = st != PX_COMM_OK ? failure_reason(t) : "the groups disagree on the round";
        px_log_warn("outer_step_failed step=%lld quorum_id=%lld reason=\"%s\": retried in the next quorum",
                    (long long)t->st.step, (long long)t->qid, why);
        px_agent_report_failure(t->agent, NULL, -1, t->qid, t->st.step, why);
        return 0;
    }
    px_persist_fence(&t->persist); /* the first write to the state since the last commit */
    *adopt = newer;
    if (weight <= 0 && F == 1) { /* nobody had a round to give (every group joined it late, or had no samples) */
        start_round(t);
        return 1;
    }
    /* Streaming: nobody had the fragment whole; the round still trained the others: on to the next */
    int64_t from = t->st.step;
    t->st.step += H;
    if (weight <= 0) {
        next_round(t, p);
        return 1;
    }
    *loss_out = loss;
    if (overlap) { /* applied at the next round's end; this round's local parameters go on */
        t->frag_full[p] = 1; /* (never SYNC_ALL: outer_must_sync) */
        new_round(t);
        return 1;
    }
    outer_update(t, p, g, scale / weight);
    outer_report(t, from, t->st.step, p, weight, loss, wire, reduce_us, m, 0);
    next_round(t, p);
    return 1;
}

/* ---- automatic mode (--mode auto) --------------------------------------- */

/* The state in DiLoCo's mode (dl) or sync's: the mask says which buffers
 * are the group's own (train_state.h), and params is the global parameters
 * or the local ones. Moves no data. */
static void set_state_mode(trainer_t *t, int dl) {
    pthread_mutex_lock(&t->comm_mu);
    t->running_diloco = dl;
    pthread_mutex_unlock(&t->comm_mu);
    t->st.local = dl ? 1u << PX_STATE_M | 1u << PX_STATE_V : 0;
    t->st.buf[PX_STATE_PARAMS] = dl ? t->global : local_params(t);
    t->heal.ck_valid = 0; /* the checksum covers other buffers now */
}

static int quorum_says_diloco(const trainer_t *t) { return !strcmp(t->q.mode, "diloco"); }

/* The state should be in DiLoCo's mode now: as the quorum says (auto), or
 * from --sync-warmup's step on (diloco). */
static int wants_diloco(const trainer_t *t) {
    if (t->cfg->mode == PX_MODE_AUTO) return quorum_says_diloco(t);
    return t->cfg->mode == PX_MODE_DILOCO && t->st.step >= t->cfg->sync_warmup;
}

/* DiLoCo in a quorum that says sync: the state goes back at the next point
 * where every group's local parameters equal the global ones. */
static int leaving(const trainer_t *t) {
    return t->cfg->mode == PX_MODE_AUTO && diloco(t) && !quorum_says_diloco(t);
}

static void mode_changed(trainer_t *t, const char *why) {
    px_log_info("mode_changed mode=%s step=%lld quorum_id=%lld: %s", diloco(t) ? "diloco" : "sync",
                (long long)t->st.step, (long long)t->qid, why);
    if (t->cfg->rank == 0) {
        printf("event kind=mode_changed group=%s mode=%s step=%lld\n", t->cfg->group, diloco(t) ? "diloco" : "sync",
               (long long)t->st.step);
        fflush(stdout);
    }
}

/* A heal may bring a state of the other mode (its mask travels with it)
 * into the buffers of ours: the parameters it put where ours are move to
 * where its mode keeps them. sync_state's alone, between its download and
 * its upload: the host copy is current, and a GPU takes it afterwards. */
static void follow_healed_mode(trainer_t *t) {
    int dl = t->st.local != 0;
    if (t->cfg->mode == PX_MODE_SYNC || dl == diloco(t)) return;
    memcpy(dl ? t->global : local_params(t), t->st.buf[PX_STATE_PARAMS], t->st.n * sizeof(float));
    set_state_mode(t, dl);
    if (dl) start_round(t);
    mode_changed(t, "the state healed from another group is in that mode");
}

/* Sync to DiLoCo, at a committed step that every participant shares
 * (right after joining a quorum that says so, or at --sync-warmup's step):
 * the parameters become the global ones and a round starts from them,
 * every fragment's whole; the moments go on as each group's own; the outer
 * momentum is what the state holds (zero, unless a DiLoCo checkpoint was
 * restored). */
static void enter_diloco(trainer_t *t) {
    local_read(t);
    memcpy(t->global, local_params(t), t->st.n * sizeof(float));
    set_state_mode(t, 1);
    start_round(t);
    memset(t->frag_full, 1, sizeof t->frag_full);
    mode_changed(t, t->cfg->mode == PX_MODE_AUTO ? "the quorum says diloco" : "--sync-warmup's steps are done");
}

/* DiLoCo to sync (leaving), where every group's local parameters equal the
 * global ones: after an outer step, or before a round's first inner step.
 * The groups' moments are averaged (two reductions of n floats across
 * groups, through the grads) so that all go on with the same; the outer
 * momentum restarts at zero. 0, or -1 (reported) when a reduction failed:
 * still DiLoCo, with moments that are each a group's own still (averaged or
 * not), and the next outer step tries again. */
static int leave_diloco(trainer_t *t) {
    size_t n = t->st.n;
    float *g = host_grads(t), inv = 1.0f / (float)t->q.n;
    int averaged = 0;
    local_read(t);
    for (int b = PX_STATE_M; b <= PX_STATE_V; b++) {
        memcpy(g, t->st.buf[b], n * sizeof(float));
        t->bytes_cross += 2.0 * (t->q.n - 1) / t->q.n * (double)n * sizeof(float);
        if (px_comm_allreduce_sum_f32(state_cross(t), g, n) != PX_COMM_OK) {
            px_log_warn("mode_change_failed step=%lld quorum_id=%lld reason=\"%s\": still diloco, retried at the next "
                        "outer step", (long long)t->st.step, (long long)t->qid, failure_reason(t));
            px_agent_report_failure(t->agent, NULL, -1, t->qid, t->st.step, failure_reason(t));
            break;
        }
        px_persist_fence(&t->persist);
        float *dst = t->st.buf[b];
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) dst[i] = g[i] * inv;
        averaged++;
    }
    if (averaged > 0) local_written(t); /* the moments averaged so far, to a GPU at once */
    if (averaged < PX_STATE_V - PX_STATE_M + 1) return -1;
    memset(t->outer_m, 0, n * sizeof(float));
    set_state_mode(t, 0);
    mode_changed(t, "the quorum says sync; the groups' moments averaged");
    return 0;
}

/* A step's (or an outer step's) collectives failed: a part save waiting for
 * a lost rank gives up, and the communicators go; the caller joins a new
 * quorum next. */
static void step_failed(trainer_t *t) {
    px_persist_group_failed(&t->persist);
    t->failures++;
    drop_comms(t);
}

/* ---- the end of the job ------------------------------------------------- */

/* The state checksum and the parameters' squared norm of the whole group:
 * for a sharded group, a checksum of every rank's shard checksum (in rank
 * order) and the sum over ranks, collective over the group. */
static int final_stats(trainer_t *t, uint64_t *ck, double *pn) {
    *ck = px_heal_checksum(&t->heal);
    if (!t->shard) {
        for (size_t i = 0; i < t->model->num_params; i++) *pn += (double)t->model->params[i] * t->model->params[i];
        return 0;
    }
    t->heal.group_comm = state_intra(t);
    int64_t step;
    if (px_heal_group_state(&t->heal, &step, ck) != 0) return -1;
    float sq = (float)px_shard_param_sumsq(t->shard);
    if (px_comm_allreduce_sum_f32(state_intra(t), &sq, 1) != PX_COMM_OK) return -1;
    *pn = sq;
    return 0;
}

/* --save: the whole model as an llm.c file from rank 0 (a sharded group
 * gathers it first, collectively). */
static void save_model(trainer_t *t) {
    char err[256];
    px_gpt_t *whole = t->model;
    if (t->shard) {
        whole = px_gpt_new_zeroed(&t->model->config);
        if (!whole || px_shard_gather(t->shard, whole) != 0) {
            px_log_error("--save: cannot gather the model from the group's shards");
            px_gpt_destroy(&whole);
            return;
        }
    }
    if (t->cfg->rank == 0 && px_gpt_save(whole, t->cfg->save, err, sizeof err) != 0) px_log_error("--save: %s", err);
    if (whole != t->model) px_gpt_destroy(&whole);
}

/* ---- setup and the loop ------------------------------------------------ */

/* The model at the job's start: a seeded preset, or an llm.c model file.
 * NULL (logged) when it cannot be had. */
static px_gpt_t *initial_model(const px_trainer_config_t *cfg) {
    char err[512];
    px_gpt_config_t mc;
    px_gpt_t *m = NULL;
    if (px_gpt_config_preset(cfg->model, &mc) == 0) {
        m = px_gpt_new(&mc, cfg->seed);
    } else if (px_gpt_load(cfg->model, &m, err, sizeof err) != 0) {
        px_log_error("--model: '%s' is neither a preset (%s) nor a readable model file: %s", cfg->model,
                     px_gpt_preset_names(), err);
        return NULL;
    }
    if (!m) px_log_error("out of memory creating the model");
    return m;
}

/* DiLoCo in a sharded group: the shard just drawn or cut becomes the global
 * parameters, with no outer momentum. */
static void diloco_initial(trainer_t *t) {
    memcpy(t->global, px_shard_bufs(t->shard)->params, t->st.n * sizeof(float));
    memset(t->outer_m, 0, t->st.n * sizeof(float));
    start_round(t);
}

/* Heal callback (worker/heal.h): the initial state again, bit for bit, into
 * s (a receive in place at step 0 failed). */
static int rebuild_initial_state(void *ctx, px_train_state_t *s) {
    trainer_t *t = ctx;
    px_gpt_config_t preset;
    if (t->cfg->mode == PX_MODE_AUTO || t->cfg->sync_warmup > 0) /* the job starts in sync; a heal in place */
        set_state_mode(t, 0);                                       /* may have brought another mode */
    if (t->shard && px_gpt_config_preset(t->cfg->model, &preset) == 0) { /* drawn shard by shard */
        s->step = 0;
        t->pending_step = -1;
        if (px_shard_init(t->shard, t->cfg->seed) != 0) return -1;
        if (diloco(t)) diloco_initial(t);
        return 0;
    }
    px_gpt_t *fresh = initial_model(t->cfg);
    if (!fresh) return -1;
    if (t->shard) { /* s is the shard's live state: this rank's pieces of the fresh model */
        px_shard_load(t->shard, fresh);
        if (diloco(t)) diloco_initial(t);
    } else {
        memcpy(s->buf[PX_STATE_PARAMS], fresh->params, s->n * sizeof(float));
        memset(s->buf[PX_STATE_M], 0, s->n * sizeof(float));
        memset(s->buf[PX_STATE_V], 0, s->n * sizeof(float));
        if (s->nbuf > PX_STATE_OUTER_M) memset(s->buf[PX_STATE_OUTER_M], 0, s->n * sizeof(float));
    }
    s->step = 0;
    t->pending_step = -1;
    px_gpt_destroy(&fresh);
    if (diloco(t) && !t->shard) start_round(t);
    return 0;
}

static int layout_given(const px_trainer_config_t *cfg) { return cfg->fsdp || cfg->tp || cfg->pp; }

/* Rank r's shard layout in this group's mesh. */
static px_shard_layout_t layout_of(const trainer_t *t, const px_gpt_config_t *mc, int r) {
    px_mesh_coord_t c = px_mesh_coord(&t->mesh, r);
    px_shard_layout_t lay = {.fsdp = t->mesh.size[PX_MESH_FSDP], .fsdp_rank = c.c[PX_MESH_FSDP],
                             .tp = {t->mesh.size[PX_MESH_TP], c.c[PX_MESH_TP]}, .keep_params = t->cfg->fsdp_keep_params};
    if (t->mesh.size[PX_MESH_PP] > 1) lay.stage = px_gpt_pipeline_stage(mc, t->T, t->mesh.size[PX_MESH_PP], c.c[PX_MESH_PP]);
    return lay;
}

/* Checkpoints of the group's shards: every rank's layout for the manifest. */
static int set_shard_persist(trainer_t *t) {
    int W = t->cfg->ranks_per_group;
    px_shard_layout_t *lays = malloc(sizeof *lays * (size_t)W);
    for (int r = 0; lays && r < W; r++) lays[r] = layout_of(t, &t->model->config, r);
    int rc = lays ? px_persist_set_shard(&t->persist, t->shard, lays, W, t->mesh.size[PX_MESH_PP], t->st.nbuf) : -1;
    free(lays);
    return rc;
}

/* A sharded layout (cfg->fsdp/tp): checks it against the group and the
 * model, and makes this rank's shard of the initial model: from a preset
 * drawn shard by shard (t->model NULL), or cut from a loaded model file
 * (t->model, freed then). t->model becomes the shard's model. Prints what
 * the shard saves. 0 when not sharded or done; -1 (logged). */
static int setup_shard(trainer_t *t, const px_gpt_config_t *mc) {
    const px_trainer_config_t *cfg = t->cfg;
    char err[512];
    t->pending_step = -1;
    if (!layout_given(cfg)) return 0;
    t->mesh = (px_mesh_t){{cfg->pp ? cfg->pp : 1, cfg->fsdp ? cfg->fsdp : 1, cfg->tp ? cfg->tp : 1}};
    if (px_mesh_check(&t->mesh, cfg->ranks_per_group, err, sizeof err) != 0) {
        px_log_error("layout: %s", err);
        return -1;
    }
    int P = t->mesh.size[PX_MESH_PP];
    if (P > mc->num_layers) {
        px_log_error("--pp %d: the model has %d layers, and every pipeline stage needs at least one", P,
                     mc->num_layers);
        return -1;
    }
    if (cfg->ranks_per_group == 1) return t->model ? 0 : -1; /* 1x1x1: a whole replica (see setup) */
    t->coord = px_mesh_coord(&t->mesh, cfg->rank);
    px_shard_layout_t lay = layout_of(t, mc, cfg->rank);
    t->shard = px_shard_new(mc, &lay, err, sizeof err);
    if (!t->shard) {
        px_log_error("layout: %s", err);
        return -1;
    }
    if (t->model) {
        px_shard_load(t->shard, t->model);
    } else if (px_shard_init(t->shard, cfg->seed) != 0) {
        px_log_error("out of memory drawing the initial shard");
        return -1;
    }
    size_t sizes[PX_GPT_NUM_TENSORS];
    size_t replica = 4 * px_gpt_tensor_sizes(mc, sizes) * sizeof(float);
    size_t state = px_shard_state_bytes(t->shard), work = px_shard_work_bytes(t->shard);
    char name[64];
    px_mesh_format(&t->mesh, name, sizeof name);
    px_log_info("shard_memory layout=%s rank=%d state_mb=%.2f replica_mb=%.2f ratio=%.3f work_mb=%.2f", name, cfg->rank,
                state / 1e6, replica / 1e6, (double)state / (double)replica, work / 1e6);
    if (cfg->rank == 0) {
        printf("shard_memory layout=%s state_mb=%.2f replica_mb=%.2f ratio=%.3f work_mb=%.2f\n", name, state / 1e6,
               replica / 1e6, (double)state / (double)replica, work / 1e6);
        fflush(stdout);
    }
    px_gpt_destroy(&t->model);
    t->model = px_shard_model(t->shard);
    return 0;
}

/* A pipelined rank's stage runtime, on the compute's model (after
 * px_compute_new: on a GPU the stage model is the CUDA one). 0, or -1. */
static int make_pipe(trainer_t *t) {
    const px_trainer_config_t *cfg = t->cfg;
    int P = t->mesh.size[PX_MESH_PP];
    if (!t->shard || P < 2) return 0;
    char err[256];
    int M = cfg->microbatches ? cfg->microbatches : P;
    px_gpt_stage_t st = layout_of(t, &t->model->config, cfg->rank).stage; /* the shard's own */
    px_pipe_model_t model = px_compute_pipe_model(t->dev);
    t->pipe = px_pipe_new(&model, &st, t->coord.c[PX_MESH_PP], P, (px_sched_kind_t)cfg->schedule, M, t->T, err,
                          sizeof err);
    if (!t->pipe) {
        px_log_error("layout: %s", err);
        return -1;
    }
    px_log_info("pipeline_stage rank=%d stage=%d of=%d layers=%d..%d schedule=%s", cfg->rank, t->coord.c[PX_MESH_PP], P,
                st.first_layer, st.first_layer + st.num_layers - 1,
                px_sched_name((px_sched_kind_t)cfg->schedule));
    return 0;
}

/* Restore sink of a sharded rank: each checkpoint slice read goes straight
 * into the shard (px_shard_place). */
static int place_slice(void *ctx, const px_ckpt_logical_t *l, const px_ckpt_slice_t *s, const float *values) {
    trainer_t *t = ctx;
    if (l->buffer < 0 || l->buffer >= t->st.nbuf) return 0;
    return px_shard_place(t->shard, t->st.buf[l->buffer], l->offset, l->ndim, l->shape, s->start, s->count, values);
}

/* A sharded rank restores the newest checkpoint, written in any layout,
 * slice by slice into its shard: every file is read and verified, but only
 * the rectangles the rank holds are kept (no whole-state copy). */
static px_restore_result_t restore_shard(trainer_t *t) {
    size_t sizes[PX_GPT_NUM_TENSORS];
    px_train_state_t whole = {.n = px_gpt_tensor_sizes(&t->model->config, sizes), .seed = t->cfg->seed,
                              .nbuf = t->st.nbuf};
    px_ckpt_sink_t sink = {place_slice, t};
    px_restore_result_t rc = px_persist_restore(&t->persist, &whole, &sink);
    if (rc == PX_RESTORE_LOADED) t->st.step = whole.step;
    return rc; /* REBUILD: a checkpoint failed half read, the shard holds part of it: the caller rebuilds it */
}

static int setup(trainer_t *t) {
    const px_trainer_config_t *cfg = t->cfg;
    char err[512];
    if (cfg->threads > 0) omp_set_num_threads(cfg->threads);
    /* A sharded group with a preset never holds the whole model: each rank
     * draws its own shard (setup_shard). */
    px_gpt_config_t mc;
    int draw = layout_given(cfg) && cfg->ranks_per_group > 1 && px_gpt_config_preset(cfg->model, &mc) == 0;
    if (!draw) {
        if (!(t->model = initial_model(cfg))) return -1;
        mc = t->model->config;
    }
    t->T = cfg->seq_len > 0 ? cfg->seq_len : mc.max_seq_len;
    if (t->T > mc.max_seq_len) {
        px_log_error("--seq %d exceeds the model's context %d", t->T, mc.max_seq_len);
        return -1;
    }
    if (setup_shard(t, &mc) != 0) return -1;
    if (cfg->recompute) { /* on the model compute.c runs too */
        if (px_gpt_set_recompute(t->model, 1) != 0) return -1;
        px_log_info("activation_recompute mode=block rank=%d", cfg->rank);
    }
    if (!t->shard && cfg->bucket_mb > 0 &&
        !(t->reducer = px_reducer_new(t->model, (size_t)(cfg->bucket_mb * (1 << 20)) / sizeof(float)))) {
        px_log_error("out of memory for the gradient buckets (--bucket-mb %g)", cfg->bucket_mb);
        return -1;
    }
    t->train = px_dataset_open(cfg->data, "train", t->model->config.vocab_size, (size_t)t->T + 1, err, sizeof err);
    if (!t->train) {
        px_log_error("--data: %s", err);
        return -1;
    }
    t->val = px_dataset_open(cfg->data, "val", t->model->config.vocab_size, (size_t)t->T + 1, err, sizeof err);
    if (!t->val) px_log_warn("no validation data, eval loss disabled: %s", err);
    /* a pipeline's micro-batch is a 1/M of the rank's share: at most the global batch */
    int pipelined = t->shard && t->mesh.size[PX_MESH_PP] > 1;
    size_t mb = (size_t)(pipelined && cfg->global_batch > cfg->micro_batch ? cfg->global_batch : cfg->micro_batch) *
                (size_t)t->T;
    t->inputs = malloc(mb * sizeof(int));
    t->targets = malloc(mb * sizeof(int));
    if (t->shard) {
        px_shard_bufs_t *b = px_shard_bufs(t->shard);
        t->st = (px_train_state_t){.buf = {b->params, b->m, b->v}, .n = b->n, .step = 0, .seed = cfg->seed,
                                   .nbuf = PX_STATE_NBUF};
    } else {
        t->st = px_state_of_model(t->model, 0, cfg->seed);
    }
    if (cfg->mode != PX_MODE_SYNC) { /* the global parameters and the outer momentum (auto: for its DiLoCo phases) */
        size_t n = t->st.n;
        t->global = malloc(n * sizeof(float));
        t->outer_m = calloc(n, sizeof(float));
        if (!t->global || !t->outer_m) {
            px_log_error("out of memory for DiLoCo's global parameters and outer momentum (%zu floats each)", n);
            return -1;
        }
        if (cfg->outer_overlap && !(t->pend.buf = malloc(n * sizeof(float)))) {
            px_log_error("out of memory for --outer-overlap's pseudo-gradients in flight (%zu floats)", n);
            return -1;
        }
        memcpy(t->global, t->st.buf[PX_STATE_PARAMS], n * sizeof(float));
        t->st.buf[PX_STATE_OUTER_M] = t->outer_m;
        t->st.nbuf = PX_STATE_OUTER_M + 1;
        /* auto, and diloco with --sync-warmup, start in sync (the loop enters DiLoCo when it should) */
        set_state_mode(t, cfg->mode == PX_MODE_DILOCO && cfg->sync_warmup == 0);
        if (cfg->fragments > t->model->config.num_layers) {
            px_log_error("--fragments %d: the model has %d layers, and every fragment holds at least one",
                         cfg->fragments, t->model->config.num_layers);
            return -1;
        }
        if (build_fragments(t) != 0) {
            px_log_error("out of memory for the fragments' runs");
            return -1;
        }
    }
    if (!t->inputs || !t->targets || px_heal_init(&t->heal, &t->st, t->agent, cfg->group, cfg->rank) != 0) {
        px_log_error("out of memory");
        return -1;
    }
    t->heal.reinit = rebuild_initial_state;
    t->heal.reinit_ctx = t;
    if (px_persist_init(&t->persist, cfg, t->agent, &t->model->config) != 0) return -1;
    if (t->shard && set_shard_persist(t) != 0) {
        px_log_error("out of memory for the checkpoint layout");
        return -1;
    }
    px_restore_result_t rc = t->shard ? restore_shard(t) : px_persist_restore(&t->persist, &t->st, NULL);
    if (rc == PX_RESTORE_REFUSED) return -1;
    if (rc == PX_RESTORE_REBUILD && rebuild_initial_state(t, &t->st) != 0) return -1; /* partial data was loaded */
    if (rc == PX_RESTORE_LOADED) px_agent_set_progress(t->agent, t->st.step, PHALANX__MEMBER_STATE__JOINING, 0);
    if (diloco(t)) start_round(t); /* the local parameters from the (restored) global ones */
    /* on a GPU this uploads the state restored or built above */
    if (!(t->dev = px_compute_new(cfg->device, t->model, t->shard, cfg->rank, err, sizeof err))) {
        px_log_error("--device %s: %s", cfg->device == PX_DEVICE_CUDA ? "cuda" : "cpu", err);
        return -1;
    }
    if (make_pipe(t) != 0) return -1;
    /* a GPU's host copy: downloaded for a save while the next step computes; the saver waits for it */
    if (!px_compute_state_on_host(t->dev)) px_persist_set_source_wait(&t->persist, wait_host, t);
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
    px_agent_set_quorum_hook(t->agent, NULL, NULL); /* waits for a running call: t is about to go */
    drop_comms(t);
    px_reducer_destroy(&t->reducer);
    px_persist_free(&t->persist); /* a save in flight may still read the state */
    px_pipe_destroy(&t->pipe); /* its receive buffer is the compute's memory */
    px_compute_destroy(&t->dev);
    if (t->shard) t->model = NULL; /* the shard's */
    px_shard_destroy(&t->shard);
    px_gpt_destroy(&t->model);
    px_dataset_destroy(&t->train);
    px_dataset_destroy(&t->val);
    free(t->inputs);
    free(t->targets);
    free(t->global);
    free(t->outer_m);
    free(t->outer_scratch);
    free(t->pend.buf);
    free(t->runs);
    px_heal_free(&t->heal);
    px_quorum_free(&t->q);
    if (t->ledger) fclose(t->ledger);
    pthread_mutex_destroy(&t->comm_mu);
}

/* A stage per layer at most: known before start for a preset (a model file
 * is checked once loaded, setup_shard). */
static int check_stages(const px_trainer_config_t *cfg, char *err, size_t errlen) {
    px_gpt_config_t mc;
    if (cfg->pp <= 1 || px_gpt_config_preset(cfg->model, &mc) != 0 || cfg->pp <= mc.num_layers) return 0;
    snprintf(err, errlen, "--pp %d: the model has %d layers, and every pipeline stage needs at least one", cfg->pp,
             mc.num_layers);
    return -1;
}

/* --fragments: DiLoCo only, a whole number of inner steps per fragment,
 * at most one fragment per layer (known before start for a preset; a model
 * file's layers are checked once loaded, setup). */
static int check_fragments(const px_trainer_config_t *cfg, char *err, size_t errlen) {
    px_gpt_config_t mc;
    if (cfg->fragments == 1) return 0;
    if (cfg->fragments < 1 || cfg->fragments > PX_MAX_FRAGMENTS) {
        snprintf(err, errlen, "--fragments %d: 1..%d", cfg->fragments, PX_MAX_FRAGMENTS);
        return -1;
    }
    if (cfg->mode == PX_MODE_SYNC)
        snprintf(err, errlen, "--fragments %d: Streaming DiLoCo needs --mode diloco or auto", cfg->fragments);
    else if (cfg->inner_steps % cfg->fragments != 0)
        snprintf(err, errlen, "--fragments %d: --inner-steps %d is not a multiple of it (every fragment is synced "
                 "every H steps, one every H/F)", cfg->fragments, cfg->inner_steps);
    else if (px_gpt_config_preset(cfg->model, &mc) == 0 && cfg->fragments > mc.num_layers)
        snprintf(err, errlen, "--fragments %d: the model has %d layers, and every fragment holds at least one",
                 cfg->fragments, mc.num_layers);
    else
        return 0;
    return -1;
}

int px_trainer_check(const px_trainer_config_t *cfg, char *err, size_t errlen) {
    if (check_stages(cfg, err, errlen) != 0) return -1;
    if (check_fragments(cfg, err, errlen) != 0) return -1;
    if (cfg->outer_overlap && cfg->mode == PX_MODE_SYNC) {
        snprintf(err, errlen, "--outer-overlap: overlapped outer steps need --mode diloco or auto");
        return -1;
    }
    if (cfg->sync_warmup > 0 && cfg->mode != PX_MODE_DILOCO) {
        snprintf(err, errlen, "--sync-warmup %lld needs --mode diloco (the mode it switches to)",
                 (long long)cfg->sync_warmup);
        return -1;
    }
    if (cfg->mode != PX_MODE_SYNC && cfg->bucket_mb > 0) {
        snprintf(err, errlen, "--mode %s with --bucket-mb: DiLoCo's inner steps reduce inside the group only; use "
                              "--bucket-mb 0", cfg->mode == PX_MODE_AUTO ? "auto" : "diloco");
        return -1;
    }
    if (cfg->device != PX_DEVICE_CUDA) return 0;
    if (cfg->recompute) {
        snprintf(err, errlen, "--device cuda with --recompute block: the GPU model has no activation recomputation "
                              "yet; use --recompute none on GPUs, or --device cpu");
        return -1;
    }
    if (cfg->bucket_mb > 0) {
        snprintf(err, errlen, "--device cuda with --bucket-mb %g: the bucketed reduction is CPU-only; use "
                              "--bucket-mb 0 on GPUs", cfg->bucket_mb);
        return -1;
    }
    char why[512] = "";
    if (!px_compute_usable(cfg->device, why, sizeof why)) {
        snprintf(err, errlen, "--device cuda: %s", why);
        return -1;
    }
    return 0;
}

px_train_result_t px_trainer_run(px_agent_t *agent, const px_trainer_config_t *cfg, volatile sig_atomic_t *stop) {
    trainer_t t;
    memset(&t, 0, sizeof t);
    t.cfg = cfg;
    t.agent = agent;
    t.stop = stop;
    t.my_index = -1;
    px_quorum_init(&t.q);
    pthread_mutex_init(&t.comm_mu, NULL);
    char err[640];
    if (px_trainer_check(cfg, err, sizeof err) != 0) {
        px_log_error("%s", err);
        teardown(&t);
        return PX_TRAIN_CONFIG_ERROR;
    }
    if (setup(&t) != 0) {
        teardown(&t);
        return PX_TRAIN_CONFIG_ERROR;
    }
    px_agent_set_quorum_hook(agent, on_quorum_news, &t);
    px_log_info("trainer_started group=%s rank=%d model=%s params=%zu steps=%lld global_batch=%d micro_batch=%d T=%d "
                "device=%s", cfg->group, cfg->rank, cfg->model, t.model->num_params, (long long)cfg->steps,
                cfg->global_batch, cfg->micro_batch, t.T, px_compute_name(t.dev));
    int need = 1, failed = 0, inner_failed = 0;
    px_train_result_t rc = PX_TRAIN_DONE;
    float loss = NAN, norm = 0, ev = NAN;
    while (t.st.step < cfg->steps && !*stop) {
        if (job_finished_elsewhere(&t)) {
            rc = PX_TRAIN_FINISHED_ELSEWHERE;
            break;
        }
        if (need) {
            if (drained(&t)) {
                rc = PX_TRAIN_DRAINED;
                break;
            }
            int64_t step0 = t.st.step;
            uint64_t ck0 = 0;
            if (diloco(&t)) { /* the round goes on unless the state changes while joining (a heal) */
                local_read(&t);
                ck0 = px_heal_checksum(&t.heal);
            }
            if (reconfigure(&t, failed) != 0) {
                rc = *stop                        ? PX_TRAIN_STOPPED
                     : job_finished_elsewhere(&t) ? PX_TRAIN_FINISHED_ELSEWHERE
                     : drained(&t)                ? PX_TRAIN_DRAINED
                                                  : PX_TRAIN_FAILED;
                break;
            }
            need = failed = 0;
            if (!diloco(&t) && wants_diloco(&t)) enter_diloco(&t);
            if (diloco(&t)) {
                if (inner_failed || t.st.step != step0 || px_heal_checksum(&t.heal) != ck0) start_round(&t);
                inner_failed = 0;
                int k = align_round(&t);
                /* the quorum's communicator failed: join again; every group at the round's start: sync now */
                if (k < 0 || (k == 0 && cfg->fragments == 1 && leaving(&t) && leave_diloco(&t) != 0)) {
                    step_failed(&t);
                    need = failed = 1;
                    continue;
                }
            }
            if (t.st.step >= cfg->steps) break;
            if (job_finished_elsewhere(&t)) { /* learned while joining (a late start): train nothing */
                rc = PX_TRAIN_FINISHED_ELSEWHERE;
                break;
            }
        }
        int64_t t0 = px_now_us();
        int adopt = 0;
        if (cfg->mode == PX_MODE_DILOCO && !diloco(&t) && wants_diloco(&t)) enter_diloco(&t); /* --sync-warmup done */
        if (diloco(&t)) {
            int64_t known = px_agent_known_quorum_id(agent);
            if (t.inner < round_len(&t) && known > t.qid && !drain_only_newer(&t, known)) {
                need = 1; /* a newer quorum: joined at once, the round's progress kept (no group waits for us) */
                continue;
            }
            int outer = t.inner >= round_len(&t);
            int64_t from = t.st.step;
            if (!(outer ? outer_step(&t, &adopt, &loss) : inner_step(&t, &loss, &norm))) {
                step_failed(&t);
                need = failed = 1;
                inner_failed = !outer; /* the group's ranks may be an inner step apart: the round starts again */
                continue;
            }
            if (!outer) t.round_inner_us += px_now_us() - t0;
            if (outer) {
                int moved = t.st.step != from; /* 0: nobody had a round to give */
                if (moved) {
                    px_agent_set_progress(agent, t.st.step, PHALANX__MEMBER_STATE__HEALTHY, t.qid);
                    px_agent_set_train_stats(agent, t.st.step, loss, 0, 0, 1); /* the round's loss */
                    if (cfg->eval_every > 0 && t.st.step / cfg->eval_every > from / cfg->eval_every && t.my_index == 0 &&
                        (cfg->rank == 0 || t.shard)) { /* a sharded group evaluates together */
                        ev = eval_loss(&t);
                        px_agent_set_eval_loss(agent, t.st.step, ev);
                        if (cfg->rank == 0) px_progress_eval(cfg->progress_format, t.st.step, ev, cfg->group);
                    }
                    if (!t.pend.active) checkpoint_commit(&t); /* never missing a committed round's outer step */
                }
                /* every group's local parameters are the global ones now: where auto goes back to sync */
                if (leaving(&t) && leave_diloco(&t) != 0) {
                    step_failed(&t);
                    need = failed = 1;
                    continue;
                }
                if (moved && adopt) need = 1;
            } else if (cfg->progress && cfg->rank == 0) {
                double ms = (double)(px_now_us() - t0) / 1000.0;
                px_agent_set_train_stats(agent, t.st.step, loss, (double)batch_of(&t) * t.T * t.q.n, ms / 1000.0, 1);
                px_progress_step(cfg->progress_format, &(px_progress_step_t){
                    .step = cur_step(&t), .loss = loss, .norm = norm, .ms = ms,
                    .tok_s = ms > 0 ? (double)batch_of(&t) * t.T * 1000.0 / ms : 0, .groups = t.q.n, .quorum = t.qid,
                    .group = cfg->group, .mode = "diloco", .show_mode = 1, .inner = t.inner, .round = round_len(&t)});
            }
            continue;
        }
        if (!train_step(&t, &adopt, &loss, &norm)) {
            step_failed(&t);
            need = failed = 1;
            continue;
        }
        px_agent_set_progress(agent, t.st.step, PHALANX__MEMBER_STATE__HEALTHY, t.qid);
        double ms = (double)(px_now_us() - t0) / 1000.0;
        note_comm_share(&t, (double)t.step_cross_us, ms * 1000.0);
        /* a sharded group evaluates together (its forward is collective) */
        if (cfg->eval_every > 0 && t.st.step % cfg->eval_every == 0 && t.my_index == 0 && (cfg->rank == 0 || t.shard)) {
            ev = eval_loss(&t);
            px_agent_set_eval_loss(agent, t.st.step, ev);
        }
        px_agent_set_train_stats(agent, t.st.step, loss, (double)cfg->global_batch * t.T, ms / 1000.0, 0);
        if (cfg->progress && cfg->rank == 0) {
            px_progress_step(cfg->progress_format, &(px_progress_step_t){
                .step = t.st.step, .loss = loss, .norm = norm, .ms = ms,
                .tok_s = ms > 0 ? (double)cfg->global_batch * t.T * 1000.0 / ms : 0, .groups = t.q.n, .quorum = t.qid,
                .group = cfg->group, .mode = "sync", .show_mode = cfg->mode == PX_MODE_AUTO, .eval_loss = ev,
                .has_eval = cfg->eval_every > 0 && t.st.step % cfg->eval_every == 0 && t.my_index == 0});
        }
        checkpoint_commit(&t);
        if (adopt) need = 1; /* everyone saw the flag: all switch now */
    }
    host_state(&t); /* the final save, statistics and --save read it */
    pthread_mutex_lock(&t.comm_mu);
    t.finishing = 1; /* the other groups may leave now: what follows involves our group only */
    pthread_mutex_unlock(&t.comm_mu);
    if (t.st.step >= cfg->steps || (*stop && rc != PX_TRAIN_FINISHED_ELSEWHERE)) px_persist_final(&t.persist, &t.st, &t.q);
    if (t.st.step >= cfg->steps) {
        ev = eval_loss(&t);
        uint64_t ck = 0;
        double pn = 0;
        if (final_stats(&t, &ck, &pn) != 0) px_log_warn("final statistics: the group's collectives failed");
        if (cfg->rank == 0) {
            printf("final group=%s steps=%lld loss=%.6f eval_loss=%.6f checksum=%016" PRIx64 " param_norm=%.9g failures=%d heals=%d\n",
                   cfg->group, (long long)t.st.step, loss, ev, ck, sqrt(pn), t.failures, t.heal.heals);
            fflush(stdout);
            px_agent_notify(agent, "run_finished", t.qid, t.st.step, "", 0, 0, "");
        }
        if (cfg->save) save_model(&t);
        if (t.pipe) { /* the stage's idle share: the pipeline's bubble (and its waits on the links), measured */
            double busy, total;
            px_pipe_times(t.pipe, &busy, &total);
            px_log_info("pipeline_time rank=%d stage=%d busy_s=%.6f total_s=%.6f idle=%.4f microbatches=%d schedule=%s "
                        "activation_mb=%.3f recompute=%d", cfg->rank, t.coord.c[PX_MESH_PP], busy, total,
                        total > 0 ? 1.0 - busy / total : 0.0, px_pipe_microbatches(t.pipe),
                        px_sched_name((px_sched_kind_t)cfg->schedule), px_gpt_activation_bytes(t.model) / 1e6,
                        cfg->recompute);
        }
        double bf = 0, bt = 0;
        if (t.shard) px_shard_bytes_sent(t.shard, &bf, &bt);
        px_log_info("comm_sent group=%s rank=%d steps=%lld fsdp_bytes=%.0f tp_bytes=%.0f group_bytes=%.0f "
                    "cross_bytes=%.0f buckets=%llu outer_steps=%lld outer_wire_bytes=%.0f", cfg->group, cfg->rank,
                    (long long)t.st.step, bf, bt, t.bytes_group, t.bytes_cross,
                    t.reducer ? (unsigned long long)px_reducer_buckets(t.reducer) : 0ull, (long long)t.outer_steps,
                    t.outer_wire);
        rc = PX_TRAIN_DONE;
    } else if (*stop && rc != PX_TRAIN_FINISHED_ELSEWHERE) {
        rc = PX_TRAIN_STOPPED;
    }
    teardown(&t);
    return rc;
}

const char *px_train_result_name(px_train_result_t r) {
    switch (r) {
    case PX_TRAIN_DONE: return "done";
    case PX_TRAIN_FAILED: return "failed";
    case PX_TRAIN_STOPPED: return "stopped";
    case PX_TRAIN_FINISHED_ELSEWHERE: return "finished_elsewhere";
    case PX_TRAIN_CONFIG_ERROR: return "config_error";
    case PX_TRAIN_DRAINED: return "drained";
    }
    return "unknown";
}
