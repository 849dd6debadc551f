/* What the distributed trainer's files share and nobody else needs: the
 * trainer's state (trainer_t) and the functions each file offers the ones
 * above it. The files form a stack; each calls only into those below it:
 *
 *   trainer.c  setup, the training loop, the end of the job. The only one
 *              that prints progress lines and events on stdout or writes
 *              the sample ledger: the others return what happened.
 *   diloco.c   DiLoCo: rounds of inner steps, outer steps (Streaming
 *              DiLoCo's fragments, the overlapped outer step), and the
 *              switches between sync and DiLoCo that --mode auto makes.
 *   follow.c   following the quorum: the rendezvous store, communicators,
 *              the agent's quorum hook, joining a quorum and healing.
 *   step.c     one step's work: this rank's samples, forward and backward,
 *              the gradient reduction with the commit vote, the optimizer
 *              step; a synchronous step whole (px_step_sync).
 *
 * diloco.c and follow.c both sit on step.c and never call each other. The
 * small helpers below (where the state lives, which communicator carries
 * host data) serve them all. */
#ifndef PX_TRAINER_INT_H
#define PX_TRAINER_INT_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "compute.h"
#include "dataset.h"
#include "gpt.h"
#include "heal.h"
#include "mesh_comm.h"
#include "persist.h"
#include "pipeline.h"
#include "px_comm.h"
#include "px_tok.h"
#include "px_wire.h"
#include "quorum.h"
#include "reducer.h"
#include "sharded.h"
#include "train_state.h"
#include "trainer.h"

typedef enum { PHASE_JOINING, PHASE_TRAINING } phase_t;

/* A run of the state's floats that belongs to one Streaming DiLoCo
 * fragment (diloco.c, build_fragments). */

typedef struct {
    size_t off, len; /* floats of the state's buffers */
    int frag;
} frag_run_t;

/* --outer-overlap: the round whose pseudo-gradients are being reduced on
 * a thread of their own while the next round trains (diloco.c,
 * "Overlapped outer steps"). */
typedef struct {
    int active;          /* a round's outer step is pending: reduced (or reducing), not applied */
    int running;         /* its thread has not been joined */
    int counted;         /* its bytes counted and its failure logged, once */
    pthread_t thread;
    float *buf;          /* the fragment's pseudo-gradients, packed (st.n floats) */
    size_t m;            /* floats packed */
    int frag;            /* the fragment */
    float weight, loss, scale;
    int64_t from, to;    /* the round's steps */
    uint64_t wire;
    int64_t reduce_us;
    px_comm_status_t status;
} pending_t;

/* An outer step applied (diloco.c), for the loop's progress line. */
typedef struct {
    int64_t to, outer;   /* the step it brought the job to; outer steps so far */
    float weight, loss;  /* contributing groups; the round's mean loss */
    uint64_t wire;       /* bytes this rank sent for it */
    char fragment[32];   /* "K/F", or "all/F" */
    char groups[PX_REASON_MAX / 2]; /* the quorum's groups, comma-separated */
} outer_done_t;

typedef struct {
    const px_trainer_config_t *cfg;
    px_agent_t *agent;
    volatile sig_atomic_t *stop;
    px_gpt_t *model;      /* the replica on the host; owned by shard when sharded */
    px_tok_t *sample_tok; /* --sample-every: the data's tokenizer (NULL: bytes) */
    px_compute_t *dev;    /* computes with model (cpu) or a GPU copy of it (cuda) */
    px_dataset_t *train, *val;
    /* A sharded group (cfg->fsdp/tp set): this rank's place in the mesh,
     * its shard of the state, and the step whose reduced gradients it holds
     * but has not applied (the group's confirmation failed; see px_step_sync). */
    px_shard_t *shard;
    px_mesh_t mesh;
    px_mesh_coord_t coord;
    px_mesh_comms_t axes;
    px_pipe_t *pipe;      /* a pipeline stage (pp > 1): its schedule's runtime */
    int64_t pending_step;
    float last_norm;      /* the clipping norm of the last step applied */
    double bytes_group, bytes_cross; /* sent by this rank's gradient reductions (ring estimate) */
    px_reducer_t *reducer; /* whole replicas with --bucket-mb: reduction overlapped with the backward */
    int T;
    int *inputs, *targets;
    /* DiLoCo (cfg->mode): the global parameters and the outer momentum, st's
     * params and outer_m (the model's params are the group's local ones),
     * and the inner steps this group has done in the round that starts at
     * st.step. */
    float *global, *outer_m;
    void *outer_scratch; /* the codec's (--outer-dtype bf16, int8), kept across outer steps */
    size_t outer_scratch_bytes;
    double outer_wire;   /* bytes this rank sent for pseudo-gradients */
    int inner;
    int round_full;      /* this round's inner steps all started from its global parameters: it has a round to give */
    int64_t round_samples; /* samples the group's inner steps of this round took (none: nothing learned to give) */
    int64_t outer_steps;
    double round_loss; /* sum of the round's inner losses */
    int64_t round_inner_us; /* wall time of the round's inner steps */
    /* Streaming DiLoCo (cfg->fragments F > 1): this rank's state cut into
     * runs of one fragment each (build_fragments), and which fragments the
     * group trained from their global values since each one's last outer
     * step (frag_full). With F = 1, one run of everything. */
    frag_run_t *runs;
    int nruns;
    unsigned char frag_full[PX_MAX_FRAGMENTS];
    pending_t pend;      /* --outer-overlap: the round in flight */
    outer_done_t done[2]; /* outer steps applied since the loop last printed them (at most the pending one and
                             the round's own) */
    int ndone;
    /* --mode auto: the mode the state is in (1: DiLoCo), set with st.local
     * (px_diloco_set_state_mode; read by the agent's hook under comm_mu), and the
     * share of step time spent in cross-group communication, reported to
     * the coordinator on the heartbeat (px_step_note_comm_share). */
    int running_diloco;
    double comm_share;
    int comm_share_n;
    int64_t step_cross_us; /* this step's time in the cross-group reduction */
    px_train_state_t st; /* views into the model; st.step: steps committed (DiLoCo: the round's start) */
    px_heal_t heal;
    px_persist_t persist;
    /* Quorum and communicators. Written by the trainer thread under comm_mu,
     * read under it by the agent's hook. */
    pthread_mutex_t comm_mu;
    px_quorum_t q;
    int64_t qid;        /* the quorum that q and the communicators belong to */
    int64_t store_qid;  /* the quorum whose rendezvous runs */
    int my_index;
    phase_t phase;
    int64_t aborted_for; /* newest quorum id that aborted our collectives (logged once) */
    int64_t drain_only;  /* a newer quorum that only drops drained groups (its id; 0: none): DiLoCo adopts it at
                            the outer step, with them, instead of at once */
    int finishing;       /* past the last step: the group's own collectives (a sharded group's
                            final eval and report) must not be aborted because another group left */
    px_comm_t *cross, *intra; /* the gradient reduction's (Gloo on cpu, NCCL on cuda) */
    px_comm_t *state_cross, *state_intra; /* cuda: Gloo for heals; NULL on cpu (heals use cross, intra) */
    /* stats */
    int failures;
    FILE *ledger;
} trainer_t;

/* The state is in DiLoCo's mode: always with --mode diloco, as the quorums
 * say with --mode auto (diloco.c, "automatic mode"). */
static inline int diloco(const trainer_t *t) { return t->running_diloco; }

/* The step being computed: its samples and learning rate. */
static inline int64_t cur_step(const trainer_t *t) { return t->st.step + t->inner; }

/* The communicators for host data (heals, the vote inside a sharded group,
 * DiLoCo's outer steps): the reduction's, or on a GPU Gloo ones. */
static inline px_comm_t *state_cross(const trainer_t *t) { return t->state_cross ? t->state_cross : t->cross; }
static inline px_comm_t *state_intra(const trainer_t *t) { return t->state_intra ? t->state_intra : t->intra; }

/* Starts bringing the host copy of the state up to date (a GPU's state is
 * downloaded when an optimizer step made the copy stale), without holding
 * training: the download runs while the next step computes. Nothing reads
 * the copy before px_compute_host_wait (a save's saver waits for it). */
static inline void host_state_begin(trainer_t *t) {
    if (px_compute_host_stale(t->dev)) {
        px_persist_fence(&t->persist); /* the download overwrites the state a save may be copying */
        /* and the digest cached at this step (a DiLoCo round's inner steps keep st.step) describes the old copy */
        t->heal.ck_valid = 0;
    }
    px_compute_host_state_begin(t->dev);
}

/* The host copy up to date: before it is read on the host. */
static inline void host_state(trainer_t *t) {
    host_state_begin(t);
    px_compute_host_wait(t->dev);
}

/* Before an optimizer step, the first write to the state since the last
 * commit: a save's overlapped copy of it must be done. A GPU's step writes
 * the device's state, not the host copy the saver reads: no wait. */
static inline void state_write_fence(trainer_t *t) {
    if (px_compute_state_on_host(t->dev)) px_persist_fence(&t->persist);
}

/* Before the host reads the local parameters or the moments (a GPU's
 * mirror downloaded when an inner step made it stale), and after it wrote
 * them (the GPU takes params, m and v back). No-ops on the CPU, and before
 * the compute exists (setup writes the host state it then uploads). */
static inline void local_read(trainer_t *t) {
    if (t->dev) host_state(t);
}
static inline void local_written(trainer_t *t) {
    if (t->dev) px_compute_host_written(t->dev);
}

/* ---- step.c -------------------------------------------------------------- */

/* How a synchronous step ended. */
typedef enum {
    PX_STEP_COMMITTED, /* applied: st.step moved on */
    PX_STEP_COMM_FAILED, /* a collective failed or timed out (reported to the coordinator): retry in a new quorum */
    PX_STEP_DISCARDED, /* the vote disagreed, or a sharded group's confirmation failed (reported) */
} px_step_result_t;

/* What a committed step gives the loop. */
typedef struct {
    float loss, norm;   /* the batch's mean loss; the gradient norm before clipping */
    int adopt;          /* every rank saw a newer quorum: all switch to it now */
    px_comm_status_t status; /* PX_STEP_COMM_FAILED: how the collective failed */
} px_step_out_t;

/* One synchronous step of the step protocol (trainer.c's top comment). */
px_step_result_t px_step_sync(trainer_t *t, px_step_out_t *out);
/* This rank's gradients of samples [lo, hi) of step cur_step into the
 * grads; *loss its share of the batch's mean loss. -1 when a sharded
 * group's collective failed. */
int px_step_compute_grads(trainer_t *t, int lo, int hi, float *loss_out);
/* Samples [lo, hi) of the global batch that this rank computes. */
void px_step_my_share(const trainer_t *t, int *lo, int *hi);
/* The group's share of a step's global batch: samples [jB/P, (j+1)B/P). */
int px_step_batch_of_group(const trainer_t *t);
/* The samples a step's gradient is the mean over: the global batch, or
 * with DiLoCo the group's share of it. */
int px_step_batch_of(const trainer_t *t);
/* Applies the reduced gradients of step `step` to the shard, clipped by
 * the group's global norm `norm`. */
void px_step_shard_apply(trainer_t *t, int64_t step, float norm);
/* The share of step time spent in cross-group communication, averaged over
 * recent steps and put on the heartbeat (--mode auto reads it). */
void px_step_note_comm_share(trainer_t *t, double comm_us, double step_us);
/* The mean loss over --eval-batches of validation data (NAN: none). */
float px_step_eval_loss(trainer_t *t);
/* Why a step's collectives failed. */
const char *px_step_failure_reason(trainer_t *t);

/* ---- follow.c ------------------------------------------------------------ */

/* The agent's hook (px_agent_set_quorum_hook): a newer quorum was pushed or
 * heard of; aborts the collectives that can no longer finish. */
void px_follow_on_quorum_news(void *ctx, const px_quorum_t *latest, int64_t known);
/* Joins the next quorum, asking for one after a failure (`failed`): makes
 * the communicators and brings the state in line with the others (heals).
 * 0, or -1 when stopped, drained, the job finished elsewhere, or the agent
 * gave up. A DiLoCo round in flight must be abandoned first
 * (px_diloco_abandon). */
int px_follow_reconfigure(trainer_t *t, int failed);
/* Drops the communicators (after a failure, at the end). */
void px_follow_drop_comms(trainer_t *t);
/* Quorum `known` only drops drained groups: DiLoCo adopts it at the outer
 * step, with them. */
int px_follow_drain_only_newer(trainer_t *t, int64_t known);
/* A group finished the job while this one is behind (logged once asked). */
int px_follow_job_finished_elsewhere(trainer_t *t);
/* The coordinator drains this group (logged). */
int px_follow_drained(trainer_t *t);

/* ---- diloco.c ------------------------------------------------------------ */

/* Inner steps of the round starting at st.step. */
int px_diloco_round_len(const trainer_t *t);
/* This rank's state cut into the fragments' runs. 0, or -1 out of memory. */
int px_diloco_build_fragments(trainer_t *t);
/* A new round (or the current one again) from the global parameters. */
void px_diloco_start_round(trainer_t *t);
/* After joining a quorum: every group to the same point of the round. The
 * furthest group's inner steps, or -1 when the collective failed. */
int px_diloco_align_round(trainer_t *t);
/* One inner step. 1: done; 0: the group's collective failed (reported). */
int px_diloco_inner_step(trainer_t *t, float *loss_out, float *norm_out);
/* The outer step at a round's end. 1: done (*adopt: every group saw a newer
 * quorum; the outer steps applied wait in t->done); 0: a collective failed
 * (reported). */
int px_diloco_outer_step(trainer_t *t, int *adopt, float *loss_out);
/* A pending overlapped round's outer step is abandoned: its thread joined,
 * every group drops it alike. Before the communicators go. */
void px_diloco_abandon(trainer_t *t);
/* The state in DiLoCo's mode (dl) or sync's; moves no data. */
void px_diloco_set_state_mode(trainer_t *t, int dl);
/* The state should be in DiLoCo's mode now (the quorum says so, or
 * --sync-warmup is done). */
int px_diloco_wanted(const trainer_t *t);
/* DiLoCo in a quorum that says sync: going back at the next point where
 * every group's parameters equal the global ones. */
int px_diloco_leaving(const trainer_t *t);
/* Sync to DiLoCo at a step every participant shares. */
void px_diloco_enter(trainer_t *t);
/* DiLoCo to sync: the groups' moments averaged. 0, or -1 (reported) when a
 * reduction failed (still DiLoCo). */
int px_diloco_leave(trainer_t *t);
/* After a heal that may have brought the other mode's state: the
 * parameters moved to where that mode keeps them. 1 when the mode changed. */
int px_diloco_follow_healed_mode(trainer_t *t);

#endif
