/* test_pool.c — the thread pool: every item runs exactly once whatever the thread count, grain and
 * scheduling; nested calls run serially; tids stay in range; the adaptive choice between all
 * threads and the caller alone (driven by a fake clock, so deterministic) goes solo when that is
 * cheaper, comes back when pooled pays, backs its probes off, ignores idle gaps; and the results
 * stay the same in every mode. */
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

/* The adaptive choice, made deterministic by the clock hook: the task itself advances a fake wall
 * clock and a fake caller CPU clock by what the test says a pooled job (spread over its chunks) and
 * a solo job (one call with every item) cost, and the pool measures with those clocks only. */
enum { FN = 256, FGRAIN = 4 };
typedef struct fake {
    atomic_llong wall, cpu;
    long long pooled_ns, solo_ns; /* wall per job */
    int pooled_cpu_pct, solo_cpu_pct; /* the caller's on-CPU share of it */
    long long idle_ns;            /* added before each job (an idle server) */
    float out[FN];
    atomic_int hits[FN];
} fake;

static long long fake_clock(void *arg, int cpu)
{
    fake *f = arg;
    return cpu ? atomic_load(&f->cpu) : atomic_load(&f->wall);
}

static void fake_task(void *arg, int i0, int i1, int tid)
{
    (void)tid;
    fake *f = arg;
    int solo = i0 == 0 && i1 == FN;
    long long c = solo ? f->solo_ns : f->pooled_ns * (i1 - i0) / FN;
    atomic_fetch_add(&f->wall, c);
    atomic_fetch_add(&f->cpu, c * (solo ? f->solo_cpu_pct : f->pooled_cpu_pct) / 100);
    for (int i = i0; i < i1; i++) {
        float acc = 0;
        for (int k = 0; k < 16; k++) acc += (float)(i * 16 + k) * 0.25f;
        f->out[i] = acc;
        atomic_fetch_add(&f->hits[i], 1);
    }
}

/* One job; checks every item ran once with the expected value. */
static void fake_job(ink_pool *p, fake *f)
{
    for (int i = 0; i < FN; i++) atomic_store(&f->hits[i], 0), f->out[i] = -1;
    atomic_fetch_add(&f->wall, f->idle_ns);
    ink_pool_for(p, FN, FGRAIN, fake_task, f);
    for (int i = 0; i < FN; i++) {
        float acc = 0;
        for (int k = 0; k < 16; k++) acc += (float)(i * 16 + k) * 0.25f;
        if (atomic_load(&f->hits[i]) != 1 || memcmp(&f->out[i], &acc, sizeof acc))
            fail_msg("item %d: ran %d times, value %g (expected %g)", i, atomic_load(&f->hits[i]), f->out[i], acc);
    }
}

static void set_costs(fake *f, long long pooled_ns, int pooled_pct, long long solo_ns, int solo_pct)
{
    f->pooled_ns = pooled_ns, f->pooled_cpu_pct = pooled_pct, f->solo_ns = solo_ns, f->solo_cpu_pct = solo_pct;
}

/* Busy machine (the caller is on a CPU half the time and pooled jobs cost twice solo ones): the pool
 * goes solo; later probes of pooled fail and it stays solo. Then the machine gets quiet (pooled jobs
 * on-CPU and cheaper): a probe brings it back to pooled for good. */
static void test_adaptive_busy_then_quiet(void **state)
{
    (void)state;
    for (int nth = 2; nth <= 4; nth++) {
        ink_pool *p = ink_pool_create(nth);
        fake *f = calloc(1, sizeof *f);
        ink_pool_set_clock(p, fake_clock, f);
        set_costs(f, 20000, 50, 10000, 100);
        ink_pool_stats st = {0}, st0;
        int it = 0;
        for (; it < 100000 && st.fallbacks == 0; it++) fake_job(p, f), ink_pool_get_stats(p, &st);
        assert_int_equal(st.fallbacks, 1);
        assert_true(it < 2000); /* the first span (200 jobs) already shows it */
        for (int k = 0; k < 20000; k++) fake_job(p, f);
        st0 = st;
        ink_pool_get_stats(p, &st);
        assert_int_equal(st.fallbacks, 1);            /* stayed solo ... */
        assert_true(st.probes >= st0.probes + 2);     /* ... though it probed pooled again */
        assert_true(st.solo_runs - st0.solo_runs >= 19000); /* and probes are short */
        set_costs(f, 10000, 100, 20000, 100);
        for (int k = 0; k < 40000; k++) fake_job(p, f); /* probes are at most 64 spans apart by now */
        ink_pool_get_stats(p, &st0);
        for (int k = 0; k < 5000; k++) fake_job(p, f);
        ink_pool_get_stats(p, &st);
        assert_true(st.solo_runs == st0.solo_runs); /* back to pooled, and no more probes on a quiet machine */
        assert_true(st.probes == st0.probes);
        free(f);
        ink_pool_free(p);
    }
}

/* The caller is descheduled, but pooled still pays (a many-core machine with one busy core): probes
 * of solo fail, the pool never switches, and the probes back off (not one per span). */
static void test_adaptive_stays_pooled_when_it_pays(void **state)
{
    (void)state;
    ink_pool *p = ink_pool_create(3);
    fake *f = calloc(1, sizeof *f);
    ink_pool_set_clock(p, fake_clock, f);
    set_costs(f, 10000, 50, 20000, 100);
    for (int k = 0; k < 100000; k++) fake_job(p, f); /* 500 spans */
    ink_pool_stats st;
    ink_pool_get_stats(p, &st);
    assert_int_equal(st.fallbacks, 0);
    assert_true(st.probes >= 3 && st.probes <= 12);
    assert_true(st.solo_runs <= st.probes * 400); /* each probe: a warm-up and one span */
    /* a quiet machine where solo is a little cheaper (within the margin) is never probed at all */
    ink_pool *q = ink_pool_create(2);
    ink_pool_set_clock(q, fake_clock, f);
    set_costs(f, 10000, 100, 9500, 100);
    for (int k = 0; k < 20000; k++) fake_job(q, f);
    ink_pool_get_stats(q, &st);
    assert_true(st.probes == 0 && st.solo_runs == 0);
    free(f);
    ink_pool_free(q);
    ink_pool_free(p);
}

/* Idle gaps (> 1 ms between jobs: a server between requests) are never measured: however bad the
 * jobs look, no span closes and nothing is decided. */
static void test_adaptive_ignores_idle_gaps(void **state)
{
    (void)state;
    ink_pool *p = ink_pool_create(2);
    fake *f = calloc(1, sizeof *f);
    ink_pool_set_clock(p, fake_clock, f);
    set_costs(f, 20000, 10, 1000, 100);
    f->idle_ns = 2000000;
    for (int k = 0; k < 3000; k++) fake_job(p, f);
    ink_pool_stats st;
    ink_pool_get_stats(p, &st);
    assert_true(st.probes == 0 && st.solo_runs == 0 && st.runs == 3000);
    free(f);
    ink_pool_free(p);
}

/* Modes forced in turn (solo, pooled, auto with the real clocks) on alternating chunk counts, many
 * times: every item runs exactly once with the same value whatever ran it; forced solo never reaches
 * a worker. */
static void test_forced_mode_switching(void **state)
{
    (void)state;
    for (int nth = 2; nth <= 4; nth++) {
        ink_pool *p = ink_pool_create(nth);
        atomic_int hits[64];
        ink_pool_stats a, b;
        for (int rep = 0; rep < 30000; rep++) {
            int mode = rep % 3 == 0 ? INK_POOL_SOLO : rep % 3 == 1 ? INK_POOL_POOLED : INK_POOL_AUTO;
            ink_pool_set_mode(p, mode);
            int n = rep % 2 ? 64 : 8;
            for (int i = 0; i < n; i++) atomic_store(&hits[i], 0);
            cover c = {hits, nth, 0, p};
            ink_pool_get_stats(p, &a);
            ink_pool_for(p, n, rep % 4 + 1, count_items, &c);
            ink_pool_get_stats(p, &b);
            for (int i = 0; i < n; i++)
                if (atomic_load(&hits[i]) != 1) fail_msg("rep %d: item %d ran %d times", rep, i, atomic_load(&hits[i]));
            assert_int_equal(atomic_load(&c.bad_tid), 0);
            if (mode == INK_POOL_SOLO) assert_true(b.solo_runs == a.solo_runs + 1);
            if (mode == INK_POOL_POOLED) assert_true(b.solo_runs == a.solo_runs);
        }
        ink_pool_free(p);
    }
}

/* Solo runs really run on the caller: every chunk sees tid 0. */
static void record_tid(void *arg, int i0, int i1, int tid)
{
    int *t = arg;
    for (int i = i0; i < i1; i++) t[i] = tid;
}

static void test_solo_is_caller(void **state)
{
    (void)state;
    ink_pool *p = ink_pool_create(3);
    ink_pool_set_mode(p, INK_POOL_SOLO);
    int t[100];
    for (int rep = 0; rep < 100; rep++) {
        memset(t, 0xff, sizeof t);
        ink_pool_for(p, 100, 1, record_tid, t);
        for (int i = 0; i < 100; i++) assert_int_equal(t[i], 0);
    }
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
        cmocka_unit_test(test_nested_serial),     cmocka_unit_test(test_adaptive_busy_then_quiet),
        cmocka_unit_test(test_adaptive_stays_pooled_when_it_pays), cmocka_unit_test(test_adaptive_ignores_idle_gaps),
        cmocka_unit_test(test_forced_mode_switching), cmocka_unit_test(test_solo_is_caller),
        cmocka_unit_test(test_default_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
