/* session.c — ink_session: per-layer caches, chunked evaluation, snapshot / restore.
 *
 * Memory: everything is allocated in ink_session_create; ink_session_eval, save and restore never
 * allocate. Sliding layers keep a ring of W - 1 + chunk rows, so a rollback of up to `chunk`
 * tokens never needs KV rows copied: positions older than the snapshot are not overwritten. */
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INK_CHUNK 64 /* rows per internal forward: prefill chunk, verify width limit, rollback slack */

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
    void *ext;            /* generation state kept between ink_generate calls (prefix reuse) */
    void (*ext_free)(void *);
};

struct ink_snapshot {
    const ink_session *owner;
    int pos;
    float *conv;          /* every layer's four conv states, concatenated */
    size_t n;
};

int ink_session_create(ink_session **out, ink_model *m, int n_ctx, ink_err *err)
{
    const ink_config *c = &m->cfg;
    if (n_ctx <= 0) n_ctx = c->max_ctx < 4096 ? c->max_ctx : 4096;
    if (n_ctx > c->max_ctx)
        return ink_err_set(err, INK_E_INVAL, "context %d exceeds the model's model_max_length %d", n_ctx, c->max_ctx);
    ink_session *s = calloc(1, sizeof *s);
    if (!s) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    s->m = m, s->n_ctx = n_ctx;
    int rc;
    s->lc = calloc((size_t)c->n_layer, sizeof *s->lc);
    if (!s->lc) {
        rc = ink_err_set(err, INK_E_NOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < c->n_layer; i++) {
        int cap = ink_layer_kv_cap(&c->layers[i], n_ctx, INK_CHUNK);
        if ((rc = ink_layer_cache_init(&s->lc[i], m, &c->layers[i], cap, err))) goto fail;
    }
    if ((rc = ink_scratch_init(&s->sc, m, INK_CHUNK, n_ctx, err))) goto fail;
    size_t hb = (size_t)INK_CHUNK * c->hidden * sizeof(float);
    s->x = malloc(hb), s->xn = malloc(hb), s->tmp = malloc(hb);
    s->toks = malloc((size_t)n_ctx * sizeof *s->toks);
    if (!s->x || !s->xn || !s->tmp || !s->toks) {
        rc = ink_err_set(err, INK_E_NOMEM, "out of memory");
        goto fail;
    }
    *out = s;
    return INK_OK;
fail:
    ink_session_free(s);
    return rc;
}

void ink_session_free(ink_session *s)
{
    if (!s) return;
    if (s->lc)
        for (int i = 0; i < s->m->cfg.n_layer; i++) ink_layer_cache_free(&s->lc[i]);
    free(s->lc);
    ink_scratch_free(&s->sc);
    free(s->x);
    free(s->xn);
    free(s->tmp);
    free(s->toks);
    if (s->ext_free) s->ext_free(s->ext);
    free(s);
}

const int32_t *ink_session_tokens(const ink_session *s) { return s->toks; }

void **ink_session_ext(ink_session *s, void (*destroy)(void *))
{
    s->ext_free = destroy;
    return &s->ext;
}

int ink_session_pos(const ink_session *s) { return s->pos; }
ink_model *ink_session_model(const ink_session *s) { return s->m; }
int ink_session_n_ctx(const ink_session *s) { return s->n_ctx; }
int ink_session_rollback_slack(const ink_session *s) { return s->sc.chunk; }

size_t ink_session_state_bytes(const ink_session *s)
{
    size_t b = 0;
    for (int i = 0; i < s->m->cfg.n_layer; i++) b += ink_layer_cache_bytes(&s->lc[i]);
    return b;
}

void ink_session_reset(ink_session *s)
{
    s->pos = 0;
    for (int i = 0; i < s->m->cfg.n_layer; i++) ink_layer_cache_clear(&s->lc[i]);
}

int ink_session_eval(ink_session *s, const int32_t *tokens, int T, ink_eval_out *out, ink_err *err)
{
    const ink_model *m = s->m;
    const ink_config *c = &m->cfg;
    int H = c->hidden, Vu = c->vocab_unpadded, L = c->n_layer;
    if (T < 1) return ink_err_set(err, INK_E_INVAL, "eval needs at least one token (got %d)", T);
    if (s->pos + T > s->n_ctx)
        return ink_err_set(err, INK_E_CTX_FULL, "context full: %d tokens at position %d exceed the context of %d",
                           T, s->pos, s->n_ctx);
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= Vu)
            return ink_err_set(err, INK_E_INVAL, "token id %d (input position %d) is out of range: the vocabulary has %d ids",
                               tokens[t], t, Vu);
    if (m->header_only) return ink_err_set(err, INK_E_INVAL, "the model was opened header-only (no tensor data)");
    ink_eval_out none = {0};
    if (!out) out = &none;
    for (int t0 = 0; t0 < T; t0 += s->sc.chunk) {
        int n = T - t0 < s->sc.chunk ? T - t0 : s->sc.chunk;
        memcpy(s->toks + s->pos, tokens + t0, (size_t)n * sizeof *tokens);
        ink_embed(m, tokens + t0, n, s->x);
        if (out->embeddings) memcpy(out->embeddings + (size_t)t0 * H, s->x, (size_t)n * H * sizeof(float));
        for (int l = 0; l < L; l++) {
            ink_layer_forward(m, &m->layers[l], &s->lc[l], s->pos, s->x, n, &s->sc);
            if (out->layer_outputs)
                memcpy(out->layer_outputs + ((size_t)l * T + t0) * H, s->x, (size_t)n * H * sizeof(float));
        }
        s->pos += n;
        if (out->hidden_prenorm) memcpy(out->hidden_prenorm + (size_t)t0 * H, s->x, (size_t)n * H * sizeof(float));
        int last = t0 + n == T;
        if (!out->hidden_postnorm && !(out->logits && (out->all_logits || last))) continue;
        for (int t = 0; t < n; t++) ink_rmsnorm(s->xn + (size_t)t * H, s->x + (size_t)t * H, m->norm, H, c->eps);
        if (out->hidden_postnorm) memcpy(out->hidden_postnorm + (size_t)t0 * H, s->xn, (size_t)n * H * sizeof(float));
        if (out->logits && out->all_logits) ink_lm_head(m, s->xn, n, out->logits + (size_t)t0 * Vu, s->tmp);
        else if (out->logits && last) ink_lm_head(m, s->xn + (size_t)(n - 1) * H, 1, out->logits, s->tmp);
    }
    return INK_OK;
}

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
