/* The training job's sample line (sample_line.h). */
#include "sample_line.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "px_err.h"
#include "px_log.h"
#include "rng.h"
#include "sample.h"

px_tok_t *px_sample_line_tokenizer(const char *data_dir) {
    char path[4200], err[PX_ERRLEN];
    struct stat st;
    snprintf(path, sizeof path, "%s/tokenizer.json", data_dir);
    if (stat(path, &st) != 0) return NULL;
    px_tok_t *t = px_tok_load(path, err, sizeof err);
    if (!t) px_log_warn("sample_tokenizer_unusable reason=\"%s\": samples print bytes", err);
    return t;
}

typedef struct {
    int32_t *ids;
    int n;
} ids_t;

static int keep(void *arg, int token) {
    ids_t *k = arg;
    k->ids[k->n++] = token;
    return 0;
}

/* The length of the valid UTF-8 sequence at s[0..n), 0 when there is none
 * (a stray continuation byte, a truncated or overlong sequence, a
 * surrogate): a sample of a few tokens can end inside a character. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    size_t len = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : 0;
    if (len == 0 || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    uint32_t cp = len == 2 ? (s[0] & 0x1fu) << 6 | (s[1] & 0x3fu)
                  : len == 3 ? (s[0] & 0x0fu) << 12 | (s[1] & 0x3fu) << 6 | (s[2] & 0x3fu)
                             : (s[0] & 0x07u) << 18 | (s[1] & 0x3fu) << 12 | (s[2] & 0x3fu) << 6 | (s[3] & 0x3fu);
    int ok = len == 2 || (len == 3 && cp >= 0x800 && (cp < 0xd800 || cp > 0xdfff)) ||
             (len == 4 && cp >= 0x10000 && cp <= 0x10ffff);
    return ok ? len : 0;
}

/* C escapes for quotes, backslashes, control bytes and bytes that are not
 * valid UTF-8, so the line stays one line of valid UTF-8. */
static void put_escaped(const char *text, size_t n) {
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        size_t len;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else if (c < 0x80) putchar(c);
        else if ((len = utf8_len(s + i, n - i)) > 0) fwrite(s + i, 1, len, stdout), i += len - 1;
        else printf("\\x%02x", c);
    }
}

int px_sample_line(px_gpt_t *model, const px_tok_t *tok, int tokens, uint64_t seed, int64_t step) {
    int start = tok && px_tok_eot_id(tok) >= 0 ? px_tok_eot_id(tok) : '\n';
    if (start >= model->config.vocab_size) start = 0;
    ids_t k = {malloc((size_t)tokens * sizeof *k.ids), 0};
    char *text = NULL;
    size_t len = 0, cap = 0;
    char err[PX_ERRLEN] = "out of memory";
    const px_sample_opts_t o = {.temperature = 1.0f, .top_k = 0, .seed = px_hash4(seed, (uint64_t)step, 0, 0)};
    int rc = k.ids ? px_sample_generate(model, &start, 1, tokens, &o, keep, &k) : -1;
    if (rc == 0 && tok) {
        rc = px_tok_decode(tok, k.ids, (size_t)k.n, &text, &len, &cap, err, sizeof err);
    } else if (rc == 0 && (text = malloc((size_t)k.n + 1))) {
        for (int i = 0; i < k.n; i++) text[len++] = (char)k.ids[i];
    } else {
        rc = -1;
    }
    if (rc == 0) {
        printf("sample step=%lld tokens=%d text=\"", (long long)step, k.n);
        put_escaped(text, len);
        printf("\"\n");
        fflush(stdout);
    } else {
        px_log_warn("sample_failed step=%lld reason=\"%s\"", (long long)step, err);
    }
    free(text);
    free(k.ids);
    return rc;
}
