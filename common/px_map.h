/* A small hash map from byte-string keys to int64 values (open addressing,
 * linear probing, tombstones on delete). The coordinator uses it to find a
 * member by ZeroMQ identity or by "group/rank" and a store key in O(1), so
 * 10,000 members at 10 Hz stay cheap. Keys are copied.
 *
 * Peers choose those keys, so the hash is SipHash-2-4 under a random key per
 * process (px_siphash.h): an attacker cannot craft keys that share a probe
 * chain and turn every lookup into a scan (hash flooding). */
#ifndef PX_MAP_H
#define PX_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct px_map px_map_t;

px_map_t *px_map_new(void);
void px_map_destroy(px_map_t **self);
/* Inserts or replaces. 0 on success, -1 on allocation failure. */
int px_map_put(px_map_t *m, const void *key, size_t klen, int64_t value);
/* 1 and *value when found, else 0. */
int px_map_get(const px_map_t *m, const void *key, size_t klen, int64_t *value);
void px_map_del(px_map_t *m, const void *key, size_t klen);
size_t px_map_size(const px_map_t *m);
/* The hash px_map uses for a key (exposed so tests can check it is keyed). */
uint64_t px_map_hash(const void *key, size_t klen);
/* The longest distance of a live entry from its home slot: how many probes
 * the slowest lookup costs. Stays small unless the keys collide. */
size_t px_map_max_displacement(const px_map_t *m);

#endif
