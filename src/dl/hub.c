/* hub.c — `inkling download`: Hub API listing, file selection, resumable verified downloads.
 * See hub.h for the flow and the cache layout, formats.md §6 for the protocol.
 * Depends on libcurl, jansson, dl/sha, dl/glob, dl/rules and libc/POSIX. */
#include "dl/hub.h"

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

#define MAX_LISTING_BYTES (8u << 20)
#define MAX_SIBLINGS 16384
#define MAX_SELECTED 8192
#define MAX_REDIRECTS 10
#define ERRBODY_MAX 2048

/* ---- small utilities --------------------------------------------------------------------- */

/* snprintf for paths and URLs: 0, or -1 when the result did not fit. */
static int pathf(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int pathf(char *out, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int l = vsnprintf(out, n, fmt, ap);
    va_end(ap);
    return l < 0 || (size_t)l >= n ? -1 : 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* "4.46 GB" (decimal units, like the Hub's web pages). */
static void human_bytes(double b, char *out, size_t n)
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

static void human_time(double s, char *out, size_t n)
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

static int is_hex(const char *s, size_t n)
{
    if (strlen(s) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

/* mkdir -p of every directory component of path up to (not including) the last one when
 * `parent_only`, else of the whole path. */
static int mkdirs(const char *path, int parent_only, ink_err *err)
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

static int write_all(int fd, const void *data, size_t n)
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

static int is_disk_full(int e)
{
#ifdef EDQUOT
    if (e == EDQUOT) return 1;
#endif
    return e == ENOSPC || e == EFBIG;
}

/* ---- the session state ------------------------------------------------------------------- */

typedef struct hub_file {
    char *path;        /* repository-relative path (rfilename) */
    int64_t size;      /* -1 when the listing does not say */
    char sha256[65];   /* LFS sha256, "" for git-stored files */
    char blob[41];     /* git blob id, "" if unknown */
    int wanted;        /* on the allow-list and safe */
    int selected;
} hub_file;

typedef struct resp {
    long status;
    char err_code[64];      /* X-Error-Code */
    char err_msg[512];      /* X-Error-Message */
    char content_range[128];
    double retry_after;     /* seconds, -1 if absent */
    char host[256];         /* host of the last request */
    int foreign;            /* the last request went to another origin than the endpoint */
} resp;

typedef struct hub {
    CURL *c;
    const ink_hub_opts *o;
    FILE *log;
    char ep[1024];       /* endpoint, no trailing '/' */
    char ep_scheme[16], ep_host[256];
    long ep_port;
    int ep_https;
    char auth[1200];     /* "Authorization: Bearer ..." or "" */
    const char *repo;
    char rev[256];       /* the requested revision */
    char rev_enc[800];
    char commit[41];
    char gated[16];      /* "", "auto", "manual" from the listing */
    resp r;
    char errbody[ERRBODY_MAX + 1];
    size_t nerrbody;
    int max_retries;
    double backoff;
    /* body sink of the current request */
    size_t (*sink)(void *ctx, const char *data, size_t n);
    void *sink_ctx;
    int sink_failed;     /* the sink refused data (its own error is recorded) */
    hub_file *files;
    int n_files;
    int64_t net_bytes;
} hub;

/* ---- URL helpers ------------------------------------------------------------------------- */

typedef struct origin {
    char scheme[16];
    char host[256];
    long port;
} origin;

static int parse_origin(const char *url, origin *o)
{
    CURLU *u = curl_url();
    if (!u) return -1;
    int rc = -1;
    char *scheme = NULL, *host = NULL, *port = NULL;
    if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK &&
        strlen(scheme) < sizeof o->scheme && strlen(host) < sizeof o->host) {
        snprintf(o->scheme, sizeof o->scheme, "%s", scheme);
        snprintf(o->host, sizeof o->host, "%s", host);
        for (char *c = o->scheme; *c; c++)
            if (*c >= 'A' && *c <= 'Z') *c = (char)(*c - 'A' + 'a');
        o->port = strtol(port, NULL, 10);
        rc = 0;
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
    return rc;
}

static int host_is_loopback(const char *h)
{
    return strcasecmp(h, "localhost") == 0 || strncmp(h, "127.", 4) == 0 || strcmp(h, "[::1]") == 0 ||
           strcmp(h, "::1") == 0;
}

static int same_origin(const hub *h, const origin *o)
{
    return strcmp(o->scheme, h->ep_scheme) == 0 && strcasecmp(o->host, h->ep_host) == 0 &&
           o->port == h->ep_port;
}

/* ---- HTTP -------------------------------------------------------------------------------- */

static void trim_value(char *v)
{
    size_t n = strlen(v);
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ' || v[n - 1] == '\t'))
        v[--n] = '\0';
}

static size_t header_cb(char *buf, size_t sz, size_t nitems, void *ud)
{
    hub *h = ud;
    size_t n = sz * nitems;
    char line[1024];
    size_t m = n < sizeof line - 1 ? n : sizeof line - 1;
    memcpy(line, buf, m);
    line[m] = '\0';
    if (strncmp(line, "HTTP/", 5) == 0) { /* a new response (redirect hop, 100-continue) */
        char host[256];
        int foreign = h->r.foreign;
        memcpy(host, h->r.host, sizeof host);
        memset(&h->r, 0, sizeof h->r);
        memcpy(h->r.host, host, sizeof host);
        h->r.foreign = foreign;
        h->r.retry_after = -1;
        return n;
    }
    char *colon = strchr(line, ':');
    if (!colon) return n;
    *colon = '\0';
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    trim_value(v);
    if (strcasecmp(line, "X-Error-Code") == 0)
        snprintf(h->r.err_code, sizeof h->r.err_code, "%s", v);
    else if (strcasecmp(line, "X-Error-Message") == 0)
        snprintf(h->r.err_msg, sizeof h->r.err_msg, "%s", v);
    else if (strcasecmp(line, "Content-Range") == 0)
        snprintf(h->r.content_range, sizeof h->r.content_range, "%s", v);
    else if (strcasecmp(line, "Retry-After") == 0) {
        char *end;
        double d = strtod(v, &end);
        if (end != v && d >= 0) h->r.retry_after = d;
    }
    return n;
}

static size_t write_cb(char *data, size_t sz, size_t nmemb, void *ud)
{
    hub *h = ud;
    size_t n = sz * nmemb;
    long status = 0;
    curl_easy_getinfo(h->c, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 300 && status < 400) return n; /* redirect body: ignore */
    if (status < 200 || status >= 300) {         /* error body: keep the start for the message */
        size_t room = ERRBODY_MAX - h->nerrbody;
        size_t take = n < room ? n : room;
        memcpy(h->errbody + h->nerrbody, data, take);
        h->nerrbody += take;
        h->errbody[h->nerrbody] = '\0';
        return n;
    }
    h->r.status = status;
    if (!h->sink) return n;
    size_t got = h->sink(h->sink_ctx, data, n);
    if (got != n) h->sink_failed = 1;
    return got;
}

static int curl_transient(CURLcode cc)
{
    switch (cc) {
    case CURLE_COULDNT_RESOLVE_HOST: /* DNS hiccups are common on flaky networks */
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
        return 1;
    default:
        return 0;
    }
}

static int status_transient(long st) { return st == 408 || st == 429 || st >= 500; }

/* Performs GET url (with `Range: bytes=<from>-` when from > 0), following redirects by hand: the
 * Authorization header goes only to the endpoint's origin, and https never downgrades to http.
 * Returns INK_OK when a final response arrived (h->r.status, any code), INK_E_NET on a transport
 * failure (*transient says whether a retry may help), or the sink's error. */
static int http_get(hub *h, const char *url0, int64_t from, int *transient, ink_err *err)
{
    char url[4096];
    if (pathf(url, sizeof url, "%s", url0)) return ink_err_set(err, INK_E_NET, "URL too long");
    *transient = 0;
    int was_https = 0;
    for (int hop = 0; hop <= MAX_REDIRECTS; hop++) {
        origin o;
        if (parse_origin(url, &o) != 0)
            return ink_err_set(err, INK_E_NET, "invalid URL %.200s", url);
        if (strcmp(o.scheme, "http") != 0 && strcmp(o.scheme, "https") != 0)
            return ink_err_set(err, INK_E_NET, "refusing redirect to a %s URL", o.scheme);
        if (was_https && strcmp(o.scheme, "http") == 0)
            return ink_err_set(err, INK_E_NET, "refusing redirect from https to plain http (%s)",
                               o.host);
        was_https = strcmp(o.scheme, "https") == 0;
        struct curl_slist *hdr = NULL, *tmp;
        int foreign = !same_origin(h, &o); /* the token never leaves the endpoint's origin */
        if (h->auth[0] && !foreign) {
            tmp = curl_slist_append(hdr, h->auth);
            if (!tmp) goto nomem;
            hdr = tmp;
        }
        tmp = curl_slist_append(hdr, "Accept-Encoding: identity");
        if (!tmp) goto nomem;
        hdr = tmp;
        char range[48];
        snprintf(range, sizeof range, "%lld-", (long long)from);
        memset(&h->r, 0, sizeof h->r);
        h->r.retry_after = -1;
        snprintf(h->r.host, sizeof h->r.host, "%s", o.host);
        h->r.foreign = foreign;
        h->nerrbody = 0;
        h->errbody[0] = '\0';
        h->sink_failed = 0;
        curl_easy_setopt(h->c, CURLOPT_URL, url);
        curl_easy_setopt(h->c, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(h->c, CURLOPT_RANGE, from > 0 ? range : NULL);
        curl_easy_setopt(h->c, CURLOPT_NOPROXY, host_is_loopback(o.host) ? "*" : NULL);
        CURLcode cc = curl_easy_perform(h->c);
        curl_easy_setopt(h->c, CURLOPT_HTTPHEADER, NULL);
        curl_slist_free_all(hdr);
        long status = 0;
        curl_easy_getinfo(h->c, CURLINFO_RESPONSE_CODE, &status);
        h->r.status = status;
        if (cc != CURLE_OK) {
            if (h->sink_failed && err && err->code) return err->code;
            *transient = curl_transient(cc);
            return ink_err_set(err, INK_E_NET, "%s: %s", o.host, curl_easy_strerror(cc));
        }
        if (status == 301 || status == 302 || status == 303 || status == 307 || status == 308) {
            char *loc = NULL;
            curl_easy_getinfo(h->c, CURLINFO_REDIRECT_URL, &loc);
            if (!loc || !*loc)
                return ink_err_set(err, INK_E_NET, "HTTP %ld redirect from %s without a Location",
                                   status, o.host);
            if (strlen(loc) >= sizeof url)
                return ink_err_set(err, INK_E_NET, "redirect URL too long");
            pathf(url, sizeof url, "%s", loc);
            continue;
        }
        return INK_OK;
    }
    return ink_err_set(err, INK_E_NET, "too many redirects (more than %d) for %.200s", MAX_REDIRECTS,
                       url0);
nomem:
    return ink_err_set(err, INK_E_NOMEM, "out of memory building HTTP headers");
}

/* Error text for a final non-2xx response. `file` is NULL for the API listing. */
static int http_status_error(hub *h, const char *file, int attempts, ink_err *err)
{
    char srv[700] = "";
    if (h->r.err_msg[0])
        snprintf(srv, sizeof srv, " (server: %s)", h->r.err_msg);
    else if (h->nerrbody && h->errbody[0] == '{') {
        json_t *j = json_loads(h->errbody, 0, NULL);
        const char *m = j ? json_string_value(json_object_get(j, "error")) : NULL;
        if (m) snprintf(srv, sizeof srv, " (server: %.600s)", m);
        json_decref(j);
    }
    long st = h->r.status;
    const char *ec = h->r.err_code;
    const char *what = file ? file : "the file list";
    int gated = strcmp(ec, "GatedRepo") == 0 || h->gated[0] || strstr(h->errbody, "gated");
    if ((st == 401 || st == 403) && gated)
        return ink_err_set(err, INK_E_NET,
                           "HTTP %ld: %s is gated; request access at %s/%s and use a token of an "
                           "account that was granted access%s%s",
                           st, h->repo, h->ep, h->repo,
                           h->auth[0] ? "" : " (no token was given: set HF_TOKEN or pass --token)",
                           srv);
    if (st == 401) {
        if (h->auth[0])
            return ink_err_set(err, INK_E_NET,
                               "HTTP 401 for %s of %s: the token was rejected (invalid or expired), "
                               "or the repository does not exist%s",
                               what, h->repo, srv);
        return ink_err_set(err, INK_E_NET,
                           "HTTP 401 for %s of %s: the repository does not exist, or it is private "
                           "and needs a token (set HF_TOKEN or pass --token)%s",
                           what, h->repo, srv);
    }
    if (st == 403)
        return ink_err_set(err, INK_E_NET,
                           "HTTP 403 for %s of %s: access denied; the token lacks permission for "
                           "this repository%s",
                           what, h->repo, srv);
    if (st == 404) {
        if (strcmp(ec, "RevisionNotFound") == 0)
            return ink_err_set(err, INK_E_NET, "revision '%s' not found in %s (HTTP 404)%s", h->rev,
                               h->repo, srv);
        if (strcmp(ec, "RepoNotFound") == 0)
            return ink_err_set(err, INK_E_NET, "repository %s not found (HTTP 404)%s", h->repo, srv);
        if (file)
            return ink_err_set(err, INK_E_NET, "file '%s' not found in %s at %s (HTTP 404)%s", file,
                               h->repo, h->commit, srv);
        return ink_err_set(err, INK_E_NET,
                           "repository %s or revision '%s' not found (HTTP 404)%s", h->repo, h->rev,
                           srv);
    }
    if (attempts > 1)
        return ink_err_set(err, INK_E_NET, "HTTP %ld from %s for %s of %s after %d attempts%s", st,
                           h->r.host, what, h->repo, attempts, srv);
    return ink_err_set(err, INK_E_NET, "HTTP %ld from %s for %s of %s%s", st, h->r.host, what,
                       h->repo, srv);
}

static double backoff_delay(hub *h, int attempt)
{
    double d = h->backoff;
    for (int i = 1; i < attempt && d < 30.0; i++) d *= 2;
    if (d > 30.0) d = 30.0;
    if (h->r.retry_after >= 0) d = h->r.retry_after < 60.0 ? h->r.retry_after : 60.0;
    return d;
}

static void logf_(hub *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(hub *h, const char *fmt, ...)
{
    if (!h->log) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(h->log, fmt, ap);
    va_end(ap);
    fflush(h->log);
}

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
    if (!sha || !is_hex(sha, 40)) {
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
        if (blob && is_hex(blob, 40)) memcpy(f->blob, blob, 41);
        json_t *lfs = json_object_get(e, "lfs");
        if (json_is_object(lfs)) {
            const char *s256 = json_string_value(json_object_get(lfs, "sha256"));
            if (!s256) s256 = json_string_value(json_object_get(lfs, "oid"));
            if (s256 && is_hex(s256, 64)) memcpy(f->sha256, s256, 65);
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

static int fetch_listing(hub *h, ink_err *err)
{
    char url[4096];
    if (pathf(url, sizeof url, "%s/api/models/%s/revision/%s?blobs=true", h->ep, h->repo, h->rev_enc))
        return ink_err_set(err, INK_E_INVAL, "URL too long");
    membuf m = {NULL, 0, 0, h, err};
    int rc = INK_OK;
    for (int attempt = 1;; attempt++) {
        ink_err e1 = {0};
        int transient = 0;
        m.n = 0;
        h->sink = mem_sink;
        h->sink_ctx = &m;
        int r = http_get(h, url, 0, &transient, &e1);
        h->sink = NULL;
        if (r == INK_OK && h->r.status >= 200 && h->r.status < 300) break;
        int retry = r == INK_OK ? status_transient(h->r.status) : (r == INK_E_NET && transient);
        if (!retry || attempt > h->max_retries) {
            if (r != INK_OK)
                rc = ink_err_set(err, r, "listing %s: %s%s", h->repo, e1.msg,
                                 attempt > 1 ? " (gave up after retries)" : "");
            else
                rc = http_status_error(h, NULL, attempt, err);
            free(m.p);
            return rc;
        }
        double d = backoff_delay(h, attempt);
        if (r != INK_OK)
            logf_(h, "listing %s failed (%s); retrying in %.1f s\n", h->repo, e1.msg, d);
        else
            logf_(h, "listing %s: HTTP %ld; retrying in %.1f s\n", h->repo, h->r.status, d);
        sleep_s(d);
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
        logf_(h, "%s at %.12s has these downloadable files:\n", h->repo, h->commit);
        for (int i = 0; i < h->n_files; i++)
            if (h->files[i].wanted) logf_(h, "  %s\n", h->files[i].path);
    }
    if (total == 0) snprintf(msg, n, "no downloadable file");
    if (others)
        logf_(h, "(%s also has %d file%s never downloaded: docs, code, media, other formats)\n",
              h->repo, others, others == 1 ? "" : "s");
}

static int select_files(hub *h, ink_err *err)
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

/* ---- one file ---------------------------------------------------------------------------- */

typedef struct dl {
    hub *h;
    hub_file *f;
    const char *partial;
    int fd;
    int64_t have;        /* bytes in the partial file */
    int64_t size;        /* expected size (-1 unknown) */
    int64_t session0;    /* `have` when this file's transfers started (for the rate) */
    int started;         /* the current response has delivered its first byte */
    int restart;         /* the current response is not the continuation we asked for */
    ink_sha256 s256;
    ink_sha1 s1;
    int use_s1;
    ink_err *err;
    /* progress */
    int idx, n;
    double t0, t_draw;
    int drawn;
} dl;

static void hashes_free(dl *d)
{
    ink_sha256_free(&d->s256);
    ink_sha1_free(&d->s1);
}

static void hashes_reset(dl *d)
{
    hashes_free(d);
    ink_sha256_init(&d->s256);
    d->use_s1 = d->f->blob[0] && d->size >= 0;
    if (d->use_s1) {
        char pre[48];
        int l = snprintf(pre, sizeof pre, "blob %lld", (long long)d->size);
        ink_sha1_init(&d->s1);
        ink_sha1_update(&d->s1, pre, (size_t)l + 1); /* includes the NUL */
    }
}

static void hashes_update(dl *d, const void *p, size_t n)
{
    ink_sha256_update(&d->s256, p, n);
    if (d->use_s1) ink_sha1_update(&d->s1, p, n);
}

static int truncate_partial(dl *d)
{
    if (ftruncate(d->fd, 0) != 0 || lseek(d->fd, 0, SEEK_SET) != 0)
        return ink_err_set(d->err, INK_E_IO, "cannot truncate %s: %s", d->partial, strerror(errno));
    d->have = 0;
    hashes_reset(d);
    return INK_OK;
}

/* Hashes what the partial file already holds (a resumed download). */
static int hash_existing(dl *d)
{
    if (lseek(d->fd, 0, SEEK_SET) != 0)
        return ink_err_set(d->err, INK_E_IO, "cannot seek %s: %s", d->partial, strerror(errno));
    hashes_reset(d);
    char *buf = malloc(1 << 20);
    if (!buf) return ink_err_set(d->err, INK_E_NOMEM, "out of memory");
    int64_t left = d->have;
    while (left > 0) {
        ssize_t r = read(d->fd, buf, left < (1 << 20) ? (size_t)left : (size_t)(1 << 20));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            free(buf);
            return ink_err_set(d->err, INK_E_IO, "cannot read %s: %s", d->partial,
                               r < 0 ? strerror(errno) : "unexpected end of file");
        }
        hashes_update(d, buf, (size_t)r);
        left -= r;
    }
    free(buf);
    return INK_OK;
}

static void draw_progress(dl *d, int final)
{
    hub *h = d->h;
    if (!h->log || !h->o->tty) return;
    double t = now_s();
    if (!final && t - d->t_draw < 0.1) return;
    d->t_draw = t;
    double el = t - d->t0;
    double rate = el > 0.05 ? (double)(d->have - d->session0) / el : 0;
    char a[32], b[32], r[32] = "--", eta[32];
    human_bytes((double)d->have, a, sizeof a);
    human_bytes(d->size >= 0 ? (double)d->size : 0, b, sizeof b);
    if (rate > 0) human_bytes(rate, r, sizeof r);
    double frac = d->size > 0 ? (double)d->have / (double)d->size : 0;
    if (frac > 1) frac = 1;
    char bar[26];
    int fill = (int)(frac * 24);
    for (int i = 0; i < 24; i++) bar[i] = i < fill ? '#' : '-';
    bar[24] = '\0';
    human_time(rate > 0 && d->size >= 0 ? (double)(d->size - d->have) / rate : -1, eta, sizeof eta);
    fprintf(h->log, "\r[%d/%d] %.40s [%s] %s / %s %3d%% %s/s ETA %s\033[K", d->idx, d->n, d->f->path,
            bar, a, d->size >= 0 ? b : "?", (int)(frac * 100), r, eta);
    fflush(h->log);
    d->drawn = 1;
}

static size_t file_sink(void *ctx, const char *data, size_t n)
{
    dl *d = ctx;
    hub *h = d->h;
    if (!d->started) {
        d->started = 1;
        if (h->r.status == 206) {
            long long a = -1, b = -1, tot = -1;
            if (sscanf(h->r.content_range, "bytes %lld-%lld/%lld", &a, &b, &tot) < 2 ||
                a != (long long)d->have || (d->size >= 0 && tot >= 0 && tot != (long long)d->size)) {
                d->restart = 1; /* not the continuation we asked for: start over */
                return 0;
            }
            if (d->size < 0 && tot > 0) d->size = tot;
        } else if (d->have > 0) { /* 200: the server ignored the range */
            logf_(h, "[%d/%d] %s: the server ignored the range; starting over\n", d->idx, d->n,
                  d->f->path);
            if (truncate_partial(d) != INK_OK) return 0;
        }
    }
    if (d->size >= 0 && d->have + (int64_t)n > d->size) {
        ink_err_set(d->err, INK_E_FORMAT, "the server sent more than the %lld bytes the listing announced",
                    (long long)d->size);
        return 0;
    }
    if (write_all(d->fd, data, n) != 0) {
        int e = errno;
        if (is_disk_full(e))
            ink_err_set(d->err, INK_E_IO,
                        "disk full writing %s (%lld bytes so far): free some space and run the same "
                        "command again to resume",
                        d->partial, (long long)d->have);
        else
            ink_err_set(d->err, INK_E_IO, "cannot write %s: %s", d->partial, strerror(e));
        return 0;
    }
    hashes_update(d, data, n);
    d->have += (int64_t)n;
    h->net_bytes += (int64_t)n;
    draw_progress(d, 0);
    return n;
}

static void clear_progress(dl *d)
{
    if (d->drawn && d->h->log) {
        fprintf(d->h->log, "\r\033[K");
        fflush(d->h->log);
        d->drawn = 0;
    }
}

/* Verifies the complete partial file. INK_OK, or INK_E_FORMAT with the mismatch. */
static int verify(dl *d, char *what, size_t nwhat, ink_err *err)
{
    if (d->size >= 0 && d->have != d->size)
        return ink_err_set(err, INK_E_FORMAT, "%s: size %lld, expected %lld", d->f->path,
                           (long long)d->have, (long long)d->size);
    uint8_t dig[32];
    char hex[65];
    if (d->f->sha256[0]) {
        if (ink_sha256_final(&d->s256, dig) != 0)
            return ink_err_set(err, INK_E_NOMEM, "%s: libcrypto could not compute the sha256", d->f->path);
        ink_hex(dig, 32, hex);
        if (strcmp(hex, d->f->sha256) != 0)
            return ink_err_set(err, INK_E_FORMAT, "%s: sha256 %s, expected %s", d->f->path, hex,
                               d->f->sha256);
        snprintf(what, nwhat, "sha256 ok");
    } else if (d->use_s1) {
        if (ink_sha1_final(&d->s1, dig) != 0)
            return ink_err_set(err, INK_E_NOMEM, "%s: libcrypto could not compute the sha1", d->f->path);
        ink_hex(dig, 20, hex);
        if (strcmp(hex, d->f->blob) != 0)
            return ink_err_set(err, INK_E_FORMAT, "%s: git blob id %s, expected %s", d->f->path, hex,
                               d->f->blob);
        snprintf(what, nwhat, "git blob id ok");
    } else {
        snprintf(what, nwhat, d->size >= 0 ? "size ok" : "unverified");
    }
    return INK_OK;
}

static int fsync_dir_of(const char *path)
{
    char buf[4096];
    if (pathf(buf, sizeof buf, "%s", path)) return -1;
    char *slash = strrchr(buf, '/');
    if (!slash) return 0;
    *slash = '\0';
    int fd = open(buf, O_RDONLY);
    if (fd < 0) return -1;
    int r = fsync(fd);
    close(fd);
    return r;
}

static int download_one(hub *h, hub_file *f, const char *dest, int idx, int n, ink_err *err)
{
    char partial[4200];
    if (pathf(partial, sizeof partial, "%s.incomplete", dest))
        return ink_err_set(err, INK_E_IO, "path too long: %.200s", dest);
    char path_enc[2048], url[4096];
    int rc = ink_hub_urlencode(f->path, 1, path_enc, sizeof path_enc, err);
    if (rc) return rc;
    if (pathf(url, sizeof url, "%s/%s/resolve/%s/%s", h->ep, h->repo, h->commit, path_enc))
        return ink_err_set(err, INK_E_INVAL, "URL too long for %s", f->path);
    if ((rc = mkdirs(dest, 1, err))) return rc;

    dl d = {0};
    d.h = h;
    d.f = f;
    d.partial = partial;
    d.size = f->size;
    d.err = err;
    d.idx = idx;
    d.n = n;
    d.fd = open(partial, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (d.fd < 0) return ink_err_set(err, INK_E_IO, "cannot open %s: %s", partial, strerror(errno));
    struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(d.fd, F_SETLK, &lk) != 0) {
        close(d.fd);
        return ink_err_set(err, INK_E_IO, "%s is being written by another inkling download", partial);
    }
    struct stat st;
    if (fstat(d.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(d.fd);
        return ink_err_set(err, INK_E_IO, "%s is not a regular file", partial);
    }
    d.have = st.st_size;
    if (h->o->force || (d.size >= 0 && d.have > d.size)) {
        if ((rc = truncate_partial(&d))) goto fail;
    } else if ((rc = hash_existing(&d))) {
        goto fail;
    }
    int64_t resumed_at = d.have;
    if (resumed_at > 0)
        logf_(h, "[%d/%d] %s: resuming at byte %lld\n", idx, n, f->path, (long long)resumed_at);
    d.session0 = d.have;
    d.t0 = now_s();
    int idle = 0, fresh_restarts = 0, attempts = 0;
    char what[64];
    while (1) {
        if (d.size < 0 || d.have < d.size) {
            attempts++;
            ink_err e1 = {0};
            int transient = 0;
            int64_t before = d.have;
            d.started = 0;
            d.restart = 0;
            d.err = &e1;
            h->sink = file_sink;
            h->sink_ctx = &d;
            if (lseek(d.fd, d.have, SEEK_SET) != d.have) {
                rc = ink_err_set(err, INK_E_IO, "cannot seek %s: %s", partial, strerror(errno));
                goto fail;
            }
            int r = http_get(h, url, d.have, &transient, &e1);
            h->sink = NULL;
            d.err = err;
            int ok2xx = r == INK_OK && h->r.status >= 200 && h->r.status < 300;
            if (d.restart) { /* wrong Content-Range: start over from 0 */
                if ((rc = truncate_partial(&d))) goto fail;
                r = INK_E_NET;
                transient = 1;
                snprintf(e1.msg, sizeof e1.msg, "unexpected Content-Range '%s'", h->r.content_range);
            } else if (r == INK_OK && h->r.status == 416) {
                if ((rc = truncate_partial(&d))) goto fail;
                r = INK_E_NET;
                transient = 1;
                snprintf(e1.msg, sizeof e1.msg, "the server rejected the range (HTTP 416)");
            } else if (ok2xx) {
                if (d.size < 0) d.size = d.have; /* no size known: the response defines it */
                if (d.have < d.size) {             /* short body without a transport error */
                    r = INK_E_NET;
                    transient = 1;
                    snprintf(e1.msg, sizeof e1.msg, "short response (%lld of %lld bytes)",
                             (long long)d.have, (long long)d.size);
                }
            }
            if (r != INK_OK || !ok2xx) {
                if (r == INK_OK && !ok2xx && !d.restart) {
                    /* a storage host refusing a pre-signed URL (expired, throttled): a new
                     * resolve gives a fresh one */
                    int storage = h->r.foreign && (h->r.status == 401 || h->r.status == 403);
                    transient = storage || status_transient(h->r.status);
                    r = INK_E_NET;
                }
                if (r != INK_E_NET || !transient) { /* fatal: disk full, 4xx, bad redirect */
                    clear_progress(&d);
                    if (e1.code)
                        rc = ink_err_set(err, e1.code, "%s: %s", f->path, e1.msg);
                    else
                        rc = http_status_error(h, f->path, attempts, err);
                    goto fail;
                }
                idle = d.have > before ? 0 : idle + 1;
                if (idle > h->max_retries) {
                    clear_progress(&d);
                    if (!e1.code && h->r.status >= 300)
                        rc = http_status_error(h, f->path, attempts, err);
                    else
                        rc = ink_err_set(err, INK_E_NET,
                                         "%s: %s (gave up after %d attempts; %lld bytes are kept in "
                                         "%s, run again to resume)",
                                         f->path, e1.code ? e1.msg : "transfer failed", attempts,
                                         (long long)d.have, partial);
                    goto fail;
                }
                double delay = backoff_delay(h, idle ? idle : 1);
                clear_progress(&d);
                logf_(h, "[%d/%d] %s: %s at byte %lld; retrying in %.1f s\n", idx, n, f->path,
                      e1.code ? e1.msg : "HTTP error", (long long)d.have, delay);
                sleep_s(delay);
                continue;
            }
        }
        /* complete: verify */
        ink_err ev = {0};
        if (verify(&d, what, sizeof what, &ev) != INK_OK) {
            clear_progress(&d);
            if (fresh_restarts == 0 && resumed_at > 0) {
                /* the kept partial may be from another commit or corrupted: one clean retry */
                logf_(h, "[%d/%d] %s: verification failed (%s); downloading it again from the start\n",
                      idx, n, f->path, ev.msg);
                fresh_restarts++;
                resumed_at = 0;
                d.size = f->size;
                if ((rc = truncate_partial(&d))) goto fail;
                continue;
            }
            unlink(partial);
            rc = ink_err_set(err, INK_E_FORMAT, "verification failed: %s; the download was deleted",
                             ev.msg);
            hashes_free(&d);
            close(d.fd);
            return rc;
        }
        break;
    }
    draw_progress(&d, 1);
    clear_progress(&d);
    if (fsync(d.fd) != 0) {
        rc = ink_err_set(err, INK_E_IO, "cannot sync %s: %s", partial,
                         is_disk_full(errno) ? "disk full" : strerror(errno));
        goto fail;
    }
    if (rename(partial, dest) != 0) {
        rc = ink_err_set(err, INK_E_IO, "cannot rename %s to %s: %s", partial, dest, strerror(errno));
        goto fail;
    }
    fsync_dir_of(dest);
    hashes_free(&d);
    close(d.fd);
    if (h->log) {
        double el = now_s() - d.t0;
        char b[32], r[32];
        human_bytes((double)d.have, b, sizeof b);
        human_bytes(el > 0 ? (double)(d.have - d.session0) / el : 0, r, sizeof r);
        logf_(h, "[%d/%d] %s  %s  %s in %.1f s (%s/s), %s\n", idx, n, f->path, b,
              d.session0 > 0 ? "resumed" : "downloaded", el, r, what);
    }
    return INK_OK;
fail:
    hashes_free(&d);
    close(d.fd);
    return rc;
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
    if (parse_origin(h->ep, &og) != 0 || (strcmp(og.scheme, "http") != 0 && strcmp(og.scheme, "https") != 0))
        return ink_err_set(err, INK_E_INVAL, "invalid Hub endpoint '%s' (expected https://host)",
                           h->ep);
    memcpy(h->ep_scheme, og.scheme, sizeof og.scheme);
    memcpy(h->ep_host, og.host, sizeof og.host);
    h->ep_port = og.port;
    h->ep_https = strcmp(og.scheme, "https") == 0;
    if (!h->ep_https && !host_is_loopback(og.host) && !o->allow_insecure)
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
    if (pathf(dir, sizeof dir, "%s/refs", base) || pathf(p, sizeof p, "%s/%s", dir, rev_enc) ||
        pathf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid()))
        return ink_err_set(err, INK_E_IO, "path too long under %.200s", base);
    int rc = mkdirs(dir, 0, err);
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

    if ((rc = fetch_listing(h, err))) return rc;
    if ((rc = select_files(h, err))) return rc;

    char base[4096], dir[4096];
    if (local) {
        if (strlen(local) >= sizeof dir - 600)
            return ink_err_set(err, INK_E_INVAL, "--local-dir path too long");
        pathf(dir, sizeof dir, "%s", local);
        base[0] = '\0';
    } else {
        if (strlen(o->cache_dir) >= sizeof base - 700)
            return ink_err_set(err, INK_E_INVAL, "cache directory path too long");
        pathf(base, sizeof base, "%s/models/%s", o->cache_dir, repo_id);
        pathf(dir, sizeof dir, "%s/snapshots/%s", base, h->commit);
    }
    size_t dl_ = strlen(dir);
    while (dl_ > 1 && dir[dl_ - 1] == '/') dir[--dl_] = '\0';
    if ((rc = mkdirs(dir, 0, err))) return rc;

    /* plan: what is present, what must come, and is there room */
    int n_sel = 0, n_todo = 0;
    int64_t need = 0, total = 0;
    for (int i = 0; i < h->n_files; i++) {
        hub_file *f = &h->files[i];
        if (!f->selected) continue;
        n_sel++;
        char dest[4700], part[4800];
        if (pathf(dest, sizeof dest, "%s/%s", dir, f->path) ||
            pathf(part, sizeof part, "%s.incomplete", dest))
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
    human_bytes((double)total, hb, sizeof hb);
    logf_(h, "%s @ %s (%s): %d file%s selected, %d to download (%s) into %s\n", repo_id, h->commit,
          h->rev, n_sel, n_sel == 1 ? "" : "s", n_todo, hb, dir);
    int64_t avail = free_bytes(o, dir);
    if (avail >= 0 && need > avail) {
        human_bytes((double)need, hb, sizeof hb);
        human_bytes((double)avail, hf, sizeof hf);
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
        pathf(dest, sizeof dest, "%s/%s", dir, f->path);
        if (f->selected == 2) {
            res->n_skipped++;
            logf_(h, "[%d/%d] %s  already present, skipped\n", idx, n_sel, f->path);
            continue;
        }
        if ((rc = download_one(h, f, dest, idx, n_sel, err))) return rc;
        res->n_downloaded++;
    }
    if (base[0] && strcmp(h->rev, h->commit) != 0 && (rc = write_ref(base, h->rev_enc, h->commit, err)))
        return rc;
    memcpy(res->commit, h->commit, sizeof res->commit);
    pathf(res->dir, sizeof res->dir, "%s", dir);
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
    curl_easy_setopt(h->c, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(h->c, CURLOPT_HEADERDATA, h);
    curl_easy_setopt(h->c, CURLOPT_WRITEFUNCTION, write_cb);
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
