/* Heartbeats over UDP: the sealed datagram (docs/protocol.md "Heartbeats
 * over UDP").
 *
 * A worker that registered over ZeroMQ gets a random 32-byte key from the
 * coordinator (in its RegisterAck, over the authenticated control channel)
 * and may then send its heartbeats as single UDP datagrams, which the
 * coordinator reads in batches on its own thread instead of through
 * libzmq's I/O thread: at 10,000+ groups that per-message hand-off is most
 * of the coordinator's work.
 *
 *   "PXU1" | ident_len (1 byte, 1..PX_HBUDP_IDENT_MAX) | ident |
 *   seq (8 bytes, little-endian, strictly increasing per key) |
 *   ChaCha20-Poly1305 (IETF) of an encoded Envelope, and its 16-byte tag
 *
 * The header is the AEAD's associated data and the nonce is a direction tag
 * plus seq, so a datagram is readable and acceptable only with the key of
 * the registration that made it, and only once (the coordinator keeps the
 * highest seq it accepted). ident is the sender's ZeroMQ routing identity:
 * it names the member whose key opens the datagram.
 *
 * Pure functions on buffers (libsodium for the cipher); no sockets here. */
#ifndef PX_HBUDP_H
#define PX_HBUDP_H

#include <stddef.h>
#include <stdint.h>

#define PX_HBUDP_KEY_BYTES 32
#define PX_HBUDP_IDENT_MAX 64
#define PX_HBUDP_TAG_BYTES 16
/* Largest datagram either side builds or accepts: below IPv6's minimum MTU,
 * so a heartbeat never travels as fragments. A heartbeat that does not fit
 * goes over ZeroMQ instead. */
#define PX_HBUDP_MAX 1200

/* A fresh random key. 0, or -1 when libsodium could not start. */
int px_hbudp_keygen(uint8_t key[PX_HBUDP_KEY_BYTES]);

/* Builds the datagram for plain (an encoded Envelope) into out. Returns its
 * length, or 0 when ident is empty or too long or the result exceeds cap or
 * PX_HBUDP_MAX. */
size_t px_hbudp_seal(const uint8_t key[PX_HBUDP_KEY_BYTES], const void *ident, size_t ident_len, uint64_t seq,
                     const void *plain, size_t plain_len, uint8_t *out, size_t cap);

/* Reads the cleartext header: the sender's identity (pointing into buf) and
 * seq. 0, or -1 when buf is not a well-formed datagram. */
int px_hbudp_peek(const uint8_t *buf, size_t len, const uint8_t **ident, size_t *ident_len, uint64_t *seq);

/* Authenticates and decrypts buf with key into plain (cap bytes). 0 with
 * *plain_len set, or -1 (malformed, forged, altered, or another key's). */
int px_hbudp_open(const uint8_t key[PX_HBUDP_KEY_BYTES], const uint8_t *buf, size_t len, uint8_t *plain, size_t cap,
                  size_t *plain_len);

#endif
