/* The outer-step codec (outer_codec.h): bf16 and block-scaled int8 encodings
 * of a float vector, and the all-gather-then-decode average that gives every
 * rank the same bits.
 *
 * Why decode everything everywhere instead of summing in transit: a ring
 * all-reduce over encoded values would re-encode partial sums at every hop,
 * and which partial sums a rank sees depends on its position in the ring, so
 * ranks would end with different roundings. Here every rank holds the same R
 * encodings and runs the same loop over them in the same order; with IEEE
 * arithmetic (no fast-math, no FMA contraction in ISO C mode) that is the
 * same result bit for bit. The price is all-gather volume, (R-1) encodings
 * sent per rank: see docs/comm.md for when that beats an fp32 all-reduce. */
#include "outer_codec.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int px_outer_dtype_parse(const char *s) {
    if (!s) return -1;
    if (!strcmp(s, "fp32")) return PX_OUTER_FP32;
    if (!strcmp(s, "bf16")) return PX_OUTER_BF16;
    if (!strcmp(s, "int8")) return PX_OUTER_INT8;
    return -1;
}

const char *px_outer_dtype_name(px_outer_dtype_t dt) {
    switch (dt) {
    case PX_OUTER_FP32: return "fp32";
    case PX_OUTER_BF16: return "bf16";
    case PX_OUTER_INT8: return "int8";
    }
    return "unknown";
}

static int dtype_ok(px_outer_dtype_t dt) {
    return dt == PX_OUTER_FP32 || dt == PX_OUTER_BF16 || dt == PX_OUTER_INT8;
}

/* ------------------------------------------------------------ pure codec */

size_t px_outer_encoded_bytes(px_outer_dtype_t dt, size_t n) {
    switch (dt) {
    case PX_OUTER_FP32: return n * sizeof(float);
    case PX_OUTER_BF16: return n * sizeof(uint16_t);
    case PX_OUTER_INT8:
        return n + sizeof(float) * ((n + PX_OUTER_INT8_BLOCK - 1) / PX_OUTER_INT8_BLOCK);
    }
    return 0;
}

/* Round to nearest even on the 16 bits that go: adding 0x7fff plus the
 * lowest kept bit carries into the kept half exactly when the dropped half
 * is above one half, or equal to it with an odd kept half. NaN is handled
 * apart, because truncating a NaN whose payload sits in the low bits would
 * give inf; setting the top mantissa bit keeps it a (quiet) NaN. */
static uint16_t bf16_from_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float f32_from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

/* One int8 block: out = scale (fp32) then m values. */
static void int8_encode_block(const float *x, size_t m, unsigned char *out) {
    float absmax = 0.0f;
    int nonfinite = 0;
    for (size_t i = 0; i < m; i++) {
        float a = fabsf(x[i]);
        nonfinite |= !(a <= FLT_MAX); /* inf, or NaN (which compares false) */
        absmax = a > absmax ? a : absmax;
    }
    signed char *q = (signed char *)(out + sizeof(float));
    float scale;
    if (nonfinite || absmax == 0.0f) {
        /* scale NaN: every value decodes to 0 * NaN = NaN. */
        scale = nonfinite ? NAN : 0.0f;
        memset(q, 0, m);
    } else {
        scale = absmax / 127.0f;
        /* Rounding (or underflow, for subnormal blocks) can leave the scale
         * a little small, so that absmax would land past 127. */
        while (scale == 0.0f || absmax / scale > 127.0f) scale = nextafterf(scale, INFINITY);
        /* ... or, next to FLT_MAX, so large that 127 * scale overflows: the
         * clamp below then costs at most an ulp of absmax. */
        while (isinf(127.0f * scale)) scale = nextafterf(scale, 0.0f);
        /* Adding and subtracting 1.5 * 2^23 rounds |v| < 2^22 to the
         * nearest integer, ties to even (the default rounding mode): rintf
         * without a library call per element, which halved encode time. */
        const float round_magic = 12582912.0f;
        for (size_t i = 0; i < m; i++) {
            float v = x[i] / scale;
            v = v > 127.0f ? 127.0f : v;
            v = v < -127.0f ? -127.0f : v;
            v = (v + round_magic) - round_magic;
            q[i] = (signed char)v;
        }
    }
    memcpy(out, &scale, sizeof(scale));
}

static void int8_decode_add_block(const unsigned char *in, size_t m, float *dst) {
    float scale;
    memcpy(&scale, in, sizeof(scale));
    const signed char *q = (const signed char *)(in + sizeof(float));
    for (size_t i = 0; i < m; i++) {
        float v = (float)q[i] * scale;
        dst[i] += v;
    }
}

int px_outer_encode(px_outer_dtype_t dt, const float *src, size_t n, void *out) {
    if (!dtype_ok(dt) || (n > 0 && (!src || !out))) return -1;
    unsigned char *o = out;
    switch (dt) {
    case PX_OUTER_FP32: memcpy(o, src, n * sizeof(float)); break;
    case PX_OUTER_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = bf16_from_f32(src[i]);
            memcpy(o + i * sizeof(h), &h, sizeof(h));
        }
        break;
    case PX_OUTER_INT8:
        for (size_t b = 0; b < n; b += PX_OUTER_INT8_BLOCK) {
            size_t m = n - b < PX_OUTER_INT8_BLOCK ? n - b : PX_OUTER_INT8_BLOCK;
            int8_encode_block(src + b, m, o);
            o += sizeof(float) + m;
        }
        break;
    }
    return 0;
}

int px_outer_decode_add(px_outer_dtype_t dt, const void *in, size_t n, float *dst) {
    if (!dtype_ok(dt) || (n > 0 && (!in || !dst))) return -1;
    const unsigned char *p = in;
    switch (dt) {
    case PX_OUTER_FP32:
        for (size_t i = 0; i < n; i++) {
            float v;
            memcpy(&v, p + i * sizeof(v), sizeof(v));
            dst[i] += v;
        }
        break;
    case PX_OUTER_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + i * sizeof(h), sizeof(h));
            dst[i] += f32_from_bf16(h);
        }
        break;
    case PX_OUTER_INT8:
        for (size_t b = 0; b < n; b += PX_OUTER_INT8_BLOCK) {
            size_t m = n - b < PX_OUTER_INT8_BLOCK ? n - b : PX_OUTER_INT8_BLOCK;
            int8_decode_add_block(p, m, dst + b);
            p += sizeof(float) + m;
        }
        break;
    }
    return 0;
}

/* ------------------------------------------------------------ collective */

static size_t pad4(size_t bytes) { return (bytes + 3) & ~(size_t)3; }

size_t px_outer_scratch_bytes(px_outer_dtype_t dt, size_t n, int size) {
    if (dt == PX_OUTER_FP32 || !dtype_ok(dt) || n == 0 || size < 1) return 0;
    size_t piece = n < PX_OUTER_PIECE_FLOATS ? n : PX_OUTER_PIECE_FLOATS;
    return (size_t)size * pad4(px_outer_encoded_bytes(dt, piece));
}

static px_comm_status_t fail(char *err, size_t errlen, px_comm_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static px_comm_status_t fail(char *err, size_t errlen, px_comm_status_t st, const char *fmt, ...) {
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return st;
}

static void divide(float *buf, size_t n, int size) {
    const float r = (float)size;
    for (size_t i = 0; i < n; i++) buf[i] /= r;
}

static px_comm_status_t mean_fp32(px_comm_t *c, float *buf, size_t n, uint64_t *wire,
                                  char *err, size_t errlen) {
    const int R = px_comm_size(c);
    px_comm_status_t st = px_comm_allreduce_sum_f32(c, buf, n);
    if (st != PX_COMM_OK)
        return fail(err, errlen, st, "outer allreduce (fp32, %zu floats): %s", n,
                    px_comm_last_error(c));
    divide(buf, n, R);
    *wire = 2u * (uint64_t)(R - 1) * (uint64_t)n * sizeof(float) / (uint64_t)R;
    return PX_COMM_OK;
}

/* One piece: encode ours into our slot of `gathered`, all-gather, then the
 * same decode loop on every rank. */
static px_comm_status_t mean_piece(px_comm_t *c, float *x, size_t m, px_outer_dtype_t dt,
                                   unsigned char *gathered, size_t *slot_bytes) {
    const int R = px_comm_size(c), rank = px_comm_rank(c);
    const size_t eb = px_outer_encoded_bytes(dt, m), slot = pad4(eb);
    unsigned char *mine = gathered + (size_t)rank * slot;
    px_outer_encode(dt, x, m, mine);
    memset(mine + eb, 0, slot - eb); /* padding goes on the wire: no stale bytes */
    px_comm_status_t st = px_comm_allgather_f32(c, (const float *)(void *)mine,
                                                (float *)(void *)gathered, slot / sizeof(float));
    if (st != PX_COMM_OK) return st;
    /* -0 is the additive identity (-0 + v == v for every v, -0 too), so a
     * single rank gets exactly decode(encode(x)). */
    for (size_t i = 0; i < m; i++) x[i] = -0.0f;
    for (int r = 0; r < R; r++) px_outer_decode_add(dt, gathered + (size_t)r * slot, m, x);
    divide(x, m, R);
    *slot_bytes = slot;
    return PX_COMM_OK;
}

px_comm_status_t px_outer_allreduce_mean(px_comm_t *c, float *buf, size_t n, px_outer_dtype_t dt,
                                         void *scratch, size_t scratch_bytes,
                                         uint64_t *wire_bytes, char *err, size_t errlen) {
    uint64_t wire_local = 0, *wire = wire_bytes ? wire_bytes : &wire_local;
    *wire = 0;
    if (!c) return fail(err, errlen, PX_COMM_ERROR, "outer allreduce: NULL communicator");
    if (!dtype_ok(dt))
        return fail(err, errlen, PX_COMM_ERROR, "outer allreduce: unknown dtype %d", (int)dt);
    if (n > 0 && !buf) return fail(err, errlen, PX_COMM_ERROR, "outer allreduce: NULL buffer");
    if (strcmp(px_comm_backend(c), "gloo") != 0)
        return fail(err, errlen, PX_COMM_ERROR,
                    "outer allreduce: needs host buffers on a gloo communicator, got %s",
                    px_comm_backend(c));
    if (n == 0) return PX_COMM_OK;
    if (dt == PX_OUTER_FP32) return mean_fp32(c, buf, n, wire, err, errlen);

    const int R = px_comm_size(c);
    const size_t need = px_outer_scratch_bytes(dt, n, R);
    unsigned char *owned = NULL, *gathered = scratch;
    if (scratch) {
        if (scratch_bytes < need)
            return fail(err, errlen, PX_COMM_ERROR,
                        "outer allreduce (%s): scratch of %zu bytes, needs %zu "
                        "(px_outer_scratch_bytes)",
                        px_outer_dtype_name(dt), scratch_bytes, need);
        if ((uintptr_t)scratch % _Alignof(float) != 0)
            return fail(err, errlen, PX_COMM_ERROR,
                        "outer allreduce: scratch is not aligned for floats");
    } else {
        gathered = owned = malloc(need);
        if (!owned) {
            px_comm_abort(c); /* peers already in the all-gather fail now, not at timeout */
            return fail(err, errlen, PX_COMM_ERROR,
                        "outer allreduce (%s): out of memory for %zu bytes of scratch "
                        "(communicator aborted)",
                        px_outer_dtype_name(dt), need);
        }
    }

    px_comm_status_t st = PX_COMM_OK;
    for (size_t off = 0; off < n; off += PX_OUTER_PIECE_FLOATS) {
        size_t m = n - off < PX_OUTER_PIECE_FLOATS ? n - off : PX_OUTER_PIECE_FLOATS, slot = 0;
        st = mean_piece(c, buf + off, m, dt, gathered, &slot);
        if (st != PX_COMM_OK) {
            fail(err, errlen, st, "outer allreduce (%s, floats %zu..%zu of %zu): %s",
                 px_outer_dtype_name(dt), off, off + m, n, px_comm_last_error(c));
            break;
        }
        *wire += (uint64_t)(R - 1) * slot;
    }
    free(owned);
    return st;
}
