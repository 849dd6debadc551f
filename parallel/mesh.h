/* The device mesh inside a replica group: W = P x F x T ranks laid out on
 * three axes, pipeline (pp), fully sharded data parallel (fsdp) and tensor
 * parallel (tp). Pure arithmetic: which coordinates a rank has, which ranks
 * share an axis with it, and the store prefix of each axis's communicator.
 *
 * Rank order: tp varies fastest, then fsdp, then pp:
 *     rank = (pp * F + fsdp) * T + tp
 * so the T ranks of a tensor-parallel group (the most traffic: an all-reduce
 * per block) are adjacent, as they are on one node's GPUs in practice, and
 * each pipeline stage is a contiguous block of F x T ranks.
 *
 * An axis group of a rank is the set of ranks that differ from it only in
 * that axis's coordinate, ordered by that coordinate: the rank with
 * coordinate i is member i of the axis communicator. */
#ifndef PX_MESH_H
#define PX_MESH_H

#include <stddef.h>

typedef enum { PX_MESH_PP = 0, PX_MESH_FSDP, PX_MESH_TP, PX_MESH_AXES } px_mesh_axis_t;

typedef struct {
    int size[PX_MESH_AXES]; /* P, F, T: each >= 1 */
} px_mesh_t;

typedef struct {
    int c[PX_MESH_AXES]; /* this rank's coordinate on each axis */
} px_mesh_coord_t;

/* The axis's short name: "pp", "fsdp", "tp". */
const char *px_mesh_axis_name(px_mesh_axis_t axis);

/* Checks a layout against the group's rank count: every size in 1..1024 and
 * P x F x T == ranks_per_group. 0 ok; -1 with a message naming the numbers. */
int px_mesh_check(const px_mesh_t *m, int ranks_per_group, char *err, size_t errlen);

/* Ranks in the mesh: P x F x T. */
int px_mesh_ranks(const px_mesh_t *m);

/* rank (0..ranks-1) to coordinates, and back. */
px_mesh_coord_t px_mesh_coord(const px_mesh_t *m, int rank);
int px_mesh_rank(const px_mesh_t *m, px_mesh_coord_t c);

/* The ranks of `rank`'s group on `axis`, ordered by that axis's coordinate,
 * into out[size[axis]]. Returns rank's index in it (its coordinate). */
int px_mesh_axis_ranks(const px_mesh_t *m, int rank, px_mesh_axis_t axis, int *out);

/* The communicator prefix of `rank`'s group on `axis` under `base` (e.g. the
 * quorum's "q17/g0"): "<base>/<axis>" followed by the other two coordinates,
 * e.g. "q17/g0/tp.pp0.fsdp1". Every member of one axis group gets the same
 * string and no other group does. Returns snprintf's count. */
int px_mesh_axis_prefix(const px_mesh_t *m, int rank, px_mesh_axis_t axis, const char *base, char *buf, size_t len);

/* "pp1.fsdp2.tp2": how a layout is printed and compared (a joiner with
 * another layout is refused naming both). Returns snprintf's count. */
int px_mesh_format(const px_mesh_t *m, char *buf, size_t len);

#endif
