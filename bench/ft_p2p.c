/* ft_p2p: Gloo point-to-point streaming rate, the middle yardstick of the
 * healing benchmark (bench/ft_heal.py). Between a raw TCP stream (ft_tcpbw)
 * and a heal (worker/heal.c) sit two costs; this program measures them
 * one at a time, with the heal's own pattern and nothing else:
 *
 *   ft_p2p [--bytes N] [--chunk N] [--checksum]
 *
 * Two forked rank processes meet through a directory store and create a
 * Gloo communicator (px_comm). Rank 0 sends N bytes to rank 1 in chunks of
 * --chunk bytes (default 4 MiB; healing sends PX_STATE_CHUNK_FLOATS floats,
 * 16 MiB, see model/train_state.h), one px_comm_send per chunk with a new
 * tag, as healing (worker/heal.c) does.
 * With --checksum each chunk is also hashed by the sender (px_hash64, then
 * an 8-byte message with the hash) and verified by the receiver after it
 * arrives: the hashing a heal does per chunk (a heal sends all the hashes
 * in one message after the last chunk). The rate is N bytes over the
 * receiver's time from the first receive to the last verified chunk.
 * One line on stdout:
 *   p2p bytes=N chunk=N checksum=0|1 seconds=S MBps=X   (MB = 1e6 bytes) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "px_comm.h"
#include "px_dir_store.h"
#include "px_flags.h"
#include "px_hash.h"
#include "px_procs.h"
#include "px_time.h"

#define PROG "ft_p2p"

typedef struct {
    px_dir_store_t store;
    size_t bytes, chunk;
    int checksum;
    double seconds; /* written by the receiver */
} p2p_t;

static int stream_rank(int rank, int size, void *argp) {
    p2p_t *p = argp;
    px_store_t st = px_dir_store(&p->store);
    char err[512];
    px_comm_t *c = px_comm_new_gloo(&st, "p2p", rank, size, 60000, err, sizeof err);
    if (!c) {
        fprintf(stderr, PROG ": rank %d: %s\n", rank, err);
        return 1;
    }
    char *buf = malloc(p->bytes);
    if (!buf) return 1;
    memset(buf, rank == 0 ? 0x3c : 0, p->bytes); /* touch every page before timing */
    px_comm_status_t s = px_comm_barrier(c);
    int64_t t0 = px_now_us();
    int tag = 1;
    for (size_t off = 0; off < p->bytes && s == PX_COMM_OK; off += p->chunk) {
        size_t len = p->bytes - off < p->chunk ? p->bytes - off : p->chunk;
        uint64_t h = 0;
        if (rank == 0) {
            if (p->checksum) h = px_hash64(buf + off, len, off);
            s = px_comm_send(c, buf + off, len, 1, tag++);
            if (p->checksum && s == PX_COMM_OK) s = px_comm_send(c, &h, sizeof h, 1, tag++);
        } else {
            s = px_comm_recv(c, buf + off, len, 0, tag++);
            if (p->checksum && s == PX_COMM_OK) s = px_comm_recv(c, &h, sizeof h, 0, tag++);
            if (p->checksum && s == PX_COMM_OK && h != px_hash64(buf + off, len, off)) {
                fprintf(stderr, PROG ": chunk at byte %zu failed its checksum\n", off);
                return 1;
            }
        }
    }
    if (rank == 1) p->seconds = (double)(px_now_us() - t0) / 1e6;
    if (s != PX_COMM_OK) {
        fprintf(stderr, PROG ": rank %d: %s\n", rank, px_comm_last_error(c));
        return 1;
    }
    px_comm_barrier(c);
    px_comm_destroy(&c);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    size_t bytes = (size_t)1 << 30, chunk = (size_t)4 << 20;
    int checksum = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: " PROG " [--bytes N] [--chunk N] [--checksum]\n"
                   "  --bytes N    bytes to stream from rank 0 to rank 1, 1 MiB..16 GiB [1073741824]\n"
                   "  --chunk N    bytes per send, 4 KiB..256 MiB [4194304]\n"
                   "  --checksum   hash every chunk and send and verify the hash, as a heal does\n");
            return 0;
        }
        if (!strcmp(a, "--checksum")) {
            checksum = 1;
            continue;
        }
        if (!strcmp(a, "--bytes")) bytes = (size_t)px_flag_int(PROG, a, v, 1 << 20, 1LL << 34);
        else if (!strcmp(a, "--chunk")) chunk = (size_t)px_flag_int(PROG, a, v, 4096, 1 << 28);
        else px_flag_unknown(PROG, a);
        i++;
    }
    p2p_t *p = px_procs_shared(sizeof *p);
    char dir[128];
    snprintf(dir, sizeof dir, "/tmp/px_ft_p2p_%d", (int)getpid());
    if (!p || px_dir_store_init(&p->store, dir) != 0) {
        fprintf(stderr, PROG ": cannot create %s\n", dir);
        return 1;
    }
    p->bytes = bytes;
    p->chunk = chunk;
    p->checksum = checksum;
    pid_t pids[2];
    int codes[2];
    if (px_procs_spawn(2, stream_rank, p, pids) != 0) return 1;
    int bad = px_procs_wait(2, pids, px_now_ms() + 600000, codes, -1);
    px_dir_store_remove(&p->store);
    if (bad || p->seconds <= 0) {
        fprintf(stderr, PROG ": a rank failed\n");
        return 1;
    }
    printf("p2p bytes=%zu chunk=%zu checksum=%d seconds=%.3f MBps=%.1f\n", bytes, chunk, checksum, p->seconds,
           (double)bytes / (p->seconds * 1e6));
    return 0;
}
