/* The coordinator's event log: every membership, quorum, commit, recovery,
 * checkpoint and mode event becomes one JSON object, written either to Kafka
 * (one message per event, key = job id) or to a JSONL file.
 *
 * Why a module of its own: the event log is the record people and tools read
 * after an incident, so it must neither stall the coordinator's loop (emit
 * never waits for the network) nor lose events quietly when Kafka is away
 * (bounded memory, then a spill file on local disk, delivered in order once
 * the brokers return). The schema and the delivery guarantees are documented
 * in docs/events.md; that file is the contract, this header the API.
 *
 * Threading: every function takes an internal lock, so another thread may
 * call px_events_stats while the loop emits. Delivery reports are served only
 * inside px_events_poll/emit/destroy, in the caller's thread. The fsyncs run
 * on a thread of the event log's own (events_sync.c), so emit and poll never
 * wait for the disk; flush and destroy do. */
#ifndef PX_EVENTS_H
#define PX_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "px_events_spec.h" /* the spec's grammar, PX_EVENTS_MAX_INFLIGHT */

#define PX_EVENTS_SCHEMA_VERSION 1
/* Largest event line in bytes; bigger `fields` are replaced by a marker. */
#define PX_EVENTS_MAX_LINE 65536

typedef struct px_events px_events_t;

/* produced: events emitted by this run.
 * delivered: Kafka: acknowledged by the brokers (a backlog left by a previous
 *   run counts too, so delivered may exceed produced); file: written and fsynced
 *   (counted when the loop collects the sync's result, on a later poll).
 * pending: not yet delivered (in memory, in the spill file, or not yet fsynced).
 * spilled: part of pending: events in the spill file not yet handed to Kafka.
 * delivery_failures: delivery errors reported by Kafka, failed writes or fsyncs
 *   of the file sink or the spill file; each is also logged. */
typedef struct {
    uint64_t produced, delivered, pending, spilled, delivery_failures;
} px_events_stats_t;

/* Tunables; px_events_opts_default() fills the defaults shown. */
typedef struct {
    int max_inflight; /* Kafka: events held in memory before spilling (10000) */
    int batch_events; /* file sink: fsync after this many events (100) */
    int batch_ms;     /* file sink and spill: fsync within this many ms (100) */
} px_events_opts_t;

void px_events_opts_default(px_events_opts_t *opts);

/* spec: "file:PATH" (JSONL, appended, flushed+fsynced in batches),
 * "kafka:HOST:PORT[,HOST:PORT...]/TOPIC[?max_inflight=N]", or NULL/"none"
 * (the grammar: px_events_spec.h).
 * job: the job id (Kafka message key). spill_dir: where the Kafka backlog
 * spills (a file named after the job; NULL means "."). A backlog left there by
 * a previous run of the same job is delivered before this run's events.
 * Returns NULL and a message naming the bad part of spec on error. */
px_events_t *px_events_new(const char *spec, const char *job, const char *spill_dir, char *err,
                           size_t errlen);
/* Same, with tunables (NULL = defaults). A ?max_inflight= in spec wins. */
px_events_t *px_events_new_opts(const char *spec, const char *job, const char *spill_dir,
                                const px_events_opts_t *opts, char *err, size_t errlen);

/* Appends one event. fields: extra JSON members without braces, e.g.
 * "\"group\":\"g1\",\"rank\":0", or NULL. Adds "v" (schema version), "type",
 * "seq" (monotone, from 1, no gaps, per coordinator run), "ts" (wall ms),
 * "job", "run" (a random id of this coordinator run). Fields that are not
 * valid JSON members are kept as a string in "bad_fields" (and logged), so an
 * event is never lost and never breaks a consumer. Returns seq (0 only when
 * ev is NULL; a "none" log counts seq too). Never blocks on the network and
 * never waits for an fsync. */
uint64_t px_events_emit(px_events_t *ev, const char *type, const char *fields);

/* Called from the coordinator's loop every ~10 ms: serves delivery reports,
 * moves spilled events back to Kafka, starts the background fsync of a due
 * batch and collects finished ones. Non-blocking: never waits for the disk. */
void px_events_poll(px_events_t *ev);

void px_events_stats(px_events_t *ev, px_events_stats_t *out);

/* Polls until nothing is pending or timeout_ms passed. Returns 0 when nothing
 * is pending. Useful before a planned shutdown and in tests. */
int px_events_flush(px_events_t *ev, int timeout_ms);

/* This run's id (16 hex digits), as written in every event's "run". */
const char *px_events_run_id(px_events_t *ev);

/* "file:/x.jsonl", "kafka:b1:9092/topic spill=/d/job.spill.jsonl", "none". */
void px_events_describe(px_events_t *ev, char *out, size_t outlen);

/* Flushes: file synced; Kafka waits up to timeout_ms for delivery, keeping the
 * undelivered in the spill file for the next run of the same job. Sets *ev = NULL. */
void px_events_destroy(px_events_t **ev, int timeout_ms);

/* Helper for callers: JSON-escapes s into out (always NUL-terminated; cut at
 * a character boundary when out is too small; invalid UTF-8 becomes U+FFFD). */
void px_json_escape(const char *s, char *out, size_t outlen);

/* 1 when s (len bytes) is a comma-separated list of JSON object members
 * ("\"k\":v,...", possibly empty), else 0. Used to check emit's fields. */
int px_json_members_valid(const char *s, size_t len);

#endif
