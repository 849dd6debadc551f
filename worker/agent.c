/* Implementation of agent.h.
 *
 * Threads: callers never touch the socket. They encode a frame, put it in the
 * outbox and wake the agent through an eventfd that its zmq_poll watches;
 * synchronous calls (store, quorum) then wait on a condition variable for the
 * reply the agent thread files under their request id. The agent thread does
 * all socket I/O: sends the outbox, heartbeats on time, re-registers when the
 * coordinator no longer knows us, and records pushed quorums.
 *
 * Fire-and-forget frames carry request ids too: the coordinator acks each in
 * order, so the highest id acked tells px_agent_flush what has arrived.
 * Timed waits use a CLOCK_MONOTONIC condition clock (a wall-clock jump must
 * not stretch or cut a wait). The quorum hook runs on the agent thread with
 * no lock held; hook_calls counts running calls so that replacing the hook
 * waits for them (the trainer's hook touches memory its teardown frees). */
#include "agent.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netdb.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "liveness.h"
#include "px_hbudp.h"
#include "px_log.h"
#include "px_time.h"
#include "px_wire.h"

#define MAX_CALLS 32
#define OUTBOX_MAX 256
#define REGISTER_RETRY_MS 500
#define REQUEST_RESEND_MS 1000
#define WAIT_FIRST_NOTICE_MS 2000 /* a healthy start registers within milliseconds */
#define WAIT_NOTICE_MS 5000
/* Over UDP nothing answers a heartbeat; one goes over the connection this
 * often anyway, so that a coordinator that forgot us (a long partition, its
 * lost member long expired) can say so (UNKNOWN_MEMBER) and we register again. */
#define UDP_PROBE_MS 30000

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
    float comm_share; /* < 0: not measured */
    Phalanx__TrainStats train; /* rank 0's summary; sent once train.has_step */
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
    int draining; /* the coordinator is draining our group (sticky): say so on every heartbeat */
    px_agent_quorum_hook_fn hook;
    void *hook_ctx;
    int hook_calls;        /* hook calls running on the agent thread */
    uint64_t last_posted;  /* request id of the last fire-and-forget frame queued */
    uint64_t acked;        /* highest request id the coordinator answered */
    char fatal[512];       /* written once, under mu, before fatal_set */
    int fatal_set;
    int gave_up;     /* guarded by mu: no answer within connect_timeout_s */
    /* agent thread only: the wait for the first registration */
    int ever_registered;
    int64_t started_ms, next_notice_ms;
    int64_t conflict_logged_ms; /* last IDENTITY_CONFLICT warning */
    void *monitor;              /* PAIR: handshake events of sock (read_monitor) */
    int handshake_fails;        /* in a row, since the last successful handshake */
    /* --liveness group (agent thread only): the leader's socket (rank 0) or
     * a rank's link to it */
    px_liveness_leader_t *leader;
    px_liveness_link_t *link;
    char liveness_ep[PX_ENDPOINT_MAX + 1];
    int direct_hb_due; /* the next heartbeat goes over the (new) connection: the coordinator saw the old one close */
    /* Sealed UDP heartbeats (proto/px_hbudp.h; agent thread only): offered
     * by the RegisterAck, off again when the coordinator says they do not
     * arrive or the socket reports an error. */
    char ident[PX_HBUDP_IDENT_MAX + 1];
    size_t ident_len;
    int udp_fd;      /* connected to the coordinator's host and udp_port; -1: none */
    int udp_port;
    int udp_on;
    uint8_t udp_key[PX_HBUDP_KEY_BYTES];
    uint64_t udp_seq;
    int64_t next_probe_ms; /* the next heartbeat over the connection although UDP is on */
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

/* Gives env the next request id and queues it (caller holds mu): ids are
 * queued, and so sent and answered, in increasing order. 0 on success. */
static int enqueue_call_locked(px_agent_t *a, px_msg_t *env, uint64_t *id) {
    *id = a->next_id++;
    env->has_request_id = 1;
    env->request_id = *id;
    size_t len;
    void *buf = encode(a, env, &len);
    if (!buf) return -1;
    enqueue_locked(a, buf, len);
    return 0;
}

/* Fire and forget from a caller's thread: queue it for the agent thread.
 * leaving: this is our own departure notice; never register again after it. */
static void post(px_agent_t *a, px_msg_t *env, int leaving) {
    uint64_t id;
    pthread_mutex_lock(&a->mu);
    if (enqueue_call_locked(a, env, &id) == 0) a->last_posted = id;
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
    r.layout = (char *)a->cfg.layout;
    r.has_job_steps = a->cfg.job_steps > 0;
    r.job_steps = a->cfg.job_steps;
    r.liveness_endpoint = a->leader ? a->liveness_ep : NULL;
    r.data_host = (char *)(a->cfg.data_host ? a->cfg.data_host : "127.0.0.1");
    pthread_mutex_unlock(&a->mu);
    env.body_case = PHALANX__ENVELOPE__BODY_REG;
    env.reg = &r;
    send_now(a, &env);
}

/* The RegisterAck's UDP offer: a socket connected to the coordinator's host
 * (as --coordinator names it, resolved at each registration) and the offered
 * port, and the key. Without an offer, or when the host does not resolve,
 * heartbeats stay on ZeroMQ. */
static void udp_offer(px_agent_t *a, const Phalanx__RegisterAck *ack) {
    a->udp_on = 0;
    if (!ack->has_udp_port || ack->udp_port == 0 || ack->udp_port > 65535 || !ack->has_udp_key ||
        ack->udp_key.len != PX_HBUDP_KEY_BYTES || a->ident_len == 0)
        return;
    char host[512], tcp_port[16], port[8];
    if (px_wire_endpoint_split(a->endpoint, host, sizeof host, tcp_port, sizeof tcp_port) != 0) return;
    snprintf(port, sizeof port, "%u", ack->udp_port);
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_DGRAM;
    if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai) {
        px_log_warn("udp_heartbeats_off coordinator=%s: cannot resolve '%s'; heartbeats go over ZeroMQ", a->endpoint, host);
        return;
    }
    if (a->udp_fd >= 0) close(a->udp_fd);
    a->udp_fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (a->udp_fd >= 0 && connect(a->udp_fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        close(a->udp_fd);
        a->udp_fd = -1;
    }
    freeaddrinfo(ai);
    if (a->udp_fd < 0) return;
    a->udp_port = (int)ack->udp_port;
    memcpy(a->udp_key, ack->udp_key.data, PX_HBUDP_KEY_BYTES);
    a->udp_seq = 0;
    a->udp_on = 1;
    a->next_probe_ms = px_now_ms() + UDP_PROBE_MS;
}

static void udp_off(px_agent_t *a, const char *why) {
    if (!a->udp_on) return;
    a->udp_on = 0;
    px_log_warn("udp_heartbeats_off coordinator=%s udp_port=%d: %s; heartbeats go over ZeroMQ", a->endpoint,
                a->udp_port, why);
}

/* Sends env as a sealed datagram. 0 when sent; -1: send it over ZeroMQ. */
static int send_udp(px_agent_t *a, px_msg_t *env) {
    size_t len;
    void *plain = px_wire_encode(env, &len); /* no token: the key is the credential */
    if (!plain) return -1;
    uint8_t dgram[PX_HBUDP_MAX];
    size_t n = px_hbudp_seal(a->udp_key, a->ident, a->ident_len, ++a->udp_seq, plain, len, dgram, sizeof dgram);
    free(plain);
    if (n == 0) return -1; /* too large for one datagram: this one goes over ZeroMQ */
    if (send(a->udp_fd, dgram, n, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)n) return 0;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) return -1;
    char why[96];
    snprintf(why, sizeof why, "sending failed (%s)", strerror(errno));
    udp_off(a, why); /* e.g. ECONNREFUSED: nothing listens on that UDP port */
    return -1;
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
    h.has_comm_share = a->comm_share >= 0;
    h.comm_share = a->comm_share;
    h.has_draining = h.draining = a->draining != 0;
    Phalanx__TrainStats train = a->train; /* a copy: sent after the lock is released */
    if (train.has_step) h.train = &train;
    int64_t interval = a->hb_interval_ms;
    pthread_mutex_unlock(&a->mu);
    int64_t now = px_now_ms();
    Phalanx__GroupDigest digest;
    if (a->leader) {
        px_liveness_leader_digest(a->leader, now, interval, &digest);
        h.digest = &digest;
    }
    env.body_case = PHALANX__ENVELOPE__BODY_HB;
    env.hb = &h;
    /* A rank under --liveness group heartbeats its leader while the leader
     * answers, and the coordinator (too) while it does not. The coordinator
     * gets it as a datagram when it offered that, except the first after a
     * new connection: only a frame on it shows that it replaced the old one. */
    size_t len;
    void *buf = encode(a, &env, &len);
    if (!buf) return;
    if (a->link) px_liveness_link_send(a->link, buf, len);
    int direct = !a->link || !px_liveness_link_up(a->link, now, interval) || a->direct_hb_due;
    if (a->udp_on && now >= a->next_probe_ms) {
        a->direct_hb_due = 1;
        a->next_probe_ms = now + UDP_PROBE_MS;
    }
    if (direct && (a->direct_hb_due || !a->udp_on || send_udp(a, &env) != 0)) zmq_send(a->sock, buf, len, ZMQ_DONTWAIT);
    a->direct_hb_due = 0;
    free(buf);
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

/* A finish counts only at our own job length: a coordinator that was told of
 * another run's end (or a forged one) must not make this run stop early. */
static void note_finished_locked(px_agent_t *a, int64_t step) {
    if (step > 0 && step == a->cfg.job_steps) a->finished_step = step;
}

/* The coordinator drains our group (a HeartbeatAck, or a pushed quorum that
 * lists it as a planned leave): sticky, logged once. */
static void note_draining_locked(px_agent_t *a, int draining, const char *how) {
    if (!draining || a->draining) return;
    a->draining = 1;
    px_log_info("group_draining group=%s rank=%d learned_from=%s: leaving at the next step boundary", a->group,
                a->cfg.rank, how);
}

/* Tells the hook what is known now: the latest pushed quorum and the highest
 * quorum id heard of. Called on the agent thread without mu held. */
static void call_hook(px_agent_t *a) {
    pthread_mutex_lock(&a->mu);
    px_agent_quorum_hook_fn hook = a->hook;
    void *hook_ctx = a->hook_ctx;
    int64_t known = a->known_qid;
    px_quorum_t copy;
    px_quorum_init(&copy);
    if (hook && px_quorum_copy(&copy, &a->latest) != 0) {
        px_log_warn("out of memory copying quorum %lld for the quorum hook: not called", (long long)a->latest.id);
        hook = NULL;
    }
    if (hook) a->hook_calls++;
    pthread_mutex_unlock(&a->mu);
    if (!hook) return;
    hook(hook_ctx, &copy, known);
    px_quorum_free(&copy);
    pthread_mutex_lock(&a->mu);
    a->hook_calls--;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

/* Raises known_qid from a reply (caller holds mu); 1 when it rose. */
static int learn_qid_locked(px_agent_t *a, int64_t qid) {
    if (qid <= a->known_qid) return 0;
    a->known_qid = qid;
    return 1;
}

/* The mode a quorum announces, for the trainer (--mode auto): "sync" or
 * "diloco"; anything else (absent: an older coordinator) is unknown, "". */
static void quorum_mode(char *out, size_t len, const char *mode) {
    int known = mode && (!strcmp(mode, "sync") || !strcmp(mode, "diloco"));
    snprintf(out, len, "%s", known ? mode : "");
}

/* The groups a Quorum message lists, as quorum members (NULL: out of memory). */
static px_quorum_member_t *listed_groups(const Phalanx__Quorum *q) {
    px_quorum_member_t *g = calloc(q->n_groups + 1, sizeof *g);
    for (size_t i = 0; g && i < q->n_groups; i++) {
        snprintf(g[i].name, PX_QUORUM_NAME_MAX, "%s", q->groups[i]->name);
        g[i].step = q->groups[i]->step;
        g[i].heal = q->groups[i]->heal;
        snprintf(g[i].heal_source, PX_QUORUM_NAME_MAX, "%s", q->groups[i]->heal_source ? q->groups[i]->heal_source : "");
    }
    return g;
}

/* Builds the pushed quorum into *nq (caller holds mu): the whole list, or a
 * delta applied to the latest quorum we hold. 0 on success; -1 when it is a
 * delta against a quorum we do not hold (or does not check out), or memory
 * ran out: the caller then only learns the id, and the trainer asks. */
static int build_pushed_quorum(px_agent_t *a, const Phalanx__Quorum *q, px_quorum_t *nq) {
    px_quorum_member_t *g = listed_groups(q);
    if (!g) return -1;
    int rc = 0;
    if (q->has_base_id) {
        rc = q->base_id == a->latest.id ? px_quorum_apply_delta(&a->latest, (const char *const *)q->removed,
                                                                 (int)q->n_removed, g, (int)q->n_groups,
                                                                 (int)q->n_groups_total, q->groups_hash, nq)
                                        : -1;
        free(g);
        if (rc != 0) px_log_info("quorum %lld: a delta against quorum %lld, we hold %lld: asking for it whole",
                                 (long long)q->id, (long long)q->base_id, (long long)a->latest.id);
    } else {
        nq->groups = g;
        nq->cap = (int)q->n_groups + 1;
        nq->n = (int)q->n_groups;
    }
    if (rc != 0) return -1;
    nq->id = q->id;
    nq->max_step = q->max_step;
    quorum_mode(nq->mode, sizeof nq->mode, q->mode);
    return px_quorum_set_draining(nq, (const char *const *)q->draining, (int)q->n_draining);
}

static void store_quorum(px_agent_t *a, const Phalanx__Quorum *q) {
    pthread_mutex_lock(&a->mu);
    if (q->id >= a->latest.id) {
        px_quorum_t nq;
        px_quorum_init(&nq);
        if (build_pushed_quorum(a, q, &nq) == 0) {
            note_draining_locked(a, px_quorum_is_draining(&nq, a->group), "quorum");
            px_quorum_free(&a->latest);
            a->latest = nq;
        } else {
            px_quorum_free(&nq);
        }
    }
    learn_qid_locked(a, q->id);
    note_finished_locked(a, q->finished_step);
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    call_hook(a);
}

/* Files a reply under its request id; returns 1 if a caller was waiting. */
static int file_reply(px_agent_t *a, px_msg_t *msg) {
    if (!msg->has_request_id || msg->request_id == 0) return 0;
    int taken = 0;
    pthread_mutex_lock(&a->mu);
    if (msg->request_id > a->acked) {
        a->acked = msg->request_id;
        pthread_cond_broadcast(&a->cv); /* px_agent_flush */
    }
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

/* The coordinator will never take us: record why (the first reason wins and
 * never changes) and wake every caller. gave_up: no answer at all. */
static void set_fatal(px_agent_t *a, int gave_up, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_fatal(px_agent_t *a, int gave_up, const char *fmt, ...) {
    pthread_mutex_lock(&a->mu);
    if (!a->fatal_set) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(a->fatal, sizeof a->fatal, fmt, ap);
        va_end(ap);
        a->fatal_set = 1;
    }
    if (gave_up) a->gave_up = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

static void handle_reply(px_agent_t *a, px_msg_t *msg, int64_t *next_register) {
    switch (msg->body_case) {
    case PHALANX__ENVELOPE__BODY_REG_ACK: {
        pthread_mutex_lock(&a->mu);
        int first = !a->registered;
        a->registered = 1;
        if (msg->reg_ack->has_heartbeat_interval_ms && msg->reg_ack->heartbeat_interval_ms > 0)
            a->hb_interval_ms = msg->reg_ack->heartbeat_interval_ms;
        int newer = learn_qid_locked(a, msg->reg_ack->quorum_id);
        note_finished_locked(a, msg->reg_ack->finished_step);
        int want = a->quorum_wanted;
        pthread_mutex_unlock(&a->mu);
        udp_offer(a, msg->reg_ack);
        if (a->link) px_liveness_link_set_leader(a->link, msg->reg_ack->leader_endpoint, px_now_ms());
        a->ever_registered = 1;
        if (first)
            px_log_info("registered group=%s rank=%d coordinator=%s", a->group, a->cfg.rank, a->endpoint);
        if (want) send_quorum_request(a); /* the coordinator lost it if it restarted */
        if (newer) call_hook(a);
        break;
    }
    case PHALANX__ENVELOPE__BODY_HB_ACK: {
        pthread_mutex_lock(&a->mu);
        int newer = learn_qid_locked(a, msg->hb_ack->quorum_id);
        note_finished_locked(a, msg->hb_ack->finished_step);
        note_draining_locked(a, msg->hb_ack->has_draining && msg->hb_ack->draining, "heartbeat_ack");
        pthread_mutex_unlock(&a->mu);
        if (a->link) px_liveness_link_set_leader(a->link, msg->hb_ack->leader_endpoint, px_now_ms());
        if (msg->hb_ack->has_udp_off && msg->hb_ack->udp_off) udp_off(a, "the coordinator does not receive them");
        if (a->leader)
            px_liveness_leader_unknown(a->leader, msg->hb_ack->unknown_ranks.data,
                                       msg->hb_ack->has_unknown_ranks ? msg->hb_ack->unknown_ranks.len : 0);
        if (newer) call_hook(a);
        break;
    }
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
            /* at once, unless a registration is on its way already: stale
             * heartbeats (a process stopped and continued) each come back
             * UNKNOWN_MEMBER, and each must not register again */
            if (was) *next_register = 0;
        } else if (code == PHALANX__ERROR_CODE__WRONG_JOB || code == PHALANX__ERROR_CODE__WRONG_LAYOUT ||
                   code == PHALANX__ERROR_CODE__AUTH_REJECTED ||
                   code == PHALANX__ERROR_CODE__VERSION_MISMATCH) {
            set_fatal(a, 0, "%s: %s", px_wire_error_name(code), msg->error->message ? msg->error->message : "");
        } else if (code == PHALANX__ERROR_CODE__IDENTITY_CONFLICT) {
            /* Another live process holds our (group, rank): a duplicate launch,
             * or our own previous incarnation not yet gone. Registration is
             * retried; say so every few seconds rather than wait in silence. */
            int64_t now = px_now_ms();
            if (now - a->conflict_logged_ms >= 5000) {
                px_log_warn("registration refused: %s (retrying)", msg->error->message ? msg->error->message : "");
                a->conflict_logged_ms = now;
            }
        }
        break;
    }
    default:
        break;
    }
}

/* Handshake failures never reach us as messages: libzmq reports them only
 * to a socket monitor. A refused CURVE key (the coordinator's ZAP handler
 * said no) and a protocol error (CURVE on one side only: libzmq does not
 * even reconnect after it) are final at once; other failures (a wrong
 * coordinator key shows as a dropped handshake) are final after
 * HANDSHAKE_FAILS_FATAL in a row. Either way the worker stops with the
 * message px_curve_handshake_why gives phalanxctl too, instead of waiting in
 * silence. */
#define HANDSHAKE_FAILS_FATAL 3
static void read_monitor(px_agent_t *a) {
    static const px_curve_client_t plaintext = {0};
    uint16_t event;
    uint32_t value;
    while (px_zmq_monitor_next(a->monitor, &event, &value)) {
        if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            a->handshake_fails = 0;
            /* A new connection: the coordinator saw the old one close. A rank
             * its leader reports for says it is back on this one itself
             * (a direct heartbeat), or it would stay "disconnected". */
            a->direct_hb_due = 1;
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH || event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
                   ++a->handshake_fails >= HANDSHAKE_FAILS_FATAL) {
            char why[200];
            px_curve_handshake_why(event, value, a->cfg.curve ? a->cfg.curve : &plaintext, why, sizeof why);
            set_fatal(a, 0, "handshake with the coordinator at %.100s: %s", a->endpoint, why);
        }
    }
}

/* Before the first registration: says every few seconds that we wait and
 * for whom, and gives up after connect_timeout_s (a fatal error, so every
 * caller stops waiting). Later silences are coordinator restarts: waited out. */
static void watch_first_contact(px_agent_t *a, int64_t now) {
    if (a->ever_registered) return;
    int64_t waited = now - a->started_ms;
    int limit = a->cfg.connect_timeout_s;
    if (limit > 0 && waited >= (int64_t)limit * 1000) {
        set_fatal(a, 1, "no answer from the coordinator at %.100s within --connect-timeout %d s (group %s rank %d)",
                  a->endpoint, limit, a->group, a->cfg.rank);
        px_log_error("connect_timeout %s", a->fatal);
        return;
    }
    if (now < a->next_notice_ms) return;
    a->next_notice_ms = now + WAIT_NOTICE_MS;
    long long s = (long long)(waited / 1000);
    px_log_warn("waiting_for_coordinator coordinator=%s group=%s rank=%d job=%s waited_s=%lld timeout_s=%d: "
                "no answer yet (is a coordinator running there?)",
                a->endpoint, a->group, a->cfg.rank, a->job[0] ? a->job : "any", s, limit);
    if (a->cfg.print_waiting) { /* before registration the trainer prints nothing: lines cannot interleave */
        printf("event kind=waiting_coordinator coordinator=%s group=%s rank=%d waited_s=%lld timeout_s=%d\n",
               a->endpoint, a->group, a->cfg.rank, s, limit);
        fflush(stdout);
    }
}

/* --liveness group: the leader answers its ranks' heartbeats; a rank takes
 * its leader's answers as it takes the coordinator's (acks, forwarded
 * quorums, "register again"). */
static void read_group_socket(px_agent_t *a, int64_t *next_register) {
    int64_t now = px_now_ms();
    if (a->leader) {
        pthread_mutex_lock(&a->mu);
        int64_t known = a->known_qid, finished = a->finished_step;
        int answer = a->registered && !a->fatal_set && !a->leaving;
        pthread_mutex_unlock(&a->mu);
        px_liveness_leader_read(a->leader, now, answer, known, finished);
        return;
    }
    /* The leader's socket is less trusted than the coordinator: from it a
     * rank takes a quorum id, a forwarded quorum and "register again", never
     * a fatal error or another leader's address. */
    px_msg_t *msg;
    for (int k = 0; k < 64 && (msg = px_liveness_link_recv(a->link, now)); k++) {
        if (msg->body_case == PHALANX__ENVELOPE__BODY_HB_ACK) {
            pthread_mutex_lock(&a->mu);
            int newer = learn_qid_locked(a, msg->hb_ack->quorum_id);
            note_finished_locked(a, msg->hb_ack->finished_step);
            pthread_mutex_unlock(&a->mu);
            if (newer) call_hook(a);
        } else if (msg->body_case == PHALANX__ENVELOPE__BODY_QUORUM ||
                   (msg->body_case == PHALANX__ENVELOPE__BODY_ERROR &&
                    msg->error->code == PHALANX__ERROR_CODE__UNKNOWN_MEMBER)) {
            handle_reply(a, msg, next_register);
        }
        px_wire_free(msg);
    }
}

static void *agent_main(void *arg) {
    px_agent_t *a = arg;
    int64_t next_hb = 0, next_register = 0, next_resend = 0;
    for (;;) {
        pthread_mutex_lock(&a->mu);
        int stop = a->stop, registered = a->registered, want = a->quorum_wanted,
            fatal = a->fatal_set || a->leaving;
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
        if (!fatal && !registered) watch_first_contact(a, now);
        if (!fatal && !registered && now >= next_register) {
            send_register(a);
            next_register = now + REGISTER_RETRY_MS;
        }
        if (registered && now >= next_hb) {
            if (next_hb && now - next_hb > 3 * interval) {
                px_log_warn("heartbeat late by %lld ms (process starved of CPU?)", (long long)(now - next_hb));
                a->direct_hb_due = 1; /* we may have been declared lost: over the connection, it would be told */
            }
            send_heartbeat(a);
            next_hb = now + interval;
        }
        if (registered && want && now >= next_resend) {
            send_quorum_request(a);
            next_resend = now + REQUEST_RESEND_MS;
        }
        if (!want) next_resend = 0;

        void *group_sock = a->leader ? px_liveness_leader_socket(a->leader)
                           : a->link ? px_liveness_link_socket(a->link) : NULL;
        zmq_pollitem_t items[4] = {{a->sock, 0, ZMQ_POLLIN, 0}, {NULL, a->wake_fd, ZMQ_POLLIN, 0},
                                   {a->monitor, 0, ZMQ_POLLIN, 0}, {group_sock, 0, ZMQ_POLLIN, 0}};
        int64_t due = registered ? next_hb : next_register;
        long wait = due > now ? (long)(due - now) : 0;
        if (wait > 50) wait = 50;
        zmq_poll(items, group_sock ? 4 : 3, wait);
        if (items[2].revents & ZMQ_POLLIN) read_monitor(a);
        if (group_sock && (items[3].revents & ZMQ_POLLIN)) read_group_socket(a, &next_register);
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
            if (msg && a->leader && msg->body_case == PHALANX__ENVELOPE__BODY_QUORUM)
                px_liveness_leader_forward(a->leader, zmq_msg_data(&m), zmq_msg_size(&m), msg->quorum->id,
                                           px_now_ms(), interval); /* the ranks get it from us */
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
    if (cfg->group_size < 1 || cfg->group_size > PX_GROUP_SIZE_MAX || cfg->rank < 0 || cfg->rank >= cfg->group_size) {
        snprintf(err, errlen, "--rank %d / --ranks-per-group %d: want 0 <= rank < ranks-per-group <= %d", cfg->rank,
                 cfg->group_size, PX_GROUP_SIZE_MAX);
        return NULL;
    }
    px_agent_t *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    a->cfg = *cfg;
    a->udp_fd = -1;
    snprintf(a->group, sizeof a->group, "%s", cfg->group);
    snprintf(a->job, sizeof a->job, "%s", cfg->job ? cfg->job : "");
    snprintf(a->token, sizeof a->token, "%s", cfg->token ? cfg->token : "");
    snprintf(a->endpoint, sizeof a->endpoint, "%s", cfg->coordinator);
    a->hb_interval_ms = 100;
    a->comm_share = -1; /* not measured until the trainer says */
    phalanx__train_stats__init(&a->train);
    a->next_id = 1;
    px_quorum_init(&a->latest);
    pthread_mutex_init(&a->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&a->cv, &ca);
    pthread_condattr_destroy(&ca);
    a->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    a->zctx = zmq_ctx_new();
    a->sock = zmq_socket(a->zctx, ZMQ_DEALER);
    /* A stable identity survives reconnects, so a network blip is not a new member. */
    char ident[PX_QUORUM_NAME_MAX + 48];
    int n = snprintf(ident, sizeof ident, "%s/%d/%d/%lld", a->group, cfg->rank, (int)getpid(),
                     (long long)(px_now_us() % 1000000007LL));
    int zero = 0, ivl = 100, ivl_max = 500;
    zmq_setsockopt(a->sock, ZMQ_ROUTING_ID, ident, (size_t)n);
    a->ident_len = (size_t)n <= PX_HBUDP_IDENT_MAX ? (size_t)n : 0; /* 0: too long to name us in a datagram */
    memcpy(a->ident, ident, a->ident_len);
    zmq_setsockopt(a->sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(a->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(a->sock, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max);
    if (cfg->curve && px_curve_client_apply(a->sock, cfg->curve) != 0) {
        snprintf(err, errlen, "--curve-secret-key-file: CURVE refused: %s", zmq_strerror(errno));
        px_agent_destroy(&a);
        return NULL;
    }
    char mon_ep[64];
    snprintf(mon_ep, sizeof mon_ep, "inproc://px-agent-monitor-%p", (void *)a);
    zmq_socket_monitor(a->sock, mon_ep, ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                            ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    a->monitor = zmq_socket(a->zctx, ZMQ_PAIR);
    zmq_setsockopt(a->monitor, ZMQ_LINGER, &zero, sizeof zero);
    if (a->wake_fd < 0 || zmq_connect(a->monitor, mon_ep) != 0) {
        snprintf(err, errlen, "cannot set up the agent's sockets: %s", zmq_strerror(errno));
        px_agent_destroy(&a);
        return NULL;
    }
    if (cfg->liveness_group && cfg->group_size > 1) {
        if (cfg->rank == 0) {
            a->leader = px_liveness_leader_new(a->zctx, cfg->data_host ? cfg->data_host : "127.0.0.1", a->group,
                                               cfg->group_size, a->token, a->liveness_ep, sizeof a->liveness_ep, err,
                                               errlen);
        } else {
            a->link = px_liveness_link_new(a->zctx, ident, (size_t)n);
            if (!a->link) snprintf(err, errlen, "out of memory");
        }
        if (!a->leader && !a->link) {
            px_agent_destroy(&a);
            return NULL;
        }
    }
    return a;
}

int px_agent_start(px_agent_t *a, char *err, size_t errlen) {
    if (zmq_connect(a->sock, a->cfg.coordinator) != 0) {
        snprintf(err, errlen, "--coordinator: cannot connect to '%s': %s", a->cfg.coordinator, zmq_strerror(errno));
        return -1;
    }
    a->started_ms = px_now_ms(); /* --connect-timeout counts from here */
    a->next_notice_ms = a->started_ms + WAIT_FIRST_NOTICE_MS;
    if (pthread_create(&a->thread, NULL, agent_main, a) != 0) {
        snprintf(err, errlen, "cannot start the agent thread");
        a->thread = 0;
        return -1;
    }
    return 0;
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
    px_liveness_leader_destroy(&a->leader);
    px_liveness_link_destroy(&a->link);
    if (a->monitor) zmq_close(a->monitor);
    if (a->sock) {
        zmq_socket_monitor(a->sock, NULL, 0);
        zmq_close(a->sock);
    }
    if (a->zctx) zmq_ctx_term(a->zctx);
    if (a->wake_fd >= 0) close(a->wake_fd);
    if (a->udp_fd >= 0) close(a->udp_fd);
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

void px_agent_set_comm_share(px_agent_t *a, float share) {
    if (!(share >= 0)) share = -1; /* NaN too: not measured */
    else if (share > 1) share = 1;
    pthread_mutex_lock(&a->mu);
    a->comm_share = share;
    pthread_mutex_unlock(&a->mu);
}

void px_agent_set_train_stats(px_agent_t *a, int64_t step, float loss, double tokens, double seconds, int diloco) {
    if (a->cfg.rank != 0) return;
    pthread_mutex_lock(&a->mu);
    Phalanx__TrainStats *t = &a->train;
    t->has_step = t->has_loss = t->has_diloco = 1;
    t->step = step;
    t->loss = loss;
    t->diloco = diloco != 0;
    if (seconds > 0) {
        t->has_tokens_per_s = t->has_step_seconds = 1;
        t->tokens_per_s = (float)(tokens / seconds);
        t->step_seconds = (float)seconds;
    }
    pthread_mutex_unlock(&a->mu);
}

void px_agent_set_eval_loss(px_agent_t *a, int64_t step, float loss) {
    if (a->cfg.rank != 0 || isnan(loss)) return;
    pthread_mutex_lock(&a->mu);
    a->train.has_eval_loss = a->train.has_eval_step = 1;
    a->train.eval_loss = loss;
    a->train.eval_step = step;
    pthread_mutex_unlock(&a->mu);
}

void px_agent_note_heal(px_agent_t *a, uint64_t bytes, int64_t ms) {
    pthread_mutex_lock(&a->mu);
    Phalanx__TrainStats *t = &a->train;
    t->has_heals = t->has_heal_bytes = t->has_heal_seconds = 1;
    t->heals++;
    t->heal_bytes += bytes;
    t->heal_seconds += (float)ms / 1000.0f;
    pthread_mutex_unlock(&a->mu);
}

int px_agent_draining(px_agent_t *a) {
    pthread_mutex_lock(&a->mu);
    int d = a->draining;
    pthread_mutex_unlock(&a->mu);
    return d;
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

int px_agent_latest_quorum(px_agent_t *a, px_quorum_t *out) {
    pthread_mutex_lock(&a->mu);
    int rc = px_quorum_copy(out, &a->latest);
    pthread_mutex_unlock(&a->mu);
    return rc;
}

/* fatal is written once, before fatal_set, both under mu: once the flag is
 * seen under mu the text is complete and never changes again. */
const char *px_agent_fatal_error(px_agent_t *a) {
    pthread_mutex_lock(&a->mu);
    int set = a->fatal_set;
    pthread_mutex_unlock(&a->mu);
    return set ? a->fatal : "";
}

int px_agent_gave_up(px_agent_t *a) {
    pthread_mutex_lock(&a->mu);
    int g = a->gave_up;
    pthread_mutex_unlock(&a->mu);
    return g;
}

/* Deadline on the condition variable's clock (CLOCK_MONOTONIC). */
static void deadline_ts(struct timespec *ts, int timeout_ms) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += timeout_ms / 1000;
    ts->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

px_quorum_request_t px_agent_request_quorum(px_agent_t *a, int64_t step, int64_t held_id, int shrink_only,
                                            int has_checksum, uint64_t checksum, int timeout_ms, px_quorum_t *out) {
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
    px_quorum_request_t rc = PX_QUORUM_TIMED_OUT;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        if (a->stop || a->fatal_set) {
            rc = PX_QUORUM_GAVE_UP;
            break;
        }
        if (a->latest.id > held_id && px_quorum_find(&a->latest, a->group) >= 0) {
            if (px_quorum_copy(out, &a->latest) == 0) rc = PX_QUORUM_GRANTED;
            else px_log_warn("out of memory copying quorum %lld: asking again", (long long)a->latest.id);
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
    while (a->hook_calls > 0) pthread_cond_wait(&a->cv, &a->mu); /* a call of the old hook may be running */
    pthread_mutex_unlock(&a->mu);
}

int px_agent_flush(px_agent_t *a, int timeout_ms) {
    if (!a->thread) return 1; /* not started: nothing is sent */
    struct timespec ts;
    deadline_ts(&ts, timeout_ms);
    pthread_mutex_lock(&a->mu);
    uint64_t target = a->last_posted;
    while (a->acked < target && !a->stop)
        if (pthread_cond_timedwait(&a->cv, &a->mu, &ts) == ETIMEDOUT) break;
    int rc = a->acked >= target ? 0 : 1;
    pthread_mutex_unlock(&a->mu);
    return rc;
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
    uint64_t id;
    if (enqueue_call_locked(a, env, &id) != 0) {
        pthread_mutex_unlock(&a->mu);
        return NULL;
    }
    a->calls[slot].id = id;
    a->calls[slot].reply = NULL;
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

static px_store_status_t store_status(px_msg_t *reply) {
    if (!reply) return PX_STORE_MISSING;
    if (reply->body_case == PHALANX__ENVELOPE__BODY_ERROR)
        return reply->error->code == PHALANX__ERROR_CODE__STALE_QUORUM ? PX_STORE_STALE : PX_STORE_ERROR;
    return PX_STORE_OK;
}

px_store_status_t px_agent_store_set(px_agent_t *a, int64_t quorum_id, const char *key, const void *value,
                                     size_t len, int timeout_ms) {
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
    px_store_status_t rc = store_status(reply);
    if (rc == PX_STORE_OK && reply->body_case != PHALANX__ENVELOPE__BODY_ACK) rc = PX_STORE_ERROR;
    px_wire_free(reply);
    return rc;
}

px_store_status_t px_agent_store_get(px_agent_t *a, int64_t quorum_id, const char *key, void *buf, size_t cap,
                                     size_t *len, int timeout_ms) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__StoreGet g = PHALANX__STORE_GET__INIT;
    g.has_quorum_id = g.has_wait_ms = 1;
    g.quorum_id = quorum_id;
    g.key = (char *)key;
    g.wait_ms = (uint32_t)(timeout_ms > 0 ? timeout_ms : 0);
    env.body_case = PHALANX__ENVELOPE__BODY_STORE_GET;
    env.store_get = &g;
    px_msg_t *reply = call(a, &env, timeout_ms + 1000);
    px_store_status_t rc = store_status(reply);
    if (rc == PX_STORE_OK) {
        if (reply->body_case != PHALANX__ENVELOPE__BODY_STORE_VALUE) {
            rc = PX_STORE_ERROR;
        } else if (!reply->store_value->found) {
            rc = PX_STORE_MISSING;
        } else {
            size_t n = reply->store_value->value.len;
            memcpy(buf, reply->store_value->value.data, n < cap ? n : cap);
            *len = n;
        }
    }
    px_wire_free(reply);
    return rc;
}
