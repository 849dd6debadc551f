/* Encoding and decoding: added tokens, pre-tokenization, BPE merges.
 *
 * The merge rule is HF's (and GPT-2's): within one pre-token, repeatedly
 * merge the adjacent pair of lowest rank, the leftmost one on a tie. Short
 * pre-tokens (nearly all) keep the ranks of their pairs in an array and scan
 * it for the minimum after each merge, which beats any heap below a few
 * dozen symbols; long ones (runs of spaces, long words) use a linked list and
 * a binary heap of (rank, position), O(n log n), so a megabyte of spaces
 * costs no more than a megabyte of words.
 *
 * Most pre-tokens repeat, so each thread keeps a direct-mapped cache of
 * recent short pre-tokens and their ids (a miss only recomputes: hostile text
 * can slow the cache, not break it). Threads never share mutable state: each
 * one's cache, PCRE2 match data and scratch arrays live in a tok_thread_t
 * found through a pthread key of the tokenizer. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "px_err.h"
#include "tok_internal.h"

/* ---- the merge table ---- */

static inline uint64_t pair_key(int32_t l, int32_t r) {
    return ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
}

static inline size_t pair_slot(uint64_t k, size_t mask) {
    k *= 0x9E3779B97F4A7C15ull;
    return (size_t)(k ^ k >> 29) & mask;
}

int tok_merges_init(px_tok_t *t, size_t n) {
    size_t cap = 16;
    while (cap < n * 2 + 16) cap *= 2;
    t->merges = calloc(cap, sizeof *t->merges);
    t->merge_mask = cap - 1;
    return t->merges ? 0 : -1;
}

int tok_merges_put(px_tok_t *t, int32_t left, int32_t right, int32_t rank, int32_t id) {
    uint64_t k = pair_key(left, right);
    size_t i = pair_slot(k, t->merge_mask);
    while (t->merges[i].key && t->merges[i].key != k) i = (i + 1) & t->merge_mask;
    t->merges[i] = (tok_merge_slot_t){.key = k, .rank = rank, .id = id};
    return 0;
}

/* The rank of (l, r) and the id it merges into; INT32_MAX when no merge. */
static inline int32_t merge_rank(const px_tok_t *t, int32_t l, int32_t r, int32_t *id) {
    uint64_t k = pair_key(l, r);
    size_t i = pair_slot(k, t->merge_mask);
    for (;;) {
        const tok_merge_slot_t *s = &t->merges[i];
        if (s->key == k) {
            *id = s->id;
            return s->rank;
        }
        if (!s->key) return INT32_MAX;
        i = (i + 1) & t->merge_mask;
    }
}

/* ---- per-thread state ---- */

#define CACHE_BITS 14
#define CACHE_KEY 22
#define CACHE_IDS 6
#define HEAP_FROM 48 /* symbols from which a pre-token uses the heap */

typedef struct {
    uint8_t klen, nids; /* klen 0: empty */
    char key[CACHE_KEY];
    int32_t ids[CACHE_IDS];
} cache_ent_t;

typedef struct {
    int32_t rank, pos, left, right, id;
} heap_ent_t;

struct tok_thread {
    px_tok_t *t;
    tok_thread_t *prev, *next;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
    cache_ent_t *cache;
    /* scratch, grown as needed: symbols, pair ranks/ids, list links, heap */
    int32_t *sym, *rank, *nid, *lprev, *lnext;
    size_t symcap;
    heap_ent_t *heap;
    size_t heapcap;
    char *buf[TOK_MAX_STAGES]; /* a piece with its prefix space */
    size_t bufcap[TOK_MAX_STAGES];
    /* the call in progress */
    int (*word)(void *arg, const char *p, size_t len); /* tok_pretokenize's */
    void *word_arg;
    int32_t **ids;
    size_t *n, *cap;
    char *err;
    size_t errlen;
};

static void thread_free(tok_thread_t *s) {
    pcre2_match_data_free(s->md);
    pcre2_match_context_free(s->mctx);
    pcre2_jit_stack_free(s->jstack);
    free(s->cache);
    free(s->sym);
    free(s->rank);
    free(s->nid);
    free(s->lprev);
    free(s->lnext);
    free(s->heap);
    for (int k = 0; k < TOK_MAX_STAGES; k++) free(s->buf[k]);
    free(s);
}

/* A thread that exits hands its state back. */
static void thread_exit(void *p) {
    tok_thread_t *s = p;
    px_tok_t *t = s->t;
    pthread_mutex_lock(&t->lock);
    if (s->prev) s->prev->next = s->next;
    else t->threads = s->next;
    if (s->next) s->next->prev = s->prev;
    pthread_mutex_unlock(&t->lock);
    thread_free(s);
}

int tok_threads_init(px_tok_t *t) {
    if (pthread_key_create(&t->key, thread_exit) != 0) return -1;
    pthread_mutex_init(&t->lock, NULL);
    return 0;
}

void tok_threads_free(px_tok_t *t) {
    pthread_key_delete(t->key);
    for (tok_thread_t *s = t->threads, *nx; s; s = nx) {
        nx = s->next;
        thread_free(s);
    }
    t->threads = NULL;
    pthread_mutex_destroy(&t->lock);
}

static tok_thread_t *thread_state(const px_tok_t *ct) {
    px_tok_t *t = (px_tok_t *)ct; /* only the list of states changes, under the lock */
    tok_thread_t *s = pthread_getspecific(t->key);
    if (s) return s;
    s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->t = t;
    s->md = pcre2_match_data_create(1, NULL);
    s->mctx = pcre2_match_context_create(NULL);
    /* Backtracking over a long run of white space (\s+(?!\S)) needs more
     * than the JIT's default 32 KiB; the stack is reserved, not touched. */
    s->jstack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
    s->cache = calloc((size_t)1 << CACHE_BITS, sizeof *s->cache);
    if (!s->md || !s->mctx || !s->cache) {
        thread_free(s);
        return NULL;
    }
    if (s->jstack) pcre2_jit_stack_assign(s->mctx, NULL, s->jstack);
    pthread_mutex_lock(&t->lock);
    s->next = t->threads;
    if (t->threads) t->threads->prev = s;
    t->threads = s;
    pthread_mutex_unlock(&t->lock);
    if (pthread_setspecific(t->key, s) != 0) {
        thread_exit(s);
        return NULL;
    }
    return s;
}

static int grow_syms(tok_thread_t *s, size_t n) {
    if (n <= s->symcap) return 0;
    size_t c = s->symcap ? s->symcap : 64;
    while (c < n) c *= 2;
    int32_t **arrs[] = {&s->sym, &s->rank, &s->nid, &s->lprev, &s->lnext};
    for (size_t k = 0; k < sizeof arrs / sizeof *arrs; k++) {
        int32_t *p = realloc(*arrs[k], c * sizeof *p);
        if (!p) return -1;
        *arrs[k] = p;
    }
    s->symcap = c;
    return 0;
}

static int emit(tok_thread_t *s, int32_t id) {
    if (*s->n == *s->cap) {
        size_t c = *s->cap ? *s->cap * 2 : 256;
        int32_t *p = realloc(*s->ids, c * sizeof *p);
        if (!p) return px_err_set(s->err, s->errlen, "tokenizer '%s': out of memory for %zu ids", s->t->path, c);
        *s->ids = p;
        *s->cap = c;
    }
    (*s->ids)[(*s->n)++] = id;
    return 0;
}

/* ---- BPE ---- */

/* Short pre-tokens: an array of pair ranks, scanned for the minimum. */
static size_t merge_scan(const px_tok_t *t, tok_thread_t *s, size_t m) {
    int32_t *sym = s->sym, *rank = s->rank, *nid = s->nid;
    for (size_t i = 0; i + 1 < m; i++) rank[i] = merge_rank(t, sym[i], sym[i + 1], &nid[i]);
    while (m > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < m; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == INT32_MAX) break;
        sym[best] = nid[best];
        /* Symbol best+1 and pair best+1 go; pairs best-1 and best change. */
        memmove(sym + best + 1, sym + best + 2, (m - best - 2) * sizeof *sym);
        if (best + 2 < m) {
            memmove(rank + best + 1, rank + best + 2, (m - best - 3) * sizeof *rank);
            memmove(nid + best + 1, nid + best + 2, (m - best - 3) * sizeof *nid);
        }
        m--;
        if (best > 0) rank[best - 1] = merge_rank(t, sym[best - 1], sym[best], &nid[best - 1]);
        if (best + 1 < m) rank[best] = merge_rank(t, sym[best], sym[best + 1], &nid[best]);
    }
    return m;
}

static inline bool heap_less(const heap_ent_t *a, const heap_ent_t *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static int heap_push(tok_thread_t *s, size_t *hn, heap_ent_t e) {
    if (*hn == s->heapcap) {
        size_t c = s->heapcap ? s->heapcap * 2 : 256;
        heap_ent_t *p = realloc(s->heap, c * sizeof *p);
        if (!p) return -1;
        s->heap = p;
        s->heapcap = c;
    }
    size_t i = (*hn)++;
    while (i > 0 && heap_less(&e, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = e;
    return 0;
}

static heap_ent_t heap_pop(tok_thread_t *s, size_t *hn) {
    heap_ent_t top = s->heap[0], last = s->heap[--(*hn)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *hn) break;
        if (c + 1 < *hn && heap_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!heap_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (*hn) s->heap[i] = last;
    return top;
}

static int push_pair(const px_tok_t *t, tok_thread_t *s, size_t *hn, int32_t pos) {
    int32_t r = s->lnext[pos], id;
    int32_t rank = merge_rank(t, s->sym[pos], s->sym[r], &id);
    if (rank == INT32_MAX) return 0;
    return heap_push(s, hn, (heap_ent_t){rank, pos, s->sym[pos], s->sym[r], id});
}

/* Long pre-tokens: a linked list of symbols and a heap of (rank, position);
 * an entry whose two symbols changed since it was pushed is stale. */
static long merge_heap(const px_tok_t *t, tok_thread_t *s, size_t m) {
    size_t hn = 0;
    for (size_t i = 0; i < m; i++) {
        s->lprev[i] = (int32_t)i - 1;
        s->lnext[i] = i + 1 < m ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < m; i++)
        if (push_pair(t, s, &hn, (int32_t)i) < 0) return -1;
    while (hn) {
        heap_ent_t e = heap_pop(s, &hn);
        int32_t r = s->lnext[e.pos];
        if (s->sym[e.pos] != e.left || r < 0 || s->sym[r] != e.right) continue;
        s->sym[e.pos] = e.id;
        s->sym[r] = -1;
        s->lnext[e.pos] = s->lnext[r];
        if (s->lnext[r] >= 0) s->lprev[s->lnext[r]] = e.pos;
        if (s->lprev[e.pos] >= 0 && push_pair(t, s, &hn, s->lprev[e.pos]) < 0) return -1;
        if (s->lnext[e.pos] >= 0 && push_pair(t, s, &hn, e.pos) < 0) return -1;
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = s->lnext[i]) s->sym[k++] = s->sym[i];
    return (long)k;
}

static inline uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 0x100000001b3ull;
    return h ^ h >> 32;
}

/* One pre-token: its ids appended to the output. */
static int bpe_word(const px_tok_t *t, tok_thread_t *s, const char *p, size_t len) {
    if (s->word) return s->word(s->word_arg, p, len) < 0 ? -1 : 0;
    cache_ent_t *ce = NULL;
    if (len <= CACHE_KEY) {
        ce = &s->cache[hash_bytes(p, len) & (((size_t)1 << CACHE_BITS) - 1)];
        if (ce->klen == len && memcmp(ce->key, p, len) == 0) {
            for (int i = 0; i < ce->nids; i++)
                if (emit(s, ce->ids[i]) < 0) return -1;
            return 0;
        }
    }
    int64_t whole;
    size_t m = 0;
    if (t->ignore_merges && px_map_get(t->vocab, p, len, &whole)) {
        if (grow_syms(s, 1) < 0) goto oom;
        s->sym[m++] = (int32_t)whole;
    } else {
        if (grow_syms(s, len) < 0) goto oom;
        for (size_t i = 0; i < len; i++) {
            int32_t id = t->byte_id[(uint8_t)p[i]];
            if (id < 0) id = t->unk_id; /* none: HF drops the byte */
            if (id >= 0) s->sym[m++] = id;
        }
        if (m >= HEAP_FROM) {
            long k = merge_heap(t, s, m);
            if (k < 0) goto oom;
            m = (size_t)k;
        } else if (m > 1) {
            m = merge_scan(t, s, m);
        }
    }
    for (size_t i = 0; i < m; i++)
        if (emit(s, s->sym[i]) < 0) return -1;
    if (ce && m <= CACHE_IDS) {
        ce->klen = (uint8_t)len;
        ce->nids = (uint8_t)m;
        memcpy(ce->key, p, len);
        memcpy(ce->ids, s->sym, m * sizeof *s->sym);
    }
    return 0;
oom:
    return px_err_set(s->err, s->errlen, "tokenizer '%s': out of memory for a pre-token of %zu bytes", t->path, len);
}

/* ---- pre-tokenization ---- */

static size_t utf8_len(uint8_t c) {
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* Stage k of the pre-tokenizer on a piece of valid UTF-8. */
static int run_stage(const px_tok_t *t, tok_thread_t *s, int k, const char *p, size_t len) {
    if (len == 0) return 0;
    if (k == t->nstages) return bpe_word(t, s, p, len);
    const tok_stage_t *st = &t->stages[k];
    if (st->add_prefix_space && p[0] != ' ') {
        if (s->bufcap[k] < len + 1) {
            char *b = realloc(s->buf[k], len + 1);
            if (!b) return px_err_set(s->err, s->errlen, "tokenizer '%s': out of memory", t->path);
            s->buf[k] = b;
            s->bufcap[k] = len + 1;
        }
        s->buf[k][0] = ' ';
        memcpy(s->buf[k] + 1, p, len);
        p = s->buf[k];
        len++;
    }
    if (!st->re) return run_stage(t, s, k + 1, p, len);
    size_t pos = 0, last = 0;
    while (pos < len) {
        int rc = st->jit ? pcre2_jit_match(st->re, (PCRE2_SPTR)p, len, pos, PCRE2_NO_UTF_CHECK, s->md, s->mctx)
                         : pcre2_match(st->re, (PCRE2_SPTR)p, len, pos, PCRE2_NO_UTF_CHECK, s->md, s->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return px_err_set(s->err, s->errlen, "tokenizer '%s': pre-tokenizer regex failed at byte %zu of a %zu-byte piece: %s",
                              t->path, pos, len, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        size_t a = ov[0], b = ov[1];
        if (b == a) { /* an empty match makes no piece: step over one character */
            pos = a + utf8_len((uint8_t)p[a]);
            continue;
        }
        if (a > last && run_stage(t, s, k + 1, p + last, a - last) < 0) return -1;
        if (run_stage(t, s, k + 1, p + a, b - a) < 0) return -1;
        last = pos = b;
    }
    if (last < len) return run_stage(t, s, k + 1, p + last, len - last);
    return 0;
}

/* Text between added tokens: valid UTF-8 runs go through the pre-tokenizer;
 * each byte of an invalid sequence is a pre-token of its own. */
static int encode_plain(const px_tok_t *t, tok_thread_t *s, const char *p, size_t len) {
    size_t i = 0;
    while (i < len) {
        size_t v = tok_utf8_valid_prefix(p + i, len - i);
        if (v && run_stage(t, s, 0, p + i, v) < 0) return -1;
        i += v;
        if (i < len) {
            if (bpe_word(t, s, p + i, 1) < 0) return -1;
            i++;
        }
    }
    return 0;
}

static bool is_space(uint8_t c) {
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* The leftmost-longest added token of the given kind (normalized or not) in
 * p[0, len): its index, and the span it takes (lstrip/rstrip included). */
static int find_added(const px_tok_t *t, const char *p, size_t len, bool normalized, size_t *s0, size_t *e0) {
    for (size_t i = 0; i < len; i++) {
        if (!t->added_first[(uint8_t)p[i]]) continue;
        int best = -1;
        for (int a = 0; a < t->nadded; a++) {
            const tok_added_t *ad = &t->added[a];
            if (ad->normalized != normalized || ad->len > len - i || (uint8_t)ad->content[0] != (uint8_t)p[i]) continue;
            if (memcmp(ad->content, p + i, ad->len) != 0) continue;
            if (best < 0 || ad->len > t->added[best].len) best = a;
        }
        if (best < 0) continue;
        size_t s = i, e = i + t->added[best].len;
        if (t->added[best].lstrip)
            while (s > 0 && is_space((uint8_t)p[s - 1])) s--;
        if (t->added[best].rstrip)
            while (e < len && is_space((uint8_t)p[e])) e++;
        *s0 = s;
        *e0 = e;
        return best;
    }
    return -1;
}

/* HF splits on the added tokens that skip normalization first, then on the
 * others within what is left; the rest is pre-tokenized. */
static int encode_split(const px_tok_t *t, tok_thread_t *s, const char *p, size_t len, bool normalized) {
    while (len) {
        size_t a, b;
        int k = t->nadded ? find_added(t, p, len, normalized, &a, &b) : -1;
        size_t gap = k < 0 ? len : a;
        if (gap) {
            int rc = normalized ? encode_plain(t, s, p, gap) : encode_split(t, s, p, gap, true);
            if (rc < 0) return -1;
        }
        if (k < 0) break;
        if (!s->word && emit(s, t->added[k].id) < 0) return -1;
        p += b;
        len -= b;
    }
    return 0;
}

int px_tok_encode(const px_tok_t *t, const char *text, size_t len, int32_t **ids, size_t *n, size_t *cap, char *err,
                  size_t errlen) {
    tok_thread_t *s = thread_state(t);
    if (!s) return px_err_set(err, errlen, "tokenizer '%s': out of memory for a thread's state", t->path);
    s->word = NULL;
    s->ids = ids;
    s->n = n;
    s->cap = cap;
    s->err = err;
    s->errlen = errlen;
    return encode_split(t, s, text, len, false);
}

int tok_pretokenize(const px_tok_t *t, const char *text, size_t len, int (*word)(void *arg, const char *p, size_t len),
                    void *arg, char *err, size_t errlen) {
    tok_thread_t *s = thread_state(t);
    if (!s) return px_err_set(err, errlen, "tokenizer '%s': out of memory for a thread's state", t->path);
    s->word = word;
    s->word_arg = arg;
    s->err = err;
    s->errlen = errlen;
    int rc = encode_split(t, s, text, len, false);
    s->word = NULL;
    return rc;
}

int px_tok_decode(const px_tok_t *t, const int32_t *ids, size_t n, char **out, size_t *len, size_t *cap, char *err,
                  size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->vocab_size || !t->has[id])
            return px_err_set(err, errlen, "tokenizer '%s': id %d at position %zu is not a token (vocabulary of %d)",
                              t->path, (int)id, i, (int)t->vocab_size);
        size_t l = t->len[id];
        if (*len + l + 1 > *cap) {
            size_t c = *cap ? *cap : 256;
            while (c < *len + l + 1) c *= 2;
            char *p = realloc(*out, c);
            if (!p) return px_err_set(err, errlen, "tokenizer '%s': out of memory decoding %zu ids", t->path, n);
            *out = p;
            *cap = c;
        }
        memcpy(*out + *len, t->bytes + t->off[id], l);
        *len += l;
    }
    return 0;
}
