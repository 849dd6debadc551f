/* Tests of frame validation (proto/px_wire.c): every kind of malformed input
 * gets the right typed error, and valid messages round-trip. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_check.h"
#include "px_hbudp.h"
#include "px_wire.h"

static int failed;

static void expect(const char *what, const void *buf, size_t len, int want_ok, Phalanx__ErrorCode want_code) {
    Phalanx__ErrorCode code = 0;
    char why[256] = "";
    px_msg_t *m = px_wire_decode(buf, len, &code, why, sizeof why);
    int ok = want_ok ? m != NULL : (m == NULL && code == want_code);
    if (!ok) {
        fprintf(stderr, "FAIL: %s: want %s, got %s (%s)\n", what, want_ok ? "valid" : px_wire_error_name(want_code),
                m ? "valid" : px_wire_error_name(code), why);
        failed++;
    }
    px_wire_free(m);
}

static void *pack(px_msg_t *env, size_t *len, int set_version) {
    size_t n = phalanx__envelope__get_packed_size(env);
    void *buf = malloc(n + 1);
    if (set_version) return px_wire_encode(env, len);
    phalanx__envelope__pack(env, buf);
    *len = n;
    return buf;
}

static void check_register(const char *what, const char *group, int rank, int size, int has_pid, int want_ok) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__Register r = PHALANX__REGISTER__INIT;
    r.group = (char *)group;
    r.has_rank = rank >= 0;
    r.rank = (uint32_t)(rank < 0 ? 0 : rank);
    r.has_group_size = size >= 0;
    r.group_size = (uint32_t)(size < 0 ? 0 : size);
    r.has_pid = has_pid;
    r.pid = 1;
    r.host = "h";
    env.body_case = PHALANX__ENVELOPE__BODY_REG;
    env.reg = &r;
    size_t len;
    void *buf = pack(&env, &len, 1);
    expect(what, buf, len, want_ok, PHALANX__ERROR_CODE__BAD_MESSAGE);
    free(buf);
}

static void expect_env(const char *what, px_msg_t *env, int want_ok) {
    size_t len;
    void *buf = pack(env, &len, 1);
    Phalanx__ErrorCode code = 0;
    char why[256] = "";
    /* replies come with a larger limit; requests with the default one */
    px_msg_t *m = px_wire_decode_max(buf, len, PX_WIRE_MAX_REPLY, &code, why, sizeof why);
    if ((m != NULL) != want_ok || (!want_ok && code != PHALANX__ERROR_CODE__BAD_MESSAGE)) {
        fprintf(stderr, "FAIL: %s: want %s, got %s (%s)\n", what, want_ok ? "valid" : "BAD_MESSAGE",
                m ? "valid" : px_wire_error_name(code), why);
        failed++;
    }
    px_wire_free(m);
    free(buf);
}

/* --liveness group: the leader's endpoint, its digest, the acks that carry
 * them, and the order of a pushed quorum (workers binary-search it). */
static void check_group_liveness(void) {
    static const struct {
        const char *ep;
        int ok;
    } eps[] = {{"tcp://10.0.0.1:4000", 1}, {"tcp://node-3.svc:65535", 1}, {"tcp://[::1]:80", 1},
               {"ipc:///tmp/x", 0},       {"tcp://:4000", 0},           {"tcp://h:0", 0},
               {"tcp://h:65536", 0},      {"tcp://h:", 0},              {"tcp://h:12x", 0},
               {"tcp://h h:1", 0},        {"tcp://h", 0},               {"", 0}};
    for (size_t i = 0; i < sizeof eps / sizeof eps[0]; i++)
        if (px_wire_endpoint_ok(eps[i].ep) != eps[i].ok) {
            fprintf(stderr, "FAIL: endpoint '%s': want %d\n", eps[i].ep, eps[i].ok);
            failed++;
        }

    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__Register r = PHALANX__REGISTER__INIT;
    r.group = "g0";
    r.has_rank = r.has_group_size = r.has_pid = 1;
    r.group_size = 8;
    r.host = "h";
    r.liveness_endpoint = "tcp://127.0.0.1:4000";
    env.body_case = PHALANX__ENVELOPE__BODY_REG;
    env.reg = &r;
    expect_env("leader registers an endpoint", &env, 1);
    r.rank = 1;
    expect_env("rank 1 registers an endpoint", &env, 0);
    r.rank = 0;
    r.liveness_endpoint = "tcp://127.0.0.1:0";
    expect_env("leader endpoint with port 0", &env, 0);
    r.liveness_endpoint = NULL;
    static char long_host[PX_HOST_MAX + 2];
    memset(long_host, 'h', PX_HOST_MAX + 1);
    r.data_host = "10.77.0.2";
    expect_env("a data host", &env, 1);
    long_host[PX_HOST_MAX] = '\0';
    r.data_host = long_host;
    expect_env("a data host of PX_HOST_MAX bytes", &env, 1);
    long_host[PX_HOST_MAX] = 'h';
    expect_env("a data host over PX_HOST_MAX bytes", &env, 0);
    r.data_host = NULL;

    Phalanx__Heartbeat hb = PHALANX__HEARTBEAT__INIT;
    Phalanx__GroupDigest d = PHALANX__GROUP_DIGEST__INIT;
    static uint8_t bits[PX_GROUP_SIZE_MAX / 8 + 1] = {0xfe};
    hb.group = "g0";
    hb.has_rank = hb.has_step = 1;
    hb.step = 7;
    d.has_alive = d.has_min_step = d.has_max_step = 1;
    d.alive.data = bits;
    d.alive.len = 1;
    d.min_step = 6;
    d.max_step = 7;
    hb.digest = &d;
    env.body_case = PHALANX__ENVELOPE__BODY_HB;
    env.hb = &hb;
    expect_env("leader digest", &env, 1);
    d.alive.len = PX_GROUP_SIZE_MAX / 8 + 1;
    expect_env("digest bitmap over 1024 ranks", &env, 0);
    d.alive.len = 1;
    d.min_step = 8;
    expect_env("digest min_step above max_step", &env, 0);
    d.min_step = -1;
    expect_env("digest negative step", &env, 0);
    d.min_step = 6;
    d.has_max_step = 0;
    expect_env("digest without max_step", &env, 0);
    d.has_max_step = 1;
    hb.rank = 3;
    expect_env("digest from rank 3", &env, 0);

    Phalanx__HeartbeatAck ack = PHALANX__HEARTBEAT_ACK__INIT;
    ack.has_quorum_id = 1;
    ack.leader_endpoint = "tcp://h:9";
    env.body_case = PHALANX__ENVELOPE__BODY_HB_ACK;
    env.hb_ack = &ack;
    expect_env("ack with a leader endpoint", &env, 1);
    ack.leader_endpoint = "tcp://h:x";
    expect_env("ack with a bad leader endpoint", &env, 0);

    Phalanx__Quorum q = PHALANX__QUORUM__INIT;
    Phalanx__QuorumGroup ga = PHALANX__QUORUM_GROUP__INIT, gb = PHALANX__QUORUM_GROUP__INIT;
    Phalanx__QuorumGroup *gs[2] = {&ga, &gb};
    ga.name = "a";
    gb.name = "b";
    q.has_id = q.has_max_step = 1;
    q.id = 3;
    q.n_groups = 2;
    q.groups = gs;
    env.body_case = PHALANX__ENVELOPE__BODY_QUORUM;
    env.quorum = &q;
    expect_env("sorted quorum", &env, 1);
    gs[0] = &gb, gs[1] = &ga;
    expect_env("quorum not sorted by name", &env, 0);
    gs[0] = &ga, gs[1] = &ga;
    expect_env("quorum naming a group twice", &env, 0);

    /* deltas */
    gs[0] = &ga, gs[1] = &gb;
    char *gone[2] = {"c", "d"};
    q.has_base_id = q.has_n_groups_total = q.has_groups_hash = 1;
    q.base_id = 2;
    q.n_groups_total = 2;
    q.n_removed = 2;
    q.removed = gone;
    expect_env("delta", &env, 1);
    q.base_id = 3;
    expect_env("delta against itself", &env, 0);
    q.base_id = 0;
    expect_env("delta against quorum 0", &env, 0);
    q.base_id = 2;
    q.has_groups_hash = 0;
    expect_env("delta without its hash", &env, 0);
    q.has_groups_hash = 1;
    gone[0] = "d", gone[1] = "c";
    expect_env("delta with removed names unsorted", &env, 0);
    gone[0] = "c d";
    expect_env("delta removing an invalid name", &env, 0);
    gone[0] = "c", gone[1] = "d";
    q.has_base_id = 0;
    expect_env("removed names without a base", &env, 0);

    /* planned leaves (a drain) */
    q.n_removed = 0;
    char *drained[2] = {"c", "d"};
    q.n_draining = 2;
    q.draining = drained;
    expect_env("quorum with drained groups", &env, 1);
    drained[0] = "d", drained[1] = "c";
    expect_env("drained groups unsorted", &env, 0);
    drained[0] = "c", drained[1] = "../d";
    expect_env("a drained group with an invalid name", &env, 0);
    q.n_draining = 0;
}

/* phalanxctl drain's request: a valid group name or nothing. */
static void check_drain_request(void) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__DrainRequest d = PHALANX__DRAIN_REQUEST__INIT;
    env.body_case = PHALANX__ENVELOPE__BODY_DRAIN_REQ;
    env.drain_req = &d;
    d.group = "g1";
    expect_env("drain request", &env, 1);
    d.group = NULL;
    expect_env("drain request without a group", &env, 0);
    d.group = "g 1";
    expect_env("drain request with an invalid group", &env, 0);
    d.group = "";
    expect_env("drain request with an empty group", &env, 0);
}

/* tcp://HOST:PORT split into host and port, as the coordinator's UDP bind,
 * the agent's UDP target and the bind policy read it. */
static void check_endpoint_split(void) {
    static const struct {
        const char *ep, *host, *port; /* host NULL: refused */
    } E[] = {
        {"tcp://127.0.0.1:7777", "127.0.0.1", "7777"},
        {"tcp://[::1]:7777", "::1", "7777"},
        {"tcp://phalanx-coordinator:7777", "phalanx-coordinator", "7777"},
        {"tcp://*:0", "*", "0"},
        {"tcp://host:", "host", ""},
        {"tcp://:7777", NULL, NULL},
        {"tcp://[]:7777", NULL, NULL},
        {"tcp://noport", NULL, NULL},
        {"ipc:///tmp/x:1", NULL, NULL},
        {"udp://h:1", NULL, NULL},
    };
    for (size_t i = 0; i < sizeof E / sizeof E[0]; i++) {
        char host[64] = "", port[16] = "";
        int rc = px_wire_endpoint_split(E[i].ep, host, sizeof host, port, sizeof port);
        if (!E[i].host) CHECK(rc != 0, "endpoint %s: split, want refused", E[i].ep);
        else CHECK(rc == 0 && !strcmp(host, E[i].host) && !strcmp(port, E[i].port), "endpoint %s: rc %d host '%s' port '%s'",
                   E[i].ep, rc, host, port);
    }
    char small[4], port[16];
    CHECK(px_wire_endpoint_split("tcp://127.0.0.1:1", small, sizeof small, port, sizeof port) != 0,
          "endpoint: a host longer than its buffer split");
    CHECK(px_wire_endpoint_split(NULL, small, sizeof small, port, sizeof port) != 0, "endpoint: NULL split");
}

/* A checkpoint rejection's detail (px_wire.h): the worker's join and the
 * coordinator's split give back the three fields in order, also when a field
 * holds the separator, a field is empty, or the path is too long to fit. */
static void check_ckpt_detail(void) {
    CHECK(px_wire_ckpt_event("checkpoint_saved") && !strcmp(px_wire_ckpt_event("checkpoint_saved"), "saved"),
          "ckpt: the kind after its prefix");
    CHECK(!px_wire_ckpt_event("heal_started") && !px_wire_ckpt_event(NULL), "ckpt: a kind of another event");
    static char long_path[2 * PX_REASON_MAX];
    memset(long_path, 'p', sizeof long_path - 2);
    long_path[0] = '/';
    long_path[sizeof long_path - 2] = 'Z'; /* the tail tells checkpoints apart */
    const struct {
        const char *path, *file, *fault; /* joined */
        const char *want[PX_WIRE_CKPT_FIELDS]; /* NULL: the path's tail */
    } T[] = {
        {"/ck/step_00000010", "data-0001.bin", "xxh3 mismatch", {"/ck/step_00000010", "data-0001.bin", "xxh3 mismatch"}},
        {"", "manifest.json", "not valid JSON", {"", "manifest.json", "not valid JSON"}},
        {"/ck/a\tb", "f\tg", "x\ty", {"/ck/a b", "f g", "x y"}},
        {"/ck/s", "", "", {"/ck/s", "", ""}},
        {long_path, "model.bin", "short (torn or truncated)", {NULL, "model.bin", "short (torn or truncated)"}},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        char detail[PX_REASON_MAX + 1];
        const char *field[PX_WIRE_CKPT_FIELDS];
        px_wire_ckpt_rejected_join(detail, sizeof detail, T[i].path, T[i].file, T[i].fault);
        CHECK(strlen(detail) <= PX_REASON_MAX, "ckpt %zu: a detail of %zu bytes", i, strlen(detail));
        px_wire_ckpt_rejected_split(detail, field);
        for (int f = 0; f < PX_WIRE_CKPT_FIELDS; f++) {
            if (T[i].want[f])
                CHECK(!strcmp(field[f], T[i].want[f]), "ckpt %zu: field %d '%s', want '%s'", i, f, field[f], T[i].want[f]);
            else
                CHECK(strlen(field[f]) > 0 && field[f][strlen(field[f]) - 1] == 'Z' &&
                          !strncmp(field[f], long_path + strlen(long_path) - strlen(field[f]), strlen(field[f])),
                      "ckpt %zu: field %d '%.20s...' is not the path's tail", i, f, field[f]);
        }
    }
    char one[] = "only a path";
    const char *field[PX_WIRE_CKPT_FIELDS];
    px_wire_ckpt_rejected_split(one, field);
    CHECK(!strcmp(field[0], "only a path") && !field[1][0] && !field[2][0], "ckpt: a detail of one field");
}

/* The sealed UDP heartbeat (proto/px_hbudp.h): a round trip; every single
 * byte altered, the wrong key, a cut or padded datagram, a header with
 * another seq or identity: each refused. */
static void check_hbudp(void) {
    uint8_t key[PX_HBUDP_KEY_BYTES], other[PX_HBUDP_KEY_BYTES], d[PX_HBUDP_MAX + 8], plain[PX_HBUDP_MAX];
    CHECK(px_hbudp_keygen(key) == 0 && px_hbudp_keygen(other) == 0, "hbudp: keygen");
    CHECK(memcmp(key, other, sizeof key) != 0, "hbudp: two keys alike");
    const char *ident = "g0/0/123/456", *msg = "a heartbeat's bytes";
    size_t n = px_hbudp_seal(key, ident, strlen(ident), 42, msg, strlen(msg), d, sizeof d), pl = 0;
    CHECK(n == 4 + 1 + strlen(ident) + 8 + strlen(msg) + PX_HBUDP_TAG_BYTES, "hbudp: sealed length %zu", n);
    const uint8_t *id;
    size_t il;
    uint64_t seq;
    CHECK(px_hbudp_peek(d, n, &id, &il, &seq) == 0 && il == strlen(ident) && !memcmp(id, ident, il) && seq == 42,
          "hbudp: peek");
    CHECK(px_hbudp_open(key, d, n, plain, sizeof plain, &pl) == 0 && pl == strlen(msg) && !memcmp(plain, msg, pl),
          "hbudp: round trip");
    CHECK(px_hbudp_open(other, d, n, plain, sizeof plain, &pl) != 0, "hbudp: opened with another key");
    for (size_t i = 0; i < n; i++) {
        d[i] ^= 0x80;
        CHECK(px_hbudp_open(key, d, n, plain, sizeof plain, &pl) != 0, "hbudp: byte %zu altered, still opened", i);
        d[i] ^= 0x80;
    }
    CHECK(px_hbudp_open(key, d, n - 1, plain, sizeof plain, &pl) != 0, "hbudp: cut by one byte, still opened");
    d[n] = 0;
    CHECK(px_hbudp_open(key, d, n + 1, plain, sizeof plain, &pl) != 0, "hbudp: one byte longer, still opened");
    CHECK(px_hbudp_open(key, d, n, plain, 3, &pl) != 0, "hbudp: opened into a buffer too small");
    CHECK(px_hbudp_peek(d, 5, &id, &il, &seq) != 0, "hbudp: a 5-byte datagram peeked");
    CHECK(px_hbudp_seal(key, "", 0, 1, msg, 1, d, sizeof d) == 0, "hbudp: sealed with an empty identity");
    static const char long_id[] = "0123456789012345678901234567890123456789012345678901234567890123x"; /* 65 */
    CHECK(px_hbudp_seal(key, long_id, 65, 1, msg, 1, d, sizeof d) == 0, "hbudp: sealed with a 65-byte identity");
    static uint8_t big[PX_HBUDP_MAX];
    CHECK(px_hbudp_seal(key, ident, strlen(ident), 1, big, sizeof big, d, sizeof d) == 0, "hbudp: sealed past the limit");
    CHECK(px_hbudp_seal(key, ident, strlen(ident), 1, msg, strlen(msg), d, 10) == 0, "hbudp: sealed into 10 bytes");
}

int main(void) {
    check_register("valid register", "g0", 1, 2, 1, 1);
    check_register("rank not below group_size", "g0", 2, 2, 1, 0);
    check_register("missing rank", "g0", -1, 2, 1, 0);
    check_register("group_size 0", "g0", 0, 0, 1, 0);
    check_register("group_size above limit", "g0", 0, PX_GROUP_SIZE_MAX + 1, 1, 0);
    check_register("missing pid", "g0", 0, 1, 0, 0);
    check_register("missing group", NULL, 0, 1, 1, 0);
    check_register("group with a space", "g 0", 0, 1, 1, 0);
    check_register("group too long", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 0, 1, 1, 0);

    /* wrong and missing version */
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__StatusRequest sr = PHALANX__STATUS_REQUEST__INIT;
    env.body_case = PHALANX__ENVELOPE__BODY_STATUS_REQ;
    env.status_req = &sr;
    size_t len;
    void *buf = pack(&env, &len, 0);
    expect("missing version", buf, len, 0, PHALANX__ERROR_CODE__VERSION_MISMATCH);
    free(buf);
    env.has_version = 1;
    env.version = PX_PROTO_VERSION + 1;
    buf = pack(&env, &len, 0);
    expect("wrong version", buf, len, 0, PHALANX__ERROR_CODE__VERSION_MISMATCH);
    free(buf);
    buf = pack(&env, &len, 1);
    expect("valid status request", buf, len, 1, 0);
    /* truncation of a valid frame */
    Phalanx__Envelope env2 = PHALANX__ENVELOPE__INIT;
    Phalanx__Heartbeat hb = PHALANX__HEARTBEAT__INIT;
    hb.group = "grp";
    hb.has_rank = hb.has_step = 1;
    hb.step = 123456789;
    env2.body_case = PHALANX__ENVELOPE__BODY_HB;
    env2.hb = &hb;
    free(buf);
    buf = pack(&env2, &len, 1);
    expect("valid heartbeat", buf, len, 1, 0);
    expect("truncated heartbeat", buf, len - 3, 0, PHALANX__ERROR_CODE__BAD_MESSAGE);
    hb.step = -1;
    free(buf);
    buf = pack(&env2, &len, 1);
    expect("negative step", buf, len, 0, PHALANX__ERROR_CODE__BAD_MESSAGE);
    free(buf);
    /* unknown type: a field number no body uses */
    unsigned char unknown[] = {0x08, PX_PROTO_VERSION, 0xfa, 0x06, 0x00}; /* field 111, empty */
    expect("unknown message type", unknown, sizeof unknown, 0, PHALANX__ERROR_CODE__UNKNOWN_TYPE);
    unsigned char version_only[] = {0x08, PX_PROTO_VERSION};
    expect("no body", version_only, sizeof version_only, 0, PHALANX__ERROR_CODE__UNKNOWN_TYPE);
    /* oversized */
    size_t big = PX_WIRE_MAX_FRAME + 1;
    unsigned char *huge = calloc(1, big);
    expect("oversized frame", huge, big, 0, PHALANX__ERROR_CODE__OVERSIZED);
    free(huge);
    /* garbage */
    unsigned char junk[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    expect("garbage", junk, sizeof junk, 0, PHALANX__ERROR_CODE__BAD_MESSAGE);
    expect("empty frame", "", 0, 0, PHALANX__ERROR_CODE__VERSION_MISMATCH);
    /* store limits */
    Phalanx__Envelope env3 = PHALANX__ENVELOPE__INIT;
    Phalanx__StoreSet ss = PHALANX__STORE_SET__INIT;
    ss.has_quorum_id = ss.has_value = 1;
    ss.quorum_id = 1;
    ss.key = "k";
    static unsigned char val[PX_STORE_VALUE_MAX + 1];
    ss.value.data = val;
    ss.value.len = PX_STORE_VALUE_MAX;
    env3.body_case = PHALANX__ENVELOPE__BODY_STORE_SET;
    env3.store_set = &ss;
    buf = pack(&env3, &len, 1);
    expect("store value at the limit", buf, len, 1, 0);
    free(buf);
    ss.value.len = PX_STORE_VALUE_MAX + 1;
    buf = pack(&env3, &len, 1);
    expect("store value over the limit", buf, len, 0, PHALANX__ERROR_CODE__BAD_MESSAGE);
    free(buf);
    ss.value.len = 1;
    ss.key = "";
    buf = pack(&env3, &len, 1);
    expect("empty store key", buf, len, 0, PHALANX__ERROR_CODE__BAD_MESSAGE);
    free(buf);
    check_group_liveness();
    check_drain_request();
    check_hbudp();
    check_endpoint_split();
    check_ckpt_detail();
    printf("test_wire: %d failed\n", failed);
    return failed ? 1 : 0;
}
