/* Child processes that die with their parent.
 *
 * A supervisor that is killed with SIGKILL cannot clean up after itself: its
 * coordinator and workers would be re-parented to init and train on with
 * nobody left to stop them. So every program here that forks (phalanx-launch,
 * test and benchmark drivers) calls px_child_die_with_parent() in the child
 * right after fork(), passing the pid the parent had before forking.
 *
 * The child gets SIGKILL when its parent dies, not SIGTERM: nobody would be
 * left to escalate if a graceful exit hung (a worker can sit in a collective
 * for its whole --comm-timeout-ms), and every phalanx process is built to
 * survive a SIGKILL anyway (that is what the chaos drills do). A parent that
 * wants a graceful stop signals its children itself while it is alive.
 *
 * Linux only (prctl). The setting survives execve (except set-user-ID
 * binaries). It fires when the forking *thread* exits, so fork from a thread
 * that lives as long as the process (the main thread). */
#ifndef PX_CHILD_H
#define PX_CHILD_H

#include <sys/types.h>

/* Arranges SIGKILL on the parent's death; if the parent already died
 * between fork() and this call (getppid() is no longer `parent`), exits at
 * once. Call in the child only. */
void px_child_die_with_parent(pid_t parent);

#endif
