/* Implementation of px_child.h: a parent-death signal, checked against a
 * parent that died before the signal was armed. */
#include "px_child.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

void px_child_die_with_parent(pid_t parent) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
        /* Running on without it could leave an orphan: refuse instead. */
        fprintf(stderr, "child %d: prctl(PR_SET_PDEATHSIG): %s\n", (int)getpid(), strerror(errno));
        _exit(127);
    }
    if (getppid() != parent) _exit(127); /* the parent died before prctl: nobody would stop us */
}
