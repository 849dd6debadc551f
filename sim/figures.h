/* px_sim figures: the measured inputs of phalanx-sim, read from the JSON file
 * that bench/sim_figures.py writes from our benchmarks' --json outputs:
 *   {"detect_s": 0.0169, "requorum_s": 0.0241, "promotion_s": 0.09, "heal_bytes_per_s": 1.529e9,
 *    "checkpoint_write_bytes_per_s": 3.7e8, "checkpoint_hold_bytes_per_s": 7.45e9,
 *    "source": {...free-form: where each figure came from...}}
 * Every figure is optional (absent ones keep their value in the config);
 * unknown keys other than "source" are an error, so a typo is not silently
 * ignored. */
#ifndef PX_SIM_FIGURES_H
#define PX_SIM_FIGURES_H

#include <stddef.h>

#include "sim.h"

/* Fills c's figures from the file at path. Returns 0, or -1 with the file
 * and the fault written into err. */
int px_sim_figures_load(const char *path, px_sim_config_t *c, char *err, size_t errlen);

#endif
