/* Internal interfaces of the event log, shared by its files and nobody else:
 *   events.c        the public API: the event envelope, locking
 *   events_spec.c   --events spec parsing (pure; also linked alone by phalanxctl)
 *   events_file.c   an append-only JSONL file written in fsynced batches
 *                   (the file sink, and the storage under the Kafka spill)
 *   events_sync.c   the thread that runs those fsyncs, off the caller's loop
 *   events_kafka.c  the Kafka sink: idempotent producer, memory cap, spill, drain
 *   events_json.c   escaping and validation
 * Every sink takes complete lines ending in '\n'. */
#ifndef PX_EVENTS_INT_H
#define PX_EVENTS_INT_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "events.h"

/* ---- background fdatasync (events_sync.c) ---- */

typedef struct px_syncer px_syncer_t;

/* One file's sync request; lives in its owner, at most one in flight each. */
typedef struct px_sync_req {
    int fd;
    int state; /* under the syncer's lock */
    int err;   /* errno of a failed fdatasync, 0 on success; read after collect */
    struct px_sync_req *next;
} px_sync_req_t;

/* Starts the thread. NULL and a message on failure. */
px_syncer_t *px_syncer_new(char *err, size_t errlen);
/* Runs every queued request, then stops the thread. Sets *s = NULL. */
void px_syncer_destroy(px_syncer_t **s);
/* Queues fdatasync(fd) for r, which must not be in flight. Never blocks on I/O. */
void px_syncer_submit(px_syncer_t *s, px_sync_req_t *r, int fd);
/* 1 when r's sync has finished (r->err tells how; r is free again), 0 while it
 * is queued or running, or when r was never submitted. wait: block until done. */
int px_syncer_collect(px_syncer_t *s, px_sync_req_t *r, int wait);

/* ---- append-only file with batched fsync (events_file.c) ---- */

/* Bytes that could not be written yet (disk full, I/O error) wait in memory
 * up to this many bytes; past it a line is refused, counted and logged. */
#define PX_APPENDER_MAX_BUFFERED (64u << 20)

typedef struct {
    int fd;
    char path[PATH_MAX];
    char *buf; /* bytes the file refused so far, written first on the next try */
    size_t len, cap;
    uint64_t unsynced;      /* lines written (or buffered) and not yet durable */
    int64_t first_unsynced_ms; /* when the first line the running sync does not cover came */
    int64_t size;           /* bytes in the file (what write() accepted) */
    uint64_t failures;      /* failed writes/fsyncs, lines refused */
    int64_t last_err_log_ms;
    px_syncer_t *syncer;    /* runs the fdatasyncs */
    px_sync_req_t req;
    int syncing;            /* a sync of req is in flight */
    uint64_t sync_lines;    /* lines it covers (part of unsynced) */
} px_appender_t;

/* Opens (creating) path for appending; its fsyncs run on syncer's thread.
 * 0, or -1 with a message in err. */
int px_appender_open(px_appender_t *a, const char *path, px_syncer_t *syncer, char *err, size_t errlen);
/* Appends one line (ending in '\n') with write(), at once. 0: written or
 * buffered; -1: refused (buffer full); the failure is counted and logged either way. */
int px_appender_append(px_appender_t *a, const char *line, size_t len);
/* Writes buffered bytes. 0 when nothing is left in memory. */
int px_appender_write_buffered(px_appender_t *a);
/* Waits for a sync in flight, writes what is buffered, fsyncs and waits for
 * it: for shutdown and explicit flushes, never the loop's regular path.
 * Returns the number of lines that became durable (0 when nothing was
 * pending), or -1 when none did because a sync failed (counted and logged). */
int64_t px_appender_sync(px_appender_t *a);
/* Never waits: collects a finished background sync, and starts one when a
 * batch is due (`batch_lines` lines, or `batch_ms` since the first line not
 * yet covered) and none is in flight. Returns the lines that became durable
 * since the last call, or -1 when a sync failed (counted and logged). */
int64_t px_appender_maybe_sync(px_appender_t *a, uint64_t batch_lines, int batch_ms);
/* Empties the file (every line in it is delivered elsewhere): ftruncate to 0,
 * nothing pending any more. 0, or -1 with errno set. */
int px_appender_truncate(px_appender_t *a);
/* Syncs (waiting), then closes. */
void px_appender_close(px_appender_t *a);

/* ---- Kafka sink (events_kafka.c) ---- */

typedef struct px_kafka px_kafka_t;

/* syncer: runs the spill file's and the .done file's fsyncs. */
px_kafka_t *px_kafka_new(const char *brokers, const char *topic, const char *job,
                         const char *spill_dir, px_syncer_t *syncer, const px_events_opts_t *opts,
                         char *err, size_t errlen);
/* Hands one line to Kafka or, past the memory cap or while spilling, to the
 * spill file. Never blocks on the network. */
void px_kafka_send(px_kafka_t *k, const char *line, size_t len);
void px_kafka_poll(px_kafka_t *k);
/* Makes the spill file and its delivered offset durable now. */
void px_kafka_sync(px_kafka_t *k);
/* Fills delivered, pending, spilled, delivery_failures. */
void px_kafka_stats(px_kafka_t *k, px_events_stats_t *out);
void px_kafka_describe(px_kafka_t *k, char *out, size_t outlen);
/* Waits up to timeout_ms for delivery; keeps the rest in the spill file. */
void px_kafka_close(px_kafka_t *k, int timeout_ms);

#endif
