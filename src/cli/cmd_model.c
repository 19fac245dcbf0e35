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

/* ---- generate ----------------------------------------------------------------------- */

static void trace_round(void *ud, const ink_round *r)
{
    FILE *f = ud;
    if (!f) return;
    fprintf(f, "{\"round\": %d, \"n\": %d, \"K_eff\": %d, \"drafts\": [", r->round, r->n, r->k_eff);
    for (int i = 0; i < r->n_drafts; i++) fprintf(f, "%s%d", i ? ", " : "", r->drafts[i]);
    fprintf(f, "], \"draft_blocks\": [");
    for (int i = 0; i < r->n_drafts; i++) fprintf(f, "%s%d", i ? ", " : "", r->draft_blocks[i]);
    fprintf(f, "], \"draft_margins\": [");
    for (int i = 0; i < r->n_drafts; i++) fprintf(f, "%s%.6f", i ? ", " : "", r->draft_margins[i]);
    fprintf(f, "], \"a\": %d, \"emitted\": [", r->a);
    for (int i = 0; i < r->n_emitted; i++) fprintf(f, "%s%d", i ? ", " : "", r->emitted[i]);
    fprintf(f, "], \"bonus\": %d, \"bonus_emitted\": %s}\n", r->bonus, r->bonus_emitted ? "true" : "false");
}

static int write_stats(const char *path, const ink_gen_stats *st, const char *mode, int depth)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "inkling: %s: cannot open for writing\n", path);
        return 1;
    }
    double dec = st->generated_tokens > 1 ? (st->generated_tokens - 1) / fmax(st->decode_s, 1e-9) : 0;
    fprintf(f, "{\n  \"prompt_tokens\": %d,\n  \"generated_tokens\": %d,\n  \"rounds\": %d,\n  \"drafted\": %d,\n"
               "  \"accepted\": %d,\n  \"mean_accepted_length\": %.6f,\n  \"acceptance_per_depth\": [",
            st->prompt_tokens, st->generated_tokens, st->rounds, st->drafted, st->accepted,
            st->rounds ? (double)st->round_emitted / st->rounds : 0.0);
    for (int j = 0; j < st->n_pos; j++)
        fprintf(f, "%s%.6f", j ? ", " : "", st->pos_proposed[j] ? (double)st->pos_accepted[j] / st->pos_proposed[j] : 0.0);
    fprintf(f, "],\n  \"proposed_per_depth\": [");
    for (int j = 0; j < st->n_pos; j++) fprintf(f, "%s%d", j ? ", " : "", st->pos_proposed[j]);
    fprintf(f, "],\n  \"accepted_per_depth\": [");
    for (int j = 0; j < st->n_pos; j++) fprintf(f, "%s%d", j ? ", " : "", st->pos_accepted[j]);
    fprintf(f, "],\n  \"acceptance_rate\": %.6f,\n  \"prefill_tok_s\": %.3f,\n  \"decode_tok_s\": %.3f,\n"
               "  \"prefill_s\": %.6f,\n  \"decode_s\": %.6f,\n  \"draft_s\": %.6f,\n  \"verify_s\": %.6f,\n"
               "  \"rollback_s\": %.6f,\n  \"block_size\": %d,\n  \"k_min\": %d,\n  \"k_max\": %d,\n"
               "  \"zero_accept_rounds\": %d,\n  \"partial_accept_rounds\": %d,\n  \"full_accept_rounds\": %d,\n"
               "  \"mtp_mode\": \"%s\",\n  \"mtp_depth\": %d,\n  \"plain_equivalent_forwards\": %d,\n"
               "  \"target_forwards\": %d\n}\n",
            st->drafted ? (double)st->accepted / st->drafted : 0.0, st->prompt_tokens / fmax(st->prefill_s, 1e-9), dec,
            st->prefill_s, st->decode_s, st->draft_s, st->verify_s, st->rollback_s, st->k_requested, st->k_min,
            st->k_max, st->zero_accept, st->partial_accept, st->full_accept, mode, depth,
            st->generated_tokens > 0 ? st->generated_tokens - 1 : 0,
            st->generated_tokens > 0 ? st->generated_tokens - 1 - st->round_emitted + st->rounds : 0);
    return fclose(f) != 0;
}

int cmd_generate(int argc, char **argv)
{
    common c = {0};
    const char *ids_s = NULL, *draft_kind = "none", *draft_model = NULL, *mtp_mode = "per-depth";
    const char *stats_path = NULL, *trace_path = NULL;
    long n_gen = 32, seed = 0, top_k = 40, block = 0;
    double temp = 0.8, top_p = 0.95, min_p = 0.05, rep = 1.0, freq = 0.0, pres = 0.0;
    long last_n = 64;
    int stop_eos = -1, capture = 0;
    for (int i = 1; i < argc; i++) {
        int r = common_arg(&c, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        const char *a = argv[i], *v;
#define VAL() if (!(v = arg_value(argc, argv, &i))) return 2
        if (!strcmp(a, "--prompt-ids")) {
            VAL();
            ids_s = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            VAL();
            if (arg_int(a, v, 0, 1L << 30, &n_gen)) return 2;
        } else if (!strcmp(a, "--temp") || !strcmp(a, "--temperature")) {
            VAL();
            if (arg_float(a, v, 0, 100, &temp)) return 2;
        } else if (!strcmp(a, "--top-k")) {
            VAL();
            if (arg_int(a, v, 0, 1L << 30, &top_k)) return 2;
        } else if (!strcmp(a, "--top-p")) {
            VAL();
            if (arg_float(a, v, 0, 1, &top_p)) return 2;
        } else if (!strcmp(a, "--min-p")) {
            VAL();
            if (arg_float(a, v, 0, 1, &min_p)) return 2;
        } else if (!strcmp(a, "--repeat-penalty")) {
            VAL();
            if (arg_float(a, v, 0, 10, &rep)) return 2;
        } else if (!strcmp(a, "--frequency-penalty")) {
            VAL();
            if (arg_float(a, v, -10, 10, &freq)) return 2;
        } else if (!strcmp(a, "--presence-penalty")) {
            VAL();
            if (arg_float(a, v, -10, 10, &pres)) return 2;
        } else if (!strcmp(a, "--repeat-last-n")) {
            VAL();
            if (arg_int(a, v, -1, 1L << 30, &last_n)) return 2;
        } else if (!strcmp(a, "--seed") || !strcmp(a, "-s")) {
            VAL();
            if (arg_int(a, v, 0, 0x7fffffffL, &seed)) return 2;
        } else if (!strcmp(a, "--draft-kind")) {
            VAL();
            if (strcmp(v, "none") && strcmp(v, "mtp")) {
                fprintf(stderr, "inkling generate: --draft-kind must be none or mtp, found '%s'\n", v);
                return 2;
            }
            draft_kind = v;
        } else if (!strcmp(a, "--draft-model")) {
            VAL();
            draft_model = v;
        } else if (!strcmp(a, "--draft-block-size")) {
            VAL();
            if (arg_int(a, v, 1, 64, &block)) return 2;
        } else if (!strcmp(a, "--mtp-mode")) {
            VAL();
            if (strcmp(v, "per-depth") && strcmp(v, "compat")) {
                fprintf(stderr, "inkling generate: --mtp-mode must be per-depth or compat, found '%s'\n", v);
                return 2;
            }
            mtp_mode = v;
        } else if (!strcmp(a, "--capture-commit")) {
            capture = 1;
        } else if (!strcmp(a, "--stats-json")) {
            VAL();
            stats_path = v;
        } else if (!strcmp(a, "--trace")) {
            VAL();
            trace_path = v;
        } else if (!strcmp(a, "--ids")) {
            /* token ids are the only output form until the tokenizer lands */
        } else if (!strcmp(a, "--stop-eos")) {
            stop_eos = 1;
        } else if (!strcmp(a, "--ignore-eos")) {
            stop_eos = 0;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt") || !strcmp(a, "-f")) {
            fprintf(stderr, "inkling generate: text prompts (%s) need the tokenizer, which this build does not have "
                            "yet; pass --prompt-ids\n", a);
            return 2;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: inkling generate -m DIR --prompt-ids 1,2,3 [-n N] [--temp T] [--top-k K] [--top-p P]\n"
                   "         [--min-p P] [--repeat-penalty R] [--frequency-penalty F] [--presence-penalty P]\n"
                   "         [--repeat-last-n N] [--seed S] [--ids] [--stop-eos|--ignore-eos] [--threads N] [-c N]\n"
                   "         [--draft-kind none|mtp] [--draft-model DIR] [--draft-block-size K]\n"
                   "         [--mtp-mode per-depth|compat] [--capture-commit] [--stats-json FILE] [--trace FILE]\n");
            return 0;
        } else {
            fprintf(stderr, "inkling generate: unknown option %s\n", a);
            return 2;
        }
#undef VAL
    }
    if (!ids_s) {
        fprintf(stderr, "inkling generate: need --prompt-ids (text prompts come with the tokenizer)\n");
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
    /* The token-level interface (--prompt-ids) does not stop at EOS unless asked: it mirrors the
     * reference's fixed-length greedy runs. */
    if (stop_eos < 0) stop_eos = 0;
    ink_drafter *d = NULL;
    ink_session *s = NULL;
    FILE *trace = NULL;
    int32_t *out = malloc((size_t)(n_gen ? n_gen : 1) * sizeof *out);
    long n_ctx = c.n_ctx;
    if (!n_ctx && T + n_gen + 64 > 4096) n_ctx = T + n_gen + 64;
    int n_out = 0;
    ink_gen_stats st;
    if (!out) rc = (fprintf(stderr, "inkling: out of memory\n"), 1);
    else if (!strcmp(draft_kind, "mtp") && ink_drafter_open(&d, m, draft_model ? draft_model : c.model, &e)) rc = fail(&e);
    else if (ink_session_create(&s, m, (int)n_ctx, &e)) rc = fail(&e);
    else if (trace_path && !(trace = fopen(trace_path, "w")))
        rc = (fprintf(stderr, "inkling: %s: cannot open for writing\n", trace_path), 1);
    else {
        ink_gen_opts o = {0};
        o.max_tokens = (int)n_gen;
        o.stop_eos = stop_eos;
        o.eos = -1;
        o.sampling = (ink_sampling){.temp = (float)temp, .top_k = (int)top_k, .top_p = (float)top_p, .min_p = (float)min_p,
                                    .seed = (uint64_t)seed, .repeat_penalty = (float)rep, .frequency_penalty = (float)freq,
                                    .presence_penalty = (float)pres, .penalty_last_n = (int)last_n};
        o.drafter = d;
        o.block_size = (int)block;
        o.mtp_mode = !strcmp(mtp_mode, "compat") ? INK_MTP_COMPAT : INK_MTP_PER_DEPTH;
        o.capture_commit = capture;
        o.on_round = trace ? trace_round : NULL;
        o.ud = trace;
        if (ink_generate(s, ids, T, &o, out, (int)n_gen, &n_out, &st, &e)) rc = fail(&e);
    }
    if (trace && fclose(trace)) rc = (fprintf(stderr, "inkling: %s: write failed\n", trace_path), 1);
    if (!rc) {
        for (int i = 0; i < n_out; i++) printf("%s%d", i ? "," : "", out[i]);
        printf("\n");
        double dec = n_out > 1 ? (n_out - 1) / fmax(st.decode_s, 1e-9) : 0.0;
        fprintf(stderr, "prompt: %d tokens, %.2f tok/s; generated: %d tokens, %.2f tok/s", T,
                T / fmax(st.prefill_s, 1e-9), n_out, dec);
        if (d)
            fprintf(stderr, "; mtp %s K=%d: %d rounds, %d/%d drafts accepted (%.1f%%), %.3f tokens per round",
                    mtp_mode, st.k_requested, st.rounds, st.accepted, st.drafted,
                    st.drafted ? 100.0 * st.accepted / st.drafted : 0.0,
                    st.rounds ? (double)st.round_emitted / st.rounds : 0.0);
        fprintf(stderr, "\n");
        if (stats_path) rc = write_stats(stats_path, &st, d ? mtp_mode : "none", d ? ink_drafter_n_depth(d) : 0);
    }
    free(out);
    free(ids);
    ink_session_free(s);
    ink_drafter_free(d);
    ink_model_free(m);
    return rc;
}
