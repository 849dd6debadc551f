/* The trainer's checkpoints (checkpoint/ckpt.h): restoring the newest valid
 * one at start, and saving at commit boundaries.
 *
 * One writer per checkpoint: the group the coordinator lists first in the
 * quorum (the lowest name), its rank 0. The others skip the save, so R
 * groups write once, not R times. When the writer dies, the next quorum lists
 * another group first; if the new writer was not the writer before, it saves
 * at its next commit rather than waiting a whole interval, in case the old
 * one died mid-save. Saves happen every --checkpoint-every steps, at the
 * first step after --checkpoint-every-s seconds (the commit vote carries
 * each rank's "due by my clock", so every group of the quorum agrees on the
 * step), at the end of the job, and when the worker is stopped (SIGTERM),
 * always of committed state. A save due while the previous one still writes
 * is deferred, never waited for: it is taken at the first commit after that
 * write ended, and stands for any others that came due meanwhile (event
 * checkpoint_deferred once per such write; once a job, a hint at a longer
 * interval), so a disk slower than the interval costs checkpoints'
 * freshness, not training time; a group writing in parts defers by the vote
 * (any rank's part still writing), so that its ranks save the same steps. On
 * the CPU the optimizer step of the step to be saved takes the snapshot as
 * it goes (px_persist_pass), else it is copied while training waits, or with
 * --checkpoint-copy overlap by the saver while the next step computes
 * (px_persist_fence), and written on the saver's thread.
 *
 * Restore reads into the model's own buffers (it is a fresh model at start):
 * when no checkpoint loads, the initial state is rebuilt, so partial data is
 * never trained on. Every rank restores; rank 0 reports the events. */
#ifndef PX_PERSIST_H
#define PX_PERSIST_H

#include "agent.h"
#include "ckpt_saver.h"
#include "quorum.h"
#include "sharded.h"
#include "train_config.h"

typedef struct {
    const px_trainer_config_t *cfg;
    px_agent_t *agent;
    char dir[4096];                  /* --checkpoint-dir with %g expanded; "" when off */
    px_gpt_config_t model;
    px_ckpt_saver_t *saver;
    int64_t submitted;               /* step of the last save handed to the saver, or restored (-1: none) */
    char prev_writer[64];            /* the writer named by the last quorum joined */
    int catch_up;                    /* became the writer: save at the next commit */
    int64_t last_commit;             /* the step of the previous commit seen (-1: none) */
    int64_t submitted_us;            /* when the save of `submitted` was handed to the saver */
    int64_t deferred;                /* a save due at this step waits for the one in flight (-1: none) */
    int folded;                      /* ... and this many more came due meanwhile (one save stands for them) */
    int64_t deferred_first;          /* ... the step it first came due at */
    int64_t deferred_from;           /* ... the step of the save in flight then (for the hint) */
    double deferred_interval_s;      /* ... the wall time between the two due steps */
    int hinted;                      /* the hint at a longer interval was logged */
    int64_t time_mark_us;            /* --checkpoint-every-s: when the quorum last agreed on a save (or start) */
    int time_due;                    /* the step being committed saves by time (the vote said so) */
    int busy_agreed;                 /* ... some rank's saver still wrote when it voted */
    int rejected;                    /* checkpoints refused by the restore */
    /* A sharded group (px_persist_set_shard): every rank of the writing group
     * writes its part; rank 0 publishes. */
    int sharded;
    size_t (*runs)[2];
    px_ckpt_manifest_t plan;         /* rank 0: the slices of every rank's file */
    px_ckpt_part_t part;
    int fsdp, tp, pp;
    int group_failed;                /* part.cancel: set when a step of the group failed */
    void (*source_wait)(void *);     /* see px_persist_set_source_wait */
    void *source_ctx;
} px_persist_t;

/* Off (0) when cfg has no checkpoint_dir. -1 when the folder name is too
 * long or out of memory. */
int px_persist_init(px_persist_t *p, const px_trainer_config_t *cfg, px_agent_t *agent, const px_gpt_config_t *model);
/* This rank holds shard sh of a group of W ranks laid out pp x fsdp x tp,
 * rank r's shard being lays[r], of a state of nbuf buffers (the states
 * saved must have as many): checkpoints are written in parts (ckpt.h,
 * px_ckpt_write_part), one per rank of the writing group, each holding the
 * rectangles its shard owns in every buffer; the final save
 * at a stop (SIGTERM) is skipped, since the ranks may stop at different
 * steps (the job's end is saved). 0, or -1 when out of memory. */
int px_persist_set_shard(px_persist_t *p, px_shard_t *sh, const px_shard_layout_t *lays, int W, int pp, int nbuf);
/* How px_persist_restore ended. */
typedef enum {
    PX_RESTORE_NONE,     /* no checkpoints (or checkpoints off): st untouched, start from the initial state */
    PX_RESTORE_LOADED,   /* st holds the newest valid checkpoint; st->step is its step */
    PX_RESTORE_REFUSED,  /* only another job's, seed's or model's checkpoints, or none that verifies without
                            --allow-fresh-start: refuse to start (starting from scratch would overwrite them);
                            or the newest's schedule differs without --allow-schedule-change */
    PX_RESTORE_REBUILD,  /* every checkpoint was rejected, with --allow-fresh-start: the caller rebuilds the
                            initial state (a rejected one may have been partly read into st) */
} px_restore_result_t;

/* Restores into st (views into a fresh model), or with a sink (a sharded
 * rank: each slice read goes to its shard, st gives the whole model's size)
 * through it. A DiLoCo state (nbuf 4) restored from a checkpoint without the
 * outer momentum gets it zero (the sink's owner zeroes its own), logged as
 * outer_momentum=zero; a state of 3 from one with it leaves it out
 * (outer_momentum=ignored). A checkpoint whose recorded schedule (--steps,
 * --lr, --min-lr, --warmup, --global-batch, --seq) differs from cfg's is
 * refused, naming each flag and both values, unless
 * --allow-schedule-change (then logged as schedule_changed). */
px_restore_result_t px_persist_restore(px_persist_t *p, px_train_state_t *st, const px_ckpt_sink_t *sink);
/* A state whose host copy may still be arriving when a save is asked for
 * (a GPU's, downloaded while the next step computes): the saver calls
 * wait(ctx) before it reads the state (ckpt_saver.h). */
void px_persist_set_source_wait(px_persist_t *p, void (*wait)(void *ctx), void *ctx);
/* After joining quorum q: notes who writes. */
void px_persist_joined(px_persist_t *p, const px_quorum_t *q);
/* This rank's checkpoint flags for the step about to be reduced (vote.h,
 * PX_VOTE_CKPT_*: a save due by its clock, with --checkpoint-every-s; its
 * saver still writing), and the vote's verdict once reduced: `due`, the
 * step then committed saves, in every group alike, and every rank starts
 * the next interval; `busy`, some rank's save still writes, so a group
 * that writes in parts defers the step's save on every rank alike. */
int px_persist_vote(const px_persist_t *p);
void px_persist_agreed(px_persist_t *p, int due, int busy);
/* 1 when the commit of st under q saves (0 while a save still writes: the
 * commit then defers it), to be handed to px_persist_committed, so that
 * both go by one answer even if the write ends between them; a trainer
 * whose state lives on a GPU brings its host copy up to date first. */
int px_persist_due(const px_persist_t *p, const px_train_state_t *st, const px_quorum_t *q);
/* The optimizer step about to run makes the state (st->step + 1 then) that
 * the next commit under q saves: a pass for the step to take the snapshot
 * with as it goes (px_compute_clip_adamw_parts, visiting with
 * px_persist_visit and the pass; *part_floats: its parts), so that the
 * save copies nothing; NULL when no save is due then, the group is
 * sharded, the copy is to overlap (--checkpoint-copy overlap), or a pass
 * cannot be made: step as usual. After the step,
 * px_persist_passed(p, pass, st->step + 1). A fence or a commit forgets a
 * pass's snapshot (it saves only the state the step made). */
px_ckpt_pass_t *px_persist_pass(px_persist_t *p, const px_train_state_t *st, const px_quorum_t *q, size_t *part_floats);
void px_persist_visit(void *pass, int k, size_t lo, size_t hi);
void px_persist_passed(px_persist_t *p, px_ckpt_pass_t *pass, int64_t step);
/* After committing st->step under quorum q: saves when `due`
 * (px_persist_due's answer), or defers the save the intervals ask for while
 * the previous one still writes; reports finished saves. */
void px_persist_committed(px_persist_t *p, const px_train_state_t *st, const px_quorum_t *q, int due);
/* The job ended or the worker is stopping: the writer saves st unless it just
 * did, and waits until the save is durable. */
void px_persist_final(px_persist_t *p, const px_train_state_t *st, const px_quorum_t *q);
/* Before the state changes (an optimizer step, a heal): waits until the
 * save in flight has its snapshot. With --checkpoint-copy overlap the saver
 * copies the state on its own thread while the next step's forward and
 * backward run (they only read it), so training waits here only when the
 * copy is slower than those; with held it returns at once. */
void px_persist_fence(px_persist_t *p);
/* Waits for the save in flight (the state must outlive this call). */
void px_persist_free(px_persist_t *p);
/* A step of this rank's group failed (a rank of it may be gone): a part
 * save in flight stops waiting for the other ranks' parts. */
void px_persist_group_failed(px_persist_t *p);

#endif
