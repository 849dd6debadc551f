/* Renders what the coordinator knows for people and tools: the /status JSON
 * document (its contract is in docs/protocol.md; tests and phalanxctl rely on
 * it), Prometheus /metrics text (metrics.c), and the dashboard page
 * (coordinator/dashboard.html, which draws from GET /api/history).
 * Pure functions of a read-only view, so the formats are testable. */
#ifndef PX_STATUS_H
#define PX_STATUS_H

#include <stddef.h>
#include <stdint.h>

#include "membership.h"
#include "px_buf.h"
#include "job_progress.h"
#include "quorum.h"

/* The limits on state peers can grow (coordinator flags --max-members,
 * --max-store-keys, --max-store-bytes, --max-store-waiters). */
enum { PX_LIMIT_MEMBERS, PX_LIMIT_STORE_KEYS, PX_LIMIT_STORE_BYTES, PX_LIMIT_STORE_WAITERS, PX_LIMIT_KINDS };
/* "members", "store_keys", "store_bytes", "store_waiters": metric label and event field. */
extern const char *const PX_LIMIT_NAMES[PX_LIMIT_KINDS];

/* A Prometheus histogram: counts per upper bound (not cumulative here;
 * /metrics adds them up), plus the +Inf bucket, the sum and the count. */
#define PX_HISTO_MAX_BOUNDS 15
typedef struct {
    const double *bounds; /* ascending, n of them */
    int n;
    uint64_t counts[PX_HISTO_MAX_BOUNDS + 1];
    uint64_t count;
    double sum;
} px_histo_t;

void px_histo_init(px_histo_t *h, const double *bounds, int n);
void px_histo_observe(px_histo_t *h, double v);

/* Training figures for /metrics (coordinator.c keeps them). */
typedef struct {
    uint64_t committed_steps;   /* steps the job's step advanced by while this coordinator ran */
    uint64_t recoveries;        /* group drops followed by a committed step */
    uint64_t heal_bytes;        /* bytes of heal_finished events */
    uint64_t checkpoints_deferred; /* checkpoint_deferred events: a save due while the previous one still wrote */
    px_histo_t step_seconds, recovery_seconds, heal_seconds;
    px_histo_t promotion_seconds; /* --target-groups: from a loss to the promoted spare's first committed step */
    int has_loss, has_eval_loss, has_tokens_per_s;
    double loss, eval_loss, tokens_per_s; /* the latest rank-0 telemetry */
} px_train_metrics_t;

typedef struct {
    uint64_t bad_messages, heartbeats, quorums_formed, auth_rejected, messages;
    uint64_t identity_conflicts, reports_refused, members_stalled, loop_stalls;
    uint64_t bad_comm_shares; /* heartbeat comm shares ignored (NaN, outside 0..1) */
    uint64_t relayed_ranks;   /* ranks refreshed by a leader's digest (--liveness group) */
    uint64_t acks_skipped;    /* heartbeats not answered: nothing new, acked within the second */
    uint64_t delta_pushes;    /* quorum pushes sent as a delta against the quorum before */
    uint64_t udp_heartbeats;  /* heartbeats that came as sealed UDP datagrams */
    uint64_t udp_dropped;     /* datagrams refused: malformed, unknown sender, forged, replayed, not a heartbeat */
    uint64_t udp_off;         /* members told to heartbeat over their connection (their datagrams stopped) */
    uint64_t limit_refusals[PX_LIMIT_KINDS]; /* requests refused RESOURCE_LIMIT */
    uint64_t outer_steps, outer_wire_bytes;  /* DiLoCo: outer_step events, and the bytes their reporter sent */
    uint64_t failures;        /* group drops that were failures (those failures_per_hour counts) */
    double heartbeats_per_s;
    int64_t last_loss_ms, last_quorum_ms;
} px_coord_stats_t;

typedef struct {
    uint64_t produced, delivered, pending, spilled, delivery_failures;
} px_status_events_t;

typedef struct {
    const char *job, *mode;
    /* Mode switching (--mode auto; measured under every mode) */
    const char *mode_reason;     /* the last switch's reason ("" before any) */
    uint64_t mode_switches;
    int mode_diloco;             /* the mode quorums announce is diloco */
    double failures_per_hour;    /* group losses over the window, per hour */
    int has_comm_share;          /* 0: no group of the quorum reports one */
    double comm_share;
    const px_quorum_t *quorum;
    const px_members_t *members;
    int omit_members;            /* /status?members=0: no member array (a large job's summary) */
    const px_coord_stats_t *stats;
    const px_train_metrics_t *train;
    px_status_events_t events;
    size_t store_keys, store_bytes, store_waiters;
    size_t heap_bytes; /* malloc'd and in use, all threads (px_status_heap_bytes) */
    int64_t now_ms, uptime_ms; /* monotonic */
    int64_t wall_ms;           /* wall clock (checkpoint ages) */
    const char *version;       /* the coordinator's build (git describe) */
    const px_progress_t *progress; /* how far and how fast (NULL: nothing known) */
    int64_t target_step;       /* the job's length its workers were told (0: unknown) */
    int target_groups;         /* --target-groups (0: every healthy group trains) */
    int job_finished;          /* a quorum member committed the job's last step (run_finished) */
    int metrics_groups;        /* /metrics: groups get series of their own while there are at most this many */
} px_status_view_t;

/* The job's length as its live workers were told it: the largest --steps a
 * live member registered with (0: none registered one). */
int64_t px_status_target_step(const px_members_t *members);

/* Bytes malloc'd and not freed, over every thread's arena (glibc
 * mallinfo2; 0 elsewhere). Unlike RSS it does not creep while allocated
 * buffers are first touched, so it shows whether state really grows. */
size_t px_status_heap_bytes(void);
/* "joining" | "healthy" | "healing" | "lost" | "left" | "spare" for member m
 * given the quorum and the coordinator's --target-groups (0: none): a
 * member out of a quorum that holds its target is a spare. */
const char *px_status_member_state(const px_member_t *m, const px_quorum_t *q, int target_groups);
char *px_status_json(const px_status_view_t *v, size_t *len);
/* "groups":[...]: each group as its rank 0 says (name, state, step, ranks,
 * latest loss, heals and their bytes), appended to b; /status and
 * /api/history carry it (docs/protocol.md). */
void px_status_groups_json(px_buf_t *b, const px_members_t *members, const px_quorum_t *quorum, int target_groups);
/* ,"progress":{...}: the job's step, target, fraction, loss, eval loss,
 * smoothed tokens/s, pace, ETA and newest checkpoint (null: unknown). */
void px_status_progress_json(px_buf_t *b, const px_status_view_t *v);
/* Prometheus text (metrics.c): every sample labelled job="<v->job>". */
char *px_status_metrics(const px_status_view_t *v, size_t *len);
/* A plain-text table for terminals (phalanxctl status). */
char *px_status_text(const px_status_view_t *v, size_t *len);
/* The dashboard: a self-contained page that polls /api/history. */
char *px_status_html(const px_status_view_t *v, size_t *len);

#endif
