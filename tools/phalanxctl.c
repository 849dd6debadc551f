/* phalanxctl: the operator's command line for a running job.
 *   phalanxctl status [--json]          what the coordinator knows: progress, groups, members
 *   phalanxctl events [--follow] [--json] [--type T]... [--group G]
 *                                       the coordinator's event log (file or Kafka
 *                                       sink; Kafka read by ctl_kafka.c), a line for
 *                                       people per event (ctl_event_line.c)
 *   phalanxctl kill GROUP/RANK [--signal N]
 *                                       signal a worker on this host (chaos drills)
 *   phalanxctl drain GROUP              ask the coordinator to drain a group: it
 *                                       leaves at a step boundary, the others lose no step
 *   phalanxctl plot [--log-dir DIR] --out FILE.png
 *                                       the loss with drops and heals, after a run
 *   phalanxctl keygen --out PREFIX      a CURVE key pair: PREFIX.key, PREFIX.pub
 * status, kill and drain read the coordinator's /status document, over HTTP
 * by default (no credentials: the status server is read-only), or over the
 * ZeroMQ control plane with --coordinator, presenting this tool's own CURVE
 * keys and the job token when the coordinator requires them.
 *
 * kill acts on a process by pid, which means something only on the pid's own
 * host and only while the process lives: it refuses a member whose host in
 * /status is not this machine, or whose pid is not a phalanx-worker of that
 * group now (/proc/PID/cmdline), so a stale or foreign pid is never signalled.
 *
 * drain changes the job, so it goes over the authenticated control plane
 * only (a DrainRequest; --coordinator, default the coordinator's default
 * bind), never over the read-only HTTP server, and works from any host. The
 * coordinator forms the quorum without the group and pushes it marked as a
 * planned leave (Quorum.draining): every group, the drained one included,
 * finishes steps until one commits with the newer-quorum flag raised; then
 * the others move on without it and its workers exit 0 (member_lost reason
 * drained, not counted as a failure). */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>
#include <zmq.h>

#include "ctl_kafka.h"
#include "px_client_flags.h"
#include "ctl_event_line.h"
#include "px_events_spec.h"
#include "px_file.h"
#include "px_flags.h"
#include "px_version.h"
#include "px_keys.h"
#include "px_time.h"
#include "px_wire.h"

static const char *PROG = "phalanxctl";
typedef struct {
    const char *cmd, *target, *out;
    px_hostport_t http;
    int json, sig, timeout_ms;
    int follow, wait_s;
    const char *events, *group, *log_dir;
    px_flag_list_t types;
    px_client_flags_t client;          /* --coordinator and the credentials to present */
    int over_zmq;                      /* --coordinator given: status over the control plane */
} opts_t;

#define OPT(member) PX_FLAG_AT(opts_t, member)

static const px_flag_t FLAGS[] = {
    {"--http", PX_FLAG_HOSTPORT, "HOST:PORT", .min = 1, .def = "127.0.0.1:8080",
     .help = "the coordinator's status server", OPT(http)},
    {"--timeout-ms", PX_FLAG_INT, "N", .min = 100, .max = 600000, .def = "5000",
     .help = "with --coordinator (and drain): wait for the answer; events from Kafka: wait for the brokers and "
             "the topic (and, without --follow, for each next message)",
     OPT(timeout_ms)},
    {"--json", PX_FLAG_SWITCH,
     .help = "status: print the raw /status JSON (always so with --coordinator); events: print each event as "
             "the JSON line the coordinator wrote, not as a line for people",
     OPT(json)},
    {"--events", PX_FLAG_STR, "SPEC", .max = 4000, .note = "file:LOG_DIR/events.jsonl",
     .help = "events: the coordinator's --events: file:PATH, PATH, or kafka:HOST:PORT[,HOST:PORT...]/TOPIC[?...]",
     OPT(events)},
    {"--log-dir", PX_FLAG_STR, "DIR", .max = 4000, .def = "phalanx-run",
     .help = "events, plot: phalanx-launch's --log-dir", OPT(log_dir)},
    {"--follow", PX_FLAG_SWITCH,
     .help = "events: keep printing new events as they come (until SIGINT or SIGTERM, then exit 0)", OPT(follow)},
    {"--type", PX_FLAG_LIST, "T", .max = 63, .note = "all",
     .help = "events: only events of type T (repeatable, up to 16)", OPT(types)},
    {"--group", PX_FLAG_STR, "G", .max = 63, .note = "all", .help = "events: only events whose \"group\" is G",
     OPT(group)},
    {"--signal", PX_FLAG_INT, "N", .min = 1, .max = 64, .def = "9", .help = "kill: signal number", OPT(sig)},
    {"--wait-s", PX_FLAG_INT, "N", .min = 0, .max = 86400, .def = "120",
     .help = "drain: wait up to N s for the group to leave, 0 = do not wait", OPT(wait_s)},
    {"--out", PX_FLAG_STR, "PATH", .max = 4000, .note = "none",
     .help = "keygen: where to write the key pair (refuses to overwrite); plot: the PNG", OPT(out)},
};
static const px_flag_table_t CTL_FLAGS = PX_FLAG_TABLE("flags (default in brackets):", FLAGS);

static const char USAGE[] =
    "usage: phalanxctl COMMAND [flags]   (phalanxctl COMMAND --help: the same text)\n\n"
    "commands:\n"
    "  status                 print the job's quorum and members\n"
    "  events                 print the coordinator's event log, a line for people per event (time,\n"
    "                         sequence number, type, member, step, the other fields; --json: the\n"
    "                         JSON lines as written), optionally filtered,\n"
    "                         from its file sink (--events file:PATH) or its Kafka topic (--events\n"
    "                         kafka:BROKERS/TOPIC: read from the beginning to the end of every\n"
    "                         partition; in order within a partition, partitions interleaved)\n"
    "  kill GROUP/RANK        send a signal to that worker (chaos drills); refused unless /status\n"
    "                         places it on this host and its pid is that group's phalanx-worker\n"
    "  drain GROUP            planned maintenance: ask the coordinator (over the control plane, from any\n"
    "                         host) to take GROUP out of the job: the others go on without losing a step,\n"
    "                         GROUP's workers leave at a step boundary and exit 0 (a planned leave, not a\n"
    "                         failure); refused when the quorum would fall below --min-replicas; waits\n"
    "                         until it has left\n"
    "  plot --out FILE.png    draw train and eval loss over steps, with a mark at each group drop and\n"
    "                         heal, from a phalanx-launch log folder (python3 with matplotlib; not in\n"
    "                         the container image: run it on a host)\n"
    "  keygen --out PREFIX    write a CURVE key pair: PREFIX.key (secret, mode 0600) and PREFIX.pub\n"
    "                         (a missing folder in PREFIX is made, mode 0700)\n"
    "status and kill read the coordinator's /status over HTTP (--http), or over the control plane\n"
    "when --coordinator is given; drain always goes over the control plane.\n";

static const char EPILOGUE[] =
    "exit status: 0 done; 1 it could not be done (coordinator unreachable or refusing, no such live\n"
    "member, a member not on this host or not a phalanx-worker, signal refused, event log unreadable,\n"
    "Kafka brokers unreachable or no such topic within --timeout-ms,\n"
    "drain: the group still there after --wait-s, plot: no data, no python3, no matplotlib); 2 bad usage\n"
    "(unknown command or flag, bad value, a malformed --events spec)\n";

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

/* Waits for the answer to request 1: the reply (px_wire_free it), or NULL
 * with why filled (a handshake refused, or nothing within --timeout-ms). */
static px_msg_t *await_reply(void *sock, void *mon, const opts_t *o, const px_curve_client_t *k, char *why,
                             size_t cap) {
    int64_t deadline = px_now_ms() + o->timeout_ms;
    while (px_now_ms() < deadline && !why[0]) {
        zmq_pollitem_t it[2] = {{sock, 0, ZMQ_POLLIN, 0}, {mon, 0, ZMQ_POLLIN, 0}};
        zmq_poll(it, 2, 50);
        if (it[1].revents & ZMQ_POLLIN) read_monitor(mon, why, cap, k);
        if (!(it[0].revents & ZMQ_POLLIN)) continue;
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            continue;
        }
        Phalanx__ErrorCode code;
        char bad[200];
        px_msg_t *r = px_wire_decode_max(zmq_msg_data(&m), zmq_msg_size(&m), PX_WIRE_MAX_REPLY, &code, bad, sizeof bad);
        zmq_msg_close(&m);
        if (r && r->has_request_id && r->request_id == 1) return r;
        px_wire_free(r); /* not ours (or undecodable): keep waiting */
    }
    if (!why[0]) snprintf(why, cap, "no answer (is the coordinator running there? with CURVE: is the key its own?)");
    return NULL;
}

/* One request over the control plane (a DEALER socket with this tool's
 * CURVE keys and the job token): env's body is the caller's. The reply, or
 * NULL after printing why. */
static px_msg_t *zmq_call(const opts_t *o, Phalanx__Envelope *env) {
    px_curve_client_t k;
    char err[600];
    if (px_curve_client_load(o->client.curve_secret, o->client.curve_server_file, o->client.curve_server_key, &k, err,
                             sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", PROG, err);
        exit(2);
    }
    env->has_request_id = 1;
    env->request_id = 1;
    env->token = o->client.token;
    void *ctx = zmq_ctx_new(), *sock = zmq_socket(ctx, ZMQ_DEALER), *mon = zmq_socket(ctx, ZMQ_PAIR);
    int zero = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(mon, ZMQ_LINGER, &zero, sizeof zero);
    px_msg_t *reply = NULL;
    char why[300] = "";
    size_t len;
    void *buf = px_wire_encode(env, &len);
    if (px_curve_client_apply(sock, &k) != 0 ||
        zmq_socket_monitor(sock, "inproc://phalanxctl-monitor",
                           ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0 ||
        zmq_connect(mon, "inproc://phalanxctl-monitor") != 0 || zmq_connect(sock, o->client.coordinator) != 0 || !buf) {
        fprintf(stderr, "%s: --coordinator: cannot connect to '%s': %s\n", PROG, o->client.coordinator, zmq_strerror(errno));
    } else {
        zmq_send(sock, buf, len, ZMQ_DONTWAIT);
        reply = await_reply(sock, mon, o, &k, why, sizeof why);
        if (!reply) fprintf(stderr, "%s: %s: %s\n", PROG, o->client.coordinator, why);
    }
    free(buf);
    zmq_socket_monitor(sock, NULL, 0);
    zmq_close(mon);
    zmq_close(sock);
    zmq_ctx_term(ctx);
    return reply;
}

/* Prints a refusal (an Error reply) and returns 1 when reply is one. */
static int refused(const opts_t *o, const px_msg_t *r) {
    if (r->body_case != PHALANX__ENVELOPE__BODY_ERROR) return 0;
    fprintf(stderr, "%s: %s: the coordinator refused: %s: %s\n", PROG, o->client.coordinator,
            px_wire_error_name(r->error->code), r->error->message ? r->error->message : "");
    return 1;
}

/* /status over the control plane: a StatusRequest. */
static char *zmq_status(const opts_t *o) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__StatusRequest req = PHALANX__STATUS_REQUEST__INIT;
    env.body_case = PHALANX__ENVELOPE__BODY_STATUS_REQ;
    env.status_req = &req;
    px_msg_t *r = zmq_call(o, &env);
    if (!r) return NULL;
    char *json = NULL;
    if (r->body_case == PHALANX__ENVELOPE__BODY_STATUS && r->status->json) {
        json = strdup(r->status->json);
    } else if (!refused(o, r)) {
        fprintf(stderr, "%s: %s: answered '%s', not a status\n", PROG, o->client.coordinator, px_wire_body_name(r));
    }
    px_wire_free(r);
    return json;
}

static char *fetch_status(const opts_t *o, int want_json) {
    if (o->over_zmq) return zmq_status(o);
    return http_get(o->http.host, o->http.port, want_json ? "/status" : "/status.txt");
}

/* ---- kill --------------------------------------------------------------- */

/* Whether the /status member object at entry (up to its '}') is neither
 * lost nor left (drained). */
static int member_live(const char *entry) {
    const char *end = strchr(entry, '}'), *st = strstr(entry, "\"state\":\"");
    return end && st && st < end && strncmp(st + 9, "lost\"", 5) != 0 && strncmp(st + 9, "left\"", 5) != 0;
}

/* Finds live member GROUP/RANK in the /status JSON, whose member objects
 * begin {"group":G,"rank":R,"pid":P,"host":H (a documented contract), and
 * copies its host (JSON string; an escape other than \" \\ \/ leaves it
 * unreadable: ""). A (group, rank) appears once: a restarted worker replaces
 * its old entry. Returns the pid, or -1. */
static int find_member(const char *json, const char *group, int rank, char *host, size_t cap) {
    char pat[160];
    snprintf(pat, sizeof pat, "{\"group\":\"%s\",\"rank\":%d,\"pid\":", group, rank);
    const char *p = strstr(json, pat);
    if (!p || !member_live(p)) return -1;
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

/* Whether `host` (a member's host in /status: its gethostname) names this
 * machine: the same name, "localhost", or an address of one of this
 * machine's interfaces. */
static int host_is_here(const char *host) {
    char here[HOST_NAME_MAX + 1] = "";
    gethostname(here, sizeof here - 1);
    if (!host[0]) return 0;
    if (!strcmp(host, here) || !strcmp(host, "localhost")) return 1;
    struct ifaddrs *ifs, *i;
    if (getifaddrs(&ifs) != 0) return 0;
    int found = 0;
    for (i = ifs; i && !found; i = i->ifa_next) {
        if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
        char a[INET6_ADDRSTRLEN];
        const void *src = i->ifa_addr->sa_family == AF_INET ? (const void *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr
                                                            : (const void *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
        found = inet_ntop(i->ifa_addr->sa_family, src, a, sizeof a) && !strcmp(a, host);
    }
    freeifaddrs(ifs);
    return found;
}

/* Whether pid is, now, a phalanx-worker of `group` (its argv read from
 * /proc/PID/cmdline: the program's name, and --group when given there). */
static int is_worker_of(int pid, const char *group, char *why, size_t cap) {
    char path[64], argv[8192];
    snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(argv, 1, sizeof argv - 1, f) : 0;
    if (f) fclose(f);
    if (n == 0) {
        snprintf(why, cap, "no process %d on this host (it exited?)", pid);
        return 0;
    }
    argv[n] = '\0';
    const char *prog = strrchr(argv, '/') ? strrchr(argv, '/') + 1 : argv;
    if (strcmp(prog, "phalanx-worker") != 0) {
        snprintf(why, cap, "pid %d is '%.100s', not a phalanx-worker (a stale pid?)", pid, argv);
        return 0;
    }
    for (const char *a = argv; a < argv + n; a += strlen(a) + 1) {
        if (strcmp(a, "--group") != 0 || a + strlen(a) + 1 >= argv + n) continue;
        const char *g = a + strlen(a) + 1;
        if (strcmp(g, group) != 0) {
            snprintf(why, cap, "pid %d is a phalanx-worker of group '%s', not of '%s' (a stale pid?)", pid, g, group);
            return 0;
        }
    }
    return 1;
}

/* The pid of live member group/rank in `json` when it runs here as a
 * phalanx-worker of that group; -1 when it is not a live member (quiet),
 * -2 when it is one we must not signal (said why on stderr). */
static int local_worker(const char *json, const char *group, int rank) {
    char host[256], why[300];
    int pid = find_member(json, group, rank, host, sizeof host);
    if (pid <= 0) return -1;
    if (!host_is_here(host)) { /* a pid means something only on its own host */
        char here[HOST_NAME_MAX + 1] = "";
        gethostname(here, sizeof here - 1);
        fprintf(stderr, "%s: %s/%d runs on host '%s', not on this host '%s': only local processes are signalled "
                "(run phalanxctl on that host)\n", PROG, group, rank, host[0] ? host : "(unknown)", here);
        return -2;
    }
    if (!is_worker_of(pid, group, why, sizeof why)) {
        fprintf(stderr, "%s: %s/%d: %s: refusing to signal it\n", PROG, group, rank, why);
        return -2;
    }
    return pid;
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
    int pid = local_worker(body, group, rank);
    free(body);
    if (pid == -1) fprintf(stderr, "%s: no live member %s/%d in the coordinator's status\n", PROG, group, rank);
    if (pid < 0) return 1;
    if (kill(pid, o->sig) != 0) {
        fprintf(stderr, "%s: kill(%d, %d): %s\n", PROG, pid, o->sig, strerror(errno));
        return 1;
    }
    printf("sent signal %d to %s/%d (pid %d)\n", o->sig, group, rank, pid);
    return 0;
}

/* ---- drain -------------------------------------------------------------- */

/* Whether group has a live member in the coordinator's status: 1, 0, or -1
 * when the status cannot be read. One pass over the member array (a large
 * job's /status is megabytes): each of the group's entries, up to its '}'. */
static int group_present(const opts_t *o, const char *group) {
    char *body = fetch_status(o, 1);
    if (!body) return -1;
    char pat[160];
    snprintf(pat, sizeof pat, "{\"group\":\"%s\",\"rank\":", group);
    int present = 0;
    for (const char *p = strstr(body, pat); p && !present; p = strstr(p + 1, pat)) present = member_live(p);
    free(body);
    return present;
}

/* Asks the coordinator (over the control plane) to drain GROUP, then waits
 * until no live member of it is left in /status. */
static int cmd_drain(const opts_t *o) {
    const char *group = o->target;
    if (!group || !px_wire_group_name_ok(group)) {
        fprintf(stderr, "%s: drain needs a GROUP name ([A-Za-z0-9_.-], 1..63 bytes; all its ranks leave), e.g. "
                "'phalanxctl drain g1'; got '%s'\n", PROG, group ? group : "");
        return 2;
    }
    opts_t zo = *o;
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__DrainRequest req = PHALANX__DRAIN_REQUEST__INIT;
    req.group = (char *)group;
    env.body_case = PHALANX__ENVELOPE__BODY_DRAIN_REQ;
    env.drain_req = &req;
    px_msg_t *r = zmq_call(&zo, &env);
    if (!r) return 1;
    int ok = r->body_case == PHALANX__ENVELOPE__BODY_ACK;
    if (!ok && !refused(&zo, r))
        fprintf(stderr, "%s: %s: answered '%s' to the drain request\n", PROG, zo.client.coordinator, px_wire_body_name(r));
    px_wire_free(r);
    if (!ok) return 1;
    printf("draining %s: the coordinator forms the quorum without it; it leaves at the next step boundary\n", group);
    fflush(stdout);
    if (o->wait_s == 0) return 0;
    int64_t deadline = px_now_ms() + (int64_t)o->wait_s * 1000;
    for (;;) {
        int present = group_present(o, group);
        if (present == 0) {
            printf("group %s left the job\n", group);
            return 0;
        }
        if (px_now_ms() > deadline) {
            fprintf(stderr, "%s: group %s still in the coordinator's status after %d s\n", PROG, group, o->wait_s);
            return 1;
        }
        px_sleep_ms(200);
    }
}

/* ---- events ------------------------------------------------------------- */

static volatile sig_atomic_t g_interrupted;
static void on_interrupt(int sig) { (void)sig, g_interrupted = 1; }

/* The event log's path from --events (file:PATH or PATH) or --log-dir; NULL
 * with a message for "none", which keeps no log. */
static const char *events_path(const opts_t *o, char *buf, size_t cap) {
    if (!o->events) {
        snprintf(buf, cap, "%s/events.jsonl", o->log_dir);
        return buf;
    }
    if (!strncmp(o->events, "file:", 5)) return o->events + 5;
    if (!strcmp(o->events, "none")) {
        fprintf(stderr, "%s: --events none: that coordinator keeps no event log, there is nothing to read\n", PROG);
        return NULL;
    }
    return o->events;
}

/* Whether an event line passes --type and --group. The coordinator writes
 * "type":"T" and "group":"G" with no space (events.md); "peer_group" and
 * "groups" do not match "group". */
static int event_wanted(const opts_t *o, const char *line) {
    char pat[160];
    int ok = o->types.n == 0;
    for (int i = 0; i < o->types.n && !ok; i++) {
        snprintf(pat, sizeof pat, "\"type\":\"%s\"", o->types.v[i]);
        ok = strstr(line, pat) != NULL;
    }
    if (ok && o->group) {
        snprintf(pat, sizeof pat, "\"group\":\"%s\"", o->group);
        ok = strstr(line, pat) != NULL;
    }
    return ok;
}

/* One event line as asked: as written (--json) or for people. */
static void put_event(const opts_t *o, const char *line) {
    if (!event_wanted(o, line)) return;
    if (o->json) {
        fputs(line, stdout);
    } else {
        char text[8192];
        px_ctl_event_line(line, text, sizeof text);
        puts(text);
    }
}

/* ctl_kafka's callback for each event: the file sink's filter and output. */
static void print_event(void *ctx, const char *line) {
    const opts_t *o = ctx;
    put_event(o, line);
    if (o->follow) fflush(stdout); /* someone watches each event as it comes */
}

/* --events kafka:...: parsed by the coordinator's own parser, read by ctl_kafka.c. */
static int events_kafka(const opts_t *o) {
    px_events_spec_t sp;
    char err[1024];
    if (px_events_spec_parse(o->events, &sp, err, sizeof err) != 0) {
        fprintf(stderr, "%s: --events: %s\n", PROG, err);
        return 2;
    }
    px_ctl_kafka_opts_t k = {.brokers = sp.brokers, .topic = sp.topic, .follow = o->follow,
                             .timeout_ms = o->timeout_ms, .stop = &g_interrupted, .on_line = print_event,
                             .ctx = (void *)o};
    if (px_ctl_kafka_events(&k, err, sizeof err) != 0) {
        fflush(stdout);
        fprintf(stderr, "%s: --events '%s': %s\n", PROG, o->events, err);
        return 1;
    }
    return 0;
}

static int cmd_events(const opts_t *o) {
    signal(SIGINT, on_interrupt);
    signal(SIGTERM, on_interrupt);
    signal(SIGPIPE, SIG_DFL); /* `phalanxctl events --follow | head` ends quietly */
    if (o->events && !strncmp(o->events, "kafka:", 6)) return events_kafka(o);
    char buf[4200];
    const char *path = events_path(o, buf, sizeof buf);
    if (!path) return 2;
    FILE *f = fopen(path, "r");
    while (!f && o->follow && errno == ENOENT && !g_interrupted) { /* the coordinator has not written it yet */
        px_sleep_ms(200);
        f = fopen(path, "r");
    }
    if (!f) {
        if (g_interrupted) return 0;
        fprintf(stderr, "%s: cannot read the event log '%s': %s (the coordinator's --events file:PATH; "
                "--events or --log-dir say where)\n", PROG, path, strerror(errno));
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    while (!g_interrupted) {
        long at = ftell(f);
        ssize_t n = getline(&line, &cap, f);
        if (n > 0 && line[n - 1] == '\n') {
            put_event(o, line);
            continue;
        }
        if (!o->follow) break; /* the end (a line being written is left out) */
        fflush(stdout);
        fseek(f, at, SEEK_SET); /* a line still being written: read it whole later */
        clearerr(f);
        px_sleep_ms(200);
    }
    free(line);
    fclose(f);
    return 0;
}

/* ---- plot --------------------------------------------------------------- */

/* Is an executable NAME in one of PATH's folders? */
static int on_path(const char *name) {
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/bin:/bin";
    char dir[PATH_MAX], file[PATH_MAX + 64];
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, ":");
        snprintf(dir, sizeof dir, "%.*s", (int)(n ? n : 1), n ? p : ".");
        snprintf(file, sizeof file, "%s/%s", dir, name);
        if (access(file, X_OK) == 0) return 1;
        p += n + (p[n] == ':');
    }
    return 0;
}

/* The drawing is tools/phalanx_plot.py (python3 with matplotlib), copied
 * next to this binary by the build. The container image ships neither: they
 * would make it several times larger for a picture drawn after the run. So
 * what is missing is said in one line (exit 1) before anything is run; a
 * missing matplotlib is the script's own one-line error. */
static int cmd_plot(const opts_t *o, const char *argv0) {
    if (!o->out) {
        fprintf(stderr, "%s: plot needs --out FILE.png\n", PROG);
        return 2;
    }
    char exe[PATH_MAX] = "", script[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) exe[n] = '\0';
    else snprintf(exe, sizeof exe, "%s", argv0);
    char *slash = strrchr(exe, '/');
    snprintf(script, sizeof script, "%.*s/phalanx_plot.py", slash ? (int)(slash - exe) : 1, slash ? exe : ".");
    int have_python = on_path("python3"), have_script = access(script, R_OK) == 0;
    if (!have_python || !have_script) {
        fprintf(stderr, "%s: plot: missing %s%s%s: it needs python3 with matplotlib and the script the build puts "
                "next to phalanxctl (the phalanx image has neither: plot on a host that has the log folder)\n", PROG,
                have_python ? "" : "python3 (not on PATH)", !have_python && !have_script ? " and " : "",
                have_script ? "" : script);
        return 1;
    }
    fflush(stdout);
    execlp("python3", "python3", script, "--log-dir", o->log_dir, "--out", o->out, (char *)NULL);
    fprintf(stderr, "%s: plot: cannot run python3: %s\n", PROG, strerror(errno));
    return 1;
}

/* ---- keygen ------------------------------------------------------------- */

static int cmd_keygen(const opts_t *o) {
    if (!o->out) {
        fprintf(stderr, "%s: keygen needs --out PREFIX (writes PREFIX.key and PREFIX.pub)\n", PROG);
        return 2;
    }
    px_keypair_t kp;
    char err[600], dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", o->out);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) { /* keygen --out keys/ops: keys/ is made (mode 0700: secrets go there) */
        *slash = '\0';
        struct stat st;
        if (stat(dir, &st) != 0 && (px_mkdirs(dir) != 0 || chmod(dir, 0700) != 0)) {
            fprintf(stderr, "%s: keygen: cannot create the folder '%s': %s\n", PROG, dir, strerror(errno));
            return 1;
        }
    }
    if (px_keys_generate(o->out, &kp, err, sizeof err) != 0) {
        fprintf(stderr, "%s: keygen: %s\n", PROG, err);
        return 1;
    }
    printf("wrote %s.key (secret, mode 0600) and %s.pub\npublic key: %s\n", o->out, o->out, kp.pub);
    return 0;
}

/* ---- flags -------------------------------------------------------------- */

/* The command line after the command word (argv[0] here): flags and at
 * most one operand (kill's GROUP/RANK, drain's GROUP). */
static void parse(opts_t *o, int argc, char **argv) {
    const px_flag_section_t sections[] = {
        {&CTL_FLAGS, o, NULL},
        {&px_client_flags, &o->client, "the control plane (status and kill with --coordinator given; drain always):"},
    };
    const px_flags_spec_t spec = {.prog = PROG, .usage = USAGE, .epilogue = EPILOGUE, .sections = sections,
                                  .n_sections = 2, .max_operands = 1};
    if (argc >= 1 && !strcmp(argv[0], "--version")) {
        printf("%s %s\n", PROG, px_version());
        exit(0);
    }
    if (argc < 1 || argv[0][0] == '-') { /* no command: phalanxctl, phalanxctl --help */
        px_flags_help(&spec, stdout);
        exit(argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) ? 0 : 2);
    }
    o->cmd = argv[0];
    px_flags_parsed_t given;
    px_flags_parse(&spec, argc, argv, &given);
    o->target = given.n_operands ? given.operands[0] : NULL;
    o->over_zmq = px_flags_given(&given, "--coordinator");
    int drain = !strcmp(o->cmd, "drain"); /* its request is on the control plane whatever --coordinator */
    const px_client_flags_t *k = &o->client;
    if (!o->over_zmq && !drain && (k->curve_secret || k->curve_server_file || k->curve_server_key || k->token)) {
        fprintf(stderr, "%s: keys and --token-file are for the control plane: give --coordinator ENDPOINT "
                "(HTTP /status needs no credentials)\n", PROG);
        exit(2);
    }
}

int main(int argc, char **argv) {
    static opts_t o;
    parse(&o, argc - 1, argv + 1);
    int rc = 2;
    if (!strcmp(o.cmd, "status")) {
        char *body = fetch_status(&o, o.json);
        if (body) fputs(body, stdout);
        if (body && o.over_zmq) fputc('\n', stdout);
        rc = body ? 0 : 1;
        free(body);
    } else if (!strcmp(o.cmd, "kill")) {
        rc = cmd_kill(&o);
    } else if (!strcmp(o.cmd, "events")) {
        rc = cmd_events(&o);
    } else if (!strcmp(o.cmd, "drain")) {
        rc = cmd_drain(&o);
    } else if (!strcmp(o.cmd, "plot")) {
        rc = cmd_plot(&o, argv[0]);
    } else if (!strcmp(o.cmd, "keygen")) {
        rc = cmd_keygen(&o);
    } else {
        fprintf(stderr, "%s: unknown command '%s' (see %s --help)\n", PROG, o.cmd, PROG);
    }
    free(o.client.token);
    return rc;
}
