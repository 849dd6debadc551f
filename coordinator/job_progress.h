/* How far and how fast the job goes, as the coordinator sees it: the job's
 * step against its target, a smoothed tokens/s, the pace of the last minute
 * and the ETA it gives, and the newest checkpoint. /status, /status.txt,
 * /metrics and the dashboard show these (status.c, coordinator.c).
 * Pure: every call takes the time it is about, so tests drive the clock. */
#ifndef PX_JOB_PROGRESS_H
#define PX_JOB_PROGRESS_H

#include <stdint.h>

#define PX_PROGRESS_PACE_SAMPLES 64 /* (time, step) samples, at most one a second: the pace window */
#define PX_PROGRESS_PACE_WINDOW_MS 60000
#define PX_PROGRESS_TOKENS_TAU_S 10.0 /* time constant of the tokens/s smoothing */

typedef struct {
    int64_t step; /* the job's committed step (-1: none heard yet) */
    int64_t step_ms; /* ... when it was heard (monotonic) */
    /* the pace: a ring of (monotonic ms, step) samples */
    int64_t pace_ms[PX_PROGRESS_PACE_SAMPLES], pace_step[PX_PROGRESS_PACE_SAMPLES];
    int pace_n, pace_at;
    double tokens_per_s; /* smoothed (exponential, PX_PROGRESS_TOKENS_TAU_S); valid when tokens_ms > 0 */
    int64_t tokens_ms;   /* when the last figure came (0: none yet) */
    int64_t checkpoint_step; /* the newest checkpoint saved (-1: none this coordinator heard of) */
    int64_t checkpoint_wall_ms; /* ... when (wall clock, ms since the epoch) */
} px_progress_t;

void px_progress_init(px_progress_t *p);
/* The job's step is `step` at monotonic time now_ms (a step below the
 * known one is ignored: the job's step only advances). */
void px_progress_step(px_progress_t *p, int64_t step, int64_t now_ms);
/* A group's tokens/s figure for a new step, at monotonic now_ms (a negative
 * or non-finite figure is ignored). */
void px_progress_tokens(px_progress_t *p, double tokens_per_s, int64_t now_ms);
/* A checkpoint of `step` saved at wall time wall_ms (an older step is ignored). */
void px_progress_checkpoint(px_progress_t *p, int64_t step, int64_t wall_ms);

/* Steps per second over the last minute up to now_ms (a stalled job's pace
 * falls towards 0): NaN until the job has been heard of for a second. */
double px_progress_steps_per_s(const px_progress_t *p, int64_t now_ms);
/* Seconds until the job reaches target_step at that pace: NaN when the
 * target is unknown (<= 0) or the pace unknown or 0; 0 once reached. */
double px_progress_eta_s(const px_progress_t *p, int64_t target_step, int64_t now_ms);
/* The smoothed tokens/s, NaN before the first figure. */
double px_progress_tokens_per_s(const px_progress_t *p);

#endif
