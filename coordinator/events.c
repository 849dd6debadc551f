/* The event log's public face: opens the sink a --events spec names (parsed
 * by events_spec.c), builds each event's envelope (v, type, seq, ts, job,
 * run + the caller's fields) and hands the finished line to the sink: none,
 * a JSONL file, or Kafka (events_kafka.c).
 *
 * The envelope is built here, once, so every sink writes byte-identical
 * events and seq is assigned under the same lock that orders the writes:
 * seq order is emit order is delivery order. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "events_int.h"
#include "px_log.h"
#include "px_time.h"

enum { MAX_JOB = 255, MAX_TYPE = 64 };

struct px_events {
    pthread_mutex_t mu;
    px_events_sink_t kind;
    char job[MAX_JOB + 1];
    char job_esc[6 * MAX_JOB + 1];
    char run[17];
    uint64_t seq, produced;
    px_events_opts_t opts;
    px_syncer_t *syncer; /* runs the file sink's and the spill's fsyncs */
    px_appender_t file;
    uint64_t file_delivered;
    px_kafka_t *kafka;
    char *line; /* PX_EVENTS_MAX_LINE + 1 */
    char *scratch;
};

void px_events_opts_default(px_events_opts_t *o) {
    o->max_inflight = 10000;
    o->batch_events = 100;
    o->batch_ms = 100;
}

static void random_run_id(char out[17]) {
    unsigned char b[8];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        uint64_t x = (uint64_t)px_now_us() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)px_wall_ms();
        memcpy(b, &x, sizeof b);
    }
    for (int i = 0; i < 8; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

px_events_t *px_events_new(const char *spec, const char *job, const char *spill_dir, char *err,
                           size_t errlen) {
    return px_events_new_opts(spec, job, spill_dir, NULL, err, errlen);
}

px_events_t *px_events_new_opts(const char *spec, const char *job, const char *spill_dir,
                                const px_events_opts_t *opts, char *err, size_t errlen) {
    char dummy[8];
    if (!err || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = '\0';
    if (!job || !*job || strlen(job) > MAX_JOB) {
        snprintf(err, errlen, "events: job id must be 1 to %d bytes", MAX_JOB);
        return NULL;
    }
    px_events_opts_t o;
    if (opts) {
        o = *opts;
    } else {
        px_events_opts_default(&o);
    }
    if (o.max_inflight < 1 || o.max_inflight > PX_EVENTS_MAX_INFLIGHT || o.batch_events < 1 ||
        o.batch_ms < 1) {
        snprintf(err, errlen, "events: options out of range (max_inflight 1..%d, batch_events "
                 ">= 1, batch_ms >= 1)", PX_EVENTS_MAX_INFLIGHT);
        return NULL;
    }

    px_events_spec_t sp;
    if (px_events_spec_parse(spec, &sp, err, errlen) != 0) return NULL;
    if (sp.max_inflight) o.max_inflight = sp.max_inflight;
    px_events_sink_t kind = sp.sink;

    px_events_t *ev = calloc(1, sizeof *ev);
    if (!ev) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&ev->mu, NULL);
    ev->kind = kind;
    ev->opts = o;
    ev->file.fd = -1;
    snprintf(ev->job, sizeof ev->job, "%s", job);
    px_json_escape(job, ev->job_esc, sizeof ev->job_esc);
    random_run_id(ev->run);
    ev->line = malloc(PX_EVENTS_MAX_LINE + 1);
    ev->scratch = malloc(PX_EVENTS_MAX_LINE + 1);
    if (!ev->line || !ev->scratch) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (kind != PX_EVENTS_SINK_NONE && !(ev->syncer = px_syncer_new(err, errlen))) goto fail;
    if (kind == PX_EVENTS_SINK_FILE) {
        char why[PATH_MAX + 128];
        if (px_appender_open(&ev->file, sp.path, ev->syncer, why, sizeof why) != 0) {
            snprintf(err, errlen, "events spec '%s': %s", spec, why);
            goto fail;
        }
        px_log_info("events_file_started path=%s run=%s", sp.path, ev->run);
    } else if (kind == PX_EVENTS_SINK_KAFKA) {
        char why[PATH_MAX + 256];
        ev->kafka = px_kafka_new(sp.brokers, sp.topic, job, spill_dir, ev->syncer, &o, why, sizeof why);
        if (!ev->kafka) {
            snprintf(err, errlen, "events spec '%s': %s", spec, why);
            goto fail;
        }
    }
    return ev;
fail:
    px_syncer_destroy(&ev->syncer);
    free(ev->line);
    free(ev->scratch);
    pthread_mutex_destroy(&ev->mu);
    free(ev);
    return NULL;
}

/* ---- emit ---- */

static int all_space(const char *s) {
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r') return 0;
    return 1;
}

/* Builds the event line (ending in '\n') into ev->line; returns its length. */
static size_t build_line(px_events_t *ev, uint64_t seq, const char *type, const char *fields) {
    char type_esc[6 * MAX_TYPE + 1];
    if (!type || !*type) {
        px_log_error("events_bad_type seq=%llu reason=\"empty type\"", (unsigned long long)seq);
        type = "unknown";
    }
    px_json_escape(type, type_esc, sizeof type_esc);
    const size_t cap = PX_EVENTS_MAX_LINE;
    char *l = ev->line;
    int n = snprintf(l, cap, "{\"v\":%d,\"type\":\"%s\",\"seq\":%llu,\"ts\":%lld,\"job\":\"%s\","
                     "\"run\":\"%s\"",
                     PX_EVENTS_SCHEMA_VERSION, type_esc, (unsigned long long)seq,
                     (long long)px_wall_ms(), ev->job_esc, ev->run);
    size_t len = (size_t)n; /* < cap: every part above is bounded */
    if (fields && !all_space(fields)) {
        size_t fl = strlen(fields);
        if (!px_json_members_valid(fields, fl)) {
            px_log_error("events_bad_fields type=%s seq=%llu fields=%.200s (kept as a string in "
                         "bad_fields)",
                         type_esc, (unsigned long long)seq, fields);
            px_json_escape(fields, ev->scratch, cap / 2);
            len += (size_t)snprintf(l + len, cap - len, ",\"bad_fields\":\"%s\"", ev->scratch);
        } else if (len + 1 + fl + 2 > cap) {
            px_log_error("events_fields_too_long type=%s seq=%llu bytes=%zu limit=%d", type_esc,
                         (unsigned long long)seq, fl, PX_EVENTS_MAX_LINE);
            len += (size_t)snprintf(l + len, cap - len, ",\"fields_truncated\":%zu", fl);
        } else {
            l[len++] = ',';
            memcpy(l + len, fields, fl);
            len += fl;
        }
    }
    l[len++] = '}';
    l[len++] = '\n';
    return len;
}

uint64_t px_events_emit(px_events_t *ev, const char *type, const char *fields) {
    if (!ev) return 0;
    pthread_mutex_lock(&ev->mu);
    uint64_t seq = ++ev->seq;
    ev->produced++;
    size_t len = build_line(ev, seq, type, fields);
    if (ev->kind == PX_EVENTS_SINK_FILE) {
        if (px_appender_append(&ev->file, ev->line, len) == 0) {
            int64_t d = px_appender_maybe_sync(&ev->file, (uint64_t)ev->opts.batch_events,
                                               ev->opts.batch_ms);
            if (d > 0) ev->file_delivered += (uint64_t)d;
        }
    } else if (ev->kind == PX_EVENTS_SINK_KAFKA) {
        px_kafka_send(ev->kafka, ev->line, len);
        px_kafka_poll(ev->kafka);
    }
    pthread_mutex_unlock(&ev->mu);
    return seq;
}

/* ---- poll, stats, shutdown ---- */

static void poll_locked(px_events_t *ev) {
    if (ev->kind == PX_EVENTS_SINK_FILE) {
        int64_t d = px_appender_maybe_sync(&ev->file, (uint64_t)ev->opts.batch_events,
                                           ev->opts.batch_ms);
        if (d > 0) ev->file_delivered += (uint64_t)d;
    } else if (ev->kind == PX_EVENTS_SINK_KAFKA) {
        px_kafka_poll(ev->kafka);
    }
}

void px_events_poll(px_events_t *ev) {
    if (!ev) return;
    pthread_mutex_lock(&ev->mu);
    poll_locked(ev);
    pthread_mutex_unlock(&ev->mu);
}

static void stats_locked(px_events_t *ev, px_events_stats_t *out) {
    memset(out, 0, sizeof *out);
    out->produced = ev->produced;
    if (ev->kind == PX_EVENTS_SINK_FILE) {
        out->delivered = ev->file_delivered;
        out->pending = ev->file.unsynced;
        out->delivery_failures = ev->file.failures;
    } else if (ev->kind == PX_EVENTS_SINK_KAFKA) {
        px_kafka_stats(ev->kafka, out);
    }
}

void px_events_stats(px_events_t *ev, px_events_stats_t *out) {
    if (!ev) {
        memset(out, 0, sizeof *out);
        return;
    }
    pthread_mutex_lock(&ev->mu);
    stats_locked(ev, out);
    pthread_mutex_unlock(&ev->mu);
}

int px_events_flush(px_events_t *ev, int timeout_ms) {
    if (!ev) return 0;
    int64_t deadline = px_now_ms() + timeout_ms;
    for (;;) {
        px_events_stats_t st;
        pthread_mutex_lock(&ev->mu);
        if (ev->kind == PX_EVENTS_SINK_FILE) {
            int64_t d = px_appender_sync(&ev->file);
            if (d > 0) ev->file_delivered += (uint64_t)d;
        } else {
            poll_locked(ev);
        }
        stats_locked(ev, &st);
        if (st.pending == 0 && ev->kind == PX_EVENTS_SINK_KAFKA) px_kafka_sync(ev->kafka);
        pthread_mutex_unlock(&ev->mu);
        if (st.pending == 0) return 0;
        if (px_now_ms() >= deadline) return -1;
        px_sleep_ms(5);
    }
}

const char *px_events_run_id(px_events_t *ev) { return ev ? ev->run : ""; }

void px_events_describe(px_events_t *ev, char *out, size_t outlen) {
    if (!ev || ev->kind == PX_EVENTS_SINK_NONE) {
        snprintf(out, outlen, "none");
        return;
    }
    pthread_mutex_lock(&ev->mu);
    if (ev->kind == PX_EVENTS_SINK_FILE) {
        snprintf(out, outlen, "file:%s", ev->file.path);
    } else {
        px_kafka_describe(ev->kafka, out, outlen);
    }
    pthread_mutex_unlock(&ev->mu);
}

void px_events_destroy(px_events_t **evp, int timeout_ms) {
    if (!evp || !*evp) return;
    px_events_t *ev = *evp;
    *evp = NULL;
    pthread_mutex_lock(&ev->mu);
    if (ev->kind == PX_EVENTS_SINK_FILE) {
        int64_t d = px_appender_sync(&ev->file);
        if (d > 0) ev->file_delivered += (uint64_t)d;
        px_log_info("events_file_closed path=%s events=%llu synced=%llu failures=%llu",
                    ev->file.path, (unsigned long long)ev->produced,
                    (unsigned long long)ev->file_delivered,
                    (unsigned long long)ev->file.failures);
        px_appender_close(&ev->file);
    } else if (ev->kind == PX_EVENTS_SINK_KAFKA) {
        px_kafka_close(ev->kafka, timeout_ms);
    }
    pthread_mutex_unlock(&ev->mu);
    px_syncer_destroy(&ev->syncer);
    pthread_mutex_destroy(&ev->mu);
    free(ev->line);
    free(ev->scratch);
    free(ev);
}
