/* The tokenizer on the command line, for test_hf_equal.py: texts go in as
 * records (a 4-byte little-endian length, then the bytes), ids come out the
 * same way (a 4-byte count, then 4-byte ids), so any bytes, NUL included,
 * pass through without quoting.
 *   tok_tool encode TOKENIZER.json RECORDS OUT      ids of each record
 *   tok_tool roundtrip TOKENIZER.json RECORDS       decode(encode(x)) == x for each
 *   tok_tool train VOCAB EOT THREADS RECORDS OUT.json
 * Exits 1 with a message on any failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_tok.h"

typedef struct {
    char **text;
    size_t *len;
    size_t n;
} records_t;

static void die(const char *fmt, const char *a) {
    fprintf(stderr, "tok_tool: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n");
    exit(1);
}

static records_t read_records(const char *path) {
    records_t r = {0};
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open '%s'", path);
    size_t cap = 0;
    unsigned char h[4];
    while (fread(h, 1, 4, f) == 4) {
        size_t len = (size_t)h[0] | (size_t)h[1] << 8 | (size_t)h[2] << 16 | (size_t)h[3] << 24;
        if (r.n == cap) {
            cap = cap ? cap * 2 : 64;
            r.text = realloc(r.text, cap * sizeof *r.text);
            r.len = realloc(r.len, cap * sizeof *r.len);
        }
        r.text[r.n] = malloc(len + 1);
        if (fread(r.text[r.n], 1, len, f) != len) die("'%s': a record is cut short", path);
        r.len[r.n++] = len;
    }
    fclose(f);
    return r;
}

static void free_records(records_t *r) {
    for (size_t i = 0; i < r->n; i++) free(r->text[i]);
    free(r->text);
    free(r->len);
}

static px_tok_t *load(const char *path) {
    char err[512];
    px_tok_t *t = px_tok_load(path, err, sizeof err);
    if (!t) die("%s", err);
    return t;
}

int main(int argc, char **argv) {
    char err[512];
    if (argc == 5 && strcmp(argv[1], "encode") == 0) {
        px_tok_t *t = load(argv[2]);
        records_t r = read_records(argv[3]);
        FILE *out = fopen(argv[4], "wb");
        if (!out) die("cannot create '%s'", argv[4]);
        int32_t *ids = NULL;
        size_t cap = 0;
        for (size_t i = 0; i < r.n; i++) {
            size_t n = 0;
            if (px_tok_encode(t, r.text[i], r.len[i], &ids, &n, &cap, err, sizeof err) < 0) die("%s", err);
            uint32_t c = (uint32_t)n;
            fwrite(&c, 4, 1, out);
            fwrite(ids, 4, n, out);
        }
        if (fclose(out) != 0) die("cannot write '%s'", argv[4]);
        free(ids);
        free_records(&r);
        px_tok_free(&t);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "roundtrip") == 0) {
        px_tok_t *t = load(argv[2]);
        records_t r = read_records(argv[3]);
        int32_t *ids = NULL;
        char *buf = NULL;
        size_t cap = 0, bcap = 0;
        for (size_t i = 0; i < r.n; i++) {
            size_t n = 0, blen = 0;
            if (px_tok_encode(t, r.text[i], r.len[i], &ids, &n, &cap, err, sizeof err) < 0 ||
                px_tok_decode(t, ids, n, &buf, &blen, &bcap, err, sizeof err) < 0)
                die("%s", err);
            if (blen != r.len[i] || memcmp(buf, r.text[i], blen) != 0) {
                fprintf(stderr, "tok_tool: record %zu (%zu bytes) decodes to %zu other bytes\n", i, r.len[i], blen);
                return 1;
            }
        }
        printf("roundtrip: %zu records equal\n", r.n);
        free(ids);
        free(buf);
        free_records(&r);
        px_tok_free(&t);
        return 0;
    }
    if (argc == 7 && strcmp(argv[1], "train") == 0) {
        px_tok_trainer_t *tr = px_tok_trainer_new(atoi(argv[2]), argv[3], err, sizeof err);
        if (!tr) die("%s", err);
        records_t r = read_records(argv[5]);
        for (size_t i = 0; i < r.n; i++)
            if (px_tok_trainer_feed(tr, r.text[i], r.len[i], err, sizeof err) < 0) die("%s", err);
        px_tok_t *t = px_tok_trainer_finish(tr, atoi(argv[4]), NULL, NULL, err, sizeof err);
        if (!t || px_tok_save(t, argv[6], err, sizeof err) < 0) die("%s", err);
        px_tok_free(&t);
        px_tok_trainer_free(&tr);
        free_records(&r);
        return 0;
    }
    fprintf(stderr, "usage: tok_tool encode TOKENIZER.json RECORDS OUT | roundtrip TOKENIZER.json RECORDS |"
                    " train VOCAB EOT THREADS RECORDS OUT.json\n");
    return 2;
}
