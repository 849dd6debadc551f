/* Implementation of mode_policy.h. */
#include "mode_policy.h"

#include <stdio.h>

const char *px_job_mode_name(px_job_mode_t m) { return m == PX_JOB_DILOCO ? "diloco" : "sync"; }

double px_mode_failures_per_hour(int failures, int64_t window_ms) {
    return window_ms > 0 ? (double)failures * 3600000.0 / (double)window_ms : 0.0;
}

/* "3 group losses in the last 600 s (18.0/h >= 6/h)"; `limit` is the
 * threshold compared against (half of it on the way back, said so). */
static int say_failures(char *out, size_t len, const px_mode_policy_t *p, const px_mode_inputs_t *in, double limit,
                        int half) {
    double rate = px_mode_failures_per_hour(in->failures, p->window_ms);
    return snprintf(out, len, "%d group loss%s in the last %g s (%.1f/h %s %g/h%s)", in->failures,
                    in->failures == 1 ? "" : "es", (double)p->window_ms / 1000.0, rate, rate >= limit ? ">=" : "<",
                    limit, half ? ", half the threshold" : "");
}

/* "cross-group communication 62% of step time >= 50%", or "... not measured". */
static int say_comm(char *out, size_t len, const px_mode_inputs_t *in, double limit, int half) {
    if (limit <= 0) return snprintf(out, len, "cross-group communication not a signal (--auto-comm-share 0)");
    if (!in->has_comm_share) return snprintf(out, len, "cross-group communication not measured");
    return snprintf(out, len, "cross-group communication %.0f%% of step time %s %g%%%s", in->comm_share * 100.0,
                    in->comm_share >= limit ? ">=" : "<", limit * 100.0, half ? ", half the threshold" : "");
}

/* The mode the figures call for, with hysteresis, and the figures that say
 * why (into reason). */
static px_job_mode_t wanted(const px_mode_policy_t *p, const px_mode_inputs_t *in, char *reason, size_t len) {
    double rate = px_mode_failures_per_hour(in->failures, p->window_ms);
    char f[160], c[160];
    if (in->mode == PX_JOB_SYNC) {
        int fail_high = p->failures_per_hour > 0 && p->window_ms > 0 && rate >= p->failures_per_hour;
        int comm_high = p->comm_share > 0 && in->has_comm_share && in->comm_share >= p->comm_share;
        say_failures(f, sizeof f, p, in, p->failures_per_hour, 0);
        say_comm(c, sizeof c, in, p->comm_share, 0);
        if (fail_high && comm_high) snprintf(reason, len, "%s; %s", f, c);
        else if (fail_high || comm_high) snprintf(reason, len, "%s", fail_high ? f : c);
        else snprintf(reason, len, "%s; %s", f, c);
        return fail_high || comm_high ? PX_JOB_DILOCO : PX_JOB_SYNC;
    }
    double fail_low = p->failures_per_hour / 2, comm_low = p->comm_share / 2;
    int calm = (p->failures_per_hour <= 0 || rate < fail_low) &&
               (p->comm_share <= 0 || !in->has_comm_share || in->comm_share < comm_low);
    say_failures(f, sizeof f, p, in, fail_low, 1);
    say_comm(c, sizeof c, in, comm_low, in->has_comm_share);
    snprintf(reason, len, "%s%s%s", f, calm ? " and " : "; ", c);
    return calm ? PX_JOB_SYNC : PX_JOB_DILOCO;
}

int px_mode_decide(const px_mode_policy_t *p, const px_mode_inputs_t *in, px_job_mode_t *next, char *reason,
                   size_t reason_len) {
    char why[400];
    px_job_mode_t want = wanted(p, in, why, sizeof why);
    *next = in->mode;
    if (want == in->mode) {
        snprintf(reason, reason_len, "stay %s: %s", px_job_mode_name(in->mode), why);
        return 0;
    }
    if (in->since_switch_ms < p->hold_ms) {
        snprintf(reason, reason_len, "held in %s for %lld ms more (--auto-hold): %s", px_job_mode_name(in->mode),
                 (long long)(p->hold_ms - in->since_switch_ms), why);
        return 0;
    }
    *next = want;
    snprintf(reason, reason_len, "%s", why);
    return 1;
}

void px_loss_ring_add(px_loss_ring_t *r, int64_t at_ms) {
    r->at[r->head] = at_ms;
    r->head = (r->head + 1) % PX_LOSS_RING_MAX;
    if (r->n < PX_LOSS_RING_MAX) r->n++;
}

int px_loss_ring_count_since(const px_loss_ring_t *r, int64_t since_ms) {
    int k = 0;
    for (int i = 0; i < r->n; i++)
        if (r->at[i] >= since_ms) k++;
    return k;
}
