/* server.c — HTTP side of `inkling serve` on libmicrohttpd (one thread per connection): routing,
 * API key, body limit, the bounded queue (429), SSE streaming with comment pings, and client
 * disconnect detection (which cancels the job). */
#include "server/srv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#define WAIT_SLICE_S 0.05

enum route {
    R_NONE,
    R_HEALTH,
    R_MODELS,
    R_METRICS,
    R_CHAT,
    R_COMPLETIONS,
    R_TOKENIZE,
    R_DETOKENIZE,
};

typedef struct req {
    enum route route;
    srv_buf body;
    int too_big;
    int responded;
} req;

static enum route route_of(const char *method, const char *url, int *bad_method)
{
    static const struct {
        const char *path, *method;
        enum route r;
    } t[] = {
        {"/health", "GET", R_HEALTH},
        {"/v1/health", "GET", R_HEALTH},
        {"/v1/models", "GET", R_MODELS},
        {"/models", "GET", R_MODELS},
        {"/metrics", "GET", R_METRICS},
        {"/v1/chat/completions", "POST", R_CHAT},
        {"/chat/completions", "POST", R_CHAT},
        {"/v1/completions", "POST", R_COMPLETIONS},
        {"/completions", "POST", R_COMPLETIONS},
        {"/tokenize", "POST", R_TOKENIZE},
        {"/detokenize", "POST", R_DETOKENIZE},
    };
    *bad_method = 0;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(url, t[i].path)) {
            if (!strcmp(method, t[i].method) || (!strcmp(method, "HEAD") && !strcmp(t[i].method, "GET"))) return t[i].r;
            *bad_method = 1;
        }
    return R_NONE;
}

static enum MHD_Result send_body(struct MHD_Connection *con, int status, char *body, const char *type)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    enum MHD_Result rc = MHD_queue_response(con, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result send_json(struct MHD_Connection *con, int status, char *body)
{
    if (!body) body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}");
    if (!body) return MHD_NO;
    return send_body(con, status, body, "application/json");
}

static enum MHD_Result send_error(struct MHD_Connection *con, int status, const char *type, const char *code, const char *msg)
{
    return send_json(con, status, srv_error_json(status, type, code, NULL, "%s", msg));
}

/* 1 if the peer has closed the connection (or it failed). */
static int peer_gone(int fd)
{
    if (fd < 0) return 0;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return 0;
    if (n == 0) return 1;
    return !(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, double s)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long ns = ts.tv_nsec + (long)(s * 1e9);
    ts.tv_sec += ns / 1000000000L, ts.tv_nsec = ns % 1000000000L;
    pthread_cond_timedwait(cv, mu, &ts);
}

static int auth_ok(ink_server *S, struct MHD_Connection *con)
{
    if (!S->api_key) return 1;
    const char *h = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Authorization");
    const char *key = NULL;
    if (h && !strncasecmp(h, "Bearer ", 7)) key = h + 7;
    if (!key) key = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "X-Api-Key");
    if (!key) return 0;
    size_t a = strlen(key), b = strlen(S->api_key);
    unsigned char d = (unsigned char)(a != b);
    for (size_t i = 0; i < b; i++) d |= (unsigned char)(key[i < a ? i : 0] ^ S->api_key[i]);
    return d == 0;
}

/* ---- SSE --------------------------------------------------------------------------------- */

typedef struct stream_ctx {
    ink_server *S;
    srv_job *j;
} stream_ctx;

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream_ctx *x = cls;
    ink_server *S = x->S;
    srv_job *j = x->j;
    pthread_mutex_lock(&S->mu);
    for (;;) {
        if (j->body.oom) {
            pthread_mutex_unlock(&S->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (j->body.n > j->rpos) {
            size_t n = j->body.n - j->rpos;
            if (n > max) n = max;
            memcpy(buf, j->body.p + j->rpos, n);
            j->rpos += n;
            if (j->rpos == j->body.n) j->rpos = j->body.n = 0;
            j->last_send = ink_now_s();
            pthread_mutex_unlock(&S->mu);
            return (ssize_t)n;
        }
        if (j->done) {
            pthread_mutex_unlock(&S->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        timed_wait(&j->cv, &S->mu, WAIT_SLICE_S);
        if (j->body.n > j->rpos || j->done) continue;
        if (peer_gone(j->fd)) {
            j->cancel = 1;
            pthread_mutex_unlock(&S->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (ink_now_s() - j->last_send >= S->o.ping_s && max >= 9) {
            memcpy(buf, ": ping\n\n", 8);
            j->last_send = ink_now_s();
            pthread_mutex_unlock(&S->mu);
            return 8;
        }
    }
}

static void sse_free(void *cls)
{
    stream_ctx *x = cls;
    pthread_mutex_lock(&x->S->mu);
    if (!x->j->done) x->j->cancel = 1;
    srv_job_release(x->S, x->j);
    pthread_mutex_unlock(&x->S->mu);
    free(x);
}

/* ---- generation requests ------------------------------------------------------------------ */

static enum MHD_Result generate(ink_server *S, struct MHD_Connection *con, req *r, const char *url)
{
    int status = 0;
    char *err = NULL;
    srv_job *j = srv_parse_request(S, r->route == R_CHAT ? SRV_CHAT : SRV_COMPLETION, r->body.p ? r->body.p : "",
                                   r->body.n, &status, &err);
    if (!j) return send_json(con, status, err);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    j->created = (long long)time(NULL);
    j->t_start = ink_now_s();
    snprintf(j->path, sizeof j->path, "%s", url);
    if (!(j->model_id = strdup(S->model_id))) {
        srv_job_free(j);
        return send_error(con, 500, "server_error", NULL, "out of memory");
    }
    pthread_mutex_lock(&S->mu);
    /* the queue holds queue_max jobs beyond those free slots will take right away */
    int free_slots = (S->n_slots ? S->n_slots : 1) - S->n_active;
    if (S->stopping || S->q_len >= S->o.queue_max + (free_slots > 0 ? free_slots : 0)) {
        int stopping = S->stopping;
        if (!stopping) S->met.rejected++;
        pthread_mutex_unlock(&S->mu);
        srv_job_free(j);
        if (stopping) return send_error(con, 503, "unavailable_error", NULL, "the server is shutting down");
        char m[160];
        snprintf(m, sizeof m, "the server is busy: %d requests are already waiting; retry later", S->o.queue_max);
        return send_error(con, 429, "rate_limit_error", "queue_full", m);
    }
    snprintf(j->id, sizeof j->id, "%s%llx%04x", j->kind == SRV_CHAT ? "chatcmpl-" : "cmpl-", ++S->next_id,
             (unsigned)(((uintptr_t)j >> 4) & 0xffff));
    j->refs = 2; /* the queue / worker and this connection */
    S->n_jobs++, j->counted = 1; /* until both let go (srv_job_release) */
    j->last_send = ink_now_s();
    if (S->q_tail) S->q_tail->next = j;
    else S->q_head = j;
    S->q_tail = j;
    S->q_len++;
    pthread_cond_signal(&S->wcv);
    if (j->stream) {
        pthread_mutex_unlock(&S->mu);
        stream_ctx *x = malloc(sizeof *x);
        struct MHD_Response *resp = NULL;
        if (x) {
            x->S = S, x->j = j;
            resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, x, sse_free);
        }
        if (!resp) {
            pthread_mutex_lock(&S->mu);
            j->cancel = 1;
            srv_job_release(S, j);
            pthread_mutex_unlock(&S->mu);
            free(x);
            return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        enum MHD_Result rc = MHD_queue_response(con, 200, resp);
        MHD_destroy_response(resp);
        return rc;
    }
    /* whole response: wait here (this connection's own thread), watching the socket */
    while (!j->done) {
        timed_wait(&j->cv, &S->mu, WAIT_SLICE_S);
        if (!j->done && peer_gone(j->fd)) {
            j->cancel = 1;
            srv_job_release(S, j);
            pthread_mutex_unlock(&S->mu);
            return MHD_NO;
        }
    }
    int st = j->status;
    char *body = j->body.oom ? NULL : j->body.p;
    if (body) j->body.p = NULL, j->body.n = j->body.cap = 0;
    srv_job_release(S, j);
    pthread_mutex_unlock(&S->mu);
    if (!body) return send_error(con, 500, "server_error", NULL, "out of memory");
    return send_json(con, st, body);
}

/* ---- dispatch ------------------------------------------------------------------------------ */

static enum MHD_Result handler(void *cls, struct MHD_Connection *con, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    ink_server *S = cls;
    req *r = *con_cls;
    if (!r) {
        if (!(r = calloc(1, sizeof *r))) return MHD_NO;
        *con_cls = r;
        int bad_method;
        r->route = route_of(method, url, &bad_method);
        if (r->route == R_NONE) {
            r->responded = 1;
            if (bad_method) return send_error(con, 405, "invalid_request_error", NULL, "method not allowed for this path");
            char m[200];
            snprintf(m, sizeof m, "no such endpoint: %s %.120s", method, url);
            return send_error(con, 404, "invalid_request_error", "not_found", m);
        }
        if (r->route != R_HEALTH && !auth_ok(S, con)) {
            r->responded = 1;
            return send_error(con, 401, "invalid_request_error", "invalid_api_key",
                              "missing or wrong API key: send 'Authorization: Bearer KEY'");
        }
        const char *cl = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(cl, &end, 10);
            if (errno || *end || v > S->o.body_max) {
                r->responded = 1;
                char m[160];
                snprintf(m, sizeof m, "the request body is larger than the limit of %zu bytes", S->o.body_max);
                return send_error(con, 413, "invalid_request_error", "body_too_large", m);
            }
        }
        return MHD_YES;
    }
    if (r->responded) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (r->body.n + *upload_size > S->o.body_max) r->too_big = 1;
        if (!r->too_big) srv_buf_add(&r->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    r->responded = 1;
    if (r->too_big) {
        char m[160];
        snprintf(m, sizeof m, "the request body is larger than the limit of %zu bytes", S->o.body_max);
        return send_error(con, 413, "invalid_request_error", "body_too_large", m);
    }
    if (r->body.oom) return send_error(con, 500, "server_error", NULL, "out of memory");

    pthread_mutex_lock(&S->mu);
    int state = S->state;
    pthread_mutex_unlock(&S->mu);
    if (r->route == R_HEALTH) {
        if (state == INK_SERVER_READY) return send_json(con, 200, strdup("{\"status\":\"ok\"}"));
        if (state == INK_SERVER_LOADING)
            return send_json(con, 503, strdup("{\"error\":{\"code\":503,\"message\":\"Loading model\",\"type\":\"unavailable_error\"}}"));
        return send_error(con, 500, "server_error", NULL, "the model failed to load");
    }
    if (state != INK_SERVER_READY) {
        if (state == INK_SERVER_LOADING) return send_error(con, 503, "unavailable_error", NULL, "Loading model");
        return send_error(con, 500, "server_error", NULL, "the model failed to load");
    }
    char *out = NULL;
    int st;
    switch (r->route) {
    case R_MODELS: return send_json(con, 200, srv_models_json(S));
    case R_METRICS: {
        char *m = srv_metrics_text(S);
        if (!m) return send_error(con, 500, "server_error", NULL, "out of memory");
        return send_body(con, 200, m, "text/plain; version=0.0.4");
    }
    case R_TOKENIZE:
        st = srv_tokenize(S, r->body.p ? r->body.p : "", r->body.n, &out);
        return send_json(con, st, out);
    case R_DETOKENIZE:
        st = srv_detokenize(S, r->body.p ? r->body.p : "", r->body.n, &out);
        return send_json(con, st, out);
    case R_CHAT:
    case R_COMPLETIONS: return generate(S, con, r, url);
    default: return send_error(con, 404, "invalid_request_error", "not_found", "no such endpoint");
    }
}

static void completed(void *cls, struct MHD_Connection *con, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)con, (void)toe;
    req *r = *con_cls;
    if (!r) return;
    srv_buf_free(&r->body);
    free(r);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    ink_server *S = cls;
    if (!S->o.log) return;
    char m[512];
    vsnprintf(m, sizeof m, fmt, ap);
    fprintf(S->o.log, "serve: http: %s%s", m, (*m && m[strlen(m) - 1] == '\n') ? "" : "\n");
}

/* ---- lifecycle -------------------------------------------------------------------------- */

static char *dup_or_null(const char *s)
{
    return s && *s ? strdup(s) : NULL;
}

static void free_server(ink_server *S)
{
    for (int i = S->slots ? S->n_slots - 1 : -1; i >= 0; i--) { /* slot 0's drafter last: the others share it */
        ink_gen_free(S->slots[i].gen);
        ink_session_free(S->slots[i].sess);
        ink_drafter_free(S->slots[i].d);
    }
    if (!S->slots) ink_drafter_free(S->drafter); /* loading failed before the slots (else slot 0 owns it) */
    free(S->slots);
    free(S->sctl);
    ink_batch_free(S->batch);
    ink_model_free(S->model);
    ink_tokenizer_free(S->tok);
    free(S->host), free(S->api_key), free(S->model_dir), free(S->model_id), free(S->draft_dir), free(S->effort);
    pthread_mutex_destroy(&S->mu);
    pthread_cond_destroy(&S->wcv);
    free(S);
}

int ink_server_start(ink_server **out, const ink_server_opts *opts, ink_err *err)
{
    if (!opts || !opts->model_dir || !*opts->model_dir) return ink_err_set(err, INK_E_INVAL, "serve: no model directory");
    if (opts->port < 0 || opts->port > 65535) return ink_err_set(err, INK_E_INVAL, "serve: port %d out of range", opts->port);
    ink_server *S = calloc(1, sizeof *S);
    if (!S) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    S->o = *opts;
    pthread_mutex_init(&S->mu, NULL);
    pthread_cond_init(&S->wcv, NULL);
    if (S->o.queue_max < 0) S->o.queue_max = 8;
    if (!S->o.body_max) S->o.body_max = 8u << 20;
    if (!(S->o.ping_s > 0)) S->o.ping_s = 15;
    if (S->o.max_conn <= 0) S->o.max_conn = 64;
    if (S->o.timeout_s <= 0) S->o.timeout_s = 120;
    S->host = strdup(opts->host && *opts->host ? opts->host : "127.0.0.1");
    S->api_key = dup_or_null(opts->api_key);
    S->model_dir = strdup(opts->model_dir);
    S->draft_dir = dup_or_null(opts->draft_dir);
    S->effort = dup_or_null(opts->effort);
    if (opts->model_id && *opts->model_id) S->model_id = strdup(opts->model_id);
    else if (S->model_dir) {
        char *d = strdup(S->model_dir);
        size_t n = d ? strlen(d) : 0;
        while (n > 1 && d[n - 1] == '/') d[--n] = 0;
        const char *b = d ? strrchr(d, '/') : NULL;
        S->model_id = d ? strdup(b && b[1] ? b + 1 : d) : NULL;
        free(d);
    }
    if (!S->host || !S->model_dir || !S->model_id || (opts->api_key && *opts->api_key && !S->api_key)) {
        free_server(S);
        return ink_err_set(err, INK_E_NOMEM, "out of memory");
    }
    S->o.host = S->host, S->o.api_key = S->api_key, S->o.model_dir = S->model_dir, S->o.model_id = S->model_id;
    S->o.draft_dir = S->draft_dir, S->o.effort = S->effort;
    if (S->effort) {
        double v;
        if (ink_chat_effort(S->effort, &v, err)) {
            free_server(S);
            return INK_E_INVAL;
        }
    }

    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, S->host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET, a4->sin_port = htons((uint16_t)opts->port);
    } else if (inet_pton(AF_INET6, S->host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6, a6->sin6_port = htons((uint16_t)opts->port);
        flags |= MHD_USE_IPv6;
    } else {
        int rc = ink_err_set(err, INK_E_INVAL, "serve: --host '%s' is not a numeric IPv4 or IPv6 address", S->host);
        free_server(S);
        return rc;
    }
    S->mhd = MHD_start_daemon(flags, (uint16_t)opts->port, NULL, NULL, handler, S, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, S,
                              MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, completed, S,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned)S->o.max_conn, MHD_OPTION_CONNECTION_TIMEOUT,
                              (unsigned)S->o.timeout_s, MHD_OPTION_END);
    if (!S->mhd) {
        int rc = ink_err_set(err, INK_E_IO, "serve: cannot listen on %s:%d (address in use or not available)", S->host,
                             opts->port);
        free_server(S);
        return rc;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(S->mhd, MHD_DAEMON_INFO_BIND_PORT);
    S->port = di ? di->port : opts->port;
    if (pthread_create(&S->worker, NULL, srv_worker_main, S)) {
        MHD_stop_daemon(S->mhd);
        free_server(S);
        return ink_err_set(err, INK_E_NOMEM, "serve: cannot start the worker thread");
    }
    S->worker_started = 1;
    *out = S;
    return INK_OK;
}

int ink_server_port(const ink_server *s)
{
    return s->port;
}

int ink_server_state(ink_server *s, ink_err *err)
{
    pthread_mutex_lock(&s->mu);
    int st = s->state;
    if (st == INK_SERVER_FAILED && err) *err = s->load_err;
    pthread_mutex_unlock(&s->mu);
    return st;
}

void ink_server_stop(ink_server *S)
{
    if (!S) return;
    pthread_mutex_lock(&S->mu);
    S->stopping = 1;
    for (int i = 0; S->slots && i < S->n_slots; i++)
        if (S->slots[i].j) S->slots[i].j->cancel = 1;
    pthread_cond_broadcast(&S->wcv);
    pthread_mutex_unlock(&S->mu);
    if (S->worker_started) pthread_join(S->worker, NULL); /* finishes loading first if it was */
    /* every job is finished now (answered, or failed with 503); let the connections send what is
     * left of their bodies (a stream's error event and [DONE]) before closing them: at most 3 s */
    for (int i = 0; i < 300; i++) {
        pthread_mutex_lock(&S->mu);
        int left = S->n_jobs;
        pthread_mutex_unlock(&S->mu);
        if (!left) break;
        struct timespec t = {0, 10 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    MHD_stop_daemon(S->mhd);
    free_server(S);
}
