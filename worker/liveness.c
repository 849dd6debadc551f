/* Implementation of liveness.h: the leader's ROUTER and a rank's DEALER to it.
 *
 * The leader trusts a heartbeat only as far as the coordinator would: it must
 * decode and validate (px_wire), name this group and a rank in 1..size-1,
 * and carry the job token when there is one. A forged heartbeat can at most
 * keep a dead rank in the digest until its own connection to the coordinator
 * closes and a peer's failure report arrives (the loss rule's two signals);
 * a job that needs more uses CURVE, which --liveness group refuses. */
#include "liveness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "px_keys.h"
#include "px_log.h"

#define LEADER_IDENT_MAX 255
#define BAD_LOG_EVERY_MS 5000
#define LEADER_MAX_FRAME 4096 /* a rank's heartbeat is ~100 bytes: larger frames are a peer's abuse */
#define LEADER_RCVHWM 1024

void px_liveness_digest(const px_rank_seen_t *ranks, int n, int64_t now_ms, int64_t window_ms, uint8_t *bits,
                        size_t *len, int64_t *min_step, int64_t *max_step) {
    *len = 0;
    *min_step = *max_step = 0;
    memset(bits, 0, (size_t)(n + 7) / 8);
    int any = 0;
    for (int r = 1; r < n; r++) {
        const px_rank_seen_t *s = &ranks[r];
        if (s->heard_ms <= 0 || now_ms - s->heard_ms > window_ms) continue;
        bits[r / 8] |= (uint8_t)(1u << (r % 8));
        *len = (size_t)(r / 8 + 1);
        if (!any || s->step < *min_step) *min_step = s->step;
        if (!any || s->step > *max_step) *max_step = s->step;
        any = 1;
    }
}

/* ---- leader ------------------------------------------------------------ */

typedef struct {
    unsigned char ident[LEADER_IDENT_MAX];
    size_t ident_len;
    int64_t sent_qid; /* the latest quorum frame this rank's connection got */
} rank_route_t;

struct px_liveness_leader {
    void *sock;
    char group[PX_GROUP_NAME_MAX + 1], token[260];
    int size;
    px_rank_seen_t *seen;
    rank_route_t *route;
    uint8_t unknown[PX_GROUP_SIZE_MAX / 8];
    uint8_t alive[PX_GROUP_SIZE_MAX / 8];
    void *frame; /* the latest quorum frame from the coordinator */
    size_t frame_len;
    int64_t frame_qid;
    int64_t bad_logged_ms;
};

px_liveness_leader_t *px_liveness_leader_new(void *zctx, const char *host, const char *group, int group_size,
                                             const char *token, char *endpoint, size_t endpoint_len, char *err,
                                             size_t errlen) {
    px_liveness_leader_t *l = calloc(1, sizeof *l);
    if (l) {
        l->seen = calloc((size_t)group_size, sizeof *l->seen);
        l->route = calloc((size_t)group_size, sizeof *l->route);
    }
    if (!l || !l->seen || !l->route) {
        snprintf(err, errlen, "out of memory");
        px_liveness_leader_destroy(&l);
        return NULL;
    }
    snprintf(l->group, sizeof l->group, "%s", group);
    snprintf(l->token, sizeof l->token, "%s", token ? token : "");
    l->size = group_size;
    l->sock = zmq_socket(zctx, ZMQ_ROUTER);
    int zero = 0, hwm = LEADER_RCVHWM;
    int64_t max_frame = LEADER_MAX_FRAME; /* libzmq drops a connection that sends more */
    char bind[300];
    snprintf(bind, sizeof bind, "tcp://%s:*", host);
    size_t n = endpoint_len;
    if (!l->sock || zmq_setsockopt(l->sock, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_setsockopt(l->sock, ZMQ_MAXMSGSIZE, &max_frame, sizeof max_frame) != 0 ||
        zmq_setsockopt(l->sock, ZMQ_RCVHWM, &hwm, sizeof hwm) != 0 || zmq_bind(l->sock, bind) != 0 ||
        zmq_getsockopt(l->sock, ZMQ_LAST_ENDPOINT, endpoint, &n) != 0 || !px_wire_endpoint_ok(endpoint)) {
        snprintf(err, errlen, "--liveness group: cannot bind the leader's socket on %s: %s", bind, zmq_strerror(zmq_errno()));
        px_liveness_leader_destroy(&l);
        return NULL;
    }
    return l;
}

void px_liveness_leader_destroy(px_liveness_leader_t **self) {
    px_liveness_leader_t *l = *self;
    if (!l) return;
    if (l->sock) zmq_close(l->sock);
    free(l->seen);
    free(l->route);
    free(l->frame);
    free(l);
    *self = NULL;
}

void *px_liveness_leader_socket(px_liveness_leader_t *l) { return l->sock; }

static void send_to_rank(px_liveness_leader_t *l, const rank_route_t *r, const void *buf, size_t len) {
    if (zmq_send(l->sock, r->ident, r->ident_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0)
        zmq_send(l->sock, buf, len, ZMQ_DONTWAIT);
}

static void send_msg_to_rank(px_liveness_leader_t *l, const rank_route_t *r, px_msg_t *env) {
    size_t len;
    void *buf = px_wire_encode(env, &len);
    if (buf) send_to_rank(l, r, buf, len);
    free(buf);
}

static void bad_frame(px_liveness_leader_t *l, int64_t now, const char *why) {
    if (now - l->bad_logged_ms < BAD_LOG_EVERY_MS) return;
    l->bad_logged_ms = now;
    px_log_warn("liveness: ignored a frame on the leader's socket of group %s: %s", l->group, why);
}

/* One heartbeat from a rank: remembered, and answered. */
static void on_rank_heartbeat(px_liveness_leader_t *l, const void *ident, size_t ident_len, const px_msg_t *msg,
                              int64_t now, int64_t known_qid, int64_t finished_step) {
    const Phalanx__Heartbeat *h = msg->hb;
    int r = (int)h->rank;
    rank_route_t *route = &l->route[r];
    if (route->ident_len != ident_len || memcmp(route->ident, ident, ident_len) != 0) {
        memcpy(route->ident, ident, ident_len); /* a new connection (a restarted rank): it has no quorum yet */
        route->ident_len = ident_len;
        route->sent_qid = 0;
    }
    l->seen[r].heard_ms = now;
    l->seen[r].step = h->step;
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    if (l->unknown[r / 8] & (1u << (r % 8))) { /* the coordinator does not know it: it registers again */
        l->unknown[r / 8] &= (uint8_t)~(1u << (r % 8));
        l->seen[r].heard_ms = 0; /* not in the digest until it heartbeats again */
        Phalanx__Error e = PHALANX__ERROR__INIT;
        e.has_code = 1;
        e.code = PHALANX__ERROR_CODE__UNKNOWN_MEMBER;
        e.message = "the coordinator does not know this rank (its leader reported it); register again";
        env.body_case = PHALANX__ENVELOPE__BODY_ERROR;
        env.error = &e;
        send_msg_to_rank(l, route, &env);
        return;
    }
    if (l->frame && l->frame_qid > route->sent_qid) {
        send_to_rank(l, route, l->frame, l->frame_len);
        route->sent_qid = l->frame_qid;
    }
    Phalanx__HeartbeatAck ack = PHALANX__HEARTBEAT_ACK__INIT;
    ack.has_quorum_id = 1;
    ack.quorum_id = known_qid;
    ack.has_finished_step = finished_step > 0;
    ack.finished_step = finished_step;
    env.body_case = PHALANX__ENVELOPE__BODY_HB_ACK;
    env.hb_ack = &ack;
    send_msg_to_rank(l, route, &env);
}

void px_liveness_leader_read(px_liveness_leader_t *l, int64_t now_ms, int answer, int64_t known_qid,
                             int64_t finished_step) {
    /* Bounded: a flood must not keep the agent thread from its own
     * heartbeat (the next poll comes back for the rest). */
    for (int k = 0; k < 4 * l->size + 64; k++) {
        zmq_msg_t id, body;
        const char *malformed = "";
        int got = px_zmq_router_recv(l->sock, &id, &body, &malformed);
        if (got < 0) {
            zmq_msg_close(&id);
            zmq_msg_close(&body);
            return;
        }
        Phalanx__ErrorCode code;
        char why[256];
        snprintf(why, sizeof why, "%s", malformed);
        px_msg_t *msg = got ? px_wire_decode(zmq_msg_data(&body), zmq_msg_size(&body), &code, why, sizeof why) : NULL;
        if (!msg) {
            bad_frame(l, now_ms, why);
        } else if (msg->body_case != PHALANX__ENVELOPE__BODY_HB) {
            bad_frame(l, now_ms, "not a heartbeat");
        } else if (strcmp(msg->hb->group, l->group) != 0 || msg->hb->rank == 0 || (int)msg->hb->rank >= l->size) {
            bad_frame(l, now_ms, "a heartbeat for another group, or a rank outside 1..group_size-1");
        } else if (l->token[0] && (!msg->token || strcmp(msg->token, l->token) != 0)) {
            bad_frame(l, now_ms, "missing or wrong job token");
        } else if (zmq_msg_size(&id) > LEADER_IDENT_MAX) {
            bad_frame(l, now_ms, "routing identity too long");
        } else if (answer) {
            on_rank_heartbeat(l, zmq_msg_data(&id), zmq_msg_size(&id), msg, now_ms, known_qid, finished_step);
        } /* else: not registered with the coordinator: silence sends our ranks to it */
        px_wire_free(msg);
        zmq_msg_close(&id);
        zmq_msg_close(&body);
    }
}

static int64_t window_ms(int64_t interval_ms) { return (int64_t)(PX_LIVENESS_WINDOW_INTERVALS * (double)interval_ms); }

void px_liveness_leader_digest(px_liveness_leader_t *l, int64_t now_ms, int64_t interval_ms, Phalanx__GroupDigest *d) {
    size_t len;
    int64_t lo, hi;
    px_liveness_digest(l->seen, l->size, now_ms, window_ms(interval_ms), l->alive, &len, &lo, &hi);
    phalanx__group_digest__init(d);
    d->has_alive = d->has_min_step = d->has_max_step = 1;
    d->alive.data = l->alive;
    d->alive.len = len;
    d->min_step = lo;
    d->max_step = hi;
}

void px_liveness_leader_forward(px_liveness_leader_t *l, const void *frame, size_t len, int64_t qid, int64_t now_ms,
                                int64_t interval_ms) {
    if (qid < l->frame_qid) return;
    void *copy = malloc(len ? len : 1);
    if (!copy) return; /* the ranks ask the coordinator instead (their next ack names the id) */
    memcpy(copy, frame, len);
    free(l->frame);
    l->frame = copy;
    l->frame_len = len;
    l->frame_qid = qid;
    for (int r = 1; r < l->size; r++) {
        rank_route_t *route = &l->route[r];
        if (!route->ident_len || l->seen[r].heard_ms <= 0 || now_ms - l->seen[r].heard_ms > window_ms(interval_ms))
            continue;
        send_to_rank(l, route, l->frame, l->frame_len);
        route->sent_qid = qid;
    }
}

void px_liveness_leader_unknown(px_liveness_leader_t *l, const uint8_t *bits, size_t len) {
    memset(l->unknown, 0, sizeof l->unknown); /* each ack says it anew: a stale mark would re-register a known rank */
    for (size_t i = 0; i < len && i < sizeof l->unknown; i++) l->unknown[i] = bits[i];
}

/* ---- rank > 0 ---------------------------------------------------------- */

struct px_liveness_link {
    void *zctx, *sock;
    unsigned char ident[LEADER_IDENT_MAX];
    size_t ident_len;
    char endpoint[PX_ENDPOINT_MAX + 1];
    int64_t acked_ms;
};

px_liveness_link_t *px_liveness_link_new(void *zctx, const char *ident, size_t ident_len) {
    px_liveness_link_t *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    k->zctx = zctx;
    k->ident_len = ident_len < LEADER_IDENT_MAX ? ident_len : LEADER_IDENT_MAX;
    memcpy(k->ident, ident, k->ident_len);
    return k;
}

void px_liveness_link_destroy(px_liveness_link_t **self) {
    px_liveness_link_t *k = *self;
    if (!k) return;
    if (k->sock) zmq_close(k->sock);
    free(k);
    *self = NULL;
}

void px_liveness_link_set_leader(px_liveness_link_t *k, const char *endpoint, int64_t now_ms) {
    (void)now_ms;
    if (!endpoint || !endpoint[0] || strcmp(endpoint, k->endpoint) == 0) return;
    if (k->sock) zmq_close(k->sock);
    k->acked_ms = 0; /* the coordinator hears us until the new leader answers */
    snprintf(k->endpoint, sizeof k->endpoint, "%s", endpoint);
    k->sock = zmq_socket(k->zctx, ZMQ_DEALER);
    /* Heartbeats are worth nothing late: queue them only on a live
     * connection, a few at most, and drop them on close. */
    int zero = 0, one = 1, hwm = 4, ivl = 100, ivl_max = 500;
    if (!k->sock) {
        k->endpoint[0] = '\0';
        return;
    }
    zmq_setsockopt(k->sock, ZMQ_ROUTING_ID, k->ident, k->ident_len);
    zmq_setsockopt(k->sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(k->sock, ZMQ_IMMEDIATE, &one, sizeof one);
    zmq_setsockopt(k->sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(k->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(k->sock, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max);
    int64_t max_frame = PX_WIRE_MAX_REPLY;
    zmq_setsockopt(k->sock, ZMQ_MAXMSGSIZE, &max_frame, sizeof max_frame);
    if (zmq_connect(k->sock, endpoint) != 0) {
        px_log_warn("liveness: cannot connect to the group leader at %s: %s; heartbeating the coordinator", endpoint,
                    zmq_strerror(zmq_errno()));
        zmq_close(k->sock);
        k->sock = NULL;
        k->endpoint[0] = '\0'; /* the next ack naming it tries again */
        return;
    }
    px_log_info("liveness: heartbeating the group leader at %s", endpoint);
}

void *px_liveness_link_socket(px_liveness_link_t *k) { return k->sock; }

int px_liveness_link_up(const px_liveness_link_t *k, int64_t now_ms, int64_t interval_ms) {
    return k->sock && k->acked_ms > 0 && now_ms - k->acked_ms <= PX_LIVENESS_FALLBACK_INTERVALS * interval_ms;
}

void px_liveness_link_send(px_liveness_link_t *k, const void *buf, size_t len) {
    if (k->sock) zmq_send(k->sock, buf, len, ZMQ_DONTWAIT);
}

px_msg_t *px_liveness_link_recv(px_liveness_link_t *k, int64_t now_ms) {
    if (!k->sock) return NULL;
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, k->sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            return NULL;
        }
        Phalanx__ErrorCode code;
        char why[256];
        px_msg_t *msg = px_wire_decode_max(zmq_msg_data(&m), zmq_msg_size(&m), PX_WIRE_MAX_REPLY, &code, why, sizeof why);
        zmq_msg_close(&m);
        if (!msg) {
            px_log_warn("liveness: bad message from the group leader: %s", why);
            continue;
        }
        k->acked_ms = now_ms;
        return msg;
    }
}
