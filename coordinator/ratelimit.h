/* Event rate limiting for frames any peer can send (bad frames, rejected
 * credentials, refused reports): one event per frame up to a rate, then one
 * summary event per second carrying the count, so that a flood cannot fill
 * the event log's disk while every frame is still counted. Pure logic (the
 * caller passes the clock), tested as a table in tests/control. */
#ifndef PX_RATELIMIT_H
#define PX_RATELIMIT_H

#include <stdint.h>

typedef struct {
    const char *name;     /* the event type it limits */
    int per_s;            /* events logged one by one per second */
    int64_t window_ms;    /* start of the current one-second window */
    uint64_t in_window;   /* frames seen in this window */
    uint64_t suppressed;  /* frames folded into the next summary */
} px_rate_t;

/* 1: record this frame as its own event; 0: it was counted for the summary.
 * Take the summary first (px_rate_take_summary), so that it is logged before
 * the frames of a new window. */
int px_rate_admit(px_rate_t *r, int64_t now_ms);
/* The count to summarise now (the window is over, or force), 0 if none; resets it. */
uint64_t px_rate_take_summary(px_rate_t *r, int64_t now_ms, int force);

#endif
