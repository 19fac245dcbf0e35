/* cmd_model.c — `inkling info`, `inkling logits`, `inkling generate`. */
#include "cli/args.h"
#include "cli/cli.h"
#include "inkling.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct common {
    const char *model;
    long threads, n_ctx;
} common;

/* Handles -m, --threads, -c. Returns 1 if argv[*i] was consumed, 0 if not, -1 on error. */
static int common_arg(common *c, int argc, char **argv, int *i)
{
    const char *a = argv[*i], *v;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
        if (!(v = arg_value(argc, argv, i))) return -1;
        c->model = v;
        return 1;
    }
    if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
        if (!(v = arg_value(argc, argv, i)) || arg_int(a, v, 1, 256, &c->threads)) return -1;
        return 1;
    }
    if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
        if (!(v = arg_value(argc, argv, i)) || arg_int(a, v, 1, 1L << 30, &c->n_ctx)) return -1;
        return 1;
    }
    return 0;
}

static int fail(const ink_err *e)
{
    fprintf(stderr, "inkling: %s: %s\n", ink_status_str(e->code), e->msg);
    return 1;
}

static int open_model(const common *c, ink_model **m, ink_err *e)
{
    if (!c->model) {
        fprintf(stderr, "inkling: no model: pass -m DIR\n");
        return 2;
    }
    ink_model_opts o = {(int)c->threads};
    return ink_model_open(m, c->model, &o, e) ? fail(e) : 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- info ------------------------------------------------------------------------------ */

int cmd_info(int argc, char **argv)
{
    common c = {0};
    for (int i = 1; i < argc; i++) {
        int r = common_arg(&c, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: inkling info -m DIR [-c N] [--threads N]\n");
            return 0;
        }
        fprintf(stderr, "inkling info: unknown option %s\n", argv[i]);
        return 2;
    }
    if (!c.model) {
        fprintf(stderr, "inkling info: no model: pass -m DIR\n");
        return 2;
    }
    ink_model_info info;
    ink_err e = {0};
    if (ink_model_detect(c.model, &info, &e)) return fail(&e);
    printf("model:        %s\n", c.model);
    printf("family:       %s\n", info.family);
    printf("architecture: %s (model_type %s)\n", *info.architecture ? info.architecture : "-",
           *info.model_type ? info.model_type : "-");
    if (!info.n_layer) {
        printf("supported:    no: %s\n", info.reason);
        return 1;
    }
    printf("variant:      %s\n", info.variant);
    printf("config:       %s layout, tensor names: %s, %d safetensors file(s)\n", info.layout, info.names, info.n_files);
    printf("dtype:        %s\n", info.dtype);
    printf("quantization: %s\n", info.quant);
    printf("parameters:   %.3f M (backbone)\n", (double)info.n_params / 1e6);
    printf("layers:       %d (%d sliding, %d global; %d dense, %d MoE)\n", info.n_layer, info.n_sliding,
           info.n_global, info.n_dense, info.n_moe);
    printf("hidden:       %d\n", info.hidden);
    printf("vocab:        %d (unpadded %d)\n", info.vocab, info.vocab_unpadded);
    if (info.n_moe) printf("experts:      %d routed, top-%d, %d shared\n", info.n_expert, info.n_expert_used, info.n_shared);
    printf("mtp:          %d depth(s) in config, %d block(s) of tensors\n", info.mtp_depth_config,
           info.mtp_depth_tensors);
    printf("max context:  %d\n", info.max_ctx);
    printf("eos:          %d\n", info.eos);
    if (!info.supported) {
        printf("supported:    no: %s\n", info.reason);
        return 1;
    }
    ink_model *m;
    if (open_model(&c, &m, &e)) return 1;
    ink_session *s;
    if (ink_session_create(&s, m, (int)c.n_ctx, &e)) {
        ink_model_free(m);
        return fail(&e);
    }
    printf("supported:    yes\n");
    printf("context:      %d tokens: KV + conv state %.2f MiB (allocated once)\n", ink_session_n_ctx(s),
           (double)ink_session_state_bytes(s) / (1024.0 * 1024.0));
    printf("threads:      %d\n", ink_model_n_threads(m));
    ink_session_free(s);
    ink_model_free(m);
    return 0;
}

/* ---- logits ---------------------------------------------------------------------------- */

static int write_npy_f32(const char *path, const float *data, int rows, int cols)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "inkling: %s: cannot open for writing\n", path);
        return 1;
    }
    char hdr[128];
    int n = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", rows, cols);
    int total = 10 + n + 1, pad = (64 - total % 64) % 64;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    int hl = n + pad + 1;
    pre[8] = (unsigned char)(hl & 255), pre[9] = (unsigned char)(hl >> 8);
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, (size_t)n, f) == (size_t)n;
    for (int i = 0; i < pad && ok; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    ok = ok && fwrite(data, sizeof(float), (size_t)rows * cols, f) == (size_t)rows * cols;
    ok = (fclose(f) == 0) && ok;
    if (!ok) fprintf(stderr, "inkling: %s: write failed\n", path);
    return !ok;
}

int cmd_logits(int argc, char **argv)
{
    common c = {0};
    const char *ids_s = NULL, *outp = NULL;
    for (int i = 1; i < argc; i++) {
        int r = common_arg(&c, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "--prompt-ids")) {
            if (!(ids_s = arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) {
            if (!(outp = arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(argv[i], "-p") || !strcmp(argv[i], "--prompt")) {
            fprintf(stderr, "inkling logits: text prompts (-p) need the tokenizer, which this build does not have "
                            "yet; pass --prompt-ids\n");
            return 2;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: inkling logits -m DIR --prompt-ids 1,2,3 -o OUT.npy [--threads N] [-c N]\n");
            return 0;
        } else {
            fprintf(stderr, "inkling logits: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!ids_s || !outp) {
        fprintf(stderr, "inkling logits: need --prompt-ids and -o OUT.npy\n");
        return 2;
    }
    int32_t *ids;
    int T;
    if (arg_ids("--prompt-ids", ids_s, &ids, &T)) return 2;
    ink_err e = {0};
    ink_model *m;
    int rc = open_model(&c, &m, &e);
    if (rc) {
        free(ids);
        return rc;
    }
    ink_session *s = NULL;
    int V = ink_model_n_vocab(m);
    float *lg = NULL;
    long n_ctx = c.n_ctx ? c.n_ctx : 0;
    if (!n_ctx && T > 4096) n_ctx = T;
    if (ink_session_create(&s, m, (int)n_ctx, &e)) rc = fail(&e);
    else if (!(lg = malloc((size_t)T * V * sizeof(float)))) rc = fprintf(stderr, "inkling: out of memory\n") ? 1 : 1;
    else {
        ink_eval_out o = {.logits = lg, .all_logits = 1};
        if (ink_session_eval(s, ids, T, &o, &e)) rc = fail(&e);
        else rc = write_npy_f32(outp, lg, T, V);
    }
    free(lg);
    free(ids);
    ink_session_free(s);
    ink_model_free(m);
    return rc;
}

/* ---- generate -------------------------------------------------------------------------- */

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i; /* strict: ties go to the lowest id */
    return b;
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int sample_temp(float *x, int n, double temp, uint64_t *rng)
{
    int b = argmax(x, n);
    double mx = x[b], sum = 0;
    for (int i = 0; i < n; i++) sum += exp((x[i] - mx) / temp);
    double r = (double)(rng_next(rng) >> 11) * 0x1.0p-53 * sum, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += exp((x[i] - mx) / temp);
        if (acc > r) return i;
    }
    return b;
}

int cmd_generate(int argc, char **argv)
{
    common c = {0};
    const char *ids_s = NULL;
    long n_gen = 32, seed = 0;
    double temp = 0.0;
    int print_ids = 0, stop_eos = -1;
    for (int i = 1; i < argc; i++) {
        int r = common_arg(&c, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        const char *a = argv[i], *v;
        if (!strcmp(a, "--prompt-ids")) {
            if (!(ids_s = arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (!(v = arg_value(argc, argv, &i)) || arg_int(a, v, 0, 1L << 30, &n_gen)) return 2;
        } else if (!strcmp(a, "--temp") || !strcmp(a, "--temperature")) {
            if (!(v = arg_value(argc, argv, &i)) || arg_float(a, v, 0, 100, &temp)) return 2;
        } else if (!strcmp(a, "--seed") || !strcmp(a, "-s")) {
            if (!(v = arg_value(argc, argv, &i)) || arg_int(a, v, 0, 0x7fffffffL, &seed)) return 2;
        } else if (!strcmp(a, "--ids")) {
            print_ids = 1;
        } else if (!strcmp(a, "--stop-eos")) {
            stop_eos = 1;
        } else if (!strcmp(a, "--ignore-eos")) {
            stop_eos = 0;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt") || !strcmp(a, "-f")) {
            fprintf(stderr, "inkling generate: text prompts (%s) need the tokenizer, which this build does not have "
                            "yet; pass --prompt-ids\n", a);
            return 2;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: inkling generate -m DIR --prompt-ids 1,2,3 [-n N] [--temp T] [--seed S] [--ids]\n"
                   "                        [--stop-eos|--ignore-eos] [--threads N] [-c N]\n");
            return 0;
        } else {
            fprintf(stderr, "inkling generate: unknown option %s\n", a);
            return 2;
        }
    }
    if (!ids_s) {
        fprintf(stderr, "inkling generate: need --prompt-ids (text prompts come with the tokenizer)\n");
        return 2;
    }
    (void)print_ids; /* token ids are the only output form until the tokenizer lands */
    int32_t *ids;
    int T;
    if (arg_ids("--prompt-ids", ids_s, &ids, &T)) return 2;
    ink_err e = {0};
    ink_model *m;
    int rc = open_model(&c, &m, &e);
    if (rc) {
        free(ids);
        return rc;
    }
    /* The token-level interface (--prompt-ids) does not stop at EOS unless asked: it mirrors the
     * reference's fixed-length greedy runs. */
    if (stop_eos < 0) stop_eos = 0;
    int eos = ink_model_get_info(m)->eos, V = ink_model_n_vocab(m);
    ink_session *s = NULL;
    float *lg = malloc((size_t)V * sizeof(float));
    int32_t *out = malloc((size_t)(n_gen ? n_gen : 1) * sizeof *out);
    long n_ctx = c.n_ctx;
    if (!n_ctx && T + n_gen > 4096) n_ctx = T + n_gen;
    int n_out = 0;
    uint64_t rng = (uint64_t)seed;
    double t0 = now_s(), t1 = t0;
    if (!lg || !out) rc = (fprintf(stderr, "inkling: out of memory\n"), 1);
    else if (ink_session_create(&s, m, (int)n_ctx, &e)) rc = fail(&e);
    else if (n_gen > 0) {
        ink_eval_out o = {.logits = lg};
        if (ink_session_eval(s, ids, T, &o, &e)) rc = fail(&e);
        t1 = now_s();
        while (!rc && n_out < n_gen) {
            int tok = temp > 0 ? sample_temp(lg, V, temp, &rng) : argmax(lg, V);
            out[n_out++] = tok;
            if ((stop_eos && tok == eos) || n_out == n_gen) break;
            if (ink_session_eval(s, &tok, 1, &o, &e)) rc = fail(&e);
        }
    }
    double t2 = now_s();
    if (!rc) {
        for (int i = 0; i < n_out; i++) printf("%s%d", i ? "," : "", out[i]);
        printf("\n");
        fprintf(stderr, "prompt: %d tokens, %.2f tok/s; generated: %d tokens, %.2f tok/s\n", T,
                T / fmax(t1 - t0, 1e-9), n_out, n_out > 1 ? (n_out - 1) / fmax(t2 - t1, 1e-9) : 0.0);
    }
    free(lg);
    free(out);
    free(ids);
    ink_session_free(s);
    ink_model_free(m);
    return rc;
}
