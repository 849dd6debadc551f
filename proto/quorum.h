/* The quorum rule: which replica groups take part in the next quorum.
 *
 * A pure function of the candidate groups, the previous quorum, the clock and
 * the configuration — no I/O, no globals — so it is tested as a table of cases
 * (tests/control/test_quorum.c). It follows the rule torchft's lighthouse uses,
 * adapted to phalanx's "no round trip per step" design:
 *
 *  - A group is *healthy* when every one of its ranks is registered and heard
 *    from within the heartbeat timeout (the caller decides that).
 *  - A group *participates* when it is healthy and either asked to join (every
 *    rank sent a quorum request) or was in the previous quorum: survivors of a
 *    failure need not ask again, so dropping a group forms the next quorum at
 *    once, without waiting for a round trip.
 *  - shrink_only (any participant asks for it): only previous members may take part.
 *  - A group being drained (an operator asked it to leave) neither
 *    participates nor counts as healthy: the quorum re-forms without it.
 *  - Fast path: every previous member still participates -> form now, with any
 *    newcomers included.
 *  - Otherwise: at least min_replicas participants; split-brain guard:
 *    participants must be more than half of the healthy groups; when some
 *    healthy groups have not joined, wait for them until join_timeout after the
 *    first request. The first quorum of a run always waits that window: the
 *    groups of a job started together register once each has set up, so a
 *    group still setting up is not yet healthy, and forming at once would
 *    start the job as a cascade of quorums (one group, then two, ...), each
 *    superseding the last one's rendezvous.
 *  - Spares (target_groups > 0): at most target_groups participants train.
 *    Groups of the previous quorum keep their places (a group that comes
 *    back never displaces one that trains); the places left go to the other
 *    participants, the furthest ahead first, then in name order; the rest
 *    are spares, left out of the quorum until a place frees. The split-brain
 *    guard and the join window count at most target_groups healthy groups.
 *  - The quorum id changes only when the set of participating groups changes.
 *  - max_step is the highest step among participants. Groups behind it heal,
 *    each from an up-to-date group chosen round robin (in name order). Among
 *    up-to-date groups that report a state checksum, those disagreeing with the
 *    majority checksum (ties: the one held by the first group in name order)
 *    are divergent and heal too.
 */
#ifndef PX_QUORUM_H
#define PX_QUORUM_H

#include <stddef.h>
#include <stdint.h>

#define PX_QUORUM_NAME_MAX 64 /* group names are at most 63 bytes */

typedef struct {
    char name[PX_QUORUM_NAME_MAX];
    int healthy;          /* every rank registered and heartbeating */
    int requested;        /* every rank asked to join */
    int64_t requested_ms; /* when the first rank asked (join window) */
    int64_t step;         /* committed steps (the lowest over its ranks) */
    int shrink_only;
    int has_checksum;
    uint64_t checksum;    /* training-state checksum at `step` */
    int draining;         /* asked to leave (a drain): never participates, not counted as healthy */
} px_quorum_candidate_t;

typedef struct {
    char name[PX_QUORUM_NAME_MAX];
    int64_t step;
    int heal;                               /* must receive state before training */
    int divergent;                          /* heal because its checksum disagreed */
    char heal_source[PX_QUORUM_NAME_MAX];   /* when heal */
} px_quorum_member_t;

typedef struct {
    int64_t id;       /* 0: no quorum yet */
    int64_t max_step;
    char mode[16];    /* "sync" or "diloco" as the coordinator announced it; "" when unknown */
    int n;            /* participating groups, sorted by name */
    int cap;
    px_quorum_member_t *groups;
    /* Groups of the quorum before this one that left it by a planned leave
     * (a drain; Quorum.draining): the participants adopt this quorum at a
     * step boundary, with the drained groups, instead of aborting. Sorted. */
    int n_draining;
    char (*draining)[PX_QUORUM_NAME_MAX];
} px_quorum_t;

typedef struct {
    int min_replicas;        /* >= 1 */
    int64_t join_timeout_ms; /* wait this long for healthy groups that have not joined */
    int target_groups;       /* > 0: at most this many groups train; the other participants are spares */
} px_quorum_config_t;

/* Decides whether a quorum forms now. Returns 1 and fills *next when it does
 * (next->id equals prev->id when the membership is unchanged), 0 when it must
 * wait. `reason` always explains the decision in one line. `prev` may be an
 * empty quorum (id 0, n 0). next must not alias prev. Returns -1 on allocation
 * failure. */
int px_quorum_compute(const px_quorum_candidate_t *cands, int n, const px_quorum_t *prev,
                      const px_quorum_config_t *cfg, int64_t now_ms, px_quorum_t *next,
                      char *reason, size_t reason_len);

void px_quorum_init(px_quorum_t *q);
void px_quorum_free(px_quorum_t *q);
int px_quorum_copy(px_quorum_t *dst, const px_quorum_t *src);
/* Index of group `name` in q, or -1. */
int px_quorum_find(const px_quorum_t *q, const char *name);
/* Adds group `name` at `step` keeping q sorted by name, as every formed
 * quorum is (workers use the position as ring rank and batch share); raises
 * max_step. 0 on success or when already present, -1 on allocation failure. */
int px_quorum_insert_sorted(px_quorum_t *q, const char *name, int64_t step);
/* Sets q's planned leavers (copied; sorted here). 0, or -1 when out of memory. */
int px_quorum_set_draining(px_quorum_t *q, const char *const *names, int n);
/* 1 when group `name` left q's predecessor by a planned leave (q->draining). */
int px_quorum_is_draining(const px_quorum_t *q, const char *name);
/* 1 when both quorums hold the same set of group names. */
int px_quorum_same_members(const px_quorum_t *a, const px_quorum_t *b);

/* Delta pushes (docs/protocol.md "Quorum deltas"): a new quorum described
 * against the one before it, so that a loss in a job of 10,000 groups pushes
 * one name instead of all of them. Pure. */
/* A delta's check: FNV-1a 64 over the groups in order, each as its name,
 * its heal source ("" when not healing), each followed by a NUL, and its
 * heal flag (one byte). Two quorums with the same id from two coordinator
 * runs may differ in heal flags: the hash tells them apart. */
uint64_t px_quorum_hash(const px_quorum_t *q);
/* What changed from base to next: indexes into base->groups of the groups
 * gone (*removed, ascending), and into next->groups of the groups new or
 * whose heal or heal source differ (*changed, ascending). Steps of groups
 * that are not healing are not compared (workers do not use them). Both
 * arrays are malloc'd (free them). -1 when out of memory. */
int px_quorum_delta(const px_quorum_t *base, const px_quorum_t *next, int **removed, int *n_removed, int **changed,
                    int *n_changed);
/* Builds *out (px_quorum_init'd) from base, the names removed (sorted, each
 * in base), and the entries new or changed (sorted by name); the id,
 * max_step and mode are the caller's. 0 when the result has n_total groups
 * and the given hash (px_quorum_hash); -1 otherwise (a base that is not the one the
 * delta was made against, or a malformed delta) or when out of memory. */
int px_quorum_apply_delta(const px_quorum_t *base, const char *const *removed, int n_removed,
                          const px_quorum_member_t *changed, int n_changed, int n_total, uint64_t groups_hash,
                          px_quorum_t *out);

#endif
