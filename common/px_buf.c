/* Implementation of px_buf.h. */
#include "px_buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void px_buf_init(px_buf_t *b) { memset(b, 0, sizeof *b); }

static int reserve(px_buf_t *b, size_t extra) {
    if (b->failed) return -1;
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t ncap = b->cap ? b->cap : 256;
    while (ncap < b->len + extra + 1) ncap *= 2;
    char *nd = realloc(b->data, ncap);
    if (!nd) {
        b->failed = 1;
        return -1;
    }
    b->data = nd;
    b->cap = ncap;
    return 0;
}

void px_buf_append(px_buf_t *b, const char *s, size_t n) {
    if (reserve(b, n) != 0) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void px_buf_vprintf(px_buf_t *b, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0 || reserve(b, (size_t)n) != 0) return;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

void px_buf_printf(px_buf_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    px_buf_vprintf(b, fmt, ap);
    va_end(ap);
}

void px_buf_json_str(px_buf_t *b, const char *s) {
    px_buf_append(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            px_buf_append(b, e, 2);
        } else if (*p < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", *p);
            px_buf_append(b, e, 6);
        } else if (*p < 0x80) {
            px_buf_append(b, (const char *)p, 1);
        } else {
            int n = (*p & 0xe0) == 0xc0 ? 2 : (*p & 0xf0) == 0xe0 ? 3 : (*p & 0xf8) == 0xf0 ? 4 : 0;
            int ok = n > 0;
            for (int k = 1; ok && k < n; k++) ok = (p[k] & 0xc0) == 0x80;
            if (ok) {
                px_buf_append(b, (const char *)p, (size_t)n);
                p += n - 1;
            } else {
                px_buf_append(b, "\\ufffd", 6);
            }
        }
    }
    px_buf_append(b, "\"", 1);
}

char *px_buf_take(px_buf_t *b, size_t *len) {
    if (b->failed || reserve(b, 0) != 0) {
        px_buf_free(b);
        return NULL;
    }
    char *d = b->data;
    d[b->len] = '\0'; /* an empty buffer was never written to */
    if (len) *len = b->len;
    memset(b, 0, sizeof *b);
    return d;
}

void px_buf_free(px_buf_t *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}
