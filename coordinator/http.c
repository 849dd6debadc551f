/* Implementation of http.h. Each connection reads until the end of the
 * request headers, then the whole response is written (responses are small)
 * and the connection is closed. */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define REQ_MAX 4096
#define REQ_DEADLINE_MS 2000

typedef struct {
    int fd;
    long long started_ms;
    size_t used;
    char buf[REQ_MAX];
} conn_t;

struct px_http {
    int listen_fd, port;
    px_http_handler_fn fn;
    void *ctx;
    conn_t conns[PX_HTTP_MAX_CONNS];
};

static void set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

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
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 64) != 0) {
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

void px_http_destroy(px_http_t **self) {
    px_http_t *h = *self;
    if (!h) return;
    for (int i = 0; i < PX_HTTP_MAX_CONNS; i++)
        if (h->conns[i].fd >= 0) close(h->conns[i].fd);
    close(h->listen_fd);
    free(h);
    *self = NULL;
}

int px_http_port(const px_http_t *h) { return h->port; }

int px_http_pollitems(px_http_t *h, zmq_pollitem_t *items) {
    int n = 0;
    items[n++] = (zmq_pollitem_t){NULL, h->listen_fd, ZMQ_POLLIN, 0};
    for (int i = 0; i < PX_HTTP_MAX_CONNS; i++)
        if (h->conns[i].fd >= 0) items[n++] = (zmq_pollitem_t){NULL, h->conns[i].fd, ZMQ_POLLIN, 0};
    return n;
}

static void write_all(int fd, const char *p, size_t n) {
    /* Responses are small; a client that does not read within ~1 s loses the rest. */
    for (int tries = 0; n > 0 && tries < 100;) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            usleep(10000);
            tries++;
        } else {
            return;
        }
    }
}

static void respond(px_http_t *h, conn_t *c) {
    char method[8] = {0}, path[512] = {0};
    int status;
    char *body = NULL;
    size_t len = 0;
    const char *type = "text/plain";
    if (sscanf(c->buf, "%7s %511s", method, path) != 2) {
        status = 400;
    } else if (strcmp(method, "GET") != 0) {
        status = 405;
    } else {
        char *q = strchr(path, '?');
        if (q) *q = '\0';
        status = h->fn(h->ctx, path, &body, &len, &type);
    }
    if (!body) {
        const char *msg = status == 404 ? "not found\n" : status == 405 ? "only GET\n" : "bad request\n";
        body = strdup(msg);
        len = strlen(msg);
        type = "text/plain";
    }
    const char *text = status == 200 ? "OK" : status == 404 ? "Not Found" : status == 405 ? "Method Not Allowed" : "Bad Request";
    char head[256];
    int hn = snprintf(head, sizeof head,
                      "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
                      status, text, type, len);
    write_all(c->fd, head, (size_t)hn);
    write_all(c->fd, body, len);
    free(body);
    close(c->fd);
    c->fd = -1;
}

void px_http_service(px_http_t *h, const zmq_pollitem_t *items, int n, long long now_ms) {
    if (n > 0 && (items[0].revents & ZMQ_POLLIN)) {
        for (;;) {
            int fd = accept4(h->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) break;
            int slot = -1;
            for (int i = 0; i < PX_HTTP_MAX_CONNS && slot < 0; i++)
                if (h->conns[i].fd < 0) slot = i;
            if (slot < 0) { /* full: refuse rather than stall */
                close(fd);
                continue;
            }
            h->conns[slot].fd = fd;
            h->conns[slot].used = 0;
            h->conns[slot].started_ms = now_ms;
        }
    }
    for (int i = 0; i < PX_HTTP_MAX_CONNS; i++) {
        conn_t *c = &h->conns[i];
        if (c->fd < 0) continue;
        int ready = 0;
        for (int k = 1; k < n; k++)
            if (items[k].fd == c->fd && (items[k].revents & (ZMQ_POLLIN | ZMQ_POLLERR))) ready = 1;
        if (ready) {
            ssize_t r = recv(c->fd, c->buf + c->used, REQ_MAX - 1 - c->used, 0);
            if (r <= 0 && !(r < 0 && (errno == EAGAIN || errno == EINTR))) {
                close(c->fd);
                c->fd = -1;
                continue;
            }
            if (r > 0) c->used += (size_t)r;
            c->buf[c->used] = '\0';
            if (strstr(c->buf, "\r\n\r\n") || strstr(c->buf, "\n\n")) {
                respond(h, c);
                continue;
            }
            if (c->used >= REQ_MAX - 1) { /* headers too large */
                close(c->fd);
                c->fd = -1;
                continue;
            }
        }
        if (now_ms - c->started_ms > REQ_DEADLINE_MS) {
            close(c->fd);
            c->fd = -1;
        }
    }
}
