/* fuzz_client: a raw ZeroMQ DEALER that throws malformed frames at a live
 * phalanx-coordinator and checks every answer (tests/control/test_fuzz.py
 * drives it; it can also be run by hand against any coordinator).
 *
 * Three phases, each selectable with --mode:
 *   targeted  a table of hand-built bad frames (truncated, oversized, wrong or
 *             missing version, unknown type, missing field, out of range,
 *             multipart, empty), each of which must get an Error reply with
 *             the right ErrorCode; plus typed non-bad errors (UNKNOWN_MEMBER,
 *             WRONG_JOB, STALE_QUORUM) and a >1 MiB frame that ZeroMQ itself
 *             drops (the coordinator must survive it).
 *   random    --frames seeded frames: pure random bytes, and valid requests
 *             mutated by bit flips, truncation, splices, insertions, deletions.
 *             The client predicts each verdict with the same validator the
 *             coordinator uses (px_wire_decode): a frame it must reject has to
 *             be answered with exactly that ErrorCode; a frame that happens to
 *             be valid must not be answered as bad (checked with a StatusRequest
 *             barrier, which also keeps the exchange in lockstep).
 *   valid     a well-behaved register + heartbeat on a fresh socket must be
 *             answered with RegisterAck and HeartbeatAck.
 * Lockstep means a crashed or wedged coordinator shows up as a reply timeout
 * on the very frame that did it; that frame is written to --dump-dir.
 * Other modes (not part of "all"): hostile, flood and race (see their
 * sections), and churn: thousands of members coming and going plus store
 * floods, for the bounded-state test (tests/control/test_limits.py).
 *
 * Output (stdout, key=value): expected_bad_messages=N is the number of frames
 * the coordinator must have counted in phalanx_bad_messages_total. Exit 0 on
 * success, 1 on a failed check (the line starts with FAIL and names the seed). */
#include <errno.h>
#include <signal.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "px_time.h"
#include "px_wire.h"

#define BIG_DROP_BYTES (2 * 1024 * 1024) /* above the coordinator's ZMQ_MAXMSGSIZE (1 MiB) */

typedef struct {
    const char *endpoint, *job, *dump_dir, *mode;
    uint64_t seed;
    long frames;
    int timeout_ms;
    int verbose;
    int flood_ms, flood_sockets;
    int coordinator_pid, race_rounds;
    int members, probe_members, churn_ms, churn_per_s, hb_ms;
    long flood_cap;
} opts_t;

typedef struct {
    void *sock;
    char ident[64];
} peer_t;

static opts_t O;
static void *g_ctx;
static uint64_t g_expected_bad;   /* frames the coordinator must count as bad_message */
static uint64_t g_unsolicited;    /* non-Error messages skipped while waiting (quorum pushes, ...) */
static uint64_t g_next_req = 1000;

/* ---- helpers ----------------------------------------------------------- */

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL: ");
    vprintf(fmt, ap);
    printf(" (seed=%" PRIu64 "; reproduce: fuzz_client --endpoint %s --mode %s --seed %" PRIu64 " --frames %ld)\n", O.seed,
           O.endpoint, O.mode, O.seed, O.frames);
    va_end(ap);
    fflush(stdout);
    exit(1);
}

/* splitmix64: small, fast, and every seed gives a full-quality stream. */
static uint64_t g_rng;
static uint64_t rnd(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint32_t rnd_below(uint32_t n) { return n ? (uint32_t)(rnd() % n) : 0; }
static int chance(int percent) { return rnd_below(100) < (uint32_t)percent; }

static void peer_open(peer_t *p, const char *ident) {
    p->sock = zmq_socket(g_ctx, ZMQ_DEALER);
    snprintf(p->ident, sizeof p->ident, "%s", ident);
    int zero = 0, hwm = 100000;
    zmq_setsockopt(p->sock, ZMQ_ROUTING_ID, p->ident, strlen(p->ident));
    zmq_setsockopt(p->sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(p->sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(p->sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
    if (zmq_connect(p->sock, O.endpoint) != 0) die("connect %s: %s", O.endpoint, zmq_strerror(errno));
}

static void peer_close(peer_t *p) {
    if (p->sock) zmq_close(p->sock);
    p->sock = NULL;
}

static void send_frame(peer_t *p, const void *buf, size_t len, int more) {
    if (zmq_send(p->sock, buf, len, more ? ZMQ_SNDMORE : 0) < 0) die("zmq_send: %s", zmq_strerror(errno));
}

/* Packs env as is: the version is whatever the caller set (or none). */
static uint8_t *pack_raw(const Phalanx__Envelope *env, size_t *len) {
    *len = phalanx__envelope__get_packed_size(env);
    uint8_t *buf = malloc(*len + 1);
    if (!buf) die("out of memory");
    phalanx__envelope__pack(env, buf);
    return buf;
}

static uint8_t *pack_v(Phalanx__Envelope *env, size_t *len) {
    env->has_version = 1;
    env->version = PX_PROTO_VERSION;
    return pack_raw(env, len);
}

/* Receives one reply, decoded without the size limit (replies are trusted to
 * be well formed; an undecodable reply is itself a failure). NULL on timeout. */
static Phalanx__Envelope *recv_reply(peer_t *p, int timeout_ms) {
    zmq_pollitem_t it = {p->sock, 0, ZMQ_POLLIN, 0};
    int64_t deadline = px_now_ms() + timeout_ms;
    for (;;) {
        int64_t left = deadline - px_now_ms();
        if (left < 0) return NULL;
        int rc = zmq_poll(&it, 1, (long)left);
        if (rc < 0 && errno == EINTR) continue;
        if (rc <= 0) return NULL;
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, p->sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            continue;
        }
        Phalanx__Envelope *env = phalanx__envelope__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
        size_t n = zmq_msg_size(&m);
        zmq_msg_close(&m);
        if (!env) die("coordinator sent an undecodable reply of %zu bytes", n);
        return env;
    }
}

static int is_bad_code(Phalanx__ErrorCode c) {
    return c == PHALANX__ERROR_CODE__BAD_MESSAGE || c == PHALANX__ERROR_CODE__VERSION_MISMATCH ||
           c == PHALANX__ERROR_CODE__UNKNOWN_TYPE || c == PHALANX__ERROR_CODE__OVERSIZED;
}

/* Waits for the next Error reply, skipping pushes. Returns its code; dies on timeout. */
static Phalanx__ErrorCode await_error(peer_t *p, const char *what, uint64_t *req_id) {
    for (;;) {
        Phalanx__Envelope *r = recv_reply(p, O.timeout_ms);
        if (!r) die("%s: no reply within %d ms: the coordinator crashed or stopped answering", what, O.timeout_ms);
        if (r->body_case == PHALANX__ENVELOPE__BODY_ERROR) {
            Phalanx__ErrorCode c = r->error->has_code ? r->error->code : 0;
            if (!r->error->has_code) die("%s: Error reply without a code", what);
            if (!r->error->message || !r->error->message[0]) die("%s: Error reply without a message", what);
            if (req_id) *req_id = r->has_request_id ? r->request_id : 0;
            phalanx__envelope__free_unpacked(r, NULL);
            return c;
        }
        g_unsolicited++;
        phalanx__envelope__free_unpacked(r, NULL);
    }
}

static void expect_error(peer_t *p, const char *what, Phalanx__ErrorCode want, int counts_as_bad) {
    Phalanx__ErrorCode got = await_error(p, what, NULL);
    if (got != want) die("%s: want Error %s, got %s", what, px_wire_error_name(want), px_wire_error_name(got));
    if (counts_as_bad) g_expected_bad++;
    if (O.verbose) printf("ok %s -> %s\n", what, px_wire_error_name(got));
}

/* Sends a StatusRequest and drains until its StatusReply: afterwards every
 * earlier frame has been handled. Any Error seen on the way must not be one
 * of the bad-message codes (the frames before were valid). */
static void barrier(peer_t *p, const char *what) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__StatusRequest sr = PHALANX__STATUS_REQUEST__INIT;
    env.has_request_id = 1;
    env.request_id = ++g_next_req;
    env.body_case = PHALANX__ENVELOPE__BODY_STATUS_REQ;
    env.status_req = &sr;
    size_t len;
    uint8_t *buf = pack_v(&env, &len);
    send_frame(p, buf, len, 0);
    free(buf);
    for (;;) {
        Phalanx__Envelope *r = recv_reply(p, O.timeout_ms);
        if (!r) die("%s: no StatusReply within %d ms: the coordinator crashed or stopped answering", what, O.timeout_ms);
        int done = r->body_case == PHALANX__ENVELOPE__BODY_STATUS && r->request_id == env.request_id;
        if (done && (!r->status->json || r->status->json[0] != '{')) die("%s: StatusReply without a JSON document", what);
        if (r->body_case == PHALANX__ENVELOPE__BODY_ERROR && is_bad_code(r->error->code))
            die("%s: a valid frame was answered %s (%s)", what, px_wire_error_name(r->error->code),
                r->error->message ? r->error->message : "");
        phalanx__envelope__free_unpacked(r, NULL);
        if (done) return;
        g_unsolicited++;
    }
}

/* ---- message builders -------------------------------------------------- */

/* Field values for a register; tests override single fields. */
typedef struct {
    const char *group, *host, *job;
    int64_t rank, group_size, pid, step; /* < -1000: leave unset */
} reg_spec_t;

#define UNSET (-100000)

static uint8_t *build_register(const reg_spec_t *s, int version_mode, size_t *len) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__Register r = PHALANX__REGISTER__INIT;
    r.group = (char *)s->group;
    r.host = (char *)s->host;
    r.job = (char *)s->job;
    if (s->rank != UNSET) r.has_rank = 1, r.rank = (uint32_t)s->rank;
    if (s->group_size != UNSET) r.has_group_size = 1, r.group_size = (uint32_t)s->group_size;
    if (s->pid != UNSET) r.has_pid = 1, r.pid = (uint32_t)s->pid;
    if (s->step != UNSET) r.has_step = 1, r.step = s->step;
    env.has_request_id = 1;
    env.request_id = ++g_next_req;
    env.body_case = PHALANX__ENVELOPE__BODY_REG;
    env.reg = &r;
    /* version_mode: 1 current, 0 absent, else that number */
    if (version_mode == 1) return pack_v(&env, len);
    if (version_mode != 0) env.has_version = 1, env.version = (uint32_t)version_mode;
    return pack_raw(&env, len);
}

static const reg_spec_t REG_OK = {"fz", "fuzzhost", NULL, 0, 1, 4242, 0};

typedef struct {
    const char *group;
    int64_t rank, step, quorum_id, state;
    int draining; /* Heartbeat.draining: the worker says its group is being drained */
} hb_spec_t;

static uint8_t *build_heartbeat(const hb_spec_t *s, int version_mode, size_t *len) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__Heartbeat h = PHALANX__HEARTBEAT__INIT;
    h.group = (char *)s->group;
    if (s->rank != UNSET) h.has_rank = 1, h.rank = (uint32_t)s->rank;
    if (s->step != UNSET) h.has_step = 1, h.step = s->step;
    if (s->quorum_id != UNSET) h.has_quorum_id = 1, h.quorum_id = s->quorum_id;
    if (s->state != UNSET) h.has_state = 1, h.state = (Phalanx__MemberState)s->state;
    h.has_draining = h.draining = s->draining != 0;
    env.has_request_id = 1;
    env.request_id = ++g_next_req;
    env.body_case = PHALANX__ENVELOPE__BODY_HB;
    env.hb = &h;
    if (version_mode == 1) return pack_v(&env, len);
    if (version_mode != 0) env.has_version = 1, env.version = (uint32_t)version_mode;
    return pack_raw(&env, len);
}

static const hb_spec_t HB_OK = {"fz", 0, 0, 0, 1, 0};

static uint8_t *build_store_set(int64_t qid, const char *key, size_t vlen, int has_value, size_t *len) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__StoreSet s = PHALANX__STORE_SET__INIT;
    uint8_t *val = calloc(vlen + 1, 1);
    if (qid != UNSET) s.has_quorum_id = 1, s.quorum_id = qid;
    s.key = (char *)key;
    s.has_value = has_value;
    s.value.data = val;
    s.value.len = vlen;
    env.has_request_id = 1;
    env.request_id = ++g_next_req;
    env.body_case = PHALANX__ENVELOPE__BODY_STORE_SET;
    env.store_set = &s;
    uint8_t *buf = pack_v(&env, len);
    free(val);
    return buf;
}

static uint8_t *build_store_get(int64_t qid, const char *key, int64_t wait_ms, size_t *len) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__StoreGet s = PHALANX__STORE_GET__INIT;
    if (qid != UNSET) s.has_quorum_id = 1, s.quorum_id = qid;
    s.key = (char *)key;
    if (wait_ms != UNSET) s.has_wait_ms = 1, s.wait_ms = (uint32_t)wait_ms;
    env.has_request_id = 1;
    env.request_id = ++g_next_req;
    env.body_case = PHALANX__ENVELOPE__BODY_STORE_GET;
    env.store_get = &s;
    return pack_v(&env, len);
}

/* qid UNSET: a report about no quorum (only members of the current quorum
 * may accuse, and only about it: see the race mode). */
static uint8_t *build_failure(const char *group, int64_t rank, const char *accused, int64_t accused_rank,
                              int64_t qid, const char *reason, size_t *len) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__FailureReport f = PHALANX__FAILURE_REPORT__INIT;
    f.group = (char *)group;
    if (rank != UNSET) f.has_rank = 1, f.rank = (uint32_t)rank;
    f.accused_group = (char *)accused;
    if (accused_rank != UNSET) f.has_accused_rank = 1, f.accused_rank = (int32_t)accused_rank;
    if (qid != UNSET) f.has_quorum_id = 1, f.quorum_id = qid;
    f.reason = (char *)reason;
    env.has_request_id = 1;
    env.request_id = ++g_next_req;
    env.body_case = PHALANX__ENVELOPE__BODY_FAILURE;
    env.failure = &f;
    return pack_v(&env, len);
}

static uint8_t *build_quorum_req(const char *group, int64_t rank, int64_t step, size_t *len) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__QuorumRequest q = PHALANX__QUORUM_REQUEST__INIT;
    q.group = (char *)group;
    if (rank != UNSET) q.has_rank = 1, q.rank = (uint32_t)rank;
    if (step != UNSET) q.has_step = 1, q.step = step;
    env.has_request_id = 1;
    env.request_id = ++g_next_req;
    env.body_case = PHALANX__ENVELOPE__BODY_QUORUM_REQ;
    env.quorum_req = &q;
    return pack_v(&env, len);
}

/* A coordinator-to-worker message sent the wrong way: valid, but not a request. */
static uint8_t *build_reply_type(int which, size_t *len) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__HeartbeatAck ha = PHALANX__HEARTBEAT_ACK__INIT;
    Phalanx__RegisterAck ra = PHALANX__REGISTER_ACK__INIT;
    Phalanx__Quorum q = PHALANX__QUORUM__INIT;
    Phalanx__Error e = PHALANX__ERROR__INIT;
    Phalanx__Ack a = PHALANX__ACK__INIT;
    Phalanx__StoreValue sv = PHALANX__STORE_VALUE__INIT;
    Phalanx__StatusReply st = PHALANX__STATUS_REPLY__INIT;
    env.has_request_id = 1;
    env.request_id = ++g_next_req;
    switch (which % 7) {
    case 0:
        ha.has_quorum_id = 1, ha.quorum_id = 3;
        env.body_case = PHALANX__ENVELOPE__BODY_HB_ACK, env.hb_ack = &ha;
        break;
    case 1:
        ra.has_quorum_id = 1, ra.quorum_id = 0;
        env.body_case = PHALANX__ENVELOPE__BODY_REG_ACK, env.reg_ack = &ra;
        break;
    case 2:
        q.has_id = 1, q.id = 7, q.has_max_step = 1, q.max_step = 0;
        env.body_case = PHALANX__ENVELOPE__BODY_QUORUM, env.quorum = &q;
        break;
    case 3:
        e.has_code = 1, e.code = PHALANX__ERROR_CODE__TIMEOUT, e.message = "x";
        env.body_case = PHALANX__ENVELOPE__BODY_ERROR, env.error = &e;
        break;
    case 4:
        env.body_case = PHALANX__ENVELOPE__BODY_ACK, env.ack = &a;
        break;
    case 5:
        sv.key = "k", sv.has_found = 1, sv.found = 0;
        env.body_case = PHALANX__ENVELOPE__BODY_STORE_VALUE, env.store_value = &sv;
        break;
    default:
        st.json = "{}";
        env.body_case = PHALANX__ENVELOPE__BODY_STATUS, env.status = &st;
        break;
    }
    return pack_v(&env, len);
}

static char *repeat_char(char c, size_t n) {
    char *s = malloc(n + 1);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

/* ---- targeted cases ---------------------------------------------------- */

static void send_expect(peer_t *p, const char *what, uint8_t *buf, size_t len, Phalanx__ErrorCode want, int bad) {
    send_frame(p, buf, len, 0);
    free(buf);
    expect_error(p, what, want, bad);
}

static void targeted(void) {
    const Phalanx__ErrorCode BAD = PHALANX__ERROR_CODE__BAD_MESSAGE, VER = PHALANX__ERROR_CODE__VERSION_MISMATCH,
                             TYPE = PHALANX__ERROR_CODE__UNKNOWN_TYPE, BIG = PHALANX__ERROR_CODE__OVERSIZED;
    peer_t p;
    char ident[64];
    snprintf(ident, sizeof ident, "fuzz-targeted-%d", (int)getpid());
    peer_open(&p, ident);
    size_t len;
    uint8_t *buf;
    int n_cases = 0;
#define CASE(what, build, want, bad) \
    do { buf = (build); send_expect(&p, what, buf, len, want, bad); n_cases++; } while (0)

    /* truncated */
    buf = build_register(&REG_OK, 1, &len);
    send_expect(&p, "truncated register (last byte cut)", buf, len - 1, BAD, 1), n_cases++;
    buf = build_register(&REG_OK, 1, &len);
    send_expect(&p, "truncated register (half)", buf, len / 2 + 3, BAD, 1), n_cases++;
    static const uint8_t trunc_varint[] = {0x08, 0x81};       /* version = <varint cut> */
    static const uint8_t trunc_len[] = {0x08, 0x01, 0x52, 0x10, 0x0a}; /* reg: 16 bytes promised, 1 sent */
    static const uint8_t bad_wire_type[] = {0x08, 0x01, 0x57}; /* field 10 with wire type 7 */
    buf = malloc(sizeof trunc_varint), memcpy(buf, trunc_varint, len = sizeof trunc_varint);
    send_expect(&p, "truncated varint", buf, len, BAD, 1), n_cases++;
    buf = malloc(sizeof trunc_len), memcpy(buf, trunc_len, len = sizeof trunc_len);
    send_expect(&p, "length prefix past the end", buf, len, BAD, 1), n_cases++;
    buf = malloc(sizeof bad_wire_type), memcpy(buf, bad_wire_type, len = sizeof bad_wire_type);
    send_expect(&p, "invalid wire type", buf, len, BAD, 1), n_cases++;

    /* oversized, and the boundary: exactly the limit is judged on content */
    buf = build_register(&REG_OK, 1, &len);
    {
        size_t n = PX_WIRE_MAX_FRAME + 1;
        uint8_t *big = calloc(n, 1);
        memcpy(big, buf, len);
        free(buf);
        send_expect(&p, "oversized (64 KiB + 1)", big, n, BIG, 1), n_cases++;
        n = 512 * 1024;
        big = malloc(n);
        memset(big, 0xab, n);
        send_expect(&p, "oversized (512 KiB)", big, n, BIG, 1), n_cases++;
        /* version 1, then unknown field 99 (length-delimited) filling the frame to exactly 64 KiB */
        n = PX_WIRE_MAX_FRAME;
        big = calloc(n, 1);
        size_t pay = n - 2 - 2 - 3;
        uint8_t hdr[] = {0x08, 0x01, 0x9a, 0x06, (uint8_t)(0x80 | (pay & 0x7f)), (uint8_t)(0x80 | ((pay >> 7) & 0x7f)),
                         (uint8_t)(pay >> 14)};
        memcpy(big, hdr, sizeof hdr);
        send_expect(&p, "exactly 64 KiB, no body (unknown field 99)", big, n, TYPE, 1), n_cases++;
    }

    /* versions */
    CASE("wrong version (2)", build_register(&REG_OK, 2, &len), VER, 1);
    CASE("wrong version (0xffffffff)", build_heartbeat(&HB_OK, (int)0xffffffff, &len), VER, 1);
    CASE("missing version (register)", build_register(&REG_OK, 0, &len), VER, 1);
    CASE("missing version (heartbeat)", build_heartbeat(&HB_OK, 0, &len), VER, 1);
    /* An empty frame decodes as an empty Envelope: no version. */
    buf = malloc(1);
    send_expect(&p, "empty frame", buf, 0, VER, 1), n_cases++;

    /* unknown type */
    {
        Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
        CASE("no body", pack_v(&env, &len), TYPE, 1);
        static const uint8_t unk[] = {0x08, 0x01, 0xf8, 0x06, 0x05}; /* field 111 varint */
        buf = malloc(sizeof unk), memcpy(buf, unk, len = sizeof unk);
        send_expect(&p, "unknown field 111 only", buf, len, TYPE, 1), n_cases++;
        for (int i = 0; i < 7; i++) {
            char what[64];
            snprintf(what, sizeof what, "reply type sent as a request (#%d)", i);
            CASE(what, build_reply_type(i, &len), TYPE, 1);
        }
    }

    /* missing required fields */
    reg_spec_t r;
    r = REG_OK, r.group = NULL;
    CASE("register without group", build_register(&r, 1, &len), BAD, 1);
    r = REG_OK, r.rank = UNSET;
    CASE("register without rank", build_register(&r, 1, &len), BAD, 1);
    r = REG_OK, r.group_size = UNSET;
    CASE("register without group_size", build_register(&r, 1, &len), BAD, 1);
    r = REG_OK, r.pid = UNSET;
    CASE("register without pid", build_register(&r, 1, &len), BAD, 1);
    r = REG_OK, r.host = NULL;
    CASE("register without host", build_register(&r, 1, &len), BAD, 1);
    hb_spec_t h;
    h = HB_OK, h.group = NULL;
    CASE("heartbeat without group", build_heartbeat(&h, 1, &len), BAD, 1);
    h = HB_OK, h.rank = UNSET;
    CASE("heartbeat without rank", build_heartbeat(&h, 1, &len), BAD, 1);
    h = HB_OK, h.step = UNSET;
    CASE("heartbeat without step", build_heartbeat(&h, 1, &len), BAD, 1);
    CASE("quorum_request without group", build_quorum_req(NULL, 0, 0, &len), BAD, 1);
    CASE("quorum_request without step", build_quorum_req("fz", 0, UNSET, &len), BAD, 1);
    CASE("failure_report without rank", build_failure("fz", UNSET, NULL, UNSET, UNSET, NULL, &len), BAD, 1);
    CASE("store_set without key", build_store_set(0, NULL, 4, 1, &len), BAD, 1);
    CASE("store_set without value", build_store_set(0, "k", 0, 0, &len), BAD, 1);
    CASE("store_set without quorum_id", build_store_set(UNSET, "k", 4, 1, &len), BAD, 1);
    CASE("store_get without quorum_id", build_store_get(UNSET, "k", UNSET, &len), BAD, 1);
    CASE("store_get with empty key", build_store_get(0, "", UNSET, &len), BAD, 1);

    /* out of range */
    r = REG_OK, r.group_size = 0;
    CASE("register group_size 0", build_register(&r, 1, &len), BAD, 1);
    r = REG_OK, r.group_size = PX_GROUP_SIZE_MAX + 1;
    CASE("register group_size above 1024", build_register(&r, 1, &len), BAD, 1);
    r = REG_OK, r.rank = 1, r.group_size = 1;
    CASE("register rank == group_size", build_register(&r, 1, &len), BAD, 1);
    r = REG_OK, r.step = -1;
    CASE("register step -1", build_register(&r, 1, &len), BAD, 1);
    r = REG_OK, r.group = "bad group!";
    CASE("register group with bad characters", build_register(&r, 1, &len), BAD, 1);
    char *s64 = repeat_char('g', 64), *s256 = repeat_char('h', 256), *s257 = repeat_char('k', 257),
         *s513 = repeat_char('r', 513);
    r = REG_OK, r.group = s64;
    CASE("register group of 64 bytes", build_register(&r, 1, &len), BAD, 1);
    r = REG_OK, r.host = s256;
    CASE("register host of 256 bytes", build_register(&r, 1, &len), BAD, 1);
    r = REG_OK, r.job = s64;
    CASE("register job of 64 bytes", build_register(&r, 1, &len), BAD, 1);
    h = HB_OK, h.rank = PX_GROUP_SIZE_MAX;
    CASE("heartbeat rank 1024", build_heartbeat(&h, 1, &len), BAD, 1);
    h = HB_OK, h.step = -5;
    CASE("heartbeat step -5", build_heartbeat(&h, 1, &len), BAD, 1);
    h = HB_OK, h.quorum_id = -1;
    CASE("heartbeat quorum_id -1", build_heartbeat(&h, 1, &len), BAD, 1);
    h = HB_OK, h.state = 7;
    CASE("heartbeat state 7", build_heartbeat(&h, 1, &len), BAD, 1);
    CASE("failure_report accused_rank -2", build_failure("fz", 0, "g1", -2, UNSET, NULL, &len), BAD, 1);
    CASE("failure_report accused_group invalid", build_failure("fz", 0, "a b", 0, UNSET, NULL, &len), BAD, 1);
    CASE("failure_report reason of 513 bytes", build_failure("fz", 0, "g1", 0, UNSET, s513, &len), BAD, 1);
    CASE("store_set key of 257 bytes", build_store_set(0, s257, 4, 1, &len), BAD, 1);
    CASE("store_set value of 16 KiB + 1", build_store_set(0, "k", PX_STORE_VALUE_MAX + 1, 1, &len), BAD, 1);
    CASE("store_set quorum_id -1", build_store_set(-1, "k", 4, 1, &len), BAD, 1);
    CASE("store_get wait_ms above 600000", build_store_get(0, "k", PX_WAIT_MAX_MS + 1, &len), BAD, 1);
    {
        Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
        Phalanx__StatusRequest sr = PHALANX__STATUS_REQUEST__INIT;
        env.token = s257;
        env.body_case = PHALANX__ENVELOPE__BODY_STATUS_REQ;
        env.status_req = &sr;
        CASE("token of 257 bytes", pack_v(&env, &len), BAD, 1);
    }

    /* multipart: one Envelope per frame */
    buf = build_heartbeat(&HB_OK, 1, &len);
    send_frame(&p, buf, len, 1);
    send_frame(&p, buf, len, 0);
    free(buf);
    expect_error(&p, "multipart (2 frames)", BAD, 1), n_cases++;
    send_frame(&p, "a", 1, 1);
    send_frame(&p, "", 0, 1);
    send_frame(&p, "c", 1, 0);
    expect_error(&p, "multipart (3 frames, one empty)", BAD, 1), n_cases++;

    /* Typed errors that are not bad messages. */
    uint64_t rid;
    h = HB_OK;
    buf = build_heartbeat(&h, 1, &len);
    uint64_t hb_rid = g_next_req;
    send_frame(&p, buf, len, 0);
    free(buf);
    if (await_error(&p, "heartbeat before register", &rid) != PHALANX__ERROR_CODE__UNKNOWN_MEMBER)
        die("heartbeat before register: want UNKNOWN_MEMBER");
    if (rid != hb_rid) die("UNKNOWN_MEMBER reply carries request_id %" PRIu64 ", want %" PRIu64, rid, hb_rid);
    n_cases++;
    CASE("store_get before register", build_store_get(0, "k", UNSET, &len), PHALANX__ERROR_CODE__UNKNOWN_MEMBER, 0);
    CASE("failure_report before register", build_failure("fz", 0, "g1", 0, UNSET, "x", &len),
         PHALANX__ERROR_CODE__UNKNOWN_MEMBER, 0);
    r = REG_OK, r.job = "another-job";
    CASE("register for another job", build_register(&r, 1, &len), PHALANX__ERROR_CODE__WRONG_JOB, 0);

    /* A member may use the store only in the current quorum. */
    {
        peer_t m;
        char mid[64];
        snprintf(mid, sizeof mid, "fuzz-member-%d", (int)getpid());
        peer_open(&m, mid);
        r = REG_OK, r.group = "fzstale", r.job = O.job;
        buf = build_register(&r, 1, &len);
        send_frame(&m, buf, len, 0);
        free(buf);
        Phalanx__Envelope *ack = recv_reply(&m, O.timeout_ms);
        if (!ack || ack->body_case != PHALANX__ENVELOPE__BODY_REG_ACK) die("register for the stale-quorum case: no RegisterAck");
        int64_t qid = ack->reg_ack->quorum_id;
        phalanx__envelope__free_unpacked(ack, NULL);
        buf = build_store_set(qid + 1000, "k", 4, 1, &len);
        send_expect(&m, "store_set with a stale quorum id", buf, len, PHALANX__ERROR_CODE__STALE_QUORUM, 0), n_cases++;
        peer_close(&m);
    }

    /* Above ZeroMQ's own limit (ZMQ_MAXMSGSIZE): libzmq drops the connection
     * before the coordinator sees a byte. No reply, no count; it must live on. */
    {
        peer_t big;
        char bid[64];
        snprintf(bid, sizeof bid, "fuzz-huge-%d", (int)getpid());
        peer_open(&big, bid);
        uint8_t *huge = malloc(BIG_DROP_BYTES);
        memset(huge, 0x5a, BIG_DROP_BYTES);
        send_frame(&big, huge, BIG_DROP_BYTES, 0);
        free(huge);
        Phalanx__Envelope *x = recv_reply(&big, 300);
        if (x) phalanx__envelope__free_unpacked(x, NULL);
        peer_close(&big);
        n_cases++;
    }
    barrier(&p, "after the targeted cases");
    free(s64), free(s256), free(s257), free(s513);
    peer_close(&p);
    printf("targeted_cases=%d\n", n_cases);
#undef CASE
}

/* ---- random frames ----------------------------------------------------- */

static const char *rand_group(void) {
    static const char *pool[] = {"fz0", "fz1", "fz2", "fz3", "fzr", "g0", "bad name", "", "x.y-z_0"};
    return pool[rnd_below(sizeof pool / sizeof pool[0])];
}

static int64_t rand_small(void) {
    switch (rnd_below(8)) {
    case 0: return -1;
    case 1: return (int64_t)rnd();
    case 2: return 1024;
    default: return rnd_below(4);
    }
}

/* A request of a random kind with mostly plausible fields. */
static uint8_t *gen_message(size_t *len) {
    int64_t v = rand_small();
    switch (rnd_below(10)) {
    case 0: {
        reg_spec_t r = REG_OK;
        r.group = rand_group();
        r.rank = rnd_below(2);
        r.group_size = 1 + rnd_below(3);
        r.step = chance(90) ? (int64_t)rnd_below(100) : v;
        r.job = chance(50) ? O.job : NULL;
        return build_register(&r, chance(95) ? 1 : (int)rnd_below(3), len);
    }
    case 1:
    case 2: {
        hb_spec_t h = {rand_group(), rnd_below(3), rnd_below(100), rnd_below(4), rnd_below(3), 0};
        if (chance(10)) h.step = v;
        if (chance(10)) h.state = v;
        return build_heartbeat(&h, chance(95) ? 1 : (int)rnd_below(3), len);
    }
    case 3: return build_quorum_req(rand_group(), rnd_below(3), chance(90) ? (int64_t)rnd_below(50) : v, len);
    case 4: return build_failure(rand_group(), rnd_below(3), chance(50) ? rand_group() : NULL, rand_small(), UNSET, "fuzz", len);
    case 5: return build_store_set(rnd_below(3), chance(90) ? "key" : "", rnd_below(64), chance(95), len);
    case 6: return build_store_get(rnd_below(3), "key", chance(80) ? (int64_t)rnd_below(50) : v, len);
    case 7: {
        Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
        Phalanx__StatusRequest sr = PHALANX__STATUS_REQUEST__INIT;
        env.body_case = PHALANX__ENVELOPE__BODY_STATUS_REQ;
        env.status_req = &sr;
        return pack_v(&env, len);
    }
    default: return build_reply_type((int)rnd_below(7), len);
    }
}

/* Applies one random mutation in place (buf has room for cap bytes). */
static void mutate(uint8_t *buf, size_t *len, size_t cap) {
    size_t n = *len;
    switch (rnd_below(8)) {
    case 0: /* bit flips */
        for (int k = 1 + (int)rnd_below(4); k > 0 && n; k--) buf[rnd_below((uint32_t)n)] ^= (uint8_t)(1u << rnd_below(8));
        break;
    case 1: /* truncate */
        *len = rnd_below((uint32_t)n + 1);
        break;
    case 2: { /* splice: our prefix + another message's suffix */
        size_t m;
        uint8_t *o = gen_message(&m);
        size_t cut = rnd_below((uint32_t)n + 1), from = rnd_below((uint32_t)m + 1);
        size_t take = m - from;
        if (cut + take > cap) take = cap - cut;
        memcpy(buf + cut, o + from, take);
        *len = cut + take;
        free(o);
        break;
    }
    case 3: /* overwrite a byte with an interesting value */
        if (n) {
            static const uint8_t vals[] = {0x00, 0xff, 0x7f, 0x80, 0x01, 0x08, 0x0a, 0x52};
            buf[rnd_below((uint32_t)n)] = vals[rnd_below(sizeof vals)];
        }
        break;
    case 4: { /* insert random bytes */
        size_t k = 1 + rnd_below(8), at = rnd_below((uint32_t)n + 1);
        if (n + k > cap) break;
        memmove(buf + at + k, buf + at, n - at);
        for (size_t i = 0; i < k; i++) buf[at + i] = (uint8_t)rnd();
        *len = n + k;
        break;
    }
    case 5: { /* delete a range */
        if (!n) break;
        size_t at = rnd_below((uint32_t)n), k = 1 + rnd_below((uint32_t)(n - at));
        memmove(buf + at, buf + at + k, n - at - k);
        *len = n - k;
        break;
    }
    case 6: { /* duplicate a range */
        if (!n) break;
        size_t at = rnd_below((uint32_t)n), k = 1 + rnd_below((uint32_t)(n - at));
        if (n + k > cap) break;
        memmove(buf + at + k, buf + at, n - at);
        *len = n + k;
        break;
    }
    default: /* append garbage */
        for (size_t k = rnd_below(16); k > 0 && *len < cap; k--) buf[(*len)++] = (uint8_t)rnd();
        break;
    }
}

static void dump_frame(const uint8_t *buf, size_t len, long i) {
    if (!O.dump_dir) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/fuzz-frame-seed%" PRIu64 "-%ld.bin", O.dump_dir, O.seed, i);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(buf, 1, len, f);
    fclose(f);
    printf("frame written to %s\n", path);
}

static void random_frames(void) {
    peer_t p;
    char ident[64];
    snprintf(ident, sizeof ident, "fuzz-random-%d", (int)getpid());
    peer_open(&p, ident);
    const size_t cap = 80 * 1024;
    uint8_t *buf = malloc(cap);
    long rejected = 0, valid = 0, oversized = 0, pure = 0;
    int64_t t0 = px_now_ms();
    for (long i = 0; i < O.frames; i++) {
        size_t len = 0;
        int kind = (int)rnd_below(100);
        if (kind < 25) { /* pure random bytes, mostly short */
            len = chance(90) ? rnd_below(200) : rnd_below(4096);
            for (size_t k = 0; k < len; k++) buf[k] = (uint8_t)rnd();
            pure++;
        } else if (kind < 27) { /* around the size limit */
            len = PX_WIRE_MAX_FRAME - 64 + rnd_below(2 * 64 + 1) + (chance(50) ? rnd_below(8000) : 0);
            for (size_t k = 0; k < len; k++) buf[k] = (uint8_t)rnd();
            size_t m;
            uint8_t *o = gen_message(&m);
            memcpy(buf, o, m < len ? m : len);
            free(o);
        } else { /* a message, usually mutated 1-3 times */
            size_t m;
            uint8_t *o = gen_message(&m);
            memcpy(buf, o, m);
            free(o);
            len = m;
            if (kind >= 35)
                for (int k = 1 + (int)rnd_below(3); k > 0; k--) mutate(buf, &len, cap);
        }
        Phalanx__ErrorCode code = 0;
        char why[256];
        px_msg_t *msg = px_wire_decode(buf, len, &code, why, sizeof why);
        int must_reject = msg == NULL;
        if (msg) {
            switch (msg->body_case) {
            case PHALANX__ENVELOPE__BODY_REG:
            case PHALANX__ENVELOPE__BODY_HB:
            case PHALANX__ENVELOPE__BODY_QUORUM_REQ:
            case PHALANX__ENVELOPE__BODY_FAILURE:
            case PHALANX__ENVELOPE__BODY_STORE_SET:
            case PHALANX__ENVELOPE__BODY_STORE_GET:
            case PHALANX__ENVELOPE__BODY_STATUS_REQ:
            case PHALANX__ENVELOPE__BODY_DRAIN_REQ:
                break;
            default: /* replies and Ack are not requests */
                must_reject = 1;
                code = PHALANX__ERROR_CODE__UNKNOWN_TYPE;
            }
            px_wire_free(msg);
        }
        send_frame(&p, buf, len, 0);
        char what[96];
        snprintf(what, sizeof what, "random frame #%ld (%zu bytes)", i, len);
        if (must_reject) {
            Phalanx__ErrorCode got = await_error(&p, what, NULL);
            if (got != code) {
                dump_frame(buf, len, i);
                die("%s: want Error %s, got %s", what, px_wire_error_name(code), px_wire_error_name(got));
            }
            g_expected_bad++;
            rejected++;
            oversized += code == PHALANX__ERROR_CODE__OVERSIZED;
        } else {
            valid++;
            barrier(&p, what);
        }
        if (O.verbose && i % 1000 == 999) printf("... %ld frames\n", i + 1);
    }
    free(buf);
    peer_close(&p);
    printf("random_frames=%ld random_rejected=%ld random_valid=%ld random_oversized=%ld random_pure=%ld random_ms=%lld\n",
           O.frames, rejected, valid, oversized, pure, (long long)(px_now_ms() - t0));
}

/* ---- a well-behaved client --------------------------------------------- */

static void valid_client(void) {
    peer_t p;
    char ident[64];
    snprintf(ident, sizeof ident, "fuzz-valid-%d-%lld", (int)getpid(), (long long)px_now_ms());
    peer_open(&p, ident);
    reg_spec_t r = REG_OK;
    r.group = "fzvalid";
    r.job = O.job;
    size_t len;
    uint8_t *buf = build_register(&r, 1, &len);
    uint64_t rid = g_next_req;
    send_frame(&p, buf, len, 0);
    free(buf);
    Phalanx__Envelope *a;
    while ((a = recv_reply(&p, O.timeout_ms)) && a->body_case != PHALANX__ENVELOPE__BODY_REG_ACK)
        phalanx__envelope__free_unpacked(a, NULL);
    if (!a) die("valid register: no RegisterAck within %d ms", O.timeout_ms);
    if (a->request_id != rid) die("RegisterAck request_id %" PRIu64 ", want %" PRIu64, a->request_id, rid);
    phalanx__envelope__free_unpacked(a, NULL);
    hb_spec_t h = HB_OK;
    h.group = "fzvalid";
    buf = build_heartbeat(&h, 1, &len);
    rid = g_next_req;
    send_frame(&p, buf, len, 0);
    free(buf);
    while ((a = recv_reply(&p, O.timeout_ms)) && a->body_case != PHALANX__ENVELOPE__BODY_HB_ACK) {
        if (a->body_case == PHALANX__ENVELOPE__BODY_ERROR) die("valid heartbeat answered %s", px_wire_error_name(a->error->code));
        phalanx__envelope__free_unpacked(a, NULL);
    }
    if (!a) die("valid heartbeat: no HeartbeatAck within %d ms", O.timeout_ms);
    if (a->request_id != rid) die("HeartbeatAck request_id %" PRIu64 ", want %" PRIu64, a->request_id, rid);
    phalanx__envelope__free_unpacked(a, NULL);
    peer_close(&p);
    printf("valid_client=ok\n");
}

/* ---- hostile strings --------------------------------------------------- */

/* Registers a member whose host (free text: the validator only bounds its
 * length) is full of JSON and HTML metacharacters, control bytes and invalid
 * UTF-8. test_fuzz.py then checks that /status, the dashboard and the event
 * log stay well formed and keep the member's fields. */
static void hostile(void) {
    peer_t m;
    char mid[64];
    snprintf(mid, sizeof mid, "fuzz-hostile-%d", (int)getpid());
    peer_open(&m, mid);
    reg_spec_t r = REG_OK;
    r.group = "fzhostile";
    r.job = O.job;
    r.host = "evil\"host\\\",\"type\":\"injected\n\t\x01\x7f\xc3\x28\xff<script>";
    size_t len;
    uint8_t *buf = build_register(&r, 1, &len);
    send_frame(&m, buf, len, 0);
    free(buf);
    Phalanx__Envelope *ack = recv_reply(&m, O.timeout_ms);
    if (!ack || ack->body_case != PHALANX__ENVELOPE__BODY_REG_ACK) die("register with a hostile host string: no RegisterAck");
    phalanx__envelope__free_unpacked(ack, NULL);
    peer_close(&m);
    printf("hostile_register=ok\n");
}

/* ---- a heartbeat in flight when the connection closes ------------------- */

static Phalanx__Envelope *await_body(peer_t *p, Phalanx__Envelope__BodyCase body, const char *what) {
    for (;;) {
        Phalanx__Envelope *r = recv_reply(p, O.timeout_ms);
        if (!r) die("%s: no reply within %d ms", what, O.timeout_ms);
        if (r->body_case == body) return r;
        if (r->body_case == PHALANX__ENVELOPE__BODY_ERROR)
            die("%s: Error %s: %s", what, px_wire_error_name(r->error->code), r->error->message ? r->error->message : "");
        phalanx__envelope__free_unpacked(r, NULL);
    }
}

static void race_register(peer_t *p, const char *group) {
    reg_spec_t r = REG_OK;
    r.group = group;
    r.job = O.job;
    size_t len;
    uint8_t *buf = build_register(&r, 1, &len);
    send_frame(p, buf, len, 0);
    free(buf);
    phalanx__envelope__free_unpacked(await_body(p, PHALANX__ENVELOPE__BODY_REG_ACK, "race: register"), NULL);
}

static void race_heartbeat(peer_t *p, const char *group, int wait_ack) {
    hb_spec_t h = HB_OK;
    h.group = group;
    size_t len;
    uint8_t *buf = build_heartbeat(&h, 1, &len);
    send_frame(p, buf, len, 0);
    free(buf);
    if (wait_ack) phalanx__envelope__free_unpacked(await_body(p, PHALANX__ENVELOPE__BODY_HB_ACK, "race: heartbeat"), NULL);
}

/* Both peers join a quorum (only its members may accuse, and only about it);
 * returns its id once a pushed quorum holds just the two of them (earlier
 * rounds' groups gone, so it stays current). Both keep heartbeating while
 * they wait, as workers do. */
static void race_heartbeat(peer_t *p, const char *group, int wait_ack);
static int64_t race_join(peer_t *a, const char *ga, peer_t *b, const char *gb) {
    size_t len;
    uint8_t *buf = build_quorum_req(ga, 0, 0, &len);
    send_frame(a, buf, len, 0);
    free(buf);
    buf = build_quorum_req(gb, 0, 0, &len);
    send_frame(b, buf, len, 0);
    free(buf);
    int64_t deadline = px_now_ms() + O.timeout_ms;
    while (px_now_ms() < deadline) {
        race_heartbeat(a, ga, 0);
        race_heartbeat(b, gb, 0);
        Phalanx__Envelope *q = recv_reply(b, 100);
        if (!q) continue;
        int64_t id = -1;
        if (q->body_case == PHALANX__ENVELOPE__BODY_QUORUM && q->quorum->n_groups == 2) {
            int both = 0;
            for (size_t i = 0; i < 2; i++)
                both += !strcmp(q->quorum->groups[i]->name, ga) || !strcmp(q->quorum->groups[i]->name, gb);
            if (both == 2) id = q->quorum->id;
        }
        phalanx__envelope__free_unpacked(q, NULL);
        if (id > 0) return id;
    }
    die("race: no quorum of %s and %s within %d ms", ga, gb, O.timeout_ms);
}

/* Two fresh members, groups TAGNa (peer a, identity ia) and TAGNb, in a
 * quorum of their own (N: the round); returns its id. ga, gb: 32 bytes,
 * ia: 64. */
static int64_t pair_in_quorum(const char *tag, int round, peer_t *a, peer_t *b, char *ga, char *gb, char *ia) {
    char ib[64];
    snprintf(ga, 32, "%s%da", tag, round);
    snprintf(gb, 32, "%s%db", tag, round);
    snprintf(ia, 64, "fuzz-%s-a-%d-%d", tag, (int)getpid(), round);
    snprintf(ib, sizeof ib, "fuzz-%s-b-%d-%d", tag, (int)getpid(), round);
    peer_open(a, ia);
    peer_open(b, ib);
    race_register(a, ga);
    race_register(b, gb);
    race_heartbeat(a, ga, 1);
    race_heartbeat(b, gb, 1);
    return race_join(a, ga, b, gb);
}

/* The coordinator's status as peer b gets it: ga's entry in the member
 * array ({"group":"...",...}, *end at its '}'), or NULL. *st must be freed. */
static const char *member_entry(peer_t *b, const char *ga, Phalanx__Envelope **st, const char **end) {
    size_t len;
    uint8_t *buf;
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__StatusRequest sr = PHALANX__STATUS_REQUEST__INIT;
    env.body_case = PHALANX__ENVELOPE__BODY_STATUS_REQ;
    env.status_req = &sr;
    buf = pack_v(&env, &len);
    send_frame(b, buf, len, 0);
    free(buf);
    *st = await_body(b, PHALANX__ENVELOPE__BODY_STATUS, "status");
    char key[64];
    snprintf(key, sizeof key, "{\"group\":\"%s\",", ga);
    const char *e = strstr((*st)->status->json, key);
    *end = e ? strchr(e, '}') : NULL;
    return *end ? e : NULL;
}

/* A failure report from b (group gb) naming ga/0 about quorum qid, then
 * ga's entry in the status (member_entry). */
static const char *report_then_status(peer_t *b, const char *gb, const char *ga, int64_t qid, const char *why,
                                      Phalanx__Envelope **st, const char **end) {
    size_t len;
    uint8_t *buf = build_failure(gb, 0, ga, 0, qid, why, &len);
    send_frame(b, buf, len, 0);
    free(buf);
    phalanx__envelope__free_unpacked(await_body(b, PHALANX__ENVELOPE__BODY_ACK, why), NULL);
    return member_entry(b, ga, st, end);
}

/* The loss rule's two signals: a peer's failure report plus the victim's
 * closed connection drop the victim at once. This checks they still do when
 * the victim's last heartbeat was in flight as it died: the coordinator is
 * stopped (SIGSTOP) while the victim sends a heartbeat and closes, so on
 * SIGCONT the heartbeat and the disconnect are both waiting. A report then
 * names the victim; the StatusRequest after it must show it lost with reason
 * reported_and_disconnected, not still alive waiting out its silence. */
static void disconnect_race(void) {
    if (O.coordinator_pid <= 0) die("--mode race needs --coordinator-pid");
    int failures = 0;
    for (int round = 0; round < O.race_rounds; round++) {
        char ga[32], gb[32], ia[64];
        peer_t a, b;
        int64_t qid = pair_in_quorum("race", round, &a, &b, ga, gb, ia);
        race_heartbeat(&a, ga, 1); /* joining took a while: both fresh again */
        race_heartbeat(&b, gb, 1);
        if (kill(O.coordinator_pid, SIGSTOP) != 0) die("SIGSTOP %d: %s", O.coordinator_pid, strerror(errno));
        race_heartbeat(&a, ga, 0);
        px_sleep_ms(30); /* the heartbeat reaches the kernel ... */
        peer_close(&a);  /* ... then the victim dies: FIN after it */
        px_sleep_ms(30);
        kill(O.coordinator_pid, SIGCONT);
        px_sleep_ms(30);
        Phalanx__Envelope *st;
        const char *end, *e = report_then_status(&b, gb, ga, qid, "race: collective with the victim failed", &st, &end);
        const char *state = e ? strstr(e, "\"state\":\"") : NULL;
        int lost = state && strncmp(state + 9, "lost", 4) == 0;
        const char *reason = e ? strstr(e, "\"lost_reason\":\"") : NULL;
        int right = lost && reason && reason < end && strncmp(reason + 15, "reported_and_disconnected", 25) == 0;
        if (!right) {
            failures++;
            printf("race round %d: after the report the victim is %.*s (want lost, reported_and_disconnected)\n", round,
                   e && end ? (int)(end - e + 1) : 4, e ? e : "gone");
        }
        phalanx__envelope__free_unpacked(st, NULL);
        peer_close(&b);
    }
    printf("race_rounds=%d race_failures=%d\n", O.race_rounds, failures);
    if (failures)
        die("%d of %d rounds: a heartbeat that was in flight when the victim's connection closed erased the "
            "closed-connection signal, so report + disconnect did not drop it at once", failures, O.race_rounds);
}

/* A member that reconnects (the same ZeroMQ identity, a new TCP connection)
 * usually gets its old descriptor number back at the coordinator. Its
 * heartbeats on the new connection must clear the closed-connection signal,
 * or one failure report alone (plus that stale signal) would drop a healthy,
 * heartbeating member: after the reconnect and a heartbeat, a report names
 * it, and the StatusRequest after it must show it alive. */
static void reconnect_same_fd(void) {
    int failures = 0;
    for (int round = 0; round < O.race_rounds; round++) {
        char ga[32], gb[32], ia[64];
        peer_t a, b;
        int64_t qid = pair_in_quorum("recon", round, &a, &b, ga, gb, ia);
        race_heartbeat(&a, ga, 1);
        peer_close(&a); /* the connection closes ... */
        px_sleep_ms(50);
        race_heartbeat(&b, gb, 1); /* ... and the coordinator has seen it (its loop answered since) */
        peer_open(&a, ia);         /* the same member, a new connection: most likely the same fd number */
        race_heartbeat(&a, ga, 1);
        race_heartbeat(&b, gb, 1);
        Phalanx__Envelope *st;
        const char *end, *e = report_then_status(&b, gb, ga, qid, "reconnect: one report about a live member", &st, &end);
        const char *state = e ? strstr(e, "\"state\":\"") : NULL;
        if (!state || state > end || strncmp(state + 9, "lost", 4) == 0) {
            failures++;
            printf("reconnect round %d: after one report the reconnected member is %.*s (want alive)\n", round,
                   e && end ? (int)(end - e + 1) : 4, e ? e : "gone");
        }
        phalanx__envelope__free_unpacked(st, NULL);
        peer_close(&a);
        peer_close(&b);
    }
    printf("reconnect_rounds=%d reconnect_failures=%d\n", O.race_rounds, failures);
    if (failures)
        die("%d of %d rounds: a member's heartbeats on a new connection that reused its old descriptor number left "
            "the closed-connection signal set, so one report dropped it", failures, O.race_rounds);
}

/* A worker told of a drain says so on its heartbeats (Heartbeat.draining),
 * so that a coordinator restarted before the group left drains it again:
 * a heartbeat with the flag from a member of a two-group quorum makes the
 * coordinator form the quorum without its group, marked drained (the event
 * log, checked by test_fuzz.py), and /status shows the member draining. */
static void drain_heartbeat(void) {
    char ga[32], gb[32], ia[64];
    peer_t a, b;
    int64_t qid = pair_in_quorum("drainhb", 0, &a, &b, ga, gb, ia);
    hb_spec_t h = HB_OK;
    h.group = ga;
    h.quorum_id = qid;
    h.draining = 1;
    size_t len;
    uint8_t *buf = build_heartbeat(&h, 1, &len);
    uint64_t id = g_next_req; /* its request id: acks of earlier heartbeats may come first */
    send_frame(&a, buf, len, 0);
    free(buf);
    Phalanx__Envelope *ack;
    while ((ack = await_body(&a, PHALANX__ENVELOPE__BODY_HB_ACK, "drain heartbeat"))->request_id != id)
        phalanx__envelope__free_unpacked(ack, NULL);
    int told = ack->hb_ack->has_draining && ack->hb_ack->draining;
    phalanx__envelope__free_unpacked(ack, NULL);
    if (!told) die("the ack of a heartbeat saying it is draining does not say draining");
    race_heartbeat(&b, gb, 1);
    Phalanx__Envelope *st;
    const char *end, *e = member_entry(&b, ga, &st, &end), *d = e ? strstr(e, "\"draining\":true") : NULL;
    int shown = d && d < end;
    phalanx__envelope__free_unpacked(st, NULL);
    if (!shown) die("/status does not show %s draining", ga);
    printf("drain_heartbeat=ok group=%s quorum_id=%lld\n", ga, (long long)qid);
    peer_close(&a);
    peer_close(&b);
}

/* ---- flood ------------------------------------------------------------- */
/* ---- flood ------------------------------------------------------------- */

/* Sends bad frames from --flood-sockets DEALERs as fast as ZeroMQ takes them
 * for --flood-ms, reading and dropping the replies: more than the
 * coordinator can handle, so its input queue never empties. test_fuzz.py
 * checks that it keeps serving HTTP and stops on SIGTERM meanwhile. */
static void flood(void) {
    peer_t *p = calloc((size_t)O.flood_sockets, sizeof *p);
    for (int i = 0; i < O.flood_sockets; i++) {
        char ident[64];
        snprintf(ident, sizeof ident, "fuzz-flood-%d-%d", (int)getpid(), i);
        peer_open(&p[i], ident);
    }
    static const uint8_t junk[] = {0x08, 0x01, 0x57, 0x00}; /* invalid wire type: BAD_MESSAGE */
    uint64_t sent = 0, replies = 0;
    int64_t end = px_now_ms() + O.flood_ms;
    while (px_now_ms() < end) {
        for (int i = 0; i < O.flood_sockets; i++) {
            for (int k = 0; k < 256; k++) {
                if (zmq_send(p[i].sock, junk, sizeof junk, ZMQ_DONTWAIT) < 0) break;
                sent++;
            }
            zmq_msg_t m;
            zmq_msg_init(&m);
            while (zmq_msg_recv(&m, p[i].sock, ZMQ_DONTWAIT) >= 0) replies++;
            zmq_msg_close(&m);
        }
    }
    for (int i = 0; i < O.flood_sockets; i++) peer_close(&p[i]);
    free(p);
    printf("flood_sent=%" PRIu64 " flood_replies=%" PRIu64 "\n", sent, replies);
}

/* ---- churn: many members coming and going, and store floods ------------- */

/* --members DEALERs register as one-rank groups and heartbeat every --hb-ms.
 * Then:
 *   probe   --probe-members more register at once: with the coordinator's
 *           --max-members below the total, the surplus must be refused
 *           RESOURCE_LIMIT (not crash, not grow the table);
 *   floods  member 0 sets new keys until refused (key limit), overwrites
 *           them with 16 KiB values until refused (byte limit), and parks
 *           never-answered waits until refused (waiter limit); each flood
 *           stops at a cap, so a coordinator without limits shows up as
 *           "no refusal" rather than as a machine out of memory;
 *   churn   for --churn-ms, --churn-per-s members a second are replaced:
 *           mostly closed and reborn under a new identity and group name,
 *           some reborn under the same name (a restarted process), some left
 *           silent with their connection open for a while; member 0 keeps
 *           sending refused store requests.
 * A register refused for any reason is retried at the member's next turn.
 * test_limits.py watches the coordinator's memory and /status meanwhile. */

enum { CH_NEED_REG, CH_REG_PENDING, CH_REGISTERED };

typedef struct {
    peer_t p;
    char group[32];
    int state;
    uint64_t reg_req;
    int64_t next_ms, reg_sent_ms;
    uint64_t last_reply; /* request id of the newest reply (replies come in order) */
} churn_member_t;

typedef struct {
    uint64_t registered, reg_limit, reg_other, unknown_member, heartbeats, reborn_new, reborn_same, silenced;
    uint64_t probe_accepted, probe_refused, probe_other;
    uint64_t keys_sent, keys_refused, bytes_sent, bytes_refused, waiters_sent, waiters_refused, store_other;
} churn_stats_t;

static churn_stats_t CS;
static uint64_t g_serial;
static churn_member_t *g_members; /* the --members kept registered */
static int g_nmembers;
static const char *CHURN_KINDS[] = {"", "key", "bytes", "waiter"};
#define REQ_RING 8192
static uint8_t g_req_kind[REQ_RING]; /* request id % REQ_RING -> store request kind (1..3) */

static void send_owned(peer_t *p, uint8_t *buf, size_t len) {
    zmq_send(p->sock, buf, len, ZMQ_DONTWAIT); /* a full queue drops it: churn tolerates that */
    free(buf);
}

static void churn_register(churn_member_t *m, int64_t now) {
    reg_spec_t r = REG_OK;
    r.group = m->group;
    r.job = O.job;
    r.pid = (int64_t)(g_serial & 0x3fffffff);
    size_t len;
    uint8_t *buf = build_register(&r, 1, &len);
    m->reg_req = g_next_req;
    m->state = CH_REG_PENDING;
    m->reg_sent_ms = now;
    send_owned(&m->p, buf, len);
}

static void churn_open(churn_member_t *m, const char *group, int64_t now) {
    char ident[64];
    snprintf(ident, sizeof ident, "churn-%d-%" PRIu64, (int)getpid(), ++g_serial);
    if (group) snprintf(m->group, sizeof m->group, "%s", group);
    else snprintf(m->group, sizeof m->group, "c%" PRIu64, g_serial);
    peer_open(&m->p, ident);
    churn_register(m, now);
    m->next_ms = now + O.hb_ms;
}

/* Reads every queued reply of m; store refusals are counted by request kind. */
static void churn_drain(churn_member_t *m) {
    for (;;) {
        zmq_msg_t z;
        zmq_msg_init(&z);
        if (zmq_msg_recv(&z, m->p.sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&z);
            return;
        }
        Phalanx__Envelope *r = phalanx__envelope__unpack(NULL, zmq_msg_size(&z), zmq_msg_data(&z));
        zmq_msg_close(&z);
        if (!r) die("churn: undecodable reply");
        uint64_t id = r->has_request_id ? r->request_id : 0;
        if (id > m->last_reply) m->last_reply = id;
        if (r->body_case == PHALANX__ENVELOPE__BODY_REG_ACK && id == m->reg_req) {
            m->state = CH_REGISTERED;
            CS.registered++;
        } else if (r->body_case == PHALANX__ENVELOPE__BODY_ERROR) {
            Phalanx__ErrorCode c = r->error->code;
            int limit = c == PHALANX__ERROR_CODE__RESOURCE_LIMIT;
            if (id && id == m->reg_req) {
                m->state = CH_NEED_REG;
                limit ? CS.reg_limit++ : CS.reg_other++;
            } else if (c == PHALANX__ERROR_CODE__UNKNOWN_MEMBER) {
                m->state = CH_NEED_REG; /* declared lost (a late heartbeat on a loaded machine) */
                CS.unknown_member++;
            } else if (g_req_kind[id % REQ_RING] && limit) {
                int k = g_req_kind[id % REQ_RING];
                k == 1 ? CS.keys_refused++ : k == 2 ? CS.bytes_refused++ : CS.waiters_refused++;
            } else {
                CS.store_other++;
                if (O.verbose) printf("churn: error %s: %s\n", px_wire_error_name(c), r->error->message);
            }
        }
        phalanx__envelope__free_unpacked(r, NULL);
    }
}

static void churn_heartbeat(churn_member_t *m) {
    hb_spec_t h = HB_OK;
    h.group = m->group;
    size_t len;
    uint8_t *buf = build_heartbeat(&h, 1, &len);
    send_owned(&m->p, buf, len);
    CS.heartbeats++;
}

/* One store request of kind 1 (new key i with a vlen-byte value), 2 (16 KiB
 * overwrite of key i) or 3 (park a waiter). */
static void churn_store(churn_member_t *m, int kind, uint64_t i, size_t vlen) {
    char key[64];
    size_t len;
    uint8_t *buf;
    if (kind == 1) snprintf(key, sizeof key, "k%" PRIu64, i), buf = build_store_set(0, key, vlen, 1, &len), CS.keys_sent++;
    else if (kind == 2) snprintf(key, sizeof key, "k%" PRIu64, i), buf = build_store_set(0, key, PX_STORE_VALUE_MAX, 1, &len), CS.bytes_sent++;
    else snprintf(key, sizeof key, "w%" PRIu64, i), buf = build_store_get(0, key, PX_WAIT_MAX_MS, &len), CS.waiters_sent++;
    g_req_kind[g_next_req % REQ_RING] = (uint8_t)kind;
    send_owned(&m->p, buf, len);
}

/* Every member whose turn has come: read its replies, then heartbeat, or
 * register (again) when it is not registered. */
static void churn_service(int64_t now) {
    for (int i = 0; i < g_nmembers; i++) {
        churn_member_t *m = &g_members[i];
        if (now < m->next_ms) continue;
        m->next_ms = now + O.hb_ms;
        churn_drain(m);
        if (m->state == CH_REGISTERED) churn_heartbeat(m);
        else if (m->state == CH_NEED_REG || now - m->reg_sent_ms > 5000) churn_register(m, now);
    }
}

/* A heartbeat as a barrier: every earlier request of m has been answered (or
 * parked as a waiter) once the reply to it is back. */
static void churn_barrier(churn_member_t *m, const char *what) {
    churn_heartbeat(m);
    uint64_t id = g_next_req;
    int64_t deadline = px_now_ms() + O.timeout_ms;
    for (;;) {
        churn_drain(m);
        if (m->last_reply >= id) return;
        churn_service(px_now_ms());
        if (px_now_ms() > deadline) die("churn: %s: no heartbeat ack within %d ms", what, O.timeout_ms);
        zmq_pollitem_t it = {m->p.sock, 0, ZMQ_POLLIN, 0};
        zmq_poll(&it, 1, 50);
    }
}

/* Floods one kind until the first refusal or `cap` requests; returns refusals. */
static uint64_t churn_flood(churn_member_t *m, int kind, uint64_t cap, uint64_t *next) {
    uint64_t *refused = kind == 1 ? &CS.keys_refused : kind == 2 ? &CS.bytes_refused : &CS.waiters_refused;
    uint64_t before = *refused, sent = 0;
    int batch = kind == 2 ? 32 : 256;
    while (*refused == before && sent < cap) {
        for (int k = 0; k < batch && sent < cap; k++, sent++) churn_store(m, kind, (*next)++, 8);
        churn_barrier(m, CHURN_KINDS[kind]);
    }
    printf("flood_%s_sent=%" PRIu64 " flood_%s_refused=%" PRIu64 "\n", CHURN_KINDS[kind], sent, CHURN_KINDS[kind],
           *refused - before);
    fflush(stdout);
    return *refused - before;
}

static void churn_wait_registered(churn_member_t *ms, int n, const char *what) {
    int64_t deadline = px_now_ms() + 60000;
    for (;;) {
        int done = 0, pending = 0;
        int64_t now = px_now_ms();
        for (int i = 0; i < n; i++) {
            churn_drain(&ms[i]);
            if (ms[i].state == CH_NEED_REG || (ms[i].state == CH_REG_PENDING && now - ms[i].reg_sent_ms > 5000))
                churn_register(&ms[i], now);
            done += ms[i].state == CH_REGISTERED;
            pending += ms[i].state != CH_REGISTERED;
        }
        if (!pending) return;
        if (now > deadline) die("churn: %s: %d of %d members registered after 60 s", what, done, n);
        churn_service(now);
        px_sleep_ms(20);
    }
}

static void churn_probe(void) {
    int k = O.probe_members;
    churn_member_t *x = calloc((size_t)k + 1, sizeof *x);
    int64_t now = px_now_ms();
    for (int i = 0; i < k; i++) churn_open(&x[i], NULL, now);
    uint64_t reg0 = CS.registered, lim0 = CS.reg_limit, oth0 = CS.reg_other;
    int64_t deadline = now + 60000;
    for (;;) {
        int pending = 0;
        for (int i = 0; i < k; i++) {
            churn_drain(&x[i]);
            pending += x[i].state == CH_REG_PENDING;
        }
        if (!pending) break;
        if (px_now_ms() > deadline) die("churn probe: %d registers unanswered after 60 s", pending);
        churn_service(px_now_ms());
        px_sleep_ms(20);
    }
    CS.probe_accepted = CS.registered - reg0;
    CS.probe_refused = CS.reg_limit - lim0;
    CS.probe_other = CS.reg_other - oth0;
    for (int i = 0; i < k; i++) peer_close(&x[i].p);
    free(x);
    printf("probe_members=%d probe_accepted=%" PRIu64 " probe_refused=%" PRIu64 " probe_other=%" PRIu64 "\n", k,
           CS.probe_accepted, CS.probe_refused, CS.probe_other);
    fflush(stdout);
}

#define SILENT_MAX 64
#define SILENT_MS 8000

static void churn(void) {
    int n = O.members;
    /* A closed socket keeps its slot until libzmq's reaper thread has torn
     * it down, which lags behind fast churn: room for 10 s of closed ones. */
    zmq_ctx_set(g_ctx, ZMQ_MAX_SOCKETS, n + O.probe_members + SILENT_MAX + 64 + 10 * O.churn_per_s);
    churn_member_t *ms = calloc((size_t)n, sizeof *ms);
    g_members = ms;
    int64_t t0 = px_now_ms();
    for (int i = 0; i < n; i++) churn_open(&ms[i], NULL, t0), ms[i].next_ms += (int64_t)rnd_below((uint32_t)O.hb_ms);
    g_nmembers = n;
    churn_wait_registered(ms, n, "initial registration");
    printf("members_registered=%d register_ms=%lld\n", n, (long long)(px_now_ms() - t0));
    fflush(stdout);
    if (O.probe_members > 0) churn_probe();

    uint64_t next_key = 0, next_big = 0, next_wait = 0;
    churn_member_t *f = &ms[0]; /* the flooder: never churned */
    churn_flood(f, 1, O.flood_cap, &next_key);
    churn_flood(f, 2, O.flood_cap / 64 + 64, &next_big);
    churn_flood(f, 3, O.flood_cap, &next_wait);

    peer_t silent[SILENT_MAX];
    int64_t silent_since[SILENT_MAX];
    int ns = 0;
    double owed = 0;
    int64_t start = px_now_ms(), last = start, next_flood = start;
    while (px_now_ms() - start < O.churn_ms) {
        int64_t now = px_now_ms();
        churn_service(now);
        owed += (double)O.churn_per_s * (double)(now - last) / 1000.0;
        last = now;
        for (; owed >= 1; owed -= 1) {
            churn_member_t *m = &ms[1 + rnd_below((uint32_t)(n - 1))];
            uint32_t kind = rnd_below(10);
            if (kind == 0 && ns < SILENT_MAX) { /* silent: connection open, no heartbeats */
                silent[ns] = m->p, silent_since[ns++] = now;
                m->p.sock = NULL;
                churn_open(m, NULL, now);
                CS.silenced++;
                continue;
            }
            char group[32];
            snprintf(group, sizeof group, "%s", m->group);
            peer_close(&m->p);
            churn_open(m, kind <= 2 ? group : NULL, now);
            kind <= 2 ? CS.reborn_same++ : CS.reborn_new++;
        }
        while (ns > 0 && now - silent_since[0] > SILENT_MS) {
            peer_close(&silent[0]);
            memmove(silent, silent + 1, (size_t)(ns - 1) * sizeof *silent);
            memmove(silent_since, silent_since + 1, (size_t)(ns - 1) * sizeof *silent_since);
            ns--;
        }
        if (now >= next_flood) { /* past every limit: all of these are refused (else 800 KB/s) */
            next_flood = now + 200;
            for (int k = 0; k < 10; k++) churn_store(f, 1, next_key++, PX_STORE_VALUE_MAX), churn_store(f, 3, next_wait++, 0);
            churn_store(f, 2, 1000 + next_big++ % 1000, 0); /* 8-byte values grown to 16 KiB */
        }
        churn_drain(f);
        px_sleep_ms(10);
    }
    churn_barrier(f, "end of churn");
    for (int i = 0; i < ns; i++) peer_close(&silent[i]);
    for (int i = 0; i < n; i++) peer_close(&ms[i].p);
    g_nmembers = 0;
    free(ms);
    printf("churn_ms=%lld registered=%" PRIu64 " register_refused_limit=%" PRIu64 " register_refused_other=%" PRIu64
           " unknown_member=%" PRIu64 " heartbeats=%" PRIu64 " reborn_new=%" PRIu64 " reborn_same=%" PRIu64
           " silenced=%" PRIu64 "\n",
           (long long)(px_now_ms() - start), CS.registered, CS.reg_limit, CS.reg_other, CS.unknown_member, CS.heartbeats,
           CS.reborn_new, CS.reborn_same, CS.silenced);
    printf("keys_sent=%" PRIu64 " keys_refused=%" PRIu64 " bytes_sent=%" PRIu64 " bytes_refused=%" PRIu64
           " waiters_sent=%" PRIu64 " waiters_refused=%" PRIu64 " store_other_errors=%" PRIu64 "\n",
           CS.keys_sent, CS.keys_refused, CS.bytes_sent, CS.bytes_refused, CS.waiters_sent, CS.waiters_refused,
           CS.store_other);
}

/* ---- main -------------------------------------------------------------- */

static void usage(void) {
    printf("usage: fuzz_client --endpoint EP [flags]\n\n"
           "Sends malformed and random frames to a live phalanx-coordinator and checks each reply.\n\n"
           "flags (default in brackets):\n"
           "  --endpoint EP      coordinator ZeroMQ endpoint (required)\n"
           "  --job NAME         the coordinator's --job [phalanx]\n"
           "  --mode M           all | targeted | random | valid; or hostile, flood, race, reconnect, drain, churn [all]\n"
           "  --seed N           PRNG seed for the random frames [time-based, printed]\n"
           "  --frames N         random frames to send [10000]\n"
           "  --timeout-ms N     how long to wait for each reply [3000]\n"
           "  --dump-dir DIR     write the frame that broke a check here [none]\n"
           "  --flood-ms N       flood mode: how long to flood [5000]\n"
           "  --flood-sockets N  flood mode: DEALER sockets [4]\n"
           "  --coordinator-pid P  race mode: the coordinator to SIGSTOP/SIGCONT (required)\n"
           "  --race-rounds N    race and reconnect modes: rounds [5]\n"
           "  --members N        churn mode: members kept registered [2000]\n"
           "  --probe-members N  churn mode: extra registers at once, to hit --max-members [0]\n"
           "  --churn-ms N       churn mode: how long to churn [60000]\n"
           "  --churn-per-s N    churn mode: members replaced per second [50]\n"
           "  --hb-ms N          churn mode: heartbeat period of each member [1000]\n"
           "  --flood-cap N      churn mode: store requests per flood before giving up on a refusal [200000]\n"
           "  --verbose          print every targeted case\n");
}

int main(int argc, char **argv) {
    O = (opts_t){.job = "phalanx", .mode = "all", .frames = 10000, .timeout_ms = 3000, .flood_ms = 5000, .flood_sockets = 4, .race_rounds = 5,
              .members = 2000, .churn_ms = 60000, .churn_per_s = 50, .hb_ms = 1000, .flood_cap = 200000};
    O.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            usage();
            return 0;
        } else if (!strcmp(a, "--verbose")) {
            O.verbose = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "fuzz_client: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--endpoint")) O.endpoint = v;
        else if (!strcmp(a, "--job")) O.job = v;
        else if (!strcmp(a, "--mode")) O.mode = v;
        else if (!strcmp(a, "--seed")) O.seed = strtoull(v, NULL, 0);
        else if (!strcmp(a, "--frames")) O.frames = strtol(v, NULL, 10);
        else if (!strcmp(a, "--timeout-ms")) O.timeout_ms = atoi(v);
        else if (!strcmp(a, "--dump-dir")) O.dump_dir = v;
        else if (!strcmp(a, "--flood-ms")) O.flood_ms = atoi(v);
        else if (!strcmp(a, "--coordinator-pid")) O.coordinator_pid = atoi(v);
        else if (!strcmp(a, "--race-rounds")) O.race_rounds = atoi(v) > 0 ? atoi(v) : 1;
        else if (!strcmp(a, "--flood-sockets")) O.flood_sockets = atoi(v) > 0 ? atoi(v) : 1;
        else if (!strcmp(a, "--members")) O.members = atoi(v) > 1 ? atoi(v) : 2;
        else if (!strcmp(a, "--probe-members")) O.probe_members = atoi(v) > 0 ? atoi(v) : 0;
        else if (!strcmp(a, "--churn-ms")) O.churn_ms = atoi(v) > 0 ? atoi(v) : 0;
        else if (!strcmp(a, "--churn-per-s")) O.churn_per_s = atoi(v) > 0 ? atoi(v) : 0;
        else if (!strcmp(a, "--hb-ms")) O.hb_ms = atoi(v) > 10 ? atoi(v) : 10;
        else if (!strcmp(a, "--flood-cap")) O.flood_cap = atol(v) > 0 ? atol(v) : 1;
        else {
            fprintf(stderr, "fuzz_client: unknown flag %s (see --help)\n", a);
            return 2;
        }
        i++;
    }
    if (!O.endpoint) {
        fprintf(stderr, "fuzz_client: --endpoint is required\n");
        return 2;
    }
    g_rng = O.seed;
    printf("seed=%" PRIu64 "\n", O.seed);
    fflush(stdout);
    g_ctx = zmq_ctx_new();
    int all = !strcmp(O.mode, "all");
    if (all || !strcmp(O.mode, "targeted")) targeted();
    if (all || !strcmp(O.mode, "random")) random_frames();
    if (all || !strcmp(O.mode, "valid")) valid_client();
    if (!strcmp(O.mode, "hostile")) hostile();
    if (!strcmp(O.mode, "flood")) flood();
    if (!strcmp(O.mode, "race")) disconnect_race();
    if (!strcmp(O.mode, "reconnect")) reconnect_same_fd();
    if (!strcmp(O.mode, "drain")) drain_heartbeat();
    if (!strcmp(O.mode, "churn")) churn();
    printf("expected_bad_messages=%" PRIu64 " unsolicited=%" PRIu64 "\n", g_expected_bad, g_unsolicited);
    zmq_ctx_term(g_ctx);
    return 0;
}
