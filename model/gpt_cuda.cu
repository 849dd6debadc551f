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
 * Host/device traffic per step: the token ids in, the per-position losses out
 * (B*T floats, summed on the host in double in order, as the CPU does), and
 * one double for the gradient norm.
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

/* Activations and scratch on the device, laid out for (B,T). */
typedef struct {
    int B, T;
    size_t capacity;     /* floats in mem */
    size_t tok_capacity; /* ints in each of inputs and targets */
    float *mem;
    int *tokens;         /* inputs then targets, 2 * tok_capacity */
    int *inputs;         /* (B,T) */
    int *targets;        /* (B,T) */
    int have_loss;
    float *encoded;   /* (B,T,C) */
    float *ln1;       /* (L,B,T,C) */
    float *ln1_mean;  /* (L,B,T) */
    float *ln1_rstd;  /* (L,B,T) */
    float *qkv;       /* (L,B,T,3C) */
    float *atty;      /* (L,B,T,C) */
    float *att;       /* (L,B,NH,T,T) */
    float *residual2; /* (L,B,T,C) */
    float *ln2;       /* (L,B,T,C) */
    float *ln2_mean;  /* (L,B,T) */
    float *ln2_rstd;  /* (L,B,T) */
    float *fch;       /* (L,B,T,4C) */
    float *fch_gelu;  /* (L,B,T,4C) */
    float *residual3; /* (L,B,T,C) */
    float *lnf;       /* (B,T,C) */
    float *lnf_mean;  /* (B,T) */
    float *lnf_rstd;  /* (B,T) */
    float *logits;    /* (B,T,Vp); dlogits in place after backward */
    float *losses;    /* (B,T) */
    float *lse;       /* (B,T) */
    float *proj;      /* (B,T,C) attproj / fcproj output before the residual add */
    float *dres;      /* (B,T,C) gradient of the residual stream */
    float *dbtc;      /* (B,T,C) scratch gradient */
    float *d4a;       /* (B,T,4C) scratch gradient (also dqkv, 3C <= 4C) */
    float *d4b;       /* (B,T,4C) scratch gradient */
} acts_t;

struct px_gpt_cuda {
    px_gpt_config_t config;
    size_t num_params;
    size_t sizes[PX_GPT_NUM_TENSORS];
    size_t offsets[PX_GPT_NUM_TENSORS];
    float *buf[4]; /* params, grads, m, v: indexed by px_gpt_cuda_buf_t */
    px_gpt_tensors_t p, g; /* named views, here of device memory */
    acts_t a;
    float *host_losses; /* (tok_capacity) */
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

/* Lays the activation views out for (B,T) from mem (or only counts floats
 * when mem is NULL). Returns the float count. */
static size_t layout_acts(acts_t *a, const px_gpt_config_t *cfg, int B, int T, float *mem) {
    size_t L = (size_t)cfg->num_layers, C = (size_t)cfg->channels, NH = (size_t)cfg->num_heads;
    size_t BT = (size_t)B * (size_t)T, Vp = (size_t)cfg->padded_vocab_size;
    struct {
        float **p;
        size_t n;
    } t[] = {
        {&a->encoded, BT * C},          {&a->ln1, L * BT * C},        {&a->ln1_mean, L * BT},
        {&a->ln1_rstd, L * BT},         {&a->qkv, L * BT * 3 * C},    {&a->atty, L * BT * C},
        {&a->att, L * B * NH * (size_t)T * T}, {&a->residual2, L * BT * C}, {&a->ln2, L * BT * C},
        {&a->ln2_mean, L * BT},         {&a->ln2_rstd, L * BT},       {&a->fch, L * BT * 4 * C},
        {&a->fch_gelu, L * BT * 4 * C}, {&a->residual3, L * BT * C}, {&a->lnf, BT * C},
        {&a->lnf_mean, BT},             {&a->lnf_rstd, BT},           {&a->logits, BT * Vp},
        {&a->losses, BT},               {&a->lse, BT},                {&a->proj, BT * C},
        {&a->dres, BT * C},             {&a->dbtc, BT * C},           {&a->d4a, BT * 4 * C},
        {&a->d4b, BT * 4 * C},
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (mem) *t[i].p = mem + total;
        total += (t[i].n + 15) & ~(size_t)15; /* 64-byte aligned views */
    }
    return total;
}

static int ensure_acts(px_gpt_cuda_t *self, int B, int T) {
    acts_t *a = &self->a;
    if (a->B == B && a->T == T) return 0;
    size_t need = layout_acts(a, &self->config, B, T, NULL);
    size_t ntok = (size_t)B * (size_t)T;
    if (need > a->capacity || ntok > a->tok_capacity) {
        PX_CUDA_CHECK(cudaStreamSynchronize(self->stream)); /* nothing queued still reads them */
        if (a->mem) PX_CUDA_CHECK(cudaFree(a->mem));
        if (a->tokens) PX_CUDA_CHECK(cudaFree(a->tokens));
        free(self->host_losses);
        a->mem = NULL;
        a->tokens = NULL;
        self->host_losses = NULL;
        a->capacity = a->tok_capacity = 0;
        a->B = a->T = 0;
        cudaError_t e1 = cudaMalloc(&a->mem, need * sizeof(float));
        cudaError_t e2 = cudaMalloc(&a->tokens, 2 * ntok * sizeof(int));
        self->host_losses = (float *)malloc(ntok * sizeof(float));
        if (e1 != cudaSuccess || e2 != cudaSuccess || !self->host_losses) {
            cudaGetLastError();
            if (e1 == cudaSuccess) cudaFree(a->mem);
            if (e2 == cudaSuccess) cudaFree(a->tokens);
            free(self->host_losses);
            a->mem = NULL;
            a->tokens = NULL;
            self->host_losses = NULL;
            px_log_error("gpt_cuda_alloc_failed what=activations floats=%zu B=%d T=%d error=\"%s\" "
                         "hint=\"lower B or T\"",
                         need, B, T, cudaGetErrorString(e1 != cudaSuccess ? e1 : e2));
            return -1;
        }
        a->capacity = need;
        a->tok_capacity = ntok;
    }
    layout_acts(a, &self->config, B, T, a->mem);
    a->inputs = a->tokens;
    a->targets = a->tokens + ntok;
    a->B = B;
    a->T = T;
    a->have_loss = 0;
    return 0;
}

/* ------------------------------------------------------------ construction */

px_gpt_cuda_t *px_gpt_cuda_new(const px_gpt_config_t *cfg) {
    char why[256];
    if (px_gpt_config_check(cfg, why, sizeof why) != 0) {
        px_log_error("gpt_cuda_bad_config problem=\"%s\"", why);
        return NULL;
    }
    if (px_cuda_device_count(why, sizeof why) < 1) {
        px_log_error("gpt_cuda_no_device reason=\"%s\"", why);
        return NULL;
    }
    px_gpt_cuda_t *self = (px_gpt_cuda_t *)calloc(1, sizeof *self);
    if (!self) return NULL;
    self->config = *cfg;
    self->num_params = px_gpt_tensor_sizes(cfg, self->sizes);
    size_t off = 0;
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) {
        self->offsets[i] = off;
        off += self->sizes[i];
    }
    self->mean_loss = -1.0f;
    px_cuda_ops_init();
    PX_CUDA_CHECK(cudaStreamCreateWithFlags(&self->stream, cudaStreamNonBlocking));
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
    if (self->a.mem) PX_CUDA_CHECK(cudaFree(self->a.mem));
    if (self->a.tokens) PX_CUDA_CHECK(cudaFree(self->a.tokens));
    if (self->stream) PX_CUDA_CHECK(cudaStreamDestroy(self->stream));
    free(self->host_losses);
    free(self);
    *pself = NULL;
}

const px_gpt_config_t *px_gpt_cuda_config(const px_gpt_cuda_t *self) { return &self->config; }
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
    const acts_t *a = &self->a;
    if (!a->mem) {
        px_log_error("gpt_cuda_no_forward what=logits hint=\"call px_gpt_cuda_forward first\"");
        return -1;
    }
    size_t want = (size_t)a->B * a->T * (size_t)self->config.padded_vocab_size;
    if (check_count("logits", n, want)) return -1;
    return download(self, host, a->logits, n);
}

int px_gpt_cuda_download_losses(px_gpt_cuda_t *self, float *host, size_t n) {
    const acts_t *a = &self->a;
    if (!a->mem) {
        px_log_error("gpt_cuda_no_forward what=losses hint=\"call px_gpt_cuda_forward first\"");
        return -1;
    }
    if (check_count("losses", n, (size_t)a->B * a->T)) return -1;
    return download(self, host, a->losses, n);
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

float px_gpt_cuda_forward(px_gpt_cuda_t *self, const int *inputs, const int *targets, int B,
                          int T) {
    const px_gpt_config_t *cfg = &self->config;
    int C = cfg->channels, L = cfg->num_layers, NH = cfg->num_heads;
    int V = cfg->vocab_size, Vp = cfg->padded_vocab_size;
    cudaStream_t st = self->stream;
    self->mean_loss = -1.0f;
    if (B < 1 || T < 1 || T > cfg->max_seq_len) {
        px_log_error("gpt_cuda_bad_shape B=%d T=%d max_seq_len=%d", B, T, cfg->max_seq_len);
        return NAN;
    }
    size_t BT = (size_t)B * (size_t)T;
    if (check_tokens(inputs, BT, V, "inputs") != 0) return NAN;
    if (targets && check_tokens(targets, BT, V, "targets") != 0) return NAN;
    if (ensure_acts(self, B, T) != 0) return NAN;
    acts_t *a = &self->a;
    const px_gpt_tensors_t *p = &self->p;
    a->have_loss = 0;
    PX_CUDA_CHECK(
        cudaMemcpyAsync(a->inputs, inputs, BT * sizeof(int), cudaMemcpyHostToDevice, st));

    encoder_forward_cuda(a->encoded, a->inputs, p->wte, p->wpe, B, T, C, st);
    const float *residual = a->encoded;
    for (int l = 0; l < L; l++) {
        size_t lc = (size_t)l * C;
        float *ln1 = a->ln1 + l * BT * C, *ln1_mean = a->ln1_mean + l * BT;
        float *ln1_rstd = a->ln1_rstd + l * BT, *qkv = a->qkv + l * BT * 3 * C;
        float *atty = a->atty + l * BT * C, *att = a->att + (size_t)l * B * NH * T * T;
        float *residual2 = a->residual2 + l * BT * C, *ln2 = a->ln2 + l * BT * C;
        float *ln2_mean = a->ln2_mean + l * BT, *ln2_rstd = a->ln2_rstd + l * BT;
        float *fch = a->fch + l * BT * 4 * C, *fch_gelu = a->fch_gelu + l * BT * 4 * C;
        float *residual3 = a->residual3 + l * BT * C;

        layernorm_forward_cuda(ln1, ln1_mean, ln1_rstd, residual, p->ln1w + lc, p->ln1b + lc, B,
                               T, C, st);
        matmul_forward_cuda(qkv, ln1, p->qkvw + lc * 3 * C, p->qkvb + lc * 3, B, T, C, 3 * C, st);
        attention_forward_cuda(atty, att, qkv, B, T, C, NH, st);
        matmul_forward_cuda(a->proj, atty, p->attprojw + lc * C, p->attprojb + lc, B, T, C, C,
                            st);
        residual_forward_cuda(residual2, residual, a->proj, BT * C, st);
        layernorm_forward_cuda(ln2, ln2_mean, ln2_rstd, residual2, p->ln2w + lc, p->ln2b + lc, B,
                               T, C, st);
        matmul_forward_cuda(fch, ln2, p->fcw + lc * 4 * C, p->fcb + lc * 4, B, T, C, 4 * C, st);
        gelu_forward_cuda(fch_gelu, fch, BT * 4 * C, st);
        matmul_forward_cuda(a->proj, fch_gelu, p->fcprojw + lc * 4 * C, p->fcprojb + lc, B, T,
                            4 * C, C, st);
        residual_forward_cuda(residual3, residual2, a->proj, BT * C, st);
        residual = residual3;
    }
    layernorm_forward_cuda(a->lnf, a->lnf_mean, a->lnf_rstd, residual, p->lnfw, p->lnfb, B, T, C,
                           st);
    matmul_forward_cuda(a->logits, a->lnf, p->wte, NULL, B, T, C, Vp, st);
    if (!targets) {
        PX_CUDA_CHECK(cudaStreamSynchronize(st));
        return -1.0f;
    }

    PX_CUDA_CHECK(
        cudaMemcpyAsync(a->targets, targets, BT * sizeof(int), cudaMemcpyHostToDevice, st));
    crossentropy_softmax_forward_cuda(a->losses, a->lse, a->logits, a->targets, B, T, V, Vp, st);
    download(self, self->host_losses, a->losses, BT);
    double sum = 0.0;
    for (size_t i = 0; i < BT; i++) sum += self->host_losses[i];
    self->mean_loss = (float)(sum / (double)BT);
    a->have_loss = 1;
    return self->mean_loss;
}

/* ---------------------------------------------------------------- backward */

void px_gpt_cuda_zero_grad(px_gpt_cuda_t *self) {
    PX_CUDA_CHECK(cudaMemsetAsync(self->buf[PX_GPT_CUDA_GRADS], 0,
                                  self->num_params * sizeof(float), self->stream));
}

int px_gpt_cuda_backward(px_gpt_cuda_t *self, float loss_scale) {
    acts_t *a = &self->a;
    if (!a->have_loss) {
        px_log_error("gpt_cuda_backward_without_loss hint=\"call px_gpt_cuda_forward with "
                     "targets first\"");
        return -1;
    }
    a->have_loss = 0; /* the logits are overwritten below */
    const px_gpt_config_t *cfg = &self->config;
    int B = a->B, T = a->T, C = cfg->channels, L = cfg->num_layers, NH = cfg->num_heads;
    int V = cfg->vocab_size, Vp = cfg->padded_vocab_size;
    size_t BT = (size_t)B * (size_t)T;
    const px_gpt_tensors_t *p = &self->p;
    const px_gpt_tensors_t *g = &self->g;
    cudaStream_t st = self->stream;

    float dloss = loss_scale / (float)BT;
    float *dlogits = a->logits; /* in place */
    crossentropy_softmax_backward_cuda(dlogits, a->logits, a->lse, a->targets, dloss, B, T, V, Vp,
                                       st);
    PX_CUDA_CHECK(cudaMemsetAsync(a->dbtc, 0, BT * C * sizeof(float), st));
    matmul_backward_cuda(a->dbtc, g->wte, NULL, dlogits, a->lnf, p->wte, B, T, C, Vp, st);
    PX_CUDA_CHECK(cudaMemsetAsync(a->dres, 0, BT * C * sizeof(float), st));
    const float *last = a->residual3 + (size_t)(L - 1) * BT * C;
    layernorm_backward_cuda(a->dres, g->lnfw, g->lnfb, a->dbtc, last, p->lnfw, a->lnf_mean,
                            a->lnf_rstd, B, T, C, st);

    for (int l = L - 1; l >= 0; l--) {
        size_t lc = (size_t)l * C;
        const float *residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * BT * C;
        float *ln1 = a->ln1 + l * BT * C, *ln1_mean = a->ln1_mean + l * BT;
        float *ln1_rstd = a->ln1_rstd + l * BT, *qkv = a->qkv + l * BT * 3 * C;
        float *atty = a->atty + l * BT * C, *att = a->att + (size_t)l * B * NH * T * T;
        float *residual2 = a->residual2 + l * BT * C, *ln2 = a->ln2 + l * BT * C;
        float *ln2_mean = a->ln2_mean + l * BT, *ln2_rstd = a->ln2_rstd + l * BT;
        float *fch = a->fch + l * BT * 4 * C, *fch_gelu = a->fch_gelu + l * BT * 4 * C;

        /* dres holds d(residual3); residual3 = residual2 + fcproj passes it to both. */
        PX_CUDA_CHECK(cudaMemsetAsync(a->d4a, 0, BT * 4 * C * sizeof(float), st));
        matmul_backward_cuda(a->d4a, g->fcprojw + lc * 4 * C, g->fcprojb + lc, a->dres, fch_gelu,
                             p->fcprojw + lc * 4 * C, B, T, 4 * C, C, st);
        PX_CUDA_CHECK(cudaMemsetAsync(a->d4b, 0, BT * 4 * C * sizeof(float), st));
        gelu_backward_cuda(a->d4b, fch, a->d4a, BT * 4 * C, st);
        PX_CUDA_CHECK(cudaMemsetAsync(a->dbtc, 0, BT * C * sizeof(float), st));
        matmul_backward_cuda(a->dbtc, g->fcw + lc * 4 * C, g->fcb + lc * 4, a->d4b, ln2,
                             p->fcw + lc * 4 * C, B, T, C, 4 * C, st);
        layernorm_backward_cuda(a->dres, g->ln2w + lc, g->ln2b + lc, a->dbtc, residual2,
                                p->ln2w + lc, ln2_mean, ln2_rstd, B, T, C, st);
        /* dres now holds d(residual2); residual2 = residual + attproj. */
        PX_CUDA_CHECK(cudaMemsetAsync(a->dbtc, 0, BT * C * sizeof(float), st));
        matmul_backward_cuda(a->dbtc, g->attprojw + lc * C, g->attprojb + lc, a->dres, atty,
                             p->attprojw + lc * C, B, T, C, C, st);
        float *dqkv = a->d4a;
        PX_CUDA_CHECK(cudaMemsetAsync(dqkv, 0, BT * 3 * C * sizeof(float), st));
        attention_backward_cuda(dqkv, a->dbtc, qkv, att, B, T, C, NH, st);
        PX_CUDA_CHECK(cudaMemsetAsync(a->dbtc, 0, BT * C * sizeof(float), st));
        matmul_backward_cuda(a->dbtc, g->qkvw + lc * 3 * C, g->qkvb + lc * 3, dqkv, ln1,
                             p->qkvw + lc * 3 * C, B, T, C, 3 * C, st);
        layernorm_backward_cuda(a->dres, g->ln1w + lc, g->ln1b + lc, a->dbtc, residual,
                                p->ln1w + lc, ln1_mean, ln1_rstd, B, T, C, st);
        /* dres now holds d(residual), the input of layer l. */
    }
    encoder_backward_cuda(g->wte, g->wpe, a->dres, a->inputs, B, T, C, st);
    return 0;
}

/* --------------------------------------------------------------- optimizer */

float px_gpt_cuda_grad_norm(px_gpt_cuda_t *self) {
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
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) {
        size_t off = self->offsets[i];
        float wd = px_gpt_tensor_is_matrix(i) ? weight_decay : 0.0f;
        adamw_update_cuda(self->buf[PX_GPT_CUDA_PARAMS] + off, self->buf[PX_GPT_CUDA_M] + off,
                          self->buf[PX_GPT_CUDA_V] + off, self->buf[PX_GPT_CUDA_GRADS] + off,
                          self->sizes[i], lr, beta1, beta2, eps, wd, t, self->stream);
    }
}
