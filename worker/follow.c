/* Following the quorum, one rank's view: the rendezvous store (through
 * the coordinator), the communicators of each quorum, the agent's hook
 * that aborts collectives a newer quorum makes hopeless, and joining a
 * quorum: rendezvous, then the state brought in line with the others (a
 * sharded group's ranks to one step, then heals from an up-to-date group;
 * worker/heal.c). Steps 3 to 5 of the protocol at the top of trainer.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_log.h"
#include "px_time.h"
#include "trainer_int.h"
#include "vote.h"

/* A rendezvous read waits in slices this long, so that it notices a newer
 * quorum (the agent's known id) within one slice. */
#define STORE_POLL_MS 200
/* A rendezvous write's timeout. */
#define STORE_SET_MS 5000
/* How long one request for a quorum waits before asking again. */
#define QUORUM_REQUEST_MS 1000

/* ---- rendezvous store over the coordinator ----------------------------- */

/* A newer quorum than the one being formed is known: its rendezvous can
 * never complete (its other members moved on to the newer one). */
static int superseded(trainer_t *t, int64_t qid) { return px_agent_known_quorum_id(t->agent) > qid; }

static int store_set(void *ctx, const char *key, const void *value, size_t len) {
    trainer_t *t = ctx;
    return px_agent_store_set(t->agent, t->store_qid, key, value, len, STORE_SET_MS) == PX_STORE_OK ? 0 : -1;
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

void px_follow_drop_comms(trainer_t *t) {
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
        /* A group px_follow_drained (a planned leave) takes part until the boundary. */
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
void px_follow_on_quorum_news(void *ctx, const px_quorum_t *latest, int64_t known) {
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
int px_follow_drain_only_newer(trainer_t *t, int64_t known) {
    pthread_mutex_lock(&t->comm_mu);
    int yes = t->drain_only == known;
    pthread_mutex_unlock(&t->comm_mu);
    return yes;
}

/* A group finished the job (committed its last step) while this one is
 * behind: the result exists, and training on could only redo old steps
 * (alone, from the initial state, when no group holds the state any more). */
int px_follow_job_finished_elsewhere(trainer_t *t) {
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
int px_follow_drained(trainer_t *t) {
    if (!px_agent_draining(t->agent)) return 0;
    px_log_info("group_drained group=%s rank=%d step=%lld quorum_id=%lld: leaving the job (planned)", t->cfg->group,
                t->cfg->rank, (long long)t->st.step, (long long)t->qid);
    return 1;
}

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
        px_step_shard_apply(t, t->st.step, (float)norm);
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

/* heal_all on the host state; a GPU takes the result, whatever happened
 * (a failed heal at step 0 rebuilt the initial state on the host). A heal
 * may bring a state in the other mode (sync or DiLoCo): the loop moves its
 * parameters where that mode keeps them once the quorum is joined
 * (px_diloco_follow_healed_mode). */
static int sync_state(trainer_t *t) {
    px_persist_fence(&t->persist); /* a heal may overwrite the state a save is copying */
    host_state(t);
    int rc = heal_all(t);
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
        px_follow_drop_comms(t);
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
        px_follow_drop_comms(t);
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
int px_follow_reconfigure(trainer_t *t, int failed) {
    const px_trainer_config_t *cfg = t->cfg;
    join_times_t jt = {0, 0, 0};
    int64_t t0 = px_now_ms();
    px_follow_drop_comms(t);
    host_state(t); /* for the checksum the coordinator gets */
    jt.teardown_ms = px_now_ms() - t0;
    px_quorum_t nq;
    px_quorum_init(&nq);
    for (int attempt = 0; !*t->stop && !px_follow_job_finished_elsewhere(t) && !px_agent_draining(t->agent); attempt++) {
        if (px_agent_latest_quorum(t->agent, &nq) != 0) { /* out of memory: ask the coordinator instead */
            px_quorum_free(&nq);
            px_quorum_init(&nq);
        }
        if (failed || nq.id <= t->qid || px_quorum_find(&nq, cfg->group) < 0) {
            uint64_t ck = px_heal_checksum(&t->heal);
            px_quorum_request_t r = px_agent_request_quorum(t->agent, t->st.step, t->qid, 0, 1, ck, QUORUM_REQUEST_MS, &nq);
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
