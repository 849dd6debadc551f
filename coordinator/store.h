/* The rendezvous key-value store the coordinator hosts for communicator
 * bootstrap (Gloo's store, the NCCL unique id). Keys live in the namespace of
 * one quorum id; namespaces of quorums older than the previous one are
 * dropped, so the store stays small however long the job runs. A get may wait
 * for its key: waiters are answered when the key is set or when they expire.
 * The store does no I/O: the coordinator turns answers into replies.
 *
 * Peers fill it, so it is bounded: keys, bytes (key plus value) and waiters,
 * per quorum namespace and in total; a request past a limit is refused with
 * a PX_KV_LIMIT_* code and changes nothing. Lookups are O(1) (px_map, keyed
 * hash), and a set finds its waiters without scanning the others. */
#ifndef PX_STORE_H
#define PX_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct px_store px_store_kv_t;

/* A waiter that was answered: found=1 with value, or found=0 on expiry. */
typedef struct {
    void *peer;        /* opaque, as given to px_kv_wait (the store frees it after the call) */
    uint64_t request_id;
    int found;
    const char *key;
    const void *value; /* valid until the next store call */
    size_t len;
} px_kv_answer_t;

typedef void (*px_kv_answer_fn)(void *ctx, const px_kv_answer_t *a);

/* Limits; 0 means none. */
typedef struct {
    size_t keys, bytes, waiters;                   /* per quorum namespace */
    size_t total_keys, total_bytes, total_waiters; /* the whole store */
} px_kv_limits_t;

/* What px_kv_set and px_kv_wait return. */
enum {
    PX_KV_OK = 0,
    PX_KV_NO_MEMORY = -1,
    PX_KV_LIMIT_KEYS = 1,
    PX_KV_LIMIT_BYTES = 2,
    PX_KV_LIMIT_WAITERS = 3,
};

px_store_kv_t *px_kv_new(void);
void px_kv_destroy(px_store_kv_t **self);
/* Applies to later requests; what is stored already stays. */
void px_kv_set_limits(px_store_kv_t *s, const px_kv_limits_t *lim);
/* Sets (quorum_id, key); answers the waiters for it through fn. PX_KV_OK,
 * PX_KV_NO_MEMORY, PX_KV_LIMIT_KEYS (a new key past the key limit) or
 * PX_KV_LIMIT_BYTES (a value that would grow the store past the byte limit). */
int px_kv_set(px_store_kv_t *s, int64_t quorum_id, const char *key, const void *value, size_t len,
              px_kv_answer_fn fn, void *ctx);
/* 1 and the value when present. */
int px_kv_get(px_store_kv_t *s, int64_t quorum_id, const char *key, const void **value, size_t *len);
/* Registers a waiter answered by a later set or by px_kv_expire. PX_KV_OK,
 * PX_KV_NO_MEMORY or PX_KV_LIMIT_WAITERS; on an error the caller keeps peer. */
int px_kv_wait(px_store_kv_t *s, int64_t quorum_id, const char *key, int64_t deadline_ms, void *peer,
               uint64_t request_id);
/* Answers (found=0) the waiters whose deadline passed. */
void px_kv_expire(px_store_kv_t *s, int64_t now_ms, px_kv_answer_fn fn, void *ctx);
/* Drops namespaces older than keep_from (and their waiters, answered found=0). */
void px_kv_drop_before(px_store_kv_t *s, int64_t keep_from, px_kv_answer_fn fn, void *ctx);
size_t px_kv_count(const px_store_kv_t *s);   /* keys holding a value */
size_t px_kv_bytes(const px_store_kv_t *s);   /* their keys' and values' bytes */
size_t px_kv_waiters(const px_store_kv_t *s);

#endif
