/* Tests of the hash map the coordinator indexes peer-chosen keys with
 * (common/px_map.c): basic put/get/del, that its hash is keyed per process
 * (two processes hash the same key differently), and that a collision flood
 * crafted against the old unkeyed hash (px_hash64 with seed 0) leaves probe
 * sequences short. Also the SipHash-2-4 reference vector.
 *
 * `test_map --hash KEY` prints px_map_hash(KEY) and exits: the test runs
 * itself twice that way to compare two processes. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_hash.h"
#include "px_map.h"
#include "px_siphash.h"

#include "../lib/px_check.h"

static int test_basic(void) {
    int failed = 0;
    px_map_t *m = px_map_new();
    char k[32];
    for (int i = 0; i < 1000; i++) {
        int n = snprintf(k, sizeof k, "g%d/0", i);
        CHECK(px_map_put(m, k, (size_t)n, i) == 0, "put %s", k);
    }
    CHECK(px_map_size(m) == 1000, "size 1000, got %zu", px_map_size(m));
    for (int i = 0; i < 1000; i += 2) {
        int n = snprintf(k, sizeof k, "g%d/0", i);
        px_map_del(m, k, (size_t)n);
    }
    int64_t v;
    int ok = 1;
    for (int i = 0; i < 1000; i++) {
        int n = snprintf(k, sizeof k, "g%d/0", i);
        int found = px_map_get(m, k, (size_t)n, &v);
        if (found != (i % 2) || (found && v != i)) ok = 0;
    }
    CHECK(ok && px_map_size(m) == 500, "after deleting the even keys exactly the odd ones remain");
    px_map_destroy(&m);
    return failed;
}

/* SipHash-2-4, key 00 01 .. 0f: the paper's worked example (message
 * 00 01 .. 0e) and the empty message (first entry of the reference table). */
static int test_siphash_vectors(void) {
    int failed = 0;
    uint8_t key[16], msg[15];
    for (int i = 0; i < 16; i++) key[i] = (uint8_t)i;
    for (int i = 0; i < 15; i++) msg[i] = (uint8_t)i;
    uint64_t h = px_siphash24(key, msg, sizeof msg);
    CHECK(h == 0xa129ca6149be45e5ull, "SipHash-2-4 of the paper's example: got %016" PRIx64, h);
    h = px_siphash24(key, "", 0);
    CHECK(h == 0x726fdb47dd0e0e31ull, "SipHash-2-4 of the empty message: got %016" PRIx64, h);
    return failed;
}

/* ---- a collision flood against the old unkeyed hash ---------------------- */

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t rotr(uint64_t x, int r) { return (x >> r) | (x << (64 - r)); }
/* Inverse of an odd number modulo 2^64 (Newton's iteration). */
static uint64_t inv_odd(uint64_t a) {
    uint64_t x = a;
    for (int i = 0; i < 6; i++) x *= 2 - a * x;
    return x;
}

/* px_hash.c's word mixing, restated: every step is invertible, so for any
 * first word there is a second word that drives the state to a chosen value.
 * 16-byte keys built that way all share one px_hash64(key, 16, 0). */
static const uint64_t K1 = 0x9E3779B97F4A7C15ull, K2 = 0xC2B2AE3D27D4EB4Full;
static uint64_t mix_word(uint64_t h, uint64_t w) {
    w *= K2;
    w = rotl(w, 31);
    w *= K1;
    h ^= w;
    return rotl(h, 27) * 5 + 0x52dce729;
}
static void colliding_key(uint64_t i, uint64_t target, uint8_t out[16]) {
    uint64_t h1 = mix_word(0 ^ K1, i);
    uint64_t t = rotr((target - 0x52dce729) * inv_odd(5), 27);
    uint64_t w1 = rotr((t ^ h1) * inv_odd(K1), 31) * inv_odd(K2);
    memcpy(out, &i, 8);
    memcpy(out + 8, &w1, 8);
}

static int test_collision_flood(void) {
    int failed = 0;
    enum { N = 4000 };
    static uint8_t keys[N][16];
    for (int i = 0; i < N; i++) colliding_key((uint64_t)i * 7919 + 1, 0x1234567887654321ull, keys[i]);
    /* The flood is real: every key has the same old hash. */
    uint64_t h0 = px_hash64(keys[0], 16, 0);
    int all_equal = 1;
    for (int i = 1; i < N; i++) all_equal &= px_hash64(keys[i], 16, 0) == h0;
    CHECK(all_equal, "the crafted keys collide under px_hash64(seed 0)");
    px_map_t *m = px_map_new();
    for (int i = 0; i < N; i++) px_map_put(m, keys[i], 16, i);
    size_t worst = px_map_max_displacement(m);
    /* Random hashes at load <= 1/2 give displacements of a few tens at most;
     * an unkeyed hash puts all N keys in one probe chain. */
    CHECK(worst < 100, "crafted collision flood: a lookup probes %zu slots (want < 100 with a keyed hash)", worst);
    int64_t v;
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= px_map_get(m, keys[i], 16, &v) && v == i;
    CHECK(ok, "every flooded key is found with its value");
    px_map_destroy(&m);
    return failed;
}

/* ---- keyed per process ----------------------------------------------------- */

static int hash_in_child(const char *self, const char *key, char *out, size_t len) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' --hash '%s'", self, key);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    int ok = fgets(out, (int)len, p) != NULL;
    out[strcspn(out, "\n")] = '\0';
    return pclose(p) == 0 && ok ? 0 : -1;
}

static int test_keyed(const char *self) {
    int failed = 0;
    const char *key = "g0/0";
    CHECK(px_map_hash(key, 4) == px_map_hash(key, 4), "the hash is stable within a process");
    char a[64] = "", b[64] = "";
    CHECK(hash_in_child(self, key, a, sizeof a) == 0 && hash_in_child(self, key, b, sizeof b) == 0,
          "could not run '%s --hash'", self);
    CHECK(a[0] && strcmp(a, b) != 0, "two processes hash '%s' the same (%s): the map's hash is not keyed", key, a);
    return failed;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--hash") == 0) {
        printf("%016" PRIx64 "\n", px_map_hash(argv[2], strlen(argv[2])));
        return 0;
    }
    int failed = test_basic() + test_siphash_vectors() + test_collision_flood() + test_keyed(argv[0]);
    printf("test_map: %d failed\n", failed);
    return failed ? 1 : 0;
}
