/* A growable text buffer for building JSON, Prometheus text and HTML without
 * fixed-size limits. Allocation failure is sticky: the buffer reports it at
 * the end (px_buf_take returns NULL) instead of at every append. */
#ifndef PX_BUF_H
#define PX_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct {
    char *data;
    size_t len, cap;
    int failed;
} px_buf_t;

void px_buf_init(px_buf_t *b);
void px_buf_printf(px_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void px_buf_vprintf(px_buf_t *b, const char *fmt, va_list ap);
void px_buf_append(px_buf_t *b, const char *s, size_t n);
/* Appends s as a JSON string literal, quotes included. */
void px_buf_json_str(px_buf_t *b, const char *s);
/* Hands over the NUL-terminated text (caller frees); NULL if an allocation failed. */
char *px_buf_take(px_buf_t *b, size_t *len);
void px_buf_free(px_buf_t *b);

#endif
