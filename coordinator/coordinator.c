/* The coordinator's event loop and message handlers (see coordinator.h).
 *
 * Flow: px_coordinator_run polls the ROUTER socket, the socket monitor and
 * the HTTP sockets. A frame from a worker goes to handle_frame, which
 * validates it (proto/px_wire.c) and dispatches on its type. Every 10 ms,
 * tick() applies the loss rule (membership.c), re-forms the quorum when
 * membership changed (quorum.c), expires store waiters and lets the event log
 * deliver. A new quorum is pushed to every live member at once: workers never
 * poll for it, and in steady state no message per training step reaches here.
 *
 * Restart: the coordinator keeps no state on disk. Workers re-register when
 * their heartbeats are answered UNKNOWN_MEMBER and say which quorum they are
 * in; the coordinator adopts that quorum, so training continues undisturbed. */
#include "coordinator.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "auth.h"
#include "events.h"
#include "history.h"
#include "http.h"
#include "membership.h"
#include "mode_policy.h"
#include "px_buf.h"
#include "px_keys.h"
#include "px_log.h"
#include "px_time.h"
#include "px_version.h"
#include "px_hbudp.h"
#include "px_wire.h"
#include "quorum.h"
#include "px_rate.h"
#include "status.h"
#include "store.h"
#include "udp.h"

#define TICK_MS 10
#define QUORUM_EVENT_LIST_MAX 24000 /* bytes of group names (and of heal plans) in a quorum_formed event */
#define ACK_KEEPALIVE_MS 1000 /* a worker with nothing to learn gets a heartbeat ack this often */
#define ROUTER_MAX_MSG (1 << 20) /* larger frames make ZeroMQ drop the peer */
#define UDP_BATCH 1024 /* datagrams read per loop turn: a flood cannot starve the ROUTER or the tick */
#define UDP_DRAIN_MAX 65536 /* before the loss check, datagrams waiting are read (a member is not silent while its
                               heartbeat sits in our own buffer) */

/* A spare that took a place, until its first committed step. */
typedef struct {
    char group[PX_QUORUM_NAME_MAX], replaced[PX_QUORUM_NAME_MAX];
    int64_t from_ms, step, quorum_id; /* the loss it answers (monotonic), the quorum's step and id */
} promotion_t;

struct px_coordinator {
    px_coordinator_config_t cfg;
    void *zctx, *router, *monitor;
    px_udp_t *udp;             /* sealed heartbeats (udp.h); NULL: not offered */
    px_http_t *http;
    px_auth_tokens_t tokens;   /* with cfg.token_file: the tokens admitted now */
    struct stat token_st;      /* the file as last read: a change means re-read */
    int64_t token_checked_ms;
    px_events_t *events;
    px_auth_t *auth;           /* ZAP handler when CURVE is on (auth.h) */
    px_members_t members;
    px_quorum_t quorum;        /* current quorum (id 0: none yet) */
    px_store_kv_t *kv;
    px_liveness_config_t live;
    int quorum_dirty;          /* membership or requests changed since the last compute */
    int64_t rebuild_requested_ms; /* a participant holding the current id asked for a new one */
    int64_t anon_report_ms;    /* last failure report of the current quorum that named no peer */
    int64_t anon_report_qid;   /* ... and the quorum it was about */
    int64_t started_ms;
    int adopted;               /* quorum adopted from re-registering workers (recovery window only) */
    int64_t finished_step;     /* the job's last step, once a quorum member committed it */
    int64_t first_store_ms;    /* first rendezvous store use under the current quorum (0: none yet) */
    char mode_now[32];         /* the mode the groups train in, for /status (status_view) */
    /* Mode switching (--mode auto, mode_policy.h). The loss ring and the
     * measured figures are kept under every mode, for /status. */
    int auto_mode;             /* cfg.mode is "auto": the policy switches mode */
    px_job_mode_t mode;        /* the mode quorums announce */
    px_mode_policy_t policy;
    px_loss_ring_t losses;     /* when groups were lost (not planned leaves) */
    int loss_noted;            /* a loss since the last evaluation: evaluate now */
    int64_t mode_eval_ms, last_switch_ms;
    int mode_pending;          /* the policy switched: the next quorum carries it */
    /* Connections accepted per descriptor number (the monitor's ACCEPTED):
     * a frame on a member's closed fd is its old connection's (read late)
     * while the count has not moved, a new connection on a reused number
     * once it has. */
    uint32_t *fd_gen;
    int32_t *fd_member;        /* per descriptor: the slot + 1 of the member last heard on it (checked at use) */
    int layout_slot;           /* slot + 1 of a live member with a layout: the job's (refuse_wrong_layout) */
    int fd_gen_cap;
    char drain_lost[PX_QUORUM_NAME_MAX]; /* a group the quorum in force drained died before it left ("": none) */
    int recovered_diloco;      /* groups that said they train in DiLoCo during the recovery window */
    char mode_why[400];        /* ... and why (the measured figures) */
    char mode_reason[448];     /* the last switch's quorum reason, for /status */
    uint64_t mode_switches;
    double failures_per_hour;  /* at the last evaluation */
    int has_comm_share;
    double comm_share;
    int rendezvous_checked;    /* detect_stalled has judged the current quorum */
    float step_ring[64];       /* the job's recent step times, seconds (rank 0s' TrainStats): the stall limit */
    int step_ring_n, step_ring_at;
    char wait_reason[256];
    px_coord_stats_t stats;
    int64_t hb_window_start_ms;
    px_rate_t rl_bad, rl_auth, rl_conflict, rl_refused; /* event rate limits, see px_rate.h */
    px_rate_t log_bad, log_conflict, log_udp_dropped, log_udp_off; /* log line rate limits (px_rate_log_ok) */
    uint64_t hb_window_count;
    px_rate_t limit_rate[PX_LIMIT_KINDS]; /* limit_reached event rate limits */
    char limit_fields[PX_LIMIT_KINDS][96]; /* "limit":NAME,"max":N of each */
    /* Training telemetry (rank 0 heartbeats' TrainStats): the dashboard's
     * history and /metrics' training figures. */
    px_history_t *history;
    char run_id[17];           /* this run's id: a page seeing another knows we restarted */
    px_train_metrics_t train;
    int64_t job_step;          /* highest step a quorum member heartbeated (-1: none yet) */
    px_progress_t progress;    /* the job's step, pace, smoothed tokens/s, newest checkpoint */
    int64_t expired_ms;        /* last px_members_expire */
    int64_t next_recompute_ms; /* a quorum compute waits until then (tick) */
    int64_t last_eval_step;    /* the newest eval loss put in a point (-1: none) */
    int64_t recovery_from_ms;  /* the first group drop not yet followed by a committed step (0: none) */
    /* Spares promoted and not yet heard committing a step of their own: their
     * spare_promoted event waits for it (the time from the loss). */
    promotion_t promos[16];
    int n_promos;
};

static const double STEP_BOUNDS[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double RECOVERY_BOUNDS[] = {0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300};
static const double HEAL_BOUNDS[] = {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
#define NBOUNDS(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void answer_waiter(void *ctx, const px_kv_answer_t *a);

static uint32_t fd_gen(const px_coordinator_t *c, int fd) { return fd >= 0 && fd < c->fd_gen_cap ? c->fd_gen[fd] : 0; }

/* Member m speaks on connection fd: remembered both ways, so that a
 * DISCONNECTED event finds its member without a scan of every member. */
static void set_member_fd(px_coordinator_t *c, px_member_t *m, int fd) {
    m->fd = fd;
    if (fd >= 0 && fd < c->fd_gen_cap) c->fd_member[fd] = px_members_slot(&c->members, m);
}

static void send_frame(px_coordinator_t *c, const void *ident, size_t ident_len, const void *buf, size_t len);

/* ---- sending ---------------------------------------------------------- */

static void send_to(px_coordinator_t *c, const void *ident, size_t ident_len, px_msg_t *msg) {
    size_t len = 0;
    void *buf = px_wire_encode(msg, &len);
    if (!buf) return;
    send_frame(c, ident, ident_len, buf, len);
    free(buf);
}

static void reply_error(px_coordinator_t *c, const void *ident, size_t ident_len, uint64_t req_id,
                        Phalanx__ErrorCode code, const char *why) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__Error err = PHALANX__ERROR__INIT;
    err.has_code = 1;
    err.code = code;
    err.message = (char *)why;
    env.has_request_id = 1;
    env.request_id = req_id;
    env.body_case = PHALANX__ENVELOPE__BODY_ERROR;
    env.error = &err;
    send_to(c, ident, ident_len, &env);
}

static void reply_ack(px_coordinator_t *c, const void *ident, size_t ident_len, uint64_t req_id) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__Ack ack = PHALANX__ACK__INIT;
    env.has_request_id = 1;
    env.request_id = req_id;
    env.body_case = PHALANX__ENVELOPE__BODY_ACK;
    env.ack = &ack;
    send_to(c, ident, ident_len, &env);
}

/* ---- events ----------------------------------------------------------- */

static void emit(px_coordinator_t *c, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void emit(px_coordinator_t *c, const char *type, const char *fmt, ...) {
    if (!c->events) return;
    px_buf_t b; /* no fixed size: a quorum of thousands of groups is one event */
    px_buf_init(&b);
    va_list ap;
    va_start(ap, fmt);
    px_buf_vprintf(&b, fmt, ap);
    va_end(ap);
    char *fields = px_buf_take(&b, NULL);
    px_events_emit(c->events, type, fields ? fields : "");
    free(fields);
}

/* Events that any peer can cause (bad frames, rejected credentials, identity
 * conflicts, refused reports) go through a rate limit: one event per frame,
 * "count":1, up to PX_PEER_EVENTS_PER_S a second; past that one summary event
 * per second ("error":"FLOOD", "count":N), so a flood cannot fill the event
 * log's disk and the counts still add up. */
#define PX_PEER_EVENTS_PER_S 200
/* A summary carries the limiter's own fields first (limit_reached: which
 * limit, and its maximum), then "error":"FLOOD", a detail and the count. */
static void flush_rate_summary(px_coordinator_t *c, px_rate_t *r, const char *fields, int64_t now, int force) {
    uint64_t n = px_rate_take(r, now, force);
    if (n)
        emit(c, r->name, "%s%s\"error\":\"FLOOD\",\"detail\":\"more than %d in a second; summarised\",\"count\":%llu",
             fields ? fields : "", fields ? "," : "", r->per_s, (unsigned long long)n);
}

static void flush_rate_summaries(px_coordinator_t *c, int64_t now, int force) {
    px_rate_t *all[] = {&c->rl_bad, &c->rl_auth, &c->rl_conflict, &c->rl_refused};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) flush_rate_summary(c, all[i], NULL, now, force);
    for (int i = 0; i < PX_LIMIT_KINDS; i++) flush_rate_summary(c, &c->limit_rate[i], c->limit_fields[i], now, force);
}

/* 1 when the event was emitted on its own, 0 when counted for a summary. */
static int emit_limited_with(px_coordinator_t *c, px_rate_t *r, const char *summary_fields, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int emit_limited_with(px_coordinator_t *c, px_rate_t *r, const char *summary_fields, const char *fmt, ...) {
    int64_t now = px_now_ms();
    flush_rate_summary(c, r, summary_fields, now, 0);
    if (!px_rate_hit(r, now)) return 0;
    if (!c->events) return 1;
    px_buf_t b;
    px_buf_init(&b);
    va_list ap;
    va_start(ap, fmt);
    px_buf_vprintf(&b, fmt, ap);
    va_end(ap);
    px_buf_printf(&b, ",\"count\":1");
    char *fields = px_buf_take(&b, NULL);
    px_events_emit(c->events, r->name, fields ? fields : "");
    free(fields);
    return 1;
}
#define emit_limited(c, r, ...) emit_limited_with(c, r, NULL, __VA_ARGS__)

/* An event the dashboard marks (history.h); detail is a line for people. */
static void history_event(px_coordinator_t *c, const char *type, const char *group, int64_t step, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void history_event(px_coordinator_t *c, const char *type, const char *group, int64_t step, const char *fmt, ...) {
    char detail[PX_HISTORY_DETAIL_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    px_history_add_event(c->history, px_wall_ms(), step, type, group, detail);
}

/* ---- limits ----------------------------------------------------------- */

#define LIMIT_EVENTS_PER_S 10 /* per limit; past that, one summary a second */

static int64_t limit_max(const px_coordinator_t *c, int kind) {
    switch (kind) {
    case PX_LIMIT_MEMBERS: return c->cfg.max_members;
    case PX_LIMIT_STORE_KEYS: return c->cfg.max_store_keys;
    case PX_LIMIT_STORE_BYTES: return c->cfg.max_store_bytes;
    default: return c->cfg.max_store_waiters;
    }
}

/* Fills in defaults for unset limits and hands them to the member table and
 * the store (which holds two quorums' namespaces, hence the totals). */
static void apply_limits(px_coordinator_t *c) {
    px_coordinator_config_t *k = &c->cfg;
    if (k->max_members <= 0) k->max_members = PX_DEFAULT_MAX_MEMBERS;
    if (k->max_store_keys <= 0) k->max_store_keys = PX_DEFAULT_MAX_STORE_KEYS;
    if (k->max_store_bytes <= 0) k->max_store_bytes = PX_DEFAULT_MAX_STORE_BYTES;
    if (k->max_store_waiters <= 0) k->max_store_waiters = PX_DEFAULT_MAX_STORE_WAITERS;
    c->members.max_members = k->max_members;
    px_kv_limits_t lim = {(size_t)k->max_store_keys, (size_t)k->max_store_bytes, (size_t)k->max_store_waiters,
                          2 * (size_t)k->max_store_keys, 2 * (size_t)k->max_store_bytes, 2 * (size_t)k->max_store_waiters};
    px_kv_set_limits(c->kv, &lim);
    for (int i = 0; i < PX_LIMIT_KINDS; i++) {
        c->limit_rate[i] = (px_rate_t){.name = "limit_reached", .per_s = LIMIT_EVENTS_PER_S};
        snprintf(c->limit_fields[i], sizeof c->limit_fields[i], "\"limit\":\"%s\",\"max\":%lld", PX_LIMIT_NAMES[i],
                 (long long)limit_max(c, i));
    }
}

/* Refuses a request past a limit: RESOURCE_LIMIT reply, counter, and a
 * limit_reached event (rate-limited: peers choose how often this happens). */
static void limit_refused(px_coordinator_t *c, const void *ident, size_t ident_len, uint64_t req_id, int kind,
                          const char *group, int rank) {
    static const char *const FLAG[PX_LIMIT_KINDS] = {"--max-members", "--max-store-keys", "--max-store-bytes",
                                                     "--max-store-waiters"};
    c->stats.limit_refusals[kind]++;
    char why[160];
    snprintf(why, sizeof why, "%s limit reached (%s %lld%s)", PX_LIMIT_NAMES[kind], FLAG[kind],
             (long long)limit_max(c, kind), kind == PX_LIMIT_MEMBERS ? ", all live" : " per quorum");
    if (emit_limited_with(c, &c->limit_rate[kind], c->limit_fields[kind], "%s,\"group\":\"%s\",\"rank\":%d,\"quorum_id\":%lld",
                          c->limit_fields[kind], group, rank, (long long)c->quorum.id))
        px_log_warn("limit_reached limit=%s max=%lld group=%s rank=%d total=%llu", PX_LIMIT_NAMES[kind],
                    (long long)limit_max(c, kind), group, rank, (unsigned long long)c->stats.limit_refusals[kind]);
    reply_error(c, ident, ident_len, req_id, PHALANX__ERROR_CODE__RESOURCE_LIMIT, why);
}

/* ---- quorum ----------------------------------------------------------- */

/* Encodes the current quorum, once per change (with thousands of groups a
 * frame is large: encoding it per member would dominate a quorum change):
 * whole (idx NULL), or as a delta against base (docs/protocol.md "Quorum
 * deltas"): the groups at idx[0..n_idx) of the current quorum, and the
 * names of base at removed[0..n_removed). */
static void *encode_quorum_part(px_coordinator_t *c, const char *reason, const int *idx, int n_idx,
                                const px_quorum_t *base, const int *removed, int n_removed, size_t *len) {
    int n = idx ? n_idx : c->quorum.n;
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__Quorum q = PHALANX__QUORUM__INIT;
    Phalanx__QuorumGroup *gs = calloc((size_t)n + 1, sizeof *gs);
    Phalanx__QuorumGroup **gp = calloc((size_t)n + 1, sizeof *gp);
    char **rm = calloc((size_t)n_removed + 1, sizeof *rm);
    char **dr = calloc((size_t)c->quorum.n_draining + 1, sizeof *dr);
    void *buf = NULL;
    if (gs && gp && rm && dr) {
        for (int k = 0; k < n; k++) {
            px_quorum_member_t *m = &c->quorum.groups[idx ? idx[k] : k];
            phalanx__quorum_group__init(&gs[k]);
            /* ~9 bytes a group: the name, and for a healing group its step
             * and source. replica_index is the position and a step of a
             * group that does not heal is used by nobody: neither is sent
             * (a 12,500-group quorum is ~40% smaller for it). */
            gs[k].name = m->name;
            gs[k].has_step = gs[k].has_heal = m->heal != 0;
            gs[k].step = m->step;
            gs[k].heal = m->heal;
            gs[k].heal_source = m->heal ? m->heal_source : NULL;
            gp[k] = &gs[k];
        }
        q.has_id = 1;
        q.id = c->quorum.id;
        q.has_max_step = 1;
        q.max_step = c->quorum.max_step;
        q.n_groups = (size_t)n;
        q.groups = gp;
        q.reason = (char *)reason;
        q.mode = (char *)px_job_mode_name(c->mode);
        q.has_finished_step = c->finished_step > 0;
        q.finished_step = c->finished_step;
        for (int k = 0; k < c->quorum.n_draining; k++) dr[k] = c->quorum.draining[k];
        q.n_draining = (size_t)c->quorum.n_draining;
        q.draining = dr;
        if (idx) {
            for (int k = 0; k < n_removed; k++) rm[k] = base->groups[removed[k]].name;
            q.has_base_id = q.has_n_groups_total = q.has_groups_hash = 1;
            q.base_id = base->id;
            q.n_removed = (size_t)n_removed;
            q.removed = rm;
            q.n_groups_total = (uint32_t)c->quorum.n;
            q.groups_hash = px_quorum_hash(&c->quorum);
        }
        env.body_case = PHALANX__ENVELOPE__BODY_QUORUM;
        env.quorum = &q;
        buf = px_wire_encode(&env, len);
    }
    free(gs);
    free(gp);
    free(rm);
    free(dr);
    return buf;
}

static void *encode_quorum(px_coordinator_t *c, const char *reason, size_t *len) {
    return encode_quorum_part(c, reason, NULL, 0, NULL, NULL, 0, len);
}

/* The current quorum as a delta against base, or NULL when a delta would
 * not list fewer groups than the whole (or memory ran out). */
static void *encode_quorum_delta(px_coordinator_t *c, const px_quorum_t *base, const char *reason, size_t *len) {
    int *rm = NULL, *ch = NULL, nrm = 0, nch = 0;
    if (!base || base->id <= 0 || base->id >= c->quorum.id ||
        px_quorum_delta(base, &c->quorum, &rm, &nrm, &ch, &nch) != 0)
        return NULL;
    void *buf = nrm + nch < c->quorum.n ? encode_quorum_part(c, reason, ch, nch, base, rm, nrm, len) : NULL;
    free(rm);
    free(ch);
    return buf;
}

/* ROUTER_MANDATORY + DONTWAIT: a peer that is gone or not reading costs us an
 * error code, never a blocked loop. */
static void send_frame(px_coordinator_t *c, const void *ident, size_t ident_len, const void *buf, size_t len) {
    if (zmq_send(c->router, ident, ident_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0)
        zmq_send(c->router, buf, len, ZMQ_DONTWAIT);
}

static void push_quorum(px_coordinator_t *c, const void *ident, size_t ident_len, const char *reason) {
    size_t len;
    void *buf = encode_quorum(c, reason, &len);
    if (buf) send_frame(c, ident, ident_len, buf, len);
    free(buf);
}

static void free_frame(void *data, void *hint) {
    (void)hint;
    free(data);
}

/* A frame for many members: each send is a reference to it (zmq_msg_copy
 * shares the buffer), so a 160 KB quorum of 10,000 groups is not copied
 * once per member in this thread. NULL buf: nothing (the call is a no-op). */
static int shared_frame(zmq_msg_t *frame, void *buf, size_t len) {
    if (!buf) return 0;
    if (zmq_msg_init_data(frame, buf, len, free_frame, NULL) == 0) return 1;
    free(buf);
    return 0;
}

static void send_shared(px_coordinator_t *c, const px_member_t *m, zmq_msg_t *frame) {
    zmq_msg_t copy;
    zmq_msg_init(&copy);
    if (zmq_msg_copy(&copy, frame) == 0 && zmq_send(c->router, m->ident, m->ident_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0 &&
        zmq_msg_send(&copy, c->router, ZMQ_DONTWAIT) >= 0)
        return; /* sent: the message now belongs to the socket */
    zmq_msg_close(&copy);
}

/* Pushes the newly installed quorum to every live member: a member that
 * holds base (the quorum before, per its heartbeats) gets the delta against
 * it, everyone else the whole quorum. A worker that cannot apply a delta
 * asks for the whole one (its next heartbeat's ack names the new id). */
static void push_quorum_to_all(px_coordinator_t *c, const char *reason, const px_quorum_t *base) {
    size_t full_len = 0, delta_len = 0;
    zmq_msg_t full, delta;
    void *delta_buf = encode_quorum_delta(c, base, reason, &delta_len); /* before delta_len is read */
    int have_full = 0, have_delta = shared_frame(&delta, delta_buf, delta_len);
    for (int i = 0; i < c->members.n; i++) {
        px_member_t *m = &c->members.members[i];
        /* A rank its leader reports for gets the quorum from its leader
         * (--liveness group): the push costs groups, not ranks. */
        if (m->state == PX_STATE_LOST || m->via_leader) continue;
        if (have_delta && m->quorum_id == base->id) {
            send_shared(c, m, &delta);
            c->stats.delta_pushes++;
            continue;
        }
        if (!have_full) {
            void *full_buf = encode_quorum(c, reason, &full_len);
            have_full = shared_frame(&full, full_buf, full_len);
        }
        if (have_full) send_shared(c, m, &full);
    }
    if (have_full) zmq_msg_close(&full);
    if (have_delta) zmq_msg_close(&delta);
}

static void emit_quorum_formed(px_coordinator_t *c, const char *reason) {
    /* An event is at most 64 KiB: past ~2,500 groups the lists are cut
     * (groups_total and heal_total say how many there are). */
    px_buf_t groups, heals;
    px_buf_init(&groups);
    px_buf_init(&heals);
    int listed = 0, heal_total = 0, heal_listed = 0;
    for (int i = 0; i < c->quorum.n; i++) {
        px_quorum_member_t *m = &c->quorum.groups[i];
        if (groups.len < QUORUM_EVENT_LIST_MAX) {
            px_buf_printf(&groups, "%s\"%s\"", i ? "," : "", m->name);
            listed++;
        }
        if (!m->heal) continue;
        heal_total++;
        if (heals.len >= QUORUM_EVENT_LIST_MAX) continue;
        px_buf_printf(&heals, "%s{\"group\":\"%s\",\"step\":%lld,\"source\":\"%s\"}", heals.len ? "," : "",
                      m->name, (long long)m->step, m->heal_source);
        heal_listed++;
    }
    char esc[2048];
    px_json_escape(reason, esc, sizeof esc);
    char *g = px_buf_take(&groups, NULL), *h = px_buf_take(&heals, NULL);
    emit(c, "quorum_formed",
         "\"quorum_id\":%lld,\"step\":%lld,\"groups\":[%s],\"heal\":[%s],\"groups_total\":%d,\"heal_total\":%d%s,"
         "\"reason\":\"%s\"",
         (long long)c->quorum.id, (long long)c->quorum.max_step, g ? g : "", h ? h : "", c->quorum.n, heal_total,
         listed < c->quorum.n || heal_listed < heal_total ? ",\"truncated\":true" : "", esc);
    free(g);
    free(h);
    px_log_info("quorum_formed quorum_id=%lld step=%lld groups=%d reason=\"%s\"", (long long)c->quorum.id,
                (long long)c->quorum.max_step, c->quorum.n, reason);
    history_event(c, "quorum_formed", NULL, c->quorum.max_step, "quorum %lld: %d group%s (%s)", (long long)c->quorum.id,
                  c->quorum.n, c->quorum.n == 1 ? "" : "s", reason);
    for (int i = 0; i < c->quorum.n; i++) {
        px_quorum_member_t *m = &c->quorum.groups[i];
        if (m->divergent) {
            emit(c, "divergence_detected", "\"quorum_id\":%lld,\"step\":%lld,\"group\":\"%s\",\"source\":\"%s\"",
                 (long long)c->quorum.id, (long long)m->step, m->name, m->heal_source);
            px_log_warn("divergence_detected group=%s step=%lld heal_source=%s", m->name, (long long)m->step,
                        m->heal_source);
        }
    }
}

/* Makes `next` the quorum in force (taking its groups array) and pushes it
 * to every live member. */
/* Under --target-groups, a group's rank 0 out of a quorum that holds the
 * target is a spare: spare_registered once, until it trains. */
static void note_spare(px_coordinator_t *c, px_member_t *m) {
    if (c->cfg.target_groups <= 0 || m->rank != 0 || m->state == PX_STATE_LOST) return;
    if (px_quorum_find(&c->quorum, m->group) >= 0) {
        m->spare_noted = 0;
        return;
    }
    if (m->spare_noted || c->quorum.n < c->cfg.target_groups) return;
    m->spare_noted = 1;
    emit(c, "spare_registered", "\"group\":\"%s\",\"quorum_id\":%lld,\"target_groups\":%d", m->group,
         (long long)c->quorum.id, c->cfg.target_groups);
    px_log_info("spare_registered group=%s: the quorum holds --target-groups %d; it waits as a spare", m->group,
                c->cfg.target_groups);
}

/* Under --target-groups, the groups new to quorum q that took the places of
 * groups gone from `before` were spares: one spare_promoted each, naming the
 * group it replaced (paired in name order; "" when a place was free). */
static void note_promotions(px_coordinator_t *c, const px_quorum_t *before, const px_quorum_t *q) {
    if (c->cfg.target_groups <= 0 || before->id == 0) return;
    int gone = 0;
    for (int i = 0; i < q->n; i++) {
        if (px_quorum_find(before, q->groups[i].name) >= 0) continue;
        const char *replaced = "";
        for (; gone < before->n; gone++)
            if (px_quorum_find(q, before->groups[gone].name) < 0) {
                replaced = before->groups[gone++].name;
                break;
            }
        px_log_info("spare_taken group=%s replaced=%s quorum_id=%lld step=%lld", q->groups[i].name,
                    replaced[0] ? replaced : "-", (long long)q->id, (long long)q->max_step);
        if (c->n_promos == (int)(sizeof c->promos / sizeof c->promos[0])) /* full: the oldest goes untimed */
            memmove(&c->promos[0], &c->promos[1], (size_t)--c->n_promos * sizeof c->promos[0]);
        promotion_t *p = &c->promos[c->n_promos++];
        snprintf(p->group, sizeof p->group, "%s", q->groups[i].name);
        snprintf(p->replaced, sizeof p->replaced, "%s", replaced);
        /* from the loss that freed the place (a drain or a free place: from now) */
        const px_member_t *lost = replaced[0] ? px_members_by_name(&c->members, replaced, 0) : NULL;
        p->from_ms = lost && lost->state == PX_STATE_LOST && lost->lost_ms > 0 ? lost->lost_ms : px_now_ms();
        p->step = q->max_step;
        p->quorum_id = q->id;
        if (replaced[0])
            history_event(c, "spare_promoted", q->groups[i].name, q->max_step, "spare %s takes %s's place",
                          q->groups[i].name, replaced);
        else
            history_event(c, "spare_promoted", q->groups[i].name, q->max_step, "spare %s takes a free place",
                          q->groups[i].name);
    }
}

static void install_quorum(px_coordinator_t *c, px_quorum_t *next, const char *reason, int64_t now) {
    c->rebuild_requested_ms = 0;
    c->first_store_ms = 0;
    c->rendezvous_checked = 0;
    px_quorum_t before = c->quorum; /* what members hold: the base of the delta pushed */
    c->quorum = *next;
    px_quorum_init(next);
    c->stats.quorums_formed++;
    c->stats.last_quorum_ms = now;
    px_members_clear_requests(&c->members, &c->quorum);
    emit_quorum_formed(c, reason);
    note_promotions(c, &before, &c->quorum);
    for (int i = 0; c->cfg.target_groups > 0 && i < c->members.n; i++) note_spare(c, &c->members.members[i]);
    for (int i = 0; i < c->quorum.n_draining; i++) {
        const char *g = c->quorum.draining[i];
        emit(c, "group_drained", "\"group\":\"%s\",\"quorum_id\":%lld,\"step\":%lld", g, (long long)c->quorum.id,
             (long long)c->quorum.max_step);
        px_log_info("group_drained group=%s quorum_id=%lld: a planned leave, adopted at a step boundary", g,
                    (long long)c->quorum.id);
        history_event(c, "group_drained", g, c->quorum.max_step, "%s drained: quorum %lld goes on without it", g,
                      (long long)c->quorum.id);
    }
    for (int i = 0; i < c->members.n; i++) /* the flag first: a lookup per member costs ms at 100,000 */
        if (c->members.members[i].group_dropped_logged && px_quorum_find(&c->quorum, c->members.members[i].group) >= 0)
            c->members.members[i].group_dropped_logged = 0;
    px_kv_drop_before(c->kv, c->quorum.id - 1, answer_waiter, c);
    push_quorum_to_all(c, reason, &before);
    px_quorum_free(&before);
}

/* The policy decided to switch (evaluate_mode): quorum `next`, about to be
 * installed, announces the other mode. Its reason says so: the whole reason
 * when only the mode changes (reason ""), appended to a membership change. */
static void switch_mode(px_coordinator_t *c, const px_quorum_t *next, char *reason, size_t reason_len, int64_t now) {
    px_job_mode_t from = c->mode;
    c->mode = from == PX_JOB_SYNC ? PX_JOB_DILOCO : PX_JOB_SYNC;
    c->mode_pending = 0;
    c->last_switch_ms = now;
    c->mode_switches++;
    size_t used = strlen(reason);
    snprintf(reason + used, reason_len - used, "%smode switched to %s: %s", used ? "; " : "", px_job_mode_name(c->mode),
             c->mode_why);
    snprintf(c->mode_reason, sizeof c->mode_reason, "%s", c->mode_why);
    char esc[900], share[32] = "null";
    px_json_escape(c->mode_why, esc, sizeof esc);
    if (c->has_comm_share) snprintf(share, sizeof share, "%.3f", c->comm_share);
    emit(c, "mode_switched", "\"from\":\"%s\",\"to\":\"%s\",\"reason\":\"%s\",\"failures_per_hour\":%.2f,\"comm_share\":%s,\"quorum_id\":%lld,\"step\":%lld",
         px_job_mode_name(from), px_job_mode_name(c->mode), esc, c->failures_per_hour, share, (long long)next->id,
         (long long)next->max_step);
    px_log_info("mode_switched from=%s to=%s quorum_id=%lld step=%lld failures_per_hour=%.2f comm_share=%s reason=\"%s\"",
                px_job_mode_name(from), px_job_mode_name(c->mode), (long long)next->id, (long long)next->max_step,
                c->failures_per_hour, share, c->mode_why);
    history_event(c, "mode_switched", NULL, next->max_step, "%s to %s: %s", px_job_mode_name(from),
                  px_job_mode_name(c->mode), c->mode_why);
}

/* --mode auto, a restarted coordinator: the running job's groups said in
 * their heartbeats whether they train in DiLoCo. If one did, the job was
 * switched by the coordinator before the restart: its first quorum goes on
 * announcing DiLoCo (a mode_adopted event, not a switch; the hold runs from
 * now), rather than sending the job back to sync with an empty loss window. */
static void recover_mode(px_coordinator_t *c, int64_t now) {
    if (!c->auto_mode || !c->recovered_diloco || c->mode == PX_JOB_DILOCO) return;
    c->mode = PX_JOB_DILOCO;
    c->last_switch_ms = now;
    snprintf(c->mode_reason, sizeof c->mode_reason, "adopted after a coordinator restart: %d group%s trained in DiLoCo",
             c->recovered_diloco, c->recovered_diloco == 1 ? "" : "s");
    emit(c, "mode_adopted", "\"mode\":\"diloco\",\"groups\":%d", c->recovered_diloco);
    px_log_info("mode_adopted mode=diloco groups=%d: the running job trains in DiLoCo", c->recovered_diloco);
    history_event(c, "mode_switched", NULL, c->quorum.max_step, "diloco adopted after a coordinator restart");
    c->recovered_diloco = 0;
}

/* Drained groups that the quorum `next` leaves out of the one in force:
 * listed in next (Quorum.draining) so that the others adopt it at a step
 * boundary instead of aborting the step in flight, and named in its reason.
 * 0, or -1 when out of memory. */
static int note_drained(px_coordinator_t *c, const px_quorum_candidate_t *cands, int n, px_quorum_t *next,
                        char *reason, size_t reason_len) {
    const char **names = calloc((size_t)n + 1, sizeof *names);
    if (!names) return -1;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (cands[i].draining && px_quorum_find(&c->quorum, cands[i].name) >= 0 &&
            px_quorum_find(next, cands[i].name) < 0)
            names[k++] = cands[i].name;
    int rc = px_quorum_set_draining(next, names, k);
    for (int i = 0; i < k; i++) {
        size_t used = strlen(reason);
        snprintf(reason + used, reason_len - used, "%s%s", i ? ", " : "; drained: ", next->draining[i]);
    }
    free(names);
    return rc;
}

/* Re-forms the quorum when membership or requests changed. */
static void recompute_quorum(px_coordinator_t *c, int64_t now) {
    /* Recovery window: for one heartbeat timeout after start, workers of a
     * running job re-register and their quorum is adopted; forming a quorum
     * before they are all back would needlessly drop groups. */
    if (now - c->started_ms < c->live.heartbeat_timeout_ms) return;
    c->adopted = 0; /* the recovery window is over: from now on quorums are formed here */
    recover_mode(c, now);
    px_quorum_candidate_t *cands = NULL;
    int n = px_members_candidates(&c->members, now, &c->live, &cands);
    if (n < 0) return;
    if (c->finished_step > 0) /* the job is done: nobody joins (a spare is not promoted for groups that finish) */
        for (int i = 0; i < n; i++)
            if (px_quorum_find(&c->quorum, cands[i].name) < 0) cands[i].requested = 0;
    px_quorum_config_t qcfg = {c->cfg.min_replicas, c->cfg.join_timeout_ms, c->cfg.target_groups};
    px_quorum_t next;
    px_quorum_init(&next);
    char reason[1024]; /* the rule's line, and a mode switch's (switch_mode) */
    int formed = px_quorum_compute(cands, n, &c->quorum, &qcfg, now, &next, reason, sizeof reason);
    if (formed == 1 && note_drained(c, cands, n, &next, reason, sizeof reason) != 0) formed = -1;
    free(cands);
    if (formed != 1) {
        if (strcmp(reason, c->wait_reason) != 0) {
            px_log_info("quorum_wait %s", reason);
            snprintf(c->wait_reason, sizeof c->wait_reason, "%s", reason);
        }
        px_quorum_free(&next);
        return;
    }
    c->wait_reason[0] = '\0';
    int changed = next.id != c->quorum.id;
    /* Participants that found their communicators broken asked for a new
     * quorum while membership stayed the same: after a settle time (a dead
     * peer would have been dropped by then), re-form with a fresh id so they
     * rendezvous under a new store prefix. A mode switch (evaluate_mode)
     * re-forms at once: the same groups under a new id, told the new mode. */
    if (!changed && c->mode_pending) {
        next.id = c->quorum.id + 1;
        changed = 1;
        reason[0] = '\0';
    } else if (!changed && c->drain_lost[0]) {
        /* Those still in the step before the boundary wait for it (their
         * collectives are not aborted for a drained group): a fresh id
         * without Quorum.draining aborts them; the others adopt it at a
         * step boundary, as the same groups. */
        next.id = c->quorum.id + 1;
        changed = 1;
        snprintf(reason, sizeof reason, "drained group %s was lost before it left, membership unchanged",
                 c->drain_lost);
    } else if (!changed && c->rebuild_requested_ms) {
        if (now - c->rebuild_requested_ms < c->cfg.rebuild_settle_ms) {
            px_quorum_free(&next);
            return;
        }
        next.id = c->quorum.id + 1;
        changed = 1;
        snprintf(reason, sizeof reason, "rebuild requested by participants, membership unchanged");
    }
    c->quorum_dirty = 0;
    c->drain_lost[0] = '\0';
    if (changed) {
        if (c->mode_pending) switch_mode(c, &next, reason, sizeof reason, now);
        install_quorum(c, &next, reason, now);
        return;
    }
    /* Same membership: answer requesters that are already in it (a worker
     * that missed the push, or asked again after a restart). */
    for (int i = 0; i < c->members.n; i++) {
        px_member_t *m = &c->members.members[i];
        if (m->state != PX_STATE_LOST && m->requested && px_quorum_find(&c->quorum, m->group) >= 0) {
            m->requested = 0;
            push_quorum(c, m->ident, m->ident_len, "current quorum");
        }
    }
    c->quorum.max_step = next.max_step;
    px_quorum_free(&next);
}

/* ---- membership ------------------------------------------------------- */

static void member_lost(px_coordinator_t *c, px_member_t *m, const char *why) {
    px_members_mark_lost(&c->members, m, why);
    int64_t silent_ms = px_now_ms() - m->last_hb_ms;
    emit(c, "member_lost", "\"group\":\"%s\",\"rank\":%d,\"pid\":%d,\"step\":%lld,\"quorum_id\":%lld,\"reason\":\"%s\",\"silent_ms\":%lld",
         m->group, m->rank, m->pid, (long long)m->step, (long long)c->quorum.id, why, (long long)silent_ms);
    px_log_info("member_lost group=%s rank=%d pid=%d reason=%s silent_ms=%lld conn_closed=%d reported_ms_ago=%lld", m->group,
                m->rank, m->pid, why, (long long)silent_ms, m->conn_closed,
                (long long)(m->reported_ms ? px_now_ms() - m->reported_ms : -1));
    if (strcmp(why, "drained") == 0) /* planned: not a failure mark on the dashboard */
        history_event(c, "member_left", m->group, m->step, "%s rank %d left: drained", m->group, m->rank);
    else
        history_event(c, "member_lost", m->group, m->step, "%s rank %d lost: %s", m->group, m->rank, why);
    if (px_quorum_find(&c->quorum, m->group) >= 0 && !m->group_dropped_logged) {
        /* The whole group leaves: the next compute (this tick) forms a quorum
         * without it, and the survivors finish the step without it. */
        emit(c, "group_dropped", "\"group\":\"%s\",\"quorum_id\":%lld,\"step\":%lld,\"reason\":\"rank %d %s\"",
             m->group, (long long)c->quorum.id, (long long)m->step, m->rank, why);
        px_log_info("group_dropped group=%s quorum_id=%lld", m->group, (long long)c->quorum.id);
        for (int r = 0; r < m->group_size; r++) { /* by name: a mass loss is not quadratic */
            px_member_t *x = px_members_by_name(&c->members, m->group, r);
            if (x) x->group_dropped_logged = 1;
        }
        c->stats.last_loss_ms = px_now_ms();
        history_event(c, "group_dropped", m->group, m->step, "%s dropped from quorum %lld: rank %d %s", m->group,
                      (long long)c->quorum.id, m->rank, why);
        if (strcmp(why, "drained") != 0) { /* counted on the group's rank 0 (/metrics phalanx_group_drops_total) */
            px_member_t *leader = m->rank == 0 ? m : px_members_by_name(&c->members, m->group, 0);
            if (leader) leader->group_drops++;
        }
        if (strcmp(why, "self_reported") != 0 && strcmp(why, "drained") != 0) { /* a failure, not a planned leave: --mode auto counts it */
            c->stats.failures++;
            px_loss_ring_add(&c->losses, c->stats.last_loss_ms);
            c->loss_noted = 1;
            if (!c->recovery_from_ms) c->recovery_from_ms = c->stats.last_loss_ms; /* timed to the next commit */
        }
    }
    if (m->draining && strcmp(why, "drained") != 0 && px_quorum_is_draining(&c->quorum, m->group))
        snprintf(c->drain_lost, sizeof c->drain_lost, "%s", m->group);
    if (m->rank == 0 && m->liveness_ep[0]) { /* its ranks fall back to heartbeating us: push to them directly */
        for (int r = 1; r < m->group_size; r++) { /* by name, not a scan: a mass loss of leaders is not quadratic */
            px_member_t *x = px_members_rank_of(&c->members, m, r);
            if (x) x->via_leader = 0;
        }
    }
    c->quorum_dirty = 1;
}

/* Liveness includes progress. A member of the quorum that heartbeats but
 * never joins the quorum's rendezvous (a rogue that joined and does not
 * train, or a hung trainer behind a live agent thread) would hold every
 * other group in the rendezvous forever. Once some member has used the store
 * under the current quorum, every member of it has stall_timeout_ms to do
 * the same; one that has not is lost as "stalled" and its group dropped. A
 * trainer adopts a new quorum at its next step boundary, so the limit
 * follows the job's step time (px_stall_limit_ms): a rogue or a hung
 * trainer costs seconds, a slow model's step does not look like a stall. */
static void detect_stalled(px_coordinator_t *c, int64_t now) {
    if (c->rendezvous_checked || !c->first_store_ms) return;
    int64_t limit = px_stall_limit_ms(c->cfg.stall_timeout_ms, c->step_ring, c->step_ring_n);
    if (now - c->first_store_ms <= limit) return;
    for (int i = 0; i < c->members.n; i++) {
        px_member_t *m = &c->members.members[i];
        if (m->state == PX_STATE_LOST || m->store_qid == c->quorum.id) continue;
        if (px_quorum_find(&c->quorum, m->group) < 0) continue;
        c->stats.members_stalled++;
        px_log_warn("member_stalled group=%s rank=%d quorum_id=%lld limit_ms=%lld%s: not in the rendezvous the "
                    "others joined", m->group, m->rank, (long long)c->quorum.id, (long long)limit,
                    c->cfg.stall_timeout_ms > 0 ? " (--stall-timeout-ms)" : " (adaptive)");
        member_lost(c, m, "stalled");
    }
    /* Whoever was stalled is lost now (a new quorum follows); the others took
     * part, which cannot be undone: no need to look again in this quorum. */
    c->rendezvous_checked = 1;
}

static void tell_udp_off(px_coordinator_t *c, px_member_t *m);

/* A member offered UDP whose first datagram has not come this long after its
 * registration (connection open) is told udp_off: half the timeout, so that
 * it is heartbeating over its connection well before the timeout would lose
 * it, and not a mere two intervals, which a busy start (thousands of
 * registrations, a large first quorum) can exceed. */
static int64_t udp_silent_ms(const px_coordinator_t *c) {
    int64_t half = c->live.heartbeat_timeout_ms / 2, two = 2 * c->live.heartbeat_interval_ms;
    return half > two ? half : two;
}

static void detect_losses(px_coordinator_t *c, int64_t now) {
    int anon = c->anon_report_ms && c->anon_report_qid == c->quorum.id &&
               now - c->anon_report_ms <= c->live.heartbeat_timeout_ms;
    /* Run every tick over every member: the common case (heard from lately,
     * connected, never accused) is decided from the first cache line alone. */
    int64_t udp_quiet_ms = udp_silent_ms(c), quiet_ms = udp_quiet_ms;
    if ((double)quiet_ms > PX_SILENT_INTERVALS * (double)c->live.heartbeat_interval_ms)
        quiet_ms = (int64_t)(PX_SILENT_INTERVALS * (double)c->live.heartbeat_interval_ms);
    for (int i = 0; i < c->members.n; i++) {
        px_member_t *m = &c->members.members[i];
        if (m->state == PX_STATE_LOST) continue;
        if (!m->reported_ms && !m->self_reported && now - m->last_hb_ms <= quiet_ms && !(anon && m->conn_closed))
            continue;
        m->reported = px_member_report_fresh(m, now, &c->live, c->quorum.id);
        /* A rank its leader reports for is silent only if the leader reported
         * since without it: a late or lost digest is the leader's silence. */
        const px_member_t *l = m->via_leader ? px_members_recall(&c->members, m->leader_slot, m->leader_gen) : NULL;
        m->relay_excused = l && l->state != PX_STATE_LOST && l->last_hb_ms <= m->last_hb_ms;
        /* A report that named nobody counts against members whose connection
         * closed: that pairing is the signature of a dead process. Against a
         * member that is merely slow to heartbeat it does not count: on an
         * overloaded machine that would drop healthy groups in a cascade (a
         * hung member is caught by the heartbeat timeout instead). */
        if (anon && m->conn_closed) m->reported = 1;
        const char *why = px_member_loss_reason(m, now, &c->live);
        if (why) member_lost(c, m, why);
        else if (m->udp_watch && !m->conn_closed && now - m->last_hb_ms > udp_quiet_ms)
            tell_udp_off(c, m);
    }
}

/* ---- message handlers -------------------------------------------------- */

/* UNKNOWN_MEMBER: the worker registers again. m: its entry (lost), or NULL. */
static void reply_unknown(px_coordinator_t *c, const void *ident, size_t ident_len, uint64_t req_id,
                          const px_member_t *m) {
    reply_error(c, ident, ident_len, req_id, PHALANX__ERROR_CODE__UNKNOWN_MEMBER,
                m ? "member was declared lost; register again" : "not registered; register first");
}

static px_member_t *require_member(px_coordinator_t *c, const void *ident, size_t ident_len, uint64_t req_id) {
    px_member_t *m = px_members_by_ident(&c->members, ident, ident_len);
    if (!m || m->state == PX_STATE_LOST) {
        reply_unknown(c, ident, ident_len, req_id, m);
        return NULL;
    }
    return m;
}

/* Workers re-registering after a coordinator restart say which quorum they
 * are in: adopt it rather than forming a new one, so training goes on. Only
 * during the recovery window (one heartbeat timeout after start, before this
 * coordinator formed a quorum of its own): afterwards a register carrying
 * another id is a stale or forged claim and changes nothing. Adopted groups
 * are kept sorted by name, as in every formed quorum. */
static int in_recovery_window(const px_coordinator_t *c, int64_t now) {
    return now - c->started_ms < c->live.heartbeat_timeout_ms && (c->quorum.id == 0 || c->adopted);
}

static void adopt_quorum(px_coordinator_t *c, const char *group, int64_t qid, int64_t step, int64_t now) {
    if (qid <= 0 || qid < c->quorum.id || !in_recovery_window(c, now)) return;
    if (qid > c->quorum.id) { /* the newest quorum any worker reports wins */
        c->quorum.id = qid;
        c->quorum.n = 0;
        c->quorum.max_step = 0;
        c->adopted = 1;
    }
    if (px_quorum_find(&c->quorum, group) >= 0) return;
    if (px_quorum_insert_sorted(&c->quorum, group, step) != 0) {
        px_log_error("quorum_adopt_failed quorum_id=%lld group=%s: out of memory", (long long)qid, group);
        return;
    }
    emit(c, "quorum_adopted", "\"quorum_id\":%lld,\"group\":\"%s\",\"step\":%lld", (long long)qid, group, (long long)step);
    px_log_info("quorum_adopted quorum_id=%lld group=%s step=%lld", (long long)qid, group, (long long)step);
    /* the dashboard's events after a restart of ours start with the running job taken over */
    history_event(c, "quorum_adopted", group, step, "%s's quorum %lld adopted after a coordinator restart", group,
                  (long long)qid);
}

/* A (group, rank) belongs to the process holding it while that process is
 * alive: heard from recently, on a connection that is still open. A second
 * process claiming it then is refused (an impersonation, or a duplicate
 * launch); once the holder's connection closed or it went silent, the claim
 * is a restarted process and takes over. */
static int holder_alive(const px_coordinator_t *c, const px_member_t *m, int64_t now) {
    return m->state != PX_STATE_LOST && !m->conn_closed &&
           (double)(now - m->last_hb_ms) <= PX_SILENT_INTERVALS * (double)c->live.heartbeat_interval_ms;
}

static void refuse_identity_conflict(px_coordinator_t *c, const void *ident, size_t ident_len, uint64_t req_id,
                                    const px_member_t *holder, const Phalanx__Register *r) {
    c->stats.identity_conflicts++;
    char host_esc[PX_HOST_MAX * 6 + 8];
    px_json_escape(r->host, host_esc, sizeof host_esc);
    emit_limited(c, &c->rl_conflict, "\"group\":\"%s\",\"rank\":%d,\"holder_pid\":%d,\"claimant_pid\":%u,\"claimant_host\":\"%s\"",
                 holder->group, holder->rank, holder->pid, r->pid, host_esc);
    if (px_rate_log_ok(&c->log_conflict, px_now_ms()))
        px_log_warn("identity_conflict group=%s rank=%d holder_pid=%d claimant_pid=%u total=%llu", holder->group,
                    holder->rank, holder->pid, r->pid, (unsigned long long)c->stats.identity_conflicts);
    char why[160];
    snprintf(why, sizeof why, "%s/%d is held by a live process (pid %d); a restarted process is admitted once it is gone",
             holder->group, holder->rank, holder->pid);
    reply_error(c, ident, ident_len, req_id, PHALANX__ERROR_CODE__IDENTITY_CONFLICT, why);
}

/* Every group of a job shares one layout (cross-group reductions pair the
 * ranks with the same mesh coordinates): a worker whose layout differs from
 * a live member's is refused for good, the message naming both. 1 when
 * refused. */
static int refuse_wrong_layout(px_coordinator_t *c, const void *ident, size_t ident_len, uint64_t req_id,
                               const Phalanx__Register *r) {
    /* Every live member with a layout has the same one (this check admitted
     * each), so one of them, remembered, answers for all: a registration costs
     * one comparison, not a scan of every member (quadratic in a large job's
     * start). The scan remains when that one left, moved or is this rank's
     * earlier incarnation. */
    const px_member_t *rep = c->layout_slot > 0 && c->layout_slot <= c->members.n
                                 ? &c->members.members[c->layout_slot - 1]
                                 : NULL;
    if (rep && rep->state != PX_STATE_LOST && rep->layout[0] && !strcmp(rep->layout, r->layout) &&
        (strcmp(rep->group, r->group) || rep->rank != (int)r->rank))
        return 0;
    for (int i = 0; i < c->members.n; i++) {
        const px_member_t *m = &c->members.members[i];
        if (m->state == PX_STATE_LOST || !m->layout[0]) continue;
        if (!strcmp(m->layout, r->layout)) {
            if (strcmp(m->group, r->group) || m->rank != (int)r->rank) c->layout_slot = px_members_slot(&c->members, m);
            continue;
        }
        if (!strcmp(m->group, r->group) && m->rank == (int)r->rank) continue; /* its own earlier incarnation */
        char why[512];
        snprintf(why, sizeof why, "layout %s of %s/%u differs from the job's %s (%s): groups must agree on "
                 "--ranks-per-group --pp --fsdp --tp --microbatches --schedule --mode --inner-steps --outer-dtype "
                 "--sync-warmup --fragments --outer-overlap",
                 r->layout, r->group, r->rank, m->layout, m->group);
        px_log_warn("layout_refused group=%s rank=%u layout=%s job_layout=%s", r->group, r->rank, r->layout, m->layout);
        reply_error(c, ident, ident_len, req_id, PHALANX__ERROR_CODE__WRONG_LAYOUT, why);
        return 1;
    }
    return 0;
}

/* Group-level liveness (--liveness group, docs/protocol.md): where rank m
 * should heartbeat instead of here, NULL when it should heartbeat here (it is
 * a leader, or its leader is not registered, lost, or takes no heartbeats). */
static char *leader_endpoint(px_coordinator_t *c, const px_member_t *m) {
    if (m->rank == 0) return NULL;
    px_member_t *l = px_members_by_name(&c->members, m->group, 0);
    return l && l->state != PX_STATE_LOST && l->liveness_ep[0] && l->group_size == m->group_size ? l->liveness_ep : NULL;
}

/* A leader's digest: the ranks it heard count as heard now, at its lowest
 * step (their own step is as fresh as the leader's report: docs/protocol.md).
 * A rank it reports that we do not know (we restarted, or declared it lost)
 * is named in `unknown`, and the leader tells it to register again. */
static void note_digest(px_coordinator_t *c, px_member_t *leader, const Phalanx__GroupDigest *d, int64_t now,
                        uint8_t *unknown, size_t *unknown_len) {
    *unknown_len = 0;
    if (!d || !leader->liveness_ep[0]) return;
    for (int r = 1; r < leader->group_size && (size_t)(r / 8) < d->alive.len; r++) {
        if (!(d->alive.data[r / 8] & (1u << (r % 8)))) continue;
        px_member_t *x = px_members_rank_of(&c->members, leader, r);
        if (!x || x->state == PX_STATE_LOST || x->group_size != leader->group_size) {
            unknown[r / 8] |= (uint8_t)(1u << (r % 8));
            *unknown_len = (size_t)(r / 8 + 1);
            continue;
        }
        x->last_hb_ms = now;
        x->step = d->min_step;
        x->via_leader = 1;
        x->leader_slot = px_members_slot(&c->members, leader);
        x->leader_gen = px_members_gen(&c->members);
        c->stats.relayed_ranks++;
    }
}

static void on_register(px_coordinator_t *c, const void *ident, size_t ident_len, int fd, const px_msg_t *msg) {
    const Phalanx__Register *r = msg->reg;
    if (r->job && r->job[0] && strcmp(r->job, c->cfg.job) != 0) {
        char why[160];
        snprintf(why, sizeof why, "worker belongs to job '%s', this coordinator runs job '%s'", r->job, c->cfg.job);
        reply_error(c, ident, ident_len, msg->request_id, PHALANX__ERROR_CODE__WRONG_JOB, why);
        return;
    }
    if (r->layout && r->layout[0] && refuse_wrong_layout(c, ident, ident_len, msg->request_id, r)) return;
    int replaced = 0;
    int64_t now = px_now_ms();
    px_member_t *old = px_members_by_name(&c->members, r->group, (int)r->rank);
    if (old && old->state != PX_STATE_LOST &&
        (old->ident_len != ident_len || memcmp(old->ident, ident, ident_len) != 0)) {
        if (holder_alive(c, old, now)) {
            refuse_identity_conflict(c, ident, ident_len, msg->request_id, old, r);
            return;
        }
        member_lost(c, old, "replaced_by_new_process");
    }
    px_members_rc_t rc;
    px_member_t *m = px_members_upsert(&c->members, r->group, (int)r->rank, ident, ident_len, &replaced, &rc);
    if (!m) {
        if (rc == PX_MEMBERS_FULL) limit_refused(c, ident, ident_len, msg->request_id, PX_LIMIT_MEMBERS, r->group, (int)r->rank);
        else reply_error(c, ident, ident_len, msg->request_id, PHALANX__ERROR_CODE__BAD_MESSAGE,
                         rc == PX_MEMBERS_BAD_IDENT ? "identity too long" : "out of memory");
        return;
    }
    m->group_size = (int)r->group_size;
    m->pid = (int)r->pid;
    snprintf(m->host, sizeof m->host, "%s", r->host);
    snprintf(m->data_host, sizeof m->data_host, "%s", r->data_host ? r->data_host : "");
    m->step = r->has_step ? r->step : 0;
    m->quorum_id = r->has_quorum_id ? r->quorum_id : 0;
    m->job_steps = r->has_job_steps ? r->job_steps : 0;
    snprintf(m->layout, sizeof m->layout, "%s", r->layout ? r->layout : "");
    snprintf(m->liveness_ep, sizeof m->liveness_ep, "%s", r->liveness_endpoint ? r->liveness_endpoint : "");
    m->via_leader = 0;
    m->has_comm_share = 0;
    m->has_train = 0;
    m->heals = 0;
    m->heal_bytes = 0;
    m->state = PX_STATE_JOINING;
    set_member_fd(c, m, fd);
    /* A key of its own for this registration: a datagram sealed under an
     * earlier one (a replaced process, our restart) opens no more. */
    m->udp_watch = c->udp && px_hbudp_keygen(m->udp_key) == 0;
    m->udp_seq = 0;
    m->udp_ok_ms = now;
    m->udp_stale = 0;
    m->udp_refused = 0;
    m->registered_ms = m->last_hb_ms = now;
    m->acked_ms = 0; /* its first heartbeat is answered */
    char host_esc[PX_HOST_MAX * 6 + 8], data_host_esc[PX_HOST_MAX * 6 + 8];
    px_json_escape(m->host, host_esc, sizeof host_esc);
    px_json_escape(m->data_host, data_host_esc, sizeof data_host_esc);
    emit(c, "member_joined",
         "\"group\":\"%s\",\"rank\":%d,\"group_size\":%d,\"pid\":%d,\"host\":\"%s\",\"data_host\":\"%s\",\"step\":%lld",
         m->group, m->rank, m->group_size, m->pid, host_esc, data_host_esc, (long long)m->step);
    px_log_info("member_joined group=%s rank=%d/%d pid=%d host=%s data_host=%s step=%lld quorum_id=%lld", m->group,
                m->rank, m->group_size, m->pid, m->host, m->data_host[0] ? m->data_host : "-", (long long)m->step,
                (long long)m->quorum_id);
    adopt_quorum(c, m->group, m->quorum_id, m->step, now);
    m->spare_noted = 0;
    note_spare(c, m);

    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__RegisterAck ack = PHALANX__REGISTER_ACK__INIT;
    ack.has_quorum_id = 1;
    ack.quorum_id = c->quorum.id;
    ack.has_heartbeat_interval_ms = 1;
    ack.heartbeat_interval_ms = (uint32_t)c->cfg.heartbeat_interval_ms;
    ack.has_heartbeat_timeout_ms = 1;
    ack.heartbeat_timeout_ms = (uint32_t)c->cfg.heartbeat_timeout_ms;
    ack.job = (char *)c->cfg.job;
    ack.has_finished_step = c->finished_step > 0;
    ack.finished_step = c->finished_step;
    ack.leader_endpoint = leader_endpoint(c, m);
    if (m->udp_watch) {
        ack.has_udp_port = ack.has_udp_key = 1;
        ack.udp_port = (uint32_t)px_udp_port(c->udp);
        ack.udp_key.data = m->udp_key;
        ack.udp_key.len = sizeof m->udp_key;
    }
    env.has_request_id = 1;
    env.request_id = msg->request_id;
    env.body_case = PHALANX__ENVELOPE__BODY_REG_ACK;
    env.reg_ack = &ack;
    send_to(c, ident, ident_len, &env);
    c->quorum_dirty = 1;
}

/* The latest comm share a member measured (--mode auto): absent means not
 * measured (any more); NaN or outside 0..1 is a broken or hostile sender,
 * ignored (the value before stays) rather than trusted. */
static void note_comm_share(px_coordinator_t *c, px_member_t *m, const Phalanx__Heartbeat *h) {
    if (!h->has_comm_share) {
        m->has_comm_share = 0;
    } else if (h->comm_share >= 0.0f && h->comm_share <= 1.0f) {
        m->has_comm_share = 1;
        m->comm_share = h->comm_share;
    } else if (c->stats.bad_comm_shares++ < 10) {
        px_log_warn("comm_share_ignored group=%s rank=%d value=%g: not in 0..1", m->group, m->rank, (double)h->comm_share);
    }
}

/* The job's step moves when a quorum member heartbeats a step beyond it:
 * committed steps are counted, and a pending recovery ends. */
static void note_job_step(px_coordinator_t *c, const px_member_t *m, int64_t step) {
    if (c->job_step >= 0 && step <= c->job_step) return; /* the common case, before the quorum lookup */
    if (m->state == PX_STATE_LOST || px_quorum_find(&c->quorum, m->group) < 0) return;
    px_progress_step(&c->progress, step, px_now_ms());
    if (c->job_step < 0) { /* the baseline: steps before this run are not ours to count */
        c->job_step = step;
        return;
    }
    c->train.committed_steps += (uint64_t)(step - c->job_step);
    c->job_step = step;
    if (c->recovery_from_ms) {
        px_histo_observe(&c->train.recovery_seconds, (double)(px_now_ms() - c->recovery_from_ms) / 1000.0);
        c->train.recoveries++;
        c->recovery_from_ms = 0;
    }
}

/* A promoted spare's rank 0 heartbeats a step beyond the one it joined at:
 * it trains. spare_promoted says so, with the time from the loss. */
static void note_promoted_step(px_coordinator_t *c, const px_member_t *m, int64_t step) {
    for (int i = 0; i < c->n_promos; i++) {
        if (strcmp(c->promos[i].group, m->group) != 0 || step <= c->promos[i].step) continue;
        double s = (double)(px_now_ms() - c->promos[i].from_ms) / 1000.0;
        emit(c, "spare_promoted",
             "\"group\":\"%s\",\"replaced\":\"%s\",\"quorum_id\":%lld,\"step\":%lld,\"first_step\":%lld,"
             "\"seconds\":%.3f",
             c->promos[i].group, c->promos[i].replaced, (long long)c->promos[i].quorum_id,
             (long long)c->promos[i].step, (long long)step, s);
        px_log_info("spare_promoted group=%s replaced=%s quorum_id=%lld first_step=%lld seconds=%.3f",
                    c->promos[i].group, c->promos[i].replaced[0] ? c->promos[i].replaced : "-",
                    (long long)c->promos[i].quorum_id, (long long)step, s);
        px_histo_observe(&c->train.promotion_seconds, s);
        memmove(&c->promos[i], &c->promos[i + 1], (size_t)(c->n_promos - i - 1) * sizeof c->promos[0]);
        c->n_promos--;
        return;
    }
}

/* A worker's figure: NaN when absent, non-finite or negative (a broken or
 * hostile sender is ignored, not trusted). */
static float train_figure(int has, float v) { return has && isfinite(v) && v >= 0 ? v : NAN; }

/* A rank 0's TrainStats: kept for its group, and a history point when it is
 * about a step beyond the last point (the first group to report a step). */
static void note_train_stats(px_coordinator_t *c, px_member_t *m, const Phalanx__TrainStats *t) {
    if (!t || m->rank != 0 || !t->has_step || t->step < 0 || t->step > PX_STEP_MAX) return;
    if (!m->said_diloco && t->has_diloco && t->diloco && c->auto_mode && in_recovery_window(c, px_now_ms())) {
        m->said_diloco = 1; /* once per group (its rank 0), for recover_mode */
        c->recovered_diloco++;
    }
    m->has_train = 1;
    m->train_loss = train_figure(t->has_loss, t->loss);
    m->heals = t->heals;
    m->heal_bytes = t->heal_bytes;
    if (px_quorum_find(&c->quorum, m->group) < 0) return; /* a healing or joining group's figures are not the job's */
    px_history_point_t p = {0};
    p.time_ms = px_wall_ms();
    p.step = t->step;
    p.loss = m->train_loss;
    p.tokens_per_s = train_figure(t->has_tokens_per_s, t->tokens_per_s);
    p.step_seconds = train_figure(t->has_step_seconds, t->step_seconds);
    p.eval_loss = NAN;
    if (t->has_eval_step && t->eval_step > c->last_eval_step && t->eval_step <= t->step) {
        p.eval_loss = train_figure(t->has_eval_loss, t->eval_loss);
        p.eval_step = t->eval_step;
    }
    p.groups = c->quorum.n;
    p.diloco = t->has_diloco && t->diloco;
    if (!px_history_add_point(c->history, &p)) return;
    if (p.step_seconds > 0) { /* a new step's time (a DiLoCo round's commit has none): the stall limit's */
        c->step_ring[c->step_ring_at] = p.step_seconds;
        c->step_ring_at = (c->step_ring_at + 1) % NBOUNDS(c->step_ring);
        if (c->step_ring_n < NBOUNDS(c->step_ring)) c->step_ring_n++;
    }
    px_train_metrics_t *tm = &c->train;
    if (!isnan(p.loss)) tm->has_loss = 1, tm->loss = p.loss;
    if (!isnan(p.tokens_per_s)) {
        tm->has_tokens_per_s = 1;
        tm->tokens_per_s = p.tokens_per_s;
        px_progress_tokens(&c->progress, p.tokens_per_s, px_now_ms());
    }
    if (!isnan(p.eval_loss)) {
        tm->has_eval_loss = 1;
        tm->eval_loss = p.eval_loss;
        c->last_eval_step = p.eval_step;
    }
    if (!isnan(p.step_seconds)) px_histo_observe(&tm->step_seconds, p.step_seconds);
}

/* A heartbeat from member m: over its connection (fd: the descriptor it came
 * on), or as a sealed datagram (fd < 0), which says nothing about the
 * connection and is never answered for the keepalive alone. */
static void heartbeat(px_coordinator_t *c, px_member_t *m, int fd, const px_msg_t *msg) {
    const void *ident = m->ident;
    size_t ident_len = m->ident_len;
    const Phalanx__Heartbeat *h = msg->hb;
    int64_t now = px_now_ms();
    m->last_hb_ms = now;
    int news = 0; /* this heartbeat's answer tells the worker something */
    if (m->via_leader) { /* it heartbeats us again (its leader went quiet): it may have missed a push */
        m->via_leader = 0;
        news = 1;
        if (c->quorum.id > 0) push_quorum(c, ident, ident_len, "direct again");
    }
    if (h->has_draining && h->draining && !m->draining) { /* told before a restart of ours: it still leaves */
        m->draining = 1;
        c->quorum_dirty = 1;
        px_log_info("group_draining group=%s rank=%d: the worker says it is being drained", m->group, m->rank);
    }
    m->step = h->step;
    if (h->has_state) m->state = (int)h->state;
    if (h->has_quorum_id) m->quorum_id = h->quorum_id;
    note_comm_share(c, m, h);
    note_job_step(c, m, h->step);
    if (c->n_promos && m->rank == 0) note_promoted_step(c, m, h->step);
    note_train_stats(c, m, h->train);
    uint8_t unknown[PX_GROUP_SIZE_MAX / 8] = {0};
    size_t unknown_len = 0;
    if (h->digest && m->rank == 0) note_digest(c, m, h->digest, now, unknown, &unknown_len);
    if (fd >= 0 && !(m->conn_closed && fd == m->closed_fd && fd_gen(c, fd) == m->closed_gen)) {
        if (m->fd != fd) set_member_fd(c, m, fd);
        m->conn_closed = 0;
    }
    c->stats.heartbeats++;
    c->hb_window_count++;
    /* An ack costs a send, and at 10,000 groups sends are most of the
     * coordinator's work: a worker holding the current quorum, with nothing
     * else to learn, is answered once per ACK_KEEPALIVE_MS only (pushes
     * carry every new quorum; the ack is the fallback). A heartbeat with a
     * request id (the agent's carry none) asks for its answer and gets it. */
    char *leader_ep = leader_endpoint(c, m);
    news |= msg->request_id != 0 || !h->has_quorum_id || h->quorum_id != c->quorum.id || c->finished_step > 0 ||
            leader_ep || unknown_len || (m->draining && !(h->has_draining && h->draining));
    if (!news && (fd < 0 || now - m->acked_ms < ACK_KEEPALIVE_MS)) {
        c->stats.acks_skipped++;
        return;
    }
    m->acked_ms = now;
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__HeartbeatAck ack = PHALANX__HEARTBEAT_ACK__INIT;
    ack.has_quorum_id = 1;
    ack.quorum_id = c->quorum.id;
    ack.has_finished_step = c->finished_step > 0;
    ack.finished_step = c->finished_step;
    ack.leader_endpoint = leader_ep;
    ack.has_unknown_ranks = unknown_len > 0;
    ack.unknown_ranks.data = unknown;
    ack.unknown_ranks.len = unknown_len;
    ack.has_draining = ack.draining = m->draining != 0;
    env.has_request_id = 1;
    env.request_id = msg->request_id;
    env.body_case = PHALANX__ENVELOPE__BODY_HB_ACK;
    env.hb_ack = &ack;
    send_to(c, ident, ident_len, &env);
}

static void on_heartbeat(px_coordinator_t *c, const void *ident, size_t ident_len, int fd, const px_msg_t *msg) {
    px_member_t *m = require_member(c, ident, ident_len, msg->request_id);
    if (m) heartbeat(c, m, fd, msg);
}

/* A datagram of m refused as not newer than the last one taken. When no
 * datagram of it was taken for two intervals and these keep coming sealed
 * under its own key, the real worker is sending them: somebody holding the
 * key pushed the sequence ahead. Its datagrams can no longer be told from
 * the forger's, so it is told to heartbeat over its authenticated
 * connection (udp_off) and its datagrams count no more. Only a member
 * already going quiet costs a decryption here, so a flood of replays does
 * not. */
static void check_sequence_pushed(px_coordinator_t *c, px_member_t *m, const uint8_t *buf, size_t len) {
    int64_t now = px_now_ms();
    if (m->state == PX_STATE_LOST || now - m->udp_ok_ms <= 2 * c->live.heartbeat_interval_ms) return;
    uint8_t plain[PX_HBUDP_MAX];
    size_t plain_len;
    if (px_hbudp_open(m->udp_key, buf, len, plain, sizeof plain, &plain_len) != 0) return;
    if (++m->udp_stale < 2) return;
    px_log_warn("udp_sequence_pushed group=%s rank=%d seq_taken=%llu: its own datagrams are refused as replays; "
                "told to heartbeat over its connection", m->group, m->rank, (unsigned long long)m->udp_seq);
    tell_udp_off(c, m);
}

/* A datagram on the UDP socket: a heartbeat sealed with its sender's key
 * (proto/px_hbudp.h), or something to count and drop without an answer
 * (UDP sources are not authenticated: answering would reflect floods). */
static void on_datagram(void *ctx, const uint8_t *buf, size_t len) {
    px_coordinator_t *c = ctx;
    const uint8_t *ident;
    size_t ident_len;
    uint64_t seq;
    uint8_t plain[PX_HBUDP_MAX];
    size_t plain_len;
    px_member_t *m = NULL;
    px_msg_t *msg = NULL;
    const char *why = "malformed";
    if (px_hbudp_peek(buf, len, &ident, &ident_len, &seq) == 0) {
        m = px_members_by_ident(&c->members, ident, ident_len);
        why = "unknown sender";
        if (m && m->conn_closed && m->state != PX_STATE_LOST) {
            why = "its connection is closed"; /* a dead process's key in other hands proves nothing */
        } else if (m && m->udp_refused && m->state != PX_STATE_LOST) {
            why = "told to heartbeat over its connection";
        } else if (m) {
            why = "forged or replayed";
            if (seq > m->udp_seq && px_hbudp_open(m->udp_key, buf, len, plain, sizeof plain, &plain_len) == 0) {
                m->udp_seq = seq;
                m->udp_ok_ms = px_now_ms();
                m->udp_stale = 0;
                Phalanx__ErrorCode code;
                char w[128];
                msg = px_wire_decode(plain, plain_len, &code, w, sizeof w);
                why = "not a heartbeat";
                if (msg && msg->body_case == PHALANX__ENVELOPE__BODY_HB) why = NULL;
            } else if (seq <= m->udp_seq) {
                check_sequence_pushed(c, m, buf, len);
            }
        }
    }
    if (why) {
        c->stats.udp_dropped++;
        if (px_rate_log_ok(&c->log_udp_dropped, px_now_ms()))
            px_log_warn("udp_datagram_dropped bytes=%zu why=\"%s\" total=%llu", len, why,
                        (unsigned long long)c->stats.udp_dropped);
        px_wire_free(msg);
        return;
    }
    if (m->state == PX_STATE_LOST) {
        /* Its own key: the worker itself, declared lost (frozen past the
         * timeout, or cut off) and back. Told over its connection, as a
         * heartbeat there would be, so that it registers again. */
        reply_unknown(c, m->ident, m->ident_len, 0, m);
        px_wire_free(msg);
        return;
    }
    c->stats.udp_heartbeats++;
    m->udp_watch = 0; /* the path works */
    heartbeat(c, m, -1, msg);
    px_wire_free(msg);
}

/* A member offered UDP heartbeats, none of which arrived (udp_silent_ms),
 * its connection open: its datagrams are not getting here (a firewall, a
 * Service without the UDP port). It is told, over the connection, to
 * heartbeat there instead. Once one datagram of a registration arrived the
 * path works, and a later silence is the member's own (frozen, dead), judged
 * by the loss rule like any other. */
static void tell_udp_off(px_coordinator_t *c, px_member_t *m) {
    m->udp_watch = 0;
    m->udp_refused = 1; /* from now on only its connection speaks for it */
    c->stats.udp_off++;
    if (px_rate_log_ok(&c->log_udp_off, px_now_ms()))
        px_log_warn("udp_heartbeats_silent group=%s rank=%d: told to heartbeat over its connection (total=%llu)",
                    m->group, m->rank, (unsigned long long)c->stats.udp_off);
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__HeartbeatAck ack = PHALANX__HEARTBEAT_ACK__INIT;
    ack.has_quorum_id = 1;
    ack.quorum_id = c->quorum.id;
    ack.has_udp_off = ack.udp_off = 1;
    env.body_case = PHALANX__ENVELOPE__BODY_HB_ACK;
    env.hb_ack = &ack;
    send_to(c, m->ident, m->ident_len, &env);
}

static void on_quorum_request(px_coordinator_t *c, const void *ident, size_t ident_len, const px_msg_t *msg) {
    px_member_t *m = require_member(c, ident, ident_len, msg->request_id);
    if (!m) return;
    const Phalanx__QuorumRequest *q = msg->quorum_req;
    int64_t now = px_now_ms();
    if (!m->requested) m->requested_ms = now;
    m->requested = 1;
    m->step = q->step;
    m->shrink_only = q->has_shrink_only && q->shrink_only;
    m->has_checksum = q->has_state_checksum;
    m->checksum = q->state_checksum;
    int64_t held = q->has_quorum_id ? q->quorum_id : 0;
    if (held > 0 && held == c->quorum.id && px_quorum_find(&c->quorum, m->group) >= 0 && !c->rebuild_requested_ms)
        c->rebuild_requested_ms = now; /* its communicators broke: it needs a fresh quorum */
    c->quorum_dirty = 1;
}

/* Refuses a request only members of the current quorum may make (failure
 * reports that accuse others, run_finished): from anyone else it is a
 * forgery or stale, and acting on it would let any registered peer evict
 * members or end the job. */
static int refuse_non_member(px_coordinator_t *c, const void *ident, size_t ident_len, uint64_t req_id,
                             const px_member_t *m, const char *what) {
    if (px_quorum_find(&c->quorum, m->group) >= 0) return 0;
    c->stats.reports_refused++;
    emit_limited(c, &c->rl_refused, "\"group\":\"%s\",\"rank\":%d,\"message\":\"%s\",\"quorum_id\":%lld,\"detail\":\"not a member of the current quorum\"",
                 m->group, m->rank, what, (long long)c->quorum.id);
    reply_error(c, ident, ident_len, req_id, PHALANX__ERROR_CODE__NOT_AUTHORIZED,
                "only a member of the current quorum may send this");
    return 1;
}

static void on_failure_report(px_coordinator_t *c, const void *ident, size_t ident_len, const px_msg_t *msg) {
    px_member_t *m = require_member(c, ident, ident_len, msg->request_id);
    if (!m) return;
    const Phalanx__FailureReport *f = msg->failure;
    const char *ag = f->accused_group && f->accused_group[0] ? f->accused_group : NULL;
    int ar = f->has_accused_rank ? f->accused_rank : -1;
    int self = ag && strcmp(ag, m->group) == 0 && ar == m->rank;
    /* Anyone may report its own departure; accusing others takes membership. */
    if (!self && refuse_non_member(c, ident, ident_len, msg->request_id, m, "failure_report")) return;
    int64_t now = px_now_ms();
    int64_t about = f->has_quorum_id ? f->quorum_id : 0;
    char reason[PX_REASON_MAX * 2 + 8];
    px_json_escape(f->reason ? f->reason : "", reason, sizeof reason);
    emit(c, "step_failed", "\"group\":\"%s\",\"rank\":%d,\"quorum_id\":%lld,\"step\":%lld,\"accused_group\":\"%s\",\"accused_rank\":%d,\"reason\":\"%s\"",
         m->group, m->rank, (long long)(f->has_quorum_id ? f->quorum_id : 0), (long long)(f->has_step ? f->step : m->step),
         ag ? ag : "", ar, reason);
    px_log_info("step_failed reporter=%s/%d accused=%s/%d reason=\"%s\"", m->group, m->rank, ag ? ag : "?", ar, reason);
    if (self) {
        m->self_reported = 1;
    } else if (about != c->quorum.id) {
        /* About a quorum no longer in force: recorded above, but no evidence. */
    } else if (ag) {
        for (int i = 0; i < c->members.n; i++) {
            px_member_t *x = &c->members.members[i];
            if (x->state != PX_STATE_LOST && strcmp(x->group, ag) == 0 && (ar < 0 || x->rank == ar)) {
                x->reported_ms = now;
                x->reported_qid = about;
            }
        }
    } else {
        c->anon_report_ms = now;
        c->anon_report_qid = about;
    }
    reply_ack(c, ident, ident_len, msg->request_id);
    detect_losses(c, now); /* act on it now, not at the next tick */
}

/* The job's last step: a run_finished counts only when it names the step
 * count that every live member of the current quorum was started with (a
 * quorum member alone cannot declare a longer or shorter job). It is kept
 * for the coordinator's life: one coordinator serves one run of a job. */
static int job_steps_agreed(const px_coordinator_t *c, int64_t step) {
    int seen = 0;
    for (int i = 0; i < c->members.n; i++) {
        const px_member_t *x = &c->members.members[i];
        if (x->state == PX_STATE_LOST || px_quorum_find(&c->quorum, x->group) < 0) continue;
        if (x->job_steps != step) return 0;
        seen++;
    }
    return seen > 0;
}

static int refuse_run_finished(px_coordinator_t *c, const void *ident, size_t ident_len, uint64_t req_id,
                               px_member_t *m, const Phalanx__WorkerEvent *w) {
    if (refuse_non_member(c, ident, ident_len, req_id, m, "run_finished")) return 1;
    if (job_steps_agreed(c, w->step)) return 0;
    c->stats.reports_refused++;
    emit_limited(c, &c->rl_refused, "\"group\":\"%s\",\"rank\":%d,\"message\":\"run_finished\",\"quorum_id\":%lld,\"step\":%lld,\"detail\":\"step is not the job length every quorum member registered with\"",
                 m->group, m->rank, (long long)c->quorum.id, (long long)w->step);
    px_log_warn("run_finished_refused group=%s rank=%d step=%lld: not the job length the quorum registered with",
                m->group, m->rank, (long long)w->step);
    reply_error(c, ident, ident_len, req_id, PHALANX__ERROR_CODE__NOT_AUTHORIZED,
                "run_finished step is not the job's last step");
    return 1;
}

/* Checkpoint events carry their own fields (docs/protocol.md): the worker
 * sends in detail a path, a failure's reason, or a rejection's path, file
 * and fault (px_wire.h); bytes; and milliseconds in ms. k is the kind
 * without its prefix ("saved"). */
static void emit_checkpoint_event(px_coordinator_t *c, const px_member_t *m, const Phalanx__WorkerEvent *w,
                                  const char *k) {
    char parts[PX_WIRE_CKPT_FIELDS][PX_REASON_MAX * 2 + 8], raw[PX_REASON_MAX + 1];
    const char *field[PX_WIRE_CKPT_FIELDS] = {raw, "", ""};
    snprintf(raw, sizeof raw, "%s", w->detail ? w->detail : "");
    if (!strcmp(k, "rejected") || !strcmp(k, "moved_aside")) px_wire_ckpt_rejected_split(raw, field);
    for (int i = 0; i < PX_WIRE_CKPT_FIELDS; i++) px_json_escape(field[i], parts[i], sizeof parts[i]);
    double s = w->ms / 1000.0;
    if (!strcmp(k, "saved"))
        emit(c, w->kind, "\"group\":\"%s\",\"rank\":%d,\"step\":%lld,\"path\":\"%s\",\"bytes\":%llu,\"seconds\":%.3f,\"mb_per_s\":%.1f",
             m->group, m->rank, (long long)w->step, parts[PX_WIRE_CKPT_PATH], (unsigned long long)w->bytes, s,
             s > 0 ? (double)w->bytes / 1e6 / s : 0.0);
    else if (!strcmp(k, "restored"))
        emit(c, w->kind, "\"group\":\"%s\",\"rank\":%d,\"step\":%lld,\"path\":\"%s\",\"bytes\":%llu,\"seconds\":%.3f",
             m->group, m->rank, (long long)w->step, parts[PX_WIRE_CKPT_PATH], (unsigned long long)w->bytes, s);
    else if (!strcmp(k, "rejected"))
        emit(c, w->kind, "\"group\":\"%s\",\"rank\":%d,\"path\":\"%s\",\"file\":\"%s\",\"fault\":\"%s\"", m->group,
             m->rank, parts[PX_WIRE_CKPT_PATH], parts[PX_WIRE_CKPT_FILE], parts[PX_WIRE_CKPT_FAULT]);
    else if (!strcmp(k, "moved_aside")) /* the file field holds the new folder name */
        emit(c, w->kind, "\"group\":\"%s\",\"rank\":%d,\"path\":\"%s\",\"moved_to\":\"%s\"", m->group, m->rank,
             parts[PX_WIRE_CKPT_PATH], parts[PX_WIRE_CKPT_FILE]);
    else if (!strcmp(k, "deferred")) /* bytes: the step still being written; ms: the interval's wall time */
        emit(c, w->kind, "\"group\":\"%s\",\"rank\":%d,\"quorum_id\":%lld,\"step\":%lld,\"writing_step\":%llu,"
             "\"interval_s\":%.3f", m->group, m->rank, (long long)w->quorum_id, (long long)w->step,
             (unsigned long long)w->bytes, s);
    else if (!strcmp(k, "failed"))
        emit(c, w->kind, "\"group\":\"%s\",\"rank\":%d,\"step\":%lld,\"reason\":\"%s\"", m->group, m->rank,
             (long long)w->step, parts[0] /* the whole detail */);
    else /* started */
        emit(c, w->kind, "\"group\":\"%s\",\"rank\":%d,\"quorum_id\":%lld,\"step\":%lld,\"path\":\"%s\",\"held_ms\":%u",
             m->group, m->rank, (long long)w->quorum_id, (long long)w->step, parts[PX_WIRE_CKPT_PATH], w->ms);
}

/* The worker events the dashboard marks, as a line for people. */
static void note_history_event(px_coordinator_t *c, const px_member_t *m, const Phalanx__WorkerEvent *w) {
    const char *k = w->kind, *peer = w->peer_group ? w->peer_group : "";
    if (!strcmp(k, "heal_started"))
        history_event(c, k, m->group, w->step, "%s heals from %s", m->group, peer);
    else if (!strcmp(k, "heal_finished"))
        history_event(c, k, m->group, w->step, "%s healed from %s: %.1f MB in %.2f s", m->group, peer,
                      (double)w->bytes / 1e6, w->ms / 1000.0);
    else if (!strcmp(k, "outer_step"))
        history_event(c, k, NULL, w->step, "outer step to %lld", (long long)w->step);
    else if (!strcmp(k, "checkpoint_saved")) {
        history_event(c, k, m->group, w->step, "%s saved a checkpoint at step %lld", m->group, (long long)w->step);
        px_progress_checkpoint(&c->progress, w->step, px_wall_ms());
    }
}

static void on_worker_event(px_coordinator_t *c, const void *ident, size_t ident_len, const px_msg_t *msg) {
    px_member_t *m = require_member(c, ident, ident_len, msg->request_id);
    if (!m) return;
    const Phalanx__WorkerEvent *w = msg->worker_event;
    int finished = !strcmp(w->kind, "run_finished");
    if (finished && refuse_run_finished(c, ident, ident_len, msg->request_id, m, w)) return;
    const char *ckpt = px_wire_ckpt_event(w->kind);
    if (ckpt) {
        emit_checkpoint_event(c, m, w, ckpt);
    } else {
        char detail[PX_REASON_MAX * 2 + 8];
        px_json_escape(w->detail ? w->detail : "", detail, sizeof detail);
        emit(c, w->kind, "\"group\":\"%s\",\"rank\":%d,\"quorum_id\":%lld,\"step\":%lld,\"peer_group\":\"%s\",\"bytes\":%llu,\"ms\":%u,\"detail\":\"%s\"",
             m->group, m->rank, (long long)w->quorum_id, (long long)w->step, w->peer_group ? w->peer_group : "",
             (unsigned long long)w->bytes, w->ms, detail);
    }
    px_log_info("%s group=%s rank=%d quorum_id=%lld step=%lld peer=%s bytes=%llu ms=%u %s", w->kind, m->group, m->rank,
                (long long)w->quorum_id, (long long)w->step, w->peer_group ? w->peer_group : "-",
                (unsigned long long)w->bytes, w->ms, w->detail ? w->detail : "");
    if (!strcmp(w->kind, "heal_started")) m->state = PX_STATE_HEALING;
    if (!strcmp(w->kind, "checkpoint_deferred")) c->train.checkpoints_deferred++;
    if (!strcmp(w->kind, "heal_finished")) {
        m->state = PX_STATE_HEALTHY;
        c->train.heal_bytes += w->bytes;
        px_histo_observe(&c->train.heal_seconds, w->ms / 1000.0);
    }
    note_history_event(c, m, w);
    if (!strcmp(w->kind, "outer_step")) {
        c->stats.outer_steps++;
        c->stats.outer_wire_bytes += w->bytes;
    }
    /* A group committed the job's last step: its result exists. Workers
     * still behind learn it from acks and pushes and leave rather than
     * train on alone (with no group holding the state, from scratch). */
    if (finished) c->finished_step = w->step;
    reply_ack(c, ident, ident_len, msg->request_id);
}

static void send_store_value(px_coordinator_t *c, const void *ident, size_t ident_len, uint64_t req_id,
                             const char *key, int found, const void *value, size_t len) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__StoreValue sv = PHALANX__STORE_VALUE__INIT;
    sv.key = (char *)key;
    sv.has_found = 1;
    sv.found = found;
    sv.has_value = found;
    sv.value.data = (uint8_t *)value;
    sv.value.len = len;
    env.has_request_id = 1;
    env.request_id = req_id;
    env.body_case = PHALANX__ENVELOPE__BODY_STORE_VALUE;
    env.store_value = &sv;
    send_to(c, ident, ident_len, &env);
}

/* Waiter peers are stored as [len byte][identity bytes]. */
static void answer_waiter(void *ctx, const px_kv_answer_t *a) {
    px_coordinator_t *c = ctx;
    const unsigned char *p = a->peer;
    send_store_value(c, p + 1, p[0], a->request_id, a->key, a->found, a->value, a->len);
}

static int store_fenced(px_coordinator_t *c, const void *ident, size_t ident_len, uint64_t req_id, int64_t qid) {
    if (qid == c->quorum.id) return 0;
    char why[128];
    snprintf(why, sizeof why, "quorum %lld is not the current quorum %lld", (long long)qid, (long long)c->quorum.id);
    reply_error(c, ident, ident_len, req_id, PHALANX__ERROR_CODE__STALE_QUORUM, why);
    return 1;
}

/* A member using the store under the current quorum is taking part in its
 * rendezvous (stall detection, see detect_stalled). */
static void note_rendezvous(px_coordinator_t *c, px_member_t *m) {
    m->store_qid = c->quorum.id;
    if (!c->first_store_ms) c->first_store_ms = px_now_ms();
}

/* A store request px_kv_* refused: a limit, or no memory. */
static void store_refused(px_coordinator_t *c, const void *ident, size_t ident_len, uint64_t req_id,
                          const px_member_t *m, int rc) {
    if (rc == PX_KV_NO_MEMORY) {
        reply_error(c, ident, ident_len, req_id, PHALANX__ERROR_CODE__RESOURCE_LIMIT, "coordinator out of memory");
        return;
    }
    int kind = rc == PX_KV_LIMIT_KEYS ? PX_LIMIT_STORE_KEYS : rc == PX_KV_LIMIT_BYTES ? PX_LIMIT_STORE_BYTES : PX_LIMIT_STORE_WAITERS;
    limit_refused(c, ident, ident_len, req_id, kind, m->group, m->rank);
}

static void on_store_set(px_coordinator_t *c, const void *ident, size_t ident_len, const px_msg_t *msg) {
    px_member_t *m = require_member(c, ident, ident_len, msg->request_id);
    if (!m) return;
    const Phalanx__StoreSet *s = msg->store_set;
    if (store_fenced(c, ident, ident_len, msg->request_id, s->quorum_id)) return;
    note_rendezvous(c, m);
    int rc = px_kv_set(c->kv, s->quorum_id, s->key, s->value.data, s->value.len, answer_waiter, c);
    if (rc != PX_KV_OK) store_refused(c, ident, ident_len, msg->request_id, m, rc);
    else reply_ack(c, ident, ident_len, msg->request_id);
}

static void on_store_get(px_coordinator_t *c, const void *ident, size_t ident_len, const px_msg_t *msg) {
    px_member_t *m = require_member(c, ident, ident_len, msg->request_id);
    if (!m) return;
    const Phalanx__StoreGet *s = msg->store_get;
    if (store_fenced(c, ident, ident_len, msg->request_id, s->quorum_id)) return;
    note_rendezvous(c, m);
    const void *v;
    size_t len;
    if (px_kv_get(c->kv, s->quorum_id, s->key, &v, &len)) {
        send_store_value(c, ident, ident_len, msg->request_id, s->key, 1, v, len);
    } else if (s->has_wait_ms && s->wait_ms > 0) {
        unsigned char *peer = malloc(ident_len + 1);
        if (!peer) return;
        peer[0] = (unsigned char)ident_len;
        memcpy(peer + 1, ident, ident_len);
        int rc = px_kv_wait(c->kv, s->quorum_id, s->key, px_now_ms() + s->wait_ms, peer, msg->request_id);
        if (rc != PX_KV_OK) {
            free(peer);
            store_refused(c, ident, ident_len, msg->request_id, m, rc);
        }
    } else {
        send_store_value(c, ident, ident_len, msg->request_id, s->key, 0, NULL, 0);
    }
}

/* The mode the groups train in, for /status. It is part of their layout
 * (".diloco<H>", ".auto<H>": groups started with --mode auto train in the
 * mode quorums announce), that of the quorum's members when they train;
 * before, the coordinator's --mode (auto: with the mode it announces). */
static const char *train_mode(px_coordinator_t *c) {
    const char *announced = px_job_mode_name(c->mode);
    for (int i = 0; i < c->members.n; i++) {
        const px_member_t *m = &c->members.members[i];
        if (m->state == PX_STATE_LOST || px_quorum_find(&c->quorum, m->group) < 0 || !m->layout[0]) continue;
        const char *d = strstr(m->layout, ".diloco"), *a = strstr(m->layout, ".auto");
        if (d) snprintf(c->mode_now, sizeof c->mode_now, "diloco H=%d", atoi(d + 7));
        else if (a && c->mode == PX_JOB_DILOCO) snprintf(c->mode_now, sizeof c->mode_now, "auto: diloco H=%d", atoi(a + 5));
        else if (a) snprintf(c->mode_now, sizeof c->mode_now, "auto: sync");
        else snprintf(c->mode_now, sizeof c->mode_now, "sync");
        return c->mode_now;
    }
    if (!c->auto_mode) return c->cfg.mode;
    snprintf(c->mode_now, sizeof c->mode_now, "auto: %s", announced);
    return c->mode_now;
}

static px_status_view_t status_view(px_coordinator_t *c) {
    px_status_view_t v = {0};
    v.job = c->cfg.job;
    v.mode = train_mode(c);
    v.mode_reason = c->mode_reason;
    v.mode_switches = c->mode_switches;
    v.mode_diloco = c->mode == PX_JOB_DILOCO;
    v.failures_per_hour = c->failures_per_hour;
    v.has_comm_share = c->has_comm_share;
    v.comm_share = c->comm_share;
    v.quorum = &c->quorum;
    v.members = &c->members;
    v.stats = &c->stats;
    v.train = &c->train;
    if (c->events) {
        px_events_stats_t es;
        px_events_stats(c->events, &es);
        v.events = (px_status_events_t){es.produced, es.delivered, es.pending, es.spilled, es.delivery_failures};
    }
    v.store_keys = px_kv_count(c->kv);
    v.store_bytes = px_kv_bytes(c->kv);
    v.store_waiters = px_kv_waiters(c->kv);
    v.heap_bytes = px_status_heap_bytes();
    v.now_ms = px_now_ms();
    v.uptime_ms = v.now_ms - c->started_ms;
    v.wall_ms = px_wall_ms();
    v.version = px_version();
    v.progress = &c->progress;
    v.target_step = px_status_target_step(&c->members);
    v.target_groups = c->cfg.target_groups;
    v.job_finished = c->finished_step > 0;
    v.metrics_groups = c->cfg.metrics_groups;
    return v;
}

static void on_status_request(px_coordinator_t *c, const void *ident, size_t ident_len, const px_msg_t *msg) {
    px_status_view_t v = status_view(c);
    char *json = px_status_json(&v, NULL);
    if (!json) return;
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__StatusReply st = PHALANX__STATUS_REPLY__INIT;
    st.json = json;
    env.has_request_id = 1;
    env.request_id = msg->request_id;
    env.body_case = PHALANX__ENVELOPE__BODY_STATUS;
    env.status = &st;
    send_to(c, ident, ident_len, &env);
    free(json);
}

/* phalanxctl drain: the group leaves at a step boundary, the others lose no
 * step (Quorum.draining). Refused when it has no live member, or when the
 * quorum without it (and without the groups drained already) would fall
 * below --min-replicas: the job would stop, which is not maintenance. */
static void on_drain_request(px_coordinator_t *c, const void *ident, size_t ident_len, const px_msg_t *msg) {
    const char *g = msg->drain_req->group;
    int live = 0, already = 0;
    for (int i = 0; i < c->members.n; i++) {
        const px_member_t *m = &c->members.members[i];
        if (m->state == PX_STATE_LOST || strcmp(m->group, g) != 0) continue;
        live++;
        already |= m->draining;
    }
    char why[300];
    if (live == 0) {
        snprintf(why, sizeof why, "no live member of group '%s'", g);
        reply_error(c, ident, ident_len, msg->request_id, PHALANX__ERROR_CODE__NOT_FOUND, why);
        return;
    }
    if (already) { /* asked twice: the first request stands */
        reply_ack(c, ident, ident_len, msg->request_id);
        return;
    }
    int in_quorum = px_quorum_find(&c->quorum, g) >= 0, left = 0;
    if (in_quorum) { /* the quorum's groups less this one and those being drained already */
        px_quorum_t gone;
        px_quorum_init(&gone);
        int oom = px_quorum_insert_sorted(&gone, g, 0) != 0;
        for (int i = 0; i < c->members.n && !oom; i++) {
            const px_member_t *m = &c->members.members[i];
            if (m->draining && m->state != PX_STATE_LOST && px_quorum_find(&c->quorum, m->group) >= 0)
                oom = px_quorum_insert_sorted(&gone, m->group, 0) != 0;
        }
        left = oom ? 0 : c->quorum.n - gone.n;
        px_quorum_free(&gone);
    }
    int need = c->cfg.min_replicas > 1 ? c->cfg.min_replicas : 1;
    if (in_quorum && left < need) {
        snprintf(why, sizeof why, "draining group '%s' would leave %d group%s in the quorum, below --min-replicas %d: "
                 "the job would stop", g, left, left == 1 ? "" : "s", need);
        reply_error(c, ident, ident_len, msg->request_id, PHALANX__ERROR_CODE__RESOURCE_LIMIT, why);
        emit(c, "drain_refused", "\"group\":\"%s\",\"quorum_id\":%lld,\"groups_left\":%d,\"min_replicas\":%d", g,
             (long long)c->quorum.id, left, need);
        return;
    }
    for (int i = 0; i < c->members.n; i++) {
        px_member_t *m = &c->members.members[i];
        if (m->state != PX_STATE_LOST && strcmp(m->group, g) == 0) {
            m->draining = 1;
            m->acked_ms = 0; /* its next heartbeat is answered: it learns at once */
        }
    }
    emit(c, "group_draining", "\"group\":\"%s\",\"quorum_id\":%lld,\"in_quorum\":%s,\"ranks\":%d", g,
         (long long)c->quorum.id, in_quorum ? "true" : "false", live);
    px_log_info("group_draining group=%s quorum_id=%lld in_quorum=%d ranks=%d", g, (long long)c->quorum.id, in_quorum,
                live);
    history_event(c, "group_draining", g, c->quorum.max_step, "%s asked to leave (drain)", g);
    c->quorum_dirty = 1;
    c->next_recompute_ms = 0; /* form the quorum without it now */
    reply_ack(c, ident, ident_len, msg->request_id);
}

static void bad_message(px_coordinator_t *c, const void *ident, size_t ident_len, uint64_t req_id,
                        Phalanx__ErrorCode code, const char *why) {
    c->stats.bad_messages++;
    char esc[512];
    px_json_escape(why, esc, sizeof esc);
    emit_limited(c, &c->rl_bad, "\"error\":\"%s\",\"detail\":\"%s\"", px_wire_error_name(code), esc);
    /* A few lines a second: a fuzzer must not flood the log. */
    if (px_rate_log_ok(&c->log_bad, px_now_ms()))
        px_log_warn("bad_message error=%s detail=\"%s\" total=%llu", px_wire_error_name(code), why,
                    (unsigned long long)c->stats.bad_messages);
    reply_error(c, ident, ident_len, req_id, code, why);
}

static void handle_frame(px_coordinator_t *c, const void *ident, size_t ident_len, int fd, const void *data,
                         size_t len) {
    c->stats.messages++;
    Phalanx__ErrorCode code = 0;
    char why[256];
    px_msg_t *msg = px_wire_decode(data, len, &code, why, sizeof why);
    if (!msg) {
        bad_message(c, ident, ident_len, 0, code, why);
        return;
    }
    if (c->cfg.token_file && (!msg->token || !px_auth_tokens_match(&c->tokens, msg->token))) {
        c->stats.auth_rejected++;
        emit_limited(c, &c->rl_auth, "\"message\":\"%s\",\"detail\":\"%s\"", px_wire_body_name(msg),
                     msg->token ? "wrong job token" : "no job token");
        if (c->stats.auth_rejected <= 10)
            px_log_warn("auth_rejected message=%s detail=%s", px_wire_body_name(msg), msg->token ? "wrong token" : "no token");
        reply_error(c, ident, ident_len, msg->request_id, PHALANX__ERROR_CODE__AUTH_REJECTED, "missing or wrong job token");
        px_wire_free(msg);
        return;
    }
    switch (msg->body_case) {
    case PHALANX__ENVELOPE__BODY_REG: on_register(c, ident, ident_len, fd, msg); break;
    case PHALANX__ENVELOPE__BODY_HB: on_heartbeat(c, ident, ident_len, fd, msg); break;
    case PHALANX__ENVELOPE__BODY_QUORUM_REQ: on_quorum_request(c, ident, ident_len, msg); break;
    case PHALANX__ENVELOPE__BODY_FAILURE: on_failure_report(c, ident, ident_len, msg); break;
    case PHALANX__ENVELOPE__BODY_STORE_SET: on_store_set(c, ident, ident_len, msg); break;
    case PHALANX__ENVELOPE__BODY_STORE_GET: on_store_get(c, ident, ident_len, msg); break;
    case PHALANX__ENVELOPE__BODY_STATUS_REQ: on_status_request(c, ident, ident_len, msg); break;
    case PHALANX__ENVELOPE__BODY_WORKER_EVENT: on_worker_event(c, ident, ident_len, msg); break;
    case PHALANX__ENVELOPE__BODY_DRAIN_REQ: on_drain_request(c, ident, ident_len, msg); break;
    default: {
        char w[96];
        snprintf(w, sizeof w, "'%s' is not a request the coordinator accepts", px_wire_body_name(msg));
        bad_message(c, ident, ident_len, msg->request_id, PHALANX__ERROR_CODE__UNKNOWN_TYPE, w);
    }
    }
    px_wire_free(msg);
}

/* ---- the loop ---------------------------------------------------------- */

/* Handles at most ROUTER_BATCH frames, so that a flood of (bad) frames
 * cannot starve the tick, the socket monitor or the HTTP server. */
#define ROUTER_BATCH 256
static void read_monitor(px_coordinator_t *c);

static void read_router(px_coordinator_t *c) {
    for (int k = 0; k < ROUTER_BATCH; k++) {
        zmq_msg_t id, body;
        const char *why = "";
        int got = px_zmq_router_recv(c->router, &id, &body, &why);
        if (got < 0) {
            zmq_msg_close(&id);
            zmq_msg_close(&body);
            return;
        }
        /* The TCP connection a frame came on: matched against the socket
         * monitor's DISCONNECTED events (the identity frame carries none). */
        int fd = got ? zmq_msg_get(&body, ZMQ_SRCFD) : -1;
        /* A DISCONNECTED event for an older connection on this fd number
         * was queued before this frame's connection existed: take it first,
         * or it would be charged to this connection's member (descriptor
         * numbers are reused at once). Only a frame on a connection its
         * sender was not known on can meet one (draining costs a syscall). */
        const px_member_t *known = got ? px_members_by_ident(&c->members, zmq_msg_data(&id), zmq_msg_size(&id)) : NULL;
        if (!known || known->fd != fd) read_monitor(c);
        if (!got)
            bad_message(c, zmq_msg_data(&id), zmq_msg_size(&id), 0, PHALANX__ERROR_CODE__BAD_MESSAGE, why);
        else
            handle_frame(c, zmq_msg_data(&id), zmq_msg_size(&id), fd, zmq_msg_data(&body), zmq_msg_size(&body));
        zmq_msg_close(&body);
        zmq_msg_close(&id);
    }
}

/* A new connection on descriptor fd (the monitor's ACCEPTED). */
static void note_accepted(px_coordinator_t *c, int fd) {
    if (fd < 0) return;
    if (fd >= c->fd_gen_cap) {
        int cap = c->fd_gen_cap ? c->fd_gen_cap : 1024;
        while (cap <= fd) cap *= 2;
        uint32_t *g = realloc(c->fd_gen, (size_t)cap * sizeof *g);
        if (!g) return; /* a reconnect on this number then stays "closed" until the member registers again */
        memset(g + c->fd_gen_cap, 0, (size_t)(cap - c->fd_gen_cap) * sizeof *g);
        c->fd_gen = g;
        int32_t *fm = realloc(c->fd_member, (size_t)cap * sizeof *fm);
        if (!fm) return; /* fd_gen_cap unchanged: both arrays are valid up to it */
        memset(fm + c->fd_gen_cap, 0, (size_t)(cap - c->fd_gen_cap) * sizeof *fm);
        c->fd_member = fm;
        c->fd_gen_cap = cap;
    }
    c->fd_gen[fd]++;
}

static void mark_closed(px_coordinator_t *c, px_member_t *m) {
    m->conn_closed = 1;
    m->closed_fd = m->fd;
    m->closed_gen = fd_gen(c, m->fd);
    m->fd = -1;
}

static void read_monitor(px_coordinator_t *c) {
    uint16_t event;
    uint32_t value;
    while (px_zmq_monitor_next(c->monitor, &event, &value)) {
        if (event == ZMQ_EVENT_ACCEPTED) {
            note_accepted(c, (int)value);
        } else if (event == ZMQ_EVENT_DISCONNECTED) {
            /* Its member through fd_member when that still holds (one
             * connection, one member: a DEALER's identity names one
             * registration); a scan otherwise (the entry moved). At 100,000
             * members a scan per closed connection made a mass reconnect
             * quadratic. */
            int fd = (int)value;
            int32_t slot = fd >= 0 && fd < c->fd_gen_cap ? c->fd_member[fd] : 0;
            px_member_t *hit = slot > 0 && slot <= c->members.n ? &c->members.members[slot - 1] : NULL;
            if (hit && hit->state != PX_STATE_LOST && hit->fd == fd) {
                mark_closed(c, hit);
                continue;
            }
            for (int i = 0; i < c->members.n; i++) {
                px_member_t *m = &c->members.members[i];
                if (m->state != PX_STATE_LOST && m->fd == fd) mark_closed(c, m);
            }
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
            /* With CURVE on: a client without CURVE, or one holding another
             * coordinator public key. (A refused key is the ZAP handler's event.) */
            c->stats.auth_rejected++;
            emit_limited(c, &c->rl_auth, "\"message\":\"handshake\",\"mechanism\":\"CURVE\",\"detail\":\"handshake failed (ZMTP error %u): a client without CURVE, or with another coordinator public key\"",
                         value);
        }
    }
}

/* Events from the ZAP handler's thread (auth.c), already rate limited there. */
static void auth_event(void *ctx, const char *type, const char *fields, uint64_t count) {
    px_coordinator_t *c = ctx;
    if (!strcmp(type, "auth_rejected")) c->stats.auth_rejected += count;
    emit(c, type, "%s", fields);
}

/* The token file changed (a Kubernetes Secret update swaps it in place) or
 * SIGHUP asked: read it again. A file that does not parse keeps the tokens
 * in force, so a half-written edit locks nobody out. */
static void check_token_file(px_coordinator_t *c, int64_t now) {
    int asked = c->cfg.reload_token && atomic_exchange(c->cfg.reload_token, 0);
    if (!asked && now - c->token_checked_ms < 1000) return;
    c->token_checked_ms = now;
    struct stat st;
    int have = stat(c->cfg.token_file, &st) == 0;
    if (!asked && have && st.st_ino == c->token_st.st_ino && st.st_dev == c->token_st.st_dev &&
        st.st_size == c->token_st.st_size && st.st_mtim.tv_sec == c->token_st.st_mtim.tv_sec &&
        st.st_mtim.tv_nsec == c->token_st.st_mtim.tv_nsec && st.st_ctim.tv_sec == c->token_st.st_ctim.tv_sec &&
        st.st_ctim.tv_nsec == c->token_st.st_ctim.tv_nsec)
        return;
    if (!asked && !have) return; /* gone for a moment (an editor's rename): keep the tokens, look again */
    px_auth_tokens_t next;
    char err[400] = "";
    if (px_auth_tokens_load(c->cfg.token_file, &next, err, sizeof err) == 0) {
        c->tokens = next;
        px_log_info("token_reloaded file=%s tokens=%d", c->cfg.token_file, next.n);
    } else {
        px_log_warn("token_reload_failed %s: the %d token(s) in force stay", err, c->tokens.n);
    }
    if (have) c->token_st = st;
    char file_esc[1100], err_esc[1000];
    px_json_escape(c->cfg.token_file, file_esc, sizeof file_esc);
    px_json_escape(err, err_esc, sizeof err_esc);
    emit(c, "token_reloaded", "\"file\":\"%s\",\"tokens\":%d,\"error\":\"%s\"", file_esc, c->tokens.n, err_esc);
    memset(&next, 0, sizeof next); /* no copy of a secret left on the stack */
}

/* ---- mode switching (--mode auto) -------------------------------------- */

#define MODE_EVAL_MS 1000 /* the figures move over seconds; a loss is weighed at once */

/* The job's comm share: the mean of what the quorum's groups' rank 0 last
 * reported; 0 when none does. */
static int job_comm_share(const px_coordinator_t *c, double *share) {
    double sum = 0;
    int n = 0;
    for (int i = 0; i < c->members.n; i++) {
        const px_member_t *m = &c->members.members[i];
        if (m->state == PX_STATE_LOST || m->rank != 0 || !m->has_comm_share) continue;
        if (px_quorum_find(&c->quorum, m->group) < 0) continue;
        sum += m->comm_share;
        n++;
    }
    *share = n ? sum / n : 0.0;
    return n > 0;
}

/* Measures (for /status under every mode) and, under --mode auto, asks the
 * policy; a switch is carried by the next quorum (recompute_quorum, this
 * tick). Not before a quorum exists, nor while a restarted coordinator may
 * still adopt its workers' quorum. */
static void evaluate_mode(px_coordinator_t *c, int64_t now) {
    if (now - c->mode_eval_ms < MODE_EVAL_MS && !c->loss_noted) return;
    c->mode_eval_ms = now;
    c->loss_noted = 0;
    int failures = px_loss_ring_count_since(&c->losses, now - c->policy.window_ms);
    c->failures_per_hour = px_mode_failures_per_hour(failures, c->policy.window_ms);
    c->has_comm_share = job_comm_share(c, &c->comm_share);
    if (!c->auto_mode || c->mode_pending || c->quorum.id <= 0 || in_recovery_window(c, now)) return;
    px_mode_inputs_t in = {c->mode, failures, c->has_comm_share, c->comm_share, now - c->last_switch_ms};
    px_job_mode_t next;
    if (!px_mode_decide(&c->policy, &in, &next, c->mode_why, sizeof c->mode_why)) return;
    c->mode_pending = 1;
    c->quorum_dirty = 1;
}

static void tick(px_coordinator_t *c, int64_t now) {
    if (c->cfg.token_file) check_token_file(c, now);
    flush_rate_summaries(c, now, 0);
    px_auth_drain(c->auth, auth_event, c);
    if (c->udp) px_udp_read(c->udp, UDP_DRAIN_MAX, on_datagram, c);
    detect_losses(c, now);
    detect_stalled(c, now);
    if (now - c->expired_ms >= 1000) { /* lost members leave after minutes: once a second is plenty */
        px_members_expire(&c->members, now, &c->live);
        c->expired_ms = now;
    }
    evaluate_mode(c, now);
    /* A compute costs members (about 20 ms at 100,000): after one, the
     * next waits four times its cost, so that registrations arriving every
     * tick (a large job starting) cannot take the loop from heartbeats. */
    if ((c->quorum_dirty || c->rebuild_requested_ms) && now >= c->next_recompute_ms) {
        int64_t t0 = px_now_us();
        recompute_quorum(c, now);
        c->next_recompute_ms = now + 4 * (px_now_us() - t0) / 1000;
    }
    px_kv_expire(c->kv, now, answer_waiter, c);
    if (c->events) px_events_poll(c->events);
    if (now - c->hb_window_start_ms >= 1000) {
        c->stats.heartbeats_per_s = (double)c->hb_window_count * 1000.0 / (double)(now - c->hb_window_start_ms);
        c->hb_window_count = 0;
        c->hb_window_start_ms = now;
    }
}

/* GET /api/history (docs/protocol.md): what is new since the page's last
 * poll, with this run's id and the current quorum, mode and step. */
static char *history_json(px_coordinator_t *c, const px_status_view_t *v, uint64_t since, size_t *len) {
    px_buf_t b;
    px_buf_init(&b);
    px_buf_printf(&b, "{\"run_id\":\"%s\",\"job\":", c->run_id);
    px_buf_json_str(&b, c->cfg.job);
    px_buf_printf(&b, ",\"seq\":%llu,\"now_ms\":%lld,\"step\":%lld,\"mode\":",
                  (unsigned long long)px_history_seq(c->history), (long long)px_wall_ms(),
                  (long long)(c->job_step > c->quorum.max_step ? c->job_step : c->quorum.max_step));
    px_buf_json_str(&b, v->mode);
    px_buf_printf(&b, ",\"mode_reason\":");
    px_buf_json_str(&b, c->mode_reason);
    px_buf_printf(&b, ",\"outer_steps\":%llu,\"outer_wire_bytes\":%llu", (unsigned long long)c->stats.outer_steps,
                  (unsigned long long)c->stats.outer_wire_bytes);
    px_status_progress_json(&b, v);
    px_buf_printf(&b, ",\"quorum\":{\"id\":%lld,\"groups\":[", (long long)c->quorum.id);
    for (int i = 0; i < c->quorum.n; i++) {
        if (i) px_buf_append(&b, ",", 1);
        px_buf_json_str(&b, c->quorum.groups[i].name);
    }
    px_buf_printf(&b, "]},");
    px_status_groups_json(&b, &c->members, &c->quorum, c->cfg.target_groups);
    px_buf_printf(&b, ",");
    px_history_json(c->history, since, &b);
    px_buf_printf(&b, "}\n");
    return px_buf_take(&b, len);
}

/* /status's query: the value of `members` (1 when absent), or -1 when it
 * is not 0 or 1. Other parameters are ignored, as any other page's are. */
static int status_members_query(const char *query) {
    int members = 1;
    for (const char *p = query; p && *p;) {
        size_t n = strcspn(p, "&");
        if (n >= 8 && !strncmp(p, "members=", 8)) {
            if (n == 9 && (p[8] == '0' || p[8] == '1')) members = p[8] - '0';
            else return -1;
        }
        p += n + (p[n] == '&');
    }
    return members;
}

/* A one-line text answer with an HTTP status (500 when out of memory). */
static int text_reply(const char *text, char **body, size_t *len, const char **type, int code) {
    size_t n = strlen(text);
    *body = malloc(n + 2);
    if (*body) snprintf(*body, n + 2, "%s\n", text);
    *len = n + 1;
    *type = "text/plain; charset=utf-8";
    return *body ? code : 500;
}

static int http_handler(void *ctx, const char *path, const char *query, char **body, size_t *len,
                        const char **type) {
    px_coordinator_t *c = ctx;
    if (strcmp(path, "/healthz") == 0) {
        /* Answered by the event loop itself: a reply means the loop runs
         * (Kubernetes' liveness and readiness probes). */
        *body = strdup("ok\n");
        *len = 3;
        *type = "text/plain";
        return *body ? 200 : 500;
    }
    px_status_view_t v = status_view(c);
    if (strcmp(path, "/status") == 0) {
        int members = status_members_query(query);
        if (members < 0)
            return text_reply("/status: members takes 0 (leave the member array out) or 1", body, len, type, 400);
        v.omit_members = !members;
        *body = px_status_json(&v, len);
        *type = "application/json";
    } else if (strcmp(path, "/metrics") == 0) {
        *body = px_status_metrics(&v, len);
        *type = "text/plain; version=0.0.4";
    } else if (strcmp(path, "/status.txt") == 0) {
        *body = px_status_text(&v, len);
        *type = "text/plain; charset=utf-8";
    } else if (strcmp(path, "/") == 0) {
        *body = px_status_html(&v, len);
        *type = "text/html; charset=utf-8";
    } else if (strcmp(path, "/api/history") == 0) {
        uint64_t since;
        char why[160];
        if (px_history_parse_query(query, &since, why, sizeof why) != 0) return text_reply(why, body, len, type, 400);
        *body = history_json(c, &v, since, len);
        *type = "application/json";
    } else {
        return 404;
    }
    return *body ? 200 : 500;
}

/* The loop itself stalled (SIGSTOP, descheduled, a slow system call) for
 * `ms`: nobody was listening, so that time is not silence of the members.
 * Their heartbeats are queued, unread; shift every member's last-heard time
 * by the stall, so each is judged only on time the coordinator listened. */
static void credit_stall(px_coordinator_t *c, int64_t ms, int64_t now) {
    c->stats.loop_stalls++;
    px_log_warn("loop_stall ms=%lld: member deadlines shifted by the stall", (long long)ms);
    for (int i = 0; i < c->members.n; i++) {
        px_member_t *m = &c->members.members[i];
        if (m->state == PX_STATE_LOST) continue;
        m->last_hb_ms = m->last_hb_ms + ms < now ? m->last_hb_ms + ms : now;
    }
    if (c->first_store_ms) c->first_store_ms = c->first_store_ms + ms < now ? c->first_store_ms + ms : now;
}

int px_coordinator_run(px_coordinator_t *c, volatile sig_atomic_t *stop) {
    zmq_pollitem_t items[3 + 1 + PX_HTTP_MAX_CONNS];
    int64_t next_tick = px_now_ms(), last_wake = next_tick;
    /* From one wake-up to the next, a turn takes its poll wait plus its work;
     * more than a heartbeat interval beyond the wait means the loop was not
     * listening. Checked right after the poll, before any queued frame is
     * looked at, and again before the tick applies the loss rule. */
    int64_t stall_ms = c->live.heartbeat_interval_ms > 2 * TICK_MS ? c->live.heartbeat_interval_ms : 2 * TICK_MS;
    while (!*stop) {
        int n = 0;
        items[n++] = (zmq_pollitem_t){c->router, 0, ZMQ_POLLIN, 0};
        items[n++] = (zmq_pollitem_t){c->monitor, 0, ZMQ_POLLIN, 0};
        int iu = c->udp ? n++ : -1;
        if (c->udp) items[iu] = (zmq_pollitem_t){NULL, px_udp_fd(c->udp), ZMQ_POLLIN, 0};
        int nh = c->http ? px_http_pollitems(c->http, items + n) : 0;
        int64_t now = px_now_ms();
        long wait = next_tick > now ? (long)(next_tick - now) : 0;
        int rc = zmq_poll(items, n + nh, wait);
        if (rc < 0 && errno != EINTR) {
            px_log_error("zmq_poll failed: %s", zmq_strerror(errno));
            return 1;
        }
        int64_t woke = px_now_ms();
        if (woke - last_wake - wait > stall_ms) credit_stall(c, woke - last_wake - wait, woke);
        last_wake = woke;
        /* Frames before the monitor: a frame sent just before its connection
         * closed is queued before the DISCONNECTED event, and handling it
         * afterwards would wrongly clear the closed-connection evidence. */
        if (items[0].revents & ZMQ_POLLIN) read_router(c);
        if (items[1].revents & ZMQ_POLLIN) read_monitor(c);
        if (iu >= 0 && (items[iu].revents & ZMQ_POLLIN)) px_udp_read(c->udp, UDP_BATCH, on_datagram, c);
        if (nh) px_http_service(c->http, items + n, nh, px_now_ms());
        now = px_now_ms();
        /* Stopped after the poll returned (e.g. SIGSTOP just after answering
         * an HTTP request): that is not the members' silence either, and the
         * tick below is about to judge it. */
        if (now - last_wake > stall_ms) {
            credit_stall(c, now - last_wake, now);
            last_wake = now;
        }
        if (now >= next_tick) {
            tick(c, now);
            next_tick = now + TICK_MS;
        }
    }
    return 0;
}

/* ---- construction ------------------------------------------------------ */

px_coordinator_t *px_coordinator_new(const px_coordinator_config_t *cfg, char *err, size_t errlen, int *bad_config) {
    *bad_config = 0;
    px_coordinator_t *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->cfg = *cfg;
    c->live.heartbeat_interval_ms = cfg->heartbeat_interval_ms;
    c->live.heartbeat_timeout_ms = cfg->heartbeat_timeout_ms;
    c->started_ms = c->hb_window_start_ms = px_now_ms();
    c->auto_mode = cfg->mode && !strcmp(cfg->mode, "auto");
    c->mode = cfg->mode && !strcmp(cfg->mode, "diloco") ? PX_JOB_DILOCO : PX_JOB_SYNC;
    c->policy = (px_mode_policy_t){cfg->auto_failures_per_hour, cfg->auto_comm_share, cfg->auto_window_ms,
                                   cfg->auto_hold_ms};
    c->last_switch_ms = c->started_ms; /* the hold runs from the start too */
    c->rl_bad = (px_rate_t){.name = "bad_message", .per_s = PX_PEER_EVENTS_PER_S};
    c->rl_auth = (px_rate_t){.name = "auth_rejected", .per_s = PX_PEER_EVENTS_PER_S};
    c->rl_conflict = (px_rate_t){.name = "identity_conflict", .per_s = PX_PEER_EVENTS_PER_S};
    c->rl_refused = (px_rate_t){.name = "report_refused", .per_s = PX_PEER_EVENTS_PER_S};
    c->log_bad = (px_rate_t){.name = "bad_message", .per_s = PX_RATE_LOG_LINES_PER_S};
    c->log_conflict = (px_rate_t){.name = "identity_conflict", .per_s = PX_RATE_LOG_LINES_PER_S};
    c->log_udp_dropped = (px_rate_t){.name = "udp_datagram_dropped", .per_s = PX_RATE_LOG_LINES_PER_S};
    c->log_udp_off = (px_rate_t){.name = "udp_heartbeats_silent", .per_s = PX_RATE_LOG_LINES_PER_S};
    px_quorum_init(&c->quorum);
    c->kv = px_kv_new();
    c->history = px_history_new(PX_HISTORY_POINTS, PX_HISTORY_EVENTS);
    c->job_step = c->last_eval_step = -1;
    px_progress_init(&c->progress);
    px_histo_init(&c->train.step_seconds, STEP_BOUNDS, NBOUNDS(STEP_BOUNDS));
    px_histo_init(&c->train.recovery_seconds, RECOVERY_BOUNDS, NBOUNDS(RECOVERY_BOUNDS));
    px_histo_init(&c->train.promotion_seconds, RECOVERY_BOUNDS, NBOUNDS(RECOVERY_BOUNDS));
    px_histo_init(&c->train.heal_seconds, HEAL_BOUNDS, NBOUNDS(HEAL_BOUNDS));
    if (!c->kv || !c->history || px_members_init(&c->members) != 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    apply_limits(c);
    c->zctx = zmq_ctx_new();
    c->router = zmq_socket(c->zctx, ZMQ_ROUTER);
    int one = 1, zero = 0, hwm = 100000;
    int64_t maxmsg = ROUTER_MAX_MSG;
    zmq_setsockopt(c->router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(c->router, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
    zmq_setsockopt(c->router, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(c->router, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(c->router, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(c->router, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    /* ZMTP pings, answered by the peer's own ZeroMQ thread: a process that
     * is frozen (SIGSTOP, swapped out) or gone without a FIN stops
     * answering, and its connection is closed within two timeouts. Closed,
     * its datagrams no longer count (on_datagram): a leaked heartbeat key
     * cannot keep it alive. */
    int ping_ms = (int)(2 * cfg->heartbeat_timeout_ms);
    zmq_setsockopt(c->router, ZMQ_HEARTBEAT_IVL, &ping_ms, sizeof ping_ms);
    zmq_setsockopt(c->router, ZMQ_HEARTBEAT_TIMEOUT, &ping_ms, sizeof ping_ms);
    if (cfg->token_file) {
        if (px_auth_tokens_load(cfg->token_file, &c->tokens, err, errlen) != 0) {
            *bad_config = 1;
            goto fail;
        }
        stat(cfg->token_file, &c->token_st);
        c->token_checked_ms = px_now_ms();
    }
    if (cfg->curve_secret_key) {
        /* The ZAP handler must be bound before the socket accepts anyone: a
         * CURVE server without one admits every client. */
        c->auth = px_auth_start(c->zctx, cfg->authorized_keys, cfg->reload_keys, err, errlen);
        if (!c->auth) goto fail;
        if (zmq_setsockopt(c->router, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
            zmq_setsockopt(c->router, ZMQ_CURVE_SECRETKEY, cfg->curve_secret_key, strlen(cfg->curve_secret_key)) != 0 ||
            zmq_setsockopt(c->router, ZMQ_ZAP_DOMAIN, "phalanx", 7) != 0) {
            snprintf(err, errlen, "--curve-secret-key-file: CURVE refused: %s", zmq_strerror(errno));
            goto fail;
        }
    }
    if (zmq_bind(c->router, cfg->bind) != 0) {
        int e = errno;
        /* in use or not permitted: the moment's; no such address or interface here: the configuration's */
        *bad_config = e != EADDRINUSE && e != EACCES && e != ENOMEM && e != EMFILE && e != ENFILE;
        snprintf(err, errlen, "--bind: cannot bind '%s': %s%s", cfg->bind, zmq_strerror(e),
                 e == EADDRINUSE ? " (another process listens there: stop it, or choose another port)" : "");
        goto fail;
    }
    if (cfg->heartbeat_udp && !strncmp(cfg->bind, "tcp://", 6)) {
        char last[512] = "", uerr[300];
        size_t ll = sizeof last;
        zmq_getsockopt(c->router, ZMQ_LAST_ENDPOINT, last, &ll);
        c->udp = px_udp_open(last, uerr, sizeof uerr);
        if (!c->udp) px_log_warn("udp_heartbeats_off bind=%s: %s; workers heartbeat over ZeroMQ", cfg->bind, uerr);
    }
    char mon_ep[64];
    snprintf(mon_ep, sizeof mon_ep, "inproc://px-monitor-%p", (void *)c);
    int mon_events = ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_MONITOR_STOPPED;
    if (cfg->curve_secret_key) mon_events |= ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    zmq_socket_monitor(c->router, mon_ep, mon_events);
    c->monitor = zmq_socket(c->zctx, ZMQ_PAIR);
    zmq_setsockopt(c->monitor, ZMQ_LINGER, &zero, sizeof zero);
    /* No limit on queued events: at the default (1,000) a mass disconnect
     * (thousands of connections closing while the loop is busy) blocks
     * libzmq's I/O thread, and with it every connection, until we read. */
    zmq_setsockopt(c->monitor, ZMQ_RCVHWM, &zero, sizeof zero);
    if (zmq_connect(c->monitor, mon_ep) != 0) {
        snprintf(err, errlen, "socket monitor: %s", zmq_strerror(errno));
        goto fail;
    }
    if (cfg->http_host) {
        c->http = px_http_new(cfg->http_host, cfg->http_port, http_handler, c, err, errlen);
        if (!c->http) goto fail;
    }
    c->events = px_events_new(cfg->events, cfg->job, cfg->spill_dir, err, errlen);
    if (cfg->events && strcmp(cfg->events, "none") != 0 && !c->events) goto fail;
    if (c->events) snprintf(c->run_id, sizeof c->run_id, "%s", px_events_run_id(c->events));
    else snprintf(c->run_id, sizeof c->run_id, "%016llx", (unsigned long long)px_now_us() ^ ((unsigned long long)getpid() << 40));
    px_log_info("coordinator_started job=%s bind=%s udp_port=%d http=%s:%d events=%s heartbeat_interval_ms=%lld heartbeat_timeout_ms=%lld min_replicas=%d",
                cfg->job, cfg->bind, px_udp_port(c->udp), cfg->http_host ? cfg->http_host : "off", c->http ? px_http_port(c->http) : 0,
                cfg->events ? cfg->events : "none", (long long)cfg->heartbeat_interval_ms,
                (long long)cfg->heartbeat_timeout_ms, cfg->min_replicas);
    emit(c, "coordinator_started", "\"bind\":\"%s\",\"mode\":\"%s\",\"auth\":\"%s\"", cfg->bind, cfg->mode,
         c->auth ? (cfg->token_file ? "curve+token" : "curve") : cfg->token_file ? "token" : "none");
    return c;
fail:
    px_coordinator_destroy(&c, 0);
    return NULL;
}

int px_coordinator_http_port(const px_coordinator_t *c) { return c->http ? px_http_port(c->http) : 0; }

void px_coordinator_destroy(px_coordinator_t **self, int flush_ms) {
    px_coordinator_t *c = *self;
    if (!c) return;
    if (c->events) {
        flush_rate_summaries(c, px_now_ms(), 1);
        px_auth_stop(&c->auth, auth_event, c); /* its last summary goes into the log */
        emit(c, "coordinator_stopped", "\"quorum_id\":%lld", (long long)c->quorum.id);
        px_events_destroy(&c->events, flush_ms);
    }
    px_http_destroy(&c->http);
    px_udp_close(&c->udp);
    px_auth_stop(&c->auth, NULL, NULL);
    /* Closing the ROUTER ends its monitoring; its last events are read
     * before the monitor is closed. (Stopping the monitor first waits on a
     * lock libzmq's I/O thread may hold while it sends an event no one reads:
     * that deadlocked a stop after 12,500 connections closed at once.) */
    if (c->router) zmq_close(c->router);
    if (c->monitor) {
        uint16_t event;
        uint32_t value;
        int64_t until = px_now_ms() + 2000;
        while (px_now_ms() < until) {
            zmq_pollitem_t it = {c->monitor, 0, ZMQ_POLLIN, 0};
            if (zmq_poll(&it, 1, 100) <= 0) break;
            if (px_zmq_monitor_next(c->monitor, &event, &value) && event == ZMQ_EVENT_MONITOR_STOPPED) break;
        }
        zmq_close(c->monitor);
    }
    if (c->zctx) zmq_ctx_term(c->zctx);
    px_kv_destroy(&c->kv);
    px_history_destroy(&c->history);
    px_members_free(&c->members);
    px_quorum_free(&c->quorum);
    free(c->fd_gen);
    free(c->fd_member);
    free(c);
    *self = NULL;
}
