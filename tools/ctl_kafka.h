/* `phalanxctl events` for a coordinator whose event log goes to Kafka
 * (--events kafka:BROKERS/TOPIC): reads the topic from its beginning with a
 * librdkafka consumer and hands each event, as the JSON line the file sink
 * would hold, to the caller, which filters and prints it. Kept out of
 * phalanxctl.c so the command-line tool's other commands stay free of
 * Kafka, and so this reader can be read (and replaced) on its own. */
#ifndef PX_CTL_KAFKA_H
#define PX_CTL_KAFKA_H

#include <signal.h>
#include <stddef.h>

/* One event: a NUL-terminated JSON line ending in '\n'. */
typedef void (*px_ctl_kafka_line_fn)(void *ctx, const char *line);

typedef struct {
    const char *brokers;   /* HOST:PORT[,HOST:PORT...], as parsed by px_events_spec_parse */
    const char *topic;
    int follow;            /* 0: stop once every partition is read to its end */
    int timeout_ms;        /* the longest wait for the brokers, the topic, or (without
                            * follow) for the next message or end of a partition */
    volatile sig_atomic_t *stop; /* set by a signal handler: return 0 at once */
    px_ctl_kafka_line_fn on_line;
    void *ctx;
} px_ctl_kafka_opts_t;

/* Reads the topic from the beginning: every partition is assigned at its
 * first offset, with a group id of this process's own and no commits, so
 * nothing is recorded on the brokers and any number of readers can run.
 * Order holds within a partition (the coordinator's events are on one when
 * the topic has one, or all share the job id as key); several partitions
 * are interleaved as they come. Returns 0 when done (the end of every
 * partition, or *stop), -1 with a message naming the brokers or the topic
 * in err when they cannot be reached or read within timeout_ms. */
int px_ctl_kafka_events(const px_ctl_kafka_opts_t *o, char *err, size_t errlen);

#endif
