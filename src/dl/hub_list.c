/* hub_list.c — the Hub API listing (formats.md §6) and the selection of the files to download.
 * Depends on jansson, dl/glob, dl/rules, hub_http.c. */
#include "dl/hub_int.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include "dl/sha.h"

/* ---- listing ----------------------------------------------------------------------------- */

typedef struct membuf {
    char *p;
    size_t n, cap;
    hub *h;
    ink_err *err;
} membuf;

static size_t mem_sink(void *ctx, const char *data, size_t n)
{
    membuf *m = ctx;
    if (m->n + n > MAX_LISTING_BYTES) {
        ink_err_set(m->err, INK_E_FORMAT, "the file list of %s is larger than %u MiB", m->h->repo,
                    MAX_LISTING_BYTES >> 20);
        return 0;
    }
    if (m->n + n + 1 > m->cap) {
        size_t cap = m->cap ? m->cap : 65536;
        while (cap < m->n + n + 1) cap *= 2;
        char *q = realloc(m->p, cap);
        if (!q) {
            ink_err_set(m->err, INK_E_NOMEM, "out of memory reading the file list");
            return 0;
        }
        m->p = q;
        m->cap = cap;
    }
    memcpy(m->p + m->n, data, n);
    m->n += n;
    m->p[m->n] = '\0';
    return n;
}

static int parse_listing(hub *h, const char *body, ink_err *err)
{
    json_error_t je;
    json_t *j = json_loads(body, 0, &je);
    if (!j)
        return ink_err_set(err, INK_E_FORMAT, "the Hub answered invalid JSON for %s: %s (line %d)",
                           h->repo, je.text, je.line);
    int rc = INK_OK;
    const char *sha = json_string_value(json_object_get(j, "sha"));
    json_t *sib = json_object_get(j, "siblings");
    json_t *gated = json_object_get(j, "gated");
    if (json_is_string(gated)) snprintf(h->gated, sizeof h->gated, "%s", json_string_value(gated));
    if (!sha || !hub_is_hex(sha, 40)) {
        rc = ink_err_set(err, INK_E_FORMAT, "the Hub listing of %s has no valid commit sha", h->repo);
        goto out;
    }
    memcpy(h->commit, sha, 41);
    if (!json_is_array(sib)) {
        rc = ink_err_set(err, INK_E_FORMAT, "the Hub listing of %s has no 'siblings' array", h->repo);
        goto out;
    }
    size_t n = json_array_size(sib);
    if (n > MAX_SIBLINGS) {
        rc = ink_err_set(err, INK_E_FORMAT, "%s lists %zu files (more than %d)", h->repo, n,
                         MAX_SIBLINGS);
        goto out;
    }
    h->files = calloc(n ? n : 1, sizeof *h->files);
    if (!h->files) {
        rc = ink_err_set(err, INK_E_NOMEM, "out of memory for the file list");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(sib, i);
        const char *name = json_string_value(json_object_get(e, "rfilename"));
        if (!name) {
            rc = ink_err_set(err, INK_E_FORMAT, "the Hub listing of %s: entry %zu has no rfilename",
                             h->repo, i);
            goto out;
        }
        hub_file *f = &h->files[h->n_files];
        f->path = strdup(name);
        if (!f->path) {
            rc = ink_err_set(err, INK_E_NOMEM, "out of memory for the file list");
            goto out;
        }
        h->n_files++;
        f->size = -1;
        json_t *sz = json_object_get(e, "size");
        if (json_is_integer(sz) && json_integer_value(sz) >= 0) f->size = json_integer_value(sz);
        const char *blob = json_string_value(json_object_get(e, "blobId"));
        if (blob && hub_is_hex(blob, 40)) memcpy(f->blob, blob, 41);
        json_t *lfs = json_object_get(e, "lfs");
        if (json_is_object(lfs)) {
            const char *s256 = json_string_value(json_object_get(lfs, "sha256"));
            if (!s256) s256 = json_string_value(json_object_get(lfs, "oid"));
            if (s256 && hub_is_hex(s256, 64)) memcpy(f->sha256, s256, 65);
            json_t *lsz = json_object_get(lfs, "size");
            if (json_is_integer(lsz) && json_integer_value(lsz) >= 0)
                f->size = json_integer_value(lsz);
            f->blob[0] = '\0'; /* the blob id of an LFS file hashes the pointer, not the content */
        }
        f->wanted = ink_hub_path_wanted(name);
    }
out:
    json_decref(j);
    return rc;
}

int hub_fetch_listing(hub *h, ink_err *err)
{
    char url[4096];
    if (hub_pathf(url, sizeof url, "%s/api/models/%s/revision/%s?blobs=true", h->ep, h->repo, h->rev_enc))
        return ink_err_set(err, INK_E_INVAL, "URL too long");
    membuf m = {NULL, 0, 0, h, err};
    int rc = INK_OK;
    for (int attempt = 1;; attempt++) {
        ink_err e1 = {0};
        int transient = 0;
        m.n = 0;
        h->sink = mem_sink;
        h->sink_ctx = &m;
        int r = hub_http_get(h, url, 0, &transient, &e1);
        h->sink = NULL;
        if (r == INK_OK && h->r.status >= 200 && h->r.status < 300) break;
        int retry = r == INK_OK ? hub_status_transient(h->r.status) : (r == INK_E_NET && transient);
        if (!retry || attempt > h->max_retries) {
            if (r != INK_OK)
                rc = ink_err_set(err, r, "listing %s: %s%s", h->repo, e1.msg,
                                 attempt > 1 ? " (gave up after retries)" : "");
            else
                rc = hub_http_status_error(h, NULL, attempt, err);
            free(m.p);
            return rc;
        }
        double d = hub_backoff_delay(h, attempt);
        if (r != INK_OK)
            hub_logf(h, "listing %s failed (%s); retrying in %.1f s\n", h->repo, e1.msg, d);
        else
            hub_logf(h, "listing %s: HTTP %ld; retrying in %.1f s\n", h->repo, h->r.status, d);
        hub_sleep_s(d);
    }
    if (!m.p) {
        return ink_err_set(err, INK_E_FORMAT, "the Hub answered an empty file list for %s", h->repo);
    }
    rc = parse_listing(h, m.p, err);
    free(m.p);
    return rc;
}

/* ---- selection --------------------------------------------------------------------------- */

/* Writes the candidate files into msg (truncated to fit, "... (N more)"); when truncated, the
 * full list goes to the log. */
static void list_candidates(hub *h, char *msg, size_t n)
{
    size_t o = 0;
    int shown = 0, total = 0, others = 0;
    msg[0] = '\0';
    for (int i = 0; i < h->n_files; i++) {
        if (!h->files[i].wanted) {
            others++;
            continue;
        }
        total++;
        size_t l = strlen(h->files[i].path);
        if (shown == total - 1 && o + l + 3 < n - 40) {
            o += (size_t)snprintf(msg + o, n - o, "%s%s", shown ? ", " : "", h->files[i].path);
            shown++;
        }
    }
    if (total > shown) {
        snprintf(msg + o, n - o, "%s... (%d more)", shown ? ", " : "", total - shown);
        hub_logf(h, "%s at %.12s has these downloadable files:\n", h->repo, h->commit);
        for (int i = 0; i < h->n_files; i++)
            if (h->files[i].wanted) hub_logf(h, "  %s\n", h->files[i].path);
    }
    if (total == 0) snprintf(msg, n, "no downloadable file");
    if (others)
        hub_logf(h, "(%s also has %d file%s never downloaded: docs, code, media, other formats)\n",
              h->repo, others, others == 1 ? "" : "s");
}

int hub_select_files(hub *h, ink_err *err)
{
    const ink_hub_opts *o = h->o;
    char list[700];
    int n_sel = 0;
    for (int i = 0; i < h->n_files; i++) {
        hub_file *f = &h->files[i];
        f->selected = f->wanted;
        if (f->wanted && o->n_include > 0) {
            f->selected = 0;
            for (int k = 0; k < o->n_include && !f->selected; k++)
                if (ink_glob_match(o->include[k], f->path)) f->selected = 1;
        }
    }
    for (int k = 0; k < o->n_include; k++) {
        int hits = 0;
        for (int i = 0; i < h->n_files && !hits; i++)
            if (h->files[i].wanted && ink_glob_match(o->include[k], h->files[i].path)) hits = 1;
        if (!hits) {
            list_candidates(h, list, sizeof list);
            return ink_err_set(err, INK_E_INVAL,
                               "--include '%s' matches no file of %s (globs are case-sensitive); "
                               "the repository has: %s",
                               o->include[k], h->repo, list);
        }
    }
    for (int k = 0; k < o->n_exclude; k++) {
        int hits = 0;
        for (int i = 0; i < h->n_files; i++) {
            hub_file *f = &h->files[i];
            if (ink_hub_path_safe(f->path) && ink_glob_match(o->exclude[k], f->path)) {
                hits = 1;
                f->selected = 0;
            }
        }
        if (!hits) {
            list_candidates(h, list, sizeof list);
            return ink_err_set(err, INK_E_INVAL,
                               "--exclude '%s' matches no file of %s (globs are case-sensitive); "
                               "the repository has: %s",
                               o->exclude[k], h->repo, list);
        }
    }
    for (int i = 0; i < h->n_files; i++) n_sel += h->files[i].selected;
    if (n_sel == 0) {
        list_candidates(h, list, sizeof list);
        return ink_err_set(err, INK_E_INVAL, "nothing to download from %s; the repository has: %s",
                           h->repo, list);
    }
    if (n_sel > MAX_SELECTED)
        return ink_err_set(err, INK_E_INVAL, "%d files selected (more than %d)", n_sel, MAX_SELECTED);
    return INK_OK;
}
