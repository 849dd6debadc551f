/* phalanx-worker's flags as tables (common/px_flags.h). The trainer's flags
 * are one table for both modes, the distributed worker and --standalone: one
 * name, range and default per flag. The others belong to one mode. The
 * tables are a library of their own: phalanx-launch checks the worker flags
 * it passes on with them. */
#ifndef PX_WORKER_FLAGS_H
#define PX_WORKER_FLAGS_H

#include <stddef.h>

#include "px_flags.h"
#include "train_config.h"

/* Both modes: the model, the data, the optimizer, evaluation, the device
 * (into a px_trainer_config_t). */
extern const px_flag_table_t px_train_flags;
/* The distributed trainer's own: the global batch, collectives,
 * checkpoints, DiLoCo (px_trainer_config_t). */
extern const px_flag_table_t px_worker_train_flags;
/* The layout of a group: --fsdp, --tp, --pp and the pipeline's schedule
 * (px_trainer_config_t). */
extern const px_flag_table_t px_worker_layout_flags;
/* The rank's place in the job: group, rank, job, liveness (into a
 * px_agent_config_t; worker/agent.h). */
extern const px_flag_table_t px_agent_flags;

/* What px_train_flags alone cannot check, for both modes: --min-lr at most
 * --lr; --model and --model-config naming one model (c->model becomes it,
 * "tiny" when neither is given). 0, or -1 with the message in err. */
int px_train_flags_check(px_trainer_config_t *c, char *err, size_t len);

#endif
