/* pool.c — persistent thread pool (see pool.h).
 *
 * Hand-off: a generation counter and a pending counter, both atomic. Workers spin on the generation
 * for a short while (decode runs dozens of small matmuls per token, and a condition-variable wake-up
 * costs tens of microseconds), then sleep on a condition variable; the caller spins on `pending`
 * the same way. The mutex only guards the sleeping paths. */
#include "base/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#define SPINS 20000 /* ~tens of microseconds of polling before sleeping */

struct ink_pool {
    int n;
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    atomic_ulong gen;
    atomic_int pending, stop, sleepers, waiting;
    ink_task_fn fn;
    void *ctx;
};

typedef struct worker_arg {
    ink_pool *p;
    int ith;
} worker_arg;

static _Thread_local int in_task;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker(void *arg)
{
    worker_arg *w = arg;
    ink_pool *p = w->p;
    int ith = w->ith;
    free(w);
    unsigned long seen = 0;
    in_task = 1;
    for (;;) {
        unsigned long g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&p->stop, memory_order_acquire)) {
            if (++spins < SPINS) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->go, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
        }
        if (atomic_load(&p->stop)) break;
        seen = g;
        p->fn(p->ctx, ith, p->n);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->waiting)) { /* seq_cst: pairs with `waiting` */
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

ink_pool *ink_pool_create(int n)
{
    if (n < 1) n = 1;
    ink_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n;
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
        if (w) w->p = p, w->ith = i;
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

void ink_pool_run(ink_pool *p, ink_task_fn fn, void *ctx)
{
    if (!p || p->n == 1 || in_task) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn, p->ctx = ctx;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: publishes fn, ctx, pending; pairs with `sleepers` */
    if (atomic_load(&p->sleepers)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->go);
        pthread_mutex_unlock(&p->mu);
    }
    in_task = 1;
    fn(ctx, 0, p->n);
    in_task = 0;
    for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire);) {
        if (++spins < SPINS) {
            cpu_relax();
            continue;
        }
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->waiting, 1);
        while (atomic_load(&p->pending)) pthread_cond_wait(&p->done, &p->mu);
        atomic_store(&p->waiting, 0);
        pthread_mutex_unlock(&p->mu);
        break;
    }
}
