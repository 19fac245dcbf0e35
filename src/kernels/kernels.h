/*
 * kernels.h — compute kernels on f32 activations and f32/bf16/f16 weight views. No model
 * knowledge, no allocation, no threads of their own: matmuls split output rows over the model's
 * pool, and every output element is one dot product in a fixed order, so results do not depend on
 * the thread count.
 */
#ifndef INK_KERNELS_H
#define INK_KERNELS_H

#include "base/pool.h"

#include <stddef.h>
#include <math.h>
#include <stdint.h>

/* A 2-D weight view [rows, cols] (row-major, `stride` elements between rows: an interleaved
 * gate/up tensor is two views with stride 2*cols). Never owns `data`. */
typedef struct ink_mat {
    int dtype;          /* INK_DT_F32, INK_DT_BF16 or INK_DT_F16 */
    int rows, cols;
    size_t stride;      /* elements between consecutive rows */
    const void *data;
} ink_mat;

/* y[t, o] = sum_i W[o, i] * x[t, i] for t < T, o < W->rows. x rows are ldx apart, y rows ldy. */
void ink_matmul(ink_pool *p, const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy);
/* Same for a sub-range of output rows [r0, r1) on the calling thread (scalar-order reference). */
void ink_matmul_rows(const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy, int r0, int r1);
/* Row `r` of W widened to f32. */
void ink_mat_row(const ink_mat *W, int r, float *out);

/* y = w * x / sqrt(mean(x^2) + eps) over n elements (w may be NULL: no weight). y may alias x. */
void ink_rmsnorm(float *y, const float *x, const float *w, int n, float eps);

/* Causal depthwise short convolution with identity residual (inkling-text.md §3.3).
 * w: [C][K]; state: [K-1][C] (raw inputs, oldest first), updated; u: [T][C] input, y: [T][C]
 * output (y may alias u); ext: scratch of (K-1+T)*C floats. */
void ink_sconv(const float *w, float *state, const float *u, float *y, int T, int C, int K, float *ext);

static inline float ink_sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }
float ink_logsigmoid(float z);

#endif
