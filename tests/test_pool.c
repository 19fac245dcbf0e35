/* test_pool.c — the thread pool: every item runs exactly once whatever the thread count, grain and
 * scheduling; nested calls run serially; tids stay in range; a worker that stalls the caller makes
 * the pool fall back to the caller alone, and the results stay the same. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "base/pool.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct cover {
    atomic_int *hits;
    int nth;
    atomic_int bad_tid;
    ink_pool *p;
} cover;

static void count_items(void *arg, int i0, int i1, int tid)
{
    cover *c = arg;
    if (tid < 0 || tid >= c->nth) atomic_fetch_add(&c->bad_tid, 1);
    for (int i = i0; i < i1; i++) atomic_fetch_add(&c->hits[i], 1);
}

static void test_every_item_once(void **state)
{
    (void)state;
    const int ns[] = {1, 2, 3, 7, 64, 1000, 4097};
    const int grains[] = {1, 3, 16, 5000};
    for (int nth = 1; nth <= 4; nth++) {
        ink_pool *p = ink_pool_create(nth);
        assert_non_null(p);
        assert_int_equal(ink_pool_size(p), nth);
        for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
            for (size_t b = 0; b < sizeof grains / sizeof grains[0]; b++)
                for (int rep = 0; rep < 20; rep++) {
                    int n = ns[a];
                    cover c = {calloc((size_t)n, sizeof(atomic_int)), nth, 0, p};
                    ink_pool_for(p, n, grains[b], count_items, &c);
                    for (int i = 0; i < n; i++) assert_int_equal(atomic_load(&c.hits[i]), 1);
                    assert_int_equal(atomic_load(&c.bad_tid), 0);
                    free(c.hits);
                }
        ink_pool_free(p);
    }
}

/* Back-to-back jobs whose chunk counts alternate (2, then 16): a worker still holding the word of a
 * finished small job must not claim a chunk of the next, larger one before it is published (it ran
 * that chunk twice and counted it twice: the caller then waited forever). */
static void test_alternating_jobs(void **state)
{
    (void)state;
    for (int nth = 2; nth <= 3; nth++) {
        ink_pool *p = ink_pool_create(nth);
        ink_pool_set_adaptive(p, 0);
        atomic_int hits[64];
        for (int rep = 0; rep < 100000; rep++) {
            int n = rep % 2 ? 64 : 8;
            for (int i = 0; i < n; i++) atomic_store(&hits[i], 0);
            cover c = {hits, nth, 0, p};
            ink_pool_for(p, n, 4, count_items, &c);
            for (int i = 0; i < n; i++)
                if (atomic_load(&hits[i]) != 1) fail_msg("rep %d: item %d ran %d times", rep, i, atomic_load(&hits[i]));
        }
        ink_pool_free(p);
    }
}

static void slice_task(void *arg, int ith, int nth)
{
    cover *c = arg;
    if (nth != c->nth && nth != 1) atomic_fetch_add(&c->bad_tid, 1);
    atomic_fetch_add(&c->hits[ith], 1);
}

static void test_run_slices(void **state)
{
    (void)state;
    for (int nth = 1; nth <= 3; nth++) {
        ink_pool *p = ink_pool_create(nth);
        for (int rep = 0; rep < 200; rep++) {
            cover c = {calloc(4, sizeof(atomic_int)), nth, 0, p};
            ink_pool_run(p, slice_task, &c);
            for (int i = 0; i < nth; i++) assert_int_equal(atomic_load(&c.hits[i]), 1);
            assert_int_equal(atomic_load(&c.bad_tid), 0);
            free(c.hits);
        }
        ink_pool_free(p);
    }
}

/* A call from inside a task runs serially on the calling thread. */
static void nested(void *arg, int i0, int i1, int tid)
{
    cover *c = arg;
    for (int i = i0; i < i1; i++) {
        cover in = {c->hits + (size_t)i * 10, c->nth, 0, c->p};
        ink_pool_for(c->p, 10, 1, count_items, &in);
        (void)tid;
    }
}

static void test_nested_serial(void **state)
{
    (void)state;
    ink_pool *p = ink_pool_create(2);
    cover c = {calloc(100, sizeof(atomic_int)), 2, 0, p};
    ink_pool_for(p, 10, 1, nested, &c);
    for (int i = 0; i < 100; i++) assert_int_equal(atomic_load(&c.hits[i]), 1);
    free(c.hits);
    ink_pool_free(p);
}

/* Workers (tid != 0) sleep inside their chunk: the caller waits for them, which the pool counts as
 * a stall; after two it falls back to the caller alone. Every item still runs once, with the same
 * per-item result. */
typedef struct stall {
    float *out;
    int n;
} stall;

static void slow_workers(void *arg, int i0, int i1, int tid)
{
    stall *s = arg;
    if (tid != 0) {
        struct timespec t = {0, 2 * 1000 * 1000};
        nanosleep(&t, NULL);
    } else { /* the caller's chunks take a while too, so a worker gets to claim some */
        volatile unsigned x = 0;
        for (int k = 0; k < 20000; k++) x += (unsigned)k;
    }
    for (int i = i0; i < i1; i++) s->out[i] = (float)i * 0.5f + 1.0f;
}

static void test_fallback_when_stalled(void **state)
{
    (void)state;
    ink_pool *p = ink_pool_create(2);
    stall s = {calloc(256, sizeof(float)), 256};
    ink_pool_stats st = {0};
    /* bounded: each run costs at most one worker chunk (2 ms) */
    for (int it = 0; it < 2000 && st.fallbacks == 0; it++) {
        memset(s.out, 0, 256 * sizeof(float));
        ink_pool_for(p, 256, 4, slow_workers, &s);
        for (int i = 0; i < 256; i++) assert_true(s.out[i] == (float)i * 0.5f + 1.0f);
        ink_pool_get_stats(p, &st);
    }
    assert_true(st.fallbacks >= 1);
    /* now the caller runs alone: no chunk reaches a worker, and the result is the same */
    memset(s.out, 0, 256 * sizeof(float));
    ink_pool_for(p, 256, 4, slow_workers, &s);
    for (int i = 0; i < 256; i++) assert_true(s.out[i] == (float)i * 0.5f + 1.0f);
    ink_pool_stats st2;
    ink_pool_get_stats(p, &st2);
    assert_true(st2.solo_runs == st.solo_runs + 1);
    /* with adaptivity off every run uses the workers again */
    ink_pool_set_adaptive(p, 0);
    ink_pool_for(p, 256, 4, slow_workers, &s);
    ink_pool_get_stats(p, &st);
    assert_true(st.solo_runs == st2.solo_runs);
    free(s.out);
    ink_pool_free(p);
}

static void test_default_threads(void **state)
{
    (void)state;
    int n = ink_default_threads();
    assert_true(n >= 1 && n <= 256);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_item_once),   cmocka_unit_test(test_alternating_jobs), cmocka_unit_test(test_run_slices),
        cmocka_unit_test(test_nested_serial),     cmocka_unit_test(test_fallback_when_stalled),
        cmocka_unit_test(test_default_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
