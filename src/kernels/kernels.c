/* kernels.c — the portable (scalar reference) kernel set, the dispatch and the threaded drivers,
 * format helpers, and the norm / conv kernels (see kernels.h for the exactness contract). */
#include "kernels/kern_impl.h"

#include "base/dtype.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* ---- format helpers ---------------------------------------------------------------------- */

float ink_e2m1_to_f32(unsigned c)
{
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float v = mag[c & 7];
    return (c & 8) ? -v : v;
}

unsigned ink_affine_code(const uint8_t *row, int j, int bits)
{
    size_t bit = (size_t)j * (size_t)bits;
    const uint8_t *p = row + bit / 8;
    unsigned v = p[0];
    if ((bit % 8) + (size_t)bits > 8) v |= (unsigned)p[1] << 8;
    return (v >> (bit % 8)) & ((1u << bits) - 1u);
}

float ink_scale_at(const void *p, int dtype, size_t i)
{
    switch (dtype) {
    case INK_DT_F32: return ink_ld_f32(p, i);
    case INK_DT_BF16: return ink_bf16_to_f32(ink_ld_u16(p, i));
    case INK_DT_F16: return ink_f16_to_f32(ink_ld_u16(p, i));
    case INK_DT_F8_E4M3: return ink_e4m3_to_f32(((const uint8_t *)p)[i]);
    default: return 0.0f;
    }
}

size_t ink_dt_size(int dt) { return dt == INK_DT_F32 ? 4 : dt == INK_DT_F8_E4M3 || dt == INK_DT_U8 ? 1 : 2; }

size_t ink_mat_bytes(const ink_mat *W)
{
    size_t R = (size_t)W->rows, C = (size_t)W->cols;
    if (W->dtype == INK_QT_AFFINE)
        return R * (C * (size_t)W->bits / 8) + 2 * R * (C / (size_t)W->group) * ink_dt_size(W->sdtype);
    if (W->dtype == INK_QT_NVFP4) return R * C / 2 + R * C / 16;
    return R * C * ink_dt_size(W->dtype);
}

/* Eight consecutive weights of row r starting at column c (c % 8 == 0 for quantized views).
 * NVFP4 leaves out gscale (applied to the finished row sum). */
static void decode8(const ink_mat *W, int r, int c, float w[8])
{
    switch (W->dtype) {
    case INK_DT_F32: memcpy(w, (const uint8_t *)W->data + 4 * ((size_t)r * W->stride + c), 8 * sizeof(float)); return;
    case INK_DT_BF16: {
        size_t s = (size_t)r * W->stride + c;
        for (int j = 0; j < 8; j++) w[j] = ink_bf16_to_f32(ink_ld_u16(W->data, s + j));
        return;
    }
    case INK_DT_F16: {
        size_t s = (size_t)r * W->stride + c;
        for (int j = 0; j < 8; j++) w[j] = ink_f16_to_f32(ink_ld_u16(W->data, s + j));
        return;
    }
    case INK_QT_AFFINE: {
        const uint8_t *row = (const uint8_t *)W->data + (size_t)r * W->stride;
        size_t g = (size_t)r * W->sstride + (size_t)(c / W->group);
        float s = ink_scale_at(W->scales, W->sdtype, g), b = ink_scale_at(W->biases, W->sdtype, g);
        for (int j = 0; j < 8; j++) w[j] = s * (float)ink_affine_code(row, c + j, W->bits) + b;
        return;
    }
    default: { /* NVFP4 */
        const uint8_t *row = (const uint8_t *)W->data + (size_t)r * W->stride;
        float s = ink_e4m3_to_f32(((const uint8_t *)W->scales)[(size_t)r * W->sstride + (size_t)(c / 16)]);
        for (int j = 0; j < 8; j++) w[j] = ink_e2m1_to_f32(ink_affine_code(row, c + j, 4)) * s;
        return;
    }
    }
}

static float weight_at(const ink_mat *W, int r, int i)
{
    switch (W->dtype) {
    case INK_DT_F32: return ink_ld_f32(W->data, (size_t)r * W->stride + i);
    case INK_DT_BF16: return ink_bf16_to_f32(ink_ld_u16(W->data, (size_t)r * W->stride + i));
    case INK_DT_F16: return ink_f16_to_f32(ink_ld_u16(W->data, (size_t)r * W->stride + i));
    default: {
        float w[8];
        decode8(W, r, i & ~7, w);
        return w[i & 7] * (W->dtype == INK_QT_NVFP4 ? W->gscale : 1.0f);
    }
    }
}

void ink_mat_row(const ink_mat *W, int r, float *out)
{
    if (W->dtype == INK_DT_F32) {
        memcpy(out, (const uint8_t *)W->data + 4 * (size_t)r * W->stride, (size_t)W->cols * sizeof(float));
        return;
    }
    if (W->dtype == INK_DT_BF16 || W->dtype == INK_DT_F16 || W->cols % 8) {
        for (int i = 0; i < W->cols; i++) out[i] = weight_at(W, r, i);
        return;
    }
    for (int c = 0; c < W->cols; c += 8) {
        decode8(W, r, c, out + c);
        if (W->dtype == INK_QT_NVFP4)
            for (int j = 0; j < 8; j++) out[c + j] *= W->gscale; /* e2m1 * e4m3 is exact: one rounding */
    }
}

/* ---- int8 activations (shared by every set) ---------------------------------------------- */

void ink_qx_fill(ink_qx *qx, const float *x, int ldx, int nt, int k)
{
    for (int t = 0; t < nt; t++) {
        const float *xt = x + (size_t)t * ldx;
        for (int b = 0; b < k / 32; b++) {
            const float *v = xt + 32 * b;
            float amax = 0.0f, sum = 0.0f;
            for (int i = 0; i < 32; i++) {
                float a = fabsf(v[i]);
                if (a > amax) amax = a;
                sum += v[i];
            }
            float id = amax > 0.0f ? 127.0f / amax : 0.0f;
            qx->d[t][b] = amax / 127.0f;
            qx->xs[t][b] = sum;
            for (int i = 0; i < 32; i++) qx->q[t][32 * b + i] = (int8_t)nearbyintf(v[i] * id);
        }
    }
}

/* ---- the scalar set ----------------------------------------------------------------------- */

#define ST 16 /* token tile of the scalar set */

/* NVFP4 on int8 activations: per 32-block, eight 4-element integer partial sums of (2 e2m1) * q,
 * each scaled by its 16-group's e4m3 / 2 times the block's d; gscale applied at the end. */
static void scalar_rows_nvfp4_int8(const ink_mat *W, const ink_qx *qx, int nt, float *y, int ldy, int r0, int r1)
{
    int K = W->cols;
    for (int o = r0; o < r1; o++) {
        const uint8_t *row = (const uint8_t *)W->data + (size_t)o * W->stride;
        const uint8_t *sc = (const uint8_t *)W->scales + (size_t)o * W->sstride;
        float acc[ST][8] = {{0}};
        for (int c = 0; c < K; c += 32) {
            int code[32];
            for (int i = 0; i < 32; i++) code[i] = ink_e2m1_x2((unsigned)(row[(c + i) / 2] >> (4 * ((c + i) & 1))) & 15u);
            float sg[2] = {0.5f * ink_e4m3_to_f32(sc[c / 16]), 0.5f * ink_e4m3_to_f32(sc[c / 16 + 1])};
            for (int t = 0; t < nt; t++) {
                const int8_t *q = qx->q[t] + c;
                float d = qx->d[t][c / 32];
                for (int j = 0; j < 8; j++) {
                    int li = code[4 * j] * q[4 * j] + code[4 * j + 1] * q[4 * j + 1] + code[4 * j + 2] * q[4 * j + 2] +
                             code[4 * j + 3] * q[4 * j + 3];
                    acc[t][j] += (sg[j / 4] * d) * (float)li;
                }
            }
        }
        for (int t = 0; t < nt; t++) y[(size_t)t * ldy + o] = ink_lanes_sum(acc[t]) * W->gscale;
    }
}

static void scalar_rows_int8(const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy, int r0, int r1)
{
    ink_qx qx; /* 320 KiB on the stack: no allocation on the hot path */
    int K = W->cols, gs = W->group, q8 = W->bits == 8;
    for (int t0 = 0; t0 < T; t0 += ST) {
        int nt = T - t0 < ST ? T - t0 : ST;
        ink_qx_fill(&qx, x + (size_t)t0 * ldx, ldx, nt, K);
        if (W->dtype == INK_QT_NVFP4) {
            scalar_rows_nvfp4_int8(W, &qx, nt, y + (size_t)t0 * ldy, ldy, r0, r1);
            continue;
        }
        for (int o = r0; o < r1; o++) {
            const uint8_t *row = (const uint8_t *)W->data + (size_t)o * W->stride;
            float acc[ST][8] = {{0}}, bsum[ST] = {0};
            for (int g = 0; g < K / gs; g++) {
                size_t gi = (size_t)o * W->sstride + (size_t)g;
                float s = ink_scale_at(W->scales, W->sdtype, gi), b = ink_scale_at(W->biases, W->sdtype, gi);
                if (q8) b = b + 128.0f * s; /* codes are used as q - 128 */
                float gl[ST][8] = {{0}};
                for (int c = g * gs; c < (g + 1) * gs; c += 32) {
                    int code[32];
                    for (int i = 0; i < 32; i += 8) {
                        uint8_t u[8];
                        ink_unpack8(row, c + i, W->bits, u);
                        for (int e = 0; e < 8; e++) code[i + e] = (int)u[e] - (q8 ? 128 : 0);
                    }
                    for (int t = 0; t < nt; t++) {
                        const int8_t *q = qx.q[t] + c;
                        float d = qx.d[t][c / 32];
                        for (int j = 0; j < 8; j++) {
                            int li = code[4 * j] * q[4 * j] + code[4 * j + 1] * q[4 * j + 1] +
                                     code[4 * j + 2] * q[4 * j + 2] + code[4 * j + 3] * q[4 * j + 3];
                            gl[t][j] += d * (float)li;
                        }
                    }
                }
                for (int t = 0; t < nt; t++) {
                    float xsg = qx.xs[t][g * gs / 32];
                    for (int c = g * gs + 32; c < (g + 1) * gs; c += 32) xsg += qx.xs[t][c / 32];
                    for (int j = 0; j < 8; j++) acc[t][j] += s * gl[t][j];
                    bsum[t] += b * xsg;
                }
            }
            for (int t = 0; t < nt; t++) y[(size_t)(t0 + t) * ldy + o] = ink_lanes_sum(acc[t]) + bsum[t];
        }
    }
}

static void scalar_rows(const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy, int r0, int r1, int int8)
{
    if (int8 && ink_int8_ok(W)) {
        scalar_rows_int8(W, x, ldx, T, y, ldy, r0, r1);
        return;
    }
    int K = W->cols, K8 = K & ~7;
    float w8[8];
    for (int t0 = 0; t0 < T; t0 += ST) {
        int nt = T - t0 < ST ? T - t0 : ST;
        for (int o = r0; o < r1; o++) {
            float acc[ST][8] = {{0}};
            for (int c = 0; c < K8; c += 8) {
                decode8(W, o, c, w8);
                for (int t = 0; t < nt; t++) {
                    const float *xt = x + (size_t)(t0 + t) * ldx + c;
                    for (int j = 0; j < 8; j++) acc[t][j] += w8[j] * xt[j];
                }
            }
            for (int t = 0; t < nt; t++) {
                const float *xt = x + (size_t)(t0 + t) * ldx;
                float s = ink_lanes_sum(acc[t]);
                for (int i = K8; i < K; i++) s += weight_at(W, o, i) * xt[i];
                if (W->dtype == INK_QT_NVFP4) s *= W->gscale;
                y[(size_t)(t0 + t) * ldy + o] = s;
            }
        }
    }
}

/* ---- attention (the scalar set; see kernels.h for the contract) --------------------------- */

size_t ink_attn_ws_floats(int d, int R, int n_keys)
{
    size_t dp = (size_t)ink_round16(d), Rp = (size_t)ink_round16(R) + 16;
    return INK_ATTN_MAXQ * (dp + Rp + (size_t)ink_round16(n_keys)) + 32 * dp + 16;
}

float ink_exp_poly(float x) { return ink_exp_scalar(x); }

/* ink_silu_mul with set k */
static void silu_k(const ink_kernels *k, float *o, const float *g, const float *u, int n, int step);

void ink_silu_mul(float *o, const float *g, const float *u, int n, int step)
{
    silu_k(ink_kernels_active(), o, g, u, n, step);
}

static void silu_k(const ink_kernels *k, float *o, const float *g, const float *u, int n, int step)
{
    if (k->silu_mul && k->silu_mul(o, g, u, n, step)) return;
    float b[256], e[256];
    for (int i0 = 0; i0 < n; i0 += 256) {
        int m = n - i0 < 256 ? n - i0 : 256;
        const float *gi = g + (size_t)i0 * step, *ui = u + (size_t)i0 * step;
        for (int j = 0; j < m; j++) b[j] = -gi[(size_t)j * step];
        if (k->expv) k->expv(b, e, m);
        else
            for (int j = 0; j < m; j++) e[j] = ink_exp_scalar(b[j]);
        for (int j = 0; j < m; j++) { /* reads at or after the write position: in place is safe */
            float z = gi[(size_t)j * step], v = ui[(size_t)j * step];
            o[i0 + j] = z / (1.0f + e[j]) * v;
        }
    }
}

/* Relative logits of query i by distance, lrel[e] for e < min(hi - lo + 1, R): r in order. */
static void scalar_rel(const ink_attn *a, int i, float *lrel)
{
    int n = a->hi[i] - a->lo[i] + 1, nrel = n < a->R ? n : a->R;
    for (int e = 0; e < nrel; e++) lrel[e] = 0.0f;
    for (int r = 0; r < a->dr; r++) {
        const float *P = a->rel + (size_t)r * a->R;
        float coef = a->rs[i][r];
        for (int e = 0; e < nrel; e++) lrel[e] += coef * P[e];
    }
}

/* Softmax of query i's scores si[0 .. n) in place (relative logits added first); returns 1 / sum.
 * Sum in 8 lanes by (j - lo) % 8, combined as ink_lanes_sum. */
static float scalar_softmax(const ink_attn *a, int i, float *si, const float *lrel)
{
    int n = a->hi[i] - a->lo[i] + 1, nrel = n < a->R ? n : a->R;
    float tau = a->tau[i];
    for (int e = 0; e < nrel; e++) si[n - 1 - e] += tau * lrel[e];
    float mx = si[0];
    for (int m = 1; m < n; m++) mx = si[m] > mx ? si[m] : mx;
    float lane[8] = {0};
    int m = 0;
    for (; m + 8 <= n; m += 8)
        for (int l = 0; l < 8; l++) {
            float e = ink_exp_scalar(si[m + l] - mx);
            si[m + l] = e;
            lane[l] += e;
        }
    for (int l = 0; m + l < n; l++) {
        float e = ink_exp_scalar(si[m + l] - mx);
        si[m + l] = e;
        lane[l] += e;
    }
    return 1.0f / ink_lanes_sum(lane);
}

static void scalar_attn(const ink_attn *a)
{
    ink_attn_lay w = ink_attn_layout(a);
    int d = a->d, nq = a->nq, cap = a->cap;
    float div = (float)d;
    for (int i = 0; i < nq; i++) {
        float *qt = w.qt + (size_t)i * w.dp;
        for (int c = 0; c < d; c++) qt[c] = a->tau[i] * a->q[i][c];
        scalar_rel(a, i, w.lrel + (size_t)i * w.Rp);
    }
    /* scores: blocks of 8 keys transposed to kt[c][8]; one chain over c per (query, key) */
    int slot = w.L % cap;
    for (int jb = w.L; jb <= w.P; jb += 8) {
        int nb = w.P - jb + 1 < 8 ? w.P - jb + 1 : 8;
        for (int l = 0; l < 8; l++) {
            const float *row = a->k + (size_t)slot * a->ld;
            for (int c = 0; c < d; c++) w.kt[c * 8 + l] = l < nb ? row[c] : 0.0f;
            if (l < nb) slot = slot + 1 == cap ? 0 : slot + 1;
        }
        for (int i = 0; i < nq; i++) {
            const float *qt = w.qt + (size_t)i * w.dp;
            float acc[8] = {0};
            for (int c = 0; c < d; c++)
                for (int l = 0; l < 8; l++) acc[l] += qt[c] * w.kt[c * 8 + l];
            float *si = w.s + (size_t)i * w.ls + (jb - w.L);
            for (int l = 0; l < nb; l++) si[l] = acc[l] / div;
        }
    }
    /* softmax, then P.V in ascending key order */
    for (int i = 0; i < nq; i++) {
        float *si = w.s + (size_t)i * w.ls + (a->lo[i] - w.L);
        float inv = scalar_softmax(a, i, si, w.lrel + (size_t)i * w.Rp);
        float *o = a->o[i];
        for (int c = 0; c < d; c++) o[c] = 0.0f;
        int sl = a->lo[i] % cap;
        for (int j = a->lo[i]; j <= a->hi[i]; j++) {
            const float *v = a->v + (size_t)sl * a->ld;
            float p = si[j - a->lo[i]];
            for (int c = 0; c < d; c++) o[c] += p * v[c];
            sl = sl + 1 == cap ? 0 : sl + 1;
        }
        for (int c = 0; c < d; c++) o[c] *= inv;
    }
}

static const ink_kernels scalar_set = {"scalar", scalar_rows, scalar_attn, NULL, NULL, NULL, NULL,
                                       NULL,     NULL,        NULL,        NULL, NULL, NULL}; /* probes: the bench's loops */

const ink_kernels *ink_kernels_scalar(void) { return &scalar_set; }

/* No NEON set yet: aarch64 builds run the scalar set (see docs/benchmarks.md). */
const ink_kernels *ink_kernels_neon(void) { return NULL; }

#if !(defined(__x86_64__) && defined(__GNUC__))
const ink_kernels *ink_kernels_avx2_raw(void) { return NULL; }
const ink_kernels *ink_kernels_avx512_raw(void) { return NULL; }
#endif

const ink_kernels *ink_kernels_avx512(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vbmi") &&
        __builtin_cpu_supports("avx512vnni"))
        return ink_kernels_avx512_raw();
#endif
    return NULL;
}

const ink_kernels *ink_kernels_avx2(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return ink_kernels_avx2_raw();
#endif
    return NULL;
}

static _Atomic(const ink_kernels *) active;

static const ink_kernels *best(void)
{
    const ink_kernels *k = ink_kernels_avx512();
    if (!k) k = ink_kernels_avx2();
    if (!k) k = ink_kernels_neon();
    return k ? k : &scalar_set;
}

const ink_kernels *ink_kernels_active(void)
{
    const ink_kernels *k = atomic_load(&active);
    if (!k) {
        k = best();
        atomic_store(&active, k);
    }
    return k;
}

void ink_kernels_select(const ink_kernels *k) { atomic_store(&active, k ? k : best()); }
int ink_mat_int8(const ink_mat *W) { return W->int8 && ink_int8_ok(W); }

/* ---- threaded driver ---------------------------------------------------------------------- */

int ink_mat_bf16x(const ink_mat *W) { return W->bf16x && W->dtype == INK_DT_BF16 && W->cols <= INK_BX_MAXK; }

void ink_bf16x_round(uint16_t *dst, const float *x, int n)
{
    for (int i = 0; i < n; i++) {
        union { float f; uint32_t u; } v = {x[i]};
        if (!(v.u & 0x7f800000u)) v.u &= 0x80000000u; /* zero and denormals: signed zero */
        dst[i] = ink_f32_to_bf16(v.f);
    }
}

typedef struct mm_ctx {
    const ink_kernels *k;
    const ink_mat *W;
    const float *x;
    float *y;
    int ldx, ldy, T, int8;
    const uint16_t *xb; /* bf16 activations (native path), xb[t * ldx + k] */
    int pairs;          /* x is reordered for the set's rows_pairs */
} mm_ctx;

#define MM_CHUNK_MIN ((size_t)256 << 10)
#define MM_SMALL 32768 /* multiply-adds below which a matmul runs on the caller alone */

/* Items are 4-row quads (tiles stay whole); any partition gives the same result. */
static void mm_task(void *arg, int q0, int q1, int tid)
{
    (void)tid;
    mm_ctx *c = arg;
    int R = c->W->rows, r0 = q0 * 4, r1 = q1 * 4 < R ? q1 * 4 : R;
    if (r1 <= r0) return;
    if (c->xb) c->k->rows_bf16x(c->W, c->xb, c->ldx, c->T, c->y, c->ldy, r0, r1);
    else if (c->pairs) c->k->rows_pairs(c->W, c->x, c->ldx, c->T, c->y, c->ldy, r0, r1);
    else c->k->rows(c->W, c->x, c->ldx, c->T, c->y, c->ldy, r0, r1, c->int8);
}

static void mm_run(ink_pool *p, mm_ctx *c);

/* bf16 activations: rounded once per call on the caller's stack (the workers read them there while
 * the caller waits), in blocks of tokens that fit; rows never depend on the blocking. */
#define BX_BUF 65536 /* bf16 elements: 128 KiB */
static void matmul_bx(const ink_kernels *k, ink_pool *p, const ink_mat *W, const float *x, int ldx, int T, float *y,
                      int ldy)
{
    union {
        uint16_t h[BX_BUF];
        float f[BX_BUF / 2];
    } buf;
    int K = W->cols, native = k->rows_bf16x && k->bf16x_ok && k->bf16x_ok();
    int tb = (native ? BX_BUF : BX_BUF / 2) / K;
    for (int t0 = 0; t0 < T; t0 += tb) {
        int nt = T - t0 < tb ? T - t0 : tb;
        mm_ctx c = {k, W, NULL, y + (size_t)t0 * ldy, K, ldy, nt, 0, NULL, 0};
        if (native) {
            for (int t = 0; t < nt; t++)
                (k->bf16x_fill ? k->bf16x_fill : ink_bf16x_round)(buf.h + (size_t)t * K, x + (size_t)(t0 + t) * ldx, K);
            c.xb = buf.h;
        } else { /* the set's f32 path on the rounded values (products exact either way) */
            uint16_t h[256];
            for (int t = 0; t < nt; t++)
                for (int i = 0; i < K; i += 256) {
                    int n = K - i < 256 ? K - i : 256;
                    ink_bf16x_round(h, x + (size_t)(t0 + t) * ldx + i, n);
                    for (int j = 0; j < n; j++) buf.f[(size_t)t * K + i + j] = ink_bf16_to_f32(h[j]);
                }
            c.x = buf.f;
        }
        mm_run(p, &c);
    }
}

/* bf16 weights on f32 activations where the set takes them in lane pairs: x reordered once per call
 * on the caller's stack (as matmul_bx), in blocks of tokens that fit; rows never depend on the
 * blocking. */
#define PAIRS_BUF 65536 /* floats: 256 KiB */
static void matmul_pairs(const ink_kernels *k, ink_pool *p, const ink_mat *W, const float *x, int ldx, int T,
                         float *y, int ldy)
{
    float buf[PAIRS_BUF];
    int K = W->cols, tb = PAIRS_BUF / K;
    for (int t0 = 0; t0 < T; t0 += tb) {
        int nt = T - t0 < tb ? T - t0 : tb;
        for (int t = 0; t < nt; t++) k->pairs_fill(buf + (size_t)t * K, x + (size_t)(t0 + t) * ldx, K);
        mm_ctx c = {k, W, buf, y + (size_t)t0 * ldy, K, ldy, nt, 0, NULL, 1};
        mm_run(p, &c);
    }
}

void ink_matmul_k(const ink_kernels *k, ink_pool *p, const ink_mat *W, const float *x, int ldx, int T, float *y,
                  int ldy)
{
    if (ink_mat_bf16x(W)) {
        matmul_bx(k, p, W, x, ldx, T, y, ldy);
        return;
    }
    if (W->dtype == INK_DT_BF16 && k->rows_pairs && W->cols <= PAIRS_BUF) {
        matmul_pairs(k, p, W, x, ldx, T, y, ldy);
        return;
    }
    mm_ctx c = {k, W, x, y, ldx, ldy, T, ink_mat_int8(W), NULL, 0};
    mm_run(p, &c);
}

/* Quads per chunk for `quads` quads of `bytes` weight bytes in all: ~8 chunks per thread, so that a
 * thread the OS deschedules holds at most one small chunk and the others take the rest; but chunks
 * of at least MM_CHUNK_MIN weight bytes: each chunk starts its row streams cold (the prefetch
 * distance lands in the next chunk, often another thread's), and 16 chunks of a 576 x 256 bf16
 * matrix (two threads, from DRAM) read at 23 GB/s against 41 with one per thread (one thread alone:
 * 31); 4 MiB matrices were unchanged (50-60 GB/s). Any partition gives the same result. */
static int mm_grain(ink_pool *p, int quads, size_t bytes)
{
    int nth = ink_pool_size(p), grain = (quads + 8 * nth - 1) / (8 * nth);
    size_t qb = bytes / (size_t)quads + 1;
    if ((size_t)grain * qb < MM_CHUNK_MIN) grain = (int)((MM_CHUNK_MIN + qb - 1) / qb);
    if (nth > 1 && (long long)grain * nth > quads) grain = (quads + nth - 1) / nth;
    return grain;
}

/* Jobs (ink_matmul_jobs): items are the jobs' quads one job after another. */
typedef struct mm_jobs {
    const ink_kernels *k;
    int n;
    const ink_mm_job *j;
    unsigned char pairs[INK_MM_JOBS]; /* job i's x is reordered for the set's rows_pairs */
    int first[INK_MM_JOBS + 1];       /* job i's quads are items first[i] .. first[i + 1] - 1 */
} mm_jobs;

/* job j's activation of its rows r0 .. r1 - 1 (whole (gate, up) pairs: r0 even, r1 even) */
static void job_silu(const ink_kernels *k, const ink_mm_job *j, int r0, int r1)
{
    for (int t = 0; j->o && t < j->T; t++) {
        const float *yt = j->y + (size_t)t * j->ldy + r0;
        silu_k(k, j->o + (size_t)t * j->ldo + r0 / 2, yt, yt + 1, (r1 - r0) / 2, 2);
    }
}

/* rows r0 .. r1 - 1 of job j (r0 a multiple of 4), then their activation when it has one */
static void job_rows(const ink_kernels *k, const ink_mm_job *j, int pairs, int r0, int r1)
{
    if (pairs) k->rows_pairs(j->W, j->x, j->ldx, j->T, j->y, j->ldy, r0, r1);
    else k->rows(j->W, j->x, j->ldx, j->T, j->y, j->ldy, r0, r1, ink_mat_int8(j->W));
    job_silu(k, j, r0, r1);
}

static void mm_jobs_task(void *arg, int q0, int q1, int tid)
{
    (void)tid;
    const mm_jobs *c = arg;
    for (int i = 0; i < c->n; i++) {
        int lo = q0 > c->first[i] ? q0 : c->first[i], hi = q1 < c->first[i + 1] ? q1 : c->first[i + 1];
        if (lo >= hi) continue;
        int R = c->j[i].W->rows, r0 = (lo - c->first[i]) * 4, r1 = (hi - c->first[i]) * 4 < R ? (hi - c->first[i]) * 4 : R;
        job_rows(c->k, &c->j[i], c->pairs[i], r0, r1);
    }
}

void ink_matmul_jobs_k(const ink_kernels *k, ink_pool *p, int n, const ink_mm_job *jobs)
{
    /* bf16 views the set takes in lane pairs: their x reordered once on the caller's stack (as
     * matmul_pairs; jobs on the same x share it), when it all fits */
    float buf[PAIRS_BUF];
    ink_mm_job local[INK_MM_JOBS];
    mm_jobs c = {k, n, local, {0}, {0}};
    int one_by_one = n > INK_MM_JOBS;
    size_t used = 0;
    for (int i = 0; i < n && !one_by_one; i++) {
        const ink_mm_job *j = &jobs[i];
        local[i] = *j;
        one_by_one = ink_mat_bf16x(j->W) || (j->o && j->W->rows % 2);
        if (one_by_one || !(c.pairs[i] = j->W->dtype == INK_DT_BF16 && k->rows_pairs)) continue;
        int K = j->W->cols, same = -1;
        for (int e = 0; e < i && same < 0; e++)
            if (c.pairs[e] && jobs[e].x == j->x && jobs[e].ldx == j->ldx && jobs[e].T >= j->T && jobs[e].W->cols == K)
                same = e;
        if (same >= 0) {
            local[i].x = local[same].x, local[i].ldx = K;
        } else if (used + (size_t)j->T * K <= PAIRS_BUF) {
            for (int t = 0; t < j->T; t++) k->pairs_fill(buf + used + (size_t)t * K, j->x + (size_t)t * j->ldx, K);
            local[i].x = buf + used, local[i].ldx = K, used += (size_t)j->T * K;
        } else
            one_by_one = 1;
    }
    if (one_by_one) { /* the activation after each matmul */
        for (int i = 0; i < n; i++) {
            ink_matmul_k(k, p, jobs[i].W, jobs[i].x, jobs[i].ldx, jobs[i].T, jobs[i].y, jobs[i].ldy);
            job_silu(k, &jobs[i], 0, jobs[i].W->rows & ~1);
        }
        return;
    }
    long long macs = 0;
    size_t bytes = 0;
    for (int i = 0; i < n; i++) {
        c.first[i + 1] = c.first[i] + (jobs[i].W->rows + 3) / 4;
        macs += (long long)jobs[i].W->rows * jobs[i].W->cols * jobs[i].T;
        bytes += ink_mat_bytes(jobs[i].W);
    }
    int quads = c.first[n];
    if (quads == 0) return;
    if (macs < MM_SMALL) {
        mm_jobs_task(&c, 0, quads, 0);
        return;
    }
    ink_pool_for(p, quads, mm_grain(p, quads, bytes), mm_jobs_task, &c); /* the jobs' rows together */
}

void ink_matmul_jobs(ink_pool *p, int n, const ink_mm_job *jobs) { ink_matmul_jobs_k(ink_kernels_active(), p, n, jobs); }

void ink_matmul_swiglu(ink_pool *p, const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy, float *o,
                       int ldo)
{
    ink_mm_job j = {W, x, ldx, T, y, ldy, o, ldo};
    ink_matmul_jobs(p, 1, &j);
}

static void mm_run(ink_pool *p, mm_ctx *cp)
{
    mm_ctx c = *cp;
    const ink_mat *W = c.W;
    int T = c.T;
    /* Small problems are not worth waking the workers. */
    if ((long long)W->rows * W->cols * T < MM_SMALL) {
        mm_task(&c, 0, (W->rows + 3) / 4, 0);
        return;
    }
    int quads = (W->rows + 3) / 4;
    ink_pool_for(p, quads, mm_grain(p, quads, ink_mat_bytes(W)), mm_task, &c);
}

void ink_matmul(ink_pool *p, const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy)
{
    ink_matmul_k(ink_kernels_active(), p, W, x, ldx, T, y, ldy);
}

void ink_matmul_rows(const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy, int r0, int r1)
{
    scalar_rows(W, x, ldx, T, y, ldy, r0, r1, 0);
}

/* ---- norm, conv, activations -------------------------------------------------------------- */

void ink_rmsnorm(float *y, const float *x, const float *w, int n, float eps)
{
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) y[i] = (w ? w[i] : 1.0f) * (x[i] * inv);
}

/* G rows from row r: each row's sum of squares is its own chain (ss[j] over i ascending), the G
 * chains interleaved so that their additions overlap instead of waiting on one another. */
static inline __attribute__((always_inline)) void norm_group(float *y, const float *x, const float *w, int r, int n,
                                                             float eps, const int G)
{
    float ss[8] = {0};
    const float *xr = x + (size_t)r * n;
    for (int i = 0; i < n; i++)
#pragma GCC unroll 8
        for (int j = 0; j < G; j++) ss[j] += xr[(size_t)j * n + i] * xr[(size_t)j * n + i];
    for (int j = 0; j < G; j++) {
        float inv = 1.0f / sqrtf(ss[j] / (float)n + eps);
        const float *xj = xr + (size_t)j * n;
        float *yj = y + (size_t)(r + j) * n;
        for (int i = 0; i < n; i++) yj[i] = (w ? w[i] : 1.0f) * (xj[i] * inv);
    }
}

/* Groups of 8 rows, then 4, then one at a time. */
void ink_rmsnorm_rows(float *y, const float *x, const float *w, int rows, int n, float eps)
{
    int r = 0;
    for (; r + 8 <= rows; r += 8) norm_group(y, x, w, r, n, eps, 8);
    for (; r + 4 <= rows; r += 4) norm_group(y, x, w, r, n, eps, 4);
    for (; r < rows; r++) ink_rmsnorm(y + (size_t)r * n, x + (size_t)r * n, w, n, eps);
}

void ink_sconv(const float *w, float *state, const float *u, float *y, int T, int C, int K, float *ext)
{
    int S = K - 1;
    memcpy(ext, state, (size_t)S * C * sizeof(float));
    memcpy(ext + (size_t)S * C, u, (size_t)T * C * sizeof(float));
    const ink_kernels *ks = ink_kernels_active();
    int lanes = ks->sconv_rows && ks->sconv_rows(w, ext, y, T, C, K);
    for (int t = 0; t < T && !lanes; t++) { /* the portable loop where the set did not take it */
        const float *row = ext + (size_t)t * C; /* ext row t = input t - (K-1) */
        float *yt = y + (size_t)t * C;
        const float *ut = ext + (size_t)(t + S) * C;
        for (int c = 0; c < C; c++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++) s += w[(size_t)c * K + k] * row[(size_t)k * C + c];
            yt[c] = ut[c] + s;
        }
    }
    memcpy(state, ext + (size_t)T * C, (size_t)S * C * sizeof(float));
}

float ink_logsigmoid(float z) { return fminf(z, 0.0f) - log1pf(expf(-fabsf(z))); }
