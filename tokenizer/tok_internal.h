/* The tokenizer's insides, shared by its files (not installed, not for
 * callers): the px_tok struct, the pre-tokenizer (tok_pretok.c), the merge
 * table and BPE (tok_bpe.c), the tokenizer.json reader/writer (tok_json.c).
 *
 * A px_tok_t keeps the HF document it came from (root) next to the tables
 * built from it: saving writes that document back, and the trainer builds a
 * document and goes through the same builder as a loaded file, so what phalanx
 * trains is checked by the very code that reads HF's files. */
#ifndef TOK_INTERNAL_H
#define TOK_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "px_map.h"
#include "px_tok.h"

/* ---- byte-level alphabet and pre-tokenizer (tok_pretok.c) ---- */

/* GPT-2's bytes_to_unicode: byte -> code point (U+0021..U+0143). */
uint32_t tok_byte_to_cp(uint8_t b);
/* The byte a code point of the alphabet stands for, or -1. */
int tok_cp_to_byte(uint32_t cp);
/* Converts a byte-level string (UTF-8) to the bytes it stands for:
 * *out (malloc'd, len in *olen). 1 when every character is in the alphabet,
 * 0 when one is not (then *out holds the string's own UTF-8 bytes, which is
 * what HF's ByteLevel decoder emits for such a token), -1 out of memory. */
int tok_bytelevel_decode(const char *s, size_t len, char **out, size_t *olen);
/* The byte-level string (UTF-8) of raw bytes: appends to a malloc'd buffer. */
char *tok_bytelevel_encode(const char *b, size_t len);
/* Length of the valid UTF-8 prefix of s (Rust's definition: no surrogates,
 * no overlong forms, nothing above U+10FFFF). */
size_t tok_utf8_valid_prefix(const char *s, size_t len);

/* GPT-2's pre-tokenizer regex, as HF's ByteLevel(use_regex=true) has it. */
extern const char TOK_GPT2_PATTERN[];

/* One pre-tokenizer stage: optionally prepend a space (ByteLevel's
 * add_prefix_space), then optionally split by a regex, the matches and the
 * text between them becoming pieces (HF's "Isolated"). */
typedef struct {
    pcre2_code *re; /* NULL: no split */
    bool jit;
    bool add_prefix_space;
} tok_stage_t;

/* Compiles an HF (Oniguruma) pattern for PCRE2 (UTF, UCP, JIT when there),
 * rewriting \s and \S to Oniguruma's white space (which has U+0085). NULL +
 * err naming `what` (the file and field). */
pcre2_code *tok_regex_compile(const char *pattern, size_t plen, bool literal, bool *jit, const char *what,
                              char *err, size_t errlen);

/* ---- the tokenizer ---- */

typedef struct {
    char *content; /* UTF-8, len bytes */
    size_t len;
    int32_t id;
    bool special, lstrip, rstrip, normalized;
} tok_added_t;

/* Merge table: pair of ids -> (rank, merged id), open addressing. */
typedef struct {
    uint64_t key; /* (left << 32 | right) + 1; 0 = empty */
    int32_t rank;
    int32_t id;
} tok_merge_slot_t;

typedef struct tok_thread tok_thread_t;

#define TOK_MAX_STAGES 4

struct px_tok {
    json_t *root; /* the HF document (written back by px_tok_save) */
    char *path;   /* where it came from, for messages ("trained" for the trainer's) */
    int32_t vocab_size;
    /* Per id: the bytes it decodes to (off/len into bytes); has[] says
     * whether the id is assigned at all. */
    uint32_t *off, *len;
    uint8_t *has;
    char *bytes;
    px_map_t *vocab;       /* model token bytes -> id, for ignore_merges */
    int32_t byte_id[256];  /* the token of each single byte, -1 when none */
    int32_t unk_id;        /* -1: unknown bytes are dropped, as HF does */
    tok_merge_slot_t *merges;
    size_t merge_mask;
    bool ignore_merges;
    tok_added_t *added;
    int nadded;
    uint8_t added_first[256]; /* 1 when some added token starts with that byte */
    tok_stage_t stages[TOK_MAX_STAGES];
    int nstages;
    int eot_id;
    /* Per-thread encoding state (tok_bpe.c): found through the key, all of
     * them listed here so px_tok_free can free them. */
    pthread_key_t key;
    pthread_mutex_t lock;
    tok_thread_t *threads;
    bool threads_ready;
};

/* tok_bpe.c */
int tok_merges_init(px_tok_t *t, size_t n);
/* Adds a merge; a pair seen before takes the later rank, as in HF. -1 OOM. */
int tok_merges_put(px_tok_t *t, int32_t left, int32_t right, int32_t rank, int32_t id);
int tok_threads_init(px_tok_t *t);
void tok_threads_free(px_tok_t *t);

/* The pre-tokens of text as encode would make them, without BPE: word() is
 * called on each (added tokens are skipped). The trainer counts with it. */
int tok_pretokenize(const px_tok_t *t, const char *text, size_t len, int (*word)(void *arg, const char *p, size_t len),
                    void *arg, char *err, size_t errlen);

/* tok_json.c: a tokenizer from an HF document (taken over, freed on error);
 * path names it in messages. */
px_tok_t *tok_from_doc(json_t *root, const char *path, char *err, size_t errlen);
/* The document of a byte-level BPE as phalanx trains it (GPT-2's
 * pre-tokenizer, no prefix space), with an empty vocab and merge list that
 * the trainer fills, and eot_text as special added token eot_id. */
json_t *tok_doc_new(const char *eot_text, int eot_id);
/* Adds a model token (its raw bytes) / a merge (the raw bytes of its two
 * halves). -1 out of memory. */
int tok_doc_add_token(json_t *doc, const char *bytes, size_t len, int id);
int tok_doc_add_merge(json_t *doc, const char *a, size_t la, const char *b, size_t lb);

#endif
