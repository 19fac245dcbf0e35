/*
 * pool.h — one persistent pthread pool per model.
 *
 * Work is handed out in chunks that threads claim dynamically (an atomic counter), so a thread the
 * OS has descheduled never holds the others: whoever is running takes the next chunk, and the
 * caller (thread 0) takes chunks too. Results never depend on which thread ran which chunk, nor on
 * the thread count: callers only give work whose chunks are independent (matmul rows, attention
 * tiles).
 *
 * Waiting is bounded spinning (tens of microseconds: decode runs dozens of small matmuls per token)
 * followed by a condition-variable sleep, so an idle pool (a server between requests) uses no CPU.
 * By default the pool measures whether using every thread pays: when the caller is often off its
 * CPU (another process shares its core) it tries a short stretch of jobs on the caller alone and
 * keeps running solo while that is clearly cheaper per job, probing all threads again now and then
 * with exponential back-off: on a busy machine it degrades to one thread instead of collapsing,
 * and on a quiet one it runs every thread without probing.
 *
 * No thread is created per call. A call made from inside a task runs serially.
 * Ownership: ink_pool_create returns a pool the caller frees with ink_pool_free (joins workers).
 */
#ifndef INK_POOL_H
#define INK_POOL_H

/* ink_pool_run's task: slice `ith` of `nth` (each slice runs exactly once, on some thread). */
typedef void (*ink_task_fn)(void *ctx, int ith, int nth);
/* ink_pool_for's task: items [i0, i1); `tid` in [0, ink_pool_size) names the running thread, for
 * per-thread scratch. It must give the same results for any partition of the items. */
typedef void (*ink_range_fn)(void *ctx, int i0, int i1, int tid);

typedef struct ink_pool ink_pool;

ink_pool *ink_pool_create(int n_threads); /* NULL on failure; n_threads < 1 is treated as 1 */
void ink_pool_free(ink_pool *p);
int ink_pool_size(const ink_pool *p);

/* fn(ctx, i, n) for every slice i < n = ink_pool_size(p); returns when all are done. */
void ink_pool_run(ink_pool *p, ink_task_fn fn, void *ctx);
/* fn over [0, n) in chunks of `grain` items (the last may be shorter); returns when all are done. */
void ink_pool_for(ink_pool *p, int n, int grain, ink_range_fn fn, void *ctx);
/* INK_POOL_AUTO (default): choose between all threads and the caller alone by measurement;
 * INK_POOL_POOLED: always every thread (kernel benchmarks that measure n-thread bandwidth);
 * INK_POOL_SOLO: always the caller alone (tests). Results are the same in every mode. */
enum { INK_POOL_AUTO, INK_POOL_POOLED, INK_POOL_SOLO };
void ink_pool_set_mode(ink_pool *p, int mode);
void ink_pool_set_adaptive(ink_pool *p, int on); /* 1: INK_POOL_AUTO, 0: INK_POOL_POOLED */
/* Test hook: the clocks AUTO mode measures with, in ns: wall (cpu = 0) and the caller's CPU time
 * (cpu = 1); NULL: CLOCK_MONOTONIC and CLOCK_THREAD_CPUTIME_ID. A test decides what solo and pooled
 * cost and the choice is deterministic. Only the calling thread calls it. */
void ink_pool_set_clock(ink_pool *p, long long (*clock)(void *arg, int cpu), void *arg);

/* Counters since creation, for benchmarks: runs made (jobs of more than one chunk, outside a task),
 * runs the caller did alone, times AUTO switched to solo, and probe windows. */
typedef struct ink_pool_stats {
    unsigned long long runs, solo_runs, fallbacks, probes;
} ink_pool_stats;
void ink_pool_get_stats(const ink_pool *p, ink_pool_stats *out);

/* The default thread count: physical cores among the CPUs this process may run on (affinity mask),
 * at least 1. */
int ink_default_threads(void);

#endif
