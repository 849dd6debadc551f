/* The heap trimmer's rule (px_heap_trim_due in coordinator/heap_trim.c) as
 * a table, and its thread started and stopped. What a trim does to RSS
 * under churn is test_churn_rss.py's. */
#include <stdio.h>

#include "heap_trim.h"

#include "../lib/px_check.h"

static int failed;

#define MiB ((size_t)1 << 20)

static void due_cases(void) {
    static const struct {
        size_t base, now;
        int64_t since_ms;
        int due;
        const char *what;
    } cases[] = {
        {40 * MiB, 40 * MiB, 60000, 0, "RSS unchanged: nothing to give back"},
        {40 * MiB, 30 * MiB, 60000, 0, "RSS lower than after the last trim"},
        {40 * MiB, 48 * MiB - 1, 60000, 0, "grown by less than 8 MiB (the floor, above 1/16 of 40 MiB)"},
        {40 * MiB, 48 * MiB, 60000, 1, "grown by 8 MiB"},
        {40 * MiB, 48 * MiB, PX_HEAP_TRIM_MIN_INTERVAL_MS - 1, 0, "grown, but the last trim was too recent"},
        {40 * MiB, 48 * MiB, PX_HEAP_TRIM_MIN_INTERVAL_MS, 1, "grown, and the interval has passed"},
        {800 * MiB, 849 * MiB, 60000, 0, "grown by 49 MiB of 800: less than a sixteenth"},
        {800 * MiB, 850 * MiB, 60000, 1, "grown by a sixteenth of 800 MiB"},
        {0, 8 * MiB, 60000, 1, "no RSS read at the start: the floor still applies"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int due = px_heap_trim_due(cases[i].base, cases[i].now, cases[i].since_ms);
        CHECK(due == cases[i].due, "case %zu (%s): due %d, want %d", i, cases[i].what, due, cases[i].due);
    }
}

static void thread_cases(void) {
    char err[200] = "";
    px_heap_trimmer_t *t = px_heap_trimmer_start(err, sizeof err);
#ifdef __GLIBC__
    CHECK(t != NULL, "the trimmer starts: %s", err);
#else
    CHECK(t == NULL && err[0], "without glibc the trimmer says why it is off");
#endif
    px_heap_trimmer_stop(&t);
    CHECK(t == NULL, "stop clears the handle");
    px_heap_trimmer_stop(&t); /* a second stop is a no-op */
}

int main(void) {
    due_cases();
    thread_cases();
    printf("test_heap_trim: %s\n", failed ? "FAILED" : "all cases passed");
    return failed ? 1 : 0;
}
