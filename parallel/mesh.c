/* Implementation of mesh.h: rank <-> coordinates, axis groups, prefixes. */
#include "mesh.h"

#include <stdio.h>

#define MESH_AXIS_MAX 1024

static const char *const AXIS_NAMES[PX_MESH_AXES] = {"pp", "fsdp", "tp"};

const char *px_mesh_axis_name(px_mesh_axis_t axis) {
    return axis >= 0 && axis < PX_MESH_AXES ? AXIS_NAMES[axis] : "?";
}

int px_mesh_ranks(const px_mesh_t *m) {
    return m->size[PX_MESH_PP] * m->size[PX_MESH_FSDP] * m->size[PX_MESH_TP];
}

int px_mesh_check(const px_mesh_t *m, int ranks_per_group, char *err, size_t errlen) {
    for (int a = 0; a < PX_MESH_AXES; a++)
        if (m->size[a] < 1 || m->size[a] > MESH_AXIS_MAX) {
            snprintf(err, errlen, "--%s %d: must be in 1..%d", AXIS_NAMES[a], m->size[a], MESH_AXIS_MAX);
            return -1;
        }
    /* Each factor is at most 1024, so the product fits a long long. */
    long long n = (long long)m->size[PX_MESH_PP] * m->size[PX_MESH_FSDP] * m->size[PX_MESH_TP];
    if (n != ranks_per_group) {
        snprintf(err, errlen, "--ranks-per-group %d must equal --pp %d x --fsdp %d x --tp %d = %lld", ranks_per_group,
                 m->size[PX_MESH_PP], m->size[PX_MESH_FSDP], m->size[PX_MESH_TP], n);
        return -1;
    }
    return 0;
}

px_mesh_coord_t px_mesh_coord(const px_mesh_t *m, int rank) {
    px_mesh_coord_t c;
    int t = m->size[PX_MESH_TP], f = m->size[PX_MESH_FSDP];
    c.c[PX_MESH_TP] = rank % t;
    c.c[PX_MESH_FSDP] = (rank / t) % f;
    c.c[PX_MESH_PP] = rank / (t * f);
    return c;
}

int px_mesh_rank(const px_mesh_t *m, px_mesh_coord_t c) {
    return (c.c[PX_MESH_PP] * m->size[PX_MESH_FSDP] + c.c[PX_MESH_FSDP]) * m->size[PX_MESH_TP] + c.c[PX_MESH_TP];
}

int px_mesh_axis_ranks(const px_mesh_t *m, int rank, px_mesh_axis_t axis, int *out) {
    px_mesh_coord_t c = px_mesh_coord(m, rank);
    int mine = c.c[axis];
    for (int i = 0; i < m->size[axis]; i++) {
        c.c[axis] = i;
        out[i] = px_mesh_rank(m, c);
    }
    return mine;
}

int px_mesh_axis_prefix(const px_mesh_t *m, int rank, px_mesh_axis_t axis, const char *base, char *buf, size_t len) {
    px_mesh_coord_t c = px_mesh_coord(m, rank);
    int n = snprintf(buf, len, "%s/%s", base, AXIS_NAMES[axis]);
    for (int a = 0; a < PX_MESH_AXES; a++) {
        if (a == (int)axis) continue;
        int k = snprintf(buf + (n < (int)len ? n : (int)len), n < (int)len ? len - (size_t)n : 0, ".%s%d",
                         AXIS_NAMES[a], c.c[a]);
        n += k;
    }
    return n;
}

int px_mesh_format(const px_mesh_t *m, char *buf, size_t len) {
    return snprintf(buf, len, "pp%d.fsdp%d.tp%d", m->size[PX_MESH_PP], m->size[PX_MESH_FSDP], m->size[PX_MESH_TP]);
}
