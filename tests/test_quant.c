/* test_quant.c — quantized checkpoints written by the tests themselves with the MLX algorithm
 * (tests/support/ckpt.c) against their dequantized F32 twins: same logits within 1e-4 relative and
 * the same greedy tokens; mlx-community layout (pre-split experts, 4-bit g64 with 8-bit overrides,
 * an override `false`), release layout (interleaved w13) with runtime-name override keys, all bit
 * widths and groups, NVFP4 routed experts (one layer kept BF16); config errors; detection; and the
 * greedy invariant (K verified rows == K decoded rows, bitwise) on quantized weights, f32 and int8
 * activations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "inkling.h"
#include "kernels/kernels.h"
#include "support/ckpt.h"
#include "support/util.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void qspec(tiny_spec *sp)
{
    tiny_default(sp);
    sp->hidden = 128, sp->dense_inter = 128, sp->expert_inter = 64;
    sp->qbits = 4, sp->qgroup = 64, sp->qembed = 1;
    sp->naming = TINY_NAMES_PRESPLIT;
    sp->q8_match = "down_proj", sp->qskip_match = "wr_du";
}

static ink_model *open_act(const char *dir, int threads, int act, ink_err *e)
{
    ink_model *m = NULL;
    ink_model_opts o = {.n_threads = threads, .activations = act};
    if (ink_model_open(&m, dir, &o, e)) return NULL;
    return m;
}

/* f32 activations: the path that matches the dequantized twin to 1e-4 */
static ink_model *open_dir(const char *dir, int threads, ink_err *e) { return open_act(dir, threads, INK_ACT_F32, e); }

static ink_model *write_open(const tiny_spec *sp, const char *tag, char *dir, size_t n)
{
    assert_int_equal(tu_tmpdir(dir, n, tag), 0);
    assert_int_equal(tiny_write(dir, sp), 0);
    ink_err e = {0};
    ink_model *m = open_dir(dir, 2, &e);
    if (!m) fail_msg("open %s: %s", dir, e.msg);
    return m;
}

static float *logits(ink_model *m, const int32_t *ids, int T)
{
    int V = ink_model_n_vocab(m);
    float *lg = malloc((size_t)T * V * sizeof(float));
    ink_session *s;
    ink_err e = {0};
    assert_int_equal(ink_session_create(&s, m, 256, &e), 0);
    ink_eval_out o = {.logits = lg, .all_logits = 1};
    assert_int_equal(ink_session_eval(s, ids, T, &o, &e), 0);
    ink_session_free(s);
    return lg;
}

static void prompt(int32_t *ids, int T, int V, uint64_t seed)
{
    for (int t = 0; t < T; t++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[t] = (int32_t)((seed >> 33) % (uint64_t)V);
    }
}

static int argmax(const float *v, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* quantized vs its dequantized twin: 1e-4 relative to max |logit|, same argmax at every position */
static void compare_twin(tiny_spec sp, const char *what)
{
    char dq[256], dt[256];
    ink_model *mq = write_open(&sp, "quant", dq, sizeof dq);
    sp.qtwin = 1;
    ink_model *mt = write_open(&sp, "twin", dt, sizeof dt);
    int V = ink_model_n_vocab(mq), T = 24;
    int32_t ids[24];
    prompt(ids, T, V, 77);
    float *a = logits(mq, ids, T), *b = logits(mt, ids, T);
    float mref, d = tu_max_abs_diff(a, b, (size_t)T * V, &mref);
    if (!(d <= 1e-4f * fmaxf(1.0f, mref))) fail_msg("%s: max |err| %g vs max |logit| %g", what, d, mref);
    for (int t = 0; t < T; t++) assert_int_equal(argmax(a + (size_t)t * V, V), argmax(b + (size_t)t * V, V));
    free(a), free(b);
    ink_model_free(mq), ink_model_free(mt);
}

static void test_mlx_community_layout(void **state)
{
    (void)state;
    tiny_spec sp;
    qspec(&sp);
    compare_twin(sp, "4-bit g64 + 8-bit down_proj, wr_du false, pre-split experts");
    sp.bf16 = 1;
    compare_twin(sp, "same, BF16 float tensors");
}

static void test_release_layout_runtime_keys(void **state)
{
    (void)state;
    tiny_spec sp;
    qspec(&sp);
    sp.naming = TINY_NAMES_RELEASE, sp.q_runtime_keys = 1, sp.qbits = 3, sp.qgroup = 32;
    sp.q8_match = "wv_dv";
    compare_twin(sp, "3-bit g32, interleaved w13 / shared_w13, runtime override keys");
    sp.naming = TINY_NAMES_HF;
    compare_twin(sp, "3-bit g32, HF names (gate_up_proj half split)");
}

static void test_all_widths(void **state)
{
    (void)state;
    int bits[] = {2, 5, 6, 8}, gs[] = {128, 64, 32, 128};
    for (int i = 0; i < 4; i++) {
        tiny_spec sp;
        qspec(&sp);
        sp.qbits = bits[i], sp.qgroup = gs[i], sp.n_layer = 3, sp.n_local = 2;
        char what[64];
        snprintf(what, sizeof what, "%d-bit g%d", bits[i], gs[i]);
        compare_twin(sp, what);
    }
}

static void test_nvfp4_experts(void **state)
{
    (void)state;
    tiny_spec sp;
    tiny_default(&sp);
    sp.hidden = 64, sp.expert_inter = 32, sp.bf16 = 1;
    sp.nvfp4 = 1, sp.nvfp4_skip = "layers.3."; /* that layer keeps BF16 experts: detection is per tensor */
    compare_twin(sp, "NVFP4 routed experts");
    char d[256];
    assert_int_equal(tu_tmpdir(d, sizeof d, "nvinfo"), 0);
    assert_int_equal(tiny_write(d, &sp), 0);
    ink_model_info info;
    ink_err e = {0};
    assert_int_equal(ink_model_detect(d, &info, &e), 0);
    assert_int_equal(info.supported, 1);
    assert_non_null(strstr(info.quant, "nvfp4"));
}

/* Rewrites one key of config.json's quantization block (both mirrors). */
static void set_override(const char *dir, const char *key, json_t *val, int drop_block, const char *mode)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/config.json", dir);
    json_t *root = json_load_file(p, 0, NULL);
    assert_non_null(root);
    const char *blocks[2] = {"quantization", "quantization_config"};
    for (int i = 0; i < 2; i++) {
        if (drop_block) {
            json_object_del(root, blocks[i]);
            continue;
        }
        json_t *q = json_object_get(root, blocks[i]);
        if (key) json_object_set(q, key, val);
        if (mode) json_object_set_new(q, "mode", json_string(mode));
    }
    json_decref(val);
    assert_int_equal(json_dump_file(root, p, JSON_INDENT(2)), 0);
    json_decref(root);
}

static void test_config_overrides(void **state)
{
    (void)state;
    tiny_spec sp;
    qspec(&sp);
    sp.n_layer = 3, sp.n_local = 2;
    char d[256];
    ink_err e = {0};
    ink_model_info info;
    assert_int_equal(tu_tmpdir(d, sizeof d, "qcfg"), 0);
    assert_int_equal(tiny_write(d, &sp), 0);
    assert_int_equal(ink_model_detect(d, &info, &e), 0);
    assert_int_equal(info.supported, 1);
    assert_non_null(strstr(info.quant, "mlx-affine 4-bit g64"));
    assert_non_null(strstr(info.quant, "+8-bit"));
    /* `false` on a quantized module (runtime spelling of a stored name) */
    set_override(d, "language_model.model.layers.1.self_attn.q_proj", json_false(), 0, NULL);
    ink_model *m = open_dir(d, 1, &e);
    assert_null(m);
    assert_int_equal(e.code, INK_E_FORMAT);
    assert_non_null(strstr(e.msg, "q_proj"));
    assert_int_equal(ink_model_detect(d, &info, &e), 0);
    assert_int_equal(info.supported, 0);
    /* a dict on a module stored as float (wr_du was written with `false`) */
    assert_int_equal(tiny_write(d, &sp), 0);
    set_override(d, "model.llm.layers.0.attn.wr_du", json_pack("{s:i,s:i}", "group_size", 64, "bits", 4), 0, NULL);
    memset(&e, 0, sizeof e);
    assert_null(open_dir(d, 1, &e));
    assert_int_equal(e.code, INK_E_FORMAT);
    /* an override for a module the engine does not load is ignored */
    assert_int_equal(tiny_write(d, &sp), 0);
    set_override(d, "vision_tower.encoder_layers.0.projection", json_false(), 0, NULL);
    memset(&e, 0, sizeof e);
    m = open_dir(d, 1, &e);
    assert_non_null(m);
    ink_model_free(m);
    /* scales but no block */
    assert_int_equal(tiny_write(d, &sp), 0);
    set_override(d, NULL, NULL, 1, NULL);
    memset(&e, 0, sizeof e);
    assert_null(open_dir(d, 1, &e));
    assert_int_equal(e.code, INK_E_FORMAT);
    /* an MLX fp mode */
    assert_int_equal(tiny_write(d, &sp), 0);
    set_override(d, NULL, NULL, 0, "mxfp4");
    memset(&e, 0, sizeof e);
    assert_null(open_dir(d, 1, &e));
    assert_int_equal(e.code, INK_E_UNSUPPORTED);
}

/* K verified rows give the bits of K decoded rows, and thread count does not matter, on quantized
 * weights (f32 and int8 activations). */
static void test_quant_greedy_invariant(void **state)
{
    (void)state;
    tiny_spec sp;
    qspec(&sp);
    char d[256];
    assert_int_equal(tu_tmpdir(d, sizeof d, "qinv"), 0);
    assert_int_equal(tiny_write(d, &sp), 0);
    for (int int8 = 0; int8 < 2; int8++) {
        float *ref = NULL;
        for (int th = 1; th <= 3; th++) {
            ink_err e = {0};
            ink_model *m = open_act(d, th, int8 ? INK_ACT_AUTO : INK_ACT_F32, &e);
            assert_non_null(m);
            assert_int_equal(ink_model_int8_activations(m), int8);
            int V = ink_model_n_vocab(m), T = 12;
            int32_t ids[12];
            prompt(ids, T, V, 5);
            float *full = logits(m, ids, T);
            float *one = malloc((size_t)T * V * sizeof(float));
            ink_session *s;
            assert_int_equal(ink_session_create(&s, m, 256, &e), 0);
            for (int t = 0; t < T; t++) {
                ink_eval_out o = {.logits = one + (size_t)t * V};
                assert_int_equal(ink_session_eval(s, ids + t, 1, &o, &e), 0);
            }
            ink_session_free(s);
            assert_memory_equal(full, one, (size_t)T * V * sizeof(float));
            if (!ref) ref = full;
            else {
                assert_memory_equal(ref, full, (size_t)T * V * sizeof(float));
                free(full);
            }
            free(one);
            ink_model_free(m);
        }
        free(ref);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlx_community_layout), cmocka_unit_test(test_release_layout_runtime_keys),
        cmocka_unit_test(test_all_widths),           cmocka_unit_test(test_nvfp4_experts),
        cmocka_unit_test(test_config_overrides),     cmocka_unit_test(test_quant_greedy_invariant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
