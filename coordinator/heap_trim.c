/* The heap trimmer (heap_trim.h): a thread that hands free heap pages back
 * to the kernel with malloc_trim(0) when the coordinator's RSS has grown.
 *
 * Why: every connection a member opens costs libzmq about 75 KB of pipes,
 * queues and stream buffers (mostly 8-16 KB blocks), allocated and freed by
 * its I/O thread in that thread's own malloc arena. Under register/leave
 * churn thousands of these blocks are freed and reused every second. glibc
 * keeps a freed block's pages mapped, and gives memory back on its own only
 * from the top of a heap (M_TRIM_THRESHOLD), which churn seldom frees: the
 * free blocks end up spread through the arena, and as they are reused the
 * pages of blocks that were only partly touched before (a queue's chunk is
 * written a message at a time) get touched too. So the heap in use stays
 * flat while RSS climbs, for minutes, toward everything the arenas ever
 * mapped. malloc_trim(0) madvises the pages of every free block away in
 * every arena, which brings RSS back to what is in use. Fewer arenas would
 * not help (there are two: the loop's and the I/O thread's), and moving the
 * blocks to mmap (M_MMAP_THRESHOLD) would cost two system calls per block
 * and a memory map per block, thousands a second.
 *
 * Cost: a trim makes one madvise per free block larger than a page and holds
 * each arena's lock while it walks it: 6-27 ms with 1,700 connections and
 * 500 replaced a second on a busy two-core machine (a thread that needs a
 * block from the arena being walked waits that long at most). So it runs
 * here, never on the event loop, and only when it pays: RSS is read every
 * PX_HEAP_TRIM_CHECK_MS (/proc/self/statm, a few microseconds), and a trim
 * runs when RSS has grown by a sixteenth (8 MiB at least) since the last
 * one, at most every PX_HEAP_TRIM_MIN_INTERVAL_MS. A coordinator whose RSS
 * holds still never trims; one under churn trims every ten seconds and logs
 * a heap_trimmed line (info) each time. */
#include "heap_trim.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "px_log.h"
#include "px_time.h"

int px_heap_trim_due(size_t rss_base, size_t rss_now, int64_t since_last_ms) {
    if (since_last_ms < PX_HEAP_TRIM_MIN_INTERVAL_MS || rss_now <= rss_base) return 0;
    size_t growth = rss_base / 16 > PX_HEAP_TRIM_MIN_GROWTH ? rss_base / 16 : PX_HEAP_TRIM_MIN_GROWTH;
    return rss_now - rss_base >= growth;
}

#ifdef __GLIBC__

struct px_heap_trimmer {
    pthread_mutex_t mu;
    pthread_cond_t wake; /* on CLOCK_MONOTONIC: stop is seen at once */
    int stop;
    pthread_t thread;
};

/* Resident bytes of this process (0 when /proc cannot be read). */
static size_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long size = 0, resident = 0;
    int got = fscanf(f, "%lu %lu", &size, &resident);
    fclose(f);
    return got == 2 ? (size_t)resident * (size_t)sysconf(_SC_PAGESIZE) : 0;
}

/* Sleeps until `ms` from now or a stop; returns 1 when stopping. */
static int wait_or_stop(px_heap_trimmer_t *t, int64_t ms) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)(ms / 1000);
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&t->mu);
    while (!t->stop && pthread_cond_timedwait(&t->wake, &t->mu, &until) != ETIMEDOUT) {
    }
    int stop = t->stop;
    pthread_mutex_unlock(&t->mu);
    return stop;
}

static void *trimmer_main(void *arg) {
    px_heap_trimmer_t *t = arg;
    size_t base = rss_bytes();
    int64_t last_ms = px_now_ms();
    while (!wait_or_stop(t, PX_HEAP_TRIM_CHECK_MS)) {
        size_t now = rss_bytes();
        if (now && now < base) base = now;
        int64_t t0 = px_now_ms();
        if (!now || !px_heap_trim_due(base, now, t0 - last_ms)) continue;
        malloc_trim(0);
        last_ms = px_now_ms();
        base = rss_bytes();
        px_log_info("heap_trimmed rss_before_mb=%.1f rss_after_mb=%.1f took_ms=%lld", (double)now / (1 << 20),
                    (double)base / (1 << 20), (long long)(last_ms - t0));
    }
    return NULL;
}

px_heap_trimmer_t *px_heap_trimmer_start(char *err, size_t errlen) {
    px_heap_trimmer_t *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&t->mu, NULL);
    /* Signals (SIGTERM, SIGINT) stay with the loop's thread, which polls for them. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&t->thread, NULL, trimmer_main, t);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the heap trimmer thread: %s", strerror(rc));
        pthread_cond_destroy(&t->wake);
        pthread_mutex_destroy(&t->mu);
        free(t);
        return NULL;
    }
    return t;
}

void px_heap_trimmer_stop(px_heap_trimmer_t **self) {
    px_heap_trimmer_t *t = *self;
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    pthread_cond_destroy(&t->wake);
    pthread_mutex_destroy(&t->mu);
    free(t);
    *self = NULL;
}

#else /* no malloc_trim outside glibc */

struct px_heap_trimmer {
    int unused;
};

px_heap_trimmer_t *px_heap_trimmer_start(char *err, size_t errlen) {
    snprintf(err, errlen, "malloc_trim needs glibc: RSS may stay above the memory in use under connection churn");
    return NULL;
}

void px_heap_trimmer_stop(px_heap_trimmer_t **self) { *self = NULL; }

#endif
