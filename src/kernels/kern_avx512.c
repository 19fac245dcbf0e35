/* kern_avx512.c — the AVX-512 kernel set (x86-64: F, BW, VL, DQ, VBMI, VNNI). Compiled for those
 * extensions with a target pragma and only called after the runtime CPU check in kernels.c.
 *
 * Per element the operation sequence is this set's own and does not depend on M, the thread count
 * or the tile: sixteen lane accumulators walk the reduction axis in steps of 16 (float views; a
 * masked step for cols % 16, whose missing lanes add exact zeros) or 64 (int8 path), combined as
 * hsum16 below. Tiles are NR <= 4 rows x NT <= 4 tokens; for T > 4 the f32-activation paths block
 * rows (16), tokens (48) and the reduction axis (512) and keep the lane accumulators on the stack.
 *
 * Quantized weights are decoded from the checkpoint layout directly (no repacking):
 *   4-bit / NVFP4: 16 nibbles spread to 16 dword lanes with one vpmultishiftqb, then one vpermps
 *     from a 16-entry table of the group's dequantized values (s*q+b, or e2m1*e4m3) — exactly the
 *     weights the format defines;
 *   2/3/5/6-bit: vpermb gathers the bytes of each lane pair, vpmultishiftqb aligns, then a table
 *     (2, 3 bits) or convert + fma (5, 6 bits);
 *   8-bit: zero-extend, convert, fma.
 * int8 activations (affine every width; NVFP4 as 2 e2m1 + 12, less 12 sum(q)): vpdpbusd of
 * unsigned codes by int8 activations (64 per step,
 * the same quantized activations as every other set), scaled per 32-block by d and per group by s;
 * the bias term b * sum(x) is a separate 16-group dot product per row. vdpbf16ps only where the
 * caller asked for activations rounded to bf16 (--activations bf16, the section at the end; compiled
 * for AVX512_BF16 there and called only when the CPU reports it). */
#if defined(__x86_64__) && defined(__GNUC__)

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512vnni")

#include "kernels/kern_impl.h"

#include "base/dtype.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

/* ((l0+l8) .. (l7+l15)) then ((a0+a4)+(a1+a5)) + ((a2+a6)+(a3+a7)) */
AI float hsum16(__m512 v)
{
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 h = _mm_hadd_ps(s4, s4);
    return _mm_cvtss_f32(h) + _mm_cvtss_f32(_mm_shuffle_ps(h, h, 1));
}

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
    if (dt == INK_DT_BF16) {
        union { uint32_t u; float f; } v = {(uint32_t)ink_ld_u16(p, i) << 16};
        return v.f;
    }
    if (dt == INK_DT_F16) return _cvtsh_ss(ink_ld_u16(p, i));
    return ink_ld_f32(p, i);
}

/* 16 scale values starting at element i (n < 16: the rest 0) as f32 lanes */
AI __m512 scales16(const void *p, int dt, size_t i, int n)
{
    __mmask16 m = (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1);
    if (dt == INK_DT_F32) return _mm512_maskz_loadu_ps(m, (const float *)p + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i);
    if (dt == INK_DT_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* Software prefetch PFD bytes ahead in tile order: along row r, and past its end at the same place
 * in row r + NR (the next tile). Rows of 2-16 KB read four at a time are too short for the hardware
 * prefetcher to ramp up (measured: q4 streamed at 3 GB/s without this). */
/* Software prefetch PFL bytes ahead in memory of the byte a row is at. Rows of one matrix (or of one
 * expert) are laid out one after another, so for short rows (H = 256: 512 bytes of bf16) this lands a
 * few row tiles ahead and for long ones further along the same row: either way a linear stream with
 * enough lines in flight to cover the DRAM latency (a 4-row tile of 512-byte rows with the hardware
 * prefetcher alone streams at ~9 GB/s here, with this at ~24 GB/s, the single-stream read bandwidth).
 * A prefetch past the end of a mapping is a no-op (prefetches never fault). */
#ifndef PFL
#define PFL 4096
#endif
AI void pf_ahead(const uint8_t *p) { _mm_prefetch((const char *)p + PFL, _MM_HINT_T0); }
/* int8 tiles: the same place in the next row tile (tile = NR rows of `next` bytes in all) when that is
 * at least PFL ahead, else PFL ahead: with rows of 1-4 KB read four at a time, PFL ahead of a row
 * lands inside the current tile, already in flight. */
AI void pf_tile(const uint8_t *p, size_t next) { _mm_prefetch((const char *)p + (next > PFL ? next : PFL), _MM_HINT_T0); }

#define NRM 4 /* register tile: rows */
#define NTM 4 /* register tile: tokens */

/* ---- float views -------------------------------------------------------------------------- */

/* 16 bf16 values as f32 lanes: each 16-bit value moved to the high half of its lane, the low half
 * zeroed, by one word permute on the shuffle port (a zero-extend and a shift before: the shift took
 * the FMA port, which decides the speed of a verify of 4 or more rows). The same bits. */
static const uint16_t bf_hi_idx[32] = {0, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7,
                                       0, 8, 0, 9, 0, 10, 0, 11, 0, 12, 0, 13, 0, 14, 0, 15};
AI __m512 bf16_f32(__m256i h)
{
    return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16((__mmask32)0xAAAAAAAAu, _mm512_loadu_si512(bf_hi_idx),
                                                              _mm512_castsi256_si512(h)));
}

AI __m512 ldw(const int dt, const void *p, size_t off)
{
    if (dt == INK_DT_F32) return _mm512_loadu_ps((const float *)p + off);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + off));
    if (dt == INK_DT_BF16) return bf16_f32(h);
    return _mm512_cvtph_ps(h);
}

AI __m512 ldw_m(const int dt, const void *p, size_t off, __mmask16 m)
{
    if (dt == INK_DT_F32) return _mm512_maskz_loadu_ps(m, (const float *)p + off);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + off);
    if (dt == INK_DT_BF16) return bf16_f32(h);
    return _mm512_cvtph_ps(h);
}

/* acc[r*LDA+t] += W[r][k0..k1) . x[t][k0..k1) in lanes (LDA: NTM, or FNT for frows_nt); k1 - k0 may end
 * in a partial step only at K */
#define FNT 6 /* frows_nt: tokens in one pass (T = 5, 6: one pass of 4 x T accumulators, not 4 + the rest) */
AI void ftile(const int dt, const void *w, size_t ldw_, const float *x, size_t ldx, int k0, int k1,
              __m512 *acc, const int NR, const int NT, const int LDA)
{
    __m512 a[NRM][FNT];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 6
        for (int t = 0; t < NT; t++) a[r][t] = acc[r * LDA + t];
    int kf = k0 + ((k1 - k0) & ~15);
    const size_t es = dt == INK_DT_F32 ? 4 : 2;
    const int burst = (size_t)(k1 - k0) * es <= 1024; /* short rows: the tile's lines ahead, all at once */
    if (burst)
        for (int r = 0; r < NR; r++)
            for (size_t b = (size_t)k0 * es; b < (size_t)k1 * es; b += 64)
                pf_ahead((const uint8_t *)w + (size_t)r * ldw_ * es + b);
    for (int k = k0; k < kf; k += 16) {
        __m512 wv[NRM];
        if (!burst && (k * es) % 64 == 0)
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++)
                pf_ahead((const uint8_t *)w + ((size_t)r * ldw_ + (size_t)k) * es);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) wv[r] = ldw(dt, w, (size_t)r * ldw_ + (size_t)k);
#pragma GCC unroll 6
        for (int t = 0; t < NT; t++) {
            __m512 xv = _mm512_loadu_ps(x + (size_t)t * ldx + k);
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) a[r][t] = _mm512_fmadd_ps(wv[r], xv, a[r][t]);
        }
    }
    if (kf < k1) {
        __mmask16 m = (__mmask16)((1u << (k1 - kf)) - 1);
        __m512 wv[NRM];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) wv[r] = ldw_m(dt, w, (size_t)r * ldw_ + (size_t)kf, m);
#pragma GCC unroll 6
        for (int t = 0; t < NT; t++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + (size_t)t * ldx + kf);
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) a[r][t] = _mm512_fmadd_ps(wv[r], xv, a[r][t]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 6
        for (int t = 0; t < NT; t++) acc[r * LDA + t] = a[r][t];
}

#define TILE_CASES(CALL)                                                                                          \
    switch (nr * 8 + nt) {                                                                                        \
    case 9: CALL(1, 1); break;                                                                                    \
    case 10: CALL(1, 2); break;                                                                                   \
    case 11: CALL(1, 3); break;                                                                                   \
    case 12: CALL(1, 4); break;                                                                                   \
    case 17: CALL(2, 1); break;                                                                                   \
    case 18: CALL(2, 2); break;                                                                                   \
    case 19: CALL(2, 3); break;                                                                                   \
    case 20: CALL(2, 4); break;                                                                                   \
    case 25: CALL(3, 1); break;                                                                                   \
    case 26: CALL(3, 2); break;                                                                                   \
    case 27: CALL(3, 3); break;                                                                                   \
    case 28: CALL(3, 4); break;                                                                                   \
    case 33: CALL(4, 1); break;                                                                                   \
    case 34: CALL(4, 2); break;                                                                                   \
    case 35: CALL(4, 3); break;                                                                                   \
    default: CALL(4, 4); break;                                                                                   \
    }

typedef void (*tile_fn)(const ink_mat *W, int r0, const float *x, size_t ldx, int k0, int k1, __m512 *acc, int nr,
                        int nt);

#define FC_DT(DT, NR_, NT_) ftile(DT, w, ldw_, x, ldx, k0, k1, acc, NR_, NT_, NTM)
#define FC_0(NR_, NT_) FC_DT(INK_DT_F32, NR_, NT_)
#define FC_1(NR_, NT_) FC_DT(INK_DT_BF16, NR_, NT_)
#define FC_2(NR_, NT_) FC_DT(INK_DT_F16, NR_, NT_)
static void ft_f32(const ink_mat *W, int r0, const float *x, size_t ldx, int k0, int k1, __m512 *acc, int nr, int nt)
{
    const uint8_t *w = (const uint8_t *)W->data + (size_t)r0 * W->stride * 4;
    size_t ldw_ = W->stride;
    TILE_CASES(FC_0)
}
static void ft_bf16(const ink_mat *W, int r0, const float *x, size_t ldx, int k0, int k1, __m512 *acc, int nr, int nt)
{
    const uint8_t *w = (const uint8_t *)W->data + (size_t)r0 * W->stride * 2;
    size_t ldw_ = W->stride;
    TILE_CASES(FC_1)
}
static void ft_f16(const ink_mat *W, int r0, const float *x, size_t ldx, int k0, int k1, __m512 *acc, int nr, int nt)
{
    const uint8_t *w = (const uint8_t *)W->data + (size_t)r0 * W->stride * 2;
    size_t ldw_ = W->stride;
    TILE_CASES(FC_2)
}

/* hsum16 of the 16 accumulators of a 4 x 4 tile at once (v[r * NTM + t]): the same additions of the
 * same operands in the same order as hsum16 on each (lanes i and i + 8, then j and j + 4, then the
 * pairs (0, 1) and (2, 3), then those two), only gathered by shuffles so that one add serves several
 * accumulators; so the bits are hsum16's. Lane 4 t + r of the result is row r, token t. */
AI __m512 hsum4x4(const __m512 *v)
{
    __m512 p[8], q[4];
#pragma GCC unroll 8
    for (int m = 0; m < 8; m++) /* a = lo256 + hi256 of two accumulators */
        p[m] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
#pragma GCC unroll 4
    for (int n = 0; n < 4; n++) /* s = lo128 + hi128 of a, four accumulators */
        q[n] = _mm512_add_ps(_mm512_shuffle_f32x4(p[2 * n], p[2 * n + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(p[2 * n], p[2 * n + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* (s0 + s1, s2 + s3) as hadd_ps, then their sum */
    __m512 r0 = _mm512_add_ps(_mm512_shuffle_ps(q[0], q[1], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_ps(q[0], q[1], _MM_SHUFFLE(3, 1, 3, 1)));
    __m512 r1 = _mm512_add_ps(_mm512_shuffle_ps(q[2], q[3], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_ps(q[2], q[3], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_ps(r0, r1, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(r0, r1, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* A full 4-row tile's tokens 0 .. min(NT, 4) - 1 from v[i * 4 + j] (row r + i rs, token j) by
 * hsum4x4 into y; returns how many tokens that was. */
AI int store4x4(const __m512 *v, const int NT, float *y, size_t ldy, int r, int rs)
{
    float s[16]; /* through memory: an extract's lane must be an immediate, and -O1 does not unroll */
    _mm512_storeu_ps(s, hsum4x4(v));
    int j0 = NT < 4 ? NT : 4;
    if (rs == 1)
#pragma GCC unroll 4
        for (int j = 0; j < j0; j++) memcpy(y + (size_t)j * ldy + r, s + 4 * j, 4 * sizeof(float));
    else
#pragma GCC unroll 4
        for (int j = 0; j < j0; j++)
#pragma GCC unroll 4
            for (int i = 0; i < NRM; i++) y[(size_t)j * ldy + r + i * rs] = s[4 * j + i];
    return j0;
}

/* All rows r0..r1 of a float view for T <= FROWS_MAXT tokens in one function, so the tile (ftile,
 * inlined) keeps its accumulators in registers from one tile to the next instead of a memory round
 * trip and an indirect call per tile: with short rows that round trip kept too few loads in flight to
 * stream (10 vs 24 GB/s on H = 256 bf16 matrices out of cache). T > NTM tokens take several passes of
 * NTM over each 4-row tile, one after another, so the later passes read the tile's rows from L1 / L2
 * (a verify of 5 .. 16 rows streams the weights once). Full 4-row tiles of 3 or 4 tokens are reduced by hsum4x4 (5-13 % faster than 16 hsum16 at T = 3, 4 with the weights in L2; not at T <= 2). Same
 * operation sequence per output as the tile driver below (lane FMAs over k ascending, the masked
 * tail, hsum16), so the bits are the same. */
#define FROWS_MAXT 16
AI void frows_nt(const int dt, const uint8_t *w, size_t ldw_, int K, const float *x, size_t ldx, float *y,
                 size_t ldy, int r, const int NR, const int NT, const int H4, int rs)
{
    /* the tile's rows are r + i rs (w, ldw_ = rs rows apart); accumulators NT apart */
    __m512 acc[NRM * FNT];
#pragma GCC unroll 24
    for (int i = 0; i < NR * NT; i++) acc[i] = _mm512_setzero_ps();
    ftile(dt, w, ldw_, x, ldx, 0, K, acc, NR, NT, NT);
    int j0 = 0;
    if (H4 && NR == NRM && NT >= 3) { /* tokens 0 .. min(NT, 4) - 1 by hsum4x4, the rest by hsum16 */
        __m512 v[16];
#pragma GCC unroll 4
        for (int i = 0; i < NRM; i++)
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) v[i * 4 + j] = j < NT ? acc[i * NT + j] : _mm512_setzero_ps();
        j0 = store4x4(v, NT, y, ldy, r, rs);
    }
#pragma GCC unroll 4
    for (int i = 0; i < NR; i++)
#pragma GCC unroll 6
        for (int j = j0; j < NT; j++) y[(size_t)j * ldy + r + i * rs] = hsum16(acc[i * NT + j]);
}

/* The row tiles of rows r0 .. r1 - 1: with rows of 1 KiB and more (SPREAD_ROWS), NRM rows Q = ceil(n / NRM)
 * apart (tile i: rows r0 + i + k Q), so
 * that each of a tile's NRM streams reads consecutive rows tile after tile: long sequential streams
 * for the prefetchers instead of NRM rows of one row's length, then a jump (from DRAM, one thread:
 * 8 -> 14 GB/s on the int8 path); shorter rows keep consecutive tiles (one stream already; spread, a
 * 4096 x 256 q4 matrix lost 10-20 %). A tile with fewer than NRM valid rows runs them one at a time. */
#define ROW_BYTES(W) ((W)->stride * (size_t)((W)->dtype == INK_DT_F32 ? 4 : (W)->dtype == INK_DT_BF16 || (W)->dtype == INK_DT_F16 ? 2 : 1))
#define SPREAD_ROWS(W) (ROW_BYTES(W) >= 1024)
/* Float views spread rows of 512 bytes too (H = 256 bf16, the twins' and the bundled model's
 * matrices): from DRAM, 8192 x 256 bf16, 1 thread: T = 1 17.8 -> 33 GB/s, T = 4 15 -> 21; 2 threads
 * 32 -> 55 and 28 -> 35 (the four streams keep more lines in flight than one stream of 2 KiB tiles).
 * Up to T = 5 on a Zen 5 (T = 8, 1 thread: 13 -> 11 there); up to FROWS_MAXT since an AVX-512 Xeon
 * (the twin's MLP shapes, 2 threads: T = 8 1.85 -> 1.55-1.7 one-row passes, T = 16 3.05 -> 2.85; one
 * thread T = 8 1.83 -> 1.52). Not for 256-byte rows (T >= 2 lose). */
#define SPREAD_FLOAT(W, T) (SPREAD_ROWS(W) || (ROW_BYTES(W) >= 512 && (T) <= FROWS_MAXT))
#define SPREAD_TILES(r0, r1, T, FULL, ONE)                                                                        \
    {                                                                                                             \
        int sp_ = SPREAD_FLOAT(W, T), n_ = (r1) - (r0);                                                           \
        int Q_ = sp_ ? (n_ + NRM - 1) / NRM : 1, cnt_ = sp_ ? Q_ : (n_ + NRM - 1) / NRM;                          \
        for (int i_ = 0; i_ < cnt_; i_++) {                                                                       \
            int o_ = (r0) + (sp_ ? i_ : i_ * NRM);                                                                \
            if (o_ + (NRM - 1) * Q_ < (r1)) FULL(o_, Q_);                                                         \
            else                                                                                                  \
                for (int k_ = 0; k_ < NRM && o_ + k_ * Q_ < (r1); k_++) ONE(o_ + k_ * Q_);                        \
        }                                                                                                         \
    }

/* T <= FNT: one tile width for the whole call (the switch outside the row loop keeps each loop to one
 * inlined tile, which the compiler schedules well: a switch per tile halved the T = 4 rate). */
AI void frows_t(const int dt, const ink_mat *W, const float *x, size_t ldx, float *y, size_t ldy, int r0, int r1,
                const int NT)
{
    const size_t es = dt == INK_DT_F32 ? 4 : 2, ldw_ = W->stride;
    const uint8_t *base = (const uint8_t *)W->data;
    int K = W->cols;
#define FT_FULL(o, q) frows_nt(dt, base + (size_t)(o) * ldw_ * es, ldw_ * (size_t)(q), K, x, ldx, y, ldy, o, NRM, NT, NT >= 3, q)
#define FT_ONE(o) frows_nt(dt, base + (size_t)(o) * ldw_ * es, ldw_, K, x, ldx, y, ldy, o, 1, NT, 0, 1)
    SPREAD_TILES(r0, r1, NT, FT_FULL, FT_ONE)
#undef FT_FULL
#undef FT_ONE
}

/* FNT < T <= FROWS_MAXT: per row tile, passes of NTM tokens, then the rest (the later passes read the
 * tile's rows from L1; from DRAM, T = 8 in two passes of 4 ran 10-15 % faster than in passes of 4 and 4
 * of a 6-wide tile's function). T = 6 is one pass of 4 x 6 (FNT): on an AVX-512 Xeon, where the FMA
 * port decides T >= 5, 4 + 2 widened every weight twice (twin MLP shapes, 2 threads: 1.75 -> 1.25
 * one-row passes); passes of 6 for T = 8 .. 16 measured no better than passes of 4. */
AI void frows_wide(const int dt, const ink_mat *W, const float *x, size_t ldx, float *y, size_t ldy, int r0, int T,
                   const int NR, int rs)
{
    const size_t es = dt == INK_DT_F32 ? 4 : 2, ldw_ = W->stride * (size_t)rs;
    const uint8_t *w = (const uint8_t *)W->data + (size_t)r0 * W->stride * es;
    int K = W->cols, t = 0;
    for (; t + NTM <= T; t += NTM)
        frows_nt(dt, w, ldw_, K, x + (size_t)t * ldx, ldx, y + (size_t)t * ldy, ldy, r0, NR, NTM, 1, rs);
    switch (T - t) {
    case 1: frows_nt(dt, w, ldw_, K, x + (size_t)t * ldx, ldx, y + (size_t)t * ldy, ldy, r0, NR, 1, 1, rs); break;
    case 2: frows_nt(dt, w, ldw_, K, x + (size_t)t * ldx, ldx, y + (size_t)t * ldy, ldy, r0, NR, 2, 1, rs); break;
    case 3: frows_nt(dt, w, ldw_, K, x + (size_t)t * ldx, ldx, y + (size_t)t * ldy, ldy, r0, NR, 3, 1, rs); break;
    default: break;
    }
}

/* One function per (view type, T <= NTM) and one per view type for T > NTM, so that each loop gets
 * its own register allocation (all of them in one function spilled accumulators to the stack and
 * halved the T = 4 rate). */
#define FW_FULL(o, q) frows_wide(dt_, W, x, ldx, y, ldy, o, T, NRM, q)
#define FW_ONE(o) frows_wide(dt_, W, x, ldx, y, ldy, o, T, 1, 1)
#define FROWS_FNS(NAME, DT)                                                                                        \
    static __attribute__((noinline)) void NAME##_1(const ink_mat *W, const float *x, size_t ldx, float *y,        \
                                                   size_t ldy, int r0, int r1)                                    \
    {                                                                                                             \
        frows_t(DT, W, x, ldx, y, ldy, r0, r1, 1);                                                                \
    }                                                                                                             \
    static __attribute__((noinline)) void NAME##_2(const ink_mat *W, const float *x, size_t ldx, float *y,        \
                                                   size_t ldy, int r0, int r1)                                    \
    {                                                                                                             \
        frows_t(DT, W, x, ldx, y, ldy, r0, r1, 2);                                                                \
    }                                                                                                             \
    static __attribute__((noinline)) void NAME##_3(const ink_mat *W, const float *x, size_t ldx, float *y,        \
                                                   size_t ldy, int r0, int r1)                                    \
    {                                                                                                             \
        frows_t(DT, W, x, ldx, y, ldy, r0, r1, 3);                                                                \
    }                                                                                                             \
    static __attribute__((noinline)) void NAME##_4(const ink_mat *W, const float *x, size_t ldx, float *y,        \
                                                   size_t ldy, int r0, int r1)                                    \
    {                                                                                                             \
        frows_t(DT, W, x, ldx, y, ldy, r0, r1, 4);                                                                \
    }                                                                                                             \
    static __attribute__((noinline)) void NAME##_5(const ink_mat *W, const float *x, size_t ldx, float *y,        \
                                                   size_t ldy, int r0, int r1)                                    \
    {                                                                                                             \
        frows_t(DT, W, x, ldx, y, ldy, r0, r1, 5);                                                                \
    }                                                                                                             \
    static __attribute__((noinline)) void NAME##_6(const ink_mat *W, const float *x, size_t ldx, float *y,        \
                                                   size_t ldy, int r0, int r1)                                    \
    {                                                                                                             \
        frows_t(DT, W, x, ldx, y, ldy, r0, r1, 6);                                                                \
    }                                                                                                             \
    static __attribute__((noinline)) void NAME##_w(const ink_mat *W, const float *x, size_t ldx, float *y,        \
                                                   size_t ldy, int r0, int r1, int T)                             \
    {                                                                                                             \
        const int dt_ = DT;                                                                                       \
        SPREAD_TILES(r0, r1, T, FW_FULL, FW_ONE)                                                                  \
    }                                                                                                             \
    static void NAME(const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy, int r0, int r1)         \
    {                                                                                                             \
        switch (T) {                                                                                              \
        case 1: NAME##_1(W, x, (size_t)ldx, y, (size_t)ldy, r0, r1); break;                                       \
        case 2: NAME##_2(W, x, (size_t)ldx, y, (size_t)ldy, r0, r1); break;                                       \
        case 3: NAME##_3(W, x, (size_t)ldx, y, (size_t)ldy, r0, r1); break;                                       \
        case 4: NAME##_4(W, x, (size_t)ldx, y, (size_t)ldy, r0, r1); break;                                       \
        case 5: NAME##_5(W, x, (size_t)ldx, y, (size_t)ldy, r0, r1); break;                                       \
        case 6: NAME##_6(W, x, (size_t)ldx, y, (size_t)ldy, r0, r1); break;                                       \
        default: NAME##_w(W, x, (size_t)ldx, y, (size_t)ldy, r0, r1, T); break;                                   \
        }                                                                                                         \
    }
FROWS_FNS(frows_f32, INK_DT_F32)
FROWS_FNS(frows_bf16, INK_DT_BF16)
FROWS_FNS(frows_f16, INK_DT_F16)

/* ---- quantized views, f32 activations ----------------------------------------------------- */

/* vpmultishiftqb control: dword lane j's low byte = nibble j of the broadcast 8-byte word */
AI __m512i nib_ctrl(void)
{
    return _mm512_setr_epi64(0x0000000400000000ll, 0x0000000c00000008ll, 0x0000001400000010ll, 0x0000001c00000018ll,
                             0x0000002400000020ll, 0x0000002c00000028ll, 0x0000003400000030ll, 0x0000003c00000038ll);
}

/* 16 codes (bits 2, 3, 5, 6) of a row from element c (c % 16 == 0) into dword lanes (masked to bits) */
AI __m512i codes16(const int bits, const uint8_t *row, int c, __m512i perm, __m512i ctrl)
{
    __m128i v = _mm_maskz_loadu_epi8((__mmask16)((1u << (2 * bits)) - 1), row + (size_t)c * bits / 8);
    __m512i d = _mm512_permutexvar_epi8(perm, _mm512_castsi128_si512(v));
    d = _mm512_multishift_epi64_epi8(ctrl, d);
    return _mm512_and_si512(d, _mm512_set1_epi32((1 << bits) - 1));
}

/* vpermb / vpmultishiftqb constants for codes16: qword m holds lanes 2m, 2m+1 */
AI void codes16_consts(int bits, __m512i *perm, __m512i *ctrl)
{
    uint8_t p[64], cb[64];
    memset(cb, 0, sizeof cb);
    for (int m = 0; m < 8; m++) {
        int bit = 2 * m * bits, o = bit / 8, sh = bit - 8 * o;
        for (int i = 0; i < 8; i++) p[8 * m + i] = (uint8_t)(o + i < 16 ? o + i : 15);
        cb[8 * m] = (uint8_t)sh, cb[8 * m + 4] = (uint8_t)(sh + bits);
    }
    *perm = _mm512_loadu_si512(p);
    *ctrl = _mm512_loadu_si512(cb);
}

/* acc over groups [g0, g1) of rows r0.. (affine any width, or NVFP4 with bits = 0) */
AI void qtile(const int bits, const ink_mat *W, int r0, const float *x, size_t ldx, int g0, int g1, __m512 *acc,
              const int NR, const int NT)
{
    __m512 a[NRM][NTM];
    const uint8_t *row[NRM];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        row[r] = (const uint8_t *)W->data + (size_t)(r0 + r) * W->stride;
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) a[r][t] = acc[r * NTM + t];
    }
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 e2m1 = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f,
                                       -2.0f, -3.0f, -4.0f, -6.0f);
    const __m512i nctrl = nib_ctrl();
    __m512i perm = _mm512_setzero_si512(), ctrl = _mm512_setzero_si512();
    if (bits != 0 && bits != 4 && bits != 8) codes16_consts(bits, &perm, &ctrl);
    const int gs = bits == 0 ? 16 : W->group;
    for (int g = g0; g < g1; g++) {
        __m512 tab[NRM], sv[NRM], bv[NRM];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            size_t gi = (size_t)(r0 + r) * W->sstride + (size_t)g;
            if (bits == 0) {
                tab[r] = _mm512_mul_ps(e2m1, _mm512_set1_ps(e4m3(((const uint8_t *)W->scales)[gi])));
                sv[r] = bv[r] = _mm512_setzero_ps();
            } else {
                sv[r] = _mm512_set1_ps(scale_at(W->scales, W->sdtype, gi));
                bv[r] = _mm512_set1_ps(scale_at(W->biases, W->sdtype, gi));
                if (bits <= 4) tab[r] = _mm512_fmadd_ps(iota, sv[r], bv[r]);
            }
        }
        for (int c = g * gs; c < (g + 1) * gs; c += 16) {
            __m512 wv[NRM];
            const int eb = bits == 0 ? 4 : bits;
            if ((c * eb / 8) % 64 == 0)
#pragma GCC unroll 4
                for (int r = 0; r < NR; r++)
                    pf_ahead(row[r] + (size_t)c * eb / 8);
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                if (bits == 0 || bits == 4) {
                    long long u;
                    memcpy(&u, row[r] + c / 2, 8);
                    __m512i q = _mm512_multishift_epi64_epi8(nctrl, _mm512_set1_epi64(u));
                    wv[r] = _mm512_permutexvar_ps(q, tab[r]);
                } else if (bits == 8) {
                    __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row[r] + c)));
                    wv[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), sv[r], bv[r]);
                } else if (bits < 4) {
                    wv[r] = _mm512_permutexvar_ps(codes16(bits, row[r], c, perm, ctrl), tab[r]);
                } else {
                    wv[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(codes16(bits, row[r], c, perm, ctrl)), sv[r], bv[r]);
                }
            }
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                __m512 xv = _mm512_loadu_ps(x + (size_t)t * ldx + c);
#pragma GCC unroll 4
                for (int r = 0; r < NR; r++) a[r][t] = _mm512_fmadd_ps(wv[r], xv, a[r][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[r * NTM + t] = a[r][t];
}

#define Q_FN(B)                                                                                                   \
    static void qt_##B(const ink_mat *W, int r0, const float *x, size_t ldx, int k0, int k1, __m512 *acc, int nr, \
                       int nt)                                                                                    \
    {                                                                                                             \
        int gs_ = B == 0 ? 16 : W->group, g0 = k0 / gs_, g1 = k1 / gs_;                                          \
        TILE_CASES(QC_##B)                                                                                        \
    }
#define QC_0(NR_, NT_) qtile(0, W, r0, x, ldx, g0, g1, acc, NR_, NT_)
#define QC_2(NR_, NT_) qtile(2, W, r0, x, ldx, g0, g1, acc, NR_, NT_)
#define QC_3(NR_, NT_) qtile(3, W, r0, x, ldx, g0, g1, acc, NR_, NT_)
#define QC_4(NR_, NT_) qtile(4, W, r0, x, ldx, g0, g1, acc, NR_, NT_)
#define QC_5(NR_, NT_) qtile(5, W, r0, x, ldx, g0, g1, acc, NR_, NT_)
#define QC_6(NR_, NT_) qtile(6, W, r0, x, ldx, g0, g1, acc, NR_, NT_)
#define QC_8(NR_, NT_) qtile(8, W, r0, x, ldx, g0, g1, acc, NR_, NT_)
Q_FN(0)
Q_FN(2)
Q_FN(3)
Q_FN(4)
Q_FN(5)
Q_FN(6)
Q_FN(8)

static tile_fn pick(const ink_mat *W)
{
    switch (W->dtype) {
    case INK_DT_F32: return ft_f32;
    case INK_DT_BF16: return ft_bf16;
    case INK_DT_F16: return ft_f16;
    case INK_QT_NVFP4: return qt_0;
    default: break;
    }
    switch (W->bits) {
    case 2: return qt_2;
    case 3: return qt_3;
    case 4: return qt_4;
    case 5: return qt_5;
    case 6: return qt_6;
    default: return qt_8;
    }
}

/* ---- the f32-activation driver ------------------------------------------------------------ */

#define KC 512  /* reduction block for T > NTM */
#define RBLK 16 /* rows per block for T > NTM */
#define TBLK 48 /* tokens per block for T > NTM */

static void rows_int8(const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy, int r0, int r1);

static void avx512_rows(const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy, int r0, int r1, int int8)
{
    if (int8 && ink_int8_ok(W)) {
        rows_int8(W, x, ldx, T, y, ldy, r0, r1);
        return;
    }
    int quant = W->dtype == INK_QT_AFFINE || W->dtype == INK_QT_NVFP4;
    if (quant && W->cols % 16) { /* no such checkpoint layout; keep a correct answer */
        ink_kernels_scalar()->rows(W, x, ldx, T, y, ldy, r0, r1, 0);
        return;
    }
    int K = W->cols;
    if (T <= FROWS_MAXT && K > 0 && !quant) {
        if (W->dtype == INK_DT_F32) frows_f32(W, x, ldx, T, y, ldy, r0, r1);
        else if (W->dtype == INK_DT_BF16) frows_bf16(W, x, ldx, T, y, ldy, r0, r1);
        else frows_f16(W, x, ldx, T, y, ldy, r0, r1);
        return;
    }
    tile_fn f = pick(W);
    int big = T > NTM;
    int kc = big ? KC : K, rblk = big ? RBLK : r1 - r0, tblk = big ? TBLK : T;
    __m512 buf[RBLK / NRM][TBLK / NTM][NRM * NTM]; /* big: lane accumulators of a block, per tile */
    for (int tb = 0; tb < T; tb += tblk) {
        int tn = T - tb < tblk ? T - tb : tblk;
        for (int rb = r0; rb < r1; rb += rblk) {
            int rn = r1 - rb < rblk ? r1 - rb : rblk;
            for (int k0 = 0; k0 < K || k0 == 0; k0 += kc) {
                int k1 = k0 + kc < K ? k0 + kc : K;
                int first = k0 == 0, last = k1 >= K;
                for (int r = rb; r < rb + rn; r += NRM) {
                    int nr = rb + rn - r < NRM ? rb + rn - r : NRM;
                    for (int t = tb; t < tb + tn; t += NTM) {
                        int nt = tb + tn - t < NTM ? tb + tn - t : NTM;
                        __m512 acc_local[NRM * NTM];
                        __m512 *acc = big ? buf[(r - rb) / NRM][(t - tb) / NTM] : acc_local;
                        if (first)
                            for (int i = 0; i < NRM * NTM; i++) acc[i] = _mm512_setzero_ps();
                        if (k1 > k0) f(W, r, x + (size_t)t * ldx, (size_t)ldx, k0, k1, acc, nr, nt);
                        if (!last) continue;
                        for (int i = 0; i < nr; i++)
                            for (int j = 0; j < nt; j++) {
                                float s = hsum16(acc[i * NTM + j]);
                                if (W->dtype == INK_QT_NVFP4) s *= W->gscale;
                                y[(size_t)(t + j) * ldy + r + i] = s;
                            }
                    }
                }
                if (K == 0) break;
            }
        }
    }
}

/* ---- int8 activations (affine, NVFP4), VNNI -------------------------------------------- */

#define QXK (INK_QX_MAXK + 64)

/* The activations of up to INK_QX_TILE tokens: q as ink_qx_fill makes them (zero-padded to a multiple
 * of 64), per 64-element step the block scales [d(2i) x8, d(2i+1) x8], and per group sum(x).
 * Nibble layout (4-bit affine with a power-of-two group >= 8, NVFP4; nib_layout): every full
 * 128-element chunk at c holds its even elements first, then its odd ones (q[c + j] = x(c + 2j),
 * q[c + 64 + j] = x(c + 2j + 1)), so the 64 bytes of packed weights that cover the chunk give the
 * codes that pair with them by one mask (low nibbles: even elements) and one shift (high nibbles:
 * odd), without widening; dword lane l of either half then covers elements c + 8l .. c + 8l + 7, so
 * the chunk's block scales are [d(c/32) x4, d(c/32 + 1) x4, d(c/32 + 2) x4, d(c/32 + 3) x4] at
 * dv + c/4. A tail shorter than 128 keeps the element order and the 64-step scales. */
typedef struct qx512 {
    int8_t q[INK_QX_TILE][QXK];
    float dv[INK_QX_TILE][QXK / 4];
    float xs[INK_QX_TILE][INK_QX_MAXK / 32 + 16];
} qx512;

/* whether W's int8 path uses the nibble layout (qx512 above; i8tile's 128-element steps) */
#define NIB_MINK 128 /* every row with a full chunk. Not 512, although rows of 2-4 chunks ran faster on the
                       * 64-steps (1024 x 256 q4, 2 threads: 11.3 GB/s without the layout, 9.4 with): a row's
                       * result must not depend on its length, or a twin (tools/twin.py: the same rows with
                       * zero columns appended) computes other numbers than its model (test_twin) */
static inline int nib_layout(const ink_mat *W)
{
    if (W->cols < NIB_MINK) return 0;
    if (W->dtype == INK_QT_NVFP4) return 1;
    return W->bits == 4 && W->group >= 8 && !(W->group & (W->group - 1));
}

static void qx512_fill(qx512 *qx, const float *x, int ldx, int nt, int k, int gs, int nib)
{
    int nb = k / 32, kp = (k + 63) & ~63;
    for (int t = 0; t < nt; t++) {
        const float *xt = x + (size_t)t * ldx;
        float d[INK_QX_MAXK / 32 + 2], bs[INK_QX_MAXK / 32 + 1];
        for (int b = 0; b < nb; b++) {
            const float *v = xt + 32 * b;
            __m512 v0 = _mm512_loadu_ps(v), v1 = _mm512_loadu_ps(v + 16);
            float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
            /* the same quantization as ink_qx_fill: id = 127/amax, q = nearbyint(v * id) */
            float id = amax > 0.0f ? 127.0f / amax : 0.0f;
            __m512 iv = _mm512_set1_ps(id);
            __m512i q0 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v0, iv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            __m512i q1 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v1, iv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            _mm_storeu_si128((__m128i *)(qx->q[t] + 32 * b), _mm512_cvtepi32_epi8(q0));
            _mm_storeu_si128((__m128i *)(qx->q[t] + 32 * b + 16), _mm512_cvtepi32_epi8(q1));
            d[b] = amax / 127.0f;
            bs[b] = hsum16(_mm512_add_ps(v0, v1));
        }
        d[nb] = d[nb + 1] = 0.0f;
        if (kp > k) memset(qx->q[t] + k, 0, (size_t)(kp - k));
        for (int i = 0; i < kp / 64; i++) {
            __m512 dv = _mm512_insertf32x8(_mm512_set1_ps(d[2 * i]), _mm256_set1_ps(d[2 * i + 1]), 1);
            _mm512_storeu_ps(qx->dv[t] + 16 * i, dv);
        }
        if (nib) {
            const __m512i ev = _mm512_setr_epi64(0x0e0c0a0806040200ll, 0x1e1c1a1816141210ll, 0x2e2c2a2826242220ll,
                                                 0x3e3c3a3836343230ll, 0x4e4c4a4846444240ll, 0x5e5c5a5856545250ll,
                                                 0x6e6c6a6866646260ll, 0x7e7c7a7876747270ll);
            const __m512i od = _mm512_add_epi8(ev, _mm512_set1_epi8(1));
            const __m512i quad = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
            for (int c = 0; c + 128 <= k; c += 128) {
                int8_t *qc = qx->q[t] + c;
                __m512i lo = _mm512_loadu_si512(qc), hi = _mm512_loadu_si512(qc + 64);
                _mm512_storeu_si512(qc, _mm512_permutex2var_epi8(lo, ev, hi));
                _mm512_storeu_si512(qc + 64, _mm512_permutex2var_epi8(lo, od, hi));
                _mm512_storeu_ps(qx->dv[t] + c / 4, _mm512_permutexvar_ps(quad, _mm512_castps128_ps512(_mm_loadu_ps(d + c / 32))));
            }
        }
        int G = k / gs, per = gs / 32;
        for (int g = 0; g < G; g++) {
            float s = bs[g * per];
            for (int j = 1; j < per; j++) s += bs[g * per + j];
            qx->xs[t][g] = s;
        }
        for (int g = G; g < G + 16; g++) qx->xs[t][g] = 0.0f;
    }
}

/* vpermb / vpmultishiftqb constants of codes64 for bits 2, 3, 5, 6: output qword m (codes 8m .. 8m+7)
 * takes row bytes m*bits .. m*bits+7, byte j shifted by j*bits */
AI void codes64_consts(int bits, __m512i *perm, __m512i *ctrl)
{
    uint8_t p[64], cb[64];
    for (int m = 0; m < 8; m++)
        for (int j = 0; j < 8; j++) p[8 * m + j] = (uint8_t)(m * bits + j), cb[8 * m + j] = (uint8_t)(j * bits);
    *perm = _mm512_loadu_si512(p);
    *ctrl = _mm512_loadu_si512(cb);
}

/* 64 codes from element c (n = 64 or 32 valid) as unsigned bytes in element order (bits 0: NVFP4 as
 * 2 * e2m1 + 12, 0 .. 24; the caller subtracts 12 sum(q)) */
AI __m512i codes64(const int bits, const uint8_t *row, int c, int n, __m512i perm, __m512i ctrl)
{
    if (bits == 0) {
        const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
        __m256i v = n == 64 ? _mm256_loadu_si256((const __m256i *)(row + c / 2))
                            : _mm256_maskz_loadu_epi8(0xffffu, row + c / 2);
        __m512i d = _mm512_cvtepu32_epi64(v);
        d = _mm512_multishift_epi64_epi8(_mm512_set1_epi64(0x1c1814100c080400ll), d);
        return _mm512_shuffle_epi8(lut, _mm512_and_si512(d, _mm512_set1_epi8(15)));
    }
    if (bits != 4 && bits != 8) {
        __mmask64 m = (__mmask64)((1ull << ((n == 64 ? 8 : 4) * bits)) - 1);
        __m512i v = _mm512_maskz_loadu_epi8(m, row + (size_t)c / 8 * (size_t)bits);
        __m512i d = _mm512_multishift_epi64_epi8(ctrl, _mm512_permutexvar_epi8(perm, v));
        return _mm512_and_si512(d, _mm512_set1_epi8((char)((1 << bits) - 1)));
    }
    if (bits == 8)
        return n == 64 ? _mm512_loadu_si512(row + c) : _mm512_maskz_loadu_epi8(0xffffffffull, row + c);
    __m256i v = n == 64 ? _mm256_loadu_si256((const __m256i *)(row + c / 2))
                        : _mm256_maskz_loadu_epi8(0xffffu, row + c / 2);
    __m512i d = _mm512_cvtepu32_epi64(v); /* qword m = nibbles 8m .. 8m+7 */
    d = _mm512_multishift_epi64_epi8(_mm512_set1_epi64(0x1c1814100c080400ll), d);
    return _mm512_and_si512(d, _mm512_set1_epi8(15));
}

/* per-lane group scales of the 64-element step at c: lanes 0-7 group c/gs, lanes 8-15 (c+32)/gs */
AI __m512 step_scale(const ink_mat *W, size_t base, int c, int n)
{
    int gs = W->group;
    float s0 = scale_at(W->scales, W->sdtype, base + (size_t)(c / gs));
    if (gs >= 64 || n < 64) return _mm512_set1_ps(s0);
    float s1 = scale_at(W->scales, W->sdtype, base + (size_t)((c + 32) / gs));
    return _mm512_insertf32x8(_mm512_set1_ps(s0), _mm256_set1_ps(s1), 1);
}

/* NVFP4 scales of the 64-element step at c: 4 lanes per 16-group, e4m3 / 2 (0 past n), by bit
 * assembly in vector lanes (normal: (x & 0x7f) << 20 + 120 << 23; subnormal: m * 2^-9; as e4m3()
 * except that the NaN code 0x7f is not special-cased) */
AI __m512 step_scale_nv(const ink_mat *W, int o, int c, int n)
{
    const uint8_t *sc = (const uint8_t *)W->scales + (size_t)o * W->sstride + c / 16;
    __m128i x = _mm_cvtepu8_epi32(_mm_maskz_loadu_epi8((__mmask16)(n == 64 ? 0xf : 0x3), sc));
    __m128i mag = _mm_add_epi32(_mm_slli_epi32(_mm_and_si128(x, _mm_set1_epi32(0x7f)), 20), _mm_set1_epi32(120 << 23));
    __m128 sub = _mm_mul_ps(_mm_cvtepi32_ps(_mm_and_si128(x, _mm_set1_epi32(7))), _mm_set1_ps(0.001953125f));
    __mmask8 isn = _mm_test_epi32_mask(x, _mm_set1_epi32(0x78)); /* exponent != 0 */
    __m128 v = _mm_mask_blend_ps(isn, sub, _mm_castsi128_ps(mag));
    v = _mm_or_ps(v, _mm_castsi128_ps(_mm_slli_epi32(_mm_and_si128(x, _mm_set1_epi32(0x80)), 24)));
    v = _mm_mul_ps(v, _mm_set1_ps(0.5f));
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v));
}

/* 16 NVFP4 block scales (e4m3, from byte i of row o's scales; n < 16: the rest 0) as f32 / 2: the
 * bit assembly of step_scale_nv, 16 lanes at a time (the same exact values) */
AI __m512 nv_scales16(const ink_mat *W, int o, int i, int n)
{
    const uint8_t *sc = (const uint8_t *)W->scales + (size_t)o * W->sstride + i;
    __m512i x = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8((__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1), sc));
    __m512i mag = _mm512_add_epi32(_mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x7f)), 20),
                                   _mm512_set1_epi32(120 << 23));
    __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(x, _mm512_set1_epi32(7))), _mm512_set1_ps(0.001953125f));
    __mmask16 isn = _mm512_test_epi32_mask(x, _mm512_set1_epi32(0x78)); /* exponent != 0 */
    __m512 v = _mm512_mask_blend_ps(isn, sub, _mm512_castsi512_ps(mag));
    v = _mm512_or_ps(v, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x80)), 24)));
    return _mm512_mul_ps(v, _mm512_set1_ps(0.5f));
}

/* bits 0: NVFP4 (codes 2 e2m1 + 12, less 12 sum(q); no bias term; gscale at the end).
 * The tile's scales are converted to f32 once, before the reduction loop (affine: one per group;
 * NVFP4: e4m3 / 2 per 16 inputs), so a step reads its scales with a broadcast instead of a scalar
 * conversion and an integer division per row (the same values as step_scale / step_scale_nv). */
AI void i8tile(const int bits, const ink_mat *W, int o0, int rs, const qx512 *qx, int t0, float *y, int ldy, const int NR,
               const int NT)
{
    /* rows o0 + r rs: rs > 1 spreads the tile's rows over the range (rows_int8), so each of its NR
     * streams reads consecutive rows tile after tile; the prefetch goes to the row the next tile
     * reads in the same stream */
    size_t pfd = rs == 1 ? (size_t)NR * W->stride : W->stride;
    int K = W->cols, gs = W->group;
    __m512 a[NRM][NTM];
    const uint8_t *row[NRM];
    float sf[NRM][INK_QX_MAXK / 16 + 16];
    int pow2 = bits && gs > 0 && !(gs & (gs - 1)), gsh = pow2 ? __builtin_ctz((unsigned)gs) : 0;
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        row[r] = (const uint8_t *)W->data + (size_t)(o0 + r * rs) * W->stride;
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) a[r][t] = _mm512_setzero_ps();
        if (bits) {
            size_t base = (size_t)(o0 + r * rs) * W->sstride;
            int G = (K + gs - 1) / gs;
            for (int g = 0; g < G; g += 16) _mm512_storeu_ps(sf[r] + g, scales16(W->scales, W->sdtype, base + (size_t)g, G - g));
        } else
            for (int i = 0; i < K / 16; i += 16) _mm512_storeu_ps(sf[r] + i, nv_scales16(W, o0 + r * rs, i, K / 16 - i));
    }
    __m512i perm = _mm512_setzero_si512(), ctrl = _mm512_setzero_si512();
    if (bits != 0 && bits != 4 && bits != 8) codes64_consts(bits, &perm, &ctrl);
    const __m512i nvidx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
#define I8_STEP(N_)                                                                                                \
    {                                                                                                              \
        const int n = N_;                                                                                          \
        __m512i code[NRM];                                                                                         \
        __m512 sv[NRM];                                                                                            \
        int g0 = 0, g1 = 0;                                                                                        \
        if (bits) g0 = pow2 ? c >> gsh : c / gs, g1 = n < 64 ? g0 : pow2 ? (c + 32) >> gsh : (c + 32) / gs;        \
        _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++)                                                       \
        {                                                                                                          \
            const int wb = bits ? bits : 4;                                                                        \
            if ((c * wb / 8) % 64 == 0) pf_tile(row[r] + (size_t)c * wb / 8, pfd);               \
            code[r] = codes64(bits, row[r], c, n, perm, ctrl);                                                     \
            if (!bits) sv[r] = _mm512_permutexvar_ps(nvidx, _mm512_castps128_ps512(_mm_loadu_ps(sf[r] + c / 16))); \
            else if (g0 == g1) sv[r] = _mm512_set1_ps(sf[r][g0]);                                                  \
            else sv[r] = _mm512_insertf32x8(_mm512_set1_ps(sf[r][g0]), _mm256_set1_ps(sf[r][g1]), 1);               \
            if (!bits && n < 64) sv[r] = _mm512_maskz_mov_ps(0x00ff, sv[r]);                                        \
        }                                                                                                          \
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)                                                       \
        {                                                                                                          \
            __m512i q = _mm512_loadu_si512(qx->q[t0 + t] + c);                                                     \
            __m512 dv = _mm512_loadu_ps(qx->dv[t0 + t] + c / 4);                                                   \
            /* codes offset by z0 (8-bit: used as code - 128, as in every set; NVFP4: stored + 12): each lane     \
             * starts at -z0 sum(q) */                                                                             \
            __m512i z = bits == 8 || bits == 0 ? _mm512_sub_epi32(_mm512_setzero_si512(),                           \
                                                                  _mm512_dpbusd_epi32(_mm512_setzero_si512(),       \
                                                                                      _mm512_set1_epi8((char)(bits ? 0x80 : 12)), q)) \
                                               : _mm512_setzero_si512();                                           \
            _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++)                                                   \
            {                                                                                                      \
                __m512 li = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(z, code[r], q));                                \
                a[r][t] = _mm512_fmadd_ps(li, _mm512_mul_ps(sv[r], dv), a[r][t]);                                  \
            }                                                                                                      \
        }                                                                                                          \
    }
    int c = 0;
    /* nibble layout (qx512): 128 elements per step, two dot products per row into the same lanes */
    if (K >= NIB_MINK && (bits == 0 || (bits == 4 && pow2 && gs >= 8))) {
        const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
        const __m512i m4 = _mm512_set1_epi8(15);
        /* the scale of lane l: group (c + 8l) / gs (affine), block (c + 8l) / 16 (NVFP4) */
        int sh = bits ? gsh : 4, nsc = bits ? (gs >= 128 ? 1 : 128 / gs) : 8;
        __m512i sidx = _mm512_srli_epi32(_mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120),
                                         (unsigned)sh);
        __mmask16 smask = (__mmask16)((1u << nsc) - 1);
        for (; c + 128 <= K; c += 128) {
            __m512i lo[NRM], hi[NRM];
            __m512 sv[NRM];
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                pf_tile(row[r] + (size_t)c / 2, pfd);
                __m512i v = _mm512_loadu_si512(row[r] + (size_t)c / 2);
                lo[r] = _mm512_and_si512(v, m4);
                hi[r] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                if (!bits) lo[r] = _mm512_shuffle_epi8(lut, lo[r]), hi[r] = _mm512_shuffle_epi8(lut, hi[r]);
                const float *sp = sf[r] + (c >> sh);
                sv[r] = nsc == 1 ? _mm512_set1_ps(sp[0]) : _mm512_permutexvar_ps(sidx, _mm512_maskz_loadu_ps(smask, sp));
            }
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                __m512i qe = _mm512_loadu_si512(qx->q[t0 + t] + c), qo = _mm512_loadu_si512(qx->q[t0 + t] + c + 64);
                __m512 dv = _mm512_loadu_ps(qx->dv[t0 + t] + c / 4);
                __m512i z = _mm512_setzero_si512();
                if (!bits) {
                    const __m512i k12 = _mm512_set1_epi8(12);
                    z = _mm512_sub_epi32(z, _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, k12, qe), k12, qo));
                }
#pragma GCC unroll 4
                for (int r = 0; r < NR; r++) {
                    __m512i li = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, lo[r], qe), hi[r], qo);
                    a[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(li), _mm512_mul_ps(sv[r], dv), a[r][t]);
                }
            }
        }
    }
    for (; c + 64 <= K; c += 64) I8_STEP(64)
    if (c < K) I8_STEP(32)
#undef I8_STEP
    if (bits == 0) {
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) y[(size_t)t * ldy + o0 + r * rs] = hsum16(a[r][t]) * W->gscale;
        return;
    }
    /* bias term: sum_g b[g] * sum(x over g), 16 groups at a time */
    int G = K / W->group;
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        size_t base = (size_t)(o0 + r * rs) * W->sstride;
        __m512 bt[NTM];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) bt[t] = _mm512_setzero_ps();
        for (int g = 0; g < G; g += 16) {
            __m512 bv = scales16(W->biases, W->sdtype, base + (size_t)g, G - g);
            if (bits == 8) bv = _mm512_fmadd_ps(_mm512_set1_ps(128.0f), scales16(W->scales, W->sdtype, base + (size_t)g, G - g), bv);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) bt[t] = _mm512_fmadd_ps(bv, _mm512_loadu_ps(qx->xs[t0 + t] + g), bt[t]);
        }
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) y[(size_t)t * ldy + o0 + r * rs] = hsum16(a[r][t]) + hsum16(bt[t]);
    }
}

#define I8_FN(B)                                                                                                  \
    static void i8tile_##B(const ink_mat *W, int o0, int rs, const qx512 *qx, int t0, float *y, int ldy, int nr, int nt) \
    {                                                                                                             \
        TILE_CASES(I8C_##B)                                                                                       \
    }
#define I8C_0(NR_, NT_) i8tile(0, W, o0, rs, qx, t0, y, ldy, NR_, NT_)
#define I8C_2(NR_, NT_) i8tile(2, W, o0, rs, qx, t0, y, ldy, NR_, NT_)
#define I8C_3(NR_, NT_) i8tile(3, W, o0, rs, qx, t0, y, ldy, NR_, NT_)
#define I8C_4(NR_, NT_) i8tile(4, W, o0, rs, qx, t0, y, ldy, NR_, NT_)
#define I8C_5(NR_, NT_) i8tile(5, W, o0, rs, qx, t0, y, ldy, NR_, NT_)
#define I8C_6(NR_, NT_) i8tile(6, W, o0, rs, qx, t0, y, ldy, NR_, NT_)
#define I8C_8(NR_, NT_) i8tile(8, W, o0, rs, qx, t0, y, ldy, NR_, NT_)
I8_FN(0)
I8_FN(2)
I8_FN(3)
I8_FN(4)
I8_FN(5)
I8_FN(6)
I8_FN(8)

static void rows_int8(const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy, int r0, int r1)
{
    qx512 qx; /* ~580 KiB on the stack: no allocation on the hot path */
    void (*f)(const ink_mat *, int, int, const qx512 *, int, float *, int, int, int);
    switch (W->dtype == INK_QT_NVFP4 ? 0 : W->bits) {
    case 0: f = i8tile_0; break;
    case 2: f = i8tile_2; break;
    case 3: f = i8tile_3; break;
    case 5: f = i8tile_5; break;
    case 6: f = i8tile_6; break;
    case 8: f = i8tile_8; break;
    default: f = i8tile_4; break;
    }
    for (int t0 = 0; t0 < T; t0 += INK_QX_TILE) {
        int nt = T - t0 < INK_QX_TILE ? T - t0 : INK_QX_TILE;
        qx512_fill(&qx, x + (size_t)t0 * ldx, ldx, nt, W->cols, W->dtype == INK_QT_NVFP4 ? 32 : W->group, nib_layout(W));
        /* a tile's NRM rows are Q apart (Q = the range / NRM, rounded up): NRM long sequential streams
         * instead of NRM rows of one row's length each, then a jump */
        int Q = SPREAD_ROWS(W) ? (r1 - r0 + NRM - 1) / NRM : 1;
        for (int i = 0; i < (Q > 1 ? Q : r1 - r0); i += Q > 1 ? 1 : NRM) {
            int o = r0 + i, nr = 0;
            while (nr < NRM && o + nr * Q < r1) nr++;
            for (int t = 0; t < nt; t += NTM)
                f(W, o, Q, &qx, t, y + (size_t)(t0 + t) * ldy, ldy, nr, nt - t < NTM ? nt - t : NTM);
        }
    }
}

/* ---- attention ------------------------------------------------------------------------------
 * One tile (kernels.h): scores key-vectorised (32 keys transposed to kt[c][32] in registers, 16x16
 * at a time, then one FMA chain over c per (query, key) with the query element broadcast, up to 8
 * queries x 16 keys or 4 x 32 per register tile), softmax in 16 lanes, P.V over keys in ascending
 * order with up to 6 queries x 64 dims of accumulators per pass (V row chunks loaded once per group). */

AI __m512 exp16(__m512 x)
{
    __m512 xc = _mm512_min_ps(_mm512_set1_ps(INK_EXP_HI), x); /* NaN stays NaN */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(INK_EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(INK_EXP_C1), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(INK_EXP_C2), r);
    __m512 z = _mm512_mul_ps(r, r), y = _mm512_set1_ps(INK_EXP_P0);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(INK_EXP_P1));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(INK_EXP_P2));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(INK_EXP_P3));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(INK_EXP_P4));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(INK_EXP_P5));
    y = _mm512_fmadd_ps(y, z, r);
    y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    y = _mm512_mul_ps(y, _mm512_castsi512_ps(e));
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(INK_EXP_LO), _CMP_LT_OQ), _mm512_setzero_ps());
}

void ink_avx512_expv(const float *x, float *y, int n)
{
    int i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

/* ink_silu_mul in 16 lanes: z / (1 + exp16(-z)) * v, the portable loop's operations; the fused
 * gate/up (step 2, u == g + 1) split into evens and odds by two permutes. In place as the loop: a
 * block of 16 outputs is stored after its 32 inputs are loaded, and later blocks read past it. */
static int avx512_silu_mul(float *o, const float *g, const float *u, int n, int step)
{
    int pairs = step == 2 && u == g + 1;
    if (step != 1 && !pairs) return 0;
    const __m512 one = _mm512_set1_ps(1.0f), sign = _mm512_set1_ps(-0.0f);
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    for (int i = 0; i < n; i += 16) {
        int m = n - i < 16 ? n - i : 16;
        __mmask16 k = (__mmask16)(m == 16 ? 0xffff : (1u << m) - 1);
        __m512 z, v;
        if (pairs) {
            __mmask16 k0 = (__mmask16)(m >= 8 ? 0xffff : (1u << (2 * m)) - 1);
            __mmask16 k1 = (__mmask16)(m <= 8 ? 0 : m == 16 ? 0xffff : (1u << (2 * (m - 8))) - 1);
            __m512 a = _mm512_maskz_loadu_ps(k0, g + 2 * (size_t)i), b = _mm512_maskz_loadu_ps(k1, g + 2 * (size_t)i + 16);
            z = _mm512_permutex2var_ps(a, ev, b), v = _mm512_permutex2var_ps(a, od, b);
        } else {
            z = _mm512_maskz_loadu_ps(k, g + i), v = _mm512_maskz_loadu_ps(k, u + i);
        }
        __m512 e = exp16(_mm512_xor_ps(z, sign));
        _mm512_mask_storeu_ps(o + i, k, _mm512_mul_ps(_mm512_div_ps(z, _mm512_add_ps(one, e)), v));
    }
    return 1;
}

/* ink_sconv's arithmetic, 16 channels per step: the K taps' weights gathered once per step (w is
 * [C][K]), then per row a sum from 0 over k of products, plus the residual input. */
static int avx512_sconv_rows(const float *w, const float *ext, float *y, int T, int C, int K)
{
    if (K > 8) return 0;
    const int S = K - 1;
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(K));
    for (int c = 0; c < C; c += 16) {
        __mmask16 m = (__mmask16)(C - c >= 16 ? 0xffff : (1u << (C - c)) - 1);
        __m512 wk[8];
        for (int k = 0; k < K; k++)
            wk[k] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, w + (size_t)c * K + k, 4);
        for (int t = 0; t < T; t++) {
            __m512 acc = _mm512_setzero_ps();
            for (int k = 0; k < K; k++)
                acc = _mm512_add_ps(acc, _mm512_mul_ps(wk[k], _mm512_maskz_loadu_ps(m, ext + (size_t)(t + k) * C + c)));
            __m512 ut = _mm512_maskz_loadu_ps(m, ext + (size_t)(t + S) * C + c);
            _mm512_mask_storeu_ps(y + (size_t)t * C + c, m, _mm512_add_ps(ut, acc));
        }
    }
    return 1;
}

AI __mmask16 lanes16(int m) { return (__mmask16)(m >= 16 ? 0xffff : m <= 0 ? 0 : (1u << m) - 1); }

/* r[i][l] -> r[l][i] for a 16x16 block (64 shuffles) */
AI void tr16(__m512 *r)
{
    __m512 t[16], u[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 4
    for (int b = 0; b < 4; b++) {
        __m512d a0 = _mm512_castps_pd(t[4 * b]), a1 = _mm512_castps_pd(t[4 * b + 1]);
        __m512d a2 = _mm512_castps_pd(t[4 * b + 2]), a3 = _mm512_castps_pd(t[4 * b + 3]);
        u[4 * b] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));     /* rows 4b..4b+3, dim 4L   */
        u[4 * b + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2)); /*                dim 4L+1 */
        u[4 * b + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3)); /*                dim 4L+2 */
        u[4 * b + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3)); /*                dim 4L+3 */
    }
#pragma GCC unroll 4
    for (int e = 0; e < 4; e++) {
        __m512 v0 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x88), v1 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xdd);
        __m512 v2 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x88);
        __m512 v3 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xdd);
        r[e] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        r[8 + e] = _mm512_shuffle_f32x4(v0, v2, 0xdd);
        r[4 + e] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        r[12 + e] = _mm512_shuffle_f32x4(v1, v3, 0xdd);
    }
}

/* s[q][x0 + 16b + l] = (sum_c qt[q][c] * kt[c][16b + l]) / d, c in order, for l < nb - 16b */
AI void sc_tile(const float *qt, int dp, const float *kt, int d, float *s, int ls, int x0, int nb, const int NQ,
                const int KB)
{
    __m512 acc[8][2];
#pragma GCC unroll 8
    for (int q = 0; q < NQ; q++) acc[q][0] = acc[q][1] = _mm512_setzero_ps();
    for (int c = 0; c < d; c++) {
        __m512 k0 = _mm512_loadu_ps(kt + (size_t)c * 32), k1 = KB > 1 ? _mm512_loadu_ps(kt + (size_t)c * 32 + 16) : k0;
#pragma GCC unroll 8
        for (int q = 0; q < NQ; q++) {
            __m512 qb = _mm512_set1_ps(qt[(size_t)q * dp + c]);
            acc[q][0] = _mm512_fmadd_ps(qb, k0, acc[q][0]);
            if (KB > 1) acc[q][1] = _mm512_fmadd_ps(qb, k1, acc[q][1]);
        }
    }
    __m512 dv = _mm512_set1_ps((float)d);
#pragma GCC unroll 8
    for (int q = 0; q < NQ; q++)
#pragma GCC unroll 2
        for (int b = 0; b < KB; b++)
            if (nb > 16 * b)
                _mm512_mask_storeu_ps(s + (size_t)q * ls + x0 + 16 * b, lanes16(nb - 16 * b),
                                      _mm512_div_ps(acc[q][b], dv));
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

static void scores16(const ink_attn *a, const ink_attn_lay *w)
{
    int d = a->d, nq = a->nq, cap = a->cap, slot = w->L % cap;
    float *kt = w->kt;
    for (int jb = w->L; jb <= w->P; jb += 32) {
        int nb = w->P - jb + 1 < 32 ? w->P - jb + 1 : 32;
        const float *rows[32];
        for (int l = 0; l < nb; l++) {
            rows[l] = a->k + (size_t)slot * a->ld;
            slot = slot + 1 == cap ? 0 : slot + 1;
        }
        for (int h = 0; h < 2; h++) {
            if (16 * h >= nb) {
                for (int c = 0; c < d; c++) _mm512_storeu_ps(kt + (size_t)c * 32 + 16 * h, _mm512_setzero_ps());
                continue;
            }
            for (int c0 = 0; c0 < d; c0 += 16) {
                __m512 r[16];
#pragma GCC unroll 16
                for (int l = 0; l < 16; l++)
                    r[l] = 16 * h + l < nb ? _mm512_loadu_ps(rows[16 * h + l] + c0) : _mm512_setzero_ps();
                tr16(r);
#pragma GCC unroll 16
                for (int m = 0; m < 16; m++) _mm512_storeu_ps(kt + (size_t)(c0 + m) * 32 + 16 * h, r[m]);
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
                if (nb > 16) sc1(g, qt, w->dp, kt + 16, d, s, w->ls, x0 + 16, nb - 16);
            } else
                sc2(g, qt, w->dp, kt, d, s, w->ls, x0, nb);
            i += g;
        }
    }
}

/* Relative logits, softmax of si[0 .. n) in place; returns 1 / sum (16 lanes by (j - lo) % 16). */
static float softmax16(const ink_attn *a, int i, float *si, const float *lrel)
{
    int n = a->hi[i] - a->lo[i] + 1, nrel = n < a->R ? n : a->R;
    const __m512i rev = _mm512_set_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 tv = _mm512_set1_ps(a->tau[i]);
    for (int e0 = 0; e0 < nrel; e0 += 16) {
        int m = nrel - e0 < 16 ? nrel - e0 : 16;
        /* lane l: distance e0 + 15 - l, position n - 16 - e0 + l (the layout keeps p inside ws) */
        __m512 b = _mm512_permutexvar_ps(rev, _mm512_mul_ps(tv, _mm512_maskz_loadu_ps(lanes16(m), lrel + e0)));
        __mmask16 vm = (__mmask16)(0xffffu & ~((1u << (16 - m)) - 1));
        float *p = si + (n - 16 - e0);
        _mm512_mask_storeu_ps(p, vm, _mm512_add_ps(_mm512_maskz_loadu_ps(vm, p), b));
    }
    __m512 mv = _mm512_set1_ps(-INFINITY);
    for (int m = 0; m < n; m += 16) {
        __mmask16 k = lanes16(n - m);
        mv = _mm512_mask_max_ps(mv, k, mv, _mm512_maskz_loadu_ps(k, si + m));
    }
    __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(mv)), acc = _mm512_setzero_ps();
    int m = 0;
    for (; m + 16 <= n; m += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(si + m), mx));
        _mm512_storeu_ps(si + m, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (m < n) {
        __mmask16 k = lanes16(n - m);
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, si + m), mx));
        _mm512_mask_storeu_ps(si + m, k, e);
        acc = _mm512_mask_add_ps(acc, k, acc, e);
    }
    return 1.0f / hsum16(acc);
}

/* o[i0 + q][c0 .. c0 + 16 ND) = inv * sum_j w[q][j] v_j, j ascending over each query's window; keys in
 * every window of the group take the unmasked step, the others a masked FMA (the query's accumulator
 * is left untouched where the key is outside its window). */
AI void pv_tile(const ink_attn *a, const ink_attn_lay *w, int i0, int c0, const float *inv, const int NQ,
                const int ND)
{
    int lo[6], hi[6], Lg = a->lo[i0], Pg = a->hi[i0], C0 = a->lo[i0], C1 = a->hi[i0];
    const float *wt[6];
#pragma GCC unroll 6
    for (int q = 0; q < NQ; q++) {
        lo[q] = a->lo[i0 + q], hi[q] = a->hi[i0 + q];
        wt[q] = w->s + (size_t)(i0 + q) * w->ls;
        Lg = lo[q] < Lg ? lo[q] : Lg, Pg = hi[q] > Pg ? hi[q] : Pg;
        C0 = lo[q] > C0 ? lo[q] : C0, C1 = hi[q] < C1 ? hi[q] : C1;
    }
    int jm0 = C0 <= C1 ? C0 : Pg + 1, jm1 = C0 <= C1 ? C1 : Pg, cap = a->cap, slot = Lg % cap, L = w->L;
    __m512 acc[6][4];
#pragma GCC unroll 6
    for (int q = 0; q < NQ; q++)
#pragma GCC unroll 4
        for (int c = 0; c < ND; c++) acc[q][c] = _mm512_setzero_ps();
    const float *vb = a->v + c0;
    int j = Lg;
#define PV_STEP(MASKED)                                                                                            \
    {                                                                                                              \
        const float *vr = vb + (size_t)slot * a->ld;                                                               \
        __m512 vv[4];                                                                                              \
        _Pragma("GCC unroll 4") for (int c = 0; c < ND; c++) vv[c] = _mm512_loadu_ps(vr + 16 * c);                 \
        _Pragma("GCC unroll 6") for (int q = 0; q < NQ; q++)                                                       \
        {                                                                                                          \
            __m512 b = _mm512_set1_ps(wt[q][j - L]);                                                               \
            if (MASKED) {                                                                                          \
                __mmask16 k = (__mmask16)(j >= lo[q] && j <= hi[q] ? 0xffff : 0);                                  \
                _Pragma("GCC unroll 4") for (int c = 0; c < ND; c++) acc[q][c] =                                   \
                    _mm512_mask3_fmadd_ps(b, vv[c], acc[q][c], k);                                                 \
            } else                                                                                                 \
                _Pragma("GCC unroll 4") for (int c = 0; c < ND; c++) acc[q][c] = _mm512_fmadd_ps(b, vv[c], acc[q][c]); \
        }                                                                                                          \
        slot = slot + 1 == cap ? 0 : slot + 1;                                                                     \
    }
    for (; j < jm0; j++) PV_STEP(1)
    for (; j <= jm1; j++) PV_STEP(0)
    for (; j <= Pg; j++) PV_STEP(1)
#undef PV_STEP
#pragma GCC unroll 6
    for (int q = 0; q < NQ; q++) {
        __m512 iv = _mm512_set1_ps(inv[i0 + q]);
#pragma GCC unroll 4
        for (int c = 0; c < ND; c++) _mm512_storeu_ps(a->o[i0 + q] + c0 + 16 * c, _mm512_mul_ps(acc[q][c], iv));
    }
}

#define PV_ND(NQ_)                                                                                                 \
    switch (nd) {                                                                                                  \
    case 1: pv_tile(a, w, i0, c0, inv, NQ_, 1); break;                                                             \
    case 2: pv_tile(a, w, i0, c0, inv, NQ_, 2); break;                                                             \
    case 3: pv_tile(a, w, i0, c0, inv, NQ_, 3); break;                                                             \
    default: pv_tile(a, w, i0, c0, inv, NQ_, 4); break;                                                            \
    }
static void pv16(const ink_attn *a, const ink_attn_lay *w, const float *inv)
{
    int nv = a->d / 16;
    for (int i0 = 0; i0 < a->nq; i0 += 6) {
        int nq = a->nq - i0 < 6 ? a->nq - i0 : 6;
        for (int cv = 0; cv < nv; cv += 4) {
            int nd = nv - cv < 4 ? nv - cv : 4, c0 = 16 * cv;
            switch (nq) {
            case 1: PV_ND(1) break;
            case 2: PV_ND(2) break;
            case 3: PV_ND(3) break;
            case 4: PV_ND(4) break;
            case 5: PV_ND(5) break;
            default: PV_ND(6) break;
            }
        }
    }
}

static void avx512_attn(const ink_attn *a)
{
    if (a->d % 16) { /* the AVX2 set takes d % 8 == 0, else the scalar set */
        ink_kernels_avx2_raw()->attn(a);
        return;
    }
    ink_attn_lay w = ink_attn_layout(a);
    int d = a->d;
    for (int i = 0; i < a->nq; i++) {
        __m512 tv = _mm512_set1_ps(a->tau[i]);
        float *qt = w.qt + (size_t)i * w.dp;
        for (int c = 0; c < d; c += 16) _mm512_storeu_ps(qt + c, _mm512_mul_ps(tv, _mm512_loadu_ps(a->q[i] + c)));
        int n = a->hi[i] - a->lo[i] + 1, nrel = n < a->R ? n : a->R;
        float *lrel = w.lrel + (size_t)i * w.Rp;
        for (int e0 = 0; e0 < nrel; e0 += 16) {
            __mmask16 m = lanes16(nrel - e0);
            __m512 acc = _mm512_setzero_ps();
            for (int r = 0; r < a->dr; r++)
                acc = _mm512_fmadd_ps(_mm512_set1_ps(a->rs[i][r]),
                                      _mm512_maskz_loadu_ps(m, a->rel + (size_t)r * a->R + e0), acc);
            _mm512_mask_storeu_ps(lrel + e0, m, acc);
        }
    }
    scores16(a, &w);
    float inv[INK_ATTN_MAXQ];
    for (int i = 0; i < a->nq; i++)
        inv[i] = softmax16(a, i, w.s + (size_t)i * w.ls + (a->lo[i] - w.L), w.lrel + (size_t)i * w.Rp);
    pv16(a, &w, inv);
}

/* Read probe in 64-byte loads: the loads a streaming kernel of this set issues (measured on Zen 4:
 * 31-34 GB/s on one core with 2-4 streams, 24-26 with 8 streams of 32-byte loads). */
static double avx512_read(const void *buf, size_t bytes, int streams)
{
    if (streams < 1) streams = 1;
    if (streams > 8) streams = 8;
    size_t n = bytes / (size_t)streams / 128 * 2; /* 64-byte vectors per stream, even */
    const __m512i *p = buf;
    __m512i a[8];
    for (int s = 0; s < 8; s++) a[s] = _mm512_setzero_si512();
    for (size_t i = 0; i < n; i += 2)
        for (int s = 0; s < streams; s++) {
            a[s] = _mm512_add_epi64(a[s], _mm512_load_si512(p + (size_t)s * n + i));
            a[s] = _mm512_add_epi64(a[s], _mm512_load_si512(p + (size_t)s * n + i + 1));
        }
    __m512i t = _mm512_setzero_si512();
    for (int s = 0; s < 8; s++) t = _mm512_xor_si512(t, a[s]);
    return (double)_mm512_reduce_add_epi64(t);
}

/* ---- bf16 activations (AVX512_BF16) ------------------------------------------------------- */

/* A BF16 view by x already rounded to bf16 (kernels.h): per output sixteen lane accumulators, one
 * vdpbf16ps per step of 32 elements (lane i takes the pair 2i, 2i + 1 of the step), a masked step
 * for cols % 32 (missing pairs are exact zeros), then hsum16 (or hsum4x4, the same bits). The weights
 * go to the multiplier as loaded, so a tile of 4 rows x 5 tokens costs 4 loads + 5 loads + 20
 * instructions per 32 elements where the f32 path needs 8 loads, 8 widenings + 5 loads + 40 FMAs:
 * the verify of K rows and a batch stay near the cost of one row's weight stream. Tiles and row
 * spreading as the f32 path's; T > BXT in passes of NTM over each row tile (later passes from L1). */
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512vnni,avx512bf16")

#define BXT 5 /* tokens in one pass */
AI __m512 dpbf(__m512 a, __m512i w, __m512i x) { return _mm512_dpbf16_ps(a, (__m512bh)w, (__m512bh)x); }

AI void bxtile(const uint16_t *w, size_t ldw_, int K, const uint16_t *x, size_t ldx, float *y, size_t ldy, int r,
               const int NR, const int NT, int rs)
{
    __m512 a[NRM][BXT];
#pragma GCC unroll 4
    for (int i = 0; i < NR; i++)
#pragma GCC unroll 5
        for (int j = 0; j < NT; j++) a[i][j] = _mm512_setzero_ps();
    int kf = K & ~31;
    const int burst = (size_t)K * 2 <= 1024;
    if (burst)
        for (int i = 0; i < NR; i++)
            for (size_t b = 0; b < (size_t)K * 2; b += 64) pf_ahead((const uint8_t *)(w + (size_t)i * ldw_) + b);
    for (int k = 0; k < kf; k += 32) {
        __m512i wv[NRM];
#pragma GCC unroll 4
        for (int i = 0; i < NR; i++) {
            if (!burst) pf_ahead((const uint8_t *)(w + (size_t)i * ldw_ + k));
            wv[i] = _mm512_loadu_si512(w + (size_t)i * ldw_ + k);
        }
#pragma GCC unroll 5
        for (int j = 0; j < NT; j++) {
            __m512i xv = _mm512_loadu_si512(x + (size_t)j * ldx + k);
#pragma GCC unroll 4
            for (int i = 0; i < NR; i++) a[i][j] = dpbf(a[i][j], wv[i], xv);
        }
    }
    if (kf < K) {
        __mmask32 m = (__mmask32)((1ull << (K - kf)) - 1);
        __m512i wv[NRM];
#pragma GCC unroll 4
        for (int i = 0; i < NR; i++) wv[i] = _mm512_maskz_loadu_epi16(m, w + (size_t)i * ldw_ + kf);
#pragma GCC unroll 5
        for (int j = 0; j < NT; j++) {
            __m512i xv = _mm512_maskz_loadu_epi16(m, x + (size_t)j * ldx + kf);
#pragma GCC unroll 4
            for (int i = 0; i < NR; i++) a[i][j] = dpbf(a[i][j], wv[i], xv);
        }
    }
    int j0 = 0;
    if (NR == NRM && NT >= 3) { /* tokens 0 .. min(NT, 4) - 1 by hsum4x4 (hsum16's bits) */
        __m512 v[16];
#pragma GCC unroll 4
        for (int i = 0; i < NRM; i++)
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) v[i * 4 + j] = j < NT ? a[i][j] : _mm512_setzero_ps();
        j0 = store4x4(v, NT, y, ldy, r, rs);
    }
#pragma GCC unroll 4
    for (int i = 0; i < NR; i++)
#pragma GCC unroll 5
        for (int j = j0; j < NT; j++) y[(size_t)j * ldy + r + i * rs] = hsum16(a[i][j]);
}

/* T <= BXT: one tile width per call, rows spread as the f32 path's */
AI void bx_t(const ink_mat *W, const uint16_t *x, size_t ldx, float *y, size_t ldy, int r0, int r1, const int NT)
{
    const uint16_t *base = (const uint16_t *)W->data;
    size_t ldw_ = W->stride;
    int K = W->cols;
#define BX_FULL(o, q) bxtile(base + (size_t)(o) * ldw_, ldw_ * (size_t)(q), K, x, ldx, y, ldy, o, NRM, NT, q)
#define BX_ONE(o) bxtile(base + (size_t)(o) * ldw_, ldw_, K, x, ldx, y, ldy, o, 1, NT, 1)
    SPREAD_TILES(r0, r1, NT, BX_FULL, BX_ONE)
#undef BX_FULL
#undef BX_ONE
}

/* T > BXT: per row tile, passes of NTM tokens, then the rest */
AI void bx_wide(const ink_mat *W, const uint16_t *x, size_t ldx, float *y, size_t ldy, int r0, int T, const int NR,
                int rs)
{
    size_t ldw_ = W->stride * (size_t)rs;
    const uint16_t *w = (const uint16_t *)W->data + (size_t)r0 * W->stride;
    int K = W->cols, t = 0;
    for (; t + NTM <= T; t += NTM)
        bxtile(w, ldw_, K, x + (size_t)t * ldx, ldx, y + (size_t)t * ldy, ldy, r0, NR, NTM, rs);
    switch (T - t) {
    case 1: bxtile(w, ldw_, K, x + (size_t)t * ldx, ldx, y + (size_t)t * ldy, ldy, r0, NR, 1, rs); break;
    case 2: bxtile(w, ldw_, K, x + (size_t)t * ldx, ldx, y + (size_t)t * ldy, ldy, r0, NR, 2, rs); break;
    case 3: bxtile(w, ldw_, K, x + (size_t)t * ldx, ldx, y + (size_t)t * ldy, ldy, r0, NR, 3, rs); break;
    default: break;
    }
}

#define BX_FN(N)                                                                                                  \
    static __attribute__((noinline)) void bx_##N(const ink_mat *W, const uint16_t *x, size_t ldx, float *y,      \
                                                 size_t ldy, int r0, int r1)                                      \
    {                                                                                                             \
        bx_t(W, x, ldx, y, ldy, r0, r1, N);                                                                       \
    }
BX_FN(1)
BX_FN(2)
BX_FN(3)
BX_FN(4)
BX_FN(5)
#undef BX_FN

static __attribute__((noinline)) void bx_w(const ink_mat *W, const uint16_t *x, size_t ldx, float *y, size_t ldy,
                                           int r0, int r1, int T)
{
#define BW_FULL(o, q) bx_wide(W, x, ldx, y, ldy, o, T, NRM, q)
#define BW_ONE(o) bx_wide(W, x, ldx, y, ldy, o, T, 1, 1)
    SPREAD_TILES(r0, r1, T, BW_FULL, BW_ONE)
#undef BW_FULL
#undef BW_ONE
}

static void avx512_rows_bf16x(const ink_mat *W, const uint16_t *xb, int ldxb, int T, float *y, int ldy, int r0,
                              int r1)
{
    switch (T) {
    case 0: return;
    case 1: bx_1(W, xb, (size_t)ldxb, y, (size_t)ldy, r0, r1); break;
    case 2: bx_2(W, xb, (size_t)ldxb, y, (size_t)ldy, r0, r1); break;
    case 3: bx_3(W, xb, (size_t)ldxb, y, (size_t)ldy, r0, r1); break;
    case 4: bx_4(W, xb, (size_t)ldxb, y, (size_t)ldy, r0, r1); break;
    case 5: bx_5(W, xb, (size_t)ldxb, y, (size_t)ldy, r0, r1); break;
    default: bx_w(W, xb, (size_t)ldxb, y, (size_t)ldy, r0, r1, T); break;
    }
}

/* vcvtne2ps2bf16: round to nearest even, denormal inputs as (signed) zero, NaN quieted: the bits of
 * ink_bf16x_round (test_kernels checks them on specials and random values). */
static void avx512_bf16x_fill(uint16_t *dst, const float *x, int n)
{
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
        _mm512_storeu_si512(dst + i, (__m512i)h);
    }
    if (i < n) {
        int r = n - i;
        __mmask16 m0 = (__mmask16)(r >= 16 ? 0xffff : (1u << r) - 1);
        __mmask16 m1 = (__mmask16)(r > 16 ? (1u << (r - 16)) - 1 : 0);
        __m512bh h = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, x + i + 16), _mm512_maskz_loadu_ps(m0, x + i));
        _mm512_mask_storeu_epi16(dst + i, (__mmask32)((1ull << r) - 1), (__m512i)h);
    }
}

#pragma GCC pop_options

static int avx512_bf16x_ok(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16");
}

/* The AVX2 FMA probe also measures an AVX-512 machine: on the CPUs here two 256-bit FMA pipes give
 * the same f32 peak as 512-bit FMAs. */
static const ink_kernels avx512_set = {"avx512",       avx512_rows,       avx512_attn,      avx512_read,
                                       ink_avx2_fma,   avx512_rows_bf16x, avx512_bf16x_ok, avx512_bf16x_fill,
                                       ink_avx512_expv, NULL,              NULL,            avx512_silu_mul,
                                       avx512_sconv_rows};

const ink_kernels *ink_kernels_avx512_raw(void) { return &avx512_set; }

#endif
