/* Sharded training state and the FSDP/TP parameter source (sharded.h): the
 * unit layout, the tensor-parallel slices, the communication thread that
 * runs the fsdp gathers and reduce-scatters in issue order, and the
 * optimizer over a shard. */
#include "sharded.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "px_err.h"
#include "px_jobq.h"
#include "px_log.h"

#define UNIT_MAX_TENSORS 12
#define QUEUE 16

/* One tensor of a unit: its place in the unit's flat layout. */
typedef struct {
    int tensor;
    size_t off, len;
} unit_tensor_t;

typedef struct {
    int ntensors;
    unit_tensor_t t[UNIT_MAX_TENSORS];
    size_t flat;   /* floats before padding */
    size_t padded; /* multiple of F */
    size_t piece;  /* padded / F */
    size_t shard_off;
} unit_t;

/* A contiguous run of the shard inside one tensor, for the optimizer. */
typedef struct {
    size_t off, len;
    int decay;  /* a matrix: weight decay applies */
    int unique; /* counted in norms by this rank (not a tp copy held by another rank) */
} segment_t;

typedef enum { JOB_GATHER, JOB_SCATTER } job_kind_t;

/* The working buffers, in the compute memory: the gathered units and their gradients (F > 1), and
 * tie_tmp (pipelines). */
typedef struct {
    float *outer_p, *outer_g;
    float **layer_p;  /* [nslots] (the array itself on the host) */
    float *layer_g[2];
    float *piece_tmp; /* a reduce-scatter's result before it is added */
    float *tie_tmp;   /* the other stage's unit 0 gradient piece (px_shard_tie_outer), made at first use */
} work_t;

typedef struct {
    job_kind_t kind;
    int unit;
    float *buf;
} job_t;

struct px_shard {
    px_gpt_config_t cfg;
    px_shard_layout_t lay; /* stage filled in (the whole model when none was given) */
    int nunits;
    unit_t *units;
    segment_t *segs;
    int nsegs;
    px_shard_bufs_t b;       /* host: the state others read and write */
    px_shard_bufs_t d;       /* where it computes: b itself, or its copy in mem */
    px_shard_memory_t mem;   /* the compute memory's operations */
    px_gpt_t *model;
    px_gpt_source_t src;
    /* working buffers (F > 1) */
    size_t layer_padded;     /* the largest layer unit */
    int nslots;              /* gathered layers held: 2, or L with keep_params */
    work_t w;                /* in the compute memory */
    /* main thread's bookkeeping: job ids (0: none) */
    unsigned long *gathered; /* per unit: the gather that fills its params slot */
    unsigned long scatter_of[2];
    /* communicators and the thread (F > 1) that runs every fsdp collective */
    px_comm_t *fsdp, *tp, *pp;
    px_jobq_t *jobs;
    pthread_mutex_t mu; /* error, written by either thread */
    char error[256];
    double bytes_fsdp, bytes_tp; /* sent, see px_shard_bytes_sent */
    px_shard_rect_t *rects;      /* every rectangle held (px_shard_place), built on first use */
    size_t nrects;
};

/* ---- layout ------------------------------------------------------------- */

static const int outer_tensors[] = {PX_WTE, PX_WPE, PX_LNFW, PX_LNFB};

static px_gpt_stage_t stage_of(const px_shard_layout_t *lay, const px_gpt_config_t *cfg) {
    return lay->stage.num_layers ? lay->stage : (px_gpt_stage_t){0, cfg->num_layers, 1, 1};
}

/* Unit u is on this rank's pipeline stage. */
static int holds(const px_gpt_stage_t *st, int u) {
    return u == 0 ? st->first || st->last : u - 1 >= st->first_layer && u - 1 < st->first_layer + st->num_layers;
}

static int build_units(px_shard_t *sh) {
    int F = sh->lay.fsdp;
    sh->lay.stage = stage_of(&sh->lay, &sh->cfg);
    sh->nunits = PX_GPT_UNITS(&sh->cfg);
    sh->units = calloc((size_t)sh->nunits, sizeof *sh->units);
    sh->segs = calloc((size_t)sh->nunits * UNIT_MAX_TENSORS, sizeof *sh->segs);
    if (!sh->units || !sh->segs) return -1;
    size_t shard_off = 0;
    for (int u = 0; u < sh->nunits; u++) {
        unit_t *un = &sh->units[u];
        int n = !holds(&sh->lay.stage, u) ? 0 : u == 0 ? 4 : UNIT_MAX_TENSORS;
        for (int i = 0; i < n; i++) {
            int t = u == 0 ? outer_tensors[i] : PX_LN1W + i;
            un->t[i] = (unit_tensor_t){t, un->flat, px_gpt_unit_tensor_size(&sh->cfg, sh->lay.tp, u, t)};
            un->flat += un->t[i].len;
        }
        un->ntensors = n;
        un->padded = (un->flat + (size_t)F - 1) / (size_t)F * (size_t)F;
        un->piece = un->padded / (size_t)F;
        un->shard_off = shard_off;
        shard_off += un->piece;
        if (u > 0 && un->padded > sh->layer_padded) sh->layer_padded = un->padded;
        /* the segments: this rank's piece [lo, hi) of the flat layout, tensor by tensor */
        size_t lo = (size_t)sh->lay.fsdp_rank * un->piece, hi = lo + un->piece;
        for (int i = 0; i < n; i++) {
            size_t a = un->t[i].off > lo ? un->t[i].off : lo;
            size_t e = un->t[i].off + un->t[i].len < hi ? un->t[i].off + un->t[i].len : hi;
            if (a >= e) continue;
            int t = un->t[i].tensor;
            int split = px_gpt_unit_tensor_size(&sh->cfg, (px_gpt_tp_t){1, 0}, u, t) != un->t[i].len;
            int tp_unique = split || sh->lay.tp.rank == 0, pp_unique = u > 0 || sh->lay.stage.first;
            sh->segs[sh->nsegs++] = (segment_t){un->shard_off + (a - lo), e - a, px_gpt_tensor_is_matrix(t),
                                                tp_unique && pp_unique};
        }
    }
    sh->b.n = shard_off;
    return 0;
}

size_t px_shard_unit_padded(const px_shard_t *sh, int unit) { return sh->units[unit].padded; }
size_t px_shard_unit_offset(const px_shard_t *sh, int unit) { return sh->units[unit].shard_off; }

/* Where a unit's tensor slice lives in the whole model: the logical tensor
 * is (R, K) per layer; this rank's slice is `blocks` row blocks of `brows`
 * rows, block j starting at row row0[j], columns [col0, col0 + ncols). */
typedef struct {
    size_t K, blocks, brows, row0[3], col0, ncols;
} slice_t;

static slice_t tp_slice(const px_gpt_config_t *cfg, px_gpt_tp_t tp, int t, size_t per_layer) {
    size_t C = (size_t)cfg->channels, T = (size_t)tp.size, r = (size_t)tp.rank;
    slice_t s = {.K = per_layer, .blocks = 1, .brows = 1, .col0 = 0, .ncols = per_layer}; /* whole: one row */
    switch (t) {
    case PX_QKVW:
    case PX_QKVB:
        s.K = t == PX_QKVW ? C : 1;
        s.ncols = s.K;
        s.blocks = 3;
        s.brows = C / T;
        for (int j = 0; j < 3; j++) s.row0[j] = (size_t)j * C + r * (C / T);
        break;
    case PX_FCW:
    case PX_FCB:
        s.K = t == PX_FCW ? C : 1;
        s.ncols = s.K;
        s.brows = 4 * C / T;
        s.row0[0] = r * (4 * C / T);
        break;
    case PX_ATTPROJW:
    case PX_FCPROJW:
        s.K = t == PX_ATTPROJW ? C : 4 * C;
        s.brows = C;
        s.ncols = s.K / T;
        s.col0 = r * s.ncols;
        break;
    case PX_WTE:
    case PX_WPE: /* replicated matrices: rows of C */
        s.K = s.ncols = C;
        s.brows = per_layer / C;
        break;
    default:
        break; /* replicated vectors: one row */
    }
    return s;
}

/* Copies between a logical tensor (one layer's, or an outer tensor) and this
 * rank's slice of it: to_local 1 reads logical, else writes it. */
static void slice_copy(const slice_t *s, float *logical, float *local, int to_local) {
    for (size_t j = 0; j < s->blocks; j++)
        for (size_t i = 0; i < s->brows; i++) {
            float *lg = logical + (s->row0[j] + i) * s->K + s->col0;
            float *lc = local + (j * s->brows + i) * s->ncols;
            if (to_local) memcpy(lc, lg, s->ncols * sizeof(float));
            else memcpy(lg, lc, s->ncols * sizeof(float));
        }
}

/* Copies unit u between a whole model's buffer `model` (params, m or v:
 * px_gpt_t's layout) and the unit's flat layout `flat` of tp rank tp. */
static void unit_copy(const px_shard_t *sh, px_gpt_tp_t tp, int u, float *model, float *flat, int to_flat) {
    size_t sizes[PX_GPT_NUM_TENSORS], offsets[PX_GPT_NUM_TENSORS], off = 0;
    px_gpt_tensor_sizes(&sh->cfg, sizes);
    for (int k = 0; k < PX_GPT_NUM_TENSORS; k++) offsets[k] = off, off += sizes[k];
    const unit_t *un = &sh->units[u];
    for (int i = 0; i < un->ntensors; i++) {
        int t = un->t[i].tensor;
        size_t per_layer = sizes[t] / (u == 0 ? 1 : (size_t)sh->cfg.num_layers);
        float *logical = model + offsets[t] + (u == 0 ? 0 : (size_t)(u - 1) * per_layer);
        slice_t s = tp_slice(&sh->cfg, tp, t, per_layer);
        slice_copy(&s, logical, flat + un->t[i].off, to_flat);
    }
}

/* ---- the communication thread ------------------------------------------- */

static void set_error(px_shard_t *sh, const char *what, px_comm_t *c, px_comm_status_t st) {
    pthread_mutex_lock(&sh->mu);
    if (!sh->error[0])
        snprintf(sh->error, sizeof sh->error, "%s: %s%s%s", what, px_comm_status_str(st), c ? ": " : "",
                 c ? px_comm_last_error(c) : "");
    pthread_mutex_unlock(&sh->mu);
}

static int run_job(void *ctx, const void *job) {
    px_shard_t *sh = ctx;
    const job_t *j = job;
    const unit_t *un = &sh->units[j->unit];
    float *mine = sh->d.params + un->shard_off;
    size_t F = (size_t)sh->lay.fsdp;
    px_comm_status_t st = PX_COMM_ERROR;
    if (!sh->fsdp) {
        set_error(sh, "fsdp: no communicator", NULL, st);
        return -1;
    }
    sh->bytes_fsdp += (double)(F - 1) * (double)un->piece * sizeof(float);
    if (j->kind == JOB_GATHER) {
        st = px_comm_allgather_f32(sh->fsdp, mine, j->buf, un->piece);
    } else {
        st = px_comm_reduce_scatter_sum_f32(sh->fsdp, j->buf, sh->w.piece_tmp, un->piece);
        if (st == PX_COMM_OK) sh->mem.accumulate(sh->mem.ctx, sh->d.grads + un->shard_off, sh->w.piece_tmp, un->piece);
    }
    if (st == PX_COMM_OK) return 0;
    set_error(sh, j->kind == JOB_GATHER ? "fsdp all-gather" : "fsdp reduce-scatter", sh->fsdp, st);
    return -1;
}

static unsigned long issue(px_shard_t *sh, job_kind_t kind, int unit, float *buf) {
    job_t j = {kind, unit, buf};
    return px_jobq_issue(sh->jobs, &j);
}

/* ---- the parameter source ------------------------------------------------ */

static void unit_views(const px_shard_t *sh, int u, float *flat, px_gpt_tensors_t *v) {
    float **slot[PX_GPT_NUM_TENSORS] = {
        &v->wte,  &v->wpe,  &v->ln1w, &v->ln1b, &v->qkvw,    &v->qkvb,    &v->attprojw, &v->attprojb,
        &v->ln2w, &v->ln2b, &v->fcw,  &v->fcb,  &v->fcprojw, &v->fcprojb, &v->lnfw,     &v->lnfb};
    memset(v, 0, sizeof *v);
    const unit_t *un = &sh->units[u];
    for (int i = 0; i < un->ntensors; i++) *slot[un->t[i].tensor] = flat + un->t[i].off;
}

static float *params_slot(px_shard_t *sh, int u) {
    if (u == 0) return sh->w.outer_p;
    return sh->w.layer_p[sh->lay.keep_params ? u - 1 : u % 2];
}

/* Issues the gather of unit u's params unless one is in flight or done. */
static void prefetch(px_shard_t *sh, int u) {
    if (u >= 0 && u < sh->nunits && !sh->gathered[u]) sh->gathered[u] = issue(sh, JOB_GATHER, u, params_slot(sh, u));
}

/* The stage's units in a pass's order: the forward runs unit 0 (when held),
 * then its layers up; the backward unit 0, then its layers down. The unit
 * after u in that order, or -1. */
static int next_unit(const px_shard_t *sh, int u, px_gpt_pass_t pass) {
    const px_gpt_stage_t *st = &sh->lay.stage;
    int lo = 1 + st->first_layer, hi = lo + st->num_layers - 1;
    if (u == 0) return pass == PX_GPT_FWD ? lo : hi;
    int n = pass == PX_GPT_FWD ? u + 1 : u - 1;
    return n >= lo && n <= hi ? n : -1;
}

static int first_unit(const px_shard_t *sh, px_gpt_pass_t pass) {
    const px_gpt_stage_t *st = &sh->lay.stage;
    if (st->first || st->last) return 0;
    return 1 + st->first_layer + (pass == PX_GPT_FWD ? 0 : st->num_layers - 1);
}

/* A whole model's backward follows its forward at once and reuses what the
 * forward left gathered; a pipeline stage's passes of different micro-
 * batches interleave, so each of its passes starts afresh. */
static int pipelined(const px_shard_t *sh) { return sh->lay.stage.num_layers != sh->cfg.num_layers; }

static int src_acquire(void *ctx, int u, px_gpt_pass_t pass, px_gpt_tensors_t *p, px_gpt_tensors_t *g) {
    px_shard_t *sh = ctx;
    if (sh->lay.fsdp == 1) {
        unit_views(sh, u, sh->d.params + sh->units[u].shard_off, p);
        if (g) unit_views(sh, u, sh->d.grads + sh->units[u].shard_off, g);
        return 0;
    }
    /* the gathers below refill slots that the compute queued so far may still read */
    sh->mem.fence(sh->mem.ctx);
    if (u == first_unit(sh, pass) && (pass == PX_GPT_FWD || pipelined(sh))) {
        /* a new pass: what a failed one left in flight drains first */
        if (px_jobq_wait_all(sh->jobs) != 0) return -1;
        memset(sh->gathered, 0, (size_t)sh->nunits * sizeof *sh->gathered);
        sh->scatter_of[0] = sh->scatter_of[1] = 0;
    }
    prefetch(sh, u);
    int next = next_unit(sh, u, pass);
    if (next >= 1) prefetch(sh, next);
    if (px_jobq_wait(sh->jobs, sh->gathered[u]) != 0) return -1;
    unit_views(sh, u, params_slot(sh, u), p);
    if (g) {
        float *gb = sh->w.outer_g;
        if (u > 0) {
            int s = u % 2;
            if (sh->scatter_of[s] && px_jobq_wait(sh->jobs, sh->scatter_of[s]) != 0) return -1;
            gb = sh->w.layer_g[s];
        }
        sh->mem.zero(sh->mem.ctx, gb, sh->units[u].padded);
        unit_views(sh, u, gb, g);
    }
    return 0;
}

static int src_release(void *ctx, int u, px_gpt_pass_t pass) {
    px_shard_t *sh = ctx;
    if (sh->lay.fsdp == 1) return 0;
    if (pass == PX_GPT_FWD) {
        /* unit 0 and the stage's last layer stay for the backward; the rest
         * are freed (their slots refilled by later gathers) unless kept */
        int last = 1 + sh->lay.stage.first_layer + sh->lay.stage.num_layers - 1;
        if (u > 0 && u != last && !sh->lay.keep_params) sh->gathered[u] = 0;
        return 0;
    }
    sh->gathered[u] = 0;
    sh->mem.fence(sh->mem.ctx); /* the unit's gradients are written */
    if (u > 0) {
        sh->scatter_of[u % 2] = issue(sh, JOB_SCATTER, u, sh->w.layer_g[u % 2]);
        if (next_unit(sh, u, pass) >= 0 || holds(&sh->lay.stage, 0)) return 0;
        /* a middle stage's backward ends with its first layer: its grads are final on return */
        int rc = px_jobq_wait_all(sh->jobs);
        sh->scatter_of[0] = sh->scatter_of[1] = 0;
        return rc;
    }
    issue(sh, JOB_SCATTER, 0, sh->w.outer_g);
    int rc = px_jobq_wait_all(sh->jobs); /* the shard's grads are final when the backward returns */
    sh->scatter_of[0] = sh->scatter_of[1] = 0;
    return rc;
}

static int src_tp_sum(void *ctx, float *buf, size_t n) {
    px_shard_t *sh = ctx;
    sh->mem.fence(sh->mem.ctx); /* buf is written */
    px_comm_status_t st = sh->tp ? px_comm_allreduce_sum_f32(sh->tp, buf, n) : PX_COMM_ERROR;
    if (st == PX_COMM_OK) {
        sh->bytes_tp += 2.0 * (double)(sh->lay.tp.size - 1) / sh->lay.tp.size * (double)n * sizeof(float);
        return 0;
    }
    set_error(sh, "tp all-reduce", sh->tp, st);
    return -1;
}

/* ---- construction --------------------------------------------------------- */

static float *zalloc(size_t n) {
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    float *p = aligned_alloc(64, bytes ? bytes : 64);
    if (p) memset(p, 0, bytes);
    return p;
}

/* The host's memory operations (the default). */
static float *host_alloc(void *ctx, size_t n) { (void)ctx; return zalloc(n); }
static void host_release(void *ctx, float *p) { (void)ctx; free(p); }
static void host_copy(void *ctx, float *dst, const float *src, size_t n) { (void)ctx; memcpy(dst, src, n * sizeof(float)); }
static void host_zero(void *ctx, float *p, size_t n) { (void)ctx; memset(p, 0, n * sizeof(float)); }
static void host_fence(void *ctx) { (void)ctx; }
static void host_accumulate(void *ctx, float *dst, const float *src, size_t n) {
    (void)ctx;
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}
static double host_sumsq(void *ctx, const float *x, size_t n) { (void)ctx; return norm_squared(x, n); }
static void host_scale(void *ctx, float *x, size_t n, float coef) { (void)ctx; scale_inplace(x, n, coef); }
static void host_adamw(void *ctx, float *p, float *m, float *v, const float *g, size_t n, float lr, float beta1,
                       float beta2, float eps, float weight_decay, int t) {
    (void)ctx;
    adamw_update(p, m, v, g, n, lr, beta1, beta2, eps, weight_decay, t);
}

static const px_shard_memory_t host_memory = {NULL,      host_alloc,      host_release, host_copy,  host_zero,
                                              host_fence, host_accumulate, host_sumsq,   host_scale, host_adamw};

/* Releases w's buffers (made in memory m) and its slot array. */
static void free_work(const px_shard_t *sh, const px_shard_memory_t *m, work_t *w) {
    float *bufs[] = {w->outer_p, w->outer_g, w->layer_g[0], w->layer_g[1], w->piece_tmp, w->tie_tmp};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) m->release(m->ctx, bufs[i]);
    for (int i = 0; w->layer_p && i < sh->nslots; i++)
        if (w->layer_p[i]) m->release(m->ctx, w->layer_p[i]);
    free(w->layer_p);
    memset(w, 0, sizeof *w);
}

/* sh's gathered units' buffers (F > 1) in memory m, into w (zeroed first).
 * 0, or -1 when out of memory (what was made is left in w: free_work). */
static int alloc_work(const px_shard_t *sh, const px_shard_memory_t *m, work_t *w) {
    memset(w, 0, sizeof *w);
    if (sh->lay.fsdp == 1) return 0;
    size_t piece_max = 0;
    for (int u = 0; u < sh->nunits; u++)
        if (sh->units[u].piece > piece_max) piece_max = sh->units[u].piece;
    w->outer_p = m->alloc(m->ctx, sh->units[0].padded);
    w->outer_g = m->alloc(m->ctx, sh->units[0].padded);
    w->layer_g[0] = m->alloc(m->ctx, sh->layer_padded);
    w->layer_g[1] = m->alloc(m->ctx, sh->layer_padded);
    w->piece_tmp = m->alloc(m->ctx, piece_max);
    w->layer_p = calloc((size_t)sh->nslots, sizeof *w->layer_p);
    if (!w->outer_p || !w->outer_g || !w->layer_g[0] || !w->layer_g[1] || !w->piece_tmp || !w->layer_p) return -1;
    for (int i = 0; i < sh->nslots; i++)
        if (!(w->layer_p[i] = m->alloc(m->ctx, sh->layer_padded))) return -1;
    return 0;
}

/* The four buffers of d (made in memory m) released; NULL ones skipped. */
static void release_bufs(const px_shard_memory_t *m, const px_shard_bufs_t *d) {
    float *bufs[] = {d->params, d->grads, d->m, d->v};
    for (int i = 0; i < 4; i++)
        if (bufs[i]) m->release(m->ctx, bufs[i]);
}

/* The shard computes in its host buffers (no other memory given). */
static int on_host(const px_shard_t *sh) { return sh->d.params == sh->b.params; }

/* The compute copy of the four buffers when it is not the host's. */
static void free_compute_copy(px_shard_t *sh) {
    if (on_host(sh)) return;
    release_bufs(&sh->mem, &sh->d);
    sh->d = sh->b;
}

px_shard_t *px_shard_new(const px_gpt_config_t *cfg, const px_shard_layout_t *lay, char *err, size_t errlen) {
    if (px_gpt_config_check(cfg, err, errlen) != 0 || px_gpt_tp_check(cfg, lay->tp.size, err, errlen) != 0)
        return NULL;
    if (lay->fsdp < 1 || lay->fsdp_rank < 0 || lay->fsdp_rank >= lay->fsdp || lay->tp.rank < 0 ||
        lay->tp.rank >= lay->tp.size) {
        px_err_set(err, errlen, "bad shard coordinates fsdp %d/%d tp %d/%d", lay->fsdp_rank, lay->fsdp, lay->tp.rank,
                   lay->tp.size);
        return NULL;
    }
    px_shard_t *sh = calloc(1, sizeof *sh);
    if (!sh) goto oom;
    sh->cfg = *cfg;
    sh->lay = *lay;
    pthread_mutex_init(&sh->mu, NULL);
    if (build_units(sh) != 0) goto oom;
    size_t n = sh->b.n;
    sh->b.params = zalloc(n);
    sh->b.grads = zalloc(n + PX_GPT_GRADS_SPARE);
    sh->b.m = zalloc(n);
    sh->b.v = zalloc(n);
    sh->gathered = calloc((size_t)sh->nunits, sizeof *sh->gathered);
    if (!sh->b.params || !sh->b.grads || !sh->b.m || !sh->b.v || !sh->gathered) goto oom;
    sh->d = sh->b;
    sh->mem = host_memory;
    if (lay->fsdp > 1) {
        sh->nslots = lay->keep_params ? cfg->num_layers : 2;
        if (alloc_work(sh, &sh->mem, &sh->w) != 0) goto oom;
        if (!(sh->jobs = px_jobq_new(sizeof(job_t), QUEUE, run_job, sh))) goto oom;
    }
    sh->src = (px_gpt_source_t){sh, src_acquire, src_release, src_tp_sum};
    sh->model = px_gpt_new_sharded(cfg, lay->tp, &sh->src);
    if (!sh->model) goto oom;
    return sh;
oom:
    px_err_set(err, errlen, "out of memory for the shard");
    px_shard_destroy(&sh);
    return NULL;
}

void px_shard_destroy(px_shard_t **shp) {
    px_shard_t *sh = shp ? *shp : NULL;
    if (!sh) return;
    px_jobq_destroy(&sh->jobs);
    px_gpt_destroy(&sh->model);
    if (sh->mem.release) { /* set once the buffers were */
        free_work(sh, &sh->mem, &sh->w);
        free_compute_copy(sh);
    }
    free(sh->b.params);
    free(sh->b.grads);
    free(sh->b.m);
    free(sh->b.v);
    free(sh->gathered);
    free(sh->units);
    free(sh->segs);
    free(sh->rects);
    pthread_mutex_destroy(&sh->mu);
    free(sh);
    *shp = NULL;
}

px_shard_bufs_t *px_shard_bufs(px_shard_t *sh) { return &sh->b; }
px_shard_bufs_t *px_shard_compute_bufs(px_shard_t *sh) { return &sh->d; }
px_gpt_t *px_shard_model(px_shard_t *sh) { return sh->model; }
const px_gpt_source_t *px_shard_source(px_shard_t *sh) { return &sh->src; }

int px_shard_use_memory(px_shard_t *sh, const px_shard_memory_t *mem, char *err, size_t errlen) {
    size_t n = sh->b.n;
    px_shard_bufs_t d = {mem->alloc(mem->ctx, n), mem->alloc(mem->ctx, n + PX_GPT_GRADS_SPARE),
                         mem->alloc(mem->ctx, n), mem->alloc(mem->ctx, n), n};
    work_t w;
    int ok = alloc_work(sh, mem, &w) == 0 && d.params && d.grads && d.m && d.v;
    if (!ok) {
        free_work(sh, mem, &w);
        release_bufs(mem, &d);
        px_err_set(err, errlen, "out of memory for the shard's compute copy (%zu floats x 4, plus gathered units)", n);
        return -1;
    }
    free_work(sh, &sh->mem, &sh->w);
    free_compute_copy(sh);
    sh->mem = *mem;
    sh->d = d;
    sh->w = w;
    const float *from[3] = {sh->b.params, sh->b.m, sh->b.v};
    float *to[3] = {d.params, d.m, d.v};
    for (int i = 0; i < 3; i++) sh->mem.copy(sh->mem.ctx, to[i], from[i], n);
    return 0;
}

void px_shard_set_comms(px_shard_t *sh, px_comm_t *fsdp, px_comm_t *tp, px_comm_t *pp) {
    if (sh->jobs) px_jobq_reset(sh->jobs); /* idle from here on: the thread reads fsdp only in a job */
    pthread_mutex_lock(&sh->mu);
    sh->fsdp = fsdp;
    sh->tp = tp;
    sh->pp = pp;
    sh->error[0] = '\0';
    pthread_mutex_unlock(&sh->mu);
    memset(sh->gathered, 0, (size_t)sh->nunits * sizeof *sh->gathered);
    sh->scatter_of[0] = sh->scatter_of[1] = 0;
}

const char *px_shard_last_error(const px_shard_t *sh) { return sh->error; }

int px_shard_tie_outer(px_shard_t *sh, px_comm_t *c, int peer, int send_first) {
    size_t n = sh->units[0].piece;
    if (n == 0) return 0;
    const px_shard_memory_t *m = &sh->mem;
    float *g = sh->d.grads + sh->units[0].shard_off;
    if (!sh->w.tie_tmp && !(sh->w.tie_tmp = m->alloc(m->ctx, n))) return -1;
    m->fence(m->ctx); /* the backward's gradients are written */
    size_t bytes = n * sizeof(float);
    int ok = c != NULL;
    if (ok && send_first)
        ok = px_comm_send(c, g, bytes, peer, 1) == PX_COMM_OK && px_comm_recv(c, sh->w.tie_tmp, bytes, peer, 1) == PX_COMM_OK;
    else if (ok)
        ok = px_comm_recv(c, sh->w.tie_tmp, bytes, peer, 1) == PX_COMM_OK && px_comm_send(c, g, bytes, peer, 1) == PX_COMM_OK;
    if (ok) m->accumulate(m->ctx, g, sh->w.tie_tmp, n);
    return ok ? 0 : -1;
}

/* ---- whole-model copies --------------------------------------------------- */

void px_shard_load(px_shard_t *sh, const px_gpt_t *src) {
    float *flat = zalloc(sh->units[0].padded > sh->layer_padded ? sh->units[0].padded : sh->layer_padded);
    if (!flat) abort(); /* a unit is at most a model's worth of the memory we already hold */
    float *from[3] = {src->params, src->m, src->v};
    float *to[3] = {sh->b.params, sh->b.m, sh->b.v};
    for (int u = 0; u < sh->nunits; u++) {
        const unit_t *un = &sh->units[u];
        for (int k = 0; k < 3; k++) {
            memset(flat, 0, un->padded * sizeof(float));
            unit_copy(sh, sh->lay.tp, u, from[k], flat, 1);
            memcpy(to[k] + un->shard_off, flat + (size_t)sh->lay.fsdp_rank * un->piece, un->piece * sizeof(float));
        }
    }
    free(flat);
}

int px_shard_gather(px_shard_t *sh, px_gpt_t *dst) {
    if (sh->jobs && px_jobq_wait_all(sh->jobs) != 0) return -1;
    const px_shard_memory_t *m = &sh->mem;
    m->fence(m->ctx);
    size_t biggest = sh->units[0].padded > sh->layer_padded ? sh->units[0].padded : sh->layer_padded;
    int T = sh->lay.tp.size;
    /* gathered in the compute memory (the communicators take it), then read on the host */
    float *flat = m->alloc(m->ctx, biggest), *all = m->alloc(m->ctx, biggest * (size_t)T);
    float *host = all && !on_host(sh) ? zalloc(biggest * (size_t)T) : all;
    int rc = flat && all && host ? 0 : -1;
    for (int u = 0; rc == 0 && u < sh->nunits; u++) {
        const unit_t *un = &sh->units[u];
        float *mine = sh->d.params + un->shard_off;
        if (sh->lay.fsdp > 1) rc = px_comm_allgather_f32(sh->fsdp, mine, flat, un->piece) == PX_COMM_OK ? 0 : -1;
        else m->copy(m->ctx, flat, mine, un->piece);
        if (rc == 0 && T > 1) rc = px_comm_allgather_f32(sh->tp, flat, all, un->padded) == PX_COMM_OK ? 0 : -1;
        else if (rc == 0) m->copy(m->ctx, all, flat, un->padded);
        if (rc == 0 && host != all) m->copy(m->ctx, host, all, un->padded * (size_t)T);
        /* every tp rank's slices into place; the replicated tensors are equal on all */
        for (int r = T - 1; rc == 0 && r >= 0; r--)
            unit_copy(sh, (px_gpt_tp_t){T, r}, u, dst->params, host + (size_t)r * un->padded, 0);
    }
    if (host != all) free(host);
    if (flat) m->release(m->ctx, flat);
    if (all) m->release(m->ctx, all);
    if (rc != 0 || !pipelined(sh)) return rc;
    /* the stages hold disjoint units (the last one's copy of unit 0 left out): a sum puts them together */
    if (!sh->lay.stage.first && sh->lay.stage.last) {
        size_t sizes[PX_GPT_NUM_TENSORS];
        px_gpt_tensor_sizes(&sh->cfg, sizes);
        for (size_t i = 0; i < 4; i++) memset(dst->params + dst->tensor_offsets[outer_tensors[i]], 0,
                                              sizes[outer_tensors[i]] * sizeof(float));
    }
    if (!sh->pp) return -1;
    if (on_host(sh)) return px_comm_allreduce_sum_f32(sh->pp, dst->params, dst->num_params) == PX_COMM_OK ? 0 : -1;
    float *sum = m->alloc(m->ctx, dst->num_params); /* the communicator takes the compute memory only */
    if (!sum) return -1;
    m->copy(m->ctx, sum, dst->params, dst->num_params);
    rc = px_comm_allreduce_sum_f32(sh->pp, sum, dst->num_params) == PX_COMM_OK ? 0 : -1;
    if (rc == 0) m->copy(m->ctx, dst->params, sum, dst->num_params);
    m->release(m->ctx, sum);
    return rc;
}

/* ---- what a rank holds, for checkpoints --------------------------------------- */

/* Rectangles of slice s behind its local elements [x, y): per row block, a
 * partial first row, whole rows, a partial last row. */
static int slice_rects(const slice_t *s, int t, int layer, size_t x, size_t y, size_t shard_off, px_shard_rect_fn fn,
                       void *ctx) {
    while (x < y) {
        size_t r = x / s->ncols, c = x % s->ncols, j = r / s->brows, i = r % s->brows;
        px_shard_rect_t rect = {.tensor = t, .layer = layer, .K = s->K, .row0 = s->row0[j] + i, .col0 = s->col0 + c,
                                .shard_off = shard_off};
        if (c != 0 || y - x < s->ncols) {
            rect.nrows = 1;
            rect.ncols = s->ncols - c < y - x ? s->ncols - c : y - x;
        } else {
            size_t rows = (y - x) / s->ncols;
            rect.nrows = s->brows - i < rows ? s->brows - i : rows;
            rect.ncols = s->ncols;
        }
        int rc = fn(ctx, &rect);
        if (rc != 0) return rc;
        size_t n = rect.nrows * rect.ncols;
        x += n;
        shard_off += n;
    }
    return 0;
}

/* Every rectangle of tensor slices the rank of `lay` holds, in shard order
 * (padding skipped); with unique_only, not those of tensors replicated over
 * tp on tp ranks other than 0. */
static int each_rect(const px_gpt_config_t *cfg, const px_shard_layout_t *lay, int unique_only, px_shard_rect_fn fn,
                     void *ctx) {
    px_shard_t sh = {.cfg = *cfg, .lay = *lay};
    int rc = build_units(&sh);
    for (int u = 0; rc == 0 && u < sh.nunits; u++) {
        const unit_t *un = &sh.units[u];
        size_t lo = (size_t)lay->fsdp_rank * un->piece, hi = lo + un->piece;
        for (int i = 0; rc == 0 && i < un->ntensors; i++) {
            const unit_tensor_t *ut = &un->t[i];
            size_t a = ut->off > lo ? ut->off : lo, e = ut->off + ut->len < hi ? ut->off + ut->len : hi;
            if (a >= e) continue;
            size_t whole = px_gpt_unit_tensor_size(cfg, (px_gpt_tp_t){1, 0}, u, ut->tensor);
            if (unique_only && whole == ut->len && lay->tp.rank != 0) continue; /* tp rank 0's copy counts */
            if (unique_only && u == 0 && !sh.lay.stage.first) continue;     /* the first stage's copy counts */
            slice_t sl = tp_slice(cfg, lay->tp, ut->tensor, whole);
            rc = slice_rects(&sl, ut->tensor, u == 0 ? 0 : u - 1, a - ut->off, e - ut->off, un->shard_off + (a - lo),
                             fn, ctx);
        }
    }
    free(sh.units);
    free(sh.segs);
    return rc;
}

int px_shard_rects(const px_gpt_config_t *cfg, const px_shard_layout_t *lay, px_shard_rect_fn fn, void *ctx) {
    return each_rect(cfg, lay, 1, fn, ctx);
}

/* px_shard_init: a rectangle's logical elements as runs (px_gpt_init_slice),
 * a run per row unless the rows are whole. */
typedef struct {
    px_shard_t *sh;
    uint64_t seed;
    size_t n, cap;
    size_t (*run)[2];
} init_ctx_t;

static int runs_next(void *ctx, size_t k, size_t *lo, size_t *len) {
    init_ctx_t *c = ctx;
    if (k >= c->n) return 0;
    *lo = c->run[k][0];
    *len = c->run[k][1];
    return 1;
}

static int init_rect(void *ctx, const px_shard_rect_t *r) {
    init_ctx_t *c = ctx;
    size_t sizes[PX_GPT_NUM_TENSORS];
    px_gpt_tensor_sizes(&c->sh->cfg, sizes);
    int per_layer = r->tensor >= PX_LN1W && r->tensor <= PX_FCPROJB;
    size_t base = per_layer ? (size_t)r->layer * (sizes[r->tensor] / (size_t)c->sh->cfg.num_layers) : 0;
    size_t rows = r->ncols == r->K ? 1 : r->nrows, len = r->ncols == r->K ? r->nrows * r->ncols : r->ncols;
    if (rows > c->cap) {
        void *p = realloc(c->run, rows * sizeof *c->run);
        if (!p) return -1;
        c->run = p;
        c->cap = rows;
    }
    for (size_t i = 0; i < rows; i++) c->run[i][0] = base + (r->row0 + i) * r->K + r->col0, c->run[i][1] = len;
    c->n = rows;
    return px_gpt_init_slice(&c->sh->cfg, c->seed, r->tensor, runs_next, c, c->sh->b.params + r->shard_off);
}

int px_shard_init(px_shard_t *sh, uint64_t seed) {
    memset(sh->b.params, 0, sh->b.n * sizeof(float));
    memset(sh->b.m, 0, sh->b.n * sizeof(float));
    memset(sh->b.v, 0, sh->b.n * sizeof(float));
    init_ctx_t c = {.sh = sh, .seed = seed};
    int rc = each_rect(&sh->cfg, &sh->lay, 0, init_rect, &c);
    free(c.run);
    return rc;
}

/* ---- restoring a checkpoint slice by slice ------------------------------------ */

typedef struct {
    px_shard_rect_t *r;
    size_t n, cap;
} rect_list_t;

static int collect_rect(void *ctx, const px_shard_rect_t *r) {
    rect_list_t *l = ctx;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        void *p = realloc(l->r, cap * sizeof *l->r);
        if (!p) return -1;
        l->r = p, l->cap = cap;
    }
    l->r[l->n++] = *r;
    return 0;
}

/* The values of rectangle r (one row of it: K-float rows of the tensor) that
 * a slice holds, into dst (the rect's floats in the shard). The slice is a
 * 1-D run [s0, s0 + c0) of the tensor's elements, or a 2-D block of a
 * (rows, C) matrix, whose rectangles have rows of K == C. */
static void place_rect(const px_shard_rect_t *r, int ndim, const int64_t *shape, const int64_t *start,
                       const int64_t *count, const float *v, float *dst) {
    size_t C = ndim == 2 ? (size_t)shape[1] : 0;
    for (size_t i = 0; i < r->nrows; i++) {
        size_t lin0 = (r->row0 + i) * r->K + r->col0, lin1 = lin0 + r->ncols;
        float *out = dst + i * r->ncols;
        if (ndim == 1) {
            size_t s0 = (size_t)start[0], s1 = s0 + (size_t)count[0];
            size_t a = lin0 > s0 ? lin0 : s0, e = lin1 < s1 ? lin1 : s1;
            if (a < e) memcpy(out + (a - lin0), v + (a - s0), (e - a) * sizeof(float));
            continue;
        }
        size_t row = lin0 / C, c0 = lin0 % C; /* a rect row lies in one matrix row (K == C) */
        if (row < (size_t)start[0] || row >= (size_t)(start[0] + count[0])) continue;
        size_t s1 = (size_t)start[1], e1 = s1 + (size_t)count[1];
        size_t a = c0 > s1 ? c0 : s1, e = c0 + r->ncols < e1 ? c0 + r->ncols : e1;
        if (a < e)
            memcpy(out + (a - c0), v + (row - (size_t)start[0]) * (size_t)count[1] + (a - s1), (e - a) * sizeof(float));
    }
}

int px_shard_place(px_shard_t *sh, float *dst, size_t offset, int ndim, const int64_t *shape, const int64_t *start,
                   const int64_t *count, const float *values) {
    if (!sh->rects) { /* every rectangle the rank holds, replicated copies too, once per shard */
        rect_list_t l = {0};
        if (each_rect(&sh->cfg, &sh->lay, 0, collect_rect, &l) != 0) {
            free(l.r);
            return -1;
        }
        sh->rects = l.r, sh->nrects = l.n;
    }
    size_t sizes[PX_GPT_NUM_TENSORS], off = 0;
    px_gpt_tensor_sizes(&sh->cfg, sizes);
    int kind = 0;
    for (; kind < PX_GPT_NUM_TENSORS && offset >= off + sizes[kind]; kind++) off += sizes[kind];
    if (kind == PX_GPT_NUM_TENSORS) return 0;
    int per_layer = kind >= PX_LN1W && kind <= PX_FCPROJB;
    int layer = per_layer ? (int)((offset - off) / (sizes[kind] / (size_t)sh->cfg.num_layers)) : 0;
    for (size_t i = 0; i < sh->nrects; i++) {
        const px_shard_rect_t *r = &sh->rects[i];
        if (r->tensor == kind && r->layer == layer) place_rect(r, ndim, shape, start, count, values, dst + r->shard_off);
    }
    return 0;
}

size_t px_shard_runs(const px_shard_t *sh, size_t (*runs)[2], size_t cap) {
    size_t n = 0, end = 0;
    for (int i = 0; i < sh->nsegs; i++) {
        const segment_t *g = &sh->segs[i];
        if (!g->unique) continue;
        if (n && end == g->off) { /* tensors end to end: one run */
            if (runs && n - 1 < cap) runs[n - 1][1] += g->len;
        } else {
            if (runs && n < cap) runs[n][0] = g->off, runs[n][1] = g->len;
            n++;
        }
        end = g->off + g->len;
    }
    return n;
}

/* ---- optimizer ------------------------------------------------------------- */

void px_shard_zero_grad(px_shard_t *sh) { sh->mem.zero(sh->mem.ctx, sh->d.grads, sh->d.n); }

static double sumsq(const px_shard_t *sh, const float *x) {
    double s = 0;
    for (int i = 0; i < sh->nsegs; i++)
        if (sh->segs[i].unique) s += sh->mem.sumsq(sh->mem.ctx, x + sh->segs[i].off, sh->segs[i].len);
    return s;
}

double px_shard_grad_sumsq(const px_shard_t *sh) { return sumsq(sh, sh->d.grads); }
double px_shard_param_sumsq(const px_shard_t *sh) { return sumsq(sh, sh->d.params); }

void px_shard_step(px_shard_t *sh, float norm, float max_norm, float lr, float beta1, float beta2, float eps,
                   float weight_decay, int t) {
    if (max_norm > 0.0f) {
        float coef = max_norm / (norm + 1e-6f);
        if (coef < 1.0f) sh->mem.scale(sh->mem.ctx, sh->d.grads, sh->d.n, coef);
    }
    const px_shard_bufs_t *d = &sh->d;
    for (int i = 0; i < sh->nsegs; i++) {
        const segment_t *s = &sh->segs[i];
        sh->mem.adamw(sh->mem.ctx, d->params + s->off, d->m + s->off, d->v + s->off, d->grads + s->off, s->len, lr,
                      beta1, beta2, eps, s->decay ? weight_decay : 0.0f, t);
    }
}

/* ---- accounting --------------------------------------------------------------- */

size_t px_shard_state_bytes(const px_shard_t *sh) { return 4 * sh->b.n * sizeof(float); }

size_t px_shard_work_bytes(const px_shard_t *sh) {
    if (sh->lay.fsdp == 1) return 0;
    size_t piece_max = 0;
    for (int u = 0; u < sh->nunits; u++)
        if (sh->units[u].piece > piece_max) piece_max = sh->units[u].piece;
    return (2 * sh->units[0].padded + ((size_t)sh->nslots + 2) * sh->layer_padded + piece_max) * sizeof(float);
}

void px_shard_bytes_sent(const px_shard_t *sh, double *fsdp, double *tp) {
    *fsdp = sh->bytes_fsdp;
    *tp = sh->bytes_tp;
}
