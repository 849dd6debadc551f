/* Parsing of the event log's --events spec (px_events_spec.h, where the
 * grammar is). Each error message quotes the spec and names the bad part. */
#include "px_events_spec.h"

#include <stdlib.h>
#include <string.h>

#include "px_err.h"

static int parse_port(const char *s, size_t n) {
    if (n == 0 || n > 5) return -1;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    return (v >= 1 && v <= 65535) ? v : -1;
}

/* "HOST:PORT[,HOST:PORT...]" with HOST a name, an IPv4 address or [IPv6]. */
static int check_brokers(const char *spec, const char *b, size_t n, char *err, size_t errlen) {
    if (n == 0)
        return px_err_set(err, errlen, "events spec '%s': empty broker list (expected "
                          "kafka:HOST:PORT[,HOST:PORT...]/TOPIC)", spec);
    const char *p = b, *end = b + n;
    while (p <= end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *e = comma ? comma : end;
        const char *colon = NULL;
        for (const char *q = p; q < e; q++)
            if (*q == ':') colon = q; /* last one: IPv6 hosts contain colons */
        int bracketed = (p < e && *p == '[');
        int host_ok = colon && colon > p &&
                      (!bracketed || (colon[-1] == ']' && colon - p > 2)) &&
                      (bracketed || memchr(p, ':', (size_t)(colon - p)) == NULL);
        if (!host_ok || parse_port(colon + 1, (size_t)(e - colon - 1)) < 0)
            return px_err_set(err, errlen, "events spec '%s': bad broker '%.*s' (expected HOST:PORT with "
                              "PORT in 1..65535)", spec, (int)(e - p), p);
        if (!comma) break;
        p = comma + 1;
    }
    return 0;
}

static int check_topic(const char *spec, const char *t, size_t n, char *err, size_t errlen) {
    int ok = n > 0 && n <= 249 && !(n == 1 && t[0] == '.') && !(n == 2 && !memcmp(t, "..", 2));
    for (size_t i = 0; ok && i < n; i++) {
        char c = t[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '_' || c == '-';
    }
    if (!ok)
        return px_err_set(err, errlen, "events spec '%s': bad topic '%.*s' (1 to 249 characters from "
                          "[A-Za-z0-9._-], not '.' or '..')", spec, (int)n, t);
    return 0;
}

/* "key=value&key=value" after '?'. Only max_inflight exists today. */
static int parse_options(const char *spec, const char *o, px_events_spec_t *out, char *err,
                         size_t errlen) {
    while (*o) {
        const char *amp = strchr(o, '&');
        size_t n = amp ? (size_t)(amp - o) : strlen(o);
        const char *eq = memchr(o, '=', n);
        if (eq && (size_t)(eq - o) == strlen("max_inflight") &&
            !strncmp(o, "max_inflight", (size_t)(eq - o))) {
            char num[16] = {0};
            size_t vn = n - (size_t)(eq - o) - 1;
            char *end = NULL;
            long v = -1;
            if (vn > 0 && vn < sizeof num) {
                memcpy(num, eq + 1, vn);
                v = strtol(num, &end, 10);
            }
            if (!end || *end || v < 1 || v > PX_EVENTS_MAX_INFLIGHT)
                return px_err_set(err, errlen, "events spec '%s': bad max_inflight '%.*s' (an integer in "
                                  "1..%d)", spec, (int)vn, eq + 1, PX_EVENTS_MAX_INFLIGHT);
            out->max_inflight = (int)v;
        } else {
            return px_err_set(err, errlen, "events spec '%s': unknown option '%.*s' (known: "
                              "max_inflight=N)", spec, (int)n, o);
        }
        o += n + (amp ? 1 : 0);
    }
    return 0;
}

int px_events_spec_parse(const char *spec, px_events_spec_t *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out); /* PX_EVENTS_SINK_NONE, no max_inflight */
    if (!spec || !*spec || !strcmp(spec, "none")) return 0;
    if (!strncmp(spec, "file:", 5)) {
        out->sink = PX_EVENTS_SINK_FILE;
        out->path = spec + 5;
        if (!*out->path)
            return px_err_set(err, errlen, "events spec '%s': missing PATH after 'file:'", spec);
        return 0;
    }
    if (strncmp(spec, "kafka:", 6) != 0) {
        const char *colon = strchr(spec, ':');
        return px_err_set(err, errlen, "events spec '%s': unknown sink '%.*s' (expected file:PATH, "
                          "kafka:HOST:PORT[,HOST:PORT...]/TOPIC or none)",
                          spec, colon ? (int)(colon - spec) : (int)strlen(spec), spec);
    }
    out->sink = PX_EVENTS_SINK_KAFKA;
    const char *arg = spec + 6, *slash = strchr(arg, '/');
    if (!slash)
        return px_err_set(err, errlen, "events spec '%s': missing '/TOPIC' after the broker list "
                          "(expected kafka:HOST:PORT[,HOST:PORT...]/TOPIC)", spec);
    size_t bn = (size_t)(slash - arg);
    if (check_brokers(spec, arg, bn, err, errlen) != 0) return -1;
    if (bn >= sizeof out->brokers)
        return px_err_set(err, errlen, "events spec '%s': broker list too long", spec);
    memcpy(out->brokers, arg, bn);
    out->brokers[bn] = '\0';
    const char *t = slash + 1, *q = strchr(t, '?');
    size_t tn = q ? (size_t)(q - t) : strlen(t);
    if (tn == 0)
        return px_err_set(err, errlen, "events spec '%s': missing TOPIC after '/' (expected "
                          "kafka:HOST:PORT[,HOST:PORT...]/TOPIC)", spec);
    if (check_topic(spec, t, tn, err, errlen) != 0) return -1;
    memcpy(out->topic, t, tn);
    out->topic[tn] = '\0';
    return q ? parse_options(spec, q + 1, out, err, errlen) : 0;
}
