/* The job's progress as the coordinator reckons it (coordinator/job_progress.c)
 * on a clock the test drives: the pace over the last minute (steady, then
 * stalled, then resumed), the ETA from it, the tokens/s smoothing against a
 * swinging input, the newest checkpoint; and how /status and /status.txt
 * show them (coordinator/status.c): the job's step, not the quorum's first,
 * the target from the members' --steps, groups by their rank 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job_progress.h"
#include "status.h"
#include "status_fixture.h"
#include "../lib/px_check.h"

static int failed;

static int near(double a, double b, double tol) { return fabs(a - b) <= tol; }

static void test_pace_and_eta(void) {
    px_progress_t p;
    px_progress_init(&p);
    CHECK(isnan(px_progress_steps_per_s(&p, 0)), "no pace before any step");
    CHECK(isnan(px_progress_eta_s(&p, 1000, 0)), "no ETA before any step");
    /* 2 steps a second for two minutes, heard every 100 ms (only a sample a second is kept) */
    int64_t t = 10000;
    for (int i = 0; i <= 1200; i++, t += 100) px_progress_step(&p, 100 + i / 5, t);
    t -= 100;
    CHECK(p.step == 340, "step %lld", (long long)p.step);
    double pace = px_progress_steps_per_s(&p, t);
    CHECK(near(pace, 2.0, 0.05), "steady pace %.3f steps/s, want 2", pace);
    double eta = px_progress_eta_s(&p, 1000, t);
    CHECK(near(eta, 330.0, 10.0), "ETA %.1f s for 660 steps at 2/s, want 330", eta);
    CHECK(px_progress_eta_s(&p, 0, t) != px_progress_eta_s(&p, 0, t), "no target: the ETA is NaN");
    CHECK(px_progress_eta_s(&p, 340, t) == 0.0, "reached: ETA 0");
    CHECK(px_progress_eta_s(&p, 200, t) == 0.0, "past the target: ETA 0");
    /* a lower step (an older report) changes nothing */
    px_progress_step(&p, 10, t);
    CHECK(p.step == 340, "the step only advances");
    /* stalled: 30 s without a step halves the pace over the minute, 61 s makes it 0 */
    double half = px_progress_steps_per_s(&p, t + 30000);
    CHECK(half < pace * 0.6 && half > pace * 0.4, "30 s stalled: pace %.3f (was %.3f)", half, pace);
    CHECK(px_progress_steps_per_s(&p, t + 61000) == 0.0, "a minute stalled: pace 0");
    CHECK(isnan(px_progress_eta_s(&p, 1000, t + 61000)), "a stalled job has no ETA");
    /* resumed at 10 steps a second: the pace follows within the minute */
    t += 61000;
    for (int i = 1; i <= 600; i++) px_progress_step(&p, 340 + i, t + 100 * i);
    t += 60000;
    pace = px_progress_steps_per_s(&p, t);
    CHECK(near(pace, 10.0, 0.5), "resumed pace %.3f steps/s, want 10", pace);
}

static void test_tokens_smoothing(void) {
    px_progress_t p;
    px_progress_init(&p);
    CHECK(isnan(px_progress_tokens_per_s(&p)), "no tokens/s before a figure");
    px_progress_tokens(&p, 100000, 1000);
    CHECK(px_progress_tokens_per_s(&p) == 100000, "the first figure is taken as it is");
    /* a steady job whose per-step figure swings 40k..160k around 100k, a step every 250 ms */
    double lo = 1e18, hi = 0;
    for (int i = 1; i <= 400; i++) {
        px_progress_tokens(&p, i % 2 ? 40000 : 160000, 1000 + 250 * i);
        if (i > 100) {
            lo = fmin(lo, px_progress_tokens_per_s(&p));
            hi = fmax(hi, px_progress_tokens_per_s(&p));
        }
    }
    CHECK(lo > 95000 && hi < 105000, "smoothed within 5%% of 100k: %.0f..%.0f", lo, hi);
    px_progress_tokens(&p, NAN, 200000);
    px_progress_tokens(&p, -5, 200000);
    CHECK(lo <= px_progress_tokens_per_s(&p) && px_progress_tokens_per_s(&p) <= hi, "NaN and negatives ignored");
    /* a real change (to 50k) shows within a minute */
    for (int i = 1; i <= 240; i++) px_progress_tokens(&p, 50000, 101000 + 250 * i);
    CHECK(near(px_progress_tokens_per_s(&p), 50000, 500), "follows a change: %.0f", px_progress_tokens_per_s(&p));
}

static void test_checkpoint(void) {
    px_progress_t p;
    px_progress_init(&p);
    CHECK(p.checkpoint_step == -1, "no checkpoint yet");
    px_progress_checkpoint(&p, 200, 5000);
    px_progress_checkpoint(&p, 100, 6000); /* another group's older save, heard later */
    CHECK(p.checkpoint_step == 200 && p.checkpoint_wall_ms == 5000, "the newest step's checkpoint kept");
    px_progress_checkpoint(&p, 200, 7000); /* the same step saved by another rank */
    CHECK(p.checkpoint_wall_ms == 7000, "the same step again: its latest time");
}

static void test_status_views(void) {
    px_member_t ms[5] = {fixture_member("g0", 0, 2605, 5000), fixture_member("g0", 1, 2605, 5000),
                         fixture_member("g1", 0, 2604, 5000), fixture_member("g1", 1, 2604, 5000),
                         fixture_member("g2", 0, 100, 9000)};
    ms[0].has_train = 1;
    ms[0].train_loss = 2.5f;
    ms[4].state = PX_STATE_LOST; /* a lost member's --steps does not count */
    snprintf(ms[4].lost_reason, sizeof ms[4].lost_reason, "killed");
    static status_fixture_t f;
    status_fixture_init(&f, ms, 5);
    CHECK(f.v.target_step == 5000, "target %lld", (long long)f.v.target_step);
    px_status_view_t v = f.v; /* a copy of the view only: its pointers stay on f */
    px_progress_t *pp = &f.p;
    px_train_metrics_t *tp = &f.train;
    char *json = px_status_json(&v, NULL);
    CHECK(json && strstr(json, "\"progress\":{\"step\":2605,\"target_step\":5000,\"fraction\":0.5210,\"loss\":2.5,"),
          "/status progress: %s", json ? json : "(null)");
    CHECK(json && strstr(json, "\"tokens_per_s\":40960.0"), "/status tokens/s");
    CHECK(json && strstr(json, "\"checkpoint_step\":2600,\"checkpoint_age_s\":42}"), "/status checkpoint age");
    CHECK(json && strstr(json, "\"version\":\"v1.2-3-gabcdef0\""), "/status version");
    CHECK(json && strstr(json, "\"groups\":[{\"name\":\"g0\",\"state\":\"healthy\",\"step\":2605,\"ranks\":2,"
                               "\"heals\":0,\"heal_bytes\":0,\"loss\":2.5},{\"name\":\"g1\""),
          "/status groups by rank 0");
    CHECK(json && strstr(json, "{\"name\":\"g2\",\"state\":\"lost\""), "/status: a lost group shows as lost");
    /* ETA: 2395 steps at 1/s */
    CHECK(json && strstr(json, "\"eta_s\":2395,"), "/status ETA: %s", json ? strstr(json, "eta_s") : "");
    free(json);
    char *text = px_status_text(&v, NULL);
    CHECK(text && strstr(text, "progress: step 2605 of 5000 (52.1%)  loss 2.5000  tokens/s 41.0k  1 steps/s "
                               "(last minute)  ETA 39m55s\n"),
          "/status.txt progress line:\n%s", text ? text : "(null)");
    CHECK(text && strstr(text, "checkpoint: step 2600, saved 42s ago\n"), "/status.txt checkpoint line");
    CHECK(text && strstr(text, "quorum 7 (formed at step 2103)"), "/status.txt names the quorum's first step as such");
    CHECK(text && strstr(text, "version v1.2-3-gabcdef0"), "/status.txt version");
    free(text);
    /* nothing known yet: nulls, and words instead of figures */
    px_progress_init(pp);
    v.target_step = 0;
    tp->has_loss = 0;
    json = px_status_json(&v, NULL);
    CHECK(json && strstr(json, "\"progress\":{\"step\":null,\"target_step\":null,\"fraction\":null,\"loss\":null,"
                               "\"eval_loss\":null,\"tokens_per_s\":null,\"steps_per_s\":null,\"eta_s\":null,"
                               "\"checkpoint_step\":null,\"checkpoint_age_s\":null}"),
          "/status progress unknown: %s", json ? json : "(null)");
    free(json);
    text = px_status_text(&v, NULL);
    CHECK(text && strstr(text, "progress: no step heard yet\ncheckpoint: none saved while this coordinator ran\n"),
          "/status.txt with nothing known:\n%s", text ? text : "(null)");
    free(text);
    /* a target, steps for under a second: too early; then a minute without a step: stalled */
    v.target_step = 5000;
    px_progress_step(pp, 10, 100000);
    px_progress_step(pp, 12, 100500);
    v.now_ms = 100600;
    text = px_status_text(&v, NULL);
    CHECK(text && strstr(text, "progress: step 12 of 5000 (0.2%)  ETA unknown (too early to tell)\n"),
          "/status.txt in the first second:\n%s", text ? text : "(null)");
    free(text);
    v.now_ms = 200000;
    text = px_status_text(&v, NULL);
    CHECK(text && strstr(text, "progress: step 12 of 5000 (0.2%)  0 steps/s (last minute)  ETA unknown (no step in "
                               "the last minute)\n"),
          "/status.txt stalled:\n%s", text ? text : "(null)");
    free(text);
}

int main(void) {
    test_pace_and_eta();
    test_tokens_smoothing();
    test_checkpoint();
    test_status_views();
    if (failed) {
        fprintf(stderr, "%d check(s) failed\n", failed);
        return 1;
    }
    printf("progress: pace, ETA, smoothing, checkpoint, /status and /status.txt as expected\n");
    return 0;
}
