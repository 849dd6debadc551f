/* Table tests of small rules peers can reach: the rate limits of events and
 * of log lines (common/px_rate.c) and the freshness of failure-report evidence
 * (px_member_report_fresh in coordinator/membership.c). */
#include <stdio.h>
#include <string.h>

#include "membership.h"
#include "px_rate.h"

#include "../lib/px_check.h"

static int failed;

static void rate_limit_cases(void) {
    px_rate_t r = {.name = "x", .per_s = 3};
    int admitted = 0;
    for (int i = 0; i < 10; i++) admitted += px_rate_hit(&r, 1000 + i); /* one window */
    CHECK(admitted == 3, "3 of 10 frames in one second logged one by one");
    CHECK(px_rate_take(&r, 1500, 0) == 0, "no summary before the window ends");
    CHECK(px_rate_take(&r, 1500, 1) == 7, "a forced summary carries the other 7");
    CHECK(px_rate_take(&r, 1600, 1) == 0, "a summary is taken once");
    admitted = 0;
    for (int i = 0; i < 5; i++) admitted += px_rate_hit(&r, 1600 + i);
    CHECK(admitted == 3, "after a summary the window restarts: 3 admitted");
    CHECK(px_rate_take(&r, 2700, 0) == 2, "window over: its 2 suppressed are summarised");
    CHECK(px_rate_hit(&r, 2701) == 1, "a new window admits again");
    px_rate_t q = {.name = "y", .per_s = 200};
    uint64_t logged = 0, total = 20000, summarised = 0;
    for (uint64_t i = 0; i < total; i++) {
        int64_t now = 10000 + (int64_t)(i * 3200 / total); /* 20,000 frames over 3.2 s */
        summarised += px_rate_take(&q, now, 0);
        logged += (uint64_t)px_rate_hit(&q, now);
    }
    summarised += px_rate_take(&q, 20000, 1);
    CHECK(logged + summarised == total, "every frame is counted once, logged or summarised");
    CHECK(logged <= 4 * 200, "a 3.2 s flood logs at most 200 events a second");
    /* log lines: per_s a second, and a new second admits again with no summary taken */
    px_rate_t l = {.name = "line", .per_s = 2};
    int lines = 0;
    for (int i = 0; i < 10; i++) lines += px_rate_log_ok(&l, 5000 + i);
    CHECK(lines == 2, "2 of 10 log lines in one second written, got %d", lines);
    lines = 0;
    for (int i = 0; i < 10; i++) lines += px_rate_log_ok(&l, 6000 + i);
    CHECK(lines == 2, "the next second writes 2 lines again, got %d", lines);
    lines = 0;
    for (int i = 0; i < 100; i++) lines += px_rate_log_ok(&l, 7000 + i * 40); /* 100 lines over 4 s */
    CHECK(lines == 8, "a 4 s flood writes 2 lines a second, got %d", lines);
}

static void report_freshness_cases(void) {
    px_liveness_config_t cfg = {100, 1000};
    px_member_t m;
    memset(&m, 0, sizeof m);
    CHECK(!px_member_report_fresh(&m, 5000, &cfg, 3), "never reported: no evidence");
    m.reported_ms = 5000;
    m.reported_qid = 3;
    CHECK(px_member_report_fresh(&m, 5000, &cfg, 3), "a report just now about this quorum counts");
    CHECK(px_member_report_fresh(&m, 6000, &cfg, 3), "... for one heartbeat timeout");
    CHECK(!px_member_report_fresh(&m, 6001, &cfg, 3), "... and not after it");
    CHECK(!px_member_report_fresh(&m, 5100, &cfg, 4), "a report about an older quorum does not count");
    /* The reproduction from the review: accused once, paused 400 ms seconds later. */
    m.last_hb_ms = 8000;
    m.reported = px_member_report_fresh(&m, 8400, &cfg, 3);
    CHECK(px_member_loss_reason(&m, 8400, &cfg) == NULL, "a 400 ms pause long after a stale report drops nobody");
    m.reported_ms = 8100;
    m.reported = px_member_report_fresh(&m, 8400, &cfg, 3);
    const char *why = px_member_loss_reason(&m, 8400, &cfg);
    CHECK(why && strcmp(why, "reported_and_silent") == 0, "a fresh report plus silence still drops at once");
}

int main(void) {
    rate_limit_cases();
    report_freshness_cases();
    printf("test_ratelimit: %s\n", failed ? "FAILED" : "all cases passed");
    return failed ? 1 : 0;
}
