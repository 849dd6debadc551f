/* The trainer's compute device (compute.h): the CPU implementation, and the
 * dispatch to the GPU half (compute_gpu.h) when the device is cuda. On the
 * CPU every call is the model's own function and nothing is copied, so the
 * CPU path is the one the trainer had before this layer existed. */
#include "compute.h"

#include <stdio.h>
#include <stdlib.h>

#include "compute_gpu.h"
#include "px_log.h"

struct px_compute {
    px_gpt_t *host;       /* the model (cpu) or the host mirror of its state (cuda) */
    px_shard_t *shard;    /* a sharded group's rank, or NULL */
    px_compute_gpu_t *gpu; /* NULL on the CPU */
    int mirror_valid;     /* cuda: host params, m, v equal the device's (once a download begun lands) */
    float tail[PX_VOTE_N]; /* cuda: the vote's tail on the host */
    char name[32];
};

_Static_assert(PX_VOTE_N <= PX_GPT_GRADS_SPARE, "the vote's tail must fit in the grads' spare room");

int px_compute_usable(px_device_t device, char *why, size_t len) {
    if (device == PX_DEVICE_CPU) return 1;
    if (!px_compute_gpu_usable(why, len)) return 0;
    if (!px_comm_nccl_built()) {
        snprintf(why, len, "this binary was built without NCCL (the gradient reduction on GPUs needs nccl.h and "
                           "libnccl at configure time; see docs/comm.md)");
        return 0;
    }
    return 1;
}

void px_compute_warm(int rank) { px_compute_gpu_warm(rank); }

px_compute_t *px_compute_new(px_device_t device, px_gpt_t *host, px_shard_t *shard, int rank, char *err,
                             size_t errlen) {
    px_compute_t *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->host = host;
    c->shard = shard;
    c->mirror_valid = 1;
    snprintf(c->name, sizeof c->name, "cpu");
    if (device == PX_DEVICE_CUDA) {
        c->gpu = shard ? px_compute_gpu_new_shard(shard, rank, err, errlen) : px_compute_gpu_new(host, rank, err, errlen);
        if (!c->gpu) {
            free(c);
            return NULL;
        }
        snprintf(c->name, sizeof c->name, "cuda:%d", px_compute_gpu_device(c->gpu));
    }
    return c;
}

void px_compute_set_math(px_precision_t precision, int tf32, int unfused_attention) {
    px_compute_gpu_set_math(precision, tf32, unfused_attention);
}

void px_compute_destroy(px_compute_t **pc) {
    if (!pc || !*pc) return;
    px_compute_gpu_destroy(&(*pc)->gpu);
    free(*pc);
    *pc = NULL;
}

const char *px_compute_name(const px_compute_t *c) { return c->name; }

void px_compute_zero_grad(px_compute_t *c) {
    if (c->shard) px_shard_zero_grad(c->shard); /* in its compute memory, on either device */
    else if (c->gpu) px_compute_gpu_zero_grad(c->gpu);
    else px_gpt_zero_grad(c->host);
}

float px_compute_forward(px_compute_t *c, const int *inputs, const int *targets, int B, int T) {
    if (c->gpu) return px_compute_gpu_forward(c->gpu, inputs, targets, B, T);
    return px_gpt_forward(c->host, inputs, targets, B, T);
}

int px_compute_backward(px_compute_t *c, float loss_scale) {
    if (c->gpu) return px_compute_gpu_backward(c->gpu, loss_scale);
    return px_gpt_backward(c->host, loss_scale);
}

float px_compute_clip_adamw(px_compute_t *c, float grad_clip, float lr, float beta1, float beta2, float eps,
                            float weight_decay, int t) {
    if (c->gpu) {
        c->mirror_valid = 0;
        return px_compute_gpu_clip_adamw(c->gpu, grad_clip, lr, beta1, beta2, eps, weight_decay, t);
    }
    float norm = px_gpt_clip_grads(c->host, grad_clip);
    px_gpt_adamw_step(c->host, lr, beta1, beta2, eps, weight_decay, t);
    return norm;
}

float px_compute_clip_adamw_parts(px_compute_t *c, float grad_clip, float lr, float beta1, float beta2, float eps,
                                  float weight_decay, int t, size_t part_floats,
                                  void (*visit)(void *ctx, int k, size_t lo, size_t hi), void *ctx) {
    float norm = px_gpt_clip_grads(c->host, grad_clip);
    px_gpt_adamw_step_parts(c->host, lr, beta1, beta2, eps, weight_decay, t, part_floats, visit, ctx);
    return norm;
}

float *px_compute_grads(px_compute_t *c) {
    if (c->gpu) return px_compute_gpu_grads(c->gpu);
    return c->shard ? px_shard_bufs(c->shard)->grads : c->host->grads;
}

float *px_compute_tail(px_compute_t *c) {
    if (c->gpu) return c->tail;
    return c->shard ? px_shard_bufs(c->shard)->grads + px_shard_bufs(c->shard)->n : c->host->grads + c->host->num_params;
}

void px_compute_tail_put(px_compute_t *c) {
    if (c->gpu) px_compute_gpu_spare_put(c->gpu, c->tail, PX_VOTE_N);
}

void px_compute_tail_get(px_compute_t *c) {
    if (c->gpu) px_compute_gpu_spare_get(c->gpu, c->tail, PX_VOTE_N);
}

px_pipe_model_t px_compute_pipe_model(px_compute_t *c) {
    return c->gpu ? px_compute_gpu_pipe_model(c->gpu) : px_pipe_model_cpu(c->host);
}

px_comm_t *px_compute_comm_new(px_compute_t *c, const px_store_t *store, const char *prefix, int rank, int size,
                               int timeout_ms, char *err, size_t errlen) {
    if (c->gpu)
        return px_comm_new_nccl(store, prefix, rank, size, px_compute_gpu_device(c->gpu), timeout_ms, err, errlen);
    return px_comm_new_gloo(store, prefix, rank, size, timeout_ms, err, errlen);
}

int px_compute_comms_take_host(const px_compute_t *c) { return !c->gpu; }

void px_compute_state_changed(px_compute_t *c) {
    if (c->gpu) c->mirror_valid = 0;
}

int px_compute_host_stale(const px_compute_t *c) { return c->gpu && !c->mirror_valid; }

void px_compute_host_state_begin(px_compute_t *c) {
    if (!c->gpu || c->mirror_valid) return;
    px_compute_gpu_download_begin(c->gpu);
    c->mirror_valid = 1; /* once it lands: readers wait (px_compute_host_wait) */
}

void px_compute_host_wait(px_compute_t *c) {
    if (c->gpu) px_compute_gpu_download_wait(c->gpu);
}

int px_compute_state_on_host(const px_compute_t *c) { return !c->gpu; }

void px_compute_host_written(px_compute_t *c) {
    if (!c->gpu) return;
    px_compute_gpu_upload(c->gpu);
    c->mirror_valid = 1;
}
