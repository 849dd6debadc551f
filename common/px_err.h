/* Error reporting into a caller's buffer: functions that can fail on bad
 * input (files, configs, a peer's data) write one human-readable line into
 * err[errlen] and return -1 (or NULL) instead of exiting, so a worker can
 * decide what a bad file means (skip a torn checkpoint, refuse a peer) and
 * tests can check the message. Messages name the file and the problem, and
 * hint at a fix. Header only, libc only: every library may use it. */
#ifndef PX_ERR_H
#define PX_ERR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#define PX_ERRLEN 512

/* Writes the message into err[errlen] (err may be NULL). Always returns -1. */
static inline int px_err_set(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int px_err_set(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

#endif
