/* px_comm: the data plane's communicator. One communicator per (quorum id,
 * group): created when a quorum forms, used for the collectives of every step
 * while the quorum holds, aborted and destroyed when membership changes.
 *
 * Two backends behind one interface:
 *   Gloo (CPU, TCP): buffers are host memory. A thin C++ shim over libgloo.
 *   NCCL (GPU): buffers are device memory on the communicator's device.
 *
 * Failure semantics, the reason this layer exists (details in docs/comm.md):
 *   - Every call returns within a bounded time. Nothing waits forever. An
 *     operation's timeout is end to end: one deadline for the whole call.
 *   - The first non-OK status of an operation breaks the communicator for
 *     good: every later operation returns that same status at once. The
 *     caller destroys it and creates a new one, with a fresh store prefix and
 *     the surviving ranks renumbered 0..size-1.
 *   - A failure closes this rank's connections, so the peers' operations fail
 *     promptly too instead of waiting out their timeout.
 *   - Operations are collective: every rank calls the same sequence with the
 *     same sizes. A size mismatch is a programming error (PX_COMM_ERROR or
 *     a timeout, depending on where it is noticed).
 *   - A communicator is used by one thread at a time; px_comm_abort is the
 *     one call that may come from any thread (never concurrently with
 *     px_comm_destroy).
 */
#ifndef PX_COMM_H
#define PX_COMM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct px_comm px_comm_t;

typedef enum {
    PX_COMM_OK = 0,
    PX_COMM_TIMEOUT,     /* no progress within the timeout (a peer stopped or too slow) */
    PX_COMM_PEER_FAILED, /* a connection to a peer broke (peer died, or aborted) */
    PX_COMM_ABORTED,     /* px_comm_abort was called on this communicator */
    PX_COMM_ERROR        /* bad argument, setup failure, backend error */
} px_comm_status_t;

/* Element-wise reduction for allreduce. */
typedef enum { PX_COMM_SUM = 0, PX_COMM_MAX, PX_COMM_MIN } px_comm_op_t;

/* Rendezvous store, backed by C callbacks (in production the coordinator's
 * key-value store over ZeroMQ; in tests a directory). Keys are printable
 * strings that may contain '/'. Values are opaque bytes. */
typedef struct {
    void *ctx;
    /* Stores value under key, replacing any old value. 0 on success. */
    int (*set)(void *ctx, const char *key, const void *value, size_t len);
    /* Waits up to timeout_ms (0: check once) for key; copies up to cap bytes
     * into buf and sets *len to the value's full length (which may exceed
     * cap: the caller then asks again with a larger buffer).
     * Returns 0 ok, 1 timeout (key absent), -1 error. */
    int (*get)(void *ctx, const char *key, void *buf, size_t cap, size_t *len, int timeout_ms);
} px_store_t;

/* Creates a Gloo (CPU, TCP) communicator: rank `rank` of `size`, meeting the
 * other ranks through `store` under the keys "<prefix>/...". The prefix must
 * be fresh (one per quorum, e.g. "q17/dp"); a prefix this rank already used
 * fails at once. timeout_ms bounds the rendezvous and every later wait
 * (px_comm_set_timeout changes the latter). Binds to PX_GLOO_HOST (default
 * 127.0.0.1) or to the interface named by PX_GLOO_IFACE when set.
 * Returns NULL and writes a message into err[errlen] on failure. */
px_comm_t *px_comm_new_gloo(const px_store_t *store, const char *prefix, int rank, int size,
                            int timeout_ms, char *err, size_t errlen);

/* Creates an NCCL communicator on CUDA device `device` (non-blocking NCCL
 * communicator; the unique id travels through the store). Returns NULL with a
 * message when there is no usable GPU or when phalanx was built without NCCL. */
px_comm_t *px_comm_new_nccl(const px_store_t *store, const char *prefix, int rank, int size,
                            int device, int timeout_ms, char *err, size_t errlen);

/* 1 when this build contains the NCCL backend (it may still find no GPU). */
int px_comm_nccl_built(void);

/* Pays NCCL's one-time costs in this process on `device` now (its global
 * set-up, the device's context, the network transport), with a one-rank
 * communicator made and destroyed, so that the first real communicator
 * does not: a restarted rank calls it before it registers, while the other
 * groups still train without it. Returns the milliseconds it took, or -1
 * with the reason in err (no GPU, no NCCL). */
int px_comm_nccl_warm(int device, char *err, size_t errlen);

/* buf[n] becomes the element-wise reduction over ranks (in place). */
px_comm_status_t px_comm_allreduce_f32(px_comm_t *c, float *buf, size_t n, px_comm_op_t op);
px_comm_status_t px_comm_allreduce_sum_f32(px_comm_t *c, float *buf, size_t n);
/* in[size * n_per_rank] summed over ranks; this rank keeps chunk `rank`
 * in out[n_per_rank]. in and out must not overlap. */
px_comm_status_t px_comm_reduce_scatter_sum_f32(px_comm_t *c, const float *in, float *out,
                                                size_t n_per_rank);
/* out[size * n_per_rank] = every rank's in[n_per_rank], in rank order.
 * in may be out + rank * n_per_rank (in place); otherwise no overlap. */
px_comm_status_t px_comm_allgather_f32(px_comm_t *c, const float *in, float *out,
                                       size_t n_per_rank);
/* buf[bytes] on every rank becomes root's buf[bytes]. */
px_comm_status_t px_comm_broadcast(px_comm_t *c, void *buf, size_t bytes, int root);
/* Point to point. Each send pairs with one recv of the same size and tag on
 * the peer; messages with the same (peer, tag) arrive in order. tag >= 0.
 * A send returns once the peer has posted the matching recv and the data is
 * on its way, so two ranks that both send to each other first time out:
 * order them. (NCCL ignores the tag: sends and recvs pair in call order.) */
px_comm_status_t px_comm_send(px_comm_t *c, const void *buf, size_t bytes, int peer, int tag);
px_comm_status_t px_comm_recv(px_comm_t *c, void *buf, size_t bytes, int peer, int tag);
px_comm_status_t px_comm_barrier(px_comm_t *c);

/* Thread-safe. In-flight and later operations return PX_COMM_ABORTED; the
 * connections close, so peers' operations fail with PX_COMM_PEER_FAILED
 * (Gloo: at once; NCCL: when the aborted rank's operation or destroy runs). */
void px_comm_abort(px_comm_t *c);

/* Emulates a slow link (benchmarks): every later operation on this
 * communicator takes at least (bytes this rank moves in it) / bytes_per_s
 * seconds. Per-call pacing, not a token bucket: the operation runs at full
 * speed and, once it returns OK, bytes / rate is slept, so the link's time
 * adds to the loopback's (an overestimate by the loopback transfer time,
 * small against a slow link's) and a rank that waited in the call for a later peer does
 * not count its wait as link time: the ranks leave the call together, as
 * from an unpaced one. bytes_per_s <= 0 (the default) turns it off. The
 * bytes, ring estimates over R ranks:
 *   allreduce of n floats           2(R-1)/R * n * 4
 *   reduce_scatter, n_per_rank out  (R-1) * n_per_rank * 4
 *   allgather, n_per_rank in        (R-1) * n_per_rank * 4
 *   broadcast, send, recv           the bytes (on every rank of a broadcast,
 *                                   and on both ends of a message: a link of
 *                                   that rate delivers them no faster)
 *   barrier                         none
 * The sleep is in slices of at most 5 ms: a px_comm_abort during it ends it
 * then, with PX_COMM_ABORTED as an aborted operation's (sticky; the peers
 * learn of it as of any px_comm_abort). Not thread-safe against
 * a running operation: set it before use (the worker does, at rendezvous). */
void px_comm_set_rate_limit(px_comm_t *c, double bytes_per_s);
double px_comm_rate_limit(const px_comm_t *c); /* bytes/s, 0 when off */

/* Changes the timeout of later operations (milliseconds, > 0). */
void px_comm_set_timeout(px_comm_t *c, int timeout_ms);
int px_comm_timeout(const px_comm_t *c);

/* Message for the last non-OK status ("" when none). Valid until the next
 * call on this communicator. */
const char *px_comm_last_error(const px_comm_t *c);
/* The status every later operation will return: PX_COMM_OK while healthy. */
px_comm_status_t px_comm_health(const px_comm_t *c);
int px_comm_rank(const px_comm_t *c);
int px_comm_size(const px_comm_t *c);
const char *px_comm_backend(const px_comm_t *c); /* "gloo" or "nccl" */
const char *px_comm_status_str(px_comm_status_t s); /* "ok", "timeout", ... */

/* Closes the connections and frees *c; sets *c to NULL. NULL is fine. */
void px_comm_destroy(px_comm_t **c);

#ifdef __cplusplus
}
#endif

#endif
