/* cmd_generate.c — `inkling generate` (token ids or text, plain or MTP) and `inkling chat`.
 *
 * Token mode (--prompt-ids): prints the generated ids as one comma-separated line, nothing else on
 * stdout. Text mode (-p / -f): the prompt is rendered in the Inkling chat format (unless --raw),
 * the reply streams to stdout as it is decoded (never a broken UTF-8 sequence), reasoning blocks
 * go to stderr with --show-reasoning, and a timing line like llama.cpp's ends on stderr. Ctrl-C
 * stops generation cleanly and still prints the statistics. */
#include "cli/args.h"
#include "cli/profile.h"
#include "cli/cli.h"
#include "inkling.h"
#include "tok/chat.h"
#include "tok/tokenizer.h"

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t interrupted;
static volatile int cancel_flag;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
    cancel_flag = 1;
}

typedef struct gargs {
    const char *model, *ids, *prompt, *file, *system, *effort, *draft_kind, *draft_model, *mtp_mode;
    const char *stats_path, *trace_path;
    long threads, n_ctx, n_gen, block_max;
    cli_sampling smp;
    cli_engine en; /* draft kind, block size (0: auto), draft vocabulary: flags, then inkling.json */
    int raw, special, show_reasoning, stop_eos, capture; /* capture: 1 capture-and-commit, 0 restore + replay */
    int set_mtp_mode, set_rollback, check_tensors, profile, no_mmap;
    int activations; /* enum ink_activations (0: auto) */
} gargs;

static void defaults(gargs *a)
{
    memset(a, 0, sizeof *a);
    a->en.draft_kind = "auto", a->mtp_mode = "per-depth"; /* auto: the model's own MTP head where it has one */
    a->n_gen = -1;
    cli_sampling_init(&a->smp);
    a->stop_eos = -1;
    a->capture = 1;
}

static void usage(FILE *f, const char *cmd)
{
    if (!strcmp(cmd, "chat")) {
        fprintf(f, "usage: inkling chat [-m DIR] [options]   (one user message per line on stdin; /exit ends)\n"
                   "  text:     --system TEXT  --reasoning-effort E  --show-reasoning\n"
                   "  sampling: -n N  --temp T  --top-k K  --top-p P  --min-p P  --repeat-penalty R  --repeat-last-n N\n"
                   "            --frequency-penalty F  --presence-penalty P  --seed S  --stop-eos | --ignore-eos\n"
                   "  drafting: --draft-kind auto|none|mtp  --draft-model DIR  --draft-block-size auto|K  --draft-max K\n"
                   "            --mtp-mode per-depth|compat  --draft-vocab N  --rollback commit|replay  --stats-json FILE  --trace FILE\n"
                   "  model:    -t/--threads N  -c N  --check-tensors  --no-mmap\n"
                   "            (without -m: the bundled default model)\n");
        return;
    }
    fprintf(f,
            "usage: inkling %s [-m DIR] (--prompt-ids 1,2,3 | -p TEXT | -f FILE) [options]\n"
            "  text:     --raw (no chat template)  --system TEXT  --reasoning-effort E  --show-reasoning  --special\n"
            "  sampling: -n N  --temp T  --top-k K  --top-p P  --min-p P  --repeat-penalty R  --repeat-last-n N\n"
            "            --frequency-penalty F  --presence-penalty P  --seed S  --stop-eos | --ignore-eos\n"
            "  drafting: --draft-kind auto|none|mtp  --draft-model DIR  --draft-block-size auto|K  --draft-max K\n"
            "            --mtp-mode per-depth|compat  --draft-vocab N  --rollback commit|replay  --stats-json FILE  --trace FILE\n"
            "  model:    -t/--threads N  -c N  --check-tensors  --activations auto|f32|int8|bf16  --no-mmap\n"
            "            (without -m: the bundled default model; --no-mmap: weights read into memory, not mapped)\n"
            "  profile:  --profile (per-op time of decode on stderr, and in --stats-json)\n",
            cmd);
}

/* Parses argv into *a. Returns 0, or the exit code (2 usage, -1 help shown). */
static int parse(int argc, char **argv, gargs *a, const char *cmd)
{
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = NULL;
        int sf = cli_sampling_flag(argc, argv, &i, &a->smp);
        if (sf) {
            if (sf < 0) return 2;
            continue;
        }
#define VAL() if (!(v = arg_value(argc, argv, &i))) return 2
#define INT(dst, lo, hi) do { VAL(); if (arg_int(o, v, lo, hi, &(dst))) return 2; } while (0)
#define FLT(dst, lo, hi) do { VAL(); if (arg_float(o, v, lo, hi, &(dst))) return 2; } while (0)
        if (!strcmp(o, "-m") || !strcmp(o, "--model")) { VAL(); a->model = v; }
        else if (!strcmp(o, "--threads") || !strcmp(o, "-t")) INT(a->threads, 1, 256);
        else if (!strcmp(o, "-c") || !strcmp(o, "--ctx-size")) INT(a->n_ctx, 1, 1L << 30);
        else if (!strcmp(o, "--activations")) {
            VAL();
            if ((a->activations = ink_activations_parse(v)) < 0) {
                fprintf(stderr, "inkling %s: --activations must be auto, f32, int8 or bf16, found '%s'\n", cmd, v);
                return 2;
            }
        } else if (!strcmp(o, "--prompt-ids")) { VAL(); a->ids = v; }
        else if (!strcmp(o, "-p") || !strcmp(o, "--prompt")) { VAL(); a->prompt = v; }
        else if (!strcmp(o, "-f") || !strcmp(o, "--file")) { VAL(); a->file = v; }
        else if (!strcmp(o, "--system")) { VAL(); a->system = v; }
        else if (!strcmp(o, "--reasoning-effort")) { VAL(); a->effort = v; }
        else if (!strcmp(o, "--raw")) a->raw = 1;
        else if (!strcmp(o, "--special")) a->special = 1;
        else if (!strcmp(o, "--show-reasoning")) a->show_reasoning = 1;
        else if (!strcmp(o, "-n") || !strcmp(o, "--n-predict")) INT(a->n_gen, 0, 1L << 30);
        else if (!strcmp(o, "--ids")) { /* token mode prints ids; accepted for the contract */ }
        else if (!strcmp(o, "--stop-eos")) a->stop_eos = 1;
        else if (!strcmp(o, "--ignore-eos")) a->stop_eos = 0;
        else if (!strcmp(o, "--draft-kind")) {
            VAL();
            if (strcmp(v, "none") && strcmp(v, "mtp") && strcmp(v, "auto")) {
                fprintf(stderr, "inkling %s: --draft-kind must be auto, none or mtp, found '%s'\n", cmd, v);
                return 2;
            }
            a->en.draft_kind = v;
            a->en.set_kind = 1;
        } else if (!strcmp(o, "--draft-model")) { VAL(); a->draft_model = v; }
        else if (!strcmp(o, "--draft-block-size")) {
            VAL();
            if (!strcmp(v, "auto")) a->en.block = 0;
            else if (arg_int(o, v, 1, INK_MAX_BLOCK, &a->en.block)) return 2;
            a->en.set_block = 1;
        } else if (!strcmp(o, "--draft-max")) INT(a->block_max, 1, INK_MAX_BLOCK);
        else if (!strcmp(o, "--mtp-mode")) {
            VAL();
            if (strcmp(v, "per-depth") && strcmp(v, "compat")) {
                fprintf(stderr, "inkling %s: --mtp-mode must be per-depth or compat, found '%s'\n", cmd, v);
                return 2;
            }
            a->mtp_mode = v;
            a->set_mtp_mode = 1;
        } else if (!strcmp(o, "--capture-commit")) a->capture = 1, a->set_rollback = 1;
        else if (!strcmp(o, "--rollback")) {
            VAL();
            if (strcmp(v, "commit") && strcmp(v, "replay")) {
                fprintf(stderr, "inkling %s: --rollback must be commit or replay, found '%s'\n", cmd, v);
                return 2;
            }
            a->capture = !strcmp(v, "commit");
            a->set_rollback = 1;
        } else if (!strcmp(o, "--draft-vocab")) { INT(a->en.dvocab, 0, 1L << 30); a->en.set_dvocab = 1; }
        else if (!strcmp(o, "--stats-json")) { VAL(); a->stats_path = v; }
        else if (!strcmp(o, "--trace")) { VAL(); a->trace_path = v; }
        else if (!strcmp(o, "--check-tensors")) a->check_tensors = 1;
        else if (!strcmp(o, "--no-mmap")) a->no_mmap = 1;
        else if (!strcmp(o, "--profile")) a->profile = 1;
        else if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout, cmd);
            return -1;
        } else {
            fprintf(stderr, "inkling %s: unknown option %s\n", cmd, o);
            return 2;
        }
#undef VAL
#undef INT
#undef FLT
    }
    return 0;
}

/* Options that do not apply to the chosen mode are refused (exit 2), never silently dropped. */
static int check_applies(const gargs *a, const char *cmd, int text, int raw)
{
    const char *why = !text ? "--prompt-ids (token mode)" : raw ? "--raw (no chat template)" : NULL;
    if (why) {
        const char *bad = a->system ? "--system" : a->effort ? "--reasoning-effort" : a->show_reasoning ? "--show-reasoning" : NULL;
        if (bad) {
            fprintf(stderr, "inkling %s: %s does not apply with %s\n", cmd, bad, why);
            return 2;
        }
    }
    if (!text && a->special) {
        fprintf(stderr, "inkling %s: --special does not apply with --prompt-ids (token mode)\n", cmd);
        return 2;
    }
    if (a->effort) {
        double x;
        ink_err e = {0};
        if (ink_chat_effort(a->effort, &x, &e)) {
            fprintf(stderr, "inkling %s: --reasoning-effort: %s\n", cmd, e.msg);
            return 2;
        }
    }
    return 0;
}

/* Drafting options given on the command line without a drafter are refused: with --draft-kind none,
 * or (no_head) when the default found no MTP head in the model. */
static int check_drafting(const gargs *a, const char *cmd, int no_head, const char *dir)
{
    if (!no_head && strcmp(a->en.draft_kind, "none")) return 0;
    const char *bad = a->en.set_block ? "--draft-block-size" : a->block_max ? "--draft-max" : a->draft_model ? "--draft-model"
                      : a->en.set_dvocab ? "--draft-vocab" : a->set_mtp_mode ? "--mtp-mode" : a->set_rollback ? "--rollback" : NULL;
    if (!bad) return 0;
    if (no_head)
        fprintf(stderr, "inkling %s: %s needs a drafter, and %s has no MTP head (no model.mtp.layers.* tensors)\n", cmd,
                bad, dir);
    else
        fprintf(stderr, "inkling %s: %s needs a drafter (not with --draft-kind none)\n", cmd, bad);
    return 2;
}

/* ---- output --------------------------------------------------------------------------- */

static void trace_round(FILE *f, const ink_round *r, int times);

typedef struct sink {
    FILE *trace;
    const ink_tokenizer *tok;
    ink_detok *dt;
    ink_chat_parser *cp;  /* chat mode */
    int show_reasoning, in_thinking, printed;
    int profile, n_seen;  /* --profile: counters reset at the first token (the profile is of decode) */
    ink_tokens reply;     /* ids of this reply (chat history) */
} sink;

static void out_text(sink *k, int thinking, const char *t, size_t n)
{
    if (!n) return;
    if (thinking) {
        if (!k->show_reasoning) return;
        fwrite(t, 1, n, stderr);
        fflush(stderr);
        return;
    }
    if (fwrite(t, 1, n, stdout) != n || fflush(stdout)) cancel_flag = 1; /* a write error stops the run (exit 1) */
    k->printed = 1;
}

static void on_token(void *ud, int32_t id)
{
    sink *k = ud;
    if (k->profile && k->n_seen++ == 0) ink_profile_reset();
    if (!k->tok) return;
    ink_tokens_push(&k->reply, id, NULL);
    if (k->cp) {
        ink_chat_event ev[4];
        size_t n = 0;
        if (ink_chat_parser_feed(k->cp, id, ev, &n, NULL)) return;
        for (size_t i = 0; i < n; i++) {
            if (ev[i].type == INK_EV_BLOCK_START && ev[i].kind == INK_BLOCK_THINKING && k->show_reasoning)
                fputs("[thinking] ", stderr);
            if (ev[i].type == INK_EV_DELTA) out_text(k, ev[i].kind == INK_BLOCK_THINKING, ev[i].text, ev[i].len);
            if (ev[i].type == INK_EV_BLOCK_END && ev[i].kind == INK_BLOCK_THINKING && k->show_reasoning)
                fputs("\n", stderr);
        }
        return;
    }
    const char *t;
    size_t n;
    if (!ink_detok_feed(k->dt, id, &t, &n, NULL)) out_text(k, 0, t, n);
}

static void on_round(void *ud, const ink_round *r)
{
    sink *k = ud;
    if (k->trace) trace_round(k->trace, r, k->profile);
}

/* One round as a golden-trace line; with --profile also its times (`ms`: draft, verify, rollback),
 * which differ run to run (without, the traces of equal runs are equal files). */
static void trace_round(FILE *f, const ink_round *r, int times)
{
    fprintf(f, "{\"round\": %d, \"n\": %d, \"K_eff\": %d, \"drafts\": [", r->round, r->n, r->k_eff);
    for (int i = 0; i < r->n_drafts; i++) fprintf(f, "%s%d", i ? ", " : "", r->drafts[i]);
    fprintf(f, "], \"draft_blocks\": [");
    for (int i = 0; i < r->n_drafts; i++) fprintf(f, "%s%d", i ? ", " : "", r->draft_blocks[i]);
    fprintf(f, "], \"draft_margins\": [");
    for (int i = 0; i < r->n_drafts; i++) fprintf(f, "%s%.6f", i ? ", " : "", r->draft_margins[i]);
    fprintf(f, "], \"a\": %d, \"emitted\": [", r->a);
    for (int i = 0; i < r->n_emitted; i++) fprintf(f, "%s%d", i ? ", " : "", r->emitted[i]);
    fprintf(f, "], \"bonus\": %d, \"bonus_emitted\": %s", r->bonus, r->bonus_emitted ? "true" : "false");
    if (times) fprintf(f, ", \"ms\": [%.3f, %.3f, %.3f]", 1e3 * r->draft_s, 1e3 * r->verify_s, 1e3 * r->rollback_s);
    fprintf(f, "}\n");
}

/* The rounds by verify width and the draft-length controller's view: enough to see why auto chose
 * what it chose (tokens per round E(K), seconds per round c(K), and their ratio). */
static void write_controller(FILE *f, const ink_gen_stats *st)
{
    fprintf(f, "  \"k_hist\": {");
    for (int K = 1, first = 1; K <= INK_MAX_BLOCK; K++)
        if (st->k_hist[K]) fprintf(f, "%s\"%d\": %d", first ? "" : ", ", K, st->k_hist[K]), first = 0;
    fprintf(f, "},\n  \"controller\": {");
    if (st->ctl_kmax > 0) {
        fprintf(f, "\"k_range\": [1, %d], \"k_best\": %d, \"catch_up_ms_per_drafting_round\": %.5f, \"text_period\": %d,\n    \"acceptance\": [",
                st->ctl_kmax, st->ctl_best, st->ctl_overhead_s * 1e3, st->ctl_text_period);
        for (int j = 0; j + 1 < st->ctl_kmax; j++)
            if (st->ctl_alpha[j] < 0) fprintf(f, "%snull", j ? ", " : "");
            else fprintf(f, "%s%.4f", j ? ", " : "", st->ctl_alpha[j]);
        fprintf(f, "],\n    \"per_k\": [");
        for (int K = 1; K <= st->ctl_kmax; K++)
            fprintf(f, "%s\n      {\"k\": %d, \"rounds_measured\": %d, \"cost_ms\": %.5f, \"yield\": %.4f, "
                       "\"expected_tokens\": %.4f, \"predicted_tok_s\": %.1f}",
                    K > 1 ? "," : "", K, st->ctl_cost_n[K], st->ctl_cost_s[K] * 1e3, st->ctl_yield[K], st->ctl_expected[K],
                    st->ctl_rate[K]);
        fprintf(f, "\n    ]");
    }
    fprintf(f, "}\n}\n");
}

static int write_stats(const char *path, const ink_gen_stats *st, const char *mode, int depth, long dvocab, int capture,
                       int profile, ink_model *m)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "inkling: %s: cannot open for writing\n", path);
        return 1;
    }
    double dec = st->generated_tokens > 1 ? (st->generated_tokens - 1) / fmax(st->decode_s, 1e-9) : 0;
    char bs[16];
    if (st->auto_block) snprintf(bs, sizeof bs, "\"auto\"");
    else snprintf(bs, sizeof bs, "%d", st->k_requested);
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
               "  \"rollback_s\": %.6f,\n  \"block_size\": %s,\n  \"k_min\": %d,\n  \"k_max\": %d,\n"
               "  \"zero_accept_rounds\": %d,\n  \"partial_accept_rounds\": %d,\n  \"full_accept_rounds\": %d,\n"
               "  \"mtp_mode\": \"%s\",\n  \"mtp_depth\": %d,\n  \"reused_prompt_tokens\": %d,\n"
               "  \"plain_equivalent_forwards\": %d,\n  \"target_forwards\": %d,\n  \"draft_vocab\": %ld,\n"
               "  \"rollback\": \"%s\",\n",
            st->drafted ? (double)st->accepted / st->drafted : 0.0, st->prompt_tokens / fmax(st->prefill_s, 1e-9), dec,
            st->prefill_s, st->decode_s, st->draft_s, st->verify_s, st->rollback_s, bs, st->k_min,
            st->k_max, st->zero_accept, st->partial_accept, st->full_accept, mode, depth, st->reused_tokens,
            st->generated_tokens > 0 ? st->generated_tokens - 1 : 0,
            st->generated_tokens > 0 ? st->generated_tokens - 1 - st->round_emitted + st->rounds : 0, dvocab,
            capture ? "commit" : "replay");
    if (m) /* which matmul path ran: float weights f32 or bf16, quantized weights int8 or f32 */
        fprintf(f, "  \"activations\": {\"float_weights\": \"%s\", \"quantized_weights\": \"%s\"},\n",
                ink_model_bf16_activations(m) ? "bf16" : "f32", ink_model_int8_activations(m) ? "int8" : "f32");
    if (profile) cli_profile_json(f, st);
    cli_dist_json(f, m);
    write_controller(f, st);
    return fclose(f) != 0;
}

static void print_timings(const ink_gen_stats *st, int drafting, const char *mode)
{
    int fed = st->prompt_tokens - st->reused_tokens;
    double dec = st->generated_tokens > 1 ? (st->generated_tokens - 1) / fmax(st->decode_s, 1e-9) : 0.0;
    fprintf(stderr, "prompt eval: %d tokens in %.2f ms (%.2f tok/s)%s; eval: %d tokens in %.2f ms (%.2f tok/s)", fed,
            st->prefill_s * 1e3, fed / fmax(st->prefill_s, 1e-9), st->reused_tokens ? " (prefix reused)" : "",
            st->generated_tokens, st->decode_s * 1e3, dec);
    if (drafting) {
        char k[16];
        if (st->auto_block) snprintf(k, sizeof k, "auto");
        else snprintf(k, sizeof k, "%d", st->k_requested);
        fprintf(stderr, "; mtp %s K=%s: %d rounds, %d/%d drafts accepted (%.1f%%), %.3f tokens per round", mode, k,
                st->rounds, st->accepted, st->drafted, st->drafted ? 100.0 * st->accepted / st->drafted : 0.0,
                st->rounds ? (double)st->round_emitted / st->rounds : 0.0);
        if (st->auto_block) { /* the widths chosen, and what the controller expects of its choice */
            fprintf(stderr, "; K chosen:");
            for (int K = 1; K <= INK_MAX_BLOCK; K++)
                if (st->k_hist[K]) fprintf(stderr, " %dx%d", K, st->k_hist[K]);
            int b = st->ctl_best;
            if (b >= 1 && b <= st->ctl_kmax && st->ctl_rate[b] > 0)
                fprintf(stderr, "; best now K=%d (%.2f tokens per %.3f ms round)", b, st->ctl_expected[b],
                        st->ctl_expected[b] / st->ctl_rate[b] * 1e3);
        }
    }
    fprintf(stderr, "\n");
}

/* ---- shared setup --------------------------------------------------------------------- */

typedef struct run {
    gargs a;
    const char *dir;
    char dirbuf[4352];
    ink_model *m;
    ink_drafter *d;
    ink_session *s;
    ink_tokenizer *tok;
    ink_gen_opts o;
    ink_err e;
    const char *cmd;
    long max_ctx;
} run;

static void run_free(run *r)
{
    ink_session_free(r->s);
    ink_drafter_free(r->d);
    ink_tokenizer_free(r->tok);
    cli_dist_note_model(r->m);
    ink_model_free(r->m);
}

static int run_open(run *r, int need_tok, int n_ctx_hint)
{
    gargs *a = &r->a;
    r->dir = ink_cli_model_dir(a->model);
    if (r->dir) snprintf(r->dirbuf, sizeof r->dirbuf, "%s", r->dir), r->dir = r->dirbuf;
    if (!r->dir) {
        fprintf(stderr, "inkling: no model: pass -m DIR (no bundled default model was found)\n");
        return 2;
    }
    if (arg_model_dir("-m", r->dir)) return 1;
    if (a->draft_model && arg_model_dir("--draft-model", ink_cli_model_dir(a->draft_model))) return 1;
    if (need_tok && ink_tokenizer_open(&r->tok, r->dir, &r->e)) return cli_fail(&r->e);
    /* token mode keeps the reference's sampling defaults: generation_config.json is validated only */
    if (cli_model_defaults(r->dir, a->draft_model ? ink_cli_model_dir(a->draft_model) : NULL, &a->smp, need_tok, &a->en))
        return 1;
    if (check_drafting(a, r->cmd, 0, r->dir)) return 2;
    if (a->stats_path && arg_out_file("--stats-json", a->stats_path)) return 1;
    if (a->trace_path && arg_out_file("--trace", a->trace_path)) return 1;
    if (isatty(2)) fprintf(stderr, "loading %s ...\r", r->dir);
    ink_model_opts mo = {.n_threads = (int)a->threads, .activations = a->activations,
                         .expert_parallel = cli_dist_transport(), .no_mmap = a->no_mmap};
    if (ink_model_open(&r->m, r->dir, &mo, &r->e)) return cli_fail(&r->e);
    if (a->check_tensors && ink_model_check_tensors(r->m, &r->e)) return cli_fail(&r->e);
    if (cfg_generation_eos(r->dir, ink_model_n_vocab(r->m))) return 1;
    const char *ddir = a->draft_model ? ink_cli_model_dir(a->draft_model) : r->dir;
    if (strcmp(a->en.draft_kind, "none")) {
        int rc = ink_drafter_open(&r->d, r->m, ddir, &r->e);
        /* the default drafts with the model's own head where it has one, and decodes plainly where not */
        if (rc == INK_E_ABSENT && !strcmp(a->en.draft_kind, "auto") && !a->draft_model) {
            if (check_drafting(a, r->cmd, 1, ddir)) return 2;
            r->e = (ink_err){0};
        } else if (rc)
            return cli_fail(&r->e);
    }
    if (r->d && a->en.dvocab > 0 && ink_drafter_load_vocab(r->d, ddir, (int)a->en.dvocab, &r->e))
        return cli_fail(&r->e);
    long n_ctx = a->n_ctx, max_ctx = ink_model_get_info(r->m)->max_ctx;
    if (!n_ctx && n_ctx_hint > 4096) n_ctx = n_ctx_hint < max_ctx ? n_ctx_hint : max_ctx;
    if (ink_session_create(&r->s, r->m, (int)n_ctx, &r->e)) return cli_fail(&r->e);
    r->max_ctx = max_ctx;
    if (isatty(2)) fprintf(stderr, "%*s\r", (int)strlen(r->dir) + 12, "");
    ink_gen_opts *o = &r->o;
    o->stop_eos = a->stop_eos;
    o->eos = -1;
    o->sampling = cli_sampling_value(&a->smp);
    o->drafter = r->d;
    o->block_size = (int)a->en.block;
    o->block_max = (int)a->block_max;
    o->mtp_mode = !strcmp(a->mtp_mode, "compat") ? INK_MTP_COMPAT : INK_MTP_PER_DEPTH;
    o->capture_commit = a->capture;
    o->cancel = &cancel_flag;
    if (r->tok) o->vocab_limit = ink_tokenizer_n_vocab(r->tok);
    return 0;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "inkling: %s: cannot open prompt file\n", path);
        return NULL;
    }
    size_t n = 0, cap = 4096;
    char *b = malloc(cap);
    for (size_t r; b && (r = fread(b + n, 1, cap - n - 1, f)) > 0;) {
        n += r;
        if (n + 1 == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) free(b);
            b = nb;
        }
    }
    fclose(f);
    if (b) b[n] = 0;
    return b;
}

/* Runs one generation, printing text or ids; returns the exit code. */
static int generate_once(run *r, const int32_t *ids, int n_ids, int text_mode, int chat, ink_tokens *reply)
{
    gargs *a = &r->a;
    int max = (int)(a->n_gen >= 0 ? a->n_gen : text_mode ? 256 : 32);
    int32_t *out = malloc((size_t)(max ? max : 1) * sizeof *out);
    FILE *trace = NULL;
    if (!out) return (fprintf(stderr, "inkling: out of memory\n"), 1);
    if (a->trace_path && !(trace = fopen(a->trace_path, "w"))) {
        free(out);
        return (fprintf(stderr, "inkling: %s: cannot open for writing\n", a->trace_path), 1);
    }
    sink k = {.trace = trace, .show_reasoning = a->show_reasoning, .profile = a->profile};
    ink_profile_enable(a->profile);
    int rc = 0;
    if (text_mode) {
        k.tok = r->tok;
        if (chat ? ink_chat_parser_new(&k.cp, r->tok, &r->e) : ink_detok_new(&k.dt, r->tok, INK_DECODE_SKIP_SPECIAL, &r->e)) {
            free(out);
            if (trace) fclose(trace);
            return cli_fail(&r->e);
        }
    }
    int n_ctx = ink_session_n_ctx(r->s);
    if ((long)n_ids + max > n_ctx && (!r->o.reuse_prefix || a->n_gen >= 0))
        fprintf(stderr, "inkling %s: warning: %d prompt + %d new tokens exceed the context of %d tokens: at most %d "
                        "will be generated (raise -c, up to %ld)\n",
                r->cmd, n_ids, max, n_ctx, n_ids < n_ctx ? n_ctx - n_ids : 0, r->max_ctx);
    r->o.max_tokens = max;
    r->o.on_token = on_token;
    r->o.on_round = on_round;
    r->o.ud = &k;
    r->o.stop_ids = NULL;
    r->o.n_stop_ids = k.cp ? (int)ink_chat_stop_ids(ink_chat_parser_ids(k.cp), &r->o.stop_ids) : 0;
    if (isatty(2) && text_mode) fprintf(stderr, "prefill: %d tokens ...\r", n_ids);
    ink_gen_stats st;
    int n_out = 0;
    memset(&r->e, 0, sizeof r->e);
    int grc = ink_generate(r->s, ids, n_ids, &r->o, out, max, &n_out, &st, &r->e);
    if (grc && grc != INK_E_CANCELLED) rc = cli_fail(&r->e);
    if (text_mode) {
        ink_chat_event ev[4];
        size_t n = 0;
        if (k.cp) {
            ink_chat_parser_finish(k.cp, ev, &n);
            for (size_t i = 0; i < n; i++)
                if (ev[i].type == INK_EV_DELTA) out_text(&k, ev[i].kind == INK_BLOCK_THINKING, ev[i].text, ev[i].len);
        } else {
            const char *t;
            size_t len;
            ink_detok_flush(k.dt, &t, &len);
            out_text(&k, 0, t, len);
        }
        if (k.printed) fputc('\n', stdout);
        fflush(stdout);
    } else if (!rc) {
        for (int i = 0; i < n_out; i++) printf("%s%d", i ? "," : "", out[i]);
        printf("\n");
        fflush(stdout);
    }
    if (ferror(stdout)) {
        fprintf(stderr, "inkling %s: write error on standard output\n", r->cmd);
        if (grc == INK_E_CANCELLED && !interrupted) grc = 0; /* stopped by the write error, not Ctrl-C */
        rc = 1;
    }
    if (!rc || grc == INK_E_CANCELLED) {
        if (grc == INK_E_CANCELLED) fprintf(stderr, "(interrupted)\n");
        print_timings(&st, r->d != NULL, a->mtp_mode);
        if (a->profile) cli_profile_print(stderr, &st);
        if (a->stats_path && write_stats(a->stats_path, &st, r->d ? a->mtp_mode : "none", r->d ? ink_drafter_n_depth(r->d) : 0,
                                         r->d ? a->en.dvocab : 0, a->capture, a->profile, r->m))
            rc = 1;
    }
    if (trace && fclose(trace)) rc = (fprintf(stderr, "inkling: %s: write failed\n", a->trace_path), 1);
    if (reply) {
        for (int i = 0; i < n_out; i++) ink_tokens_push(reply, out[i], NULL);
    }
    ink_tokens_free(&k.reply);
    ink_chat_parser_free(k.cp);
    ink_detok_free(k.dt);
    free(out);
    if (!rc && grc == INK_E_CANCELLED) rc = 130;
    return rc;
}

int cmd_generate(int argc, char **argv)
{
    run r = {0};
    defaults(&r.a);
    r.cmd = "generate";
    int rc = parse(argc, argv, &r.a, "generate");
    if (rc) return rc < 0 ? 0 : rc;
    gargs *a = &r.a;
    int text = a->prompt || a->file;
    if (!!a->ids + !!a->prompt + !!a->file != 1) {
        fprintf(stderr, "inkling generate: give exactly one of --prompt-ids, -p TEXT, -f FILE\n");
        return 2;
    }
    /* token mode mirrors the reference's fixed-length runs: no EOS stop unless asked */
    if (a->stop_eos < 0) a->stop_eos = text;
    if ((rc = check_applies(a, "generate", text, a->raw))) return rc;
    int32_t *ids = NULL;
    int n = 0;
    if (a->ids && arg_ids("--prompt-ids", a->ids, &ids, &n)) return 2;
    signal(SIGINT, on_sigint);
    if ((rc = run_open(&r, text, n + (int)(a->n_gen > 0 ? a->n_gen : 256) + 64))) goto done;
    ink_tokens t = {0};
    if (text) {
        char *body = a->file ? read_file(a->file) : strdup(a->prompt);
        if (!body) {
            rc = 1;
            goto done;
        }
        ink_err ce = {0};
        if (!a->raw && ink_chat_check_tokenizer(r.tok, &ce)) {
            a->raw = 1; /* a plain-text model: its tokenizer has no Inkling chat tokens */
            if (a->system || a->effort || a->show_reasoning)
                fprintf(stderr, "inkling generate: warning: %s is ignored: %s is a plain-text model (no chat format)\n",
                        a->system ? "--system" : a->effort ? "--reasoning-effort" : "--show-reasoning", r.dir);
            if (isatty(2)) fprintf(stderr, "(plain-text model: no chat format, the prompt is used as is)\n");
        }
        if (a->raw) rc = ink_tokenizer_encode(r.tok, body, strlen(body), a->special ? INK_TOK_SPECIAL : 0, &t, &r.e);
        else {
            ink_chat_msg msgs[2];
            size_t nm = 0;
            if (a->system) msgs[nm++] = (ink_chat_msg){.role = INK_ROLE_SYSTEM, .content = a->system};
            msgs[nm++] = (ink_chat_msg){.role = INK_ROLE_USER, .content = body};
            ink_chat_opts co = {.effort = a->effort};
            rc = ink_chat_render(r.tok, msgs, nm, &co, &t, &r.e);
        }
        free(body);
        if (rc) {
            rc = cli_fail(&r.e);
            ink_tokens_free(&t);
            goto done;
        }
        if (!t.n) {
            fprintf(stderr, "inkling generate: the prompt encodes to no tokens\n");
            rc = 1;
            goto done;
        }
        rc = generate_once(&r, t.ids, (int)t.n, 1, !a->raw, NULL);
        ink_tokens_free(&t);
    } else
        rc = generate_once(&r, ids, n, 0, 0, NULL);
done:
    free(ids);
    run_free(&r);
    return rc;
}

/* ---- chat ------------------------------------------------------------------------------ */

/* Closes a reply in the history: a stop other than <|content_model_end_sampling|> is dropped, an
 * open block gets its <|end_message|>, the turn its <|content_model_end_sampling|>. */
static int close_reply(run *r, const ink_chat_ids *c, ink_tokens *hist, const ink_tokens *reply)
{
    size_t n = reply->n;
    if (n && reply->ids[n - 1] == c->end_sampling) n--;
    else if (n && ink_chat_is_stop(c, reply->ids[n - 1])) n--;
    for (size_t i = 0; i < n; i++)
        if (ink_tokens_push(hist, reply->ids[i], &r->e)) return -1;
    ink_chat_output co = {0};
    int open = 0;
    if (!ink_chat_parse(r->tok, reply->ids, n, &co, NULL)) {
        open = co.n && !co.blocks[co.n - 1].closed;
        ink_chat_output_free(&co);
    }
    if (open && ink_tokens_push(hist, c->end_message, &r->e)) return -1;
    return ink_tokens_push(hist, c->end_sampling, &r->e) ? -1 : 0;
}

/* Interactive multi-turn chat. The history is kept as ids (the rendered prompts and the replies as
 * generated), each turn appends its user block to it (no second effort block), so the session's
 * state covers every earlier turn and only the new one is prefilled. /reset starts over. */
int cmd_chat(int argc, char **argv)
{
    run r = {0};
    defaults(&r.a);
    r.cmd = "chat";
    int rc = parse(argc, argv, &r.a, "chat");
    if (rc) return rc < 0 ? 0 : rc;
    if (r.a.prompt || r.a.file || r.a.ids || r.a.raw) {
        fprintf(stderr, "inkling chat: %s is not a chat option (chat reads one message per line on stdin); for one "
                        "prompt use `inkling generate -p TEXT`, or pipe it: echo TEXT | inkling chat\n",
                r.a.prompt ? "-p" : r.a.file ? "-f" : r.a.ids ? "--prompt-ids" : "--raw");
        return 2;
    }
    if ((rc = check_applies(&r.a, "chat", 1, 0))) return rc;
    if (r.a.stop_eos < 0) r.a.stop_eos = 1;
    signal(SIGINT, on_sigint);
    if ((rc = run_open(&r, 1, 0))) {
        run_free(&r);
        return rc;
    }
    if (ink_chat_check_tokenizer(r.tok, &r.e)) {
        fprintf(stderr, "inkling chat: %s has no Inkling chat format (%s); use `inkling generate --raw -p TEXT`\n", r.dir,
                r.e.msg);
        run_free(&r);
        return 1;
    }
    r.o.reuse_prefix = 1;
    /* the prompt cache: a turn that does not extend the history (after /reset, or an edited one)
     * still resumes from the longest common prefix */
    if (ink_session_set_checkpoints(r.s, -1, &r.e)) {
        int frc = cli_fail(&r.e);
        run_free(&r);
        return frc;
    }
    ink_chat_ids cid;
    ink_chat_ids_get(r.tok, &cid, NULL);
    ink_tokens hist = {0};
    char line[65536];
    int tty = isatty(0);
    for (;;) {
        if (tty) fputs("> ", stdout), fflush(stdout);
        interrupted = 0, cancel_flag = 0;
        if (!fgets(line, sizeof line, stdin)) break;
        line[strcspn(line, "\n")] = 0;
        if (!*line) continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            hist.n = 0;
            fprintf(stderr, "(conversation reset)\n");
            continue;
        }
        ink_chat_msg msgs[2];
        size_t nm = 0;
        if (!hist.n && r.a.system) msgs[nm++] = (ink_chat_msg){.role = INK_ROLE_SYSTEM, .content = r.a.system};
        msgs[nm++] = (ink_chat_msg){.role = INK_ROLE_USER, .content = line};
        ink_chat_opts co = {.effort = r.a.effort, .continuation = hist.n > 0};
        memset(&r.e, 0, sizeof r.e);
        if (ink_chat_render(r.tok, msgs, nm, &co, &hist, &r.e)) {
            rc = cli_fail(&r.e);
            break;
        }
        ink_tokens reply = {0};
        int grc = generate_once(&r, hist.ids, (int)hist.n, 1, 1, &reply);
        if (grc && grc != 130) {
            rc = grc;
            ink_tokens_free(&reply);
            break;
        }
        int crc = close_reply(&r, &cid, &hist, &reply);
        ink_tokens_free(&reply);
        if (crc) {
            rc = cli_fail(&r.e);
            break;
        }
    }
    ink_tokens_free(&hist);
    run_free(&r);
    return rc;
}
