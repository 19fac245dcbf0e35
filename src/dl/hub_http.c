/* hub_http.c — the downloader's HTTP layer: URL helpers, one GET through libcurl with the
 * redirect policy (the token only to the endpoint), transient-error classification, backoff,
 * HTTP error messages. Depends on libcurl and libc. */
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

/* ---- URL helpers ------------------------------------------------------------------------- */

int hub_parse_origin(const char *url, origin *o)
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

int hub_host_is_loopback(const char *h)
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

size_t hub_header_cb(char *buf, size_t sz, size_t nitems, void *ud)
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

size_t hub_write_cb(char *data, size_t sz, size_t nmemb, void *ud)
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

int hub_status_transient(long st) { return st == 408 || st == 429 || st >= 500; }

/* Performs GET url (with `Range: bytes=<from>-` when from > 0), following redirects by hand: the
 * Authorization header goes only to the endpoint's origin, and https never downgrades to http.
 * Returns INK_OK when a final response arrived (h->r.status, any code), INK_E_NET on a transport
 * failure (*transient says whether a retry may help), or the sink's error. */
int hub_http_get(hub *h, const char *url0, int64_t from, int *transient, ink_err *err)
{
    char url[4096];
    if (hub_pathf(url, sizeof url, "%s", url0)) return ink_err_set(err, INK_E_NET, "URL too long");
    *transient = 0;
    int was_https = 0;
    for (int hop = 0; hop <= MAX_REDIRECTS; hop++) {
        origin o;
        if (hub_parse_origin(url, &o) != 0)
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
        curl_easy_setopt(h->c, CURLOPT_NOPROXY, hub_host_is_loopback(o.host) ? "*" : NULL);
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
            hub_pathf(url, sizeof url, "%s", loc);
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
int hub_http_status_error(hub *h, const char *file, int attempts, ink_err *err)
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

double hub_backoff_delay(hub *h, int attempt)
{
    double d = h->backoff;
    for (int i = 1; i < attempt && d < 30.0; i++) d *= 2;
    if (d > 30.0) d = 30.0;
    if (h->r.retry_after >= 0) d = h->r.retry_after < 60.0 ? h->r.retry_after : 60.0;
    return d;
}

void hub_logf(hub *h, const char *fmt, ...)
{
    if (!h->log) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(h->log, fmt, ap);
    va_end(ap);
    fflush(h->log);
}
