/* The commit vote (see vote.h for the encoding and its exactness bound).
 * Pure functions: no I/O, no state; tests/worker/test_vote.c tables them. */
#include "vote.h"

#include <math.h>

_Static_assert((double)PX_VOTE_MAX_MEMBERS * (PX_VOTE_STEP_MOD - 1) * (PX_VOTE_STEP_MOD - 1) < 16777216.0,
               "the vote's sum of squares must stay exactly representable in float32");

static int64_t vote_x(int64_t step) { return step % PX_VOTE_STEP_MOD; }

void px_vote_fill(float tail[PX_VOTE_N], int64_t step, int newer, int ckpt, float loss) {
    int64_t x = vote_x(step);
    tail[PX_VOTE_COUNT] = 1.0f;
    tail[PX_VOTE_STEP] = (float)x;
    tail[PX_VOTE_STEP_SQ] = (float)(x * x);
    tail[PX_VOTE_NEWER] = newer ? 1.0f : 0.0f;
    tail[PX_VOTE_SAVE] = ckpt & PX_VOTE_CKPT_DUE ? 1.0f : 0.0f;
    tail[PX_VOTE_BUSY] = ckpt & PX_VOTE_CKPT_BUSY ? 1.0f : 0.0f;
    tail[PX_VOTE_LOSS] = loss;
}

/* A slot holding an integer sum: the value, or -1 when it is not one (NaN,
 * out of range, a fraction: never produced by an honest sum). */
static int64_t slot(float v) {
    if (!(v >= 0.0f && v < 16777216.0f) || v != floorf(v)) return -1;
    return (int64_t)v;
}

int px_vote_passed(const float tail[PX_VOTE_N], int members, int64_t step) {
    if (members < 1 || members > PX_VOTE_MAX_MEMBERS) return 0;
    int64_t m = members, x = vote_x(step);
    int64_t count = slot(tail[PX_VOTE_COUNT]), sum = slot(tail[PX_VOTE_STEP]), sq = slot(tail[PX_VOTE_STEP_SQ]);
    if (count != m || sum < 0 || sq < 0) return 0;
    /* zero variance (m * sum(x^2) == sum(x)^2: all equal) and mean x == ours */
    return m * sq == sum * sum && sum == m * x;
}

int px_vote_save(const float tail[PX_VOTE_N]) { return tail[PX_VOTE_SAVE] > 0.5f; }

int px_vote_busy(const float tail[PX_VOTE_N]) { return tail[PX_VOTE_BUSY] > 0.5f; }

int px_vote_relay(float tail[PX_VOTE_N], int members, int64_t step) {
    int ok = px_vote_passed(tail, members, step);
    int newer = tail[PX_VOTE_NEWER] > 0.5f;
    int ckpt = (px_vote_save(tail) ? PX_VOTE_CKPT_DUE : 0) | (px_vote_busy(tail) ? PX_VOTE_CKPT_BUSY : 0);
    float loss = tail[PX_VOTE_LOSS];
    px_vote_fill(tail, step, newer, ckpt, loss);
    if (!ok) tail[PX_VOTE_COUNT] = 0.0f; /* poison: no cross-group count can match */
    return ok;
}
