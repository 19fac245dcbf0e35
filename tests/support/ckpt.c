/* ckpt.c — tiny random Inkling checkpoint writer (see ckpt.h). */
#include "support/ckpt.h"

#include "load/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void tiny_default(tiny_spec *s)
{
    memset(s, 0, sizeof *s);
    s->hidden = 64, s->n_layer = 6, s->vocab = 128, s->vocab_unpadded = 120;
    s->n_head = 4, s->n_kv = 2, s->head_dim = 16, s->swa_n_head = 4, s->swa_n_kv = 1, s->swa_head_dim = 16;
    s->window = 8, s->rel_extent = 16, s->d_rel = 4, s->conv_k = 4;
    s->dense_inter = 96, s->expert_inter = 32, s->n_expert = 8, s->top_k = 2, s->n_shared = 2, s->dense_mlp_idx = 2;
    s->n_local = 5;
    for (int i = 0; i < 5; i++) s->local[i] = i;
    s->route_scale = 8.0f, s->mup = 4.0f, s->eps = 1e-6f, s->log_floor = 8, s->max_ctx = 4096, s->eos = 2;
    s->n_shards = 1, s->seed = 1234, s->wscale = 0.25f;
}

/* ---- deterministic values ---------------------------------------------------------------- */

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t name_seed(uint64_t seed, const char *name)
{
    uint64_t h = 1469598103934665603ull ^ seed;
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    return mix(h);
}

/* n values for logical tensor `name`: uniform in [center - scale, center + scale]. */
static float *values(const tiny_spec *s, const char *name, size_t n, float center, float scale)
{
    float *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) return NULL;
    uint64_t st = name_seed(s->seed, name);
    for (size_t i = 0; i < n; i++) {
        st += 0x9e3779b97f4a7c15ull;
        double u = (double)(mix(st) >> 11) * 0x1.0p-53;
        v[i] = center + scale * (float)(2.0 * u - 1.0);
    }
    return v;
}

/* ---- tensor list -------------------------------------------------------------------------- */

#define SH_E(e) ((const int64_t[]){e})

typedef struct tens {
    char name[160];
    int dtype, ndim;
    int64_t shape[4];
    void *data;
    size_t bytes;
    int file;
} tens;

typedef struct tlist {
    tens *t;
    int n, cap, err;
    json_t *qovr; /* MLX per-module overrides collected while quantizing (NULL: no quantization) */
} tlist;

static tens *push(tlist *L, const char *name, int dtype, int ndim, const int64_t *shape, void *data, size_t bytes,
                  int file)
{
    if (L->err || !data) {
        L->err = 1;
        free(data);
        return NULL;
    }
    if (L->n == L->cap) {
        L->cap = L->cap ? 2 * L->cap : 256;
        tens *nt = realloc(L->t, (size_t)L->cap * sizeof *nt);
        if (!nt) {
            L->err = 1;
            free(data);
            return NULL;
        }
        L->t = nt;
    }
    tens *t = &L->t[L->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype, t->ndim = ndim, t->data = data, t->bytes = bytes, t->file = file;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    return t;
}

/* ---- quantization (MLX affine, formats.md §4.4; NVFP4, §3.2) ------------------------------- */

static void put_code(uint8_t *row, size_t j, int bits, unsigned v)
{
    for (int k = 0; k < bits; k++) {
        size_t bit = j * (size_t)bits + (size_t)k;
        if (v >> k & 1) row[bit / 8] |= (uint8_t)(1u << (bit % 8));
    }
}

/* One row of n inputs, MLX's algorithm: per group, the edge of larger magnitude is exactly
 * representable; scales can be negative. deq (may be NULL) gets scale * q + bias with the stored
 * (BF16) values. */
void tiny_mlx_quant_row(const float *w, int n, int bits, int gs, uint8_t *packed, uint16_t *sc, uint16_t *bi,
                          float *deq)
{
    float nmax = (float)((1 << bits) - 1);
    for (int g = 0; g < n / gs; g++) {
        const float *v = w + (size_t)g * gs;
        float lo = v[0], hi = v[0];
        for (int i = 1; i < gs; i++) lo = fminf(lo, v[i]), hi = fmaxf(hi, v[i]);
        float sc_ = fmaxf((hi - lo) / nmax, 1e-7f), edge = lo, bias = 0.0f;
        if (!(fabsf(lo) > fabsf(hi))) sc_ = -sc_, edge = hi;
        float q0 = nearbyintf(edge / sc_);
        if (q0 != 0.0f) sc_ = edge / q0, bias = edge;
        sc[g] = ink_f32_to_bf16(sc_), bi[g] = ink_f32_to_bf16(bias);
        float ss = ink_bf16_to_f32(sc[g]), sb = ink_bf16_to_f32(bi[g]);
        for (int i = 0; i < gs; i++) {
            float q = nearbyintf((v[i] - bias) / sc_);
            q = q < 0 ? 0 : q > nmax ? nmax : q;
            put_code(packed, (size_t)g * gs + (size_t)i, bits, (unsigned)q);
            if (deq) deq[(size_t)g * gs + i] = ss * q + sb;
        }
    }
}

static float e2m1v(unsigned c)
{
    static const float mag[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    return (c & 8) ? -mag[c & 7] : mag[c & 7];
}

static uint8_t e4m3_nearest(float v)
{
    uint8_t best = 0;
    float be = INFINITY;
    for (int c = 0; c <= 0x7E; c++) {
        float e = fabsf(ink_e4m3_to_f32((uint8_t)c) - v);
        if (e < be) be = e, best = (uint8_t)c;
    }
    return best;
}

/* One expert [rows, n]: codes (low nibble first), E4M3 block scales, returns scale2; deq = exact dequant. */
static float nvfp4_quant(const float *w, int rows, int n, uint8_t *codes, uint8_t *bs, float *deq)
{
    float amax = 0;
    for (size_t i = 0; i < (size_t)rows * n; i++) amax = fmaxf(amax, fabsf(w[i]));
    float s2 = amax > 0 ? amax / (6.0f * 448.0f) : 1.0f;
    for (int r = 0; r < rows; r++)
        for (int b = 0; b < n / 16; b++) {
            const float *v = w + (size_t)r * n + (size_t)b * 16;
            float bm = 0;
            for (int i = 0; i < 16; i++) bm = fmaxf(bm, fabsf(v[i]));
            uint8_t e = e4m3_nearest(bm / 6.0f / s2);
            bs[(size_t)r * (n / 16) + b] = e;
            float sv = ink_e4m3_to_f32(e);
            for (int i = 0; i < 16; i++) {
                unsigned best = 0;
                float be = INFINITY;
                for (unsigned c = 0; c < 16 && sv > 0; c++) {
                    float err = fabsf(e2m1v(c) * sv * s2 - v[i]);
                    if (err < be) be = err, best = c;
                }
                size_t j = (size_t)r * n + (size_t)b * 16 + (size_t)i;
                codes[j / 2] |= (uint8_t)(best << (4 * (j % 2)));
                deq[j] = (e2m1v(best) * sv) * s2;
            }
        }
    return s2;
}

/* Runtime (mlx-vlm) spelling of a stored module prefix, for override keys. */
static void runtime_key(const char *p, char *out, size_t n)
{
    static const char *const rep[][2] = {
        {"model.llm.layers.", "language_model.model.layers."}, {"model.llm.embed", "language_model.model.embed_tokens"},
        {"model.llm.unembed", "language_model.lm_head"},     {"attn.wq_du", "self_attn.q_proj"},
        {"attn.wk_dv", "self_attn.k_proj"},                  {"attn.wv_dv", "self_attn.v_proj"},
        {"attn.wr_du", "self_attn.r_proj"},                  {"attn.wo_ud", "self_attn.o_proj"},
        {"mlp.experts.", "mlp.switch_mlp."},                 {"mlp.w2_md", "mlp.down_proj"},
    };
    char a[256], b[256];
    snprintf(a, sizeof a, "%s", p);
    for (size_t i = 0; i < sizeof rep / sizeof rep[0]; i++) {
        char *h = strstr(a, rep[i][0]);
        if (!h) continue;
        snprintf(b, sizeof b, "%.*s%s%s", (int)(h - a), a, rep[i][1], h + strlen(rep[i][0]));
        snprintf(a, sizeof a, "%s", b);
    }
    snprintf(out, n, "%s", a);
}

/* 0: write as float; 1: MLX affine (bits, group in *b, *g); 2: NVFP4. Records overrides. */
static int quant_kind(tlist *L, const tiny_spec *s, const char *name, int ndim, const int64_t *shape, int keep_f32,
                      int *b, int *g)
{
    if (keep_f32 || ndim < 2) return 0;
    if (s->nvfp4 && ndim == 3 && strstr(name, "mlp.experts.") && !(s->nvfp4_skip && strstr(name, s->nvfp4_skip)))
        return shape[2] % 16 == 0 ? 2 : 0;
    if (!s->qbits || strstr(name, "sconv") || strstr(name, "rel_logits_proj") || strstr(name, "mlp.gate.weight"))
        return 0;
    if (!s->qembed && (strstr(name, "embed.weight") || strstr(name, "unembed") || strstr(name, "embed_tokens") ||
                       strstr(name, "lm_head")))
        return 0;
    if (shape[ndim - 1] % s->qgroup) return 0;
    char pfx[200], key[256];
    size_t l = strlen(name);
    snprintf(pfx, sizeof pfx, "%.*s", (int)(l > 7 && !strcmp(name + l - 7, ".weight") ? l - 7 : l), name);
    if (s->q_runtime_keys) runtime_key(pfx, key, sizeof key);
    else snprintf(key, sizeof key, "%s", pfx);
    if (s->qskip_match && strstr(name, s->qskip_match)) {
        if (L->qovr) json_object_set_new(L->qovr, key, json_false());
        return 0;
    }
    *g = s->qgroup, *b = s->qbits;
    if (s->q8_match && strstr(name, s->q8_match)) {
        *b = 8;
        if (L->qovr) json_object_set_new(L->qovr, key, json_pack("{s:i,s:i}", "group_size", *g, "bits", 8));
    }
    return 1;
}

static void add_quant(tlist *L, const tiny_spec *s, const char *name, int ndim, const int64_t *shape, float *v,
                      int kind, int bits, int gs, int file)
{
    int64_t rows = 1;
    for (int i = 0; i < ndim - 1; i++) rows *= shape[i];
    int n = (int)shape[ndim - 1];
    size_t total = (size_t)rows * (size_t)n;
    float *deq = malloc(total * sizeof *deq);
    int64_t sh[4];
    memcpy(sh, shape, sizeof(int64_t) * (size_t)ndim);
    char nm[200];
    if (kind == 2) {
        int E = (int)shape[0], R = (int)shape[1];
        uint8_t *codes = calloc(total / 2 + 1, 1), *bs = malloc(total / 16 + 1);
        float *s2 = malloc((size_t)E * sizeof *s2);
        if (!deq || !codes || !bs || !s2) {
            free(deq), free(codes), free(bs), free(s2), free(v);
            L->err = 1;
            return;
        }
        for (int e = 0; e < E; e++)
            s2[e] = nvfp4_quant(v + (size_t)e * R * n, R, n, codes + (size_t)e * R * n / 2, bs + (size_t)e * R * n / 16,
                                deq + (size_t)e * R * n);
        free(v);
        if (s->qtwin) {
            free(codes), free(bs), free(s2);
            push(L, name, INK_DT_F32, ndim, shape, deq, total * 4, file);
            return;
        }
        free(deq);
        sh[2] = n / 2;
        push(L, name, INK_DT_U8, 3, sh, codes, total / 2, file);
        snprintf(nm, sizeof nm, "%s.scale", name);
        sh[2] = n / 16;
        push(L, nm, INK_DT_F8_E4M3, 3, sh, bs, total / 16, file);
        snprintf(nm, sizeof nm, "%s.scale2", name);
        push(L, nm, INK_DT_F32, 1, SH_E(E), s2, (size_t)E * 4, file);
        return;
    }
    size_t rowb = (size_t)n * bits / 8, G = (size_t)(n / gs);
    uint8_t *packed = calloc((size_t)rows * rowb + 4, 1);
    uint16_t *sc = malloc((size_t)rows * G * 2 + 2), *bi = malloc((size_t)rows * G * 2 + 2);
    if (!deq || !packed || !sc || !bi) {
        free(deq), free(packed), free(sc), free(bi), free(v);
        L->err = 1;
        return;
    }
    for (int64_t r = 0; r < rows; r++)
        tiny_mlx_quant_row(v + (size_t)r * n, n, bits, gs, packed + (size_t)r * rowb, sc + (size_t)r * G, bi + (size_t)r * G,
                      deq + (size_t)r * n);
    free(v);
    if (s->qtwin) {
        free(packed), free(sc), free(bi);
        push(L, name, INK_DT_F32, ndim, shape, deq, total * 4, file);
        return;
    }
    free(deq);
    char pfx[200];
    size_t l = strlen(name);
    snprintf(pfx, sizeof pfx, "%.*s", (int)(l > 7 && !strcmp(name + l - 7, ".weight") ? l - 7 : l), name);
    sh[ndim - 1] = (int64_t)(rowb / 4);
    push(L, name, INK_DT_U32, ndim, sh, packed, (size_t)rows * rowb, file);
    sh[ndim - 1] = (int64_t)G;
    snprintf(nm, sizeof nm, "%s.scales", pfx);
    push(L, nm, INK_DT_BF16, ndim, sh, sc, (size_t)rows * G * 2, file);
    snprintf(nm, sizeof nm, "%s.biases", pfx);
    push(L, nm, INK_DT_BF16, ndim, sh, bi, (size_t)rows * G * 2, file);
}

static void add(tlist *L, const tiny_spec *s, const char *name, int ndim, const int64_t *shape, float *v, int keep_f32,
                int file)
{
    if (L->err || !v) {
        L->err = 1;
        free(v);
        return;
    }
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    if (s->bf16_values && !keep_f32)
        for (size_t i = 0; i < n; i++) v[i] = ink_bf16_to_f32(ink_f32_to_bf16(v[i]));
    int qb = 0, qg = 0, qk = quant_kind(L, s, name, ndim, shape, keep_f32, &qb, &qg);
    if (qk) {
        add_quant(L, s, name, ndim, shape, v, qk, qb, qg, file);
        return;
    }
    if (s->bf16 && !keep_f32) {
        uint16_t *b = malloc(n * 2 + 2);
        if (b)
            for (size_t i = 0; i < n; i++) b[i] = ink_f32_to_bf16(v[i]);
        free(v);
        push(L, name, INK_DT_BF16, ndim, shape, b, n * 2, file);
    } else {
        push(L, name, INK_DT_F32, ndim, shape, v, n * 4, file);
    }
}

#define SH(...) ((const int64_t[]){__VA_ARGS__})

/* Fused [n?, 2I, H] gate/up in the layout of s->naming, from logical gate and up stacks. */
static void add_gate_up(tlist *L, const tiny_spec *s, const char *logical, const char *fused_il,
                        const char *fused_half, const char *gate_name, const char *up_name, int n, int I, int H, int file)
{
    int cnt = n ? n : 1;
    char ln[200];
    snprintf(ln, sizeof ln, "%s.gate", logical);
    float *g = values(s, ln, (size_t)cnt * I * H, 0, s->wscale);
    snprintf(ln, sizeof ln, "%s.up", logical);
    float *u = values(s, ln, (size_t)cnt * I * H, 0, s->wscale);
    if (!g || !u) {
        free(g), free(u);
        L->err = 1;
        return;
    }
    if (s->swap_gate_up) {
        float *t = g;
        g = u, u = t;
    }
    size_t rowb = (size_t)H * sizeof(float);
    if (s->naming == TINY_NAMES_PRESPLIT || (s->naming == TINY_NAMES_HF && !fused_half)) {
        if (n) {
            add(L, s, gate_name, 3, SH(n, I, H), g, 0, file);
            add(L, s, up_name, 3, SH(n, I, H), u, 0, file);
        } else {
            add(L, s, gate_name, 2, SH(I, H), g, 0, file);
            add(L, s, up_name, 2, SH(I, H), u, 0, file);
        }
        return;
    }
    float *f = malloc((size_t)cnt * 2 * I * rowb);
    if (!f) {
        free(g), free(u);
        L->err = 1;
        return;
    }
    int half = s->naming == TINY_NAMES_HF;
    for (int e = 0; e < cnt; e++)
        for (int j = 0; j < I; j++) {
            size_t src = ((size_t)e * I + j) * H;
            size_t dg = half ? ((size_t)e * 2 * I + j) * H : ((size_t)e * 2 * I + 2 * j) * H;
            size_t du = half ? ((size_t)e * 2 * I + I + j) * H : ((size_t)e * 2 * I + 2 * j + 1) * H;
            memcpy(f + dg, g + src, rowb);
            memcpy(f + du, u + src, rowb);
        }
    free(g), free(u);
    const char *name = half ? fused_half : fused_il;
    if (n) add(L, s, name, 3, SH(n, 2 * I, H), f, 0, file);
    else add(L, s, name, 2, SH(2 * I, H), f, 0, file);
}

/* One decoder layer (backbone layer or MTP transformer block). */
static void add_layer(tlist *L, const tiny_spec *s, const char *pfx, const char *logical, int sliding, int moe,
                      int file)
{
    int hf = s->naming == TINY_NAMES_HF;
    int H = s->hidden, K = s->conv_k;
    int nh = sliding ? s->swa_n_head : s->n_head, nkv = sliding ? s->swa_n_kv : s->n_kv;
    int d = sliding ? s->swa_head_dim : s->head_dim, R = sliding ? s->window : s->rel_extent;
    char n[256], ln[256];
#define NM(nat, hfs) (snprintf(n, sizeof n, "%s%s", pfx, hf ? (hfs) : (nat)), \
                      snprintf(ln, sizeof ln, "%s%s", logical, nat), n)
    NM("attn_norm.weight", "input_layernorm.weight");
    add(L, s, n, 1, SH(H), values(s, ln, (size_t)H, 1.0f, 0.2f), 0, file);
    NM("mlp_norm.weight", "post_attention_layernorm.weight");
    add(L, s, n, 1, SH(H), values(s, ln, (size_t)H, 1.0f, 0.2f), 0, file);
    NM("attn_sconv.weight", "attn_sconv.conv1d.weight");
    add(L, s, n, 3, SH(H, 1, K), values(s, ln, (size_t)H * K, 0, 0.3f), 0, file);
    NM("mlp_sconv.weight", "mlp_sconv.conv1d.weight");
    add(L, s, n, 3, SH(H, 1, K), values(s, ln, (size_t)H * K, 0, 0.3f), 0, file);
    NM("attn.wq_du.weight", "self_attn.q_proj.weight");
    add(L, s, n, 2, SH(nh * d, H), values(s, ln, (size_t)nh * d * H, 0, s->wscale), 0, file);
    NM("attn.wk_dv.weight", "self_attn.k_proj.weight");
    add(L, s, n, 2, SH(nkv * d, H), values(s, ln, (size_t)nkv * d * H, 0, s->wscale), 0, file);
    NM("attn.wv_dv.weight", "self_attn.v_proj.weight");
    add(L, s, n, 2, SH(nkv * d, H), values(s, ln, (size_t)nkv * d * H, 0, s->wscale), 0, file);
    NM("attn.wr_du.weight", "self_attn.r_proj.weight");
    add(L, s, n, 2, SH(nh * s->d_rel, H), values(s, ln, (size_t)nh * s->d_rel * H, 0, s->wscale), 0, file);
    NM("attn.wo_ud.weight", "self_attn.o_proj.weight");
    add(L, s, n, 2, SH(H, nh * d), values(s, ln, (size_t)H * nh * d, 0, s->wscale), 0, file);
    NM("attn.q_norm.weight", "self_attn.q_norm.weight");
    add(L, s, n, 1, SH(d), values(s, ln, (size_t)d, 1.0f, 0.2f), 0, file);
    NM("attn.k_norm.weight", "self_attn.k_norm.weight");
    add(L, s, n, 1, SH(d), values(s, ln, (size_t)d, 1.0f, 0.2f), 0, file);
    NM("attn.k_sconv.weight", "self_attn.k_sconv.conv1d.weight");
    add(L, s, n, 3, SH(nkv * d, 1, K), values(s, ln, (size_t)nkv * d * K, 0, 0.3f), 0, file);
    NM("attn.v_sconv.weight", "self_attn.v_sconv.conv1d.weight");
    add(L, s, n, 3, SH(nkv * d, 1, K), values(s, ln, (size_t)nkv * d * K, 0, 0.3f), 0, file);
    NM("attn.rel_logits_proj.proj", "self_attn.rel_logits_proj.proj");
    add(L, s, n, 2, SH(s->d_rel, R), values(s, ln, (size_t)s->d_rel * R, 0, 1.0f), 0, file);
    char g1[256], g2[256], g3[256], g4[256], lg[256];
    if (!moe) {
        int I = s->dense_inter;
        snprintf(lg, sizeof lg, "%smlp.w13", logical);
        snprintf(g1, sizeof g1, "%smlp.w13_dn.weight", pfx);
        snprintf(g3, sizeof g3, "%smlp.gate_proj.weight", pfx);
        snprintf(g4, sizeof g4, "%smlp.up_proj.weight", pfx);
        add_gate_up(L, s, lg, g1, NULL, g3, g4, 0, I, H, file);
        NM("mlp.w2_md.weight", "mlp.down_proj.weight");
        add(L, s, n, 2, SH(H, I), values(s, ln, (size_t)H * I, 0, s->wscale), 0, file);
        NM("mlp.global_scale", "mlp.global_scale");
        add(L, s, n, 1, SH(1), values(s, ln, 1, 0.8f, 0.3f), 0, file);
        return;
    }
    int E = s->n_expert, S = s->n_shared, I = s->expert_inter;
    NM("mlp.gate.weight", "mlp.gate.weight");
    add(L, s, n, 2, SH(E + S, H), values(s, ln, (size_t)(E + S) * H, 0, 0.5f), 0, file);
    NM("mlp.gate.bias", "mlp.gate.e_score_correction_bias");
    add(L, s, n, 1, SH(E), values(s, ln, (size_t)E, 0, 0.1f), 1, file);
    NM("mlp.gate.global_scale", "mlp.gate.global_scale");
    add(L, s, n, 1, SH(1), values(s, ln, 1, 0.5f, 0.2f), 1, file);
    snprintf(lg, sizeof lg, "%smlp.experts.w13", logical);
    snprintf(g1, sizeof g1, "%smlp.experts.w13_weight", pfx);
    snprintf(g2, sizeof g2, "%smlp.experts.gate_up_proj", pfx);
    snprintf(g3, sizeof g3, "%smlp.experts.gate_proj.weight", pfx);
    snprintf(g4, sizeof g4, "%smlp.experts.up_proj.weight", pfx);
    add_gate_up(L, s, lg, g1, g2, g3, g4, E, I, H, file);
    snprintf(n, sizeof n, "%s%s", pfx, hf ? "mlp.experts.down_proj" : s->naming == TINY_NAMES_PRESPLIT ? "mlp.experts.down_proj.weight" : "mlp.experts.w2_weight");
    snprintf(ln, sizeof ln, "%smlp.experts.w2", logical);
    add(L, s, n, 3, SH(E, H, I), values(s, ln, (size_t)E * H * I, 0, s->wscale), 0, file);
    if (!S) return;
    snprintf(lg, sizeof lg, "%smlp.shared.w13", logical);
    snprintf(g1, sizeof g1, "%smlp.shared_experts.shared_w13_weight", pfx);
    snprintf(g3, sizeof g3, "%smlp.shared_experts.gate_proj.weight", pfx);
    snprintf(g4, sizeof g4, "%smlp.shared_experts.up_proj.weight", pfx);
    add_gate_up(L, s, lg, g1, NULL, g3, g4, S, I, H, file);
    snprintf(n, sizeof n, "%s%s", pfx, s->naming != TINY_NAMES_RELEASE ? "mlp.shared_experts.down_proj.weight" : "mlp.shared_experts.shared_w2_weight");
    snprintf(ln, sizeof ln, "%smlp.shared.w2", logical);
    add(L, s, n, 3, SH(S, H, I), values(s, ln, (size_t)S * H * I, 0, s->wscale), 0, file);
#undef NM
}

/* ---- file writing ----------------------------------------------------------------------- */

static int write_file(const char *path, tens **ts, int n, int misalign)
{
    json_t *h = json_object();
    json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < ts[i]->ndim; d++) json_array_append_new(shape, json_integer(ts[i]->shape[d]));
        json_object_set_new(h, ts[i]->name,
                            json_pack("{s:s,s:o,s:[I,I]}", "dtype", ink_dtype_name(ts[i]->dtype),
                                      "shape", shape, "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + ts[i]->bytes)));
        off += ts[i]->bytes;
    }
    char *txt = json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(h);
    if (!txt) return -1;
    size_t len = strlen(txt), padded = (len + 7) / 8 * 8 + (misalign ? 1 : 0);
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(txt);
        fprintf(stderr, "ckpt: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    uint8_t l8[8];
    for (int i = 0; i < 8; i++) l8[i] = (uint8_t)(padded >> (8 * i));
    int ok = fwrite(l8, 1, 8, f) == 8 && fwrite(txt, 1, len, f) == len;
    for (size_t i = len; i < padded && ok; i++) ok = fputc(' ', f) != EOF;
    for (int i = 0; i < n && ok; i++) ok = fwrite(ts[i]->data, 1, ts[i]->bytes, f) == ts[i]->bytes;
    ok = fclose(f) == 0 && ok;
    free(txt);
    return ok ? 0 : -1;
}

int tiny_write_raw(const char *path, const char *header, uint64_t hlen, const void *data, uint64_t data_len)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    uint8_t l8[8];
    for (int i = 0; i < 8; i++) l8[i] = (uint8_t)(hlen >> (8 * i));
    int ok = fwrite(l8, 1, 8, f) == 8 && fwrite(header, 1, strlen(header), f) == strlen(header);
    if (data_len) ok = ok && fwrite(data, 1, data_len, f) == data_len;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static json_t *int_array(const int *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

static int write_config(const char *dir, const tiny_spec *s, json_t *qovr)
{
    json_t *tc = json_object();
    json_object_set_new(tc, "model_max_length", json_integer(s->max_ctx));
    json_object_set_new(tc, "torch_dtype", json_string(s->bf16 ? "bfloat16" : "float32"));
    json_object_set_new(tc, "rms_norm_eps", json_real(s->eps));
    json_object_set_new(tc, "use_embed_norm", json_true());
    json_object_set_new(tc, "use_sconv", json_true());
    json_object_set_new(tc, "shared_expert_sink", json_true());
    json_object_set_new(tc, "gate_activation", json_string("sigmoid"));
    json_object_set_new(tc, "hidden_size", json_integer(s->hidden));
    json_object_set_new(tc, "num_hidden_layers", json_integer(s->n_layer));
    json_object_set_new(tc, "vocab_size", json_integer(s->vocab));
    json_object_set_new(tc, "unpadded_vocab_size", s->vocab_unpadded ? json_integer(s->vocab_unpadded) : json_null());
    json_object_set_new(tc, "num_attention_heads", json_integer(s->n_head));
    json_object_set_new(tc, "num_key_value_heads", json_integer(s->n_kv));
    json_object_set_new(tc, "head_dim", json_integer(s->head_dim));
    json_object_set_new(tc, "swa_num_attention_heads", json_integer(s->swa_n_head));
    json_object_set_new(tc, "swa_num_key_value_heads", json_integer(s->swa_n_kv));
    json_object_set_new(tc, "swa_head_dim", json_integer(s->swa_head_dim));
    json_object_set_new(tc, "sliding_window_size", json_integer(s->window));
    json_object_set_new(tc, "local_layer_ids", int_array(s->local, s->n_local));
    json_object_set_new(tc, "d_rel", json_integer(s->d_rel));
    json_object_set_new(tc, "rel_extent", json_integer(s->rel_extent));
    json_object_set_new(tc, "log_scaling_n_floor", s->log_floor ? json_integer(s->log_floor) : json_null());
    json_object_set_new(tc, "log_scaling_alpha", json_real(0.1));
    json_object_set_new(tc, "sconv_kernel_size", json_integer(s->conv_k));
    json_object_set_new(tc, "dense_mlp_idx", json_integer(s->dense_mlp_idx));
    json_object_set_new(tc, "dense_intermediate_size", json_integer(s->dense_inter));
    json_object_set_new(tc, "intermediate_size", json_integer(s->expert_inter));
    json_object_set_new(tc, "n_routed_experts", json_integer(s->n_expert));
    json_object_set_new(tc, "num_experts_per_tok", json_integer(s->top_k));
    json_object_set_new(tc, "n_shared_experts", json_integer(s->n_shared));
    json_object_set_new(tc, "route_scale", json_real(s->route_scale));
    json_object_set_new(tc, "logits_mup_width_multiplier", json_real(s->mup));
    json_t *root = json_object();
    json_object_set_new(root, "architectures", json_pack("[s]", "InklingForConditionalGeneration"));
    json_object_set_new(root, "model_type", json_string("inkling_mm_model"));
    json_object_set_new(root, "eos_token_id", json_integer(s->eos));
    json_object_set_new(root, "text_config", tc);
    if (s->mtp_depth)
        json_object_set_new(root, "mtp_config",
                            json_pack("{s:i,s:b,s:o}", "num_nextn_predict_layers", s->mtp_depth,
                                      "chain_hidden_post_norm", 0, "local_layer_ids",
                                      int_array(s->mtp_local, s->n_mtp_local)));
    if (qovr) { /* MLX block: defaults + per-module overrides, mirrored (formats.md §5.1) */
        json_t *q = json_pack("{s:i,s:i,s:s}", "group_size", s->qgroup, "bits", s->qbits, "mode", "affine");
        json_object_update(q, qovr);
        json_object_set(root, "quantization", q);
        json_object_set_new(root, "quantization_config", q);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = json_dump_file(root, path, JSON_INDENT(2));
    json_decref(root);
    return rc;
}

int tiny_write(const char *dir, const tiny_spec *s)
{
    mkdir(dir, 0755);
    tlist L = {0};
    if (s->qbits && !s->qtwin) L.qovr = json_object();
    int H = s->hidden, V = s->vocab, hf = s->naming == TINY_NAMES_HF;
    int shards = s->n_shards > 1 ? s->n_shards : 1;
    const char *base = hf ? "model.language_model." : "model.llm.";
    char n[256], pfx[128], lg[128];
    snprintf(n, sizeof n, "%s%s", base, hf ? "embed_tokens.weight" : "embed.weight");
    add(&L, s, n, 2, SH(V, H), values(s, "embed", (size_t)V * H, 0, 1.0f), 0, 0);
    snprintf(n, sizeof n, "%s%s", base, "embed_norm.weight");
    add(&L, s, n, 1, SH(H), values(s, "embed_norm", (size_t)H, 1.0f, 0.2f), 0, 0);
    snprintf(n, sizeof n, "%s%s", base, "norm.weight");
    add(&L, s, n, 1, SH(H), values(s, "norm", (size_t)H, 1.0f, 0.2f), 0, shards - 1);
    add(&L, s, hf ? "lm_head.weight" : "model.llm.unembed.weight", 2, SH(V, H), values(s, "unembed", (size_t)V * H, 0, 1.0f), 0,
        shards - 1);
    for (int i = 0; i < s->n_layer; i++) {
        int sliding = 0;
        for (int j = 0; j < s->n_local; j++) sliding |= s->local[j] == i;
        snprintf(pfx, sizeof pfx, "%slayers.%d.", base, i);
        snprintf(lg, sizeof lg, "layers.%d.", i);
        add_layer(&L, s, pfx, lg, sliding, i >= s->dense_mlp_idx, (int)((long long)i * shards / s->n_layer));
    }
    int mtp_file = s->mtp_file ? shards : shards - 1;
    for (int m = 0; m < s->mtp_depth; m++) {
        int sliding = 0;
        for (int j = 0; j < s->n_mtp_local; j++) sliding |= s->mtp_local[j] == m;
        snprintf(n, sizeof n, "model.mtp.layers.%d.embed_norm.weight", m);
        snprintf(lg, sizeof lg, "mtp.%d.embed_norm", m);
        add(&L, s, n, 1, SH(H), values(s, lg, (size_t)H, 1.0f, 0.2f), 0, mtp_file);
        snprintf(n, sizeof n, "model.mtp.layers.%d.hidden_norm.weight", m);
        snprintf(lg, sizeof lg, "mtp.%d.hidden_norm", m);
        add(&L, s, n, 1, SH(H), values(s, lg, (size_t)H, 1.0f, 0.2f), 0, mtp_file);
        snprintf(n, sizeof n, "model.mtp.layers.%d.input_proj.weight", m);
        snprintf(lg, sizeof lg, "mtp.%d.input_proj", m);
        add(&L, s, n, 2, SH(H, 2 * H), values(s, lg, (size_t)H * 2 * H, 0, s->wscale), 0, mtp_file);
        tiny_spec s2 = *s;
        s2.naming = TINY_NAMES_RELEASE;
        snprintf(pfx, sizeof pfx, "model.mtp.layers.%d.transformer_block.", m);
        snprintf(lg, sizeof lg, "mtp.%d.block.", m);
        add_layer(&L, &s2, pfx, lg, sliding, 0, mtp_file);
    }
    int rc = L.err ? -1 : 0;
    if (!rc && write_config(dir, s, L.qovr)) {
        fprintf(stderr, "ckpt: cannot write %s/config.json\n", dir);
        rc = -1;
    }
    json_decref(L.qovr);
    if (s->nvfp4 && !s->qtwin && !rc) { /* ModelOpt's description of the NVFP4 experts */
        char qp[4096];
        snprintf(qp, sizeof qp, "%s/hf_quant_config.json", dir);
        json_t *h = json_pack("{s:{s:s},s:{s:s,s:i,s:[]}}", "producer", "name", "modelopt", "quantization", "quant_algo",
                              "NVFP4", "group_size", 16, "exclude_modules");
        rc = json_dump_file(h, qp, JSON_INDENT(2));
        json_decref(h);
    }
    int n_files = s->mtp_depth && s->mtp_file ? shards + 1 : shards;
    tens **sel = malloc((size_t)(L.n ? L.n : 1) * sizeof *sel);
    json_t *wm = json_object();
    for (int f = 0; f < n_files && !rc && sel; f++) {
        int k = 0;
        for (int i = 0; i < L.n; i++)
            if (L.t[i].file == f) sel[k++] = &L.t[i];
        char fname[128], path[4096];
        if (f == shards) snprintf(fname, sizeof fname, "mtp.safetensors");
        else if (shards == 1) snprintf(fname, sizeof fname, "model.safetensors");
        else snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", f + 1, shards);
        snprintf(path, sizeof path, "%s/%s", dir, fname);
        rc = write_file(path, sel, k, s->misalign);
        if (f < shards)
            for (int i = 0; i < k; i++) json_object_set_new(wm, sel[i]->name, json_string(fname));
    }
    if (!rc && shards > 1) {
        char path[4096];
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        json_t *idx = json_pack("{s:{s:i},s:O}", "metadata", "total_size", 0, "weight_map", wm);
        rc = json_dump_file(idx, path, JSON_INDENT(1));
        json_decref(idx);
    }
    json_decref(wm);
    free(sel);
    for (int i = 0; i < L.n; i++) free(L.t[i].data);
    free(L.t);
    if (rc) fprintf(stderr, "ckpt: writing %s failed\n", dir);
    return rc;
}
