/*
 * pool.h — one persistent pthread pool per model. ink_pool_run(p, fn, ctx) calls fn(ctx, ith, nth)
 * once on each of the nth threads (the caller is thread 0) and returns when all are done. No thread
 * is created per call. A call made from inside a task runs serially (fn(ctx, 0, 1)).
 * Ownership: ink_pool_create returns a pool the caller frees with ink_pool_free (joins workers).
 */
#ifndef INK_POOL_H
#define INK_POOL_H

typedef struct ink_pool ink_pool;
typedef void (*ink_task_fn)(void *ctx, int ith, int nth);

ink_pool *ink_pool_create(int n_threads); /* NULL on failure; n_threads < 1 is treated as 1 */
void ink_pool_free(ink_pool *p);
int ink_pool_size(const ink_pool *p);
void ink_pool_run(ink_pool *p, ink_task_fn fn, void *ctx);

#endif
