/* Implementation of px_log.h: timestamped key=value lines on stderr. */
#include "px_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static const char *g_prog = "phalanx";
static int g_quiet;

void px_log_set_prog(const char *prog) { g_prog = prog; }
void px_log_set_quiet(int quiet) { g_quiet = quiet; }

static const px_flag_t QUIET[] = {
    {"--quiet", PX_FLAG_SWITCH, .help = "log warnings and errors only", .size = sizeof(int)},
};
const px_flag_table_t px_log_flags = PX_FLAG_TABLE(NULL, QUIET);

void px_logv(const char *level, const char *fmt, va_list ap) {
    if (g_quiet && (strcmp(level, "info") == 0 || strcmp(level, "debug") == 0)) return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char line[2048];
    int n = snprintf(line, sizeof line, "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s prog=%s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, (long)(tv.tv_usec / 1000), level, g_prog);
    if (n < 0) n = 0;
    if ((size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    /* One write per line so lines from several threads do not interleave. */
    fprintf(stderr, "%s\n", line);
}

void px_log(const char *level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    px_logv(level, fmt, ap);
    va_end(ap);
}

void px_die_at(const char *file, int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    px_log("fatal", "%s (at %s:%d)", msg, file, line);
    exit(1);
}
