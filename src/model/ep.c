/* ep.c — expert parallelism (issue 19; inkling.h "expert parallelism", docs/distributed.md).
 *
 * Rank 0 runs the whole forward pass but the routed experts of the other ranks. Per MoE layer it
 * routes every row (the router is rank 0's), sends one request to each rank that owns a chosen
 * expert (header, the input rows that chose one of its experts, their chosen ids), computes its own experts and the
 * shared ones meanwhile, and receives each rank's outputs: one row of H floats per (row, chosen
 * expert) slot it owns, in slot order (row, then selection order). The sum is then made as one
 * process makes it (forward.c's moe: routed experts in ascending id, then shared, each output
 * weighted after its down projection), from the same expert outputs: every expert runs once over the
 * same rows as in one process, and the kernels compute rows independently of the thread count, so
 * the result is bitwise the single-process one.
 *
 * Messages (native byte order: the ranks of one job run one build):
 *   request  rank 0 -> r: ep_hdr (cmd EP_MOE, T = the rows with a slot on r), x[T][H] f32, chosen[T][k] i32
 *   reply    r -> rank 0: y[n_r][H] f32, n_r = slots whose expert rank r owns (never 0: rank 0
 *            sends no request to a rank without slots)
 *   stop     rank 0 -> r: ep_hdr (cmd EP_STOP)
 *   report   rank 0 -> r: ep_hdr (cmd EP_REPORT); r -> rank 0: ep_report
 * No allocation per request on rank 0 (the scratch holds the buffers); a serving rank grows its
 * buffers when a request has more rows than any before. */
#include "base/prof.h"
#include "model/model.h"

#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>

#define EP_MAGIC 0x31504b49u /* "IKP1" */
#define EP_MAX_RANKS 1024
enum { EP_MOE = 1, EP_STOP = 2, EP_REPORT = 3 };

typedef struct ep_hdr {
    uint32_t magic, cmd;
    int32_t layer, T, k, H;
    uint64_t seq;
} ep_hdr;

typedef struct ep_report {
    int64_t peak_rss_kb;
    int32_t e0, e1;
    uint64_t requests, bytes_sent, bytes_recv;
} ep_report;

static void own_report(const ink_ep *ep, ep_report *r)
{
    struct rusage ru;
    memset(r, 0, sizeof *r);
    r->peak_rss_kb = getrusage(RUSAGE_SELF, &ru) ? 0 : (int64_t)ru.ru_maxrss; /* Linux: KiB */
    r->e0 = ep->e0, r->e1 = ep->e1;
    r->requests = ep->st.requests, r->bytes_sent = ep->st.bytes_sent, r->bytes_recv = ep->st.bytes_recv;
}

void ink_ep_range(int n_expert, int rank, int n_ranks, int *e0, int *e1)
{
    *e0 = (int)((long long)n_expert * rank / n_ranks);
    *e1 = (int)((long long)n_expert * (rank + 1) / n_ranks);
}

/* The rank whose range holds expert e. */
static int owner(int e, int E, int n)
{
    int r = (int)((long long)e * n / E), a, b;
    for (;;) {
        ink_ep_range(E, r, n, &a, &b);
        if (e < a) r--;
        else if (e >= b) r++;
        else return r;
    }
}

size_t ink_ep_msg_bytes(const ink_config *c, int T)
{
    return sizeof(ep_hdr) + (size_t)T * c->hidden * sizeof(float) + (size_t)T * c->n_expert_used * sizeof(int32_t);
}

int ink_ep_attach(ink_model *m, const ink_ep_transport *t, ink_err *err)
{
    if (!t || t->n_ranks <= 1) return INK_OK;
    const ink_config *c = &m->cfg;
    if (t->n_ranks > EP_MAX_RANKS || t->rank < 0 || t->rank >= t->n_ranks)
        return ink_err_set(err, INK_E_INVAL, "expert parallel: rank %d of %d ranks (at most %d ranks)", t->rank,
                           t->n_ranks, EP_MAX_RANKS);
    if (!t->send || !t->probe || !t->recv || !t->fail)
        return ink_err_set(err, INK_E_INVAL, "expert parallel: the transport lacks a callback");
    int n_moe = 0;
    for (int l = 0; l < c->n_layer; l++) n_moe += c->layers[l].moe;
    if (!n_moe || c->n_expert < t->n_ranks)
        return ink_err_set(err, INK_E_INVAL, "expert parallel: %d ranks but the model has %d MoE layers of %d routed experts "
                           "(every rank needs at least one expert)", t->n_ranks, n_moe, n_moe ? c->n_expert : 0);
    ink_ep *ep = ink_weights_own(&m->w, calloc(1, sizeof *ep));
    if (!ep) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    ep->t = *t;
    ink_ep_range(c->n_expert, t->rank, t->n_ranks, &ep->e0, &ep->e1);
    ep->layers = m->layers, ep->n_layer = c->n_layer;
    ep->st.rank = t->rank, ep->st.n_ranks = t->n_ranks, ep->st.expert0 = ep->e0, ep->st.expert1 = ep->e1;
    m->ep = ep;
    return INK_OK;
}

void ink_model_ep_stats(const ink_model *m, ink_ep_stats *out)
{
    memset(out, 0, sizeof *out);
    if (m->ep) *out = m->ep->st;
    else out->n_ranks = 1, out->expert1 = m->cfg.n_expert;
}

int ink_ep_stop(const ink_ep_transport *t)
{
    ep_hdr h = {EP_MAGIC, EP_STOP, 0, 0, 0, 0, 0};
    for (int r = 1; t && r < t->n_ranks; r++)
        if (t->send(t->ctx, r, &h, sizeof h)) return INK_E_IO;
    return INK_OK;
}

int ink_ep_ranks(ink_model *m, ink_ep_rank *out, int cap, ink_err *err)
{
    ink_ep *ep = m->ep;
    int n = ep ? ep->t.n_ranks : 1;
    if (ep && ep->t.rank) return ink_err_set(err, INK_E_INVAL, "ink_ep_ranks: only rank 0 asks (this is rank %d)", ep->t.rank);
    if (cap < n) return ink_err_set(err, INK_E_INVAL, "ink_ep_ranks: room for %d ranks, the job has %d", cap, n);
    struct rusage ru;
    memset(out, 0, (size_t)n * sizeof *out);
    out[0].peak_rss_kb = getrusage(RUSAGE_SELF, &ru) ? 0 : (long long)ru.ru_maxrss;
    out[0].expert1 = ep ? ep->e1 : m->cfg.n_expert;
    if (!ep) return 1;
    out[0].bytes_sent = ep->st.bytes_sent, out[0].bytes_recv = ep->st.bytes_recv;
    ep_hdr h = {EP_MAGIC, EP_REPORT, 0, 0, 0, 0, 0};
    for (int r = 1; r < n; r++) ep->t.send(ep->t.ctx, r, &h, sizeof h);
    for (int r = 1; r < n; r++) {
        ep_report rep;
        size_t got = 0;
        ep->t.probe(ep->t.ctx, r, &got);
        if (got != sizeof rep) return ink_err_set(err, INK_E_FORMAT, "rank %d answered the report with %zu bytes", r, got);
        ep->t.recv(ep->t.ctx, r, &rep, sizeof rep);
        out[r] = (ink_ep_rank){r, rep.e0, rep.e1, (long long)rep.peak_rss_kb, rep.requests, rep.bytes_sent, rep.bytes_recv};
    }
    return n;
}

static void ep_fail(ink_ep *ep, const char *fmt, int a, int b, size_t c, size_t d)
{
    char msg[256];
    snprintf(msg, sizeof msg, fmt, a, b, c, d);
    ep->t.fail(ep->t.ctx, msg);
}

/* Sends to every rank with slots (cnt[r] > 0) the request of layer w: the rows, of the T, that chose
 * at least one of its experts (in row order) with their chosen ids. The rank's slots in those rows,
 * in row then selection order, are its slots of all T rows in the same order. One message buffer:
 * the transport's send is done with it when it returns. */
static void ep_request(ink_ep *ep, const ink_layer_env *env, const ink_layer_w *w, const float *x, int T,
                       const int *chosen, const int *cnt, ink_scratch *s)
{
    const ink_config *c = env->cfg;
    int H = c->hidden, k = c->n_expert_used, E = c->n_expert, n = ep->t.n_ranks;
    uint64_t seq = ++ep->seq;
    for (int r = 1; r < n; r++) {
        if (!cnt[r]) continue;
        int a, b, nr = 0, i = 0;
        ink_ep_range(E, r, n, &a, &b);
        for (int t = 0; t < T; t++)
            for (int j = 0; j < k; j++)
                if (chosen[t * k + j] >= a && chosen[t * k + j] < b) {
                    nr++;
                    break;
                }
        unsigned char *xs = s->ep_msg + sizeof(ep_hdr), *ids = xs + (size_t)nr * H * sizeof(float);
        for (int t = 0; t < T; t++) {
            int mine = 0;
            for (int j = 0; j < k; j++) mine |= chosen[t * k + j] >= a && chosen[t * k + j] < b;
            if (!mine) continue;
            memcpy(xs + (size_t)i * H * sizeof(float), x + (size_t)t * H, (size_t)H * sizeof(float));
            for (int j = 0; j < k; j++) {
                int32_t e = chosen[t * k + j];
                memcpy(ids + ((size_t)i * k + j) * sizeof e, &e, sizeof e);
            }
            i++;
        }
        ep_hdr h = {EP_MAGIC, EP_MOE, (int32_t)(w - ep->layers), nr, k, H, seq};
        memcpy(s->ep_msg, &h, sizeof h);
        size_t len = ink_ep_msg_bytes(c, nr);
        ep->t.send(ep->t.ctx, r, s->ep_msg, len);
        ep->st.bytes_sent += len;
    }
}

/* Receives every requested rank's outputs into its slots' rows of s->ep_y. */
static void ep_replies(ink_ep *ep, int H, const int *cnt, const int *displ, int layer, ink_scratch *s)
{
    for (int r = 1; r < ep->t.n_ranks; r++) {
        if (!cnt[r]) continue;
        size_t want = (size_t)cnt[r] * H * sizeof(float), got = 0;
        ep->t.probe(ep->t.ctx, r, &got);
        if (got != want)
            ep_fail(ep, "rank %d answered the request of layer %d with %zu bytes, expected %zu", r, layer, got, want);
        ep->t.recv(ep->t.ctx, r, s->ep_y + (size_t)displ[r] * H, want);
        ep->st.bytes_recv += want;
    }
}

void ink_moe_ep(const ink_layer_env *env, const ink_layer_w *w, const float *x, int T, float *out, ink_scratch *s)
{
    ink_ep *ep = env->ep;
    const ink_config *c = env->cfg;
    int H = c->hidden, E = c->n_expert, k = c->n_expert_used, S = c->n_shared, ER = E + S, KS = k + S;
    int n = ep->t.n_ranks, *chosen = s->route_ids, *pos = s->ep_pos;
    float *wt = s->route_w;
    INK_PROF(INK_PROF_ROUTER, ink_prof_on ? ink_mat_bytes(&w->router) : 0, {
        ink_matmul(env->pool, &w->router, x, H, T, s->logits_r, ER);
        for (int t = 0; t < T; t++)
            ink_route(c, s->logits_r + (size_t)t * ER, w->router_bias, w->router_scale, chosen + t * k, wt + t * KS);
    });
    double t0 = ink_now_s(), t_part = 0;
    /* slots grouped by owning rank, each rank's in slot order */
    int cnt[EP_MAX_RANKS] = {0}, displ[EP_MAX_RANKS], run[EP_MAX_RANKS];
    for (int i = 0; i < T * k; i++) cnt[owner(chosen[i], E, n)]++;
    for (int r = 0, d = 0; r < n; r++) displ[r] = d, run[r] = 0, d += cnt[r];
    for (int i = 0; i < T * k; i++) {
        int r = owner(chosen[i], E, n);
        pos[i] = displ[r] + run[r]++;
    }
    double tx = ink_now_s();
    ep_request(ep, env, w, x, T, chosen, cnt, s);
    double t_ex = ink_now_s() - tx;
    /* meanwhile: this rank's experts, then the shared ones over every row (as one process runs them) */
    tx = ink_now_s();
    ink_moe_experts(env, w, x, T, chosen, ep->e0, ep->e1, pos, s->ep_y, s);
    float *gx = s->moe_acc;
    memcpy(gx, x, (size_t)T * H * sizeof(float));
    for (int j = 0; j < S; j++)
        ink_swiglu(env, &w->shared[j], gx, T, s->ep_sh + (size_t)j * s->chunk * H, s, INK_PROF_SHARED);
    t_part = ink_now_s() - tx;
    tx = ink_now_s();
    ep_replies(ep, H, cnt, displ, (int)(w - ep->layers), s);
    t_ex += ink_now_s() - tx;
    /* the single-process sum: routed experts in ascending id, then shared experts in id order */
    memset(out, 0, (size_t)T * H * sizeof(float));
    for (int e = 0; e < E; e++)
        for (int i = 0; i < T * k; i++) {
            if (chosen[i] != e) continue;
            float *o = out + (size_t)(i / k) * H, rw = wt[(i / k) * KS + i % k];
            const float *y = s->ep_y + (size_t)pos[i] * H;
            for (int h = 0; h < H; h++) o[h] += rw * y[h];
        }
    for (int j = 0; j < S; j++)
        for (int t = 0; t < T; t++) {
            float *o = out + (size_t)t * H, rw = wt[t * KS + k + j];
            const float *y = s->ep_sh + ((size_t)j * s->chunk + t) * H;
            for (int h = 0; h < H; h++) o[h] += rw * y[h];
        }
    int remote = 0;
    for (int r = 1; r < n; r++) remote += cnt[r] > 0;
    ep->st.moe_layers++, ep->st.exchanges += remote > 0, ep->st.requests += (unsigned long long)remote;
    ep->st.rows += (unsigned long long)T, ep->st.seconds += t_ex;
    if (ink_prof_on) {
        ink_prof_add(INK_PROF_EXCHANGE, t_ex, 0);
        ink_prof_add(INK_PROF_COMBINE, ink_now_s() - t0 - t_ex - t_part, 0);
    }
}

/* Checks a request's header and size against the model; INK_OK or INK_E_FORMAT naming the field. */
static int check_request(const ink_model *m, const ep_hdr *h, size_t n, ink_err *err)
{
    const ink_config *c = &m->cfg;
    int r = m->ep->t.rank;
    if (h->cmd != EP_MOE) return ink_err_set(err, INK_E_FORMAT, "rank %d: unknown command %u from rank 0", r, h->cmd);
    if (h->layer < 0 || h->layer >= c->n_layer || !c->layers[h->layer].moe)
        return ink_err_set(err, INK_E_FORMAT, "rank %d: request %llu names layer %d, not a MoE layer of this checkpoint "
                           "(%d layers): do the ranks run the same checkpoint?", r, (unsigned long long)h->seq,
                           h->layer, c->n_layer);
    if (h->k != c->n_expert_used || h->H != c->hidden)
        return ink_err_set(err, INK_E_FORMAT, "rank %d: request with hidden %d, top-%d; this checkpoint has hidden %d, "
                           "top-%d", r, h->H, h->k, c->hidden, c->n_expert_used);
    if (h->T < 1 || h->T > (1 << 20) || n != ink_ep_msg_bytes(c, h->T))
        return ink_err_set(err, INK_E_FORMAT, "rank %d: request of %d rows in %zu bytes (expected %zu)", r, h->T, n,
                           h->T >= 1 && h->T <= (1 << 20) ? ink_ep_msg_bytes(c, h->T) : 0);
    return INK_OK;
}

/* One request on a serving rank: its experts' outputs for the slots it owns, sent to rank 0. */
static int serve_one(ink_model *m, const ep_hdr *h, const unsigned char *msg, ink_scratch *sc, ink_err *err)
{
    ink_ep *ep = m->ep;
    const ink_config *c = &m->cfg;
    int T = h->T, k = c->n_expert_used, H = c->hidden, own = 0;
    const float *x = (const float *)(msg + sizeof *h); /* offset 32 of a malloc'd buffer: aligned */
    for (int i = 0; i < T * k; i++) {
        int32_t e;
        memcpy(&e, msg + sizeof *h + (size_t)T * H * sizeof(float) + (size_t)i * sizeof e, sizeof e);
        if (e < 0 || e >= c->n_expert)
            return ink_err_set(err, INK_E_FORMAT, "rank %d: request %llu: expert id %d out of range (%d experts)",
                               ep->t.rank, (unsigned long long)h->seq, (int)e, c->n_expert);
        sc->route_ids[i] = e;
        sc->ep_pos[i] = e >= ep->e0 && e < ep->e1 ? own++ : -1;
    }
    if (!own)
        return ink_err_set(err, INK_E_FORMAT, "rank %d: request %llu chooses none of its experts [%d, %d)", ep->t.rank,
                           (unsigned long long)h->seq, ep->e0, ep->e1);
    ink_layer_env env = {c, m->pool, ep};
    ink_moe_experts(&env, &m->layers[h->layer], x, T, sc->route_ids, ep->e0, ep->e1, sc->ep_pos, sc->ep_y, sc);
    size_t b = (size_t)own * H * sizeof(float);
    ep->t.send(ep->t.ctx, 0, sc->ep_y, b);
    ep->seq = h->seq;
    ep->st.requests++, ep->st.rows += (unsigned long long)T, ep->st.bytes_sent += b;
    return INK_OK;
}

int ink_ep_serve(ink_model *m, ink_err *err)
{
    ink_ep *ep = m->ep;
    if (!ep || ep->t.rank == 0)
        return ink_err_set(err, INK_E_INVAL, "ink_ep_serve: the model was not opened as a rank > 0 of a job");
    ink_layer_env env = {&m->cfg, m->pool, ep};
    ink_scratch sc;
    memset(&sc, 0, sizeof sc);
    unsigned char *msg = NULL;
    size_t cap = 0;
    int rc = INK_OK;
    for (;;) {
        size_t n = 0;
        ep->t.probe(ep->t.ctx, 0, &n);
        if (n > cap) {
            unsigned char *nm = realloc(msg, n);
            if (!nm) {
                rc = ink_err_set(err, INK_E_NOMEM, "rank %d: cannot allocate a request of %zu bytes", ep->t.rank, n);
                break;
            }
            msg = nm, cap = n;
        }
        ep->t.recv(ep->t.ctx, 0, msg, n);
        ep_hdr h;
        if (n < sizeof h || (memcpy(&h, msg, sizeof h), h.magic != EP_MAGIC)) {
            rc = ink_err_set(err, INK_E_FORMAT, "rank %d: malformed message of %zu bytes from rank 0", ep->t.rank, n);
            break;
        }
        ep->st.bytes_recv += n;
        if (h.cmd == EP_STOP) break;
        if (h.cmd == EP_REPORT) {
            ep_report rep;
            own_report(ep, &rep);
            ep->t.send(ep->t.ctx, 0, &rep, sizeof rep);
            continue;
        }
        if ((rc = check_request(m, &h, n, err))) break;
        if (h.T > sc.chunk) {
            ink_scratch_free(&sc);
            if ((rc = ink_scratch_init(&sc, &env, h.T, 1, err))) break;
        }
        if ((rc = serve_one(m, &h, msg, &sc, err))) break;
    }
    ink_scratch_free(&sc);
    free(msg);
    return rc;
}
