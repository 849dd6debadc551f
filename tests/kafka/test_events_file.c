/* Event-log tests that need no broker:
 *
 *   test_events_file json   px_json_escape and px_json_members_valid, as tables
 *   test_events_file spec   every malformed --events spec is refused with a
 *                           message naming the bad part; good ones are accepted;
 *                           the parser alone (px_events_spec_parse) yields the parts
 *   test_events_file file   the JSONL sink: one valid JSON object per line, the
 *                           envelope, seq 1..N in order, bad or huge fields kept
 *                           without breaking the line, fsync in batches (on
 *                           the event log's sync thread, at most one per
 *                           batch, lines written meanwhile covered by the
 *                           next: group commit) and on destroy
 *
 * How fsync is observed: this program defines write(), fsync() and fdatasync()
 * itself. The event library is linked statically into it, so its calls land
 * here (the fsyncs from the sync thread); each forwards to the kernel and
 * records, for the event file only, whether bytes were written since the last
 * sync. No LD_PRELOAD, no strace. */
#include <sys/stat.h>
#include <sys/syscall.h>

#include "events_test_util.h"

/* ---- write/fsync interposition ---- */

static ino_t g_watch_ino;
static dev_t g_watch_dev;
static _Atomic int g_unsynced_writes; /* writes to the watched file since its last sync began */
static _Atomic int g_syncs;

static int watched(int fd) {
    struct stat st;
    return g_watch_ino && fstat(fd, &st) == 0 && st.st_ino == g_watch_ino &&
           st.st_dev == g_watch_dev;
}

ssize_t write(int fd, const void *buf, size_t n) {
    ssize_t r = syscall(SYS_write, fd, buf, n);
    if (r > 0 && watched(fd)) g_unsynced_writes++;
    return r;
}

/* Writes that happen while a sync runs (the loop keeps writing) are not
 * covered by it: only those before it began are cleared. */
static int synced(int fd, long nr) {
    int before = watched(fd) ? g_unsynced_writes : 0;
    int r = (int)syscall(nr, fd);
    if (r == 0 && watched(fd)) {
        g_unsynced_writes -= before;
        g_syncs++;
    }
    return r;
}

int fsync(int fd) { return synced(fd, SYS_fsync); }

int fdatasync(int fd) { return synced(fd, SYS_fdatasync); }

/* ---- json ---- */

static void test_json(void) {
    struct {
        const char *in;
        size_t outlen;
        const char *want;
    } esc[] = {
        {"plain", 64, "plain"},
        {"q\"b\\s/", 64, "q\\\"b\\\\s/"},
        {"\n\r\t\b\f", 64, "\\n\\r\\t\\b\\f"},
        {"\x01\x1f", 64, "\\u0001\\u001f"},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 64, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
        {"bad\xff", 64, "bad\\ufffd"},
        {"trunc\xc3", 64, "trunc\\ufffd"},
        {"\xed\xa0\x80", 64, "\\ufffd\\ufffd\\ufffd"}, /* a UTF-16 surrogate is not UTF-8 */
        {"\xc0\xaf", 64, "\\ufffd\\ufffd"},            /* overlong */
        {"abcdef", 4, "abc"},                          /* cut to fit */
        {"ab\"cd", 4, "ab"},                           /* never half an escape */
        {"a\xc3\xa9", 3, "a"},                         /* never half a character */
        {"x", 1, ""},
        {NULL, 8, ""},
    };
    for (size_t i = 0; i < sizeof esc / sizeof esc[0]; i++) {
        char out[64];
        memset(out, 'X', sizeof out);
        px_json_escape(esc[i].in, out, esc[i].outlen);
        CHECK(!strcmp(out, esc[i].want), "escape case %zu: got '%s', want '%s'", i, out,
              esc[i].want);
    }
    struct {
        const char *in;
        int ok;
    } mem[] = {
        {"", 1},
        {"\"a\":1", 1},
        {"\"group\":\"g1\",\"rank\":0", 1},
        {" \"a\" : -1.5e+3 , \"b\" : [true,false,null,{}] ", 1},
        {"\"o\":{\"x\":[1,[2,[3]]],\"y\":\"\\u00e9\\n\"}", 1},
        {"\"u\":\"caf\xc3\xa9\"", 1},
        {"\"a\":", 0},
        {"\"a\":1,", 0},
        {"a:1", 0},
        {"\"a\":01", 0},
        {"\"a\":1.", 0},
        {"\"a\":tru", 0},
        {"\"a\":\"unterminated", 0},
        {"\"a\":\"bad\\x\"", 0},
        {"\"a\":\"ctl\x01\"", 0},
        {"\"a\":\"bad\xff\"", 0},
        {"\"a\":[1,]", 0},
        {"\"a\":{\"b\":1,}", 0},
        {"\"a\":1}", 0},
        {"\"a\":1 \"b\":2", 0},
        {"{\"a\":1}", 0},
        {"\"d\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]", 0},
    };
    for (size_t i = 0; i < sizeof mem / sizeof mem[0]; i++) {
        int got = px_json_members_valid(mem[i].in, strlen(mem[i].in));
        CHECK(got == mem[i].ok, "members case %zu '%s': got %d, want %d", i, mem[i].in, got,
              mem[i].ok);
    }
}

/* ---- spec ---- */

static void test_spec(void) {
    make_tmpdir("px-events-spec");
    struct {
        const char *spec;
        const char *must_name; /* the message must contain this */
    } bad[] = {
        {"kafka:", "/TOPIC"},
        {"kafka:127.0.0.1:9092", "/TOPIC"},
        {"kafka:127.0.0.1:9092/", "missing TOPIC"},
        {"kafka:/events", "empty broker list"},
        {"kafka:host/events", "bad broker 'host'"},
        {"kafka:host:0/events", "bad broker 'host:0'"},
        {"kafka:host:65536/events", "bad broker 'host:65536'"},
        {"kafka:host:12ab/events", "bad broker 'host:12ab'"},
        {"kafka::9092/events", "bad broker ':9092'"},
        {"kafka:a:1,,b:2/events", "bad broker ''"},
        {"kafka:a:1,b/events", "bad broker 'b'"},
        {"kafka:::1:9092/events", "bad broker"},
        {"kafka:h:1/bad topic", "bad topic 'bad topic'"},
        {"kafka:h:1/..", "bad topic '..'"},
        {"kafka:h:1/t?max_inflight=0", "bad max_inflight '0'"},
        {"kafka:h:1/t?max_inflight=x", "bad max_inflight 'x'"},
        {"kafka:h:1/t?linger=5", "unknown option 'linger=5'"},
        {"bogus:x", "unknown sink 'bogus'"},
        {"kafka", "unknown sink 'kafka'"},
        {"file:", "missing PATH"},
        {"file:/nonexistent-dir-px/x.jsonl", "cannot open '/nonexistent-dir-px/x.jsonl'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[512] = "";
        px_events_t *ev = px_events_new(bad[i].spec, "job", g_tmpdir, err, sizeof err);
        CHECK(ev == NULL, "spec '%s' must be refused", bad[i].spec);
        CHECK(strstr(err, bad[i].must_name) != NULL, "spec '%s': message '%s' must contain '%s'",
              bad[i].spec, err, bad[i].must_name);
        CHECK(strstr(err, bad[i].spec) != NULL, "spec '%s': message '%s' must quote the spec",
              bad[i].spec, err);
        if (ev) px_events_destroy(&ev, 0);
    }
    char err[512];
    CHECK(px_events_new("none", NULL, NULL, err, sizeof err) == NULL && strstr(err, "job"),
          "a missing job id is refused: %s", err);
    char path[512];
    snprintf(path, sizeof path, "file:%s/ok.jsonl", g_tmpdir);
    const char *good[] = {NULL, "", "none", path, "kafka:127.0.0.1:1/t",
                          "kafka:[::1]:9092,h2.example:9093/t.x-y_Z?max_inflight=7"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        err[0] = '\0';
        px_events_t *ev = px_events_new(good[i], "job-spec", g_tmpdir, err, sizeof err);
        CHECK(ev != NULL, "spec '%s' must be accepted: %s", good[i] ? good[i] : "(null)", err);
        if (!ev) continue;
        CHECK(px_events_emit(ev, "member_joined", "\"rank\":0") == 1, "first seq is 1");
        CHECK(px_events_emit(ev, "member_joined", NULL) == 2, "second seq is 2");
        /* Kafka here has no broker: destroy keeps both events in the spill file. */
        px_events_destroy(&ev, 100);
    }
    /* The parser alone (what phalanxctl links): the parts, taken apart. */
    struct {
        const char *spec;
        px_events_sink_t sink;
        const char *path, *brokers, *topic;
        int max_inflight;
    } parts[] = {
        {"none", PX_EVENTS_SINK_NONE, NULL, "", "", 0},
        {NULL, PX_EVENTS_SINK_NONE, NULL, "", "", 0},
        {"file:/x/e.jsonl", PX_EVENTS_SINK_FILE, "/x/e.jsonl", "", "", 0},
        {"kafka:127.0.0.1:1/t", PX_EVENTS_SINK_KAFKA, NULL, "127.0.0.1:1", "t", 0},
        {"kafka:[::1]:9092,h2:9093/t.x?max_inflight=7", PX_EVENTS_SINK_KAFKA, NULL, "[::1]:9092,h2:9093", "t.x", 7},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        px_events_spec_t sp;
        const char *name = parts[i].spec ? parts[i].spec : "(null)";
        CHECK(px_events_spec_parse(parts[i].spec, &sp, err, sizeof err) == 0, "parse '%s': %s", name, err);
        CHECK(sp.sink == parts[i].sink, "'%s': sink %d", name, sp.sink);
        CHECK(parts[i].path ? sp.path && !strcmp(sp.path, parts[i].path) : !sp.path, "'%s': path", name);
        CHECK(!strcmp(sp.brokers, parts[i].brokers) && !strcmp(sp.topic, parts[i].topic),
              "'%s': brokers '%s' topic '%s'", name, sp.brokers, sp.topic);
        CHECK(sp.max_inflight == parts[i].max_inflight, "'%s': max_inflight %d", name, sp.max_inflight);
    }
    px_events_spec_t sp;
    CHECK(px_events_spec_parse("kafka:h/t", &sp, err, sizeof err) == -1 && strstr(err, "bad broker 'h'"),
          "the parser alone refuses what px_events_new refuses: %s", err);

    CHECK(px_events_emit(NULL, "x", NULL) == 0, "emit on NULL is a no-op");
    px_events_poll(NULL);
}

/* ---- file sink ---- */

/* Polls like the coordinator's loop (every 10 ms) until `delivered` events are
 * durable and none is pending, for at most 2 s. */
static int settle(px_events_t *ev, uint64_t delivered) {
    for (int i = 0; i < 200; i++) {
        px_events_stats_t s;
        px_events_poll(ev);
        px_events_stats(ev, &s);
        if (s.pending == 0 && s.delivered == delivered) return 1;
        px_sleep_ms(10);
    }
    return 0;
}

static void test_file(void) {
    make_tmpdir("px-events-file");
    char path[512], spec[600], err[512];
    snprintf(path, sizeof path, "%s/events.jsonl", g_tmpdir);
    snprintf(spec, sizeof spec, "file:%s", path);
    fclose(fopen(path, "w")); /* created first, so its inode can be watched */
    struct stat st;
    REQUIRE(stat(path, &st) == 0, "stat %s", path);
    g_watch_ino = st.st_ino;
    g_watch_dev = st.st_dev;

    px_events_opts_t opts;
    px_events_opts_default(&opts);
    opts.batch_events = 50;
    opts.batch_ms = 100;
    px_events_t *ev = px_events_new_opts(spec, "job \"file\"", NULL, &opts, err, sizeof err);
    REQUIRE(ev != NULL, "px_events_new: %s", err);
    const char *run = px_events_run_id(ev);
    CHECK(strlen(run) == 16 && strspn(run, "0123456789abcdef") == 16, "run id '%s'", run);

    /* Written at once (a killed coordinator loses nothing), synced later in a batch. */
    char note[256], fields[512];
    px_json_escape("quote \" backslash \\ tab \t newline \n caf\xc3\xa9", note, sizeof note);
    snprintf(fields, sizeof fields, "\"group\":\"g1\",\"rank\":3,\"note\":\"%s\"", note);
    for (int i = 0; i < 10; i++) px_events_emit(ev, "member_joined", fields);
    CHECK(count_lines_in(path) == 10, "every event is written at once");
    CHECK(g_syncs == 0 && g_unsynced_writes > 0, "no fsync before the batch is due");
    px_events_stats_t s;
    px_events_stats(ev, &s);
    CHECK(s.produced == 10 && s.pending == 10 && s.delivered == 0, "stats before the batch");
    px_sleep_ms(150);
    px_events_poll(ev); /* the batch is due: its sync starts on the sync thread */
    CHECK(settle(ev, 10), "the batch becomes durable (pending 0) within 2 s");
    CHECK(g_syncs == 1 && g_unsynced_writes == 0, "one fsync once batch_ms passed (syncs=%d)",
          g_syncs);
    px_events_stats(ev, &s);
    CHECK(s.pending == 0 && s.delivered == 10, "stats after the batch");

    /* A burst: at most one fsync per batch_events lines (lines written while
     * one runs wait for the next), never one per event; then all durable. */
    for (int i = 0; i < 120; i++) px_events_emit(ev, "quorum_formed", "\"quorum_id\":7");
    px_events_stats(ev, &s);
    CHECK(s.produced == 130 && s.pending + s.delivered == 130 && s.pending >= 20,
          "at least 20 events wait for a later batch (pending %llu, delivered %llu)",
          (unsigned long long)s.pending, (unsigned long long)s.delivered);
    CHECK(settle(ev, 130), "every event of the burst becomes durable within 2 s");
    int burst = g_syncs - 1;
    CHECK(burst >= 1 && burst <= 3, "a burst of 120 with batch_events=50: 1 to 3 fsyncs (two full "
          "batches at most, then the tail), got %d", burst);
    CHECK(g_unsynced_writes == 0, "nothing written after the last fsync");

    /* Odd inputs never break a line. */
    char *huge = malloc(PX_EVENTS_MAX_LINE + 100);
    REQUIRE(huge != NULL, "malloc");
    memset(huge, 0, PX_EVENTS_MAX_LINE + 100);
    memcpy(huge, "\"blob\":\"", 8);
    memset(huge + 8, 'x', PX_EVENTS_MAX_LINE);
    huge[8 + PX_EVENTS_MAX_LINE] = '"';
    px_events_emit(ev, "bad_message", "\"raw\":\"unterminated");
    px_events_emit(ev, "bad_message", huge);
    px_events_emit(ev, "step_failed", "");
    px_events_emit(ev, "step_failed", "   ");
    px_events_emit(ev, "ty\"pe", NULL);
    uint64_t last = px_events_emit(ev, "mode_switched", "\"from\":\"sync\",\"to\":\"diloco\"");
    free(huge);
    CHECK(last == 136, "seq counts every event: %llu", (unsigned long long)last);

    int syncs_before = g_syncs;
    px_events_destroy(&ev, 1000);
    CHECK(g_syncs > syncs_before && g_unsynced_writes == 0, "destroy fsyncs the tail");
    CHECK(count_lines_in(path) == 136, "136 lines, got %ld", count_lines_in(path));

    /* An independent parser reads every line back. */
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys\n"
             "lines = open(sys.argv[1], encoding=\"utf-8\").read().split(\"\\n\")\n"
             "assert lines[-1] == \"\", \"file must end with a newline\"\n"
             "ev = [json.loads(l) for l in lines[:-1]]\n"
             "run = ev[0][\"run\"]\n"
             "for i, e in enumerate(ev):\n"
             "    assert e[\"v\"] == 1 and e[\"seq\"] == i + 1, (i, e.get(\"seq\"))\n"
             "    assert e[\"job\"] == \"job \\\"file\\\"\" and e[\"run\"] == run, i\n"
             "    assert isinstance(e[\"ts\"], int) and e[\"ts\"] > 1.6e12, i\n"
             "    assert list(e)[:6] == [\"v\", \"type\", \"seq\", \"ts\", \"job\", \"run\"], i\n"
             "assert ev[0][\"note\"] == \"quote \\\" backslash \\\\ tab \\t newline \\n caf\\u00e9\"\n"
             "assert ev[0][\"group\"] == \"g1\" and ev[0][\"rank\"] == 3\n"
             "assert ev[130][\"bad_fields\"] == \"\\\"raw\\\":\\\"unterminated\"\n"
             "assert ev[131][\"fields_truncated\"] == %d\n"
             "assert \"blob\" not in ev[131]\n"
             "assert set(ev[132]) == set(ev[133]) == {\"v\", \"type\", \"seq\", \"ts\", \"job\", \"run\"}\n"
             "assert ev[134][\"type\"] == \"ty\\\"pe\"\n"
             "assert ev[135][\"to\"] == \"diloco\"\n"
             "ts = [e[\"ts\"] for e in ev]\n"
             "assert ts == sorted(ts)\n"
             "' '%s'",
             PX_EVENTS_MAX_LINE + 9, path);
    CHECK(system(cmd) == 0, "the JSONL file does not read back as expected: %s", path);

    /* A second run appends; seq starts again at 1 under a new run id. */
    ev = px_events_new(spec, "job \"file\"", NULL, err, sizeof err);
    REQUIRE(ev != NULL, "reopen: %s", err);
    CHECK(px_events_emit(ev, "member_joined", NULL) == 1, "a new run starts at seq 1");
    px_events_destroy(&ev, 0);
    CHECK(count_lines_in(path) == 137, "appended, not truncated");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s json|spec|file\n", argv[0]);
        return 2;
    }
    if (!strcmp(argv[1], "json"))
        test_json();
    else if (!strcmp(argv[1], "spec"))
        test_spec();
    else if (!strcmp(argv[1], "file"))
        test_file();
    else
        REQUIRE(0, "unknown test %s", argv[1]);
    finish(0);
}
