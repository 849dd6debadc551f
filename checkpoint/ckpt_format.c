/* The checkpoint format without I/O: the logical tensors of a model's state,
 * and the manifest as a struct and as JSON (jansson), with every check a
 * reader needs before it trusts a byte range (see ckpt.h). */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "ckpt_int.h"
#include "px_err.h"

/* GPT-2 names of llm.c's tensors; %d is the layer. */
static const char *const gpt2_names[PX_GPT_NUM_TENSORS] = {
    "wte.weight",          "wpe.weight",          "h.%d.ln_1.weight",        "h.%d.ln_1.bias",
    "h.%d.attn.c_attn.weight", "h.%d.attn.c_attn.bias", "h.%d.attn.c_proj.weight", "h.%d.attn.c_proj.bias",
    "h.%d.ln_2.weight",    "h.%d.ln_2.bias",      "h.%d.mlp.c_fc.weight",    "h.%d.mlp.c_fc.bias",
    "h.%d.mlp.c_proj.weight", "h.%d.mlp.c_proj.bias", "ln_f.weight",          "ln_f.bias"};
static const char *const buffer_prefix[PX_STATE_MAXBUF] = {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq.",
                                                            PX_CKPT_OUTER_PREFIX};

/* Shape of one layer's (or the single) tensor of kind k. */
static int kind_shape(const px_gpt_config_t *c, int k, int64_t *shape) {
    int64_t C = c->channels;
    switch (k) {
    case PX_WTE: shape[0] = c->padded_vocab_size, shape[1] = C; return 2;
    case PX_WPE: shape[0] = c->max_seq_len, shape[1] = C; return 2;
    case PX_QKVW: shape[0] = 3 * C, shape[1] = C; return 2;
    case PX_QKVB: shape[0] = 3 * C; return 1;
    case PX_ATTPROJW: shape[0] = C, shape[1] = C; return 2;
    case PX_FCW: shape[0] = 4 * C, shape[1] = C; return 2;
    case PX_FCB: shape[0] = 4 * C; return 1;
    case PX_FCPROJW: shape[0] = C, shape[1] = 4 * C; return 2;
    default: shape[0] = C; return 1; /* LayerNorms and the C-sized biases */
    }
}

int64_t px_ckpt_volume(int ndim, const int64_t *shape) {
    int64_t v = 1;
    for (int d = 0; d < ndim; d++) v *= shape[d];
    return v;
}

int px_ckpt_logical_tensors(const px_gpt_config_t *cfg, int nbuf, px_ckpt_logical_t *out) {
    if (nbuf != PX_STATE_NBUF && nbuf != PX_STATE_MAXBUF) return -1;
    size_t sizes[PX_GPT_NUM_TENSORS];
    px_gpt_tensor_sizes(cfg, sizes);
    int n = 0;
    for (int b = 0; b < nbuf; b++) {
        size_t off = 0;
        for (int k = 0; k < PX_GPT_NUM_TENSORS; k++) {
            int per_layer = strstr(gpt2_names[k], "%d") != NULL;
            int layers = per_layer ? cfg->num_layers : 1;
            for (int l = 0; l < layers; l++, n++) {
                if (!out) continue;
                px_ckpt_logical_t *t = &out[n];
                char base[80];
                snprintf(base, sizeof base, gpt2_names[k], l);
                snprintf(t->name, sizeof t->name, "%s%s", buffer_prefix[b], base);
                t->buffer = b;
                t->ndim = kind_shape(cfg, k, t->shape);
                t->offset = off + (size_t)l * (sizes[k] / (size_t)layers);
            }
            off += sizes[k];
        }
    }
    return n;
}

/* ---- the struct ---------------------------------------------------------- */

void px_ckpt_manifest_free(px_ckpt_manifest_t *m) {
    if (m->tensors)
        for (int i = 0; i < m->ntensors; i++) free(m->tensors[i].slices);
    free(m->tensors);
    free(m->files);
    memset(m, 0, sizeof *m);
}

size_t px_ckpt_part_floats(size_t n) {
    size_t parts = n * sizeof(float) / PX_CKPT_FILE_MIN, page = PX_CKPT_FILE_ALIGN / sizeof(float);
    if (parts < 1) parts = 1;
    if (parts > PX_CKPT_BUFFER_FILES) parts = PX_CKPT_BUFFER_FILES;
    size_t per = (n + parts - 1) / parts;
    per = (per + page - 1) / page * page;
    return per ? per : page;
}

int px_ckpt_nparts(size_t n, size_t part_floats) {
    if (part_floats == 0) return -1;
    size_t k = n ? (n + part_floats - 1) / part_floats : 1;
    return k > PX_CKPT_PARTS_LIMIT ? -1 : (int)k;
}

/* Appends to tensor idx the slice rows [row0, row0 + nrows) x columns
 * [col0, col0 + ncols) of it seen as rows of K floats (a vector: one run of
 * it), stored next in file `file`. */
static int add_rect(px_ckpt_manifest_t *m, int idx, int file, int64_t K, int64_t row0, int64_t nrows, int64_t col0,
                    int64_t ncols) {
    px_ckpt_tensor_t *t = &m->tensors[idx];
    px_ckpt_slice_t sl = {.file = file, .offset = m->files[file].bytes};
    if (t->ndim == 2) {
        if (K != t->shape[1]) return -1;
        sl.start[0] = row0, sl.start[1] = col0, sl.count[0] = nrows, sl.count[1] = ncols;
    } else { /* a vector: the rectangle must be one run of it */
        if (nrows > 1 && ncols != K) return -1;
        sl.start[0] = row0 * K + col0, sl.count[0] = nrows * ncols;
    }
    sl.bytes = (uint64_t)(nrows * ncols) * sizeof(float);
    px_ckpt_slice_t *grown = realloc(t->slices, (size_t)(t->nslices + 1) * sizeof *grown);
    if (!grown) return -1;
    t->slices = grown;
    t->slices[t->nslices++] = sl;
    m->files[file].bytes += sl.bytes;
    return 0;
}

/* Floats [a, b) of tensor idx (row-major) as the next slices of file
 * `file`: a partial first row, whole rows, a partial last row. */
static int add_run(px_ckpt_manifest_t *m, int idx, int file, int64_t a, int64_t b) {
    const px_ckpt_tensor_t *t = &m->tensors[idx];
    if (t->ndim != 2) return add_rect(m, idx, file, t->shape[0], 0, 1, a, b - a);
    int64_t K = t->shape[1];
    if (a % K) {
        int64_t n = K - a % K < b - a ? K - a % K : b - a;
        if (add_rect(m, idx, file, K, a / K, 1, a % K, n) != 0) return -1;
        a += n;
    }
    if ((b - a) / K && add_rect(m, idx, file, K, a / K, (b - a) / K, 0, K) != 0) return -1;
    a += (b - a) / K * K;
    return a < b ? add_rect(m, idx, file, K, a / K, 1, 0, b - a) : 0;
}

int px_ckpt_manifest_whole(px_ckpt_manifest_t *m, const px_gpt_config_t *cfg, int nbuf, const char *prefix,
                           size_t part_floats) {
    size_t sizes[PX_GPT_NUM_TENSORS];
    int parts = px_ckpt_nparts(px_gpt_tensor_sizes(cfg, sizes), part_floats);
    if (parts < 0 || px_ckpt_manifest_begin(m, cfg, nbuf, nbuf * parts, prefix) != 0) return -1;
    const int per_buffer = m->ntensors / nbuf;
    for (int b = 0; b < nbuf; b++) {
        uint64_t pos = 0; /* in floats, inside buffer b */
        for (int i = b * per_buffer; i < (b + 1) * per_buffer; i++) {
            const px_ckpt_tensor_t *t = &m->tensors[i];
            uint64_t first = pos, end = pos + (uint64_t)px_ckpt_volume(t->ndim, t->shape);
            while (pos < end) {
                uint64_t cut = (pos / part_floats + 1) * part_floats < end ? (pos / part_floats + 1) * part_floats : end;
                if (add_run(m, i, b * parts + (int)(pos / part_floats), (int64_t)(pos - first), (int64_t)(cut - first)) != 0) {
                    px_ckpt_manifest_free(m);
                    return -1;
                }
                pos = cut;
            }
        }
    }
    return 0;
}

int px_ckpt_manifest_begin(px_ckpt_manifest_t *m, const px_gpt_config_t *cfg, int nbuf, int nfiles,
                           const char *prefix) {
    memset(m, 0, sizeof *m);
    int n = px_ckpt_logical_tensors(cfg, nbuf, NULL);
    if (n < 0) return -1;
    px_ckpt_logical_t *lt = calloc((size_t)n, sizeof *lt);
    m->tensors = calloc((size_t)n, sizeof *m->tensors);
    m->files = calloc((size_t)nfiles, sizeof *m->files);
    if (!lt || !m->tensors || !m->files) {
        free(lt);
        px_ckpt_manifest_free(m);
        return -1;
    }
    px_ckpt_logical_tensors(cfg, nbuf, lt);
    m->format_version = PX_CKPT_FORMAT_VERSION;
    m->model = *cfg;
    m->outer_momentum = nbuf == PX_STATE_MAXBUF;
    m->groups = m->ranks_per_group = m->fsdp = m->tp = m->pp = 1;
    for (int i = 0; i < n; i++, m->ntensors++) {
        snprintf(m->tensors[i].name, sizeof m->tensors[i].name, "%s", lt[i].name);
        m->tensors[i].ndim = lt[i].ndim;
        memcpy(m->tensors[i].shape, lt[i].shape, sizeof m->tensors[i].shape);
    }
    m->nfiles = nfiles;
    for (int f = 0; f < nfiles; f++) snprintf(m->files[f].name, sizeof m->files[f].name, "%s%05d.bin", prefix, f);
    free(lt);
    return 0;
}

int px_ckpt_manifest_add(px_ckpt_manifest_t *m, int file, int buffer, int kind, int layer, int64_t K, int64_t row0,
                         int64_t nrows, int64_t col0, int64_t ncols) {
    /* the logical tensor: buffers in order, kinds in order, layers in order */
    if (buffer < 0 || buffer >= (m->outer_momentum ? PX_STATE_MAXBUF : PX_STATE_NBUF)) return -1;
    int idx = 0;
    for (int b = 0; b <= buffer; b++)
        for (int k = 0; k < PX_GPT_NUM_TENSORS; k++) {
            int layers = strstr(gpt2_names[k], "%d") ? m->model.num_layers : 1;
            if (b == buffer && k == kind) {
                if (layer < 0 || layer >= layers) return -1;
                idx += layer;
                goto found;
            }
            idx += layers;
        }
    return -1;
found:
    return add_rect(m, idx, file, K, row0, nrows, col0, ncols);
}

int px_ckpt_manifest_find(const px_ckpt_manifest_t *m, const char *name) {
    for (int i = 0; i < m->ntensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return i;
    return -1;
}

/* ---- JSON out ------------------------------------------------------------ */

static json_t *int_array(int n, const int64_t *v) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

char *px_ckpt_manifest_encode(const px_ckpt_manifest_t *m) {
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string("phalanx-checkpoint"));
    json_object_set_new(root, "format_version", json_integer(m->format_version));
    json_object_set_new(root, "job", json_string(m->job));
    json_object_set_new(root, "step", json_integer(m->step));
    json_object_set_new(root, "quorum_id", json_integer(m->quorum_id));
    json_object_set_new(root, "seed", json_integer((json_int_t)m->seed));
    json_object_set_new(root, "created_unix_ms", json_integer(m->created_ms));
    json_object_set_new(root, "dtype", json_string("F32"));
    json_object_set_new(root, "outer_momentum", json_boolean(m->outer_momentum));
    json_t *model = json_object();
    json_object_set_new(model, "max_seq_len", json_integer(m->model.max_seq_len));
    json_object_set_new(model, "vocab_size", json_integer(m->model.vocab_size));
    json_object_set_new(model, "padded_vocab_size", json_integer(m->model.padded_vocab_size));
    json_object_set_new(model, "num_layers", json_integer(m->model.num_layers));
    json_object_set_new(model, "num_heads", json_integer(m->model.num_heads));
    json_object_set_new(model, "channels", json_integer(m->model.channels));
    json_object_set_new(root, "model", model);
    json_t *layout = json_object();
    json_object_set_new(layout, "groups", json_integer(m->groups));
    json_object_set_new(layout, "ranks_per_group", json_integer(m->ranks_per_group));
    json_object_set_new(layout, "fsdp", json_integer(m->fsdp));
    json_object_set_new(layout, "tp", json_integer(m->tp));
    json_object_set_new(layout, "pp", json_integer(m->pp));
    json_object_set_new(layout, "writer_group", json_string(m->writer_group));
    json_object_set_new(root, "layout", layout);
    if (m->has_schedule) {
        const px_ckpt_schedule_t *sc = &m->schedule;
        json_object_set_new(root, "schedule",
                            json_pack("{s:I, s:f, s:f, s:I, s:I, s:I}", "steps", (json_int_t)sc->steps, "lr", sc->lr,
                                      "min_lr", sc->min_lr, "warmup", (json_int_t)sc->warmup, "global_batch",
                                      (json_int_t)sc->global_batch, "seq_len", (json_int_t)sc->seq_len));
    }
    json_t *files = json_array();
    for (int i = 0; i < m->nfiles; i++) {
        char hex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, m->files[i].xxh3);
        json_array_append_new(files, json_pack("{s:s, s:I, s:s}", "name", m->files[i].name, "bytes",
                                               (json_int_t)m->files[i].bytes, "xxh3_64", hex));
    }
    json_object_set_new(root, "files", files);
    json_t *tensors = json_array();
    for (int i = 0; i < m->ntensors; i++) {
        const px_ckpt_tensor_t *t = &m->tensors[i];
        json_t *slices = json_array();
        for (int j = 0; j < t->nslices; j++) {
            const px_ckpt_slice_t *s = &t->slices[j];
            json_array_append_new(slices, json_pack("{s:s, s:I, s:I, s:o, s:o}", "file", m->files[s->file].name,
                                                    "offset", (json_int_t)s->offset, "bytes", (json_int_t)s->bytes,
                                                    "start", int_array(t->ndim, s->start), "count",
                                                    int_array(t->ndim, s->count)));
        }
        json_array_append_new(tensors, json_pack("{s:s, s:o, s:o}", "name", t->name, "shape",
                                                 int_array(t->ndim, t->shape), "slices", slices));
    }
    json_object_set_new(root, "tensors", tensors);
    char *text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(root);
    return text;
}

/* ---- JSON in ------------------------------------------------------------- */

/* An integer member in [lo, hi]. */
static int get_int(json_t *obj, const char *key, int64_t lo, int64_t hi, int64_t *out, const char *where, char *err,
                   size_t errlen) {
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v)) return px_err_set(err, errlen, "%s: \"%s\" missing or not an integer", where, key);
    int64_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return px_err_set(err, errlen, "%s: \"%s\" = %" PRId64 " not in [%" PRId64 ", %" PRId64 "]", where, key, x, lo, hi);
    *out = x;
    return 0;
}

static int get_str(json_t *obj, const char *key, char *out, size_t cap, const char *where, char *err, size_t errlen) {
    json_t *v = json_object_get(obj, key);
    if (!json_is_string(v)) return px_err_set(err, errlen, "%s: \"%s\" missing or not a string", where, key);
    if (json_string_length(v) >= cap) return px_err_set(err, errlen, "%s: \"%s\" longer than %zu bytes", where, key, cap - 1);
    snprintf(out, cap, "%s", json_string_value(v));
    return 0;
}

static int get_dims(json_t *obj, const char *key, int want, int64_t *out, const char *where, char *err, size_t errlen) {
    json_t *a = json_object_get(obj, key);
    int n = json_is_array(a) ? (int)json_array_size(a) : -1;
    if (n < 1 || n > PX_CKPT_MAX_DIMS || (want >= 0 && n != want))
        return px_err_set(err, errlen, "%s: \"%s\" is not an array of %s dimensions", where, key, want >= 0 ? "its" : "1-4");
    for (int d = 0; d < n; d++) {
        json_t *v = json_array_get(a, (size_t)d);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > ((int64_t)1 << 40))
            return px_err_set(err, errlen, "%s: \"%s\"[%d] is not an integer in [0, 2^40]", where, key, d);
        out[d] = json_integer_value(v);
    }
    return n;
}

/* A file name a manifest may use: plain, no path, no hidden file. */
static int file_name_ok(const char *s) {
    if (!s[0] || s[0] == '.') return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
              *p == '-' || *p == '.'))
            return 0;
    return strcmp(s, PX_CKPT_MANIFEST) != 0;
}

static int decode_model(json_t *root, px_gpt_config_t *c, char *err, size_t errlen) {
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return px_err_set(err, errlen, "\"model\" missing or not an object");
    const char *keys[] = {"max_seq_len", "vocab_size", "padded_vocab_size", "num_layers", "num_heads", "channels"};
    int *dst[] = {&c->max_seq_len, &c->vocab_size, &c->padded_vocab_size, &c->num_layers, &c->num_heads, &c->channels};
    for (int i = 0; i < 6; i++) {
        int64_t v;
        if (get_int(model, keys[i], 1, 1 << 24, &v, "model", err, errlen)) return -1;
        *dst[i] = (int)v;
    }
    char why[256];
    if (px_gpt_config_check(c, why, sizeof why) != 0) return px_err_set(err, errlen, "model: %s", why);
    return 0;
}

static int decode_files(json_t *root, px_ckpt_manifest_t *m, char *err, size_t errlen) {
    json_t *files = json_object_get(root, "files");
    if (!json_is_array(files) || json_array_size(files) < 1 || json_array_size(files) > 65536)
        return px_err_set(err, errlen, "\"files\" missing, empty or not an array of at most 65536");
    m->nfiles = (int)json_array_size(files);
    m->files = calloc((size_t)m->nfiles, sizeof *m->files);
    if (!m->files) return px_err_set(err, errlen, "out of memory");
    for (int i = 0; i < m->nfiles; i++) {
        json_t *f = json_array_get(files, (size_t)i);
        px_ckpt_file_t *pf = &m->files[i];
        char where[32], hex[32];
        int64_t bytes;
        snprintf(where, sizeof where, "files[%d]", i);
        if (!json_is_object(f)) return px_err_set(err, errlen, "%s is not an object", where);
        if (get_str(f, "name", pf->name, sizeof pf->name, where, err, errlen) ||
            get_int(f, "bytes", 0, INT64_MAX, &bytes, where, err, errlen) ||
            get_str(f, "xxh3_64", hex, sizeof hex, where, err, errlen))
            return -1;
        if (!file_name_ok(pf->name)) return px_err_set(err, errlen, "%s: name \"%s\" is not a plain file name", where, pf->name);
        for (int j = 0; j < i; j++)
            if (!strcmp(m->files[j].name, pf->name)) return px_err_set(err, errlen, "%s: \"%s\" listed twice", where, pf->name);
        char *end;
        if (strlen(hex) != 16 || (pf->xxh3 = strtoull(hex, &end, 16), *end))
            return px_err_set(err, errlen, "%s: xxh3_64 \"%s\" is not 16 hex digits", where, hex);
        pf->bytes = (uint64_t)bytes;
    }
    return 0;
}

static int file_index(const px_ckpt_manifest_t *m, const char *name) {
    for (int i = 0; i < m->nfiles; i++)
        if (!strcmp(m->files[i].name, name)) return i;
    return -1;
}

/* Do two hyperrectangles intersect? */
static int overlap(int ndim, const px_ckpt_slice_t *a, const px_ckpt_slice_t *b) {
    for (int d = 0; d < ndim; d++)
        if (a->start[d] + a->count[d] <= b->start[d] || b->start[d] + b->count[d] <= a->start[d]) return 0;
    return 1;
}

static int decode_tensor(json_t *jt, int i, px_ckpt_manifest_t *m, char *err, size_t errlen) {
    px_ckpt_tensor_t *t = &m->tensors[i];
    char where[160];
    snprintf(where, sizeof where, "tensors[%d]", i);
    if (!json_is_object(jt)) return px_err_set(err, errlen, "%s is not an object", where);
    if (get_str(jt, "name", t->name, sizeof t->name, where, err, errlen)) return -1;
    snprintf(where, sizeof where, "tensor %s", t->name);
    if ((t->ndim = get_dims(jt, "shape", -1, t->shape, where, err, errlen)) < 0) return -1;
    for (int d = 0; d < t->ndim; d++) /* each dimension <= 2^40: the product of four could overflow */
        if (t->shape[d] && px_ckpt_volume(d, t->shape) > ((int64_t)1 << 40) / t->shape[d])
            return px_err_set(err, errlen, "%s: more than 2^40 values", where);
    json_t *slices = json_object_get(jt, "slices");
    if (!json_is_array(slices) || json_array_size(slices) < 1 || json_array_size(slices) > 65536)
        return px_err_set(err, errlen, "%s: \"slices\" missing, empty or more than 65536", where);
    t->nslices = (int)json_array_size(slices);
    t->slices = calloc((size_t)t->nslices, sizeof *t->slices);
    if (!t->slices) return px_err_set(err, errlen, "out of memory");
    int64_t covered = 0;
    for (int j = 0; j < t->nslices; j++) {
        json_t *js = json_array_get(slices, (size_t)j);
        px_ckpt_slice_t *s = &t->slices[j];
        char sw[200], fname[64];
        int64_t off, bytes;
        snprintf(sw, sizeof sw, "%s slice %d", where, j);
        if (!json_is_object(js)) return px_err_set(err, errlen, "%s is not an object", sw);
        if (get_str(js, "file", fname, sizeof fname, sw, err, errlen) ||
            get_int(js, "offset", 0, INT64_MAX, &off, sw, err, errlen) ||
            get_int(js, "bytes", 0, INT64_MAX, &bytes, sw, err, errlen) ||
            get_dims(js, "start", t->ndim, s->start, sw, err, errlen) < 0 ||
            get_dims(js, "count", t->ndim, s->count, sw, err, errlen) < 0)
            return -1;
        if ((s->file = file_index(m, fname)) < 0) return px_err_set(err, errlen, "%s: file \"%s\" is not in \"files\"", sw, fname);
        for (int d = 0; d < t->ndim; d++)
            if (s->start[d] + s->count[d] > t->shape[d])
                return px_err_set(err, errlen, "%s: dimension %d [%" PRId64 ", +%" PRId64 ") exceeds the shape %" PRId64, sw, d,
                            s->start[d], s->count[d], t->shape[d]);
        int64_t vol = px_ckpt_volume(t->ndim, s->count);
        if ((uint64_t)bytes != (uint64_t)vol * sizeof(float))
            return px_err_set(err, errlen, "%s: %" PRId64 " bytes for %" PRId64 " float32 values", sw, bytes, vol);
        if ((uint64_t)off > m->files[s->file].bytes || (uint64_t)bytes > m->files[s->file].bytes - (uint64_t)off)
            return px_err_set(err, errlen, "%s: bytes [%" PRId64 ", +%" PRId64 ") beyond the %" PRIu64 " of file %s", sw, off,
                        bytes, m->files[s->file].bytes, fname);
        for (int k = 0; k < j; k++)
            if (overlap(t->ndim, s, &t->slices[k])) return px_err_set(err, errlen, "%s overlaps slice %d", sw, k);
        s->offset = (uint64_t)off;
        s->bytes = (uint64_t)bytes;
        covered += vol;
    }
    if (covered != px_ckpt_volume(t->ndim, t->shape))
        return px_err_set(err, errlen, "%s: slices cover %" PRId64 " of its %" PRId64 " values", where, covered,
                          px_ckpt_volume(t->ndim, t->shape));
    return 0;
}

typedef struct {
    uint64_t offset, bytes;
} range_t;

static int cmp_range(const void *a, const void *b) {
    const range_t *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Every file is tiled exactly by the slices stored in it: no gap that could
 * hide unchecked bytes, no byte read twice. */
static int check_tiling(const px_ckpt_manifest_t *m, char *err, size_t errlen) {
    size_t total = 0;
    for (int i = 0; i < m->ntensors; i++) total += (size_t)m->tensors[i].nslices;
    range_t *r = malloc((total ? total : 1) * sizeof *r);
    if (!r) return px_err_set(err, errlen, "out of memory");
    int rc = 0;
    for (int f = 0; f < m->nfiles && rc == 0; f++) {
        size_t n = 0;
        for (int i = 0; i < m->ntensors; i++)
            for (int j = 0; j < m->tensors[i].nslices; j++)
                if (m->tensors[i].slices[j].file == f)
                    r[n++] = (range_t){m->tensors[i].slices[j].offset, m->tensors[i].slices[j].bytes};
        qsort(r, n, sizeof *r, cmp_range);
        uint64_t pos = 0;
        for (size_t k = 0; k < n && rc == 0; k++) {
            if (r[k].offset != pos)
                rc = px_err_set(err, errlen, "file %s: bytes at %" PRIu64 " are %s", m->files[f].name, pos,
                                r[k].offset > pos ? "in no slice" : "in two slices");
            pos = r[k].offset + r[k].bytes;
        }
        if (rc == 0 && pos != m->files[f].bytes)
            rc = px_err_set(err, errlen, "file %s: slices end at byte %" PRIu64 " of %" PRIu64, m->files[f].name, pos,
                            m->files[f].bytes);
    }
    free(r);
    return rc;
}

static void dims_text(int ndim, const int64_t *shape, char *out, size_t len) {
    size_t n = 0;
    out[0] = '\0';
    for (int d = 0; d < ndim && n < len; d++)
        n += (size_t)snprintf(out + n, len - n, "%s%" PRId64, d ? "x" : "", shape[d]);
}

/* The optional "schedule" object: absent is fine (has_schedule 0); present,
 * every member must be there and in range. */
static int decode_schedule(json_t *root, px_ckpt_manifest_t *m, char *err, size_t errlen) {
    json_t *sc = json_object_get(root, "schedule");
    m->has_schedule = 0;
    if (!sc) return 0;
    if (!json_is_object(sc)) return px_err_set(err, errlen, "\"schedule\" is not an object");
    px_ckpt_schedule_t *d = &m->schedule;
    const char *ik[] = {"steps", "warmup", "global_batch", "seq_len"};
    int64_t *iv[] = {&d->steps, &d->warmup, &d->global_batch, &d->seq_len};
    for (int i = 0; i < 4; i++)
        if (get_int(sc, ik[i], 0, (int64_t)1 << 40, iv[i], "schedule", err, errlen)) return -1;
    const char *rk[] = {"lr", "min_lr"};
    double *rv[] = {&d->lr, &d->min_lr};
    for (int i = 0; i < 2; i++) {
        json_t *x = json_object_get(sc, rk[i]);
        if (!json_is_number(x) || !isfinite(json_number_value(x)) || json_number_value(x) < 0)
            return px_err_set(err, errlen, "schedule: \"%s\" missing or not a finite number >= 0", rk[i]);
        *rv[i] = json_number_value(x);
    }
    m->has_schedule = 1;
    return 0;
}

int px_ckpt_schedule_diff(const px_ckpt_schedule_t *was, const px_ckpt_schedule_t *now, char *out, size_t cap) {
    int n = 0;
    size_t at = 0;
    if (cap) out[0] = '\0';
    const char *ik[] = {"--steps", "--warmup", "--global-batch", "--seq"};
    const int64_t iw[] = {was->steps, was->warmup, was->global_batch, was->seq_len};
    const int64_t in[] = {now->steps, now->warmup, now->global_batch, now->seq_len};
    const char *rk[] = {"--lr", "--min-lr"};
    const double rw[] = {was->lr, was->min_lr}, rn[] = {now->lr, now->min_lr};
    for (int i = 0; i < 6; i++) {
        char one[160];
        if (i < 4 && iw[i] != in[i])
            snprintf(one, sizeof one, "%s %lld (the checkpoint's: %lld)", ik[i], (long long)in[i], (long long)iw[i]);
        else if (i >= 4 && rw[i - 4] != rn[i - 4])
            snprintf(one, sizeof one, "%s %g (the checkpoint's: %g)", rk[i - 4], rn[i - 4], rw[i - 4]);
        else
            continue;
        if (at < cap) at += (size_t)snprintf(out + at, cap - at, "%s%s", n ? ", " : "", one);
        n++;
    }
    return n;
}

/* The outer momentum is whole or absent: outer.momentum.NAME for every
 * parameter of the manifest's model, each with its parameter's shape, or
 * none (a state half there must never be loaded; which of the other
 * tensors a model needs is px_ckpt_manifest_matches' business). Sets
 * m->outer_momentum; the "outer_momentum" member, optional, must agree. */
static int decode_outer(json_t *root, px_ckpt_manifest_t *m, char *err, size_t errlen) {
    int n = px_ckpt_logical_tensors(&m->model, PX_STATE_MAXBUF, NULL);
    px_ckpt_logical_t *lt = calloc((size_t)n, sizeof *lt);
    if (!lt) return px_err_set(err, errlen, "out of memory");
    px_ckpt_logical_tensors(&m->model, PX_STATE_MAXBUF, lt);
    int first = n / PX_STATE_MAXBUF * PX_STATE_OUTER_M; /* the outer momentum's tensors come last */
    int found = 0, missing = -1, rc = 0;
    for (int i = first; i < n && rc == 0; i++) {
        int k = px_ckpt_manifest_find(m, lt[i].name);
        if (k < 0) {
            if (missing < 0) missing = i;
            continue;
        }
        found++;
        const px_ckpt_tensor_t *t = &m->tensors[k];
        if (t->ndim != lt[i].ndim || memcmp(t->shape, lt[i].shape, sizeof(int64_t) * (size_t)t->ndim)) {
            char got[96], want[96];
            dims_text(t->ndim, t->shape, got, sizeof got);
            dims_text(lt[i].ndim, lt[i].shape, want, sizeof want);
            rc = px_err_set(err, errlen, "tensor %s has shape %s, its parameter's is %s", lt[i].name, got, want);
        }
    }
    if (rc == 0 && found && missing >= 0)
        rc = px_err_set(err, errlen, "tensor %s missing: the outer momentum has %d of its %d tensors, and a "
                          "partial state is never loaded", lt[missing].name, found, n - first);
    m->outer_momentum = found > 0;
    json_t *flag = json_object_get(root, "outer_momentum");
    if (rc == 0 && flag && !json_is_boolean(flag))
        rc = px_err_set(err, errlen, "\"outer_momentum\" is not true or false");
    else if (rc == 0 && flag && json_is_true(flag) != m->outer_momentum)
        rc = px_err_set(err, errlen, "\"outer_momentum\" is %s, but the manifest has %s " PX_CKPT_OUTER_PREFIX
                          "* tensors", json_is_true(flag) ? "true" : "false", found ? "the" : "no");
    free(lt);
    return rc;
}

static int decode_root(json_t *root, px_ckpt_manifest_t *m, char *err, size_t errlen) {
    char fmt[64];
    int64_t v;
    if (!json_is_object(root)) return px_err_set(err, errlen, "not a JSON object");
    if (get_str(root, "format", fmt, sizeof fmt, "manifest", err, errlen)) return -1;
    if (strcmp(fmt, "phalanx-checkpoint")) return px_err_set(err, errlen, "format \"%s\" is not phalanx-checkpoint", fmt);
    if (get_int(root, "format_version", 1, INT32_MAX, &v, "manifest", err, errlen)) return -1;
    if (v > PX_CKPT_FORMAT_VERSION)
        return px_err_set(err, errlen, "format_version %" PRId64 " is newer than this build reads (%d): upgrade phalanx", v,
                          PX_CKPT_FORMAT_VERSION);
    m->format_version = (int)v;
    json_t *dtype = json_object_get(root, "dtype");
    if (!json_is_string(dtype) || strcmp(json_string_value(dtype), "F32"))
        return px_err_set(err, errlen, "\"dtype\" missing or not F32");
    if (get_str(root, "job", m->job, sizeof m->job, "manifest", err, errlen) ||
        get_int(root, "step", 0, (int64_t)1 << 40, &m->step, "manifest", err, errlen) ||
        get_int(root, "quorum_id", 0, INT64_MAX, &m->quorum_id, "manifest", err, errlen) ||
        get_int(root, "seed", 0, INT64_MAX, &v, "manifest", err, errlen))
        return -1;
    m->seed = (uint64_t)v;
    if (get_int(root, "created_unix_ms", 0, INT64_MAX, &m->created_ms, "manifest", err, errlen)) return -1;
    if (decode_model(root, &m->model, err, errlen)) return -1;
    json_t *layout = json_object_get(root, "layout");
    if (!json_is_object(layout)) return px_err_set(err, errlen, "\"layout\" missing or not an object");
    const char *lk[] = {"groups", "ranks_per_group", "fsdp", "tp", "pp"};
    int *ld[] = {&m->groups, &m->ranks_per_group, &m->fsdp, &m->tp, &m->pp};
    for (int i = 0; i < 5; i++) {
        if (get_int(layout, lk[i], 1, 1 << 20, &v, "layout", err, errlen)) return -1;
        *ld[i] = (int)v;
    }
    if (get_str(layout, "writer_group", m->writer_group, sizeof m->writer_group, "layout", err, errlen)) return -1;
    if (decode_schedule(root, m, err, errlen)) return -1;
    if (decode_files(root, m, err, errlen)) return -1;
    json_t *tensors = json_object_get(root, "tensors");
    if (!json_is_array(tensors) || json_array_size(tensors) < 1 || json_array_size(tensors) > 1000000)
        return px_err_set(err, errlen, "\"tensors\" missing, empty or not an array");
    size_t nt = json_array_size(tensors);
    m->tensors = calloc(nt, sizeof *m->tensors);
    if (!m->tensors) return px_err_set(err, errlen, "out of memory");
    for (size_t i = 0; i < nt; i++, m->ntensors++) {
        if (decode_tensor(json_array_get(tensors, i), (int)i, m, err, errlen)) {
            m->ntensors++; /* its slices are freed with the rest */
            return -1;
        }
        for (size_t k = 0; k < i; k++)
            if (!strcmp(m->tensors[k].name, m->tensors[i].name))
                return px_err_set(err, errlen, "tensor %s listed twice", m->tensors[i].name);
    }
    if (decode_outer(root, m, err, errlen)) return -1;
    return check_tiling(m, err, errlen);
}

int px_ckpt_manifest_decode(const char *text, size_t len, px_ckpt_manifest_t *m, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) return px_err_set(err, errlen, "not valid JSON (line %d column %d: %s)", je.line, je.column, je.text);
    int rc = decode_root(root, m, err, errlen);
    json_decref(root);
    if (rc) px_ckpt_manifest_free(m);
    return rc;
}

int px_ckpt_manifest_matches(const px_ckpt_manifest_t *m, const px_gpt_config_t *cfg, char *err, size_t errlen) {
    const px_gpt_config_t *a = &m->model;
    if (memcmp(a, cfg, sizeof *a) != 0)
        return px_err_set(err, errlen,
                          "model config mismatch: the checkpoint is L=%d C=%d NH=%d maxT=%d V=%d Vp=%d, this job's model is "
                          "L=%d C=%d NH=%d maxT=%d V=%d Vp=%d",
                          a->num_layers, a->channels, a->num_heads, a->max_seq_len, a->vocab_size, a->padded_vocab_size,
                          cfg->num_layers, cfg->channels, cfg->num_heads, cfg->max_seq_len, cfg->vocab_size,
                          cfg->padded_vocab_size);
    int n = px_ckpt_logical_tensors(cfg, PX_STATE_NBUF, NULL);
    px_ckpt_logical_t *lt = calloc((size_t)n, sizeof *lt);
    if (!lt) return px_err_set(err, errlen, "out of memory");
    px_ckpt_logical_tensors(cfg, PX_STATE_NBUF, lt);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        int k = px_ckpt_manifest_find(m, lt[i].name);
        if (k < 0) {
            rc = px_err_set(err, errlen, "tensor %s missing", lt[i].name);
        } else if (m->tensors[k].ndim != lt[i].ndim ||
                   memcmp(m->tensors[k].shape, lt[i].shape, sizeof(int64_t) * (size_t)lt[i].ndim)) {
            rc = px_err_set(err, errlen, "tensor %s has another shape than the model's", lt[i].name);
        }
    }
    free(lt);
    return rc;
}
