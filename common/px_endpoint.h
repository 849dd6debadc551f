/* ZeroMQ endpoints as phalanx programs take them on their command lines,
 * checked before anything connects or binds: the scheme, the host and the
 * port range, with a message that says what is wrong. Pure string work.
 *
 * Accepted:
 *   tcp://HOST:PORT    HOST a name, an IPv4 address or [IPv6] (and, to bind,
 *                      * or an interface name); PORT 1..65535 (to bind, also
 *                      0 or *: a free one)
 *   ipc://PATH         a Unix socket path of at most 107 bytes (to bind,
 *                      also * for a fresh one) */
#ifndef PX_ENDPOINT_H
#define PX_ENDPOINT_H

#include <stddef.h>

typedef enum { PX_ENDPOINT_CONNECT, PX_ENDPOINT_BIND } px_endpoint_use_t;

/* 0 when ep is an endpoint one can `use`, else -1 with why ("not an
 * endpoint: ...", "port 99999 is not in 1..65535", ...). */
int px_endpoint_check(const char *ep, px_endpoint_use_t use, char *why, size_t len);

/* px_flag_t.check for a flag that connects (--coordinator) or binds (--bind). */
int px_endpoint_check_connect(const char *ep, char *why, size_t len);
int px_endpoint_check_bind(const char *ep, char *why, size_t len);

#endif
