/* GET /metrics: the Prometheus text exposition (format 0.0.4) of a status
 * view (status.h). The names and what they mean are listed in
 * docs/operations.md, "Watching it"; deploy/grafana and deploy/prometheus
 * hold a dashboard and alert rules built on them.
 *
 * Every sample carries job="<--job>" as its first label, so one Prometheus
 * scraping several coordinators tells their jobs apart and a dashboard picks
 * one (label_values(phalanx_build_info, job)). Prometheus sets a `job` label
 * of its own (the scrape configuration's name) on what it scrapes: the scrape
 * needs honor_labels: true for this one to be kept.
 *
 * Groups have series of their own (phalanx_group_*{group}), one per group
 * and metric, while the job has at most metrics_groups of them
 * (--metrics-groups); past that no group has any, rather than a subset that
 * changes whenever the member table moves, phalanx_groups{state} still counts
 * them all and phalanx_metrics_groups_omitted says how many went unlisted.
 *
 * A figure that is not known yet (a loss before any report, an ETA without a
 * pace, a checkpoint before one was heard of) is absent rather than 0, so an
 * alert on it does not fire on a made-up value. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "px_buf.h"
#include "status.h"

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

/* The text being built, and the job label every sample starts with. */
typedef struct {
    px_buf_t b;
    px_buf_t job; /* job="...", escaped */
} expo_t;

/* A label value: backslash, double quote and newline escaped (the text
 * format's rule). Job and group names are [A-Za-z0-9_.-] already; the
 * version string is whatever git describe said. */
static void put_label_value(px_buf_t *b, const char *s) {
    for (const char *p = s; *p; p++) {
        if (*p == '\\') px_buf_append(b, "\\\\", 2);
        else if (*p == '"') px_buf_append(b, "\\\"", 2);
        else if (*p == '\n') px_buf_append(b, "\\n", 2);
        else px_buf_append(b, p, 1);
    }
}

static void family(expo_t *e, const char *name, const char *type, const char *help) {
    px_buf_printf(&e->b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A sample is begin(), any label(), then one of the end_*() with its value. */
static void begin(expo_t *e, const char *name) {
    px_buf_printf(&e->b, "%s{", name);
    px_buf_append(&e->b, e->job.data, e->job.len);
}

static void label(expo_t *e, const char *key, const char *value) {
    px_buf_printf(&e->b, ",%s=\"", key);
    put_label_value(&e->b, value);
    px_buf_append(&e->b, "\"", 1);
}

static void end_u64(expo_t *e, uint64_t v) { px_buf_printf(&e->b, "} %llu\n", (unsigned long long)v); }
static void end_i64(expo_t *e, int64_t v) { px_buf_printf(&e->b, "} %lld\n", (long long)v); }

static void end_f(expo_t *e, const char *fmt, double v) {
    px_buf_append(&e->b, "} ", 2);
    px_buf_printf(&e->b, fmt, v);
    px_buf_append(&e->b, "\n", 1);
}

static void counter(expo_t *e, const char *name, const char *help, uint64_t v) {
    family(e, name, "counter", help);
    begin(e, name);
    end_u64(e, v);
}

static void gauge_i64(expo_t *e, const char *name, const char *help, int64_t v) {
    family(e, name, "gauge", help);
    begin(e, name);
    end_i64(e, v);
}

/* A gauge printed with fmt; absent unless known and finite. */
static void gauge_f(expo_t *e, const char *name, const char *help, int known, const char *fmt, double v) {
    if (!known || !isfinite(v)) return;
    family(e, name, "gauge", help);
    begin(e, name);
    end_f(e, fmt, v);
}

static void histogram(expo_t *e, const char *name, const char *help, const px_histo_t *h) {
    family(e, name, "histogram", help);
    char bucket[96], le[32];
    snprintf(bucket, sizeof bucket, "%s_bucket", name);
    uint64_t cum = 0;
    for (int i = 0; i <= h->n; i++) {
        cum += h->counts[i];
        if (i < h->n) snprintf(le, sizeof le, "%g", h->bounds[i]);
        else snprintf(le, sizeof le, "+Inf");
        begin(e, bucket);
        label(e, "le", le);
        end_u64(e, i < h->n ? cum : h->count);
    }
    px_buf_printf(&e->b, "%s_sum{", name);
    px_buf_append(&e->b, e->job.data, e->job.len);
    end_f(e, "%.6f", h->sum);
    px_buf_printf(&e->b, "%s_count{", name);
    px_buf_append(&e->b, e->job.data, e->job.len);
    end_u64(e, h->count);
}

/* The job as a whole: its build, how far and how fast it goes, its newest
 * checkpoint (job_progress.h). */
static void job_metrics(expo_t *e, const px_status_view_t *v) {
    family(e, "phalanx_build_info", "gauge", "Always 1: the coordinator's build (git describe) in its version label.");
    begin(e, "phalanx_build_info");
    label(e, "version", v->version && v->version[0] ? v->version : "unknown");
    end_u64(e, 1);
    const px_progress_t *p = v->progress;
    gauge_f(e, "phalanx_job_step", "The job's committed step: the highest a quorum member reached.", p && p->step >= 0,
            "%.0f", p ? (double)p->step : NAN);
    gauge_f(e, "phalanx_job_target_steps",
            "The job's length: the largest --steps a live worker registered with (absent while none is live).",
            v->target_step > 0, "%.0f", (double)v->target_step);
    gauge_i64(e, "phalanx_job_finished", "1 once a quorum member committed the job's last step, else 0.",
              v->job_finished ? 1 : 0);
    gauge_f(e, "phalanx_job_eta_seconds",
            "Seconds until the job reaches its target at the pace of the last minute (absent while either is "
            "unknown or the pace 0).",
            p != NULL, "%.0f", p ? px_progress_eta_s(p, v->target_step, v->now_ms) : NAN);
    gauge_f(e, "phalanx_smoothed_tokens_per_second",
            "Tokens the job trains per second, smoothed (exponential, 10 s time constant).", p != NULL, "%.1f",
            p ? px_progress_tokens_per_s(p) : NAN);
    int ckpt = p && p->checkpoint_step >= 0;
    gauge_f(e, "phalanx_last_checkpoint_step", "Step of the newest checkpoint saved while this coordinator ran.", ckpt,
            "%.0f", ckpt ? (double)p->checkpoint_step : NAN);
    gauge_f(e, "phalanx_last_checkpoint_age_seconds", "Seconds since the newest checkpoint was saved (wall clock).",
            ckpt, "%.0f", ckpt ? fmax(0.0, (double)(v->wall_ms - p->checkpoint_wall_ms) / 1000.0) : NAN);
}

/* The training figures: gauges from the latest rank-0 telemetry (absent
 * until one is known), counters and histograms of this coordinator run. */
static void train_metrics(expo_t *e, const px_train_metrics_t *t) {
    gauge_f(e, "phalanx_train_loss", "Train loss of the latest committed step (a group's rank 0).", t->has_loss,
            "%.6g", t->loss);
    gauge_f(e, "phalanx_eval_loss", "Latest eval loss.", t->has_eval_loss, "%.6g", t->eval_loss);
    gauge_f(e, "phalanx_tokens_per_second", "Tokens the job trained per second (latest step).", t->has_tokens_per_s,
            "%.6g", t->tokens_per_s);
    histogram(e, "phalanx_step_seconds", "Wall time of committed steps (one observation per step heard of).",
              &t->step_seconds);
    counter(e, "phalanx_committed_steps_total", "Steps the job committed while this coordinator ran.",
            t->committed_steps);
    counter(e, "phalanx_recoveries_total", "Group drops the job recovered from (a step committed after).",
            t->recoveries);
    histogram(e, "phalanx_recovery_seconds", "From a group drop to the next committed step.", &t->recovery_seconds);
    histogram(e, "phalanx_spare_promotion_seconds",
              "From a group's loss to the first committed step of the spare that took its place.",
              &t->promotion_seconds);
    counter(e, "phalanx_checkpoints_deferred_total",
            "Checkpoints deferred because the previous save still wrote when they were due (checkpoint_deferred).",
            t->checkpoints_deferred);
    counter(e, "phalanx_heal_bytes_total", "Bytes of training state sent to healing groups.", t->heal_bytes);
    histogram(e, "phalanx_heal_seconds", "Wall time of finished heals.", &t->heal_seconds);
}

enum { G_JOINING, G_HEALTHY, G_HEALING, G_LOST, G_LEFT, G_SPARE, G_STATES };
static const char *const GROUP_STATES[G_STATES] = {"joining", "healthy", "healing", "lost", "left", "spare"};

static int state_index(const char *s) {
    for (int i = 0; i < G_STATES; i++)
        if (strcmp(s, GROUP_STATES[i]) == 0) return i;
    return G_LOST;
}

/* Groups, each as its rank 0 is (as /status "groups"): counts by state
 * always, a group's own series while there are at most metrics_groups. */
static void group_metrics(expo_t *e, const px_status_view_t *v) {
    int counts[G_STATES] = {0}, n = 0;
    for (int i = 0; i < v->members->n; i++) {
        const px_member_t *m = &v->members->members[i];
        if (m->rank != 0) continue;
        counts[state_index(px_status_member_state(m, v->quorum, v->target_groups))]++;
        n++;
    }
    family(e, "phalanx_groups", "gauge", "Groups by state, each as its rank 0 is (left: gone by a drain).");
    for (int s = 0; s < G_STATES; s++) {
        begin(e, "phalanx_groups");
        label(e, "state", GROUP_STATES[s]);
        end_u64(e, (uint64_t)counts[s]);
    }
    gauge_i64(e, "phalanx_target_groups", "--target-groups: at most this many groups train (0: every healthy group).",
              v->target_groups);
    gauge_i64(e, "phalanx_spares", "Groups waiting as spares, out of a quorum that holds --target-groups.",
              counts[G_SPARE]);
    int listed = n <= v->metrics_groups;
    gauge_i64(e, "phalanx_metrics_groups_omitted",
              "Groups without phalanx_group_* series: all of them when the job has more than --metrics-groups.",
              listed ? 0 : n);
    if (!listed || n == 0) return;
    family(e, "phalanx_group_step", "gauge", "A group's step, as its rank 0 heartbeats it.");
    for (int i = 0; i < v->members->n; i++) {
        const px_member_t *m = &v->members->members[i];
        if (m->rank != 0) continue;
        begin(e, "phalanx_group_step");
        label(e, "group", m->group);
        end_i64(e, m->step);
    }
    family(e, "phalanx_group_state", "gauge",
           "1, one series per group, its state in the state label (joining, healthy, healing, lost, left, spare).");
    for (int i = 0; i < v->members->n; i++) {
        const px_member_t *m = &v->members->members[i];
        if (m->rank != 0) continue;
        begin(e, "phalanx_group_state");
        label(e, "group", m->group);
        label(e, "state", px_status_member_state(m, v->quorum, v->target_groups));
        end_u64(e, 1);
    }
    family(e, "phalanx_group_drops_total", "counter",
           "Times the group was dropped from a quorum, drains not counted (kept while its rank 0 stays listed).");
    for (int i = 0; i < v->members->n; i++) {
        const px_member_t *m = &v->members->members[i];
        if (m->rank != 0) continue;
        begin(e, "phalanx_group_drops_total");
        label(e, "group", m->group);
        end_u64(e, m->group_drops);
    }
}

/* The coordinator itself: members, quorum, event sink, protocol counters,
 * the rendezvous store and the limits. */
static void coordinator_metrics(expo_t *e, const px_status_view_t *v) {
    static const char *const MEMBER_STATES[5] = {"joining", "healthy", "healing", "lost", "spare"};
    int counts[5] = {0};
    for (int i = 0; i < v->members->n; i++) {
        const char *s = px_status_member_state(&v->members->members[i], v->quorum, v->target_groups);
        counts[strcmp(s, "joining") == 0   ? 0
               : strcmp(s, "healthy") == 0 ? 1
               : strcmp(s, "healing") == 0 ? 2
               : strcmp(s, "spare") == 0   ? 4
                                           : 3]++;
    }
    family(e, "phalanx_members", "gauge", "Members by state (lost includes those gone by a drain).");
    for (int i = 0; i < 5; i++) {
        begin(e, "phalanx_members");
        label(e, "state", MEMBER_STATES[i]);
        end_u64(e, (uint64_t)counts[i]);
    }
    const px_coord_stats_t *st = v->stats;
    gauge_i64(e, "phalanx_quorum_id", "Current quorum id.", v->quorum->id);
    gauge_i64(e, "phalanx_quorum_groups", "Groups in the current quorum.", v->quorum->n);
    gauge_i64(e, "phalanx_quorum_step", "Highest committed step among quorum groups.", v->quorum->max_step);
    counter(e, "phalanx_quorums_formed_total", "Quorums formed by this coordinator run.", st->quorums_formed);
    counter(e, "phalanx_events_produced_total", "Events emitted.", v->events.produced);
    counter(e, "phalanx_events_delivered_total", "Events confirmed delivered by the sink.", v->events.delivered);
    gauge_i64(e, "phalanx_events_pending", "Events not yet confirmed delivered (memory and spill file).",
              (int64_t)v->events.pending);
    gauge_i64(e, "phalanx_events_spilled", "Events waiting in the spill file.", (int64_t)v->events.spilled);
    counter(e, "phalanx_event_delivery_failures_total", "Delivery reports with an error.",
            v->events.delivery_failures);
    counter(e, "phalanx_bad_messages_total", "Frames rejected by validation.", st->bad_messages);
    counter(e, "phalanx_auth_rejected_total", "Frames rejected for a missing or wrong job token.", st->auth_rejected);
    counter(e, "phalanx_heartbeats_total", "Heartbeats handled.", st->heartbeats);
    gauge_f(e, "phalanx_heartbeats_per_second", "Heartbeats handled per second (last second).", 1, "%.1f",
            st->heartbeats_per_s);
    counter(e, "phalanx_relayed_rank_reports_total",
            "Ranks reported alive by their group leader's digest (--liveness group).", st->relayed_ranks);
    counter(e, "phalanx_heartbeat_acks_skipped_total",
            "Heartbeats not answered (nothing new for the worker; acked once a second).", st->acks_skipped);
    counter(e, "phalanx_quorum_delta_pushes_total", "Quorum pushes sent as a delta against the quorum before.",
            st->delta_pushes);
    counter(e, "phalanx_udp_heartbeats_total", "Heartbeats that came as sealed UDP datagrams.", st->udp_heartbeats);
    counter(e, "phalanx_udp_datagrams_dropped_total",
            "UDP datagrams refused (malformed, unknown sender, forged, replayed, not a heartbeat).", st->udp_dropped);
    counter(e, "phalanx_udp_off_total",
            "Members told to heartbeat over their connection: their UDP heartbeats stopped arriving.", st->udp_off);
    counter(e, "phalanx_identity_conflicts_total",
            "Registrations refused: the (group, rank) is held by a live process.", st->identity_conflicts);
    counter(e, "phalanx_reports_refused_total",
            "Failure reports and run_finished refused (not from the current quorum, or a wrong step).",
            st->reports_refused);
    counter(e, "phalanx_members_stalled_total", "Quorum members dropped for not joining the quorum's rendezvous.",
            st->members_stalled);
    counter(e, "phalanx_loop_stalls_total",
            "Event loop turns late by more than a heartbeat interval (deadlines shifted).", st->loop_stalls);
    gauge_i64(e, "phalanx_store_keys", "Keys in the rendezvous store.", (int64_t)v->store_keys);
    gauge_i64(e, "phalanx_store_bytes", "Bytes of keys and values in the rendezvous store.", (int64_t)v->store_bytes);
    gauge_i64(e, "phalanx_store_waiters", "Store reads waiting for their key.", (int64_t)v->store_waiters);
    gauge_i64(e, "phalanx_heap_bytes", "Bytes allocated and in use (malloc, all threads).", (int64_t)v->heap_bytes);
    counter(e, "phalanx_members_expired_total",
            "Lost members removed from the table (grace period over, or room needed).", v->members->removed);
    family(e, "phalanx_limit_refusals_total", "counter", "Requests refused because a limit was reached.");
    for (int i = 0; i < PX_LIMIT_KINDS; i++) {
        begin(e, "phalanx_limit_refusals_total");
        label(e, "limit", PX_LIMIT_NAMES[i]);
        end_u64(e, st->limit_refusals[i]);
    }
    counter(e, "phalanx_outer_steps_total", "DiLoCo outer steps committed (outer_step events).", st->outer_steps);
    counter(e, "phalanx_outer_wire_bytes_total",
            "Bytes one rank sent for the pseudo-gradients of those outer steps (the reporter's count; every rank of "
            "a cross-group ring sends about as much).",
            st->outer_wire_bytes);
    counter(e, "phalanx_mode_switches_total", "Switches between sync and DiLoCo (--mode auto).", v->mode_switches);
    gauge_i64(e, "phalanx_mode_diloco", "The mode quorums announce: 1 DiLoCo, 0 sync.", v->mode_diloco ? 1 : 0);
    counter(e, "phalanx_failures_total", "Group losses that were failures (not drains nor a worker's own exit).",
            st->failures);
    gauge_f(e, "phalanx_failures_per_hour", "Group losses (not planned leaves) over the --auto-window, per hour.", 1,
            "%.2f", v->failures_per_hour);
    gauge_f(e, "phalanx_comm_share",
            "Share of step time in cross-group communication (mean over the quorum's groups' rank 0).",
            v->has_comm_share, "%.3f", v->comm_share);
}

char *px_status_metrics(const px_status_view_t *v, size_t *len) {
    expo_t e;
    px_buf_init(&e.b);
    px_buf_init(&e.job);
    px_buf_printf(&e.job, "job=\"");
    put_label_value(&e.job, v->job ? v->job : "");
    px_buf_append(&e.job, "\"", 1);
    if (e.job.failed) {
        px_buf_free(&e.job);
        px_buf_free(&e.b);
        return NULL;
    }
    job_metrics(&e, v);
    coordinator_metrics(&e, v);
    if (v->train) train_metrics(&e, v->train);
    group_metrics(&e, v);
    px_buf_free(&e.job);
    return px_buf_take(&e.b, len);
}
