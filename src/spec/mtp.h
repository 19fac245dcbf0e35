/*
 * mtp.h — the Inkling MTP head (mtp.md §1-6): D chained dense blocks, each an ordinary Inkling
 * decoder layer (the backbone's ink_layer_forward, no second copy) behind two RMSNorms and a 2H -> H
 * input projection (hidden first). The target's embedding, embed_norm, final norm and LM head are
 * shared. Each depth has its own KV + conv-state cache, owned here and sized per generation.
 *
 * Ownership: the drafter borrows the target model and its thread pool; ink_drafter_free releases the
 * drafter's tensors table, copies and caches.
 */
#ifndef INK_MTP_H
#define INK_MTP_H

#include "model/model.h"

typedef struct ink_depth {
    ink_layer_cfg cfg;
    float *embed_norm, *hidden_norm; /* [H] */
    ink_mat input_proj;              /* [H, 2H] */
    ink_layer_w block;
    ink_layer_cache cache;
    float *conv_save;                /* conv states of the committed frontier (restore after drafting) */
} ink_depth;

struct ink_drafter {
    ink_model *target;
    ink_model *dm;                   /* drafter config + MTP tensor table; pool borrowed from the target */
    int D;
    float *chain_norm;               /* NULL unless chain_hidden_post_norm and the tensor exist */
    ink_depth d[INK_MAX_DEPTH];
    /* runtime, allocated by ink_drafter_prepare */
    int n_ctx;
    ink_scratch sc;
    float *in2;                      /* [chunk][2H] */
    float *tmp;                      /* [chunk][H] */
    /* draft vocabulary (ink_drafter_set_vocab): packed copy of n_vocab unembedding rows */
    int n_vocab;                     /* 0: the whole unpadded vocabulary */
    int32_t *vocab_ids;              /* [n_vocab] */
    ink_mat vhead;                   /* views vocab_mem */
    void *vocab_mem;
    float *vlog;                     /* [n_vocab] */
};

/* Allocates the per-depth caches and scratch for a context of n_ctx (no-op if already done). */
int ink_drafter_prepare(ink_drafter *d, int n_ctx, ink_err *err);
/* Clears every depth cache (new sequence). */
void ink_drafter_reset(ink_drafter *d);
/* Depth m over T rows at positions pos0..: hidden h[T][H], tokens tok[T] -> out[T][H] (may alias
 * nothing). normed_embed: 1 = backbone embed_norm on the token embedding (mode P), 0 = raw (Compat-X).
 * Any T: chunked internally. */
void ink_depth_forward(ink_drafter *d, int m, const float *h, const int32_t *tok, int T, int pos0, int normed_embed,
                       float *out);
/* After ink_layer_cache_save(&d->d[m].cache, d->d[m].conv_save) and one ink_depth_forward of at
 * most 64 rows: makes depth m's conv states those of having fed only the first n_keep of the rows
 * (the KV rows of the others are left to be overwritten). Never allocates. */
void ink_depth_commit(ink_drafter *d, int m, int n_keep);
/* Draft logits [Vu] of one block output u: (u / mu) . unembed^T; with final_norm the target's final norm
 * is applied first (Compat-X). With a draft vocabulary only its rows are computed and every other
 * entry is -INFINITY. tmp: [2][H]. */
void ink_draft_logits(const ink_drafter *d, const float *u, int final_norm, float *logits, float *tmp);

#endif
