/* Implementation of px_wire.h. The per-body checks read like the comments in
 * phalanx.proto: which fields must be present and what range each may take. */
#include "px_wire.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(Phalanx__ErrorCode *code, char *why, size_t why_len, Phalanx__ErrorCode c,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int fail(Phalanx__ErrorCode *code, char *why, size_t why_len, Phalanx__ErrorCode c,
                const char *fmt, ...) {
    *code = c;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
    return -1;
}

#define REQUIRE(cond, ...)                                                                 \
    do {                                                                                   \
        if (!(cond)) return fail(code, why, why_len, PHALANX__ERROR_CODE__BAD_MESSAGE, __VA_ARGS__); \
    } while (0)

int px_wire_group_name_ok(const char *name) {
    if (!name) return 0;
    size_t n = strlen(name);
    if (n == 0 || n > PX_GROUP_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '.' || c == '-';
        if (!ok) return 0;
    }
    return 1;
}

int px_wire_worker_event_kind_ok(const char *kind) {
    static const char *const kinds[] = {"heal_started",        "heal_finished",       "divergence_detected", "run_finished",
                                        "checkpoint_started",  "checkpoint_saved",    "checkpoint_failed",
                                        "checkpoint_restored", "checkpoint_rejected", "checkpoint_moved_aside",
                                        "checkpoint_deferred", "outer_step"};
    if (!kind) return 0;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(kind, kinds[i]) == 0) return 1;
    return 0;
}

const char *px_wire_ckpt_event(const char *kind) {
    const size_t n = strlen(PX_WIRE_CKPT_PREFIX);
    return kind && !strncmp(kind, PX_WIRE_CKPT_PREFIX, n) ? kind + n : NULL;
}

/* Appends s[0..n) to out at *at, a separator turned into a space, leaving
 * room for the terminating NUL. */
static void put_field(char *out, size_t outlen, size_t *at, const char *s, size_t n) {
    for (size_t i = 0; i < n && *at + 1 < outlen; i++) out[(*at)++] = s[i] == PX_WIRE_CKPT_SEP ? ' ' : s[i];
}

void px_wire_ckpt_rejected_join(char *out, size_t outlen, const char *path, const char *file, const char *fault) {
    if (outlen == 0) return;
    const char *field[PX_WIRE_CKPT_FIELDS] = {path, file, fault};
    size_t rest = strlen(file) + strlen(fault) + PX_WIRE_CKPT_FIELDS - 1, n = strlen(path);
    size_t room = outlen - 1 > rest ? outlen - 1 - rest : 0;
    if (n > room) field[PX_WIRE_CKPT_PATH] += n - room;
    size_t at = 0;
    for (int i = 0; i < PX_WIRE_CKPT_FIELDS; i++) {
        if (i > 0 && at + 1 < outlen) out[at++] = PX_WIRE_CKPT_SEP;
        put_field(out, outlen, &at, field[i], strlen(field[i]));
    }
    out[at] = '\0';
}

void px_wire_ckpt_rejected_split(char *detail, const char *field[PX_WIRE_CKPT_FIELDS]) {
    char *p = detail;
    for (int i = 0; i < PX_WIRE_CKPT_FIELDS; i++) {
        field[i] = p ? p : "";
        char *sep = p && i + 1 < PX_WIRE_CKPT_FIELDS ? strchr(p, PX_WIRE_CKPT_SEP) : NULL;
        if (sep) *sep = '\0';
        p = sep ? sep + 1 : NULL;
    }
}

static int str_ok(const char *s, size_t max) { return s && strlen(s) <= max; }

int px_wire_endpoint_split(const char *ep, char *host, size_t hlen, char *port, size_t plen) {
    if (!ep || strncmp(ep, "tcp://", 6) != 0) return -1;
    const char *h = ep + 6, *colon = strrchr(h, ':');
    if (!colon) return -1;
    size_t n = (size_t)(colon - h);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') h++, n -= 2;
    if (n == 0 || n >= hlen || strlen(colon + 1) >= plen) return -1;
    memcpy(host, h, n);
    host[n] = '\0';
    snprintf(port, plen, "%s", colon + 1);
    return 0;
}

int px_wire_endpoint_ok(const char *ep) {
    if (!ep || strncmp(ep, "tcp://", 6) != 0 || strlen(ep) > PX_ENDPOINT_MAX) return 0;
    const char *colon = strrchr(ep + 6, ':');
    if (!colon || colon == ep + 6 || !colon[1]) return 0;
    for (const char *p = ep + 6; *p; p++)
        if (*p <= ' ' || *p == 0x7f) return 0;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    return *end == '\0' && port > 0 && port < 65536;
}

int px_wire_validate(const px_msg_t *m, Phalanx__ErrorCode *code, char *why, size_t why_len) {
    if (!m->has_version)
        return fail(code, why, why_len, PHALANX__ERROR_CODE__VERSION_MISMATCH,
                    "missing protocol version (expected %u)", PX_PROTO_VERSION);
    if (m->version != PX_PROTO_VERSION)
        return fail(code, why, why_len, PHALANX__ERROR_CODE__VERSION_MISMATCH,
                    "protocol version %u, expected %u", m->version, PX_PROTO_VERSION);
    if (m->token) REQUIRE(strlen(m->token) <= 256, "token longer than 256 bytes");
    switch (m->body_case) {
    case PHALANX__ENVELOPE__BODY_REG: {
        const Phalanx__Register *r = m->reg;
        REQUIRE(px_wire_group_name_ok(r->group), "register.group missing or not [A-Za-z0-9_.-]{1,63}");
        REQUIRE(r->has_group_size && r->group_size >= 1 && r->group_size <= PX_GROUP_SIZE_MAX,
                "register.group_size missing or not in [1, %d]", PX_GROUP_SIZE_MAX);
        REQUIRE(r->has_rank && r->rank < r->group_size, "register.rank missing or not below group_size");
        REQUIRE(r->has_pid, "register.pid missing");
        REQUIRE(str_ok(r->host, PX_HOST_MAX), "register.host missing or longer than %d", PX_HOST_MAX);
        REQUIRE(!r->data_host || strlen(r->data_host) <= PX_HOST_MAX, "register.data_host longer than %d",
                PX_HOST_MAX);
        REQUIRE(!r->has_step || (r->step >= 0 && r->step <= PX_STEP_MAX), "register.step not in [0, %lld]", PX_STEP_MAX);
        REQUIRE(!r->has_quorum_id || (r->quorum_id >= 0 && r->quorum_id <= PX_QUORUM_ID_MAX),
                "register.quorum_id not in [0, %lld]", PX_QUORUM_ID_MAX);
        REQUIRE(!r->has_job_steps || (r->job_steps >= 0 && r->job_steps <= PX_STEP_MAX),
                "register.job_steps not in [0, %lld]", PX_STEP_MAX);
        REQUIRE(!r->job || strlen(r->job) <= PX_GROUP_NAME_MAX, "register.job too long");
        REQUIRE(!r->layout || strlen(r->layout) <= PX_GROUP_NAME_MAX, "register.layout too long");
        REQUIRE(!r->liveness_endpoint || (r->rank == 0 && px_wire_endpoint_ok(r->liveness_endpoint)),
                "register.liveness_endpoint: only rank 0 sends one, as tcp://HOST:PORT of at most %d bytes",
                PX_ENDPOINT_MAX);
        return 0;
    }
    case PHALANX__ENVELOPE__BODY_HB: {
        const Phalanx__Heartbeat *h = m->hb;
        REQUIRE(px_wire_group_name_ok(h->group), "heartbeat.group missing or invalid");
        REQUIRE(h->has_rank && h->rank < PX_GROUP_SIZE_MAX, "heartbeat.rank missing or out of range");
        REQUIRE(h->has_step && h->step >= 0 && h->step <= PX_STEP_MAX, "heartbeat.step missing or not in [0, %lld]",
                PX_STEP_MAX);
        REQUIRE(!h->has_quorum_id || (h->quorum_id >= 0 && h->quorum_id <= PX_QUORUM_ID_MAX),
                "heartbeat.quorum_id not in [0, %lld]", PX_QUORUM_ID_MAX);
        REQUIRE(!h->has_state || (h->state >= 0 && h->state <= 2), "heartbeat.state out of range");
        if (h->digest) {
            const Phalanx__GroupDigest *d = h->digest;
            REQUIRE(h->rank == 0, "heartbeat.digest: only a group's rank 0 reports for its ranks");
            REQUIRE(d->has_alive && d->alive.len <= PX_GROUP_SIZE_MAX / 8, "heartbeat.digest.alive missing or over %d bytes",
                    PX_GROUP_SIZE_MAX / 8);
            REQUIRE(d->has_min_step && d->has_max_step && d->min_step >= 0 && d->min_step <= d->max_step &&
                        d->max_step <= PX_STEP_MAX,
                    "heartbeat.digest steps missing or not 0 <= min_step <= max_step <= %lld", PX_STEP_MAX);
        }
        return 0;
    }
    case PHALANX__ENVELOPE__BODY_QUORUM_REQ: {
        const Phalanx__QuorumRequest *q = m->quorum_req;
        REQUIRE(px_wire_group_name_ok(q->group), "quorum_request.group missing or invalid");
        REQUIRE(q->has_rank && q->rank < PX_GROUP_SIZE_MAX, "quorum_request.rank missing or out of range");
        REQUIRE(q->has_step && q->step >= 0 && q->step <= PX_STEP_MAX,
                "quorum_request.step missing or not in [0, %lld]", PX_STEP_MAX);
        REQUIRE(!q->has_quorum_id || (q->quorum_id >= 0 && q->quorum_id <= PX_QUORUM_ID_MAX),
                "quorum_request.quorum_id not in [0, %lld]", PX_QUORUM_ID_MAX);
        return 0;
    }
    case PHALANX__ENVELOPE__BODY_FAILURE: {
        const Phalanx__FailureReport *f = m->failure;
        REQUIRE(px_wire_group_name_ok(f->group), "failure_report.group missing or invalid");
        REQUIRE(f->has_rank && f->rank < PX_GROUP_SIZE_MAX, "failure_report.rank missing or out of range");
        REQUIRE(!f->accused_group || f->accused_group[0] == '\0' || px_wire_group_name_ok(f->accused_group),
                "failure_report.accused_group invalid");
        REQUIRE(!f->has_accused_rank || (f->accused_rank >= -1 && f->accused_rank < PX_GROUP_SIZE_MAX),
                "failure_report.accused_rank out of range");
        REQUIRE(!f->reason || strlen(f->reason) <= PX_REASON_MAX, "failure_report.reason too long");
        return 0;
    }
    case PHALANX__ENVELOPE__BODY_STORE_SET: {
        const Phalanx__StoreSet *s = m->store_set;
        REQUIRE(s->has_quorum_id && s->quorum_id >= 0, "store_set.quorum_id missing or negative");
        REQUIRE(s->key && s->key[0] && strlen(s->key) <= PX_STORE_KEY_MAX, "store_set.key missing or longer than %d", PX_STORE_KEY_MAX);
        REQUIRE(s->has_value && s->value.len <= PX_STORE_VALUE_MAX, "store_set.value missing or larger than %d bytes", PX_STORE_VALUE_MAX);
        return 0;
    }
    case PHALANX__ENVELOPE__BODY_STORE_GET: {
        const Phalanx__StoreGet *s = m->store_get;
        REQUIRE(s->has_quorum_id && s->quorum_id >= 0, "store_get.quorum_id missing or negative");
        REQUIRE(s->key && s->key[0] && strlen(s->key) <= PX_STORE_KEY_MAX, "store_get.key missing or longer than %d", PX_STORE_KEY_MAX);
        REQUIRE(!s->has_wait_ms || s->wait_ms <= PX_WAIT_MAX_MS, "store_get.wait_ms above %u", PX_WAIT_MAX_MS);
        return 0;
    }
    case PHALANX__ENVELOPE__BODY_WORKER_EVENT: {
        const Phalanx__WorkerEvent *w = m->worker_event;
        REQUIRE(px_wire_group_name_ok(w->group), "worker_event.group missing or invalid");
        REQUIRE(w->has_rank && w->rank < PX_GROUP_SIZE_MAX, "worker_event.rank missing or out of range");
        REQUIRE(px_wire_worker_event_kind_ok(w->kind), "worker_event.kind missing or unknown");
        REQUIRE(!w->peer_group || !w->peer_group[0] || px_wire_group_name_ok(w->peer_group),
                "worker_event.peer_group invalid");
        REQUIRE(!w->detail || strlen(w->detail) <= PX_REASON_MAX, "worker_event.detail too long");
        REQUIRE(!w->has_step || (w->step >= 0 && w->step <= PX_STEP_MAX), "worker_event.step not in [0, %lld]",
                PX_STEP_MAX);
        return 0;
    }
    case PHALANX__ENVELOPE__BODY_DRAIN_REQ:
        REQUIRE(px_wire_group_name_ok(m->drain_req->group), "drain_request.group missing or invalid");
        return 0;
    case PHALANX__ENVELOPE__BODY_STATUS_REQ:
    case PHALANX__ENVELOPE__BODY_ACK:
        return 0;
    /* Replies: sent by the coordinator; validated when a worker receives them. */
    case PHALANX__ENVELOPE__BODY_REG_ACK:
        REQUIRE(m->reg_ack->has_quorum_id && m->reg_ack->quorum_id >= 0, "register_ack.quorum_id missing");
        REQUIRE(!m->reg_ack->leader_endpoint || px_wire_endpoint_ok(m->reg_ack->leader_endpoint),
                "register_ack.leader_endpoint not tcp://HOST:PORT");
        return 0;
    case PHALANX__ENVELOPE__BODY_HB_ACK:
        REQUIRE(m->hb_ack->has_quorum_id && m->hb_ack->quorum_id >= 0, "heartbeat_ack.quorum_id missing");
        REQUIRE(!m->hb_ack->leader_endpoint || px_wire_endpoint_ok(m->hb_ack->leader_endpoint),
                "heartbeat_ack.leader_endpoint not tcp://HOST:PORT");
        return 0;
    case PHALANX__ENVELOPE__BODY_QUORUM: {
        const Phalanx__Quorum *q = m->quorum;
        REQUIRE(q->has_id && q->id > 0, "quorum.id missing or not positive");
        REQUIRE(q->has_max_step && q->max_step >= 0, "quorum.max_step missing or negative");
        for (size_t i = 0; i < q->n_groups; i++) {
            REQUIRE(px_wire_group_name_ok(q->groups[i]->name), "quorum.groups[%zu].name invalid", i);
            REQUIRE(i == 0 || strcmp(q->groups[i - 1]->name, q->groups[i]->name) < 0,
                    "quorum.groups not sorted by name (at %zu)", i);
            REQUIRE(!q->groups[i]->heal || px_wire_group_name_ok(q->groups[i]->heal_source),
                    "quorum.groups[%zu].heal_source invalid", i);
        }
        REQUIRE(q->n_removed == 0 || q->has_base_id, "quorum.removed without base_id");
        if (q->has_base_id) {
            REQUIRE(q->base_id > 0 && q->base_id < q->id, "quorum.base_id not in [1, id)");
            REQUIRE(q->has_n_groups_total && q->has_groups_hash, "quorum delta without n_groups_total and groups_hash");
            for (size_t i = 0; i < q->n_removed; i++) {
                REQUIRE(px_wire_group_name_ok(q->removed[i]), "quorum.removed[%zu] invalid", i);
                REQUIRE(i == 0 || strcmp(q->removed[i - 1], q->removed[i]) < 0, "quorum.removed not sorted (at %zu)", i);
            }
        }
        for (size_t i = 0; i < q->n_draining; i++) {
            REQUIRE(px_wire_group_name_ok(q->draining[i]), "quorum.draining[%zu] invalid", i);
            REQUIRE(i == 0 || strcmp(q->draining[i - 1], q->draining[i]) < 0, "quorum.draining not sorted (at %zu)", i);
        }
        return 0;
    }
    case PHALANX__ENVELOPE__BODY_STORE_VALUE:
        REQUIRE(m->store_value->has_found, "store_value.found missing");
        return 0;
    case PHALANX__ENVELOPE__BODY_STATUS:
        REQUIRE(m->status->json != NULL, "status.json missing");
        return 0;
    case PHALANX__ENVELOPE__BODY_ERROR:
        REQUIRE(m->error->has_code, "error.code missing");
        return 0;
    case PHALANX__ENVELOPE__BODY__NOT_SET:
    default:
        return fail(code, why, why_len, PHALANX__ERROR_CODE__UNKNOWN_TYPE, "no known message body");
    }
}

px_msg_t *px_wire_decode(const void *buf, size_t len, Phalanx__ErrorCode *code, char *why,
                         size_t why_len) {
    return px_wire_decode_max(buf, len, PX_WIRE_MAX_FRAME, code, why, why_len);
}

px_msg_t *px_wire_decode_max(const void *buf, size_t len, size_t max, Phalanx__ErrorCode *code, char *why,
                             size_t why_len) {
    if (len > max) {
        fail(code, why, why_len, PHALANX__ERROR_CODE__OVERSIZED, "frame of %zu bytes exceeds %zu", len, max);
        return NULL;
    }
    px_msg_t *m = phalanx__envelope__unpack(NULL, len, buf);
    if (!m) {
        fail(code, why, why_len, PHALANX__ERROR_CODE__BAD_MESSAGE, "undecodable frame of %zu bytes", len);
        return NULL;
    }
    if (px_wire_validate(m, code, why, why_len) != 0) {
        phalanx__envelope__free_unpacked(m, NULL);
        return NULL;
    }
    return m;
}

void px_wire_free(px_msg_t *msg) {
    if (msg) phalanx__envelope__free_unpacked(msg, NULL);
}

void *px_wire_encode(px_msg_t *msg, size_t *len) {
    msg->has_version = 1;
    msg->version = PX_PROTO_VERSION;
    size_t n = phalanx__envelope__get_packed_size(msg);
    void *buf = malloc(n ? n : 1);
    if (!buf) return NULL;
    phalanx__envelope__pack(msg, buf);
    *len = n;
    return buf;
}

const char *px_wire_body_name(const px_msg_t *m) {
    switch (m->body_case) {
    case PHALANX__ENVELOPE__BODY_REG: return "register";
    case PHALANX__ENVELOPE__BODY_REG_ACK: return "register_ack";
    case PHALANX__ENVELOPE__BODY_HB: return "heartbeat";
    case PHALANX__ENVELOPE__BODY_HB_ACK: return "heartbeat_ack";
    case PHALANX__ENVELOPE__BODY_QUORUM_REQ: return "quorum_request";
    case PHALANX__ENVELOPE__BODY_QUORUM: return "quorum";
    case PHALANX__ENVELOPE__BODY_FAILURE: return "failure_report";
    case PHALANX__ENVELOPE__BODY_STORE_SET: return "store_set";
    case PHALANX__ENVELOPE__BODY_STORE_GET: return "store_get";
    case PHALANX__ENVELOPE__BODY_STORE_VALUE: return "store_value";
    case PHALANX__ENVELOPE__BODY_STATUS_REQ: return "status_request";
    case PHALANX__ENVELOPE__BODY_STATUS: return "status";
    case PHALANX__ENVELOPE__BODY_ERROR: return "error";
    case PHALANX__ENVELOPE__BODY_ACK: return "ack";
    case PHALANX__ENVELOPE__BODY_WORKER_EVENT: return "worker_event";
    case PHALANX__ENVELOPE__BODY_DRAIN_REQ: return "drain_request";
    default: return "unknown";
    }
}

const char *px_wire_error_name(Phalanx__ErrorCode code) {
    switch (code) {
    case PHALANX__ERROR_CODE__BAD_MESSAGE: return "BAD_MESSAGE";
    case PHALANX__ERROR_CODE__VERSION_MISMATCH: return "VERSION_MISMATCH";
    case PHALANX__ERROR_CODE__UNKNOWN_TYPE: return "UNKNOWN_TYPE";
    case PHALANX__ERROR_CODE__OVERSIZED: return "OVERSIZED";
    case PHALANX__ERROR_CODE__UNKNOWN_MEMBER: return "UNKNOWN_MEMBER";
    case PHALANX__ERROR_CODE__STALE_QUORUM: return "STALE_QUORUM";
    case PHALANX__ERROR_CODE__NOT_FOUND: return "NOT_FOUND";
    case PHALANX__ERROR_CODE__TIMEOUT: return "TIMEOUT";
    case PHALANX__ERROR_CODE__AUTH_REJECTED: return "AUTH_REJECTED";
    case PHALANX__ERROR_CODE__WRONG_JOB: return "WRONG_JOB";
    case PHALANX__ERROR_CODE__WRONG_LAYOUT: return "WRONG_LAYOUT";
    case PHALANX__ERROR_CODE__IDENTITY_CONFLICT: return "IDENTITY_CONFLICT";
    case PHALANX__ERROR_CODE__NOT_AUTHORIZED: return "NOT_AUTHORIZED";
    case PHALANX__ERROR_CODE__RESOURCE_LIMIT: return "RESOURCE_LIMIT";
    default: return "UNKNOWN_ERROR";
    }
}
