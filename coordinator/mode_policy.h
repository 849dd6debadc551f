/* The --mode auto policy: when the coordinator switches a job between
 * synchronous training and DiLoCo (docs/architecture.md, "Switching modes").
 *
 * Synchronous data parallelism averages gradients over the groups at every
 * step: it learns best per step, but every group loss costs the step in
 * flight, and slow cross-group links are paid at every step. DiLoCo meets the
 * groups only every H inner steps: far less traffic, and a loss costs at most
 * the outer step in flight. So the coordinator switches to DiLoCo when either
 * cost is measured high:
 *
 *   - failures: group losses (a group dropped from the quorum because a member
 *     was lost, not a planned leave) counted over a sliding window of
 *     window_ms, as a rate per hour, reach failures_per_hour; or
 *   - communication: the job's comm share (the mean over the quorum's groups
 *     of what rank 0 measures as its share of step time spent in cross-group
 *     communication) reaches comm_share. Unmeasured (no group reports one):
 *     this signal never switches to DiLoCo.
 *
 * A threshold of 0 turns its signal off (never high, always calm).
 *
 * and back to sync when BOTH are below half their thresholds (hysteresis: a
 * job near a threshold does not flip at every measurement; unmeasured counts
 * as below). No switch happens within hold_ms of the last one (or of the
 * coordinator's start): each switch costs a quorum change, and a measurement
 * right after a switch describes the mode before it.
 *
 * Workers in DiLoCo should report the share a synchronous step would spend
 * communicating; a share measured over DiLoCo's outer steps alone is about H
 * times smaller and, with this rule, switches back after the hold.
 *
 * Pure: no I/O and no clock (the caller passes the times), so it is tested
 * as a table of cases (tests/control/test_mode_policy.c). The loss ring
 * holds the timestamps the failure rate is measured from; it is bounded
 * (PX_LOSS_RING_MAX), and the coordinator's flags are checked so that a
 * threshold never needs more losses in a window than it holds. */
#ifndef PX_MODE_POLICY_H
#define PX_MODE_POLICY_H

#include <stddef.h>
#include <stdint.h>

typedef enum { PX_JOB_SYNC = 0, PX_JOB_DILOCO = 1 } px_job_mode_t;

/* "sync" or "diloco". */
const char *px_job_mode_name(px_job_mode_t m);

typedef struct {
    double failures_per_hour; /* > 0: to DiLoCo at or above this loss rate; 0: not a signal */
    double comm_share;        /* (0, 1]: to DiLoCo at or above this comm share; 0: not a signal */
    int64_t window_ms;        /* losses are counted over this window */
    int64_t hold_ms;          /* least time between two switches */
} px_mode_policy_t;

typedef struct {
    px_job_mode_t mode;     /* the mode announced now */
    int failures;           /* group losses in the last window_ms */
    int has_comm_share;     /* 0: no group reports one */
    double comm_share;      /* 0..1 when has_comm_share */
    int64_t since_switch_ms; /* since the last switch (or the coordinator's start) */
} px_mode_inputs_t;

/* Losses per hour: `failures` over a window of window_ms; 0 when the window
 * is empty (window_ms <= 0: nothing can be measured). */
double px_mode_failures_per_hour(int failures, int64_t window_ms);

/* Decides the mode. Returns 1 and sets *next to the other mode when the job
 * switches now, 0 (*next = in->mode) when it stays. `reason` always gets one
 * line with the measured figures: why it switches, or why not. */
int px_mode_decide(const px_mode_policy_t *p, const px_mode_inputs_t *in, px_job_mode_t *next, char *reason,
                   size_t reason_len);

#define PX_LOSS_RING_MAX 4096

/* The times of the last PX_LOSS_RING_MAX group losses (ms, any clock that
 * only moves forward). */
typedef struct {
    int64_t at[PX_LOSS_RING_MAX];
    int n, head; /* n used; head: where the next one goes */
} px_loss_ring_t;

void px_loss_ring_add(px_loss_ring_t *r, int64_t at_ms);
/* Losses at or after since_ms (at most PX_LOSS_RING_MAX). */
int px_loss_ring_count_since(const px_loss_ring_t *r, int64_t since_ms);

#endif
