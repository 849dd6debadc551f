/* Token file reader and writer (token_file.h). The reader validates the header
 * against the file size before allocating, and every token against the
 * vocabulary before the model can index an embedding row with it. */
#include "token_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "px_err.h"
#include "px_file.h"

#define HEADER_INTS 256
#define HEADER_BYTES (HEADER_INTS * (long long)sizeof(int32_t))

int px_token_file_read(const char *path, int vocab_size, uint16_t **tokens, size_t *n, char *err,
                       size_t errlen) {
    *tokens = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return px_err_set(err, errlen, "cannot open shard '%s': %s (run phalanx-data?)", path,
                          strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return px_err_set(err, errlen, "cannot stat shard '%s': %s", path, strerror(errno));
    }
    long long size = (long long)st.st_size;
    int32_t h[HEADER_INTS];
    if (fread(h, sizeof(int32_t), HEADER_INTS, f) != HEADER_INTS) {
        fclose(f);
        return px_err_set(err, errlen,
                          "shard '%s' is truncated: %lld bytes, shorter than the %lld-byte header",
                          path, size, HEADER_BYTES);
    }
    const char *problem = NULL;
    char buf[256];
    if (h[0] != PX_TOKEN_FILE_MAGIC) {
        snprintf(buf, sizeof buf, "bad magic %d (expected %d): not a token shard", h[0],
                 PX_TOKEN_FILE_MAGIC);
        problem = buf;
    } else if (h[1] != PX_TOKEN_FILE_VERSION) {
        snprintf(buf, sizeof buf, "unsupported version %d (expected %d)", h[1], PX_TOKEN_FILE_VERSION);
        problem = buf;
    } else if (h[2] < 0) {
        snprintf(buf, sizeof buf, "bad token count %d (negative)", h[2]);
        problem = buf;
    } else {
        long long held = (size - HEADER_BYTES) / (long long)sizeof(uint16_t);
        long long expect = HEADER_BYTES + (long long)h[2] * (long long)sizeof(uint16_t);
        if (h[2] > held) {
            snprintf(buf, sizeof buf,
                     "oversized token count: header says %d tokens but the file holds %lld "
                     "(truncated?)",
                     h[2], held);
            problem = buf;
        } else if (size != expect) {
            snprintf(buf, sizeof buf,
                     "size mismatch: %lld bytes, but %d tokens need exactly %lld (trailing data)",
                     size, h[2], expect);
            problem = buf;
        }
    }
    if (problem) {
        fclose(f);
        return px_err_set(err, errlen, "shard '%s': %s", path, problem);
    }
    size_t count = (size_t)h[2];
    uint16_t *t = malloc(count ? count * sizeof(uint16_t) : 1);
    if (!t) {
        fclose(f);
        return px_err_set(err, errlen, "shard '%s': out of memory for %zu tokens", path, count);
    }
    size_t got = fread(t, sizeof(uint16_t), count, f);
    fclose(f);
    if (got != count) {
        free(t);
        return px_err_set(err, errlen, "shard '%s': short read (%zu of %zu tokens)", path, got,
                          count);
    }
    for (size_t i = 0; i < count; i++)
        if (t[i] >= vocab_size) {
            px_err_set(err, errlen,
                       "shard '%s': token %u at index %zu is out of range for vocabulary size %d "
                       "(shard made for another tokenizer?)",
                       path, t[i], i, vocab_size);
            free(t);
            return -1;
        }
    *tokens = t;
    *n = count;
    return 0;
}

int px_token_file_write(const char *path, const uint16_t *tokens, size_t n, char *err, size_t errlen) {
    if (n > (size_t)INT32_MAX)
        return px_err_set(err, errlen, "shard '%s': %zu tokens do not fit one shard (max %d)", path,
                          n, INT32_MAX);
    int32_t h[HEADER_INTS] = {0};
    h[0] = PX_TOKEN_FILE_MAGIC;
    h[1] = PX_TOKEN_FILE_VERSION;
    h[2] = (int32_t)n;
    return px_file_write_atomic(path, h, sizeof h, tokens, n * sizeof(uint16_t), "shard", err, errlen);
}
