/*
 * sampler.h — the sampling chain shared by plain decoding and speculative sampling. A pure function
 * of (logits, parameters); randomness comes from an explicit per-request RNG state.
 *
 * Chain (llama.cpp's default order): top-k on the logits -> softmax -> top-p (nucleus) -> min-p
 * (relative to the most likely token) -> temperature on the surviving logits -> renormalise. The
 * result is the full distribution p over the n logits (zeros outside the kept set), so the
 * speculative loop can use p and q for its accept test. temp <= 0 gives the one-hot argmax (ties to
 * the lowest id). No allocation: the caller passes scratch of n ints.
 */
#ifndef INK_SAMPLER_H
#define INK_SAMPLER_H

#include "inkling.h"

#include <stdint.h>

int ink_argmax(const float *x, int n);
/* Fills p[0..n) (see above). idx: scratch of n ints. */
void ink_sample_dist(const ink_sampling *c, const float *logits, int n, float *p, int *idx);
/* Draws an index from the distribution p (sums to ~1). */
int ink_sample_draw(const float *p, int n, uint64_t *rng);
/* Uniform double in [0, 1) (splitmix64 stream). */
double ink_rng_uniform(uint64_t *rng);

#endif
