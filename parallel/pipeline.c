/* Pipeline stage runtime (pipeline.h): a schedule's ops on a stage model,
 * receives on the caller's thread, sends on a thread per outgoing link. */
#include "pipeline.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh_comm.h"
#include "px_jobq.h"
#include "px_time.h"

enum { OUT_FWD, OUT_BWD, OUTS }; /* the outgoing links: activations to the next stage, gradients to the previous */

typedef struct {
    const float *buf;
    size_t bytes;
    int mb;
} send_t;

typedef struct {
    px_pipe_t *p;
    int which;
} sender_t;

struct px_pipe {
    px_pipe_model_t model;
    px_gpt_stage_t st;
    int stage, P, T, M, split;
    px_sched_kind_t kind;
    px_schedule_t sched;
    int nslots;
    int *slot_of;      /* [M] the micro-batch's slot, -1 when none */
    int *slot_free;    /* [nslots] */
    unsigned long (*slot_sent)[OUTS]; /* [nslots] the last send from each slot, per queue */
    float *scale;      /* [M] loss scales, from the forward for the backward */
    float *rx;         /* receive buffer (B,T,C) in the model's memory, grown on demand */
    size_t rx_cap;
    px_comm_t *link[PX_LINKS];
    px_jobq_t *out[OUTS];
    sender_t senders[OUTS];
    pthread_mutex_t mu; /* error, written by the send threads too */
    char error[256];
    double busy_s, total_s;
};

static void set_error(px_pipe_t *p, const char *fmt, const char *what, int mb, px_comm_t *c) {
    pthread_mutex_lock(&p->mu);
    if (!p->error[0]) {
        char head[128];
        snprintf(head, sizeof head, fmt, what, mb);
        snprintf(p->error, sizeof p->error, "%s%s%s", head, c ? ": " : "", c ? px_comm_last_error(c) : "");
    }
    pthread_mutex_unlock(&p->mu);
}

static int run_send(void *ctx, const void *job) {
    const sender_t *s = ctx;
    const send_t *j = job;
    px_comm_t *c = s->p->link[s->which == OUT_FWD ? PX_LINK_NEXT_FWD : PX_LINK_PREV_BWD];
    if (c && px_comm_send(c, j->buf, j->bytes, s->which == OUT_FWD ? 1 : 0, 0) == PX_COMM_OK) return 0;
    set_error(s->p, "pipeline: sending %s of micro-batch %d", s->which == OUT_FWD ? "the activations" : "the gradients",
              j->mb, c);
    return -1;
}

/* ---- construction ------------------------------------------------------------ */

static void free_tables(px_pipe_t *p) {
    px_sched_free(&p->sched);
    free(p->slot_of);
    free(p->slot_free);
    free(p->slot_sent);
    free(p->scale);
    p->slot_of = p->slot_free = NULL;
    p->slot_sent = NULL;
    p->scale = NULL;
}

int px_pipe_set_microbatches(px_pipe_t *p, int M, char *err, size_t errlen) {
    if (p->M == M && p->slot_of) return 0;
    free_tables(p);
    if (px_sched_build(p->kind, p->P, M, &p->sched, err, errlen) != 0) return -1;
    p->M = M;
    p->nslots = px_sched_peak_inflight(&p->sched, p->stage);
    p->slot_of = malloc(sizeof(int) * (size_t)M);
    p->scale = calloc((size_t)M, sizeof(float));
    p->slot_free = malloc(sizeof(int) * (size_t)p->nslots);
    p->slot_sent = calloc((size_t)p->nslots, sizeof *p->slot_sent);
    if (!p->slot_of || !p->scale || !p->slot_free || !p->slot_sent ||
        p->model.set_stage(p->model.ctx, &p->st, p->nslots, p->split) != 0) {
        snprintf(err, errlen, "pipeline: out of memory for %d micro-batches", M);
        free_tables(p);
        return -1;
    }
    return 0;
}

/* ---- the CPU model's table ---- */

static int cpu_set_stage(void *ctx, const px_gpt_stage_t *st, int slots, int split) {
    return px_gpt_set_stage(ctx, st, slots, split);
}
static float cpu_forward(void *ctx, int slot, const int *inputs, const float *x, const int *targets, int B, int T) {
    return px_gpt_stage_forward(ctx, slot, inputs, x, targets, B, T);
}
static const float *cpu_output(void *ctx, int slot) { return px_gpt_stage_output(ctx, slot); }
static int cpu_batch(void *ctx, int slot) { return px_gpt_stage_batch(ctx, slot); }
static int cpu_backward(void *ctx, int slot, const float *dout, float loss_scale, int weights) {
    return px_gpt_stage_backward(ctx, slot, dout, loss_scale, weights);
}
static int cpu_backward_weights(void *ctx, int slot) { return px_gpt_stage_backward_weights(ctx, slot); }
static const float *cpu_input_grad(void *ctx, int slot) { return px_gpt_stage_input_grad(ctx, slot); }
static void cpu_fence(void *ctx) { (void)ctx; }
static float *cpu_alloc(void *ctx, size_t n) {
    (void)ctx;
    return malloc(n ? n * sizeof(float) : 1);
}
static void cpu_release(void *ctx, float *p) {
    (void)ctx;
    free(p);
}

px_pipe_model_t px_pipe_model_cpu(px_gpt_t *model) {
    return (px_pipe_model_t){model,       model->config.channels, cpu_set_stage, cpu_forward, cpu_output,
                             cpu_batch,   cpu_backward,           cpu_backward_weights, cpu_input_grad, cpu_fence,
                             cpu_alloc,   cpu_release};
}

px_pipe_t *px_pipe_new(const px_pipe_model_t *model, const px_gpt_stage_t *st, int stage, int P, px_sched_kind_t kind,
                       int M, int T, char *err, size_t errlen) {
    px_pipe_t *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "pipeline: out of memory");
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    p->model = *model;
    p->st = *st;
    p->stage = stage;
    p->P = P;
    p->T = T;
    p->kind = kind;
    p->split = kind == PX_SCHED_ZBH1;
    for (int i = 0; i < OUTS; i++) {
        p->senders[i] = (sender_t){p, i};
        /* a step sends at most M messages per link; the queue never blocks the stage */
        if (!(p->out[i] = px_jobq_new(sizeof(send_t), 65536 + 1, run_send, &p->senders[i]))) {
            snprintf(err, errlen, "pipeline: cannot start a send thread");
            px_pipe_destroy(&p);
            return NULL;
        }
    }
    if (px_pipe_set_microbatches(p, M, err, errlen) != 0) px_pipe_destroy(&p);
    return p;
}

void px_pipe_destroy(px_pipe_t **pp) {
    px_pipe_t *p = pp ? *pp : NULL;
    if (!p) return;
    for (int i = 0; i < OUTS; i++) px_jobq_destroy(&p->out[i]);
    free_tables(p);
    if (p->rx) p->model.release(p->model.ctx, p->rx);
    pthread_mutex_destroy(&p->mu);
    free(p);
    *pp = NULL;
}

int px_pipe_microbatches(const px_pipe_t *p) { return p->M; }

void px_pipe_set_links(px_pipe_t *p, px_comm_t *const link[4]) {
    for (int i = 0; i < OUTS; i++) px_jobq_reset(p->out[i]); /* idle from here on */
    pthread_mutex_lock(&p->mu);
    for (int k = 0; k < PX_LINKS; k++) p->link[k] = link ? link[k] : NULL;
    p->error[0] = '\0';
    pthread_mutex_unlock(&p->mu);
}

const char *px_pipe_last_error(const px_pipe_t *p) { return p->error; }

void px_pipe_times(const px_pipe_t *p, double *busy_s, double *total_s) {
    *busy_s = p->busy_s;
    *total_s = p->total_s;
}

/* ---- the ops -------------------------------------------------------------------- */

static size_t act_bytes(const px_pipe_t *p, int B) {
    return (size_t)B * (size_t)p->T * (size_t)p->model.channels * sizeof(float);
}

/* Receives B x T x C floats on link k into p->rx. */
static const float *receive(px_pipe_t *p, int k, int B, const char *what, int mb) {
    size_t bytes = act_bytes(p, B);
    p->model.fence(p->model.ctx); /* the compute that read the last receive is done */
    if (bytes > p->rx_cap) {
        float *n = p->model.alloc(p->model.ctx, bytes / sizeof(float));
        if (!n) {
            set_error(p, "pipeline: out of memory receiving %s of micro-batch %d", what, mb, NULL);
            return NULL;
        }
        if (p->rx) p->model.release(p->model.ctx, p->rx);
        p->rx = n;
        p->rx_cap = bytes;
    }
    px_comm_t *c = p->link[k];
    if (c && px_comm_recv(c, p->rx, bytes, k == PX_LINK_PREV_FWD ? 0 : 1, 0) == PX_COMM_OK) return p->rx;
    set_error(p, "pipeline: receiving %s of micro-batch %d", what, mb, c);
    return NULL;
}

static void send_from(px_pipe_t *p, int which, int slot, const float *buf, int B, int mb) {
    send_t j = {buf, act_bytes(p, B), mb};
    p->slot_sent[slot][which] = px_jobq_issue(p->out[which], &j);
}

/* Slot s once the sends from it are done: 0, or -1 when one failed. */
static int sent_from(px_pipe_t *p, int s) {
    for (int i = 0; i < OUTS; i++)
        if (p->slot_sent[s][i] && px_jobq_wait(p->out[i], p->slot_sent[s][i]) != 0) return -1;
    return 0;
}

/* A free slot for micro-batch mb, once the sends from it are done. */
static int take_slot(px_pipe_t *p, int mb) {
    for (int s = 0; s < p->nslots; s++)
        if (p->slot_free[s]) {
            if (sent_from(p, s) != 0) return -1;
            p->slot_free[s] = 0;
            p->slot_of[mb] = s;
            return s;
        }
    set_error(p, "pipeline: %s (micro-batch %d): no free activation slot", "schedule", mb, NULL);
    return -1;
}

static int op_forward(px_pipe_t *p, px_pipe_fill_fn fill, void *ctx, int mb, int slot, double *loss) {
    px_pipe_mb_t m;
    if (fill(ctx, mb, &m) != 0) {
        set_error(p, "pipeline: %s %d", "no data for micro-batch", mb, NULL);
        return -1;
    }
    if (mb < p->M) p->scale[mb] = m.loss_scale;
    const float *x = NULL;
    if (!p->st.first && !(x = receive(p, PX_LINK_PREV_FWD, m.B, "the activations", mb))) return -1;
    int64_t t0 = px_now_us();
    float l = p->model.forward(p->model.ctx, slot, m.inputs, x, m.targets, m.B, p->T);
    p->busy_s += (double)(px_now_us() - t0) / 1e6;
    if (!isfinite(l)) {
        set_error(p, "pipeline: %s of micro-batch %d failed", "the forward", mb, NULL);
        return -1;
    }
    if (p->st.last) *loss += (double)l * m.loss_scale;
    else send_from(p, OUT_FWD, slot, p->model.output(p->model.ctx, slot), m.B, mb);
    return 0;
}

static int op_backward(px_pipe_t *p, int mb, int weights) {
    int slot = p->slot_of[mb];
    const float *dout = NULL;
    int nb = p->model.batch(p->model.ctx, slot);
    if (!p->st.last && !(dout = receive(p, PX_LINK_NEXT_BWD, nb, "the gradients", mb))) return -1;
    int64_t t0 = px_now_us();
    int rc = p->model.backward(p->model.ctx, slot, dout, p->st.last ? p->scale[mb] : 1.0f, weights);
    p->busy_s += (double)(px_now_us() - t0) / 1e6;
    if (rc != 0) {
        set_error(p, "pipeline: %s of micro-batch %d failed", "the backward", mb, NULL);
        return -1;
    }
    if (!p->st.first) send_from(p, OUT_BWD, slot, p->model.input_grad(p->model.ctx, slot), nb, mb);
    return 0;
}

static int op_weights(px_pipe_t *p, int mb) {
    int64_t t0 = px_now_us();
    int rc = p->model.backward_weights(p->model.ctx, p->slot_of[mb]);
    p->busy_s += (double)(px_now_us() - t0) / 1e6;
    if (rc != 0) set_error(p, "pipeline: %s of micro-batch %d failed", "the weight gradients", mb, NULL);
    return rc;
}

/* Waits for every send: on failure too, so that nothing reads a slot later.
 * A failed step first aborts this rank's links: its neighbours' receives
 * and sends then fail at once instead of at their timeout, and so do its
 * own sends still queued. */
static int drain(px_pipe_t *p, int failed) {
    int rc = 0;
    pthread_mutex_lock(&p->mu);
    for (int k = 0; failed && k < PX_LINKS; k++)
        if (p->link[k]) px_comm_abort(p->link[k]);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < OUTS; i++)
        if (px_jobq_wait_all(p->out[i]) != 0) rc = -1;
    return rc;
}

static void reset_slots(px_pipe_t *p) {
    for (int s = 0; s < p->nslots; s++) p->slot_free[s] = 1;
    for (int k = 0; k < p->M; k++) p->slot_of[k] = -1;
    memset(p->slot_sent, 0, sizeof *p->slot_sent * (size_t)p->nslots);
}

int px_pipe_step(px_pipe_t *p, px_pipe_fill_fn fill, void *ctx, double *loss) {
    int64_t t0 = px_now_us();
    reset_slots(p);
    *loss = 0;
    int rc = 0;
    const px_sched_op_t *ops = p->sched.ops[p->stage];
    for (int i = 0; rc == 0 && i < p->sched.nops[p->stage]; i++) {
        int mb = ops[i].mb, slot;
        switch (ops[i].kind) {
        case PX_OP_F:
            slot = take_slot(p, mb);
            rc = slot < 0 ? -1 : op_forward(p, fill, ctx, mb, slot, loss);
            break;
        case PX_OP_B:
        case PX_OP_BI:
            rc = op_backward(p, mb, ops[i].kind == PX_OP_B);
            if (rc == 0 && ops[i].kind == PX_OP_B) p->slot_free[p->slot_of[mb]] = 1;
            break;
        case PX_OP_W:
            rc = op_weights(p, mb);
            if (rc == 0) p->slot_free[p->slot_of[mb]] = 1;
            break;
        }
    }
    if (drain(p, rc != 0) != 0) rc = -1;
    p->total_s += (double)(px_now_us() - t0) / 1e6;
    return rc;
}

int px_pipe_forward(px_pipe_t *p, px_pipe_fill_fn fill, void *ctx, int n, double *loss_sum) {
    reset_slots(p);
    *loss_sum = 0;
    int rc = 0;
    for (int k = 0; rc == 0 && k < n; k++) /* one slot, again once its last send is done; the fill's scale is 1 */
        rc = sent_from(p, 0) != 0 ? -1 : op_forward(p, fill, ctx, k, 0, loss_sum);
    if (drain(p, rc != 0) != 0) rc = -1;
    return rc;
}
