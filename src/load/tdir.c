/* tdir.c — model directory -> tensor table (see tdir.h). */
#include "load/tdir.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }
static int ends(const char *s, const char *p)
{
    size_t a = strlen(s), b = strlen(p);
    return a >= b && !strcmp(s + a - b, p);
}

int ink_tdir_is_mtp_name(const char *n) { return starts(n, "model.mtp.") || starts(n, "mtp."); }

int ink_tdir_is_backbone_name(const char *n)
{
    return !(ink_tdir_is_mtp_name(n) || starts(n, "model.visual.") || starts(n, "model.audio.") ||
             starts(n, "model.vision_tower.") || starts(n, "model.audio_tower.") || starts(n, "vision_tower.") ||
             starts(n, "audio_tower.") || strstr(n, "training_args") || ends(n, ".input_amax") ||
             ends(n, ".original_shape"));
}

static int wanted(const char *name, int purpose)
{
    return purpose == INK_TDIR_MTP ? ink_tdir_is_mtp_name(name) : ink_tdir_is_backbone_name(name);
}

static int plain_file_name(const char *s)
{
    return *s && !strchr(s, '/') && !strchr(s, '\\') && strcmp(s, ".") && strcmp(s, "..");
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static int cmp_ref(const void *a, const void *b)
{
    return strcmp(((const ink_tref *)a)->name, ((const ink_tref *)b)->name);
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static void free_strs(char **v, int n)
{
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

static int nonempty_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

/* Top-level *.safetensors files, sorted. An empty one is an error naming it (a failed download or
 * copy), never skipped: skipping turned a 0-byte model.safetensors into "holds only an MTP head". */
static int list_files(const char *dir, char ***out, int *n_out, ink_err *err)
{
    DIR *dp = opendir(dir);
    if (!dp) return ink_err_set(err, INK_E_IO, "%s: cannot open model directory: %s", dir, strerror(errno));
    char **v = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(dp))) {
        if (!ends(de->d_name, ".safetensors") || de->d_name[0] == '.') continue;
        char *p = join(dir, de->d_name);
        if (!p) break;
        struct stat st;
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0) {
            int rc = ink_err_set(err, INK_E_FORMAT, "%s: empty file (0 bytes)", p);
            free(p);
            closedir(dp);
            free_strs(v, n);
            return rc;
        }
        int ok = nonempty_file(p);
        free(p);
        if (!ok) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) break;
            v = nv;
        }
        if (!(v[n] = strdup(de->d_name))) break;
        n++;
    }
    closedir(dp);
    if (n) qsort(v, (size_t)n, sizeof *v, cmp_str);
    *out = v, *n_out = n;
    return INK_OK;
}


static int in_list(char **v, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(v[i], s)) return 1;
    return 0;
}

static int push_unique(char ***v, int *n, const char *s)
{
    if (in_list(*v, *n, s)) return 0;
    char **nv = realloc(*v, (size_t)(*n + 1) * sizeof **v);
    if (!nv) return -1;
    *v = nv;
    if (!(nv[*n] = strdup(s))) return -1;
    (*n)++;
    return 0;
}

/* Does the header of `name` hold a wanted tensor? Opens only the header. */
static int header_has(const char *dir, const char *name, int purpose, int *has, ink_err *err)
{
    char *p = join(dir, name);
    if (!p) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    ink_st_file f;
    int rc = ink_st_open(&f, p, err);
    free(p);
    if (rc) return rc;
    *has = 0;
    for (int i = 0; i < f.n && !*has; i++) *has = wanted(f.t[i].name, purpose);
    ink_st_close(&f);
    return INK_OK;
}

/* Decides which files to open. */
static int select_files(ink_tdir *d, int purpose, char ***sel, int *n_sel, ink_err *err)
{
    char **all = NULL, **ref = NULL;
    int n_all = 0, n_ref = 0, rc = INK_OK;
    json_t *root = NULL;
    *sel = NULL, *n_sel = 0;
    if ((rc = list_files(d->dir, &all, &n_all, err))) return rc;
    char *ipath = join(d->dir, "model.safetensors.index.json");
    if (!ipath) {
        rc = ink_err_set(err, INK_E_NOMEM, "out of memory");
        goto done;
    }
    json_error_t je;
    struct stat st;
    int index_exists = stat(ipath, &st) == 0;
    root = index_exists ? json_load_file(ipath, JSON_REJECT_DUPLICATES, &je) : NULL;
    json_t *wm = root ? json_object_get(root, "weight_map") : NULL;
    if (index_exists && !json_is_object(wm)) {
        rc = ink_err_set(err, INK_E_FORMAT, "%s: %s", ipath,
                         root ? "missing or non-object 'weight_map'" : je.text);
        free(ipath);
        goto done;
    }
    free(ipath);
    if (!wm) { /* no index: every file (MTP: every file whose header holds MTP tensors) */
        for (int i = 0; i < n_all; i++) {
            int has = 1;
            if (purpose == INK_TDIR_MTP && (rc = header_has(d->dir, all[i], purpose, &has, err))) goto done;
            if (has && push_unique(sel, n_sel, all[i])) goto nomem;
        }
        goto done;
    }
    d->has_index = 1;
    const char *key;
    json_t *val;
    json_object_foreach(wm, key, val) {
        if (!json_is_string(val) || !plain_file_name(json_string_value(val))) {
            rc = ink_err_set(err, INK_E_FORMAT,
                             "%s/model.safetensors.index.json: weight_map['%s'] must be a plain file name, found %s",
                             d->dir, key, json_is_string(val) ? json_string_value(val) : "a non-string");
            goto done;
        }
        if (push_unique(&ref, &n_ref, json_string_value(val))) goto nomem;
    }
    char missing[400] = "";
    int n_missing = 0;
    for (int i = 0; i < n_ref; i++) {
        if (in_list(all, n_all, ref[i])) continue;
        if (n_missing++ < 6) {
            size_t l = strlen(missing);
            snprintf(missing + l, sizeof missing - l, "%s%s", l ? ", " : "", ref[i]);
        }
    }
    int n_unref = 0;
    for (int i = 0; i < n_all; i++) n_unref += !in_list(ref, n_ref, all[i]);
    if (n_missing && n_unref) { /* stale index: trust the files on disk */
        snprintf(d->warn, sizeof d->warn,
                 "index names %d missing shard(s) (%s) but other .safetensors files exist: index ignored",
                 n_missing, missing);
        for (int i = 0; i < n_all; i++) {
            int has = 1;
            if (purpose == INK_TDIR_MTP && (rc = header_has(d->dir, all[i], purpose, &has, err))) goto done;
            if (has && push_unique(sel, n_sel, all[i])) goto nomem;
        }
        goto done;
    }
    if (n_missing && purpose == INK_TDIR_TARGET) {
        rc = ink_err_set(err, INK_E_IO, "%s: incomplete checkpoint: %d shard(s) named by model.safetensors.index.json are missing: %s",
                         d->dir, n_missing, missing);
        goto done;
    }
    /* Trusted index: the files holding wanted names; plus (MTP) unindexed files with MTP tensors. */
    json_object_foreach(wm, key, val) {
        if (!wanted(key, purpose)) continue;
        const char *fn = json_string_value(val);
        if (!in_list(all, n_all, fn)) {
            rc = ink_err_set(err, INK_E_IO, "%s: shard %s (holding %s) is missing", d->dir, fn, key);
            goto done;
        }
        if (push_unique(sel, n_sel, fn)) goto nomem;
    }
    if (purpose == INK_TDIR_MTP)
        for (int i = 0; i < n_all; i++) {
            if (in_list(ref, n_ref, all[i])) continue;
            int has = 0;
            if ((rc = header_has(d->dir, all[i], purpose, &has, err))) goto done;
            if (has && push_unique(sel, n_sel, all[i])) goto nomem;
        }
    goto done;
nomem:
    rc = ink_err_set(err, INK_E_NOMEM, "out of memory");
done:
    json_decref(root);
    free_strs(all, n_all);
    free_strs(ref, n_ref);
    if (rc) {
        free_strs(*sel, *n_sel);
        *sel = NULL, *n_sel = 0;
    }
    return rc;
}

int ink_tdir_open(ink_tdir *d, const char *dir, int purpose, ink_err *err)
{
    memset(d, 0, sizeof *d);
    char **sel = NULL;
    int n_sel = 0, rc;
    if (!(d->dir = strdup(dir))) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    if ((rc = select_files(d, purpose, &sel, &n_sel, err))) goto fail;
    d->files = calloc((size_t)(n_sel ? n_sel : 1), sizeof *d->files);
    if (!d->files) {
        rc = ink_err_set(err, INK_E_NOMEM, "out of memory");
        goto fail;
    }
    int total = 0;
    for (int i = 0; i < n_sel; i++) {
        char *p = join(dir, sel[i]);
        if (!p) {
            rc = ink_err_set(err, INK_E_NOMEM, "out of memory");
            goto fail;
        }
        rc = ink_st_open(&d->files[i], p, err);
        free(p);
        if (rc) goto fail;
        d->n_files++;
        total += d->files[i].n;
    }
    d->refs = calloc((size_t)(total ? total : 1), sizeof *d->refs);
    if (!d->refs) {
        rc = ink_err_set(err, INK_E_NOMEM, "out of memory");
        goto fail;
    }
    for (int f = 0; f < d->n_files; f++)
        for (int i = 0; i < d->files[f].n; i++) {
            const ink_st_tensor *t = &d->files[f].t[i];
            if (!wanted(t->name, purpose)) continue;
            d->refs[d->n++] = (ink_tref){t->name, f, t};
        }
    qsort(d->refs, (size_t)d->n, sizeof *d->refs, cmp_ref);
    for (int i = 1; i < d->n; i++)
        if (!strcmp(d->refs[i].name, d->refs[i - 1].name)) {
            rc = ink_err_set(err, INK_E_FORMAT, "%s: tensor '%s' appears in two files: %s and %s", dir,
                             d->refs[i].name, d->files[d->refs[i - 1].file].path, d->files[d->refs[i].file].path);
            goto fail;
        }
    free_strs(sel, n_sel);
    return INK_OK;
fail:
    free_strs(sel, n_sel);
    ink_tdir_close(d);
    return rc;
}

void ink_tdir_close(ink_tdir *d)
{
    if (!d) return;
    for (int i = 0; i < d->n_files; i++) ink_st_close(&d->files[i]);
    free(d->files);
    free(d->refs);
    free(d->dir);
    memset(d, 0, sizeof *d);
}

const ink_tref *ink_tdir_find(const ink_tdir *d, const char *name)
{
    int lo = 0, hi = d->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(name, d->refs[mid].name);
        if (!c) return &d->refs[mid];
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

int ink_tdir_map(ink_tdir *d, const ink_tref *r, ink_err *err)
{
    d->files[r->file].read = d->read;
    return ink_st_map(&d->files[r->file], err);
}
