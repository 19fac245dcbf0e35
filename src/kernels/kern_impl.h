/*
 * kern_impl.h — internals shared by the kernel sets (scalar, AVX2, NEON): activation quantization
 * for the int8 path and the fixed lane-combination order. Not a public header.
 */
#ifndef INK_KERN_IMPL_H
#define INK_KERN_IMPL_H

#include "kernels/kernels.h"

#include <stdint.h>

#define INK_QX_MAXK 16384 /* widest reduction the int8 path takes (wider: f32 path) */
#define INK_QX_TILE 16    /* tokens quantized at a time */

/* One token's int8 activations: q[k], per 32-block scale d[k/32] (x ~= d * q) and exact f32 sums of
 * x per 32-block xs[k/32] (the bias term uses the real x). */
typedef struct ink_qx {
    int8_t q[INK_QX_TILE][INK_QX_MAXK];
    float d[INK_QX_TILE][INK_QX_MAXK / 32];
    float xs[INK_QX_TILE][INK_QX_MAXK / 32];
} ink_qx;

/* Quantizes rows x[t] (t < nt <= INK_QX_TILE) of length k (a multiple of 32). Same code for every
 * kernel set, so the int8 path differs between sets only in float accumulation rounding. */
void ink_qx_fill(ink_qx *qx, const float *x, int ldx, int nt, int k);

/* Does the int8 path apply to W? (affine 4 or 8 bits, cols a multiple of 32 and <= INK_QX_MAXK) */
static inline int ink_int8_ok(const ink_mat *W)
{
    return W->dtype == INK_QT_AFFINE && (W->bits == 4 || W->bits == 8) && W->cols % 32 == 0 && W->cols <= INK_QX_MAXK;
}

static inline float ink_lanes_sum(const float a[8])
{
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

const ink_kernels *ink_kernels_avx2_raw(void);   /* the set, without the CPU check */
const ink_kernels *ink_kernels_avx512_raw(void); /* the set, without the CPU check */

#endif
