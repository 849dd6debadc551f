/* Gives the heap's free pages back to the kernel while the coordinator runs,
 * so that its RSS follows the memory in use under connection churn (see
 * heap_trim.c for why glibc does not do it by itself). */
#ifndef PX_HEAP_TRIM_H
#define PX_HEAP_TRIM_H

#include <stddef.h>
#include <stdint.h>

#define PX_HEAP_TRIM_CHECK_MS 1000          /* how often the trimmer reads RSS */
#define PX_HEAP_TRIM_MIN_INTERVAL_MS 10000  /* the least time between two trims */
#define PX_HEAP_TRIM_MIN_GROWTH (8u << 20)  /* RSS growth that calls for a trim: this or 1/16 of the RSS, the larger */

/* Whether to trim now: RSS has grown from rss_base (its value after the
 * last trim, or the lowest since) to rss_now by at least
 * max(PX_HEAP_TRIM_MIN_GROWTH, rss_base / 16), and the last trim was
 * since_last_ms >= PX_HEAP_TRIM_MIN_INTERVAL_MS ago. */
int px_heap_trim_due(size_t rss_base, size_t rss_now, int64_t since_last_ms);

/* The trimmer thread: started once per process, after the coordinator is
 * up. NULL with err set when it cannot run (no thread, or a C library
 * without malloc_trim); the coordinator runs on without it. */
typedef struct px_heap_trimmer px_heap_trimmer_t;
px_heap_trimmer_t *px_heap_trimmer_start(char *err, size_t errlen);
/* Stops and joins the thread (at most one trim in progress to wait for). */
void px_heap_trimmer_stop(px_heap_trimmer_t **self);

#endif
