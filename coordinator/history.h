/* The job's recent past for the dashboard (GET /api/history): training points
 * and the events that mark them, both numbered by one sequence so that a page
 * asks only for what is new (?since=SEQ).
 *
 * A point is one committed step of the job: the first quorum group's rank 0
 * to report a step beyond the last point's (its heartbeat's TrainStats) gives
 * its loss, throughput and mode. Steps the coordinator never heard about (a
 * heartbeat is every 100 ms; steps may be faster) have no point: the curve is
 * sampled, not complete.
 *
 * Memory is bounded, because a job runs for days: at most max_points points.
 * When full, every other point of the older half goes, so recent steps stay
 * at full resolution and older ones thin out (halving again each time the
 * table refills); a page loaded later sees the thinned curve. Events are a
 * ring of the last max_events. Pure data: no clock, no sockets; tested in
 * tests/control/test_history.c. */
#ifndef PX_HISTORY_H
#define PX_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "px_buf.h"
#include "quorum.h"

#define PX_HISTORY_POINTS 10000
#define PX_HISTORY_EVENTS 2000

typedef struct {
    uint64_t seq;        /* set by px_history_add_point */
    int64_t time_ms;     /* wall clock, ms since the epoch */
    int64_t step;
    float loss;          /* NaN: unknown */
    float tokens_per_s;  /* NaN: unknown */
    float step_seconds;  /* NaN: unknown */
    float eval_loss;     /* NaN: no eval since the previous point */
    int64_t eval_step;   /* the step eval_loss was measured at */
    int groups;          /* groups in the quorum */
    int diloco;          /* the reporter trains in DiLoCo rounds */
} px_history_point_t;

#define PX_HISTORY_TYPE_MAX 24
#define PX_HISTORY_DETAIL_MAX 160

typedef struct {
    uint64_t seq;
    int64_t time_ms, step;
    char type[PX_HISTORY_TYPE_MAX];      /* "group_dropped", "heal_finished", ... */
    char group[PX_QUORUM_NAME_MAX];      /* "" when about no one group */
    char detail[PX_HISTORY_DETAIL_MAX];  /* a line for people (hover text) */
} px_history_event_t;

typedef struct px_history px_history_t;

/* NULL when out of memory. max_points >= 2, max_events >= 1. */
px_history_t *px_history_new(size_t max_points, size_t max_events);
void px_history_destroy(px_history_t **self);

/* Adds p when its step is beyond the last point's; returns 1 then, else 0. */
int px_history_add_point(px_history_t *h, const px_history_point_t *p);
/* Records an event; group and detail may be NULL; longer strings are cut. */
void px_history_add_event(px_history_t *h, int64_t time_ms, int64_t step, const char *type, const char *group,
                          const char *detail);

/* The last sequence number given (0: nothing yet). */
uint64_t px_history_seq(const px_history_t *h);
size_t px_history_points(const px_history_t *h);
size_t px_history_events(const px_history_t *h);
/* The latest point, or NULL when there is none. */
const px_history_point_t *px_history_last(const px_history_t *h);
/* The latest eval loss of any point (NaN: none), and its step. */
float px_history_last_eval(const px_history_t *h, int64_t *step);

/* Appends `"points":[...],"events":[...]` with everything after seq `since`,
 * oldest first (the caller writes the braces and the other fields). */
void px_history_json(const px_history_t *h, uint64_t since, px_buf_t *b);

/* Parses the query of GET /api/history (after the '?', NULL or "" for
 * none): since=SEQ, SEQ 1 to 19 digits; other parameters are ignored. 0 and
 * *since set (0 without since=), or -1 with why in err. */
int px_history_parse_query(const char *query, uint64_t *since, char *err, size_t errlen);

#endif
