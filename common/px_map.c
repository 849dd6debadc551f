/* Implementation of px_map.h. Load factor is kept under 1/2 (tombstones
 * included), so probes stay short; the table doubles and rehashes past it. */
#include "px_map.h"

#include <stdlib.h>
#include <string.h>

#include "px_siphash.h"

typedef struct {
    void *key; /* NULL: empty; TOMB: deleted */
    size_t klen;
    uint64_t hash;
    int64_t value;
} slot_t;

struct px_map {
    slot_t *slots;
    size_t cap, used, live;
    const uint8_t *hash_key; /* this process's SipHash key */
};

static char tomb_marker;
#define TOMB ((void *)&tomb_marker)

px_map_t *px_map_new(void) {
    px_map_t *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->cap = 16;
    m->hash_key = px_siphash_process_key();
    m->slots = calloc(m->cap, sizeof *m->slots);
    if (!m->slots) {
        free(m);
        return NULL;
    }
    return m;
}

void px_map_destroy(px_map_t **self) {
    if (!*self) return;
    px_map_t *m = *self;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key && m->slots[i].key != TOMB) free(m->slots[i].key);
    free(m->slots);
    free(m);
    *self = NULL;
}

static slot_t *find(const px_map_t *m, const void *key, size_t klen, uint64_t h) {
    size_t i = h & (m->cap - 1);
    for (;;) {
        slot_t *s = &m->slots[i];
        if (!s->key) return NULL;
        if (s->key != TOMB && s->hash == h && s->klen == klen && memcmp(s->key, key, klen) == 0)
            return s;
        i = (i + 1) & (m->cap - 1);
    }
}

static int grow(px_map_t *m) {
    /* Mostly tombstones: rehash at the same size; otherwise double. */
    size_t ncap = (m->live + 1) * 4 > m->cap ? m->cap * 2 : m->cap;
    slot_t *ns = calloc(ncap, sizeof *ns);
    if (!ns) return -1;
    for (size_t i = 0; i < m->cap; i++) {
        slot_t *s = &m->slots[i];
        if (!s->key || s->key == TOMB) continue;
        size_t j = s->hash & (ncap - 1);
        while (ns[j].key) j = (j + 1) & (ncap - 1);
        ns[j] = *s;
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    m->used = m->live;
    return 0;
}

int px_map_put(px_map_t *m, const void *key, size_t klen, int64_t value) {
    uint64_t h = px_siphash24(m->hash_key, key, klen);
    slot_t *s = find(m, key, klen, h);
    if (s) {
        s->value = value;
        return 0;
    }
    if ((m->used + 1) * 2 > m->cap && grow(m) != 0) return -1;
    size_t i = h & (m->cap - 1);
    while (m->slots[i].key && m->slots[i].key != TOMB) i = (i + 1) & (m->cap - 1);
    void *k = malloc(klen ? klen : 1);
    if (!k) return -1;
    memcpy(k, key, klen);
    if (!m->slots[i].key) m->used++;
    m->slots[i] = (slot_t){k, klen, h, value};
    m->live++;
    return 0;
}

int px_map_get(const px_map_t *m, const void *key, size_t klen, int64_t *value) {
    slot_t *s = find(m, key, klen, px_siphash24(m->hash_key, key, klen));
    if (!s) return 0;
    *value = s->value;
    return 1;
}

void px_map_del(px_map_t *m, const void *key, size_t klen) {
    slot_t *s = find(m, key, klen, px_siphash24(m->hash_key, key, klen));
    if (!s) return;
    free(s->key);
    s->key = TOMB;
    m->live--;
}

size_t px_map_size(const px_map_t *m) { return m->live; }

uint64_t px_map_hash(const void *key, size_t klen) { return px_siphash24(px_siphash_process_key(), key, klen); }

size_t px_map_max_displacement(const px_map_t *m) {
    size_t worst = 0;
    for (size_t i = 0; i < m->cap; i++) {
        const slot_t *s = &m->slots[i];
        if (!s->key || s->key == TOMB) continue;
        size_t d = (i - (size_t)s->hash) & (m->cap - 1);
        if (d > worst) worst = d;
    }
    return worst;
}
