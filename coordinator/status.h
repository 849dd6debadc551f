/* Renders what the coordinator knows for people and tools: the /status JSON
 * document (its contract is in docs/protocol.md; tests and phalanxctl rely on
 * it), Prometheus /metrics text and the small self-refreshing HTML dashboard.
 * Pure functions of a read-only view, so the formats are testable. */
#ifndef PX_STATUS_H
#define PX_STATUS_H

#include <stddef.h>
#include <stdint.h>

#include "membership.h"
#include "quorum.h"

typedef struct {
    uint64_t bad_messages, heartbeats, quorums_formed, auth_rejected, messages;
    uint64_t identity_conflicts, reports_refused, members_stalled, loop_stalls;
    double heartbeats_per_s;
    int64_t last_loss_ms, last_quorum_ms;
} px_coord_stats_t;

typedef struct {
    uint64_t produced, delivered, pending, spilled, delivery_failures;
} px_status_events_t;

typedef struct {
    const char *job, *mode;
    const px_quorum_t *quorum;
    const px_members_t *members;
    const px_coord_stats_t *stats;
    px_status_events_t events;
    size_t store_keys;
    int64_t now_ms, uptime_ms;
} px_status_view_t;

/* "joining" | "healthy" | "healing" | "lost" for member m given the quorum. */
const char *px_status_member_state(const px_member_t *m, const px_quorum_t *q);
char *px_status_json(const px_status_view_t *v, size_t *len);
char *px_status_metrics(const px_status_view_t *v, size_t *len);
/* A plain-text table for terminals (phalanxctl status). */
char *px_status_text(const px_status_view_t *v, size_t *len);
char *px_status_html(const px_status_view_t *v, size_t *len);

#endif
