/* What one rank of the distributed trainer is asked to do: the job's
 * shape, the optimizer, the group's layout, checkpoints and DiLoCo. Filled
 * from the command line by worker.c; read by the trainer and by the modules
 * under it (persist.c), which need nothing else of the trainer. */
#ifndef PX_TRAIN_CONFIG_H
#define PX_TRAIN_CONFIG_H

#include <stdint.h>

#include "device.h"   /* px_device_t */
#include "progress.h" /* px_progress_format_t */

#define PX_MAX_FRAGMENTS 64 /* --fragments */

/* How groups combine their work (docs/architecture.md, "DiLoCo: inner rounds and outer steps"). */
typedef enum {
    PX_MODE_SYNC,   /* every step's gradients reduced across groups */
    PX_MODE_DILOCO, /* inner steps inside each group, an outer step across groups every inner_steps */
    PX_MODE_AUTO,   /* the mode each quorum announces (px_quorum_t.mode), switched at a step boundary */
} px_train_mode_t;

typedef struct {
    const char *group;
    int rank, ranks_per_group;
    const char *model;        /* preset name, JSON model config or llm.c model file */
    const char *model_config; /* --model-config: a JSON model config, copied to model (NULL: none) */
    const char *data;         /* directory with train_*.bin / val_*.bin */
    int64_t steps;            /* total optimizer steps of the job */
    int global_batch;         /* samples per step, over all groups (fixed) */
    int micro_batch;          /* samples per forward/backward */
    int seq_len;              /* T */
    float lr, min_lr, weight_decay, grad_clip;
    float beta1, beta2, eps;  /* AdamW's moment decays and denominator epsilon */
    int warmup;
    uint64_t seed;
    int threads;
    int eval_every, eval_batches;
    int sample_every, sample_tokens; /* a sample line every N steps (0: none), of this many tokens */
    int comm_timeout_ms;
    double cross_link_mbps;   /* benchmarks: the cross-group communicators (heals' too) paced to this many
                                 megabits/s per rank (px_comm_set_rate_limit); 0: not paced */
    const char *ledger;       /* sample ledger file (NULL: none) */
    const char *save;         /* llm.c model file written at the end (NULL: none) */
    int progress;             /* print a progress line per committed step on stdout */
    px_progress_format_t progress_format; /* those lines (and eval, outer step): text or JSON (progress.h) */
    const char *job;          /* the job's name, recorded in checkpoints ("" or NULL: unnamed) */
    const char *checkpoint_dir; /* NULL: no checkpoints; "%g" in it stands for the group's name */
    int checkpoint_every;     /* save every N committed steps; 0: only at the end and on SIGTERM */
    double checkpoint_every_s; /* save when S seconds passed since the last save (any rank's clock decides
                                * for the whole quorum, through the commit vote: vote.h); 0: off */
    int checkpoint_keep;      /* checkpoints kept by retention; 0: all */
    int checkpoint_wait;      /* 1: a save due while the previous one writes waits for it (every due step is
                               * saved, training held); 0: deferred to the first step after that write */
    double checkpoint_write_mb_s; /* checkpoint data written at most this fast, MB/s; 0: as fast as the disk goes */
    int allow_schedule_change; /* 1: resume a checkpoint whose --steps, --lr, --min-lr, --warmup,
                                  --global-batch or --seq differ (else refused) */
    int allow_fresh_start;    /* 1: every checkpoint in checkpoint_dir failing verification starts the job
                                 from the initial state; 0: refuse to start (they stay as they are) */
    int checkpoint_overlap;   /* 1: the saver copies the state while the next step computes;
                                 0: training is held for a copy on every core (ckpt_saver.h) */
    /* The group's layout (parallel/mesh.h): pp x fsdp x tp = ranks_per_group.
     * All 0: the W ranks each hold a whole replica (data parallel inside the
     * group too). Otherwise the group is sharded (parallel/sharded.h). */
    int pp, fsdp, tp;
    int microbatches;         /* with pp > 1: micro-batches per step the pipeline schedule interleaves; 0: not
                                 given (then P) */
    int schedule;             /* with pp > 1: the pipeline schedule, a px_sched_kind_t (parallel/schedule.h) */
    int fsdp_keep_params;     /* keep gathered layers from the forward for the backward */
    int recompute;            /* 1: block-level activation recomputation (px_gpt_set_recompute); CPU only */
    double bucket_mb;         /* whole replicas: reduce gradients in buckets of this many MiB
                                 during the backward (worker/reducer.h); 0: once, after it */
    px_device_t device;       /* PX_DEVICE_CPU, or PX_DEVICE_CUDA: one GPU per rank, NCCL
                                 (worker/compute.h); whole replicas only */
    px_precision_t precision; /* with PX_DEVICE_CUDA: PX_PRECISION_BF16 computes on bf16 tensor cores
                                 (px_compute_set_math); the state stays FP32 */
    int tf32;                 /* with PX_DEVICE_CUDA and fp32: matmul products in TF32 */
    int unfused_attention;    /* with PX_DEVICE_CUDA and bf16: the unfused attention, not the fused kernels */
    px_train_mode_t mode;
    int inner_steps;          /* DiLoCo: inner steps per outer step (H) */
    int fragments;            /* Streaming DiLoCo: fragments F (1: every parameter at every outer step) */
    int64_t sync_warmup;      /* DiLoCo: the first steps train in sync, DiLoCo from this step on */
    float outer_lr, outer_momentum; /* DiLoCo: the outer SGD's learning rate and Nesterov momentum */
    int outer_dtype;          /* DiLoCo: how pseudo-gradients travel, a px_outer_dtype_t (parallel/outer_codec.h) */
    int outer_overlap;        /* DiLoCo: a round's pseudo-gradients reduced while the next round trains,
                                 applied at its end (trainer.c, "Overlapped outer steps") */
} px_trainer_config_t;

#endif
