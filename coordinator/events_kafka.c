/* The Kafka sink of the event log: an idempotent librdkafka producer (acks=all,
 * key = job id) in front of a spill file, so that a broker outage neither
 * blocks the coordinator nor loses, reorders or duplicates events.
 *
 * The one invariant everything below keeps: events reach librdkafka in the
 * order they were emitted. librdkafka then keeps that order per partition
 * (the key sends every event of a job to one partition) and the idempotent
 * producer removes the duplicates its own retries would cause.
 *
 *  - Journal: every event is first appended to <spill_dir>/<job>.spill.jsonl
 *    (one write(), fsynced in batches on the event log's sync thread, as is
 *    the .done file below: the loop never waits for the disk), and the file
 *    keeps a line until Kafka acknowledged it: <job>.spill.done holds the
 *    offset below which every line is delivered. So a coordinator killed at
 *    any moment loses nothing it emitted; the next run resends from that
 *    offset (at-least-once for the events delivered or in flight just before
 *    the crash). Once everything in the file is delivered it is truncated.
 *  - Normal: the event is also handed to librdkafka at once.
 *  - Memory cap: librdkafka holds at most `max_inflight` undelivered events
 *    (message.timeout.ms=0: they wait for the brokers forever instead of
 *    timing out, which with idempotence would leave a gap). Past the cap, or
 *    when librdkafka refuses, we start *spilling*: this event and every later
 *    one stays only in the file, not yet handed to librdkafka.
 *  - Drain: once every in-memory event is delivered (inflight == 0, which also
 *    proves the brokers are back), lines are read back from the spill file, in
 *    order, keeping at most `max_inflight` in librdkafka. New events keep
 *    going to the end of the file until the reader reaches it; then spilling
 *    ends and emit goes straight to librdkafka again.
 *  - A backlog left by a previous run of the same job (a crash, or a shutdown
 *    during an outage) is found at start-up and delivered before this run's
 *    events, which simply start out spilling behind it.
 *  - Delivery errors (rare with an infinite timeout: a broker refusing the
 *    topic, a fatal idempotence error) are counted and logged. Events a broker
 *    refuses for their content go to <job>.failed.jsonl; for every other error
 *    we purge librdkafka, put all undelivered events back at the head of the
 *    spill file in production order, recreate the producer after a fatal
 *    error, and drain again after a second. Events that were in flight at that
 *    moment may then arrive twice: the (run, seq) pair identifies them.
 *  - Shutdown waits up to the caller's timeout, then purges and writes the
 *    undelivered events back to the spill file, ahead of its unread part.
 *
 * Delivery reports and errors are served by rd_kafka_poll in the caller's
 * thread (px_events_poll), so no state here is touched by librdkafka's threads
 * except the log callback's rate limiter. */
#include <errno.h>
#include <fcntl.h>
#include <librdkafka/rdkafka.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "events_int.h"
#include "px_log.h"
#include "px_time.h"

enum {
    DRAIN_BACKOFF_MS = 1000,    /* after a producer reset, before reading the spill again */
    READ_BUF = 1 << 20,         /* spill read buffer; any line we write is far shorter */
    PURGE_WAIT_MS = 5000,       /* purged messages report back locally, this is generous */
    ERR_LOG_INTERVAL_MS = 5000, /* repeated connection errors: one line per interval */
};

typedef struct {
    uint64_t pseq;     /* production order */
    int64_t spill_end; /* end offset of the spill line it was read from, or -1 */
} msg_ref_t;

typedef struct { /* an undelivered event on its way back into the spill file */
    uint64_t pseq;
    char *line; /* with '\n' */
    size_t len;
} held_t;

struct px_kafka {
    rd_kafka_t *rk;
    char brokers[1024], topic[256], job[256];
    px_events_opts_t opts;

    uint64_t next_pseq;
    uint64_t inflight; /* handed to librdkafka, no delivery report yet */
    uint64_t delivered, failures, dead_lettered;

    /* spill */
    px_appender_t spill;
    char spill_path[PATH_MAX], done_path[PATH_MAX], lock_path[PATH_MAX], dead_path[PATH_MAX];
    char spill_dir[PATH_MAX - 256]; /* room for "/<job>.spill.jsonl" in the paths */
    int lock_fd, done_fd;
    int64_t read_off;       /* next spill byte to hand to librdkafka (offsets count the
                               bytes still in spill.buf, see logical_size) */
    int64_t done_off;       /* every line below this offset is delivered */
    int64_t done_persisted; /* durable value in the .done file (-1: unknown) */
    int64_t done_synced_ms, truncated_ms;
    px_syncer_t *syncer;    /* runs the fsyncs of the spill, .done and dead-letter files */
    px_sync_req_t done_req;
    int done_syncing;       /* a .done sync is in flight ... */
    int64_t done_writing;   /* ... for this value */
    int truncating;         /* .done = 0 is being made durable before the spill is emptied */
    uint64_t spill_unread;  /* spilled lines not yet handed to librdkafka */
    int spilling, draining;
    int64_t drain_after_ms;
    char *rbuf; /* cache of spill bytes [rbuf_off, rbuf_off + rbuf_len) */
    int64_t rbuf_off;
    size_t rbuf_len;

    /* errors */
    held_t *held;
    size_t nheld, capheld;
    int reset_requested, resetting, fatal;
    char reset_reason[256];
    px_appender_t dead;
    int dead_open;

    int unreachable;
    int64_t last_err_log_ms, last_fail_log_ms;
    uint64_t fails_unlogged;
    _Atomic int64_t last_lib_log_ms; /* written from librdkafka's threads */
};

/* ---- small helpers ---- */

static void cache_drop(px_kafka_t *k) { k->rbuf_len = 0; }

/* .done: the loop pwrite()s the offset (a page-cache copy) and the sync
 * thread makes it durable; done_persisted moves only once that sync is done.
 * One write in flight at a time. */
static void collect_done(px_kafka_t *k, int wait) {
    if (!k->done_syncing || !px_syncer_collect(k->syncer, &k->done_req, wait)) return;
    k->done_syncing = 0;
    if (k->done_req.err) {
        k->failures++;
        px_log_error("events_io_failed op=fsync path=%s error=\"%s\"", k->done_path,
                     strerror(k->done_req.err));
        return; /* done_persisted unchanged: persist_done writes it again */
    }
    k->done_persisted = k->done_writing;
}

/* Writes value to .done and starts its sync (waits for it when `wait`).
 * The caller made sure no .done sync is in flight. */
static void write_done(px_kafka_t *k, int64_t value, int wait) {
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%020lld\n", (long long)value);
    k->done_synced_ms = px_now_ms();
    if (pwrite(k->done_fd, buf, (size_t)n, 0) != n) {
        k->failures++;
        px_log_error("events_io_failed op=write path=%s error=\"%s\"", k->done_path,
                     strerror(errno));
        return;
    }
    k->done_writing = value;
    k->done_syncing = 1;
    px_syncer_submit(k->syncer, &k->done_req, k->done_fd);
    if (wait) collect_done(k, 1);
}

/* Makes done_off durable in batches (force: now, waiting). A forced persist
 * also gives up an emptying of the spill in progress (maybe_truncate). */
static void persist_done(px_kafka_t *k, int force) {
    collect_done(k, force);
    if (k->done_syncing) return;
    if (k->truncating) {
        if (!force) return; /* the truncation owns .done until it is finished */
        k->truncating = 0;
    }
    if (k->done_off == k->done_persisted) return;
    if (!force && px_now_ms() - k->done_synced_ms < k->opts.batch_ms) return;
    write_done(k, k->done_off, force);
}

static void dead_letter(px_kafka_t *k, const char *payload, size_t len, const char *why) {
    if (!k->dead_open) {
        char err[512];
        if (px_appender_open(&k->dead, k->dead_path, k->syncer, err, sizeof err) != 0) {
            k->failures++;
            px_log_error("events_lost reason=\"%s; dead-letter file: %s\" event=%.*s", why, err,
                         (int)(len > 300 ? 300 : len), payload);
            return;
        }
        k->dead_open = 1;
    }
    char *line = malloc(len + 1);
    if (line) {
        memcpy(line, payload, len);
        line[len] = '\n';
        px_appender_append(&k->dead, line, len + 1);
        px_appender_maybe_sync(&k->dead, 1, 0); /* starts its sync; px_kafka_poll collects it */
        free(line);
    }
    k->dead_lettered++;
    px_log_error("events_dead_lettered path=%s reason=\"%s\" event=%.*s", k->dead_path, why,
                 (int)(len > 300 ? 300 : len), payload);
}

static void hold(px_kafka_t *k, uint64_t pseq, const void *payload, size_t len) {
    if (k->nheld == k->capheld) {
        size_t cap = k->capheld ? k->capheld * 2 : 64;
        held_t *nh = realloc(k->held, cap * sizeof *nh);
        if (!nh) goto oom;
        k->held = nh;
        k->capheld = cap;
    }
    char *line = malloc(len + 1);
    if (!line) goto oom;
    memcpy(line, payload, len);
    line[len] = '\n';
    k->held[k->nheld++] = (held_t){pseq, line, len + 1};
    return;
oom:
    k->failures++;
    px_log_error("events_lost reason=\"out of memory while requeueing\" event=%.*s",
                 (int)(len > 300 ? 300 : len), (const char *)payload);
}

static int held_cmp(const void *a, const void *b) {
    uint64_t x = ((const held_t *)a)->pseq, y = ((const held_t *)b)->pseq;
    return x < y ? -1 : x > y;
}

static void start_spilling(px_kafka_t *k, const char *why) {
    if (k->spilling) return;
    k->spilling = 1;
    k->draining = 0;
    px_log_warn("events_spill_started reason=\"%s\" in_memory=%llu cap=%d path=%s", why,
                (unsigned long long)k->inflight, k->opts.max_inflight, k->spill_path);
}

/* The file's size plus the bytes the disk has not taken yet. */
static int64_t logical_size(const px_kafka_t *k) { return k->spill.size + (int64_t)k->spill.len; }

/* ---- producing ---- */

static rd_kafka_resp_err_t produce(px_kafka_t *k, const char *payload, size_t len,
                                  int64_t spill_end) {
    msg_ref_t *ref = malloc(sizeof *ref);
    if (!ref) return RD_KAFKA_RESP_ERR__QUEUE_FULL; /* treated as "not now": it spills */
    ref->pseq = k->next_pseq;
    ref->spill_end = spill_end;
    rd_kafka_resp_err_t err = rd_kafka_producev(
        k->rk, RD_KAFKA_V_TOPIC(k->topic), RD_KAFKA_V_KEY(k->job, strlen(k->job)),
        RD_KAFKA_V_VALUE((void *)payload, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_OPAQUE(ref), RD_KAFKA_V_END);
    if (err) {
        free(ref);
        return err;
    }
    k->next_pseq++;
    k->inflight++;
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}

static void request_reset(px_kafka_t *k, const char *why) {
    if (k->reset_requested || k->resetting) return;
    k->reset_requested = 1;
    snprintf(k->reset_reason, sizeof k->reset_reason, "%s", why);
}

void px_kafka_send(px_kafka_t *k, const char *line, size_t len) {
    /* Journal first. If the disk refuses it too, Kafka is its only chance. */
    int journaled = px_appender_append(&k->spill, line, len) == 0;
    int64_t end = logical_size(k);
    const char *why = NULL;
    if (k->spilling || k->resetting || k->reset_requested) {
        why = "producer reset";
    } else if (k->inflight >= (uint64_t)k->opts.max_inflight) {
        why = "in-memory cap reached";
    } else {
        rd_kafka_resp_err_t err = produce(k, line, len - 1, journaled ? end : -1);
        if (!err) {
            if (journaled) k->read_off = end; /* not spilling: read_off was at the end */
            return;
        }
        if (err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE) { /* never sendable: set it aside */
            k->failures++;
            dead_letter(k, line, len - 1, rd_kafka_err2str(err));
            if (journaled) {
                k->read_off = end;
                if (k->inflight == 0) k->done_off = end;
            }
            return;
        }
        if (err == RD_KAFKA_RESP_ERR__FATAL) {
            k->fatal = 1;
            request_reset(k, "fatal producer error");
        }
        why = rd_kafka_err2str(err);
    }
    if (!journaled) { /* neither the disk nor Kafka took it (counted by the appender) */
        px_log_error("events_lost reason=\"the spill file refuses writes and Kafka is not "
                     "taking events (%s)\" event=%.*s",
                     why, (int)(len > 300 ? 300 : len - 1), line);
        return;
    }
    start_spilling(k, why);
    k->spill_unread++;
}

/* ---- librdkafka callbacks (served inside rd_kafka_poll, our thread) ---- */

static int refused_for_content(rd_kafka_resp_err_t err) {
    return err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
           err == RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE || err == RD_KAFKA_RESP_ERR_INVALID_MSG ||
           err == RD_KAFKA_RESP_ERR_INVALID_RECORD;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    px_kafka_t *k = opaque;
    msg_ref_t *ref = m->_private;
    k->inflight--;
    if (!m->err) {
        k->delivered++;
        if (ref->spill_end > k->done_off) k->done_off = ref->spill_end;
        if (k->unreachable) {
            k->unreachable = 0;
            px_log_info("events_kafka_reachable brokers=%s", k->brokers);
        }
    } else if (m->err == RD_KAFKA_RESP_ERR__PURGE_QUEUE ||
               m->err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT) {
        hold(k, ref->pseq, m->payload, m->len); /* our own purge: goes back to the spill */
    } else {
        k->failures++;
        int64_t now = px_now_ms();
        if (now - k->last_fail_log_ms >= 1000) {
            px_log_error("events_delivery_failed error=\"%s\" failures=%llu similar_unlogged=%llu "
                         "event=%.*s",
                         rd_kafka_err2str(m->err), (unsigned long long)k->failures,
                         (unsigned long long)k->fails_unlogged, (int)(m->len > 300 ? 300 : m->len),
                         (const char *)m->payload);
            k->last_fail_log_ms = now;
            k->fails_unlogged = 0;
        } else {
            k->fails_unlogged++;
        }
        if (refused_for_content(m->err)) {
            dead_letter(k, m->payload, m->len, rd_kafka_err2str(m->err));
            if (ref->spill_end > k->done_off && k->inflight == 0) k->done_off = ref->spill_end;
        } else {
            hold(k, ref->pseq, m->payload, m->len);
            if (m->err == RD_KAFKA_RESP_ERR__FATAL) k->fatal = 1;
            request_reset(k, rd_kafka_err2str(m->err));
        }
    }
    free(ref);
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    px_kafka_t *k = opaque;
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char why[512];
        rd_kafka_resp_err_t orig = rd_kafka_fatal_error(rk, why, sizeof why);
        k->failures++;
        k->fatal = 1;
        px_log_error("events_kafka_fatal error=%s reason=\"%s\"", rd_kafka_err2name(orig), why);
        request_reset(k, "fatal producer error");
        return;
    }
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
        if (!k->unreachable) {
            k->unreachable = 1;
            px_log_warn("events_kafka_unreachable brokers=%s keeping=\"up to %d events in memory, "
                        "then %s\"",
                        k->brokers, k->opts.max_inflight, k->spill_path);
        }
        return;
    }
    int64_t now = px_now_ms();
    if (now - k->last_err_log_ms < ERR_LOG_INTERVAL_MS) return;
    k->last_err_log_ms = now;
    px_log_warn("events_kafka_error error=%s reason=\"%s\"",
                rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

/* librdkafka's own log lines come from its threads; one a second is plenty. */
static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    px_kafka_t *k = rd_kafka_opaque(rk);
    int64_t now = px_now_ms(), last = atomic_load(&k->last_lib_log_ms);
    if (now - last < 1000 || !atomic_compare_exchange_strong(&k->last_lib_log_ms, &last, now))
        return;
    px_log(level <= 3 ? "error" : "warn", "kafka_log fac=%s msg=\"%s\"", fac, buf);
}

static rd_kafka_t *make_producer(px_kafka_t *k, char *err, size_t errlen) {
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char cap[32];
    snprintf(cap, sizeof cap, "%d", k->opts.max_inflight);
    const char *kv[][2] = {
        {"bootstrap.servers", k->brokers},
        {"client.id", "phalanx-coordinator"},
        {"enable.idempotence", "true"},
        {"acks", "all"},
        /* Infinite: an event waits for the brokers; with idempotence a timeout
         * would skip it and leave a gap. Memory is bounded by the cap instead. */
        {"message.timeout.ms", "0"},
        {"queue.buffering.max.messages", cap},
        {"queue.buffering.max.kbytes", "1048576"},
        {"linger.ms", "5"},
        {"reconnect.backoff.ms", "100"},
        {"reconnect.backoff.max.ms", "1000"},
        {"log.connection.close", "false"},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
        char why[256];
        if (rd_kafka_conf_set(conf, kv[i][0], kv[i][1], why, sizeof why) != RD_KAFKA_CONF_OK) {
            snprintf(err, errlen, "kafka setting %s=%s: %s", kv[i][0], kv[i][1], why);
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    }
    rd_kafka_conf_set_opaque(conf, k);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_log_cb(conf, on_log);
    char why[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof why);
    if (!rk) {
        snprintf(err, errlen, "cannot create Kafka producer: %s", why);
        rd_kafka_conf_destroy(conf);
    }
    return rk;
}

/* ---- the spill file ---- */

/* The next complete line at read_off: sets *line (with '\n') and *len.
 * 0 when there is none yet, -1 when the line is longer than the read buffer. */
static int next_spill_line(px_kafka_t *k, const char **line, size_t *len) {
    int64_t avail_end = k->spill.size;
    if (k->read_off >= avail_end) return 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (k->read_off >= k->rbuf_off && k->read_off < k->rbuf_off + (int64_t)k->rbuf_len) {
            const char *p = k->rbuf + (k->read_off - k->rbuf_off);
            size_t n = k->rbuf_len - (size_t)(k->read_off - k->rbuf_off);
            const char *nl = memchr(p, '\n', n);
            if (nl) {
                *line = p;
                *len = (size_t)(nl - p) + 1;
                return 1;
            }
        }
        if (attempt) break;
        ssize_t r = pread(k->spill.fd, k->rbuf, READ_BUF, k->read_off);
        k->rbuf_off = k->read_off;
        k->rbuf_len = r > 0 ? (size_t)r : 0;
        if (r < 0) {
            k->failures++;
            px_log_error("events_io_failed op=read path=%s error=\"%s\"", k->spill_path,
                         strerror(errno));
            return 0;
        }
    }
    if (k->rbuf_len < READ_BUF) return 0; /* the line is still being written */
    *line = k->rbuf;
    *len = k->rbuf_len;
    return -1;
}

static void drain(px_kafka_t *k) {
    if (!k->spilling || k->resetting || k->reset_requested) return;
    if (!k->draining) {
        /* In-memory events go first; their delivery also shows the brokers are back. */
        if (k->inflight > 0 || px_now_ms() < k->drain_after_ms) return;
        k->draining = 1;
        px_log_info("events_spill_draining backlog=%llu path=%s",
                    (unsigned long long)k->spill_unread, k->spill_path);
    }
    px_appender_write_buffered(&k->spill); /* bytes the disk refused earlier come first */
    while (k->inflight < (uint64_t)k->opts.max_inflight) {
        const char *line;
        size_t len;
        int r = next_spill_line(k, &line, &len);
        if (r == 0) break;
        if (r < 0) {
            /* Not something we wrote; skip past it rather than stall forever. */
            int64_t skip = k->read_off + (int64_t)k->rbuf_len;
            dead_letter(k, line, 300, "spill line longer than 1 MiB (corrupt spill file?)");
            k->failures++;
            for (;;) {
                char c;
                ssize_t got = pread(k->spill.fd, &c, 1, skip);
                if (got != 1) break;
                skip++;
                if (c == '\n') break;
            }
            k->read_off = skip;
            cache_drop(k);
            if (k->spill_unread) k->spill_unread--;
            continue;
        }
        int64_t end = k->read_off + (int64_t)len;
        if (len == 1) { /* an empty line: nothing to send */
            k->read_off = end;
            k->spill_unread--;
            if (k->inflight == 0 && k->done_off < end) k->done_off = end;
            continue;
        }
        rd_kafka_resp_err_t err = produce(k, line, len - 1, end);
        if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) break;
        if (err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE) {
            k->failures++;
            dead_letter(k, line, len - 1, rd_kafka_err2str(err));
        } else if (err) {
            if (err == RD_KAFKA_RESP_ERR__FATAL) k->fatal = 1;
            request_reset(k, rd_kafka_err2str(err));
            return;
        }
        k->read_off = end;
        k->spill_unread--;
    }
    if (k->read_off == logical_size(k)) {
        k->spilling = 0;
        k->draining = 0;
        k->spill_unread = 0;
        px_log_info("events_spill_drained path=%s", k->spill_path);
    }
}

/* Everything in the file is delivered: start it over, empty (at most once a
 * second unless it grew past 1 MiB: each start-over costs an fsync). The
 * .done offset is made durable as 0 first, so a crash in between repeats
 * lines, never skips them: phase 1 writes 0 and starts its sync; a later
 * call, once that sync is done, empties the file if everything in it is
 * still delivered (lines added meanwhile count too), or gives up (a reset,
 * a spill, an event in flight) and lets persist_done restore .done. While it
 * runs nothing else writes .done. now: the whole sequence at once, waiting
 * for the sync (shutdown, flush). */
static int all_delivered(const px_kafka_t *k) {
    return !k->spilling && !k->resetting && !k->reset_requested && !k->inflight &&
           k->spill.size > 0 && k->spill.len == 0 && k->done_off >= k->spill.size;
}

static void maybe_truncate(px_kafka_t *k, int now) {
    if (!k->truncating) {
        collect_done(k, now);
        if (k->done_syncing || !all_delivered(k)) return;
        int64_t t = px_now_ms();
        if (!now && k->spill.size < (1 << 20) && t - k->truncated_ms < 1000) return;
        k->truncated_ms = t;
        k->truncating = 1;
        write_done(k, 0, now);
    }
    collect_done(k, now);
    if (k->done_syncing) return;
    k->truncating = 0;
    if (k->done_persisted != 0 || !all_delivered(k)) return; /* persist_done restores .done */
    if (px_appender_truncate(&k->spill) != 0) {
        k->failures++;
        px_log_error("events_io_failed op=truncate path=%s error=\"%s\"", k->spill_path,
                     strerror(errno));
        return;
    }
    k->read_off = 0;
    k->done_off = 0;
    cache_drop(k);
}

static int copy_range(int from, int64_t off, int64_t end, int to) {
    char buf[65536];
    while (off < end) {
        size_t want = (size_t)(end - off < (int64_t)sizeof buf ? end - off : (int64_t)sizeof buf);
        ssize_t r = pread(from, buf, want, off);
        if (r <= 0) return -1;
        for (ssize_t w = 0; w < r;) {
            ssize_t n = write(to, buf + w, (size_t)(r - w));
            if (n < 0) {
                if (errno == EINTR) continue;
                return -1;
            }
            w += n;
        }
        off += r;
    }
    return 0;
}

static int write_all(int fd, const char *p, size_t len) {
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Puts the held (undelivered) events back at the head of the spill file, in
 * production order, followed by the unread rest of the file: a new file is
 * written beside it, synced, and renamed over it. 0 on success. */
static int rebuild_spill(px_kafka_t *k) {
    if (k->nheld == 0) return 0;
    qsort(k->held, k->nheld, sizeof *k->held, held_cmp);
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", k->spill_path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int ok = fd >= 0;
    for (size_t i = 0; ok && i < k->nheld; i++) ok = write_all(fd, k->held[i].line, k->held[i].len) == 0;
    /* The unread rest: part may still wait in spill.buf (a disk that refused writes). */
    if (ok && k->read_off < k->spill.size)
        ok = copy_range(k->spill.fd, k->read_off, k->spill.size, fd) == 0;
    size_t skip = k->read_off > k->spill.size ? (size_t)(k->read_off - k->spill.size) : 0;
    if (ok && k->spill.len > skip) ok = write_all(fd, k->spill.buf + skip, k->spill.len - skip) == 0;
    if (ok) ok = fsync(fd) == 0;
    if (fd >= 0) close(fd);
    if (ok) { /* zero .done before the rename: a crash between repeats lines, never skips */
        int64_t keep = k->done_off;
        k->done_off = 0;
        persist_done(k, 1);
        ok = k->done_persisted == 0;
        if (!ok) k->done_off = keep;
    }
    if (ok) ok = rename(tmp, k->spill_path) == 0;
    if (!ok) {
        k->failures++;
        px_log_error("events_io_failed op=requeue path=%s error=\"%s\" held=%zu (kept in memory, "
                     "retrying)",
                     k->spill_path, strerror(errno), k->nheld);
        unlink(tmp);
        return -1;
    }
    int dfd = open(k->spill_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    uint64_t unread = k->spill_unread + k->nheld;
    k->spill.len = 0; /* those bytes are in the new file */
    k->spill.unsynced = 0;
    uint64_t fails = k->spill.failures;
    px_appender_close(&k->spill);
    char err[512];
    if (px_appender_open(&k->spill, k->spill_path, k->syncer, err, sizeof err) != 0) {
        px_log_error("events_io_failed op=reopen error=\"%s\"", err); /* next poll retries writes */
    }
    k->spill.failures = fails;
    for (size_t i = 0; i < k->nheld; i++) free(k->held[i].line);
    k->nheld = 0;
    k->spill_unread = unread;
    k->read_off = 0;
    k->done_off = 0;
    cache_drop(k);
    return 0;
}

/* ---- reset after delivery errors ---- */

static void begin_reset(px_kafka_t *k) {
    k->reset_requested = 0;
    k->resetting = 1;
    start_spilling(k, k->reset_reason);
    k->draining = 0;
    px_log_error("events_producer_reset reason=\"%s\" in_flight=%llu fatal=%d: undelivered events "
                 "go back to the spill file in order; events in flight now may arrive twice",
                 k->reset_reason, (unsigned long long)k->inflight, k->fatal);
    /* Non-blocking: the purged events come back as delivery reports on later polls. */
    rd_kafka_purge(k->rk,
                   RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT | RD_KAFKA_PURGE_F_NON_BLOCKING);
}

/* The one place that may block the loop briefly: recreating the producer
 * after a fatal error waits for the old one's threads (milliseconds here). */
static void finish_reset(px_kafka_t *k) {
    if (rebuild_spill(k) != 0) return;
    if (k->fatal) {
        char err[512];
        rd_kafka_t *rk = make_producer(k, err, sizeof err);
        if (!rk) {
            px_log_error("events_producer_recreate_failed error=\"%s\" (retrying)", err);
            return;
        }
        rd_kafka_destroy(k->rk);
        k->rk = rk;
        k->fatal = 0;
        px_log_warn("events_producer_recreated brokers=%s", k->brokers);
    }
    k->resetting = 0;
    k->drain_after_ms = px_now_ms() + DRAIN_BACKOFF_MS;
}

void px_kafka_poll(px_kafka_t *k) {
    rd_kafka_poll(k->rk, 0);
    if (k->reset_requested && !k->resetting) begin_reset(k);
    if (k->resetting) {
        rd_kafka_poll(k->rk, 0);
        if (k->inflight == 0) finish_reset(k);
    }
    drain(k);
    maybe_truncate(k, 0);
    px_appender_maybe_sync(&k->spill, (uint64_t)k->opts.batch_events, k->opts.batch_ms);
    persist_done(k, 0);
    if (k->dead_open) px_appender_maybe_sync(&k->dead, 1, 1);
}

void px_kafka_sync(px_kafka_t *k) {
    maybe_truncate(k, 1);
    px_appender_sync(&k->spill);
    persist_done(k, 1);
}

void px_kafka_stats(px_kafka_t *k, px_events_stats_t *out) {
    out->delivered = k->delivered;
    out->spilled = k->spill_unread;
    out->pending = k->inflight + k->spill_unread + k->nheld;
    out->delivery_failures = k->failures + k->spill.failures + k->dead.failures;
}

void px_kafka_describe(px_kafka_t *k, char *out, size_t outlen) {
    snprintf(out, outlen, "kafka:%s/%s spill=%s", k->brokers, k->topic, k->spill_path);
}

/* ---- start-up: lock, find a backlog ---- */

static void sanitize(const char *job, char *out, size_t outlen) {
    size_t o = 0;
    for (const char *p = job; *p && o + 1 < outlen; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        out[o++] = ok ? c : '_';
    }
    out[o] = '\0';
    if (o == 0 || strcmp(out, ".") == 0 || strcmp(out, "..") == 0) snprintf(out, outlen, "job");
}

static int64_t read_done(px_kafka_t *k) {
    char buf[32] = {0};
    ssize_t n = pread(k->done_fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return 0;
    char *end;
    long long v = strtoll(buf, &end, 10);
    if (end == buf || v < 0) return 0;
    return v;
}

static int last_byte_is_newline(int fd, int64_t off) {
    char c;
    return off == 0 || (pread(fd, &c, 1, off - 1) == 1 && c == '\n');
}

/* Cuts a torn last line (a crash mid-write) and finds where delivery resumes. */
static int load_backlog(px_kafka_t *k, char *err, size_t errlen) {
    int64_t size = k->spill.size;
    if (size > 0 && !last_byte_is_newline(k->spill.fd, size)) {
        int64_t cut = size;
        while (cut > 0 && !last_byte_is_newline(k->spill.fd, cut)) cut--;
        if (ftruncate(k->spill.fd, cut) != 0) {
            snprintf(err, errlen, "cannot cut the torn last line of '%s': %s", k->spill_path,
                     strerror(errno));
            return -1;
        }
        px_log_warn("events_spill_torn_tail path=%s bytes_cut=%lld (a crash during a write; that "
                    "event was never complete)",
                    k->spill_path, (long long)(size - cut));
        k->spill.size = size = cut;
    }
    int64_t done = read_done(k);
    if (done > size || !last_byte_is_newline(k->spill.fd, done)) {
        px_log_warn("events_spill_done_offset_invalid path=%s offset=%lld size=%lld (resending "
                    "the whole backlog)",
                    k->done_path, (long long)done, (long long)size);
        done = 0;
    }
    k->done_off = k->read_off = done;
    k->done_persisted = -1;
    for (int64_t off = done; off < size;) {
        ssize_t r = pread(k->spill.fd, k->rbuf, READ_BUF, off);
        if (r <= 0) break;
        for (ssize_t i = 0; i < r; i++) k->spill_unread += (k->rbuf[i] == '\n');
        off += r;
    }
    if (k->spill_unread > 0) {
        k->spilling = 1;
        px_log_warn("events_backlog_found events=%llu path=%s (left by an earlier run of this "
                    "job; delivered before this run's events)",
                    (unsigned long long)k->spill_unread, k->spill_path);
    }
    return 0;
}

px_kafka_t *px_kafka_new(const char *brokers, const char *topic, const char *job,
                         const char *spill_dir, px_syncer_t *syncer, const px_events_opts_t *opts,
                         char *err, size_t errlen) {
    px_kafka_t *k = calloc(1, sizeof *k);
    if (!k) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    k->lock_fd = k->done_fd = k->spill.fd = k->dead.fd = -1;
    snprintf(k->brokers, sizeof k->brokers, "%s", brokers);
    snprintf(k->topic, sizeof k->topic, "%s", topic);
    snprintf(k->job, sizeof k->job, "%s", job);
    if (!spill_dir) spill_dir = ".";
    if (strlen(spill_dir) >= sizeof k->spill_dir) {
        snprintf(err, errlen, "spill directory path too long: '%.100s...'", spill_dir);
        free(k);
        return NULL;
    }
    snprintf(k->spill_dir, sizeof k->spill_dir, "%s", spill_dir);
    k->opts = *opts;
    k->syncer = syncer;
    k->rbuf = malloc(READ_BUF);
    if (!k->rbuf) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }

    if (mkdir(k->spill_dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create spill directory '%s': %s", k->spill_dir,
                 strerror(errno));
        goto fail;
    }
    char base[200];
    sanitize(job, base, sizeof base);
    snprintf(k->spill_path, sizeof k->spill_path, "%s/%s.spill.jsonl", k->spill_dir, base);
    snprintf(k->done_path, sizeof k->done_path, "%s/%s.spill.done", k->spill_dir, base);
    snprintf(k->lock_path, sizeof k->lock_path, "%s/%s.spill.lock", k->spill_dir, base);
    snprintf(k->dead_path, sizeof k->dead_path, "%s/%s.failed.jsonl", k->spill_dir, base);

    /* Two coordinators of one job must not drain one spill file. */
    k->lock_fd = open(k->lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (k->lock_fd < 0) {
        snprintf(err, errlen, "cannot open '%s': %s", k->lock_path, strerror(errno));
        goto fail;
    }
    if (flock(k->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(err, errlen, "spill file '%s' is in use by another process (another "
                 "coordinator for job '%s'?)", k->spill_path, job);
        goto fail;
    }
    k->done_fd = open(k->done_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (k->done_fd < 0) {
        snprintf(err, errlen, "cannot open '%s': %s", k->done_path, strerror(errno));
        goto fail;
    }
    if (px_appender_open(&k->spill, k->spill_path, k->syncer, err, errlen) != 0) goto fail;
    if (load_backlog(k, err, errlen) != 0) goto fail;

    k->rk = make_producer(k, err, errlen);
    if (!k->rk) goto fail;
    px_log_info("events_kafka_started brokers=%s topic=%s key=%s cap=%d spill=%s", k->brokers,
                k->topic, k->job, k->opts.max_inflight, k->spill_path);
    return k;
fail:
    if (k->spill.fd >= 0) px_appender_close(&k->spill);
    if (k->done_fd >= 0) close(k->done_fd);
    if (k->lock_fd >= 0) close(k->lock_fd);
    free(k->rbuf);
    free(k);
    return NULL;
}

/* ---- shutdown ---- */

void px_kafka_close(px_kafka_t *k, int timeout_ms) {
    int64_t deadline = px_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        px_kafka_poll(k);
        if (k->inflight == 0 && k->spill_unread == 0 && k->nheld == 0 && !k->resetting &&
            !k->reset_requested)
            break;
        int64_t left = deadline - px_now_ms();
        if (left <= 0) break;
        rd_kafka_poll(k->rk, (int)(left < 10 ? left : 10));
    }
    if (k->inflight > 0) {
        rd_kafka_purge(k->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        int64_t until = px_now_ms() + PURGE_WAIT_MS;
        while (k->inflight > 0 && px_now_ms() < until) rd_kafka_poll(k->rk, 10);
        if (k->inflight > 0) {
            k->failures += k->inflight;
            px_log_error("events_lost count=%llu reason=\"librdkafka did not report them back "
                         "after a purge\"",
                         (unsigned long long)k->inflight);
        }
    }
    for (int tries = 0; k->nheld > 0 && tries < 3; tries++) rebuild_spill(k);
    if (k->nheld > 0) {
        for (size_t i = 0; i < k->nheld; i++)
            px_log_error("events_lost reason=\"could not write the spill file\" event=%.*s",
                         (int)k->held[i].len - 1, k->held[i].line);
        k->failures += k->nheld;
    }
    k->spilling = k->spill_unread > 0;
    maybe_truncate(k, 1);
    px_appender_sync(&k->spill);
    persist_done(k, 1);
    if (k->spill_unread > 0)
        px_log_warn("events_backlog_kept events=%llu path=%s (delivered first when this job's "
                    "coordinator starts again)",
                    (unsigned long long)k->spill_unread, k->spill_path);
    px_log_info("events_kafka_closed delivered=%llu failures=%llu dead_lettered=%llu",
                (unsigned long long)k->delivered,
                (unsigned long long)(k->failures + k->spill.failures),
                (unsigned long long)k->dead_lettered);
    rd_kafka_destroy(k->rk);
    px_appender_close(&k->spill);
    if (k->dead_open) px_appender_close(&k->dead);
    for (size_t i = 0; i < k->nheld; i++) free(k->held[i].line);
    free(k->held);
    close(k->done_fd);
    close(k->lock_fd); /* releases the flock */
    free(k->rbuf);
    free(k);
}
