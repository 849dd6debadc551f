/* Kafka tests of the event log, against librdkafka's mock cluster
 * (px-kafka-mock) and read back with kcat. One scenario per invocation:
 *
 *   test_events_kafka order-outage   MOCK   exact order; an outage long enough
 *                                           to pass the memory cap and spill;
 *                                           recovery with everything once, in order
 *   test_events_kafka backlog        MOCK   shutdown during an outage keeps the
 *                                           events in the spill file; the next run
 *                                           delivers them first (a torn last line
 *                                           from a crash is cut); one process per job
 *   test_events_kafka delivery-error MOCK   brokers refuse produce requests: the
 *                                           failures are counted and every event
 *                                           still arrives
 *   test_events_kafka crash          MOCK   a coordinator SIGKILLed with events in
 *                                           librdkafka's memory: the next run finds
 *                                           them in the journal and delivers them
 *
 * Every check compares the topic with the emitted sequence event by event, so
 * a reordering, a gap or a duplicate fails the test. */
#include "events_test_util.h"

static const char *kTypes[] = {"member_joined", "quorum_formed", "member_lost",
                               "group_dropped", "step_failed",   "heal_started",
                               "heal_finished", "checkpoint_saved"};

static const char *type_of(uint64_t seq) { return kTypes[(seq - 1) % 8]; }

static void emit_n(px_events_t *ev, uint64_t first_seq, int n, int poll_every) {
    for (int i = 0; i < n; i++) {
        uint64_t seq = first_seq + (uint64_t)i;
        char fields[128];
        snprintf(fields, sizeof fields, "\"group\":\"g%llu\",\"rank\":%d,\"quorum_id\":%llu",
                 (unsigned long long)(seq % 3), i % 4, (unsigned long long)(seq / 10));
        uint64_t got = px_events_emit(ev, type_of(seq), fields);
        REQUIRE(got == seq, "emit returned seq %llu, expected %llu", (unsigned long long)got,
                (unsigned long long)seq);
        if (poll_every && i % poll_every == 0) px_events_poll(ev);
    }
}

static px_events_stats_t stats(px_events_t *ev) {
    px_events_stats_t st;
    px_events_stats(ev, &st);
    fprintf(stderr,
            "stats: produced=%llu delivered=%llu pending=%llu spilled=%llu failures=%llu\n",
            (unsigned long long)st.produced, (unsigned long long)st.delivered,
            (unsigned long long)st.pending, (unsigned long long)st.spilled,
            (unsigned long long)st.delivery_failures);
    return st;
}

/* Keeps the loop turning for ms, as the coordinator would. */
static void run_loop(px_events_t *ev, int ms) {
    int64_t until = px_now_ms() + ms;
    while (px_now_ms() < until) {
        px_events_poll(ev);
        px_sleep_ms(10);
    }
}

static void spill_path_of(px_events_t *ev, char *out, size_t outlen) {
    char d[1024];
    px_events_describe(ev, d, sizeof d);
    const char *p = strstr(d, "spill=");
    REQUIRE(p != NULL, "describe has no spill path: %s", d);
    snprintf(out, outlen, "%s", p + 6);
}

static void order_outage(void) {
    const int cap = 50, n1 = 200, n_down = 300, n_recover = 50;
    mock_start(getenv("PX_MOCK"), "events");
    char spec[1024];
    snprintf(spec, sizeof spec, "kafka:%s/events?max_inflight=%d", g_boot, cap);
    char err[512];
    px_events_t *ev = px_events_new(spec, "job-order", g_tmpdir, err, sizeof err);
    REQUIRE(ev != NULL, "px_events_new: %s", err);
    char run[20];
    snprintf(run, sizeof run, "%s", px_events_run_id(ev));

    /* 1. brokers up: exact sequence */
    emit_n(ev, 1, n1, 10);
    REQUIRE(px_events_flush(ev, 20000) == 0, "not delivered within 20 s");
    px_events_stats_t st = stats(ev);
    CHECK(st.produced == (uint64_t)n1 && st.delivered == (uint64_t)n1 && st.pending == 0 &&
              st.spilled == 0 && st.delivery_failures == 0,
          "stats after the first batch");
    event_list_t got;
    kcat_read("events", &got);
    expect_exact(&got, "job-order", &(expect_run_t){run, (uint64_t)n1}, 1, type_of);
    free(got.ev);

    /* 2. outage: events keep coming; past the cap they spill */
    mock_cmd("down");
    for (int tick = 0; tick < 20; tick++) { /* 15 events per 50 ms, like a busy coordinator */
        emit_n(ev, (uint64_t)(n1 + tick * 15 + 1), 15, 0);
        run_loop(ev, 50);
    }
    st = stats(ev);
    CHECK(st.produced == (uint64_t)(n1 + n_down), "produced during the outage");
    CHECK(st.delivered == (uint64_t)n1, "nothing can be delivered while the brokers are down");
    CHECK(st.pending == (uint64_t)n_down, "pending must show the whole backlog");
    CHECK(st.spilled == (uint64_t)(n_down - cap), "all but the in-memory cap must be spilled");
    char spill[1024];
    spill_path_of(ev, spill, sizeof spill);
    px_events_poll(ev);
    run_loop(ev, 150); /* one spill fsync batch */
    /* The file is also the journal: it ends with every undelivered event, in order. */
    event_list_t file;
    read_jsonl(spill, &file);
    CHECK(file.n >= (size_t)n_down, "spill file %s has %zu lines, expected at least %d", spill,
          file.n, n_down);
    for (int i = 0; i < n_down && file.n >= (size_t)n_down; i++) {
        const test_event_t *e = &file.ev[file.n - (size_t)n_down + (size_t)i];
        if (e->seq != (uint64_t)(n1 + i + 1)) {
            CHECK(0, "spill file line %zu has seq %llu, expected %d",
                  file.n - (size_t)n_down + (size_t)i, (unsigned long long)e->seq, n1 + i + 1);
            break;
        }
    }
    free(file.ev);

    /* 3. recovery while events still happen */
    mock_cmd("up");
    for (int tick = 0; tick < 10; tick++) {
        emit_n(ev, (uint64_t)(n1 + n_down + tick * 5 + 1), 5, 0);
        run_loop(ev, 20);
    }
    REQUIRE(px_events_flush(ev, 30000) == 0, "backlog not delivered within 30 s of recovery");
    const int total = n1 + n_down + n_recover;
    st = stats(ev);
    CHECK(st.produced == (uint64_t)total && st.delivered == (uint64_t)total && st.pending == 0 &&
              st.spilled == 0 && st.delivery_failures == 0,
          "stats after recovery");
    kcat_read("events", &got);
    expect_exact(&got, "job-order", &(expect_run_t){run, (uint64_t)total}, 1, type_of);
    free(got.ev);
    px_events_destroy(&ev, 5000);
    CHECK(ev == NULL, "destroy clears the pointer");
    CHECK(count_lines_in(spill) == 0, "the spill file is emptied once everything is delivered");
}

static void backlog(void) {
    const int cap = 20, n_first = 100, n_second = 10;
    mock_start(getenv("PX_MOCK"), "backlog");
    char spec[1024], err[512];
    snprintf(spec, sizeof spec, "kafka:%s/backlog?max_inflight=%d", g_boot, cap);

    /* Run 1 lives entirely inside an outage and shuts down with everything undelivered. */
    mock_cmd("down");
    px_events_t *ev = px_events_new(spec, "job-backlog", g_tmpdir, err, sizeof err);
    REQUIRE(ev != NULL, "px_events_new: %s", err);
    char run1[20];
    snprintf(run1, sizeof run1, "%s", px_events_run_id(ev));
    emit_n(ev, 1, n_first, 10);
    run_loop(ev, 300);
    px_events_stats_t st = stats(ev);
    CHECK(st.pending == (uint64_t)n_first && st.spilled == (uint64_t)(n_first - cap),
          "run 1 backlog");
    char spill[1024];
    spill_path_of(ev, spill, sizeof spill);
    px_events_destroy(&ev, 300);
    CHECK(count_lines_in(spill) == n_first,
          "after shutdown the spill file holds every undelivered event: %ld lines, expected %d",
          count_lines_in(spill), n_first);
    /* The in-memory events went back in front of the spilled ones: check the file order. */
    FILE *f = fopen(spill, "r");
    REQUIRE(f != NULL, "open %s", spill);
    char line[4096];
    uint64_t want = 1;
    while (fgets(line, sizeof line, f)) {
        test_event_t e;
        REQUIRE(parse_event(line, &e) == 0, "bad spill line %s", line);
        REQUIRE(e.seq == want, "spill line %llu has seq %llu", (unsigned long long)want,
                (unsigned long long)e.seq);
        want++;
    }
    fclose(f);
    /* A crash in the middle of a write leaves a torn last line; it must be cut, not sent. */
    f = fopen(spill, "a");
    fputs("{\"v\":1,\"type\":\"torn", f);
    fclose(f);

    /* Run 2: brokers are back; the backlog goes first, then run 2's own events. */
    mock_cmd("up");
    ev = px_events_new(spec, "job-backlog", g_tmpdir, err, sizeof err);
    REQUIRE(ev != NULL, "px_events_new (run 2): %s", err);
    char run2[20];
    snprintf(run2, sizeof run2, "%s", px_events_run_id(ev));
    CHECK(strcmp(run1, run2) != 0, "each run gets its own id");
    px_events_t *twin = px_events_new(spec, "job-backlog", g_tmpdir, err, sizeof err);
    CHECK(twin == NULL && strstr(err, "in use"), "a second process for the same job and spill "
                                                 "directory must be refused: %s", err);
    st = stats(ev);
    CHECK(st.pending == (uint64_t)n_first && st.spilled == (uint64_t)n_first,
          "the backlog is visible at start-up");
    emit_n(ev, 1, n_second, 0);
    REQUIRE(px_events_flush(ev, 30000) == 0, "backlog not delivered within 30 s");
    st = stats(ev);
    CHECK(st.delivered == (uint64_t)(n_first + n_second) && st.produced == (uint64_t)n_second &&
              st.delivery_failures == 0,
          "delivered counts the backlog too");
    event_list_t got;
    kcat_read("backlog", &got);
    expect_run_t runs[2] = {{run1, (uint64_t)n_first}, {run2, (uint64_t)n_second}};
    expect_exact(&got, "job-backlog", runs, 2, type_of);
    free(got.ev);
    px_events_destroy(&ev, 5000);
    CHECK(count_lines_in(spill) == 0, "spill file emptied after delivery");
}

/* One refusal by the brokers, with events still coming while the producer resets. */
static void refuse_once(px_events_t *ev, const char *error, uint64_t first_seq) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "fail 1 %s", error);
    px_events_stats_t before = stats(ev);
    mock_cmd(cmd);
    emit_n(ev, first_seq, 30, 5);
    run_loop(ev, 300);                   /* the refusal arrives and the producer resets... */
    emit_n(ev, first_seq + 30, 10, 5);   /* ...and events keep coming while it waits */
    REQUIRE(px_events_flush(ev, 30000) == 0, "events not delivered within 30 s after %s", error);
    px_events_stats_t st = stats(ev);
    CHECK(st.delivery_failures > before.delivery_failures, "%s must be counted", error);
    CHECK(st.pending == 0 && st.spilled == 0, "nothing left behind after %s", error);
}

static void delivery_error(void) {
    mock_start(getenv("PX_MOCK"), "errors");
    char spec[1024], err[512];
    snprintf(spec, sizeof spec, "kafka:%s/errors", g_boot);
    px_events_t *ev = px_events_new(spec, "job-errors", g_tmpdir, err, sizeof err);
    REQUIRE(ev != NULL, "px_events_new: %s", err);
    char run[20];
    snprintf(run, sizeof run, "%s", px_events_run_id(ev));
    emit_n(ev, 1, 20, 5);
    REQUIRE(px_events_flush(ev, 20000) == 0, "first batch not delivered");
    /* A permanent refusal: the producer purges and requeues from the spill file. */
    refuse_once(ev, "POLICY_VIOLATION", 21);
    /* A fatal idempotence error: the producer must be recreated. */
    refuse_once(ev, "OUT_OF_ORDER_SEQUENCE_NUMBER", 61);
    const uint64_t total = 100;

    /* Every event arrives; after a refusal, events that were in flight at that
     * moment may arrive twice (documented), but none may be missing, and the
     * first arrival of each must be in emit order. */
    event_list_t got;
    kcat_read("errors", &got);
    uint64_t next = 1;
    size_t dups = 0;
    for (size_t i = 0; i < got.n; i++) {
        const test_event_t *e = &got.ev[i];
        CHECK(!strcmp(e->run, run) && !strcmp(e->key, "job-errors"), "message %zu run/key", i);
        if (e->seq == next) {
            next++;
        } else if (e->seq < next) {
            dups++;
        } else {
            CHECK(0, "message %zu: seq %llu arrived before %llu", i, (unsigned long long)e->seq,
                  (unsigned long long)next);
            break;
        }
    }
    CHECK(next == total + 1, "events 1..%llu must all arrive; first missing is %llu",
          (unsigned long long)total, (unsigned long long)next);
    px_events_stats_t st = stats(ev);
    fprintf(stderr, "delivery-error: %zu messages, %zu duplicates, %llu failures counted\n",
            got.n, dups, (unsigned long long)st.delivery_failures);
    free(got.ev);
    px_events_destroy(&ev, 5000);
}

/* A coordinator process that emits `before` events, lets the loop turn (a
 * journal fsync), flushes to Kafka when asked, emits `after` more and is
 * SIGKILLed right away. Returns its run id through *run. */
static void crashing_run(const char *spec, const char *job, int before, int flush, int after,
                         char run[20]) {
    int fds[2];
    REQUIRE(pipe(fds) == 0, "pipe");
    pid_t parent = getpid();
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        px_child_die_with_parent(parent);
        close(fds[0]);
        char err[512];
        px_events_t *ev = px_events_new(spec, job, g_tmpdir, err, sizeof err);
        if (!ev) {
            fprintf(stderr, "child: %s\n", err);
            _exit(3);
        }
        if (write(fds[1], px_events_run_id(ev), 16) != 16) _exit(4);
        emit_n(ev, 1, before, 10);
        run_loop(ev, 200);
        if (flush && px_events_flush(ev, 20000) != 0) _exit(5);
        emit_n(ev, (uint64_t)before + 1, after, 0);
        kill(getpid(), SIGKILL); /* no destroy, no flush: a crash */
        _exit(6);
    }
    close(fds[1]);
    memset(run, 0, 20);
    REQUIRE(read(fds[0], run, 16) == 16, "child did not start");
    close(fds[0]);
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
    REQUIRE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
            "the child must die by SIGKILL (status %d)", status);
}

static void crash(void) {
    mock_start(getenv("PX_MOCK"), "crash");
    char spec[1024], err[512];
    snprintf(spec, sizeof spec, "kafka:%s/crash?max_inflight=1000", g_boot);

    /* 1. A coordinator killed during an outage, all its events in librdkafka's
     * memory (none spilled: the cap is large): the journal still has them. */
    mock_cmd("down");
    char run1[20];
    crashing_run(spec, "job-crash", 50, 0, 5, run1);
    mock_cmd("up");
    px_events_t *ev = px_events_new(spec, "job-crash", g_tmpdir, err, sizeof err);
    REQUIRE(ev != NULL, "px_events_new after the crash: %s", err);
    char run2[20];
    snprintf(run2, sizeof run2, "%s", px_events_run_id(ev));
    emit_n(ev, 1, 5, 0);
    REQUIRE(px_events_flush(ev, 30000) == 0, "not delivered within 30 s");
    px_events_stats_t st = stats(ev);
    CHECK(st.delivered == 60 && st.delivery_failures == 0, "55 recovered + 5 new");
    px_events_destroy(&ev, 5000);
    event_list_t got;
    kcat_read("crash", &got);
    expect_run_t runs[2] = {{run1, 55}, {run2, 5}};
    expect_exact(&got, "job-crash", runs, 2, type_of);
    free(got.ev);

    /* 2. A coordinator killed while Kafka is up and events are flowing: the
     * events in flight or just delivered may be sent again by the next run
     * (at-least-once, documented), but none is missing and the first arrival
     * of each is in order. */
    char run3[20];
    crashing_run(spec, "job-crash", 30, 1, 20, run3);
    ev = px_events_new(spec, "job-crash", g_tmpdir, err, sizeof err);
    REQUIRE(ev != NULL, "px_events_new after the second crash: %s", err);
    REQUIRE(px_events_flush(ev, 30000) == 0, "not delivered within 30 s");
    px_events_destroy(&ev, 5000);
    kcat_read("crash", &got);
    uint64_t next = 1;
    size_t dups = 0;
    for (size_t i = 60; i < got.n; i++) {
        const test_event_t *e = &got.ev[i];
        REQUIRE(!strcmp(e->run, run3), "message %zu is from run %s, expected %s", i, e->run, run3);
        if (e->seq == next)
            next++;
        else if (e->seq < next)
            dups++;
        else
            REQUIRE(0, "message %zu: seq %llu arrived before %llu", i, (unsigned long long)e->seq,
                    (unsigned long long)next);
    }
    CHECK(next == 51, "events 1..50 of the killed run must all arrive; first missing %llu",
          (unsigned long long)next);
    fprintf(stderr, "crash while flowing: %zu duplicates after the restart\n", dups);
    free(got.ev);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s order-outage|backlog|delivery-error|crash PATH/px-kafka-mock\n",
                argv[0]);
        return 2;
    }
    setenv("PX_MOCK", argv[2], 1);
    signal(SIGPIPE, SIG_IGN);
    make_tmpdir("px-events-kafka");
    if (!strcmp(argv[1], "order-outage"))
        order_outage();
    else if (!strcmp(argv[1], "backlog"))
        backlog();
    else if (!strcmp(argv[1], "delivery-error"))
        delivery_error();
    else if (!strcmp(argv[1], "crash"))
        crash();
    else
        REQUIRE(0, "unknown scenario %s", argv[1]);
    finish(0);
}
