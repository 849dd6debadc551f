/* JSON helpers for the event log: escaping strings into events, and a strict
 * validator for the "fields" a caller passes to px_events_emit.
 *
 * Why a validator: an event line that is not valid JSON would break every
 * consumer of the topic, and the caller builds fields by hand with snprintf.
 * The validator is a small recursive-descent parser (RFC 8259 grammar, depth
 * limited) that only answers yes or no; nothing here allocates. */
#include "events.h"

#include <string.h>

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when invalid. */
static size_t utf8_seq_len(const unsigned char *s) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    size_t n;
    unsigned int cp;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff))) return 0;
    if (cp >= 0xd800 && cp <= 0xdfff) return 0; /* surrogates are not characters */
    return n;
}

void px_json_escape(const char *s, char *out, size_t outlen) {
    if (outlen == 0) return;
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        char tmp[8];
        const char *piece = tmp;
        size_t plen, adv = 1;
        unsigned char c = *p;
        switch (c) {
        case '"': piece = "\\\""; plen = 2; break;
        case '\\': piece = "\\\\"; plen = 2; break;
        case '\n': piece = "\\n"; plen = 2; break;
        case '\r': piece = "\\r"; plen = 2; break;
        case '\t': piece = "\\t"; plen = 2; break;
        case '\b': piece = "\\b"; plen = 2; break;
        case '\f': piece = "\\f"; plen = 2; break;
        default:
            if (c < 0x20) {
                static const char hex[] = "0123456789abcdef";
                memcpy(tmp, "\\u00", 4);
                tmp[4] = hex[c >> 4];
                tmp[5] = hex[c & 15];
                plen = 6;
            } else if ((adv = utf8_seq_len(p)) == 0) {
                piece = "\\ufffd";
                plen = 6;
                adv = 1;
            } else {
                piece = (const char *)p;
                plen = adv;
            }
        }
        if (o + plen + 1 > outlen) break; /* never cut a character or an escape */
        memcpy(out + o, piece, plen);
        o += plen;
        p += adv;
    }
    out[o] = '\0';
}

/* ---- validator ---- */

typedef struct {
    const char *p, *end;
    int depth;
} jp_t;

enum { JSON_MAX_DEPTH = 32 };

static void skip_ws(jp_t *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int is_hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int parse_string(jp_t *j) {
    if (j->p >= j->end || *j->p != '"') return 0;
    j->p++;
    while (j->p < j->end) {
        unsigned char c = (unsigned char)*j->p;
        if (c == '"') {
            j->p++;
            return 1;
        }
        if (c < 0x20) return 0;
        if (c == '\\') {
            if (j->end - j->p < 2) return 0;
            char e = j->p[1];
            if (e == 'u') {
                if (j->end - j->p < 6) return 0;
                for (int i = 2; i < 6; i++)
                    if (!is_hex(j->p[i])) return 0;
                j->p += 6;
            } else if (strchr("\"\\/bfnrt", e) && e) {
                j->p += 2;
            } else {
                return 0;
            }
            continue;
        }
        /* utf8_seq_len reads up to 4 bytes: make sure they are inside the input. */
        size_t n = (c < 0x80) ? 1 : 0;
        if (!n) {
            unsigned char buf[4] = {0, 0, 0, 0};
            size_t avail = (size_t)(j->end - j->p);
            memcpy(buf, j->p, avail < 4 ? avail : 4);
            n = utf8_seq_len(buf);
            if (n == 0 || n > avail) return 0;
        }
        j->p += n;
    }
    return 0;
}

static int parse_digits(jp_t *j) {
    const char *s = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    return j->p > s;
}

static int parse_number(jp_t *j) {
    if (j->p < j->end && *j->p == '-') j->p++;
    if (j->p >= j->end) return 0;
    if (*j->p == '0') {
        j->p++;
    } else if (!parse_digits(j)) {
        return 0;
    }
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (!parse_digits(j)) return 0;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
        if (!parse_digits(j)) return 0;
    }
    return 1;
}

static int parse_literal(jp_t *j, const char *lit) {
    size_t n = strlen(lit);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n) != 0) return 0;
    j->p += n;
    return 1;
}

static int parse_value(jp_t *j);

/* members: "k":v (, "k":v)*, stopping before `close` (or at end when close is 0). */
static int parse_members(jp_t *j, char close) {
    skip_ws(j);
    if (j->p == j->end || (close && *j->p == close)) return 1;
    for (;;) {
        skip_ws(j);
        if (!parse_string(j)) return 0;
        skip_ws(j);
        if (j->p >= j->end || *j->p != ':') return 0;
        j->p++;
        if (!parse_value(j)) return 0;
        skip_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        return 1;
    }
}

static int parse_value(jp_t *j) {
    skip_ws(j);
    if (j->p >= j->end) return 0;
    int ok;
    switch (*j->p) {
    case '"': return parse_string(j);
    case 't': return parse_literal(j, "true");
    case 'f': return parse_literal(j, "false");
    case 'n': return parse_literal(j, "null");
    case '{':
        if (++j->depth > JSON_MAX_DEPTH) return 0;
        j->p++;
        ok = parse_members(j, '}');
        skip_ws(j);
        if (!ok || j->p >= j->end || *j->p != '}') return 0;
        j->p++;
        j->depth--;
        return 1;
    case '[':
        if (++j->depth > JSON_MAX_DEPTH) return 0;
        j->p++;
        skip_ws(j);
        if (j->p < j->end && *j->p == ']') {
            j->p++;
            j->depth--;
            return 1;
        }
        for (;;) {
            if (!parse_value(j)) return 0;
            skip_ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            break;
        }
        if (j->p >= j->end || *j->p != ']') return 0;
        j->p++;
        j->depth--;
        return 1;
    default: return parse_number(j);
    }
}

int px_json_members_valid(const char *s, size_t len) {
    jp_t j = {s, s + len, 0};
    if (!parse_members(&j, 0)) return 0;
    skip_ws(&j);
    return j.p == j.end;
}
