/* Low-precision averaging of DiLoCo pseudo-gradients (--outer-dtype).
 *
 * At each outer step the groups average a float vector (the pseudo-gradient,
 * up to ~10^8 floats) over the cross-group communicator. Sending it as bf16
 * halves the bytes, as int8 with one fp32 scale per 256 floats quarters them.
 *
 * Two halves:
 *   - a pure codec (sizes, encode, decode-and-add), no communicator, tested
 *     as tables of values;
 *   - one collective, px_outer_allreduce_mean, which must leave BITWISE
 *     IDENTICAL results on every rank: every group then applies the same
 *     outer update, and the state checksums compared at quorum agree. A
 *     lossy all-reduce that sums in transit cannot promise that, so each rank
 *     encodes its vector, the encoded vectors are all-gathered, and every
 *     rank decodes all of them, its own included, in rank order 0..R-1 into
 *     a zeroed accumulator and divides by R: the same arithmetic on the same
 *     bytes everywhere. docs/comm.md ("Outer-step codec") has the formats
 *     and the bytes.
 *
 * Encodings are in host byte order (all ranks of a job run on one
 * architecture), like px_comm's floats. */
#ifndef PX_OUTER_CODEC_H
#define PX_OUTER_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "px_comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { PX_OUTER_FP32, PX_OUTER_BF16, PX_OUTER_INT8 } px_outer_dtype_t;

/* int8: floats per block, each block with its own fp32 scale. */
#define PX_OUTER_INT8_BLOCK 256
/* The collective works on pieces of this many floats (a multiple of the
 * int8 block, so blocks never straddle pieces), which bounds its scratch. */
#define PX_OUTER_PIECE_FLOATS ((size_t)1 << 22)

/* "fp32", "bf16", "int8" -> the dtype; anything else (NULL too) -> -1. */
int px_outer_dtype_parse(const char *s);
/* The name parse accepts; "unknown" for a value outside the enum. */
const char *px_outer_dtype_name(px_outer_dtype_t dt);

/* ------------------------------------------------------------ pure codec */

/* Bytes encode writes for n floats (no padding):
 *   fp32: 4n   bf16: 2n
 *   int8: n + 4 * ceil(n / 256): per block, its fp32 scale then its int8
 *         values (256, the last block shorter).
 * 0 for an unknown dtype. */
size_t px_outer_encoded_bytes(px_outer_dtype_t dt, size_t n);

/* Encodes src[n] into out[px_outer_encoded_bytes(dt, n)] (any alignment).
 *   fp32: the bits as they are.
 *   bf16: the top 16 bits after rounding to nearest, ties to even; NaN stays
 *         NaN (quiet), inf stays inf, finite values past bf16's range round
 *         to inf as IEEE rounding says.
 *   int8: scale = absmax / 127 per block (nudged up by an ulp where rounding
 *         left absmax / scale above 127, as with subnormals; down where
 *         127 * scale would overflow next to FLT_MAX), value =
 *         round(x / scale) clamped to [-127, 127]; decoded x' = value * scale,
 *         so |x - x'| <= scale / 2 up to float rounding of the product. An
 *         all-zero block has scale 0 and decodes to zeros. A block holding a
 *         NaN or an inf gets scale NaN (values 0): all of it decodes to NaN,
 *         never to plausible finite numbers, so the trainer's non-finite
 *         checks see it.
 * Returns 0, or -1 for an unknown dtype or NULL buffers with n > 0. */
int px_outer_encode(px_outer_dtype_t dt, const float *src, size_t n, void *out);

/* dst[i] += decoded value i, for i < n, from in[px_outer_encoded_bytes(dt,
 * n)] (any alignment). Adding rather than storing lets the collective sum
 * contributions without a second buffer. Returns 0, or -1 as encode. */
int px_outer_decode_add(px_outer_dtype_t dt, const void *in, size_t n, float *dst);

/* ------------------------------------------------------------ collective */

/* Scratch bytes px_outer_allreduce_mean needs for n floats on a
 * communicator of `size` ranks: size copies of one piece's encoding, each
 * padded to 4 bytes (at most size * 8 MiB for bf16, size * 4.1 MiB for
 * int8); 0 for fp32 and for n == 0. */
size_t px_outer_scratch_bytes(px_outer_dtype_t dt, size_t n, int size);

/* buf[n] (host memory, Gloo communicator) becomes the mean over ranks of
 * every rank's buf, bitwise identical on every rank. Collective: every rank
 * calls it with the same n and dt.
 *   fp32: px_comm_allreduce_sum_f32, then each element / R.
 *   bf16, int8: per piece of PX_OUTER_PIECE_FLOATS floats, encode, all-gather
 *         the encodings (px_comm_allgather_f32 moving bytes, padded to 4),
 *         set the piece to -0 (the additive identity), decode-and-add rank
 *         0's, 1's, ... R-1's, / R. With R == 1 buf becomes exactly
 *         decode(encode(buf)): the same rounding as with more ranks, so the
 *         result never depends on whether a group happens to be alone.
 * scratch: NULL to allocate (and free) inside the call, or a float-aligned
 *   buffer of scratch_bytes >= px_outer_scratch_bytes(dt, n, size) that the
 *   caller keeps across outer steps.
 * wire_bytes (NULL: not wanted): set to the bytes this rank sent: bf16/int8
 *   x each piece's padded encoding (ring all-gather); fp32 the ring
 *   all-reduce's 2(R-1)/R x 4n (the per-rank average: uneven ring chunks make
 *   a rank's count differ by a few floats). On failure, the completed pieces.
 * Returns PX_COMM_OK; a px_comm status when the communicator fails (buf then
 *   holds unspecified data, the communicator is broken as px_comm says);
 *   PX_COMM_ERROR for a bad argument (nothing sent, communicator unharmed)
 *   or when the scratch allocation fails: then the communicator is aborted,
 *   so that peers already inside the collective fail at once instead of at
 *   their timeout. err[errlen] (may be NULL) gets a message on failure. */
px_comm_status_t px_outer_allreduce_mean(px_comm_t *c, float *buf, size_t n, px_outer_dtype_t dt,
                                         void *scratch, size_t scratch_bytes,
                                         uint64_t *wire_bytes, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
