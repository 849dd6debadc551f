/* Turning text into token shards: the core of the `phalanx-data` command,
 * kept in the library so `phalanx-worker --standalone` can prepare its demo
 * corpus on first use with exactly the same code. The tokenizer is a hook
 * (px_encoder_t): bytes as tokens (vocabulary 256) when none is given, or a
 * BPE tokenizer that phalanx-data wires in. Inputs are read by
 * text_source.h (files, folders, standard input, JSON Lines, gzip). */
#ifndef PX_DATAPREP_H
#define PX_DATAPREP_H

#include <stddef.h>
#include <stdint.h>

#define PX_BYTE_VOCAB 256
#define PX_DEMO_CORPUS_DIR "/usr/share/games/fortunes"
#define PX_SHARD_MAX_TOKENS 100000000 /* tokens per output shard, as llm.c */

#include "text_source.h"

typedef struct {
    size_t files, docs;
    size_t bytes;
    size_t train_tokens, val_tokens;
    int train_shards, val_shards;
} px_dataprep_summary_t;

/* A tokenizer as dataprep sees it: encode appends the ids of text[len] to a
 * growable array (*ids, *n, *cap). Every id must be < vocab_size, and
 * vocab_size at most PX_TOKEN_FILE_MAX_VOCAB (the shards hold uint16 ids). */
typedef struct {
    int (*encode)(void *arg, const char *text, size_t len, int32_t **ids, size_t *n, size_t *cap, char *err,
                  size_t errlen);
    void *arg;
    int vocab_size;
    int eot_id; /* the end-of-text token, written before every document; -1: none */
} px_encoder_t;

typedef struct {
    double val_fraction;         /* [0, 1): the share of the text kept for validation */
    px_text_format_t format;     /* AUTO: JSON Lines by name, else text */
    const char *jsonl_key;       /* the field holding a record's text; NULL: "text" */
    const px_encoder_t *encoder; /* NULL: bytes as tokens (PX_BYTE_VOCAB) */
    int verbose;                 /* 1: a progress line on stderr every second and at the end */
} px_dataprep_opts_t;

/* Tokenizes the inputs (expanded by px_text_inputs_expand, all checked before
 * anything is written) into out_dir/train_NNNNNN.bin and val_NNNNNN.bin,
 * creating out_dir. The validation split: a text file (one document) is cut
 * at a line boundary near (1 - val_fraction) of its length, its head to
 * train and its tail to val, so both splits cover every file; a JSONL record
 * goes whole to val when that keeps val's share of the bytes within
 * val_fraction, else to train. With an end-of-text token, each document (and
 * each of a cut file's two parts) starts with it. 0; -2 with a message
 * naming the input when an input is at fault (unreadable, not gzip, a
 * malformed JSONL record or one without the key); -1 with a message for
 * the rest (a shard that cannot be written, out of memory). */
int px_dataprep_run(const char *out_dir, char *const *inputs, int ninputs, const px_dataprep_opts_t *opts,
                    px_dataprep_summary_t *summary, char *err, size_t errlen);

/* The demo corpus: the English text files of Debian's `fortunes` package in
 * PX_DEMO_CORPUS_DIR, sorted (regular files only: no .dat indexes, no .u8
 * links, no subdirectories such as off/). *files is a NULL-terminated array;
 * free it with px_dataprep_free_list. 0, or -1 with a message (e.g. the
 * package is not installed). */
int px_dataprep_demo_files(char ***files, int *nfiles, char *err, size_t errlen);
void px_dataprep_free_list(char **files);

#endif
