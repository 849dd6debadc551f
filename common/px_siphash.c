/* Implementation of px_siphash.h. A SipRound mixes the four 64-bit state
 * words with additions, rotations and xors; each 8-byte message word is
 * xored into v3, followed by two rounds ("2"), then into v0. The last word
 * carries the message length in its top byte. Finalisation xors 0xff into v2
 * and runs four rounds ("4"). */
#include "px_siphash.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t load_le64(const uint8_t *p) {
    uint64_t w = 0;
    for (int i = 7; i >= 0; i--) w = (w << 8) | p[i];
    return w;
}

#define SIPROUND(v0, v1, v2, v3) \
    do {                         \
        v0 += v1;                \
        v1 = rotl(v1, 13);       \
        v1 ^= v0;                \
        v0 = rotl(v0, 32);       \
        v2 += v3;                \
        v3 = rotl(v3, 16);       \
        v3 ^= v2;                \
        v0 += v3;                \
        v3 = rotl(v3, 21);       \
        v3 ^= v0;                \
        v2 += v1;                \
        v1 = rotl(v1, 17);       \
        v1 ^= v2;                \
        v2 = rotl(v2, 32);       \
    } while (0)

uint64_t px_siphash24(const uint8_t key[16], const void *data, size_t len) {
    const uint8_t *p = data;
    uint64_t k0 = load_le64(key), k1 = load_le64(key + 8);
    /* "somepseudorandomlygeneratedbytes" */
    uint64_t v0 = k0 ^ 0x736f6d6570736575ull, v1 = k1 ^ 0x646f72616e646f6dull;
    uint64_t v2 = k0 ^ 0x6c7967656e657261ull, v3 = k1 ^ 0x7465646279746573ull;
    size_t whole = len - len % 8;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t m = load_le64(p + i);
        v3 ^= m;
        SIPROUND(v0, v1, v2, v3);
        SIPROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    uint64_t b = (uint64_t)(len & 0xff) << 56;
    for (size_t i = 0; i < len % 8; i++) b |= (uint64_t)p[whole + i] << (8 * i);
    v3 ^= b;
    SIPROUND(v0, v1, v2, v3);
    SIPROUND(v0, v1, v2, v3);
    v0 ^= b;
    v2 ^= 0xff;
    for (int i = 0; i < 4; i++) SIPROUND(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}

static uint8_t g_key[16];
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

static int read_urandom(uint8_t *buf, size_t len) {
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, buf + got, len - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd);
    return got == len ? 0 : -1;
}

static void draw_key(void) {
    ssize_t n;
    do n = getrandom(g_key, sizeof g_key, 0);
    while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof g_key || read_urandom(g_key, sizeof g_key) == 0) return;
    /* No kernel randomness at all: still differ between processes and runs. */
    fprintf(stderr, "px_siphash: no getrandom() or /dev/urandom; hash key taken from the clock (weak)\n");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t a = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40);
    uint64_t b = (uint64_t)(uintptr_t)&a ^ (uint64_t)clock();
    for (int i = 0; i < 8; i++) g_key[i] = (uint8_t)(a >> (8 * i)), g_key[8 + i] = (uint8_t)(b >> (8 * i));
}

const uint8_t *px_siphash_process_key(void) {
    pthread_once(&g_key_once, draw_key);
    return g_key;
}
