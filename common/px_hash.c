/* Implementation of px_hash.h. Each 8-byte word is mixed into the state with
 * a multiply and rotations (the finaliser is the splitmix64 one), so a flipped
 * bit anywhere changes the result. Streaming callers must pass whole words
 * until the last call; a trailing partial word is zero-padded. */
#include "px_hash.h"

#include <string.h>

static const uint64_t K1 = 0x9E3779B97F4A7C15ull;
static const uint64_t K2 = 0xC2B2AE3D27D4EB4Full;

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t mix_word(uint64_t h, uint64_t w) {
    w *= K2;
    w = rotl(w, 31);
    w *= K1;
    h ^= w;
    return rotl(h, 27) * 5 + 0x52dce729;
}

void px_hash_init(px_hash_t *s, uint64_t seed) {
    s->h = seed ^ K1;
    s->len = 0;
}

void px_hash_update(px_hash_t *s, const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t h = s->h;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = mix_word(h, w);
    }
    if (i < n) {
        uint64_t w = 0;
        memcpy(&w, p + i, n - i);
        h = mix_word(h, w ^ ((uint64_t)(n - i) << 56));
    }
    s->h = h;
    s->len += n;
}

uint64_t px_hash_final(const px_hash_t *s) {
    uint64_t z = s->h ^ s->len;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t px_hash64(const void *data, size_t n, uint64_t seed) {
    px_hash_t s;
    px_hash_init(&s, seed);
    px_hash_update(&s, data, n);
    return px_hash_final(&s);
}
