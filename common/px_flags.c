/* Implementation of px_flags.h. */
#include "px_flags.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The flags px_flags_from_env made from environment variables: an error in
 * one names the variable, since that is what the operator wrote. */
#define ENV_FLAGS_MAX 64
static struct {
    const char *flag; /* the argv string we built */
    char var[80];
} g_env[ENV_FLAGS_MAX];
static int g_n_env;

static const char *shown(const char *flag) {
    static char buf[200];
    for (int i = 0; i < g_n_env; i++)
        if (g_env[i].flag == flag) {
            snprintf(buf, sizeof buf, "%s (from %s)", flag, g_env[i].var);
            return buf;
        }
    return flag;
}

static void usage_error(const char *prog, const char *fmt, const char *flag, const char *val,
                        const char *range) __attribute__((noreturn));
static void usage_error(const char *prog, const char *fmt, const char *flag, const char *val,
                        const char *range) {
    fprintf(stderr, "%s: ", prog);
    fprintf(stderr, fmt, shown(flag), val, range);
    fprintf(stderr, " (see %s --help)\n", prog);
    exit(2);
}

const char *px_flag_need(const char *prog, const char *flag, const char *val) {
    if (!val) {
        fprintf(stderr, "%s: flag %s needs a value (see %s --help)\n", prog, shown(flag), prog);
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

/* Does the help text document `--name` (followed by a space, a newline or a
 * comma, so that --checkpoint does not match --checkpoint-dir)? */
static int documented(const char *usage, const char *flag) {
    size_t n = strlen(flag);
    for (const char *p = strstr(usage, flag); p; p = strstr(p + 1, flag))
        if (p[n] == ' ' || p[n] == '\n' || p[n] == ',') return 1;
    return 0;
}

static int listed(const char *const *names, int n, const char *name) {
    for (int i = 0; names && (n < 0 || i < n) && names[i]; i++)
        if (!strcmp(names[i], name)) return 1;
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

extern char **environ;

void px_flags_from_env(const char *prog, void (*print_usage)(FILE *), const char *const *booleans, int *argc,
                       char ***argv) {
    int n_vars = 0;
    for (char **e = environ; *e; e++) n_vars += !strncmp(*e, "PHALANX_", 8);
    if (n_vars == 0) return;
    char *usage = NULL;
    size_t usage_len = 0;
    FILE *mem = open_memstream(&usage, &usage_len);
    if (mem) {
        print_usage(mem);
        fclose(mem);
    }
    const char **vars = calloc((size_t)n_vars, sizeof *vars);
    char **out = calloc((size_t)(*argc + 2 * n_vars + 1), sizeof *out);
    if (!vars || !out || !usage) {
        fprintf(stderr, "%s: out of memory reading PHALANX_ variables\n", prog);
        exit(2);
    }
    n_vars = 0;
    for (char **e = environ; *e; e++)
        if (!strncmp(*e, "PHALANX_", 8)) vars[n_vars++] = *e;
    qsort(vars, (size_t)n_vars, sizeof *vars, cmp_str); /* the same order whatever the environment's */
    int n = 0;
    out[n++] = (*argv)[0];
    for (int i = 0; i < n_vars; i++) {
        const char *eq = strchr(vars[i], '=');
        size_t name_len = (size_t)(eq - vars[i]);
        char var[80], flag[80];
        if (name_len >= sizeof var) {
            fprintf(stderr, "%s: ignoring %.40s...: no flag has so long a name\n", prog, vars[i]);
            continue;
        }
        memcpy(var, vars[i], name_len);
        var[name_len] = '\0';
        /* PHALANX_CHECKPOINT_DIR -> --checkpoint-dir */
        flag[0] = flag[1] = '-';
        for (size_t k = 8; k < name_len; k++)
            flag[k - 6] = var[k] == '_' ? '-' : (char)tolower((unsigned char)var[k]);
        flag[name_len - 6] = '\0';
        const char *val = eq + 1;
        if (name_len == 8 || !strcmp(flag, "--help") || !documented(usage, flag)) {
            /* Not fatal: one environment may serve several programs. */
            fprintf(stderr, "%s: ignoring %s: %s has no flag %s (see %s --help)\n", prog, var, prog, flag, prog);
            continue;
        }
        /* Given on the command line too: that one wins, and this value is
         * not even checked. */
        if (listed((const char *const *)*argv + 1, *argc - 1, flag)) continue;
        char *dup = strdup(flag);
        if (!dup || g_n_env == ENV_FLAGS_MAX) {
            fprintf(stderr, "%s: too many PHALANX_ variables (at most %d)\n", prog, ENV_FLAGS_MAX);
            exit(2);
        }
        g_env[g_n_env].flag = dup;
        snprintf(g_env[g_n_env].var, sizeof g_env[g_n_env].var, "%s", var);
        g_n_env++;
        if (listed(booleans, -1, flag + 2)) {
            if (!strcmp(val, "0") || !strcmp(val, "false") || !strcmp(val, "")) continue;
            if (strcmp(val, "1") && strcmp(val, "true"))
                usage_error(prog, "%s: bad value '%s': expected %s", dup, val, "1, true, 0, false or nothing");
            out[n++] = dup;
        } else {
            out[n++] = dup;
            out[n++] = (char *)val;
        }
    }
    for (int i = 1; i < *argc; i++) out[n++] = (*argv)[i];
    out[n] = NULL;
    free(vars);
    free(usage);
    *argc = n;
    *argv = out; /* lives as long as the program */
}
