/* DiLoCo (--mode diloco) and the switches of --mode auto, one rank's view.
 *
 * DiLoCo replaces step 2 of the step protocol (trainer.c) for H steps at a
 * time: each group's inner steps reduce inside the group only, and an
 * outer step every H steps averages the pseudo-gradients (global minus
 * local parameters) across groups and applies SGD with Nesterov momentum.
 * The state is then the global parameters, the outer momentum and the
 * group's own moments. A group moves to a newer quorum at its next inner
 * step, keeping its round. Streaming DiLoCo (--fragments F) cuts the
 * parameters into F fragments and syncs one every H/F steps, in turn;
 * --outer-overlap reduces a round's pseudo-gradients while the next round
 * trains ("Overlapped outer steps" below).
 *
 * --mode auto ("automatic mode" below) trains in the mode each quorum
 * announces: the state keeps DiLoCo's four buffers throughout, and its mask
 * of group-own buffers says which mode it is in (it travels with heals).
 * Sync to DiLoCo right after joining a quorum that says diloco; back at the
 * next point where every group's parameters equal the global ones (an
 * outer step, or a round's start), averaging the groups' moments.
 *
 * Nothing here prints on stdout: the loop reports the outer steps applied
 * (t->done) and the mode changes these functions return. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outer_codec.h"
#include "px_log.h"
#include "px_time.h"
#include "trainer_int.h"
#include "vote.h"

/* Inner steps of the round starting at st.step: H, or fewer in the job's
 * last round. */
int px_diloco_round_len(const trainer_t *t) {
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
int px_diloco_build_fragments(trainer_t *t) {
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

/* The round's bookkeeping from its start. */
static void new_round(trainer_t *t) {
    t->inner = 0;
    t->round_full = 1;
    t->round_samples = 0;
    t->round_loss = 0;
    t->round_inner_us = 0;
}

/* A new round (or the current one again) from the global parameters. */
void px_diloco_start_round(trainer_t *t) {
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
int px_diloco_align_round(trainer_t *t) {
    int P = t->q.n;
    float mine = (float)t->inner, *all = malloc((size_t)P * sizeof *all);
    if (!all) return -1;
    int rc = px_comm_allgather_f32(state_cross(t), &mine, all, 1) == PX_COMM_OK ? 0 : -1;
    int k = 0;
    for (int i = 0; rc == 0 && i < P; i++)
        if ((int)all[i] > k) k = (int)all[i];
    free(all);
    if (rc == 0 && t->inner == 0 && k > 0) {
        px_diloco_start_round(t);
        t->inner = k < px_diloco_round_len(t) ? k : px_diloco_round_len(t);
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
int px_diloco_inner_step(trainer_t *t, float *loss_out, float *norm_out) {
    const px_trainer_config_t *cfg = t->cfg;
    size_t n = t->st.n;
    int64_t s = cur_step(t);
    int lo, hi, W = cfg->ranks_per_group;
    px_step_my_share(t, &lo, &hi);
    float local_loss = 0, *tail = px_compute_tail(t->dev), sumsq = 0;
    px_comm_status_t st = px_step_compute_grads(t, lo, hi, &local_loss) == 0 ? PX_COMM_OK : PX_COMM_ERROR;
    px_vote_fill(tail, s, 0, 0, local_loss);
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
        const char *why = st != PX_COMM_OK ? px_step_failure_reason(t) : "the group's ranks disagree on the step";
        px_log_warn("inner_step_failed step=%lld quorum_id=%lld reason=\"%s\"", (long long)s, (long long)t->qid, why);
        px_agent_report_failure(t->agent, NULL, -1, t->qid, t->st.step, why);
        return 0;
    }
    state_write_fence(t);
    if (t->shard) {
        px_step_shard_apply(t, s, sqrtf(sumsq));
        *norm_out = t->last_norm;
    } else {
        float lr = px_lr_at((int)s, cfg->warmup, (int)cfg->steps, cfg->lr, cfg->min_lr);
        *norm_out = px_compute_clip_adamw(t->dev, cfg->grad_clip, lr, cfg->beta1, cfg->beta2, cfg->eps,
                                          cfg->weight_decay, (int)s + 1);
    }
    *loss_out = tail[PX_VOTE_LOSS];
    t->round_loss += tail[PX_VOTE_LOSS];
    t->round_samples += px_step_batch_of_group(t);
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

/* The log line and event of an applied outer step (its progress line
 * waits in t->done for the loop): the round [from, to) of fragment p, m
 * floats reduced in reduce_us. */
static void outer_report(trainer_t *t, int64_t from, int64_t to, int p, float weight, float loss, uint64_t wire,
                         int64_t reduce_us, size_t m, int overlapped) {
    const px_trainer_config_t *cfg = t->cfg;
    /* What sync would spend: the fp32 reduction of a vector this size (the
     * time scaled from the bytes sent), against itself plus an inner step. */
    double fp32 = 2.0 * (t->q.n - 1) / t->q.n * (double)m * sizeof(float);
    double sync_us = wire > 0 ? (double)reduce_us * fp32 / (double)wire : 0;
    px_step_note_comm_share(t, sync_us, sync_us + (t->inner > 0 ? (double)t->round_inner_us / t->inner : 0));
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
        if (t->ndone < (int)(sizeof t->done / sizeof t->done[0])) { /* the loop prints it */
            outer_done_t *d = &t->done[t->ndone++];
            *d = (outer_done_t){.to = to, .outer = t->outer_steps, .weight = weight, .loss = loss, .wire = wire};
            snprintf(d->fragment, sizeof d->fragment, "%s", frag);
            snprintf(d->groups, sizeof d->groups, "%s", groups);
        }
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
 * quorum change or a stop abandons a pending round (px_diloco_abandon): a stop's
 * checkpoint then holds the round's steps without that fragment's update. */

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

/* The pending round given up before its communicators go (a failed step,
 * a quorum change, a stop): its collective returns once aborted. */
void px_diloco_abandon(trainer_t *t) {
    if (t->pend.running) {
        pthread_mutex_lock(&t->comm_mu);
        px_comm_abort(t->cross);
        pthread_mutex_unlock(&t->comm_mu);
        pending_join(t);
    }
    pending_forget(t, "its communicators are gone");
}

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
    if (!cfg->outer_overlap || newer || p == SYNC_ALL || to >= cfg->steps || px_diloco_leaving(t)) return 1;
    int64_t every = cfg->checkpoint_every;
    if (t->persist.time_due) return 1; /* --checkpoint-every-s: the save takes this outer step's result */
    return cfg->checkpoint_dir && cfg->checkpoint_dir[0] && every > 0 && to / every > t->st.step / every;
}

/* The outer step, when a group's round is done (with weight 0 for a group
 * that joined the round late, see px_diloco_align_round, or has not trained the
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
int px_diloco_outer_step(trainer_t *t, int *adopt, float *loss_out) {
    const px_trainer_config_t *cfg = t->cfg;
    size_t n = t->st.n;
    int W = cfg->ranks_per_group, H = px_diloco_round_len(t), F = cfg->fragments, p = fragment_of_round(t, t->st.step);
    /* the job's last outer step (every group ends with the global model), and the one where --mode auto goes
     * back to sync (which needs every local parameter at its global value): every fragment */
    if (F > 1 && (t->st.step + H >= cfg->steps || px_diloco_leaving(t))) p = SYNC_ALL;
    int pend_ok = pending_join(t);
    local_read(t);
    float *g = host_grads(t), *tail = g + n, *lp = local_params(t);
    float w = t->inner == H && H > 0 && t->round_full && whole_fragment(t, p) && t->round_samples > 0 ? 1.0f : 0.0f;
    px_vote_fill(tail, t->st.step, px_agent_known_quorum_id(t->agent) > t->qid, px_persist_vote(&t->persist),
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
    px_persist_agreed(&t->persist, passed && px_vote_save(tail), passed && px_vote_busy(tail)); /* (its save) */
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
        const char *why = st != PX_COMM_OK ? px_step_failure_reason(t) : "the groups disagree on the round";
        px_log_warn("outer_step_failed step=%lld quorum_id=%lld reason=\"%s\": retried in the next quorum",
                    (long long)t->st.step, (long long)t->qid, why);
        px_agent_report_failure(t->agent, NULL, -1, t->qid, t->st.step, why);
        return 0;
    }
    px_persist_fence(&t->persist); /* the first write to the state since the last commit */
    *adopt = newer;
    if (weight <= 0 && F == 1) { /* nobody had a round to give (every group joined it late, or had no samples) */
        px_diloco_start_round(t);
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
void px_diloco_set_state_mode(trainer_t *t, int dl) {
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
int px_diloco_wanted(const trainer_t *t) {
    if (t->cfg->mode == PX_MODE_AUTO) return quorum_says_diloco(t);
    return t->cfg->mode == PX_MODE_DILOCO && t->st.step >= t->cfg->sync_warmup;
}

/* DiLoCo in a quorum that says sync: the state goes back at the next point
 * where every group's local parameters equal the global ones. */
int px_diloco_leaving(const trainer_t *t) {
    return t->cfg->mode == PX_MODE_AUTO && diloco(t) && !quorum_says_diloco(t);
}

/* The log line of a mode change (the loop prints its event line). */
static void mode_changed(trainer_t *t, const char *why) {
    px_log_info("mode_changed mode=%s step=%lld quorum_id=%lld: %s", diloco(t) ? "diloco" : "sync",
                (long long)t->st.step, (long long)t->qid, why);
}

/* A heal may bring a state of the other mode (its mask travels with it)
 * into the buffers of ours: the parameters it put where ours are move to
 * where its mode keeps them. Right after the quorum is joined, before
 * anything else reads the state. */
int px_diloco_follow_healed_mode(trainer_t *t) {
    int dl = t->st.local != 0;
    if (t->cfg->mode == PX_MODE_SYNC || dl == diloco(t)) return 0;
    local_read(t);
    memcpy(dl ? t->global : local_params(t), t->st.buf[PX_STATE_PARAMS], t->st.n * sizeof(float));
    local_written(t);
    px_diloco_set_state_mode(t, dl);
    if (dl) px_diloco_start_round(t);
    mode_changed(t, "the state healed from another group is in that mode");
    return 1;
}

/* Sync to DiLoCo, at a committed step that every participant shares
 * (right after joining a quorum that says so, or at --sync-warmup's step):
 * the parameters become the global ones and a round starts from them,
 * every fragment's whole; the moments go on as each group's own; the outer
 * momentum is what the state holds (zero, unless a DiLoCo checkpoint was
 * restored). */
void px_diloco_enter(trainer_t *t) {
    local_read(t);
    memcpy(t->global, local_params(t), t->st.n * sizeof(float));
    px_diloco_set_state_mode(t, 1);
    px_diloco_start_round(t);
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
int px_diloco_leave(trainer_t *t) {
    size_t n = t->st.n;
    float *g = host_grads(t), inv = 1.0f / (float)t->q.n;
    int averaged = 0;
    local_read(t);
    for (int b = PX_STATE_M; b <= PX_STATE_V; b++) {
        memcpy(g, t->st.buf[b], n * sizeof(float));
        t->bytes_cross += 2.0 * (t->q.n - 1) / t->q.n * (double)n * sizeof(float);
        if (px_comm_allreduce_sum_f32(state_cross(t), g, n) != PX_COMM_OK) {
            px_log_warn("mode_change_failed step=%lld quorum_id=%lld reason=\"%s\": still diloco, retried at the next "
                        "outer step", (long long)t->st.step, (long long)t->qid, px_step_failure_reason(t));
            px_agent_report_failure(t->agent, NULL, -1, t->qid, t->st.step, px_step_failure_reason(t));
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
    px_diloco_set_state_mode(t, 0);
    mode_changed(t, "the quorum says sync; the groups' moments averaged");
    return 0;
}
