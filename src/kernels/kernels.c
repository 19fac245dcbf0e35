/* kernels.c — portable kernels (see kernels.h). The dot products keep 8 independent partial sums
 * combined in a fixed order, which the compiler vectorises and which is thread-count independent. */
#include "kernels/kernels.h"

#include "load/safetensors.h"

#include <math.h>
#include <string.h>

static float dot_f32(const float *w, const float *x, int n)
{
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += w[i + j] * x[i + j];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += w[i] * x[i];
    return s;
}

static float dot_bf16(const uint16_t *w, const float *x, int n)
{
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += ink_bf16_to_f32(w[i + j]) * x[i + j];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += ink_bf16_to_f32(w[i]) * x[i];
    return s;
}

static float dot_f16(const uint16_t *w, const float *x, int n)
{
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += ink_f16_to_f32(w[i + j]) * x[i + j];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += ink_f16_to_f32(w[i]) * x[i];
    return s;
}

void ink_matmul_rows(const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy, int r0, int r1)
{
    for (int o = r0; o < r1; o++) {
        for (int t = 0; t < T; t++) {
            const float *xt = x + (size_t)t * ldx;
            float v;
            if (W->dtype == INK_DT_F32) v = dot_f32((const float *)W->data + (size_t)o * W->stride, xt, W->cols);
            else if (W->dtype == INK_DT_BF16)
                v = dot_bf16((const uint16_t *)W->data + (size_t)o * W->stride, xt, W->cols);
            else v = dot_f16((const uint16_t *)W->data + (size_t)o * W->stride, xt, W->cols);
            y[(size_t)t * ldy + o] = v;
        }
    }
}

typedef struct mm_ctx {
    const ink_mat *W;
    const float *x;
    float *y;
    int ldx, ldy, T;
} mm_ctx;

static void mm_task(void *arg, int ith, int nth)
{
    mm_ctx *c = arg;
    int R = c->W->rows;
    int r0 = (int)((long long)R * ith / nth), r1 = (int)((long long)R * (ith + 1) / nth);
    ink_matmul_rows(c->W, c->x, c->ldx, c->T, c->y, c->ldy, r0, r1);
}

void ink_matmul(ink_pool *p, const ink_mat *W, const float *x, int ldx, int T, float *y, int ldy)
{
    mm_ctx c = {W, x, y, ldx, ldy, T};
    /* Small problems are not worth waking the workers. */
    if ((long long)W->rows * W->cols * T < 32768) ink_matmul_rows(W, x, ldx, T, y, ldy, 0, W->rows);
    else ink_pool_run(p, mm_task, &c);
}

void ink_mat_row(const ink_mat *W, int r, float *out)
{
    if (W->dtype == INK_DT_F32) {
        memcpy(out, (const float *)W->data + (size_t)r * W->stride, (size_t)W->cols * sizeof(float));
        return;
    }
    const uint16_t *s = (const uint16_t *)W->data + (size_t)r * W->stride;
    for (int i = 0; i < W->cols; i++) out[i] = W->dtype == INK_DT_BF16 ? ink_bf16_to_f32(s[i]) : ink_f16_to_f32(s[i]);
}

void ink_rmsnorm(float *y, const float *x, const float *w, int n, float eps)
{
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) y[i] = (w ? w[i] : 1.0f) * (x[i] * inv);
}

void ink_sconv(const float *w, float *state, const float *u, float *y, int T, int C, int K, float *ext)
{
    int S = K - 1;
    memcpy(ext, state, (size_t)S * C * sizeof(float));
    memcpy(ext + (size_t)S * C, u, (size_t)T * C * sizeof(float));
    for (int t = 0; t < T; t++) {
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
