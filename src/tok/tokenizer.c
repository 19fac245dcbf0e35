/* tokenizer.c — tokenizer.json loading and byte-level BPE encode / decode (see tokenizer.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tok/tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ENT_NONE = 0, ENT_VOCAB = 1, ENT_ADDED = 2 };

typedef struct tok_ent {
    uint32_t off, len;
    uint8_t kind;    /* ENT_* */
    uint8_t special; /* added token marked special */
} tok_ent;

/* Token ids are below 2^24 (config.json's vocab_size limit): the id table is sized by the largest id. */
#define TOK_MAX_ID (1 << 24)

typedef struct added_tok {
    int32_t id;
    uint32_t off, len;
    int special;
} added_tok;

struct ink_tokenizer {
    int n_vocab;
    tok_ent *ent;
    char *arena;
    size_t arena_len, arena_cap;
    /* ordinary vocab: open addressing over ids, keyed by the token bytes */
    int32_t *vh;
    size_t vh_mask;
    /* merges: open addressing, key = left << 32 | right */
    uint64_t *mk;
    uint32_t *mrank;
    int32_t *mid;
    size_t mh_mask, n_merges;
    int32_t byte_id[256];
    int ignore_merges;
    pcre2_code *re;
    int jit;
    /* added tokens sorted by (first byte, length descending); bucket [first[c], first[c+1]) */
    added_tok *added;
    size_t n_added;
    uint32_t first[257];
    int any_nonspecial;
    size_t max_piece;
    int64_t model_max_length;
};

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

size_t ink_utf8_valid_prefix(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char b = s[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        size_t need;
        unsigned char lo = 0x80, hi = 0xbf;
        if (b >= 0xc2 && b <= 0xdf)
            need = 1;
        else if (b >= 0xe0 && b <= 0xef) {
            need = 2;
            if (b == 0xe0)
                lo = 0xa0;
            else if (b == 0xed)
                hi = 0x9f;
        } else if (b >= 0xf0 && b <= 0xf4) {
            need = 3;
            if (b == 0xf0)
                lo = 0x90;
            else if (b == 0xf4)
                hi = 0x8f;
        } else
            return i;
        if (i + need >= n)
            return i;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return i;
        for (size_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xc0) != 0x80)
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
        size_t need = 0;
        unsigned char lo = 0x80, hi = 0xbf;
        if (b >= 0xc2 && b <= 0xdf)
            need = 1;
        else if (b >= 0xe0 && b <= 0xef) {
            need = 2;
            if (b == 0xe0)
                lo = 0xa0;
            else if (b == 0xed)
                hi = 0x9f;
        } else if (b >= 0xf0 && b <= 0xf4) {
            need = 3;
            if (b == 0xf0)
                lo = 0x90;
            else if (b == 0xf4)
                hi = 0x8f;
        }
        size_t k = 0; /* valid continuation bytes seen */
        if (need) {
            while (k < need && i + 1 + k < n) {
                unsigned char c = s[i + 1 + k];
                unsigned char l = k == 0 ? lo : 0x80, h = k == 0 ? hi : 0xbf;
                if (c < l || c > h)
                    break;
                k++;
            }
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

static int32_t vocab_find(const ink_tokenizer *t, const unsigned char *s, size_t n)
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

static int merge_find(const ink_tokenizer *t, int32_t l, int32_t r, uint32_t *rank, int32_t *id)
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
        if (vocab_find(t, buf, (size_t)n) >= 0) {
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
    *id = vocab_find(t, buf, (size_t)n);
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
        int32_t im = vocab_find(t, buf, (size_t)(nl + nr));
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
    int32_t id = vocab_find(t, (const unsigned char *)s, len);
    if (id >= 0)
        return id;
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].len == len && !memcmp(t->arena + t->added[i].off, s, len))
            return t->added[i].id;
    return -1;
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
    if (merge_find(c->t, c->sym[pos], c->sym[j], &rank, &id))
        heap_push(c, (heap_ent){rank, pos});
}

static int bpe_piece(enc_ctx *c, const unsigned char *p, size_t n)
{
    const ink_tokenizer *t = c->t;
    int rc;
    if (n == 0)
        return INK_OK;
    if (t->ignore_merges || n == 1) {
        int32_t id = vocab_find(t, p, n);
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
        if (!merge_find(t, c->sym[pos], c->sym[j], &rank, &id) || rank != e.rank)
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
