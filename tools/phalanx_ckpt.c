/* phalanx-ckpt: the operator's command line for checkpoints (checkpoint/ckpt.h).
 *   phalanx-ckpt list DIR [--verify]      the step_N folders of DIR, newest first
 *   phalanx-ckpt verify PATH              the full check a restoring worker makes
 *   phalanx-ckpt inspect PATH [--json]    what a checkpoint holds
 *   phalanx-ckpt export PATH --llmc FILE | --safetensors FILE
 *   phalanx-ckpt import --llmc FILE --out DIR [--job NAME] [--seed N]
 * The verdict on a checkpoint is always px_ckpt_load's (sizes and XXH3 of
 * every data file, the manifest's every check), so this tool and a worker
 * never disagree about one; `list` adds a cheap look that reads no data (the
 * manifest and the data files' sizes). Export and import move weights between
 * checkpoints and the llm.c and Hugging Face (safetensors) worlds; the
 * safetensors layout is checkpoint/safetensors.c, pure.
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
#include "llmc.h"
#include "px_err.h"
#include "px_file.h"
#include "px_flags.h"
#include "px_version.h"
#include "safetensors.h"

#define PATH_MAX_LEN 4000 /* checkpoint paths are built in 4200-byte buffers */

typedef struct {
    char prog[64];                /* "phalanx-ckpt CMD": messages point at that command's --help */
    const char *path;             /* the operand: DIR or PATH */
    const char *llmc, *safetensors, *out, *job;
    uint64_t seed;
    int json, verify;
} opts_t;

typedef struct {
    const char *name;
    const char *operand;          /* "DIR", "PATH", or NULL when it takes none */
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

static int cmd_export(const opts_t *o) {
    if (!o->llmc && !o->safetensors)
        usage_error(o, "%s", "nothing to export: give --llmc FILE, --safetensors FILE or both");
    px_ckpt_fault_t f;
    px_gpt_t *model = NULL;
    px_train_state_t s;
    if (px_ckpt_open_model(o->path, 1, &model, &s, NULL, 0, &f) != 0) {
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
    free(s.nbuf == PX_STATE_MAXBUF ? s.buf[PX_STATE_OUTER_M] : NULL);
    px_gpt_destroy(&model);
    if (rc != 0) fprintf(stderr, "phalanx-ckpt: %s\n", err);
    return rc == 0 ? 0 : 1;
}

/* ---- import --------------------------------------------------------------- */

static int cmd_import(const opts_t *o) {
    if (!o->llmc) usage_error(o, "%s", "import needs --llmc FILE");
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
    char err[PX_ERRLEN];
    if (px_gpt_load(o->llmc, &model, err, sizeof err) != 0) {
        fprintf(stderr, "phalanx-ckpt: %s\n", err);
        return 2;
    }
    px_train_state_t s = px_state_of_model(model, 0, o->seed); /* step 0, moments zero */
    px_ckpt_meta_t meta = {.job = o->job ? o->job : "", .groups = 1, .ranks_per_group = 1,
                           .writer_group = "phalanx-ckpt"};
    px_ckpt_result_t res;
    int rc = px_ckpt_write(o->out, &s, &model->config, &meta, &res, err, sizeof err);
    if (rc == 0)
        printf("imported path=%s step=0 params=%zu bytes=%" PRIu64 " job=%s seed=%" PRIu64 "\n", res.path,
               model->num_params, res.bytes, meta.job[0] ? meta.job : "-", o->seed);
    else
        fprintf(stderr, "phalanx-ckpt: %s\n", err);
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
};
static const px_flag_t IMPORT[] = {
    {"--llmc", PX_FLAG_STR, "FILE", .max = PATH_MAX_LEN, .note = "required",
     .help = "the llm.c model file (version 3) to import", OPT(llmc)},
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
    {"list", "DIR", &LIST_FLAGS,
     "usage: phalanx-ckpt list DIR [--verify]\n"
     "One line per step_N folder of DIR, newest first: step, job, creation time (UTC),\n"
     "data bytes, writer group, and `ok` or `bad: FILE: FAULT`. Without --verify the\n"
     "check reads no data: the manifest, the folder's step, each data file's size.\n"
     "Writers' temporary folders (.tmp-*) are listed as in progress or abandoned, and checkpoints\n"
     "moved aside (step_N.corrupt-TIME, step_N.replaced-TIME) as such.\n",
     "Exit status: 0 when DIR was listed (bad checkpoints are in their lines), 2 when\n"
     "DIR cannot be read.\n",
     cmd_list},
    {"verify", "PATH", NULL,
     "usage: phalanx-ckpt verify PATH\n"
     "The full check of the checkpoint folder PATH (DIR/step_N), the one a restoring\n"
     "worker makes: the manifest (the outer momentum, when there, whole) and every\n"
     "data file's size and XXH3-64.\n",
     "Prints `ok step=N bytes=B files=F` and exits 0; a bad checkpoint exits 2 with\n"
     "`phalanx-ckpt: FILE: FAULT` on stderr.\n",
     cmd_verify},
    {"inspect", "PATH", &INSPECT_FLAGS,
     "usage: phalanx-ckpt inspect PATH [--json]\n"
     "What the checkpoint folder PATH holds, from its manifest (no data is read): step,\n"
     "job, seed, quorum id, model config, layout, the state's buffers (params, m, v, and\n"
     "a DiLoCo job's outer momentum when it has one), each file (name, bytes, XXH3-64)\n"
     "and each tensor (name, shape, slices).\n",
     "Exit status: 0, or 2 when the manifest is missing or corrupt.\n",
     cmd_inspect},
    {"export", "PATH", &EXPORT_FLAGS,
     "usage: phalanx-ckpt export PATH [--llmc FILE] [--safetensors FILE]\n"
     "Verifies the checkpoint folder PATH (or, for a folder of checkpoints, its newest\n"
     "one that verifies), loads its parameters and writes them (atomically: a\n"
     "temporary file beside FILE, fsync, rename):\n",
     "At least one of the two. Exit status: 0; 1 when a file cannot be written; 2 when\n"
     "the checkpoint is bad (file and fault on stderr).\n",
     cmd_export},
    {"import", NULL, &IMPORT_FLAGS,
     "usage: phalanx-ckpt import --llmc FILE --out DIR [--job NAME] [--seed N]\n"
     "Writes the weights of an llm.c model file as the step-0 checkpoint DIR/step_00000000\n"
     "(AdamW moments zero), so that a job started with --checkpoint-dir DIR --seed N\n"
     "trains on from those weights.\n",
     "Exit status: 0; 1 when the checkpoint cannot be written; 2 when FILE is bad.\n",
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
           "  import --llmc FILE --out DIR [--job NAME] [--seed N]\n"
           "                                      an llm.c model file as a step-0 checkpoint\n"
           "PATH is one checkpoint folder, DIR/step_<8 digits>.\n"
           "`phalanx-ckpt COMMAND --help` describes each command.\n\n"
           "Exit status: 0 done; 1 an output could not be written; 2 a bad command line, or an\n"
           "input that is missing, unreadable or corrupt (stderr names the file and the fault).\n");
}

/* The command's flags and its operand, from the words after the command. */
static void parse(const command_t *c, int argc, char **argv, opts_t *o) {
    const px_flag_section_t flags = {c->flags, o, NULL};
    const px_flags_spec_t spec = {.prog = o->prog, .usage = c->usage, .epilogue = c->epilogue, .sections = &flags,
                                  .n_sections = c->flags ? 1 : 0, .max_operands = c->operand ? 1 : 0};
    px_flags_parsed_t given;
    px_flags_parse(&spec, argc, argv, &given);
    if (given.n_operands) o->path = px_flag_str(o->prog, c->operand, given.operands[0], PATH_MAX_LEN);
    if (c->operand && !o->path) usage_error(o, "missing %s", c->operand);
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
