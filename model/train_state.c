/* The training state's description, copies and digest (see train_state.h). */
#include "train_state.h"

#include <omp.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "px_hash.h"

const char *const px_state_buf_names[PX_STATE_MAXBUF] = {"params", "m", "v", "outer_m"};

px_train_state_t px_state_of_model(px_gpt_t *model, int64_t step, uint64_t seed) {
    px_train_state_t s = {{model->params, model->m, model->v}, model->num_params, step, seed, 0, PX_STATE_NBUF, 0};
    return s;
}

/* An owned state is one page-aligned block, its buffers in order, each
 * starting on a page: a checkpoint's data files each hold a page-aligned
 * part of one buffer, so a byte's address and its offset in its file are
 * equal modulo the page size, and the writer sends whole blocks to the
 * disk straight from it (O_DIRECT) instead of copying them through a
 * bounce buffer. The block is asked for in transparent huge pages
 * (MADV_HUGEPAGE, 2 MiB aligned): a direct write pins every page it sends,
 * and on 4 KiB pages that pinning cost the training threads beside it more
 * than the write itself. Measured on a 2-vCPU AMD EPYC VM with bench/
 * checkpoint.py (gpt2-124m saving every 10 steps, 4 pairs, twice each):
 * step-time overhead -0.6% and +0.3% in huge pages against +5.2% and +6.8%
 * without, the write 0.44-0.48 s against 0.69-0.73 s and 25-32 ms of CPU
 * against 41-54 ms, and the first touch of the snapshot (a process's first
 * save) 1.7 s against 2.2 s. Where huge pages are off or none is free, the
 * kernel gives small ones: nothing changes but the speed. */
#define OWNED_ALIGN ((size_t)4096)
#define HUGE_ALIGN ((size_t)2 << 20)

int px_state_alloc_like(px_train_state_t *dst, const px_train_state_t *like) {
    memset(dst, 0, sizeof *dst);
    dst->n = like->n;
    dst->step = like->step;
    dst->seed = like->seed;
    dst->nbuf = like->nbuf;
    dst->local = like->local;
    size_t stride = (like->n * sizeof(float) + OWNED_ALIGN - 1) / OWNED_ALIGN * OWNED_ALIGN; /* bytes a buffer */
    size_t bytes = (size_t)like->nbuf * stride;
    size_t whole = bytes ? (bytes + HUGE_ALIGN - 1) / HUGE_ALIGN * HUGE_ALIGN : HUGE_ALIGN;
    char *block = aligned_alloc(HUGE_ALIGN, whole);
    if (!block) return -1;
    madvise(block, whole, MADV_HUGEPAGE); /* advice only: refused (no THP in the kernel), small pages serve */
    for (int b = 0; b < like->nbuf; b++) dst->buf[b] = (float *)(block + (size_t)b * stride);
    dst->owned = 1;
    return 0;
}

void px_state_free(px_train_state_t *s) {
    if (!s->owned) return;
    free(s->buf[0]);
    memset(s->buf, 0, sizeof s->buf);
    s->owned = 0;
}

void px_state_copy(px_train_state_t *dst, const px_train_state_t *src) {
    for (int b = 0; b < src->nbuf; b++) memcpy(dst->buf[b], src->buf[b], src->n * sizeof(float));
    dst->step = src->step;
    dst->local = src->local;
}

size_t px_state_chunks(size_t n) { return (n + PX_STATE_CHUNK_FLOATS - 1) / PX_STATE_CHUNK_FLOATS; }

size_t px_state_digest_len(const px_train_state_t *s) { return (size_t)s->nbuf * px_state_chunks(s->n); }

size_t px_state_bytes(const px_train_state_t *s) { return (size_t)s->nbuf * s->n * sizeof(float); }

void px_state_chunk(size_t n, size_t k, int *buffer, size_t *off, size_t *len) {
    size_t nc = px_state_chunks(n);
    *buffer = (int)(k / nc);
    *off = (k % nc) * PX_STATE_CHUNK_FLOATS;
    *len = n - *off < PX_STATE_CHUNK_FLOATS ? n - *off : PX_STATE_CHUNK_FLOATS;
}

void px_state_copy_chunks(px_train_state_t *dst, const px_train_state_t *src, int threads, int streaming) {
    size_t len = px_state_digest_len(src);
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t k = 0; k < len; k++) {
        int b;
        size_t off, n;
        px_state_chunk(src->n, k, &b, &off, &n);
        if (streaming)
            copy_streaming(dst->buf[b] + off, src->buf[b] + off, n);
        else
            memcpy(dst->buf[b] + off, src->buf[b] + off, n * sizeof(float));
    }
}

void px_state_digest(const px_train_state_t *s, uint64_t *digest) {
    size_t len = px_state_digest_len(s);
    /* Chunks hash independently: use every core (hashing happens while a
     * quorum forms or a heal runs, when the training threads are idle),
     * whatever --threads says. */
    int threads = omp_get_num_procs();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t k = 0; k < len; k++) {
        int b;
        size_t off, n;
        px_state_chunk(s->n, k, &b, &off, &n);
        digest[k] = px_hash64(s->buf[b] + off, n * sizeof(float), off);
    }
}

uint64_t px_state_hash(const uint64_t *values, size_t len, int64_t step) {
    px_hash_t h;
    px_hash_init(&h, 0x5048414c414e58ull);
    px_hash_update(&h, values, len * sizeof *values);
    px_hash_update(&h, &step, sizeof step);
    return px_hash_final(&h);
}

uint64_t px_state_checksum(const px_train_state_t *s, const uint64_t *digest) {
    if (!s->local) return px_state_hash(digest, px_state_digest_len(s), s->step);
    px_hash_t h; /* the shared buffers' entries only, in order */
    size_t nc = px_state_chunks(s->n);
    px_hash_init(&h, 0x5048414c414e58ull);
    for (int b = 0; b < s->nbuf; b++)
        if (!(s->local & (1u << b))) px_hash_update(&h, digest + (size_t)b * nc, nc * sizeof *digest);
    px_hash_update(&h, &s->step, sizeof s->step);
    return px_hash_final(&h);
}
