/* Implementation of membership.h: the member table and the loss rule. */
#include "membership.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_time.h"

int px_member_report_fresh(const px_member_t *m, int64_t now_ms, const px_liveness_config_t *cfg, int64_t qid) {
    return m->reported_ms > 0 && m->reported_qid == qid && now_ms - m->reported_ms <= cfg->heartbeat_timeout_ms;
}

const char *px_member_loss_reason(const px_member_t *m, int64_t now_ms, const px_liveness_config_t *cfg) {
    if (m->state == PX_STATE_LOST) return NULL;
    int64_t silent_ms = now_ms - m->last_hb_ms;
    if (m->self_reported) return m->draining ? "drained" : "self_reported";
    if (silent_ms > cfg->heartbeat_timeout_ms) return "heartbeat_timeout";
    int silent = !m->relay_excused && (double)silent_ms > PX_SILENT_INTERVALS * (double)cfg->heartbeat_interval_ms;
    int signals = m->reported + m->conn_closed + silent;
    if (signals >= 2) {
        if (m->reported && m->conn_closed) return "reported_and_disconnected";
        if (m->reported) return "reported_and_silent";
        return "disconnected_and_silent";
    }
    return NULL;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

int64_t px_stall_limit_ms(int64_t fixed_ms, const float *step_seconds, int n) {
    if (fixed_ms > 0) return fixed_ms;
    if (n <= 0) return PX_STALL_UNKNOWN_MS;
    float sorted[256];
    if (n > (int)(sizeof sorted / sizeof *sorted)) n = (int)(sizeof sorted / sizeof *sorted);
    memcpy(sorted, step_seconds, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_float);
    double median_ms = (n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0) * 1000.0;
    double ms = PX_STALL_STEPS * median_ms;
    if (!(ms > PX_STALL_FLOOR_MS)) return PX_STALL_FLOOR_MS; /* NaN too */
    return ms < PX_STALL_UNKNOWN_MS * 60.0 ? (int64_t)ms : PX_STALL_UNKNOWN_MS * 60; /* an hour at most */
}

int px_members_init(px_members_t *t) {
    memset(t, 0, sizeof *t);
    t->by_ident = px_map_new();
    t->by_name = px_map_new();
    return t->by_ident && t->by_name ? 0 : -1;
}

void px_members_free(px_members_t *t) {
    free(t->members);
    px_map_destroy(&t->by_ident);
    px_map_destroy(&t->by_name);
    memset(t, 0, sizeof *t);
}

static int name_key(char *buf, size_t len, const char *group, int rank) {
    return snprintf(buf, len, "%s/%d", group, rank);
}

px_member_t *px_members_by_ident(px_members_t *t, const void *ident, size_t len) {
    int64_t i;
    return px_map_get(t->by_ident, ident, len, &i) ? &t->members[i] : NULL;
}

px_member_t *px_members_by_name(px_members_t *t, const char *group, int rank) {
    char key[96];
    int n = name_key(key, sizeof key, group, rank);
    int64_t i;
    return px_map_get(t->by_name, key, (size_t)n, &i) ? &t->members[i] : NULL;
}

int32_t px_members_slot(const px_members_t *t, const px_member_t *m) { return (int32_t)(m - t->members) + 1; }

/* Entries move only when one is removed (remove_at): removed + 1, never 0,
 * so that a zeroed member's remembered generation never matches. */
uint64_t px_members_gen(const px_members_t *t) { return t->removed + 1; }

px_member_t *px_members_recall(px_members_t *t, int32_t slot, uint64_t gen) {
    return gen == px_members_gen(t) && slot > 0 && slot <= t->n ? &t->members[slot - 1] : NULL;
}

px_member_t *px_members_rank_of(px_members_t *t, px_member_t *leader, int r) {
    int cached = r >= 1 && r <= PX_RANK_CACHE;
    px_member_t *x = cached ? px_members_recall(t, leader->rank_cache[r - 1], leader->rank_cache_gen) : NULL;
    if (x) return x;
    x = px_members_by_name(t, leader->group, r);
    if (cached) {
        if (leader->rank_cache_gen != px_members_gen(t)) {
            memset(leader->rank_cache, 0, sizeof leader->rank_cache);
            leader->rank_cache_gen = px_members_gen(t);
        }
        leader->rank_cache[r - 1] = x ? px_members_slot(t, x) : 0;
    }
    return x;
}

/* Drops entry i from both indexes and fills its place with the last entry.
 * An identity index entry is dropped or moved only when it points at that
 * slot: a process that re-registered under another name owns it now. */
static void remove_at(px_members_t *t, int i) {
    char key[96];
    int64_t v;
    px_member_t *m = &t->members[i];
    if (px_map_get(t->by_ident, m->ident, m->ident_len, &v) && v == i) px_map_del(t->by_ident, m->ident, m->ident_len);
    px_map_del(t->by_name, key, (size_t)name_key(key, sizeof key, m->group, m->rank));
    int last = t->n - 1;
    if (i != last) {
        px_member_t *moved = &t->members[last];
        if (px_map_get(t->by_ident, moved->ident, moved->ident_len, &v) && v == last)
            px_map_put(t->by_ident, moved->ident, moved->ident_len, i); /* replaces: cannot fail */
        px_map_put(t->by_name, key, (size_t)name_key(key, sizeof key, moved->group, moved->rank), i);
        *m = *moved;
    }
    t->n--;
    t->removed++;
}

/* On a full table, the longest-lost member makes room: 0, or -1 when every
 * member is live. */
static int make_room(px_members_t *t) {
    if (t->max_members <= 0 || t->n < t->max_members) return 0;
    int oldest = -1;
    for (int i = 0; i < t->n; i++) {
        const px_member_t *m = &t->members[i];
        if (m->state == PX_STATE_LOST && (oldest < 0 || m->lost_ms < t->members[oldest].lost_ms)) oldest = i;
    }
    if (oldest < 0) return -1;
    remove_at(t, oldest);
    return 0;
}

static px_member_t *append(px_members_t *t, const char *group, int rank, px_members_rc_t *rc) {
    if (make_room(t) != 0) {
        *rc = PX_MEMBERS_FULL;
        return NULL;
    }
    *rc = PX_MEMBERS_NO_MEMORY;
    if (t->n == t->cap) {
        int ncap = t->cap ? t->cap * 2 : 64;
        px_member_t *nm = realloc(t->members, (size_t)ncap * sizeof *nm);
        if (!nm) return NULL;
        t->members = nm;
        t->cap = ncap;
    }
    char key[96];
    int n = name_key(key, sizeof key, group, rank);
    if (px_map_put(t->by_name, key, (size_t)n, t->n) != 0) return NULL;
    *rc = PX_MEMBERS_OK;
    return &t->members[t->n++];
}

px_member_t *px_members_upsert(px_members_t *t, const char *group, int rank, const void *ident,
                               size_t ident_len, int *replaced, px_members_rc_t *rc) {
    px_members_rc_t rc_ignored;
    if (!rc) rc = &rc_ignored;
    *replaced = 0;
    *rc = PX_MEMBERS_BAD_IDENT;
    if (ident_len > PX_IDENT_MAX) return NULL;
    px_member_t *m = px_members_by_name(t, group, rank);
    uint32_t group_drops = 0; /* the slot's, not the process's: a restarted rank 0 keeps it */
    if (m) {
        group_drops = m->group_drops;
        *replaced = m->state != PX_STATE_LOST && (m->ident_len != ident_len || memcmp(m->ident, ident, ident_len) != 0);
        int64_t v;
        if (px_map_get(t->by_ident, m->ident, m->ident_len, &v) && v == m - t->members)
            px_map_del(t->by_ident, m->ident, m->ident_len);
    } else {
        m = append(t, group, rank, rc);
        if (!m) return NULL;
    }
    memset(m, 0, sizeof *m);
    m->group_drops = group_drops;
    snprintf(m->group, sizeof m->group, "%s", group);
    m->rank = rank;
    m->fd = -1;
    memcpy(m->ident, ident, ident_len);
    m->ident_len = ident_len;
    *rc = PX_MEMBERS_NO_MEMORY;
    if (px_map_put(t->by_ident, ident, ident_len, m - t->members) != 0) return NULL;
    *rc = PX_MEMBERS_OK;
    return m;
}

void px_members_mark_lost(px_members_t *t, px_member_t *m, const char *why) {
    (void)t;
    m->state = PX_STATE_LOST;
    m->requested = 0;
    m->lost_ms = px_now_ms();
    snprintf(m->lost_reason, sizeof m->lost_reason, "%s", why);
}

int px_members_expire(px_members_t *t, int64_t now_ms, const px_liveness_config_t *cfg) {
    int64_t grace = PX_LOST_GRACE_TIMEOUTS * cfg->heartbeat_timeout_ms;
    int removed = 0;
    for (int i = 0; i < t->n;) {
        const px_member_t *m = &t->members[i];
        if (m->state == PX_STATE_LOST && now_ms - m->lost_ms > grace) {
            remove_at(t, i); /* the last entry moved to i: look at it next */
            removed++;
        } else {
            i++;
        }
    }
    return removed;
}

int px_members_live(const px_members_t *t) {
    int n = 0;
    for (int i = 0; i < t->n; i++) n += t->members[i].state != PX_STATE_LOST;
    return n;
}

int px_members_candidates(const px_members_t *t, int64_t now_ms, const px_liveness_config_t *cfg,
                          px_quorum_candidate_t **out) {
    px_map_t *idx = px_map_new();
    px_quorum_candidate_t *c = calloc((size_t)t->n + 1, sizeof *c);
    int *live = calloc((size_t)t->n + 1, sizeof *live);
    int *want = calloc((size_t)t->n + 1, sizeof *want);
    int *reqs = calloc((size_t)t->n + 1, sizeof *reqs);
    if (!idx || !c || !live || !want || !reqs) {
        px_map_destroy(&idx);
        free(c), free(live), free(want), free(reqs);
        *out = NULL;
        return -1;
    }
    int n = 0;
    for (int i = 0; i < t->n; i++) {
        const px_member_t *m = &t->members[i];
        if (m->state == PX_STATE_LOST) continue;
        size_t glen = strlen(m->group);
        int64_t g;
        if (!px_map_get(idx, m->group, glen, &g)) {
            g = n++;
            px_map_put(idx, m->group, glen, g);
            snprintf(c[g].name, sizeof c[g].name, "%s", m->group);
            c[g].step = m->step;
            c[g].requested_ms = m->requested_ms;
            want[g] = m->group_size;
        }
        if (m->group_size > want[g]) want[g] = m->group_size;
        if (m->step < c[g].step) c[g].step = m->step;
        if (now_ms - m->last_hb_ms <= cfg->heartbeat_timeout_ms) live[g]++;
        c[g].draining |= m->draining;
        if (m->requested) {
            if (reqs[g] == 0 || m->requested_ms < c[g].requested_ms) c[g].requested_ms = m->requested_ms;
            reqs[g]++;
            c[g].shrink_only |= m->shrink_only;
            /* Rank 0 speaks for the group's state checksum. */
            if (m->rank == 0 && m->has_checksum) {
                c[g].has_checksum = 1;
                c[g].checksum = m->checksum;
            }
        }
    }
    for (int g = 0; g < n; g++) {
        c[g].healthy = live[g] == want[g];
        c[g].requested = reqs[g] == want[g];
    }
    px_map_destroy(&idx);
    free(live), free(want), free(reqs);
    *out = c;
    return n;
}

void px_members_clear_requests(px_members_t *t, const px_quorum_t *q) {
    for (int i = 0; i < t->n; i++) /* the flag first: a lookup per member costs ms at 100,000 */
        if (t->members[i].requested && px_quorum_find(q, t->members[i].group) >= 0) t->members[i].requested = 0;
}
