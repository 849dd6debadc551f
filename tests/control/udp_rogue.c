/* udp_rogue: an attacker on the coordinator's UDP heartbeat port, for
 * tests/control/test_udp_heartbeats.py. It registers over ZeroMQ as
 * --group (so it holds a real member's key), sends one good sealed
 * heartbeat, then every kind of bad datagram once:
 *
 *   replay of the good one, a flipped ciphertext byte, another key, the
 *   header cut short, random bytes, an empty datagram, 1500 bytes (too
 *   long), an identity nobody registered, identity lengths 0 and 65, a
 *   sealed FailureReport (not a heartbeat), sealed bytes that are not a
 *   message, a good seal under the wrong magic
 *
 * then a second good heartbeat, and from then on only replays and forgeries
 * every 100 ms (never a real heartbeat) for --hold-ms, reading its
 * connection. It prints, for the test to check against /metrics:
 *   udp_port=N key_bytes=32 quorum_id=Q
 *   good=2 bad=B                       (after the scripted part)
 *   udp_off_ms=T                       (ms after its last good heartbeat)
 *   forged_total=F                     (every bad datagram sent, at the end)
 *   unknown_member=1                   (a good heartbeat sent once lost, at the end
 *                                       of --hold-ms, is answered UNKNOWN_MEMBER over
 *                                       the connection: register again)
 * Exit 0, or 1 when the coordinator offered no UDP (prints udp=none).
 *
 * --mode picks another play, each sending only good datagrams under the
 * member's own key (a leaked key) every 100 ms for --hold-ms:
 *   dead    the connection closed at once after registering (the process
 *           is gone; the key is in other hands); prints closed=1
 *   frozen  a forked child sends them while this process stops itself
 *           (SIGSTOP: its ZeroMQ thread answers nothing, its connection
 *           stays open); the child prints frozen=1, then sent=N at the end
 *   burst   this process is the real worker, sending seq 1, 2, 3, ...; after
 *           1 s a burst of 20 datagrams with sequence numbers 2^40 + k (the
 *           forger), then the real sequence goes on. Told udp_off, it
 *           heartbeats over its connection as a worker does. Prints
 *           burst=1, udp_off_ms=T (after the burst) and, at the end,
 *           unknown_member=1 if it was ever declared lost. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "px_hbudp.h"
#include "px_time.h"
#include "px_wire.h"

static void *g_sock;
static int g_udp;
static long g_bad;
static uint8_t g_key[PX_HBUDP_KEY_BYTES];
static char g_ident[64];
static size_t g_ident_len;
static const char *g_group = "udp-rogue";

static void *encode(Phalanx__Envelope *env, size_t *len) { return px_wire_encode(env, len); }

static void *heartbeat_bytes(int64_t qid, size_t *len) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__Heartbeat h = PHALANX__HEARTBEAT__INIT;
    h.group = (char *)g_group;
    h.has_rank = h.has_step = h.has_quorum_id = 1;
    h.quorum_id = qid;
    env.body_case = PHALANX__ENVELOPE__BODY_HB;
    env.hb = &h;
    return encode(&env, len);
}

static void send_dgram(const void *buf, size_t len, int bad) {
    if (send(g_udp, buf, len, 0) != (ssize_t)len) perror("udp_rogue: send");
    if (bad) g_bad++;
}

/* The next message on the connection within timeout_ms, decoded; NULL when
 * none came (or it did not decode). The caller frees it. */
static px_msg_t *next_reply(int timeout_ms) {
    zmq_pollitem_t it = {g_sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, timeout_ms) <= 0) return NULL;
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, g_sock, 0) < 0) {
        zmq_msg_close(&m);
        return NULL;
    }
    Phalanx__ErrorCode code;
    char why[256];
    px_msg_t *msg = px_wire_decode_max(zmq_msg_data(&m), zmq_msg_size(&m), PX_WIRE_MAX_REPLY, &code, why, sizeof why);
    zmq_msg_close(&m);
    return msg;
}

static size_t seal(const uint8_t *key, const char *ident, size_t ident_len, uint64_t seq, const void *plain, size_t plen,
                   uint8_t *out) {
    return px_hbudp_seal(key, ident, ident_len, seq, plain, plen, out, PX_HBUDP_MAX);
}

static int is_udp_off(const px_msg_t *msg) {
    return msg && msg->body_case == PHALANX__ENVELOPE__BODY_HB_ACK && msg->hb_ack->udp_off;
}

/* Prints how long after `since` the coordinator said udp_off; 1. */
static int say_udp_off(int64_t since) {
    printf("udp_off_ms=%lld\n", (long long)(px_now_ms() - since));
    fflush(stdout);
    return 1;
}

/* A heartbeat over the connection, as a worker told udp_off sends. */
static void send_direct(int64_t qid) {
    size_t len;
    void *hb = heartbeat_bytes(qid, &len);
    zmq_send(g_sock, hb, len, 0);
    free(hb);
}

/* --mode dead, frozen, burst (see the top of this file). */
static int play(const char *mode, int hold_ms, int64_t qid, void *ctx) {
    size_t hlen;
    void *hb = heartbeat_bytes(qid, &hlen);
    uint8_t d[PX_HBUDP_MAX];
    uint64_t seq = 1;
    int64_t start = px_now_ms(), end = start + hold_ms;
    if (!strcmp(mode, "dead")) {
        zmq_close(g_sock); /* linger 0: the connection closes now */
        zmq_ctx_term(ctx);
        printf("closed=1\n");
        fflush(stdout);
        for (; px_now_ms() < end; px_sleep_ms(100)) send_dgram(d, seal(g_key, g_ident, g_ident_len, seq++, hb, hlen, d), 0);
        printf("sent=%llu\n", (unsigned long long)(seq - 1));
        free(hb);
        return 0;
    }
    if (!strcmp(mode, "frozen")) {
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) { /* touches only the UDP socket and the key; dies with us */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            printf("frozen=1\n");
            fflush(stdout);
            for (; px_now_ms() < end; px_sleep_ms(100))
                send_dgram(d, seal(g_key, g_ident, g_ident_len, seq++, hb, hlen, d), 0);
            printf("sent=%llu\n", (unsigned long long)(seq - 1));
            fflush(stdout);
            _exit(0);
        }
        raise(SIGSTOP); /* the test SIGCONTs or kills us */
        waitpid(child, NULL, 0);
        free(hb);
        return 0;
    }
    int told = 0, lost = 0, burst = 0;
    int64_t burst_ms = 0;
    for (int64_t next = start; px_now_ms() < end;) {
        if (px_now_ms() >= next) {
            if (!burst && px_now_ms() - start >= 1000) {
                for (uint64_t k = 0; k < 20; k++)
                    send_dgram(d, seal(g_key, g_ident, g_ident_len, (1ull << 40) + k, hb, hlen, d), 0);
                burst = 1;
                burst_ms = px_now_ms();
                printf("burst=1\n");
                fflush(stdout);
            }
            if (told) send_direct(qid);
            else send_dgram(d, seal(g_key, g_ident, g_ident_len, seq++, hb, hlen, d), 0);
            next += 100;
        }
        px_msg_t *msg = next_reply(10);
        if (!told && is_udp_off(msg)) told = say_udp_off(burst_ms);
        if (msg && msg->body_case == PHALANX__ENVELOPE__BODY_ERROR &&
            msg->error->code == PHALANX__ERROR_CODE__UNKNOWN_MEMBER)
            lost = 1;
        px_wire_free(msg);
    }
    if (lost) printf("unknown_member=1\n");
    printf("done=1\n");
    fflush(stdout);
    free(hb);
    return 0;
}

int main(int argc, char **argv) {
    const char *endpoint = NULL, *mode = NULL;
    int hold_ms = 3000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--endpoint")) endpoint = argv[i + 1];
        else if (!strcmp(argv[i], "--group")) g_group = argv[i + 1];
        else if (!strcmp(argv[i], "--hold-ms")) hold_ms = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--mode")) mode = argv[i + 1];
        else return fprintf(stderr, "udp_rogue: unknown flag '%s'\n", argv[i]), 2;
    }
    if (mode && strcmp(mode, "dead") && strcmp(mode, "frozen") && strcmp(mode, "burst"))
        return fprintf(stderr, "udp_rogue: --mode dead, frozen or burst\n"), 2;
    if (!endpoint || strncmp(endpoint, "tcp://127.0.0.1:", 16) != 0)
        return fprintf(stderr, "usage: udp_rogue --endpoint tcp://127.0.0.1:PORT [--group G] [--hold-ms MS]\n"), 2;
    void *ctx = zmq_ctx_new();
    g_sock = zmq_socket(ctx, ZMQ_DEALER);
    g_ident_len = (size_t)snprintf(g_ident, sizeof g_ident, "udp-rogue/%d", (int)getpid());
    zmq_setsockopt(g_sock, ZMQ_ROUTING_ID, g_ident, g_ident_len);
    int zero = 0;
    zmq_setsockopt(g_sock, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_connect(g_sock, endpoint) != 0) return fprintf(stderr, "udp_rogue: cannot connect\n"), 1;

    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__Register r = PHALANX__REGISTER__INIT;
    r.group = (char *)g_group;
    r.has_rank = r.has_group_size = r.has_pid = 1;
    r.group_size = 1;
    r.pid = (uint32_t)getpid();
    r.host = "udp-rogue";
    env.has_request_id = 1;
    env.request_id = 1;
    env.body_case = PHALANX__ENVELOPE__BODY_REG;
    env.reg = &r;
    size_t len;
    void *buf = encode(&env, &len);
    zmq_send(g_sock, buf, len, 0);
    free(buf);

    int port = 0;
    int64_t qid = 0;
    for (int64_t give_up = px_now_ms() + 5000; !port && px_now_ms() < give_up;) {
        px_msg_t *msg = next_reply(100);
        if (msg && msg->body_case == PHALANX__ENVELOPE__BODY_REG_ACK) {
            if (!msg->reg_ack->has_udp_port || msg->reg_ack->udp_key.len != PX_HBUDP_KEY_BYTES) {
                printf("udp=none\n");
                return 1;
            }
            port = (int)msg->reg_ack->udp_port;
            qid = msg->reg_ack->quorum_id;
            memcpy(g_key, msg->reg_ack->udp_key.data, PX_HBUDP_KEY_BYTES);
            printf("udp_port=%d key_bytes=%zu quorum_id=%lld\n", port, msg->reg_ack->udp_key.len, (long long)qid);
        }
        px_wire_free(msg);
    }
    if (!port) return fprintf(stderr, "udp_rogue: no RegisterAck\n"), 1;
    g_udp = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (connect(g_udp, (struct sockaddr *)&sa, sizeof sa) != 0) return perror("udp_rogue: connect"), 1;
    if (mode) return play(mode, hold_ms, qid, ctx);

    size_t hlen;
    void *hb = heartbeat_bytes(qid, &hlen);
    uint8_t good[PX_HBUDP_MAX], d[PX_HBUDP_MAX + 400];
    size_t glen = seal(g_key, g_ident, g_ident_len, 1, hb, hlen, good);
    send_dgram(good, glen, 0);
    send_dgram(good, glen, 1); /* replay */
    size_t n = seal(g_key, g_ident, g_ident_len, 2, hb, hlen, d);
    d[n - 20] ^= 0x01; /* a ciphertext byte */
    send_dgram(d, n, 1);
    uint8_t other[PX_HBUDP_KEY_BYTES];
    px_hbudp_keygen(other);
    n = seal(other, g_ident, g_ident_len, 3, hb, hlen, d);
    send_dgram(d, n, 1);
    send_dgram(d, 12, 1); /* the header cut short */
    for (int i = 0; i < 100; i++) d[i] = (uint8_t)rand();
    send_dgram(d, 100, 1);
    send_dgram(d, 0, 1);
    memset(d, 0, 1500);
    memcpy(d, "PXU1", 4);
    send_dgram(d, 1500, 1);
    n = seal(g_key, "nobody/0/1/2", 12, 4, hb, hlen, d);
    send_dgram(d, n, 1);
    n = seal(g_key, g_ident, g_ident_len, 5, hb, hlen, d);
    d[4] = 0; /* identity length 0 */
    send_dgram(d, n, 1);
    d[4] = 65;
    send_dgram(d, n, 1);
    Phalanx__Envelope fenv = PHALANX__ENVELOPE__INIT;
    Phalanx__FailureReport f = PHALANX__FAILURE_REPORT__INIT;
    f.group = (char *)g_group;
    f.accused_group = "g0";
    fenv.body_case = PHALANX__ENVELOPE__BODY_FAILURE;
    fenv.failure = &f;
    size_t flen;
    void *fb = encode(&fenv, &flen);
    n = seal(g_key, g_ident, g_ident_len, 6, fb, flen, d);
    send_dgram(d, n, 1);
    free(fb);
    n = seal(g_key, g_ident, g_ident_len, 7, "\xff\xff\xff\xff\xff", 5, d);
    send_dgram(d, n, 1);
    n = seal(g_key, g_ident, g_ident_len, 8, hb, hlen, d);
    memcpy(d, "PXU2", 4);
    send_dgram(d, n, 1);
    uint8_t good2[PX_HBUDP_MAX];
    size_t g2len = seal(g_key, g_ident, g_ident_len, 9, hb, hlen, good2);
    send_dgram(good2, g2len, 0);
    int64_t last_good = px_now_ms();
    printf("good=2 bad=%ld\n", g_bad);
    fflush(stdout);

    /* Silent now: replays and forgeries only, while reading the connection. */
    int64_t end = last_good + hold_ms, next = last_good + 100;
    int told = 0;
    while (px_now_ms() < end) {
        if (px_now_ms() >= next) {
            send_dgram(good, glen, 1);
            send_dgram(good2, g2len, 1);
            n = seal(other, g_ident, g_ident_len, 1000 + (uint64_t)g_bad, hb, hlen, d);
            send_dgram(d, n, 1);
            next += 100;
        }
        px_msg_t *msg = next_reply(10);
        if (!told && is_udp_off(msg)) told = say_udp_off(last_good);
        px_wire_free(msg);
    }
    printf("forged_total=%ld\n", g_bad);
    fflush(stdout);
    /* Lost by now (hold-ms is past the timeout): our own key, a new seq. */
    n = seal(g_key, g_ident, g_ident_len, 100000, hb, hlen, d);
    send_dgram(d, n, 0);
    int64_t until = px_now_ms() + 2000;
    while (px_now_ms() < until) {
        px_msg_t *msg = next_reply(50);
        int unknown = msg && msg->body_case == PHALANX__ENVELOPE__BODY_ERROR &&
                      msg->error->code == PHALANX__ERROR_CODE__UNKNOWN_MEMBER;
        px_wire_free(msg);
        if (unknown) {
            printf("unknown_member=1\n");
            break;
        }
    }
    free(hb);
    close(g_udp);
    zmq_close(g_sock);
    zmq_ctx_term(ctx);
    return 0;
}
