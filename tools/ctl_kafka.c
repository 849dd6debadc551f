/* The Kafka reader behind `phalanxctl events --events kafka:BROKERS/TOPIC`.
 *
 * A plain librdkafka consumer, shaped for a command-line reader that must
 * neither disturb the job's other consumers nor hang:
 *   - every partition is assigned by hand at OFFSET_BEGINNING (assign, not
 *     subscribe: no group join, no rebalance), under a group id unique to this
 *     process, with commits off, so nothing is written to the brokers;
 *   - first the topic's metadata, retried until --timeout-ms: an unreachable
 *     broker or a topic that does not exist is an error naming it, not an
 *     endless wait, and never creates the topic (see await_partitions);
 *   - without --follow the end is the end of every partition (partition EOF
 *     on each, a message after an EOF reopens that partition), and a silence
 *     of --timeout-ms before it is an error; with --follow it reads until
 *     *stop, across broker outages (librdkafka reconnects; each new error is
 *     said once on stderr).
 * librdkafka's own log lines are switched off: what went wrong is reported
 * once, by the caller, from the error callback's last message. */
#include "ctl_kafka.h"

#include <librdkafka/rdkafka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "px_time.h"

enum { POLL_MS = 100, METADATA_SLICE_MS = 500 };

typedef struct {
    const px_ctl_kafka_opts_t *o;
    rd_kafka_t *rk;
    char why[512];  /* the last error librdkafka reported (error callback) */
    char *line;     /* the current event with '\n' and NUL */
    size_t line_cap;
    int32_t n_parts;
    char *at_eof;   /* (n_parts) 1 while that partition is read to its end */
    int32_t n_eof;
} reader_t;

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    (void)rk, (void)err;
    reader_t *r = opaque;
    snprintf(r->why, sizeof r->why, "%s", reason);
}

static rd_kafka_t *make_consumer(reader_t *r, char *err, size_t errlen) {
    char group[64], why[512];
    snprintf(group, sizeof group, "phalanxctl-events-%d-%lld", (int)getpid(), (long long)px_now_us());
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    const char *kv[][2] = {
        {"bootstrap.servers", r->o->brokers},
        {"group.id", group},                 /* assign() needs one; never joined, never committed */
        {"enable.auto.commit", "false"},
        {"enable.auto.offset.store", "false"},
        {"enable.partition.eof", "true"},
        {"allow.auto.create.topics", "false"},
        {"client.id", "phalanxctl-events"},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
        if (rd_kafka_conf_set(conf, kv[i][0], kv[i][1], why, sizeof why) != RD_KAFKA_CONF_OK) {
            snprintf(err, errlen, "Kafka consumer setting %s: %s", kv[i][0], why);
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    }
    rd_kafka_conf_set_log_cb(conf, NULL);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_opaque(conf, r);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof why); /* owns conf on success */
    if (!rk) {
        snprintf(err, errlen, "cannot create a Kafka consumer for %s: %s", r->o->brokers, why);
        rd_kafka_conf_destroy(conf);
    }
    return rk;
}

/* The topic in a metadata answer, or NULL. */
static const rd_kafka_metadata_topic_t *find_topic(const struct rd_kafka_metadata *md, const char *name) {
    for (int i = 0; i < md->topic_cnt; i++)
        if (!strcmp(md->topics[i].topic, name)) return &md->topics[i];
    return NULL;
}

/* The topic's partition count, asking until it is known or timeout_ms
 * passed: 0 and n_parts set, 1 when *stop came first, -1 with a message.
 * It asks for the list of all topics, not for this one: a request naming a
 * topic lets a broker with auto-creation on (the mock cluster is one)
 * create it, and a typo would become an empty topic read without error. */
static int await_partitions(reader_t *r, char *err, size_t errlen) {
    const px_ctl_kafka_opts_t *o = r->o;
    int64_t deadline = px_now_ms() + o->timeout_ms;
    rd_kafka_resp_err_t last = RD_KAFKA_RESP_ERR__TIMED_OUT;
    int reached = 0; /* a metadata answer came: the brokers are there, the topic is not */
    while (!*o->stop) {
        int64_t left = deadline - px_now_ms(); /* asked in slices, so that *stop is seen */
        int slice = left < POLL_MS ? POLL_MS : left > METADATA_SLICE_MS ? METADATA_SLICE_MS : (int)left;
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_resp_err_t e = rd_kafka_metadata(r->rk, 1, NULL, &md, slice);
        if (!e) {
            reached = 1;
            const rd_kafka_metadata_topic_t *t = find_topic(md, o->topic);
            last = t ? t->err : RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
            if (t && !t->err && t->partition_cnt > 0) r->n_parts = t->partition_cnt;
            rd_kafka_metadata_destroy(md);
            if (r->n_parts > 0) break;
        } else {
            last = e;
        }
        if (px_now_ms() >= deadline) break;
        px_sleep_ms(POLL_MS); /* before asking again */
    }
    if (*o->stop) return 1;
    if (r->n_parts > 0) return 0;
    rd_kafka_poll(r->rk, 0); /* serves the error callback: the connection's own words */
    if (reached)
        snprintf(err, errlen, "topic '%s' not found on the brokers %s within %d ms: %s (does the coordinator "
                 "publish there? its --events kafka:BROKERS/TOPIC)", o->topic, o->brokers, o->timeout_ms,
                 rd_kafka_err2str(last));
    else
        snprintf(err, errlen, "cannot reach the Kafka brokers %s (topic '%s') within %d ms: %s%s%s", o->brokers,
                 o->topic, o->timeout_ms, rd_kafka_err2str(last), r->why[0] ? ": " : "", r->why);
    return -1;
}

/* Every partition at its first offset. */
static int assign_all(reader_t *r, char *err, size_t errlen) {
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(r->n_parts);
    for (int32_t p = 0; p < r->n_parts; p++)
        rd_kafka_topic_partition_list_add(parts, r->o->topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_resp_err_t e = rd_kafka_assign(r->rk, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    if (e) snprintf(err, errlen, "cannot assign the partitions of '%s' on %s: %s", r->o->topic, r->o->brokers,
                    rd_kafka_err2str(e));
    return e ? -1 : 0;
}

/* Hands one message to the caller as a line ending in '\n'. */
static int deliver(reader_t *r, const rd_kafka_message_t *m, char *err, size_t errlen) {
    size_t n = m->len;
    while (n > 0 && ((const char *)m->payload)[n - 1] == '\n') n--;
    if (n + 2 > r->line_cap) {
        char *nl = realloc(r->line, n + 2);
        if (!nl) {
            snprintf(err, errlen, "out of memory for a %zu-byte event", n);
            return -1;
        }
        r->line = nl, r->line_cap = n + 2;
    }
    if (n) memcpy(r->line, m->payload, n);
    r->line[n] = '\n';
    r->line[n + 1] = '\0';
    r->o->on_line(r->o->ctx, r->line);
    return 0;
}

/* Tracks which partitions are read to their end. */
static void mark(reader_t *r, int32_t partition, int at_end) {
    if (partition < 0 || partition >= r->n_parts || r->at_eof[partition] == at_end) return;
    r->at_eof[partition] = (char)at_end;
    r->n_eof += at_end ? 1 : -1;
}

/* Consumes until every partition is at its end (not following) or *stop:
 * 0, or -1 with a message. */
static int consume(reader_t *r, char *err, size_t errlen) {
    const px_ctl_kafka_opts_t *o = r->o;
    int64_t last_progress = px_now_ms();
    char said[512] = ""; /* the last consumer error told on stderr (--follow) */
    while (!*o->stop) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(r->rk, POLL_MS);
        if (!m) {
            if (!o->follow && px_now_ms() - last_progress > o->timeout_ms) {
                snprintf(err, errlen, "no message nor end of '%s' from the brokers %s for %d ms%s%s", o->topic,
                         o->brokers, o->timeout_ms, r->why[0] ? ": " : "", r->why);
                return -1;
            }
            continue;
        }
        int rc = 0;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            mark(r, m->partition, 1);
            last_progress = px_now_ms();
        } else if (m->err) { /* transient (librdkafka retries) unless fatal */
            const char *what = rd_kafka_message_errstr(m);
            if (rd_kafka_fatal_error(r->rk, NULL, 0)) {
                snprintf(err, errlen, "reading '%s' from %s: %s", o->topic, o->brokers, what);
                rc = -1;
            } else if (o->follow && strcmp(said, what) != 0) {
                fprintf(stderr, "phalanxctl: events: %s: %s (retrying)\n", o->brokers, what);
                snprintf(said, sizeof said, "%s", what);
            }
        } else {
            mark(r, m->partition, 0);
            last_progress = px_now_ms();
            rc = deliver(r, m, err, errlen);
        }
        rd_kafka_message_destroy(m);
        if (rc) return rc;
        if (!o->follow && r->n_eof == r->n_parts) break;
    }
    return 0;
}

int px_ctl_kafka_events(const px_ctl_kafka_opts_t *o, char *err, size_t errlen) {
    reader_t r = {.o = o};
    err[0] = '\0';
    r.rk = make_consumer(&r, err, errlen);
    if (!r.rk) return -1;
    int rc = await_partitions(&r, err, errlen);
    if (rc == 0) {
        rd_kafka_poll_set_consumer(r.rk);
        r.at_eof = calloc((size_t)r.n_parts, 1);
        rc = !r.at_eof ? (snprintf(err, errlen, "out of memory"), -1) : assign_all(&r, err, errlen);
    }
    if (rc == 0) rc = consume(&r, err, errlen);
    /* No consumer close: nothing was joined or committed, and a close would
     * wait for brokers that may be gone. */
    rd_kafka_destroy_flags(r.rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
    free(r.at_eof);
    free(r.line);
    return rc < 0 ? -1 : 0;
}
