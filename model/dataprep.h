/* Turning text files into token shards with the byte-level tokenizer (token =
 * byte, vocabulary 256): the core of the `phalanx-data` command, kept in the
 * library so `phalanx-worker --standalone` can prepare its demo corpus on
 * first use with exactly the same code. */
#ifndef PX_DATAPREP_H
#define PX_DATAPREP_H

#include <stddef.h>

#define PX_BYTE_VOCAB 256
#define PX_DEMO_CORPUS_DIR "/usr/share/games/fortunes"
#define PX_SHARD_MAX_TOKENS 100000000 /* tokens per output shard, as llm.c */

typedef struct {
    size_t files;
    size_t bytes;
    size_t train_tokens, val_tokens;
    int train_shards, val_shards;
} px_dataprep_summary_t;

/* Tokenizes files in the given order. Each file is split at a line boundary
 * near (1 - val_fraction) of its length: the head goes to train, the tail to
 * val, so both splits cover every file. Writes out_dir/train_NNNNNN.bin and
 * out_dir/val_NNNNNN.bin (none for val when val_fraction is 0), creating
 * out_dir. verbose: one progress line per file on stdout. 0, or -1 with a
 * message naming the file. */
int px_dataprep_run(const char *out_dir, char *const *files, int nfiles, double val_fraction,
                    int verbose, px_dataprep_summary_t *summary, char *err, size_t errlen);

/* The demo corpus: the English text files of Debian's `fortunes` package in
 * PX_DEMO_CORPUS_DIR, sorted (regular files only: no .dat indexes, no .u8
 * links, no subdirectories such as off/). *files is a NULL-terminated array;
 * free it with px_dataprep_free_list. 0, or -1 with a message (e.g. the
 * package is not installed). */
int px_dataprep_demo_files(char ***files, int *nfiles, char *err, size_t errlen);
void px_dataprep_free_list(char **files);

#endif
