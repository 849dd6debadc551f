/* phalanx-coordinator's flags as tables (common/px_flags.h): what main.c
 * parses, and what phalanx-launch checks the coordinator flags it passes on
 * with (the same ranges, words and names). */
#ifndef PX_COORDINATOR_FLAGS_H
#define PX_COORDINATOR_FLAGS_H

#include "coordinator.h"
#include "px_flags.h"

/* Everything the coordinator's command line sets. */
typedef struct {
    px_coordinator_config_t cfg;
    px_hostport_t http;       /* --http; port -1 until given */
    const char *curve_secret; /* --curve-secret-key-file */
    int insecure;             /* --insecure */
    int mode;                 /* --mode: an index of px_coordinator_modes */
    int quiet;                /* --quiet */
} px_coordinator_options_t;

extern const char *const px_coordinator_modes[]; /* "sync", "diloco", "auto", NULL */

/* The job, the endpoints, the credentials, the timing and the mode. */
extern const px_flag_table_t px_coordinator_flags;
/* --auto-*: --mode auto's thresholds, window and hold (mode_policy.h). */
extern const px_flag_table_t px_coordinator_auto_flags;
/* --max-*: the limits on state peers grow (defaults PX_DEFAULT_MAX_*). */
extern const px_flag_table_t px_coordinator_limit_flags;

#endif
