/* The tokenizer as a table of cases, no Python needed: merge rank order and
 * ignore_merges on a tiny hand-written tokenizer.json, added-token matching,
 * byte round trips (random bytes, invalid UTF-8, NUL, empty), the errors and
 * their messages, and the trainer's first merges on a fixed text, the same
 * whatever the thread count. Equality with Hugging Face itself is
 * test_hf_equal.py's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "px_check.h"
#include "px_tok.h"

static int failed;

static char tmpdir[] = "/tmp/px_tok_test.XXXXXX";

/* GPT-2's bytes_to_unicode, written out again here as the reference. */
static void byte_char(int b, char *out) {
    int cp = b;
    if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))) {
        int n = 0;
        for (int c = 0; c < b; c++)
            if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) sprintf(out, "%c", cp == '"' ? 0 : cp);
    else sprintf(out, "%c%c", 0xC0 | cp >> 6, 0x80 | (cp & 0x3F));
    if (cp == '"') strcpy(out, "\\\"");
    if (cp == '\\') strcpy(out, "\\\\");
}

/* A tokenizer.json with ids 0-255 for the bytes, then the given extra vocab
 * (a JSON fragment), merges, added tokens and options. */
static const char *write_json(const char *name, const char *extra_vocab, const char *merges, const char *added,
                              const char *ignore_merges) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"version\":\"1.0\",\"added_tokens\":[%s],\"normalizer\":null,", added);
    fprintf(f, "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},");
    fprintf(f, "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"ignore_merges\":%s,\"vocab\":{",
            ignore_merges);
    for (int b = 0; b < 256; b++) {
        char c[8];
        byte_char(b, c);
        fprintf(f, "%s\"%s\":%d", b ? "," : "", c, b);
    }
    fprintf(f, "%s%s},\"merges\":[%s]}}", *extra_vocab ? "," : "", extra_vocab, merges);
    fclose(f);
    return path;
}

static px_tok_t *load(const char *path) {
    char err[512];
    px_tok_t *t = px_tok_load(path, err, sizeof err);
    if (!t) fprintf(stderr, "load %s: %s\n", path, err);
    return t;
}

/* Encodes s and compares with the expected ids (ending at -1). */
static void expect_ids(const px_tok_t *t, const char *s, size_t len, const int *want, const char *what) {
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    char err[512];
    CHECK(px_tok_encode(t, s, len, &ids, &n, &cap, err, sizeof err) == 0, "%s: %s", what, err);
    size_t k = 0;
    while (want[k] >= 0) k++;
    int same = n == k;
    for (size_t i = 0; same && i < n; i++) same = ids[i] == want[i];
    if (!same) {
        fprintf(stderr, "  got:");
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    CHECK(same, "%s: ids differ", what);
    free(ids);
}

static void expect_roundtrip(const px_tok_t *t, const char *s, size_t len, const char *what) {
    int32_t *ids = NULL;
    size_t n = 0, cap = 0, olen = 0, ocap = 0;
    char *out = NULL, err[512];
    CHECK(px_tok_encode(t, s, len, &ids, &n, &cap, err, sizeof err) == 0, "%s: %s", what, err);
    CHECK(px_tok_decode(t, ids, n, &out, &olen, &ocap, err, sizeof err) == 0, "%s: %s", what, err);
    CHECK(olen == len && (len == 0 || memcmp(out, s, len) == 0), "%s: decode(encode(x)) != x (%zu bytes, got %zu)",
          what, len, olen);
    free(ids);
    free(out);
}

static void expect_error(const char *path, const char *needle, const char *what) {
    char err[512] = "";
    px_tok_t *t = px_tok_load(path, err, sizeof err);
    CHECK(!t, "%s: loaded", what);
    CHECK(strstr(err, needle) != NULL, "%s: message '%s' lacks '%s'", what, err, needle);
    px_tok_free(&t);
}

static void write_file(const char *name, const char *text, char *path, size_t plen) {
    snprintf(path, plen, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

/* Byte b is id b; then 256 ab, 257 bc, 258 abc, 259 abd (only through ignore_merges) */
#define EXTRA "\"ab\":256,\"bc\":257,\"abc\":258,\"abd\":259"

static void test_merge_rank(void) {
    /* "b c" ranks first: abc -> a bc -> abc. */
    px_tok_t *t = load(write_json("rank1.json", EXTRA, "\"b c\",\"a b\",\"a bc\"", "", "false"));
    if (!t) return failed++, (void)0;
    expect_ids(t, "abc", 3, (int[]){258, -1}, "b c first");
    expect_ids(t, "abd", 3, (int[]){256, 'd', -1}, "abd without ignore_merges");
    CHECK(px_tok_vocab_size(t) == 260, "vocab size %d", px_tok_vocab_size(t));
    CHECK(px_tok_eot_id(t) == -1 && !px_tok_eot_text(t), "an eot without added tokens");
    px_tok_free(&t);
    /* "a b" first: abc -> ab c, and "a bc" never applies. The [a, b] form. */
    t = load(write_json("rank2.json", EXTRA, "[\"a\",\"b\"],[\"b\",\"c\"],[\"a\",\"bc\"]", "", "false"));
    if (!t) return failed++, (void)0;
    expect_ids(t, "abc", 3, (int[]){256, 'c', -1}, "a b first");
    px_tok_free(&t);
    t = load(write_json("ignore.json", EXTRA, "\"b c\",\"a b\",\"a bc\"", "", "true"));
    if (!t) return failed++, (void)0;
    expect_ids(t, "abd", 3, (int[]){259, -1}, "ignore_merges: a whole pre-token in the vocabulary");
    /* A long pre-token goes through the heap path: 100 x "abc". */
    char longw[301];
    int want[101];
    for (int i = 0; i < 100; i++) {
        memcpy(longw + 3 * i, "abc", 3);
        want[i] = 258;
    }
    want[100] = -1;
    px_tok_free(&t);
    t = load(write_json("rank1b.json", EXTRA, "\"b c\",\"a b\",\"a bc\"", "", "false"));
    expect_ids(t, longw, 300, want, "100 x abc in one pre-token (heap path)");
    px_tok_free(&t);
}

static void test_added(void) {
    const char *added = "{\"id\":300,\"content\":\"<|endoftext|>\",\"special\":true,\"normalized\":false},"
                        "{\"id\":301,\"content\":\"<|x|>\",\"special\":true},"
                        "{\"id\":302,\"content\":\"<|x|>y\",\"special\":true}";
    px_tok_t *t = load(write_json("added.json", EXTRA, "\"a b\"", added, "false"));
    if (!t) return failed++, (void)0;
    CHECK(px_tok_eot_id(t) == 300, "eot id %d", px_tok_eot_id(t));
    CHECK(px_tok_eot_text(t) && strcmp(px_tok_eot_text(t), "<|endoftext|>") == 0, "eot text");
    CHECK(px_tok_vocab_size(t) == 303, "vocab size with added tokens %d", px_tok_vocab_size(t));
    expect_ids(t, "ab<|endoftext|>ab", 17, (int[]){256, 300, 256, -1}, "special token inside text");
    expect_ids(t, "<|x|>y<|x|>", 11, (int[]){302, 301, -1}, "leftmost-longest added token");
    expect_ids(t, "<|endoftext", 11, (int[]){'<', '|', 'e', 'n', 'd', 'o', 'f',
                                            't', 'e', 'x', 't', -1},
               "a cut special token is text");
    const char s[] = "ab<|endoftext|>\xff\xfe<|x|>";
    expect_roundtrip(t, s, sizeof s - 1, "added tokens round trip");
    int32_t bad[] = {97, 260};
    char *out = NULL, err[512];
    size_t olen = 0, ocap = 0;
    CHECK(px_tok_decode(t, bad, 2, &out, &olen, &ocap, err, sizeof err) < 0 && strstr(err, "id 260"),
          "decoding an unassigned id: '%s'", err);
    int32_t neg[] = {-5};
    CHECK(px_tok_decode(t, neg, 1, &out, &olen, &ocap, err, sizeof err) < 0 && strstr(err, "id -5"), "negative id: '%s'",
          err);
    free(out);
    px_tok_free(&t);
}

static void test_roundtrip(const px_tok_t *t, const char *who) {
    char what[128];
    expect_roundtrip(t, "", 0, who);
    expect_roundtrip(t, "a\0b\0\0", 5, who);
    static const char *invalid[] = {"\xff", "\xc3", "abc\xe2\x82", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80",
                                    "h\xe9llo w\xf6rld", "\xe2\x82\xac\xe2", "caf\xc3\xa9 \xf0\x9f\x98"};
    for (size_t i = 0; i < sizeof invalid / sizeof *invalid; i++) {
        snprintf(what, sizeof what, "%s: invalid UTF-8 case %zu", who, i);
        expect_roundtrip(t, invalid[i], strlen(invalid[i]), what);
    }
    unsigned seed = 12345;
    char buf[4096];
    for (int r = 0; r < 200; r++) {
        size_t len = (size_t)(rand_r(&seed) % sizeof buf);
        for (size_t i = 0; i < len; i++) {
            /* Half the cases mostly text, so merges and the regex get a say. */
            int x = rand_r(&seed);
            buf[i] = (char)(r % 2 && x % 4 ? " etaoin\n\t"[x % 9] : x % 256);
        }
        snprintf(what, sizeof what, "%s: random bytes, seed 12345 case %d", who, r);
        expect_roundtrip(t, buf, len, what);
    }
    /* A megabyte of spaces: one pre-token, the heap path, the JIT stack. */
    size_t big = 1 << 20;
    char *sp = malloc(big);
    memset(sp, ' ', big);
    sp[big - 1] = 'x';
    expect_roundtrip(t, sp, big, "a megabyte of spaces");
    free(sp);
}

static void test_errors(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/missing.json", tmpdir);
    expect_error(path, "missing.json': No such file", "missing file");
    write_file("bad.json", "{\"model\": {\n  \"type\": \"BPE\",,\n}}", path, sizeof path);
    expect_error(path, "bad JSON at line 2:", "bad JSON");
    write_file("empty.json", "", path, sizeof path);
    expect_error(path, "bad JSON", "empty file");
    write_file("wp.json",
               "{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"},"
               "\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}",
               path, sizeof path);
    expect_error(path, "model.type 'WordPiece' is not supported", "unsupported model");
    write_file("nfc.json",
               "{\"normalizer\":{\"type\":\"NFC\"},\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"},"
               "\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}",
               path, sizeof path);
    expect_error(path, "normalizer 'NFC' is not supported", "unsupported normalizer");
    write_file("ws.json",
               "{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Whitespace\"},\"decoder\":{\"type\":\"ByteLevel\"},"
               "\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}",
               path, sizeof path);
    expect_error(path, "pre-tokenizer 'Whitespace' is not supported", "unsupported pre-tokenizer");
    write_file("nomerges.json",
               "{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"},"
               "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}}",
               path, sizeof path);
    expect_error(path, "model.merges is missing", "missing merges");
    expect_error(write_json("oov.json", EXTRA, "\"a b\",\"a q\"", "", "false"), "merges[1] ('a' 'q'): token 'aq' is not in model.vocab",
                 "merge of an unknown token");
    write_file("badre.json",
               "{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
               "\"pattern\":{\"Regex\":\"(a\"},\"behavior\":\"Isolated\"},{\"type\":\"ByteLevel\"}]},"
               "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}",
               path, sizeof path);
    expect_error(path, "regex '(a' does not compile", "bad regex");
    write_file("vocab.json",
               "{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"},"
               "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"zero\"},\"merges\":[]}}",
               path, sizeof path);
    expect_error(path, "model.vocab['a'] is not an id", "vocab value not an id");
    char err[512] = "";
    CHECK(!px_tok_trainer_new(100, "<|endoftext|>", err, sizeof err) && strstr(err, "vocab_size 100"), "trainer: '%s'", err);
}

static void train_text(px_tok_trainer_t *tr, const char *s) {
    char err[512];
    CHECK(px_tok_trainer_feed(tr, s, strlen(s), err, sizeof err) == 0, "feed: %s", err);
}

static void test_train_first_merges(void) {
    char err[512];
    px_tok_trainer_t *tr = px_tok_trainer_new(261, "<|endoftext|>", err, sizeof err);
    CHECK(tr, "trainer: %s", err);
    if (!tr) return;
    /* Words: "the" 1, " the" 3, " cat" 1. (h,e) and (t,h) tie at 4: "h" < "t". */
    train_text(tr, "the the the the cat<|endoftext|>");
    px_tok_t *t = px_tok_trainer_finish(tr, 1, NULL, NULL, err, sizeof err);
    px_tok_trainer_free(&tr);
    CHECK(t, "finish: %s", err);
    if (!t) return;
    CHECK(px_tok_vocab_size(t) == 261 && px_tok_eot_id(t) == 260, "vocab %d eot %d", px_tok_vocab_size(t),
          px_tok_eot_id(t));
    expect_ids(t, "he", 2, (int[]){256, -1}, "merge 1: h e");
    expect_ids(t, "the", 3, (int[]){257, -1}, "merge 2: t he");
    expect_ids(t, " the", 4, (int[]){258, -1}, "merge 3: ' ' the");
    expect_ids(t, " cat<|endoftext|>", 17, (int[]){259, 'a' - 33, 't' - 33, 260, -1}, "merge 4: ' ' c, then eot");
    char path[256];
    snprintf(path, sizeof path, "%s/trained.json", tmpdir);
    CHECK(px_tok_save(t, path, err, sizeof err) == 0, "save: %s", err);
    px_tok_t *back = load(path);
    CHECK(back != NULL, "reload of a saved tokenizer");
    if (back) expect_ids(back, " the cat", 8, (int[]){258, 259, 'a' - 33, 't' - 33, -1}, "reloaded");
    px_tok_free(&back);
    test_roundtrip(t, "trained");
    px_tok_free(&t);
}

/* Many distinct words, so merges touch enough words to go parallel: the
 * saved file must be the same byte for byte at 1 and 4 threads. */
static char *train_random(int threads, const char *name) {
    char err[512];
    px_tok_trainer_t *tr = px_tok_trainer_new(600, "<|endoftext|>", err, sizeof err);
    unsigned seed = 777;
    char doc[8192];
    for (int d = 0; d < 60; d++) {
        size_t n = 0;
        while (n < sizeof doc - 16) {
            int wl = 1 + rand_r(&seed) % 8;
            doc[n++] = ' ';
            for (int i = 0; i < wl; i++) doc[n++] = "abcdeé"[rand_r(&seed) % 6];
        }
        CHECK(px_tok_trainer_feed(tr, doc, n, err, sizeof err) == 0, "feed: %s", err);
    }
    px_tok_t *t = px_tok_trainer_finish(tr, threads, NULL, NULL, err, sizeof err);
    px_tok_trainer_free(&tr);
    CHECK(t, "finish: %s", err);
    static char path[2][256];
    char *p = path[threads > 1];
    snprintf(p, 256, "%s/%s", tmpdir, name);
    if (t) CHECK(px_tok_save(t, p, err, sizeof err) == 0, "save: %s", err);
    px_tok_free(&t);
    return p;
}

static void test_train_threads(void) {
    const char *a = train_random(1, "t1.json"), *b = train_random(4, "t4.json");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", a, b);
    CHECK(system(cmd) == 0, "training at 1 and 4 threads differ: %s %s", a, b);
}

int main(void) {
    if (!mkdtemp(tmpdir)) return perror("mkdtemp"), 1;
    test_merge_rank();
    test_added();
    test_errors();
    test_train_first_merges();
    test_train_threads();
    px_tok_t *t = load(write_json("plain.json", EXTRA, "\"a b\"", "", "false"));
    if (t) test_roundtrip(t, "hand-written");
    px_tok_free(&t);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    if (failed) {
        fprintf(stderr, "%d failure(s)\n", failed);
        return 1;
    }
    printf("tokenizer: all cases passed\n");
    return 0;
}
