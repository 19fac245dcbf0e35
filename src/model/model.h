/*
 * model.h — internal structures of a loaded Inkling model and of one decoder layer's cache.
 *
 * ink_model binds every tensor to a field once at load (no string lookup afterwards). Large
 * matrices are views into the mmapped safetensors (ink_mat); small vectors (norms, conv taps,
 * relative-position banks, router bias) are widened to f32 copies owned by the model.
 *
 * The decoder layer (ink_layer_forward) is shared by the backbone and the MTP blocks: each caller
 * owns an ink_layer_cache per layer/block and an ink_scratch sized with ink_scratch_need.
 */
#ifndef INK_MODEL_H
#define INK_MODEL_H

#include "base/pool.h"
#include "inkling.h"
#include "kernels/kernels.h"
#include "load/tdir.h"
#include "model/config.h"

/* Rows per internal forward, for the target session and the MTP drafter alike: the prefill chunk,
 * the verify width limit and the rollback slack of every KV ring (ink_layer_kv_cap), the row count
 * every ink_scratch and capture buffer is sized for. The generator (src/gen) advances its prefill
 * and drafter pipeline in steps of the same size, so each step is one forward. */
#define INK_CHUNK 64

typedef struct ink_attn_w {
    ink_mat wq, wk, wv, wr, wo;  /* [n_h*d,H] [n_kv*d,H] [n_kv*d,H] [n_h*d_rel,H] [H,n_h*d] */
    float *q_norm, *k_norm;      /* [d] */
    float *k_conv, *v_conv;      /* [n_kv*d][K] */
    float *rel;                  /* [d_rel][R] rel_logits_proj.proj */
} ink_attn_w;

typedef struct ink_ffn_w {       /* one SwiGLU: dense MLP, routed expert or shared expert */
    ink_mat gate, up, down;      /* [I,H] [I,H] [H,I] */
    /* gate and up as one matrix [2I,H] where the checkpoint stores them in one tensor: gu_mode 1 =
     * row-interleaved (release w13: row 2i gate i, row 2i+1 up i), 2 = half split (HF gate_up_proj);
     * 0 = separate tensors (gu unused). One matmul streams the rows in storage order, where two
     * strided views would each skip every other row (the per-row arithmetic is the same, so the
     * outputs are bitwise those of the two views). */
    ink_mat gu;
    int gu_mode;
} ink_ffn_w;

typedef struct ink_layer_w {
    ink_layer_cfg cfg;
    float *attn_norm, *mlp_norm;   /* [H] */
    float *attn_conv, *mlp_conv;   /* [H][K] */
    ink_attn_w at;
    ink_ffn_w dense;               /* dense layers */
    float dense_scale;             /* mlp.global_scale */
    ink_mat router;                /* [E+S, H] */
    float *router_bias;            /* [E] */
    float router_scale;            /* gate.global_scale */
    ink_ffn_w *experts;            /* [E] */
    ink_ffn_w *shared;             /* [S] */
    int inter;                     /* I of this layer's SwiGLU (I_d dense, I MoE) */
} ink_layer_w;

/* One tensor directory's weights as they are bound to fields (load.c's ink_bind_*), for the model and
 * the MTP drafter alike: the config, the tensor table, the options of the views binding makes, and
 * the f32 copies and arrays it owns. Ownership: ink_weights_free frees what it owns and closes the
 * table; the views point into the table's mappings, so they live as long as it. */
typedef struct ink_weights {
    const ink_config *cfg;         /* the config shapes are checked against (the owner's, borrowed) */
    ink_tdir td;
    int act_int8;                  /* quantized views use int8 activations (ink_model_opts.activations) */
    int act_bf16;                  /* BF16 views use bf16 activations (INK_ACT_BF16) */
    int header_only;               /* opened with ink_model_opts.header_only: no tensor data */
    void **owned;                  /* f32 copies and arrays to free */
    int n_owned, cap_owned;
} ink_weights;

/* Expert parallelism of a model opened with ink_model_opts.expert_parallel (ep.c). Owned by the model. */
typedef struct ink_ep {
    ink_ep_transport t;            /* copied; t.ctx borrowed */
    int e0, e1;                    /* this rank's routed experts */
    const struct ink_layer_w *layers; /* the model's: a layer's index names it in messages */
    int n_layer;
    unsigned long long seq;        /* requests sent (rank 0) or served */
    ink_ep_stats st;
} ink_ep;

struct ink_model {
    ink_config cfg;
    ink_model_info info;
    ink_weights w;                 /* tensor table, view options, owned copies */
    ink_pool *pool;
    ink_mat embed, unembed;        /* [V,H] */
    float *embed_norm, *norm;      /* [H] */
    ink_layer_w *layers;           /* [n_layer] */
    ink_ep *ep;                    /* NULL: one process */
};

/* Per-layer state of one timeline: KV ring and the four conv states (slots 0 k, 1 v, 2 attn, 3 mlp). */
typedef struct ink_layer_cache {
    int cap;                       /* KV rows; slot of position p is p % cap */
    int kvw;                       /* n_kv * head_dim */
    float *k, *v;                  /* [cap][kvw]: post-conv, post-k_norm K (pre-tau); post-conv V */
    float *conv[4];                /* [K-1][kvw] [K-1][kvw] [K-1][H] [K-1][H] */
    int conv_n[4];                 /* floats in each conv state */
    float *capt[4];                /* NULL, or [chunk][C_i]: raw conv inputs of the latest forward */
    int cap_rows;                  /* rows captured by the latest forward */
    int start;                     /* first position this cache holds (keys below it do not exist) */
} ink_layer_cache;

/* Scratch for ink_layer_forward over up to `chunk` rows. One allocation; owned by the caller. */
typedef struct ink_scratch {
    int chunk, n_ctx, n_threads;
    size_t attn_ws;                /* floats of `scores` per thread: one attention tile (ink_attn.ws) */
    float *a, *q, *k, *v, *r, *o, *u, *ext, *ffn, *ffn2, *logits_r, *scores, *moe_acc;
    int *route_ids, *rows;         /* [chunk * k], [chunk] */
    float *route_w, *row_w;        /* [chunk * (k + S)], [chunk] */
    float *mem;
    /* expert parallel only (env->ep set; else NULL): outputs of every (row, chosen expert) slot
     * [chunk * k][H] grouped by owning rank, shared experts' outputs [S][chunk][H], each slot's row
     * in ep_y [chunk * k], and the request message (header, rows, chosen ids) */
    float *ep_y, *ep_sh;
    int *ep_pos;
    unsigned char *ep_msg;
    size_t ep_msg_bytes;
} ink_scratch;

/* What a decoder layer reads besides its own weights: the config of the checkpoint it belongs to
 * (widths, eps, conv kernel, log scaling) and the pool its matmuls run on. The model passes its own
 * config and pool; the MTP drafter its config and the target's pool (borrowed). */
typedef struct ink_layer_env {
    const ink_config *cfg;
    ink_pool *pool;
    ink_ep *ep;                    /* the target model's (NULL: one process, and always for the drafter) */
} ink_layer_env;

/* Sizes the scratch for env's layers (the model's, or its MTP blocks: same widths), `chunk` rows. */
int ink_scratch_init(ink_scratch *s, const ink_layer_env *env, int chunk, int n_ctx, ink_err *err);
void ink_scratch_free(ink_scratch *s);

/* KV capacity of a layer for a context of n_ctx with verify/prefill chunks of `chunk` rows:
 * global n_ctx; sliding min(n_ctx, W - 1 + chunk) (the window plus slack for rollback). */
int ink_layer_kv_cap(const ink_layer_cfg *l, int n_ctx, int chunk);
int ink_layer_cache_init(ink_layer_cache *c, const ink_config *cfg, const ink_layer_cfg *l, int cap, ink_err *err);
void ink_layer_cache_free(ink_layer_cache *c);
void ink_layer_cache_clear(ink_layer_cache *c);
/* Conv states only (KV rows are never copied: see the slack rule above). */
size_t ink_layer_cache_conv_floats(const ink_layer_cache *c);
void ink_layer_cache_save(const ink_layer_cache *c, float *dst);
void ink_layer_cache_load(ink_layer_cache *c, const float *src);
/* Rebuilds conv state i from a saved state `old` followed by the first n captured input rows. */
void ink_layer_cache_commit(ink_layer_cache *c, const float *old, int n, int conv_k);
size_t ink_layer_cache_bytes(const ink_layer_cache *c);

/* One decoder layer over x[T][H] in place, rows at absolute positions pos0 .. pos0+T-1, appending to
 * cache `c` (which must hold positions pos0-W+1 .. pos0-1 for sliding layers, 0 .. pos0-1 global).
 * T <= s->chunk. */
void ink_layer_forward(const ink_layer_env *env, const ink_layer_w *w, ink_layer_cache *c, int pos0, float *x, int T,
                       ink_scratch *s);
/* The same over the rows of several timelines at once (batched decode, issue 18): segment i is rows
 * t0 .. t0+T-1 of x, at positions pos0.., appending to cache c. Projections and MLPs run over all
 * rows in one pass over the weights; conv states and attention per segment. Every row's result is
 * bitwise what ink_layer_forward of its segment alone gives (kernels compute rows independently). */
typedef struct ink_seg {
    ink_layer_cache *c;
    int pos0, t0, T;
} ink_seg;
void ink_layer_forward_segs(const ink_layer_env *env, const ink_layer_w *w, const ink_seg *sg, int n_seg, float *x, int T,
                            ink_scratch *s);

/* One SwiGLU over rows x[T][H] into out[T][H], profiled as part `cat`. */
void ink_swiglu(const ink_layer_env *env, const ink_ffn_w *f, const float *x, int T, float *out, ink_scratch *s, int cat);
/* Routed experts e0 .. e1-1 of layer w over the rows that chose them (chosen[T][k]): the down
 * output of slot (t, j), chosen[t*k+j] = e, goes to Y + pos[t*k+j] * H. Each expert runs once over
 * all its rows, as in one process. */
void ink_moe_experts(const ink_layer_env *env, const ink_layer_w *w, const float *x, int T, const int *chosen, int e0,
                     int e1, const int *pos, float *Y, ink_scratch *s);
/* Expert-parallel MoE of rank 0 (ep.c): out[T][H] bitwise what one process computes. */
void ink_moe_ep(const ink_layer_env *env, const ink_layer_w *w, const float *x, int T, float *out, ink_scratch *s);
/* ink_model_open's part: the model joins the job of transport t (NULL or one rank: nothing). */
int ink_ep_attach(ink_model *m, const ink_ep_transport *t, ink_err *err);
/* Bytes of the request message for T rows (scratch sizing). */
size_t ink_ep_msg_bytes(const ink_config *c, int T);

/* Router of one token (inkling-text.md §3.7): the k chosen experts (higher sigmoid+bias first, lower id
 * on ties) and the k+S mixture weights (routed then shared), scaled by route_scale * gscale. */
void ink_route(const ink_config *c, const float *logit, const float *bias, float gscale, int *chosen, float *wt);
/* Log-scaling temperature of global layers at absolute position p (f32, inkling-text.md §3.5.6). */
float ink_tau(int p, double n_floor, float alpha);
/* Bitwise comparison of two sessions' states (position, conv states, the KV rows a future token can
 * attend to). 0 if equal; otherwise 1 and a description in `why`. */
int ink_session_compare(const ink_session *a, const ink_session *b, char *why, size_t n);

/* The session's own generator, the one ink_generate runs (so that prefix reuse works across
 * ink_generate calls): created on first use, owned by the session, freed by ink_session_free. NULL
 * on allocation failure (err set). Callers that want their own keep an ink_gen instead. */
ink_gen *ink_session_generator(ink_session *s, ink_err *err);
/* The model a session runs (borrowed). */
ink_model *ink_session_model(const ink_session *s);

/* The forward pass over one chunk of n <= sc->chunk validated tokens at positions pos.. (rows t0 ..
 * t0+n-1 of a T-row evaluation): embed -> every layer (appending to lc[0..n_layer)) -> final norm ->
 * LM head, writing the outputs `out` asks for at row offset t0 (logits of the last row only unless
 * all_logits). x, xn, tmp: [chunk][H] work rows (x ends holding the pre-norm hidden). */
void ink_forward_chunk(const ink_model *m, ink_layer_cache *lc, ink_scratch *sc, int pos, const int32_t *tok, int n,
                       int t0, int T, const ink_eval_out *out, float *x, float *xn, float *tmp);
/* Embedding rows: out[t] = rmsnorm(embed[ids[t]], embed_norm) (ids already validated). */
void ink_embed(const ink_model *m, const int32_t *ids, int T, float *out);
/* logits[t][0..Vu) = (x[t] / mu) . unembed^T, x already final-normed. tmp: [T][H]. */
void ink_lm_head(const ink_model *m, const float *x, int T, float *logits, float *tmp);

/* Binds the tensors of one decoder layer with name prefix `prefix` ("model.llm.layers.3." or an
 * MTP block's "model.mtp.layers.0.transformer_block."), strict shapes against `l`, from wt's table. */
int ink_bind_layer(ink_weights *wt, const char *prefix, const ink_layer_cfg *l, ink_layer_w *w, ink_err *err);
/* A vector of n elements (F32/BF16/F16) widened to an f32 copy owned by wt; a [rows, cols] matrix view
 * (float or quantized) into the mapping. */
int ink_bind_vec(ink_weights *wt, const char *name, int64_t n, float **out, ink_err *err);
int ink_bind_mat(ink_weights *wt, const char *name, int rows, int cols, ink_mat *out, ink_err *err);
void *ink_weights_own(ink_weights *wt, void *p); /* registers p to be freed with wt; NULL (p freed) on OOM */
void ink_weights_free(ink_weights *wt);         /* the owned arrays and the tensor table; wt zeroed */

#endif
