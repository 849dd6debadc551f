/* Table-driven tests of the quorum rule (proto/quorum.c). Each row is
 * one situation: the candidate groups, the previous quorum, the clock and the
 * configuration, and the decision the rule must take. The rows cover every
 * rule in quorum.h: min_replicas, implicit rejoin of previous members, the
 * fast path, the split-brain guard, the join window, shrink_only, id changes,
 * max_step, round-robin heal sources, checksum divergence and drained groups;
 * and, under a target of training groups, spares: kept out while the target
 * is met, promoted (furthest ahead first) when a place frees, never
 * displacing a training group. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quorum.h"

typedef struct {
    const char *name;
    int healthy, requested;
    long requested_ms;
    long step;
    int shrink_only;
    int has_checksum;
    unsigned long checksum;
    int draining;
} cand_t;

typedef struct {
    const char *what;
    cand_t cands[8];
    long prev_id;
    const char *prev_groups; /* comma-separated, "" for none */
    int min_replicas;
    long join_timeout_ms;
    long now_ms;
    /* expectations */
    int formed;
    long id;
    const char *groups;      /* comma-separated, sorted */
    long max_step;
    const char *heals;       /* "group<source,group<source" ("" none); "!" marks divergent */
    const char *reason_has;  /* substring of the reason */
} row_t;

#define C(n, h, r, rms, st) {n, h, r, rms, st, 0, 0, 0, 0}
#define CD(n, st) {n, 1, 0, 0, st, 0, 0, 0, 1} /* healthy, being drained */
#define CS(n, h, r, rms, st) {n, h, r, rms, st, 1, 0, 0, 0}
#define CK(n, h, r, rms, st, ck) {n, h, r, rms, st, 0, 1, ck, 0}

static const row_t ROWS[] = {
    {"first quorum, all requested, after the join window", {C("a", 1, 1, 0, 0), C("b", 1, 1, 0, 0)}, 0, "", 1, 500,
     500, 1, 1, "a,b", 0, "", "formed"},
    {"the first quorum waits the join window for groups still starting", {C("a", 1, 1, 0, 0), C("b", 1, 1, 0, 0)},
     0, "", 1, 500, 499, 0, 0, "", 0, "", "first quorum"},
    {"the first quorum without a join window forms at once", {C("a", 1, 1, 0, 0)}, 0, "", 1, 0, 0,
     1, 1, "a", 0, "", "formed: 1 of 1"},
    {"below min_replicas waits", {C("a", 1, 1, 0, 0)}, 0, "", 2, 500, 10, 0, 0, "", 0, "", "min_replicas"},
    {"exactly min_replicas forms", {C("a", 1, 1, 0, 0), C("b", 1, 1, 0, 0)}, 0, "", 2, 0, 10,
     1, 1, "a,b", 0, "", "formed"},
    {"unhealthy requester is not counted", {C("a", 1, 1, 0, 0), C("b", 0, 1, 0, 0)}, 0, "", 2, 0, 10,
     0, 0, "", 0, "", "min_replicas"},
    {"join window holds for a healthy straggler", {C("a", 1, 1, 0, 0), C("b", 1, 1, 0, 0), C("c", 1, 0, 0, 0)},
     0, "", 1, 500, 100, 0, 0, "", 0, "", "join window"},
    {"join window expired: form without straggler", {C("a", 1, 1, 0, 0), C("b", 1, 1, 0, 0), C("c", 1, 0, 0, 0)},
     0, "", 1, 500, 600, 1, 1, "a,b", 0, "", "formed: 2 of 3"},
    {"join window measured from first request", {C("a", 1, 1, 100, 0), C("b", 1, 1, 450, 0), C("c", 1, 0, 0, 0)},
     0, "", 1, 500, 599, 0, 0, "", 0, "", "join window"},
    {"split-brain guard: half is not enough", {C("a", 1, 1, 0, 0), C("b", 1, 0, 0, 0)}, 0, "", 1, 0, 10,
     0, 0, "", 0, "", "split-brain"},
    {"split-brain guard: 2 of 4 waits", {C("a", 1, 1, 0, 0), C("b", 1, 1, 0, 0), C("c", 1, 0, 0, 0), C("d", 1, 0, 0, 0)},
     0, "", 1, 0, 10, 0, 0, "", 0, "", "split-brain"},
    {"split-brain guard: 3 of 4 forms", {C("a", 1, 1, 0, 0), C("b", 1, 1, 0, 0), C("c", 1, 1, 0, 0), C("d", 1, 0, 0, 0)},
     0, "", 1, 0, 10, 1, 1, "a,b,c", 0, "", "formed"},
    {"unchanged membership keeps the id", {C("a", 1, 0, 0, 5), C("b", 1, 0, 0, 5)}, 7, "a,b", 1, 500, 10,
     1, 7, "a,b", 5, "", "fast path"},
    {"previous members rejoin implicitly after a drop", {C("a", 1, 0, 0, 5), C("b", 1, 0, 0, 5), C("c", 0, 0, 0, 5)},
     7, "a,b,c", 1, 500, 10, 1, 8, "a,b", 5, "", "formed: 2 of 2"},
    {"dropped group gone entirely", {C("a", 1, 0, 0, 9), C("c", 1, 0, 0, 9)}, 3, "a,b,c", 1, 500, 10,
     1, 4, "a,c", 9, "", "formed"},
    {"fast path admits a newcomer at once", {C("a", 1, 0, 0, 5), C("b", 1, 0, 0, 5), C("c", 1, 1, 10, 0)},
     7, "a,b", 1, 500, 11, 1, 8, "a,b,c", 5, "c<a", "fast path"},
    {"newcomer heals from an up-to-date group", {C("a", 1, 0, 0, 12), C("b", 1, 1, 0, 0)}, 2, "a", 1, 0, 10,
     1, 3, "a,b", 12, "b<a", "fast path"},
    {"round-robin heal sources", {C("a", 1, 0, 0, 4), C("b", 1, 0, 0, 4), C("c", 1, 1, 0, 0), C("d", 1, 1, 0, 1), C("e", 1, 1, 0, 2)},
     5, "a,b", 1, 0, 10, 1, 6, "a,b,c,d,e", 4, "c<a,d<b,e<a", "fast path"},
    {"max_step is the highest participant step", {C("a", 1, 1, 0, 3), C("b", 1, 1, 0, 8), C("c", 1, 1, 0, 8)},
     0, "", 1, 0, 10, 1, 1, "a,b,c", 8, "a<b", "formed"},
    {"unhealthy groups excluded from max_step", {C("a", 1, 1, 0, 3), C("b", 0, 1, 0, 99)}, 0, "", 1, 0, 10,
     1, 1, "a", 3, "", "formed"},
    {"non-requesting newcomer outside previous quorum is not included", {C("a", 1, 0, 0, 5), C("b", 1, 0, 0, 5), C("z", 1, 0, 0, 0)},
     4, "a,b", 1, 500, 10, 1, 4, "a,b", 5, "", "fast path"},
    {"shrink_only excludes newcomers", {CS("a", 1, 1, 0, 5), C("b", 1, 0, 0, 5), C("c", 1, 1, 0, 0)},
     4, "a,b", 1, 0, 10, 1, 4, "a,b", 5, "", "fast path"},
    {"shrink_only with a loss", {CS("a", 1, 1, 0, 5), C("b", 0, 0, 0, 5), C("c", 1, 1, 0, 0), C("d", 1, 0, 0, 5)},
     4, "a,b,d", 1, 0, 10, 1, 5, "a,d", 5, "", "shrink only"},
    {"shrink_only ignored without a previous quorum", {CS("a", 1, 1, 0, 0), C("b", 1, 1, 0, 0)}, 0, "", 1, 0, 10,
     1, 1, "a,b", 0, "", "formed"},
    {"all previous lost, newcomers form a new id", {C("a", 0, 0, 0, 5), C("x", 1, 1, 0, 0), C("y", 1, 1, 0, 0)},
     9, "a", 1, 0, 10, 1, 10, "x,y", 0, "", "formed"},
    {"no candidates at all", {{0}}, 0, "", 1, 0, 10, 0, 0, "", 0, "", "min_replicas"},
    {"survivors below min_replicas wait", {C("a", 1, 0, 0, 5), C("b", 0, 0, 0, 5)}, 3, "a,b", 2, 0, 10,
     0, 0, "", 0, "", "min_replicas"},
    {"partition minority cannot form", {C("a", 1, 0, 0, 5), C("b", 1, 0, 0, 5), C("c", 1, 0, 0, 5), C("d", 1, 0, 0, 5), C("x", 0, 0, 0, 5)},
     3, "a,x", 1, 0, 10, 0, 0, "", 0, "", "split-brain"},
    {"sorted output regardless of input order", {C("m", 1, 1, 0, 0), C("c", 1, 1, 0, 0), C("k", 1, 1, 0, 0)},
     0, "", 1, 0, 10, 1, 1, "c,k,m", 0, "", "formed"},
    {"divergent checksum heals from the majority", {CK("a", 1, 1, 0, 6, 111), CK("b", 1, 1, 0, 6, 222), CK("c", 1, 1, 0, 6, 111)},
     0, "", 1, 0, 10, 1, 1, "a,b,c", 6, "b<a!", "formed"},
    {"checksum tie goes to the first group by name", {CK("a", 1, 1, 0, 6, 5), CK("b", 1, 1, 0, 6, 7)},
     0, "", 1, 0, 10, 1, 1, "a,b", 6, "b<a!", "formed"},
    {"groups without checksum are not divergent", {CK("a", 1, 1, 0, 6, 5), C("b", 1, 1, 0, 6)}, 0, "", 1, 0, 10,
     1, 1, "a,b", 6, "", "formed"},
    {"behind groups' checksums are ignored", {CK("a", 1, 1, 0, 6, 5), CK("b", 1, 1, 0, 2, 9)}, 0, "", 1, 0, 10,
     1, 1, "a,b", 6, "b<a", "formed"},
    {"a drained group leaves a healthy quorum at once", {C("a", 1, 0, 0, 5), C("b", 1, 0, 0, 5), CD("c", 5)},
     7, "a,b,c", 1, 500, 10, 1, 8, "a,b", 5, "", "formed: 2 of 2"},
    {"a drained group does not count for the split-brain guard", {C("a", 1, 0, 0, 5), CD("b", 5), CD("c", 5)},
     7, "a,b,c", 1, 500, 10, 1, 8, "a", 5, "", "formed: 1 of 1"},
    {"a drained group that asks to join is not admitted", {C("a", 1, 0, 0, 5), {"c", 1, 1, 0, 5, 0, 0, 0, 1}},
     7, "a", 1, 0, 10, 1, 7, "a", 5, "", "fast path"},
    {"draining the last group leaves nothing to form", {CD("a", 5)}, 7, "a", 1, 0, 10, 0, 0, "", 0, "", "min_replicas"},
    {"re-added group after a drop gets a fresh id", {C("a", 1, 0, 0, 5), C("b", 1, 1, 0, 0)}, 8, "a", 1, 0, 10,
     1, 9, "a,b", 5, "b<a", "fast path"},
};

/* Spares: the same rows under a target of training groups. */
typedef struct {
    row_t row;
    int target_groups;
} spare_row_t;

static const spare_row_t SPARE_ROWS[] = {
    {{"first quorum of 3 healthy, target 2: the first two by name train, one spare",
      {C("a", 1, 1, 0, 0), C("b", 1, 1, 0, 0), C("c", 1, 1, 0, 0)}, 0, "", 1, 0, 10, 1, 1, "a,b", 0, "",
      "formed: 2 of 2 healthy groups; 1 spare"}, 2},
    {{"a spare does not displace a training group (fast path, same id)",
      {C("a", 1, 0, 0, 9), C("b", 1, 0, 0, 9), C("c", 1, 1, 0, 9)}, 4, "a,b", 1, 500, 10, 1, 4, "a,b", 9, "",
      "fast path"}, 2},
    {{"a lost group's place goes to the spare at once, which heals",
      {C("a", 1, 0, 0, 9), C("b", 0, 0, 0, 9), C("c", 1, 1, 0, 3)}, 4, "a,b", 1, 500, 10, 1, 5, "a,c", 9, "c<a",
      "formed: 2 of 2"}, 2},
    {{"two spares: the one furthest ahead is promoted",
      {C("a", 1, 0, 0, 9), C("c", 1, 1, 0, 2), C("d", 1, 1, 0, 7)}, 4, "a,b", 1, 500, 10, 1, 5, "a,d", 9, "d<a",
      "1 spare"}, 2},
    {{"the replaced group comes back as a spare: no quorum change",
      {C("a", 1, 0, 0, 12), C("b", 1, 1, 0, 0), C("c", 1, 0, 0, 12)}, 5, "a,c", 1, 500, 10, 1, 5, "a,c", 12, "",
      "fast path"}, 2},
    {{"spares do not count for the split-brain guard beyond the target",
      {C("a", 1, 0, 0, 9), C("b", 0, 0, 0, 9), C("c", 1, 1, 0, 9), C("d", 1, 1, 0, 9), C("e", 1, 1, 0, 9)}, 4,
      "a,b", 1, 0, 10, 1, 5, "a,c", 9, "", "2 spares"}, 2},
    {{"no spare and a group lost: the quorum shrinks as without a target",
      {C("a", 1, 0, 0, 9), C("b", 0, 0, 0, 9)}, 4, "a,b", 1, 500, 10, 1, 5, "a", 9, "", "formed: 1 of 1"}, 2},
    {{"two losses at once, one spare: it takes one place, the quorum trains one short",
      {C("a", 1, 0, 0, 9), C("b", 0, 0, 0, 9), C("c", 0, 0, 0, 9), C("d", 1, 1, 0, 4)}, 4, "a,b,c", 1, 500, 10, 1, 5,
      "a,d", 9, "d<a", "formed: 2 of 2"}, 3},
    {{"a spare that stopped heartbeating (dead or frozen) is not promoted",
      {C("a", 1, 0, 0, 9), C("b", 0, 0, 0, 9), C("c", 0, 1, 0, 9)}, 4, "a,b", 1, 500, 10, 1, 5, "a", 9, "",
      "formed: 1 of 1"}, 2},
    {{"a drained group's place goes to a spare",
      {C("a", 1, 0, 0, 9), CD("b", 9), C("c", 1, 1, 0, 9)}, 4, "a,b", 1, 500, 10, 1, 5, "a,c", 9, "",
      "formed: 2 of 2"}, 2},
};

static int split(const char *s, char out[][PX_QUORUM_NAME_MAX], int max) {
    int n = 0;
    const char *p = s;
    while (*p && n < max) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        snprintf(out[n++], PX_QUORUM_NAME_MAX, "%.*s", (int)len, p);
        p = e ? e + 1 : p + len;
    }
    return n;
}

static int check_row(const row_t *r, int target_groups) {
    px_quorum_candidate_t cands[8];
    int n = 0;
    for (int i = 0; i < 8 && r->cands[i].name; i++) {
        const cand_t *c = &r->cands[i];
        memset(&cands[n], 0, sizeof cands[n]);
        snprintf(cands[n].name, sizeof cands[n].name, "%s", c->name);
        cands[n].healthy = c->healthy;
        cands[n].requested = c->requested;
        cands[n].requested_ms = c->requested_ms;
        cands[n].step = c->step;
        cands[n].shrink_only = c->shrink_only;
        cands[n].has_checksum = c->has_checksum;
        cands[n].checksum = c->checksum;
        cands[n].draining = c->draining;
        n++;
    }
    px_quorum_t prev, next;
    px_quorum_init(&prev);
    px_quorum_init(&next);
    char names[8][PX_QUORUM_NAME_MAX];
    int np = split(r->prev_groups, names, 8);
    prev.id = r->prev_id;
    prev.groups = calloc(8, sizeof *prev.groups);
    prev.cap = 8;
    prev.n = np;
    for (int i = 0; i < np; i++) memcpy(prev.groups[i].name, names[i], PX_QUORUM_NAME_MAX);
    px_quorum_config_t cfg = {r->min_replicas, r->join_timeout_ms, target_groups};
    char reason[256];
    int formed = px_quorum_compute(cands, n, &prev, &cfg, r->now_ms, &next, reason, sizeof reason);
    int ok = 1;
    char got[512] = "", heals[512] = "";
    if (formed != r->formed) ok = 0;
    if (!strstr(reason, r->reason_has)) ok = 0;
    if (formed == 1) {
        size_t gl = 0, hl = 0;
        for (int i = 0; i < next.n; i++) {
            gl += (size_t)snprintf(got + gl, sizeof got - gl, "%s%s", i ? "," : "", next.groups[i].name);
            if (next.groups[i].heal)
                hl += (size_t)snprintf(heals + hl, sizeof heals - hl, "%s%s<%s%s", hl ? "," : "", next.groups[i].name,
                                       next.groups[i].heal_source, next.groups[i].divergent ? "!" : "");
        }
        if (next.id != r->id || strcmp(got, r->groups) != 0 || next.max_step != r->max_step ||
            strcmp(heals, r->heals) != 0)
            ok = 0;
    }
    if (!ok)
        fprintf(stderr,
                "FAIL: %s\n  want formed=%d id=%ld groups=%s max_step=%ld heals=%s reason~'%s'\n"
                "  got  formed=%d id=%ld groups=%s max_step=%ld heals=%s reason='%s'\n",
                r->what, r->formed, r->id, r->groups, r->max_step, r->heals, r->reason_has, formed,
                (long)next.id, got, (long)next.max_step, heals, reason);
    px_quorum_free(&prev);
    px_quorum_free(&next);
    return ok;
}

/* Adopted groups (a coordinator restart) arrive in registration order; the
 * quorum must stay sorted by name, since workers use the position as ring
 * rank and batch share. */
static int check_insert_sorted(void) {
    const char *order[] = {"g2", "g0", "g10", "g1", "g0"}; /* g0 twice: kept once */
    const long steps[] = {7, 5, 9, 6, 5};
    px_quorum_t q;
    px_quorum_init(&q);
    for (int i = 0; i < 5; i++)
        if (px_quorum_insert_sorted(&q, order[i], steps[i]) != 0) return 0;
    char got[128] = "";
    size_t n = 0;
    for (int i = 0; i < q.n; i++) n += (size_t)snprintf(got + n, sizeof got - n, "%s%s", i ? "," : "", q.groups[i].name);
    int ok = strcmp(got, "g0,g1,g10,g2") == 0 && q.max_step == 9 && q.groups[px_quorum_find(&q, "g1")].step == 6;
    if (!ok) fprintf(stderr, "FAIL: insert_sorted: got %s max_step=%ld\n", got, (long)q.max_step);
    px_quorum_free(&q);
    return ok;
}

/* A random quorum over names g000..g199 (each present with probability
 * `p` percent), some healing; sorted, as every quorum is. */
static void random_quorum(px_quorum_t *q, unsigned *seed, int p, int64_t id) {
    px_quorum_init(q);
    for (int i = 0; i < 200; i++) {
        if ((int)(rand_r(seed) % 100) >= p) continue;
        char name[8];
        snprintf(name, sizeof name, "g%03d", i);
        px_quorum_insert_sorted(q, name, rand_r(seed) % 50);
    }
    for (int i = 0; i < q->n; i++)
        if (rand_r(seed) % 4 == 0 && q->n > 1) {
            q->groups[i].heal = 1;
            snprintf(q->groups[i].heal_source, PX_QUORUM_NAME_MAX, "%s", q->groups[(i + 1) % q->n].name);
        }
    q->id = id;
}

static int same_quorum(const px_quorum_t *a, const px_quorum_t *b) {
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->groups[i].name, b->groups[i].name) != 0 || a->groups[i].heal != b->groups[i].heal ||
            (a->groups[i].heal && strcmp(a->groups[i].heal_source, b->groups[i].heal_source) != 0))
            return 0;
    return 1;
}

/* Delta pushes: for random pairs (base, next), the delta applied to base
 * gives next (names, heal, heal source, in order); applied to another
 * quorum, or with a wrong count, it is refused. Seeded: the seed is printed
 * on failure. */
static int check_deltas(void) {
    int failed = 0;
    for (unsigned trial = 0; trial < 500; trial++) {
        unsigned seed = 1000 + trial;
        px_quorum_t base, next, other, out;
        random_quorum(&base, &seed, 60, 5);
        /* next: most of base (a loss or two, a join, a heal done) or unrelated */
        if (trial % 5 == 4) {
            random_quorum(&next, &seed, 50, 6);
        } else {
            px_quorum_init(&next);
            px_quorum_copy(&next, &base);
            next.id = 6;
            for (int k = 0; k < 1 + (int)(trial % 3); k++) {
                if (next.n == 0) break;
                int at = (int)(rand_r(&seed) % (unsigned)next.n);
                memmove(&next.groups[at], &next.groups[at + 1], (size_t)(next.n - at - 1) * sizeof *next.groups);
                next.n--;
            }
            char name[8];
            snprintf(name, sizeof name, "g%03d", (int)(rand_r(&seed) % 200));
            px_quorum_insert_sorted(&next, name, 3);
            if (next.n && rand_r(&seed) % 2) next.groups[0].heal = !next.groups[0].heal;
            if (next.n && next.groups[0].heal) snprintf(next.groups[0].heal_source, PX_QUORUM_NAME_MAX, "g199");
        }
        random_quorum(&other, &seed, 60, 5);
        int *rm, *ch, nrm, nch;
        if (px_quorum_delta(&base, &next, &rm, &nrm, &ch, &nch) != 0) return 0;
        const char **names = calloc((size_t)nrm + 1, sizeof *names);
        px_quorum_member_t *changed = calloc((size_t)nch + 1, sizeof *changed);
        for (int k = 0; k < nrm; k++) names[k] = base.groups[rm[k]].name;
        for (int k = 0; k < nch; k++) changed[k] = next.groups[ch[k]];
        uint64_t h = px_quorum_hash(&next);
        px_quorum_init(&out);
        int rc = px_quorum_apply_delta(&base, names, nrm, changed, nch, next.n, h, &out);
        if (rc != 0 || !same_quorum(&out, &next)) {
            fprintf(stderr, "FAIL: delta (seed %u): rc %d, %d groups, want %d\n", 1000 + trial, rc, out.n, next.n);
            failed++;
        }
        px_quorum_free(&out);
        px_quorum_init(&out);
        if (px_quorum_apply_delta(&other, names, nrm, changed, nch, next.n, h, &out) == 0 && !same_quorum(&out, &next)) {
            fprintf(stderr, "FAIL: delta (seed %u) applied to another base gave a wrong quorum\n", 1000 + trial);
            failed++;
        }
        px_quorum_free(&out);
        px_quorum_init(&out);
        if (px_quorum_apply_delta(&base, names, nrm, changed, nch, next.n + 1, h, &out) == 0) {
            fprintf(stderr, "FAIL: delta (seed %u) accepted a wrong group count\n", 1000 + trial);
            failed++;
        }
        px_quorum_free(&out);
        free(names), free(changed), free(rm), free(ch);
        px_quorum_free(&base), px_quorum_free(&next), px_quorum_free(&other);
    }
    /* a base with the same names but another heal flag is not the base */
    {
        px_quorum_t b0, b1, nx, o;
        px_quorum_init(&b0), px_quorum_init(&nx), px_quorum_init(&o), px_quorum_init(&b1);
        px_quorum_insert_sorted(&b0, "a", 0), px_quorum_insert_sorted(&b0, "b", 0), px_quorum_insert_sorted(&b0, "c", 0);
        px_quorum_copy(&b1, &b0);
        b1.groups[0].heal = 1;
        snprintf(b1.groups[0].heal_source, PX_QUORUM_NAME_MAX, "b");
        px_quorum_copy(&nx, &b0);
        nx.n = 2; /* "c" lost */
        const char *gone[] = {"c"};
        if (px_quorum_apply_delta(&b1, gone, 1, NULL, 0, 2, px_quorum_hash(&nx), &o) == 0) {
            fprintf(stderr, "FAIL: delta applied to a base that differs in a heal flag\n");
            failed++;
        }
        px_quorum_free(&b0), px_quorum_free(&b1), px_quorum_free(&nx), px_quorum_free(&o);
    }
    /* the hash separates names, not just their concatenation */
    px_quorum_t a, b;
    px_quorum_init(&a), px_quorum_init(&b);
    px_quorum_insert_sorted(&a, "ab", 0), px_quorum_insert_sorted(&a, "c", 0);
    px_quorum_insert_sorted(&b, "a", 0), px_quorum_insert_sorted(&b, "bc", 0);
    if (px_quorum_hash(&a) == px_quorum_hash(&b)) {
        fprintf(stderr, "FAIL: names hash: ab,c == a,bc\n");
        failed++;
    }
    px_quorum_free(&a), px_quorum_free(&b);
    return failed == 0;
}

int main(void) {
    int n = (int)(sizeof ROWS / sizeof ROWS[0]), failed = 0;
    for (int i = 0; i < n; i++) failed += !check_row(&ROWS[i], 0);
    int ns = (int)(sizeof SPARE_ROWS / sizeof SPARE_ROWS[0]);
    for (int i = 0; i < ns; i++) failed += !check_row(&SPARE_ROWS[i].row, SPARE_ROWS[i].target_groups);
    n += ns;
    failed += !check_insert_sorted();
    failed += !check_deltas();
    n += 2;
    printf("test_quorum: %d cases, %d failed\n", n, failed);
    return failed ? 1 : 0;
}
