/* Implementation of job_progress.h. */
#include "job_progress.h"

#include <math.h>
#include <string.h>

void px_progress_init(px_progress_t *p) {
    memset(p, 0, sizeof *p);
    p->step = -1;
    p->checkpoint_step = -1;
}

void px_progress_step(px_progress_t *p, int64_t step, int64_t now_ms) {
    if (step < 0 || step <= p->step) return;
    p->step = step;
    p->step_ms = now_ms;
    int last = (p->pace_at + PX_PROGRESS_PACE_SAMPLES - 1) % PX_PROGRESS_PACE_SAMPLES;
    if (p->pace_n > 0 && now_ms - p->pace_ms[last] < 1000) return; /* one sample a second is enough */
    p->pace_ms[p->pace_at] = now_ms;
    p->pace_step[p->pace_at] = step;
    p->pace_at = (p->pace_at + 1) % PX_PROGRESS_PACE_SAMPLES;
    if (p->pace_n < PX_PROGRESS_PACE_SAMPLES) p->pace_n++;
}

void px_progress_tokens(px_progress_t *p, double tokens_per_s, int64_t now_ms) {
    if (!isfinite(tokens_per_s) || tokens_per_s < 0) return;
    if (p->tokens_ms <= 0) {
        p->tokens_per_s = tokens_per_s;
    } else {
        double dt = (double)(now_ms - p->tokens_ms) / 1000.0;
        double a = dt > 0 ? 1.0 - exp(-dt / PX_PROGRESS_TOKENS_TAU_S) : 0.0;
        p->tokens_per_s += a * (tokens_per_s - p->tokens_per_s);
    }
    p->tokens_ms = now_ms > 0 ? now_ms : 1;
}

void px_progress_checkpoint(px_progress_t *p, int64_t step, int64_t wall_ms) {
    if (step < 0 || step < p->checkpoint_step) return;
    p->checkpoint_step = step;
    p->checkpoint_wall_ms = wall_ms;
}

double px_progress_steps_per_s(const px_progress_t *p, int64_t now_ms) {
    if (p->pace_n == 0) return NAN;
    /* The step at the window's start: interpolated between the samples
     * around it (steps come often; samples are a second or more apart, or
     * far apart across a stall); the oldest sample when the window reaches
     * further back than the samples. */
    int64_t from = now_ms - PX_PROGRESS_PACE_WINDOW_MS;
    if (p->step_ms <= from) return 0.0; /* no step in the window */
    int oldest = (p->pace_at + PX_PROGRESS_PACE_SAMPLES - p->pace_n) % PX_PROGRESS_PACE_SAMPLES;
    int before = -1, after = -1;
    for (int k = 0; k < p->pace_n; k++) {
        int i = (oldest + k) % PX_PROGRESS_PACE_SAMPLES;
        if (p->pace_ms[i] <= from) {
            before = i;
        } else {
            after = i;
            break;
        }
    }
    double start_ms, start_step;
    if (before < 0) { /* everything we know is inside the window */
        start_ms = (double)p->pace_ms[oldest];
        start_step = (double)p->pace_step[oldest];
    } else if (after < 0) { /* no sample inside the window: no step for a minute */
        start_ms = (double)from;
        start_step = (double)p->pace_step[before];
    } else {
        double span = (double)(p->pace_ms[after] - p->pace_ms[before]);
        double w = span > 0 ? (double)(from - p->pace_ms[before]) / span : 1.0;
        start_ms = (double)from;
        start_step = (double)p->pace_step[before] + w * (double)(p->pace_step[after] - p->pace_step[before]);
    }
    double dt = ((double)now_ms - start_ms) / 1000.0;
    if (dt < 1.0) return NAN;
    return fmax(0.0, ((double)p->step - start_step) / dt);
}

double px_progress_eta_s(const px_progress_t *p, int64_t target_step, int64_t now_ms) {
    if (target_step <= 0 || p->step < 0) return NAN;
    if (p->step >= target_step) return 0.0;
    double pace = px_progress_steps_per_s(p, now_ms);
    if (!(pace > 0)) return NAN;
    return (double)(target_step - p->step) / pace;
}

double px_progress_tokens_per_s(const px_progress_t *p) { return p->tokens_ms > 0 ? p->tokens_per_s : NAN; }
