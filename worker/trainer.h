/* The distributed trainer: one rank of a fault-tolerant data-parallel job.
 * It runs the step protocol (docs/architecture.md, "The step protocol") on
 * top of the agent (control plane) and px_comm (data plane). trainer.c
 * holds the loop; trainer_int.h lists the files under it. See
 * docs/operations.md for what a user sees. */
#ifndef PX_TRAINER_H
#define PX_TRAINER_H

#include <signal.h>
#include <stddef.h>

#include "agent.h"
#include "train_config.h"

/* How px_trainer_run ended. */
typedef enum {
    PX_TRAIN_DONE,          /* the job's steps are committed */
    PX_TRAIN_FAILED,        /* a fatal error: worth a restart */
    PX_TRAIN_STOPPED,       /* stopped by a signal before the end */
    PX_TRAIN_FINISHED_ELSEWHERE, /* another group finished the job while this one was behind */
    PX_TRAIN_CONFIG_ERROR,  /* the configuration cannot work (model, data, sequence length or ledger refused at
                               setup, or the checkpoint folder holds only another job's checkpoints): retrying
                               cannot help */
    PX_TRAIN_DRAINED,       /* the coordinator drained the group and it left at a step boundary (a planned leave) */
} px_train_result_t;

/* Whether cfg can run on this machine and build, before anything starts:
 * --device cuda needs a usable GPU and NCCL, and whole replicas without
 * --bucket-mb. 0, or -1 with the reason in err (a configuration error). */
int px_trainer_check(const px_trainer_config_t *cfg, char *err, size_t errlen);

/* Sets training up (model, layout, data, checkpoint restore), then starts
 * the agent (px_agent_start), which registers with the coordinator: a
 * configuration that cannot train (PX_TRAIN_CONFIG_ERROR) never reaches it.
 * Trains until cfg->steps are committed or *stop is set. */
px_train_result_t px_trainer_run(px_agent_t *agent, const px_trainer_config_t *cfg, volatile sig_atomic_t *stop);

#endif
