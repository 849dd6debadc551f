/* A minimal HTTP/1.0 server for the coordinator's /status, /metrics and
 * dashboard. It never blocks or sleeps on the coordinator's loop: the
 * listening socket and every connection are non-blocking and polled by the
 * loop alongside the ZeroMQ sockets (px_http_pollitems / px_http_service);
 * an answer is written from a per-connection buffer as the socket takes it.
 *
 * Only GET is served. Slow or hostile clients cannot lock others out:
 *  - a request must be complete within 2 s of the connection and fit in
 *    4 KiB; the whole answer must be taken by the client within 10 s;
 *    otherwise the connection is dropped;
 *  - one client address holds at most PX_HTTP_MAX_INCOMPLETE_PER_ADDR
 *    connections whose request is still incomplete: its next connection
 *    drops its oldest such connection;
 *  - when all PX_HTTP_MAX_CONNS slots are taken, a new connection drops the
 *    oldest incomplete request (of any address), or, when every slot is
 *    sending an answer, the oldest of those;
 *  - a new connection is read at once: a client that sends its request with
 *    the connection is answered in the same turn of the loop, before later
 *    connections can evict it.
 * So slowloris connections (a partial request line, never finished) from one
 * or many addresses only ever evict each other and fresh requests are served.
 * A page the handler built is reused for 20 times its build time (http.c), so
 * clients asking for an expensive page cannot keep the loop busy building it.
 * docs/protocol.md states the rules for operators. */
#ifndef PX_HTTP_H
#define PX_HTTP_H

#include <stddef.h>
#include <zmq.h>

#define PX_HTTP_MAX_CONNS 64
#define PX_HTTP_MAX_INCOMPLETE_PER_ADDR 16

typedef struct px_http px_http_t;

/* Fills *body (malloc'd; the server frees it) and *type for `path` and its
 * `query` (what followed '?', NULL when none; as the client sent it, not
 * decoded); returns the HTTP status. With no body, the server sends the
 * status's reason phrase. */
typedef int (*px_http_handler_fn)(void *ctx, const char *path, const char *query, char **body, size_t *len,
                                  const char **type);

px_http_t *px_http_new(const char *host, int port, px_http_handler_fn fn, void *ctx, char *err, size_t errlen);
void px_http_destroy(px_http_t **self);
/* Writes up to 1 + PX_HTTP_MAX_CONNS poll items (POLLIN while a request is
 * read, POLLOUT while an answer waits for the socket); returns how many. */
int px_http_pollitems(px_http_t *h, zmq_pollitem_t *items);
/* Handles whatever the poll found ready on those items, drops connections
 * past their deadlines, accepts new ones. Never waits. */
void px_http_service(px_http_t *h, const zmq_pollitem_t *items, int n, long long now_ms);
int px_http_port(const px_http_t *h);

/* The reason phrase for an HTTP status ("Internal Server Error" for 500). */
const char *px_http_reason(int status);

#endif
