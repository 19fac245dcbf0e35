/* autok.c — the adaptive draft length; see autok.h for the model. */
#include "gen/autok.h"

#include <math.h>
#include <string.h>

#define EXPLORE 8         /* rounds before the first exploration in each direction */
#define EXPLORE_MAX 32    /* the longest wait between explorations in one direction while drafting */
#define EXPLORE_MAX_PLAIN 1024 /* ... and while plain steps are best: exploring then means restarting
                                  * dormant depths, which costs ~8 plain steps on a model that runs
                                  * from cache (where plain wins); 1 in 64 rounds cost the bundled
                                  * model ~10 % */
#define PROBE_MAX 64      /* the longest wait between plain-step probes while drafting with 3 or more */
#define LAMBDA_A 0.04     /* smoothing of the acceptance estimates (~25 observations) */
#define LAMBDA_C 0.10     /* smoothing of the costs (~10 rounds) */
#define PRIOR_A 0.5       /* acceptance assumed for a position never observed (and nothing before it) */
#define PRIOR_N 2.0       /* the weight of a position's prior (PRIOR_A, or the shallower position's estimate) */
#define OUTLIER 1.5       /* a round slower than OUTLIER x its estimate (a stall, a preemption) counts as
                           * OUTLIER x (autok.h: Stalls) */
#define LAMBDA_S 0.15     /* how fast the speed factor follows an established width's rounds */
#define LAMBDA_T 0.01     /* per round: how fast an estimate not observed loses its weight (staleness) */
#define LAMBDA_Y 0.03     /* smoothing of a width's yield (~33 rounds) */
#define PRIOR_Y 6.0       /* pseudo-observations of yield 1 behind a width's first rounds */
#define YDECAY 0.005      /* per round: the staleness of a width's yield (slower than acceptance's) */
#define YBAND 0.10        /* a yield within 1 +- YBAND counts as 1 (noise: near-equal widths must not flip) */
#define LAMBDA_TC 0.03    /* per round: the staleness of a width's cost (its first rounds, often the run's
                           * slow start, must not stick to a width explored only now and then) */
#define YIELD_LO 0.5
#define YIELD_HI 1.5


void ink_autok_init(ink_autok *c, int kmax)
{
    memset(c, 0, sizeof *c);
    c->kmax = kmax < 1 ? 1 : kmax > INK_MAX_BLOCK ? INK_MAX_BLOCK : kmax;
    c->gap[0] = c->gap[1] = EXPLORE, c->next[0] = EXPLORE, c->next[1] = EXPLORE + EXPLORE / 2;
    c->gap[2] = 2 * EXPLORE, c->next[2] = 2 * EXPLORE;
    c->speed = 1.0;
    memset(c->loop_exact, -1, sizeof c->loop_exact);
}

/* ---- text that repeats (autok.h) ---- */

void ink_autok_text(ink_autok *c, int L, int phase)
{
    if (L < 0 || L > INK_AUTOK_LOOP) L = 0;
    if (L != c->loop_L) { /* another period (or none): what the table says is void */
        c->loop_L = L, c->loop_quiet = 0;
        memset(c->loop_exact, -1, sizeof c->loop_exact), memset(c->loop_lo, 0, sizeof c->loop_lo);
    }
    c->loop_phase = L ? ((phase % L) + L) % L : 0;
}

#define LOOP_QUIET 8 /* rounds without a contradiction before the table is used */

static int loop_on(const ink_autok *c) { return c->loop_L > 0 && c->loop_quiet >= LOOP_QUIET; }

int ink_autok_loop(const ink_autok *c) { return loop_on(c) ? c->loop_L : 0; }

/* Drafts a round of d drafts from phase s accepts by the table; -1: the table does not say. */
static int loop_accepts(const ink_autok *c, int s, int d)
{
    if (c->loop_exact[s] >= 0) return c->loop_exact[s] < d ? c->loop_exact[s] : d;
    return c->loop_lo[s] >= d ? d : -1;
}

/* Tokens per round of width K's cycle from the current phase, by the table; -1: not covered. */
static double loop_tokens(const ink_autok *c, int K)
{
    if (!loop_on(c)) return -1;
    int L = c->loop_L, s = c->loop_phase, at[INK_AUTOK_LOOP], tok[INK_AUTOK_LOOP + 1];
    for (int i = 0; i < L; i++) at[i] = -1;
    for (int step = 0; step <= L; step++) {
        if (at[s] >= 0) { /* the cycle: steps at[s] .. step - 1 */
            int sum = 0;
            for (int i = at[s]; i < step; i++) sum += tok[i];
            return (double)sum / (step - at[s]);
        }
        int a = loop_accepts(c, s, K - 1);
        if (a < 0) return -1;
        at[s] = step, tok[step] = a + 1, s = (s + a + 1) % L;
    }
    return -1; /* not reached: a walk over L phases revisits one within L + 1 steps */
}

/* The longest wait between explorations of width k in direction dir (2: plain probes) while `best`
 * is best; 4 x longer where the text repeats and the table already values k (an exploration then
 * only refreshes k's cost, and each one shifts the cycle: ~2 % of the tokens of a run at 1 in 32). */
#define LOOP_SLOW 4
static int explore_cap(const ink_autok *c, int best, int dir, int k)
{
    int cap = dir == 2 ? PROBE_MAX : best == 1 ? EXPLORE_MAX_PLAIN : EXPLORE_MAX;
    return best >= 2 && loop_on(c) && (dir == 2 || loop_tokens(c, k) >= 0) ? cap * LOOP_SLOW : cap;
}

/* One round of d drafts from the current phase accepted a: into the table. One that contradicts it
 * (a loop still forming, whose first repeats the drafter predicts worse; sampled text) replaces the
 * phase's entry and restarts the quiet count, so a table is used only after LOOP_QUIET rounds that
 * all agreed with it. */
static void loop_record(ink_autok *c, int d, int a)
{
    if (!c->loop_L || d < 1 || a < 0 || a > d) return;
    int s = c->loop_phase, want = loop_accepts(c, s, d);
    int lo = c->loop_lo[s] < d ? c->loop_lo[s] : d;
    if ((want >= 0 && a != want) || a < lo) {
        c->loop_quiet = 0, c->loop_exact[s] = -1, c->loop_lo[s] = 0;
    } else if (c->loop_quiet < LOOP_QUIET) c->loop_quiet++;
    if (a < d) c->loop_exact[s] = (int8_t)a, c->loop_lo[s] = (int8_t)a;
    else if (a > c->loop_lo[s]) c->loop_lo[s] = (int8_t)a;
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

double ink_autok_yield(const ink_autok *c, int K)
{
    if (K < 1 || K > INK_MAX_BLOCK || !c->yield_n[K]) return 1.0;
    double d = c->yield[K] - 1;
    return 1 + (d > YBAND ? d - YBAND : d < -YBAND ? d + YBAND : 0);
}

/* One observation x of an estimate v with effective count *w, last observed at round *at: the
 * count decays with the rounds since, then the observation weighs 1 / count (at least lambda). */
static void observe_stale(const ink_autok *c, double *v, double *w, int *at, double x, double lambda, double decay)
{
    double eff = *w * pow(1 - decay, c->round - *at > 0 ? c->round - *at : 0) + 1, k = 1 / eff;
    if (k < lambda) k = lambda;
    *v += k * (x - *v);
    *w = eff, *at = c->round;
}

double ink_autok_expected(const ink_autok *c, int K)
{
    double e = 1, run = 1;
    for (int j = 0; j < K - 1 && j < INK_MAX_DEPTH; j++) run *= alpha_of(c, j), e += run;
    return e;
}

double ink_autok_tokens(const ink_autok *c, int K)
{
    if (K < 1 || K > c->kmax) return 0;
    double t = loop_tokens(c, K);
    return t >= 0 ? t : ink_autok_yield(c, K) * ink_autok_expected(c, K);
}

/* c(K) in units of the speed factor (what decisions compare: the factor is common to all widths) */
static double base_cost(const ink_autok *c, int K)
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

/* The catch-up overhead of drafting width K (autok.h): as measured while K was in use, else that of
 * the nearest narrower drafting width measured in use, else 0: never a wider width's (narrower
 * widths catch up less; given width 5's, width 4 never in use looked as dear as 5 and never won). An
 * estimate too low is corrected once the width is in use. */
static double over_of(const ink_autok *c, int K)
{
    for (int k = K; k >= 2; k--)
        if (c->over_n[k]) return c->over[k];
    return 0;
}

double ink_autok_overhead_of(const ink_autok *c, int K) { return c->speed * over_of(c, K); }

/* ... and what a round of width K costs all told: drafting widths carry their catch-up overhead */
static double width_cost(const ink_autok *c, int K)
{
    double b = base_cost(c, K);
    return b > 0 && K >= 2 ? b + over_of(c, K) : b;
}

double ink_autok_cost(const ink_autok *c, int K) { return c->speed * width_cost(c, K); }

void ink_autok_overhead(ink_autok *c, double seconds)
{
    if (seconds > 0) c->over_pending += seconds;
}

/* The widest width measured so far (1 when none): candidates go at most one past it (see below). */
static int reach_of(const ink_autok *c)
{
    int reach = 1;
    for (int K = 1; K <= c->kmax; K++)
        if (c->cost_n[K]) reach = K;
    return reach;
}

int ink_autok_best(const ink_autok *c)
{
    if (c->cost_n[1] < 2) return 1; /* the first rounds measure a plain step */
    /* unmeasured widths one past the widest measured at most: the optimistic estimate of a width
     * far beyond (its drafts' cost unknown yet, its extra verify rows assumed free) sent a fresh
     * controller straight to the widest, whose first round restarts every depth (on the bundled
     * model ~8 plain steps' time); climbing one width at a time stops at the first that loses */
    int reach = reach_of(c);
    int best = 1;
    double br = 0;
    for (int K = 1; K <= c->kmax && K <= reach + 1; K++) {
        double cost = width_cost(c, K);
        if (!(cost > 0)) continue;
        double r = ink_autok_tokens(c, K) / cost;
        if (r > br * (1 + 1e-9)) br = r, best = K; /* ties go to the narrower width */
    }
    return best;
}

/* Where the text repeats, the width an exploration in direction dir (0 up, 1 down) tries: of the
 * widths on that side of `best` (2 and up, measured or one past the widest measured) that the table
 * values and that would win at 0.7 of their estimated cost, the one timed longest ago; else the
 * neighbour k. Cycles make the value of K jagged (the twin's loop: 1.75, 2.33, 2.33, 3.5 tokens a
 * round for widths 2..5), so the neighbour can be a valley that hides the width worth re-timing: on
 * an AVX2 Zen 2, width 3 (timed high once, early) beat 5 by 14 % and runs stayed at 5, whose only
 * lower neighbour, 4, lost every exploration. Taking the width the table values best instead kept
 * runs at 2 (5 explored, 3 never re-timed): the stalest plausible one refreshes each in turn. */
#define PLAUSIBLE 0.7
#define CHEAPER 0.9 /* an exploration that timed its width below 0.9 x its estimate is repeated soon */
static int loop_explore_pick(const ink_autok *c, int best, int dir, int k)
{
    int reach = reach_of(c), pick = k, at = 0, found = 0;
    double cb = width_cost(c, best), rb = cb > 0 ? ink_autok_tokens(c, best) / cb : 0;
    for (int j = dir ? best - 1 : best + 1; j >= 2 && j <= c->kmax && j <= reach + 1; j += dir ? -1 : 1) {
        double cj = width_cost(c, j), t = loop_tokens(c, j);
        if (!(cj > 0) || t < 0 || t / (PLAUSIBLE * cj) <= rb) continue;
        int when = c->cost_n[j] ? c->cost_at[j] : -1;
        if (!found || when < at) pick = j, at = when, found = 1;
    }
    return pick;
}

int ink_autok_choose(ink_autok *c)
{
    int best = ink_autok_best(c);
    c->round++;
    c->explore_k = 0;
    if (c->kmax < 2) return best;
    /* text that repeats: fill the table at this phase. Not from plain steps (a fill restarts dormant
     * depths, dear where plain steps win) and not past one width beyond the widest measured (autok.h) */
    if (loop_on(c) && c->cost_n[1] >= 2 && best >= 2) {
        int reach = reach_of(c);
        double cb = width_cost(c, best), rb = cb > 0 ? ink_autok_tokens(c, best) / cb : 0;
        for (int k = reach + 1 < c->kmax ? reach + 1 : c->kmax; k >= 2; k--) {
            double ck = width_cost(c, k);
            if (k == best || loop_accepts(c, c->loop_phase, k - 1) >= 0 || loop_tokens(c, k) >= 0) continue;
            if (ck > 0 && k / ck <= rb) continue; /* loses even if every draft were accepted */
            c->explore_k = k, c->explore_dir = 3;
            return k;
        }
    }
    for (int dir = 0; dir < 2; dir++) {
        int k = dir ? best - 1 : best + 1;
        if (loop_on(c) && best >= 2) k = loop_explore_pick(c, best, dir, k);
        if (c->confirm[dir] && (dir ? c->confirm[dir] < best : c->confirm[dir] > best)) k = c->confirm[dir];
        if (k < 1 || k > c->kmax) {
            if (c->round >= c->next[dir]) c->next[dir] = c->round + c->gap[dir]; /* no neighbour there now */
            continue;
        }
        if (c->round < c->next[dir]) continue;
        /* a wider width that loses even if every draft were accepted: only acceptance could change
         * that, and it cannot; its cost is re-measured only every EXPLORE_MAX(_PLAIN) rounds */
        double ck = width_cost(c, k), cb = width_cost(c, best);
        int cap = explore_cap(c, best, dir, k);
        if (!dir && ck > 0 && cb > 0 && c->cost_n[k] >= 3 && k / ck < ink_autok_tokens(c, best) / cb &&
            c->gap[dir] < cap) {
            c->gap[dir] = cap, c->next[dir] = c->round + cap;
            continue;
        }
        c->explore_k = k, c->explore_dir = dir;
        return k;
    }
    /* Plain-step probes while drafting wider than 2 (at 2 the downward neighbour is one): c(1) is
     * the yardstick and otherwise measured only in a run's first rounds, its slow start (the bundled
     * model: ~1 ms then, 0.2-0.26 ms later), which kept width 3 at 0.75 ms a round ahead of plain
     * steps for a whole run. A probe costs no restart (depths go on being followed) and on a
     * memory-bound model less than a round's worth of tokens per PROBE_MAX rounds. */
    if (best >= 3 && c->round >= c->next[2]) {
        c->explore_k = 1, c->explore_dir = 2;
        return 1;
    }
    return best;
}

void ink_autok_observe(ink_autok *c, int K, int M, int a, double seconds, double draft_seconds)
{
    if (K < 1 || K > c->kmax) return;
    int timed = seconds >= 0, explored = c->explore_k == K, dir = c->explore_dir, cheaper = 0;
    int early = 0; /* the width had fewer than 3 timed rounds before this one */
    if (timed) {
        int n = c->cost_n[K];
        early = n < 3;
        /* a stall counts as at most OUTLIER x what the width was expected to take: its own estimate,
         * or before its first sample the estimate from its measured neighbours */
        double ref = c->speed * (n ? c->cost[K] : c->draft_n ? base_cost(c, K) : 0);
        if (ref > 0 && seconds > OUTLIER * ref) seconds = OUTLIER * ref;
        if (draft_seconds > seconds) draft_seconds = seconds;
        if (n >= 3 && !explored) /* the width in use: the speed factor first, then c(K) from what is left */
            c->speed += LAMBDA_S * (seconds / c->cost[K] - c->speed);
        seconds /= c->speed, draft_seconds /= c->speed; /* in units of the speed factor from here on */
        if (n < 3) { /* the median of the first samples */
            double *f = c->first[K], lo, hi, m;
            cheaper = explored && n > 0 && seconds < CHEAPER * c->cost[K];
            f[n] = seconds, c->cost_n[K] = ++n;
            if (n == 1) m = f[0];
            else if (n == 2) m = f[0] < f[1] ? f[0] : f[1]; /* of two, the faster: optimistic until the third */
            else {
                lo = f[0] < f[1] ? f[0] : f[1], hi = f[0] < f[1] ? f[1] : f[0];
                m = f[2] < lo ? lo : f[2] > hi ? hi : f[2];
            }
            c->cost[K] = m, c->cost_w[K] = n, c->cost_at[K] = c->round;
        } else {
            cheaper = explored && seconds < CHEAPER * c->cost[K];
            /* an exploration moves its width's estimate at least half-way down (a stale estimate from
             * a slow phase), a quarter up (a stall clipped to 1.5x would else leave it 25 % high) */
            double lam = !explored ? LAMBDA_C : seconds < c->cost[K] ? 0.5 : 0.25;
            observe_stale(c, &c->cost[K], &c->cost_w[K], &c->cost_at[K], seconds, lam, LAMBDA_TC);
            c->cost_n[K]++;
        }
        if (M > 0) {
            double x = draft_seconds / M;
            if (c->draft_n >= 3 && x > OUTLIER * c->draft_cost) x = OUTLIER * c->draft_cost;
            smooth(&c->draft_cost, &c->draft_n, x, LAMBDA_C);
        }
        if (K >= 2) { /* the catch-ups since the last drafting round: the width in use's (autok.h) */
            if (!explored) smooth(&c->over[K], &c->over_n[K], c->over_pending / c->speed, LAMBDA_C);
            c->over_pending = 0;
        }
    }
    /* draft j + 1 was tested iff drafts 1..j were accepted (j <= a), and kept iff j < a. The first
     * observations are averaged with PRIOR_N pseudo-observations of what the position was assumed to
     * be before (the shallower position's estimate, PRIOR_A for the first: Laplace's rule there): one
     * rejected draft at the start of a run must not set the estimate to 0, which made
     * every width look like a plain step until the next exploration (on a 160 MiB twin, the first
     * ~45 tokens of a run went plain after a first round with no draft accepted) */
    if (M >= 1 && a >= 0 && a <= M) { /* the width's yield, against what the model predicted for it */
        double e = ink_autok_expected(c, M + 1), x = (a + 1) / e;
        if (!c->yield_n[K]) c->yield[K] = 1, c->yield_w[K] = PRIOR_Y, c->yield_at[K] = c->round;
        observe_stale(c, &c->yield[K], &c->yield_w[K], &c->yield_at[K], x, LAMBDA_Y, YDECAY);
        c->yield[K] = c->yield[K] < YIELD_LO ? YIELD_LO : c->yield[K] > YIELD_HI ? YIELD_HI : c->yield[K];
        c->yield_n[K]++;
    }
    loop_record(c, M, a);
    for (int j = 0; j < M && j <= a && j < INK_MAX_DEPTH; j++) {
        double x = j < a ? 1.0 : 0.0;
        if (!c->alpha_n[j]) /* what an unobserved position is assumed, PRIOR_N observations of it */
            c->alpha[j] = alpha_of(c, j - 1), c->alpha_w[j] = PRIOR_N, c->alpha_at[j] = c->round;
        observe_stale(c, &c->alpha[j], &c->alpha_w[j], &c->alpha_at[j], x, LAMBDA_A, LAMBDA_T);
        c->alpha_n[j]++;
    }
    if (explored && dir == 3) c->explore_k = 0; /* a table fill: no wait to adjust */
    else if (explored) {
        if (!timed) c->next[dir] = c->round + 1; /* its cost was not measured: try it again next round */
        else { /* a neighbour that now looks best resets its direction's wait, one that lost doubles it */
            int best = ink_autok_best(c);
            /* a width explored up or down that timed well below its estimate (which moved only
             * half-way) is tried again soon (plain probes keep their doubling waits); once its first
             * samples are in, only if it would be best at the cost just measured: otherwise a width
             * that cannot win (in a greedy loop width 4's cycle yields 2.33 tokens a round against
             * width 5's 3.5) was re-explored every EXPLORE rounds while its estimate came down
             * half-way at a time. Its first samples may hold a stall or the run's slow start, and the
             * acceptance they are compared with is as young: those re-explore. */
            double cb = width_cost(c, best), ck = seconds + over_of(c, K); /* over_of: 0 below width 2 */
            int again = dir < 2 && cheaper && best != K &&
                        (early || (cb > 0 && ink_autok_tokens(c, K) / ck > ink_autok_tokens(c, best) / cb));
            if (best == K) c->gap[dir] = EXPLORE;
            else if (!again && c->gap[dir] < explore_cap(c, best, dir, K)) c->gap[dir] *= 2;
            if (dir < 2) c->confirm[dir] = again ? K : 0;
            c->next[dir] = c->round + (again ? EXPLORE : c->gap[dir]);
        }
        c->explore_k = 0;
    }
}
