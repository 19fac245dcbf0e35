/* test_sampler.c — the sampling chain on hand-computed 4-token distributions (tolerance 1e-5: f32
 * probabilities of a double softmax), penalties, draws, and the greedy invariant with penalties
 * under speculation (the verify rows must see the drafts in their history). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "inkling.h"
#include "sample/sampler.h"
#include "support/npy.h"

#include <math.h>
#include <string.h>

static void dist(const ink_sampling *c, const float *l, const int32_t *h, int nh, float *p)
{
    int idx[8];
    float work[8];
    ink_sample_scratch scr = {idx, work};
    ink_sample_dist(c, l, 4, h, nh, p, &scr);
}

static void test_chain_distributions(void **state)
{
    (void)state;
    const float l[4] = {1, 2, 3, 0};
    float p[4];
    ink_sampling c = {.temp = 1.0f};
    dist(&c, l, NULL, 0, p);
    const double soft[4] = {0.08714432, 0.23688282, 0.64391426, 0.0320586};
    for (int i = 0; i < 4; i++) assert_float_equal(p[i], soft[i], 1e-5);
    c.temp = 2.0f;
    dist(&c, l, NULL, 0, p);
    const double t2[4] = {0.1674051, 0.27600434, 0.45505423, 0.10153632};
    for (int i = 0; i < 4; i++) assert_float_equal(p[i], t2[i], 1e-5);
    c = (ink_sampling){.temp = 1.0f, .top_k = 2};
    dist(&c, l, NULL, 0, p);
    assert_float_equal(p[0], 0, 0), assert_float_equal(p[3], 0, 0);
    assert_float_equal(p[1], 0.26894142, 1e-5), assert_float_equal(p[2], 0.73105858, 1e-5);
    c = (ink_sampling){.temp = 1.0f, .top_p = 0.5f}; /* the top token alone holds 0.64 >= 0.5 */
    dist(&c, l, NULL, 0, p);
    assert_float_equal(p[2], 1.0, 1e-6);
    c = (ink_sampling){.temp = 1.0f, .min_p = 0.3f}; /* keeps p >= 0.3 * 0.644: ids 1 and 2 */
    dist(&c, l, NULL, 0, p);
    assert_float_equal(p[1], 0.26894142, 1e-5), assert_float_equal(p[2], 0.73105858, 1e-5);
    c = (ink_sampling){0}; /* greedy: one-hot, ties to the lowest id */
    const float tie[4] = {5, 7, 7, 1};
    dist(&c, tie, NULL, 0, p);
    assert_float_equal(p[1], 1.0, 0);
    assert_int_equal(ink_argmax(tie, 4), 1);
}

static void test_penalties(void **state)
{
    (void)state;
    int idx[4];
    float w[3] = {2, -1, 1};
    int32_t h[3] = {0, 1, 0};
    ink_sampling c = {.repeat_penalty = 2.0f, .penalty_last_n = 64};
    ink_sample_penalize(&c, w, 3, h, 2, idx);
    assert_float_equal(w[0], 1.0, 0), assert_float_equal(w[1], -2.0, 0), assert_float_equal(w[2], 1.0, 0);
    float w2[3] = {2, -1, 1};
    c = (ink_sampling){.frequency_penalty = 0.5f, .presence_penalty = 0.25f, .penalty_last_n = -1};
    ink_sample_penalize(&c, w2, 3, h, 3, idx);
    assert_float_equal(w2[0], 2 - 1.25, 1e-6), assert_float_equal(w2[1], -1 - 0.75, 1e-6), assert_float_equal(w2[2], 1, 0);
    float w3[3] = {2, -1, 1}; /* last_n = 1 looks at the final token only */
    c = (ink_sampling){.repeat_penalty = 2.0f, .penalty_last_n = 1};
    ink_sample_penalize(&c, w3, 3, h, 3, idx);
    assert_float_equal(w3[0], 1.0, 0), assert_float_equal(w3[1], -1.0, 0);
}

static void test_draws(void **state)
{
    (void)state;
    float p[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    int cnt[4] = {0};
    uint64_t rng = 42;
    for (int i = 0; i < 40000; i++) cnt[ink_sample_draw(p, 4, &rng)]++;
    double chi = 0;
    for (int i = 0; i < 4; i++) chi += (cnt[i] - 40000.0 * p[i]) * (cnt[i] - 40000.0 * p[i]) / (40000.0 * p[i]);
    assert_true(chi < 16.27); /* chi2(3) at 0.999 */
    float one[4] = {0, 0, 1, 0};
    for (int i = 0; i < 100; i++) assert_int_equal(ink_sample_draw(one, 4, &rng), 2);
}

/* Greedy with a repetition penalty: speculative output equals plain output (the penalty history of
 * verify row j includes d_1..d_j). */
static void test_penalised_greedy_invariant(void **state)
{
    (void)state;
    ink_model *m;
    ink_err e = {0};
    ink_model_opts o1 = {.n_threads = 1};
    assert_int_equal(ink_model_open(&m, "tests/data/golden/tiny-moe", &o1, &e), 0);
    ink_drafter *d;
    assert_int_equal(ink_drafter_open(&d, m, "tests/data/golden/tiny-moe/drafter-fit", &e), 0);
    ink_session *s;
    assert_int_equal(ink_session_create(&s, m, 0, &e), 0);
    npy pr;
    assert_int_equal(npy_load("tests/data/golden/tiny-moe/prompt_ids.npy", &pr), 0);
    int32_t a[40], b[40];
    int na, nb;
    ink_gen_opts o = {.max_tokens = 40, .sampling = {.repeat_penalty = 1.5f, .presence_penalty = 0.5f, .penalty_last_n = 16}};
    assert_int_equal(ink_generate(s, pr.i, (int)pr.n, &o, a, 40, &na, NULL, &e), 0);
    for (int mode = 0; mode < 2; mode++) {
        o.drafter = d, o.mtp_mode = mode, o.block_size = 4;
        ink_gen_stats st;
        assert_int_equal(ink_generate(s, pr.i, (int)pr.n, &o, b, 40, &nb, &st, &e), 0);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, (size_t)na * 4);
    }
    /* and the penalty changes the output (so the test can fail) */
    ink_gen_opts plain = {.max_tokens = 40};
    assert_int_equal(ink_generate(s, pr.i, (int)pr.n, &plain, b, 40, &nb, NULL, &e), 0);
    assert_true(memcmp(a, b, 40 * 4) != 0);
    npy_free(&pr);
    ink_session_free(s);
    ink_drafter_free(d);
    ink_model_free(m);
}

/* vocab_limit: ids at or above it are never sampled or drafted; stop_ids end generation. */
static void test_vocab_limit_and_stop_ids(void **state)
{
    (void)state;
    ink_model *m;
    ink_err e = {0};
    ink_model_opts o1 = {.n_threads = 1};
    assert_int_equal(ink_model_open(&m, "tests/data/golden/tiny-moe", &o1, &e), 0);
    ink_drafter *d;
    assert_int_equal(ink_drafter_open(&d, m, "tests/data/golden/tiny-moe", &e), 0);
    ink_session *s;
    assert_int_equal(ink_session_create(&s, m, 0, &e), 0);
    int32_t p[3] = {5, 6, 7}, a[40], b[40];
    int na, nb;
    ink_gen_opts o = {.max_tokens = 40, .vocab_limit = 50};
    assert_int_equal(ink_generate(s, p, 3, &o, a, 40, &na, NULL, &e), 0);
    for (int i = 0; i < na; i++) assert_true(a[i] < 50);
    o.drafter = d, o.block_size = 4;
    assert_int_equal(ink_generate(s, p, 3, &o, b, 40, &nb, NULL, &e), 0);
    assert_memory_equal(a, b, (size_t)na * 4);
    o.sampling = (ink_sampling){.temp = 1.0f, .seed = 3};
    assert_int_equal(ink_generate(s, p, 3, &o, b, 40, &nb, NULL, &e), 0);
    for (int i = 0; i < nb; i++) assert_true(b[i] < 50);
    int32_t stops[2] = {1000, a[5]};
    ink_gen_opts so = {.max_tokens = 40, .vocab_limit = 50, .stop_ids = stops, .n_stop_ids = 2};
    assert_int_equal(ink_generate(s, p, 3, &so, b, 40, &nb, NULL, &e), 0);
    int first = 0;
    while (a[first] != a[5]) first++;
    assert_int_equal(nb, first + 1);
    ink_session_free(s);
    ink_drafter_free(d);
    ink_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_distributions),
        cmocka_unit_test(test_penalties),
        cmocka_unit_test(test_draws),
        cmocka_unit_test(test_penalised_greedy_invariant),
        cmocka_unit_test(test_vocab_limit_and_stop_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
