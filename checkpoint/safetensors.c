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
#include "px_err.h"

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

/* ---- reading -------------------------------------------------------------- */

int px_safetensors_dtype_bytes(const char *dtype) {
    static const struct {
        const char *name;
        int bytes;
    } DTYPES[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
                  {"I8", 1},  {"U64", 8}, {"U32", 4}, {"U16", 2},  {"U8", 1},   {"BOOL", 1}, {"F8_E4M3", 1},
                  {"F8_E5M2", 1}};
    for (size_t i = 0; i < sizeof DTYPES / sizeof *DTYPES; i++)
        if (!strcmp(dtype, DTYPES[i].name)) return DTYPES[i].bytes;
    return 0;
}

int px_safetensors_dtype_readable(const char *dtype) {
    return !strcmp(dtype, "F32") || !strcmp(dtype, "F16") || !strcmp(dtype, "BF16");
}

static int parse_entry(const char *name, json_t *v, uint64_t data_bytes, px_safetensors_entry_t *e, char *err,
                       size_t errlen) {
    if (strlen(name) >= sizeof e->name) return px_err_set(err, errlen, "tensor name '%.60s...' too long", name);
    snprintf(e->name, sizeof e->name, "%s", name);
    json_t *dtype = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
           *offs = json_object_get(v, "data_offsets");
    if (!json_is_object(v) || !json_is_string(dtype) || !json_is_array(shape) || !json_is_array(offs) ||
        json_array_size(offs) != 2)
        return px_err_set(err, errlen, "tensor %s: needs \"dtype\", \"shape\" and \"data_offsets\" [begin, end]", name);
    int bytes = px_safetensors_dtype_bytes(json_string_value(dtype));
    if (!bytes) return px_err_set(err, errlen, "tensor %s: unknown dtype '%.16s'", name, json_string_value(dtype));
    snprintf(e->dtype, sizeof e->dtype, "%s", json_string_value(dtype));
    if (json_array_size(shape) > 4) return px_err_set(err, errlen, "tensor %s: more than 4 dimensions", name);
    e->ndim = (int)json_array_size(shape);
    uint64_t count = 1;
    for (int d = 0; d < e->ndim; d++) {
        json_t *dim = json_array_get(shape, (size_t)d);
        if (!json_is_integer(dim) || json_integer_value(dim) < 0 || json_integer_value(dim) > ((json_int_t)1 << 40))
            return px_err_set(err, errlen, "tensor %s: shape[%d] is not a size", name, d);
        e->shape[d] = json_integer_value(dim);
        count *= (uint64_t)e->shape[d];
        if (count > ((uint64_t)1 << 40)) return px_err_set(err, errlen, "tensor %s: too many elements", name);
    }
    json_t *b = json_array_get(offs, 0), *en = json_array_get(offs, 1);
    if (!json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 ||
        json_integer_value(en) < json_integer_value(b))
        return px_err_set(err, errlen, "tensor %s: bad data_offsets", name);
    e->begin = (uint64_t)json_integer_value(b);
    e->end = (uint64_t)json_integer_value(en);
    if (e->end > data_bytes)
        return px_err_set(err, errlen, "tensor %s: data_offsets [%llu, %llu] past the data section's %llu bytes "
                          "(truncated file?)", name, (unsigned long long)e->begin, (unsigned long long)e->end,
                          (unsigned long long)data_bytes);
    if (e->end - e->begin != count * (uint64_t)bytes)
        return px_err_set(err, errlen, "tensor %s: %llu bytes for %llu elements of %s", name,
                          (unsigned long long)(e->end - e->begin), (unsigned long long)count, e->dtype);
    return 0;
}

int px_safetensors_parse(const char *text, size_t len, uint64_t data_bytes, px_safetensors_entry_t **out, char *err,
                         size_t errlen) {
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return px_err_set(err, errlen, "header is not a JSON object: %s", root ? "" : je.text);
    }
    size_t cap = json_object_size(root);
    px_safetensors_entry_t *e = calloc(cap ? cap : 1, sizeof *e);
    int n = 0;
    const char *name;
    json_t *v;
    if (!e) {
        json_decref(root);
        return px_err_set(err, errlen, "header: out of memory");
    }
    json_object_foreach(root, name, v) {
        if (!strcmp(name, "__metadata__")) continue;
        if (parse_entry(name, v, data_bytes, &e[n], err, errlen) != 0) {
            free(e);
            json_decref(root);
            return -1;
        }
        n++;
    }
    json_decref(root);
    *out = e;
    return n;
}

void px_safetensors_to_f32(const char *dtype, const void *src, size_t n, float *dst) {
    const unsigned char *p = src;
    if (!strcmp(dtype, "F32")) {
        memcpy(dst, src, n * sizeof(float)); /* little-endian hosts only, as the writer */
        return;
    }
    int bf16 = !strcmp(dtype, "BF16");
    for (size_t i = 0; i < n; i++) {
        uint32_t h = (uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8, bits;
        if (bf16) {
            bits = h << 16; /* bfloat16 is float32's top half */
        } else {            /* IEEE half: sign, 5-bit exponent, 10-bit fraction */
            uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
            if (exp == 0x1f) {
                bits = sign | 0x7f800000u | frac << 13; /* inf, nan */
            } else if (exp) {
                bits = sign | (exp + 112) << 23 | frac << 13;
            } else if (!frac) {
                bits = sign;
            } else { /* subnormal: normalise */
                int e = -1;
                do frac <<= 1, e++;
                while (!(frac & 0x400));
                bits = sign | (uint32_t)(112 - e) << 23 | (frac & 0x3ff) << 13;
            }
        }
        memcpy(&dst[i], &bits, sizeof bits);
    }
}

void px_safetensors_place(const px_safetensors_tensor_t *t, const float *values, float *buffer) {
    float *dst = buffer + t->src;
    int64_t rows = t->shape[0], cols = t->ndim > 1 ? t->shape[1] : 1;
    if (!t->transpose) {
        memcpy(dst, values, (size_t)(rows * cols) * sizeof(float));
        return;
    }
    /* dst (out, in) = (cols, rows) from values (in, out) */
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = values[r * cols + c];
}
