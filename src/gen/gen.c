/* gen.c — the generator (ink_gen, inkling.h): plain and speculative generation (mtp.md §7-§12). One
 * loop for both: without a drafter (or with K = 1) every round is a plain decode step.
 *
 * A run reads top to bottom: ink_gen_start (prefill, first token), then per ink_gen_step one round
 * { draft, verify, accept, emit, rollback, drafter update, statistics } in the static functions of
 * the same names; the acceptance rules themselves are pure functions in gen/accept.c and the
 * drafter's caches are reached only through its interface (draft/mtp.h).
 *
 * Round (mode P, the default): draft M = min(K_eff - 1, D) tokens, depth m giving d_{m+1} from its
 * row n-1 (per-depth history: each depth keeps a committed frontier and recomputes only new rows);
 * verify [x_n, d_1..d_M] in one target forward from a snapshot; walk (greedy) or lossless
 * speculative sampling (T > 0); keep the e emitted tokens' inputs by restore + replay (or
 * capture-and-commit); n += e. Compat-X (mtp.md 7.9) differs only in the draft phase and the
 * drafter update. All buffers are allocated once per call, before the prefill.
 *
 * Memory is bounded by rings, not by the context: target hidden rows and each depth's outputs live
 * in rings of RING positions. Committed depth rows advance through a chunked pipeline (depth m never
 * runs more than CH rows ahead of what depth m+1 has consumed), interleaved with the prefill, so a
 * long prompt never needs more than about 2 CH rows of any ring. */
#include "base/prof.h"
#include "base/clock.h"
#include "draft/mtp.h"
#include "gen/accept.h"
#include "gen/autok.h"
#include "sample/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ink_gen {
    ink_session *s;
    const ink_model *m;
    ink_drafter *d;
    const ink_gen_opts *o;
    ink_gen_stats *st;
    int V, VS, H, D, K, mode, greedy, Mmax; /* V: sampled ids (vocab limit), VS: logits row length */
    uint64_t rng;
    int32_t *seq;                 /* [n_ctx + 1]: x_0 .. x_n (prompt, committed tokens, bonus) */
    float *hist;                  /* [RING][H]: target hidden of position p at p % RING (postnorm P / prenorm X) */
    float *outr;                  /* [D][RING][H]: depth m output of position p at p % RING */
    float *rows;                  /* [CH + K][H]: gathered inputs / outputs of one depth forward */
    int32_t rtok[INK_CHUNK];      /* their tokens */
    int r_first, r_T, r_nc;       /* depth_round_in .. depth_round_out: the forward in flight */
    float *vh;                    /* [max(CH, K)][H]: hidden rows of one target forward */
    int F[INK_MAX_DEPTH];         /* committed frontier per depth (Compat-X: F[0] = block 0's rows) */
    float *logits;                /* [K][V] verify rows */
    float *dlog;                  /* [V] draft logits */
    float *p, *q;                 /* [V], [K][V]: target / draft distributions */
    int *idx;                     /* [V] sampler scratch */
    float *work;                  /* [V] sampler scratch */
    float *tmp;                   /* [2][H] */
    int32_t drafts[INK_MAX_DEPTH + 1], emitted[INK_MAX_DEPTH + 2];
    int32_t target[INK_MAX_DEPTH + 2];  /* greedy: the target's choice at each verify row */
    int blocks[INK_MAX_DEPTH + 1];
    float margins[INK_MAX_DEPTH + 1];
    /* Compat-X */
    int32_t seed_tok;
    float seed_margin, *seed_q;
    ink_snapshot *snap;
    /* allocation sizes and continuation state (kept in the session between calls) */
    int a_ctx, a_V, a_VS, a_H, a_D, a_K;
    const ink_drafter *last_drafter;
    int last_mode, last_mmax, valid, n_last;
    /* the run in progress */
    int32_t *out;
    ink_gen_stats own_stats;      /* where a run without caller stats keeps them */
    int n_out, stop, rc, phase;   /* phase 0: not started, 1: buffers ready, 2: decoding */
    int n, n_ctx, compat, track;  /* n: position of the newest token x_n */
    double t1;                    /* end of the prefill */
    /* the round in progress */
    int k_eff, M, a, e, bonus_emitted;
    int32_t bonus, vin[INK_MAX_DEPTH + 2];
    /* the adaptive draft length (gen/autok.h): kept across runs while drafter, mode and range match */
    int autok, k_next, seed_stale;
    double carry_s, ta, tb; /* ta, tb: the round in progress began / finished drafting */
    double follow_s;        /* auto: seconds in follow() since the last observation (left out of it) */
    int run_rounds;         /* rounds of this run so far (the first WARM are not timed) */
    int woke;                /* this round restarted a dormant depth (wake) */
    int rewoke;              /* ... one that was live before in this run (not its first start) */
    uint64_t started;        /* depths (bits) started in this run */
    /* auto: depths 0..n_live-1 keep their history; the others are dormant (not maintained) until a
     * round drafts with them, when they restart from the last WAKE rows (see wake()) */
    int n_live, rounds_run, last_used[INK_MAX_DEPTH];
    int hist_lo;                  /* first position whose target hidden row this run has (prompt cache) */
    const int32_t *pf_prompt;     /* the prompt being prefilled (borrowed), next position, length */
    int pf_t, pf_P;
    int pf_T;                     /* ink_gen_prefill_begin: rows of the chunk handed out */
    double pf_t0;
    ink_autok ak;
    const ink_drafter *ak_drafter;
    int ak_mode, ak_kmax;
};
typedef struct ink_gen gen;

#define RING 256 /* > 2 * CH + K + D: rows the pipeline and a round can need */
#define CH INK_CHUNK /* prefill and depth-advance step: one forward of the target or a depth (model.h) */
#define LAG 48   /* auto K: depths a round does not draft with catch up once they lag this many rows */
/* auto K: the first rounds of every run are not timed (their acceptance counts): after a prompt's
 * prefill they ran 1.2-3x slower than the rounds after them (bundled model: 1.1-2.4 ms, then 0.3;
 * 160 MiB twin: 6.0-6.8, then 5.2), and as the controller's first plain-step samples they made c(1)
 * look twice what plain decoding costs, so drafting seemed to pay where every width loses */
#define WARM 3
#define WAKE 64  /* auto K: rows of history a dormant depth restarts from (<= CH) */
#define LIVE 16  /* auto K: a depth not drafted with for this many rounds goes dormant */
#define CKPT_EVERY 256 /* prompt cache: prefill checkpoints at multiples of this (and at P - 1) */

static float *hrow(const gen *g, int p) { return g->hist + (size_t)(p % RING) * g->H; }
static float *orow(const gen *g, int m, int p) { return g->outr + ((size_t)m * RING + p % RING) * g->H; }

static float margin_of(const float *l, int n)
{
    int b = ink_argmax(l, n);
    float second = -FLT_MAX;
    for (int i = 0; i < n; i++)
        if (i != b && l[i] > second) second = l[i];
    return l[b] - second;
}

/* The sampler's distribution for `logits` after the history x_0 .. x_{n_hist-1} (g->seq, which holds
 * the round's drafts after x_n). */
static void dist(gen *g, const float *logits, int n_hist, float *p)
{
    ink_sample_scratch scr = {g->idx, g->work};
    INK_PROF(INK_PROF_SAMPLE, 0, ink_sample_dist(&g->o->sampling, logits, g->V, g->seq, n_hist, p, &scr));
}

/* Greedy choice (argmax of the penalised logits). */
static int32_t greedy_pick_run(gen *g, const float *logits, int n_hist)
{
    const ink_sampling *c = &g->o->sampling;
    if (!ink_sample_penalties_on(c) || n_hist == 0) return ink_argmax(logits, g->V); /* no copy when off */
    memcpy(g->work, logits, (size_t)g->V * sizeof(float));
    ink_sample_penalize(c, g->work, g->V, g->seq, n_hist, g->idx);
    return ink_argmax(g->work, g->V);
}

static int32_t greedy_pick(gen *g, const float *logits, int n_hist)
{
    int32_t t;
    INK_PROF(INK_PROF_SAMPLE, 0, t = greedy_pick_run(g, logits, n_hist));
    return t;
}

/* Draws a token with the request's sampler; q (if not NULL) gets the distribution it came from. */
static int32_t pick(gen *g, const float *logits, float *q, int n_hist)
{
    if (g->greedy) {
        int32_t t = greedy_pick(g, logits, n_hist);
        if (q) memset(q, 0, (size_t)g->V * sizeof *q), q[t] = 1.0f;
        return t;
    }
    float *d = q ? q : g->p;
    dist(g, logits, n_hist, d);
    return ink_sample_draw(d, g->V, &g->rng);
}

/* ---- committed rows: the chunked pipeline ---------------------------------------------- */

/* Advances depth m's committed frontier towards row `target` by at most CH rows (one forward).
 * Row p takes the hidden of depth m-1 at p (the target's for m = 0) and token x_{p+m+1}. */
static int commit_step(gen *g, int m, int target)
{
    int s0 = g->F[m], e = target < s0 + CH - 1 ? target : s0 + CH - 1;
    if (m > 0 && e > g->F[m - 1] - 1) e = g->F[m - 1] - 1; /* depth m-1 must have produced row e */
    if (e < s0) return 0;
    int T = e - s0 + 1, H = g->H;
    for (int p = s0; p <= e; p++)
        memcpy(g->rows + (size_t)(p - s0) * H, m ? orow(g, m - 1, p) : hrow(g, p), (size_t)H * sizeof(float));
    ink_depth_forward(g->d, m, g->rows, g->seq + s0 + m + 1, T, s0, g->mode != INK_MTP_COMPAT, g->rows);
    for (int p = s0; p <= e; p++) memcpy(orow(g, m, p), g->rows + (size_t)(p - s0) * H, (size_t)H * sizeof(float));
    g->F[m] = e + 1;
    return 1;
}

/* Brings every maintained depth's committed rows up to date: rows p <= last_row whose token
 * x_{p+m+1} is known (p + m + 1 <= last_tok). Depths advance in turn, CH rows at a time, so no
 * ring holds more than about 2 CH rows a consumer still needs. */
static void catch_up(gen *g, int last_row, int last_tok)
{
    int depths = g->n_live;
    for (int progress = 1; progress;) {
        progress = 0;
        for (int m = 0; m < depths; m++) {
            int t = last_tok - m - 1 < last_row ? last_tok - m - 1 : last_row;
            progress |= commit_step(g, m, t);
        }
    }
}

/* Rows the deepest maintained depth lags behind row n-1 (mode P: depth Mmax-1; Compat-X: block 0). */
static int lag(const gen *g, int n)
{
    int m = g->n_live - 1;
    return m < 0 ? 0 : n - 1 - m - g->F[m];
}

/* Auto K: depth m (dormant, and every depth before it live or woken in this round) restarts with
 * the rows from p0 = max(0, n - WAKE) on: an empty cache whose first row sits at p0, then the
 * ordinary draft path computes its rows p0 .. n-1 in one forward. Its drafts then come from a
 * shorter history than a depth that was kept all along: they may differ, which changes what is
 * proposed, never what is emitted (the target decides; sampling stays lossless). */
static void wake(gen *g, int m, int n)
{
    int p0 = n - WAKE > g->hist_lo ? n - WAKE : g->hist_lo;
    ink_depth_start_at(g->d, m, p0);
    g->F[m] = p0;
    g->n_live = m + 1;
    g->woke = 1;
    if (g->started & (uint64_t)1 << m) g->rewoke = 1;
    g->started |= (uint64_t)1 << m;
}

/* Auto K, after a round: depths not drafted with for LIVE rounds stop being maintained. */
static void retire(gen *g)
{
    while (g->n_live > 0 && g->rounds_run - g->last_used[g->n_live - 1] > LIVE) g->n_live--;
}

/* Depths a round does not draft with: with a fixed K they follow every round; under auto K they
 * catch up in batches of about LAG rows (one pass over a depth's weights for many rows, which is
 * what makes a plain step under auto nearly as cheap as plain decoding). Rows are computed the same
 * either way, so the drafts do not depend on when a depth caught up. */
/* Auto K: a catch-up whose time the controller does not see (g->follow_s is left out of the
 * round's cost): the cost of keeping depths live, not of the round's width. */
static void catch_up_untimed(gen *g, int n)
{
    double t0 = ink_now_s();
    catch_up(g, n - 1, n);
    g->follow_s += ink_now_s() - t0;
}

static void follow(gen *g, int n)
{
    if (!g->autok) catch_up(g, n - 1, n);
    /* a batch of ~LAG rows lands in whichever round crosses the lag (charged to it, it made the
     * round's width look ~1 step dearer, at random; widths tried rarely suffered most) */
    else if (lag(g, n) >= LAG) catch_up_untimed(g, n);
}

/* ---- mode P draft phase (mtp.md 7.3) ---------------------------------------------------- */

/* Depth m's rows F[m] .. n-1 (at most CH) in one forward: the committed ones (token x_{p+m+1} known,
 * p <= n-1-m) first, then the provisional ones (token a draft of this round). The conv states keep
 * only the committed rows (capture + commit; with none, the saved state comes back unchanged);
 * provisional KV rows are overwritten when they are committed. Rows
 * do not depend on later rows of the same forward, so this equals a catch-up followed by a separate
 * provisional forward, bit for bit, at one pass over the depth's weights instead of two. */
static void depth_round_in(gen *g, int m, int n, ink_depth_seg *sg)
{
    int H = g->H, first = g->F[m], T = n - first;
    int nc = n - m - first < 0 ? 0 : n - m - first; /* committed rows */
    for (int i = 0; i < T; i++) {
        int p = first + i, t = p + m + 1;
        g->rtok[i] = t <= n ? g->seq[t] : g->drafts[t - n - 1];
        memcpy(g->rows + (size_t)i * H, m ? orow(g, m - 1, p) : hrow(g, p), (size_t)H * sizeof(float));
    }
    if (nc < T) ink_depth_save(g->d, m);
    g->r_first = first, g->r_T = T, g->r_nc = nc;
    *sg = (ink_depth_seg){g->d, g->rows, g->rtok, T, first, g->rows};
}

static void depth_round_out(gen *g, int m)
{
    int H = g->H, first = g->r_first, T = g->r_T, nc = g->r_nc;
    if (nc < T) ink_depth_commit(g->d, m, nc);
    for (int i = 0; i < T; i++) memcpy(orow(g, m, first + i), g->rows + (size_t)i * H, (size_t)H * sizeof(float));
    g->F[m] = first + nc;
}

/* The draft phase of G[0..k) (mode P, M = G[i]->M drafts each, at their own n), their drafters
 * sharing weights (ink_drafter_can_batch): per depth, one forward over every generator's rows
 * (depth_round_in/out), then one unembedding pass over their rows n-1. A generator's rows, drafts
 * and margins are bitwise what it computes alone (k = 1): rows are computed independently of the
 * batch, and each generator picks from its own logits with its own sampler state, depth by depth. */
static void draft_per_depth_many(gen *const *G, int k)
{
    int Mx = 0;
    for (int i = 0; i < k; i++) {
        gen *g = G[i];
        int n = g->n, M = g->M, bulk = 0;
        for (int m = g->n_live; m < M; m++) wake(g, m, n); /* auto: dormant depths restart */
        for (int m = 0; m < M; m++) g->last_used[m] = g->rounds_run;
        for (int m = 0; m < M; m++) bulk |= n - g->F[m] > CH;
        /* after the prefill: the chunked pipeline first, which leaves only provisional rows (nc = 0) */
        if (bulk) catch_up(g, n - 1, n);
        else if (g->autok) {
            /* auto: a depth this round drafts with may lag by up to LAG rows (it was followed in
             * batches while narrower rounds ran); those rows go through a timed catch-up that the
             * controller does not see, as follow()'s batches, so an explored wider width is timed
             * at what it costs round after round (its first rounds cost up to a step more). Not the
             * lag a drafting round leaves: after e emitted tokens depth m is e + m rows behind, up to
             * kmax + m (a threshold of 6 rows sent every fully accepted round of width 5 through a
             * catch-up, an extra pass over each depth's weights: 1.2-1.7 ms of an 11-12 ms round on
             * a 160 MiB twin, and width 5 lost to 4 by that much under auto K only) */
            int lagged = 0;
            for (int m = 0; m < M; m++) lagged |= n - g->F[m] > g->ak.kmax + m;
            if (lagged) catch_up_untimed(g, n);
        }
        if (M > Mx) Mx = M;
    }
    for (int m = 0; m < Mx; m++) {
        ink_depth_seg sg[INK_STEP_MANY_MAX];
        gen *who[INK_STEP_MANY_MAX];
        const float *u[INK_STEP_MANY_MAX];
        float *lg[INK_STEP_MANY_MAX];
        int ns = 0, nl = 0;
        for (int i = 0; i < k; i++)
            if (G[i]->M > m && G[i]->n > G[i]->F[m]) depth_round_in(G[i], m, G[i]->n, &sg[ns]), who[ns++] = G[i];
        if (ns) ink_depth_forward_many(m, sg, ns, 1);
        for (int j = 0; j < ns; j++) depth_round_out(who[j], m);
        for (int i = 0; i < k; i++)
            if (G[i]->M > m) u[nl] = orow(G[i], m, G[i]->n - 1), lg[nl] = G[i]->dlog, who[nl++] = G[i];
        for (int j0 = 0; j0 < nl; j0 += INK_DRAFT_ROWS)
            ink_draft_logits_many(who[j0]->d, u + j0, nl - j0 < INK_DRAFT_ROWS ? nl - j0 : INK_DRAFT_ROWS, lg + j0);
        for (int j = 0; j < nl; j++) {
            gen *g = who[j];
            int n = g->n;
            g->margins[m] = margin_of(g->dlog, g->V);
            g->drafts[m] = pick(g, g->dlog, g->q + (size_t)m * g->V, n + 1 + m);
            g->seq[n + 1 + m] = g->drafts[m];
            g->blocks[m] = m;
        }
    }
    for (int i = 0; i < k; i++)
        if (G[i]->M < G[i]->n_live) follow(G[i], G[i]->n); /* live depths this round does not draft with */
}

/* ---- Compat-X (mtp.md 7.9) -------------------------------------------------------------- */

/* Block 0 appends its committed rows up to n-1 (prenorm hidden h_p, raw embedding of x_{p+1}); its
 * row n-1 gives the seed d_1 of the next round. */
static void compat_update(gen *g, int n)
{
    catch_up(g, n - 1, n);
    ink_draft_logits(g->d, orow(g, 0, n - 1), 1, g->dlog, g->tmp);
    g->seed_margin = margin_of(g->dlog, g->V);
    g->seed_tok = pick(g, g->dlog, g->seed_q, n + 1);
}

static void draft_compat(gen *g, int n, int M)
{
    int H = g->H, rows_b[INK_MAX_DEPTH] = {0};
    ink_depth_save(g->d, 0);
    for (int b = 1; b < g->D; b++) ink_depth_clear(g->d, b);
    g->drafts[0] = g->seed_tok, g->blocks[0] = 0, g->margins[0] = g->seed_margin;
    g->seq[n + 1] = g->seed_tok;
    memcpy(g->q, g->seed_q, (size_t)g->V * sizeof(float));
    float *prev = g->rows, *outb = g->rows + H;
    memcpy(prev, orow(g, 0, n - 1), (size_t)H * sizeof(float));
    for (int r = 0, k = 1; k < M; r++, k++) {
        int b = r < g->D - 1 ? r : g->D - 1;
        int pos = b == 0 ? n + rows_b[0] : rows_b[b];
        ink_depth_forward(g->d, b, prev, &g->drafts[k - 1], 1, pos, 0, outb);
        rows_b[b]++;
        ink_draft_logits(g->d, outb, 1, g->dlog, g->tmp);
        g->margins[k] = margin_of(g->dlog, g->V);
        g->drafts[k] = pick(g, g->dlog, g->q + (size_t)k * g->V, n + 1 + k);
        g->seq[n + 1 + k] = g->drafts[k];
        g->blocks[k] = b;
        memcpy(prev, outb, (size_t)H * sizeof(float));
    }
}

/* ---- buffers and continuation ------------------------------------------------------------ */

static void free_bufs(gen *g)
{
    free(g->seq), free(g->hist), free(g->outr), free(g->rows), free(g->vh);
    free(g->logits), free(g->dlog), free(g->p), free(g->q), free(g->idx), free(g->work), free(g->tmp), free(g->seed_q);
    ink_snapshot_free(g->snap);
    g->work = NULL;
    g->seq = NULL, g->hist = g->outr = g->rows = g->vh = NULL;
    g->logits = g->dlog = g->p = g->q = g->tmp = g->seed_q = NULL;
    g->idx = NULL, g->snap = NULL;
    g->a_ctx = 0, g->valid = 0;
}

/* (Re)allocates the buffers for this run's sizes; keeps them (and the continuation) if they fit. */
static int alloc_bufs(gen *g, ink_session *s, int n_ctx, ink_err *err)
{
    int V = g->V, VS = g->VS, H = g->H, K = g->K, D = g->D;
    if (g->a_ctx == n_ctx && g->a_V == V && g->a_VS == VS && g->a_H == H && g->a_D >= D && g->a_K >= K) return INK_OK;
    free_bufs(g);
    if (K < 2) K = 2; /* room for a later run with a small K */
    size_t hb = (size_t)H * sizeof(float);
    int full = D > 0;
    g->seq = malloc((size_t)(n_ctx + 1) * sizeof *g->seq);
    g->logits = malloc((size_t)K * VS * sizeof(float));
    g->dlog = malloc((size_t)VS * sizeof(float));
    g->p = malloc((size_t)V * sizeof(float));
    g->q = malloc((size_t)(K + 1) * V * sizeof(float));
    g->idx = malloc((size_t)V * sizeof(int));
    g->work = malloc((size_t)V * sizeof(float));
    g->tmp = malloc(3 * hb);
    g->hist = malloc(full ? (size_t)RING * hb : hb);
    g->outr = malloc(full ? (size_t)D * RING * hb : hb);
    g->rows = malloc((size_t)(CH + K + 1) * hb);
    g->vh = malloc((size_t)(CH > K ? CH : K) * hb);
    g->seed_q = malloc((size_t)V * sizeof(float));
    if (!g->seq || !g->logits || !g->dlog || !g->p || !g->q || !g->idx || !g->work || !g->tmp || !g->hist || !g->outr ||
        !g->rows || !g->vh || !g->seed_q || ink_snapshot_create(&g->snap, s, err)) {
        free_bufs(g);
        return ink_err_set(err, INK_E_NOMEM, "out of memory for generation buffers");
    }
    g->a_ctx = n_ctx, g->a_V = V, g->a_VS = VS, g->a_H = H, g->a_D = D, g->a_K = K;
    return INK_OK;
}

/* Can this run continue from the state the previous run left? (prefix reuse, see inkling.h) */
static int can_continue(const gen *g, const ink_session *s, const int32_t *prompt, int P)
{
    int c = ink_session_pos(s);
    if (!g->valid || c <= 0 || c >= P || g->last_drafter != g->d ||
        (g->d && (g->last_mode != g->mode || g->last_mmax != g->Mmax)))
        return 0;
    if (memcmp(ink_session_tokens(s), prompt, (size_t)c * sizeof *prompt)) return 0;
    if (!g->d) return 1;
    /* a fixed K needs every depth it drafts with kept all along (auto may have let some go dormant) */
    if (!g->autok && g->n_live < (g->compat ? 1 : g->Mmax)) return 0;
    /* every token a drafter row consumed must still be in the new prompt: x_0 .. x_L-1 */
    int L = c + 1, depths = g->mode == INK_MTP_COMPAT ? 1 : g->Mmax;
    for (int m = 0; m < depths; m++)
        if (g->F[m] + m + 1 > L) L = g->F[m] + m + 1;
    return L <= P && L <= g->n_last + 1 && !memcmp(g->seq, prompt, (size_t)L * sizeof *prompt);
}

/* ---- small steps ------------------------------------------------------------------------- */

/* Non-finite logits (a corrupt checkpoint, an overflow) stop the run instead of feeding NaN to the
 * sampler: x * 0 is 0 for every finite x and NaN for NaN or an infinity, so one pass sums to 0 iff the
 * row is finite. Row `row` of g->logits holds the logits at position `pos`. */
static int check_row(const gen *g, int row, int pos, ink_err *err)
{
    const float *l = g->logits + (size_t)row * g->VS;
    float acc = 0;
    for (int i = 0; i < g->V; i++) acc += l[i] * 0.0f;
    if (acc == 0) return INK_OK;
    int bad = 0;
    while (bad < g->V && isfinite(l[bad])) bad++;
    return ink_err_set(err, INK_E_NUMERIC, "non-finite logits at position %d (the scores of token %d): logit[%d] = %g",
                       pos, pos + 1, bad, bad < g->V ? (double)l[bad] : 0.0);
}

static void emit(gen *g, int32_t tok)
{
    g->out[g->n_out++] = tok;
    if (g->o->on_token) g->o->on_token(g->o->ud, tok);
    int eos = g->o->eos >= 0 ? g->o->eos : ink_model_get_info(g->m)->eos;
    if ((g->o->stop_eos && tok == eos) || g->n_out >= g->o->max_tokens) g->stop = 1;
    for (int i = 0; i < g->o->n_stop_ids; i++)
        if (tok == g->o->stop_ids[i]) g->stop = 1;
}

/* Sizes of this run from the options (K, M_max, vocabularies); the stats' request fields. */
static void configure(gen *g, const ink_gen_opts *o, ink_gen_stats *st)
{
    g->m = ink_session_model(g->s), g->d = o->drafter, g->o = o, g->st = st;
    g->V = g->VS = g->m->cfg.vocab_unpadded, g->H = g->m->cfg.hidden;
    if (o->vocab_limit > 0 && o->vocab_limit < g->VS) g->V = o->vocab_limit;
    g->D = g->d ? ink_drafter_n_depth(g->d) : 0;
    g->mode = o->mtp_mode;
    g->greedy = !(o->sampling.temp > 0);
    g->rng = o->sampling.seed;
    int slack = ink_session_rollback_slack(g->s);
    g->n_ctx = ink_session_n_ctx(g->s);
    g->autok = g->d && o->block_size <= 0;
    if (!g->d) g->K = 1;
    else if (!g->autok) g->K = o->block_size;
    else {
        int def = g->mode == INK_MTP_COMPAT ? g->D + 2 : g->D + 1;
        g->K = o->block_max > 0 ? o->block_max : def;
        if (g->mode != INK_MTP_COMPAT && g->K > g->D + 1) g->K = g->D + 1; /* mode P drafts at most D */
    }
    if (g->K > slack) g->K = slack;
    if (g->K > INK_MAX_DEPTH + 1) g->K = INK_MAX_DEPTH + 1;
    if (g->K < 1) g->K = 1;
    g->Mmax = g->d ? (g->mode == INK_MTP_COMPAT ? g->K - 1 : (g->K - 1 < g->D ? g->K - 1 : g->D)) : 0;
    g->compat = g->d && g->mode == INK_MTP_COMPAT;
    g->track = g->d && g->Mmax > 0; /* the drafter needs the target's hidden rows */
    st->prompt_tokens = 0, st->k_requested = g->autok ? 0 : g->K, st->n_pos = g->Mmax, st->k_min = INT32_MAX;
    st->auto_block = g->autok;
    if (g->d && (g->ak_drafter != g->d || g->ak_mode != g->mode || g->ak_kmax != g->K)) {
        ink_autok_init(&g->ak, g->K); /* what was measured with another drafter, mode or range is void */
        g->ak_drafter = g->d, g->ak_mode = g->mode, g->ak_kmax = g->K;
    }
    if (g->d) ink_autok_text(&g->ak, 0, 0); /* a loop of the last run's text is not this run's */
    g->seed_stale = 0, g->carry_s = 0, g->woke = 0, g->follow_s = 0, g->run_rounds = 0;
    g->rewoke = 0, g->started = 0;
}

/* The smallest period L <= INK_AUTOK_LOOP with which the last max(2 L, 32) tokens of seq[0..n]
 * repeat (text in a greedy loop), 0 if none: what the draft-length controller follows (autok.h). */
static int text_period(const int32_t *seq, int n)
{
    for (int L = 1; L <= INK_AUTOK_LOOP; L++) {
        int w = 2 * L > 32 ? 2 * L : 32, i = 0;
        if (n - w - L + 1 < 0) break;
        while (i < w && seq[n - i] == seq[n - i - L]) i++;
        if (i == w) return L;
    }
    return 0;
}

/* The width of the next round (its newest token at position `newest`): fixed, the test hook's, or
 * the controller's. */
static int next_width(gen *g, int newest)
{
    if (!g->autok) return g->K;
    int L = text_period(g->seq, newest);
    ink_autok_text(&g->ak, L, L ? newest % L : 0);
    if (g->o->choose_block) {
        int k = g->o->choose_block(g->o->ud, g->st->rounds + g->st->k_hist[1], g->K);
        return k < 1 ? 1 : k > g->K ? g->K : k;
    }
    return ink_autok_choose(&g->ak);
}

/* Where a target forward puts the hidden rows the drafter reads (postnorm P, prenorm Compat-X). */
static void want_hidden(const gen *g, ink_eval_out *eo)
{
    if (!g->track) return;
    if (g->compat) eo->hidden_prenorm = g->vh;
    else eo->hidden_postnorm = g->vh;
}

/* The prompt (g->pf_P tokens) from c0 up to end: CH-row chunks when the drafter follows (its
 * committed rows advance with the prompt), one forward otherwise. When end is the prompt's end, the
 * last row's logits are left in g->logits. */
static int prefill(gen *g, const int32_t *prompt, int c0, int end, ink_err *err)
{
    int rc, P = g->pf_P, ckpt = g->o->reuse_prefix; /* prompt cache: checkpoints at CKPT_EVERY multiples, P - 1 */
    for (int t = c0; t < end;) {
        int T = g->track ? (end - t < CH ? end - t : CH) : end - t;
        if (ckpt) {
            int next = (t / CKPT_EVERY + 1) * CKPT_EVERY;
            if (next > P - 1) next = P - 1;
            if (next > t && t + T > next) T = next - t;
        }
        ink_eval_out eo = {.logits = g->logits};
        want_hidden(g, &eo);
        if ((rc = ink_session_eval(g->s, prompt + t, T, &eo, err))) return rc;
        if (g->track) {
            for (int i = 0; i < T; i++) memcpy(hrow(g, t + i), g->vh + (size_t)i * g->H, (size_t)g->H * sizeof(float));
            catch_up(g, t + T - 1, P - 1); /* rows whose tokens are prompt tokens */
        }
        t += T;
        if (ckpt && (t == P - 1 || t % CKPT_EVERY == 0)) ink_session_checkpoint(g->s);
    }
    return INK_OK;
}

/* Prompt cache (auto K or no drafter): the longest common prefix of the prompt with what the session
 * consumed, from its latest checkpoint at or below it (at most P - 1: the last prompt token is fed
 * for its logits). The target's state is restored exactly; drafter depths go dormant and restart
 * when drafted with (their history is not checkpointed). Returns the position resumed from (0: the
 * session was reset). */
static int resume_prefix(gen *g, const int32_t *prompt, int P)
{
    const int32_t *toks = ink_session_tokens(g->s);
    int pos = ink_session_pos(g->s), L = 0, lim = pos < P ? pos : P;
    while (L < lim && toks[L] == prompt[L]) L++;
    if (L > P - 1) L = P - 1;
    return ink_session_rewind(g->s, L);
}

/* ---- one round ----------------------------------------------------------------------------- */

/* Widths of this round: k_eff within the budget and the context, M drafts. 0: nothing fits. */
static int plan(gen *g)
{
    int budget = g->o->max_tokens - g->n_out;
    int k_eff = g->k_next < budget + 1 ? g->k_next : budget + 1;
    if (g->autok && g->o->block_cap && *g->o->block_cap >= 1 && k_eff > *g->o->block_cap) k_eff = *g->o->block_cap;
    if (k_eff > g->n_ctx - g->n) k_eff = g->n_ctx - g->n;
    if (k_eff < 1) return 0; /* context full */
    g->k_eff = k_eff;
    g->M = g->d ? (g->compat ? k_eff - 1 : (k_eff - 1 < g->D ? k_eff - 1 : g->D)) : 0;
    return 1;
}

static void draft(gen *g)
{
    if (g->M > 0) {
        if (g->compat && !g->n_live) { /* auto: block 0 restarts, then the seed */
            wake(g, 0, g->n);
            compat_update(g, g->n);
            g->seed_stale = 0;
        }
        if (g->compat) g->last_used[0] = g->rounds_run;
        if (g->compat && g->seed_stale) compat_update(g, g->n), g->seed_stale = 0;
        if (g->compat) draft_compat(g, g->n, g->M);
        else draft_per_depth_many(&g, 1);
    } else if (g->d && !g->compat && g->n_live > 0) {
        follow(g, g->n); /* keep the frontiers moving while drafting is clamped off */
    }
}

/* [x_n, d_1..d_M] in one target forward from a snapshot. */
static void verify_prepare(gen *g, ink_gen_verify *v)
{
    int M = g->M;
    g->vin[0] = g->seq[g->n];
    for (int j = 0; j < M; j++) g->vin[j + 1] = g->drafts[j];
    if (M > 0) ink_session_save(g->s, g->snap); /* a plain step keeps its one row: nothing to roll back */
    v->session = g->s, v->tokens = g->vin, v->n_tokens = M + 1;
    v->out = (ink_eval_out){.logits = g->logits, .all_logits = 1};
    want_hidden(g, &v->out);
}

static void verify_finish(gen *g)
{
    if (g->track)
        for (int i = 0; i <= g->M; i++) memcpy(hrow(g, g->n + i), g->vh + (size_t)i * g->H, (size_t)g->H * sizeof(float));
}

/* Sets g->a (drafts accepted) and g->bonus. Greedy: the walk over the target's choices. T > 0:
 * lossless speculative sampling, with the uniforms drawn in the order the traces pin: per row a
 * the test of d_{a+1}, then on a rejection the residual draw (the target's p if it is empty), or
 * after M acceptances the bonus draw from row M. */
static void accept(gen *g)
{
    int M = g->M, n = g->n, VS = g->VS, V = g->V;
    if (g->greedy) {
        for (int j = 0; j <= M; j++) g->target[j] = greedy_pick(g, g->logits + (size_t)j * VS, n + 1 + j);
        g->a = ink_accept_greedy(g->drafts, g->target, M);
        g->bonus = g->target[g->a];
        return;
    }
    for (int a = 0;; a++) {
        dist(g, g->logits + (size_t)a * VS, n + 1 + a, g->p);
        g->a = a;
        if (a == M) {
            g->bonus = ink_sample_draw(g->p, V, &g->rng);
            return;
        }
        const float *q = g->q + (size_t)a * V;
        if (ink_accept_draw(g->p, q, g->drafts[a], ink_rng_uniform(&g->rng))) continue;
        if (!(ink_accept_residual(g->p, q, V) > 0)) dist(g, g->logits + (size_t)a * VS, n + 1 + a, g->p);
        g->bonus = ink_sample_draw(g->p, V, &g->rng);
        return;
    }
}

/* d_1..d_a, then the bonus, cut by the budget and the stop rules; g->e tokens. */
static void emit_round(gen *g)
{
    int e = 0;
    g->bonus_emitted = 0;
    for (int j = 0; j < g->a && !g->stop; j++) emit(g, g->drafts[j]), g->emitted[e++] = g->drafts[j];
    if (!g->stop) emit(g, g->bonus), g->emitted[e++] = g->bonus, g->bonus_emitted = 1;
    g->e = e;
}

/* Keeps the target's inputs of the emitted tokens only (x_n and the first e-1 of them): commit of
 * the captured conv inputs, or restore + replay. */
static int rollback(gen *g, ink_err *err)
{
    int rc = INK_OK;
    if (g->e < g->M + 1) {
        if (g->o->capture_commit) rc = ink_session_commit(g->s, g->snap, g->e, err);
        else if (!(rc = ink_session_restore(g->s, g->snap, err))) rc = ink_session_eval(g->s, g->vin, g->e, NULL, err);
    }
    return rc;
}

/* Compat-X: block 0 back to its committed state, then its rows of the emitted tokens and the next
 * seed; also after a stop or a clamped round, so block 0 never lags. (Mode P commits its rows while
 * drafting.) */
static void drafter_update(gen *g)
{
    if (!g->compat || g->Mmax == 0) return;
    if (g->M > 0) {
        ink_depth_restore(g->d, 0);
        for (int b = 1; b < g->D; b++) ink_depth_clear(g->d, b);
    }
    int n = g->n + g->e;
    if (g->autok && (g->k_next < 2 || !g->n_live)) { /* no draft next round: the seed waits until one is wanted */
        g->seed_stale = 1;
        if (g->n_live) follow(g, n);
    } else {
        compat_update(g, n);
        g->seed_stale = 0;
    }
}

static void record(gen *g, double ta, double tb, double tc, double td)
{
    ink_gen_stats *st = g->st;
    int M = g->M, a = g->a;
    st->k_hist[g->k_eff]++;
    if (g->d && !g->autok) ink_autok_observe(&g->ak, g->k_eff, M, a, td - ta, tb - ta); /* auto: in ink_gen_step */
    if (M == 0) return;
    st->rounds++, st->drafted += M, st->accepted += a, st->round_emitted += g->e;
    if (g->k_eff < st->k_min) st->k_min = g->k_eff;
    if (g->k_eff > st->k_max) st->k_max = g->k_eff;
    if (a == 0) st->zero_accept++;
    else if (a < M) st->partial_accept++;
    else st->full_accept++;
    for (int j = 0; j < M && j < INK_MAX_DEPTH; j++) st->pos_proposed[j]++, st->pos_accepted[j] += a > j;
    st->draft_s += tb - ta, st->verify_s += tc - tb, st->rollback_s += td - tc;
    if (g->o->on_round) {
        ink_round r = {st->rounds - 1, g->n,  g->k_eff,   M,       g->drafts, g->blocks, g->margins, a,
                       g->e,           g->emitted, g->bonus, g->bonus_emitted, tb - ta, tc - tb, td - tc};
        g->o->on_round(g->o->ud, &r);
    }
}

/* The controller's estimates into the run's statistics (why auto chose what it chose). */
static void report_controller(const gen *g, ink_gen_stats *st)
{
    const ink_autok *c = &g->ak;
    st->ctl_kmax = c->kmax, st->ctl_best = ink_autok_best(c);
    st->ctl_overhead_s = ink_autok_overhead_of(c, st->ctl_best), st->ctl_text_period = c->loop_L;
    for (int K = 1; K <= c->kmax; K++) {
        double cost = ink_autok_cost(c, K);
        st->ctl_cost_s[K] = c->cost_n[K] ? cost : 0, st->ctl_cost_n[K] = c->cost_n[K];
        st->ctl_yield[K] = ink_autok_yield(c, K);
        st->ctl_expected[K] = ink_autok_tokens(c, K);
        st->ctl_rate[K] = cost > 0 ? st->ctl_expected[K] / cost : 0;
    }
    for (int j = 0; j + 1 < c->kmax && j < INK_MAX_DEPTH; j++) st->ctl_alpha[j] = c->alpha_n[j] ? c->alpha[j] : -1;
}

/* ---- the generator ------------------------------------------------------------------------- */

int ink_gen_create(ink_gen **out, ink_session *s, ink_err *err)
{
    gen *g = calloc(1, sizeof *g);
    if (!g) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    g->s = s, g->stop = 1;
    *out = g;
    return INK_OK;
}

void ink_gen_free(ink_gen *g)
{
    if (!g) return;
    free_bufs(g);
    free(g);
}

int ink_gen_done(const ink_gen *g) { return g->stop; }
int ink_gen_n_out(const ink_gen *g) { return g->n_out; }

int ink_gen_begin(ink_gen *g, const int32_t *prompt, int P, const ink_gen_opts *o, int32_t *out, int out_cap,
                  ink_gen_stats *st, ink_err *err)
{
    if (!st) st = &g->own_stats;
    memset(st, 0, sizeof *st);
    g->out = out, g->n_out = 0, g->stop = 1, g->rc = INK_OK, g->phase = 0;
    configure(g, o, st);
    st->prompt_tokens = P;
    if (P < 1) return ink_err_set(err, INK_E_INVAL, "generate needs a prompt of at least one token");
    if (o->max_tokens < 0 || o->max_tokens > out_cap)
        return ink_err_set(err, INK_E_INVAL, "max_tokens %d out of range (buffer holds %d)", o->max_tokens, out_cap);
    if (P >= g->n_ctx)
        return ink_err_set(err, INK_E_CTX_FULL, "prompt of %d tokens leaves no room in a context of %d", P, g->n_ctx);
    int rc;
    if ((rc = alloc_bufs(g, g->s, g->n_ctx, err))) return rc;
    int cont = o->reuse_prefix && can_continue(g, g->s, prompt, P);
    g->valid = 0, g->phase = 1;
    if (o->capture_commit && (rc = ink_session_set_capture(g->s, 1, err))) goto fail;
    if (g->d && (rc = ink_drafter_prepare(g->d, g->n_ctx, err))) goto fail;
    int c0 = cont ? ink_session_pos(g->s) : 0;
    if (!cont) {
        /* a fixed K drafts from full depth histories, which are not checkpointed: no prompt cache then */
        if (o->reuse_prefix && (!g->d || g->autok)) c0 = resume_prefix(g, prompt, P);
        else ink_session_reset(g->s);
        g->hist_lo = c0;
        if (g->d) ink_drafter_reset(g->d);
        memset(g->F, 0, sizeof g->F);
        /* fixed K keeps every depth it may draft with from the first row on; auto wakes them when used */
        g->n_live = g->autok || !g->track ? 0 : g->compat ? 1 : g->Mmax;
        g->rounds_run = 0;
        memset(g->last_used, 0, sizeof g->last_used);
    }
    st->reused_tokens = c0;
    g->last_drafter = g->d, g->last_mode = g->mode, g->last_mmax = g->Mmax;
    memcpy(g->seq, prompt, (size_t)P * sizeof *prompt);
    g->pf_prompt = prompt, g->pf_t = c0, g->pf_P = P;
    return INK_OK;
fail:
    if (o->capture_commit) ink_session_set_capture(g->s, 0, NULL);
    g->phase = 0;
    return rc;
}

int ink_gen_prefilling(const ink_gen *g) { return g->phase == 1; }

/* The prompt's end: the first token from its last row's logits, the first width, the Compat-X seed. */
static int prefill_finish(ink_gen *g, ink_err *err)
{
    const ink_gen_opts *o = g->o;
    int rc, P = g->pf_P;
    g->phase = 2, g->n = P, g->stop = o->max_tokens == 0;
    if (!g->stop) { /* the first token, from the prompt's last row */
        if ((rc = check_row(g, 0, P - 1, err))) return rc;
        g->seq[g->n] = pick(g, g->logits, NULL, P);
        emit(g, g->seq[g->n]);
    }
    g->k_next = next_width(g, g->n);
    if (!g->stop && g->compat && g->Mmax > 0) {
        if (g->autok && (g->k_next < 2 || !g->n_live)) g->seed_stale = 1;
        else compat_update(g, P);
    }
    return 0;
}

static int prefill_fail(ink_gen *g, int rc)
{
    if (g->o->capture_commit) ink_session_set_capture(g->s, 0, NULL);
    g->phase = 0, g->stop = 1, g->rc = rc;
    return rc;
}

int ink_gen_prefill(ink_gen *g, int max_rows, ink_err *err)
{
    if (g->phase != 1) return g->phase == 2 ? 0 : (g->rc ? g->rc : ink_err_set(err, INK_E_INVAL, "no run is prefilling"));
    const ink_gen_opts *o = g->o;
    ink_gen_stats *st = g->st;
    int rc, P = g->pf_P;
    if (o->cancel && *o->cancel) return prefill_fail(g, ink_err_set(err, INK_E_CANCELLED, "generation cancelled"));
    int end = max_rows > 0 && P - g->pf_t > max_rows ? g->pf_t + max_rows : P;
    double t0 = ink_now_s();
    if ((rc = prefill(g, g->pf_prompt, g->pf_t, end, err))) return prefill_fail(g, rc);
    g->t1 = ink_now_s();
    st->prefill_s += g->t1 - t0;
    g->pf_t = end;
    if (end < P) return 1;
    return (rc = prefill_finish(g, err)) ? prefill_fail(g, rc) : 0;
}

int ink_gen_prefill_begin(ink_gen *g, int max_rows, ink_gen_verify *v, ink_err *err)
{
    if (g->phase != 1) return g->phase == 2 ? 0 : (g->rc ? g->rc : ink_err_set(err, INK_E_INVAL, "no run is prefilling"));
    if (g->o->cancel && *g->o->cancel) return prefill_fail(g, ink_err_set(err, INK_E_CANCELLED, "generation cancelled"));
    int P = g->pf_P, t = g->pf_t, T = P - t < CH ? P - t : CH;
    if (max_rows > 0 && T > max_rows) T = max_rows;
    if (g->o->reuse_prefix) { /* the prompt cache's checkpoints fall on chunk ends, as in prefill() */
        int next = (t / CKPT_EVERY + 1) * CKPT_EVERY;
        if (next > P - 1) next = P - 1;
        if (next > t && t + T > next) T = next - t;
    }
    v->session = g->s, v->tokens = g->pf_prompt + t, v->n_tokens = T;
    v->out = (ink_eval_out){.logits = g->logits};
    want_hidden(g, &v->out);
    g->pf_T = T, g->pf_t0 = ink_now_s();
    return 1;
}

int ink_gen_prefill_end(ink_gen *g, int eval_rc, ink_err *err)
{
    int rc = eval_rc, t = g->pf_t, T = g->pf_T, P = g->pf_P;
    if (rc) return prefill_fail(g, rc);
    if (g->track) {
        for (int i = 0; i < T; i++) memcpy(hrow(g, t + i), g->vh + (size_t)i * g->H, (size_t)g->H * sizeof(float));
        catch_up(g, t + T - 1, P - 1);
    }
    g->pf_t = t + T;
    if (g->o->reuse_prefix && (g->pf_t == P - 1 || g->pf_t % CKPT_EVERY == 0)) ink_session_checkpoint(g->s);
    g->t1 = ink_now_s();
    g->st->prefill_s += g->t1 - g->pf_t0;
    if (g->pf_t < P) return 1;
    return (rc = prefill_finish(g, err)) ? prefill_fail(g, rc) : 0;
}

int ink_gen_start(ink_gen *g, const int32_t *prompt, int P, const ink_gen_opts *o, int32_t *out, int out_cap,
                  ink_gen_stats *st, ink_err *err)
{
    int rc = ink_gen_begin(g, prompt, P, o, out, out_cap, st, err);
    return rc ? rc : ink_gen_prefill(g, 0, err);
}

/* One round: plan, draft, verify, accept, emit, rollback, drafter update, statistics. Split in two
 * around the verify forward, which the caller may batch with other generators' (inkling.h). */
/* The start of a round, before drafting: 1 to go on, 0 done, or an error (the run is done). */
static int step_plan(gen *g, ink_err *err)
{
    if (g->stop) return g->rc ? g->rc : 0;
    if (g->o->cancel && *g->o->cancel) {
        int rc = ink_err_set(err, INK_E_CANCELLED, "generation cancelled");
        g->stop = 1, g->rc = rc;
        return rc;
    }
    if (!plan(g)) {
        g->stop = 1;
        return 0;
    }
    g->ta = ink_now_s();
    return 1;
}

int ink_gen_step_begin(ink_gen *g, ink_gen_verify *v, ink_err *err)
{
    int rc = step_plan(g, err);
    if (rc != 1) return rc;
    draft(g);
    g->tb = ink_now_s();
    verify_prepare(g, v);
    return 1;
}

/* Whether g's draft phase this round can run with other generators' (mode P, drafting, its
 * drafter sharing weights with lead's when lead is given). */
static int joins(const gen *g, const gen *lead)
{
    if (!g->d || g->compat || g->M <= 0) return 0;
    return !lead || g == lead || (g->d != lead->d && ink_drafter_can_batch(g->d, lead->d));
}

int ink_gen_step_end(ink_gen *g, int eval_rc, ink_err *err)
{
    int rc = eval_rc;
    if (rc) goto fail;
    verify_finish(g);
    double ta = g->ta, tb = g->tb, tc = ink_now_s();
    accept(g);
    for (int j = 0; j <= g->a; j++) /* the rows the emitted tokens come from (inputs: x_n, d_1..d_a) */
        if ((rc = check_row(g, j, g->n + j, err))) goto fail;
    emit_round(g);
    if ((rc = rollback(g, err))) goto fail;
    for (int j = 0; j < g->e; j++) g->seq[g->n + 1 + j] = g->emitted[j];
    double td = ink_now_s();
    if (g->autok) { /* the next width is chosen before the drafter update, which may skip the seed */
        /* a round that restarted dormant depths (their last 64 rows) costs more than its width does */
        double sec = g->woke || g->run_rounds < WARM ? -1 : td - ta + g->carry_s - g->follow_s;
        g->run_rounds++;
        /* catch-ups count against drafting (autok.h), restarts of dormant depths among them: a
         * depth that went dormant during plain steps and is drafted with again pays that, every
         * time the choice flips. Not a depth's first start in a run: that is paid once, however
         * the run goes on (charged, the three first starts of a 160 MiB twin's run, ~3 ms each,
         * most of a plain step, made drafting look dear and a run went plain for 500 tokens) */
        if (sec >= 0 || g->rewoke) ink_autok_overhead(&g->ak, g->follow_s);
        ink_autok_observe(&g->ak, g->k_eff, g->M, g->a, sec, tb - ta + g->carry_s - g->follow_s);
        g->woke = 0, g->rewoke = 0, g->follow_s = 0;
        g->rounds_run++;
        retire(g);
        g->k_next = next_width(g, g->n + g->e);
    }
    drafter_update(g);
    double te = ink_now_s();
    g->carry_s = te - td; /* Compat-X: the seed for the next round is part of the next round's cost */
    record(g, ta, tb, tc, te);
    g->n += g->e;
    return INK_OK;
fail:
    g->stop = 1, g->rc = rc;
    return rc;
}

/* Evaluates v[0..m) in forwards of at most `cap` rows (in order) and ends each: a prefill chunk
 * (pre[i]) with ink_gen_prefill_end, a round with ink_gen_step_end. */
static void eval_many(ink_batch *b, int cap, ink_gen *const *gens, const int *who, const int *pre,
                      const ink_gen_verify *v, int m, ink_err *errs, ink_err *scratch)
{
    for (int g0 = 0; g0 < m;) {
        ink_session *ss[INK_STEP_MANY_MAX];
        const int32_t *tp[INK_STEP_MANY_MAX];
        int T[INK_STEP_MANY_MAX], rows = 0, k = 0;
        ink_eval_out outs[INK_STEP_MANY_MAX];
        while (g0 + k < m && (k == 0 || rows + v[g0 + k].n_tokens <= cap)) {
            ss[k] = v[g0 + k].session, tp[k] = v[g0 + k].tokens, T[k] = v[g0 + k].n_tokens, outs[k] = v[g0 + k].out;
            rows += T[k++];
        }
        ink_err e = {0};
        int rc = ink_batch_eval(b, ss, tp, T, outs, k, &e);
        for (int i = 0; i < k; i++) {
            ink_err *ge = errs ? &errs[who[g0 + i]] : scratch;
            if (rc && !ge->code) *ge = e;
            if (pre[g0 + i]) ink_gen_prefill_end(gens[who[g0 + i]], rc, ge);
            else ink_gen_step_end(gens[who[g0 + i]], rc, ge);
        }
        g0 += k;
    }
}

int ink_gen_step_many(ink_batch *b, ink_gen *const *gens, int n, int prefill_rows, ink_err *errs)
{
    ink_gen_verify v[INK_STEP_MANY_MAX] = {{0}};
    int who[INK_STEP_MANY_MAX] = {0}, pre[INK_STEP_MANY_MAX] = {0}, m = 0, cap = ink_batch_max_rows(b), budget = prefill_rows;
    ink_err scratch = {0};
    if (n > INK_STEP_MANY_MAX) n = INK_STEP_MANY_MAX;
    /* one chunk of each prefilling generator (within the budget) rides with the rounds' verify rows */
    for (int i = 0; i < n; i++) {
        ink_gen *g = gens[i];
        ink_err *ge = errs ? &errs[i] : &scratch;
        if (!g) continue;
        if (ink_gen_prefilling(g)) { /* (a prefilling generator counts as done: it takes no rounds) */
            if (budget <= 0) continue;
            if (ink_gen_prefill_begin(g, budget < cap ? budget : cap, &v[m], ge) != 1) continue;
            budget -= v[m].n_tokens, pre[m] = 1, who[m++] = i;
        } else if (!ink_gen_done(g) && step_plan(g, ge) == 1) {
            pre[m] = 0, who[m++] = i;
        }
    }
    /* the rounds' draft phases: those whose drafters share weights together (one pass over each
     * depth and the unembedding for all), in groups by drafter; the others one by one */
    gen *grp[INK_STEP_MANY_MAX];
    int done_draft[INK_STEP_MANY_MAX] = {0};
    for (int j = 0; j < m; j++) {
        gen *g = gens[who[j]];
        if (pre[j] || done_draft[j]) continue;
        int k = 0;
        if (joins(g, NULL))
            for (int l = j; l < m; l++)
                if (!pre[l] && !done_draft[l] && joins(gens[who[l]], g)) grp[k++] = gens[who[l]], done_draft[l] = 1;
        if (k) draft_per_depth_many(grp, k);
        else draft(g), done_draft[j] = 1;
    }
    for (int j = 0; j < m; j++)
        if (!pre[j]) {
            gen *g = gens[who[j]];
            g->tb = ink_now_s();
            verify_prepare(g, &v[j]);
        }
    if (m) eval_many(b, cap, gens, who, pre, v, m, errs, &scratch);
    int ran = m;
    /* the rest of the prefill budget: further chunks, each its own forward */
    for (int i = 0; i < n && budget > 0; i++) {
        ink_gen *g = gens[i];
        ink_err *ge = errs ? &errs[i] : &scratch;
        while (budget > 0 && g && ink_gen_prefilling(g)) {
            int one = 1;
            if (ink_gen_prefill_begin(g, budget < cap ? budget : cap, &v[0], ge) != 1) break;
            budget -= v[0].n_tokens, who[0] = i, ran++;
            eval_many(b, cap, gens, who, &one, v, 1, errs, &scratch);
        }
    }
    return ran;
}

int ink_gen_step(ink_gen *g, ink_err *err)
{
    ink_gen_verify v;
    int rc = ink_gen_step_begin(g, &v, err);
    if (rc <= 0) return rc;
    return ink_gen_step_end(g, ink_session_eval(v.session, v.tokens, v.n_tokens, &v.out, err), err);
}

int ink_gen_finish(ink_gen *g)
{
    if (g->phase < 1) return g->rc;
    ink_gen_stats *st = g->st;
    int rc = g->rc;
    if (g->phase == 2) {
        st->decode_s = ink_now_s() - g->t1;
        st->generated_tokens = g->n_out;
        if (st->k_min == INT32_MAX) st->k_min = 0;
        if (g->d) report_controller(g, st);
        if (!rc) g->valid = 1, g->n_last = g->n;
    }
    if (g->o->capture_commit) ink_session_set_capture(g->s, 0, NULL);
    g->phase = 0, g->stop = 1;
    return rc;
}

int ink_gen_run(ink_gen *g, const int32_t *prompt, int P, const ink_gen_opts *o, int32_t *out, int out_cap,
                int *n_out, ink_gen_stats *st, ink_err *err)
{
    *n_out = 0;
    int rc = ink_gen_start(g, prompt, P, o, out, out_cap, st, err);
    if (rc) return rc;
    while (!ink_gen_done(g))
        if (ink_gen_step(g, err)) break;
    *n_out = g->n_out;
    return ink_gen_finish(g);
}

int ink_generate(ink_session *s, const int32_t *prompt, int P, const ink_gen_opts *o, int32_t *out, int out_cap,
                 int *n_out, ink_gen_stats *st, ink_err *err)
{
    *n_out = 0;
    ink_gen *g = ink_session_generator(s, err);
    if (!g) return INK_E_NOMEM;
    return ink_gen_run(g, prompt, P, o, out, out_cap, n_out, st, err);
}
