/* The byte-level alphabet and the regex pre-tokenizer.
 *
 * GPT-2 maps every byte to a printable code point (bytes_to_unicode) so that
 * a vocabulary of strings can hold any byte sequence; tokenizer.json stores
 * tokens in that alphabet. phalanx converts each token back to raw bytes once,
 * at load, and then works on bytes only: no per-encode mapping.
 *
 * HF compiles its pre-tokenizer patterns with Oniguruma; phalanx uses PCRE2
 * (UTF + UCP, JIT when the library has it). The two agree on these patterns
 * (\p{L}, \p{N}, lookahead, (?i:...)) except for white space: Oniguruma's \s
 * is Unicode's White_Space, which has U+0085 (NEXT LINE), while PCRE2's \s
 * under UCP lacks it; tok_regex_compile rewrites \s and \S to add it. */
#include <stdlib.h>
#include <string.h>

#include "px_err.h"
#include "tok_internal.h"

const char TOK_GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static bool printable_byte(int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_byte_to_cp(uint8_t b) {
    if (printable_byte(b)) return b;
    /* The others take 256, 257, ... in byte order. */
    uint32_t n = 0;
    for (int c = 0; c < b; c++)
        if (!printable_byte(c)) n++;
    return 256 + n;
}

int tok_cp_to_byte(uint32_t cp) {
    static int16_t table[324];
    static int ready; /* benign race: every thread writes the same values */
    if (!ready) {
        for (int i = 0; i < 324; i++) table[i] = -1;
        for (int b = 0; b < 256; b++) table[tok_byte_to_cp((uint8_t)b)] = (int16_t)b;
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    return cp < 324 ? table[cp] : -1;
}

/* Decodes one UTF-8 character of valid UTF-8; returns its length. */
static size_t utf8_next(const unsigned char *s, uint32_t *cp) {
    if (s[0] < 0x80) { *cp = s[0]; return 1; }
    if (s[0] < 0xE0) { *cp = (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F); return 2; }
    if (s[0] < 0xF0) { *cp = (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F); return 3; }
    *cp = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
    return 4;
}

static void utf8_put(char *o, size_t *n, uint32_t cp) {
    if (cp < 0x80) o[(*n)++] = (char)cp;
    else if (cp < 0x800) {
        o[(*n)++] = (char)(0xC0 | cp >> 6);
        o[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        o[(*n)++] = (char)(0xE0 | cp >> 12);
        o[(*n)++] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[(*n)++] = (char)(0x80 | (cp & 0x3F));
    }
}

int tok_bytelevel_decode(const char *s, size_t len, char **out, size_t *olen) {
    char *o = malloc(len + 1);
    if (!o) return -1;
    size_t n = 0, i = 0;
    int all = 1;
    size_t valid = tok_utf8_valid_prefix(s, len);
    while (i < valid) {
        uint32_t cp;
        i += utf8_next((const unsigned char *)s + i, &cp);
        int b = tok_cp_to_byte(cp);
        if (b < 0) { all = 0; break; }
        o[n++] = (char)b;
    }
    if (!all || valid < len) {
        memcpy(o, s, len);
        n = len;
        all = 0;
    }
    *out = o;
    *olen = n;
    return all;
}

char *tok_bytelevel_encode(const char *b, size_t len) {
    char *o = malloc(len * 2 + 1);
    if (!o) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) utf8_put(o, &n, tok_byte_to_cp((uint8_t)b[i]));
    o[n] = 0;
    return o;
}

size_t tok_utf8_valid_prefix(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        /* ASCII runs eight bytes at a time. */
        while (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= len) break;
        unsigned c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t need;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) lo = 0xA0;      /* overlong */
            else if (c == 0xED) hi = 0x9F; /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) lo = 0x90;      /* overlong */
            else if (c == 0xF4) hi = 0x8F; /* above U+10FFFF */
        } else return i;
        if (i + need >= len) return i; /* cut short */
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        i += need + 1;
    }
    return i;
}

/* Copies pattern into a new string with \s -> [\s\x{85}] and \S ->
 * [^\s\x{85}] (inside a class: \s -> \s\x{85}). */
static char *rewrite_white_space(const char *p, size_t n) {
    char *o = malloc(n * 6 + 1);
    if (!o) return NULL;
    size_t k = 0;
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[++i];
            const char *r = NULL;
            if (d == 's') r = in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
            else if (d == 'S' && !in_class) r = "[^\\s\\x{85}]";
            if (r) {
                memcpy(o + k, r, strlen(r));
                k += strlen(r);
            } else {
                o[k++] = c;
                o[k++] = d;
            }
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            o[k++] = c;
            /* A ']' right after '[' or '[^' is a literal. */
            if (i + 1 < n && p[i + 1] == '^') o[k++] = p[++i];
            if (i + 1 < n && p[i + 1] == ']') o[k++] = p[++i];
            continue;
        }
        if (in_class && c == ']') in_class = false;
        o[k++] = c;
    }
    o[k] = 0;
    return o;
}

pcre2_code *tok_regex_compile(const char *pattern, size_t plen, bool literal, bool *jit, const char *what,
                              char *err, size_t errlen) {
    char *p = literal ? NULL : rewrite_white_space(pattern, plen);
    if (!literal && !p) {
        px_err_set(err, errlen, "%s: out of memory", what);
        return NULL;
    }
    int code;
    PCRE2_SIZE at;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(literal ? pattern : p), literal ? plen : PCRE2_ZERO_TERMINATED, opts,
                                   &code, &at, NULL);
    free(p);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        px_err_set(err, errlen, "%s: regex '%.*s' does not compile: %s (near offset %zu)", what, (int)plen, pattern,
                   (const char *)msg, (size_t)at);
        return NULL;
    }
    *jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    return re;
}
