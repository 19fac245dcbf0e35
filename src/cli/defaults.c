/* defaults.c — where the bundled default model lives. Order: $INKLING_MODEL; then models/ next to
 * the repository the binary was built in (build/<mode>/inkling -> ../../models), next to the binary,
 * and under the current directory. Inside a models/ directory, the name in models/DEFAULT wins,
 * else the first subdirectory (alphabetically) holding a config.json. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "cli/cli.h"
#include "dl/hub.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int has_config(const char *dir)
{
    char p[PATH_MAX + 32];
    struct stat st;
    snprintf(p, sizeof p, "%s/config.json", dir);
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int pick(const char *models, char *out, size_t n)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/DEFAULT", models);
    FILE *f = fopen(p, "r");
    if (f) {
        char name[256] = "";
        if (fgets(name, sizeof name, f)) name[strcspn(name, " \r\n")] = 0;
        fclose(f);
        snprintf(out, n, "%s/%s", models, name);
        if (*name && !strchr(name, '/') && has_config(out)) return 1;
    }
    DIR *d = opendir(models);
    if (!d) return 0;
    char best[256] = "";
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(out, n, "%s/%s", models, e->d_name);
        if (has_config(out) && (!*best || strcmp(e->d_name, best) < 0)) snprintf(best, sizeof best, "%s", e->d_name);
    }
    closedir(d);
    if (!*best) return 0;
    snprintf(out, n, "%s/%s", models, best);
    return 1;
}

/* The path printed and used: realpath's (no build/release/../../models), in place. */
static const char *canonical(char *buf)
{
    char real[PATH_MAX];
    if (realpath(buf, real) && strlen(real) < PATH_MAX) strcpy(buf, real);
    return buf;
}

const char *ink_default_model_dir(void)
{
    static char buf[PATH_MAX + 300];
    const char *env = getenv("INKLING_MODEL");
    if (env && *env) return env;
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        char base[PATH_MAX + 32];
        snprintf(base, sizeof base, "%s/../../models", exe);
        if (pick(base, buf, sizeof buf)) return canonical(buf);
        snprintf(base, sizeof base, "%s/models", exe);
        if (pick(base, buf, sizeof buf)) return canonical(buf);
    }
    if (pick("models", buf, sizeof buf)) return canonical(buf);
    return NULL;
}

const char *ink_cli_model_dir(const char *arg)
{
    static char buf[PATH_MAX + 300];
    if (!arg) return ink_default_model_dir();
    struct stat st;
    if (stat(arg, &st) == 0 || !ink_hub_is_repo_id(arg)) return arg; /* a path (errors name it later) */
    char cache[PATH_MAX];
    ink_err e = {0};
    if (ink_hub_default_cache_dir(getenv("INKLING_CACHE_DIR"), getenv("XDG_CACHE_HOME"), getenv("HOME"), cache,
                                  sizeof cache, &e) ||
        ink_hub_model_arg(arg, cache, buf, sizeof buf, &e)) {
        fprintf(stderr, "inkling: -m %s: %s\n", arg, e.msg);
        return arg;
    }
    return buf;
}
