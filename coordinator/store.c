/* Implementation of store.h. The store holds at most a few hundred keys
 * (a handful per rank per quorum), so plain arrays with linear search are
 * enough and easy to reason about. */
#include "store.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t q;
    char *key;
    void *value;
    size_t len;
} entry_t;

typedef struct {
    int64_t q;
    char *key;
    int64_t deadline_ms;
    void *peer;
    uint64_t request_id;
} waiter_t;

struct px_store {
    entry_t *e;
    size_t n, cap;
    waiter_t *w;
    size_t nw, capw;
};

px_store_kv_t *px_kv_new(void) { return calloc(1, sizeof(px_store_kv_t)); }

void px_kv_destroy(px_store_kv_t **self) {
    px_store_kv_t *s = *self;
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) free(s->e[i].key), free(s->e[i].value);
    for (size_t i = 0; i < s->nw; i++) free(s->w[i].key), free(s->w[i].peer);
    free(s->e);
    free(s->w);
    free(s);
    *self = NULL;
}

static entry_t *find(px_store_kv_t *s, int64_t q, const char *key) {
    for (size_t i = 0; i < s->n; i++)
        if (s->e[i].q == q && strcmp(s->e[i].key, key) == 0) return &s->e[i];
    return NULL;
}

/* Answers and removes waiter i (order of the others is kept). */
static void answer(px_store_kv_t *s, size_t i, const entry_t *e, px_kv_answer_fn fn, void *ctx) {
    waiter_t w = s->w[i];
    memmove(&s->w[i], &s->w[i + 1], (s->nw - i - 1) * sizeof *s->w);
    s->nw--;
    px_kv_answer_t a = {w.peer, w.request_id, e != NULL, w.key, e ? e->value : NULL, e ? e->len : 0};
    fn(ctx, &a);
    free(w.key);
    free(w.peer);
}

int px_kv_set(px_store_kv_t *s, int64_t q, const char *key, const void *value, size_t len,
              px_kv_answer_fn fn, void *ctx) {
    void *copy = malloc(len ? len : 1);
    if (!copy) return -1;
    memcpy(copy, value, len);
    entry_t *e = find(s, q, key);
    if (e) {
        free(e->value);
    } else {
        if (s->n == s->cap) {
            size_t ncap = s->cap ? s->cap * 2 : 32;
            entry_t *ne = realloc(s->e, ncap * sizeof *ne);
            if (!ne) {
                free(copy);
                return -1;
            }
            s->e = ne;
            s->cap = ncap;
        }
        e = &s->e[s->n];
        e->key = strdup(key);
        if (!e->key) {
            free(copy);
            return -1;
        }
        e->q = q;
        s->n++;
    }
    e->value = copy;
    e->len = len;
    for (size_t i = 0; i < s->nw;) {
        if (s->w[i].q == q && strcmp(s->w[i].key, key) == 0)
            answer(s, i, e, fn, ctx);
        else
            i++;
    }
    return 0;
}

int px_kv_get(px_store_kv_t *s, int64_t q, const char *key, const void **value, size_t *len) {
    entry_t *e = find(s, q, key);
    if (!e) return 0;
    *value = e->value;
    *len = e->len;
    return 1;
}

int px_kv_wait(px_store_kv_t *s, int64_t q, const char *key, int64_t deadline_ms, void *peer,
               uint64_t request_id) {
    if (s->nw == s->capw) {
        size_t ncap = s->capw ? s->capw * 2 : 32;
        waiter_t *nw = realloc(s->w, ncap * sizeof *nw);
        if (!nw) return -1;
        s->w = nw;
        s->capw = ncap;
    }
    char *k = strdup(key);
    if (!k) return -1;
    s->w[s->nw++] = (waiter_t){q, k, deadline_ms, peer, request_id};
    return 0;
}

void px_kv_expire(px_store_kv_t *s, int64_t now_ms, px_kv_answer_fn fn, void *ctx) {
    for (size_t i = 0; i < s->nw;) {
        if (s->w[i].deadline_ms <= now_ms)
            answer(s, i, NULL, fn, ctx);
        else
            i++;
    }
}

void px_kv_drop_before(px_store_kv_t *s, int64_t keep_from, px_kv_answer_fn fn, void *ctx) {
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->e[i].q < keep_from) {
            free(s->e[i].key);
            free(s->e[i].value);
        } else {
            s->e[k++] = s->e[i];
        }
    }
    s->n = k;
    for (size_t i = 0; i < s->nw;) {
        if (s->w[i].q < keep_from)
            answer(s, i, NULL, fn, ctx);
        else
            i++;
    }
}

size_t px_kv_count(const px_store_kv_t *s) { return s->n; }
size_t px_kv_waiters(const px_store_kv_t *s) { return s->nw; }
