/* Implementation of udp.h. */
#include "udp.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "px_hbudp.h"
#include "px_wire.h"

#define BATCH 64
#define RCVBUF (8 << 20) /* a push of a large quorum keeps the loop away for a while: room for ~0.5 s at 125k/s */

struct px_udp {
    int fd, port;
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    uint8_t buf[BATCH][PX_HBUDP_MAX + 1]; /* one more: a longer datagram shows as cut */
};

static int bind_one(const struct addrinfo *ai, const char *port_override) {
    struct sockaddr_storage sa;
    memcpy(&sa, ai->ai_addr, ai->ai_addrlen);
    if (port_override) {
        in_port_t p = htons((in_port_t)atoi(port_override));
        if (sa.ss_family == AF_INET) ((struct sockaddr_in *)&sa)->sin_port = p;
        else ((struct sockaddr_in6 *)&sa)->sin6_port = p;
    }
    int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int sz = RCVBUF;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof sz) != 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz); /* capped by net.core.rmem_max */
    if (bind(fd, (struct sockaddr *)&sa, ai->ai_addrlen) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

px_udp_t *px_udp_open(const char *tcp_endpoint, char *err, size_t errlen) {
    char host[256], port[16];
    if (px_wire_endpoint_split(tcp_endpoint, host, sizeof host, port, sizeof port) != 0 || !port[0]) {
        snprintf(err, errlen, "'%s' is not a tcp:// endpoint", tcp_endpoint ? tcp_endpoint : "");
        return NULL;
    }
    if (!strcmp(host, "*")) snprintf(host, sizeof host, "0.0.0.0");
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_DGRAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
    int g = getaddrinfo(host, port, &hints, &ai);
    if (g != 0 || !ai) {
        snprintf(err, errlen, "'%s': %s", tcp_endpoint, gai_strerror(g));
        return NULL;
    }
    int fd = bind_one(ai, NULL);
    if (fd < 0 && errno == EADDRINUSE) fd = bind_one(ai, "0"); /* the number is taken for UDP: any port */
    int e = errno;
    freeaddrinfo(ai);
    if (fd < 0) {
        snprintf(err, errlen, "cannot bind UDP on %s port %s: %s", host, port, strerror(e));
        return NULL;
    }
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    px_udp_t *u = calloc(1, sizeof *u);
    if (!u) {
        close(fd);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    u->fd = fd;
    u->port = ntohs(sa.ss_family == AF_INET ? ((struct sockaddr_in *)&sa)->sin_port
                                            : ((struct sockaddr_in6 *)&sa)->sin6_port);
    for (int i = 0; i < BATCH; i++) {
        u->iov[i] = (struct iovec){u->buf[i], sizeof u->buf[i]};
        u->msgs[i].msg_hdr.msg_iov = &u->iov[i];
        u->msgs[i].msg_hdr.msg_iovlen = 1;
    }
    return u;
}

int px_udp_fd(const px_udp_t *u) { return u ? u->fd : -1; }
int px_udp_port(const px_udp_t *u) { return u ? u->port : 0; }

int px_udp_read(px_udp_t *u, int max, px_udp_datagram_fn fn, void *ctx) {
    int total = 0;
    while (total < max) {
        int want = max - total < BATCH ? max - total : BATCH;
        int n = recvmmsg(u->fd, u->msgs, (unsigned)want, MSG_DONTWAIT, NULL);
        if (n <= 0) break;
        for (int i = 0; i < n; i++) {
            size_t len = u->msgs[i].msg_len;
            if (u->msgs[i].msg_hdr.msg_flags & MSG_TRUNC) len = sizeof u->buf[i];
            fn(ctx, u->buf[i], len);
            u->msgs[i].msg_hdr.msg_flags = 0;
        }
        total += n;
        if (n < want) break;
    }
    return total;
}

void px_udp_close(px_udp_t **u) {
    if (!*u) return;
    close((*u)->fd);
    free(*u);
    *u = NULL;
}
