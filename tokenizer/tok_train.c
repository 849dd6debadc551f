/* Training a byte-level BPE, GPT-2's scheme.
 *
 * feed() pre-tokenizes each document exactly as encode will (GPT-2's regex,
 * the end-of-text token split out, invalid UTF-8 bytes alone) and counts the
 * distinct words. finish() starts from the 256 byte tokens and repeatedly
 * merges the most frequent adjacent pair, weighted by word counts. A tie goes
 * to the pair whose left token's bytes sort first, then whose right token's
 * bytes do (two tokens never share bytes: a merge that spells an existing
 * token reuses its id), so the result does not depend on hash order or on
 * the number of threads.
 *
 * Counts are updated incrementally: each pair knows the words it occurs in,
 * and a merge rewrites only those words, turning each occurrence into count
 * deltas for the pairs around it. A max-heap holds (count, pair) entries; an
 * entry whose count is out of date is re-pushed with the current one when it
 * reaches the top (a pair's count only falls after the merge that created it,
 * so the top entry with a current count is the true maximum). A merge that
 * touches many words rewrites them on several threads, each into its own
 * delta list; the lists are applied in thread order, on one thread. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "px_err.h"
#include "tok_internal.h"

#define PARALLEL_FROM 2048 /* words a merge touches before threads help */

struct px_tok_trainer {
    int vocab_size;
    char *eot;
    px_tok_t *pre; /* pre-tokenizes only */
    px_map_t *index; /* word bytes -> word number */
    char *wbytes;    /* the words' bytes, one after the other */
    size_t wbytes_len, wbytes_cap;
    size_t *woff;
    uint32_t *wlen;
    int64_t *wcount;
    size_t nwords, wcap;
    char *err; /* the feed in progress */
    size_t errlen;
};

px_tok_trainer_t *px_tok_trainer_new(int vocab_size, const char *eot_text, char *err, size_t errlen) {
    if (vocab_size < 257 || vocab_size > (1 << 24)) {
        px_err_set(err, errlen, "tokenizer trainer: vocab_size %d is out of range [257, %d]", vocab_size, 1 << 24);
        return NULL;
    }
    if (!eot_text || !*eot_text || tok_utf8_valid_prefix(eot_text, strlen(eot_text)) != strlen(eot_text)) {
        px_err_set(err, errlen, "tokenizer trainer: the end-of-text token must be non-empty UTF-8");
        return NULL;
    }
    px_tok_trainer_t *tr = calloc(1, sizeof *tr);
    json_t *doc = tok_doc_new(eot_text, 0);
    if (!tr || !doc || !(tr->eot = strdup(eot_text)) || !(tr->index = px_map_new())) {
        json_decref(doc);
        px_tok_trainer_free(&tr);
        px_err_set(err, errlen, "tokenizer trainer: out of memory");
        return NULL;
    }
    tr->vocab_size = vocab_size;
    tr->pre = tok_from_doc(doc, "(trainer's pre-tokenizer)", err, errlen);
    if (!tr->pre) px_tok_trainer_free(&tr);
    return tr;
}

void px_tok_trainer_free(px_tok_trainer_t **tr) {
    if (!tr || !*tr) return;
    px_tok_trainer_t *t = *tr;
    px_tok_free(&t->pre);
    px_map_destroy(&t->index);
    free(t->eot);
    free(t->wbytes);
    free(t->woff);
    free(t->wlen);
    free(t->wcount);
    free(t);
    *tr = NULL;
}

static int count_word(void *arg, const char *p, size_t len) {
    px_tok_trainer_t *tr = arg;
    int64_t w;
    if (px_map_get(tr->index, p, len, &w)) {
        tr->wcount[w]++;
        return 0;
    }
    if (tr->nwords == tr->wcap) {
        size_t c = tr->wcap ? tr->wcap * 2 : 4096;
        size_t *o = realloc(tr->woff, c * sizeof *o);
        if (o) tr->woff = o;
        uint32_t *l = realloc(tr->wlen, c * sizeof *l);
        if (l) tr->wlen = l;
        int64_t *n = realloc(tr->wcount, c * sizeof *n);
        if (n) tr->wcount = n;
        if (!o || !l || !n) goto oom;
        tr->wcap = c;
    }
    if (tr->wbytes_len + len > tr->wbytes_cap) {
        size_t c = tr->wbytes_cap ? tr->wbytes_cap * 2 : 65536;
        while (c < tr->wbytes_len + len) c *= 2;
        char *b = realloc(tr->wbytes, c);
        if (!b) goto oom;
        tr->wbytes = b;
        tr->wbytes_cap = c;
    }
    if (px_map_put(tr->index, p, len, (int64_t)tr->nwords) < 0) goto oom;
    memcpy(tr->wbytes + tr->wbytes_len, p, len);
    tr->woff[tr->nwords] = tr->wbytes_len;
    tr->wlen[tr->nwords] = (uint32_t)len;
    tr->wcount[tr->nwords] = 1;
    tr->wbytes_len += len;
    tr->nwords++;
    return 0;
oom:
    return px_err_set(tr->err, tr->errlen, "tokenizer trainer: out of memory after %zu distinct words", tr->nwords);
}

int px_tok_trainer_feed(px_tok_trainer_t *tr, const char *text, size_t len, char *err, size_t errlen) {
    tr->err = err;
    tr->errlen = errlen;
    return tok_pretokenize(tr->pre, text, len, count_word, tr, err, errlen);
}

/* ---- the merge loop ---- */

typedef struct {
    int32_t left, right;
    int64_t count;
    int32_t *words; /* the words it occurs in (a word may repeat) */
    uint32_t nw, cw;
} pair_t;

typedef struct {
    int64_t count;
    int32_t pair;
} hent_t;

typedef struct {
    int32_t left, right, word;
    int64_t delta;
} delta_t;

typedef struct {
    delta_t *d;
    size_t n, cap;
    int oom;
} dlist_t;

typedef struct {
    /* tokens: bytes of each id */
    char *tb;
    size_t tb_len, tb_cap;
    size_t *toff;
    uint32_t *tlen;
    int32_t ntok;
    px_map_t *tok_index; /* token bytes -> id */
    /* words as symbol arrays */
    int32_t *sym;
    size_t *soff;
    uint32_t *slen;
    const int64_t *wcount;
    size_t nwords;
    /* pairs */
    pair_t *pairs;
    size_t npairs, pcap;
    uint64_t *pkeys; /* open addressing: (left << 32 | right) + 1, 0 empty */
    int32_t *pvals;
    size_t pmask;
    hent_t *heap;
    size_t hn, hcap;
    int32_t *merge_l, *merge_r;
    size_t nmerges, mcap;
} train_t;

static int cmp_bytes(const train_t *T, int32_t a, int32_t b) {
    size_t la = T->tlen[a], lb = T->tlen[b];
    int c = memcmp(T->tb + T->toff[a], T->tb + T->toff[b], la < lb ? la : lb);
    return c ? c : (la > lb) - (la < lb);
}

/* Does entry x come out of the heap before y? */
static bool hent_before(const train_t *T, const hent_t *x, const hent_t *y) {
    if (x->count != y->count) return x->count > y->count;
    const pair_t *a = &T->pairs[x->pair], *b = &T->pairs[y->pair];
    int c = cmp_bytes(T, a->left, b->left);
    if (!c) c = cmp_bytes(T, a->right, b->right);
    if (!c) c = a->left != b->left ? (a->left < b->left ? -1 : 1) : (a->right < b->right ? -1 : a->right > b->right);
    return c < 0;
}

static int hpush(train_t *T, int32_t pair) {
    if (T->hn == T->hcap) {
        size_t c = T->hcap ? T->hcap * 2 : 4096;
        hent_t *h = realloc(T->heap, c * sizeof *h);
        if (!h) return -1;
        T->heap = h;
        T->hcap = c;
    }
    hent_t e = {T->pairs[pair].count, pair};
    size_t i = T->hn++;
    while (i > 0 && hent_before(T, &e, &T->heap[(i - 1) / 2])) {
        T->heap[i] = T->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    T->heap[i] = e;
    return 0;
}

static hent_t hpop(train_t *T) {
    hent_t top = T->heap[0], last = T->heap[--T->hn];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= T->hn) break;
        if (c + 1 < T->hn && hent_before(T, &T->heap[c + 1], &T->heap[c])) c++;
        if (!hent_before(T, &T->heap[c], &last)) break;
        T->heap[i] = T->heap[c];
        i = c;
    }
    if (T->hn) T->heap[i] = last;
    return top;
}

static size_t pslot(uint64_t k, size_t mask) {
    k *= 0x9E3779B97F4A7C15ull;
    return (size_t)(k ^ k >> 29) & mask;
}

static int pairs_grow(train_t *T) {
    size_t cap = (T->pmask + 1) * 2;
    uint64_t *k = calloc(cap, sizeof *k);
    int32_t *v = malloc(cap * sizeof *v);
    if (!k || !v) {
        free(k);
        free(v);
        return -1;
    }
    for (size_t i = 0; i <= T->pmask; i++) {
        if (!T->pkeys[i]) continue;
        size_t j = pslot(T->pkeys[i], cap - 1);
        while (k[j]) j = (j + 1) & (cap - 1);
        k[j] = T->pkeys[i];
        v[j] = T->pvals[i];
    }
    free(T->pkeys);
    free(T->pvals);
    T->pkeys = k;
    T->pvals = v;
    T->pmask = cap - 1;
    return 0;
}

/* The pair (l, r), created with count 0 when new; -1 out of memory. */
static int32_t pair_get(train_t *T, int32_t l, int32_t r) {
    uint64_t key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
    size_t i = pslot(key, T->pmask);
    while (T->pkeys[i]) {
        if (T->pkeys[i] == key) return T->pvals[i];
        i = (i + 1) & T->pmask;
    }
    if (T->npairs == T->pcap) {
        size_t c = T->pcap ? T->pcap * 2 : 65536;
        pair_t *p = realloc(T->pairs, c * sizeof *p);
        if (!p) return -1;
        T->pairs = p;
        T->pcap = c;
    }
    if ((T->npairs + 1) * 2 > T->pmask + 1) {
        if (pairs_grow(T) < 0) return -1;
        return pair_get(T, l, r);
    }
    T->pkeys[i] = key;
    T->pvals[i] = (int32_t)T->npairs;
    T->pairs[T->npairs] = (pair_t){.left = l, .right = r};
    return (int32_t)T->npairs++;
}

static int pair_add_word(pair_t *p, int32_t w) {
    if (p->nw && p->words[p->nw - 1] == w) return 0;
    if (p->nw == p->cw) {
        uint32_t c = p->cw ? p->cw * 2 : 4;
        int32_t *n = realloc(p->words, c * sizeof *n);
        if (!n) return -1;
        p->words = n;
        p->cw = c;
    }
    p->words[p->nw++] = w;
    return 0;
}

static int add_token(train_t *T, const char *b, size_t len) {
    if (T->tb_len + len > T->tb_cap) {
        size_t c = T->tb_cap ? T->tb_cap * 2 : 65536;
        while (c < T->tb_len + len) c *= 2;
        char *n = realloc(T->tb, c);
        if (!n) return -1;
        T->tb = n;
        T->tb_cap = c;
    }
    memmove(T->tb + T->tb_len, b, len); /* b may point into tb */
    T->toff[T->ntok] = T->tb_len;
    T->tlen[T->ntok] = (uint32_t)len;
    if (px_map_put(T->tok_index, T->tb + T->tb_len, len, T->ntok) < 0) return -1;
    T->tb_len += len;
    return T->ntok++;
}

static void dpush(dlist_t *L, int32_t l, int32_t r, int64_t d, int32_t w) {
    if (L->n == L->cap) {
        size_t c = L->cap ? L->cap * 2 : 1024;
        delta_t *n = realloc(L->d, c * sizeof *n);
        if (!n) {
            L->oom = 1;
            return;
        }
        L->d = n;
        L->cap = c;
    }
    L->d[L->n++] = (delta_t){l, r, w, d};
}

/* Rewrites word w with (a, b) -> nw, in place, and lists the count changes
 * of the pairs around each occurrence. */
static void merge_word(train_t *T, int32_t w, int32_t a, int32_t b, int32_t nw, dlist_t *L) {
    int32_t *s = T->sym + T->soff[w];
    size_t n = T->slen[w], i = 0, j = 0;
    int64_t c = T->wcount[w];
    while (i < n) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
            if (j > 0) {
                dpush(L, s[j - 1], a, -c, w);
                dpush(L, s[j - 1], nw, c, w);
            }
            if (i + 2 < n) {
                dpush(L, b, s[i + 2], -c, w);
                dpush(L, nw, s[i + 2], c, w);
            }
            s[j++] = nw;
            i += 2;
        } else {
            s[j++] = s[i++];
        }
    }
    T->slen[w] = (uint32_t)j;
}

static void train_free(train_t *T) {
    free(T->tb);
    free(T->toff);
    free(T->tlen);
    px_map_destroy(&T->tok_index);
    free(T->sym);
    free(T->soff);
    free(T->slen);
    for (size_t i = 0; i < T->npairs; i++) free(T->pairs[i].words);
    free(T->pairs);
    free(T->pkeys);
    free(T->pvals);
    free(T->heap);
    free(T->merge_l);
    free(T->merge_r);
}

/* The 256 byte tokens in the order of their characters (ids 0-255, as in
 * GPT-2), and the words as arrays of them. */
static int train_init(train_t *T, const px_tok_trainer_t *tr) {
    size_t ntok = (size_t)tr->vocab_size;
    T->toff = malloc(ntok * sizeof *T->toff);
    T->tlen = malloc(ntok * sizeof *T->tlen);
    T->tok_index = px_map_new();
    T->nwords = tr->nwords;
    T->wcount = tr->wcount;
    T->sym = malloc((tr->wbytes_len + 1) * sizeof *T->sym);
    T->soff = malloc((tr->nwords + 1) * sizeof *T->soff);
    T->slen = malloc((tr->nwords + 1) * sizeof *T->slen);
    T->pmask = 65535;
    T->pkeys = calloc(T->pmask + 1, sizeof *T->pkeys);
    T->pvals = malloc((T->pmask + 1) * sizeof *T->pvals);
    if (!T->toff || !T->tlen || !T->tok_index || !T->sym || !T->soff || !T->slen ||
        !T->pkeys || !T->pvals)
        return -1;
    int32_t byte_id[256];
    for (uint32_t cp = 0; cp < 324; cp++) {
        int b = tok_cp_to_byte(cp);
        if (b < 0) continue;
        char c = (char)b;
        if ((byte_id[b] = add_token(T, &c, 1)) < 0) return -1;
    }
    for (size_t w = 0; w < tr->nwords; w++) {
        T->soff[w] = tr->woff[w];
        T->slen[w] = tr->wlen[w];
        for (size_t i = 0; i < tr->wlen[w]; i++) T->sym[tr->woff[w] + i] = byte_id[(uint8_t)tr->wbytes[tr->woff[w] + i]];
        const int32_t *s = T->sym + T->soff[w];
        for (size_t i = 0; i + 1 < tr->wlen[w]; i++) {
            int32_t p = pair_get(T, s[i], s[i + 1]);
            if (p < 0 || pair_add_word(&T->pairs[p], (int32_t)w) < 0) return -1;
            T->pairs[p].count += tr->wcount[w];
        }
    }
    for (size_t p = 0; p < T->npairs; p++)
        if (hpush(T, (int32_t)p) < 0) return -1;
    return 0;
}

/* One merge: pair p becomes token nw in every word it occurs in. */
static int apply_merge(train_t *T, int32_t p, int32_t nw, int threads, dlist_t *lists, uint32_t *seen, uint32_t step) {
    pair_t *P = &T->pairs[p];
    int32_t a = P->left, b = P->right;
    /* Its words, each once (a word is listed again each time it gains the pair). */
    size_t nwl = 0;
    for (uint32_t i = 0; i < P->nw; i++)
        if (seen[P->words[i]] != step) {
            seen[P->words[i]] = step;
            P->words[nwl++] = P->words[i];
        }
    int32_t *words = P->words;
    int nt = nwl >= PARALLEL_FROM ? threads : 1;
#pragma omp parallel num_threads(nt)
    {
        int me = omp_get_thread_num(), all = omp_get_num_threads();
        size_t lo = nwl * (size_t)me / (size_t)all, hi = nwl * (size_t)(me + 1) / (size_t)all;
        lists[me].n = 0;
        for (size_t i = lo; i < hi; i++) merge_word(T, words[i], a, b, nw, &lists[me]);
    }
    P = &T->pairs[p];
    P->count = 0;
    free(P->words);
    P->words = NULL;
    P->nw = P->cw = 0;
    size_t first_new = T->npairs;
    for (int k = 0; k < nt; k++) {
        if (lists[k].oom) return -1;
        for (size_t i = 0; i < lists[k].n; i++) {
            const delta_t *d = &lists[k].d[i];
            int32_t q = pair_get(T, d->left, d->right);
            if (q < 0) return -1;
            if (q == p) continue;
            T->pairs[q].count += d->delta;
            if (d->delta > 0 && pair_add_word(&T->pairs[q], d->word) < 0) return -1;
        }
    }
    /* Pairs made by this merge enter the heap at their final count. */
    for (size_t q = first_new; q < T->npairs; q++)
        if (T->pairs[q].count > 0 && hpush(T, (int32_t)q) < 0) return -1;
    return 0;
}

static px_tok_t *train_result(train_t *T, const px_tok_trainer_t *tr, char *err, size_t errlen) {
    json_t *doc = tok_doc_new(tr->eot, T->ntok);
    if (!doc) goto oom;
    for (int32_t id = 0; id < T->ntok; id++)
        if (tok_doc_add_token(doc, T->tb + T->toff[id], T->tlen[id], id) < 0) goto oom;
    for (size_t m = 0; m < T->nmerges; m++) {
        int32_t l = T->merge_l[m], r = T->merge_r[m];
        if (tok_doc_add_merge(doc, T->tb + T->toff[l], T->tlen[l], T->tb + T->toff[r], T->tlen[r]) < 0) goto oom;
    }
    return tok_from_doc(doc, "(trained tokenizer)", err, errlen);
oom:
    json_decref(doc);
    px_err_set(err, errlen, "tokenizer trainer: out of memory writing the vocabulary");
    return NULL;
}

px_tok_t *px_tok_trainer_finish(px_tok_trainer_t *tr, int threads, void (*progress)(void *arg, int done, int total),
                                void *arg, char *err, size_t errlen) {
    if (threads <= 0) threads = omp_get_num_procs();
    train_t T = {0};
    px_tok_t *tok = NULL;
    dlist_t *lists = calloc((size_t)threads, sizeof *lists);
    uint32_t *seen = calloc(tr->nwords + 1, sizeof *seen);
    int total = tr->vocab_size - 257, done = 0;
    if (!lists || !seen || train_init(&T, tr) < 0) goto oom;
    while (T.ntok < tr->vocab_size - 1 && T.hn) {
        hent_t e = hpop(&T);
        const pair_t *P = &T.pairs[e.pair];
        if (e.count != P->count) {
            if (P->count > 0 && hpush(&T, e.pair) < 0) goto oom;
            continue;
        }
        if (e.count <= 0) continue;
        /* The merged bytes, copied: add_token may move the token store. */
        size_t ll = T.tlen[P->left], lr = T.tlen[P->right];
        char *m = malloc(ll + lr);
        if (!m) goto oom;
        memcpy(m, T.tb + T.toff[P->left], ll);
        memcpy(m + ll, T.tb + T.toff[P->right], lr);
        int64_t id;
        if (!px_map_get(T.tok_index, m, ll + lr, &id)) id = add_token(&T, m, ll + lr);
        free(m);
        if (id < 0) goto oom;
        if (T.nmerges == T.mcap) { /* more merges than tokens when some reuse one */
            T.mcap = T.mcap ? T.mcap * 2 : 1024;
            int32_t *l = realloc(T.merge_l, T.mcap * sizeof *l);
            if (l) T.merge_l = l;
            int32_t *r = realloc(T.merge_r, T.mcap * sizeof *r);
            if (r) T.merge_r = r;
            if (!l || !r) goto oom;
        }
        T.merge_l[T.nmerges] = P->left;
        T.merge_r[T.nmerges] = P->right;
        T.nmerges++;
        if (apply_merge(&T, e.pair, (int32_t)id, threads, lists, seen, (uint32_t)T.nmerges) < 0) goto oom;
        done++;
        if (progress && (done % 256 == 0)) progress(arg, done, total);
    }
    if (progress) progress(arg, done, total);
    tok = train_result(&T, tr, err, errlen);
    goto out;
oom:
    px_err_set(err, errlen, "tokenizer trainer: out of memory (%zu distinct words, %zu pairs)", tr->nwords, T.npairs);
out:
    if (lists)
        for (int k = 0; k < threads; k++) free(lists[k].d);
    free(lists);
    free(seen);
    train_free(&T);
    return tok;
}
