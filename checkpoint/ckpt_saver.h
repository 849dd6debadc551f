/* The background checkpoint saver: training is held at most while the state
 * is copied to a host snapshot at a commit boundary (not at all when the copy
 * overlaps the next step's forward and backward); a thread of its own writes
 * the snapshot (ckpt.h: px_ckpt_write) and applies retention. One save at a
 * time: a save asked for while the previous one still writes waits for it
 * (never two in flight, never an unbounded queue of snapshots). */
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
 * *held_ms (may be NULL): how long the caller was held here. 0, or -1 when
 * the snapshot cannot be allocated (nothing is saved). */
int px_ckpt_saver_submit(px_ckpt_saver_t *sv, const px_train_state_t *s, const px_ckpt_meta_t *meta, int overlap,
                         double *held_ms);
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
/* Waits for the save in flight, stops the thread, frees everything. */
void px_ckpt_saver_destroy(px_ckpt_saver_t **sv);

#endif
