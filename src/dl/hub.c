/* hub.c — `inkling download`: Hub API listing, file selection, resumable verified downloads.
 * See hub.h for the flow and the cache layout, formats.md §6 for the protocol.
 * Split (hub_int.h lists the files): this one holds the small utilities and the driver.
 * Depends on libcurl, jansson, dl/sha, dl/glob, dl/rules and libc/POSIX. */
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

/* ---- small utilities --------------------------------------------------------------------- */

/* snprintf for paths and URLs: 0, or -1 when the result did not fit. */
int hub_pathf(char *out, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int l = vsnprintf(out, n, fmt, ap);
    va_end(ap);
    return l < 0 || (size_t)l >= n ? -1 : 0;
}

void hub_sleep_s(double s)
{
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* "4.46 GB" (decimal units, like the Hub's web pages). */
void hub_human_bytes(double b, char *out, size_t n)
{
    static const char *const unit[] = {"B", "kB", "MB", "GB", "TB"};
    int u = 0;
    while (b >= 1000.0 && u < 4) {
        b /= 1000.0;
        u++;
    }
    if (u == 0)
        snprintf(out, n, "%.0f B", b);
    else
        snprintf(out, n, "%.*f %s", b < 10 ? 2 : b < 100 ? 1 : 0, b, unit[u]);
}

void hub_human_time(double s, char *out, size_t n)
{
    if (s < 0 || s > 359999) {
        snprintf(out, n, "--:--");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(out, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(out, n, "%ld:%02ld", t / 60, t % 60);
}

int hub_is_hex(const char *s, size_t n)
{
    if (strlen(s) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

/* mkdir -p of every directory component of path up to (not including) the last one when
 * `parent_only`, else of the whole path. */
int hub_mkdirs(const char *path, int parent_only, ink_err *err)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n >= sizeof buf) return ink_err_set(err, INK_E_IO, "path too long: %.100s...", path);
    memcpy(buf, path, n + 1);
    if (parent_only) {
        char *slash = strrchr(buf, '/');
        if (!slash) return INK_OK;
        *slash = '\0';
    }
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return ink_err_set(err, INK_E_IO, "cannot create directory %s: %s", buf,
                                   strerror(errno));
            *p = c;
            if (!c) break;
        }
    }
    struct stat st;
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
        return ink_err_set(err, INK_E_IO, "%s exists and is not a directory", buf);
    return INK_OK;
}

int hub_write_all(int fd, const void *data, size_t n)
{
    const char *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int hub_is_disk_full(int e)
{
#ifdef EDQUOT
    if (e == EDQUOT) return 1;
#endif
    return e == ENOSPC || e == EFBIG;
}


/* ---- driver ------------------------------------------------------------------------------ */

static int setup_endpoint(hub *h, ink_err *err)
{
    const ink_hub_opts *o = h->o;
    const char *ep = o->endpoint && *o->endpoint ? o->endpoint : INK_HUB_DEFAULT_ENDPOINT;
    size_t n = strlen(ep);
    while (n > 0 && ep[n - 1] == '/') n--;
    if (n == 0 || n >= sizeof h->ep)
        return ink_err_set(err, INK_E_INVAL, "invalid Hub endpoint '%s'", ep);
    memcpy(h->ep, ep, n);
    h->ep[n] = '\0';
    origin og;
    if (hub_parse_origin(h->ep, &og) != 0 || (strcmp(og.scheme, "http") != 0 && strcmp(og.scheme, "https") != 0))
        return ink_err_set(err, INK_E_INVAL, "invalid Hub endpoint '%s' (expected https://host)",
                           h->ep);
    memcpy(h->ep_scheme, og.scheme, sizeof og.scheme);
    memcpy(h->ep_host, og.host, sizeof og.host);
    h->ep_port = og.port;
    h->ep_https = strcmp(og.scheme, "https") == 0;
    if (!h->ep_https && !hub_host_is_loopback(og.host) && !o->allow_insecure)
        return ink_err_set(err, INK_E_INVAL,
                           "refusing the plain-http endpoint %s: the token and the file list would "
                           "travel unprotected (set INKLING_ALLOW_INSECURE_ENDPOINT=1 to allow it)",
                           h->ep);
    return INK_OK;
}

static int setup_token(hub *h, ink_err *err)
{
    const char *t = h->o->token;
    h->auth[0] = '\0';
    if (!t || !*t) return INK_OK;
    size_t n = strlen(t);
    if (n > 1024) return ink_err_set(err, INK_E_INVAL, "the token is too long (%zu bytes)", n);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f)
            return ink_err_set(err, INK_E_INVAL,
                               "the token contains a space or a non-printable character at "
                               "position %zu",
                               i);
    snprintf(h->auth, sizeof h->auth, "Authorization: Bearer %s", t);
    return INK_OK;
}

static int64_t free_bytes(const ink_hub_opts *o, const char *dir)
{
    if (o->free_bytes_override > 0) return o->free_bytes_override;
    struct statvfs sv;
    if (statvfs(dir, &sv) != 0) return -1;
    return (int64_t)sv.f_bavail * (int64_t)sv.f_frsize;
}

static int write_ref(const char *base, const char *rev_enc, const char *commit, ink_err *err)
{
    char dir[4096], p[4400], tmp[4500];
    if (hub_pathf(dir, sizeof dir, "%s/refs", base) || hub_pathf(p, sizeof p, "%s/%s", dir, rev_enc) ||
        hub_pathf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid()))
        return ink_err_set(err, INK_E_IO, "path too long under %.200s", base);
    int rc = hub_mkdirs(dir, 0, err);
    if (rc) return rc;
    FILE *f = fopen(tmp, "w");
    if (!f) return ink_err_set(err, INK_E_IO, "cannot write %s: %s", tmp, strerror(errno));
    int bad = fprintf(f, "%s\n", commit) < 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, p) != 0) {
        unlink(tmp);
        return ink_err_set(err, INK_E_IO, "cannot write %s", p);
    }
    return INK_OK;
}

static int run(hub *h, const char *repo_id, ink_hub_result *res, ink_err *err)
{
    const ink_hub_opts *o = h->o;
    int rc;
    /* everything that can be checked without the network, first */
    if (!ink_hub_is_repo_id(repo_id))
        return ink_err_set(err, INK_E_INVAL,
                           "'%s' is not a repository id of the form owner/name", repo_id);
    h->repo = repo_id;
    for (int k = 0; k < o->n_include; k++)
        if ((rc = ink_glob_check(o->include[k], err))) return rc;
    for (int k = 0; k < o->n_exclude; k++)
        if ((rc = ink_glob_check(o->exclude[k], err))) return rc;
    if ((rc = setup_endpoint(h, err)) || (rc = setup_token(h, err))) return rc;
    const char *rev = o->revision && *o->revision ? o->revision : "main";
    if (strlen(rev) >= sizeof h->rev) return ink_err_set(err, INK_E_INVAL, "revision too long");
    snprintf(h->rev, sizeof h->rev, "%s", rev);
    if ((rc = ink_hub_urlencode(h->rev, 0, h->rev_enc, sizeof h->rev_enc, err))) return rc;
    const char *local = o->local_dir && *o->local_dir ? o->local_dir : NULL;
    if (!local && (!o->cache_dir || !*o->cache_dir))
        return ink_err_set(err, INK_E_INVAL, "no cache directory and no --local-dir given");

    if ((rc = hub_fetch_listing(h, err))) return rc;
    if ((rc = hub_select_files(h, err))) return rc;

    char base[4096], dir[4096];
    if (local) {
        if (strlen(local) >= sizeof dir - 600)
            return ink_err_set(err, INK_E_INVAL, "--local-dir path too long");
        hub_pathf(dir, sizeof dir, "%s", local);
        base[0] = '\0';
    } else {
        if (strlen(o->cache_dir) >= sizeof base - 700)
            return ink_err_set(err, INK_E_INVAL, "cache directory path too long");
        hub_pathf(base, sizeof base, "%s/models/%s", o->cache_dir, repo_id);
        hub_pathf(dir, sizeof dir, "%s/snapshots/%s", base, h->commit);
    }
    size_t dl_ = strlen(dir);
    while (dl_ > 1 && dir[dl_ - 1] == '/') dir[--dl_] = '\0';
    if ((rc = hub_mkdirs(dir, 0, err))) return rc;

    /* plan: what is present, what must come, and is there room */
    int n_sel = 0, n_todo = 0;
    int64_t need = 0, total = 0;
    for (int i = 0; i < h->n_files; i++) {
        hub_file *f = &h->files[i];
        if (!f->selected) continue;
        n_sel++;
        char dest[4700], part[4800];
        if (hub_pathf(dest, sizeof dest, "%s/%s", dir, f->path) ||
            hub_pathf(part, sizeof part, "%s.incomplete", dest))
            return ink_err_set(err, INK_E_IO, "path too long: %s/%s", dir, f->path);
        struct stat st;
        int present = !o->force && stat(dest, &st) == 0 && S_ISREG(st.st_mode) &&
                      (f->size >= 0 ? st.st_size == f->size : st.st_size > 0);
        f->selected = present ? 2 : 1; /* 2: skip */
        if (present) continue;
        n_todo++;
        if (f->size > 0) {
            int64_t have = 0;
            if (!o->force && stat(part, &st) == 0 && st.st_size <= f->size) have = st.st_size;
            need += f->size - have;
            total += f->size;
        }
    }
    char hb[32], hf[32];
    hub_human_bytes((double)total, hb, sizeof hb);
    hub_logf(h, "%s @ %s (%s): %d file%s selected, %d to download (%s) into %s\n", repo_id, h->commit,
          h->rev, n_sel, n_sel == 1 ? "" : "s", n_todo, hb, dir);
    int64_t avail = free_bytes(o, dir);
    if (avail >= 0 && need > avail) {
        hub_human_bytes((double)need, hb, sizeof hb);
        hub_human_bytes((double)avail, hf, sizeof hf);
        return ink_err_set(err, INK_E_IO, "disk full: %s needs %s more but only %s are free", dir, hb,
                           hf);
    }

    int idx = 0;
    res->n_files = n_sel;
    for (int i = 0; i < h->n_files; i++) {
        hub_file *f = &h->files[i];
        if (!f->selected) continue;
        idx++;
        char dest[4700];
        hub_pathf(dest, sizeof dest, "%s/%s", dir, f->path);
        if (f->selected == 2) {
            res->n_skipped++;
            hub_logf(h, "[%d/%d] %s  already present, skipped\n", idx, n_sel, f->path);
            continue;
        }
        if ((rc = hub_download_one(h, f, dest, idx, n_sel, err))) return rc;
        res->n_downloaded++;
    }
    if (base[0] && strcmp(h->rev, h->commit) != 0 && (rc = write_ref(base, h->rev_enc, h->commit, err)))
        return rc;
    memcpy(res->commit, h->commit, sizeof res->commit);
    hub_pathf(res->dir, sizeof res->dir, "%s", dir);
    res->bytes = h->net_bytes;
    return INK_OK;
}

int ink_hub_download(const char *repo_id, const ink_hub_opts *opts, ink_hub_result *out,
                     ink_err *err)
{
    if (!repo_id || !opts) return ink_err_set(err, INK_E_INVAL, "ink_hub_download: NULL argument");
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return ink_err_set(err, INK_E_NET, "libcurl initialisation failed");
    hub *h = calloc(1, sizeof *h);
    if (!h) {
        curl_global_cleanup();
        return ink_err_set(err, INK_E_NOMEM, "out of memory");
    }
    h->o = opts;
    h->log = opts->log;
    h->max_retries = opts->max_retries > 0 ? opts->max_retries : 5;
    h->backoff = opts->backoff_s > 0 ? opts->backoff_s : 1.0;
    h->c = curl_easy_init();
    int rc;
    if (!h->c) {
        rc = ink_err_set(err, INK_E_NET, "curl_easy_init failed");
        goto out;
    }
    curl_easy_setopt(h->c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h->c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h->c, CURLOPT_HEADERFUNCTION, hub_header_cb);
    curl_easy_setopt(h->c, CURLOPT_HEADERDATA, h);
    curl_easy_setopt(h->c, CURLOPT_WRITEFUNCTION, hub_write_cb);
    curl_easy_setopt(h->c, CURLOPT_WRITEDATA, h);
    curl_easy_setopt(h->c, CURLOPT_USERAGENT, "inkling.c-download/1");
    curl_easy_setopt(h->c, CURLOPT_CONNECTTIMEOUT,
                     opts->connect_timeout_s > 0 ? opts->connect_timeout_s : 10L);
    curl_easy_setopt(h->c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h->c, CURLOPT_LOW_SPEED_TIME,
                     opts->read_timeout_s > 0 ? opts->read_timeout_s : 30L);
    ink_hub_result res;
    memset(&res, 0, sizeof res);
    rc = run(h, repo_id, &res, err);
    if (rc == INK_OK && out) *out = res;
out:
    if (h->c) curl_easy_cleanup(h->c);
    for (int i = 0; i < h->n_files; i++) free(h->files[i].path);
    free(h->files);
    free(h);
    curl_global_cleanup();
    return rc;
}
