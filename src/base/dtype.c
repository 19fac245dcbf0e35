/* dtype.c — dtype names and widths, scalar format conversions (see dtype.h). Depends on libc only. */
#include "base/dtype.h"

#include <math.h>

static const struct {
    const char *name;
    int bits;
} dtypes[INK_DT_COUNT] = {
    [INK_DT_F32] = {"F32", 32},       [INK_DT_F16] = {"F16", 16},
    [INK_DT_BF16] = {"BF16", 16},     [INK_DT_F64] = {"F64", 64},
    [INK_DT_U8] = {"U8", 8},          [INK_DT_I8] = {"I8", 8},
    [INK_DT_U16] = {"U16", 16},       [INK_DT_I16] = {"I16", 16},
    [INK_DT_U32] = {"U32", 32},       [INK_DT_I32] = {"I32", 32},
    [INK_DT_U64] = {"U64", 64},       [INK_DT_I64] = {"I64", 64},
    [INK_DT_BOOL] = {"BOOL", 8},      [INK_DT_F8_E4M3] = {"F8_E4M3", 8},
    [INK_DT_F8_E5M2] = {"F8_E5M2", 8}, [INK_DT_F8_E8M0] = {"F8_E8M0", 8},
};

const char *ink_dtype_name(int dt) { return dt >= 0 && dt < INK_DT_COUNT ? dtypes[dt].name : "?"; }
int ink_dtype_bits(int dt) { return dt >= 0 && dt < INK_DT_COUNT ? dtypes[dt].bits : 0; }

float ink_f16_to_f32(uint16_t h)
{
    uint32_t s = (uint32_t)(h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 0) v = ldexpf((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexpf((float)(m | 1024), (int)e - 25);
    return s ? -v : v;
}

uint16_t ink_f32_to_bf16(float f)
{
    union { float f; uint32_t u; } v = {f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40); /* quiet NaN */
    uint32_t r = v.u + 0x7fffu + ((v.u >> 16) & 1);
    return (uint16_t)(r >> 16);
}

uint16_t ink_f32_to_f16(float f)
{
    union { float f; uint32_t u; } v = {f};
    uint32_t s = (v.u >> 16) & 0x8000u, a = v.u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00u); /* rounds to inf */
    if (a < 0x38800000u) {                                /* subnormal half (or zero) */
        float q = fabsf(f) * 16777216.0f;                 /* exact scale by 2^24 */
        return (uint16_t)(s | (uint32_t)lrintf(q));       /* lrint: round-to-nearest-even */
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1);
    return (uint16_t)(s | ((r - 0x38000000u) >> 13));
}

float ink_e4m3_to_f32(uint8_t b)
{
    uint32_t s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    float v;
    if (e == 15 && m == 7) return NAN;
    if (e == 0) v = ldexpf((float)m, -9);
    else v = ldexpf((float)(8 + m), (int)e - 10);
    return s ? -v : v;
}
