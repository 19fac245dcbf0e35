/* forward.c — the Inkling forward pass in f32 (inkling-text.md §3): embedding -> decoder layers ->
 * final norm -> LM head (ink_forward_chunk), and the decoder layer the MTP depths reuse.
 *
 * Fixed summation orders (results never depend on the thread count or the number of rows):
 *   attention: per query, the kernel set's order (kernels.h: q.k in d order, weights summed in lanes
 *   over key offsets, P.V keys in ascending position), whatever tile the query lands in;
 *   MoE: per token, routed experts in ascending expert id, then shared experts in id order, each
 *   contribution weighted after its down projection. */
#include "base/prof.h"
#include "model/model.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int imax(int a, int b) { return a > b ? a : b; }

#define ATTN_MAX_ROWS 8 /* rows per attention tile (sliding layers: the key union is W + 7 for W per row) */

static size_t attn_ws(const ink_config *c, int chunk, int n_ctx)
{
    size_t n = ink_attn_ws_floats(imax(c->head_dim, c->swa_head_dim), imax(c->rel_extent, c->window), n_ctx + chunk);
    return (n + 15) & ~(size_t)15;
}

int ink_scratch_init(ink_scratch *s, const ink_layer_env *env, int chunk, int n_ctx, ink_err *err)
{
    memset(s, 0, sizeof *s);
    const ink_config *c = env->cfg;
    int qw = imax(c->n_head * c->head_dim, c->swa_n_head * c->swa_head_dim);
    int kw = imax(c->n_kv * c->head_dim, c->swa_n_kv * c->swa_head_dim);
    int rw = imax(c->n_head, c->swa_n_head) * c->d_rel;
    int H = c->hidden, inter = imax(c->dense_inter, c->expert_inter);
    s->chunk = chunk, s->n_ctx = n_ctx, s->n_threads = ink_pool_size(env->pool);
    s->attn_ws = attn_ws(c, chunk, n_ctx);
    size_t sz[13] = {
        (size_t)chunk * H,                             /* a */
        (size_t)chunk * qw,                            /* q */
        (size_t)chunk * kw,                            /* k */
        (size_t)chunk * kw,                            /* v */
        (size_t)chunk * rw,                            /* r */
        (size_t)chunk * qw,                            /* o */
        (size_t)chunk * H,                             /* u */
        (size_t)(c->conv_k - 1 + chunk) * imax(H, kw), /* ext */
        (size_t)chunk * inter,                         /* ffn */
        (size_t)chunk * inter,                         /* ffn2 */
        (size_t)chunk * (c->n_expert + c->n_shared + 1), /* router logits */
        (size_t)s->n_threads * attn_ws(c, chunk, n_ctx), /* attention tile scratch, per thread */
        (size_t)chunk * H * 2,                         /* moe gather + down output */
    };
    size_t total = 0;
    for (int i = 0; i < 13; i++) total += (sz[i] + 15) & ~(size_t)15;
    s->mem = aligned_alloc(64, total * sizeof(float));
    s->route_ids = malloc((size_t)chunk * (c->n_expert_used + 1) * sizeof(int));
    s->rows = malloc((size_t)chunk * (c->n_expert_used + c->n_shared + 1) * sizeof(int)); /* moe_grouped: every expert's rows */
    s->route_w = malloc((size_t)chunk * (c->n_expert_used + c->n_shared + 1) * sizeof(float));
    s->row_w = malloc((size_t)chunk * (c->n_expert_used + c->n_shared + 1) * sizeof(float));
    if (!s->mem || !s->route_ids || !s->rows || !s->route_w || !s->row_w) {
        ink_scratch_free(s);
        return ink_err_set(err, INK_E_NOMEM, "cannot allocate %zu bytes of scratch", total * sizeof(float));
    }
    memset(s->mem, 0, total * sizeof(float));
    if (env->ep) {
        int k = c->n_expert_used, S = c->n_shared;
        s->ep_msg_bytes = ink_ep_msg_bytes(c, chunk);
        s->ep_y = malloc((size_t)chunk * k * H * sizeof(float));
        s->ep_sh = malloc((size_t)(S ? S : 1) * chunk * H * sizeof(float));
        s->ep_pos = malloc((size_t)chunk * k * sizeof(int));
        s->ep_msg = malloc(s->ep_msg_bytes);
        if (!s->ep_y || !s->ep_sh || !s->ep_pos || !s->ep_msg) {
            ink_scratch_free(s);
            return ink_err_set(err, INK_E_NOMEM, "cannot allocate the expert-parallel buffers of %d rows", chunk);
        }
    }
    float **dst[13] = {&s->a, &s->q, &s->k, &s->v, &s->r, &s->o, &s->u, &s->ext, &s->ffn, &s->ffn2, &s->logits_r,
                       &s->scores, &s->moe_acc};
    float *p = s->mem;
    for (int i = 0; i < 13; i++) *dst[i] = p, p += (sz[i] + 15) & ~(size_t)15;
    return INK_OK;
}

void ink_scratch_free(ink_scratch *s)
{
    if (!s) return;
    free(s->mem);
    free(s->route_ids);
    free(s->rows);
    free(s->route_w);
    free(s->row_w);
    free(s->ep_y);
    free(s->ep_sh);
    free(s->ep_pos);
    free(s->ep_msg);
    memset(s, 0, sizeof *s);
}

float ink_tau(int p, double n_floor, float alpha)
{
    float ratio = (float)(p + 1) / (float)n_floor;
    return 1.0f + alpha * logf(fmaxf(ratio, 1.0f));
}

/* ---- attention ------------------------------------------------------------------------- */

typedef struct attn_ctx {
    const ink_layer_env *env;
    const ink_layer_w *w;
    const ink_layer_cache *c;
    const ink_scratch *s;
    const ink_kernels *k;
    int pos0, T;
    int row0;       /* the segment's first row in the scratch buffers */
    int nr, n_rt;   /* rows per tile, row tiles */
    int gs, n_hs;   /* heads (of one KV group) per tile, head splits */
    int n_tiles;    /* n_kv * n_rt * n_hs */
} attn_ctx;

/* Tiles of query rows that share one KV head: rows t0 .. t0+nr-1 x heads kh*g + h0 .. h0+gs-1. The
 * tiling only decides which queries share a K/V pass: each output element is the same whatever it is
 * (kernels.h), so it may follow the thread count. */
/* Tile ti of a segment's attention (thread tid's workspace). */
static void attn_tile(const attn_ctx *a, int ti, int tid)
{
    const ink_layer_cfg *l = &a->w->cfg;
    const ink_config *cfg = a->env->cfg;
    int nh = l->n_head, d = l->head_dim, g = nh / l->n_kv, dr = cfg->d_rel;
    ink_attn t;
    t.d = d, t.ld = (size_t)a->c->kvw, t.cap = a->c->cap;
    t.rel = a->w->at.rel, t.dr = dr, t.R = l->rel_extent;
    t.ws = a->s->scores + (size_t)tid * a->s->attn_ws;
    int kh = ti / (a->n_rt * a->n_hs), rt = ti / a->n_hs % a->n_rt, hs = ti % a->n_hs;
    int t0 = rt * a->nr, t1 = t0 + a->nr < a->T ? t0 + a->nr : a->T;
    int h0 = kh * g + hs * a->gs, h1 = h0 + a->gs < (kh + 1) * g ? h0 + a->gs : (kh + 1) * g;
    t.k = a->c->k + (size_t)kh * d, t.v = a->c->v + (size_t)kh * d;
    t.nq = 0;
    for (int r = t0; r < t1; r++) {
        int p = a->pos0 + r;
        size_t row = (size_t)(a->row0 + r) * nh;
        int lo = imax(a->c->start, l->sliding ? p - l->window + 1 : 0);
        float tau = l->log_scale ? ink_tau(p, cfg->log_floor, cfg->log_alpha) : 1.0f;
        for (int h = h0; h < h1; h++) {
            int i = t.nq++;
            t.q[i] = a->s->q + (row + h) * d;
            t.o[i] = a->s->o + (row + h) * d;
            t.rs[i] = a->s->r + (row + h) * dr;
            t.tau[i] = tau, t.lo[i] = lo, t.hi[i] = p;
        }
    }
    a->k->attn(&t);
}

static void attn_task(void *arg, int ith, int nth)
{
    attn_ctx *a = arg;
    int i0 = (int)((long long)a->n_tiles * ith / nth), i1 = (int)((long long)a->n_tiles * (ith + 1) / nth);
    for (int ti = i0; ti < i1; ti++) attn_tile(a, ti, ith);
}

/* Several segments (sequences of a batch) in one dispatch: tiles of all of them, in order. */
#define ATTN_SEGS 64
typedef struct attn_many {
    attn_ctx a[ATTN_SEGS];
    int first[ATTN_SEGS + 1]; /* the segment's first tile in the list */
    int n;
} attn_many;

static void attn_many_task(void *arg, int q0, int q1, int tid)
{
    const attn_many *m = arg;
    int j = 0;
    for (int q = q0; q < q1; q++) {
        while (q >= m->first[j + 1]) j++;
        attn_tile(&m->a[j], q - m->first[j], tid);
    }
}

static void head_norm(float *x, const float *w, int T, int n_heads, int d, float eps)
{
    ink_rmsnorm_rows(x, x, w, T * n_heads, d, eps); /* rows (t, h) of d, consecutive */
}

/* Attention of one segment's rows: its queries against its own cache (rows t0 .. t0+T-1 of the
 * scratch buffers). Appends the rows' K / V to the cache and plans the tiles into *a; `nth` the
 * tiles to aim for (split heads, then rows, while there are fewer). */
static void attend_plan(const ink_layer_env *env, const ink_layer_w *w, ink_layer_cache *c, int pos0, int t0, int T,
                        const ink_scratch *s, int nth, attn_ctx *a)
{
    const ink_layer_cfg *l = &w->cfg;
    int nh = l->n_head, nkv = l->n_kv;
    for (int t = 0; t < T; t++) {
        size_t slot = (size_t)((pos0 + t) % c->cap) * c->kvw;
        memcpy(c->k + slot, s->k + (size_t)(t0 + t) * c->kvw, (size_t)c->kvw * sizeof(float));
        memcpy(c->v + slot, s->v + (size_t)(t0 + t) * c->kvw, (size_t)c->kvw * sizeof(float));
    }
    /* tiles: up to INK_ATTN_MAXQ queries of one KV head (8 rows x 4 heads, ...) */
    int g = nh / nkv;
    int gs = g < INK_ATTN_MAXQ ? g : INK_ATTN_MAXQ, nr = INK_ATTN_MAXQ / gs;
    if (nr > ATTN_MAX_ROWS) nr = ATTN_MAX_ROWS;
    if (nr > T) nr = T;
    for (;;) {
        int n = nkv * ((T + nr - 1) / nr) * ((g + gs - 1) / gs);
        if (n >= nth || (gs == 1 && nr == 1)) break;
        if (gs > 1) gs = (gs + 1) / 2;
        else nr = (nr + 1) / 2;
    }
    *a = (attn_ctx){env, w, c, s, ink_kernels_active(), pos0, T, t0, nr, (T + nr - 1) / nr, gs, (g + gs - 1) / gs, 0};
    a->n_tiles = nkv * a->n_rt * a->n_hs;
}

/* Every segment's attention. One segment: its tiles split over the threads. Several (a batch of
 * sequences): one dispatch over all their tiles (each segment tiled as if alone on one thread, the
 * threads taking tiles in turn), instead of one dispatch per segment and layer, which cost a
 * 4-sequence batch of the 160 MiB twin ~0.2 ms per sequence per step. Each output element is the
 * same whatever the tiling (kernels.h). */
static void attend_all(const ink_layer_env *env, const ink_layer_w *w, const ink_seg *sg, int n_seg,
                       const ink_scratch *s)
{
    if (n_seg == 1 || n_seg > ATTN_SEGS) {
        for (int i = 0; i < n_seg; i++) {
            attn_ctx a;
            attend_plan(env, w, sg[i].c, sg[i].pos0, sg[i].t0, sg[i].T, s, s->n_threads, &a);
            if (a.n_tiles == 1) attn_tile(&a, 0, 0);
            else ink_pool_run(env->pool, attn_task, &a);
        }
        return;
    }
    attn_many m;
    m.n = n_seg, m.first[0] = 0;
    for (int i = 0; i < n_seg; i++) {
        attend_plan(env, w, sg[i].c, sg[i].pos0, sg[i].t0, sg[i].T, s, 1, &m.a[i]);
        m.first[i + 1] = m.first[i] + m.a[i].n_tiles;
    }
    ink_pool_for(env->pool, m.first[n_seg], 1, attn_many_task, &m);
}

static void kv_convs(const ink_layer_w *w, const ink_seg *sg, int n_seg, ink_scratch *s, int kw, int K);

/* Projections over all rows (one pass over the weights), then per segment: captured conv inputs,
 * the k / v short convolutions with that segment's states, the cache append and the attention. */
static void attention(const ink_layer_env *env, const ink_layer_w *w, const ink_seg *sg, int n_seg, int T,
                      ink_scratch *s)
{
    const ink_config *cfg = env->cfg;
    const ink_layer_cfg *l = &w->cfg;
    int H = cfg->hidden, nh = l->n_head, nkv = l->n_kv, d = l->head_dim, K = cfg->conv_k, kw = nkv * d;
    size_t qb = ink_prof_on ? ink_mat_bytes(&w->at.wq) + ink_mat_bytes(&w->at.wk) + ink_mat_bytes(&w->at.wv) +
                                  ink_mat_bytes(&w->at.wr)
                            : 0;
    const ink_mm_job proj[4] = {{&w->at.wq, s->a, H, T, s->q, nh * d, NULL, 0},
                                {&w->at.wk, s->a, H, T, s->k, kw, NULL, 0},
                                {&w->at.wv, s->a, H, T, s->v, kw, NULL, 0},
                                {&w->at.wr, s->a, H, T, s->r, nh * cfg->d_rel, NULL, 0}};
    INK_PROF(INK_PROF_QKV, qb, {
        ink_matmul_jobs(env->pool, 4, proj); /* one dispatch for the four */
    });
    INK_PROF(INK_PROF_CONV, 0, kv_convs(w, sg, n_seg, s, kw, K));
    INK_PROF(INK_PROF_NORM, 0, {
        head_norm(s->q, w->at.q_norm, T, nh, d, cfg->eps);
        head_norm(s->k, w->at.k_norm, T, nkv, d, cfg->eps);
    });
    INK_PROF(INK_PROF_ATTN, 0, attend_all(env, w, sg, n_seg, s));
    INK_PROF(INK_PROF_WO, ink_prof_on ? ink_mat_bytes(&w->at.wo) : 0,
             ink_matmul(env->pool, &w->at.wo, s->o, nh * d, T, s->u, H));
}

/* The k / v short convolutions of every segment with its states (capturing their inputs first when
 * the cache captures). */
static void kv_convs(const ink_layer_w *w, const ink_seg *sg, int n_seg, ink_scratch *s, int kw, int K)
{
    for (int i = 0; i < n_seg; i++) {
        ink_layer_cache *c = sg[i].c;
        float *k = s->k + (size_t)sg[i].t0 * kw, *v = s->v + (size_t)sg[i].t0 * kw;
        if (c->capt[0]) {
            memcpy(c->capt[0], k, (size_t)sg[i].T * kw * sizeof(float));
            memcpy(c->capt[1], v, (size_t)sg[i].T * kw * sizeof(float));
            c->cap_rows = sg[i].T;
        }
        ink_sconv(w->at.k_conv, c->conv[0], k, k, sg[i].T, kw, K, s->ext);
        ink_sconv(w->at.v_conv, c->conv[1], v, v, sg[i].T, kw, K, s->ext);
    }
}

/* ---- MLPs ------------------------------------------------------------------------------ */

/* Floats in each of the scratch's two MLP buffers, ffn and ffn2. */
static size_t ffn_cap(const ink_config *c, const ink_scratch *s)
{
    return (size_t)s->chunk * (size_t)imax(c->dense_inter, c->expert_inter);
}

/* out[T][H] = down(silu(gate x) * up x) for rows x[T][H]. */
static void swiglu_run(const ink_layer_env *env, const ink_ffn_w *f, const float *x, int T, float *out, ink_scratch *s)
{
    int H = env->cfg->hidden, I = f->gate.rows;
    if (f->gu_mode == 1 && (size_t)T * 2 * I <= ffn_cap(env->cfg, s)) {
        /* the gate/up rows into ffn, each chunk's activation into ffn2 on the thread that computed
         * it (bitwise the in-place pass below) */
        ink_matmul_swiglu(env->pool, &f->gu, x, H, T, s->ffn, 2 * I, s->ffn2, I);
        ink_matmul(env->pool, &f->down, s->ffn2, I, T, out, H);
        return;
    }
    if (f->gu_mode) {
        /* one matmul over the stored [2I, H] tensor into ffn (ffn2 follows it in the scratch, so
         * T * 2I floats fit); then in place, ascending: out (t, i) sits at or before both inputs */
        float *y = s->ffn;
        ink_matmul(env->pool, &f->gu, x, H, T, y, 2 * I);
        for (int t = 0; t < T; t++) {
            const float *g = y + (size_t)t * 2 * I;
            float *o = y + (size_t)t * I;
            if (f->gu_mode == 1) ink_silu_mul(o, g, g + 1, I, 2);
            else ink_silu_mul(o, g, g + I, I, 1);
        }
    } else {
        ink_matmul(env->pool, &f->gate, x, H, T, s->ffn, I);
        ink_matmul(env->pool, &f->up, x, H, T, s->ffn2, I);
        ink_silu_mul(s->ffn, s->ffn, s->ffn2, T * I, 1);
    }
    ink_matmul(env->pool, &f->down, s->ffn, I, T, out, H);
}

/* The same, profiled as part `cat` (routed experts, shared experts or the dense MLP). */
void ink_swiglu(const ink_layer_env *env, const ink_ffn_w *f, const float *x, int T, float *out, ink_scratch *s, int cat)
{
    size_t b = ink_prof_on ? ink_mat_bytes(&f->gate) + ink_mat_bytes(&f->up) + ink_mat_bytes(&f->down) : 0;
    INK_PROF(cat, b, swiglu_run(env, f, x, T, out, s));
}

/* Router for one token (inkling-text.md §3.7): chosen ids (in selection order: higher score first,
 * lower id on ties) and the k+S mixture weights. */
void ink_route(const ink_config *c, const float *logit, const float *bias, float gscale, int *chosen, float *wt)
{
    int E = c->n_expert, k = c->n_expert_used, S = c->n_shared;
    float score[INK_MAX_TOPK];
    for (int j = 0; j < k; j++) chosen[j] = -1, score[j] = -FLT_MAX;
    for (int e = 0; e < E; e++) {
        float sc = ink_sigmoid(logit[e]) + bias[e];
        if (chosen[k - 1] >= 0 && !(sc > score[k - 1])) continue;
        int j = k - 1;
        while (j > 0 && (chosen[j - 1] < 0 || sc > score[j - 1])) {
            chosen[j] = chosen[j - 1], score[j] = score[j - 1];
            j--;
        }
        chosen[j] = e, score[j] = sc;
    }
    float ls[INK_MAX_TOPK + INK_MAX_SHARED], mx = -FLT_MAX;
    for (int j = 0; j < k + S; j++) {
        ls[j] = ink_logsigmoid(j < k ? logit[chosen[j]] : logit[E + j - k]);
        if (ls[j] > mx) mx = ls[j];
    }
    float sum = 0.0f;
    for (int j = 0; j < k + S; j++) sum += expf(ls[j] - mx);
    float lse = mx + logf(sum);
    for (int j = 0; j < k + S; j++) wt[j] = expf(ls[j] - lse) * c->route_scale * gscale;
}

void ink_moe_experts(const ink_layer_env *env, const ink_layer_w *w, const float *x, int T, const int *chosen, int e0,
                     int e1, const int *pos, float *Y, ink_scratch *s)
{
    int H = env->cfg->hidden, k = env->cfg->n_expert_used, *slot = s->rows;
    float *gx = s->moe_acc, *gy = s->moe_acc + (size_t)s->chunk * H;
    for (int e = e0; e < e1; e++) {
        int n = 0;
        for (int i = 0; i < T * k; i++)
            if (chosen[i] == e) slot[n++] = i;
        if (!n) continue;
        for (int i = 0; i < n; i++)
            memcpy(gx + (size_t)i * H, x + (size_t)(slot[i] / k) * H, (size_t)H * sizeof(float));
        ink_swiglu(env, &w->experts[e], gx, n, gy, s, INK_PROF_EXPERT);
        for (int i = 0; i < n; i++)
            memcpy(Y + (size_t)pos[slot[i]] * H, gy + (size_t)i * H, (size_t)H * sizeof(float));
    }
}

/* Expert e's rows of T routed tokens (e >= n_expert: shared expert e - n_expert, every token), in
 * token order: the token in rows[], its mixture weight in rw[]; returns how many. */
static int expert_rows(const ink_config *c, const int *chosen, const float *wt, int e, int T, int *rows, float *rw)
{
    int E = c->n_expert, k = c->n_expert_used, KS = k + c->n_shared, n = 0;
    for (int t = 0; t < T; t++) {
        if (e < E) {
            for (int j = 0; j < k; j++)
                if (chosen[t * k + j] == e) rows[n] = t, rw[n++] = wt[t * KS + j];
        } else
            rows[n] = t, rw[n++] = wt[t * KS + k + e - E];
    }
    return n;
}

/* gx[i] = x[rows[i]] for i < n (rows of H) */
static void gather_rows(float *gx, const float *x, const int *rows, int n, int H)
{
    for (int i = 0; i < n; i++) memcpy(gx + (size_t)i * H, x + (size_t)rows[i] * H, (size_t)H * sizeof(float));
}

/* out[rows[i]] += rw[i] gy[i], i ascending */
static void combine_rows(float *out, const float *gy, const int *rows, const float *rw, int n, int H)
{
    for (int i = 0; i < n; i++) {
        float *o = out + (size_t)rows[i] * H;
        const float *y = gy + (size_t)i * H;
        for (int h = 0; h < H; h++) o[h] += rw[i] * y[h];
    }
}

/* The experts of a MoE layer (the chosen ones and the shared ones, routed already into
 * s->route_ids / s->route_w) in two pool dispatches: every active expert's gate/up with its
 * activation (ink_matmul_jobs), then every down; each alone is a small matrix, one chunk on one
 * thread. Rows, products and the combine (expert by expert in id order, tokens in order) are moe's
 * loop's, so the bits are too. 0 (nothing done) when the experts do not all have the interleaved
 * gate/up, there are more than INK_MM_JOBS of them, or their rows do not fit the scratch. */
static int moe_grouped(const ink_layer_env *env, const ink_layer_w *w, const float *x, int T, float *out,
                       ink_scratch *s, double *t_ffn)
{
    const ink_config *c = env->cfg;
    int H = c->hidden, E = c->n_expert, S = c->n_shared;
    int *rows = s->rows, ids[INK_MM_JOBS], first[INK_MM_JOBS + 1], n = 0, R = 0;
    float *rw = s->row_w;
    size_t ny = 0;
    first[0] = 0;
    for (int e = 0; e < E + S; e++) {
        const ink_ffn_w *f = e < E ? &w->experts[e] : &w->shared[e - E];
        int m = expert_rows(c, s->route_ids, s->route_w, e, T, rows + R, rw + R);
        if (!m) continue;
        if (n == INK_MM_JOBS || f->gu_mode != 1) return 0;
        ny += (size_t)m * 2 * (size_t)f->gate.rows;
        ids[n++] = e, R += m, first[n] = R;
    }
    if (R > s->chunk || ny > ffn_cap(c, s)) return 0;
    float *gx = s->moe_acc, *gy = s->moe_acc + (size_t)s->chunk * H, *y = s->ffn, *o = s->ffn2;
    gather_rows(gx, x, rows, R, H);
    ink_mm_job gu[INK_MM_JOBS], dn[INK_MM_JOBS];
    size_t bytes = 0;
    for (int j = 0; j < n; j++) {
        const ink_ffn_w *f = ids[j] < E ? &w->experts[ids[j]] : &w->shared[ids[j] - E];
        int m = first[j + 1] - first[j], I = f->gate.rows;
        gu[j] = (ink_mm_job){&f->gu, gx + (size_t)first[j] * H, H, m, y, 2 * I, o, I};
        dn[j] = (ink_mm_job){&f->down, o, I, m, gy + (size_t)first[j] * H, H, NULL, 0};
        y += (size_t)m * 2 * I, o += (size_t)m * I;
        bytes += ink_prof_on ? ink_mat_bytes(&f->gu) + ink_mat_bytes(&f->down) : 0;
    }
    double tf = ink_prof_on ? ink_now_s() : 0;
    INK_PROF(INK_PROF_EXPERT, bytes, {
        ink_matmul_jobs(env->pool, n, gu);
        ink_matmul_jobs(env->pool, n, dn);
    });
    if (ink_prof_on) *t_ffn += ink_now_s() - tf;
    combine_rows(out, gy, rows, rw, R, H);
    return 1;
}

static void moe(const ink_layer_env *env, const ink_layer_w *w, const float *x, int T, float *out, ink_scratch *s)
{
    if (env->ep) {
        ink_moe_ep(env, w, x, T, out, s);
        return;
    }
    const ink_config *c = env->cfg;
    int H = c->hidden, E = c->n_expert, k = c->n_expert_used, S = c->n_shared, ER = E + S;
    int *chosen = s->route_ids, *rows = s->rows, KS = k + S;
    float *wt = s->route_w, *rw = s->row_w;
    INK_PROF(INK_PROF_ROUTER, ink_prof_on ? ink_mat_bytes(&w->router) : 0, {
        ink_matmul(env->pool, &w->router, x, H, T, s->logits_r, ER);
        /* route every token: its k chosen ids and k+S mixture weights */
        for (int t = 0; t < T; t++)
            ink_route(c, s->logits_r + (size_t)t * ER, w->router_bias, w->router_scale, chosen + t * k, wt + t * KS);
    });
    double t0 = ink_prof_on ? ink_now_s() : 0, t_ffn = 0;
    memset(out, 0, (size_t)T * H * sizeof(float));
    float *gx = s->moe_acc, *gy = s->moe_acc + (size_t)s->chunk * H;
    if (moe_grouped(env, w, x, T, out, s, &t_ffn)) {
        if (ink_prof_on) ink_prof_add(INK_PROF_COMBINE, ink_now_s() - t0 - t_ffn, 0);
        return;
    }
    for (int e = 0; e < E + S; e++) {
        int n = expert_rows(c, chosen, wt, e, T, rows, rw);
        if (!n) continue;
        gather_rows(gx, x, rows, n, H);
        double tf = ink_prof_on ? ink_now_s() : 0;
        ink_swiglu(env, e < E ? &w->experts[e] : &w->shared[e - E], gx, n, gy, s, e < E ? INK_PROF_EXPERT : INK_PROF_SHARED);
        if (ink_prof_on) t_ffn += ink_now_s() - tf;
        combine_rows(out, gy, rows, rw, n, H);
    }
    if (ink_prof_on) ink_prof_add(INK_PROF_COMBINE, ink_now_s() - t0 - t_ffn, 0); /* the rest of the MoE */
}

/* ---- layer ----------------------------------------------------------------------------- */

/* A conv state update of every segment over its rows of u[T][C] (in place), capturing the inputs
 * in capt[i] first when the cache captures. */
static void sconv_segs(const float *wconv, int i, const ink_seg *sg, int n_seg, float *u, int C, int K, float *ext)
{
    for (int j = 0; j < n_seg; j++) {
        ink_layer_cache *c = sg[j].c;
        float *x = u + (size_t)sg[j].t0 * C;
        if (c->capt[i]) memcpy(c->capt[i], x, (size_t)sg[j].T * C * sizeof(float));
        ink_sconv(wconv, c->conv[i], x, x, sg[j].T, C, K, ext);
    }
}

static void add_rows(float *x, const float *u, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] += u[i];
}

static void norm_rows(float *out, const float *x, const float *w, int T, int H, float eps)
{
    ink_rmsnorm_rows(out, x, w, T, H, eps);
}

void ink_layer_forward_segs(const ink_layer_env *env, const ink_layer_w *w, const ink_seg *sg, int n_seg, float *x,
                            int T, ink_scratch *s)
{
    const ink_config *cfg = env->cfg;
    int H = cfg->hidden, K = cfg->conv_k;
    size_t n = (size_t)T * H;
    INK_PROF(INK_PROF_NORM, 0, norm_rows(s->a, x, w->attn_norm, T, H, cfg->eps));
    attention(env, w, sg, n_seg, T, s);
    INK_PROF(INK_PROF_CONV, 0, sconv_segs(w->attn_conv, 2, sg, n_seg, s->u, H, K, s->ext));
    INK_PROF(INK_PROF_ADD, 0, add_rows(x, s->u, n));
    INK_PROF(INK_PROF_NORM, 0, norm_rows(s->a, x, w->mlp_norm, T, H, cfg->eps));
    if (w->cfg.moe) moe(env, w, s->a, T, s->u, s);
    else {
        ink_swiglu(env, &w->dense, s->a, T, s->u, s, INK_PROF_DENSE);
        INK_PROF(INK_PROF_ADD, 0, for (size_t i = 0; i < n; i++) s->u[i] *= w->dense_scale);
    }
    INK_PROF(INK_PROF_CONV, 0, sconv_segs(w->mlp_conv, 3, sg, n_seg, s->u, H, K, s->ext));
    INK_PROF(INK_PROF_ADD, 0, add_rows(x, s->u, n));
}

void ink_layer_forward(const ink_layer_env *env, const ink_layer_w *w, ink_layer_cache *c, int pos0, float *x, int T,
                       ink_scratch *s)
{
    ink_seg one = {c, pos0, 0, T};
    ink_layer_forward_segs(env, w, &one, 1, x, T, s);
}

void ink_embed(const ink_model *m, const int32_t *ids, int T, float *out)
{
    int H = m->cfg.hidden;
    for (int t = 0; t < T; t++) {
        float *o = out + (size_t)t * H;
        ink_mat_row(&m->embed, ids[t], o);
        ink_rmsnorm(o, o, m->embed_norm, H, m->cfg.eps);
    }
}

void ink_lm_head(const ink_model *m, const float *x, int T, float *logits, float *tmp)
{
    int H = m->cfg.hidden, Vu = m->cfg.vocab_unpadded;
    for (size_t i = 0; i < (size_t)T * H; i++) tmp[i] = x[i] / m->cfg.mup;
    ink_mat head = m->unembed;
    head.rows = Vu;
    INK_PROF(INK_PROF_HEAD, ink_prof_on ? ink_mat_bytes(&head) : 0, ink_matmul(m->pool, &head, tmp, H, T, logits, Vu));
}

void ink_forward_chunk(const ink_model *m, ink_layer_cache *lc, ink_scratch *sc, int pos, const int32_t *tok, int n,
                       int t0, int T, const ink_eval_out *out, float *x, float *xn, float *tmp)
{
    const ink_config *c = &m->cfg;
    int H = c->hidden, Vu = c->vocab_unpadded, L = c->n_layer;
    const ink_layer_env env = {c, m->pool, m->ep};
    INK_PROF(INK_PROF_EMBED, 0, ink_embed(m, tok, n, x));
    if (out->embeddings) memcpy(out->embeddings + (size_t)t0 * H, x, (size_t)n * H * sizeof(float));
    for (int l = 0; l < L; l++) {
        ink_layer_forward(&env, &m->layers[l], &lc[l], pos, x, n, sc);
        if (out->layer_outputs) memcpy(out->layer_outputs + ((size_t)l * T + t0) * H, x, (size_t)n * H * sizeof(float));
    }
    if (out->hidden_prenorm) memcpy(out->hidden_prenorm + (size_t)t0 * H, x, (size_t)n * H * sizeof(float));
    int last = t0 + n == T;
    if (!out->hidden_postnorm && !(out->logits && (out->all_logits || last))) return;
    INK_PROF(INK_PROF_NORM, 0, norm_rows(xn, x, m->norm, n, H, c->eps));
    if (out->hidden_postnorm) memcpy(out->hidden_postnorm + (size_t)t0 * H, xn, (size_t)n * H * sizeof(float));
    if (out->logits && out->all_logits) ink_lm_head(m, xn, n, out->logits + (size_t)t0 * Vu, tmp);
    else if (out->logits && last) ink_lm_head(m, xn + (size_t)(n - 1) * H, 1, out->logits, tmp);
}
