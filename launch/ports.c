/* Implementation of ports.h. */
#include "ports.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

/* Binds a listening TCP socket to host:port (port 0: any), returns the port
 * bound, -EADDRINUSE when taken, another negative errno otherwise. */
static int try_listen(struct in_addr addr, int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = addr};
    int rc = -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(fd, 1) == 0) {
        socklen_t len = sizeof sa;
        rc = getsockname(fd, (struct sockaddr *)&sa, &len) == 0 ? ntohs(sa.sin_port) : -errno;
    } else {
        rc = -errno;
    }
    close(fd);
    return rc;
}

int px_port_taken(const char *host, int port, int *other) {
    struct in_addr addr;
    if (inet_pton(AF_INET, host, &addr) != 1 || port <= 0) return -1;
    int rc = try_listen(addr, port);
    if (rc == port) return 0;
    if (rc != -EADDRINUSE) return -1;
    int any = try_listen(addr, 0);
    if (any <= 0) return -1;
    *other = any;
    return 1;
}
