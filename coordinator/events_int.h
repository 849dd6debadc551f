/* Internal interfaces of the event log, shared by its files and nobody else:
 *   events.c        the public API: spec parsing, the event envelope, locking
 *   events_file.c   an append-only JSONL file written in fsynced batches
 *                   (the file sink, and the storage under the Kafka spill)
 *   events_kafka.c  the Kafka sink: idempotent producer, memory cap, spill, drain
 *   events_json.c   escaping and validation
 * Every sink takes complete lines ending in '\n'. */
#ifndef PX_EVENTS_INT_H
#define PX_EVENTS_INT_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "events.h"

/* ---- append-only file with batched fsync (events_file.c) ---- */

/* Bytes that could not be written yet (disk full, I/O error) wait in memory
 * up to this many bytes; past it a line is refused, counted and logged. */
#define PX_APPENDER_MAX_BUFFERED (64u << 20)

typedef struct {
    int fd;
    char path[PATH_MAX];
    char *buf; /* bytes the file refused so far, written first on the next try */
    size_t len, cap;
    uint64_t unsynced;      /* lines written (or buffered) since the last fsync */
    int64_t first_unsynced_ms;
    int64_t size;           /* bytes in the file (what write() accepted) */
    uint64_t failures;      /* failed writes/fsyncs, lines refused */
    int64_t last_err_log_ms;
} px_appender_t;

/* Opens (creating) path for appending. 0, or -1 with a message in err. */
int px_appender_open(px_appender_t *a, const char *path, char *err, size_t errlen);
/* Appends one line (ending in '\n'). 0: written or buffered; -1: refused
 * (buffer full); the failure is counted and logged either way. */
int px_appender_append(px_appender_t *a, const char *line, size_t len);
/* Writes buffered bytes. 0 when nothing is left in memory. */
int px_appender_write_buffered(px_appender_t *a);
/* Writes what is buffered and fsyncs. Returns the number of lines that became
 * durable (0 when nothing was pending), or -1 on failure (counted and logged). */
int64_t px_appender_sync(px_appender_t *a);
/* Syncs when a batch is due: `batch_lines` lines or `batch_ms` since the first
 * unsynced line. Same return as px_appender_sync. */
int64_t px_appender_maybe_sync(px_appender_t *a, uint64_t batch_lines, int batch_ms);
void px_appender_close(px_appender_t *a);

/* ---- Kafka sink (events_kafka.c) ---- */

typedef struct px_kafka px_kafka_t;

px_kafka_t *px_kafka_new(const char *brokers, const char *topic, const char *job,
                         const char *spill_dir, const px_events_opts_t *opts, char *err,
                         size_t errlen);
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
