/* The background checkpoint saver (see ckpt_saver.h). */
#include "ckpt_saver.h"

#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_time.h"

#define DONE_RING 8

struct px_ckpt_saver {
    char *dir, job[64], writer_group[64];
    int keep;
    px_gpt_config_t cfg;
    px_train_state_t snap;           /* owned once allocated */
    uint64_t hashes[PX_CKPT_MAX_FILES]; /* the data files' checksums (split by px_ckpt_part_floats), with hashed */
    int hashed;
    int64_t passed;                  /* snap and hashes were taken by a pass, for a submit at this step (-1: none) */
    const px_train_state_t *src;     /* the live state being copied into snap (NULL: none) */
    int copying;                     /* src is being read: the owner must not change it */
    void (*source_wait)(void *);     /* called before src is first read (NULL: none) */
    void *source_ctx;
    px_ckpt_meta_t meta;
    px_ckpt_part_t part;             /* with has_part: this rank writes a part (ckpt.h) */
    int has_part;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending, busy, quit;
    px_ckpt_done_t done[DONE_RING];
    int done_head, done_n;
};

/* The snapshot becomes s (on every core with parallel; on this thread
 * alone otherwise), with each data file's checksum computed on the way
 * (ckpt_snapshot.c): the writer then only writes. A part of a sharded
 * group's checkpoint is hashed by its writer. */
static void copy_state(px_ckpt_saver_t *sv, const px_train_state_t *s, int parallel) {
    int threads = parallel ? omp_get_max_threads() : 1;
    sv->hashed = !sv->has_part && px_ckpt_snapshot(&sv->snap, s, px_ckpt_part_floats(s->n), sv->hashes, threads) == 0;
    if (sv->has_part) px_state_copy_chunks(&sv->snap, s, threads, 1);
    sv->snap.step = s->step;
    sv->snap.seed = s->seed;
}

static void *saver_main(void *arg) {
    px_ckpt_saver_t *sv = arg;
    pthread_mutex_lock(&sv->mu);
    for (;;) {
        while (!sv->pending && !sv->quit) pthread_cond_wait(&sv->cv, &sv->mu);
        if (!sv->pending) break;
        sv->pending = 0;
        pthread_mutex_unlock(&sv->mu);
        if (sv->src) { /* the snapshot, while the trainer computes the next step (it only reads the state) */
            /* a state with a wait is a copy of what trains elsewhere (a GPU's): the cores are free */
            if (sv->source_wait) sv->source_wait(sv->source_ctx);
            copy_state(sv, sv->src, sv->source_wait != NULL);
            pthread_mutex_lock(&sv->mu);
            sv->src = NULL;
            sv->copying = 0;
            pthread_cond_broadcast(&sv->cv);
            pthread_mutex_unlock(&sv->mu);
        }
        px_ckpt_done_t d;
        memset(&d, 0, sizeof d);
        d.step = sv->snap.step;
        if (sv->has_part)
            d.ok = px_ckpt_write_part(sv->dir, &sv->snap, &sv->meta, &sv->part, &d.res, d.err, sizeof d.err) == 0;
        else
            d.ok = px_ckpt_write_files(sv->dir, &sv->snap, &sv->cfg, &sv->meta, px_ckpt_part_floats(sv->snap.n),
                                       sv->hashed ? sv->hashes : NULL, &d.res, d.err, sizeof d.err) == 0;
        if (d.ok && (!sv->has_part || sv->part.rank == 0)) px_ckpt_retain(sv->dir, sv->keep, d.step);
        pthread_mutex_lock(&sv->mu);
        if (sv->done_n == DONE_RING) { /* nobody polls: keep the newest */
            sv->done_head = (sv->done_head + 1) % DONE_RING;
            sv->done_n--;
        }
        sv->done[(sv->done_head + sv->done_n++) % DONE_RING] = d;
        sv->busy = 0;
        pthread_cond_broadcast(&sv->cv);
    }
    pthread_mutex_unlock(&sv->mu);
    return NULL;
}

px_ckpt_saver_t *px_ckpt_saver_new(const char *dir, int keep, const px_gpt_config_t *cfg, const char *job) {
    px_ckpt_saver_t *sv = calloc(1, sizeof *sv);
    if (!sv || !(sv->dir = strdup(dir))) {
        free(sv);
        return NULL;
    }
    snprintf(sv->job, sizeof sv->job, "%s", job ? job : "");
    sv->keep = keep;
    sv->passed = -1;
    sv->cfg = *cfg;
    pthread_mutex_init(&sv->mu, NULL);
    pthread_cond_init(&sv->cv, NULL);
    if (pthread_create(&sv->thread, NULL, saver_main, sv) != 0) {
        free(sv->dir);
        free(sv);
        return NULL;
    }
    return sv;
}

static void wait_idle_locked(px_ckpt_saver_t *sv) {
    while (sv->busy) pthread_cond_wait(&sv->cv, &sv->mu);
}

/* Waits for the thread to be idle: the snapshot is ours until we hand it
 * over. It has every buffer of the state (3, or 4 with DiLoCo's outer
 * momentum), and follows the state when that changes (a switch of mode).
 * 0, or -1 when it cannot be allocated. */
static int snapshot_ready(px_ckpt_saver_t *sv, const px_train_state_t *s) {
    pthread_mutex_lock(&sv->mu);
    wait_idle_locked(sv);
    pthread_mutex_unlock(&sv->mu);
    if (sv->snap.owned && (sv->snap.nbuf != s->nbuf || sv->snap.n != s->n)) px_state_free(&sv->snap);
    return !sv->snap.owned && px_state_alloc_like(&sv->snap, s) != 0 ? -1 : 0;
}

px_ckpt_pass_t *px_ckpt_saver_pass(px_ckpt_saver_t *sv, const px_train_state_t *s, size_t *part_floats) {
    sv->passed = -1;
    if (sv->has_part || sv->source_wait || snapshot_ready(sv, s) != 0) return NULL;
    *part_floats = px_ckpt_part_floats(s->n);
    return px_ckpt_pass_begin(&sv->snap, s, *part_floats);
}

void px_ckpt_saver_passed(px_ckpt_saver_t *sv, px_ckpt_pass_t *p, int64_t step) {
    sv->passed = px_ckpt_pass_end(p, sv->hashes) == 0 ? step : -1;
}

void px_ckpt_saver_unpass(px_ckpt_saver_t *sv) { sv->passed = -1; }

int px_ckpt_saver_submit(px_ckpt_saver_t *sv, const px_train_state_t *s, const px_ckpt_meta_t *meta, int overlap,
                         double *held_ms) {
    int64_t t0 = px_now_us();
    int passed = sv->passed >= 0 && sv->passed == s->step && sv->snap.owned && sv->snap.n == s->n &&
                 sv->snap.nbuf == s->nbuf;
    sv->passed = -1;
    if (snapshot_ready(sv, s) != 0) return -1;
    if (passed) { /* the optimizer step took the snapshot */
        sv->hashed = 1;
        sv->snap.step = s->step;
        sv->snap.seed = s->seed;
        overlap = 0;
    } else if (!overlap) {
        if (sv->source_wait) sv->source_wait(sv->source_ctx);
        copy_state(sv, s, 1);
    }
    sv->meta = *meta;
    sv->meta.job = sv->job;
    snprintf(sv->writer_group, sizeof sv->writer_group, "%s", meta->writer_group ? meta->writer_group : "");
    sv->meta.writer_group = sv->writer_group;
    pthread_mutex_lock(&sv->mu);
    sv->pending = sv->busy = 1;
    if (overlap) {
        sv->src = s;
        sv->copying = 1;
    }
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    if (held_ms) *held_ms = (double)(px_now_us() - t0) / 1000.0;
    return passed;
}

void px_ckpt_saver_set_source_wait(px_ckpt_saver_t *sv, void (*wait)(void *ctx), void *ctx) {
    pthread_mutex_lock(&sv->mu);
    wait_idle_locked(sv);
    sv->source_wait = wait;
    sv->source_ctx = ctx;
    pthread_mutex_unlock(&sv->mu);
}

void px_ckpt_saver_set_part(px_ckpt_saver_t *sv, const px_ckpt_part_t *part) {
    pthread_mutex_lock(&sv->mu);
    wait_idle_locked(sv);
    sv->has_part = part != NULL;
    if (part) sv->part = *part;
    pthread_mutex_unlock(&sv->mu);
}

double px_ckpt_saver_fence(px_ckpt_saver_t *sv) {
    int64_t t0 = px_now_us();
    pthread_mutex_lock(&sv->mu);
    while (sv->copying) pthread_cond_wait(&sv->cv, &sv->mu);
    pthread_mutex_unlock(&sv->mu);
    return (double)(px_now_us() - t0) / 1000.0;
}

int px_ckpt_saver_poll(px_ckpt_saver_t *sv, px_ckpt_done_t *out) {
    pthread_mutex_lock(&sv->mu);
    int got = sv->done_n > 0;
    if (got) {
        *out = sv->done[sv->done_head];
        sv->done_head = (sv->done_head + 1) % DONE_RING;
        sv->done_n--;
    }
    pthread_mutex_unlock(&sv->mu);
    return got;
}

void px_ckpt_saver_wait(px_ckpt_saver_t *sv) {
    pthread_mutex_lock(&sv->mu);
    wait_idle_locked(sv);
    pthread_mutex_unlock(&sv->mu);
}

int px_ckpt_saver_busy(px_ckpt_saver_t *sv) {
    pthread_mutex_lock(&sv->mu);
    int busy = sv->busy;
    pthread_mutex_unlock(&sv->mu);
    return busy;
}

void px_ckpt_saver_destroy(px_ckpt_saver_t **svp) {
    px_ckpt_saver_t *sv = *svp;
    if (!sv) return;
    pthread_mutex_lock(&sv->mu);
    wait_idle_locked(sv);
    sv->quit = 1;
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    pthread_join(sv->thread, NULL);
    px_state_free(&sv->snap);
    pthread_mutex_destroy(&sv->mu);
    pthread_cond_destroy(&sv->cv);
    free(sv->dir);
    free(sv);
    *svp = NULL;
}
