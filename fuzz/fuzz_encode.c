/* fuzz_encode.c — arbitrary bytes through ink_tokenizer_encode on the test tokenizer
 * (tests/data/tok). Properties: decode(encode(b)) == b for any bytes, with and without special
 * matching; ink_tokenizer_encode_buf agrees with ink_tokenizer_encode and reports the size it
 * needs; the streaming decoder gives the same text as the lossy batch decode. */
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

static void roundtrip(const ink_tokenizer *t, const uint8_t *data, size_t n, int flags)
{
    ink_tokens v = {0};
    ink_err err = {0};
    if (ink_tokenizer_encode(t, (const char *)data, n, flags, &v, &err))
        fz_fail("encode (flags %d) of %zu bytes failed: %s", flags, n, err.msg);
    char *out = NULL;
    size_t len = 0;
    if (ink_tokenizer_decode(t, v.ids, v.n, 0, &out, &len, &err)) fz_fail("decode failed: %s", err.msg);
    if (len != n || memcmp(out, data, n)) fz_fail("decode(encode(x)) != x (flags %d, %zu -> %zu bytes)", flags, n, len);
    free(out);

    size_t need = 0;
    int32_t *buf = malloc((v.n + 1) * sizeof *buf);
    if (!buf) fz_fail("out of memory");
    if (ink_tokenizer_encode_buf(t, (const char *)data, n, flags, buf, v.n, &need, &err) || need != v.n ||
        (v.n && memcmp(buf, v.ids, v.n * sizeof *buf)))
        fz_fail("encode_buf disagrees with encode (%zu vs %zu ids)", need, v.n);
    if (v.n) {
        ink_err e2 = {0};
        need = 0;
        if (ink_tokenizer_encode_buf(t, (const char *)data, n, flags, buf, v.n - 1, &need, &e2) != INK_E_INVAL ||
            need != v.n)
            fz_fail("encode_buf with a short buffer: need %zu, have %zu", need, v.n);
    }
    free(buf);

    if (flags == 0) {
        char *lossy = NULL;
        size_t ll = 0;
        if (ink_tokenizer_decode(t, v.ids, v.n, INK_DECODE_LOSSY, &lossy, &ll, &err))
            fz_fail("lossy decode failed: %s", err.msg);
        ink_detok *d = NULL;
        if (ink_detok_new(&d, t, 0, &err)) fz_fail("detok: %s", err.msg);
        char *acc = malloc(ll + 1);
        size_t al = 0;
        if (!acc) fz_fail("out of memory");
        for (size_t i = 0; i < v.n; i++) {
            const char *s;
            size_t sl;
            if (ink_detok_feed(d, v.ids[i], &s, &sl, &err)) fz_fail("detok_feed(%d): %s", v.ids[i], err.msg);
            if (al + sl > ll) fz_fail("streaming decode longer than the lossy decode");
            memcpy(acc + al, s, sl);
            al += sl;
        }
        const char *s;
        size_t sl;
        ink_detok_flush(d, &s, &sl);
        if (al + sl > ll) fz_fail("streaming decode longer than the lossy decode");
        memcpy(acc + al, s, sl);
        al += sl;
        if (al != ll || memcmp(acc, lossy, ll)) fz_fail("streaming decode (%zu bytes) != lossy decode (%zu)", al, ll);
        free(acc);
        free(lossy);
        ink_detok_free(d);
    }
    ink_tokens_free(&v);
}

int ink_fuzz_encode(const uint8_t *data, size_t n)
{
    const ink_tokenizer *t = fz_test_tokenizer();
    roundtrip(t, data, n, 0);
    roundtrip(t, data, n, INK_TOK_SPECIAL);
    return 0;
}
