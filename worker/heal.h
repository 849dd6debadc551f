/* Healing: after every quorum change, bring the participants to one training
 * state (model/train_state.h) over the new communicators, before any of them
 * trains a step.
 *
 *  1. Inside a group (ranks per group > 1): a failure can leave the ranks of
 *     one group a step apart (one rank's cross-group ring committed a step,
 *     another's did not). The rank with the highest step (lowest rank among
 *     equals) broadcasts its state to the others.
 *  2. Across groups: every group learns every group's (step, state
 *     checksum), and all run the quorum rule's own heal assignment on that
 *     table (so they agree on the plan without a message): groups behind, or
 *     whose checksum disagrees with the majority, receive the whole state
 *     from an up-to-date group, chosen round robin.
 *
 * Wire format of one heal, sender to receiver, on tags 1, 2, ...: a header
 * (magic, step, n, checksum, buffers, local mask: the mode under --mode
 * auto, which the receiver takes), the params, m and v (and outer_m) buffers in
 * PX_STATE_CHUNK_FLOATS chunks, then the digest (every chunk's hash) in one
 * message. The receiver hashes what it got, compares chunk by chunk and
 * checks the checksum: one pass over the data proves the whole state.
 *
 * A failed heal changes nothing. The receiver takes the state into a staging
 * copy and replaces its own only once the copy is verified, so a source that
 * dies mid-heal leaves the receiver exactly where it was (same step, same
 * checksum), still a valid replica that can be healed later or heal others.
 * The cost is memory: during a heal the receiver holds its state twice
 * (3 x num_params floats more: 1.5 GB for gpt2-124m), freed at once after.
 * The group broadcast of step 1 stages the same way on the receiving ranks.
 *
 * Except at step 0: a receiver there holds the job's initial state, which
 * the trainer can rebuild at will (px_heal_t.reinit), so it receives in
 * place and, if the heal fails, rebuilds it: the same bytes, without paying
 * for fresh staging memory. That is the common case (a restarted worker
 * joining), and fresh memory is expensive: faulting in 1.5 GB costs more
 * than the transfer itself on the machines measured (docs/benchmarks-ft.md,
 * "Healing").
 *
 * PX_TEST_HEAL_CHUNK_DELAY_MS (tests only) pauses the sender before each
 * chunk, so that a test can kill a process mid-heal. */
#ifndef PX_HEAL_H
#define PX_HEAL_H

#include <stdint.h>

#include "agent.h"
#include "px_comm.h"
#include "quorum.h"
#include "train_state.h"

typedef struct {
    px_train_state_t *state; /* the live state this replica trains */
    px_agent_t *agent;       /* progress and heal events */
    const char *group;
    int rank;                /* rank inside the group: rank 0 reports events */
    int heals;               /* heals received so far */
    /* Rebuilds the job's initial state (step 0) into s; 0 on success. NULL:
     * every receive is staged. */
    int (*reinit)(void *ctx, px_train_state_t *s);
    void *reinit_ctx;
    /* A sharded group's communicator (NULL: every rank holds a whole
     * replica). With it, the group's step and checksum in the cross-group
     * plan are the whole group's (px_heal_group_state), so that every rank
     * of a group computes the same plan, and a heal moves every shard: rank
     * r receives from rank r of the source group. */
    px_comm_t *group_comm;
    /* digest of the live state, cached per step (private) */
    uint64_t *digest;
    uint64_t ck;
    int64_t ck_step;
    int ck_valid;
} px_heal_t;

/* 0, or -1 when out of memory. */
int px_heal_init(px_heal_t *h, px_train_state_t *state, px_agent_t *agent, const char *group, int rank);
void px_heal_free(px_heal_t *h);

/* The live state's checksum. Computed once per step: the state changes only
 * through a step (which moves the step) or through this module; an owner
 * that changes it otherwise (DiLoCo's inner steps move the moments, not the
 * step) clears ck_valid. */
uint64_t px_heal_checksum(px_heal_t *h);

/* Step 1 over the group's communicator, comparing every buffer (local ones
 * too: a group's ranks hold its own moments alike). 0 when every rank holds
 * the same state; -1 on a failure (this rank's state is then unchanged). */
int px_heal_sync_group(px_heal_t *h, px_comm_t *intra);

/* Collective over group_comm: the group's step (the lowest of its ranks')
 * and checksum (a checksum of every rank's state checksum, in rank order; 0
 * when the ranks are at different steps, so that the group counts as
 * behind and is healed). 0, or -1 on a failure. */
int px_heal_group_state(px_heal_t *h, int64_t *step, uint64_t *checksum);

/* Step 2 over the cross-group communicator of quorum q (this group is
 * replica my_index), ending with a barrier. 0 when every group holds the
 * same state; -1 on a failure (a receiver's state is then unchanged). */
int px_heal_sync_quorum(px_heal_t *h, px_comm_t *cross, const px_quorum_t *q, int my_index);

#endif
