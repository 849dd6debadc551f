/* ft_tcpbw: loopback TCP bandwidth, the yardstick of the healing benchmark
 * (bench/ft_heal.py compares the heal rate against it, in the same run).
 *
 *   ft_tcpbw [--bytes N] [--chunk N]
 *
 * One forked process writes N bytes through a 127.0.0.1 TCP connection,
 * the parent reads them; the rate is bytes / (time from the first read to
 * the end of the stream). Default 4 GiB in 4 MiB writes (healing sends 16 MiB
 * chunks: PX_STATE_CHUNK_FLOATS in model/train_state.h). One line
 * on stdout: "tcp_bw bytes=N chunk=N seconds=S GBps=X" (GB = 1e9 bytes). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "px_child.h"
#include "px_flags.h"
#include "px_time.h"

#define PROG "ft_tcpbw"

static void send_all(int fd, const char *buf, size_t chunk, size_t total) {
    for (size_t sent = 0; sent < total;) {
        ssize_t w = write(fd, buf, chunk < total - sent ? chunk : total - sent);
        if (w <= 0) _exit(1);
        sent += (size_t)w;
    }
}

int main(int argc, char **argv) {
    size_t total = (size_t)4 << 30, chunk = (size_t)4 << 20;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: " PROG " [--bytes N] [--chunk N]\n"
                   "  --bytes N   bytes to stream, 1 MiB..64 GiB [4294967296]\n"
                   "  --chunk N   bytes per write/read, 4 KiB..256 MiB [4194304]\n");
            return 0;
        }
        if (!strcmp(a, "--bytes")) total = (size_t)px_flag_int(PROG, a, v, 1 << 20, 1LL << 36);
        else if (!strcmp(a, "--chunk")) chunk = (size_t)px_flag_int(PROG, a, v, 4096, 1 << 28);
        else px_flag_unknown(PROG, a);
        i++;
    }
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof addr;
    if (ls < 0 || bind(ls, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(ls, 1) != 0 ||
        getsockname(ls, (struct sockaddr *)&addr, &alen) != 0) {
        perror(PROG ": listen on 127.0.0.1");
        return 1;
    }
    char *buf = malloc(chunk);
    if (!buf) return 1;
    memset(buf, 0x5a, chunk);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        perror(PROG ": fork");
        return 1;
    }
    if (pid == 0) {
        px_child_die_with_parent(parent);
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0 || connect(s, (struct sockaddr *)&addr, sizeof addr) != 0) _exit(1);
        send_all(s, buf, chunk, total);
        close(s);
        _exit(0);
    }
    int s = accept(ls, NULL, NULL);
    if (s < 0) {
        perror(PROG ": accept");
        return 1;
    }
    size_t got = 0;
    int64_t t0 = 0;
    for (;;) {
        ssize_t r = read(s, buf, chunk);
        if (r <= 0) break;
        if (got == 0) t0 = px_now_us();
        got += (size_t)r;
    }
    int64_t us = px_now_us() - t0;
    close(s);
    close(ls);
    int st = 0;
    waitpid(pid, &st, 0);
    free(buf);
    if (got != total || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, PROG ": the stream carried %zu of %zu bytes\n", got, total);
        return 1;
    }
    printf("tcp_bw bytes=%zu chunk=%zu seconds=%.3f GBps=%.3f\n", total, chunk, (double)us / 1e6,
           (double)total / ((double)us * 1e3));
    return 0;
}
