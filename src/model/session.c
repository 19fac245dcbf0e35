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
    if ((rc = ink_scratch_init(&s->sc, &(ink_layer_env){&m->cfg, m->pool}, INK_CHUNK, n_ctx, err))) goto fail;
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
