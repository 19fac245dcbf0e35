/*
 * mtp.h — the Inkling MTP head (mtp.md §1-6): D chained dense blocks, each an ordinary Inkling
 * decoder layer (the backbone's ink_layer_forward, no second copy) behind two RMSNorms and a 2H -> H
 * input projection (hidden first). The target's embedding, embed_norm, final norm and LM head are
 * shared. Each depth has its own KV + conv-state cache, owned here and sized per generation.
 *
 * Ownership: the drafter borrows the target model and its thread pool; its own weights are an
 * ink_weights (model.h: its config, MTP tensor table and f32 copies), not a second ink_model;
 * ink_drafter_free releases them and the caches. The type is opaque (inkling.h); this header is the
 * interface the generator (src/gen) uses.
 */
#ifndef INK_MTP_H
#define INK_MTP_H

#include "model/model.h"

/* The drafter's state is private to src/draft/ (struct ink_drafter in mtp.c): its caches change
 * only through the functions below. */

/* Allocates the per-depth caches and scratch for a context of n_ctx (no-op if already done). */
int ink_drafter_prepare(ink_drafter *d, int n_ctx, ink_err *err);
/* Clears every depth cache (new sequence). */
void ink_drafter_reset(ink_drafter *d);
/* Depth m over T rows at positions pos0..: hidden h[T][H], tokens tok[T] -> out[T][H] (may alias
 * nothing). normed_embed: 1 = backbone embed_norm on the token embedding (mode P), 0 = raw (Compat-X).
 * Any T: chunked internally. */
void ink_depth_forward(ink_drafter *d, int m, const float *h, const int32_t *tok, int T, int pos0, int normed_embed,
                       float *out);
/* Depth m of several drafters at once (batched drafting across a server's slots): segment i feeds
 * sg[i].T rows (1 <= T <= INK_CHUNK) of drafter sg[i].d at positions pos0.. into its own cache.
 * Every sg[i].d must share sg[0].d's weights (ink_drafter_can_batch); the rows go through the
 * depth's weights in forwards of at most INK_CHUNK rows (whole segments, in order), on sg[0].d's
 * scratch. Each row's result is bitwise what ink_depth_forward of its segment alone gives. */
typedef struct ink_depth_seg {
    ink_drafter *d;
    const float *h;          /* [T][H] */
    const int32_t *tok;      /* [T] */
    int T, pos0;
    float *out;              /* [T][H]; may alias h (inputs are read before any output is written) */
} ink_depth_seg;
void ink_depth_forward_many(int m, const ink_depth_seg *sg, int n, int normed_embed);
/* 1 when a and b can run in one ink_depth_forward_many / ink_draft_logits_many: the same weights
 * (one opened the other's, through ink_drafter_share, or both share a third's) and caches prepared
 * for the same context. */
int ink_drafter_can_batch(const ink_drafter *a, const ink_drafter *b);
/* Depth m's cache, by its own operations (never allocate): save keeps its conv states (its
 * committed frontier) in the drafter; restore brings them back; clear empties the depth (KV and
 * conv). KV rows are never copied: rows past the frontier are overwritten when committed. */
void ink_depth_save(ink_drafter *d, int m);
void ink_depth_restore(ink_drafter *d, int m);
void ink_depth_clear(ink_drafter *d, int m);
/* After ink_depth_save and one ink_depth_forward of at most 64 rows: makes depth m's conv states
 * those of having fed only the first n_keep of the rows (the KV rows of the others are left to be
 * overwritten). Never allocates. */
void ink_depth_commit(ink_drafter *d, int m, int n_keep);
/* Draft logits [Vu] of one block output u: (u / mu) . unembed^T; with final_norm the target's final norm
 * is applied first (Compat-X). With a draft vocabulary only its rows are computed and every other
 * entry is -INFINITY. tmp: [2][H]. */
void ink_draft_logits(const ink_drafter *d, const float *u, int final_norm, float *logits, float *tmp);
/* The same (no final norm: mode P) for n <= INK_DRAFT_ROWS outputs u[j] of drafters that share d's
 * weights, in one pass over the unembedding: logits[j] ([Vu] each) bitwise what ink_draft_logits
 * gives for u[j]. Uses d's scratch (d must be prepared). */
#define INK_DRAFT_ROWS 8
void ink_draft_logits_many(ink_drafter *d, const float *const *u, int n, float *const *logits);

/* Read-only views for inspection and tests: depth m's layer config and bound weights; the number of
 * safetensors files the drafter opened. */
const ink_layer_cfg *ink_depth_cfg(const ink_drafter *d, int m);
const ink_layer_w *ink_depth_weights(const ink_drafter *d, int m);
int ink_drafter_n_files(const ink_drafter *d);
int ink_drafter_n_vocab(const ink_drafter *d); /* draft vocabulary size; 0: the whole vocabulary */
/* Empties depth m and makes its first row sit at position pos (a depth that starts mid-sequence, as
 * the golden block outputs are computed). */
void ink_depth_start_at(ink_drafter *d, int m, int pos);

#endif
