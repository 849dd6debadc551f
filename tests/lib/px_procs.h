/* Rank processes for the comm tests and benchmarks: fork one child per rank,
 * share a result block with them, and wait for all of them with a deadline
 * so that a hung rank fails the test instead of hanging ctest.
 *
 * Children are forked before any communicator exists, so no Gloo thread is
 * ever duplicated by fork. */
#ifndef PX_PROCS_H
#define PX_PROCS_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>

#define PX_PROCS_MAX 16

typedef int (*px_rank_fn)(int rank, int size, void *arg);

/* In a child forked by px_procs_spawn: its rank; -1 in the parent. */
extern int px_procs_rank;

/* A rank function's check: on a false condition prints "FAIL rank=R
 * file:line: " and the printf-style message to stderr, and returns 1 from
 * the rank function (its exit status). */
#define PX_RANK_CHECK(cond, ...)                                                         \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "FAIL rank=%d %s:%d: ", px_procs_rank, __FILE__, __LINE__);  \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
            return 1;                                                                    \
        }                                                                                \
    } while (0)

/* Memory shared by the parent and every child forked afterwards (zeroed). */
void *px_procs_shared(size_t bytes);

/* Forks `size` children; child r runs fn(r, size, arg) and exits with its
 * return value. pids[r] receives each child's pid. 0 on success. */
int px_procs_spawn(int size, px_rank_fn fn, void *arg, pid_t *pids);

/* Waits for every child until deadline_ms (px_now_ms clock). Children still
 * running then are SIGKILLed and reported as hung. codes[r]: exit status,
 * 128+signal when killed by a signal, -1 when hung. Returns the number of
 * children that did not exit with status 0. `expect_killed` (or -1) names a
 * child the caller killed on purpose: it is not counted as a failure. */
int px_procs_wait(int size, const pid_t *pids, int64_t deadline_ms, int *codes, int expect_killed);

#endif
