/* Table-driven tests of the --mode auto policy (coordinator/mode_policy.c).
 * Each row is one situation: thresholds, the mode announced, the losses in
 * the window, the comm share (or none) and the time since the last switch,
 * and the decision the policy must take, with a substring of its reason.
 * The rows cover both triggers, the hysteresis on the way back, the hold,
 * an unmeasured comm share, an empty window and a threshold of 0 (its
 * signal off); then the loss ring. */
#include <stdio.h>
#include <string.h>

#include "mode_policy.h"

typedef struct {
    const char *what;
    double fph, share;   /* thresholds */
    long window_ms, hold_ms;
    px_job_mode_t mode;
    int failures;
    int has_share;
    double comm;
    long since_ms;
    /* expectations */
    int switches;
    px_job_mode_t next;
    const char *reason_has;
} row_t;

#define S PX_JOB_SYNC
#define D PX_JOB_DILOCO

static const row_t ROWS[] = {
    {"calm sync stays", 6, 0.5, 600000, 60000, S, 0, 1, 0.1, 120000, 0, S, "stay sync"},
    {"failure rate reaches the threshold", 6, 0.5, 600000, 60000, S, 1, 0, 0, 120000, 1, D,
     "1 group loss in the last 600 s (6.0/h >= 6/h)"},
    {"failure rate above the threshold", 6, 0.5, 600000, 60000, S, 3, 0, 0, 120000, 1, D,
     "3 group losses in the last 600 s (18.0/h >= 6/h)"},
    {"failure rate just below stays", 7, 0.5, 600000, 60000, S, 1, 0, 0, 120000, 0, S, "(6.0/h < 7/h)"},
    {"comm share reaches the threshold", 6, 0.5, 600000, 60000, S, 0, 1, 0.5, 120000, 1, D,
     "cross-group communication 50% of step time >= 50%"},
    {"comm share above the threshold", 6, 0.5, 600000, 60000, S, 0, 1, 0.62, 120000, 1, D,
     "cross-group communication 62% of step time >= 50%"},
    {"both triggers name both", 6, 0.5, 600000, 60000, S, 2, 1, 0.9, 120000, 1, D, "12.0/h >= 6/h); cross-group communication 90%"},
    {"unmeasured share never switches to diloco", 6, 0.5, 600000, 60000, S, 0, 0, 0.99, 120000, 0, S,
     "not measured"},
    {"hold blocks a switch to diloco", 6, 0.5, 600000, 60000, S, 5, 0, 0, 59999, 0, S, "held in sync for 1 ms"},
    {"hold just passed", 6, 0.5, 600000, 60000, S, 5, 0, 0, 60000, 1, D, "group losses"},
    {"zero hold switches at once", 6, 0.5, 600000, 0, S, 5, 0, 0, 0, 1, D, "group losses"},
    {"empty window measures no failures", 6, 0.5, 0, 60000, S, 5, 0, 0, 120000, 0, S, "(0.0/h < 6/h)"},
    {"empty window: comm still switches", 6, 0.5, 0, 60000, S, 5, 1, 0.7, 120000, 1, D, "70% of step time >= 50%"},
    /* DiLoCo: back to sync only when both are below half their thresholds. */
    {"diloco: both below half goes back", 6, 0.5, 600000, 60000, D, 0, 1, 0.2, 120000, 1, S,
     "0 group losses in the last 600 s (0.0/h < 3/h, half the threshold) and cross-group communication 20% of step time < 25%"},
    {"diloco: unmeasured share counts as below", 6, 0.5, 600000, 60000, D, 0, 0, 0, 120000, 1, S,
     "and cross-group communication not measured"},
    {"diloco: rate below the threshold but not half stays", 6, 0.5, 600000, 60000, D, 1, 0, 0, 120000, 0, D,
     "stay diloco: 1 group loss in the last 600 s (6.0/h >= 3/h"},
    {"diloco: rate just below half goes back", 14, 0.5, 600000, 60000, D, 1, 1, 0.1, 120000, 1, S, "(6.0/h < 7/h"},
    {"diloco: share between half and threshold stays", 6, 0.5, 600000, 60000, D, 0, 1, 0.3, 120000, 0, D,
     "30% of step time >= 25%, half the threshold"},
    {"diloco: share exactly half stays", 6, 0.5, 600000, 60000, D, 0, 1, 0.25, 120000, 0, D, ">= 25%"},
    {"diloco: hold blocks the way back", 6, 0.5, 600000, 60000, D, 0, 0, 0, 1000, 0, D, "held in diloco for 59000 ms"},
    {"diloco: high figures stay", 6, 0.5, 600000, 60000, D, 10, 1, 0.9, 0, 0, D, "stay diloco"},
    {"diloco: empty window, calm share goes back", 6, 0.5, 0, 60000, D, 9, 1, 0.1, 120000, 1, S, "(0.0/h < 3/h"},
    {"short window scales the rate", 100, 0.5, 20000, 1000, S, 1, 0, 0, 5000, 1, D,
     "1 group loss in the last 20 s (180.0/h >= 100/h)"},
    /* A threshold of 0 turns its signal off. */
    {"comm off: a full share does not switch", 6, 0, 600000, 60000, S, 0, 1, 1.0, 120000, 0, S,
     "not a signal (--auto-comm-share 0)"},
    {"comm off: failures still switch", 6, 0, 600000, 60000, S, 1, 1, 1.0, 120000, 1, D, "(6.0/h >= 6/h)"},
    {"comm off: a high share does not hold diloco", 6, 0, 600000, 60000, D, 0, 1, 0.9, 120000, 1, S,
     "(0.0/h < 3/h, half the threshold) and cross-group communication not a signal"},
    {"failures off: many losses do not switch", 0, 0.5, 600000, 60000, S, 50, 1, 0.1, 120000, 0, S, "stay sync"},
    {"failures off: losses do not hold diloco", 0, 0.5, 600000, 60000, D, 50, 1, 0.1, 120000, 1, S, "10% of step time < 25%"},
};

static int test_rows(void) {
    int failed = 0;
    for (size_t i = 0; i < sizeof ROWS / sizeof *ROWS; i++) {
        const row_t *r = &ROWS[i];
        px_mode_policy_t p = {r->fph, r->share, r->window_ms, r->hold_ms};
        px_mode_inputs_t in = {r->mode, r->failures, r->has_share, r->comm, r->since_ms};
        px_job_mode_t next = (px_job_mode_t)-1;
        char reason[512];
        int sw = px_mode_decide(&p, &in, &next, reason, sizeof reason);
        if (sw != r->switches || next != r->next || !strstr(reason, r->reason_has)) {
            printf("FAIL %s: switches=%d next=%s reason=\"%s\"; want switches=%d next=%s reason containing \"%s\"\n",
                   r->what, sw, px_job_mode_name(next), reason, r->switches, px_job_mode_name(r->next), r->reason_has);
            failed++;
        }
    }
    return failed;
}

static int test_rate(void) {
    int failed = 0;
    if (px_mode_failures_per_hour(3, 600000) != 18.0) printf("FAIL rate: 3 in 600 s is 18/h\n"), failed++;
    if (px_mode_failures_per_hour(3, 0) != 0.0) printf("FAIL rate: an empty window measures 0\n"), failed++;
    if (px_mode_failures_per_hour(3, -5) != 0.0) printf("FAIL rate: a negative window measures 0\n"), failed++;
    return failed;
}

static int test_ring(void) {
    static px_loss_ring_t r; /* 32 KB: not on the stack */
    int failed = 0;
    if (px_loss_ring_count_since(&r, 0) != 0) printf("FAIL ring: empty counts 0\n"), failed++;
    for (int i = 1; i <= 10; i++) px_loss_ring_add(&r, i * 1000);
    if (px_loss_ring_count_since(&r, 0) != 10) printf("FAIL ring: 10 added, 10 counted\n"), failed++;
    if (px_loss_ring_count_since(&r, 5000) != 6) printf("FAIL ring: since 5000 counts 5000..10000\n"), failed++;
    if (px_loss_ring_count_since(&r, 10001) != 0) printf("FAIL ring: none after the last\n"), failed++;
    /* Past its capacity the ring keeps the newest and counts at most its size. */
    for (int i = 0; i < PX_LOSS_RING_MAX + 5; i++) px_loss_ring_add(&r, 20000 + i);
    if (r.n != PX_LOSS_RING_MAX) printf("FAIL ring: bounded at %d, holds %d\n", PX_LOSS_RING_MAX, r.n), failed++;
    if (px_loss_ring_count_since(&r, 0) != PX_LOSS_RING_MAX) printf("FAIL ring: full counts its size\n"), failed++;
    if (px_loss_ring_count_since(&r, 20005) != PX_LOSS_RING_MAX)
        printf("FAIL ring: the oldest were overwritten, the newest kept\n"), failed++;
    if (px_loss_ring_count_since(&r, 20000 + PX_LOSS_RING_MAX + 4) != 1) printf("FAIL ring: the newest is there\n"), failed++;
    return failed;
}

int main(void) {
    int failed = test_rows() + test_rate() + test_ring();
    if (failed) {
        printf("%d FAILED\n", failed);
        return 1;
    }
    printf("PASS (%zu policy rows, rate, ring)\n", sizeof ROWS / sizeof *ROWS);
    return 0;
}
