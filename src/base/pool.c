/* pool.c — persistent thread pool with dynamically claimed chunks (see pool.h).
 *
 * One 64-bit atomic word holds (generation << 32 | next chunk). The caller publishes a job (function,
 * context, item count, grain, chunk count: relaxed atomics) and then the word with a new generation
 * and chunk 0; every thread claims chunks by compare-and-swap on that word, so a claim succeeds
 * only while the job it read is still the current one (before writing a job's fields the caller
 * stores a word no claim can succeed on). `ndone` counts finished chunks; the caller
 * returns when it equals the chunk count. Late workers that wake after a job finished find its
 * chunks gone and go back to waiting.
 *
 * Waiting (workers for a job, the caller for the last chunks) spins for at most SPIN_NS, then
 * sleeps on a condition variable; `sleepers` / `waiting` tell the other side whether a wake-up is
 * needed (seq_cst stores and loads on both sides, so a wake-up is never lost).
 *
 * Adaptive mode (INK_POOL_AUTO) chooses, by measurement, between running jobs on every thread
 * ("pooled") and on the caller alone ("solo", workers asleep). Runs are grouped into windows of at
 * least WIN_RUNS runs and WIN_NS, each ending where a run with the window's first (function, items,
 * grain) begins, so that a window holds whole cycles of the caller's work (decode repeats the same
 * matmuls every layer); windows add up to spans of at least SPAN_NS. A span has a cost (wall time
 * per run, the caller's serial code between runs included) and an on-CPU fraction (the caller's
 * thread CPU time over wall time). A gap of more than GAP_NS between runs (a server between
 * requests) drops the open window and span, so idle time is never counted.
 *  - Pooled, a span with an on-CPU fraction below F_LOW (the caller was descheduled: another
 *    process shares its core, or it slept waiting for a descheduled worker) starts a probe: one
 *    span solo, after WARM_NS discarded (workers going to sleep, the scheduler moving the caller to
 *    the core a worker left). The pool stays solo if that span costs less than the pooled one by
 *    more than MARGIN; otherwise it goes back and ignores low spans for a while (doubling).
 *    On a quiet machine the caller is never descheduled and pooled runs are never probed.
 *  - Solo, every `gap` spans (doubling up to PROBE_MAX after each failed probe) it probes one
 *    pooled span the same way and returns to pooled if that span's on-CPU fraction is at least F_LOW
 *    and it costs at most MARGIN more than solo (a probe window in which the caller was on its CPU
 *    less than half the time ends the probe at once).
 * Next to a busy loop on one of two cores the spinning worker keeps the free core while the caller
 * shares the busy one: the caller is slow, not a worker, and the fraction sees it. The adaptive
 * state is touched only by the caller; results never depend on the mode. */
#define _GNU_SOURCE
#include "base/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SPIN_NS 60000LL      /* spin this long before sleeping */
#define WIN_NS 1000000LL     /* a window lasts at least this long ... */
#define WIN_RUNS 64          /* ... and holds at least this many runs (decode: ~50 runs a token) */
#define SPAN_NS 4000000LL    /* windows add up to spans this long (a few scheduler slices) */
#define GAP_NS 1000000LL     /* a longer gap between runs drops the open window and span */
#define WARM_NS 1000000LL    /* discarded after a switch */
#define F_LOW 0.8            /* the caller was on a CPU less than this fraction of a span */
#define MARGIN 0.10          /* a mode must be this much cheaper to win */
#define PROBE_MIN 16         /* spans between probes (solo), or low spans ignored (pooled), at first */
#define PROBE_MAX 128        /* ... doubling up to this many (~0.5 s) */

enum { M_POOLED, M_SOLO };

struct ink_pool {
    int n;
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    _Atomic uint64_t state; /* generation << 32 | next chunk */
    atomic_int ndone, n_chunks, n_items, grain;
    _Atomic(ink_range_fn) fn;
    _Atomic(void *) ctx;
    atomic_int stop, sleepers, waiting;
    /* caller-only: the adaptive state (see the file comment) */
    int mode_set;         /* INK_POOL_AUTO / _POOLED / _SOLO */
    int mode, home;       /* the mode runs use now; the chosen one */
    int probing, since, gap, skip, gap_p;
    double a;             /* ns per run of the chosen mode's last span */
    long long win_t0, win_cpu0, last_end, warm_until, span_ns, span_cpu, span_runs;
    int win_runs, win_n, win_grain;
    ink_range_fn win_fn;
    long long (*clock)(void *, int);
    void *clock_arg;
    ink_pool_stats st;
};

typedef struct worker_arg {
    ink_pool *p;
    int tid;
} worker_arg;

static _Thread_local int in_task;

#ifdef INK_POOL_DEBUG /* scratch builds: a trace of the windows, printed by ink_pool_free */
enum { DBG_MAX = 8192 };
static struct { int mode, home, probing; long long runs; double r, f; } dbg_w[DBG_MAX];
static int dbg_nw;
#endif


static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Claims and runs chunks of generation g until none are left (or a newer job replaced it). */
static void run_chunks(ink_pool *p, uint32_t g, int tid)
{
    for (;;) {
        uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
        if ((uint32_t)(s >> 32) != g) return;
        uint32_t nch = (uint32_t)atomic_load_explicit(&p->n_chunks, memory_order_relaxed);
        uint32_t i = (uint32_t)s;
        if (i >= nch) return; /* all claimed, or the caller's "being written" marker (index ~0) */
        ink_range_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
        int n = atomic_load_explicit(&p->n_items, memory_order_relaxed);
        int grain = atomic_load_explicit(&p->grain, memory_order_relaxed);
        /* the claim succeeds only if the word is unchanged, i.e. the fields above were this job's */
        if (!atomic_compare_exchange_weak_explicit(&p->state, &s, s + 1, memory_order_acq_rel, memory_order_acquire))
            continue;
        int i0 = (int)i * grain, i1 = i0 + grain < n ? i0 + grain : n;
        fn(ctx, i0, i1, tid);
        if ((uint32_t)atomic_fetch_add(&p->ndone, 1) + 1 == nch && atomic_load(&p->waiting)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

static void *worker(void *arg)
{
    worker_arg *w = arg;
    ink_pool *p = w->p;
    int tid = w->tid;
    free(w);
    uint32_t seen = 0;
    in_task = 1;
    for (;;) {
        uint32_t g;
        long long t0 = 0;
        for (unsigned spins = 0;; spins++) {
            g = (uint32_t)(atomic_load_explicit(&p->state, memory_order_acquire) >> 32);
            if (g != seen || atomic_load_explicit(&p->stop, memory_order_acquire)) break;
            if (spins % 128 == 0) {
                long long t = now_ns();
                if (!t0) t0 = t;
                else if (t - t0 > SPIN_NS) {
                    pthread_mutex_lock(&p->mu);
                    atomic_fetch_add(&p->sleepers, 1);
                    while ((uint32_t)(atomic_load(&p->state) >> 32) == seen && !atomic_load(&p->stop))
                        pthread_cond_wait(&p->go, &p->mu);
                    atomic_fetch_sub(&p->sleepers, 1);
                    pthread_mutex_unlock(&p->mu);
                    t0 = 0;
                    continue;
                }
            }
            cpu_relax();
        }
        if (atomic_load(&p->stop)) break;
        seen = g;
        run_chunks(p, g, tid);
    }
    return NULL;
}

ink_pool *ink_pool_create(int n)
{
    if (n < 1) n = 1;
    ink_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n;
    p->mode_set = INK_POOL_AUTO;
    p->gap = p->gap_p = PROBE_MIN;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    p->th = calloc((size_t)n, sizeof *p->th);
    if (!p->th) {
        ink_pool_free(p);
        return NULL;
    }
    for (int i = 1; i < n; i++) {
        worker_arg *w = malloc(sizeof *w);
        if (w) w->p = p, w->tid = i;
        if (!w || pthread_create(&p->th[i], NULL, worker, w)) {
            free(w);
            p->n = i; /* join the ones that started */
            ink_pool_free(p);
            return NULL;
        }
    }
    return p;
}

void ink_pool_free(ink_pool *p)
{
    if (!p) return;
#ifdef INK_POOL_DEBUG
    if (p->n > 1) {
        fprintf(stderr, "pool n=%d runs=%llu solo=%llu fallbacks=%llu probes=%llu spans=%d\n", p->n, p->st.runs,
                p->st.solo_runs, p->st.fallbacks, p->st.probes, dbg_nw);
        for (int i = 0; i < dbg_nw && i < DBG_MAX; i++)
            fprintf(stderr, "  s%d %s home=%s%s runs=%lld %.0f ns/run f=%.2f\n", i, dbg_w[i].mode ? "solo" : "pool",
                    dbg_w[i].home ? "solo" : "pool", dbg_w[i].probing ? " probe" : "", dbg_w[i].runs, dbg_w[i].r, dbg_w[i].f);
    }
#endif
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++)
        if (p->th) pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p->th);
    free(p);
}

int ink_pool_size(const ink_pool *p) { return p ? p->n : 1; }

void ink_pool_set_mode(ink_pool *p, int mode)
{
    if (!p) return;
    p->mode_set = mode == INK_POOL_POOLED || mode == INK_POOL_SOLO ? mode : INK_POOL_AUTO;
}

void ink_pool_set_adaptive(ink_pool *p, int on) { ink_pool_set_mode(p, on ? INK_POOL_AUTO : INK_POOL_POOLED); }

void ink_pool_set_clock(ink_pool *p, long long (*clock)(void *arg, int cpu), void *arg)
{
    if (!p) return;
    p->clock = clock, p->clock_arg = arg;
    p->win_runs = 0;
}

void ink_pool_get_stats(const ink_pool *p, ink_pool_stats *out)
{
    if (out) *out = p ? p->st : (ink_pool_stats){0};
}

static long long thread_cpu_ns(void)
{
    struct timespec t;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t)) return 0;
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* The adaptive clock: wall (cpu = 0) or the caller's thread CPU time (cpu = 1), in ns. */
static long long clk(ink_pool *p, int cpu)
{
    if (p->clock) return p->clock(p->clock_arg, cpu);
    return cpu ? thread_cpu_ns() : now_ns();
}

static void switch_to(ink_pool *p, int mode, long long t)
{
    p->mode = mode;
    p->warm_until = t + WARM_NS;
    p->span_ns = p->span_cpu = p->span_runs = 0;
}

/* A span of the current mode ended at time t: r ns per run, on-CPU fraction f (file comment). */
static void close_span(ink_pool *p, long long t, double r, double f)
{
#ifdef INK_POOL_DEBUG
    if (dbg_nw < DBG_MAX) dbg_w[dbg_nw].mode = p->mode, dbg_w[dbg_nw].home = p->home, dbg_w[dbg_nw].probing = p->probing,
                          dbg_w[dbg_nw].runs = p->span_runs, dbg_w[dbg_nw].f = f, dbg_w[dbg_nw++].r = r;
#endif
    if (!p->probing && p->home == M_POOLED) {
        if (f >= F_LOW) return;
        if (p->skip > 0) {
            p->skip--;
            return;
        }
        p->a = r, p->probing = 1, p->st.probes++;
        switch_to(p, M_SOLO, t);
    } else if (!p->probing) { /* solo */
        p->a = r;
        if (++p->since < p->gap) return;
        p->since = 0, p->probing = 1, p->st.probes++;
        switch_to(p, M_POOLED, t);
    } else if (p->home == M_POOLED) { /* probed solo */
        p->probing = 0;
        if (r * (1 + MARGIN) < p->a) {
            p->home = M_SOLO, p->gap = PROBE_MIN, p->since = 0, p->a = r;
            p->st.fallbacks++;
        } else {
            p->skip = p->gap_p;
            p->gap_p = p->gap_p < PROBE_MAX / 2 ? p->gap_p * 2 : PROBE_MAX;
            switch_to(p, M_POOLED, t);
        }
    } else { /* probed pooled */
        p->probing = 0;
        if (f >= F_LOW && r <= p->a * (1 + MARGIN)) {
            p->home = M_POOLED, p->skip = 0, p->gap_p = PROBE_MIN;
        } else {
            p->gap = p->gap < PROBE_MAX / 2 ? p->gap * 2 : PROBE_MAX;
            switch_to(p, M_SOLO, t);
        }
    }
}

/* Called at the start of each adaptive run (time t): opens, continues or closes the window. */
static void window_begin(ink_pool *p, long long t, ink_range_fn fn, int n, int grain)
{
    if (p->win_runs > 0 && t - p->last_end <= GAP_NS) {
        long long el = t - p->win_t0;
        int whole = fn == p->win_fn && n == p->win_n && grain == p->win_grain;
        if (el < WIN_NS || p->win_runs < WIN_RUNS || !(whole || el >= 8 * WIN_NS)) return;
        long long cpu = clk(p, 1);
        if (p->win_t0 >= p->warm_until) {
            p->span_ns += el, p->span_cpu += cpu - p->win_cpu0, p->span_runs += p->win_runs;
            /* a pooled probe the caller is mostly off its CPU in fails after one window */
            int bad_probe = p->probing && p->mode == M_POOLED && p->span_cpu < p->span_ns / 2;
            if (p->span_ns >= SPAN_NS || bad_probe) {
                double r = (double)p->span_ns / (double)p->span_runs, f = (double)p->span_cpu / (double)p->span_ns;
                close_span(p, t, r, f);
                p->span_ns = p->span_cpu = p->span_runs = 0;
            }
        }
        p->win_cpu0 = cpu;
    } else { /* first run, or after an idle gap: drop the open window and span */
        p->span_ns = p->span_cpu = p->span_runs = 0;
        p->win_cpu0 = clk(p, 1);
    }
    p->win_t0 = t, p->win_runs = 0, p->win_fn = fn, p->win_n = n, p->win_grain = grain;
}

static void run_pooled(ink_pool *p, int n, int grain, int nch, ink_range_fn fn, void *ctx);

void ink_pool_for(ink_pool *p, int n, int grain, ink_range_fn fn, void *ctx)
{
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int nch = (n + grain - 1) / grain;
    if (!p || p->n == 1 || in_task || nch == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    p->st.runs++;
    int autom = p->mode_set == INK_POOL_AUTO;
    if (autom) window_begin(p, clk(p, 0), fn, n, grain);
    if (p->mode_set == INK_POOL_SOLO || (autom && p->mode == M_SOLO)) {
        p->st.solo_runs++;
        in_task = 1;
        fn(ctx, 0, n, 0);
        in_task = 0;
    } else {
        run_pooled(p, n, grain, nch, fn, ctx);
    }
    if (autom) p->last_end = clk(p, 0), p->win_runs++;
}

static void run_pooled(ink_pool *p, int n, int grain, int nch, ink_range_fn fn, void *ctx)
{
    /* First a word no claim can match or succeed on (new generation, index ~0): a worker holding
     * the old word (all chunks claimed) must not claim against it while the fields below change,
     * or it would run a chunk of the new job early and count it twice. */
    uint32_t g = (uint32_t)(atomic_load_explicit(&p->state, memory_order_relaxed) >> 32) + 1;
    atomic_store(&p->state, (uint64_t)g << 32 | 0xffffffffu);
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->n_items, n, memory_order_relaxed);
    atomic_store_explicit(&p->grain, grain, memory_order_relaxed);
    atomic_store_explicit(&p->n_chunks, nch, memory_order_relaxed);
    atomic_store_explicit(&p->ndone, 0, memory_order_relaxed);
    g++;
    /* publishes the job; pairs with `sleepers`. An exchange, not a store: a read-modify-write is a
     * full barrier everywhere, while a seq_cst store then load (stlr; ldar on aarch64) is not under
     * qemu-user on an x86 host, which let the load of `sleepers` pass the store */
    atomic_exchange(&p->state, (uint64_t)g << 32);
    if (atomic_load(&p->sleepers)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->go);
        pthread_mutex_unlock(&p->mu);
    }
    in_task = 1;
    run_chunks(p, g, 0);
    in_task = 0;
    if (atomic_load_explicit(&p->ndone, memory_order_acquire) != nch) {
        long long t1 = now_ns();
        for (unsigned spins = 1;; spins++) {
            if (atomic_load_explicit(&p->ndone, memory_order_acquire) == nch) break;
            if (spins % 128 == 0 && now_ns() - t1 > SPIN_NS) {
                pthread_mutex_lock(&p->mu);
                atomic_exchange(&p->waiting, 1); /* (an exchange: see the publication above) */
                /* bounded waits: were a wake-up ever lost (the pattern above relies on the memory
                 * order of the machine or emulator), the caller finds the job done 2 ms later
                 * instead of sleeping forever (a qemu-user run of test_pool once hung here) */
                while (atomic_load(&p->ndone) != nch) {
                    struct timespec ts;
                    clock_gettime(CLOCK_REALTIME, &ts);
                    ts.tv_nsec += 2000000;
                    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
                    pthread_cond_timedwait(&p->done, &p->mu, &ts);
                }
                atomic_store(&p->waiting, 0);
                pthread_mutex_unlock(&p->mu);
                break;
            }
            cpu_relax();
        }
    }
}

/* ink_pool_run as ink_pool_for over slices. */
typedef struct run_ctx {
    ink_task_fn fn;
    void *ctx;
    int nth;
} run_ctx;

static void run_slices(void *arg, int i0, int i1, int tid)
{
    (void)tid;
    run_ctx *r = arg;
    for (int i = i0; i < i1; i++) r->fn(r->ctx, i, r->nth);
}

void ink_pool_run(ink_pool *p, ink_task_fn fn, void *ctx)
{
    if (!p || p->n == 1 || in_task) {
        fn(ctx, 0, 1);
        return;
    }
    run_ctx r = {fn, ctx, p->n};
    ink_pool_for(p, p->n, 1, run_slices, &r);
}

/* ---- default thread count ------------------------------------------------------------------ */

static int read_int(const char *path, int *out)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int ok = fscanf(f, "%d", out) == 1;
    fclose(f);
    return ok ? 0 : -1;
}

int ink_default_threads(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    int n_allowed = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n_allowed = CPU_COUNT(&set);
    if (n_allowed <= 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        return online > 0 ? (int)(online > 256 ? 256 : online) : 1;
    }
    /* physical cores: distinct (package, core) pairs among the allowed CPUs */
    enum { MAXC = 1024 };
    long long keys[MAXC];
    int nk = 0, unknown = 0;
    for (int c = 0; c < CPU_SETSIZE && c < MAXC; c++) {
        if (!CPU_ISSET(c, &set)) continue;
        char path[128];
        int pkg = 0, core = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", c);
        if (read_int(path, &pkg)) unknown = 1;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", c);
        if (read_int(path, &core)) unknown = 1;
        if (unknown) break;
        long long k = (long long)pkg << 32 | (unsigned)core;
        int seen = 0;
        for (int i = 0; i < nk && !seen; i++) seen = keys[i] == k;
        if (!seen) keys[nk++] = k;
    }
    int n = unknown || nk == 0 ? n_allowed : nk;
    return n > 256 ? 256 : n;
}
