/*
 * dtype.h — element types of tensor data (the safetensors dtype codes), their names and widths, and
 * the scalar conversions every layer uses: unaligned loads and bf16 / f16 / e4m3 widening. Below
 * both the loader (src/load) and the kernels (src/kernels), which otherwise know nothing of each
 * other. Depends on libc only; no state.
 */
#ifndef INK_DTYPE_H
#define INK_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum ink_dtype {
    INK_DT_F32, INK_DT_F16, INK_DT_BF16, INK_DT_F64,
    INK_DT_U8, INK_DT_I8, INK_DT_U16, INK_DT_I16, INK_DT_U32, INK_DT_I32, INK_DT_U64, INK_DT_I64,
    INK_DT_BOOL, INK_DT_F8_E4M3, INK_DT_F8_E5M2, INK_DT_F8_E8M0,
    INK_DT_COUNT
};

const char *ink_dtype_name(int dtype); /* "F32", "BF16", ...; "?" for a code outside the enum */
int ink_dtype_bits(int dtype);         /* 0 for a code outside the enum */

/* Element i of a mapped array that may sit at any address (formats.md: a reader must not assume
 * tensor data are aligned): memcpy loads, no alignment UB; compilers emit one plain load. */
static inline uint16_t ink_ld_u16(const void *p, size_t i)
{
    uint16_t v;
    memcpy(&v, (const unsigned char *)p + 2 * i, sizeof v);
    return v;
}
static inline float ink_ld_f32(const void *p, size_t i)
{
    float v;
    memcpy(&v, (const unsigned char *)p + 4 * i, sizeof v);
    return v;
}

/* Scalar conversions used by loaders and reference kernels. */
static inline float ink_bf16_to_f32(uint16_t h)
{
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}
float ink_f16_to_f32(uint16_t h);
uint16_t ink_f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */
uint16_t ink_f32_to_f16(float f);  /* round to nearest even */
float ink_e4m3_to_f32(uint8_t b);

#endif
