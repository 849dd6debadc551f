/* Pipeline schedules (parallel/schedule.h) as tables, no communicator.
 *
 *  1. Every kind for P in 1..8 and M in 1..32: px_sched_check passes, and
 *     this file checks the lists again on its own: each stage has exactly one
 *     F and one B (zb-h1: one BI and one W) per micro-batch, each F before
 *     its backward and each BI before its W, forwards and backwards in
 *     micro-batch order; peak memory (gpipe M, 1f1b min(P-s, M), zb-h1 at
 *     most P-s full and P in all); the simulated bubble against the theory
 *     derived here from the makespan, and zb-h1's below 1f1b's.
 *  2. Hand-written lists for small cases, and one printed timeline.
 *  3. Broken schedules px_sched_check must reject, each broken in one way
 *     that the other rules would let through, with the reason it gives. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/px_check.h"
#include "schedule.h"

static int failed;

static const px_sched_kind_t KINDS[] = {PX_SCHED_GPIPE, PX_SCHED_1F1B, PX_SCHED_ZBH1};

static int min_int(int a, int b) { return a < b ? a : b; }

/* "F0 B1 BI2 W3": a stage's list as text. */
static void stage_text(const px_schedule_t *s, int st, char *buf, size_t len) {
    static const char *const names[] = {"F", "B", "BI", "W"};
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < s->nops[st] && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s%d", i ? " " : "", names[s->ops[st][i].kind], s->ops[st][i].mb);
}

/* The inverse: one text row per stage into a schedule that px_sched_free can free. */
static px_schedule_t from_text(px_sched_kind_t kind, int P, int M, const char *const *rows) {
    px_schedule_t s = {.kind = kind, .P = P, .M = M};
    s.nops = calloc((size_t)P, sizeof *s.nops);
    s.ops = calloc((size_t)P, sizeof *s.ops);
    for (int st = 0; st < P; st++) {
        s.ops[st] = calloc(strlen(rows[st]) + 1, sizeof **s.ops); /* more than enough */
        for (const char *p = rows[st]; *p;) {
            px_op_kind_t k = p[0] == 'F' ? PX_OP_F : p[0] == 'W' ? PX_OP_W : p[1] == 'I' ? PX_OP_BI : PX_OP_B;
            p += k == PX_OP_BI ? 2 : 1;
            char *end;
            s.ops[st][s.nops[st]++] = (px_sched_op_t){k, (int)strtol(p, &end, 10)};
            p = end + strspn(end, " ");
        }
    }
    return s;
}

/* This file's own reading of the per-stage rules (not px_sched_check's): 0 when every stage has exactly the
 * right ops, each backward after its F and each W after its BI, forwards and backwards in micro-batch
 * order; otherwise the number of problems, each printed when report is set. */
static int stage_problems(const px_schedule_t *s, const char *what, int report) {
    int M = s->M, split = s->kind == PX_SCHED_ZBH1, problems = 0;
    int *pos = malloc(4 * (size_t)M * sizeof *pos), *count = malloc(4 * (size_t)M * sizeof *count);
    for (int st = 0; st < s->P; st++) {
        memset(count, 0, 4 * (size_t)M * sizeof *count);
        int next[4] = {0, 0, 0, 0}, in_order = 1; /* next mb expected of F and of the backward */
        for (int i = 0; i < s->nops[st]; i++) {
            px_sched_op_t o = s->ops[st][i];
            count[o.kind * M + o.mb]++;
            pos[o.kind * M + o.mb] = i;
            if (o.kind != PX_OP_W) in_order &= o.mb == next[o.kind == PX_OP_F ? 0 : 1]++;
        }
        int bad = s->nops[st] != (split ? 3 : 2) * M || !in_order;
        for (int mb = 0; mb < M; mb++) {
            int f = count[PX_OP_F * M + mb], b = count[PX_OP_B * M + mb], bi = count[PX_OP_BI * M + mb],
                w = count[PX_OP_W * M + mb];
            if (split) bad |= f != 1 || b != 0 || bi != 1 || w != 1 ||
                              pos[PX_OP_F * M + mb] > pos[PX_OP_BI * M + mb] ||
                              pos[PX_OP_BI * M + mb] > pos[PX_OP_W * M + mb];
            else bad |= f != 1 || b != 1 || bi != 0 || w != 0 || pos[PX_OP_F * M + mb] > pos[PX_OP_B * M + mb];
        }
        if (bad && report) {
            char text[4096];
            stage_text(s, st, text, sizeof text);
            fprintf(stderr, "FAIL: %s stage %d breaks a per-stage rule: %s\n", what, st, text);
        }
        problems += bad;
    }
    free(pos);
    free(count);
    return problems;
}

/* Makespans derived from the schedules' structure, in units of one F (schedule.h gives the reasoning).
 * gpipe and 1f1b with B = 2F: every stage computes M(F+B) and idles (P-1)(F+B), the fill and the drain of
 * one F and one B through the other P-1 stages: 3(M+P-1). zb-h1 with F = BI = W = 1: stage 0 computes 3M
 * and idles only before its first BI, which can start 2P-1 units in (P forwards down, P-1 BIs back), having
 * done min(M, P) forwards meanwhile. */
static double makespan_theory(px_sched_kind_t kind, int P, int M) {
    if (kind != PX_SCHED_ZBH1) return (M + P - 1) * 3.0;
    return 3.0 * M + (2 * P - 1 - min_int(M, P));
}

static void check_table(void) {
    for (int k = 0; k < 3; k++) {
        for (int P = 1; P <= 8; P++) {
            for (int M = 1; M <= 32; M++) {
                px_sched_kind_t kind = KINDS[k];
                char what[64], err[256];
                snprintf(what, sizeof what, "%s P=%d M=%d", px_sched_name(kind), P, M);
                px_schedule_t s;
                if (px_sched_build(kind, P, M, &s, err, sizeof err) != 0) {
                    CHECK(0, "%s: build: %s", what, err);
                    continue;
                }
                CHECK(s.kind == kind && s.P == P && s.M == M, "%s: header", what);
                CHECK(px_sched_check(&s, err, sizeof err) == 0, "%s: check: %s", what, err);
                CHECK(stage_problems(&s, what, 1) == 0, "%s: per-stage rules", what);
                for (int st = 0; st < P; st++) {
                    int peak = px_sched_peak_inflight(&s, st), full = px_sched_peak_full_activations(&s, st);
                    if (kind == PX_SCHED_GPIPE)
                        CHECK(peak == M && full == M, "%s stage %d: peak %d/%d, expected M", what, st, peak, full);
                    else if (kind == PX_SCHED_1F1B)
                        CHECK(peak == min_int(P - st, M) && full == peak && peak <= P - st,
                              "%s stage %d: peak %d/%d, expected min(P-s, M) = %d", what, st, peak, full,
                              min_int(P - st, M));
                    else
                        CHECK(full == min_int(P - st, M) && full <= P - st && peak <= min_int(P, M),
                              "%s stage %d: full activations %d (expected min(P-s, M) = %d), in flight %d "
                              "(at most min(P, M) = %d)", what, st, full, min_int(P - st, M), peak, min_int(P, M));
                }
                int zb = kind == PX_SCHED_ZBH1;
                double busy[8], makespan = 0;
                double bubble = px_sched_simulate(&s, 1, 2, 1, 1, busy, &makespan);
                double want_makespan = makespan_theory(kind, P, M), want = 1 - 3.0 * M / want_makespan;
                CHECK(fabs(makespan - want_makespan) < 1e-9, "%s: makespan %g, expected %g", what, makespan,
                      want_makespan);
                CHECK(fabs(bubble - want) < 1e-9, "%s: bubble %.12f, expected %.12f", what, bubble, want);
                if (!zb) CHECK(fabs(bubble - (double)(P - 1) / (M + P - 1)) < 1e-9, "%s: (P-1)/(M+P-1)", what);
                if (zb && M >= P)
                    CHECK(fabs(bubble - (P - 1.0) / (3.0 * M + P - 1)) < 1e-9, "%s: (P-1)/(3M+P-1)", what);
                CHECK(fabs(px_sched_bubble_theory(kind, P, M) - want) < 1e-9, "%s: px_sched_bubble_theory %.12f",
                      what, px_sched_bubble_theory(kind, P, M));
                for (int st = 0; st < P; st++)
                    CHECK(busy[st] == 3.0 * M, "%s stage %d: busy %g, expected 3M", what, st, busy[st]);
                if (zb && P > 1) {
                    px_schedule_t f;
                    px_sched_build(PX_SCHED_1F1B, P, M, &f, err, sizeof err);
                    double other = px_sched_simulate(&f, 1, 2, 1, 1, NULL, NULL);
                    CHECK(bubble < other, "%s: bubble %.4f not below 1f1b's %.4f", what, bubble, other);
                    px_sched_free(&f);
                }
                px_sched_free(&s);
            }
        }
    }
}

static void expect_lists(px_sched_kind_t kind, int P, int M, const char *const *rows) {
    px_schedule_t s;
    char err[256], got[1024];
    CHECK(px_sched_build(kind, P, M, &s, err, sizeof err) == 0, "build: %s", err);
    for (int st = 0; st < P; st++) {
        stage_text(&s, st, got, sizeof got);
        CHECK(!strcmp(got, rows[st]), "%s P=%d M=%d stage %d:\n  got  %s\n  want %s", px_sched_name(kind), P, M, st,
              got, rows[st]);
    }
    px_sched_free(&s);
}

/* Each cost goes to its own op kind: makespans of small cases worked by hand. */
static void check_costs(void) {
    struct {
        px_sched_kind_t kind;
        int P, M;
        double tf, tb, tbi, tw, makespan;
    } cases[] = {
        {PX_SCHED_1F1B, 1, 1, 1, 5, 7, 7, 6},        /* F + B */
        {PX_SCHED_ZBH1, 1, 2, 1, 9, 2, 3, 12},       /* 2 (F + BI + W) */
        {PX_SCHED_GPIPE, 2, 1, 1, 3, 9, 9, 8},       /* F on each stage, then B on each */
        {PX_SCHED_ZBH1, 2, 1, 1, 9, 2, 3, 9},        /* F F, BI BI, then stage 0's W */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        px_schedule_t s;
        char err[256];
        double makespan = -1, busy[2];
        px_sched_build(cases[i].kind, cases[i].P, cases[i].M, &s, err, sizeof err);
        double bubble = px_sched_simulate(&s, cases[i].tf, cases[i].tb, cases[i].tbi, cases[i].tw, busy, &makespan);
        CHECK(makespan == cases[i].makespan && bubble >= 0, "costs case %zu (%s P=%d M=%d): makespan %g, expected %g",
              i, px_sched_name(cases[i].kind), cases[i].P, cases[i].M, makespan, cases[i].makespan);
        px_sched_free(&s);
    }
}

static void check_small_tables(void) {
    /* 1f1b: stage 0 warms up with P-1-s = 1 forward, stage 1 with none */
    expect_lists(PX_SCHED_1F1B, 2, 4,
                 (const char *const[]){"F0 F1 B0 F2 B1 F3 B2 B3", "F0 B0 F1 B1 F2 B2 F3 B3"});
    expect_lists(PX_SCHED_GPIPE, 2, 3, (const char *const[]){"F0 F1 F2 B0 B1 B2", "F0 F1 F2 B0 B1 B2"});
    /* zb-h1: stage s keeps s Ws pending while forwards remain */
    expect_lists(PX_SCHED_ZBH1, 2, 4,
                 (const char *const[]){"F0 F1 BI0 W0 F2 BI1 W1 F3 BI2 W2 BI3 W3",
                                       "F0 BI0 F1 BI1 W0 F2 BI2 W1 F3 BI3 W2 W3"});
    expect_lists(PX_SCHED_1F1B, 3, 1, (const char *const[]){"F0 B0", "F0 B0", "F0 B0"});

    /* The printed timeline of 1f1b P=2 M=2, worked by hand: stage 1's B0 (2 slots) starts when F0 arrives,
     * stage 0's B0 when stage 1's is done, stage 1's F1 after its B0. */
    px_schedule_t s;
    char err[256];
    px_sched_build(PX_SCHED_1F1B, 2, 2, &s, err, sizeof err);
    FILE *f = tmpfile();
    CHECK(f && px_sched_print(&s, f) == 0, "print");
    if (f) {
        char text[1024] = "";
        rewind(f);
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = '\0';
        fclose(f);
        char want_head[128];
        snprintf(want_head, sizeof want_head, "schedule=1f1b P=2 M=2 bubble=%.4f theory=%.4f", 1.0 / 3, 1.0 / 3);
        CHECK(!strncmp(text, want_head, strlen(want_head)), "print header:\n%s", text);
        const char *rows = strchr(text, '\n');
        CHECK(rows && !strcmp(rows + 1, "stage 0: F0 F1 .  .  B0 B0 .  B1 B1\n"
                                        "stage 1: .  F0 B0 B0 F1 B1 B1 .  .\n"),
              "print rows:\n%s", text);
    }
    px_sched_free(&s);
}

/* px_sched_check must reject `rows` with a message containing `want`; `per_stage_ok` says whether the
 * lists pass this file's per-stage rules (so that only the simulation can find the problem). */
static void expect_rejected(px_sched_kind_t kind, int P, int M, const char *const *rows, const char *want,
                            int per_stage_ok) {
    px_schedule_t s = from_text(kind, P, M, rows);
    char err[256] = "";
    int rc = px_sched_check(&s, err, sizeof err);
    CHECK(rc == -1 && strstr(err, want), "%s P=%d M=%d [%s | %s]: expected a rejection naming '%s', got %d '%s'",
          px_sched_name(kind), P, M, rows[0], P > 1 ? rows[1] : "", want, rc, err);
    CHECK((stage_problems(&s, "", 0) == 0) == per_stage_ok, "'%s': the case is %sbroken per stage", want,
          per_stage_ok ? "" : "not ");
    if (per_stage_ok) CHECK(px_sched_simulate(&s, 1, 2, 1, 1, NULL, NULL) == -1, "'%s': simulate gives -1", want);
    px_sched_free(&s);
}

static void check_rejections(void) {
    const char *const good[] = {"F0 F1 B0 B1", "F0 B0 F1 B1"};
    px_schedule_t s = from_text(PX_SCHED_1F1B, 2, 2, good);
    char err[256];
    CHECK(px_sched_check(&s, err, sizeof err) == 0, "the valid base case: %s", err);
    px_sched_free(&s);

    /* Stage 1 is the last: its B0 waits for no message, so only the per-stage rule can catch it. */
    expect_rejected(PX_SCHED_1F1B, 2, 2, (const char *const[]){"F0 F1 B0 B1", "B0 F0 F1 B1"},
                    "stage 1, op 0 (B0): backward before its forward", 0);
    /* Each list alone is fine; stage 0 waits for B0 before sending F1, stage 1 for F1 before sending B0. */
    expect_rejected(PX_SCHED_1F1B, 2, 2, (const char *const[]){"F0 B0 F1 B1", "F0 F1 B0 B1"},
                    "stage 0, op 1 (B0): deadlock", 1);
    /* Three stages: the cycle passes through the middle one. */
    expect_rejected(PX_SCHED_GPIPE, 3, 2, (const char *const[]){"F0 F1 B0 B1", "F0 B0 F1 B1", "F0 F1 B0 B1"},
                    "deadlock", 1);
    expect_rejected(PX_SCHED_1F1B, 2, 2, (const char *const[]){"F0 F1 B0 B1", "F0 B0"},
                    "stage 1, op 2 (end of list): F1 missing", 0);
    expect_rejected(PX_SCHED_ZBH1, 1, 2, (const char *const[]){"F0 BI0 W0 F1 BI1"}, "W1 missing", 0);
    /* The simulation matches messages by micro-batch, so it would finish these: the order rules must catch
     * them (the runtime's FIFO links would hand over the wrong micro-batch). */
    expect_rejected(PX_SCHED_1F1B, 2, 2, (const char *const[]){"F0 F1 B1 B0", "F0 B0 F1 B1"},
                    "stage 0, op 2 (B1): backwards out of micro-batch order: B0 expected", 0);
    expect_rejected(PX_SCHED_1F1B, 2, 2, (const char *const[]){"F0 F1 B0 B1", "F1 F0 B0 B1"},
                    "stage 1, op 0 (F1): forwards out of micro-batch order: F0 expected", 0);
    expect_rejected(PX_SCHED_1F1B, 2, 2, (const char *const[]){"F0 F0 F1 B0 B1", "F0 B0 F1 B1"},
                    "stage 0, op 1 (F0): a second forward", 0);
    expect_rejected(PX_SCHED_ZBH1, 1, 1, (const char *const[]){"F0 W0 BI0"}, "op 1 (W0): W before its BI", 0);
    expect_rejected(PX_SCHED_ZBH1, 1, 1, (const char *const[]){"F0 B0"}, "B in a zb-h1 schedule", 0);
    expect_rejected(PX_SCHED_1F1B, 1, 1, (const char *const[]){"F0 BI0 W0"}, "BI in a 1f1b schedule", 0);
    expect_rejected(PX_SCHED_1F1B, 1, 2, (const char *const[]){"F0 F2 B0 B1"}, "micro-batch 2", 0);
}

static void check_names_and_limits(void) {
    for (int k = 0; k < 3; k++) {
        px_sched_kind_t back = (px_sched_kind_t)-1;
        CHECK(px_sched_parse(px_sched_name(KINDS[k]), &back) == 0 && back == KINDS[k], "name round trip %d", k);
    }
    CHECK(!strcmp(px_sched_name(PX_SCHED_ZBH1), "zb-h1") && !strcmp(px_sched_name(PX_SCHED_1F1B), "1f1b"), "names");
    px_sched_kind_t kind;
    CHECK(px_sched_parse("nope", &kind) == -1 && px_sched_parse("", &kind) == -1 && px_sched_parse(NULL, &kind) == -1,
          "unknown names are refused");
    struct {
        int P, M;
        const char *want;
    } bad[] = {{0, 4, "P=0"}, {1025, 4, "P=1025"}, {4, 0, "M=0"}, {4, 65537, "M=65537"}, {-1, 1, "P=-1"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        px_schedule_t s;
        char err[256] = "";
        CHECK(px_sched_build(PX_SCHED_1F1B, bad[i].P, bad[i].M, &s, err, sizeof err) == -1 && strstr(err, bad[i].want),
              "build P=%d M=%d: expected an error naming %s, got '%s'", bad[i].P, bad[i].M, bad[i].want, err);
        px_sched_free(&s);
    }
    px_schedule_t s;
    char err[256];
    CHECK(px_sched_build(PX_SCHED_ZBH1, 1024, 4, &s, err, sizeof err) == 0, "P=1024: %s", err);
    CHECK(px_sched_check(&s, err, sizeof err) == 0, "P=1024 checks: %s", err);
    px_sched_free(&s);
    px_sched_free(&s); /* a freed schedule frees again harmlessly */
    CHECK(px_sched_check(&s, err, sizeof err) == -1 && px_sched_peak_inflight(&s, 0) == -1, "a freed schedule");
    CHECK(px_sched_bubble_theory(PX_SCHED_1F1B, 0, 1) == -1, "theory of P=0");
}

int main(void) {
    check_table();
    check_costs();
    check_small_tables();
    check_rejections();
    check_names_and_limits();
    if (failed) {
        printf("FAIL: %d checks failed\n", failed);
        return 1;
    }
    printf("PASS\n");
    return 0;
}
