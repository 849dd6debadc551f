/* Implementation of ratelimit.h. */
#include "ratelimit.h"

static void roll(px_rate_t *r, int64_t now_ms) {
    r->window_ms = now_ms;
    r->in_window = 0;
}

int px_rate_admit(px_rate_t *r, int64_t now_ms) {
    if (now_ms - r->window_ms >= 1000 && !r->suppressed) roll(r, now_ms);
    if (++r->in_window > (uint64_t)r->per_s) {
        r->suppressed++;
        return 0;
    }
    return 1;
}

uint64_t px_rate_take_summary(px_rate_t *r, int64_t now_ms, int force) {
    if (!r->suppressed || (!force && now_ms - r->window_ms < 1000)) return 0;
    uint64_t n = r->suppressed;
    r->suppressed = 0;
    roll(r, now_ms);
    return n;
}
