/* px_jobq.h: a ring of fixed-size jobs, a mutex, one condition variable for
 * both directions, and the thread. */
#include "px_jobq.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct px_jobq {
    px_jobq_fn fn;
    void *ctx;
    size_t size;
    int depth;
    unsigned char *ring;
    unsigned long issued, done;
    int failed, quit;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void *run(void *arg) {
    px_jobq_t *q = arg;
    unsigned char *job = malloc(q->size);
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->quit && q->done == q->issued) pthread_cond_wait(&q->cv, &q->mu);
        if (q->quit) break;
        memcpy(job, q->ring + (q->done % (unsigned long)q->depth) * q->size, q->size);
        int skip = q->failed;
        pthread_mutex_unlock(&q->mu);
        int rc = skip ? -1 : q->fn(q->ctx, job);
        pthread_mutex_lock(&q->mu);
        if (rc != 0) q->failed = 1;
        q->done++;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    free(job);
    return NULL;
}

px_jobq_t *px_jobq_new(size_t job_size, int depth, px_jobq_fn fn, void *ctx) {
    px_jobq_t *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    *q = (px_jobq_t){.fn = fn, .ctx = ctx, .size = job_size, .depth = depth};
    q->ring = calloc((size_t)depth, job_size);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    if (!q->ring || pthread_create(&q->thread, NULL, run, q) != 0) {
        pthread_mutex_destroy(&q->mu);
        pthread_cond_destroy(&q->cv);
        free(q->ring);
        free(q);
        return NULL;
    }
    return q;
}

void px_jobq_destroy(px_jobq_t **qp) {
    px_jobq_t *q = qp ? *qp : NULL;
    if (!q) return;
    pthread_mutex_lock(&q->mu);
    q->quit = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q->ring);
    free(q);
    *qp = NULL;
}

unsigned long px_jobq_issue(px_jobq_t *q, const void *job) {
    pthread_mutex_lock(&q->mu);
    while (q->issued - q->done >= (unsigned long)q->depth) pthread_cond_wait(&q->cv, &q->mu);
    memcpy(q->ring + (q->issued % (unsigned long)q->depth) * q->size, job, q->size);
    unsigned long id = ++q->issued;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return id;
}

int px_jobq_wait(px_jobq_t *q, unsigned long id) {
    pthread_mutex_lock(&q->mu);
    while (q->done < id) pthread_cond_wait(&q->cv, &q->mu);
    int rc = q->failed ? -1 : 0;
    pthread_mutex_unlock(&q->mu);
    return rc;
}

int px_jobq_wait_all(px_jobq_t *q) {
    pthread_mutex_lock(&q->mu);
    unsigned long id = q->issued;
    pthread_mutex_unlock(&q->mu);
    return px_jobq_wait(q, id);
}

void px_jobq_reset(px_jobq_t *q) {
    px_jobq_wait_all(q);
    pthread_mutex_lock(&q->mu);
    q->failed = 0;
    pthread_mutex_unlock(&q->mu);
}
