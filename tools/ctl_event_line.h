/* One coordinator event (a JSON line of the event log, docs/events.md) as a
 * line for people, what `phalanxctl events` prints unless --json:
 *
 *   2026-11-29 03:01:02.123Z  #12  member_lost        g1/0  step 120  reason=killed pid=4242 ...
 *
 * the time (UTC, from ts), the sequence number, the type, the member
 * (group/rank, or the group), the step, then every other field as
 * key=value in the order the event has them (strings with a space quoted,
 * lists joined with commas, objects as compact JSON; empty strings and
 * lists left out). The envelope's v, job and run are left out. Pure. */
#ifndef PX_CTL_EVENT_LINE_H
#define PX_CTL_EVENT_LINE_H

#include <stddef.h>

/* Writes the readable form of `json` (one event, without its newline or
 * with it) to out, NUL-terminated and cut to cap, and returns 0; a line
 * that is not a JSON object returns -1 and writes it as it is (cut), so
 * that nothing in the log is hidden. */
int px_ctl_event_line(const char *json, char *out, size_t cap);

#endif
