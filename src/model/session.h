/*
 * session.h — the layout of ink_session and ink_snapshot, private to src/model/ (session.c runs a
 * session, cache.c keeps its caches, snapshots and commits).
 */
#ifndef INK_MODEL_SESSION_H
#define INK_MODEL_SESSION_H

#include "model/model.h"

struct ink_session {
    ink_model *m;
    int n_ctx, pos;
    ink_layer_cache *lc;  /* [n_layer] */
    ink_scratch sc;
    float *x;             /* [chunk][H] residual stream */
    float *xn;            /* [chunk][H] final-normed rows */
    float *tmp;           /* [chunk][H] */
    int capture;          /* conv inputs are captured (ink_session_set_capture) */
    int32_t *toks;        /* [n_ctx] the tokens consumed, by position */
    ink_gen *gen;         /* the generator ink_generate runs (created on first use, owned) */
    /* prompt cache: n_ckpt checkpoints (ink_session_set_checkpoints), each the state at ckpt_pos[i]
     * (-1: empty): conv states and the sliding layers' last W - 1 KV rows, [ckpt_floats] each */
    int n_ckpt, ckpt_next;
    int *ckpt_pos;
    float *ckpt;
    size_t ckpt_floats;
};

struct ink_snapshot {
    const ink_session *owner;
    int pos;
    float *conv;          /* every layer's four conv states, concatenated */
    size_t n;
};

/* cache.c: checkpoints beyond `pos` are dropped (the session went back to pos). */
void ink_session_drop_checkpoints_after(ink_session *s, int pos);

#endif
