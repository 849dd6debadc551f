/* A byte-level BPE tokenizer that reads, writes and trains Hugging Face
 * `tokenizers` files (tokenizer.json), so phalanx can tokenize a corpus in C
 * with the same ids HF would give, and train a vocabulary on its own data.
 *
 * Supported: model BPE over GPT-2's byte-level alphabet, with the GPT-2
 * pre-tokenizer (ByteLevel, use_regex true) or a Split regex followed by
 * ByteLevel (Llama 3, Qwen 2); added/special tokens matched in the raw text
 * first, as HF does. docs/tokenizer.md is the reference: formats, the
 * behaviour on invalid UTF-8, the trainer's rule, how it is tested.
 *
 * Errors go into err[errlen] (px_err.h) and name the file, token or id at
 * fault. A loaded tokenizer is read-only: any number of threads may encode
 * and decode with one px_tok_t at once (each thread keeps its own scratch
 * space and cache, freed with the tokenizer). */
#ifndef PX_TOK_H
#define PX_TOK_H

#include <stddef.h>
#include <stdint.h>

typedef struct px_tok px_tok_t;

/* Reads a Hugging Face tokenizer.json (model.type "BPE" with byte-level
 * pre-tokenizer/decoder). NULL + err naming the file and what is wrong. */
px_tok_t *px_tok_load(const char *path, char *err, size_t errlen);
/* Writes tokenizer.json in HF's format, loadable by
 * tokenizers.Tokenizer.from_file. Atomic (temp file + rename). 0 or -1 + err. */
int px_tok_save(const px_tok_t *t, const char *path, char *err, size_t errlen);
void px_tok_free(px_tok_t **t);
/* Largest id + 1, added/special tokens included. */
int px_tok_vocab_size(const px_tok_t *t);
/* The end-of-text / document separator: a special added token such as
 * <|endoftext|> or <|end_of_text|>; -1 / NULL when there is none. */
int px_tok_eot_id(const px_tok_t *t);
const char *px_tok_eot_text(const px_tok_t *t);
/* Encodes len arbitrary bytes (need not be valid UTF-8) as HF
 * `tokenizer.encode(text, add_special_tokens=False)` would, appending ids to
 * the growable array (*ids, *n, *cap; realloc'd). Thread-safe. 0, or -1 with
 * err (out of memory, a regex failure). */
int px_tok_encode(const px_tok_t *t, const char *text, size_t len, int32_t **ids, size_t *n, size_t *cap,
                  char *err, size_t errlen);
/* Appends the bytes of ids to a growable buffer (*out, *len, *cap); an id
 * with no token is an error naming it. decode(encode(x)) == x for any bytes x
 * (with a tokenizer that has all 256 byte tokens and no add_prefix_space). */
int px_tok_decode(const px_tok_t *t, const int32_t *ids, size_t n, char **out, size_t *len, size_t *cap,
                  char *err, size_t errlen);

/* Training a byte-level BPE (GPT-2's scheme: the bytes_to_unicode alphabet,
 * the GPT-2 pre-tokenizer regex) of vocab_size tokens: the 256 byte tokens,
 * merges, and eot_text (e.g. "<|endoftext|>") as an added special token. */
typedef struct px_tok_trainer px_tok_trainer_t;
/* vocab_size >= 257. */
px_tok_trainer_t *px_tok_trainer_new(int vocab_size, const char *eot_text, char *err, size_t errlen);
/* One document at a time: pre-tokenizes it and counts its words; memory is
 * bounded by the number of distinct words. */
int px_tok_trainer_feed(px_tok_trainer_t *tr, const char *text, size_t len, char *err, size_t errlen);
/* Learns the merges using `threads` threads (0 = every core); calls
 * progress(arg, merges_done, merges_total) now and then (may be NULL).
 * Deterministic for a given input whatever the thread count. */
px_tok_t *px_tok_trainer_finish(px_tok_trainer_t *tr, int threads, void (*progress)(void *arg, int done, int total),
                                void *arg, char *err, size_t errlen);
void px_tok_trainer_free(px_tok_trainer_t **tr);

#endif
