/* Implementation of store.h.
 *
 * A record is one (quorum, key): its value once set, and the waiters parked
 * on it. Records are found through one px_map keyed by the 8 bytes of the
 * quorum id followed by the key; each namespace (quorum id) chains its
 * records, so dropping a namespace touches only its own. Waiters are chained
 * per record (a set answers exactly its own) and in one list for expiry,
 * which is walked only when the earliest deadline has passed. Everything is
 * individually allocated, so nothing moves when something else is removed. */
#include "store.h"

#include <stdlib.h>
#include <string.h>

#include "px_map.h"

typedef struct ns ns_t;
typedef struct rec rec_t;
typedef struct waiter waiter_t;

struct waiter {
    rec_t *rec;
    int64_t deadline_ms;
    void *peer;
    uint64_t request_id;
    waiter_t *prev, *next;   /* the record's waiters, oldest first */
    waiter_t *gprev, *gnext; /* every waiter, for expiry */
};

struct rec {
    ns_t *ns;
    char *key;
    size_t klen;
    void *value; /* NULL: not set yet (only waiters) */
    size_t len;
    waiter_t *first, *last;
    rec_t *prev, *next; /* the namespace's records */
};

struct ns {
    int64_t q;
    size_t keys, bytes, waiters;
    rec_t *recs;
    ns_t *prev, *next;
};

struct px_store {
    px_map_t *index; /* [quorum id][key] -> rec_t * */
    px_map_t *by_q;  /* quorum id -> ns_t * */
    ns_t *spaces;
    waiter_t *wfirst, *wlast;
    size_t keys, bytes, waiters;
    int64_t earliest; /* no waiter's deadline is earlier (INT64_MAX: no waiter) */
    px_kv_limits_t lim;
};

px_store_kv_t *px_kv_new(void) {
    px_store_kv_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->index = px_map_new();
    s->by_q = px_map_new();
    s->earliest = INT64_MAX;
    if (!s->index || !s->by_q) px_kv_destroy(&s);
    return s;
}

void px_kv_set_limits(px_store_kv_t *s, const px_kv_limits_t *lim) { s->lim = *lim; }

/* ---- lookups ----------------------------------------------------------- */

/* The index key [q][key] in buf (or malloc'd when longer); NULL: no memory. */
static unsigned char *index_key(int64_t q, const char *key, size_t klen, unsigned char *buf, size_t cap, size_t *len) {
    *len = sizeof q + klen;
    unsigned char *k = *len <= cap ? buf : malloc(*len);
    if (!k) return NULL;
    memcpy(k, &q, sizeof q);
    memcpy(k + sizeof q, key, klen);
    return k;
}

static int index_op(px_store_kv_t *s, int64_t q, const char *key, size_t klen, rec_t **r, int op) {
    unsigned char buf[8 + 264];
    size_t len;
    unsigned char *k = index_key(q, key, klen, buf, sizeof buf, &len);
    if (!k) return -1;
    int64_t v = 0;
    int rc = 0;
    if (op == 0) rc = px_map_get(s->index, k, len, &v), *r = rc ? (rec_t *)(intptr_t)v : NULL;
    else if (op == 1) rc = px_map_put(s->index, k, len, (int64_t)(intptr_t)*r);
    else px_map_del(s->index, k, len);
    if (k != buf) free(k);
    return rc;
}

static rec_t *find(px_store_kv_t *s, int64_t q, const char *key) {
    rec_t *r = NULL;
    index_op(s, q, key, strlen(key), &r, 0);
    return r;
}

static ns_t *find_ns(px_store_kv_t *s, int64_t q) {
    int64_t v;
    return px_map_get(s->by_q, &q, sizeof q, &v) ? (ns_t *)(intptr_t)v : NULL;
}

static int over(size_t n, size_t limit) { return limit && n > limit; }

/* ---- records ------------------------------------------------------------ */

static rec_t *rec_new(px_store_kv_t *s, int64_t q, const char *key) {
    ns_t *ns = find_ns(s, q);
    int new_ns = !ns;
    if (new_ns) {
        ns = calloc(1, sizeof *ns);
        if (!ns) return NULL;
        ns->q = q;
        if (px_map_put(s->by_q, &q, sizeof q, (int64_t)(intptr_t)ns) != 0) {
            free(ns);
            return NULL;
        }
        ns->next = s->spaces;
        if (s->spaces) s->spaces->prev = ns;
        s->spaces = ns;
    }
    rec_t *r = calloc(1, sizeof *r);
    if (r) r->klen = strlen(key), r->key = malloc(r->klen + 1);
    if (!r || !r->key || index_op(s, q, key, r->klen, &r, 1) != 0) {
        if (r) free(r->key);
        free(r);
        return NULL; /* an empty new namespace stays: it goes with its quorum */
    }
    memcpy(r->key, key, r->klen + 1);
    r->ns = ns;
    r->next = ns->recs;
    if (ns->recs) ns->recs->prev = r;
    ns->recs = r;
    return r;
}

static void ns_unlink(px_store_kv_t *s, ns_t *ns) {
    px_map_del(s->by_q, &ns->q, sizeof ns->q);
    if (ns->prev) ns->prev->next = ns->next;
    else s->spaces = ns->next;
    if (ns->next) ns->next->prev = ns->prev;
}

/* Frees r, which has neither value nor waiters any more. */
static void rec_free(px_store_kv_t *s, rec_t *r) {
    ns_t *ns = r->ns;
    index_op(s, ns->q, r->key, r->klen, &r, 2);
    if (r->prev) r->prev->next = r->next;
    else ns->recs = r->next;
    if (r->next) r->next->prev = r->prev;
    free(r->key);
    free(r);
    if (!ns->recs) {
        ns_unlink(s, ns);
        free(ns);
    }
}

/* ---- waiters ------------------------------------------------------------ */

static void unlink_waiter(px_store_kv_t *s, waiter_t *w) {
    rec_t *r = w->rec;
    if (w->prev) w->prev->next = w->next;
    else r->first = w->next;
    if (w->next) w->next->prev = w->prev;
    else r->last = w->prev;
    if (w->gprev) w->gprev->gnext = w->gnext;
    else s->wfirst = w->gnext;
    if (w->gnext) w->gnext->gprev = w->gprev;
    else s->wlast = w->gprev;
    r->ns->waiters--;
    s->waiters--;
}

/* Unlinks, answers (found when its record has a value) and frees w. */
static void answer(px_store_kv_t *s, waiter_t *w, px_kv_answer_fn fn, void *ctx) {
    rec_t *r = w->rec;
    unlink_waiter(s, w);
    px_kv_answer_t a = {w->peer, w->request_id, r->value != NULL, r->key, r->value, r->value ? r->len : 0};
    fn(ctx, &a);
    free(w->peer);
    free(w);
}

int px_kv_wait(px_store_kv_t *s, int64_t q, const char *key, int64_t deadline_ms, void *peer,
               uint64_t request_id) {
    rec_t *r = find(s, q, key);
    ns_t *ns = r ? r->ns : find_ns(s, q);
    if (over((ns ? ns->waiters : 0) + 1, s->lim.waiters) || over(s->waiters + 1, s->lim.total_waiters))
        return PX_KV_LIMIT_WAITERS;
    waiter_t *w = calloc(1, sizeof *w);
    if (!w) return PX_KV_NO_MEMORY;
    if (!r && !(r = rec_new(s, q, key))) {
        free(w);
        return PX_KV_NO_MEMORY;
    }
    *w = (waiter_t){.rec = r, .deadline_ms = deadline_ms, .peer = peer, .request_id = request_id};
    w->prev = r->last;
    if (r->last) r->last->next = w;
    else r->first = w;
    r->last = w;
    w->gprev = s->wlast;
    if (s->wlast) s->wlast->gnext = w;
    else s->wfirst = w;
    s->wlast = w;
    r->ns->waiters++;
    s->waiters++;
    if (deadline_ms < s->earliest) s->earliest = deadline_ms;
    return PX_KV_OK;
}

void px_kv_expire(px_store_kv_t *s, int64_t now_ms, px_kv_answer_fn fn, void *ctx) {
    if (now_ms < s->earliest) return;
    int64_t earliest = INT64_MAX;
    for (waiter_t *w = s->wfirst, *next; w; w = next) {
        next = w->gnext;
        if (w->deadline_ms > now_ms) {
            if (w->deadline_ms < earliest) earliest = w->deadline_ms;
            continue;
        }
        rec_t *r = w->rec;
        answer(s, w, fn, ctx);
        if (!r->value && !r->first) rec_free(s, r);
    }
    s->earliest = earliest;
}

/* ---- values ------------------------------------------------------------- */

int px_kv_set(px_store_kv_t *s, int64_t q, const char *key, const void *value, size_t len,
              px_kv_answer_fn fn, void *ctx) {
    rec_t *r = find(s, q, key);
    ns_t *ns = r ? r->ns : find_ns(s, q);
    size_t klen = strlen(key);
    int new_key = !r || !r->value;
    size_t old = new_key ? 0 : r->klen + r->len, add = klen + len;
    size_t ns_keys = ns ? ns->keys : 0, ns_bytes = ns ? ns->bytes : 0;
    if (new_key && (over(ns_keys + 1, s->lim.keys) || over(s->keys + 1, s->lim.total_keys))) return PX_KV_LIMIT_KEYS;
    if (add > old && (over(ns_bytes - old + add, s->lim.bytes) || over(s->bytes - old + add, s->lim.total_bytes)))
        return PX_KV_LIMIT_BYTES;
    void *copy = malloc(len ? len : 1);
    if (!copy) return PX_KV_NO_MEMORY;
    memcpy(copy, value, len);
    if (!r && !(r = rec_new(s, q, key))) {
        free(copy);
        return PX_KV_NO_MEMORY;
    }
    free(r->value);
    r->value = copy;
    r->len = len;
    r->ns->keys += new_key;
    s->keys += new_key;
    r->ns->bytes += add - old;
    s->bytes += add - old;
    while (r->first) answer(s, r->first, fn, ctx);
    return PX_KV_OK;
}

int px_kv_get(px_store_kv_t *s, int64_t q, const char *key, const void **value, size_t *len) {
    rec_t *r = find(s, q, key);
    if (!r || !r->value) return 0;
    *value = r->value;
    *len = r->len;
    return 1;
}

/* ---- namespaces --------------------------------------------------------- */

/* Detaches ns, then frees its records, answering their waiters found=0. */
static void drop_ns(px_store_kv_t *s, ns_t *ns, px_kv_answer_fn fn, void *ctx) {
    ns_unlink(s, ns);
    for (rec_t *r = ns->recs, *next; r; r = next) {
        next = r->next;
        index_op(s, ns->q, r->key, r->klen, &r, 2);
        if (r->value) {
            s->keys--;
            s->bytes -= r->klen + r->len;
            free(r->value);
            r->value = NULL;
        }
        while (r->first) answer(s, r->first, fn, ctx);
        free(r->key);
        free(r);
    }
    free(ns);
}

void px_kv_drop_before(px_store_kv_t *s, int64_t keep_from, px_kv_answer_fn fn, void *ctx) {
    for (ns_t *ns = s->spaces, *next; ns; ns = next) {
        next = ns->next;
        if (ns->q < keep_from) drop_ns(s, ns, fn, ctx);
    }
}

void px_kv_destroy(px_store_kv_t **self) {
    px_store_kv_t *s = *self;
    if (!s) return;
    for (waiter_t *w = s->wfirst, *next; w; w = next) {
        next = w->gnext;
        free(w->peer);
        free(w);
    }
    for (ns_t *ns = s->spaces, *nn; ns; ns = nn) {
        nn = ns->next;
        for (rec_t *r = ns->recs, *nr; r; r = nr) {
            nr = r->next;
            free(r->key);
            free(r->value);
            free(r);
        }
        free(ns);
    }
    px_map_destroy(&s->index);
    px_map_destroy(&s->by_q);
    free(s);
    *self = NULL;
}

size_t px_kv_count(const px_store_kv_t *s) { return s->keys; }
size_t px_kv_bytes(const px_store_kv_t *s) { return s->bytes; }
size_t px_kv_waiters(const px_store_kv_t *s) { return s->waiters; }
