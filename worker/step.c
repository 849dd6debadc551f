/* One step's work on this rank, and a synchronous step whole
 * (px_step_sync), as the protocol at the top of trainer.c describes: the
 * rank's samples of the step, the forward and backward (a whole replica,
 * a sharded rank, or a pipeline stage), the gradient reduction with the
 * commit vote folded into its tail, and the optimizer step. DiLoCo's inner
 * steps (diloco.c) use the same samples and gradients. Nothing here prints
 * on stdout: the loop reports what a step returns. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "px_log.h"
#include "px_time.h"
#include "trainer_int.h"
#include "vote.h"

/* The comm share's moving average: the weights of the average so far and
 * of the newest step (they sum to 1). */
#define COMM_SHARE_EMA_OLD 0.8
#define COMM_SHARE_EMA_NEW 0.2

/* Applies the reduced gradients of step `step` to the shard, clipped by
 * the group's global norm. */
void px_step_shard_apply(trainer_t *t, int64_t step, float norm) {
    const px_trainer_config_t *cfg = t->cfg;
    float lr = px_lr_at((int)step, cfg->warmup, (int)cfg->steps, cfg->lr, cfg->min_lr);
    px_shard_step(t->shard, norm, cfg->grad_clip, lr, cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay, (int)step + 1);
    px_compute_state_changed(t->dev); /* a GPU's host copy is now stale */
    t->last_norm = norm;
    t->pending_step = -1;
}

/* The group's share of a step's global batch: samples [jB/P, (j+1)B/P). */
int px_step_batch_of_group(const trainer_t *t) {
    int B = t->cfg->global_batch, P = t->q.n;
    return (int)((int64_t)(t->my_index + 1) * B / P) - (int)((int64_t)t->my_index * B / P);
}

/* The samples a step's gradient is the mean over: the global batch, or
 * with DiLoCo the group's share of it (its inner steps are its own). */
int px_step_batch_of(const trainer_t *t) {
    if (!diloco(t)) return t->cfg->global_batch;
    int G = px_step_batch_of_group(t);
    return G > 0 ? G : 1; /* a group without samples (more groups than samples) computes nothing */
}

/* Samples [lo, hi) of the global batch that this rank computes. */
void px_step_my_share(const trainer_t *t, int *lo, int *hi) {
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
void px_step_note_comm_share(trainer_t *t, double comm_us, double step_us) {
    double s = step_us > 0 ? comm_us / step_us : 0;
    s = s < 0 ? 0 : s > 1 ? 1 : s;
    t->comm_share = t->comm_share_n++ ? COMM_SHARE_EMA_OLD * t->comm_share + COMM_SHARE_EMA_NEW * s : s;
    px_agent_set_comm_share(t->agent, (float)t->comm_share);
}

/* A step's cross-group sum, timed for the comm share (px_step_note_comm_share). */
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
    px_vote_fill(px_compute_tail(t->dev), t->st.step, px_agent_known_quorum_id(t->agent) > t->qid,
                 px_persist_vote(&t->persist), loss);
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
    *mb = (px_pipe_mb_t){t->inputs, t->targets, n, scale * (float)n / (float)px_step_batch_of(t)};
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

/* A pipeline stage's part of the step (px_step_compute_grads). */
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
int px_step_compute_grads(trainer_t *t, int lo, int hi, float *loss_out) {
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
    float B = (float)px_step_batch_of(t);
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

float px_step_eval_loss(trainer_t *t) {
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
const char *px_step_failure_reason(trainer_t *t) {
    if (t->shard && px_shard_last_error(t->shard)[0]) return px_shard_last_error(t->shard);
    if (t->pipe && px_pipe_last_error(t->pipe)[0]) return px_pipe_last_error(t->pipe);
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
    px_step_shard_apply(t, t->st.step, *norm);
    return 0;
}

px_step_result_t px_step_sync(trainer_t *t, px_step_out_t *out) {
    const px_trainer_config_t *cfg = t->cfg;
    size_t n = t->st.n;
    int lo, hi;
    px_step_my_share(t, &lo, &hi);
    float local_loss = 0;
    float *tail = px_compute_tail(t->dev);
    px_comm_status_t st = PX_COMM_ERROR;
    t->step_cross_us = 0;
    if (px_step_compute_grads(t, lo, hi, &local_loss) == 0) {
        if (t->reducer) { /* reduced during the backward */
            st = PX_COMM_OK;
        } else {
            px_vote_fill(tail, t->st.step, px_agent_known_quorum_id(t->agent) > t->qid,
                         px_persist_vote(&t->persist), local_loss);
            st = reduce(t, n);
        }
    }
    if (st != PX_COMM_OK) {
        const char *why = px_step_failure_reason(t);
        px_log_warn("step_failed step=%lld quorum_id=%lld status=%s reason=\"%s\"", (long long)t->st.step,
                    (long long)t->qid, px_comm_status_str(st), why);
        px_agent_report_failure(t->agent, NULL, -1, t->qid, t->st.step, why);
        out->status = st;
        return PX_STEP_COMM_FAILED;
    }
    if (!px_vote_passed(tail, t->q.n, t->st.step)) {
        px_log_warn("vote_failed step=%lld quorum_id=%lld count=%.0f sum=%.0f sum_sq=%.0f groups=%d: participants "
                    "disagree on the step", (long long)t->st.step, (long long)t->qid, tail[PX_VOTE_COUNT],
                    tail[PX_VOTE_STEP], tail[PX_VOTE_STEP_SQ], t->q.n);
        px_agent_report_failure(t->agent, NULL, -1, t->qid, t->st.step, "commit vote disagreed");
        return PX_STEP_DISCARDED;
    }
    px_persist_agreed(&t->persist, px_vote_save(tail), px_vote_busy(tail)); /* before the pass: it may save */
    state_write_fence(t);
    if (t->shard) {
        if (shard_commit(t, &out->norm) != 0) {
            px_log_warn("step_unconfirmed step=%lld quorum_id=%lld reason=\"%s\": gradients kept pending",
                        (long long)t->st.step, (long long)t->qid, px_step_failure_reason(t));
            px_agent_report_failure(t->agent, NULL, -1, t->qid, t->st.step, px_step_failure_reason(t));
            return PX_STEP_DISCARDED;
        }
    } else {
        float lr = px_lr_at((int)t->st.step, cfg->warmup, (int)cfg->steps, cfg->lr, cfg->min_lr);
        /* a step whose state the commit saves takes the snapshot as it goes */
        size_t part = 0;
        px_ckpt_pass_t *pass = px_compute_state_on_host(t->dev) ? px_persist_pass(&t->persist, &t->st, &t->q, &part) : NULL;
        if (pass)
            out->norm = px_compute_clip_adamw_parts(t->dev, cfg->grad_clip, lr, cfg->beta1, cfg->beta2, cfg->eps,
                                                    cfg->weight_decay, (int)t->st.step + 1, part, px_persist_visit, pass);
        else
            out->norm = px_compute_clip_adamw(t->dev, cfg->grad_clip, lr, cfg->beta1, cfg->beta2, cfg->eps,
                                              cfg->weight_decay, (int)t->st.step + 1);
        px_persist_passed(&t->persist, pass, t->st.step + 1);
    }
    out->loss = tail[PX_VOTE_LOSS];
    out->adopt = tail[PX_VOTE_NEWER] > 0.5f;
    t->st.step++;
    return PX_STEP_COMMITTED;
}
