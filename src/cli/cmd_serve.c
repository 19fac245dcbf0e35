/* cmd_serve.c — `inkling serve`: flags, model resolution (-m DIR | owner/name | the bundled
 * default), signals; the server itself is src/server/. */
#include "cli/args.h"
#include "cli/cli.h"
#include "dl/hub.h"
#include "inkling.h"
#include "server/server.h"
#include "tok/chat.h"

#include <jansson.h>

#include <arpa/inet.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: inkling serve [-m DIR|OWNER/NAME] [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--alias NAME]\n"
            "         [-c N] [-t/--threads N] [--activations auto|f32|int8|bf16] [--draft-kind auto|none|mtp] [--draft-model DIR]\n"
            "         [--draft-block-size auto|K] [--draft-max K] [--draft-vocab N] [--rollback commit|replay]\n"
            "         [--cache-checkpoints N] [-np/--parallel N]\n"
            "         [--mtp-mode per-depth|compat] [--spec-default on|off] [-n N] [--temp T] [--top-k K]\n"
            "         [--top-p P] [--min-p P] [--seed S] [--repeat-penalty R] [--frequency-penalty F]\n"
            "         [--presence-penalty P] [--repeat-last-n N] [--reasoning-effort E] [--queue-size N]\n"
            "         [--body-limit BYTES] [--sse-ping-interval S] [--max-connections N] [--timeout S] [--quiet]\n"
            "         [--check-tensors] [--no-mmap]   (--host takes an address or a name such as localhost)\n"
            "Without -m the bundled default model is served. See docs/server.md.\n");
}


static const char *env_nonempty(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* A numeric address as is; a name (localhost, a host name) through getaddrinfo, IPv4 first. */
static int resolve_host(const char *host, char *out, size_t n)
{
    unsigned char buf[sizeof(struct in6_addr)];
    if (inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1) {
        snprintf(out, n, "%s", host);
        return 0;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL, *p;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc) {
        fprintf(stderr, "inkling serve: --host %s: cannot resolve: %s\n", host, gai_strerror(rc));
        return -1;
    }
    struct addrinfo *pick = NULL;
    for (p = res; p; p = p->ai_next)
        if (p->ai_family == AF_INET) { pick = p; break; }
    if (!pick) pick = res;
    const void *addr = pick->ai_family == AF_INET ? (const void *)&((struct sockaddr_in *)pick->ai_addr)->sin_addr
                                                  : (const void *)&((struct sockaddr_in6 *)pick->ai_addr)->sin6_addr;
    const char *ok = inet_ntop(pick->ai_family, addr, out, (socklen_t)n);
    freeaddrinfo(res);
    if (!ok) {
        fprintf(stderr, "inkling serve: --host %s: cannot resolve\n", host);
        return -1;
    }
    return 0;
}

/* The command line of `serve`. */
typedef struct sargs {
    const char *model, *host, *api_key, *alias, *draft_model, *effort, *mtp_mode, *hold;
    int act, quiet, spec_default, check, no_mmap;
    long block_max, ckpts, parallel, port, threads, n_ctx, replay, queue, max_conn, timeout, n_predict, body_limit;
    double ping;
    cli_sampling smp;
    cli_engine en;
} sargs;

/* Parses argv into *s (defaults first). Returns 0, -1 after --help, or the exit code 2 after a message. */
static int parse(int argc, char **argv, sargs *s)
{
    *s = (sargs){.host = "127.0.0.1", .mtp_mode = "per-depth", .act = INK_ACT_AUTO, .spec_default = 1, .ckpts = -1, .parallel = 4, .port = 8080,
                 .queue = 8, .max_conn = 64, .timeout = 120, .n_predict = -1, .body_limit = 8L << 20, .ping = 15,
                 .en = {.draft_kind = "auto"}};
    cli_sampling_init(&s->smp);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int sf = cli_sampling_flag(argc, argv, &i, &s->smp);
        if (sf) {
            if (sf < 0) return 2;
            continue;
        }
#define VAL() if (!(v = arg_value(argc, argv, &i))) return 2
#define INT(lo, hi, dst) do { VAL(); if (arg_int(a, v, lo, hi, &dst)) return 2; } while (0)
#define FLT(lo, hi, dst) do { VAL(); if (arg_float(a, v, lo, hi, &dst)) return 2; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return -1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            VAL();
            s->model = v;
        } else if (!strcmp(a, "--host")) {
            VAL();
            s->host = v;
        } else if (!strcmp(a, "--port")) INT(0, 65535, s->port);
        else if (!strcmp(a, "--api-key")) {
            VAL();
            s->api_key = v;
        } else if (!strcmp(a, "--alias")) {
            VAL();
            s->alias = v;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) INT(1, 256, s->threads);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) INT(1, 1L << 30, s->n_ctx);
        else if (!strcmp(a, "--activations")) {
            VAL();
            if ((s->act = ink_activations_parse(v)) < 0) {
                fprintf(stderr, "inkling serve: --activations must be auto, f32, int8 or bf16, found '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--draft-kind") || !strcmp(a, "--spec-type")) {
            VAL();
            if (!strcmp(v, "draft-mtp")) v = "mtp";
            if (strcmp(v, "none") && strcmp(v, "mtp") && strcmp(v, "auto")) {
                fprintf(stderr, "inkling serve: %s must be auto, none or mtp, found '%s'\n", a, v);
                return 2;
            }
            s->en.draft_kind = v, s->en.set_kind = 1;
        } else if (!strcmp(a, "--mtp")) s->en.draft_kind = "mtp", s->en.set_kind = 1;
        else if (!strcmp(a, "--draft-model")) {
            VAL();
            s->draft_model = v;
        } else if (!strcmp(a, "--draft-block-size")) {
            VAL();
            if (!strcmp(v, "auto")) s->en.block = 0;
            else if (arg_int(a, v, 1, INK_MAX_BLOCK, &s->en.block)) return 2;
            s->en.set_block = 1;
        } else if (!strcmp(a, "--draft-max")) INT(1, INK_MAX_BLOCK, s->block_max);
        else if (!strcmp(a, "--draft-vocab")) { INT(0, 1L << 30, s->en.dvocab); s->en.set_dvocab = 1; }
        else if (!strcmp(a, "--cache-checkpoints")) INT(0, 64, s->ckpts);
        else if (!strcmp(a, "-np") || !strcmp(a, "--parallel")) INT(1, 64, s->parallel);
        else if (!strcmp(a, "--rollback")) {
            VAL();
            if (strcmp(v, "commit") && strcmp(v, "replay")) {
                fprintf(stderr, "inkling serve: --rollback must be commit or replay, found '%s'\n", v);
                return 2;
            }
            s->replay = !strcmp(v, "replay");
        }
        else if (!strcmp(a, "--mtp-mode")) {
            VAL();
            if (strcmp(v, "per-depth") && strcmp(v, "compat")) {
                fprintf(stderr, "inkling serve: --mtp-mode must be per-depth or compat, found '%s'\n", v);
                return 2;
            }
            s->mtp_mode = v;
        } else if (!strcmp(a, "--spec-default")) {
            VAL();
            if (strcmp(v, "on") && strcmp(v, "off")) {
                fprintf(stderr, "inkling serve: --spec-default must be on or off, found '%s'\n", v);
                return 2;
            }
            s->spec_default = !strcmp(v, "on");
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict") || !strcmp(a, "--max-tokens")) INT(-1, 1L << 30, s->n_predict);
        else if (!strcmp(a, "--reasoning-effort")) {
            VAL();
            s->effort = v;
        } else if (!strcmp(a, "--queue-size")) INT(0, 1 << 20, s->queue);
        else if (!strcmp(a, "--body-limit")) INT(1024, 1L << 30, s->body_limit);
        else if (!strcmp(a, "--sse-ping-interval")) FLT(0.001, 86400, s->ping);
        else if (!strcmp(a, "--max-connections")) INT(1, 4096, s->max_conn);
        else if (!strcmp(a, "--timeout")) INT(1, 86400, s->timeout);
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) s->quiet = 1;
        else if (!strcmp(a, "--check-tensors")) s->check = 1;
        else if (!strcmp(a, "--no-mmap")) s->no_mmap = 1;
        else if (!strcmp(a, "--debug-hold")) {
            VAL();
            s->hold = v;
        }
        else {
            fprintf(stderr, "inkling serve: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
#undef VAL
#undef INT
#undef FLT
    }
    if (!s->api_key) s->api_key = env_nonempty("INKLING_API_KEY");
    if (s->effort) {
        double x;
        ink_err ee = {0};
        if (ink_chat_effort(s->effort, &x, &ee)) {
            fprintf(stderr, "inkling serve: --reasoning-effort: %s\n", ee.msg);
            return 2;
        }
    }
    return 0;
}

/* -m DIR | OWNER/NAME (and --draft-model likewise) to directories; without -m the bundled default.
 * s->draft_model is replaced by its resolved directory. Returns 0 or the exit code after a message. */
static int resolve_dirs(sargs *s, char *dir, char *ddir, size_t n)
{
    if (!s->model) {
        const char *d = ink_default_model_dir();
        if (!d || strlen(d) >= n) {
            fprintf(stderr, "inkling serve: no model: pass -m DIR (no bundled default model was found)\n");
            return 2;
        }
        snprintf(dir, n, "%s", d);
        return 0;
    }
    char cache[PATH_MAX];
    ink_err ce = {0}, e = {0};
    int have_cache = ink_hub_default_cache_dir(env_nonempty("INKLING_CACHE_DIR"), env_nonempty("XDG_CACHE_HOME"),
                                               env_nonempty("HOME"), cache, sizeof cache, &ce) == INK_OK;
    if (ink_hub_model_arg(s->model, have_cache ? cache : NULL, dir, n, &e)) {
        fprintf(stderr, "inkling serve: -m %s: %s\n", s->model, e.msg);
        return 1;
    }
    if (s->draft_model) {
        ink_err de = {0};
        if (ink_hub_model_arg(s->draft_model, have_cache ? cache : NULL, ddir, n, &de)) {
            fprintf(stderr, "inkling serve: --draft-model %s: %s\n", s->draft_model, de.msg);
            return 1;
        }
        s->draft_model = ddir;
    }
    return 0;
}

/* The server's options from the parsed, defaulted command line. */
static ink_server_opts server_opts(const sargs *s, const char *dir, const char *host)
{
    ink_server_opts o = {0};
    o.host = host, o.port = (int)s->port, o.api_key = s->api_key, o.model_dir = dir;
    o.model_id = s->alias ? s->alias : s->model;
    /* auto: the model's own head where it has one (a named --draft-model must have one) */
    o.draft = !strcmp(s->en.draft_kind, "none") ? 0 : !strcmp(s->en.draft_kind, "mtp") || s->draft_model ? 1 : 2;
    o.draft_opts_set = s->en.set_block || s->block_max > 0 || s->en.set_dvocab;
    o.block_max = (int)s->block_max;
    o.cache_checkpoints = (int)s->ckpts;
    o.parallel = (int)s->parallel;
    o.draft_dir = s->draft_model, o.spec_default = s->spec_default;
    o.draft_vocab = (int)s->en.dvocab, o.rollback_replay = (int)s->replay;
    o.block_size = (int)s->en.block, o.mtp_mode = !strcmp(s->mtp_mode, "compat") ? INK_MTP_COMPAT : INK_MTP_PER_DEPTH;
    o.activations = s->act, o.no_mmap = s->no_mmap;
    o.expert_parallel = cli_dist_transport();
    o.n_threads = (int)s->threads, o.n_ctx = (int)s->n_ctx, o.queue_max = (int)s->queue, o.body_max = (size_t)s->body_limit;
    o.ping_s = s->ping, o.max_conn = (int)s->max_conn, o.timeout_s = (int)s->timeout, o.default_max_tokens = (int)s->n_predict;
    o.sampling = cli_sampling_value(&s->smp);
    o.seed_fixed = s->smp.seed_set, o.effort = s->effort, o.debug_hold = s->hold;
    o.check_tensors = s->check;
    o.log = s->quiet ? NULL : stderr;
    return o;
}

/* Starts the server and runs it until SIGINT / SIGTERM or until it fails. Returns the exit code. */
static int run_server(const ink_server_opts *o, int quiet)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    ink_err e = {0};
    ink_server *S;
    if (ink_server_start(&S, o, &e)) {
        fprintf(stderr, "inkling serve: %s: %s\n", ink_status_str(e.code), e.msg);
        return 1;
    }
    const char *host = o->host;
    fprintf(stderr, "inkling serve: listening on http://%s%s%s:%d (model %s%s)\n", strchr(host, ':') ? "[" : "", host,
            strchr(host, ':') ? "]" : "", ink_server_port(S), o->model_dir, o->draft ? ", mtp drafter" : "");
    fflush(stderr);
    int rc = 0;
    while (!g_stop) {
        if (ink_server_state(S, &e) == INK_SERVER_FAILED) {
            fprintf(stderr, "inkling serve: %s: %s\n", ink_status_str(e.code), e.msg);
            rc = 1;
            break;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (!quiet && !rc) fprintf(stderr, "inkling serve: shutting down\n");
    ink_server_stop(S);
    return rc;
}

int cmd_serve(int argc, char **argv)
{
    sargs s;
    int rc = parse(argc, argv, &s);
    if (rc) return rc < 0 ? 0 : rc;
    char dir[PATH_MAX], ddir[PATH_MAX];
    if ((rc = resolve_dirs(&s, dir, ddir, sizeof dir))) return rc;
    if (arg_model_dir("-m", dir)) return 1;
    if (cli_model_defaults(dir, s.draft_model, &s.smp, 1, &s.en)) return 1;
    if (!strcmp(s.en.draft_kind, "none") && (s.en.set_block || s.block_max)) {
        fprintf(stderr, "inkling serve: %s needs a drafter (not with --draft-kind none)\n",
                s.en.set_block ? "--draft-block-size" : "--draft-max");
        return 2;
    }
    /* names resolve here (the server binds numeric addresses): localhost, a host name */
    char hostbuf[INET6_ADDRSTRLEN];
    if (resolve_host(s.host, hostbuf, sizeof hostbuf)) return 1;
    if (!strcmp(s.en.draft_kind, "none") && s.draft_model) {
        fprintf(stderr, "inkling serve: --draft-model needs --draft-kind mtp\n");
        return 2;
    }
    ink_server_opts o = server_opts(&s, dir, hostbuf);
    return run_server(&o, s.quiet);
}
