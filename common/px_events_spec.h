/* The event log's --events spec taken apart: which sink, and its path or its
 * brokers, topic and options. The coordinator opens its sink from it
 * (coordinator/events.h); readers of the log (phalanxctl events) parse the
 * same spec with the same code, so they accept exactly the syntax the
 * coordinator writes with, without linking the sinks. Pure string work, no
 * I/O, tested as a table (tests/kafka/test_events_file.c, "spec").
 *
 * Grammar:
 *   file:PATH                                          JSONL file
 *   kafka:HOST:PORT[,HOST:PORT...]/TOPIC[?max_inflight=N]
 *   none, "" or NULL                                   no event log
 * HOST is a name, an IPv4 address or [IPv6]; PORT is in 1..65535; TOPIC is
 * 1 to 249 characters from [A-Za-z0-9._-], not "." or "..". */
#ifndef PX_EVENTS_SPEC_H
#define PX_EVENTS_SPEC_H

#include <stddef.h>

/* Upper bound of max_inflight (the tunable and the spec's ?max_inflight=). */
#define PX_EVENTS_MAX_INFLIGHT 1000000

typedef enum { PX_EVENTS_SINK_NONE, PX_EVENTS_SINK_FILE, PX_EVENTS_SINK_KAFKA } px_events_sink_t;
typedef struct {
    px_events_sink_t sink;
    const char *path;  /* file: points into the spec string */
    char brokers[1024]; /* kafka: HOST:PORT[,HOST:PORT...] */
    char topic[256];    /* kafka: */
    int max_inflight;   /* kafka: ?max_inflight=N, 0 when not given */
} px_events_spec_t;

/* Parses a spec of the grammar above (NULL, "" and "none" give SINK_NONE).
 * 0, or -1 with a message that quotes spec and names the bad part. Checks
 * the syntax only: it opens no file and reaches no broker. */
int px_events_spec_parse(const char *spec, px_events_spec_t *out, char *err, size_t errlen);

#endif
