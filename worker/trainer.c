/* The step protocol (sync mode), one rank's view.
 *
 * A job has P participating replica groups of W ranks; every rank holds a
 * full replica of the model (data parallel inside the group too). Step s:
 *
 *  1. The global batch of step s is B samples, sample i drawn by
 *     px_dataset_fill(seed, s, i): a pure function of the seed and the step,
 *     so a retried step sees the same samples. Group j of P takes samples
 *     [jB/P, (j+1)B/P), its rank r a contiguous part of that; micro-batches
 *     accumulate, each scaled by its size / B, so the sum over all ranks is
 *     the mean gradient of the whole batch whatever P is.
 *  2. One reduction: grads plus the commit vote's tail (vote.h: count, step
 *     mod 13 and its square, newer-quorum flag, weighted loss), summed inside
 *     the group, checked and relayed, then summed across groups. Every rank
 *     sees the same sums and applies the step only if every rank of every
 *     group voted for the same step. No coordinator message.
 *  3. On any communicator error or timeout the step is discarded, the failure
 *     reported at once, a new quorum requested, and the same step retried.
 *     The agent tells a hook about every newer quorum; it aborts the
 *     collectives in flight when they can no longer finish: the newer quorum
 *     drops one of our peers (or us), or was formed without being pushed to
 *     us (we were fenced out), or we were still joining the old one. A
 *     stopped peer costs the heartbeat timeout, not the collective timeout.
 *  4. After every quorum change the participants bring their state in line
 *     (heal.c): the ranks of a group first, then the groups, where those
 *     behind or divergent receive the whole state from an up-to-date group.
 *     A rendezvous or heal of a quorum that a newer one has replaced is given
 *     up at once (store reads poll the agent's newest quorum id between short
 *     waits), and the worker moves to the newest quorum.
 *  5. A newly pushed quorum that only adds groups is adopted at a step
 *     boundary that every participant agrees on: whoever has seen it raises
 *     the flag in the tail, and all switch after that step. Collectives in
 *     flight are not aborted for it (that would cost a retried step).
 *
 * A sharded group (--fsdp/--tp, parallel/sharded.h) differs in three places:
 * its ranks hold shards, so step 2 reduces only the vote inside the group
 * (the fsdp reduce-scatters already summed the gradients) and the gradient
 * shard across groups between same-coordinate ranks (HSDP); a step commits
 * only after a one-float sum inside the group that confirms every rank got
 * that far (shard_commit); and step 4 first brings the group's ranks to one
 * step (shard_group_sync), then heals groups whole, rank by rank. The
 * collective-by-collective picture is in docs/architecture.md.
 *
 * The device (--device, compute.h) changes none of this. With cuda the
 * model computes on a GPU, the gradients and the vote's tail are reduced by
 * NCCL communicators made like the Gloo ones, and the state moves between
 * the GPU and its host copy at the points that read or write it on the host:
 * checksums, heals, checkpoints, the final report. NCCL moves device memory
 * only, so heals (host buffers) run over Gloo communicators of their own,
 * made next to the NCCL ones (state_cross, state_intra). Sharded groups and
 * --bucket-mb are CPU-only (px_trainer_check).
 *
 * DiLoCo (--mode diloco) replaces step 2 for H steps at a time, and
 * --mode auto switches between the two modes at step boundaries: see
 * diloco.c.
 *
 * This file holds the setup, the loop and the end of the job; the files
 * under it (trainer_int.h) do the work of each iteration: step.c a step,
 * follow.c steps 3 to 5, diloco.c DiLoCo. Only the loop prints progress
 * and event lines and writes the sample ledger. */
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc.h"
#include "model_config.h"
#include "px_log.h"
#include "px_time.h"
#include "sample_line.h"
#include "trainer_int.h"

/* After committing a step: the checkpoint due at it, if this group writes. */
static void checkpoint_commit(trainer_t *t) {
    int due = px_persist_due(&t->persist, &t->st, &t->q);
    if (due) host_state_begin(t);
    px_persist_committed(&t->persist, &t->st, &t->q, due);
}

static void wait_host(void *ctx) {
    trainer_t *t = ctx;
    px_compute_host_wait(t->dev);
}


/* ---- the end of the job ------------------------------------------------- */

/* The state checksum and the parameters' squared norm of the whole group:
 * for a sharded group, a checksum of every rank's shard checksum (in rank
 * order) and the sum over ranks, collective over the group. */
static int final_stats(trainer_t *t, uint64_t *ck, double *pn) {
    *ck = px_heal_checksum(&t->heal);
    if (!t->shard) {
        for (size_t i = 0; i < t->model->num_params; i++) *pn += (double)t->model->params[i] * t->model->params[i];
        return 0;
    }
    t->heal.group_comm = state_intra(t);
    int64_t step;
    if (px_heal_group_state(&t->heal, &step, ck) != 0) return -1;
    float sq = (float)px_shard_param_sumsq(t->shard);
    if (px_comm_allreduce_sum_f32(state_intra(t), &sq, 1) != PX_COMM_OK) return -1;
    *pn = sq;
    return 0;
}

/* --save: the whole model as an llm.c file from rank 0 (a sharded group
 * gathers it first, collectively). */
static void save_model(trainer_t *t) {
    char err[256];
    px_gpt_t *whole = t->model;
    if (t->shard) {
        whole = px_gpt_new_zeroed(&t->model->config);
        if (!whole || px_shard_gather(t->shard, whole) != 0) {
            px_log_error("--save: cannot gather the model from the group's shards");
            px_gpt_destroy(&whole);
            return;
        }
    }
    if (t->cfg->rank == 0 && px_gpt_save(whole, t->cfg->save, err, sizeof err) != 0) px_log_error("--save: %s", err);
    if (whole != t->model) px_gpt_destroy(&whole);
}

/* ---- setup and the loop ------------------------------------------------ */

/* Whether --model is drawn from the seed (a preset or a JSON config, in
 * *mc, its vocabulary following the data's tokenizer) rather than loaded
 * from an llm.c model file. */
static int drawn_model(const px_trainer_config_t *cfg, px_gpt_config_t *mc) {
    return px_model_resolve(cfg->model, cfg->data, mc, NULL, 0) == PX_MODEL_DRAWN;
}

/* The model at the job's start: a seeded preset or config, or an llm.c
 * model file. NULL (logged) when it cannot be had. */
static px_gpt_t *initial_model(const px_trainer_config_t *cfg) {
    char err[512];
    px_gpt_config_t mc;
    px_gpt_t *m = NULL;
    px_model_source_t src = px_model_resolve(cfg->model, cfg->data, &mc, err, sizeof err);
    if (src == PX_MODEL_BAD) {
        px_log_error("--model: %s", err);
        return NULL;
    }
    if (src == PX_MODEL_DRAWN) {
        m = px_gpt_new(&mc, cfg->seed);
    } else if (px_gpt_load(cfg->model, &m, err, sizeof err) != 0) {
        px_log_error("--model: '%s' is not a readable model file: %s", cfg->model, err);
        return NULL;
    }
    if (!m) px_log_error("out of memory creating the model");
    return m;
}

/* DiLoCo in a sharded group: the shard just drawn or cut becomes the global
 * parameters, with no outer momentum. */
static void diloco_initial(trainer_t *t) {
    memcpy(t->global, px_shard_bufs(t->shard)->params, t->st.n * sizeof(float));
    memset(t->outer_m, 0, t->st.n * sizeof(float));
    px_diloco_start_round(t);
}

/* Heal callback (worker/heal.h): the initial state again, bit for bit, into
 * s (a receive in place at step 0 failed). */
static int rebuild_initial_state(void *ctx, px_train_state_t *s) {
    trainer_t *t = ctx;
    px_gpt_config_t preset;
    if (t->cfg->mode == PX_MODE_AUTO || t->cfg->sync_warmup > 0) /* the job starts in sync; a heal in place */
        px_diloco_set_state_mode(t, 0);                                       /* may have brought another mode */
    if (t->shard && drawn_model(t->cfg, &preset)) { /* drawn shard by shard */
        s->step = 0;
        t->pending_step = -1;
        if (px_shard_init(t->shard, t->cfg->seed) != 0) return -1;
        if (diloco(t)) diloco_initial(t);
        return 0;
    }
    px_gpt_t *fresh = initial_model(t->cfg);
    if (!fresh) return -1;
    if (t->shard) { /* s is the shard's live state: this rank's pieces of the fresh model */
        px_shard_load(t->shard, fresh);
        if (diloco(t)) diloco_initial(t);
    } else {
        memcpy(s->buf[PX_STATE_PARAMS], fresh->params, s->n * sizeof(float));
        memset(s->buf[PX_STATE_M], 0, s->n * sizeof(float));
        memset(s->buf[PX_STATE_V], 0, s->n * sizeof(float));
        if (s->nbuf > PX_STATE_OUTER_M) memset(s->buf[PX_STATE_OUTER_M], 0, s->n * sizeof(float));
    }
    s->step = 0;
    t->pending_step = -1;
    px_gpt_destroy(&fresh);
    if (diloco(t) && !t->shard) px_diloco_start_round(t);
    return 0;
}

static int layout_given(const px_trainer_config_t *cfg) { return cfg->fsdp || cfg->tp || cfg->pp; }

/* Rank r's shard layout in this group's mesh. */
static px_shard_layout_t layout_of(const trainer_t *t, const px_gpt_config_t *mc, int r) {
    px_mesh_coord_t c = px_mesh_coord(&t->mesh, r);
    px_shard_layout_t lay = {.fsdp = t->mesh.size[PX_MESH_FSDP], .fsdp_rank = c.c[PX_MESH_FSDP],
                             .tp = {t->mesh.size[PX_MESH_TP], c.c[PX_MESH_TP]}, .keep_params = t->cfg->fsdp_keep_params};
    if (t->mesh.size[PX_MESH_PP] > 1) lay.stage = px_gpt_pipeline_stage(mc, t->T, t->mesh.size[PX_MESH_PP], c.c[PX_MESH_PP]);
    return lay;
}

/* Checkpoints of the group's shards: every rank's layout for the manifest. */
static int set_shard_persist(trainer_t *t) {
    int W = t->cfg->ranks_per_group;
    px_shard_layout_t *lays = malloc(sizeof *lays * (size_t)W);
    for (int r = 0; lays && r < W; r++) lays[r] = layout_of(t, &t->model->config, r);
    int rc = lays ? px_persist_set_shard(&t->persist, t->shard, lays, W, t->mesh.size[PX_MESH_PP], t->st.nbuf) : -1;
    free(lays);
    return rc;
}

/* A sharded layout (cfg->fsdp/tp): checks it against the group and the
 * model, and makes this rank's shard of the initial model: from a preset
 * drawn shard by shard (t->model NULL), or cut from a loaded model file
 * (t->model, freed then). t->model becomes the shard's model. Prints what
 * the shard saves. 0 when not sharded or done; -1 (logged). */
static int setup_shard(trainer_t *t, const px_gpt_config_t *mc) {
    const px_trainer_config_t *cfg = t->cfg;
    char err[512];
    t->pending_step = -1;
    if (!layout_given(cfg)) return 0;
    t->mesh = (px_mesh_t){{cfg->pp ? cfg->pp : 1, cfg->fsdp ? cfg->fsdp : 1, cfg->tp ? cfg->tp : 1}};
    if (px_mesh_check(&t->mesh, cfg->ranks_per_group, err, sizeof err) != 0) {
        px_log_error("layout: %s", err);
        return -1;
    }
    int P = t->mesh.size[PX_MESH_PP];
    if (P > mc->num_layers) {
        px_log_error("--pp %d: the model has %d layers, and every pipeline stage needs at least one", P,
                     mc->num_layers);
        return -1;
    }
    if (cfg->ranks_per_group == 1) return t->model ? 0 : -1; /* 1x1x1: a whole replica (see setup) */
    t->coord = px_mesh_coord(&t->mesh, cfg->rank);
    px_shard_layout_t lay = layout_of(t, mc, cfg->rank);
    t->shard = px_shard_new(mc, &lay, err, sizeof err);
    if (!t->shard) {
        px_log_error("layout: %s", err);
        return -1;
    }
    if (t->model) {
        px_shard_load(t->shard, t->model);
    } else if (px_shard_init(t->shard, cfg->seed) != 0) {
        px_log_error("out of memory drawing the initial shard");
        return -1;
    }
    size_t sizes[PX_GPT_NUM_TENSORS];
    size_t replica = 4 * px_gpt_tensor_sizes(mc, sizes) * sizeof(float);
    size_t state = px_shard_state_bytes(t->shard), work = px_shard_work_bytes(t->shard);
    char name[64];
    px_mesh_format(&t->mesh, name, sizeof name);
    px_log_info("shard_memory layout=%s rank=%d state_mb=%.2f replica_mb=%.2f ratio=%.3f work_mb=%.2f", name, cfg->rank,
                state / 1e6, replica / 1e6, (double)state / (double)replica, work / 1e6);
    if (cfg->rank == 0) {
        printf("shard_memory layout=%s state_mb=%.2f replica_mb=%.2f ratio=%.3f work_mb=%.2f\n", name, state / 1e6,
               replica / 1e6, (double)state / (double)replica, work / 1e6);
        fflush(stdout);
    }
    px_gpt_destroy(&t->model);
    t->model = px_shard_model(t->shard);
    return 0;
}

/* A pipelined rank's stage runtime, on the compute's model (after
 * px_compute_new: on a GPU the stage model is the CUDA one). 0, or -1. */
static int make_pipe(trainer_t *t) {
    const px_trainer_config_t *cfg = t->cfg;
    int P = t->mesh.size[PX_MESH_PP];
    if (!t->shard || P < 2) return 0;
    char err[256];
    int M = cfg->microbatches ? cfg->microbatches : P;
    px_gpt_stage_t st = layout_of(t, &t->model->config, cfg->rank).stage; /* the shard's own */
    px_pipe_model_t model = px_compute_pipe_model(t->dev);
    t->pipe = px_pipe_new(&model, &st, t->coord.c[PX_MESH_PP], P, (px_sched_kind_t)cfg->schedule, M, t->T, err,
                          sizeof err);
    if (!t->pipe) {
        px_log_error("layout: %s", err);
        return -1;
    }
    px_log_info("pipeline_stage rank=%d stage=%d of=%d layers=%d..%d schedule=%s", cfg->rank, t->coord.c[PX_MESH_PP], P,
                st.first_layer, st.first_layer + st.num_layers - 1,
                px_sched_name((px_sched_kind_t)cfg->schedule));
    return 0;
}

/* Restore sink of a sharded rank: each checkpoint slice read goes straight
 * into the shard (px_shard_place). */
static int place_slice(void *ctx, const px_ckpt_logical_t *l, const px_ckpt_slice_t *s, const float *values) {
    trainer_t *t = ctx;
    if (l->buffer < 0 || l->buffer >= t->st.nbuf) return 0;
    return px_shard_place(t->shard, t->st.buf[l->buffer], l->offset, l->ndim, l->shape, s->start, s->count, values);
}

/* A sharded rank restores the newest checkpoint, written in any layout,
 * slice by slice into its shard: every file is read and verified, but only
 * the rectangles the rank holds are kept (no whole-state copy). */
static px_restore_result_t restore_shard(trainer_t *t) {
    size_t sizes[PX_GPT_NUM_TENSORS];
    px_train_state_t whole = {.n = px_gpt_tensor_sizes(&t->model->config, sizes), .seed = t->cfg->seed,
                              .nbuf = t->st.nbuf};
    px_ckpt_sink_t sink = {place_slice, t};
    px_restore_result_t rc = px_persist_restore(&t->persist, &whole, &sink);
    if (rc == PX_RESTORE_LOADED) t->st.step = whole.step;
    return rc; /* REBUILD: a checkpoint failed half read, the shard holds part of it: the caller rebuilds it */
}

static int setup(trainer_t *t) {
    const px_trainer_config_t *cfg = t->cfg;
    char err[512];
    if (cfg->threads > 0) omp_set_num_threads(cfg->threads);
    if (cfg->sample_every > 0 && cfg->rank == 0) t->sample_tok = px_sample_line_tokenizer(cfg->data);
    /* A sharded group with a preset never holds the whole model: each rank
     * draws its own shard (setup_shard). */
    px_gpt_config_t mc;
    int draw = layout_given(cfg) && cfg->ranks_per_group > 1 && drawn_model(cfg, &mc);
    if (!draw) {
        if (!(t->model = initial_model(cfg))) return -1;
        mc = t->model->config;
    }
    t->T = cfg->seq_len > 0 ? cfg->seq_len : mc.max_seq_len;
    if (t->T > mc.max_seq_len) {
        px_log_error("--seq %d exceeds the model's context %d", t->T, mc.max_seq_len);
        return -1;
    }
    if (setup_shard(t, &mc) != 0) return -1;
    if (cfg->recompute) { /* on the model compute.c runs too */
        if (px_gpt_set_recompute(t->model, 1) != 0) return -1;
        px_log_info("activation_recompute mode=block rank=%d", cfg->rank);
    }
    if (!t->shard && cfg->bucket_mb > 0 &&
        !(t->reducer = px_reducer_new(t->model, (size_t)(cfg->bucket_mb * (1 << 20)) / sizeof(float)))) {
        px_log_error("out of memory for the gradient buckets (--bucket-mb %g)", cfg->bucket_mb);
        return -1;
    }
    t->train = px_dataset_open(cfg->data, "train", t->model->config.vocab_size, (size_t)t->T + 1, err, sizeof err);
    if (!t->train) {
        px_log_error("--data: %s", err);
        return -1;
    }
    t->val = px_dataset_open(cfg->data, "val", t->model->config.vocab_size, (size_t)t->T + 1, err, sizeof err);
    if (!t->val) px_log_warn("no validation data, eval loss disabled: %s", err);
    /* a pipeline's micro-batch is a 1/M of the rank's share: at most the global batch */
    int pipelined = t->shard && t->mesh.size[PX_MESH_PP] > 1;
    size_t mb = (size_t)(pipelined && cfg->global_batch > cfg->micro_batch ? cfg->global_batch : cfg->micro_batch) *
                (size_t)t->T;
    t->inputs = malloc(mb * sizeof(int));
    t->targets = malloc(mb * sizeof(int));
    if (t->shard) {
        px_shard_bufs_t *b = px_shard_bufs(t->shard);
        t->st = (px_train_state_t){.buf = {b->params, b->m, b->v}, .n = b->n, .step = 0, .seed = cfg->seed,
                                   .nbuf = PX_STATE_NBUF};
    } else {
        t->st = px_state_of_model(t->model, 0, cfg->seed);
    }
    if (cfg->mode != PX_MODE_SYNC) { /* the global parameters and the outer momentum (auto: for its DiLoCo phases) */
        size_t n = t->st.n;
        t->global = malloc(n * sizeof(float));
        t->outer_m = calloc(n, sizeof(float));
        if (!t->global || !t->outer_m) {
            px_log_error("out of memory for DiLoCo's global parameters and outer momentum (%zu floats each)", n);
            return -1;
        }
        if (cfg->outer_overlap && !(t->pend.buf = malloc(n * sizeof(float)))) {
            px_log_error("out of memory for --outer-overlap's pseudo-gradients in flight (%zu floats)", n);
            return -1;
        }
        memcpy(t->global, t->st.buf[PX_STATE_PARAMS], n * sizeof(float));
        t->st.buf[PX_STATE_OUTER_M] = t->outer_m;
        t->st.nbuf = PX_STATE_OUTER_M + 1;
        /* auto, and diloco with --sync-warmup, start in sync (the loop enters DiLoCo when it should) */
        px_diloco_set_state_mode(t, cfg->mode == PX_MODE_DILOCO && cfg->sync_warmup == 0);
        if (cfg->fragments > t->model->config.num_layers) {
            px_log_error("--fragments %d: the model has %d layers, and every fragment holds at least one",
                         cfg->fragments, t->model->config.num_layers);
            return -1;
        }
        if (px_diloco_build_fragments(t) != 0) {
            px_log_error("out of memory for the fragments' runs");
            return -1;
        }
    }
    if (!t->inputs || !t->targets || px_heal_init(&t->heal, &t->st, t->agent, cfg->group, cfg->rank) != 0) {
        px_log_error("out of memory");
        return -1;
    }
    t->heal.reinit = rebuild_initial_state;
    t->heal.reinit_ctx = t;
    if (px_persist_init(&t->persist, cfg, t->agent, &t->model->config) != 0) return -1;
    if (t->shard && set_shard_persist(t) != 0) {
        px_log_error("out of memory for the checkpoint layout");
        return -1;
    }
    px_restore_result_t rc = t->shard ? restore_shard(t) : px_persist_restore(&t->persist, &t->st, NULL);
    if (rc == PX_RESTORE_REFUSED) return -1;
    if (rc == PX_RESTORE_REBUILD && rebuild_initial_state(t, &t->st) != 0) return -1; /* partial data was loaded */
    if (rc == PX_RESTORE_LOADED) px_agent_set_progress(t->agent, t->st.step, PHALANX__MEMBER_STATE__JOINING, 0);
    if (diloco(t)) px_diloco_start_round(t); /* the local parameters from the (restored) global ones */
    /* on a GPU this uploads the state restored or built above */
    px_compute_set_math(cfg->precision, cfg->tf32, cfg->unfused_attention);
    if (!(t->dev = px_compute_new(cfg->device, t->model, t->shard, cfg->rank, err, sizeof err))) {
        px_log_error("--device %s: %s", cfg->device == PX_DEVICE_CUDA ? "cuda" : "cpu", err);
        return -1;
    }
    if (make_pipe(t) != 0) return -1;
    /* a GPU's host copy: downloaded for a save while the next step computes; the saver waits for it */
    if (!px_compute_state_on_host(t->dev)) px_persist_set_source_wait(&t->persist, wait_host, t);
    if (cfg->ledger) {
        t->ledger = fopen(cfg->ledger, "a");
        if (!t->ledger) {
            px_log_error("--sample-ledger: cannot open '%s'", cfg->ledger);
            return -1;
        }
    }
    return 0;
}

static void teardown(trainer_t *t) {
    px_agent_set_quorum_hook(t->agent, NULL, NULL); /* waits for a running call: t is about to go */
    px_diloco_abandon(t);
    px_follow_drop_comms(t);
    px_reducer_destroy(&t->reducer);
    px_persist_free(&t->persist); /* a save in flight may still read the state */
    px_pipe_destroy(&t->pipe); /* its receive buffer is the compute's memory */
    px_compute_destroy(&t->dev);
    if (t->shard) t->model = NULL; /* the shard's */
    px_shard_destroy(&t->shard);
    px_gpt_destroy(&t->model);
    px_tok_free(&t->sample_tok);
    px_dataset_destroy(&t->train);
    px_dataset_destroy(&t->val);
    free(t->inputs);
    free(t->targets);
    free(t->global);
    free(t->outer_m);
    free(t->outer_scratch);
    free(t->pend.buf);
    free(t->runs);
    px_heal_free(&t->heal);
    px_quorum_free(&t->q);
    if (t->ledger) fclose(t->ledger);
    pthread_mutex_destroy(&t->comm_mu);
}

/* A stage per layer at most: known before start for a preset (a model file
 * is checked once loaded, setup_shard). */
static int check_stages(const px_trainer_config_t *cfg, char *err, size_t errlen) {
    px_gpt_config_t mc;
    if (cfg->pp <= 1 || !drawn_model(cfg, &mc) || cfg->pp <= mc.num_layers) return 0;
    snprintf(err, errlen, "--pp %d: the model has %d layers, and every pipeline stage needs at least one", cfg->pp,
             mc.num_layers);
    return -1;
}

/* --fragments: DiLoCo only, a whole number of inner steps per fragment,
 * at most one fragment per layer (known before start for a preset; a model
 * file's layers are checked once loaded, setup). */
static int check_fragments(const px_trainer_config_t *cfg, char *err, size_t errlen) {
    px_gpt_config_t mc;
    if (cfg->fragments == 1) return 0;
    if (cfg->fragments < 1 || cfg->fragments > PX_MAX_FRAGMENTS) {
        snprintf(err, errlen, "--fragments %d: 1..%d", cfg->fragments, PX_MAX_FRAGMENTS);
        return -1;
    }
    if (cfg->mode == PX_MODE_SYNC)
        snprintf(err, errlen, "--fragments %d: Streaming DiLoCo needs --mode diloco or auto", cfg->fragments);
    else if (cfg->inner_steps % cfg->fragments != 0)
        snprintf(err, errlen, "--fragments %d: --inner-steps %d is not a multiple of it (every fragment is synced "
                 "every H steps, one every H/F)", cfg->fragments, cfg->inner_steps);
    else if (drawn_model(cfg, &mc) && cfg->fragments > mc.num_layers)
        snprintf(err, errlen, "--fragments %d: the model has %d layers, and every fragment holds at least one",
                 cfg->fragments, mc.num_layers);
    else
        return 0;
    return -1;
}

int px_trainer_check(const px_trainer_config_t *cfg, char *err, size_t errlen) {
    px_gpt_config_t mc;
    char bad[600];
    if (px_model_resolve(cfg->model, cfg->data, &mc, bad, sizeof bad) == PX_MODEL_BAD) {
        snprintf(err, errlen, "--model: %s", bad);
        return -1;
    }
    if (check_stages(cfg, err, errlen) != 0) return -1;
    if (check_fragments(cfg, err, errlen) != 0) return -1;
    if (cfg->sample_every > 0 && layout_given(cfg)) {
        snprintf(err, errlen, "--sample-every needs the whole model on a rank: not with --fsdp, --tp or --pp");
        return -1;
    }
    if (cfg->outer_overlap && cfg->mode == PX_MODE_SYNC) {
        snprintf(err, errlen, "--outer-overlap: overlapped outer steps need --mode diloco or auto");
        return -1;
    }
    if (cfg->sync_warmup > 0 && cfg->mode != PX_MODE_DILOCO) {
        snprintf(err, errlen, "--sync-warmup %lld needs --mode diloco (the mode it switches to)",
                 (long long)cfg->sync_warmup);
        return -1;
    }
    if (cfg->mode != PX_MODE_SYNC && cfg->bucket_mb > 0) {
        snprintf(err, errlen, "--mode %s with --bucket-mb: DiLoCo's inner steps reduce inside the group only; use "
                              "--bucket-mb 0", cfg->mode == PX_MODE_AUTO ? "auto" : "diloco");
        return -1;
    }
    if (cfg->device != PX_DEVICE_CUDA) return 0;
    if (cfg->bucket_mb > 0) {
        snprintf(err, errlen, "--device cuda with --bucket-mb %g: the bucketed reduction is CPU-only; use "
                              "--bucket-mb 0 on GPUs", cfg->bucket_mb);
        return -1;
    }
    char why[512] = "";
    if (!px_compute_usable(cfg->device, why, sizeof why)) {
        snprintf(err, errlen, "--device cuda: %s", why);
        return -1;
    }
    return 0;
}

/* ---- the loop ------------------------------------------------------------ */

/* The loop's own state between iterations. */
typedef struct {
    int need;          /* join a quorum before the next step */
    int failed;        /* ... after a failure: ask for a new one (our communicators are broken) */
    int inner_failed;  /* a DiLoCo inner step failed: the group's ranks may be a step apart */
    float loss, norm;  /* of the last step (or round) done */
    float ev;          /* the last eval loss (NAN: none) */
    px_train_result_t rc;
} loop_t;

/* What an iteration of the loop does next. */
typedef enum { ITER_TRAIN, ITER_AGAIN, ITER_END } iter_t;

/* Rank 0's "event kind=..." lines and the ledger: the loop's alone. */
static void print_mode_changed(const trainer_t *t) {
    if (t->cfg->rank != 0) return;
    printf("event kind=mode_changed group=%s mode=%s step=%lld\n", t->cfg->group, diloco(t) ? "diloco" : "sync",
           (long long)t->st.step);
    fflush(stdout);
}

static void print_step_failed(const trainer_t *t, px_comm_status_t st) {
    if (t->cfg->rank != 0) return;
    printf("event kind=step_failed group=%s step=%lld status=%s\n", t->cfg->group, (long long)t->st.step,
           px_comm_status_str(st));
    fflush(stdout);
}

/* The outer steps diloco.c applied since the last call. */
static void print_outer_done(trainer_t *t) {
    for (int i = 0; i < t->ndone; i++) {
        const outer_done_t *d = &t->done[i];
        px_progress_outer(t->cfg->progress_format, t->cfg->group, d->to, d->outer, d->weight, d->groups, d->loss,
                          (unsigned long long)d->wire, d->fragment);
    }
    t->ndone = 0;
}

/* --sample-ledger: which samples the group took at the step just committed. */
static void write_ledger(trainer_t *t) {
    const px_trainer_config_t *cfg = t->cfg;
    if (!t->ledger || cfg->rank != 0) return;
    int64_t step = t->st.step - 1;
    fprintf(t->ledger, "step=%lld quorum=%lld group=%s replica=%d of=%d lo=%d hi=%d groups=", (long long)step,
            (long long)t->qid, cfg->group, t->my_index, t->q.n, (int)((int64_t)t->my_index * cfg->global_batch / t->q.n),
            (int)((int64_t)(t->my_index + 1) * cfg->global_batch / t->q.n));
    for (int i = 0; i < t->q.n; i++) fprintf(t->ledger, "%s%s", i ? "," : "", t->q.groups[i].name);
    fprintf(t->ledger, "\n");
    fflush(t->ledger);
}

static void enter_diloco(trainer_t *t) {
    px_diloco_enter(t);
    print_mode_changed(t);
}

static int leave_diloco(trainer_t *t) {
    if (px_diloco_leave(t) != 0) return -1;
    print_mode_changed(t);
    return 0;
}

/* A step's (or an outer step's) collectives failed: a pending round is
 * dropped, a part save waiting for a lost rank gives up, and the
 * communicators go; the loop joins a new quorum next. */
static void step_failed(trainer_t *t, loop_t *L) {
    px_diloco_abandon(t);
    px_persist_group_failed(&t->persist);
    t->failures++;
    px_follow_drop_comms(t);
    L->need = L->failed = 1;
}

/* Joins the next quorum, then brings a DiLoCo round in line with the
 * other groups'. */
static iter_t join_next(trainer_t *t, loop_t *L) {
    const px_trainer_config_t *cfg = t->cfg;
    if (px_follow_drained(t)) {
        L->rc = PX_TRAIN_DRAINED;
        return ITER_END;
    }
    int64_t step0 = t->st.step;
    uint64_t ck0 = 0;
    if (diloco(t)) { /* the round goes on unless the state changes while joining (a heal) */
        local_read(t);
        ck0 = px_heal_checksum(&t->heal);
    }
    px_diloco_abandon(t);
    if (px_follow_reconfigure(t, L->failed) != 0) {
        L->rc = *t->stop                               ? PX_TRAIN_STOPPED
                : px_follow_job_finished_elsewhere(t) ? PX_TRAIN_FINISHED_ELSEWHERE
                : px_follow_drained(t)                ? PX_TRAIN_DRAINED
                                                      : PX_TRAIN_FAILED;
        return ITER_END;
    }
    L->need = L->failed = 0;
    if (px_diloco_follow_healed_mode(t)) print_mode_changed(t);
    if (!diloco(t) && px_diloco_wanted(t)) enter_diloco(t);
    if (diloco(t)) {
        if (L->inner_failed || t->st.step != step0 || px_heal_checksum(&t->heal) != ck0) px_diloco_start_round(t);
        L->inner_failed = 0;
        int k = px_diloco_align_round(t);
        /* the quorum's communicator failed: join again; every group at the round's start: sync now */
        if (k < 0 || (k == 0 && cfg->fragments == 1 && px_diloco_leaving(t) && leave_diloco(t) != 0)) {
            step_failed(t, L);
            return ITER_AGAIN;
        }
    }
    if (t->st.step >= cfg->steps) return ITER_END;
    if (px_follow_job_finished_elsewhere(t)) { /* learned while joining (a late start): train nothing */
        L->rc = PX_TRAIN_FINISHED_ELSEWHERE;
        return ITER_END;
    }
    return ITER_TRAIN;
}

/* A sharded group evaluates together (its forward is collective). */
static int evaluates(const trainer_t *t) { return t->my_index == 0 && (t->cfg->rank == 0 || t->shard); }

/* --sample-every: replica 0's rank 0 prints the model's text when the step
 * passed a multiple of N since `from` (the model is whole there: a layout
 * is refused with the flag, px_trainer_check). */
static void maybe_sample(trainer_t *t, int64_t from) {
    const px_trainer_config_t *cfg = t->cfg;
    int every = cfg->sample_every;
    if (every <= 0 || t->st.step / every == from / every || t->my_index != 0 || cfg->rank != 0 || !t->model) return;
    px_compute_host_state_begin(t->dev); /* a GPU's state into the host model; nothing on the CPU */
    px_compute_host_wait(t->dev);
    px_sample_line(t->model, t->sample_tok, cfg->sample_tokens, cfg->seed, t->st.step);
}

/* A DiLoCo round's next step: an inner step, or the outer step at its end. */
static void diloco_iteration(trainer_t *t, loop_t *L, int64_t t0) {
    const px_trainer_config_t *cfg = t->cfg;
    int64_t known = px_agent_known_quorum_id(t->agent);
    if (t->inner < px_diloco_round_len(t) && known > t->qid && !px_follow_drain_only_newer(t, known)) {
        L->need = 1; /* a newer quorum: joined at once, the round's progress kept (no group waits for us) */
        return;
    }
    int adopt = 0, outer = t->inner >= px_diloco_round_len(t);
    int64_t from = t->st.step;
    int ok = outer ? px_diloco_outer_step(t, &adopt, &L->loss) : px_diloco_inner_step(t, &L->loss, &L->norm);
    print_outer_done(t);
    if (!ok) {
        step_failed(t, L);
        L->inner_failed = !outer; /* the group's ranks may be an inner step apart: the round starts again */
        return;
    }
    if (!outer) {
        t->round_inner_us += px_now_us() - t0;
        if (!cfg->progress || cfg->rank != 0) return;
        double ms = (double)(px_now_us() - t0) / 1000.0;
        int B = px_step_batch_of(t);
        px_agent_set_train_stats(t->agent, t->st.step, L->loss, (double)B * t->T * t->q.n, ms / 1000.0, 1);
        px_progress_step(cfg->progress_format, &(px_progress_step_t){
            .step = cur_step(t), .loss = L->loss, .norm = L->norm, .ms = ms,
            .tok_s = ms > 0 ? (double)B * t->T * 1000.0 / ms : 0, .groups = t->q.n, .quorum = t->qid,
            .group = cfg->group, .mode = "diloco", .show_mode = 1, .inner = t->inner,
            .round = px_diloco_round_len(t)});
        return;
    }
    int moved = t->st.step != from; /* 0: nobody had a round to give */
    if (moved) {
        px_agent_set_progress(t->agent, t->st.step, PHALANX__MEMBER_STATE__HEALTHY, t->qid);
        px_agent_set_train_stats(t->agent, t->st.step, L->loss, 0, 0, 1); /* the round's loss */
        if (cfg->eval_every > 0 && t->st.step / cfg->eval_every > from / cfg->eval_every && evaluates(t)) {
            L->ev = px_step_eval_loss(t);
            px_agent_set_eval_loss(t->agent, t->st.step, L->ev);
            if (cfg->rank == 0) px_progress_eval(cfg->progress_format, t->st.step, L->ev, cfg->group);
        }
        maybe_sample(t, from);
        if (!t->pend.active) checkpoint_commit(t); /* never missing a committed round's outer step */
    }
    /* every group's local parameters are the global ones now: where auto goes back to sync */
    if (px_diloco_leaving(t) && leave_diloco(t) != 0) {
        step_failed(t, L);
        return;
    }
    if (moved && adopt) L->need = 1;
}

/* One synchronous step, and what the loop reports of it. */
static void sync_iteration(trainer_t *t, loop_t *L, int64_t t0) {
    const px_trainer_config_t *cfg = t->cfg;
    px_step_out_t out = {.loss = L->loss, .norm = L->norm};
    px_step_result_t r = px_step_sync(t, &out);
    if (r != PX_STEP_COMMITTED) {
        if (r == PX_STEP_COMM_FAILED) print_step_failed(t, out.status);
        step_failed(t, L);
        return;
    }
    L->loss = out.loss;
    L->norm = out.norm;
    write_ledger(t);
    px_agent_set_progress(t->agent, t->st.step, PHALANX__MEMBER_STATE__HEALTHY, t->qid);
    double ms = (double)(px_now_us() - t0) / 1000.0;
    px_step_note_comm_share(t, (double)t->step_cross_us, ms * 1000.0);
    int eval_now = cfg->eval_every > 0 && t->st.step % cfg->eval_every == 0 && t->my_index == 0;
    if (eval_now && evaluates(t)) {
        L->ev = px_step_eval_loss(t);
        px_agent_set_eval_loss(t->agent, t->st.step, L->ev);
    }
    px_agent_set_train_stats(t->agent, t->st.step, L->loss, (double)cfg->global_batch * t->T, ms / 1000.0, 0);
    if (cfg->progress && cfg->rank == 0) {
        px_progress_step(cfg->progress_format, &(px_progress_step_t){
            .step = t->st.step, .loss = L->loss, .norm = L->norm, .ms = ms,
            .tok_s = ms > 0 ? (double)cfg->global_batch * t->T * 1000.0 / ms : 0, .groups = t->q.n,
            .quorum = t->qid, .group = cfg->group, .mode = "sync", .show_mode = cfg->mode == PX_MODE_AUTO,
            .eval_loss = L->ev, .has_eval = eval_now});
    }
    maybe_sample(t, t->st.step - 1);
    checkpoint_commit(t);
    if (out.adopt) L->need = 1; /* everyone saw the flag: all switch now */
}

/* The job's end on this rank: the final save, the group's statistics and
 * the "final" line, --save, and what the communication cost. */
static void finish(trainer_t *t, loop_t *L) {
    const px_trainer_config_t *cfg = t->cfg;
    float ev = px_step_eval_loss(t);
    uint64_t ck = 0;
    double pn = 0;
    if (final_stats(t, &ck, &pn) != 0) px_log_warn("final statistics: the group's collectives failed");
    if (cfg->rank == 0) {
        printf("final group=%s steps=%lld loss=%.6f eval_loss=%.6f checksum=%016" PRIx64
               " param_norm=%.9g failures=%d heals=%d\n",
               cfg->group, (long long)t->st.step, L->loss, ev, ck, sqrt(pn), t->failures, t->heal.heals);
        fflush(stdout);
        px_agent_notify(t->agent, "run_finished", t->qid, t->st.step, "", 0, 0, "");
    }
    if (cfg->save) save_model(t);
    if (t->pipe) { /* the stage's idle share: the pipeline's bubble (and its waits on the links), measured */
        double busy, total;
        px_pipe_times(t->pipe, &busy, &total);
        px_log_info("pipeline_time rank=%d stage=%d busy_s=%.6f total_s=%.6f idle=%.4f microbatches=%d schedule=%s "
                    "activation_mb=%.3f recompute=%d", cfg->rank, t->coord.c[PX_MESH_PP], busy, total,
                    total > 0 ? 1.0 - busy / total : 0.0, px_pipe_microbatches(t->pipe),
                    px_sched_name((px_sched_kind_t)cfg->schedule), px_gpt_activation_bytes(t->model) / 1e6,
                    cfg->recompute);
    }
    double bf = 0, bt = 0;
    if (t->shard) px_shard_bytes_sent(t->shard, &bf, &bt);
    px_log_info("comm_sent group=%s rank=%d steps=%lld fsdp_bytes=%.0f tp_bytes=%.0f group_bytes=%.0f "
                "cross_bytes=%.0f buckets=%llu outer_steps=%lld outer_wire_bytes=%.0f", cfg->group, cfg->rank,
                (long long)t->st.step, bf, bt, t->bytes_group, t->bytes_cross,
                t->reducer ? (unsigned long long)px_reducer_buckets(t->reducer) : 0ull, (long long)t->outer_steps,
                t->outer_wire);
}

px_train_result_t px_trainer_run(px_agent_t *agent, const px_trainer_config_t *cfg, volatile sig_atomic_t *stop) {
    trainer_t t;
    memset(&t, 0, sizeof t);
    t.cfg = cfg;
    t.agent = agent;
    t.stop = stop;
    t.my_index = -1;
    px_quorum_init(&t.q);
    pthread_mutex_init(&t.comm_mu, NULL);
    char err[640];
    if (px_trainer_check(cfg, err, sizeof err) != 0) {
        px_log_error("%s", err);
        teardown(&t);
        return PX_TRAIN_CONFIG_ERROR;
    }
    if (setup(&t) != 0) { /* the coordinator never heard of us: the agent starts below */
        teardown(&t);
        return PX_TRAIN_CONFIG_ERROR;
    }
    px_agent_set_quorum_hook(agent, px_follow_on_quorum_news, &t);
    if (px_agent_start(agent, err, sizeof err) != 0) {
        px_log_error("%s", err);
        teardown(&t);
        return PX_TRAIN_CONFIG_ERROR;
    }
    px_log_info("trainer_started group=%s rank=%d model=%s params=%zu steps=%lld global_batch=%d micro_batch=%d T=%d "
                "device=%s", cfg->group, cfg->rank, cfg->model, t.model->num_params, (long long)cfg->steps,
                cfg->global_batch, cfg->micro_batch, t.T, px_compute_name(t.dev));
    loop_t L = {.need = 1, .loss = NAN, .norm = 0, .ev = NAN, .rc = PX_TRAIN_DONE};
    while (t.st.step < cfg->steps && !*stop) {
        if (px_follow_job_finished_elsewhere(&t)) {
            L.rc = PX_TRAIN_FINISHED_ELSEWHERE;
            break;
        }
        if (L.need) {
            iter_t next = join_next(&t, &L);
            if (next == ITER_END) break;
            if (next == ITER_AGAIN) continue;
        }
        int64_t t0 = px_now_us();
        if (cfg->mode == PX_MODE_DILOCO && !diloco(&t) && px_diloco_wanted(&t)) enter_diloco(&t); /* --sync-warmup done */
        if (diloco(&t))
            diloco_iteration(&t, &L, t0);
        else
            sync_iteration(&t, &L, t0);
    }
    host_state(&t); /* the final save, statistics and --save read it */
    pthread_mutex_lock(&t.comm_mu);
    t.finishing = 1; /* the other groups may leave now: what follows involves our group only */
    pthread_mutex_unlock(&t.comm_mu);
    int stopped = *stop && L.rc != PX_TRAIN_FINISHED_ELSEWHERE;
    if (t.st.step >= cfg->steps || stopped) px_persist_final(&t.persist, &t.st, &t.q);
    if (t.st.step >= cfg->steps) {
        finish(&t, &L);
        L.rc = PX_TRAIN_DONE;
    } else if (stopped) {
        L.rc = PX_TRAIN_STOPPED;
    }
    teardown(&t);
    return L.rc;
}
