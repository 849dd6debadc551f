/* The in-group mesh (parallel/mesh.h) as tables: layout checks, rank <->
 * coordinates both ways for every rank of several layouts, axis groups
 * (each a partition of the ranks; members ordered by coordinate), and
 * communicator prefixes (equal exactly within an axis group). */
#include <stdio.h>
#include <string.h>

#include "mesh.h"

static int g_failed;
#define CHECK(cond, ...)                                                                                              \
    do {                                                                                                              \
        if (!(cond)) {                                                                                                \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                       \
            fprintf(stderr, __VA_ARGS__);                                                                             \
            fputc('\n', stderr);                                                                                      \
            g_failed++;                                                                                               \
        }                                                                                                             \
    } while (0)

static void test_check(void) {
    static const struct {
        int p, f, t, w, ok;
        const char *why;
    } T[] = {
        {1, 1, 1, 1, 1, NULL},
        {1, 2, 1, 2, 1, NULL},
        {1, 2, 2, 4, 1, NULL},
        {2, 2, 2, 8, 1, NULL},
        {1, 4, 1, 4, 1, NULL},
        {1, 2, 2, 2, 0, "--ranks-per-group 2 must equal --pp 1 x --fsdp 2 x --tp 2 = 4"},
        {1, 1, 1, 2, 0, "= 1"},
        {0, 1, 1, 1, 0, "--pp 0"},
        {1, 1, -3, 1, 0, "--tp -3"},
        {1, 1025, 1, 1025, 0, "--fsdp 1025"},
        {1024, 1024, 1024, 1, 0, "= 1073741824"},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        px_mesh_t m = {.size = {T[i].p, T[i].f, T[i].t}};
        char err[200] = "";
        int rc = px_mesh_check(&m, T[i].w, err, sizeof err);
        CHECK((rc == 0) == T[i].ok, "pp%d fsdp%d tp%d W=%d: rc %d (%s)", T[i].p, T[i].f, T[i].t, T[i].w, rc, err);
        if (T[i].why) CHECK(strstr(err, T[i].why) != NULL, "message '%s' lacks '%s'", err, T[i].why);
    }
}

/* Spelled out for fsdp2 x tp2: rank -> (pp, fsdp, tp) and the axis groups. */
static void test_table(void) {
    px_mesh_t m = {.size = {1, 2, 2}};
    static const int coord[4][3] = {{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1, 1}};
    static const int tp_group[4][2] = {{0, 1}, {0, 1}, {2, 3}, {2, 3}};
    static const int fsdp_group[4][2] = {{0, 2}, {1, 3}, {0, 2}, {1, 3}};
    for (int r = 0; r < 4; r++) {
        px_mesh_coord_t c = px_mesh_coord(&m, r);
        CHECK(c.c[PX_MESH_PP] == coord[r][0] && c.c[PX_MESH_FSDP] == coord[r][1] && c.c[PX_MESH_TP] == coord[r][2],
              "rank %d: (%d,%d,%d)", r, c.c[0], c.c[1], c.c[2]);
        int g[2];
        int me = px_mesh_axis_ranks(&m, r, PX_MESH_TP, g);
        CHECK(g[0] == tp_group[r][0] && g[1] == tp_group[r][1] && g[me] == r, "rank %d tp group {%d,%d} me %d", r,
              g[0], g[1], me);
        me = px_mesh_axis_ranks(&m, r, PX_MESH_FSDP, g);
        CHECK(g[0] == fsdp_group[r][0] && g[1] == fsdp_group[r][1] && g[me] == r, "rank %d fsdp group {%d,%d}", r,
              g[0], g[1]);
    }
    char buf[64];
    px_mesh_axis_prefix(&m, 3, PX_MESH_TP, "q7/g0", buf, sizeof buf);
    CHECK(!strcmp(buf, "q7/g0/tp.pp0.fsdp1"), "prefix '%s'", buf);
    px_mesh_format(&m, buf, sizeof buf);
    CHECK(!strcmp(buf, "pp1.fsdp2.tp2"), "format '%s'", buf);
    char small[8];
    int n = px_mesh_axis_prefix(&m, 3, PX_MESH_TP, "q7/g0", small, sizeof small);
    CHECK(n == (int)strlen("q7/g0/tp.pp0.fsdp1") && strlen(small) == 7, "a short buffer truncates, count %d", n);
}

/* Every layout up to 8 ranks: coordinates round-trip; on each axis the
 * groups partition the ranks, have the axis's size, and hold ranks that
 * differ from each other in that coordinate only; prefixes are equal within
 * a group and differ between groups. */
static void test_all_layouts(void) {
    int layouts = 0;
    for (int p = 1; p <= 8; p++)
        for (int f = 1; p * f <= 8; f++)
            for (int t = 1; p * f * t <= 8; t++) {
                px_mesh_t m = {.size = {p, f, t}};
                int w = p * f * t;
                char err[200];
                CHECK(px_mesh_check(&m, w, err, sizeof err) == 0 && px_mesh_ranks(&m) == w, "pp%d fsdp%d tp%d", p, f,
                      t);
                for (int r = 0; r < w; r++) {
                    px_mesh_coord_t c = px_mesh_coord(&m, r);
                    for (int a = 0; a < PX_MESH_AXES; a++)
                        CHECK(c.c[a] >= 0 && c.c[a] < m.size[a], "coordinate in range");
                    CHECK(px_mesh_rank(&m, c) == r, "pp%d fsdp%d tp%d: rank %d round trip", p, f, t, r);
                }
                for (int a = 0; a < PX_MESH_AXES; a++) {
                    int seen[8] = {0};
                    char pre[8][96];
                    for (int r = 0; r < w; r++) px_mesh_axis_prefix(&m, r, (px_mesh_axis_t)a, "q1/g", pre[r], 96);
                    for (int r = 0; r < w; r++) {
                        int g[8];
                        int me = px_mesh_axis_ranks(&m, r, (px_mesh_axis_t)a, g);
                        CHECK(g[me] == r, "rank %d is member %d of its own group", r, me);
                        px_mesh_coord_t cr = px_mesh_coord(&m, r);
                        for (int i = 0; i < m.size[a]; i++) {
                            px_mesh_coord_t ci = px_mesh_coord(&m, g[i]);
                            CHECK(ci.c[a] == i, "member %d has coordinate %d", i, ci.c[a]);
                            for (int b = 0; b < PX_MESH_AXES; b++)
                                if (b != a) CHECK(ci.c[b] == cr.c[b], "same group, same other coordinates");
                            CHECK(!strcmp(pre[g[i]], pre[r]), "one prefix per group: '%s' vs '%s'", pre[g[i]], pre[r]);
                            if (g[i] == r) seen[r]++;
                        }
                        for (int s = 0; s < w; s++) {
                            int member = 0;
                            for (int i = 0; i < m.size[a]; i++) member |= g[i] == s;
                            if (!member)
                                CHECK(strcmp(pre[s], pre[r]) != 0, "ranks %d and %d of different %s groups share '%s'",
                                      s, r, px_mesh_axis_name((px_mesh_axis_t)a), pre[r]);
                        }
                    }
                    for (int r = 0; r < w; r++) CHECK(seen[r] == 1, "rank %d in exactly one group", r);
                }
                layouts++;
            }
    /* Ordered triples with a product n, for n = 1..8: 1+3+3+6+3+9+3+10. */
    CHECK(layouts == 38, "layouts with at most 8 ranks: %d", layouts);
}

int main(void) {
    test_check();
    test_table();
    test_all_layouts();
    printf("test_mesh: %d failed\n", g_failed);
    return g_failed != 0;
}
