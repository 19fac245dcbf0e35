/* test_quantize.c — `inkling quantize` / ink_quantize (issue 15): the output equals the test suite's
 * own MLX quantization (tests/support/ckpt.c, written independently from formats.md §4) of the same
 * weights byte for byte, tensor by tensor and in its config's quantization block, for every width and
 * group, with overrides; BF16 sources; transformers names; sharded output; presets (bits per module
 * checked against mlx-lm's rule computed here); NVFP4 against ckpt.c's NVFP4 writer; the outputs load,
 * evaluate, and speculative greedy decoding with the quantized MTP head equals plain decoding; bad
 * input is refused with a message naming what is wrong. Also the quantizer's scalar pieces against
 * hand-checked values (E4M3 / E2M1 rounding, formats.md §4.3 packing vectors). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/dtype.h"
#include "inkling.h"
#include "load/safetensors.h"
#include "quant/quant.h"
#include "support/ckpt.h"
#include "support/util.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a directory's tensors, by name ------------------------------------------------------- */

typedef struct dirset {
    ink_st_file f[64];
    int n;
} dirset;

static void ds_open(dirset *d, const char *dir)
{
    memset(d, 0, sizeof *d);
    DIR *dp = opendir(dir);
    assert_non_null(dp);
    struct dirent *e;
    while ((e = readdir(dp))) {
        size_t l = strlen(e->d_name);
        if (e->d_name[0] == '.' || l < 12 || strcmp(e->d_name + l - 12, ".safetensors")) continue;
        assert_true(d->n < 64);
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        ink_err er = {0};
        if (ink_st_open(&d->f[d->n], p, &er) || ink_st_map(&d->f[d->n], &er)) fail_msg("%s: %s", p, er.msg);
        d->n++;
    }
    closedir(dp);
}

static void ds_close(dirset *d)
{
    for (int i = 0; i < d->n; i++) ink_st_close(&d->f[i]);
}

static const ink_st_tensor *ds_find(const dirset *d, const char *name)
{
    for (int i = 0; i < d->n; i++) {
        const ink_st_tensor *t = ink_st_find(&d->f[i], name);
        if (t) return t;
    }
    return NULL;
}

static int ds_count(const dirset *d)
{
    int n = 0;
    for (int i = 0; i < d->n; i++) n += d->f[i].n;
    return n;
}

static int64_t numel(const ink_st_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* Every tensor of `ref` is in `out` with the same dtype, element count and bytes (and shape, but
 * for convs, which MLX stores as [C, K, 1]); both hold the same number of tensors. Returns how many
 * were quantized (had .scales / .scale). */
static int same_tensors(const char *ref, const char *out)
{
    dirset a, b;
    ds_open(&a, ref), ds_open(&b, out);
    assert_int_equal(ds_count(&a), ds_count(&b));
    int nq = 0;
    for (int i = 0; i < a.n; i++)
        for (int j = 0; j < a.f[i].n; j++) {
            const ink_st_tensor *x = &a.f[i].t[j], *y = ds_find(&b, x->name);
            if (!y) fail_msg("%s: tensor %s missing in %s", ref, x->name, out);
            if (x->dtype != y->dtype) fail_msg("%s: dtype %s vs %s", x->name, ink_dtype_name(x->dtype), ink_dtype_name(y->dtype));
            assert_int_equal(numel(x), numel(y));
            if (!strstr(x->name, "sconv") || strstr(x->name, "model.mtp.")) { /* the head keeps its layout */
                assert_int_equal(x->ndim, y->ndim);
                assert_memory_equal(x->shape, y->shape, sizeof(int64_t) * (size_t)x->ndim);
            } else {
                assert_int_equal(y->ndim, 3);
                assert_int_equal(y->shape[2], 1); /* MLX conv layout [C, K, 1] */
            }
            if (memcmp(x->data, y->data, x->end - x->begin)) fail_msg("%s: bytes differ", x->name);
            size_t l = strlen(x->name);
            nq += l > 7 && (!strcmp(x->name + l - 7, ".scales") || !strcmp(x->name + l - 6, ".scale"));
        }
    ds_close(&a), ds_close(&b);
    return nq;
}

static json_t *qblock(const char *dir)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/config.json", dir);
    json_t *c = json_load_file(p, 0, NULL);
    assert_non_null(c);
    json_t *q = json_deep_copy(json_object_get(c, "quantization"));
    assert_true(json_equal(q, json_object_get(c, "quantization_config")));
    json_decref(c);
    return q;
}

static void quantize_ok(const char *src, const char *dst, const ink_quant_opts *o)
{
    ink_err e = {0};
    if (ink_quantize(src, dst, o, &e)) fail_msg("quantize %s -> %s: %s", src, dst, e.msg);
}

/* The spec of the tests: widths that groups of 32, 64 and 128 divide; an MTP head in its own file. */
static void base_spec(tiny_spec *sp)
{
    tiny_default(sp);
    sp->hidden = 128, sp->dense_inter = 128, sp->expert_inter = 64;
    sp->mtp_depth = 2, sp->n_mtp_local = 1, sp->mtp_local[0] = 1, sp->mtp_file = 1;
}

static void write_src(const tiny_spec *sp, char *dir, size_t n, const char *tag)
{
    assert_int_equal(tu_tmpdir(dir, n, tag), 0);
    assert_int_equal(tiny_write(dir, sp), 0);
}

/* ---- byte for byte against the test suite's MLX quantization ------------------------------ */

static void test_affine_equals_reference(void **state)
{
    (void)state;
    static const int cases[][2] = {{4, 64}, {2, 32}, {3, 64}, {5, 32}, {6, 128}, {8, 64}};
    tiny_spec sp;
    base_spec(&sp);
    char src[256];
    write_src(&sp, src, sizeof src, "qsrc");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tiny_spec rs = sp;
        rs.naming = TINY_NAMES_PRESPLIT, rs.qbits = cases[c][0], rs.qgroup = cases[c][1], rs.qembed = 1;
        char ref[256], out[256];
        write_src(&rs, ref, sizeof ref, "qref");
        assert_int_equal(tu_tmpdir(out, sizeof out, "qout"), 0);
        ink_quant_opts o = {.bits = cases[c][0], .group = cases[c][1], .force = 1, .n_threads = 1 + (int)c % 3};
        quantize_ok(src, out, &o);
        int nq = same_tensors(ref, out);
        assert_true(nq > 20);
        json_t *a = qblock(ref), *b = qblock(out);
        assert_true(json_equal(a, b));
        json_decref(a), json_decref(b);
    }
}

/* --override: 8 bits for the routed experts, float for the shared experts' down projection (the
 * reference's q8_match / qskip_match), and the config lists exactly those modules. */
static void test_overrides_equal_reference(void **state)
{
    (void)state;
    tiny_spec sp;
    base_spec(&sp);
    char src[256], ref[256], out[256];
    write_src(&sp, src, sizeof src, "qsrc");
    tiny_spec rs = sp;
    rs.naming = TINY_NAMES_PRESPLIT, rs.qbits = 4, rs.qgroup = 64, rs.qembed = 1;
    rs.q8_match = "mlp.experts.", rs.qskip_match = "shared_experts.down_proj";
    write_src(&rs, ref, sizeof ref, "qref");
    ink_quant_rule rules[] = {{"*.mlp.experts.*", 8, 0}, {"*shared_experts.down_proj", 0, 0}};
    ink_quant_opts o = {.bits = 4, .group = 64, .rules = rules, .n_rules = 2};
    assert_int_equal(tu_tmpdir(out, sizeof out, "qout"), 0);
    quantize_ok(src, out, &o);
    same_tensors(ref, out);
    json_t *a = qblock(ref), *b = qblock(out);
    if (!json_equal(a, b)) {
        char *x = json_dumps(a, JSON_SORT_KEYS), *y = json_dumps(b, JSON_SORT_KEYS);
        fail_msg("quantization blocks differ:\n%s\n%s", x, y);
    }
    json_decref(a), json_decref(b);
}

/* A BF16 source: quantized tensors equal the reference's quantization of the bf16-rounded values;
 * the rest stay BF16 with the same values. */
static void test_bf16_source(void **state)
{
    (void)state;
    tiny_spec sp;
    base_spec(&sp);
    sp.bf16 = 1;
    char src[256], ref[256], out[256];
    write_src(&sp, src, sizeof src, "qsrc");
    tiny_spec rs = sp;
    rs.bf16 = 0, rs.bf16_values = 1;
    rs.naming = TINY_NAMES_PRESPLIT, rs.qbits = 4, rs.qgroup = 64, rs.qembed = 1;
    write_src(&rs, ref, sizeof ref, "qref");
    ink_quant_opts o = {.bits = 4};
    assert_int_equal(tu_tmpdir(out, sizeof out, "qout"), 0);
    quantize_ok(src, out, &o);
    dirset a, b;
    ds_open(&a, ref), ds_open(&b, out);
    assert_int_equal(ds_count(&a), ds_count(&b));
    int nq = 0;
    for (int i = 0; i < a.n; i++)
        for (int j = 0; j < a.f[i].n; j++) {
            const ink_st_tensor *x = &a.f[i].t[j], *y = ds_find(&b, x->name);
            assert_non_null(y);
            assert_int_equal(numel(x), numel(y));
            if (x->dtype != INK_DT_F32) { /* quantized: U32 codes, BF16 scales / biases */
                assert_int_equal(x->dtype, y->dtype);
                assert_memory_equal(x->data, y->data, x->end - x->begin);
                nq++;
                continue;
            }
            if (y->dtype == INK_DT_F32) { /* kept F32 by the writer (router bias, global scales) */
                assert_memory_equal(x->data, y->data, x->end - x->begin);
                continue;
            }
            assert_int_equal(y->dtype, INK_DT_BF16);
            for (int64_t k = 0; k < numel(x); k++)
                if (ink_ld_f32(x->data, (size_t)k) != ink_bf16_to_f32(ink_ld_u16(y->data, (size_t)k)))
                    fail_msg("%s[%lld] differs", x->name, (long long)k);
        }
    assert_true(nq > 60);
    ds_close(&a), ds_close(&b);
}

/* ---- the outputs load and run ------------------------------------------------------------- */

static float *logits_of(const char *dir, const int32_t *ids, int T, int *V)
{
    ink_err e = {0};
    ink_model *m = NULL;
    ink_model_opts mo = {.n_threads = 1, .activations = INK_ACT_F32};
    if (ink_model_open(&m, dir, &mo, &e)) fail_msg("open %s: %s", dir, e.msg);
    *V = ink_model_n_vocab(m);
    float *lg = malloc((size_t)T * (size_t)*V * sizeof *lg);
    assert_non_null(lg);
    ink_session *s;
    assert_int_equal(ink_session_create(&s, m, 128, &e), 0);
    ink_eval_out o = {.logits = lg, .all_logits = 1};
    if (ink_session_eval(s, ids, T, &o, &e)) fail_msg("eval %s: %s", dir, e.msg);
    ink_session_free(s);
    ink_model_free(m);
    return lg;
}

static void ids_of(int32_t *ids, int T)
{
    for (int i = 0; i < T; i++) ids[i] = (int32_t)((i * 37 + 5) % 120);
}

/* The directory opens as a model and evaluates a few rows. */
static void evaluates(const char *dir)
{
    int32_t ids[8];
    ids_of(ids, 8);
    int V;
    free(logits_of(dir, ids, 8, &V));
}

/* Transformers names (half-split gate_up_proj, q_proj, ...) and sharded output: the same logical
 * weights give bitwise the same logits as the single-file quantization of the release names. */
static void test_hf_names_and_shards(void **state)
{
    (void)state;
    tiny_spec sp;
    base_spec(&sp);
    sp.mtp_depth = 0, sp.n_mtp_local = 0, sp.mtp_file = 0;
    char src[256], hf[256], o1[256], o2[256];
    write_src(&sp, src, sizeof src, "qsrc");
    tiny_spec hs = sp;
    hs.naming = TINY_NAMES_HF;
    write_src(&hs, hf, sizeof hf, "qhf");
    ink_quant_opts o = {.bits = 4};
    assert_int_equal(tu_tmpdir(o1, sizeof o1, "qout"), 0);
    quantize_ok(src, o1, &o);
    o.shard_bytes = 400000; /* several shards and an index */
    o.force = 1;
    assert_int_equal(tu_tmpdir(o2, sizeof o2, "qout"), 0);
    quantize_ok(hf, o2, &o);
    char p[1024];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", o2);
    json_t *ix = json_load_file(p, 0, NULL);
    assert_non_null(ix);
    assert_true(json_object_size(json_object_get(ix, "weight_map")) > 100);
    json_decref(ix);
    int32_t ids[24];
    ids_of(ids, 24);
    int V1, V2;
    float *a = logits_of(o1, ids, 24, &V1), *b = logits_of(o2, ids, 24, &V2);
    assert_int_equal(V1, V2);
    assert_memory_equal(a, b, (size_t)24 * (size_t)V1 * sizeof *a);
    free(a), free(b);
}

/* The quantized MTP head drafts, and speculative greedy output equals plain output. */
static void test_mtp_head_quantized(void **state)
{
    (void)state;
    tiny_spec sp;
    base_spec(&sp);
    sp.mtp_depth = 3;
    char src[256], out[256];
    write_src(&sp, src, sizeof src, "qsrc");
    ink_quant_opts o = {.bits = 4};
    assert_int_equal(tu_tmpdir(out, sizeof out, "qout"), 0);
    quantize_ok(src, out, &o);
    dirset d;
    ds_open(&d, out);
    int mtp_q = 0;
    for (int i = 0; i < d.n; i++)
        if (strstr(d.f[i].path, "mtp.safetensors"))
            for (int j = 0; j < d.f[i].n; j++) mtp_q += strstr(d.f[i].t[j].name, ".scales") != NULL;
    ds_close(&d);
    assert_true(mtp_q > 5);
    ink_err e = {0};
    ink_model *m;
    ink_model_opts mo = {.n_threads = 1};
    if (ink_model_open(&m, out, &mo, &e)) fail_msg("open: %s", e.msg);
    ink_drafter *dr;
    if (ink_drafter_open(&dr, m, out, &e)) fail_msg("drafter: %s", e.msg);
    ink_session *s;
    assert_int_equal(ink_session_create(&s, m, 512, &e), 0);
    int32_t p[20], plain[40], spec[40];
    ids_of(p, 20);
    int np = 0, ns = 0;
    ink_gen_opts g = {.max_tokens = 40, .eos = -1};
    assert_int_equal(ink_generate(s, p, 20, &g, plain, 40, &np, NULL, &e), 0);
    g.drafter = dr, g.block_size = 3;
    ink_gen_stats st;
    assert_int_equal(ink_generate(s, p, 20, &g, spec, 40, &ns, &st, &e), 0);
    assert_int_equal(np, 40);
    assert_int_equal(ns, 40);
    assert_memory_equal(plain, spec, sizeof plain);
    assert_true(st.drafted > 0);
    ink_session_free(s);
    ink_drafter_free(dr);
    ink_model_free(m);
}

/* mixed_3_6: mlx-lm's rule, recomputed here from the layer index, decides every module's bits. */
static void test_preset_bits(void **state)
{
    (void)state;
    tiny_spec sp;
    base_spec(&sp);
    sp.n_layer = 16, sp.n_local = 12;
    for (int i = 0; i < 12; i++) sp.local[i] = i;
    char src[256], out[256];
    write_src(&sp, src, sizeof src, "qsrc");
    ink_quant_opts o = {.preset = "mixed_3_6"};
    assert_int_equal(tu_tmpdir(out, sizeof out, "qout"), 0);
    quantize_ok(src, out, &o);
    dirset d;
    ds_open(&d, out);
    int hi_seen = 0, lo_seen = 0;
    for (int i = 0; i < d.n; i++)
        for (int j = 0; j < d.f[i].n; j++) {
            const ink_st_tensor *t = &d.f[i].t[j];
            size_t l = strlen(t->name);
            if (l < 7 || strcmp(t->name + l - 7, ".scales")) continue;
            char wn[512];
            snprintf(wn, sizeof wn, "%.*s.weight", (int)(l - 7), t->name);
            const ink_st_tensor *w = ds_find(&d, wn);
            assert_non_null(w);
            int bits = (int)(w->shape[w->ndim - 1] * 32 / (t->shape[t->ndim - 1] * 64));
            const char *lp = strstr(t->name, "layers.");
            int L = 16, idx = lp && !strstr(t->name, "mtp.") ? atoi(lp + 7) : -1;
            int more = idx >= 0 && (idx < L / 8 || idx >= 7 * L / 8 || (idx - L / 8) % 3 == 2);
            int vd = strstr(t->name, "wv_dv") || strstr(t->name, "down_proj") || strstr(t->name, "w2_md");
            int want = (strstr(t->name, "embed") || (vd && more)) ? 6 : 3;
            if (bits != want) fail_msg("%s: %d bits, mlx-lm's mixed_3_6 gives %d", t->name, bits, want);
            hi_seen += want == 6, lo_seen += want == 3;
        }
    ds_close(&d);
    assert_true(hi_seen > 10 && lo_seen > 30);
    evaluates(out);
}

/* NVFP4: routed experts only, in the release's layout, equal to ckpt.c's NVFP4 writer. */
static void test_nvfp4_equals_reference(void **state)
{
    (void)state;
    tiny_spec sp;
    base_spec(&sp);
    char src[256], ref[256], out[256];
    write_src(&sp, src, sizeof src, "qsrc");
    tiny_spec rs = sp;
    rs.nvfp4 = 1;
    write_src(&rs, ref, sizeof ref, "qref");
    ink_quant_opts o = {.mode = INK_QUANT_NVFP4};
    assert_int_equal(tu_tmpdir(out, sizeof out, "qout"), 0);
    quantize_ok(src, out, &o);
    dirset a, b;
    ds_open(&a, ref), ds_open(&b, out);
    int nq = 0;
    for (int i = 0; i < a.n; i++)
        for (int j = 0; j < a.f[i].n; j++) {
            const ink_st_tensor *x = &a.f[i].t[j], *y = ds_find(&b, x->name);
            if (strstr(x->name, "model.mtp.")) continue; /* the reference quantizes the head's experts too */
            if (!y) fail_msg("%s missing", x->name);
            assert_int_equal(x->dtype, y->dtype);
            assert_int_equal(numel(x), numel(y));
            if (x->dtype == INK_DT_U8) { /* codes: equal as values (the reference writes +0 where MLX's
                                          * rounding keeps the sign of a tiny negative weight: -0) */
                for (int64_t k = 0; k < numel(x); k++)
                    for (int h = 0; h < 2; h++) {
                        int cx = (x->data[k] >> (4 * h)) & 15, cy = (y->data[k] >> (4 * h)) & 15;
                        if (cx != cy && !((cx & 7) == 0 && (cy & 7) == 0))
                            fail_msg("%s: element %lld: code %d, reference %d", x->name, (long long)(2 * k + h), cy, cx);
                    }
                continue;
            }
            if (memcmp(x->data, y->data, x->end - x->begin)) fail_msg("%s: bytes differ", x->name);
            nq += y->dtype == INK_DT_F8_E4M3;
        }
    assert_true(nq >= 8);
    ds_close(&a), ds_close(&b);
    char p[1024];
    snprintf(p, sizeof p, "%s/hf_quant_config.json", out);
    json_t *h = json_load_file(p, 0, NULL);
    assert_non_null(h);
    assert_string_equal(json_string_value(json_object_get(json_object_get(h, "quantization"), "quant_algo")), "NVFP4");
    json_decref(h);
    evaluates(out);
}

/* ---- refusals ----------------------------------------------------------------------------- */

static void test_refusals(void **state)
{
    (void)state;
    tiny_spec sp;
    base_spec(&sp);
    char src[256], out[256], q[256];
    write_src(&sp, src, sizeof src, "qsrc");
    assert_int_equal(tu_tmpdir(out, sizeof out, "qout"), 0);
    ink_quant_opts o = {.bits = 4};
    quantize_ok(src, out, &o);
    ink_err e = {0};
    assert_int_equal(ink_quantize(src, out, &o, &e), INK_E_INVAL); /* not empty, no force */
    assert_non_null(strstr(e.msg, "--force"));
    memset(&e, 0, sizeof e);
    assert_int_equal(tu_tmpdir(q, sizeof q, "qout"), 0);
    assert_int_equal(ink_quantize(out, q, &o, &e), INK_E_INVAL); /* already quantized */
    assert_non_null(strstr(e.msg, "already quantized"));
    memset(&e, 0, sizeof e);
    ink_quant_opts bad = {.bits = 7};
    assert_int_equal(ink_quantize(src, q, &bad, &e), INK_E_INVAL);
    memset(&e, 0, sizeof e);
    ink_quant_opts bp = {.preset = "mixed_9_9"};
    assert_int_equal(ink_quantize(src, q, &bp, &e), INK_E_INVAL);
    assert_non_null(strstr(e.msg, "mixed_9_9"));
    memset(&e, 0, sizeof e);
    assert_int_equal(ink_quantize(src, src, &o, &e), INK_E_INVAL); /* onto itself */
    /* the CLI: usage errors exit 2 and say why; a forced rerun writes */
    char cmd[2048], er[2048];
    const char *bin = tu_bin();
    snprintf(cmd, sizeof cmd, "%s quantize -m %s --bits 4", bin, src);
    assert_int_equal(tu_run(cmd, NULL, 0, er, sizeof er), 2);
    assert_non_null(strstr(er, "-o DST"));
    snprintf(cmd, sizeof cmd, "%s quantize -m %s -o %s --bits 7", bin, src, q);
    assert_int_equal(tu_run(cmd, NULL, 0, er, sizeof er), 2);
    snprintf(cmd, sizeof cmd, "%s quantize -m %s -o %s --bits 4 --override 'x=9'", bin, src, q);
    assert_int_equal(tu_run(cmd, NULL, 0, er, sizeof er), 2);
    snprintf(cmd, sizeof cmd, "%s quantize -m %s -o %s --mode nvfp4 --bits 4", bin, src, q);
    assert_int_equal(tu_run(cmd, NULL, 0, er, sizeof er), 2);
    snprintf(cmd, sizeof cmd, "%s quantize -m %s -o %s --bits 4", bin, src, out);
    assert_int_equal(tu_run(cmd, NULL, 0, er, sizeof er), 1);
    assert_non_null(strstr(er, "not empty"));
    snprintf(cmd, sizeof cmd, "%s quantize -m %s -o %s --bits 8 --group-size 32 --force -q", bin, src, out);
    assert_int_equal(tu_run(cmd, NULL, 0, er, sizeof er), 0);
    json_t *qb = qblock(out);
    assert_int_equal(json_integer_value(json_object_get(qb, "bits")), 8);
    json_decref(qb);
}

/* ---- the scalar pieces -------------------------------------------------------------------- */

static void test_scalar_rounding(void **state)
{
    (void)state;
    /* E4M3: exact values, ties to even, subnormals, saturation */
    assert_int_equal(ink_f32_to_e4m3(1.0f), 0x38);
    assert_int_equal(ink_f32_to_e4m3(448.0f), 0x7E);
    assert_int_equal(ink_f32_to_e4m3(1e6f), 0x7E);
    assert_int_equal(ink_f32_to_e4m3(-2.0f), 0xC0);
    assert_int_equal(ink_f32_to_e4m3(1.0625f), 0x38); /* halfway 1 .. 1.125: even mantissa 0 */
    assert_int_equal(ink_f32_to_e4m3(1.1875f), 0x3A); /* halfway 1.125 .. 1.25: even mantissa 2 */
    assert_int_equal(ink_f32_to_e4m3(0.001953125f), 0x01); /* 2^-9, the smallest subnormal */
    assert_int_equal(ink_f32_to_e4m3(0.0009765625f), 0x00); /* half of it: ties to even (0) */
    for (int c = 0; c < 0x7F; c++) assert_int_equal(ink_f32_to_e4m3(ink_e4m3_to_f32((uint8_t)c)), c);
    /* E2M1: ties to the even code */
    static const float v[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 7.0f, -0.3f};
    static const int c[] = {0, 2, 2, 4, 4, 6, 6, 7, 9};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) assert_int_equal(ink_f32_to_e2m1(v[i]), c[i]);
    /* affine packing: formats.md §4.3 vectors. A group spanning 0 .. n (n = 2^b - 1) has |hi| > |lo|,
     * so MLX takes scale -1 and bias n (the edge hi made exact): w = n - code gives exactly `code` */
    static const struct { int bits; unsigned codes[8]; uint8_t bytes[5]; int nb; } pv[] = {
        {4, {1, 2, 3, 4, 5, 6, 7, 8}, {0x21, 0x43, 0x65, 0x87}, 4},
        {3, {1, 2, 3, 4, 5, 6, 7, 0}, {0xd1, 0x58, 0x1f}, 3},
        {5, {1, 2, 3, 4, 5, 6, 7, 8}, {0x41, 0x0c, 0x52, 0xcc, 0x41}, 5},
    };
    for (size_t k = 0; k < sizeof pv / sizeof pv[0]; k++) {
        int b = pv[k].bits, n = 32, nmax = (1 << b) - 1;
        float w[32], s[1], bi[1];
        uint8_t pk[32];
        for (int i = 0; i < n; i++) w[i] = i < 8 ? (float)(nmax - (int)pv[k].codes[i]) : i == 8 ? 0.0f : (float)nmax;
        ink_qaffine_row(w, n, b, 32, pk, s, bi);
        assert_true(s[0] == -1.0f && bi[0] == (float)nmax);
        assert_memory_equal(pk, pv[k].bytes, (size_t)pv[k].nb);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalar_rounding),
        cmocka_unit_test(test_affine_equals_reference),
        cmocka_unit_test(test_overrides_equal_reference),
        cmocka_unit_test(test_bf16_source),
        cmocka_unit_test(test_hf_names_and_shards),
        cmocka_unit_test(test_mtp_head_quantized),
        cmocka_unit_test(test_preset_bits),
        cmocka_unit_test(test_nvfp4_equals_reference),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
