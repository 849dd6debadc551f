/* The outer-step codec (parallel/outer_codec.h) as tables, no communicator:
 *
 *   - names and sizes: parse/name round trip and refusals, encoded and
 *     scratch bytes for odd n;
 *   - bf16: every float whose low 16 bits are one of the interesting cases
 *     (0, just below / at / just above one half, all ones), for all 65536
 *     top halves (so every exponent, both signs, subnormals, ±0, inf, NaN
 *     with payload only in the low bits), plus random bit patterns, against
 *     a reference that picks the nearer of the two bf16 neighbours in double
 *     arithmetic and breaks ties to the even one;
 *   - int8: per-block error <= scale / 2, the scale as documented, zero,
 *     NaN and inf blocks, subnormal and FLT_MAX blocks, short last blocks,
 *     n = 0 and 1, decode adds, nothing written past the encoded size.
 *
 * Exit status 0 pass, 1 fail. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outer_codec.h"

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                           \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fputc('\n', stderr);                                                           \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

static float float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ------------------------------------------------------- names and sizes */

static int test_names_sizes(void) {
    static const struct {
        const char *s;
        int want;
    } parse[] = {{"fp32", PX_OUTER_FP32}, {"bf16", PX_OUTER_BF16}, {"int8", PX_OUTER_INT8},
                 {"FP32", -1},           {"", -1},             {"int4", -1},
                 {"fp32 ", -1},          {"fp16", -1},         {"bf1", -1}};
    for (size_t i = 0; i < sizeof(parse) / sizeof(parse[0]); i++)
        CHECK(px_outer_dtype_parse(parse[i].s) == parse[i].want, "parse(\"%s\") = %d, want %d",
              parse[i].s, px_outer_dtype_parse(parse[i].s), parse[i].want);
    CHECK(px_outer_dtype_parse(NULL) == -1, "parse(NULL)");
    for (int d = PX_OUTER_FP32; d <= PX_OUTER_INT8; d++)
        CHECK(px_outer_dtype_parse(px_outer_dtype_name((px_outer_dtype_t)d)) == d,
              "name/parse round trip for %d", d);
    CHECK(!strcmp(px_outer_dtype_name((px_outer_dtype_t)7), "unknown"), "name of 7");

    static const struct {
        px_outer_dtype_t dt;
        size_t n, bytes;
    } sizes[] = {
        {PX_OUTER_FP32, 0, 0},      {PX_OUTER_FP32, 3, 12},       {PX_OUTER_BF16, 0, 0},
        {PX_OUTER_BF16, 3, 6},      {PX_OUTER_INT8, 0, 0},        {PX_OUTER_INT8, 1, 5},
        {PX_OUTER_INT8, 255, 259},  {PX_OUTER_INT8, 256, 260},    {PX_OUTER_INT8, 257, 265},
        {PX_OUTER_INT8, 1000, 1016}, {PX_OUTER_INT8, 1000000, 1015628},
    };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        CHECK(px_outer_encoded_bytes(sizes[i].dt, sizes[i].n) == sizes[i].bytes,
              "encoded_bytes(%s, %zu) = %zu, want %zu", px_outer_dtype_name(sizes[i].dt),
              sizes[i].n, px_outer_encoded_bytes(sizes[i].dt, sizes[i].n), sizes[i].bytes);
    CHECK(px_outer_encoded_bytes((px_outer_dtype_t)7, 10) == 0, "encoded_bytes of unknown");

    static const struct {
        px_outer_dtype_t dt;
        size_t n;
        int size;
        size_t bytes;
    } scratch[] = {
        {PX_OUTER_FP32, 1000, 3, 0},
        {PX_OUTER_INT8, 0, 3, 0},
        {PX_OUTER_INT8, 1, 2, 16},                /* 5 bytes padded to 8, twice */
        {PX_OUTER_INT8, 1000, 3, 3 * 1016},
        {PX_OUTER_BF16, 3, 3, 3 * 8},             /* 6 padded to 8 */
        {PX_OUTER_BF16, 100000000, 4, 4u << 23},  /* one piece of 4M floats, 8 MiB each */
        {PX_OUTER_INT8, 100000000, 1, (4u << 20) + 4 * 16384},
    };
    for (size_t i = 0; i < sizeof(scratch) / sizeof(scratch[0]); i++)
        CHECK(px_outer_scratch_bytes(scratch[i].dt, scratch[i].n, scratch[i].size) ==
                  scratch[i].bytes,
              "scratch_bytes(%s, %zu, %d) = %zu, want %zu", px_outer_dtype_name(scratch[i].dt),
              scratch[i].n, scratch[i].size,
              px_outer_scratch_bytes(scratch[i].dt, scratch[i].n, scratch[i].size),
              scratch[i].bytes);

    float x = 1.0f;
    unsigned char b[8];
    CHECK(px_outer_encode((px_outer_dtype_t)7, &x, 1, b) == -1, "encode accepted dtype 7");
    CHECK(px_outer_decode_add((px_outer_dtype_t)7, b, 1, &x) == -1, "decode accepted dtype 7");
    CHECK(px_outer_encode(PX_OUTER_INT8, NULL, 1, b) == -1, "encode accepted NULL src");
    CHECK(px_outer_decode_add(PX_OUTER_BF16, b, 1, NULL) == -1, "decode accepted NULL dst");
    CHECK(px_outer_encode(PX_OUTER_INT8, NULL, 0, NULL) == 0, "encode of nothing");
    CHECK(px_outer_decode_add(PX_OUTER_INT8, NULL, 0, NULL) == 0, "decode of nothing");
    printf("names and sizes: ok\n");
    return 0;
}

/* ------------------------------------------------------------------ bf16 */

/* The magnitude a bf16 pattern stands for, with the pattern past the
 * largest finite one read as 2^128: IEEE rounding with an unbounded
 * exponent, then overflow to inf. */
static double bf16_mag(uint32_t mag_bits) {
    if (mag_bits >= 0x7f800000u) return ldexp(1.0, 128);
    return (double)float_of(mag_bits);
}

/* The straightforward way: the two bf16 neighbours of |x|, the nearer one,
 * ties to the one with an even last bit. Returns the float bits. */
static uint32_t bf16_reference(float x) {
    uint32_t u = bits_of(x), sign = u & 0x80000000u, mag = u & 0x7fffffffu;
    if (mag >= 0x7f800000u) return u; /* inf as is; NaN: only NaN-ness is checked */
    uint32_t lo = mag & 0xffff0000u, hi = lo + 0x10000u;
    double v = fabs((double)x), dlo = v - bf16_mag(lo), dhi = bf16_mag(hi) - v;
    uint32_t pick;
    if (dlo < dhi)
        pick = lo;
    else if (dhi < dlo)
        pick = hi;
    else
        pick = ((lo >> 16) & 1u) ? hi : lo;
    return sign | pick;
}

static int bf16_check(const float *x, size_t n, size_t *ties) {
    uint16_t *enc = malloc(px_outer_encoded_bytes(PX_OUTER_BF16, n));
    float *dec = malloc(n * sizeof(float));
    CHECK(enc && dec, "out of memory");
    CHECK(px_outer_encode(PX_OUTER_BF16, x, n, enc) == 0, "bf16 encode");
    /* -0 is the additive identity: -0 + v is v for every v, signed zeros too. */
    for (size_t i = 0; i < n; i++) dec[i] = -0.0f;
    CHECK(px_outer_decode_add(PX_OUTER_BF16, enc, n, dec) == 0, "bf16 decode");
    for (size_t i = 0; i < n; i++) {
        if (isnan(x[i])) {
            CHECK(isnan(dec[i]), "bf16 of NaN %08x decoded to %08x (%g)", bits_of(x[i]),
                  bits_of(dec[i]), dec[i]);
            continue;
        }
        uint32_t want = bf16_reference(x[i]);
        CHECK(bits_of(dec[i]) == want, "bf16 of %08x (%.9g): got %08x, reference %08x",
              bits_of(x[i]), x[i], bits_of(dec[i]), want);
        if ((bits_of(x[i]) & 0xffffu) == 0x8000u) (*ties)++;
    }
    free(enc);
    free(dec);
    return 0;
}

static int test_bf16(void) {
    static const uint32_t lows[] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu};
    const size_t nl = sizeof(lows) / sizeof(lows[0]);
    size_t n = 65536 * nl, nr = 1u << 20, ties = 0;
    float *x = malloc((n > nr ? n : nr) * sizeof(float));
    CHECK(x, "out of memory");
    for (uint32_t hi = 0; hi < 65536; hi++)
        for (size_t l = 0; l < nl; l++) x[hi * nl + l] = float_of((hi << 16) | lows[l]);
    if (bf16_check(x, n, &ties)) return 1;

    uint64_t s = 42;
    for (size_t i = 0; i < nr; i++) x[i] = float_of((uint32_t)splitmix64(&s));
    if (bf16_check(x, nr, &ties)) return 1;

    /* Named cases, so that a failure reads plainly. */
    static const struct {
        uint32_t in, out;
    } named[] = {
        {0x3f800000u, 0x3f800000u}, /* 1.0 */
        {0x3f808000u, 0x3f800000u}, /* 1 + 2^-8: tie, kept half even -> down */
        {0x3f818000u, 0x3f820000u}, /* tie, kept half odd -> up */
        {0x3f808001u, 0x3f810000u}, /* just above the tie -> up */
        {0x00000000u, 0x00000000u}, /* +0 */
        {0x80000000u, 0x80000000u}, /* -0 */
        {0x00000001u, 0x00000000u}, /* smallest subnormal -> +0 */
        {0x00008000u, 0x00000000u}, /* subnormal tie -> even (0) */
        {0x00018000u, 0x00020000u}, /* subnormal tie -> even (up) */
        {0x7f7fffffu, 0x7f800000u}, /* FLT_MAX rounds past bf16's largest: inf */
        {0x7f800000u, 0x7f800000u}, /* inf */
        {0xff800000u, 0xff800000u}, /* -inf */
    };
    for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++) {
        float in = float_of(named[i].in), out = -0.0f;
        uint16_t h;
        px_outer_encode(PX_OUTER_BF16, &in, 1, &h);
        px_outer_decode_add(PX_OUTER_BF16, &h, 1, &out);
        CHECK(bits_of(out) == named[i].out, "bf16 of %08x: got %08x, want %08x", named[i].in,
              bits_of(out), named[i].out);
    }
    /* A NaN whose payload is only in the low bits must not become inf. */
    float nan_low = float_of(0x7f800001u), out = 0.0f;
    uint16_t h;
    px_outer_encode(PX_OUTER_BF16, &nan_low, 1, &h);
    px_outer_decode_add(PX_OUTER_BF16, &h, 1, &out);
    CHECK(isnan(out), "NaN 7f800001 decoded to %08x", bits_of(out));
    printf("bf16: ok (%zu values, %zu exact ties)\n", n + nr, ties);
    free(x);
    return 0;
}

/* ------------------------------------------------------------------ int8 */

static float block_scale(const unsigned char *enc, size_t block) {
    float s;
    memcpy(&s, enc + block * (PX_OUTER_INT8_BLOCK + sizeof(float)), sizeof(s));
    return s;
}

/* Encodes x[n], decodes onto `base` (dst starts as base), and checks every
 * block: its scale, each value within scale / 2 (plus the float rounding of
 * the division and the product: a relative 2^-14 and one subnormal step),
 * NaN everywhere in a block with a NaN or inf, nothing written past the
 * encoding. */
static int int8_check(const float *x, size_t n, float base, const char *what) {
    size_t eb = px_outer_encoded_bytes(PX_OUTER_INT8, n);
    unsigned char *enc = malloc(eb + 16);
    float *dec = malloc((n ? n : 1) * sizeof(float));
    CHECK(enc && dec, "out of memory");
    memset(enc, 0xab, eb + 16);
    CHECK(px_outer_encode(PX_OUTER_INT8, x, n, enc) == 0, "%s: encode", what);
    for (size_t i = 0; i < 16; i++)
        CHECK(enc[eb + i] == 0xab, "%s: encode wrote past %zu bytes", what, eb);
    for (size_t i = 0; i < n; i++) dec[i] = base;
    CHECK(px_outer_decode_add(PX_OUTER_INT8, enc, n, dec) == 0, "%s: decode", what);

    for (size_t b = 0; b * PX_OUTER_INT8_BLOCK < n; b++) {
        size_t i0 = b * PX_OUTER_INT8_BLOCK, m = n - i0;
        if (m > PX_OUTER_INT8_BLOCK) m = PX_OUTER_INT8_BLOCK;
        double absmax = 0;
        int nonfinite = 0;
        for (size_t i = i0; i < i0 + m; i++) {
            if (!isfinite(x[i])) nonfinite = 1;
            else if (fabs((double)x[i]) > absmax) absmax = fabs((double)x[i]);
        }
        float scale = block_scale(enc, b);
        const signed char *q =
            (const signed char *)enc + b * (PX_OUTER_INT8_BLOCK + sizeof(float)) + sizeof(float);
        if (nonfinite) {
            CHECK(isnan(scale), "%s: block %zu has a NaN/inf, scale %g", what, b, scale);
            for (size_t i = i0; i < i0 + m; i++)
                CHECK(isnan(dec[i]), "%s: element %zu of a NaN/inf block decoded to %g", what,
                      i, dec[i]);
            continue;
        }
        if (absmax == 0) {
            CHECK(bits_of(scale) == 0, "%s: zero block %zu has scale %g", what, b, scale);
            for (size_t i = i0; i < i0 + m; i++)
                CHECK(dec[i] == base, "%s: zero block element %zu decoded to %g", what, i,
                      dec[i] - base);
            continue;
        }
        /* absmax / scale <= 127 as the float division sees it. */
        CHECK(scale >= absmax / 127 * (1 - 0x1p-23) || absmax > FLT_MAX / 2,
              "%s: block %zu scale %g below absmax/127 = %g", what, b, scale, absmax / 127);
        CHECK(scale <= absmax / 127 * (1 + 1e-6) + 2 * (double)FLT_TRUE_MIN,
              "%s: block %zu scale %g well above absmax/127 = %g", what, b, scale, absmax / 127);
        double bound = (double)scale / 2 * (1 + 1.0 / 16384) + (double)FLT_TRUE_MIN;
        for (size_t i = i0; i < i0 + m; i++) {
            int qi = q[i - i0];
            CHECK(qi >= -127 && qi <= 127, "%s: element %zu value %d", what, i, qi);
            double got = (double)dec[i] - (double)base; /* exact for base 0 */
            double e = fabs(got - (double)x[i]);
            CHECK(isfinite(dec[i]) && e <= bound,
                  "%s: element %zu = %.9g decoded to %.9g: error %g > scale/2 = %g", what, i,
                  x[i], got, e, (double)scale / 2);
        }
    }
    free(enc);
    free(dec);
    return 0;
}

static int test_int8(void) {
    uint64_t s = 7;
    size_t cap = 4096;
    float *x = malloc(cap * sizeof(float));
    CHECK(x, "out of memory");
    char what[64];

    /* Random values, magnitude changing from block to block; odd lengths. */
    static const size_t lens[] = {0, 1, 2, 255, 256, 257, 1000, 4096};
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
        size_t n = lens[l];
        for (size_t i = 0; i < n; i++) {
            double u = (double)(splitmix64(&s) >> 11) / 9007199254740992.0 * 2 - 1;
            x[i] = (float)ldexp(u, (int)((i / PX_OUTER_INT8_BLOCK) % 40) - 20);
        }
        snprintf(what, sizeof(what), "random n=%zu", n);
        if (int8_check(x, n, 0.0f, what)) return 1;
    }

    /* Values at exactly k * scale and (k + 1/2) * scale: on the grid and ties. */
    for (size_t i = 0; i < 256; i++) x[i] = (float)((int)i - 127) * 0.5f;
    if (int8_check(x, 256, 0.0f, "grid with ties")) return 1;

    /* Zero block between two others, and a short zero last block. */
    for (size_t i = 0; i < 800; i++) x[i] = (i >= 256 && i < 512) || i >= 768 ? 0.0f : 1.5f;
    x[3] = -0.0f;
    if (int8_check(x, 800, 0.0f, "zero blocks")) return 1;

    /* NaN, +inf, -inf each poison their own block only. */
    for (size_t i = 0; i < 1100; i++) x[i] = (float)i * 0.01f - 3.0f;
    x[300] = NAN;
    x[600] = INFINITY;
    x[1090] = -INFINITY; /* in the short last block */
    if (int8_check(x, 1100, 0.0f, "nonfinite blocks")) return 1;

    /* Subnormals: absmax / 127 underflows or rounds low; values stay exact. */
    for (size_t i = 0; i < 256; i++) x[i] = float_of((uint32_t)(i % 191)) * (i % 2 ? -1 : 1);
    if (int8_check(x, 256, 0.0f, "subnormals")) return 1;
    x[0] = FLT_TRUE_MIN;
    if (int8_check(x, 1, 0.0f, "smallest subnormal")) return 1;
    for (size_t i = 0; i < 256; i++) x[i] = (float)(i % 3) * FLT_MIN;
    if (int8_check(x, 256, 0.0f, "FLT_MIN")) return 1;

    /* The top of the range: 127 * scale must not overflow to inf. */
    for (size_t i = 0; i < 256; i++) x[i] = (i % 2 ? -FLT_MAX : FLT_MAX) * ((float)i / 255.0f);
    x[255] = FLT_MAX;
    if (int8_check(x, 256, 0.0f, "FLT_MAX")) return 1;

    /* decode adds to what is there. */
    for (size_t i = 0; i < 300; i++) x[i] = (float)i;
    unsigned char enc[320];
    float dst[300];
    px_outer_encode(PX_OUTER_INT8, x, 300, enc);
    for (size_t i = 0; i < 300; i++) dst[i] = 1000.0f;
    px_outer_decode_add(PX_OUTER_INT8, enc, 300, dst);
    px_outer_decode_add(PX_OUTER_INT8, enc, 300, dst);
    for (size_t i = 0; i < 300; i++)
        CHECK(fabsf(dst[i] - 1000.0f - 2.0f * x[i]) <= 2.0f * (299.0f / 127 / 2) + 1e-3f,
              "decode twice onto 1000: element %zu = %g", i, dst[i]);
    /* Values on the grid (integers 0..127 with absmax 127: scale 1) are exact. */
    for (size_t i = 0; i < 128; i++) x[i] = (float)i;
    px_outer_encode(PX_OUTER_INT8, x, 128, enc);
    CHECK(block_scale(enc, 0) == 1.0f, "scale of 0..127 is %g", block_scale(enc, 0));
    for (size_t i = 0; i < 128; i++) dst[i] = 0.0f;
    px_outer_decode_add(PX_OUTER_INT8, enc, 128, dst);
    for (size_t i = 0; i < 128; i++) CHECK(dst[i] == x[i], "grid value %zu -> %g", i, dst[i]);
    printf("int8: ok\n");
    free(x);
    return 0;
}

/* fp32 "encoding" is the bits; decode adds them. */
static int test_fp32(void) {
    float x[5] = {1.5f, -0.0f, INFINITY, FLT_TRUE_MIN, -3e38f}, dst[5];
    unsigned char enc[20];
    px_outer_encode(PX_OUTER_FP32, x, 5, enc);
    for (int i = 0; i < 5; i++) dst[i] = -0.0f;
    px_outer_decode_add(PX_OUTER_FP32, enc, 5, dst);
    for (int i = 0; i < 5; i++)
        CHECK(bits_of(dst[i]) == bits_of(x[i]), "fp32 element %d: %08x -> %08x", i,
              bits_of(x[i]), bits_of(dst[i]));
    printf("fp32: ok\n");
    return 0;
}

int main(void) {
    if (test_names_sizes() || test_bf16() || test_int8() || test_fp32()) return 1;
    printf("outer codec: ok\n");
    return 0;
}
