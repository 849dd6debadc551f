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
static const px_gpt_cuda_buf_t state_bufs[NSTATE] = {PX_GPT_CUDA_PARAMS, PX_GPT_CUDA_M, PX_GPT_CUDA_V};

struct px_compute_gpu {
    px_gpt_cuda_t *m;
    int device;
    size_t n; /* num_params */
    cudaStream_t copy;            /* downloads */
    cudaEvent_t ready, landed;    /* the model's work a download follows; the download done */
    void *pinned[NSTATE];         /* host buffers registered with cudaHostRegister (NULL: not) */
};

static void host_bufs(const px_gpt_t *host, float *out[NSTATE]) {
    out[0] = host->params;
    out[1] = host->m;
    out[2] = host->v;
}

#define CK(call)                                                                                               \
    do {                                                                                                       \
        cudaError_t e_ = (call);                                                                               \
        if (e_ != cudaSuccess) {                                                                               \
            px_log_error("cuda_failed at=%s:%d call=\"%s\" error=\"%s\": the rank exits (it is restarted and " \
                         "healed)", __FILE__, __LINE__, #call, cudaGetErrorString(e_));                        \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

int px_compute_gpu_usable(char *why, size_t len) { return px_cuda_available(why, len); }

px_compute_gpu_t *px_compute_gpu_new(const px_gpt_t *host, int rank, char *err, size_t errlen) {
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
    g->n = host->num_params;
    cudaError_t e = cudaSetDevice(g->device);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "cudaSetDevice(%d) failed: %s", g->device, cudaGetErrorString(e));
        free(g);
        return NULL;
    }
    if (!(g->m = px_gpt_cuda_new(&host->config))) {
        snprintf(err, errlen, "cannot create the model on GPU %d (the log says why)", g->device);
        free(g);
        return NULL;
    }
    CK(cudaStreamCreateWithFlags(&g->copy, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&g->ready, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&g->landed, cudaEventDisableTiming));
    float *hb[NSTATE];
    host_bufs(host, hb);
    for (int i = 0; i < NSTATE; i++) {
        e = cudaHostRegister(hb[i], g->n * sizeof(float), cudaHostRegisterDefault);
        if (e == cudaSuccess) {
            g->pinned[i] = hb[i];
        } else { /* correct either way; pageable copies are slower and hold the host */
            px_log_warn("host_pin_failed bytes=%zu error=\"%s\": state downloads go through pageable memory",
                        g->n * sizeof(float), cudaGetErrorString(e));
            (void)cudaGetLastError();
        }
    }
    px_compute_gpu_upload(g, host);
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
    px_gpt_cuda_destroy(&g->m);
    free(g);
    *pg = NULL;
}

int px_compute_gpu_device(const px_compute_gpu_t *g) { return g->device; }

void px_compute_gpu_zero_grad(px_compute_gpu_t *g) { px_gpt_cuda_zero_grad(g->m); }

float px_compute_gpu_forward(px_compute_gpu_t *g, const int *inputs, const int *targets, int B, int T) {
    return px_gpt_cuda_forward(g->m, inputs, targets, B, T);
}

int px_compute_gpu_backward(px_compute_gpu_t *g, float loss_scale) { return px_gpt_cuda_backward(g->m, loss_scale); }

float px_compute_gpu_clip_adamw(px_compute_gpu_t *g, float grad_clip, float lr, float beta1, float beta2, float eps,
                                float weight_decay, int t) {
    float norm = px_gpt_cuda_clip_grads(g->m, grad_clip);
    /* a download of the state may still be reading it (an event never recorded is no wait) */
    CK(cudaStreamWaitEvent(px_gpt_cuda_stream(g->m), g->landed, 0));
    px_gpt_cuda_adamw_step(g->m, lr, beta1, beta2, eps, weight_decay, t);
    return norm;
}

float *px_compute_gpu_grads(px_compute_gpu_t *g) { return px_gpt_cuda_buffer(g->m, PX_GPT_CUDA_GRADS); }

/* The reduction (NCCL, on its own stream) must see the backward's gradients:
 * the model's stream is non-blocking, so wait for it here. */
void px_compute_gpu_spare_put(px_compute_gpu_t *g, const float *host, size_t n) {
    CK(cudaStreamSynchronize(px_gpt_cuda_stream(g->m)));
    CK(cudaMemcpy(px_compute_gpu_grads(g) + g->n, host, n * sizeof(float), cudaMemcpyHostToDevice));
}

void px_compute_gpu_spare_get(px_compute_gpu_t *g, float *host, size_t n) {
    CK(cudaMemcpy(host, px_compute_gpu_grads(g) + g->n, n * sizeof(float), cudaMemcpyDeviceToHost));
}

/* A size mismatch cannot happen (the model was made from host's config);
 * the model logs it, and the state would be wrong, so it is fatal here. */
static void must(int rc, const char *what) {
    if (rc == 0) return;
    px_log_error("cuda_state_copy_failed what=%s: the rank exits", what);
    exit(1);
}

void px_compute_gpu_download_begin(px_compute_gpu_t *g, px_gpt_t *host) {
    float *hb[NSTATE];
    host_bufs(host, hb);
    CK(cudaEventRecord(g->ready, px_gpt_cuda_stream(g->m)));
    CK(cudaStreamWaitEvent(g->copy, g->ready, 0));
    for (int i = 0; i < NSTATE; i++)
        CK(cudaMemcpyAsync(hb[i], px_gpt_cuda_buffer(g->m, state_bufs[i]), g->n * sizeof(float),
                           cudaMemcpyDeviceToHost, g->copy));
    CK(cudaEventRecord(g->landed, g->copy));
}

void px_compute_gpu_download_wait(px_compute_gpu_t *g) {
    CK(cudaSetDevice(g->device)); /* a saver's thread: this rank's GPU, not device 0 */
    CK(cudaEventSynchronize(g->landed));
}

void px_compute_gpu_upload(px_compute_gpu_t *g, const px_gpt_t *host) {
    px_compute_gpu_download_wait(g); /* the host buffers may still be receiving one */
    must(px_gpt_cuda_upload(g->m, PX_GPT_CUDA_PARAMS, host->params, g->n), "params");
    must(px_gpt_cuda_upload(g->m, PX_GPT_CUDA_M, host->m, g->n), "m");
    must(px_gpt_cuda_upload(g->m, PX_GPT_CUDA_V, host->v, g->n), "v");
}
