/* The dashboard's history (coordinator/history.c): points only for new
 * steps, one sequence for points and events, `since` returning exactly what
 * is newer, the bounds (thinning the older half of the points, the event
 * ring), JSON that parses (null for unknown figures) and the query parser as
 * a table, hostile inputs included. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "history.h"
#include "../lib/px_check.h"

static int failed;

static px_history_point_t point(int64_t step, float loss) {
    px_history_point_t p = {0};
    p.time_ms = 1000 * step;
    p.step = step;
    p.loss = loss;
    p.tokens_per_s = NAN;
    p.step_seconds = 0.5f;
    p.eval_loss = NAN;
    p.groups = 3;
    return p;
}

static char *json_since(const px_history_t *h, uint64_t since) {
    px_buf_t b;
    px_buf_init(&b);
    px_history_json(h, since, &b);
    char *s = px_buf_take(&b, NULL);
    if (!s) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return s;
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

static void test_points_and_events(void) {
    px_history_t *h = px_history_new(100, 10);
    CHECK(px_history_last(h) == NULL, "an empty history has no last point");
    CHECK(isnan(px_history_last_eval(h, NULL)), "an empty history has no eval loss");
    CHECK(px_history_add_point(h, &(px_history_point_t){.step = 1, .loss = 2.0f, .eval_loss = NAN}) == 1, "step 1 added");
    CHECK(px_history_add_point(h, &(px_history_point_t){.step = 1, .loss = 9.0f, .eval_loss = NAN}) == 0,
          "a second report of step 1 is not a point");
    CHECK(px_history_add_point(h, &(px_history_point_t){.step = 0, .loss = 9.0f, .eval_loss = NAN}) == 0,
          "an older step is not a point");
    px_history_add_event(h, 5, 1, "group_dropped", "g1", "rank 0 conn_closed");
    px_history_point_t p = point(3, 1.5f);
    p.eval_loss = 1.75f;
    p.eval_step = 2;
    CHECK(px_history_add_point(h, &p) == 1, "step 3 added");
    CHECK(px_history_seq(h) == 3, "one sequence for points and events: %llu", (unsigned long long)px_history_seq(h));
    CHECK(px_history_last(h)->step == 3 && px_history_last(h)->seq == 3, "the last point is step 3, seq 3");
    int64_t es = 0;
    CHECK(px_history_last_eval(h, &es) == 1.75f && es == 2, "the last eval loss is 1.75 at step 2");

    char *all = json_since(h, 0);
    CHECK(count(all, "\"step\":") == 3, "since 0: 2 points and 1 event: %s", all);
    CHECK(strstr(all, "\"tokens_per_s\":null"), "an unknown figure is null: %s", all);
    CHECK(strstr(all, "\"type\":\"group_dropped\",\"group\":\"g1\""), "the event is there: %s", all);
    free(all);
    char *after2 = json_since(h, 2);
    CHECK(count(after2, "\"seq\":") == 1 && strstr(after2, "\"seq\":3") && strstr(after2, "\"events\":[]"),
          "since 2: only point 3: %s", after2);
    free(after2);
    char *none = json_since(h, 3);
    CHECK(!strcmp(none, "\"points\":[],\"events\":[]"), "since the last seq: nothing: %s", none);
    free(none);
    char *future = json_since(h, 1000);
    CHECK(!strcmp(future, "\"points\":[],\"events\":[]"), "since a future seq: nothing: %s", future);
    free(future);
    px_history_destroy(&h);
    CHECK(h == NULL, "destroy clears the pointer");
}

/* Filling the table thins the older half: the bound holds, steps stay
 * sorted, the newest points are all there, the oldest step is kept. */
static void test_bounded_points(void) {
    const size_t max = 1000;
    px_history_t *h = px_history_new(max, 4);
    for (int64_t s = 1; s <= 100000; s++) {
        px_history_point_t p = point(s, 1.0f);
        px_history_add_point(h, &p);
        if (px_history_points(h) > max) {
            CHECK(0, "%zu points after step %lld: above the bound %zu", px_history_points(h), (long long)s, max);
            break;
        }
    }
    CHECK(px_history_last(h)->step == 100000, "the newest step is kept");
    char *all = json_since(h, 0);
    int64_t prev = 0, first = -1, n = 0;
    for (const char *q = strstr(all, "\"step\":"); q; q = strstr(q + 1, "\"step\":")) {
        int64_t s = atoll(q + 7);
        CHECK(s > prev, "steps ascend: %lld after %lld", (long long)s, (long long)prev);
        if (first < 0) first = s;
        prev = s;
        n++;
    }
    CHECK(first == 1, "the first step survives thinning: %lld", (long long)first);
    CHECK(n >= (int64_t)max / 2, "at least half the table is used: %lld", (long long)n);
    free(all);
    /* The last quarter of the table is consecutive steps. */
    char *recent = json_since(h, px_history_seq(h) - max / 4);
    CHECK(count(recent, "\"step\":") == (int)(max / 4), "the recent points are all there");
    free(recent);
    px_history_destroy(&h);
}

static void test_event_ring(void) {
    px_history_t *h = px_history_new(10, 3);
    char long_detail[1000];
    memset(long_detail, 'x', sizeof long_detail - 1);
    long_detail[sizeof long_detail - 1] = '\0';
    for (int i = 0; i < 7; i++) px_history_add_event(h, i, i, "member_lost", "g\"<b>", long_detail);
    CHECK(px_history_events(h) == 3, "the ring keeps 3: %zu", px_history_events(h));
    char *all = json_since(h, 0);
    CHECK(count(all, "\"seq\":") == 3 && strstr(all, "\"seq\":5") && strstr(all, "\"seq\":7") && !strstr(all, "\"seq\":4"),
          "the last three events, oldest first: %s", all);
    CHECK(strstr(all, "\"group\":\"g\\\"<b>\""), "a group name is escaped: %s", all);
    CHECK(strlen(all) < 3 * (PX_HISTORY_DETAIL_MAX + 200), "long details are cut");
    free(all);
    char *from6 = json_since(h, 5);
    CHECK(count(from6, "\"seq\":") == 2, "since 5 in the ring: 6 and 7: %s", from6);
    free(from6);
    px_history_add_event(h, 8, 8, NULL, NULL, NULL);
    CHECK(px_history_events(h) == 3, "NULL strings are accepted");
    px_history_destroy(&h);
    CHECK(px_history_new(1, 1) == NULL && px_history_new(2, 0) == NULL, "degenerate sizes are refused");
}

static void test_query(void) {
    static const struct {
        const char *query;
        int rc;
        unsigned long long since;
    } rows[] = {
        {NULL, 0, 0},
        {"", 0, 0},
        {"since=0", 0, 0},
        {"since=42", 0, 42},
        {"x=1&since=7&y", 0, 7},
        {"since=18446744073709551615", -1, 0}, /* 20 digits */
        {"since=9999999999999999999", 0, 9999999999999999999ULL},
        {"since=", -1, 0},
        {"since=-1", -1, 0},
        {"since=12abc", -1, 0},
        {"since=1%00", -1, 0},
        {"since= 1", -1, 0},
        {"since=0x10", -1, 0},
        {"sincere=1", 0, 0},
        {"&&&", 0, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        uint64_t since = 99;
        char err[200] = "";
        int rc = px_history_parse_query(rows[i].query, &since, err, sizeof err);
        CHECK(rc == rows[i].rc, "query '%s': rc %d, want %d", rows[i].query ? rows[i].query : "(null)", rc, rows[i].rc);
        if (rc == 0) CHECK(since == rows[i].since, "query '%s': since %llu, want %llu", rows[i].query,
                           (unsigned long long)since, rows[i].since);
        else CHECK(strstr(err, "since"), "query '%s': the error names the parameter: '%s'", rows[i].query, err);
    }
}

int main(void) {
    test_points_and_events();
    test_bounded_points();
    test_event_ring();
    test_query();
    if (failed) {
        fprintf(stderr, "%d check(s) failed\n", failed);
        return 1;
    }
    printf("history: all checks passed\n");
    return 0;
}
