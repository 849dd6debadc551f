/* Tests of the rendezvous store (coordinator/store.c): namespacing by quorum
 * id, waiters answered on set and on expiry, and dropping old namespaces. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(void) {
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
    printf("test_store: %d failed\n", failed);
    return failed ? 1 : 0;
}
