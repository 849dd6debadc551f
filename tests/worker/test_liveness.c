/* Tests of the group-liveness digest (worker/liveness.h, pure): which ranks a
 * leader reports alive and the step range it reports, as a table. */
#include <stdio.h>
#include <string.h>

#include "liveness.h"

static int failed;

typedef struct {
    const char *what;
    int n;
    px_rank_seen_t ranks[12];
    int64_t now, window;
    size_t want_len;
    uint8_t want_bits[2];
    int64_t want_min, want_max;
} case_t;

int main(void) {
    static const case_t cases[] = {
        {"nobody heard", 4, {{0, 0}}, 1000, 150, 0, {0, 0}, 0, 0},
        {"the leader's own entry is never reported", 2, {{1000, 5}, {0, 0}}, 1000, 150, 0, {0, 0}, 0, 0},
        {"all heard", 4, {{0, 0}, {990, 5}, {950, 7}, {900, 6}}, 1000, 150, 1, {0x0e, 0}, 5, 7},
        {"one past the window", 4, {{0, 0}, {990, 5}, {849, 1}, {900, 6}}, 1000, 150, 1, {0x0a, 0}, 5, 6},
        {"exactly at the window's edge counts", 3, {{0, 0}, {850, 4}, {0, 0}}, 1000, 150, 1, {0x02, 0}, 4, 4},
        {"closed connection (0) is not heard", 3, {{0, 0}, {0, 9}, {999, 3}}, 1000, 150, 1, {0x04, 0}, 3, 3},
        {"second byte", 10, {{0, 0}, [9] = {1000, 12}}, 1000, 150, 2, {0x00, 0x02}, 12, 12},
        {"steps span min and max", 12,
         {{0, 0}, {1000, 40}, {1000, 41}, {1000, 39}, {0, 0}, {0, 0}, {0, 0}, {0, 0}, {1000, 45}, {0, 0}, {0, 0}, {1000, 39}},
         1000, 150, 2, {0x0e | 0x00, 0x09}, 39, 45},
    };
    /* "steps span": ranks 1,2,3 (byte 0: 0x0e), 8 and 11 (byte 1: 0x01 | 0x08) */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const case_t *c = &cases[i];
        uint8_t bits[2] = {0xff, 0xff};
        size_t len = 99;
        int64_t lo = -1, hi = -1;
        px_liveness_digest(c->ranks, c->n, c->now, c->window, bits, &len, &lo, &hi);
        int ok = len == c->want_len && lo == c->want_min && hi == c->want_max;
        for (size_t b = 0; b < c->want_len; b++) ok &= bits[b] == c->want_bits[b];
        if (!ok) {
            fprintf(stderr, "FAIL: %s: len %zu bits %02x %02x min %lld max %lld\n", c->what, len, bits[0], bits[1],
                    (long long)lo, (long long)hi);
            failed++;
        }
    }
    printf("test_liveness: %d failed\n", failed);
    return failed ? 1 : 0;
}
