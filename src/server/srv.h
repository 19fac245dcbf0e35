/* srv.h — internals of the server shared by server.c (HTTP), api.c (requests), worker.c
 * (inference) and out.c (output mapping). Exposed to tests/test_server.c for the unit tests of the
 * output mapping. */
#ifndef INK_SERVER_SRV_H
#define INK_SERVER_SRV_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/clock.h"
#include "server/server.h"
#include "tok/chat.h"
#include "tok/tokenizer.h"

/* ---- growable byte buffer: the shared one (base/buf.h) under the server's names ------------ */

typedef ink_buf srv_buf;
static inline void srv_buf_add(srv_buf *b, const char *s, size_t n) { ink_buf_add(b, s, n); }
static inline void srv_buf_free(srv_buf *b) { ink_buf_free(b); }

/* ---- stop strings ------------------------------------------------------------------------ */

/* Holds back the last (longest stop - 1) bytes of a text stream until they cannot start a stop
 * string, and cuts the text where the first stop string begins. Text must come in whole UTF-8
 * characters; what is released always ends on a character boundary. */
typedef struct srv_stopper {
    srv_buf acc;      /* all text so far (cut at the stop when hit) */
    size_t sent;      /* bytes of acc released */
    char **stops;     /* borrowed */
    int n_stops;
    size_t max_len;
    int hit;          /* a stop string was found */
} srv_stopper;

void srv_stopper_init(srv_stopper *st, char **stops, int n_stops);
/* Appends text; *out / *n receive the newly released bytes (borrowed until the next call). Returns
 * 1 when a stop string was hit (the text stops there; later pushes are ignored). */
int srv_stopper_push(srv_stopper *st, const char *s, size_t n, const char **out, size_t *out_n);
/* End of stream: releases the held-back tail. */
void srv_stopper_flush(srv_stopper *st, const char **out, size_t *out_n);
void srv_stopper_free(srv_stopper *st);

/* ---- output mapping: generated ids -> OpenAI message parts -------------------------------- */

enum srv_delta_kind { SRV_D_CONTENT, SRV_D_REASONING, SRV_D_TOOL };

/* A piece of output as it becomes final. SRV_D_TOOL: `tool` is the complete OpenAI tool call
 * object {id, type, function: {name, arguments}} (borrowed), `index` its position. */
typedef void (*srv_delta_fn)(void *ud, int kind, const char *text, size_t len, json_t *tool, int index);

typedef struct srv_out {
    int chat;                 /* 1: Inkling block parser (chat); 0: plain detokenizer */
    const ink_tokenizer *tok; /* NULL: no text at all (token ids only) */
    ink_chat_parser *parser;
    ink_detok *detok;
    srv_stopper stop;         /* on the visible text */
    srv_buf reasoning;        /* all reasoning text */
    srv_buf tool;             /* payload of the open tool block */
    int in_tool;              /* 1 inside a tool-call block */
    char *tool_name;          /* its header name */
    json_t *tool_calls;       /* array of tool call objects */
    char id_prefix[48];       /* tool call ids: <prefix>_<n> */
    int stop_id_seen;         /* a stop id (chat) ended the turn */
    int finished;
    srv_delta_fn fn;
    void *ud;
} srv_out;

int srv_out_init(srv_out *o, int chat, const ink_tokenizer *tok, char **stops, int n_stops, const char *id_prefix,
                 srv_delta_fn fn, void *ud, ink_err *err);
/* Feeds one generated id. Returns 1 when generation should stop here (a chat stop id or a stop
 * string), 0 otherwise. */
int srv_out_feed(srv_out *o, int32_t id);
/* End of generation: closes an open block, releases held-back text. Idempotent. */
void srv_out_finish(srv_out *o);
/* Visible text released so far (after finish: all of it, cut at a stop string). */
const char *srv_out_text(const srv_out *o, size_t *len);
void srv_out_free(srv_out *o);

/* ---- jobs --------------------------------------------------------------------------------- */

enum srv_kind { SRV_CHAT = 1, SRV_COMPLETION = 2 };

typedef struct srv_job {
    /* request, read-only once queued */
    int kind;
    int stream, include_usage, return_ids;
    int32_t *prompt;
    int n_prompt;
    int max_tokens;
    int stop_eos;
    ink_sampling sampling;
    int use_draft, block_size, mtp_mode;
    char **stops;
    int n_stops;
    char id[48];
    long long created;
    char *model_id;
    double t_start;           /* request received (monotonic seconds) */
    char path[40];

    /* shared with the connection thread, under ink_server.mu */
    int refs;
    int counted;              /* counted in S->n_jobs */
    atomic_int cancel;        /* the client went away (HTTP threads set it, the worker reads it) */
    int done;                 /* the body is complete */
    int status;               /* HTTP status of a non-streamed response */
    srv_buf body;             /* response body (non-stream) or SSE text not yet sent (stream) */
    size_t rpos;              /* SSE: bytes of body already handed to MHD */
    double last_send;         /* SSE: when bytes were last handed out (for pings) */
    pthread_cond_t cv;
    int fd;                   /* connection socket (disconnect checks) */
    struct srv_job *next;
} srv_job;

/* One slot (worker.c): a session with the prompt cache, its generator and drafter, and the job it
 * runs (NULL: free). */
typedef struct srv_slot {
    ink_session *sess;
    ink_gen *gen;
    ink_drafter *d;           /* NULL without a drafter (slot 0's is the server's S->drafter) */
    struct srv_job *j;
    struct gctx *c;           /* the job's response state */
    int32_t *out;
    ink_gen_opts o;
    ink_gen_stats st;
    ink_err e;
    int rc, started, setup_failed;
} srv_slot;

typedef struct srv_metrics {
    unsigned long long requests, ok, errors, cancelled, rejected;
    unsigned long long prompt_tokens, reused_tokens, predicted_tokens, cache_hits;
    double prompt_s, predicted_s;
    unsigned long long spec_rounds, draft_tokens, accepted_tokens;
    unsigned long long k_hist[INK_MAX_BLOCK + 1]; /* rounds by verify width (1: plain steps) */
    double draft_s, verify_s, rollback_s;
    unsigned long long pos_proposed[INK_MAX_DEPTH], pos_accepted[INK_MAX_DEPTH];
    int n_pos;
    unsigned long long steps, capped_steps; /* engine steps; of them, with auto slots capped at plain */
} srv_metrics;

struct ink_server {
    ink_server_opts o;
    char *host, *api_key, *model_dir, *model_id, *draft_dir, *effort;
    struct MHD_Daemon *mhd;
    int port;
    pthread_t worker;
    int worker_started;

    pthread_mutex_t mu;
    pthread_cond_t wcv;       /* worker wake-up */
    int state;                /* enum ink_server_state */
    ink_err load_err;
    int stopping;
    srv_job *q_head, *q_tail;
    int q_len;
    struct srv_slot *slots;   /* [n_slots] (worker-owned; a slot's job is read under mu) */
    int n_slots, n_active;    /* slots, and slots running a job */
    volatile int spec_cap;    /* the auto slots' width cap this step (0: none; 1: plain steps) */
    struct srv_spec_ctl *sctl; /* [n_slots + 1]: the batch-wide drafting choice per number of
                                  decoding slots (worker.c; worker-owned) */
    struct ink_batch *batch;  /* the slots' verify rows of one step, in one forward */
    int batch_rows;
    srv_metrics met;
    long long next_id;
    int n_jobs;               /* queued jobs not yet released by both sides (shutdown waits for 0) */

    /* set by the worker before state becomes READY, read-only afterwards */
    ink_model *model;
    ink_session *sess;        /* slot 0's session (its context size stands for all) */
    ink_drafter *drafter;     /* slot 0's drafter (NULL: no drafting); each slot has its own */
    ink_tokenizer *tok;       /* NULL: no tokenizer.json */
    int chat_ok;              /* the tokenizer has the Inkling control tokens */
    ink_chat_ids chat_ids;    /* their ids (valid when chat_ok) */
    char chat_why[256];       /* why chat is unavailable */
    int n_ctx, n_vocab, eos, depth;
    long long load_time;
};

void srv_job_release(ink_server *S, srv_job *j); /* under S->mu */
void *srv_worker_main(void *arg);

/* api.c: parses a request body for `kind` into a new job (refs = 1), or fills *status and *body
 * with an OpenAI error (body malloc'd). */
srv_job *srv_parse_request(ink_server *S, int kind, const char *body, size_t len, int *status, char **err_body);
/* OpenAI-style error document (malloc'd). */
char *srv_error_json(int status, const char *type, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* /tokenize, /detokenize (200 or an error status; body malloc'd). */
int srv_tokenize(ink_server *S, const char *body, size_t len, char **out);
int srv_detokenize(ink_server *S, const char *body, size_t len, char **out);
char *srv_models_json(ink_server *S);
char *srv_metrics_text(ink_server *S);
void srv_job_free(srv_job *j);

#endif
