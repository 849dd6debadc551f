/* The worker's agent: a thread that keeps the coordinator informed while the
 * trainer computes. It owns the worker's only ZeroMQ socket (a DEALER with a
 * stable identity), registers (again after a coordinator restart), heartbeats
 * every interval with the trainer's step and quorum id, receives pushed
 * quorums, and carries the trainer's requests: join a quorum, report a
 * failure, use the rendezvous store. All functions are thread-safe. */
#ifndef PX_AGENT_H
#define PX_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "px_keys.h"
#include "quorum.h"

typedef struct {
    const char *coordinator; /* ZeroMQ endpoint */
    const char *group;
    int rank, group_size;
    const char *job;         /* NULL: accept any coordinator job */
    const char *layout;      /* the group's layout ("pp1.fsdp2.tp2"; NULL: not sent), checked
                                by the coordinator against the other groups' */
    const char *token;       /* NULL: none */
    int64_t job_steps;       /* the job's length (--steps), 0 when not training; sent at
                                registration, and only a finish at this step ends our run */
    int connect_timeout_s;   /* give up if the first registration takes longer; 0: wait forever */
    int print_waiting;       /* also print waiting notices on stdout as "event kind=waiting_coordinator" */
    const px_curve_client_t *curve; /* NULL or not on: plaintext control plane */
    int liveness_group;      /* --liveness group: rank 0 takes its ranks' heartbeats and reports
                                for them; the others heartbeat it (worker/liveness.h) */
    const char *data_host;   /* the address this rank's data plane listens on (--data-host; NULL:
                                127.0.0.1): sent at registration (/status shows it), and where
                                rank 0 binds its liveness socket under --liveness group */
} px_agent_config_t;

typedef struct px_agent px_agent_t;

/* The agent, ready but silent: nothing reaches the coordinator (no
 * connection, no registration) until px_agent_start, so a worker checks its
 * whole configuration first. Events and reports posted before then wait in
 * its outbox. */
px_agent_t *px_agent_new(const px_agent_config_t *cfg, char *err, size_t errlen);
/* Connects and starts the thread, which registers. 0, or -1 with err. */
int px_agent_start(px_agent_t *a, char *err, size_t errlen);
void px_agent_destroy(px_agent_t **self);

/* What the heartbeats carry: committed step, member state, quorum id held. */
void px_agent_set_progress(px_agent_t *a, int64_t step, int state, int64_t quorum_id);
/* The share (0..1) of step time this rank spent in cross-group
 * communication, sent with every heartbeat from now on (the coordinator's
 * --mode auto weighs rank 0's). Above 1 counts as 1; below 0 or NaN: not
 * measured, and heartbeats carry none (the default). */
void px_agent_set_comm_share(px_agent_t *a, float share);
/* The training figures rank 0 sends with every heartbeat from now on
 * (TrainStats in proto/phalanx.proto): after each committed step, its number,
 * train loss, the tokens the job trained in it and its wall time (seconds <= 0:
 * throughput unknown, the last one stays), and whether the group trains in
 * DiLoCo rounds. Other ranks' calls are ignored: one summary per group. */
void px_agent_set_train_stats(px_agent_t *a, int64_t step, float loss, double tokens, double seconds, int diloco);
/* The latest eval loss (NaN: ignored) and the step it was measured at. */
void px_agent_set_eval_loss(px_agent_t *a, int64_t step, float loss);
/* A heal this process received (worker/heal.c): counted for the summary. */
void px_agent_note_heal(px_agent_t *a, uint64_t bytes, int64_t ms);
int px_agent_registered(px_agent_t *a);
/* Highest quorum id the coordinator has mentioned (pushes and heartbeat acks). */
int64_t px_agent_known_quorum_id(px_agent_t *a);
/* > 0 once the coordinator says a group finished the job at that step (only
 * a step equal to this worker's job_steps counts). */
int64_t px_agent_finished_step(px_agent_t *a);
/* 1 once the coordinator drains this group (phalanxctl drain): the trainer
 * leaves at the step boundary where the others move to the quorum without
 * it (or at once when it is in none). Never cleared. */
int px_agent_draining(px_agent_t *a);
/* Copies the latest pushed quorum into *out (px_quorum_init'd by the caller).
 * 0, or -1 when out of memory (*out unchanged). */
int px_agent_latest_quorum(px_agent_t *a, px_quorum_t *out);

/* How px_agent_request_quorum ended. */
typedef enum {
    PX_QUORUM_GRANTED,   /* *out holds a quorum newer than held_id that includes this group */
    PX_QUORUM_TIMED_OUT, /* none yet: ask again */
    PX_QUORUM_GAVE_UP,   /* the agent is stopping, or hit a fatal error (wrong job or token) */
} px_quorum_request_t;

/* Asks to join the next quorum and waits for a quorum with id > held_id that
 * includes this group. */
px_quorum_request_t px_agent_request_quorum(px_agent_t *a, int64_t step, int64_t held_id, int shrink_only,
                                            int has_checksum, uint64_t checksum, int timeout_ms, px_quorum_t *out);
/* Fire and forget: accused_group NULL means "a peer, unknown which". */
void px_agent_report_failure(px_agent_t *a, const char *accused_group, int accused_rank, int64_t quorum_id,
                             int64_t step, const char *reason);
/* How a rendezvous store call ended. */
typedef enum {
    PX_STORE_OK,
    PX_STORE_MISSING, /* not found within the timeout (or no answer) */
    PX_STORE_STALE,   /* the quorum is no longer current: its store is gone */
    PX_STORE_ERROR,   /* refused or malformed reply */
} px_store_status_t;

/* Rendezvous store. store_get copies at most cap bytes and sets *len to the
 * value's full length. */
px_store_status_t px_agent_store_set(px_agent_t *a, int64_t quorum_id, const char *key, const void *value,
                                     size_t len, int timeout_ms);
px_store_status_t px_agent_store_get(px_agent_t *a, int64_t quorum_id, const char *key, void *buf, size_t cap,
                                     size_t *len, int timeout_ms);
/* Records an event in the coordinator's log (kind: see px_wire_worker_event_kind_ok). Fire and forget. */
void px_agent_notify(px_agent_t *a, const char *kind, int64_t quorum_id, int64_t step, const char *peer_group,
                     uint64_t bytes, unsigned ms, const char *detail);
/* Waits up to timeout_ms until every fire-and-forget frame queued before the
 * call (reports, events, the departure notice) has reached the coordinator:
 * it answered the last of them (frames are answered in order). 0 when they
 * all arrived (or nothing was queued), 1 on timeout. Use before destroying
 * the agent, which discards whatever is still unsent. */
int px_agent_flush(px_agent_t *a, int timeout_ms);
/* Called on the agent thread, with no lock held, after each pushed quorum is
 * stored and whenever a reply raises the highest known quorum id: latest is
 * the latest pushed quorum (its id may be below known_qid when a newer quorum
 * was formed without pushing it to us), known_qid the highest quorum id heard
 * of. Keep it short: the trainer uses it to abort collectives of a stale
 * quorum. Replacing the hook (NULL to remove it) waits until a running call
 * of the old one returns, so its context may be freed afterwards; never
 * call px_agent_set_quorum_hook from inside the hook. */
typedef void (*px_agent_quorum_hook_fn)(void *ctx, const px_quorum_t *latest, int64_t known_qid);
void px_agent_set_quorum_hook(px_agent_t *a, px_agent_quorum_hook_fn fn, void *ctx);
/* Non-empty when the coordinator refused us for good (wrong job, wrong token)
 * or never answered within connect_timeout_s. The text never changes once
 * set; "" before. */
const char *px_agent_fatal_error(px_agent_t *a);
/* 1 when the agent gave up because no coordinator answered its first
 * registration within connect_timeout_s. Until then it logs every few seconds
 * that it is waiting and for whom. Only the first registration is timed: a
 * coordinator that goes away later is waited for (restarts are survivable). */
int px_agent_gave_up(px_agent_t *a);

#endif
