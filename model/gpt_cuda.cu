/* GPT-2 on the GPU (gpt_cuda.h): the four state buffers, the activations, and
 * the forward and backward passes as a sequence of ops_cuda.h calls, in the
 * same order and with the same buffer reuse as the CPU model (model/gpt.c),
 * so the two can be read side by side and compared tensor by tensor.
 *
 * Memory: params, grads, m and v are one cudaMalloc each (num_params floats;
 * grads has PX_GPT_GRADS_SPARE more, for a trainer's values reduced with them).
 * Activations are one cudaMalloc carved into 64-byte-aligned views (the
 * alignment keeps cuBLASLt on its fast paths). As on the CPU, the outputs of
 * the two residual projections are not kept, and the backward pass reuses a
 * few scratch gradients; the residual stream's gradient is one buffer that
 * every layer adds into.
 *
 * Storage: the passes are templates over X, the type of what the GEMMs
 * read and write (LayerNorm outputs, qkv, the attention output, the MLP's
 * hidden units, the logits and the gradients fed back into GEMMs). X is
 * float, except with bf16 math, where it is bf16: half the activation
 * memory and traffic, and GEMMs on bf16 operands. The residual stream and
 * its gradient, LayerNorm statistics, losses, and every parameter, gradient
 * and moment stay FP32 either way: with bf16 storage each unit's GEMM
 * weights are rounded to a bf16 copy when the unit is acquired (one pass
 * over its parameters, so the FP32 state stays the only state, whoever
 * owns it: this model, a shard source, a heal or a restore). The backward
 * keeps a bf16 copy of the residual gradient beside the FP32 one, for the
 * GEMMs.
 *
 * Host/device traffic per step: the token ids and the embedding backward's
 * plan in, the per-position losses out (B*T floats, summed on the host in
 * double in order, as the CPU does), and one double for the gradient norm.
 *
 * Errors: CUDA calls go through PX_CUDA_CHECK from kernels/cuda_common.cuh
 * (log file:line and exit); bad arguments are logged and returned. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"
#include "gpt_cuda.h"
#include "ops_cuda.h"

extern "C" {
#include "px_log.h"
}

/* Activations and scratch on the device, laid out for (B,T). The views
 * typed void * hold the storage type X (float or bf16, the model's
 * `bf16`); the others are FP32 always. */
typedef struct {
    int B, T;
    size_t capacity;     /* bytes in mem */
    size_t tok_capacity; /* ints in each of inputs and targets */
    unsigned char *mem;
    int *tokens;         /* inputs, targets, then the embedding backward's plan */
    int *inputs;         /* (B,T) */
    int *targets;        /* (B,T) */
    int *plan;           /* encoder_backward_plan of the inputs (first stage) */
    int plan_groups;
    int *host_plan;      /* its host copy, built at the forward */
    int have_loss;    /* a forward with targets on the last stage, not yet differentiated */
    int have_fwd;     /* a forward, not yet differentiated */
    int have_bi;      /* a split backward's input half done, its weight half not */
    int have_dlogits; /* logits holds the loss gradient for dloss 1/BT (the fused classifier) */
    int recompute;    /* laid out for recompute: the per-layer views but residual3 hold one layer */
    int held;         /* recompute: the layer whose activations the per-layer views hold now (-1: none) */
    float dlogits_scale; /* what the classifier's backward scales logits by (the weight half's too) */
    float *host_losses; /* (tok_capacity) */
    float *encoded;   /* (B,T,C): the stage's input */
    void *ln1;        /* X (L,B,T,C) */
    float *ln1_mean;  /* (L,B,T) */
    float *ln1_rstd;  /* (L,B,T) */
    void *qkv;        /* X (L,B,T,3Ca) (Ca = C/tp: this rank's heads) */
    void *atty;       /* X (L,B,T,Ca) */
    void *att;        /* X (L,B,NHa,T,T), or with flash attention each row's log-sum-exp (L,B,NHa,T), FP32 */
    size_t att_layer; /* att's bytes per layer */
    float *residual2; /* (L,B,T,C) */
    void *ln2;        /* X (L,B,T,C) */
    float *ln2_mean;  /* (L,B,T) */
    float *ln2_rstd;  /* (L,B,T) */
    void *fch;        /* X (L,B,T,H) (H = 4C/tp) */
    void *fch_gelu;   /* X (L,B,T,H) */
    float *residual3; /* (L,B,T,C) */
    void *lnf;        /* X (B,T,C) */
    float *lnf_mean;  /* (B,T) */
    float *lnf_rstd;  /* (B,T) */
    void *logits;     /* X (B,T,Vp); dlogits in place after backward */
    float *losses;    /* (B,T) */
    float *lse;       /* (B,T) */
    float *proj;      /* (B,T,C) attproj / fcproj output before the residual add */
    float *dres;      /* (B,T,C) gradient of the residual stream */
    float *dbtc;      /* (B,T,C) scratch gradient */
    void *d4a;        /* X (B,T,H) scratch gradient (also dqkv, 3Ca <= H) */
    void *dres_x;     /* X (B,T,C): dres as the GEMMs read it (dres itself when X is float) */
    void *datt_x;     /* X (B,T,Ca): the attention output's gradient (dbtc when X is float) */
    /* split backward only: each layer's four matmuls' output gradients (X), kept by the input half for
     * the weight half (NULL otherwise) */
    void *k_dfcproj; /* (L,B,T,C) */
    void *k_dfc;     /* (L,B,T,H) */
    void *k_dattproj; /* (L,B,T,C) */
    void *k_dqkv;    /* (L,B,T,3Ca) */
} acts_t;

struct px_gpt_cuda {
    px_gpt_config_t config;
    size_t num_params;
    size_t sizes[PX_GPT_NUM_TENSORS];
    size_t offsets[PX_GPT_NUM_TENSORS];
    float *buf[4]; /* params, grads, m, v: indexed by px_gpt_cuda_buf_t (NULL when sharded) */
    px_gpt_tensors_t p, g; /* named views, here of device memory */
    px_gpt_tp_t tp;              /* {1, 0} unless sharded */
    const px_gpt_source_t *src;  /* NULL: the buffers hold the model */
    acts_t *acts;           /* [nslots]: one micro-batch's activations each */
    int nslots;
    px_gpt_stage_t stage;   /* the whole model unless px_gpt_cuda_set_stage */
    int split;              /* the backward may run as two halves */
    int flash;              /* attention by the fused kernels (bf16 math, a head size they take) */
    int bf16;               /* bf16 math: activations stored in bf16 (X = bf16), the classifier's loss and
                             * gradient in one pass at the forward, the MLP's GELU (and its gradient) in
                             * cuBLASLt epilogues (is_bf16<X>) */
    __nv_bfloat16 *w_layer; /* bf16: one layer's GEMM weights and their biases, rounded at its acquire */
    __nv_bfloat16 *w_outer; /* bf16: wte rounded, for the classifier */
    int recompute;          /* block recomputation (px_gpt_cuda_set_recompute) */
    float mean_loss;
    cudaStream_t stream;
};

/* ------------------------------------------------------------------ layout */

static void set_views(px_gpt_tensors_t *v, float *base, const size_t *off) {
    float **slot[PX_GPT_NUM_TENSORS] = {
        &v->wte,  &v->wpe,  &v->ln1w, &v->ln1b, &v->qkvw,    &v->qkvb,    &v->attprojw, &v->attprojb,
        &v->ln2w, &v->ln2b, &v->fcw,  &v->fcb,  &v->fcprojw, &v->fcprojb, &v->lnfw,     &v->lnfb};
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) *slot[i] = base + off[i];
}

/* A layer's sizes on this rank: C and NH whole, Ca channels of NHa heads
 * of attention and H hidden units of the MLP (the tensor-parallel slice). */
typedef struct {
    int C, NH, Ca, NHa, H;
} dims_t;

static dims_t local_dims(const px_gpt_config_t *cfg, px_gpt_tp_t tp) {
    int C = cfg->channels, NH = cfg->num_heads;
    return dims_t{C, NH, C / tp.size, NH / tp.size, 4 * C / tp.size};
}

/* Lays the activation views out for (B,T) from mem (or only counts bytes
 * when mem is NULL), xs the bytes of an X element. Returns the byte count.
 * With recompute the per-layer activations but residual3 (each layer's
 * output, the next one's input) hold one layer, shared by all. */
static size_t layout_acts(acts_t *a, const px_gpt_config_t *cfg, dims_t d, int layers, int split, int flash,
                          int recompute, size_t xs, int B, int T, unsigned char *mem) {
    size_t Lo = (size_t)layers, L = recompute ? 1 : Lo; /* L: layers of inner activations held */
    size_t C = (size_t)d.C, Ca = (size_t)d.Ca, NHa = (size_t)d.NHa, H = (size_t)d.H;
    size_t att_layer = (size_t)B * NHa * (size_t)T * (flash ? 1 : (size_t)T), att_es = flash ? sizeof(float) : xs;
    size_t K = split ? Lo : 0; /* the kept output gradients */
    size_t BT = (size_t)B * (size_t)T, Vp = (size_t)cfg->padded_vocab_size;
    size_t f = sizeof(float), xc = xs == f ? 0 : 1; /* xc: the X copies of dres and datt exist */
    struct {
        void *p; /* a float ** or a void ** */
        size_t n, es;
    } t[] = {
        {&a->encoded, BT * C, f},        {&a->ln1, L * BT * C, xs},        {&a->ln1_mean, L * BT, f},
        {&a->ln1_rstd, L * BT, f},       {&a->qkv, L * BT * 3 * Ca, xs},   {&a->atty, L * BT * Ca, xs},
        {&a->att, L * att_layer, att_es}, {&a->residual2, L * BT * C, f},  {&a->ln2, L * BT * C, xs},
        {&a->ln2_mean, L * BT, f},       {&a->ln2_rstd, L * BT, f},        {&a->fch, L * BT * H, xs},
        {&a->fch_gelu, L * BT * H, xs},  {&a->residual3, Lo * BT * C, f},  {&a->lnf, BT * C, xs},
        {&a->lnf_mean, BT, f},           {&a->lnf_rstd, BT, f},            {&a->logits, BT * Vp, xs},
        {&a->losses, BT, f},             {&a->lse, BT, f},                 {&a->proj, BT * C, f},
        {&a->dres, BT * C, f},           {&a->dbtc, BT * C, f},            {&a->d4a, BT * H, xs},
        {&a->dres_x, xc * BT * C, xs},   {&a->datt_x, xc * BT * Ca, xs},
        {&a->k_dfcproj, K * BT * C, xs}, {&a->k_dfc, K * BT * H, xs},
        {&a->k_dattproj, K * BT * C, xs}, {&a->k_dqkv, K * BT * 3 * Ca, xs},
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (mem) *(void **)t[i].p = mem + total; /* float * and void * share a representation */
        total += (t[i].n * t[i].es + 63) & ~(size_t)63; /* 64-byte aligned views */
    }
    if (mem && !split) a->k_dfcproj = a->k_dfc = a->k_dattproj = a->k_dqkv = NULL;
    if (mem && !xc) a->dres_x = a->dres, a->datt_x = a->dbtc;
    if (mem) a->att_layer = att_layer * att_es;
    return total;
}

static int ensure_acts(px_gpt_cuda_t *self, acts_t *a, int B, int T) {
    if (a->B == B && a->T == T) return 0;
    dims_t d = local_dims(&self->config, self->tp);
    int nl = self->stage.num_layers;
    size_t xs = self->bf16 ? sizeof(__nv_bfloat16) : sizeof(float);
    size_t need = layout_acts(a, &self->config, d, nl, self->split, self->flash, self->recompute, xs, B, T, NULL);
    size_t ntok = (size_t)B * (size_t)T;
    if (need > a->capacity || ntok > a->tok_capacity) {
        PX_CUDA_CHECK(cudaStreamSynchronize(self->stream)); /* nothing queued still reads them */
        if (a->mem) PX_CUDA_CHECK(cudaFree(a->mem));
        if (a->tokens) PX_CUDA_CHECK(cudaFree(a->tokens));
        free(a->host_losses);
        free(a->host_plan);
        a->mem = NULL;
        a->tokens = NULL;
        a->host_losses = NULL;
        a->host_plan = NULL;
        a->capacity = a->tok_capacity = 0;
        a->B = a->T = 0;
        size_t plan_ints = encoder_backward_plan_ints(B, T);
        cudaError_t e1 = cudaMalloc(&a->mem, need);
        cudaError_t e2 = cudaMalloc(&a->tokens, (2 * ntok + plan_ints) * sizeof(int));
        a->host_losses = (float *)malloc(ntok * sizeof(float));
        a->host_plan = (int *)malloc(plan_ints * sizeof(int));
        if (e1 != cudaSuccess || e2 != cudaSuccess || !a->host_losses || !a->host_plan) {
            cudaGetLastError();
            if (e1 == cudaSuccess) cudaFree(a->mem);
            if (e2 == cudaSuccess) cudaFree(a->tokens);
            free(a->host_losses);
            free(a->host_plan);
            a->mem = NULL;
            a->tokens = NULL;
            a->host_losses = NULL;
            a->host_plan = NULL;
            px_log_error("gpt_cuda_alloc_failed what=activations bytes=%zu B=%d T=%d error=\"%s\" "
                         "hint=\"lower B or T\"",
                         need, B, T, cudaGetErrorString(e1 != cudaSuccess ? e1 : e2));
            return -1;
        }
        a->capacity = need;
        a->tok_capacity = ntok;
    }
    layout_acts(a, &self->config, d, nl, self->split, self->flash, self->recompute, xs, B, T, a->mem);
    a->recompute = self->recompute;
    a->held = -1;
    a->inputs = a->tokens;
    a->targets = a->tokens + ntok;
    a->plan = a->tokens + 2 * ntok;
    a->B = B;
    a->T = T;
    a->have_loss = a->have_fwd = a->have_bi = 0;
    return 0;
}

static void free_acts(px_gpt_cuda_t *self) {
    for (int i = 0; self->acts && i < self->nslots; i++) {
        acts_t *a = &self->acts[i];
        if (a->mem) PX_CUDA_CHECK(cudaFree(a->mem));
        if (a->tokens) PX_CUDA_CHECK(cudaFree(a->tokens));
        free(a->host_losses);
        free(a->host_plan);
    }
    free(self->acts);
    self->acts = NULL;
    self->nslots = 0;
}

/* nslots empty activation slots (allocated at their first forward). 0, or -1. */
static int new_slots(px_gpt_cuda_t *self, int nslots) {
    if (self->stream) PX_CUDA_CHECK(cudaStreamSynchronize(self->stream)); /* nothing queued reads the old ones */
    free_acts(self);
    self->acts = (acts_t *)calloc((size_t)nslots, sizeof *self->acts);
    if (!self->acts) return -1;
    self->nslots = nslots;
    return 0;
}

/* ------------------------------------------------------------ construction */

/* The bf16 weight copies of one layer, each view 64-byte aligned (cuBLASLt's
 * fast paths): qkvw, qkvb, attprojw, fcw, fcb, fcprojw, in that order. */
#define LAYER_WEIGHTS 6
static void layer_weight_sizes(dims_t d, size_t n[LAYER_WEIGHTS]) {
    size_t C = (size_t)d.C, Ca = (size_t)d.Ca, H = (size_t)d.H;
    n[0] = 3 * Ca * C, n[1] = 3 * Ca, n[2] = C * Ca, n[3] = H * C, n[4] = H, n[5] = C * H;
}

static size_t aligned_elems(size_t n) { return (n + 31) & ~(size_t)31; } /* bf16s, in 64 bytes */

/* bf16 storage: room for one layer's and the classifier's bf16 weights. 0, or -1 (logged). */
static int alloc_bf16_weights(px_gpt_cuda_t *self) {
    size_t n[LAYER_WEIGHTS], layer = 0;
    layer_weight_sizes(local_dims(&self->config, self->tp), n);
    for (int i = 0; i < LAYER_WEIGHTS; i++) layer += aligned_elems(n[i]);
    size_t outer = (size_t)self->config.padded_vocab_size * (size_t)self->config.channels;
    cudaError_t e1 = cudaMalloc(&self->w_layer, layer * sizeof(__nv_bfloat16));
    cudaError_t e2 = cudaMalloc(&self->w_outer, outer * sizeof(__nv_bfloat16));
    if (e1 == cudaSuccess && e2 == cudaSuccess) return 0;
    cudaGetLastError();
    if (e1 == cudaSuccess) cudaFree(self->w_layer);
    if (e2 == cudaSuccess) cudaFree(self->w_outer);
    self->w_layer = self->w_outer = NULL;
    px_log_error("gpt_cuda_alloc_failed what=bf16_weights elems=%zu error=\"%s\"", layer + outer,
                 cudaGetErrorString(e1 != cudaSuccess ? e1 : e2));
    return -1;
}

/* A model without state buffers yet: config, layout, stream. */
static px_gpt_cuda_t *new_bare(const px_gpt_config_t *cfg, px_gpt_tp_t tp) {
    char why[256];
    if (px_gpt_config_check(cfg, why, sizeof why) != 0 || px_gpt_tp_check(cfg, tp.size, why, sizeof why) != 0) {
        px_log_error("gpt_cuda_bad_config problem=\"%s\"", why);
        return NULL;
    }
    if (tp.rank < 0 || tp.rank >= tp.size) {
        px_log_error("gpt_cuda_bad_config tp=%d tp_rank=%d", tp.size, tp.rank);
        return NULL;
    }
    if (px_cuda_device_count(why, sizeof why) < 1) {
        px_log_error("gpt_cuda_no_device reason=\"%s\"", why);
        return NULL;
    }
    px_gpt_cuda_t *self = (px_gpt_cuda_t *)calloc(1, sizeof *self);
    if (!self) return NULL;
    self->config = *cfg;
    self->tp = tp;
    self->stage = px_gpt_stage_t{0, cfg->num_layers, 1, 1};
    if (new_slots(self, 1) != 0) {
        free(self);
        return NULL;
    }
    self->num_params = px_gpt_tensor_sizes(cfg, self->sizes);
    size_t off = 0;
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) {
        self->offsets[i] = off;
        off += self->sizes[i];
    }
    self->mean_loss = -1.0f;
    px_cuda_ops_init();
    self->flash = px_cuda_ops_math() == PX_CUDA_MATH_BF16 && px_cuda_ops_fused_attention() &&
                  flash_attention_supported(cfg->channels / cfg->num_heads);
    self->bf16 = px_cuda_ops_math() == PX_CUDA_MATH_BF16;
    PX_CUDA_CHECK(cudaStreamCreateWithFlags(&self->stream, cudaStreamNonBlocking));
    if (self->bf16 && alloc_bf16_weights(self) != 0) {
        px_gpt_cuda_destroy(&self);
        return NULL;
    }
    return self;
}

px_gpt_cuda_t *px_gpt_cuda_new_sharded(const px_gpt_config_t *cfg, px_gpt_tp_t tp, const px_gpt_source_t *src) {
    if (!src || !src->acquire || (tp.size > 1 && !src->tp_sum)) {
        px_log_error("gpt_cuda_bad_source hint=\"a sharded model needs acquire (and tp_sum with tp > 1)\"");
        return NULL;
    }
    px_gpt_cuda_t *self = new_bare(cfg, tp);
    if (!self) return NULL;
    self->src = src;
    self->num_params = 0;
    return self;
}

px_gpt_cuda_t *px_gpt_cuda_new(const px_gpt_config_t *cfg) {
    px_gpt_cuda_t *self = new_bare(cfg, px_gpt_tp_t{1, 0});
    if (!self) return NULL;
    for (int i = 0; i < 4; i++) {
        /* grads get the CPU model's spare room (gpt.h, PX_GPT_GRADS_SPARE) */
        size_t bytes = (self->num_params + (i == PX_GPT_CUDA_GRADS ? PX_GPT_GRADS_SPARE : 0)) * sizeof(float);
        cudaError_t e = cudaMalloc(&self->buf[i], bytes);
        if (e != cudaSuccess) {
            cudaGetLastError();
            self->buf[i] = NULL;
            px_log_error("gpt_cuda_alloc_failed what=state params=%zu error=\"%s\"",
                         self->num_params, cudaGetErrorString(e));
            px_gpt_cuda_destroy(&self);
            return NULL;
        }
        PX_CUDA_CHECK(cudaMemsetAsync(self->buf[i], 0, bytes, self->stream));
    }
    PX_CUDA_CHECK(cudaStreamSynchronize(self->stream));
    set_views(&self->p, self->buf[PX_GPT_CUDA_PARAMS], self->offsets);
    set_views(&self->g, self->buf[PX_GPT_CUDA_GRADS], self->offsets);
    return self;
}

void px_gpt_cuda_destroy(px_gpt_cuda_t **pself) {
    if (!pself || !*pself) return;
    px_gpt_cuda_t *self = *pself;
    if (self->stream) PX_CUDA_CHECK(cudaStreamSynchronize(self->stream));
    for (int i = 0; i < 4; i++)
        if (self->buf[i]) PX_CUDA_CHECK(cudaFree(self->buf[i]));
    if (self->w_layer) PX_CUDA_CHECK(cudaFree(self->w_layer));
    if (self->w_outer) PX_CUDA_CHECK(cudaFree(self->w_outer));
    free_acts(self);
    if (self->stream) PX_CUDA_CHECK(cudaStreamDestroy(self->stream));
    free(self);
    *pself = NULL;
}

const px_gpt_config_t *px_gpt_cuda_config(const px_gpt_cuda_t *self) { return &self->config; }
int px_gpt_cuda_bf16_activations(const px_gpt_cuda_t *self) { return self->bf16; }
int px_gpt_cuda_fused_attention(const px_gpt_cuda_t *self) { return self->flash; }
size_t px_gpt_cuda_num_params(const px_gpt_cuda_t *self) { return self->num_params; }
cudaStream_t px_gpt_cuda_stream(const px_gpt_cuda_t *self) { return self->stream; }

size_t px_gpt_cuda_tensor_offset(const px_gpt_cuda_t *self, int tensor) {
    return tensor >= 0 && tensor < PX_GPT_NUM_TENSORS ? self->offsets[tensor] : 0;
}

float *px_gpt_cuda_buffer(px_gpt_cuda_t *self, px_gpt_cuda_buf_t which) {
    return (int)which >= 0 && (int)which < 4 ? self->buf[which] : NULL;
}

/* --------------------------------------------------------------- transfers */

static const char *buf_name(px_gpt_cuda_buf_t which) {
    static const char *names[4] = {"params", "grads", "m", "v"};
    return (int)which >= 0 && (int)which < 4 ? names[which] : "?";
}

static int check_count(const char *what, size_t n, size_t want) {
    if (n == want) return 0;
    px_log_error("gpt_cuda_bad_count what=%s n=%zu expected=%zu", what, n, want);
    return -1;
}

int px_gpt_cuda_upload(px_gpt_cuda_t *self, px_gpt_cuda_buf_t which, const float *host, size_t n) {
    if ((int)which < 0 || (int)which > 3 || check_count(buf_name(which), n, self->num_params))
        return -1;
    PX_CUDA_CHECK(cudaMemcpyAsync(self->buf[which], host, n * sizeof(float),
                                  cudaMemcpyHostToDevice, self->stream));
    PX_CUDA_CHECK(cudaStreamSynchronize(self->stream));
    return 0;
}

static int download(px_gpt_cuda_t *self, float *host, const float *dev, size_t n) {
    PX_CUDA_CHECK(
        cudaMemcpyAsync(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost, self->stream));
    PX_CUDA_CHECK(cudaStreamSynchronize(self->stream));
    return 0;
}

int px_gpt_cuda_download(px_gpt_cuda_t *self, px_gpt_cuda_buf_t which, float *host, size_t n) {
    if ((int)which < 0 || (int)which > 3 || check_count(buf_name(which), n, self->num_params))
        return -1;
    return download(self, host, self->buf[which], n);
}

int px_gpt_cuda_download_logits(px_gpt_cuda_t *self, float *host, size_t n) {
    const acts_t *a = &self->acts[0];
    if (!a->mem) {
        px_log_error("gpt_cuda_no_forward what=logits hint=\"call px_gpt_cuda_forward first\"");
        return -1;
    }
    size_t want = (size_t)a->B * a->T * (size_t)self->config.padded_vocab_size;
    if (check_count("logits", n, want)) return -1;
    if (a->have_dlogits) {
        px_log_error("gpt_cuda_logits_overwritten hint=\"with bf16 math a forward with targets leaves the loss "
                     "gradient in their place: forward without targets for the logits\"");
        return -1;
    }
    if (!self->bf16) return download(self, host, (const float *)a->logits, n);
    float *f = (float *)px_cuda_scratch(n * sizeof(float));
    px_cuda_to_float(f, (const __nv_bfloat16 *)a->logits, n, self->stream);
    return download(self, host, f, n);
}

int px_gpt_cuda_download_losses(px_gpt_cuda_t *self, float *host, size_t n) {
    const acts_t *a = &self->acts[0];
    if (!a->mem) {
        px_log_error("gpt_cuda_no_forward what=losses hint=\"call px_gpt_cuda_forward first\"");
        return -1;
    }
    if (check_count("losses", n, (size_t)a->B * a->T)) return -1;
    return download(self, host, a->losses, n);
}

/* ------------------------------------------------------------------- units */

/* Unit `unit`'s views (gpt.h: 0 the outer tensors, 1 + l layer l): from the
 * source, or into the model's own buffers. */
static int unit_acquire(px_gpt_cuda_t *self, int unit, px_gpt_pass_t pass, px_gpt_tensors_t *p,
                        px_gpt_tensors_t *g) {
    if (self->src) return self->src->acquire(self->src->ctx, unit, pass, p, g);
    *p = self->p;
    if (g) *g = self->g;
    if (unit == 0) return 0;
    px_gpt_layer_view(p, &self->config, unit - 1);
    if (g) px_gpt_layer_view(g, &self->config, unit - 1);
    return 0;
}

static int unit_release(px_gpt_cuda_t *self, int unit, px_gpt_pass_t pass) {
    return self->src && self->src->release ? self->src->release(self->src->ctx, unit, pass) : 0;
}

static int tp_sum(px_gpt_cuda_t *self, float *buf, size_t n) {
    return self->tp.size > 1 ? self->src->tp_sum(self->src->ctx, buf, n) : 0;
}

/* The stage's i-th layer's activation views (model layer stage.first_layer + i), X the storage type. */
template <typename X>
struct layer_acts_t {
    X *ln1;
    float *ln1_mean, *ln1_rstd;
    X *qkv, *atty;
    void *att; /* X probabilities, or FP32 log-sum-exps (flash) */
    float *residual2;
    X *ln2;
    float *ln2_mean, *ln2_rstd;
    X *fch, *fch_gelu;
    float *residual3;
    const float *residual; /* the layer's input */
    X *dfcproj, *dfc, *dattproj, *dqkv; /* split backward: the four matmuls' output gradients */
};

template <typename X>
static layer_acts_t<X> layer_acts(const acts_t *a, dims_t d, int i) {
    size_t B = (size_t)a->B, T = (size_t)a->T, BT = B * T, C = (size_t)d.C, Ca = (size_t)d.Ca;
    size_t H = (size_t)d.H, lu = (size_t)i, li = a->recompute ? 0 : lu; /* li: the layer in the inner arrays */
    int k = a->k_dfcproj != NULL;
    layer_acts_t<X> x = {
        (X *)a->ln1 + li * BT * C, a->ln1_mean + li * BT, a->ln1_rstd + li * BT, (X *)a->qkv + li * BT * 3 * Ca,
        (X *)a->atty + li * BT * Ca, (unsigned char *)a->att + li * a->att_layer, a->residual2 + li * BT * C,
        (X *)a->ln2 + li * BT * C, a->ln2_mean + li * BT, a->ln2_rstd + li * BT, (X *)a->fch + li * BT * H,
        (X *)a->fch_gelu + li * BT * H, a->residual3 + lu * BT * C,
        i == 0 ? a->encoded : a->residual3 + (lu - 1) * BT * C,
        k ? (X *)a->k_dfcproj + lu * BT * C : NULL, k ? (X *)a->k_dfc + lu * BT * H : NULL,
        k ? (X *)a->k_dattproj + lu * BT * C : NULL, k ? (X *)a->k_dqkv + lu * BT * 3 * Ca : NULL,
    };
    return x;
}

/* The stage's output: the residual stream after its last layer. */
static float *stage_out(const px_gpt_cuda_t *self, const acts_t *a) {
    size_t BT = (size_t)a->B * (size_t)a->T, C = (size_t)self->config.channels;
    return a->residual3 + (size_t)(self->stage.num_layers - 1) * BT * C;
}

/* A layer's GEMM weights and the biases of the GEMMs with an X output, as
 * the GEMMs read them: the FP32 tensors themselves, or their bf16 copies. */
template <typename X>
struct layer_weights_t {
    const X *qkvw, *qkvb, *attprojw, *fcw, *fcb, *fcprojw;
};

static void layer_weights(px_gpt_cuda_t *, dims_t, const px_gpt_tensors_t &p, layer_weights_t<float> *w) {
    *w = layer_weights_t<float>{p.qkvw, p.qkvb, p.attprojw, p.fcw, p.fcb, p.fcprojw};
}

/* Rounds them into the model's one-layer bf16 buffer, in one launch. */
static void layer_weights(px_gpt_cuda_t *self, dims_t d, const px_gpt_tensors_t &p,
                          layer_weights_t<__nv_bfloat16> *w) {
    size_t n[LAYER_WEIGHTS];
    layer_weight_sizes(d, n);
    const float *src[LAYER_WEIGHTS] = {p.qkvw, p.qkvb, p.attprojw, p.fcw, p.fcb, p.fcprojw};
    const __nv_bfloat16 **dst[LAYER_WEIGHTS] = {&w->qkvw, &w->qkvb, &w->attprojw, &w->fcw, &w->fcb, &w->fcprojw};
    px_cuda_convert_t jobs[LAYER_WEIGHTS];
    __nv_bfloat16 *at = self->w_layer;
    for (int i = 0; i < LAYER_WEIGHTS; i++) {
        jobs[i] = px_cuda_convert_t{at, src[i], n[i]};
        *dst[i] = at;
        at += aligned_elems(n[i]);
    }
    px_cuda_to_bf16_many(jobs, LAYER_WEIGHTS, self->stream);
}

/* wte as the classifier's GEMMs read it. */
static const float *classifier_weight(px_gpt_cuda_t *, const px_gpt_tensors_t &p, const float *) { return p.wte; }
static const __nv_bfloat16 *classifier_weight(px_gpt_cuda_t *self, const px_gpt_tensors_t &p,
                                              const __nv_bfloat16 *) {
    const px_gpt_config_t *cfg = &self->config;
    px_cuda_to_bf16(self->w_outer, p.wte, (size_t)cfg->padded_vocab_size * (size_t)cfg->channels, self->stream);
    return self->w_outer;
}

/* dres's X copy after dres was set from outside (a later stage's gradient). */
static void mirror(float *, const float *, size_t, cudaStream_t) {}
static void mirror(__nv_bfloat16 *dst, const float *src, size_t n, cudaStream_t st) {
    px_cuda_to_bf16(dst, src, n, st);
}

/* ----------------------------------------------------------------- forward */

static int check_tokens(const int *x, size_t n, int V, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (x[i] < 0 || x[i] >= V) {
            px_log_error("gpt_cuda_bad_token what=%s index=%zu token=%d vocab_size=%d", what, i,
                         x[i], V);
            return -1;
        }
    return 0;
}

/* bf16 storage, and with it the fused classifier and GELU epilogues. */
template <typename X>
constexpr bool is_bf16() {
    return sizeof(X) == sizeof(__nv_bfloat16);
}

/* The stage's i-th layer's forward with its parameters p (and their GEMM
 * view w): the forward's, or the backward's when it recomputes. With
 * tensor parallelism the two row-parallel outputs are partial sums: summed
 * over the tp ranks, tp rank 0 adding the bias. */
template <typename X>
static int layer_forward_with(px_gpt_cuda_t *self, acts_t *a, dims_t d, int i, const px_gpt_tensors_t &p,
                              const layer_weights_t<X> &w) {
    int B = a->B, T = a->T, C = d.C;
    size_t BT = (size_t)B * (size_t)T;
    cudaStream_t st = self->stream;
    int tp0 = self->tp.rank == 0;
    layer_acts_t<X> x = layer_acts<X>(a, d, i);
    layernorm_forward_cuda(x.ln1, x.ln1_mean, x.ln1_rstd, x.residual, p.ln1w, p.ln1b, B, T, C, st);
    matmul_forward_cuda(x.qkv, x.ln1, w.qkvw, w.qkvb, B, T, C, 3 * d.Ca, st);
    if (self->flash) flash_attention_forward_cuda(x.atty, (float *)x.att, x.qkv, B, T, d.Ca, d.NHa, st);
    else attention_forward_cuda(x.atty, (X *)x.att, x.qkv, B, T, d.Ca, d.NHa, st);
    matmul_forward_cuda(a->proj, x.atty, w.attprojw, tp0 ? p.attprojb : NULL, B, T, d.Ca, C, st);
    if (tp_sum(self, a->proj, BT * C) != 0) return -1;
    residual_layernorm_forward_cuda(x.residual2, x.ln2, x.ln2_mean, x.ln2_rstd, x.residual, a->proj, p.ln2w, p.ln2b,
                                    B, T, C, st);
    if constexpr (is_bf16<X>()) {
        matmul_forward_gelu_cuda(x.fch_gelu, x.fch, x.ln2, w.fcw, w.fcb, B, T, C, d.H, st);
    } else {
        matmul_forward_cuda(x.fch, x.ln2, w.fcw, w.fcb, B, T, C, d.H, st);
        gelu_forward_cuda(x.fch_gelu, x.fch, BT * d.H, st);
    }
    matmul_forward_cuda(a->proj, x.fch_gelu, w.fcprojw, tp0 ? p.fcprojb : NULL, B, T, d.H, C, st);
    if (tp_sum(self, a->proj, BT * C) != 0) return -1;
    residual_forward_cuda(x.residual3, x.residual2, a->proj, BT * C, st);
    a->held = i;
    return 0;
}

template <typename X>
static int layer_forward(px_gpt_cuda_t *self, acts_t *a, dims_t d, int i) {
    int unit = 1 + self->stage.first_layer + i;
    px_gpt_tensors_t p;
    layer_weights_t<X> w;
    if (unit_acquire(self, unit, PX_GPT_FWD, &p, NULL) != 0) return -1;
    layer_weights(self, d, p, &w);
    if (layer_forward_with<X>(self, a, d, i, p, w) != 0) return -1;
    return unit_release(self, unit, PX_GPT_FWD);
}

template <typename X>
static float stage_forward(px_gpt_cuda_t *self, acts_t *a, const int *inputs, const float *x, const int *targets,
                           int B, int T) {
    const px_gpt_config_t *cfg = &self->config;
    const px_gpt_stage_t *sg = &self->stage;
    int C = cfg->channels, V = cfg->vocab_size, Vp = cfg->padded_vocab_size;
    dims_t d = local_dims(cfg, self->tp);
    cudaStream_t st = self->stream;
    self->mean_loss = -1.0f;
    if (B < 1 || T < 1 || T > cfg->max_seq_len) {
        px_log_error("gpt_cuda_bad_shape B=%d T=%d max_seq_len=%d", B, T, cfg->max_seq_len);
        return NAN;
    }
    if (sg->first ? !inputs : !x) {
        px_log_error("gpt_cuda_stage_without_input first=%d", sg->first);
        return NAN;
    }
    size_t BT = (size_t)B * (size_t)T;
    if (sg->first && check_tokens(inputs, BT, V, "inputs") != 0) return NAN;
    if (sg->last && targets && check_tokens(targets, BT, V, "targets") != 0) return NAN;
    if (ensure_acts(self, a, B, T) != 0) return NAN;
    a->have_loss = a->have_fwd = a->have_bi = a->have_dlogits = 0;
    a->held = -1;
    int outer_unit = sg->first || sg->last;
    px_gpt_tensors_t outer;
    if (outer_unit && unit_acquire(self, 0, PX_GPT_FWD, &outer, NULL) != 0) return NAN;
    if (sg->first) {
        PX_CUDA_CHECK(cudaMemcpyAsync(a->inputs, inputs, BT * sizeof(int), cudaMemcpyHostToDevice, st));
        encoder_forward_cuda(a->encoded, a->inputs, outer.wte, outer.wpe, B, T, C, st);
    } else {
        PX_CUDA_CHECK(cudaMemcpyAsync(a->encoded, x, BT * C * sizeof(float), cudaMemcpyDeviceToDevice, st));
    }
    for (int i = 0; i < sg->num_layers; i++)
        if (layer_forward<X>(self, a, d, i) != 0) return NAN;
    if (sg->first) { /* the backward's plan, on the host while the GPU runs the layers (tokens checked above) */
        a->plan_groups = encoder_backward_plan(a->host_plan, inputs, B, T, V);
        if (a->plan_groups < 0) {
            px_log_error("gpt_cuda_alloc_failed what=embedding_plan B=%d T=%d", B, T);
            return NAN;
        }
        PX_CUDA_CHECK(cudaMemcpyAsync(a->plan, a->host_plan, encoder_backward_plan_ints(B, T) * sizeof(int),
                                      cudaMemcpyHostToDevice, st));
    }
    X *lnf = (X *)a->lnf, *logits = (X *)a->logits;
    if (sg->last) {
        layernorm_forward_cuda(lnf, a->lnf_mean, a->lnf_rstd, stage_out(self, a), outer.lnfw, outer.lnfb, B, T, C,
                               st);
        matmul_forward_cuda(logits, lnf, classifier_weight(self, outer, (const X *)NULL), (const X *)NULL, B, T, C, Vp,
                            st);
    }
    if (outer_unit && unit_release(self, 0, PX_GPT_FWD) != 0) return NAN;
    a->have_fwd = 1;
    if (!sg->last) return 0.0f; /* the output stays queued: px_gpt_cuda_stage_output waits for it */
    if (!targets) {
        PX_CUDA_CHECK(cudaStreamSynchronize(st));
        return -1.0f;
    }
    PX_CUDA_CHECK(cudaMemcpyAsync(a->targets, targets, BT * sizeof(int), cudaMemcpyHostToDevice, st));
    if constexpr (is_bf16<X>()) { /* the backward's gradient now, for loss scale 1 (the backward scales it) */
        crossentropy_fused_cuda(a->losses, a->lse, logits, a->targets, 1.0f / (float)BT, B, T, V, Vp, st);
        a->have_dlogits = 1;
    } else {
        crossentropy_softmax_forward_cuda(a->losses, a->lse, logits, a->targets, B, T, V, Vp, st);
    }
    download(self, a->host_losses, a->losses, BT);
    double sum = 0.0;
    for (size_t i = 0; i < BT; i++) sum += a->host_losses[i];
    self->mean_loss = (float)(sum / (double)BT);
    a->have_loss = 1;
    return self->mean_loss;
}

static float any_stage_forward(px_gpt_cuda_t *self, acts_t *a, const int *inputs, const float *x, const int *targets,
                               int B, int T) {
    return self->bf16 ? stage_forward<__nv_bfloat16>(self, a, inputs, x, targets, B, T)
                      : stage_forward<float>(self, a, inputs, x, targets, B, T);
}

float px_gpt_cuda_forward(px_gpt_cuda_t *self, const int *inputs, const int *targets, int B, int T) {
    return any_stage_forward(self, &self->acts[0], inputs, NULL, targets, B, T);
}

/* ---------------------------------------------------------------- backward */

void px_gpt_cuda_zero_grad(px_gpt_cuda_t *self) {
    if (!self->buf[PX_GPT_CUDA_GRADS]) return; /* sharded: the source's owner zeroes its shards */
    PX_CUDA_CHECK(cudaMemsetAsync(self->buf[PX_GPT_CUDA_GRADS], 0,
                                  self->num_params * sizeof(float), self->stream));
}

/* A backward: whole, or the input-gradient half or the weight-gradient half
 * of a split one (zero-bubble pipelines), as the CPU model's (gpt.c). */
typedef enum { BWD_WHOLE, BWD_INPUT, BWD_WEIGHT } bwd_part_t;

/* The stage's i-th layer's backward; dres holds d(residual3) and leaves with
 * d(residual), the layer's input (and dres_x with it). With tensor
 * parallelism the input gradients of the two column-parallel matmuls are
 * partial sums over the tp ranks. The input half keeps the four matmuls'
 * output gradients for the weight half. */
template <typename X>
static int layer_backward(px_gpt_cuda_t *self, acts_t *a, dims_t d, int i, bwd_part_t part) {
    int B = a->B, T = a->T, C = d.C, unit = 1 + self->stage.first_layer + i;
    size_t BT = (size_t)B * (size_t)T;
    cudaStream_t st = self->stream;
    layer_acts_t<X> x = layer_acts<X>(a, d, i);
    X *dres_x = (X *)a->dres_x, *datt_x = (X *)a->datt_x, *d4a = (X *)a->d4a;
    const X *none = NULL;
    px_gpt_tensors_t p, g;
    layer_weights_t<X> wx = {};
    if (unit_acquire(self, unit, PX_GPT_BWD, &p, &g) != 0) return -1;
    /* recompute: the layer's activations again, from its input (both halves of a split backward need them),
     * unless still there (the stage's last layer, right after the forward) */
    int again = self->recompute && a->held != i;
    if (part != BWD_WEIGHT || again) layer_weights(self, d, p, &wx); /* the weight half reads no weights */
    if (again && layer_forward_with<X>(self, a, d, i, p, wx) != 0) return -1;
    if (part == BWD_WEIGHT) {
        float *nd = NULL; /* no input gradients: the input half made them */
        matmul_backward_cuda(nd, g.fcprojw, g.fcprojb, x.dfcproj, x.fch_gelu, none, B, T, d.H, C, st);
        matmul_backward_cuda(nd, g.fcw, g.fcb, x.dfc, x.ln2, none, B, T, C, d.H, st);
        matmul_backward_cuda(nd, g.attprojw, g.attprojb, x.dattproj, x.atty, none, B, T, d.Ca, C, st);
        matmul_backward_cuda(nd, g.qkvw, g.qkvb, x.dqkv, x.ln1, none, B, T, C, 3 * d.Ca, st);
        return unit_release(self, unit, PX_GPT_BWD);
    }
    int w = part == BWD_WHOLE; /* the matmuls' weight gradients now */
    size_t xs = sizeof(X);
    /* residual3 = residual2 + fcproj passes dres to both. */
    if (!w) PX_CUDA_CHECK(cudaMemcpyAsync(x.dfcproj, dres_x, BT * C * xs, cudaMemcpyDeviceToDevice, st));
    /* The input gradients below are written (=), not added: nothing to zero first. */
    if constexpr (is_bf16<X>()) { /* d4a: d(fch), by the GEMM's GELU-gradient epilogue */
        matmul_backward_dgelu_cuda(d4a, dres_x, x.fch, wx.fcprojw, B, T, d.H, C, st);
        if (w)
            matmul_backward_set_cuda((float *)NULL, g.fcprojw, g.fcprojb, dres_x, 1.0f, x.fch_gelu, wx.fcprojw, B, T,
                                     d.H, C, st);
    } else {
        matmul_backward_set_cuda(d4a, w ? g.fcprojw : NULL, w ? g.fcprojb : NULL, dres_x, 1.0f, x.fch_gelu,
                                 wx.fcprojw, B, T, d.H, C, st);
        gelu_backward_inplace_cuda(d4a, x.fch, BT * d.H, st); /* d4a: d(fch) */
    }
    if (!w) PX_CUDA_CHECK(cudaMemcpyAsync(x.dfc, d4a, BT * d.H * xs, cudaMemcpyDeviceToDevice, st));
    matmul_backward_set_cuda(a->dbtc, w ? g.fcw : NULL, w ? g.fcb : NULL, d4a, 1.0f, x.ln2, wx.fcw, B, T, C, d.H, st);
    if (tp_sum(self, a->dbtc, BT * C) != 0) return -1;
    layernorm_backward_cuda(a->dres, dres_x, g.ln2w, g.ln2b, a->dbtc, x.residual2, p.ln2w, x.ln2_mean, x.ln2_rstd,
                            B, T, C, st);
    /* dres now holds d(residual2); residual2 = residual + attproj. */
    if (!w) PX_CUDA_CHECK(cudaMemcpyAsync(x.dattproj, dres_x, BT * C * xs, cudaMemcpyDeviceToDevice, st));
    matmul_backward_set_cuda(datt_x, w ? g.attprojw : NULL, w ? g.attprojb : NULL, dres_x, 1.0f, x.atty, wx.attprojw,
                             B, T, d.Ca, C, st);
    X *dqkv = d4a;
    if (self->flash)
        flash_attention_backward_set_cuda(dqkv, datt_x, x.qkv, x.atty, (float *)x.att, B, T, d.Ca, d.NHa, st);
    else
        attention_backward_set_cuda(dqkv, datt_x, x.qkv, (X *)x.att, B, T, d.Ca, d.NHa, st);
    if (!w) PX_CUDA_CHECK(cudaMemcpyAsync(x.dqkv, dqkv, BT * 3 * d.Ca * xs, cudaMemcpyDeviceToDevice, st));
    matmul_backward_set_cuda(a->dbtc, w ? g.qkvw : NULL, w ? g.qkvb : NULL, dqkv, 1.0f, x.ln1, wx.qkvw, B, T, C,
                             3 * d.Ca, st);
    if (tp_sum(self, a->dbtc, BT * C) != 0) return -1;
    layernorm_backward_cuda(a->dres, dres_x, g.ln1w, g.ln1b, a->dbtc, x.residual, p.ln1w, x.ln1_mean, x.ln1_rstd,
                            B, T, C, st);
    return unit_release(self, unit, PX_GPT_BWD);
}

template <typename X>
static int stage_backward(px_gpt_cuda_t *self, acts_t *a, const float *dout, float loss_scale, bwd_part_t part) {
    const px_gpt_stage_t *sg = &self->stage;
    int ready = part == BWD_WEIGHT ? a->have_bi : sg->last ? a->have_loss : a->have_fwd && dout;
    if (!ready) {
        px_log_error("gpt_cuda_backward_without_%s hint=\"%s\"", part == BWD_WEIGHT ? "input_half" : "forward",
                     part == BWD_WEIGHT ? "run the input half of the backward first"
                     : sg->last         ? "call px_gpt_cuda_forward with targets first"
                                        : "run the stage's forward first and pass the output gradient");
        return -1;
    }
    if (part != BWD_WHOLE && !self->split) {
        px_log_error("gpt_cuda_split_backward_not_set hint=\"px_gpt_cuda_set_stage with split 1\"");
        return -1;
    }
    a->have_loss = a->have_fwd = 0; /* the logits are overwritten below */
    a->have_bi = part == BWD_INPUT;
    const px_gpt_config_t *cfg = &self->config;
    dims_t d = local_dims(cfg, self->tp);
    int B = a->B, T = a->T, C = d.C, V = cfg->vocab_size, Vp = cfg->padded_vocab_size;
    size_t BT = (size_t)B * (size_t)T;
    cudaStream_t st = self->stream;
    int outer_unit = sg->first || sg->last;
    px_gpt_tensors_t p, g;
    if (outer_unit && unit_acquire(self, 0, PX_GPT_BWD, &p, &g) != 0) return -1;
    X *dlogits = (X *)a->logits, *lnf = (X *)a->lnf; /* dlogits in place */
    if (sg->last && part == BWD_WEIGHT) {
        matmul_backward_set_cuda((float *)NULL, g.wte, NULL, dlogits, a->dlogits_scale, lnf, (const X *)NULL, B, T, C,
                                 Vp, st);
    } else if (sg->last) {
        if constexpr (is_bf16<X>()) { /* the fused classifier's, for loss scale 1 */
            a->dlogits_scale = loss_scale;
        } else {
            crossentropy_softmax_backward_cuda(dlogits, dlogits, a->lse, a->targets, loss_scale / (float)BT, B, T, V,
                                               Vp, st);
            a->dlogits_scale = 1.0f;
        }
        matmul_backward_set_cuda(a->dbtc, part == BWD_WHOLE ? g.wte : NULL, NULL, dlogits, a->dlogits_scale, lnf,
                                 classifier_weight(self, p, (const X *)NULL), B, T, C, Vp, st);
        PX_CUDA_CHECK(cudaMemsetAsync(a->dres, 0, BT * C * sizeof(float), st));
        layernorm_backward_cuda(a->dres, (X *)a->dres_x, g.lnfw, g.lnfb, a->dbtc, stage_out(self, a), p.lnfw,
                                a->lnf_mean, a->lnf_rstd, B, T, C, st);
    } else if (part != BWD_WEIGHT) {
        PX_CUDA_CHECK(cudaMemcpyAsync(a->dres, dout, BT * C * sizeof(float), cudaMemcpyDeviceToDevice, st));
        mirror((X *)a->dres_x, a->dres, BT * C, st);
    }
    for (int i = sg->num_layers - 1; i >= 0; i--)
        if (layer_backward<X>(self, a, d, i, part) != 0) return -1;
    if (sg->first && part != BWD_WEIGHT)
        encoder_backward_cuda(g.wte, g.wpe, a->dres, a->inputs, a->plan, a->plan_groups, B, T, C, st);
    return outer_unit ? unit_release(self, 0, PX_GPT_BWD) : 0;
}

static int any_stage_backward(px_gpt_cuda_t *self, acts_t *a, const float *dout, float loss_scale, bwd_part_t part) {
    return self->bf16 ? stage_backward<__nv_bfloat16>(self, a, dout, loss_scale, part)
                      : stage_backward<float>(self, a, dout, loss_scale, part);
}

int px_gpt_cuda_backward(px_gpt_cuda_t *self, float loss_scale) {
    return any_stage_backward(self, &self->acts[0], NULL, loss_scale, BWD_WHOLE);
}

/* ------------------------------------------------------------ pipeline stages */

int px_gpt_cuda_set_stage(px_gpt_cuda_t *self, const px_gpt_stage_t *sg, int slots, int split) {
    int L = self->config.num_layers;
    if (slots < 1 || sg->num_layers < 1 || sg->first_layer < 0 || sg->first_layer + sg->num_layers > L ||
        sg->first != (sg->first_layer == 0) || sg->last != (sg->first_layer + sg->num_layers == L)) {
        px_log_error("gpt_cuda_bad_stage first_layer=%d num_layers=%d first=%d last=%d slots=%d layers=%d",
                     sg->first_layer, sg->num_layers, sg->first, sg->last, slots, L);
        return -1;
    }
    if (split != 0 && split != 1) {
        px_log_error("gpt_cuda_bad_split split=%d", split);
        return -1;
    }
    self->stage = *sg;
    self->split = split;
    if (new_slots(self, slots) != 0) {
        px_log_error("gpt_cuda_alloc_failed what=activation_slots slots=%d", slots);
        return -1;
    }
    return 0;
}

int px_gpt_cuda_set_recompute(px_gpt_cuda_t *self, int on) {
    if (on != 0 && on != 1) {
        px_log_error("gpt_cuda_bad_recompute on=%d hint=\"0 (off) or 1 (block)\"", on);
        return -1;
    }
    if (new_slots(self, self->nslots) != 0) { /* the activations held are laid out for the old setting */
        px_log_error("gpt_cuda_alloc_failed what=activation_slots slots=%d", self->nslots);
        return -1;
    }
    self->recompute = on;
    return 0;
}

static acts_t *slot_acts(px_gpt_cuda_t *self, int slot) {
    if (slot >= 0 && slot < self->nslots) return &self->acts[slot];
    px_log_error("gpt_cuda_bad_slot slot=%d slots=%d", slot, self->nslots);
    return NULL;
}

float px_gpt_cuda_stage_forward(px_gpt_cuda_t *self, int slot, const int *inputs, const float *x, const int *targets,
                                int B, int T) {
    acts_t *a = slot_acts(self, slot);
    return a ? any_stage_forward(self, a, inputs, x, targets, B, T) : NAN;
}

const float *px_gpt_cuda_stage_output(px_gpt_cuda_t *self, int slot) {
    PX_CUDA_CHECK(cudaStreamSynchronize(self->stream));
    return stage_out(self, &self->acts[slot]);
}

int px_gpt_cuda_stage_batch(const px_gpt_cuda_t *self, int slot) { return self->acts[slot].B; }

int px_gpt_cuda_stage_backward(px_gpt_cuda_t *self, int slot, const float *dout, float loss_scale, int weights) {
    acts_t *a = slot_acts(self, slot);
    return a ? any_stage_backward(self, a, dout, loss_scale, weights ? BWD_WHOLE : BWD_INPUT) : -1;
}

int px_gpt_cuda_stage_backward_weights(px_gpt_cuda_t *self, int slot) {
    acts_t *a = slot_acts(self, slot);
    return a ? any_stage_backward(self, a, NULL, 1.0f, BWD_WEIGHT) : -1;
}

const float *px_gpt_cuda_stage_input_grad(px_gpt_cuda_t *self, int slot) {
    PX_CUDA_CHECK(cudaStreamSynchronize(self->stream));
    return self->acts[slot].dres;
}

/* --------------------------------------------------------------- optimizer */

float px_gpt_cuda_grad_norm(px_gpt_cuda_t *self) {
    if (!self->buf[PX_GPT_CUDA_GRADS]) return 0.0f; /* sharded: the source's owner has the gradients */
    return (float)sqrt(
        norm_squared_cuda(self->buf[PX_GPT_CUDA_GRADS], self->num_params, self->stream));
}

float px_gpt_cuda_clip_grads(px_gpt_cuda_t *self, float max_norm) {
    float norm = px_gpt_cuda_grad_norm(self);
    if (max_norm > 0.0f) {
        float coef = max_norm / (norm + 1e-6f);
        if (coef < 1.0f)
            scale_inplace_cuda(self->buf[PX_GPT_CUDA_GRADS], self->num_params, coef, self->stream);
    }
    return norm;
}

void px_gpt_cuda_adamw_step(px_gpt_cuda_t *self, float lr, float beta1, float beta2, float eps,
                            float weight_decay, int t) {
    if (!self->buf[PX_GPT_CUDA_PARAMS]) return; /* sharded: the source's owner steps its shards */
    int decay[PX_GPT_NUM_TENSORS];
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) decay[i] = px_gpt_tensor_is_matrix(i);
    adamw_update_tensors_cuda(self->buf[PX_GPT_CUDA_PARAMS], self->buf[PX_GPT_CUDA_M], self->buf[PX_GPT_CUDA_V],
                              self->buf[PX_GPT_CUDA_GRADS], self->sizes, decay, PX_GPT_NUM_TENSORS, lr, beta1, beta2,
                              eps, weight_decay, t, self->stream);
}
