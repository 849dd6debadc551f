/* px_sim: a discrete-event simulation of one training job's goodput under
 * accelerator failures, for one recovery policy per run (sim.c has the models).
 * Pure: no I/O, no clock, no global state; a run is a function of its config,
 * seed included, so the same config gives the same result on every platform. */
#ifndef PX_SIM_H
#define PX_SIM_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    PX_SIM_RESTART_ALL,        /* torchrun: any failure restarts the whole job from its checkpoint */
    PX_SIM_DROP_GROUP_TIMEOUT, /* torchft: heartbeat-timeout detection, shrinking batch */
    PX_SIM_PHALANX_SYNC,       /* ours, synchronous: fast detection, fixed global batch */
    PX_SIM_PHALANX_DILOCO,     /* ours, DiLoCo: a failure costs the group's inner steps of the round */
    PX_SIM_POLICIES
} px_sim_policy_t;

/* Where wall time that is not committed progress went, in job-seconds: a
 * second of the whole job stalled is 1, a second with 1 of G groups missing
 * is 1/G. Progress plus every cause is the wall time. */
typedef enum {
    PX_SIM_DETECT,     /* failure detection and the re-quorum after a loss (everyone stalled) */
    PX_SIM_RESTART,    /* whole-job restarts (the job down) */
    PX_SIM_RECOMPUTE,  /* work done, then lost: since the checkpoint, the step in flight, the round */
    PX_SIM_HEAL,       /* groups receiving state, and the re-quorum when they rejoin */
    PX_SIM_DEGRADED,   /* groups out waiting for repair or replacement (or for the next round) */
    PX_SIM_CHECKPOINT, /* checkpoint stalls: the whole write (restart-all) or the snapshot copy */
    PX_SIM_CAUSES
} px_sim_cause_t;

typedef struct {
    px_sim_policy_t policy;
    int64_t accelerators;       /* N */
    int64_t gpus_per_group;     /* a replica group: the unit of failure for the group policies */
    int64_t node_size;          /* accelerators per node, for correlated failures (8) */
    double wall_s;              /* simulated wall time */
    double accel_mtbf_s;        /* mean time between interruptions of one accelerator; 0 = no failures */
    double node_failure_share;  /* share of interruptions that take a whole node */
    double repair_s;            /* a lost group's wait for a replacement node and a started process */
    double restart_s;           /* a whole-job restart: reschedule, start, load the checkpoint */
    double step_s;              /* one optimizer step with every group present */
    int64_t inner_steps;        /* DiLoCo H */
    int64_t min_replicas;       /* group policies: fewer live groups restarts the whole job */
    int64_t spares;             /* phalanx-sync, phalanx-diloco: standby groups that take a lost group's place */
    double checkpoint_interval_s; /* < 0: policy default; 0: Young/Daly; > 0: given */
    double state_bytes;         /* training state of one replica (params + optimizer) */
    /* our measured figures (phalanx-sync, phalanx-diloco; restart-all's checkpoint write) */
    double detect_s, requorum_s;
    double promotion_s;              /* phalanx-sync with spares: a promotion beyond its heal (sim.c) */
    double heal_bytes_per_s;         /* per rank pair: a group's ranks heal in parallel */
    double checkpoint_write_bytes_per_s; /* per rank, to durable storage */
    double checkpoint_hold_bytes_per_s;  /* per rank: the snapshot copy that holds training */
    /* drop-group-timeout's figures */
    double timeout_s;                /* heartbeat timeout before a silent group is dropped */
    double timeout_heal_bytes_per_s; /* its heal rate per rank pair */
    uint64_t seed;
} px_sim_config_t;

typedef struct {
    double wall_s, progress_s;  /* committed, non-repeated progress in job-seconds */
    double lost_s[PX_SIM_CAUSES];
    double goodput;             /* progress / wall */
    double ettr;                /* share of wall time the job ran steps (not down, stalled) */
    int64_t failures;           /* interruptions seen (a node failure is one) */
    int64_t groups_lost;        /* group losses they caused (restart-all: none, the job goes) */
    int64_t whole_restarts;
    int64_t promotions;         /* losses a spare answered */
    int64_t groups;
    double checkpoint_interval_s, checkpoint_cost_s, heal_s, job_mtbf_s;
} px_sim_result_t;

/* Llama 3 (Dubey et al. 2024, section 3.3.4): 419 unexpected interruptions in
 * 54 days on 16,384 GPUs. Per GPU: 54 * 86400 * 16384 / 419 seconds. */
#define PX_SIM_LLAMA3_ACCEL_MTBF_S (54.0 * 86400.0 * 16384.0 / 419.0)

/* Defaults for every field (the figures: see px_sim_figures_load). */
void px_sim_config_default(px_sim_config_t *c);
/* Checks ranges; on a bad config writes why into err and returns -1. */
int px_sim_config_check(const px_sim_config_t *c, char *err, size_t errlen);
/* Runs the simulation. Returns -1 (err set) on a bad config. */
int px_sim_run(const px_sim_config_t *c, px_sim_result_t *r, char *err, size_t errlen);

const char *px_sim_policy_name(px_sim_policy_t p);
int px_sim_policy_parse(const char *name, px_sim_policy_t *p); /* 0, or -1 unknown */
const char *px_sim_cause_name(px_sim_cause_t c);

/* Young/Daly's interval sqrt(2 C M) for checkpoint cost C and MTBF M. */
double px_sim_young_daly_interval(double C, double M);
/* Daly (2006)'s expected goodput for exponential failures of MTBF M, compute
 * tau then checkpoint C per segment, restart R during which failures may also
 * strike: a segment takes M e^{R/M} (e^{(tau+C)/M} - 1) of wall time on
 * average, so goodput = tau / that. Exact for restart-all's model. */
double px_sim_daly_goodput(double tau, double C, double R, double M);

#endif
