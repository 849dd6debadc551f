/* ZeroMQ endpoints checked before use (px_endpoint.h). */
#include "px_endpoint.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IPC_PATH_MAX 107 /* sun_path holds 108 bytes with its NUL */
#define SHAPES "tcp://HOST:PORT or ipc://PATH"

static int bad(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *why, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (len) vsnprintf(why, len, fmt, ap);
    va_end(ap);
    return -1;
}

static int name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
           c == '_';
}

/* HOST of n bytes at h: a name or IPv4 address, [IPv6], or (to bind) *. */
static int check_host(const char *h, size_t n, px_endpoint_use_t use, char *why, size_t len) {
    if (n == 0) return bad(why, len, "no host before the port (" SHAPES ")");
    if (n == 1 && h[0] == '*')
        return use == PX_ENDPOINT_BIND ? 0
                                       : bad(why, len, "host '*' means every interface, for binding: give the "
                                                       "address to connect to");
    if (h[0] == '[') {
        if (h[n - 1] != ']' || n < 4) return bad(why, len, "an IPv6 host needs its closing ']'");
        for (size_t i = 1; i + 1 < n; i++) {
            char c = h[i];
            if (!(c == ':' || c == '.' || c == '%' || name_char(c)))
                return bad(why, len, "'%c' in the IPv6 address '%.*s'", c, (int)n, h);
        }
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (!name_char(h[i]))
            return bad(why, len, h[i] == ':' ? "an IPv6 host goes in brackets: tcp://[ADDRESS]:PORT"
                                             : "'%c' cannot be in a host name ('%.*s')", h[i], (int)n, h);
    return 0;
}

static int check_port(const char *p, px_endpoint_use_t use, char *why, size_t len) {
    int lo = use == PX_ENDPOINT_BIND ? 0 : 1;
    if (use == PX_ENDPOINT_BIND && !strcmp(p, "*")) return 0;
    if (!p[0]) return bad(why, len, "no port after the ':' (" SHAPES ")");
    char *end;
    long v = strtol(p, &end, 10);
    if (*end || p[0] < '0' || p[0] > '9' || strlen(p) > 5 || v < lo || v > 65535)
        return bad(why, len, "port '%s' is not in %d..65535%s", p, lo, use == PX_ENDPOINT_BIND ? " (or *)" : "");
    return 0;
}

int px_endpoint_check(const char *ep, px_endpoint_use_t use, char *why, size_t len) {
    if (!ep || !ep[0]) return bad(why, len, "empty: expected " SHAPES);
    for (const char *p = ep; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f) return bad(why, len, "a space or control character in it");
    if (!strncmp(ep, "ipc://", 6)) {
        const char *path = ep + 6;
        if (!path[0]) return bad(why, len, "ipc:// needs a path");
        if (!strcmp(path, "*"))
            return use == PX_ENDPOINT_BIND ? 0 : bad(why, len, "ipc://* is for binding: give the socket's path");
        if (strlen(path) > IPC_PATH_MAX)
            return bad(why, len, "the ipc path is %zu bytes, a Unix socket's at most %d", strlen(path), IPC_PATH_MAX);
        return 0;
    }
    if (strncmp(ep, "tcp://", 6) != 0) {
        const char *sep = strstr(ep, "://");
        if (sep)
            return bad(why, len, "not an endpoint: scheme '%.*s' is not tcp or ipc (expected " SHAPES ")",
                       (int)(sep - ep), ep);
        return bad(why, len, "not an endpoint: expected " SHAPES);
    }
    const char *h = ep + 6, *host_end = h;
    if (h[0] == '[' && !(host_end = strchr(h, ']'))) return bad(why, len, "an IPv6 host needs its closing ']'");
    const char *colon = strrchr(host_end, ':');
    if (!colon) return bad(why, len, "no port: expected tcp://HOST:PORT");
    if (check_host(h, (size_t)(colon - h), use, why, len) != 0) return -1;
    return check_port(colon + 1, use, why, len);
}

int px_endpoint_check_connect(const char *ep, char *why, size_t len) {
    return px_endpoint_check(ep, PX_ENDPOINT_CONNECT, why, len);
}

int px_endpoint_check_bind(const char *ep, char *why, size_t len) {
    return px_endpoint_check(ep, PX_ENDPOINT_BIND, why, len);
}
