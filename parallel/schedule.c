/* Pipeline schedules (schedule.h): the per-stage op lists, their check, and
 * their measures. One simulation, run_timeline, executes every stage's list
 * as the runtime would (an op starts once its stage is free and its input
 * has been sent) and serves all three users: the check asks whether it
 * finishes, the bubble when each op ends, the printed timeline when each
 * op starts. The rules a stage's list must follow on its own (counts,
 * order) are checked apart, before it. */
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

#include "px_err.h"

static const char *const KIND_NAMES[] = {"gpipe", "1f1b", "zb-h1"};
#define NKINDS 3

int px_sched_parse(const char *name, px_sched_kind_t *kind) {
    for (int k = 0; name && k < NKINDS; k++) {
        if (!strcmp(name, KIND_NAMES[k])) {
            *kind = (px_sched_kind_t)k;
            return 0;
        }
    }
    return -1;
}

const char *px_sched_name(px_sched_kind_t kind) { return (unsigned)kind < NKINDS ? KIND_NAMES[kind] : "?"; }

/* "F", "B", "BI", "W": how errors name an op (the printed timeline uses b and w for one-letter columns). */
static const char *op_name(px_op_kind_t kind) {
    static const char *const names[] = {"F", "B", "BI", "W"};
    return (unsigned)kind < 4 ? names[kind] : "?";
}

static px_sched_op_t op(px_op_kind_t kind, int mb) { return (px_sched_op_t){kind, mb}; }

static int min_int(int a, int b) { return a < b ? a : b; }

static int build_gpipe(int M, px_sched_op_t *o) {
    int n = 0;
    for (int j = 0; j < M; j++) o[n++] = op(PX_OP_F, j);
    for (int j = 0; j < M; j++) o[n++] = op(PX_OP_B, j);
    return n;
}

/* 1F1B on stage s of P. With split (zb-h1) each B(i) becomes BI(i) and the W passes go where schedule.h says:
 * while forwards remain at most s stay pending, each cool-down BI is followed by one, the rest close the list. */
static int build_1f1b(int P, int M, int s, int split, px_sched_op_t *o) {
    int n = 0, warm = min_int(P - 1 - s, M), nw = 0;
    for (int j = 0; j < warm; j++) o[n++] = op(PX_OP_F, j);
    for (int i = 0; i < M; i++) {
        int steady = warm + i < M;
        if (steady) o[n++] = op(PX_OP_F, warm + i);
        o[n++] = op(split ? PX_OP_BI : PX_OP_B, i);
        if (split && (!steady || i + 1 - nw > s)) o[n++] = op(PX_OP_W, nw++);
    }
    while (split && nw < M) o[n++] = op(PX_OP_W, nw++);
    return n;
}

int px_sched_build(px_sched_kind_t kind, int P, int M, px_schedule_t *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if ((unsigned)kind >= NKINDS)
        return px_err_set(err, errlen, "schedule kind %d: expected gpipe, 1f1b or zb-h1", (int)kind);
    if (P < 1 || P > PX_SCHED_MAX_STAGES)
        return px_err_set(err, errlen, "P=%d: pipeline stages must be 1..%d", P, PX_SCHED_MAX_STAGES);
    if (M < 1 || M > PX_SCHED_MAX_MICROBATCHES)
        return px_err_set(err, errlen, "M=%d: micro-batches must be 1..%d", M, PX_SCHED_MAX_MICROBATCHES);
    out->kind = kind;
    out->P = P;
    out->M = M;
    size_t per_stage = (size_t)(kind == PX_SCHED_ZBH1 ? 3 : 2) * (size_t)M;
    out->nops = calloc((size_t)P, sizeof *out->nops);
    out->ops = calloc((size_t)P, sizeof *out->ops);
    for (int s = 0; out->nops && out->ops && s < P; s++) {
        out->ops[s] = malloc(per_stage * sizeof **out->ops);
        if (!out->ops[s]) break;
        out->nops[s] = kind == PX_SCHED_GPIPE ? build_gpipe(M, out->ops[s])
                                              : build_1f1b(P, M, s, kind == PX_SCHED_ZBH1, out->ops[s]);
    }
    if (!out->nops || !out->ops || !out->ops[P - 1]) {
        px_sched_free(out);
        px_err_set(err, errlen, "out of memory building the %s schedule for P=%d M=%d", KIND_NAMES[kind], P, M);
        return -1;
    }
    return 0;
}

void px_sched_free(px_schedule_t *s) {
    if (!s) return;
    for (int i = 0; s->ops && i < s->P; i++) free(s->ops[i]);
    free(s->ops);
    free(s->nops);
    memset(s, 0, sizeof *s);
}

/* What every other function relies on: sizes in range, the lists present, every op a known kind naming a
 * micro-batch in 0..M-1. 0, or -1 with the first problem in err. */
static int check_shape(const px_schedule_t *s, char *err, size_t errlen) {
    if (!s || !s->nops || !s->ops) return px_err_set(err, errlen, "no schedule (not built, or freed)");
    if ((unsigned)s->kind >= NKINDS || s->P < 1 || s->P > PX_SCHED_MAX_STAGES || s->M < 1 ||
        s->M > PX_SCHED_MAX_MICROBATCHES)
        return px_err_set(err, errlen, "schedule kind %d, P=%d, M=%d: expected gpipe, 1f1b or zb-h1, P in 1..%d, "
                          "M in 1..%d", (int)s->kind, s->P, s->M, PX_SCHED_MAX_STAGES, PX_SCHED_MAX_MICROBATCHES);
    for (int st = 0; st < s->P; st++) {
        if (s->nops[st] < 0 || (s->nops[st] > 0 && !s->ops[st]))
            return px_err_set(err, errlen, "stage %d: %d ops%s", st, s->nops[st],
                              s->nops[st] < 0 ? "" : " but no list");
        for (int i = 0; i < s->nops[st]; i++) {
            px_sched_op_t o = s->ops[st][i];
            if ((unsigned)o.kind > PX_OP_W || o.mb < 0 || o.mb >= s->M)
                return px_err_set(err, errlen, "stage %d, op %d: %s of micro-batch %d: expected F, B, BI or W of "
                                  "0..%d", st, i, op_name(o.kind), o.mb, s->M - 1);
        }
    }
    return 0;
}

/* One stage's list against the rules that need no other stage: one F and one backward per micro-batch (B, or
 * BI and a later W for zb-h1), forwards and backwards in micro-batch order, each backward after its F.
 * w_seen is scratch of M bytes. 0, or -1 with the stage, op index and micro-batch in err. */
static int check_stage(const px_schedule_t *s, int st, unsigned char *w_seen, char *err, size_t errlen) {
    int M = s->M, split = s->kind == PX_SCHED_ZBH1;
    px_op_kind_t back = split ? PX_OP_BI : PX_OP_B;
    int nf = 0, nb = 0, nw = 0; /* forwards and backwards done (micro-batches 0..n-1), Ws done */
    char why[96] = "";
    memset(w_seen, 0, (size_t)M);
    for (int i = 0; i < s->nops[st]; i++) {
        px_sched_op_t o = s->ops[st][i];
        if (o.kind == PX_OP_F) {
            if (o.mb < nf) snprintf(why, sizeof why, "a second forward of this micro-batch");
            else if (o.mb > nf) snprintf(why, sizeof why, "forwards out of micro-batch order: F%d expected", nf);
            else nf++;
        } else if (o.kind != back && (o.kind != PX_OP_W || !split)) {
            snprintf(why, sizeof why, "%s in a %s schedule, whose backwards are %s%s", op_name(o.kind),
                     KIND_NAMES[s->kind], op_name(back), split ? " and W" : "");
        } else if (o.kind == back) {
            if (o.mb >= nf) snprintf(why, sizeof why, "backward before its forward");
            else if (o.mb < nb) snprintf(why, sizeof why, "a second backward of this micro-batch");
            else if (o.mb > nb)
                snprintf(why, sizeof why, "backwards out of micro-batch order: %s%d expected", op_name(back), nb);
            else nb++;
        } else if (o.mb >= nb) {
            snprintf(why, sizeof why, "W before its BI");
        } else if (w_seen[o.mb]) {
            snprintf(why, sizeof why, "a second W of this micro-batch");
        } else {
            w_seen[o.mb] = 1;
            nw++;
        }
        if (why[0])
            return px_err_set(err, errlen, "stage %d, op %d (%s%d): %s", st, i, op_name(o.kind), o.mb, why);
    }
    int w_missing = 0;
    while (split && nw < M && w_seen[w_missing]) w_missing++;
    if (nf < M || nb < M || (split && nw < M))
        return px_err_set(err, errlen, "stage %d, op %d (end of list): %s%d missing", st, s->nops[st],
                          nf < M ? "F" : nb < M ? op_name(back) : "W", nf < M ? nf : nb < M ? nb : w_missing);
    return 0;
}

typedef struct {
    double cost[4];   /* per px_op_kind_t */
    double *start;    /* NULL, or [sum of nops]: when each op starts, stage after stage */
    double *busy;     /* NULL, or [P]: each stage's compute time */
    double busy_sum;  /* all stages' */
    double makespan;  /* when the last op ends */
    int stuck, stuck_op; /* after a deadlock: the lowest stage that could not finish, and its next op */
} timeline_t;

/* Index of (stage, micro-batch) in a [P][M] table. */
static size_t cell(int st, int M, int mb) { return (size_t)st * (size_t)M + (size_t)mb; }

static void wake(int st, int P, unsigned char *waiting, int *stack, int *top) {
    if (st >= 0 && st < P && waiting[st]) {
        waiting[st] = 0;
        stack[(*top)++] = st;
    }
}

/* Executes every stage's list, each op as soon as its stage is free and its input has been sent
 * (communication free): a worklist of stages that may advance; a stage stopped on a receive waits until the
 * neighbour that sends it completes an op. The shape must have been checked and the costs be >= 0. 0 when
 * every list finishes, 1 on a deadlock (t->stuck, t->stuck_op), -1 out of memory. */
static int run_timeline(const px_schedule_t *s, timeline_t *t) {
    int P = s->P, M = s->M, rc = -1;
    size_t cells = (size_t)P * (size_t)M;
    double *fend = malloc(cells * sizeof *fend); /* [P][M] when F(mb) ended on stage s; -1 not yet */
    double *bend = malloc(cells * sizeof *bend); /* [P][M] when B or BI(mb) ended */
    double *free_at = calloc((size_t)P, sizeof *free_at);
    int *pc = calloc((size_t)P, sizeof *pc), *stack = malloc((size_t)P * sizeof *stack);
    unsigned char *waiting = calloc((size_t)P, 1);
    size_t *first = t->start ? malloc((size_t)P * sizeof *first) : NULL; /* [P] stage's first op in start */
    if (!fend || !bend || !free_at || !pc || !stack || !waiting || (t->start && !first)) goto out;
    for (size_t i = 0; i < cells; i++) fend[i] = bend[i] = -1;
    for (int st = 0; first && st < P; st++) first[st] = st ? first[st - 1] + (size_t)s->nops[st - 1] : 0;
    int top = 0;
    for (int st = P - 1; st >= 0; st--) stack[top++] = st;
    t->busy_sum = t->makespan = 0;
    while (top > 0) {
        int st = stack[--top];
        while (pc[st] < s->nops[st]) {
            px_sched_op_t o = s->ops[st][pc[st]];
            int is_back = o.kind == PX_OP_B || o.kind == PX_OP_BI;
            double ready = 0;
            if (o.kind == PX_OP_F && st > 0) ready = fend[cell(st - 1, M, o.mb)];
            else if (is_back && st < P - 1) ready = bend[cell(st + 1, M, o.mb)];
            if (ready < 0) {
                waiting[st] = 1;
                break;
            }
            double begin = free_at[st] > ready ? free_at[st] : ready, end = begin + t->cost[o.kind];
            if (first) t->start[first[st] + (size_t)pc[st]] = begin;
            if (t->busy) t->busy[st] += t->cost[o.kind];
            t->busy_sum += t->cost[o.kind];
            free_at[st] = end;
            if (end > t->makespan) t->makespan = end;
            pc[st]++;
            if (o.kind == PX_OP_F) {
                fend[cell(st, M, o.mb)] = end;
                wake(st + 1, P, waiting, stack, &top);
            } else if (is_back) {
                bend[cell(st, M, o.mb)] = end;
                wake(st - 1, P, waiting, stack, &top);
            }
        }
    }
    rc = 0;
    for (int st = 0; st < P && rc == 0; st++) {
        if (pc[st] < s->nops[st]) {
            t->stuck = st;
            t->stuck_op = pc[st];
            rc = 1;
        }
    }
out:
    free(fend);
    free(bend);
    free(free_at);
    free(pc);
    free(stack);
    free(waiting);
    free(first);
    return rc;
}

int px_sched_check(const px_schedule_t *s, char *err, size_t errlen) {
    if (check_shape(s, err, errlen) != 0) return -1;
    unsigned char *w_seen = malloc((size_t)s->M);
    if (!w_seen)
        return px_err_set(err, errlen, "out of memory checking a schedule of M=%d", s->M);
    int bad = 0;
    for (int st = 0; st < s->P && !bad; st++) bad = check_stage(s, st, w_seen, err, errlen) != 0;
    free(w_seen);
    if (bad) return -1;
    timeline_t t = {.cost = {1, 2, 1, 1}};
    int r = run_timeline(s, &t);
    if (r < 0) return px_err_set(err, errlen, "out of memory simulating a schedule of P=%d M=%d", s->P, s->M);
    if (r == 0) return 0;
    px_sched_op_t o = s->ops[t.stuck][t.stuck_op];
    int fwd = o.kind == PX_OP_F;
    return px_err_set(err, errlen, "stage %d, op %d (%s%d): deadlock: it waits for micro-batch %d's %s from stage "
                      "%d, which never sends it", t.stuck, t.stuck_op, op_name(o.kind), o.mb, o.mb,
                      fwd ? "activations" : "output gradient", fwd ? t.stuck - 1 : t.stuck + 1);
}

/* Peak of micro-batches held on `stage`: one more at each F, one fewer at a B or at `release`. */
static int peak_until(const px_schedule_t *s, int stage, px_op_kind_t release) {
    if (!s || !s->nops || !s->ops || stage < 0 || stage >= s->P) return -1;
    int held = 0, peak = 0;
    for (int i = 0; i < s->nops[stage]; i++) {
        px_op_kind_t k = s->ops[stage][i].kind;
        if (k == PX_OP_F && ++held > peak) peak = held;
        if (k == PX_OP_B || k == release) held--;
    }
    return peak;
}

int px_sched_peak_inflight(const px_schedule_t *s, int stage) { return peak_until(s, stage, PX_OP_W); }

int px_sched_peak_full_activations(const px_schedule_t *s, int stage) { return peak_until(s, stage, PX_OP_BI); }

double px_sched_simulate(const px_schedule_t *s, double tf, double tb, double tbi, double tw, double *busy,
                         double *makespan) {
    if (check_shape(s, NULL, 0) != 0 || !(tf >= 0 && tb >= 0 && tbi >= 0 && tw >= 0)) return -1;
    if (busy) memset(busy, 0, (size_t)s->P * sizeof *busy);
    timeline_t t = {.cost = {tf, tb, tbi, tw}, .busy = busy};
    if (run_timeline(s, &t) != 0) return -1;
    if (makespan) *makespan = t.makespan;
    return t.makespan > 0 ? 1 - t.busy_sum / (s->P * t.makespan) : 0;
}

double px_sched_bubble_theory(px_sched_kind_t kind, int P, int M) {
    if (P < 1 || M < 1) return -1;
    if (kind == PX_SCHED_GPIPE || kind == PX_SCHED_1F1B) return (double)(P - 1) / (M + P - 1);
    if (kind != PX_SCHED_ZBH1) return -1;
    double idle = M >= P ? P - 1 : 2.0 * P - M - 1; /* per stage, in units of one F; each stage computes 3M */
    return idle / (3.0 * M + idle);
}

static int digits(int n) {
    int d = 1;
    while (n >= 10) {
        n /= 10;
        d++;
    }
    return d;
}

/* One stage's row: the op in each time slot of the unit-cost timeline. slot is scratch of nslots ints. */
static void print_row(const px_schedule_t *s, int st, const double *start, int nslots, int *slot, int width,
                      FILE *out) {
    static const char letter[] = {'F', 'B', 'b', 'w'};
    static const int len[] = {1, 2, 1, 1}; /* the unit costs, in slots */
    for (int k = 0; k < nslots; k++) slot[k] = -1;
    for (int i = 0; i < s->nops[st]; i++)
        for (int k = 0; k < len[s->ops[st][i].kind]; k++) slot[(int)start[i] + k] = i;
    fprintf(out, "stage %*d:", digits(s->P - 1), st);
    for (int k = 0; k < nslots; k++) {
        char cell[16] = ".";
        if (slot[k] >= 0) snprintf(cell, sizeof cell, "%c%d", letter[s->ops[st][slot[k]].kind], s->ops[st][slot[k]].mb);
        fprintf(out, " %-*s", k + 1 < nslots ? width : 0, cell); /* no trailing blanks */
    }
    fputc('\n', out);
}

int px_sched_print(const px_schedule_t *s, FILE *out) {
    if (check_shape(s, NULL, 0) != 0) return -1;
    size_t total = 0;
    for (int st = 0; st < s->P; st++) total += (size_t)s->nops[st];
    timeline_t t = {.cost = {1, 2, 1, 1}, .start = malloc((total ? total : 1) * sizeof(double))};
    int rc = -1, *slot = NULL;
    if (!t.start || run_timeline(s, &t) != 0) goto out;
    int nslots = (int)t.makespan;
    slot = malloc((size_t)(nslots ? nslots : 1) * sizeof *slot);
    if (!slot) goto out;
    double bubble = t.makespan > 0 ? 1 - t.busy_sum / (s->P * t.makespan) : 0;
    fprintf(out, "schedule=%s P=%d M=%d bubble=%.4f theory=%.4f (unit costs F=1 B=2 BI=1 W=1; b = BI, w = W)\n",
            KIND_NAMES[s->kind], s->P, s->M, bubble, px_sched_bubble_theory(s->kind, s->P, s->M));
    size_t first = 0;
    for (int st = 0; st < s->P; st++) {
        print_row(s, st, t.start + first, nslots, slot, 1 + digits(s->M - 1), out);
        first += (size_t)s->nops[st];
    }
    rc = ferror(out) ? -1 : 0;
out:
    free(t.start);
    free(slot);
    return rc;
}
