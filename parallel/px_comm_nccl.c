/* NCCL backend of px_comm (GPU). Compiled only when CMake finds the CUDA
 * toolkit and NCCL; it builds in CI without a GPU and fails at run time with
 * a clear message when no device is usable.
 *
 * Why it is written this way: a blocking NCCL communicator whose peer died
 * waits inside the kernel for the 10-30 minute default timeout. Here the
 * communicator is created non-blocking (ncclConfig_t.blocking = 0), every
 * operation is enqueued on the communicator's own stream, and the calling
 * thread polls (ncclCommGetAsyncError, cudaStreamQuery) until the work is
 * done, an error shows up, px_comm_abort was requested, or the timeout
 * passes; in the last three cases it calls ncclCommAbort, which tears the
 * kernels and connections down so the peers fail too.
 *
 * Buffers are device memory on `device`. The stream is a blocking stream, so
 * work the caller queued on the legacy default stream runs first; work on
 * other streams must be synchronised by the caller before the call. Every
 * call returns when its work is complete (synchronous, like the Gloo backend).
 * The timeout is end to end per operation. */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_comm_backend.h"
#include "px_err.h"
#include "px_time.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "the px_comm NCCL backend needs NCCL >= 2.14 (non-blocking communicators, ncclCommFinalize)"
#endif

typedef struct {
    ncclComm_t comm; /* NULL once aborted or destroyed */
    cudaStream_t stream;
    float *barrier_buf; /* (1) on the device, for the barrier's allreduce */
    int device, rank, size;
    int timeout_ms; /* last one used: bounds finalize at destroy */
    atomic_int abort_requested;
    int failed; /* an operation failed: destroy must abort, not finalize */
} px_nccl_t;

static void abort_now(px_nccl_t *x) {
    if (x->comm) {
        ncclCommAbort(x->comm);
        x->comm = NULL;
    }
    x->failed = 1;
}

/* Sleeps between polls: short at first (small collectives finish in
 * microseconds), backing off to 1 ms so a long wait does not burn a core. */
static void poll_sleep(int *us) {
    struct timespec ts = {0, (long)*us * 1000L};
    nanosleep(&ts, NULL);
    if (*us < 1000) *us *= 2;
}

/* NCCL reports a dead or unreachable peer as a remote or system error. */
static px_comm_status_t classify(ncclResult_t r) {
    return (r == ncclRemoteError || r == ncclSystemError) ? PX_COMM_PEER_FAILED : PX_COMM_ERROR;
}

/* Waits for the operation just enqueued (launch result rc) to finish. */
static px_comm_status_t finish(px_nccl_t *x, ncclResult_t rc, const char *what, int timeout_ms,
                               char *err, size_t errlen) {
    const int64_t t0 = px_now_ms();
    x->timeout_ms = timeout_ms;
    if (rc != ncclSuccess && rc != ncclInProgress) {
        px_err_set(err, errlen, "nccl %s: launch failed: %s (%s)", what, ncclGetErrorString(rc),
                   x->comm ? ncclGetLastError(x->comm) : "");
        abort_now(x);
        return classify(rc);
    }
    int us = 10;
    for (;;) {
        if (atomic_load(&x->abort_requested)) {
            abort_now(x);
            px_err_set(err, errlen, "nccl %s: aborted (px_comm_abort)", what);
            return PX_COMM_ABORTED;
        }
        ncclResult_t async = ncclSuccess;
        ncclResult_t q = ncclCommGetAsyncError(x->comm, &async);
        if (q != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
            ncclResult_t bad = q != ncclSuccess ? q : async;
            px_err_set(err, errlen, "nccl %s: %s after %lld ms: %s", what, ncclGetErrorString(bad),
                       (long long)(px_now_ms() - t0), ncclGetLastError(x->comm));
            abort_now(x);
            return classify(bad);
        }
        if (async == ncclSuccess) {
            cudaError_t ce = cudaStreamQuery(x->stream);
            if (ce == cudaSuccess) return PX_COMM_OK;
            if (ce != cudaErrorNotReady) {
                px_err_set(err, errlen, "nccl %s: CUDA error %d (%s)", what, (int)ce,
                           cudaGetErrorString(ce));
                abort_now(x);
                return PX_COMM_ERROR;
            }
        }
        if (px_now_ms() - t0 >= timeout_ms) {
            px_err_set(err, errlen, "nccl %s: timeout after %d ms (a peer stopped or is too slow)", what,
                       timeout_ms);
            abort_now(x);
            return PX_COMM_TIMEOUT;
        }
        poll_sleep(&us);
    }
}

/* Prologue of every operation: refuse after abort, select the device. */
static int begin(px_nccl_t *x, const char *what, char *err, size_t errlen,
                 px_comm_status_t *st) {
    if (atomic_load(&x->abort_requested) || !x->comm) {
        abort_now(x);
        px_err_set(err, errlen, "nccl %s: aborted (px_comm_abort)", what);
        *st = PX_COMM_ABORTED;
        return -1;
    }
    cudaError_t ce = cudaSetDevice(x->device);
    if (ce != cudaSuccess) {
        px_err_set(err, errlen, "nccl %s: cudaSetDevice(%d): %s", what, x->device, cudaGetErrorString(ce));
        abort_now(x);
        *st = PX_COMM_ERROR;
        return -1;
    }
    return 0;
}

static ncclRedOp_t red_op(px_comm_op_t op) {
    return op == PX_COMM_MAX ? ncclMax : op == PX_COMM_MIN ? ncclMin : ncclSum;
}

static px_comm_status_t nc_allreduce(void *impl, float *buf, size_t n, px_comm_op_t op,
                                     int timeout_ms, char *err, size_t errlen) {
    px_nccl_t *x = impl;
    px_comm_status_t st;
    if (begin(x, "allreduce", err, errlen, &st)) return st;
    ncclResult_t rc = ncclAllReduce(buf, buf, n, ncclFloat32, red_op(op), x->comm, x->stream);
    return finish(x, rc, "allreduce", timeout_ms, err, errlen);
}

static px_comm_status_t nc_reduce_scatter(void *impl, const float *in, float *out, size_t n,
                                          int timeout_ms, char *err, size_t errlen) {
    px_nccl_t *x = impl;
    px_comm_status_t st;
    if (begin(x, "reduce_scatter", err, errlen, &st)) return st;
    ncclResult_t rc = ncclReduceScatter(in, out, n, ncclFloat32, ncclSum, x->comm, x->stream);
    return finish(x, rc, "reduce_scatter", timeout_ms, err, errlen);
}

static px_comm_status_t nc_allgather(void *impl, const float *in, float *out, size_t n,
                                     int timeout_ms, char *err, size_t errlen) {
    px_nccl_t *x = impl;
    px_comm_status_t st;
    if (begin(x, "allgather", err, errlen, &st)) return st;
    ncclResult_t rc = ncclAllGather(in, out, n, ncclFloat32, x->comm, x->stream);
    return finish(x, rc, "allgather", timeout_ms, err, errlen);
}

static px_comm_status_t nc_broadcast(void *impl, void *buf, size_t bytes, int root,
                                     int timeout_ms, char *err, size_t errlen) {
    px_nccl_t *x = impl;
    px_comm_status_t st;
    if (begin(x, "broadcast", err, errlen, &st)) return st;
    ncclResult_t rc = ncclBroadcast(buf, buf, bytes, ncclUint8, root, x->comm, x->stream);
    return finish(x, rc, "broadcast", timeout_ms, err, errlen);
}

static px_comm_status_t nc_send(void *impl, const void *buf, size_t bytes, int peer, int tag,
                                int timeout_ms, char *err, size_t errlen) {
    px_nccl_t *x = impl;
    px_comm_status_t st;
    (void)tag; /* NCCL pairs sends and recvs in call order */
    if (begin(x, "send", err, errlen, &st)) return st;
    ncclResult_t rc = ncclSend(buf, bytes, ncclUint8, peer, x->comm, x->stream);
    return finish(x, rc, "send", timeout_ms, err, errlen);
}

static px_comm_status_t nc_recv(void *impl, void *buf, size_t bytes, int peer, int tag,
                                int timeout_ms, char *err, size_t errlen) {
    px_nccl_t *x = impl;
    px_comm_status_t st;
    (void)tag;
    if (begin(x, "recv", err, errlen, &st)) return st;
    ncclResult_t rc = ncclRecv(buf, bytes, ncclUint8, peer, x->comm, x->stream);
    return finish(x, rc, "recv", timeout_ms, err, errlen);
}

static px_comm_status_t nc_barrier(void *impl, int timeout_ms, char *err, size_t errlen) {
    px_nccl_t *x = impl;
    px_comm_status_t st;
    if (begin(x, "barrier", err, errlen, &st)) return st;
    ncclResult_t rc =
        ncclAllReduce(x->barrier_buf, x->barrier_buf, 1, ncclFloat32, ncclSum, x->comm, x->stream);
    return finish(x, rc, "barrier", timeout_ms, err, errlen);
}

/* Only raises a flag: ncclCommAbort is called by the thread that owns the
 * communicator (inside its polling loop, or at its next call or destroy),
 * never concurrently with an NCCL call on the same communicator. */
static void nc_abort(void *impl) {
    px_nccl_t *x = impl;
    atomic_store(&x->abort_requested, 1);
}

static void nc_destroy(void *impl) {
    px_nccl_t *x = impl;
    if (x->comm && !x->failed && !atomic_load(&x->abort_requested)) {
        cudaSetDevice(x->device);
        /* Finalize flushes outstanding work and waits for the peers; bounded
         * like any operation, with abort as the fallback. */
        ncclResult_t rc = ncclCommFinalize(x->comm);
        ncclResult_t async = rc;
        const int64_t t0 = px_now_ms();
        int us = 10;
        while (rc == ncclSuccess || rc == ncclInProgress) {
            if (ncclCommGetAsyncError(x->comm, &async) != ncclSuccess) break;
            if (async != ncclInProgress) break;
            if (px_now_ms() - t0 >= x->timeout_ms) break;
            poll_sleep(&us);
        }
        if ((rc == ncclSuccess || rc == ncclInProgress) && async == ncclSuccess) {
            ncclCommDestroy(x->comm);
            x->comm = NULL;
        }
    }
    abort_now(x); /* no-op when destroyed above */
    if (x->barrier_buf) cudaFree(x->barrier_buf);
    if (x->stream) cudaStreamDestroy(x->stream);
    free(x);
}

const px_comm_backend_t px_nccl_backend = {
    "nccl",  nc_allreduce, nc_reduce_scatter, nc_allgather, nc_broadcast,
    nc_send, nc_recv,      nc_barrier,        nc_abort,     nc_destroy,
};

/* Store helpers: "<prefix>/nccl/<name>". */
static int store_key(char *key, size_t cap, const char *prefix, const char *name) {
    int n = snprintf(key, cap, "%s/nccl/%s", prefix, name);
    return (n > 0 && (size_t)n < cap) ? 0 : -1;
}

int px_nccl_warm(int device, char *err, size_t errlen) {
    int64_t t0 = px_now_ms();
    cudaError_t ce = cudaSetDevice(device);
    if (ce != cudaSuccess) {
        px_err_set(err, errlen, "nccl warm-up: cudaSetDevice(%d): %s", device, cudaGetErrorString(ce));
        return -1;
    }
    ncclUniqueId id;
    ncclComm_t comm;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r == ncclSuccess) r = ncclCommInitRank(&comm, 1, id, 0); /* one rank: blocking, nobody to wait for */
    if (r != ncclSuccess) {
        px_err_set(err, errlen, "nccl warm-up on device %d: %s", device, ncclGetErrorString(r));
        return -1;
    }
    ncclCommDestroy(comm);
    return (int)(px_now_ms() - t0);
}

void *px_nccl_new(const px_store_t *store, const char *prefix, int rank, int size, int device,
                  int timeout_ms, char *err, size_t errlen) {
    const int64_t t0 = px_now_ms();
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess) {
        px_err_set(err, errlen, "no CUDA device: cudaGetDeviceCount returned %d (%s)", (int)ce,
                   cudaGetErrorString(ce));
        return NULL;
    }
    if (count == 0) {
        px_err_set(err, errlen, "no CUDA device: cudaGetDeviceCount returned 0 devices");
        return NULL;
    }
    if (device < 0 || device >= count) {
        px_err_set(err, errlen, "nccl: device %d out of range (this machine has %d CUDA devices)", device,
                   count);
        return NULL;
    }
    if ((ce = cudaSetDevice(device)) != cudaSuccess) {
        px_err_set(err, errlen, "nccl: cudaSetDevice(%d): %s", device, cudaGetErrorString(ce));
        return NULL;
    }

    /* Rendezvous: each rank claims "<prefix>/nccl/rank<r>" (finding it set
     * means the prefix was used before: fail at once rather than join a stale
     * communicator); rank 0 publishes the unique id, the others wait for it. */
    char key[512], name[32];
    snprintf(name, sizeof(name), "rank%d", rank);
    size_t len = 0;
    char probe[1];
    if (store_key(key, sizeof(key), prefix, name) != 0) {
        px_err_set(err, errlen, "nccl: store prefix too long");
        return NULL;
    }
    if (store->get(store->ctx, key, probe, sizeof(probe), &len, 0) == 0) {
        px_err_set(err, errlen,
                   "nccl: store prefix '%s' already used (key '%s' exists); use a fresh prefix per "
                   "quorum",
                   prefix, key);
        return NULL;
    }
    if (store->set(store->ctx, key, "1", 1) != 0) {
        px_err_set(err, errlen, "nccl: store set failed for key '%s'", key);
        return NULL;
    }
    ncclUniqueId id;
    store_key(key, sizeof(key), prefix, "id");
    if (rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) {
            px_err_set(err, errlen, "nccl: ncclGetUniqueId: %s", ncclGetErrorString(r));
            return NULL;
        }
        if (store->set(store->ctx, key, &id, sizeof(id)) != 0) {
            px_err_set(err, errlen, "nccl: store set failed for key '%s'", key);
            return NULL;
        }
    } else {
        int rc = store->get(store->ctx, key, &id, sizeof(id), &len, timeout_ms);
        if (rc == 1) {
            px_err_set(err, errlen, "nccl: rendezvous timed out after %d ms waiting for '%s' (rank 0 "
                             "missing?)", timeout_ms, key);
            return NULL;
        }
        if (rc != 0 || len != sizeof(id)) {
            px_err_set(err, errlen, "nccl: bad unique id under '%s' (rc %d, %zu bytes)", key, rc, len);
            return NULL;
        }
    }

    px_nccl_t *x = calloc(1, sizeof(*x));
    if (!x) {
        px_err_set(err, errlen, "nccl: out of memory");
        return NULL;
    }
    x->device = device;
    x->rank = rank;
    x->size = size;
    x->timeout_ms = timeout_ms;
    atomic_init(&x->abort_requested, 0);

    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&x->comm, size, id, rank, &cfg);
    ncclResult_t async = r;
    int us = 10;
    while (r == ncclSuccess || r == ncclInProgress) {
        if (!x->comm || ncclCommGetAsyncError(x->comm, &async) != ncclSuccess) break;
        if (async != ncclInProgress) break;
        if (px_now_ms() - t0 >= timeout_ms) break;
        poll_sleep(&us);
    }
    if (r != ncclSuccess && r != ncclInProgress) async = r;
    if (async != ncclSuccess) {
        if (async == ncclInProgress)
            px_err_set(err, errlen, "nccl: communicator init timed out after %d ms (rank %d of %d)",
                       timeout_ms, rank, size);
        else
            px_err_set(err, errlen, "nccl: communicator init failed: %s (%s)", ncclGetErrorString(async),
                       x->comm ? ncclGetLastError(x->comm) : "");
        abort_now(x);
        free(x);
        return NULL;
    }
    if ((ce = cudaStreamCreate(&x->stream)) != cudaSuccess ||
        (ce = cudaMalloc((void **)&x->barrier_buf, sizeof(float))) != cudaSuccess ||
        (ce = cudaMemset(x->barrier_buf, 0, sizeof(float))) != cudaSuccess) {
        px_err_set(err, errlen, "nccl: CUDA setup failed: %s", cudaGetErrorString(ce));
        abort_now(x);
        if (x->barrier_buf) cudaFree(x->barrier_buf);
        if (x->stream) cudaStreamDestroy(x->stream);
        free(x);
        return NULL;
    }
    return x;
}
