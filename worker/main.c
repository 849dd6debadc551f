/* phalanx-worker entry point: dispatches to standalone training or to the
 * distributed worker (agent + trainer). */
#include <stdio.h>
#include <string.h>

#include "px_log.h"
#include "standalone.h"

int px_worker_main(int argc, char **argv);

int main(int argc, char **argv) {
    px_log_set_prog("phalanx-worker");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--standalone") == 0) {
            memmove(&argv[i], &argv[i + 1], (size_t)(argc - i) * sizeof(char *));
            return px_standalone_main(argc - 1, argv);
        }
    }
    return px_worker_main(argc, argv);
}
