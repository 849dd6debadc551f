/* phalanxctl events' line for people (tools/ctl_event_line.c) as a table:
 * the time from ts in UTC, the sequence number, the type, group/rank or the
 * group, the step, the other fields in the event's order (quoted strings
 * with spaces, lists joined, objects as JSON, empty ones left out); a line that is not a JSON
 * object passed through, a small buffer cut, never overrun. */
#include <stdio.h>
#include <string.h>

#include "ctl_event_line.h"
#include "../lib/px_check.h"

static int failed;

static const struct {
    const char *json, *want;
    int rc;
} CASES[] = {
    {"{\"v\":1,\"type\":\"member_lost\",\"seq\":12,\"ts\":1796094062123,\"job\":\"demo\",\"run\":\"00ff\","
     "\"group\":\"g1\",\"rank\":0,\"pid\":4242,\"step\":120,\"quorum_id\":3,\"reason\":\"heartbeat_timeout\","
     "\"silent_ms\":3005}\n",
     "2026-12-01 03:01:02.123Z  #12     member_lost           g1/0  step 120  pid=4242 quorum_id=3 "
     "reason=heartbeat_timeout silent_ms=3005",
     0},
    {"{\"v\":1,\"type\":\"quorum_formed\",\"seq\":3,\"ts\":1796094062000,\"job\":\"demo\",\"run\":\"00ff\","
     "\"quorum_id\":2,\"step\":0,\"groups\":[\"g0\",\"g1\"],\"heal\":[{\"group\":\"g1\",\"step\":0,\"source\":\"g0\"}],"
     "\"reason\":\"group g1 joined\"}",
     "2026-12-01 03:01:02.000Z  #3      quorum_formed         step 0  quorum_id=2 groups=g0,g1 "
     "heal=[{\"group\":\"g1\",\"step\":0,\"source\":\"g0\"}] reason=\"group g1 joined\"",
     0},
    {"{\"type\":\"group_dropped\",\"seq\":7,\"ts\":5,\"group\":\"g2\",\"detail\":\"\",\"ok\":true,\"x\":null,"
     "\"share\":0.25,\"groups\":[]}",
     "1970-01-01 00:00:00.005Z  #7      group_dropped         g2  ok=true x=null share=0.25", 0},
    {"not json at all", "not json at all", -1},
    {"[1,2]\n", "[1,2]", -1},
    {"{\"type\":\"odd\"}", "-                         odd                 ", 0},
};

int main(void) {
    char out[512];
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        int rc = px_ctl_event_line(CASES[i].json, out, sizeof out);
        CHECK(rc == CASES[i].rc && strcmp(out, CASES[i].want) == 0, "case %zu: rc %d\n got  %s\n want %s", i, rc, out,
              CASES[i].want);
    }
    /* a small buffer: cut, terminated, nothing written past it */
    char small[24];
    memset(small, 'X', sizeof small);
    px_ctl_event_line(CASES[0].json, small, 20);
    CHECK(strlen(small) == 19 && small[20] == 'X', "cut at the buffer: %zu", strlen(small));
    if (failed) {
        fprintf(stderr, "%d check(s) failed\n", failed);
        return 1;
    }
    printf("event lines: %zu cases as expected, a small buffer cut\n", sizeof CASES / sizeof CASES[0]);
    return 0;
}
