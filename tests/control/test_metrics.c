/* /metrics as coordinator/metrics.c renders it from a status view: every
 * sample carries the job label and belongs to a family with HELP and TYPE;
 * the job's progress, checkpoint and build; groups counted by state and
 * listed one series each, up to --metrics-groups and not past it; figures
 * not known yet absent; label values escaped. (tests/control/
 * test_metrics_rules.py runs promtool on a live coordinator's page.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job_progress.h"
#include "status.h"
#include "status_fixture.h"
#include "../lib/px_check.h"

static int failed;

static int has_line(const char *text, const char *line) {
    size_t n = strlen(line);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, line, n) == 0 && (p[n] == '\n' || p[n] == '\0')) return 1;
    return 0;
}

static int has_prefix(const char *text, const char *prefix) {
    size_t n = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, prefix, n) == 0) return 1;
    return 0;
}

/* Each sample line: NAME{job="<job>"... VALUE, and its family (NAME less a
 * histogram's _bucket, _sum or _count) announced by # HELP and # TYPE. */
static void check_every_sample(const char *text, const char *job_label) {
    int samples = 0;
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (*p == '#' || *p == '\n') continue;
        const char *brace = strchr(p, '{'), *eol = strchr(p, '\n');
        if (!eol) eol = p + strlen(p);
        CHECK(brace && brace < eol && strncmp(brace + 1, job_label, strlen(job_label)) == 0,
              "sample without %s first: %.*s", job_label, (int)(eol - p), p);
        if (!brace || brace > eol) continue;
        samples++;
        char fam[128];
        snprintf(fam, sizeof fam, "%.*s", (int)(brace - p), p);
        char help[160], type[160];
        snprintf(help, sizeof help, "# HELP %s ", fam);
        snprintf(type, sizeof type, "# TYPE %s ", fam);
        if (!has_prefix(text, type)) { /* a histogram's sample */
            static const char *const SUFFIX[] = {"_bucket", "_sum", "_count"};
            for (int s = 0; s < 3; s++) {
                size_t k = strlen(SUFFIX[s]), n = strlen(fam);
                if (n > k && strcmp(fam + n - k, SUFFIX[s]) == 0) fam[n - k] = '\0';
            }
            snprintf(help, sizeof help, "# HELP %s ", fam);
            snprintf(type, sizeof type, "# TYPE %s histogram", fam);
        }
        CHECK(has_prefix(text, help) && has_prefix(text, type), "no HELP or TYPE for the sample %.*s", (int)(eol - p),
              p);
    }
    CHECK(samples > 50, "only %d samples", samples);
}

static void test_metrics(void) {
    px_member_t ms[6] = {fixture_member("g0", 0, 2605, 5000), fixture_member("g0", 1, 2605, 5000),
                         fixture_member("g1", 0, 2604, 5000), fixture_member("g1", 1, 2604, 5000),
                         fixture_member("g2", 0, 100, 5000), fixture_member("g3", 0, 2600, 5000)};
    ms[2].group_drops = 3;
    ms[4].state = PX_STATE_LOST;
    snprintf(ms[4].lost_reason, sizeof ms[4].lost_reason, "killed");
    ms[5].group_size = 1; /* not in the quorum: joining */
    static status_fixture_t f;
    status_fixture_init(&f, ms, 6);
    static const double bounds[] = {0.1, 1, 10};
    f.stats.heartbeats = 1234;
    f.stats.failures = 2;
    px_train_metrics_t *tm = &f.train;
    px_histo_init(&tm->step_seconds, bounds, 3);
    px_histo_init(&tm->recovery_seconds, bounds, 3);
    px_histo_init(&tm->heal_seconds, bounds, 3);
    px_histo_observe(&tm->step_seconds, 0.5);
    px_histo_observe(&tm->step_seconds, 20);
    px_status_view_t v = f.v;
    v.metrics_groups = 1000;

    char *text = px_status_metrics(&v, NULL);
    CHECK(text != NULL, "no page");
    if (!text) return;
    check_every_sample(text, "job=\"demo\"");
    static const char *const WANT[] = {
        "phalanx_build_info{job=\"demo\",version=\"v1.2-3-gabcdef0\"} 1",
        "phalanx_job_step{job=\"demo\"} 2605",
        "phalanx_job_target_steps{job=\"demo\"} 5000",
        "phalanx_job_finished{job=\"demo\"} 0",
        "phalanx_job_eta_seconds{job=\"demo\"} 2395",
        "phalanx_smoothed_tokens_per_second{job=\"demo\"} 40960.0",
        "phalanx_last_checkpoint_step{job=\"demo\"} 2600",
        "phalanx_last_checkpoint_age_seconds{job=\"demo\"} 42",
        /* the names from before the job label, with it */
        "phalanx_heartbeats_total{job=\"demo\"} 1234",
        "phalanx_members{job=\"demo\",state=\"healthy\"} 4",
        "phalanx_members{job=\"demo\",state=\"joining\"} 1",
        "phalanx_quorum_id{job=\"demo\"} 7",
        "phalanx_limit_refusals_total{job=\"demo\",limit=\"store_keys\"} 0",
        "phalanx_failures_total{job=\"demo\"} 2",
        "phalanx_failures_per_hour{job=\"demo\"} 0.00",
        "phalanx_train_loss{job=\"demo\"} 2.5",
        "phalanx_step_seconds_bucket{job=\"demo\",le=\"1\"} 1",
        "phalanx_step_seconds_bucket{job=\"demo\",le=\"+Inf\"} 2",
        "phalanx_step_seconds_count{job=\"demo\"} 2",
        /* groups */
        "phalanx_groups{job=\"demo\",state=\"healthy\"} 2",
        "phalanx_groups{job=\"demo\",state=\"joining\"} 1",
        "phalanx_groups{job=\"demo\",state=\"lost\"} 1",
        "phalanx_groups{job=\"demo\",state=\"left\"} 0",
        "phalanx_metrics_groups_omitted{job=\"demo\"} 0",
        "phalanx_group_step{job=\"demo\",group=\"g0\"} 2605",
        "phalanx_group_step{job=\"demo\",group=\"g2\"} 100",
        "phalanx_group_state{job=\"demo\",group=\"g1\",state=\"healthy\"} 1",
        "phalanx_group_state{job=\"demo\",group=\"g2\",state=\"lost\"} 1",
        "phalanx_group_state{job=\"demo\",group=\"g3\",state=\"joining\"} 1",
        "phalanx_group_drops_total{job=\"demo\",group=\"g1\"} 3",
        "phalanx_group_drops_total{job=\"demo\",group=\"g0\"} 0",
    };
    for (size_t i = 0; i < sizeof WANT / sizeof WANT[0]; i++) CHECK(has_line(text, WANT[i]), "no line %s", WANT[i]);
    CHECK(!has_prefix(text, "phalanx_group_step{job=\"demo\",group=\"g0\",rank"), "a group is its rank 0 only");
    CHECK(!has_prefix(text, "phalanx_eval_loss"), "no eval loss before one is known");
    free(text);

    /* more groups than --metrics-groups: none listed, all counted */
    v.metrics_groups = 3;
    text = px_status_metrics(&v, NULL);
    CHECK(text && !has_prefix(text, "phalanx_group_step{") && !has_prefix(text, "phalanx_group_state{") &&
              !has_prefix(text, "phalanx_group_drops_total{") && !has_prefix(text, "# HELP phalanx_group_step "),
          "4 groups, --metrics-groups 3: no group listed");
    CHECK(text && has_line(text, "phalanx_metrics_groups_omitted{job=\"demo\"} 4") &&
              has_line(text, "phalanx_groups{job=\"demo\",state=\"healthy\"} 2"),
          "4 groups, --metrics-groups 3: omitted 4, still counted");
    free(text);

    /* nothing known yet: absent, not 0; a finished job says so */
    px_progress_init(&f.p);
    v.target_step = 0;
    v.job_finished = 1;
    f.train.has_loss = 0;
    text = px_status_metrics(&v, NULL);
    static const char *const ABSENT[] = {"phalanx_job_step{", "phalanx_job_target_steps{", "phalanx_job_eta_seconds{",
                                         "phalanx_smoothed_tokens_per_second{", "phalanx_last_checkpoint_step{",
                                         "phalanx_last_checkpoint_age_seconds{", "phalanx_train_loss{",
                                         "# HELP phalanx_last_checkpoint_age_seconds "};
    for (size_t i = 0; text && i < sizeof ABSENT / sizeof ABSENT[0]; i++)
        CHECK(!has_prefix(text, ABSENT[i]), "%s... present while unknown", ABSENT[i]);
    CHECK(text && has_line(text, "phalanx_job_finished{job=\"demo\"} 1"), "finished: 1");
    free(text);

    /* label values escaped: backslash, double quote, newline */
    v.job = "a\"b\\c";
    v.version = "x\ny";
    text = px_status_metrics(&v, NULL);
    CHECK(text && has_line(text, "phalanx_build_info{job=\"a\\\"b\\\\c\",version=\"x\\ny\"} 1"),
          "escaped labels:\n%.200s", text ? text : "(null)");
    if (text) check_every_sample(text, "job=\"a\\\"b\\\\c\"");
    free(text);
}

int main(void) {
    test_metrics();
    if (failed) {
        fprintf(stderr, "%d check(s) failed\n", failed);
        return 1;
    }
    printf("metrics: job label on every sample, progress, checkpoint, groups, the group cap, escaping as expected\n");
    return 0;
}
