/* Implementation of history.h. Points are an array sorted by seq (and by
 * step); events a ring. Both are found from `since` by binary search, so a
 * page polling every second costs the coordinator what is new, not the
 * whole history. */
#include "history.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct px_history {
    px_history_point_t *points; /* [max_points], sorted by seq */
    size_t n_points, max_points;
    px_history_event_t *events; /* ring of [max_events] */
    size_t first_event, n_events, max_events;
    uint64_t seq;
};

px_history_t *px_history_new(size_t max_points, size_t max_events) {
    if (max_points < 2 || max_events < 1) return NULL;
    px_history_t *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->points = calloc(max_points, sizeof *h->points);
    h->events = calloc(max_events, sizeof *h->events);
    if (!h->points || !h->events) {
        px_history_destroy(&h);
        return NULL;
    }
    h->max_points = max_points;
    h->max_events = max_events;
    return h;
}

void px_history_destroy(px_history_t **self) {
    px_history_t *h = *self;
    if (!h) return;
    free(h->points);
    free(h->events);
    free(h);
    *self = NULL;
}

/* Drops every other point of the older half (history.h says why). */
static void thin_older_half(px_history_t *h) {
    size_t half = h->n_points / 2, w = 0;
    for (size_t r = 0; r < half; r += 2) h->points[w++] = h->points[r];
    memmove(&h->points[w], &h->points[half], (h->n_points - half) * sizeof *h->points);
    h->n_points = w + (h->n_points - half);
}

int px_history_add_point(px_history_t *h, const px_history_point_t *p) {
    const px_history_point_t *last = px_history_last(h);
    if (last && p->step <= last->step) return 0;
    if (h->n_points == h->max_points) thin_older_half(h);
    px_history_point_t *q = &h->points[h->n_points++];
    *q = *p;
    q->seq = ++h->seq;
    return 1;
}

void px_history_add_event(px_history_t *h, int64_t time_ms, int64_t step, const char *type, const char *group,
                          const char *detail) {
    size_t at = (h->first_event + h->n_events) % h->max_events;
    if (h->n_events == h->max_events) h->first_event = (h->first_event + 1) % h->max_events;
    else h->n_events++;
    px_history_event_t *e = &h->events[at];
    e->seq = ++h->seq;
    e->time_ms = time_ms;
    e->step = step;
    snprintf(e->type, sizeof e->type, "%s", type ? type : "");
    snprintf(e->group, sizeof e->group, "%s", group ? group : "");
    snprintf(e->detail, sizeof e->detail, "%s", detail ? detail : "");
}

uint64_t px_history_seq(const px_history_t *h) { return h->seq; }
size_t px_history_points(const px_history_t *h) { return h->n_points; }
size_t px_history_events(const px_history_t *h) { return h->n_events; }

const px_history_point_t *px_history_last(const px_history_t *h) {
    return h->n_points ? &h->points[h->n_points - 1] : NULL;
}

float px_history_last_eval(const px_history_t *h, int64_t *step) {
    for (size_t i = h->n_points; i-- > 0;) {
        if (!isnan(h->points[i].eval_loss)) {
            if (step) *step = h->points[i].eval_step;
            return h->points[i].eval_loss;
        }
    }
    return NAN;
}

static const px_history_event_t *event_at(const px_history_t *h, size_t i) {
    return &h->events[(h->first_event + i) % h->max_events];
}

/* The first index in [0, n) whose seq is above since (n when none). */
static size_t first_after(size_t n, uint64_t since, uint64_t (*seq_of)(const px_history_t *, size_t),
                          const px_history_t *h) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (seq_of(h, mid) <= since) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static uint64_t point_seq(const px_history_t *h, size_t i) { return h->points[i].seq; }
static uint64_t event_seq(const px_history_t *h, size_t i) { return event_at(h, i)->seq; }

/* A float as JSON: null when unknown (JSON has no NaN). */
static void json_float(px_buf_t *b, const char *key, float v) {
    if (isfinite(v)) px_buf_printf(b, ",\"%s\":%.6g", key, (double)v);
    else px_buf_printf(b, ",\"%s\":null", key);
}

void px_history_json(const px_history_t *h, uint64_t since, px_buf_t *b) {
    px_buf_printf(b, "\"points\":[");
    for (size_t i = first_after(h->n_points, since, point_seq, h), k = 0; i < h->n_points; i++, k++) {
        const px_history_point_t *p = &h->points[i];
        px_buf_printf(b, "%s{\"seq\":%llu,\"time_ms\":%lld,\"step\":%lld", k ? "," : "",
                      (unsigned long long)p->seq, (long long)p->time_ms, (long long)p->step);
        json_float(b, "loss", p->loss);
        json_float(b, "tokens_per_s", p->tokens_per_s);
        json_float(b, "step_seconds", p->step_seconds);
        json_float(b, "eval_loss", p->eval_loss);
        px_buf_printf(b, ",\"eval_step\":%lld,\"groups\":%d,\"mode\":\"%s\"}", (long long)p->eval_step, p->groups,
                      p->diloco ? "diloco" : "sync");
    }
    px_buf_printf(b, "],\"events\":[");
    for (size_t i = first_after(h->n_events, since, event_seq, h), k = 0; i < h->n_events; i++, k++) {
        const px_history_event_t *e = event_at(h, i);
        px_buf_printf(b, "%s{\"seq\":%llu,\"time_ms\":%lld,\"step\":%lld,\"type\":", k ? "," : "",
                      (unsigned long long)e->seq, (long long)e->time_ms, (long long)e->step);
        px_buf_json_str(b, e->type);
        px_buf_printf(b, ",\"group\":");
        px_buf_json_str(b, e->group);
        px_buf_printf(b, ",\"detail\":");
        px_buf_json_str(b, e->detail);
        px_buf_printf(b, "}");
    }
    px_buf_printf(b, "]");
}

int px_history_parse_query(const char *query, uint64_t *since, char *err, size_t errlen) {
    *since = 0;
    if (!query) return 0;
    const char *p = query;
    while (*p) {
        size_t n = strcspn(p, "&");
        if (n >= 6 && !strncmp(p, "since=", 6)) {
            const char *v = p + 6;
            size_t digits = strspn(v, "0123456789");
            if (digits == 0 || digits != n - 6 || digits > 19) {
                snprintf(err, errlen, "since must be a sequence number: 1 to 19 digits (0: everything)");
                return -1;
            }
            *since = strtoull(v, NULL, 10);
        }
        p += n;
        if (*p == '&') p++;
    }
    return 0;
}
