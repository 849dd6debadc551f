/* The coordinator's UDP socket for sealed heartbeats (proto/px_hbudp.h).
 *
 * Bound to the address and port the ROUTER socket listens on (TCP and UDP
 * ports are separate, so the same number serves both, and one Kubernetes
 * Service port entry per protocol exposes them); when that UDP port is taken,
 * to another one, which registrations advertise. Datagrams are read in
 * batches (recvmmsg) on the coordinator's own thread; what they say is the
 * caller's business. I/O only: nothing here looks inside a datagram. */
#ifndef PX_COORD_UDP_H
#define PX_COORD_UDP_H

#include <stddef.h>
#include <stdint.h>

typedef struct px_udp px_udp_t;

/* Binds for the ROUTER's bound endpoint (ZMQ_LAST_ENDPOINT, e.g.
 * "tcp://127.0.0.1:7777" or "tcp://[::]:7777"). NULL with err set when the
 * endpoint is not TCP or no UDP socket can be bound. */
px_udp_t *px_udp_open(const char *tcp_endpoint, char *err, size_t errlen);
int px_udp_fd(const px_udp_t *u);
int px_udp_port(const px_udp_t *u);

typedef void (*px_udp_datagram_fn)(void *ctx, const uint8_t *buf, size_t len);
/* Reads up to max datagrams that are waiting (never blocks), calling fn for
 * each; a datagram longer than the buffer arrives cut (fn sees len > limit,
 * so it can refuse it). Returns how many were read. */
int px_udp_read(px_udp_t *u, int max, px_udp_datagram_fn fn, void *ctx);
void px_udp_close(px_udp_t **u);

#endif
