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

typedef struct ink_sample_scratch {
    int *idx;      /* [n] */
    float *work;   /* [n] */
} ink_sample_scratch;

/* Fills p[0..n) with the final distribution of the chain (see inkling.h ink_sampling) for `logits`
 * after history hist[0..n_hist) (for the penalties). */
void ink_sample_dist(const ink_sampling *c, const float *logits, int n, const int32_t *hist, int n_hist, float *p,
                     ink_sample_scratch *scr);
/* 1 if the chain of `c` applies any penalty (otherwise the logits are used as they are). */
int ink_sample_penalties_on(const ink_sampling *c);
/* Applies the penalties of `c` to work[0..n) (a copy of the logits) in place. idx: [n] scratch. */
void ink_sample_penalize(const ink_sampling *c, float *work, int n, const int32_t *hist, int n_hist, int *idx);
/* Draws an index from the distribution p (sums to ~1). */
int ink_sample_draw(const float *p, int n, uint64_t *rng);
/* Uniform double in [0, 1) (splitmix64 stream). */
double ink_rng_uniform(uint64_t *rng);

#endif
