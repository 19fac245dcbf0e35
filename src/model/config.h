/*
 * config.h — config.json of an Inkling checkpoint -> validated hyper-parameters (inkling-text.md §1).
 *
 * Accepts the release layout (top level + text_config + mtp_config) and the flat HF text layout
 * (fields at the top level), in native and HF spellings. Required fields are required; flags are
 * checked against the only values the architecture has; absurd values (zero, negative,
 * inconsistent) are refused with the field's name, what was expected and what was found.
 * Depends on base and Jansson.
 */
#ifndef INK_CONFIG_H
#define INK_CONFIG_H

#include "inkling.h"

#include <stdint.h>

#define INK_MAX_LAYERS 512
#define INK_MAX_TOPK 64
#define INK_MAX_SHARED 64

typedef struct ink_layer_cfg {
    int sliding;   /* 1: sliding-window ("local") layer */
    int moe;       /* 1: routed MoE MLP, 0: dense SwiGLU */
    int n_head, n_kv, head_dim;
    int rel_extent; /* R: columns of rel_logits_proj.proj (window on sliding layers) */
    int window;     /* W on sliding layers, 0 on global layers */
    int log_scale;  /* 1: tau applies (global layers with log_scaling_n_floor set) */
} ink_layer_cfg;

typedef struct ink_config {
    char architecture[96], model_type[64];
    int flat;                 /* 1: text fields at the top level (InklingForCausalLM) */
    int hidden, n_layer, vocab, vocab_unpadded;
    int n_head, n_kv, head_dim, swa_n_head, swa_n_kv, swa_head_dim;
    int window, rel_extent, d_rel, conv_k;
    int dense_inter, expert_inter; /* I_d and I (native meanings) */
    int n_expert, n_expert_used, n_shared;
    float eps, route_scale, mup, log_alpha;
    double log_floor;         /* 0: log scaling disabled */
    int max_ctx, eos;
    int n_sliding, n_moe;
    ink_layer_cfg layers[INK_MAX_LAYERS];
    /* MTP (mtp_config, else text_config num_mtp_layers / mtp_local_layer_ids) */
    int mtp_depth;
    int mtp_chain_post_norm;
    int mtp_n_local;
    int mtp_local[64];
    int has_mtp_config;
    int has_quant_config;     /* config.json carries quantization / quantization_config */
} ink_config;

/* Parses `path`. Fills *c on success. */
int ink_config_load(ink_config *c, const char *path, ink_err *err);
/* Same from a JSON text (for tests and fuzzing); `what` names the source in messages. */
int ink_config_parse(ink_config *c, const char *text, size_t len, const char *what, ink_err *err);
/* Geometry of a dense Inkling block used by the MTP head at depth m (sliding iff m is in
 * mtp_local). */
ink_layer_cfg ink_config_mtp_layer(const ink_config *c, int m);

#endif
