/* 64-bit checksums for training state, checkpoint chunks and healing transfers.
 * Not cryptographic: it detects corruption and divergence, it does not resist
 * an adversary. Word-at-a-time multiply-xor mixing runs at several GB/s, so
 * checksumming the whole parameter blob each quorum change is cheap. */
#ifndef PX_HASH_H
#define PX_HASH_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t h;
    uint64_t len;
} px_hash_t;

void px_hash_init(px_hash_t *s, uint64_t seed);
void px_hash_update(px_hash_t *s, const void *data, size_t n); /* n should be a multiple of 8 except last call */
uint64_t px_hash_final(const px_hash_t *s);
uint64_t px_hash64(const void *data, size_t n, uint64_t seed);

#endif
