/* cmd_download.c — `inkling download REPO ...`: fetch files of a Hugging Face Hub repository into
 * the local cache (or --local-dir). Reads HF_TOKEN / HUGGING_FACE_HUB_TOKEN, HF_ENDPOINT,
 * INKLING_CACHE_DIR (XDG_CACHE_HOME, HOME), INKLING_ALLOW_INSECURE_ENDPOINT and passes them to
 * dl/hub in its options. Exit codes: 0 ok, 1 failure, 2 usage error. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dl/hub.h"

#define DL_MAX_GLOBS 256

static void download_usage(FILE *f)
{
    fprintf(f,
            "usage: inkling download REPO [--revision REV] [--include GLOB]... [--exclude GLOB]...\n"
            "                        [--local-dir DIR] [--token T] [--force] [--quiet]\n"
            "\n"
            "Downloads the model files of the Hugging Face Hub repository REPO (owner/name) at a\n"
            "pinned commit, resuming partial files and verifying sizes and sha256.\n"
            "\n"
            "  --revision REV    branch, tag or commit (default main)\n"
            "  --include GLOB    only files matching GLOB (repeatable; '*' crosses '/')\n"
            "  --exclude GLOB    drop files matching GLOB (repeatable, applied after --include)\n"
            "  --local-dir DIR   put the files in DIR instead of the cache\n"
            "  --token T         Hub access token (default: $HF_TOKEN)\n"
            "  --force           download again even if the files are present\n"
            "  --quiet           no progress output\n"
            "\n"
            "Environment: HF_TOKEN, HF_ENDPOINT (default https://huggingface.co), INKLING_CACHE_DIR\n"
            "(default ~/.cache/inkling). The directory is printed on stdout when done.\n"
            "Example: inkling download thinkingmachines/Inkling-Small --include config.json \\\n"
            "             --include mtp.safetensors\n");
}

/* "--flag VALUE" or "--flag=VALUE": returns the value (advancing *i) or NULL if argv[*i] is not
 * this flag; sets *missing when the flag is there without a value. */
static const char *flag_value(const char *flag, int argc, char **argv, int *i, int *missing)
{
    const char *a = argv[*i];
    size_t n = strlen(flag);
    if (strncmp(a, flag, n) != 0) return NULL;
    if (a[n] == '=') return a + n + 1;
    if (a[n] != '\0') return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

static const char *env_nonempty(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

int cmd_download(int argc, char **argv)
{
    const char *include[DL_MAX_GLOBS], *exclude[DL_MAX_GLOBS];
    int n_inc = 0, n_exc = 0, force = 0, quiet = 0;
    const char *repo = NULL, *revision = NULL, *local_dir = NULL, *token = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int missing = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            download_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--force")) {
            force = 1;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            quiet = 1;
        } else if ((v = flag_value("--revision", argc, argv, &i, &missing))) {
            revision = v;
        } else if ((v = flag_value("--local-dir", argc, argv, &i, &missing))) {
            local_dir = v;
        } else if ((v = flag_value("--token", argc, argv, &i, &missing))) {
            token = v;
        } else if ((v = flag_value("--include", argc, argv, &i, &missing))) {
            if (n_inc == DL_MAX_GLOBS) {
                fprintf(stderr, "inkling download: more than %d --include patterns\n", DL_MAX_GLOBS);
                return 2;
            }
            include[n_inc++] = v;
        } else if ((v = flag_value("--exclude", argc, argv, &i, &missing))) {
            if (n_exc == DL_MAX_GLOBS) {
                fprintf(stderr, "inkling download: more than %d --exclude patterns\n", DL_MAX_GLOBS);
                return 2;
            }
            exclude[n_exc++] = v;
        } else if (missing) {
            fprintf(stderr, "inkling download: %s needs a value\n", a);
            return 2;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "inkling download: unknown option '%s' (see inkling download --help)\n",
                    a);
            return 2;
        } else if (!repo) {
            repo = a;
        } else {
            fprintf(stderr, "inkling download: unexpected argument '%s' (one REPO only)\n", a);
            return 2;
        }
    }
    if (!repo) {
        fprintf(stderr, "inkling download: missing REPO (owner/name); see inkling download --help\n");
        return 2;
    }
    if (!ink_hub_is_repo_id(repo)) {
        fprintf(stderr, "inkling download: '%s' is not a repository id of the form owner/name\n",
                repo);
        return 2;
    }
    if (local_dir && !*local_dir) {
        fprintf(stderr, "inkling download: --local-dir is empty\n");
        return 2;
    }
    for (int k = 0; k < n_inc + n_exc; k++) {
        ink_err e = {0};
        if (ink_glob_check(k < n_inc ? include[k] : exclude[k - n_inc], &e) != INK_OK) {
            fprintf(stderr, "inkling download: %s %s\n", k < n_inc ? "--include" : "--exclude", e.msg);
            return 2;
        }
    }
    if (!token) token = env_nonempty("HF_TOKEN");
    if (!token) token = env_nonempty("HUGGING_FACE_HUB_TOKEN");

    char cache[4096];
    ink_err err = {0};
    if (ink_hub_default_cache_dir(env_nonempty("INKLING_CACHE_DIR"), env_nonempty("XDG_CACHE_HOME"),
                                  env_nonempty("HOME"), cache, sizeof cache, &err) != INK_OK &&
        !local_dir) {
        fprintf(stderr, "inkling download: %s\n", err.msg);
        return 1;
    }
    const char *insecure = env_nonempty("INKLING_ALLOW_INSECURE_ENDPOINT");
    ink_hub_opts o = {
        .endpoint = env_nonempty("HF_ENDPOINT"),
        .token = token,
        .revision = revision,
        .include = include,
        .n_include = n_inc,
        .exclude = exclude,
        .n_exclude = n_exc,
        .cache_dir = err.code ? NULL : cache,
        .local_dir = local_dir,
        .force = force,
        .allow_insecure = insecure && strcmp(insecure, "0") != 0,
        .log = quiet ? NULL : stderr,
        .tty = !quiet && isatty(STDERR_FILENO),
    };
    ink_hub_result res;
    ink_err e2 = {0};
    if (ink_hub_download(repo, &o, &res, &e2) != INK_OK) {
        fprintf(stderr, "inkling download: %s\n", e2.msg);
        return 1;
    }
    if (!quiet)
        fprintf(stderr, "%s @ %.12s: %d file%s, %d downloaded, %d already present\n", repo,
                res.commit, res.n_files, res.n_files == 1 ? "" : "s", res.n_downloaded,
                res.n_skipped);
    printf("%s\n", res.dir);
    fflush(stdout);
    return 0;
}
