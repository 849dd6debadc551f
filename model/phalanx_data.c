/* phalanx-data: turns text files into train/val token shards with the
 * byte-level tokenizer, for `phalanx-worker --standalone --data DIR`.
 *   phalanx-data --out data/mytext --val-fraction 0.1 a.txt b.txt
 *   phalanx-data --out data/demo --demo      (Debian's fortunes, English) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataprep.h"
#include "px_err.h"
#include "px_flags.h"
#include "px_log.h"

static const char *PROG = "phalanx-data";

static void usage(FILE *to) {
    fprintf(to,
            "usage: %s --out DIR [--val-fraction F] [--demo] [FILES...]\n"
            "Tokenizes text files byte by byte (vocabulary 256) into DIR/train_NNNNNN.bin and\n"
            "DIR/val_NNNNNN.bin (llm.c token shards). Each file's last F (cut at a line\n"
            "boundary) goes to val.\n"
            "  --out DIR          output directory, created if missing (required)\n"
            "  --val-fraction F   share of each file for validation, in [0, 0.9] (default 0.1)\n"
            "  --demo             add the English text files of Debian's fortunes package\n"
            "                     (%s)\n"
            "  --help             this text\n",
            PROG, PX_DEMO_CORPUS_DIR);
}

int main(int argc, char **argv) {
    px_log_set_prog(PROG);
    const char *out = NULL;
    double val_fraction = 0.1;
    int demo = 0;
    char **files = calloc((size_t)argc + 1, sizeof(char *));
    int nfiles = 0;
    if (!files) return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            free(files);
            return 0;
        } else if (strcmp(a, "--out") == 0) {
            out = px_flag_str(PROG, a, i + 1 < argc ? argv[++i] : NULL, 4096);
        } else if (strcmp(a, "--val-fraction") == 0) {
            val_fraction = px_flag_double(PROG, a, i + 1 < argc ? argv[++i] : NULL, 0.0, 0.9);
        } else if (strcmp(a, "--demo") == 0) {
            demo = 1;
        } else if (a[0] == '-' && a[1] == '-') {
            px_flag_unknown(PROG, a);
        } else {
            files[nfiles++] = argv[i];
        }
    }
    if (!out) {
        fprintf(stderr, "%s: --out DIR is required (see %s --help)\n", PROG, PROG);
        free(files);
        return 2;
    }
    char err[PX_ERRLEN];
    char **demo_files = NULL;
    int ndemo = 0;
    if (demo) {
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
    int rc = px_dataprep_run(out, files, nfiles, val_fraction, 1, &sum, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "%s: %s\n", PROG, err);
    } else {
        printf("summary out=%s files=%zu bytes=%zu train_tokens=%zu train_shards=%d "
               "val_tokens=%zu val_shards=%d vocab=%d\n",
               out, sum.files, sum.bytes, sum.train_tokens, sum.train_shards, sum.val_tokens,
               sum.val_shards, PX_BYTE_VOCAB);
    }
    px_dataprep_free_list(demo_files);
    free(files);
    return rc == 0 ? 0 : 1;
}
