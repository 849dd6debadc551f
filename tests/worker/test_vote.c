/* Table-driven tests of the commit vote (worker/vote.c). Each row is a set of
 * ranks voting at given steps; the tails are summed in float32, as the
 * reduction sums them, and every rank's verdict is checked. Rows cover the
 * flat vote (one reduction) and the two-stage vote (inside each group, then
 * across groups), including the largest job the vote is exact for. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vote.h"

static int failures;

#define EXPECT(cond, ...)                                                                                              \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                                \
            printf(__VA_ARGS__);                                                                                       \
            printf("\n");                                                                                              \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

/* One reduction: out = sum of every member's contribution, in float32. */
static void sum_votes(const long *steps, int n, const int *newer, const int *save, float out[PX_VOTE_N]) {
    memset(out, 0, PX_VOTE_N * sizeof *out);
    for (int i = 0; i < n; i++) {
        float t[PX_VOTE_N];
        px_vote_fill(t, steps[i], newer ? newer[i] : 0, save ? save[i] : 0, 0.25f);
        for (int k = 0; k < PX_VOTE_N; k++) out[k] += t[k];
    }
}

typedef struct {
    const char *what;
    long steps[8];
    int n;       /* contributions summed */
    int members; /* members the checking ranks expect */
    int pass;    /* expected verdict of every rank (all ranks agree on it) */
} flat_row_t;

static const flat_row_t FLAT[] = {
    {"one rank", {10}, 1, 1, 1},
    {"three ranks at the same step", {10, 10, 10}, 3, 3, 1},
    {"steps 9, 10, 11: the sum matches, the variance does not", {9, 10, 11}, 3, 3, 0},
    {"steps 8, 10, 12: the sum matches, the variance does not", {8, 10, 12}, 3, 3, 0},
    {"one rank a step ahead", {10, 10, 11}, 3, 3, 0},
    {"one rank a step behind", {9, 10, 10, 10}, 4, 4, 0},
    {"ahead and behind across the modulus (12 and 13)", {12, 13}, 2, 2, 0},
    {"a missing member", {10, 10}, 2, 3, 0},
    {"an extra member", {10, 10, 10}, 3, 2, 0},
    {"step 0", {0, 0, 0}, 3, 3, 1},
    {"the largest --steps", {100000000, 100000000}, 2, 2, 1},
    {"steps 13 apart vote alike (documented: mod 13)", {10, 23}, 2, 2, 1},
};

static void test_flat(void) {
    for (size_t r = 0; r < sizeof FLAT / sizeof FLAT[0]; r++) {
        const flat_row_t *row = &FLAT[r];
        float tail[PX_VOTE_N];
        sum_votes(row->steps, row->n, NULL, NULL, tail);
        for (int i = 0; i < row->n; i++) {
            int got = px_vote_passed(tail, row->members, row->steps[i]);
            EXPECT(got == row->pass, "%s: rank %d at step %ld: passed=%d, want %d", row->what, i, row->steps[i], got,
                   row->pass);
        }
    }
}

static void test_bad_input(void) {
    float tail[PX_VOTE_N];
    long s[1] = {5};
    sum_votes(s, 1, NULL, NULL, tail);
    EXPECT(!px_vote_passed(tail, 0, 5), "0 members never pass");
    EXPECT(!px_vote_passed(tail, PX_VOTE_MAX_MEMBERS + 1, 5), "more members than the exact limit never pass");
    float bad[PX_VOTE_N];
    memcpy(bad, tail, sizeof bad);
    bad[PX_VOTE_STEP_SQ] = NAN;
    EXPECT(!px_vote_passed(bad, 1, 5), "a NaN slot fails");
    memcpy(bad, tail, sizeof bad);
    bad[PX_VOTE_STEP] += 0.5f;
    EXPECT(!px_vote_passed(bad, 1, 5), "a fractional slot fails");
}

/* The largest flat reduction the vote is exact for: every slot of
 * PX_VOTE_MAX_MEMBERS contributions at the worst step (x = 12) below 2^24,
 * and one member off by one still caught whichever member it is. */
static void test_largest(void) {
    int n = PX_VOTE_MAX_MEMBERS;
    long *steps = malloc((size_t)n * sizeof *steps);
    if (!steps) {
        printf("FAIL out of memory\n");
        failures++;
        return;
    }
    for (int i = 0; i < n; i++) steps[i] = 12;
    float tail[PX_VOTE_N];
    sum_votes(steps, n, NULL, NULL, tail);
    EXPECT(tail[PX_VOTE_STEP_SQ] == 14400000.0f, "sum of squares exact: %.1f", tail[PX_VOTE_STEP_SQ]);
    EXPECT(px_vote_passed(tail, n, 12), "%d members at step 12 pass", n);
    int odd[] = {0, n / 2, n - 1};
    for (int k = 0; k < 3; k++) {
        for (int d = -1; d <= 1; d += 2) {
            steps[odd[k]] = 12 + d;
            sum_votes(steps, n, NULL, NULL, tail);
            EXPECT(!px_vote_passed(tail, n, 12), "member %d at step %d among %d at 12 is caught", odd[k], 12 + d, n - 1);
            steps[odd[k]] = 12;
        }
    }
    free(steps);
}

/* Two stages: groups of W ranks reduce inside the group, relay, then ring r
 * (rank r of every group) reduces across groups. steps[g * W + r]. Returns
 * how many of the P * W ranks passed; *newer_out, *save_out: every rank saw
 * the newer-quorum flag, the save flag (as exact 0/1 re-encoded sums). */
static int two_stage_flags(const long *steps, const int *newer, const int *save, int P, int W, int *newer_out,
                           int *save_out) {
    float *group = calloc((size_t)P * W * PX_VOTE_N, sizeof *group);
    int passed = 0, all_newer = 1, all_save = 1;
    for (int g = 0; g < P; g++) {
        float sum[PX_VOTE_N];
        sum_votes(steps + (size_t)g * W, W, newer ? newer + (size_t)g * W : NULL, save ? save + (size_t)g * W : NULL,
                  sum);
        for (int r = 0; r < W; r++) { /* every rank of the group holds the same sum and relays it */
            float *t = group + ((size_t)g * W + r) * PX_VOTE_N;
            memcpy(t, sum, sizeof sum);
            px_vote_relay(t, W, steps[(size_t)g * W + r]);
        }
    }
    for (int r = 0; r < W; r++) {
        float ring[PX_VOTE_N] = {0};
        for (int g = 0; g < P; g++)
            for (int k = 0; k < PX_VOTE_N; k++) ring[k] += group[((size_t)g * W + r) * PX_VOTE_N + k];
        for (int g = 0; g < P; g++) {
            passed += px_vote_passed(ring, P, steps[(size_t)g * W + r]);
            if (!(ring[PX_VOTE_NEWER] > 0.5f)) all_newer = 0;
            if (ring[PX_VOTE_NEWER] != floorf(ring[PX_VOTE_NEWER]) || ring[PX_VOTE_NEWER] > (float)P) all_newer = 0;
            int want = 0; /* the flags asked for: the save bit, or with only busy ranks the busy bit */
            for (int i = 0; save && i < P * W; i++) want |= save[i];
            int slot = want & PX_VOTE_CKPT_BUSY && !(want & PX_VOTE_CKPT_DUE) ? PX_VOTE_BUSY : PX_VOTE_SAVE;
            if (!(slot == PX_VOTE_BUSY ? px_vote_busy(ring) : px_vote_save(ring))) all_save = 0;
            if (ring[slot] != floorf(ring[slot]) || ring[slot] > (float)P) all_save = 0;
        }
    }
    free(group);
    if (newer_out) *newer_out = all_newer;
    if (save_out) *save_out = all_save;
    return passed;
}

static int two_stage(const long *steps, const int *newer, int P, int W, int *newer_out) {
    return two_stage_flags(steps, newer, NULL, P, W, newer_out, NULL);
}

static void test_two_stage(void) {
    enum { P = 3, W = 4 };
    long steps[P * W];
    for (int i = 0; i < P * W; i++) steps[i] = 41;
    EXPECT(two_stage(steps, NULL, P, W, NULL) == P * W, "3 groups x 4 ranks at one step: all pass");

    steps[1 * W + 2] = 42; /* group 1's rank 2 ahead: its group poisons every ring */
    EXPECT(two_stage(steps, NULL, P, W, NULL) == 0, "one rank ahead inside a group: nobody passes");
    steps[1 * W + 2] = 41;

    for (int r = 0; r < W; r++) steps[2 * W + r] = 40; /* a whole group behind */
    EXPECT(two_stage(steps, NULL, P, W, NULL) == 0, "a whole group a step behind: nobody passes");
    for (int r = 0; r < W; r++) steps[0 * W + r] = 42; /* groups at 42, 41, 40 */
    EXPECT(two_stage(steps, NULL, P, W, NULL) == 0, "groups at 42, 41, 40: nobody passes");
    for (int i = 0; i < P * W; i++) steps[i] = 41;

    int newer[P * W] = {0}, saw = 0;
    newer[2 * W + 3] = 1;
    EXPECT(two_stage(steps, newer, P, W, &saw) == P * W && saw, "one rank's newer-quorum flag reaches every rank");
    for (int i = 0; i < P * W; i++) newer[i] = 1;
    EXPECT(two_stage(steps, newer, P, W, &saw) == P * W && saw, "every rank raising the flag stays exact");

    /* the save flag (--checkpoint-every-s): one rank's clock makes the step a save everywhere */
    int save[P * W] = {0}, saw_save = 1;
    EXPECT(two_stage_flags(steps, NULL, save, P, W, NULL, &saw_save) == P * W && !saw_save,
           "nobody asks for a save: no rank sees one");
    save[1 * W + 0] = 1;
    EXPECT(two_stage_flags(steps, NULL, save, P, W, &saw, &saw_save) == P * W && saw_save && !saw,
           "one rank's save flag reaches every rank, and only the save flag");
    for (int i = 0; i < P * W; i++) save[i] = newer[i] = 1;
    EXPECT(two_stage_flags(steps, newer, save, P, W, &saw, &saw_save) == P * W && saw_save && saw,
           "every rank raising both flags stays exact");

    /* the busy flag (a saver still writing): one rank's reaches every rank, apart from the save flag */
    for (int i = 0; i < P * W; i++) save[i] = 0;
    save[2 * W + 1] = PX_VOTE_CKPT_BUSY;
    EXPECT(two_stage_flags(steps, NULL, save, P, W, NULL, &saw_save) == P * W && saw_save,
           "one rank's busy flag reaches every rank");
    float tail[PX_VOTE_N];
    px_vote_fill(tail, 41, 0, PX_VOTE_CKPT_BUSY, 0.0f);
    EXPECT(px_vote_busy(tail) && !px_vote_save(tail), "the busy flag is its own slot");
    px_vote_fill(tail, 41, 0, PX_VOTE_CKPT_DUE | PX_VOTE_CKPT_BUSY, 0.0f);
    EXPECT(px_vote_busy(tail) && px_vote_save(tail), "both flags together");
}

/* The largest supported job, stage by stage: 1024 ranks in a group, and
 * PX_VOTE_MAX_MEMBERS groups in a ring. */
static void test_two_stage_largest(void) {
    int W = 1024;
    long *steps = malloc((size_t)W * sizeof *steps);
    for (int i = 0; i < W; i++) steps[i] = 12;
    EXPECT(two_stage(steps, NULL, 1, W, NULL) == W, "one group of 1024 ranks passes");
    steps[W - 1] = 11;
    EXPECT(two_stage(steps, NULL, 1, W, NULL) == 0, "one of 1024 ranks behind fails");
    free(steps);
    int P = PX_VOTE_MAX_MEMBERS;
    steps = malloc((size_t)P * sizeof *steps);
    for (int i = 0; i < P; i++) steps[i] = 12;
    EXPECT(two_stage(steps, NULL, P, 1, NULL) == P, "%d groups of 1 rank pass", P);
    steps[P / 3] = 13;
    EXPECT(two_stage(steps, NULL, P, 1, NULL) == 0, "one of %d groups ahead fails", P);
    free(steps);
}

int main(void) {
    test_flat();
    test_bad_input();
    test_largest();
    test_two_stage();
    test_two_stage_largest();
    if (failures) {
        printf("%d failures\n", failures);
        return 1;
    }
    printf("PASS\n");
    return 0;
}
