/* comm_allreduce: Gloo-backend allreduce throughput against the loopback TCP
 * bandwidth of the same machine, measured in the same program.
 *
 *   comm_allreduce [--ranks N] [--min-bytes B] [--max-bytes B] [--seconds S]
 *
 * First a plain TCP stream (one process writes, another reads, over a
 * 127.0.0.1 socket) gives the link bandwidth. Then N rank processes run
 * float-sum allreduces for sizes from min to max bytes (x4 steps). For each
 * size it prints the time per allreduce (the slowest rank's average), the
 * algorithm bandwidth (bytes / time), the bus bandwidth (algbw * 2(N-1)/N,
 * what each rank sends and receives in a ring, comparable to a link) and
 * busbw / TCP. Ranks share the machine's cores, so on a 2-core box three
 * ranks also compete for CPU with the kernel's loopback work. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "px_child.h"
#include "px_comm.h"
#include "px_dir_store.h"
#include "px_flags.h"
#include "px_procs.h"
#include "px_time.h"

#define PROG "comm_allreduce"
#define MAX_SIZES 32

typedef struct {
    px_dir_store_t store;
    int nsizes;
    size_t bytes[MAX_SIZES];
    double seconds;       /* time budget per size */
    int iters[MAX_SIZES]; /* chosen by the ranks, written by rank 0 */
    double ms[MAX_SIZES]; /* slowest rank's average, written by rank 0 */
    int ok;
} bench_t;

/* Streams `total` bytes through one loopback TCP connection; GB/s. */
static double tcp_bandwidth(size_t total) {
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(ls, 1) != 0 ||
        getsockname(ls, (struct sockaddr *)&a, &alen) != 0) {
        perror(PROG ": tcp listen");
        exit(1);
    }
    const size_t chunk = 4u << 20;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        px_child_die_with_parent(parent);
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s, (struct sockaddr *)&a, sizeof(a)) != 0) _exit(1);
        char *buf = malloc(chunk);
        memset(buf, 1, chunk);
        for (size_t sent = 0; sent < total;) {
            ssize_t w = write(s, buf, chunk < total - sent ? chunk : total - sent);
            if (w <= 0) _exit(1);
            sent += (size_t)w;
        }
        close(s);
        _exit(0);
    }
    int s = accept(ls, NULL, NULL);
    char *buf = malloc(chunk);
    int64_t t0 = px_now_us();
    size_t got = 0;
    for (;;) {
        ssize_t r = read(s, buf, chunk);
        if (r <= 0) break;
        got += (size_t)r;
    }
    int64_t us = px_now_us() - t0;
    close(s);
    close(ls);
    waitpid(pid, NULL, 0);
    free(buf);
    if (got != total) {
        fprintf(stderr, PROG ": tcp stream got %zu of %zu bytes\n", got, total);
        exit(1);
    }
    return (double)total / ((double)us * 1e3);
}

static int bench_rank(int rank, int size, void *argp) {
    bench_t *b = argp;
    px_store_t st = px_dir_store(&b->store);
    char err[512];
    px_comm_t *c = px_comm_new_gloo(&st, "bench/q1", rank, size, 60000, err, sizeof(err));
    if (!c) {
        fprintf(stderr, PROG ": rank %d: %s\n", rank, err);
        return 1;
    }
    size_t most = b->bytes[b->nsizes - 1] / sizeof(float);
    float *buf = malloc(most * sizeof(float));
    for (size_t i = 0; i < most; i++) buf[i] = 1.0f;
    for (int k = 0; k < b->nsizes; k++) {
        size_t n = b->bytes[k] / sizeof(float);
        /* Warm up with 3 timed runs; every rank then uses the iteration
         * count the slowest rank asks for, to fill about b->seconds. */
        px_comm_status_t s = px_comm_barrier(c);
        int64_t t0 = px_now_us();
        for (int i = 0; i < 3 && s == PX_COMM_OK; i++) s = px_comm_allreduce_sum_f32(c, buf, n);
        double per = (double)(px_now_us() - t0) / 3e6 + 1e-9;
        float want = (float)(b->seconds / per);
        want = want < 5 ? 5 : want > 2000 ? 2000 : want;
        if (s == PX_COMM_OK) s = px_comm_allreduce_f32(c, &want, 1, PX_COMM_MIN);
        int iters = (int)want;
        if (s == PX_COMM_OK) s = px_comm_barrier(c);
        t0 = px_now_us();
        for (int i = 0; i < iters && s == PX_COMM_OK; i++) s = px_comm_allreduce_sum_f32(c, buf, n);
        float ms = (float)((double)(px_now_us() - t0) / 1000.0 / iters);
        if (s == PX_COMM_OK) s = px_comm_allreduce_f32(c, &ms, 1, PX_COMM_MAX);
        if (rank == 0) b->iters[k] = iters;
        if (s != PX_COMM_OK) {
            fprintf(stderr, PROG ": rank %d: %s\n", rank, px_comm_last_error(c));
            return 1;
        }
        if (rank == 0) b->ms[k] = ms;
    }
    px_comm_destroy(&c);
    free(buf);
    return 0;
}

static void usage(void) {
    printf("usage: " PROG " [--ranks N] [--min-bytes B] [--max-bytes B] [--seconds S]\n"
           "  --ranks N       rank processes (default 3, 2..%d)\n"
           "  --min-bytes B   smallest allreduce (default 1024)\n"
           "  --max-bytes B   largest allreduce (default 67108864 = 64 MiB)\n"
           "  --seconds S     time budget per size (default 0.3; 5..2000 iterations)\n",
           PX_PROCS_MAX);
}

int main(int argc, char **argv) {
    int ranks = 3;
    size_t minb = 1024, maxb = 64u << 20;
    double seconds = 0.3;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            usage();
            return 0;
        } else if (!strcmp(f, "--ranks")) {
            ranks = (int)px_flag_int(PROG, f, px_flag_need(PROG, f, argv[++i]), 2, PX_PROCS_MAX);
        } else if (!strcmp(f, "--min-bytes")) {
            minb = (size_t)px_flag_int(PROG, f, px_flag_need(PROG, f, argv[++i]), 4, 1LL << 32);
        } else if (!strcmp(f, "--max-bytes")) {
            maxb = (size_t)px_flag_int(PROG, f, px_flag_need(PROG, f, argv[++i]), 4, 1LL << 32);
        } else if (!strcmp(f, "--seconds")) {
            seconds = px_flag_double(PROG, f, px_flag_need(PROG, f, argv[++i]), 0.01, 60);
        } else {
            px_flag_unknown(PROG, f);
        }
    }
    if (maxb < minb) maxb = minb;

    double tcp = tcp_bandwidth((size_t)2 << 30);
    printf("loopback TCP stream (1 connection, 2 GiB): %.2f GB/s\n", tcp);

    bench_t *b = px_procs_shared(sizeof(*b));
    char dir[128];
    snprintf(dir, sizeof(dir), "/tmp/px_comm_bench_%d", (int)getpid());
    if (px_dir_store_init(&b->store, dir) != 0) {
        fprintf(stderr, PROG ": cannot create %s\n", dir);
        return 1;
    }
    b->seconds = seconds;
    for (size_t s = minb; s <= maxb && b->nsizes < MAX_SIZES; s *= 4)
        b->bytes[b->nsizes++] = s & ~(size_t)3;
    pid_t pids[PX_PROCS_MAX];
    int codes[PX_PROCS_MAX];
    if (px_procs_spawn(ranks, bench_rank, b, pids) != 0) return 1;
    int bad = px_procs_wait(ranks, pids, px_now_ms() + 600000, codes, -1);
    px_dir_store_remove(&b->store);
    if (bad) {
        fprintf(stderr, PROG ": %d rank(s) failed\n", bad);
        return 1;
    }
    const double bus = 2.0 * (ranks - 1) / ranks;
    printf("allreduce float sum, gloo backend, %d ranks on loopback\n", ranks);
    printf("%12s %8s %10s %12s %12s %10s\n", "bytes", "iters", "ms", "algbw GB/s",
           "busbw GB/s", "busbw/TCP");
    for (int k = 0; k < b->nsizes; k++) {
        double algbw = (double)b->bytes[k] / (b->ms[k] * 1e6);
        printf("%12zu %8d %10.3f %12.3f %12.3f %10.3f\n", b->bytes[k], b->iters[k], b->ms[k],
               algbw, algbw * bus, algbw * bus / tcp);
    }
    return 0;
}
