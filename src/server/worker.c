/* worker.c — the inference worker: loads the model, then runs queued jobs in `parallel` slots (each
 * its own session with the prompt cache, generator and drafter), stepping every running slot once
 * per engine step with all their verify rows in one batched forward (continuous batching: a slot
 * that finishes frees at once and the next queued job takes it), formatting each response into its
 * job as tokens arrive. A new job's prefill runs when it takes its slot, between steps. */
#include "server/srv.h"
#include "server/specctl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void srv_job_release(ink_server *S, srv_job *j)
{
    if (--j->refs == 0) {
        if (j->counted) S->n_jobs--;
        srv_job_free(j);
    }
}

/* ---- loading ------------------------------------------------------------------------------ */

/* --debug-hold: while the file exists, wait (before loading, and after each emitted token) unless
 * `cancel` or shutdown says otherwise. Tests use it to stop the worker at a known point, whatever
 * the machine's speed. */
static void debug_hold(ink_server *S, const atomic_int *cancel)
{
    for (;;) {
        pthread_mutex_lock(&S->mu);
        int go = (cancel && *cancel) || S->stopping;
        pthread_mutex_unlock(&S->mu);
        if (go || access(S->o.debug_hold, F_OK) != 0) return;
        struct timespec t = {0, 2 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
}

static void load(ink_server *S)
{
    ink_err e = {0};
    if (S->o.debug_hold) debug_hold(S, NULL);
    double t0 = ink_now_s();
    ink_model_opts mo = {.n_threads = S->o.n_threads, .activations = S->o.activations,
                         .expert_parallel = S->o.expert_parallel, .no_mmap = S->o.no_mmap};
    char path[4200];
    if (S->o.log) fprintf(S->o.log, "serve: loading %s\n", S->model_dir);
    if (ink_model_open(&S->model, S->model_dir, &mo, &e)) goto fail;
    if (S->o.check_tensors && ink_model_check_tensors(S->model, &e)) goto fail;
    if (S->o.draft) {
        int rc = ink_drafter_open(&S->drafter, S->model, S->draft_dir ? S->draft_dir : S->model_dir, &e);
        if (rc == INK_E_ABSENT && S->o.draft == 2 && !S->o.draft_opts_set) e = (ink_err){0}; /* auto: plain */
        else if (rc) goto fail;
    }
    if (S->drafter && S->o.draft_vocab > 0 &&
        ink_drafter_load_vocab(S->drafter, S->draft_dir ? S->draft_dir : S->model_dir, S->o.draft_vocab, &e))
        goto fail;
    S->n_slots = S->o.parallel > 0 ? S->o.parallel : 4;
    if (!(S->slots = calloc((size_t)S->n_slots, sizeof *S->slots)) ||
        !(S->sctl = calloc((size_t)S->n_slots + 1, sizeof *S->sctl))) {
        ink_err_set(&e, INK_E_NOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i <= S->n_slots; i++) srv_spec_init(&S->sctl[i]);
    for (int i = 0; i < S->n_slots; i++) {
        srv_slot *sl = &S->slots[i];
        if (i == 0) sl->d = S->drafter;
        else if (S->drafter && ink_drafter_share(&sl->d, S->drafter, &e)) /* one set of weights: the slots draft together */
            goto fail;
        if (ink_session_create(&sl->sess, S->model, S->o.n_ctx, &e)) goto fail;
        if (ink_session_set_checkpoints(sl->sess, S->o.cache_checkpoints, &e)) goto fail;
        if (ink_gen_create(&sl->gen, sl->sess, &e)) goto fail;
    }
    S->sess = S->slots[0].sess;
    {
        int depth = S->drafter ? ink_drafter_n_depth(S->drafter) : 0, per = depth + 2 > 8 ? depth + 2 : 8;
        S->batch_rows = S->n_slots * per < INK_MAX_BLOCK ? INK_MAX_BLOCK : S->n_slots * per;
        if (ink_batch_create(&S->batch, S->model, S->batch_rows, ink_session_n_ctx(S->sess), &e)) goto fail;
    }
    snprintf(path, sizeof path, "%s/tokenizer.json", S->model_dir);
    if (access(path, F_OK) == 0) {
        if (ink_tokenizer_open(&S->tok, S->model_dir, &e)) goto fail;
        ink_err ce = {0};
        if (ink_chat_ids_get(S->tok, &S->chat_ids, &ce) == INK_OK) S->chat_ok = 1;
        else snprintf(S->chat_why, sizeof S->chat_why, "%s", ce.msg);
    } else snprintf(S->chat_why, sizeof S->chat_why, "the model directory has no tokenizer.json");
    S->n_ctx = ink_session_n_ctx(S->sess);
    S->n_vocab = ink_model_n_vocab(S->model);
    S->eos = ink_model_get_info(S->model)->eos;
    S->depth = S->drafter ? ink_drafter_n_depth(S->drafter) : 0;
    S->load_time = (long long)time(NULL);
    if (S->tok && ink_tokenizer_n_vocab(S->tok) > S->n_vocab && S->o.log)
        fprintf(S->o.log, "serve: warning: the tokenizer has %d ids, the model %d\n", ink_tokenizer_n_vocab(S->tok), S->n_vocab);
    if (S->o.log) {
        fprintf(S->o.log, "serve: model ready in %.2f s: context %d, vocab %d, %s, chat %s, %d slots\n", ink_now_s() - t0,
                S->n_ctx, S->n_vocab, S->drafter ? "mtp drafter" : "no drafter", S->chat_ok ? "on" : "off", S->n_slots);
        fflush(S->o.log);
    }
    pthread_mutex_lock(&S->mu);
    S->state = INK_SERVER_READY;
    pthread_mutex_unlock(&S->mu);
    return;
fail:
    pthread_mutex_lock(&S->mu);
    S->load_err = e;
    S->state = INK_SERVER_FAILED;
    pthread_mutex_unlock(&S->mu);
    if (S->o.log) fprintf(S->o.log, "serve: loading failed: %s: %s\n", ink_status_str(e.code), e.msg), fflush(S->o.log);
}

/* ---- one job ------------------------------------------------------------------------------ */

typedef struct gctx {
    ink_server *S;
    srv_job *j;
    srv_out out;
    volatile int cancel;  /* what ink_generate checks */
    int gone;             /* the client disconnected */
    int stopped;          /* a stop id / stop string ended the output */
    int n;                /* tokens that count (up to and including a stop) */
    int32_t *ids;
    int cap;
    int ids_stream;       /* streamed completion with return_token_ids: one chunk per token */
    srv_buf pend;         /* its text not yet sent */
} gctx;

static void append_locked(srv_job *j, const char *s, size_t n)
{
    srv_buf_add(&j->body, s, n);
    pthread_cond_broadcast(&j->cv);
}

static void sse(gctx *c, json_t *doc)
{
    char *s = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (!s) return;
    ink_server *S = c->S;
    pthread_mutex_lock(&S->mu);
    srv_buf_add(&c->j->body, "data: ", 6);
    srv_buf_add(&c->j->body, s, strlen(s));
    append_locked(c->j, "\n\n", 2);
    pthread_mutex_unlock(&S->mu);
    free(s);
}

static json_t *chunk(gctx *c, json_t *choice)
{
    srv_job *j = c->j;
    json_t *doc = json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", j->id, "object",
                            j->kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                            (json_int_t)j->created, "model", j->model_id, "choices", choice ? choice : json_object());
    if (doc && j->include_usage) json_object_set_new(doc, "usage", json_null());
    return doc;
}

static void on_delta(void *ud, int kind, const char *text, size_t len, json_t *tool, int index)
{
    gctx *c = ud;
    if (!c->j->stream || c->gone) return;
    json_t *choice;
    if (c->j->kind == SRV_COMPLETION) {
        if (kind != SRV_D_CONTENT) return;
        if (c->ids_stream) {
            srv_buf_add(&c->pend, text, len);
            return;
        }
        choice = json_pack("{s:i, s:s%, s:n, s:n}", "index", 0, "text", text, len, "logprobs", "finish_reason");
    } else {
        json_t *delta;
        if (kind == SRV_D_TOOL) {
            json_t *t = json_deep_copy(tool);
            json_object_set_new(t, "index", json_integer(index));
            delta = json_pack("{s:[o]}", "tool_calls", t);
        } else delta = json_pack("{s:s%}", kind == SRV_D_CONTENT ? "content" : "reasoning_content", text, len);
        choice = json_pack("{s:i, s:o, s:n, s:n}", "index", 0, "delta", delta, "logprobs", "finish_reason");
    }
    sse(c, chunk(c, choice));
}

static json_t *ids_json(const int32_t *ids, int n);

/* Streamed completion with return_token_ids: the text released so far and the new ids. */
static void ids_chunk(gctx *c, const int32_t *ids, int n)
{
    json_t *choice = json_pack("{s:i, s:s%, s:o, s:n, s:n}", "index", 0, "text", c->pend.p ? c->pend.p : "", c->pend.n,
                               "token_ids", ids_json(ids, n), "logprobs", "finish_reason");
    c->pend.n = 0;
    sse(c, chunk(c, choice));
}

static void on_token(void *ud, int32_t tok)
{
    gctx *c = ud;
    if (c->stopped || c->gone) return;
    if (c->j->cancel) {
        c->gone = 1, c->cancel = 1;
        return;
    }
    if (c->n < c->cap) c->ids[c->n++] = tok;
    if (srv_out_feed(&c->out, tok)) {
        c->stopped = 1;
        if (c->out.stop.hit) c->cancel = 1; /* stop string; stop ids end the generation themselves */
    }
    if (c->ids_stream) ids_chunk(c, &tok, 1);
}

static json_t *ids_json(const int32_t *ids, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

static json_t *timings(const srv_job *j, const ink_gen_stats *st, int n, int use_draft, int k)
{
    double pms = st->prefill_s * 1e3, dms = st->decode_s * 1e3;
    int pn = st->prompt_tokens - st->reused_tokens;
    json_t *acc = json_array(), *prop = json_array();
    for (int p = 0; p < st->n_pos && p < INK_MAX_DEPTH; p++) {
        json_array_append_new(acc, json_integer(st->pos_accepted[p]));
        json_array_append_new(prop, json_integer(st->pos_proposed[p]));
    }
    (void)j;
    json_t *hist = json_object();
    for (int K = 1; K <= INK_MAX_BLOCK; K++)
        if (st->k_hist[K]) {
            char key[16];
            snprintf(key, sizeof key, "%d", K);
            json_object_set_new(hist, key, json_integer(st->k_hist[K]));
        }
    return json_pack("{s:i, s:i, s:f, s:f, s:f, s:i, s:f, s:f, s:f, s:i, s:i, s:i, s:s, s:o, s:o, s:o, s:o, s:f, s:f, s:f}", "prompt_n", pn,
                     "cache_n", st->reused_tokens, "prompt_ms", pms, "prompt_per_token_ms", pn ? pms / pn : 0.0,
                     "prompt_per_second", pms > 0 ? pn / (pms / 1e3) : 0.0, "predicted_n", n, "predicted_ms", dms,
                     "predicted_per_token_ms", n ? dms / n : 0.0, "predicted_per_second", dms > 0 ? n / (dms / 1e3) : 0.0,
                     "draft_n", st->drafted, "draft_n_accepted", st->accepted, "draft_rounds", st->rounds, "draft_kind",
                     use_draft ? "mtp" : "none", "draft_block_size", use_draft ? (k > 0 ? json_integer(k) : json_string("auto")) : json_integer(1),
                     "draft_accepted_per_position", acc, "draft_proposed_per_position", prop, "draft_k_hist", hist,
                     "draft_ms", st->draft_s * 1e3, "verify_ms", st->verify_s * 1e3, "rollback_ms", st->rollback_s * 1e3);
}

static json_t *usage(const ink_gen_stats *st, int n)
{
    return json_pack("{s:i, s:i, s:i, s:{s:i}, s:{s:i, s:i}}", "prompt_tokens", st->prompt_tokens, "completion_tokens", n,
                     "total_tokens", st->prompt_tokens + n, "prompt_tokens_details", "cached_tokens", st->reused_tokens,
                     "completion_tokens_details", "accepted_prediction_tokens", st->accepted,
                     "rejected_prediction_tokens", st->drafted - st->accepted);
}

static void finish_error(gctx *c, int status, const char *msg)
{
    srv_job *j = c->j;
    char *e = srv_error_json(status, status >= 500 ? "server_error" : "invalid_request_error", NULL, NULL, "%s", msg);
    pthread_mutex_lock(&c->S->mu);
    if (j->stream) {
        srv_buf_add(&j->body, "data: ", 6);
        srv_buf_add(&j->body, e, strlen(e));
        append_locked(j, "\n\ndata: [DONE]\n\n", 16);
    } else {
        j->status = status;
        j->body.n = 0;
        append_locked(j, e, strlen(e));
    }
    pthread_mutex_unlock(&c->S->mu);
    free(e);
}

#define PREFILL_ROWS 256 /* prompt rows per engine step (one slot's prefill at a time) */

/* A job takes a slot: response set-up, options, and the prefill with its first token. On failure
 * the slot is finished at once (sl->rc). */
static void job_begin(ink_server *S, srv_slot *sl, srv_job *j)
{
    gctx *c = sl->c = calloc(1, sizeof *c);
    sl->rc = INK_OK, sl->started = 0, sl->e = (ink_err){0};
    memset(&sl->st, 0, sizeof sl->st);
    if (!c) {
        sl->rc = INK_E_NOMEM;
        return;
    }
    c->S = S, c->j = j;
    c->cap = j->max_tokens > 0 ? j->max_tokens : 1;
    sl->out = malloc((size_t)c->cap * sizeof *sl->out);
    c->ids = malloc((size_t)c->cap * sizeof *c->ids);
    char pre[64];
    snprintf(pre, sizeof pre, "call_%s", j->id + (j->kind == SRV_CHAT ? 9 : 5));
    int rc;
    if (!sl->out || !c->ids) rc = ink_err_set(&sl->e, INK_E_NOMEM, "out of memory");
    else rc = srv_out_init(&c->out, j->kind == SRV_CHAT, S->tok, j->stops, j->n_stops, pre, on_delta, c, &sl->e);
    if (rc) {
        sl->rc = rc, sl->setup_failed = 1;
        return;
    }
    sl->setup_failed = 0;
    c->ids_stream = j->stream && j->return_ids && j->kind == SRV_COMPLETION;
    if (j->stream && j->kind == SRV_CHAT)
        sse(c, chunk(c, json_pack("{s:i, s:{s:s, s:s}, s:n, s:n}", "index", 0, "delta", "role", "assistant", "content", "",
                                  "logprobs", "finish_reason")));
    ink_gen_opts *o = &sl->o;
    *o = (ink_gen_opts){0};
    o->max_tokens = j->max_tokens;
    o->stop_eos = j->stop_eos;
    o->eos = j->kind == SRV_CHAT && S->chat_ok ? S->chat_ids.end_sampling : -1;
    if (j->kind == SRV_CHAT && S->chat_ok) o->n_stop_ids = (int)ink_chat_stop_ids(&S->chat_ids, &o->stop_ids);
    if (S->tok) o->vocab_limit = ink_tokenizer_n_vocab(S->tok);
    o->sampling = j->sampling;
    o->drafter = j->use_draft ? sl->d : NULL;
    o->block_size = j->block_size;
    o->block_max = S->o.block_max;
    o->mtp_mode = j->mtp_mode;
    o->block_cap = &S->spec_cap;
    o->capture_commit = !S->o.rollback_replay;
    o->reuse_prefix = 1;
    o->on_token = on_token;
    o->ud = c;
    o->cancel = &c->cancel;
    sl->rc = ink_gen_begin(sl->gen, j->prompt, j->n_prompt, o, sl->out, c->cap, &sl->st, &sl->e);
    sl->started = sl->rc == INK_OK; /* the prefill runs in engine steps (step_slots) */
}

/* One engine step: every running slot's next round or prompt chunk, their rows in batched forwards
 * of at most batch_rows rows (a row's result does not depend on the batch: tests/test_batch.c). */
static void step_slots(ink_server *S)
{
    srv_slot *run[INK_STEP_MANY_MAX];
    ink_gen *gens[INK_STEP_MANY_MAX] = {0};
    ink_err errs[INK_STEP_MANY_MAX];
    int n = 0;
    for (int i = 0; i < S->n_slots; i++) /* a client gone or a shutdown: the next step ends the run */
        if (S->slots[i].j && S->slots[i].c && S->slots[i].j->cancel) S->slots[i].c->cancel = 1;
    for (int i = 0; i < S->n_slots && n < INK_STEP_MANY_MAX; i++) {
        srv_slot *sl = &S->slots[i];
        if (!sl->j || !sl->started) continue;
        run[n] = sl, gens[n] = sl->gen, errs[n++] = sl->e;
    }
    /* the batch-wide drafting choice (server/specctl.h) for this many decoding slots */
    int n_dec = 0, n_auto = 0, n_pre = 0, out0 = 0, dec[INK_STEP_MANY_MAX] = {0};
    for (int i = 0; i < n; i++) {
        if (ink_gen_prefilling(gens[i])) {
            n_pre++;
            continue;
        }
        if (ink_gen_done(gens[i])) continue;
        dec[i] = 1, n_dec++, out0 += ink_gen_n_out(gens[i]);
        n_auto += run[i]->o.drafter && run[i]->o.block_size <= 0;
    }
    srv_spec_ctl *c = S->sctl && n_dec >= 2 && n_auto && n_dec <= S->n_slots ? &S->sctl[n_dec] : NULL;
    int arm = c ? srv_spec_arm(c) : 0;
    S->spec_cap = arm; /* arm 1: plain steps for the auto slots */
    double t0 = ink_now_s();
    /* at most PREFILL_ROWS prompt rows per step in all, so that a long prompt does not stall the
     * slots that are decoding; a prompt chunk shares the step's forward with their verify rows.
     * A failure ends that slot's run: slot_finished sees it. */
    ink_gen_step_many(S->batch, gens, n, PREFILL_ROWS, errs);
    double dt = ink_now_s() - t0;
    for (int i = 0; i < n; i++) run[i]->e = errs[i];
    if (c) {
        int out1 = 0;
        for (int i = 0; i < n; i++)
            if (dec[i]) out1 += ink_gen_n_out(gens[i]);
        srv_spec_observe(c, arm, !n_pre && dt > 0, dt > 0 ? (out1 - out0) / dt : 0);
    }
    pthread_mutex_lock(&S->mu);
    S->met.steps++, S->met.capped_steps += arm == 1;
    pthread_mutex_unlock(&S->mu);
}

/* A finished slot's job: final statistics, metrics, the log line and the response. */
/* A finished request into the server's counters. */
static void count_request(ink_server *S, const gctx *c, int rc, const ink_gen_stats *stp)
{
    const ink_gen_stats st = *stp; /* a copy: the counters below read it by value */
    pthread_mutex_lock(&S->mu);
    S->met.requests++;
    if (c->gone) S->met.cancelled++;
    else if (rc) S->met.errors++;
    else S->met.ok++;
    S->met.prompt_tokens += (unsigned long long)(st.prompt_tokens - st.reused_tokens);
    S->met.reused_tokens += (unsigned long long)st.reused_tokens;
    S->met.cache_hits += st.reused_tokens > 0;
    S->met.prompt_s += st.prefill_s;
    S->met.predicted_tokens += (unsigned long long)c->n;
    S->met.predicted_s += st.decode_s;
    S->met.spec_rounds += (unsigned long long)st.rounds;
    for (int k = 1; k <= INK_MAX_BLOCK; k++) S->met.k_hist[k] += (unsigned long long)st.k_hist[k];
    S->met.draft_s += st.draft_s, S->met.verify_s += st.verify_s, S->met.rollback_s += st.rollback_s;
    S->met.draft_tokens += (unsigned long long)st.drafted;
    S->met.accepted_tokens += (unsigned long long)st.accepted;
    for (int p = 0; p < st.n_pos && p < INK_MAX_DEPTH; p++)
        S->met.pos_proposed[p] += (unsigned long long)st.pos_proposed[p], S->met.pos_accepted[p] += (unsigned long long)st.pos_accepted[p];
    if (st.n_pos > S->met.n_pos) S->met.n_pos = st.n_pos;
    pthread_mutex_unlock(&S->mu);
}

static void job_end(ink_server *S, srv_slot *sl)
{
    srv_job *j = sl->j;
    gctx *cp = sl->c;
    if (!cp) {
        char *err = srv_error_json(500, "server_error", NULL, NULL, "out of memory");
        pthread_mutex_lock(&S->mu);
        j->status = 500;
        if (err) srv_buf_add(&j->body, err, strlen(err));
        pthread_mutex_unlock(&S->mu);
        free(err);
        return;
    }
    gctx *c = cp;
    ink_err e = sl->e;
    ink_gen_stats st = sl->st;
    ink_gen_opts o = sl->o;
    int rc = sl->rc;
    if (sl->setup_failed) {
        free(sl->out), free(c->ids);
        finish_error(cp, 500, e.msg);
        free(cp), sl->c = NULL, sl->out = NULL;
        return;
    }
    if (sl->started) {
        rc = ink_gen_finish(sl->gen);
        st = sl->st;
    }
    if (rc == INK_E_CANCELLED && c->stopped) rc = INK_OK;
    if (j->cancel) c->gone = 1;
    srv_out_finish(&c->out);
    if (c->ids_stream && c->pend.n && !c->gone) ids_chunk(cp, NULL, 0);
    int eos = o.eos >= 0 ? o.eos : S->eos;
    const char *finish = "length";
    if (c->stopped || (j->stop_eos && c->n > 0 && c->ids[c->n - 1] == eos))
        finish = json_array_size(c->out.tool_calls) ? "tool_calls" : "stop";
    int K = o.drafter ? (o.block_size > 0 ? o.block_size : 0) : 1; /* 0: auto */

    count_request(S, c, rc, &st);

    if (S->o.log) {
        fprintf(S->o.log, "serve: %s %s: %s, prompt %d (reused %d) %.1f ms, generated %d %.1f ms (%.1f tok/s)", j->path,
                j->id, c->gone ? "cancelled" : rc ? "failed" : finish, st.prompt_tokens, st.reused_tokens, st.prefill_s * 1e3,
                c->n, st.decode_s * 1e3, st.decode_s > 0 ? c->n / st.decode_s : 0.0);
        if (o.drafter) fprintf(S->o.log, ", mtp K=%d %d/%d drafts accepted", K, st.accepted, st.drafted);
        if (rc && !c->gone) fprintf(S->o.log, ": %s", e.msg);
        fprintf(S->o.log, "\n");
        fflush(S->o.log);
    }

    if (c->gone) {
        /* nobody reads the body */
    } else if (rc) {
        finish_error(cp, rc == INK_E_CTX_FULL || rc == INK_E_INVAL ? 400 : 500, e.msg);
    } else if (j->stream) {
        json_t *choice = j->kind == SRV_CHAT
                             ? json_pack("{s:i, s:{}, s:n, s:s}", "index", 0, "delta", "logprobs", "finish_reason", finish)
                             : json_pack("{s:i, s:s, s:n, s:s}", "index", 0, "text", "", "logprobs", "finish_reason", finish);
        json_t *last = chunk(cp, choice);
        json_object_set_new(last, "timings", timings(j, &st, c->n, o.drafter != NULL, K));
        sse(cp, last);
        if (j->include_usage) {
            json_t *u = chunk(cp, NULL);
            json_array_clear(json_object_get(u, "choices"));
            json_object_set_new(u, "usage", usage(&st, c->n));
            json_object_set_new(u, "timings", timings(j, &st, c->n, o.drafter != NULL, K));
            sse(cp, u);
        }
        pthread_mutex_lock(&S->mu);
        append_locked(j, "data: [DONE]\n\n", 14);
        pthread_mutex_unlock(&S->mu);
    } else {
        size_t tl;
        const char *txt = srv_out_text(&c->out, &tl);
        json_t *choice;
        if (j->kind == SRV_CHAT) {
            json_t *msg = json_pack("{s:s}", "role", "assistant");
            int has_tools = json_array_size(c->out.tool_calls) > 0;
            json_object_set_new(msg, "content", tl || !has_tools ? json_stringn(txt, tl) : json_null());
            if (c->out.reasoning.n) json_object_set_new(msg, "reasoning_content", json_stringn(c->out.reasoning.p, c->out.reasoning.n));
            if (has_tools) json_object_set(msg, "tool_calls", c->out.tool_calls);
            choice = json_pack("{s:i, s:o, s:n, s:s}", "index", 0, "message", msg, "logprobs", "finish_reason", finish);
        } else {
            choice = json_pack("{s:i, s:s%, s:n, s:s}", "index", 0, "text", txt, tl, "logprobs", "finish_reason", finish);
        }
        if (j->return_ids) json_object_set_new(choice, "token_ids", ids_json(c->ids, c->n));
        json_t *doc = json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o, s:o}", "id", j->id, "object",
                                j->kind == SRV_CHAT ? "chat.completion" : "text_completion", "created", (json_int_t)j->created,
                                "model", j->model_id, "choices", choice, "usage", usage(&st, c->n), "timings",
                                timings(j, &st, c->n, o.drafter != NULL, K));
        if (doc && j->return_ids) json_object_set_new(doc, "prompt_token_ids", ids_json(j->prompt, j->n_prompt));
        char *s = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
        json_decref(doc);
        if (!s) finish_error(cp, 500, "out of memory");
        else {
            pthread_mutex_lock(&S->mu);
            j->status = 200;
            append_locked(j, s, strlen(s));
            pthread_mutex_unlock(&S->mu);
            free(s);
        }
    }
    srv_out_free(&c->out);
    srv_buf_free(&c->pend);
    free(sl->out);
    free(c->ids);
    free(cp), sl->c = NULL, sl->out = NULL;
}


/* ---- loop ---------------------------------------------------------------------------------- */

/* The free slot whose session history shares the longest prefix with the job's prompt (the prompt
 * cache then resumes from it); the first free one when none shares anything. Under S->mu. */
static srv_slot *pick_slot(ink_server *S, const srv_job *j)
{
    srv_slot *best = NULL;
    int best_l = -1;
    for (int i = 0; i < S->n_slots; i++) {
        srv_slot *sl = &S->slots[i];
        if (sl->j) continue;
        const int32_t *t = ink_session_tokens(sl->sess);
        int n = ink_session_pos(sl->sess), L = 0;
        while (L < n && L < j->n_prompt && t[L] == j->prompt[L]) L++;
        if (L > best_l) best_l = L, best = sl;
    }
    return best;
}

static int slot_finished(const srv_slot *sl)
{
    return !sl->started || (!ink_gen_prefilling(sl->gen) && ink_gen_done(sl->gen));
}

/* --debug-hold between engine steps: while the file exists the running jobs do not advance (no
 * prefill, no round), unless one was cancelled or the server stops; queued jobs are
 * still admitted into free slots. Under S->mu. */
static int held(ink_server *S)
{
    if (!S->o.debug_hold || S->stopping || access(S->o.debug_hold, F_OK) != 0) return 0;
    for (int i = 0; i < S->n_slots; i++)
        if (S->slots[i].j && S->slots[i].j->cancel) return 0;
    return 1;
}

void *srv_worker_main(void *arg)
{
    ink_server *S = arg;
    load(S);
    pthread_mutex_lock(&S->mu);
    if (S->state != INK_SERVER_READY) {
        while (!S->stopping) pthread_cond_wait(&S->wcv, &S->mu);
    }
    for (;;) {
        while (!S->stopping && !S->q_head && !S->n_active) pthread_cond_wait(&S->wcv, &S->mu);
        if (S->stopping && !S->n_active) break;
        /* admit queued jobs into free slots (not while shutting down) */
        while (!S->stopping && S->q_head && S->n_active < S->n_slots) {
            srv_job *j = S->q_head;
            S->q_head = j->next;
            if (!S->q_head) S->q_tail = NULL;
            S->q_len--;
            j->next = NULL;
            if (j->cancel) {
                S->met.cancelled++;
                j->done = 1;
                pthread_cond_broadcast(&j->cv);
                srv_job_release(S, j);
                continue;
            }
            srv_slot *sl = pick_slot(S, j);
            sl->j = j, S->n_active++;
            pthread_mutex_unlock(&S->mu);
            job_begin(S, sl, j);
            pthread_mutex_lock(&S->mu);
        }
        if (held(S)) {
            pthread_mutex_unlock(&S->mu);
            struct timespec t = {0, 2 * 1000 * 1000};
            nanosleep(&t, NULL);
            pthread_mutex_lock(&S->mu);
            continue;
        }
        pthread_mutex_unlock(&S->mu);
        step_slots(S);
        pthread_mutex_lock(&S->mu);
        for (int i = 0; i < S->n_slots; i++) {
            srv_slot *sl = &S->slots[i];
            if (!sl->j || !slot_finished(sl)) continue;
            srv_job *j = sl->j;
            pthread_mutex_unlock(&S->mu);
            job_end(S, sl);
            pthread_mutex_lock(&S->mu);
            sl->j = NULL, S->n_active--;
            j->done = 1;
            pthread_cond_broadcast(&j->cv);
            srv_job_release(S, j);
        }
    }
    /* shutting down: fail what is still queued */
    while (S->q_head) {
        srv_job *j = S->q_head;
        S->q_head = j->next;
        S->q_len--;
        char *e = srv_error_json(503, "unavailable_error", NULL, NULL, "the server is shutting down");
        if (j->stream) {
            srv_buf_add(&j->body, "data: ", 6);
            srv_buf_add(&j->body, e, strlen(e));
            srv_buf_add(&j->body, "\n\ndata: [DONE]\n\n", 16);
        } else {
            j->status = 503;
            srv_buf_add(&j->body, e, strlen(e));
        }
        free(e);
        j->done = 1;
        pthread_cond_broadcast(&j->cv);
        srv_job_release(S, j);
    }
    S->q_tail = NULL;
    pthread_mutex_unlock(&S->mu);
    return NULL;
}
