/* Helpers shared by the event-log test drivers (header-only, static): a
 * failing check that says where and why, scratch directories, driving the
 * px-kafka-mock helper through a pipe, reading a topic back with kcat, and
 * comparing what was read with what was emitted, event by event.
 *
 * Why read back with kcat rather than our own consumer: the claim under test
 * is what a real Kafka client sees on the topic, so the check goes through an
 * independent client, without consumer groups (a group is slow to rebalance
 * after an unclean exit: about 45 s of session timeout). */
#ifndef PX_EVENTS_TEST_UTIL_H
#define PX_EVENTS_TEST_UTIL_H

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "events.h"
#include "px_child.h"
#include "px_time.h"

/* Each driver uses a subset of these helpers. */
#pragma GCC diagnostic ignored "-Wunused-function"

static int g_failed;
static char g_tmpdir[256];

#define CHECK(cond, ...)                                                                        \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                     \
            fprintf(stderr, __VA_ARGS__);                                                       \
            fprintf(stderr, "\n");                                                              \
            g_failed = 1;                                                                       \
        }                                                                                       \
    } while (0)

/* Like CHECK, but stops the test; cond is evaluated once. */
#define REQUIRE(cond, ...)                                                                      \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                     \
            fprintf(stderr, __VA_ARGS__);                                                       \
            fprintf(stderr, "\n");                                                              \
            finish(1);                                                                          \
        }                                                                                       \
    } while (0)

static pid_t g_mock_pid = -1;

static void finish(int force_fail) __attribute__((noreturn));
static void finish(int force_fail) {
    if (g_mock_pid > 0) {
        kill(g_mock_pid, SIGTERM);
        waitpid(g_mock_pid, NULL, 0);
    }
    if (force_fail || g_failed) {
        fprintf(stderr, "FAILED (scratch files kept in %s)\n", g_tmpdir);
        exit(1);
    }
    if (g_tmpdir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmpdir);
        if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", g_tmpdir);
    }
    printf("PASS\n");
    exit(0);
}

static void make_tmpdir(const char *name) {
    const char *base = getenv("TMPDIR");
    snprintf(g_tmpdir, sizeof g_tmpdir, "%s/%s-XXXXXX", base && *base ? base : "/tmp", name);
    REQUIRE(mkdtemp(g_tmpdir) != NULL, "mkdtemp: %s", strerror(errno));
}

static long count_lines_in(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long n = 0;
    int c;
    while ((c = fgetc(f)) != EOF) n += (c == '\n');
    fclose(f);
    return n;
}

/* ---- one event, as read back ---- */

typedef struct {
    char key[64];
    char type[64];
    char run[20];
    char job[64];
    uint64_t seq;
    int v;
} test_event_t;

/* Pulls a string member "name":"..." (no escapes expected in these fields). */
static int json_str(const char *line, const char *name, char *out, size_t outlen) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", name);
    const char *p = strstr(line, pat);
    if (!p) return -1;
    p += strlen(pat);
    const char *e = strchr(p, '"');
    if (!e || (size_t)(e - p) >= outlen) return -1;
    memcpy(out, p, (size_t)(e - p));
    out[e - p] = '\0';
    return 0;
}

static int json_u64(const char *line, const char *name, uint64_t *out) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", name);
    const char *p = strstr(line, pat);
    if (!p) return -1;
    char *end;
    *out = strtoull(p + strlen(pat), &end, 10);
    return end == p + strlen(pat) ? -1 : 0;
}

/* line: "KEY\tJSON" as printed by kcat -f '%k\t%s\n', or plain JSON (key=""). */
static int parse_event(const char *line, test_event_t *ev) {
    memset(ev, 0, sizeof *ev);
    const char *json = line;
    const char *tab = strchr(line, '\t');
    if (tab && line[0] != '{') {
        size_t kn = (size_t)(tab - line);
        if (kn >= sizeof ev->key) return -1;
        memcpy(ev->key, line, kn);
        json = tab + 1;
    }
    uint64_t v;
    if (json[0] != '{' || json_str(json, "type", ev->type, sizeof ev->type) ||
        json_str(json, "run", ev->run, sizeof ev->run) ||
        json_str(json, "job", ev->job, sizeof ev->job) || json_u64(json, "seq", &ev->seq) ||
        json_u64(json, "v", &v))
        return -1;
    ev->v = (int)v;
    return 0;
}

/* ---- the mock cluster helper ---- */

static FILE *g_mock_in, *g_mock_out;
static char g_boot[512];

static void mock_start(const char *mock_path, const char *topics) {
    int in[2], out[2];
    REQUIRE(pipe(in) == 0 && pipe(out) == 0, "pipe");
    pid_t parent = getpid();
    g_mock_pid = fork();
    REQUIRE(g_mock_pid >= 0, "fork");
    if (g_mock_pid == 0) {
        px_child_die_with_parent(parent); /* the mock cluster ends with its test */
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "exec '%s' %s", mock_path, topics);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    g_mock_in = fdopen(in[1], "w");
    g_mock_out = fdopen(out[0], "r");
    REQUIRE(fgets(g_boot, sizeof g_boot, g_mock_out) != NULL, "px-kafka-mock printed nothing");
    g_boot[strcspn(g_boot, "\r\n")] = '\0';
    REQUIRE(strchr(g_boot, ':') != NULL, "bad bootstrap line '%s'", g_boot);
    fprintf(stderr, "mock cluster at %s\n", g_boot);
}

static void mock_cmd(const char *cmd) {
    char reply[256];
    fprintf(g_mock_in, "%s\n", cmd);
    fflush(g_mock_in);
    REQUIRE(fgets(reply, sizeof reply, g_mock_out) != NULL, "no reply to '%s'", cmd);
    REQUIRE(strncmp(reply, "ok", 2) == 0, "mock '%s': %s", cmd, reply);
    fprintf(stderr, "mock: %s\n", cmd);
}

/* ---- reading a topic back ---- */

typedef struct {
    test_event_t *ev;
    size_t n, cap;
} event_list_t;

static void list_push(event_list_t *l, const test_event_t *e) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 256;
        l->ev = realloc(l->ev, l->cap * sizeof *l->ev);
        REQUIRE(l->ev != NULL, "out of memory");
    }
    l->ev[l->n++] = *e;
}

/* Reads every message of topic (from the beginning, until the end) with kcat;
 * validates each payload as JSON with python3 (an independent parser), and
 * parses the envelope. */
static void kcat_read(const char *topic, event_list_t *out) {
    char raw[512], cmd[2048];
    snprintf(raw, sizeof raw, "%s/kcat-%s.txt", g_tmpdir, topic);
    snprintf(cmd, sizeof cmd,
             "timeout 30 kcat -b '%s' -t '%s' -C -e -o beginning -q -f '%%k\\t%%s\\n' > '%s'",
             g_boot, topic, raw);
    REQUIRE(system(cmd) == 0, "kcat failed: %s", cmd);
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys\n"
             "for i, l in enumerate(open(sys.argv[1], encoding=\"utf-8\")):\n"
             "    k, _, v = l.rstrip(\"\\n\").partition(\"\\t\")\n"
             "    d = json.loads(v)\n"
             "    assert isinstance(d, dict), i\n"
             "    for f in (\"v\", \"type\", \"seq\", \"ts\", \"job\", \"run\"): assert f in d, (i, f)\n"
             "    assert d[\"job\"] == k, (i, \"key differs from job\")\n"
             "' '%s'",
             raw);
    CHECK(system(cmd) == 0, "payloads in %s are not all valid JSON events with key = job", raw);
    FILE *f = fopen(raw, "r");
    REQUIRE(f != NULL, "open %s", raw);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    memset(out, 0, sizeof *out);
    while ((n = getline(&line, &cap, f)) > 0) {
        line[strcspn(line, "\n")] = '\0';
        test_event_t e;
        REQUIRE(parse_event(line, &e) == 0, "unparsable message: %.200s", line);
        list_push(out, &e);
    }
    free(line);
    fclose(f);
}

/* Parses a JSONL file (a spill file or a file sink) into events. */
static void read_jsonl(const char *path, event_list_t *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    REQUIRE(f != NULL, "open %s", path);
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        test_event_t e;
        REQUIRE(parse_event(line, &e) == 0, "unparsable line in %s: %.200s", path, line);
        list_push(out, &e);
    }
    free(line);
    fclose(f);
}

/* What we expect, in order: runs[i] with seqs 1..counts[i]. */
typedef struct {
    const char *run;
    uint64_t count;
} expect_run_t;

/* Strict: exactly these events, in this order, each once; types from type_of. */
static void expect_exact(const event_list_t *got, const char *job, const expect_run_t *runs,
                         int nruns, const char *(*type_of)(uint64_t seq)) {
    size_t i = 0;
    uint64_t total = 0;
    for (int r = 0; r < nruns; r++) total += runs[r].count;
    CHECK(got->n == total, "read %zu messages, expected %llu (a gap, a loss or a duplicate)",
          got->n, (unsigned long long)total);
    for (int r = 0; r < nruns; r++) {
        for (uint64_t s = 1; s <= runs[r].count; s++, i++) {
            if (i >= got->n) return;
            const test_event_t *e = &got->ev[i];
            int ok = e->seq == s && !strcmp(e->run, runs[r].run) && !strcmp(e->key, job) &&
                     !strcmp(e->job, job) && e->v == 1 &&
                     (!type_of || !strcmp(e->type, type_of(s)));
            if (!ok) {
                CHECK(ok, "message %zu: got run=%s seq=%llu type=%s key=%s; expected run=%s "
                          "seq=%llu type=%s key=%s (order, gap or duplicate)",
                      i, e->run, (unsigned long long)e->seq, e->type, e->key, runs[r].run,
                      (unsigned long long)s, type_of ? type_of(s) : "*", job);
                return;
            }
        }
    }
}

#endif
