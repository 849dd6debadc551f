/* SipHash-2-4 (Aumasson and Bernstein, "SipHash: a fast short-input PRF",
 * 2012), written here from the paper's description, and a random 128-bit
 * key per process. Hash tables whose keys peers choose (member identities
 * and names, store keys) hash with it: without the key an attacker cannot
 * predict which keys collide, so it cannot flood one probe chain. */
#ifndef PX_SIPHASH_H
#define PX_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

/* SipHash-2-4 of data[len] under a 16-byte key (little-endian words, as in
 * the paper, whatever the host's byte order). */
uint64_t px_siphash24(const uint8_t key[16], const void *data, size_t len);

/* This process's key: 16 bytes from getrandom(), drawn on first use
 * (thread-safe). Falls back to /dev/urandom, then, with a warning on stderr,
 * to clock and address bits if neither is available. */
const uint8_t *px_siphash_process_key(void);

#endif
