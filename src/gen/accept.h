/*
 * accept.h — the acceptance rules of speculative decoding (mtp.md §8), as pure functions over
 * caller-owned arrays: no allocation, no model, no random state (the caller draws the uniforms).
 *
 * Greedy: the drafts are accepted while each equals the target's choice at its row; the target's
 * choice after the last accepted draft is the bonus. Stochastic (lossless speculative sampling):
 * draft d drawn from q is kept with probability min(1, p[d] / q[d]); on a rejection the replacement
 * is drawn from the residual max(0, p - q), renormalised.
 */
#ifndef INK_GEN_ACCEPT_H
#define INK_GEN_ACCEPT_H

#include <stdint.h>

/* Greedy walk: target[0..M] are the target's choices at the verify rows 0..M (row j follows the
 * first j drafts). Returns a, the number of leading drafts equal to the target's choice (0..M);
 * the bonus is target[a]. */
int ink_accept_greedy(const int32_t *drafts, const int32_t *target, int M);

/* One stochastic test: 1 (keep draft d) iff q[d] > 0 and u * q[d] <= p[d], with u uniform in [0, 1).
 * Equivalent to u < p[d] / q[d] without the division, so p[d] >= q[d] always keeps d. */
int ink_accept_draw(const float *p, const float *q, int32_t d, double u);

/* After a rejection: replaces p[0..V) in place by max(0, p - q) / mass, mass the residual's sum (in
 * double), and returns the mass. With mass 0 (p <= q everywhere, e.g. p == q up to rounding) p is
 * left holding max(0, p - q) = all zeros, the caller then redraws from the target's p itself. */
double ink_accept_residual(float *p, const float *q, int V);

#endif
