/* test_mtp.c — the MTP drafter and the speculative loop: golden block outputs and traces (exact),
 * the greedy invariant for every K in both modes, exact rollback (restore + replay and
 * capture-and-commit, bitwise), drafter detection by tensors, shard selection, and losslessness of
 * speculative sampling (chi-square). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "model/model.h"
#include "sample/sampler.h"
#include "draft/mtp.h"
#include "support/ckpt.h"
#include "support/npy.h"
#include "support/util.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOE "tests/data/golden/tiny-moe"

static ink_model *open_dir(const char *dir, int threads)
{
    ink_model *m = NULL;
    ink_err e = {0};
    ink_model_opts o = {.n_threads = threads};
    if (ink_model_open(&m, dir, &o, &e)) fprintf(stderr, "open %s: %s\n", dir, e.msg);
    return m;
}

static ink_drafter *open_drafter(ink_model *m, const char *dir)
{
    ink_drafter *d = NULL;
    ink_err e = {0};
    if (ink_drafter_open(&d, m, dir, &e)) fprintf(stderr, "drafter %s: %s\n", dir, e.msg);
    return d;
}

static void prompt(int32_t *ids, int T, int V, uint64_t seed)
{
    for (int t = 0; t < T; t++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[t] = (int32_t)((seed >> 33) % (uint64_t)V);
    }
}

/* Runs ink_generate; returns the number of tokens. With hook_on, block size 0 (auto) takes its
 * widths from hook_k (a pseudo-random width per round, from hook_state) instead of the controller. */
static int reuse_flag, hook_on, hook_max, hook_run, hook_cur, hook_plain_until;
static uint64_t hook_state;
static uint64_t hook_rnd(uint64_t n)
{
    hook_state = hook_state * 6364136223846793005ull + 1442695040888963407ull;
    return (hook_state >> 33) % n;
}
/* Widths in runs (1..24 rounds of one width; plain steps 40 % of the time), so depths go dormant
 * under runs of plain steps and restart when a wide run follows; plain steps only before round
 * hook_plain_until. */
static int hook_k(void *ud, int round, int k_max)
{
    (void)ud;
    if (round < hook_plain_until) return 1;
    if (--hook_run <= 0) {
        hook_cur = hook_rnd(10) < 4 ? 1 : 2 + (int)hook_rnd((uint64_t)(k_max > 1 ? k_max - 1 : 1));
        hook_run = 1 + (int)hook_rnd(24);
    }
    return hook_cur < k_max ? hook_cur : k_max;
}

static int gen(ink_session *s, const int32_t *p, int P, ink_drafter *d, int K, int mode, int capture, float temp,
               uint64_t seed, int max, int stop_eos, int eos, int32_t *out, ink_gen_stats *st)
{
    ink_gen_opts o = {0};
    o.reuse_prefix = reuse_flag;
    o.max_tokens = max, o.stop_eos = stop_eos, o.eos = eos;
    o.sampling = (ink_sampling){.temp = temp, .top_p = 1.0f, .seed = seed};
    o.drafter = d, o.block_size = K, o.mtp_mode = mode, o.capture_commit = capture;
    if (hook_on) o.choose_block = hook_k;
    o.block_max = hook_max;
    int n = 0;
    ink_err e = {0};
    int rc = ink_generate(s, p, P, &o, out, max, &n, st, &e);
    if (rc) fprintf(stderr, "generate: %s\n", e.msg);
    assert_int_equal(rc, 0);
    return n;
}

/* ---- golden ----------------------------------------------------------------------------- */

static void test_block_config_marks_local_ids_sliding_and_dense(void **state)
{
    (void)state;
    ink_model *m = open_dir(MOE, 1);
    ink_drafter *d = open_drafter(m, MOE);
    assert_non_null(d);
    assert_int_equal(ink_drafter_n_depth(d), 2);
    assert_int_equal(ink_depth_cfg(d, 0)->sliding, 1); /* mtp_config.local_layer_ids = [0] */
    assert_int_equal(ink_depth_cfg(d, 0)->rel_extent, 8);
    assert_int_equal(ink_depth_cfg(d, 1)->sliding, 0);
    assert_int_equal(ink_depth_cfg(d, 1)->rel_extent, 16);
    assert_int_equal(ink_depth_cfg(d, 1)->log_scale, 1);
    for (int k = 0; k < 2; k++) assert_int_equal(ink_depth_cfg(d, k)->moe, 0);
    assert_int_equal(ink_depth_weights(d, 0)->inter, 128); /* dense width */
    ink_drafter_free(d);
    ink_model_free(m);
}

/* Block outputs and logits vs the reference's generic MtpModel (golden README "MTP"): its position
 * convention (queries at slot + depth + 1) is reproduced by passing pos0 = depth + 1. Tolerance as
 * for hidden states and logits: 1e-4 x max(1, max|ref|). */
static void check_mtp_variant(const char *variant)
{
    ink_model *m = open_dir(MOE, 2);
    ink_drafter *d = open_drafter(m, MOE);
    assert_non_null(d);
    ink_err e = {0};
    assert_int_equal(ink_drafter_prepare(d, 64, &e), 0);
    ink_drafter_reset(d);
    char p[256];
    npy ids, hid, lg, pr;
    snprintf(p, sizeof p, MOE "/mtp_%s_input_ids.npy", variant);
    assert_int_equal(npy_load(p, &ids), 0);
    snprintf(p, sizeof p, MOE "/mtp_%s_output_hidden.npy", variant);
    assert_int_equal(npy_load(p, &hid), 0);
    snprintf(p, sizeof p, MOE "/mtp_%s_logits.npy", variant);
    assert_int_equal(npy_load(p, &lg), 0);
    snprintf(p, sizeof p, MOE "/prompt_ids.npy");
    assert_int_equal(npy_load(p, &pr), 0);
    int D = (int)ids.shape[0], n = (int)ids.shape[1], H = ink_model_n_embd(m), V = ink_model_n_vocab(m);
    /* backbone hidden of the prompt */
    float *bh = malloc((size_t)pr.n * H * 4), *in = malloc((size_t)n * H * 4), *out = malloc((size_t)n * H * 4);
    float *logits = malloc((size_t)V * 4), *tmp = malloc((size_t)3 * H * 4);
    ink_session *s;
    assert_int_equal(ink_session_create(&s, m, 0, &e), 0);
    ink_eval_out o = {0};
    if (!strcmp(variant, "postnorm")) o.hidden_postnorm = bh;
    else o.hidden_prenorm = bh;
    assert_int_equal(ink_session_eval(s, pr.i, (int)pr.n, &o, &e), 0);
    memcpy(in, bh, (size_t)n * H * 4);
    float worst_h = 0, worst_l = 0;
    for (int k = 0; k < D; k++) {
        ink_depth_start_at(d, k, k + 1); /* a fresh cache whose first row sits at position k + 1 */
        ink_depth_forward(d, k, in, ids.i + (size_t)k * n, n, k + 1, 1, out);
        float mref, dh = tu_max_abs_diff(out, hid.f + (size_t)k * n * H, (size_t)n * H, &mref);
        assert_true(dh <= 1e-4f * fmaxf(1, mref));
        if (dh > worst_h) worst_h = dh;
        for (int t = 0; t < n; t++) {
            ink_draft_logits(d, out + (size_t)t * H, 0, logits, tmp);
            float lref, dl = tu_max_abs_diff(logits, lg.f + ((size_t)k * n + t) * V, (size_t)V, &lref);
            assert_true(dl <= 1e-4f * fmaxf(1, lref));
            if (dl > worst_l) worst_l = dl;
        }
        memcpy(in, out, (size_t)n * H * 4);
    }
    printf("  mtp %s: max |err| hidden %.3g, logits %.3g\n", variant, worst_h, worst_l);
    ink_session_free(s);
    free(bh), free(in), free(out), free(logits), free(tmp);
    npy_free(&ids), npy_free(&hid), npy_free(&lg), npy_free(&pr);
    ink_drafter_free(d);
    ink_model_free(m);
}

static void test_mtp_block_outputs_vs_golden(void **state)
{
    (void)state;
    check_mtp_variant("postnorm");
    check_mtp_variant("prenorm");
}

/* The CLI's --trace output equals the golden traces (both modes, K 3 and 4, the real and the
 * fitted head, both rollback methods): every round's n, K_eff, drafts, blocks, a, emitted, bonus. */
static void compare_trace(const char *mine, const char *ref)
{
    FILE *a = fopen(mine, "r"), *b = fopen(ref, "r");
    assert_non_null(a);
    assert_non_null(b);
    char la[4096], lb[4096];
    int rounds = 0;
    const char *keys[] = {"round", "n", "K_eff", "drafts", "draft_blocks", "a", "emitted", "bonus", "bonus_emitted"};
    for (;;) {
        char *ra = fgets(la, sizeof la, a), *rb = fgets(lb, sizeof lb, b);
        assert_true((ra == NULL) == (rb == NULL));
        if (!ra) break;
        json_t *ja = json_loads(la, 0, NULL), *jb = json_loads(lb, 0, NULL);
        assert_non_null(ja);
        assert_non_null(jb);
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            int eq = json_equal(json_object_get(ja, keys[k]), json_object_get(jb, keys[k]));
            if (!eq) fprintf(stderr, "%s round %d: key %s differs\n", mine, rounds, keys[k]);
            assert_true(eq);
        }
        json_decref(ja), json_decref(jb);
        rounds++;
    }
    assert_true(rounds > 10);
    fclose(a), fclose(b);
}

static void test_traces_equal_golden(void **state)
{
    (void)state;
    npy pr;
    assert_int_equal(npy_load(MOE "/prompt_ids.npy", &pr), 0);
    char ids[2048] = "", dir[256], cmd[4096], out[4096], err[4096], mine[512], ref[512];
    for (int i = 0; i < pr.n; i++) snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%d", i ? "," : "", pr.i[i]);
    assert_int_equal(tu_tmpdir(dir, sizeof dir, "trace"), 0);
    const char *heads[2] = {"", "/drafter-fit"}, *modes[2] = {"per-depth", "compat"}, *names[2] = {"modeP", "compatX"};
    for (int h = 0; h < 2; h++)
        for (int md = 0; md < 2; md++)
            for (int K = 3; K <= 4; K++)
                for (int cc = 0; cc < 2; cc++) {
                    snprintf(mine, sizeof mine, "%s/t.jsonl", dir);
                    snprintf(cmd, sizeof cmd,
                             "%s generate -m " MOE " --prompt-ids %s -n 40 --temp 0 --ids --draft-kind mtp "
                             "--draft-model " MOE "%s --mtp-mode %s --draft-block-size %d --trace %s %s",
                             tu_bin(), ids, heads[h], modes[md], K, mine, cc ? "--capture-commit" : "");
                    assert_int_equal(tu_run(cmd, out, sizeof out, err, sizeof err), 0);
                    snprintf(ref, sizeof ref, MOE "/traces%s/%s_K%d.jsonl", h ? "/drafter-fit" : "", names[md], K);
                    compare_trace(mine, ref);
                }
    npy_free(&pr);
}

/* ---- invariants on tiny random models ------------------------------------------------- */

static ink_model *random_target(tiny_spec *sp, char *dir, size_t n)
{
    if (tu_tmpdir(dir, n, "mtp") || tiny_write(dir, sp)) return NULL;
    return open_dir(dir, 2);
}

/* Greedy output with speculation == plain greedy, for K = 1 .. D+2 (and beyond D+2), both modes,
 * both rollback methods, on a 3-depth head with one sliding and two global depths, a prompt longer
 * than the window and one shorter than D. The drafter is random, so rounds are mostly rejections;
 * the fitted golden head above covers multi-token accepts. */
static void test_greedy_invariant_with_speculation(void **state)
{
    (void)state;
    tiny_spec sp;
    tiny_default(&sp);
    sp.mtp_depth = 3, sp.n_mtp_local = 1, sp.mtp_local[0] = 1, sp.mtp_file = 1;
    char dir[256];
    ink_model *m = random_target(&sp, dir, sizeof dir);
    assert_non_null(m);
    ink_drafter *d = open_drafter(m, dir);
    assert_non_null(d);
    ink_err e = {0};
    ink_session *s;
    assert_int_equal(ink_session_create(&s, m, 1024, &e), 0);
    int32_t p[600], plain[64], spec[64];
    int lens[3] = {30, 2, 600}; /* 600: the catch-up pipeline runs many chunks and wraps its rings */
    for (int L = 0; L < 3; L++) {
        prompt(p, lens[L], 120, 77 + L);
        int np = gen(s, p, lens[L], NULL, 0, 0, 0, 0, 0, 48, 0, -1, plain, NULL);
        assert_int_equal(np, 48);
        for (int mode = 0; mode < 2; mode++)
            for (int K = 1; K <= 7; K += tu_emulated() ? K : 1) /* qemu: K 1, 2, 4 */
                for (int cc = 0; cc < 2; cc++) {
                    ink_gen_stats st;
                    int ns = gen(s, p, lens[L], d, K, mode, cc, 0, 0, 48, 0, -1, spec, &st);
                    assert_int_equal(ns, 48);
                    assert_memory_equal(spec, plain, 48 * sizeof(int32_t));
                    if (K > 1) assert_true(st.rounds > 0 && st.drafted > 0);
                }
    }
    ink_session_free(s);
    ink_drafter_free(d);
    ink_model_free(m);
}

/* --no-mmap (ink_model_opts.no_mmap): the weights read into memory give the same run as the mapped
 * ones, token for token and draft for draft (a sharded target, the head in its own file), and they
 * are the model's own: with every safetensors file truncated to nothing after the open (a mapping of
 * it would fault), the read model and its drafter still generate the same tokens. */
static void test_no_mmap_same_run(void **state)
{
    (void)state;
    tiny_spec sp;
    tiny_default(&sp);
    sp.mtp_depth = 3, sp.n_mtp_local = 1, sp.mtp_local[0] = 1, sp.mtp_file = 1, sp.n_shards = 2;
    char dir[256];
    ink_model *m = random_target(&sp, dir, sizeof dir);
    assert_non_null(m);
    ink_drafter *d = open_drafter(m, dir);
    assert_non_null(d);
    ink_model *r = NULL;
    ink_err e = {0};
    ink_model_opts o = {.n_threads = 2, .no_mmap = 1};
    assert_int_equal(ink_model_open(&r, dir, &o, &e), INK_OK);
    ink_drafter *rd = open_drafter(r, dir);
    assert_non_null(rd);
    int32_t p[40], a[48], b[48];
    prompt(p, 40, 120, 5);
    ink_session *s, *rs;
    assert_int_equal(ink_session_create(&s, m, 256, &e), 0);
    assert_int_equal(ink_session_create(&rs, r, 256, &e), 0);
    ink_gen_stats sa, sb;
    assert_int_equal(gen(s, p, 40, d, 4, 0, 1, 0, 0, 48, 0, -1, a, &sa), 48);
    assert_int_equal(gen(rs, p, 40, rd, 4, 0, 1, 0, 0, 48, 0, -1, b, &sb), 48);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(sa.rounds, sb.rounds);
    assert_int_equal(sa.accepted, sb.accepted);
    assert_true(sa.drafted > 0);
    ink_session_free(s);
    ink_drafter_free(d);
    ink_model_free(m);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "for f in '%s'/*.safetensors; do : > \"$f\"; done", dir);
    assert_int_equal(system(cmd), 0);
    memset(b, 0, sizeof b);
    assert_int_equal(gen(rs, p, 40, rd, 4, 0, 1, 0, 0, 48, 0, -1, b, &sb), 48);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(sa.accepted, sb.accepted);
    ink_session_free(rs);
    ink_drafter_free(rd);
    ink_model_free(r);
}

/* Auto K (issue 16): whatever widths the controller picks, round by round, greedy output is the
 * plain output; in both modes, both rollbacks, short and long prompts (rings wrap, depths that a
 * narrow round does not draft with lag and catch up in batches). Once with widths drawn at random
 * from 1..8 by the test hook, once with the real controller. */
static void test_greedy_invariant_under_auto(void **state)
{
    (void)state;
    tiny_spec sp;
    tiny_default(&sp);
    sp.mtp_depth = 3, sp.n_mtp_local = 1, sp.mtp_local[0] = 1, sp.mtp_file = 1;
    char dir[256];
    ink_model *m = random_target(&sp, dir, sizeof dir);
    assert_non_null(m);
    ink_drafter *d = open_drafter(m, dir);
    assert_non_null(d);
    ink_err e = {0};
    ink_session *s;
    assert_int_equal(ink_session_create(&s, m, 1024, &e), 0);
    int32_t p[600], plain[200], spec[200];
    int lens[3] = {30, 2, 600};
    for (int L = 0; L < 3; L++) {
        prompt(p, lens[L], 120, 91 + L);
        int np = gen(s, p, lens[L], NULL, 0, 0, 0, 0, 0, 200, 0, -1, plain, NULL);
        assert_int_equal(np, 200);
        for (int mode = 0; mode < 2; mode++)
            for (int cc = 0; cc < 2; cc++)
                for (int h = 0; h < 2; h++) {
                    ink_gen_stats st;
                    hook_on = h, hook_max = 8, hook_state = 5 + (uint64_t)(L * 8 + mode * 4 + cc * 2), hook_run = 0;
                    int ns = gen(s, p, lens[L], d, 0, mode, cc, 0, 0, 200, 0, -1, spec, &st);
                    hook_on = 0, hook_max = 0;
                    assert_int_equal(ns, 200);
                    assert_memory_equal(spec, plain, 200 * sizeof(int32_t));
                    assert_int_equal(st.auto_block, 1);
                    int widths = 0, rounds = 0, kmax = mode == INK_MTP_COMPAT ? 8 : sp.mtp_depth + 1;
                    for (int k = 1; k <= INK_MAX_BLOCK; k++) {
                        widths += st.k_hist[k] > 0, rounds += st.k_hist[k];
                        if (k > kmax) assert_int_equal(st.k_hist[k], 0);
                    }
                    assert_int_equal(st.ctl_kmax, kmax);
                    /* every round is counted once: plain steps + speculative rounds */
                    assert_int_equal(rounds, st.k_hist[1] + st.rounds);
                    if (h) assert_true(widths >= (mode == INK_MTP_COMPAT ? 6 : 4)); /* the hook's widths were used */
                }
    }
    ink_session_free(s);
    ink_drafter_free(d);
    ink_model_free(m);
}

/* bf16 activations (--activations bf16) keep the guarantee: a row's numbers do not depend on how
 * many rows share the forward, so greedy output with speculation (K = 1..7 and auto, both modes, both
 * rollbacks) is the plain output of the same model and activations; BF16 weights, two threads. */
static void test_greedy_invariant_bf16_activations(void **state)
{
    (void)state;
    tiny_spec sp;
    tiny_default(&sp);
    sp.mtp_depth = 3, sp.n_mtp_local = 1, sp.mtp_local[0] = 1, sp.mtp_file = 1, sp.bf16 = 1;
    char dir[256];
    assert_int_equal(tu_tmpdir(dir, sizeof dir, "mtp_bf16x"), 0);
    assert_int_equal(tiny_write(dir, &sp), 0);
    ink_model *m = NULL, *mf = NULL;
    ink_err e = {0};
    ink_model_opts o = {.n_threads = 2, .activations = INK_ACT_BF16}, of = {.n_threads = 2};
    assert_int_equal(ink_model_open(&m, dir, &o, &e), 0);
    assert_int_equal(ink_model_open(&mf, dir, &of, &e), 0);
    assert_int_equal(ink_model_bf16_activations(m), 1);
    ink_drafter *d = open_drafter(m, dir);
    assert_non_null(d);
    ink_session *s, *sf;
    assert_int_equal(ink_session_create(&s, m, 1024, &e), 0);
    assert_int_equal(ink_session_create(&sf, mf, 1024, &e), 0);
    int32_t p[300], plain[64], spec[64];
    prompt(p, 300, 120, 4242);
    int np = gen(s, p, 300, NULL, 0, 0, 0, 0, 0, 64, 0, -1, plain, NULL);
    assert_int_equal(np, 64);
    /* the path really ran: the prompt's logits differ from the exact path's somewhere */
    int V = ink_model_n_vocab(m), differ = 0;
    float *la = malloc((size_t)V * sizeof *la), *lb = malloc((size_t)V * sizeof *lb);
    ink_session_reset(s), ink_session_reset(sf);
    ink_eval_out oa = {.logits = la}, ob = {.logits = lb};
    assert_int_equal(ink_session_eval(s, p, 300, &oa, &e), 0);
    assert_int_equal(ink_session_eval(sf, p, 300, &ob, &e), 0);
    for (int i = 0; i < V; i++) differ += la[i] != lb[i];
    assert_true(differ > 0);
    for (int mode = 0; mode < 2; mode++)
        for (int K = 0; K <= 7; K++)
            for (int cc = 0; cc < 2; cc++) {
                int ns = gen(s, p, 300, d, K, mode, cc, 0, 0, 64, 0, -1, spec, NULL);
                assert_int_equal(ns, 64);
                assert_memory_equal(spec, plain, 64 * sizeof(int32_t));
            }
    free(la), free(lb);
    ink_session_free(s), ink_session_free(sf);
    ink_drafter_free(d);
    ink_model_free(m), ink_model_free(mf);
}

/* The drafts of the first round after a long prompt (the catch-up pipeline: many chunks, wrapped
 * rings) equal a direct computation: every depth run once over the whole sequence in order. */
static int32_t first_drafts[INK_MAX_DEPTH];
static float first_margins[INK_MAX_DEPTH];
static int n_first_drafts;
static void grab_round(void *ud, const ink_round *r)
{
    (void)ud;
    if (r->round == 0) {
        n_first_drafts = r->n_drafts;
        memcpy(first_drafts, r->drafts, (size_t)r->n_drafts * sizeof(int32_t));
        memcpy(first_margins, r->draft_margins, (size_t)r->n_drafts * sizeof(float));
    }
}

static float top_margin(const float *l, int n)
{
    int b = ink_argmax(l, n);
    float s2 = -INFINITY;
    for (int i = 0; i < n; i++)
        if (i != b && l[i] > s2) s2 = l[i];
    return l[b] - s2;
}

static void test_long_prompt_drafts_equal_direct(void **state)
{
    (void)state;
    tiny_spec sp;
    tiny_default(&sp);
    sp.mtp_depth = 3, sp.n_mtp_local = 1, sp.mtp_local[0] = 1, sp.mtp_file = 1;
    char dir[256];
    ink_model *m = random_target(&sp, dir, sizeof dir);
    ink_drafter *d = open_drafter(m, dir);
    ink_err e = {0};
    ink_session *s;
    assert_int_equal(ink_session_create(&s, m, 1024, &e), 0);
    enum { P = 600 };
    int H = ink_model_n_embd(m), V = ink_model_n_vocab(m);
    int32_t seq[P + 8], out[8];
    prompt(seq, P, V, 4242);
    ink_gen_opts o = {.max_tokens = 2, .drafter = d, .block_size = 5, .on_round = grab_round};
    int n = 0;
    assert_int_equal(ink_generate(s, seq, P, &o, out, 8, &n, NULL, &e), 0);
    assert_int_equal(n_first_drafts, 1); /* budget 2: one round with one draft */
    o.max_tokens = 8;
    assert_int_equal(ink_generate(s, seq, P, &o, out, 8, &n, NULL, &e), 0);
    assert_int_equal(n_first_drafts, 3);
    /* direct: target hidden of the whole prompt, x_P = argmax, then each depth over rows 0..P-1 */
    float *hid = malloc((size_t)P * H * 4), *a = malloc((size_t)P * H * 4), *b = malloc((size_t)P * H * 4);
    float *lg = malloc((size_t)V * 4), *tmp = malloc((size_t)3 * H * 4);
    ink_session *r;
    assert_int_equal(ink_session_create(&r, m, 1024, &e), 0);
    ink_eval_out eo = {.logits = lg, .hidden_postnorm = hid};
    assert_int_equal(ink_session_eval(r, seq, P, &eo, &e), 0);
    seq[P] = ink_argmax(lg, V);
    assert_int_equal(out[0], seq[P]);
    ink_drafter_reset(d);
    const float *in = hid;
    for (int k = 0; k < 3; k++) {
        float *o2 = k % 2 ? b : a;
        ink_depth_forward(d, k, in, seq + k + 1, P, 0, 1, o2);
        ink_draft_logits(d, o2 + (size_t)(P - 1) * H, 0, lg, tmp);
        seq[P + 1 + k] = ink_argmax(lg, V);
        assert_int_equal(first_drafts[k], seq[P + 1 + k]);
        /* the same rows computed in another chunking: bitwise the same logits, so the same margin */
        assert_true(first_margins[k] == top_margin(lg, V));
        in = o2;
    }
    ink_session_free(r);
    ink_session_free(s);
    free(hid), free(a), free(b), free(lg), free(tmp);
    ink_drafter_free(d);
    ink_model_free(m);
}

/* Verify K = 4, accept 1, roll back, decode 3 more: every conv state and attendable KV row equals a
 * session that never speculated, bitwise, for restore + replay and for capture-and-commit. */
static void test_rollback_replay_restores_conv_and_kv_exactly(void **state)
{
    (void)state;
    tiny_spec sp;
    tiny_default(&sp);
    char dir[256];
    ink_model *m = random_target(&sp, dir, sizeof dir);
    assert_non_null(m);
    ink_err e = {0};
    int32_t p[20], verify[4], more[3];
    prompt(p, 20, 120, 4);
    prompt(verify, 4, 120, 5);
    prompt(more, 3, 120, 6);
    for (int method = 0; method < 2; method++) {
        ink_session *a, *b;
        ink_snapshot *snap;
        assert_int_equal(ink_session_create(&a, m, 128, &e), 0);
        assert_int_equal(ink_session_create(&b, m, 128, &e), 0);
        assert_int_equal(ink_snapshot_create(&snap, a, &e), 0);
        if (method) assert_int_equal(ink_session_set_capture(a, 1, &e), 0);
        assert_int_equal(ink_session_eval(a, p, 20, NULL, &e), 0);
        ink_session_save(a, snap);
        assert_int_equal(ink_session_eval(a, verify, 4, NULL, &e), 0); /* x_n, d1, d2, d3 */
        /* accept 1 draft: keep x_n and d1 */
        if (method) assert_int_equal(ink_session_commit(a, snap, 2, &e), 0);
        else {
            assert_int_equal(ink_session_restore(a, snap, &e), 0);
            assert_int_equal(ink_session_eval(a, verify, 2, NULL, &e), 0);
        }
        assert_int_equal(ink_session_eval(a, more, 3, NULL, &e), 0);
        assert_int_equal(ink_session_eval(b, p, 20, NULL, &e), 0);
        assert_int_equal(ink_session_eval(b, verify, 2, NULL, &e), 0);
        assert_int_equal(ink_session_eval(b, more, 3, NULL, &e), 0);
        char why[128];
        int diff = ink_session_compare(a, b, why, sizeof why);
        if (diff) fprintf(stderr, "method %d: %s\n", method, why);
        assert_int_equal(diff, 0);
        ink_session_free(a), ink_session_free(b);
        ink_snapshot_free(snap);
    }
    ink_model_free(m);
}

/* EOS inside an accepted block stops there; max_tokens mid-block is honoured. With the fitted head,
 * rounds accept several drafts; pick the EOS as the 9th greedy token. */
static void test_eos_and_budget_inside_blocks(void **state)
{
    (void)state;
    ink_model *m = open_dir(MOE, 1);
    ink_drafter *d = open_drafter(m, MOE "/drafter-fit");
    assert_non_null(d);
    npy pr;
    assert_int_equal(npy_load(MOE "/prompt_ids.npy", &pr), 0);
    ink_err e = {0};
    ink_session *s;
    assert_int_equal(ink_session_create(&s, m, 0, &e), 0);
    int32_t plain[40], spec[40];
    gen(s, pr.i, (int)pr.n, NULL, 0, 0, 0, 0, 0, 40, 0, -1, plain, NULL);
    for (int stop_at = 1; stop_at < 20; stop_at++) {
        int eos = plain[stop_at];
        int first = 0;
        while (plain[first] != eos) first++;
        for (int mode = 0; mode < 2; mode++) {
            int n = gen(s, pr.i, (int)pr.n, d, 4, mode, 0, 0, 0, 40, 1, eos, spec, NULL);
            assert_int_equal(n, first + 1);
            assert_memory_equal(spec, plain, (size_t)n * 4);
        }
        int n = gen(s, pr.i, (int)pr.n, d, 4, 0, 0, 0, 0, stop_at, 0, -1, spec, NULL);
        assert_int_equal(n, stop_at);
        assert_memory_equal(spec, plain, (size_t)n * 4);
    }
    ink_session_free(s);
    npy_free(&pr);
    ink_drafter_free(d);
    ink_model_free(m);
}

/* A directory with mtp_config but no model.mtp.* tensors is not a drafter; the error says so. A
 * sharded full checkpoint gives its drafter from the MTP shard alone (the others are corrupted). */
static void test_load_drafter_detects_mtp_tensors_not_config_flag(void **state)
{
    (void)state;
    tiny_spec sp;
    tiny_default(&sp);
    sp.mtp_depth = 2; /* config says 2 depths ... */
    char dir[256], p[400];
    assert_int_equal(tu_tmpdir(dir, sizeof dir, "noflag"), 0);
    tiny_spec w = sp;
    w.mtp_depth = 0; /* ... but no tensors are written */
    assert_int_equal(tiny_write(dir, &w), 0);
    snprintf(p, sizeof p, "%s/config.json", dir);
    json_t *root = json_load_file(p, 0, NULL);
    json_object_set_new(root, "mtp_config", json_pack("{s:i,s:[i]}", "num_nextn_predict_layers", 2, "local_layer_ids", 0));
    json_dump_file(root, p, 0);
    json_decref(root);
    ink_model *m = open_dir(dir, 1);
    assert_non_null(m);
    ink_drafter *d = NULL;
    ink_err e = {0};
    /* a head-only directory (config.json + mtp.safetensors) is refused as a target, and says why */
    ink_model *bad = NULL;
    assert_int_equal(ink_model_open(&bad, MOE "/drafter-fit", NULL, &e), INK_E_FORMAT);
    assert_non_null(strstr(e.msg, "holds only an MTP head"));
    memset(&e, 0, sizeof e);
    assert_int_equal(ink_drafter_open(&d, m, dir, &e), INK_E_ABSENT);
    assert_non_null(strstr(e.msg, "no model.mtp.layers.* tensors"));
    assert_non_null(strstr(e.msg, "config flag alone"));
    ink_model_free(m);
    /* sharded checkpoint, MTP tensors inside shard 2 (indexed): the drafter opens only that shard */
    sp.n_shards = 2, sp.n_mtp_local = 1, sp.mtp_file = 0;
    assert_int_equal(tu_tmpdir(dir, sizeof dir, "shard"), 0);
    assert_int_equal(tiny_write(dir, &sp), 0);
    m = open_dir(dir, 1);
    assert_non_null(m);
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    FILE *f = fopen(p, "w");
    fputs("not a safetensors file", f);
    fclose(f);
    memset(&e, 0, sizeof e);
    assert_int_equal(ink_drafter_open(&d, m, dir, &e), INK_OK);
    assert_int_equal(ink_drafter_n_files(d), 1);
    assert_int_equal(ink_drafter_n_depth(d), 2);
    ink_drafter_free(d);
    /* a drafter for another target shape is refused clearly */
    tiny_spec other = sp;
    other.hidden = 32, other.n_shards = 1, other.mtp_file = 1;
    assert_int_equal(tu_tmpdir(dir, sizeof dir, "other"), 0);
    assert_int_equal(tiny_write(dir, &other), 0);
    memset(&e, 0, sizeof e);
    assert_int_equal(ink_drafter_open(&d, m, dir, &e), INK_E_INVAL);
    assert_non_null(strstr(e.msg, "does not fit the target: hidden 32 vs 64"));
    ink_model_free(m);
}

/* Two-sample chi-square of equal-size samples ca, cb over V categories (expected count >= 5 per
 * sample; the rest pooled into one category); *df = degrees of freedom. */
static double chi2_two_sample(const int *ca, const int *cb, int V, int *df)
{
    double chi = 0, pa = 0, pb = 0;
    *df = -1;
    for (int v = 0; v < V; v++) {
        if (ca[v] + cb[v] < 10) {
            pa += ca[v], pb += cb[v];
            continue;
        }
        double ex = (ca[v] + cb[v]) / 2.0;
        chi += (ca[v] - ex) * (ca[v] - ex) / ex + (cb[v] - ex) * (cb[v] - ex) / ex;
        (*df)++;
    }
    if (pa + pb >= 10) {
        double ex = (pa + pb) / 2;
        chi += (pa - ex) * (pa - ex) / ex + (pb - ex) * (pb - ex) / ex;
        (*df)++;
    }
    return chi;
}

/* Lossless speculative sampling: the first sampled tokens (positions 2 and 3, i.e. produced by
 * verify rounds) have the same distribution with and without MTP. Chi-square over the tokens with
 * expected count >= 5 (others pooled); 4000 seeded runs each (500 under an emulator, tu_scaled); the test fails only if the statistic
 * exceeds the 0.999 quantile (df <= 60: chi2 < 2.4 df + 15 bounds it), so a correct implementation
 * fails it with probability about 1e-3 and the fixed seeds make the outcome deterministic. A biased
 * rule ("accept if the draft equals the target's sample") would move the distribution far more. */
static void test_speculative_sampling_matches_plain(void **state)
{
    (void)state;
    tiny_spec sp;
    tiny_default(&sp);
    sp.vocab = 40, sp.vocab_unpadded = 32, sp.mtp_depth = 2, sp.n_mtp_local = 1, sp.mtp_file = 1, sp.wscale = 0.05f;
    char dir[256];
    ink_model *m = random_target(&sp, dir, sizeof dir);
    assert_non_null(m);
    ink_drafter *d = open_drafter(m, dir);
    ink_err e = {0};
    ink_session *s;
    assert_int_equal(ink_session_create(&s, m, 64, &e), 0);
    int32_t p[6] = {1, 5, 9, 3, 7, 2}, out[4];
    enum { V = 32 };
    const int RUNS = tu_scaled(4000, 8, 500); /* under qemu 500: same statistic, less power */
    for (int pos = 1; pos <= 3; pos++) {
        int ca[V] = {0}, cb[V] = {0}, cc[V] = {0};
        int accepted = 0, accepted_auto = 0;
        for (int r = 0; r < RUNS; r++) {
            gen(s, p, 6, NULL, 0, 0, 0, 1.5f, 1000 + r, pos + 1, 0, -1, out, NULL);
            ca[out[pos]]++;
            ink_gen_stats st;
            gen(s, p, 6, d, 3, r % 2, 0, 1.5f, 500000 + r, pos + 1, 0, -1, out, &st);
            cb[out[pos]]++;
            accepted += st.accepted;
            /* varying K (issue 16): a width drawn per round from 1..4, as auto would vary it */
            hook_on = 1, hook_max = 4, hook_state = 77 + (uint64_t)r, hook_run = 0;
            gen(s, p, 6, d, 0, r % 2, r % 3 == 0, 1.5f, 900000 + r, pos + 1, 0, -1, out, &st);
            hook_on = 0, hook_max = 0;
            cc[out[pos]]++;
            accepted_auto += st.accepted;
        }
        int df, df2;
        double chi = chi2_two_sample(ca, cb, V, &df), chi_auto = chi2_two_sample(ca, cc, V, &df2);
        printf("  position %d: chi2 %.2f with %d degrees of freedom, %d drafts accepted; varying K: chi2 %.2f (%d df), "
               "%d accepted\n", pos, chi, df, accepted, chi_auto, df2, accepted_auto);
        assert_true(df >= 5 && df2 >= 5);
        assert_true(accepted > RUNS / 20 && accepted_auto > RUNS / 20); /* the accept path is exercised */
        assert_true(chi < 2.4 * df + 15);
        assert_true(chi_auto < 2.4 * df2 + 15);
    }
    ink_session_free(s);
    ink_drafter_free(d);
    ink_model_free(m);
}

/* Lossless with restarted depths (auto K): 18 plain steps let every depth go dormant, then rounds
 * of widths 2..4 restart them from a shortened history; the token at position 26 has the plain
 * distribution (chi-square as above, 3000 runs). */
static void test_sampling_lossless_after_dormancy(void **state)
{
    (void)state;
    tiny_spec sp;
    tiny_default(&sp);
    sp.vocab = 40, sp.vocab_unpadded = 32, sp.mtp_depth = 2, sp.n_mtp_local = 1, sp.mtp_file = 1, sp.wscale = 0.05f;
    char dir[256];
    ink_model *m = random_target(&sp, dir, sizeof dir);
    assert_non_null(m);
    ink_drafter *d = open_drafter(m, dir);
    ink_err e = {0};
    ink_session *s;
    assert_int_equal(ink_session_create(&s, m, 64, &e), 0);
    int32_t p[6] = {1, 5, 9, 3, 7, 2}, out[27];
    enum { V = 32, POS = 26 };
    const int RUNS = tu_scaled(3000, 6, 500);
    int ca[V] = {0}, cb[V] = {0}, drafted = 0;
    for (int r = 0; r < RUNS; r++) {
        gen(s, p, 6, NULL, 0, 0, 0, 1.5f, 7000 + r, POS + 1, 0, -1, out, NULL);
        ca[out[POS]]++;
        ink_gen_stats st;
        hook_on = 1, hook_max = 4, hook_state = 31 + (uint64_t)r, hook_run = 0, hook_plain_until = 18;
        gen(s, p, 6, d, 0, r % 2, r % 3 == 0, 1.5f, 800000 + r, POS + 1, 0, -1, out, &st);
        hook_on = 0, hook_max = 0, hook_plain_until = 0;
        assert_true(st.k_hist[1] >= 18);
        cb[out[POS]]++;
        drafted += st.drafted;
    }
    int df;
    double chi = chi2_two_sample(ca, cb, V, &df);
    printf("  position %d after dormancy: chi2 %.2f with %d degrees of freedom, %d drafts\n", POS, chi, df, drafted);
    assert_true(df >= 5 && drafted > RUNS);
    assert_true(chi < 2.4 * df + 15);
    ink_session_free(s);
    ink_drafter_free(d);
    ink_model_free(m);
}

/* Multi-turn prefix reuse: a second prompt that extends what the session consumed (prompt + the
 * first reply + new tokens) is served from the session's state, and gives exactly the output of a
 * fresh session, with and without MTP, in both modes, also after an EOS stop. */
static void test_prefix_reuse_equals_fresh(void **state)
{
    (void)state;
    ink_model *m = open_dir(MOE, 1);
    ink_drafter *d = open_drafter(m, MOE "/drafter-fit");
    npy pr;
    assert_int_equal(npy_load(MOE "/prompt_ids.npy", &pr), 0);
    ink_err e = {0};
    ink_session *s, *f;
    assert_int_equal(ink_session_create(&s, m, 0, &e), 0);
    assert_int_equal(ink_session_create(&f, m, 0, &e), 0);
    int32_t first[24], p2[128], a[30], b[30];
    for (int variant = 0; variant < 4; variant++) {
        ink_drafter *dd = variant == 0 ? NULL : d;
        int mode = variant == 2 ? INK_MTP_COMPAT : INK_MTP_PER_DEPTH;
        int stop = variant == 3;
        reuse_flag = 1;
        int n1 = gen(s, pr.i, (int)pr.n, dd, 4, mode, 0, 0, 0, 24, stop, stop ? 232 : -1, first, NULL);
        int P2 = 0;
        for (int i = 0; i < pr.n; i++) p2[P2++] = pr.i[i];
        for (int i = 0; i < n1; i++) p2[P2++] = first[i];
        p2[P2++] = 7, p2[P2++] = 9, p2[P2++] = 11;
        ink_gen_stats st;
        int na = gen(s, p2, P2, dd, 4, mode, 0, 0, 0, 30, 0, -1, a, &st);
        assert_int_equal(st.reused_tokens, (int)pr.n + n1 - 1);
        reuse_flag = 0;
        int nb = gen(f, p2, P2, dd, 4, mode, 0, 0, 0, 30, 0, -1, b, NULL);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, (size_t)na * 4);
        char why[128];
        assert_int_equal(ink_session_compare(s, f, why, sizeof why), 0);
        /* a prompt that does not extend the session is recomputed from scratch */
        reuse_flag = 1;
        p2[5] = (p2[5] + 1) % 380;
        gen(s, p2, P2, dd, 4, mode, 0, 0, 0, 5, 0, -1, a, &st);
        assert_int_equal(st.reused_tokens, 0);
    }
    reuse_flag = 0;
    ink_session_free(s), ink_session_free(f);
    npy_free(&pr);
    ink_drafter_free(d);
    ink_model_free(m);
}

/* The prompt cache (issue 18): a repeated prompt resumes from the checkpoint at P - 1, a prompt
 * sharing a prefix from the latest checkpoint at or below the common prefix (here 256), one that
 * differs early from scratch; the outputs and the final session state (conv states, every
 * attendable KV row) equal a fresh session's, bitwise; without drafter, and with auto K in both
 * modes (drafter depths restart after a resume). */
static void test_prompt_cache_resumes_exactly(void **state)
{
    (void)state;
    tiny_spec sp;
    tiny_default(&sp);
    sp.mtp_depth = 2, sp.n_mtp_local = 1, sp.mtp_file = 1; /* 5 of 6 layers sliding, window 8 */
    char dir[256];
    ink_model *m = random_target(&sp, dir, sizeof dir);
    assert_non_null(m);
    ink_drafter *d = open_drafter(m, dir);
    assert_non_null(d);
    ink_err e = {0};
    ink_session *s, *f;
    assert_int_equal(ink_session_create(&s, m, 1024, &e), 0);
    assert_int_equal(ink_session_create(&f, m, 1024, &e), 0);
    assert_true(ink_session_checkpoint_bytes(s) > 0);
    int32_t p1[300], p2[290], p3[300], a[40], b[40];
    prompt(p1, 300, 120, 5);
    memcpy(p2, p1, 270 * sizeof *p2);
    prompt(p2 + 270, 20, 120, 6);
    memcpy(p3, p1, sizeof p3);
    p3[5] = (p3[5] + 1) % 120;
    char why[128];
    for (int variant = 0; variant < 4; variant++) {
        ink_drafter *dd = variant == 0 || variant == 3 ? NULL : d;
        int mode = variant == 2 ? INK_MTP_COMPAT : INK_MTP_PER_DEPTH;
        assert_int_equal(ink_session_set_checkpoints(s, variant == 3 ? 0 : 4, &e), 0);
        ink_session_reset(s);
        ink_gen_stats st;
        reuse_flag = 1;
        int n1 = gen(s, p1, 300, dd, 0, mode, 1, 0, 0, 40, 0, -1, a, &st);
        assert_int_equal(st.reused_tokens, 0);
        struct { const int32_t *p; int P, want; } cases[] = {{p1, 300, 299}, {p2, 290, 256}, {p3, 300, 0}, {p1, 300, 0}};
        for (int c = 0; c < 4; c++) {
            reuse_flag = 1;
            int na = gen(s, cases[c].p, cases[c].P, dd, 0, mode, 1, 0, 0, 40, 0, -1, a, &st);
            assert_int_equal(st.reused_tokens, variant == 3 ? 0 : cases[c].want);
            reuse_flag = 0;
            int nb = gen(f, cases[c].p, cases[c].P, dd, 0, mode, 1, 0, 0, 40, 0, -1, b, NULL);
            assert_int_equal(na, nb);
            assert_int_equal(na, n1);
            assert_memory_equal(a, b, (size_t)na * 4);
            assert_int_equal(ink_session_compare(s, f, why, sizeof why), 0);
        }
    }
    reuse_flag = 0;
    ink_session_free(s), ink_session_free(f);
    ink_drafter_free(d);
    ink_model_free(m);
}

/* ---- draft vocabulary ------------------------------------------------------------------- */

static const unsigned char *dv_allowed;
static int dv_bad, dv_rounds, dv_accepted;
static void dv_round(void *ud, const ink_round *r)
{
    (void)ud;
    dv_rounds++, dv_accepted += r->a;
    for (int i = 0; i < r->n_drafts; i++) dv_bad += !dv_allowed[r->drafts[i]];
}

/* With a draft vocabulary every draft is in the set, and greedy output still equals plain greedy
 * (K = 2..6, both modes, both rollback methods) on the fitted golden head, so rounds accept. */
static void test_draft_vocab_keeps_greedy_output(void **state)
{
    (void)state;
    ink_model *m = open_dir(MOE, 2);
    assert_non_null(m);
    ink_drafter *d = open_drafter(m, MOE);
    assert_non_null(d);
    int V = ink_model_n_vocab(m);
    int32_t ids[4096];
    unsigned char allowed[4096] = {0};
    int n = 0;
    for (int i = V - 1; i >= 0; i--) /* every id but each third one, in a scrambled order */
        if (i % 3 != 1) ids[n++] = i, allowed[i] = 1;
    ink_err e = {0};
    assert_int_equal(ink_drafter_set_vocab(d, ids, n, &e), 0);
    dv_allowed = allowed;
    ink_session *s;
    assert_int_equal(ink_session_create(&s, m, 256, &e), 0);
    int32_t p[40], plain[40], spec[40];
    prompt(p, 12, V, 5);
    int np = gen(s, p, 12, NULL, 0, 0, 0, 0, 0, 40, 0, -1, plain, NULL);
    assert_int_equal(np, 40);
    for (int mode = 0; mode < 2; mode++)
        for (int K = 2; K <= 6; K++)
            for (int cc = 0; cc < 2; cc++) {
                ink_gen_opts o = {0};
                o.max_tokens = 40, o.drafter = d, o.block_size = K, o.mtp_mode = mode, o.capture_commit = cc;
                o.on_round = dv_round;
                int ns = 0;
                dv_bad = dv_rounds = dv_accepted = 0;
                assert_int_equal(ink_generate(s, p, 12, &o, spec, 40, &ns, NULL, &e), 0);
                assert_int_equal(ns, 40);
                assert_memory_equal(spec, plain, 40 * sizeof(int32_t));
                assert_true(dv_rounds > 0);
                assert_int_equal(dv_bad, 0);
                if (K == 2) assert_true(dv_accepted > 0); /* the fitted head still lands drafts */
            }
    /* back to the whole vocabulary */
    assert_int_equal(ink_drafter_set_vocab(d, NULL, 0, &e), 0);
    ink_session_free(s);
    ink_drafter_free(d);
    ink_model_free(m);
}

/* Speculative sampling with a draft vocabulary (q = 0 outside it) is still lossless: chi-square
 * against plain sampling, at a position the target often gives to tokens outside the set. */
static void test_draft_vocab_sampling_is_lossless(void **state)
{
    (void)state;
    tiny_spec sp;
    tiny_default(&sp);
    sp.vocab = 40, sp.vocab_unpadded = 32, sp.mtp_depth = 2, sp.n_mtp_local = 1, sp.mtp_file = 1, sp.wscale = 0.05f;
    char dir[256];
    ink_model *m = random_target(&sp, dir, sizeof dir);
    assert_non_null(m);
    ink_drafter *d = open_drafter(m, dir);
    assert_non_null(d);
    int32_t set[16];
    for (int i = 0; i < 16; i++) set[i] = 2 * i; /* the even ids */
    ink_err e = {0};
    assert_int_equal(ink_drafter_set_vocab(d, set, 16, &e), 0);
    ink_session *s;
    assert_int_equal(ink_session_create(&s, m, 64, &e), 0);
    int32_t p[6] = {1, 5, 9, 3, 7, 2}, out[4];
    enum { V = 32 };
    const int RUNS = tu_scaled(3000, 6, 500);
    int ca[V] = {0}, cb[V] = {0}, accepted = 0, odd = 0;
    for (int r = 0; r < RUNS; r++) {
        gen(s, p, 6, NULL, 0, 0, 0, 1.5f, 7000 + r, 2, 0, -1, out, NULL);
        ca[out[1]]++;
        ink_gen_stats st;
        gen(s, p, 6, d, 3, r % 2, 1, 1.5f, 900000 + r, 2, 0, -1, out, &st);
        cb[out[1]]++;
        accepted += st.accepted, odd += out[1] % 2;
    }
    int df;
    double chi = chi2_two_sample(ca, cb, V, &df);
    printf("  draft vocabulary of 16/32: chi2 %.2f with %d degrees of freedom, %d drafts accepted, %d odd tokens\n",
           chi, df, accepted, odd);
    assert_true(df >= 5);
    assert_true(accepted > RUNS / 20);
    assert_true(odd > RUNS / 10); /* tokens outside the set are still emitted (by the residual) */
    assert_true(chi < 2.4 * df + 15);
    ink_session_free(s);
    ink_drafter_free(d);
    ink_model_free(m);
}

/* Bad draft vocabularies are refused with the reason, and leave the drafter as it was. */
static void test_draft_vocab_errors(void **state)
{
    (void)state;
    ink_model *m = open_dir(MOE, 1);
    assert_non_null(m);
    ink_drafter *d = open_drafter(m, MOE);
    assert_non_null(d);
    int V = ink_model_n_vocab(m);
    ink_err e = {0};
    int32_t dup[3] = {1, 2, 1}, big[2] = {0, V}, neg[1] = {-1};
    assert_int_equal(ink_drafter_set_vocab(d, dup, 3, &e), INK_E_INVAL);
    assert_non_null(strstr(e.msg, "listed twice"));
    e = (ink_err){0};
    assert_int_equal(ink_drafter_set_vocab(d, big, 2, &e), INK_E_INVAL);
    assert_non_null(strstr(e.msg, "outside the unpadded vocabulary"));
    e = (ink_err){0};
    assert_int_equal(ink_drafter_set_vocab(d, neg, 1, &e), INK_E_INVAL);
    e = (ink_err){0};
    assert_int_equal(ink_drafter_set_vocab(d, dup, V + 1, &e), INK_E_INVAL);
    char dir[256], path[300];
    assert_int_equal(tu_tmpdir(dir, sizeof dir, "dvocab"), 0);
    e = (ink_err){0};
    assert_int_equal(ink_drafter_load_vocab(d, dir, 4, &e), INK_E_IO); /* no file */
    assert_non_null(strstr(e.msg, "draft_vocab.json"));
    const char *bad[] = {"{\"ids\": [1, 2", "[1, 2, 3]", "{\"ids\": [1, \"x\", 3, 4]}", "{\"ids\": [1, 2]}",
                         "{\"ids\": [1, 2, 2, 3]}", "{\"ids\": [1, 2, 3, 99999]}"};
    int want[] = {INK_E_IO, INK_E_FORMAT, INK_E_FORMAT, INK_E_INVAL, INK_E_INVAL, INK_E_INVAL};
    snprintf(path, sizeof path, "%s/draft_vocab.json", dir);
    for (int i = 0; i < 6; i++) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(bad[i], f);
        fclose(f);
        e = (ink_err){0};
        assert_int_equal(ink_drafter_load_vocab(d, dir, 4, &e), want[i]);
        assert_non_null(strstr(e.msg, "draft_vocab.json"));
        assert_int_equal(ink_drafter_n_vocab(d), 0); /* unchanged */
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"ids\": [3, 1, 4, 5, 9]}", f);
    fclose(f);
    e = (ink_err){0};
    assert_int_equal(ink_drafter_load_vocab(d, dir, 4, &e), 0);
    assert_int_equal(ink_drafter_n_vocab(d), 4);
    /* draft logits: -inf outside the set, the full head's values inside */
    int H = ink_model_n_embd(m);
    float u[1024], full[4096], sub[4096], tmp[2048];
    for (int i = 0; i < H; i++) u[i] = sinf(0.3f * (float)i);
    ink_draft_logits(d, u, 1, sub, tmp);
    assert_int_equal(ink_drafter_set_vocab(d, NULL, 0, &e), 0);
    ink_draft_logits(d, u, 1, full, tmp);
    for (int i = 0; i < V; i++) {
        if (i == 3 || i == 1 || i == 4 || i == 5) assert_true(sub[i] == full[i]);
        else assert_true(isinf(sub[i]) && sub[i] < 0);
    }
    ink_drafter_free(d);
    ink_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_config_marks_local_ids_sliding_and_dense),
        cmocka_unit_test(test_mtp_block_outputs_vs_golden),
        cmocka_unit_test(test_traces_equal_golden),
        cmocka_unit_test(test_greedy_invariant_with_speculation),
        cmocka_unit_test(test_greedy_invariant_under_auto),
        cmocka_unit_test(test_greedy_invariant_bf16_activations),
        cmocka_unit_test(test_rollback_replay_restores_conv_and_kv_exactly),
        cmocka_unit_test(test_eos_and_budget_inside_blocks),
        cmocka_unit_test(test_load_drafter_detects_mtp_tensors_not_config_flag),
        cmocka_unit_test(test_speculative_sampling_matches_plain),
        cmocka_unit_test(test_sampling_lossless_after_dormancy),
        cmocka_unit_test(test_prefix_reuse_equals_fresh),
        cmocka_unit_test(test_prompt_cache_resumes_exactly),
        cmocka_unit_test(test_long_prompt_drafts_equal_direct),
        cmocka_unit_test(test_draft_vocab_keeps_greedy_output),
        cmocka_unit_test(test_draft_vocab_sampling_is_lossless),
        cmocka_unit_test(test_draft_vocab_errors),
        cmocka_unit_test(test_no_mmap_same_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
