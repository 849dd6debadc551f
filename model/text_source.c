/* Input files to documents (text_source.h). Every input goes through zlib's
 * gz reader, which reads plain files unchanged and inflates gzip ones, so
 * compression needs no flag. JSON Lines are read line by line through a
 * growing buffer, so a JSONL file of any size takes memory for its longest
 * line only; a text file is one document and is read whole (dataprep.c cuts
 * its tail off for validation). */
#include "text_source.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "px_err.h"

#define READ_CHUNK (1 << 20)

/* ---- expanding the inputs ---------------------------------------------- */

typedef struct {
    char **v;
    int n, cap;
} list_t;

static int list_add(list_t *l, const char *s) {
    if (l->n + 1 >= l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        char **v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        l->v = v, l->cap = cap;
    }
    if (!(l->v[l->n] = strdup(s))) return -1;
    l->v[++l->n] = NULL;
    return 0;
}

static int cmp_path(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Appends the regular files below dir, sorted by path. */
static int walk(const char *dir, list_t *out, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) return px_err_set(err, errlen, "input '%s': %s", dir, strerror(errno));
    list_t here = {0};
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue; /* ., .., and hidden files */
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *path = malloc(len);
        if (!path) {
            rc = px_err_set(err, errlen, "out of memory");
            break;
        }
        snprintf(path, len, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", e->d_name);
        if (list_add(&here, path) != 0) rc = px_err_set(err, errlen, "out of memory");
        free(path);
    }
    closedir(d);
    if (here.n) qsort(here.v, (size_t)here.n, sizeof *here.v, cmp_path);
    for (int i = 0; rc == 0 && i < here.n; i++) {
        struct stat st;
        if (stat(here.v[i], &st) != 0) {
            rc = px_err_set(err, errlen, "input '%s': %s", here.v[i], strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            rc = walk(here.v[i], out, err, errlen);
        } else if (S_ISREG(st.st_mode)) {
            if (access(here.v[i], R_OK) != 0)
                rc = px_err_set(err, errlen, "input '%s': %s", here.v[i], strerror(errno));
            else if (list_add(out, here.v[i]) != 0)
                rc = px_err_set(err, errlen, "out of memory");
        } /* sockets, fifos and devices inside a folder are not text */
    }
    px_text_files_free(here.v);
    return rc;
}

int px_text_inputs_expand(char *const *inputs, int n, char ***files, int *nfiles, char *err, size_t errlen) {
    list_t out = {0};
    int stdin_seen = 0, rc = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        const char *in = inputs[i];
        struct stat st;
        if (strcmp(in, "-") == 0) {
            if (stdin_seen++) rc = px_err_set(err, errlen, "input '-' (standard input) given twice");
            else if (list_add(&out, in) != 0) rc = px_err_set(err, errlen, "out of memory");
        } else if (stat(in, &st) != 0) {
            rc = px_err_set(err, errlen, "input '%s': %s", in, strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            int before = out.n;
            rc = walk(in, &out, err, errlen);
            if (rc == 0 && out.n == before) rc = px_err_set(err, errlen, "input '%s': a folder with no files", in);
        } else if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
            rc = px_err_set(err, errlen, "input '%s': not a file or a folder", in);
        } else if (access(in, R_OK) != 0) {
            rc = px_err_set(err, errlen, "input '%s': %s", in, strerror(errno));
        } else if (list_add(&out, in) != 0) {
            rc = px_err_set(err, errlen, "out of memory");
        }
    }
    if (rc != 0) {
        px_text_files_free(out.v);
        return -1;
    }
    if (!out.v && !(out.v = calloc(1, sizeof *out.v))) return px_err_set(err, errlen, "out of memory");
    *files = out.v;
    *nfiles = out.n;
    return 0;
}

void px_text_files_free(char **files) {
    if (!files) return;
    for (char **f = files; *f; f++) free(*f);
    free(files);
}

/* ---- reading ------------------------------------------------------------ */

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

int px_text_name_is_jsonl(const char *name) {
    return has_suffix(name, ".jsonl") || has_suffix(name, ".ndjson") || has_suffix(name, ".jsonl.gz") ||
           has_suffix(name, ".ndjson.gz");
}

static const char *display(const char *file) { return strcmp(file, "-") == 0 ? "standard input" : file; }

/* Reads up to cap bytes; -1 with a message on a read or inflate error. */
static long gz_fill(gzFile gz, const char *file, unsigned char *buf, size_t cap, char *err, size_t errlen) {
    int got = gzread(gz, buf, (unsigned)(cap > READ_CHUNK ? READ_CHUNK : cap));
    if (got < 0) {
        int code;
        const char *why = gzerror(gz, &code);
        return px_err_set(err, errlen, "cannot read '%s': %s", display(file),
                          code == Z_ERRNO ? strerror(errno) : why);
    }
    return got;
}

static int read_whole(gzFile gz, const char *file, px_doc_fn fn, void *arg, size_t *bytes, char *err,
                      size_t errlen) {
    size_t n = 0, cap = 1 << 16;
    unsigned char *buf = malloc(cap);
    if (!buf) return px_err_set(err, errlen, "out of memory");
    for (;;) {
        if (n == cap) {
            unsigned char *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                return px_err_set(err, errlen, "out of memory reading '%s'", display(file));
            }
            buf = b, cap *= 2;
        }
        long got = gz_fill(gz, file, buf + n, cap - n, err, errlen);
        if (got < 0) {
            free(buf);
            return -1;
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    *bytes += n;
    int rc = fn(arg, file, PX_DOC_FILE, buf, n, err, errlen);
    free(buf);
    return rc;
}

static int blank(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return 0;
    return 1;
}

/* One JSONL record: the string under key. */
static int record(const char *file, long line, const unsigned char *s, size_t n, const char *key, px_doc_fn fn,
                  void *arg, char *err, size_t errlen) {
    if (blank(s, n)) return 0;
    json_error_t je;
    json_t *obj = json_loadb((const char *)s, n, JSON_ALLOW_NUL, &je);
    if (!obj)
        return px_err_set(err, errlen, "'%s' line %ld: not JSON (%s, column %d)", display(file), line, je.text,
                          je.column);
    json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    int rc;
    if (!json_is_object(obj))
        rc = px_err_set(err, errlen, "'%s' line %ld: a JSON %s, not an object", display(file), line,
                        json_is_array(obj) ? "array" : "value");
    else if (!v)
        rc = px_err_set(err, errlen, "'%s' line %ld: no \"%s\" field (--jsonl-key names the text's field)",
                        display(file), line, key);
    else if (!json_is_string(v))
        rc = px_err_set(err, errlen, "'%s' line %ld: \"%s\" is not a string", display(file), line, key);
    else
        rc = fn(arg, file, PX_DOC_RECORD, (const unsigned char *)json_string_value(v), json_string_length(v), err,
                errlen);
    json_decref(obj);
    return rc;
}

static int read_lines(gzFile gz, const char *file, const char *key, px_doc_fn fn, void *arg, size_t *bytes,
                      char *err, size_t errlen) {
    size_t cap = READ_CHUNK, start = 0, have = 0, scan = 0;
    unsigned char *buf = malloc(cap);
    if (!buf) return px_err_set(err, errlen, "out of memory");
    long line = 0;
    int rc = 0, eof = 0;
    while (rc == 0) {
        unsigned char *nl = scan < have ? memchr(buf + scan, '\n', have - scan) : NULL;
        if (nl) {
            size_t end = (size_t)(nl - buf);
            rc = record(file, ++line, buf + start, end - start, key, fn, arg, err, errlen);
            start = scan = end + 1;
            continue;
        }
        if (eof) {
            if (have > start) rc = record(file, ++line, buf + start, have - start, key, fn, arg, err, errlen);
            break;
        }
        if (start > 0) { /* keep the partial line at the front */
            memmove(buf, buf + start, have - start);
            have -= start, start = 0;
        }
        scan = have;
        if (have == cap) {
            unsigned char *b = realloc(buf, cap * 2);
            if (!b) {
                rc = px_err_set(err, errlen, "'%s' line %ld: out of memory for a line over %zu bytes", display(file),
                                line + 1, cap);
                break;
            }
            buf = b, cap *= 2;
        }
        long got = gz_fill(gz, file, buf + have, cap - have, err, errlen);
        if (got < 0) rc = -1;
        else if (got == 0) eof = 1;
        else have += (size_t)got, *bytes += (size_t)got;
    }
    free(buf);
    return rc;
}

int px_text_source_read(const char *file, px_text_format_t format, const char *key, px_doc_fn fn, void *arg,
                        size_t *bytes, char *err, size_t errlen) {
    int is_stdin = strcmp(file, "-") == 0;
    gzFile gz;
    if (is_stdin) {
        int fd = dup(STDIN_FILENO);
        gz = fd >= 0 ? gzdopen(fd, "rb") : NULL;
        if (!gz && fd >= 0) close(fd);
    } else {
        gz = gzopen(file, "rb");
    }
    if (!gz) return px_err_set(err, errlen, "cannot open '%s': %s", display(file), strerror(errno ? errno : ENOMEM));
    gzbuffer(gz, 1 << 18);
    int jsonl = format == PX_TEXT_FORMAT_JSONL || (format == PX_TEXT_FORMAT_AUTO && px_text_name_is_jsonl(file));
    int rc = jsonl ? read_lines(gz, file, key, fn, arg, bytes, err, errlen)
                   : read_whole(gz, file, fn, arg, bytes, err, errlen);
    gzclose(gz);
    return rc;
}
