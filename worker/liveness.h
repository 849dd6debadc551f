/* Group-level liveness (--liveness group; docs/protocol.md "Group-level
 * liveness"): a replica group is the unit of failure, so the coordinator need
 * not hear every rank. Rank 0's agent (the leader) binds a ZeroMQ ROUTER,
 * publishes its endpoint at registration, takes its ranks' heartbeats there
 * and reports for them with a digest on its own heartbeat; it forwards each
 * quorum the coordinator pushes to it to its ranks, and tells a rank the
 * coordinator does not know to register again. The other ranks' agents
 * heartbeat the leader instead of the coordinator while the leader answers,
 * and fall back to the coordinator when it does not.
 *
 * The leader side and the rank side are driven by the agent thread (no
 * locking here). px_liveness_digest is the pure part: which ranks count as
 * alive, and their step range. */
#ifndef PX_LIVENESS_H
#define PX_LIVENESS_H

#include <stddef.h>
#include <stdint.h>

#include "px_wire.h"

#define PX_LIVENESS_WINDOW_INTERVALS 1.5 /* a rank is in the digest if heard within this many intervals */
#define PX_LIVENESS_FALLBACK_INTERVALS 3 /* a rank heartbeats the coordinator when its leader is this quiet */

typedef struct {
    int64_t heard_ms; /* 0: never, or told to register again */
    int64_t step;
} px_rank_seen_t;

/* The digest of ranks 1..n-1 (rank 0 is the leader itself): bit r of bits
 * set when rank r was heard within window_ms of now. *len is the bytes used
 * (0 when nobody was heard); *min_step and *max_step span the heard ranks'
 * steps (0 when none). bits must hold (n + 7) / 8 bytes. Pure. */
void px_liveness_digest(const px_rank_seen_t *ranks, int n, int64_t now_ms, int64_t window_ms, uint8_t *bits,
                        size_t *len, int64_t *min_step, int64_t *max_step);

/* ---- leader (rank 0) ---- */
typedef struct px_liveness_leader px_liveness_leader_t;

/* Binds tcp://host:* in zctx. endpoint receives the address to publish. NULL
 * with err filled when it cannot bind. token: the job token ranks must send
 * ("" for none). */
px_liveness_leader_t *px_liveness_leader_new(void *zctx, const char *host, const char *group, int group_size,
                                             const char *token, char *endpoint, size_t endpoint_len, char *err,
                                             size_t errlen);
void px_liveness_leader_destroy(px_liveness_leader_t **self);
void *px_liveness_leader_socket(px_liveness_leader_t *l);
/* Reads what the ranks sent (a bounded batch) and, when answer is set,
 * answers each heartbeat: a quorum frame it has not had yet, then a
 * HeartbeatAck with known_qid and finished_step (or, for a rank the
 * coordinator does not know, UNKNOWN_MEMBER). A leader the coordinator does
 * not accept now (not registered) does not answer: its ranks fall back. */
void px_liveness_leader_read(px_liveness_leader_t *l, int64_t now_ms, int answer, int64_t known_qid,
                             int64_t finished_step);
/* Fills d (and its alive bytes, in l) for the leader's next heartbeat. */
void px_liveness_leader_digest(px_liveness_leader_t *l, int64_t now_ms, int64_t interval_ms, Phalanx__GroupDigest *d);
/* A quorum frame from the coordinator: kept, and sent now to every rank heard
 * recently (the others get it with their next heartbeat's answer). */
void px_liveness_leader_forward(px_liveness_leader_t *l, const void *frame, size_t len, int64_t qid, int64_t now_ms,
                                int64_t interval_ms);
/* The coordinator's latest HeartbeatAck named these ranks as unknown to it
 * (len 0: none); replaces what an earlier ack said. */
void px_liveness_leader_unknown(px_liveness_leader_t *l, const uint8_t *bits, size_t len);

/* ---- rank > 0 ---- */
typedef struct px_liveness_link px_liveness_link_t;

px_liveness_link_t *px_liveness_link_new(void *zctx, const char *ident, size_t ident_len);
void px_liveness_link_destroy(px_liveness_link_t **self);
/* Heartbeat the leader at endpoint from now on (a new endpoint: reconnects). */
void px_liveness_link_set_leader(px_liveness_link_t *k, const char *endpoint, int64_t now_ms);
void *px_liveness_link_socket(px_liveness_link_t *k); /* NULL until a leader is known */
/* 1 when the leader answered within PX_LIVENESS_FALLBACK_INTERVALS: heartbeat
 * it alone; 0: heartbeat the coordinator (and the leader, if one is known). */
int px_liveness_link_up(const px_liveness_link_t *k, int64_t now_ms, int64_t interval_ms);
void px_liveness_link_send(px_liveness_link_t *k, const void *buf, size_t len);
/* Receives one frame from the leader (NULL: none); an answer counts as the
 * leader being up. The caller frees it with px_wire_free. */
px_msg_t *px_liveness_link_recv(px_liveness_link_t *k, int64_t now_ms);

#endif
