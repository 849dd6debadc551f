/* The trainer's checkpoints: restore at start, saves by the quorum's writer
 * (see persist.h). */
#include "persist.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "px_err.h"
#include "px_log.h"
#include "px_time.h"
#include "px_wire.h"
#include "vote.h"

static int expand_dir(const char *pattern, const char *group, char *out, size_t len) {
    size_t n = 0;
    for (const char *s = pattern; *s; s++) {
        const char *piece = s[0] == '%' && s[1] == 'g' ? group : NULL;
        size_t add = piece ? strlen(piece) : 1;
        if (n + add >= len) return -1;
        if (piece) {
            memcpy(out + n, piece, add);
            s++;
        } else {
            out[n] = *s;
        }
        n += add;
    }
    out[n] = 0;
    return 0;
}

int px_persist_init(px_persist_t *p, const px_trainer_config_t *cfg, px_agent_t *agent, const px_gpt_config_t *model) {
    memset(p, 0, sizeof *p);
    p->cfg = cfg;
    p->agent = agent;
    p->model = *model;
    p->submitted = -1;
    p->last_commit = -1;
    p->deferred = -1;
    p->time_mark_us = px_now_us();
    if (!cfg->checkpoint_dir || !cfg->checkpoint_dir[0]) return 0;
    if (expand_dir(cfg->checkpoint_dir, cfg->group, p->dir, sizeof p->dir) != 0) {
        px_log_error("--checkpoint-dir: '%s' is too long", cfg->checkpoint_dir);
        return -1;
    }
    /* The data's tokenizer beside the checkpoints: tools that read them
     * turn the model's ids into text with it. */
    char err[PX_ERRLEN];
    if (px_ckpt_keep_tokenizer(p->dir, cfg->data, err, sizeof err) < 0) {
        px_log_error("--checkpoint-dir: keeping the data's tokenizer: %s", err);
        return -1;
    }
    return 0;
}

/* A detail of at most PX_REASON_MAX bytes: the tail of a long path is what
 * tells checkpoints apart. */
static const char *fit(const char *s) {
    size_t n = strlen(s);
    return n > PX_REASON_MAX ? s + (n - PX_REASON_MAX) : s;
}

/* A damaged checkpoint is moved aside (px_ckpt_move_aside) by the group's
 * rank 0, so that no save of its step and no retention touches it. */
static void move_aside(px_persist_t *p, const char *path) {
    char moved[4400];
    if (px_ckpt_move_aside(path, "corrupt", 1, moved, sizeof moved) != 0) {
        /* ENOENT: another group sharing the folder moved it first; EBUSY: one is reading it and moves it after */
        if (errno != ENOENT && errno != EBUSY)
            px_log_warn("checkpoint_move_aside_failed path=%s: %s; it stays where it is", path, strerror(errno));
        return;
    }
    px_log_warn("checkpoint_moved_aside path=%s moved_to=%s: kept for inspection, never deleted", path, moved);
    char detail[PX_REASON_MAX + 1];
    px_wire_ckpt_rejected_join(detail, sizeof detail, path, strrchr(moved, '/') + 1, "");
    px_agent_notify(p->agent, "checkpoint_moved_aside", 0, 0, "", 0, 0, detail);
    printf("event kind=checkpoint_moved_aside group=%s path=%s moved_to=%s\n", p->cfg->group, path, moved);
    fflush(stdout);
}

static void on_reject(void *ctx, const char *path, const px_ckpt_fault_t *f) {
    px_persist_t *p = ctx;
    p->rejected++;
    px_log_warn("checkpoint_rejected path=%s file=%s fault=\"%s\": trying the previous one", path, f->file, f->fault);
    if (p->cfg->rank != 0) return;
    char detail[PX_REASON_MAX + 1];
    px_wire_ckpt_rejected_join(detail, sizeof detail, path, strrchr(f->file, '/') ? strrchr(f->file, '/') + 1 : f->file,
                               f->fault);
    px_agent_notify(p->agent, "checkpoint_rejected", 0, 0, "", 0, 0, detail);
    printf("event kind=checkpoint_rejected group=%s path=%s file=%s fault=\"%s\"\n", p->cfg->group, path, f->file,
           f->fault);
    fflush(stdout);
    if (f->kind == PX_CKPT_DAMAGED) move_aside(p, path);
}

/* The schedule-shaping flags as checkpoints record them (--seq 0: the
 * model's context, what the trainer uses). */
static px_ckpt_schedule_t schedule_of(const px_persist_t *p) {
    const px_trainer_config_t *cfg = p->cfg;
    return (px_ckpt_schedule_t){.steps = cfg->steps, .warmup = cfg->warmup, .global_batch = cfg->global_batch,
                                .seq_len = cfg->seq_len > 0 ? cfg->seq_len : p->model.max_seq_len, .lr = cfg->lr,
                                .min_lr = cfg->min_lr};
}

px_restore_result_t px_persist_restore(px_persist_t *p, px_train_state_t *st, const px_ckpt_sink_t *sink) {
    if (!p->dir[0]) return PX_RESTORE_NONE;
    int64_t t0 = px_now_ms();
    px_ckpt_manifest_t m;
    int64_t r = px_ckpt_restore_newest_to(p->dir, &p->model, p->cfg->job, p->cfg->seed, st, sink, &m, on_reject, p);
    int aside = r == -1 && p->rejected == 0 ? px_ckpt_count_aside(p->dir, "corrupt") : 0;
    if (r == -1 && p->rejected == 0 && aside == 0) {
        px_log_info("checkpoint_none dir=%s: starting from the initial state", p->dir);
        return PX_RESTORE_NONE;
    }
    if (r == -2) {
        px_log_error("--checkpoint-dir %s holds only checkpoints of another job, seed or model (see the rejections "
                     "above); starting from scratch would overwrite them: use another folder, or move them away",
                     p->dir);
        return PX_RESTORE_REFUSED;
    }
    if (r < 0 && !p->cfg->allow_fresh_start) {
        if (aside)
            px_log_error("--checkpoint-dir %s holds no checkpoint that verifies, only %d moved aside as damaged "
                         "(step_N.corrupt-TIME); refusing to start from the initial state, which would train the job "
                         "again: restore a good copy as step_N, or give --allow-fresh-start", p->dir, aside);
        else
            px_log_error("--checkpoint-dir %s: none of its checkpoints verifies (%d rejected by this worker, see above); "
                         "refusing to start from the initial state, which would train the job again: restore a "
                         "good copy, or give --allow-fresh-start", p->dir, p->rejected);
        return PX_RESTORE_REFUSED;
    }
    if (r < 0) {
        px_log_warn("checkpoint_none_valid dir=%s rejected=%d moved_aside_before=%d: no checkpoint verifies, starting "
                    "from the initial state (--allow-fresh-start)", p->dir, p->rejected, aside);
        return p->rejected ? PX_RESTORE_REBUILD : PX_RESTORE_NONE;
    }
    if (m.has_schedule) {
        px_ckpt_schedule_t now = schedule_of(p);
        char diff[1024];
        int n = px_ckpt_schedule_diff(&m.schedule, &now, diff, sizeof diff);
        if (n && !p->cfg->allow_schedule_change) {
            px_log_error("--checkpoint-dir %s: resuming step %lld under another schedule: %s; the steps left would "
                         "train under a learning rate or batch the run did not have: give the checkpoint's values, "
                         "or --allow-schedule-change to resume under these",
                         p->dir, (long long)r, diff);
            px_ckpt_manifest_free(&m);
            return PX_RESTORE_REFUSED;
        }
        if (n) px_log_warn("schedule_changed step=%lld %s (--allow-schedule-change)", (long long)r, diff);
    }
    /* The outer momentum where the state and the checkpoint differ: a
     * DiLoCo state from a synchronous job's checkpoint starts it at zero (the
     * loader zeroed it); a synchronous state leaves a DiLoCo one's out. */
    const char *outer = st->nbuf == PX_STATE_MAXBUF && !m.outer_momentum ? " outer_momentum=zero"
                        : st->nbuf != PX_STATE_MAXBUF && m.outer_momentum ? " outer_momentum=ignored"
                                                                          : "";
    px_ckpt_manifest_free(&m);
    char path[4200];
    px_ckpt_path(p->dir, r, path, sizeof path);
    uint64_t bytes = px_state_bytes(st);
    int64_t ms = px_now_ms() - t0;
    px_log_info("checkpoint_restored path=%s step=%lld bytes=%" PRIu64 " ms=%lld%s", path, (long long)r, bytes,
                (long long)ms, outer);
    if (p->cfg->rank == 0) {
        px_agent_notify(p->agent, "checkpoint_restored", 0, r, "", bytes, (unsigned)ms, fit(path));
        printf("event kind=checkpoint_restored group=%s step=%lld path=%s ms=%lld\n", p->cfg->group, (long long)r, path,
               (long long)ms);
        fflush(stdout);
    }
    p->submitted = r; /* on disk already: a stop before the next step need not write it again */
    return PX_RESTORE_LOADED;
}

static int is_writer(const px_persist_t *p, const px_quorum_t *q) {
    return (p->cfg->rank == 0 || p->sharded) && q->n > 0 && !strcmp(q->groups[0].name, p->cfg->group);
}

typedef struct {
    px_ckpt_manifest_t *m;
    int file, buffer;
} plan_ctx_t;

static int plan_rect(void *ctx, const px_shard_rect_t *r) {
    plan_ctx_t *c = ctx;
    return px_ckpt_manifest_add(c->m, c->file, c->buffer, r->tensor, r->layer, (int64_t)r->K, (int64_t)r->row0,
                                (int64_t)r->nrows, (int64_t)r->col0, (int64_t)r->ncols);
}

int px_persist_set_shard(px_persist_t *p, px_shard_t *sh, const px_shard_layout_t *lays, int W, int pp, int nbuf) {
    if (!p->dir[0]) return 0;
    int rc = 0;
    size_t n = px_shard_runs(sh, NULL, 0);
    if (!(p->runs = malloc((n ? n : 1) * sizeof *p->runs))) return -1;
    px_shard_runs(sh, p->runs, n);
    if (p->cfg->rank == 0) { /* the manifest's slices: the same rectangles every rank writes, in its file's order */
        rc = px_ckpt_manifest_begin(&p->plan, &p->model, nbuf, W, "rank");
        for (int r = 0; rc == 0 && r < W; r++)
            for (int b = 0; rc == 0 && b < nbuf; b++) {
                plan_ctx_t c = {&p->plan, r, b};
                rc = px_shard_rects(&p->model, &lays[r], plan_rect, &c);
            }
    }
    p->sharded = 1;
    p->fsdp = lays[0].fsdp;
    p->tp = lays[0].tp.size;
    p->pp = pp;
    int wait_ms = p->cfg->comm_timeout_ms > 60000 ? p->cfg->comm_timeout_ms : 60000;
    p->part = (px_ckpt_part_t){p->cfg->rank, W, (const size_t(*)[2])p->runs, n, p->cfg->rank == 0 ? &p->plan : NULL,
                               wait_ms, &p->group_failed};
    return rc;
}

void px_persist_set_source_wait(px_persist_t *p, void (*wait)(void *ctx), void *ctx) {
    p->source_wait = wait;
    p->source_ctx = ctx;
}

void px_persist_joined(px_persist_t *p, const px_quorum_t *q) {
    if (!p->dir[0] || q->n == 0) return;
    if (p->prev_writer[0] && strcmp(p->prev_writer, q->groups[0].name) && is_writer(p, q)) p->catch_up = 1;
    snprintf(p->prev_writer, sizeof p->prev_writer, "%s", q->groups[0].name);
}

/* Once a write that outlasted its interval has finished: the interval that
 * would not have deferred a save, with a fifth to spare (logged once). */
static void hint(px_persist_t *p, double write_s) {
    if (p->hinted || p->deferred_interval_s <= 0) return;
    p->hinted = 1;
    int64_t every = p->cfg->checkpoint_every;
    double need = write_s * 1.2, steps = every > 0 ? ceil((double)every * need / p->deferred_interval_s) : 0;
    char flags[160];
    int n = every > 0 ? snprintf(flags, sizeof flags, "--checkpoint-every %.0f or ", steps > every ? steps : every + 1.0)
                      : 0;
    snprintf(flags + n, sizeof flags - (size_t)n, "--checkpoint-every-s %.0f", need < 1 ? 1.0 : ceil(need));
    px_log_warn("checkpoint_slow step=%lld write_s=%.3f interval_s=%.3f: a save took longer than the interval, so the "
                "next was deferred; %s would keep up with this disk", (long long)p->deferred_from, write_s,
                p->deferred_interval_s, flags);
    /* the hint last: the rest of the line */
    printf("event kind=checkpoint_slow group=%s step=%lld write_s=%.3f interval_s=%.3f hint=%s\n", p->cfg->group,
           (long long)p->deferred_from, write_s, p->deferred_interval_s, flags);
}

/* Reports the saves the thread has finished. */
static void report_done(px_persist_t *p) {
    px_ckpt_done_t d;
    while (p->saver && px_ckpt_saver_poll(p->saver, &d)) {
        if (d.ok && p->sharded && p->cfg->rank != 0) { /* a part: rank 0 publishes and reports */
            px_log_info("checkpoint_part_written step=%lld folder=%s bytes=%" PRIu64 " seconds=%.3f", (long long)d.step,
                        d.res.path, d.res.bytes, d.res.seconds);
            continue;
        }
        if (d.ok) {
            double mb_s = d.res.seconds > 0 ? (double)d.res.bytes / 1e6 / d.res.seconds : 0;
            px_log_info("checkpoint_saved step=%lld path=%s bytes=%" PRIu64 " seconds=%.3f mb_s=%.1f",
                        (long long)d.step, d.res.path, d.res.bytes, d.res.seconds, mb_s);
            px_agent_notify(p->agent, "checkpoint_saved", 0, d.step, "", d.res.bytes, (unsigned)(d.res.seconds * 1000),
                            fit(d.res.path));
            printf("event kind=checkpoint_saved group=%s step=%lld path=%s bytes=%" PRIu64 " seconds=%.3f mb_s=%.1f\n",
                   p->cfg->group, (long long)d.step, d.res.path, d.res.bytes, d.res.seconds, mb_s);
            if (d.step == p->deferred_from) hint(p, d.res.seconds);
        } else {
            px_log_error("checkpoint_failed step=%lld reason=\"%s\": training goes on, the previous checkpoint stays",
                         (long long)d.step, d.err);
            px_agent_notify(p->agent, "checkpoint_failed", 0, d.step, "", 0, 0, fit(d.err));
            printf("event kind=checkpoint_failed group=%s step=%lld reason=\"%s\"\n", p->cfg->group, (long long)d.step,
                   d.err);
        }
        fflush(stdout);
    }
}

/* The saver, started on first use; NULL when it cannot be (logged). */
static px_ckpt_saver_t *saver(px_persist_t *p, int64_t step) {
    if (!p->saver) {
        if (!(p->saver = px_ckpt_saver_new(p->dir, p->cfg->checkpoint_keep, &p->model, p->cfg->job))) {
            px_log_error("checkpoint_failed step=%lld reason=\"no saver thread\"", (long long)step);
            return NULL;
        }
        if (p->sharded) px_ckpt_saver_set_part(p->saver, &p->part);
        if (p->source_wait) px_ckpt_saver_set_source_wait(p->saver, p->source_wait, p->source_ctx);
    }
    return p->saver;
}

static void save(px_persist_t *p, const px_train_state_t *st, const px_quorum_t *q) {
    if (!saver(p, st->step)) return;
    if (p->sharded) { /* the previous save done, a new one starts with the group whole */
        px_ckpt_saver_wait(p->saver);
        __atomic_store_n(&p->group_failed, 0, __ATOMIC_RELEASE);
    }
    px_ckpt_meta_t meta = {p->cfg->job, q->id, q->n, p->cfg->ranks_per_group, p->cfg->group, p->fsdp, p->tp, p->pp,
                           1, schedule_of(p), p->cfg->checkpoint_write_mb_s};
    double held_ms = 0;
    char path[4200];
    px_ckpt_path(p->dir, st->step, path, sizeof path);
    int rc = px_ckpt_saver_submit(p->saver, st, &meta, p->cfg->checkpoint_overlap, &held_ms);
    if (rc < 0) {
        px_log_error("checkpoint_failed step=%lld reason=\"out of memory for the snapshot\"", (long long)st->step);
        px_agent_notify(p->agent, "checkpoint_failed", q->id, st->step, "", 0, 0, "out of memory for the snapshot");
        return;
    }
    p->submitted = st->step;
    p->submitted_us = px_now_us();
    /* snapshot: how it was taken; "step" (by the optimizer step, px_persist_pass) holds training here for
     * nothing, its cost is in that step */
    char late[64] = ""; /* the deferred save, and those folded into it */
    if (p->deferred >= 0)
        snprintf(late, sizeof late, " due_at=%lld folded=%d", (long long)p->deferred_first, p->folded);
    px_log_info("checkpoint_started step=%lld quorum_id=%lld path=%s held_ms=%.1f snapshot=%s%s", (long long)st->step,
                (long long)q->id, path, held_ms, rc == 1 ? "step" : p->cfg->checkpoint_overlap ? "overlap" : "held", late);
    px_agent_notify(p->agent, "checkpoint_started", q->id, st->step, "", 0, (unsigned)held_ms, fit(path));
}

/* Whether a commit of `step` under q saves by the intervals (or the
 * writer's catch-up), the save in flight aside. */
static int interval_due(const px_persist_t *p, int64_t step, const px_quorum_t *q) {
    if (!p->dir[0] || !is_writer(p, q)) return 0;
    if (p->time_due) return 1;
    int64_t every = p->cfg->checkpoint_every;
    /* DiLoCo commits a round of steps at once: due when it passes a multiple */
    int passed = every > 0 && p->cfg->mode != PX_MODE_SYNC && p->last_commit >= 0 &&
                 step / every > p->last_commit / every;
    return (every > 0 && (step % every == 0 || passed)) || p->catch_up;
}

/* ... or a save deferred before is waiting. */
static int due_at(const px_persist_t *p, int64_t step, const px_quorum_t *q) {
    return interval_due(p, step, q) || (p->deferred >= 0 && p->dir[0] && is_writer(p, q));
}

/* A save still writing, which the next does not wait for (unless
 * --checkpoint-when-busy wait): a whole state's writer asks its saver; the
 * ranks of a group writing in parts go by the vote, so that every one of
 * them defers the same steps. */
static int saver_busy(const px_persist_t *p) { return p->saver && px_ckpt_saver_busy(p->saver); }

static int writing(const px_persist_t *p) {
    if (p->cfg->checkpoint_wait) return 0;
    return p->sharded ? p->busy_agreed : saver_busy(p);
}

int px_persist_vote(const px_persist_t *p) {
    if (!p->dir[0]) return 0;
    int due = p->cfg->checkpoint_every_s > 0 &&
              (double)(px_now_us() - p->time_mark_us) >= p->cfg->checkpoint_every_s * 1e6;
    return (due ? PX_VOTE_CKPT_DUE : 0) | (saver_busy(p) ? PX_VOTE_CKPT_BUSY : 0);
}

void px_persist_agreed(px_persist_t *p, int due, int busy) {
    p->time_due = due;
    p->busy_agreed = busy;
}

int px_persist_due(const px_persist_t *p, const px_train_state_t *st, const px_quorum_t *q) {
    return due_at(p, st->step, q) && !writing(p);
}

px_ckpt_pass_t *px_persist_pass(px_persist_t *p, const px_train_state_t *st, const px_quorum_t *q, size_t *part_floats) {
    if (p->cfg->checkpoint_overlap || !due_at(p, st->step + 1, q) || p->sharded || writing(p) ||
        !saver(p, st->step + 1))
        return NULL;
    return px_ckpt_saver_pass(p->saver, st, part_floats);
}

/* A save due at st->step while the one of p->submitted still writes: taken
 * at the first commit after that write ends (p->deferred), and standing
 * for every save that falls due until then (p->folded of them besides the
 * first). Reported once per write that outlasts its interval: with the
 * interval's wall time, which the write took all of (it began at the
 * previous due step). */
static void defer(px_persist_t *p, const px_train_state_t *st, const px_quorum_t *q) {
    if (p->deferred >= 0 && p->deferred_from == p->submitted) {
        p->deferred = st->step;
        p->folded++;
        return;
    }
    double interval_s = (double)(px_now_us() - p->submitted_us) / 1e6;
    p->deferred_from = p->submitted;
    p->deferred_interval_s = interval_s;
    p->deferred = p->deferred_first = st->step;
    p->folded = 0;
    if (p->cfg->rank != 0) return; /* a group writing in parts: its rank 0 reports */
    px_log_warn("checkpoint_deferred step=%lld writing_step=%lld interval_s=%.3f: the save of step %lld still writes "
                "when this one comes due; training goes on, and the save is taken at the first step after that write "
                "ends", (long long)st->step, (long long)p->submitted, interval_s, (long long)p->submitted);
    px_agent_notify(p->agent, "checkpoint_deferred", q->id, st->step, "", (uint64_t)p->submitted,
                    (unsigned)(interval_s * 1000), "");
    printf("event kind=checkpoint_deferred group=%s step=%lld writing_step=%lld interval_s=%.3f\n", p->cfg->group,
           (long long)st->step, (long long)p->submitted, interval_s);
    fflush(stdout);
}

void px_persist_visit(void *pass, int k, size_t lo, size_t hi) { px_ckpt_pass_block(pass, k, lo, hi); }

void px_persist_passed(px_persist_t *p, px_ckpt_pass_t *pass, int64_t step) {
    if (pass) px_ckpt_saver_passed(p->saver, pass, step);
}

void px_persist_committed(px_persist_t *p, const px_train_state_t *st, const px_quorum_t *q, int due) {
    if (!p->dir[0]) return;
    report_done(p);
    if (p->time_due) p->time_mark_us = px_now_us(); /* every rank: the quorum saved by time here */
    if (is_writer(p, q)) {
        if (due) {
            save(p, st, q);
            p->deferred = -1;
        } else if (interval_due(p, st->step, q) && st->step < p->cfg->steps) { /* (the job's end waits) */
            defer(p, st, q);
        }
        if (p->saver) px_ckpt_saver_unpass(p->saver); /* a pass taken for a save that did not come */
        p->catch_up = 0;
        p->last_commit = st->step;
    } else {
        p->deferred = -1; /* another group writes now */
    }
    p->time_due = p->busy_agreed = 0;
    report_done(p);
}

void px_persist_final(px_persist_t *p, const px_train_state_t *st, const px_quorum_t *q) {
    if (!p->dir[0]) return;
    if (p->sharded && st->step < p->cfg->steps) { /* stopping: the ranks may be at different steps */
        if (is_writer(p, q) && p->cfg->rank == 0)
            px_log_info("checkpoint_skipped step=%lld: a sharded group saves no checkpoint when stopped; the last "
                        "one written stands", (long long)st->step);
        if (p->saver) px_ckpt_saver_wait(p->saver);
        report_done(p);
        return;
    }
    if (is_writer(p, q) && p->submitted != st->step && st->step > 0) save(p, st, q);
    if (p->saver) px_ckpt_saver_wait(p->saver);
    report_done(p);
}

void px_persist_fence(px_persist_t *p) {
    if (!p->saver) return;
    px_ckpt_saver_unpass(p->saver); /* the state is about to change: a pass's snapshot would be stale */
    double ms = px_ckpt_saver_fence(p->saver);
    if (ms >= 1.0) px_log_info("checkpoint_fence waited_ms=%.1f: the snapshot copy outlasted a forward and backward", ms);
}

void px_persist_free(px_persist_t *p) {
    px_ckpt_saver_destroy(&p->saver);
    report_done(p);
    free(p->runs);
    p->runs = NULL;
    px_ckpt_manifest_free(&p->plan);
}

void px_persist_group_failed(px_persist_t *p) { __atomic_store_n(&p->group_failed, 1, __ATOMIC_RELEASE); }
