/* Implementation of px_rate.h. */
#include "px_rate.h"

static void roll(px_rate_t *r, int64_t now_ms) {
    r->window_ms = now_ms;
    r->in_window = 0;
}

int px_rate_hit(px_rate_t *r, int64_t now_ms) {
    /* A window with a summary pending stays open until the summary is taken. */
    if (now_ms - r->window_ms >= 1000 && !r->suppressed) roll(r, now_ms);
    if (++r->in_window <= (uint64_t)r->per_s) return 1;
    r->suppressed++;
    return 0;
}

int px_rate_log_ok(px_rate_t *r, int64_t now_ms) {
    px_rate_take(r, now_ms, 0); /* drops the count; ends a window that is over */
    return px_rate_hit(r, now_ms);
}

uint64_t px_rate_take(px_rate_t *r, int64_t now_ms, int force) {
    if (!r->suppressed || (!force && now_ms - r->window_ms < 1000)) return 0;
    uint64_t n = r->suppressed;
    r->suppressed = 0;
    roll(r, now_ms);
    return n;
}
