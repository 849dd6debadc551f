/* GPT-2 model (gpt.h): parameter layout, seeded initialisation, and the
 * forward and backward passes as a sequence of kernels/ops.h calls, in the
 * shape of llm.c's train_gpt2.c.
 *
 * Memory: the four state buffers (params, grads, m, v) are allocated once. The
 * activations the backward pass needs are kept per layer; the outputs of the
 * two residual projections are not (they are only added into the residual
 * stream), and the backward pass reuses a handful of scratch buffers instead
 * of mirroring every activation. The residual stream's gradient lives in one
 * buffer that every layer adds into, which is what residual_backward would do.
 * With recomputation (px_gpt_set_recompute) the per-layer activations other
 * than the residual stream are kept for one layer only: the backward of each
 * layer first runs its forward again into them. */
#include "gpt.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "px_err.h"
#include "px_log.h"
#include "rng.h"

const char *const px_gpt_tensor_names[PX_GPT_NUM_TENSORS] = {
    "wte",  "wpe", "ln1w", "ln1b", "qkvw",    "qkvb",    "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb",  "fcprojw", "fcprojb", "lnfw",     "lnfb"};

/* ------------------------------------------------------------------ config */

typedef struct {
    const char *name;
    px_gpt_config_t cfg;
} preset_t;

static const preset_t g_presets[] = {
    {"tiny", {.max_seq_len = 64, .vocab_size = 256, .padded_vocab_size = 256, .num_layers = 2,
              .num_heads = 4, .channels = 64}},
    {"small", {.max_seq_len = 256, .vocab_size = 256, .padded_vocab_size = 256, .num_layers = 4,
               .num_heads = 8, .channels = 256}},
    {"gpt2-124m", {.max_seq_len = 1024, .vocab_size = 50257, .padded_vocab_size = 50304,
                   .num_layers = 12, .num_heads = 12, .channels = 768}},
};

int px_gpt_config_preset(const char *name, px_gpt_config_t *cfg) {
    for (size_t i = 0; i < sizeof g_presets / sizeof g_presets[0]; i++)
        if (strcmp(name, g_presets[i].name) == 0) {
            *cfg = g_presets[i].cfg;
            return 0;
        }
    return -1;
}

const char *px_gpt_preset_names(void) { return "tiny, small, gpt2-124m"; }

int px_gpt_config_check(const px_gpt_config_t *c, char *err, size_t errlen) {
    /* Upper bounds keep a corrupt header from asking for terabytes. */
    if (c->max_seq_len < 1 || c->max_seq_len > 65536)
        return px_err_set(err, errlen, "max_seq_len %d out of range [1, 65536]", c->max_seq_len);
    if (c->vocab_size < 1 || c->vocab_size > 1 << 20)
        return px_err_set(err, errlen, "vocab_size %d out of range [1, 1048576]", c->vocab_size);
    if (c->padded_vocab_size < c->vocab_size || c->padded_vocab_size > (1 << 20) + 4096)
        return px_err_set(err, errlen, "padded_vocab_size %d must be >= vocab_size %d",
                          c->padded_vocab_size, c->vocab_size);
    if (c->num_layers < 1 || c->num_layers > 1024)
        return px_err_set(err, errlen, "num_layers %d out of range [1, 1024]", c->num_layers);
    if (c->channels < 1 || c->channels > 65536)
        return px_err_set(err, errlen, "channels %d out of range [1, 65536]", c->channels);
    if (c->num_heads < 1 || c->channels % c->num_heads != 0)
        return px_err_set(err, errlen, "num_heads %d must be >= 1 and divide channels %d",
                          c->num_heads, c->channels);
    size_t sizes[PX_GPT_NUM_TENSORS];
    if (px_gpt_tensor_sizes(c, sizes) > ((size_t)1 << 36))
        return px_err_set(err, errlen, "model too large (more than 2^36 parameters)");
    return 0;
}

size_t px_gpt_tensor_sizes(const px_gpt_config_t *cfg, size_t s[PX_GPT_NUM_TENSORS]) {
    size_t Vp = (size_t)cfg->padded_vocab_size, C = (size_t)cfg->channels;
    size_t L = (size_t)cfg->num_layers, maxT = (size_t)cfg->max_seq_len;
    s[PX_WTE] = Vp * C;
    s[PX_WPE] = maxT * C;
    s[PX_LN1W] = L * C;
    s[PX_LN1B] = L * C;
    s[PX_QKVW] = L * 3 * C * C;
    s[PX_QKVB] = L * 3 * C;
    s[PX_ATTPROJW] = L * C * C;
    s[PX_ATTPROJB] = L * C;
    s[PX_LN2W] = L * C;
    s[PX_LN2B] = L * C;
    s[PX_FCW] = L * 4 * C * C;
    s[PX_FCB] = L * 4 * C;
    s[PX_FCPROJW] = L * C * 4 * C;
    s[PX_FCPROJB] = L * C;
    s[PX_LNFW] = C;
    s[PX_LNFB] = C;
    size_t total = 0;
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) total += s[i];
    return total;
}

int px_gpt_tensor_is_matrix(int t) {
    return t == PX_WTE || t == PX_WPE || t == PX_QKVW || t == PX_ATTPROJW || t == PX_FCW ||
           t == PX_FCPROJW;
}

static int is_layer_tensor(int t) { return t >= PX_LN1W && t <= PX_FCPROJB; }

size_t px_gpt_unit_tensor_size(const px_gpt_config_t *cfg, px_gpt_tp_t tp, int unit, int t) {
    size_t s[PX_GPT_NUM_TENSORS];
    px_gpt_tensor_sizes(cfg, s);
    if (unit < 0 || unit > cfg->num_layers || t < 0 || t >= PX_GPT_NUM_TENSORS) return 0;
    if ((unit == 0) == is_layer_tensor(t)) return 0;
    if (unit == 0) return s[t];
    size_t per_layer = s[t] / (size_t)cfg->num_layers;
    int split = t == PX_QKVW || t == PX_QKVB || t == PX_ATTPROJW || t == PX_FCW || t == PX_FCB || t == PX_FCPROJW;
    return split ? per_layer / (size_t)tp.size : per_layer;
}

int px_gpt_tp_check(const px_gpt_config_t *cfg, int T, char *err, size_t errlen) {
    if (T < 1) return px_err_set(err, errlen, "--tp %d must be at least 1", T);
    if (cfg->num_heads % T != 0)
        return px_err_set(err, errlen, "--tp %d does not divide the model's %d attention heads (n_head %% tp must be 0)",
                          T, cfg->num_heads);
    return 0; /* C = NH*hs and 4C then divide too */
}

/* The local shape of one layer on a rank: attention channels and heads, MLP
 * hidden units (all of the model's without tensor parallelism). */
typedef struct {
    int C, NH, Ca, NHa, H;
} dims_t;

static dims_t local_dims(const px_gpt_config_t *cfg, px_gpt_tp_t tp) {
    int C = cfg->channels, NH = cfg->num_heads;
    return (dims_t){C, NH, C / tp.size, NH / tp.size, 4 * C / tp.size};
}

static void set_views(px_gpt_tensors_t *v, float *base, const size_t *off) {
    float **slot[PX_GPT_NUM_TENSORS] = {
        &v->wte,  &v->wpe,  &v->ln1w, &v->ln1b, &v->qkvw,    &v->qkvb,    &v->attprojw, &v->attprojb,
        &v->ln2w, &v->ln2b, &v->fcw,  &v->fcb,  &v->fcprojw, &v->fcprojb, &v->lnfw,     &v->lnfb};
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) *slot[i] = base + off[i];
}

/* ------------------------------------------------------------- activations */

/* One micro-batch's activations (a slot): a whole model has one, a
 * pipeline stage as many as it holds micro-batches at once. Per-layer
 * arrays have one entry per layer of the stage (L); with recompute the
 * arrays from ln1 to fch_gelu have one (L = 1), residual3 and the k_ ones
 * still L. */
struct px_gpt_acts {
    int B, T;       /* shape the views below are laid out for */
    size_t capacity; /* floats allocated in mem */
    size_t tok_capacity; /* tokens that fit in inputs and targets */
    float *mem;
    int *inputs;     /* (B,T) copy, for encoder_backward */
    int *targets;    /* (B,T) copy, for the loss backward */
    int have_loss;   /* forward with targets done (the last stage), backward not yet */
    int have_fwd;    /* forward done, backward (or its input half) not yet */
    int have_bi;     /* input half of a split backward done, its weight half not yet */
    int split;       /* the k_ views below are laid out */
    int recompute;   /* the per-layer views but residual3 hold one layer, shared */
    int held;        /* recompute: the layer whose activations those views hold now */
    float *encoded;  /* (B,T,C): the embedding, or a later stage's input */
    float *ln1;      /* (L,B,T,C) */
    float *ln1_mean; /* (L,B,T) */
    float *ln1_rstd; /* (L,B,T) */
    float *qkv;      /* (L,B,T,3C) */
    float *atty;     /* (L,B,T,C) */
    float *att;      /* (L,B,NH,T,T) */
    float *residual2; /* (L,B,T,C) */
    float *ln2;      /* (L,B,T,C) */
    float *ln2_mean; /* (L,B,T) */
    float *ln2_rstd; /* (L,B,T) */
    float *fch;      /* (L,B,T,4C) */
    float *fch_gelu; /* (L,B,T,4C) */
    float *residual3; /* (L,B,T,C) */
    float *lnf;      /* (B,T,C), last stage */
    float *lnf_mean; /* (B,T) */
    float *lnf_rstd; /* (B,T) */
    float *logits;   /* (B,T,Vp), last stage; dlogits in place after backward */
    float *losses;   /* (B,T) */
    float *lse;      /* (B,T) */
    float *proj;     /* (B,T,C) output of attproj / fcproj before the residual add */
    float *dres;     /* (B,T,C) gradient of the residual stream; a stage's input gradient at the end */
    float *dbtc;     /* (B,T,C) scratch gradient */
    float *d4a;      /* (B,T,4C) scratch gradient (also dqkv, 3C <= 4C) */
    float *d4b;      /* (B,T,4C) scratch gradient */
    /* split backward only: the output gradients of the four matmuls of each
     * layer, from the input half for the weight half */
    float *k_dfcproj;  /* (L,B,T,C) */
    float *k_dfc;      /* (L,B,T,4C) */
    float *k_dattproj; /* (L,B,T,C) */
    float *k_dqkv;     /* (L,B,T,3C) */
};

/* Lays the activation views out for (B,T) starting at mem (or only counts
 * floats when mem is NULL). Returns the float count. */
static size_t layout_acts(struct px_gpt_acts *a, const px_gpt_t *self, int B, int T, float *mem) {
    const px_gpt_config_t *cfg = &self->config;
    dims_t d = local_dims(cfg, self->tp);
    size_t L = (size_t)self->stage.num_layers, C = (size_t)d.C, NH = (size_t)d.NHa;
    size_t Ca = (size_t)d.Ca, H = (size_t)d.H;
    size_t BT = (size_t)B * (size_t)T, Vp = (size_t)cfg->padded_vocab_size;
    size_t head = self->stage.last ? 1 : 0, split = self->split ? L : 0;
    size_t Li = self->recompute ? 1 : L; /* layers of inner activations held */
    struct {
        float **p;
        size_t n;
    } t[] = {
        {&a->encoded, BT * C},        {&a->ln1, Li * BT * C},        {&a->ln1_mean, Li * BT},
        {&a->ln1_rstd, Li * BT},      {&a->qkv, Li * BT * 3 * Ca},   {&a->atty, Li * BT * Ca},
        {&a->att, Li * B * NH * (size_t)T * T}, {&a->residual2, Li * BT * C}, {&a->ln2, Li * BT * C},
        {&a->ln2_mean, Li * BT},      {&a->ln2_rstd, Li * BT},       {&a->fch, Li * BT * H},
        {&a->fch_gelu, Li * BT * H},  {&a->residual3, L * BT * C},   {&a->lnf, head * BT * C},
        {&a->lnf_mean, head * BT},   {&a->lnf_rstd, head * BT},    {&a->logits, head * BT * Vp},
        {&a->losses, head * BT},     {&a->lse, head * BT},         {&a->proj, BT * C},
        {&a->dres, BT * C},          {&a->dbtc, BT * C},           {&a->d4a, BT * H},
        {&a->d4b, BT * H},           {&a->k_dfcproj, split * BT * C}, {&a->k_dfc, split * BT * H},
        {&a->k_dattproj, split * BT * C}, {&a->k_dqkv, split * BT * 3 * Ca},
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        size_t n = (t[i].n + 15) & ~(size_t)15; /* keep every view 64-byte aligned */
        if (mem) *t[i].p = mem + total;
        total += n;
    }
    if (mem) {
        a->split = self->split;
        a->recompute = self->recompute;
    }
    return total;
}

static int ensure_acts(px_gpt_t *self, struct px_gpt_acts *a, int B, int T) {
    if (a->B == B && a->T == T) return 0;
    size_t need = layout_acts(a, self, B, T, NULL);
    size_t ntok = (size_t)B * (size_t)T;
    if (need > a->capacity || ntok > a->tok_capacity) {
        free(a->mem);
        free(a->inputs);
        a->mem = aligned_alloc(64, need * sizeof(float));
        a->inputs = malloc(sizeof(int) * 2 * ntok);
        if (!a->mem || !a->inputs) {
            free(a->mem);
            free(a->inputs);
            memset(a, 0, sizeof *a);
            px_log_error("gpt_alloc_failed what=activations floats=%zu B=%d T=%d", need, B, T);
            return -1;
        }
        a->capacity = need;
        a->tok_capacity = ntok;
    }
    layout_acts(a, self, B, T, a->mem);
    a->targets = a->inputs + ntok;
    a->B = B;
    a->T = T;
    a->have_loss = a->have_fwd = a->have_bi = 0;
    return 0;
}

static void free_acts(px_gpt_t *self) {
    for (int i = 0; self->acts && i < self->nslots; i++) {
        free(self->acts[i].mem);
        free(self->acts[i].inputs);
    }
    free(self->acts);
    self->acts = NULL;
    self->nslots = 0;
}

/* Replaces the activation slots by `slots` empty ones (laid out at the next
 * forward). 0, or -1 out of memory (the old ones kept). */
static int new_slots(px_gpt_t *self, int slots) {
    struct px_gpt_acts *acts = calloc((size_t)slots, sizeof *acts);
    if (!acts) return -1;
    free_acts(self);
    self->acts = acts;
    self->nslots = slots;
    return 0;
}

/* A whole model: every layer, the embedding and the head, one slot. */
static int whole_model(px_gpt_t *self) {
    self->stage = (px_gpt_stage_t){0, self->config.num_layers, 1, 1};
    self->split = 0;
    return new_slots(self, 1);
}

int px_gpt_set_stage(px_gpt_t *self, const px_gpt_stage_t *st, int slots, int split) {
    int L = self->config.num_layers;
    if (st->first_layer < 0 || st->num_layers < 1 || st->first_layer + st->num_layers > L || slots < 1 ||
        (st->first && st->first_layer != 0) || (st->last && st->first_layer + st->num_layers != L)) {
        px_log_error("gpt_bad_stage first_layer=%d num_layers=%d layers=%d first=%d last=%d slots=%d", st->first_layer,
                     st->num_layers, L, st->first, st->last, slots);
        return -1;
    }
    if (new_slots(self, slots) != 0) return -1;
    self->stage = *st;
    self->split = split;
    return 0;
}

int px_gpt_set_recompute(px_gpt_t *self, int on) {
    if (on != 0 && on != 1) {
        px_log_error("gpt_bad_recompute on=%d hint=\"0 (off) or 1 (block)\"", on);
        return -1;
    }
    if (new_slots(self, self->nslots) != 0) return -1;
    self->recompute = on;
    return 0;
}

px_gpt_stage_t px_gpt_pipeline_stage(const px_gpt_config_t *cfg, int T, int P, int s) {
    int L = cfg->num_layers;
    double C = cfg->channels, layer = 24.0 * C * C + 2.0 * T * C, head = 2.0 * cfg->padded_vocab_size * C;
    /* best[k][j]: the least maximum over the first k stages holding layers [0, j); cut[k][j] where stage k-1 starts */
    double *best = malloc(sizeof(double) * (size_t)(P + 1) * (size_t)(L + 1));
    int *cut = malloc(sizeof(int) * (size_t)(P + 1) * (size_t)(L + 1));
    px_gpt_stage_t st = {0, L, 1, 1};
    if (!best || !cut || P < 1 || P > L || s < 0 || s >= P) {
        free(best);
        free(cut);
        return st; /* the caller checked P <= L; a whole model is the safe answer */
    }
#define AT(a, k, j) a[(size_t)(k) * (size_t)(L + 1) + (size_t)(j)]
    for (int j = 0; j <= L; j++) AT(best, 0, j) = j == 0 ? 0.0 : INFINITY;
    for (int k = 1; k <= P; k++)
        for (int j = 0; j <= L; j++) {
            AT(best, k, j) = INFINITY;
            for (int i = k - 1; i < j; i++) { /* stage k-1 holds layers [i, j) */
                double c = (j - i) * layer + (k == P && j == L ? head : 0.0);
                double m = fmax(AT(best, k - 1, i), c);
                if (m < AT(best, k, j) || (m == AT(best, k, j) && i > AT(cut, k, j))) {
                    AT(best, k, j) = m;
                    AT(cut, k, j) = i;
                }
            }
        }
    int hi = L;
    for (int k = P; k > s; k--) {
        int lo = AT(cut, k, hi);
        if (k - 1 == s) st = (px_gpt_stage_t){lo, hi - lo, s == 0, s == P - 1};
        hi = lo;
    }
#undef AT
    free(best);
    free(cut);
    return st;
}

size_t px_gpt_activation_bytes(const px_gpt_t *self) {
    size_t n = 0;
    for (int i = 0; i < self->nslots; i++) n += self->acts[i].capacity;
    return n * sizeof(float);
}

/* ------------------------------------------------------------ construction */

#define INIT_CHUNK 65536

/* Fills n floats of tensor `tensor` with N(0, std^2); each chunk of INIT_CHUNK
 * floats draws from its own stream so chunks can be filled in parallel. */
static void init_normal(float *x, size_t n, double std, uint64_t seed, int tensor) {
    size_t nchunks = (n + INIT_CHUNK - 1) / INIT_CHUNK;
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunks; c++) {
        size_t lo = c * INIT_CHUNK, len = lo + INIT_CHUNK < n ? INIT_CHUNK : n - lo;
        px_rng_t r = {px_hash4(seed, 0x696e6974 /* "init" */, (uint64_t)tensor, c)};
        px_rng_normal(&r, x + lo, len, std);
    }
}

static void init_params(px_gpt_t *self, uint64_t seed) {
    const px_gpt_config_t *c = &self->config;
    double resid_std = 0.02 / sqrt(2.0 * c->num_layers);
    for (int t = 0; t < PX_GPT_NUM_TENSORS; t++) {
        float *x = self->params + self->tensor_offsets[t];
        size_t n = self->tensor_sizes[t];
        if (t == PX_LN1W || t == PX_LN2W || t == PX_LNFW) {
            for (size_t i = 0; i < n; i++) x[i] = 1.0f;
        } else if (!px_gpt_tensor_is_matrix(t)) {
            memset(x, 0, n * sizeof(float)); /* biases */
        } else if (t == PX_WTE) {
            size_t real = (size_t)c->vocab_size * (size_t)c->channels;
            init_normal(x, real, 0.02, seed, t);
            memset(x + real, 0, (n - real) * sizeof(float)); /* padding rows stay 0 */
        } else {
            double std = (t == PX_ATTPROJW || t == PX_FCPROJW) ? resid_std : 0.02;
            init_normal(x, n, std, seed, t);
        }
    }
}

/* The initial value of one tensor's elements [lo, lo + len) (logical
 * order), as init_params writes them: a chunk is drawn whole (its stream is
 * sequential) and kept in *cache for the next call, so walking a slice in
 * order draws each chunk once. */
typedef struct {
    float x[INIT_CHUNK];
    int tensor;
    size_t chunk;
    int valid;
} init_cache_t;

static void init_range(const px_gpt_config_t *c, uint64_t seed, int t, size_t lo, size_t len, float *out,
                       init_cache_t *cache) {
    if (t == PX_LN1W || t == PX_LN2W || t == PX_LNFW) {
        for (size_t i = 0; i < len; i++) out[i] = 1.0f;
        return;
    }
    if (!px_gpt_tensor_is_matrix(t)) {
        memset(out, 0, len * sizeof(float));
        return;
    }
    size_t sizes[PX_GPT_NUM_TENSORS];
    px_gpt_tensor_sizes(c, sizes);
    size_t n = t == PX_WTE ? (size_t)c->vocab_size * (size_t)c->channels : sizes[t]; /* wte: padding rows 0 */
    double std = (t == PX_ATTPROJW || t == PX_FCPROJW) ? 0.02 / sqrt(2.0 * c->num_layers) : 0.02;
    while (len > 0) {
        if (lo >= n) {
            memset(out, 0, len * sizeof(float));
            return;
        }
        size_t chunk = lo / INIT_CHUNK, base = chunk * INIT_CHUNK;
        size_t clen = base + INIT_CHUNK < n ? INIT_CHUNK : n - base;
        if (!cache->valid || cache->tensor != t || cache->chunk != chunk) {
            px_rng_t r = {px_hash4(seed, 0x696e6974 /* "init" */, (uint64_t)t, chunk)};
            px_rng_normal(&r, cache->x, clen, std);
            cache->tensor = t;
            cache->chunk = chunk;
            cache->valid = 1;
        }
        size_t take = base + clen - lo < len ? base + clen - lo : len;
        memcpy(out, cache->x + (lo - base), take * sizeof(float));
        out += take;
        lo += take;
        len -= take;
    }
}

px_gpt_t *px_gpt_new_zeroed(const px_gpt_config_t *cfg) {
    char err[PX_ERRLEN];
    if (px_gpt_config_check(cfg, err, sizeof err) != 0) {
        px_log_error("gpt_bad_config problem=\"%s\"", err);
        return NULL;
    }
    px_gpt_t *self = calloc(1, sizeof *self);
    if (!self) return NULL;
    self->config = *cfg;
    self->num_params = px_gpt_tensor_sizes(cfg, self->tensor_sizes);
    size_t off = 0;
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) {
        self->tensor_offsets[i] = off;
        off += self->tensor_sizes[i];
    }
    size_t bytes = ((self->num_params * sizeof(float)) + 63) & ~(size_t)63;
    size_t grad_bytes = (((self->num_params + PX_GPT_GRADS_SPARE) * sizeof(float)) + 63) & ~(size_t)63;
    self->params = aligned_alloc(64, bytes);
    self->grads = aligned_alloc(64, grad_bytes);
    self->m = aligned_alloc(64, bytes);
    self->v = aligned_alloc(64, bytes);
    if (!self->params || !self->grads || !self->m || !self->v || whole_model(self) != 0) {
        px_log_error("gpt_alloc_failed what=state params=%zu", self->num_params);
        px_gpt_destroy(&self);
        return NULL;
    }
    memset(self->params, 0, bytes);
    memset(self->grads, 0, grad_bytes);
    memset(self->m, 0, bytes);
    memset(self->v, 0, bytes);
    set_views(&self->p, self->params, self->tensor_offsets);
    set_views(&self->g, self->grads, self->tensor_offsets);
    self->mean_loss = -1.0f;
    self->tp = (px_gpt_tp_t){1, 0};
    return self;
}

px_gpt_t *px_gpt_new_sharded(const px_gpt_config_t *cfg, px_gpt_tp_t tp, const px_gpt_source_t *src) {
    char err[PX_ERRLEN];
    if (px_gpt_config_check(cfg, err, sizeof err) != 0 || px_gpt_tp_check(cfg, tp.size, err, sizeof err) != 0 ||
        tp.rank < 0 || tp.rank >= tp.size) {
        px_log_error("gpt_bad_config problem=\"%s\" tp=%d tp_rank=%d", err, tp.size, tp.rank);
        return NULL;
    }
    px_gpt_t *self = calloc(1, sizeof *self);
    if (self) self->config = *cfg;
    if (!self || whole_model(self) != 0) {
        free(self);
        px_log_error("gpt_alloc_failed what=sharded_model");
        return NULL;
    }
    self->tp = tp;
    self->src = src;
    self->mean_loss = -1.0f;
    return self;
}

int px_gpt_init_slice(const px_gpt_config_t *cfg, uint64_t seed, int tensor, px_gpt_init_run_t run, void *run_ctx,
                      float *out) {
    init_cache_t *cache = malloc(sizeof *cache);
    if (!cache) return -1;
    cache->valid = 0;
    size_t lo, len;
    for (size_t k = 0; run(run_ctx, k, &lo, &len); k++) {
        init_range(cfg, seed, tensor, lo, len, out, cache);
        out += len;
    }
    free(cache);
    return 0;
}

px_gpt_t *px_gpt_new(const px_gpt_config_t *cfg, uint64_t seed) {
    px_gpt_t *self = px_gpt_new_zeroed(cfg);
    if (self) init_params(self, seed);
    return self;
}

void px_gpt_destroy(px_gpt_t **self) {
    if (!self || !*self) return;
    px_gpt_t *m = *self;
    free_acts(m);
    free(m->params);
    free(m->grads);
    free(m->m);
    free(m->v);
    free(m);
    *self = NULL;
}

/* ------------------------------------------------------------------- units */

/* Unit `unit`'s views: from the source, or into the four buffers. */
static int unit_acquire(px_gpt_t *self, int unit, px_gpt_pass_t pass, px_gpt_tensors_t *p, px_gpt_tensors_t *g) {
    if (self->src && self->src->acquire) return self->src->acquire(self->src->ctx, unit, pass, p, g);
    *p = self->p;
    if (g) *g = self->g;
    if (unit == 0) return 0;
    px_gpt_layer_view(p, &self->config, unit - 1);
    if (g) px_gpt_layer_view(g, &self->config, unit - 1);
    return 0;
}

void px_gpt_layer_view(px_gpt_tensors_t *x, const px_gpt_config_t *cfg, int layer) {
    size_t l = (size_t)layer, C = (size_t)cfg->channels;
    x->ln1w += l * C, x->ln1b += l * C, x->qkvw += l * 3 * C * C, x->qkvb += l * 3 * C;
    x->attprojw += l * C * C, x->attprojb += l * C, x->ln2w += l * C, x->ln2b += l * C;
    x->fcw += l * 4 * C * C, x->fcb += l * 4 * C, x->fcprojw += l * 4 * C * C, x->fcprojb += l * C;
}

static int unit_release(px_gpt_t *self, int unit, px_gpt_pass_t pass) {
    return self->src && self->src->release ? self->src->release(self->src->ctx, unit, pass) : 0;
}

static int tp_sum(px_gpt_t *self, float *buf, size_t n) {
    return self->tp.size > 1 ? self->src->tp_sum(self->src->ctx, buf, n) : 0;
}

/* ----------------------------------------------------------------- forward */

static int check_tokens(const int *x, size_t n, int V, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (x[i] < 0 || x[i] >= V) {
            px_log_error("gpt_bad_token what=%s index=%zu token=%d vocab_size=%d", what, i, x[i], V);
            return -1;
        }
    return 0;
}

/* Per-layer activation views of the stage's i-th layer, laid out for the local dims. */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *residual2, *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu,
        *residual3;
    const float *residual; /* the layer's input */
    /* split backward: the four matmuls' output gradients */
    float *dfcproj, *dfc, *dattproj, *dqkv;
} layer_acts_t;

static layer_acts_t layer_acts(const struct px_gpt_acts *a, dims_t d, int l) {
    size_t B = (size_t)a->B, T = (size_t)a->T, BT = B * T, C = (size_t)d.C, Ca = (size_t)d.Ca, H = (size_t)d.H;
    size_t lu = (size_t)l, li = a->recompute ? 0 : lu; /* li: the layer's index in the inner arrays */
    int split = a->split;
    layer_acts_t x = {
        .ln1 = a->ln1 + li * BT * C, .ln1_mean = a->ln1_mean + li * BT, .ln1_rstd = a->ln1_rstd + li * BT,
        .qkv = a->qkv + li * BT * 3 * Ca, .atty = a->atty + li * BT * Ca, .att = a->att + li * B * (size_t)d.NHa * T * T,
        .residual2 = a->residual2 + li * BT * C, .ln2 = a->ln2 + li * BT * C, .ln2_mean = a->ln2_mean + li * BT,
        .ln2_rstd = a->ln2_rstd + li * BT, .fch = a->fch + li * BT * H, .fch_gelu = a->fch_gelu + li * BT * H,
        .residual3 = a->residual3 + lu * BT * C,
        .residual = l == 0 ? a->encoded : a->residual3 + (lu - 1) * BT * C,
        .dfcproj = split ? a->k_dfcproj + lu * BT * C : NULL, .dfc = split ? a->k_dfc + lu * BT * H : NULL,
        .dattproj = split ? a->k_dattproj + lu * BT * C : NULL, .dqkv = split ? a->k_dqkv + lu * BT * 3 * Ca : NULL,
    };
    return x;
}

/* The stage's output: the residual stream after its last layer. */
static float *stage_out(const px_gpt_t *self, const struct px_gpt_acts *a) {
    size_t BT = (size_t)a->B * (size_t)a->T, C = (size_t)self->config.channels;
    return a->residual3 + (size_t)(self->stage.num_layers - 1) * BT * C;
}

/* The forward of the stage's i-th layer with its parameters p: the
 * forward's, or the backward's when it recomputes. */
static int layer_forward_with(px_gpt_t *self, struct px_gpt_acts *a, dims_t d, int i, const px_gpt_tensors_t *p) {
    int B = a->B, T = a->T, C = d.C;
    size_t BT = (size_t)B * (size_t)T;
    int tp0 = self->tp.rank == 0; /* adds the row-parallel biases, once */
    layer_acts_t x = layer_acts(a, d, i);
    layernorm_forward(x.ln1, x.ln1_mean, x.ln1_rstd, x.residual, p->ln1w, p->ln1b, B, T, C);
    matmul_forward(x.qkv, x.ln1, p->qkvw, p->qkvb, B, T, C, 3 * d.Ca);
    attention_forward(x.atty, x.att, x.qkv, B, T, d.Ca, d.NHa);
    matmul_forward(a->proj, x.atty, p->attprojw, tp0 ? p->attprojb : NULL, B, T, d.Ca, C);
    if (tp_sum(self, a->proj, BT * C) != 0) return -1;
    residual_forward(x.residual2, x.residual, a->proj, BT * C);
    layernorm_forward(x.ln2, x.ln2_mean, x.ln2_rstd, x.residual2, p->ln2w, p->ln2b, B, T, C);
    matmul_forward(x.fch, x.ln2, p->fcw, p->fcb, B, T, C, d.H);
    gelu_forward(x.fch_gelu, x.fch, BT * d.H);
    matmul_forward(a->proj, x.fch_gelu, p->fcprojw, tp0 ? p->fcprojb : NULL, B, T, d.H, C);
    if (tp_sum(self, a->proj, BT * C) != 0) return -1;
    residual_forward(x.residual3, x.residual2, a->proj, BT * C);
    a->held = i;
    return 0;
}

/* The stage's i-th layer (model layer stage.first_layer + i), forward. */
static int layer_forward(px_gpt_t *self, struct px_gpt_acts *a, dims_t d, int i) {
    int unit = 1 + self->stage.first_layer + i;
    px_gpt_tensors_t p;
    if (unit_acquire(self, unit, PX_GPT_FWD, &p, NULL) != 0) return -1;
    if (layer_forward_with(self, a, d, i, &p) != 0) return -1;
    return unit_release(self, unit, PX_GPT_FWD);
}

static float stage_forward(px_gpt_t *self, struct px_gpt_acts *a, const int *inputs, const float *x,
                           const int *targets, int B, int T) {
    const px_gpt_config_t *cfg = &self->config;
    const px_gpt_stage_t *st = &self->stage;
    int V = cfg->vocab_size, Vp = cfg->padded_vocab_size;
    dims_t d = local_dims(cfg, self->tp);
    int C = d.C;
    self->mean_loss = -1.0f;
    if (B < 1 || T < 1 || T > cfg->max_seq_len) {
        px_log_error("gpt_bad_shape B=%d T=%d max_seq_len=%d", B, T, cfg->max_seq_len);
        return NAN;
    }
    if (st->first ? !inputs : !x) {
        px_log_error("gpt_stage_without_input first=%d", st->first);
        return NAN;
    }
    size_t BT = (size_t)B * (size_t)T;
    if (st->first && check_tokens(inputs, BT, V, "inputs") != 0) return NAN;
    if (st->last && targets && check_tokens(targets, BT, V, "targets") != 0) return NAN;
    if (ensure_acts(self, a, B, T) != 0) return NAN;
    a->have_loss = a->have_fwd = a->have_bi = 0;
    a->held = -1;
    int outer_unit = st->first || st->last;
    px_gpt_tensors_t outer;
    if (outer_unit && unit_acquire(self, 0, PX_GPT_FWD, &outer, NULL) != 0) return NAN;
    if (st->first) {
        memcpy(a->inputs, inputs, BT * sizeof(int));
        encoder_forward(a->encoded, inputs, outer.wte, outer.wpe, B, T, C);
    } else {
        memcpy(a->encoded, x, BT * C * sizeof(float));
    }
    for (int i = 0; i < st->num_layers; i++)
        if (layer_forward(self, a, d, i) != 0) return NAN;
    if (st->last) {
        layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, stage_out(self, a), outer.lnfw, outer.lnfb, B, T, C);
        matmul_forward(a->logits, a->lnf, outer.wte, NULL, B, T, C, Vp);
    }
    if (outer_unit && unit_release(self, 0, PX_GPT_FWD) != 0) return NAN;
    a->have_fwd = 1;
    if (!st->last) return 0.0f;
    if (!targets) return -1.0f;
    memcpy(a->targets, targets, BT * sizeof(int));
    crossentropy_softmax_forward(a->losses, a->lse, a->logits, targets, B, T, V, Vp);
    double sum = 0.0;
    for (size_t i = 0; i < BT; i++) sum += a->losses[i];
    self->mean_loss = (float)(sum / (double)BT);
    a->have_loss = 1;
    return self->mean_loss;
}

static int check_slot(const px_gpt_t *self, int slot) {
    if (slot >= 0 && slot < self->nslots) return 0;
    px_log_error("gpt_bad_slot slot=%d slots=%d", slot, self->nslots);
    return -1;
}

float px_gpt_forward(px_gpt_t *self, const int *inputs, const int *targets, int B, int T) {
    return stage_forward(self, &self->acts[0], inputs, NULL, targets, B, T);
}

float px_gpt_stage_forward(px_gpt_t *self, int slot, const int *inputs, const float *x, const int *targets, int B,
                           int T) {
    return check_slot(self, slot) != 0 ? NAN : stage_forward(self, &self->acts[slot], inputs, x, targets, B, T);
}

const float *px_gpt_stage_output(const px_gpt_t *self, int slot) { return stage_out(self, &self->acts[slot]); }
const float *px_gpt_stage_input_grad(const px_gpt_t *self, int slot) { return self->acts[slot].dres; }
int px_gpt_stage_batch(const px_gpt_t *self, int slot) { return self->acts[slot].B; }

const float *px_gpt_logits(const px_gpt_t *self) { return self->acts[0].logits; }
const float *px_gpt_losses(const px_gpt_t *self) { return self->acts[0].losses; }

/* ---------------------------------------------------------------- backward */

void px_gpt_zero_grad(px_gpt_t *self) {
    if (self->grads) memset(self->grads, 0, self->num_params * sizeof(float));
}

/* A backward: whole, or the input-gradient half or the weight-gradient half
 * of a split one (zero-bubble pipelines). The input half computes the
 * LayerNorms' parameter gradients too (they come out of the same kernel)
 * and the embedding's; the weight half the four matmuls' of each layer and
 * the LM head's, from the output gradients the input half kept. */
typedef enum { BWD_WHOLE, BWD_INPUT, BWD_WEIGHT } bwd_part_t;

static int layer_backward(px_gpt_t *self, struct px_gpt_acts *a, dims_t d, int i, bwd_part_t part) {
    int unit = 1 + self->stage.first_layer + i, B = a->B, T = a->T, C = d.C;
    size_t BT = (size_t)B * (size_t)T;
    layer_acts_t x = layer_acts(a, d, i);
    px_gpt_tensors_t p, g;
    if (unit_acquire(self, unit, PX_GPT_BWD, &p, &g) != 0) return -1;
    /* recompute: the layer's activations again, from its input (both halves of a split backward need them),
     * unless still there (the stage's last layer, right after the forward) */
    if (a->recompute && a->held != i && layer_forward_with(self, a, d, i, &p) != 0) return -1;
    if (part == BWD_WEIGHT) {
        matmul_backward(NULL, g.fcprojw, g.fcprojb, x.dfcproj, x.fch_gelu, p.fcprojw, B, T, d.H, C);
        matmul_backward(NULL, g.fcw, g.fcb, x.dfc, x.ln2, p.fcw, B, T, C, d.H);
        matmul_backward(NULL, g.attprojw, g.attprojb, x.dattproj, x.atty, p.attprojw, B, T, d.Ca, C);
        matmul_backward(NULL, g.qkvw, g.qkvb, x.dqkv, x.ln1, p.qkvw, B, T, C, 3 * d.Ca);
        return unit_release(self, unit, PX_GPT_BWD);
    }
    int w = part == BWD_WHOLE; /* the matmuls' weight gradients now */
    /* dres holds d(residual3); residual3 = residual2 + fcproj passes it to both. */
    if (!w) memcpy(x.dfcproj, a->dres, BT * C * sizeof(float));
    memset(a->d4a, 0, BT * d.H * sizeof(float));
    matmul_backward(a->d4a, w ? g.fcprojw : NULL, w ? g.fcprojb : NULL, a->dres, x.fch_gelu, p.fcprojw, B, T, d.H, C);
    memset(a->d4b, 0, BT * d.H * sizeof(float));
    gelu_backward(a->d4b, x.fch, a->d4a, BT * d.H);
    if (!w) memcpy(x.dfc, a->d4b, BT * d.H * sizeof(float));
    memset(a->dbtc, 0, BT * C * sizeof(float));
    matmul_backward(a->dbtc, w ? g.fcw : NULL, w ? g.fcb : NULL, a->d4b, x.ln2, p.fcw, B, T, C, d.H);
    if (tp_sum(self, a->dbtc, BT * C) != 0) return -1;
    layernorm_backward(a->dres, g.ln2w, g.ln2b, a->dbtc, x.residual2, p.ln2w, x.ln2_mean, x.ln2_rstd, B, T, C);
    /* dres now holds d(residual2); residual2 = residual + attproj. */
    if (!w) memcpy(x.dattproj, a->dres, BT * C * sizeof(float));
    memset(a->dbtc, 0, BT * d.Ca * sizeof(float));
    matmul_backward(a->dbtc, w ? g.attprojw : NULL, w ? g.attprojb : NULL, a->dres, x.atty, p.attprojw, B, T, d.Ca,
                    C);
    float *dqkv = a->d4a;
    memset(dqkv, 0, BT * 3 * d.Ca * sizeof(float));
    attention_backward(dqkv, a->dbtc, x.qkv, x.att, B, T, d.Ca, d.NHa);
    if (!w) memcpy(x.dqkv, dqkv, BT * 3 * d.Ca * sizeof(float));
    memset(a->dbtc, 0, BT * C * sizeof(float));
    matmul_backward(a->dbtc, w ? g.qkvw : NULL, w ? g.qkvb : NULL, dqkv, x.ln1, p.qkvw, B, T, C, 3 * d.Ca);
    if (tp_sum(self, a->dbtc, BT * C) != 0) return -1;
    layernorm_backward(a->dres, g.ln1w, g.ln1b, a->dbtc, x.residual, p.ln1w, x.ln1_mean, x.ln1_rstd, B, T, C);
    /* dres now holds d(residual), the layer's input. */
    return unit_release(self, unit, PX_GPT_BWD);
}

static int stage_backward(px_gpt_t *self, struct px_gpt_acts *a, const float *dout, float loss_scale,
                          bwd_part_t part) {
    const px_gpt_stage_t *st = &self->stage;
    int ready = part == BWD_WEIGHT ? a->have_bi : st->last ? a->have_loss : a->have_fwd && dout;
    if (!ready) {
        px_log_error("gpt_backward_without_%s hint=\"%s\"", part == BWD_WEIGHT ? "input_half" : "forward",
                     part == BWD_WEIGHT ? "run the input half of the backward first"
                     : st->last         ? "call px_gpt_forward with targets first"
                                        : "run the stage's forward first and pass the output gradient");
        return -1;
    }
    if (part != BWD_WHOLE && !self->split) {
        px_log_error("gpt_split_backward_not_set hint=\"px_gpt_set_stage with split 1\"");
        return -1;
    }
    a->have_loss = a->have_fwd = 0; /* the logits are overwritten below */
    a->have_bi = part == BWD_INPUT;
    const px_gpt_config_t *cfg = &self->config;
    dims_t d = local_dims(cfg, self->tp);
    int B = a->B, T = a->T, C = d.C, V = cfg->vocab_size, Vp = cfg->padded_vocab_size;
    size_t BT = (size_t)B * (size_t)T;
    int outer_unit = st->first || st->last;
    px_gpt_tensors_t outer, gouter;
    if (outer_unit && unit_acquire(self, 0, PX_GPT_BWD, &outer, &gouter) != 0) return -1;
    float *dlogits = a->logits; /* in place */
    if (st->last && part == BWD_WEIGHT) {
        matmul_backward(NULL, gouter.wte, NULL, dlogits, a->lnf, outer.wte, B, T, C, Vp);
    } else if (st->last) {
        crossentropy_softmax_backward(dlogits, a->logits, a->lse, a->targets, loss_scale / (float)BT, B, T, V, Vp);
        memset(a->dbtc, 0, BT * C * sizeof(float));
        matmul_backward(a->dbtc, part == BWD_WHOLE ? gouter.wte : NULL, NULL, dlogits, a->lnf, outer.wte, B, T, C,
                        Vp);
        memset(a->dres, 0, BT * C * sizeof(float));
        layernorm_backward(a->dres, gouter.lnfw, gouter.lnfb, a->dbtc, stage_out(self, a), outer.lnfw, a->lnf_mean,
                           a->lnf_rstd, B, T, C);
    } else if (part != BWD_WEIGHT) {
        memcpy(a->dres, dout, BT * C * sizeof(float));
    }
    for (int i = st->num_layers - 1; i >= 0; i--)
        if (layer_backward(self, a, d, i, part) != 0) return -1;
    if (st->first && part != BWD_WEIGHT) encoder_backward(gouter.wte, gouter.wpe, a->dres, a->inputs, B, T, C);
    return outer_unit ? unit_release(self, 0, PX_GPT_BWD) : 0;
}

int px_gpt_backward(px_gpt_t *self, float loss_scale) {
    return stage_backward(self, &self->acts[0], NULL, loss_scale, BWD_WHOLE);
}

int px_gpt_stage_backward(px_gpt_t *self, int slot, const float *dout, float loss_scale, int weights) {
    if (check_slot(self, slot) != 0) return -1;
    return stage_backward(self, &self->acts[slot], dout, loss_scale, weights ? BWD_WHOLE : BWD_INPUT);
}

int px_gpt_stage_backward_weights(px_gpt_t *self, int slot) {
    if (check_slot(self, slot) != 0) return -1;
    return stage_backward(self, &self->acts[slot], NULL, 0.0f, BWD_WEIGHT);
}

/* --------------------------------------------------------------- optimizer */

float px_gpt_grad_norm(px_gpt_t *self) {
    return (float)sqrt(norm_squared(self->grads, self->num_params));
}

float px_gpt_clip_grads(px_gpt_t *self, float max_norm) {
    float norm = px_gpt_grad_norm(self);
    if (max_norm > 0.0f) {
        float coef = max_norm / (norm + 1e-6f);
        if (coef < 1.0f) scale_inplace(self->grads, self->num_params, coef);
    }
    return norm;
}

void px_gpt_adamw_step(px_gpt_t *self, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int t) {
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) {
        size_t off = self->tensor_offsets[i];
        float wd = px_gpt_tensor_is_matrix(i) ? weight_decay : 0.0f;
        adamw_update(self->params + off, self->m + off, self->v + off, self->grads + off,
                     self->tensor_sizes[i], lr, beta1, beta2, eps, wd, t);
    }
}

/* Floats a block of a part: params, m, v and grads of it fit a core's L2. */
#define PARTS_BLOCK ((size_t)16 << 10)

void px_gpt_adamw_step_parts(px_gpt_t *self, float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                             size_t part_floats, void (*visit)(void *ctx, int k, size_t lo, size_t hi), void *ctx) {
    size_t n = self->num_params;
    int parts = (int)((n + part_floats - 1) / part_floats);
#pragma omp parallel for schedule(dynamic, 1)
    for (int k = 0; k < parts; k++) {
        size_t hi = (size_t)k * part_floats + part_floats < n ? (size_t)k * part_floats + part_floats : n;
        int i = 0;
        for (size_t lo = (size_t)k * part_floats; lo < hi;) {
            while (lo >= self->tensor_offsets[i] + self->tensor_sizes[i]) i++; /* the tensor lo is in */
            size_t end = self->tensor_offsets[i] + self->tensor_sizes[i];
            end = end < hi ? end : hi;
            end = end - lo > PARTS_BLOCK ? lo + PARTS_BLOCK : end;
            float wd = px_gpt_tensor_is_matrix(i) ? weight_decay : 0.0f;
            adamw_update_serial(self->params + lo, self->m + lo, self->v + lo, self->grads + lo, end - lo, lr, beta1,
                                beta2, eps, wd, t);
            visit(ctx, k, lo, end);
            lo = end;
        }
    }
}

float px_lr_at(int step, int warmup, int total, float max_lr, float min_lr) {
    if (step < warmup) return max_lr * (float)(step + 1) / (float)warmup;
    if (step >= total) return min_lr;
    double ratio = (double)(step - warmup) / (double)(total - warmup);
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
    return (float)(min_lr + coeff * (max_lr - min_lr));
}

double px_gpt_flops_per_step(const px_gpt_config_t *cfg, int B, int T) {
    double C = cfg->channels, L = cfg->num_layers, Vp = cfg->padded_vocab_size;
    double tokens = (double)B * T;
    double matmul_fwd = 2.0 * tokens * (L * (3 * C * C + C * C + 4 * C * C + 4 * C * C) + Vp * C);
    /* q.k and att.v: 2 FLOPs per multiply-add, hs * NH = C per query-key pair */
    double pairs = (double)B * T * (T + 1) / 2.0;
    double attn_fwd = L * 2.0 * 2.0 * pairs * C;
    return 3.0 * (matmul_fwd + attn_fwd);
}
