/* Fork/wait helpers for multi-process comm tests (see px_procs.h). */
#include "px_procs.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "px_child.h"
#include "px_time.h"

void *px_procs_shared(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    memset(p, 0, bytes);
    return p;
}

int px_procs_rank = -1;

int px_procs_spawn(int size, px_rank_fn fn, void *arg, pid_t *pids) {
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    for (int r = 0; r < size; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            for (int k = 0; k < r; k++) kill(pids[k], SIGKILL);
            return -1;
        }
        if (pid == 0) {
            px_child_die_with_parent(parent); /* a killed test leaves no rank behind */
            px_procs_rank = r;
            int rc = fn(r, size, arg);
            fflush(stdout);
            exit(rc);
        }
        pids[r] = pid;
    }
    return 0;
}

int px_procs_wait(int size, const pid_t *pids, int64_t deadline_ms, int *codes,
                  int expect_killed) {
    int left = size, bad = 0;
    int done[PX_PROCS_MAX] = {0};
    while (left > 0) {
        for (int r = 0; r < size; r++) {
            if (done[r]) continue;
            int status = 0;
            pid_t p = waitpid(pids[r], &status, WNOHANG);
            if (p == 0) continue;
            done[r] = 1;
            left--;
            codes[r] = WIFEXITED(status) ? WEXITSTATUS(status)
                       : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                             : -1;
            if (codes[r] != 0 && r != expect_killed) bad++;
        }
        if (left == 0) break;
        if (px_now_ms() >= deadline_ms) {
            for (int r = 0; r < size; r++) {
                if (done[r]) continue;
                fprintf(stderr, "rank %d (pid %d) hung past the deadline: killing it\n", r,
                        (int)pids[r]);
                kill(pids[r], SIGCONT);
                kill(pids[r], SIGKILL);
                waitpid(pids[r], NULL, 0);
                codes[r] = -1;
                bad++;
            }
            break;
        }
        px_sleep_ms(2);
    }
    return bad;
}
