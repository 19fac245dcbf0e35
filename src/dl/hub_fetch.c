/* hub_fetch.c — one file: resumable ranged transfer into <dest>.incomplete, sha256 / git blob
 * hashing on the fly, verification, fsync and rename into place. Depends on dl/sha, hub_http.c. */
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
    double t = ink_now_s();
    if (!final && t - d->t_draw < 0.1) return;
    d->t_draw = t;
    double el = t - d->t0;
    double rate = el > 0.05 ? (double)(d->have - d->session0) / el : 0;
    char a[32], b[32], r[32] = "--", eta[32];
    hub_human_bytes((double)d->have, a, sizeof a);
    hub_human_bytes(d->size >= 0 ? (double)d->size : 0, b, sizeof b);
    if (rate > 0) hub_human_bytes(rate, r, sizeof r);
    double frac = d->size > 0 ? (double)d->have / (double)d->size : 0;
    if (frac > 1) frac = 1;
    char bar[26];
    int fill = (int)(frac * 24);
    for (int i = 0; i < 24; i++) bar[i] = i < fill ? '#' : '-';
    bar[24] = '\0';
    hub_human_time(rate > 0 && d->size >= 0 ? (double)(d->size - d->have) / rate : -1, eta, sizeof eta);
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
            hub_logf(h, "[%d/%d] %s: the server ignored the range; starting over\n", d->idx, d->n,
                  d->f->path);
            if (truncate_partial(d) != INK_OK) return 0;
        }
    }
    if (d->size >= 0 && d->have + (int64_t)n > d->size) {
        ink_err_set(d->err, INK_E_FORMAT, "the server sent more than the %lld bytes the listing announced",
                    (long long)d->size);
        return 0;
    }
    if (hub_write_all(d->fd, data, n) != 0) {
        int e = errno;
        if (hub_is_disk_full(e))
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
    if (hub_pathf(buf, sizeof buf, "%s", path)) return -1;
    char *slash = strrchr(buf, '/');
    if (!slash) return 0;
    *slash = '\0';
    int fd = open(buf, O_RDONLY);
    if (fd < 0) return -1;
    int r = fsync(fd);
    close(fd);
    return r;
}

/* Opens, locks and checks <dest>.incomplete and brings d's hashes up to what it holds (or empties
 * it with --force or when it is larger than the listing says). d->fd stays open on success. */
static int open_partial(dl *d, ink_err *err)
{
    const char *partial = d->partial;
    d->fd = open(partial, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (d->fd < 0) return ink_err_set(err, INK_E_IO, "cannot open %s: %s", partial, strerror(errno));
    struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(d->fd, F_SETLK, &lk) != 0) {
        close(d->fd);
        return ink_err_set(err, INK_E_IO, "%s is being written by another inkling download", partial);
    }
    struct stat st;
    if (fstat(d->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(d->fd);
        return ink_err_set(err, INK_E_IO, "%s is not a regular file", partial);
    }
    d->have = st.st_size;
    int rc = d->h->o->force || (d->size >= 0 && d->have > d->size) ? truncate_partial(d) : hash_existing(d);
    if (rc) {
        hashes_free(d);
        close(d->fd);
    }
    return rc;
}

/* One GET of the rest of the file. Returns 0 when the response completed the file (verify next),
 * 1 when a transient failure was logged and slept on (try again), or a negative INK_E_* (fatal,
 * err set). *idle counts consecutive attempts that made no progress. */
static int fetch_attempt(dl *d, const char *url, int *idle, int *attempts, ink_err *err)
{
    hub *h = d->h;
    hub_file *f = d->f;
    int rc;
    (*attempts)++;
    ink_err e1 = {0};
    int transient = 0;
    int64_t before = d->have;
    d->started = 0;
    d->restart = 0;
    d->err = &e1;
    h->sink = file_sink;
    h->sink_ctx = d;
    if (lseek(d->fd, d->have, SEEK_SET) != d->have)
        return ink_err_set(err, INK_E_IO, "cannot seek %s: %s", d->partial, strerror(errno));
    int r = hub_http_get(h, url, d->have, &transient, &e1);
    h->sink = NULL;
    d->err = err;
    int ok2xx = r == INK_OK && h->r.status >= 200 && h->r.status < 300;
    if (d->restart) { /* wrong Content-Range: start over from 0 */
        if ((rc = truncate_partial(d))) return rc;
        r = INK_E_NET;
        transient = 1;
        snprintf(e1.msg, sizeof e1.msg, "unexpected Content-Range '%s'", h->r.content_range);
    } else if (r == INK_OK && h->r.status == 416) {
        if ((rc = truncate_partial(d))) return rc;
        r = INK_E_NET;
        transient = 1;
        snprintf(e1.msg, sizeof e1.msg, "the server rejected the range (HTTP 416)");
    } else if (ok2xx) {
        if (d->size < 0) d->size = d->have; /* no size known: the response defines it */
        if (d->have < d->size) {             /* short body without a transport error */
            r = INK_E_NET;
            transient = 1;
            snprintf(e1.msg, sizeof e1.msg, "short response (%lld of %lld bytes)",
                     (long long)d->have, (long long)d->size);
        }
    }
    if (r == INK_OK && ok2xx) return 0;
    if (r == INK_OK && !ok2xx && !d->restart) {
        /* a storage host refusing a pre-signed URL (expired, throttled): a new
         * resolve gives a fresh one */
        int storage = h->r.foreign && (h->r.status == 401 || h->r.status == 403);
        transient = storage || hub_status_transient(h->r.status);
        r = INK_E_NET;
    }
    if (r != INK_E_NET || !transient) { /* fatal: disk full, 4xx, bad redirect */
        clear_progress(d);
        if (e1.code) return ink_err_set(err, e1.code, "%s: %s", f->path, e1.msg);
        return hub_http_status_error(h, f->path, *attempts, err);
    }
    *idle = d->have > before ? 0 : *idle + 1;
    if (*idle > h->max_retries) {
        clear_progress(d);
        if (!e1.code && h->r.status >= 300) return hub_http_status_error(h, f->path, *attempts, err);
        return ink_err_set(err, INK_E_NET,
                           "%s: %s (gave up after %d attempts; %lld bytes are kept in "
                           "%s, run again to resume)",
                           f->path, e1.code ? e1.msg : "transfer failed", *attempts,
                           (long long)d->have, d->partial);
    }
    double delay = hub_backoff_delay(h, *idle ? *idle : 1);
    clear_progress(d);
    hub_logf(h, "[%d/%d] %s: %s at byte %lld; retrying in %.1f s\n", d->idx, d->n, f->path,
             e1.code ? e1.msg : "HTTP error", (long long)d->have, delay);
    hub_sleep_s(delay);
    return 1;
}

/* fsync, rename into place, the per-file log line. */
static int finish(dl *d, const char *dest, const char *what, ink_err *err)
{
    hub *h = d->h;
    draw_progress(d, 1);
    clear_progress(d);
    if (fsync(d->fd) != 0)
        return ink_err_set(err, INK_E_IO, "cannot sync %s: %s", d->partial,
                           hub_is_disk_full(errno) ? "disk full" : strerror(errno));
    if (rename(d->partial, dest) != 0)
        return ink_err_set(err, INK_E_IO, "cannot rename %s to %s: %s", d->partial, dest,
                           strerror(errno));
    fsync_dir_of(dest);
    if (h->log) {
        double el = ink_now_s() - d->t0;
        char b[32], r[32];
        hub_human_bytes((double)d->have, b, sizeof b);
        hub_human_bytes(el > 0 ? (double)(d->have - d->session0) / el : 0, r, sizeof r);
        hub_logf(h, "[%d/%d] %s  %s  %s in %.1f s (%s/s), %s\n", d->idx, d->n, d->f->path, b,
                 d->session0 > 0 ? "resumed" : "downloaded", el, r, what);
    }
    return INK_OK;
}

int hub_download_one(hub *h, hub_file *f, const char *dest, int idx, int n, ink_err *err)
{
    char partial[4200];
    if (hub_pathf(partial, sizeof partial, "%s.incomplete", dest))
        return ink_err_set(err, INK_E_IO, "path too long: %.200s", dest);
    char path_enc[2048], url[4096];
    int rc = ink_hub_urlencode(f->path, 1, path_enc, sizeof path_enc, err);
    if (rc) return rc;
    if (hub_pathf(url, sizeof url, "%s/%s/resolve/%s/%s", h->ep, h->repo, h->commit, path_enc))
        return ink_err_set(err, INK_E_INVAL, "URL too long for %s", f->path);
    if ((rc = hub_mkdirs(dest, 1, err))) return rc;

    dl d = {0};
    d.h = h;
    d.f = f;
    d.partial = partial;
    d.size = f->size;
    d.err = err;
    d.idx = idx;
    d.n = n;
    if ((rc = open_partial(&d, err))) return rc;
    int64_t resumed_at = d.have;
    if (resumed_at > 0)
        hub_logf(h, "[%d/%d] %s: resuming at byte %lld\n", idx, n, f->path, (long long)resumed_at);
    d.session0 = d.have;
    d.t0 = ink_now_s();
    int idle = 0, fresh_restarts = 0, attempts = 0;
    char what[64];
    while (1) {
        if (d.size < 0 || d.have < d.size) {
            rc = fetch_attempt(&d, url, &idle, &attempts, err);
            if (rc < 0) goto out;
            if (rc == 1) continue;
        }
        /* complete: verify */
        ink_err ev = {0};
        if (verify(&d, what, sizeof what, &ev) != INK_OK) {
            clear_progress(&d);
            if (fresh_restarts == 0 && resumed_at > 0) {
                /* the kept partial may be from another commit or corrupted: one clean retry */
                hub_logf(h, "[%d/%d] %s: verification failed (%s); downloading it again from the start\n",
                         idx, n, f->path, ev.msg);
                fresh_restarts++;
                resumed_at = 0;
                d.size = f->size;
                if ((rc = truncate_partial(&d))) goto out;
                continue;
            }
            unlink(partial);
            rc = ink_err_set(err, INK_E_FORMAT, "verification failed: %s; the download was deleted",
                             ev.msg);
            goto out;
        }
        break;
    }
    rc = finish(&d, dest, what, err);
out:
    hashes_free(&d);
    close(d.fd);
    return rc;
}
