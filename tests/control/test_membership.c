/* Table tests of the loss rule (coordinator/membership.c): which combination
 * of signals drops a member, and that one report alone never does. Also the
 * group aggregation that feeds the quorum rule. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "membership.h"

typedef struct {
    const char *what;
    int reported, conn_closed, self_reported;
    long silent_ms; /* now - last heartbeat */
    const char *want; /* NULL: not lost */
} row_t;

static const row_t ROWS[] = {
    {"healthy member", 0, 0, 0, 50, NULL},
    {"one report alone never drops a heartbeating member", 1, 0, 0, 50, NULL},
    {"closed connection alone is not enough", 0, 1, 0, 50, NULL},
    {"silence alone below the timeout is not enough", 0, 0, 0, 400, NULL},
    {"report plus closed connection", 1, 1, 0, 10, "reported_and_disconnected"},
    {"report plus silence", 1, 0, 0, 260, "reported_and_silent"},
    {"closed connection plus silence", 0, 1, 0, 260, "disconnected_and_silent"},
    {"silence just under 2.5 intervals is not silence", 1, 0, 0, 250, NULL},
    {"heartbeat timeout", 0, 0, 0, 1001, "heartbeat_timeout"},
    {"exactly the timeout is still alive", 0, 0, 0, 1000, NULL},
    {"self report drops at once", 0, 0, 1, 0, "self_reported"},
};

static int test_loss_rule(void) {
    px_liveness_config_t cfg = {100, 1000};
    int failed = 0;
    for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) {
        const row_t *r = &ROWS[i];
        px_member_t m;
        memset(&m, 0, sizeof m);
        m.state = PX_STATE_HEALTHY;
        m.reported = r->reported;
        m.conn_closed = r->conn_closed;
        m.self_reported = r->self_reported;
        m.last_hb_ms = 10000;
        const char *got = px_member_loss_reason(&m, 10000 + r->silent_ms, &cfg);
        int ok = (!got && !r->want) || (got && r->want && strcmp(got, r->want) == 0);
        if (!ok) {
            fprintf(stderr, "FAIL: %s: want %s, got %s\n", r->what, r->want ? r->want : "alive", got ? got : "alive");
            failed++;
        }
    }
    px_member_t lost = {.state = PX_STATE_LOST, .self_reported = 1};
    if (px_member_loss_reason(&lost, 0, &cfg)) {
        fprintf(stderr, "FAIL: a lost member is not lost again\n");
        failed++;
    }
    return failed;
}

static int test_candidates(void) {
    px_members_t t;
    px_members_init(&t);
    int replaced, failed = 0;
    /* group a: 2 ranks, both heartbeating and requesting; group b: rank 1 missing */
    px_member_t *m = px_members_upsert(&t, "a", 0, "id-a0", 5, &replaced);
    m->group_size = 2, m->last_hb_ms = 1000, m->requested = 1, m->requested_ms = 5, m->step = 7;
    m = px_members_upsert(&t, "a", 1, "id-a1", 5, &replaced);
    m->group_size = 2, m->last_hb_ms = 1000, m->requested = 1, m->requested_ms = 3, m->step = 6;
    m = px_members_upsert(&t, "b", 0, "id-b0", 5, &replaced);
    m->group_size = 2, m->last_hb_ms = 1000, m->requested = 1;
    px_liveness_config_t cfg = {100, 1000};
    px_quorum_candidate_t *c = NULL;
    int n = px_members_candidates(&t, 1500, &cfg, &c);
    if (n != 2 || strcmp(c[0].name, "a") || !c[0].healthy || !c[0].requested || c[0].step != 6 ||
        c[0].requested_ms != 3 || c[1].healthy) {
        fprintf(stderr, "FAIL: candidates aggregate ranks into groups (n=%d)\n", n);
        failed++;
    }
    free(c);
    /* replacing a live member reports it */
    px_members_upsert(&t, "a", 1, "id-a1-new", 9, &replaced);
    if (!replaced || px_members_by_ident(&t, "id-a1", 5) || !px_members_by_ident(&t, "id-a1-new", 9)) {
        fprintf(stderr, "FAIL: upsert replaces the identity of a restarted rank\n");
        failed++;
    }
    /* a stale heartbeat makes the group unhealthy */
    n = px_members_candidates(&t, 2500, &cfg, &c);
    if (n < 1 || c[0].healthy) {
        fprintf(stderr, "FAIL: a group with a silent rank is not healthy\n");
        failed++;
    }
    free(c);
    px_members_free(&t);
    return failed;
}

int main(void) {
    int failed = test_loss_rule() + test_candidates();
    printf("test_membership: %d failed\n", failed);
    return failed ? 1 : 0;
}
