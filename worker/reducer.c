/* Bucketed, overlapped gradient reduction (reducer.h): the model's release
 * hook copies each finished unit's gradient slices into the current staging
 * bucket; a full bucket (or the last, with the vote's tail) is handed to the
 * job queue's thread, which sums it inside the group and across groups and
 * copies the sums back into the grads. */
#include "reducer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_jobq.h"
#include "vote.h"

/* A run of grads copied into a bucket. */
typedef struct {
    float *dst;
    size_t len;
} segment_t;

typedef struct {
    float *stage;
    size_t fill;
    segment_t *segs;
    int nseg;
    unsigned long job; /* the job reducing it (0: none in flight) */
} bucket_t;

typedef struct {
    int bucket;
    int last; /* carries the vote's tail at its end */
} job_t;

struct px_reducer {
    px_gpt_t *model;
    px_gpt_source_t src;
    size_t cap;        /* floats per bucket */
    int max_segs;
    bucket_t b[2];
    int cur;
    int armed, members;
    int64_t step;
    px_comm_t *intra, *cross;
    px_jobq_t *jobs;
    pthread_mutex_t mu; /* error */
    char error[256];
    uint64_t reduced;
};

/* ---- the communication thread -------------------------------------------- */

static int fail(px_reducer_t *r, const char *what, px_comm_t *c, px_comm_status_t st) {
    pthread_mutex_lock(&r->mu);
    if (!r->error[0])
        snprintf(r->error, sizeof r->error, "%s: %s: %s", what, px_comm_status_str(st), c ? px_comm_last_error(c) : "");
    pthread_mutex_unlock(&r->mu);
    return -1;
}

static int run_job(void *ctx, const void *job) {
    px_reducer_t *r = ctx;
    const job_t *j = job;
    bucket_t *b = &r->b[j->bucket];
    if (!r->cross) return fail(r, "bucket reduction", NULL, PX_COMM_ERROR);
    px_comm_status_t st = PX_COMM_OK;
    if (r->intra && (st = px_comm_allreduce_sum_f32(r->intra, b->stage, b->fill)) != PX_COMM_OK)
        return fail(r, "bucket sum inside the group", r->intra, st);
    if (j->last && r->intra) px_vote_relay(b->stage + b->fill - PX_VOTE_N, r->members, r->step);
    if ((st = px_comm_allreduce_sum_f32(r->cross, b->stage, b->fill)) != PX_COMM_OK)
        return fail(r, "bucket sum across groups", r->cross, st);
    const float *from = b->stage;
    for (int i = 0; i < b->nseg; i++) {
        memcpy(b->segs[i].dst, from, b->segs[i].len * sizeof(float));
        from += b->segs[i].len;
    }
    r->reduced++;
    return 0;
}

/* ---- filling buckets (the trainer's thread) ---------------------------------- */

static void flush(px_reducer_t *r, int last) {
    bucket_t *b = &r->b[r->cur];
    if (b->fill == 0 && !last) return;
    job_t j = {r->cur, last};
    b->job = px_jobq_issue(r->jobs, &j);
    r->cur ^= 1;
    bucket_t *next = &r->b[r->cur];
    if (next->job) px_jobq_wait(r->jobs, next->job); /* a failure shows in finish */
    next->job = 0;
    next->fill = 0;
    next->nseg = 0;
}

static void add(px_reducer_t *r, float *src, size_t len) {
    while (len > 0) {
        bucket_t *b = &r->b[r->cur];
        if (b->fill == r->cap || b->nseg == r->max_segs) { /* full: reduce it, go on in the other */
            flush(r, 0);
            continue;
        }
        size_t take = r->cap - b->fill < len ? r->cap - b->fill : len;
        memcpy(b->stage + b->fill, src, take * sizeof(float));
        b->segs[b->nseg++] = (segment_t){src, take};
        b->fill += take;
        src += take;
        len -= take;
    }
}

/* The model's release hook: unit `unit`'s gradients are final. */
static int on_release(void *ctx, int unit, px_gpt_pass_t pass) {
    px_reducer_t *r = ctx;
    if (pass != PX_GPT_BWD || !r->armed) return 0;
    px_gpt_t *m = r->model;
    if (unit == 0) { /* wte, wpe at the front; lnfw, lnfb and the vote's tail at the end */
        add(r, m->grads, m->tensor_sizes[PX_WTE] + m->tensor_sizes[PX_WPE]);
        /* the tail must end the last bucket: it may not be split from it */
        size_t end = m->tensor_sizes[PX_LNFW] + m->tensor_sizes[PX_LNFB] + PX_VOTE_N;
        if (r->b[r->cur].fill + end > r->cap) flush(r, 0);
        add(r, m->grads + m->tensor_offsets[PX_LNFW], end);
        flush(r, 1);
        return 0;
    }
    size_t l = (size_t)unit - 1, L = (size_t)m->config.num_layers;
    for (int t = PX_LN1W; t <= PX_FCPROJB; t++) {
        size_t per = m->tensor_sizes[t] / L;
        add(r, m->grads + m->tensor_offsets[t] + l * per, per);
    }
    return 0;
}

/* ---- the rest of the API -------------------------------------------------------- */

px_reducer_t *px_reducer_new(px_gpt_t *model, size_t bucket_floats) {
    px_reducer_t *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    size_t lnf = model->tensor_sizes[PX_LNFW] + model->tensor_sizes[PX_LNFB] + PX_VOTE_N;
    r->model = model;
    r->cap = bucket_floats < 1024 ? 1024 : bucket_floats;
    if (r->cap < lnf) r->cap = lnf;
    r->max_segs = 12 * model->config.num_layers + 8;
    pthread_mutex_init(&r->mu, NULL);
    for (int i = 0; i < 2; i++) {
        r->b[i].stage = malloc(r->cap * sizeof(float));
        r->b[i].segs = malloc((size_t)r->max_segs * sizeof(segment_t));
        if (!r->b[i].stage || !r->b[i].segs) goto fail;
    }
    if (!(r->jobs = px_jobq_new(sizeof(job_t), 2, run_job, r))) goto fail;
    r->src = (px_gpt_source_t){r, NULL, on_release, NULL};
    model->src = &r->src;
    return r;
fail:
    px_reducer_destroy(&r);
    return NULL;
}

void px_reducer_destroy(px_reducer_t **rp) {
    px_reducer_t *r = rp ? *rp : NULL;
    if (!r) return;
    px_jobq_destroy(&r->jobs);
    if (r->model && r->model->src == &r->src) r->model->src = NULL;
    for (int i = 0; i < 2; i++) {
        free(r->b[i].stage);
        free(r->b[i].segs);
    }
    pthread_mutex_destroy(&r->mu);
    free(r);
    *rp = NULL;
}

void px_reducer_set_comms(px_reducer_t *r, px_comm_t *intra, px_comm_t *cross) {
    px_jobq_reset(r->jobs);
    r->intra = intra;
    r->cross = cross;
    r->error[0] = '\0';
}

void px_reducer_arm(px_reducer_t *r, int members, int64_t step) {
    r->armed = 1;
    r->members = members;
    r->step = step;
    for (int i = 0; i < 2; i++) r->b[i].fill = r->b[i].nseg = 0, r->b[i].job = 0;
    r->cur = 0;
}

void px_reducer_release_all(px_reducer_t *r) {
    for (int u = r->model->config.num_layers; u >= 0; u--) on_release(r, u, PX_GPT_BWD);
}

int px_reducer_finish(px_reducer_t *r) {
    r->armed = 0;
    return px_jobq_wait_all(r->jobs);
}

const char *px_reducer_error(const px_reducer_t *r) { return r->error; }
uint64_t px_reducer_buckets(const px_reducer_t *r) { return r->reduced; }
