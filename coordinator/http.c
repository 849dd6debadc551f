/* Implementation of http.h. A connection lives in one slot and goes through
 * two states: reading (until the end of the request headers), then writing
 * (the answer, built at once by the handler and kept until the socket has
 * taken all of it); then it is closed. Nothing here sleeps or retries in a
 * loop: a socket that is not ready is polled again on the next turn, and
 * every state has a deadline. The eviction rules are in http.h.
 *
 * Pages are shared and briefly reused: a page the handler built (status 200)
 * serves every request for the same path for PAGE_REUSE_FACTOR times as long
 * as it took to build. Building /status for thousands of members takes tens
 * of milliseconds of the loop; without reuse, a few clients asking at once
 * (or an attacker asking in a loop) would cost the loop that much each. With
 * it, building pages takes at most about 1/PAGE_REUSE_FACTOR of the loop's
 * time per path, whatever the request rate, and a page small enough to build
 * in microseconds is reused for microseconds only, i.e. always fresh. */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "px_time.h"

#define REQ_MAX 4096
#define READ_DEADLINE_MS 2000
#define WRITE_DEADLINE_MS 10000
/* Accepts per turn: enough to empty a backlog of slowloris reconnects in one
 * turn (a fresh client queued behind them is reached at once), bounded so
 * that the loop gets back to its ZeroMQ sockets within a millisecond or so. */
#define ACCEPTS_PER_TURN 256
#define PAGE_REUSE_FACTOR 20
#define PAGE_CACHE 8 /* paths whose last page is kept (the coordinator serves 4) */

/* A built answer (head and body), shared by the connections sending it and
 * by the cache; freed when the last one lets go. */
typedef struct {
    int refs;
    char path[64];          /* cache key; "" when not cacheable */
    long long reuse_until_ms;
    char head[256];
    size_t head_len;
    char *body;
    size_t body_len;
} page_t;

typedef struct {
    int fd; /* -1: a free slot */
    int writing;
    int item;           /* index in the last px_http_pollitems output, or -1 */
    uint32_t addr;      /* client IPv4 address, network order */
    uint64_t order;     /* accept order: smaller is older */
    long long since_ms; /* accepted (reading) or answer ready (writing) */
    size_t used;
    char req[REQ_MAX];
    page_t *page;       /* while writing */
    size_t sent;        /* bytes of page head then body sent */
} conn_t;

struct px_http {
    int listen_fd, port;
    px_http_handler_fn fn;
    void *ctx;
    uint64_t accepted;
    page_t *cache[PAGE_CACHE];
    conn_t conns[PX_HTTP_MAX_CONNS];
};

static void page_release(page_t *p) {
    if (p && --p->refs == 0) {
        free(p->body);
        free(p);
    }
}

static void set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

const char *px_http_reason(int status) {
    switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: break;
    }
    if (status >= 200 && status < 300) return "Success";
    if (status >= 400 && status < 500) return "Client Error";
    return "Server Error";
}

px_http_t *px_http_new(const char *host, int port, px_http_handler_fn fn, void *ctx, char *err, size_t errlen) {
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
        snprintf(err, errlen, "--http: '%s' is not an IPv4 address", host);
        return NULL;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    /* A long backlog: reconnecting slowloris clients must not fill the kernel's
     * accept queue, or a fresh client's SYN is dropped and waits out a 1 s retry. */
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, SOMAXCONN) != 0) {
        snprintf(err, errlen, "--http: cannot listen on %s:%d: %s", host, port, strerror(errno));
        if (fd >= 0) close(fd);
        return NULL;
    }
    set_nonblock(fd);
    px_http_t *h = calloc(1, sizeof *h);
    if (!h) {
        close(fd);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    socklen_t alen = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &alen);
    h->listen_fd = fd;
    h->port = ntohs(a.sin_port);
    h->fn = fn;
    h->ctx = ctx;
    for (int i = 0; i < PX_HTTP_MAX_CONNS; i++) h->conns[i].fd = -1;
    return h;
}

static void conn_close(conn_t *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    page_release(c->page);
    c->page = NULL;
}

void px_http_destroy(px_http_t **self) {
    px_http_t *h = *self;
    if (!h) return;
    for (int i = 0; i < PX_HTTP_MAX_CONNS; i++) conn_close(&h->conns[i]);
    for (int i = 0; i < PAGE_CACHE; i++) page_release(h->cache[i]);
    close(h->listen_fd);
    free(h);
    *self = NULL;
}

int px_http_port(const px_http_t *h) { return h->port; }

int px_http_pollitems(px_http_t *h, zmq_pollitem_t *items) {
    int n = 0;
    items[n++] = (zmq_pollitem_t){NULL, h->listen_fd, ZMQ_POLLIN, 0};
    for (int i = 0; i < PX_HTTP_MAX_CONNS; i++) {
        conn_t *c = &h->conns[i];
        c->item = -1;
        if (c->fd < 0) continue;
        c->item = n;
        items[n++] = (zmq_pollitem_t){NULL, c->fd, (short)(c->writing ? ZMQ_POLLOUT : ZMQ_POLLIN), 0};
    }
    return n;
}

/* ---- building the answer ---- */

/* Calls the handler for path, split at '?' into path and query (or uses
 * status when it is not 0) and wraps
 * the result in a page with one reference. NULL when out of memory. */
static page_t *build_page(px_http_t *h, const char *path, int status, long long now_ms) {
    page_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->refs = 1;
    const char *type = "text/plain";
    if (!status) {
        char target[512];
        snprintf(target, sizeof target, "%s", path);
        char *query = strchr(target, '?');
        if (query) *query++ = '\0';
        int64_t t0 = px_now_us();
        status = h->fn(h->ctx, target, query, &p->body, &p->body_len, &type);
        if (status < 100 || status > 599) status = 500;
        int64_t took_us = px_now_us() - t0;
        if (status == 200 && p->body && strlen(path) < sizeof p->path) {
            snprintf(p->path, sizeof p->path, "%s", path);
            p->reuse_until_ms = now_ms + took_us * PAGE_REUSE_FACTOR / 1000;
        }
    }
    const char *reason = px_http_reason(status);
    if (!p->body) {
        size_t n = strlen(reason) + 2;
        p->body = malloc(n);
        p->body_len = p->body ? (size_t)snprintf(p->body, n, "%s\n", reason) : 0;
        type = "text/plain";
    }
    int hn = snprintf(p->head, sizeof p->head,
                      "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n"
                      "Connection: close\r\n\r\n",
                      status, reason, type, p->body_len);
    p->head_len = hn > 0 && (size_t)hn < sizeof p->head ? (size_t)hn : 0;
    return p;
}

/* Where path's page is cached: its slot, else an empty one, else the stalest. */
static int cache_slot(px_http_t *h, const char *path) {
    int empty = -1, stalest = -1;
    for (int i = 0; i < PAGE_CACHE; i++) {
        page_t *p = h->cache[i];
        if (!p) {
            if (empty < 0) empty = i;
        } else if (!strcmp(p->path, path)) {
            return i;
        } else if (stalest < 0 || p->reuse_until_ms < h->cache[stalest]->reuse_until_ms) {
            stalest = i;
        }
    }
    return empty >= 0 ? empty : stalest;
}

/* The page for a GET of path: a recent one from the cache, or a new one
 * (kept in the cache when the handler built it). Adds a reference. */
static page_t *page_for(px_http_t *h, const char *path, long long now_ms) {
    int slot = cache_slot(h, path);
    page_t *p = h->cache[slot];
    if (p && !strcmp(p->path, path) && now_ms < p->reuse_until_ms) {
        p->refs++;
        return p;
    }
    p = build_page(h, path, 0, now_ms);
    if (p && p->path[0]) {
        page_release(h->cache[slot]);
        h->cache[slot] = p;
        p->refs++;
    }
    return p;
}

/* ---- writing the answer ---- */

/* Sends what the socket takes now; closes the connection once all is sent
 * or the client is gone. */
static void conn_write(conn_t *c) {
    const page_t *p = c->page;
    while (c->sent < p->head_len + p->body_len) {
        struct iovec iov[2];
        int n = 0;
        if (c->sent < p->head_len) iov[n++] = (struct iovec){(char *)p->head + c->sent, p->head_len - c->sent};
        size_t boff = c->sent > p->head_len ? c->sent - p->head_len : 0;
        if (boff < p->body_len) iov[n++] = (struct iovec){p->body + boff, p->body_len - boff};
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &m, MSG_NOSIGNAL);
        if (w > 0) {
            c->sent += (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && errno == EAGAIN) {
            return; /* POLLOUT will bring us back */
        } else {
            conn_close(c);
            return;
        }
    }
    /* Unread input (bytes after the request) would make close() reset the
     * connection and discard the end of the answer still in the kernel. */
    char sink[1024];
    while (recv(c->fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
    conn_close(c);
}

static void respond(px_http_t *h, conn_t *c, long long now_ms) {
    char method[8] = {0}, path[512] = {0};
    page_t *p;
    if (sscanf(c->req, "%7s %511s", method, path) != 2) {
        p = build_page(h, NULL, 400, now_ms);
    } else if (strcmp(method, "GET") != 0) {
        p = build_page(h, NULL, 405, now_ms);
    } else {
        p = page_for(h, path, now_ms); /* the query is part of the cache key */
    }
    if (!p) { /* out of memory: nothing to say it with */
        conn_close(c);
        return;
    }
    c->page = p;
    c->sent = 0;
    c->writing = 1;
    c->since_ms = now_ms;
    conn_write(c);
}

/* ---- reading the request ---- */

static int request_complete(const conn_t *c) {
    return memmem(c->req, c->used, "\r\n\r\n", 4) || memmem(c->req, c->used, "\n\n", 2);
}

/* Reads what has arrived; answers once the headers are complete. */
static void conn_read(px_http_t *h, conn_t *c, long long now_ms) {
    for (;;) {
        if (c->used >= REQ_MAX - 1) { /* headers too large */
            conn_close(c);
            return;
        }
        ssize_t r = recv(c->fd, c->req + c->used, REQ_MAX - 1 - c->used, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EAGAIN) return;
        if (r <= 0) { /* EOF before the request was complete, or an error */
            conn_close(c);
            return;
        }
        c->used += (size_t)r;
        c->req[c->used] = '\0';
        if (request_complete(c)) {
            respond(h, c, now_ms);
            return;
        }
    }
}

/* ---- accepting, with eviction ---- */

/* The oldest connection still reading its request (from addr only, unless
 * any_addr), or when none and with_writers, the oldest sending an answer. */
static conn_t *oldest(px_http_t *h, int any_addr, uint32_t addr, int with_writers) {
    conn_t *best = NULL;
    for (int pass = 0; pass < 2 && !best; pass++) {
        if (pass == 1 && !with_writers) break;
        for (int i = 0; i < PX_HTTP_MAX_CONNS; i++) {
            conn_t *c = &h->conns[i];
            if (c->fd < 0 || c->writing != pass || (!any_addr && c->addr != addr)) continue;
            if (!best || c->order < best->order) best = c;
        }
    }
    return best;
}

static int incomplete_from(px_http_t *h, uint32_t addr) {
    int n = 0;
    for (int i = 0; i < PX_HTTP_MAX_CONNS; i++)
        n += h->conns[i].fd >= 0 && !h->conns[i].writing && h->conns[i].addr == addr;
    return n;
}

/* A free slot for a new connection from addr, evicting per the rules in http.h. */
static conn_t *slot_for(px_http_t *h, uint32_t addr) {
    if (incomplete_from(h, addr) >= PX_HTTP_MAX_INCOMPLETE_PER_ADDR) conn_close(oldest(h, 0, addr, 0));
    for (int i = 0; i < PX_HTTP_MAX_CONNS; i++)
        if (h->conns[i].fd < 0) return &h->conns[i];
    conn_t *victim = oldest(h, 1, 0, 1);
    conn_close(victim);
    return victim;
}

static void accept_new(px_http_t *h, long long now_ms) {
    for (int k = 0; k < ACCEPTS_PER_TURN; k++) {
        struct sockaddr_in a;
        socklen_t alen = sizeof a;
        int fd = accept4(h->listen_fd, (struct sockaddr *)&a, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return; /* EAGAIN: none left; EMFILE and the like: retried next turn */
        }
        uint32_t addr = a.sin_family == AF_INET ? a.sin_addr.s_addr : 0;
        conn_t *c = slot_for(h, addr);
        c->fd = fd;
        c->writing = 0;
        c->item = -1;
        c->addr = addr;
        c->order = ++h->accepted;
        c->since_ms = now_ms;
        c->used = 0;
        c->req[0] = '\0';
        conn_read(h, c, now_ms); /* most clients send the request with the connection */
    }
}

void px_http_service(px_http_t *h, const zmq_pollitem_t *items, int n, long long now_ms) {
    /* Connections that were polled first, so that one accepted in the last
     * turn is read before newer connections can evict it. */
    for (int i = 0; i < PX_HTTP_MAX_CONNS; i++) {
        conn_t *c = &h->conns[i];
        if (c->fd < 0 || c->item < 0 || c->item >= n || items[c->item].fd != c->fd) continue;
        short ev = items[c->item].revents;
        if (c->writing && (ev & (ZMQ_POLLOUT | ZMQ_POLLERR)))
            conn_write(c);
        else if (!c->writing && (ev & (ZMQ_POLLIN | ZMQ_POLLERR)))
            conn_read(h, c, now_ms);
    }
    for (int i = 0; i < PX_HTTP_MAX_CONNS; i++) {
        conn_t *c = &h->conns[i];
        if (c->fd >= 0 && now_ms - c->since_ms > (c->writing ? WRITE_DEADLINE_MS : READ_DEADLINE_MS)) conn_close(c);
    }
    if (n > 0 && (items[0].revents & ZMQ_POLLIN)) accept_new(h, now_ms);
}
