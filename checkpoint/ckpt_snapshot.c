/* A save's snapshot in one pass (see ckpt.h, px_ckpt_snapshot): the state
 * copied into the saver's buffers and every data file's checksum computed
 * from the bytes just copied, file by file on every core. On cores that
 * training fills this is the cheapest place for the hash: the copy is
 * memory-bound and the hash reads what the copy has just brought into the
 * cache, while a saver thread hashing the written snapshot later reads it
 * all from memory again on one core, holding up one of the training
 * threads and with it the others that wait for it. */
#include <omp.h>
#include <stdlib.h>

#include "ckpt.h"
#include "ckpt_int.h"
#include "ops.h"

/* Bytes per copy-then-hash round: well inside a core's L2. */
#define ROUND_BYTES ((size_t)64 << 10)

/* Copies bytes [lo, hi) of the state's buffers taken one after the other
 * (a whole write's order) from src into dst, hashing them into h. */
static void copy_hash_range(px_train_state_t *dst, const px_train_state_t *src, uint64_t lo, uint64_t hi,
                            XXH3_state_t *h) {
    uint64_t per = (uint64_t)src->n * sizeof(float);
    while (lo < hi) {
        int b = (int)(lo / per);
        uint64_t off = lo - (uint64_t)b * per, end = (uint64_t)(b + 1) * per < hi ? (uint64_t)(b + 1) * per : hi;
        size_t len = end - lo < ROUND_BYTES ? (size_t)(end - lo) : ROUND_BYTES;
        const float *from = src->buf[b] + off / sizeof(float);
        copy_streaming(dst->buf[b] + off / sizeof(float), from, len / sizeof(float));
        XXH3_64bits_update(h, from, len);
        lo += len;
    }
}

int px_ckpt_snapshot(px_train_state_t *dst, const px_train_state_t *src, uint64_t file_bytes, uint64_t *hashes,
                     int threads) {
    uint64_t total = px_state_bytes(src);
    int nfiles = hashes ? px_ckpt_nfiles(total, file_bytes) : -1;
    XXH3_state_t **h = nfiles > 0 ? calloc((size_t)nfiles, sizeof *h) : NULL;
    int ok = h != NULL;
    for (int f = 0; ok && f < nfiles; f++) ok = (h[f] = XXH3_createState()) != NULL;
    if (!ok) { /* nothing to hash, or out of memory: the copy alone */
        for (int f = 0; h && f < nfiles; f++) XXH3_freeState(h[f]);
        free(h);
        px_state_copy_chunks(dst, src, threads, 1);
        return hashes ? -1 : 0;
    }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int f = 0; f < nfiles; f++) {
        uint64_t lo = (uint64_t)f * file_bytes, hi = lo + file_bytes < total ? lo + file_bytes : total;
        XXH3_64bits_reset(h[f]);
        copy_hash_range(dst, src, lo, hi, h[f]);
        hashes[f] = XXH3_64bits_digest(h[f]);
    }
    for (int f = 0; f < nfiles; f++) XXH3_freeState(h[f]);
    free(h);
    return 0;
}
