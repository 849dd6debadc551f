/* The GPU half of px_compute_t (compute_gpu.h): the CUDA model
 * (model/gpt_cuda.h) on GPU rank % cudaGetDeviceCount. Several ranks may
 * share a GPU; NCCL, though, refuses two ranks of one communicator on one GPU
 * of one host (docs/cuda.md says how to place them).
 *
 * The host mirror of the state (params, m, v) is pinned (page-locked) when
 * the driver allows, so that downloads run at the link's rate, and a
 * download runs on a stream of its own: queued behind the optimizer step it
 * follows, overlapping the next step's forward and backward (which only read
 * those buffers); the next optimizer step waits for it on the device.
 *
 * A sharded group's rank (px_compute_gpu_new_shard) computes with the
 * shard's parameter source (parallel/sharded.h): the CUDA model in sharded
 * mode, the shard's buffers and gathered units in GPU memory through the
 * memory operations below, its fsdp and tp collectives on NCCL. The shard's
 * host buffers are the mirror.
 *
 * A CUDA failure here logs file:line and exits the process with status 1,
 * as the model's own calls do: a GPU fault is not recoverable inside a rank;
 * the group is dropped, the rank restarted, and it heals. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "compute_gpu.h"
#include "gpt_cuda.h"
#include "ops_cuda.h"
#include "px_log.h"

enum { NSTATE = 3 }; /* params, m, v */

struct px_compute_gpu {
    px_gpt_cuda_t *m;
    px_shard_t *shard; /* a sharded group's rank, or NULL: a whole replica */
    int device;
    size_t n;                  /* floats in each state buffer */
    float *host[NSTATE];       /* the mirror: params, m, v */
    float *dev[NSTATE];        /* the device's */
    float *grads;              /* device: n + PX_GPT_GRADS_SPARE */
    cudaStream_t copy;         /* downloads */
    cudaStream_t aux;          /* a shard's accumulations, from its communication thread */
    cudaEvent_t ready, landed; /* the model's work a download follows; the download done */
    void *pinned[NSTATE];      /* host buffers registered with cudaHostRegister (NULL: not) */
};

#define CK(call)                                                                                               \
    do {                                                                                                       \
        cudaError_t e_ = (call);                                                                               \
        if (e_ != cudaSuccess) {                                                                               \
            px_log_error("cuda_failed at=%s:%d call=\"%s\" error=\"%s\": the rank exits (it is restarted and " \
                         "healed)", __FILE__, __LINE__, #call, cudaGetErrorString(e_));                        \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

void px_compute_gpu_set_math(px_precision_t precision, int tf32, int unfused_attention) {
    px_cuda_ops_set_math(precision == PX_PRECISION_BF16 ? PX_CUDA_MATH_BF16
                         : tf32                         ? PX_CUDA_MATH_TF32
                                                        : PX_CUDA_MATH_FP32);
    px_cuda_ops_set_fused_attention(!unfused_attention);
}

int px_compute_gpu_usable(char *why, size_t len) { return px_cuda_available(why, len); }

void px_compute_gpu_warm(int rank) {
    char why[512] = "";
    int count = px_cuda_device_count(why, sizeof why);
    int ms = count > 0 ? px_comm_nccl_warm(rank % count, why, sizeof why) : -1;
    if (ms < 0) px_log_warn("nccl_warm_failed reason=\"%s\"", why);
    else px_log_info("nccl_warm device=%d ms=%d", rank % count, ms);
}

/* A compute on GPU rank % devices, that device current; no model yet. */
static px_compute_gpu_t *start(int rank, char *err, size_t errlen) {
    char why[512] = "";
    int count = px_cuda_device_count(why, sizeof why);
    if (count < 1) {
        snprintf(err, errlen, "%s", why);
        return NULL;
    }
    px_compute_gpu_t *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    g->device = rank % count;
    cudaError_t e = cudaSetDevice(g->device);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "cudaSetDevice(%d) failed: %s", g->device, cudaGetErrorString(e));
        free(g);
        return NULL;
    }
    return g;
}

/* Says how the model on the GPU stores its activations (bf16 with
 * --precision bf16) and runs attention. */
static void log_model(const px_compute_gpu_t *g) {
    px_log_info("gpu_model device=%d activations=%s attention=%s", g->device,
                px_gpt_cuda_bf16_activations(g->m) ? "bf16" : "fp32",
                px_gpt_cuda_fused_attention(g->m) ? "fused" : "unfused");
}

/* The streams, the events, the pinned mirror, and the state uploaded. */
static void finish_start(px_compute_gpu_t *g) {
    CK(cudaStreamCreateWithFlags(&g->copy, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&g->aux, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&g->ready, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&g->landed, cudaEventDisableTiming));
    for (int i = 0; i < NSTATE; i++) {
        cudaError_t e = cudaHostRegister(g->host[i], g->n * sizeof(float), cudaHostRegisterDefault);
        if (e == cudaSuccess) {
            g->pinned[i] = g->host[i];
        } else { /* correct either way; pageable copies are slower and hold the host */
            px_log_warn("host_pin_failed bytes=%zu error=\"%s\": state downloads go through pageable memory",
                        g->n * sizeof(float), cudaGetErrorString(e));
            (void)cudaGetLastError();
        }
    }
    px_compute_gpu_upload(g);
}

px_compute_gpu_t *px_compute_gpu_new(px_gpt_t *host, int rank, char *err, size_t errlen) {
    px_compute_gpu_t *g = start(rank, err, errlen);
    if (!g) return NULL;
    if (!(g->m = px_gpt_cuda_new(&host->config)) || px_gpt_cuda_set_recompute(g->m, host->recompute) != 0) {
        snprintf(err, errlen, "cannot create the model on GPU %d (the log says why)", g->device);
        px_gpt_cuda_destroy(&g->m);
        free(g);
        return NULL;
    }
    g->n = host->num_params;
    float *h[NSTATE] = {host->params, host->m, host->v};
    const px_gpt_cuda_buf_t bufs[NSTATE] = {PX_GPT_CUDA_PARAMS, PX_GPT_CUDA_M, PX_GPT_CUDA_V};
    for (int i = 0; i < NSTATE; i++) g->host[i] = h[i], g->dev[i] = px_gpt_cuda_buffer(g->m, bufs[i]);
    g->grads = px_gpt_cuda_buffer(g->m, PX_GPT_CUDA_GRADS);
    log_model(g);
    finish_start(g);
    return g;
}

/* ---- a shard's memory on the GPU (sharded.h's px_shard_memory_t) ---- */

static cudaStream_t model_stream(const px_compute_gpu_t *g) { return px_gpt_cuda_stream(g->m); }

static float *mem_alloc(void *ctx, size_t n) {
    px_compute_gpu_t *g = ctx;
    size_t bytes = (n ? n : 1) * sizeof(float);
    float *p = NULL;
    CK(cudaSetDevice(g->device));
    if (cudaMalloc((void **)&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    CK(cudaMemset(p, 0, bytes));
    return p;
}

static void mem_release(void *ctx, float *p) {
    (void)ctx; /* may run after px_compute_gpu_destroy (see there) */
    CK(cudaFree(p));
}

static void mem_fence(void *ctx) { CK(cudaStreamSynchronize(model_stream(ctx))); }

static void mem_copy(void *ctx, float *dst, const float *src, size_t n) {
    mem_fence(ctx);
    CK(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyDefault));
}

static void mem_zero(void *ctx, float *p, size_t n) {
    CK(cudaMemsetAsync(p, 0, n * sizeof(float), model_stream(ctx)));
}

/* On the communication thread: its own stream, done on return. */
static void mem_accumulate(void *ctx, float *dst, const float *src, size_t n) {
    px_compute_gpu_t *g = ctx;
    CK(cudaSetDevice(g->device));
    residual_forward_cuda(dst, dst, src, n, g->aux);
    CK(cudaStreamSynchronize(g->aux));
}

static double mem_sumsq(void *ctx, const float *x, size_t n) { return norm_squared_cuda(x, n, model_stream(ctx)); }

static void mem_scale(void *ctx, float *x, size_t n, float coef) { scale_inplace_cuda(x, n, coef, model_stream(ctx)); }

static void mem_adamw(void *ctx, float *p, float *m, float *v, const float *gr, size_t n, float lr, float beta1,
                      float beta2, float eps, float weight_decay, int t) {
    adamw_update_cuda(p, m, v, gr, n, lr, beta1, beta2, eps, weight_decay, t, model_stream(ctx));
}

px_compute_gpu_t *px_compute_gpu_new_shard(px_shard_t *shard, int rank, char *err, size_t errlen) {
    px_compute_gpu_t *g = start(rank, err, errlen);
    if (!g) return NULL;
    g->shard = shard;
    const px_gpt_t *cpu = px_shard_model(shard); /* its config and tensor-parallel coordinate */
    if (!(g->m = px_gpt_cuda_new_sharded(&cpu->config, cpu->tp, px_shard_source(shard))) ||
        px_gpt_cuda_set_recompute(g->m, cpu->recompute) != 0) {
        snprintf(err, errlen, "cannot create the sharded model on GPU %d (the log says why)", g->device);
        px_gpt_cuda_destroy(&g->m);
        free(g);
        return NULL;
    }
    log_model(g);
    px_shard_memory_t mem = {g,        mem_alloc,      mem_release, mem_copy,  mem_zero,
                             mem_fence, mem_accumulate, mem_sumsq,   mem_scale, mem_adamw};
    char why[256];
    if (px_shard_use_memory(shard, &mem, why, sizeof why) != 0) {
        snprintf(err, errlen, "GPU %d: %s", g->device, why);
        px_gpt_cuda_destroy(&g->m);
        free(g);
        return NULL;
    }
    px_shard_bufs_t *h = px_shard_bufs(shard), *d = px_shard_compute_bufs(shard);
    g->n = h->n;
    float *hb[NSTATE] = {h->params, h->m, h->v}, *db[NSTATE] = {d->params, d->m, d->v};
    for (int i = 0; i < NSTATE; i++) g->host[i] = hb[i], g->dev[i] = db[i];
    g->grads = d->grads;
    finish_start(g);
    return g;
}

void px_compute_gpu_destroy(px_compute_gpu_t **pg) {
    if (!pg || !*pg) return;
    px_compute_gpu_t *g = *pg;
    px_compute_gpu_download_wait(g);
    for (int i = 0; i < NSTATE; i++)
        if (g->pinned[i]) CK(cudaHostUnregister(g->pinned[i]));
    CK(cudaEventDestroy(g->ready));
    CK(cudaEventDestroy(g->landed));
    CK(cudaStreamDestroy(g->copy));
    CK(cudaStreamDestroy(g->aux));
    /* a shard's GPU buffers are released with the shard, after this: mem_release needs nothing of g */
    px_gpt_cuda_destroy(&g->m);
    free(g);
    *pg = NULL;
}

int px_compute_gpu_device(const px_compute_gpu_t *g) { return g->device; }

void px_compute_gpu_zero_grad(px_compute_gpu_t *g) { px_gpt_cuda_zero_grad(g->m); } /* a shard's: px_shard_zero_grad */

float px_compute_gpu_forward(px_compute_gpu_t *g, const int *inputs, const int *targets, int B, int T) {
    return px_gpt_cuda_forward(g->m, inputs, targets, B, T);
}

int px_compute_gpu_backward(px_compute_gpu_t *g, float loss_scale) { return px_gpt_cuda_backward(g->m, loss_scale); }

float px_compute_gpu_clip_adamw(px_compute_gpu_t *g, float grad_clip, float lr, float beta1, float beta2, float eps,
                                float weight_decay, int t) {
    float norm = px_gpt_cuda_clip_grads(g->m, grad_clip);
    /* a download of the state may still be reading it (an event never recorded is no wait) */
    CK(cudaStreamWaitEvent(model_stream(g), g->landed, 0));
    px_gpt_cuda_adamw_step(g->m, lr, beta1, beta2, eps, weight_decay, t);
    return norm;
}

float *px_compute_gpu_grads(px_compute_gpu_t *g) { return g->grads; }

/* ---- the CUDA model as a pipeline stage (pipeline.h's px_pipe_model_t) ---- */

static int stage_set(void *ctx, const px_gpt_stage_t *st, int slots, int split) {
    return px_gpt_cuda_set_stage(((px_compute_gpu_t *)ctx)->m, st, slots, split);
}
static float stage_forward(void *ctx, int slot, const int *inputs, const float *x, const int *targets, int B, int T) {
    return px_gpt_cuda_stage_forward(((px_compute_gpu_t *)ctx)->m, slot, inputs, x, targets, B, T);
}
static const float *stage_output(void *ctx, int slot) {
    return px_gpt_cuda_stage_output(((px_compute_gpu_t *)ctx)->m, slot);
}
static int stage_batch(void *ctx, int slot) { return px_gpt_cuda_stage_batch(((px_compute_gpu_t *)ctx)->m, slot); }
static int stage_backward(void *ctx, int slot, const float *dout, float loss_scale, int weights) {
    return px_gpt_cuda_stage_backward(((px_compute_gpu_t *)ctx)->m, slot, dout, loss_scale, weights);
}
static int stage_weights(void *ctx, int slot) {
    return px_gpt_cuda_stage_backward_weights(((px_compute_gpu_t *)ctx)->m, slot);
}
static const float *stage_input_grad(void *ctx, int slot) {
    return px_gpt_cuda_stage_input_grad(((px_compute_gpu_t *)ctx)->m, slot);
}

px_pipe_model_t px_compute_gpu_pipe_model(px_compute_gpu_t *g) {
    const px_gpt_config_t *cfg = px_gpt_cuda_config(g->m);
    return (px_pipe_model_t){g,          cfg->channels, stage_set,        stage_forward, stage_output, stage_batch,
                             stage_backward, stage_weights, stage_input_grad, mem_fence,     mem_alloc,    mem_release};
}

/* The reduction (NCCL, on its own stream) must see the backward's gradients:
 * the model's stream is non-blocking, so wait for it here. */
void px_compute_gpu_spare_put(px_compute_gpu_t *g, const float *host, size_t n) {
    CK(cudaStreamSynchronize(model_stream(g)));
    CK(cudaMemcpy(g->grads + g->n, host, n * sizeof(float), cudaMemcpyHostToDevice));
}

void px_compute_gpu_spare_get(px_compute_gpu_t *g, float *host, size_t n) {
    CK(cudaMemcpy(host, g->grads + g->n, n * sizeof(float), cudaMemcpyDeviceToHost));
}

void px_compute_gpu_download_begin(px_compute_gpu_t *g) {
    CK(cudaEventRecord(g->ready, model_stream(g)));
    CK(cudaStreamWaitEvent(g->copy, g->ready, 0));
    for (int i = 0; i < NSTATE; i++)
        CK(cudaMemcpyAsync(g->host[i], g->dev[i], g->n * sizeof(float), cudaMemcpyDeviceToHost, g->copy));
    CK(cudaEventRecord(g->landed, g->copy));
    if (g->shard) px_compute_gpu_download_wait(g); /* the shard's optimizer step does not wait for it */
}

void px_compute_gpu_download_wait(px_compute_gpu_t *g) {
    CK(cudaSetDevice(g->device)); /* a saver's thread: this rank's GPU, not device 0 */
    CK(cudaEventSynchronize(g->landed));
}

void px_compute_gpu_upload(px_compute_gpu_t *g) {
    px_compute_gpu_download_wait(g); /* the host buffers may still be receiving one */
    for (int i = 0; i < NSTATE; i++)
        CK(cudaMemcpyAsync(g->dev[i], g->host[i], g->n * sizeof(float), cudaMemcpyHostToDevice, model_stream(g)));
    CK(cudaStreamSynchronize(model_stream(g)));
}
