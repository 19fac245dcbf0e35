/* fuzz_tokenizer.c — tokenizer.json text through ink_tokenizer_open_mem; an accepted tokenizer is
 * then used: a few encodes (with and without special matching), decode of the result, every
 * piece, streaming decode of the first ids. */
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

static const char *const texts[] = {
    "Hello, world! 123 <|endoftext|>",
    "  \t\n\n  x",
    "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 \xff\xfe",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "",
};

int ink_fuzz_tokenizer(const uint8_t *data, size_t n)
{
    ink_tokenizer *t = NULL;
    ink_err err = {0};
    if (ink_tokenizer_open_mem(&t, (const char *)data, n, "tokenizer.json", &err)) {
        if (!err.msg[0]) fz_fail("ink_tokenizer_open_mem failed without a message");
        return 0;
    }
    int nv = ink_tokenizer_n_vocab(t);
    if (nv < 0) fz_fail("n_vocab %d", nv);
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        for (int flags = 0; flags <= INK_TOK_SPECIAL; flags += INK_TOK_SPECIAL) {
            ink_tokens v = {0};
            ink_err e = {0};
            if (ink_tokenizer_encode(t, texts[i], strlen(texts[i]), flags, &v, &e) == INK_OK) {
                for (size_t k = 0; k < v.n; k++)
                    if (v.ids[k] < 0 || v.ids[k] >= nv) fz_fail("encode gave id %d of %d", v.ids[k], nv);
                char *out = NULL;
                size_t len = 0;
                if (ink_tokenizer_decode(t, v.ids, v.n, INK_DECODE_LOSSY, &out, &len, &e) == INK_OK) free(out);
            }
            ink_tokens_free(&v);
        }
    size_t maxp = ink_tokenizer_max_piece_len(t), tot = 0;
    int lim = nv < 4096 ? nv : 4096;
    ink_detok *d = NULL;
    if (ink_detok_new(&d, t, 0, &err) == INK_OK) {
        for (int id = 0; id < lim; id++) {
            size_t len = 0;
            const char *s = ink_tokenizer_piece(t, id, &len);
            if (s && len > maxp) fz_fail("piece %d longer (%zu) than max_piece_len %zu", id, len, maxp);
            if (s) tot += len + (size_t)ink_tokenizer_is_special(t, id);
            const char *txt;
            size_t tl;
            ink_err e = {0};
            (void)ink_detok_feed(d, id, &txt, &tl, &e);
        }
        const char *txt;
        size_t tl;
        ink_detok_flush(d, &txt, &tl);
        ink_detok_free(d);
    }
    (void)tot;
    (void)ink_tokenizer_special_id(t, "<|endoftext|>");
    (void)ink_tokenizer_token_id(t, "a", 1);
    ink_tokenizer_free(t);
    return 0;
}
