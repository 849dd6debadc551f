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

static void send_register(void *sock, const char *job, int i, const char *host) {
    char group[32];
    snprintf(group, sizeof group, "bulk%05d", i);
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__Register r = PHALANX__REGISTER__INIT;
    r.group = group;
    r.host = (char *)host;
    r.job = (char *)job;
    r.has_rank = 1, r.rank = 0;
    r.has_group_size = 1, r.group_size = 1;
    r.has_pid = 1, r.pid = (uint32_t)getpid();
    env.has_request_id = 1;
    env.request_id = (uint64_t)i + 1;
    env.body_case = PHALANX__ENVELOPE__BODY_REG;
    env.reg = &r;
    size_t len;
    void *buf = px_wire_encode(&env, &len);
    if (!buf || zmq_send(sock, buf, len, 0) < 0) fail("cannot send a Register");
    free(buf);
}

/* Counts RegisterAcks until `want` arrived or 30 s passed. */
static int await_acks(void *sock, int want) {
    int acks = 0;
    int64_t deadline = px_now_ms() + 30000;
    while (acks < want && px_now_ms() < deadline) {
        zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 100) <= 0) continue;
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
    const char *endpoint = NULL, *job = "phalanx";
    int count = 1000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--endpoint")) endpoint = argv[i + 1];
        else if (!strcmp(argv[i], "--job")) job = argv[i + 1];
        else if (!strcmp(argv[i], "--count")) count = atoi(argv[i + 1]);
    }
    if (!endpoint || count < 1 || count > 99999) {
        fprintf(stderr, "usage: register_members --endpoint EP [--job J] [--count 1..99999 (1000)]\n");
        return 2;
    }
    char host[PX_HOST_MAX + 1];
    memset(host, 0x01, PX_HOST_MAX);
    host[PX_HOST_MAX] = '\0';
    void *ctx = zmq_ctx_new();
    void *sock = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0, hwm = 1000000;
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
    if (zmq_connect(sock, endpoint) != 0) fail("cannot connect");
    for (int i = 0; i < count; i++) send_register(sock, job, i, host);
    int acks = await_acks(sock, count);
    if (acks != count) {
        printf("FAIL: %d of %d registers answered within 30 s\n", acks, count);
        return 1;
    }
    printf("registered=%d\n", count);
    fflush(stdout);
    char b[64];
    while (read(0, b, sizeof b) > 0) {
    }
    zmq_close(sock);
    zmq_ctx_term(ctx);
    return 0;
}
