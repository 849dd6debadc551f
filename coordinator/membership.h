/* Membership: who is in the job, how recently each rank was heard from, and
 * the evidence that a rank is gone.
 *
 * Members are ranks (group, rank); groups are the unit of failure. A member is
 * lost when its heartbeats stop for the timeout, or sooner when two independent
 * signals agree (docs/architecture.md, "Loss rule"):
 *   - a failure report naming it (a report naming nobody, from a peer whose
 *     collective broke, counts only against members whose connection closed),
 *   - its TCP connection closed (ZeroMQ socket monitor),
 *   - it has been silent for more than PX_SILENT_INTERVALS heartbeat intervals.
 * One report alone never drops a healthy, heartbeating member. A member that
 * reports its own failure is lost at once. The decision is a pure function
 * (px_member_loss_reason) so it is tested as a table.
 *
 * A report is evidence only while it is fresh and about the quorum in force:
 * it expires after one heartbeat timeout and when the quorum changes
 * (px_member_report_fresh), so an old or mistaken accusation cannot make a
 * later harmless pause fatal. Only members of the current quorum may accuse.
 *
 * The table is bounded, because peers grow it: a lost member stays
 * PX_LOST_GRACE_TIMEOUTS heartbeat timeouts (for /status, and for a restarted
 * process to take its slot back), then leaves (px_members_expire). At most
 * max_members entries exist; a new member on a full table takes the slot of
 * the longest-lost one, or is refused when all are live. */
#ifndef PX_MEMBERSHIP_H
#define PX_MEMBERSHIP_H

#include <stddef.h>
#include <stdint.h>

#include "px_map.h"
#include "quorum.h"

#define PX_IDENT_MAX 64
#define PX_LIVENESS_EP_MAX 255 /* PX_ENDPOINT_MAX */
#define PX_SILENT_INTERVALS 2.5
#define PX_LOST_GRACE_TIMEOUTS 10 /* heartbeat timeouts a lost member stays listed */
#define PX_RANK_CACHE 15 /* ranks of a leader's group whose slots it remembers (groups of up to 16) */

enum { PX_STATE_JOINING = 0, PX_STATE_HEALTHY = 1, PX_STATE_HEALING = 2, PX_STATE_LOST = 3 };

typedef struct {
    /* What every tick's loss check reads (detect_losses), first: one cache
     * line per member, so scanning 100,000 members streams ~6 MB. */
    int state;
    int conn_closed;    /* the socket monitor saw that connection close */
    int64_t last_hb_ms;
    int reported;       /* evidence in force now: set from reported_ms by the caller (px_member_report_fresh) */
    int self_reported;  /* it reported its own failure */
    int draining;       /* its group is being drained (phalanxctl drain): a planned leave */
    int udp_watch;      /* offered UDP heartbeats, none arrived yet: a silence gets it told (udp_off) */
    int64_t reported_ms, reported_qid; /* last failure report naming it, and the quorum it was about */
    int fd;             /* TCP connection it last spoke on (-1: unknown) */
    int closed_fd;
    uint32_t closed_gen; /* the connections accepted on closed_fd until it closed (see fd_gen in coordinator.c) */
    int via_leader;     /* last heard through its leader's digest, not directly: pushes go to the leader */
    int relay_excused;  /* via_leader, and its leader has not reported since this rank's last refresh: its
                         * silence is its leader's, not evidence against it (set by the caller) */
    int rank, group_size;
    char group[PX_QUORUM_NAME_MAX];
    int pid;
    char host[256];
    char data_host[256]; /* where its data plane listens (Register.data_host; "" when it sent none) */
    int64_t step;
    int64_t quorum_id; /* the quorum the worker says it is in */
    unsigned char ident[PX_IDENT_MAX];
    size_t ident_len;
    int64_t registered_ms;
    int64_t acked_ms;   /* its last heartbeat ack (acks with nothing new are sent once a second) */
    int requested;      /* asked to join the next quorum */
    int64_t requested_ms;
    int shrink_only;
    int group_dropped_logged; /* group_dropped already emitted for this quorum */
    int has_checksum;
    uint64_t checksum;
    int64_t job_steps;  /* the job's length as the worker was told it (0: not training) */
    char layout[64];    /* the group layout it registered with ("" when it sent none) */
    int64_t store_qid;  /* last quorum whose rendezvous store it used (stall detection) */
    int has_comm_share; /* its latest heartbeat carried a comm share (--mode auto) */
    float comm_share;   /* 0..1: its share of step time in cross-group communication */
    int spare_noted;    /* rank 0 under --target-groups: spare_registered emitted since it last trained */
    int has_train;      /* rank 0: its heartbeats carry TrainStats */
    int said_diloco;    /* rank 0 said it trains in DiLoCo while a restarted coordinator recovered (--mode auto) */
    float train_loss;   /* ... its latest train loss (NaN: unknown) */
    uint32_t heals;     /* ... heals it received, and their bytes */
    uint64_t heal_bytes;
    uint32_t group_drops; /* rank 0: times its group was dropped from a quorum, drains not counted (/metrics);
                           * kept when a new process takes the slot, gone when the slot expires */
    /* A leader's digest names its ranks every interval: the table slots of
     * ranks 1..PX_RANK_CACHE (slot + 1; 0: not looked up or not there),
     * valid while rank_cache_gen == the table's removed + 1 (no entry moved). */
    int32_t rank_cache[PX_RANK_CACHE];
    uint64_t rank_cache_gen;
    int32_t leader_slot;  /* via_leader: its leader, remembered (px_members_slot, px_members_recall) */
    uint64_t leader_gen;
    uint8_t udp_key[32];  /* this registration's key for sealed UDP heartbeats (proto/px_hbudp.h) */
    uint64_t udp_seq;     /* highest sequence number accepted under it (replays are refused) */
    int64_t udp_ok_ms;    /* when a datagram of it was last accepted */
    int udp_stale;        /* authentic datagrams refused as stale since then (a sequence pushed ahead) */
    int udp_refused;      /* told to heartbeat over its connection: its datagrams count no more */
    char lost_reason[48];
    int64_t lost_ms;    /* when it was declared lost (monotonic) */
    char liveness_ep[PX_LIVENESS_EP_MAX + 1]; /* rank 0 under --liveness group: where its ranks heartbeat */
} px_member_t;

typedef struct {
    int64_t heartbeat_interval_ms;
    int64_t heartbeat_timeout_ms;
} px_liveness_config_t;

/* Stall detection: how long a quorum member may take to join the quorum's
 * rendezvous after another did. fixed_ms > 0 (--stall-timeout-ms): that.
 * 0, adaptive: the larger of PX_STALL_FLOOR_MS and PX_STALL_STEPS times the
 * median of the job's recent step times (seconds, n of them; a trainer
 * adopts a new quorum at its next step boundary), PX_STALL_UNKNOWN_MS
 * while no step time is known. */
#define PX_STALL_FLOOR_MS 10000
#define PX_STALL_STEPS 10
#define PX_STALL_UNKNOWN_MS 60000
int64_t px_stall_limit_ms(int64_t fixed_ms, const float *step_seconds, int n);

/* Whether a failure report naming m still counts at now_ms while quorum qid is in force. */
int px_member_report_fresh(const px_member_t *m, int64_t now_ms, const px_liveness_config_t *cfg, int64_t qid);

/* Why this member should be considered lost now, or NULL if it should not. */
const char *px_member_loss_reason(const px_member_t *m, int64_t now_ms, const px_liveness_config_t *cfg);

/* Entries move when others leave (the last fills the hole): a px_member_t
 * pointer is valid until the next px_members_upsert or px_members_expire. */
typedef struct {
    px_member_t *members;
    int n, cap;
    int max_members;    /* 0: no limit */
    uint64_t removed;   /* lost members expired or evicted, ever */
    px_map_t *by_ident; /* identity -> index */
    px_map_t *by_name;  /* "group/rank" -> index */
} px_members_t;

typedef enum {
    PX_MEMBERS_OK = 0,
    PX_MEMBERS_BAD_IDENT, /* identity longer than PX_IDENT_MAX */
    PX_MEMBERS_FULL,      /* max_members live members already */
    PX_MEMBERS_NO_MEMORY,
} px_members_rc_t;

int px_members_init(px_members_t *t);
void px_members_free(px_members_t *t);
px_member_t *px_members_by_ident(px_members_t *t, const void *ident, size_t len);
px_member_t *px_members_by_name(px_members_t *t, const char *group, int rank);
/* A member's place remembered for later: its slot + 1 (0: none) and the
 * table's generation now. Recalled, it is the member still, or NULL once an
 * entry moved (an expiry or eviction) or for slot 0. */
int32_t px_members_slot(const px_members_t *t, const px_member_t *m);
uint64_t px_members_gen(const px_members_t *t);
px_member_t *px_members_recall(px_members_t *t, int32_t slot, uint64_t gen);
/* Rank r (> 0) of leader's group: px_members_by_name, remembered in the
 * leader for the next call (a digest names the same ranks every interval). */
px_member_t *px_members_rank_of(px_members_t *t, px_member_t *leader, int r);
/* Adds or replaces the member (group, rank). *replaced is set to 1 when a live
 * member held that slot (the caller treats that as the old one lost). NULL
 * with *rc saying why when it cannot (rc may be NULL). */
px_member_t *px_members_upsert(px_members_t *t, const char *group, int rank, const void *ident,
                               size_t ident_len, int *replaced, px_members_rc_t *rc);
void px_members_mark_lost(px_members_t *t, px_member_t *m, const char *why);
/* Removes the members lost for longer than PX_LOST_GRACE_TIMEOUTS heartbeat
 * timeouts; returns how many. */
int px_members_expire(px_members_t *t, int64_t now_ms, const px_liveness_config_t *cfg);
/* Counts live (not lost) members. */
int px_members_live(const px_members_t *t);

/* Builds quorum candidates, one per group that has any live member. A group
 * is healthy when ranks 0..size-1 are all live and heard from within the
 * timeout; it has requested when all have. Returns the count; *out is malloc'd. */
int px_members_candidates(const px_members_t *t, int64_t now_ms, const px_liveness_config_t *cfg,
                          px_quorum_candidate_t **out);
/* Clears every member's join request in the groups of quorum q. */
void px_members_clear_requests(px_members_t *t, const px_quorum_t *q);

#endif
