/* Implementation of px_hbudp.h: header layout and the AEAD around it. */
#include "px_hbudp.h"

#include <pthread.h>
#include <sodium.h>
#include <string.h>

static const uint8_t MAGIC[4] = {'P', 'X', 'U', '1'};
/* The nonce's first four bytes: this direction only (worker to coordinator). */
static const uint8_t DIRECTION[4] = {'w', '2', 'c', 0};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int sodium_ok;
static void start_sodium(void) { sodium_ok = sodium_init() >= 0; }
static int ready(void) {
    pthread_once(&once, start_sodium);
    return sodium_ok;
}

static void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static void make_nonce(uint8_t nonce[crypto_aead_chacha20poly1305_IETF_NPUBBYTES], uint64_t seq) {
    memcpy(nonce, DIRECTION, 4);
    put_le64(nonce + 4, seq);
}

static size_t header_len(size_t ident_len) { return sizeof MAGIC + 1 + ident_len + 8; }

int px_hbudp_keygen(uint8_t key[PX_HBUDP_KEY_BYTES]) {
    if (!ready()) return -1;
    crypto_aead_chacha20poly1305_ietf_keygen(key);
    return 0;
}

size_t px_hbudp_seal(const uint8_t key[PX_HBUDP_KEY_BYTES], const void *ident, size_t ident_len, uint64_t seq,
                     const void *plain, size_t plain_len, uint8_t *out, size_t cap) {
    if (!ready() || ident_len == 0 || ident_len > PX_HBUDP_IDENT_MAX) return 0;
    size_t hl = header_len(ident_len), total = hl + plain_len + PX_HBUDP_TAG_BYTES;
    if (plain_len > PX_HBUDP_MAX || total > cap || total > PX_HBUDP_MAX) return 0;
    memcpy(out, MAGIC, sizeof MAGIC);
    out[4] = (uint8_t)ident_len;
    memcpy(out + 5, ident, ident_len);
    put_le64(out + 5 + ident_len, seq);
    uint8_t nonce[crypto_aead_chacha20poly1305_IETF_NPUBBYTES];
    make_nonce(nonce, seq);
    unsigned long long clen = 0;
    crypto_aead_chacha20poly1305_ietf_encrypt(out + hl, &clen, plain, plain_len, out, hl, NULL, nonce, key);
    return hl + (size_t)clen;
}

int px_hbudp_peek(const uint8_t *buf, size_t len, const uint8_t **ident, size_t *ident_len, uint64_t *seq) {
    if (len < header_len(1) + PX_HBUDP_TAG_BYTES || len > PX_HBUDP_MAX || memcmp(buf, MAGIC, sizeof MAGIC) != 0)
        return -1;
    size_t il = buf[4];
    if (il == 0 || il > PX_HBUDP_IDENT_MAX || len < header_len(il) + PX_HBUDP_TAG_BYTES) return -1;
    *ident = buf + 5;
    *ident_len = il;
    *seq = get_le64(buf + 5 + il);
    return 0;
}

int px_hbudp_open(const uint8_t key[PX_HBUDP_KEY_BYTES], const uint8_t *buf, size_t len, uint8_t *plain, size_t cap,
                  size_t *plain_len) {
    const uint8_t *ident;
    size_t il;
    uint64_t seq;
    if (!ready() || px_hbudp_peek(buf, len, &ident, &il, &seq) != 0) return -1;
    size_t hl = header_len(il);
    if (len - hl - PX_HBUDP_TAG_BYTES > cap) return -1;
    uint8_t nonce[crypto_aead_chacha20poly1305_IETF_NPUBBYTES];
    make_nonce(nonce, seq);
    unsigned long long plen = 0;
    if (crypto_aead_chacha20poly1305_ietf_decrypt(plain, &plen, NULL, buf + hl, len - hl, buf, hl, nonce, key) != 0)
        return -1;
    *plain_len = (size_t)plen;
    return 0;
}
