/* test_kernels.c — every kernel set against the scalar reference twin on odd shapes, token counts
 * 1..20 and thread counts 1..3; per-row results independent of the number of rows and of the thread
 * count (bitwise, within one set); the packing vectors of formats.md §4.3; NVFP4 / E2M1 values; the
 * attention tile kernel of every set against a double reference and per query bitwise the same in any
 * tile; the exp polynomial against expf. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "kernels/kern_impl.h"
#include "load/safetensors.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 88172645463325252ull;
static float frand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* A random matrix of the given kind; buffers in `keep` (freed by the caller). */
typedef struct tmat {
    ink_mat m;
    void *d, *s, *b;
} tmat;

static void put_bits(uint8_t *row, int j, int bits, unsigned v)
{
    for (int k = 0; k < bits; k++) {
        size_t bit = (size_t)j * bits + k;
        if (v >> k & 1) row[bit / 8] |= (uint8_t)(1u << (bit % 8));
    }
}

static tmat make(int kind, int bits, int gs, int rows, int cols)
{
    tmat t;
    memset(&t, 0, sizeof t);
    t.m.rows = rows, t.m.cols = cols, t.m.gscale = 1.0f;
    size_t n = (size_t)rows * cols;
    if (kind == INK_DT_F32 || kind == INK_DT_BF16 || kind == INK_DT_F16) {
        t.m.dtype = kind, t.m.stride = (size_t)cols;
        if (kind == INK_DT_F32) {
            float *f = malloc(n * 4);
            for (size_t i = 0; i < n; i++) f[i] = frand();
            t.d = f;
        } else {
            uint16_t *h = malloc(n * 2);
            for (size_t i = 0; i < n; i++) h[i] = kind == INK_DT_BF16 ? ink_f32_to_bf16(frand()) : ink_f32_to_f16(frand());
            t.d = h;
        }
    } else if (kind == INK_QT_AFFINE) {
        size_t rowb = (size_t)cols * bits / 8, G = (size_t)cols / gs;
        uint8_t *d = calloc((size_t)rows * rowb + 8, 1);
        uint16_t *s = malloc((size_t)rows * G * 2), *b = malloc((size_t)rows * G * 2);
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < cols; j++) put_bits(d + r * rowb, j, bits, (unsigned)(rng = rng * 6364136223846793005ull + 1) >> 7 & ((1u << bits) - 1));
        for (size_t i = 0; i < (size_t)rows * G; i++) s[i] = ink_f32_to_bf16(0.05f * frand()), b[i] = ink_f32_to_bf16(0.2f * frand());
        t.d = d, t.s = s, t.b = b;
        t.m = (ink_mat){.dtype = INK_QT_AFFINE, .rows = rows, .cols = cols, .stride = rowb, .data = d, .bits = bits,
                        .group = gs, .sdtype = INK_DT_BF16, .sstride = G, .scales = s, .biases = b, .gscale = 1.0f};
        return t;
    } else { /* NVFP4 */
        uint8_t *d = malloc(n / 2), *s = malloc(n / 16);
        for (size_t i = 0; i < n / 2; i++) d[i] = (uint8_t)(rng = rng * 6364136223846793005ull + 1) >> 3;
        for (size_t i = 0; i < n / 16; i++) s[i] = i % 11 == 5 ? (uint8_t)(1 + i % 7) : (uint8_t)(0x20 + (i * 7) % 0x30); /* some subnormal */
        /* and every other finite e4m3 code somewhere (negative, zero, up to 448): the sets convert
         * scales in vector lanes by bit assembly */
        for (size_t i = 3; i < n / 16; i += 5) {
            uint8_t c = (uint8_t)((i / 5) * 37 % 256);
            if ((c & 0x7f) != 0x7f) s[i] = c;
        }
        t.d = d, t.s = s;
        t.m = (ink_mat){.dtype = INK_QT_NVFP4, .rows = rows, .cols = cols, .stride = (size_t)cols / 2, .data = d,
                        .bits = 4, .group = 16, .sdtype = INK_DT_F8_E4M3, .sstride = (size_t)cols / 16, .scales = s,
                        .gscale = 0.37f};
        return t;
    }
    t.m.data = t.d;
    return t;
}

static void drop(tmat *t) { free(t->d), free(t->s), free(t->b); }

/* sum |w| |x| per output: the scale of the rounding bound */
static void absdot(const ink_mat *W, const float *x, int T, float *out)
{
    float *row = malloc((size_t)W->cols * 4);
    for (int o = 0; o < W->rows; o++) {
        ink_mat_row(W, o, row);
        for (int t = 0; t < T; t++) {
            double s = 0;
            for (int i = 0; i < W->cols; i++) s += fabs((double)row[i] * x[(size_t)t * W->cols + i]);
            out[(size_t)t * W->rows + o] = (float)s;
        }
    }
    free(row);
}

/* The int8 path's exact value in double: activations quantized by ink_qx_fill (d, q), integer
 * (code - z) . q partial sums (z = 128 for 8-bit, else 0), scales per group, the bias term
 * (b + z s) on the real sum(x). Every set must give it up to float rounding of the combination (the
 * integer parts are exact). */
static void int8_ref(const ink_mat *W, const float *x, int T, double *out, double *mag)
{
    static ink_qx qx;
    int K = W->cols;
    float *row = malloc((size_t)K * 4);
    for (int t = 0; t < T; t++) {
        ink_qx_fill(&qx, x + (size_t)t * K, K, 1, K);
        for (int o = 0; o < W->rows; o++) {
            ink_mat_row(W, o, row); /* w = s * code + b (affine) or e2m1 * e4m3 * gscale (NVFP4) */
            double s = 0, m = 0;
            for (int i = 0; i < K; i++) {
                double xq = (double)qx.d[0][i / 32] * qx.q[0][i];
                s += (double)row[i] * xq, m += fabs((double)row[i] * xq);
            }
            if (W->dtype == INK_QT_AFFINE)
                for (int g = 0; g < K / W->group; g++) {
                    size_t gi = (size_t)o * W->sstride + (size_t)g;
                    double b = ink_scale_at(W->biases, W->sdtype, gi), xs = 0, xqs = 0;
                    if (W->bits == 8) b += 128.0 * ink_scale_at(W->scales, W->sdtype, gi);
                    for (int i = g * W->group; i < (g + 1) * W->group; i++)
                        xs += x[(size_t)t * K + i], xqs += (double)qx.d[0][i / 32] * qx.q[0][i];
                    s += b * (xs - xqs), m += fabs(b * xs) + fabs(b * xqs);
                }
            out[(size_t)t * W->rows + o] = s, mag[(size_t)t * W->rows + o] = m;
        }
    }
    free(row);
}

static void check_kind(int kind, int bits, int gs, int rows, int cols, int int8)
{
    tmat t = make(kind, bits, gs, rows, cols);
    t.m.int8 = int8;
    const int T = 20;
    float *x = malloc((size_t)T * cols * 4), *ref = malloc((size_t)T * rows * 4), *y = malloc((size_t)T * rows * 4);
    float *one = malloc((size_t)rows * 4), *mag = malloc((size_t)T * rows * 4);
    float *ya = malloc((size_t)T * rows * 4), *yb = malloc((size_t)T * rows * 4), *yc = malloc((size_t)T * rows * 4);
    float *one2 = malloc((size_t)T * rows * 4);
    for (int i = 0; i < T * cols; i++) x[i] = frand();
    absdot(&t.m, x, T, mag);
    /* double-precision dequantized reference */
    float *row = malloc((size_t)cols * 4);
    for (int o = 0; o < rows; o++) {
        ink_mat_row(&t.m, o, row);
        for (int tt = 0; tt < T; tt++) {
            double s = 0;
            for (int i = 0; i < cols; i++) s += (double)row[i] * x[(size_t)tt * cols + i];
            ref[(size_t)tt * rows + o] = (float)s;
        }
    }
    free(row);
    const ink_kernels *sets[4] = {ink_kernels_scalar(), ink_kernels_avx2(), ink_kernels_avx512(), ink_kernels_neon()};
    float bound = int8 ? 2e-2f : 2e-5f; /* relative to sum |w||x| */
    double *qref = NULL, *qmag = NULL;
    if (int8) {
        assert_true(ink_mat_int8(&t.m));
        qref = malloc((size_t)T * rows * sizeof *qref), qmag = malloc((size_t)T * rows * sizeof *qmag);
        int8_ref(&t.m, x, T, qref, qmag);
    }
    for (int si = 0; si < 4; si++) {
        if (!sets[si]) continue;
        for (int nth = 1; nth <= 3; nth++) {
            ink_pool *p = ink_pool_create(nth);
            for (int TT = 1; TT <= T; TT += (TT < 10 ? 1 : 5)) {
                ink_matmul_k(sets[si], p, &t.m, x, cols, TT, y, rows);
                for (int i = 0; i < TT * rows; i++) {
                    float e = fabsf(y[i] - ref[i]), lim = bound * (mag[i] + 1e-3f);
                    if (!(e <= lim))
                        fail_msg("%s kind %d bits %d gs %d %dx%d T %d thr %d int8 %d: y[%d] %g ref %g", sets[si]->name,
                                 kind, bits, gs, rows, cols, TT, nth, int8, i, y[i], ref[i]);
                    if (int8 && !(fabs(y[i] - qref[i]) <= 2e-6 * (qmag[i] + 1e-3)))
                        fail_msg("%s kind %d bits %d gs %d %dx%d T %d thr %d: int8 y[%d] %.9g, exact int8 value %.9g",
                                 sets[si]->name, kind, bits, gs, rows, cols, TT, nth, i, y[i], qref[i]);
                }
                /* several jobs in one dispatch (ink_matmul_jobs): each job's bits are ink_matmul's;
                 * the view, one row shorter (a partial last quad), then the view on other tokens */
                {
                    ink_mat sub = t.m;
                    sub.rows = rows > 1 ? rows - 1 : rows;
                    int T2 = TT > 1 ? TT - 1 : 1;
                    const ink_mm_job jobs[3] = {{&t.m, x, cols, TT, ya, rows, NULL, 0},
                                                {&sub, x, cols, TT, yb, sub.rows, NULL, 0},
                                                {&t.m, x + cols, cols, T2, yc, rows, NULL, 0}};
                    ink_matmul_jobs_k(sets[si], p, 3, jobs);
                    ink_matmul_k(sets[si], p, &t.m, x + cols, cols, T2, one2, rows);
                    for (int tt = 0; tt < TT; tt++)
                        if (memcmp(ya + (size_t)tt * rows, y + (size_t)tt * rows, (size_t)rows * 4) ||
                            memcmp(yb + (size_t)tt * sub.rows, y + (size_t)tt * rows, (size_t)sub.rows * 4) ||
                            (tt < T2 && memcmp(yc + (size_t)tt * rows, one2 + (size_t)tt * rows, (size_t)rows * 4)))
                            fail_msg("%s kind %d bits %d T %d thr %d: ink_matmul_jobs row %d differs from ink_matmul",
                                     sets[si]->name, kind, bits, TT, nth, tt);
                }
                /* row independence: each token alone gives the same bits */
                for (int tt = 0; tt < TT; tt++) {
                    ink_matmul_k(sets[si], p, &t.m, x + (size_t)tt * cols, cols, 1, one, rows);
                    if (memcmp(one, y + (size_t)tt * rows, (size_t)rows * 4))
                        fail_msg("%s kind %d bits %d: row %d of T=%d differs from T=1", sets[si]->name, kind, bits, tt, TT);
                }
            }
            ink_pool_free(p);
        }
    }
    drop(&t);
    free(x), free(ref), free(y), free(one), free(mag), free(qref), free(qmag), free(ya), free(yb), free(yc), free(one2);
}

static void test_float_sets(void **state)
{
    (void)state;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi"))
        assert_non_null(ink_kernels_avx512()); /* the set is compiled in and selected where the CPU has it */
#endif
    int shapes[][2] = {{1, 1}, {7, 13}, {33, 67}, {130, 256}, {9, 1031}, {64, 4100}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int k = 0; k < 3; k++) check_kind(k == 0 ? INK_DT_F32 : k == 1 ? INK_DT_BF16 : INK_DT_F16, 0, 0, shapes[i][0], shapes[i][1], 0);
}

static void test_affine_sets(void **state)
{
    (void)state;
    int bits[] = {2, 3, 4, 5, 6, 8}, gss[] = {32, 64, 128};
    for (int b = 0; b < 6; b++)
        for (int g = 0; g < 3; g++) check_kind(INK_QT_AFFINE, bits[b], gss[g], 37, 2 * gss[g] + (g == 2 ? 1024 : 0) , 0);
    check_kind(INK_QT_AFFINE, 4, 64, 259, 4096, 0);
}

static void test_int8_path(void **state)
{
    (void)state;
    check_kind(INK_QT_AFFINE, 4, 64, 37, 512, 1);
    check_kind(INK_QT_AFFINE, 8, 32, 21, 256, 1);
    check_kind(INK_QT_AFFINE, 4, 128, 130, 1024, 1);
    check_kind(INK_QT_AFFINE, 8, 32, 11, 96, 1);  /* cols % 64 == 32: a half step at the end */
    check_kind(INK_QT_AFFINE, 4, 32, 13, 160, 1);
    check_kind(INK_QT_AFFINE, 4, 64, 9, 576, 1);  /* AVX-512 nibble layout: four 128-chunks, then a 64 step */
    check_kind(INK_QT_AFFINE, 4, 32, 5, 544, 1);  /* four 128-chunks and a 32 tail */
    check_kind(INK_QT_NVFP4, 4, 16, 7, 544, 1);   /* four 128-chunks and a 32 tail */
    check_kind(INK_QT_AFFINE, 4, 64, 9, 448, 1);  /* three 128-chunks, then a 64 step */
    check_kind(INK_QT_NVFP4, 4, 16, 7, 416, 1);   /* three 128-chunks and a 32 tail */
    int bits[] = {2, 3, 5, 6}, gss[] = {32, 64, 128};
    for (int b = 0; b < 4; b++)
        for (int g = 0; g < 3; g++) check_kind(INK_QT_AFFINE, bits[b], gss[g], 23 + b, 2 * gss[g] + 32 * (g == 0), 1);
    check_kind(INK_QT_AFFINE, 3, 64, 9, 128, 1);
    check_kind(INK_QT_NVFP4, 4, 16, 19, 96, 1);   /* half step at the end for the AVX-512 set */
    check_kind(INK_QT_NVFP4, 4, 16, 66, 1024, 1);
    /* not an int8 shape (cols % 32 != 0): the f32 path, whatever W->int8 says */
    tmat t = make(INK_QT_NVFP4, 4, 16, 3, 48);
    t.m.int8 = 1;
    assert_false(ink_mat_int8(&t.m));
    drop(&t);
}

static void test_nvfp4_sets(void **state)
{
    (void)state;
    check_kind(INK_QT_NVFP4, 4, 16, 19, 48, 0);
    check_kind(INK_QT_NVFP4, 4, 16, 66, 1024, 0);
}

/* A view of rows row0, row0 + step, ... (nrows of them) of t: what the loader binds for a fused
 * gate/up tensor (step 2: release w13, row-interleaved; step 1: the halves of gate_up_proj). */
static ink_mat rows_view(const ink_mat *m, int row0, int nrows, int step)
{
    ink_mat v = *m;
    int q = m->dtype >= INK_QT_FIRST;
    size_t rowb = q ? m->stride : m->stride * ink_dt_size(m->dtype);
    v.rows = nrows;
    v.data = (const uint8_t *)m->data + (size_t)row0 * rowb;
    v.stride *= (size_t)step;
    if (q) {
        size_t es = ink_dt_size(m->sdtype);
        v.scales = (const uint8_t *)m->scales + (size_t)row0 * m->sstride * es;
        if (m->biases) v.biases = (const uint8_t *)m->biases + (size_t)row0 * m->sstride * es;
        v.sstride *= (size_t)step;
    }
    return v;
}

/* The fused gate/up matmul (forward.c: one matmul over the stored [2I, H] tensor) gives bitwise the
 * outputs of the two strided views it replaces, in every set, for every T and thread count: the
 * rows' arithmetic does not depend on the stride (rows of 1 KiB and more are read in spread tiles
 * in one and not the other: bf16 / f16 with H = 256 and 512, f32 with H = 256). */
static void check_fused(int kind, int bits, int gs, int I, int cols, int int8)
{
    tmat t = make(kind, bits, gs, 2 * I, cols);
    t.m.int8 = int8;
    const int TM = 9;
    float *x = malloc((size_t)TM * cols * 4), *yf = malloc((size_t)TM * 2 * I * 4), *ya = malloc((size_t)TM * I * 4),
          *yb = malloc((size_t)TM * I * 4);
    for (int i = 0; i < TM * cols; i++) x[i] = frand();
    const ink_kernels *sets[4] = {ink_kernels_scalar(), ink_kernels_avx2(), ink_kernels_avx512(), ink_kernels_neon()};
    for (int si = 0; si < 4; si++) {
        if (!sets[si]) continue;
        for (int nth = 1; nth <= 2; nth++) {
            ink_pool *p = ink_pool_create(nth);
            for (int T = 1; T <= TM; T++)
                for (int mode = 1; mode <= 2; mode++) {
                    ink_mat g = mode == 1 ? rows_view(&t.m, 0, I, 2) : rows_view(&t.m, 0, I, 1);
                    ink_mat u = mode == 1 ? rows_view(&t.m, 1, I, 2) : rows_view(&t.m, I, I, 1);
                    ink_matmul_k(sets[si], p, &t.m, x, cols, T, yf, 2 * I);
                    ink_matmul_k(sets[si], p, &g, x, cols, T, ya, I);
                    ink_matmul_k(sets[si], p, &u, x, cols, T, yb, I);
                    if (mode == 1) { /* ink_matmul_swiglu: bitwise the matmul, then ink_silu_mul per row */
                        ink_kernels_select(sets[si]);
                        float *ys = malloc((size_t)T * 2 * I * 4), *os = malloc((size_t)T * I * 4),
                              *ow = malloc((size_t)T * I * 4);
                        ink_matmul_swiglu(p, &t.m, x, cols, T, ys, 2 * I, os, I);
                        for (int tt = 0; tt < T; tt++)
                            ink_silu_mul(ow + (size_t)tt * I, yf + (size_t)tt * 2 * I, yf + (size_t)tt * 2 * I + 1, I, 2);
                        if (memcmp(ys, yf, (size_t)T * 2 * I * 4) || memcmp(os, ow, (size_t)T * I * 4))
                            fail_msg("%s kind %d bits %d int8 %d I %d cols %d T %d thr %d: ink_matmul_swiglu differs",
                                     sets[si]->name, kind, bits, int8, I, cols, T, nth);
                        free(ys), free(os), free(ow);
                        ink_kernels_select(NULL);
                    }
                    for (int tt = 0; tt < T; tt++)
                        for (int i = 0; i < I; i++) {
                            const float *f = yf + (size_t)tt * 2 * I;
                            float fg = mode == 1 ? f[2 * i] : f[i], fu = mode == 1 ? f[2 * i + 1] : f[I + i];
                            if (memcmp(&fg, ya + (size_t)tt * I + i, 4) || memcmp(&fu, yb + (size_t)tt * I + i, 4))
                                fail_msg("%s kind %d bits %d int8 %d I %d cols %d T %d thr %d mode %d: row %d fused %g/%g, "
                                         "views %g/%g", sets[si]->name, kind, bits, int8, I, cols, T, nth, mode, i, fg, fu,
                                         ya[(size_t)tt * I + i], yb[(size_t)tt * I + i]);
                        }
                }
            ink_pool_free(p);
        }
    }
    drop(&t);
    free(x), free(yf), free(ya), free(yb);
}

static void test_fused_gate_up(void **state)
{
    (void)state;
    check_fused(INK_DT_BF16, 0, 0, 37, 256, 0);
    check_fused(INK_DT_BF16, 0, 0, 20, 512, 0);
    check_fused(INK_DT_F16, 0, 0, 19, 256, 0);
    check_fused(INK_DT_F32, 0, 0, 21, 256, 0);
    check_fused(INK_DT_F32, 0, 0, 9, 100, 0);
    check_fused(INK_QT_AFFINE, 4, 64, 23, 256, 0);
    check_fused(INK_QT_AFFINE, 4, 64, 23, 512, 1);
    check_fused(INK_QT_AFFINE, 8, 32, 13, 2048, 1);
    check_fused(INK_QT_NVFP4, 4, 16, 11, 1024, 1);
}

/* formats.md §4.3 packing vectors, decoded with the stream rule. */
static void test_packing_vectors(void **state)
{
    (void)state;
    struct { int bits, n; unsigned q[16]; uint8_t b[8]; int nb; } v[] = {
        {4, 8, {1, 2, 3, 4, 5, 6, 7, 8}, {0x21, 0x43, 0x65, 0x87}, 4},
        {8, 4, {0x11, 0x22, 0x33, 0x44}, {0x11, 0x22, 0x33, 0x44}, 4},
        {2, 16, {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}, {0xe4, 0xe4, 0xe4, 0xe4}, 4},
        {3, 8, {1, 2, 3, 4, 5, 6, 7, 0}, {0xd1, 0x58, 0x1f}, 3},
        {5, 8, {1, 2, 3, 4, 5, 6, 7, 8}, {0x41, 0x0c, 0x52, 0xcc, 0x41}, 5},
        {6, 4, {1, 2, 3, 4}, {0x81, 0x30, 0x10}, 3},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint8_t row[16] = {0};
        for (int j = 0; j < v[i].n; j++) put_bits(row, j, v[i].bits, v[i].q[j]);
        assert_memory_equal(row, v[i].b, (size_t)v[i].nb);
        for (int j = 0; j < v[i].n; j++) assert_int_equal(ink_affine_code(v[i].b, j, v[i].bits), v[i].q[j]);
    }
}

/* E2M1 table and the NVFP4 dequantization w = e2m1(code) * e4m3(scale) * scale2 (formats.md §1.5, §3.2):
 * vectors derived by hand from the bit layouts. */
static void test_nvfp4_values(void **state)
{
    (void)state;
    const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (unsigned c = 0; c < 16; c++) assert_true(ink_e2m1_to_f32(c) == e2m1[c] && signbit(ink_e2m1_to_f32(c)) == signbit(e2m1[c]));
    /* one row of 32 inputs; low nibble = element 2j. Block 0 scale 0x38 = 1.0, block 1 scale 0x42 =
     * (1 + 2/8) * 2^1 = 2.5; scale2 0.5. */
    uint8_t codes[16] = {0x21, 0xF7, 0x19, 0x80, 0, 0, 0, 0, 0x4C, 0, 0, 0, 0, 0, 0, 0x7F};
    uint8_t sc[2] = {0x38, 0x42};
    ink_mat W = {.dtype = INK_QT_NVFP4, .rows = 1, .cols = 32, .stride = 16, .data = codes, .bits = 4, .group = 16,
                 .sdtype = INK_DT_F8_E4M3, .sstride = 2, .scales = sc, .gscale = 0.5f};
    float out[32], expect[32] = {0};
    const float b0[8] = {0.25f, 0.5f, 3.0f, -3.0f, -0.25f, 0.25f, 0.0f, -0.0f};
    memcpy(expect, b0, sizeof b0);
    expect[16] = -2.5f, expect[17] = 2.5f, expect[30] = -7.5f, expect[31] = 7.5f;
    ink_mat_row(&W, 0, out);
    for (int i = 0; i < 32; i++) assert_true(out[i] == expect[i]);
    assert_true(signbit(out[7]));
    /* E4M3 edge values of formats.md §1.5 */
    assert_true(ink_e4m3_to_f32(0x38) == 1.0f && ink_e4m3_to_f32(0x40) == 2.0f && ink_e4m3_to_f32(0x7E) == 448.0f);
    assert_true(ink_e4m3_to_f32(0x08) == ldexpf(1, -6) && ink_e4m3_to_f32(0x01) == ldexpf(1, -9));
    assert_true(isnan(ink_e4m3_to_f32(0x7F)));
}


/* ---- attention ------------------------------------------------------------------------------ */

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* exp polynomial: within 2 ulp of expf on [-87, 0] (the softmax range), exact at 0, 0 below the
 * normal range, NaN kept; the SIMD evaluations too. */
static void test_exp_poly(void **state)
{
    (void)state;
    enum { N = 200003 };
    float *x = malloc(N * 4), *y = malloc(N * 4);
    for (int i = 0; i < N; i++) x[i] = -87.0f * (float)i / (float)(N - 1);
    for (int i = 0; i < N; i += 3) x[i] = 88.0f * (float)i / (float)(N - 1); /* exp(-z) of silu: up to 88 */
    x[N - 1] = -87.0f, x[N - 2] = -1e-30f, x[N - 3] = -0x1p-24f, x[N - 4] = -0.5f;
    for (int v = 0; v < 3; v++) {
#if defined(__x86_64__)
        if (v == 1 && !ink_kernels_avx2()) continue;
        if (v == 2 && !ink_kernels_avx512()) continue;
        if (v == 1) ink_avx2_expv(x, y, N);
        if (v == 2) ink_avx512_expv(x, y, N);
#else
        if (v) continue;
#endif
        if (v == 0)
            for (int i = 0; i < N; i++) y[i] = ink_exp_poly(x[i]);
        uint32_t worst = 0;
        for (int i = 0; i < N; i++) {
            uint32_t a = fbits(y[i]), b = fbits(expf(x[i])), u = a > b ? a - b : b - a;
            if (u > worst) worst = u;
        }
        if (worst > 2) fail_msg("exp evaluation %d: %u ulp from expf", v, worst);
        float sp[5] = {0.0f, -100.0f, -INFINITY, NAN, -87.5f}, so[5];
        if (v == 0)
            for (int i = 0; i < 5; i++) so[i] = ink_exp_poly(sp[i]);
#if defined(__x86_64__)
        if (v == 1) ink_avx2_expv(sp, so, 5);
        if (v == 2) ink_avx512_expv(sp, so, 5);
#endif
        assert_true(so[0] == 1.0f && so[1] == 0.0f && so[2] == 0.0f && isnan(so[3]) && so[4] == 0.0f);
    }
    free(x), free(y);
}

/* The SwiGLU activation: every set against double silu(g) * u (exp within a few ulp: 1e-6
 * relative), both layouts (step 1 and the interleaved step 2) in place as the MLP runs them, lengths
 * around the 16 / 8 lane and 256 chunk boundaries; large |z| (exp(-z) clamped at 88), zero, NaN. */
static void test_silu_mul(void **state)
{
    (void)state;
    const ink_kernels *sets[3] = {ink_kernels_scalar(), ink_kernels_avx2(), ink_kernels_avx512()};
    enum { N = 700 };
    static float g[2 * N], u[N], o[2 * N];
    for (int si = 0; si < 3; si++) {
        if (!sets[si]) continue;
        ink_kernels_select(sets[si]);
        int lens[] = {1, 7, 8, 15, 16, 17, 255, 256, 257, 600};
        for (int li = 0; li < 10; li++)
            for (int step = 1; step <= 2; step++) {
                int n = lens[li];
                for (int i = 0; i < 2 * N; i++) g[i] = frand() * (i % 5 == 0 ? 40.0f : 6.0f);
                for (int i = 0; i < N; i++) u[i] = frand();
                g[0] = -100.0f, g[step] = 100.0f;
                if (n > 2) g[2 * step] = 0.0f;
                float *gi = g, *ui = step == 2 ? g + 1 : u;
                double want[N];
                for (int i = 0; i < n; i++) {
                    double z = gi[(size_t)i * step];
                    want[i] = z / (1.0 + exp(-z)) * ui[(size_t)i * step];
                }
                /* bitwise: the portable loop's operations with the set's exp (the sets' silu_mul
                 * in lanes must not change a bit) */
                float ref[N];
                for (int i = 0; i < n; i++) {
                    float z = gi[(size_t)i * step], v = ui[(size_t)i * step], b = -z, e;
                    if (sets[si]->expv) sets[si]->expv(&b, &e, 1);
                    else e = ink_exp_scalar(b);
                    ref[i] = z / (1.0f + e) * v;
                }
                memcpy(o, g, sizeof o);
                /* in place, as swiglu_run: step 2 writes over its own interleaved input */
                if (step == 2) ink_silu_mul(o, o, o + 1, n, 2);
                else ink_silu_mul(o, g, u, n, 1);
                for (int i = 0; i < n; i++)
                    if (!(fabs(o[i] - want[i]) <= 1e-6 * fabs(want[i]) + 1e-30))
                        fail_msg("%s silu_mul n %d step %d: [%d] %.9g, want %.9g (z %g)", sets[si]->name, n, step, i,
                                 o[i], want[i], gi[(size_t)i * step]);
                    else if (memcmp(&o[i], &ref[i], sizeof(float)))
                        fail_msg("%s silu_mul n %d step %d: [%d] %.9g, the portable loop %.9g", sets[si]->name, n,
                                 step, i, o[i], ref[i]);
            }
        float nz[2] = {NAN, 1.0f}, no[1];
        ink_silu_mul(no, nz, nz + 1, 1, 1);
        assert_true(isnan(no[0]));
    }
    ink_kernels_select(NULL);
}

/* The short convolution: every set's lanes against the portable loop, bitwise (the same products
 * and sums per element), channel counts around the 16 / 8 lane boundaries, K 1 .. 8 and one K the
 * sets leave to the loop, T 1 .. 5 rows, in place (y == u) as the model runs it, the state updated
 * alike; and the multi-row RMS norm against ink_rmsnorm row by row, bitwise, for 1 .. 21 rows. */
static void ref_sconv(const float *w, float *state, const float *u, float *y, int T, int C, int K)
{
    int S = K - 1;
    float ext[(8 + 5) * 40];
    memcpy(ext, state, (size_t)S * C * sizeof(float));
    memcpy(ext + (size_t)S * C, u, (size_t)T * C * sizeof(float));
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            float a = 0.0f;
            for (int k = 0; k < K; k++) a += w[c * K + k] * ext[(t + k) * C + c];
            y[t * C + c] = ext[(t + S) * C + c] + a;
        }
    memcpy(state, ext + (size_t)T * C, (size_t)S * C * sizeof(float));
}

static void test_sconv_norm_rows(void **state)
{
    (void)state;
    const ink_kernels *sets[3] = {ink_kernels_scalar(), ink_kernels_avx2(), ink_kernels_avx512()};
    int Cs[] = {1, 7, 8, 15, 16, 17, 33, 40}, Ks[] = {1, 2, 4, 8, 9};
    static float w[40 * 9], st[2][8 * 40], u[2][5 * 40], y[5 * 40], ext[(9 + 5) * 40];
    for (int si = 0; si < 3; si++) {
        if (!sets[si]) continue;
        ink_kernels_select(sets[si]);
        for (int ci = 0; ci < 8; ci++)
            for (int ki = 0; ki < 5; ki++)
                for (int T = 1; T <= 5; T++) {
                    int C = Cs[ci], K = Ks[ki];
                    if (K > 8) continue; /* ref_sconv's buffer; K 9 below */
                    for (int i = 0; i < C * K; i++) w[i] = frand();
                    for (int i = 0; i < (K - 1) * C; i++) st[0][i] = st[1][i] = frand() * 3.0f;
                    for (int i = 0; i < T * C; i++) u[0][i] = u[1][i] = i % 11 == 0 ? -0.0f : frand() * 2.0f;
                    ref_sconv(w, st[0], u[0], y, T, C, K);
                    ink_sconv(w, st[1], u[1], u[1], T, C, K, ext); /* in place */
                    if (memcmp(y, u[1], (size_t)T * C * sizeof(float)) || memcmp(st[0], st[1], (size_t)(K - 1) * C * sizeof(float)))
                        fail_msg("%s sconv C %d K %d T %d: not bitwise the portable loop", sets[si]->name, C, K, T);
                }
        /* K 9: no set takes it in lanes; the loop still runs */
        for (int i = 0; i < 16 * 9; i++) w[i] = frand();
        for (int i = 0; i < 8 * 16; i++) st[1][i] = frand();
        for (int i = 0; i < 16; i++) u[1][i] = frand();
        float want[16];
        for (int c = 0; c < 16; c++) {
            float a = 0.0f;
            for (int k = 0; k < 8; k++) a += w[c * 9 + k] * st[1][k * 16 + c];
            a += w[c * 9 + 8] * u[1][c];
            want[c] = u[1][c] + a;
        }
        ink_sconv(w, st[1], u[1], y, 1, 16, 9, ext);
        assert_memory_equal(want, y, sizeof want);
        for (int rows = 1; rows <= 21; rows++)
            for (int n = 1; n <= 70; n += 23) {
                static float x[21 * 70], a[21 * 70], b[21 * 70], nw[70];
                for (int i = 0; i < rows * n; i++) x[i] = frand() * (i % 7 == 0 ? 30.0f : 1.0f);
                for (int i = 0; i < n; i++) nw[i] = frand();
                for (int r = 0; r < rows; r++) ink_rmsnorm(a + r * n, x + r * n, nw, n, 1e-6f);
                memcpy(b, x, sizeof b);
                ink_rmsnorm_rows(b, b, nw, rows, n, 1e-6f); /* in place */
                assert_memory_equal(a, b, (size_t)rows * n * sizeof(float));
                ink_rmsnorm_rows(b, x, NULL, rows, n, 1e-6f);
                for (int r = 0; r < rows; r++) ink_rmsnorm(a + r * n, x + r * n, NULL, n, 1e-6f);
                assert_memory_equal(a, b, (size_t)rows * n * sizeof(float));
            }
    }
    ink_kernels_select(NULL);
}

typedef struct attn_case {
    int d, R, dr, cap, npos; /* head dim, relative extent, d_rel, ring rows, positions 0 .. npos-1 */
    float qscale;            /* spread of the scores */
} attn_case;

/* Double-precision attention of one query (the formula of kernels.h). */
static void attn_ref(const attn_case *c, const float *K, const float *V, const float *rel, const float *q,
                     const float *rs, float tau, int lo, int hi, double *o)
{
    int n = hi - lo + 1;
    double *sc = malloc((size_t)n * sizeof(double)), mx = -1e300, sum = 0;
    for (int j = lo; j <= hi; j++) {
        const float *k = K + (size_t)(j % c->cap) * c->d;
        double dot = 0, lr = 0;
        for (int i = 0; i < c->d; i++) dot += (double)tau * q[i] * k[i];
        int delta = hi - j;
        if (delta < c->R)
            for (int r = 0; r < c->dr; r++) lr += (double)rs[r] * rel[(size_t)r * c->R + delta];
        sc[j - lo] = dot / c->d + tau * lr;
        if (sc[j - lo] > mx) mx = sc[j - lo];
    }
    for (int j = 0; j < n; j++) sum += (sc[j] = exp(sc[j] - mx));
    for (int i = 0; i < c->d; i++) o[i] = 0;
    for (int j = lo; j <= hi; j++) {
        const float *v = V + (size_t)(j % c->cap) * c->d;
        for (int i = 0; i < c->d; i++) o[i] += sc[j - lo] / sum * v[i];
    }
    free(sc);
}

/* Every set against the double reference, and per query bitwise the same whatever tile it is in:
 * alone, in the full tile of 32, or among a random handful (other windows, other positions). */
static void check_attn(const attn_case *c)
{
    enum { NQ = INK_ATTN_MAXQ };
    int d = c->d;
    float *K = malloc((size_t)c->cap * d * 4), *V = malloc((size_t)c->cap * d * 4);
    float *rel = malloc((size_t)(c->dr ? c->dr : 1) * c->R * 4), *Q = malloc((size_t)NQ * d * 4);
    float *RS = malloc((size_t)NQ * (c->dr ? c->dr : 1) * 4), tau[NQ];
    float *O = malloc((size_t)NQ * d * 4), *O1 = malloc((size_t)NQ * d * 4);
    int lo[NQ], hi[NQ];
    for (int i = 0; i < c->cap * d; i++) K[i] = frand(), V[i] = frand();
    for (int i = 0; i < c->dr * c->R; i++) rel[i] = frand();
    for (int i = 0; i < NQ * d; i++) Q[i] = c->qscale * frand();
    for (int i = 0; i < NQ * c->dr; i++) RS[i] = frand();
    /* windows inside the ring: lo > hi - cap; some whole-range, some short, rows 4 apart sharing one */
    for (int i = 0; i < NQ; i++) {
        uint64_t z = (rng = rng * 6364136223846793005ull + 1442695040888963407ull) >> 33;
        hi[i] = c->npos - 1 - (int)(z % 9);
        int span = i % 4 == 0 ? hi[i] + 1 : 1 + (int)((z >> 8) % (uint64_t)(hi[i] + 1));
        if (span > c->cap) span = c->cap;
        lo[i] = hi[i] - span + 1;
        tau[i] = i % 3 ? 1.0f : 1.0f + 0.1f * (float)(i % 5);
    }
    size_t wsn = ink_attn_ws_floats(d, c->R, c->npos);
    float *ws = aligned_alloc(64, (wsn * 4 + 63) & ~(size_t)63);
    const ink_kernels *sets[4] = {ink_kernels_scalar(), ink_kernels_avx2(), ink_kernels_avx512(), ink_kernels_neon()};
    double *ref = malloc((size_t)d * sizeof(double));
    for (int si = 0; si < 4; si++) {
        if (!sets[si]) continue;
        ink_attn a;
        memset(&a, 0, sizeof a);
        a.d = d, a.k = K, a.v = V, a.ld = (size_t)d, a.cap = c->cap, a.rel = c->dr ? rel : NULL, a.dr = c->dr, a.R = c->R;
        a.ws = ws, a.nq = NQ;
        for (int i = 0; i < NQ; i++) {
            a.q[i] = Q + (size_t)i * d, a.rs[i] = RS + (size_t)i * c->dr, a.o[i] = O + (size_t)i * d;
            a.tau[i] = tau[i], a.lo[i] = lo[i], a.hi[i] = hi[i];
        }
        sets[si]->attn(&a);
        for (int i = 0; i < NQ; i++) {
            attn_ref(c, K, V, rel, Q + (size_t)i * d, RS + (size_t)i * c->dr, tau[i], lo[i], hi[i], ref);
            for (int e = 0; e < d; e++)
                if (!(fabs(O[(size_t)i * d + e] - ref[e]) <= 2e-6))
                    fail_msg("%s d %d R %d cap %d: query %d (%d..%d) o[%d] %g ref %g", sets[si]->name, d, c->R, c->cap, i,
                             lo[i], hi[i], e, O[(size_t)i * d + e], ref[e]);
        }
        /* the same queries alone and in random subsets, in random order */
        for (int trial = 0; trial < 40; trial++) {
            int n = trial < NQ ? 1 : 1 + (int)(((rng = rng * 6364136223846793005ull + 1) >> 33) % NQ), pick[NQ];
            for (int i = 0; i < n; i++) pick[i] = trial < NQ ? trial : (int)(((rng = rng * 6364136223846793005ull + 1) >> 33) % NQ);
            ink_attn b = a;
            b.nq = n;
            for (int i = 0; i < n; i++) {
                int p = pick[i];
                b.q[i] = a.q[p], b.rs[i] = a.rs[p], b.tau[i] = tau[p], b.lo[i] = lo[p], b.hi[i] = hi[p];
                b.o[i] = O1 + (size_t)i * d;
            }
            sets[si]->attn(&b);
            for (int i = 0; i < n; i++)
                if (memcmp(O1 + (size_t)i * d, O + (size_t)pick[i] * d, (size_t)d * 4))
                    fail_msg("%s d %d: query %d in a tile of %d differs from the tile of %d", sets[si]->name, d, pick[i], n, NQ);
        }
    }
    free(K), free(V), free(rel), free(Q), free(RS), free(O), free(O1), free(ws), free(ref);
}

static void test_attn_sets(void **state)
{
    (void)state;
    const attn_case cases[] = {
        {16, 16, 4, 40, 37, 1.0f},     /* tiny model shapes; no wrap */
        {64, 128, 16, 300, 700, 4.0f}, /* bundled-model global layer; the ring wraps */
        {64, 64, 16, 71, 200, 4.0f},   /* sliding: window 64 + 7 rows of slack */
        {128, 64, 16, 600, 600, 8.0f}, /* wide head, scores spread past exp's range */
        {24, 10, 3, 50, 90, 2.0f},     /* d % 16 == 8: the AVX2 path in the AVX-512 set */
        {20, 7, 0, 33, 33, 1.0f},      /* d % 8 != 0 (scalar everywhere), no relative bank */
        {8, 5, 2, 17, 40, 1.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_attn(&cases[i]);
}

/* bf16 activations: the AVX-512 fill gives ink_bf16x_round's bits (ties, denormals, NaN, overflow);
 * every set's result equals the double dot product of the weights with the rounded x within the
 * float tolerance and the unrounded one within bf16's; per token bitwise the same in any T (1..20)
 * and thread count (1..3); views the path does not apply to keep the exact f32 path. */
static void check_bf16x(int rows, int cols)
{
    tmat t = make(INK_DT_BF16, 0, 0, rows, cols);
    t.m.bf16x = 1;
    assert_true(ink_mat_bf16x(&t.m));
    int T = 20;
    float *x = malloc((size_t)T * cols * 4), *y = malloc((size_t)T * rows * 4), *one = malloc((size_t)rows * 4);
    double *ref = malloc((size_t)T * rows * 8), *ex = malloc((size_t)T * rows * 8), *mag = malloc((size_t)T * rows * 8);
    uint16_t *xr = malloc((size_t)cols * 2);
    for (int i = 0; i < T * cols; i++) x[i] = frand() * (i % 7 == 0 ? 9.0f : 1.0f);
    for (int tt = 0; tt < T; tt++) {
        ink_bf16x_round(xr, x + (size_t)tt * cols, cols);
        for (int o = 0; o < rows; o++) {
            double s = 0, e = 0, m = 0;
            for (int i = 0; i < cols; i++) {
                double w = ink_bf16_to_f32(((const uint16_t *)t.d)[(size_t)o * cols + i]);
                s += w * ink_bf16_to_f32(xr[i]), e += w * x[(size_t)tt * cols + i], m += fabs(w * x[(size_t)tt * cols + i]);
            }
            ref[(size_t)tt * rows + o] = s, ex[(size_t)tt * rows + o] = e, mag[(size_t)tt * rows + o] = m;
        }
    }
    const ink_kernels *sets[4] = {ink_kernels_scalar(), ink_kernels_avx2(), ink_kernels_avx512(), ink_kernels_neon()};
    for (int si = 0; si < 4; si++) {
        if (!sets[si]) continue;
        for (int nth = 1; nth <= 3; nth++) {
            ink_pool *p = ink_pool_create(nth);
            for (int TT = 1; TT <= T; TT += (TT < 10 ? 1 : 5)) {
                ink_matmul_k(sets[si], p, &t.m, x, cols, TT, y, rows);
                for (int i = 0; i < TT * rows; i++) {
                    if (!(fabs(y[i] - ref[i]) <= 2e-5 * (mag[i] + 1e-3)))
                        fail_msg("%s bf16x %dx%d T %d thr %d: y[%d] %.9g, exact on rounded x %.9g", sets[si]->name, rows,
                                 cols, TT, nth, i, y[i], ref[i]);
                    if (!(fabs(y[i] - ex[i]) <= 4e-3 * (mag[i] + 1e-3)))
                        fail_msg("%s bf16x %dx%d T %d: y[%d] %.9g, f32 value %.9g", sets[si]->name, rows, cols, TT, i,
                                 y[i], ex[i]);
                }
                for (int tt = 0; tt < TT; tt++) {
                    ink_matmul_k(sets[si], p, &t.m, x + (size_t)tt * cols, cols, 1, one, rows);
                    if (memcmp(one, y + (size_t)tt * rows, (size_t)rows * 4))
                        fail_msg("%s bf16x %dx%d: row %d of T=%d thr %d differs from T=1", sets[si]->name, rows, cols, tt,
                                 TT, nth);
                }
            }
            ink_pool_free(p);
        }
    }
    drop(&t);
    free(x), free(y), free(one), free(ref), free(ex), free(mag), free(xr);
}

static void test_bf16x(void **state)
{
    (void)state;
    /* the fill against the scalar rounding */
    float v[200];
    uint32_t sp[] = {0x00000001u, 0x80000001u, 0x007fffffu, 0x807fffffu, 0x00800000u, 0x7f7fffffu, 0xff7fffffu,
                     0x7f800000u, 0xff800000u, 0x7fc00001u, 0xffa12345u, 0x7f812345u, 0x3f808000u, 0x3f818000u,
                     0x3f808001u, 0x80000000u, 0x00000000u, 0x3f7fffffu};
    for (int i = 0; i < 200; i++) {
        union { uint32_t u; float f; } b;
        if (i < (int)(sizeof sp / sizeof sp[0])) b.u = sp[i];
        else b.f = ldexpf(frand(), (int)(frand() * 140.0f));
        v[i] = b.f;
    }
    const ink_kernels *k5 = ink_kernels_avx512();
    if (k5 && k5->bf16x_fill && k5->bf16x_ok && k5->bf16x_ok()) {
        uint16_t a[200], b[200];
        for (int n = 1; n <= 200; n += (n < 70 ? 1 : 13)) {
            memset(a, 0xa5, sizeof a), memset(b, 0xa5, sizeof b);
            k5->bf16x_fill(a, v, n);
            ink_bf16x_round(b, v, n);
            for (int i = 0; i < 200; i++)
                if (a[i] != b[i]) fail_msg("bf16x fill n %d: [%d] of %08x: %04x, scalar %04x", n, i, 0u, a[i], b[i]);
        }
    }
    int shapes[][2] = {{1, 1}, {7, 13}, {33, 67}, {130, 256}, {9, 1031}, {64, 4100}, {5, 32}, {12, 96}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) check_bf16x(shapes[i][0], shapes[i][1]);
    /* where it does not apply */
    tmat t = make(INK_DT_F16, 0, 0, 3, 40);
    t.m.bf16x = 1;
    assert_false(ink_mat_bf16x(&t.m));
    drop(&t);
    t = make(INK_DT_BF16, 0, 0, 1, INK_BX_MAXK + 1);
    t.m.bf16x = 1;
    assert_false(ink_mat_bf16x(&t.m));
    drop(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_packing_vectors), cmocka_unit_test(test_nvfp4_values), cmocka_unit_test(test_float_sets),
        cmocka_unit_test(test_affine_sets),    cmocka_unit_test(test_int8_path),    cmocka_unit_test(test_nvfp4_sets),
        cmocka_unit_test(test_exp_poly),       cmocka_unit_test(test_attn_sets), cmocka_unit_test(test_fused_gate_up),
        cmocka_unit_test(test_bf16x),
        cmocka_unit_test(test_silu_mul),      cmocka_unit_test(test_sconv_norm_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
