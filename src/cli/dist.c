/* dist.c — `mpirun -np N inkling generate|logits|chat|serve ...` (or `--parallel expert`): expert
 * parallelism over MPI (issue 19, docs/distributed.md). The library knows only the transport of
 * inkling.h (ink_ep_transport); this file is its MPI implementation and the job's start and end:
 *
 *   start  every rank: MPI_Init, a fingerprint of the checkpoint (FNV-1a 64 of config.json, the
 *          index, the safetensors files' names and sizes, and --activations) gathered by all:
 *          a mismatch ends every rank with a message naming the rank and the model directory.
 *          Ranks > 0 then open the model (their share of the experts is all they touch) and report;
 *          a rank that cannot ends the job with its message (which names the file) on every rank.
 *   run    rank 0 runs the command; its model is opened with cli_dist_transport(). Ranks > 0 serve
 *          (ink_ep_serve) until rank 0's stop. A rank that dies ends the job: mpirun notices the
 *          exit and kills the others, naming the rank.
 *   end    rank 0 sends the stop; every rank's peak RSS is gathered and printed by rank 0 with the
 *          exchange statistics (stderr), then MPI_Finalize.
 * Built without MPI (no -DINK_HAVE_MPI) it only refuses `--parallel expert`. */
#include "cli/cli.h"
#include "inkling.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#ifdef INK_HAVE_MPI
#include <mpi.h>
#endif

static ink_ep_transport tr;     /* n_ranks 0: not distributed */
static ink_ep_stats last_stats; /* rank 0's model, saved before it is freed */
static int have_stats;

const ink_ep_transport *cli_dist_transport(void) { return tr.n_ranks > 1 ? &tr : NULL; }

void cli_dist_note_model(const ink_model *m)
{
    if (!tr.n_ranks || !m) return;
    ink_model_ep_stats(m, &last_stats);
    have_stats = 1;
}

void cli_dist_json(FILE *f, ink_model *m)
{
    if (!cli_dist_transport() || !m) return;
    ink_ep_stats s;
    ink_model_ep_stats(m, &s);
    static ink_ep_rank rk[1024];
    ink_err e = {0};
    int n = ink_ep_ranks(m, rk, 1024, &e);
    fprintf(f, "  \"expert_parallel\": {\"ranks\": %d, \"moe_layers\": %llu, \"round_trips\": %llu, \"requests\": %llu, "
               "\"rows\": %llu, \"bytes_sent\": %llu, \"bytes_recv\": %llu, \"exchange_seconds\": %.6f, \"per_rank\": [",
            s.n_ranks, s.moe_layers, s.exchanges, s.requests, s.rows, s.bytes_sent, s.bytes_recv, s.seconds);
    for (int r = 0; r < n; r++)
        fprintf(f, "%s\n    {\"rank\": %d, \"experts\": [%d, %d], \"peak_rss_bytes\": %lld, \"requests_served\": %llu}",
                r ? "," : "", rk[r].rank, rk[r].expert0, rk[r].expert1, rk[r].peak_rss_kb * 1024, rk[r].requests);
    fprintf(f, "\n  ]},\n");
}

/* Removes `--parallel expert` from argv; 1 if it was there. Other values are left to the command
 * (serve's `--parallel N` is its slot count). */
static int take_parallel(int *argc, char **argv)
{
    for (int i = 1; i + 1 < *argc; i++) {
        if (strcmp(argv[i], "--parallel") || strcmp(argv[i + 1], "expert")) continue;
        memmove(argv + i, argv + i + 2, (size_t)(*argc - i - 1) * sizeof *argv); /* keeps argv[argc] NULL */
        *argc -= 2;
        return 1;
    }
    return 0;
}

#ifndef INK_HAVE_MPI

int cli_dist_begin(int *argc, char **argv, int *worker_rc)
{
    *worker_rc = -1;
    int p = take_parallel(argc, argv);
    if (p) {
        fprintf(stderr, "inkling: --parallel expert: this build has no MPI (install libopenmpi-dev and run make; "
                        "see docs/distributed.md)\n");
        return 2;
    }
    return 0;
}

int cli_dist_end(int rc) { return rc; }

const char *cli_dist_build(void) { return NULL; }

#else

#define TAG 19

const char *cli_dist_build(void)
{
    static char v[MPI_MAX_LIBRARY_VERSION_STRING + 32];
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int n = 0;
    MPI_Get_library_version(lib, &n); /* callable before MPI_Init */
    lib[strcspn(lib, ",\n")] = 0;
    snprintf(v, sizeof v, "MPI (%s)", lib);
    return v;
}

static int launched_by_mpirun(void)
{
    const char *v[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"};
    for (int i = 0; i < 3; i++)
        if (getenv(v[i])) return 1; /* start-up only */
    return 0;
}

static void mpi_fail(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "inkling: rank %d: %s; ending the job\n", tr.rank, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static int mpi_send(void *ctx, int to, const void *buf, size_t n)
{
    if (n > (size_t)0x7fffffff) mpi_fail(ctx, "message over 2 GiB");
    MPI_Send(buf, (int)n, MPI_BYTE, to, TAG, MPI_COMM_WORLD); /* MPI_ERRORS_ARE_FATAL: a failure ends the job */
    return 0;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* MPI_Probe spins: an idle rank (a server between requests) would burn a core for as long as it
 * waits. This polls for SPIN_S (longer than the dense work between two MoE layers of a step, ~1-2
 * ms on the large models, so requests and replies within a step are caught spinning), then sleeps
 * between polls, 50 us at first, 1 ms once idle for 50 ms: the first request after an idle spell
 * waits up to 1 ms more. */
#define SPIN_S 5e-3
static int mpi_probe(void *ctx, int from, size_t *n)
{
    (void)ctx;
    MPI_Status st;
    int cnt = 0, flag = 0;
    double t0 = now_s();
    for (;;) {
        MPI_Iprobe(from, TAG, MPI_COMM_WORLD, &flag, &st);
        if (flag) break;
        double idle = now_s() - t0;
        if (idle < SPIN_S) continue;
        struct timespec ts = {0, idle < 50e-3 ? 50000 : 1000000};
        nanosleep(&ts, NULL);
    }
    MPI_Get_count(&st, MPI_BYTE, &cnt);
    *n = (size_t)cnt;
    return 0;
}

static int mpi_recv(void *ctx, int from, void *buf, size_t n)
{
    (void)ctx;
    MPI_Recv(buf, (int)n, MPI_BYTE, from, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return 0;
}

/* What every rank reads from argv: the command, -m, -t, --activations. */
typedef struct dargs {
    const char *cmd, *model;
    int threads, activations;
} dargs;

static void parse_args(int argc, char **argv, dargs *d)
{
    memset(d, 0, sizeof *d);
    d->cmd = argc > 1 ? argv[1] : "";
    for (int i = 2; i + 1 < argc; i++) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) d->model = v;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) d->threads = atoi(v);
        else if (!strcmp(a, "--activations")) d->activations = ink_activations_parse(v);
    }
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static uint64_t fnv_file(uint64_t h, const char *path, int *ok)
{
    FILE *f = fopen(path, "rb");
    if (!f) return *ok = 0, h;
    char buf[8192];
    for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) h = fnv(h, buf, n);
    fclose(f);
    return *ok = 1, h;
}

/* FNV-1a of what the model loader reads (every rank opens the same): config.json and
 * model.safetensors.index.json (contents), every *.safetensors but the MTP head's mtp*.safetensors
 * (names and sizes, sorted), and the --activations option. 0 if config.json cannot be read. The
 * tokenizer, generation_config.json and the MTP head are rank 0's alone. */
static uint64_t fingerprint(const char *dir, int activations)
{
    uint64_t h = 14695981039346656037ull;
    char path[4352];
    int ok;
    snprintf(path, sizeof path, "%s/config.json", dir);
    h = fnv_file(h, path, &ok);
    if (!ok) return 0;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    h = fnv_file(h, path, &ok);
    DIR *d = opendir(dir);
    if (!d) return 0;
    char *names[4096];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 4096;) {
        size_t l = strlen(e->d_name);
        if (l > 12 && !strcmp(e->d_name + l - 12, ".safetensors") && strncmp(e->d_name, "mtp", 3))
            if ((names[n] = strdup(e->d_name))) n++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n; i++) {
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        long long sz = stat(path, &st) ? -1 : (long long)st.st_size;
        h = fnv(h, names[i], strlen(names[i]) + 1);
        h = fnv(h, &sz, sizeof sz);
        free(names[i]);
    }
    return fnv(h, &activations, sizeof activations);
}

/* Every rank's fingerprint; 0 when all match (else messages, on rank 0). */
static int check_fingerprints(const char *dir, uint64_t mine)
{
    uint64_t all[1024];
    MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    int bad = 0;
    for (int r = 0; r < tr.n_ranks; r++) {
        if (all[r] && all[r] == all[0]) continue;
        bad = 1;
        if (r == tr.rank && !mine)
            fprintf(stderr, "inkling: rank %d: cannot read the checkpoint %s (config.json)\n", r, dir);
        else if (r == tr.rank)
            fprintf(stderr, "inkling: rank %d: checkpoint %s differs from rank 0's (hash of config.json, shard names and "
                            "sizes, --activations: %016llx vs %016llx): every rank needs the same checkpoint files\n",
                    r, dir, (unsigned long long)mine, (unsigned long long)all[0]);
        if (!tr.rank && r && all[r] && all[0])
            fprintf(stderr, "inkling: rank %d's checkpoint does not match rank 0's %s; ending the job\n", r, dir);
    }
    return bad;
}

static ink_model *worker_model;

/* A rank > 0 opens the model; every rank learns who could not (0: all could). */
static int open_shares(const dargs *d, const char *dir)
{
    int ok = 1;
    ink_err e = {0};
    if (tr.rank) {
        ink_model_opts o = {.n_threads = d->threads, .activations = d->activations, .expert_parallel = &tr};
        if (ink_model_open(&worker_model, dir, &o, &e)) {
            fprintf(stderr, "inkling: rank %d: cannot load its share of %s: %s\n", tr.rank, dir, e.msg);
            ok = 0;
        }
    }
    int all[1024];
    MPI_Allgather(&ok, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    int bad = 0;
    for (int r = 1; r < tr.n_ranks; r++)
        if (!all[r]) {
            bad = 1;
            if (!tr.rank) fprintf(stderr, "inkling: rank %d could not load its share of the checkpoint (its message above); ending the job\n", r);
        }
    return bad;
}

static int supported(const char *cmd)
{
    const char *ok[] = {"generate", "logits", "chat", "serve"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(cmd, ok[i])) return 1;
    return 0;
}

static int serve_share(void)
{
    ink_err e = {0};
    int rc = ink_ep_serve(worker_model, &e);
    if (rc) mpi_fail(NULL, e.msg);
    ink_model_ep_stats(worker_model, &last_stats);
    ink_model_free(worker_model);
    worker_model = NULL;
    return cli_dist_end(0);
}

/* The checks every rank makes on its own arguments before the job starts (ranks may be launched
 * with different ones: MPMD); they decide together. Rank 0's messages are printed, and another
 * rank's when rank 0 had none (the same message from every rank would say nothing more). Returns
 * the model directory (static) with *rc 0, or NULL with *rc the exit code. */
static const char *start_checks(const dargs *d, int provided, int *rc)
{
    static char dirbuf[4352];
    char msg[512] = "";
    const char *dir = NULL;
    *rc = 0;
    if (!supported(d->cmd))
        snprintf(msg, sizeof msg, "%s: not a command that runs across ranks (generate, logits, chat, serve)", d->cmd), *rc = 2;
    else if (provided < MPI_THREAD_SERIALIZED && !strcmp(d->cmd, "serve"))
        snprintf(msg, sizeof msg, "serve: this MPI does not support MPI_THREAD_SERIALIZED"), *rc = 1;
    else if (!(dir = ink_cli_model_dir(d->model)))
        snprintf(msg, sizeof msg, "no model: pass -m DIR (no bundled default model was found)"), *rc = 2;
    int all[1024];
    MPI_Allgather(rc, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    if (*rc && (!tr.rank || !all[0])) fprintf(stderr, "inkling: rank %d: %s\n", tr.rank, msg);
    for (int r = 0; r < tr.n_ranks && !*rc; r++)
        if (all[r]) *rc = all[r];
    if (*rc) return NULL;
    snprintf(dirbuf, sizeof dirbuf, "%s", dir);
    return dirbuf;
}

int cli_dist_begin(int *argc, char **argv, int *worker_rc)
{
    *worker_rc = -1;
    int p = take_parallel(argc, argv);
    if (!p && !launched_by_mpirun()) return 0;
    int provided = 0;
    MPI_Init_thread(argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &tr.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &tr.n_ranks);
    tr.send = mpi_send, tr.probe = mpi_probe, tr.recv = mpi_recv, tr.fail = mpi_fail;
    dargs d;
    parse_args(*argc, argv, &d);
    int rc = 0;
    if (tr.n_ranks > 1024) {
        if (!tr.rank) fprintf(stderr, "inkling: %d ranks: at most 1024\n", tr.n_ranks);
        MPI_Finalize();
        return *worker_rc = 2;
    }
    if (tr.n_ranks == 1) {
        if (p) fprintf(stderr, "inkling: --parallel expert with one rank: running as one process\n");
        return 0; /* cli_dist_end finalizes */
    }
    const char *dir = start_checks(&d, provided, &rc);
    if (!rc && check_fingerprints(dir, fingerprint(dir, d.activations))) rc = 1;
    if (!rc && open_shares(&d, dir)) rc = 1;
    if (rc) {
        ink_model_free(worker_model);
        MPI_Finalize();
        *worker_rc = rc;
        return rc;
    }
    if (tr.rank) *worker_rc = serve_share();
    return 0;
}

/* Rank 0: the job's report on stderr; v[r] = {peak RSS KiB, first expert, end expert, requests served}. */
static void report(long (*v)[4])
{
    const ink_ep_stats *s = &last_stats;
    fprintf(stderr, "expert parallel: %d ranks", tr.n_ranks);
    if (have_stats)
        fprintf(stderr, ": %llu MoE layer forwards of %llu rows, %llu of them round trips to other ranks (%llu "
                        "requests), %.2f MB sent, %.2f MB received, %.3f ms in the exchange (%.1f us per round trip)",
                s->moe_layers, s->rows, s->exchanges, s->requests, (double)s->bytes_sent / 1e6, (double)s->bytes_recv / 1e6,
                s->seconds * 1e3, s->exchanges ? s->seconds * 1e6 / (double)s->exchanges : 0.0);
    fputc('\n', stderr);
    for (int r = 0; r < tr.n_ranks; r++) {
        if (v[r][2] > v[r][1])
            fprintf(stderr, "  rank %d: routed experts [%ld, %ld), %ld requests served, peak RSS %.1f MiB\n", r, v[r][1],
                    v[r][2], v[r][3], (double)v[r][0] / 1024.0);
        else
            fprintf(stderr, "  rank %d: model not loaded, peak RSS %.1f MiB\n", r, (double)v[r][0] / 1024.0);
    }
}

int cli_dist_end(int rc)
{
    if (!tr.n_ranks) return rc;
    if (tr.n_ranks > 1) {
        if (!tr.rank) ink_ep_stop(&tr);
        struct rusage ru;
        long mine[4] = {getrusage(RUSAGE_SELF, &ru) ? 0 : ru.ru_maxrss, last_stats.expert0, last_stats.expert1,
                        tr.rank ? (long)last_stats.requests : 0};
        static long all[1024][4];
        MPI_Gather(mine, 4, MPI_LONG, all, 4, MPI_LONG, 0, MPI_COMM_WORLD);
        if (!tr.rank) report(all);
    }
    MPI_Finalize();
    tr.n_ranks = 0;
    return rc;
}

#endif
