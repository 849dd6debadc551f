/* phalanx-ckpt: the operator's command line for checkpoints (checkpoint/ckpt.h).
 *   phalanx-ckpt list DIR [--verify]      the step_N folders of DIR, newest first
 *   phalanx-ckpt verify PATH              the full check a restoring worker makes
 *   phalanx-ckpt inspect PATH [--json]    what a checkpoint holds
 *   phalanx-ckpt export PATH --llmc FILE | --safetensors FILE
 *   phalanx-ckpt export PATH OUTDIR --format hf [--tokenizer FILE]
 *   phalanx-ckpt import --llmc FILE --out DIR [--job NAME] [--seed N]
 *   phalanx-ckpt import --format hf HFDIR --out DIR [--job NAME] [--seed N]
 * The verdict on a checkpoint is always px_ckpt_load's (sizes and XXH3 of
 * every data file, the manifest's every check), so this tool and a worker
 * never disagree about one; `list` adds a cheap look that reads no data (the
 * manifest and the data files' sizes). Export and import move weights between
 * checkpoints and the llm.c and Hugging Face worlds: a safetensors file
 * (checkpoint/safetensors.c, pure) or a whole Hugging Face model folder
 * with the run's tokenizer (checkpoint/hf.c).
 *
 * Exit status: 0 done; 1 an output could not be written (disk full,
 * permissions); 2 a bad command line, or an input that is missing,
 * unreadable or corrupt, with the file and the fault named on stderr. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ckpt.h"
#include "hf.h"
#include "llmc.h"
#include "px_err.h"
#include "px_file.h"
#include "px_flags.h"
#include "px_tok.h"
#include "px_version.h"
#include "safetensors.h"

#define PATH_MAX_LEN 4000 /* checkpoint paths are built in 4200-byte buffers */

typedef struct {
    char prog[64];                /* "phalanx-ckpt CMD": messages point at that command's --help */
    const char *path;             /* the operand: DIR or PATH (import --format hf: HFDIR) */
    const char *outdir;           /* export's second operand (--format hf) */
    const char *llmc, *safetensors, *out, *job, *format, *tokenizer;
    uint64_t seed;
    int json, verify;
} opts_t;

typedef struct {
    const char *name;
    const char *operand;          /* "DIR", "PATH", or NULL when it takes none */
    int min_operands, max_operands;
    const px_flag_table_t *flags; /* the flags it accepts (NULL: none) */
    const char *usage, *epilogue; /* its --help around the flags */
    int (*run)(const opts_t *o);
} command_t;

/* ---- messages ------------------------------------------------------------ */

static void usage_error(const opts_t *o, const char *fmt, const char *arg) __attribute__((noreturn));
static void usage_error(const opts_t *o, const char *fmt, const char *arg) {
    fprintf(stderr, "%s: ", o->prog);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see %s --help)\n", o->prog);
    exit(2);
}

/* A checkpoint that cannot be used: the file and the fault, exit 2. When
 * PATH is the folder that holds the checkpoints, says which to give. */
static int bad_input(const char *path, const px_ckpt_fault_t *f) {
    fprintf(stderr, "phalanx-ckpt: %s: %s\n", f->file, f->fault);
    int64_t *steps;
    if (px_ckpt_list(path, &steps) > 0)
        fprintf(stderr, "phalanx-ckpt: hint: %s holds checkpoints: give one of them, e.g. %s/step_%08" PRId64
                " (see phalanx-ckpt list %s)\n", path, path, steps[0], path);
    free(steps);
    return 2;
}

static void format_time(int64_t ms, char *out, size_t len) {
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || !strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm)) snprintf(out, len, "?");
}

static uint64_t data_bytes(const px_ckpt_manifest_t *m) {
    uint64_t b = 0;
    for (int i = 0; i < m->nfiles; i++) b += m->files[i].bytes;
    return b;
}

/* ---- checks that read no data -------------------------------------------- */

/* ---- list ----------------------------------------------------------------- */

static void list_row(int64_t step, const px_ckpt_manifest_t *m, const px_ckpt_fault_t *bad) {
    char created[32] = "-", bytes[24] = "-";
    if (m) {
        format_time(m->created_ms, created, sizeof created);
        snprintf(bytes, sizeof bytes, "%" PRIu64, data_bytes(m));
    }
    printf("%-10" PRId64 " %-16s %-20s %14s %-16s ", step, m && m->job[0] ? m->job : "-", created, bytes,
           m && m->writer_group[0] ? m->writer_group : "-");
    if (bad) printf("bad: %s: %s\n", bad->file, bad->fault);
    else printf("ok\n");
}

/* Folders listing skips: writers' temporary folders (a save in progress,
 * or one whose writer died) and checkpoints moved aside (damaged, or met
 * by a new save of their step), kept until somebody removes them. */
static void list_aside(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strncmp(e->d_name, ".tmp-", 5))
            printf("%s/%s: in progress or abandoned (a writer's temporary folder; retention removes it after an "
                   "hour)\n", dir, e->d_name);
        else if (!strncmp(e->d_name, "step_", 5) && strstr(e->d_name, ".corrupt-"))
            printf("%s/%s: moved aside: it failed verification when a worker restored (kept; remove it when "
                   "done with it)\n", dir, e->d_name);
        else if (!strncmp(e->d_name, "step_", 5) && strstr(e->d_name, ".replaced-"))
            printf("%s/%s: moved aside: a later save of the same step replaced it (kept; remove it when done "
                   "with it)\n", dir, e->d_name);
    }
    if (d) closedir(d);
}

static int cmd_list(const opts_t *o) {
    struct stat st;
    int found = stat(o->path, &st) == 0;
    if (!found || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "phalanx-ckpt: %s: %s\n", o->path, found ? "not a folder" : strerror(errno));
        return 2;
    }
    int64_t *steps;
    int n = px_ckpt_list(o->path, &steps);
    if (n < 0) {
        fprintf(stderr, "phalanx-ckpt: %s: cannot read: %s\n", o->path, strerror(errno));
        return 2;
    }
    printf("%-10s %-16s %-20s %14s %-16s %s\n", "STEP", "JOB", "CREATED (UTC)", "BYTES", "WRITER", "STATUS");
    for (int i = 0; i < n; i++) {
        char path[4200];
        px_ckpt_path(o->path, steps[i], path, sizeof path);
        px_ckpt_manifest_t m;
        px_ckpt_fault_t f;
        memset(&f, 0, sizeof f);
        int have = px_ckpt_read_manifest(path, &m, &f) == 0;
        int ok = have && px_ckpt_check_files(path, &m, &f) == 0;
        if (ok && o->verify) ok = px_ckpt_load(path, NULL, NULL, NULL, &f) == 0;
        list_row(steps[i], have ? &m : NULL, ok ? NULL : &f);
        if (have) px_ckpt_manifest_free(&m);
    }
    if (n == 0) printf("(no checkpoints in %s)\n", o->path);
    list_aside(o->path);
    free(steps);
    return 0;
}

/* ---- verify --------------------------------------------------------------- */

static int cmd_verify(const opts_t *o) {
    px_ckpt_manifest_t m;
    px_ckpt_fault_t f;
    if (px_ckpt_load(o->path, NULL, NULL, &m, &f) != 0) return bad_input(o->path, &f);
    printf("ok step=%" PRId64 " bytes=%" PRIu64 " files=%d\n", m.step, data_bytes(&m), m.nfiles);
    px_ckpt_manifest_free(&m);
    return 0;
}

/* ---- inspect -------------------------------------------------------------- */

static void shape_text(int ndim, const int64_t *shape, char *out, size_t len) {
    size_t n = 0;
    out[0] = '\0';
    for (int d = 0; d < ndim && n < len; d++)
        n += (size_t)snprintf(out + n, len - n, "%s%" PRId64, d ? "x" : "", shape[d]);
}

static void print_tensor(const px_ckpt_manifest_t *m, const px_ckpt_tensor_t *t) {
    char shape[96];
    shape_text(t->ndim, t->shape, shape, sizeof shape);
    printf("  %-44s %-12s", t->name, shape);
    for (int j = 0; j < t->nslices; j++) {
        const px_ckpt_slice_t *s = &t->slices[j];
        printf("%s%s@%" PRIu64 " [", j ? "; " : " ", m->files[s->file].name, s->offset);
        for (int d = 0; d < t->ndim; d++)
            printf("%s%" PRId64 ":%" PRId64, d ? ", " : "", s->start[d], s->start[d] + s->count[d]);
        printf("]");
    }
    printf("\n");
}

static void print_manifest(const char *path, const px_ckpt_manifest_t *m) {
    const px_gpt_config_t *c = &m->model;
    size_t sizes[PX_GPT_NUM_TENSORS];
    char created[32];
    format_time(m->created_ms, created, sizeof created);
    printf("checkpoint   %s\n", path);
    printf("format       phalanx-checkpoint version %d\n", m->format_version);
    printf("step         %" PRId64 "\n", m->step);
    printf("job          %s\n", m->job[0] ? m->job : "(none: restores into any job)");
    printf("seed         %" PRIu64 "\n", m->seed);
    printf("quorum_id    %" PRId64 "\n", m->quorum_id);
    printf("created      %s (unix ms %" PRId64 ")\n", created, m->created_ms);
    printf("model        L=%d C=%d NH=%d maxT=%d V=%d Vp=%d params=%zu\n", c->num_layers, c->channels, c->num_heads,
           c->max_seq_len, c->vocab_size, c->padded_vocab_size, px_gpt_tensor_sizes(c, sizes));
    printf("layout       groups=%d ranks_per_group=%d fsdp=%d tp=%d pp=%d writer_group=%s\n", m->groups,
           m->ranks_per_group, m->fsdp, m->tp, m->pp, m->writer_group[0] ? m->writer_group : "-");
    if (m->has_schedule)
        printf("schedule     steps=%lld lr=%g min_lr=%g warmup=%lld global_batch=%lld seq=%lld\n",
               (long long)m->schedule.steps, m->schedule.lr, m->schedule.min_lr, (long long)m->schedule.warmup,
               (long long)m->schedule.global_batch, (long long)m->schedule.seq_len);
    else
        printf("schedule     - (not recorded: an import, or an older build)\n");
    printf("state        params, m, v%s\n",
           m->outer_momentum ? ", outer momentum (DiLoCo: " PX_CKPT_OUTER_PREFIX "NAME)" : " (no outer momentum)");
    printf("\nfiles (%d, %" PRIu64 " bytes)\n  %-32s %14s  %s\n", m->nfiles, data_bytes(m), "NAME", "BYTES",
           "XXH3-64");
    for (int i = 0; i < m->nfiles; i++)
        printf("  %-32s %14" PRIu64 "  %016" PRIx64 "\n", m->files[i].name, m->files[i].bytes, m->files[i].xxh3);
    printf("\ntensors (%d)\n  %-44s %-12s SLICES (FILE@OFFSET [START:END, ...])\n", m->ntensors, "NAME", "SHAPE");
    for (int i = 0; i < m->ntensors; i++) print_tensor(m, &m->tensors[i]);
}

/* The manifest's text as it is on disk (it has just been read and checked). */
static int print_raw_manifest(const char *path) {
    char mpath[4200];
    snprintf(mpath, sizeof mpath, "%s/%s", path, PX_CKPT_MANIFEST);
    FILE *f = fopen(mpath, "rb");
    if (!f) {
        fprintf(stderr, "phalanx-ckpt: %s: cannot open: %s\n", mpath, strerror(errno));
        return 2;
    }
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, stdout);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "phalanx-ckpt: %s: cannot read\n", mpath);
        return 2;
    }
    return 0;
}

static int cmd_inspect(const opts_t *o) {
    px_ckpt_manifest_t m;
    px_ckpt_fault_t f;
    if (px_ckpt_read_manifest(o->path, &m, &f) != 0) return bad_input(o->path, &f);
    int rc = 0;
    if (o->json) rc = print_raw_manifest(o->path);
    else print_manifest(o->path, &m);
    px_ckpt_manifest_free(&m);
    return rc;
}

/* ---- export --------------------------------------------------------------- */

static int write_safetensors(const char *path, const px_gpt_config_t *cfg, const px_train_state_t *s, char *err,
                             size_t errlen) {
    int n = px_safetensors_tensors(cfg, s->nbuf, NULL);
    px_safetensors_tensor_t *t = n > 0 ? calloc((size_t)n, sizeof *t) : NULL;
    size_t hlen = 0;
    char *header = t && px_safetensors_tensors(cfg, s->nbuf, t) == n ? px_safetensors_header(t, n, s->step, &hlen)
                                                                      : NULL;
    uint64_t bytes = header ? px_safetensors_data_bytes(t, n) : 0;
    float *data = header ? malloc(bytes ? bytes : 1) : NULL;
    int rc;
    if (!data) {
        rc = px_err_set(err, errlen, "safetensors file '%s': out of memory", path);
    } else {
        px_safetensors_fill(t, n, s, data);
        rc = px_file_write_atomic(path, header, hlen, data, bytes, "safetensors file", err, errlen);
    }
    free(data);
    free(header);
    free(t);
    return rc;
}

/* The Hugging Face folder: the tokenizer is --tokenizer's, else the run's
 * beside the checkpoint (none for a byte-level run). 0, 1 (write) or 2 (a
 * tokenizer that cannot be used). */
static int export_hf(const opts_t *o, const px_gpt_t *model, int64_t step, const char *used) {
    char found[4300];
    const char *tok = o->tokenizer;
    if (!tok && px_ckpt_find_tokenizer(used, found, sizeof found)) tok = found;
    char err[PX_ERRLEN];
    int files = 0;
    px_hf_status_t st = px_hf_write(o->outdir, model, step, tok, &files, err, sizeof err);
    if (st != PX_HF_OK) {
        fprintf(stderr, "phalanx-ckpt: %s\n", err);
        return st == PX_HF_BAD_INPUT ? 2 : 1;
    }
    printf("exported format=hf path=%s step=%" PRId64 " files=%d vocab=%d tokenizer=%s\n", o->outdir, step, files,
           model->config.vocab_size, tok ? tok : "none");
    return 0;
}

static int cmd_export(const opts_t *o) {
    if (o->format && !o->outdir) usage_error(o, "%s", "--format hf needs OUTDIR: export PATH OUTDIR --format hf");
    if (o->outdir && !o->format) usage_error(o, "unexpected argument '%s' (OUTDIR goes with --format hf)", o->outdir);
    if (o->tokenizer && !o->format) usage_error(o, "%s", "--tokenizer goes with --format hf");
    if (!o->llmc && !o->safetensors && !o->format)
        usage_error(o, "%s", "nothing to export: give --llmc FILE, --safetensors FILE, --format hf OUTDIR or more");
    px_ckpt_fault_t f;
    px_gpt_t *model = NULL;
    px_train_state_t s;
    char used[4300];
    if (px_ckpt_open_model(o->path, 1, &model, &s, used, sizeof used, &f) != 0) {
        if (f.kind == PX_CKPT_UNAVAILABLE && strstr(f.fault, "out of memory")) {
            fprintf(stderr, "phalanx-ckpt: %s: out of memory for its model\n", o->path);
            return 1;
        }
        return bad_input(o->path, &f);
    }
    char err[PX_ERRLEN];
    int rc = 0;
    if (o->llmc && (rc = px_gpt_save(model, o->llmc, err, sizeof err)) == 0)
        printf("exported format=llmc path=%s step=%" PRId64 " params=%zu\n", o->llmc, s.step, model->num_params);
    if (o->safetensors && rc == 0 &&
        (rc = write_safetensors(o->safetensors, &model->config, &s, err, sizeof err)) == 0)
        printf("exported format=safetensors path=%s step=%" PRId64 " tensors=%d\n", o->safetensors, s.step,
               px_safetensors_tensors(&model->config, s.nbuf, NULL));
    if (rc != 0) fprintf(stderr, "phalanx-ckpt: %s\n", err);
    int status = rc == 0 ? 0 : 1;
    if (status == 0 && o->format) status = export_hf(o, model, s.step, used);
    free(s.nbuf == PX_STATE_MAXBUF ? s.buf[PX_STATE_OUTER_M] : NULL);
    px_gpt_destroy(&model);
    return status;
}

/* ---- import --------------------------------------------------------------- */

/* The tokenizer.json of a Hugging Face folder, when it has one: 1 (path in
 * out), 0 none, -1 one that cannot be used with the model (err). */
static int hf_tokenizer(const char *dir, const px_gpt_config_t *cfg, char *out, size_t len, char *err,
                        size_t errlen) {
    struct stat st;
    snprintf(out, len, "%s/" PX_HF_TOKENIZER, dir);
    if (stat(out, &st) != 0) return 0;
    char why[PX_ERRLEN];
    px_tok_t *tok = px_tok_load(out, why, sizeof why);
    if (!tok) return px_err_set(err, errlen, "tokenizer: %s", why);
    int vocab = px_tok_vocab_size(tok);
    px_tok_free(&tok);
    if (vocab > cfg->vocab_size)
        return px_err_set(err, errlen, "tokenizer '%s' has %d tokens, config.json's vocab_size is %d", out, vocab,
                          cfg->vocab_size);
    return 1;
}

/* The model to import: --llmc FILE, or the Hugging Face folder (with its
 * tokenizer's path in tok, "" for none). 0, or the exit status. */
static int import_model(const opts_t *o, px_gpt_t **model, char *tok, size_t toklen, char widened[8]) {
    char err[PX_ERRLEN];
    tok[0] = widened[0] = '\0';
    if (o->llmc) {
        if (px_gpt_load(o->llmc, model, err, sizeof err) == 0) return 0;
        fprintf(stderr, "phalanx-ckpt: %s\n", err);
        return 2;
    }
    px_hf_status_t st = px_hf_read(o->path, model, widened, err, sizeof err);
    int has = st == PX_HF_OK ? hf_tokenizer(o->path, &(*model)->config, tok, toklen, err, sizeof err) : 0;
    if (st == PX_HF_OK && has >= 0) {
        if (!has) tok[0] = '\0';
        return 0;
    }
    fprintf(stderr, "phalanx-ckpt: %s\n", err);
    px_gpt_destroy(model);
    return st == PX_HF_IO_FAILED ? 1 : 2;
}

static int cmd_import(const opts_t *o) {
    if (o->format && o->llmc) usage_error(o, "%s", "give --llmc FILE or --format hf HFDIR, not both");
    if (o->format && !o->path) usage_error(o, "%s", "--format hf needs HFDIR: import --format hf HFDIR --out DIR");
    if (!o->format && o->path) usage_error(o, "unexpected argument '%s' (HFDIR goes with --format hf)", o->path);
    if (!o->format && !o->llmc) usage_error(o, "%s", "import needs --llmc FILE or --format hf HFDIR");
    if (!o->out) usage_error(o, "%s", "import needs --out DIR");
    int64_t *steps;
    int n = px_ckpt_list(o->out, &steps);
    if (n < 0) {
        fprintf(stderr, "phalanx-ckpt: %s: cannot read: %s\n", o->out, strerror(errno));
        return 2;
    }
    int64_t newest = n > 0 ? steps[0] : -1;
    free(steps);
    if (newest > 0) {
        /* A job restores the newest checkpoint: the imported step 0 would be ignored. */
        fprintf(stderr, "phalanx-ckpt: %s: holds checkpoints up to step %" PRId64 ", which a job would restore "
                "instead of the imported weights; import into an empty folder\n", o->out, newest);
        return 2;
    }
    px_gpt_t *model = NULL;
    char err[PX_ERRLEN], tok[4300], widened[8];
    int rc = import_model(o, &model, tok, sizeof tok, widened);
    if (rc != 0) return rc;
    px_train_state_t s = px_state_of_model(model, 0, o->seed); /* step 0, moments zero */
    px_ckpt_meta_t meta = {.job = o->job ? o->job : "", .groups = 1, .ranks_per_group = 1,
                           .writer_group = "phalanx-ckpt"};
    px_ckpt_result_t res;
    rc = px_ckpt_write(o->out, &s, &model->config, &meta, &res, err, sizeof err);
    /* the run's tokenizer beside its checkpoints, where a job and the tools look */
    if (rc == 0 && tok[0] && px_ckpt_keep_tokenizer(o->out, o->path, err, sizeof err) < 0) rc = -1;
    if (rc == 0) {
        printf("imported path=%s step=0 params=%zu bytes=%" PRIu64 " job=%s seed=%" PRIu64, res.path,
               model->num_params, res.bytes, meta.job[0] ? meta.job : "-", o->seed);
        if (o->format)
            printf(" vocab=%d tokenizer=%s%s%s", model->config.vocab_size, tok[0] ? tok : "none",
                   widened[0] ? " widened=" : "", widened);
        printf("\n");
    } else {
        fprintf(stderr, "phalanx-ckpt: %s\n", err);
    }
    px_gpt_destroy(&model);
    return rc == 0 ? 0 : 1;
}

/* ---- the command line ----------------------------------------------------- */

#define OPT(member) PX_FLAG_AT(opts_t, member)

static const px_flag_t LIST[] = {
    {"--verify", PX_FLAG_SWITCH, .help = "also hash every data file (what `verify` does)", OPT(verify)},
};
static const px_flag_t INSPECT[] = {
    {"--json", PX_FLAG_SWITCH,
     .help = "print manifest.json as it is on disk (\"outer_momentum\": true or false in what this version writes)",
     OPT(json)},
};
static int is_hf(const char *v) { return !strcmp(v, "hf"); }

static const px_flag_t EXPORT[] = {
    {"--llmc", PX_FLAG_STR, "FILE", .max = PATH_MAX_LEN, .note = "none",
     .help = "an llm.c model file (version 3, fp32, padded vocabulary), which phalanx-worker --model FILE and "
             "llm.c load; the parameters only",
     OPT(llmc)},
    {"--safetensors", PX_FLAG_STR, "FILE", .max = PATH_MAX_LEN, .note = "none",
     .help = "the parameters in Hugging Face GPT-2 names and orientation: Conv1D weights (in, out), wte cut to "
             "the real vocabulary; a DiLoCo checkpoint's outer momentum too, as outer.momentum.NAME in its "
             "parameter's orientation",
     OPT(safetensors)},
    {"--format", PX_FLAG_STR, "hf", .max = 8, .note = "none", .valid = is_hf, .expect = "hf",
     .help = "hf: a Hugging Face model folder OUTDIR (model.safetensors with GPT2LMHeadModel's names, config.json, "
             "generation_config.json, and the run's tokenizer.json with tokenizer_config.json), which "
             "transformers' from_pretrained loads as it is",
     OPT(format)},
    {"--tokenizer", PX_FLAG_STR, "FILE", .max = PATH_MAX_LEN, .note = "the run's: tokenizer.json beside the checkpoint",
     .help = "with --format hf, the tokenizer.json to put in OUTDIR", OPT(tokenizer)},
};
static const px_flag_t IMPORT[] = {
    {"--llmc", PX_FLAG_STR, "FILE", .max = PATH_MAX_LEN, .note = "this or --format hf",
     .help = "the llm.c model file (version 3) to import", OPT(llmc)},
    {"--format", PX_FLAG_STR, "hf", .max = 8, .note = "none", .valid = is_hf, .expect = "hf",
     .help = "hf: import the Hugging Face GPT-2 folder HFDIR (config.json, model.safetensors in F32, F16 or BF16, "
             "and tokenizer.json when there is one, which goes beside the checkpoint as DIR/tokenizer.json)",
     OPT(format)},
    {"--out", PX_FLAG_STR, "DIR", .max = PATH_MAX_LEN, .note = "required",
     .help = "the checkpoint folder; it must hold no checkpoint after step 0, which a job would restore instead",
     OPT(out)},
    {"--job", PX_FLAG_STR, "NAME", .max = 63, .note = "none: any job", .help = "the job it belongs to", OPT(job)},
    {"--seed", PX_FLAG_INT, "N", .min = 0, .max = INT64_MAX, .def = "1337",
     .help = "the job's seed (data order), which the job must use", OPT(seed)},
};

static const px_flag_table_t LIST_FLAGS = PX_FLAG_TABLE("", LIST);
static const px_flag_table_t INSPECT_FLAGS = PX_FLAG_TABLE("", INSPECT);
static const px_flag_table_t EXPORT_FLAGS = PX_FLAG_TABLE("", EXPORT);
static const px_flag_table_t IMPORT_FLAGS = PX_FLAG_TABLE("", IMPORT);

static const command_t commands[] = {
    {"list", "DIR", 1, 1, &LIST_FLAGS,
     "usage: phalanx-ckpt list DIR [--verify]\n"
     "One line per step_N folder of DIR, newest first: step, job, creation time (UTC),\n"
     "data bytes, writer group, and `ok` or `bad: FILE: FAULT`. Without --verify the\n"
     "check reads no data: the manifest, the folder's step, each data file's size.\n"
     "Writers' temporary folders (.tmp-*) are listed as in progress or abandoned, and checkpoints\n"
     "moved aside (step_N.corrupt-TIME, step_N.replaced-TIME) as such.\n",
     "Exit status: 0 when DIR was listed (bad checkpoints are in their lines), 2 when\n"
     "DIR cannot be read.\n",
     cmd_list},
    {"verify", "PATH", 1, 1, NULL,
     "usage: phalanx-ckpt verify PATH\n"
     "The full check of the checkpoint folder PATH (DIR/step_N), the one a restoring\n"
     "worker makes: the manifest (the outer momentum, when there, whole) and every\n"
     "data file's size and XXH3-64.\n",
     "Prints `ok step=N bytes=B files=F` and exits 0; a bad checkpoint exits 2 with\n"
     "`phalanx-ckpt: FILE: FAULT` on stderr.\n",
     cmd_verify},
    {"inspect", "PATH", 1, 1, &INSPECT_FLAGS,
     "usage: phalanx-ckpt inspect PATH [--json]\n"
     "What the checkpoint folder PATH holds, from its manifest (no data is read): step,\n"
     "job, seed, quorum id, model config, layout, the state's buffers (params, m, v, and\n"
     "a DiLoCo job's outer momentum when it has one), each file (name, bytes, XXH3-64)\n"
     "and each tensor (name, shape, slices).\n",
     "Exit status: 0, or 2 when the manifest is missing or corrupt.\n",
     cmd_inspect},
    {"export", "PATH", 1, 2, &EXPORT_FLAGS,
     "usage: phalanx-ckpt export PATH [--llmc FILE] [--safetensors FILE]\n"
     "       phalanx-ckpt export PATH OUTDIR --format hf [--tokenizer FILE]\n"
     "Verifies the checkpoint folder PATH (or, for a folder of checkpoints, its newest\n"
     "one that verifies), loads its parameters and writes them (each file atomically:\n"
     "a temporary file beside it, fsync, rename):\n",
     "At least one of the three. docs/huggingface.md describes the Hugging Face folder.\n"
     "Exit status: 0; 1 when a file cannot be written; 2 when the checkpoint or the\n"
     "tokenizer is bad (file and fault on stderr).\n",
     cmd_export},
    {"import", "HFDIR", 0, 1, &IMPORT_FLAGS,
     "usage: phalanx-ckpt import --llmc FILE --out DIR [--job NAME] [--seed N]\n"
     "       phalanx-ckpt import --format hf HFDIR --out DIR [--job NAME] [--seed N]\n"
     "Writes the weights of an llm.c model file, or of a Hugging Face GPT-2 folder, as\n"
     "the step-0 checkpoint DIR/step_00000000 (AdamW moments zero), so that a job\n"
     "started with --checkpoint-dir DIR --seed N and the same model (for a Hugging Face\n"
     "folder: --model HFDIR/config.json) trains on from those weights.\n",
     "A config or tensor that is not GPT-2 as phalanx has it is refused, naming it\n"
     "(docs/huggingface.md). Exit status: 0; 1 when the checkpoint cannot be written;\n"
     "2 when the input is bad.\n",
     cmd_import},
};

static void usage(void) {
    printf("usage: phalanx-ckpt COMMAND [ARGS] [flags]\n"
           "Lists, checks, inspects and converts phalanx checkpoints.\n\n"
           "commands:\n"
           "  list DIR [--verify]                 the checkpoints in DIR, newest first, ok or bad\n"
           "  verify PATH                         full check of one checkpoint (sizes, XXH3-64)\n"
           "  inspect PATH [--json]               its step, job, seed, model, files and tensors\n"
           "  export PATH --llmc FILE | --safetensors FILE\n"
           "                                      its weights as an llm.c or safetensors file\n"
           "  export PATH OUTDIR --format hf [--tokenizer FILE]\n"
           "                                      a Hugging Face model folder (weights, config,\n"
           "                                      tokenizer) that transformers loads\n"
           "  import --llmc FILE --out DIR [--job NAME] [--seed N]\n"
           "                                      an llm.c model file as a step-0 checkpoint\n"
           "  import --format hf HFDIR --out DIR [--job NAME] [--seed N]\n"
           "                                      a Hugging Face GPT-2 folder as a step-0 checkpoint\n"
           "PATH is one checkpoint folder, DIR/step_<8 digits>.\n"
           "`phalanx-ckpt COMMAND --help` describes each command.\n\n"
           "Exit status: 0 done; 1 an output could not be written; 2 a bad command line, or an\n"
           "input that is missing, unreadable or corrupt (stderr names the file and the fault).\n");
}

/* The command's flags and its operand, from the words after the command. */
static void parse(const command_t *c, int argc, char **argv, opts_t *o) {
    const px_flag_section_t flags = {c->flags, o, NULL};
    const px_flags_spec_t spec = {.prog = o->prog, .usage = c->usage, .epilogue = c->epilogue, .sections = &flags,
                                  .n_sections = c->flags ? 1 : 0, .max_operands = c->max_operands};
    px_flags_parsed_t given;
    px_flags_parse(&spec, argc, argv, &given);
    if (given.n_operands) o->path = px_flag_str(o->prog, c->operand, given.operands[0], PATH_MAX_LEN);
    if (given.n_operands > 1) o->outdir = px_flag_str(o->prog, "OUTDIR", given.operands[1], PATH_MAX_LEN);
    if (given.n_operands < c->min_operands) usage_error(o, "missing %s", c->operand);
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--version")) {
        printf("phalanx-ckpt %s\n", px_version());
        return 0;
    }
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage();
        return argc < 2 ? 2 : 0;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
        const command_t *c = &commands[i];
        if (strcmp(argv[1], c->name)) continue;
        opts_t o = {0};
        snprintf(o.prog, sizeof o.prog, "phalanx-ckpt %s", c->name);
        parse(c, argc - 1, argv + 1, &o);
        return c->run(&o);
    }
    fprintf(stderr, "phalanx-ckpt: unknown command '%s' (see phalanx-ckpt --help)\n", argv[1]);
    return 2;
}
