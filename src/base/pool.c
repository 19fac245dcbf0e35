/* pool.c — persistent thread pool (see pool.h). Generation counter + two condition variables. */
#include "base/pool.h"

#include <pthread.h>
#include <stdlib.h>

struct ink_pool {
    int n;
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long gen;
    int pending, stop;
    ink_task_fn fn;
    void *ctx;
};

typedef struct worker_arg {
    ink_pool *p;
    int ith;
} worker_arg;

static _Thread_local int in_task;

static void *worker(void *arg)
{
    worker_arg *w = arg;
    ink_pool *p = w->p;
    int ith = w->ith;
    free(w);
    unsigned long seen = 0;
    in_task = 1;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen && !p->stop) pthread_cond_wait(&p->go, &p->mu);
        if (p->stop) break;
        seen = p->gen;
        ink_task_fn fn = p->fn;
        void *ctx = p->ctx;
        pthread_mutex_unlock(&p->mu);
        fn(ctx, ith, p->n);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
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
        if (!w || pthread_create(&p->th[i], NULL, worker, w ? (w->p = p, w->ith = i, w) : NULL)) {
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
    p->stop = 1;
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
    pthread_mutex_lock(&p->mu);
    p->fn = fn, p->ctx = ctx;
    p->pending = p->n - 1;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    in_task = 1;
    fn(ctx, 0, p->n);
    in_task = 0;
    pthread_mutex_lock(&p->mu);
    while (p->pending) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
