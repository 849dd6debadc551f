/* One value of a flag (px_flags.h): the checks and their messages. The
 * tables are read by px_flags_table.c. */
#include "px_flags.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage_error(const char *prog, const char *fmt, const char *flag, const char *val,
                        const char *range) __attribute__((noreturn));
static void usage_error(const char *prog, const char *fmt, const char *flag, const char *val,
                        const char *range) {
    fprintf(stderr, "%s: ", prog);
    fprintf(stderr, fmt, flag, val, range);
    fprintf(stderr, " (see %s --help)\n", prog);
    exit(2);
}

const char *px_flag_need(const char *prog, const char *flag, const char *val) {
    if (!val) {
        fprintf(stderr, "%s: flag %s needs a value (see %s --help)\n", prog, flag, prog);
        exit(2);
    }
    return val;
}

int64_t px_flag_int(const char *prog, const char *flag, const char *val, int64_t min, int64_t max) {
    px_flag_need(prog, flag, val);
    char range[96];
    snprintf(range, sizeof range, "an integer in [%lld, %lld]", (long long)min, (long long)max);
    errno = 0;
    char *end = NULL;
    long long v = strtoll(val, &end, 10);
    if (errno || end == val || *end != '\0' || v < min || v > max)
        usage_error(prog, "%s: bad value '%s': expected %s", flag, val, range);
    return (int64_t)v;
}

double px_flag_double(const char *prog, const char *flag, const char *val, double min, double max) {
    px_flag_need(prog, flag, val);
    char range[96];
    snprintf(range, sizeof range, "a number in [%g, %g]", min, max);
    errno = 0;
    char *end = NULL;
    double v = strtod(val, &end);
    if (errno || end == val || *end != '\0' || !isfinite(v) || v < min || v > max)
        usage_error(prog, "%s: bad value '%s': expected %s", flag, val, range);
    return v;
}

const char *px_flag_str(const char *prog, const char *flag, const char *val, int maxlen) {
    px_flag_need(prog, flag, val);
    char range[64];
    snprintf(range, sizeof range, "a non-empty string of at most %d bytes", maxlen);
    if (val[0] == '\0' || (int)strlen(val) > maxlen)
        usage_error(prog, "%s: bad value '%s': expected %s", flag, val, range);
    return val;
}

static int hostport(const char *prog, const char *flag, const char *val, char *host, int hostlen, long min_port) {
    px_flag_need(prog, flag, val);
    const char *colon = strrchr(val, ':');
    if (!colon || colon == val || colon - val >= hostlen)
        usage_error(prog, "%s: bad value '%s': expected %s", flag, val, "HOST:PORT");
    char *end = NULL;
    long port = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end != '\0' || port < min_port || port > 65535)
        usage_error(prog, "%s: bad value '%s': expected %s", flag, val,
                    min_port ? "HOST:PORT with PORT in [1, 65535]" : "HOST:PORT with PORT in [0, 65535]");
    memcpy(host, val, (size_t)(colon - val));
    host[colon - val] = '\0';
    return (int)port;
}

int px_flag_hostport(const char *prog, const char *flag, const char *val, char *host, int hostlen) {
    return hostport(prog, flag, val, host, hostlen, 1);
}

int px_flag_hostport0(const char *prog, const char *flag, const char *val, char *host, int hostlen) {
    return hostport(prog, flag, val, host, hostlen, 0);
}

char *px_flag_token_file(const char *prog, const char *flag, const char *val) {
    px_flag_need(prog, flag, val);
    FILE *f = fopen(val, "r");
    if (!f) usage_error(prog, "%s: cannot open '%s'%s", flag, val, "");
    char line[300] = {0};
    if (!fgets(line, sizeof line, f)) line[0] = '\0';
    fclose(f);
    line[strcspn(line, "\r\n")] = '\0';
    if (!line[0] || strlen(line) > 256)
        usage_error(prog, "%s: '%s' %s", flag, val, "must hold a token of 1..256 bytes on its first line");
    char *tok = strdup(line);
    if (!tok) usage_error(prog, "%s: %s%s", flag, "out of memory", "");
    return tok;
}

void px_flag_unknown(const char *prog, const char *arg) {
    fprintf(stderr, "%s: unknown flag '%s' (see %s --help)\n", prog, arg, prog);
    exit(2);
}
