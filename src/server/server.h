/*
 * server.h — `inkling serve`: an OpenAI-compatible HTTP server (libmicrohttpd) around one model.
 *
 * Threads: libmicrohttpd runs one thread per connection; those threads parse and validate
 * requests, render chat prompts (the tokenizer is thread-safe) and put jobs on a bounded FIFO.
 * One inference worker thread loads the model (GET /health says 503 until it is ready), then runs
 * the jobs one at a time (B = 1) on one session, with prompt-prefix reuse between requests. The
 * worker formats every response body itself (a JSON document or SSE text) into the job; the
 * connection thread only copies bytes out, sends SSE comment pings while nothing arrives, and
 * flags the job cancelled when the client goes away (the worker stops at the next token).
 *
 * Endpoints and fields: docs/server.md. Library conventions of inkling.h apply (no exit(), no
 * getenv: every setting comes in ink_server_opts).
 */
#ifndef INK_SERVER_SERVER_H
#define INK_SERVER_SERVER_H

#include <stdio.h>

#include "inkling.h"

typedef struct ink_server ink_server;

typedef struct ink_server_opts {
    const char *host;       /* listen address (numeric IPv4 / IPv6); NULL: 127.0.0.1 */
    int port;               /* 0: an ephemeral port (see ink_server_port) */
    const char *api_key;    /* NULL or "": no authentication */
    const char *model_dir;  /* required */
    const char *model_id;   /* id in /v1/models and the accepted "model"; NULL: basename of model_dir */
    int draft;              /* 0: no drafter; 1: open the MTP head (--draft-kind mtp); 2: open it where the
                               model has one, else serve plainly (the default, --draft-kind auto) */
    const char *draft_dir;  /* MTP head directory; NULL: model_dir */
    int spec_default;       /* with a drafter: 1 = requests draft unless they say otherwise */
    int block_size;         /* default verify width K (<= 0: auto, chosen per round) */
    int block_max;          /* auto: the widest K (<= 0: the generator's default) */
    int parallel;           /* slots: requests generated at once, batched per step (<= 0: 4) */
    int cache_checkpoints;  /* prompt-cache checkpoints (0: none; < 0: as many as fit 256 MiB, 1..8) */
    int draft_opts_set;     /* drafting options were given: draft 2 without a head is then an error */
    int mtp_mode;           /* enum ink_mtp_mode */
    int draft_vocab;        /* > 0: the drafter proposes only the first N ids of draft_vocab.json */
    int rollback_replay;    /* 1: restore + replay after a rejection; 0: capture-and-commit (default) */
    int n_threads;          /* <= 0: all cores */
    int check_tensors;      /* nonzero: --check-tensors (scan the weights for NaN/Inf at load) */
    int activations;        /* enum ink_activations (0: auto) */
    int no_mmap;            /* 1: --no-mmap (ink_model_opts.no_mmap) */
    const ink_ep_transport *expert_parallel; /* NULL: one process; else rank 0 of an expert-parallel job */
    int n_ctx;              /* <= 0: min(model_max_length, 4096) */
    int queue_max;          /* requests waiting behind the running one; < 0: 8 */
    size_t body_max;        /* request body limit in bytes; 0: 8 MiB */
    double ping_s;          /* SSE comment ping interval (seconds); <= 0: 15 */
    int max_conn;           /* concurrent connections; <= 0: 64 */
    int timeout_s;          /* idle connection timeout; <= 0: 120 */
    int default_max_tokens; /* < 0: to the end of the context */
    ink_sampling sampling;  /* defaults of the sampling fields */
    int seed_fixed;         /* 1: requests without "seed" use sampling.seed; 0: a fresh seed each */
    const char *effort;     /* default reasoning effort (NULL: the template default, 0.9) */
    FILE *log;              /* one line per request and load messages; NULL: silent */
    const char *debug_hold; /* testing aid (--debug-hold FILE): while FILE exists the worker waits after
                             * each token it emits; cancellation and shutdown end the wait. NULL: off */
} ink_server_opts;

enum ink_server_state { INK_SERVER_LOADING = 0, INK_SERVER_READY = 1, INK_SERVER_FAILED = 2 };

/* Binds the socket and starts the HTTP and worker threads; the model loads in the background.
 * INK_E_IO when the address cannot be bound. Caller stops and frees with ink_server_stop. */
int ink_server_start(ink_server **out, const ink_server_opts *opts, ink_err *err);
/* The bound TCP port. */
int ink_server_port(const ink_server *s);
/* enum ink_server_state; when FAILED and err is not NULL, copies the load error into it. */
int ink_server_state(ink_server *s, ink_err *err);
/* Cancels the running and queued requests, stops the threads and frees everything. NULL: no-op. */
void ink_server_stop(ink_server *s);

#endif
