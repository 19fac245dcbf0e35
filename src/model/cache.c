/* cache.c — the state of a timeline: per-layer caches (KV ring, conv states, captured conv inputs)
 * and, for a session, its snapshots, restore and capture-and-commit (rollback after a verify).
 * Shared by the backbone's layers (ink_session) and the MTP depths (src/draft).
 *
 * Memory: caches and snapshots are allocated at creation (ink_layer_cache_init, ink_snapshot_create,
 * ink_session_set_capture); save, restore, load and commit never allocate. Sliding layers keep a ring
 * of W - 1 + chunk rows, so a rollback of up to `chunk` tokens never needs KV rows copied. */
#include "model/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- one layer's cache ------------------------------------------------------------------- */

int ink_layer_kv_cap(const ink_layer_cfg *l, int n_ctx, int chunk)
{
    if (!l->sliding) return n_ctx;
    int cap = l->window - 1 + chunk;
    return cap < n_ctx ? cap : n_ctx;
}

int ink_layer_cache_init(ink_layer_cache *c, const ink_config *cfg, const ink_layer_cfg *l, int cap, ink_err *err)
{
    memset(c, 0, sizeof *c);
    int S = cfg->conv_k - 1, H = cfg->hidden;
    c->cap = cap;
    c->kvw = l->n_kv * l->head_dim;
    c->conv_n[0] = c->conv_n[1] = S * c->kvw;
    c->conv_n[2] = c->conv_n[3] = S * H;
    c->k = calloc((size_t)cap * c->kvw, sizeof(float));
    c->v = calloc((size_t)cap * c->kvw, sizeof(float));
    int ok = c->k && c->v;
    for (int i = 0; i < 4; i++) ok = ok && (c->conv[i] = calloc((size_t)(c->conv_n[i] ? c->conv_n[i] : 1), sizeof(float)));
    if (!ok) {
        ink_layer_cache_free(c);
        return ink_err_set(err, INK_E_NOMEM, "cannot allocate the KV cache (%d rows x %d floats)", cap, c->kvw);
    }
    return INK_OK;
}

void ink_layer_cache_free(ink_layer_cache *c)
{
    if (!c) return;
    free(c->k);
    free(c->v);
    for (int i = 0; i < 4; i++) free(c->conv[i]), free(c->capt[i]);
    memset(c, 0, sizeof *c);
}

void ink_layer_cache_clear(ink_layer_cache *c)
{
    c->start = 0;
    for (int i = 0; i < 4; i++) memset(c->conv[i], 0, (size_t)c->conv_n[i] * sizeof(float));
}

size_t ink_layer_cache_conv_floats(const ink_layer_cache *c)
{
    return (size_t)c->conv_n[0] + c->conv_n[1] + c->conv_n[2] + c->conv_n[3];
}

void ink_layer_cache_save(const ink_layer_cache *c, float *dst)
{
    for (int i = 0; i < 4; i++) memcpy(dst, c->conv[i], (size_t)c->conv_n[i] * sizeof(float)), dst += c->conv_n[i];
}

void ink_layer_cache_load(ink_layer_cache *c, const float *src)
{
    for (int i = 0; i < 4; i++) memcpy(c->conv[i], src, (size_t)c->conv_n[i] * sizeof(float)), src += c->conv_n[i];
}

void ink_layer_cache_commit(ink_layer_cache *c, const float *old, int n, int conv_k)
{
    int S = conv_k - 1;
    for (int i = 0; i < 4; i++) {
        int C = S ? c->conv_n[i] / S : 0;
        /* the new state is the last S rows of [old (S rows); captured rows 0..n-1] */
        for (int r = 0; r < S; r++) {
            int src = n + r; /* index into the concatenation */
            const float *row = src < S ? old + (size_t)src * C : c->capt[i] + (size_t)(src - S) * C;
            memcpy(c->conv[i] + (size_t)r * C, row, (size_t)C * sizeof(float));
        }
        old += c->conv_n[i];
    }
}

size_t ink_layer_cache_bytes(const ink_layer_cache *c)
{
    return ((size_t)2 * c->cap * c->kvw + (size_t)c->conv_n[0] * 2 + (size_t)c->conv_n[2] * 2) * sizeof(float);
}

/* Attention scratch of one thread: one tile of the widest layer over the longest key union
 * (n_ctx keys plus a chunk's rows), 16-float aligned so every thread's part stays 64-byte aligned. */

/* ---- a session's snapshots and commit ---------------------------------------------------- */

int ink_snapshot_create(ink_snapshot **out, const ink_session *s, ink_err *err)
{
    ink_snapshot *p = calloc(1, sizeof *p);
    if (!p) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    for (int l = 0; l < s->m->cfg.n_layer; l++)
        for (int i = 0; i < 4; i++) p->n += (size_t)s->lc[l].conv_n[i];
    p->conv = malloc((p->n ? p->n : 1) * sizeof(float));
    if (!p->conv) {
        free(p);
        return ink_err_set(err, INK_E_NOMEM, "out of memory");
    }
    p->owner = s;
    p->pos = -1;
    *out = p;
    return INK_OK;
}

void ink_snapshot_free(ink_snapshot *p)
{
    if (!p) return;
    free(p->conv);
    free(p);
}

void ink_session_save(const ink_session *s, ink_snapshot *p)
{
    float *d = p->conv;
    for (int l = 0; l < s->m->cfg.n_layer; l++) {
        ink_layer_cache_save(&s->lc[l], d);
        d += ink_layer_cache_conv_floats(&s->lc[l]);
    }
    p->pos = s->pos;
}

int ink_session_restore(ink_session *s, const ink_snapshot *p, ink_err *err)
{
    if (p->owner != s || p->pos < 0)
        return ink_err_set(err, INK_E_INVAL, "snapshot was not saved from this session");
    if (s->pos < p->pos || s->pos - p->pos > s->sc.chunk)
        return ink_err_set(err, INK_E_INVAL,
                           "cannot restore a snapshot at position %d from position %d (rollback covers at most %d tokens)",
                           p->pos, s->pos, s->sc.chunk);
    const float *d = p->conv;
    for (int l = 0; l < s->m->cfg.n_layer; l++) {
        ink_layer_cache_load(&s->lc[l], d);
        d += ink_layer_cache_conv_floats(&s->lc[l]);
    }
    s->pos = p->pos;
    ink_session_drop_checkpoints_after(s, s->pos);
    return INK_OK;
}

int ink_session_set_capture(ink_session *s, int on, ink_err *err)
{
    for (int l = 0; l < s->m->cfg.n_layer; l++) {
        ink_layer_cache *c = &s->lc[l];
        int S = s->m->cfg.conv_k - 1;
        for (int i = 0; i < 4; i++) {
            free(c->capt[i]);
            c->capt[i] = NULL;
            if (on && !(c->capt[i] = malloc((size_t)s->sc.chunk * (S ? c->conv_n[i] / S : 1) * sizeof(float) + 1)))
                return ink_err_set(err, INK_E_NOMEM, "cannot allocate capture buffers");
        }
        c->cap_rows = 0;
    }
    s->capture = on;
    return INK_OK;
}

int ink_session_commit(ink_session *s, const ink_snapshot *p, int n_keep, ink_err *err)
{
    int fed = s->pos - p->pos;
    if (!s->capture || p->owner != s || fed < 1 || fed > s->sc.chunk || n_keep < 0 || n_keep > fed ||
        s->lc[0].cap_rows != fed)
        return ink_err_set(err, INK_E_INVAL,
                           "commit needs capture on and exactly one eval of <= %d tokens since the snapshot "
                           "(fed %d, keep %d)", s->sc.chunk, fed, n_keep);
    const float *d = p->conv;
    for (int l = 0; l < s->m->cfg.n_layer; l++) {
        ink_layer_cache_commit(&s->lc[l], d, n_keep, s->m->cfg.conv_k);
        d += ink_layer_cache_conv_floats(&s->lc[l]);
    }
    s->pos = p->pos + n_keep;
    ink_session_drop_checkpoints_after(s, s->pos);
    return INK_OK;
}

int ink_session_compare(const ink_session *a, const ink_session *b, char *why, size_t n)
{
    if (a->m->cfg.n_layer != b->m->cfg.n_layer || a->pos != b->pos) {
        snprintf(why, n, "positions differ: %d vs %d", a->pos, b->pos);
        return 1;
    }
    for (int l = 0; l < a->m->cfg.n_layer; l++) {
        const ink_layer_cache *x = &a->lc[l], *y = &b->lc[l];
        for (int i = 0; i < 4; i++)
            if (x->conv_n[i] != y->conv_n[i] || memcmp(x->conv[i], y->conv[i], (size_t)x->conv_n[i] * sizeof(float))) {
                snprintf(why, n, "layer %d conv state %d differs", l, i);
                return 1;
            }
        const ink_layer_cfg *lc = &a->m->cfg.layers[l];
        int lo = lc->sliding ? a->pos - (lc->window - 1) : 0;
        for (int p = lo < 0 ? 0 : lo; p < a->pos; p++) {
            size_t sx = (size_t)(p % x->cap) * x->kvw, sy = (size_t)(p % y->cap) * y->kvw;
            if (memcmp(x->k + sx, y->k + sy, (size_t)x->kvw * sizeof(float)) ||
                memcmp(x->v + sx, y->v + sy, (size_t)x->kvw * sizeof(float))) {
                snprintf(why, n, "layer %d KV row of position %d differs", l, p);
                return 1;
            }
        }
    }
    return 0;
}

/* ---- the prompt cache: checkpoints ------------------------------------------------------- */

/* Floats of one checkpoint: conv states of every layer, and W - 1 KV rows (K and V) per sliding layer. */
static size_t ckpt_floats(const ink_session *s)
{
    size_t n = 0;
    for (int l = 0; l < s->m->cfg.n_layer; l++) {
        n += ink_layer_cache_conv_floats(&s->lc[l]);
        if (s->m->cfg.layers[l].sliding) n += (size_t)2 * (s->m->cfg.layers[l].window - 1) * s->lc[l].kvw;
    }
    return n;
}

size_t ink_session_checkpoint_bytes(const ink_session *s) { return ckpt_floats(s) * sizeof(float); }

int ink_session_set_checkpoints(ink_session *s, int n, ink_err *err)
{
    size_t nf = ckpt_floats(s);
    if (n < 0) {
        size_t fit = ((size_t)256 << 20) / (nf * sizeof(float) + 1);
        n = fit < 1 ? 1 : fit > 8 ? 8 : (int)fit;
    }
    free(s->ckpt), free(s->ckpt_pos);
    s->ckpt = NULL, s->ckpt_pos = NULL, s->n_ckpt = 0, s->ckpt_next = 0, s->ckpt_floats = nf;
    if (n == 0) return INK_OK;
    s->ckpt = malloc((size_t)n * (nf ? nf : 1) * sizeof(float));
    s->ckpt_pos = malloc((size_t)n * sizeof *s->ckpt_pos);
    if (!s->ckpt || !s->ckpt_pos) {
        free(s->ckpt), free(s->ckpt_pos);
        s->ckpt = NULL, s->ckpt_pos = NULL;
        return ink_err_set(err, INK_E_NOMEM, "cannot allocate %d prompt-cache checkpoints of %zu bytes", n,
                           nf * sizeof(float));
    }
    for (int i = 0; i < n; i++) s->ckpt_pos[i] = -1;
    s->n_ckpt = n;
    return INK_OK;
}

/* Checkpoints past position pos no longer describe the session's tokens. */
void ink_session_drop_checkpoints_after(ink_session *s, int pos)
{
    for (int i = 0; i < s->n_ckpt; i++)
        if (s->ckpt_pos[i] > pos) s->ckpt_pos[i] = -1;
}

void ink_session_checkpoint(ink_session *s)
{
    if (!s->n_ckpt || s->pos <= 0) return;
    int slot = -1;
    for (int i = 0; i < s->n_ckpt; i++)
        if (s->ckpt_pos[i] == s->pos) slot = i; /* already there: refresh it */
    if (slot < 0) slot = s->ckpt_next, s->ckpt_next = (s->ckpt_next + 1) % s->n_ckpt;
    float *d = s->ckpt + (size_t)slot * s->ckpt_floats;
    for (int l = 0; l < s->m->cfg.n_layer; l++) {
        const ink_layer_cache *c = &s->lc[l];
        ink_layer_cache_save(c, d);
        d += ink_layer_cache_conv_floats(c);
        const ink_layer_cfg *lc = &s->m->cfg.layers[l];
        if (!lc->sliding) continue;
        for (int r = 0; r < lc->window - 1; r++) { /* rows of positions pos-W+1 .. pos-1 (those that exist) */
            int p = s->pos - (lc->window - 1) + r;
            size_t off = (size_t)(p < 0 ? 0 : p % c->cap) * c->kvw;
            memcpy(d, c->k + off, (size_t)c->kvw * sizeof(float));
            memcpy(d + c->kvw, c->v + off, (size_t)c->kvw * sizeof(float));
            d += 2 * (size_t)c->kvw;
        }
    }
    s->ckpt_pos[slot] = s->pos;
}

int ink_session_rewind(ink_session *s, int limit)
{
    int best = -1;
    for (int i = 0; i < s->n_ckpt; i++)
        if (s->ckpt_pos[i] > 0 && s->ckpt_pos[i] <= limit && s->ckpt_pos[i] <= s->pos &&
            (best < 0 || s->ckpt_pos[i] > s->ckpt_pos[best]))
            best = i;
    if (best < 0) {
        ink_session_reset(s);
        return 0;
    }
    int pos = s->ckpt_pos[best];
    const float *d = s->ckpt + (size_t)best * s->ckpt_floats;
    for (int l = 0; l < s->m->cfg.n_layer; l++) {
        ink_layer_cache *c = &s->lc[l];
        ink_layer_cache_load(c, d);
        d += ink_layer_cache_conv_floats(c);
        const ink_layer_cfg *lc = &s->m->cfg.layers[l];
        if (!lc->sliding) continue;
        for (int r = 0; r < lc->window - 1; r++) {
            int p = pos - (lc->window - 1) + r;
            if (p >= 0) {
                size_t off = (size_t)(p % c->cap) * c->kvw;
                memcpy(c->k + off, d, (size_t)c->kvw * sizeof(float));
                memcpy(c->v + off, d + c->kvw, (size_t)c->kvw * sizeof(float));
            }
            d += 2 * (size_t)c->kvw;
        }
    }
    s->pos = pos;
    ink_session_drop_checkpoints_after(s, pos);
    return pos;
}
