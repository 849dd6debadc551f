/* The deterministic sampler and byte-level data preparation.
 * Sampler: px_permute is a bijection for many sizes; sample offsets are in
 * range and window-aligned; within an epoch every window is read exactly once
 * (no sample lost or repeated) across any split of the global batch; any
 * subset of a step's samples equals the same slice of the whole step; seeds and
 * epochs change the order.
 * Data preparation: shards hold the files' bytes, in order, split at a line
 * boundary into train and val; the demo file list skips .dat/.u8/subdirectories.
 *   usage: test_data   (writes into a temporary directory under the cwd) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataprep.h"
#include "dataset.h"
#include "px_err.h"
#include "token_file.h"

static int g_failures;

#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                       \
            printf(__VA_ARGS__);                                                              \
            printf("\n");                                                                     \
            g_failures++;                                                                     \
        }                                                                                     \
    } while (0)

static void test_permute(void) {
    uint64_t sizes[] = {1, 2, 3, 7, 8, 9, 100, 1000, 4096, 5003};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        uint64_t n = sizes[k];
        unsigned char *seen = calloc(n, 1);
        int ok = 1, moved = 0;
        for (uint64_t x = 0; x < n; x++) {
            uint64_t y = px_permute(x, n, 12345);
            if (y >= n || seen[y]) ok = 0;
            else seen[y] = 1;
            moved += y != x;
        }
        CHECK(ok, "px_permute is not a bijection on [0, %llu)", (unsigned long long)n);
        CHECK(n < 8 || moved > (int)n / 2, "px_permute barely shuffles n=%llu", (unsigned long long)n);
        free(seen);
    }
    printf("ok   px_permute is a bijection for every size tried\n");
}

static void test_sampler(void) {
    const int T = 16;
    const uint64_t ntok = 16 * 250 + 5; /* nwin = 250 */
    const uint64_t nwin = (ntok - 1) / T;
    const int64_t Bg = 10; /* 25 steps per epoch */
    unsigned char *seen = calloc(nwin, 1);
    int in_range = 1, unique = 1;
    for (int64_t s = 0; s < 25; s++)
        for (int64_t i = 0; i < Bg; i++) {
            uint64_t off = px_sample_offset(7, s, i, Bg, T, ntok);
            if (off % T != 0 || off + T + 1 > ntok) in_range = 0;
            else if (seen[off / T]++) unique = 0;
        }
    int all = 1;
    for (uint64_t w = 0; w < nwin; w++) all &= seen[w] == 1;
    CHECK(in_range, "a sample offset is out of range or not window-aligned");
    CHECK(unique && all, "an epoch does not read every window exactly once");
    /* the next epoch is a different order */
    int same = 0;
    for (int64_t i = 0; i < Bg; i++)
        same += px_sample_offset(7, 25, i, Bg, T, ntok) == px_sample_offset(7, 0, i, Bg, T, ntok);
    CHECK(same < Bg, "epoch 1 repeats epoch 0's order");
    int seed_same = 0;
    for (int64_t i = 0; i < Bg; i++)
        seed_same += px_sample_offset(7, 3, i, Bg, T, ntok) == px_sample_offset(8, 3, i, Bg, T, ntok);
    CHECK(seed_same < Bg, "a different seed gives the same samples");
    free(seen);
    printf("ok   sampler: one epoch = every window once; epochs and seeds reorder\n");
}

static void test_dataprep_and_fill(void) {
    char dir[64] = "px_test_data_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    char f1[128], f2[128], out[128];
    snprintf(f1, sizeof f1, "%s/a.txt", dir);
    snprintf(f2, sizeof f2, "%s/b.txt", dir);
    snprintf(out, sizeof out, "%s/shards", dir);
    const char *text1 = "line one\nline two\nline three\nline four\nline five\n";
    const char *text2 = "\xc3\xa9t\xc3\xa9\nsecond file, no final newline";
    FILE *f = fopen(f1, "wb");
    fputs(text1, f);
    fclose(f);
    f = fopen(f2, "wb");
    fputs(text2, f);
    fclose(f);
    char *files[] = {f1, f2, NULL};
    px_dataprep_summary_t sum;
    char err[PX_ERRLEN];
    const px_dataprep_opts_t opts = {.val_fraction = 0.25};
    int rc = px_dataprep_run(out, files, 2, &opts, &sum, err, sizeof err);
    CHECK(rc == 0, "dataprep failed: %s", err);
    size_t n1 = strlen(text1), n2 = strlen(text2);
    CHECK(sum.files == 2 && sum.bytes == n1 + n2 && sum.train_tokens + sum.val_tokens == n1 + n2,
          "summary does not add up");
    char p[160];
    uint16_t *tr = NULL, *va = NULL;
    size_t ntr = 0, nva = 0;
    snprintf(p, sizeof p, "%s/train_000000.bin", out);
    CHECK(px_token_file_read(p, 256, &tr, &ntr, err, sizeof err) == 0, "%s", err);
    snprintf(p, sizeof p, "%s/val_000000.bin", out);
    CHECK(px_token_file_read(p, 256, &va, &nva, err, sizeof err) == 0, "%s", err);
    /* train = head(a) head(b), val = tail(a) tail(b); a's cut is after a newline */
    char *joined = malloc(ntr + nva + 1);
    size_t k = 0, cut1 = 0;
    while (cut1 < ntr && tr[cut1] == (unsigned char)text1[cut1]) cut1++;
    CHECK(cut1 > 0 && text1[cut1 - 1] == '\n' && cut1 >= (size_t)(0.75 * n1),
          "file a not cut after a newline at 75%% (cut at %zu of %zu)", cut1, n1);
    for (size_t i = 0; i < cut1; i++) joined[k++] = (char)tr[i];
    size_t va1 = n1 - cut1;
    for (size_t i = 0; i < va1; i++) joined[k++] = (char)va[i];
    CHECK(memcmp(joined, text1, n1) == 0, "file a's bytes are not train head + val head");
    k = 0;
    for (size_t i = cut1; i < ntr; i++) joined[k++] = (char)tr[i];
    for (size_t i = va1; i < nva; i++) joined[k++] = (char)va[i];
    CHECK(k == n2 && memcmp(joined, text2, n2) == 0, "file b's bytes are not train + val tail");
    free(joined), free(tr), free(va);
    printf("ok   dataprep: %zu train + %zu val tokens are the files' bytes, cut at lines\n",
           sum.train_tokens, sum.val_tokens);

    /* px_dataset_fill: windows are the shard's tokens, targets shifted by one,
     * and a subset of a step equals the same slice of the whole step. */
    px_dataset_t *ds = px_dataset_open(out, "train", 256, 9, err, sizeof err);
    CHECK(ds != NULL, "%s", err);
    if (ds) {
        int T = 4, Bg = 6;
        int x[24], y[24], xs[12], ys[12];
        px_dataset_fill(ds, 1, 5, 0, Bg, Bg, T, x, y);
        px_dataset_fill(ds, 1, 5, 2, 3, Bg, T, xs, ys);
        CHECK(memcmp(xs, x + 2 * T, sizeof xs) == 0 && memcmp(ys, y + 2 * T, sizeof ys) == 0,
              "samples 2..4 computed alone differ from the whole step's");
        int shifted = 1;
        for (int i = 0; i < Bg; i++)
            for (int t = 0; t + 1 < T; t++) shifted &= y[i * T + t] == x[i * T + t + 1];
        CHECK(shifted, "targets are not the inputs shifted by one");
        int e1[8], e2[8], t1[8], t2[8];
        px_dataset_fill_eval(ds, 3, 2, T, e1, t1);
        px_dataset_fill_eval(ds, 3, 2, T, e2, t2);
        CHECK(memcmp(e1, e2, sizeof e1) == 0 && memcmp(t1, t2, sizeof t1) == 0,
              "eval batches are not repeatable");
        px_dataset_destroy(&ds);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", dir);
}

static void test_demo_list(void) {
    char **files = NULL;
    int n = 0;
    char err[PX_ERRLEN];
    if (px_dataprep_demo_files(&files, &n, err, sizeof err) != 0) {
        printf("skip demo file list: %s\n", err);
        return;
    }
    int ok = 1;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(files[i]);
        if ((len > 4 && strcmp(files[i] + len - 4, ".dat") == 0) ||
            (len > 3 && strcmp(files[i] + len - 3, ".u8") == 0))
            ok = 0;
        if (i > 0 && strcmp(files[i - 1], files[i]) >= 0) ok = 0;
    }
    CHECK(ok && n > 0, "demo list has .dat/.u8 files or is not sorted");
    printf("ok   demo corpus: %d fortune files (first %s)\n", n, files[0]);
    px_dataprep_free_list(files);
}

int main(void) {
    test_permute();
    test_sampler();
    test_dataprep_and_fill();
    test_demo_list();
    if (g_failures) {
        printf("test_data: %d check(s) FAILED\n", g_failures);
        return 1;
    }
    printf("test_data: all checks passed\n");
    return 0;
}
