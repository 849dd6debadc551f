/* tokenizer.json: reading it into the tables of a px_tok_t, writing it back,
 * and the skeleton the trainer fills.
 *
 * The HF document is kept whole (t->root). Loading checks every field the
 * encoder depends on and refuses what it does not implement (a normalizer,
 * another model, a Split behaviour other than Isolated, BPE dropout, ...)
 * with a message naming the file and the field, rather than encoding
 * differently from HF without a word. Fields that do not change the ids of
 * encode(add_special_tokens=False) (post_processor, truncation, padding)
 * are kept for saving and otherwise ignored. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "px_err.h"
#include "px_file.h"
#include "tok_internal.h"

#define MAX_VOCAB (1 << 24)

static const char *json_type_name(const json_t *j) {
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* A boolean field: absent or null takes dflt; anything else not boolean is an error. */
static int get_bool(const px_tok_t *t, const json_t *obj, const char *where, const char *key, bool dflt, bool *out,
                    char *err, size_t errlen) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (!json_is_boolean(v))
        return px_err_set(err, errlen, "tokenizer file '%s': %s.%s is %s, expected true or false", t->path, where, key,
                          json_type_name(v));
    *out = json_is_true(v);
    return 0;
}

static const char *type_of(const json_t *obj) {
    const char *s = json_string_value(json_object_get(obj, "type"));
    return s ? s : "(no type)";
}

static int add_stage(px_tok_t *t, tok_stage_t st, const char *where, char *err, size_t errlen) {
    if (t->nstages == TOK_MAX_STAGES) {
        pcre2_code_free(st.re);
        return px_err_set(err, errlen, "tokenizer file '%s': %s: more than %d pre-tokenizer steps", t->path, where,
                          TOK_MAX_STAGES);
    }
    t->stages[t->nstages++] = st;
    return 0;
}

static int build_pretok(px_tok_t *t, const json_t *pt, const char *where, bool *bytelevel, char *err, size_t errlen) {
    if (!json_is_object(pt))
        return px_err_set(err, errlen, "tokenizer file '%s': %s is %s; byte-level BPE needs a ByteLevel pre-tokenizer",
                          t->path, where, pt ? json_type_name(pt) : "missing");
    const char *type = type_of(pt);
    char what[600];
    snprintf(what, sizeof what, "tokenizer file '%s': %s (%s)", t->path, where, type);
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(pt, "pretokenizers");
        if (!json_is_array(list))
            return px_err_set(err, errlen, "%s: 'pretokenizers' is not an array", what);
        for (size_t i = 0; i < json_array_size(list); i++) {
            char w[128];
            snprintf(w, sizeof w, "pre_tokenizer.pretokenizers[%zu]", i);
            if (build_pretok(t, json_array_get(list, i), w, bytelevel, err, errlen) < 0) return -1;
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        bool prefix, use_regex;
        if (get_bool(t, pt, where, "add_prefix_space", true, &prefix, err, errlen) < 0 ||
            get_bool(t, pt, where, "use_regex", true, &use_regex, err, errlen) < 0)
            return -1;
        tok_stage_t st = {.add_prefix_space = prefix};
        if (use_regex) {
            st.re = tok_regex_compile(TOK_GPT2_PATTERN, strlen(TOK_GPT2_PATTERN), false, &st.jit, what, err, errlen);
            if (!st.re) return -1;
        }
        *bytelevel = true;
        return add_stage(t, st, where, err, errlen);
    }
    if (strcmp(type, "Split") == 0) {
        const char *behavior = json_string_value(json_object_get(pt, "behavior"));
        if (!behavior || strcmp(behavior, "Isolated") != 0)
            return px_err_set(err, errlen, "%s: behavior '%s' is not supported (only Isolated)", what,
                              behavior ? behavior : "(missing)");
        bool invert;
        if (get_bool(t, pt, where, "invert", false, &invert, err, errlen) < 0) return -1;
        if (invert) return px_err_set(err, errlen, "%s: invert true is not supported", what);
        const json_t *pat = json_object_get(pt, "pattern");
        const json_t *re = json_object_get(pat, "Regex"), *lit = json_object_get(pat, "String");
        const json_t *p = re ? re : lit;
        if (!json_is_string(p))
            return px_err_set(err, errlen, "%s: pattern is not {\"Regex\": ...} or {\"String\": ...}", what);
        tok_stage_t st = {0};
        st.re = tok_regex_compile(json_string_value(p), json_string_length(p), p == lit, &st.jit, what, err, errlen);
        if (!st.re) return -1;
        return add_stage(t, st, where, err, errlen);
    }
    return px_err_set(err, errlen, "%s: pre-tokenizer '%s' is not supported (ByteLevel, Split with Isolated, or a Sequence of them)",
                      what, type);
}

/* Looks up a model token by its tokenizer.json string. */
static int token_id(const px_map_t *strings, const char *s, size_t len, int32_t *id) {
    int64_t v;
    if (!px_map_get(strings, s, len, &v)) return -1;
    *id = (int32_t)v;
    return 0;
}

static int build_merges(px_tok_t *t, const json_t *merges, const px_map_t *strings, char *err, size_t errlen) {
    if (!json_is_array(merges))
        return px_err_set(err, errlen, "tokenizer file '%s': model.merges is %s, expected an array", t->path,
                          merges ? json_type_name(merges) : "missing");
    size_t n = json_array_size(merges);
    if (tok_merges_init(t, n) < 0) return px_err_set(err, errlen, "tokenizer file '%s': out of memory", t->path);
    char *cat = NULL;
    size_t catcap = 0;
    int rc = -1;
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(merges, i);
        const char *a, *b;
        size_t la, lb;
        if (json_is_string(m)) { /* "a b" */
            a = json_string_value(m);
            const char *sp = memchr(a, ' ', json_string_length(m));
            if (!sp || memchr(sp + 1, ' ', json_string_length(m) - (size_t)(sp + 1 - a))) {
                px_err_set(err, errlen, "tokenizer file '%s': model.merges[%zu] '%s' is not two tokens separated by one space",
                           t->path, i, a);
                goto out;
            }
            la = (size_t)(sp - a);
            b = sp + 1;
            lb = json_string_length(m) - la - 1;
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) { /* ["a", "b"] */
            a = json_string_value(json_array_get(m, 0));
            la = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            lb = json_string_length(json_array_get(m, 1));
        } else {
            px_err_set(err, errlen, "tokenizer file '%s': model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", t->path, i);
            goto out;
        }
        if (la + lb + 1 > catcap) {
            catcap = (la + lb + 1) * 2;
            char *c = realloc(cat, catcap);
            if (!c) {
                px_err_set(err, errlen, "tokenizer file '%s': out of memory", t->path);
                goto out;
            }
            cat = c;
        }
        memcpy(cat, a, la);
        memcpy(cat + la, b, lb);
        int32_t ia, ib, ic;
        const char *missing = NULL;
        size_t mlen = 0;
        if (token_id(strings, a, la, &ia) < 0) missing = a, mlen = la;
        else if (token_id(strings, b, lb, &ib) < 0) missing = b, mlen = lb;
        else if (token_id(strings, cat, la + lb, &ic) < 0) missing = cat, mlen = la + lb;
        if (missing) {
            px_err_set(err, errlen, "tokenizer file '%s': model.merges[%zu] ('%.*s' '%.*s'): token '%.*s' is not in model.vocab",
                       t->path, i, (int)la, a, (int)lb, b, (int)mlen, missing);
            goto out;
        }
        tok_merges_put(t, ia, ib, (int32_t)i, ic);
    }
    rc = 0;
out:
    free(cat);
    return rc;
}

static int build_added(px_tok_t *t, const json_t *list, char *err, size_t errlen) {
    if (!list || json_is_null(list)) return 0;
    if (!json_is_array(list))
        return px_err_set(err, errlen, "tokenizer file '%s': added_tokens is %s, expected an array", t->path,
                          json_type_name(list));
    t->added = calloc(json_array_size(list) + 1, sizeof *t->added);
    if (!t->added) return px_err_set(err, errlen, "tokenizer file '%s': out of memory", t->path);
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *a = json_array_get(list, i);
        const json_t *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
        char where[64];
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= MAX_VOCAB ||
            !json_is_string(content) || json_string_length(content) == 0)
            return px_err_set(err, errlen, "tokenizer file '%s': %s needs an id in [0, %d) and a non-empty content",
                              t->path, where, MAX_VOCAB);
        tok_added_t *ad = &t->added[t->nadded];
        bool single_word;
        if (get_bool(t, a, where, "special", false, &ad->special, err, errlen) < 0 ||
            get_bool(t, a, where, "lstrip", false, &ad->lstrip, err, errlen) < 0 ||
            get_bool(t, a, where, "rstrip", false, &ad->rstrip, err, errlen) < 0 ||
            get_bool(t, a, where, "normalized", !ad->special, &ad->normalized, err, errlen) < 0 ||
            get_bool(t, a, where, "single_word", false, &single_word, err, errlen) < 0)
            return -1;
        if (single_word)
            return px_err_set(err, errlen, "tokenizer file '%s': %s '%s': single_word true is not supported", t->path,
                              where, json_string_value(content));
        ad->len = json_string_length(content);
        ad->content = malloc(ad->len + 1);
        if (!ad->content) return px_err_set(err, errlen, "tokenizer file '%s': out of memory", t->path);
        memcpy(ad->content, json_string_value(content), ad->len + 1);
        ad->id = (int32_t)json_integer_value(id);
        t->added_first[(uint8_t)ad->content[0]] = 1;
        t->nadded++;
    }
    return 0;
}

/* The document separator: the first of these that is a special added token. */
static void find_eot(px_tok_t *t) {
    static const char *names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|end|>"};
    t->eot_id = -1;
    for (size_t k = 0; k < sizeof names / sizeof *names && t->eot_id < 0; k++)
        for (int i = 0; i < t->nadded; i++)
            if (t->added[i].special && strcmp(t->added[i].content, names[k]) == 0) {
                t->eot_id = t->added[i].id;
                break;
            }
}

static int check_model(px_tok_t *t, const json_t *model, char *err, size_t errlen) {
    if (!json_is_object(model))
        return px_err_set(err, errlen, "tokenizer file '%s': 'model' is %s, expected an object", t->path,
                          model ? json_type_name(model) : "missing");
    const char *type = json_string_value(json_object_get(model, "type"));
    if (type && strcmp(type, "BPE") != 0)
        return px_err_set(err, errlen, "tokenizer file '%s': model.type '%s' is not supported (only BPE)", t->path, type);
    const json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) && !(json_is_number(dropout) && json_number_value(dropout) == 0))
        return px_err_set(err, errlen, "tokenizer file '%s': model.dropout is set; BPE dropout is not supported", t->path);
    static const char *affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const json_t *v = json_object_get(model, affixes[i]);
        if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
            return px_err_set(err, errlen, "tokenizer file '%s': model.%s is set; it is not supported", t->path, affixes[i]);
    }
    bool byte_fallback;
    if (get_bool(t, model, "model", "byte_fallback", false, &byte_fallback, err, errlen) < 0 ||
        get_bool(t, model, "model", "ignore_merges", false, &t->ignore_merges, err, errlen) < 0)
        return -1;
    if (byte_fallback)
        return px_err_set(err, errlen, "tokenizer file '%s': model.byte_fallback true is not supported", t->path);
    return 0;
}

/* Sets the bytes of every id: model tokens through the byte-level alphabet,
 * added tokens their content (HF's decode looks at added tokens first). */
static int build_vocab(px_tok_t *t, const json_t *vocab, px_map_t *strings, char *err, size_t errlen) {
    if (!json_is_object(vocab))
        return px_err_set(err, errlen, "tokenizer file '%s': model.vocab is %s, expected an object", t->path,
                          vocab ? json_type_name(vocab) : "missing");
    int64_t maxid = -1;
    size_t total = 0;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= MAX_VOCAB)
            return px_err_set(err, errlen, "tokenizer file '%s': model.vocab['%s'] is not an id in [0, %d)", t->path, key,
                              MAX_VOCAB);
        if (json_integer_value(v) > maxid) maxid = json_integer_value(v);
        total += strlen(key);
    }
    for (int i = 0; i < t->nadded; i++) {
        if (t->added[i].id > maxid) maxid = t->added[i].id;
        total += t->added[i].len;
    }
    t->vocab_size = (int32_t)(maxid + 1);
    size_t nv = (size_t)t->vocab_size + 1;
    t->off = calloc(nv, sizeof *t->off);
    t->len = calloc(nv, sizeof *t->len);
    t->has = calloc(nv, 1);
    t->bytes = malloc(total + 1);
    t->vocab = px_map_new();
    if (!t->off || !t->len || !t->has || !t->bytes || !t->vocab) goto oom;
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    size_t used = 0;
    json_object_foreach((json_t *)vocab, key, v) {
        int32_t id = (int32_t)json_integer_value(v);
        char *b;
        size_t bl;
        int all = tok_bytelevel_decode(key, strlen(key), &b, &bl);
        if (all < 0) goto oom;
        t->off[id] = (uint32_t)used;
        t->len[id] = (uint32_t)bl;
        t->has[id] = 1;
        memcpy(t->bytes + used, b, bl); /* bl <= strlen(key) */
        used += bl;
        int ok = px_map_put(strings, key, strlen(key), id) == 0;
        if (all == 1) {
            ok = ok && px_map_put(t->vocab, b, bl, id) == 0;
            if (bl == 1) t->byte_id[(uint8_t)b[0]] = id;
        }
        free(b);
        if (!ok) goto oom;
    }
    for (int i = 0; i < t->nadded; i++) {
        const tok_added_t *a = &t->added[i];
        t->off[a->id] = (uint32_t)used;
        t->len[a->id] = (uint32_t)a->len;
        t->has[a->id] = 1;
        memcpy(t->bytes + used, a->content, a->len);
        used += a->len;
    }
    return 0;
oom:
    return px_err_set(err, errlen, "tokenizer file '%s': out of memory for a vocabulary of %lld", t->path,
                      (long long)maxid + 1);
}

static int tok_build(px_tok_t *t, char *err, size_t errlen) {
    const json_t *root = t->root;
    t->eot_id = -1;
    t->unk_id = -1;
    if (!json_is_object(root))
        return px_err_set(err, errlen, "tokenizer file '%s': the top level is %s, expected an object", t->path,
                          json_type_name(root));
    const json_t *norm = json_object_get(root, "normalizer");
    if (norm && !json_is_null(norm))
        return px_err_set(err, errlen, "tokenizer file '%s': normalizer '%s' is not supported (only null)", t->path,
                          type_of(norm));
    const json_t *model = json_object_get(root, "model");
    if (check_model(t, model, err, errlen) < 0) return -1;
    const json_t *dec = json_object_get(root, "decoder");
    if (!json_is_object(dec) || strcmp(type_of(dec), "ByteLevel") != 0)
        return px_err_set(err, errlen, "tokenizer file '%s': decoder '%s' is not supported (only ByteLevel)", t->path,
                          json_is_object(dec) ? type_of(dec) : "null");
    bool bytelevel = false;
    if (build_pretok(t, json_object_get(root, "pre_tokenizer"), "pre_tokenizer", &bytelevel, err, errlen) < 0) return -1;
    if (!bytelevel)
        return px_err_set(err, errlen, "tokenizer file '%s': pre_tokenizer has no ByteLevel step; only byte-level BPE is supported",
                          t->path);
    if (build_added(t, json_object_get(root, "added_tokens"), err, errlen) < 0) return -1;
    px_map_t *strings = px_map_new();
    if (!strings) return px_err_set(err, errlen, "tokenizer file '%s': out of memory", t->path);
    int rc = build_vocab(t, json_object_get(model, "vocab"), strings, err, errlen);
    if (rc == 0) rc = build_merges(t, json_object_get(model, "merges"), strings, err, errlen);
    const json_t *unk = json_object_get(model, "unk_token");
    if (rc == 0 && json_is_string(unk) && token_id(strings, json_string_value(unk), json_string_length(unk), &t->unk_id) < 0)
        rc = px_err_set(err, errlen, "tokenizer file '%s': model.unk_token '%s' is not in model.vocab", t->path,
                        json_string_value(unk));
    px_map_destroy(&strings);
    if (rc < 0) return -1;
    find_eot(t);
    if (tok_threads_init(t) < 0) return px_err_set(err, errlen, "tokenizer file '%s': no thread key left", t->path);
    t->threads_ready = true;
    return 0;
}

static void tok_clear(px_tok_t *t) {
    if (t->threads_ready) tok_threads_free(t);
    json_decref(t->root);
    free(t->path);
    free(t->off);
    free(t->len);
    free(t->has);
    free(t->bytes);
    px_map_destroy(&t->vocab);
    free(t->merges);
    for (int i = 0; i < t->nadded; i++) free(t->added[i].content);
    free(t->added);
    for (int k = 0; k < t->nstages; k++) pcre2_code_free(t->stages[k].re);
}

px_tok_t *tok_from_doc(json_t *root, const char *path, char *err, size_t errlen) {
    px_tok_t *t = calloc(1, sizeof *t);
    if (t) t->path = strdup(path);
    if (!t || !t->path) {
        free(t);
        json_decref(root);
        px_err_set(err, errlen, "tokenizer file '%s': out of memory", path);
        return NULL;
    }
    t->root = root;
    if (tok_build(t, err, errlen) < 0) px_tok_free(&t);
    return t;
}

px_tok_t *px_tok_load(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        px_err_set(err, errlen, "cannot open tokenizer file '%s': %s", path, strerror(errno));
        return NULL;
    }
    json_error_t je;
    json_t *root = json_loadf(f, JSON_ALLOW_NUL, &je);
    fclose(f);
    if (!root) {
        px_err_set(err, errlen, "tokenizer file '%s': bad JSON at line %d:%d: %s", path, je.line, je.column, je.text);
        return NULL;
    }
    return tok_from_doc(root, path, err, errlen);
}

int px_tok_save(const px_tok_t *t, const char *path, char *err, size_t errlen) {
    char *s = json_dumps(t->root, JSON_INDENT(2));
    if (!s) return px_err_set(err, errlen, "tokenizer file '%s': out of memory writing it", path);
    int rc = px_file_write_atomic(path, s, strlen(s), NULL, 0, "tokenizer file", err, errlen);
    free(s);
    return rc;
}

void px_tok_free(px_tok_t **t) {
    if (!t || !*t) return;
    tok_clear(*t);
    free(*t);
    *t = NULL;
}

int px_tok_vocab_size(const px_tok_t *t) { return t->vocab_size; }
int px_tok_eot_id(const px_tok_t *t) { return t->eot_id; }

const char *px_tok_eot_text(const px_tok_t *t) {
    for (int i = 0; i < t->nadded; i++)
        if (t->added[i].id == t->eot_id) return t->added[i].content;
    return NULL;
}

json_t *tok_doc_new(const char *eot_text, int eot_id) {
    return json_pack("{s:s, s:n, s:n, s:[{s:i, s:s, s:b, s:b, s:b, s:b, s:b}], s:n,"
                     " s:{s:s, s:b, s:b, s:b}, s:n, s:{s:s, s:b, s:b, s:b},"
                     " s:{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:{}, s:[]}}",
                     "version", "1.0", "truncation", "padding",
                     "added_tokens", "id", eot_id, "content", eot_text, "single_word", 0, "lstrip", 0, "rstrip", 0,
                     "normalized", 0, "special", 1,
                     "normalizer",
                     "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 1,
                     "post_processor",
                     "decoder", "type", "ByteLevel", "add_prefix_space", 1, "trim_offsets", 1, "use_regex", 1,
                     "model", "type", "BPE", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
                     "fuse_unk", 0, "byte_fallback", 0, "ignore_merges", 0, "vocab", "merges");
}

int tok_doc_add_token(json_t *doc, const char *bytes, size_t len, int id) {
    char *s = tok_bytelevel_encode(bytes, len);
    if (!s) return -1;
    int rc = json_object_set_new(json_object_get(json_object_get(doc, "model"), "vocab"), s, json_integer(id));
    free(s);
    return rc;
}

int tok_doc_add_merge(json_t *doc, const char *a, size_t la, const char *b, size_t lb) {
    char *sa = tok_bytelevel_encode(a, la), *sb = tok_bytelevel_encode(b, lb);
    int rc = -1;
    if (sa && sb)
        rc = json_array_append_new(json_object_get(json_object_get(doc, "model"), "merges"), json_pack("[ss]", sa, sb));
    free(sa);
    free(sb);
    return rc;
}
