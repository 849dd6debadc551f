/* Implementation of mesh_comm.h: the axis communicators of one rank. */
#include "mesh_comm.h"

#include <stdio.h>
#include <string.h>

static px_comm_t *make_gloo(void *ctx, const px_store_t *store, const char *prefix, int rank, int size, int timeout_ms,
                            char *err, size_t errlen) {
    (void)ctx;
    return px_comm_new_gloo(store, prefix, rank, size, timeout_ms, err, errlen);
}

int px_mesh_comms_new_gloo(const px_store_t *store, const px_mesh_t *m, int rank, const char *base, int timeout_ms,
                           px_mesh_comms_t *out, char *err, size_t errlen) {
    return px_mesh_comms_new(store, m, rank, base, timeout_ms, make_gloo, NULL, out, err, errlen);
}

int px_mesh_comms_new(const px_store_t *store, const px_mesh_t *m, int rank, const char *base, int timeout_ms,
                      px_mesh_comm_maker_t make, void *make_ctx, px_mesh_comms_t *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    for (int a = 0; a < PX_MESH_AXES; a++) {
        if (m->size[a] == 1) continue;
        char prefix[512], why[400];
        int n = px_mesh_axis_prefix(m, rank, (px_mesh_axis_t)a, base, prefix, sizeof prefix);
        if (n < 0 || (size_t)n >= sizeof prefix) {
            snprintf(err, errlen, "mesh: store prefix under '%.100s' too long", base);
            px_mesh_comms_destroy(out);
            return -1;
        }
        px_mesh_coord_t c = px_mesh_coord(m, rank);
        out->axis[a] = make(make_ctx, store, prefix, c.c[a], m->size[a], timeout_ms, why, sizeof why);
        if (!out->axis[a]) {
            snprintf(err, errlen, "mesh: %s communicator (%s, member %d of %d): %s", px_mesh_axis_name((px_mesh_axis_t)a),
                     prefix, c.c[a], m->size[a], why);
            px_mesh_comms_destroy(out);
            return -1;
        }
    }
    int P = m->size[PX_MESH_PP], s = px_mesh_coord(m, rank).c[PX_MESH_PP];
    char base_pp[512];
    px_mesh_axis_prefix(m, rank, PX_MESH_PP, base, base_pp, sizeof base_pp);
    for (int k = 0; k < PX_LINKS && P > 1; k++) {
        int next = k >= PX_LINK_NEXT_FWD, link = next ? s : s - 1; /* between stages link and link + 1 */
        if (link < 0 || link + 1 >= P) continue;
        char prefix[600], why[400];
        snprintf(prefix, sizeof prefix, "%s/l%d%s", base_pp, link, k % 2 ? "b" : "f");
        out->link[k] = make(make_ctx, store, prefix, next ? 0 : 1, 2, timeout_ms, why, sizeof why);
        if (!out->link[k]) {
            snprintf(err, errlen, "mesh: pipeline link %s (stage %d of %d): %s", prefix, s, P, why);
            px_mesh_comms_destroy(out);
            return -1;
        }
    }
    return 0;
}

void px_mesh_comms_abort(px_mesh_comms_t *c) {
    for (int a = 0; a < PX_MESH_AXES; a++)
        if (c->axis[a]) px_comm_abort(c->axis[a]);
    for (int k = 0; k < PX_LINKS; k++)
        if (c->link[k]) px_comm_abort(c->link[k]);
}

void px_mesh_comms_destroy(px_mesh_comms_t *c) {
    for (int a = 0; a < PX_MESH_AXES; a++) px_comm_destroy(&c->axis[a]);
    for (int k = 0; k < PX_LINKS; k++) px_comm_destroy(&c->link[k]);
}
