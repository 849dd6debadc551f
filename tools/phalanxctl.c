/* phalanxctl: the operator's command line for a running job.
 *   phalanxctl status [--json]          what the coordinator knows
 *   phalanxctl kill GROUP/RANK [--signal N]
 *                                       signal a worker on this host (chaos drills)
 *   phalanxctl keygen --out PREFIX      a CURVE key pair: PREFIX.key, PREFIX.pub
 * status and kill read the coordinator's /status document, over HTTP by
 * default (no credentials: the status server is read-only), or over the
 * ZeroMQ control plane with --coordinator, presenting this tool's own CURVE
 * keys and the job token when the coordinator requires them. */
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
#include <zmq.h>

#include "px_flags.h"
#include "px_keys.h"
#include "px_time.h"
#include "px_wire.h"

static const char *PROG = "phalanxctl";

typedef struct {
    const char *cmd, *target, *out;
    char host[256];
    int port, json, sig, timeout_ms;
    const char *coordinator;           /* ZeroMQ endpoint: status over the control plane */
    const char *secret, *server_file, *server_key;
    char *token;
} opts_t;

static void usage(void) {
    printf("usage: %s COMMAND [flags]\n\n"
           "commands:\n"
           "  status                 print the job's quorum and members\n"
           "  kill GROUP/RANK        send a signal to that worker (it must run on this host)\n"
           "  keygen --out PREFIX    write a CURVE key pair: PREFIX.key (secret, mode 0600) and PREFIX.pub\n\n"
           "flags (default in brackets):\n"
           "  --http HOST:PORT       the coordinator's status server [127.0.0.1:8080]\n"
           "  --coordinator ENDPOINT read status over the ZeroMQ control plane instead of HTTP [off]\n"
           "  --curve-secret-key-file PATH   with --coordinator: this tool's CURVE secret key [none]\n"
           "  --coordinator-public-key-file PATH  with --coordinator: the coordinator's public key [none]\n"
           "  --coordinator-key Z85  the same, given inline [none]\n"
           "  --token-file PATH      with --coordinator: the job token to present [none]\n"
           "  --timeout-ms N         with --coordinator: wait for the answer, 100..600000 [5000]\n"
           "  --json                 status: print the raw /status JSON (always so with --coordinator)\n"
           "  --signal N             kill: signal number [9]\n"
           "  --out PREFIX           keygen: where to write the key pair (refuses to overwrite) [none]\n"
           "  --help                 this text\n",
           PROG);
}

/* ---- fetching /status --------------------------------------------------- */

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

/* Why a handshake failed, from the socket monitor; "" while none did. */
static void read_monitor(void *mon, char *why, size_t cap, const px_curve_client_t *k) {
    uint16_t event;
    uint32_t value;
    while (px_zmq_monitor_next(mon, &event, &value))
        if (!why[0]) px_curve_handshake_why(event, value, k, why, cap);
}

static void *encode_status_request(const opts_t *o, size_t *len) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__StatusRequest req = PHALANX__STATUS_REQUEST__INIT;
    env.has_request_id = 1;
    env.request_id = 1;
    env.token = o->token;
    env.body_case = PHALANX__ENVELOPE__BODY_STATUS_REQ;
    env.status_req = &req;
    return px_wire_encode(&env, len);
}

/* Waits for the StatusReply; the JSON (malloc'd) or NULL with a message. */
static char *await_status(void *sock, void *mon, const opts_t *o, const px_curve_client_t *k) {
    char why[300] = "";
    int64_t deadline = px_now_ms() + o->timeout_ms;
    while (px_now_ms() < deadline && !why[0]) {
        zmq_pollitem_t it[2] = {{sock, 0, ZMQ_POLLIN, 0}, {mon, 0, ZMQ_POLLIN, 0}};
        zmq_poll(it, 2, 50);
        if (it[1].revents & ZMQ_POLLIN) read_monitor(mon, why, sizeof why, k);
        if (!(it[0].revents & ZMQ_POLLIN)) continue;
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            continue;
        }
        Phalanx__ErrorCode code;
        px_msg_t *r = px_wire_decode_max(zmq_msg_data(&m), zmq_msg_size(&m), PX_WIRE_MAX_REPLY, &code, why, sizeof why);
        zmq_msg_close(&m);
        if (!r) continue;
        char *json = NULL;
        if (r->body_case == PHALANX__ENVELOPE__BODY_STATUS && r->status->json)
            json = strdup(r->status->json);
        else if (r->body_case == PHALANX__ENVELOPE__BODY_ERROR)
            snprintf(why, sizeof why, "the coordinator refused: %s: %s", px_wire_error_name(r->error->code),
                     r->error->message ? r->error->message : "");
        px_wire_free(r);
        if (json) return json;
    }
    fprintf(stderr, "%s: %s: %s\n", PROG, o->coordinator,
            why[0] ? why : "no answer (is the coordinator running there? with CURVE: is the key its own?)");
    return NULL;
}

/* /status over the control plane: a StatusRequest on a DEALER socket. */
static char *zmq_status(const opts_t *o) {
    px_curve_client_t k;
    char err[600];
    if (px_curve_client_load(o->secret, o->server_file, o->server_key, &k, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", PROG, err);
        exit(2);
    }
    void *ctx = zmq_ctx_new(), *sock = zmq_socket(ctx, ZMQ_DEALER), *mon = zmq_socket(ctx, ZMQ_PAIR);
    int zero = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(mon, ZMQ_LINGER, &zero, sizeof zero);
    char *json = NULL;
    size_t len;
    void *buf = encode_status_request(o, &len);
    if (px_curve_client_apply(sock, &k) != 0 ||
        zmq_socket_monitor(sock, "inproc://phalanxctl-monitor",
                           ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0 ||
        zmq_connect(mon, "inproc://phalanxctl-monitor") != 0 || zmq_connect(sock, o->coordinator) != 0 || !buf) {
        fprintf(stderr, "%s: --coordinator: cannot connect to '%s': %s\n", PROG, o->coordinator, zmq_strerror(errno));
    } else {
        zmq_send(sock, buf, len, ZMQ_DONTWAIT);
        json = await_status(sock, mon, o, &k);
    }
    free(buf);
    zmq_socket_monitor(sock, NULL, 0);
    zmq_close(mon);
    zmq_close(sock);
    zmq_ctx_term(ctx);
    return json;
}

static char *fetch_status(const opts_t *o, int want_json) {
    if (o->coordinator) return zmq_status(o);
    return http_get(o->host, o->port, want_json ? "/status" : "/status.txt");
}

/* ---- kill --------------------------------------------------------------- */

/* Finds live member GROUP/RANK in the /status JSON, whose member objects
 * begin {"group":G,"rank":R,"pid":P,"host":H (a documented contract), and
 * copies its host (JSON string; an escape other than \" \\ \/ leaves it
 * unreadable: ""). A (group, rank) appears once: a restarted worker replaces
 * its old entry. Returns the pid, or -1. */
static int find_member(const char *json, const char *group, int rank, char *host, size_t cap) {
    char pat[160];
    snprintf(pat, sizeof pat, "{\"group\":\"%s\",\"rank\":%d,\"pid\":", group, rank);
    const char *p = strstr(json, pat);
    if (!p) return -1;
    const char *end = strchr(p, '}');
    const char *lost = strstr(p, "\"state\":\"lost\"");
    if (lost && end && lost < end) return -1;
    char *after;
    long pid = strtol(p + strlen(pat), &after, 10);
    host[0] = '\0';
    static const char HOST[] = ",\"host\":\"";
    if (strncmp(after, HOST, sizeof HOST - 1) == 0) {
        size_t n = 0;
        for (const char *s = after + sizeof HOST - 1; *s && *s != '"' && n + 1 < cap; s++) {
            if (*s == '\\') {
                s++;
                if (*s != '"' && *s != '\\' && *s != '/') {
                    n = 0;
                    break;
                }
            }
            host[n++] = *s;
        }
        host[n] = '\0';
    }
    return (int)pid;
}

static int cmd_kill(const opts_t *o) {
    char group[64];
    int rank;
    if (!o->target || sscanf(o->target, "%63[^/]/%d", group, &rank) != 2) {
        fprintf(stderr, "%s: kill needs GROUP/RANK, e.g. 'phalanxctl kill g1/0'\n", PROG);
        return 2;
    }
    char *body = fetch_status(o, 1);
    if (!body) return 1;
    char host[256], here[256] = "";
    int pid = find_member(body, group, rank, host, sizeof host);
    free(body);
    if (pid <= 0) {
        fprintf(stderr, "%s: no live member %s/%d in the coordinator's status\n", PROG, group, rank);
        return 1;
    }
    gethostname(here, sizeof here - 1);
    /* A pid means something only on its own host: here it could be anyone's process. */
    if (!host[0] || strcmp(host, here) != 0) {
        fprintf(stderr, "%s: %s/%d runs on host '%s', not on this host '%s': kill signals local processes only "
                "(run phalanxctl on that host)\n", PROG, group, rank, host[0] ? host : "(unknown)", here);
        return 1;
    }
    if (kill(pid, o->sig) != 0) {
        fprintf(stderr, "%s: kill(%d, %d): %s\n", PROG, pid, o->sig, strerror(errno));
        return 1;
    }
    printf("sent signal %d to %s/%d (pid %d)\n", o->sig, group, rank, pid);
    return 0;
}

/* ---- keygen ------------------------------------------------------------- */

static int cmd_keygen(const opts_t *o) {
    if (!o->out) {
        fprintf(stderr, "%s: keygen needs --out PREFIX (writes PREFIX.key and PREFIX.pub)\n", PROG);
        return 2;
    }
    px_keypair_t kp;
    char err[600];
    if (px_keys_generate(o->out, &kp, err, sizeof err) != 0) {
        fprintf(stderr, "%s: keygen: %s\n", PROG, err);
        return 1;
    }
    printf("wrote %s.key (secret, mode 0600) and %s.pub\npublic key: %s\n", o->out, o->out, kp.pub);
    return 0;
}

/* ---- flags -------------------------------------------------------------- */

static void parse(opts_t *o, int argc, char **argv) {
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            usage();
            exit(0);
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        } else if (a[0] != '-' && !o->target) {
            o->target = a;
            continue;
        }
        if (!strcmp(a, "--http")) o->port = px_flag_hostport(PROG, a, v, o->host, sizeof o->host);
        else if (!strcmp(a, "--signal")) o->sig = (int)px_flag_int(PROG, a, v, 1, 64);
        else if (!strcmp(a, "--coordinator")) o->coordinator = px_flag_str(PROG, a, v, 512);
        else if (!strcmp(a, "--curve-secret-key-file")) o->secret = px_flag_str(PROG, a, v, 4096);
        else if (!strcmp(a, "--coordinator-public-key-file")) o->server_file = px_flag_str(PROG, a, v, 4096);
        else if (!strcmp(a, "--coordinator-key")) o->server_key = px_flag_str(PROG, a, v, 64);
        else if (!strcmp(a, "--token-file")) o->token = px_flag_token_file(PROG, a, v);
        else if (!strcmp(a, "--timeout-ms")) o->timeout_ms = (int)px_flag_int(PROG, a, v, 100, 600000);
        else if (!strcmp(a, "--out")) o->out = px_flag_str(PROG, a, v, 4000);
        else px_flag_unknown(PROG, a);
        i++;
    }
    if (!o->coordinator && (o->secret || o->server_file || o->server_key || o->token)) {
        fprintf(stderr, "%s: keys and --token-file are for the control plane: give --coordinator ENDPOINT "
                "(HTTP /status needs no credentials)\n", PROG);
        exit(2);
    }
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage();
        return argc < 2 ? 2 : 0;
    }
    opts_t o = {.cmd = argv[1], .host = "127.0.0.1", .port = 8080, .sig = SIGKILL, .timeout_ms = 5000};
    parse(&o, argc, argv);
    int rc = 2;
    if (!strcmp(o.cmd, "status")) {
        char *body = fetch_status(&o, o.json);
        if (body) fputs(body, stdout);
        if (body && o.coordinator) fputc('\n', stdout);
        rc = body ? 0 : 1;
        free(body);
    } else if (!strcmp(o.cmd, "kill")) {
        rc = cmd_kill(&o);
    } else if (!strcmp(o.cmd, "keygen")) {
        rc = cmd_keygen(&o);
    } else {
        fprintf(stderr, "%s: unknown command '%s' (see %s --help)\n", PROG, o.cmd, PROG);
    }
    free(o.token);
    return rc;
}
