/* test_batch.c — batched evaluation across sessions (ink_batch_eval, issue 18): "a row is a row".
 * Sessions fed in batches of varying mix (which sessions, how many rows each, capture on or off)
 * give logits, hidden rows and states bitwise equal to twins fed one at a time with
 * ink_session_eval; on a float checkpoint, a BF16 one with bf16 activations and an MLX 4-bit one
 * (int8 activations), with 1 and 2 threads. Bad batches are refused before any state changes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "draft/mtp.h"
#include "model/model.h"
#include "support/ckpt.h"
#include "support/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NS = 4, MAXT = 6 };

static uint64_t rng = 12345;
static int rnd(int n)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((rng >> 33) % (uint64_t)n);
}

/* quant: 0 float, 1 MLX 4-bit (int8 activations), 2 BF16 weights with bf16 activations */
static void run_mix(int quant, int threads)
{
    tiny_spec sp;
    tiny_default(&sp);
    if (quant == 1) sp.qbits = 4, sp.qgroup = 32;
    if (quant == 2) sp.bf16 = 1;
    char dir[256];
    assert_int_equal(tu_tmpdir(dir, sizeof dir, quant == 1 ? "batch_q4" : quant ? "batch_bf16x" : "batch_f32"), 0);
    assert_int_equal(tiny_write(dir, &sp), 0);
    ink_model *m = NULL;
    ink_err e = {0};
    ink_model_opts mo = {.n_threads = threads, .activations = quant == 2 ? INK_ACT_BF16 : INK_ACT_AUTO};
    assert_int_equal(ink_model_open(&m, dir, &mo, &e), 0);
    assert_int_equal(ink_model_bf16_activations(m), quant == 2);
    int V = ink_model_n_vocab(m), H = ink_model_get_info(m)->hidden;
    ink_session *a[NS], *b[NS];
    for (int i = 0; i < NS; i++) {
        assert_int_equal(ink_session_create(&a[i], m, 256, &e), 0);
        assert_int_equal(ink_session_create(&b[i], m, 256, &e), 0);
        if (i % 2) assert_int_equal(ink_session_set_capture(a[i], 1, &e), 0), ink_session_set_capture(b[i], 1, &e);
        int32_t p[40];
        int P = 3 + 9 * i; /* different lengths: different positions, sliding windows full or not */
        for (int t = 0; t < P; t++) p[t] = rnd(V);
        assert_int_equal(ink_session_eval(a[i], p, P, NULL, &e), 0);
        assert_int_equal(ink_session_eval(b[i], p, P, NULL, &e), 0);
    }
    ink_batch *bt;
    assert_int_equal(ink_batch_create(&bt, m, NS * MAXT, 256, &e), 0);
    float *la = malloc((size_t)NS * MAXT * V * sizeof(float)), *lb = malloc((size_t)MAXT * V * sizeof(float));
    float *ha = malloc((size_t)NS * MAXT * H * sizeof(float)), *hb = malloc((size_t)MAXT * H * sizeof(float));
    assert_non_null(la), assert_non_null(lb), assert_non_null(ha), assert_non_null(hb);
    char why[128];
    for (int step = 0; step < 24; step++) {
        ink_session *sel[NS];
        int32_t tok[NS][MAXT];
        const int32_t *tp[NS];
        int T[NS], n = 0, idx[NS];
        ink_eval_out out[NS];
        for (int i = 0; i < NS; i++) {
            if (step > 0 && rnd(3) == 0) continue; /* this session sits the step out */
            idx[n] = i, sel[n] = a[i], T[n] = 1 + rnd(MAXT), tp[n] = tok[n];
            for (int t = 0; t < T[n]; t++) tok[n][t] = rnd(V);
            out[n] = (ink_eval_out){.logits = la + (size_t)n * MAXT * V, .all_logits = rnd(2),
                                    .hidden_postnorm = ha + (size_t)n * MAXT * H};
            n++;
        }
        if (!n) continue;
        assert_int_equal(ink_batch_eval(bt, sel, tp, T, out, n, &e), 0);
        for (int k = 0; k < n; k++) {
            ink_eval_out o = {.logits = lb, .all_logits = out[k].all_logits, .hidden_postnorm = hb};
            assert_int_equal(ink_session_eval(b[idx[k]], tok[k], T[k], &o, &e), 0);
            size_t nl = (size_t)(o.all_logits ? T[k] : 1) * V;
            assert_memory_equal(out[k].logits, lb, nl * sizeof(float));
            assert_memory_equal(out[k].hidden_postnorm, hb, (size_t)T[k] * H * sizeof(float));
            if (ink_session_compare(a[idx[k]], b[idx[k]], why, sizeof why)) fail_msg("step %d session %d: %s", step, idx[k], why);
        }
    }
    /* refused before any state changes: a session twice, too many rows, a bad id, no sessions */
    int32_t ok[MAXT] = {1, 2, 3, 4, 5, 6}, bad[1] = {V};
    const int32_t *tp2[2] = {ok, ok}, *tpb[1] = {bad};
    ink_session *twice[2] = {a[0], a[0]};
    int T2[2] = {1, 1}, pos0 = ink_session_pos(a[0]);
    assert_int_equal(ink_batch_eval(bt, twice, tp2, T2, NULL, 2, &e), INK_E_INVAL);
    assert_non_null(strstr(e.msg, "same session"));
    e = (ink_err){0}; /* errors are sticky: the first one is kept */
    int Tbig[1] = {ink_session_rollback_slack(a[0]) + 1};
    assert_int_equal(ink_batch_eval(bt, a, tp2, Tbig, NULL, 1, &e), INK_E_INVAL);
    int T1[1] = {1};
    e = (ink_err){0};
    assert_int_equal(ink_batch_eval(bt, a, tpb, T1, NULL, 1, &e), INK_E_INVAL);
    assert_non_null(strstr(e.msg, "out of range"));
    assert_int_equal(ink_batch_eval(bt, a, tp2, T1, NULL, 0, &e), INK_E_INVAL);
    ink_batch *small;
    assert_int_equal(ink_batch_create(&small, m, 2, 256, &e), 0);
    int T3[2] = {2, 1};
    ink_session *two[2] = {a[0], a[1]};
    e = (ink_err){0};
    assert_int_equal(ink_batch_eval(small, two, tp2, T3, NULL, 2, &e), INK_E_INVAL);
    assert_non_null(strstr(e.msg, "exceeds"));
    assert_int_equal(ink_session_pos(a[0]), pos0);
    if (ink_session_compare(a[0], b[0], why, sizeof why)) fail_msg("after refused batches: %s", why);
    ink_batch_free(small);
    ink_batch_free(bt);
    free(la), free(lb), free(ha), free(hb);
    for (int i = 0; i < NS; i++) ink_session_free(a[i]), ink_session_free(b[i]);
    ink_model_free(m);
}

/* Generators stepped in lockstep with their verify rows in one ink_batch_eval (what a server's slots
 * do) emit exactly what each emits alone: plain, fixed K in both modes and auto K; greedy, and
 * sampled with a fixed seed (fixed K: the same uniforms are drawn); with prompts prefilled apart in
 * pieces, and prefilled inside the lockstep with their chunks batched with the others' rounds. */
static void test_generators_batched_equal_alone(void **state)
{
    (void)state;
    tiny_spec sp;
    tiny_default(&sp);
    sp.mtp_depth = 2, sp.n_mtp_local = 1, sp.mtp_file = 1;
    char dir[256];
    assert_int_equal(tu_tmpdir(dir, sizeof dir, "batch_gen"), 0);
    assert_int_equal(tiny_write(dir, &sp), 0);
    ink_model *m = NULL;
    ink_err e = {0};
    ink_model_opts mo = {.n_threads = 2};
    assert_int_equal(ink_model_open(&m, dir, &mo, &e), 0);
    enum { G = 4, N = 40 };
    ink_session *s[G], *f;
    ink_drafter *d[G];
    ink_gen *g[G];
    assert_int_equal(ink_session_create(&f, m, 512, &e), 0);
    for (int i = 0; i < G; i++) {
        assert_int_equal(ink_session_create(&s[i], m, 512, &e), 0);
        assert_int_equal(ink_drafter_open(&d[i], m, dir, &e), 0);
        assert_int_equal(ink_gen_create(&g[i], s[i], &e), 0);
    }
    ink_batch *bt;
    assert_int_equal(ink_batch_create(&bt, m, G * 8, 512, &e), 0);
    for (int pass = 0; pass < 4; pass++) {
        /* passes 2, 3: generators 1 and 3 prefill inside ink_gen_step_many, 7 prompt rows per step,
         * their chunks in the same forwards as the other generators' rounds */
        int temp = pass & 1, merged = pass >> 1;
        ink_gen_opts o[G];
        int32_t p[G][30], out[G][N], ref[N];
        int P[G];
        for (int i = 0; i < G; i++) {
            P[i] = 5 + 7 * i;
            for (int t = 0; t < P[i]; t++) p[i][t] = rnd(ink_model_n_vocab(m) - 8);
            o[i] = (ink_gen_opts){.max_tokens = N, .sampling = {.temp = temp ? 0.8f : 0, .top_p = 1, .seed = 9 + i}};
            o[i].drafter = i == 0 ? NULL : d[i];
            o[i].block_size = i == 1 ? 3 : i == 2 ? 4 : 0; /* gen 3: auto (greedy only: auto K varies the uniforms) */
            o[i].mtp_mode = i == 2 ? INK_MTP_COMPAT : INK_MTP_PER_DEPTH;
            o[i].capture_commit = i % 2;
            if (temp && i == 3) o[i].block_size = 2;
            /* the prefill in pieces of 5 rows (as a server spreads it over steps): same results */
            assert_int_equal(ink_gen_begin(g[i], p[i], P[i], &o[i], out[i], N, NULL, &e), 0);
            if (merged && i % 2) continue;
            int rc, pieces = 0;
            while ((rc = ink_gen_prefill(g[i], 5, &e)) == 1) pieces++;
            assert_int_equal(rc, 0);
            assert_int_equal(pieces, (P[i] - 1) / 5);
        }
        ink_err errs[G];
        memset(errs, 0, sizeof errs);
        while (ink_gen_step_many(bt, g, G, merged ? 7 : 0, errs) > 0) {}
        for (int i = 0; i < G; i++)
            if (errs[i].code) fail_msg("generator %d: %s", i, errs[i].msg);
        for (int i = 0; i < G; i++) {
            int n_out = ink_gen_n_out(g[i]);
            assert_int_equal(ink_gen_finish(g[i]), 0);
            int nr;
            assert_int_equal(ink_generate(f, p[i], P[i], &o[i], ref, N, &nr, NULL, &e), 0);
            assert_int_equal(n_out, nr);
            assert_memory_equal(out[i], ref, (size_t)nr * sizeof(int32_t));
        }
    }
    ink_batch_free(bt);
    for (int i = 0; i < G; i++) ink_gen_free(g[i]), ink_drafter_free(d[i]), ink_session_free(s[i]);
    ink_session_free(f);
    ink_model_free(m);
}

/* Batched drafting across generators (issue 18): drafters made by ink_drafter_share draft together
 * inside ink_gen_step_many (one pass over each depth and the unembedding for every generator).
 * Each generator's rounds (drafts, their margins bit for bit, widths, acceptance) and tokens equal
 * those of the same generator run alone with a drafter of its own: mode P at fixed widths 2..4,
 * and auto K with the width chosen per round by a deterministic hook (so depths go dormant, wake
 * and catch up at different rounds in different generators); greedy and sampled; the whole
 * vocabulary and a draft vocabulary; float and 4-bit (int8 activations) checkpoints. */
typedef struct round_log {
    uint64_t h;
    int salt, rounds;
} round_log;

static void hmix(uint64_t *h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) *h = (*h ^ b[i]) * 1099511628211ull;
}

static void log_round(void *ud, const ink_round *r)
{
    round_log *l = ud;
    hmix(&l->h, &r->n, sizeof r->n), hmix(&l->h, &r->k_eff, sizeof r->k_eff), hmix(&l->h, &r->a, sizeof r->a);
    hmix(&l->h, r->drafts, (size_t)r->n_drafts * sizeof *r->drafts);
    hmix(&l->h, r->draft_margins, (size_t)r->n_drafts * sizeof *r->draft_margins);
    hmix(&l->h, r->emitted, (size_t)r->n_emitted * sizeof *r->emitted);
    l->rounds++;
}

static int pick_width(void *ud, int round, int k_max)
{
    const round_log *l = ud;
    int cycle[] = {4, 4, 1, 2, 4, 3, 1, 1, 1, 4, 2};
    return 1 + (cycle[(round + l->salt) % 11] - 1) % k_max;
}

static void run_shared_drafting(int quant)
{
    tiny_spec sp;
    tiny_default(&sp);
    sp.mtp_depth = 3, sp.n_mtp_local = 1, sp.mtp_file = 1;
    if (quant) sp.qbits = 4, sp.qgroup = 32;
    char dir[256];
    assert_int_equal(tu_tmpdir(dir, sizeof dir, quant ? "batch_share_q4" : "batch_share"), 0);
    assert_int_equal(tiny_write(dir, &sp), 0);
    ink_model *m = NULL;
    ink_err e = {0};
    ink_model_opts mo = {.n_threads = 2};
    assert_int_equal(ink_model_open(&m, dir, &mo, &e), 0);
    enum { G = 5, N = 48 };
    int V = ink_model_n_vocab(m);
    ink_session *s[G], *f;
    ink_gen *g[G];
    assert_int_equal(ink_session_create(&f, m, 512, &e), 0);
    for (int i = 0; i < G; i++) {
        assert_int_equal(ink_session_create(&s[i], m, 512, &e), 0);
        assert_int_equal(ink_gen_create(&g[i], s[i], &e), 0);
    }
    ink_batch *bt;
    assert_int_equal(ink_batch_create(&bt, m, G * 8, 512, &e), 0);
    int32_t vocab[4096];
    int nv = V / 2;
    for (int i = 0; i < nv; i++) vocab[i] = 2 * i + 1;
    for (int pass = 0; pass < 4; pass++) {
        int temp = pass & 1, vpass = pass >> 1;
        ink_drafter *d[G], *alone;
        e = (ink_err){0};
        if (ink_drafter_open(&d[0], m, dir, &e)) fail_msg("%s", e.msg);
        assert_int_equal(ink_drafter_open(&alone, m, dir, &e), 0);
        if (vpass) {
            assert_int_equal(ink_drafter_set_vocab(d[0], vocab, nv, &e), 0);
            assert_int_equal(ink_drafter_set_vocab(alone, vocab, nv, &e), 0);
        }
        for (int i = 1; i < G; i++) assert_int_equal(ink_drafter_share(&d[i], d[i == 4 ? 2 : 0], &e), 0);
        /* a shared drafter keeps its source's vocabulary */
        e = (ink_err){0};
        assert_int_equal(ink_drafter_set_vocab(d[1], vocab, 4, &e), INK_E_INVAL);
        assert_non_null(strstr(e.msg, "shares"));
        ink_gen_opts o[G];
        round_log lg[G];
        int32_t p[G][30], out[G][N], ref[N];
        int P[G];
        for (int i = 0; i < G; i++) {
            P[i] = 6 + 5 * i;
            for (int t = 0; t < P[i]; t++) p[i][t] = rnd(V - 8);
            lg[i] = (round_log){1469598103934665603ull, 3 * i, 0};
            o[i] = (ink_gen_opts){.max_tokens = N, .sampling = {.temp = temp ? 0.8f : 0, .top_p = 1, .seed = 21 + i}};
            o[i].drafter = d[i];
            o[i].block_size = i == 0 ? 2 : i == 1 ? 3 : i == 2 ? 4 : 0; /* 3, 4: auto, widths by the hook */
            if (!o[i].block_size) o[i].choose_block = pick_width;
            o[i].capture_commit = i % 2;
            o[i].on_round = log_round, o[i].ud = &lg[i];
            assert_int_equal(ink_gen_begin(g[i], p[i], P[i], &o[i], out[i], N, NULL, &e), 0);
            int rc;
            while ((rc = ink_gen_prefill(g[i], 0, &e)) == 1) {}
            assert_int_equal(rc, 0);
        }
        ink_err errs[G];
        memset(errs, 0, sizeof errs);
        while (ink_gen_step_many(bt, g, G, 0, errs) > 0) {}
        for (int i = 0; i < G; i++)
            if (errs[i].code) fail_msg("pass %d, generator %d: %s", pass, i, errs[i].msg);
        for (int i = 0; i < G; i++) {
            int n_out = ink_gen_n_out(g[i]);
            assert_int_equal(ink_gen_finish(g[i]), 0);
            if (i) assert_true(ink_drafter_can_batch(d[i], d[0])); /* they did draft together */
            round_log batched = lg[i];
            lg[i] = (round_log){1469598103934665603ull, 3 * i, 0};
            o[i].drafter = alone;
            int nr;
            assert_int_equal(ink_generate(f, p[i], P[i], &o[i], ref, N, &nr, NULL, &e), 0);
            assert_int_equal(n_out, nr);
            assert_memory_equal(out[i], ref, (size_t)nr * sizeof(int32_t));
            assert_true(batched.rounds > 4);
            assert_int_equal(batched.rounds, lg[i].rounds);
            if (batched.h != lg[i].h) fail_msg("pass %d, generator %d: rounds differ batched vs alone", pass, i);
        }
        assert_false(ink_drafter_can_batch(alone, d[0]));
        for (int i = G - 1; i >= 0; i--) ink_drafter_free(d[i]);
        ink_drafter_free(alone);
    }
    ink_batch_free(bt);
    for (int i = 0; i < G; i++) ink_gen_free(g[i]), ink_session_free(s[i]);
    ink_session_free(f);
    ink_model_free(m);
}

static void test_shared_drafters_batched_f32(void **state) { (void)state; run_shared_drafting(0); }
static void test_shared_drafters_batched_q4(void **state) { (void)state; run_shared_drafting(1); }

static void test_batch_f32_one_thread(void **state) { (void)state; run_mix(0, 1); }
static void test_batch_f32_two_threads(void **state) { (void)state; run_mix(0, 2); }
static void test_batch_q4_int8_activations(void **state) { (void)state; run_mix(1, 2); }
static void test_batch_bf16_activations(void **state) { (void)state; run_mix(2, 2); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_f32_one_thread),
        cmocka_unit_test(test_batch_f32_two_threads),
        cmocka_unit_test(test_batch_q4_int8_activations),
        cmocka_unit_test(test_batch_bf16_activations),
        cmocka_unit_test(test_generators_batched_equal_alone),
        cmocka_unit_test(test_shared_drafters_batched_f32),
        cmocka_unit_test(test_shared_drafters_batched_q4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
