/* The contract between px_comm.c (argument checks, sticky failure state,
 * error text) and a backend (Gloo shim, NCCL). Private to parallel/.
 *
 * A backend sees only valid arguments: ranks in range, non-NULL buffers,
 * n > 0, size > 1 (px_comm.c handles the trivial cases itself). It returns a
 * status and, when not OK, writes a one-line reason into err[errlen]. Its
 * abort() must be safe to call from any thread while another thread is inside
 * one of its operations. */
#ifndef PX_COMM_BACKEND_H
#define PX_COMM_BACKEND_H

#include <stddef.h>

#include "px_comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *name;
    px_comm_status_t (*allreduce_f32)(void *impl, float *buf, size_t n, px_comm_op_t op,
                                      int timeout_ms, char *err, size_t errlen);
    px_comm_status_t (*reduce_scatter_sum_f32)(void *impl, const float *in, float *out, size_t n,
                                               int timeout_ms, char *err, size_t errlen);
    px_comm_status_t (*allgather_f32)(void *impl, const float *in, float *out, size_t n,
                                      int timeout_ms, char *err, size_t errlen);
    px_comm_status_t (*broadcast)(void *impl, void *buf, size_t bytes, int root, int timeout_ms,
                                  char *err, size_t errlen);
    px_comm_status_t (*send)(void *impl, const void *buf, size_t bytes, int peer, int tag,
                             int timeout_ms, char *err, size_t errlen);
    px_comm_status_t (*recv)(void *impl, void *buf, size_t bytes, int peer, int tag,
                             int timeout_ms, char *err, size_t errlen);
    px_comm_status_t (*barrier)(void *impl, int timeout_ms, char *err, size_t errlen);
    void (*abort)(void *impl);
    void (*destroy)(void *impl);
} px_comm_backend_t;

/* Gloo shim (px_comm_gloo.cc). NULL + err on failure. */
extern const px_comm_backend_t px_gloo_backend;
void *px_gloo_new(const px_store_t *store, const char *prefix, int rank, int size, int timeout_ms,
                  char *err, size_t errlen);

#ifdef PX_HAVE_NCCL
extern const px_comm_backend_t px_nccl_backend;
void *px_nccl_new(const px_store_t *store, const char *prefix, int rank, int size, int device,
                  int timeout_ms, char *err, size_t errlen);
int px_nccl_warm(int device, char *err, size_t errlen);
#endif

#ifdef __cplusplus
}
#endif

#endif
