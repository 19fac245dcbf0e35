/* test_spec_property.c — property test of the speculative loop.
 *
 * Thousands of seeded random trials: target model (tiny random checkpoints with random MTP heads of
 * depth 1..3, and the golden tiny-moe with its fitted head, whose greedy drafts are accepted),
 * MTP mode (per-depth / Compat-X), rollback (restore + replay / capture-and-commit), block size,
 * sampling (greedy, or temperature > 0 where random drafts are often accepted on a tiny vocab,
 * with top-k / top-p / min-p / repetition penalty), EOS id and stop ids, -n limits, context sizes
 * that fill up mid-block, vocab limits and multi-turn prefix reuse. After every speculative round
 * (ink_gen_opts.on_round) the target session must be bitwise equal (ink_session_compare) to a
 * reference session advanced by plain ink_session_eval over the emitted tokens to the same
 * position; again after the call; and a greedy run must emit exactly what plain decoding emits.
 * SPEC_PROPERTY_TRIALS overrides the trial count, SPEC_PROPERTY_SEED the seed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "model/model.h"
#include "draft/mtp.h"
#include "support/ckpt.h"
#include "support/npy.h"
#include "support/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOE "tests/data/golden/tiny-moe"
#define MAXSEQ 512

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static int rnd(uint64_t *s, int n) { return (int)(rng_next(s) % (uint64_t)n); }
static double rndf(uint64_t *s) { return (double)(rng_next(s) >> 11) / 9007199254740992.0; }

typedef struct model_case {
    const char *name;
    ink_model *m;
    ink_drafter *d;
    ink_session *tgt[2], *ref[2]; /* n_ctx 40 and 256 */
    const int32_t *text;          /* prompts are prefixes of this when set (the fitted head's domain) */
    int n_text;
} model_case;

typedef struct counts {
    long trials, rounds, compares, zero, partial, full, bonus_cut, eos_stops, budget_stops, ctx_stops;
    long reuse, greedy_checked, capture[2], mode[2];
    long accepted_hist[8];
} counts;

typedef struct trial {
    ink_session *tgt, *ref;
    int32_t seq[MAXSEQ];
    int n_seq, P;
    int failed;
    char why[256];
    counts *c;
} trial;

/* Feeds the reference session up to position pos: the prompt as one chunk, then plain decoding
 * steps one token at a time. */
static int advance_ref(trial *t, int pos)
{
    ink_err e = {0};
    int have = ink_session_pos(t->ref);
    if (have == 0 && pos >= t->P) {
        if (ink_session_eval(t->ref, t->seq, t->P, NULL, &e)) goto fail;
        have = t->P;
    }
    for (; have < pos; have++)
        if (ink_session_eval(t->ref, t->seq + have, 1, NULL, &e)) goto fail;
    return 0;
fail:
    snprintf(t->why, sizeof t->why, "reference eval: %s", e.msg);
    return -1;
}

static void check_state(trial *t, const char *when, int round)
{
    if (t->failed) return;
    int pos = ink_session_pos(t->tgt);
    if (pos > t->n_seq) {
        snprintf(t->why, sizeof t->why, "%s %d: session at %d but only %d tokens known", when, round, pos, t->n_seq);
        t->failed = 1;
        return;
    }
    if (advance_ref(t, pos)) {
        t->failed = 1;
        return;
    }
    char why[160];
    if (ink_session_compare(t->tgt, t->ref, why, sizeof why)) {
        snprintf(t->why, sizeof t->why, "%s %d (pos %d): %s", when, round, pos, why);
        t->failed = 1;
    }
    t->c->compares++;
}

static void on_token(void *ud, int32_t tok)
{
    trial *t = ud;
    if (t->n_seq < MAXSEQ) t->seq[t->n_seq++] = tok;
}

static void on_round(void *ud, const ink_round *r)
{
    trial *t = ud;
    counts *c = t->c;
    c->rounds++;
    if (r->a == 0) c->zero++;
    else if (r->a < r->n_drafts) c->partial++;
    else c->full++;
    c->accepted_hist[r->a < 7 ? r->a : 7]++;
    if (!r->bonus_emitted) c->bonus_cut++;
    if (t->failed) return;
    if (r->a < 0 || r->a > r->n_drafts || r->n_emitted < 1 || r->n_emitted > r->a + 1 || r->n_drafts >= r->k_eff + 1) {
        snprintf(t->why, sizeof t->why, "round %d: a %d of %d drafts, %d emitted, k_eff %d", r->round, r->a,
                 r->n_drafts, r->n_emitted, r->k_eff);
        t->failed = 1;
        return;
    }
    if (ink_session_pos(t->tgt) != r->n + r->n_emitted) {
        snprintf(t->why, sizeof t->why, "round %d: session at %d, expected n %d + emitted %d", r->round,
                 ink_session_pos(t->tgt), r->n, r->n_emitted);
        t->failed = 1;
        return;
    }
    for (int j = 0; j < r->n_emitted; j++)
        if (r->n + 1 + j >= t->n_seq || t->seq[r->n + 1 + j] != r->emitted[j]) {
            snprintf(t->why, sizeof t->why, "round %d: emitted[%d] differs from the token stream", r->round, j);
            t->failed = 1;
            return;
        }
    check_state(t, "round", r->round);
}

static ink_model *open_dir(const char *dir)
{
    ink_model *m = NULL;
    ink_err e = {0};
    ink_model_opts o = {.n_threads = 1};
    if (ink_model_open(&m, dir, &o, &e)) fprintf(stderr, "open %s: %s\n", dir, e.msg);
    return m;
}

static int setup_case(model_case *mc, const char *name, const char *dir, const char *head)
{
    ink_err e = {0};
    mc->name = name;
    mc->m = open_dir(dir);
    if (!mc->m || ink_drafter_open(&mc->d, mc->m, head, &e)) {
        fprintf(stderr, "%s: %s\n", name, e.msg);
        return -1;
    }
    int ctx[2] = {40, 256};
    for (int i = 0; i < 2; i++)
        if (ink_session_create(&mc->tgt[i], mc->m, ctx[i], &e) || ink_session_create(&mc->ref[i], mc->m, ctx[i], &e))
            return -1;
    return 0;
}

static void free_case(model_case *mc)
{
    for (int i = 0; i < 2; i++) ink_session_free(mc->tgt[i]), ink_session_free(mc->ref[i]);
    ink_drafter_free(mc->d);
    ink_model_free(mc->m);
}

static int random_case(model_case *mc, const char *name, int variant)
{
    tiny_spec s;
    tiny_default(&s);
    s.hidden = 32, s.n_layer = 3, s.vocab = 24, s.vocab_unpadded = 20;
    s.n_head = 2, s.n_kv = 1, s.head_dim = 16, s.swa_n_head = 2, s.swa_n_kv = 1, s.swa_head_dim = 16;
    s.window = 4, s.rel_extent = 8, s.d_rel = 4, s.conv_k = 4;
    s.dense_inter = 48, s.expert_inter = 16, s.n_expert = 4, s.top_k = 2, s.n_shared = 1, s.dense_mlp_idx = 1;
    s.n_local = 2, s.local[0] = 0, s.local[1] = 1;
    s.log_floor = 4;
    s.seed = 99 + (uint64_t)variant;
    if (variant == 0) {
        s.mtp_depth = 3, s.n_mtp_local = 1, s.mtp_local[0] = 1, s.mtp_file = 1;
    } else {
        s.mtp_depth = variant, s.n_mtp_local = 1, s.mtp_local[0] = 0;
        s.vocab = 16, s.vocab_unpadded = 12, s.wscale = 0.6f;
    }
    char dir[256];
    if (tu_tmpdir(dir, sizeof dir, "specprop") || tiny_write(dir, &s)) return -1;
    return setup_case(mc, name, dir, dir);
}

static void run_trials(model_case *cases, int n_cases, int trials, uint64_t seed, counts *c)
{
    int32_t out[MAXSEQ], plain[MAXSEQ], stop_ids[2];
    trial *t = calloc(1, sizeof *t);
    assert_non_null(t);
    int32_t last_seq[MAXSEQ];
    int n_last = 0, last_case = -1, last_ctx = -1;
    for (int it = 0; it < trials; it++) {
        uint64_t rs = seed ^ ((uint64_t)it * 0x2545f4914f6cdd1dull);
        model_case *mc = &cases[cases[0].text && rnd(&rs, 4) ? 0 : rnd(&rs, n_cases)];
        int ci = (int)(mc - cases);
        int Vu = ink_model_n_vocab(mc->m), D = ink_drafter_n_depth(mc->d);
        int big = rnd(&rs, 3) != 0;
        ink_session *tgt = mc->tgt[big], *ref = mc->ref[big];
        int n_ctx = ink_session_n_ctx(tgt);
        ink_gen_opts o = {0};
        o.drafter = mc->d;
        o.mtp_mode = rnd(&rs, 2);
        o.capture_commit = rnd(&rs, 2);
        o.block_size = rnd(&rs, 4) == 0 ? 0 : 1 + rnd(&rs, D + 4);
        if (rnd(&rs, 10) < (mc->text ? 7 : 4)) {
            o.sampling.temp = 0;
        } else {
            o.sampling.temp = (float)(0.3 + 1.7 * rndf(&rs));
            o.sampling.top_k = rnd(&rs, 3) == 0 ? 1 + rnd(&rs, Vu) : 0;
            o.sampling.top_p = rnd(&rs, 3) == 0 ? (float)(0.5 + 0.5 * rndf(&rs)) : 1.0f;
            o.sampling.min_p = rnd(&rs, 4) == 0 ? (float)(0.1 * rndf(&rs)) : 0.0f;
        }
        if (rnd(&rs, 6) == 0) o.sampling.repeat_penalty = 1.3f, o.sampling.penalty_last_n = rnd(&rs, 2) ? 8 : -1;
        o.sampling.seed = rng_next(&rs);
        o.max_tokens = rnd(&rs, 49);
        o.stop_eos = rnd(&rs, 2);
        o.eos = rnd(&rs, Vu);
        if (rnd(&rs, 5) == 0) stop_ids[0] = rnd(&rs, Vu), stop_ids[1] = rnd(&rs, Vu), o.stop_ids = stop_ids, o.n_stop_ids = 2;
        if (rnd(&rs, 7) == 0) o.vocab_limit = 2 + rnd(&rs, Vu - 1);
        /* prompt: fresh, or (multi-turn) what the last call on this session consumed plus a few tokens */
        int P;
        if (ci == last_case && big == last_ctx && n_last + 5 < n_ctx - 2 && rnd(&rs, 4) == 0) {
            o.reuse_prefix = 1;
            P = n_last;
            memcpy(t->seq, last_seq, (size_t)P * sizeof *t->seq);
            for (int k = 1 + rnd(&rs, 4); k > 0; k--) t->seq[P++] = rnd(&rs, Vu);
            c->reuse++;
        } else {
            o.reuse_prefix = rnd(&rs, 2);
            P = 1 + rnd(&rs, big ? 24 : 20);
            for (int i = 0; i < P; i++) t->seq[i] = rnd(&rs, Vu);
            if (mc->text && big && rnd(&rs, 4)) { /* the fitted head predicts this text's greedy continuation */
                P = mc->n_text < n_ctx / 2 ? mc->n_text : n_ctx / 2;
                if (rnd(&rs, 3) == 0) P -= rnd(&rs, P);
                memcpy(t->seq, mc->text, (size_t)P * sizeof *t->seq);
            }
        }
        if (o.max_tokens > MAXSEQ - P - 1) o.max_tokens = MAXSEQ - P - 1;
        t->tgt = tgt, t->ref = ref, t->n_seq = P, t->P = P, t->failed = 0, t->why[0] = 0, t->c = c;
        o.on_token = on_token, o.on_round = on_round, o.ud = t;
        ink_session_reset(ref);
        int n = 0;
        ink_err e = {0};
        ink_gen_stats st;
        int rc = ink_generate(tgt, t->seq, P, &o, out, MAXSEQ, &n, &st, &e);
        if (rc) fprintf(stderr, "trial %d (%s): generate: %s\n", it, mc->name, e.msg);
        assert_int_equal(rc, 0);
        check_state(t, "end", st.rounds);
        if (!t->failed && (n != t->n_seq - P || memcmp(out, t->seq + P, (size_t)n * sizeof *out))) {
            snprintf(t->why, sizeof t->why, "output (%d tokens) differs from the on_token stream (%d)", n, t->n_seq - P);
            t->failed = 1;
        }
        /* greedy: exactly the plain output */
        if (!t->failed && o.sampling.temp <= 0) {
            ink_gen_opts po = o;
            po.drafter = NULL, po.on_token = NULL, po.on_round = NULL, po.reuse_prefix = 0;
            int np = 0;
            assert_int_equal(ink_generate(ref, t->seq, P, &po, plain, MAXSEQ, &np, NULL, &e), 0);
            if (np != n || memcmp(plain, out, (size_t)n * sizeof *out)) {
                snprintf(t->why, sizeof t->why, "greedy output differs from plain decoding (%d vs %d tokens)", n, np);
                t->failed = 1;
            }
            c->greedy_checked++;
        }
        if (t->failed)
            fprintf(stderr, "trial %d (%s, mode %d, capture %d, K %d, temp %.2f, max %d, eos %d/%d, P %d, n_ctx %d, reuse %d): %s\n",
                    it, mc->name, o.mtp_mode, o.capture_commit, o.block_size, o.sampling.temp, o.max_tokens,
                    o.stop_eos, o.eos, P, n_ctx, o.reuse_prefix, t->why);
        assert_false(t->failed);
        c->trials++;
        c->capture[o.capture_commit]++, c->mode[o.mtp_mode]++;
        if (n == o.max_tokens) c->budget_stops++;
        else if (n > 0 && ((o.stop_eos && out[n - 1] == o.eos) || (o.n_stop_ids && (out[n - 1] == stop_ids[0] || out[n - 1] == stop_ids[1]))))
            c->eos_stops++;
        else c->ctx_stops++;
        /* the state the next multi-turn prompt may extend: what the target session consumed */
        n_last = ink_session_pos(tgt);
        memcpy(last_seq, t->seq, (size_t)n_last * sizeof *last_seq);
        last_case = ci, last_ctx = big;
    }
    free(t);
}

/* Trials per test: thousands in the release build, fewer under the sanitizers (about 10x slower),
 * a tenth under an emulator (tu_scaled; qemu runs the scalar set ~100x slower). */
#if defined(__SANITIZE_ADDRESS__)
#define DEFAULT_TRIALS 400
#else
#define DEFAULT_TRIALS 2000
#endif

static int env_int(const char *name, int def)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : def;
}

static void report(const char *what, const counts *c)
{
    printf("  %s: %ld trials, %ld rounds (%ld zero / %ld partial / %ld full accept, %ld bonus cut), %ld state "
           "compares; stops: %ld budget, %ld eos/stop id, %ld context; %ld reuse, %ld greedy checks; "
           "capture %ld/%ld, mode P %ld / compat %ld; accepted 0..7+:",
           what, c->trials, c->rounds, c->zero, c->partial, c->full, c->bonus_cut, c->compares, c->budget_stops,
           c->eos_stops, c->ctx_stops, c->reuse, c->greedy_checked, c->capture[0], c->capture[1], c->mode[0], c->mode[1]);
    for (int i = 0; i < 8; i++) printf(" %ld", c->accepted_hist[i]);
    printf("\n");
}

static void test_random_heads(void **state)
{
    (void)state;
    model_case cases[3];
    memset(cases, 0, sizeof cases);
    assert_int_equal(random_case(&cases[0], "random-d3", 0), 0);
    assert_int_equal(random_case(&cases[1], "random-d1-v12", 1), 0);
    assert_int_equal(random_case(&cases[2], "random-d2-v12", 2), 0);
    counts c = {0};
    run_trials(cases, 3, env_int("SPEC_PROPERTY_TRIALS", tu_scaled(DEFAULT_TRIALS, 10, 100)), (uint64_t)env_int("SPEC_PROPERTY_SEED", 20240901), &c);
    report("random heads", &c);
    assert_true(c.partial + c.full > 0);
    for (int i = 0; i < 3; i++) free_case(&cases[i]);
}

static void test_fitted_head(void **state)
{
    (void)state;
    model_case cases[2];
    memset(cases, 0, sizeof cases);
    assert_int_equal(setup_case(&cases[0], "tiny-moe/drafter-fit", MOE, MOE "/drafter-fit"), 0);
    assert_int_equal(setup_case(&cases[1], "tiny-moe/random-head", MOE, MOE), 0);
    npy pr;
    assert_int_equal(npy_load(MOE "/prompt_ids.npy", &pr), 0);
    for (int i = 0; i < 2; i++) cases[i].text = pr.i, cases[i].n_text = (int)pr.n;
    counts c = {0};
    run_trials(cases, 2, env_int("SPEC_PROPERTY_TRIALS", tu_scaled(DEFAULT_TRIALS, 10, 100)) / 2,
               (uint64_t)env_int("SPEC_PROPERTY_SEED", 20240901) + 7, &c);
    report("tiny-moe", &c);
    assert_true(c.full > 0 && c.partial > 0);
    for (int i = 0; i < 2; i++) free_case(&cases[i]);
    npy_free(&pr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_heads),
        cmocka_unit_test(test_fitted_head),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
