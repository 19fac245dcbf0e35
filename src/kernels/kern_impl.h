/*
 * kern_impl.h — internals shared by the kernel sets (scalar, AVX2, NEON): activation quantization
 * for the int8 path and the fixed lane-combination order. Not a public header.
 */
#ifndef INK_KERN_IMPL_H
#define INK_KERN_IMPL_H

#include "kernels/kernels.h"

#include <stdint.h>
#include <string.h>

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

/* Does the int8 path apply to W? (affine or NVFP4, cols a multiple of 32 and <= INK_QX_MAXK) */
static inline int ink_int8_ok(const ink_mat *W)
{
    return (W->dtype == INK_QT_AFFINE || W->dtype == INK_QT_NVFP4) && W->cols % 32 == 0 && W->cols <= INK_QX_MAXK;
}

/* 8 affine codes of `bits` bits starting at element c (c % 8 == 0): they fill exactly `bits` bytes.
 * Unaligned-safe (memcpy). */
static inline void ink_unpack8(const uint8_t *row, int c, int bits, uint8_t out[8])
{
    uint64_t v = 0;
    memcpy(&v, row + (size_t)c / 8 * (size_t)bits, (size_t)bits); /* little-endian hosts only (as formats.md) */
    uint64_t m = (1u << bits) - 1u;
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)(v >> (i * bits) & m);
}

/* 2 * e2m1 as a signed integer (-12 .. 12): the NVFP4 int8 path's weight code. */
static inline int ink_e2m1_x2(unsigned c)
{
    static const int8_t mag[8] = {0, 1, 2, 3, 4, 6, 8, 12};
    return (c & 8) ? -mag[c & 7] : mag[c & 7];
}

static inline float ink_lanes_sum(const float a[8])
{
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

/* ---- attention (every set) ------------------------------------------------------------------ */

/* Scratch layout of one attention tile: tau*q rows, relative logits by distance, one transposed
 * block of up to 32 keys, then the scores (later the weights) of each query over the tile's key
 * union L .. P, `ls` apart; query i's key j is at s[i * ls + (j - L)]. */
typedef struct ink_attn_lay {
    float *qt, *lrel, *kt, *s; /* [MAXQ][dp] [MAXQ][Rp] [dp][32] [nq][ls] */
    int dp, Rp, ls, L, P;
} ink_attn_lay;

static inline int ink_round16(int n) { return (n + 15) & ~15; }

static inline ink_attn_lay ink_attn_layout(const ink_attn *a)
{
    ink_attn_lay w;
    w.L = a->lo[0], w.P = a->hi[0];
    for (int i = 1; i < a->nq; i++) {
        if (a->lo[i] < w.L) w.L = a->lo[i];
        if (a->hi[i] > w.P) w.P = a->hi[i];
    }
    w.dp = ink_round16(a->d), w.Rp = ink_round16(a->R) + 16, w.ls = ink_round16(w.P - w.L + 1);
    w.qt = a->ws;
    w.lrel = w.qt + (size_t)INK_ATTN_MAXQ * w.dp;
    w.kt = w.lrel + (size_t)INK_ATTN_MAXQ * w.Rp;
    w.s = w.kt + (size_t)32 * w.dp;
    return w;
}

/* Constants of the exp polynomial (Cephes expf): n = round(x log2 e), r = (x - n C1) - n C2,
 * exp(x) = 2^n (1 + r + r^2 (P0 r^5 + ... + P5)). */
#define INK_EXP_HI 88.0f
#define INK_EXP_LO (-87.33654f) /* below: 0 (expf is subnormal there) */
#define INK_EXP_LOG2E 1.44269504088896341f
#define INK_EXP_C1 0.693359375f
#define INK_EXP_C2 (-2.12194440e-4f)
#define INK_EXP_P0 1.9875691500e-4f
#define INK_EXP_P1 1.3981999507e-3f
#define INK_EXP_P2 8.3334519073e-3f
#define INK_EXP_P3 4.1665795894e-2f
#define INK_EXP_P4 1.6666665459e-1f
#define INK_EXP_P5 5.0000001201e-1f

/* The scalar evaluation (separate multiply and add; the SIMD sets fuse them). */
static inline float ink_exp_scalar(float x)
{
    if (x != x) return x;
    if (x < INK_EXP_LO) return 0.0f;
    if (x > INK_EXP_HI) x = INK_EXP_HI;
    float n = (x * INK_EXP_LOG2E + 12582912.0f) - 12582912.0f; /* round to nearest even */
    float r = x - n * INK_EXP_C1;
    r = r - n * INK_EXP_C2;
    float z = r * r, y = INK_EXP_P0;
    y = y * r + INK_EXP_P1;
    y = y * r + INK_EXP_P2;
    y = y * r + INK_EXP_P3;
    y = y * r + INK_EXP_P4;
    y = y * r + INK_EXP_P5;
    y = y * z + r;
    y = y + 1.0f;
    union { uint32_t u; float f; } e = {(uint32_t)((int)n + 127) << 23};
    return y * e.f;
}

/* The SIMD sets' exp over n floats (tests; only call where the set is available). */
void ink_avx2_expv(const float *x, float *y, int n);
void ink_avx512_expv(const float *x, float *y, int n);

const ink_kernels *ink_kernels_avx2_raw(void);   /* the set, without the CPU check */
const ink_kernels *ink_kernels_avx512_raw(void); /* the set, without the CPU check */

/* kern_avx2.c's probe loops (ink_kernels.probe_read / probe_fma of the AVX2 set; the AVX-512 set
 * has its own read loop, ink_avx512_read, and shares the FMA loop). */
double ink_avx2_read(const void *buf, size_t bytes, int streams);
double ink_avx2_fma(long iters);

#endif
