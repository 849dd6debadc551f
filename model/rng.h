/* Seeded randomness for initialisation and data sampling. Everything random
 * in training is a pure function of (seed, what, index): a stream is created
 * from a few integers rather than advanced through a run, so any rank can
 * compute any part (a chunk of a tensor, sample i of step s) without having
 * produced what came before. splitmix64 mixes well and is tiny. */
#ifndef PX_RNG_H
#define PX_RNG_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

static inline uint64_t px_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Hash of a seed and up to three integers: independent streams per tuple. */
static inline uint64_t px_hash4(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
    uint64_t h = px_mix64(seed + 0x9e3779b97f4a7c15ULL);
    h = px_mix64(h ^ (a + 0x9e3779b97f4a7c15ULL));
    h = px_mix64(h ^ (b + 0x6a09e667f3bcc909ULL));
    h = px_mix64(h ^ (c + 0xbb67ae8584caa73bULL));
    return h;
}

typedef struct {
    uint64_t s;
} px_rng_t;

static inline uint64_t px_rng_next(px_rng_t *r) {
    r->s += 0x9e3779b97f4a7c15ULL;
    return px_mix64(r->s);
}

/* Uniform double in (0, 1]. */
static inline double px_rng_uniform(px_rng_t *r) {
    return ((double)(px_rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

/* Fills x[0..n) with N(0, std^2) via Box-Muller, in double then rounded. */
static inline void px_rng_normal(px_rng_t *r, float *x, size_t n, double std) {
    const double two_pi = 6.283185307179586;
    for (size_t i = 0; i < n; i += 2) {
        double u1 = px_rng_uniform(r), u2 = px_rng_uniform(r);
        double rad = sqrt(-2.0 * log(u1));
        x[i] = (float)(std * rad * cos(two_pi * u2));
        if (i + 1 < n) x[i + 1] = (float)(std * rad * sin(two_pi * u2));
    }
}

#endif
