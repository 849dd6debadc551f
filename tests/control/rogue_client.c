/* rogue_client: a peer that speaks the protocol correctly but lies, for the
 * hostile tests (tests/control/test_hostile.py). It registers under a name of
 * its choosing and then does what an attacker, or a broken worker, would:
 *
 *   --request-quorum   ask to join the quorum, then heartbeat forever and
 *                      never take part in the rendezvous (a rogue, or a hung
 *                      trainer behind a live agent thread)
 *   --finish STEP      claim the job finished at STEP (WorkerEvent run_finished)
 *   --accuse GROUP     report a failure naming GROUP (about the current quorum)
 *   --quorum-id N      claim, when registering, to be in quorum N
 *   --spam N           send N registrations as fast as possible first (with
 *                      the --token-file given, or none), replies unread
 * The lies are told right after registering, or with --request-quorum once
 * the rogue is a member of the quorum.
 *
 * It heartbeats every 100 ms for --hold-ms and prints one key=value line per
 * thing it learns, so a test can assert on it:
 *   register=ok quorum_id=N | register=ERROR_NAME
 *   quorum id=N groups=a,b,c        (each pushed quorum)
 *   finish=ack | finish=ERROR_NAME, accuse=ack | accuse=ERROR_NAME
 *   lost=1                          (the coordinator forgot us: UNKNOWN_MEMBER)
 * Exit status 0 unless the coordinator could not be reached. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "px_time.h"
#include "px_wire.h"

typedef struct {
    const char *endpoint, *group, *accuse, *token;
    int rank, request_quorum, hold_ms;
    int64_t finish, step, job_steps, quorum_id;
    long spam;
} opts_t;

static void *g_sock;
static char *g_token;
static uint64_t g_req = 1;

static void sendmsg_env(Phalanx__Envelope *env) {
    env->has_request_id = 1;
    env->request_id = g_req++;
    env->token = g_token;
    size_t len;
    void *buf = px_wire_encode(env, &len);
    if (buf) zmq_send(g_sock, buf, len, 0);
    free(buf);
}

static void send_register(const opts_t *o) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__Register r = PHALANX__REGISTER__INIT;
    r.group = (char *)o->group;
    r.has_rank = r.has_group_size = r.has_pid = r.has_step = r.has_job_steps = 1;
    r.rank = (uint32_t)o->rank;
    r.group_size = (uint32_t)o->rank + 1;
    r.pid = (uint32_t)getpid();
    r.host = "rogue";
    r.step = o->step;
    r.job_steps = o->job_steps;
    r.has_quorum_id = o->quorum_id > 0;
    r.quorum_id = o->quorum_id;
    env.body_case = PHALANX__ENVELOPE__BODY_REG;
    env.reg = &r;
    sendmsg_env(&env);
}

static void send_heartbeat(const opts_t *o, int64_t qid) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__Heartbeat h = PHALANX__HEARTBEAT__INIT;
    h.group = (char *)o->group;
    h.has_rank = h.has_step = h.has_quorum_id = 1;
    h.rank = (uint32_t)o->rank;
    h.step = o->step;
    h.quorum_id = qid;
    env.body_case = PHALANX__ENVELOPE__BODY_HB;
    env.hb = &h;
    sendmsg_env(&env);
}

static void send_quorum_request(const opts_t *o) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__QuorumRequest q = PHALANX__QUORUM_REQUEST__INIT;
    q.group = (char *)o->group;
    q.has_rank = q.has_step = 1;
    q.rank = (uint32_t)o->rank;
    q.step = o->step;
    env.body_case = PHALANX__ENVELOPE__BODY_QUORUM_REQ;
    env.quorum_req = &q;
    sendmsg_env(&env);
}

static uint64_t send_finish(const opts_t *o, int64_t qid) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__WorkerEvent w = PHALANX__WORKER_EVENT__INIT;
    w.group = (char *)o->group;
    w.has_rank = w.has_step = w.has_quorum_id = 1;
    w.rank = (uint32_t)o->rank;
    w.kind = "run_finished";
    w.step = o->finish;
    w.quorum_id = qid;
    env.body_case = PHALANX__ENVELOPE__BODY_WORKER_EVENT;
    env.worker_event = &w;
    sendmsg_env(&env);
    return g_req - 1;
}

static uint64_t send_accusation(const opts_t *o, int64_t qid) {
    Phalanx__Envelope env = PHALANX__ENVELOPE__INIT;
    Phalanx__FailureReport f = PHALANX__FAILURE_REPORT__INIT;
    f.group = (char *)o->group;
    f.has_rank = f.has_accused_rank = f.has_quorum_id = f.has_step = 1;
    f.rank = (uint32_t)o->rank;
    f.accused_group = (char *)o->accuse;
    f.accused_rank = -1;
    f.quorum_id = qid;
    f.step = o->step;
    f.reason = "rogue accusation";
    env.body_case = PHALANX__ENVELOPE__BODY_FAILURE;
    env.failure = &f;
    sendmsg_env(&env);
    return g_req - 1;
}

/* The lie itself: right after registering, or, with --request-quorum, once
 * we are a member of the quorum (so the coordinator's membership checks are
 * what must stop it). */
static void act(const opts_t *o, int64_t qid, uint64_t *finish_req, uint64_t *accuse_req) {
    if (o->finish >= 0) *finish_req = send_finish(o, qid);
    if (o->accuse) *accuse_req = send_accusation(o, qid);
}

static void say_reply(const char *what, const px_msg_t *m) {
    if (m->body_case == PHALANX__ENVELOPE__BODY_ERROR)
        printf("%s=%s\n", what, px_wire_error_name(m->error->code));
    else
        printf("%s=ack\n", what);
    fflush(stdout);
}

/* --spam: register frames back to back, then count replies for --hold-ms. */
static int spam(const opts_t *o) {
    for (long i = 0; i < o->spam; i++) send_register(o);
    long replies = 0;
    int64_t end = px_now_ms() + o->hold_ms;
    while (px_now_ms() < end && replies < o->spam) {
        zmq_pollitem_t it = {g_sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 50) <= 0) continue;
        zmq_msg_t m;
        zmq_msg_init(&m);
        while (zmq_msg_recv(&m, g_sock, ZMQ_DONTWAIT) >= 0) replies++;
        zmq_msg_close(&m);
    }
    printf("spam=%ld replies=%ld\n", o->spam, replies);
    fflush(stdout);
    return 0;
}

static void usage(void) {
    printf("usage: rogue_client --endpoint E --group G [--rank R] [--step S] [--job-steps N]\n"
           "                    [--request-quorum] [--finish STEP] [--accuse GROUP] [--hold-ms MS]\n"
           "                    [--quorum-id N] [--spam N] [--token-file PATH]\n"
           "A lying peer for hostile tests; see the top of tests/control/rogue_client.c.\n");
}

int main(int argc, char **argv) {
    opts_t o = {.endpoint = NULL, .group = "rogue", .hold_ms = 3000, .finish = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--help")) return usage(), 0;
        else if (!strcmp(a, "--request-quorum")) { o.request_quorum = 1; continue; }
        else if (!strcmp(a, "--endpoint")) o.endpoint = v;
        else if (!strcmp(a, "--group")) o.group = v;
        else if (!strcmp(a, "--rank")) o.rank = atoi(v);
        else if (!strcmp(a, "--step")) o.step = atoll(v);
        else if (!strcmp(a, "--job-steps")) o.job_steps = atoll(v);
        else if (!strcmp(a, "--finish")) o.finish = atoll(v);
        else if (!strcmp(a, "--accuse")) o.accuse = v;
        else if (!strcmp(a, "--hold-ms")) o.hold_ms = atoi(v);
        else if (!strcmp(a, "--token-file")) o.token = v;
        else if (!strcmp(a, "--quorum-id")) o.quorum_id = atoll(v);
        else if (!strcmp(a, "--spam")) o.spam = atol(v);
        else {
            fprintf(stderr, "rogue_client: unknown flag '%s'\n", a);
            return 2;
        }
        i++;
    }
    if (!o.endpoint) return usage(), 2;
    if (o.token) {
        FILE *f = fopen(o.token, "r");
        static char tok[300];
        if (!f || !fgets(tok, sizeof tok, f)) return fprintf(stderr, "rogue_client: cannot read %s\n", o.token), 2;
        fclose(f);
        tok[strcspn(tok, "\r\n")] = '\0';
        g_token = tok;
    }
    void *ctx = zmq_ctx_new();
    g_sock = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(g_sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(g_sock, ZMQ_SNDHWM, &zero, sizeof zero); /* no limit: --spam queues everything */
    zmq_setsockopt(g_sock, ZMQ_RCVHWM, &zero, sizeof zero);
    if (zmq_connect(g_sock, o.endpoint) != 0) return fprintf(stderr, "rogue_client: cannot connect\n"), 1;

    if (o.spam > 0) return spam(&o);
    send_register(&o);
    uint64_t finish_req = 0, accuse_req = 0;
    int registered = 0;
    int64_t qid = 0, end = px_now_ms() + o.hold_ms, next_hb = 0;
    while (px_now_ms() < end) {
        if (registered && px_now_ms() >= next_hb) {
            send_heartbeat(&o, qid);
            next_hb = px_now_ms() + 100;
        }
        zmq_pollitem_t it = {g_sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 20) <= 0) continue;
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, g_sock, 0) < 0) break;
        Phalanx__ErrorCode code;
        char why[256];
        px_msg_t *msg = px_wire_decode_max(zmq_msg_data(&m), zmq_msg_size(&m), PX_WIRE_MAX_REPLY, &code, why, sizeof why);
        zmq_msg_close(&m);
        if (!msg) continue;
        if (msg->request_id == 1) { /* the register's answer */
            if (msg->body_case == PHALANX__ENVELOPE__BODY_REG_ACK) {
                registered = 1;
                qid = msg->reg_ack->quorum_id;
                printf("register=ok quorum_id=%lld\n", (long long)qid);
                fflush(stdout);
                if (o.request_quorum) send_quorum_request(&o);
                else act(&o, qid, &finish_req, &accuse_req);
            } else {
                say_reply("register", msg);
                px_wire_free(msg);
                break;
            }
        } else if (msg->body_case == PHALANX__ENVELOPE__BODY_QUORUM) {
            qid = msg->quorum->id;
            printf("quorum id=%lld groups=", (long long)qid);
            for (size_t i = 0; i < msg->quorum->n_groups; i++)
                printf("%s%s", i ? "," : "", msg->quorum->groups[i]->name);
            printf("\n");
            fflush(stdout);
            int mine = 0;
            for (size_t i = 0; i < msg->quorum->n_groups; i++) mine |= !strcmp(msg->quorum->groups[i]->name, o.group);
            if (mine && o.request_quorum && !finish_req && !accuse_req) act(&o, qid, &finish_req, &accuse_req);
        } else if (msg->body_case == PHALANX__ENVELOPE__BODY_HB_ACK) {
            if (msg->hb_ack->quorum_id > qid && o.request_quorum) send_quorum_request(&o);
        } else if (finish_req && msg->request_id == finish_req) {
            say_reply("finish", msg);
        } else if (accuse_req && msg->request_id == accuse_req) {
            say_reply("accuse", msg);
        } else if (msg->body_case == PHALANX__ENVELOPE__BODY_ERROR &&
                   msg->error->code == PHALANX__ERROR_CODE__UNKNOWN_MEMBER) {
            printf("lost=1\n");
            fflush(stdout);
            px_wire_free(msg);
            break;
        }
        px_wire_free(msg);
    }
    zmq_close(g_sock);
    zmq_ctx_term(ctx);
    return 0;
}
