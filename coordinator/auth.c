/* Implementation of auth.h. */
#include "auth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <zmq.h>

#include "px_buf.h"
#include "px_log.h"
#include "px_rate.h"
#include "px_time.h"
#include "px_wire.h"

#define AUTH_KEYS_FILE_MAX (16 << 20)
#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_POLL_MS 100
#define ZAP_MAX_FRAMES 8
#define AUTH_EVENTS_PER_S 20 /* rejections recorded one by one per second; the rest summarised */
#define AUTH_QUEUE_MAX 64    /* events waiting for the loop; past it they are counted only */

/* ---- authorized keys --------------------------------------------------- */

static int add_key(px_auth_keys_t *out, const char *z85, const char *label) {
    uint8_t bin[32];
    if (!zmq_z85_decode(bin, z85)) return -1;
    if (px_auth_keys_find(out, bin)) return 0; /* listed twice: once is enough */
    if (out->n == out->cap) {
        int cap = out->cap ? out->cap * 2 : 16;
        px_auth_key_t *k = realloc(out->keys, (size_t)cap * sizeof *k);
        if (!k) return -1;
        out->keys = k;
        out->cap = cap;
    }
    px_auth_key_t *k = &out->keys[out->n++];
    memcpy(k->key, bin, sizeof bin);
    snprintf(k->z85, sizeof k->z85, "%s", z85);
    snprintf(k->label, sizeof k->label, "%s", label);
    return 0;
}

int px_auth_keys_parse(const char *text, size_t len, px_auth_keys_t *out, int *bad_line, char *why, size_t whylen) {
    *bad_line = 0;
    size_t pos = 0;
    for (int line_no = 1; pos < len; line_no++) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;
        char key[PX_KEY_LEN + 1], label[PX_KEY_LABEL_MAX + 1];
        if (memchr(text + pos, '\0', n)) {
            *bad_line = line_no;
            snprintf(why, whylen, "NUL byte in the line");
            return -1;
        }
        int r = px_key_line_parse(text + pos, n, key, label, why, whylen);
        if (r < 0) {
            *bad_line = line_no;
            return -1;
        }
        if (r == 1 && add_key(out, key, label) != 0) {
            *bad_line = line_no;
            snprintf(why, whylen, "out of memory");
            return -1;
        }
        pos += n + 1;
    }
    if (out->n == 0) {
        snprintf(why, whylen, "no keys: no client could connect (one %d-character Z85 public key per line)",
                 PX_KEY_LEN);
        return -1;
    }
    return 0;
}

int px_auth_keys_load(const char *path, px_auth_keys_t *out, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    px_buf_t b;
    px_buf_init(&b);
    char chunk[65536];
    size_t r;
    while ((r = fread(chunk, 1, sizeof chunk, f)) > 0 && b.len <= AUTH_KEYS_FILE_MAX) px_buf_append(&b, chunk, r);
    int failed = ferror(f);
    fclose(f);
    size_t len = 0;
    char *text = px_buf_take(&b, &len);
    if (failed || !text || len > AUTH_KEYS_FILE_MAX) {
        snprintf(err, errlen, "%s: %s", path,
                 failed ? "read error" : !text ? "out of memory" : "larger than 16 MiB: not an authorized-keys file");
        free(text);
        return -1;
    }
    int line = 0;
    char why[256];
    int rc = px_auth_keys_parse(text, len, out, &line, why, sizeof why);
    free(text);
    if (rc != 0) {
        if (line) snprintf(err, errlen, "%s line %d: %s", path, line, why);
        else snprintf(err, errlen, "%s: %s", path, why);
        px_auth_keys_free(out);
    }
    return rc;
}

const px_auth_key_t *px_auth_keys_find(const px_auth_keys_t *k, const uint8_t key[32]) {
    for (int i = 0; i < k->n; i++)
        if (memcmp(k->keys[i].key, key, 32) == 0) return &k->keys[i];
    return NULL;
}

void px_auth_keys_free(px_auth_keys_t *k) {
    free(k->keys);
    memset(k, 0, sizeof *k);
}

/* ---- tokens and the bind policy ----------------------------------------- */

int px_auth_token_equal(const char *given, const char *expected) {
    size_t n = strlen(expected), g = strlen(given);
    unsigned diff = n != g;
    /* Every byte of the expected token is visited whatever the input: the
     * loop's length is the job token's, and the branch on g depends only on
     * what the sender sent. */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = i < g ? (unsigned char)given[i] : 0;
        diff |= (unsigned)(c ^ (unsigned char)expected[i]);
    }
    return diff == 0;
}

int px_auth_tokens_parse(const char *text, size_t len, px_auth_tokens_t *out, char *why, size_t whylen) {
    memset(out, 0, sizeof *out);
    size_t pos = 0;
    for (int line = 1; pos < len; line++) {
        const char *s = text + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + (nl != NULL);
        if (n && s[n - 1] == '\r') n--;
        if (n == 0) continue;
        if (memchr(s, '\0', n)) return snprintf(why, whylen, "line %d holds a NUL byte", line), -1;
        if (n > PX_AUTH_TOKEN_LEN_MAX)
            return snprintf(why, whylen, "line %d: a token is 1..%d bytes, this one %zu", line, PX_AUTH_TOKEN_LEN_MAX, n), -1;
        if (out->n == PX_AUTH_TOKENS_MAX)
            return snprintf(why, whylen, "line %d: at most %d tokens", line, PX_AUTH_TOKENS_MAX), -1;
        memcpy(out->tok[out->n], s, n);
        out->tok[out->n][n] = '\0';
        out->n++;
    }
    if (out->n == 0) return snprintf(why, whylen, "no token in it (one per line)"), -1;
    return 0;
}

int px_auth_tokens_load(const char *path, px_auth_tokens_t *out, char *err, size_t errlen) {
    char buf[PX_AUTH_TOKENS_MAX * (PX_AUTH_TOKEN_LEN_MAX + 2) + 64];
    FILE *f = fopen(path, "rb");
    if (!f) return snprintf(err, errlen, "%s: %s", path, strerror(errno)), -1;
    size_t n = fread(buf, 1, sizeof buf, f);
    int rd_err = ferror(f);
    fclose(f);
    if (rd_err) return snprintf(err, errlen, "%s: read error", path), -1;
    if (n == sizeof buf) return snprintf(err, errlen, "%s: larger than %zu bytes", path, sizeof buf - 1), -1;
    char why[160];
    if (px_auth_tokens_parse(buf, n, out, why, sizeof why) != 0) return snprintf(err, errlen, "%s: %s", path, why), -1;
    return 0;
}

int px_auth_tokens_match(const px_auth_tokens_t *t, const char *given) {
    int any = 0;
    for (int i = 0; i < t->n; i++) any |= px_auth_token_equal(given, t->tok[i]);
    return any;
}

int px_auth_host_is_loopback(const char *host) {
    if (strcasecmp(host, "localhost") == 0) return 1;
    char h[128];
    size_t n = strlen(host);
    if (n >= sizeof h) return 0;
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') { /* [::1] */
        memcpy(h, host + 1, n - 2);
        h[n - 2] = '\0';
    } else {
        memcpy(h, host, n + 1);
    }
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, h, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, h, &a6) == 1) {
        if (IN6_IS_ADDR_LOOPBACK(&a6)) return 1;
        return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
    }
    return 0; /* names, interfaces, '*': assume reachable from the network */
}

int px_auth_endpoint_is_loopback(const char *endpoint) {
    if (!strncmp(endpoint, "ipc://", 6) || !strncmp(endpoint, "inproc://", 9)) return 1;
    char h[128], port[16];
    return px_wire_endpoint_split(endpoint, h, sizeof h, port, sizeof port) == 0 && px_auth_host_is_loopback(h);
}

int px_auth_bind_allowed(const char *endpoint, int curve, int token, int insecure) {
    return curve || token || insecure || px_auth_endpoint_is_loopback(endpoint);
}

/* ---- the ZAP handler ---------------------------------------------------- */

typedef struct {
    const char *type;
    char *fields;
    uint64_t count;
} auth_event_t;

struct px_auth {
    void *rep;
    char *path;
    atomic_int *reload;
    pthread_t thread;
    int started;
    atomic_int stop;
    atomic_int n_keys;
    px_auth_keys_t keys;         /* the thread's own */
    px_rate_t events, lines;     /* rate limits of rejections' events and log lines (thread only) */
    uint64_t rejected_total;
    pthread_mutex_t mu;          /* guards the queue */
    auth_event_t queue[AUTH_QUEUE_MAX];
    int n_queue;
    uint64_t dropped;            /* rejections that found the queue full */
};

/* Queues an event for the loop; a full queue keeps only the count. */
static void queue_event(px_auth_t *a, const char *type, char *fields, uint64_t count) {
    pthread_mutex_lock(&a->mu);
    if (a->n_queue < AUTH_QUEUE_MAX && fields) {
        a->queue[a->n_queue++] = (auth_event_t){type, fields, count};
        fields = NULL;
    } else {
        a->dropped += count;
    }
    pthread_mutex_unlock(&a->mu);
    free(fields);
}

/* Queues one event for the rejections not recorded one by one, once their
 * second is over (force: at once). */
static void flush_summary(px_auth_t *a, int64_t now, int force) {
    uint64_t n = px_rate_take(&a->events, now, force);
    if (!n) return;
    px_buf_t b;
    px_buf_init(&b);
    px_buf_printf(&b, "\"message\":\"handshake\",\"mechanism\":\"CURVE\",\"detail\":\"more than %d rejected "
                      "handshakes in a second; summarised\",\"count\":%llu",
                  AUTH_EVENTS_PER_S, (unsigned long long)n);
    queue_event(a, "auth_rejected", px_buf_take(&b, NULL), n);
}

static void record_rejection(px_auth_t *a, const char *mechanism, const char *key_z85, const char *address,
                             const char *detail) {
    a->rejected_total++;
    int64_t now = px_now_ms();
    if (px_rate_log_ok(&a->lines, now))
        px_log_warn("auth_rejected mechanism=%s key=%s address=%s detail=\"%s\" total=%llu", mechanism,
                    key_z85[0] ? key_z85 : "-", address, detail, (unsigned long long)a->rejected_total);
    flush_summary(a, now, 0);
    if (!px_rate_hit(&a->events, now)) return;
    px_buf_t b;
    px_buf_init(&b);
    px_buf_printf(&b, "\"message\":\"handshake\",\"mechanism\":");
    px_buf_json_str(&b, mechanism);
    px_buf_printf(&b, ",\"detail\":");
    px_buf_json_str(&b, detail);
    px_buf_printf(&b, ",\"key\":");
    px_buf_json_str(&b, key_z85);
    px_buf_printf(&b, ",\"address\":");
    px_buf_json_str(&b, address);
    px_buf_printf(&b, ",\"count\":1");
    queue_event(a, "auth_rejected", px_buf_take(&b, NULL), 1);
}

static void reload_keys(px_auth_t *a) {
    px_auth_keys_t next = {0};
    char err[512];
    px_buf_t b;
    px_buf_init(&b);
    if (px_auth_keys_load(a->path, &next, err, sizeof err) != 0) {
        px_log_error("authorized_keys_reload_failed %s (the previous %d keys stay in force)", err, a->keys.n);
        px_buf_printf(&b, "\"file\":");
        px_buf_json_str(&b, a->path);
        px_buf_printf(&b, ",\"keys\":%d,\"error\":", a->keys.n);
        px_buf_json_str(&b, err);
    } else {
        px_auth_keys_free(&a->keys);
        a->keys = next;
        atomic_store(&a->n_keys, next.n);
        px_log_info("authorized_keys_reloaded file=%s keys=%d", a->path, next.n);
        px_buf_printf(&b, "\"file\":");
        px_buf_json_str(&b, a->path);
        px_buf_printf(&b, ",\"keys\":%d,\"error\":\"\"", next.n);
    }
    queue_event(a, "authorized_keys_reloaded", px_buf_take(&b, NULL), 0);
}

static int frame_is(zmq_msg_t *m, const char *s) {
    return zmq_msg_size(m) == strlen(s) && memcmp(zmq_msg_data(m), s, strlen(s)) == 0;
}

static void frame_str(zmq_msg_t *m, char *out, size_t cap) {
    size_t n = zmq_msg_size(m) < cap - 1 ? zmq_msg_size(m) : cap - 1;
    memcpy(out, zmq_msg_data(m), n);
    out[n] = '\0';
}

/* Decides one ZAP request: "200" and the user id (the client's Z85 key, which
 * every message it sends then carries as the "User-Id" property), or "400". */
static const char *decide(px_auth_t *a, zmq_msg_t *f, int nf, char *user, size_t user_cap, const char **text) {
    char mechanism[16] = "?", address[64] = "?", z85[PX_KEY_LEN + 1] = "";
    if (nf < 6 || !frame_is(&f[0], "1.0")) {
        *text = "malformed ZAP request";
        return "500";
    }
    frame_str(&f[5], mechanism, sizeof mechanism);
    frame_str(&f[3], address, sizeof address);
    if (strcmp(mechanism, "CURVE") != 0 || nf != 7 || zmq_msg_size(&f[6]) != 32) {
        *text = "only CURVE clients are admitted";
        record_rejection(a, mechanism, "", address, *text);
        return "400";
    }
    const uint8_t *key = zmq_msg_data(&f[6]);
    zmq_z85_encode(z85, key, 32);
    if (!px_auth_keys_find(&a->keys, key)) {
        *text = "public key not in the authorized keys";
        record_rejection(a, mechanism, z85, address, *text);
        return "400";
    }
    snprintf(user, user_cap, "%s", z85);
    *text = "OK";
    return "200";
}

static void serve_one(px_auth_t *a) {
    zmq_msg_t f[ZAP_MAX_FRAMES];
    int nf = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, a->rep, 0) < 0) {
            zmq_msg_close(&m);
            break;
        }
        more = zmq_msg_more(&m);
        if (nf < ZAP_MAX_FRAMES) f[nf++] = m;
        else zmq_msg_close(&m);
    }
    if (nf == 0) return;
    char user[PX_KEY_LEN + 1] = "";
    const char *text = "";
    const char *status = decide(a, f, nf, user, sizeof user, &text);
    zmq_send(a->rep, "1.0", 3, ZMQ_SNDMORE);
    if (nf > 1) zmq_send(a->rep, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE);
    else zmq_send(a->rep, "", 0, ZMQ_SNDMORE);
    zmq_send(a->rep, status, 3, ZMQ_SNDMORE);
    zmq_send(a->rep, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(a->rep, user, strlen(user), ZMQ_SNDMORE);
    zmq_send(a->rep, "", 0, 0);
    for (int i = 0; i < nf; i++) zmq_msg_close(&f[i]);
}

static void *auth_main(void *arg) {
    px_auth_t *a = arg;
    while (!atomic_load(&a->stop)) {
        zmq_pollitem_t it = {a->rep, 0, ZMQ_POLLIN, 0};
        int rc = zmq_poll(&it, 1, ZAP_POLL_MS);
        if (a->reload && atomic_exchange(a->reload, 0)) reload_keys(a);
        if (rc > 0 && (it.revents & ZMQ_POLLIN)) serve_one(a);
        flush_summary(a, px_now_ms(), 0);
    }
    flush_summary(a, px_now_ms(), 1);
    return NULL;
}

px_auth_t *px_auth_start(void *zctx, const char *keys_path, atomic_int *reload, char *err, size_t errlen) {
    px_auth_t *a = calloc(1, sizeof *a);
    if (!a || !(a->path = strdup(keys_path))) {
        free(a);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    a->reload = reload;
    pthread_mutex_init(&a->mu, NULL);
    char why[512];
    if (px_auth_keys_load(keys_path, &a->keys, why, sizeof why) != 0) {
        snprintf(err, errlen, "--authorized-keys: %s", why);
        px_auth_stop(&a, NULL, NULL);
        return NULL;
    }
    atomic_store(&a->n_keys, a->keys.n);
    a->rep = zmq_socket(zctx, ZMQ_REP);
    int zero = 0;
    if (!a->rep || zmq_setsockopt(a->rep, ZMQ_LINGER, &zero, sizeof zero) != 0 || zmq_bind(a->rep, ZAP_ENDPOINT) != 0) {
        snprintf(err, errlen, "ZAP handler: cannot bind %s: %s", ZAP_ENDPOINT, zmq_strerror(errno));
        px_auth_stop(&a, NULL, NULL);
        return NULL;
    }
    a->events = (px_rate_t){.name = "auth_rejected", .per_s = AUTH_EVENTS_PER_S};
    a->lines = (px_rate_t){.name = "auth_rejected", .per_s = PX_RATE_LOG_LINES_PER_S};
    if (pthread_create(&a->thread, NULL, auth_main, a) != 0) {
        snprintf(err, errlen, "ZAP handler: cannot start its thread");
        px_auth_stop(&a, NULL, NULL);
        return NULL;
    }
    a->started = 1;
    px_log_info("curve_on authorized_keys=%s keys=%d", keys_path, a->keys.n);
    return a;
}

void px_auth_drain(px_auth_t *a, px_auth_event_fn fn, void *ctx) {
    if (!a) return;
    auth_event_t q[AUTH_QUEUE_MAX];
    pthread_mutex_lock(&a->mu);
    int n = a->n_queue;
    memcpy(q, a->queue, (size_t)n * sizeof q[0]);
    a->n_queue = 0;
    uint64_t dropped = a->dropped;
    a->dropped = 0;
    pthread_mutex_unlock(&a->mu);
    for (int i = 0; i < n; i++) {
        fn(ctx, q[i].type, q[i].fields, q[i].count);
        free(q[i].fields);
    }
    if (dropped) {
        char fields[160];
        snprintf(fields, sizeof fields,
                 "\"message\":\"handshake\",\"mechanism\":\"CURVE\",\"detail\":\"rejections while the event "
                 "queue was full\",\"count\":%llu",
                 (unsigned long long)dropped);
        fn(ctx, "auth_rejected", fields, dropped);
    }
}

int px_auth_key_count(px_auth_t *a) { return a ? atomic_load(&a->n_keys) : 0; }

void px_auth_stop(px_auth_t **self, px_auth_event_fn fn, void *ctx) {
    px_auth_t *a = *self;
    if (!a) return;
    if (a->started) {
        atomic_store(&a->stop, 1);
        pthread_join(a->thread, NULL);
    }
    if (fn) px_auth_drain(a, fn, ctx);
    if (a->rep) zmq_close(a->rep);
    for (int i = 0; i < a->n_queue; i++) free(a->queue[i].fields);
    px_auth_keys_free(&a->keys);
    pthread_mutex_destroy(&a->mu);
    free(a->path);
    free(a);
    *self = NULL;
}
