/* Tokenizer throughput (bench/tok_encode.py drives it against HF tokenizers):
 * encodes documents with px_tok_encode on N threads, each thread taking the
 * next document, and prints one line: bytes, tokens, seconds, bytes/s. The
 * best of --repeat runs counts; documents are read first, so only encoding
 * is timed. --ids writes each document's ids (records: a 4-byte count, then
 * 4-byte ids) so the script can check them against HF's. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "px_tok.h"

static const char usage[] =
    "usage: bench_tok_encode --tokenizer FILE [--threads N] [--repeat N] [--ids OUT] RECORDS...\n"
    "  --tokenizer FILE  tokenizer.json to load (required)\n"
    "  --threads N       encoding threads (default 1, range 1-256)\n"
    "  --repeat N        timed runs, the best one is printed (default 3, range 1-100)\n"
    "  --ids OUT         write the ids of every document to OUT\n"
    "  RECORDS           files of documents: a 4-byte little-endian length, then the bytes\n";

typedef struct {
    char **text;
    size_t *len;
    size_t n;
    int32_t **ids;
    size_t *nids;
    const px_tok_t *tok;
    atomic_size_t next;
    int failed;
} job_t;

static void *worker(void *p) {
    job_t *j = p;
    int32_t *ids = NULL;
    size_t cap = 0;
    char err[512];
    for (;;) {
        size_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n) break;
        size_t n = 0;
        if (px_tok_encode(j->tok, j->text[i], j->len[i], &ids, &n, &cap, err, sizeof err) < 0) {
            fprintf(stderr, "bench_tok_encode: %s\n", err);
            j->failed = 1;
            break;
        }
        j->nids[i] = n;
        if (j->ids) {
            j->ids[i] = malloc(n * sizeof **j->ids + 1);
            memcpy(j->ids[i], ids, n * sizeof *ids);
        }
    }
    free(ids);
    return NULL;
}

static int read_records(const char *path, job_t *j, size_t *cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return fprintf(stderr, "bench_tok_encode: cannot open '%s'\n", path), -1;
    unsigned char h[4];
    while (fread(h, 1, 4, f) == 4) {
        size_t len = (size_t)h[0] | (size_t)h[1] << 8 | (size_t)h[2] << 16 | (size_t)h[3] << 24;
        if (j->n == *cap) {
            *cap = *cap ? *cap * 2 : 1024;
            j->text = realloc(j->text, *cap * sizeof *j->text);
            j->len = realloc(j->len, *cap * sizeof *j->len);
        }
        j->text[j->n] = malloc(len + 1);
        if (fread(j->text[j->n], 1, len, f) != len) {
            fclose(f);
            return fprintf(stderr, "bench_tok_encode: '%s': a record is cut short\n", path), -1;
        }
        j->len[j->n++] = len;
    }
    fclose(f);
    return 0;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *tokpath = NULL, *idspath = NULL;
    int threads = 1, repeat = 3;
    job_t j = {0};
    size_t cap = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0) return fputs(usage, stdout), 0;
        if (strcmp(a, "--tokenizer") == 0 && v) tokpath = argv[++i];
        else if (strcmp(a, "--ids") == 0 && v) idspath = argv[++i];
        else if (strcmp(a, "--threads") == 0 && v) {
            threads = atoi(argv[++i]);
            if (threads < 1 || threads > 256) return fprintf(stderr, "--threads %s: out of range 1-256\n", v), 2;
        } else if (strcmp(a, "--repeat") == 0 && v) {
            repeat = atoi(argv[++i]);
            if (repeat < 1 || repeat > 100) return fprintf(stderr, "--repeat %s: out of range 1-100\n", v), 2;
        } else if (a[0] == '-') return fprintf(stderr, "unknown flag %s\n%s", a, usage), 2;
        else if (read_records(a, &j, &cap) < 0) return 1;
    }
    if (!tokpath) return fputs(usage, stderr), 2;
    char err[512];
    px_tok_t *tok = px_tok_load(tokpath, err, sizeof err);
    if (!tok) return fprintf(stderr, "bench_tok_encode: %s\n", err), 1;
    j.tok = tok;
    j.nids = calloc(j.n + 1, sizeof *j.nids);
    size_t bytes = 0;
    for (size_t i = 0; i < j.n; i++) bytes += j.len[i];
    double best = 1e30;
    pthread_t *th = malloc((size_t)threads * sizeof *th);
    for (int r = 0; r < repeat; r++) {
        if (idspath && r == repeat - 1) j.ids = calloc(j.n + 1, sizeof *j.ids);
        atomic_store(&j.next, 0);
        double t0 = now();
        for (int k = 0; k < threads; k++) pthread_create(&th[k], NULL, worker, &j);
        for (int k = 0; k < threads; k++) pthread_join(th[k], NULL);
        double dt = now() - t0;
        if (j.failed) return 1;
        if (dt < best) best = dt;
    }
    size_t tokens = 0;
    for (size_t i = 0; i < j.n; i++) tokens += j.nids[i];
    if (idspath) {
        FILE *f = fopen(idspath, "wb");
        if (!f) return fprintf(stderr, "bench_tok_encode: cannot create '%s'\n", idspath), 1;
        for (size_t i = 0; i < j.n; i++) {
            uint32_t c = (uint32_t)j.nids[i];
            fwrite(&c, 4, 1, f);
            fwrite(j.ids[i], 4, c, f);
        }
        if (fclose(f) != 0) return fprintf(stderr, "bench_tok_encode: cannot write '%s'\n", idspath), 1;
    }
    printf("docs=%zu bytes=%zu tokens=%zu threads=%d seconds=%.4f bytes_per_s=%.0f\n", j.n, bytes, tokens, threads, best,
           (double)bytes / best);
    px_tok_free(&tok);
    return 0;
}
