/* The checkpoint library against real files in a scratch folder: round trip
 * (bitwise), a layout written as slices across two files assembled by the
 * reader, every kind of damage detected with the file and the fault named
 * and the previous checkpoint restored instead, mismatches refused, manifest
 * decoding as a table of bad inputs, retention (keeps the protected and the
 * newest, skips one a reader holds, clears dead writers' leftovers), a
 * full disk (RLIMIT_FSIZE) failing the save cleanly, and data files written
 * around the page cache (O_DIRECT, the default, with an unaligned tail)
 * byte for byte equal to buffered ones (PX_CKPT_DIRECT=0), whether the
 * buffers line up with the file or not; a whole state split into data
 * files (the split a save uses; files cutting rows and pages; loaded back
 * bitwise), hashed in the snapshot pass (the writer's own checksums, the
 * same files, a snapshot changed after its hash refused); and DiLoCo's
 * outer momentum (a fourth buffer): round trip, written in parts and by the
 * saver, loaded into a state of three buffers and the other way (zeroed and
 * reported), a partial or misshapen one refused naming the tensor; and a
 * state still arriving (a GPU's download) waited for before it is read. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckpt.h"
#include "ckpt_saver.h"
#include "px_check.h"
#include "rng.h"

static int failed;
static char root[256];
static px_gpt_config_t cfg;

/* A state of the tiny model whose every value depends on (step, seed). */
static void fill_state(px_train_state_t *s, int64_t step) {
    for (int b = 0; b < s->nbuf; b++) {
        px_rng_t r = {px_hash4(7, (uint64_t)step, (uint64_t)b, 0)};
        for (size_t i = 0; i < s->n; i++) s->buf[b][i] = (float)(px_rng_uniform(&r) - 0.5);
    }
    s->step = step;
    s->seed = 1337;
}

/* Buffers [0, nbuf) bitwise, step and seed. */
static int same_buffers(const px_train_state_t *a, const px_train_state_t *b, int nbuf) {
    for (int k = 0; k < nbuf; k++)
        if (memcmp(a->buf[k], b->buf[k], a->n * sizeof(float))) return 0;
    return a->step == b->step && a->seed == b->seed;
}

static int same_state(const px_train_state_t *a, const px_train_state_t *b) {
    return a->nbuf == b->nbuf && same_buffers(a, b, a->nbuf);
}

static px_ckpt_meta_t meta = {"job1", 5, 3, 1, "a", 1, 1, 1, 1, {1000, 10, 12, 64, 0.001f, 0.0001f}, 0};

static void save(const char *dir, px_train_state_t *s, int64_t step) {
    char err[600];
    px_ckpt_result_t res;
    fill_state(s, step);
    CHECK(px_ckpt_write(dir, s, &cfg, &meta, &res, err, sizeof err) == 0, "write step %lld: %s", (long long)step, err);
}

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...) {
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (system(cmd) != 0) fprintf(stderr, "note: '%s' failed\n", cmd);
}

static void test_round_trip(px_train_state_t *s, px_train_state_t *d) {
    char dir[300], err[600], path[4200];
    snprintf(dir, sizeof dir, "%s/rt", root);
    px_ckpt_result_t res;
    fill_state(s, 42);
    CHECK(px_ckpt_write(dir, s, &cfg, &meta, &res, err, sizeof err) == 0, "round trip write: %s", err);
    px_ckpt_path(dir, 42, path, sizeof path);
    CHECK(!strcmp(res.path, path), "published at %s, expected %s", res.path, path);
    CHECK(res.bytes > 3 * s->n * sizeof(float), "bytes %" PRIu64, res.bytes);
    px_ckpt_fault_t f;
    px_ckpt_manifest_t m;
    memset(d->buf[0], 0, d->n * sizeof(float));
    CHECK(px_ckpt_load(path, &cfg, d, &m, &f) == 0, "load: %s: %s", f.file, f.fault);
    CHECK(same_state(s, d), "round trip is not bitwise");
    CHECK(m.step == 42 && m.quorum_id == 5 && !strcmp(m.job, "job1") && m.groups == 3 && !strcmp(m.writer_group, "a"),
          "manifest fields step=%lld qid=%lld job=%s", (long long)m.step, (long long)m.quorum_id, m.job);
    CHECK(px_ckpt_manifest_find(&m, "h.1.attn.c_attn.weight") >= 0, "GPT-2 name missing");
    int k = px_ckpt_manifest_find(&m, "optimizer.exp_avg_sq.h.0.mlp.c_fc.weight");
    CHECK(k >= 0 && m.tensors[k].ndim == 2 && m.tensors[k].shape[0] == 4 * cfg.channels &&
              m.tensors[k].shape[1] == cfg.channels, "fc weight shape");
    px_ckpt_manifest_free(&m);
    /* The same state saved again replaces its copy; another state of the
     * same step is published and the old one kept aside as
     * step_N.replaced-TIME, where listing no longer sees it. */
    fill_state(s, 42);
    CHECK(px_ckpt_write(dir, s, &cfg, &meta, &res, err, sizeof err) == 0, "the same again: %s", err);
    CHECK(px_ckpt_count_aside(dir, "replaced") == 0, "a copy of the same bytes kept aside");
    s->buf[0][0] = 123.0f;
    CHECK(px_ckpt_write(dir, s, &cfg, &meta, &res, err, sizeof err) == 0, "rewrite: %s", err);
    CHECK(px_ckpt_load(path, &cfg, d, NULL, &f) == 0 && d->buf[0][0] == 123.0f, "rewrite did not replace");
    int64_t *steps;
    CHECK(px_ckpt_list(dir, &steps) == 1 && steps[0] == 42, "list after rewrite");
    free(steps);
    CHECK(px_ckpt_count_aside(dir, "replaced") == 1 && px_ckpt_count_aside(dir, "corrupt") == 0,
          "the replaced copy is kept aside, once");
}

/* A state written by "two ranks": wte split by columns (dim 1), the
 * c_attn weights by rows, everything else whole, spread over two files in
 * an order unlike the buffer's. The reader must assemble it bitwise. */
static void test_sliced(px_train_state_t *s, px_train_state_t *d) {
    char dir[300], path[4400];
    snprintf(dir, sizeof dir, "%s/sliced/step_00000009", root);
    sh("mkdir -p %s", dir);
    fill_state(s, 9);
    px_ckpt_manifest_t m;
    CHECK(px_ckpt_manifest_begin(&m, &cfg, PX_STATE_NBUF, 2, "r") == 0, "manifest");
    px_ckpt_file_t *files = m.files;
    int nl = px_ckpt_logical_tensors(&cfg, PX_STATE_NBUF, NULL);
    px_ckpt_logical_t *lt = calloc((size_t)nl, sizeof *lt);
    px_ckpt_logical_tensors(&cfg, PX_STATE_NBUF, lt);
    FILE *fp[2];
    XXH3_state_t *h[2];
    uint64_t pos[2] = {0, 0};
    for (int f = 0; f < 2; f++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[f].name);
        fp[f] = fopen(path, "wb");
        h[f] = XXH3_createState();
        XXH3_64bits_reset(h[f]);
    }
    for (int i = nl - 1; i >= 0; i--) { /* reverse order: offsets are what counts */
        px_ckpt_tensor_t *t = &m.tensors[i];
        const float *src = s->buf[lt[i].buffer] + lt[i].offset;
        int split = t->ndim == 2 && (strstr(t->name, "wte") || strstr(t->name, "c_attn.weight"));
        int dim = strstr(t->name, "wte") ? 1 : 0;
        int parts = split ? 2 : 1;
        free(t->slices);
        t->slices = calloc((size_t)parts, sizeof *t->slices);
        t->nslices = parts;
        for (int p = 0; p < parts; p++) {
            px_ckpt_slice_t *sl = &t->slices[p];
            memcpy(sl->count, t->shape, sizeof sl->count);
            if (split) {
                int64_t half = t->shape[dim] / 2;
                sl->start[dim] = p ? half : 0;
                sl->count[dim] = p ? t->shape[dim] - half : half;
            }
            int f = (i + p) % 2;
            sl->file = f;
            sl->offset = pos[f];
            int64_t rows = t->ndim == 2 ? sl->count[0] : 1, cols = sl->count[t->ndim - 1];
            int64_t width = t->ndim == 2 ? t->shape[1] : t->shape[0];
            for (int64_t r = 0; r < rows; r++) {
                const float *row = src + (sl->start[0] + r) * (t->ndim == 2 ? width : 0) + (t->ndim == 2 ? sl->start[1] : sl->start[0]);
                fwrite(row, sizeof(float), (size_t)cols, fp[f]);
                XXH3_64bits_update(h[f], row, (size_t)cols * sizeof(float));
            }
            sl->bytes = (uint64_t)(rows * cols) * sizeof(float);
            pos[f] += sl->bytes;
        }
    }
    for (int f = 0; f < 2; f++) {
        fclose(fp[f]);
        files[f].bytes = pos[f];
        files[f].xxh3 = XXH3_64bits_digest(h[f]);
        XXH3_freeState(h[f]);
    }
    m.step = 9;
    m.seed = 1337;
    m.format_version = PX_CKPT_FORMAT_VERSION;
    char *text = px_ckpt_manifest_encode(&m);
    snprintf(path, sizeof path, "%s/%s", dir, PX_CKPT_MANIFEST);
    FILE *mf = fopen(path, "w");
    fputs(text, mf);
    fclose(mf);
    free(text);
    px_ckpt_manifest_free(&m);
    free(lt);
    px_ckpt_fault_t fl;
    CHECK(px_ckpt_load(dir, &cfg, d, NULL, &fl) == 0, "sliced load: %s: %s", fl.file, fl.fault);
    CHECK(same_state(s, d), "sliced layout assembled wrong");
}

typedef struct {
    int n;
    char last[5000];
} rejects_t;

static void on_reject(void *ctx, const char *path, const px_ckpt_fault_t *f) {
    rejects_t *r = ctx;
    r->n++;
    snprintf(r->last, sizeof r->last, "%s | %s: %s", path, f->file, f->fault);
    printf("rejected %s: %s: %s\n", path, f->file, f->fault);
}

/* Damage the newest of two checkpoints in one way; restore must skip it with
 * the file and fault named, and load the older one bitwise. */
static void damage_case(px_train_state_t *s, px_train_state_t *d, const char *name, const char *cmd, const char *want_file,
                        const char *want_fault) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/dmg-%s", root, name);
    save(dir, s, 10);
    save(dir, s, 20);
    sh("cd %s/step_00000020 && %s", dir, cmd);
    rejects_t r = {0, ""};
    int64_t got = px_ckpt_restore_newest(dir, &cfg, "job1", 1337, d, on_reject, &r);
    fill_state(s, 10);
    CHECK(got == 10 && same_state(s, d), "%s: restored %lld, expected the previous (10) bitwise", name, (long long)got);
    CHECK(r.n == 1 && strstr(r.last, want_file) && strstr(r.last, want_fault), "%s: rejection '%s' should name %s and '%s'",
          name, r.last, want_file, want_fault);
}

static void test_damage(px_train_state_t *s, px_train_state_t *d) {
    /* Byte 1000 of the data: the checksum catches a single flipped byte. */
    damage_case(s, d, "flip", "printf '\\377' | dd of=data00000.bin bs=1 seek=1000 conv=notrunc 2>/dev/null",
                "data00000.bin", "checksum mismatch");
    damage_case(s, d, "short", "truncate -s -4096 data00000.bin", "data00000.bin", "short");
    damage_case(s, d, "long", "printf x >> data00000.bin", "data00000.bin", "too long");
    damage_case(s, d, "missing-data", "rm data00000.bin", "data00000.bin", "missing");
    damage_case(s, d, "missing-manifest", "rm manifest.json", "manifest.json", "cannot open");
    damage_case(s, d, "garbage-manifest", "head -c 300 manifest.json > m && mv m manifest.json", "manifest.json",
                "unparsable manifest: not valid JSON");
    damage_case(s, d, "future", "sed -i 's/\"format_version\": 1/\"format_version\": 99/' manifest.json", "manifest.json",
                "newer than this build reads");
    damage_case(s, d, "wrong-step", "sed -i 's/\"step\": 20/\"step\": 21/' manifest.json", "manifest.json",
                "says step 21");
    /* A manifest whose listed checksum was edited: the data no longer proves it. */
    damage_case(s, d, "edited-sum", "sed -i -E 's/\"xxh3_64\": \"[0-9a-f]{16}\"/\"xxh3_64\": \"0123456789abcdef\"/' manifest.json",
                "data00000.bin", "checksum mismatch");
}

static void test_mismatch(px_train_state_t *s, px_train_state_t *d) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/mismatch", root);
    save(dir, s, 10);
    rejects_t r = {0, ""};
    CHECK(px_ckpt_restore_newest(dir, &cfg, "job1", 99, d, on_reject, &r) == -2 && strstr(r.last, "seed 1337"),
          "seed mismatch: %s", r.last);
    CHECK(px_ckpt_restore_newest(dir, &cfg, "other", 1337, d, on_reject, &r) == -2 && strstr(r.last, "job \"job1\""),
          "job mismatch: %s", r.last);
    px_gpt_config_t small;
    px_gpt_config_preset("small", &small);
    px_train_state_t big;
    px_train_state_t like = *s;
    size_t sizes[PX_GPT_NUM_TENSORS];
    like.n = px_gpt_tensor_sizes(&small, sizes);
    px_state_alloc_like(&big, &like);
    CHECK(px_ckpt_restore_newest(dir, &small, "job1", 1337, &big, on_reject, &r) == -2 &&
              strstr(r.last, "model config mismatch") && strstr(r.last, "manifest.json"),
          "model mismatch: %s", r.last);
    px_state_free(&big);
    snprintf(dir, sizeof dir, "%s/none", root);
    CHECK(px_ckpt_restore_newest(dir, &cfg, "job1", 1337, d, NULL, NULL) == -1, "no folder: nothing to restore");
}

/* Manifest decoding: each bad input refused with its fault. */
static void test_decode_table(px_train_state_t *s) {
    char dir[300], path[4300];
    snprintf(dir, sizeof dir, "%s/table", root);
    save(dir, s, 1);
    snprintf(path, sizeof path, "%s/step_00000001/%s", dir, PX_CKPT_MANIFEST);
    FILE *f = fopen(path, "r");
    static char good[1 << 20];
    size_t len = fread(good, 1, sizeof good - 1, f);
    good[len] = 0;
    fclose(f);
    px_ckpt_manifest_t m;
    char err[600];
    CHECK(px_ckpt_manifest_decode(good, len, &m, err, sizeof err) == 0, "good manifest refused: %s", err);
    px_ckpt_manifest_free(&m);
    struct {
        const char *from, *to, *fault;
    } cases[] = {
        {"\"format\": \"phalanx-checkpoint\"", "\"format\": \"other\"", "not phalanx-checkpoint"},
        {"\"dtype\": \"F32\"", "\"dtype\": \"BF16\"", "dtype"},
        {"\"name\": \"data00000.bin\"", "\"name\": \"../etc/passwd\"", "not a plain file name"},
        {"\"file\": \"data00000.bin\"", "\"file\": \"nope.bin\"", "is not in \"files\""},
        {"\"num_layers\": 2", "\"num_layers\": -2", "num_layers"},
        {"\"offset\": 0,", "\"offset\": 4,", "in no slice"},
        {"\"step\": 1,", "\"step\": \"1\",", "\"step\" missing or not an integer"},
        {"\"channels\": 64", "\"channels\": 64, \"channels\": 64", "not valid JSON"},
        {"\"xxh3_64\": \"", "\"xxh3_64\": \"g", "16 hex digits"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *p = strstr(good, cases[i].from);
        CHECK(p != NULL, "case %zu: '%s' not in the manifest", i, cases[i].from);
        if (!p) continue;
        static char bad[1 << 20];
        size_t pre = (size_t)(p - good);
        snprintf(bad, sizeof bad, "%.*s%s%s", (int)pre, good, cases[i].to, p + strlen(cases[i].from));
        err[0] = 0;
        int rc = px_ckpt_manifest_decode(bad, strlen(bad), &m, err, sizeof err);
        CHECK(rc != 0 && strstr(err, cases[i].fault), "case %zu (%s): rc=%d err='%s', want '%s'", i, cases[i].to, rc, err,
              cases[i].fault);
        if (rc == 0) px_ckpt_manifest_free(&m);
    }
    CHECK(px_ckpt_manifest_decode("[]", 2, &m, err, sizeof err) != 0 && strstr(err, "not a JSON object"), "array: %s", err);
    /* Seeded mutations (bytes replaced, inserted, the text cut): decoding never
     * crashes, and whatever it accepts still passes its own invariants. */
    px_rng_t r = {99};
    int accepted = 0;
    for (int i = 0; i < 3000; i++) {
        static char bad[1 << 20];
        size_t n = len;
        memcpy(bad, good, len);
        for (int k = 0, edits = 1 + (int)(px_rng_next(&r) % 4); k < edits; k++) {
            size_t at = px_rng_next(&r) % n;
            switch (px_rng_next(&r) % 3) {
            case 0: bad[at] = "0123456789-,:[]{}\"e."[px_rng_next(&r) % 20]; break;
            case 1: n = at; break;
            default: bad[at] = (char)(px_rng_next(&r) & 0xff);
            }
            if (n == 0) n = 1;
        }
        if (px_ckpt_manifest_decode(bad, n, &m, err, sizeof err) == 0) {
            accepted++;
            char why[600];
            CHECK(px_ckpt_manifest_matches(&m, &m.model, why, sizeof why) == 0 || strstr(why, "missing") ||
                      strstr(why, "shape"), "mutation %d accepted an inconsistent manifest: %s", i, why);
            px_ckpt_manifest_free(&m);
        }
    }
    printf("manifest mutations: 3000 decoded without a crash, %d accepted (harmless edits)\n", accepted);
}

static int exists(const char *dir, int64_t step) {
    char p[4200];
    struct stat st;
    px_ckpt_path(dir, step, p, sizeof p);
    return stat(p, &st) == 0;
}

static void test_retention(px_train_state_t *s) {
    char dir[300], mpath[4300];
    snprintf(dir, sizeof dir, "%s/keep", root);
    for (int64_t st = 10; st <= 50; st += 10) save(dir, s, st);
    /* A reader holds step 10; a dead writer left a temporary folder long ago. */
    snprintf(mpath, sizeof mpath, "%s/step_00000010/%s", dir, PX_CKPT_MANIFEST);
    int fd = open(mpath, O_RDONLY);
    flock(fd, LOCK_SH);
    sh("mkdir -p %s/.tmp-step_00000060-deadhost-1 && touch -d '2 hours ago' %s/.tmp-step_00000060-deadhost-1", dir, dir);
    sh("mkdir -p %s/.tmp-step_00000070-livehost-1", dir);
    int del = px_ckpt_retain(dir, 2, 20);
    CHECK(del == 1, "deleted %d, expected 1 (step 30)", del);
    CHECK(exists(dir, 50) && exists(dir, 40) && exists(dir, 20) && exists(dir, 10) && !exists(dir, 30),
          "retention kept the wrong set");
    struct stat st;
    char p[400];
    snprintf(p, sizeof p, "%s/.tmp-step_00000060-deadhost-1", dir);
    CHECK(stat(p, &st) != 0, "an hour-old temporary folder was not removed");
    snprintf(p, sizeof p, "%s/.tmp-step_00000070-livehost-1", dir);
    CHECK(stat(p, &st) == 0, "a fresh temporary folder (a live writer's) was removed");
    close(fd);
    CHECK(px_ckpt_retain(dir, 2, 20) == 1 && !exists(dir, 10), "released step 10 should go now");
}

/* A damaged folder moved aside: renamed, not copied or deleted; listing,
 * restore and retention no longer see it; a folder being read stays; two
 * moves of one step in one second get distinct names. */
static void test_move_aside(px_train_state_t *s, px_train_state_t *d) {
    char dir[300], path[4200], moved[4400], again[4400], mpath[4300];
    snprintf(dir, sizeof dir, "%s/aside", root);
    save(dir, s, 10);
    save(dir, s, 20);
    px_ckpt_path(dir, 20, path, sizeof path);
    struct stat before, after;
    CHECK(stat(path, &before) == 0, "step 20 saved");
    snprintf(mpath, sizeof mpath, "%s/%s", path, PX_CKPT_MANIFEST);
    int fd = open(mpath, O_RDONLY);
    flock(fd, LOCK_SH); /* a reader */
    CHECK(px_ckpt_move_aside(path, "corrupt", 1, moved, sizeof moved) == -1 && errno == EBUSY && exists(dir, 20),
          "a folder being read was moved");
    close(fd);
    CHECK(px_ckpt_move_aside(path, "corrupt", 1, moved, sizeof moved) == 0 && !exists(dir, 20), "move: %s",
          strerror(errno));
    CHECK(strstr(moved, "/step_00000020.corrupt-") && stat(moved, &after) == 0 && after.st_ino == before.st_ino,
          "moved to '%s', the same folder", moved);
    CHECK(px_ckpt_move_aside(path, "corrupt", 1, NULL, 0) == -1 && errno == ENOENT, "moving a moved one: ENOENT");
    save(dir, s, 20);
    CHECK(px_ckpt_move_aside(path, "corrupt", 0, again, sizeof again) == 0 && strcmp(again, moved) != 0,
          "a second move of step 20: '%s' after '%s'", again, moved);
    CHECK(px_ckpt_count_aside(dir, "corrupt") == 2, "two aside");
    int64_t *steps;
    CHECK(px_ckpt_list(dir, &steps) == 1 && steps[0] == 10, "listing sees only step 10");
    free(steps);
    CHECK(px_ckpt_restore_newest(dir, &cfg, "job1", 1337, d, NULL, NULL) == 10, "restore takes step 10");
    CHECK(px_ckpt_retain(dir, 1, -1) == 0 && stat(moved, &after) == 0 && stat(again, &after) == 0,
          "retention left the folders aside alone");
    printf("moved aside: %s\n", strrchr(moved, '/') + 1);
}

/* A full disk: writes fail with EFBIG, the save reports it, nothing is
 * published, nothing is left behind, the previous checkpoint still loads. */
static void test_disk_full(px_train_state_t *s, px_train_state_t *d) {
    char dir[300], err[600];
    snprintf(dir, sizeof dir, "%s/full", root);
    save(dir, s, 10);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 100000;
    setrlimit(RLIMIT_FSIZE, &lim);
    px_ckpt_result_t res;
    fill_state(s, 20);
    int rc = px_ckpt_write(dir, s, &cfg, &meta, &res, err, sizeof err);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK(rc != 0 && strstr(err, "data00000.bin") && strstr(err, "too large"), "disk full: rc=%d err='%s'", rc, err);
    printf("disk full: %s\n", err);
    int64_t *steps;
    CHECK(px_ckpt_list(dir, &steps) == 1 && steps[0] == 10, "a failed save published something");
    free(steps);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A %s | grep -v step_00000010)\"", dir);
    CHECK(system(cmd) == 0, "a failed save left files behind in %s", dir);
    CHECK(px_ckpt_restore_newest(dir, &cfg, "job1", 1337, d, NULL, NULL) == 10, "previous checkpoint lost");
}

static void test_direct(px_train_state_t *s, px_train_state_t *d) {
    char a[300], b[300];
    snprintf(a, sizeof a, "%s/direct", root);
    snprintf(b, sizeof b, "%s/buffered", root);
    save(a, s, 50);
    setenv("PX_CKPT_DIRECT", "0", 1);
    save(b, s, 50);
    unsetenv("PX_CKPT_DIRECT");
    struct stat st;
    char f[400];
    snprintf(f, sizeof f, "%s/step_00000050/data00000.bin", a);
    CHECK(stat(f, &st) == 0 && st.st_size % 4096 != 0, "the data file should end in a partial block (size %lld)",
          (long long)st.st_size);
    char cmd[1000];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s/step_00000050/data00000.bin", f, b);
    CHECK(system(cmd) == 0, "direct and buffered writes differ (%s)", cmd);
    char path[400];
    px_ckpt_fault_t fl;
    snprintf(path, sizeof path, "%s/step_00000050", a);
    memset(d->buf[0], 0, d->n * sizeof(float));
    CHECK(px_ckpt_load(path, &cfg, d, NULL, &fl) == 0 && same_state(s, d), "the direct write does not load: %s: %s",
          fl.file, fl.fault);
}

/* s's contents in buffers of a view placed shift[b] bytes past a 4096-byte
 * boundary (blocks[b] to free): the writer sends a buffer to the disk
 * straight from memory when its address and its file offset line up, and
 * through its aligned buffer when they do not. */
static void placed_copy(px_train_state_t *dst, float *blocks[], const px_train_state_t *s, const size_t shift[]) {
    *dst = *s;
    dst->owned = 0;
    for (int b = 0; b < s->nbuf; b++) {
        blocks[b] = aligned_alloc(4096, s->n * sizeof(float) + 8192);
        CHECK(blocks[b] != NULL, "out of memory");
        dst->buf[b] = (float *)((char *)blocks[b] + shift[b]);
        memcpy(dst->buf[b], s->buf[b], s->n * sizeof(float));
    }
}

/* The same state written from buffers that line up with their files from
 * the start (each on a page, as px_state_alloc_like's are), never, and from
 * the second buffer on, in the split a save uses and in parts of three
 * pages (cutting rows): every data file byte for byte the buffered one. */
static void test_direct_layouts(px_train_state_t *s) {
    char buffered[400], dir[300], err[600], cmd[1400];
    size_t nb = s->n * sizeof(float);
    CHECK(nb % 4096 != 0, "the tiny model's buffers (%zu bytes) should not be whole blocks", nb);
    const size_t layouts[][PX_STATE_NBUF] = {{4, 4, 4}, {4, 0, 0}, {0, 0, 0}};
    const char *names[] = {"never", "second", "paged"};
    const size_t parts[] = {px_ckpt_part_floats(s->n), 3 * 1024};
    px_ckpt_result_t res;
    for (int z = 0; z < 2; z++) {
        snprintf(buffered, sizeof buffered, "%s/buffered-%d", root, z);
        fill_state(s, 50);
        setenv("PX_CKPT_DIRECT", "0", 1);
        CHECK(px_ckpt_write_files(buffered, s, &cfg, &meta, parts[z], NULL, &res, err, sizeof err) == 0, "buffered: %s", err);
        unsetenv("PX_CKPT_DIRECT");
        for (int l = 0; l < 3; l++) {
            px_train_state_t v;
            float *blocks[PX_STATE_NBUF];
            placed_copy(&v, blocks, s, layouts[l]);
            snprintf(dir, sizeof dir, "%s/direct-%s-%d", root, names[l], z);
            CHECK(px_ckpt_write_files(dir, &v, &cfg, &meta, parts[z], NULL, &res, err, sizeof err) == 0, "%s layout: %s",
                  names[l], err);
            snprintf(cmd, sizeof cmd, "cd %s/step_00000050 && n=0 && for f in data*.bin; do n=$((n+1)); "
                     "cmp -s $f %s/step_00000050/$f || exit 1; done && test $n = %d", buffered, dir,
                     PX_STATE_NBUF * px_ckpt_nparts(s->n, parts[z]));
            CHECK(system(cmd) == 0, "the %s layout's direct write differs from the buffered one (%s)", names[l], cmd);
            for (int b = 0; b < PX_STATE_NBUF; b++) free(blocks[b]);
        }
    }
}

/* ---- a whole state in several data files ------------------------------- */

/* The split a save uses: each buffer in 1 to PX_CKPT_BUFFER_FILES parts of
 * whole pages (so each file starts on a page of the snapshot), covering it
 * with less than one part to spare, parts of at least PX_CKPT_FILE_MIN
 * bytes unless there is only one. */
static void test_file_rule(void) {
    const size_t page = PX_CKPT_FILE_ALIGN / sizeof(float), min = PX_CKPT_FILE_MIN / sizeof(float);
    const size_t sizes[] = {0, 1, page, min - 1, min, 3 * min + 1, 3290624, 124475904, (size_t)25 << 30};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i], per = px_ckpt_part_floats(n);
        int k = px_ckpt_nparts(n, per);
        CHECK(per > 0 && per % page == 0, "%zu floats: parts of %zu", n, per);
        CHECK(k >= 1 && k <= PX_CKPT_BUFFER_FILES && (size_t)k * per >= n && (n == 0 || (size_t)(k - 1) * per < n),
              "%zu floats: %d parts of %zu", n, k, per);
        CHECK(k == 1 || per >= min, "%zu floats: %d parts of %zu floats", n, k, per);
        if (n >= PX_CKPT_BUFFER_FILES * min) CHECK(k == PX_CKPT_BUFFER_FILES, "%zu floats: %d parts", n, k);
        if (n >= 2 * min) CHECK(k >= 2, "%zu floats in one part", n);
    }
    CHECK(px_ckpt_nparts(100, 0) == -1, "parts of no floats accepted");
    CHECK(px_ckpt_nparts((size_t)1 << 40, 1) == -1, "an absurd number of parts accepted");
}

/* Data file f of the checkpoint at path: its size (-1: none). */
static long long file_size(const char *path, int f) {
    char file[4400];
    struct stat st;
    snprintf(file, sizeof file, "%s/data%05d.bin", path, f);
    return stat(file, &st) == 0 ? (long long)st.st_size : -1;
}

/* An optimizer step as a pass (px_ckpt_pass_*): every part of src on its
 * own thread in rounds of `round` floats, each round "updated" (a float
 * changed) before it is passed; dst and hashes as px_ckpt_snapshot leaves
 * them. */
static int fake_pass(px_train_state_t *dst, px_train_state_t *src, size_t per, size_t round, uint64_t *hashes) {
    px_ckpt_pass_t *p = px_ckpt_pass_begin(dst, src, per);
    int parts = px_ckpt_nparts(src->n, per);
    if (!p) return -1;
#pragma omp parallel for schedule(dynamic, 1) num_threads(2)
    for (int k = 0; k < parts; k++)
        for (size_t lo = (size_t)k * per; lo < (size_t)(k + 1) * per && lo < src->n; lo += round) {
            size_t hi = lo + round < (size_t)(k + 1) * per ? lo + round : (size_t)(k + 1) * per;
            hi = hi < src->n ? hi : src->n;
            for (int b = 0; b < src->nbuf; b++) src->buf[b][lo] += 1.0f;
            px_ckpt_pass_block(p, k, lo, hi);
        }
    return px_ckpt_pass_end(p, hashes);
}

/* The tiny state written in parts of several sizes (whole pages; an odd
 * number of floats, so files cut rows and pages; one float short of a
 * buffer; a whole buffer): every file but each buffer's last exactly that
 * size, the manifest's slices accepted by the decoder, and the state
 * loaded back bitwise (files read in parallel; of two damaged, the first
 * is named). Then the saver's ways: px_ckpt_snapshot copies and
 * hashes in one pass on 2 threads, and a pass (an optimizer step) copies
 * and hashes as it updates; their checksums are the writer's own, the
 * files written with them are byte for byte those, and a snapshot changed
 * after it was hashed is refused on load, naming the file that changed. A
 * pass that skips a block or goes out of order gives no checksums. */
static void test_files(px_train_state_t *s, px_train_state_t *d) {
    const size_t sizes[] = {1024, 3 * 1024, 1025, s->n - 1, s->n};
    char dir[300], hdir[300], path[4200], hpath[4300], err[600], cmd[13000];
    px_ckpt_result_t res;
    px_ckpt_fault_t fl;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t per = sizes[i];
        int parts = px_ckpt_nparts(s->n, per), n = s->nbuf * parts;
        snprintf(dir, sizeof dir, "%s/files-%zu", root, per);
        fill_state(s, 60);
        CHECK(px_ckpt_write_files(dir, s, &cfg, &meta, per, NULL, &res, err, sizeof err) == 0, "parts of %zu: %s", per, err);
        px_ckpt_path(dir, 60, path, sizeof path);
        for (int f = 0; f < n; f++) {
            size_t k = (size_t)(f % parts), want = (k + 1) * per <= s->n ? per : s->n - k * per;
            CHECK(file_size(path, f) == (long long)(want * sizeof(float)), "parts of %zu: file %d of %d holds %lld bytes",
                  per, f, n, file_size(path, f));
        }
        CHECK(file_size(path, n) == -1, "parts of %zu: more than %d files", per, n);
        px_ckpt_manifest_t m;
        memset(d->buf[0], 0, d->n * sizeof(float));
        CHECK(px_ckpt_load(path, &cfg, d, &m, &fl) == 0 && same_state(s, d), "parts of %zu do not load: %s: %s", per,
              fl.file, fl.fault);
        CHECK(m.nfiles == n, "parts of %zu: the manifest lists %d files, not %d", per, m.nfiles, n);
        if (i == 0) { /* files load in parallel: two damaged, the first one is named */
            snprintf(cmd, sizeof cmd, "cp -r %s %s-two && cd %s-two && for f in data00005.bin data00002.bin; do "
                     "printf '\\377' | dd of=$f bs=1 seek=100 conv=notrunc 2>/dev/null; done", path, path, path);
            sh("%s", cmd);
            snprintf(hpath, sizeof hpath, "%s-two", path);
            CHECK(px_ckpt_load(hpath, &cfg, d, NULL, &fl) != 0 && strstr(fl.file, "data00002.bin") &&
                      strstr(fl.fault, "checksum mismatch"),
                  "two damaged files: the fault should name data00002.bin: '%s: %s'", fl.file, fl.fault);
        }

        /* the saver's ways */
        px_train_state_t snap;
        uint64_t *hashes = calloc((size_t)n, sizeof *hashes), *passed = calloc((size_t)n, sizeof *passed);
        CHECK(hashes && passed && px_state_alloc_like(&snap, s) == 0, "out of memory");
        CHECK(px_ckpt_snapshot(&snap, s, per, hashes, 2) == 0, "parts of %zu: no hashes", per);
        snap.step = s->step, snap.seed = s->seed;
        CHECK(same_state(s, &snap), "parts of %zu: the snapshot is not the state", per);
        for (int f = 0; f < n && f < m.nfiles; f++)
            CHECK(hashes[f] == m.files[f].xxh3, "parts of %zu: file %d hashed %016" PRIx64 " in the snapshot, "
                  "%016" PRIx64 " by the writer", per, f, hashes[f], m.files[f].xxh3);
        px_ckpt_manifest_free(&m);
        snprintf(hdir, sizeof hdir, "%s/hashed-%zu", root, per);
        CHECK(px_ckpt_write_files(hdir, &snap, &cfg, &meta, per, hashes, &res, err, sizeof err) == 0,
              "parts of %zu with their checksums: %s", per, err);
        px_ckpt_path(hdir, 60, hpath, sizeof hpath);
        snprintf(cmd, sizeof cmd, "cd %s && for f in data*.bin; do cmp -s $f %s/$f || exit 1; done", path, hpath);
        CHECK(system(cmd) == 0, "parts of %zu: written with the snapshot's checksums, they differ", per);
        CHECK(px_ckpt_load(hpath, &cfg, d, NULL, &fl) == 0 && same_state(s, d),
              "parts of %zu written with the snapshot's checksums do not load: %s: %s", per, fl.file, fl.fault);
        /* a float of the last file changed between the hash and the write */
        snap.buf[snap.nbuf - 1][snap.n - 1] += 1.0f;
        CHECK(px_ckpt_write_files(hdir, &snap, &cfg, &meta, per, hashes, &res, err, sizeof err) == 0, "rewrite: %s", err);
        char want[64];
        snprintf(want, sizeof want, "data%05d.bin", n - 1);
        CHECK(px_ckpt_load(hpath, &cfg, d, NULL, &fl) != 0 && strstr(fl.file, want) && strstr(fl.fault, "checksum mismatch"),
              "parts of %zu: a snapshot changed after its hash was not refused naming %s: '%s: %s'", per, want, fl.file,
              fl.fault);
        /* an optimizer step as a pass: the state it leaves, its snapshot and checksums */
        for (size_t round = 1000; round <= 5000; round += 4000) {
            fill_state(s, 61);
            CHECK(fake_pass(&snap, s, per, round, passed) == 0, "parts of %zu: the pass failed", per);
            snap.step = s->step, snap.seed = s->seed;
            CHECK(same_state(s, &snap), "parts of %zu, rounds of %zu: the pass's snapshot is not the state", per, round);
            snprintf(dir, sizeof dir, "%s/passed-%zu-%zu", root, per, round);
            CHECK(px_ckpt_write_files(dir, &snap, &cfg, &meta, per, passed, &res, err, sizeof err) == 0, "pass: %s", err);
            px_ckpt_path(dir, 61, path, sizeof path);
            memset(d->buf[1], 0, d->n * sizeof(float));
            CHECK(px_ckpt_load(path, &cfg, d, NULL, &fl) == 0 && same_state(s, d),
                  "parts of %zu, rounds of %zu: the pass's checkpoint does not load: %s: %s", per, round, fl.file, fl.fault);
        }
        px_ckpt_pass_t *p = px_ckpt_pass_begin(&snap, s, per);
        CHECK(p != NULL, "no pass");
        px_ckpt_pass_block(p, 0, 0, 10);
        px_ckpt_pass_block(p, 0, 20, s->n < per ? s->n : per); /* floats 10-19 skipped */
        for (int k = 1; k < parts; k++) px_ckpt_pass_block(p, k, (size_t)k * per, (size_t)(k + 1) * per < s->n ? (size_t)(k + 1) * per : s->n);
        CHECK(px_ckpt_pass_end(p, passed) == -1, "parts of %zu: a pass with a gap gave checksums", per);
        px_state_free(&snap);
        free(hashes);
        free(passed);
    }
}

/* ---- DiLoCo's outer momentum ------------------------------------------- */

/* A state shaped like s with the outer momentum: four buffers. */
static void alloc_outer(px_train_state_t *dst, const px_train_state_t *s) {
    px_train_state_t like = *s;
    like.nbuf = PX_STATE_MAXBUF;
    CHECK(px_state_alloc_like(dst, &like) == 0, "out of memory");
}

/* Every buffer non-zero garbage, the step unlike any written. */
static void garble(px_train_state_t *s) {
    for (int b = 0; b < s->nbuf; b++) memset(s->buf[b], 0x7f, s->n * sizeof(float));
    s->step = -1;
}

static int all_zero_bits(const float *v, size_t n) {
    const unsigned char *p = (const unsigned char *)v;
    for (size_t i = 0; i < n * sizeof(float); i++)
        if (p[i]) return 0;
    return 1;
}

/* Four buffers round-trip bitwise; into a state of three, params, m, v and
 * the step load and the outer momentum is read and verified (a flipped byte
 * of it still fails the load); a checkpoint of three into a state of four
 * zeroes outer_m, and the manifest says the checkpoint had none. */
static void test_outer(px_train_state_t *s3, px_train_state_t *d3) {
    char dir[300], path[4200], flip[300], err[600];
    px_train_state_t s4, d4;
    alloc_outer(&s4, s3);
    alloc_outer(&d4, s3);
    snprintf(dir, sizeof dir, "%s/outer", root);
    px_ckpt_result_t res;
    px_ckpt_fault_t f;
    px_ckpt_manifest_t m;
    fill_state(&s4, 30);
    CHECK(px_ckpt_write(dir, &s4, &cfg, &meta, &res, err, sizeof err) == 0, "4-buffer write: %s", err);
    CHECK(res.bytes > 4 * s4.n * sizeof(float), "4-buffer checkpoint of %" PRIu64 " bytes", res.bytes);
    px_ckpt_path(dir, 30, path, sizeof path);
    garble(&d4);
    CHECK(px_ckpt_load(path, &cfg, &d4, &m, &f) == 0, "4-buffer load: %s: %s", f.file, f.fault);
    CHECK(same_state(&s4, &d4), "4-buffer round trip is not bitwise");
    CHECK(m.outer_momentum == 1 && m.ntensors == px_ckpt_logical_tensors(&cfg, PX_STATE_MAXBUF, NULL),
          "4-buffer manifest: outer_momentum %d, %d tensors", m.outer_momentum, m.ntensors);
    int k = px_ckpt_manifest_find(&m, "outer.momentum.h.0.attn.c_attn.weight");
    CHECK(k >= 0 && m.tensors[k].ndim == 2 && m.tensors[k].shape[0] == 3 * cfg.channels &&
              m.tensors[k].shape[1] == cfg.channels, "outer.momentum.h.0.attn.c_attn.weight: its parameter's shape");
    px_ckpt_manifest_free(&m);

    garble(d3);
    CHECK(px_ckpt_load(path, &cfg, d3, &m, &f) == 0, "4 into 3: %s: %s", f.file, f.fault);
    CHECK(same_buffers(&s4, d3, PX_STATE_NBUF) && d3->step == 30, "4 into 3: params, m, v or the step differ");
    CHECK(m.outer_momentum == 1, "4 into 3: the manifest has the outer momentum");
    px_ckpt_manifest_free(&m);
    snprintf(flip, sizeof flip, "%s/outer-flip", root);
    /* the last data file holds the end of the outer momentum */
    sh("mkdir -p %s && cp -r %s %s/ && cd %s/step_00000030 && f=$(ls data*.bin | tail -1) && printf '\\377' | "
       "dd of=$f bs=1 seek=$(( $(stat -c %%s $f) - 8 )) conv=notrunc 2>/dev/null", flip, path, flip, flip);
    px_ckpt_path(flip, 30, path, sizeof path);
    char last[32];
    snprintf(last, sizeof last, "data%05d.bin", PX_STATE_MAXBUF * px_ckpt_nparts(s3->n, px_ckpt_part_floats(s3->n)) - 1);
    CHECK(px_ckpt_load(path, &cfg, d3, NULL, &f) != 0 && strstr(f.fault, "checksum mismatch") && strstr(f.file, last),
          "a flipped byte of outer.momentum.ln_f.bias, loaded into 3 buffers: '%s: %s' (expected %s)", f.file, f.fault,
          last);

    fill_state(s3, 31);
    CHECK(px_ckpt_write(dir, s3, &cfg, &meta, &res, err, sizeof err) == 0, "3-buffer write: %s", err);
    px_ckpt_path(dir, 31, path, sizeof path);
    garble(&d4);
    CHECK(px_ckpt_load(path, &cfg, &d4, &m, &f) == 0, "3 into 4: %s: %s", f.file, f.fault);
    CHECK(same_buffers(s3, &d4, PX_STATE_NBUF) && d4.step == 31, "3 into 4: params, m, v or the step differ");
    CHECK(m.outer_momentum == 0 && all_zero_bits(d4.buf[PX_STATE_OUTER_M], d4.n),
          "3 into 4: outer_m must be zero (outer_m[0] = %g) and reported (outer_momentum %d)",
          (double)d4.buf[PX_STATE_OUTER_M][0], m.outer_momentum);
    px_ckpt_manifest_free(&m);
    garble(&d4);
    memset(&m, 0, sizeof m);
    int64_t got = px_ckpt_restore_newest_to(dir, &cfg, "job1", 1337, &d4, NULL, &m, NULL, NULL);
    CHECK(got == 31 && m.step == 31 && !m.outer_momentum && all_zero_bits(d4.buf[PX_STATE_OUTER_M], d4.n) &&
              same_buffers(s3, &d4, PX_STATE_NBUF), "restore of 3 into 4: step %lld, outer_momentum %d",
          (long long)got, m.outer_momentum);
    px_ckpt_manifest_free(&m);
    px_state_free(&s4);
    px_state_free(&d4);
}

/* An outer momentum with some of its tensors but not all, or one of
 * another shape than its parameter's, or an "outer_momentum" that
 * disagrees with the tensors: the manifest is refused naming the tensor,
 * before any data is read, and restore takes the previous checkpoint. A
 * manifest without the member (older writers) is read by its tensors. */
static void test_outer_refused(px_train_state_t *s3, px_train_state_t *d3) {
    char dir[300], path[4300], err[600];
    snprintf(dir, sizeof dir, "%s/outer-refused", root);
    px_train_state_t s4;
    alloc_outer(&s4, s3);
    px_ckpt_result_t res;
    for (int64_t st = 10; st <= 20; st += 10) {
        fill_state(&s4, st);
        CHECK(px_ckpt_write(dir, &s4, &cfg, &meta, &res, err, sizeof err) == 0, "write %lld: %s", (long long)st, err);
    }
    snprintf(path, sizeof path, "%s/step_00000020/%s", dir, PX_CKPT_MANIFEST);
    FILE *fp = fopen(path, "r");
    static char good[1 << 20], bad[1 << 20];
    size_t len = fp ? fread(good, 1, sizeof good - 1, fp) : 0;
    good[len] = 0;
    if (fp) fclose(fp);
    px_ckpt_manifest_t m;
    struct {
        const char *from, *to, *fault;
    } cases[] = {
        {"\"outer.momentum.h.1.ln_2.bias\"", "\"outer.momentum.h.1.ln_2.bias.old\"",
         "tensor outer.momentum.h.1.ln_2.bias missing"},
        {"\"outer_momentum\": true", "\"outer_momentum\": false", "\"outer_momentum\" is false"},
        {"\"outer_momentum\": true", "\"outer_momentum\": 1", "not true or false"},
        {"\"outer_momentum\": true,", "", NULL}, /* no member: the tensors say */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *p = strstr(good, cases[i].from);
        CHECK(p != NULL, "outer case %zu: '%s' not in the manifest", i, cases[i].from);
        if (!p) continue;
        snprintf(bad, sizeof bad, "%.*s%s%s", (int)(p - good), good, cases[i].to, p + strlen(cases[i].from));
        err[0] = 0;
        int rc = px_ckpt_manifest_decode(bad, strlen(bad), &m, err, sizeof err);
        if (!cases[i].fault)
            CHECK(rc == 0 && m.outer_momentum == 1, "outer case %zu: rc=%d err='%s'", i, rc, err);
        else
            CHECK(rc != 0 && strstr(err, cases[i].fault), "outer case %zu: rc=%d err='%s', want '%s'", i, rc, err,
                  cases[i].fault);
        if (rc == 0) px_ckpt_manifest_free(&m);
    }
    /* c_attn's outer momentum transposed: the same bytes, another shape */
    CHECK(px_ckpt_manifest_decode(good, len, &m, err, sizeof err) == 0 && m.outer_momentum == 1, "good: %s", err);
    int k = px_ckpt_manifest_find(&m, "outer.momentum.h.0.attn.c_attn.weight");
    CHECK(k >= 0 && m.tensors[k].nslices == 1, "c_attn's outer momentum is one slice");
    if (k >= 0) {
        px_ckpt_tensor_t *t = &m.tensors[k];
        int64_t rows = t->shape[0];
        t->shape[0] = t->slices[0].count[0] = t->shape[1];
        t->shape[1] = t->slices[0].count[1] = rows;
    }
    char *text = px_ckpt_manifest_encode(&m);
    px_ckpt_manifest_free(&m);
    int rc = px_ckpt_manifest_decode(text, strlen(text), &m, err, sizeof err);
    CHECK(rc != 0 &&
              strstr(err, "tensor outer.momentum.h.0.attn.c_attn.weight has shape 64x192, its parameter's is 192x64"),
          "a misshapen outer tensor: rc=%d err='%s'", rc, err);
    if (rc == 0) px_ckpt_manifest_free(&m);
    free(text);
    /* the partial one published: restore names the tensor and goes back to step 10 */
    char *p = strstr(good, cases[0].from);
    if (p) {
        snprintf(bad, sizeof bad, "%.*s%s%s", (int)(p - good), good, cases[0].to, p + strlen(cases[0].from));
        fp = fopen(path, "w");
        fputs(bad, fp);
        fclose(fp);
    }
    rejects_t r = {0, ""};
    int64_t got = px_ckpt_restore_newest(dir, &cfg, "job1", 1337, d3, on_reject, &r);
    fill_state(&s4, 10);
    CHECK(got == 10 && same_buffers(&s4, d3, PX_STATE_NBUF), "restore past a partial outer momentum: %lld",
          (long long)got);
    CHECK(r.n == 1 && strstr(r.last, "manifest.json") && strstr(r.last, cases[0].fault),
          "the rejection names the manifest and the tensor: '%s'", r.last);
    px_state_free(&s4);
}

/* Four buffers written in parts by two ranks (rank 0 wte and wpe of every
 * buffer, rank 1 the rest, as a sharded group's plan would say) load
 * bitwise; a state of three against a plan of four is refused. */
static void test_outer_part(px_train_state_t *s3) {
    char dir[300], path[4200], err[600];
    snprintf(dir, sizeof dir, "%s/outer-part", root);
    px_train_state_t s4, d4;
    alloc_outer(&s4, s3);
    alloc_outer(&d4, s3);
    fill_state(&s4, 40);
    size_t sizes[PX_GPT_NUM_TENSORS];
    px_gpt_tensor_sizes(&cfg, sizes);
    size_t cut = sizes[PX_WTE] + sizes[PX_WPE];
    const size_t runs[2][1][2] = {{{0, cut}}, {{cut, s4.n - cut}}};
    int nl = px_ckpt_logical_tensors(&cfg, PX_STATE_MAXBUF, NULL);
    px_ckpt_logical_t *lt = calloc((size_t)nl, sizeof *lt);
    px_ckpt_logical_tensors(&cfg, PX_STATE_MAXBUF, lt);
    px_ckpt_manifest_t plan;
    int rc = px_ckpt_manifest_begin(&plan, &cfg, PX_STATE_MAXBUF, 2, "rank");
    for (int r = 0; r < 2 && rc == 0; r++) { /* each file: its rank's tensors, buffer by buffer */
        int i = 0;
        for (int b = 0; b < PX_STATE_MAXBUF; b++)
            for (int kind = 0; kind < PX_GPT_NUM_TENSORS; kind++)
                for (int l = 0; l < (kind >= PX_LN1W && kind <= PX_FCPROJB ? cfg.num_layers : 1); l++, i++) {
                    const px_ckpt_logical_t *t = &lt[i];
                    if ((t->offset < cut) != (r == 0) || rc) continue;
                    int64_t K = t->shape[t->ndim - 1], rows = t->ndim == 2 ? t->shape[0] : 1;
                    rc = px_ckpt_manifest_add(&plan, r, b, kind, l, K, 0, rows, 0, K);
                }
    }
    CHECK(rc == 0, "the plan of two parts");
    px_ckpt_part_t p0 = {0, 2, runs[0], 1, &plan, 5000, NULL}, p1 = {1, 2, runs[1], 1, NULL, 0, NULL};
    px_ckpt_result_t res;
    CHECK(px_ckpt_write_part(dir, s3, &meta, &p0, &res, err, sizeof err) != 0 && strstr(err, "a plan for 4"),
          "3 buffers against a plan of 4: '%s'", err);
    CHECK(px_ckpt_write_part(dir, &s4, &meta, &p1, &res, err, sizeof err) == 0, "rank 1's part: %s", err);
    CHECK(px_ckpt_write_part(dir, &s4, &meta, &p0, &res, err, sizeof err) == 0, "rank 0's part: %s", err);
    px_ckpt_path(dir, 40, path, sizeof path);
    px_ckpt_manifest_t m;
    px_ckpt_fault_t f;
    garble(&d4);
    CHECK(px_ckpt_load(path, &cfg, &d4, &m, &f) == 0, "4 buffers in parts: %s: %s", f.file, f.fault);
    CHECK(same_state(&s4, &d4) && m.nfiles == 2 && m.outer_momentum == 1,
          "4 buffers in parts: not bitwise, or %d files, outer_momentum %d", m.nfiles, m.outer_momentum);
    px_ckpt_manifest_free(&m);
    px_ckpt_manifest_free(&plan);
    free(lt);
    px_state_free(&s4);
    px_state_free(&d4);
}

/* The saver's snapshot follows the state's buffer count: three, four, three. */
static void test_outer_saver(px_train_state_t *s3) {
    char dir[300], path[4200];
    snprintf(dir, sizeof dir, "%s/outer-saver", root);
    px_train_state_t s4, d4;
    alloc_outer(&s4, s3);
    alloc_outer(&d4, s3);
    px_ckpt_saver_t *sv = px_ckpt_saver_new(dir, 0, &cfg, "job1");
    CHECK(sv != NULL, "saver");
    px_train_state_t *states[] = {s3, &s4, s3};
    for (int i = 0; sv && i < 3; i++) {
        px_train_state_t *st = states[i];
        fill_state(st, 60 + i);
        CHECK(px_ckpt_saver_submit(sv, st, &meta, 0, NULL) == 0, "submit %d buffers", st->nbuf);
        px_ckpt_saver_wait(sv);
        px_ckpt_done_t done;
        memset(&done, 0, sizeof done);
        CHECK(px_ckpt_saver_poll(sv, &done) && done.ok, "save of %d buffers: %s", st->nbuf, done.err);
        px_ckpt_path(dir, 60 + i, path, sizeof path);
        px_ckpt_fault_t f;
        garble(&d4);
        CHECK(px_ckpt_load(path, &cfg, &d4, NULL, &f) == 0, "saved %d buffers: %s: %s", st->nbuf, f.file, f.fault);
        CHECK(same_buffers(st, &d4, PX_STATE_NBUF) &&
                  (st->nbuf == PX_STATE_MAXBUF ? same_state(st, &d4) : all_zero_bits(d4.buf[PX_STATE_OUTER_M], d4.n)),
              "the saver's checkpoint of %d buffers loads wrong", st->nbuf);
    }
    px_ckpt_saver_destroy(&sv);
    px_state_free(&s4);
    px_state_free(&d4);
}

/* A state whose host copy is still arriving (a GPU's download): the hook
 * px_ckpt_saver_set_source_wait names lands it, and the saver must call it
 * before it reads the state, held or overlapped. */
typedef struct {
    px_train_state_t *src;
    const px_train_state_t *landed;
    int calls;
} arrival_t;

static void land(void *ctx) {
    arrival_t *a = ctx;
    for (int b = 0; b < a->src->nbuf; b++) memcpy(a->src->buf[b], a->landed->buf[b], a->src->n * sizeof(float));
    a->calls++;
}

static void test_source_wait(px_train_state_t *s, px_train_state_t *d) {
    char dir[300], path[4200];
    snprintf(dir, sizeof dir, "%s/source-wait", root);
    px_train_state_t landed;
    CHECK(px_state_alloc_like(&landed, s) == 0, "out of memory");
    px_ckpt_saver_t *sv = px_ckpt_saver_new(dir, 0, &cfg, "job1");
    CHECK(sv != NULL, "saver");
    for (int overlap = 0; sv && overlap < 2; overlap++) {
        int64_t step = 80 + overlap;
        fill_state(&landed, step + 10); /* the device's values */
        landed.step = step;
        fill_state(s, step);            /* what the host copy held before they arrive */
        arrival_t a = {s, &landed, 0};
        px_ckpt_saver_set_source_wait(sv, land, &a);
        CHECK(px_ckpt_saver_submit(sv, s, &meta, overlap, NULL) == 0, "submit (overlap %d)", overlap);
        px_ckpt_saver_fence(sv);
        px_ckpt_saver_wait(sv);
        px_ckpt_done_t done;
        memset(&done, 0, sizeof done);
        CHECK(px_ckpt_saver_poll(sv, &done) && done.ok, "save (overlap %d): %s", overlap, done.err);
        CHECK(a.calls == 1, "overlap %d: the wait was called %d times, not once", overlap, a.calls);
        px_ckpt_path(dir, step, path, sizeof path);
        px_ckpt_fault_t f;
        garble(d);
        CHECK(px_ckpt_load(path, &cfg, d, NULL, &f) == 0, "overlap %d: %s: %s", overlap, f.file, f.fault);
        CHECK(same_buffers(&landed, d, PX_STATE_NBUF),
              "overlap %d: the checkpoint holds the state from before the wait, not what arrived", overlap);
        px_ckpt_saver_set_source_wait(sv, NULL, NULL);
    }
    px_ckpt_saver_destroy(&sv);
    px_state_free(&landed);
}

/* The schedule a checkpoint records: written, read back exactly (a float
 * --lr compares equal after the JSON round trip), optional (a manifest
 * without one reads as has_schedule 0), refused when malformed; and the
 * difference named flag by flag. */
static void test_schedule(px_train_state_t *s) {
    char dir[300], path[4300], err[600];
    snprintf(dir, sizeof dir, "%s/schedule", root);
    save(dir, s, 3);
    snprintf(path, sizeof path, "%s/step_00000003/%s", dir, PX_CKPT_MANIFEST);
    FILE *f = fopen(path, "r");
    static char good[1 << 20], bad[1 << 20];
    size_t len = f ? fread(good, 1, sizeof good - 1, f) : 0;
    good[len] = 0;
    if (f) fclose(f);
    px_ckpt_manifest_t m;
    CHECK(px_ckpt_manifest_decode(good, len, &m, err, sizeof err) == 0 && m.has_schedule, "schedule read: %s", err);
    char diff[512];
    CHECK(px_ckpt_schedule_diff(&m.schedule, &meta.schedule, diff, sizeof diff) == 0 && !diff[0],
          "the schedule reads back exactly: %s", diff);
    px_ckpt_manifest_free(&m);
    px_ckpt_schedule_t now = meta.schedule;
    now.steps = 2000;
    now.lr = 0.003f;
    CHECK(px_ckpt_schedule_diff(&meta.schedule, &now, diff, sizeof diff) == 2 &&
              !strcmp(diff, "--steps 2000 (the checkpoint's: 1000), --lr 0.003 (the checkpoint's: 0.001)"),
          "the difference: %s", diff);
    now = meta.schedule;
    now.global_batch = 24;
    now.seq_len = 128;
    now.warmup = 0;
    now.min_lr = 0;
    CHECK(px_ckpt_schedule_diff(&meta.schedule, &now, diff, 20) == 4 && strlen(diff) == 19,
          "four differences, cut to the buffer: %s", diff);
    /* absent: fine; malformed: refused naming the member */
    char *at = strstr(good, "\"schedule\"");
    CHECK(at != NULL, "the manifest has a schedule");
    if (!at) return;
    char *end = strchr(at, '}');
    snprintf(bad, sizeof bad, "%.*s\"no_schedule\": 0%s", (int)(at - good), good, end + 1);
    CHECK(px_ckpt_manifest_decode(bad, strlen(bad), &m, err, sizeof err) == 0 && !m.has_schedule,
          "without a schedule: %s", err);
    px_ckpt_manifest_free(&m);
    const char *cases[][2] = {{"\"steps\": 1000", "\"steps\": -1"}, {"\"lr\": 0.0010000000474974513", "\"lr\": \"x\""},
                              {"\"global_batch\": 12", "\"global_batch\": 1.5"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *p = strstr(good, cases[i][0]);
        CHECK(p != NULL, "schedule case %zu: '%s' not in the manifest", i, cases[i][0]);
        if (!p) continue;
        snprintf(bad, sizeof bad, "%.*s%s%s", (int)(p - good), good, cases[i][1], p + strlen(cases[i][0]));
        int rc = px_ckpt_manifest_decode(bad, strlen(bad), &m, err, sizeof err);
        CHECK(rc != 0 && strstr(err, "schedule"), "schedule case %zu refused naming it: rc %d %s", i, rc, err);
        if (rc == 0) px_ckpt_manifest_free(&m);
    }
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/px-test-ckpt-%d", (int)getpid());
    sh("rm -rf %s && mkdir -p %s", root, root);
    px_gpt_config_preset("tiny", &cfg);
    px_train_state_t like = {{0}, 0, 0, 1337, 0, PX_STATE_NBUF, 0}, s, d;
    size_t sizes[PX_GPT_NUM_TENSORS];
    like.n = px_gpt_tensor_sizes(&cfg, sizes);
    px_state_alloc_like(&s, &like);
    px_state_alloc_like(&d, &like);
    CHECK(px_ckpt_logical_tensors(&cfg, PX_STATE_NBUF, NULL) == 3 * (4 + 12 * cfg.num_layers), "logical tensor count");
    CHECK(px_ckpt_logical_tensors(&cfg, PX_STATE_MAXBUF, NULL) == 4 * (4 + 12 * cfg.num_layers),
          "logical tensor count with the outer momentum");
    CHECK(px_ckpt_logical_tensors(&cfg, 2, NULL) == -1 && px_ckpt_logical_tensors(&cfg, 5, NULL) == -1,
          "a buffer count the format has no tensors for");
    test_round_trip(&s, &d);
    test_sliced(&s, &d);
    test_damage(&s, &d);
    test_mismatch(&s, &d);
    test_decode_table(&s);
    test_schedule(&s);
    test_retention(&s);
    test_move_aside(&s, &d);
    test_disk_full(&s, &d);
    test_direct(&s, &d);
    test_direct_layouts(&s);
    test_file_rule();
    test_files(&s, &d);
    test_outer(&s, &d);
    test_outer_refused(&s, &d);
    test_outer_part(&s);
    test_outer_saver(&s);
    test_source_wait(&s, &d);
    px_state_free(&s);
    px_state_free(&d);
    if (!failed) sh("rm -rf %s", root);
    printf("%s: %d failure(s)%s%s\n", failed ? "FAIL" : "ok", failed, failed ? ", files kept in " : "", failed ? root : "");
    return failed ? 1 : 0;
}
