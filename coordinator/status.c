/* Implementation of status.h. */
#include "status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "px_buf.h"

const char *const PX_LIMIT_NAMES[PX_LIMIT_KINDS] = {"members", "store_keys", "store_bytes", "store_waiters"};

void px_histo_init(px_histo_t *h, const double *bounds, int n) {
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->n = n < PX_HISTO_MAX_BOUNDS ? n : PX_HISTO_MAX_BOUNDS;
}

void px_histo_observe(px_histo_t *h, double v) {
    if (!(v >= 0) || !isfinite(v)) return; /* durations only: NaN and negatives are not observations */
    int i = 0;
    while (i < h->n && v > h->bounds[i]) i++;
    h->counts[i]++;
    h->count++;
    h->sum += v;
}

static void histo_metric(px_buf_t *b, const char *name, const char *help, const px_histo_t *h) {
    px_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->counts[i];
        px_buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], (unsigned long long)cum);
    }
    px_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                  (unsigned long long)h->count, name, h->sum, name, (unsigned long long)h->count);
}

static void gauge_metric(px_buf_t *b, const char *name, const char *help, int known, double v) {
    if (known && isfinite(v)) px_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %.6g\n", name, help, name, name, v);
}

static void counter_metric(px_buf_t *b, const char *name, const char *help, uint64_t v) {
    px_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

/* The training figures: gauges from the latest rank-0 telemetry (absent
 * until one is known), counters and histograms of this coordinator run. */
static void train_metrics(px_buf_t *b, const px_train_metrics_t *t) {
    gauge_metric(b, "phalanx_train_loss", "Train loss of the latest committed step (a group's rank 0).", t->has_loss,
                 t->loss);
    gauge_metric(b, "phalanx_eval_loss", "Latest eval loss.", t->has_eval_loss, t->eval_loss);
    gauge_metric(b, "phalanx_tokens_per_second", "Tokens the job trained per second (latest step).",
                 t->has_tokens_per_s, t->tokens_per_s);
    histo_metric(b, "phalanx_step_seconds", "Wall time of committed steps (one observation per step heard of).",
                 &t->step_seconds);
    counter_metric(b, "phalanx_committed_steps_total", "Steps the job committed while this coordinator ran.",
                   t->committed_steps);
    counter_metric(b, "phalanx_recoveries_total", "Group drops the job recovered from (a step committed after).",
                   t->recoveries);
    histo_metric(b, "phalanx_recovery_seconds", "From a group drop to the next committed step.", &t->recovery_seconds);
    counter_metric(b, "phalanx_heal_bytes_total", "Bytes of training state sent to healing groups.", t->heal_bytes);
    histo_metric(b, "phalanx_heal_seconds", "Wall time of finished heals.", &t->heal_seconds);
}

size_t px_status_heap_bytes(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
#else
    return 0;
#endif
}

const char *px_status_member_state(const px_member_t *m, const px_quorum_t *q) {
    if (m->state == PX_STATE_LOST) return strcmp(m->lost_reason, "drained") == 0 ? "left" : "lost";
    if (m->state == PX_STATE_HEALING) return "healing";
    if (px_quorum_find(q, m->group) >= 0) return "healthy";
    return "joining";
}

char *px_status_json(const px_status_view_t *v, size_t *len) {
    px_buf_t b;
    px_buf_init(&b);
    px_buf_printf(&b, "{\"job\":");
    px_buf_json_str(&b, v->job);
    px_buf_printf(&b, ",\"mode\":");
    px_buf_json_str(&b, v->mode);
    px_buf_printf(&b, ",\"mode_reason\":");
    px_buf_json_str(&b, v->mode_reason ? v->mode_reason : "");
    px_buf_printf(&b, ",\"mode_switches\":%llu,\"failures_per_hour\":%.2f,\"comm_share\":",
                  (unsigned long long)v->mode_switches, v->failures_per_hour);
    if (v->has_comm_share) px_buf_printf(&b, "%.3f", v->comm_share);
    else px_buf_printf(&b, "null");
    px_buf_printf(&b, ",\"uptime_ms\":%lld,\"quorum\":{\"id\":%lld,\"step\":%lld,\"groups\":[",
                  (long long)v->uptime_ms, (long long)v->quorum->id, (long long)v->quorum->max_step);
    for (int i = 0; i < v->quorum->n; i++) {
        if (i) px_buf_append(&b, ",", 1);
        px_buf_json_str(&b, v->quorum->groups[i].name);
    }
    px_buf_printf(&b, "],\"heal\":[");
    int k = 0;
    for (int i = 0; i < v->quorum->n; i++) {
        const px_quorum_member_t *g = &v->quorum->groups[i];
        if (!g->heal) continue;
        px_buf_printf(&b, "%s{\"group\":", k++ ? "," : "");
        px_buf_json_str(&b, g->name);
        px_buf_printf(&b, ",\"source\":");
        px_buf_json_str(&b, g->heal_source);
        px_buf_printf(&b, "}");
    }
    px_buf_printf(&b, "]},\"members_total\":%d,\"members\":[", v->members->n);
    k = 0;
    for (int i = 0; !v->omit_members && i < v->members->n; i++) {
        const px_member_t *m = &v->members->members[i];
        px_buf_printf(&b, "%s{\"group\":", k++ ? "," : "");
        px_buf_json_str(&b, m->group);
        px_buf_printf(&b, ",\"rank\":%d,\"pid\":%d,\"host\":", m->rank, m->pid);
        px_buf_json_str(&b, m->host);
        px_buf_printf(&b, ",\"data_host\":");
        px_buf_json_str(&b, m->data_host);
        px_buf_printf(&b, ",\"step\":%lld,\"state\":\"%s\",\"last_heartbeat_ms\":%lld,\"quorum_id\":%lld",
                      (long long)m->step, px_status_member_state(m, v->quorum),
                      (long long)(v->now_ms - m->last_hb_ms), (long long)m->quorum_id);
        if (m->via_leader) px_buf_printf(&b, ",\"via_leader\":true"); /* step, last heartbeat: its leader's report */
        if (m->draining) px_buf_printf(&b, ",\"draining\":true"); /* phalanxctl drain: leaving at a step boundary */
        if (m->state == PX_STATE_LOST) {
            px_buf_printf(&b, ",\"lost_reason\":");
            px_buf_json_str(&b, m->lost_reason);
        }
        px_buf_printf(&b, "}");
    }
    px_buf_printf(&b,
                  "],\"events\":{\"produced\":%llu,\"delivered\":%llu,\"pending\":%llu,\"spilled\":%llu,"
                  "\"delivery_failures\":%llu},\"bad_messages\":%llu,\"heartbeats_per_s\":%.1f,"
                  "\"outer_steps\":%llu,\"outer_wire_bytes\":%llu}\n",
                  (unsigned long long)v->events.produced, (unsigned long long)v->events.delivered,
                  (unsigned long long)v->events.pending, (unsigned long long)v->events.spilled,
                  (unsigned long long)v->events.delivery_failures, (unsigned long long)v->stats->bad_messages,
                  v->stats->heartbeats_per_s, (unsigned long long)v->stats->outer_steps,
                  (unsigned long long)v->stats->outer_wire_bytes);
    return px_buf_take(&b, len);
}

char *px_status_metrics(const px_status_view_t *v, size_t *len) {
    int counts[4] = {0};
    for (int i = 0; i < v->members->n; i++) {
        const char *s = px_status_member_state(&v->members->members[i], v->quorum);
        counts[strcmp(s, "joining") == 0 ? 0 : strcmp(s, "healthy") == 0 ? 1 : strcmp(s, "healing") == 0 ? 2 : 3]++;
    }
    static const char *names[4] = {"joining", "healthy", "healing", "lost"};
    px_buf_t b;
    px_buf_init(&b);
    px_buf_printf(&b, "# HELP phalanx_members Members by state.\n# TYPE phalanx_members gauge\n");
    for (int i = 0; i < 4; i++) px_buf_printf(&b, "phalanx_members{state=\"%s\"} %d\n", names[i], counts[i]);
    px_buf_printf(&b,
                  "# HELP phalanx_quorum_id Current quorum id.\n# TYPE phalanx_quorum_id gauge\nphalanx_quorum_id %lld\n"
                  "# HELP phalanx_quorum_groups Groups in the current quorum.\n# TYPE phalanx_quorum_groups gauge\nphalanx_quorum_groups %d\n"
                  "# HELP phalanx_quorum_step Highest committed step among quorum groups.\n# TYPE phalanx_quorum_step gauge\nphalanx_quorum_step %lld\n"
                  "# HELP phalanx_quorums_formed_total Quorums formed by this coordinator run.\n# TYPE phalanx_quorums_formed_total counter\nphalanx_quorums_formed_total %llu\n"
                  "# HELP phalanx_events_produced_total Events emitted.\n# TYPE phalanx_events_produced_total counter\nphalanx_events_produced_total %llu\n"
                  "# HELP phalanx_events_delivered_total Events confirmed delivered by the sink.\n# TYPE phalanx_events_delivered_total counter\nphalanx_events_delivered_total %llu\n"
                  "# HELP phalanx_events_pending Events not yet confirmed delivered (memory and spill file).\n# TYPE phalanx_events_pending gauge\nphalanx_events_pending %llu\n"
                  "# HELP phalanx_events_spilled Events waiting in the spill file.\n# TYPE phalanx_events_spilled gauge\nphalanx_events_spilled %llu\n"
                  "# HELP phalanx_event_delivery_failures_total Delivery reports with an error.\n# TYPE phalanx_event_delivery_failures_total counter\nphalanx_event_delivery_failures_total %llu\n"
                  "# HELP phalanx_bad_messages_total Frames rejected by validation.\n# TYPE phalanx_bad_messages_total counter\nphalanx_bad_messages_total %llu\n"
                  "# HELP phalanx_auth_rejected_total Frames rejected for a missing or wrong job token.\n# TYPE phalanx_auth_rejected_total counter\nphalanx_auth_rejected_total %llu\n"
                  "# HELP phalanx_heartbeats_total Heartbeats handled.\n# TYPE phalanx_heartbeats_total counter\nphalanx_heartbeats_total %llu\n"
                  "# HELP phalanx_heartbeats_per_second Heartbeats handled per second (last second).\n# TYPE phalanx_heartbeats_per_second gauge\nphalanx_heartbeats_per_second %.1f\n"
                  "# HELP phalanx_relayed_rank_reports_total Ranks reported alive by their group leader's digest (--liveness group).\n# TYPE phalanx_relayed_rank_reports_total counter\nphalanx_relayed_rank_reports_total %llu\n"
                  "# HELP phalanx_heartbeat_acks_skipped_total Heartbeats not answered (nothing new for the worker; acked once a second).\n# TYPE phalanx_heartbeat_acks_skipped_total counter\nphalanx_heartbeat_acks_skipped_total %llu\n"
                  "# HELP phalanx_quorum_delta_pushes_total Quorum pushes sent as a delta against the quorum before.\n# TYPE phalanx_quorum_delta_pushes_total counter\nphalanx_quorum_delta_pushes_total %llu\n"
                  "# HELP phalanx_udp_heartbeats_total Heartbeats that came as sealed UDP datagrams.\n# TYPE phalanx_udp_heartbeats_total counter\nphalanx_udp_heartbeats_total %llu\n"
                  "# HELP phalanx_udp_datagrams_dropped_total UDP datagrams refused (malformed, unknown sender, forged, replayed, not a heartbeat).\n# TYPE phalanx_udp_datagrams_dropped_total counter\nphalanx_udp_datagrams_dropped_total %llu\n"
                  "# HELP phalanx_udp_off_total Members told to heartbeat over their connection: their UDP heartbeats stopped arriving.\n# TYPE phalanx_udp_off_total counter\nphalanx_udp_off_total %llu\n"
                  "# HELP phalanx_store_keys Keys in the rendezvous store.\n# TYPE phalanx_store_keys gauge\nphalanx_store_keys %zu\n",
                  (long long)v->quorum->id, v->quorum->n, (long long)v->quorum->max_step,
                  (unsigned long long)v->stats->quorums_formed, (unsigned long long)v->events.produced,
                  (unsigned long long)v->events.delivered, (unsigned long long)v->events.pending,
                  (unsigned long long)v->events.spilled, (unsigned long long)v->events.delivery_failures,
                  (unsigned long long)v->stats->bad_messages, (unsigned long long)v->stats->auth_rejected,
                  (unsigned long long)v->stats->heartbeats, v->stats->heartbeats_per_s,
                  (unsigned long long)v->stats->relayed_ranks, (unsigned long long)v->stats->acks_skipped,
                  (unsigned long long)v->stats->delta_pushes, (unsigned long long)v->stats->udp_heartbeats,
                  (unsigned long long)v->stats->udp_dropped, (unsigned long long)v->stats->udp_off, v->store_keys);
    px_buf_printf(&b,
                  "# HELP phalanx_identity_conflicts_total Registrations refused: the (group, rank) is held by a live process.\n# TYPE phalanx_identity_conflicts_total counter\nphalanx_identity_conflicts_total %llu\n"
                  "# HELP phalanx_reports_refused_total Failure reports and run_finished refused (not from the current quorum, or a wrong step).\n# TYPE phalanx_reports_refused_total counter\nphalanx_reports_refused_total %llu\n"
                  "# HELP phalanx_members_stalled_total Quorum members dropped for not joining the quorum's rendezvous.\n# TYPE phalanx_members_stalled_total counter\nphalanx_members_stalled_total %llu\n"
                  "# HELP phalanx_loop_stalls_total Event loop turns late by more than a heartbeat interval (deadlines shifted).\n# TYPE phalanx_loop_stalls_total counter\nphalanx_loop_stalls_total %llu\n",
                  (unsigned long long)v->stats->identity_conflicts, (unsigned long long)v->stats->reports_refused,
                  (unsigned long long)v->stats->members_stalled, (unsigned long long)v->stats->loop_stalls);
    px_buf_printf(&b,
                  "# HELP phalanx_store_bytes Bytes of keys and values in the rendezvous store.\n# TYPE phalanx_store_bytes gauge\nphalanx_store_bytes %zu\n"
                  "# HELP phalanx_store_waiters Store reads waiting for their key.\n# TYPE phalanx_store_waiters gauge\nphalanx_store_waiters %zu\n"
                  "# HELP phalanx_heap_bytes Bytes allocated and in use (malloc, all threads).\n# TYPE phalanx_heap_bytes gauge\nphalanx_heap_bytes %zu\n"
                  "# HELP phalanx_members_expired_total Lost members removed from the table (grace period over, or room needed).\n"
                  "# TYPE phalanx_members_expired_total counter\nphalanx_members_expired_total %llu\n"
                  "# HELP phalanx_limit_refusals_total Requests refused because a limit was reached.\n"
                  "# TYPE phalanx_limit_refusals_total counter\n",
                  v->store_bytes, v->store_waiters, v->heap_bytes, (unsigned long long)v->members->removed);
    for (int i = 0; i < PX_LIMIT_KINDS; i++)
        px_buf_printf(&b, "phalanx_limit_refusals_total{limit=\"%s\"} %llu\n", PX_LIMIT_NAMES[i],
                      (unsigned long long)v->stats->limit_refusals[i]);
    px_buf_printf(&b,
                  "# HELP phalanx_outer_steps_total DiLoCo outer steps committed (outer_step events).\n"
                  "# TYPE phalanx_outer_steps_total counter\nphalanx_outer_steps_total %llu\n"
                  "# HELP phalanx_outer_wire_bytes_total Bytes one rank sent for the pseudo-gradients of those outer "
                  "steps (the reporter's count; every rank of a cross-group ring sends about as much).\n"
                  "# TYPE phalanx_outer_wire_bytes_total counter\nphalanx_outer_wire_bytes_total %llu\n",
                  (unsigned long long)v->stats->outer_steps, (unsigned long long)v->stats->outer_wire_bytes);
    px_buf_printf(&b,
                  "# HELP phalanx_mode_switches_total Switches between sync and DiLoCo (--mode auto).\n"
                  "# TYPE phalanx_mode_switches_total counter\nphalanx_mode_switches_total %llu\n"
                  "# HELP phalanx_mode_diloco The mode quorums announce: 1 DiLoCo, 0 sync.\n"
                  "# TYPE phalanx_mode_diloco gauge\nphalanx_mode_diloco %d\n"
                  "# HELP phalanx_failures_per_hour Group losses (not planned leaves) over the --auto-window, per hour.\n"
                  "# TYPE phalanx_failures_per_hour gauge\nphalanx_failures_per_hour %.2f\n",
                  (unsigned long long)v->mode_switches, v->mode_diloco, v->failures_per_hour);
    if (v->has_comm_share)
        px_buf_printf(&b,
                      "# HELP phalanx_comm_share Share of step time in cross-group communication (mean over the "
                      "quorum's groups' rank 0).\n# TYPE phalanx_comm_share gauge\nphalanx_comm_share %.3f\n",
                      v->comm_share);
    if (v->train) train_metrics(&b, v->train);
    return px_buf_take(&b, len);
}

extern const char PX_DASHBOARD_HTML[]; /* coordinator/dashboard.html, embedded by coordinator.cmake */
extern const size_t PX_DASHBOARD_HTML_LEN;

char *px_status_html(const px_status_view_t *v, size_t *len) {
    (void)v; /* the page asks /api/history for everything it shows */
    char *page = malloc(PX_DASHBOARD_HTML_LEN + 1);
    if (!page) return NULL;
    memcpy(page, PX_DASHBOARD_HTML, PX_DASHBOARD_HTML_LEN + 1);
    if (len) *len = PX_DASHBOARD_HTML_LEN;
    return page;
}

char *px_status_text(const px_status_view_t *v, size_t *len) {
    px_buf_t b;
    px_buf_init(&b);
    px_buf_printf(&b, "job %s  mode %s  uptime %.1fs\n", v->job, v->mode, (double)v->uptime_ms / 1000.0);
    if (v->mode_reason && v->mode_reason[0])
        px_buf_printf(&b, "mode switched %llu time%s, last: %s\n", (unsigned long long)v->mode_switches,
                      v->mode_switches == 1 ? "" : "s", v->mode_reason);
    px_buf_printf(&b, "quorum %lld  step %lld  groups [", (long long)v->quorum->id, (long long)v->quorum->max_step);
    for (int i = 0; i < v->quorum->n; i++) px_buf_printf(&b, "%s%s", i ? " " : "", v->quorum->groups[i].name);
    px_buf_printf(&b, "]\nevents produced %llu  pending %llu  spilled %llu  delivery failures %llu  bad messages %llu  heartbeats/s %.0f\n\n",
                  (unsigned long long)v->events.produced, (unsigned long long)v->events.pending,
                  (unsigned long long)v->events.spilled, (unsigned long long)v->events.delivery_failures,
                  (unsigned long long)v->stats->bad_messages, v->stats->heartbeats_per_s);
    px_buf_printf(&b, "%-16s %5s %8s %-16s %-15s %10s %-8s %s\n", "GROUP", "RANK", "PID", "HOST", "DATA HOST", "STEP",
                  "STATE", "LAST HEARTBEAT");
    for (int i = 0; i < v->members->n; i++) {
        const px_member_t *m = &v->members->members[i];
        px_buf_printf(&b, "%-16s %5d %8d %-16.16s %-15.39s %10lld %-8s %lld ms ago%s%s%s\n", m->group, m->rank, m->pid,
                      m->host, m->data_host[0] ? m->data_host : "-",
                      (long long)m->step, px_status_member_state(m, v->quorum), (long long)(v->now_ms - m->last_hb_ms),
                      m->via_leader ? " (via leader)" : m->draining && m->state != PX_STATE_LOST ? " (draining)" : "",
                      m->state == PX_STATE_LOST ? "  " : "",
                      m->state == PX_STATE_LOST ? m->lost_reason : "");
    }
    return px_buf_take(&b, len);
}
