/* The Hugging Face folder (hf.h): its JSON files built with jansson (pure),
 * the export that writes them beside model.safetensors (safetensors.c's
 * layout with GPT2LMHeadModel's "transformer." prefix), and the import that
 * reads a folder back into a px_gpt_t, checking every tensor against the
 * plan the export would write for the same config. */
#include "hf.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model_config.h"
#include "px_err.h"
#include "px_file.h"
#include "px_tok.h"
#include "safetensors.h"
#include "train_state.h"

#define HEADER_MAX ((uint64_t)100 << 20) /* a larger safetensors header is refused unread */

/* ---- JSON ----------------------------------------------------------------- */

static char *dump(json_t *root) {
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(root);
    if (!text) return NULL;
    size_t n = strlen(text);
    char *t = realloc(text, n + 2); /* a final newline, as transformers writes */
    if (!t) {
        free(text);
        return NULL;
    }
    t[n] = '\n', t[n + 1] = '\0';
    return t;
}

/* An id, or null when there is none. */
static json_t *id_or_null(int id) { return id >= 0 ? json_integer(id) : json_null(); }

char *px_hf_config_json(const px_gpt_config_t *c, int eot_id) {
    json_t *root = json_object();
    json_object_set_new(root, "architectures", json_pack("[s]", "GPT2LMHeadModel"));
    json_object_set_new(root, "model_type", json_string("gpt2"));
    json_object_set_new(root, "n_layer", json_integer(c->num_layers));
    json_object_set_new(root, "n_head", json_integer(c->num_heads));
    json_object_set_new(root, "n_embd", json_integer(c->channels));
    json_object_set_new(root, "n_positions", json_integer(c->max_seq_len));
    json_object_set_new(root, "n_ctx", json_integer(c->max_seq_len));
    json_object_set_new(root, "n_inner", json_null());
    json_object_set_new(root, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(root, "activation_function", json_string("gelu_new"));
    json_object_set_new(root, "layer_norm_epsilon", json_real(1e-5));
    json_object_set_new(root, "initializer_range", json_real(0.02));
    /* phalanx trains without dropout; a fine-tune in transformers does the same unless told */
    json_object_set_new(root, "attn_pdrop", json_real(0.0));
    json_object_set_new(root, "embd_pdrop", json_real(0.0));
    json_object_set_new(root, "resid_pdrop", json_real(0.0));
    json_object_set_new(root, "scale_attn_weights", json_true());
    json_object_set_new(root, "scale_attn_by_inverse_layer_idx", json_false());
    json_object_set_new(root, "reorder_and_upcast_attn", json_false());
    json_object_set_new(root, "add_cross_attention", json_false());
    json_object_set_new(root, "tie_word_embeddings", json_true());
    json_object_set_new(root, "bos_token_id", id_or_null(eot_id));
    json_object_set_new(root, "eos_token_id", id_or_null(eot_id));
    json_object_set_new(root, "dtype", json_string("float32"));       /* transformers 5 */
    json_object_set_new(root, "torch_dtype", json_string("float32")); /* transformers 4 */
    json_object_set_new(root, "use_cache", json_true());
    return dump(root);
}

char *px_hf_generation_config_json(int eot_id) {
    json_t *root = json_object();
    if (eot_id >= 0) {
        json_object_set_new(root, "bos_token_id", json_integer(eot_id));
        json_object_set_new(root, "eos_token_id", json_integer(eot_id));
        json_object_set_new(root, "pad_token_id", json_integer(eot_id));
    }
    return dump(root);
}

char *px_hf_tokenizer_config_json(const char *eot_text, int max_len) {
    json_t *root = json_object();
    /* the generic class reads tokenizer.json as it is, whatever its pre-tokenizer */
    json_object_set_new(root, "tokenizer_class", json_string("PreTrainedTokenizerFast"));
    if (eot_text) {
        json_object_set_new(root, "bos_token", json_string(eot_text));
        json_object_set_new(root, "eos_token", json_string(eot_text));
        json_object_set_new(root, "unk_token", json_string(eot_text));
    }
    json_object_set_new(root, "add_bos_token", json_false());
    json_object_set_new(root, "add_prefix_space", json_false());
    json_object_set_new(root, "clean_up_tokenization_spaces", json_false());
    json_object_set_new(root, "model_max_length", json_integer(max_len));
    return dump(root);
}

/* ---- export --------------------------------------------------------------- */

static px_hf_status_t write_text(const char *dir, const char *name, char *text, char *err, size_t errlen) {
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = text ? px_file_write_atomic(path, text, strlen(text), NULL, 0, name, err, errlen)
                  : px_err_set(err, errlen, "%s: out of memory", path);
    free(text);
    return rc == 0 ? PX_HF_OK : PX_HF_IO_FAILED;
}

/* model.safetensors: the parameters only, with GPT2LMHeadModel's names. */
static px_hf_status_t write_weights(const char *dir, const px_gpt_t *model, int64_t step, char *err, size_t errlen) {
    char path[4300];
    snprintf(path, sizeof path, "%s/" PX_HF_WEIGHTS, dir);
    const px_gpt_config_t *cfg = &model->config;
    int n = px_safetensors_tensors(cfg, PX_STATE_NBUF, NULL);
    px_safetensors_tensor_t *t = n > 0 ? calloc((size_t)n, sizeof *t) : NULL;
    if (t) px_safetensors_tensors(cfg, PX_STATE_NBUF, t);
    for (int i = 0; t && i < n; i++) { /* the longest GPT-2 name is far below the room the prefix leaves */
        size_t len = strlen(t[i].name), plen = strlen(PX_HF_PREFIX);
        if (len + plen >= sizeof t[i].name) continue;
        memmove(t[i].name + plen, t[i].name, len + 1);
        memcpy(t[i].name, PX_HF_PREFIX, plen);
    }
    size_t hlen = 0;
    char *header = t ? px_safetensors_header(t, n, step, &hlen) : NULL;
    uint64_t bytes = header ? px_safetensors_data_bytes(t, n) : 0;
    float *data = header ? malloc(bytes ? bytes : 1) : NULL;
    int rc;
    if (!data) {
        rc = px_err_set(err, errlen, "%s: out of memory", path);
    } else {
        px_train_state_t s = {.n = model->num_params, .nbuf = PX_STATE_NBUF};
        s.buf[PX_STATE_PARAMS] = model->params;
        px_safetensors_fill(t, n, &s, data);
        rc = px_file_write_atomic(path, header, hlen, data, bytes, "safetensors file", err, errlen);
    }
    free(data);
    free(header);
    free(t);
    return rc == 0 ? PX_HF_OK : PX_HF_IO_FAILED;
}

px_hf_status_t px_hf_write(const char *dir, const px_gpt_t *model, int64_t step, const char *tokenizer, int *files,
                           char *err, size_t errlen) {
    const px_gpt_config_t *cfg = &model->config;
    int eot_id = -1;
    char eot_text[256] = "";
    *files = 0;
    if (tokenizer) { /* loaded first: a tokenizer that does not fit is refused before anything is written */
        char why[PX_ERRLEN];
        px_tok_t *tok = px_tok_load(tokenizer, why, sizeof why);
        if (!tok) {
            px_err_set(err, errlen, "tokenizer: %s", why);
            return PX_HF_BAD_INPUT;
        }
        int vocab = px_tok_vocab_size(tok);
        eot_id = px_tok_eot_id(tok);
        if (eot_id >= 0) snprintf(eot_text, sizeof eot_text, "%s", px_tok_eot_text(tok));
        px_tok_free(&tok);
        if (vocab > cfg->vocab_size) {
            px_err_set(err, errlen, "tokenizer '%s' has %d tokens, the model's vocabulary %d: not this model's "
                       "tokenizer (give the right one with --tokenizer FILE)", tokenizer, vocab, cfg->vocab_size);
            return PX_HF_BAD_INPUT;
        }
    }
    if (px_mkdirs(dir) != 0) {
        px_err_set(err, errlen, "cannot create the folder %s: %s", dir, strerror(errno));
        return PX_HF_IO_FAILED;
    }
    px_hf_status_t st = write_weights(dir, model, step, err, errlen);
    if (st == PX_HF_OK && tokenizer) {
        char dst[4300];
        snprintf(dst, sizeof dst, "%s/" PX_HF_TOKENIZER, dir);
        st = px_file_copy_atomic(tokenizer, dst, "tokenizer file", err, errlen) == 0 ? PX_HF_OK : PX_HF_IO_FAILED;
        if (st == PX_HF_OK)
            st = write_text(dir, PX_HF_TOKENIZER_CONFIG,
                            px_hf_tokenizer_config_json(eot_id >= 0 ? eot_text : NULL, cfg->max_seq_len), err,
                            errlen);
        *files += 2 * (st == PX_HF_OK);
    }
    if (st == PX_HF_OK) st = write_text(dir, PX_HF_GENERATION, px_hf_generation_config_json(eot_id), err, errlen);
    if (st == PX_HF_OK) st = write_text(dir, PX_HF_CONFIG, px_hf_config_json(cfg, eot_id), err, errlen);
    if (st == PX_HF_OK) *files += 3;
    return st;
}

/* ---- import: the config --------------------------------------------------- */

/* Keys that would make another function of the same weights: each must be
 * absent or have GPT-2's value. */
static int config_is_gpt2(json_t *root, const char *path, char *err, size_t errlen) {
    json_t *type = json_object_get(root, "model_type");
    if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "gpt2")))
        return px_err_set(err, errlen, "model config '%s': \"model_type\" %s: only GPT-2 (\"gpt2\") is imported", path,
                          json_is_string(type) ? json_string_value(type) : "is not a string");
    json_t *eps = json_object_get(root, "layer_norm_epsilon");
    if (eps && !(json_is_number(eps) && fabs(json_number_value(eps) - 1e-5) <= 1e-12))
        return px_err_set(err, errlen, "model config '%s': \"layer_norm_epsilon\" %g: phalanx's LayerNorm uses 1e-5",
                          path, json_is_number(eps) ? json_number_value(eps) : NAN);
    static const struct {
        const char *key;
        int want;
        const char *why;
    } FLAGS[] = {
        {"scale_attn_weights", 1, "phalanx's attention scales by 1/sqrt(head size)"},
        {"scale_attn_by_inverse_layer_idx", 0, "phalanx's attention does not scale by layer"},
        {"add_cross_attention", 0, "phalanx's GPT-2 is a decoder without cross-attention"},
    };
    for (size_t i = 0; i < sizeof FLAGS / sizeof *FLAGS; i++) {
        json_t *v = json_object_get(root, FLAGS[i].key);
        if (v && !json_is_null(v) && !(json_is_boolean(v) && json_boolean_value(v) == FLAGS[i].want))
            return px_err_set(err, errlen, "model config '%s': \"%s\" must be %s: %s", path, FLAGS[i].key,
                              FLAGS[i].want ? "true" : "false", FLAGS[i].why);
    }
    return 0;
}

int px_hf_read_config(const char *path, px_gpt_config_t *cfg, char *err, size_t errlen) {
    int has_vocab = 0;
    if (px_model_config_read(path, cfg, &has_vocab, err, errlen) != 0) return -1; /* shape, activation, tying */
    if (!has_vocab) return px_err_set(err, errlen, "model config '%s': no \"vocab_size\"", path);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return px_err_set(err, errlen, "model config '%s': %s (line %d)", path, je.text, je.line);
    int rc = config_is_gpt2(root, path, err, errlen);
    json_decref(root);
    return rc;
}

/* ---- import: the weights -------------------------------------------------- */

/* Non-parameters that older transformers saved: the causal mask buffers. */
static int is_mask_buffer(const char *name) {
    int layer, end = 0;
    if (sscanf(name, "h.%d.attn.bias%n", &layer, &end) == 1 && end && !name[end]) return 1;
    end = 0;
    return sscanf(name, "h.%d.attn.masked_bias%n", &layer, &end) == 1 && end && !name[end];
}

static const char *base_name(const char *name) {
    return strncmp(name, PX_HF_PREFIX, strlen(PX_HF_PREFIX)) ? name : name + strlen(PX_HF_PREFIX);
}

static void shape_text(int ndim, const int64_t *shape, char *out, size_t len) {
    size_t n = (size_t)snprintf(out, len, "[");
    for (int d = 0; d < ndim && n < len; d++)
        n += (size_t)snprintf(out + n, len - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < len) snprintf(out + n, len - n, "]");
}

/* Each entry of the file matched to the plan: match[i] is the entry of plan
 * tensor i; *lm_head the entry of a tied lm_head.weight (-1: none). Every
 * other entry is refused. */
static int match_entries(const px_safetensors_entry_t *e, int ne, const px_safetensors_tensor_t *plan, int np,
                         int *match, int *lm_head, const char *file, char *err, size_t errlen) {
    for (int i = 0; i < np; i++) match[i] = -1;
    *lm_head = -1;
    for (int k = 0; k < ne; k++) {
        const char *base = base_name(e[k].name);
        if (!strcmp(e[k].name, "lm_head.weight")) {
            *lm_head = k;
            continue;
        }
        if (is_mask_buffer(base)) continue;
        int i = 0;
        while (i < np && strcmp(plan[i].name, base)) i++;
        if (i == np)
            return px_err_set(err, errlen, "%s: tensor %s is not a parameter of GPT-2 as phalanx has it "
                              "(GPT2LMHeadModel's: " PX_HF_PREFIX "wte.weight, " PX_HF_PREFIX "h.N..., "
                              PX_HF_PREFIX "ln_f...)", file, e[k].name);
        if (match[i] >= 0)
            return px_err_set(err, errlen, "%s: tensor %s is there twice (as %s and %s)", file, plan[i].name,
                              e[match[i]].name, e[k].name);
        match[i] = k;
    }
    for (int i = 0; i < np; i++) {
        if (match[i] < 0)
            return px_err_set(err, errlen, "%s: no tensor " PX_HF_PREFIX "%s (config.json's GPT-2 has it)", file,
                              plan[i].name);
        const px_safetensors_entry_t *x = &e[match[i]];
        int same = x->ndim == plan[i].ndim && x->shape[0] == plan[i].shape[0] &&
                   (plan[i].ndim < 2 || x->shape[1] == plan[i].shape[1]);
        if (!same) {
            char got[96], want[96];
            shape_text(x->ndim, x->shape, got, sizeof got);
            shape_text(plan[i].ndim, plan[i].shape, want, sizeof want);
            return px_err_set(err, errlen, "%s: tensor %s has shape %s, config.json's GPT-2 makes it %s", file,
                              x->name, got, want);
        }
    }
    for (int k = 0; k < ne; k++) {
        if (is_mask_buffer(base_name(e[k].name))) continue;
        if (!px_safetensors_dtype_readable(e[k].dtype))
            return px_err_set(err, errlen, "%s: tensor %s is %s: only F32, F16 and BF16 are imported (F16 and BF16 "
                              "widened to float32 exactly)", file, e[k].name, e[k].dtype);
    }
    return 0;
}

/* Entry e's values as float32 into out (its element count), from the data
 * section at data_start of fd; raw is scratch of the entry's bytes. */
static int read_values(int fd, uint64_t data_start, const px_safetensors_entry_t *e, void *raw, float *out,
                       const char *file, char *err, size_t errlen) {
    size_t bytes = (size_t)(e->end - e->begin);
    size_t got = 0;
    while (got < bytes) {
        ssize_t r = pread(fd, (char *)raw + got, bytes - got, (off_t)(data_start + e->begin + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return px_err_set(err, errlen, "%s: reading tensor %s: %s", file, e->name, r ? strerror(errno)
                                                                                           : "truncated");
        got += (size_t)r;
    }
    size_t n = bytes / (size_t)px_safetensors_dtype_bytes(e->dtype);
    px_safetensors_to_f32(e->dtype, raw, n, out);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(out[i]))
            return px_err_set(err, errlen, "%s: tensor %s: element %zu is not finite", file, e->name, i);
    return 0;
}

/* The safetensors file's header, parsed; *data_start where its data begins. */
static int read_header(int fd, const char *file, px_safetensors_entry_t **e, uint64_t *data_start, char *err,
                       size_t errlen) {
    struct stat st;
    unsigned char len8[8];
    if (fstat(fd, &st) != 0) return px_err_set(err, errlen, "%s: %s", file, strerror(errno));
    if (px_fd_read_full(fd, len8, 8) != 8) return px_err_set(err, errlen, "%s: shorter than a safetensors header", file);
    uint64_t hlen = 0;
    for (int b = 7; b >= 0; b--) hlen = hlen << 8 | len8[b];
    if (hlen > HEADER_MAX || 8 + hlen > (uint64_t)st.st_size)
        return px_err_set(err, errlen, "%s: header length %llu does not fit the file's %lld bytes (not safetensors?)",
                          file, (unsigned long long)hlen, (long long)st.st_size);
    char *text = malloc(hlen ? hlen : 1);
    if (!text) return px_err_set(err, errlen, "%s: out of memory", file);
    int n = -1;
    if (px_fd_read_full(fd, text, hlen) != (ssize_t)hlen) {
        px_err_set(err, errlen, "%s: cannot read its header", file);
    } else {
        char why[PX_ERRLEN];
        n = px_safetensors_parse(text, hlen, (uint64_t)st.st_size - 8 - hlen, e, why, sizeof why);
        if (n < 0) px_err_set(err, errlen, "%s: %s", file, why);
    }
    free(text);
    *data_start = 8 + hlen;
    return n;
}

/* Fills model's parameters from the open file; *widened the F16/BF16 seen. */
static px_hf_status_t read_weights(int fd, const char *file, px_gpt_t *model, char widened[8], char *err,
                                   size_t errlen) {
    px_safetensors_entry_t *e = NULL;
    uint64_t data_start = 0;
    int ne = read_header(fd, file, &e, &data_start, err, errlen);
    if (ne < 0) return PX_HF_BAD_INPUT;
    int np = px_safetensors_tensors(&model->config, PX_STATE_NBUF, NULL);
    px_safetensors_tensor_t *plan = np > 0 ? calloc((size_t)np, sizeof *plan) : NULL;
    int *match = plan ? calloc((size_t)np, sizeof *match) : NULL;
    size_t most = 0; /* the largest entry we read, for the scratch */
    float *values = NULL, *wte = NULL;
    void *raw = NULL;
    int lm_head = -1;
    px_hf_status_t st = PX_HF_IO_FAILED;
    if (!match) {
        px_err_set(err, errlen, "%s: out of memory", file);
        goto out;
    }
    px_safetensors_tensors(&model->config, PX_STATE_NBUF, plan);
    if (match_entries(e, ne, plan, np, match, &lm_head, file, err, errlen) != 0) {
        st = PX_HF_BAD_INPUT;
        goto out;
    }
    for (int i = 0; i < np; i++)
        if (e[match[i]].end - e[match[i]].begin > most) most = (size_t)(e[match[i]].end - e[match[i]].begin);
    /* an F16 or BF16 entry takes twice its bytes as float32 */
    raw = malloc(most ? most : 1);
    values = malloc((most ? most : 1) * 2 + sizeof(float));
    if (!raw || !values) {
        px_err_set(err, errlen, "%s: out of memory", file);
        goto out;
    }
    widened[0] = '\0';
    st = PX_HF_BAD_INPUT;
    for (int i = 0; i < np; i++) {
        const px_safetensors_entry_t *x = &e[match[i]];
        if (strcmp(x->dtype, "F32")) snprintf(widened, 8, "%s", x->dtype);
        if (read_values(fd, data_start, x, raw, values, file, err, errlen) != 0) goto out;
        px_safetensors_place(&plan[i], values, model->params);
    }
    if (lm_head >= 0) { /* tied: it must be wte itself */
        const px_safetensors_entry_t *x = &e[lm_head];
        size_t rows = (size_t)model->config.vocab_size, C = (size_t)model->config.channels;
        if (x->ndim != 2 || (size_t)x->shape[0] != rows || (size_t)x->shape[1] != C) {
            px_err_set(err, errlen, "%s: tensor lm_head.weight is not (vocab_size, n_embd): phalanx ties it to "
                       PX_HF_PREFIX "wte.weight", file);
            goto out;
        }
        void *bigger = x->end - x->begin > most ? realloc(raw, (size_t)(x->end - x->begin)) : raw;
        if (bigger) raw = bigger;
        if (!bigger || !(wte = malloc(rows * C * sizeof(float)))) {
            st = PX_HF_IO_FAILED;
            px_err_set(err, errlen, "%s: out of memory", file);
            goto out;
        }
        if (read_values(fd, data_start, x, raw, wte, file, err, errlen) != 0) goto out;
        if (memcmp(wte, model->p.wte, rows * C * sizeof(float))) {
            px_err_set(err, errlen, "%s: tensor lm_head.weight differs from " PX_HF_PREFIX "wte.weight: phalanx's "
                       "GPT-2 ties the output projection to the token embedding", file);
            goto out;
        }
    }
    st = PX_HF_OK;
out:
    free(wte);
    free(raw);
    free(values);
    free(match);
    free(plan);
    free(e);
    return st;
}

/* Why a folder has no model.safetensors, when another file says. */
static void missing_weights(const char *dir, const char *file, char *err, size_t errlen) {
    static const struct {
        const char *name, *hint;
    } OTHERS[] = {
        {"model.safetensors.index.json", "a sharded save is not imported: save_pretrained with a max_shard_size "
                                         "above the model's size writes one file"},
        {"pytorch_model.bin", "only safetensors are imported: save_pretrained(..., safe_serialization=True)"},
    };
    for (size_t i = 0; i < sizeof OTHERS / sizeof *OTHERS; i++) {
        char p[4300];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, OTHERS[i].name);
        if (stat(p, &st) == 0) {
            px_err_set(err, errlen, "%s: missing; %s holds %s: %s", file, dir, OTHERS[i].name, OTHERS[i].hint);
            return;
        }
    }
    px_err_set(err, errlen, "%s: %s", file, strerror(errno));
}

px_hf_status_t px_hf_read(const char *dir, px_gpt_t **model, char widened[8], char *err, size_t errlen) {
    char cpath[4300], wpath[4300];
    snprintf(cpath, sizeof cpath, "%s/" PX_HF_CONFIG, dir);
    snprintf(wpath, sizeof wpath, "%s/" PX_HF_WEIGHTS, dir);
    *model = NULL;
    widened[0] = '\0';
    px_gpt_config_t cfg;
    struct stat st;
    if (stat(cpath, &st) != 0) {
        px_err_set(err, errlen, "%s: %s (a Hugging Face model folder holds config.json and model.safetensors)",
                   cpath, strerror(errno));
        return PX_HF_BAD_INPUT;
    }
    if (px_hf_read_config(cpath, &cfg, err, errlen) != 0) return PX_HF_BAD_INPUT;
    int fd = open(wpath, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        missing_weights(dir, wpath, err, errlen);
        return PX_HF_BAD_INPUT;
    }
    px_gpt_t *g = px_gpt_new_zeroed(&cfg);
    px_hf_status_t rc = g ? read_weights(fd, wpath, g, widened, err, errlen)
                          : (px_err_set(err, errlen, "%s: out of memory for its model", cpath), PX_HF_IO_FAILED);
    close(fd);
    if (rc != PX_HF_OK) px_gpt_destroy(&g);
    *model = g;
    return rc;
}
