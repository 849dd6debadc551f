/* Implementation of agent.h.
 *
 * Threads: callers never touch the socket. They encode a frame, put it in the
 * outbox and wake the agent through an eventfd that its zmq_poll watches;
 * synchronous calls (store, quorum) then wait on a condition variable for the
 * reply the agent thread files under their request id. The agent thread does
 * all socket I/O: sends the outbox, heartbeats on time, re-registers when the
 * coordinator no longer knows us, and records pushed quorums. */
#include "agent.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include "px_log.h"
#include "px_time.h"
#include "px_wire.h"

#define MAX_CALLS 32
#define OUTBOX_MAX 256
#define REGISTER_RETRY_MS 500
#define REQUEST_RESEND_MS 1000

typedef struct {
    uint64_t id; /* 0: free */
    px_msg_t *reply;
} call_t;

typedef struct {
    void *buf;
    size_t len;
} frame_t;

struct px_agent {
    px_agent_config_t cfg;
    char group[PX_QUORUM_NAME_MAX], job[64], token[260], endpoint[512];
    void *zctx, *sock;
    int wake_fd;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    /* guarded by mu */
    int registered;
    int64_t hb_interval_ms;
    int64_t step, quorum_id_held;
    int state;
    int64_t known_qid;
    int64_t finished_step;
    px_quorum_t latest;
    call_t calls[MAX_CALLS];
    frame_t outbox[OUTBOX_MAX];
    int n_out;
    uint64_t next_id;
    int quorum_wanted; /* a caller waits in px_agent_request_quorum */
    Phalanx__QuorumRequest pending_req;
    int leaving; /* reported its own departure: never register again */
    px_agent_quorum_hook_fn hook;
    void *hook_ctx;
    char fatal[256];
};

/* ---- helpers used by both sides --------------------------------------- */

static void *encode(px_agent_t *a, px_msg_t *env, size_t *len) {
    if (a->token[0]) env->token = a->token;
    return px_wire_encode(env, len);
}

static void wake(px_agent_t *a) {
    uint64_t one = 1;
    ssize_t w = write(a->wake_fd, &one, sizeof one);
    (void)w;
}

/* Queues a frame for the agent thread (caller holds mu). */
static void enqueue_locked(px_agent_t *a, void *buf, size_t len) {
    if (a->n_out == OUTBOX_MAX) { /* coordinator unreachable for long: drop the oldest */
        free(a->outbox[0].buf);
        memmove(&a->outbox[0], &a->outbox[1], (OUTBOX_MAX - 1) * sizeof a->outbox[0]);
        a->n_out--;
    }
    a->outbox[a->n_out++] = (frame_t){buf, len};
}

/* Fire and forget from a caller's thread: queue it for the agent thread.
 * leaving: this is our own departure notice; never register again after it. */
static void post(px_agent_t *a, px_msg_t *env, int leaving) {
    size_t len;
    void *buf = encode(a, env, &len);
    if (!buf) return;
    pthread_mutex_lock(&a->mu);
    enqueue_locked(a, buf, len);
    if (leaving) a->leaving = 1;
    pthread_mutex_unlock(&a->mu);
    wake(a);
}

static void send_now(px_agent_t *a, px_msg_t *env) {
    size_t len;
    void *buf = encode(a, env, &len);
    if (!buf) return;
    zmq_send(a->sock, buf, len, ZMQ_DONTWAIT);
    free(buf);
}

/* ---- agent thread ------------------------------------------------------ */

static void send_register(px_agent_t *a) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__Register r = PHALANX__REGISTER__INIT;
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    pthread_mutex_lock(&a->mu);
    r.group = a->group;
    r.has_rank = r.has_group_size = r.has_pid = r.has_step = r.has_quorum_id = 1;
    r.rank = (uint32_t)a->cfg.rank;
    r.group_size = (uint32_t)a->cfg.group_size;
    r.pid = (uint32_t)getpid();
    r.host = host;
    r.step = a->step;
    r.quorum_id = a->quorum_id_held;
    r.job = a->job[0] ? a->job : NULL;
    pthread_mutex_unlock(&a->mu);
    env.body_case = PHALANX__ENVELOPE__BODY_REG;
    env.reg = &r;
    send_now(a, &env);
}

static void send_heartbeat(px_agent_t *a) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__Heartbeat h = PHALANX__HEARTBEAT__INIT;
    pthread_mutex_lock(&a->mu);
    h.group = a->group;
    h.has_rank = h.has_step = h.has_state = h.has_quorum_id = 1;
    h.rank = (uint32_t)a->cfg.rank;
    h.step = a->step;
    h.state = (Phalanx__MemberState)a->state;
    h.quorum_id = a->quorum_id_held;
    pthread_mutex_unlock(&a->mu);
    env.body_case = PHALANX__ENVELOPE__BODY_HB;
    env.hb = &h;
    send_now(a, &env);
}

static void send_quorum_request(px_agent_t *a) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    pthread_mutex_lock(&a->mu);
    Phalanx__QuorumRequest q = a->pending_req;
    pthread_mutex_unlock(&a->mu);
    q.group = a->group;
    env.body_case = PHALANX__ENVELOPE__BODY_QUORUM_REQ;
    env.quorum_req = &q;
    send_now(a, &env);
}

static void store_quorum(px_agent_t *a, const Phalanx__Quorum *q) {
    pthread_mutex_lock(&a->mu);
    if (q->id >= a->latest.id) {
        px_quorum_t nq;
        px_quorum_init(&nq);
        nq.groups = calloc(q->n_groups + 1, sizeof *nq.groups);
        if (nq.groups) {
            nq.cap = (int)q->n_groups + 1;
            nq.id = q->id;
            nq.max_step = q->max_step;
            nq.n = (int)q->n_groups;
            for (size_t i = 0; i < q->n_groups; i++) {
                const Phalanx__QuorumGroup *g = q->groups[i];
                snprintf(nq.groups[i].name, PX_QUORUM_NAME_MAX, "%s", g->name);
                nq.groups[i].step = g->step;
                nq.groups[i].heal = g->heal;
                snprintf(nq.groups[i].heal_source, PX_QUORUM_NAME_MAX, "%s", g->heal_source ? g->heal_source : "");
            }
            px_quorum_free(&a->latest);
            a->latest = nq;
        }
    }
    if (q->id > a->known_qid) a->known_qid = q->id;
    if (q->finished_step > a->finished_step) a->finished_step = q->finished_step;
    pthread_cond_broadcast(&a->cv);
    px_agent_quorum_hook_fn hook = a->hook;
    void *hook_ctx = a->hook_ctx;
    px_quorum_t copy;
    px_quorum_init(&copy);
    if (hook) px_quorum_copy(&copy, &a->latest);
    pthread_mutex_unlock(&a->mu);
    if (hook) hook(hook_ctx, &copy);
    px_quorum_free(&copy);
}

/* Files a reply under its request id; returns 1 if a caller was waiting. */
static int file_reply(px_agent_t *a, px_msg_t *msg) {
    if (!msg->has_request_id || msg->request_id == 0) return 0;
    int taken = 0;
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < MAX_CALLS; i++) {
        if (a->calls[i].id == msg->request_id && !a->calls[i].reply) {
            a->calls[i].reply = msg;
            taken = 1;
            pthread_cond_broadcast(&a->cv);
            break;
        }
    }
    pthread_mutex_unlock(&a->mu);
    return taken;
}

static void handle_reply(px_agent_t *a, px_msg_t *msg, int64_t *next_register) {
    switch (msg->body_case) {
    case PHALANX__ENVELOPE__BODY_REG_ACK: {
        pthread_mutex_lock(&a->mu);
        int first = !a->registered;
        a->registered = 1;
        if (msg->reg_ack->has_heartbeat_interval_ms && msg->reg_ack->heartbeat_interval_ms > 0)
            a->hb_interval_ms = msg->reg_ack->heartbeat_interval_ms;
        if (msg->reg_ack->quorum_id > a->known_qid) a->known_qid = msg->reg_ack->quorum_id;
        int want = a->quorum_wanted;
        pthread_mutex_unlock(&a->mu);
        if (first)
            px_log_info("registered group=%s rank=%d coordinator=%s", a->group, a->cfg.rank, a->endpoint);
        if (want) send_quorum_request(a); /* the coordinator lost it if it restarted */
        break;
    }
    case PHALANX__ENVELOPE__BODY_HB_ACK:
        pthread_mutex_lock(&a->mu);
        if (msg->hb_ack->quorum_id > a->known_qid) a->known_qid = msg->hb_ack->quorum_id;
        if (msg->hb_ack->finished_step > a->finished_step) a->finished_step = msg->hb_ack->finished_step;
        pthread_mutex_unlock(&a->mu);
        break;
    case PHALANX__ENVELOPE__BODY_QUORUM:
        store_quorum(a, msg->quorum);
        break;
    case PHALANX__ENVELOPE__BODY_ERROR: {
        Phalanx__ErrorCode code = msg->error->code;
        if (code == PHALANX__ERROR_CODE__UNKNOWN_MEMBER) {
            pthread_mutex_lock(&a->mu);
            int was = a->registered;
            a->registered = 0;
            pthread_mutex_unlock(&a->mu);
            if (was) px_log_info("coordinator does not know us (%s): registering again", msg->error->message);
            *next_register = 0;
        } else if (code == PHALANX__ERROR_CODE__WRONG_JOB || code == PHALANX__ERROR_CODE__AUTH_REJECTED ||
                   code == PHALANX__ERROR_CODE__VERSION_MISMATCH) {
            pthread_mutex_lock(&a->mu);
            snprintf(a->fatal, sizeof a->fatal, "%s: %s", px_wire_error_name(code),
                     msg->error->message ? msg->error->message : "");
            pthread_cond_broadcast(&a->cv);
            pthread_mutex_unlock(&a->mu);
        }
        break;
    }
    default:
        break;
    }
}

static void *agent_main(void *arg) {
    px_agent_t *a = arg;
    int64_t next_hb = 0, next_register = 0, next_resend = 0;
    for (;;) {
        pthread_mutex_lock(&a->mu);
        int stop = a->stop, registered = a->registered, want = a->quorum_wanted,
            fatal = a->fatal[0] != 0 || a->leaving;
        int64_t interval = a->hb_interval_ms;
        frame_t out[OUTBOX_MAX];
        int n_out = registered ? a->n_out : 0;
        if (n_out) {
            memcpy(out, a->outbox, (size_t)n_out * sizeof *out);
            a->n_out = 0;
        }
        pthread_mutex_unlock(&a->mu);
        if (stop) break;
        for (int i = 0; i < n_out; i++) {
            zmq_send(a->sock, out[i].buf, out[i].len, ZMQ_DONTWAIT);
            free(out[i].buf);
        }
        int64_t now = px_now_ms();
        if (!fatal && !registered && now >= next_register) {
            send_register(a);
            next_register = now + REGISTER_RETRY_MS;
        }
        if (registered && now >= next_hb) {
            if (next_hb && now - next_hb > 3 * interval)
                px_log_warn("heartbeat late by %lld ms (process starved of CPU?)", (long long)(now - next_hb));
            send_heartbeat(a);
            next_hb = now + interval;
        }
        if (registered && want && now >= next_resend) {
            send_quorum_request(a);
            next_resend = now + REQUEST_RESEND_MS;
        }
        if (!want) next_resend = 0;

        zmq_pollitem_t items[2] = {{a->sock, 0, ZMQ_POLLIN, 0}, {NULL, a->wake_fd, ZMQ_POLLIN, 0}};
        int64_t due = registered ? next_hb : next_register;
        long wait = due > now ? (long)(due - now) : 0;
        if (wait > 50) wait = 50;
        zmq_poll(items, 2, wait);
        if (items[1].revents & ZMQ_POLLIN) {
            uint64_t v;
            ssize_t r = read(a->wake_fd, &v, sizeof v);
            (void)r;
        }
        while (items[0].revents & ZMQ_POLLIN) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, a->sock, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&m);
                break;
            }
            Phalanx__ErrorCode code;
            char why[256];
            px_msg_t *msg = px_wire_decode_max(zmq_msg_data(&m), zmq_msg_size(&m), PX_WIRE_MAX_REPLY, &code, why,
                                               sizeof why);
            zmq_msg_close(&m);
            if (!msg) {
                px_log_warn("bad message from coordinator: %s", why);
                continue;
            }
            handle_reply(a, msg, &next_register);
            if (!file_reply(a, msg)) px_wire_free(msg);
        }
    }
    return NULL;
}

/* ---- caller side ------------------------------------------------------- */

px_agent_t *px_agent_new(const px_agent_config_t *cfg, char *err, size_t errlen) {
    if (!px_wire_group_name_ok(cfg->group)) {
        snprintf(err, errlen, "--group: '%s' is not [A-Za-z0-9_.-]{1,63}", cfg->group ? cfg->group : "");
        return NULL;
    }
    px_agent_t *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    a->cfg = *cfg;
    snprintf(a->group, sizeof a->group, "%s", cfg->group);
    snprintf(a->job, sizeof a->job, "%s", cfg->job ? cfg->job : "");
    snprintf(a->token, sizeof a->token, "%s", cfg->token ? cfg->token : "");
    snprintf(a->endpoint, sizeof a->endpoint, "%s", cfg->coordinator);
    a->hb_interval_ms = 100;
    a->next_id = 1;
    px_quorum_init(&a->latest);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    a->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    a->zctx = zmq_ctx_new();
    a->sock = zmq_socket(a->zctx, ZMQ_DEALER);
    /* A stable identity survives reconnects, so a network blip is not a new member. */
    char ident[PX_QUORUM_NAME_MAX + 48];
    int n = snprintf(ident, sizeof ident, "%s/%d/%d/%lld", a->group, cfg->rank, (int)getpid(),
                     (long long)(px_now_us() % 1000000007LL));
    int zero = 0, ivl = 100, ivl_max = 500;
    zmq_setsockopt(a->sock, ZMQ_ROUTING_ID, ident, (size_t)n);
    zmq_setsockopt(a->sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(a->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(a->sock, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max);
    if (cfg->curve && px_curve_client_apply(a->sock, cfg->curve) != 0) {
        snprintf(err, errlen, "--curve-secret-key-file: CURVE refused: %s", zmq_strerror(errno));
        px_agent_destroy(&a);
        return NULL;
    }
    if (a->wake_fd < 0 || zmq_connect(a->sock, cfg->coordinator) != 0) {
        snprintf(err, errlen, "--coordinator: cannot connect to '%s': %s", cfg->coordinator, zmq_strerror(errno));
        px_agent_destroy(&a);
        return NULL;
    }
    if (pthread_create(&a->thread, NULL, agent_main, a) != 0) {
        snprintf(err, errlen, "cannot start the agent thread");
        a->thread = 0;
        px_agent_destroy(&a);
        return NULL;
    }
    return a;
}

void px_agent_destroy(px_agent_t **self) {
    px_agent_t *a = *self;
    if (!a) return;
    if (a->thread) {
        pthread_mutex_lock(&a->mu);
        a->stop = 1;
        pthread_cond_broadcast(&a->cv);
        pthread_mutex_unlock(&a->mu);
        wake(a);
        pthread_join(a->thread, NULL);
    }
    for (int i = 0; i < a->n_out; i++) free(a->outbox[i].buf);
    for (int i = 0; i < MAX_CALLS; i++) px_wire_free(a->calls[i].reply);
    if (a->sock) zmq_close(a->sock);
    if (a->zctx) zmq_ctx_term(a->zctx);
    if (a->wake_fd >= 0) close(a->wake_fd);
    px_quorum_free(&a->latest);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a);
    *self = NULL;
}

void px_agent_set_progress(px_agent_t *a, int64_t step, int state, int64_t quorum_id) {
    pthread_mutex_lock(&a->mu);
    a->step = step;
    a->state = state;
    a->quorum_id_held = quorum_id;
    pthread_mutex_unlock(&a->mu);
}

int64_t px_agent_finished_step(px_agent_t *a) {
    pthread_mutex_lock(&a->mu);
    int64_t s = a->finished_step;
    pthread_mutex_unlock(&a->mu);
    return s;
}

int px_agent_registered(px_agent_t *a) {
    pthread_mutex_lock(&a->mu);
    int r = a->registered;
    pthread_mutex_unlock(&a->mu);
    return r;
}

int64_t px_agent_known_quorum_id(px_agent_t *a) {
    pthread_mutex_lock(&a->mu);
    int64_t q = a->known_qid;
    pthread_mutex_unlock(&a->mu);
    return q;
}

void px_agent_latest_quorum(px_agent_t *a, px_quorum_t *out) {
    pthread_mutex_lock(&a->mu);
    px_quorum_copy(out, &a->latest);
    pthread_mutex_unlock(&a->mu);
}

const char *px_agent_fatal_error(px_agent_t *a) { return a->fatal; }

static void deadline_ts(struct timespec *ts, int timeout_ms) {
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += timeout_ms / 1000;
    ts->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

int px_agent_request_quorum(px_agent_t *a, int64_t step, int64_t held_id, int shrink_only, int has_checksum,
                            uint64_t checksum, int timeout_ms, px_quorum_t *out) {
    pthread_mutex_lock(&a->mu);
    Phalanx__QuorumRequest q = PHALANX__QUORUM_REQUEST__INIT;
    q.has_rank = q.has_step = q.has_quorum_id = q.has_shrink_only = 1;
    q.rank = (uint32_t)a->cfg.rank;
    q.step = step;
    q.quorum_id = held_id;
    q.shrink_only = shrink_only;
    q.has_state_checksum = has_checksum;
    q.state_checksum = checksum;
    a->pending_req = q;
    a->quorum_wanted = 1;
    pthread_mutex_unlock(&a->mu);
    wake(a); /* the agent sends it at once (and again if the coordinator restarts) */
    struct timespec ts;
    deadline_ts(&ts, timeout_ms);
    int rc = 1;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        if (a->stop || a->fatal[0]) {
            rc = -1;
            break;
        }
        if (a->latest.id > held_id && px_quorum_find(&a->latest, a->group) >= 0) {
            px_quorum_copy(out, &a->latest);
            rc = 0;
            break;
        }
        if (pthread_cond_timedwait(&a->cv, &a->mu, &ts) == ETIMEDOUT) break;
    }
    a->quorum_wanted = 0;
    pthread_mutex_unlock(&a->mu);
    return rc;
}

void px_agent_report_failure(px_agent_t *a, const char *accused_group, int accused_rank, int64_t quorum_id,
                             int64_t step, const char *reason) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__FailureReport f = PHALANX__FAILURE_REPORT__INIT;
    f.group = a->group;
    f.has_rank = f.has_accused_rank = f.has_quorum_id = f.has_step = 1;
    f.rank = (uint32_t)a->cfg.rank;
    f.accused_group = (char *)(accused_group ? accused_group : "");
    f.accused_rank = accused_rank;
    f.quorum_id = quorum_id;
    f.step = step;
    char r[PX_REASON_MAX + 1];
    snprintf(r, sizeof r, "%s", reason ? reason : "");
    f.reason = r;
    env.body_case = PHALANX__ENVELOPE__BODY_FAILURE;
    env.failure = &f;
    post(a, &env, accused_group && !strcmp(accused_group, a->group) && accused_rank == a->cfg.rank);
}

void px_agent_set_quorum_hook(px_agent_t *a, px_agent_quorum_hook_fn fn, void *ctx) {
    pthread_mutex_lock(&a->mu);
    a->hook = fn;
    a->hook_ctx = ctx;
    pthread_mutex_unlock(&a->mu);
}

void px_agent_notify(px_agent_t *a, const char *kind, int64_t quorum_id, int64_t step, const char *peer_group,
                     uint64_t bytes, unsigned ms, const char *detail) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__WorkerEvent w = PHALANX__WORKER_EVENT__INIT;
    w.group = a->group;
    w.has_rank = w.has_quorum_id = w.has_step = w.has_bytes = w.has_ms = 1;
    w.rank = (uint32_t)a->cfg.rank;
    w.kind = (char *)kind;
    w.quorum_id = quorum_id;
    w.step = step;
    w.peer_group = (char *)(peer_group ? peer_group : "");
    w.bytes = bytes;
    w.ms = ms;
    char d[PX_REASON_MAX + 1];
    snprintf(d, sizeof d, "%s", detail ? detail : "");
    w.detail = d;
    env.body_case = PHALANX__ENVELOPE__BODY_WORKER_EVENT;
    env.worker_event = &w;
    post(a, &env, 0);
}

/* Sends env as a call and waits for its reply (caller frees it). NULL on timeout. */
static px_msg_t *call(px_agent_t *a, px_msg_t *env, int timeout_ms) {
    pthread_mutex_lock(&a->mu);
    int slot = -1;
    for (int i = 0; i < MAX_CALLS && slot < 0; i++)
        if (a->calls[i].id == 0) slot = i;
    if (slot < 0) {
        pthread_mutex_unlock(&a->mu);
        return NULL;
    }
    uint64_t id = a->next_id++;
    a->calls[slot].id = id;
    a->calls[slot].reply = NULL;
    pthread_mutex_unlock(&a->mu);
    env->has_request_id = 1;
    env->request_id = id;
    size_t len;
    void *buf = encode(a, env, &len);
    pthread_mutex_lock(&a->mu);
    if (buf) enqueue_locked(a, buf, len);
    pthread_mutex_unlock(&a->mu);
    wake(a);
    struct timespec ts;
    deadline_ts(&ts, timeout_ms);
    pthread_mutex_lock(&a->mu);
    while (!a->calls[slot].reply && !a->stop)
        if (pthread_cond_timedwait(&a->cv, &a->mu, &ts) == ETIMEDOUT) break;
    px_msg_t *reply = a->calls[slot].reply;
    a->calls[slot].id = 0;
    a->calls[slot].reply = NULL;
    pthread_mutex_unlock(&a->mu);
    return reply;
}

static int store_status(px_msg_t *reply) {
    if (!reply) return 1;
    if (reply->body_case == PHALANX__ENVELOPE__BODY_ERROR)
        return reply->error->code == PHALANX__ERROR_CODE__STALE_QUORUM ? 2 : -1;
    return 0;
}

int px_agent_store_set(px_agent_t *a, int64_t quorum_id, const char *key, const void *value, size_t len,
                       int timeout_ms) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__StoreSet s = PHALANX__STORE_SET__INIT;
    s.has_quorum_id = s.has_value = 1;
    s.quorum_id = quorum_id;
    s.key = (char *)key;
    s.value.data = (uint8_t *)value;
    s.value.len = len;
    env.body_case = PHALANX__ENVELOPE__BODY_STORE_SET;
    env.store_set = &s;
    px_msg_t *reply = call(a, &env, timeout_ms);
    int rc = store_status(reply);
    if (rc == 0 && reply->body_case != PHALANX__ENVELOPE__BODY_ACK) rc = -1;
    px_wire_free(reply);
    return rc;
}

int px_agent_store_get(px_agent_t *a, int64_t quorum_id, const char *key, void *buf, size_t cap, size_t *len,
                       int timeout_ms) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__StoreGet g = PHALANX__STORE_GET__INIT;
    g.has_quorum_id = g.has_wait_ms = 1;
    g.quorum_id = quorum_id;
    g.key = (char *)key;
    g.wait_ms = (uint32_t)(timeout_ms > 0 ? timeout_ms : 0);
    env.body_case = PHALANX__ENVELOPE__BODY_STORE_GET;
    env.store_get = &g;
    px_msg_t *reply = call(a, &env, timeout_ms + 1000);
    int rc = store_status(reply);
    if (rc == 0) {
        if (reply->body_case != PHALANX__ENVELOPE__BODY_STORE_VALUE) {
            rc = -1;
        } else if (!reply->store_value->found) {
            rc = 1;
        } else {
            size_t n = reply->store_value->value.len;
            memcpy(buf, reply->store_value->value.data, n < cap ? n : cap);
            *len = n;
        }
    }
    px_wire_free(reply);
    return rc;
}
