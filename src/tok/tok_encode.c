/* tok_encode.c — byte-level BPE encoding: the token vector, added-token matching, the
 * pre-tokenizer regex split and the rank heap over adjacent pairs (see tokenizer.h). */
#include "tok/tok_int.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ink_tokens_free(ink_tokens *v)
{
    if (!v)
        return;
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

static int tokens_reserve(ink_tokens *v, size_t extra, ink_err *err)
{
    if (v->n + extra <= v->cap)
        return INK_OK;
    size_t nc = v->cap ? v->cap : 64;
    while (nc < v->n + extra)
        nc *= 2;
    int32_t *p = realloc(v->ids, nc * sizeof *p);
    if (!p)
        return ink_err_set(err, INK_E_NOMEM, "tokenizer: out of memory growing id array to %zu", nc);
    v->ids = p;
    v->cap = nc;
    return INK_OK;
}

int ink_tokens_push(ink_tokens *v, int32_t id, ink_err *err)
{
    int rc = tokens_reserve(v, 1, err);
    if (rc)
        return rc;
    v->ids[v->n++] = id;
    return INK_OK;
}


/* ---- encoding ------------------------------------------------------------------------------- */

typedef struct heap_ent {
    uint32_t rank, pos;
} heap_ent;

typedef struct enc_ctx {
    const ink_tokenizer *t;
    ink_tokens *v;
    ink_err *err;
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
    int32_t *sym;
    uint32_t *prv, *nxt;
    size_t scap;
    heap_ent *heap;
    size_t hn, hcap;
} enc_ctx;

static int heap_less(heap_ent a, heap_ent b) { return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos); }

static void heap_push(enc_ctx *c, heap_ent e)
{
    size_t i = c->hn++;
    c->heap[i] = e;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(c->heap[i], c->heap[p]))
            break;
        heap_ent tmp = c->heap[i];
        c->heap[i] = c->heap[p];
        c->heap[p] = tmp;
        i = p;
    }
}

static heap_ent heap_pop(enc_ctx *c)
{
    heap_ent top = c->heap[0];
    c->heap[0] = c->heap[--c->hn];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < c->hn && heap_less(c->heap[l], c->heap[m]))
            m = l;
        if (r < c->hn && heap_less(c->heap[r], c->heap[m]))
            m = r;
        if (m == i)
            break;
        heap_ent tmp = c->heap[i];
        c->heap[i] = c->heap[m];
        c->heap[m] = tmp;
        i = m;
    }
    return top;
}

static int ctx_reserve(enc_ctx *c, size_t n)
{
    if (n <= c->scap)
        return INK_OK;
    size_t nc = c->scap ? c->scap : 256;
    while (nc < n)
        nc *= 2;
    int32_t *s = realloc(c->sym, nc * sizeof *s);
    if (s)
        c->sym = s;
    uint32_t *p = realloc(c->prv, nc * sizeof *p);
    if (p)
        c->prv = p;
    uint32_t *x = realloc(c->nxt, nc * sizeof *x);
    if (x)
        c->nxt = x;
    heap_ent *h = realloc(c->heap, 3 * nc * sizeof *h);
    if (h)
        c->heap = h;
    if (!s || !p || !x || !h)
        return ink_err_set(c->err, INK_E_NOMEM, "tokenizer: out of memory (piece of %zu bytes)", n);
    c->scap = nc;
    c->hcap = 3 * nc;
    return INK_OK;
}

static void push_pair(enc_ctx *c, uint32_t pos)
{
    uint32_t rank;
    int32_t id;
    uint32_t j = c->nxt[pos];
    if (tok_merge_find(c->t, c->sym[pos], c->sym[j], &rank, &id))
        heap_push(c, (heap_ent){rank, pos});
}

static int bpe_piece(enc_ctx *c, const unsigned char *p, size_t n)
{
    const ink_tokenizer *t = c->t;
    int rc;
    if (n == 0)
        return INK_OK;
    if (t->ignore_merges || n == 1) {
        int32_t id = tok_vocab_find(t, p, n);
        if (id >= 0)
            return ink_tokens_push(c->v, id, c->err);
    }
    if ((rc = ctx_reserve(c, n)) || (rc = tokens_reserve(c->v, n, c->err)))
        return rc;
    for (size_t i = 0; i < n; i++) {
        c->sym[i] = t->byte_id[p[i]];
        c->prv[i] = (uint32_t)i - 1; /* UINT32_MAX for the first */
        c->nxt[i] = (uint32_t)(i + 1);
    }
    c->hn = 0;
    for (size_t i = 0; i + 1 < n; i++)
        push_pair(c, (uint32_t)i);
    while (c->hn) {
        heap_ent e = heap_pop(c);
        uint32_t pos = e.pos;
        if (c->sym[pos] < 0)
            continue;
        uint32_t j = c->nxt[pos];
        if (j >= n)
            continue;
        uint32_t rank;
        int32_t id;
        if (!tok_merge_find(t, c->sym[pos], c->sym[j], &rank, &id) || rank != e.rank)
            continue;
        c->sym[pos] = id;
        c->sym[j] = -1;
        c->nxt[pos] = c->nxt[j];
        if (c->nxt[j] < n)
            c->prv[c->nxt[j]] = pos;
        if (c->hn + 2 > c->hcap)
            continue; /* cannot happen: at most n-1 + 2 per merge pushes live, bounded by 3n */
        if (c->prv[pos] != UINT32_MAX)
            push_pair(c, c->prv[pos]);
        if (c->nxt[pos] < n)
            push_pair(c, pos);
    }
    for (uint32_t i = 0; i < n; i = c->nxt[i])
        c->v->ids[c->v->n++] = c->sym[i];
    return INK_OK;
}

static size_t utf8_char_len(unsigned char b)
{
    return b < 0x80 ? 1 : b < 0xe0 ? 2 : b < 0xf0 ? 3 : 4;
}

static int split_run(enc_ctx *c, const unsigned char *s, size_t n)
{
    size_t gap = 0, from = 0;
    int rc;
    while (from < n) {
        int m = pcre2_match(c->t->re, s, n, from, PCRE2_NO_UTF_CHECK, c->md, c->mc);
        if (m == PCRE2_ERROR_NOMATCH)
            break;
        if (m < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(m, msg, sizeof msg);
            return ink_err_set(c->err, INK_E_INVAL, "tokenizer: pre-tokenizer regex failed: %s",
                               (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* empty match: the character stays in the gap */
            if (ms >= n)
                break;
            from = ms + utf8_char_len(s[ms]);
            continue;
        }
        if (ms > gap && (rc = bpe_piece(c, s + gap, ms - gap)))
            return rc;
        if ((rc = bpe_piece(c, s + ms, me - ms)))
            return rc;
        gap = from = me;
    }
    return n > gap ? bpe_piece(c, s + gap, n - gap) : INK_OK;
}

static int encode_gap(enc_ctx *c, const unsigned char *s, size_t n)
{
    while (n) {
        size_t k = ink_utf8_valid_prefix(s, n);
        if (k) {
            int rc = split_run(c, s, k);
            if (rc)
                return rc;
            s += k;
            n -= k;
        }
        if (n) { /* one byte that is not valid UTF-8: its byte token */
            int rc = ink_tokens_push(c->v, c->t->byte_id[s[0]], c->err);
            if (rc)
                return rc;
            s++;
            n--;
        }
    }
    return INK_OK;
}

static int encode_all(enc_ctx *c, const unsigned char *s, size_t n, int flags)
{
    const ink_tokenizer *t = c->t;
    int rc;
    int use_special = (flags & INK_TOK_SPECIAL) != 0;
    if (!t->n_added || (!use_special && !t->any_nonspecial))
        return encode_gap(c, s, n);
    size_t seg = 0, i = 0;
    while (i < n) {
        unsigned char b = s[i];
        const added_tok *hit = NULL;
        for (uint32_t k = t->first[b]; k < t->first[b + 1]; k++) {
            const added_tok *a = &t->added[k];
            if (a->special && !use_special)
                continue;
            if (a->len <= n - i && !memcmp(t->arena + a->off, s + i, a->len)) {
                hit = a; /* bucket is sorted longest first */
                break;
            }
        }
        if (!hit) {
            i++;
            continue;
        }
        if (i > seg && (rc = encode_gap(c, s + seg, i - seg)))
            return rc;
        if ((rc = ink_tokens_push(c->v, hit->id, c->err)))
            return rc;
        i += hit->len;
        seg = i;
    }
    return n > seg ? encode_gap(c, s + seg, n - seg) : INK_OK;
}

int ink_tokenizer_encode(const ink_tokenizer *t, const char *text, size_t len, int flags,
                         ink_tokens *v, ink_err *err)
{
    if (!t || !v || (!text && len))
        return ink_err_set(err, INK_E_INVAL, "ink_tokenizer_encode: NULL argument");
    size_t n0 = v->n;
    if (len == 0)
        return INK_OK;
    enc_ctx c = {.t = t, .v = v, .err = err};
    int rc = INK_OK;
    c.md = pcre2_match_data_create_from_pattern(t->re, NULL);
    c.mc = pcre2_match_context_create(NULL);
    if (c.mc) { /* the pattern is linear per match; the defaults (10M steps) stop 16 MiB of spaces */
        pcre2_set_match_limit(c.mc, UINT32_MAX);
        pcre2_set_depth_limit(c.mc, UINT32_MAX);
        pcre2_set_heap_limit(c.mc, 1u << 20);
    }
    if (t->jit) {
        c.js = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
        if (c.js && c.mc)
            pcre2_jit_stack_assign(c.mc, NULL, c.js);
    }
    if (!c.md || !c.mc || (t->jit && !c.js))
        rc = ink_err_set(err, INK_E_NOMEM, "tokenizer: out of memory (regex match data)");
    if (!rc)
        rc = encode_all(&c, (const unsigned char *)text, len, flags);
    if (rc)
        v->n = n0;
    pcre2_match_data_free(c.md);
    pcre2_match_context_free(c.mc);
    if (c.js)
        pcre2_jit_stack_free(c.js);
    free(c.sym);
    free(c.prv);
    free(c.nxt);
    free(c.heap);
    return rc;
}

int ink_tokenizer_encode_buf(const ink_tokenizer *t, const char *text, size_t len, int flags,
                             int32_t *ids, size_t cap, size_t *n_needed, ink_err *err)
{
    ink_tokens v = {0};
    int rc = ink_tokenizer_encode(t, text, len, flags, &v, err);
    if (rc)
        return rc;
    if (n_needed)
        *n_needed = v.n;
    size_t k = v.n < cap ? v.n : cap;
    if (k && ids)
        memcpy(ids, v.ids, k * sizeof *ids);
    if (v.n > cap)
        rc = ink_err_set(err, INK_E_INVAL, "tokenizer: buffer of %zu ids is too small, need %zu", cap,
                         v.n);
    ink_tokens_free(&v);
    return rc;
}
