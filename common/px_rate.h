/* Rate limit for events a peer can trigger at will (bad frames, rejected
 * credentials, identity conflicts, refused reports, limits reached): the
 * first per_s occurrences in each one-second window are emitted one by one;
 * the rest are counted and emitted later as one summary with their count.
 * Counts always add up, and a flood costs at most per_s + 1 events a second,
 * so it cannot fill the event log's disk. The log lines about the same
 * occurrences go through a limiter of their own (px_rate_log_ok), with no
 * summary: each line carries the running total. Pure logic (the caller
 * passes the clock), tested as a table (tests/control/test_ratelimit.c). */
#ifndef PX_RATE_H
#define PX_RATE_H

#include <stdint.h>

typedef struct {
    const char *name;    /* the event type it limits (for the caller's use) */
    int per_s;
    int64_t window_ms;   /* start of the current one-second window */
    uint64_t in_window;  /* occurrences in it */
    uint64_t suppressed; /* occurrences not emitted yet: the next summary */
} px_rate_t;

/* Counts one occurrence: 1 when the caller should emit it on its own, 0 when
 * it goes into a later summary. Take the summary first (px_rate_take), so
 * that it is logged before the occurrences of a new window. */
int px_rate_hit(px_rate_t *r, int64_t now_ms);
/* How many occurrences the caller should summarise now (0: none): those
 * suppressed, once their window has ended or when force is set (shutdown).
 * Taking a summary starts a new window. */
uint64_t px_rate_take(px_rate_t *r, int64_t now_ms, int force);

/* Log lines of one kind a peer can cause, a second (a px_rate_t's per_s for
 * px_rate_log_ok): enough to see what a flood is, too few to fill a disk. */
#define PX_RATE_LOG_LINES_PER_S 5
/* For log lines rather than events: counts one occurrence, 1 when the
 * caller should log it (at most per_s a second), 0 when not. Nothing is
 * summarised: the lines say the total themselves (total=N). */
int px_rate_log_ok(px_rate_t *r, int64_t now_ms);

#endif
