/* twin_overlap.c — expert overlap of consecutive tokens on a trained MoE model (issue 16).
 *
 * A verify of K rows reads each routed expert that any of the K tokens chose once, so its routed bytes
 * scale with U(K), the number of distinct experts over K consecutive tokens, not with K * k. This tool
 * measures U(K) per MoE layer on text the model writes itself (expected.json's prompts, each followed by
 * -n sampled tokens), next to two independence baselines:
 *   U_unif(K) = E * (1 - (1 - k/E)^K)            tokens choose k of E uniformly and independently
 *   U_pop(K)  = sum_e (1 - (1 - p_e)^K)          independent tokens, expert e chosen with the layer's
 *                                                measured frequency p_e (sum_e p_e = k)
 * Both are exact expectations under their assumption (P(e unused by K independent tokens) = (1-p_e)^K);
 * U_pop is the fair baseline (it keeps the load imbalance), U_meas < U_pop is overlap from correlation.
 * The routing is read from the engine's own forward: this tool runs embed -> ink_layer_forward per layer
 * (the same calls ink_forward_chunk makes) and copies each MoE layer's chosen ids from the scratch; it
 * checks that its final hidden state equals ink_session_eval's bitwise.
 * Then it prices a verify of K rows on Inkling-Small (inkling-text.md §1.4 / §2.2 shapes, bf16) with
 * U from independence and with the measured reuse carried over (see print_small).
 *
 * Usage: twin_overlap [-m DIR] [-n TOKENS] [--temp T] [--seed S] [--kmax K]   (DIR: models/inkling-kjv) */
#include "inkling.h"
#include "model/model.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KMAX 16
#define CHUNK 64

typedef struct seqs {
    int n;
    int32_t *ids[64];
    int len[64];
} seqs;

static int die(const char *msg, const char *detail)
{
    fprintf(stderr, "twin_overlap: %s%s%s\n", msg, detail ? ": " : "", detail ? detail : "");
    return 1;
}

/* Routed ids [len][k] of every MoE layer for one sequence, from the engine's layers. */
static int route_seq(ink_model *m, const int32_t *ids, int len, int **chosen /* [n_layer] */, float *x_out)
{
    const ink_config *c = &m->cfg;
    int L = c->n_layer, H = c->hidden, k = c->n_expert_used;
    ink_err e = {0};
    ink_scratch sc;
    const ink_layer_env env = {&m->cfg, m->pool, NULL};
    if (ink_scratch_init(&sc, &env, CHUNK, len, &e)) return die("scratch", e.msg);
    ink_layer_cache *lc = calloc((size_t)L, sizeof *lc);
    float *x = malloc((size_t)CHUNK * H * sizeof(float));
    if (!lc || !x) return die("out of memory", NULL);
    for (int l = 0; l < L; l++)
        if (ink_layer_cache_init(&lc[l], &m->cfg, &m->layers[l].cfg, ink_layer_kv_cap(&m->layers[l].cfg, len, CHUNK), &e))
            return die("cache", e.msg);
    for (int p = 0; p < len; p += CHUNK) {
        int n = len - p < CHUNK ? len - p : CHUNK;
        ink_embed(m, ids + p, n, x);
        for (int l = 0; l < L; l++) {
            ink_layer_forward(&env, &m->layers[l], &lc[l], p, x, n, &sc);
            if (m->layers[l].cfg.moe) memcpy(chosen[l] + (size_t)p * k, sc.route_ids, (size_t)n * k * sizeof(int));
        }
        if (p + n == len) memcpy(x_out, x + (size_t)(n - 1) * H, (size_t)H * sizeof(float));
    }
    for (int l = 0; l < L; l++) ink_layer_cache_free(&lc[l]);
    free(lc), free(x);
    ink_scratch_free(&sc);
    return 0;
}

/* Inkling-Small, bf16 (inkling-text.md §1.4 and the §2.2 shape table): per-token weight bytes that
 * every token reads (attention of 42 layers, dense MLPs of layers 0-1, routers and the 2 shared experts
 * of the 40 MoE layers, the 200058 used unembedding rows) and one routed expert of one layer. */
static void print_small(const double *ratio_reuse, int kmax)
{
    const double H = 4096, I = 2048, Id = 16384, E = 256, k = 6, S = 2, L = 42, Lm = 40, Vu = 200058, B = 2;
    double attn = H * 4096 + 2 * 1024 * H + 512 * H + 4096 * H; /* wq, wk + wv, wr, wo */
    double expert = 3 * H * I;
    double shared = B * (L * attn + 2 * (3 * H * Id) + Lm * ((E + S) * H + S * expert) + Vu * H);
    double routed1 = B * expert; /* one expert of one layer */
    double step = shared + Lm * k * routed1;
    printf("\nInkling-Small (276B-A12B; bf16; H 4096, 42 layers: 2 dense I_d 16384 + 40 MoE, E 256, k 6, S 2, I 2048):\n");
    printf("  per token: shared %.2f GB (attention %.2f, dense MLPs %.2f, routers + shared experts %.2f, unembed %.2f),"
           " routed %.2f GB (%.0f%%); one step %.2f GB\n",
           shared / 1e9, B * L * attn / 1e9, B * 2 * 3 * H * Id / 1e9, B * Lm * ((E + S) * H + S * expert) / 1e9,
           B * Vu * H / 1e9, Lm * k * routed1 / 1e9, 100 * Lm * k * routed1 / step, step / 1e9);
    printf("  verify of K rows, bytes / one step: U_unif from independence (E 256, k 6); U_corr = U_unif minus the\n"
           "  measured reuse fraction rho(K) of the new experts independence predicts (rho from the bundled model):\n");
    printf("  %-3s %-9s %-9s %-9s %-12s %-12s\n", "K", "U_unif", "U_corr", "rho", "bytes_unif", "bytes_corr");
    for (int K = 1; K <= kmax; K++) {
        double uu = E * (1 - pow(1 - k / E, K));
        double uc = uu - ratio_reuse[K] * (uu - k);
        printf("  %-3d %-9.2f %-9.2f %-9.3f %-12.2f %-12.2f\n", K, uu, uc, ratio_reuse[K],
               (shared + Lm * uu * routed1) / step, (shared + Lm * uc * routed1) / step);
    }
}

int main(int argc, char **argv)
{
    const char *dir = "models/inkling-kjv";
    int n_gen = 512, kmax = 8;
    long seed = 1;
    double temp = 0.8;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-m") && v) dir = v, i++;
        else if (!strcmp(o, "-n") && v) n_gen = atoi(v), i++;
        else if (!strcmp(o, "--temp") && v) temp = atof(v), i++;
        else if (!strcmp(o, "--seed") && v) seed = atol(v), i++;
        else if (!strcmp(o, "--kmax") && v) kmax = atoi(v), i++;
        else {
            fprintf(stderr, "usage: twin_overlap [-m DIR] [-n TOKENS] [--temp T] [--seed S] [--kmax K]\n");
            return 2;
        }
    }
    if (n_gen < 1 || n_gen > 3000 || kmax < 1 || kmax >= KMAX || !(temp >= 0))
        return die("-n must be 1..3000, --kmax 1..15, --temp >= 0", NULL);
    ink_model *m = NULL;
    ink_err e = {0};
    ink_model_opts mo = {.n_threads = 0};
    if (ink_model_open(&m, dir, &mo, &e)) return die(dir, e.msg);
    const ink_config *c = &m->cfg;
    int L = c->n_layer, E = c->n_expert, k = c->n_expert_used, H = c->hidden;
    if (E < 2 || k < 1) return die(dir, "no MoE layers");
    char path[1024];
    snprintf(path, sizeof path, "%s/expected.json", dir);
    json_error_t je;
    json_t *ex = json_load_file(path, 0, &je), *cases = json_object_get(ex, "cases");
    if (!ex || !json_is_array(cases) || !json_array_size(cases)) return die(path, "no cases[] with prompt_ids");
    seqs S = {0};
    ink_session *s = NULL;
    if (ink_session_create(&s, m, 4096, &e)) return die("session", e.msg);
    for (size_t ci = 0; ci < json_array_size(cases) && S.n < 64; ci++) {
        json_t *p = json_object_get(json_array_get(cases, ci), "prompt_ids");
        int P = (int)json_array_size(p);
        int32_t *ids = malloc((size_t)(P + n_gen) * sizeof(int32_t));
        if (!ids) return die("out of memory", NULL);
        for (int t = 0; t < P; t++) ids[t] = (int32_t)json_integer_value(json_array_get(p, t));
        ink_gen_opts o = {0};
        o.max_tokens = n_gen, o.eos = -1;
        o.sampling = (ink_sampling){.temp = (float)temp, .top_p = 0.95f, .top_k = 40, .seed = (uint64_t)(seed + (long)ci)};
        int n = 0;
        ink_gen_stats st;
        ink_session_reset(s);
        if (ink_generate(s, ids, P, &o, ids + P, n_gen, &n, &st, &e)) return die("generate", e.msg);
        S.ids[S.n] = ids, S.len[S.n++] = P + n;
    }
    /* routing of every sequence; the final hidden checked against the session's */
    int **chosen = calloc((size_t)L, sizeof *chosen);
    long long *cnt = calloc((size_t)L * E, sizeof *cnt);
    double (*u_meas)[KMAX] = calloc((size_t)L, sizeof *u_meas);
    long long (*n_win)[KMAX] = calloc((size_t)L, sizeof *n_win);
    float *xa = malloc((size_t)H * sizeof(float)), *xb = malloc((size_t)H * sizeof(float));
    if (!chosen || !cnt || !u_meas || !n_win || !xa || !xb) return die("out of memory", NULL);
    long long n_tok = 0;
    for (int q = 0; q < S.n; q++) {
        int len = S.len[q];
        for (int l = 0; l < L; l++) {
            free(chosen[l]);
            chosen[l] = m->layers[l].cfg.moe ? malloc((size_t)len * k * sizeof(int)) : NULL;
            if (m->layers[l].cfg.moe && !chosen[l]) return die("out of memory", NULL);
        }
        if (route_seq(m, S.ids[q], len, chosen, xa)) return 1;
        ink_session_reset(s);
        float *hid = malloc((size_t)len * H * sizeof(float));
        ink_eval_out out = {.hidden_prenorm = hid};
        if (!hid || ink_session_eval(s, S.ids[q], len, &out, &e)) return die("eval", e.msg);
        memcpy(xb, hid + (size_t)(len - 1) * H, (size_t)H * sizeof(float));
        free(hid);
        if (memcmp(xa, xb, (size_t)H * sizeof(float))) return die("the tool's forward differs from ink_session_eval", NULL);
        n_tok += len;
        for (int l = 0; l < L; l++) {
            if (!chosen[l]) continue;
            for (int t = 0; t < len; t++)
                for (int j = 0; j < k; j++) cnt[(size_t)l * E + chosen[l][t * k + j]]++;
            for (int K = 1; K <= kmax; K++)
                for (int t = 0; t + K <= len; t++) {
                    unsigned char seen[1024] = {0};
                    int u = 0;
                    for (int r = t; r < t + K; r++)
                        for (int j = 0; j < k; j++) {
                            int ex_id = chosen[l][r * k + j];
                            if (ex_id >= 0 && ex_id < 1024 && !seen[ex_id]) seen[ex_id] = 1, u++;
                        }
                    u_meas[l][K] += u, n_win[l][K]++;
                }
        }
    }
    printf("expert overlap: %s, %d sequences (expected.json prompts + %d tokens sampled at T %.2f, top-k 40, top-p 0.95,"
           " seed %ld+i), %lld tokens; E %d, k %d; the tool's forward equals ink_session_eval bitwise\n",
           dir, S.n, n_gen, temp, seed, n_tok, E, k);
    double reuse_sum[KMAX] = {0};
    int n_moe = 0;
    double mean_meas[KMAX] = {0}, mean_pop[KMAX] = {0};
    for (int l = 0; l < L; l++) {
        if (!m->layers[l].cfg.moe) continue;
        n_moe++;
        long long tot = 0;
        for (int x = 0; x < E; x++) tot += cnt[(size_t)l * E + x];
        double pmax = 0, pmin = 1;
        for (int x = 0; x < E; x++) {
            double p = (double)cnt[(size_t)l * E + x] / (tot / k);
            pmax = p > pmax ? p : pmax, pmin = p < pmin ? p : pmin;
        }
        printf("\nlayer %d (MoE): expert frequency p_e in [%.3f, %.3f] (uniform %.3f)\n", l, pmin, pmax, (double)k / E);
        printf("  %-3s %-8s %-8s %-8s %-8s %-8s\n", "K", "U_meas", "U_pop", "U_unif", "meas/pop", "rho");
        for (int K = 1; K <= kmax; K++) {
            double um = u_meas[l][K] / (double)n_win[l][K], up = 0, uu = E * (1 - pow(1 - (double)k / E, K));
            for (int x = 0; x < E; x++) up += 1 - pow(1 - (double)cnt[(size_t)l * E + x] / (tot / k), K);
            double rho = up > k + 1e-9 ? (up - um) / (up - k) : 0;
            printf("  %-3d %-8.3f %-8.3f %-8.3f %-8.3f %-8.3f\n", K, um, up, uu, um / up, rho);
            reuse_sum[K] += rho, mean_meas[K] += um, mean_pop[K] += up;
        }
    }
    printf("\nmean over the %d MoE layers:\n  %-3s %-8s %-8s %-8s %-8s\n", n_moe, "K", "U_meas", "U_pop", "U_unif", "rho");
    double rho[KMAX] = {0};
    for (int K = 1; K <= kmax; K++) {
        rho[K] = reuse_sum[K] / n_moe;
        printf("  %-3d %-8.3f %-8.3f %-8.3f %-8.3f\n", K, mean_meas[K] / n_moe, mean_pop[K] / n_moe,
               E * (1 - pow(1 - (double)k / E, K)), rho[K]);
    }
    printf("  rho(K) = (U_pop - U_meas) / (U_pop - k): the fraction of the extra experts independence predicts that"
           " consecutive tokens share instead\n");
    print_small(rho, kmax);
    for (int l = 0; l < L; l++) free(chosen[l]);
    for (int q = 0; q < S.n; q++) free(S.ids[q]);
    free(chosen), free(cnt), free(u_meas), free(n_win), free(xa), free(xb);
    json_decref(ex);
    ink_session_free(s);
    ink_model_free(m);
    return 0;
}
