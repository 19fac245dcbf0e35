/*
 * quant.h — weight quantizers, the writing side of formats.md §4 and §3.2: MLX affine (MLX's own
 * algorithm, bit for bit: per group min/max, the edge made exact, round half to even, the packed bit
 * stream of §4.3) and NVFP4 as the release stores it (E2M1 codes, E4M3 block scales of 16, one F32
 * global scale per matrix). Pure functions of their inputs; no state, no allocation. The checkpoint
 * converter built on them is `ink_quantize` (include/inkling.h, src/quant/convert.c).
 */
#ifndef INK_QUANT_H
#define INK_QUANT_H

#include <stddef.h>
#include <stdint.h>

/* MLX affine quantization of one row of n weights (n a multiple of gs) in groups of gs with `bits`
 * in {2,3,4,5,6,8}: writes n*bits/8 bytes of packed codes (element j in stream bits j*b..j*b+b-1,
 * LSB first) and n/gs scales and biases as f32 (the caller rounds them to the file's dtype, as MLX
 * does: the codes are chosen with the unrounded scale). */
void ink_qaffine_row(const float *w, int n, int bits, int gs, uint8_t *packed, float *scales, float *biases);

/* f32 -> FP8 E4M3 (bias 7, no infinities, max 448), round to nearest even; values beyond 448
 * saturate to 448, NaN gives 0x7F. */
uint8_t ink_f32_to_e4m3(float v);
/* f32 -> E2M1 code (sign bit 8; magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6), round to nearest, ties to
 * the even code; beyond 6 saturates. */
uint8_t ink_f32_to_e2m1(float v);

/* NVFP4 global scale of a matrix whose largest magnitude is amax: amax / (6 * 448) (1 when 0). */
float ink_nvfp4_scale2(float amax);
/* One row of n weights (n a multiple of 16) with global scale s2: n/2 bytes of codes (element 2k in
 * the low nibble of byte k) and n/16 E4M3 block scales (block amax / 6 / s2). */
void ink_qnvfp4_row(const float *w, int n, float s2, uint8_t *codes, uint8_t *scales);

#endif
