/*
 * ckpt.h — writer of tiny random Inkling checkpoints in the release format (config.json with
 * text_config / mtp_config, safetensors under the release names), for tests and the demo model.
 *
 * Every logical tensor's values depend only on (seed, logical name), so two checkpoints written
 * with different layouts (naming, sharding, dtype) hold the same weights: a layout test compares
 * outputs bitwise. Fused gate/up tensors are written row-interleaved (release), half-split (HF
 * gate_up_proj) or pre-split, all from the same logical gate and up matrices.
 */
#ifndef INK_TEST_CKPT_H
#define INK_TEST_CKPT_H

#include <stdint.h>

enum { TINY_NAMES_RELEASE, TINY_NAMES_HF, TINY_NAMES_PRESPLIT };

typedef struct tiny_spec {
    int hidden, n_layer, vocab, vocab_unpadded; /* vocab_unpadded 0: written as null */
    int n_head, n_kv, head_dim, swa_n_head, swa_n_kv, swa_head_dim;
    int window, rel_extent, d_rel, conv_k;
    int dense_inter, expert_inter, n_expert, top_k, n_shared, dense_mlp_idx;
    int n_local, local[64];                     /* sliding layers */
    float route_scale, mup, eps;
    int log_floor;                              /* 0: null */
    int max_ctx, eos;
    int mtp_depth, n_mtp_local, mtp_local[16];
    int mtp_file;                               /* 1: MTP tensors in an unindexed mtp.safetensors */
    int bf16;                                   /* 1: BF16 weights (router bias / global scales stay F32) */
    int bf16_values;                            /* 1: F32 storage of bf16-rounded values (twin of bf16) */
    int naming;                                 /* TINY_NAMES_* */
    int swap_gate_up;                           /* 1: write up where gate belongs (orientation tests) */
    int n_shards;                               /* >1: sharded with model.safetensors.index.json */
    uint64_t seed;
    float wscale;                               /* weight magnitude (uniform in [-wscale, wscale]) */
    /* Quantized output (MLX affine, formats.md §4-5): every 2-D / stacked linear weight whose input
     * width is a multiple of the group (not norms, convs, rel_logits_proj, the router) is quantized with
     * the MLX algorithm and written as U32 weight + BF16 scales / biases, with a `quantization` block
     * (mirrored in `quantization_config`) in config.json. */
    int qbits, qgroup;                          /* 0: no quantization */
    int qtwin;                                  /* 1: same decisions, but write the dequantized F32 values */
    const char *q8_match;                       /* modules whose name contains it: 8-bit override (dict) */
    const char *qskip_match;                    /* modules whose name contains it: left float, override false */
    int qembed;                                 /* also quantize embed / unembed */
    int q_runtime_keys;                         /* override keys in mlx-vlm runtime names (language_model...) */
    int nvfp4;                                  /* NVFP4 routed experts (U8 + F8_E4M3 .scale + F32 .scale2) */
    const char *nvfp4_skip;                     /* expert stacks whose name contains it stay float */
    int misalign;                               /* 1: header of 8k + 1 bytes: every tensor's data start at an
                                                 * odd file offset (legal, formats.md §1) */
} tiny_spec;

/* The synthetic config of inkling-text.md §6 (all code paths live). */
void tiny_default(tiny_spec *s);
/* Writes config.json and the safetensors into `dir` (created if missing). 0 on success, -1 on
 * failure with a message on stderr. */
int tiny_write(const char *dir, const tiny_spec *s);
/* MLX affine quantization of one row of n weights in groups of gs (formats.md §4.4): packed codes,
 * BF16 scales and biases; deq (NULL: not wanted) gets the dequantized values. */
void tiny_mlx_quant_row(const float *w, int n, int bits, int gs, uint8_t *packed, uint16_t *sc, uint16_t *bi,
                        float *deq);
/* Writes a raw safetensors file from a JSON header text and `data_len` bytes of data (tests of
 * malformed files). 0 on success. */
int tiny_write_raw(const char *path, const char *header, uint64_t header_len_field, const void *data, uint64_t data_len);

#endif
