/* A coordinator's status view, as the tests of its renderings build it
 * (test_job_progress.c: /status and /status.txt; test_metrics.c: /metrics):
 * the members a test gives, groups g0 and g1 in quorum 7 (formed at step
 * 2103), the job at step 2605 after two minutes of a step a second, 40,960
 * tokens/s, a checkpoint of step 2600 saved 42 s before, train loss 2.5,
 * job "demo", version v1.2-3-gabcdef0. The view points into the fixture:
 * build it in place, never copy it. */
#ifndef PX_TEST_STATUS_FIXTURE_H
#define PX_TEST_STATUS_FIXTURE_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "job_progress.h"
#include "status.h"

#define FIXTURE_MAX_MEMBERS 8

typedef struct {
    px_member_t ms[FIXTURE_MAX_MEMBERS];
    px_members_t members;
    px_quorum_member_t qg[2];
    px_quorum_t q;
    px_progress_t p;
    px_coord_stats_t stats;
    px_train_metrics_t train;
    px_status_view_t v;
} status_fixture_t;

/* A healthy member of `group` (2 ranks) at `step` of a job of job_steps. */
static inline px_member_t fixture_member(const char *group, int rank, int64_t step, int64_t job_steps) {
    px_member_t m;
    memset(&m, 0, sizeof m);
    snprintf(m.group, sizeof m.group, "%s", group);
    m.rank = rank;
    m.group_size = 2;
    m.step = step;
    m.job_steps = job_steps;
    m.state = PX_STATE_HEALTHY;
    m.train_loss = NAN;
    snprintf(m.host, sizeof m.host, "h");
    return m;
}

static inline void status_fixture_init(status_fixture_t *f, const px_member_t *ms, int n) {
    memset(f, 0, sizeof *f);
    if (n > FIXTURE_MAX_MEMBERS) n = FIXTURE_MAX_MEMBERS;
    memcpy(f->ms, ms, (size_t)n * sizeof *ms);
    f->members.members = f->ms;
    f->members.n = n;
    f->q.groups = f->qg;
    f->q.id = 7;
    f->q.max_step = 2103; /* the quorum formed long ago */
    f->q.n = 2;
    snprintf(f->qg[0].name, sizeof f->qg[0].name, "g0");
    snprintf(f->qg[1].name, sizeof f->qg[1].name, "g1");
    px_progress_init(&f->p);
    for (int i = 0; i <= 120; i++) px_progress_step(&f->p, 2485 + i, 1000 * i); /* 1 step/s */
    px_progress_tokens(&f->p, 40960, 120000);
    px_progress_checkpoint(&f->p, 2600, 1000000);
    f->train.has_loss = 1;
    f->train.loss = 2.5;
    px_status_view_t *v = &f->v;
    v->job = "demo";
    v->mode = "sync";
    v->quorum = &f->q;
    v->members = &f->members;
    v->stats = &f->stats;
    v->train = &f->train;
    v->now_ms = 120000;
    v->uptime_ms = 120000;
    v->wall_ms = 1042000;
    v->version = "v1.2-3-gabcdef0";
    v->progress = &f->p;
    v->target_step = px_status_target_step(&f->members);
}

#endif
