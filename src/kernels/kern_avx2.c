/* kern_avx2.c — the AVX2 + FMA + F16C kernel set (x86-64). Compiled for those extensions with a
 * target pragma and only called after the runtime CPU check in kernels.c.
 *
 * Tiles: float views 4 rows x 3 tokens (bf16: lane pairs, x reordered once per call, 3 x 4 at
 * T = 4), affine/NVFP4 2 rows x 4 tokens, int8 path 1 row x 4 tokens (affine every
 * width, NVFP4);
 * for T > 16 (prefill) the float and quantized paths also block the reduction axis (512) and keep
 * the lane accumulators in a stack buffer between blocks. Per element the operation sequence is the
 * one of kernels.h (lanes in k order, fixed combination, ordered tail), whatever the tiling. */
#if defined(__x86_64__) && defined(__GNUC__)

#pragma GCC target("avx2,fma,f16c")

#include "kernels/kern_impl.h"

#include "base/dtype.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

AI float hsum8(__m256 a)
{
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1)); /* l0+l4 .. l3+l7 */
    __m128 h = _mm_hadd_ps(s4, s4);                                                   /* (01) (23) */
    return _mm_cvtss_f32(h) + _mm_cvtss_f32(_mm_shuffle_ps(h, h, 1));
}

/* F8_E4M3 by bit assembly (normal: exponent rebias 7 -> 127; subnormal: m * 2^-9; 0x7F / 0xFF NaN) */
AI float e4m3(uint8_t b)
{
    uint32_t e = (b >> 3) & 15, m = b & 7, s = (uint32_t)(b >> 7) << 31;
    union { uint32_t u; float f; } v;
    if (e == 15 && m == 7) v.u = 0x7fc00000u | s;
    else if (e) v.u = s | (e + 120) << 23 | m << 20;
    else {
        v.f = (float)m * 0.001953125f;
        v.u |= s;
    }
    return v.f;
}

AI float scale_at(const void *p, int dt, size_t i)
{
    if (dt == INK_DT_BF16) return ink_bf16_to_f32(ink_ld_u16(p, i));
    if (dt == INK_DT_F16) return _cvtsh_ss(ink_ld_u16(p, i));
    return ink_ld_f32(p, i);
}

/* 8 consecutive scales (or biases) from element i as f32 (unaligned loads) */
AI __m256 scales8(const void *p, int dt, size_t i)
{
    if (dt == INK_DT_F32) return _mm256_loadu_ps((const float *)p + i);
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)p + i));
    if (dt == INK_DT_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

/* ---- float views -------------------------------------------------------------------------- */

AI __m256 ldw(int dt, const void *p, size_t off)
{
    if (dt == INK_DT_F32) return _mm256_loadu_ps((const float *)p + off);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + off));
    if (dt == INK_DT_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

/* acc[r*4+t] += W[r][k0..k1) . x[t][k0..k1), lanes */
AI void ftile(const int dt, const void *w, size_t ldw_, const float *x, size_t ldx, int k0, int k1, __m256 *acc,
              const int NR, const int NT)
{
    __m256 a[4][3];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 3
        for (int t = 0; t < NT; t++) a[r][t] = acc[r * 4 + t];
    for (int k = k0; k < k1; k += 8) {
        __m256 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) wv[r] = ldw(dt, w, (size_t)r * ldw_ + (size_t)k);
#pragma GCC unroll 3
        for (int t = 0; t < NT; t++) {
            __m256 xv = _mm256_loadu_ps(x + (size_t)t * ldx + k);
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) a[r][t] = _mm256_fmadd_ps(wv[r], xv, a[r][t]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 3
        for (int t = 0; t < NT; t++) acc[r * 4 + t] = a[r][t];
}

#define FT_CASES(DT)                                                                                              \
    switch (nr * 4 + nt) {                                                                                        \
    case 5: ftile(DT, w, ldw_, x, ldx, k0, k1, acc, 1, 1); break;                                                 \
    case 6: ftile(DT, w, ldw_, x, ldx, k0, k1, acc, 1, 2); break;                                                 \
    case 7: ftile(DT, w, ldw_, x, ldx, k0, k1, acc, 1, 3); break;                                                 \
    case 9: ftile(DT, w, ldw_, x, ldx, k0, k1, acc, 2, 1); break;                                                 \
    case 10: ftile(DT, w, ldw_, x, ldx, k0, k1, acc, 2, 2); break;                                                \
    case 11: ftile(DT, w, ldw_, x, ldx, k0, k1, acc, 2, 3); break;                                                \
    case 13: ftile(DT, w, ldw_, x, ldx, k0, k1, acc, 3, 1); break;                                                \
    case 14: ftile(DT, w, ldw_, x, ldx, k0, k1, acc, 3, 2); break;                                                \
    case 15: ftile(DT, w, ldw_, x, ldx, k0, k1, acc, 3, 3); break;                                                \
    case 17: ftile(DT, w, ldw_, x, ldx, k0, k1, acc, 4, 1); break;                                                \
    case 18: ftile(DT, w, ldw_, x, ldx, k0, k1, acc, 4, 2); break;                                                \
    default: ftile(DT, w, ldw_, x, ldx, k0, k1, acc, 4, 3); break;                                                \
    }

static void ftile_f32(const void *w, size_t ldw_, const float *x, size_t ldx, int k0, int k1, __m256 *acc, int nr, int nt)
{
    FT_CASES(INK_DT_F32)
}
static void ftile_bf16(const void *w, size_t ldw_, const float *x, size_t ldx, int k0, int k1, __m256 *acc, int nr, int nt)
{
    FT_CASES(INK_DT_BF16)
}
static void ftile_f16(const void *w, size_t ldw_, const float *x, size_t ldx, int k0, int k1, __m256 *acc, int nr, int nt)
{
    FT_CASES(INK_DT_F16)
}

/* ---- quantized views (f32 activations) ---------------------------------------------------- */

/* 8 codes of a packed row starting at element c (c % 8 == 0): 8 elements = `bits` bytes. */
AI __m256i codes8(const int bits, const uint8_t *row, int c)
{
    const uint8_t *p = row + (size_t)c * bits / 8;
    if (bits == 8) return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    if (bits == 4) {
        uint32_t u;
        memcpy(&u, p, 4);
        __m256i v = _mm256_srlv_epi32(_mm256_set1_epi32((int)u), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
        return _mm256_and_si256(v, _mm256_set1_epi32(15));
    }
    if (bits == 2) {
        uint16_t u;
        memcpy(&u, p, 2);
        __m256i v = _mm256_srlv_epi32(_mm256_set1_epi32(u), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
        return _mm256_and_si256(v, _mm256_set1_epi32(3));
    }
    /* 3, 5, 6 bits: assemble the `bits` bytes in registers (a byte-wise memcpy into a wider
     * stack slot would stall on store forwarding) */
    uint64_t u;
    if (bits == 3) {
        uint16_t a;
        memcpy(&a, p, 2);
        u = a | (uint64_t)p[2] << 16;
    } else if (bits == 5) {
        uint32_t a;
        memcpy(&a, p, 4);
        u = a | (uint64_t)p[4] << 32;
    } else {
        uint32_t a;
        uint16_t b;
        memcpy(&a, p, 4);
        memcpy(&b, p + 4, 2);
        u = a | (uint64_t)b << 32;
    }
    uint32_t w0 = (uint32_t)u, w1 = (uint32_t)(u >> (4 * bits));
    __m256i v = _mm256_setr_epi32((int)w0, (int)w0, (int)w0, (int)w0, (int)w1, (int)w1, (int)w1, (int)w1);
    v = _mm256_srlv_epi32(v, _mm256_setr_epi32(0, bits, 2 * bits, 3 * bits, 0, bits, 2 * bits, 3 * bits));
    return _mm256_and_si256(v, _mm256_set1_epi32((1 << bits) - 1));
}

/* acc[r*4+t] over groups [g0, g1) of rows r0..r0+NR-1 (affine) */
AI void qtile(const int bits, const ink_mat *W, int r0, const float *x, size_t ldx, int g0, int g1, __m256 *acc,
              const int NR, const int NT)
{
    __m256 a[2][4];
    const uint8_t *row[2];
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++) {
        row[r] = (const uint8_t *)W->data + (size_t)(r0 + r) * W->stride;
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) a[r][t] = acc[r * 4 + t];
    }
    int gs = W->group;
    for (int g = g0; g < g1; g++) {
        __m256 s[2], b[2];
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++) {
            size_t gi = (size_t)(r0 + r) * W->sstride + (size_t)g;
            s[r] = _mm256_set1_ps(scale_at(W->scales, W->sdtype, gi));
            b[r] = _mm256_set1_ps(scale_at(W->biases, W->sdtype, gi));
        }
        for (int c = g * gs; c < (g + 1) * gs; c += 8) {
            __m256 wv[2];
#pragma GCC unroll 2
            for (int r = 0; r < NR; r++) wv[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(codes8(bits, row[r], c)), s[r], b[r]);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                __m256 xv = _mm256_loadu_ps(x + (size_t)t * ldx + c);
#pragma GCC unroll 2
                for (int r = 0; r < NR; r++) a[r][t] = _mm256_fmadd_ps(wv[r], xv, a[r][t]);
            }
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[r * 4 + t] = a[r][t];
}

/* NVFP4: 16-element blocks, w = e2m1 * e4m3 (exact); gscale is applied to the finished sum. */
AI void ntile(const ink_mat *W, int r0, const float *x, size_t ldx, int g0, int g1, __m256 *acc, const int NR,
              const int NT)
{
    const __m256 mag = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    __m256 a[2][4];
    const uint8_t *row[2];
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++) {
        row[r] = (const uint8_t *)W->data + (size_t)(r0 + r) * W->stride;
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) a[r][t] = acc[r * 4 + t];
    }
    for (int g = g0; g < g1; g++) {
        __m256 tb[2];
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++)
            tb[r] = _mm256_mul_ps(mag, _mm256_set1_ps(e4m3(((const uint8_t *)W->scales)[(size_t)(r0 + r) * W->sstride + (size_t)g])));
        for (int c = g * 16; c < g * 16 + 16; c += 8) {
            __m256 wv[2];
#pragma GCC unroll 2
            for (int r = 0; r < NR; r++) {
                __m256i q = codes8(4, row[r], c);
                __m256 m = _mm256_permutevar8x32_ps(tb[r], q);
                __m256i sg = _mm256_slli_epi32(_mm256_and_si256(q, _mm256_set1_epi32(8)), 28);
                wv[r] = _mm256_xor_ps(m, _mm256_castsi256_ps(sg));
            }
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                __m256 xv = _mm256_loadu_ps(x + (size_t)t * ldx + c);
#pragma GCC unroll 2
                for (int r = 0; r < NR; r++) a[r][t] = _mm256_fmadd_ps(wv[r], xv, a[r][t]);
            }
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[r * 4 + t] = a[r][t];
}

#define QT_CASES(CALL)                                                                                            \
    switch (nr * 4 + nt) {                                                                                        \
    case 5: CALL(1, 1); break;                                                                                    \
    case 6: CALL(1, 2); break;                                                                                    \
    case 7: CALL(1, 3); break;                                                                                    \
    case 8: CALL(1, 4); break;                                                                                    \
    case 9: CALL(2, 1); break;                                                                                    \
    case 10: CALL(2, 2); break;                                                                                   \
    case 11: CALL(2, 3); break;                                                                                   \
    default: CALL(2, 4); break;                                                                                   \
    }

#define Q_FN(B)                                                                                                   \
    static void qtile_##B(const ink_mat *W, int r0, const float *x, size_t ldx, int g0, int g1, __m256 *acc,     \
                          int nr, int nt)                                                                         \
    {                                                                                                             \
        QT_CASES(QC_##B)                                                                                          \
    }
#define QC_2(NR_, NT_) qtile(2, W, r0, x, ldx, g0, g1, acc, NR_, NT_)
#define QC_3(NR_, NT_) qtile(3, W, r0, x, ldx, g0, g1, acc, NR_, NT_)
#define QC_4(NR_, NT_) qtile(4, W, r0, x, ldx, g0, g1, acc, NR_, NT_)
#define QC_5(NR_, NT_) qtile(5, W, r0, x, ldx, g0, g1, acc, NR_, NT_)
#define QC_6(NR_, NT_) qtile(6, W, r0, x, ldx, g0, g1, acc, NR_, NT_)
#define QC_8(NR_, NT_) qtile(8, W, r0, x, ldx, g0, g1, acc, NR_, NT_)
#define QC_N(NR_, NT_) ntile(W, r0, x, ldx, g0, g1, acc, NR_, NT_)
Q_FN(2)
Q_FN(3)
Q_FN(4)
Q_FN(5)
Q_FN(6)
Q_FN(8)
Q_FN(N)

typedef void (*qtile_fn)(const ink_mat *W, int r0, const float *x, size_t ldx, int g0, int g1, __m256 *acc, int nr,
                         int nt);

static qtile_fn pick_q(const ink_mat *W)
{
    if (W->dtype == INK_QT_NVFP4) return qtile_N;
    switch (W->bits) {
    case 2: return qtile_2;
    case 3: return qtile_3;
    case 4: return qtile_4;
    case 5: return qtile_5;
    case 6: return qtile_6;
    default: return qtile_8;
    }
}

/* ---- bf16 weights in lane pairs (f32 activations reordered by ink_pairs_fill) -------------
 * One 256-bit load holds 16 bf16 weights, lane j the pair (k + 2j, k + 2j + 1): shifted left by 16 the
 * lane is the even weight as f32, with its low half cleared the odd one. x comes reordered per block
 * of 16 (the 8 even elements, then the 8 odd ones), so lane j accumulates k + 2j, then k + 2j + 1,
 * block after block. Two integer ops per 16 weights instead of a widen (the shuffle port) and a shift
 * per 8: on a Zen 2, M = 4 / 8 / 16 rows of a 4096 x 4096 matrix cost 1.41 / 2.23 / 4.05 one-row
 * passes instead of 1.92 / 3.35 / 6.91 (2 threads). */

/* acc[r*4+t] += W[r][k0..k1) . x[t][k0..k1) in pair lanes (k0, k1 multiples of 16) */
AI void ptile(const uint16_t *w, size_t ldw_, const float *x, size_t ldx, int k0, int k1, __m256 *acc, const int NR,
              const int NT)
{
    __m256 a[4][4];
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) a[r][t] = acc[r * 4 + t];
    for (int k = k0; k < k1; k += 16) {
        __m256 xv[4];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) xv[t] = _mm256_loadu_ps(x + (size_t)t * ldx + k);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(w + (size_t)r * ldw_ + k));
            __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) a[r][t] = _mm256_fmadd_ps(we, xv[t], a[r][t]);
        }
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) xv[t] = _mm256_loadu_ps(x + (size_t)t * ldx + k + 8);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(w + (size_t)r * ldw_ + k));
            /* 3 x 4 (12 accumulators, x from memory): two shifts instead of the mask, whose register
             * GCC otherwise pays for with spills in the loop */
            __m256 wo = _mm256_castsi256_ps(NR == 3 && NT == 4 ? _mm256_slli_epi32(_mm256_srli_epi32(v, 16), 16)
                                                             : _mm256_and_si256(v, hi));
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) a[r][t] = _mm256_fmadd_ps(wo, xv[t], a[r][t]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[r * 4 + t] = a[r][t];
}

#define PT(R, N)                                                                                                  \
    case R * 8 + N: ptile(w, ldw_, x, ldx, k0, k1, acc, R, N); break;

/* 3 x 4 (T = 4) takes x as memory operands (too few registers otherwise); on the twin's gate/up it
 * costs 1.8 one-token passes against 2.0 for 2 x 4 and 4 x 3 then 4 x 1 */
static void ptile_any(const void *wv, size_t ldw_, const float *x, size_t ldx, int k0, int k1, __m256 *acc, int nr,
                      int nt)
{
    const uint16_t *w = wv;
    switch (nr * 8 + nt) {
        PT(1, 1) PT(1, 2) PT(1, 3) PT(1, 4)
        PT(2, 1) PT(2, 2) PT(2, 3) PT(2, 4)
        PT(3, 1) PT(3, 2) PT(3, 3) PT(3, 4)
        PT(4, 1) PT(4, 2)
    default: ptile(w, ldw_, x, ldx, k0, k1, acc, 4, 3); break;
    }
}

/* ---- the driver (float and quantized, f32 activations) ------------------------------------ */

#define KC 512  /* reduction block for T > 16 */
#define RBLK 32 /* rows per block for T > 16 */
#define TBLK 48 /* tokens per block for T > 16 */

static float tail_dot(const ink_mat *W, int o, const float *xt, int k0)
{
    float s = 0.0f;
    for (int i = k0; i < W->cols; i++) {
        size_t off = (size_t)o * W->stride + (size_t)i;
        float w = W->dtype == INK_DT_F32    ? ink_ld_f32(W->data, off)
                  : W->dtype == INK_DT_BF16 ? ink_bf16_to_f32(ink_ld_u16(W->data, off))
                                            : _cvtsh_ss(ink_ld_u16(W->data, off));
        s += w * xt[i];
    }
    return s;
}

static void rows_int8(const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy, int r0, int r1);

/* pairs: a BF16 view on x reordered by avx2_pairs_fill (lane pairs, steps of 16; kernels.h) */
static void rows_any(const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy, int r0, int r1, int int8,
                     int pairs)
{
    if (int8 && ink_int8_ok(W)) {
        rows_int8(W, x, ldx, T, y, ldy, r0, r1);
        return;
    }
    int quant = W->dtype == INK_QT_AFFINE || W->dtype == INK_QT_NVFP4;
    int K = W->cols, Kv = K & (pairs ? ~15 : ~7), /* the part in lanes; the tail in order */
        gs = W->dtype == INK_QT_NVFP4 ? 16 : W->group;
    int TR = quant ? 2 : 4, TT = quant ? 4 : 3; /* register tile */
    qtile_fn qf = quant ? pick_q(W) : NULL;
    void (*ff)(const void *, size_t, const float *, size_t, int, int, __m256 *, int, int) =
        pairs ? ptile_any : W->dtype == INK_DT_F32 ? ftile_f32 : W->dtype == INK_DT_BF16 ? ftile_bf16 : ftile_f16;
    size_t es = W->dtype == INK_DT_F32 ? 4 : 2;
    int big = T > 16;
    /* rows of 1 KiB and more, and rows of 512 bytes up to T = 5 (8192 x 256 bf16 from DRAM, this set
     * on a Zen 4 core: T = 1 8 -> 23-27 GB/s, T = 4 6 -> 9; 2 threads 15 -> 26-43); lane pairs from
     * rows of 512 bytes up to T = 16 (the twin's gate/up at T = 6: 3.7 -> 2.4 one-token passes on a
     * Zen 2) and 3 x 4 tiles at T = 4 */
    if (!quant && !big && (W->stride * es >= 1024 || (W->stride * es >= 512 && (T <= 5 || pairs)))) {
        if (pairs && T == 4) TR = 3, TT = 4;
        /* float views at decode / verify widths: a tile's TR rows are Q = ceil(rows / TR) apart, so
         * each of its streams reads consecutive rows tile after tile (long sequential streams, as
         * in the AVX-512 set); per-row arithmetic as below */
        int Q = (r1 - r0 + TR - 1) / TR;
        for (int i = 0; i < Q; i++) {
            int o = r0 + i, nr = 0;
            while (nr < TR && o + nr * Q < r1) nr++;
            for (int t = 0; t < T; t += TT) {
                int nt = T - t < TT ? T - t : TT;
                __m256 acc[16];
                for (int j = 0; j < 16; j++) acc[j] = _mm256_setzero_ps();
                if (Kv > 0)
                    ff((const uint8_t *)W->data + (size_t)o * W->stride * es, W->stride * (size_t)Q, x + (size_t)t * ldx,
                       (size_t)ldx, 0, Kv, acc, nr, nt);
                for (int r = 0; r < nr; r++)
                    for (int j = 0; j < nt; j++) {
                        const float *xt = x + (size_t)(t + j) * ldx;
                        float v = hsum8(acc[r * 4 + j]);
                        if (Kv < K) v += tail_dot(W, o + r * Q, xt, Kv);
                        y[(size_t)(t + j) * ldy + o + r * Q] = v;
                    }
            }
        }
        return;
    }
    int kc = big ? KC : Kv, rblk = big ? RBLK : r1 - r0, tblk = big ? TBLK : T;
    __m256 buf[RBLK / 2][TBLK / 3][16]; /* big: lane accumulators of a [RBLK x TBLK] block, per tile */
    for (int tb = 0; tb < T; tb += tblk) {
        int tn = T - tb < tblk ? T - tb : tblk;
        for (int rb = r0; rb < r1; rb += rblk) {
            int rn = r1 - rb < rblk ? r1 - rb : rblk;
            for (int k0 = 0; k0 < Kv || k0 == 0; k0 += kc) {
                int k1 = k0 + kc < Kv ? k0 + kc : Kv;
                int first = k0 == 0, last = k1 >= Kv;
                for (int r = rb; r < rb + rn; r += TR) {
                    int nr = rb + rn - r < TR ? rb + rn - r : TR;
                    for (int t = tb; t < tb + tn; t += TT) {
                        int nt = tb + tn - t < TT ? tb + tn - t : TT;
                        __m256 acc_local[16];
                        __m256 *acc = big ? buf[(r - rb) / TR][(t - tb) / TT] : acc_local;
                        if (first)
                            for (int i = 0; i < 16; i++) acc[i] = _mm256_setzero_ps();
                        if (k1 > k0) {
                            if (quant) qf(W, r, x + (size_t)t * ldx, (size_t)ldx, k0 / gs, k1 / gs, acc, nr, nt);
                            else ff((const uint8_t *)W->data + (size_t)r * W->stride * es, W->stride,
                                    x + (size_t)t * ldx, (size_t)ldx, k0, k1, acc, nr, nt);
                        }
                        if (!last) continue;
                        for (int i = 0; i < nr; i++)
                            for (int j = 0; j < nt; j++) {
                                const float *xt = x + (size_t)(t + j) * ldx;
                                float s = hsum8(acc[i * 4 + j]);
                                if (!quant && Kv < K) s += tail_dot(W, r + i, xt, Kv);
                                if (W->dtype == INK_QT_NVFP4) s *= W->gscale;
                                y[(size_t)(t + j) * ldy + r + i] = s;
                            }
                    }
                }
                if (Kv == 0) break;
            }
        }
    }
}

static void avx2_rows(const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy, int r0, int r1, int int8)
{
    rows_any(W, x, ldx, T, y, ldy, r0, r1, int8, 0);
}

static void avx2_rows_pairs(const ink_mat *W, const float *xp, int ldx, int T, float *y, int ldy, int r0, int r1)
{
    rows_any(W, xp, ldx, T, y, ldy, r0, r1, 0, 1);
}

/* ink_pairs_fill with AVX2: per block of 16, the evens then the odds. */
static void avx2_pairs_fill(float *dst, const float *x, int n)
{
    int n16 = n & ~15;
    for (int k = 0; k < n16; k += 16) {
        __m256 lo = _mm256_loadu_ps(x + k), hi = _mm256_loadu_ps(x + k + 8);
        __m256 ev = _mm256_shuffle_ps(lo, hi, 0x88), od = _mm256_shuffle_ps(lo, hi, 0xDD); /* 0 2 8 10 | 4 6 12 14 */
        _mm256_storeu_ps(dst + k, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), 0xD8)));
        _mm256_storeu_ps(dst + k + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), 0xD8)));
    }
    for (int k = n16; k < n; k++) dst[k] = x[k];
}

/* ---- int8 activations (affine, NVFP4) ---------------------------------------------------- */

/* 32 codes from element c as bytes in element order: 8-bit as signed code - 128, the others as
 * unsigned codes (at most 63, so vpmaddubsw cannot saturate). */
/* bits 2, 3, 5, 6: the 32 codes at element c fill 4 bits bytes; 128-bit lane h takes codes
 * 16h .. 16h + 15 (2 bits bytes from 16h bits / 8); dword m of a lane gathers the 4 bytes that hold
 * codes 4m .. 4m + 3 (from byte m bits / 2, then a right shift by 4 (m bits % 2)), and shifts and
 * masks move code k of a dword to its byte k. `rowb` is the row's length in bytes: the 16-byte loads
 * stay inside it (the last chunks are copied out first). */
AI __m256i spread32(const int bits, const uint8_t *row, int c, int rowb)
{
    int off = c / 8 * bits;
    __m128i l0, l1;
    if (off + 2 * bits + 16 <= rowb) {
        l0 = _mm_loadu_si128((const __m128i *)(row + off));
        l1 = _mm_loadu_si128((const __m128i *)(row + off + 2 * bits));
    } else {
        uint8_t b[48] = {0};
        memcpy(b, row + off, (size_t)(4 * bits));
        l0 = _mm_loadu_si128((const __m128i *)b);
        l1 = _mm_loadu_si128((const __m128i *)(b + 2 * bits));
    }
    __m256i v = _mm256_set_m128i(l1, l0);
    int o1 = bits / 2, o2 = bits, o3 = 3 * bits / 2;
    const __m256i sh = _mm256_setr_epi8(0, 1, 2, 3, (char)o1, (char)(o1 + 1), (char)(o1 + 2), (char)(o1 + 3),
                                        (char)o2, (char)(o2 + 1), (char)(o2 + 2), (char)(o2 + 3),
                                        (char)o3, (char)(o3 + 1), (char)(o3 + 2), (char)(o3 + 3),
                                        0, 1, 2, 3, (char)o1, (char)(o1 + 1), (char)(o1 + 2), (char)(o1 + 3),
                                        (char)o2, (char)(o2 + 1), (char)(o2 + 2), (char)(o2 + 3),
                                        (char)o3, (char)(o3 + 1), (char)(o3 + 2), (char)(o3 + 3));
    int s1 = 4 * (bits % 2);
    __m256i d = _mm256_srlv_epi32(_mm256_shuffle_epi8(v, sh), _mm256_setr_epi32(0, s1, 0, s1, 0, s1, 0, s1));
    const int m = (1 << bits) - 1;
    __m256i r = _mm256_and_si256(d, _mm256_set1_epi32(m));
    r = _mm256_or_si256(r, _mm256_and_si256(_mm256_slli_epi32(d, 8 - bits), _mm256_set1_epi32(m << 8)));
    r = _mm256_or_si256(r, _mm256_and_si256(_mm256_slli_epi32(d, 16 - 2 * bits), _mm256_set1_epi32(m << 16)));
    return _mm256_or_si256(r, _mm256_and_si256(_mm256_slli_epi32(d, 24 - 3 * bits), _mm256_set1_epi32(m << 24)));
}

AI __m256i codes32(const int bits, const uint8_t *row, int c, int rowb)
{
    if (bits == 8) return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(row + c)), _mm256_set1_epi8((char)0x80));
    if (bits != 4) return spread32(bits, row, c, rowb);
    __m128i v = _mm_loadu_si128((const __m128i *)(row + c / 2));
    __m128i m = _mm_set1_epi8(15);
    __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
    return _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
}

AI __m256i idot(const int bits, __m256i code, __m256i q)
{
    __m256i p;
    if (bits == 8) p = _mm256_maddubs_epi16(_mm256_abs_epi8(code), _mm256_sign_epi8(q, code));
    else p = _mm256_maddubs_epi16(code, q);
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* the bias term of row o, sum_g b'[g] * xs[t][g] (xs as group sums: qx_group_sums), 8 groups at a
 * time; b' = b + 128 s for 8-bit (its codes are used as code - 128) */
AI void bias_terms(const int bits, const ink_mat *W, int o, const ink_qx *qx, int t0, const int NT, float *out)
{
    int G = W->cols / W->group, g = 0;
    size_t base = (size_t)o * W->sstride;
    __m256 bt[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) bt[t] = _mm256_setzero_ps();
    for (; g + 8 <= G; g += 8) {
        __m256 bv = scales8(W->biases, W->sdtype, base + (size_t)g);
        if (bits == 8) bv = _mm256_fmadd_ps(_mm256_set1_ps(128.0f), scales8(W->scales, W->sdtype, base + (size_t)g), bv);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) bt[t] = _mm256_fmadd_ps(bv, _mm256_loadu_ps(qx->xs[t0 + t] + g), bt[t]);
    }
    if (g < G) { /* the last G % 8 groups in the same lanes, zero-padded: groups appended with bias 0
                  * (a twin's zero columns) add exact zeros and change no sum */
        float bb[8] = {0}, xx[4][8] = {{0}};
        for (int i = 0; g + i < G; i++) {
            bb[i] = scale_at(W->biases, W->sdtype, base + (size_t)(g + i));
            if (bits == 8) bb[i] = bb[i] + 128.0f * scale_at(W->scales, W->sdtype, base + (size_t)(g + i));
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) xx[t][i] = qx->xs[t0 + t][g + i];
        }
        __m256 bv = _mm256_loadu_ps(bb);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) bt[t] = _mm256_fmadd_ps(bv, _mm256_loadu_ps(xx[t]), bt[t]);
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) out[t] = hsum8(bt[t]);
}

AI void i8tile(const int bits, const ink_mat *W, int o, const ink_qx *qx, int t0, float *y, int ldy, const int NT)
{
    const uint8_t *row = (const uint8_t *)W->data + (size_t)o * W->stride;
    int K = W->cols, gs = W->group, G = K / gs, g8 = 0;
    size_t base = (size_t)o * W->sstride;
    float sf[INK_QX_MAXK / 32];
    for (; g8 + 8 <= G; g8 += 8) _mm256_storeu_ps(sf + g8, scales8(W->scales, W->sdtype, base + (size_t)g8));
    for (; g8 < G; g8++) sf[g8] = scale_at(W->scales, W->sdtype, base + (size_t)g8);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int g = 0; g < G; g++) {
        float s = sf[g];
        __m256 gl[4];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) gl[t] = _mm256_setzero_ps();
        for (int c = g * gs; c < (g + 1) * gs; c += 32) {
            _mm_prefetch((const char *)row + (size_t)(c + 1024) * bits / 8, _MM_HINT_T0);
            __m256i code = codes32(bits, row, c, K / 8 * bits);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                __m256i q = _mm256_loadu_si256((const __m256i *)(qx->q[t0 + t] + c));
                __m256 li = _mm256_cvtepi32_ps(idot(bits, code, q));
                gl[t] = _mm256_fmadd_ps(li, _mm256_set1_ps(qx->d[t0 + t][c / 32]), gl[t]);
            }
        }
        __m256 sv = _mm256_set1_ps(s);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[t] = _mm256_fmadd_ps(gl[t], sv, acc[t]);
    }
    float bs[4];
    bias_terms(bits, W, o, qx, t0, NT, bs);
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) y[(size_t)t * ldy + o] = hsum8(acc[t]) + bs[t];
}

#define I8_FN(B)                                                                                                  \
    static void i8tile_##B(const ink_mat *W, int o, const ink_qx *qx, int t0, float *y, int ldy, int nt)          \
    {                                                                                                             \
        switch (nt) {                                                                                             \
        case 1: i8tile(B, W, o, qx, t0, y, ldy, 1); break;                                                        \
        case 2: i8tile(B, W, o, qx, t0, y, ldy, 2); break;                                                        \
        case 3: i8tile(B, W, o, qx, t0, y, ldy, 3); break;                                                        \
        default: i8tile(B, W, o, qx, t0, y, ldy, 4); break;                                                       \
        }                                                                                                         \
    }
I8_FN(2)
I8_FN(3)
I8_FN(4)
I8_FN(5)
I8_FN(6)
I8_FN(8)

/* 4-bit affine in the nibble layout (nib_layout, rows_int8): every full 64-element chunk of q holds
 * its 32 even elements, then its 32 odd ones, so the 32 packed bytes that cover the chunk pair with
 * them by one mask (low nibbles) and one shift (high nibbles): no unpacking. Dword lane l of the
 * two products covers elements 8l .. 8l + 7 of the chunk, so lanes 0-3 take block c/32's d and lanes
 * 4-7 block c/32 + 1's (and group scales likewise when gs = 32). A 32-tail keeps element order. */
static inline int nib_layout(const ink_mat *W)
{
    if (W->dtype == INK_QT_NVFP4) return 1;
    return W->dtype == INK_QT_AFFINE && W->bits == 4 && (W->group == 32 || W->group % 64 == 0);
}

AI __m256 pair8(const float *p) /* [p[0] x4, p[1] x4] */
{
    __m128 v = _mm_castpd_ps(_mm_load_sd((const double *)(const void *)p));
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

/* gcc 12 cannot see that pair8(sf + c / 32) (gs 32 only) reads sf[0 .. G - 1], which are all set */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
AI void i4tile(const ink_mat *W, int o, const ink_qx *qx, int t0, float *y, int ldy, const int NT)
{
    const uint8_t *row = (const uint8_t *)W->data + (size_t)o * W->stride;
    int K = W->cols, gs = W->group, G = K / gs, K64 = K & ~63;
    size_t base = (size_t)o * W->sstride;
    float sf[INK_QX_MAXK / 32];
    int g8 = 0;
    for (; g8 + 8 <= G; g8 += 8) _mm256_storeu_ps(sf + g8, scales8(W->scales, W->sdtype, base + (size_t)g8));
    for (; g8 < G; g8++) sf[g8] = scale_at(W->scales, W->sdtype, base + (size_t)g8);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    int c = 0;
    for (; c < K64; c += 64) {
        _mm_prefetch((const char *)row + c / 2 + 512, _MM_HINT_T0);
        __m256i v = _mm256_loadu_si256((const __m256i *)(row + c / 2));
        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        __m256 sv = gs == 32 ? pair8(sf + c / 32) : _mm256_set1_ps(sf[c / gs]);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const int8_t *q = qx->q[t0 + t] + c;
            /* each vpmaddubsw pair sum is at most 2 * 15 * 127: the two add without saturating */
            __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)q)),
                                         _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q + 32))));
            __m256 li = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
            acc[t] = _mm256_fmadd_ps(li, _mm256_mul_ps(sv, pair8(qx->d[t0 + t] + c / 32)), acc[t]);
        }
    }
    if (c < K) { /* the 32-tail (gs 32) */
        __m256i code = codes32(4, row, c, K / 2);
        __m256 sv = _mm256_set1_ps(sf[c / gs]);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(qx->q[t0 + t] + c));
            __m256 li = _mm256_cvtepi32_ps(idot(4, code, q));
            acc[t] = _mm256_fmadd_ps(li, _mm256_mul_ps(sv, _mm256_set1_ps(qx->d[t0 + t][c / 32])), acc[t]);
        }
    }
    float bs[4];
    bias_terms(4, W, o, qx, t0, NT, bs);
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) y[(size_t)t * ldy + o] = hsum8(acc[t]) + bs[t];
}
#pragma GCC diagnostic pop

static void i4tile_fn(const ink_mat *W, int o, const ink_qx *qx, int t0, float *y, int ldy, int nt)
{
    switch (nt) {
    case 1: i4tile(W, o, qx, t0, y, ldy, 1); break;
    case 2: i4tile(W, o, qx, t0, y, ldy, 2); break;
    case 3: i4tile(W, o, qx, t0, y, ldy, 3); break;
    default: i4tile(W, o, qx, t0, y, ldy, 4); break;
    }
}

/* xs[t][g] as the sum of x over group g (of gs elements) instead of over 32-block g (bias_terms) */
static void qx_group_sums(ink_qx *qx, int nt, int k, int gs)
{
    for (int t = 0; t < nt; t++)
        for (int g = 0, per = gs / 32; g < k / gs; g++) { /* in place: writes g, reads g * per .. */
            float s = qx->xs[t][g * per];
            for (int i = 1; i < per; i++) s += qx->xs[t][g * per + i];
            qx->xs[t][g] = s;
        }
}

/* q of every full 64-element chunk as its even elements, then its odd ones (nib_layout) */
static void qx_nibble_order(ink_qx *qx, int nt, int k)
{
    const __m256i sh = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                        0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    for (int t = 0; t < nt; t++)
        for (int c = 0; c + 64 <= k; c += 64) {
            int8_t *q = qx->q[t] + c;
            /* per 128-bit lane [8 evens | 8 odds], then qwords 0 2 1 3: [16 evens | 16 odds] */
            __m256i a = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)q), sh), 0xd8);
            __m256i b = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(q + 32)), sh), 0xd8);
            _mm256_storeu_si256((__m256i *)q, _mm256_permute2x128_si256(a, b, 0x20));
            _mm256_storeu_si256((__m256i *)(q + 32), _mm256_permute2x128_si256(a, b, 0x31));
        }
}

/* NVFP4: 32 codes as signed bytes 2 * e2m1 (-12 .. 12) by one table lookup per nibble; per 32-block
 * the eight 4-element partial sums are scaled by [s(c/16) x4, s(c/16+1) x4] * d, s = e4m3 / 2. */
AI void n8tile(const ink_mat *W, int o, const ink_qx *qx, int t0, float *y, int ldy, const int NT)
{
    const uint8_t *row = (const uint8_t *)W->data + (size_t)o * W->stride;
    const uint8_t *sc = (const uint8_t *)W->scales + (size_t)o * W->sstride;
    const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m128i m15 = _mm_set1_epi8(15);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int c = 0; c < W->cols; c += 32) {
        _mm_prefetch((const char *)row + c / 2 + 512, _MM_HINT_T0);
        __m128i v = _mm_loadu_si128((const __m128i *)(row + c / 2));
        __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(v, m15));
        __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(v, 4), m15));
        __m256i code = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
        __m256i ac = _mm256_abs_epi8(code);
        __m256 sv = _mm256_set_m128(_mm_set1_ps(0.5f * e4m3(sc[c / 16 + 1])), _mm_set1_ps(0.5f * e4m3(sc[c / 16])));
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(qx->q[t0 + t] + c));
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(ac, _mm256_sign_epi8(q, code)), _mm256_set1_epi16(1));
            __m256 sd = _mm256_mul_ps(sv, _mm256_set1_ps(qx->d[t0 + t][c / 32]));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sd, acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) y[(size_t)t * ldy + o] = hsum8(acc[t]) * W->gscale;
}

/* 8 e4m3 codes as f32 / 2, exactly e4m3() / 2 (NaN codes included), by bit assembly in lanes */
AI __m256 e4m3x8_half(const uint8_t *p)
{
    __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
    __m256i ax = _mm256_and_si256(x, _mm256_set1_epi32(0x7f));
    __m256i sg = _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x80)), 24);
    __m256 mag = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(ax, 20), _mm256_set1_epi32(120 << 23)));
    __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(x, _mm256_set1_epi32(7))), _mm256_set1_ps(0.001953125f));
    __m256i isub = _mm256_cmpeq_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x78)), _mm256_setzero_si256());
    __m256 v = _mm256_blendv_ps(mag, sub, _mm256_castsi256_ps(isub));
    v = _mm256_mul_ps(_mm256_or_ps(v, _mm256_castsi256_ps(sg)), _mm256_set1_ps(0.5f));
    __m256i isnan = _mm256_cmpeq_epi32(ax, _mm256_set1_epi32(0x7f));
    return _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_or_si256(sg, _mm256_set1_epi32(0x7fc00000))), _mm256_castsi256_ps(isnan));
}

/* NVFP4 in the nibble layout (as i4tile): per 64-element chunk, lanes 2j and 2j + 1 take 16-block
 * c/16 + j's scale; the row's scales are converted once, 8 at a time. 32-tail: element order. */
AI void n4tile(const ink_mat *W, int o, const ink_qx *qx, int t0, float *y, int ldy, const int NT)
{
    const uint8_t *row = (const uint8_t *)W->data + (size_t)o * W->stride;
    const uint8_t *sc = (const uint8_t *)W->scales + (size_t)o * W->sstride;
    int K = W->cols, nsc = K / 16, K64 = K & ~63;
    float sf[INK_QX_MAXK / 16 + 8];
    for (int i = 0; i < nsc; i += 8) {
        uint8_t b[8] = {0};
        memcpy(b, sc + i, (size_t)(nsc - i < 8 ? nsc - i : 8));
        _mm256_storeu_ps(sf + i, e4m3x8_half(b));
    }
    const __m256i lut = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
                                         0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    int c = 0;
    for (; c < K64; c += 64) {
        _mm_prefetch((const char *)row + c / 2 + 512, _MM_HINT_T0);
        __m256i v = _mm256_loadu_si256((const __m256i *)(row + c / 2));
        __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
        __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
        __m256i alo = _mm256_abs_epi8(lo), ahi = _mm256_abs_epi8(hi);
        __m256 sv = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(sf + c / 16)), dup);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const int8_t *q = qx->q[t0 + t] + c;
            /* |code| <= 12: each vpmaddubsw pair sum is at most 2 * 12 * 127, the two add exactly */
            __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(alo, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)q), lo)),
                                         _mm256_maddubs_epi16(ahi, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(q + 32)), hi)));
            __m256 li = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
            acc[t] = _mm256_fmadd_ps(li, _mm256_mul_ps(sv, pair8(qx->d[t0 + t] + c / 32)), acc[t]);
        }
    }
    if (c < K) {
        __m128i v = _mm_loadu_si128((const __m128i *)(row + c / 2));
        __m128i l = _mm256_castsi256_si128(lut), m15 = _mm_set1_epi8(15);
        __m128i lo = _mm_shuffle_epi8(l, _mm_and_si128(v, m15));
        __m128i hi = _mm_shuffle_epi8(l, _mm_and_si128(_mm_srli_epi16(v, 4), m15));
        __m256i code = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
        __m256i ac = _mm256_abs_epi8(code);
        __m256 sv = _mm256_set_m128(_mm_set1_ps(sf[c / 16 + 1]), _mm_set1_ps(sf[c / 16]));
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(qx->q[t0 + t] + c));
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(ac, _mm256_sign_epi8(q, code)), ones);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(sv, _mm256_set1_ps(qx->d[t0 + t][c / 32])), acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) y[(size_t)t * ldy + o] = hsum8(acc[t]) * W->gscale;
}

static void n4tile_fn(const ink_mat *W, int o, const ink_qx *qx, int t0, float *y, int ldy, int nt)
{
    switch (nt) {
    case 1: n4tile(W, o, qx, t0, y, ldy, 1); break;
    case 2: n4tile(W, o, qx, t0, y, ldy, 2); break;
    case 3: n4tile(W, o, qx, t0, y, ldy, 3); break;
    default: n4tile(W, o, qx, t0, y, ldy, 4); break;
    }
}

static void n8tile_fn(const ink_mat *W, int o, const ink_qx *qx, int t0, float *y, int ldy, int nt)
{
    switch (nt) {
    case 1: n8tile(W, o, qx, t0, y, ldy, 1); break;
    case 2: n8tile(W, o, qx, t0, y, ldy, 2); break;
    case 3: n8tile(W, o, qx, t0, y, ldy, 3); break;
    default: n8tile(W, o, qx, t0, y, ldy, 4); break;
    }
}

static void rows_int8(const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy, int r0, int r1)
{
    ink_qx qx; /* 320 KiB on the stack: no allocation on the hot path */
    void (*f)(const ink_mat *, int, const ink_qx *, int, float *, int, int);
    switch (W->dtype == INK_QT_NVFP4 ? 0 : W->bits) {
    case 0: f = n8tile_fn; break;
    case 2: f = i8tile_2; break;
    case 3: f = i8tile_3; break;
    case 5: f = i8tile_5; break;
    case 6: f = i8tile_6; break;
    case 8: f = i8tile_8; break;
    default: f = i8tile_4; break;
    }
    int nib = nib_layout(W);
    if (nib) f = W->dtype == INK_QT_NVFP4 ? n4tile_fn : i4tile_fn;
    for (int t0 = 0; t0 < T; t0 += INK_QX_TILE) {
        int nt = T - t0 < INK_QX_TILE ? T - t0 : INK_QX_TILE;
        ink_qx_fill(&qx, x + (size_t)t0 * ldx, ldx, nt, W->cols);
        if (nib) qx_nibble_order(&qx, nt, W->cols);
        if (W->dtype == INK_QT_AFFINE) qx_group_sums(&qx, nt, W->cols, W->group);
        for (int o = r0; o < r1; o++)
            for (int t = 0; t < nt; t += 4) f(W, o, &qx, t, y + (size_t)(t0 + t) * ldy, ldy, nt - t < 4 ? nt - t : 4);
    }
}

/* ---- attention ------------------------------------------------------------------------------
 * One tile (kernels.h), the AVX-512 scheme at 8 lanes: scores key-vectorised (16 keys transposed to
 * kt[c][16], 8x8 at a time; up to 8 queries x 8 keys or 4 x 16 per register tile, one FMA chain over
 * c per (query, key)), softmax in 8 lanes, P.V over keys in ascending order with up to 2 queries x
 * 32 dims of accumulators per pass. */

AI __m256 exp8(__m256 x)
{
    __m256 xc = _mm256_min_ps(_mm256_set1_ps(INK_EXP_HI), x); /* NaN stays NaN */
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(INK_EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(INK_EXP_C1), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(INK_EXP_C2), r);
    __m256 z = _mm256_mul_ps(r, r), y = _mm256_set1_ps(INK_EXP_P0);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(INK_EXP_P1));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(INK_EXP_P2));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(INK_EXP_P3));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(INK_EXP_P4));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(INK_EXP_P5));
    y = _mm256_fmadd_ps(y, z, r);
    y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(INK_EXP_LO), _CMP_LT_OQ), y);
}

static const int32_t lane_tab[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

/* integer mask of the first m lanes (0 <= m <= 8) */
AI __m256i lanes8(int m) { return _mm256_loadu_si256((const __m256i *)(lane_tab + 8 - (m < 0 ? 0 : m > 8 ? 8 : m))); }

void ink_avx2_expv(const float *x, float *y, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
    if (i < n) _mm256_maskstore_ps(y + i, lanes8(n - i), exp8(_mm256_maskload_ps(x + i, lanes8(n - i))));
}

/* r[i][l] -> r[l][i] for an 8x8 block (24 shuffles) */
AI void tr8(__m256 *r)
{
    __m256 t[8], u[8];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 2
    for (int b = 0; b < 2; b++) {
        u[4 * b] = _mm256_shuffle_ps(t[4 * b], t[4 * b + 2], 0x44);
        u[4 * b + 1] = _mm256_shuffle_ps(t[4 * b], t[4 * b + 2], 0xee);
        u[4 * b + 2] = _mm256_shuffle_ps(t[4 * b + 1], t[4 * b + 3], 0x44);
        u[4 * b + 3] = _mm256_shuffle_ps(t[4 * b + 1], t[4 * b + 3], 0xee);
    }
#pragma GCC unroll 4
    for (int e = 0; e < 4; e++) {
        r[e] = _mm256_permute2f128_ps(u[e], u[4 + e], 0x20);
        r[4 + e] = _mm256_permute2f128_ps(u[e], u[4 + e], 0x31);
    }
}

/* s[q][x0 + 8b + l] = (sum_c qt[q][c] * kt[c][8b + l]) / d, c in order, for l < nb - 8b */
AI void sc_tile(const float *qt, int dp, const float *kt, int d, float *s, int ls, int x0, int nb, const int NQ,
                const int KB)
{
    __m256 acc[8][2];
#pragma GCC unroll 8
    for (int q = 0; q < NQ; q++) acc[q][0] = acc[q][1] = _mm256_setzero_ps();
    for (int c = 0; c < d; c++) {
        __m256 k0 = _mm256_loadu_ps(kt + (size_t)c * 16), k1 = KB > 1 ? _mm256_loadu_ps(kt + (size_t)c * 16 + 8) : k0;
#pragma GCC unroll 8
        for (int q = 0; q < NQ; q++) {
            __m256 qb = _mm256_broadcast_ss(qt + (size_t)q * dp + c);
            acc[q][0] = _mm256_fmadd_ps(qb, k0, acc[q][0]);
            if (KB > 1) acc[q][1] = _mm256_fmadd_ps(qb, k1, acc[q][1]);
        }
    }
    __m256 dv = _mm256_set1_ps((float)d);
#pragma GCC unroll 8
    for (int q = 0; q < NQ; q++)
#pragma GCC unroll 2
        for (int b = 0; b < KB; b++) {
            float *p = s + (size_t)q * ls + x0 + 8 * b;
            __m256 y = _mm256_div_ps(acc[q][b], dv);
            if (nb >= 8 * b + 8) _mm256_storeu_ps(p, y);
            else if (nb > 8 * b) _mm256_maskstore_ps(p, lanes8(nb - 8 * b), y);
        }
}

#define SC_CASE(N, KB_)                                                                                            \
    case N: sc_tile(qt, dp, kt, d, s, ls, x0, nb, N, KB_); break;
static void sc1(int nq, const float *qt, int dp, const float *kt, int d, float *s, int ls, int x0, int nb)
{
    switch (nq) {
        SC_CASE(1, 1) SC_CASE(2, 1) SC_CASE(3, 1) SC_CASE(4, 1) SC_CASE(5, 1) SC_CASE(6, 1) SC_CASE(7, 1)
    default: sc_tile(qt, dp, kt, d, s, ls, x0, nb, 8, 1); break;
    }
}
static void sc2(int nq, const float *qt, int dp, const float *kt, int d, float *s, int ls, int x0, int nb)
{
    switch (nq) {
        SC_CASE(1, 2) SC_CASE(2, 2) SC_CASE(3, 2)
    default: sc_tile(qt, dp, kt, d, s, ls, x0, nb, 4, 2); break;
    }
}

static void scores8(const ink_attn *a, const ink_attn_lay *w)
{
    int d = a->d, nq = a->nq, cap = a->cap, slot = w->L % cap;
    float *kt = w->kt;
    for (int jb = w->L; jb <= w->P; jb += 16) {
        int nb = w->P - jb + 1 < 16 ? w->P - jb + 1 : 16;
        const float *rows[16];
        for (int l = 0; l < nb; l++) {
            rows[l] = a->k + (size_t)slot * a->ld;
            slot = slot + 1 == cap ? 0 : slot + 1;
        }
        for (int h = 0; h < 2; h++) {
            if (8 * h >= nb) {
                for (int c = 0; c < d; c++) _mm256_storeu_ps(kt + (size_t)c * 16 + 8 * h, _mm256_setzero_ps());
                continue;
            }
            for (int c0 = 0; c0 < d; c0 += 8) {
                __m256 r[8];
#pragma GCC unroll 8
                for (int l = 0; l < 8; l++)
                    r[l] = 8 * h + l < nb ? _mm256_loadu_ps(rows[8 * h + l] + c0) : _mm256_setzero_ps();
                tr8(r);
#pragma GCC unroll 8
                for (int m = 0; m < 8; m++) _mm256_storeu_ps(kt + (size_t)(c0 + m) * 16 + 8 * h, r[m]);
            }
        }
        int x0 = jb - w->L;
        for (int i = 0; i < nq;) {
            int g = nq - i;
            const float *qt = w->qt + (size_t)i * w->dp;
            float *s = w->s + (size_t)i * w->ls;
            if (g > 4) {
                g = g < 8 ? g : 8;
                sc1(g, qt, w->dp, kt, d, s, w->ls, x0, nb);
                if (nb > 8) sc1(g, qt, w->dp, kt + 8, d, s, w->ls, x0 + 8, nb - 8);
            } else
                sc2(g, qt, w->dp, kt, d, s, w->ls, x0, nb);
            i += g;
        }
    }
}

/* Relative logits, softmax of si[0 .. n) in place; returns 1 / sum (8 lanes by (j - lo) % 8). */
static float softmax8(const ink_attn *a, int i, float *si, const float *lrel)
{
    int n = a->hi[i] - a->lo[i] + 1, nrel = n < a->R ? n : a->R;
    const __m256i rev = _mm256_set_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 tv = _mm256_set1_ps(a->tau[i]);
    for (int e0 = 0; e0 < nrel; e0 += 8) {
        int m = nrel - e0 < 8 ? nrel - e0 : 8;
        /* lane l: distance e0 + 7 - l, position n - 8 - e0 + l (the layout keeps p inside ws) */
        __m256 b = _mm256_permutevar8x32_ps(_mm256_mul_ps(tv, _mm256_maskload_ps(lrel + e0, lanes8(m))), rev);
        __m256i vm = _mm256_xor_si256(lanes8(8 - m), _mm256_set1_epi32(-1));
        float *p = si + (n - 8 - e0);
        _mm256_maskstore_ps(p, vm, _mm256_add_ps(_mm256_maskload_ps(p, vm), b));
    }
    __m256 mv = _mm256_set1_ps(-INFINITY), ninf = mv;
    for (int m = 0; m < n; m += 8) {
        __m256i k = lanes8(n - m);
        __m256 x = _mm256_blendv_ps(ninf, _mm256_maskload_ps(si + m, k), _mm256_castsi256_ps(k));
        mv = _mm256_max_ps(mv, x);
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    __m256 mx = _mm256_set1_ps(_mm_cvtss_f32(m4)), acc = _mm256_setzero_ps();
    int m = 0;
    for (; m + 8 <= n; m += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(si + m), mx));
        _mm256_storeu_ps(si + m, e);
        acc = _mm256_add_ps(acc, e);
    }
    if (m < n) {
        __m256i k = lanes8(n - m);
        __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_maskload_ps(si + m, k), mx)), _mm256_castsi256_ps(k));
        _mm256_maskstore_ps(si + m, k, e);
        acc = _mm256_add_ps(acc, e);
    }
    return 1.0f / hsum8(acc);
}

/* o[i0 + q][c0 .. c0 + 8 ND) = inv * sum_j w[q][j] v_j, j ascending over each query's window (keys
 * outside a query's window are skipped for that query). */
AI void pv_tile(const ink_attn *a, const ink_attn_lay *w, int i0, int c0, const float *inv, const int NQ,
                const int ND)
{
    int lo[2], hi[2], Lg = a->lo[i0], Pg = a->hi[i0], C0 = a->lo[i0], C1 = a->hi[i0];
    const float *wt[2];
#pragma GCC unroll 2
    for (int q = 0; q < NQ; q++) {
        lo[q] = a->lo[i0 + q], hi[q] = a->hi[i0 + q];
        wt[q] = w->s + (size_t)(i0 + q) * w->ls;
        Lg = lo[q] < Lg ? lo[q] : Lg, Pg = hi[q] > Pg ? hi[q] : Pg;
        C0 = lo[q] > C0 ? lo[q] : C0, C1 = hi[q] < C1 ? hi[q] : C1;
    }
    int jm0 = C0 <= C1 ? C0 : Pg + 1, jm1 = C0 <= C1 ? C1 : Pg, cap = a->cap, slot = Lg % cap, L = w->L;
    __m256 acc[2][4];
#pragma GCC unroll 2
    for (int q = 0; q < NQ; q++)
#pragma GCC unroll 4
        for (int c = 0; c < ND; c++) acc[q][c] = _mm256_setzero_ps();
    const float *vb = a->v + c0;
    int j = Lg;
#define PV_STEP(MASKED)                                                                                            \
    {                                                                                                              \
        const float *vr = vb + (size_t)slot * a->ld;                                                               \
        __m256 vv[4];                                                                                              \
        _Pragma("GCC unroll 4") for (int c = 0; c < ND; c++) vv[c] = _mm256_loadu_ps(vr + 8 * c);                  \
        _Pragma("GCC unroll 2") for (int q = 0; q < NQ; q++)                                                       \
        {                                                                                                          \
            if (!MASKED || (j >= lo[q] && j <= hi[q])) {                                                           \
                __m256 b = _mm256_broadcast_ss(wt[q] + (j - L));                                                   \
                _Pragma("GCC unroll 4") for (int c = 0; c < ND; c++) acc[q][c] = _mm256_fmadd_ps(b, vv[c], acc[q][c]); \
            }                                                                                                      \
        }                                                                                                          \
        slot = slot + 1 == cap ? 0 : slot + 1;                                                                     \
    }
    for (; j < jm0; j++) PV_STEP(1)
    for (; j <= jm1; j++) PV_STEP(0)
    for (; j <= Pg; j++) PV_STEP(1)
#undef PV_STEP
#pragma GCC unroll 2
    for (int q = 0; q < NQ; q++) {
        __m256 iv = _mm256_set1_ps(inv[i0 + q]);
#pragma GCC unroll 4
        for (int c = 0; c < ND; c++) _mm256_storeu_ps(a->o[i0 + q] + c0 + 8 * c, _mm256_mul_ps(acc[q][c], iv));
    }
}

#define PV_ND(NQ_)                                                                                                 \
    switch (nd) {                                                                                                  \
    case 1: pv_tile(a, w, i0, c0, inv, NQ_, 1); break;                                                             \
    case 2: pv_tile(a, w, i0, c0, inv, NQ_, 2); break;                                                             \
    case 3: pv_tile(a, w, i0, c0, inv, NQ_, 3); break;                                                             \
    default: pv_tile(a, w, i0, c0, inv, NQ_, 4); break;                                                            \
    }
static void pv8(const ink_attn *a, const ink_attn_lay *w, const float *inv)
{
    int nv = a->d / 8;
    for (int i0 = 0; i0 < a->nq; i0 += 2) {
        int nq = a->nq - i0 < 2 ? a->nq - i0 : 2;
        for (int cv = 0; cv < nv; cv += 4) {
            int nd = nv - cv < 4 ? nv - cv : 4, c0 = 8 * cv;
            if (nq == 1) PV_ND(1)
            else PV_ND(2)
        }
    }
}

static void avx2_attn(const ink_attn *a)
{
    if (a->d % 8) {
        ink_kernels_scalar()->attn(a);
        return;
    }
    ink_attn_lay w = ink_attn_layout(a);
    int d = a->d;
    for (int i = 0; i < a->nq; i++) {
        __m256 tv = _mm256_set1_ps(a->tau[i]);
        float *qt = w.qt + (size_t)i * w.dp;
        for (int c = 0; c < d; c += 8) _mm256_storeu_ps(qt + c, _mm256_mul_ps(tv, _mm256_loadu_ps(a->q[i] + c)));
        int n = a->hi[i] - a->lo[i] + 1, nrel = n < a->R ? n : a->R;
        float *lrel = w.lrel + (size_t)i * w.Rp;
        for (int e0 = 0; e0 < nrel; e0 += 8) {
            __m256i m = lanes8(nrel - e0);
            __m256 acc = _mm256_setzero_ps();
            for (int r = 0; r < a->dr; r++)
                acc = _mm256_fmadd_ps(_mm256_broadcast_ss(a->rs[i] + r),
                                      _mm256_maskload_ps(a->rel + (size_t)r * a->R + e0, m), acc);
            _mm256_maskstore_ps(lrel + e0, m, acc);
        }
    }
    scores8(a, &w);
    float inv[INK_ATTN_MAXQ];
    for (int i = 0; i < a->nq; i++)
        inv[i] = softmax8(a, i, w.s + (size_t)i * w.ls + (a->lo[i] - w.L), w.lrel + (size_t)i * w.Rp);
    pv8(a, &w, inv);
}

/* ---- probes ------------------------------------------------------------------------------- */

double ink_avx2_read(const void *buf, size_t bytes, int streams)
{
    if (streams < 1) streams = 1;
    if (streams > 8) streams = 8;
    size_t n = bytes / (size_t)streams / 64 * 2; /* 32-byte vectors per stream, even */
    const __m256i *p = buf;
    __m256i a[8];
    for (int s = 0; s < 8; s++) a[s] = _mm256_setzero_si256();
    for (size_t i = 0; i < n; i += 2)
        for (int s = 0; s < streams; s++) {
            a[s] = _mm256_add_epi64(a[s], _mm256_load_si256(p + (size_t)s * n + i));
            a[s] = _mm256_add_epi64(a[s], _mm256_load_si256(p + (size_t)s * n + i + 1));
        }
    __m256i t = _mm256_setzero_si256();
    for (int s = 0; s < 8; s++) t = _mm256_xor_si256(t, a[s]);
    return (double)_mm256_extract_epi64(t, 0);
}

double ink_avx2_fma(long iters)
{
    __m256 a[10];
    __m256 m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 10; i++) a[i] = _mm256_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 10
        for (int i = 0; i < 10; i++) a[i] = _mm256_fmadd_ps(a[i], m, c);
    __m256 s = a[0];
    for (int i = 1; i < 10; i++) s = _mm256_add_ps(s, a[i]);
    return (double)hsum8(s);
}

/* ink_silu_mul in 8 lanes: z / (1 + exp8(-z)) * v, the portable loop's operations; the fused gate/up
 * (step 2, u == g + 1) split into evens and odds by shuffles. In place as the loop: a block of 8
 * outputs is stored after its 16 inputs are loaded, and later blocks read past it. */
static int avx2_silu_mul(float *o, const float *g, const float *u, int n, int step)
{
    int pairs = step == 2 && u == g + 1;
    if (step != 1 && !pairs) return 0;
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    for (int i = 0; i < n; i += 8) {
        int m = n - i < 8 ? n - i : 8;
        __m256 z, v;
        if (m < 8) { /* the tail through zero-padded copies */
            float zt[8] = {0}, vt[8] = {0};
            for (int j = 0; j < m; j++) zt[j] = g[(size_t)(i + j) * step], vt[j] = u[(size_t)(i + j) * step];
            z = _mm256_loadu_ps(zt), v = _mm256_loadu_ps(vt);
        } else if (pairs) {
            __m256 a = _mm256_loadu_ps(g + 2 * (size_t)i), b = _mm256_loadu_ps(g + 2 * (size_t)i + 8);
            z = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
            v = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
        } else {
            z = _mm256_loadu_ps(g + i), v = _mm256_loadu_ps(u + i);
        }
        __m256 e = exp8(_mm256_xor_ps(z, sign));
        __m256 r = _mm256_mul_ps(_mm256_div_ps(z, _mm256_add_ps(one, e)), v);
        if (m < 8) _mm256_maskstore_ps(o + i, lanes8(m), r);
        else _mm256_storeu_ps(o + i, r);
    }
    return 1;
}

/* ink_sconv's arithmetic, 8 channels per step (as the AVX-512 set's, in 8 lanes). */
static int avx2_sconv_rows(const float *w, const float *ext, float *y, int T, int C, int K)
{
    if (K > 8) return 0;
    const int S = K - 1;
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(K));
    for (int c = 0; c < C; c += 8) {
        __m256i m = lanes8(C - c);
        __m256 wk[8];
        for (int k = 0; k < K; k++)
            wk[k] = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), w + (size_t)c * K + k, idx, _mm256_castsi256_ps(m), 4);
        for (int t = 0; t < T; t++) {
            __m256 acc = _mm256_setzero_ps();
            for (int k = 0; k < K; k++)
                acc = _mm256_add_ps(acc, _mm256_mul_ps(wk[k], _mm256_maskload_ps(ext + (size_t)(t + k) * C + c, m)));
            __m256 ut = _mm256_maskload_ps(ext + (size_t)(t + S) * C + c, m);
            _mm256_maskstore_ps(y + (size_t)t * C + c, m, _mm256_add_ps(ut, acc));
        }
    }
    return 1;
}

static const ink_kernels avx2_set = {"avx2", avx2_rows, avx2_attn, ink_avx2_read, ink_avx2_fma, NULL, NULL, NULL,
                                     ink_avx2_expv, avx2_rows_pairs, avx2_pairs_fill, avx2_silu_mul, avx2_sconv_rows};

const ink_kernels *ink_kernels_avx2_raw(void) { return &avx2_set; }

#endif
