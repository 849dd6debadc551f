/* What the checkpoint library's files share and nobody else needs. */
#ifndef PX_CKPT_INT_H
#define PX_CKPT_INT_H

#include <stddef.h>
#include <stdint.h>

/* Writes a printf-style message into err; returns -1, for `return px_ckpt_fail(...)`. */
int px_ckpt_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Values in a tensor of that shape. */
int64_t px_ckpt_volume(int ndim, const int64_t *shape);

#endif
