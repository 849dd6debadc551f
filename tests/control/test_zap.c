/* The ZAP handler (coordinator/auth.c) against real CURVE handshakes on
 * loopback TCP, in one process: a CURVE ROUTER like the coordinator's, a
 * client whose key is listed (its message arrives, carrying its key as
 * User-Id), a flood of clients whose keys are not (none gets through; the
 * event queue records at most AUTH_EVENTS_PER_S of them one by one per second
 * and summarises the rest, and the counts add up to the number refused), and
 * a reload of the authorized-keys file (a bad file keeps the old keys; a good
 * one admits the new key). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "auth.h"
#include "px_keys.h"
#include "px_time.h"

#include "../lib/px_check.h"

#define FLOOD 120
#define PER_S 20 /* AUTH_EVENTS_PER_S in auth.c */

static int failed;

typedef struct {
    int events, singles, reloads, reload_errors;
    uint64_t rejected;
} tally_t;

static void on_event(void *ctx, const char *type, const char *fields, uint64_t count) {
    tally_t *t = ctx;
    if (!strcmp(type, "auth_rejected")) {
        t->events++;
        t->rejected += count;
        if (count == 1) t->singles++;
        if (count == 1 && !strstr(fields, "\"key\":\"")) fprintf(stderr, "FAIL: no key in %s\n", fields), failed++;
    } else if (!strcmp(type, "authorized_keys_reloaded")) {
        t->reloads++;
        if (!strstr(fields, "\"error\":\"\"")) t->reload_errors++;
    }
}

static void *client(void *ctx, const char *ep, const char *server_pub, const px_keypair_t *own) {
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, server_pub, 40);
    zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, own->pub, 40);
    zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, own->sec, 40);
    zmq_connect(s, ep);
    zmq_send(s, "hello", 5, ZMQ_DONTWAIT);
    return s;
}

/* Waits up to ms for one message on the router; its User-Id into user. */
static int receive(void *router, int ms, char *user, size_t cap) {
    zmq_pollitem_t it = {router, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, ms) <= 0) return 0;
    zmq_msg_t id, body;
    zmq_msg_init(&id);
    zmq_msg_init(&body);
    zmq_msg_recv(&id, router, 0);
    zmq_msg_recv(&body, router, 0);
    const char *u = zmq_msg_gets(&body, "User-Id");
    snprintf(user, cap, "%s", u ? u : "");
    zmq_msg_close(&id);
    zmq_msg_close(&body);
    return 1;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

int main(void) {
    char dir[] = "/tmp/px-test-zap-XXXXXX", path[128], text[256], user[64];
    if (!mkdtemp(dir)) return 1;
    px_keypair_t server, good, bad, later;
    zmq_curve_keypair(server.pub, server.sec);
    zmq_curve_keypair(good.pub, good.sec);
    zmq_curve_keypair(bad.pub, bad.sec);
    zmq_curve_keypair(later.pub, later.sec);
    snprintf(path, sizeof path, "%s/authorized_keys", dir);
    snprintf(text, sizeof text, "# test\n%s good\n", good.pub);
    write_file(path, text);

    void *ctx = zmq_ctx_new();
    atomic_int reload = 0;
    char err[600];
    px_auth_t *auth = px_auth_start(ctx, path, &reload, err, sizeof err);
    if (!auth) {
        fprintf(stderr, "FAIL: px_auth_start: %s\n", err);
        return 1;
    }
    void *router = zmq_socket(ctx, ZMQ_ROUTER);
    int one = 1, zero = 0;
    zmq_setsockopt(router, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(router, ZMQ_CURVE_SERVER, &one, sizeof one);
    zmq_setsockopt(router, ZMQ_CURVE_SECRETKEY, server.sec, 40);
    zmq_bind(router, "tcp://127.0.0.1:*");
    char ep[128];
    size_t eplen = sizeof ep;
    zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, ep, &eplen);
    tally_t t = {0};

    void *g = client(ctx, ep, server.pub, &good);
    CHECK(receive(router, 5000, user, sizeof user) && !strcmp(user, good.pub),
          "a listed key gets through with its key as User-Id (got '%s')", user);
    zmq_close(g);

    int64_t t0 = px_now_ms();
    void *flood[FLOOD];
    for (int i = 0; i < FLOOD; i++) flood[i] = client(ctx, ep, server.pub, &bad);
    int64_t deadline = px_now_ms() + 20000;
    while (t.rejected < FLOOD && px_now_ms() < deadline) {
        CHECK(!receive(router, 20, user, sizeof user), "an unlisted key got a message through");
        px_auth_drain(auth, on_event, &t);
    }
    int64_t elapsed_s = (px_now_ms() - t0) / 1000 + 1;
    px_sleep_ms(1200); /* the window rolls: the summary of the last second is queued */
    px_auth_drain(auth, on_event, &t);
    CHECK(t.rejected == FLOOD, "every refused handshake is counted: %llu of %d", (unsigned long long)t.rejected, FLOOD);
    CHECK(t.singles <= PER_S * (int)(elapsed_s + 1), "rate limited: %d single events in about %lld s", t.singles,
          (long long)elapsed_s);
    CHECK(t.events < FLOOD, "the flood was summarised: %d events for %d rejections", t.events, FLOOD);
    for (int i = 0; i < FLOOD; i++) zmq_close(flood[i]);

    /* A broken file on reload keeps the keys in force. */
    write_file(path, "garbage\n");
    atomic_store(&reload, 1);
    for (int i = 0; atomic_load(&reload) && i < 500; i++) px_sleep_ms(10);
    px_sleep_ms(50);
    px_auth_drain(auth, on_event, &t);
    CHECK(t.reloads == 1 && t.reload_errors == 1, "a failed reload is reported (%d, %d)", t.reloads, t.reload_errors);
    g = client(ctx, ep, server.pub, &good);
    CHECK(receive(router, 5000, user, sizeof user), "after a failed reload the old key still works");
    zmq_close(g);

    /* Rotation: add a key, reload, the new one is admitted. */
    snprintf(text, sizeof text, "%s good\n%s later\n", good.pub, later.pub);
    write_file(path, text);
    atomic_store(&reload, 1);
    for (int i = 0; atomic_load(&reload) && i < 500; i++) px_sleep_ms(10);
    px_sleep_ms(50);
    px_auth_drain(auth, on_event, &t);
    CHECK(t.reloads == 2 && t.reload_errors == 1 && px_auth_key_count(auth) == 2, "reload with two keys");
    void *l = client(ctx, ep, server.pub, &later);
    CHECK(receive(router, 5000, user, sizeof user) && !strcmp(user, later.pub), "a key added on reload is admitted");
    zmq_close(l);

    px_auth_stop(&auth, on_event, &t);
    zmq_close(router);
    zmq_ctx_term(ctx);
    snprintf(text, sizeof text, "rm -rf '%s'", dir);
    if (system(text) != 0) fprintf(stderr, "note: could not remove %s\n", dir);
    printf("test_zap: %d failed\n", failed);
    return failed ? 1 : 0;
}
