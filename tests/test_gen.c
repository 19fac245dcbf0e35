/* test_gen.c — the generator's pure acceptance rules (gen/accept.h) on hand-computed arrays, the
 * draft-length controller (gen/autok.h) on synthetic costs and acceptance, and the loop's
 * non-finite-logits stop (a model whose embedding row of one token is NaN). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gen/accept.h"
#include "gen/autok.h"
#include "inkling.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOE "tests/data/golden/tiny-moe"

/* ---- greedy walk ---------------------------------------------------------------------------- */

static void test_greedy_walk(void **state)
{
    (void)state;
    /* drafts 5 7 9 against the target's choices 5 7 2 | 4: the third draft differs, a = 2, bonus 2 */
    const int32_t d1[] = {5, 7, 9}, t1[] = {5, 7, 2, 4};
    assert_int_equal(ink_accept_greedy(d1, t1, 3), 2);
    /* the first draft differs: a = 0, the bonus is the target's row 0 choice */
    const int32_t d2[] = {1}, t2[] = {3, 8};
    assert_int_equal(ink_accept_greedy(d2, t2, 1), 0);
    /* all drafts agree: a = M, the bonus comes from row M */
    const int32_t d3[] = {1, 2}, t3[] = {1, 2, 6};
    assert_int_equal(ink_accept_greedy(d3, t3, 2), 2);
    /* no drafts (a plain step): a = 0 */
    assert_int_equal(ink_accept_greedy(NULL, t3, 0), 0);
    /* a later agreement does not count once one draft differs: 4 9 4 vs 4 8 4 -> a = 1 */
    const int32_t d4[] = {4, 9, 4}, t4[] = {4, 8, 4, 0};
    assert_int_equal(ink_accept_greedy(d4, t4, 3), 1);
}

/* ---- stochastic test -------------------------------------------------------------------------- */

static void test_accept_draw(void **state)
{
    (void)state;
    const float p[3] = {0.5f, 0.3f, 0.2f}, q[3] = {0.25f, 0.6f, 0.15f};
    /* token 0: p >= q, kept whatever u (0.999 * 0.25 = 0.24975 <= 0.5) */
    assert_int_equal(ink_accept_draw(p, q, 0, 0.0), 1);
    assert_int_equal(ink_accept_draw(p, q, 0, 0.999), 1);
    /* token 1: kept with probability p/q = 0.5: u = 0.49 -> 0.294 <= 0.3 kept; u = 0.51 -> 0.306 > 0.3 not */
    assert_int_equal(ink_accept_draw(p, q, 1, 0.49), 1);
    assert_int_equal(ink_accept_draw(p, q, 1, 0.51), 0);
    /* token 2: p/q = 4/3 >= 1, kept */
    assert_int_equal(ink_accept_draw(p, q, 2, 0.99), 1);
    /* q[d] = 0 (a draft the drafter could not have drawn): never kept, even with p[d] = 1 */
    const float p2[2] = {1.0f, 0.0f}, q2[2] = {0.0f, 1.0f};
    assert_int_equal(ink_accept_draw(p2, q2, 0, 0.0), 0);
    /* p[d] = 0: kept only if u * q[d] <= 0, i.e. u = 0 exactly, never for u > 0 */
    assert_int_equal(ink_accept_draw(p2, q2, 1, 0.25), 0);
}

static void test_residual(void **state)
{
    (void)state;
    /* p - q = {0.25, -0.25, 0}: residual {0.25, 0, 0}, mass 0.25, renormalised {1, 0, 0} (exact) */
    float p[3] = {0.5f, 0.25f, 0.25f};
    const float q[3] = {0.25f, 0.5f, 0.25f};
    assert_true(ink_accept_residual(p, q, 3) == 0.25);
    assert_true(p[0] == 1.0f && p[1] == 0.0f && p[2] == 0.0f);
    /* p = {0.5, 0.3, 0.2}, q = {0.25, 0.6, 0.15}: residual {0.25, 0, 0.05}, mass 0.3 -> {5/6, 0, 1/6} */
    float p2[3] = {0.5f, 0.3f, 0.2f};
    const float q2[3] = {0.25f, 0.6f, 0.15f};
    assert_true(fabs(ink_accept_residual(p2, q2, 3) - 0.3) < 1e-7);
    assert_true(fabsf(p2[0] - 5.0f / 6) < 1e-6f && p2[1] == 0.0f && fabsf(p2[2] - 1.0f / 6) < 1e-6f);
    /* p == q: no residual mass, p left all zero (the caller redraws from the target's p) */
    float p3[2] = {0.5f, 0.5f};
    const float q3[2] = {0.5f, 0.5f};
    assert_true(ink_accept_residual(p3, q3, 2) == 0.0);
    assert_true(p3[0] == 0.0f && p3[1] == 0.0f);
}

/* Losslessness of the rule itself, integrated over u on a grid of N midpoints: a draft d drawn from q,
 * kept per ink_accept_draw, else replaced from the residual, is distributed as p. By hand with
 * p = {0.5, 0.3, 0.2}, q = {0.25, 0.6, 0.15}: P(keep 0) = 0.25, P(keep 1) = 0.6 * 0.5 = 0.3,
 * P(keep 2) = 0.15; rejection mass 0.3 goes to the residual {5/6, 0, 1/6}: 0.25 + 0.25 = 0.5,
 * 0.3 + 0 = 0.3, 0.15 + 0.05 = 0.2. */
static void test_accept_is_lossless(void **state)
{
    (void)state;
    const float p[3] = {0.5f, 0.3f, 0.2f}, q[3] = {0.25f, 0.6f, 0.15f};
    float res[3];
    memcpy(res, p, sizeof res);
    ink_accept_residual(res, q, 3);
    double out[3] = {0}, rej = 0;
    const int N = 100000;
    for (int d = 0; d < 3; d++) {
        int kept = 0;
        for (int k = 0; k < N; k++) kept += ink_accept_draw(p, q, d, (k + 0.5) / N);
        out[d] += q[d] * (double)kept / N;
        rej += q[d] * (double)(N - kept) / N;
    }
    assert_true(fabs(rej - 0.3) < 1e-4);
    for (int i = 0; i < 3; i++) {
        out[i] += rej * res[i];
        assert_true(fabs(out[i] - p[i]) < 1e-4);
    }
}

/* ---- non-finite logits ------------------------------------------------------------------------ */

/* The plain greedy run's third token X gets a NaN embedding row: plain and speculative greedy runs
 * (both rollback methods) emit up to X, then stop with INK_E_NUMERIC at X's position, P + 2; sampled
 * runs (plain and speculative) with X inside the prompt stop before emitting, at the prompt's last
 * position. */
/* ---- the draft-length controller ------------------------------------------------------------ */

/* A synthetic machine: a round of width K costs base + per_row * K + draft * (K - 1) seconds, and
 * each draft is accepted with probability alpha (a deterministic LCG decides). Runs `rounds`
 * rounds through the controller and returns the width it chose most in the last half. */
typedef struct synth {
    double base, per_row, draft, alpha;
    uint64_t rng;
    int lock_k, lock_j;  /* lock_k > 0: in rounds of width lock_k, draft lock_j + 1 is accepted with */
    double lock_alpha;   /* lock_alpha instead (acceptance that depends on the width: phase locking) */
} synth;

static double synth_alpha(const synth *m, int K, int j)
{
    return m->lock_k == K && m->lock_j == j ? m->lock_alpha : m->alpha;
}

static double synth_u(synth *m) /* the LCG's next uniform in [0, 1) */
{
    m->rng = m->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(m->rng >> 11) / 9007199254740992.0;
}

/* The drafts a round of width K accepts (M = K - 1 drafts): each in turn with probability
 * synth_alpha (the LCG decides), until one is rejected. */
static int synth_draw(synth *m, int K, int M)
{
    int a = 0;
    while (a < M && synth_u(m) < synth_alpha(m, K, a)) a++;
    return a;
}

/* The exact expected tokens per round and seconds per round of width K. */
static double synth_e(const synth *m, int K)
{
    double e = 0, run = 1;
    for (int i = 0; i < K; i++) e += run, run *= synth_alpha(m, K, i);
    return e;
}
static double synth_c(const synth *m, int K) { return m->base + m->per_row * K + m->draft * (K - 1); }

/* `over[K]` (NULL: none): seconds of catch-up a round of width K also costs, reported apart
 * (ink_autok_overhead) */
static int synth_run_over(ink_autok *c, synth *m, int rounds, const double *over, int *hist)
{
    int h[INK_MAX_BLOCK + 1] = {0};
    for (int r = 0; r < rounds; r++) {
        int K = ink_autok_choose(c), M = K - 1;
        assert_true(K >= 1 && K <= c->kmax);
        int a = synth_draw(m, K, M);
        double draft_s = m->draft * M;
        if (over) ink_autok_overhead(c, over[K]);
        ink_autok_observe(c, K, M, a, m->base + m->per_row * K + draft_s, draft_s);
        if (r >= rounds / 2) h[K]++;
    }
    int best = 1;
    for (int K = 1; K <= c->kmax; K++)
        if (h[K] > h[best]) best = K;
    if (hist) memcpy(hist, h, sizeof h);
    return best;
}

static int synth_run(ink_autok *c, synth *m, int rounds, int *hist) { return synth_run_over(c, m, rounds, NULL, hist); }

/* The rate the controller achieved over widths 1..kmax run hist[K] times (exact expectations). */
static double synth_rate(const synth *m, const int *hist, int kmax)
{
    double tok = 0, sec = 0;
    for (int K = 1; K <= kmax; K++) tok += hist[K] * synth_e(m, K), sec += hist[K] * synth_c(m, K);
    return tok / sec;
}

/* The width that maximises E(K) / c(K) for the synthetic machine (exact expectation). */
static int synth_best(const synth *m, int kmax, double *rate)
{
    int best = 1;
    double br = 0;
    for (int K = 1; K <= kmax; K++) {
        double r = synth_e(m, K) / synth_c(m, K);
        if (r > br) br = r, best = K;
    }
    if (rate) *rate = br;
    return best;
}

static void test_autok_finds_the_best_width(void **state)
{
    (void)state;
    /* memory-bound (rows nearly free, cheap drafts, high acceptance): a wide block; cache-resident
     * (each row costs a full step): plain steps; in between: the analytic optimum */
    synth cases[] = {
        {1.0, 0.02, 0.03, 0.85, 1, 0, 0, 0}, /* memory-bound */
        {0.0, 1.00, 0.30, 0.60, 2, 0, 0, 0}, /* cache-resident: verify of K rows costs K steps */
        {1.0, 0.25, 0.10, 0.70, 3, 0, 0, 0}, /* in between */
        {1.0, 0.02, 0.03, 0.01, 4, 0, 0, 0}, /* drafts almost never accepted */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ink_autok c;
        ink_autok_init(&c, 8);
        int want = synth_best(&cases[i], 8, NULL);
        int hist[INK_MAX_BLOCK + 1];
        int got = synth_run(&c, &cases[i], 2000, hist);
        double best_rate, got_rate;
        synth_best(&cases[i], 8, &best_rate);
        synth one = cases[i];
        one.alpha = cases[i].alpha;
        {
            double e = 0, run = 1;
            for (int k = 0; k < got; k++) e += run, run *= one.alpha;
            got_rate = e / (one.base + one.per_row * got + one.draft * (got - 1));
        }
        printf("  case %zu: best width %d, controller chose %d (%d of the last 1000 rounds), %.1f%% of the best rate\n", i,
               want, got, hist[got], 100 * got_rate / best_rate);
        if (i == 2) assert_true(got_rate >= 0.97 * best_rate); /* widths 2..4 are within 6 %: any near-best will do */
        else if (i == 0) { /* widths 7 and 8 are within 3 %: which one a run settles on is the draws' (over 30
                            * seeds 8 ran 215-969 of the last 1000 rounds, with or without plain probes) */
            assert_true(got >= want - 1 && got_rate >= 0.97 * best_rate);
            assert_true(hist[want - 1] + hist[want] >= 850); /* exploration stays rare */
        } else {
            assert_int_equal(got, want);
            assert_true(hist[got] >= 850); /* exploration stays rare: about 1 round in 16 */
            assert_int_equal(ink_autok_best(&c), want);
        }
    }
    /* the memory-bound and cache-resident cases really differ (the test can fail) */
    assert_true(synth_best(&cases[0], 8, NULL) >= 5 && synth_best(&cases[1], 8, NULL) == 1);
}

/* Within a few % of the best fixed width: the rate the controller achieves (expected tokens over
 * the modelled cost of the widths it chose) against the best fixed width's. */
static void test_autok_stays_close_to_best_fixed(void **state)
{
    (void)state;
    /* several seeds: one seed is one draw of the acceptance sequence, and a controller that is close
     * on average can still settle on a neighbour for a whole run (the 1,024-round exploration cap
     * once kept one seed at 95.9 %) */
    for (uint64_t seed = 9; seed < 15; seed++) {
        synth m = {1.0, 0.05, 0.04, 0.8, seed, 0, 0, 0};
        ink_autok c;
        ink_autok_init(&c, 8);
        int hist[INK_MAX_BLOCK + 1];
        synth_run(&c, &m, 4000, hist);
        double best_rate, rate = synth_rate(&m, hist, 8);
        synth_best(&m, 8, &best_rate);
        printf("  seed %d: controller %.4f tokens/s-unit vs best fixed %.4f (%.1f%%)\n", (int)seed, rate, best_rate,
               100 * rate / best_rate);
        assert_true(rate >= 0.97 * best_rate);
    }
}

/* The text changes: acceptance falls from 0.9 to 0.05 (a repetitive passage, then free text) and
 * rises again; the choice follows within a few dozen rounds each way. */
static void test_autok_adapts_to_the_text(void **state)
{
    (void)state;
    synth m = {1.0, 0.02, 0.03, 0.9, 11, 0, 0, 0};
    ink_autok c;
    ink_autok_init(&c, 6);
    assert_true(synth_run(&c, &m, 400, NULL) >= 5);
    m.alpha = 0.05;
    assert_int_equal(synth_run(&c, &m, 200, NULL), 1);
    m.alpha = 0.9;
    assert_true(synth_run(&c, &m, 400, NULL) >= 5); /* exploration of K = 2 brings it back */
}

/* Acceptance that depends on the width (text that repeats: the rounds of one width lock into a
 * phase where one draft is always rejected; a 160 MiB twin's greedy loop did this at width 5): the
 * pooled per-position estimates, filled mostly by the width in use, make its neighbours look as
 * bad; each width's measured yield must bring the controller within 5 % of the best fixed width. */
static void test_autok_width_dependent_acceptance(void **state)
{
    (void)state;
    for (uint64_t seed = 21; seed < 27; seed++) {
        /* widths 1..5 like a depth-4 head; c(K) like the twin's (1, 1.25, 1.5, 1.75, 2.0 plus drafts);
         * at width 5 the second draft is accepted half the time, at every other width 0.88 of it */
        synth m = {0.75, 0.25, 0.04, 0.88, seed, 5, 1, 0.5};
        ink_autok c;
        ink_autok_init(&c, 5);
        int hist[INK_MAX_BLOCK + 1];
        synth_run(&c, &m, 3000, hist);
        double best_rate, rate = synth_rate(&m, hist, 5);
        int best = synth_best(&m, 5, &best_rate);
        printf("  seed %d: best fixed width %d; the controller ran widths 1..5 %d %d %d %d %d times: %.1f%% of its rate\n",
               (int)seed, best, hist[1], hist[2], hist[3], hist[4], hist[5], 100 * rate / best_rate);
        assert_int_equal(best, 4); /* the lock makes width 5 lose (the test can fail) */
        assert_true(synth_e(&m, 5) / synth_c(&m, 5) < 0.9 * best_rate);
        assert_true(rate >= 0.95 * best_rate);
    }
}

/* Catch-ups the rounds' times leave out still count against drafting (ink_autok_overhead): a machine
 * where width 3 wins on the timed costs alone (1.96 tokens per 1.12 s against 1 per 1.02) but every
 * drafting round also costs 1.2 s of catch-up ends on plain steps; the same machine without the
 * catch-ups keeps drafting (the control: the test fails if the overhead is ignored). */
static void test_autok_charges_catch_up(void **state)
{
    (void)state;
    for (int with = 0; with < 2; with++) {
        synth m = {1.0, 0.02, 0.03, 0.6, 31, 0, 0, 0};
        ink_autok c;
        ink_autok_init(&c, 6);
        int hist[INK_MAX_BLOCK + 1];
        double over[INK_MAX_BLOCK + 1] = {0};
        for (int K = 2; K <= INK_MAX_BLOCK; K++) over[K] = with ? 1.2 : 0;
        int got = synth_run_over(&c, &m, 2000, over, hist);
        printf("  catch-up %.1f s per drafting round: the controller ran width %d (%d of the last 1000 rounds)\n",
               with ? 1.2 : 0.0, got, hist[got]);
        if (with) {
            assert_int_equal(got, 1);
            assert_true(hist[1] >= 950);
            assert_int_equal(ink_autok_best(&c), 1);
        } else assert_true(got >= 2);
    }
}

/* Catch-ups that only wider widths incur (a 160 MiB twin: 1.17 ms a round of width 5 in use, 0.1 ms
 * at width 4, against 11-12 ms rounds): here rounds of width 5 and up also cost 0.25 x (K - 4) of
 * catch-up. On the timed costs alone the widest width wins (8: 3.03 tokens a unit against 2.52 at 4);
 * with the catch-ups width 4 is best (2.52 against 2.29 at 5). Charged to every drafting width alike
 * (one shared overhead), the catch-ups of the width in use raised its rivals' costs as much as its
 * own, and the controller climbed to the widest width and stayed there (mutation: 8, at 0.70 of the
 * best rate). Charged to the width in use, they make width 4 the choice. */
static void test_autok_catch_up_per_width(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed < 5; seed++) {
        synth m = {1.0, 0.02, 0.03, 0.8, seed, 0, 0, 0};
        ink_autok c;
        ink_autok_init(&c, 8);
        int h[INK_MAX_BLOCK + 1];
        double over[INK_MAX_BLOCK + 1], tok = 0, sec = 0;
        for (int K = 1; K <= INK_MAX_BLOCK; K++) over[K] = K > 4 ? 0.25 * (K - 4) : 0;
        synth_run_over(&c, &m, 2000, over, h);
        for (int K = 1; K <= 8; K++) tok += h[K] * synth_e(&m, K), sec += h[K] * (synth_c(&m, K) + over[K]);
        double best = synth_e(&m, 4) / synth_c(&m, 4);
        printf("  seed %d: width 4 in %d of the last 1000 rounds, %.1f%% of the best rate\n", (int)seed, h[4],
               100 * tok / sec / best);
        assert_int_equal(ink_autok_best(&c), 4);
        assert_true(h[4] >= 900);
        assert_true(tok / sec >= 0.95 * best);
    }
}

/* c(1) is the yardstick, and a fresh controller measures it in a run's first rounds, often its slow
 * start (the bundled model: ~1 ms a plain step there, 0.2 ms later). A controller drafting wide has
 * no plain step for a neighbour, so it must probe one now and then: here the first two (plain)
 * rounds take 10x, the rest the machine's usual time, and by the end the estimate of c(1) must be
 * the usual one (without probes it stayed 10x: 2 plain rounds in 2,000, both in the slow start). */
static void test_autok_probes_plain_steps(void **state)
{
    (void)state;
    synth m = {1.0, 0.02, 0.03, 0.85, 7, 0, 0, 0};
    ink_autok c;
    ink_autok_init(&c, 8);
    int plain = 0;
    for (int r = 0; r < 2000; r++) {
        int K = ink_autok_choose(&c), M = K - 1, a = synth_draw(&m, K, M);
        double sec = synth_c(&m, K) * (r < 2 ? 10.0 : 1.0);
        ink_autok_observe(&c, K, M, a, sec, m.draft * M);
        plain += r >= 2 && K == 1;
    }
    double c1 = ink_autok_cost(&c, 1) / ink_autok_cost(&c, ink_autok_best(&c)) * synth_c(&m, ink_autok_best(&c));
    printf("  plain probes after the slow start: %d of 1998 rounds; c(1) estimated %.3f, true %.3f\n", plain, c1,
           synth_c(&m, 1));
    assert_true(ink_autok_best(&c) >= 5);
    assert_true(plain >= 4 && plain <= 40); /* probed, and rarely: 2 % of the rounds at most */
    assert_true(fabs(c1 - synth_c(&m, 1)) < 0.1 * synth_c(&m, 1));
}

/* Text that repeats (a greedy loop): the 160 MiB twin's 7-token loop, where a round's accepted drafts
 * are set by the phase it starts at (4, 2, 0, 1, 0, 1, 3 from phases 0..6 with a depth-4 head; the
 * twin's traces showed phases 0, 2..5 exactly so). Widths 3 and 4 run cycles of 2.33 tokens a round,
 * width 5 one of 3.5: with the twin's costs width 3 is a local best and 4 a valley before 5, which
 * runs got stuck in. After 40 rounds of free text (acceptance 0.6, no period), the loop: the
 * controller, told the period and phase, must reach 95 % of the best fixed width's rate over the loop;
 * the same controller not told, runs no better than 93 % on some seed (the test can fail). */
static const int loop_acc[7] = {4, 2, 0, 1, 0, 1, 3}; /* drafts accepted from phases 0..6 */

static double loop_run_on(uint64_t seed, int tell, int fixed, int *hist, const double *cost, double slow,
                          double alpha)
{
    synth m = {0.75, 0.25, 0.04, alpha, seed, 0, 0, 0};
    ink_autok c;
    ink_autok_init(&c, 5);
    double tok = 0, sec = 0;
    int n = 100 + (int)seed;
    memset(hist, 0, (INK_MAX_BLOCK + 1) * sizeof *hist);
    for (int r = 0; r < 1500; r++) {
        int loop = r >= 40;
        if (tell) ink_autok_text(&c, loop ? 7 : 0, loop ? n % 7 : 0);
        int K = fixed ? fixed : ink_autok_choose(&c), M = K - 1, a = 0;
        if (loop) a = loop_acc[n % 7] < M ? loop_acc[n % 7] : M;
        else a = synth_draw(&m, K, M);
        double draft_s = m.draft * M, t = cost ? cost[K] : m.base + m.per_row * K + draft_s;
        if (!fixed) ink_autok_observe(&c, K, M, a, t * (r < 40 && (!cost || K == 3) ? slow : 1.0), draft_s);
        n += a + 1;
        if (r >= 100) tok += a + 1, sec += t, hist[K]++;
    }
    return tok / sec;
}

static double loop_run(uint64_t seed, int tell, int fixed, int *hist)
{
    return loop_run_on(seed, tell, fixed, hist, NULL, 1.0, 0.6);
}

static void test_autok_follows_a_loop(void **state)
{
    (void)state;
    int hist[INK_MAX_BLOCK + 1];
    double rate[6] = {0}, worst_blind = 1e9;
    for (int K = 1; K <= 5; K++) rate[K] = loop_run(1, 0, K, hist);
    printf("  fixed widths 1..5 over the loop: %.3f %.3f %.3f %.3f %.3f tokens per unit\n", rate[1], rate[2], rate[3],
           rate[4], rate[5]);
    assert_true(rate[3] > rate[4] && rate[5] > 1.05 * rate[3]); /* a valley between a local and the best width */
    for (uint64_t seed = 1; seed < 9; seed++) {
        double told = loop_run(seed, 1, 0, hist);
        int h5 = hist[5];
        double blind = loop_run(seed, 0, 0, hist);
        printf("  seed %d: told the period %.1f%% of width 5 (%d of 1400 rounds at 5); not told %.1f%% (%d)\n", (int)seed,
               100 * told / rate[5], h5, 100 * blind / rate[5], hist[5]);
        assert_true(told >= 0.95 * rate[5]);
        if (blind < worst_blind) worst_blind = blind;
    }
    assert_true(worst_blind < 0.93 * rate[5]);
}

/* The same loop on a machine where a verify of K rows is dear (an AVX2-only Zen 2 and the 160 MiB
 * twin, rounds in plain steps: 1, 1.24, 1.55, 2.2, 2.65 for widths 1..5): width 3's cycle (2.33
 * tokens a round) now beats width 5's (3.5) by 14 %, and a valley at 4 separates them. The free text
 * before the loop is easy (acceptance 0.85: the controller climbs to 5), and width 3's rounds there
 * (the run's first 40, its slow start) take 1.3x, so width 3 looks dearer than it is until it is
 * timed again. The controller must reach 95 % of the best fixed
 * width here too (when explorations went one width either way only, it stayed at 5: 88 %). */
static void test_autok_loop_runner_up(void **state)
{
    (void)state;
    static const double cost[6] = {0, 1.0, 1.35, 1.55, 2.2, 2.65};
    int hist[INK_MAX_BLOCK + 1];
    double rate[6] = {0};
    for (int K = 1; K <= 5; K++) rate[K] = loop_run_on(1, 1, K, hist, cost, 1.0, 0.85);
    printf("  steep verify: fixed widths 1..5 over the loop: %.3f %.3f %.3f %.3f %.3f tokens per unit\n", rate[1],
           rate[2], rate[3], rate[4], rate[5]);
    assert_true(rate[3] > 1.05 * rate[5] && rate[5] > rate[2] && rate[3] > rate[4]);
    for (uint64_t seed = 1; seed < 9; seed++) {
        double got = loop_run_on(seed, 1, 0, hist, cost, 1.3, 0.85);
        printf("  seed %d: %.1f%% of width 3 (rounds at 2 / 3 / 4 / 5: %d %d %d %d)\n", (int)seed, 100 * got / rate[3],
               hist[2], hist[3], hist[4], hist[5]);
        assert_true(got >= 0.95 * rate[3]);
    }
}

/* Stalls that hit whatever round is running: on a 2-vCPU VM (an AMD EPYC guest of this project's
 * CI), a kernel memory monitor stalls the process ~70 ms every ~0.5 s, so one round in ~12 of the
 * 1 GiB twin takes 2.5-4x its usual time, whatever its width. The machine here is the twin's: rounds
 * of widths 1..5 cost 1, 1.12, 1.27, 1.36, 1.5 plain steps, the text is free (acceptance 0.75) for
 * the first 12 rounds and then the twin's 7-token loop (width 5: 3.5 tokens a round, 3 and 4: 2.33),
 * and every `period` units of time the round in progress takes `stall` more. The rate counts the
 * rounds' stall-free costs (what the choices were worth); `rounds` from the start, climb included. */
static const double twin_cost[6] = {0, 1.0, 1.12, 1.27, 1.36, 1.5}; /* widths 1..5, in plain steps */

static double stall_run(uint64_t seed, int fixed, int rounds, double period, double stall, int *hist)
{
    synth m = {0.75, 0.25, 0.04, 0.75, seed, 0, 0, 0};
    ink_autok c;
    ink_autok_init(&c, 5);
    double tok = 0, sec = 0, clock = 0, next = period * (0.3 + 0.07 * (double)(seed % 10)), tail = 0;
    int n = 100 + (int)seed, reach = 1;
    if (hist) memset(hist, 0, (INK_MAX_BLOCK + 1) * sizeof *hist);
    for (int r = 0; r < rounds; r++) {
        int loop = r >= 12;
        ink_autok_text(&c, loop ? 7 : 0, loop ? n % 7 : 0);
        int K = fixed ? fixed : ink_autok_choose(&c), M = K - 1, a;
        if (loop) a = loop_acc[n % 7] < M ? loop_acc[n % 7] : M;
        else a = synth_draw(&m, K, M);
        double t = twin_cost[K], seen = t * (0.96 + 0.08 * synth_u(&m)) + tail;
        clock += seen, tail = 0;
        if (period > 0 && clock >= next) /* most of a stall on this round, the rest on the next */
            seen += 0.75 * stall, clock += stall, next += period, tail = 0.25 * stall;
        if (K > reach) seen = -1, reach = K; /* a width's first round restarts depths: untimed (gen.c) */
        if (!fixed) ink_autok_observe(&c, K, M, a, r < 3 ? -1 : seen, 0.02 * M);
        n += a + 1, tok += a + 1, sec += t;
        if (hist) hist[K]++;
    }
    return tok / sec;
}

static void test_autok_ignores_stalls(void **state)
{
    (void)state;
    int hist[INK_MAX_BLOCK + 1];
    const int lens[2] = {150, 1500}; /* a 512-token run of the twin, and a long one */
    for (int l = 0; l < 2; l++) {
        double best = stall_run(1, 5, lens[l], 0, 0, NULL), worst = 1e9, worst_quiet = 1e9, sum = 0;
        for (uint64_t seed = 1; seed <= 10; seed++) {
            double quiet = stall_run(seed, 0, lens[l], 0, 0, NULL);
            double got = stall_run(seed, 0, lens[l], 14.0, 2.2, hist);
            printf("  %d rounds, seed %d: quiet %.1f%%, stalls %.1f%% of width 5 (rounds at 1..5: %d %d %d %d %d)\n",
                   lens[l], (int)seed, 100 * quiet / best, 100 * got / best, hist[1], hist[2], hist[3], hist[4],
                   hist[5]);
            if (got < worst) worst = got;
            if (quiet < worst_quiet) worst_quiet = quiet;
            sum += got;
            /* a stall costs no more than its own time: the choices are as good as without stalls
             * (before outliers were clipped to 1.5x, one seed's 150 rounds stayed at width 3: 73 %) */
            assert_true(got >= 0.96 * quiet);
            assert_true(got >= (l ? 0.97 : 0.9) * best);
        }
        printf("  %d rounds: with stalls worst %.1f%%, mean %.1f%%; quiet worst %.1f%%\n", lens[l], 100 * worst / best,
               10 * sum / best, 100 * worst_quiet / best);
    }
}

/* A width that cannot win, whose estimate a stall left high, is not re-explored every EXPLORE rounds:
 * free text at acceptance 0.9 on the twin's costs (width 5: 4.1 tokens a round at 1.5, width 4:
 * 3.44 at 1.36, which would win only below 1.26), run until settled on 5; then width 4's estimate is
 * set 1.5x high (a stalled exploration, clipped), and each exploration of 4 times it at its true
 * cost, below 0.9 x the estimate. Re-explored whenever it timed cheaper, 4 ran 8 rounds apart until
 * its estimate came down (half-way each time); now it waits out its doubled gap (16 rounds and up). */
static void test_autok_no_confirm_for_a_loser(void **state)
{
    (void)state;
    synth m = {1.0, 0.0, 0.02, 0.9, 5, 0, 0, 0};
    ink_autok c;
    ink_autok_init(&c, 5);
    int at4 = 0, last4 = -1, min_gap = 1 << 30;
    for (int r = 0; r < 700; r++) {
        if (r == 400) {
            assert_int_equal(ink_autok_best(&c), 5);
            assert_true(c.cost_n[4] >= 3);
            c.cost[4] *= 1.5;
        }
        int K = ink_autok_choose(&c), M = K - 1, a = synth_draw(&m, K, M);
        ink_autok_observe(&c, K, M, a, r < 3 ? -1 : twin_cost[K], 0.02 * M);
        if (r >= 400 && K == 4) {
            if (last4 >= 0 && r - last4 < min_gap) min_gap = r - last4;
            at4++, last4 = r;
        }
    }
    printf("  after width 4's estimate went 1.5x high: %d rounds at 4 in 300, closest %d apart\n", at4, min_gap);
    assert_true(at4 >= 2 && at4 <= 12); /* still explored, now and then */
    assert_true(min_gap > 8);
}

static void test_autok_estimates(void **state)
{
    (void)state;
    ink_autok c;
    ink_autok_init(&c, 5);
    assert_int_equal(ink_autok_choose(&c), 1);     /* nothing measured: a plain step first */
    assert_true(ink_autok_cost(&c, 3) == 0);
    ink_autok_observe(&c, 1, 0, 0, 2.0, 0);
    ink_autok_observe(&c, 4, 3, 1, 5.0, 0.9);       /* drafts cost 0.3 s each; d1 kept, d2 rejected */
    /* one observation each, averaged with two pseudo-observations of the prior: 1/2 for d1, (1 + 1) / 3;
     * d1's estimate for d2, (0 + 2 (2/3)) / 3 */
    assert_true(fabs(c.alpha[0] - 2.0 / 3) < 1e-12 && fabs(c.alpha[1] - 4.0 / 9) < 1e-12);
    assert_int_equal(c.alpha_n[2], 0);               /* d3 was never tested */
    assert_true(fabs(ink_autok_cost(&c, 2) - 2.3) < 1e-12); /* optimistic: c(1) + one draft */
    assert_true(fabs(ink_autok_cost(&c, 5) - 5.3) < 1e-12); /* beyond the widest measured */
    assert_true(fabs(ink_autok_expected(&c, 3) - (1 + 2.0 / 3 + 8.0 / 27)) < 1e-12); /* 1 + a0 + a0 a1 */
    /* a run that starts with a rejected draft still tries drafting: with the estimate at 0 (no
     * prior) E(K) would be 1 for every K and the next rounds plain steps until an exploration */
    {
        ink_autok f;
        ink_autok_init(&f, 5);
        ink_autok_observe(&f, 1, 0, 0, 2.0, 0);
        ink_autok_observe(&f, 1, 0, 0, 2.0, 0);
        ink_autok_observe(&f, 5, 4, 0, -1, 0); /* untimed (depths woke), no draft accepted */
        assert_true(fabs(f.alpha[0] - 1.0 / 3) < 1e-12);
        assert_true(ink_autok_best(&f) >= 2);
    }
    /* an outlier (a preemption) is clipped once the estimate is established */
    for (int i = 0; i < 4; i++) ink_autok_observe(&c, 1, 0, 0, 2.0, 0);
    ink_autok_observe(&c, 1, 0, 0, 1000.0, 0);
    /* the 6th sample of width 1 is clipped to 1.5 x 2 = 3; the speed factor moves by 0.15 towards
     * 3 / 2 (to 1.075) and c(1) by 1/6 towards 3 / 1.075; in seconds: 1.075 c(1) (unclipped: ~160) */
    assert_true(fabs(c.speed - 1.075) < 1e-12);
    assert_true(fabs(ink_autok_cost(&c, 1) - 1.075 * (2.0 + (3.0 / 1.075 - 2.0) / 6)) < 1e-9);
    /* drift common to every width lands in the speed factor: width 4, measured once at 5 s when the
     * machine was at speed 1, is now estimated at 5 x 1.075 s, and the choice between widths does not
     * move (their costs scale together) */
    assert_true(fabs(ink_autok_cost(&c, 4) - 5.0 * 1.075) < 1e-9);
}

static void test_nan_logits_stop_with_position(void **state)
{
    (void)state;
    ink_model *m;
    ink_err e = {0};
    ink_model_opts mo = {.n_threads = 1};
    assert_int_equal(ink_model_open(&m, MOE, &mo, &e), 0);
    ink_drafter *d;
    assert_int_equal(ink_drafter_open(&d, m, MOE "/drafter-fit", &e), 0);
    ink_session *s;
    assert_int_equal(ink_session_create(&s, m, 256, &e), 0);
    const int32_t pr[4] = {3, 1, 4, 1};
    int32_t out[16], ref[16];
    int n;
    ink_gen_opts o = {.max_tokens = 12};
    assert_int_equal(ink_generate(s, pr, 4, &o, ref, 16, &n, NULL, &e), 0);
    assert_int_equal(n, 12);
    int32_t X = ref[2];
    /* an f32 copy of the embedding with row X NaN (the model's own view is read-only) */
    ink_mat saved = m->embed;
    int H = m->embed.cols;
    float *emb = malloc((size_t)m->embed.rows * H * sizeof(float));
    assert_non_null(emb);
    for (int r = 0; r < m->embed.rows; r++) ink_mat_row(&saved, r, emb + (size_t)r * H);
    for (int i = 0; i < H; i++) emb[(size_t)X * H + i] = NAN;
    m->embed.dtype = INK_DT_F32, m->embed.stride = (size_t)H, m->embed.data = emb;
    int first = 0; /* the tokens before X are X-free too (else the NaN would come earlier) */
    while (first < 2 && ref[first] != X) first++;
    int expect_n = first + 1, expect_pos = 4 + first;
    for (int v = 0; v < 5; v++) {
        ink_gen_opts g = o;
        g.drafter = v ? d : NULL;
        g.block_size = v ? 4 : 0;
        g.capture_commit = v == 2;
        g.sampling.temp = v >= 3 ? 1.0f : 0.0f;
        g.sampling.seed = 7;
        ink_err e2 = {0};
        /* sampled runs take other paths: X in the prompt instead, caught on the prompt's last row */
        const int32_t prx[4] = {3, 1, X, 1};
        int rc = ink_generate(s, v >= 3 ? prx : pr, 4, &g, out, 16, &n, NULL, &e2);
        assert_int_equal(rc, INK_E_NUMERIC);
        assert_int_equal(e2.code, INK_E_NUMERIC);
        char want[64];
        snprintf(want, sizeof want, "non-finite logits at position %d", v >= 3 ? 3 : expect_pos);
        if (!strstr(e2.msg, want)) fail_msg("variant %d: '%s' lacks '%s'", v, e2.msg, want);
        assert_int_equal(n, v >= 3 ? 0 : expect_n);
        assert_memory_equal(out, ref, (size_t)n * sizeof *out); /* greedy: exactly the plain tokens up to X */
    }
    m->embed = saved;
    free(emb);
    ink_session_free(s);
    ink_drafter_free(d);
    ink_model_free(m);
}

/* The generator as an object: start / step / finish equals ink_generate, token for token. */
static void test_generator_steps_equal_generate(void **state)
{
    (void)state;
    ink_model *m;
    ink_err e = {0};
    ink_model_opts mo = {.n_threads = 1};
    assert_int_equal(ink_model_open(&m, MOE, &mo, &e), 0);
    ink_drafter *d;
    assert_int_equal(ink_drafter_open(&d, m, MOE "/drafter-fit", &e), 0);
    ink_session *s, *s2;
    assert_int_equal(ink_session_create(&s, m, 256, &e), 0);
    assert_int_equal(ink_session_create(&s2, m, 256, &e), 0);
    const int32_t pr[4] = {3, 1, 4, 1};
    int32_t a[32], b[32];
    int na, steps = 0;
    /* a fixed K: with auto K a sampled run depends on the widths chosen from measured times */
    ink_gen_opts o = {.max_tokens = 30, .drafter = d, .block_size = 3, .sampling = {.temp = 0.8f, .seed = 11}};
    ink_gen_stats st;
    assert_int_equal(ink_generate(s, pr, 4, &o, a, 32, &na, NULL, &e), 0);
    ink_gen *g;
    assert_int_equal(ink_gen_create(&g, s2, &e), 0);
    assert_int_equal(ink_gen_start(g, pr, 4, &o, b, 32, &st, &e), 0);
    assert_int_equal(ink_gen_n_out(g), 1);
    while (!ink_gen_done(g)) assert_int_equal(ink_gen_step(g, &e), 0), steps++;
    assert_int_equal(ink_gen_finish(g), 0);
    assert_int_equal(ink_gen_n_out(g), na);
    assert_memory_equal(a, b, (size_t)na * sizeof *a);
    assert_int_equal(st.generated_tokens, na);
    assert_true(steps >= st.rounds && st.rounds > 0);
    ink_gen_free(g);
    ink_session_free(s), ink_session_free(s2);
    ink_drafter_free(d);
    ink_model_free(m);
}

static int widest(void *ud, int round, int k_max)
{
    (void)ud, (void)round;
    return k_max;
}

/* ink_gen_opts.block_cap (what `serve` uses to hold its auto slots to plain steps): while
 * *cap >= 1 an auto run's rounds are at most that wide, greedy output stays plain decoding's, and a
 * fixed width ignores the cap. */
static void test_block_cap(void **state)
{
    (void)state;
    ink_model *m;
    ink_err e = {0};
    ink_model_opts mo = {.n_threads = 1};
    assert_int_equal(ink_model_open(&m, MOE, &mo, &e), 0);
    ink_drafter *d;
    assert_int_equal(ink_drafter_open(&d, m, MOE "/drafter-fit", &e), 0);
    ink_session *s;
    assert_int_equal(ink_session_create(&s, m, 256, &e), 0);
    const int32_t pr[4] = {3, 1, 4, 1};
    int32_t plain[40], b[40];
    int np;
    ink_gen_opts po = {.max_tokens = 36};
    assert_int_equal(ink_generate(s, pr, 4, &po, plain, 40, &np, NULL, &e), 0);
    volatile int cap = 1;
    ink_gen *g;
    assert_int_equal(ink_gen_create(&g, s, &e), 0);
    for (int fixed = 0; fixed < 2; fixed++) {
        ink_gen_opts o = {.max_tokens = 36, .drafter = d, .block_size = fixed ? 3 : 0, .choose_block = widest, .block_cap = &cap};
        ink_gen_stats st;
        cap = 1;
        assert_int_equal(ink_gen_start(g, pr, 4, &o, b, 40, &st, &e), 0);
        for (int i = 0; i < 12 && !ink_gen_done(g); i++) assert_int_equal(ink_gen_step(g, &e), 0);
        int wide = 0;
        for (int k = 2; k <= INK_MAX_BLOCK; k++) wide += st.k_hist[k];
        if (fixed) assert_true(st.k_hist[3] > 0 && st.k_hist[1] == 0); /* a fixed width is not capped */
        else assert_true(wide == 0 && st.k_hist[1] >= 12);               /* capped: plain steps only */
        cap = 0;
        while (!ink_gen_done(g)) assert_int_equal(ink_gen_step(g, &e), 0);
        assert_int_equal(ink_gen_finish(g), 0);
        for (int k = 2; k <= INK_MAX_BLOCK; k++) wide += st.k_hist[k];
        assert_true(wide > 0); /* uncapped, the hook's widest width is used again */
        assert_int_equal(ink_gen_n_out(g), np);
        assert_memory_equal(plain, b, (size_t)np * sizeof *b);
    }
    ink_gen_free(g);
    ink_session_free(s);
    ink_drafter_free(d);
    ink_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_walk),
        cmocka_unit_test(test_accept_draw),
        cmocka_unit_test(test_residual),
        cmocka_unit_test(test_accept_is_lossless),
        cmocka_unit_test(test_autok_finds_the_best_width),
        cmocka_unit_test(test_autok_stays_close_to_best_fixed),
        cmocka_unit_test(test_autok_adapts_to_the_text),
        cmocka_unit_test(test_autok_width_dependent_acceptance),
        cmocka_unit_test(test_autok_charges_catch_up),
        cmocka_unit_test(test_autok_catch_up_per_width),
        cmocka_unit_test(test_autok_probes_plain_steps),
        cmocka_unit_test(test_autok_follows_a_loop),
        cmocka_unit_test(test_autok_loop_runner_up),
        cmocka_unit_test(test_autok_ignores_stalls),
        cmocka_unit_test(test_autok_no_confirm_for_a_loser),
        cmocka_unit_test(test_autok_estimates),
        cmocka_unit_test(test_nan_logits_stop_with_position),
        cmocka_unit_test(test_generator_steps_equal_generate),
        cmocka_unit_test(test_block_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
