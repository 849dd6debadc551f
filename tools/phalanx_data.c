/* phalanx-data: turns text files into train/val token shards with the
 * byte-level tokenizer, for `phalanx-worker --data DIR` (model/dataprep.h).
 *   phalanx-data --out data/mytext --val-fraction 0.1 a.txt b.txt
 *   phalanx-data --out data/demo --demo      (Debian's fortunes, English) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataprep.h"
#include "px_err.h"
#include "px_flags.h"
#include "px_log.h"

static const char *PROG = "phalanx-data";

typedef struct {
    const char *out;
    double val_fraction;
    int demo;
} opts_t;

static const px_flag_t FLAGS[] = {
    {"--out", PX_FLAG_STR, "DIR", .max = 4096, .note = "required",
     .help = "output directory, created if missing", PX_FLAG_AT(opts_t, out)},
    {"--val-fraction", PX_FLAG_REAL, "F", .lo = 0, .hi = 0.9, .def = "0.1",
     .help = "share of each file for validation", PX_FLAG_AT(opts_t, val_fraction)},
    {"--demo", PX_FLAG_SWITCH,
     .help = "add the English text files of Debian's fortunes package (" PX_DEMO_CORPUS_DIR ")",
     PX_FLAG_AT(opts_t, demo)},
};
static const px_flag_table_t DATA_FLAGS = PX_FLAG_TABLE(NULL, FLAGS);

static const char USAGE[] =
    "usage: phalanx-data --out DIR [--val-fraction F] [--demo] [FILES...]\n"
    "Tokenizes text files byte by byte (vocabulary 256) into DIR/train_NNNNNN.bin and\n"
    "DIR/val_NNNNNN.bin (llm.c token shards). Each file's last F (cut at a line\n"
    "boundary) goes to val.\n";

int main(int argc, char **argv) {
    px_log_set_prog(PROG);
    opts_t o = {0};
    const px_flag_section_t sections[] = {{&DATA_FLAGS, &o, NULL}};
    const px_flags_spec_t spec = {.prog = PROG, .usage = USAGE, .sections = sections, .n_sections = 1,
                                  .max_operands = -1};
    px_flags_parsed_t given;
    px_flags_parse(&spec, argc, argv, &given);
    if (!o.out) {
        fprintf(stderr, "%s: --out DIR is required (see %s --help)\n", PROG, PROG);
        return 2;
    }
    char **files = calloc((size_t)given.n_operands + 1, sizeof(char *));
    if (!files) return 1;
    int nfiles = 0;
    for (int i = 0; i < given.n_operands; i++) {
        struct stat st;
        const char *bad = stat(given.operands[i], &st) != 0            ? strerror(errno)
                          : !S_ISREG(st.st_mode)                       ? "not a regular file"
                          : access(given.operands[i], R_OK) != 0       ? strerror(errno)
                                                                       : NULL;
        if (bad) { /* a typo is bad input (2), found before anything is written */
            fprintf(stderr, "%s: input '%s': %s\n", PROG, given.operands[i], bad);
            free(files);
            return 2;
        }
        files[nfiles++] = given.operands[i];
    }
    char err[PX_ERRLEN];
    char **demo_files = NULL;
    int ndemo = 0;
    if (o.demo) {
        if (px_dataprep_demo_files(&demo_files, &ndemo, err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", PROG, err);
            free(files);
            return 1;
        }
        char **all = realloc(files, ((size_t)nfiles + (size_t)ndemo + 1) * sizeof(char *));
        if (!all) return 1;
        files = all;
        for (int i = 0; i < ndemo; i++) files[nfiles++] = demo_files[i];
    }
    if (nfiles == 0) {
        fprintf(stderr, "%s: no input files: name some, or use --demo (see %s --help)\n", PROG,
                PROG);
        free(files);
        return 2;
    }
    px_dataprep_summary_t sum;
    int rc = px_dataprep_run(o.out, files, nfiles, o.val_fraction, 1, &sum, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "%s: %s\n", PROG, err);
    } else {
        printf("summary out=%s files=%zu bytes=%zu train_tokens=%zu train_shards=%d "
               "val_tokens=%zu val_shards=%d vocab=%d\n",
               o.out, sum.files, sum.bytes, sum.train_tokens, sum.train_shards, sum.val_tokens,
               sum.val_shards, PX_BYTE_VOCAB);
    }
    px_dataprep_free_list(demo_files);
    free(files);
    return rc == 0 ? 0 : 1;
}
