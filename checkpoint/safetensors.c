/* The safetensors export of a model's parameters (and outer momentum), pure
 * (safetensors.h): the tensor plan is derived from the checkpoint's logical
 * tensors, so a name or shape exists in one place only (ckpt_format.c); this
 * file adds what Hugging Face's orientation and vocabulary need, and the
 * header's JSON (jansson). */
#include "safetensors.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"

/* Conv1D weights: stored (in, out) by Hugging Face, (out, in) here. */
static int is_conv1d_weight(const char *name) {
    static const char *const suffixes[] = {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight",
                                           ".mlp.c_proj.weight"};
    size_t len = strlen(name);
    for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++) {
        size_t sl = strlen(suffixes[i]);
        if (len > sl && !strcmp(name + len - sl, suffixes[i])) return 1;
    }
    return 0;
}

int px_safetensors_tensors(const px_gpt_config_t *cfg, int nbuf, px_safetensors_tensor_t *out) {
    int nlog = px_ckpt_logical_tensors(cfg, nbuf, NULL);
    px_ckpt_logical_t *lt = nlog > 0 ? calloc((size_t)nlog, sizeof *lt) : NULL;
    if (!lt) return -1;
    px_ckpt_logical_tensors(cfg, nbuf, lt);
    int n = 0;
    uint64_t pos = 0;
    for (int i = 0; i < nlog; i++) {
        if (lt[i].buffer != PX_STATE_PARAMS && lt[i].buffer != PX_STATE_OUTER_M) continue; /* not AdamW's moments */
        if (out) {
            px_safetensors_tensor_t *t = &out[n];
            /* the parameter's name: an outer momentum tensor takes its parameter's orientation and rows */
            const char *param = lt[i].buffer == PX_STATE_OUTER_M ? lt[i].name + strlen(PX_CKPT_OUTER_PREFIX)
                                                                 : lt[i].name;
            snprintf(t->name, sizeof t->name, "%s", lt[i].name);
            t->ndim = lt[i].ndim;
            t->shape[0] = lt[i].shape[0];
            t->shape[1] = t->ndim > 1 ? lt[i].shape[1] : 1;
            t->buffer = lt[i].buffer;
            t->src = lt[i].offset;
            t->transpose = is_conv1d_weight(param);
            if (t->transpose) t->shape[0] = lt[i].shape[1], t->shape[1] = lt[i].shape[0];
            if (!strcmp(param, "wte.weight")) t->shape[0] = cfg->vocab_size; /* the padding rows go */
            t->begin = pos;
            t->end = pos + (uint64_t)t->shape[0] * (uint64_t)(t->ndim > 1 ? t->shape[1] : 1) * sizeof(float);
            pos = t->end;
        }
        n++;
    }
    free(lt);
    return n;
}

uint64_t px_safetensors_data_bytes(const px_safetensors_tensor_t *t, int n) { return n > 0 ? t[n - 1].end : 0; }

char *px_safetensors_header(const px_safetensors_tensor_t *t, int n, int64_t step, size_t *len) {
    json_t *root = json_object();
    char stepstr[32];
    snprintf(stepstr, sizeof stepstr, "%lld", (long long)step);
    json_object_set_new(root, "__metadata__",
                        json_pack("{s:s, s:s, s:s}", "format", "pt", "step", stepstr, "source", "phalanx"));
    for (int i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++) json_array_append_new(shape, json_integer(t[i].shape[d]));
        json_object_set_new(root, t[i].name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype", "F32", "shape", shape, "data_offsets",
                                      (json_int_t)t[i].begin, (json_int_t)t[i].end));
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text) return NULL;
    size_t tlen = strlen(text), padded = (tlen + 7) & ~(size_t)7;
    char *h = malloc(8 + padded);
    if (h) {
        for (int b = 0; b < 8; b++) h[b] = (char)(((uint64_t)padded >> (8 * b)) & 0xff); /* little-endian */
        memcpy(h + 8, text, tlen);
        memset(h + 8 + tlen, ' ', padded - tlen);
        *len = 8 + padded;
    }
    free(text);
    return h;
}

void px_safetensors_fill(const px_safetensors_tensor_t *t, int n, const px_train_state_t *s, float *data) {
    for (int i = 0; i < n; i++) {
        const float *src = s->buf[t[i].buffer] + t[i].src;
        float *dst = data + t[i].begin / sizeof(float);
        int64_t rows = t[i].shape[0], cols = t[i].ndim > 1 ? t[i].shape[1] : 1;
        if (!t[i].transpose) {
            memcpy(dst, src, (size_t)(rows * cols) * sizeof(float));
            continue;
        }
        /* dst (in, out) from src (out, in): dst[r][c] = src[c][r] */
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) dst[r * cols + c] = src[c * rows + r];
    }
}
