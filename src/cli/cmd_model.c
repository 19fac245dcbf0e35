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
    int check_tensors, no_mmap;
} common;

/* Handles -m, --threads, -c, --check-tensors, --no-mmap. Returns 1 if argv[*i] was consumed, 0 if not,
 * -1 on error. */
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
    if (!strcmp(a, "--check-tensors")) {
        c->check_tensors = 1;
        return 1;
    }
    if (!strcmp(a, "--no-mmap")) {
        c->no_mmap = 1;
        return 1;
    }
    if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
        if (!(v = arg_value(argc, argv, i)) || arg_int(a, v, 1, 1L << 30, &c->n_ctx)) return -1;
        return 1;
    }
    return 0;
}

/* Resolves -m (path, Hub id in the cache, or the default model) after parsing. */
static void resolve_model(common *c)
{
    static char buf[4352];
    const char *d = ink_cli_model_dir(c->model);
    if (d) snprintf(buf, sizeof buf, "%s", d), c->model = buf;
}

static int open_model_opts(const common *c, ink_model **m, int header_only, ink_err *e)
{
    if (!c->model) {
        fprintf(stderr, "inkling: no model: pass -m DIR (no bundled default model was found)\n");
        return 2;
    }
    if (arg_model_dir("-m", c->model)) return 1;
    ink_model_opts o = {.n_threads = (int)c->threads, .expert_parallel = header_only ? NULL : cli_dist_transport(),
                        .no_mmap = c->no_mmap};
    if (c->check_tensors) header_only = 0; /* the scan reads the data */
    if ((header_only ? ink_model_open_headers : ink_model_open)(m, c->model, &o, e)) return cli_fail(e);
    if (c->check_tensors && ink_model_check_tensors(*m, e)) {
        ink_model_free(*m);
        *m = NULL;
        return cli_fail(e);
    }
    return 0;
}

static int open_model(const common *c, ink_model **m, ink_err *e) { return open_model_opts(c, m, 0, e); }

/* ---- info ------------------------------------------------------------------------------ */

int cmd_info(int argc, char **argv)
{
    common c = {0};
    for (int i = 1; i < argc; i++) {
        int r = common_arg(&c, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: inkling info -m DIR [-c N] [-t/--threads N] [--check-tensors] [--no-mmap]\n");
            return 0;
        }
        fprintf(stderr, "inkling info: unknown option %s\n", argv[i]);
        return 2;
    }
    resolve_model(&c);
    if (!c.model) {
        fprintf(stderr, "inkling info: no model: pass -m DIR (no bundled default model was found)\n");
        return 2;
    }
    if (arg_model_dir("-m", c.model)) return 1;
    ink_model_info info;
    ink_err e = {0};
    if (ink_model_detect(c.model, &info, &e)) return cli_fail(&e);
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
    ink_model *m; /* headers only: info maps and reads no tensor data */
    if (open_model_opts(&c, &m, 1, &e)) return 1;
    ink_session *s;
    if (ink_session_create(&s, m, (int)c.n_ctx, &e)) {
        ink_model_free(m);
        return cli_fail(&e);
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
            printf("usage: inkling logits -m DIR --prompt-ids 1,2,3 -o OUT.npy [-t/--threads N] [-c N]\n"
                   "                      [--check-tensors] [--no-mmap]\n");
            return 0;
        } else {
            fprintf(stderr, "inkling logits: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    resolve_model(&c);
    if (!ids_s || !outp) {
        fprintf(stderr, "inkling logits: need --prompt-ids and -o OUT.npy\n");
        return 2;
    }
    int32_t *ids;
    int T;
    if (arg_ids("--prompt-ids", ids_s, &ids, &T)) return 2;
    if (arg_out_file("-o", outp)) {
        free(ids);
        return 1;
    }
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
    if (ink_session_create(&s, m, (int)n_ctx, &e)) rc = cli_fail(&e);
    else if (!(lg = malloc((size_t)T * V * sizeof(float)))) rc = fprintf(stderr, "inkling: out of memory\n") ? 1 : 1;
    else {
        ink_eval_out o = {.logits = lg, .all_logits = 1};
        if (ink_session_eval(s, ids, T, &o, &e)) rc = cli_fail(&e);
        else rc = write_npy_f32(outp, lg, T, V);
    }
    free(lg);
    free(ids);
    ink_session_free(s);
    cli_dist_note_model(m);
    ink_model_free(m);
    return rc;
}

