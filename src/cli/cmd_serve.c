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
            "         [-c N] [-t/--threads N] [--activations auto|f32|int8] [--draft-kind auto|none|mtp] [--draft-model DIR]\n"
            "         [--draft-block-size auto|K] [--draft-max K] [--draft-vocab N] [--rollback commit|replay]\n"
            "         [--mtp-mode per-depth|compat] [--spec-default on|off] [-n N] [--temp T] [--top-k K]\n"
            "         [--top-p P] [--min-p P] [--seed S] [--repeat-penalty R] [--frequency-penalty F]\n"
            "         [--presence-penalty P] [--repeat-last-n N] [--reasoning-effort E] [--queue-size N]\n"
            "         [--body-limit BYTES] [--sse-ping-interval S] [--max-connections N] [--timeout S] [--quiet]\n"
            "         [--check-tensors]   (--host takes an address or a name such as localhost)\n"
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

int cmd_serve(int argc, char **argv)
{
    const char *model = NULL, *host = "127.0.0.1", *api_key = NULL, *alias = NULL, *draft_model = NULL, *effort = NULL;
    const char *draft_kind = "auto", *mtp_mode = "per-depth", *hold = NULL;
    int act = INK_ACT_AUTO;
    int set_kind = 0, set_block = 0, set_dvocab = 0;
    long block_max = 0;
    long port = 8080, threads = 0, n_ctx = 0, block = 0, dvocab = 0, replay = 0, queue = 8, max_conn = 64, timeout = 120, n_predict = -1;
    long top_k = 40, seed = 0, last_n = 64, body_limit = 8L << 20;
    double temp = 0.8, top_p = 0.95, min_p = 0.05, rep = 1.0, freq = 0.0, pres = 0.0, ping = 15;
    int seed_set = 0, quiet = 0, spec_default = 1, set = 0, check = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
#define VAL() if (!(v = arg_value(argc, argv, &i))) return 2
#define INT(lo, hi, dst) do { VAL(); if (arg_int(a, v, lo, hi, &dst)) return 2; } while (0)
#define FLT(lo, hi, dst) do { VAL(); if (arg_float(a, v, lo, hi, &dst)) return 2; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            VAL();
            model = v;
        } else if (!strcmp(a, "--host")) {
            VAL();
            host = v;
        } else if (!strcmp(a, "--port")) INT(0, 65535, port);
        else if (!strcmp(a, "--api-key")) {
            VAL();
            api_key = v;
        } else if (!strcmp(a, "--alias")) {
            VAL();
            alias = v;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) INT(1, 256, threads);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) INT(1, 1L << 30, n_ctx);
        else if (!strcmp(a, "--activations")) {
            VAL();
            if ((act = ink_activations_parse(v)) < 0) {
                fprintf(stderr, "inkling serve: --activations must be auto, f32 or int8, found '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--draft-kind") || !strcmp(a, "--spec-type")) {
            VAL();
            if (!strcmp(v, "draft-mtp")) v = "mtp";
            if (strcmp(v, "none") && strcmp(v, "mtp") && strcmp(v, "auto")) {
                fprintf(stderr, "inkling serve: %s must be auto, none or mtp, found '%s'\n", a, v);
                return 2;
            }
            draft_kind = v, set_kind = 1;
        } else if (!strcmp(a, "--mtp")) draft_kind = "mtp", set_kind = 1;
        else if (!strcmp(a, "--draft-model")) {
            VAL();
            draft_model = v;
        } else if (!strcmp(a, "--draft-block-size")) {
            VAL();
            if (!strcmp(v, "auto")) block = 0;
            else if (arg_int(a, v, 1, INK_MAX_BLOCK, &block)) return 2;
            set_block = 1;
        } else if (!strcmp(a, "--draft-max")) INT(1, INK_MAX_BLOCK, block_max);
        else if (!strcmp(a, "--draft-vocab")) { INT(0, 1L << 30, dvocab); set_dvocab = 1; }
        else if (!strcmp(a, "--rollback")) {
            VAL();
            if (strcmp(v, "commit") && strcmp(v, "replay")) {
                fprintf(stderr, "inkling serve: --rollback must be commit or replay, found '%s'\n", v);
                return 2;
            }
            replay = !strcmp(v, "replay");
        }
        else if (!strcmp(a, "--mtp-mode")) {
            VAL();
            if (strcmp(v, "per-depth") && strcmp(v, "compat")) {
                fprintf(stderr, "inkling serve: --mtp-mode must be per-depth or compat, found '%s'\n", v);
                return 2;
            }
            mtp_mode = v;
        } else if (!strcmp(a, "--spec-default")) {
            VAL();
            if (strcmp(v, "on") && strcmp(v, "off")) {
                fprintf(stderr, "inkling serve: --spec-default must be on or off, found '%s'\n", v);
                return 2;
            }
            spec_default = !strcmp(v, "on");
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict") || !strcmp(a, "--max-tokens")) INT(-1, 1L << 30, n_predict);
        else if (!strcmp(a, "--temp") || !strcmp(a, "--temperature")) { FLT(0, 100, temp); set |= 1; }
        else if (!strcmp(a, "--top-k")) { INT(0, 1L << 30, top_k); set |= 2; }
        else if (!strcmp(a, "--top-p")) { FLT(0, 1, top_p); set |= 4; }
        else if (!strcmp(a, "--min-p")) { FLT(0, 1, min_p); set |= 8; }
        else if (!strcmp(a, "--repeat-penalty")) { FLT(0, 10, rep); set |= 16; }
        else if (!strcmp(a, "--frequency-penalty")) FLT(-10, 10, freq);
        else if (!strcmp(a, "--presence-penalty")) FLT(-10, 10, pres);
        else if (!strcmp(a, "--repeat-last-n")) INT(-1, 1L << 30, last_n);
        else if (!strcmp(a, "-s") || !strcmp(a, "--seed")) {
            INT(0, 0x7fffffffL, seed);
            seed_set = 1;
        } else if (!strcmp(a, "--reasoning-effort")) {
            VAL();
            effort = v;
        } else if (!strcmp(a, "--queue-size")) INT(0, 1 << 20, queue);
        else if (!strcmp(a, "--body-limit")) INT(1024, 1L << 30, body_limit);
        else if (!strcmp(a, "--sse-ping-interval")) FLT(0.001, 86400, ping);
        else if (!strcmp(a, "--max-connections")) INT(1, 4096, max_conn);
        else if (!strcmp(a, "--timeout")) INT(1, 86400, timeout);
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) quiet = 1;
        else if (!strcmp(a, "--check-tensors")) check = 1;
        else if (!strcmp(a, "--debug-hold")) {
            VAL();
            hold = v;
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
    if (!api_key) api_key = env_nonempty("INKLING_API_KEY");
    if (effort) {
        double x;
        ink_err ee = {0};
        if (ink_chat_effort(effort, &x, &ee)) {
            fprintf(stderr, "inkling serve: --reasoning-effort: %s\n", ee.msg);
            return 2;
        }
    }

    char dir[PATH_MAX], ddir[PATH_MAX];
    ink_err e = {0};
    if (model) {
        char cache[PATH_MAX];
        ink_err ce = {0};
        int have_cache = ink_hub_default_cache_dir(env_nonempty("INKLING_CACHE_DIR"), env_nonempty("XDG_CACHE_HOME"),
                                                   env_nonempty("HOME"), cache, sizeof cache, &ce) == INK_OK;
        if (ink_hub_model_arg(model, have_cache ? cache : NULL, dir, sizeof dir, &e)) {
            fprintf(stderr, "inkling serve: -m %s: %s\n", model, e.msg);
            return 1;
        }
        if (draft_model) {
            ink_err de = {0};
            if (ink_hub_model_arg(draft_model, have_cache ? cache : NULL, ddir, sizeof ddir, &de)) {
                fprintf(stderr, "inkling serve: --draft-model %s: %s\n", draft_model, de.msg);
                return 1;
            }
            draft_model = ddir;
        }
    } else {
        const char *d = ink_default_model_dir();
        if (!d || strlen(d) >= sizeof dir) {
            fprintf(stderr, "inkling serve: no model: pass -m DIR (no bundled default model was found)\n");
            return 2;
        }
        snprintf(dir, sizeof dir, "%s", d);
    }
    if (arg_model_dir("-m", dir)) return 1;
    if (cfg_generation(dir, set, &temp, &top_k, &top_p, &min_p, &rep)) return 1;
    if (cfg_inkling(dir, &draft_kind, set_kind, &block, set_block, &dvocab, set_dvocab)) return 1;
    if (!strcmp(draft_kind, "none") && (set_block || block_max)) {
        fprintf(stderr, "inkling serve: %s needs a drafter (not with --draft-kind none)\n",
                set_block ? "--draft-block-size" : "--draft-max");
        return 2;
    }
    /* a draft vocabulary named by inkling.json applies only where the drafter directory has the ranking */
    char dvp[4200];
    snprintf(dvp, sizeof dvp, "%s/draft_vocab.json", draft_model ? draft_model : dir);
    if (dvocab > 0 && !set_dvocab && access(dvp, F_OK) != 0) dvocab = 0;
    /* names resolve here (the server binds numeric addresses): localhost, a host name */
    char hostbuf[INET6_ADDRSTRLEN];
    if (resolve_host(host, hostbuf, sizeof hostbuf)) return 1;
    host = hostbuf;
    if (!strcmp(draft_kind, "none") && draft_model) {
        fprintf(stderr, "inkling serve: --draft-model needs --draft-kind mtp\n");
        return 2;
    }

    ink_server_opts o = {0};
    o.host = host, o.port = (int)port, o.api_key = api_key, o.model_dir = dir;
    o.model_id = alias ? alias : model;
    /* auto: the model's own head where it has one (a named --draft-model must have one) */
    o.draft = !strcmp(draft_kind, "none") ? 0 : !strcmp(draft_kind, "mtp") || draft_model ? 1 : 2;
    o.draft_opts_set = set_block || block_max > 0 || set_dvocab;
    o.block_max = (int)block_max;
    o.draft_dir = draft_model, o.spec_default = spec_default;
    o.draft_vocab = (int)dvocab, o.rollback_replay = (int)replay;
    o.block_size = (int)block, o.mtp_mode = !strcmp(mtp_mode, "compat") ? INK_MTP_COMPAT : INK_MTP_PER_DEPTH;
    o.activations = act;
    o.n_threads = (int)threads, o.n_ctx = (int)n_ctx, o.queue_max = (int)queue, o.body_max = (size_t)body_limit;
    o.ping_s = ping, o.max_conn = (int)max_conn, o.timeout_s = (int)timeout, o.default_max_tokens = (int)n_predict;
    o.sampling = (ink_sampling){.temp = (float)temp, .top_k = (int)top_k, .top_p = (float)top_p, .min_p = (float)min_p,
                                .seed = (uint64_t)seed, .repeat_penalty = (float)rep, .frequency_penalty = (float)freq,
                                .presence_penalty = (float)pres, .penalty_last_n = (int)last_n};
    o.seed_fixed = seed_set, o.effort = effort, o.debug_hold = hold;
    o.check_tensors = check;
    o.log = quiet ? NULL : stderr;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    ink_server *S;
    if (ink_server_start(&S, &o, &e)) {
        fprintf(stderr, "inkling serve: %s: %s\n", ink_status_str(e.code), e.msg);
        return 1;
    }
    fprintf(stderr, "inkling serve: listening on http://%s%s%s:%d (model %s%s)\n", strchr(host, ':') ? "[" : "", host,
            strchr(host, ':') ? "]" : "", ink_server_port(S), dir, o.draft ? ", mtp drafter" : "");
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
