/* A save's snapshot with its data files' checksums (see ckpt.h,
 * px_ckpt_snapshot and px_ckpt_pass_*): the state copied into the saver's
 * buffers and every file hashed from the bytes just copied, file by file
 * on every core. On cores that training fills this is the cheapest place
 * for the hash: the copy is memory-bound and the hash reads what the copy
 * has just brought into the cache, while a saver thread hashing the
 * written snapshot later reads it all from memory again on one core,
 * holding up one of the training threads and with it the others that wait
 * for it. A pass goes one step further: the optimizer step has every
 * value in the cache as it finishes it, so the snapshot costs the copy's
 * writes and no second read of the state. */
#include <omp.h>
#include <stdlib.h>

#include "ckpt.h"
#include "ckpt_int.h"
#include "ops.h"

/* Floats per copy-then-hash round: 64 KiB, well inside a core's L2. */
#define ROUND_FLOATS ((size_t)16 << 10)

/* Floats [lo, hi) of buffer b of src into dst, hashed into h. */
static void copy_hash(px_train_state_t *dst, const px_train_state_t *src, int b, size_t lo, size_t hi,
                      XXH3_state_t *h) {
    for (size_t i = lo; i < hi; i += ROUND_FLOATS) {
        size_t len = hi - i < ROUND_FLOATS ? hi - i : ROUND_FLOATS;
        copy_streaming(dst->buf[b] + i, src->buf[b] + i, len);
        XXH3_64bits_update(h, src->buf[b] + i, len * sizeof(float));
    }
}

struct px_ckpt_pass {
    px_train_state_t *dst;
    const px_train_state_t *src;
    size_t part;                     /* floats per part */
    int nparts;
    XXH3_state_t **h;                /* file b * nparts + k */
    size_t *done;                    /* floats of part k passed so far */
};

/* Floats in part k (the last one may be shorter). */
static size_t part_len(const px_ckpt_pass_t *p, int k) {
    size_t lo = (size_t)k * p->part;
    return p->src->n - lo < p->part ? p->src->n - lo : p->part;
}

px_ckpt_pass_t *px_ckpt_pass_begin(px_train_state_t *dst, const px_train_state_t *src, size_t part_floats) {
    int nparts = px_ckpt_nparts(src->n, part_floats);
    if (nparts < 0) return NULL;
    px_ckpt_pass_t *p = calloc(1, sizeof *p);
    int nfiles = src->nbuf * nparts, ok = p != NULL;
    if (ok) {
        *p = (px_ckpt_pass_t){dst, src, part_floats, nparts, calloc((size_t)nfiles, sizeof *p->h),
                              calloc((size_t)nparts, sizeof *p->done)};
        ok = p->h && p->done;
    }
    for (int f = 0; ok && f < nfiles; f++) {
        ok = (p->h[f] = XXH3_createState()) != NULL;
        if (ok) XXH3_64bits_reset(p->h[f]);
    }
    if (!ok) px_ckpt_pass_end(p, NULL);
    return ok ? p : NULL;
}

void px_ckpt_pass_block(px_ckpt_pass_t *p, int k, size_t lo, size_t hi) {
    size_t base = (size_t)k * p->part;
    if (k < 0 || k >= p->nparts || lo != base + p->done[k] || hi < lo || hi > base + part_len(p, k))
        return; /* out of order: the part stays incomplete, and the pass fails */
    for (int b = 0; b < p->src->nbuf; b++) copy_hash(p->dst, p->src, b, lo, hi, p->h[b * p->nparts + k]);
    p->done[k] += hi - lo;
}

int px_ckpt_pass_end(px_ckpt_pass_t *p, uint64_t *hashes) {
    if (!p) return -1;
    int rc = 0, nfiles = p->src->nbuf * p->nparts;
    for (int k = 0; k < p->nparts && p->done; k++)
        if (p->done[k] != part_len(p, k)) rc = -1;
    for (int f = 0; p->h && f < nfiles; f++) {
        if (p->h[f] && hashes && rc == 0) hashes[f] = XXH3_64bits_digest(p->h[f]);
        if (p->h[f]) XXH3_freeState(p->h[f]);
    }
    if (!p->h || !p->done) rc = -1;
    free(p->h);
    free(p->done);
    free(p);
    return rc;
}

int px_ckpt_snapshot(px_train_state_t *dst, const px_train_state_t *src, size_t part_floats, uint64_t *hashes,
                     int threads) {
    px_ckpt_pass_t *p = hashes ? px_ckpt_pass_begin(dst, src, part_floats) : NULL;
    if (!p) { /* nothing to hash, or out of memory: the copy alone */
        px_state_copy_chunks(dst, src, threads, 1);
        return hashes ? -1 : 0;
    }
    int nfiles = src->nbuf * p->nparts;
    /* file by file: each is one part of one buffer */
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int f = 0; f < nfiles; f++) {
        int b = f / p->nparts, k = f % p->nparts;
        copy_hash(dst, src, b, (size_t)k * p->part, (size_t)k * p->part + part_len(p, k), p->h[f]);
    }
    for (int k = 0; k < p->nparts; k++) p->done[k] = part_len(p, k); /* every part passed */
    return px_ckpt_pass_end(p, hashes);
}
