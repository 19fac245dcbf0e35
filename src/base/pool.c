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
 * Adaptive fallback: a run is "stalled" when, after the caller ran out of chunks, it still waited
 * more than STALL_NS and longer than its own share took (a worker was descheduled holding a
 * chunk). Two stalls within a window of WINDOW runs make the caller run alone for `backoff` runs
 * (workers sleep meanwhile); each fallback doubles `backoff` up to BACKOFF_MAX, and GOOD_WINDOWS
 * stall-free windows reset it. The first window after a solo period is a probe: one stall is
 * enough to fall back again, so probing a still-busy machine costs one stall. The adaptive state is touched only by the caller. */
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
#define STALL_NS 50000LL     /* a wait longer than this (and than the caller's own share) is a stall */
#define WINDOW 64            /* runs per observation window */
#define BACKOFF_MIN 4096     /* solo runs after the first fallback (decode: ~50 runs a token) */
#define BACKOFF_MAX (1 << 20)
#define GOOD_WINDOWS 16

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
    /* caller-only */
    int adaptive, solo_left, backoff, win_runs, win_stalls, good_windows, probing;
    ink_pool_stats st;
};

typedef struct worker_arg {
    ink_pool *p;
    int tid;
} worker_arg;

static _Thread_local int in_task;

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
    p->adaptive = 1;
    p->backoff = BACKOFF_MIN;
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

void ink_pool_set_adaptive(ink_pool *p, int on)
{
    if (!p) return;
    p->adaptive = on != 0;
    if (!on) p->solo_left = 0;
}

void ink_pool_get_stats(const ink_pool *p, ink_pool_stats *out)
{
    if (out) *out = p ? p->st : (ink_pool_stats){0};
}

/* The caller's bookkeeping after a parallel run (see the file comment). */
static void adapt(ink_pool *p, long long own_ns, long long wait_ns)
{
    if (!p->adaptive) return;
    if (wait_ns > STALL_NS && wait_ns > own_ns) p->win_stalls++;
    if (p->win_stalls >= (p->probing ? 1 : 2)) {
        p->solo_left = p->backoff;
        p->probing = 1;
        p->backoff = p->backoff < BACKOFF_MAX / 2 ? p->backoff * 2 : BACKOFF_MAX;
        p->win_runs = p->win_stalls = p->good_windows = 0;
        p->st.fallbacks++;
        return;
    }
    if (++p->win_runs == WINDOW) {
        if (p->win_stalls == 0 && ++p->good_windows >= GOOD_WINDOWS) p->backoff = BACKOFF_MIN, p->good_windows = 0;
        p->win_runs = p->win_stalls = p->probing = 0;
    }
}

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
    if (p->solo_left > 0) {
        p->solo_left--;
        p->st.solo_runs++;
        in_task = 1;
        fn(ctx, 0, n, 0);
        in_task = 0;
        return;
    }
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
    atomic_store(&p->state, (uint64_t)g << 32); /* seq_cst: publishes the job; pairs with `sleepers` */
    if (atomic_load(&p->sleepers)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->go);
        pthread_mutex_unlock(&p->mu);
    }
    long long t0 = now_ns();
    in_task = 1;
    run_chunks(p, g, 0);
    in_task = 0;
    long long t1 = now_ns(), t2 = t1;
    if (atomic_load_explicit(&p->ndone, memory_order_acquire) != nch) {
        for (unsigned spins = 1;; spins++) {
            if (atomic_load_explicit(&p->ndone, memory_order_acquire) == nch) break;
            if (spins % 128 == 0 && now_ns() - t1 > SPIN_NS) {
                pthread_mutex_lock(&p->mu);
                atomic_store(&p->waiting, 1);
                while (atomic_load(&p->ndone) != nch) pthread_cond_wait(&p->done, &p->mu);
                atomic_store(&p->waiting, 0);
                pthread_mutex_unlock(&p->mu);
                break;
            }
            cpu_relax();
        }
        t2 = now_ns();
    }
    adapt(p, t1 - t0, t2 - t1);
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
