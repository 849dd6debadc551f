/* --model resolved (model_config.h): presets from gpt.c, JSON configs read
 * with jansson, and the data's vocabulary from its tokenizer.json. Only the
 * keys that shape a GPT-2 are read; a config written by transformers (which
 * holds dozens more) is accepted as it is. */
#include "model_config.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "px_err.h"

int px_padded_vocab(int vocab) { return (vocab + 127) / 128 * 128; }

int px_model_config_is_json(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    int c;
    while ((c = fgetc(f)) == ' ' || c == '\t' || c == '\n' || c == '\r') {
    }
    fclose(f);
    return c == '{';
}

/* An integer key: 0 when absent (*v untouched), 1 when read, -1 when not a
 * positive integer. */
static int int_key(json_t *root, const char *key, int *v) {
    json_t *j = json_object_get(root, key);
    if (!j || json_is_null(j)) return 0;
    if (!json_is_integer(j) || json_integer_value(j) < 1 || json_integer_value(j) > (1 << 30)) return -1;
    *v = (int)json_integer_value(j);
    return 1;
}

int px_model_config_read(const char *path, px_gpt_config_t *cfg, int *has_vocab, char *err, size_t errlen) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return px_err_set(err, errlen, "model config '%s': %s (line %d)", path, je.text, je.line);
    int rc = -1;
    px_gpt_config_t c = {.vocab_size = 256};
    static const struct {
        const char *key, *alt; /* alt: an older name transformers still reads */
        size_t off;
        int required;
    } KEYS[] = {
        {"n_layer", "num_hidden_layers", offsetof(px_gpt_config_t, num_layers), 1},
        {"n_head", "num_attention_heads", offsetof(px_gpt_config_t, num_heads), 1},
        {"n_embd", "hidden_size", offsetof(px_gpt_config_t, channels), 1},
        {"n_positions", "n_ctx", offsetof(px_gpt_config_t, max_seq_len), 1},
        {"vocab_size", NULL, offsetof(px_gpt_config_t, vocab_size), 0},
    };
    *has_vocab = 0;
    if (!json_is_object(root)) {
        px_err_set(err, errlen, "model config '%s': not a JSON object", path);
        goto out;
    }
    for (size_t i = 0; i < sizeof KEYS / sizeof KEYS[0]; i++) {
        int *v = (int *)((char *)&c + KEYS[i].off);
        int got = int_key(root, KEYS[i].key, v);
        if (got == 0 && KEYS[i].alt) got = int_key(root, KEYS[i].alt, v);
        if (got < 0) {
            px_err_set(err, errlen, "model config '%s': \"%s\" must be a positive integer", path, KEYS[i].key);
            goto out;
        }
        if (got == 0 && KEYS[i].required) {
            px_err_set(err, errlen, "model config '%s': no \"%s\" (needed: n_layer, n_head, n_embd, n_positions)",
                       path, KEYS[i].key);
            goto out;
        }
        if (got > 0 && KEYS[i].off == offsetof(px_gpt_config_t, vocab_size)) *has_vocab = 1;
    }
    json_t *act = json_object_get(root, "activation_function");
    if (act && !(json_is_string(act) && (strcmp(json_string_value(act), "gelu_new") == 0 ||
                                         strcmp(json_string_value(act), "gelu_pytorch_tanh") == 0))) {
        px_err_set(err, errlen, "model config '%s': \"activation_function\" %s: phalanx's GPT-2 uses gelu_new (tanh)",
                   path, json_is_string(act) ? json_string_value(act) : "is not a string");
        goto out;
    }
    int inner = 0;
    if (int_key(root, "n_inner", &inner) < 0 || (inner && inner != 4 * c.channels)) {
        px_err_set(err, errlen, "model config '%s': \"n_inner\" must be null or 4 x n_embd (%d)", path,
                   4 * c.channels);
        goto out;
    }
    json_t *tie = json_object_get(root, "tie_word_embeddings");
    if (tie && json_is_false(tie)) {
        px_err_set(err, errlen, "model config '%s': \"tie_word_embeddings\" false: phalanx's GPT-2 ties the output "
                   "projection to the token embedding", path);
        goto out;
    }
    c.padded_vocab_size = px_padded_vocab(c.vocab_size);
    char why[256];
    if (px_gpt_config_check(&c, why, sizeof why) != 0) {
        px_err_set(err, errlen, "model config '%s': %s", path, why);
        goto out;
    }
    *cfg = c;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int px_data_vocab_size(const char *data_dir, int *vocab, char *err, size_t errlen) {
    *vocab = 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", data_dir);
    struct stat st;
    if (stat(path, &st) != 0) return errno == ENOENT ? 0 : px_err_set(err, errlen, "'%s': %s", path, strerror(errno));
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return px_err_set(err, errlen, "the data's tokenizer '%s': %s (line %d)", path, je.text, je.line);
    long long top = -1;
    json_t *v = json_object_get(json_object_get(root, "model"), "vocab");
    const char *k;
    json_t *id;
    json_object_foreach(v, k, id) if (json_is_integer(id) && json_integer_value(id) > top) top = json_integer_value(id);
    size_t i;
    json_t *added;
    json_array_foreach(json_object_get(root, "added_tokens"), i, added) {
        json_t *a = json_object_get(added, "id");
        if (json_is_integer(a) && json_integer_value(a) > top) top = json_integer_value(a);
    }
    json_decref(root);
    if (top < 0 || top >= (1 << 20)) return px_err_set(err, errlen, "the data's tokenizer '%s': no usable vocabulary", path);
    *vocab = (int)top + 1;
    return 0;
}

px_model_source_t px_model_resolve(const char *model, const char *data_dir, px_gpt_config_t *cfg, char *err,
                                   size_t errlen) {
    int data_vocab = 0;
    if (data_dir && px_data_vocab_size(data_dir, &data_vocab, err, errlen) != 0) return PX_MODEL_BAD;
    if (px_gpt_config_preset(model, cfg) == 0) {
        if (data_vocab) { /* a preset's vocabulary follows the data */
            cfg->vocab_size = data_vocab;
            cfg->padded_vocab_size = px_padded_vocab(data_vocab);
        }
        return PX_MODEL_DRAWN;
    }
    struct stat st;
    if (stat(model, &st) != 0 || !S_ISREG(st.st_mode)) {
        px_err_set(err, errlen, "'%s' is neither a preset (%s) nor a model file or JSON config", model,
                   px_gpt_preset_names());
        return PX_MODEL_BAD;
    }
    if (!px_model_config_is_json(model)) return PX_MODEL_FILE;
    int has_vocab;
    if (px_model_config_read(model, cfg, &has_vocab, err, errlen) != 0) return PX_MODEL_BAD;
    if (data_vocab && has_vocab && cfg->vocab_size != data_vocab) {
        px_err_set(err, errlen, "model config '%s' has vocab_size %d, the data's tokenizer (%s/tokenizer.json) %d: "
                   "make them equal, or leave vocab_size out to follow the data", model, cfg->vocab_size, data_dir,
                   data_vocab);
        return PX_MODEL_BAD;
    }
    if (data_vocab && !has_vocab) {
        cfg->vocab_size = data_vocab;
        cfg->padded_vocab_size = px_padded_vocab(data_vocab);
    }
    return PX_MODEL_DRAWN;
}
