/* Durable checkpoints of the training state (model/train_state.h): the
 * format, its manifest, writing one atomically, and verifying and loading one.
 * The background saver is ckpt_saver.h; docs/operations.md says how to use
 * them and docs/architecture.md ("Checkpoints") why the format is so.
 *
 * A checkpoint is a directory DIR/step_<8 digits>/ holding manifest.json and
 * data files: a state written whole by one rank in several (see
 * px_ckpt_part_floats), a sharded group's in one per rank. Tensors are logical: the GPT-2 name and
 * the unsharded shape of each parameter (h.3.attn.c_attn.weight is (3C, C),
 * nn.Linear's (out, in) orientation; Hugging Face's Conv1D stores the
 * transpose, which the safetensors export applies) and of each AdamW moment
 * (optimizer.exp_avg.NAME, optimizer.exp_avg_sq.NAME) and, in a DiLoCo
 * state of four buffers, of the outer optimizer's momentum
 * (outer.momentum.NAME, the parameter's shape): all of them or none, so that
 * no state is ever half there. Each tensor lists
 * the slices that together cover it: a hyperrectangle (start, count per
 * dimension), stored row-major as float32 little-endian in a byte range of a
 * data file. A reader assembles any slice of any tensor from the manifest
 * alone, whatever layout wrote it; each data file carries its size and its
 * XXH3-64 (libxxhash), so a torn or corrupt file is caught before its state
 * is used.
 *
 * Publishing: everything is written under DIR/.tmp-step_N-HOST-PID/, each
 * file and then the folder fsynced, the folder renamed to step_N, and DIR
 * fsynced. A reader sees a whole checkpoint or none. */
#ifndef PX_CKPT_H
#define PX_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h"
#include "train_state.h"

#define PX_CKPT_FORMAT_VERSION 1
#define PX_CKPT_MAX_DIMS 4
#define PX_CKPT_MANIFEST "manifest.json"
#define PX_CKPT_MANIFEST_MAX ((size_t)64 << 20) /* a larger manifest is refused unread */

/* ---- the logical tensors of a model's state (pure) ---------------------- */

/* The name prefix of the tensors of each buffer: "" (params),
 * "optimizer.exp_avg.", "optimizer.exp_avg_sq.", "outer.momentum.". */
#define PX_CKPT_OUTER_PREFIX "outer.momentum."

typedef struct {
    char name[96];                   /* GPT-2 name, with its buffer's prefix */
    int buffer;                      /* PX_STATE_PARAMS, _M, _V or _OUTER_M */
    size_t offset;                   /* first float in that buffer */
    int ndim;
    int64_t shape[PX_CKPT_MAX_DIMS];
} px_ckpt_logical_t;

/* Logical tensors of a state of nbuf buffers (PX_STATE_NBUF, or
 * PX_STATE_MAXBUF with the outer momentum) of a model of config cfg, in
 * buffer order (params, m, v[, outer_m]; llm.c's order inside each):
 * nbuf * (4 + 12 L), or -1 for another nbuf. out may be NULL to count. */
int px_ckpt_logical_tensors(const px_gpt_config_t *cfg, int nbuf, px_ckpt_logical_t *out);

/* ---- the manifest (pure: JSON text <-> struct) ------------------------- */

typedef struct {
    int file;                        /* index into files */
    uint64_t offset, bytes;          /* byte range in that file */
    int64_t start[PX_CKPT_MAX_DIMS];
    int64_t count[PX_CKPT_MAX_DIMS];
} px_ckpt_slice_t;

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[PX_CKPT_MAX_DIMS];
    int nslices;
    px_ckpt_slice_t *slices;
} px_ckpt_tensor_t;

typedef struct {
    char name[64];                   /* a plain file name inside the checkpoint */
    uint64_t bytes;
    uint64_t xxh3;
} px_ckpt_file_t;

/* The flags that shape a job's learning-rate schedule and its batches,
 * recorded in each checkpoint so that a resume under other values is
 * noticed (a longer --steps stretches the cosine decay of the steps left,
 * another batch changes what the data cursor means). */
typedef struct {
    int64_t steps, warmup, global_batch, seq_len;
    double lr, min_lr;
} px_ckpt_schedule_t;

typedef struct {
    int format_version;
    char job[64];
    int64_t step;                    /* optimizer steps committed = the data cursor */
    int64_t quorum_id;
    uint64_t seed;                   /* initialisation and data order */
    int64_t created_ms;              /* wall clock, for people */
    px_gpt_config_t model;
    /* The layout that wrote it (informative: the slices are what a reader uses). */
    int groups, ranks_per_group, fsdp, tp, pp;
    char writer_group[64];
    /* 1: the state has the outer momentum (outer.momentum.NAME of every
     * parameter: a DiLoCo state of 4 buffers); 0: params, m and v only.
     * JSON "outer_momentum"; the decoder derives it from the tensors (a
     * manifest without the key is read as what its tensors say) and
     * refuses a manifest with some outer tensors but not all, one whose
     * shape is not its parameter's, or a key that disagrees. */
    int outer_momentum;
    int has_schedule;                /* 0: written without one (an import, an older build) */
    px_ckpt_schedule_t schedule;     /* JSON "schedule" */
    int ntensors;
    px_ckpt_tensor_t *tensors;
    int nfiles;
    px_ckpt_file_t *files;
} px_ckpt_manifest_t;

void px_ckpt_manifest_free(px_ckpt_manifest_t *m);
/* A state written whole by one rank is split into data files: each buffer
 * (params, m, v[, outer_m], in llm.c's order) into parts of part_floats
 * floats (the last one shorter), file b * parts + k holding part k of
 * buffer b. Each file is hashed on its own, so a snapshot copy hashes them
 * on every core (px_ckpt_snapshot), and an optimizer step that updates
 * part k of every buffer on one thread can copy and hash its files as it
 * goes (px_ckpt_pass_*); every file's first byte lies on a page of a state
 * from px_state_alloc_like (the O_DIRECT writer sends it straight from
 * there). px_ckpt_part_floats is the split a save uses: at most
 * PX_CKPT_BUFFER_FILES parts a buffer, of at least PX_CKPT_FILE_MIN bytes,
 * whole pages, as equal as that allows. A reader needs none of this: the
 * manifest says where every slice is. */
#define PX_CKPT_FILE_MIN ((size_t)1 << 20)
#define PX_CKPT_BUFFER_FILES 8
#define PX_CKPT_MAX_FILES (PX_CKPT_BUFFER_FILES * PX_STATE_MAXBUF)
#define PX_CKPT_FILE_ALIGN ((size_t)4096)
#define PX_CKPT_PARTS_LIMIT 100000 /* more parts than this is a mistake of the caller's */
size_t px_ckpt_part_floats(size_t n);
/* Parts (files) of part_floats floats a buffer of n floats takes (1 for
 * n = 0), or -1 when part_floats is 0 or makes more than
 * PX_CKPT_PARTS_LIMIT. */
int px_ckpt_nparts(size_t n, size_t part_floats);
/* The manifest of a state of nbuf buffers written whole by one rank into
 * files "<prefix><f, 5 digits>.bin", each buffer in parts of part_floats
 * (sizes filled in, checksums left to the writer); a tensor that crosses
 * from one part into the next is stored as slices: a partial row, whole
 * rows, a partial row. 0, or -1 when out of memory, nbuf is not 3 or 4, or
 * part_floats is not usable. */
int px_ckpt_manifest_whole(px_ckpt_manifest_t *m, const px_gpt_config_t *cfg, int nbuf, const char *prefix,
                           size_t part_floats);
/* The manifest of a state of nbuf buffers written in pieces by several
 * ranks: every logical tensor of cfg without slices, and nfiles data files named
 * "<prefix><f, 5 digits>.bin" (the writers use "rank": rank00003.bin). Then px_ckpt_manifest_add appends, file by file in
 * the order of its bytes, each rectangle a writer stores: rows [row0,
 * row0 + nrows) x columns [col0, col0 + ncols) of the logical tensor
 * (buffer PX_STATE_* below nbuf, gpt.h kind, layer; 0 for the tensors
 * outside the layers) seen as
 * rows of K floats (a matrix's own rows; a vector as one row, or K = 1).
 * The file's size grows by the rectangle. Both 0, or -1 when out of memory
 * or the rectangle does not fit the tensor (the decoder checks coverage). */
int px_ckpt_manifest_begin(px_ckpt_manifest_t *m, const px_gpt_config_t *cfg, int nbuf, int nfiles,
                           const char *prefix);
int px_ckpt_manifest_add(px_ckpt_manifest_t *m, int file, int buffer, int kind, int layer, int64_t K, int64_t row0,
                         int64_t nrows, int64_t col0, int64_t ncols);
/* JSON text of m (malloc'd, NUL-terminated), or NULL when out of memory. */
char *px_ckpt_manifest_encode(const px_ckpt_manifest_t *m);
/* Parses and checks a manifest: format and version (one from the future is
 * refused), every field's type and range, file names, slices inside their
 * tensor and their file, each tensor covered exactly once by its slices, each
 * file tiled exactly by the slices stored in it. 0, or -1 with the fault in
 * err (m is left empty). */
int px_ckpt_manifest_decode(const char *text, size_t len, px_ckpt_manifest_t *m, char *err, size_t errlen);
/* 0 when the manifest holds the whole state of a model of config cfg (same
 * config, every tensor of params, m and v present with its shape; the outer
 * momentum, optional, was checked by the decoder); else -1 and why. */
int px_ckpt_manifest_matches(const px_ckpt_manifest_t *m, const px_gpt_config_t *cfg, char *err, size_t errlen);
/* Index of the tensor named name, or -1. */
int px_ckpt_manifest_find(const px_ckpt_manifest_t *m, const char *name);
/* How schedule `now` differs from `was` (a checkpoint's): the number of
 * flags that differ, each written to out as "--steps 2000 (the checkpoint's:
 * 1000)", joined by ", " (cut to cap). Pure. */
int px_ckpt_schedule_diff(const px_ckpt_schedule_t *was, const px_ckpt_schedule_t *now, char *out, size_t cap);

/* ---- files (I/O) -------------------------------------------------------- */

typedef struct {
    const char *job;                 /* "" when unnamed */
    int64_t quorum_id;
    int groups, ranks_per_group;
    const char *writer_group;
    int fsdp, tp, pp;                /* the writing layout (0: 1) */
    int has_schedule;                /* 1: record schedule */
    px_ckpt_schedule_t schedule;
    double write_mb_s;               /* data files written at most this fast, MB/s (0: as the disk takes them) */
} px_ckpt_meta_t;

typedef struct {
    char path[4200];                 /* the published folder */
    uint64_t bytes;                  /* data and manifest */
    double seconds;                  /* from the first byte to the parent's fsync */
} px_ckpt_result_t;

/* "DIR/step_<8 digits>". */
void px_ckpt_path(const char *dir, int64_t step, char *out, size_t len);

/* Writes state s (whole, as one rank: every one of its s->nbuf buffers) as
 * DIR/step_<s->step>, atomically, in data files data00000.bin, ... of
 * px_ckpt_part_floats; DIR is created when missing. An existing step_N of
 * the same step (a corrupt one that restore skipped) is replaced. On
 * failure nothing is published and the temporary folder is removed. 0, or
 * -1 with the fault (ENOSPC, EFBIG, ...) in err. */
int px_ckpt_write(const char *dir, const px_train_state_t *s, const px_gpt_config_t *cfg, const px_ckpt_meta_t *meta,
                  px_ckpt_result_t *res, char *err, size_t errlen);
/* The same in parts of part_floats, with each file's XXH3-64 given
 * (hashes[f], from px_ckpt_snapshot or px_ckpt_pass_end of the same split:
 * the files are then only written, not read again) or, hashes NULL,
 * computed on the way. */
int px_ckpt_write_files(const char *dir, const px_train_state_t *s, const px_gpt_config_t *cfg,
                        const px_ckpt_meta_t *meta, size_t part_floats, const uint64_t *hashes,
                        px_ckpt_result_t *res, char *err, size_t errlen);

/* A save's snapshot in one pass: dst's buffers (a state like src) become
 * src's, with streaming stores, and hashes[f] the XXH3-64 of data file f
 * of a whole write in parts of part_floats (nbuf * px_ckpt_nparts files),
 * each file hashed from the bytes just copied while they are in the cache;
 * the files are shared among `threads` threads. hashes NULL: the copy
 * only. Step and seed are left to the caller. 0; -1 when the hashes could
 * not be computed (out of memory, or part_floats not usable): the copy is
 * made all the same, and the writer must hash (hashes NULL). */
int px_ckpt_snapshot(px_train_state_t *dst, const px_train_state_t *src, size_t part_floats, uint64_t *hashes,
                     int threads);

/* The same snapshot taken during a pass that finishes src part by part (an
 * optimizer step: see px_gpt_adamw_step_parts): after floats [lo, hi) of
 * part k of every buffer of src hold their final values, px_ckpt_pass_block
 * copies them into dst and hashes them, from the cache. Blocks of a part
 * come in order, on one thread at a time; different parts may run at once.
 * px_ckpt_pass_end, once every float was passed, fills hashes (as
 * px_ckpt_snapshot does) and frees the pass: 0, or -1 when a part was left
 * incomplete (hashes then unusable). begin returns NULL when out of memory
 * or part_floats is not usable. */
typedef struct px_ckpt_pass px_ckpt_pass_t;
px_ckpt_pass_t *px_ckpt_pass_begin(px_train_state_t *dst, const px_train_state_t *src, size_t part_floats);
void px_ckpt_pass_block(px_ckpt_pass_t *p, int k, size_t lo, size_t hi);
int px_ckpt_pass_end(px_ckpt_pass_t *p, uint64_t *hashes);

/* One rank's part of a checkpoint written by several (a sharded group):
 * every rank writes the floats `runs` (offset, count: the same runs of each
 * of the state's s->nbuf buffers, params first, then m, then v[, outer_m],
 * which the plan must have been begun with) into its file
 * rank<rank>.bin of a temporary folder the ranks share
 * (DIR/.tmp-step_N-<writer group>-q<quorum id>), then a marker with the
 * file's size and checksum. Rank 0 waits up to wait_ms for every marker,
 * completes `plan` (the slices of every rank's file, px_ckpt_manifest_begin
 * and _add; its files' sizes must be what the ranks wrote) with the sizes,
 * checksums and meta, writes the manifest and publishes the folder as
 * px_ckpt_write does. A rank that dies leaves the folder unpublished
 * (retention removes it after an hour); rank 0 stops waiting for its part
 * as soon as *cancel (when given) turns non-zero: the caller's group lost a
 * member, whose part may never come. */
typedef struct {
    int rank, ranks;
    const size_t (*runs)[2];
    size_t nruns;
    const px_ckpt_manifest_t *plan; /* rank 0 */
    int wait_ms;                    /* rank 0 */
    const int *cancel;              /* rank 0, may be NULL; read atomically while waiting */
} px_ckpt_part_t;

/* This rank's part of the checkpoint of step s->step (and, on rank 0, the
 * publication). 0, or -1 with the fault in err. res->path is the published
 * folder (rank 0) or the temporary one (the others). */
int px_ckpt_write_part(const char *dir, const px_train_state_t *s, const px_ckpt_meta_t *meta,
                       const px_ckpt_part_t *part, px_ckpt_result_t *res, char *err, size_t errlen);

/* Why a checkpoint cannot be used. */
typedef enum {
    PX_CKPT_DAMAGED,     /* its files are not what was written: checksum, size, missing, unparsable */
    PX_CKPT_MISMATCH,    /* sound, but of another job, seed or model */
    PX_CKPT_UNAVAILABLE  /* this reader could not read it (permission, memory): nothing says it is bad */
} px_ckpt_fault_kind_t;

/* A checkpoint that cannot be used: which file and what is wrong with it. */
typedef struct {
    char file[4200];                 /* the path of the faulty file (or folder) */
    char fault[512];
    px_ckpt_fault_kind_t kind;
} px_ckpt_fault_t;

/* Reads the manifest of the checkpoint at path. 0, or -1 with the fault. */
int px_ckpt_read_manifest(const char *path, px_ckpt_manifest_t *m, px_ckpt_fault_t *fault);

/* The N of a path whose last component is step_N (trailing slashes allowed),
 * or -1 when it is not so named. */
int64_t px_ckpt_folder_step(const char *path);

/* What a torn copy or a truncation breaks, found without reading any data:
 * the manifest's step agrees with its folder's name (when named step_N), and
 * every data file is there with the size the manifest gives. 0, or -1 with
 * the fault. px_ckpt_load does this before it reads a byte of data. */
int px_ckpt_check_files(const char *path, const px_ckpt_manifest_t *m, px_ckpt_fault_t *fault);

/* Verifies every data file of the checkpoint at path (size and checksum) and,
 * with dst, assembles the state into it (dst->n must be the model's size;
 * dst->step and seed are set). m receives the manifest (may be NULL). A shared
 * lock on the manifest is held meanwhile, so retention leaves it alone. On
 * failure dst holds partial data: load into a staging state. 0, or -1 with
 * the fault. With cfg, the manifest must match that model.
 *
 * The outer momentum and dst->nbuf (3 or 4) need not agree:
 *   checkpoint with it, dst of 3     read and verified, placed nowhere;
 *   checkpoint without it, dst of 4  params, m and v loaded, dst's outer_m
 *                                    set to zero (without a sink; a sink's
 *                                    owner zeroes its own).
 * The caller learns of the zero from the manifest: dst->nbuf == 4 and
 * m->outer_momentum == 0 mean outer_m was not in the checkpoint and is
 * zero now (a DiLoCo job resumed from a synchronous job's checkpoint). */
int px_ckpt_load(const char *path, const px_gpt_config_t *cfg, px_train_state_t *dst, px_ckpt_manifest_t *m,
                 px_ckpt_fault_t *fault);
/* Where a load puts the values: with place set, each slice read (and
 * hashed) is handed to place instead of being copied into dst's buffers,
 * which stay untouched (dst gives the model's size and buffer count and
 * gets step and seed): a sharded rank keeps only what it holds, without a
 * whole-state copy. Outer momentum slices (l->buffer PX_STATE_OUTER_M)
 * come only when dst->nbuf is 4. place returns 0, or -1 (the load fails,
 * "out of memory"). */
typedef struct {
    int (*place)(void *ctx, const px_ckpt_logical_t *l, const px_ckpt_slice_t *s, const float *values);
    void *ctx;
} px_ckpt_sink_t;
int px_ckpt_load_to(const char *path, const px_gpt_config_t *cfg, px_train_state_t *dst, const px_ckpt_sink_t *sink,
                    px_ckpt_manifest_t *m, px_ckpt_fault_t *fault);

/* The run's tokenizer beside its checkpoints: DIR/tokenizer.json, a copy
 * of the data's (phalanx-data writes DATA/tokenizer.json), made when a job
 * starts, so that a tool reading a checkpoint can turn its model's ids into
 * text (phalanx-sample, the Hugging Face export). */
#define PX_CKPT_TOKENIZER "tokenizer.json"
/* Copies DATA/tokenizer.json into dir (created if missing). 1 copied, 0
 * when the data has none, -1 with err. */
int px_ckpt_keep_tokenizer(const char *dir, const char *data_dir, char *err, size_t errlen);
/* The tokenizer of the checkpoint at path (a step_N folder or the folder of
 * checkpoints): path/tokenizer.json, else its parent's. 1 with its path in
 * out, 0 when there is none. */
int px_ckpt_find_tokenizer(const char *path, char *out, size_t len);

/* The model a checkpoint holds, for a tool outside training: path is a
 * checkpoint (step_N), or a checkpoint folder whose newest checkpoint that
 * verifies is taken (its path into used[usedlen], when used is not NULL).
 * *model gets a new model with the parameters and AdamW moments; s is the
 * state over its buffers (with outer, a DiLoCo checkpoint's outer momentum
 * too, in s->buf[PX_STATE_OUTER_M], malloc'd: free it; else s->nbuf is 3).
 * 0, or -1 with the fault (the oldest one's, when none of a folder's
 * checkpoints verifies). */
int px_ckpt_open_model(const char *path, int outer, px_gpt_t **model, px_train_state_t *s, char *used,
                       size_t usedlen, px_ckpt_fault_t *fault);

/* Steps of the step_N folders in dir, newest first (*steps malloc'd). The
 * count, or -1 when dir cannot be read (0 when it does not exist). */
int px_ckpt_list(const char *dir, int64_t **steps);

/* Restores the newest checkpoint in dir that loads, into dst (staging), and
 * its step. Checkpoints of another job, seed or model, and corrupt ones, are
 * passed to on_reject (may be NULL) and skipped. Returns the step restored,
 * -1 when there is none to restore, -2 when every checkpoint found was
 * refused as another job's, seed's or model's (starting from scratch would
 * overwrite them: the caller should refuse to start). */
typedef void (*px_ckpt_reject_fn)(void *ctx, const char *path, const px_ckpt_fault_t *fault);
int64_t px_ckpt_restore_newest(const char *dir, const px_gpt_config_t *cfg, const char *job, uint64_t seed,
                               px_train_state_t *dst, px_ckpt_reject_fn on_reject, void *ctx);
/* The same through a sink (px_ckpt_load_to; NULL: into dst). When a step
 * is restored, m (may be NULL) receives its manifest (px_ckpt_manifest_free
 * it), which says whether it had the outer momentum (see px_ckpt_load). */
int64_t px_ckpt_restore_newest_to(const char *dir, const px_gpt_config_t *cfg, const char *job, uint64_t seed,
                                  px_train_state_t *dst, const px_ckpt_sink_t *sink, px_ckpt_manifest_t *m,
                                  px_ckpt_reject_fn on_reject, void *ctx);

/* Moves the checkpoint folder at path aside, to path.WHY-YYYYMMDDTHHMMSSZ
 * (UTC; a -N suffix when that exists), where listing, restore and retention
 * no longer see it: a damaged one ("corrupt"), or one a new save of the
 * same step meets ("replaced"). Nothing is deleted. With unless_read, a
 * folder another process is reading (its manifest locked) stays: the last
 * reader to find it damaged moves it. moved (may be NULL) receives the new
 * path. 0, or -1 with errno (ENOENT: somebody else moved it first; EBUSY:
 * being read). */
int px_ckpt_move_aside(const char *path, const char *why, int unless_read, char *moved, size_t len);
/* How many step folders in dir were moved aside as WHY. */
int px_ckpt_count_aside(const char *dir, const char *why);

/* Retention: keeps the `keep` newest step folders and always the one of step
 * `protect`; deletes the others that no reader holds (renamed away, then
 * removed). Also removes temporary folders of writers that died, once they
 * are an hour old. keep <= 0 keeps everything. Returns the number deleted. */
int px_ckpt_retain(const char *dir, int keep, int64_t protect);

#endif
