/* The background checkpoint saver: training is held at most while the state
 * is copied to a host snapshot at a commit boundary (not at all when the copy
 * overlaps the next step's forward and backward, or when the optimizer step
 * that made the state took the snapshot as it went: px_ckpt_saver_pass); a
 * thread of its own writes the snapshot with the checksums taken with it
 * (ckpt.h: px_ckpt_write_files) and applies retention. One save at a
 * time: a save handed over while the previous one still writes waits for
 * it (never two in flight, never an unbounded queue of snapshots); a caller
 * that must not wait asks px_ckpt_saver_busy first and saves later. */
#ifndef PX_CKPT_SAVER_H
#define PX_CKPT_SAVER_H

#include "ckpt.h"

typedef struct px_ckpt_saver px_ckpt_saver_t;

/* A finished save. */
typedef struct {
    int ok;
    int64_t step;
    px_ckpt_result_t res;            /* when ok */
    char err[600];                   /* when not */
} px_ckpt_done_t;

/* A saver writing into dir, keeping `keep` checkpoints (0: all), for a model
 * of config cfg in job `job`. NULL when out of memory or no thread. */
px_ckpt_saver_t *px_ckpt_saver_new(const char *dir, int keep, const px_gpt_config_t *cfg, const char *job);
/* Waits for the save in flight to end, then hands s to the thread (the
 * snapshot, of every buffer of s, is allocated on first use and again when
 * s's buffer count or size changes). overlap 0: s is copied into
 * the snapshot here, on every core, before this returns. overlap 1 (the
 * CheckFreq way): the thread copies s itself while the caller goes on, so
 * s must stay alive and unchanged until px_ckpt_saver_fence returns: a
 * trainer fences before its next optimizer step, which is the first write
 * to the state after a commit (a forward and backward only read it).
 * *held_ms (may be NULL): how long the caller was held here. 0; 1 when a
 * pass's snapshot was written (px_ckpt_saver_passed: nothing copied); -1
 * when the snapshot cannot be allocated (nothing is saved). */
int px_ckpt_saver_submit(px_ckpt_saver_t *sv, const px_train_state_t *s, const px_ckpt_meta_t *meta, int overlap,
                         double *held_ms);
/* A snapshot taken by the optimizer step that makes the state the next
 * save will write (px_gpt_adamw_step_parts), instead of a held copy after
 * it: it has every value in the cache as it finishes it, so the snapshot
 * costs the copy's writes and not a second read of the state.
 * px_ckpt_saver_pass waits for the save in flight to end, makes the
 * snapshot ready for s and begins a pass into it (ckpt.h, px_ckpt_pass_*;
 * *part_floats: the parts the step must go by); NULL when it cannot (a
 * part of a sharded group's checkpoint, a state another thread brings up
 * to date (set_source_wait), out of memory): take the step as usual. Once
 * the step is done, px_ckpt_saver_passed ends the pass: a submit of s at
 * `step` (what s->step will be then) writes the pass's snapshot with its
 * checksums and copies nothing. px_ckpt_saver_unpass forgets it (the state
 * changed after the step, or no save came); a submit at another step, or
 * after a failed pass, copies as usual. */
px_ckpt_pass_t *px_ckpt_saver_pass(px_ckpt_saver_t *sv, const px_train_state_t *s, size_t *part_floats);
void px_ckpt_saver_passed(px_ckpt_saver_t *sv, px_ckpt_pass_t *p, int64_t step);
void px_ckpt_saver_unpass(px_ckpt_saver_t *sv);
/* Before it first reads a submitted state (on the caller's thread without
 * overlap, on its own with), the saver calls wait(ctx): for a state whose
 * host copy is still arriving, e.g. a download from a GPU that overlaps the
 * next step. Such a state is a copy of one that trains elsewhere, so the
 * saver's own copy of it (overlap) runs on every core, as a held one does.
 * NULL: none. Set it while no save is in flight. */
void px_ckpt_saver_set_source_wait(px_ckpt_saver_t *sv, void (*wait)(void *ctx), void *ctx);
/* From now on this saver writes this rank's part of checkpoints written by
 * several ranks (ckpt.h, px_ckpt_write_part; the part's runs and plan must
 * outlive the saver), and only rank 0 applies retention; NULL: whole states
 * again. */
void px_ckpt_saver_set_part(px_ckpt_saver_t *sv, const px_ckpt_part_t *part);
/* Waits until the state handed to the last overlapped submit has been
 * copied; returns the milliseconds waited. */
double px_ckpt_saver_fence(px_ckpt_saver_t *sv);
/* 1 and *out when a save has finished since the last call (oldest first), else 0. */
int px_ckpt_saver_poll(px_ckpt_saver_t *sv, px_ckpt_done_t *out);
/* Waits until no save is in flight. */
void px_ckpt_saver_wait(px_ckpt_saver_t *sv);
/* 1 while a save is in flight (handed over and not yet finished), else 0;
 * does not wait. */
int px_ckpt_saver_busy(px_ckpt_saver_t *sv);
/* Waits for the save in flight, stops the thread, frees everything. */
void px_ckpt_saver_destroy(px_ckpt_saver_t **sv);

#endif
