/* quant.c — MLX affine and NVFP4 weight quantizers (see quant.h). */
#include "quant/quant.h"

#include "base/dtype.h"

#include <math.h>
#include <string.h>

/* Writes code q into the row's bit stream at element j (formats.md §4.3). */
static void put_bits(uint8_t *row, size_t j, int bits, unsigned q)
{
    size_t bit = j * (size_t)bits;
    uint32_t v = (uint32_t)q << (bit & 7);
    uint8_t *p = row + bit / 8;
    for (int k = 0; v && k < 3; k++, v >>= 8) p[k] |= (uint8_t)v;
}

void ink_qaffine_row(const float *w, int n, int bits, int gs, uint8_t *packed, float *scales, float *biases)
{
    const float n_bins = (float)((1 << bits) - 1);
    memset(packed, 0, (size_t)n * (size_t)bits / 8);
    for (int g = 0; g < n / gs; g++) {
        const float *v = w + (size_t)g * (size_t)gs;
        float lo = INFINITY, hi = -INFINITY;
        for (int i = 0; i < gs; i++) {
            hi = fmaxf(hi, v[i]);
            lo = fminf(lo, v[i]);
        }
        /* MLX: the endpoint of larger magnitude is made exact; the scale's sign follows it */
        int lo_edge = fabsf(lo) > fabsf(hi);
        float s = fmaxf((hi - lo) / n_bins, 1e-7f);
        if (!lo_edge) s = -s;
        float edge = lo_edge ? lo : hi, bias = 0.0f;
        float q0 = rintf(edge / s);
        if (q0 != 0.0f) {
            s = edge / q0;
            bias = edge;
        }
        for (int i = 0; i < gs; i++) {
            float q = rintf((v[i] - bias) / s);
            q = fminf(fmaxf(q, 0.0f), n_bins);
            put_bits(packed, (size_t)g * (size_t)gs + (size_t)i, bits, (unsigned)q);
        }
        scales[g] = s;
        biases[g] = bias;
    }
}

uint8_t ink_f32_to_e4m3(float v)
{
    if (isnan(v)) return 0x7F;
    uint8_t sign = signbit(v) ? 0x80 : 0;
    float a = fabsf(v);
    if (a >= 448.0f) return sign | 0x7E;
    if (a < 0.015625f) /* subnormal: m * 2^-9; m == 8 is the smallest normal, code 0x08 */
        return sign | (uint8_t)rintf(a * 512.0f);
    int e;
    float f = frexpf(a, &e); /* a = f * 2^e, f in [0.5, 1) */
    int E = e - 1, mant = (int)rintf((2.0f * f - 1.0f) * 8.0f);
    if (mant == 8) mant = 0, E++;
    int biased = E + 7;
    if (biased > 15 || (biased == 15 && mant == 7)) return sign | 0x7E;
    return sign | (uint8_t)(biased << 3 | mant);
}

uint8_t ink_f32_to_e2m1(float v)
{
    uint8_t sign = signbit(v) ? 8 : 0;
    float x = fabsf(v);
    if (isnan(v)) return 7;
    /* midpoints between the magnitudes; at a tie the even code wins */
    uint8_t c = x > 5.0f ? 7 : x >= 3.5f ? 6 : x > 2.5f ? 5 : x >= 1.75f ? 4 : x > 1.25f ? 3 : x >= 0.75f ? 2
              : x > 0.25f ? 1 : 0;
    return sign | c;
}

float ink_nvfp4_scale2(float amax) { return amax > 0.0f ? amax / (6.0f * 448.0f) : 1.0f; }

void ink_qnvfp4_row(const float *w, int n, float s2, uint8_t *codes, uint8_t *scales)
{
    memset(codes, 0, (size_t)n / 2);
    for (int b = 0; b < n / 16; b++) {
        const float *v = w + (size_t)b * 16;
        float bm = 0.0f;
        for (int i = 0; i < 16; i++) bm = fmaxf(bm, fabsf(v[i]));
        uint8_t e = ink_f32_to_e4m3(bm / 6.0f / s2);
        scales[b] = e;
        float sv = ink_e4m3_to_f32(e) * s2;
        for (int i = 0; i < 16; i++) {
            uint8_t c = sv > 0.0f ? ink_f32_to_e2m1(v[i] / sv) : 0;
            codes[(size_t)b * 8 + (size_t)i / 2] |= (uint8_t)(c << (4 * (i & 1)));
        }
    }
}
