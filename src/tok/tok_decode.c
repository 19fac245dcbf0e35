/* tok_decode.c — UTF-8 validity and lossy conversion (one lead-byte rule for both), decoding
 * and the streaming detokenizer (see tokenizer.h). */
#include "tok/tok_int.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The UTF-8 lead-byte rule (Unicode Table 3-7), shared by the validity check and the lossy
 * conversion: for a byte b >= 0x80, how many continuation bytes it needs (0: it cannot start a
 * sequence) and the range [lo, hi] its first continuation byte must be in (later ones: 80..BF). */
static size_t utf8_lead(unsigned char b, unsigned char *lo, unsigned char *hi)
{
    *lo = 0x80;
    *hi = 0xbf;
    if (b >= 0xc2 && b <= 0xdf)
        return 1;
    if (b >= 0xe0 && b <= 0xef) {
        if (b == 0xe0)
            *lo = 0xa0;
        else if (b == 0xed)
            *hi = 0x9f;
        return 2;
    }
    if (b >= 0xf0 && b <= 0xf4) {
        if (b == 0xf0)
            *lo = 0x90;
        else if (b == 0xf4)
            *hi = 0x8f;
        return 3;
    }
    return 0;
}

/* How many of the `need` continuation bytes after the lead byte s[0] are there and valid (s has n
 * bytes); need when the sequence is complete. */
static size_t utf8_cont(const unsigned char *s, size_t n, size_t need, unsigned char lo, unsigned char hi)
{
    size_t k = 0;
    while (k < need && 1 + k < n) {
        unsigned char c = s[1 + k];
        if (c < (k == 0 ? lo : 0x80) || c > (k == 0 ? hi : 0xbf))
            break;
        k++;
    }
    return k;
}

size_t ink_utf8_valid_prefix(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        unsigned char lo, hi;
        size_t need = utf8_lead(s[i], &lo, &hi);
        if (!need || utf8_cont(s + i, n - i, need, lo, hi) < need)
            return i;
        i += need + 1;
    }
    return i;
}

/* Lossy UTF-8 conversion with maximal-subpart U+FFFD substitution. Writes to out (room for
 * 3 * n bytes suffices). When !final, an incomplete but valid-so-far tail is not consumed.
 * Returns bytes written; *consumed = input bytes used. */
static size_t utf8_lossy(const unsigned char *s, size_t n, char *out, int final, size_t *consumed)
{
    size_t i = 0, o = 0;
    while (i < n) {
        unsigned char b = s[i];
        if (b < 0x80) {
            out[o++] = (char)b;
            i++;
            continue;
        }
        unsigned char lo, hi;
        size_t need = utf8_lead(b, &lo, &hi);
        size_t k = 0; /* valid continuation bytes seen */
        if (need) {
            k = utf8_cont(s + i, n - i, need, lo, hi);
            if (k == need) {
                memcpy(out + o, s + i, need + 1);
                o += need + 1;
                i += need + 1;
                continue;
            }
            if (i + 1 + k == n && !final)
                break; /* incomplete tail: hold it */
        }
        out[o++] = (char)0xef;
        out[o++] = (char)0xbf;
        out[o++] = (char)0xbd;
        i += 1 + k;
    }
    *consumed = i;
    return o;
}

/* ---- decoding ------------------------------------------------------------------------------- */

int ink_tokenizer_decode(const ink_tokenizer *t, const int32_t *ids, size_t n, int flags, char **out,
                         size_t *out_len, ink_err *err)
{
    if (!t || !out || (!ids && n))
        return ink_err_set(err, INK_E_INVAL, "ink_tokenizer_decode: NULL argument");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab || t->ent[ids[i]].kind == ENT_NONE)
            return ink_err_set(err, INK_E_INVAL, "tokenizer: id %d at position %zu is not a token "
                               "(vocabulary of %d)", (int)ids[i], i, t->n_vocab);
        total += t->ent[ids[i]].len;
    }
    unsigned char *raw = malloc(total + 1);
    if (!raw)
        return ink_err_set(err, INK_E_NOMEM, "tokenizer: out of memory decoding %zu bytes", total);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        const tok_ent *e = &t->ent[ids[i]];
        if ((flags & INK_DECODE_SKIP_SPECIAL) && e->kind == ENT_ADDED && e->special)
            continue;
        memcpy(raw + o, t->arena + e->off, e->len);
        o += e->len;
    }
    raw[o] = 0;
    if (flags & INK_DECODE_LOSSY) {
        char *l = malloc(3 * o + 1);
        if (!l) {
            free(raw);
            return ink_err_set(err, INK_E_NOMEM, "tokenizer: out of memory decoding");
        }
        size_t used;
        size_t ol = utf8_lossy(raw, o, l, 1, &used);
        l[ol] = 0;
        free(raw);
        *out = l;
        if (out_len)
            *out_len = ol;
        return INK_OK;
    }
    *out = (char *)raw;
    if (out_len)
        *out_len = o;
    return INK_OK;
}

struct ink_detok {
    const ink_tokenizer *t;
    int flags;
    unsigned char pend[4];
    size_t npend;
    unsigned char *in;
    char *out;
};

int ink_detok_new(ink_detok **out, const ink_tokenizer *t, int flags, ink_err *err)
{
    if (!out || !t)
        return ink_err_set(err, INK_E_INVAL, "ink_detok_new: NULL argument");
    ink_detok *d = calloc(1, sizeof *d);
    if (d) {
        d->in = malloc(t->max_piece + 8);
        d->out = malloc(3 * (t->max_piece + 8));
    }
    if (!d || !d->in || !d->out) {
        ink_detok_free(d);
        return ink_err_set(err, INK_E_NOMEM, "tokenizer: out of memory (stream decoder)");
    }
    d->t = t;
    d->flags = flags;
    *out = d;
    return INK_OK;
}

void ink_detok_free(ink_detok *d)
{
    if (!d)
        return;
    free(d->in);
    free(d->out);
    free(d);
}

int ink_detok_feed(ink_detok *d, int32_t id, const char **text, size_t *len, ink_err *err)
{
    const ink_tokenizer *t = d->t;
    if (id < 0 || id >= t->n_vocab || t->ent[id].kind == ENT_NONE)
        return ink_err_set(err, INK_E_INVAL, "tokenizer: id %d is not a token (vocabulary of %d)",
                           (int)id, t->n_vocab);
    const tok_ent *e = &t->ent[id];
    size_t n = d->npend;
    memcpy(d->in, d->pend, n);
    if (!((d->flags & INK_DECODE_SKIP_SPECIAL) && e->kind == ENT_ADDED && e->special)) {
        memcpy(d->in + n, t->arena + e->off, e->len);
        n += e->len;
    }
    size_t used;
    size_t o = utf8_lossy(d->in, n, d->out, 0, &used);
    d->npend = n - used;
    memcpy(d->pend, d->in + used, d->npend);
    d->out[o] = 0;
    *text = d->out;
    *len = o;
    return INK_OK;
}

void ink_detok_flush(ink_detok *d, const char **text, size_t *len)
{
    size_t used;
    size_t o = utf8_lossy(d->pend, d->npend, d->out, 1, &used);
    d->out[o] = 0;
    d->npend = 0;
    *text = d->out;
    *len = o;
}

size_t ink_detok_pending(const ink_detok *d) { return d ? d->npend : 0; }
