/* Implementation of mesh_comm.h: the axis communicators of one rank. */
#include "mesh_comm.h"

#include <stdio.h>
#include <string.h>

int px_mesh_comms_new_gloo(const px_store_t *store, const px_mesh_t *m, int rank, const char *base, int timeout_ms,
                           px_mesh_comms_t *out, char *err, size_t errlen) {
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
        out->axis[a] = px_comm_new_gloo(store, prefix, c.c[a], m->size[a], timeout_ms, why, sizeof why);
        if (!out->axis[a]) {
            snprintf(err, errlen, "mesh: %s communicator (%s, member %d of %d): %s", px_mesh_axis_name((px_mesh_axis_t)a),
                     prefix, c.c[a], m->size[a], why);
            px_mesh_comms_destroy(out);
            return -1;
        }
    }
    return 0;
}

void px_mesh_comms_abort(px_mesh_comms_t *c) {
    for (int a = 0; a < PX_MESH_AXES; a++)
        if (c->axis[a]) px_comm_abort(c->axis[a]);
}

void px_mesh_comms_destroy(px_mesh_comms_t *c) {
    for (int a = 0; a < PX_MESH_AXES; a++) px_comm_destroy(&c->axis[a]);
}
