/* test_model.c — backbone properties on tiny random checkpoints the tests write themselves
 * (tests/support/ckpt.c): prefill == decode, chunking, snapshot/restore, thread independence,
 * layouts (names, fused gate/up orientation, shards, bf16), causality, and the worked examples of
 * inkling-text.md (short conv, router, tau). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kernels/kernels.h"
#include "model/model.h"
#include "support/ckpt.h"
#include "support/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ink_model *open_spec(const tiny_spec *sp, int threads, char *dir, size_t n)
{
    if (tu_tmpdir(dir, n, "model")) return NULL;
    if (tiny_write(dir, sp)) return NULL;
    ink_model *m = NULL;
    ink_err e = {0};
    ink_model_opts o = {.n_threads = threads};
    if (ink_model_open(&m, dir, &o, &e)) fprintf(stderr, "open %s: %s\n", dir, e.msg);
    return m;
}

static void prompt(int32_t *ids, int T, int V, uint64_t seed)
{
    for (int t = 0; t < T; t++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[t] = (int32_t)((seed >> 33) % (uint64_t)V);
    }
}

/* Feeds ids in pieces of the given sizes (cycled) and returns all logits. */
static float *chunked_logits(ink_model *m, const int32_t *ids, int T, const int *sizes, int n_sizes)
{
    int V = ink_model_n_vocab(m);
    float *lg = malloc((size_t)T * V * sizeof(float));
    ink_session *s;
    ink_err e = {0};
    assert_int_equal(ink_session_create(&s, m, 512, &e), 0);
    for (int t = 0, k = 0; t < T; k++) {
        int n = sizes[k % n_sizes];
        if (n > T - t) n = T - t;
        ink_eval_out o = {.logits = lg + (size_t)t * V, .all_logits = 1};
        assert_int_equal(ink_session_eval(s, ids + t, n, &o, &e), 0);
        t += n;
    }
    ink_session_free(s);
    return lg;
}

/* All-position logits of one prefill of ids[0..T). Caller frees. */
static float *prefill_logits(ink_model *m, const int32_t *ids, int T)
{
    return chunked_logits(m, ids, T, &T, 1);
}

static void assert_close(const float *a, const float *b, size_t n, float rel, const char *what)
{
    float mref, d = tu_max_abs_diff(a, b, n, &mref);
    if (!(d <= rel * fmaxf(1.0f, mref))) fprintf(stderr, "%s: max |err| %g, bound %g\n", what, d, rel * fmaxf(1.0f, mref));
    assert_true(d <= rel * fmaxf(1.0f, mref));
}

/* Decode one token at a time == full prefill, for shapes the golden set does not cover: GQA ratios
 * 1..4, kernel sizes 3..5, vocab padding, window 8 crossed many times (T = 70 > W + K), global extent
 * 16 crossed, and a prompt shorter than K - 1. Bound 1e-5 relative: the same f32 math in a
 * different chunking (the per-element operation order is identical, so the result is in practice
 * bitwise equal). */
static void test_decode_equals_prefill_shapes(void **state)
{
    (void)state;
    struct { int nkv, swa_nkv, k, vu, bf16, T; } cases[] = {
        {2, 1, 4, 120, 0, 70}, {1, 4, 3, 0, 0, 40}, {4, 2, 5, 127, 1, 33}, {2, 2, 4, 100, 0, 2},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tiny_spec sp;
        tiny_default(&sp);
        sp.n_kv = cases[c].nkv, sp.swa_n_kv = cases[c].swa_nkv, sp.conv_k = cases[c].k;
        sp.vocab_unpadded = cases[c].vu, sp.bf16 = cases[c].bf16, sp.seed = 100 + c;
        char dir[256];
        ink_model *m = open_spec(&sp, 2, dir, sizeof dir);
        assert_non_null(m);
        int T = cases[c].T, V = ink_model_n_vocab(m);
        assert_int_equal(V, cases[c].vu ? cases[c].vu : sp.vocab);
        int32_t ids[128];
        prompt(ids, T, V, 7 + c);
        float *full = prefill_logits(m, ids, T);
        int one = 1;
        float *dec = chunked_logits(m, ids, T, &one, 1);
        assert_close(dec, full, (size_t)T * V, 1e-5f, "decode vs prefill");
        for (size_t i = 0; i < (size_t)T * V; i++) assert_true(isfinite(full[i]));
        free(full), free(dec);
        ink_model_free(m);
    }
}

/* A row evaluated inside a multi-row forward gives bitwise the logits of the same row decoded alone,
 * for every forward width 1..9 (verify widths) and 64+ (a prefill chunk: its MoE layers take the
 * expert-by-expert loop, narrower forwards the grouped experts), on 1 and 3 threads, with
 * GQA ratios 1, 2 and 4 and windows short enough that rows of one forward see different key ranges;
 * with every kernel set the CPU has. */
static void test_rows_bitwise(void **state)
{
    (void)state;
    struct { int nh, nkv, swa_nkv, window; } cases[] = {{4, 2, 1, 8}, {4, 4, 2, 5}, {8, 2, 2, 12}};
    const ink_kernels *sets[3] = {ink_kernels_scalar(), ink_kernels_avx2(), ink_kernels_avx512()};
    for (size_t c = 0; c < 3 * sizeof cases / sizeof cases[0]; c++) {
        if (!sets[c / 3]) continue;
        ink_kernels_select(sets[c / 3]);
        tiny_spec sp;
        tiny_default(&sp);
        sp.n_head = sp.swa_n_head = cases[c % 3].nh, sp.n_kv = cases[c % 3].nkv, sp.swa_n_kv = cases[c % 3].swa_nkv;
        sp.window = cases[c % 3].window, sp.seed = 300 + c % 3;
        for (int thr = 1; thr <= 3; thr += 2) {
            char dir[256];
            ink_model *m = open_spec(&sp, thr, dir, sizeof dir);
            assert_non_null(m);
            int V = ink_model_n_vocab(m), P = 23, N = 75;
            int32_t ids[128];
            prompt(ids, P + N, V, 40 + c % 3);
            int one = 1;
            float *dec = chunked_logits(m, ids, P + N, &one, 1);
            int sizes[] = {P, 2, 3, 1, 9, 4, 5, 8, 6, 7, 66};
            float *ch = chunked_logits(m, ids, P + N, sizes, 11);
            for (int t = 0; t < P + N; t++)
                if (memcmp(dec + (size_t)t * V, ch + (size_t)t * V, (size_t)V * 4))
                    fail_msg("%s case %zu threads %d: row %d differs between decode and multi-row forwards",
                             sets[c / 3]->name, c % 3, thr, t);
            free(dec), free(ch);
            ink_model_free(m);
        }
    }
    ink_kernels_select(NULL);
}

/* Chunked prefill at irregular split points (1, 2 < K-1, chunks straddling the window edge, 64+
 * chunks that split internally) == one prefill. */
static void test_chunked_prefill(void **state)
{
    (void)state;
    tiny_spec sp;
    tiny_default(&sp);
    char dir[256];
    ink_model *m = open_spec(&sp, 2, dir, sizeof dir);
    assert_non_null(m);
    int T = 150, V = ink_model_n_vocab(m);
    int32_t ids[150];
    prompt(ids, T, V, 99);
    float *full = prefill_logits(m, ids, T);
    int sizes[] = {3, 1, 2, 7, 9, 70, 5};
    float *ch = chunked_logits(m, ids, T, sizes, 7);
    assert_close(ch, full, (size_t)T * V, 1e-5f, "chunked vs full");
    free(full), free(ch);
    ink_model_free(m);
}

/* Snapshot, run ahead, restore, continue == a session that never ran ahead: state bitwise equal
 * (conv states and every attendable KV row) and logits bitwise equal. */
static void test_snapshot_restore_bitwise(void **state)
{
    (void)state;
    tiny_spec sp;
    tiny_default(&sp);
    char dir[256];
    ink_model *m = open_spec(&sp, 2, dir, sizeof dir);
    assert_non_null(m);
    int V = ink_model_n_vocab(m);
    int32_t ids[64], alt[8];
    prompt(ids, 64, V, 5);
    prompt(alt, 8, V, 6);
    ink_err e = {0};
    ink_session *a, *b;
    ink_snapshot *snap;
    assert_int_equal(ink_session_create(&a, m, 256, &e), 0);
    assert_int_equal(ink_session_create(&b, m, 256, &e), 0);
    assert_int_equal(ink_snapshot_create(&snap, a, &e), 0);
    float *la = malloc((size_t)V * 4), *lb = malloc((size_t)V * 4);
    ink_eval_out oa = {.logits = la}, ob = {.logits = lb};
    assert_int_equal(ink_session_eval(a, ids, 30, NULL, &e), 0);
    ink_session_save(a, snap);
    assert_int_equal(ink_session_eval(a, alt, 8, NULL, &e), 0); /* speculative tokens */
    assert_int_equal(ink_session_restore(a, snap, &e), 0);
    assert_int_equal(ink_session_pos(a), 30);
    /* b never speculated */
    assert_int_equal(ink_session_eval(b, ids, 30, NULL, &e), 0);
    char why[128];
    int diff = ink_session_compare(a, b, why, sizeof why);
    if (diff) fprintf(stderr, "%s\n", why);
    assert_int_equal(diff, 0);
    for (int t = 30; t < 64; t++) {
        assert_int_equal(ink_session_eval(a, ids + t, 1, &oa, &e), 0);
        assert_int_equal(ink_session_eval(b, ids + t, 1, &ob, &e), 0);
        assert_memory_equal(la, lb, (size_t)V * 4);
    }
    assert_int_equal(ink_session_compare(a, b, why, sizeof why), 0);
    /* the contract's limits: rollback past the slack, or to a position ahead, is refused cleanly */
    ink_session_save(a, snap);
    int32_t many[70];
    prompt(many, 70, V, 8);
    assert_int_equal(ink_session_eval(a, many, 70, NULL, &e), 0);
    ink_err e2 = {0};
    assert_int_equal(ink_session_restore(a, snap, &e2), INK_E_INVAL);
    assert_non_null(strstr(e2.msg, "rollback covers at most"));
    ink_session_free(a), ink_session_free(b);
    ink_snapshot_free(snap);
    free(la), free(lb);
    ink_model_free(m);
}

/* Results do not depend on the thread count (bitwise). */
static void test_threads_bitwise(void **state)
{
    (void)state;
    tiny_spec sp;
    tiny_default(&sp);
    sp.hidden = 128, sp.dense_inter = 256, sp.expert_inter = 64, sp.vocab = 512, sp.vocab_unpadded = 500;
    char d1[256], d2[256];
    ink_model *m1 = open_spec(&sp, 1, d1, sizeof d1), *m3 = open_spec(&sp, 3, d2, sizeof d2);
    assert_non_null(m1);
    assert_non_null(m3);
    int32_t ids[40];
    prompt(ids, 40, 500, 3);
    float *a = prefill_logits(m1, ids, 40), *b = prefill_logits(m3, ids, 40);
    assert_memory_equal(a, b, (size_t)40 * 500 * 4);
    free(a), free(b);
    ink_model_free(m1), ink_model_free(m3);
}

/* The same logical weights under the release names (interleaved w13), the HF names (half-split
 * gate_up_proj), pre-split stacks, 3 shards + index, and bf16 vs f32-of-bf16-values: identical
 * logits. Swapping gate and up changes them (silu is asymmetric), so the orientation is tested. */
static void test_layouts_equivalent(void **state)
{
    (void)state;
    tiny_spec base;
    tiny_default(&base);
    base.bf16_values = 1;
    int32_t ids[24];
    prompt(ids, 24, 120, 11);
    char dir[256];
    ink_model *m = open_spec(&base, 2, dir, sizeof dir);
    assert_non_null(m);
    assert_string_equal(ink_model_get_info(m)->names, "release");
    float *ref = prefill_logits(m, ids, 24);
    ink_model_free(m);
    size_t n = (size_t)24 * 120;
    for (int v = 0; v < 5; v++) {
        tiny_spec sp = base;
        if (v == 0) sp.naming = TINY_NAMES_HF;
        if (v == 1) sp.naming = TINY_NAMES_PRESPLIT;
        if (v == 2) sp.n_shards = 3;
        if (v == 3) sp.bf16 = 1, sp.bf16_values = 0;
        if (v == 4) sp.swap_gate_up = 1;
        m = open_spec(&sp, 2, dir, sizeof dir);
        assert_non_null(m);
        if (v == 0) assert_string_equal(ink_model_get_info(m)->names, "hf");
        if (v == 2) assert_int_equal(ink_model_get_info(m)->n_files, 3);
        float *got = prefill_logits(m, ids, 24);
        if (v < 3 || (v == 3 && !ink_kernels_active()->rows_pairs)) assert_memory_equal(got, ref, n * 4);
        else if (v == 3) { /* a set that sums bf16 weights in lane pairs (AVX2) orders the sums otherwise */
            float mref = 0, d = tu_max_abs_diff(got, ref, n, &mref);
            assert_true(d <= 1e-5f * (mref > 1 ? mref : 1));
        } else {
            float d = tu_max_abs_diff(got, ref, n, NULL);
            assert_true(d > 1e-3f);
        }
        free(got);
        ink_model_free(m);
    }
    free(ref);
}

/* Changing a later token never changes earlier logits. */
static void test_causality(void **state)
{
    (void)state;
    tiny_spec sp;
    tiny_default(&sp);
    char dir[256];
    ink_model *m = open_spec(&sp, 2, dir, sizeof dir);
    int32_t ids[30];
    prompt(ids, 30, 120, 21);
    float *a = prefill_logits(m, ids, 30);
    ids[20] = (ids[20] + 1) % 120;
    float *b = prefill_logits(m, ids, 30);
    assert_memory_equal(a, b, (size_t)20 * 120 * 4);
    assert_true(tu_max_abs_diff(a + 20 * 120, b + 20 * 120, 120, NULL) > 0);
    free(a), free(b);
    ink_model_free(m);
}

/* Worked example of inkling-text.md §3.3. */
static void test_sconv_worked_example(void **state)
{
    (void)state;
    float w[4] = {0.1f, 0.2f, 0.3f, 0.4f}, st[3] = {0}, u[5] = {1, 2, 3, 4, 5}, y[5], ext[8];
    ink_sconv(w, st, u, y, 5, 1, 4, ext);
    float want[5] = {1.4f, 3.1f, 5.0f, 7.0f, 9.0f};
    for (int i = 0; i < 5; i++) assert_float_equal(y[i], want[i], 1e-6);
    assert_float_equal(st[0], 3, 0), assert_float_equal(st[1], 4, 0), assert_float_equal(st[2], 5, 0);
    /* one at a time with carried state gives the same outputs */
    float st2[3] = {0}, y2;
    for (int i = 0; i < 5; i++) {
        ink_sconv(w, st2, &u[i], &y2, 1, 1, 4, ext);
        assert_float_equal(y2, want[i], 1e-6);
    }
}

/* Worked example of inkling-text.md §3.7 (E=4, S=1, k=2, route_scale 8, global_scale 0.5). */
static void test_router_worked_example(void **state)
{
    (void)state;
    ink_config c = {0};
    c.n_expert = 4, c.n_shared = 1, c.n_expert_used = 2, c.route_scale = 8.0f;
    float logit[5] = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f}, bias[4] = {0, 3, 0, 0}, wt[3];
    int chosen[2];
    ink_route(&c, logit, bias, 0.5f, chosen, wt);
    assert_int_equal(chosen[0], 1);
    assert_int_equal(chosen[1], 2);
    assert_float_equal(wt[0], 0.571973, 1e-5);
    assert_float_equal(wt[1], 1.873242, 1e-5);
    assert_float_equal(wt[2], 1.554785, 1e-5);
    /* ties go to the lower id */
    float flat[5] = {0, 0, 0, 0, 0}, zero[4] = {0};
    ink_route(&c, flat, zero, 1.0f, chosen, wt);
    assert_int_equal(chosen[0], 0);
    assert_int_equal(chosen[1], 1);
    assert_float_equal(wt[0] + wt[1] + wt[2], 8.0, 1e-5);
}

/* tau table of inkling-text.md §6 item 7 (n_floor 128000, alpha 0.1). */
static void test_tau_table(void **state)
{
    (void)state;
    assert_float_equal(ink_tau(0, 128000, 0.1f), 1.0, 0);
    assert_float_equal(ink_tau(127998, 128000, 0.1f), 1.0, 0);
    assert_float_equal(ink_tau(127999, 128000, 0.1f), 1.0, 0);
    assert_true(ink_tau(128000, 128000, 0.1f) > 1.0f);
    assert_float_equal(ink_tau(128000, 128000, 0.1f), 1.00000078, 1e-7);
    assert_float_equal(ink_tau(255999, 128000, 0.1f), 1.0693147180559945, 1e-6);
    assert_float_equal(ink_tau(1048575, 128000, 0.1f), 1.2103158068297153, 1e-6);
}

/* Bad token ids and a full context are refused before any state changes. */
static void test_eval_errors_leave_state(void **state)
{
    (void)state;
    tiny_spec sp;
    tiny_default(&sp);
    char dir[256];
    ink_model *m = open_spec(&sp, 1, dir, sizeof dir);
    ink_session *s, *r;
    ink_err e = {0};
    assert_int_equal(ink_session_create(&s, m, 16, &e), 0);
    assert_int_equal(ink_session_create(&r, m, 16, &e), 0);
    int32_t ids[20];
    prompt(ids, 20, 120, 1);
    assert_int_equal(ink_session_eval(s, ids, 10, NULL, &e), 0);
    assert_int_equal(ink_session_eval(r, ids, 10, NULL, &e), 0);
    int32_t bad[3] = {1, 120, 2};
    ink_err e1 = {0};
    assert_int_equal(ink_session_eval(s, bad, 3, NULL, &e1), INK_E_INVAL);
    assert_non_null(strstr(e1.msg, "token id 120"));
    ink_err e2 = {0};
    assert_int_equal(ink_session_eval(s, ids, 7, NULL, &e2), INK_E_CTX_FULL);
    char why[128];
    assert_int_equal(ink_session_compare(s, r, why, sizeof why), 0);
    ink_session_free(s), ink_session_free(r);
    ink_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_equals_prefill_shapes),
        cmocka_unit_test(test_chunked_prefill),
        cmocka_unit_test(test_rows_bitwise),
        cmocka_unit_test(test_snapshot_restore_bitwise),
        cmocka_unit_test(test_threads_bitwise),
        cmocka_unit_test(test_layouts_equivalent),
        cmocka_unit_test(test_causality),
        cmocka_unit_test(test_sconv_worked_example),
        cmocka_unit_test(test_router_worked_example),
        cmocka_unit_test(test_tau_table),
        cmocka_unit_test(test_eval_errors_leave_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
