/* What `--model` names, resolved to a model: a preset, a JSON config in
 * Hugging Face's GPT-2 `config.json` keys (n_layer, n_head, n_embd,
 * n_positions, vocab_size), or an llm.c model file (weights included). A
 * preset or a config is drawn from the seed; a file is loaded.
 *
 * The vocabulary follows the data: when the data folder holds a
 * tokenizer.json (phalanx-data --tokenizer writes it there), a preset takes
 * that tokenizer's size, and a config that names another size is an error
 * naming both, before anything trains. The padded vocabulary (rows of the
 * embedding) is the vocabulary rounded up to a multiple of 128, as GPT-2's
 * 50257 becomes 50304, so the classifier's matmuls stay aligned. */
#ifndef PX_MODEL_CONFIG_H
#define PX_MODEL_CONFIG_H

#include <stddef.h>

#include "gpt.h"

typedef enum {
    PX_MODEL_DRAWN, /* a preset or a JSON config: *cfg holds it, draw it from the seed */
    PX_MODEL_FILE,  /* an llm.c model file: load it (px_gpt_load) */
    PX_MODEL_BAD    /* a config that cannot be used, or a vocabulary mismatch: err says why */
} px_model_source_t;

/* Resolves `model` for training on the shards in data_dir (NULL: no data to
 * follow). A name that is neither a preset nor an existing file is BAD. */
px_model_source_t px_model_resolve(const char *model, const char *data_dir, px_gpt_config_t *cfg, char *err,
                                   size_t errlen);

/* Reads a JSON model config. *has_vocab says whether it names vocab_size
 * (when not, the vocabulary is 256 until the data says otherwise). Keys that
 * would change the architecture away from GPT-2 (activation_function other
 * than gelu_new, n_inner other than 4 n_embd, untied embeddings) are errors
 * naming the key; keys that do not shape the model are ignored. */
int px_model_config_read(const char *path, px_gpt_config_t *cfg, int *has_vocab, char *err, size_t errlen);

/* Whether path is a JSON file (its first non-blank byte is '{'). */
int px_model_config_is_json(const char *path);

/* The vocabulary size of the data in data_dir: that of its tokenizer.json
 * (the largest id of its vocabulary and added tokens, plus one), or 0 when
 * the folder holds none (byte-level data). -1 with err for a tokenizer.json
 * that cannot be read. */
int px_data_vocab_size(const char *data_dir, int *vocab, char *err, size_t errlen);

/* V rounded up to a multiple of 128. */
int px_padded_vocab(int vocab);

#endif
