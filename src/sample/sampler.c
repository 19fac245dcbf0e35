/* sampler.c — see sampler.h. */
#include "sample/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int ink_argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i; /* strict: ties go to the lowest id */
    return b;
}

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double ink_rng_uniform(uint64_t *rng) { return (double)(next(rng) >> 11) * 0x1.0p-53; }

/* Sift-down for a min-heap of indices keyed by logit (lower logit, then higher id, at the top). */
static int worse(const float *l, int a, int b) { return l[a] < l[b] || (l[a] == l[b] && a > b); }

static void sift(int *h, int k, int i, const float *l)
{
    for (;;) {
        int c = 2 * i + 1, m = i;
        if (c < k && worse(l, h[c], h[m])) m = c;
        if (c + 1 < k && worse(l, h[c + 1], h[m])) m = c + 1;
        if (m == i) return;
        int t = h[i];
        h[i] = h[m], h[m] = t, i = m;
    }
}

int ink_sample_penalties_on(const ink_sampling *c)
{
    return c->penalty_last_n != 0 &&
           ((c->repeat_penalty > 0 && c->repeat_penalty != 1.0f) || c->frequency_penalty != 0 || c->presence_penalty != 0);
}

void ink_sample_penalize(const ink_sampling *c, float *w, int n, const int32_t *hist, int n_hist, int *idx)
{
    if (!ink_sample_penalties_on(c) || n_hist <= 0) return;
    int from = c->penalty_last_n < 0 || c->penalty_last_n > n_hist ? 0 : n_hist - c->penalty_last_n;
    memset(idx, 0, (size_t)n * sizeof *idx);
    for (int i = from; i < n_hist; i++)
        if (hist[i] >= 0 && hist[i] < n) idx[hist[i]]++;
    for (int i = from; i < n_hist; i++) {
        int t = hist[i];
        if (t < 0 || t >= n || idx[t] == 0) continue;
        int cnt = idx[t];
        idx[t] = 0; /* each distinct token once */
        if (c->repeat_penalty > 0 && c->repeat_penalty != 1.0f) w[t] = w[t] > 0 ? w[t] / c->repeat_penalty : w[t] * c->repeat_penalty;
        w[t] -= (float)cnt * c->frequency_penalty + c->presence_penalty;
    }
}

void ink_sample_dist(const ink_sampling *c, const float *logits, int n, const int32_t *hist, int n_hist, float *p,
                     ink_sample_scratch *scr)
{
    int *idx = scr->idx;
    const float *l = logits;
    if (ink_sample_penalties_on(c) && n_hist > 0) {
        memcpy(scr->work, logits, (size_t)n * sizeof *logits);
        ink_sample_penalize(c, scr->work, n, hist, n_hist, idx);
        l = scr->work;
    }
    memset(p, 0, (size_t)n * sizeof *p);
    if (!(c->temp > 0)) {
        p[ink_argmax(l, n)] = 1.0f;
        return;
    }
    /* candidate set, sorted by logit descending (ties: lower id first) */
    int k = c->top_k > 0 && c->top_k < n ? c->top_k : n;
    for (int i = 0; i < k; i++) idx[i] = i;
    for (int i = k / 2 - 1; i >= 0; i--) sift(idx, k, i, l); /* min-heap of the k best */
    for (int i = k; i < n; i++)
        if (worse(l, idx[0], i)) idx[0] = i, sift(idx, k, 0, l);
    for (int i = k - 1; i > 0; i--) { /* heap sort: best first */
        int t = idx[0];
        idx[0] = idx[i], idx[i] = t;
        sift(idx, i, 0, l);
    }
    /* softmax at temperature 1 for top-p / min-p */
    double mx = l[idx[0]], sum = 0;
    for (int i = 0; i < k; i++) sum += exp((double)l[idx[i]] - mx);
    int keep = k;
    if (c->top_p > 0 && c->top_p < 1) {
        double acc = 0;
        for (int i = 0; i < k; i++) {
            acc += exp((double)l[idx[i]] - mx) / sum;
            if (acc >= c->top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    if (c->min_p > 0) {
        double floor_l = mx + log(c->min_p); /* p_i >= min_p * p_max  <=>  l_i >= l_max + ln(min_p) */
        int j = 1;
        while (j < keep && l[idx[j]] >= floor_l) j++;
        keep = j;
    }
    double s2 = 0;
    for (int i = 0; i < keep; i++) s2 += exp(((double)l[idx[i]] - mx) / c->temp);
    for (int i = 0; i < keep; i++) p[idx[i]] = (float)(exp(((double)l[idx[i]] - mx) / c->temp) / s2);
}

int ink_sample_draw(const float *p, int n, uint64_t *rng)
{
    double r = ink_rng_uniform(rng), acc = 0;
    int last = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] <= 0) continue;
        acc += p[i];
        last = i;
        if (r < acc) return i;
    }
    return last; /* rounding: the mass summed to slightly under 1 */
}
