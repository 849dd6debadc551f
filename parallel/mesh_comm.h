/* The communicators of one rank's mesh axes (mesh.h), made over the
 * rendezvous store like every other px_comm: one per axis whose size is
 * above 1, under px_mesh_axis_prefix(base), so that a quorum's base prefix
 * (fresh per quorum id) fences them like today's group communicator. */
#ifndef PX_MESH_COMM_H
#define PX_MESH_COMM_H

#include "mesh.h"
#include "px_comm.h"

/* The point-to-point links of a pipeline (P > 1) between this rank and the
 * same-(fsdp, tp) ranks of the neighbouring stages, one communicator per
 * direction so that a thread can send on one while the caller receives on
 * another: activations flow forward, their gradients backward. */
enum { PX_LINK_PREV_FWD, PX_LINK_PREV_BWD, PX_LINK_NEXT_FWD, PX_LINK_NEXT_BWD, PX_LINKS };

typedef struct {
    px_comm_t *axis[PX_MESH_AXES]; /* NULL for an axis of size 1 */
    px_comm_t *link[PX_LINKS];     /* NULL at the pipeline's ends and without one */
} px_mesh_comms_t;

/* Makes one communicator (px_comm_new_gloo's arguments; ctx the caller's). */
typedef px_comm_t *(*px_mesh_comm_maker_t)(void *ctx, const px_store_t *store, const char *prefix, int rank, int size,
                                           int timeout_ms, char *err, size_t errlen);

/* Creates rank's Gloo communicator on every axis of size > 1, in axis order
 * (pp, fsdp, tp: the same order on every rank, so no rendezvous waits on
 * one that waits on it), then its pipeline links (to the previous stage
 * first: a chain from stage 0, no cycle; on the link between stages s and
 * s+1, stage s is member 0). On failure destroys what it made, writes err and
 * returns -1. timeout_ms bounds each rendezvous. */
int px_mesh_comms_new_gloo(const px_store_t *store, const px_mesh_t *m, int rank, const char *base, int timeout_ms,
                           px_mesh_comms_t *out, char *err, size_t errlen);
/* The same with every communicator made by `make` (NCCL ones on a GPU). */
int px_mesh_comms_new(const px_store_t *store, const px_mesh_t *m, int rank, const char *base, int timeout_ms,
                      px_mesh_comm_maker_t make, void *make_ctx, px_mesh_comms_t *out, char *err, size_t errlen);
/* Aborts every communicator (any thread; see px_comm_abort). */
void px_mesh_comms_abort(px_mesh_comms_t *c);
void px_mesh_comms_destroy(px_mesh_comms_t *c);

#endif
