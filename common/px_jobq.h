/* A job queue with one worker thread that runs jobs in the order they were
 * issued: the communication threads of the data plane (parallel/sharded.c,
 * worker/reducer.c) are one of these, so that collectives on one
 * communicator keep the same order on every rank while the caller computes.
 *
 * A job is a small fixed-size struct copied into the queue. Once a job
 * fails, the later ones are not run (they count as failed) until
 * px_jobq_reset: a broken communicator stays broken. */
#ifndef PX_JOBQ_H
#define PX_JOBQ_H

#include <stddef.h>

typedef struct px_jobq px_jobq_t;

/* Runs one job on the queue's thread: 0, or -1 when it failed. */
typedef int (*px_jobq_fn)(void *ctx, const void *job);

/* depth jobs of job_size bytes at most in flight. NULL when out of memory or
 * no thread could be started. */
px_jobq_t *px_jobq_new(size_t job_size, int depth, px_jobq_fn fn, void *ctx);
/* Waits for the running job, then stops the thread; frees *q. */
void px_jobq_destroy(px_jobq_t **q);

/* Queues a copy of job (waiting while depth jobs are in flight); returns its
 * id, which grows by one per job from 1. */
unsigned long px_jobq_issue(px_jobq_t *q, const void *job);
/* Waits until job id and every job before it ran: 0, or -1 when any job
 * failed since the last reset. */
int px_jobq_wait(px_jobq_t *q, unsigned long id);
int px_jobq_wait_all(px_jobq_t *q);
/* Forgets a failure (call when idle, with new communicators). */
void px_jobq_reset(px_jobq_t *q);

#endif
