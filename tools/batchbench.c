/* batchbench — aggregate decode throughput of B sequences stepped together through ink_batch_eval
 * (continuous batching, issue 18) against the same B sequences decoded one after another, on one
 * model, in one run. Each sequence has its own session, generator and (with --mtp) drafter; greedy,
 * different prompts; the outputs of both schedules are checked to be identical. The drafters share
 * one set of weights (ink_drafter_share), so batched rounds also draft together; --own-drafters
 * opens one per sequence instead (batched verify, drafting one sequence after another).
 *
 *   batchbench -m DIR [-b B] [-n TOKENS] [-t THREADS] [-r REPS] [--mtp [K|auto]] [--own-drafters]
 *
 * Prints, per repetition and as medians: sequential tok/s, batched tok/s, their ratio. */
#include "inkling.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAXB = 16 };

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int die(const ink_err *e)
{
    fprintf(stderr, "batchbench: %s\n", e->msg);
    return 1;
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    int B = 4, N = 128, threads = 0, reps = 3, mtp = 0, K = 0, own = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "-b") && i + 1 < argc) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) N = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--own-drafters")) own = 1;
        else if (!strcmp(argv[i], "--mtp")) {
            mtp = 1;
            if (i + 1 < argc && argv[i + 1][0] != '-') K = strcmp(argv[++i], "auto") ? atoi(argv[i]) : 0;
        } else {
            fprintf(stderr, "usage: batchbench -m DIR [-b B] [-n TOKENS] [-t THREADS] [-r REPS] [--mtp [K|auto]] [--own-drafters]\n");
            return 2;
        }
    }
    if (!dir || B < 1 || B > MAXB || N < 2 || reps < 1) {
        fprintf(stderr, "batchbench: need -m DIR, 1 <= B <= %d, TOKENS >= 2, REPS >= 1\n", MAXB);
        return 2;
    }
    ink_err e = {0};
    ink_model *m;
    ink_model_opts mo = {.n_threads = threads};
    if (ink_model_open(&m, dir, &mo, &e)) return die(&e);
    int V = ink_model_n_vocab(m);
    ink_session *s[MAXB];
    ink_gen *g[MAXB];
    ink_drafter *d[MAXB] = {0};
    ink_gen_opts o[MAXB];
    int32_t p[MAXB][16], *out[MAXB], *ref[MAXB];
    for (int i = 0; i < B; i++) {
        if (ink_session_create(&s[i], m, 0, &e) || ink_gen_create(&g[i], s[i], &e)) return die(&e);
        if (mtp && (i == 0 || own ? ink_drafter_open(&d[i], m, dir, &e) : ink_drafter_share(&d[i], d[0], &e)))
            return die(&e);
        for (int t = 0; t < 16; t++) p[i][t] = (int32_t)((7919u * (unsigned)(i * 16 + t) + 17u) % (unsigned)(V > 256 ? 256 : V));
        o[i] = (ink_gen_opts){.max_tokens = N, .drafter = d[i], .block_size = K, .capture_commit = 1};
        out[i] = malloc((size_t)N * sizeof(int32_t)), ref[i] = malloc((size_t)N * sizeof(int32_t));
    }
    ink_batch *bt;
    if (ink_batch_create(&bt, m, B * (INK_MAX_DEPTH + 2), 0, &e)) return die(&e);
    double seq_r[64], bat_r[64], ratio[64];
    if (reps > 64) reps = 64;
    printf("batchbench: %s, B = %d sequences x %d tokens, %s%s\n", dir, B, N, mtp ? (K ? "mtp fixed K" : "mtp auto K") : "plain",
           mtp ? (own ? ", a drafter per sequence" : ", drafters sharing weights (drafting together)") : "");
    for (int r = 0; r < reps; r++) {
        /* one after another */
        double ts = 0; /* decode time only, as below */
        long tok = 0;
        for (int i = 0; i < B; i++) {
            int n;
            ink_gen_stats st;
            if (ink_gen_run(g[i], p[i], 16, &o[i], ref[i], N, &n, &st, &e)) return die(&e);
            tok += n - 1, ts += st.decode_s;
        }
        /* together: every step's verify rows in one batched forward */
        for (int i = 0; i < B; i++)
            if (ink_gen_start(g[i], p[i], 16, &o[i], out[i], N, NULL, &e)) return die(&e);
        double t1 = now();
        ink_err errs[MAXB] = {{0}};
        while (ink_gen_step_many(bt, g, B, 0, errs) > 0) {}
        for (int i = 0; i < B; i++)
            if (errs[i].code) return die(&errs[i]);
        double tb = now() - t1; /* decode only: the prefills ran before t1 */
        long btok = 0;
        for (int i = 0; i < B; i++) {
            int n = ink_gen_n_out(g[i]);
            if (ink_gen_finish(g[i])) return die(&e);
            if (memcmp(out[i], ref[i], (size_t)n * sizeof(int32_t))) {
                fprintf(stderr, "batchbench: sequence %d differs between the schedules\n", i);
                return 1;
            }
            btok += n - 1;
        }
        seq_r[r] = tok / ts, bat_r[r] = btok / tb, ratio[r] = bat_r[r] / seq_r[r];
        printf("  rep %d: one after another %.1f tok/s, batched %.1f tok/s, ratio %.2f\n", r + 1, seq_r[r], bat_r[r], ratio[r]);
    }
    qsort(seq_r, (size_t)reps, sizeof(double), cmp_d), qsort(bat_r, (size_t)reps, sizeof(double), cmp_d);
    qsort(ratio, (size_t)reps, sizeof(double), cmp_d);
    printf("median: one after another %.1f tok/s, batched %.1f tok/s, batched / sequential %.2f (outputs identical)\n",
           seq_r[reps / 2], bat_r[reps / 2], ratio[reps / 2]);
    ink_batch_free(bt);
    for (int i = B - 1; i >= 0; i--) ink_gen_free(g[i]), ink_drafter_free(d[i]), ink_session_free(s[i]), free(out[i]), free(ref[i]);
    ink_model_free(m);
    return 0;
}
