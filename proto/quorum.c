/* Implementation of the quorum rule described in quorum.h. Each rule is one
 * short step of px_quorum_compute(), in the order the header lists them. */
#include "quorum.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void px_quorum_init(px_quorum_t *q) { memset(q, 0, sizeof *q); }

void px_quorum_free(px_quorum_t *q) {
    free(q->groups);
    free(q->draining);
    memset(q, 0, sizeof *q);
}

static int cmp_name(const void *x, const void *y) { return strcmp(x, y); }

/* q's drained list becomes d (n names; NULL and 0 for none), the old one freed. */
static void take_draining(px_quorum_t *q, char (*d)[PX_QUORUM_NAME_MAX], int n) {
    free(q->draining);
    q->draining = d;
    q->n_draining = d ? n : 0;
}

int px_quorum_set_draining(px_quorum_t *q, const char *const *names, int n) {
    char(*d)[PX_QUORUM_NAME_MAX] = n > 0 ? malloc((size_t)n * sizeof *d) : NULL;
    if (n > 0 && !d) return -1;
    for (int i = 0; i < n; i++) snprintf(d[i], sizeof d[i], "%s", names[i]);
    if (n > 1) qsort(d, (size_t)n, sizeof *d, cmp_name);
    take_draining(q, d, n);
    return 0;
}

int px_quorum_is_draining(const px_quorum_t *q, const char *name) {
    for (int i = 0; i < q->n_draining; i++)
        if (strcmp(q->draining[i], name) == 0) return 1;
    return 0;
}

static int reserve(px_quorum_t *q, int n) {
    if (n <= q->cap) return 0;
    px_quorum_member_t *g = realloc(q->groups, (size_t)n * sizeof *g);
    if (!g) return -1;
    q->groups = g;
    q->cap = n;
    return 0;
}

int px_quorum_copy(px_quorum_t *dst, const px_quorum_t *src) {
    if (reserve(dst, src->n) != 0) return -1;
    dst->id = src->id;
    dst->max_step = src->max_step;
    memcpy(dst->mode, src->mode, sizeof dst->mode);
    dst->n = src->n;
    if (src->n) memcpy(dst->groups, src->groups, (size_t)src->n * sizeof *src->groups);
    int k = src->n_draining;
    char(*d)[PX_QUORUM_NAME_MAX] = k > 0 ? malloc((size_t)k * sizeof *d) : NULL;
    if (k > 0 && !d) return -1;
    if (d) memcpy(d, src->draining, (size_t)k * sizeof *d);
    take_draining(dst, d, k); /* allocated before the old list is freed: safe even if dst is src */
    return 0;
}

/* The first position whose name does not sort before `name`. A binary
 * search: every quorum is sorted by name (px_quorum_compute builds it so,
 * px_quorum_insert_sorted keeps it so, and workers refuse a pushed quorum
 * that is not), so a lookup costs log(groups), not groups. */
static int lower_bound(const px_quorum_t *q, const char *name) {
    int lo = 0, hi = q->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (strcmp(q->groups[mid].name, name) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

int px_quorum_find(const px_quorum_t *q, const char *name) {
    int at = lower_bound(q, name);
    return at < q->n && strcmp(q->groups[at].name, name) == 0 ? at : -1;
}

int px_quorum_insert_sorted(px_quorum_t *q, const char *name, int64_t step) {
    int at = lower_bound(q, name);
    if (at < q->n && strcmp(q->groups[at].name, name) == 0) return 0;
    if (reserve(q, q->n + 1) != 0) return -1;
    memmove(&q->groups[at + 1], &q->groups[at], (size_t)(q->n - at) * sizeof *q->groups);
    memset(&q->groups[at], 0, sizeof *q->groups);
    snprintf(q->groups[at].name, sizeof q->groups[at].name, "%s", name);
    q->groups[at].step = step;
    q->n++;
    if (step > q->max_step) q->max_step = step;
    return 0;
}

/* Both sorted by name: the same set is the same list. */
int px_quorum_same_members(const px_quorum_t *a, const px_quorum_t *b) {
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->groups[i].name, b->groups[i].name) != 0) return 0;
    return 1;
}

static int cmp_cand_ptr(const void *x, const void *y) {
    const px_quorum_candidate_t *a = *(const px_quorum_candidate_t *const *)x;
    const px_quorum_candidate_t *b = *(const px_quorum_candidate_t *const *)y;
    return strcmp(a->name, b->name);
}

typedef struct {
    uint64_t sum;
    int first; /* position in name order */
} sum_at_t;

static int cmp_sum_at(const void *x, const void *y) {
    const sum_at_t *a = x, *b = y;
    if (a->sum != b->sum) return a->sum < b->sum ? -1 : 1;
    return a->first - b->first;
}

/* The checksum most up-to-date groups agree on; ties go to the first group in
 * name order. `parts` is sorted by name. Sorting the checksums makes this
 * n log n (all 10,000 groups of a restarted job send one). Returns 0 when
 * nobody reports one, -1 when out of memory. */
static int majority_checksum(const px_quorum_candidate_t **parts, int n, int64_t max_step,
                             uint64_t *out) {
    sum_at_t *v = malloc(((size_t)n + 1) * sizeof *v);
    if (!v) return -1;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (parts[i]->step == max_step && parts[i]->has_checksum) v[k++] = (sum_at_t){parts[i]->checksum, i};
    qsort(v, (size_t)k, sizeof *v, cmp_sum_at);
    int best_count = 0, best_first = 0;
    for (int i = 0; i < k;) {
        int j = i;
        while (j < k && v[j].sum == v[i].sum) j++;
        int count = j - i; /* v[i].first is the run's earliest group */
        if (count > best_count || (count == best_count && v[i].first < best_first)) {
            best_count = count;
            best_first = v[i].first;
            *out = v[i].sum;
        }
        i = j;
    }
    free(v);
    return best_count > 0;
}

/* Fills next with the sorted participants, max_step and heal assignments. */
static int build(const px_quorum_candidate_t **parts, int n, const px_quorum_t *prev,
                 px_quorum_t *next) {
    if (reserve(next, n) != 0) return -1;
    next->n = n;
    next->max_step = 0;
    for (int i = 0; i < n; i++)
        if (parts[i]->step > next->max_step) next->max_step = parts[i]->step;
    uint64_t good = 0;
    int have_good = majority_checksum(parts, n, next->max_step, &good);
    if (have_good < 0) return -1;

    int n_src = 0;
    for (int i = 0; i < n; i++) {
        px_quorum_member_t *m = &next->groups[i];
        memset(m, 0, sizeof *m);
        snprintf(m->name, sizeof m->name, "%s", parts[i]->name);
        m->step = parts[i]->step;
        m->divergent = parts[i]->step == next->max_step && have_good && parts[i]->has_checksum &&
                       parts[i]->checksum != good;
        m->heal = parts[i]->step < next->max_step || m->divergent;
        if (!m->heal) n_src++;
    }
    /* Round robin over up-to-date groups, in name order. At least one group
     * is at max_step, and one of those holds the majority checksum (or no
     * group is divergent when there is none), so there is a source. */
    assert(n_src > 0 || n == 0);
    if (n_src == 0 && n > 0) return -1;
    int *src = malloc(((size_t)n_src + 1) * sizeof *src);
    if (!src) return -1;
    for (int i = 0, s = 0; i < n; i++)
        if (!next->groups[i].heal) src[s++] = i;
    for (int i = 0, k = 0; i < n; i++)
        if (next->groups[i].heal)
            snprintf(next->groups[i].heal_source, PX_QUORUM_NAME_MAX, "%s", next->groups[src[k++ % n_src]].name);
    free(src);
    if (prev->id == 0)
        next->id = 1;
    else
        next->id = px_quorum_same_members(prev, next) ? prev->id : prev->id + 1;
    return 1;
}

/* Spares: who trains when there are more participants than places:
 * previous members first, then the furthest ahead, then by name. */
typedef struct {
    const px_quorum_candidate_t *c;
    int was_member;
} place_t;

static int cmp_place(const void *x, const void *y) {
    const place_t *a = x, *b = y;
    if (a->was_member != b->was_member) return b->was_member - a->was_member;
    if (a->c->step != b->c->step) return a->c->step > b->c->step ? -1 : 1;
    return strcmp(a->c->name, b->c->name);
}

/* Orders parts so that the first `target` of them train and returns how
 * many are spares (0 without a target); -1 when out of memory. */
static int cap_to_target(const px_quorum_candidate_t **parts, int n, const px_quorum_t *prev, int target) {
    if (target <= 0 || n <= target) return 0;
    place_t *v = malloc((size_t)n * sizeof *v);
    if (!v) return -1;
    for (int i = 0; i < n; i++) v[i] = (place_t){parts[i], px_quorum_find(prev, parts[i]->name) >= 0};
    qsort(v, (size_t)n, sizeof *v, cmp_place);
    for (int i = 0; i < n; i++) parts[i] = v[i].c;
    free(v);
    return n - target;
}

int px_quorum_compute(const px_quorum_candidate_t *cands, int n, const px_quorum_t *prev,
                      const px_quorum_config_t *cfg, int64_t now_ms, px_quorum_t *next,
                      char *reason, size_t reason_len) {
    const px_quorum_candidate_t **parts = malloc(((size_t)n + 1) * sizeof *parts);
    if (!parts) return -1;
    int n_healthy = 0, n_parts = 0, shrink_only = 0, any_request = 0;
    int64_t first_request = now_ms;
    for (int i = 0; i < n; i++) {
        const px_quorum_candidate_t *c = &cands[i];
        if (!c->healthy || c->draining) continue;
        n_healthy++;
        int was_member = px_quorum_find(prev, c->name) >= 0;
        if (!c->requested && !was_member) continue;
        parts[n_parts++] = c;
        shrink_only |= c->shrink_only;
        if (c->requested) {
            if (!any_request || c->requested_ms < first_request) first_request = c->requested_ms;
            any_request = 1;
        }
    }
    if (shrink_only && prev->id > 0) {
        int k = 0;
        for (int i = 0; i < n_parts; i++)
            if (px_quorum_find(prev, parts[i]->name) >= 0) parts[k++] = parts[i];
        n_parts = k;
    }
    int n_spares = cap_to_target(parts, n_parts, prev, cfg->target_groups);
    if (n_spares < 0) {
        free(parts);
        return -1;
    }
    n_parts -= n_spares;
    if (cfg->target_groups > 0 && n_healthy > cfg->target_groups) n_healthy = cfg->target_groups;
    qsort(parts, (size_t)n_parts, sizeof *parts, cmp_cand_ptr);

    int rc = 0;
    /* Both lists are sorted by name: one merge walk says whether every
     * previous group participates (groups x groups compares would cost
     * seconds at 10,000 groups). */
    int prev_all_back = prev->id > 0;
    for (int i = 0, j = 0; prev_all_back && i < prev->n; i++) {
        while (j < n_parts && strcmp(parts[j]->name, prev->groups[i].name) < 0) j++;
        prev_all_back = j < n_parts && strcmp(parts[j]->name, prev->groups[i].name) == 0;
    }
    if (n_parts < cfg->min_replicas) {
        snprintf(reason, reason_len, "waiting: %d participating groups, need min_replicas %d",
                 n_parts, cfg->min_replicas);
    } else if (prev_all_back) {
        rc = build(parts, n_parts, prev, next);
        snprintf(reason, reason_len, "fast path: all %d previous groups present, %d participating",
                 prev->n, n_parts);
    } else if (2 * n_parts <= n_healthy) {
        snprintf(reason, reason_len,
                 "waiting: %d participating groups are not more than half of %d healthy groups (split-brain guard)",
                 n_parts, n_healthy);
    } else if (n_parts < n_healthy && any_request && now_ms - first_request < cfg->join_timeout_ms) {
        /* no countdown in the reason: the coordinator logs each new reason once */
        snprintf(reason, reason_len, "waiting: %d of %d healthy groups joined; join window open (%lld ms from the "
                 "first request)", n_parts, n_healthy, (long long)cfg->join_timeout_ms);
    } else if (prev->id == 0 && any_request && now_ms - first_request < cfg->join_timeout_ms) {
        snprintf(reason, reason_len, "waiting: the first quorum: %d groups joined; join window open (%lld ms from "
                 "the first request) for groups still starting", n_parts, (long long)cfg->join_timeout_ms);
    } else {
        rc = build(parts, n_parts, prev, next);
        snprintf(reason, reason_len, "formed: %d of %d healthy groups%s", n_parts, n_healthy,
                 shrink_only ? " (shrink only)" : "");
    }
    if (rc == 1 && n_spares > 0) {
        size_t used = strlen(reason);
        if (used < reason_len) snprintf(reason + used, reason_len - used, "; %d spare%s", n_spares, n_spares == 1 ? "" : "s");
    }
    free(parts);
    return rc;
}

/* ---- delta pushes ------------------------------------------------------ */

static uint64_t fnv_str(uint64_t h, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s;; p++) {
        h = (h ^ *p) * 1099511628211ULL;
        if (!*p) return h; /* the NUL is hashed too: "ab","c" differs from "a","bc" */
    }
}

uint64_t px_quorum_hash(const px_quorum_t *q) {
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < q->n; i++) {
        h = fnv_str(h, q->groups[i].name);
        h = fnv_str(h, q->groups[i].heal ? q->groups[i].heal_source : "");
        h = (h ^ (uint64_t)(q->groups[i].heal != 0)) * 1099511628211ULL;
    }
    return h;
}

static int same_entry(const px_quorum_member_t *a, const px_quorum_member_t *b) {
    if (a->heal != b->heal) return 0;
    return !a->heal || strcmp(a->heal_source, b->heal_source) == 0;
}

int px_quorum_delta(const px_quorum_t *base, const px_quorum_t *next, int **removed, int *n_removed, int **changed,
                    int *n_changed) {
    *removed = malloc(((size_t)base->n + 1) * sizeof **removed);
    *changed = malloc(((size_t)next->n + 1) * sizeof **changed);
    if (!*removed || !*changed) {
        free(*removed), free(*changed);
        *removed = *changed = NULL;
        return -1;
    }
    *n_removed = *n_changed = 0;
    int i = 0, j = 0; /* a merge walk: both are sorted by name */
    while (i < base->n || j < next->n) {
        int c = i == base->n ? 1 : j == next->n ? -1 : strcmp(base->groups[i].name, next->groups[j].name);
        if (c < 0) {
            (*removed)[(*n_removed)++] = i++;
        } else if (c > 0) {
            (*changed)[(*n_changed)++] = j++;
        } else {
            if (!same_entry(&base->groups[i], &next->groups[j])) (*changed)[(*n_changed)++] = j;
            i++, j++;
        }
    }
    return 0;
}

static int cmp_member(const void *x, const void *y) {
    return strcmp(((const px_quorum_member_t *)x)->name, ((const px_quorum_member_t *)y)->name);
}

int px_quorum_apply_delta(const px_quorum_t *base, const char *const *removed, int n_removed,
                          const px_quorum_member_t *changed, int n_changed, int n_total, uint64_t groups_hash,
                          px_quorum_t *out) {
    if (n_total < 0 || n_removed < 0 || n_changed < 0 || n_total > base->n + n_changed) return -1;
    if (reserve(out, n_total + 1) != 0) return -1;
    int n = 0, r = 0;
    for (int i = 0; i < base->n; i++) { /* base minus the removed names (both sorted) */
        while (r < n_removed && strcmp(removed[r], base->groups[i].name) < 0) r++;
        if (r < n_removed && strcmp(removed[r], base->groups[i].name) == 0) continue;
        if (n == n_total) return -1; /* more groups than the delta says: not its base */
        out->groups[n++] = base->groups[i];
    }
    int kept = n;
    for (int k = 0; k < n_changed; k++) {
        px_quorum_member_t tmp = changed[k];
        px_quorum_t view = {.n = kept, .groups = out->groups};
        int at = px_quorum_find(&view, tmp.name);
        if (at >= 0) {
            out->groups[at] = tmp;
        } else {
            if (n == n_total) return -1;
            out->groups[n++] = tmp;
        }
    }
    if (n != kept) qsort(out->groups, (size_t)n, sizeof *out->groups, cmp_member);
    out->n = n;
    for (int i = 1; i < n; i++) /* a name twice: malformed */
        if (strcmp(out->groups[i - 1].name, out->groups[i].name) == 0) return -1;
    return n == n_total && px_quorum_hash(out) == groups_hash ? 0 : -1;
}
