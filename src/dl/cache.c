/* cache.c — the local model cache: default directory and repo-id → snapshot directory resolution
 * (for `-m REPO_ID`). Layout in hub.h. Depends on jansson and libc/POSIX. */
#include "dl/hub.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int ink_hub_default_cache_dir(const char *inkling_cache_dir, const char *xdg_cache_home,
                              const char *home, char *out, size_t n, ink_err *err)
{
    int len;
    if (inkling_cache_dir && *inkling_cache_dir)
        len = snprintf(out, n, "%s", inkling_cache_dir);
    else if (xdg_cache_home && *xdg_cache_home)
        len = snprintf(out, n, "%s/inkling", xdg_cache_home);
    else if (home && *home)
        len = snprintf(out, n, "%s/.cache/inkling", home);
    else
        return ink_err_set(err, INK_E_INVAL,
                           "no cache directory: set INKLING_CACHE_DIR (HOME is not set)");
    if (len < 0 || (size_t)len >= n)
        return ink_err_set(err, INK_E_INVAL, "cache directory path too long");
    while (len > 1 && out[len - 1] == '/') out[--len] = '\0';
    return INK_OK;
}

static int file_nonempty(const char *dir, const char *name)
{
    char p[4096];
    struct stat st;
    int len = snprintf(p, sizeof p, "%s/%s", dir, name);
    if (len < 0 || (size_t)len >= sizeof p) return 0;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

static int is_plain_name(const char *s)
{
    return *s && !strchr(s, '/') && !strchr(s, '\\') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* Completeness of a snapshot directory (formats.md §2.3). Returns 1 if complete; otherwise 0 and
 * a reason in why. */
static int snapshot_complete(const char *dir, char *why, size_t nwhy)
{
    if (!file_nonempty(dir, "config.json")) {
        snprintf(why, nwhy, "%.900s has no config.json", dir);
        return 0;
    }
    /* top-level *.safetensors, and which of them the index references */
    int n_st = 0, n_unref = 0;
    char idx_path[4096];
    snprintf(idx_path, sizeof idx_path, "%s/model.safetensors.index.json", dir);
    json_t *idx = json_load_file(idx_path, 0, NULL);
    json_t *wm = idx ? json_object_get(idx, "weight_map") : NULL;
    if (!json_is_object(wm)) wm = NULL;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            size_t l = strlen(de->d_name);
            if (l <= 12 || strcmp(de->d_name + l - 12, ".safetensors") != 0) continue;
            if (!file_nonempty(dir, de->d_name)) continue;
            n_st++;
            int referenced = 0;
            if (wm) {
                const char *k;
                json_t *v;
                json_object_foreach(wm, k, v) {
                    if (json_is_string(v) && strcmp(json_string_value(v), de->d_name) == 0) {
                        referenced = 1;
                        break;
                    }
                }
            }
            if (!referenced) n_unref++;
        }
        closedir(d);
    }
    int ok = 1;
    if (wm) {
        const char *k, *missing = NULL;
        json_t *v;
        json_object_foreach(wm, k, v) {
            const char *f = json_string_value(v);
            if (!f || !is_plain_name(f)) {
                snprintf(why, nwhy, "%s: the index names an invalid file for '%s'", dir, k);
                missing = "";
                break;
            }
            if (!file_nonempty(dir, f)) {
                missing = f;
                break;
            }
        }
        if (missing && (!*missing || n_unref == 0)) {
            if (*missing) snprintf(why, nwhy, "%.900s is incomplete: shard %s is missing", dir, missing);
            ok = 0;
        }
    } else if (n_st == 0) {
        snprintf(why, nwhy, "%.900s has no *.safetensors file", dir);
        ok = 0;
    }
    json_decref(idx);
    return ok;
}

int ink_hub_resolve_local(const char *repo_id, const char *cache_dir, char *out_dir, size_t n,
                          ink_err *err)
{
    if (!ink_hub_is_repo_id(repo_id))
        return ink_err_set(err, INK_E_INVAL, "'%s' is not a repository id of the form owner/name",
                           repo_id ? repo_id : "(null)");
    if (!cache_dir || !*cache_dir) return ink_err_set(err, INK_E_INVAL, "no cache directory given");
    char base[3000], p[3200], why[1024] = "";
    int len = snprintf(base, sizeof base, "%s/models/%s", cache_dir, repo_id);
    if (len < 0 || (size_t)len >= sizeof base)
        return ink_err_set(err, INK_E_INVAL, "cache directory path too long");

    /* 1. the snapshot refs/main names */
    snprintf(p, sizeof p, "%s/refs/main", base);
    FILE *f = fopen(p, "r");
    char sha[64] = "";
    if (f) {
        if (!fgets(sha, sizeof sha, f)) sha[0] = '\0';
        fclose(f);
        sha[strcspn(sha, "\r\n")] = '\0';
    }
    char best[3600] = "";
    if (sha[0] && is_plain_name(sha)) {
        snprintf(p, sizeof p, "%s/snapshots/%s", base, sha);
        if (snapshot_complete(p, why, sizeof why)) snprintf(best, sizeof best, "%s", p);
    }
    /* 2. else the newest complete snapshot */
    if (!best[0]) {
        snprintf(p, sizeof p, "%s/snapshots", base);
        DIR *d = opendir(p);
        if (!d) {
            if (errno == ENOENT)
                return ink_err_set(err, INK_E_IO,
                                   "%s is not in the cache %s: run `inkling download %s` first",
                                   repo_id, cache_dir, repo_id);
            return ink_err_set(err, INK_E_IO, "cannot read %s: %s", p, strerror(errno));
        }
        struct dirent *de;
        time_t best_t = 0;
        while ((de = readdir(d))) {
            if (de->d_name[0] == '.') continue;
            char s[3600];
            struct stat st;
            int l = snprintf(s, sizeof s, "%s/%s", p, de->d_name);
            if (l < 0 || (size_t)l >= sizeof s || stat(s, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
            if (!snapshot_complete(s, why, sizeof why)) continue;
            if (!best[0] || st.st_mtime > best_t) {
                snprintf(best, sizeof best, "%s", s);
                best_t = st.st_mtime;
            }
        }
        closedir(d);
    }
    if (!best[0])
        return ink_err_set(err, INK_E_IO,
                           "%s is not completely in the cache (%s): run `inkling download %s`",
                           repo_id, why[0] ? why : "no snapshot", repo_id);
    if (strlen(best) + 1 > n)
        return ink_err_set(err, INK_E_INVAL, "output buffer too small for %s", best);
    memcpy(out_dir, best, strlen(best) + 1);
    return INK_OK;
}

int ink_hub_model_arg(const char *arg, const char *cache_dir, char *out_dir, size_t n,
                      ink_err *err)
{
    struct stat st;
    if (!arg || !*arg) return ink_err_set(err, INK_E_INVAL, "empty model argument");
    if (stat(arg, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return ink_err_set(err, INK_E_IO, "%s is not a directory", arg);
        if (strlen(arg) + 1 > n) return ink_err_set(err, INK_E_INVAL, "model path too long");
        memcpy(out_dir, arg, strlen(arg) + 1);
        return INK_OK;
    }
    if (!ink_hub_is_repo_id(arg))
        return ink_err_set(err, INK_E_IO, "%s: no such directory (and not an owner/name repo id)",
                           arg);
    if (!cache_dir || !*cache_dir)
        return ink_err_set(err, INK_E_IO, "%s: no such directory, and no cache directory to look in",
                           arg);
    return ink_hub_resolve_local(arg, cache_dir, out_dir, n, err);
}
