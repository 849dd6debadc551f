/* File readers against corrupt input. A good llm.c model file and a good token
 * shard are written, read back bit for bit, then damaged one way at a time
 * (truncated, wrong magic, wrong version, oversized count, trailing bytes,
 * out-of-range token, non-finite weight, bad config, missing file). Every
 * damaged file must be refused with a message that names the file and
 * contains the expected words. Also checks the dataset loader refuses a
 * directory with a bad shard, no shard, or too few tokens.
 *   usage: test_files   (works in a fresh temporary directory under the cwd) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataset.h"
#include "gpt.h"
#include "llmc.h"
#include "px_err.h"
#include "token_file.h"

static int g_failures;
static char g_dir[64];

static void fail(const char *fmt, const char *a, const char *b) {
    printf("FAIL ");
    printf(fmt, a, b);
    printf("\n");
    g_failures++;
}

static char *path_of(const char *name) {
    static char buf[8][256];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 256, "%s/%s", g_dir, name);
    return p;
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n);
    if (fread(b, 1, *n, f) != *n) abort();
    fclose(f);
    return b;
}

static void spit(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

/* A variant of `good` (n bytes): int32 header word `word` set to `value`
 * (word < 0: untouched), then cut or extended to `len` bytes (zero fill). */
static void variant(const char *path, const unsigned char *good, size_t n, int word, int32_t value,
                    size_t len) {
    unsigned char *b = calloc(len > n ? len : n, 1);
    memcpy(b, good, n);
    if (word >= 0) memcpy(b + 4 * word, &value, 4);
    spit(path, b, len);
    free(b);
}

static void expect_model_error(const char *path, const char *words) {
    px_gpt_t *m = NULL;
    char err[PX_ERRLEN] = "";
    int rc = px_gpt_load(path, &m, err, sizeof err);
    if (rc == 0 || m != NULL) {
        fail("model file %s accepted (expected an error about '%s')", path, words);
        px_gpt_destroy(&m);
    } else if (!strstr(err, path) || !strstr(err, words)) {
        fail("model file error '%s' does not name the file or say '%s'", err, words);
    } else {
        printf("ok   refused: %s\n", err);
    }
}

static void expect_shard_error(const char *path, int vocab, const char *words) {
    uint16_t *t = NULL;
    size_t n = 0;
    char err[PX_ERRLEN] = "";
    int rc = px_token_file_read(path, vocab, &t, &n, err, sizeof err);
    if (rc == 0) {
        fail("shard %s accepted (expected an error about '%s')", path, words);
        free(t);
    } else if (!strstr(err, path) || !strstr(err, words)) {
        fail("shard error '%s' does not name the file or say '%s'", err, words);
    } else {
        printf("ok   refused: %s\n", err);
    }
}

static void test_model_files(void) {
    px_gpt_config_t cfg;
    px_gpt_config_preset("tiny", &cfg);
    px_gpt_t *m = px_gpt_new(&cfg, 3);
    char err[PX_ERRLEN];
    const char *good = path_of("good_model.bin");
    if (px_gpt_save(m, good, err, sizeof err) != 0) {
        fail("%s%s", "save failed: ", err);
        return;
    }
    px_gpt_t *back = NULL;
    if (px_gpt_load(good, &back, err, sizeof err) != 0) {
        fail("%s%s", "load of a good file failed: ", err);
    } else if (memcmp(back->params, m->params, m->num_params * sizeof(float)) != 0 ||
               memcmp(&back->config, &m->config, sizeof cfg) != 0) {
        fail("%s%s", "round trip changed the model", "");
    } else {
        printf("ok   model file round trip: %zu params bit for bit\n", m->num_params);
    }
    px_gpt_destroy(&back);
    size_t n;
    unsigned char *g = slurp(good, &n);
    const char *p = path_of("bad_model.bin");
    variant(p, g, n, -1, 0, n - 100);
    expect_model_error(p, "truncated");
    variant(p, g, n, -1, 0, 600);
    expect_model_error(p, "truncated");
    variant(p, g, n, -1, 0, 0);
    expect_model_error(p, "truncated");
    variant(p, g, n, -1, 0, n + 4);
    expect_model_error(p, "larger than its header");
    variant(p, g, n, 0, 20240520, n); /* a shard's magic */
    expect_model_error(p, "bad magic");
    variant(p, g, n, 1, 2, n);
    expect_model_error(p, "unsupported version 2");
    variant(p, g, n, 1, 5, n);
    expect_model_error(p, "version 5 (bf16");
    variant(p, g, n, 5, 5, n); /* 5 heads do not divide 64 channels */
    expect_model_error(p, "bad config");
    variant(p, g, n, 4, 1 << 30, n); /* absurd layer count must not allocate */
    expect_model_error(p, "bad config");
    variant(p, g, n, 7, 100, n); /* padded vocab < vocab */
    expect_model_error(p, "bad config");
    variant(p, g, n, 2, 65, n); /* one more position: file too short for it */
    expect_model_error(p, "truncated");
    float nan = __builtin_nanf("");
    variant(p, g, n, -1, 0, n); /* a plain copy, then one weight set to NaN */
    {
        unsigned char *b = slurp(p, &n);
        memcpy(b + 1024 + 4 * 777, &nan, 4);
        spit(p, b, n);
        free(b);
    }
    expect_model_error(p, "not finite");
    expect_model_error(path_of("missing_model.bin"), "cannot open");
    free(g);
    px_gpt_destroy(&m);
}

static void test_shards(void) {
    enum { N = 5000 };
    uint16_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)((i * 37) % 256);
    char err[PX_ERRLEN];
    const char *good = path_of("good_shard.bin");
    if (px_token_file_write(good, tok, N, err, sizeof err) != 0) {
        fail("%s%s", "shard write failed: ", err);
        return;
    }
    uint16_t *back;
    size_t nb;
    if (px_token_file_read(good, 256, &back, &nb, err, sizeof err) != 0) {
        fail("%s%s", "good shard refused: ", err);
    } else if (nb != N || memcmp(back, tok, sizeof tok) != 0) {
        fail("%s%s", "shard round trip changed the tokens", "");
    } else {
        printf("ok   shard round trip: %d tokens\n", N);
    }
    free(back);
    size_t n;
    unsigned char *g = slurp(good, &n);
    const char *p = path_of("bad_shard.bin");
    variant(p, g, n, -1, 0, 1000);
    expect_shard_error(p, 256, "truncated");
    variant(p, g, n, -1, 0, n - 2);
    expect_shard_error(p, 256, "truncated");
    variant(p, g, n, 0, 20240326, n); /* a model file's magic */
    expect_shard_error(p, 256, "bad magic");
    variant(p, g, n, 1, 2, n);
    expect_shard_error(p, 256, "unsupported version 2");
    variant(p, g, n, 2, N + 1000, n);
    expect_shard_error(p, 256, "oversized token count");
    variant(p, g, n, 2, 0x7fffffff, n);
    expect_shard_error(p, 256, "oversized token count");
    variant(p, g, n, 2, -5, n);
    expect_shard_error(p, 256, "negative");
    variant(p, g, n, -1, 0, n + 6);
    expect_shard_error(p, 256, "trailing data");
    expect_shard_error(good, 200, "out of range for vocabulary size 200");
    {
        unsigned char *b = slurp(good, &n);
        uint16_t big = 300;
        memcpy(b + 1024 + 2 * 4321, &big, 2);
        spit(p, b, n);
        free(b);
    }
    expect_shard_error(p, 256, "token 300 at index 4321 is out of range");
    expect_shard_error(path_of("missing_shard.bin"), 256, "cannot open");
    free(g);

    /* dataset loader: a bad shard among good ones, no shards, too few tokens */
    char sub[128];
    snprintf(sub, sizeof sub, "%s/ds", g_dir);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", sub);
    if (system(cmd) != 0) abort();
    snprintf(cmd, sizeof cmd, "%s/train_000000.bin", sub);
    px_token_file_write(cmd, tok, N, err, sizeof err);
    px_dataset_t *ds = px_dataset_open(sub, "train", 256, 65, err, sizeof err);
    if (!ds || px_dataset_num_tokens(ds) != N) fail("%s%s", "dataset over a good shard: ", err);
    px_dataset_destroy(&ds);
    ds = px_dataset_open(sub, "val", 256, 65, err, sizeof err);
    if (ds || !strstr(err, "no val shards")) fail("%s%s", "missing val shards not reported: ", err);
    else printf("ok   refused: %s\n", err);
    ds = px_dataset_open(sub, "train", 256, N + 1, err, sizeof err);
    if (ds || !strstr(err, "fewer than")) fail("%s%s", "too-small dataset not reported: ", err);
    else printf("ok   refused: %s\n", err);
    snprintf(cmd, sizeof cmd, "%s/train_000001.bin", sub);
    spit(cmd, "", 0); /* empty file */
    ds = px_dataset_open(sub, "train", 256, 65, err, sizeof err);
    if (ds || !strstr(err, "train_000001.bin")) fail("%s%s", "bad shard in set not named: ", err);
    else printf("ok   refused: %s\n", err);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "px_test_files_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_model_files();
    test_shards();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", g_dir);
    if (g_failures) {
        printf("test_files: %d check(s) FAILED\n", g_failures);
        return 1;
    }
    printf("test_files: every corrupt input refused with a message naming the file\n");
    return 0;
}
