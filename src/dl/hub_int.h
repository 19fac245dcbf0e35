/* hub_int.h — internals shared by the downloader's files (not installed, not public):
 *   hub.c       small utilities (paths, time, sizes, files) and the driver (ink_hub_download)
 *   hub_http.c  URL helpers, the libcurl request with its redirect / retry policy, HTTP errors
 *   hub_list.c  the Hub API listing and the file selection
 *   hub_fetch.c one file: resumable transfer, hashing, verification, rename into place
 * The hub struct is owned by ink_hub_download; everything else borrows it. */
#ifndef INK_DL_HUB_INT_H
#define INK_DL_HUB_INT_H

#include <curl/curl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/clock.h"
#include "dl/hub.h"

#define MAX_LISTING_BYTES (8u << 20)
#define MAX_SIBLINGS 16384
#define MAX_SELECTED 8192
#define MAX_REDIRECTS 10
#define ERRBODY_MAX 2048

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


typedef struct origin {
    char scheme[16];
    char host[256];
    long port;
} origin;


int hub_pathf(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void hub_sleep_s(double s);
void hub_human_bytes(double b, char *out, size_t n);
void hub_human_time(double s, char *out, size_t n);
int hub_is_hex(const char *s, size_t n);
int hub_mkdirs(const char *path, int parent_only, ink_err *err);
int hub_write_all(int fd, const void *data, size_t n);
int hub_is_disk_full(int e);
int hub_parse_origin(const char *url, origin *o);
int hub_host_is_loopback(const char *h);
size_t hub_header_cb(char *buf, size_t sz, size_t nitems, void *ud);
size_t hub_write_cb(char *data, size_t sz, size_t nmemb, void *ud);
int hub_status_transient(long st);
int hub_http_get(hub *h, const char *url0, int64_t from, int *transient, ink_err *err);
int hub_http_status_error(hub *h, const char *file, int attempts, ink_err *err);
double hub_backoff_delay(hub *h, int attempt);
void hub_logf(hub *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int hub_fetch_listing(hub *h, ink_err *err);
int hub_select_files(hub *h, ink_err *err);
int hub_download_one(hub *h, hub_file *f, const char *dest, int idx, int n, ink_err *err);

#endif
