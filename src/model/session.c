/* session.c — ink_session: one timeline on a model; creation, input checks, and evaluation in chunks
 * of the forward pass (forward.c: embed -> layers -> head). Its caches, snapshots and commit live
 * in cache.c.
 *
 * Memory: everything is allocated in ink_session_create; ink_session_eval never allocates. */
#include "model/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        if ((rc = ink_layer_cache_init(&s->lc[i], &m->cfg, &c->layers[i], cap, err))) goto fail;
    }
    if ((rc = ink_scratch_init(&s->sc, &(ink_layer_env){&m->cfg, m->pool, m->ep}, INK_CHUNK, n_ctx, err))) goto fail;
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
    free(s->ckpt);
    free(s->ckpt_pos);
    ink_gen_free(s->gen);
    free(s);
}

const int32_t *ink_session_tokens(const ink_session *s) { return s->toks; }

ink_gen *ink_session_generator(ink_session *s, ink_err *err)
{
    if (!s->gen) ink_gen_create(&s->gen, s, err);
    return s->gen;
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
    ink_session_drop_checkpoints_after(s, 0);
}

int ink_session_eval(ink_session *s, const int32_t *tokens, int T, ink_eval_out *out, ink_err *err)
{
    const ink_model *m = s->m;
    int Vu = m->cfg.vocab_unpadded;
    if (T < 1) return ink_err_set(err, INK_E_INVAL, "eval needs at least one token (got %d)", T);
    if (s->pos + T > s->n_ctx)
        return ink_err_set(err, INK_E_CTX_FULL, "context full: %d tokens at position %d exceed the context of %d",
                           T, s->pos, s->n_ctx);
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= Vu)
            return ink_err_set(err, INK_E_INVAL, "token id %d (input position %d) is out of range: the vocabulary has %d ids",
                               tokens[t], t, Vu);
    if (m->w.header_only) return ink_err_set(err, INK_E_INVAL, "the model was opened header-only (no tensor data)");
    ink_eval_out none = {0};
    if (!out) out = &none;
    for (int t0 = 0; t0 < T; t0 += s->sc.chunk) {
        int n = T - t0 < s->sc.chunk ? T - t0 : s->sc.chunk;
        memcpy(s->toks + s->pos, tokens + t0, (size_t)n * sizeof *tokens);
        ink_forward_chunk(m, s->lc, &s->sc, s->pos, tokens + t0, n, t0, T, out, s->x, s->xn, s->tmp);
        s->pos += n;
    }
    return INK_OK;
}

/* ---- batched evaluation across sessions ------------------------------------------------- */

struct ink_batch {
    ink_model *m;
    int max_rows, n_ctx;
    ink_scratch sc;
    float *x, *xn, *tmp, *logits; /* [max_rows][H] x3, [max_rows][Vu] */
    int32_t *tok;                 /* [max_rows] */
    int *lrow;                    /* [max_rows]: rows whose logits are wanted */
    ink_seg *seg;                 /* [max_rows] (a session has at least one row) */
};

int ink_batch_create(ink_batch **out, ink_model *m, int max_rows, int n_ctx, ink_err *err)
{
    const ink_config *c = &m->cfg;
    if (max_rows < 1) return ink_err_set(err, INK_E_INVAL, "a batch needs room for at least one row (got %d)", max_rows);
    if (n_ctx <= 0) n_ctx = c->max_ctx < 4096 ? c->max_ctx : 4096;
    ink_batch *b = calloc(1, sizeof *b);
    if (!b) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    b->m = m, b->max_rows = max_rows, b->n_ctx = n_ctx;
    int rc = ink_scratch_init(&b->sc, &(ink_layer_env){&m->cfg, m->pool, m->ep}, max_rows, n_ctx, err);
    if (rc) {
        free(b);
        return rc;
    }
    size_t hb = (size_t)max_rows * c->hidden * sizeof(float);
    b->x = malloc(hb), b->xn = malloc(hb), b->tmp = malloc(hb);
    b->logits = malloc((size_t)max_rows * c->vocab_unpadded * sizeof(float));
    b->tok = malloc((size_t)max_rows * sizeof *b->tok);
    b->lrow = malloc((size_t)max_rows * sizeof *b->lrow);
    b->seg = malloc((size_t)max_rows * sizeof *b->seg);
    if (!b->x || !b->xn || !b->tmp || !b->logits || !b->tok || !b->lrow || !b->seg) {
        ink_batch_free(b);
        return ink_err_set(err, INK_E_NOMEM, "out of memory for a batch of %d rows", max_rows);
    }
    *out = b;
    return INK_OK;
}

int ink_batch_max_rows(const ink_batch *b) { return b->max_rows; }

void ink_batch_free(ink_batch *b)
{
    if (!b) return;
    ink_scratch_free(&b->sc);
    free(b->x), free(b->xn), free(b->tmp), free(b->logits), free(b->tok), free(b->lrow), free(b->seg);
    free(b);
}

static int batch_check(const ink_batch *b, ink_session *const *ss, const int32_t *const *tokens, const int *T, int n,
                       ink_err *err)
{
    const ink_model *m = b->m;
    int Vu = m->cfg.vocab_unpadded, rows = 0;
    if (n < 1) return ink_err_set(err, INK_E_INVAL, "a batch needs at least one session (got %d)", n);
    if (m->w.header_only) return ink_err_set(err, INK_E_INVAL, "the model was opened header-only (no tensor data)");
    for (int i = 0; i < n; i++) {
        const ink_session *s = ss[i];
        if (s->m != m) return ink_err_set(err, INK_E_INVAL, "batch session %d runs another model", i);
        for (int j = 0; j < i; j++)
            if (ss[j] == s) return ink_err_set(err, INK_E_INVAL, "batch sessions %d and %d are the same session", j, i);
        if (T[i] < 1 || T[i] > s->sc.chunk)
            return ink_err_set(err, INK_E_INVAL, "batch session %d: %d tokens (expected 1..%d)", i, T[i], s->sc.chunk);
        if (s->pos + T[i] > s->n_ctx)
            return ink_err_set(err, INK_E_CTX_FULL, "batch session %d: context full: %d tokens at position %d exceed %d", i,
                               T[i], s->pos, s->n_ctx);
        if (s->n_ctx > b->n_ctx)
            return ink_err_set(err, INK_E_INVAL, "batch session %d has a context of %d, the batch was sized for %d", i,
                               s->n_ctx, b->n_ctx);
        for (int t = 0; t < T[i]; t++)
            if (tokens[i][t] < 0 || tokens[i][t] >= Vu)
                return ink_err_set(err, INK_E_INVAL, "batch session %d: token id %d (input position %d) is out of range: the "
                                   "vocabulary has %d ids", i, tokens[i][t], t, Vu);
        rows += T[i];
    }
    if (rows > b->max_rows) return ink_err_set(err, INK_E_INVAL, "a batch of %d rows exceeds its %d", rows, b->max_rows);
    return INK_OK;
}

int ink_batch_eval(ink_batch *b, ink_session *const *ss, const int32_t *const *tokens, const int *T,
                   const ink_eval_out *outs, int n, ink_err *err)
{
    int rc = batch_check(b, ss, tokens, T, n, err);
    if (rc) return rc;
    const ink_model *m = b->m;
    const ink_config *c = &m->cfg;
    int H = c->hidden, Vu = c->vocab_unpadded, L = c->n_layer, R = 0;
    for (int i = 0; i < n; i++) {
        memcpy(b->tok + R, tokens[i], (size_t)T[i] * sizeof *b->tok);
        b->seg[i] = (ink_seg){NULL, ss[i]->pos, R, T[i]};
        R += T[i];
    }
    ink_embed(m, b->tok, R, b->x);
    for (int i = 0; i < n; i++)
        if (outs && outs[i].embeddings)
            memcpy(outs[i].embeddings, b->x + (size_t)b->seg[i].t0 * H, (size_t)T[i] * H * sizeof(float));
    ink_layer_env env = {&m->cfg, m->pool, m->ep};
    for (int l = 0; l < L; l++) {
        for (int i = 0; i < n; i++) b->seg[i].c = &ss[i]->lc[l];
        ink_layer_forward_segs(&env, &m->layers[l], b->seg, n, b->x, R, &b->sc);
        for (int i = 0; i < n; i++)
            if (outs && outs[i].layer_outputs)
                memcpy(outs[i].layer_outputs + (size_t)l * T[i] * H, b->x + (size_t)b->seg[i].t0 * H,
                       (size_t)T[i] * H * sizeof(float));
    }
    for (int t = 0; t < R; t++) ink_rmsnorm(b->xn + (size_t)t * H, b->x + (size_t)t * H, m->norm, H, c->eps);
    int nl = 0; /* one LM head pass over every row whose logits someone wants */
    for (int i = 0; i < n; i++) {
        const ink_eval_out *o = outs ? &outs[i] : NULL;
        size_t off = (size_t)b->seg[i].t0 * H, sz = (size_t)T[i] * H * sizeof(float);
        if (o && o->hidden_prenorm) memcpy(o->hidden_prenorm, b->x + off, sz);
        if (o && o->hidden_postnorm) memcpy(o->hidden_postnorm, b->xn + off, sz);
        if (o && o->logits)
            for (int t = o->all_logits ? 0 : T[i] - 1; t < T[i]; t++) b->lrow[nl++] = b->seg[i].t0 + t;
    }
    if (nl) {
        for (int j = 0; j < nl; j++) memcpy(b->x + (size_t)j * H, b->xn + (size_t)b->lrow[j] * H, (size_t)H * sizeof(float));
        ink_lm_head(m, b->x, nl, b->logits, b->tmp);
        for (int i = 0, j = 0; i < n; i++) {
            const ink_eval_out *o = outs ? &outs[i] : NULL;
            if (!o || !o->logits) continue;
            int k = o->all_logits ? T[i] : 1;
            memcpy(o->logits, b->logits + (size_t)j * Vu, (size_t)k * Vu * sizeof(float));
            j += k;
        }
    }
    for (int i = 0; i < n; i++) {
        memcpy(ss[i]->toks + ss[i]->pos, tokens[i], (size_t)T[i] * sizeof *tokens[i]);
        ss[i]->pos += T[i];
    }
    return INK_OK;
}
