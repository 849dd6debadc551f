/* phalanx-data: turns text into train/val token shards for
 * `phalanx-worker --data DIR` (model/dataprep.h). Inputs: text files,
 * folders of them, standard input ("-"), JSON Lines, any of these gzipped.
 *   phalanx-data --out data/mytext --val-fraction 0.1 a.txt corpus/ b.jsonl.gz
 *   zcat x.gz | phalanx-data --out data/x -
 *   phalanx-data --out data/demo --demo      (Debian's fortunes, English) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    int format;
    const char *jsonl_key;
} opts_t;

static const char *const FORMATS[] = {"auto", "text", "jsonl", NULL}; /* px_text_format_t's order */

static const px_flag_t FLAGS[] = {
    {"--out", PX_FLAG_STR, "DIR", .max = 4096, .note = "required",
     .help = "output directory, created if missing", PX_FLAG_AT(opts_t, out)},
    {"--val-fraction", PX_FLAG_REAL, "F", .lo = 0, .hi = 0.9, .def = "0.1",
     .help = "share of the text kept for validation", PX_FLAG_AT(opts_t, val_fraction)},
    {"--format", PX_FLAG_CHOICE, .words = FORMATS, .def = "auto",
     .help = "auto: names ending .jsonl or .ndjson (then .gz or not) are JSON Lines, the rest text",
     PX_FLAG_AT(opts_t, format)},
    {"--jsonl-key", PX_FLAG_STR, "KEY", .max = 256, .def = "text",
     .help = "the field of each JSON Lines record that holds its text", PX_FLAG_AT(opts_t, jsonl_key)},
    {"--demo", PX_FLAG_SWITCH,
     .help = "add the English text files of Debian's fortunes package (" PX_DEMO_CORPUS_DIR ")",
     PX_FLAG_AT(opts_t, demo)},
};
static const px_flag_table_t DATA_FLAGS = PX_FLAG_TABLE(NULL, FLAGS);

static const char USAGE[] =
    "usage: phalanx-data --out DIR [--val-fraction F] [--format auto|text|jsonl] [--jsonl-key KEY] [--demo]\n"
    "                    [INPUT...]\n"
    "Tokenizes text into DIR/train_NNNNNN.bin and DIR/val_NNNNNN.bin (llm.c token\n"
    "shards), byte by byte (vocabulary 256). An INPUT is a text file (one document),\n"
    "a folder (every file below it, sorted by path), - for standard input, or JSON\n"
    "Lines (a document per record); gzip-compressed inputs are read as they are.\n"
    "A text file's last F (cut at a line boundary) goes to val; JSONL records go\n"
    "whole to val while val holds at most F of the bytes. Progress goes to stderr.\n";

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
    for (int i = 0; i < given.n_operands; i++) files[nfiles++] = given.operands[i];
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
        fprintf(stderr, "%s: no inputs: name files, folders or - (standard input), or use --demo (see %s --help)\n",
                PROG, PROG);
        free(files);
        return 2;
    }
    /* Every input is checked before anything is written: a typo is bad input. */
    char **expanded = NULL;
    int nexpanded = 0;
    if (px_text_inputs_expand(files, nfiles, &expanded, &nexpanded, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", PROG, err);
        px_dataprep_free_list(demo_files);
        free(files);
        return 2;
    }
    px_text_files_free(expanded);
    if (nfiles == 1 && strcmp(files[0], "-") == 0 && isatty(STDIN_FILENO))
        fprintf(stderr, "%s: reading text from the terminal (end with Ctrl-D)\n", PROG);
    const px_dataprep_opts_t dopts = {.val_fraction = o.val_fraction, .format = (px_text_format_t)o.format,
                                      .jsonl_key = o.jsonl_key, .verbose = 1};
    px_dataprep_summary_t sum;
    int rc = px_dataprep_run(o.out, files, nfiles, &dopts, &sum, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "%s: %s\n", PROG, err);
    } else if (sum.train_tokens == 0) {
        fprintf(stderr, "%s: the inputs hold no text for training (%zu bytes read)\n", PROG, sum.bytes);
        rc = -1;
    } else {
        printf("summary out=%s files=%zu docs=%zu bytes=%zu train_tokens=%zu train_shards=%d "
               "val_tokens=%zu val_shards=%d vocab=%d\n",
               o.out, sum.files, sum.docs, sum.bytes, sum.train_tokens, sum.train_shards, sum.val_tokens,
               sum.val_shards, PX_BYTE_VOCAB);
    }
    px_dataprep_free_list(demo_files);
    free(files);
    return rc == 0 ? 0 : 1;
}
