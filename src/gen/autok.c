/* autok.c — the adaptive draft length; see autok.h for the model. */
#include "gen/autok.h"

#include <string.h>

#define EXPLORE 16        /* every EXPLORE-th round tries a neighbour of the best width */
#define LAMBDA_A 0.04     /* smoothing of the acceptance estimates (~25 observations) */
#define LAMBDA_C 0.10     /* smoothing of the costs (~10 rounds) */
#define PRIOR_A 0.5       /* acceptance assumed for a position never observed (and nothing before it) */
#define CLIP 8.0          /* a round slower than CLIP x its estimate (a preemption) counts as CLIP x */

void ink_autok_init(ink_autok *c, int kmax)
{
    memset(c, 0, sizeof *c);
    c->kmax = kmax < 1 ? 1 : kmax > INK_MAX_BLOCK ? INK_MAX_BLOCK : kmax;
}

/* Running mean for the first 1/lambda samples, then an exponential average. */
static void smooth(double *v, int *n, double x, double lambda)
{
    double w = 1.0 / (*n + 1);
    if (w < lambda) w = lambda;
    *v += w * (x - *v);
    (*n)++;
}

static double alpha_of(const ink_autok *c, int j)
{
    for (; j >= 0; j--)
        if (c->alpha_n[j]) return c->alpha[j];
    return PRIOR_A;
}

double ink_autok_expected(const ink_autok *c, int K)
{
    double e = 1, run = 1;
    for (int j = 0; j < K - 1 && j < INK_MAX_DEPTH; j++) run *= alpha_of(c, j), e += run;
    return e;
}

double ink_autok_cost(const ink_autok *c, int K)
{
    if (c->cost_n[K]) return c->cost[K];
    int lo = K - 1, hi = K + 1;
    while (lo >= 1 && !c->cost_n[lo]) lo--;
    while (hi <= c->kmax && !c->cost_n[hi]) hi++;
    double est = 0;
    if (lo >= 1) est = c->cost[lo] + (K - lo) * c->draft_cost;
    else if (hi <= c->kmax) est = c->cost[hi] - (hi - K) * c->draft_cost;
    if (hi <= c->kmax && est > c->cost[hi]) est = c->cost[hi]; /* a wider round costs at least as much */
    if (est <= 0 && hi <= c->kmax) est = c->cost[hi] * K / hi;
    return est > 0 ? est : 0;
}

int ink_autok_best(const ink_autok *c)
{
    if (!c->cost_n[1]) return 1; /* the first round measures a plain step */
    int best = 1;
    double br = 0;
    for (int K = 1; K <= c->kmax; K++) {
        double cost = ink_autok_cost(c, K);
        if (!(cost > 0)) continue;
        double r = ink_autok_expected(c, K) / cost;
        if (r > br * (1 + 1e-9)) br = r, best = K; /* ties go to the narrower width */
    }
    return best;
}

int ink_autok_choose(ink_autok *c)
{
    int best = ink_autok_best(c);
    c->round++;
    if (c->kmax < 2 || c->round % EXPLORE) return best;
    int up = best + 1 <= c->kmax, down = best - 1 >= 1;
    c->explore_flip ^= 1;
    if (up && (c->explore_flip || !down)) return best + 1;
    return down ? best - 1 : best;
}

void ink_autok_observe(ink_autok *c, int K, int M, int a, double seconds, double draft_seconds)
{
    if (K < 1 || K > c->kmax || !(seconds >= 0)) return;
    if (c->cost_n[K] >= 4 && seconds > CLIP * c->cost[K]) seconds = CLIP * c->cost[K];
    smooth(&c->cost[K], &c->cost_n[K], seconds, LAMBDA_C);
    if (M > 0) {
        smooth(&c->draft_cost, &c->draft_n, draft_seconds / M, LAMBDA_C);
        /* draft j + 1 was tested iff drafts 1..j were accepted (j <= a), and kept iff j < a */
        for (int j = 0; j < M && j <= a && j < INK_MAX_DEPTH; j++)
            smooth(&c->alpha[j], &c->alpha_n[j], j < a ? 1.0 : 0.0, LAMBDA_A);
    }
}
