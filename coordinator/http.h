/* A minimal HTTP/1.0 server for the coordinator's /status, /metrics and
 * dashboard. It never blocks the coordinator's loop: the listening socket and
 * every connection are non-blocking and polled by the loop alongside the
 * ZeroMQ sockets (px_http_pollitems / px_http_service). Only GET is served;
 * a request must arrive within 2 s and fit in 4 KiB, else it is dropped. */
#ifndef PX_HTTP_H
#define PX_HTTP_H

#include <stddef.h>
#include <zmq.h>

#define PX_HTTP_MAX_CONNS 32

typedef struct px_http px_http_t;

/* Fills *body (malloc'd; the server frees it) and *type for `path`; returns the HTTP status. */
typedef int (*px_http_handler_fn)(void *ctx, const char *path, char **body, size_t *len, const char **type);

px_http_t *px_http_new(const char *host, int port, px_http_handler_fn fn, void *ctx, char *err, size_t errlen);
void px_http_destroy(px_http_t **self);
/* Writes up to 1 + PX_HTTP_MAX_CONNS poll items; returns how many. */
int px_http_pollitems(px_http_t *h, zmq_pollitem_t *items);
/* Handles whatever the poll found ready on those items. */
void px_http_service(px_http_t *h, const zmq_pollitem_t *items, int n, long long now_ms);
int px_http_port(const px_http_t *h);

#endif
