/* Tests of the rendezvous store (coordinator/store.c): namespacing by quorum
 * id, waiters answered on set and on expiry, dropping old namespaces; the
 * limits on keys, bytes and waiters (per quorum and in total) and that a
 * refused request changes nothing; and that lookups and set-to-waiter
 * matching do not scan (100,000 keys within a generous CPU-time budget). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store.h"

static int answers, found_answers;
static char last_value[64];

static void on_answer(void *ctx, const px_kv_answer_t *a) {
    (void)ctx;
    answers++;
    if (a->found) {
        found_answers++;
        snprintf(last_value, sizeof last_value, "%.*s", (int)a->len, (const char *)a->value);
    }
}

#define CHECK(cond, msg)                              \
    do {                                              \
        if (!(cond)) {                                \
            fprintf(stderr, "FAIL: %s\n", msg);       \
            failed++;                                 \
        }                                             \
    } while (0)

static int basics(void) {
    int failed = 0;
    px_store_kv_t *s = px_kv_new();
    const void *v;
    size_t len;
    px_kv_set(s, 1, "k", "one", 3, on_answer, NULL);
    px_kv_set(s, 2, "k", "two", 3, on_answer, NULL);
    CHECK(px_kv_get(s, 1, "k", &v, &len) && len == 3 && !memcmp(v, "one", 3), "quorum 1 keeps its value");
    CHECK(px_kv_get(s, 2, "k", &v, &len) && !memcmp(v, "two", 3), "quorum 2 has its own namespace");
    CHECK(!px_kv_get(s, 3, "k", &v, &len), "absent namespace");
    px_kv_wait(s, 2, "later", 1000, strdup("peer"), 42);
    px_kv_wait(s, 2, "never", 500, strdup("peer"), 43);
    CHECK(px_kv_waiters(s) == 2, "two waiters");
    px_kv_set(s, 2, "later", "value", 5, on_answer, NULL);
    CHECK(answers == 1 && found_answers == 1 && !strcmp(last_value, "value"), "waiter answered on set");
    px_kv_expire(s, 499, on_answer, NULL);
    CHECK(answers == 1, "not expired before the deadline");
    px_kv_expire(s, 500, on_answer, NULL);
    CHECK(answers == 2 && found_answers == 1 && px_kv_waiters(s) == 0, "waiter expired at the deadline");
    px_kv_set(s, 2, "k", "TWO", 3, on_answer, NULL);
    CHECK(px_kv_get(s, 2, "k", &v, &len) && !memcmp(v, "TWO", 3), "set replaces");
    px_kv_wait(s, 1, "gone", 10000, strdup("peer"), 44);
    px_kv_drop_before(s, 2, on_answer, NULL);
    CHECK(!px_kv_get(s, 1, "k", &v, &len) && px_kv_get(s, 2, "k", &v, &len), "old namespace dropped");
    CHECK(answers == 3 && px_kv_waiters(s) == 0, "waiters of a dropped namespace are answered");
    px_kv_destroy(&s);
    return failed;
}

static int limits(void) {
    int failed = 0;
    const void *v;
    size_t len;
    px_store_kv_t *s = px_kv_new();
    px_kv_limits_t lim = {.keys = 3, .bytes = 40, .waiters = 2, .total_keys = 5, .total_bytes = 60, .total_waiters = 3};
    px_kv_set_limits(s, &lim);
    /* keys: 3 per quorum */
    CHECK(px_kv_set(s, 1, "a", "1", 1, on_answer, NULL) == PX_KV_OK, "first key");
    CHECK(px_kv_set(s, 1, "b", "1", 1, on_answer, NULL) == PX_KV_OK, "second key");
    CHECK(px_kv_set(s, 1, "c", "1", 1, on_answer, NULL) == PX_KV_OK, "third key");
    CHECK(px_kv_set(s, 1, "d", "1", 1, on_answer, NULL) == PX_KV_LIMIT_KEYS, "a fourth key in one quorum is refused");
    CHECK(!px_kv_get(s, 1, "d", &v, &len) && px_kv_count(s) == 3 && px_kv_bytes(s) == 6,
          "a refused key is not stored and not counted");
    CHECK(px_kv_set(s, 1, "a", "22", 2, on_answer, NULL) == PX_KV_OK && px_kv_get(s, 1, "a", &v, &len) && len == 2,
          "replacing a key's value is not a new key");
    /* bytes (key + value): 40 per quorum */
    char big[64];
    memset(big, 'x', sizeof big);
    CHECK(px_kv_set(s, 1, "b", big, 40, on_answer, NULL) == PX_KV_LIMIT_BYTES, "a value past the byte limit is refused");
    CHECK(px_kv_get(s, 1, "b", &v, &len) && len == 1 && px_kv_bytes(s) == 7, "a refused value leaves the old one");
    CHECK(px_kv_set(s, 1, "b", big, 34, on_answer, NULL) == PX_KV_OK && px_kv_bytes(s) == 40, "up to the byte limit");
    CHECK(px_kv_set(s, 1, "b", "s", 1, on_answer, NULL) == PX_KV_OK && px_kv_bytes(s) == 7, "shrinking frees bytes");
    /* totals: quorum 2 has its own 3 keys, but the store holds 5 */
    CHECK(px_kv_set(s, 2, "a", "1", 1, on_answer, NULL) == PX_KV_OK, "another quorum has its own key budget");
    CHECK(px_kv_set(s, 2, "b", "1", 1, on_answer, NULL) == PX_KV_OK, "another quorum, second key");
    CHECK(px_kv_set(s, 2, "c", "1", 1, on_answer, NULL) == PX_KV_LIMIT_KEYS, "the store's total key limit holds");
    CHECK(px_kv_set(s, 2, "b", big, 40, on_answer, NULL) == PX_KV_LIMIT_BYTES, "per-quorum bytes in quorum 2");
    /* waiters: 2 per quorum, 3 in total */
    answers = found_answers = 0;
    CHECK(px_kv_wait(s, 1, "w", 1000, strdup("p"), 1) == PX_KV_OK, "first waiter");
    CHECK(px_kv_wait(s, 1, "w", 1000, strdup("p"), 2) == PX_KV_OK, "second waiter on the same key");
    char *peer = strdup("p");
    CHECK(px_kv_wait(s, 1, "x", 1000, peer, 3) == PX_KV_LIMIT_WAITERS, "a third waiter in one quorum is refused");
    free(peer); /* refused: the caller keeps it */
    CHECK(px_kv_wait(s, 2, "x", 1000, strdup("p"), 4) == PX_KV_OK, "another quorum's waiter");
    peer = strdup("p");
    CHECK(px_kv_wait(s, 2, "y", 1000, peer, 5) == PX_KV_LIMIT_WAITERS, "the store's total waiter limit holds");
    free(peer);
    CHECK(px_kv_waiters(s) == 3, "three waiters");
    /* a set for a key with waiters is a new key: refused at the key limit, waiters stay */
    CHECK(px_kv_set(s, 1, "w", "1", 1, on_answer, NULL) == PX_KV_LIMIT_KEYS && answers == 0 && px_kv_waiters(s) == 3,
          "a refused set answers nobody");
    px_kv_drop_before(s, 2, on_answer, NULL);
    CHECK(answers == 2 && found_answers == 0 && px_kv_waiters(s) == 1 && px_kv_count(s) == 2 && px_kv_bytes(s) == 4,
          "dropping a quorum releases its keys, bytes and waiters");
    CHECK(px_kv_set(s, 2, "c", "1", 1, on_answer, NULL) == PX_KV_OK, "room again after the drop");
    px_kv_expire(s, 1000, on_answer, NULL);
    CHECK(answers == 3 && px_kv_waiters(s) == 0, "expiry releases waiters");
    px_kv_destroy(&s);
    return failed;
}

/* 100,000 keys set and read, 100,000 waiters each answered by its own set:
 * linear scans make this O(n^2) (tens of seconds); hashed lookups take
 * well under a second. The budget is CPU time, generous for a loaded box. */
static int scale(void) {
    int failed = 0;
    enum { N = 100000 };
    px_store_kv_t *s = px_kv_new();
    clock_t t0 = clock();
    char key[32];
    const void *v;
    size_t len;
    int ok = 1;
    for (int i = 0; i < N; i++) snprintf(key, sizeof key, "rank/%d", i), ok &= px_kv_set(s, 7, key, key, 8, on_answer, NULL) == 0;
    for (int i = 0; i < N; i++) snprintf(key, sizeof key, "rank/%d", i), ok &= px_kv_get(s, 7, key, &v, &len);
    answers = found_answers = 0;
    for (int i = 0; i < N; i++) snprintf(key, sizeof key, "wait/%d", i), ok &= px_kv_wait(s, 7, key, 1000000, strdup("p"), (uint64_t)i) == 0;
    for (int i = N - 1; i >= 0; i--) snprintf(key, sizeof key, "wait/%d", i), ok &= px_kv_set(s, 7, key, "v", 1, on_answer, NULL) == 0;
    double cpu_s = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECK(ok && answers == N && found_answers == N && px_kv_count(s) == 2 * N, "every key stored and every waiter answered");
    if (cpu_s > 5.0) {
        fprintf(stderr, "FAIL: %d keys and %d waiters took %.1f s of CPU (budget 5 s): lookups scan\n", N, N, cpu_s);
        failed++;
    }
    printf("scale: %d keys + %d waiters in %.2f s CPU\n", N, N, cpu_s);
    px_kv_destroy(&s);
    return failed;
}

int main(void) {
    int failed = basics() + limits() + scale();
    printf("test_store: %d failed\n", failed);
    return failed ? 1 : 0;
}
