
/* The backend-independent half of px_comm: argument checks, the trivial
 * cases (empty buffers, a single rank), and the sticky failure state.
 *
 * Why sticky: after a timeout or a peer failure a collective may have left
 * partial data on the wire and in the buffers of some ranks, and the backends
 * close their connections on failure. Nothing useful can run on the
 * communicator afterwards, so every later operation returns the first failure
 * at once and the caller re-forms a new communicator (fresh prefix). Bad
 * arguments are not sticky: they are caught here before anything is sent.
 *
 * The rate limit (benchmarks) lives here too, above the backends, so that
 * Gloo and NCCL are paced alike: pace() sleeps bytes / rate after a
 * successful backend call. */
#include "px_comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_comm_backend.h"
#include "px_err.h"
#include "px_time.h"

struct px_comm {
    const px_comm_backend_t *be;
    void *impl;
    int rank, size;
    int timeout_ms;
    px_comm_status_t broken; /* first failure, PX_COMM_OK while healthy */
    int aborted;             /* px_comm_abort was called (any thread) */
    double rate;             /* bytes/s each operation is paced to; 0: off */
    char err[512];
};

const char *px_comm_status_str(px_comm_status_t s) {
    switch (s) {
    case PX_COMM_OK: return "ok";
    case PX_COMM_TIMEOUT: return "timeout";
    case PX_COMM_PEER_FAILED: return "peer_failed";
    case PX_COMM_ABORTED: return "aborted";
    case PX_COMM_ERROR: return "error";
    }
    return "unknown";
}

static int check_new_args(const px_store_t *store, const char *prefix, int rank, int size,
                          int timeout_ms, char *err, size_t errlen) {
    if (!store || !store->set || !store->get) {
        px_err_set(err, errlen, "px_comm: store and its set/get callbacks are required");
        return -1;
    }
    if (!prefix || !prefix[0]) {
        px_err_set(err, errlen, "px_comm: empty store prefix (use one per quorum, e.g. \"q17/dp\")");
        return -1;
    }
    if (size < 1 || rank < 0 || rank >= size) {
        px_err_set(err, errlen, "px_comm: rank %d out of range for size %d (need 0 <= rank < size)",
                   rank, size);
        return -1;
    }
    if (timeout_ms <= 0) {
        px_err_set(err, errlen, "px_comm: timeout_ms must be > 0, got %d", timeout_ms);
        return -1;
    }
    return 0;
}

static px_comm_t *wrap(const px_comm_backend_t *be, void *impl, int rank, int size,
                       int timeout_ms, char *err, size_t errlen) {
    px_comm_t *c = calloc(1, sizeof(*c));
    if (!c) {
        if (be && impl) be->destroy(impl);
        px_err_set(err, errlen, "px_comm: out of memory");
        return NULL;
    }
    c->be = be;
    c->impl = impl;
    c->rank = rank;
    c->size = size;
    c->timeout_ms = timeout_ms;
    return c;
}

px_comm_t *px_comm_new_gloo(const px_store_t *store, const char *prefix, int rank, int size,
                            int timeout_ms, char *err, size_t errlen) {
    if (check_new_args(store, prefix, rank, size, timeout_ms, err, errlen) != 0) return NULL;
    void *impl = px_gloo_new(store, prefix, rank, size, timeout_ms, err, errlen);
    if (!impl) return NULL;
    return wrap(&px_gloo_backend, impl, rank, size, timeout_ms, err, errlen);
}

int px_comm_nccl_built(void) {
#ifdef PX_HAVE_NCCL
    return 1;
#else
    return 0;
#endif
}

int px_comm_nccl_warm(int device, char *err, size_t errlen) {
#ifdef PX_HAVE_NCCL
    return px_nccl_warm(device, err, errlen);
#else
    (void)device;
    snprintf(err, errlen, "phalanx was built without NCCL");
    return -1;
#endif
}

px_comm_t *px_comm_new_nccl(const px_store_t *store, const char *prefix, int rank, int size,
                            int device, int timeout_ms, char *err, size_t errlen) {
    if (check_new_args(store, prefix, rank, size, timeout_ms, err, errlen) != 0) return NULL;
#ifdef PX_HAVE_NCCL
    void *impl = px_nccl_new(store, prefix, rank, size, device, timeout_ms, err, errlen);
    if (!impl) return NULL;
    return wrap(&px_nccl_backend, impl, rank, size, timeout_ms, err, errlen);
#else
    (void)device;
    px_err_set(err, errlen,
               "px_comm: NCCL backend not built (CUDA toolkit or nccl.h/libnccl not found at "
               "configure time; see the cmake output for 'px_comm: NCCL')");
    return NULL;
#endif
}

/* Common prologue: NULL comm, sticky failure, abort of a single-rank comm.
 * Returns 1 when the caller should return c->broken / the status in *st. */
static int refuse(px_comm_t *c, px_comm_status_t *st) {
    if (!c) {
        *st = PX_COMM_ERROR;
        return 1;
    }
    if (c->broken != PX_COMM_OK) {
        *st = c->broken;
        return 1;
    }
    /* Larger communicators: the backend answers, with its own teardown. */
    if (c->size == 1 && __atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST)) {
        c->broken = PX_COMM_ABORTED;
        snprintf(c->err, sizeof(c->err), "px_comm: aborted");
        *st = c->broken;
        return 1;
    }
    c->err[0] = '\0';
    return 0;
}

static px_comm_status_t bad_arg(px_comm_t *c, const char *what) {
    snprintf(c->err, sizeof(c->err), "px_comm: %s", what);
    return PX_COMM_ERROR;
}

/* Paces a backend call that just returned st: sleeps bytes / rate, in short
 * slices so that an abort ends it. From the call's end, not its start: a
 * rank that waited in the call for a later peer must not count that wait
 * as link time, or it would leave the call before that peer, the ranks
 * would drift apart by up to a pacing per call, and the first group to
 * finish a job would leave while the last still sleeps in the final step. */
static px_comm_status_t pace(px_comm_t *c, px_comm_status_t st, double bytes, const char *what) {
    if (st != PX_COMM_OK || c->rate <= 0 || bytes <= 0) return st;
    const int64_t until = px_now_us() + (int64_t)(bytes / c->rate * 1e6);
    for (int64_t now = px_now_us(); now < until; now = px_now_us()) {
        if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST)) {
            snprintf(c->err, sizeof(c->err), "%s %s: aborted (px_comm_abort) while paced to %.0f bytes/s",
                     c->be->name, what, c->rate);
            return PX_COMM_ABORTED;
        }
        int64_t us = until - now < 5000 ? until - now : 5000;
        struct timespec ts = {0, (long)us * 1000L};
        nanosleep(&ts, NULL);
    }
    return st;
}

/* Ring estimates of the bytes this rank sends (px_comm.h). */
static double ring_allreduce_bytes(const px_comm_t *c, size_t n) {
    return 2.0 * (c->size - 1) / c->size * (double)n * sizeof(float);
}
static double ring_gather_bytes(const px_comm_t *c, size_t n_per_rank) {
    return (double)(c->size - 1) * (double)n_per_rank * sizeof(float);
}

/* Records a backend result: failures become sticky. */
static px_comm_status_t done(px_comm_t *c, px_comm_status_t st) {
    if (st != PX_COMM_OK) {
        c->broken = st;
        if (!c->err[0]) snprintf(c->err, sizeof(c->err), "%s", px_comm_status_str(st));
    }
    return st;
}

px_comm_status_t px_comm_allreduce_f32(px_comm_t *c, float *buf, size_t n, px_comm_op_t op) {
    px_comm_status_t st;
    if (refuse(c, &st)) return st;
    if (n == 0) return PX_COMM_OK;
    if (!buf) return bad_arg(c, "allreduce: NULL buffer");
    if (op != PX_COMM_SUM && op != PX_COMM_MAX && op != PX_COMM_MIN)
        return bad_arg(c, "allreduce: unknown reduction op");
    if (c->size == 1) return PX_COMM_OK;
    st = c->be->allreduce_f32(c->impl, buf, n, op, c->timeout_ms, c->err, sizeof(c->err));
    return done(c, pace(c, st, ring_allreduce_bytes(c, n), "allreduce"));
}

px_comm_status_t px_comm_allreduce_sum_f32(px_comm_t *c, float *buf, size_t n) {
    return px_comm_allreduce_f32(c, buf, n, PX_COMM_SUM);
}

px_comm_status_t px_comm_reduce_scatter_sum_f32(px_comm_t *c, const float *in, float *out,
                                                size_t n_per_rank) {
    px_comm_status_t st;
    if (refuse(c, &st)) return st;
    if (n_per_rank == 0) return PX_COMM_OK;
    if (!in || !out) return bad_arg(c, "reduce_scatter: NULL buffer");
    if (c->size == 1 && c->be == &px_gloo_backend) {
        memmove(out, in, n_per_rank * sizeof(float));
        return PX_COMM_OK;
    }
    st = c->be->reduce_scatter_sum_f32(c->impl, in, out, n_per_rank, c->timeout_ms, c->err,
                                       sizeof(c->err));
    return done(c, pace(c, st, ring_gather_bytes(c, n_per_rank), "reduce_scatter"));
}

px_comm_status_t px_comm_allgather_f32(px_comm_t *c, const float *in, float *out,
                                       size_t n_per_rank) {
    px_comm_status_t st;
    if (refuse(c, &st)) return st;
    if (n_per_rank == 0) return PX_COMM_OK;
    if (!in || !out) return bad_arg(c, "allgather: NULL buffer");
    if (c->size == 1 && c->be == &px_gloo_backend) {
        memmove(out, in, n_per_rank * sizeof(float));
        return PX_COMM_OK;
    }
    st = c->be->allgather_f32(c->impl, in, out, n_per_rank, c->timeout_ms, c->err, sizeof(c->err));
    return done(c, pace(c, st, ring_gather_bytes(c, n_per_rank), "allgather"));
}

px_comm_status_t px_comm_broadcast(px_comm_t *c, void *buf, size_t bytes, int root) {
    px_comm_status_t st;
    if (refuse(c, &st)) return st;
    if (root < 0 || root >= c->size) return bad_arg(c, "broadcast: root out of range");
    if (bytes == 0) return PX_COMM_OK;
    if (!buf) return bad_arg(c, "broadcast: NULL buffer");
    if (c->size == 1) return PX_COMM_OK;
    st = c->be->broadcast(c->impl, buf, bytes, root, c->timeout_ms, c->err, sizeof(c->err));
    return done(c, pace(c, st, (double)bytes, "broadcast"));
}

static px_comm_status_t check_p2p(px_comm_t *c, const void *buf, size_t bytes, int peer, int tag,
                                  const char *what) {
    char msg[128];
    if (peer < 0 || peer >= c->size || peer == c->rank) {
        snprintf(msg, sizeof(msg), "%s: peer %d invalid (size %d, self %d)", what, peer, c->size,
                 c->rank);
        return bad_arg(c, msg);
    }
    if (tag < 0) {
        snprintf(msg, sizeof(msg), "%s: tag must be >= 0, got %d", what, tag);
        return bad_arg(c, msg);
    }
    if (bytes > 0 && !buf) {
        snprintf(msg, sizeof(msg), "%s: NULL buffer", what);
        return bad_arg(c, msg);
    }
    return PX_COMM_OK;
}

px_comm_status_t px_comm_send(px_comm_t *c, const void *buf, size_t bytes, int peer, int tag) {
    px_comm_status_t st;
    if (refuse(c, &st)) return st;
    if ((st = check_p2p(c, buf, bytes, peer, tag, "send")) != PX_COMM_OK) return st;
    if (bytes == 0) return PX_COMM_OK;
    st = c->be->send(c->impl, buf, bytes, peer, tag, c->timeout_ms, c->err, sizeof(c->err));
    return done(c, pace(c, st, (double)bytes, "send"));
}

px_comm_status_t px_comm_recv(px_comm_t *c, void *buf, size_t bytes, int peer, int tag) {
    px_comm_status_t st;
    if (refuse(c, &st)) return st;
    if ((st = check_p2p(c, buf, bytes, peer, tag, "recv")) != PX_COMM_OK) return st;
    if (bytes == 0) return PX_COMM_OK;
    st = c->be->recv(c->impl, buf, bytes, peer, tag, c->timeout_ms, c->err, sizeof(c->err));
    return done(c, pace(c, st, (double)bytes, "recv"));
}

px_comm_status_t px_comm_barrier(px_comm_t *c) {
    px_comm_status_t st;
    if (refuse(c, &st)) return st;
    if (c->size == 1) return PX_COMM_OK;
    return done(c, c->be->barrier(c->impl, c->timeout_ms, c->err, sizeof(c->err)));
}

void px_comm_abort(px_comm_t *c) {
    if (!c) return;
    /* Read by the owner thread at its next call (a single-rank communicator
     * has no backend work to interrupt) and by a paced sleep. */
    __atomic_store_n(&c->aborted, 1, __ATOMIC_SEQ_CST);
    c->be->abort(c->impl);
}

void px_comm_set_timeout(px_comm_t *c, int timeout_ms) {
    if (c && timeout_ms > 0) c->timeout_ms = timeout_ms;
}

void px_comm_set_rate_limit(px_comm_t *c, double bytes_per_s) {
    if (c) c->rate = bytes_per_s > 0 ? bytes_per_s : 0; /* NaN too: off */
}

double px_comm_rate_limit(const px_comm_t *c) { return c ? c->rate : 0; }
int px_comm_timeout(const px_comm_t *c) { return c ? c->timeout_ms : 0; }
const char *px_comm_last_error(const px_comm_t *c) { return c ? c->err : "px_comm: NULL"; }
px_comm_status_t px_comm_health(const px_comm_t *c) { return c ? c->broken : PX_COMM_ERROR; }
int px_comm_rank(const px_comm_t *c) { return c ? c->rank : -1; }
int px_comm_size(const px_comm_t *c) { return c ? c->size : 0; }
const char *px_comm_backend(const px_comm_t *c) { return c ? c->be->name : "none"; }

void px_comm_destroy(px_comm_t **pc) {
    if (!pc || !*pc) return;
    px_comm_t *c = *pc;
    c->be->destroy(c->impl);
    free(c);
    *pc = NULL;
}
