/* Logging for every phalanx program: one line per event, key=value pairs,
 * so a person can read it in a terminal and a script can grep it.
 *   px_log_info("member_lost group=%s rank=%d reason=%s", g, r, why);
 * prints "ts=2026-11-21T21:45:00.123Z level=info prog=phalanx-coordinator member_lost ...".
 * px_die() reports file and line, because a fatal error should say where. */
#ifndef PX_LOG_H
#define PX_LOG_H

#include <stdarg.h>

#include "px_flags.h"

void px_log_set_prog(const char *prog);
void px_log_set_quiet(int quiet); /* 1: suppress info/debug lines */
void px_logv(const char *level, const char *fmt, va_list ap);
void px_log(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void px_die_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

/* --quiet, the daemons' flag for px_log_set_quiet: fills an int. */
extern const px_flag_table_t px_log_flags;

#define px_log_info(...) px_log("info", __VA_ARGS__)
#define px_log_warn(...) px_log("warn", __VA_ARGS__)
#define px_log_error(...) px_log("error", __VA_ARGS__)
#define px_die(...) px_die_at(__FILE__, __LINE__, __VA_ARGS__)

#endif
