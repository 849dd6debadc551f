/* The coordinator's HTTP server (coordinator/http.c) driven directly: real
 * sockets on loopback, one thread, the server's clock passed in by the test
 * (px_http_service takes now_ms), so deadlines are checked without waiting.
 * The handler is this file's: a fixed table of paths and statuses.
 *
 *   status lines  every status the server sends carries its own reason phrase
 *                 (a 500 used to go out as "500 Bad Request")
 *   deadline      a request not complete within the read deadline is dropped;
 *                 one complete in time is answered
 *   slots full    with every slot held by incomplete requests from other
 *                 addresses, a new connection evicts the oldest incomplete one
 *                 and is answered
 *   per address   one address holds at most PX_HTTP_MAX_INCOMPLETE_PER_ADDR
 *                 incomplete requests: its next connection evicts its oldest,
 *                 not another address's
 *   lazy reader   a client that never reads a large answer costs the loop no
 *                 waiting: the service call returns at once, others are
 *                 answered, and the lazy client gets the whole answer when it
 *                 reads; one that never reads is dropped at the write deadline
 *   page reuse    a page that took the handler 5 ms serves the requests of the
 *                 next 20 x 5 ms without calling it again; later it is built
 *                 anew; a page built in microseconds is built for each request */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http.h"
#include "px_time.h"

static int g_failures;

#define CHECK(cond, ...)                                             \
    do {                                                             \
        if (!(cond)) {                                               \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);     \
            fprintf(stderr, __VA_ARGS__);                            \
            fprintf(stderr, "\n");                                   \
            g_failures++;                                            \
        }                                                            \
    } while (0)

#define BIG_BYTES (8u << 20) /* far more than loopback TCP buffers for one connection */

static int g_slow_builds, g_ok_builds;

static int handler(void *ctx, const char *path, const char *query, char **body, size_t *len, const char **type) {
    (void)ctx;
    (void)query;
    *type = "text/plain";
    if (!strcmp(path, "/slow")) { /* an expensive page, like /status of a big job */
        px_sleep_ms(5);
        *body = malloc(32);
        *len = (size_t)snprintf(*body, 32, "build %d\n", ++g_slow_builds);
        return 200;
    }
    if (!strcmp(path, "/ok")) g_ok_builds++;
    if (!strcmp(path, "/ok")) {
        *body = strdup("ok\n");
        *len = 3;
        return 200;
    }
    if (!strcmp(path, "/fail")) return 500; /* no body: a builder that ran out of memory */
    if (!strcmp(path, "/unavailable")) return 503;
    if (!strcmp(path, "/big")) {
        *body = malloc(BIG_BYTES);
        memset(*body, 'b', BIG_BYTES);
        *len = BIG_BYTES;
        return 200;
    }
    return 404;
}

/* One turn of the loop as the coordinator runs it, at server time now. */
static void pump(px_http_t *h, long long now) {
    zmq_pollitem_t items[1 + PX_HTTP_MAX_CONNS];
    int n = px_http_pollitems(h, items);
    zmq_poll(items, n, 2);
    px_http_service(h, items, n, now);
}

static void pump_n(px_http_t *h, long long now, int turns) {
    for (int i = 0; i < turns; i++) pump(h, now);
}

/* A blocking client socket from source address src (127.0.0.x). */
static int client(px_http_t *h, const char *src) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, src, &a.sin_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) perror("bind");
    a.sin_port = htons((uint16_t)px_http_port(h));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) perror("connect");
    struct timeval tv = {0, 1000}; /* reads never block the single-threaded test */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static void say(int fd, const char *s) {
    if (send(fd, s, strlen(s), MSG_NOSIGNAL) < 0) perror("send");
}

/* Reads what the server sent, pumping it meanwhile, until EOF or `turns`
 * turns. Returns the byte count; *closed says whether EOF (or a reset) came. */
static size_t drain(px_http_t *h, long long now, int fd, char *out, size_t cap, int turns, int *closed) {
    size_t got = 0;
    *closed = 0;
    for (int t = 0; t < turns && !*closed; t++) {
        pump(h, now);
        for (;;) {
            char tmp[65536];
            ssize_t r = recv(fd, tmp, sizeof tmp, 0);
            if (r == 0 || (r < 0 && errno == ECONNRESET)) {
                *closed = 1;
                break;
            }
            if (r < 0) break;
            size_t keep = got + (size_t)r < cap ? (size_t)r : (cap > got ? cap - got : 0);
            memcpy(out + got, tmp, keep);
            got += (size_t)r;
        }
    }
    if (cap) out[got < cap ? got : cap - 1] = '\0';
    return got;
}

static int answered_200(px_http_t *h, long long now, const char *src) {
    int fd = client(h, src);
    say(fd, "GET /ok HTTP/1.0\r\n\r\n");
    char buf[512];
    int closed;
    drain(h, now, fd, buf, sizeof buf, 50, &closed);
    close(fd);
    return closed && strncmp(buf, "HTTP/1.0 200 OK\r\n", 17) == 0;
}

static int is_closed(px_http_t *h, long long now, int fd) {
    char buf[64];
    int closed;
    drain(h, now, fd, buf, sizeof buf, 3, &closed);
    return closed;
}

static px_http_t *server(void) {
    char err[256];
    px_http_t *h = px_http_new("127.0.0.1", 0, handler, NULL, err, sizeof err);
    if (!h) {
        fprintf(stderr, "px_http_new: %s\n", err);
        exit(1);
    }
    return h;
}

static void test_status_lines(void) {
    px_http_t *h = server();
    long long now = px_now_ms();
    struct {
        const char *req, *line;
    } cases[] = {
        {"GET /ok HTTP/1.0\r\n\r\n", "HTTP/1.0 200 OK\r\n"},
        {"GET /fail HTTP/1.0\r\n\r\n", "HTTP/1.0 500 Internal Server Error\r\n"},
        {"GET /unavailable HTTP/1.0\r\n\r\n", "HTTP/1.0 503 Service Unavailable\r\n"},
        {"GET /nope HTTP/1.0\r\n\r\n", "HTTP/1.0 404 Not Found\r\n"},
        {"POST /ok HTTP/1.0\r\n\r\n", "HTTP/1.0 405 Method Not Allowed\r\n"},
        {"GET\r\n\r\n", "HTTP/1.0 400 Bad Request\r\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int fd = client(h, "127.0.0.1");
        say(fd, cases[i].req);
        char buf[1024];
        int closed;
        drain(h, now, fd, buf, sizeof buf, 50, &closed);
        close(fd);
        CHECK(strncmp(buf, cases[i].line, strlen(cases[i].line)) == 0, "request %.20s...: want status line '%.*s', got '%.60s'",
              cases[i].req, (int)strlen(cases[i].line) - 2, cases[i].line, buf);
        CHECK(strstr(buf, "\r\n\r\n") && strstr(buf, "\r\n\r\n")[4] != '\0', "request %.20s...: the answer has a body",
              cases[i].req);
    }
    px_http_destroy(&h);
}

static void test_deadline(void) {
    px_http_t *h = server();
    long long t0 = px_now_ms();
    int slow = client(h, "127.0.0.1");
    say(slow, "GET /o");
    pump_n(h, t0, 3);
    CHECK(!is_closed(h, t0 + 1000, slow), "an incomplete request is kept within its deadline");
    say(slow, "k HTTP/1.0\r\n\r\n");
    char buf[256];
    int closed;
    drain(h, t0 + 1500, slow, buf, sizeof buf, 50, &closed);
    CHECK(strncmp(buf, "HTTP/1.0 200 OK", 15) == 0, "a request completed in time is answered: '%.40s'", buf);
    close(slow);

    slow = client(h, "127.0.0.1");
    say(slow, "GET /o");
    long long t1 = px_now_ms();
    pump_n(h, t1, 3);
    CHECK(is_closed(h, t1 + 60000, slow), "an incomplete request is dropped after its deadline");
    close(slow);
    px_http_destroy(&h);
}

static void test_slots_full(void) {
    px_http_t *h = server();
    long long now = px_now_ms();
    int fds[PX_HTTP_MAX_CONNS];
    for (int i = 0; i < PX_HTTP_MAX_CONNS; i++) { /* 4 per address: below any per-address cap */
        char src[32];
        snprintf(src, sizeof src, "127.0.1.%d", 1 + i / 4);
        fds[i] = client(h, src);
        say(fds[i], "GET /ok HTTP/1.0\r\nX-Slow: ");
        pump(h, now + i); /* accepted in this order: fds[0] is the oldest */
    }
    for (int i = 0; i < PX_HTTP_MAX_CONNS; i++) CHECK(!is_closed(h, now + 100, fds[i]), "slot %d held", i);
    CHECK(answered_200(h, now + 200, "127.0.0.1"), "all slots held by incomplete requests: a fresh request is answered");
    CHECK(is_closed(h, now + 200, fds[0]), "the oldest incomplete request made room for it");
    for (int i = 1; i < PX_HTTP_MAX_CONNS; i++) CHECK(!is_closed(h, now + 200, fds[i]), "the others are kept (%d)", i);
    for (int i = 0; i < PX_HTTP_MAX_CONNS; i++) close(fds[i]);
    px_http_destroy(&h);
}

static void test_per_address(void) {
    px_http_t *h = server();
    long long now = px_now_ms();
    enum { CAP = PX_HTTP_MAX_INCOMPLETE_PER_ADDR };
    int other = client(h, "127.0.2.1");
    say(other, "GET /ok HTTP/1.0\r\nX-Slow: ");
    pump(h, now);
    int fds[CAP + 1];
    for (int i = 0; i <= CAP; i++) {
        fds[i] = client(h, "127.0.2.2");
        say(fds[i], "GET /ok HTTP/1.0\r\nX-Slow: ");
        pump(h, now + 1 + i);
    }
    CHECK(is_closed(h, now + 100, fds[0]), "the address's oldest incomplete request is dropped past its cap");
    for (int i = 1; i <= CAP; i++) CHECK(!is_closed(h, now + 100, fds[i]), "its newer ones are kept (%d)", i);
    CHECK(!is_closed(h, now + 100, other), "another address's older request is not touched");
    CHECK(answered_200(h, now + 100, "127.0.2.2"), "the same address still gets a fresh request answered");
    close(other);
    for (int i = 0; i <= CAP; i++) close(fds[i]);
    px_http_destroy(&h);
}

static void test_lazy_reader(void) {
    px_http_t *h = server();
    long long now = px_now_ms();
    int lazy = socket(AF_INET, SOCK_STREAM, 0);
    int small = 4096;
    setsockopt(lazy, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)px_http_port(h));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(lazy, (struct sockaddr *)&a, sizeof a) != 0) perror("connect");
    say(lazy, "GET /big HTTP/1.0\r\n\r\n");
    int64_t t = px_now_ms();
    pump_n(h, now, 5);
    int64_t dt = px_now_ms() - t;
    CHECK(dt < 500, "five loop turns with a client not reading a %u MiB answer took %lld ms (the loop must not wait)",
          BIG_BYTES >> 20, (long long)dt);
    CHECK(answered_200(h, now, "127.0.0.1"), "another client is answered meanwhile");

    /* The lazy client reads at last: every byte arrives. */
    struct timeval tv = {0, 1000};
    setsockopt(lazy, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char *buf = malloc(BIG_BYTES + 4096);
    int closed;
    size_t got = drain(h, now + 100, lazy, buf, BIG_BYTES + 4096, 20000, &closed);
    char *body = strstr(buf, "\r\n\r\n");
    size_t head = body ? (size_t)(body + 4 - buf) : 0;
    CHECK(closed && body && got - head == BIG_BYTES, "the lazy client gets the whole answer: %zu of %u body bytes",
          got > head ? got - head : 0, BIG_BYTES);
    free(buf);
    close(lazy);

    /* One that never reads is dropped at the write deadline. */
    lazy = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(lazy, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    if (connect(lazy, (struct sockaddr *)&a, sizeof a) != 0) perror("connect");
    say(lazy, "GET /big HTTP/1.0\r\n\r\n");
    pump_n(h, now, 5);
    pump_n(h, now + 3600 * 1000, 2);
    zmq_pollitem_t items[1 + PX_HTTP_MAX_CONNS];
    CHECK(px_http_pollitems(h, items) == 1, "a client that never reads is dropped at the write deadline");
    close(lazy);
    px_http_destroy(&h);
}

/* GET path at server time now; returns the body (static buffer). */
static const char *get_body(px_http_t *h, long long now, const char *path) {
    static char buf[1024];
    char req[128];
    snprintf(req, sizeof req, "GET %s HTTP/1.0\r\n\r\n", path);
    int fd = client(h, "127.0.0.1");
    say(fd, req);
    int closed;
    drain(h, now, fd, buf, sizeof buf, 50, &closed);
    close(fd);
    char *body = strstr(buf, "\r\n\r\n");
    return body ? body + 4 : "";
}

static void test_page_reuse(void) {
    px_http_t *h = server();
    long long t0 = px_now_ms();
    CHECK(!strcmp(get_body(h, t0, "/slow"), "build 1\n"), "the first request builds the page");
    for (int i = 1; i <= 10; i++)
        CHECK(!strcmp(get_body(h, t0 + 9 * i, "/slow"), "build 1\n"), "reused %d ms later", 9 * i);
    CHECK(g_slow_builds == 1, "ten requests within 20x the build time: built once, got %d", g_slow_builds);
    CHECK(!strcmp(get_body(h, t0 + 60000, "/slow"), "build 2\n"), "built anew once the reuse time is over");
    int before = g_ok_builds;
    get_body(h, t0, "/ok");
    get_body(h, t0 + 100, "/ok");
    CHECK(g_ok_builds == before + 2, "a page built in microseconds is built for every request (%d builds)",
          g_ok_builds - before);
    px_http_destroy(&h);
}

int main(void) {
    test_page_reuse();
    test_status_lines();
    test_deadline();
    test_slots_full();
    test_per_address();
    test_lazy_reader();
    if (g_failures) {
        fprintf(stderr, "%d check(s) failed\n", g_failures);
        return 1;
    }
    printf("PASS\n");
    return 0;
}
