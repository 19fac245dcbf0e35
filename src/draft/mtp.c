/* mtp.c — MTP drafter loading and block forward (see mtp.h; tensor names in mtp.md §4.1). */
#include "draft/mtp.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    const ink_drafter *owner;        /* ink_drafter_share: whose weights and draft vocabulary these
                                        are (borrowed, read-only); NULL: this drafter owns them */
    ink_config cfg;                  /* the drafter directory's config.json */
    ink_weights w;                   /* its MTP tensors; views on f32 activations (act_int8 0, as always), or
                                      * bf16 ones on BF16 views where the target has them (act_bf16) */
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
    float *blog;                     /* [INK_DRAFT_ROWS][max(Vu, n_vocab)]: ink_draft_logits_many */
};


static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

void ink_drafter_free(ink_drafter *d)
{
    if (!d) return;
    for (int m = 0; m < INK_MAX_DEPTH; m++) {
        ink_layer_cache_free(&d->d[m].cache);
        free(d->d[m].conv_save);
    }
    ink_scratch_free(&d->sc);
    free(d->in2);
    free(d->tmp);
    free(d->vlog), free(d->blog);
    if (!d->owner) {
        free(d->vocab_ids), free(d->vocab_mem);
        ink_weights_free(&d->w);
    }
    free(d);
}

int ink_drafter_n_depth(const ink_drafter *d) { return d->D; }
int ink_drafter_n_files(const ink_drafter *d) { return d->w.td.n_files; }
int ink_drafter_n_vocab(const ink_drafter *d) { return d->n_vocab; }
const ink_layer_cfg *ink_depth_cfg(const ink_drafter *d, int m) { return &d->d[m].cfg; }
const ink_layer_w *ink_depth_weights(const ink_drafter *d, int m) { return &d->d[m].block; }
void ink_depth_start_at(ink_drafter *d, int m, int pos)
{
    ink_layer_cache_clear(&d->d[m].cache);
    d->d[m].cache.start = pos;
}

int ink_drafter_open(ink_drafter **out, ink_model *target, const char *dir, ink_err *err)
{
    ink_drafter *d = calloc(1, sizeof *d);
    int rc;
    if (!d) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    d->target = target;
    d->w.cfg = &d->cfg;
    d->w.act_bf16 = target->w.act_bf16; /* drafts only propose: the verify decides what is emitted */
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if ((rc = ink_config_load(&d->cfg, path, err))) goto fail;
    if ((rc = ink_tdir_open(&d->w.td, dir, INK_TDIR_MTP, err))) goto fail;
    d->w.td.read = target->w.td.read; /* --no-mmap holds for the head too */
    const ink_config *c = &d->cfg, *tc = &target->cfg;
    int blocks = 0;
    for (int i = 0; i < d->w.td.n; i++) {
        const char *n = d->w.td.refs[i].name;
        const char *q = starts(n, "model.mtp.layers.") ? n + 17 : starts(n, "mtp.layers.") ? n + 11 : NULL;
        if (q && atoi(q) + 1 > blocks) blocks = atoi(q) + 1;
    }
    if (!blocks) {
        rc = ink_err_set(err, INK_E_ABSENT, "%s: not an MTP drafter: the directory has no model.mtp.layers.* tensors%s",
                         dir, c->has_mtp_config ? " (config.json has mtp_config, but a config flag alone is not a drafter)" : "");
        goto fail;
    }
    d->D = c->mtp_depth;
    if (d->D < 1 || d->D > INK_MAX_DEPTH) {
        rc = ink_err_set(err, INK_E_FORMAT,
                         "%s/config.json: mtp_config.num_nextn_predict_layers (or text_config.num_mtp_layers) must be 1..%d, found %d",
                         dir, INK_MAX_DEPTH, d->D);
        goto fail;
    }
    if (blocks < d->D) {
        rc = ink_err_set(err, INK_E_FORMAT, "%s: config.json declares %d MTP depths but tensors exist for %d", dir, d->D,
                         blocks);
        goto fail;
    }
    for (int i = 0; i < c->mtp_n_local; i++)
        if (c->mtp_local[i] >= d->D) {
            rc = ink_err_set(err, INK_E_FORMAT, "%s/config.json: mtp_config.local_layer_ids holds %d, but there are only %d depths",
                             dir, c->mtp_local[i], d->D);
            goto fail;
        }
    if (c->hidden != tc->hidden || c->vocab != tc->vocab || c->vocab_unpadded != tc->vocab_unpadded)
        {
        rc = ink_err_set(err, INK_E_INVAL,
                         "drafter %s does not fit the target: hidden %d vs %d, vocab %d vs %d, unpadded vocab %d vs %d",
                         dir, c->hidden, tc->hidden, c->vocab, tc->vocab, c->vocab_unpadded, tc->vocab_unpadded);
        goto fail;
    }
    int H = c->hidden;
    for (int m = 0; m < d->D; m++) {
        ink_depth *p = &d->d[m];
        char pre[128], name[192];
        p->cfg = ink_config_mtp_layer(c, m);
        snprintf(name, sizeof name, "model.mtp.layers.%d.embed_norm.weight", m);
        if ((rc = ink_bind_vec(&d->w, name, H, &p->embed_norm, err))) goto fail;
        snprintf(name, sizeof name, "model.mtp.layers.%d.hidden_norm.weight", m);
        if ((rc = ink_bind_vec(&d->w, name, H, &p->hidden_norm, err))) goto fail;
        snprintf(name, sizeof name, "model.mtp.layers.%d.input_proj.weight", m);
        if ((rc = ink_bind_mat(&d->w, name, H, 2 * H, &p->input_proj, err))) goto fail;
        snprintf(pre, sizeof pre, "model.mtp.layers.%d.transformer_block.", m);
        if ((rc = ink_bind_layer(&d->w, pre, &p->cfg, &p->block, err))) goto fail;
    }
    if (c->mtp_chain_post_norm && ink_tdir_find(&d->w.td, "model.mtp.chain_norm.weight"))
        if ((rc = ink_bind_vec(&d->w, "model.mtp.chain_norm.weight", H, &d->chain_norm, err))) goto fail;
    *out = d;
    return INK_OK;
fail:
    ink_drafter_free(d);
    return rc;
}

int ink_drafter_share(ink_drafter **out, const ink_drafter *src, ink_err *err)
{
    ink_drafter *d = malloc(sizeof *d);
    if (!d) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    *d = *src; /* weights, config, draft vocabulary: views on src's (or src's owner's) */
    d->owner = src->owner ? src->owner : src;
    for (int m = 0; m < INK_MAX_DEPTH; m++) {
        memset(&d->d[m].cache, 0, sizeof d->d[m].cache);
        d->d[m].conv_save = NULL;
    }
    d->n_ctx = 0;
    memset(&d->sc, 0, sizeof d->sc);
    d->in2 = d->tmp = d->vlog = d->blog = NULL;
    if (d->n_vocab && !(d->vlog = malloc((size_t)d->n_vocab * sizeof(float)))) {
        free(d);
        return ink_err_set(err, INK_E_NOMEM, "out of memory");
    }
    *out = d;
    return INK_OK;
}

int ink_drafter_can_batch(const ink_drafter *a, const ink_drafter *b)
{
    const ink_drafter *oa = a->owner ? a->owner : a, *ob = b->owner ? b->owner : b;
    return oa == ob && a->n_ctx == b->n_ctx && a->n_ctx > 0;
}

int ink_drafter_prepare(ink_drafter *d, int n_ctx, ink_err *err)
{
    if (d->n_ctx == n_ctx) return INK_OK;
    for (int m = 0; m < d->D; m++) {
        ink_layer_cache_free(&d->d[m].cache);
        free(d->d[m].conv_save);
        d->d[m].conv_save = NULL;
    }
    ink_scratch_free(&d->sc);
    free(d->in2), free(d->tmp), free(d->blog);
    d->in2 = d->tmp = d->blog = NULL;
    d->n_ctx = 0;
    int H = d->cfg.hidden, rc;
    for (int m = 0; m < d->D; m++) {
        ink_depth *p = &d->d[m];
        if ((rc = ink_layer_cache_init(&p->cache, &d->cfg, &p->cfg, ink_layer_kv_cap(&p->cfg, n_ctx, INK_CHUNK), err)))
            return rc;
        if (!(p->conv_save = malloc(ink_layer_cache_conv_floats(&p->cache) * sizeof(float) + 1)))
            return ink_err_set(err, INK_E_NOMEM, "out of memory");
        int S = d->cfg.conv_k - 1; /* capture buffers: one chunk of raw conv inputs (ink_depth_commit) */
        for (int i = 0; i < 4; i++)
            if (!(p->cache.capt[i] = malloc((size_t)INK_CHUNK * (S ? p->cache.conv_n[i] / S : 1) * sizeof(float) + 1)))
                return ink_err_set(err, INK_E_NOMEM, "out of memory");
    }
    if ((rc = ink_scratch_init(&d->sc, &(ink_layer_env){&d->cfg, d->target->pool, NULL}, INK_CHUNK, n_ctx, err))) return rc;
    d->in2 = malloc((size_t)INK_CHUNK * 2 * H * sizeof(float));
    d->tmp = malloc((size_t)INK_CHUNK * H * sizeof(float));
    int Vu = d->target->cfg.vocab_unpadded; /* (a draft vocabulary has at most Vu rows) */
    d->blog = malloc((size_t)INK_DRAFT_ROWS * Vu * sizeof(float));
    if (!d->in2 || !d->tmp || !d->blog) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    d->n_ctx = n_ctx;
    return INK_OK;
}

void ink_drafter_reset(ink_drafter *d)
{
    for (int m = 0; m < d->D; m++) ink_layer_cache_clear(&d->d[m].cache);
}

void ink_depth_forward_many(int m, const ink_depth_seg *sg, int n, int normed_embed)
{
    ink_drafter *L = sg[0].d; /* its weights (every segment's drafter shares them) and scratch */
    const ink_model *tm = L->target;
    ink_depth *p = &L->d[m];
    int H = L->cfg.hidden;
    float eps = L->cfg.eps;
    const ink_layer_env env = {&L->cfg, tm->pool, NULL}; /* the drafter's config, the target's pool */
    ink_seg segs[INK_CHUNK];
    for (int i0 = 0; i0 < n;) {
        int k = 0, rows = 0;
        while (i0 + k < n && k < INK_CHUNK && rows + sg[i0 + k].T <= INK_CHUNK) {
            const ink_depth_seg *s = &sg[i0 + k];
            for (int t = 0; t < s->T; t++) {
                float *hid = L->in2 + (size_t)(rows + t) * 2 * H, *emb = hid + H;
                ink_rmsnorm(hid, s->h + (size_t)t * H, p->hidden_norm, H, eps);
                ink_mat_row(&tm->embed, s->tok[t], emb);
                if (normed_embed) ink_rmsnorm(emb, emb, tm->embed_norm, H, tm->cfg.eps);
                ink_rmsnorm(emb, emb, p->embed_norm, H, eps);
            }
            segs[k] = (ink_seg){&s->d->d[m].cache, s->pos0, rows, s->T};
            rows += s->T, k++;
        }
        float *x = L->tmp;
        ink_matmul(env.pool, &p->input_proj, L->in2, 2 * H, rows, x, H);
        ink_layer_forward_segs(&env, &p->block, segs, k, x, rows, &L->sc);
        if (L->chain_norm)
            for (int t = 0; t < rows; t++) ink_rmsnorm(x + (size_t)t * H, x + (size_t)t * H, L->chain_norm, H, eps);
        for (int j = 0; j < k; j++)
            memcpy(sg[i0 + j].out, x + (size_t)segs[j].t0 * H, (size_t)segs[j].T * H * sizeof(float));
        i0 += k;
    }
}

void ink_depth_forward(ink_drafter *d, int m, const float *h, const int32_t *tok, int T, int pos0, int normed_embed,
                       float *out)
{
    int H = d->cfg.hidden;
    for (int t0 = 0; t0 < T; t0 += INK_CHUNK) {
        int n = T - t0 < INK_CHUNK ? T - t0 : INK_CHUNK;
        ink_depth_seg one = {d, h + (size_t)t0 * H, tok + t0, n, pos0 + t0, out + (size_t)t0 * H};
        ink_depth_forward_many(m, &one, 1, normed_embed);
    }
}

void ink_depth_save(ink_drafter *d, int m) { ink_layer_cache_save(&d->d[m].cache, d->d[m].conv_save); }
void ink_depth_restore(ink_drafter *d, int m) { ink_layer_cache_load(&d->d[m].cache, d->d[m].conv_save); }
void ink_depth_clear(ink_drafter *d, int m) { ink_layer_cache_clear(&d->d[m].cache); }

void ink_depth_commit(ink_drafter *d, int m, int n_keep)
{
    ink_layer_cache_commit(&d->d[m].cache, d->d[m].conv_save, n_keep, d->cfg.conv_k);
}

void ink_draft_logits(const ink_drafter *d, const float *u, int final_norm, float *logits, float *tmp)
{
    const ink_model *tm = d->target;
    int H = tm->cfg.hidden;
    const float *x = u;
    if (final_norm) {
        ink_rmsnorm(tmp, u, tm->norm, H, tm->cfg.eps);
        x = tmp;
    }
    if (!d->n_vocab) {
        ink_lm_head(tm, x, 1, logits, tmp + H);
        return;
    }
    float *xs = tmp + H;
    for (int i = 0; i < H; i++) xs[i] = x[i] / tm->cfg.mup; /* as ink_lm_head */
    ink_matmul(tm->pool, &d->vhead, xs, H, 1, d->vlog, d->n_vocab);
    for (int i = 0; i < tm->cfg.vocab_unpadded; i++) logits[i] = -INFINITY;
    for (int i = 0; i < d->n_vocab; i++) logits[d->vocab_ids[i]] = d->vlog[i];
}

void ink_draft_logits_many(ink_drafter *d, const float *const *u, int n, float *const *logits)
{
    const ink_model *tm = d->target;
    int H = tm->cfg.hidden, Vu = tm->cfg.vocab_unpadded;
    float *x = d->tmp, *xs = d->in2; /* [n][H] each (n <= INK_DRAFT_ROWS <= INK_CHUNK) */
    if (!d->n_vocab) {
        for (int j = 0; j < n; j++) memcpy(x + (size_t)j * H, u[j], (size_t)H * sizeof(float));
        ink_lm_head(tm, x, n, d->blog, xs);
        for (int j = 0; j < n; j++) memcpy(logits[j], d->blog + (size_t)j * Vu, (size_t)Vu * sizeof(float));
        return;
    }
    for (int j = 0; j < n; j++)
        for (int i = 0; i < H; i++) xs[(size_t)j * H + i] = u[j][i] / tm->cfg.mup; /* as ink_lm_head */
    ink_matmul(tm->pool, &d->vhead, xs, H, n, d->blog, d->n_vocab);
    for (int j = 0; j < n; j++) {
        const float *vl = d->blog + (size_t)j * d->n_vocab;
        for (int i = 0; i < Vu; i++) logits[j][i] = -INFINITY;
        for (int i = 0; i < d->n_vocab; i++) logits[j][d->vocab_ids[i]] = vl[i];
    }
}

/* bytes of one row of W's data, and of one row of its scales (0 for float views) */
static size_t row_bytes(const ink_mat *W)
{
    int q = W->dtype == INK_QT_AFFINE || W->dtype == INK_QT_NVFP4;
    return q ? W->stride : W->stride * ink_dt_size(W->dtype);
}
static size_t srow_bytes(const ink_mat *W)
{
    int q = W->dtype == INK_QT_AFFINE || W->dtype == INK_QT_NVFP4;
    return q ? W->sstride * ink_dt_size(W->sdtype) : 0;
}

int ink_drafter_set_vocab(ink_drafter *d, const int32_t *ids, int n, ink_err *err)
{
    const ink_model *tm = d->target;
    int Vu = tm->cfg.vocab_unpadded;
    if (d->owner)
        return ink_err_set(err, INK_E_INVAL, "this drafter shares another's weights and draft vocabulary "
                                             "(ink_drafter_share): set the vocabulary on the drafter it shares");
    if (n < 0 || n > Vu) return ink_err_set(err, INK_E_INVAL, "draft vocabulary of %d tokens: expected 0..%d", n, Vu);
    if (n == 0 || n == Vu) { /* the whole vocabulary */
        free(d->vocab_ids), free(d->vocab_mem), free(d->vlog);
        d->vocab_ids = NULL, d->vocab_mem = NULL, d->vlog = NULL, d->n_vocab = 0;
        return INK_OK;
    }
    unsigned char *seen = calloc((size_t)Vu, 1);
    if (!seen) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= Vu || seen[ids[i]]) {
            int bad = ids[i];
            free(seen);
            return ink_err_set(err, INK_E_INVAL, "draft vocabulary entry %d: token id %d is %s", i, bad,
                               bad < 0 || bad >= Vu ? "outside the unpadded vocabulary" : "listed twice");
        }
        seen[ids[i]] = 1;
    }
    free(seen);
    const ink_mat *U = &tm->unembed;
    size_t rb = row_bytes(U), sb = srow_bytes(U);
    int32_t *vid = malloc((size_t)n * sizeof *vid);
    uint8_t *mem = malloc((size_t)n * (rb + 2 * sb) + 64);
    float *vl = malloc((size_t)n * sizeof *vl);
    if (!vid || !mem || !vl) {
        free(vid), free(mem), free(vl);
        return ink_err_set(err, INK_E_NOMEM, "out of memory for a draft vocabulary of %d rows", n);
    }
    uint8_t *dat = mem, *sc = mem + (size_t)n * rb, *bi = sc + (size_t)n * sb;
    for (int i = 0; i < n; i++) {
        vid[i] = ids[i];
        memcpy(dat + (size_t)i * rb, (const uint8_t *)U->data + (size_t)ids[i] * rb, rb);
        if (sb) memcpy(sc + (size_t)i * sb, (const uint8_t *)U->scales + (size_t)ids[i] * sb, sb);
        if (sb && U->biases) memcpy(bi + (size_t)i * sb, (const uint8_t *)U->biases + (size_t)ids[i] * sb, sb);
    }
    free(d->vocab_ids), free(d->vocab_mem), free(d->vlog);
    d->vocab_ids = vid, d->vocab_mem = mem, d->vlog = vl, d->n_vocab = n;
    d->vhead = *U;
    d->vhead.rows = n, d->vhead.data = dat;
    if (sb) d->vhead.scales = sc, d->vhead.biases = U->biases ? bi : NULL;
    return INK_OK;
}

int ink_drafter_load_vocab(ink_drafter *d, const char *dir, int n, ink_err *err)
{
    if (n == 0) return ink_drafter_set_vocab(d, NULL, 0, err);
    char path[4096];
    snprintf(path, sizeof path, "%s/draft_vocab.json", dir);
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je), *ids;
    if (!root) return ink_err_set(err, INK_E_IO, "%s: %s (line %d)", path, je.text, je.line);
    int rc = INK_OK;
    if (!json_is_array(ids = json_object_get(root, "ids"))) {
        rc = ink_err_set(err, INK_E_FORMAT, "%s: expected an object with an \"ids\" array of token ids", path);
    } else if (n < 0 || (size_t)n > json_array_size(ids)) {
        rc = ink_err_set(err, INK_E_INVAL, "%s: a draft vocabulary of %d tokens was asked for, the file ranks %zu", path,
                         n, json_array_size(ids));
    } else {
        int32_t *v = malloc((size_t)n * sizeof *v + 1);
        if (!v) rc = ink_err_set(err, INK_E_NOMEM, "out of memory");
        for (int i = 0; v && i < n; i++) {
            json_t *x = json_array_get(ids, (size_t)i);
            if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX) {
                rc = ink_err_set(err, INK_E_FORMAT, "%s: ids[%d] is not a token id", path, i);
                break;
            }
            v[i] = (int32_t)json_integer_value(x);
        }
        ink_err e2 = {0};
        if (v && !rc && (rc = ink_drafter_set_vocab(d, v, n, &e2))) ink_err_set(err, rc, "%s: %s", path, e2.msg);
        free(v);
    }
    json_decref(root);
    return rc;
}
