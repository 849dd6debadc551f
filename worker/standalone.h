/* Single-process training (`phalanx-worker --standalone ...`): one rank, no
 * coordinator, no communicators. Implemented in worker/standalone.c. */
#ifndef PX_STANDALONE_H
#define PX_STANDALONE_H

/* argv[0] is the program name; the --standalone flag itself has been removed.
 * Returns the process exit status. */
int px_standalone_main(int argc, char **argv);

#endif
