/* Corpus preparation (dataprep.h): documents from text_source.c, through
 * the tokenizer hook, into two sinks (train, val) that write a shard each
 * PX_SHARD_MAX_TOKENS tokens. Without a tokenizer bytes are tokens, so any
 * text in any encoding becomes a valid shard for a vocabulary-256 model. */
#include "dataprep.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "px_err.h"
#include "px_file.h"
#include "px_time.h"
#include "token_file.h"

/* Growable token buffer for one split; flushed as a shard when full. */
typedef struct {
    const char *dir, *split;
    uint16_t *buf;
    size_t n, cap;
    int shards;
    size_t total;
} sink_t;

static int sink_flush(sink_t *s, char *err, size_t errlen) {
    if (s->n == 0) return 0;
    size_t plen = strlen(s->dir) + strlen(s->split) + 32;
    char *path = malloc(plen);
    if (!path) return px_err_set(err, errlen, "out of memory");
    snprintf(path, plen, "%s/%s_%06d.bin", s->dir, s->split, s->shards);
    int rc = px_token_file_write(path, s->buf, s->n, err, errlen);
    free(path);
    if (rc != 0) return -1;
    s->shards++;
    s->total += s->n;
    s->n = 0;
    return 0;
}

/* Room for one more token (a full shard is written first). */
static int sink_room(sink_t *s, char *err, size_t errlen) {
    if (s->n < s->cap) return 0;
    if (s->cap == PX_SHARD_MAX_TOKENS) return sink_flush(s, err, errlen);
    size_t cap = s->cap ? s->cap * 2 : 1 << 20;
    if (cap > PX_SHARD_MAX_TOKENS) cap = PX_SHARD_MAX_TOKENS;
    uint16_t *b = realloc(s->buf, cap * sizeof(uint16_t));
    if (!b) return px_err_set(err, errlen, "out of memory");
    s->buf = b;
    s->cap = cap;
    return 0;
}

typedef struct {
    const px_dataprep_opts_t *o;
    sink_t train, val;
    int32_t *ids; /* the encoder's output, reused */
    size_t ids_cap;
    size_t train_bytes, val_bytes; /* of JSONL records, for their split */
    px_dataprep_summary_t *sum;
    int64_t t0_ms, last_ms;
    int output_failed; /* a document could not be tokenized or written (the output's fault, not the input's) */
} prep_t;

/* Tokenizes text[len] into the sink, after the end-of-text token if any. */
static int add_text(prep_t *p, sink_t *s, const unsigned char *text, size_t len, char *err, size_t errlen) {
    const px_encoder_t *e = p->o->encoder;
    if (!e) { /* the byte-level tokenizer */
        for (size_t i = 0; i < len; i++) {
            if (sink_room(s, err, errlen) != 0) return -1;
            s->buf[s->n++] = text[i];
        }
        return 0;
    }
    size_t n = 0;
    if (e->eot_id >= 0) {
        if (sink_room(s, err, errlen) != 0) return -1;
        s->buf[s->n++] = (uint16_t)e->eot_id;
    }
    if (len > 0 && e->encode(e->arg, (const char *)text, len, &p->ids, &n, &p->ids_cap, err, errlen) != 0) return -1;
    for (size_t i = 0; i < n; i++) {
        if (p->ids[i] < 0 || p->ids[i] >= e->vocab_size)
            return px_err_set(err, errlen, "the tokenizer gave id %d, outside its vocabulary of %d", (int)p->ids[i],
                              e->vocab_size);
        if (sink_room(s, err, errlen) != 0) return -1;
        s->buf[s->n++] = (uint16_t)p->ids[i];
    }
    return 0;
}

static void progress(prep_t *p, int last) {
    int64_t now = px_now_ms();
    if (!p->o->verbose || (!last && now - p->last_ms < 1000)) return;
    p->last_ms = now;
    double s = (double)(now - p->t0_ms) / 1000.0;
    size_t tokens = p->train.total + p->train.n + p->val.total + p->val.n;
    fprintf(stderr, "progress docs=%zu bytes=%zu tokens=%zu MB/s=%.1f tokens/s=%.0f%s\n", p->sum->docs, p->sum->bytes,
            tokens, s > 0 ? (double)p->sum->bytes / 1e6 / s : 0.0, s > 0 ? (double)tokens / s : 0.0,
            last ? " done" : "");
}

static int on_doc(void *arg, const char *source, px_doc_kind_t kind, const unsigned char *text, size_t len, char *err,
                  size_t errlen) {
    (void)source;
    prep_t *p = arg;
    double f = p->o->val_fraction;
    int rc;
    if (kind == PX_DOC_FILE) { /* cut after the first newline at or past the (1 - f) mark */
        size_t cut = len;
        if (f > 0.0) {
            cut = (size_t)((double)len * (1.0 - f));
            while (cut > 0 && cut < len && text[cut - 1] != '\n') cut++;
        }
        rc = add_text(p, &p->train, text, cut, err, errlen);
        if (rc == 0 && cut < len) rc = add_text(p, &p->val, text + cut, len - cut, err, errlen);
    } else { /* a record goes whole to val while val stays within its share */
        int to_val = (double)(p->val_bytes + len) <= f * (double)(p->train_bytes + p->val_bytes + len);
        *(to_val ? &p->val_bytes : &p->train_bytes) += len;
        rc = add_text(p, to_val ? &p->val : &p->train, text, len, err, errlen);
    }
    p->sum->docs++;
    progress(p, 0);
    if (rc != 0) p->output_failed = 1;
    return rc;
}

int px_dataprep_run(const char *out_dir, char *const *inputs, int ninputs, const px_dataprep_opts_t *o,
                    px_dataprep_summary_t *summary, char *err, size_t errlen) {
    memset(summary, 0, sizeof *summary);
    if (!(o->val_fraction >= 0.0 && o->val_fraction < 1.0))
        return px_err_set(err, errlen, "val fraction %g out of range [0, 1)", o->val_fraction);
    if (o->encoder && (o->encoder->vocab_size < 1 || o->encoder->vocab_size > PX_TOKEN_FILE_MAX_VOCAB))
        return px_err_set(err, errlen, "a vocabulary of %d tokens does not fit token shards (1..%d: ids are 16-bit)",
                          o->encoder->vocab_size, PX_TOKEN_FILE_MAX_VOCAB);
    char **files = NULL;
    int nfiles = 0;
    if (px_text_inputs_expand(inputs, ninputs, &files, &nfiles, err, errlen) != 0) return -1;
    if (nfiles < 1) {
        px_text_files_free(files);
        return px_err_set(err, errlen, "no input files");
    }
    if (px_mkdirs(out_dir) != 0) {
        px_text_files_free(files);
        return px_err_set(err, errlen, "cannot create output directory '%s': %s", out_dir, strerror(errno));
    }
    prep_t p = {.o = o, .train = {.dir = out_dir, .split = "train"}, .val = {.dir = out_dir, .split = "val"},
                .sum = summary, .t0_ms = px_now_ms()};
    p.last_ms = p.t0_ms;
    const char *key = o->jsonl_key ? o->jsonl_key : "text";
    int rc = 0;
    for (int i = 0; rc == 0 && i < nfiles; i++) {
        rc = px_text_source_read(files[i], o->format, key, on_doc, &p, &summary->bytes, err, errlen);
        if (rc != 0 && !p.output_failed) rc = -2; /* the reader's own fault: the input */
        summary->files++;
    }
    if (rc == 0 && (sink_flush(&p.train, err, errlen) != 0 || sink_flush(&p.val, err, errlen) != 0)) rc = -1;
    if (rc == 0) {
        progress(&p, 1);
        summary->train_tokens = p.train.total;
        summary->val_tokens = p.val.total;
        summary->train_shards = p.train.shards;
        summary->val_shards = p.val.shards;
    }
    free(p.train.buf);
    free(p.val.buf);
    free(p.ids);
    px_text_files_free(files);
    return rc;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

int px_dataprep_demo_files(char ***files, int *nfiles, char *err, size_t errlen) {
    *files = NULL;
    *nfiles = 0;
    DIR *d = opendir(PX_DEMO_CORPUS_DIR);
    if (!d)
        return px_err_set(err, errlen,
                          "cannot open the demo corpus '%s': %s (install Debian's 'fortunes' "
                          "package: apt-get install fortunes)",
                          PX_DEMO_CORPUS_DIR, strerror(errno));
    int n = 0, cap = 64;
    char **list = calloc((size_t)cap + 1, sizeof(char *));
    struct dirent *e;
    while (list && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || has_suffix(e->d_name, ".dat") || has_suffix(e->d_name, ".u8"))
            continue;
        size_t plen = strlen(PX_DEMO_CORPUS_DIR) + strlen(e->d_name) + 2;
        char *path = malloc(plen);
        if (!path) break;
        snprintf(path, plen, "%s/%s", PX_DEMO_CORPUS_DIR, e->d_name);
        struct stat st;
        /* lstat: regular files only; links and subdirectories are skipped. */
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(path);
            continue;
        }
        if (n == cap) {
            char **l = realloc(list, ((size_t)cap * 2 + 1) * sizeof(char *));
            if (!l) {
                free(path);
                break;
            }
            list = l;
            cap *= 2;
        }
        list[n++] = path;
        list[n] = NULL;
    }
    closedir(d);
    if (!list) return px_err_set(err, errlen, "out of memory");
    if (n == 0) {
        free(list);
        return px_err_set(err, errlen,
                          "no fortune files in '%s' (install Debian's 'fortunes' package)",
                          PX_DEMO_CORPUS_DIR);
    }
    qsort(list, (size_t)n, sizeof(char *), cmp_str);
    *files = list;
    *nfiles = n;
    return 0;
}

void px_dataprep_free_list(char **files) {
    if (!files) return;
    for (char **f = files; *f; f++) free(*f);
    free(files);
}
