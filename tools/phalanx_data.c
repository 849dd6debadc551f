/* phalanx-data: turns text into train/val token shards for
 * `phalanx-worker --data DIR` (model/dataprep.h). Inputs: text files,
 * folders of them, standard input ("-"), JSON Lines, any of these gzipped.
 * Tokens are bytes, or a byte-level BPE (tokenizer/px_tok.h): a Hugging Face
 * tokenizer.json given, or one trained here on the inputs; either is written
 * beside the shards as DIR/tokenizer.json, where the worker and the
 * checkpoint tools find it.
 *   phalanx-data --out data/mytext --val-fraction 0.1 a.txt corpus/ b.jsonl.gz
 *   phalanx-data --out data/bpe --train-tokenizer 8192 corpus/
 *   zcat x.gz | phalanx-data --out data/x --tokenizer gpt2/tokenizer.json -
 *   phalanx-data --out data/demo --demo      (Debian's fortunes, English) */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataprep.h"
#include "px_file.h"
#include "px_err.h"
#include "px_flags.h"
#include "px_log.h"
#include "px_time.h"
#include "px_tok.h"
#include "token_file.h"

static const char *PROG = "phalanx-data";

typedef struct {
    const char *out;
    double val_fraction;
    int demo;
    int format;
    const char *jsonl_key;
    const char *tokenizer;
    int train_vocab;
    const char *eot;
    int threads;
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
    {"--tokenizer", PX_FLAG_STR, "FILE", .max = 4096, .note = "bytes",
     .help = "a Hugging Face tokenizer.json (byte-level BPE: GPT-2, Llama 3, Qwen 2 style)",
     PX_FLAG_AT(opts_t, tokenizer)},
    {"--train-tokenizer", PX_FLAG_INT, "V", .min = 257, .max = 65536, .note = "off",
     .help = "learn a byte-level BPE of V tokens (the end-of-text token included) from the inputs first",
     PX_FLAG_AT(opts_t, train_vocab)},
    {"--eot", PX_FLAG_STR, "TEXT", .max = 64, .def = "<|endoftext|>",
     .help = "the end-of-text token a trained tokenizer gets", PX_FLAG_AT(opts_t, eot)},
    {"--threads", PX_FLAG_INT, "N", .min = 0, .max = 1024, .def = "0",
     .help = "threads that learn a tokenizer's merges, 0 = every core", PX_FLAG_AT(opts_t, threads)},
    {"--demo", PX_FLAG_SWITCH,
     .help = "add the English text files of Debian's fortunes package (" PX_DEMO_CORPUS_DIR ")",
     PX_FLAG_AT(opts_t, demo)},
};
static const px_flag_table_t DATA_FLAGS = PX_FLAG_TABLE(NULL, FLAGS);

static const char USAGE[] =
    "usage: phalanx-data --out DIR [--tokenizer FILE | --train-tokenizer V] [--val-fraction F]\n"
    "                    [--format auto|text|jsonl] [--jsonl-key KEY] [--demo] [INPUT...]\n"
    "Tokenizes text into DIR/train_NNNNNN.bin and DIR/val_NNNNNN.bin (llm.c token\n"
    "shards): byte by byte (vocabulary 256), or with a byte-level BPE tokenizer, given\n"
    "or learned from the inputs, which is written to DIR/tokenizer.json (with bytes, a\n"
    "tokenizer.json left there by an earlier run is removed). With a tokenizer, each\n"
    "document starts with its end-of-text token. An INPUT is a text file (one\n"
    "document), a folder (every file below it, sorted by path), - for standard input,\n"
    "or JSON Lines (a document per record); gzip-compressed inputs are read as they\n"
    "are. A text file's last F (cut at a line boundary) goes to val; JSONL records go\n"
    "whole to val while val holds at most F of the bytes. Progress goes to stderr.\n";

static const char EPILOGUE[] =
    "Exit status: 0; 1 when the shards cannot be written; 2 for bad flags, an input\n"
    "that does not exist or cannot be read, a malformed JSONL record, inputs that hold\n"
    "no text, a folder with no files, or a tokenizer file that cannot be used.\n";

static int tok_encode(void *arg, const char *text, size_t len, int32_t **ids, size_t *n, size_t *cap, char *err,
                      size_t errlen) {
    return px_tok_encode(arg, text, len, ids, n, cap, err, errlen);
}

/* ---- learning a tokenizer from the inputs -------------------------------- */

typedef struct {
    px_tok_trainer_t *tr;
    size_t docs, bytes;
    int64_t t0_ms, last_ms;
} feed_t;

static int feed_doc(void *arg, const char *source, px_doc_kind_t kind, const unsigned char *text, size_t len,
                    char *err, size_t errlen) {
    (void)source, (void)kind;
    feed_t *f = arg;
    f->docs++;
    f->bytes += len;
    int64_t now = px_now_ms();
    if (now - f->last_ms >= 1000) {
        f->last_ms = now;
        fprintf(stderr, "tokenizer_count docs=%zu bytes=%zu MB/s=%.1f\n", f->docs, f->bytes,
                (double)f->bytes / 1e3 / (double)(now - f->t0_ms + 1));
    }
    return px_tok_trainer_feed(f->tr, (const char *)text, len, err, errlen);
}

static void merges_progress(void *arg, int done, int total) {
    int64_t *last = arg, now = px_now_ms();
    if (done < total && now - *last < 1000) return;
    *last = now;
    fprintf(stderr, "tokenizer_merges done=%d total=%d\n", done, total);
}

/* Learns the tokenizer from every input (read once here, once more for the
 * shards). NULL with err. */
static px_tok_t *train(const opts_t *o, char **files, int nfiles, char *err, size_t errlen) {
    feed_t f = {.t0_ms = px_now_ms()};
    f.last_ms = f.t0_ms;
    if (!(f.tr = px_tok_trainer_new(o->train_vocab, o->eot, err, errlen))) return NULL;
    char **all = NULL;
    int n = 0, rc = px_text_inputs_expand(files, nfiles, &all, &n, err, errlen);
    size_t bytes = 0;
    for (int i = 0; rc == 0 && i < n; i++)
        rc = px_text_source_read(all[i], (px_text_format_t)o->format, o->jsonl_key, feed_doc, &f, &bytes, err,
                                 errlen);
    px_text_files_free(all);
    px_tok_t *t = NULL;
    if (rc == 0) {
        fprintf(stderr, "tokenizer_count docs=%zu bytes=%zu done\n", f.docs, f.bytes);
        int64_t last = 0;
        t = px_tok_trainer_finish(f.tr, o->threads, merges_progress, &last, err, errlen);
    }
    px_tok_trainer_free(&f.tr);
    return t;
}

/* DIR/tokenizer.json: the given file's own bytes (HF's fields kept as they
 * are), or the trained one; removed for byte-level shards. 0 or -1 with err. */
static int write_tokenizer(const opts_t *o, const px_tok_t *t, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", o->out);
    if (!t) {
        if (unlink(path) != 0 && errno != ENOENT)
            return px_err_set(err, errlen, "cannot remove the stale '%s': %s", path, strerror(errno));
        return 0;
    }
    if (!o->tokenizer) return px_tok_save(t, path, err, errlen);
    return px_file_copy_atomic(o->tokenizer, path, "tokenizer file", err, errlen);
}

/* The inputs named, plus the demo corpus with --demo: exits 2 when there
 * is none or one cannot be read (every one is checked before anything is
 * written). *demo is the list to free. */
static char **inputs(const opts_t *o, const px_flags_parsed_t *given, int *nfiles, char ***demo) {
    char err[PX_ERRLEN];
    int ndemo = 0;
    *demo = NULL;
    if (o->demo && px_dataprep_demo_files(demo, &ndemo, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", PROG, err);
        exit(1);
    }
    char **files = calloc((size_t)given->n_operands + (size_t)ndemo + 1, sizeof(char *));
    if (!files) exit(1);
    int n = 0;
    for (int i = 0; i < given->n_operands; i++) files[n++] = given->operands[i];
    for (int i = 0; i < ndemo; i++) files[n++] = (*demo)[i];
    if (n == 0) {
        fprintf(stderr, "%s: no inputs: name files, folders or - (standard input), or use --demo (see %s --help)\n",
                PROG, PROG);
        exit(2);
    }
    char **expanded = NULL;
    int nexpanded = 0, has_stdin = 0;
    if (px_text_inputs_expand(files, n, &expanded, &nexpanded, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", PROG, err);
        exit(2);
    }
    px_text_files_free(expanded);
    for (int i = 0; i < n; i++) has_stdin |= strcmp(files[i], "-") == 0;
    if (has_stdin && o->train_vocab) {
        fprintf(stderr, "%s: --train-tokenizer reads the inputs twice, and standard input can be read once: save "
                "it to a file first\n", PROG);
        exit(2);
    }
    if (n == 1 && has_stdin && isatty(STDIN_FILENO))
        fprintf(stderr, "%s: reading text from the terminal (end with Ctrl-D)\n", PROG);
    *nfiles = n;
    return files;
}

int main(int argc, char **argv) {
    px_log_set_prog(PROG);
    opts_t o = {0};
    const px_flag_section_t sections[] = {{&DATA_FLAGS, &o, NULL}};
    const px_flags_spec_t spec = {.prog = PROG, .usage = USAGE, .epilogue = EPILOGUE, .sections = sections,
                                  .n_sections = 1, .max_operands = -1};
    px_flags_parsed_t given;
    px_flags_parse(&spec, argc, argv, &given);
    if (!o.out) {
        fprintf(stderr, "%s: --out DIR is required (see %s --help)\n", PROG, PROG);
        return 2;
    }
    if (o.tokenizer && o.train_vocab) {
        fprintf(stderr, "%s: --tokenizer and --train-tokenizer: give one\n", PROG);
        return 2;
    }
    char err[PX_ERRLEN];
    px_tok_t *tok = NULL;
    if (o.tokenizer && !(tok = px_tok_load(o.tokenizer, err, sizeof err))) {
        fprintf(stderr, "%s: --tokenizer: %s\n", PROG, err);
        return 2;
    }
    if (tok && px_tok_vocab_size(tok) > PX_TOKEN_FILE_MAX_VOCAB) {
        fprintf(stderr, "%s: --tokenizer %s: %d tokens do not fit token shards (16-bit ids: at most %d)\n", PROG,
                o.tokenizer, px_tok_vocab_size(tok), PX_TOKEN_FILE_MAX_VOCAB);
        px_tok_free(&tok);
        return 2;
    }
    char **demo = NULL;
    int nfiles = 0;
    char **files = inputs(&o, &given, &nfiles, &demo);
    int rc = 0;
    if (px_mkdirs(o.out) != 0) { /* before a tokenizer is learned for nothing */
        fprintf(stderr, "%s: cannot create output directory '%s': %s\n", PROG, o.out, strerror(errno));
        free(files);
        px_dataprep_free_list(demo);
        px_tok_free(&tok);
        return 1;
    }
    if (o.train_vocab && !(tok = train(&o, files, nfiles, err, sizeof err))) {
        fprintf(stderr, "%s: --train-tokenizer: %s\n", PROG, err);
        rc = -1;
    }
    px_encoder_t enc = {.encode = tok_encode, .arg = tok, .vocab_size = tok ? px_tok_vocab_size(tok) : 0,
                        .eot_id = tok ? px_tok_eot_id(tok) : -1};
    const px_dataprep_opts_t dopts = {.val_fraction = o.val_fraction, .format = (px_text_format_t)o.format,
                                      .jsonl_key = o.jsonl_key, .encoder = tok ? &enc : NULL, .verbose = 1};
    px_dataprep_summary_t sum;
    if (rc == 0 && (rc = px_dataprep_run(o.out, files, nfiles, &dopts, &sum, err, sizeof err)) != 0) {
        fprintf(stderr, "%s: %s\n", PROG, err);
    } else if (rc == 0 && sum.train_tokens == 0) {
        fprintf(stderr, "%s: the inputs hold no text for training (%zu bytes read)\n", PROG, sum.bytes);
        rc = -2;
    } else if (rc == 0 && (rc = write_tokenizer(&o, tok, err, sizeof err)) != 0) {
        fprintf(stderr, "%s: %s\n", PROG, err);
    } else if (rc == 0) {
        printf("summary out=%s files=%zu docs=%zu bytes=%zu train_tokens=%zu train_shards=%d "
               "val_tokens=%zu val_shards=%d vocab=%d tokenizer=%s\n",
               o.out, sum.files, sum.docs, sum.bytes, sum.train_tokens, sum.train_shards, sum.val_tokens,
               sum.val_shards, tok ? px_tok_vocab_size(tok) : PX_BYTE_VOCAB,
               o.tokenizer ? "given" : tok ? "trained" : "bytes");
    }
    px_tok_free(&tok);
    px_dataprep_free_list(demo);
    free(files);
    return rc == 0 ? 0 : rc == -2 ? 2 : 1; /* -2: an input's fault */
}
