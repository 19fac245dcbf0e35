/* load.c — model directory -> ink_model: detection table, tensor binding with strict shapes (the
 * ink_bind_* functions bind into an ink_weights, shared with the MTP drafter).
 *
 * Tensor names (inkling-text.md §2): the release names (model.llm.*) first; the transformers names
 * (model.language_model.* for the multimodal class, model.* + lm_head for InklingForCausalLM) are
 * accepted too. Fused gate/up tensors: release w13 tensors are row-interleaved (even rows gate, odd
 * rows up) and become two strided views; the HF gate_up_proj is half-split; pre-split stacks
 * (gate_proj/up_proj) bind directly. */
#include "model/model.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void *ink_weights_own(ink_weights *wt, void *p)
{
    if (!p) return NULL;
    if (wt->n_owned == wt->cap_owned) {
        int cap = wt->cap_owned ? 2 * wt->cap_owned : 256;
        void **n = realloc(wt->owned, (size_t)cap * sizeof *n);
        if (!n) {
            free(p);
            return NULL;
        }
        wt->owned = n, wt->cap_owned = cap;
    }
    return wt->owned[wt->n_owned++] = p;
}

static const char *shape_str(const ink_st_tensor *t, char *buf, size_t n)
{
    size_t l = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->ndim && l < n; i++)
        l += (size_t)snprintf(buf + l, n - l, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (l < n) snprintf(buf + l, n - l, "]");
    return buf;
}

static int is_float(int dt) { return dt == INK_DT_F32 || dt == INK_DT_BF16 || dt == INK_DT_F16; }

static int not_float(ink_tdir *td, const ink_tref *r, ink_err *err)
{
    (void)td;
    return ink_err_set(err, INK_E_UNSUPPORTED, "tensor %s has dtype %s; expected F32, BF16 or F16", r->name,
                       ink_dtype_name(r->t->dtype));
}

/* Pointer to the tensor's data in the mapping, never a copy: the data may start at any address (a
 * header that is not padded puts them at an odd offset; formats.md says readers must not assume
 * alignment), and every kernel reads weights, scales and biases with unaligned loads. */
static const void *tensor_data(ink_weights *wt, const ink_tref *r, ink_err *err)
{
    static const uint64_t none; /* header-only models: a non-NULL pointer never read */
    if (wt->header_only) return &none;
    if (ink_tdir_map(&wt->td, r, err)) return NULL;
    return r->t->data;
}

static const ink_tref *need(ink_tdir *td, const char *name, ink_err *err)
{
    const ink_tref *r = ink_tdir_find(td, name);
    if (!r) ink_err_set(err, INK_E_FORMAT, "%s: required tensor %s is missing", td->dir, name);
    return r;
}

int ink_bind_vec(ink_weights *wt, const char *name, int64_t n, float **out, ink_err *err)
{
    const ink_tref *r = need(&wt->td, name, err);
    if (!r) return err ? err->code : INK_E_FORMAT;
    if (!is_float(r->t->dtype)) return not_float(&wt->td, r, err);
    int64_t ne = ink_st_numel(r->t);
    if (ne != n) {
        char b[96];
        return ink_err_set(err, INK_E_FORMAT, "tensor %s: expected %lld elements, found shape %s", name, (long long)n,
                           shape_str(r->t, b, sizeof b));
    }
    const void *d = tensor_data(wt, r, err);
    float *f = d ? ink_weights_own(wt, malloc((size_t)(n ? n : 1) * sizeof(float))) : NULL;
    if (!f) return d ? ink_err_set(err, INK_E_NOMEM, "out of memory") : err->code;
    for (int64_t i = 0; i < n && wt->header_only; i++) f[i] = 0.0f;
    for (int64_t i = 0; i < n && !wt->header_only; i++) {
        if (r->t->dtype == INK_DT_F32) f[i] = ink_ld_f32(d, (size_t)i);
        else if (r->t->dtype == INK_DT_BF16) f[i] = ink_bf16_to_f32(ink_ld_u16(d, (size_t)i));
        else f[i] = ink_f16_to_f32(ink_ld_u16(d, (size_t)i));
    }
    *out = f;
    return INK_OK;
}

static int bind_scalar(ink_weights *wt, const char *name, float *out, ink_err *err)
{
    float *v;
    int rc = ink_bind_vec(wt, name, 1, &v, err);
    if (!rc) *out = v[0];
    return rc;
}

/* ---- quantized tensors (formats.md §4, §3.2) ----------------------------------------------- */

/* MLX module prefix of a weight tensor: name without ".weight" (stacked parameters such as
 * mlp.experts.w13_weight are their own prefix). */
static void quant_prefix(const char *name, char *out, size_t n)
{
    size_t l = strlen(name);
    if (l > 7 && !strcmp(name + l - 7, ".weight")) snprintf(out, n, "%.*s", (int)(l - 7), name);
    else snprintf(out, n, "%s", name);
}

/* A bound stack of n matrices (n = 0: one), as the view of matrix 0 plus per-matrix steps. */
typedef struct stackv {
    ink_mat m;            /* matrix 0, all its rows */
    size_t rowb;          /* bytes between rows of data */
    size_t estep_b;       /* bytes between matrices (data) */
    size_t estep_s;       /* elements between matrices (scales / biases) */
    const float *gscale;  /* NVFP4: per-matrix scale2 [n], else NULL */
} stackv;

static int dims_ok(const ink_st_tensor *t, int n, int64_t rows, int64_t cols)
{
    return n ? (t->ndim == 3 && t->shape[0] == n && t->shape[1] == rows && t->shape[2] == cols)
             : (t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols);
}

static int shape_err(ink_err *err, const ink_st_tensor *t, const char *name, const char *what, int n, int64_t rows,
                     int64_t cols)
{
    char b[96];
    if (n)
        return ink_err_set(err, INK_E_FORMAT, "tensor %s: expected %sshape [%d, %lld, %lld] from config.json, found %s",
                           name, what, n, (long long)rows, (long long)cols, shape_str(t, b, sizeof b));
    return ink_err_set(err, INK_E_FORMAT, "tensor %s: expected %sshape [%lld, %lld] from config.json, found %s", name,
                       what, (long long)rows, (long long)cols, shape_str(t, b, sizeof b));
}

/* MLX affine: P.weight U32 [.., rows, cols*b/32], P.scales / P.biases [.., rows, cols/gs]; b and gs from
 * the shapes (formats.md §4.9). */
static int bind_affine(ink_weights *wt, const ink_tref *r, const ink_tref *rs, const char *pfx, int n,
                       int rows, int cols, stackv *out, ink_err *err)
{
    const ink_st_tensor *t = r->t, *ts = rs->t;
    char bn[600];
    snprintf(bn, sizeof bn, "%s.biases", pfx);
    const ink_tref *rb = ink_tdir_find(&wt->td, bn);
    if (t->dtype != INK_DT_U32)
        return ink_err_set(err, INK_E_FORMAT, "tensor %s: has %s.scales, so it must be U32 (MLX packed), found %s",
                           r->name, pfx, ink_dtype_name(t->dtype));
    if (!is_float(ts->dtype) || !rb)
        return ink_err_set(err, INK_E_UNSUPPORTED,
                           "tensor %s: scales of dtype %s%s; only MLX affine (float scales and biases) is supported",
                           r->name, ink_dtype_name(ts->dtype), rb ? "" : " without biases (an MLX fp mode)");
    int nd = t->ndim;
    if (nd < 2 || ts->ndim != nd || rb->t->ndim != nd || ts->dtype != rb->t->dtype)
        return ink_err_set(err, INK_E_FORMAT, "tensor %s: weight, scales and biases ranks or dtypes disagree", r->name);
    int64_t pw = t->shape[nd - 1], G = ts->shape[nd - 1];
    int bits = (int)(pw * 32 / cols), gs = G ? (int)(cols / G) : 0;
    if (pw * 32 % cols || bits < 2 || bits > 8 || bits == 7 || !G || cols % G || (gs != 32 && gs != 64 && gs != 128))
        return ink_err_set(err, INK_E_FORMAT,
                           "tensor %s: packed width %lld and %lld groups do not give a valid MLX affine layout for %d "
                           "inputs (bits 2,3,4,5,6,8; group 32, 64, 128)",
                           r->name, (long long)pw, (long long)G, cols);
    if (!dims_ok(t, n, rows, pw)) return shape_err(err, t, r->name, "packed ", n, rows, pw);
    if (!dims_ok(ts, n, rows, G)) return shape_err(err, ts, rs->name, "", n, rows, G);
    for (int i = 0; i < nd; i++)
        if (rb->t->shape[i] != ts->shape[i]) return shape_err(err, rb->t, rb->name, "", n, rows, G);
    const void *d = tensor_data(wt, r, err), *s = d ? tensor_data(wt, rs, err) : NULL;
    const void *b = s ? tensor_data(wt, rb, err) : NULL;
    if (!b) return err->code;
    memset(out, 0, sizeof *out);
    out->m = (ink_mat){.dtype = INK_QT_AFFINE, .rows = rows, .cols = cols, .stride = (size_t)pw * 4, .data = d,
                       .bits = bits, .group = gs, .sdtype = ts->dtype, .sstride = (size_t)G, .scales = s, .biases = b,
                       .gscale = 1.0f, .int8 = wt->act_int8};
    out->rowb = (size_t)pw * 4;
    out->estep_b = (size_t)rows * pw * 4;
    out->estep_s = (size_t)rows * G;
    return INK_OK;
}

/* NVFP4 (ModelOpt): X U8 [n, rows, cols/2], X.scale F8_E4M3 [n, rows, cols/16], X.scale2 F32 [n]. */
static int bind_nvfp4(ink_weights *wt, const ink_tref *r, const ink_tref *rs, int n, int rows, int cols,
                      stackv *out, ink_err *err)
{
    char s2[600];
    snprintf(s2, sizeof s2, "%s.scale2", r->name);
    const ink_tref *r2 = ink_tdir_find(&wt->td, s2);
    if (r->t->dtype != INK_DT_U8 || rs->t->dtype != INK_DT_F8_E4M3 || !r2 || r2->t->dtype != INK_DT_F32)
        return ink_err_set(err, INK_E_FORMAT,
                           "tensor %s: NVFP4 needs U8 codes, F8_E4M3 %s.scale and F32 %s.scale2 (found %s, %s, %s)",
                           r->name, r->name, r->name, ink_dtype_name(r->t->dtype), ink_dtype_name(rs->t->dtype),
                           r2 ? ink_dtype_name(r2->t->dtype) : "missing");
    if (cols % 16) return ink_err_set(err, INK_E_FORMAT, "tensor %s: NVFP4 needs a multiple of 16 inputs", r->name);
    if (!dims_ok(r->t, n, rows, cols / 2)) return shape_err(err, r->t, r->name, "packed ", n, rows, cols / 2);
    if (!dims_ok(rs->t, n, rows, cols / 16)) return shape_err(err, rs->t, rs->name, "", n, rows, cols / 16);
    int cnt = n ? n : 1;
    if (ink_st_numel(r2->t) != cnt)
        return ink_err_set(err, INK_E_FORMAT, "tensor %s: expected %d scale2 values, found %lld", r2->name, cnt,
                           (long long)ink_st_numel(r2->t));
    float *g2;
    int rc = ink_bind_vec(wt, r2->name, cnt, &g2, err);
    if (rc) return rc;
    const void *d = tensor_data(wt, r, err), *s = d ? tensor_data(wt, rs, err) : NULL;
    if (!s) return err->code;
    memset(out, 0, sizeof *out);
    out->m = (ink_mat){.dtype = INK_QT_NVFP4, .rows = rows, .cols = cols, .stride = (size_t)cols / 2, .data = d,
                       .bits = 4, .group = 16, .sdtype = INK_DT_F8_E4M3, .sstride = (size_t)cols / 16, .scales = s,
                       .gscale = g2[0], .int8 = wt->act_int8};
    out->rowb = (size_t)cols / 2;
    out->estep_b = (size_t)rows * cols / 2;
    out->estep_s = (size_t)rows * cols / 16;
    out->gscale = g2;
    return INK_OK;
}

/* A stack of `n` matrices [n, rows, cols] (n = 0: plain 2-D [rows, cols]): float, MLX affine (when
 * <prefix>.scales exists) or NVFP4 (when <name>.scale exists). */
static int bind_stack(ink_weights *wt, const char *name, int n, int rows, int cols, stackv *out, ink_err *err)
{
    const ink_tref *r = need(&wt->td, name, err);
    if (!r) return err->code;
    char pfx[512], sn[600];
    quant_prefix(name, pfx, sizeof pfx);
    snprintf(sn, sizeof sn, "%s.scales", pfx);
    const ink_tref *rs = ink_tdir_find(&wt->td, sn);
    if (rs) return bind_affine(wt, r, rs, pfx, n, rows, cols, out, err);
    snprintf(sn, sizeof sn, "%s.scale", name);
    if ((rs = ink_tdir_find(&wt->td, sn))) return bind_nvfp4(wt, r, rs, n, rows, cols, out, err);
    if (!is_float(r->t->dtype)) return not_float(&wt->td, r, err);
    if (!dims_ok(r->t, n, rows, cols)) return shape_err(err, r->t, name, "", n, rows, cols);
    const void *d = tensor_data(wt, r, err);
    if (!d) return err->code;
    size_t es = r->t->dtype == INK_DT_F32 ? 4 : 2;
    memset(out, 0, sizeof *out);
    out->m = (ink_mat){.dtype = r->t->dtype, .rows = rows, .cols = cols, .stride = (size_t)cols, .data = d,
                       .gscale = 1.0f, .bf16x = wt->act_bf16};
    out->rowb = (size_t)cols * es;
    out->estep_b = (size_t)rows * cols * es;
    return INK_OK;
}

/* Rows row0, row0 + step, ... (nrows of them) of matrix e of a stack. */
static ink_mat sub(const stackv *s, int e, int row0, int nrows, int step)
{
    ink_mat v = s->m;
    int q = v.dtype == INK_QT_AFFINE || v.dtype == INK_QT_NVFP4;
    v.rows = nrows;
    v.data = (const uint8_t *)v.data + (size_t)e * s->estep_b + (size_t)row0 * s->rowb;
    v.stride *= (size_t)step;
    if (q) {
        size_t so = (size_t)e * s->estep_s + (size_t)row0 * v.sstride;
        size_t es = ink_dt_size(v.sdtype);
        v.scales = (const uint8_t *)v.scales + so * es;
        if (v.biases) v.biases = (const uint8_t *)v.biases + so * es;
        v.sstride *= (size_t)step;
    }
    if (s->gscale) v.gscale = s->gscale[e];
    return v;
}

int ink_bind_mat(ink_weights *wt, const char *name, int rows, int cols, ink_mat *out, ink_err *err)
{
    stackv s;
    int rc = bind_stack(wt, name, 0, rows, cols, &s, err);
    if (!rc) *out = s.m;
    return rc;
}

/* Conv taps [C,1,K] (torch), [C,K,1] (MLX) or [C,K] -> f32 [C][K]. */
static int bind_conv(ink_weights *wt, const char *name, int C, int K, float **out, ink_err *err)
{
    const ink_tref *r = need(&wt->td, name, err);
    if (!r) return err->code;
    const ink_st_tensor *t = r->t;
    int ok = t->shape[0] == C && ((t->ndim == 3 && ((t->shape[1] == 1 && t->shape[2] == K) ||
                                                   (t->shape[1] == K && t->shape[2] == 1))) ||
                                  (t->ndim == 2 && t->shape[1] == K));
    if (!ok) {
        char b[96];
        return ink_err_set(err, INK_E_FORMAT, "tensor %s: expected conv shape [%d, 1, %d] (or [%d, %d, 1]), found %s",
                           name, C, K, C, K, shape_str(t, b, sizeof b));
    }
    return ink_bind_vec(wt, name, (int64_t)C * K, out, err); /* all layouts are C-major with K contiguous */
}

/* Tries prefix+suffix for each suffix; returns the index found or -1. */
static int find_suffix(ink_tdir *td, const char *prefix, const char *const *suf, char *name, size_t n)
{
    for (int i = 0; suf[i]; i++) {
        snprintf(name, n, "%s%s", prefix, suf[i]);
        if (ink_tdir_find(td, name)) return i;
    }
    snprintf(name, n, "%s%s", prefix, suf[0] ? suf[0] : "");
    return -1;
}

#define SUF(...) ((const char *const[]){__VA_ARGS__, NULL})

static int bind_named(ink_weights *wt, const char *prefix, const char *const *suf, int kind, int a, int b,
                      void *out, ink_err *err)
{
    char name[512];
    find_suffix(&wt->td, prefix, suf, name, sizeof name);
    switch (kind) {
    case 0: return ink_bind_vec(wt, name, a, out, err);
    case 1: return ink_bind_mat(wt, name, a, b, out, err);
    case 2: return bind_conv(wt, name, a, b, out, err);
    default: return bind_scalar(wt, name, out, err);
    }
}

/* gate/up/down of a stack of n SwiGLUs (n = 0: one dense MLP) of width I. Row selections (interleave,
 * half split, expert slice) apply to codes, scales and biases alike (formats.md §4.2). */
static int bind_ffn(ink_weights *wt, const char *prefix, int n, int I, int H, const char *const *fused_il,
                    const char *const *fused_half, const char *const *gate, const char *const *up,
                    const char *const *down, ink_ffn_w *out, ink_err *err)
{
    char name[512];
    int cnt = n ? n : 1, rc;
    stackv s;
    int il = find_suffix(&wt->td, prefix, fused_il, name, sizeof name) >= 0;
    int half = !il && fused_half[0] && find_suffix(&wt->td, prefix, fused_half, name, sizeof name) >= 0;
    int split = !il && !half && find_suffix(&wt->td, prefix, gate, name, sizeof name) >= 0;
    if (il || !(half || split)) { /* release layout: even rows gate, odd rows up */
        find_suffix(&wt->td, prefix, fused_il, name, sizeof name);
        if ((rc = bind_stack(wt, name, n, 2 * I, H, &s, err))) return rc;
        for (int e = 0; e < cnt; e++)
            out[e].gate = sub(&s, e, 0, I, 2), out[e].up = sub(&s, e, 1, I, 2), out[e].gu = sub(&s, e, 0, 2 * I, 1),
            out[e].gu_mode = 1;
    } else if (half) { /* HF gate_up_proj: first half gate, second half up */
        if ((rc = bind_stack(wt, name, n, 2 * I, H, &s, err))) return rc;
        for (int e = 0; e < cnt; e++)
            out[e].gate = sub(&s, e, 0, I, 1), out[e].up = sub(&s, e, I, I, 1), out[e].gu = sub(&s, e, 0, 2 * I, 1),
            out[e].gu_mode = 2;
    } else { /* pre-split gate_proj / up_proj */
        if ((rc = bind_stack(wt, name, n, I, H, &s, err))) return rc;
        for (int e = 0; e < cnt; e++) out[e].gate = sub(&s, e, 0, I, 1);
        find_suffix(&wt->td, prefix, up, name, sizeof name);
        if ((rc = bind_stack(wt, name, n, I, H, &s, err))) return rc;
        for (int e = 0; e < cnt; e++) out[e].up = sub(&s, e, 0, I, 1);
    }
    find_suffix(&wt->td, prefix, down, name, sizeof name);
    if ((rc = bind_stack(wt, name, n, H, I, &s, err))) return rc;
    for (int e = 0; e < cnt; e++) out[e].down = sub(&s, e, 0, H, 1);
    return INK_OK;
}

int ink_bind_layer(ink_weights *wt, const char *p, const ink_layer_cfg *l, ink_layer_w *w, ink_err *err)
{
    const ink_config *c = wt->cfg;
    int H = c->hidden, K = c->conv_k, nh = l->n_head, nkv = l->n_kv, d = l->head_dim;
    w->cfg = *l;
    int rc = 0;
    rc = rc ? rc : bind_named(wt, p, SUF("attn_norm.weight", "input_layernorm.weight"), 0, H, 0, &w->attn_norm, err);
    rc = rc ? rc : bind_named(wt, p, SUF("mlp_norm.weight", "post_attention_layernorm.weight"), 0, H, 0, &w->mlp_norm, err);
    rc = rc ? rc : bind_named(wt, p, SUF("attn_sconv.weight", "attn_sconv.conv1d.weight", "attn_sconv.conv.weight"), 2, H, K, &w->attn_conv, err);
    rc = rc ? rc : bind_named(wt, p, SUF("mlp_sconv.weight", "mlp_sconv.conv1d.weight", "mlp_sconv.conv.weight"), 2, H, K, &w->mlp_conv, err);
    rc = rc ? rc : bind_named(wt, p, SUF("attn.wq_du.weight", "self_attn.q_proj.weight"), 1, nh * d, H, &w->at.wq, err);
    rc = rc ? rc : bind_named(wt, p, SUF("attn.wk_dv.weight", "self_attn.k_proj.weight"), 1, nkv * d, H, &w->at.wk, err);
    rc = rc ? rc : bind_named(wt, p, SUF("attn.wv_dv.weight", "self_attn.v_proj.weight"), 1, nkv * d, H, &w->at.wv, err);
    rc = rc ? rc : bind_named(wt, p, SUF("attn.wr_du.weight", "self_attn.r_proj.weight"), 1, nh * c->d_rel, H, &w->at.wr, err);
    rc = rc ? rc : bind_named(wt, p, SUF("attn.wo_ud.weight", "self_attn.o_proj.weight"), 1, H, nh * d, &w->at.wo, err);
    rc = rc ? rc : bind_named(wt, p, SUF("attn.q_norm.weight", "self_attn.q_norm.weight"), 0, d, 0, &w->at.q_norm, err);
    rc = rc ? rc : bind_named(wt, p, SUF("attn.k_norm.weight", "self_attn.k_norm.weight"), 0, d, 0, &w->at.k_norm, err);
    rc = rc ? rc : bind_named(wt, p, SUF("attn.k_sconv.weight", "self_attn.k_sconv.conv1d.weight", "self_attn.k_sconv.conv.weight"), 2, nkv * d, K, &w->at.k_conv, err);
    rc = rc ? rc : bind_named(wt, p, SUF("attn.v_sconv.weight", "self_attn.v_sconv.conv1d.weight", "self_attn.v_sconv.conv.weight"), 2, nkv * d, K, &w->at.v_conv, err);
    rc = rc ? rc : bind_named(wt, p, SUF("attn.rel_logits_proj.proj", "self_attn.rel_logits_proj.proj", "self_attn.rel_proj"), 0, (int64_t)c->d_rel * l->rel_extent, 0, &w->at.rel, err);
    if (rc) return rc;
    if (!l->moe) {
        w->inter = c->dense_inter;
        rc = bind_ffn(wt, p, 0, c->dense_inter, H, SUF("mlp.w13_dn.weight"), SUF(NULL),
                      SUF("mlp.gate_proj.weight"), SUF("mlp.up_proj.weight"), SUF("mlp.w2_md.weight", "mlp.down_proj.weight"),
                      &w->dense, err);
        return rc ? rc : bind_named(wt, p, SUF("mlp.global_scale"), 3, 0, 0, &w->dense_scale, err);
    }
    int E = c->n_expert, S = c->n_shared, I = c->expert_inter;
    w->inter = I;
    rc = bind_named(wt, p, SUF("mlp.gate.weight", "mlp.gate_weight"), 1, E + S, H, &w->router, err);
    rc = rc ? rc : bind_named(wt, p, SUF("mlp.gate.bias", "mlp.gate.e_score_correction_bias", "mlp.e_score_correction_bias"), 0, E, 0, &w->router_bias, err);
    rc = rc ? rc : bind_named(wt, p, SUF("mlp.gate.global_scale", "mlp.global_scale"), 3, 0, 0, &w->router_scale, err);
    if (rc) return rc;
    w->experts = ink_weights_own(wt, calloc((size_t)E, sizeof *w->experts));
    w->shared = ink_weights_own(wt, calloc((size_t)(S ? S : 1), sizeof *w->shared));
    if (!w->experts || !w->shared) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    rc = bind_ffn(wt, p, E, I, H, SUF("mlp.experts.w13_weight"), SUF("mlp.experts.gate_up_proj"),
                  SUF("mlp.experts.gate_proj.weight", "mlp.switch_mlp.gate_proj.weight", "mlp.experts.gate_proj"),
                  SUF("mlp.experts.up_proj.weight", "mlp.switch_mlp.up_proj.weight", "mlp.experts.up_proj"),
                  SUF("mlp.experts.w2_weight", "mlp.experts.down_proj", "mlp.experts.down_proj.weight", "mlp.switch_mlp.down_proj.weight"),
                  w->experts, err);
    if (rc || !S) return rc;
    return bind_ffn(wt, p, S, I, H, SUF("mlp.shared_experts.shared_w13_weight"), SUF(NULL),
                    SUF("mlp.shared_experts.gate_proj.weight", "mlp.shared_experts.gate_proj"),
                    SUF("mlp.shared_experts.up_proj.weight", "mlp.shared_experts.up_proj"),
                    SUF("mlp.shared_experts.shared_w2_weight", "mlp.shared_experts.down_proj.weight", "mlp.shared_experts.down_proj"),
                    w->shared, err);
}

/* ---- naming conventions and detection ---------------------------------------------------- */

typedef struct naming {
    const char *id;          /* "release", "hf", "hf-causal" */
    const char *embed, *norm, *unembed, *layer_fmt;
    const char *embed_norm[3];
} naming;

static const naming namings[] = {
    {"release", "model.llm.embed.weight", "model.llm.norm.weight", "model.llm.unembed.weight", "model.llm.layers.%d.",
     {"model.llm.embed_norm.weight", NULL, NULL}},
    {"hf", "model.language_model.embed_tokens.weight", "model.language_model.norm.weight", "lm_head.weight",
     "model.language_model.layers.%d.",
     {"model.language_model.embed_norm.weight", "model.language_model.embed_tokens.embed_norm.weight", NULL}},
    {"hf-causal", "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", "model.layers.%d.",
     {"model.embed_norm.weight", "model.embed_tokens.embed_norm.weight", NULL}},
    /* mlx-vlm runtime names (what its sanitize() produces and a re-saved conversion stores) */
    {"mlx-vlm", "language_model.model.embed_tokens.weight", "language_model.model.norm.weight",
     "language_model.lm_head.weight", "language_model.model.layers.%d.",
     {"language_model.model.embed_norm.weight", NULL, NULL}},
};

static const naming *detect_naming(const ink_tdir *td)
{
    for (size_t i = 0; i < sizeof namings / sizeof namings[0]; i++)
        if (ink_tdir_find(td, namings[i].embed)) return &namings[i];
    return NULL;
}

static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* ---- quantization block and per-tensor evidence (formats.md §4.9, §5) ------------------------- */

typedef struct qblock {
    json_t *root;         /* config.json (owned) */
    json_t *q;            /* the MLX block (borrowed from root) or NULL */
    const char *method;   /* foreign quantization_config.quant_method, or NULL */
    int bits, group;      /* defaults */
    const char *mode;
} qblock;

static void qblock_load(const char *dir, qblock *qb)
{
    memset(qb, 0, sizeof *qb);
    qb->bits = 4, qb->group = 64, qb->mode = "affine";
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    qb->root = json_load_file(path, 0, NULL);
    if (!qb->root) return;
    json_t *levels[2] = {qb->root, json_object_get(qb->root, "text_config")};
    for (int i = 0; i < 2 && !qb->q; i++) {
        if (!json_is_object(levels[i])) continue;
        json_t *q = json_object_get(levels[i], "quantization");
        json_t *qc = json_object_get(levels[i], "quantization_config");
        if (json_is_object(q)) qb->q = q;
        else if (json_is_object(qc) && !json_object_get(qc, "quant_method")) qb->q = qc;
        else if (json_is_object(qc) && !qb->method) qb->method = json_string_value(json_object_get(qc, "quant_method"));
    }
    if (!qb->q) return;
    json_t *v;
    if (json_is_integer(v = json_object_get(qb->q, "bits"))) qb->bits = (int)json_integer_value(v);
    if (json_is_integer(v = json_object_get(qb->q, "group_size"))) qb->group = (int)json_integer_value(v);
    if (json_is_string(v = json_object_get(qb->q, "mode"))) qb->mode = json_string_value(v);
}

static void qblock_free(qblock *qb) { json_decref(qb->root); }

static int ends(const char *s, const char *suf)
{
    size_t l = strlen(s), k = strlen(suf);
    return l >= k && !strcmp(s + l - k, suf);
}

/* Bits and group of an affine tensor from its shapes: the input width is scales' groups x group;
 * the config's default group is tried first, then 64, 32, 128. 0 when no candidate fits. */
static int affine_shape(const ink_tdir *td, const ink_tref *sc, int pref_gs, int *bits, int *gs, int64_t *params)
{
    char pfx[512], wn[600];
    snprintf(pfx, sizeof pfx, "%.*s", (int)(strlen(sc->name) - 7), sc->name);
    snprintf(wn, sizeof wn, "%s.weight", pfx);
    const ink_tref *w = ink_tdir_find(td, wn);
    if (!w) w = ink_tdir_find(td, pfx);
    if (!w || w->t->ndim < 1 || sc->t->ndim != w->t->ndim) return 0;
    int64_t pw = w->t->shape[w->t->ndim - 1], G = sc->t->shape[sc->t->ndim - 1];
    int cand[4] = {pref_gs, 64, 32, 128};
    for (int i = 0; i < 4; i++) {
        int64_t in = G * cand[i];
        if (in <= 0 || (pw * 32) % in) continue;
        int b = (int)(pw * 32 / in);
        if (b < 2 || b > 8 || b == 7) continue;
        *bits = b, *gs = cand[i];
        *params = ink_st_numel(w->t) / pw * in;
        return 1;
    }
    return 0;
}

/* Canonical spelling of a module path for matching override keys against stored prefixes: native,
 * transformers and mlx-vlm runtime names map to one form. */
static void canon(const char *p, char *out, size_t n)
{
    static const char *const strip[] = {"language_model.model.", "language_model.", "model.language_model.",
                                        "model.llm.", "model.", NULL};
    static const char *const rep[][2] = {
        {"self_attn.q_proj", "attn.wq_du"}, {"self_attn.k_proj", "attn.wk_dv"}, {"self_attn.v_proj", "attn.wv_dv"},
        {"self_attn.r_proj", "attn.wr_du"}, {"self_attn.o_proj", "attn.wo_ud"}, {"mlp.switch_mlp.", "mlp.experts."},
        {"mlp.down_proj", "mlp.w2_md"},     {"embed_tokens", "embed"},         {"lm_head", "unembed"},
    };
    for (int i = 0; strip[i]; i++)
        if (starts(p, strip[i])) {
            p += strlen(strip[i]);
            break;
        }
    char a[512], b[512];
    snprintf(a, sizeof a, "%s", p);
    for (size_t i = 0; i < sizeof rep / sizeof rep[0]; i++) {
        char *h = strstr(a, rep[i][0]);
        if (!h) continue;
        snprintf(b, sizeof b, "%.*s%s%s", (int)(h - a), a, rep[i][1], h + strlen(rep[i][0]));
        snprintf(a, sizeof a, "%s", b);
    }
    snprintf(out, n, "%s", a);
}

typedef struct qpfx {
    char c[256];
    int quant;
} qpfx;

static int qpfx_cmp(const void *a, const void *b) { return strcmp(((const qpfx *)a)->c, ((const qpfx *)b)->c); }

/* Checks the quantization block against the tensors (formats.md §5.2): scales without a block, a
 * foreign method, an fp mode, an override `false` on a quantized module or a dict on a float one. */
static int quant_check(const ink_tdir *td, const qblock *qb, ink_err *err)
{
    int n_aff = 0, n_nv = 0;
    for (int i = 0; i < td->n; i++) {
        n_aff += ends(td->refs[i].name, ".scales");
        n_nv += ends(td->refs[i].name, ".scale2");
    }
    if (qb->method && strcmp(qb->method, "modelopt") && (n_aff || n_nv || !qb->q))
        return ink_err_set(err, INK_E_UNSUPPORTED,
                           "%s: quantization_config.quant_method \"%s\" is not supported (MLX affine and ModelOpt NVFP4 are)",
                           td->dir, qb->method);
    if (n_aff && !qb->q)
        return ink_err_set(err, INK_E_FORMAT, "%s: tensors have MLX .scales but config.json has no quantization block",
                           td->dir);
    if (n_aff && strcmp(qb->mode, "affine"))
        return ink_err_set(err, INK_E_UNSUPPORTED, "%s: MLX quantization mode \"%s\" is not supported (affine is)",
                           td->dir, qb->mode);
    if (!qb->q) return INK_OK;
    /* stored module prefixes, canonical, with whether they are quantized */
    qpfx *ps = calloc(td->n > 0 ? (size_t)td->n : 1, sizeof *ps);
    if (!ps) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    int np = 0;
    for (int i = 0; i < td->n; i++) {
        const char *nm = td->refs[i].name;
        char pfx[512];
        if (ends(nm, ".scales")) snprintf(pfx, sizeof pfx, "%.*s", (int)(strlen(nm) - 7), nm);
        else if (ends(nm, ".weight")) snprintf(pfx, sizeof pfx, "%.*s", (int)(strlen(nm) - 7), nm);
        else continue;
        canon(pfx, ps[np].c, sizeof ps[np].c);
        ps[np++].quant = ends(nm, ".scales");
    }
    qsort(ps, (size_t)np, sizeof *ps, qpfx_cmp);
    int rc = INK_OK;
    const char *key;
    json_t *v;
    json_object_foreach(qb->q, key, v) {
        if (!strcmp(key, "bits") || !strcmp(key, "group_size") || !strcmp(key, "mode")) continue;
        if (!json_is_false(v) && !json_is_object(v)) continue;
        qpfx k;
        canon(key, k.c, sizeof k.c);
        qpfx *lo = bsearch(&k, ps, (size_t)np, sizeof *ps, qpfx_cmp);
        if (!lo) continue; /* a module this engine does not load (vision, audio, ...) */
        int quant = 0;     /* several stored spellings may share a canonical form: any quantized one counts */
        while (lo > ps && !strcmp(lo[-1].c, k.c)) lo--;
        for (qpfx *q = lo; q < ps + np && !strcmp(q->c, k.c); q++) quant |= q->quant;
        if (json_is_false(v) && quant) {
            rc = ink_err_set(err, INK_E_FORMAT, "%s: config.json quantization says %s is not quantized, but it has .scales",
                             td->dir, key);
            break;
        }
        if (json_is_object(v) && !quant) {
            rc = ink_err_set(err, INK_E_FORMAT,
                             "%s: config.json quantization has parameters for %s, but the checkpoint stores it unquantized",
                             td->dir, key);
            break;
        }
    }
    free(ps);
    return rc;
}

static void describe_tensors(const ink_tdir *td, const qblock *qb, ink_model_info *info)
{
    int cnt[INK_DT_COUNT] = {0};
    int mlx = 0, nvfp4 = 0, bits_n[9] = {0}, gs_main = 0;
    for (int i = 0; i < td->n; i++) {
        const char *n = td->refs[i].name;
        const ink_st_tensor *t = td->refs[i].t;
        if (ends(n, ".scales")) {
            int b, g;
            int64_t np;
            mlx++;
            if (affine_shape(td, &td->refs[i], qb->group, &b, &g, &np)) {
                bits_n[b]++;
                if (!gs_main) gs_main = g;
                info->n_params += np;
            }
            continue;
        }
        if (ends(n, ".biases") || ends(n, ".scale") || ends(n, ".input_amax") || ends(n, ".original_shape")) continue;
        if (ends(n, ".scale2")) {
            nvfp4++;
            continue;
        }
        char sn[600];
        snprintf(sn, sizeof sn, "%s.scale", n);
        if (t->dtype == INK_DT_U8 && ink_tdir_find(td, sn)) {
            info->n_params += 2 * ink_st_numel(t);
            continue;
        }
        size_t l = strlen(n);
        snprintf(sn, sizeof sn, "%.*s.scales", (int)(ends(n, ".weight") ? l - 7 : l), n);
        if (t->dtype == INK_DT_U32 && ink_tdir_find(td, sn)) continue; /* counted with its scales */
        cnt[t->dtype]++;
        info->n_params += ink_st_numel(t);
    }
    char *p = info->dtype;
    size_t left = sizeof info->dtype;
    int major = -1;
    for (int d = 0; d < INK_DT_COUNT; d++)
        if (cnt[d] && (major < 0 || cnt[d] > cnt[major])) major = d;
    int w = snprintf(p, left, "%s", major >= 0 ? ink_dtype_name(major) : "none");
    for (int d = 0; d < INK_DT_COUNT && w > 0 && (size_t)w < left; d++)
        if (cnt[d] && d != major) w += snprintf(p + w, left - (size_t)w, " +%s(%d)", ink_dtype_name(d), cnt[d]);
    if (mlx) {
        int mb = 0;
        for (int b = 2; b <= 8; b++)
            if (bits_n[b] > bits_n[mb]) mb = b;
        int l = snprintf(info->quant, sizeof info->quant, "mlx-affine %d-bit g%d", mb, gs_main ? gs_main : qb->group);
        for (int b = 2; b <= 8 && l > 0 && (size_t)l < sizeof info->quant; b++)
            if (bits_n[b] && b != mb)
                l += snprintf(info->quant + l, sizeof info->quant - (size_t)l, " +%d-bit(%d)", b, bits_n[b]);
        if (l > 0 && (size_t)l < sizeof info->quant)
            l += snprintf(info->quant + l, sizeof info->quant - (size_t)l, ", %d quantized tensors", mlx);
        if (nvfp4 && l > 0 && (size_t)l < sizeof info->quant)
            snprintf(info->quant + l, sizeof info->quant - (size_t)l, ", nvfp4 (%d)", nvfp4);
    } else if (nvfp4) snprintf(info->quant, sizeof info->quant, "nvfp4 (%d routed-expert tensors)", nvfp4);
    else snprintf(info->quant, sizeof info->quant, "none");
}

static int count_mtp_blocks(const char *dir)
{
    ink_tdir td;
    ink_err e = {0};
    if (ink_tdir_open(&td, dir, INK_TDIR_MTP, &e)) return 0;
    int maxj = -1;
    for (int i = 0; i < td.n; i++) {
        const char *n = td.refs[i].name;
        const char *q = starts(n, "model.mtp.layers.") ? n + 17 : starts(n, "mtp.layers.") ? n + 11 : NULL;
        if (q) {
            int j = atoi(q);
            if (j > maxj) maxj = j;
        }
    }
    ink_tdir_close(&td);
    return maxj + 1;
}

static void name_variant(const ink_config *c, ink_model_info *info)
{
    const char *v = "custom";
    if (c->hidden == 6144 && c->n_layer == 66) v = "Inkling (975B total, 41B active)";
    else if (c->hidden == 4096 && c->n_layer == 42) v = "Inkling-Small (276B total, 12B active)";
    else if (c->n_layer == 12 && c->n_expert == 8) v = "Inkling-0.6B";
    snprintf(info->variant, sizeof info->variant, "%s (H=%d, L=%d)", v, c->hidden, c->n_layer);
}

static void fill_info_cfg(const ink_config *c, ink_model_info *info)
{
    snprintf(info->family, sizeof info->family, "Inkling");
    snprintf(info->architecture, sizeof info->architecture, "%s", c->architecture);
    snprintf(info->model_type, sizeof info->model_type, "%s", c->model_type);
    snprintf(info->layout, sizeof info->layout, "%s", c->flat ? "flat" : "release");
    name_variant(c, info);
    info->n_layer = c->n_layer;
    info->n_sliding = c->n_sliding;
    info->n_global = c->n_layer - c->n_sliding;
    info->n_moe = c->n_moe;
    info->n_dense = c->n_layer - c->n_moe;
    info->hidden = c->hidden;
    info->vocab = c->vocab;
    info->vocab_unpadded = c->vocab_unpadded;
    info->n_expert = c->n_expert;
    info->n_expert_used = c->n_expert_used;
    info->n_shared = c->n_shared;
    info->mtp_depth_config = c->mtp_depth;
    info->max_ctx = c->max_ctx;
    info->eos = c->eos;
}

static int config_path(const char *dir, char *buf, size_t n, ink_err *err)
{
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return ink_err_set(err, INK_E_IO, "%s: model directory does not exist or is not a directory", dir);
    snprintf(buf, n, "%s/config.json", dir);
    if (access(buf, R_OK) != 0)
        return ink_err_set(err, INK_E_IO, "%s: no readable config.json in the model directory", dir);
    return INK_OK;
}

int ink_model_detect(const char *dir, ink_model_info *info, ink_err *err)
{
    memset(info, 0, sizeof *info);
    info->eos = -1;
    char path[4096];
    int rc = config_path(dir, path, sizeof path, err);
    if (rc) return rc;
    ink_config *c = calloc(1, sizeof *c);
    if (!c) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    ink_err ce = {0};
    rc = ink_config_load(c, path, &ce);
    if (rc == INK_E_UNSUPPORTED) { /* a readable config of something we do not run */
        snprintf(info->family, sizeof info->family, "%s", starts(c->architecture, "Inkling") ? "Inkling" : "other");
        snprintf(info->architecture, sizeof info->architecture, "%s", c->architecture);
        snprintf(info->model_type, sizeof info->model_type, "%s", c->model_type);
        snprintf(info->reason, sizeof info->reason, "%s", ce.msg);
        snprintf(info->variant, sizeof info->variant, "-");
        snprintf(info->quant, sizeof info->quant, "-");
        snprintf(info->dtype, sizeof info->dtype, "-");
        free(c);
        return INK_OK;
    }
    if (rc) {
        free(c);
        ink_err_set(err, ce.code, "%s", ce.msg);
        return rc;
    }
    fill_info_cfg(c, info);
    ink_tdir td;
    rc = ink_tdir_open(&td, dir, INK_TDIR_TARGET, err);
    if (rc) {
        free(c);
        return rc;
    }
    info->n_files = td.n_files;
    const naming *nm = detect_naming(&td);
    snprintf(info->names, sizeof info->names, "%s", nm ? nm->id : "unknown");
    qblock qb;
    qblock_load(dir, &qb);
    describe_tensors(&td, &qb, info);
    info->mtp_depth_tensors = count_mtp_blocks(dir);
    ink_err qe = {0};
    int qrc = quant_check(&td, &qb, &qe);
    info->supported = nm != NULL && !qrc;
    if (!nm && info->mtp_depth_tensors)
        snprintf(info->reason, sizeof info->reason, "the directory holds only an MTP head (%d model.mtp.layers.* blocks): "
                 "use it as a drafter (--draft-kind mtp --draft-model DIR) with its target model", info->mtp_depth_tensors);
    else if (!nm)
        snprintf(info->reason, sizeof info->reason, "no embedding tensor under a known name (model.llm.embed.weight, "
                                                    "model.language_model.embed_tokens.weight, model.embed_tokens.weight)");
    else if (qrc)
        snprintf(info->reason, sizeof info->reason, "%s", qe.msg);
    qblock_free(&qb);
    ink_tdir_close(&td);
    free(c);
    return INK_OK;
}

/* ---- open / free ------------------------------------------------------------------------ */

void ink_weights_free(ink_weights *wt)
{
    for (int i = 0; i < wt->n_owned; i++) free(wt->owned[i]);
    free(wt->owned);
    ink_tdir_close(&wt->td);
    memset(wt, 0, sizeof *wt);
}

void ink_model_free(ink_model *m)
{
    if (!m) return;
    ink_pool_free(m->pool);
    ink_weights_free(&m->w);
    free(m);
}

static int model_open(ink_model **out, const char *dir, const ink_model_opts *opts, int header_only, ink_err *err)
{
    char path[4096];
    int rc = config_path(dir, path, sizeof path, err);
    if (rc) return rc;
    ink_model *m = calloc(1, sizeof *m);
    if (!m) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    m->w.cfg = &m->cfg, m->w.header_only = header_only;
    int act = opts ? opts->activations : INK_ACT_AUTO;
    if (!ink_activations_name(act)) {
        free(m);
        return ink_err_set(err, INK_E_INVAL,
                           "activations: expected auto, f32, int8 or bf16 (%d, %d, %d or %d), found %d", INK_ACT_AUTO,
                           INK_ACT_F32, INK_ACT_INT8, INK_ACT_BF16, act);
    }
    m->w.act_int8 = act != INK_ACT_F32;
    m->w.act_bf16 = act == INK_ACT_BF16;
    if ((rc = ink_config_load(&m->cfg, path, err))) goto fail;
    if ((rc = ink_tdir_open(&m->w.td, dir, INK_TDIR_TARGET, err))) goto fail;
    m->w.td.read = opts && opts->no_mmap;
    const ink_config *c = &m->cfg;
    fill_info_cfg(c, &m->info);
    {
        qblock qb;
        qblock_load(dir, &qb);
        describe_tensors(&m->w.td, &qb, &m->info);
        rc = quant_check(&m->w.td, &qb, err);
        qblock_free(&qb);
        if (rc) goto fail;
    }
    m->info.n_files = m->w.td.n_files;
    const naming *nm = detect_naming(&m->w.td);
    if (!nm) {
        int heads = count_mtp_blocks(dir);
        if (heads)
            rc = ink_err_set(err, INK_E_FORMAT,
                             "%s holds only an MTP head (%d model.mtp.layers.* blocks), not a target model: use it as "
                             "--draft-model with --draft-kind mtp", dir, heads);
        else
            rc = ink_err_set(err, INK_E_FORMAT,
                             "%s: no embedding tensor found (expected model.llm.embed.weight or a transformers name)", dir);
        goto fail;
    }
    snprintf(m->info.names, sizeof m->info.names, "%s", nm->id);
    int H = c->hidden, V = c->vocab;
    if ((rc = ink_bind_mat(&m->w, nm->embed, V, H, &m->embed, err))) goto fail;
    if ((rc = ink_bind_mat(&m->w, nm->unembed, V, H, &m->unembed, err))) goto fail;
    if ((rc = ink_bind_vec(&m->w, nm->norm, H, &m->norm, err))) goto fail;
    const char *en = nm->embed_norm[0];
    for (int i = 0; i < 3 && nm->embed_norm[i]; i++)
        if (ink_tdir_find(&m->w.td, nm->embed_norm[i])) en = nm->embed_norm[i];
    if ((rc = ink_bind_vec(&m->w, en, H, &m->embed_norm, err))) goto fail;
    m->layers = ink_weights_own(&m->w, calloc((size_t)c->n_layer, sizeof *m->layers));
    if (!m->layers) {
        rc = ink_err_set(err, INK_E_NOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < c->n_layer; i++) {
        char prefix[128];
        snprintf(prefix, sizeof prefix, nm->layer_fmt, i);
        if ((rc = ink_bind_layer(&m->w, prefix, &c->layers[i], &m->layers[i], err))) goto fail;
    }
    char extra[128];
    snprintf(extra, sizeof extra, nm->layer_fmt, c->n_layer);
    for (int i = 0; i < m->w.td.n; i++)
        if (starts(m->w.td.refs[i].name, extra)) {
            rc = ink_err_set(err, INK_E_FORMAT, "%s: tensor %s belongs to layer %d but config.json says num_hidden_layers = %d",
                             dir, m->w.td.refs[i].name, c->n_layer, c->n_layer);
            goto fail;
        }
    m->info.mtp_depth_tensors = count_mtp_blocks(dir);
    m->info.supported = 1;
    int nt = opts && opts->n_threads > 0 ? opts->n_threads : ink_default_threads();
    if (nt > 256) nt = 256;
    if (!(m->pool = ink_pool_create(nt))) {
        rc = ink_err_set(err, INK_E_NOMEM, "cannot start %d threads", nt);
        goto fail;
    }
    if (opts && !header_only && (rc = ink_ep_attach(m, opts->expert_parallel, err))) goto fail;
    *out = m;
    return INK_OK;
fail:
    ink_model_free(m);
    return rc;
}

int ink_model_open(ink_model **out, const char *dir, const ink_model_opts *opts, ink_err *err)
{
    return model_open(out, dir, opts, 0, err);
}

int ink_model_open_headers(ink_model **out, const char *dir, const ink_model_opts *opts, ink_err *err)
{
    return model_open(out, dir, opts, 1, err);
}

const ink_model_info *ink_model_get_info(const ink_model *m) { return &m->info; }
int ink_model_n_vocab(const ink_model *m) { return m->cfg.vocab_unpadded; }
int ink_model_n_embd(const ink_model *m) { return m->cfg.hidden; }
int ink_model_n_threads(const ink_model *m) { return ink_pool_size(m->pool); }
int ink_model_int8_activations(const ink_model *m) { return m->w.act_int8; }
int ink_model_bf16_activations(const ink_model *m) { return m->w.act_bf16; }

int ink_activations_parse(const char *s)
{
    if (!s) return -1;
    if (!strcmp(s, "auto")) return INK_ACT_AUTO;
    if (!strcmp(s, "f32")) return INK_ACT_F32;
    if (!strcmp(s, "int8")) return INK_ACT_INT8;
    if (!strcmp(s, "bf16")) return INK_ACT_BF16;
    return -1;
}

const char *ink_activations_name(int a)
{
    switch (a) {
    case INK_ACT_AUTO: return "auto";
    case INK_ACT_F32: return "f32";
    case INK_ACT_INT8: return "int8";
    case INK_ACT_BF16: return "bf16";
    default: return NULL;
    }
}
