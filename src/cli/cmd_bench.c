/* cmd_bench.c — `inkling bench`: machine ceilings, kernel roofline fractions, the verify-cost curve
 * and model throughput, measured in one run (docs/benchmarks.md documents the output and JSON keys).
 *   inkling bench [--threads N] [--json] [--quick] [--sets all|best|NAME,...] [-m DIR]...
 * The kernel table and the models are measured with every available SIMD set (default; `best`: the
 * active one only), so the sets compare in one run.
 * Every figure is a median over repetitions; ratios (fraction of roofline, c(K)) are what to compare
 * across runs, absolute numbers drift with the neighbours of a shared machine. */
#include "base/clock.h"
#include "cli/args.h"
#include "cli/cli.h"

#include "inkling.h"
#include "kernels/kernels.h"
#include "base/dtype.h"
#include "model/model.h"

#include <dlfcn.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int dcmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, dcmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((double)(rs >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* ---- kernel benchmark matrices ------------------------------------------------------------ */

typedef struct kind {
    const char *name;
    int dtype, bits, group, int8; /* int8: 1 int8 activations, 2 bf16 activations (BF16 weights) */
} kind;

static const kind kinds[] = {
    {"f32", INK_DT_F32, 0, 0, 0},          {"bf16", INK_DT_BF16, 0, 0, 0},       {"f16", INK_DT_F16, 0, 0, 0},
    {"q8g64", INK_QT_AFFINE, 8, 64, 0},    {"q4g64", INK_QT_AFFINE, 4, 64, 0},   {"q3g64", INK_QT_AFFINE, 3, 64, 0},
    {"nvfp4", INK_QT_NVFP4, 4, 16, 0},     {"q8g64-i8", INK_QT_AFFINE, 8, 64, 1}, {"q4g64-i8", INK_QT_AFFINE, 4, 64, 1},
    {"q3g64-i8", INK_QT_AFFINE, 3, 64, 1}, {"nvfp4-i8", INK_QT_NVFP4, 4, 16, 1}, {"bf16-bx", INK_DT_BF16, 0, 0, 2},
};

#define NK 4096
#define SET_BYTES (256u << 20)

typedef struct mset {
    ink_mat m[96];
    int n;
    void *data, *sc, *bi;
    size_t bytes; /* weight bytes streamed per pass */
} mset;

static int mset_make(mset *s, const kind *k, size_t budget)
{
    memset(s, 0, sizeof *s);
    ink_mat proto = {.dtype = k->dtype, .rows = NK, .cols = NK, .bits = k->bits, .group = k->group,
                     .sdtype = k->dtype == INK_QT_NVFP4 ? INK_DT_F8_E4M3 : INK_DT_BF16, .gscale = 0.01f,
                     .int8 = k->int8 == 1, .bf16x = k->int8 == 2};
    size_t rowb = k->dtype == INK_DT_F32 ? NK * 4 : k->dtype < INK_QT_AFFINE ? NK * 2 : (size_t)NK * k->bits / 8;
    size_t G = k->group ? NK / (size_t)k->group : 0;
    size_t per = rowb * NK, sper = G * NK;
    size_t mb = ink_mat_bytes(&(ink_mat){.dtype = k->dtype, .rows = NK, .cols = NK, .bits = k->bits, .group = k->group,
                                         .sdtype = proto.sdtype});
    s->n = (int)((budget + mb - 1) / mb);
    if (s->n > 96) s->n = 96;
    s->data = aligned_alloc(4096, per * (size_t)s->n);
    s->sc = G ? malloc(sper * 2 * (size_t)s->n) : NULL;
    s->bi = G ? malloc(sper * 2 * (size_t)s->n) : NULL;
    if (!s->data || (G && (!s->sc || !s->bi))) return -1;
    if (k->dtype == INK_DT_F32)
        for (size_t i = 0; i < per * (size_t)s->n / 4; i++) ((float *)s->data)[i] = 0.01f * frand();
    else if (k->dtype == INK_DT_BF16 || k->dtype == INK_DT_F16)
        for (size_t i = 0; i < per * (size_t)s->n / 2; i++)
            ((uint16_t *)s->data)[i] = k->dtype == INK_DT_BF16 ? ink_f32_to_bf16(0.01f * frand()) : ink_f32_to_f16(0.01f * frand());
    else
        for (size_t i = 0; i < per * (size_t)s->n / 8; i++) ((uint64_t *)s->data)[i] = (rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17);
    for (size_t i = 0; G && i < sper * (size_t)s->n; i++) {
        if (k->dtype == INK_QT_NVFP4) ((uint8_t *)s->sc)[i] = (uint8_t)(0x30 + i % 8);
        else ((uint16_t *)s->sc)[i] = ink_f32_to_bf16(0.001f), ((uint16_t *)s->bi)[i] = ink_f32_to_bf16(-0.008f);
    }
    for (int i = 0; i < s->n; i++) {
        ink_mat m = proto;
        m.stride = k->dtype < INK_QT_AFFINE ? NK : rowb;
        m.data = (const uint8_t *)s->data + per * (size_t)i;
        m.sstride = G;
        if (G) {
            size_t es = k->dtype == INK_QT_NVFP4 ? 1 : 2;
            m.scales = (const uint8_t *)s->sc + sper * es * (size_t)i;
            m.biases = k->dtype == INK_QT_NVFP4 ? NULL : (const uint8_t *)s->bi + sper * 2 * (size_t)i;
        }
        s->m[i] = m;
    }
    s->bytes = mb * (size_t)s->n;
    return 0;
}

static void mset_free(mset *s) { free(s->data), free(s->sc), free(s->bi); }

/* median seconds of one pass over the first `nm` matrices of the set at M rows */
static double time_pass(ink_pool *p, const mset *s, int nm, const float *x, float *y, int M, int reps)
{
    double t[16];
    if (reps > 16) reps = 16;
    for (int r = -1; r < reps; r++) {
        double t0 = ink_now_s();
        for (int i = 0; i < nm; i++) ink_matmul(p, &s->m[i], x, NK, M, y, NK);
        if (r >= 0) t[r] = ink_now_s() - t0;
    }
    return median(t, reps);
}

/* ---- OpenBLAS (optional, at run time) ----------------------------------------------------- */

typedef void (*sgemv_fn)(int, int, int, int, float, const float *, int, const float *, int, float, float *, int);
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *,
                         int);
typedef void (*setthr_fn)(int);

/* ---- machine probes ------------------------------------------------------------------------ */

/* Portable probe loops, for sets without their own (ink_kernels.probe_read / probe_fma). */
static double scalar_read(const void *buf, size_t bytes, int streams)
{
    const uint64_t *p = buf;
    if (streams < 1) streams = 1;
    if (streams > 8) streams = 8;
    size_t n = bytes / 8 / (size_t)streams;
    uint64_t a[8] = {0};
    for (size_t i = 0; i < n; i++)
        for (int s = 0; s < streams; s++) a[s] += p[(size_t)s * n + i];
    return (double)(a[0] ^ a[1] ^ a[2] ^ a[3] ^ a[4] ^ a[5] ^ a[6] ^ a[7]);
}

static double scalar_fma(long iters)
{
    float a[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    for (long i = 0; i < iters * 10; i++)
        for (int j = 0; j < 8; j++) a[j] = a[j] * 0.9999999f + 1e-7f;
    return a[0];
}

typedef struct probe_ctx {
    const uint8_t *buf;
    size_t bytes;
    long iters;
    int streams;
    double (*read)(const void *buf, size_t bytes, int streams);
    double (*fma)(long iters);
    double sink[256];
} probe_ctx;

static probe_ctx probe_init(void)
{
    const ink_kernels *k = ink_kernels_active();
    return (probe_ctx){.read = k->probe_read ? k->probe_read : scalar_read, .fma = k->probe_fma ? k->probe_fma : scalar_fma};
}

static void read_task(void *arg, int ith, int nth)
{
    probe_ctx *c = arg;
    size_t per = c->bytes / (size_t)nth / 4096 * 4096;
    c->sink[ith & 255] += c->read(c->buf + per * (size_t)ith, per, c->streams);
}

/* Read bandwidth (GB/s, best of reps and of 1, 2, 4, 8 streams per thread) of the pool's threads,
 * each streaming its slice of buf. The stream count matters: on a Zen 4 core 2-4 streams read
 * 31-34 GB/s and 8 streams 24-26, so a single count would call a kernel that reads faster than the
 * probe "above the roofline". */
static double probe_read(ink_pool *p, const void *buf, size_t bytes, int reps)
{
    probe_ctx c = probe_init();
    c.buf = buf, c.bytes = bytes, c.streams = 8;
    double best_bw = 0.0;
    ink_pool_run(p, read_task, &c); /* warm-up: fault the pages in */
    for (int r = 0; r < reps * 4; r++) {
        c.streams = 1 << (r % 4);
        double t = ink_now_s();
        ink_pool_run(p, read_task, &c);
        double dt = ink_now_s() - t;
        size_t per = bytes / (size_t)ink_pool_size(p) / 4096 * 4096;
        double bw = (double)per * ink_pool_size(p) / dt / 1e9;
        if (bw > best_bw) best_bw = bw;
    }
    return best_bw;
}

static void fma_task(void *arg, int ith, int nth)
{
    (void)nth;
    probe_ctx *c = arg;
    c->sink[ith & 255] += c->fma(c->iters);
}

/* f32 FMA peak (GFLOPS) of the pool's threads, over about `seconds`. */
static double probe_fma(ink_pool *p, double seconds)
{
    probe_ctx c = probe_init();
    c.iters = 1000000;
    double t = ink_now_s();
    ink_pool_run(p, fma_task, &c);
    double dt = ink_now_s() - t;
    c.iters = (long)((double)c.iters * seconds / (dt > 1e-6 ? dt : 1e-6));
    if (c.iters < 1000) c.iters = 1000;
    t = ink_now_s();
    ink_pool_run(p, fma_task, &c);
    dt = ink_now_s() - t;
    return (double)c.iters * 10 * 8 * 2 * ink_pool_size(p) / dt / 1e9;
}

/* ---- model measurements ------------------------------------------------------------------- */

static size_t ffn_bytes(const ink_ffn_w *f)
{
    return ink_mat_bytes(&f->gate) + ink_mat_bytes(&f->up) + ink_mat_bytes(&f->down);
}

/* Weight bytes one token streams, split into the part every token shares and one routed expert. */
static void token_bytes(const ink_model *m, double *shared, double *expert, double *n_moe_layers)
{
    const ink_config *c = &m->cfg;
    double b = 0, e = 0;
    int nm = 0;
    for (int i = 0; i < c->n_layer; i++) {
        const ink_layer_w *w = &m->layers[i];
        b += (double)(ink_mat_bytes(&w->at.wq) + ink_mat_bytes(&w->at.wk) + ink_mat_bytes(&w->at.wv) +
                      ink_mat_bytes(&w->at.wr) + ink_mat_bytes(&w->at.wo));
        if (!w->cfg.moe) b += (double)ffn_bytes(&w->dense);
        else {
            b += (double)ink_mat_bytes(&w->router);
            for (int s = 0; s < c->n_shared; s++) b += (double)ffn_bytes(&w->shared[s]);
            e = (double)ffn_bytes(&w->experts[0]);
            nm++;
        }
    }
    ink_mat head = m->unembed;
    head.rows = c->vocab_unpadded;
    b += (double)ink_mat_bytes(&head);
    *shared = b, *expert = e, *n_moe_layers = nm;
}

static double dir_bytes(const char *dir)
{
    char cmd[4200];
    double tot = 0;
    snprintf(cmd, sizeof cmd, "%s/model.safetensors", dir);
    struct stat st;
    if (stat(cmd, &st) == 0) tot += (double)st.st_size;
    return tot;
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) v = atol(line + 6);
    if (f) fclose(f);
    return v;
}

/* The roofline's verify cost pred[K] = t(K)/t(1), K = 1 .. Kmax, for read bandwidth bw (GB/s) and FMA
 * peak (GFLOPS); returns the weight bytes one decoded token reads. */
static double roofline(const ink_model *m, double bw, double peak, int Kmax, double pred[11])
{
    const ink_config *c = &m->cfg;
    /* roofline prediction: shared bytes + U(K) distinct experts per MoE layer (independent routing) */
    double sb, eb, nmoe;
    token_bytes(m, &sb, &eb, &nmoe);
    double E = c->n_expert, k = c->n_expert_used;
    double flops1 = 0;
    { /* 2 flops per weight touched by one token; bytes-per-weight from the same matrices */
        double w = 0;
        for (int i = 0; i < c->n_layer; i++) {
            const ink_layer_w *lw = &m->layers[i];
            const ink_mat *ms[5] = {&lw->at.wq, &lw->at.wk, &lw->at.wv, &lw->at.wr, &lw->at.wo};
            for (int j = 0; j < 5; j++) w += (double)ms[j]->rows * ms[j]->cols;
            int I = lw->inter;
            double ffn = 3.0 * I * c->hidden;
            w += lw->cfg.moe ? ffn * (k + c->n_shared) + (double)lw->router.rows * lw->router.cols : ffn;
        }
        w += (double)c->vocab_unpadded * c->hidden;
        flops1 = 2 * w;
    }
    double p1 = 0;
    for (int K = 1; K <= Kmax; K++) {
        double U = E > 0 && nmoe > 0 ? E * (1 - pow(1 - k / E, K)) : 0; /* all-dense: no expert term (was 0 x NaN) */
        double bytes = sb + nmoe * U * eb;
        double t = fmax(bytes / (bw * 1e9), K * flops1 / (peak * 1e9));
        if (K == 1) p1 = t;
        pred[K] = t / p1;
    }
    return sb + nmoe * k * eb;
}

static json_t *bench_model(const char *dir, int threads, int act, int no_mmap, double bw, double peak, int quick,
                           int json)
{
    ink_model *m = NULL;
    ink_err e = {0};
    ink_model_opts o = {.n_threads = threads, .activations = act, .no_mmap = no_mmap};
    long rss0 = rss_kb();
    if (ink_model_open(&m, dir, &o, &e)) {
        fprintf(stderr, "bench: %s: %s\n", dir, e.msg);
        return NULL;
    }
    ink_session *s;
    if (ink_session_create(&s, m, 1024, &e)) {
        fprintf(stderr, "bench: %s\n", e.msg);
        ink_model_free(m);
        return NULL;
    }
    int V = ink_model_n_vocab(m), Kmax = 10, reps = quick ? 3 : 7;
    int32_t ids[256];
    for (int i = 0; i < 256; i++) ids[i] = (int32_t)((i * 7919u + 13u) % (unsigned)V);
    float *lg = malloc((size_t)256 * V * sizeof(float));
    ink_snapshot *snap;
    if (!lg || ink_snapshot_create(&snap, s, &e)) {
        fprintf(stderr, "bench: out of memory\n");
        free(lg);
        ink_session_free(s);
        ink_model_free(m);
        return NULL;
    }
    /* prefill: 128 tokens from empty */
    double tp[16];
    for (int r = 0; r < reps; r++) {
        ink_session_reset(s);
        double t0 = ink_now_s();
        ink_session_eval(s, ids, 128, &(ink_eval_out){.logits = lg}, &e);
        tp[r] = ink_now_s() - t0;
    }
    double prefill = 128.0 / median(tp, reps);
    /* decode and the verify curve after a 16-token prefix, interleaved over K */
    ink_session_reset(s);
    ink_session_eval(s, ids, 16, NULL, &e);
    ink_session_save(s, snap);
    double tk[11][16];
    for (int r = -1; r < reps; r++)
        for (int K = 1; K <= Kmax; K++) {
            ink_session_restore(s, snap, &e);
            double t0 = ink_now_s();
            ink_session_eval(s, ids + 16, K, &(ink_eval_out){.logits = lg, .all_logits = 1}, &e);
            if (r >= 0) tk[K][r] = ink_now_s() - t0;
        }
    double t1 = 0, cK[11];
    for (int K = 1; K <= Kmax; K++) {
        double md = median(tk[K], reps);
        if (K == 1) t1 = md;
        cK[K] = md / t1;
    }
    ink_session_restore(s, snap, &e);
    double td[64];
    int nd = quick ? 16 : 32;
    for (int i = 0; i < nd; i++) {
        double t0 = ink_now_s();
        ink_session_eval(s, ids + 16 + i, 1, &(ink_eval_out){.logits = lg}, &e);
        td[i] = ink_now_s() - t0;
    }
    double decode = 1.0 / median(td, nd);
    double pred[11], bytes1 = roofline(m, bw, peak, Kmax, pred);
    long rss1 = rss_kb();
    double stored = dir_bytes(dir);
    json_t *j = json_object();
    json_object_set_new(j, "dir", json_string(dir));
    json_object_set_new(j, "quant", json_string(m->info.quant));
    json_object_set_new(j, "bytes_per_token", json_real(bytes1));
    json_object_set_new(j, "prefill_tok_s", json_real(prefill));
    json_object_set_new(j, "decode_tok_s", json_real(decode));
    json_object_set_new(j, "decode_gbs", json_real(bytes1 * decode / 1e9));
    json_object_set_new(j, "decode_roofline_fraction", json_real(bytes1 * decode / 1e9 / bw));
    json_t *ca = json_array(), *pa = json_array();
    for (int K = 1; K <= Kmax; K++) json_array_append_new(ca, json_real(cK[K])), json_array_append_new(pa, json_real(pred[K]));
    json_object_set_new(j, "verify_cost", ca);
    json_object_set_new(j, "verify_cost_roofline", pa);
    json_object_set_new(j, "verify_t1_ms", json_real(t1 * 1e3));
    json_object_set_new(j, "weights_stored_bytes", json_real(stored));
    json_object_set_new(j, "rss_model_bytes", json_real((double)(rss1 - rss0) * 1024));
    if (!json) {
        printf("\nmodel %s (%s), kernel set %s, %d threads\n", dir, m->info.quant, ink_kernels_active()->name, threads);
        printf("  weight bytes/token %.1f MB; prefill %.1f tok/s; decode %.2f tok/s = %.2f GB/s = %.2f of read BW\n",
               bytes1 / 1e6, prefill, decode, bytes1 * decode / 1e9, bytes1 * decode / 1e9 / bw);
        printf("  verify cost c(K) = t(K)/t(1), t(1) = %.2f ms\n  K        ", t1 * 1e3);
        for (int K = 1; K <= Kmax; K++) printf("%6d", K);
        printf("\n  measured ");
        for (int K = 1; K <= Kmax; K++) printf("%6.2f", cK[K]);
        printf("\n  roofline ");
        for (int K = 1; K <= Kmax; K++) printf("%6.2f", pred[K]);
        printf("\n  RSS growth %.0f MB for %.0f MB stored\n", (double)(rss1 - rss0) / 1024, stored / 1e6);
    }
    ink_snapshot_free(snap);
    free(lg);
    ink_session_free(s);
    ink_model_free(m);
    return j;
}

/* ---- main --------------------------------------------------------------------------------- */

static void cpu_name(char *out, size_t n)
{
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) snprintf(out, n, "%s", c + 2);
            out[strcspn(out, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
}

#define BENCH_USAGE                                                                                           \
    "usage: inkling bench [-t/--threads N] [--json] [--quick] [--sets all|best|NAME,...]\n"                      \
    "                     [--activations auto|f32|int8|bf16] [--no-mmap] [-m DIR]...\n"

/* One bench run: the command line, the two pools (1 thread and N) and what the probes found. */
typedef struct bench {
    int threads, json, quick, nmod, reps, ntc, tcounts[2];
    int act;     /* the models' activations (enum ink_activations) */
    int no_mmap; /* --no-mmap: the models' weights read into memory */
    const char *models[8], *setarg;
    ink_pool *pools[2];
    double bw[2], peak[2];  /* read GB/s and FMA GFLOPS at 1 and N threads */
    const ink_kernels *sets[4];
    int nsets;
    float *x, *y;           /* [128][NK] activations and outputs of the kernel passes */
} bench;

/* Returns 0, -1 after --help, or the exit code 2 after a message. */
static int parse(int argc, char **argv, bench *b)
{
    b->threads = ink_default_threads();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) b->json = 1;
        else if (!strcmp(argv[i], "--quick")) b->quick = 1;
        else if (!strcmp(argv[i], "--no-mmap")) b->no_mmap = 1;
        else if (!strcmp(argv[i], "--threads") || !strcmp(argv[i], "-t")) {
            long t;
            const char *v = arg_value(argc, argv, &i);
            if (!v || arg_int(argv[i - 1], v, 1, 256, &t)) return 2;
            b->threads = (int)t;
        } else if (!strcmp(argv[i], "--sets") && i + 1 < argc) b->setarg = argv[++i];
        else if (!strcmp(argv[i], "--activations")) {
            const char *v = arg_value(argc, argv, &i);
            if (!v) return 2;
            if ((b->act = ink_activations_parse(v)) < 0) {
                fprintf(stderr, "inkling bench: --activations must be auto, f32, int8 or bf16, found '%s'\n", v);
                return 2;
            }
        }
        else if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc && b->nmod < 8)
            b->models[b->nmod++] = argv[++i];
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf(BENCH_USAGE);
            return -1;
        } else {
            fprintf(stderr, "inkling bench: unknown option %s\n", argv[i]);
            fprintf(stderr, BENCH_USAGE);
            return 2;
        }
    }
    if (b->threads < 1) b->threads = 1;
    return 0;
}

/* Read bandwidth and FMA peak at 1 and N threads (into b->bw, b->peak and J). */
static int probe_machine(bench *b, json_t *J)
{
    size_t pb = (size_t)512 << 20;
    void *buf = aligned_alloc(4096, pb);
    if (!buf) return 1;
    memset(buf, 1, pb);
    for (int ti = 0; ti < b->ntc; ti++) {
        double v[9];
        for (int r = 0; r < b->reps; r++) v[r] = probe_read(b->pools[ti], buf, pb, 1);
        b->bw[ti] = median(v, b->reps);
        for (int r = 0; r < 3; r++) v[r] = probe_fma(b->pools[ti], b->quick ? 0.1 : 0.25);
        b->peak[ti] = median(v, 3);
    }
    free(buf);
    if (b->ntc == 1) b->bw[1] = b->bw[0], b->peak[1] = b->peak[0];
    json_object_set_new(J, "read_gbs", json_pack("[f,f]", b->bw[0], b->bw[1]));
    json_object_set_new(J, "fma_gflops", json_pack("[f,f]", b->peak[0], b->peak[1]));
    if (!b->json)
        printf("machine: read %.1f GB/s (1 thread), %.1f GB/s (%d); f32 FMA %.1f GFLOPS (1), %.1f (%d)\n\n", b->bw[0],
               b->bw[1], b->threads, b->peak[0], b->peak[1], b->threads);
    return 0;
}

/* The kernel sets --sets names (default: the SIMD sets, scalar where it is alone). */
static void pick_sets(bench *b)
{
    const ink_kernels *avail[4] = {ink_kernels_avx512(), ink_kernels_avx2(), ink_kernels_neon(), ink_kernels_scalar()};
    const char *setarg = b->setarg;
    for (int i = 0; i < 4; i++) {
        if (!avail[i]) continue;
        int want;
        if (!setarg) want = avail[i] != ink_kernels_scalar() || b->nsets == 0; /* SIMD sets; scalar if alone */
        else if (!strcmp(setarg, "all")) want = 1;
        else if (!strcmp(setarg, "best")) want = avail[i] == ink_kernels_active();
        else {
            const char *p = strstr(setarg, avail[i]->name);
            size_t n = strlen(avail[i]->name);
            want = p && (p == setarg || p[-1] == ',') && (p[n] == 0 || p[n] == ',');
        }
        if (want) b->sets[b->nsets++] = avail[i];
    }
}

/* One row of the kernel table: set si, weight kind k, pool ti (with the small-M curve and the M=128
 * GEMM at the full thread count). */
static json_t *kernel_row(const bench *b, int si, const kind *k, const mset *ms, int ti)
{
    double bpw = (double)ms->bytes / ((double)ms->n * NK * NK); /* bytes per weight */
    double t = time_pass(b->pools[ti], ms, ms->n, b->x, b->y, 1, b->reps);
    double gbs = (double)ms->bytes / t / 1e9, gf = 2.0 * ms->n * NK * (double)NK / t / 1e9;
    double roof = fmin(b->bw[ti], b->peak[ti] * bpw / 2.0);
    json_t *kj = json_pack("{s:s,s:s,s:i,s:f,s:f,s:f,s:f}", "set", b->sets[si]->name, "kernel", k->name, "threads",
                           b->tcounts[ti], "gbs", gbs, "gflops", gf, "roof_gbs", roof, "roof_fraction", gbs / roof);
    double c16 = 0, g128 = 0;
    if (ti == b->ntc - 1) { /* small-M curve and prefill GEMM at the full thread count */
        json_t *cur = json_array();
        int Ms[5] = {1, 2, 4, 8, 16};
        double t1 = t;
        for (int mi = 1; mi < 5; mi++) {
            double tm = time_pass(b->pools[ti], ms, ms->n < 8 ? ms->n : 8, b->x, b->y, Ms[mi], b->quick ? 2 : 3);
            tm *= (double)ms->n / (ms->n < 8 ? ms->n : 8);
            json_array_append_new(cur, json_pack("{s:i,s:f}", "M", Ms[mi], "cost", tm / t1));
            if (Ms[mi] == 16) c16 = tm / t1;
        }
        json_object_set_new(kj, "small_m_cost", cur);
        double tg = time_pass(b->pools[ti], ms, 1, b->x, b->y, 128, b->quick ? 2 : 3);
        g128 = 2.0 * 128 * NK * (double)NK / tg / 1e9;
        json_object_set_new(kj, "gemm_m128_gflops", json_real(g128));
    }
    if (!b->json) {
        printf("%-7s %-10s %3d %8.2f %8.2f %9.2f %8.2f", b->sets[si]->name, k->name, b->tcounts[ti], gbs, gf, roof,
               gbs / roof);
        if (c16 > 0) printf(" %8.2f %8s %8.1f", c16, "", g128);
        printf("\n");
    }
    return kj;
}

/* The kernel table: every picked set x weight kind x thread count. */
static json_t *bench_kernels(const bench *b)
{
    json_t *KJ = json_array();
    if (!b->json)
        printf("%-7s %-10s %3s %8s %8s %9s %8s %8s %8s %8s   (N=K=%d, weights >> L3)\n", "set", "kernel", "thr", "GB/s", "GFLOPS",
               "roof GB/s", "of roof", "M=16 c", "M=128", "GFLOPS", NK);
    for (int si = 0; si < b->nsets; si++)
        for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++) {
            const kind *k = &kinds[ki];
            ink_kernels_select(b->sets[si]);
            mset ms;
            if (mset_make(&ms, k, b->quick ? SET_BYTES / 2 : SET_BYTES)) {
                mset_free(&ms);
                continue;
            }
            for (int ti = 0; ti < b->ntc; ti++) json_array_append_new(KJ, kernel_row(b, si, k, &ms, ti));
            mset_free(&ms);
        }
    return KJ;
}

/* OpenBLAS's sgemv / sgemm on the f32 matrices, when the library is installed (J's "openblas"). */
static void bench_openblas(const bench *b, json_t *J)
{
    void *ob = dlopen("libopenblas.so.0", RTLD_NOW);
    if (!ob) ob = dlopen("libopenblas.so", RTLD_NOW);
    if (!ob) {
        json_object_set_new(J, "openblas", json_null());
        if (!b->json) printf("openblas   not installed (libopenblas.so.0 not found)\n");
        return;
    }
    sgemv_fn gemv = (sgemv_fn)dlsym(ob, "cblas_sgemv");
    sgemm_fn gemm = (sgemm_fn)dlsym(ob, "cblas_sgemm");
    setthr_fn st = (setthr_fn)dlsym(ob, "openblas_set_num_threads");
    kind f = kinds[0];
    mset ms;
    const float *x = b->x;
    float *y = b->y;
    if (gemv && gemm && !mset_make(&ms, &f, SET_BYTES)) {
        json_t *OJ = json_array();
        for (int ti = 0; ti < b->ntc; ti++) {
            if (st) st(b->tcounts[ti]);
            double v[9], g[3];
            for (int r = 0; r < b->reps; r++) {
                double t0 = ink_now_s();
                for (int i = 0; i < ms.n; i++)
                    gemv(101, 111, NK, NK, 1.0f, ms.m[i].data, NK, x, 1, 0.0f, y, 1); /* row-major, no trans */
                v[r] = ink_now_s() - t0;
            }
            double tv = median(v, b->reps);
            int Ms[3] = {1, 16, 128};
            for (int mi = 0; mi < 3; mi++) {
                double w[3];
                for (int r = 0; r < 3; r++) {
                    double t0 = ink_now_s();
                    gemm(101, 111, 112, Ms[mi], NK, NK, 1.0f, x, NK, ms.m[0].data, NK, 0.0f, y, NK);
                    w[r] = ink_now_s() - t0;
                }
                g[mi] = 2.0 * Ms[mi] * NK * (double)NK / median(w, 3) / 1e9;
            }
            double gbs = (double)ms.bytes / tv / 1e9;
            json_array_append_new(OJ, json_pack("{s:i,s:f,s:f,s:f,s:f}", "threads", b->tcounts[ti], "sgemv_gbs", gbs,
                                                "sgemm_m1_gflops", g[0], "sgemm_m16_gflops", g[1],
                                                "sgemm_m128_gflops", g[2]));
            if (!b->json)
                printf("%-7s %-10s %3d %8.2f %8.2f  (sgemv; sgemm GFLOPS M=1 %.1f, M=16 %.1f, M=128 %.1f)\n", "", "openblas",
                       b->tcounts[ti], gbs, 2.0 * ms.n * NK * (double)NK / tv / 1e9, g[0], g[1], g[2]);
        }
        json_object_set_new(J, "openblas", OJ);
        mset_free(&ms);
    }
    dlclose(ob);
}

/* machine probes, kernel table, OpenBLAS and models, each with every picked set; 0 or the exit code */
static int run_bench(bench *b, json_t *J)
{
    if (probe_machine(b, J)) return 1;
    b->x = malloc((size_t)128 * NK * sizeof(float)), b->y = malloc((size_t)128 * NK * sizeof(float));
    if (!b->x || !b->y) return 1;
    for (size_t i = 0; i < (size_t)128 * NK; i++) b->x[i] = frand();
    pick_sets(b);
    const ink_kernels *best_set = ink_kernels_active();
    json_object_set_new(J, "kernels_table", bench_kernels(b));
    ink_kernels_select(best_set);
    bench_openblas(b, J);
    free(b->x), free(b->y);
    b->x = b->y = NULL;
    json_t *MJ = json_array();
    for (int si = 0; si < b->nsets; si++)
        for (int i = 0; i < b->nmod; i++) {
            ink_kernels_select(b->sets[si]);
            json_t *mj = bench_model(b->models[i], b->threads, b->act, b->no_mmap, b->bw[b->ntc - 1],
                                     b->peak[b->ntc - 1], b->quick, b->json);
            if (mj) json_object_set_new(mj, "set", json_string(b->sets[si]->name)), json_array_append_new(MJ, mj);
        }
    ink_kernels_select(best_set);
    json_object_set_new(J, "models", MJ);
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    bench b = {0};
    int rc = parse(argc, argv, &b);
    if (rc) return rc < 0 ? 0 : rc;
    b.tcounts[0] = 1, b.tcounts[1] = b.threads, b.ntc = b.threads > 1 ? 2 : 1, b.reps = b.quick ? 3 : 5;
    b.pools[0] = ink_pool_create(1), b.pools[1] = b.threads > 1 ? ink_pool_create(b.threads) : NULL;
    if (!b.pools[0] || (b.threads > 1 && !b.pools[1])) {
        fprintf(stderr, "bench: cannot start threads\n");
        return 1;
    }
    ink_pool_set_adaptive(b.pools[1], 0); /* kernel numbers are n-thread numbers */
    json_t *J = json_object();
    char cpu[256];
    cpu_name(cpu, sizeof cpu);
    json_object_set_new(J, "cpu", json_string(cpu));
    json_object_set_new(J, "kernels", json_string(ink_kernels_active()->name));
    json_object_set_new(J, "threads", json_integer(b.threads));
    if (!b.json) printf("inkling bench: %s; kernel set %s; threads 1 and %d\n", cpu, ink_kernels_active()->name, b.threads);
    rc = run_bench(&b, J);
    free(b.x), free(b.y);
    if (!rc && b.json) {
        char *txt = json_dumps(J, JSON_INDENT(1) | JSON_REAL_PRECISION(5));
        if (txt) puts(txt);
        free(txt);
    }
    json_decref(J);
    ink_pool_free(b.pools[0]);
    ink_pool_free(b.pools[1]);
    return rc;
}
