/* test_ep.c — the library's expert-parallel path (issue 19) without MPI: ranks are threads of this
 * process joined by an in-memory transport (a FIFO mailbox per ordered pair of ranks), each with its
 * own ink_model. Logits of a prompt (several chunks, every row) and of a batched evaluation are
 * bitwise those of one model for 2, 3 and 5 ranks; malformed requests and impossible splits are
 * refused with messages naming the rank. Runs in every build (tests/test_mpi.c runs the CLI over
 * MPI). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "inkling.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN "tests/data/golden/tiny-moe"
#define KJV "models/inkling-kjv"
#define MAXR 8

typedef struct msg {
    struct msg *next;
    size_t n;
    unsigned char data[];
} msg;

typedef struct box { /* messages from one rank to another, in order */
    msg *head, *tail;
} box;

typedef struct world {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    box b[MAXR][MAXR]; /* [from][to] */
    int n;
} world;

typedef struct rank_ctx {
    world *w;
    int rank;
} rank_ctx;

static int w_send(void *ctx, int to, const void *buf, size_t n)
{
    rank_ctx *c = ctx;
    msg *m = malloc(sizeof *m + n);
    if (!m) abort();
    m->next = NULL, m->n = n;
    memcpy(m->data, buf, n);
    pthread_mutex_lock(&c->w->mu);
    box *b = &c->w->b[c->rank][to];
    if (b->tail) b->tail->next = m;
    else b->head = m;
    b->tail = m;
    pthread_cond_broadcast(&c->w->cv);
    pthread_mutex_unlock(&c->w->mu);
    return 0;
}

static int w_probe(void *ctx, int from, size_t *n)
{
    rank_ctx *c = ctx;
    pthread_mutex_lock(&c->w->mu);
    while (!c->w->b[from][c->rank].head) pthread_cond_wait(&c->w->cv, &c->w->mu);
    *n = c->w->b[from][c->rank].head->n;
    pthread_mutex_unlock(&c->w->mu);
    return 0;
}

static int w_recv(void *ctx, int from, void *buf, size_t n)
{
    rank_ctx *c = ctx;
    pthread_mutex_lock(&c->w->mu);
    box *b = &c->w->b[from][c->rank];
    while (!b->head) pthread_cond_wait(&c->w->cv, &c->w->mu);
    msg *m = b->head;
    b->head = m->next;
    if (!b->head) b->tail = NULL;
    pthread_mutex_unlock(&c->w->mu);
    memcpy(buf, m->data, n < m->n ? n : m->n);
    free(m);
    return 0;
}

static void w_fail(void *ctx, const char *why)
{
    fprintf(stderr, "rank %d: transport failure: %s\n", ((rank_ctx *)ctx)->rank, why);
    abort();
}

typedef struct job {
    world w;
    rank_ctx ctx[MAXR];
    ink_ep_transport t[MAXR];
    ink_model *m[MAXR];
    pthread_t th[MAXR];
    int rc[MAXR];
    ink_err err[MAXR];
} job;

static void *serve_thread(void *arg)
{
    void **a = arg;
    job *j = a[0];
    int r = (int)(intptr_t)a[1];
    free(a);
    j->rc[r] = ink_ep_serve(j->m[r], &j->err[r]);
    return NULL;
}

/* Opens the model on n ranks (rank 0's for the caller) and starts ranks 1..n-1 serving. */
static job *job_start(const char *dir, int n)
{
    job *j = calloc(1, sizeof *j);
    assert_non_null(j);
    pthread_mutex_init(&j->w.mu, NULL);
    pthread_cond_init(&j->w.cv, NULL);
    j->w.n = n;
    for (int r = 0; r < n; r++) {
        j->ctx[r] = (rank_ctx){&j->w, r};
        j->t[r] = (ink_ep_transport){r, n, &j->ctx[r], w_send, w_probe, w_recv, w_fail};
        ink_err e = {0};
        ink_model_opts o = {.n_threads = r ? 1 : 2, .expert_parallel = &j->t[r]};
        if (ink_model_open(&j->m[r], dir, &o, &e)) fail_msg("rank %d: %s", r, e.msg);
    }
    for (int r = 1; r < n; r++) {
        void **a = malloc(2 * sizeof *a);
        a[0] = j, a[1] = (void *)(intptr_t)r;
        assert_int_equal(pthread_create(&j->th[r], NULL, serve_thread, a), 0);
    }
    return j;
}

static void job_end(job *j)
{
    assert_int_equal(ink_ep_stop(&j->t[0]), INK_OK);
    for (int r = 1; r < j->w.n; r++) {
        pthread_join(j->th[r], NULL);
        if (j->rc[r]) fprintf(stderr, "rank %d: %s\n", r, j->err[r].msg);
        assert_int_equal(j->rc[r], INK_OK);
    }
    for (int r = 0; r < j->w.n; r++) ink_model_free(j->m[r]);
    for (int a = 0; a < MAXR; a++)
        for (int b = 0; b < MAXR; b++) assert_null(j->w.b[a][b].head);
    pthread_mutex_destroy(&j->w.mu);
    pthread_cond_destroy(&j->w.cv);
    free(j);
}

/* All-row logits of `n_ids` tokens fed in pieces of `piece`, into a malloc'd array. */
static float *eval_logits(ink_model *m, const int32_t *ids, int n_ids, int piece)
{
    int V = ink_model_n_vocab(m);
    float *lg = malloc((size_t)n_ids * V * sizeof(float));
    ink_session *s;
    ink_err e = {0};
    assert_int_equal(ink_session_create(&s, m, 256, &e), INK_OK);
    for (int t = 0; t < n_ids; t += piece) {
        int n = n_ids - t < piece ? n_ids - t : piece;
        ink_eval_out o = {.logits = lg + (size_t)t * V, .all_logits = 1};
        assert_int_equal(ink_session_eval(s, ids + t, n, &o, &e), INK_OK);
    }
    ink_session_free(s);
    return lg;
}

static void ids_for(int32_t *ids, int n, int vocab)
{
    uint32_t x = 12345;
    for (int i = 0; i < n; i++) x = x * 1103515245u + 12345u, ids[i] = (int32_t)((x >> 8) % (uint32_t)vocab);
}

static void logits_equal(const char *dir)
{
    ink_model *one;
    ink_err e = {0};
    ink_model_opts o = {.n_threads = 2};
    if (ink_model_open(&one, dir, &o, &e)) skip();
    int V = ink_model_n_vocab(one), N = 100;
    int32_t ids[100];
    ids_for(ids, N, V);
    float *ref = eval_logits(one, ids, N, 100), *ref1 = eval_logits(one, ids, N, 1);
    const int ranks[] = {2, 3, 5};
    for (int i = 0; i < 3; i++) {
        job *j = job_start(dir, ranks[i]);
        float *a = eval_logits(j->m[0], ids, N, 100); /* a prefill of 64 + 36 rows */
        float *b = eval_logits(j->m[0], ids, N, 1);   /* one row per forward (decode) */
        assert_memory_equal(a, ref, (size_t)N * V * sizeof(float));
        assert_memory_equal(b, ref1, (size_t)N * V * sizeof(float));
        ink_ep_stats st;
        ink_model_ep_stats(j->m[0], &st);
        assert_int_equal(st.n_ranks, ranks[i]);
        assert_int_equal(st.rank, 0);
        assert_true(st.exchanges > 0 && st.exchanges <= st.moe_layers);
        assert_true(st.bytes_sent > 0 && st.bytes_recv > 0);
        ink_ep_rank rk[MAXR];
        assert_int_equal(ink_ep_ranks(j->m[0], rk, MAXR, &e), ranks[i]);
        for (int r = 0; r < ranks[i]; r++) {
            int e0, e1;
            ink_ep_range(ink_model_get_info(one)->n_expert, r, ranks[i], &e0, &e1);
            assert_int_equal(rk[r].rank, r);
            assert_int_equal(rk[r].expert0, e0);
            assert_int_equal(rk[r].expert1, e1);
            assert_true(rk[r].peak_rss_kb > 0);
            assert_true(r == 0 || rk[r].requests > 0);
        }
        assert_int_equal(ink_ep_ranks(j->m[0], rk, 1, &e), INK_E_INVAL);
        e = (ink_err){0};
        free(a);
        free(b);
        job_end(j);
    }
    free(ref);
    free(ref1);
    ink_model_free(one);
}

static void test_logits_golden(void **state)
{
    (void)state;
    logits_equal(GOLDEN);
}

static void test_logits_bundled(void **state)
{
    (void)state;
    logits_equal(KJV);
}

/* A batch of two sessions (3 + 1 rows): bitwise what one model's batch gives. */
static void test_batch(void **state)
{
    (void)state;
    ink_model *one;
    ink_err e = {0};
    ink_model_opts o = {.n_threads = 2};
    assert_int_equal(ink_model_open(&one, GOLDEN, &o, &e), INK_OK);
    int V = ink_model_n_vocab(one);
    job *j = job_start(GOLDEN, 3);
    ink_model *ms[2] = {one, j->m[0]};
    float *lg[2][2];
    for (int k = 0; k < 2; k++) {
        ink_session *s[2];
        ink_batch *b;
        assert_int_equal(ink_session_create(&s[0], ms[k], 64, &e), INK_OK);
        assert_int_equal(ink_session_create(&s[1], ms[k], 64, &e), INK_OK);
        assert_int_equal(ink_batch_create(&b, ms[k], 8, 64, &e), INK_OK);
        int32_t t0[3] = {5, 17, 300 % V}, t1[1] = {42};
        const int32_t *toks[2] = {t0, t1};
        int nt[2] = {3, 1};
        lg[k][0] = malloc((size_t)3 * V * sizeof(float));
        lg[k][1] = malloc((size_t)V * sizeof(float));
        ink_eval_out outs[2] = {{.logits = lg[k][0], .all_logits = 1}, {.logits = lg[k][1], .all_logits = 1}};
        assert_int_equal(ink_batch_eval(b, s, toks, nt, outs, 2, &e), INK_OK);
        ink_batch_free(b);
        ink_session_free(s[0]);
        ink_session_free(s[1]);
    }
    assert_memory_equal(lg[0][0], lg[1][0], (size_t)3 * V * sizeof(float));
    assert_memory_equal(lg[0][1], lg[1][1], (size_t)V * sizeof(float));
    for (int k = 0; k < 2; k++) free(lg[k][0]), free(lg[k][1]);
    job_end(j);
    ink_model_free(one);
}

/* A serving rank refuses garbage and a request for a layer the checkpoint does not have. */
static void test_malformed(void **state)
{
    (void)state;
    for (int c = 0; c < 2; c++) {
        job *j = job_start(GOLDEN, 2);
        unsigned char junk[64];
        memset(junk, 0x5a, sizeof junk);
        if (c) { /* right magic, the dense layer 0 */
            uint32_t h[2] = {0x31504b49u, 1};
            int32_t f[4] = {0, 1, 2, 64};
            memcpy(junk, h, sizeof h);
            memcpy(junk + 8, f, sizeof f);
        }
        w_send(&j->ctx[0], 1, junk, sizeof junk);
        pthread_join(j->th[1], NULL);
        assert_int_equal(j->rc[1], INK_E_FORMAT);
        assert_non_null(strstr(j->err[1].msg, "rank 1"));
        assert_non_null(strstr(j->err[1].msg, c ? "not a MoE layer" : "malformed"));
        for (int r = 0; r < 2; r++) ink_model_free(j->m[r]);
        pthread_mutex_destroy(&j->w.mu);
        pthread_cond_destroy(&j->w.cv);
        free(j);
    }
}

/* Splits that cannot work are refused at open; one rank is one process. */
static void test_refusals(void **state)
{
    (void)state;
    world w = {0};
    rank_ctx c = {&w, 0};
    ink_ep_transport t = {0, 2, &c, w_send, w_probe, w_recv, w_fail};
    ink_model_opts o = {.n_threads = 1, .expert_parallel = &t};
    ink_model *m = NULL;
    ink_err e = {0};
    assert_int_equal(ink_model_open(&m, "tests/data/golden/tiny-dense", &o, &e), INK_E_INVAL);
    assert_non_null(strstr(e.msg, "0 MoE layers"));
    t.n_ranks = 9; /* tiny-moe has 8 routed experts */
    e = (ink_err){0};
    assert_int_equal(ink_model_open(&m, GOLDEN, &o, &e), INK_E_INVAL);
    assert_non_null(strstr(e.msg, "8 routed experts"));
    t.n_ranks = 2, t.recv = NULL;
    e = (ink_err){0};
    assert_int_equal(ink_model_open(&m, GOLDEN, &o, &e), INK_E_INVAL);
    t.recv = w_recv, t.n_ranks = 1;
    e = (ink_err){0};
    assert_int_equal(ink_model_open(&m, GOLDEN, &o, &e), INK_OK);
    ink_ep_stats st;
    ink_model_ep_stats(m, &st);
    assert_int_equal(st.n_ranks, 1);
    assert_int_equal(st.expert1, 8);
    e = (ink_err){0};
    assert_int_equal(ink_ep_serve(m, &e), INK_E_INVAL);
    ink_model_free(m);
    int a, b;
    ink_ep_range(256, 3, 8, &a, &b);
    assert_int_equal(a, 96);
    assert_int_equal(b, 128);
    ink_ep_range(16, 2, 3, &a, &b);
    assert_int_equal(a, 10);
    assert_int_equal(b, 16);
}

int main(void)
{
    const struct CMUnitTest t[] = {
        cmocka_unit_test(test_logits_golden), cmocka_unit_test(test_logits_bundled), cmocka_unit_test(test_batch),
        cmocka_unit_test(test_malformed),     cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(t, NULL, NULL);
}
