/* The event log's background syncer: one thread that runs every fdatasync
 * of the event log's files, so that the coordinator's loop never waits for
 * the disk (a sync can take a second on a busy or failing disk, and the loop
 * must keep answering heartbeats meanwhile).
 *
 * The loop still write()s each line itself, at once: that is a copy into the
 * page cache, and it is what keeps "a killed coordinator loses nothing it
 * emitted" true. Only the call that waits for the device moves here. Each
 * file has at most one sync in flight (px_appender_t, the .done offset of the
 * Kafka spill), which makes batching a group commit: lines written while a
 * sync runs are all covered by the next one. Requests run one at a time in
 * submission order, so a file synced before another is durable before it.
 *
 * A request lives in its owner's struct (px_sync_req_t); the queue links
 * them. Its state is read and written under the syncer's lock only. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "events_int.h"

enum { REQ_IDLE, REQ_QUEUED, REQ_DONE };

struct px_syncer {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    px_sync_req_t *head, *tail;
    int stop;
    pthread_t thread;
};

static void *syncer_main(void *arg) {
    px_syncer_t *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stop) pthread_cond_wait(&s->work, &s->mu);
        px_sync_req_t *r = s->head;
        if (!r) break; /* stopping, and nothing is left */
        s->head = r->next;
        if (!s->head) s->tail = NULL;
        int fd = r->fd;
        pthread_mutex_unlock(&s->mu);
        int rc, e = 0;
        do {
            rc = fdatasync(fd);
        } while (rc != 0 && errno == EINTR);
        if (rc != 0) e = errno;
        pthread_mutex_lock(&s->mu);
        r->err = e;
        r->state = REQ_DONE;
        pthread_cond_broadcast(&s->done);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

px_syncer_t *px_syncer_new(char *err, size_t errlen) {
    px_syncer_t *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->done, NULL);
    /* Signals (SIGTERM, SIGINT) stay with the loop's thread, which polls for them. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&s->thread, NULL, syncer_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the event log's sync thread: %s", strerror(rc));
        pthread_cond_destroy(&s->work);
        pthread_cond_destroy(&s->done);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return NULL;
    }
    return s;
}

void px_syncer_destroy(px_syncer_t **sp) {
    px_syncer_t *s = *sp;
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL); /* runs what was queued first */
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->done);
    pthread_mutex_destroy(&s->mu);
    free(s);
    *sp = NULL;
}

void px_syncer_submit(px_syncer_t *s, px_sync_req_t *r, int fd) {
    pthread_mutex_lock(&s->mu);
    r->fd = fd;
    r->err = 0;
    r->state = REQ_QUEUED;
    r->next = NULL;
    if (s->tail)
        s->tail->next = r;
    else
        s->head = r;
    s->tail = r;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
}

int px_syncer_collect(px_syncer_t *s, px_sync_req_t *r, int wait) {
    pthread_mutex_lock(&s->mu);
    while (wait && r->state == REQ_QUEUED) pthread_cond_wait(&s->done, &s->mu);
    int finished = r->state == REQ_DONE;
    if (finished) r->state = REQ_IDLE;
    pthread_mutex_unlock(&s->mu);
    return finished;
}
