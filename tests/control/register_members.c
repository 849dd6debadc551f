/* register_members: registers --count members with a live phalanx-coordinator
 * over one ZeroMQ DEALER, so that its /status grows large, then holds the
 * connection open until stdin closes (tests/control/test_http_abuse.py uses it
 * to make /status bigger than what the kernel buffers for one HTTP client).
 *
 * Each member is its own group ("bulk00000", ...) of one rank, and its host is
 * 255 control bytes, which the coordinator writes as \u0001 escapes in JSON:
 * about 1.6 KB of /status per member. The coordinator should run with a long
 * --heartbeat-timeout-ms: these members never heartbeat.
 *
 * As fake workers of a live job (tests/control/test_mode_auto.py):
 *   --prefix NAME     group names NAME00000, ... [bulk]
 *   --layout L        the layout they register with (e.g. replicated1.auto5) [none]
 *   --heartbeat-ms N  heartbeat every N ms (0: never) [0]
 *   --join            ask to join the next quorum once registered
 *   --comm-share X    heartbeats carry comm_share X (any float, nan too: the
 *                     coordinator must cope) [absent]
 *   --sockets         a DEALER (a ZeroMQ identity, as a worker's agent has) per
 *                     member: the coordinator knows a member by its identity,
 *                     so only then does every member's heartbeat count
 *                     (tests/ft/test_dashboard.py, 1,000 live groups)
 * Each quorum pushed is printed as "quorum=ID mode=MODE" (for the first member).
 *
 * Prints "registered=N" once every RegisterAck arrived; exit 0 after stdin
 * closes, 1 (with a FAIL line) when the coordinator does not answer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "px_time.h"
#include "px_wire.h"

static void fail(const char *what) {
    printf("FAIL: %s\n", what);
    fflush(stdout);
    exit(1);
}

typedef struct {
    const char *endpoint, *job, *prefix, *layout;
    int count, heartbeat_ms, join, has_comm_share, per_member;
    float comm_share;
    void **socks; /* one, or one per member (per_member) */
} opts_t;

static void *sock_of(const opts_t *o, int i) { return o->socks[o->per_member ? i : 0]; }
static int nsocks(const opts_t *o) { return o->per_member ? o->count : 1; }

static void send_env(void *sock, Phalanx__Envelope *env, const char *what) {
    size_t len;
    void *buf = px_wire_encode(env, &len);
    if (!buf || zmq_send(sock, buf, len, 0) < 0) fail(what);
    free(buf);
}

static void group_name(char *out, size_t len, const opts_t *o, int i) { snprintf(out, len, "%.40s%05d", o->prefix, i); }

static void send_register(void *sock, const opts_t *o, int i, const char *host) {
    char group[64];
    group_name(group, sizeof group, o, i);
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__Register r = PHALANX__REGISTER__INIT;
    r.group = group;
    r.host = (char *)host;
    r.job = (char *)o->job;
    r.layout = (char *)o->layout;
    r.has_rank = 1, r.rank = 0;
    r.has_group_size = 1, r.group_size = 1;
    r.has_pid = 1, r.pid = (uint32_t)getpid();
    env.has_request_id = 1;
    env.request_id = (uint64_t)i + 1;
    env.body_case = PHALANX__ENVELOPE__BODY_REG;
    env.reg = &r;
    send_env(sock, &env, "cannot send a Register");
}

static void send_join(void *sock, const opts_t *o, int i) {
    char group[64];
    group_name(group, sizeof group, o, i);
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__QuorumRequest q = PHALANX__QUORUM_REQUEST__INIT;
    q.group = group;
    q.has_rank = 1, q.rank = 0;
    q.has_step = 1, q.step = 0;
    env.body_case = PHALANX__ENVELOPE__BODY_QUORUM_REQ;
    env.quorum_req = &q;
    send_env(sock, &env, "cannot send a QuorumRequest");
}

static void send_heartbeat(void *sock, const opts_t *o, int i) {
    char group[64];
    group_name(group, sizeof group, o, i);
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__Heartbeat h = PHALANX__HEARTBEAT__INIT;
    h.group = group;
    h.has_rank = 1, h.rank = 0;
    h.has_step = 1, h.step = 0;
    h.has_comm_share = o->has_comm_share;
    h.comm_share = o->comm_share;
    env.body_case = PHALANX__ENVELOPE__BODY_HB;
    env.hb = &h;
    send_env(sock, &env, "cannot send a Heartbeat");
}

/* Reads what arrived: prints pushed quorums (one line per quorum id), fails
 * on an error reply. */
static void drain(void *sock) {
    static int64_t printed;
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            return;
        }
        Phalanx__Envelope *e = phalanx__envelope__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
        if (e && e->body_case == PHALANX__ENVELOPE__BODY_QUORUM && e->quorum->id > printed) {
            printed = e->quorum->id;
            printf("quorum=%lld mode=%s\n", (long long)e->quorum->id, e->quorum->mode ? e->quorum->mode : "");
            fflush(stdout);
        }
        if (e && e->body_case == PHALANX__ENVELOPE__BODY_ERROR) {
            printf("FAIL: the coordinator answered an error: %s\n", e->error->message ? e->error->message : "");
            exit(1);
        }
        if (e) phalanx__envelope__free_unpacked(e, NULL);
        zmq_msg_close(&m);
    }
}

/* Heartbeats every heartbeat_ms (when set) until stdin closes. */
static void hold(const opts_t *o) {
    int64_t next_hb = px_now_ms();
    int in_open = 1, n = nsocks(o);
    zmq_pollitem_t *it = calloc((size_t)n + 1, sizeof *it);
    if (!it) fail("out of memory");
    for (int k = 0; k < n; k++) it[k] = (zmq_pollitem_t){o->socks[k], 0, ZMQ_POLLIN, 0};
    it[n] = (zmq_pollitem_t){NULL, 0, ZMQ_POLLIN, 0}; /* stdin */
    while (in_open) {
        int64_t now = px_now_ms();
        if (o->heartbeat_ms && now >= next_hb) {
            for (int i = 0; i < o->count; i++) send_heartbeat(sock_of(o, i), o, i);
            next_hb = now + o->heartbeat_ms;
        }
        long wait = o->heartbeat_ms ? (long)(next_hb - now > 0 ? next_hb - now : 0) : -1;
        if (zmq_poll(it, n + 1, wait) < 0 && errno != EINTR) fail("zmq_poll");
        for (int k = 0; k < n; k++)
            if (it[k].revents & ZMQ_POLLIN) drain(o->socks[k]);
        if (it[n].revents & (ZMQ_POLLIN | ZMQ_POLLERR)) {
            char b[64];
            in_open = read(0, b, sizeof b) > 0;
        }
    }
    free(it);
}

/* Counts RegisterAcks until `want` arrived or 30 s passed. */
static int await_acks(const opts_t *o, int want) {
    int acks = 0;
    int64_t deadline = px_now_ms() + 30000;
    for (int k = 0; acks < want && px_now_ms() < deadline; k = (k + 1) % nsocks(o)) {
        void *sock = o->socks[k];
        zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, nsocks(o) > 1 ? 0 : 100) <= 0) continue;
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) >= 0) {
            Phalanx__Envelope *e = phalanx__envelope__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
            if (e && e->body_case == PHALANX__ENVELOPE__BODY_REG_ACK) acks++;
            if (e && e->body_case == PHALANX__ENVELOPE__BODY_ERROR) {
                printf("FAIL: the coordinator refused a Register: %s\n", e->error->message ? e->error->message : "");
                exit(1);
            }
            if (e) phalanx__envelope__free_unpacked(e, NULL);
        }
        zmq_msg_close(&m);
    }
    return acks;
}

int main(int argc, char **argv) {
    opts_t o = {.job = "phalanx", .prefix = "bulk", .count = 1000};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(argv[i], "--join")) o.join = 1;
        else if (!strcmp(argv[i], "--endpoint")) o.endpoint = v, i++;
        else if (!strcmp(argv[i], "--job")) o.job = v, i++;
        else if (!strcmp(argv[i], "--count")) o.count = atoi(v), i++;
        else if (!strcmp(argv[i], "--prefix")) o.prefix = v, i++;
        else if (!strcmp(argv[i], "--layout")) o.layout = v, i++;
        else if (!strcmp(argv[i], "--heartbeat-ms")) o.heartbeat_ms = atoi(v), i++;
        else if (!strcmp(argv[i], "--comm-share")) o.has_comm_share = 1, o.comm_share = strtof(v, NULL), i++;
        else if (!strcmp(argv[i], "--sockets")) o.per_member = 1;
        else o.count = 0; /* unknown flag: usage */
    }
    if (!o.endpoint || o.count < 1 || o.count > 99999 || o.heartbeat_ms < 0) {
        fprintf(stderr, "usage: register_members --endpoint EP [--job J] [--count 1..99999 (1000)] [--prefix NAME]\n"
                        "       [--layout L] [--heartbeat-ms N] [--join] [--comm-share X] [--sockets]\n");
        return 2;
    }
    char host[PX_HOST_MAX + 1];
    memset(host, 0x01, PX_HOST_MAX);
    host[PX_HOST_MAX] = '\0';
    void *ctx = zmq_ctx_new();
    zmq_ctx_set(ctx, ZMQ_MAX_SOCKETS, o.count + 16);
    if (!(o.socks = calloc((size_t)nsocks(&o), sizeof *o.socks))) fail("out of memory");
    for (int k = 0; k < nsocks(&o); k++) {
        void *sock = o.socks[k] = zmq_socket(ctx, ZMQ_DEALER);
        int zero = 0, hwm = 1000000;
        if (!sock) fail("cannot make a socket");
        zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
        zmq_setsockopt(sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
        zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
        if (zmq_connect(sock, o.endpoint) != 0) fail("cannot connect");
    }
    for (int i = 0; i < o.count; i++) send_register(sock_of(&o, i), &o, i, host);
    int acks = await_acks(&o, o.count);
    if (acks != o.count) {
        printf("FAIL: %d of %d registers answered within 30 s\n", acks, o.count);
        return 1;
    }
    printf("registered=%d\n", o.count);
    fflush(stdout);
    for (int i = 0; o.join && i < o.count; i++) send_join(sock_of(&o, i), &o, i);
    hold(&o);
    for (int k = 0; k < nsocks(&o); k++) zmq_close(o.socks[k]);
    free(o.socks);
    zmq_ctx_term(ctx);
    return 0;
}
