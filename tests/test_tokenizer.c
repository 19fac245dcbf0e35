/* test_tokenizer.c — tokenizer.json loading, BPE encode / decode against ids computed by the
 * Hugging Face tokenizers library (tests/data/tok/, made by scripts/gen-tok-data). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "tok/tokenizer.h"

#define DATA "tests/data/tok"
#define TMP "tests/tmp/tok"

static ink_tokenizer *g_tok;
static json_t *g_vec;
static double g_load_s;

/* CPU time of this thread, not wall time: the complexity checks below must not depend on what else
 * the machine is running (issue 13: no test depends on speed or load). */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Unpacks the committed tokenizer.json.gz into tests/tmp/tok/ (once). */
static int unpack(void)
{
    mkdir("tests/tmp", 0755);
    mkdir(TMP, 0755);
    struct stat st, gz;
    if (stat(DATA "/tokenizer.json.gz", &gz) != 0)
        return -1;
    if (stat(TMP "/tokenizer.json", &st) != 0 || st.st_size < 1000000 || st.st_mtime < gz.st_mtime) {
        if (system("gzip -dc " DATA "/tokenizer.json.gz > " TMP "/tokenizer.json.part && mv " TMP
                   "/tokenizer.json.part " TMP "/tokenizer.json") != 0)
            return -1;
    }
    if (system("cp " DATA "/tokenizer_config.json " TMP "/tokenizer_config.json") != 0)
        return -1;
    return 0;
}

static int group_setup(void **state)
{
    (void)state;
    if (unpack())
        return -1;
    ink_err err = {0};
    double t0 = now_s();
    int rc = ink_tokenizer_open(&g_tok, TMP, &err);
    g_load_s = now_s() - t0;
    if (rc) {
        fprintf(stderr, "open failed: %s\n", err.msg);
        return -1;
    }
    fprintf(stderr, "# tokenizer.json (200,058 tokens) loaded in %.3f s\n", g_load_s);
    json_error_t je;
    g_vec = json_load_file(DATA "/vectors.json", JSON_ALLOW_NUL, &je);
    if (!g_vec) {
        fprintf(stderr, "vectors.json: %s\n", je.text);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    ink_tokenizer_free(g_tok);
    json_decref(g_vec);
    return 0;
}

static int ids_equal(const ink_tokens *v, json_t *arr)
{
    if (v->n != json_array_size(arr))
        return 0;
    for (size_t i = 0; i < v->n; i++)
        if (v->ids[i] != json_integer_value(json_array_get(arr, i)))
            return 0;
    return 1;
}

static void print_ids(const char *what, const ink_tokens *v, json_t *arr)
{
    fprintf(stderr, "  %s got [", what);
    for (size_t i = 0; i < v->n && i < 40; i++)
        fprintf(stderr, "%s%d", i ? "," : "", v->ids[i]);
    fprintf(stderr, "] want [");
    for (size_t i = 0; i < json_array_size(arr) && i < 40; i++)
        fprintf(stderr, "%s%lld", i ? "," : "", (long long)json_integer_value(json_array_get(arr, i)));
    fprintf(stderr, "]\n");
}

/* Checks every vector case selected by `stress` (0: named cases, 1: stress set). Cases marked
 * unicode_gap may differ (Unicode 14 PCRE2 vs Unicode 16 HF); they are counted, not passed. */
static void check_cases(int stress, size_t *n_checked, size_t *n_gap, size_t *n_gap_diff)
{
    json_t *cases = json_object_get(g_vec, "cases");
    size_t fails = 0;
    *n_checked = *n_gap = *n_gap_diff = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(c, "name"));
        if ((strncmp(name, "stress_", 7) == 0) != stress)
            continue;
        json_t *text = json_object_get(c, "text");
        int gap = json_is_true(json_object_get(c, "unicode_gap"));
        const char *key[2] = {"text_ids", "special_ids"};
        int diff = 0;
        for (int mode = 0; mode < 2; mode++) {
            ink_tokens v = {0};
            ink_err err = {0};
            assert_int_equal(ink_tokenizer_encode(g_tok, json_string_value(text), json_string_length(text),
                                                  mode ? INK_TOK_SPECIAL : 0, &v, &err), INK_OK);
            json_t *want = json_object_get(c, key[mode]);
            if (!ids_equal(&v, want)) {
                diff = 1;
                if (!gap) {
                    fprintf(stderr, "MISMATCH %s (%s)\n", name, key[mode]);
                    print_ids(key[mode], &v, want);
                    fails++;
                }
            }
            /* decode(encode(s)) == s */
            char *back = NULL;
            size_t blen = 0;
            assert_int_equal(ink_tokenizer_decode(g_tok, v.ids, v.n, 0, &back, &blen, &err), INK_OK);
            assert_int_equal(blen, json_string_length(text));
            assert_memory_equal(back, json_string_value(text), blen);
            free(back);
            ink_tokens_free(&v);
        }
        (*n_checked)++;
        if (gap) {
            (*n_gap)++;
            *n_gap_diff += (size_t)diff;
        }
    }
    assert_int_equal(fails, 0);
}

static void test_load(void **state)
{
    (void)state;
    assert_int_equal(ink_tokenizer_n_vocab(g_tok), 200058);
    json_t *meta = json_object_get(g_vec, "meta");
    assert_int_equal(ink_tokenizer_n_merges(g_tok), json_integer_value(json_object_get(meta, "n_merges")));
    assert_int_equal(ink_tokenizer_model_max_length(g_tok), 1048576);
    /* loading must be fast: well under a second in a release build (ASan gets slack) */
    assert_true(g_load_s < 5.0);
}

static void test_section10_cases(void **state)
{
    (void)state;
    size_t n, gap, gapdiff;
    check_cases(0, &n, &gap, &gapdiff);
    (void)gapdiff;
    assert_true(n >= 150);
    fprintf(stderr, "# %zu named cases match HF exactly; %zu more touch the Unicode 15-16 gap "
            "(checked by test_known_diff_unicode_gap)\n", n - gap, gap);
}

static void test_stress_set(void **state)
{
    (void)state;
    size_t n, gap, gapdiff;
    check_cases(1, &n, &gap, &gapdiff);
    (void)gapdiff;
    assert_true(n >= 4000);
    fprintf(stderr, "# %zu stress strings match HF exactly; %zu more touch the Unicode 15-16 gap "
            "(checked by test_known_diff_unicode_gap)\n", n - gap, gap);
}

/* Known difference: PCRE2 10.42 (Debian 12) has Unicode 14 tables, HF tokenizers 0.23 Unicode 16.
 * Every case marked unicode_gap (text with a code point whose General_Category changed in
 * Unicode 15.0-16.0: the named u15_* / u16_* probes and the stress strings that hit one) is
 * checked here; the test is reported as SKIPPED while any of them differs, so the gap is never
 * counted as a pass. It passes outright on a PCRE2 with Unicode 16 tables. */
static void test_known_diff_unicode_gap(void **state)
{
    (void)state;
    json_t *cases = json_object_get(g_vec, "cases");
    size_t seen = 0, differ = 0, named = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        if (!json_is_true(json_object_get(c, "unicode_gap")))
            continue;
        const char *name = json_string_value(json_object_get(c, "name"));
        seen++;
        named += !strncmp(name, "u15_", 4) || !strncmp(name, "u16_", 4);
        json_t *text = json_object_get(c, "text");
        ink_tokens v = {0};
        assert_int_equal(ink_tokenizer_encode(g_tok, json_string_value(text), json_string_length(text), 0,
                                              &v, NULL), INK_OK);
        if (!ids_equal(&v, json_object_get(c, "text_ids"))) {
            differ++;
            fprintf(stderr, "# KNOWN DIFFERENCE %s (Unicode 14 PCRE2 vs Unicode 16 HF):\n", name);
            print_ids("text_ids", &v, json_object_get(c, "text_ids"));
        }
        ink_tokens_free(&v);
    }
    assert_true(named >= 6);
    fprintf(stderr, "# Unicode 15-16 gap: %zu strings touch it, %zu encode differently from HF\n", seen,
            differ);
    if (differ)
        skip();
}

static uint32_t fnv1a_ids(const int32_t *ids, size_t n)
{
    uint32_t h = 0x811c9dc5u;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) {
            h ^= ((uint32_t)ids[i] >> (8 * k)) & 0xff;
            h *= 0x01000193u;
        }
    return h;
}

static char *long_text(json_t *gen, size_t *len)
{
    json_t *blob = json_object_get(gen, "ascii_blob");
    if (blob) {
        size_t n = (size_t)json_integer_value(blob);
        uint32_t s = (uint32_t)json_integer_value(json_object_get(gen, "seed"));
        char *b = malloc(n + 1);
        for (size_t i = 0; i < n; i++) {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            uint32_t r = s % 97;
            b[i] = r < 95 ? (char)(32 + r) : (r == 95 ? '\n' : '\t');
        }
        b[n] = 0;
        *len = n;
        return b;
    }
    const char *rep = json_string_value(json_object_get(gen, "repeat"));
    size_t count = (size_t)json_integer_value(json_object_get(gen, "count"));
    const char *tail = json_string_value(json_object_get(gen, "tail"));
    size_t rl = strlen(rep), tl = tail ? strlen(tail) : 0;
    char *b = malloc(rl * count + tl + 1);
    for (size_t i = 0; i < count; i++)
        memcpy(b + i * rl, rep, rl);
    if (tl)
        memcpy(b + rl * count, tail, tl);
    *len = rl * count + tl;
    b[*len] = 0;
    return b;
}

static void test_long_inputs(void **state)
{
    (void)state;
    json_t *longs = json_object_get(g_vec, "long");
    assert_true(json_array_size(longs) >= 5);
    for (size_t i = 0; i < json_array_size(longs); i++) {
        json_t *c = json_array_get(longs, i);
        size_t len;
        char *text = long_text(json_object_get(c, "gen"), &len);
        assert_int_equal(len, json_integer_value(json_object_get(c, "n_bytes")));
        ink_tokens v = {0};
        double t0 = now_s();
        assert_int_equal(ink_tokenizer_encode(g_tok, text, len, 0, &v, NULL), INK_OK);
        double dt = now_s() - t0;
        fprintf(stderr, "# %-16s %8zu bytes -> %7zu ids in %.3f s (%.1f MB/s)\n",
                json_string_value(json_object_get(c, "name")), len, v.n, dt, (double)len / 1e6 / (dt > 0 ? dt : 1e-9));
        assert_int_equal(v.n, json_integer_value(json_object_get(c, "n_ids")));
        assert_int_equal(fnv1a_ids(v.ids, v.n), (uint32_t)json_integer_value(json_object_get(c, "fnv1a")));
        json_t *head = json_object_get(c, "head");
        for (size_t k = 0; k < json_array_size(head); k++)
            assert_int_equal(v.ids[k], json_integer_value(json_array_get(head, k)));
        assert_true(dt < 10.0); /* near-linear: a quadratic path takes minutes on 1 MiB */
        char *back;
        size_t bl;
        assert_int_equal(ink_tokenizer_decode(g_tok, v.ids, v.n, 0, &back, &bl, NULL), INK_OK);
        assert_int_equal(bl, len);
        assert_memory_equal(back, text, len);
        free(back);
        ink_tokens_free(&v);
        free(text);
    }
}

/* Scaling check: 8x the input must not cost much more than 8x the time (+ noise floor). */
static void test_linear_scaling(void **state)
{
    (void)state;
    const char *reps[] = {"a", " ", "A", "\n ", "é", "<|"};
    for (size_t r = 0; r < sizeof reps / sizeof reps[0]; r++) {
        double t[2];
        size_t sizes[2] = {1 << 16, 1 << 19};
        for (int k = 0; k < 2; k++) {
            size_t rl = strlen(reps[r]), n = sizes[k] / rl * rl;
            char *b = malloc(n + 2);
            for (size_t i = 0; i < n; i += rl)
                memcpy(b + i, reps[r], rl);
            b[n] = 'x';
            ink_tokens v = {0};
            double t0 = now_s();
            assert_int_equal(ink_tokenizer_encode(g_tok, b, n + 1, INK_TOK_SPECIAL, &v, NULL), INK_OK);
            t[k] = now_s() - t0;
            assert_true(v.n > 0);
            ink_tokens_free(&v);
            free(b);
        }
        assert_true(t[1] < 24.0 * t[0] + 0.05);
    }
}

static void test_pieces_and_lookup(void **state)
{
    (void)state;
    size_t len;
    const char *p = ink_tokenizer_piece(g_tok, 24912, &len);
    assert_non_null(p);
    assert_int_equal(len, 5);
    assert_memory_equal(p, "hello", 5);
    p = ink_tokenizer_piece(g_tok, 2375, &len);
    assert_int_equal(len, 6);
    assert_memory_equal(p, " world", 6);
    p = ink_tokenizer_piece(g_tok, 188, &len); /* NUL byte token */
    assert_int_equal(len, 1);
    assert_int_equal(p[0], 0);
    p = ink_tokenizer_piece(g_tok, 200006, &len);
    assert_string_equal(p, "<|content_model_end_sampling|>");
    assert_null(ink_tokenizer_piece(g_tok, 200058, &len));
    assert_null(ink_tokenizer_piece(g_tok, -1, &len));
    assert_true(ink_tokenizer_is_special(g_tok, 200010));
    assert_false(ink_tokenizer_is_special(g_tok, 24912));
    assert_int_equal(ink_tokenizer_special_id(g_tok, "<|end_message|>"), 200010);
    assert_int_equal(ink_tokenizer_special_id(g_tok, "<|content_xml|>"), 200024);
    assert_int_equal(ink_tokenizer_special_id(g_tok, "<|unused|>"), 199998);
    assert_int_equal(ink_tokenizer_special_id(g_tok, "<|im_start|>"), -1);
    assert_int_equal(ink_tokenizer_special_id(g_tok, "hello"), -1);
    assert_int_equal(ink_tokenizer_token_id(g_tok, " world", 6), 2375);
    assert_int_equal(ink_tokenizer_token_id(g_tok, "<|endoftext|>", 13), 199999);
    assert_true(ink_tokenizer_max_piece_len(g_tok) >= 30);
}

static void test_invalid_utf8_and_nul(void **state)
{
    (void)state;
    const char s[] = "a\xff" "b\xe2\x82" "c\0d";
    size_t n = sizeof s - 1;
    ink_tokens v = {0};
    assert_int_equal(ink_tokenizer_encode(g_tok, s, n, 0, &v, NULL), INK_OK);
    /* a, 0xff byte, b, 0xe2 byte, 0x82 byte, c, NUL, d */
    assert_int_equal(v.n, 8);
    assert_int_equal(v.ids[2], 65);
    assert_int_equal(v.ids[6], 188);
    assert_int_equal(v.ids[0], 64);
    size_t l;
    const char *p = ink_tokenizer_piece(g_tok, v.ids[1], &l);
    assert_int_equal(l, 1);
    assert_int_equal((unsigned char)p[0], 0xff);
    char *back;
    size_t bl;
    assert_int_equal(ink_tokenizer_decode(g_tok, v.ids, v.n, 0, &back, &bl, NULL), INK_OK);
    assert_int_equal(bl, n);
    assert_memory_equal(back, s, n);
    free(back);
    /* lossy: one U+FFFD per maximal invalid subpart (0xff; 0xe2 0x82) */
    assert_int_equal(ink_tokenizer_decode(g_tok, v.ids, v.n, INK_DECODE_LOSSY, &back, &bl, NULL), INK_OK);
    const char lossy[] = "a\xef\xbf\xbd" "b\xef\xbf\xbd" "c\0d";
    assert_int_equal(bl, sizeof lossy - 1);
    assert_memory_equal(back, lossy, bl);
    free(back);
    ink_tokens_free(&v);
}

static int valid_utf8(const char *s, size_t n)
{
    return ink_utf8_valid_prefix((const unsigned char *)s, n) == n;
}

static void test_streaming_decode(void **state)
{
    (void)state;
    const char *text = "😀👩🏽\u200d💻🚀\u200d✅️ é中";
    ink_tokens v = {0};
    assert_int_equal(ink_tokenizer_encode(g_tok, text, strlen(text), 0, &v, NULL), INK_OK);
    assert_true(v.n > 13);
    ink_detok *d = NULL;
    assert_int_equal(ink_detok_new(&d, g_tok, 0, NULL), INK_OK);
    char out[256];
    size_t o = 0;
    int held = 0;
    for (size_t i = 0; i < v.n; i++) {
        const char *chunk;
        size_t cl;
        assert_int_equal(ink_detok_feed(d, v.ids[i], &chunk, &cl, NULL), INK_OK);
        assert_true(valid_utf8(chunk, cl));
        if (ink_detok_pending(d))
            held = 1;
        memcpy(out + o, chunk, cl);
        o += cl;
    }
    assert_true(held); /* some emoji span several tokens */
    const char *chunk;
    size_t cl;
    ink_detok_flush(d, &chunk, &cl);
    assert_int_equal(cl, 0);
    assert_int_equal(o, strlen(text));
    assert_memory_equal(out, text, o);

    /* a lone continuation byte token: U+FFFD at once */
    int32_t cont = ink_tokenizer_token_id(g_tok, "\x80", 1);
    assert_true(cont >= 0);
    assert_int_equal(ink_detok_feed(d, cont, &chunk, &cl, NULL), INK_OK);
    assert_int_equal(cl, 3);
    assert_memory_equal(chunk, "\xef\xbf\xbd", 3);
    /* a lead byte: held; then an ASCII token: U+FFFD + the ASCII */
    int32_t lead = ink_tokenizer_token_id(g_tok, "\xf0", 1);
    assert_int_equal(ink_detok_feed(d, lead, &chunk, &cl, NULL), INK_OK);
    assert_int_equal(cl, 0);
    assert_int_equal(ink_detok_pending(d), 1);
    assert_int_equal(ink_detok_feed(d, 64, &chunk, &cl, NULL), INK_OK);
    assert_int_equal(cl, 4);
    assert_memory_equal(chunk, "\xef\xbf\xbd" "a", 4);
    /* lead byte then flush: U+FFFD */
    assert_int_equal(ink_detok_feed(d, lead, &chunk, &cl, NULL), INK_OK);
    ink_detok_flush(d, &chunk, &cl);
    assert_int_equal(cl, 3);
    assert_int_equal(ink_detok_pending(d), 0);
    /* bad id */
    ink_err err = {0};
    assert_int_equal(ink_detok_feed(d, 300000, &chunk, &cl, &err), INK_E_INVAL);
    assert_non_null(strstr(err.msg, "300000"));
    ink_detok_free(d);

    /* skip-special streaming */
    assert_int_equal(ink_detok_new(&d, g_tok, INK_DECODE_SKIP_SPECIAL, NULL), INK_OK);
    assert_int_equal(ink_detok_feed(d, 200004, &chunk, &cl, NULL), INK_OK);
    assert_int_equal(cl, 0);
    assert_int_equal(ink_detok_feed(d, 24912, &chunk, &cl, NULL), INK_OK);
    assert_int_equal(cl, 5);
    ink_detok_free(d);
    ink_detok_free(NULL);
    ink_tokens_free(&v);
}

static void test_decode_flags_and_errors(void **state)
{
    (void)state;
    int32_t ids[] = {200004, 24912, 2375, 200010};
    char *s;
    size_t n;
    assert_int_equal(ink_tokenizer_decode(g_tok, ids, 4, 0, &s, &n, NULL), INK_OK);
    assert_string_equal(s, "<|content_text|>hello world<|end_message|>");
    free(s);
    assert_int_equal(ink_tokenizer_decode(g_tok, ids, 4, INK_DECODE_SKIP_SPECIAL, &s, &n, NULL), INK_OK);
    assert_string_equal(s, "hello world");
    free(s);
    int32_t bad[] = {1, 200058};
    ink_err err = {0};
    s = (char *)0x1;
    assert_int_equal(ink_tokenizer_decode(g_tok, bad, 2, 0, &s, &n, &err), INK_E_INVAL);
    assert_ptr_equal(s, (char *)0x1); /* *out untouched on failure */
    assert_non_null(strstr(err.msg, "200058"));
}

static void test_encode_buf(void **state)
{
    (void)state;
    int32_t ids[4];
    size_t need = 0;
    ink_err err = {0};
    assert_int_equal(ink_tokenizer_encode_buf(g_tok, "hello world", 11, 0, ids, 4, &need, &err), INK_OK);
    assert_int_equal(need, 2);
    assert_int_equal(ids[0], 24912);
    assert_int_equal(ids[1], 2375);
    const char *s = "x<|endoftext|> y";
    assert_int_equal(ink_tokenizer_encode_buf(g_tok, s, strlen(s), INK_TOK_SPECIAL, ids, 4, &need, &err),
                     INK_OK);
    assert_int_equal(need, 3);
    assert_int_equal(ids[1], 199999);
    assert_int_equal(ink_tokenizer_encode_buf(g_tok, s, strlen(s), 0, ids, 4, &need, &err), INK_E_INVAL);
    assert_int_equal(need, 9);
    assert_int_equal(ids[0], 87);
    assert_non_null(strstr(err.msg, "need 9"));
    /* appending keeps earlier ids */
    ink_tokens v = {0};
    assert_int_equal(ink_tokens_push(&v, 7, NULL), INK_OK);
    assert_int_equal(ink_tokenizer_encode(g_tok, "hello", 5, 0, &v, NULL), INK_OK);
    assert_int_equal(v.n, 2);
    assert_int_equal(v.ids[0], 7);
    assert_int_equal(v.ids[1], 24912);
    assert_int_equal(ink_tokenizer_encode(g_tok, "", 0, 0, &v, NULL), INK_OK);
    assert_int_equal(v.n, 2);
    ink_tokens_free(&v);
    ink_tokens_free(NULL);
    ink_tokenizer_free(NULL);
}

typedef struct thr_arg {
    size_t start, step, bad;
} thr_arg;

static void *thr_main(void *p)
{
    thr_arg *a = p;
    json_t *cases = json_object_get(g_vec, "cases");
    for (size_t i = a->start; i < json_array_size(cases); i += a->step) {
        json_t *c = json_array_get(cases, i);
        if (json_is_true(json_object_get(c, "unicode_gap")))
            continue;
        json_t *text = json_object_get(c, "text");
        ink_tokens v = {0};
        if (ink_tokenizer_encode(g_tok, json_string_value(text), json_string_length(text), INK_TOK_SPECIAL,
                                 &v, NULL) || !ids_equal(&v, json_object_get(c, "special_ids")))
            a->bad++;
        ink_tokens_free(&v);
    }
    return NULL;
}

static void test_thread_safe_encode(void **state)
{
    (void)state;
    pthread_t th[4];
    thr_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thr_arg){(size_t)i, 4, 0};
        assert_int_equal(pthread_create(&th[i], NULL, thr_main, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].bad, 0);
    }
}

/* ---- small synthetic tokenizers: formats and malformed inputs -------------------------------- */

static const char *byte_level(unsigned b, char out[3])
{
    unsigned cp;
    int self = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    if (self)
        cp = b;
    else {
        unsigned n = 0;
        for (unsigned k = 0; k < b; k++)
            if (!((k >= 0x21 && k <= 0x7e) || (k >= 0xa1 && k <= 0xac) || k >= 0xae))
                n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        out[2] = 0;
    }
    return out;
}

/* 256 byte tokens (ids 0..255 by byte value), then "ab"=256, "abc"=257, "Ġa"=258; merges
 * a+b, ab+c? no: only a+b and Ġ+a so "abc" is reachable only whole (ignore_merges). */
static json_t *tiny(int pairs)
{
    json_t *root = json_object(), *model = json_object(), *vocab = json_object();
    char b[3];
    for (unsigned i = 0; i < 256; i++)
        json_object_set_new(vocab, byte_level(i, b), json_integer(i));
    json_object_set_new(vocab, "ab", json_integer(256));
    json_object_set_new(vocab, "abc", json_integer(257));
    json_object_set_new(vocab, "\xc4\xa0" "a", json_integer(258));
    json_t *merges = pairs ? json_pack("[[ss][ss]]", "a", "b", "\xc4\xa0", "a")
                           : json_pack("[ss]", "a b", "\xc4\xa0 a");
    json_object_set_new(model, "type", json_string("BPE"));
    json_object_set_new(model, "ignore_merges", json_true());
    json_object_set_new(model, "vocab", vocab);
    json_object_set_new(model, "merges", merges);
    json_object_set_new(root, "model", model);
    json_object_set_new(root, "normalizer", json_null());
    json_object_set_new(root, "pre_tokenizer",
                        json_pack("{s:s,s:[{s:s,s:{s:s},s:s,s:b},{s:s,s:b,s:b}]}", "type", "Sequence",
                                  "pretokenizers", "type", "Split", "pattern", "Regex",
                                  " ?\\p{L}+|\\s+(?!\\S)|\\s+|[^\\s\\p{L}]+", "behavior", "Isolated",
                                  "invert", 0, "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 0));
    json_object_set_new(root, "decoder", json_pack("{s:s}", "type", "ByteLevel"));
    json_object_set_new(root, "added_tokens",
                        json_pack("[{s:i,s:s,s:b},{s:i,s:s,s:b}]", "id", 259, "content", "<|x|>", "special",
                                  1, "id", 260, "content", "@@", "special", 0));
    return root;
}

static int open_json(json_t *root, ink_tokenizer **t, ink_err *err)
{
    char *s = json_dumps(root, 0);
    int rc = ink_tokenizer_open_mem(t, s, strlen(s), "tiny/tokenizer.json", err);
    free(s);
    json_decref(root);
    return rc;
}

static void enc_expect(ink_tokenizer *t, const char *s, int flags, const int32_t *want, size_t n)
{
    ink_tokens v = {0};
    assert_int_equal(ink_tokenizer_encode(t, s, strlen(s), flags, &v, NULL), INK_OK);
    assert_int_equal(v.n, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(v.ids[i], want[i]);
    ink_tokens_free(&v);
}

static void test_tiny_formats(void **state)
{
    (void)state;
    for (int pairs = 0; pairs < 2; pairs++) {
        ink_tokenizer *t = NULL;
        ink_err err = {0};
        assert_int_equal(open_json(tiny(pairs), &t, &err), INK_OK);
        assert_int_equal(ink_tokenizer_n_vocab(t), 261);
        assert_int_equal(ink_tokenizer_n_merges(t), 2);
        enc_expect(t, "abc", 0, (int32_t[]){257}, 1);          /* ignore_merges: whole piece */
        enc_expect(t, "abd", 0, (int32_t[]){256, 'd'}, 2);     /* merges */
        enc_expect(t, " ab", 0, (int32_t[]){' ', 256}, 2);     /* a+b has rank 0, Ġ+a rank 1 */
        enc_expect(t, "x<|x|>y", INK_TOK_SPECIAL, (int32_t[]){'x', 259, 'y'}, 3);
        enc_expect(t, "x<|x|>y", 0, (int32_t[]){'x', '<', '|', 'x', '|', '>', 'y'}, 7);
        enc_expect(t, "x@@y", 0, (int32_t[]){'x', 260, 'y'}, 3); /* non-special: always matched */
        assert_false(ink_tokenizer_is_special(t, 260));
        ink_tokenizer_free(t);
    }
    /* ignore_merges false: "abc" goes through the merges */
    json_t *root = tiny(1);
    json_object_set_new(json_object_get(root, "model"), "ignore_merges", json_false());
    ink_tokenizer *t = NULL;
    assert_int_equal(open_json(root, &t, NULL), INK_OK);
    enc_expect(t, "abc", 0, (int32_t[]){256, 'c'}, 2);
    ink_tokenizer_free(t);
}

static void test_tiny_merge_order(void **state)
{
    (void)state;
    /* " ab": pieces " ab" (one piece); merges a+b (rank 0) then Ġ+a (rank 1): a+b wins -> Ġ, ab */
    ink_tokenizer *t = NULL;
    json_t *root = tiny(1);
    json_t *merges = json_pack("[[ss][ss]]", "\xc4\xa0", "a", "a", "b");
    json_object_set_new(json_object_get(root, "model"), "merges", merges);
    assert_int_equal(open_json(root, &t, NULL), INK_OK);
    enc_expect(t, " ab", 0, (int32_t[]){258, 'b'}, 2);
    enc_expect(t, "aab", 0, (int32_t[]){'a', 256}, 2);
    ink_tokenizer_free(t);
    root = tiny(1);
    assert_int_equal(open_json(root, &t, NULL), INK_OK);
    enc_expect(t, " ab", 0, (int32_t[]){' ', 256}, 2); /* a+b first: ' ' byte + ab */
    ink_tokenizer_free(t);
}

typedef void (*mutator)(json_t *root);
static void m_bad_pretok(json_t *r) { json_object_set_new(r, "pre_tokenizer", json_pack("{s:s}", "type", "Whitespace")); }
static void m_null_pretok(json_t *r) { json_object_set_new(r, "pre_tokenizer", json_null()); }
static void m_normalizer(json_t *r) { json_object_set_new(r, "normalizer", json_pack("{s:s}", "type", "NFC")); }
static void m_no_model(json_t *r) { json_object_del(r, "model"); }
static void m_unigram(json_t *r) { json_object_set_new(json_object_get(r, "model"), "type", json_string("Unigram")); }
static void m_decoder(json_t *r) { json_object_set_new(r, "decoder", json_pack("{s:s}", "type", "WordPiece")); }
static void m_no_decoder(json_t *r) { json_object_del(r, "decoder"); }
static void m_postproc(json_t *r) { json_object_set_new(r, "post_processor", json_pack("{s:s}", "type", "TemplateProcessing")); }
static void m_merge_unknown(json_t *r) { json_object_set_new(json_object_get(r, "model"), "merges", json_pack("[[ss]]", "q", "zz")); }
static void m_merge_notvocab(json_t *r) { json_object_set_new(json_object_get(r, "model"), "merges", json_pack("[[ss]]", "x", "y")); }
static void m_merge_number(json_t *r) { json_object_set_new(json_object_get(r, "model"), "merges", json_pack("[i]", 5)); }
static void m_merge_nospace(json_t *r) { json_object_set_new(json_object_get(r, "model"), "merges", json_pack("[s]", "ab")); }
static void m_merges_missing(json_t *r) { json_object_del(json_object_get(r, "model"), "merges"); }
static void m_vocab_str(json_t *r) { json_object_set_new(json_object_get(json_object_get(r, "model"), "vocab"), "zz", json_string("7")); }
static void m_vocab_dup(json_t *r) { json_object_set_new(json_object_get(json_object_get(r, "model"), "vocab"), "zz", json_integer(3)); }
static void m_vocab_alpha(json_t *r) { json_object_set_new(json_object_get(json_object_get(r, "model"), "vocab"), "a b", json_integer(300)); }
static void m_byte_fallback(json_t *r) { json_object_set_new(json_object_get(r, "model"), "byte_fallback", json_true()); }
static void m_regex_bad(json_t *r)
{
    json_t *sp = json_array_get(json_object_get(json_object_get(r, "pre_tokenizer"), "pretokenizers"), 0);
    json_object_set_new(json_object_get(sp, "pattern"), "Regex", json_string("(\\p{L}+"));
}
static void m_split_string(json_t *r)
{
    json_t *sp = json_array_get(json_object_get(json_object_get(r, "pre_tokenizer"), "pretokenizers"), 0);
    json_object_set_new(sp, "pattern", json_pack("{s:s}", "String", " "));
}
static void m_added_lstrip(json_t *r) { json_object_set_new(json_array_get(json_object_get(r, "added_tokens"), 0), "lstrip", json_true()); }
static void m_added_noid(json_t *r) { json_object_del(json_array_get(json_object_get(r, "added_tokens"), 0), "id"); }
static void m_missing_byte(json_t *r) { json_object_del(json_object_get(json_object_get(r, "model"), "vocab"), "a"); json_object_set_new(json_object_get(r, "model"), "merges", json_array()); }

static void test_malformed(void **state)
{
    (void)state;
    struct { mutator m; int code; const char *needle; } cases[] = {
        {m_bad_pretok, INK_E_UNSUPPORTED, "pre_tokenizer: type 'Whitespace'"},
        {m_null_pretok, INK_E_UNSUPPORTED, "pre_tokenizer: null"},
        {m_normalizer, INK_E_UNSUPPORTED, "normalizer: type 'NFC'"},
        {m_no_model, INK_E_FORMAT, "model: missing"},
        {m_unigram, INK_E_UNSUPPORTED, "model.type: 'Unigram'"},
        {m_decoder, INK_E_UNSUPPORTED, "decoder: type 'WordPiece'"},
        {m_no_decoder, INK_E_UNSUPPORTED, "decoder: type 'null'"},
        {m_postproc, INK_E_UNSUPPORTED, "post_processor: type 'TemplateProcessing'"},
        {m_merge_unknown, INK_E_FORMAT, "model.merges[0]"},
        {m_merge_notvocab, INK_E_FORMAT, "merged token 'xy'"},
        {m_merge_number, INK_E_FORMAT, "model.merges[0]: expected"},
        {m_merge_nospace, INK_E_FORMAT, "not of the form"},
        {m_merges_missing, INK_E_FORMAT, "model.merges: missing"},
        {m_vocab_str, INK_E_FORMAT, "model.vocab['zz']"},
        {m_vocab_dup, INK_E_FORMAT, "id 3 is used twice"},
        {m_vocab_alpha, INK_E_FORMAT, "byte-level alphabet"},
        {m_byte_fallback, INK_E_UNSUPPORTED, "byte_fallback"},
        {m_regex_bad, INK_E_FORMAT, "does not compile"},
        {m_split_string, INK_E_UNSUPPORTED, "pattern: only"},
        {m_added_lstrip, INK_E_UNSUPPORTED, "added_tokens[0].lstrip"},
        {m_added_noid, INK_E_FORMAT, "added_tokens[0]"},
        {m_missing_byte, INK_E_UNSUPPORTED, "no token for byte 0x61"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *root = tiny(1);
        cases[i].m(root);
        ink_tokenizer *t = (ink_tokenizer *)0x1;
        ink_err err = {0};
        int rc = open_json(root, &t, &err);
        if (rc != cases[i].code || !strstr(err.msg, cases[i].needle))
            fprintf(stderr, "case %zu: rc %d msg '%s'\n", i, rc, err.msg);
        assert_int_equal(rc, cases[i].code);
        assert_non_null(strstr(err.msg, cases[i].needle));
        assert_non_null(strstr(err.msg, "tiny/tokenizer.json"));
        assert_ptr_equal(t, (ink_tokenizer *)0x1);
    }
}

static void test_bad_files(void **state)
{
    (void)state;
    ink_tokenizer *t = NULL;
    ink_err err = {0};
    /* bad JSON */
    assert_int_equal(ink_tokenizer_open_mem(&t, "{\"model\": ", 10, "bad.json", &err), INK_E_FORMAT);
    assert_non_null(strstr(err.msg, "bad.json: invalid JSON"));
    assert_null(t);
    memset(&err, 0, sizeof err);
    assert_int_equal(ink_tokenizer_open_mem(&t, "[1,2]", 5, "arr.json", &err), INK_E_FORMAT);
    assert_non_null(strstr(err.msg, "not a JSON object"));
    /* missing directory */
    memset(&err, 0, sizeof err);
    assert_int_equal(ink_tokenizer_open(&t, "tests/tmp/no-such-dir", &err), INK_E_IO);
    assert_non_null(strstr(err.msg, "no-such-dir/tokenizer.json"));
    /* first error wins */
    assert_int_equal(ink_tokenizer_open_mem(&t, "x", 1, "other.json", &err), INK_E_FORMAT);
    assert_non_null(strstr(err.msg, "no-such-dir"));
    /* truncated real file */
    FILE *f = fopen(TMP "/tokenizer.json", "rb");
    assert_non_null(f);
    size_t half = 3000000;
    char *buf = malloc(half);
    assert_int_equal(fread(buf, 1, half, f), half);
    fclose(f);
    memset(&err, 0, sizeof err);
    assert_int_equal(ink_tokenizer_open_mem(&t, buf, half, "trunc/tokenizer.json", &err), INK_E_FORMAT);
    assert_non_null(strstr(err.msg, "trunc/tokenizer.json: invalid JSON"));
    free(buf);
    /* bad tokenizer_config.json next to a good tokenizer.json */
    mkdir("tests/tmp/tokbadcfg", 0755);
    assert_int_equal(system("cp " TMP "/tokenizer.json tests/tmp/tokbadcfg/ && printf '{oops' > "
                            "tests/tmp/tokbadcfg/tokenizer_config.json"), 0);
    memset(&err, 0, sizeof err);
    assert_int_equal(ink_tokenizer_open(&t, "tests/tmp/tokbadcfg", &err), INK_E_FORMAT);
    assert_non_null(strstr(err.msg, "tokenizer_config.json: invalid JSON"));
    assert_null(t);
    /* no config at all: fine */
    assert_int_equal(system("rm tests/tmp/tokbadcfg/tokenizer_config.json"), 0);
    assert_int_equal(ink_tokenizer_open(&t, "tests/tmp/tokbadcfg", NULL), INK_OK);
    assert_int_equal(ink_tokenizer_model_max_length(t), 0);
    ink_tokenizer_free(t);
    assert_int_equal(system("rm -r tests/tmp/tokbadcfg"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load),
        cmocka_unit_test(test_section10_cases),
        cmocka_unit_test(test_stress_set),
        cmocka_unit_test(test_known_diff_unicode_gap),
        cmocka_unit_test(test_long_inputs),
        cmocka_unit_test(test_linear_scaling),
        cmocka_unit_test(test_pieces_and_lookup),
        cmocka_unit_test(test_invalid_utf8_and_nul),
        cmocka_unit_test(test_streaming_decode),
        cmocka_unit_test(test_decode_flags_and_errors),
        cmocka_unit_test(test_encode_buf),
        cmocka_unit_test(test_thread_safe_encode),
        cmocka_unit_test(test_tiny_formats),
        cmocka_unit_test(test_tiny_merge_order),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
