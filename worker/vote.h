/* The commit vote: a few floats ("the tail") appended to every step's
 * gradient reduction, so that deciding whether to apply the step costs no
 * message of its own.
 *
 * A step may be applied only if every rank of the quorum reduced gradients of
 * the same step. Each rank contributes [1, x, x^2, newer, save, busy, loss] with
 * x = step mod PX_VOTE_STEP_MOD; after the sum over M members every rank
 * checks count == M, sum(x) == M * x_own and M * sum(x^2) == sum(x)^2. The
 * last two say that the variance of x is zero and its mean is this rank's x,
 * that is, every member voted for this rank's step (modulo PX_VOTE_STEP_MOD):
 * a sum alone would pass ranks at steps 9, 10 and 11 for the rank at 10.
 *
 * Exactness. The tail travels as float32 through sums, so every value, and
 * every partial sum, must be an integer below 2^24. A flat sum over a whole
 * job cannot be: 100000 groups of 1024 ranks are 1.0e8 ranks, and even their
 * count exceeds 2^24. The vote is therefore taken in two stages, one per
 * reduction: inside the group (M = ranks per group, at most 1024) and then
 * across groups (M = groups in the quorum, one rank of each group per
 * cross-group ring). Between the two, px_vote_relay checks the group's vote
 * and replaces the group's sums by one member's contribution, or by a poison
 * (count 0) when the group disagreed, which fails the cross-group vote of
 * every ring the group is in. With M <= PX_VOTE_MAX_MEMBERS = 100000 and
 * x <= 12 the largest slot is M * 12^2 = 14,400,000 < 2^24 = 16,777,216
 * (x <= 13 would need 16,900,000: too many). The newer-quorum flag, the
 * save flag (--checkpoint-every-s: this rank's clock says a checkpoint is
 * due; any rank's 1 makes the step a save for every rank of the quorum) and
 * the busy flag (this rank's saver still writes: every rank of a group that
 * writes a checkpoint in parts then defers the next save alike) are
 * re-encoded as 0 or 1 for the same reason; the loss is a plain float sum.
 *
 * What mod 13 gives up: ranks whose steps differ by a multiple of 13 vote
 * alike. Within one quorum steps differ by at most one (every quorum change
 * heals the participants to a common step first), so any real disagreement
 * is caught. */
#ifndef PX_VOTE_H
#define PX_VOTE_H

#include <stdint.h>

enum { PX_VOTE_COUNT, PX_VOTE_STEP, PX_VOTE_STEP_SQ, PX_VOTE_NEWER, PX_VOTE_SAVE, PX_VOTE_BUSY, PX_VOTE_LOSS, PX_VOTE_N };
/* A rank's checkpoint flags (px_vote_fill's ckpt): a save is due by its
 * clock; its saver still writes the previous save. */
enum { PX_VOTE_CKPT_DUE = 1, PX_VOTE_CKPT_BUSY = 2 };

#define PX_VOTE_STEP_MOD 13
/* Most members of one reduction: ranks in a group (the worker allows 1024)
 * or groups in a quorum (the coordinator allows 100000). */
#define PX_VOTE_MAX_MEMBERS 100000

/* This rank's contribution for `step`. */
void px_vote_fill(float tail[PX_VOTE_N], int64_t step, int newer, int ckpt, float loss);
/* After a sum: whether some member asked for a save at this step; whether
 * some member's saver still writes. */
int px_vote_save(const float tail[PX_VOTE_N]);
int px_vote_busy(const float tail[PX_VOTE_N]);
/* After a sum over `members` contributions: 1 when every member voted for
 * `step` (this rank's), else 0. */
int px_vote_passed(const float tail[PX_VOTE_N], int members, int64_t step);
/* After the group's reduction, before the cross-group one: the group's sums
 * become one contribution (the group's vote passed) or a poison that fails
 * the cross-group vote (it did not). Returns whether the group's vote passed. */
int px_vote_relay(float tail[PX_VOTE_N], int members, int64_t step);

#endif
