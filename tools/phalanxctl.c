/* phalanxctl: the operator's command line for a running job.
 *   phalanxctl status [--http HOST:PORT] [--json]   what the coordinator knows
 *   phalanxctl kill GROUP/RANK [--signal N] [--http HOST:PORT]
 *                                                   signal a worker on this host (chaos drills)
 * It talks HTTP to the coordinator's status server (the same /status the
 * dashboard shows), so it needs no ZeroMQ and no job token. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "px_flags.h"

static const char *PROG = "phalanxctl";

static void usage(void) {
    printf("usage: %s COMMAND [flags]\n\n"
           "commands:\n"
           "  status                 print the job's quorum and members\n"
           "  kill GROUP/RANK        send a signal to that worker (it must run on this host)\n\n"
           "flags (default in brackets):\n"
           "  --http HOST:PORT       the coordinator's status server [127.0.0.1:8080]\n"
           "  --json                 status: print the raw /status JSON\n"
           "  --signal N             kill: signal number [9]\n"
           "  --help                 this text\n",
           PROG);
}

/* GET path from host:port; returns the malloc'd body or NULL with a message. */
static char *http_get(const char *host, int port, const char *path) {
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
        fprintf(stderr, "%s: --http: '%s' is not an IPv4 address\n", PROG, host);
        return NULL;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        fprintf(stderr, "%s: cannot reach the coordinator at %s:%d: %s (is it running with --http?)\n", PROG, host,
                port, strerror(errno));
        if (fd >= 0) close(fd);
        return NULL;
    }
    char req[256];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, host);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return NULL;
    }
    size_t cap = 65536, used = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (used + 4096 > cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) break;
            buf = nb;
        }
        ssize_t r = read(fd, buf + used, cap - used - 1);
        if (r <= 0) break;
        used += (size_t)r;
    }
    close(fd);
    buf[used] = '\0';
    char *body = strstr(buf, "\r\n\r\n");
    if (strncmp(buf, "HTTP/1.0 200", 12) != 0 || !body) {
        fprintf(stderr, "%s: unexpected answer from %s:%d%s: %.60s\n", PROG, host, port, path, buf);
        free(buf);
        return NULL;
    }
    memmove(buf, body + 4, strlen(body + 4) + 1);
    return buf;
}

/* Finds the pid of live member GROUP/RANK in the /status JSON, whose member
 * objects begin {"group":G,"rank":R,"pid":P (a documented contract). A
 * (group, rank) appears once: a restarted worker replaces its old entry. */
static int find_pid(const char *json, const char *group, int rank) {
    char pat[160];
    snprintf(pat, sizeof pat, "{\"group\":\"%s\",\"rank\":%d,\"pid\":", group, rank);
    const char *p = strstr(json, pat);
    if (!p) return -1;
    const char *end = strchr(p, '}');
    const char *lost = strstr(p, "\"state\":\"lost\"");
    if (lost && end && lost < end) return -1;
    return atoi(p + strlen(pat));
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage();
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1], *target = NULL;
    char host[256] = "127.0.0.1";
    int port = 8080, json = 0, sig = SIGKILL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            usage();
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--http")) {
            port = px_flag_hostport(PROG, a, v, host, sizeof host);
            i++;
        } else if (!strcmp(a, "--signal")) {
            sig = (int)px_flag_int(PROG, a, v, 1, 64);
            i++;
        } else if (a[0] != '-' && !target) {
            target = a;
        } else {
            px_flag_unknown(PROG, a);
        }
    }
    if (!strcmp(cmd, "status")) {
        char *body = http_get(host, port, json ? "/status" : "/status.txt");
        if (!body) return 1;
        fputs(body, stdout);
        free(body);
        return 0;
    }
    if (!strcmp(cmd, "kill")) {
        char group[64];
        int rank;
        if (!target || sscanf(target, "%63[^/]/%d", group, &rank) != 2) {
            fprintf(stderr, "%s: kill needs GROUP/RANK, e.g. 'phalanxctl kill g1/0'\n", PROG);
            return 2;
        }
        char *body = http_get(host, port, "/status");
        if (!body) return 1;
        int pid = find_pid(body, group, rank);
        free(body);
        if (pid <= 0) {
            fprintf(stderr, "%s: no live member %s/%d in the coordinator's status\n", PROG, group, rank);
            return 1;
        }
        if (kill(pid, sig) != 0) {
            fprintf(stderr, "%s: kill(%d, %d): %s (the worker must run on this host)\n", PROG, pid, sig, strerror(errno));
            return 1;
        }
        printf("sent signal %d to %s/%d (pid %d)\n", sig, group, rank, pid);
        return 0;
    }
    fprintf(stderr, "%s: unknown command '%s' (see %s --help)\n", PROG, cmd, PROG);
    return 2;
}
