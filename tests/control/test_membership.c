/* Table tests of the loss rule (coordinator/membership.c): which combination
 * of signals drops a member, and that one report alone never does. Also the
 * group aggregation that feeds the quorum rule, and the table's bounds: lost
 * members leave after their grace period, the table refuses members past its
 * limit (evicting the longest-lost first), and both indexes stay consistent
 * while entries move. And the stall limit (px_stall_limit_ms). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "membership.h"
#include "px_time.h"

typedef struct {
    const char *what;
    int reported, conn_closed, self_reported;
    long silent_ms; /* now - last heartbeat */
    const char *want; /* NULL: not lost */
    int draining;     /* its group is being drained (phalanxctl drain) */
} row_t;

static const row_t ROWS[] = {
    {"healthy member", 0, 0, 0, 50, NULL, 0},
    {"one report alone never drops a heartbeating member", 1, 0, 0, 50, NULL, 0},
    {"closed connection alone is not enough", 0, 1, 0, 50, NULL, 0},
    {"silence alone below the timeout is not enough", 0, 0, 0, 400, NULL, 0},
    {"report plus closed connection", 1, 1, 0, 10, "reported_and_disconnected", 0},
    {"report plus silence", 1, 0, 0, 260, "reported_and_silent", 0},
    {"closed connection plus silence", 0, 1, 0, 260, "disconnected_and_silent", 0},
    {"silence just under 2.5 intervals is not silence", 1, 0, 0, 250, NULL, 0},
    {"heartbeat timeout", 0, 0, 0, 1001, "heartbeat_timeout", 0},
    {"exactly the timeout is still alive", 0, 0, 0, 1000, NULL, 0},
    {"self report drops at once", 0, 0, 1, 0, "self_reported", 0},
    {"a drained member's own report is a drain", 0, 0, 1, 0, "drained", 1},
    {"being drained alone does not drop a member", 0, 0, 0, 50, NULL, 1},
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
        m.draining = r->draining;
        m.last_hb_ms = 10000;
        const char *got = px_member_loss_reason(&m, 10000 + r->silent_ms, &cfg);
        int ok = (!got && !r->want) || (got && r->want && strcmp(got, r->want) == 0);
        if (!ok) {
            fprintf(stderr, "FAIL: %s: want %s, got %s\n", r->what, r->want ? r->want : "alive", got ? got : "alive");
            failed++;
        }
    }
    /* A rank its leader reports for, whose leader has not reported since
     * either: its silence is the leader's, not a signal; the timeout holds. */
    px_member_t relayed;
    memset(&relayed, 0, sizeof relayed);
    relayed.state = PX_STATE_HEALTHY;
    relayed.conn_closed = 1;
    relayed.relay_excused = 1;
    relayed.last_hb_ms = 10000;
    if (px_member_loss_reason(&relayed, 10260, &cfg)) {
        fprintf(stderr, "FAIL: a relayed rank whose leader is late was lost for silence\n");
        failed++;
    }
    const char *t = px_member_loss_reason(&relayed, 11001, &cfg);
    if (!t || strcmp(t, "heartbeat_timeout") != 0) {
        fprintf(stderr, "FAIL: an excused relayed rank past the timeout: want heartbeat_timeout, got %s\n", t ? t : "alive");
        failed++;
    }
    relayed.relay_excused = 0;
    t = px_member_loss_reason(&relayed, 10260, &cfg);
    if (!t || strcmp(t, "disconnected_and_silent") != 0) {
        fprintf(stderr, "FAIL: a relayed rank left out by its leader: want disconnected_and_silent, got %s\n", t ? t : "alive");
        failed++;
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
    px_members_rc_t rc;
    px_member_t *m = px_members_upsert(&t, "a", 0, "id-a0", 5, &replaced, &rc);
    m->group_size = 2, m->last_hb_ms = 1000, m->requested = 1, m->requested_ms = 5, m->step = 7;
    m = px_members_upsert(&t, "a", 1, "id-a1", 5, &replaced, &rc);
    m->group_size = 2, m->last_hb_ms = 1000, m->requested = 1, m->requested_ms = 3, m->step = 6;
    m = px_members_upsert(&t, "b", 0, "id-b0", 5, &replaced, &rc);
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
    px_members_upsert(&t, "a", 1, "id-a1-new", 9, &replaced, &rc);
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
    /* a group's drops stay with its rank-0 slot when a new process takes it (/metrics) */
    m = px_members_by_name(&t, "a", 0);
    m->group_drops = 2;
    m = px_members_upsert(&t, "a", 0, "id-a0-new", 9, &replaced, &rc);
    uint32_t kept = m ? m->group_drops : 0; /* read before the next upsert may move entries */
    px_member_t *fresh = px_members_upsert(&t, "c", 0, "id-c0", 5, &replaced, &rc);
    if (kept != 2 || !fresh || fresh->group_drops != 0) {
        fprintf(stderr, "FAIL: a restarted rank 0 keeps its group's drops, a new group starts at 0\n");
        failed++;
    }
    px_members_free(&t);
    return failed;
}

/* Every entry is found by its name and its identity, and nothing else is. */
static int consistent(px_members_t *t) {
    for (int i = 0; i < t->n; i++) {
        px_member_t *m = &t->members[i];
        if (px_members_by_name(t, m->group, m->rank) != m) return 0;
        px_member_t *by_id = px_members_by_ident(t, m->ident, m->ident_len);
        if (!by_id || by_id->ident_len != m->ident_len || memcmp(by_id->ident, m->ident, m->ident_len) != 0) return 0;
    }
    return 1;
}

static px_member_t *add(px_members_t *t, const char *group, int rank, const char *ident) {
    int replaced;
    px_members_rc_t rc;
    return px_members_upsert(t, group, rank, ident, strlen(ident), &replaced, &rc);
}

static int test_expiry(void) {
    int failed = 0;
    px_members_t t;
    px_members_init(&t);
    px_liveness_config_t cfg = {100, 1000};
    int64_t grace = PX_LOST_GRACE_TIMEOUTS * cfg.heartbeat_timeout_ms;
    char g[32], id[32];
    for (int i = 0; i < 100; i++) {
        snprintf(g, sizeof g, "g%d", i), snprintf(id, sizeof id, "id-%d", i);
        add(&t, g, 0, id);
    }
    /* every third member is lost: some at the end of the array, so removal
     * moves lost and live members alike */
    int64_t t0 = px_now_ms();
    for (int i = 0; i < 100; i += 3) px_members_mark_lost(&t, px_members_by_name(&t, (snprintf(g, sizeof g, "g%d", i), g), 0), "test");
    if (px_members_expire(&t, t0, &cfg) != 0 || t.n != 100) {
        fprintf(stderr, "FAIL: a just-lost member stays for its grace period (n=%d)\n", t.n);
        failed++;
    }
    int removed = px_members_expire(&t, px_now_ms() + grace + 1, &cfg);
    if (removed != 34 || t.n != 66 || px_members_live(&t) != 66) {
        fprintf(stderr, "FAIL: lost members leave the table after the grace period (removed %d, n=%d)\n", removed, t.n);
        failed++;
    }
    if (!consistent(&t) || px_members_by_name(&t, "g0", 0) || px_members_by_ident(&t, "id-99", 5) ||
        !px_members_by_name(&t, "g98", 0)) {
        fprintf(stderr, "FAIL: after expiry every remaining member is found by name and identity, the expired are not\n");
        failed++;
    }
    if (t.removed != 34) {
        fprintf(stderr, "FAIL: removals are counted (%llu)\n", (unsigned long long)t.removed);
        failed++;
    }
    /* An identity reused under another name belongs to the newer entry:
     * expiring the older one must not unindex it. */
    add(&t, "old", 0, "shared");
    add(&t, "new", 0, "shared");
    px_members_mark_lost(&t, px_members_by_name(&t, "old", 0), "test");
    px_members_expire(&t, px_now_ms() + grace + 1, &cfg);
    px_member_t *m = px_members_by_ident(&t, "shared", 6);
    if (!m || strcmp(m->group, "new") != 0 || px_members_by_name(&t, "old", 0) || !consistent(&t)) {
        fprintf(stderr, "FAIL: expiring an entry leaves a newer holder of its identity indexed\n");
        failed++;
    }
    px_members_free(&t);
    return failed;
}

static int test_limit(void) {
    int failed = 0;
    px_members_t t;
    px_members_init(&t);
    t.max_members = 3;
    int replaced;
    px_members_rc_t rc;
    add(&t, "a", 0, "ia");
    add(&t, "b", 0, "ib");
    add(&t, "c", 0, "ic");
    px_member_t *m = px_members_upsert(&t, "d", 0, "id", 2, &replaced, &rc);
    if (m || rc != PX_MEMBERS_FULL || t.n != 3 || px_members_by_ident(&t, "id", 2)) {
        fprintf(stderr, "FAIL: a new member past the limit is refused (rc=%d, n=%d)\n", (int)rc, t.n);
        failed++;
    }
    m = px_members_upsert(&t, "b", 0, "ib2", 3, &replaced, &rc);
    if (!m || rc != PX_MEMBERS_OK || !replaced) {
        fprintf(stderr, "FAIL: a known member re-registers on a full table\n");
        failed++;
    }
    px_members_mark_lost(&t, px_members_by_name(&t, "c", 0), "test");
    px_sleep_ms(2);
    px_members_mark_lost(&t, px_members_by_name(&t, "a", 0), "test");
    m = px_members_upsert(&t, "d", 0, "id", 2, &replaced, &rc);
    if (!m || rc != PX_MEMBERS_OK || t.n != 3 || px_members_by_name(&t, "c", 0) || !px_members_by_name(&t, "a", 0) ||
        !consistent(&t) || t.removed != 1) {
        fprintf(stderr, "FAIL: on a full table the longest-lost member makes room (rc=%d, n=%d)\n", (int)rc, t.n);
        failed++;
    }
    m = px_members_upsert(&t, "e", 0, "ie", 2, &replaced, &rc);
    if (!m || px_members_by_name(&t, "a", 0) || t.n != 3 || !consistent(&t)) {
        fprintf(stderr, "FAIL: the next lost member makes room in turn\n");
        failed++;
    }
    m = px_members_upsert(&t, "f", 0, "if", 2, &replaced, &rc);
    if (m || rc != PX_MEMBERS_FULL) {
        fprintf(stderr, "FAIL: a table full of live members refuses\n");
        failed++;
    }
    char big[PX_IDENT_MAX + 1] = {0};
    m = px_members_upsert(&t, "b", 0, big, sizeof big, &replaced, &rc);
    if (m || rc != PX_MEMBERS_BAD_IDENT) {
        fprintf(stderr, "FAIL: an identity longer than %d bytes is refused as such\n", PX_IDENT_MAX);
        failed++;
    }
    px_members_free(&t);
    return failed;
}

/* The stall limit: fixed when given, else the larger of the floor and ten
 * median step times, the old minute while no step time is known. */
static int test_stall_limit(void) {
    static const float fast[] = {0.010f, 0.012f, 0.011f, 0.5f /* an eval step */, 0.009f};
    static const float slow[] = {3.0f, 2.0f, 4.0f, 2.5f};
    static const float junk[] = {NAN};
    static const float huge[] = {1e9f};
    struct {
        const char *what;
        int64_t fixed;
        const float *t;
        int n;
        int64_t want;
    } rows[] = {
        {"given: fixed", 2000, slow, 4, 2000},
        {"no step time yet", 0, NULL, 0, PX_STALL_UNKNOWN_MS},
        {"millisecond steps: the floor", 0, fast, 5, PX_STALL_FLOOR_MS},
        {"seconds-long steps: ten medians (median of 2, 2.5, 3, 4 is 2.75 s)", 0, slow, 4, 27500},
        {"a NaN median: the floor", 0, junk, 1, PX_STALL_FLOOR_MS},
        {"an absurd step time: an hour at most", 0, huge, 1, 3600000},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int64_t got = px_stall_limit_ms(rows[i].fixed, rows[i].t, rows[i].n);
        if (got != rows[i].want) {
            printf("FAIL stall limit: %s: %lld, want %lld\n", rows[i].what, (long long)got, (long long)rows[i].want);
            failed++;
        }
    }
    return failed;
}

int main(void) {
    int failed = test_loss_rule() + test_candidates() + test_expiry() + test_limit() + test_stall_limit();
    printf("test_membership: %d failed\n", failed);
    return failed ? 1 : 0;
}
