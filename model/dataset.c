/* Deterministic sampler and shard loader (dataset.h). The sampler is pure
 * arithmetic on the sample's coordinates: no cursor to save, ship to a healing
 * peer or rewind on a retried step. */
#include "dataset.h"

#include <glob.h>
#include <stdlib.h>
#include <string.h>

#include "px_err.h"
#include "rng.h"
#include "token_file.h"

struct px_dataset {
    uint16_t *tokens; /* (n) all shards, concatenated in name order */
    size_t n;
};

uint64_t px_permute(uint64_t x, uint64_t n, uint64_t key) {
    if (n <= 1) return 0;
    int bits = 0;
    while (bits < 64 && (1ULL << bits) < n) bits++;
    int half = (bits + 1) / 2;
    uint64_t mask = (1ULL << half) - 1;
    /* A Feistel network is a bijection on [0, 2^(2*half)); re-applying it until
     * the value lands below n (cycle walking) restricts it to [0, n). Since
     * 2^(2*half) < 4n, this takes fewer than four rounds on average. */
    do {
        uint64_t l = x >> half, r = x & mask;
        for (uint64_t round = 0; round < 4; round++) {
            uint64_t f = px_hash4(key, round, r, 0x66656973 /* "feis" */) & mask;
            uint64_t nl = r;
            r = l ^ f;
            l = nl;
        }
        x = (l << half) | r;
    } while (x >= n);
    return x;
}

uint64_t px_sample_offset(uint64_t seed, int64_t step, int64_t i, int64_t B_global, int T,
                          uint64_t ntokens) {
    uint64_t nwin = (ntokens - 1) / (uint64_t)T;
    uint64_t g = (uint64_t)step * (uint64_t)B_global + (uint64_t)i;
    uint64_t epoch = g / nwin, pos = g % nwin;
    uint64_t key = px_hash4(seed, 0x64617461 /* "data" */, epoch, 0);
    return px_permute(pos, nwin, key) * (uint64_t)T;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

px_dataset_t *px_dataset_open(const char *dir, const char *split, int vocab_size,
                              size_t min_tokens, char *err, size_t errlen) {
    size_t plen = strlen(dir) + strlen(split) + 16;
    char *pattern = malloc(plen);
    if (!pattern) return NULL;
    snprintf(pattern, plen, "%s/%s_*.bin", dir, split);
    glob_t gl;
    int rc = glob(pattern, 0, NULL, &gl);
    if (rc != 0) {
        px_err_set(err, errlen, "no %s shards matching '%s' (prepare data with phalanx-data)",
                   split, pattern);
        free(pattern);
        if (rc != GLOB_NOMATCH) globfree(&gl);
        return NULL;
    }
    free(pattern);
    qsort(gl.gl_pathv, gl.gl_pathc, sizeof(char *), cmp_str);
    px_dataset_t *ds = calloc(1, sizeof *ds);
    if (!ds) {
        globfree(&gl);
        return NULL;
    }
    for (size_t f = 0; f < gl.gl_pathc; f++) {
        uint16_t *t;
        size_t n;
        if (px_token_file_read(gl.gl_pathv[f], vocab_size, &t, &n, err, errlen) != 0) {
            globfree(&gl);
            px_dataset_destroy(&ds);
            return NULL;
        }
        uint16_t *all = realloc(ds->tokens, (ds->n + n) * sizeof(uint16_t) + 1);
        if (!all) {
            free(t);
            px_err_set(err, errlen, "shard '%s': out of memory", gl.gl_pathv[f]);
            globfree(&gl);
            px_dataset_destroy(&ds);
            return NULL;
        }
        memcpy(all + ds->n, t, n * sizeof(uint16_t));
        free(t);
        ds->tokens = all;
        ds->n += n;
    }
    if (ds->n < min_tokens) {
        px_err_set(err, errlen, "%s shards in '%s' hold %zu tokens, fewer than the %zu needed",
                   split, dir, ds->n, min_tokens);
        globfree(&gl);
        px_dataset_destroy(&ds);
        return NULL;
    }
    globfree(&gl);
    return ds;
}

void px_dataset_destroy(px_dataset_t **self) {
    if (!self || !*self) return;
    free((*self)->tokens);
    free(*self);
    *self = NULL;
}

size_t px_dataset_num_tokens(const px_dataset_t *self) { return self->n; }

static void copy_window(const px_dataset_t *self, uint64_t off, int T, int *inputs, int *targets) {
    const uint16_t *w = self->tokens + off;
    for (int t = 0; t < T; t++) {
        inputs[t] = w[t];
        targets[t] = w[t + 1];
    }
}

void px_dataset_fill(const px_dataset_t *self, uint64_t seed, int64_t step, int64_t i0, int count,
                     int64_t B_global, int T, int *inputs, int *targets) {
    for (int k = 0; k < count; k++) {
        uint64_t off = px_sample_offset(seed, step, i0 + k, B_global, T, self->n);
        copy_window(self, off, T, inputs + (size_t)k * T, targets + (size_t)k * T);
    }
}

void px_dataset_fill_eval(const px_dataset_t *self, int64_t batch, int B, int T, int *inputs,
                          int *targets) {
    uint64_t nwin = (self->n - 1) / (uint64_t)T;
    for (int k = 0; k < B; k++) {
        uint64_t w = ((uint64_t)batch * (uint64_t)B + (uint64_t)k) % nwin;
        copy_window(self, w * (uint64_t)T, T, inputs + (size_t)k * T, targets + (size_t)k * T);
    }
}
