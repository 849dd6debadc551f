/* A small hash map from byte-string keys to int64 values (open addressing,
 * linear probing, tombstones on delete). The coordinator uses it to find a
 * member by ZeroMQ identity or by "group/rank" in O(1), so 10,000 members at
 * 10 Hz stay cheap. Keys are copied. */
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

#endif
