/* phalanx-sim's library against what it must reproduce: Daly's closed form
 * for restart-all with exponential failures (within 2%), the fixed overheads
 * alone when failures are off (every policy), the Llama 3 failure count its
 * default rate was fitted to, wall time fully accounted (progress + every
 * cause = wall), a seed reproducing a run bit for bit, and spares taking
 * lost groups' places. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "px_check.h"
#include "sim.h"

static int failed;

/* Our measured-figure fields, set so that per-rank costs are round numbers. */
static void config(px_sim_config_t *c, px_sim_policy_t policy) {
    px_sim_config_default(c);
    c->policy = policy;
    c->accelerators = 1024, c->gpus_per_group = 8;
    c->state_bytes = 8 * 60e9;                 /* 60 GB per rank */
    c->checkpoint_write_bytes_per_s = 1e9;     /* C = 60 s */
    c->checkpoint_hold_bytes_per_s = 20e9;     /* hold 3 s */
    c->heal_bytes_per_s = 2e9;                 /* heal 30 s */
    c->detect_s = 0.02, c->requorum_s = 0.03;
    c->promotion_s = 0.09;
}

static px_sim_result_t run(const px_sim_config_t *c) {
    px_sim_result_t r;
    char err[256];
    if (px_sim_run(c, &r, err, sizeof err)) {
        CHECK(0, "px_sim_run: %s", err);
        memset(&r, 0, sizeof r);
    }
    return r;
}

static void check_accounted(const px_sim_config_t *c, const px_sim_result_t *r) {
    double sum = r->progress_s;
    for (int i = 0; i < PX_SIM_CAUSES; i++) sum += r->lost_s[i];
    CHECK(fabs(sum - r->wall_s) < 1e-6 * r->wall_s, "%s: progress + lost = %.3f s, wall %.3f s",
          px_sim_policy_name(c->policy), sum, r->wall_s);
}

/* (a) restart-all at the Young/Daly interval against Daly's closed form. */
static void test_daly(double job_mtbf_s, double restart_s) {
    px_sim_config_t c;
    config(&c, PX_SIM_RESTART_ALL);
    c.accel_mtbf_s = job_mtbf_s * (double)c.accelerators;
    c.restart_s = restart_s;
    c.checkpoint_interval_s = 0;
    c.wall_s = 3 * 365 * 86400.0;
    double sum = 0, tau = 0;
    const int seeds = 8;
    for (int s = 1; s <= seeds; s++) {
        c.seed = (uint64_t)s;
        px_sim_result_t r = run(&c);
        check_accounted(&c, &r);
        sum += r.goodput, tau = r.checkpoint_interval_s;
    }
    double sim = sum / seeds, closed = px_sim_daly_goodput(tau, 60, restart_s, job_mtbf_s);
    double young = 1 - 60 / tau - tau / (2 * job_mtbf_s) - restart_s / job_mtbf_s; /* first order */
    printf("daly: MTBF %.0f s R %.0f s tau %.0f s: simulated %.4f, closed form %.4f (first order %.4f)\n",
           job_mtbf_s, restart_s, tau, sim, closed, young);
    CHECK(fabs(tau - sqrt(2 * 60 * job_mtbf_s)) < 1e-9, "tau %.3f is not sqrt(2 C M)", tau);
    CHECK(fabs(sim - closed) / closed < 0.02, "simulated goodput %.4f vs closed form %.4f: off by more than 2%%",
          sim, closed);
}

/* (b) failures off: goodput is 1 minus the checkpoint stall share. */
static void test_no_failures(void) {
    for (int p = 0; p < PX_SIM_POLICIES; p++) {
        px_sim_config_t c;
        config(&c, (px_sim_policy_t)p);
        c.accel_mtbf_s = 0, c.checkpoint_interval_s = 3600;
        px_sim_result_t r = run(&c);
        double cost = p == PX_SIM_RESTART_ALL ? 60 : 3, want = 3600 / (3600 + cost);
        CHECK(fabs(r.goodput - want) < 1e-4, "%s, no failures: goodput %.6f, want %.6f",
              px_sim_policy_name(c.policy), r.goodput, want);
        CHECK(r.failures == 0 && r.whole_restarts == 0, "%s: failures with failures off", px_sim_policy_name(c.policy));
        check_accounted(&c, &r);
    }
}

/* The default rate is Llama 3's: about 419 interruptions in 54 days on 16,384. */
static void test_llama3_rate(void) {
    px_sim_config_t c;
    config(&c, PX_SIM_PHALANX_SYNC);
    c.accelerators = 16384, c.wall_s = 54 * 86400.0;
    double sum = 0;
    for (int s = 1; s <= 10; s++) c.seed = (uint64_t)s, sum += (double)run(&c).failures;
    CHECK(fabs(sum / 10 - 419) < 4 * sqrt(419.0 / 10), "mean failures in 54 days %.1f, want about 419", sum / 10);
}

/* (c) a seed reproduces a run exactly; another seed gives another run. Every
 * policy with failures, node failures and degraded groups, all accounted. */
static void test_seeds(void) {
    for (int p = 0; p < PX_SIM_POLICIES; p++) {
        px_sim_config_t c;
        config(&c, (px_sim_policy_t)p);
        c.accel_mtbf_s = 3600.0 * c.accelerators, c.node_failure_share = 0.3, c.min_replicas = 120;
        c.repair_s = 36000; /* about 10 groups out at a time: below 120 live now and then */
        px_sim_result_t a = run(&c), b = run(&c);
        check_accounted(&c, &a);
        CHECK(!memcmp(&a, &b, sizeof a), "%s: the same seed gave two runs", px_sim_policy_name(c.policy));
        c.seed = 2;
        px_sim_result_t d = run(&c);
        CHECK(d.progress_s != a.progress_s, "%s: seeds 1 and 2 gave the same run", px_sim_policy_name(c.policy));
        CHECK(a.failures > 500 && a.goodput > 0 && a.goodput < 1, "%s: %lld failures, goodput %.4f",
              px_sim_policy_name(c.policy), (long long)a.failures, a.goodput);
        CHECK(p == PX_SIM_RESTART_ALL || a.whole_restarts > 0, "%s: min_replicas 120 of 128 never restarted the job",
              px_sim_policy_name(c.policy));
    }
}

/* Figures missing for a policy that needs them is an error naming them. */
static void test_missing_figures(void) {
    px_sim_config_t c;
    px_sim_config_default(&c);
    px_sim_result_t r;
    char err[256] = "";
    CHECK(px_sim_run(&c, &r, err, sizeof err) == -1 && strstr(err, "is not given"), "missing figures: '%s'", err);
}

/* Spares: with large groups, a spare ready at every loss turns repair_s of
 * a missing group into heal_s of one: the degraded time falls to nothing and
 * goodput rises; every loss answered while spares outnumber losses in
 * repair; each promotion stalls the job for promotion_s (in place of the
 * re-quorum), which phalanx-sync then needs; the restart-all and torchft
 * models have no spares (refused). */
static void test_spares(void) {
    px_sim_config_t c;
    config(&c, PX_SIM_PHALANX_SYNC);
    c.accelerators = 8192, c.gpus_per_group = 1024; /* 8 large groups */
    c.accel_mtbf_s = 8192.0 * 3 * 3600;             /* a failure every 3 h */
    c.repair_s = 1800;
    c.wall_s = 30 * 86400.0;
    px_sim_result_t none = run(&c);
    c.spares = 2;
    px_sim_result_t two = run(&c);
    check_accounted(&c, &two);
    CHECK(none.promotions == 0 && two.promotions > 0 && two.promotions <= two.groups_lost,
          "promotions: %lld without spares, %lld of %lld losses with 2", (long long)none.promotions,
          (long long)two.promotions, (long long)two.groups_lost);
    CHECK(two.promotions >= two.groups_lost * 9 / 10, "2 spares answer (almost) every loss: %lld of %lld",
          (long long)two.promotions, (long long)two.groups_lost);
    CHECK(two.lost_s[PX_SIM_DEGRADED] < none.lost_s[PX_SIM_DEGRADED] / 10,
          "degraded time %.0f s with spares, %.0f s without", two.lost_s[PX_SIM_DEGRADED],
          none.lost_s[PX_SIM_DEGRADED]);
    CHECK(two.goodput > none.goodput, "goodput %.4f with 2 spares, %.4f without", two.goodput, none.goodput);
    /* the same failures (the seed) with promotions 100 s dearer: the
     * detection's share grows by that per promotion (less what the run's
     * end cuts off, and a little shifted work) */
    double slow = 100;
    c.promotion_s += slow;
    px_sim_result_t dear = run(&c);
    check_accounted(&c, &dear);
    double more = dear.lost_s[PX_SIM_DETECT] - two.lost_s[PX_SIM_DETECT], want = (double)two.promotions * slow;
    CHECK(dear.promotions == two.promotions && fabs(more - want) <= 0.01 * want + slow,
          "promotion_s +%.0f s: detection lost %.0f s more over %lld promotions, expected %.0f", slow, more,
          (long long)two.promotions, want);
    printf("spares: %lld of %lld losses answered, degraded %.0f s (without: %.0f s); promotion_s +%.0f s: detection "
           "+%.0f s (%lld x %.0f = %.0f)\n", (long long)two.promotions, (long long)two.groups_lost,
           two.lost_s[PX_SIM_DEGRADED], none.lost_s[PX_SIM_DEGRADED], slow, more, (long long)two.promotions, slow, want);
    char err[256];
    c.promotion_s = NAN;
    CHECK(px_sim_config_check(&c, err, sizeof err) != 0 && strstr(err, "promotion_s"),
          "phalanx-sync with spares and no promotion_s: '%s'", err);
    c.spares = 0;
    CHECK(px_sim_config_check(&c, err, sizeof err) == 0, "phalanx-sync without spares needs no promotion_s: '%s'", err);
    c.spares = 2;
    c.policy = PX_SIM_RESTART_ALL;
    CHECK(px_sim_config_check(&c, err, sizeof err) != 0 && strstr(err, "spares"), "restart-all with spares: %s", err);
    c.policy = PX_SIM_DROP_GROUP_TIMEOUT;
    CHECK(px_sim_config_check(&c, err, sizeof err) != 0, "drop-group-timeout with spares refused");
}

int main(void) {
    test_daly(4 * 3600.0, 600);  /* ~16k GPUs: a failure every 4 h */
    test_daly(1800.0, 600);      /* ~100k GPUs: every 30 min */
    test_daly(1800.0, 60);
    test_no_failures();
    test_llama3_rate();
    test_seeds();
    test_missing_figures();
    test_spares();
    if (failed) fprintf(stderr, "%d check(s) failed\n", failed);
    return failed ? 1 : 0;
}
