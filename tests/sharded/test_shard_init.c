/* Pure checks of sharded.c (no communicator: nothing here communicates).
 *
 * A rank's shard drawn directly (px_shard_init) holds the same bits as the
 * same rank's pieces cut from the whole seeded model (px_shard_load of
 * px_gpt_new), for every rank of several layouts, including an fsdp size
 * that leaves padding (3) and tensor-parallel splits of 2 and 4; m and v
 * start at zero; the pieces of all ranks add up to the padded units. And
 * the rectangles every rank holds (px_shard_rects), as the slices of a
 * checkpoint manifest, cover each logical tensor once and tile each rank's
 * file (the manifest decoder's own checks), for a state of params, m and v
 * and for one with DiLoCo's outer momentum too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "gpt.h"
#include "sharded.h"

static int failures;

#define CHECK(cond, ...)                                  \
    do {                                                  \
        if (!(cond)) {                                    \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);   \
            printf(__VA_ARGS__);                          \
            printf("\n");                                 \
            failures++;                                   \
        }                                                 \
    } while (0)

static void check_layout(const char *preset, int F, int T, uint64_t seed) {
    px_gpt_config_t cfg;
    px_gpt_config_preset(preset, &cfg);
    px_gpt_t *whole = px_gpt_new(&cfg, seed);
    size_t pieces = 0;
    for (int f = 0; f < F; f++) {
        for (int t = 0; t < T; t++) {
            char err[256];
            px_shard_layout_t lay = {.fsdp = F, .fsdp_rank = f, .tp = {T, t}};
            px_shard_t *a = px_shard_new(&cfg, &lay, err, sizeof err), *b = px_shard_new(&cfg, &lay, err, sizeof err);
            CHECK(a && b, "%s F=%d T=%d: %s", preset, F, T, err);
            if (!a || !b) return;
            CHECK(px_shard_init(a, seed) == 0, "init");
            px_shard_load(b, whole);
            px_shard_bufs_t *x = px_shard_bufs(a), *y = px_shard_bufs(b);
            size_t diff = 0;
            for (size_t i = 0; i < x->n; i++) diff += memcmp(&x->params[i], &y->params[i], sizeof(float)) != 0;
            CHECK(diff == 0, "%s F=%d T=%d rank (fsdp %d, tp %d): %zu of %zu floats differ", preset, F, T, f, t, diff,
                  x->n);
            size_t nz = 0;
            for (size_t i = 0; i < x->n; i++) nz += x->m[i] != 0.0f || x->v[i] != 0.0f;
            CHECK(nz == 0, "m and v start at zero");
            if (t == 0) {
                size_t sum = 0;
                for (int u = 0; u < PX_GPT_UNITS(&cfg); u++) {
                    sum += px_shard_unit_padded(a, u) / (size_t)F;
                    CHECK(px_shard_unit_padded(a, u) % (size_t)F == 0, "unit %d padded to a multiple of F", u);
                }
                CHECK(sum == x->n, "the pieces fill the shard: %zu vs %zu", sum, x->n);
                pieces += x->n;
            }
            px_shard_destroy(&a);
            px_shard_destroy(&b);
        }
    }
    /* without tp, the fsdp pieces cover the whole model (plus padding) */
    if (T == 1) CHECK(pieces >= whole->num_params, "F pieces cover the model: %zu < %zu", pieces, whole->num_params);
    printf("%s F=%d T=%d: every rank's drawn shard equals its cut of the whole model\n", preset, F, T);
    px_gpt_destroy(&whole);
}

/* ---- the checkpoint manifest of a sharded group ---- */

typedef struct {
    px_ckpt_manifest_t *m;
    int file, buffer;
} add_ctx_t;

static int add_rect(void *ctx, const px_shard_rect_t *r) {
    add_ctx_t *a = ctx;
    return px_ckpt_manifest_add(a->m, a->file, a->buffer, r->tensor, r->layer, (int64_t)r->K, (int64_t)r->row0,
                                (int64_t)r->nrows, (int64_t)r->col0, (int64_t)r->ncols);
}

/* Every rank's rectangles, as a manifest's slices, cover every logical
 * tensor exactly once and tile every rank's file (the decoder's checks). */
static void check_manifest(const char *preset, int F, int T, int nbuf) {
    px_gpt_config_t cfg;
    px_gpt_config_preset(preset, &cfg);
    px_ckpt_manifest_t m;
    CHECK(px_ckpt_manifest_begin(&m, &cfg, nbuf, F * T, "rank_") == 0, "begin");
    for (int r = 0; r < F * T; r++) {
        px_shard_layout_t lay = {.fsdp = F, .fsdp_rank = r / T, .tp = {T, r % T}};
        for (int b = 0; b < nbuf; b++) {
            add_ctx_t a = {&m, r, b};
            CHECK(px_shard_rects(&cfg, &lay, add_rect, &a) == 0, "%s F=%d T=%d rank %d: a rectangle was refused",
                  preset, F, T, r);
        }
        char err[256];
        px_shard_t *sh = px_shard_new(&cfg, &lay, err, sizeof err);
        size_t runs[64][2], nr = px_shard_runs(sh, runs, 64), floats = 0;
        CHECK(nr <= 64, "runs fit");
        for (size_t i = 0; i < nr && i < 64; i++) floats += runs[i][1];
        CHECK(m.files[r].bytes == (size_t)nbuf * floats * sizeof(float),
              "rank %d's file holds its runs: %llu vs %zu bytes", r, (unsigned long long)m.files[r].bytes,
              (size_t)nbuf * floats * sizeof(float));
        px_shard_destroy(&sh);
    }
    char *text = px_ckpt_manifest_encode(&m);
    px_ckpt_manifest_t back;
    char err[512] = "";
    int rc = text ? px_ckpt_manifest_decode(text, strlen(text), &back, err, sizeof err) : -1;
    CHECK(rc == 0, "%s F=%d T=%d: the manifest decodes: %s", preset, F, T, err);
    if (rc == 0) {
        CHECK(px_ckpt_manifest_matches(&back, &cfg, err, sizeof err) == 0, "matches the model: %s", err);
        CHECK(back.outer_momentum == (nbuf == PX_STATE_MAXBUF), "%d buffers: outer_momentum %d", nbuf,
              back.outer_momentum);
        px_ckpt_manifest_free(&back);
    }
    free(text);
    px_ckpt_manifest_free(&m);
    printf("%s F=%d T=%d nbuf=%d: the ranks' rectangles tile every tensor and file\n", preset, F, T, nbuf);
}

int main(void) {
    int layouts[][2] = {{1, 2}, {2, 1}, {2, 2}, {3, 1}, {4, 1}, {1, 4}, {3, 2}};
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        check_layout("tiny", layouts[i][0], layouts[i][1], 7);
        check_layout("small", layouts[i][0], layouts[i][1], 1337);
        for (int nbuf = PX_STATE_NBUF; nbuf <= PX_STATE_MAXBUF; nbuf++) {
            check_manifest("tiny", layouts[i][0], layouts[i][1], nbuf);
            check_manifest("small", layouts[i][0], layouts[i][1], nbuf);
        }
    }
    if (failures) {
        printf("%d failures\n", failures);
        return 1;
    }
    printf("PASS\n");
    return 0;
}
