/* Byte-level corpus preparation (dataprep.h). Bytes are tokens, so there is
 * nothing to train or download: any text, in any encoding, becomes a valid
 * shard for a vocabulary-256 model. */
#include "dataprep.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "px_err.h"
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

static int sink_add(sink_t *s, const unsigned char *bytes, size_t len, char *err, size_t errlen) {
    for (size_t i = 0; i < len; i++) {
        if (s->n == s->cap) {
            if (s->cap == PX_SHARD_MAX_TOKENS) {
                if (sink_flush(s, err, errlen) != 0) return -1;
            } else {
                size_t cap = s->cap ? s->cap * 2 : 1 << 20;
                if (cap > PX_SHARD_MAX_TOKENS) cap = PX_SHARD_MAX_TOKENS;
                uint16_t *b = realloc(s->buf, cap * sizeof(uint16_t));
                if (!b) return px_err_set(err, errlen, "out of memory");
                s->buf = b;
                s->cap = cap;
            }
        }
        s->buf[s->n++] = bytes[i]; /* the byte-level tokenizer */
    }
    return 0;
}

static int read_file(const char *path, unsigned char **data, size_t *len, char *err,
                     size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return px_err_set(err, errlen, "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        unsigned char *b = realloc(buf, cap * 2);
        if (!b) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = b;
        cap *= 2;
    }
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return px_err_set(err, errlen, "cannot read '%s'", path);
    }
    *data = buf;
    *len = n;
    return 0;
}

int px_dataprep_run(const char *out_dir, char *const *files, int nfiles, double val_fraction,
                    int verbose, px_dataprep_summary_t *summary, char *err, size_t errlen) {
    memset(summary, 0, sizeof *summary);
    if (nfiles < 1) return px_err_set(err, errlen, "no input files");
    if (!(val_fraction >= 0.0 && val_fraction < 1.0))
        return px_err_set(err, errlen, "val fraction %g out of range [0, 1)", val_fraction);
    if (mkdir(out_dir, 0777) != 0 && errno != EEXIST)
        return px_err_set(err, errlen, "cannot create output directory '%s': %s", out_dir,
                          strerror(errno));
    sink_t train = {.dir = out_dir, .split = "train"}, val = {.dir = out_dir, .split = "val"};
    int rc = -1;
    for (int i = 0; i < nfiles; i++) {
        unsigned char *data = NULL;
        size_t len = 0;
        if (read_file(files[i], &data, &len, err, errlen) != 0) goto done;
        /* Cut after the first newline at or past the (1 - val_fraction) mark. */
        size_t cut = len;
        if (val_fraction > 0.0) {
            cut = (size_t)((double)len * (1.0 - val_fraction));
            while (cut > 0 && cut < len && data[cut - 1] != '\n') cut++;
        }
        int ok = sink_add(&train, data, cut, err, errlen) == 0 &&
                 sink_add(&val, data + cut, len - cut, err, errlen) == 0;
        free(data);
        if (!ok) goto done;
        summary->files++;
        summary->bytes += len;
        if (verbose)
            printf("file=%s bytes=%zu train=%zu val=%zu\n", files[i], len, cut, len - cut);
    }
    if (sink_flush(&train, err, errlen) != 0 || sink_flush(&val, err, errlen) != 0) goto done;
    summary->train_tokens = train.total;
    summary->val_tokens = val.total;
    summary->train_shards = train.shards;
    summary->val_shards = val.shards;
    rc = 0;
done:
    free(train.buf);
    free(val.buf);
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
