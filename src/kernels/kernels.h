/*
 * kernels.h — compute kernels on f32 activations and weight views (f32, bf16, f16, MLX affine
 * 2/3/4/5/6/8-bit, NVFP4). No model knowledge, no allocation, no threads of their own: matmuls split
 * output rows over the model's pool.
 *
 * Exactness contract. Every output element y[t][o] is computed by the same sequence of float
 * operations whatever the number of rows T in the call, the thread count and the tile it lands in:
 * eight lane accumulators walk the reduction axis in steps of 8 (quantized: group by group), are
 * combined as ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7)), then the cols % 8 tail is added in order. Tiling
 * over rows, tokens and (for prefill) the reduction axis only reorders independent elements or
 * stores / reloads the lane accumulators, which is exact. So a verify of K rows gives per row the
 * bits a decode of that row alone gives, and results do not depend on the thread count.
 *
 * Kernel sets ("tables"): a portable scalar set (the reference twin) and, where compiled and the
 * CPU has it, AVX2+FMA+F16C and AVX-512 (F/BW/VL/DQ/VBMI/VNNI; x86-64; a NEON slot exists, no set
 * yet). The best available set is chosen once at first use (runtime CPU detection: avx512, then
 * avx2, then scalar); ink_kernels_select overrides it process-wide (tests, bench).
 * Sets agree within float rounding (FMA vs separate multiply-add), not bitwise; within one set the
 * contract above holds, with the set's own lane count: the AVX-512 set uses sixteen lanes in steps
 * of 16 (kern_avx512.c), the others the eight described above.
 *
 * Integer activations: a quantized view with `int8` set (the loader sets it from the model's
 * ink_model_opts.activations; there is no process-wide switch) has each activation row quantized to
 * int8 per block of 32 (symmetric, scale max|x|/127, the same code in every set: ink_qx_fill) and
 * its dot products taken in integer: MLX affine of every width (codes 0 .. 2^b - 1 as unsigned
 * bytes; 8-bit as code - 128 where a set needs signed bytes) and NVFP4 (2 * e2m1 is an integer in
 * -12 .. 12; the block scale is halved). Every 4-element integer partial sum is exact, so the sets
 * agree bitwise in the integer part and differ only in the float combination of those partial sums
 * (block scale d, group scale s, lane order). The activation error is ~1e-3 relative; the f32 path
 * (int8 = 0) matches a dequantized-f32 twin to 1e-6.
 *
 * bf16 weights on f32 activations in the AVX2 set: lanes over pairs of k instead (lane j takes
 * k + 2j then k + 2j + 1 in each block of 16, x reordered once per call: kernels.c matmul_pairs),
 * combined as above, then the cols % 16 tail in order: the same for every T, tile and thread count.
 *
 * bf16 activations: a BF16 view with `bf16x` set (the loader sets it from ink_model_opts.activations
 * = bf16) takes x rounded to bf16 (round to nearest even, f32 denormals to zero: ink_bf16x_round,
 * once per matmul call, shared by the threads), so every product of a bf16 weight and a bf16
 * activation is exact in f32 and only the accumulation is the set's own: the AVX-512 set on a CPU
 * with AVX512_BF16 takes 32 products per vdpbf16ps (lanes over pairs of k, steps of 32, a masked
 * step for cols % 32, hsum16), the other sets run their f32 path on the rounded x. Per row the
 * operation sequence does not depend on T, the tile or the thread count, as above. The activation
 * error is ~2e-3 relative per element (8 significant bits); the point is a verify of K rows or a
 * batch that costs about one row where the f32 path is compute-bound (docs/benchmarks.md).
 */
#ifndef INK_KERNELS_H
#define INK_KERNELS_H

#include "base/dtype.h"
#include "base/pool.h"

#include <stddef.h>
#include <math.h>
#include <stdint.h>

/* Quantized view formats. ink_mat.dtype holds either an ink_dtype (a float view: F32, BF16, F16) or
 * one of these, numbered on from INK_DT_COUNT so the two sets never share a code; a view is quantized
 * exactly when dtype >= INK_QT_FIRST. */
enum ink_qtype { INK_QT_FIRST = INK_DT_COUNT, INK_QT_AFFINE = INK_QT_FIRST, INK_QT_NVFP4 };

/* A 2-D weight view [rows, cols]. Never owns its pointers.
 *   float views: `stride` elements between consecutive rows (an interleaved gate/up tensor is two
 *   views with stride 2*cols).
 *   INK_QT_AFFINE: data = packed codes (formats.md §4.3), `stride` bytes between rows; `scales` and
 *   `biases` of dtype `sdtype` (F32/BF16/F16), `sstride` elements between rows, one per `group`
 *   input elements; w = scale * q + bias.
 *   INK_QT_NVFP4: data = E2M1 nibble pairs (low nibble first), `stride` bytes between rows; `scales`
 *   F8_E4M3 per 16 inputs (`sstride` elements between rows); w = e2m1 * e4m3 * gscale. */
typedef struct ink_mat {
    int dtype;          /* INK_DT_F32, INK_DT_BF16, INK_DT_F16, INK_QT_AFFINE or INK_QT_NVFP4 */
    int rows, cols;
    size_t stride;      /* between consecutive rows: elements (float views) or bytes (quantized) */
    const void *data;
    int bits, group;    /* quantized: code width and group size */
    int sdtype;         /* quantized: dtype of scales (and biases) */
    size_t sstride;     /* quantized: scale elements between rows */
    const void *scales, *biases;
    float gscale;       /* NVFP4 per-matrix (per-expert) scale2; 1 otherwise */
    int int8;           /* quantized: 1 = int8 activations (see above), 0 = f32; ignored for float views */
    int bf16x;          /* BF16 views: 1 = bf16 activations (see below), 0 = f32; ignored otherwise */
} ink_mat;

/* Bytes of one element of a float view or scale array of dtype dt (F32 4, F8_E4M3 / U8 1, else 2). */
size_t ink_dt_size(int dt);
/* Bytes of weight data a full pass over W reads (codes + scales + biases). */
size_t ink_mat_bytes(const ink_mat *W);

/* Attention over one tile: nq query rows that read the same K/V head (inkling-text.md §3.5).
 * Query i attends to keys at absolute positions lo[i] .. hi[i] (inclusive; hi[i] is its own
 * position); the key / value of position j is the d floats at k / v + (j % cap) * ld. Its scores are
 *   s_j = dot(tau[i] * q[i], k_j) / (float)d + (delta < R ? tau[i] * lrel[delta] : 0),
 *   delta = hi[i] - j, lrel[e] = sum_r rs[i][r] * rel[r * R + e] (r = 0 .. dr-1 in order),
 * and o[i] = softmax(s) . V. `ws` is scratch of at least ink_attn_ws_floats(d, R, hi - lo + 1 over
 * the tile) floats (any alignment).
 *
 * Exactness: each output element is computed by a sequence of float operations that depends only
 * on its own query (q, rs, tau, lo, hi), the keys / values it attends to and the set, never on the
 * other queries of the tile, nq or how the caller split the work: the dot product runs over d in
 * order (one chain), the max is exact, the exponentials are elementwise, the sum of weights runs in
 * lanes over j - lo[i] and is combined in a fixed order, and P.V accumulates keys in ascending
 * position (an FMA chain per element in the SIMD sets). Each K row is read once per tile and used by
 * every query of the tile (a key block transposed once, then register-blocked over queries); each V
 * row chunk is loaded once per group of queries (6 for AVX-512, 2 for AVX2) and used by all of the
 * group that see it. Keys outside a query's window never enter its max, sum or P.V. Sets differ by
 * rounding only; the AVX-512 set takes d % 16 == 0 (else the AVX2 path), AVX2 d % 8 == 0 (else the
 * scalar one). */
#define INK_ATTN_MAXQ 32 /* queries per tile */

typedef struct ink_attn {
    int nq, d;                          /* queries (1 .. INK_ATTN_MAXQ), head dim */
    const float *q[INK_ATTN_MAXQ];      /* [d] each */
    const float *rs[INK_ATTN_MAXQ];     /* [dr] relative-logit coefficients (unused when dr == 0) */
    float *o[INK_ATTN_MAXQ];            /* [d] each: output */
    float tau[INK_ATTN_MAXQ];           /* logit temperature (1 when not log-scaled) */
    int lo[INK_ATTN_MAXQ], hi[INK_ATTN_MAXQ];
    const float *k, *v;                 /* position j at k / v + (j % cap) * ld */
    size_t ld;
    int cap;
    const float *rel;                   /* [dr][R] relative-position bank (NULL when dr == 0) */
    int dr, R;
    float *ws;                          /* scratch (see ink_attn_ws_floats) */
} ink_attn;

/* Scratch floats one tile needs: head dim d, relative extent R, up to n_keys keys in the union of
 * the tile's windows. */
size_t ink_attn_ws_floats(int d, int R, int n_keys);

/* A kernel set. rows() computes y[t][o] for t < T, r0 <= o < r1 on the calling thread; attn() one
 * attention tile on the calling thread. probe_read / probe_fma are the set's inner loops for the
 * machine probes of `inkling bench` (src/cli/cmd_bench.c times them): a checksum of `streams`
 * (1..8) interleaved sequential streams over buf[0..bytes) in the set's widest loads (the bench keeps
 * the best stream count: how many streams a core's prefetchers follow best differs between
 * machines), and 10 chains x 8 lanes x iters f32 FMAs; NULL where the set has none (the bench then
 * runs portable loops). */
typedef struct ink_kernels {
    const char *name; /* "scalar", "avx2", "avx512", "neon" */
    void (*rows)(const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy, int r0, int r1, int int8);
    void (*attn)(const ink_attn *a);
    double (*probe_read)(const void *buf, size_t bytes, int streams);
    double (*probe_fma)(long iters);
    /* bf16 activations on a BF16 view, x already rounded (xb[t * ldxb + k]); NULL where the set
     * runs its f32 path on the rounded x instead. Called only when the CPU has what it needs. */
    void (*rows_bf16x)(const ink_mat *W, const uint16_t *xb, int ldxb, int T, float *y, int ldy, int r0, int r1);
    int (*bf16x_ok)(void); /* does this CPU run rows_bf16x (NULL: no) */
    void (*bf16x_fill)(uint16_t *dst, const float *x, int n); /* ink_bf16x_round's bits, faster (or NULL) */
    void (*expv)(const float *x, float *y, int n); /* y = ink_exp_poly(x) in lanes (NULL: the scalar loop) */
    /* BF16 views on f32 activations in lane pairs (NULL: the set's rows take them): x reordered by
     * pairs_fill per block of 16 (evens, then odds; the cols % 16 tail as is), once per call. */
    void (*rows_pairs)(const ink_mat *W, const float *xp, int ldxp, int T, float *y, int ldy, int r0, int r1);
    void (*pairs_fill)(float *dst, const float *x, int n);
    /* ink_silu_mul in lanes for step 1 and for step 2 with u == g + 1 (the fused gate/up); 0 when it
     * did not take the call (the caller runs the portable loop). Same operations per element. */
    int (*silu_mul)(float *o, const float *g, const float *u, int n, int step);
    /* ink_sconv's arithmetic in lanes over channels: y[t][c] = ext[t + K - 1][c] + sum_k w[c][k]
     * ext[t + k][c], the sum from 0 in k order, products and sums as the portable loop; 0 when it
     * did not take the call (K > 8). */
    int (*sconv_rows)(const float *w, const float *ext, float *y, int T, int C, int K);
} ink_kernels;

/* bf16 activations apply to W: BF16 view, bf16x set, cols <= INK_BX_MAXK. */
#define INK_BX_MAXK 32768
int ink_mat_bf16x(const ink_mat *W);
/* x[0..n) rounded to bf16 (nearest even; f32 denormals to zero, as vcvtneps2bf16; NaN stays NaN). */
void ink_bf16x_round(uint16_t *dst, const float *x, int n);

const ink_kernels *ink_kernels_scalar(void);
const ink_kernels *ink_kernels_avx2(void);  /* NULL when not compiled in or the CPU lacks AVX2/FMA/F16C */
/* NULL when not compiled in or the CPU lacks AVX-512 F/BW/VL/DQ/VBMI/VNNI (or AVX2/FMA/F16C) */
const ink_kernels *ink_kernels_avx512(void);
const ink_kernels *ink_kernels_neon(void);  /* NULL when not compiled in (no NEON set yet) */
const ink_kernels *ink_kernels_active(void);
void ink_kernels_select(const ink_kernels *k); /* NULL: back to the best available */

/* y[t, o] = sum_i W[o, i] * x[t, i] for t < T, o < W->rows. x rows are ldx apart, y rows ldy.
 * Int8 activations when W->int8 and the int8 path takes W (ink_mat_int8). */
void ink_matmul(ink_pool *p, const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy);
/* Several matmuls in one pool dispatch over all their rows (the small projections of a layer, the
 * experts of a MoE layer: each alone is one chunk on one thread). Job i: y = W x for T rows (x rows
 * ldx apart, y rows ldy); with o set, W is a row-interleaved gate/up view (rows 2i gate, 2i + 1 up,
 * rows even) and o[t * ldo + i] receives the SwiGLU activation ink_silu_mul of (y[t][2i],
 * y[t][2i + 1]), each chunk's row pairs right after its rows on the thread that computed them (y
 * and o must not overlap). Per row bitwise ink_matmul (then ink_silu_mul). BF16 views the set takes
 * in lane pairs get their x reordered once (shared by jobs on the same x) when all of it fits the
 * caller-stack buffer; otherwise, and with bf16 activations, the jobs run one after another. At
 * most INK_MM_JOBS jobs. */
#define INK_MM_JOBS 16
typedef struct ink_mm_job {
    const ink_mat *W;
    const float *x;
    int ldx, T;
    float *y;
    int ldy;
    float *o; /* NULL: a plain matmul */
    int ldo;
} ink_mm_job;
void ink_matmul_jobs(ink_pool *p, int n, const ink_mm_job *jobs);
void ink_matmul_jobs_k(const ink_kernels *k, ink_pool *p, int n, const ink_mm_job *jobs);
/* One gate/up job with its activation (as above). */
void ink_matmul_swiglu(ink_pool *p, const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy, float *o,
                       int ldo);
/* The same with an explicit kernel set (tests and bench). */
void ink_matmul_k(const ink_kernels *k, ink_pool *p, const ink_mat *W, const float *x, int ldx, int T, float *y,
                  int ldy);
/* 1 when a matmul with W runs on int8 activations (W->int8, quantized, cols a multiple of 32 and at
 * most 16384), 0 when on f32 activations. */
int ink_mat_int8(const ink_mat *W);
/* A sub-range of output rows [r0, r1) on the calling thread with the scalar reference set (f32
 * activations whatever W->int8 says). */
void ink_matmul_rows(const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy, int r0, int r1);
/* Row `r` of W dequantized / widened to f32 (exact: the value the format defines). */
void ink_mat_row(const ink_mat *W, int r, float *out);

/* Format helpers shared by kernels, loaders and tests. */
float ink_e2m1_to_f32(unsigned code);                            /* 4-bit E2M1 */
unsigned ink_affine_code(const uint8_t *row, int j, int bits);  /* element j of a packed row */
float ink_scale_at(const void *p, int dtype, size_t i);          /* F32/BF16/F16/F8_E4M3 element */


/* y = w * x / sqrt(mean(x^2) + eps) over n elements (w may be NULL: no weight). y may alias x. */
void ink_rmsnorm(float *y, const float *x, const float *w, int n, float eps);
/* ink_rmsnorm of `rows` consecutive rows of n (y may alias x): the same operations per row, several
 * rows' sums interleaved (each row's sum is one chain in element order, so a row's bits do not
 * depend on the other rows or on how many there are). */
void ink_rmsnorm_rows(float *y, const float *x, const float *w, int rows, int n, float eps);

/* Causal depthwise short convolution with identity residual (inkling-text.md §3.3).
 * w: [C][K]; state: [K-1][C] (raw inputs, oldest first), updated; u: [T][C] input, y: [T][C]
 * output (y may alias u); ext: scratch of (K-1+T)*C floats. */
void ink_sconv(const float *w, float *state, const float *u, float *y, int T, int C, int K, float *ext);

/* exp(x) for x <= 88 by the attention kernels' polynomial (Cody-Waite reduction, degree-6
 * polynomial; within 2 ulp of expf, 0 below -87.33 where expf is subnormal). Every set evaluates the
 * same polynomial (the SIMD sets with FMA), so sets differ by rounding only. */
float ink_exp_poly(float x);

/* The gated activation of a SwiGLU row: o[i] = silu(g[i * step]) * u[i * step] for i < n, step 1
 * or 2 (the row-interleaved fused gate/up), silu(z) = z / (1 + exp(-z)) with exp by the active
 * set's polynomial above (16 or 8 lanes, or scalar; 2 ulp of expf, exp(-z) for z < -88 taken at 88,
 * so a very negative z gives a tiny negative instead of -0). o may alias g or u at or before the
 * element read (the in-place layouts of the MLP scratch: o + i <= g + i * step). Per element, so
 * a row's values never depend on the other rows. */
void ink_silu_mul(float *o, const float *g, const float *u, int n, int step);

static inline float ink_sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }
float ink_logsigmoid(float z);

#endif
