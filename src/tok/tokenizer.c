/* tokenizer.c — tokenizer.json loading and validation, the id and merge tables, accessors (see
 * tokenizer.h; tok_int.h lists the other files: tok_encode.c, tok_decode.c). */
#include "tok/tok_int.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers -------------------------------------------------------------------------- */

static uint64_t hash_bytes(const unsigned char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

static size_t pow2_at_least(size_t n)
{
    size_t p = 16;
    while (p < n)
        p <<= 1;
    return p;
}


/* ---- byte-level alphabet -------------------------------------------------------------------- */

static void byte_level_tables(uint32_t b2u[256], int16_t u2b[324])
{
    for (int i = 0; i < 324; i++)
        u2b[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int self = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
        b2u[b] = self ? (uint32_t)b : (uint32_t)(256 + n++);
        u2b[b2u[b]] = (int16_t)b;
    }
}

/* Decodes a byte-level spelled string to raw bytes (out has room for len bytes). Returns the
 * byte count or -1 if a character is outside the alphabet / the UTF-8 is invalid. */
static long byte_level_decode(const int16_t u2b[324], const char *s, size_t len, unsigned char *out)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < len) {
        uint32_t cp;
        unsigned char b = p[i];
        if (b < 0x80) {
            cp = b;
            i++;
        } else if ((b & 0xe0) == 0xc0 && i + 1 < len) {
            cp = ((uint32_t)(b & 0x1f) << 6) | (p[i + 1] & 0x3f);
            i += 2;
        } else
            return -1;
        if (cp >= 324 || u2b[cp] < 0)
            return -1;
        out[o++] = (unsigned char)u2b[cp];
    }
    return (long)o;
}

/* ---- tables --------------------------------------------------------------------------------- */

static int arena_add(ink_tokenizer *t, const void *s, size_t n, uint32_t *off, ink_err *err)
{
    if (t->arena_len + n + 1 > t->arena_cap) {
        size_t nc = t->arena_cap ? t->arena_cap : 1 << 20;
        while (nc < t->arena_len + n + 1)
            nc *= 2;
        char *p = realloc(t->arena, nc);
        if (!p)
            return ink_err_set(err, INK_E_NOMEM, "tokenizer: out of memory (piece arena)");
        t->arena = p;
        t->arena_cap = nc;
    }
    if (t->arena_len + n + 1 > UINT32_MAX)
        return ink_err_set(err, INK_E_FORMAT, "tokenizer: vocabulary too large");
    *off = (uint32_t)t->arena_len;
    if (n)
        memcpy(t->arena + t->arena_len, s, n);
    t->arena[t->arena_len + n] = 0;
    t->arena_len += n + 1;
    return INK_OK;
}

int32_t tok_vocab_find(const ink_tokenizer *t, const unsigned char *s, size_t n)
{
    if (!t->vh)
        return -1;
    size_t i = hash_bytes(s, n) & t->vh_mask;
    for (;;) {
        int32_t id = t->vh[i];
        if (id < 0)
            return -1;
        const tok_ent *e = &t->ent[id];
        if (e->len == n && memcmp(t->arena + e->off, s, n) == 0)
            return id;
        i = (i + 1) & t->vh_mask;
    }
}

static void vocab_insert(ink_tokenizer *t, int32_t id)
{
    const tok_ent *e = &t->ent[id];
    size_t i = hash_bytes((const unsigned char *)t->arena + e->off, e->len) & t->vh_mask;
    while (t->vh[i] >= 0)
        i = (i + 1) & t->vh_mask;
    t->vh[i] = id;
}

int tok_merge_find(const ink_tokenizer *t, int32_t l, int32_t r, uint32_t *rank, int32_t *id)
{
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    size_t i = hash_u64(key) & t->mh_mask;
    for (;;) {
        uint64_t k = t->mk[i];
        if (k == UINT64_MAX)
            return 0;
        if (k == key) {
            *rank = t->mrank[i];
            *id = t->mid[i];
            return 1;
        }
        i = (i + 1) & t->mh_mask;
    }
}

static void merge_insert(ink_tokenizer *t, int32_t l, int32_t r, uint32_t rank, int32_t id)
{
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    size_t i = hash_u64(key) & t->mh_mask;
    while (t->mk[i] != UINT64_MAX && t->mk[i] != key)
        i = (i + 1) & t->mh_mask;
    if (t->mk[i] == UINT64_MAX)
        t->n_merges++;
    t->mk[i] = key; /* a repeated pair keeps the last rank, as HF's map does */
    t->mrank[i] = rank;
    t->mid[i] = id;
}

/* ---- pipeline validation -------------------------------------------------------------------- */

static const char *type_of(json_t *o)
{
    json_t *ty = json_is_object(o) ? json_object_get(o, "type") : NULL;
    return json_is_string(ty) ? json_string_value(ty) : NULL;
}

static int is_null_or_absent(json_t *v) { return !v || json_is_null(v); }

static int bool_field(json_t *o, const char *k, int dflt)
{
    json_t *v = json_object_get(o, k);
    if (json_is_boolean(v))
        return json_is_true(v);
    return dflt;
}

/* Rewrites \s and \S to the Unicode White_Space set (PCRE2 counts U+180E as \s; HF does not). */
#define WS_BODY "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

static int rewrite_ws(const char *pat, size_t len, char **out, const char *name, ink_err *err)
{
    size_t cap, o = 0, nws = 0;
    for (size_t i = 0; i + 1 < len; i++)
        if (pat[i] == '\\') {
            if (pat[i + 1] == 's' || pat[i + 1] == 'S')
                nws++;
            i++;
        }
    cap = len + nws * (sizeof(WS_BODY) + 4) + 1;
    char *b = malloc(cap);
    if (!b)
        return ink_err_set(err, INK_E_NOMEM, "tokenizer: out of memory");
    int in_class = 0;
    for (size_t i = 0; i < len; i++) {
        char c = pat[i];
        if (c == '\\' && i + 1 < len) {
            char d = pat[i + 1];
            i++;
            if (d == 's') {
                if (!in_class)
                    b[o++] = '[';
                memcpy(b + o, WS_BODY, sizeof(WS_BODY) - 1);
                o += sizeof(WS_BODY) - 1;
                if (!in_class)
                    b[o++] = ']';
            } else if (d == 'S') {
                if (in_class) {
                    free(b);
                    return ink_err_set(err, INK_E_UNSUPPORTED,
                                       "%s: pre_tokenizer Split regex: \\S inside a character class is "
                                       "not supported", name);
                }
                memcpy(b + o, "[^", 2);
                o += 2;
                memcpy(b + o, WS_BODY, sizeof(WS_BODY) - 1);
                o += sizeof(WS_BODY) - 1;
                b[o++] = ']';
            } else {
                b[o++] = c;
                b[o++] = d;
            }
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            b[o++] = c;
            if (i + 1 < len && pat[i + 1] == '^')
                b[o++] = pat[++i];
            if (i + 1 < len && pat[i + 1] == ']')
                b[o++] = pat[++i];
            continue;
        }
        if (in_class && c == '[' && i + 1 < len && pat[i + 1] == ':') {
            const char *end = strstr(pat + i, ":]");
            size_t n = end ? (size_t)(end - (pat + i)) + 2 : len - i;
            memcpy(b + o, pat + i, n);
            o += n;
            i += n - 1;
            continue;
        }
        if (in_class && c == ']')
            in_class = 0;
        b[o++] = c;
    }
    b[o] = 0;
    *out = b;
    return INK_OK;
}

static int check_pre_tokenizer(ink_tokenizer *t, json_t *pt, const char *name, ink_err *err)
{
    const char *ty = type_of(pt);
    json_t *split = NULL, *bl = NULL;
    if (ty && !strcmp(ty, "Sequence")) {
        json_t *arr = json_object_get(pt, "pretokenizers");
        if (!json_is_array(arr) || json_array_size(arr) != 2)
            return ink_err_set(err, INK_E_UNSUPPORTED,
                               "%s: pre_tokenizer: only Sequence[Split, ByteLevel] is supported", name);
        split = json_array_get(arr, 0);
        bl = json_array_get(arr, 1);
        const char *t0 = type_of(split), *t1 = type_of(bl);
        if (!t0 || strcmp(t0, "Split") || !t1 || strcmp(t1, "ByteLevel"))
            return ink_err_set(err, INK_E_UNSUPPORTED,
                               "%s: pre_tokenizer: only Sequence[Split, ByteLevel] is supported, found "
                               "Sequence[%s, %s]", name, t0 ? t0 : "?", t1 ? t1 : "?");
    } else if (!pt || json_is_null(pt)) {
        return ink_err_set(err, INK_E_UNSUPPORTED,
                           "%s: pre_tokenizer: null is not supported (byte-level BPE needs "
                           "Sequence[Split, ByteLevel])", name);
    } else {
        return ink_err_set(err, INK_E_UNSUPPORTED,
                           "%s: pre_tokenizer: type '%s' is not supported (only Sequence[Split, "
                           "ByteLevel])", name, ty ? ty : "?");
    }
    json_t *pat = json_object_get(split, "pattern");
    json_t *rx = json_is_object(pat) ? json_object_get(pat, "Regex") : NULL;
    if (!json_is_string(rx))
        return ink_err_set(err, INK_E_UNSUPPORTED,
                           "%s: pre_tokenizer.pretokenizers[0].pattern: only {\"Regex\": ...} is "
                           "supported", name);
    json_t *beh = json_object_get(split, "behavior");
    if (!json_is_string(beh) || strcmp(json_string_value(beh), "Isolated"))
        return ink_err_set(err, INK_E_UNSUPPORTED,
                           "%s: pre_tokenizer.pretokenizers[0].behavior: only \"Isolated\" is "
                           "supported", name);
    if (bool_field(split, "invert", 0))
        return ink_err_set(err, INK_E_UNSUPPORTED,
                           "%s: pre_tokenizer.pretokenizers[0].invert: true is not supported", name);
    if (bool_field(bl, "add_prefix_space", 0) || bool_field(bl, "use_regex", 0))
        return ink_err_set(err, INK_E_UNSUPPORTED,
                           "%s: pre_tokenizer.pretokenizers[1] (ByteLevel): add_prefix_space and "
                           "use_regex must be false", name);

    char *p2 = NULL;
    int rc = rewrite_ws(json_string_value(rx), json_string_length(rx), &p2, name, err);
    if (rc)
        return rc;
    int ec;
    PCRE2_SIZE eo;
    t->re = pcre2_compile((PCRE2_SPTR)p2, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    free(p2);
    if (!t->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return ink_err_set(err, INK_E_FORMAT,
                           "%s: pre_tokenizer.pretokenizers[0].pattern.Regex does not compile: %s",
                           name, (const char *)msg);
    }
    t->jit = pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;
    return INK_OK;
}

static int check_pipeline(json_t *root, const char *name, ink_err *err)
{
    json_t *norm = json_object_get(root, "normalizer");
    if (!is_null_or_absent(norm)) {
        const char *ty = type_of(norm);
        return ink_err_set(err, INK_E_UNSUPPORTED,
                           "%s: normalizer: type '%s' is not supported (only null)", name, ty ? ty : "?");
    }
    json_t *dec = json_object_get(root, "decoder");
    const char *dty = type_of(dec);
    if (!dty || strcmp(dty, "ByteLevel"))
        return ink_err_set(err, INK_E_UNSUPPORTED,
                           "%s: decoder: type '%s' is not supported (only ByteLevel)", name,
                           dty ? dty : (is_null_or_absent(dec) ? "null" : "?"));
    json_t *pp = json_object_get(root, "post_processor");
    if (!is_null_or_absent(pp)) {
        const char *ty = type_of(pp);
        if (!ty || strcmp(ty, "ByteLevel"))
            return ink_err_set(err, INK_E_UNSUPPORTED,
                               "%s: post_processor: type '%s' is not supported (only null or ByteLevel)",
                               name, ty ? ty : "?");
    }
    return INK_OK;
}

/* ---- loading -------------------------------------------------------------------------------- */

static int load_model(ink_tokenizer *t, json_t *model, const char *name, ink_err *err)
{
    if (!json_is_object(model))
        return ink_err_set(err, INK_E_FORMAT, "%s: model: missing or not an object", name);
    const char *ty = type_of(model);
    if (!ty)
        return ink_err_set(err, INK_E_FORMAT, "%s: model.type: missing", name);
    if (strcmp(ty, "BPE"))
        return ink_err_set(err, INK_E_UNSUPPORTED,
                           "%s: model.type: '%s' is not supported (only BPE)", name, ty);
    json_t *dr = json_object_get(model, "dropout");
    if (!is_null_or_absent(dr) && !(json_is_number(dr) && json_number_value(dr) == 0.0))
        return ink_err_set(err, INK_E_UNSUPPORTED, "%s: model.dropout: only null is supported", name);
    if (bool_field(model, "byte_fallback", 0))
        return ink_err_set(err, INK_E_UNSUPPORTED, "%s: model.byte_fallback: true is not supported",
                           name);
    const char *affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        json_t *v = json_object_get(model, affix[i]);
        if (!is_null_or_absent(v) && !(json_is_string(v) && json_string_length(v) == 0))
            return ink_err_set(err, INK_E_UNSUPPORTED, "%s: model.%s: only null is supported", name,
                               affix[i]);
    }
    t->ignore_merges = bool_field(model, "ignore_merges", 0);

    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab))
        return ink_err_set(err, INK_E_FORMAT, "%s: model.vocab: missing or not an object", name);
    json_t *merges = json_object_get(model, "merges");
    if (!json_is_array(merges))
        return ink_err_set(err, INK_E_FORMAT, "%s: model.merges: missing or not an array", name);

    /* ids first: find the range */
    const char *key;
    json_t *val;
    int64_t max_id = -1;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= TOK_MAX_ID)
            return ink_err_set(err, INK_E_FORMAT, "%s: model.vocab['%.64s']: id is not a valid integer",
                               name, key);
        if (json_integer_value(val) > max_id)
            max_id = json_integer_value(val);
    }
    t->n_vocab = (int)(max_id + 1);
    return INK_OK;
}

static int fill_vocab(ink_tokenizer *t, json_t *vocab, const char *name, const int16_t u2b[324],
                      ink_err *err)
{
    const char *key;
    json_t *val;
    unsigned char *buf = NULL;
    size_t bufcap = 0;
    int rc = INK_OK;
    json_object_foreach(vocab, key, val) {
        size_t klen = strlen(key);
        if (klen > bufcap) {
            bufcap = klen * 2 + 16;
            unsigned char *nb = realloc(buf, bufcap);
            if (!nb) {
                rc = ink_err_set(err, INK_E_NOMEM, "tokenizer: out of memory");
                break;
            }
            buf = nb;
        }
        long n = byte_level_decode(u2b, key, klen, buf);
        if (n < 0) {
            rc = ink_err_set(err, INK_E_FORMAT,
                             "%s: model.vocab['%.64s']: character outside the byte-level alphabet", name,
                             key);
            break;
        }
        int32_t id = (int32_t)json_integer_value(val);
        if (t->ent[id].kind != ENT_NONE) {
            rc = ink_err_set(err, INK_E_FORMAT, "%s: model.vocab: id %d is used twice", name, (int)id);
            break;
        }
        if (tok_vocab_find(t, buf, (size_t)n) >= 0) {
            rc = ink_err_set(err, INK_E_FORMAT, "%s: model.vocab['%.64s']: duplicate token bytes", name,
                             key);
            break;
        }
        uint32_t off;
        if ((rc = arena_add(t, buf, (size_t)n, &off, err)))
            break;
        t->ent[id].off = off;
        t->ent[id].len = (uint32_t)n;
        t->ent[id].kind = ENT_VOCAB;
        vocab_insert(t, id);
        if (n == 1)
            t->byte_id[buf[0]] = id;
        if ((size_t)n > t->max_piece)
            t->max_piece = (size_t)n;
    }
    free(buf);
    return rc;
}

static int merge_side(ink_tokenizer *t, const int16_t u2b[324], const char *s, size_t len,
                      unsigned char *buf, long *nb, int32_t *id)
{
    long n = byte_level_decode(u2b, s, len, buf);
    if (n < 0)
        return -1;
    *nb = n;
    *id = tok_vocab_find(t, buf, (size_t)n);
    return *id < 0 ? -2 : 0;
}

static int fill_merges(ink_tokenizer *t, json_t *merges, const char *name, const int16_t u2b[324],
                       ink_err *err)
{
    size_t n = json_array_size(merges);
    t->mh_mask = pow2_at_least(n * 2 + 16) - 1;
    t->mk = malloc((t->mh_mask + 1) * sizeof *t->mk);
    t->mrank = malloc((t->mh_mask + 1) * sizeof *t->mrank);
    t->mid = malloc((t->mh_mask + 1) * sizeof *t->mid);
    if (!t->mk || !t->mrank || !t->mid)
        return ink_err_set(err, INK_E_NOMEM, "tokenizer: out of memory (merges)");
    memset(t->mk, 0xff, (t->mh_mask + 1) * sizeof *t->mk);
    unsigned char *buf = malloc(4 * t->max_piece + 8);
    if (!buf)
        return ink_err_set(err, INK_E_NOMEM, "tokenizer: out of memory");
    int rc = INK_OK;
    for (size_t i = 0; i < n && rc == INK_OK; i++) {
        json_t *m = json_array_get(merges, i);
        const char *ls, *rs;
        size_t ll, rl;
        if (json_is_string(m)) {
            const char *s = json_string_value(m);
            const char *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                rc = ink_err_set(err, INK_E_FORMAT,
                                 "%s: model.merges[%zu]: \"%.64s\" is not of the form \"left right\"",
                                 name, i, s);
                break;
            }
            ls = s;
            ll = (size_t)(sp - s);
            rs = sp + 1;
            rl = strlen(rs);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            ls = json_string_value(json_array_get(m, 0));
            ll = json_string_length(json_array_get(m, 0));
            rs = json_string_value(json_array_get(m, 1));
            rl = json_string_length(json_array_get(m, 1));
        } else {
            rc = ink_err_set(err, INK_E_FORMAT,
                             "%s: model.merges[%zu]: expected a \"left right\" string or a [left, "
                             "right] pair", name, i);
            break;
        }
        if (ll > 2 * t->max_piece || rl > 2 * t->max_piece || ll == 0 || rl == 0) {
            rc = ink_err_set(err, INK_E_FORMAT, "%s: model.merges[%zu]: '%.32s' + '%.32s' is not a "
                             "pair of vocabulary tokens", name, i, ls, rs);
            break;
        }
        long nl, nr;
        int32_t il, ir;
        if (merge_side(t, u2b, ls, ll, buf, &nl, &il) || merge_side(t, u2b, rs, rl, buf + nl, &nr, &ir)) {
            rc = ink_err_set(err, INK_E_FORMAT, "%s: model.merges[%zu]: '%.32s' + '%.32s' is not a "
                             "pair of vocabulary tokens", name, i, ls, rs);
            break;
        }
        int32_t im = tok_vocab_find(t, buf, (size_t)(nl + nr));
        if (im < 0) {
            rc = ink_err_set(err, INK_E_FORMAT, "%s: model.merges[%zu]: merged token '%.32s%.32s' is "
                             "not in the vocabulary", name, i, ls, rs);
            break;
        }
        merge_insert(t, il, ir, (uint32_t)i, im);
    }
    free(buf);
    return rc;
}

static int cmp_added(const void *a, const void *b, void *arena)
{
    const added_tok *x = a, *y = b;
    const unsigned char *ar = arena;
    int fx = x->len ? ar[x->off] : -1, fy = y->len ? ar[y->off] : -1;
    if (fx != fy)
        return fx < fy ? -1 : 1;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

static void sort_added(ink_tokenizer *t)
{
    /* insertion sort: tens of entries */
    for (size_t i = 1; i < t->n_added; i++) {
        added_tok k = t->added[i];
        size_t j = i;
        while (j > 0 && cmp_added(&t->added[j - 1], &k, t->arena) > 0) {
            t->added[j] = t->added[j - 1];
            j--;
        }
        t->added[j] = k;
    }
    size_t i = 0;
    for (int c = 0; c < 256; c++) {
        t->first[c] = (uint32_t)i;
        while (i < t->n_added && (unsigned char)t->arena[t->added[i].off] == c)
            i++;
    }
    t->first[256] = (uint32_t)t->n_added;
}

static int load_added(ink_tokenizer *t, json_t *arr, const char *name, ink_err *err)
{
    size_t n = json_array_size(arr);
    if (!n)
        return INK_OK;
    t->added = calloc(n, sizeof *t->added);
    if (!t->added)
        return ink_err_set(err, INK_E_NOMEM, "tokenizer: out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(arr, i);
        json_t *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= t->n_vocab ||
            !json_is_string(content) || json_string_length(content) == 0)
            return ink_err_set(err, INK_E_FORMAT,
                               "%s: added_tokens[%zu]: needs an integer id and a non-empty content", name, i);
        const char *flags[] = {"lstrip", "rstrip", "single_word"};
        for (int f = 0; f < 3; f++)
            if (bool_field(a, flags[f], 0))
                return ink_err_set(err, INK_E_UNSUPPORTED,
                                   "%s: added_tokens[%zu].%s: true is not supported", name, i, flags[f]);
        int32_t idv = (int32_t)json_integer_value(id);
        int special = bool_field(a, "special", 0);
        tok_ent *e = &t->ent[idv];
        const char *cs = json_string_value(content);
        size_t cl = json_string_length(content);
        if (e->kind == ENT_ADDED)
            return ink_err_set(err, INK_E_FORMAT, "%s: added_tokens[%zu]: id %d is used twice", name, i,
                               (int)idv);
        if (e->kind == ENT_VOCAB && (e->len != cl || memcmp(t->arena + e->off, cs, cl)))
            return ink_err_set(err, INK_E_FORMAT,
                               "%s: added_tokens[%zu]: id %d is already the vocabulary token of other "
                               "bytes", name, i, (int)idv);
        uint32_t off;
        int rc = arena_add(t, cs, cl, &off, err);
        if (rc)
            return rc;
        e->off = off;
        e->len = (uint32_t)cl;
        e->kind = ENT_ADDED;
        e->special = (uint8_t)special;
        t->added[t->n_added++] = (added_tok){idv, off, (uint32_t)cl, special};
        if (!special)
            t->any_nonspecial = 1;
        if (cl > t->max_piece)
            t->max_piece = cl;
    }
    sort_added(t);
    return INK_OK;
}

static int read_file(const char *path, char **buf, size_t *len, ink_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return ink_err_set(err, INK_E_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    for (;;) {
        if (!b) {
            fclose(f);
            return ink_err_set(err, INK_E_NOMEM, "%s: out of memory reading", path);
        }
        n += fread(b + n, 1, cap - n, f);
        if (n < cap)
            break;
        cap *= 2;
        char *nb = realloc(b, cap);
        if (!nb)
            free(b);
        b = nb;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b);
        return ink_err_set(err, INK_E_IO, "%s: read error", path);
    }
    *buf = b;
    *len = n;
    return INK_OK;
}

static int parse_json(const char *buf, size_t len, const char *name, json_t **out, ink_err *err)
{
    json_error_t je;
    json_t *j = json_loadb(buf, len, 0, &je);
    if (!j)
        return ink_err_set(err, INK_E_FORMAT, "%s: invalid JSON at line %d column %d: %s", name, je.line,
                           je.column, je.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return ink_err_set(err, INK_E_FORMAT, "%s: top level is not a JSON object", name);
    }
    *out = j;
    return INK_OK;
}

static int build(ink_tokenizer *t, json_t *root, const char *name, ink_err *err)
{
    uint32_t b2u[256];
    int16_t u2b[324];
    byte_level_tables(b2u, u2b);
    int rc = check_pipeline(root, name, err);
    if (rc)
        return rc;
    json_t *model = json_object_get(root, "model");
    if ((rc = load_model(t, model, name, err)))
        return rc;
    json_t *added = json_object_get(root, "added_tokens");
    if (!is_null_or_absent(added) && !json_is_array(added))
        return ink_err_set(err, INK_E_FORMAT, "%s: added_tokens: not an array", name);
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *id = json_object_get(json_array_get(added, i), "id");
        if (json_is_integer(id) && json_integer_value(id) >= t->n_vocab &&
            json_integer_value(id) < TOK_MAX_ID)
            t->n_vocab = (int)json_integer_value(id) + 1;
    }
    if (t->n_vocab <= 0)
        return ink_err_set(err, INK_E_FORMAT, "%s: model.vocab: empty", name);
    t->ent = calloc((size_t)t->n_vocab, sizeof *t->ent);
    size_t nv = json_object_size(json_object_get(model, "vocab"));
    t->vh_mask = pow2_at_least(nv * 2 + 16) - 1;
    t->vh = malloc((t->vh_mask + 1) * sizeof *t->vh);
    if (!t->ent || !t->vh)
        return ink_err_set(err, INK_E_NOMEM, "tokenizer: out of memory (vocab of %d)", t->n_vocab);
    memset(t->vh, 0xff, (t->vh_mask + 1) * sizeof *t->vh);
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = -1;
    if ((rc = fill_vocab(t, json_object_get(model, "vocab"), name, u2b, err)))
        return rc;
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] < 0)
            return ink_err_set(err, INK_E_UNSUPPORTED,
                               "%s: model.vocab: no token for byte 0x%02x (byte-level BPE needs all 256)",
                               name, b);
    if ((rc = fill_merges(t, json_object_get(model, "merges"), name, u2b, err)))
        return rc;
    if ((rc = load_added(t, added, name, err)))
        return rc;
    return check_pre_tokenizer(t, json_object_get(root, "pre_tokenizer"), name, err);
}

int ink_tokenizer_open_mem(ink_tokenizer **out, const char *json, size_t len, const char *name,
                           ink_err *err)
{
    if (!out || !json)
        return ink_err_set(err, INK_E_INVAL, "ink_tokenizer_open_mem: NULL argument");
    if (!name)
        name = "tokenizer.json";
    json_t *root = NULL;
    int rc = parse_json(json, len, name, &root, err);
    if (rc)
        return rc;
    ink_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        json_decref(root);
        return ink_err_set(err, INK_E_NOMEM, "tokenizer: out of memory");
    }
    rc = build(t, root, name, err);
    json_decref(root);
    if (rc) {
        ink_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return INK_OK;
}

static int load_config(ink_tokenizer *t, const char *path, ink_err *err)
{
    char *buf;
    size_t len;
    int rc = read_file(path, &buf, &len, err);
    if (rc)
        return rc;
    json_t *root = NULL;
    rc = parse_json(buf, len, path, &root, err);
    free(buf);
    if (rc)
        return rc;
    json_t *ml = json_object_get(root, "model_max_length");
    if (json_is_integer(ml) && json_integer_value(ml) > 0)
        t->model_max_length = json_integer_value(ml);
    else if (json_is_real(ml) && json_real_value(ml) > 0)
        t->model_max_length = json_real_value(ml) >= 9.2e18 ? INT64_MAX : (int64_t)json_real_value(ml);
    json_decref(root);
    return INK_OK;
}

int ink_tokenizer_open_files(ink_tokenizer **out, const char *json_path, const char *config_path,
                             ink_err *err)
{
    if (!out || !json_path)
        return ink_err_set(err, INK_E_INVAL, "ink_tokenizer_open_files: NULL argument");
    char *buf;
    size_t len;
    int rc = read_file(json_path, &buf, &len, err);
    if (rc)
        return rc;
    ink_tokenizer *t = NULL;
    rc = ink_tokenizer_open_mem(&t, buf, len, json_path, err);
    free(buf);
    if (rc)
        return rc;
    if (config_path && (rc = load_config(t, config_path, err))) {
        ink_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return INK_OK;
}

int ink_tokenizer_open(ink_tokenizer **out, const char *dir, ink_err *err)
{
    if (!out || !dir)
        return ink_err_set(err, INK_E_INVAL, "ink_tokenizer_open: NULL argument");
    size_t dl = strlen(dir);
    char *jp = malloc(dl + 32), *cp = malloc(dl + 32);
    if (!jp || !cp) {
        free(jp);
        free(cp);
        return ink_err_set(err, INK_E_NOMEM, "tokenizer: out of memory");
    }
    snprintf(jp, dl + 32, "%s/tokenizer.json", dir);
    snprintf(cp, dl + 32, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(cp, "rb");
    int have_cfg = f != NULL;
    if (f)
        fclose(f);
    int rc = ink_tokenizer_open_files(out, jp, have_cfg ? cp : NULL, err);
    free(jp);
    free(cp);
    return rc;
}

void ink_tokenizer_free(ink_tokenizer *t)
{
    if (!t)
        return;
    free(t->ent);
    free(t->arena);
    free(t->vh);
    free(t->mk);
    free(t->mrank);
    free(t->mid);
    free(t->added);
    if (t->re)
        pcre2_code_free(t->re);
    free(t);
}

int ink_tokenizer_n_vocab(const ink_tokenizer *t) { return t ? t->n_vocab : 0; }
size_t ink_tokenizer_n_merges(const ink_tokenizer *t) { return t ? t->n_merges : 0; }
int64_t ink_tokenizer_model_max_length(const ink_tokenizer *t) { return t ? t->model_max_length : 0; }
size_t ink_tokenizer_max_piece_len(const ink_tokenizer *t) { return t ? t->max_piece : 0; }

const char *ink_tokenizer_piece(const ink_tokenizer *t, int32_t id, size_t *len)
{
    if (!t || id < 0 || id >= t->n_vocab || t->ent[id].kind == ENT_NONE)
        return NULL;
    if (len)
        *len = t->ent[id].len;
    return t->arena + t->ent[id].off;
}

int ink_tokenizer_is_special(const ink_tokenizer *t, int32_t id)
{
    return t && id >= 0 && id < t->n_vocab && t->ent[id].kind == ENT_ADDED && t->ent[id].special;
}

int32_t ink_tokenizer_special_id(const ink_tokenizer *t, const char *s)
{
    if (!t || !s)
        return -1;
    size_t n = strlen(s);
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && !memcmp(t->arena + t->added[i].off, s, n))
            return t->added[i].id;
    return -1;
}

int32_t ink_tokenizer_token_id(const ink_tokenizer *t, const char *s, size_t len)
{
    if (!t || !s)
        return -1;
    int32_t id = tok_vocab_find(t, (const unsigned char *)s, len);
    if (id >= 0)
        return id;
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].len == len && !memcmp(t->arena + t->added[i].off, s, len))
            return t->added[i].id;
    return -1;
}
