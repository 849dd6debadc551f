/* A Hugging Face model folder for phalanx's GPT-2, both ways: what
 * `phalanx-ckpt export --format hf` writes so that transformers'
 * AutoModelForCausalLM and AutoTokenizer load it with no code of ours, and
 * what `phalanx-ckpt import --format hf` reads from a folder that
 * GPT2LMHeadModel.save_pretrained (or that export) wrote.
 *
 * The folder:
 *   model.safetensors        the parameters as GPT2LMHeadModel's state dict
 *                            names them (transformer.wte.weight,
 *                            transformer.h.0.attn.c_attn.weight, ...), float32,
 *                            Conv1D weights (in, out), wte with the real
 *                            vocabulary's V rows; no lm_head.weight, which is
 *                            tied to wte (safetensors.h has the layout)
 *   config.json              GPT2Config: the shape, gelu_new, LayerNorm 1e-5,
 *                            tied embeddings, no dropout (phalanx trains
 *                            without), bos/eos the tokenizer's end-of-text id
 *                            or null (GPT2Config's default is GPT-2's 50256,
 *                            which another vocabulary does not have)
 *   generation_config.json   bos, eos and pad: the end-of-text id, or none
 *   tokenizer.json           the run's tokenizer, when it had one
 *   tokenizer_config.json    PreTrainedTokenizerFast over tokenizer.json, with
 *                            the end-of-text token as bos, eos and unk
 * Each file is written atomically (common/px_file.h); config.json last, so a
 * folder an interrupted export left has no config and loads as nothing.
 *
 * Import is strict where a difference would change the function the
 * weights compute: a config that is not GPT-2 as phalanx has it (model_type,
 * activation, LayerNorm epsilon, attention scaling, untied or
 * cross-attention), a tensor missing, of another shape, of a dtype that is
 * not F32, F16 or BF16 (the last two widened to float32 exactly), a tensor
 * that is no GPT-2 parameter, an lm_head.weight that differs from wte, or a
 * non-finite value: each is refused, naming the key or tensor. docs/
 * huggingface.md is the reference. The JSON texts are built without I/O. */
#ifndef PX_HF_H
#define PX_HF_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h"

#define PX_HF_WEIGHTS "model.safetensors"
#define PX_HF_CONFIG "config.json"
#define PX_HF_GENERATION "generation_config.json"
#define PX_HF_TOKENIZER "tokenizer.json"
#define PX_HF_TOKENIZER_CONFIG "tokenizer_config.json"
#define PX_HF_PREFIX "transformer." /* GPT2LMHeadModel's base model */

typedef enum {
    PX_HF_OK,
    PX_HF_BAD_INPUT,   /* a folder, config, tensor or tokenizer that cannot be used: err names it */
    PX_HF_IO_FAILED    /* a file could not be written, or memory ran out */
} px_hf_status_t;

/* ---- the folder's JSON (pure; malloc'd text, NULL when out of memory) --- */

/* config.json of a model of config cfg; eot_id < 0: no tokenizer (bos and
 * eos null). */
char *px_hf_config_json(const px_gpt_config_t *cfg, int eot_id);
/* generation_config.json: bos, eos and pad eot_id, or no ids. */
char *px_hf_generation_config_json(int eot_id);
/* tokenizer_config.json: eot_text (NULL: none) as bos, eos and unk;
 * model_max_length the context. */
char *px_hf_tokenizer_config_json(const char *eot_text, int max_len);

/* ---- export ---------------------------------------------------------- */

/* Writes the folder dir (created when missing) for model's parameters at
 * step `step`, with the tokenizer.json at tokenizer (NULL: none; it must
 * load and fit the model's vocabulary). *files counts the files written. */
px_hf_status_t px_hf_write(const char *dir, const px_gpt_t *model, int64_t step, const char *tokenizer, int *files,
                           char *err, size_t errlen);

/* ---- import ---------------------------------------------------------- */

/* The model config of dir/config.json, checked to be phalanx's GPT-2 (the
 * keys above; vocab_size required). 0, or -1 with err naming the key. */
int px_hf_read_config(const char *path, px_gpt_config_t *cfg, char *err, size_t errlen);

/* A new model (grads, m and v zero; wte's padding rows zero) from
 * dir/config.json and dir/model.safetensors; *widened is set to the
 * dtype the file held when it was F16 or BF16 (else ""). */
px_hf_status_t px_hf_read(const char *dir, px_gpt_t **model, char widened[8], char *err, size_t errlen);

#endif
