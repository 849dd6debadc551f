/* Implementation of status.h. */
#include "status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "px_buf.h"

const char *const PX_LIMIT_NAMES[PX_LIMIT_KINDS] = {"members", "store_keys", "store_bytes", "store_waiters"};

size_t px_status_heap_bytes(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
#else
    return 0;
#endif
}

const char *px_status_member_state(const px_member_t *m, const px_quorum_t *q, int target_groups) {
    if (m->state == PX_STATE_LOST) return strcmp(m->lost_reason, "drained") == 0 ? "left" : "lost";
    if (m->state == PX_STATE_HEALING) return "healing";
    if (px_quorum_find(q, m->group) >= 0) return "healthy";
    if (target_groups > 0 && q->n >= target_groups) return "spare";
    return "joining";
}

int64_t px_status_target_step(const px_members_t *members) {
    int64_t target = 0;
    for (int i = 0; i < members->n; i++) {
        const px_member_t *m = &members->members[i];
        if (m->state != PX_STATE_LOST && m->job_steps > target) target = m->job_steps;
    }
    return target;
}

void px_status_groups_json(px_buf_t *b, const px_members_t *members, const px_quorum_t *quorum, int target_groups) {
    px_buf_printf(b, "\"groups\":[");
    for (int i = 0, k = 0; i < members->n; i++) { /* a group is its rank 0 */
        const px_member_t *m = &members->members[i];
        if (m->rank != 0) continue;
        px_buf_printf(b, "%s{\"name\":", k++ ? "," : "");
        px_buf_json_str(b, m->group);
        px_buf_printf(b, ",\"state\":\"%s\",\"step\":%lld,\"ranks\":%d,\"heals\":%u,\"heal_bytes\":%llu,\"loss\":",
                      px_status_member_state(m, quorum, target_groups), (long long)m->step, m->group_size, m->heals,
                      (unsigned long long)m->heal_bytes);
        if (m->has_train && isfinite(m->train_loss)) px_buf_printf(b, "%.6g}", (double)m->train_loss);
        else px_buf_printf(b, "null}");
    }
    px_buf_printf(b, "]");
}

/* The progress figures both /status forms show. NaN: unknown. */
typedef struct {
    int64_t step, target, checkpoint_step;
    double fraction, loss, eval_loss, tokens_per_s, steps_per_s, eta_s, checkpoint_age_s;
} progress_figures_t;

static progress_figures_t progress_figures(const px_status_view_t *v) {
    progress_figures_t f = {-1, v->target_step, -1, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
    const px_progress_t *p = v->progress;
    if (p) {
        f.step = p->step;
        f.tokens_per_s = px_progress_tokens_per_s(p);
        f.steps_per_s = px_progress_steps_per_s(p, v->now_ms);
        f.eta_s = px_progress_eta_s(p, v->target_step, v->now_ms);
        if (p->checkpoint_step >= 0) {
            f.checkpoint_step = p->checkpoint_step;
            f.checkpoint_age_s = fmax(0.0, (double)(v->wall_ms - p->checkpoint_wall_ms) / 1000.0);
        }
    }
    if (f.step >= 0 && f.target > 0) f.fraction = fmin(1.0, (double)f.step / (double)f.target);
    if (v->train && v->train->has_loss) f.loss = v->train->loss;
    if (v->train && v->train->has_eval_loss) f.eval_loss = v->train->eval_loss;
    return f;
}

static void json_num(px_buf_t *b, const char *key, double x, const char *fmt) {
    px_buf_printf(b, ",\"%s\":", key);
    if (isfinite(x)) px_buf_printf(b, fmt, x);
    else px_buf_printf(b, "null");
}

void px_status_progress_json(px_buf_t *b, const px_status_view_t *v) {
    progress_figures_t f = progress_figures(v);
    px_buf_printf(b, ",\"progress\":{\"step\":");
    if (f.step >= 0) px_buf_printf(b, "%lld", (long long)f.step);
    else px_buf_printf(b, "null");
    px_buf_printf(b, ",\"target_step\":");
    if (f.target > 0) px_buf_printf(b, "%lld", (long long)f.target);
    else px_buf_printf(b, "null");
    json_num(b, "fraction", f.fraction, "%.4f");
    json_num(b, "loss", f.loss, "%.6g");
    json_num(b, "eval_loss", f.eval_loss, "%.6g");
    json_num(b, "tokens_per_s", f.tokens_per_s, "%.1f");
    json_num(b, "steps_per_s", f.steps_per_s, "%.4g");
    json_num(b, "eta_s", f.eta_s, "%.0f");
    px_buf_printf(b, ",\"checkpoint_step\":");
    if (f.checkpoint_step >= 0) px_buf_printf(b, "%lld", (long long)f.checkpoint_step);
    else px_buf_printf(b, "null");
    json_num(b, "checkpoint_age_s", f.checkpoint_age_s, "%.0f");
    px_buf_printf(b, "}");
}

char *px_status_json(const px_status_view_t *v, size_t *len) {
    px_buf_t b;
    px_buf_init(&b);
    px_buf_printf(&b, "{\"job\":");
    px_buf_json_str(&b, v->job);
    px_buf_printf(&b, ",\"version\":");
    px_buf_json_str(&b, v->version ? v->version : "");
    px_status_progress_json(&b, v);
    px_buf_printf(&b, ",");
    px_status_groups_json(&b, v->members, v->quorum, v->target_groups);
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
                      (long long)m->step, px_status_member_state(m, v->quorum, v->target_groups),
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

/* A duration for people: "45s", "3m10s", "2h05m", "3d04h". */
static void human_duration(char *out, size_t cap, double s) {
    long long t = (long long)(s + 0.5);
    if (t < 60) snprintf(out, cap, "%llds", t);
    else if (t < 3600) snprintf(out, cap, "%lldm%02llds", t / 60, t % 60);
    else if (t < 86400) snprintf(out, cap, "%lldh%02lldm", t / 3600, t % 3600 / 60);
    else snprintf(out, cap, "%lldd%02lldh", t / 86400, t % 86400 / 3600);
}

/* A rate for people: "812", "41.2k", "1.35M". */
static void human_rate(char *out, size_t cap, double x) {
    if (x < 1e3) snprintf(out, cap, "%.0f", x);
    else if (x < 1e6) snprintf(out, cap, "%.1fk", x / 1e3);
    else snprintf(out, cap, "%.2fM", x / 1e6);
}

/* "progress: step 1234 of 5000 (24.7%)  loss 2.513 ..." and the checkpoint line. */
static void progress_text(px_buf_t *b, const px_status_view_t *v) {
    progress_figures_t f = progress_figures(v);
    char t[32];
    if (f.step < 0) px_buf_printf(b, "progress: no step heard yet");
    else px_buf_printf(b, "progress: step %lld", (long long)f.step);
    if (f.target > 0) px_buf_printf(b, " of %lld", (long long)f.target);
    if (isfinite(f.fraction)) px_buf_printf(b, " (%.1f%%)", 100.0 * f.fraction);
    if (isfinite(f.loss)) px_buf_printf(b, "  loss %.4f", f.loss);
    if (isfinite(f.eval_loss)) px_buf_printf(b, "  eval loss %.4f", f.eval_loss);
    if (isfinite(f.tokens_per_s)) {
        human_rate(t, sizeof t, f.tokens_per_s);
        px_buf_printf(b, "  tokens/s %s", t);
    }
    if (isfinite(f.steps_per_s)) px_buf_printf(b, "  %.3g steps/s (last minute)", f.steps_per_s);
    if (isfinite(f.eta_s)) {
        human_duration(t, sizeof t, f.eta_s);
        px_buf_printf(b, "  ETA %s", f.eta_s > 0 ? t : "done");
    } else if (f.target > 0 && f.step >= 0) {
        px_buf_printf(b, isfinite(f.steps_per_s) ? "  ETA unknown (no step in the last minute)"
                                                 : "  ETA unknown (too early to tell)");
    }
    if (f.checkpoint_step >= 0) {
        human_duration(t, sizeof t, f.checkpoint_age_s);
        px_buf_printf(b, "\ncheckpoint: step %lld, saved %s ago\n", (long long)f.checkpoint_step, t);
    } else {
        px_buf_printf(b, "\ncheckpoint: none saved while this coordinator ran\n");
    }
}

char *px_status_text(const px_status_view_t *v, size_t *len) {
    px_buf_t b;
    px_buf_init(&b);
    char up[32];
    human_duration(up, sizeof up, (double)v->uptime_ms / 1000.0);
    px_buf_printf(&b, "job %s  mode %s  coordinator up %s  version %s\n", v->job, v->mode, up,
                  v->version && v->version[0] ? v->version : "unknown");
    progress_text(&b, v);
    if (v->mode_reason && v->mode_reason[0])
        px_buf_printf(&b, "mode switched %llu time%s, last: %s\n", (unsigned long long)v->mode_switches,
                      v->mode_switches == 1 ? "" : "s", v->mode_reason);
    px_buf_printf(&b, "quorum %lld (formed at step %lld)  groups [", (long long)v->quorum->id,
                  (long long)v->quorum->max_step);
    for (int i = 0; i < v->quorum->n; i++) px_buf_printf(&b, "%s%s", i ? " " : "", v->quorum->groups[i].name);
    px_buf_printf(&b, "]\nevents produced %llu  pending %llu  spilled %llu  delivery failures %llu  bad messages %llu  heartbeats/s %.0f\n\n",
                  (unsigned long long)v->events.produced, (unsigned long long)v->events.pending,
                  (unsigned long long)v->events.spilled, (unsigned long long)v->events.delivery_failures,
                  (unsigned long long)v->stats->bad_messages, v->stats->heartbeats_per_s);
    px_buf_printf(&b, "%-16s %-8s %10s %6s %9s %6s\n", "GROUP", "STATE", "STEP", "RANKS", "LOSS", "HEALS");
    for (int i = 0; i < v->members->n; i++) { /* a group is its rank 0 */
        const px_member_t *m = &v->members->members[i];
        if (m->rank != 0) continue;
        char loss[16] = "-";
        if (m->has_train && isfinite(m->train_loss)) snprintf(loss, sizeof loss, "%.4f", (double)m->train_loss);
        px_buf_printf(&b, "%-16s %-8s %10lld %6d %9s %6u\n", m->group, px_status_member_state(m, v->quorum, v->target_groups),
                      (long long)m->step, m->group_size, loss, m->heals);
    }
    px_buf_printf(&b, "\n%-16s %5s %8s %-16s %-15s %10s %-8s %s\n", "GROUP", "RANK", "PID", "HOST", "DATA HOST", "STEP",
                  "STATE", "LAST HEARTBEAT");
    for (int i = 0; i < v->members->n; i++) {
        const px_member_t *m = &v->members->members[i];
        px_buf_printf(&b, "%-16s %5d %8d %-16.16s %-15.39s %10lld %-8s %lld ms ago%s%s%s\n", m->group, m->rank, m->pid,
                      m->host, m->data_host[0] ? m->data_host : "-",
                      (long long)m->step, px_status_member_state(m, v->quorum, v->target_groups), (long long)(v->now_ms - m->last_hb_ms),
                      m->via_leader ? " (via leader)" : m->draining && m->state != PX_STATE_LOST ? " (draining)" : "",
                      m->state == PX_STATE_LOST ? "  " : "",
                      m->state == PX_STATE_LOST ? m->lost_reason : "");
    }
    return px_buf_take(&b, len);
}
