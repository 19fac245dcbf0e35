/* api.c — request validation and parsing (OpenAI fields -> a job), /tokenize, /detokenize,
 * /v1/models and /metrics documents. Runs on the connection threads; reads only what the worker
 * set before the server became ready. */
#include "server/srv.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_STOPS 16
#define MAX_STOP_LEN 256

char *srv_error_json(int status, const char *type, const char *code, const char *param, const char *fmt, ...)
{
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:{s:s, s:s, s:o, s:o, s:i}}", "error", "message", msg, "type", type, "param",
                          param ? json_string(param) : json_null(), "code", code ? json_string(code) : json_null(),
                          "status", status);
    char *s = e ? json_dumps(e, JSON_COMPACT) : NULL;
    json_decref(e);
    return s ? s : strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}");
}

void srv_job_free(srv_job *j)
{
    if (!j) return;
    free(j->prompt);
    for (int i = 0; i < j->n_stops; i++) free(j->stops[i]);
    free(j->stops);
    free(j->model_id);
    srv_buf_free(&j->body);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* ---- field helpers ---------------------------------------------------------------------------
 * Each returns 0 when the field is absent or null (leaving *out), 1 when it was read, -1 on a bad
 * value (the error is recorded in pe). */

typedef struct perr {
    int status;
    char *body;
} perr;

#define BAD(pe, param, ...) (bad((pe), (param), __VA_ARGS__), -1)
static void bad(perr *pe, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void bad(perr *pe, const char *param, const char *fmt, ...)
{
    if (pe->body) return;
    char msg[1100];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pe->status = 400;
    pe->body = srv_error_json(400, "invalid_request_error", NULL, param, "%s", msg);
}

static int get_num(json_t *obj, const char *key, double lo, double hi, double *out, perr *pe)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return BAD(pe, key, "'%s' must be a number", key);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) return BAD(pe, key, "'%s' must be in [%g, %g], found %g", key, lo, hi, d);
    *out = d;
    return 1;
}

static int get_int(json_t *obj, const char *key, long long lo, long long hi, long long *out, perr *pe)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (json_is_integer(v)) *out = json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15)
        *out = (long long)json_real_value(v);
    else return BAD(pe, key, "'%s' must be an integer", key);
    if (*out < lo || *out > hi) return BAD(pe, key, "'%s' must be in [%lld, %lld], found %lld", key, lo, hi, *out);
    return 1;
}

static int get_bool(json_t *obj, const char *key, int *out, perr *pe)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return BAD(pe, key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 1;
}

static int check_model(ink_server *S, json_t *root, perr *pe)
{
    json_t *m = json_object_get(root, "model");
    if (!m || json_is_null(m)) return 0;
    if (!json_is_string(m)) return BAD(pe, "model", "'model' must be a string");
    const char *s = json_string_value(m);
    if (*s && strcmp(s, S->model_id)) {
        pe->status = 400;
        pe->body = srv_error_json(400, "invalid_request_error", "model_not_found", "model",
                                  "The model '%.200s' does not exist: this server serves '%.200s'", s, S->model_id);
        return -1;
    }
    return 0;
}

static int parse_stops(json_t *root, srv_job *j, perr *pe)
{
    json_t *v = json_object_get(root, "stop");
    if (!v || json_is_null(v)) return 0;
    json_t *one = json_is_string(v) ? v : NULL;
    if (!one && !json_is_array(v)) return BAD(pe, "stop", "'stop' must be a string or an array of strings");
    size_t n = one ? 1 : json_array_size(v);
    if (n > MAX_STOPS) return BAD(pe, "stop", "'stop' holds %zu strings, at most %d are allowed", n, MAX_STOPS);
    if (!n) return 0;
    if (!(j->stops = calloc(n, sizeof *j->stops))) return BAD(pe, "stop", "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *s = one ? one : json_array_get(v, i);
        if (!json_is_string(s)) return BAD(pe, "stop", "'stop[%zu]' must be a string", i);
        size_t len = json_string_length(s);
        if (!len || len > MAX_STOP_LEN) return BAD(pe, "stop", "'stop[%zu]' must be 1 to %d bytes", i, MAX_STOP_LEN);
        if (memchr(json_string_value(s), 0, len)) return BAD(pe, "stop", "'stop[%zu]' holds a NUL byte", i);
        if (!(j->stops[j->n_stops] = strdup(json_string_value(s)))) return BAD(pe, "stop", "out of memory");
        j->n_stops++;
    }
    return 1;
}

/* Sampling, limits, streaming and speculation fields shared by both endpoints. */
static int parse_common(ink_server *S, json_t *root, srv_job *j, perr *pe)
{
    double d;
    long long ll;
    int b, r;
    ink_sampling *sp = &j->sampling;
    if ((r = get_num(root, "temperature", 0, 100, &d, pe)) < 0) return -1;
    if (r) sp->temp = (float)d;
    if ((r = get_num(root, "top_p", 0, 1, &d, pe)) < 0) return -1;
    if (r) sp->top_p = (float)d;
    if ((r = get_num(root, "min_p", 0, 1, &d, pe)) < 0) return -1;
    if (r) sp->min_p = (float)d;
    if ((r = get_int(root, "top_k", 0, 1 << 30, &ll, pe)) < 0) return -1;
    if (r) sp->top_k = (int)ll;
    if ((r = get_num(root, "frequency_penalty", -2, 2, &d, pe)) < 0) return -1;
    if (r) sp->frequency_penalty = (float)d;
    if ((r = get_num(root, "presence_penalty", -2, 2, &d, pe)) < 0) return -1;
    if (r) sp->presence_penalty = (float)d;
    if ((r = get_num(root, "repeat_penalty", 0, 10, &d, pe)) < 0) return -1;
    if (r) sp->repeat_penalty = (float)d;
    if ((r = get_int(root, "repeat_last_n", -1, 1 << 30, &ll, pe)) < 0) return -1;
    if (r) sp->penalty_last_n = (int)ll;
    if ((r = get_int(root, "seed", INT64_MIN, INT64_MAX, &ll, pe)) < 0) return -1;
    if (r) sp->seed = (uint64_t)ll;
    else if (!S->o.seed_fixed) sp->seed = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)j;

    long long mt = -1;
    if ((r = get_int(root, "max_tokens", 0, 1 << 30, &ll, pe)) < 0) return -1;
    if (r) mt = ll;
    if ((r = get_int(root, "max_completion_tokens", 0, 1 << 30, &ll, pe)) < 0) return -1;
    if (r) mt = ll;
    if (mt < 0) mt = S->o.default_max_tokens;
    j->max_tokens = (int)mt; /* clamped to the context once the prompt is known */

    if ((r = get_int(root, "n", 1, 1, &ll, pe)) < 0) return -1;
    if (get_bool(root, "stream", &j->stream, pe) < 0) return -1;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return BAD(pe, "stream_options", "'stream_options' must be an object");
        if (get_bool(so, "include_usage", &j->include_usage, pe) < 0) return -1;
    }
    if (get_bool(root, "return_token_ids", &j->return_ids, pe) < 0) return -1;
    b = 0;
    if (get_bool(root, "ignore_eos", &b, pe) < 0) return -1;
    j->stop_eos = !b;
    json_t *lp = json_object_get(root, "logprobs");
    if (lp && !json_is_null(lp) && !json_is_false(lp) && !(json_is_integer(lp) && !json_integer_value(lp)))
        return BAD(pe, "logprobs", "'logprobs' is not supported by this server");
    if (parse_stops(root, j, pe) < 0) return -1;

    /* speculative: true | false | {"enabled": bool, "block_size": K, "mtp_mode": "per-depth"|"compat"} */
    j->use_draft = S->drafter && S->o.spec_default;
    j->block_size = S->o.block_size, j->mtp_mode = S->o.mtp_mode;
    json_t *sv = json_object_get(root, "speculative");
    if (sv && !json_is_null(sv)) {
        int en = 1;
        if (json_is_boolean(sv)) en = json_is_true(sv);
        else if (json_is_object(sv)) {
            if (get_bool(sv, "enabled", &en, pe) < 0) return -1;
            json_t *bs = json_object_get(sv, "block_size");
            if (json_is_string(bs) && !strcmp(json_string_value(bs), "auto")) j->block_size = 0;
            else if ((r = get_int(sv, "block_size", 1, INK_MAX_BLOCK, &ll, pe)) < 0) return -1;
            else if (r) j->block_size = (int)ll;
            json_t *m = json_object_get(sv, "mtp_mode");
            if (m && !json_is_null(m)) {
                const char *ms = json_string_value(m);
                if (!ms || (strcmp(ms, "per-depth") && strcmp(ms, "compat")))
                    return BAD(pe, "speculative.mtp_mode", "'speculative.mtp_mode' must be \"per-depth\" or \"compat\"");
                j->mtp_mode = !strcmp(ms, "compat") ? INK_MTP_COMPAT : INK_MTP_PER_DEPTH;
            }
        } else return BAD(pe, "speculative", "'speculative' must be a boolean or an object");
        if (en && !S->drafter)
            return BAD(pe, "speculative", "speculative decoding was requested but this server has no drafter "
                                          "(start it with --draft-kind mtp)");
        j->use_draft = en;
    }
    return 0;
}

static int parse_prompt_ids(ink_server *S, json_t *arr, srv_job *j, perr *pe)
{
    size_t n = json_array_size(arr);
    if (!n) return BAD(pe, "prompt", "'prompt' is empty");
    if (n > 0x7fffffff) return BAD(pe, "prompt", "the prompt is too long");
    if (!(j->prompt = malloc(n * sizeof *j->prompt))) return BAD(pe, "prompt", "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v)) return BAD(pe, "prompt", "'prompt[%zu]' must be a token id (integer)", i);
        long long id = json_integer_value(v);
        if (id < 0 || id >= S->n_vocab) return BAD(pe, "prompt", "'prompt[%zu]': token id %lld is outside [0, %d)", i, id, S->n_vocab);
        j->prompt[i] = (int32_t)id;
    }
    j->n_prompt = (int)n;
    return 0;
}

static int take_tokens(srv_job *j, ink_tokens *t, perr *pe)
{
    if (t->n > 0x7fffffff) return BAD(pe, NULL, "prompt too long");
    j->prompt = t->ids, j->n_prompt = (int)t->n;
    t->ids = NULL, t->n = t->cap = 0;
    return 0;
}

static int render_chat(ink_server *S, json_t *root, ink_tokens *toks, perr *pe)
{
    if (!S->tok || !S->chat_ok)
        return BAD(pe, "messages", "chat is unavailable: %s; /v1/completions with token ids works", S->chat_why);
    json_t *msgs = json_object_get(root, "messages");
    if (!msgs || json_is_null(msgs)) return BAD(pe, "messages", "'messages' is required");
    if (!json_is_array(msgs)) return BAD(pe, "messages", "'messages' must be an array");
    if (!json_array_size(msgs)) return BAD(pe, "messages", "'messages' must not be empty");
    ink_chat_opts co = {0};
    co.effort = S->effort;
    char ebuf[32];
    json_t *ef = json_object_get(root, "reasoning_effort");
    if (ef && !json_is_null(ef)) {
        if (json_is_string(ef)) co.effort = json_string_value(ef);
        else if (json_is_number(ef)) snprintf(ebuf, sizeof ebuf, "%.4g", json_number_value(ef)), co.effort = ebuf;
        else return BAD(pe, "reasoning_effort", "'reasoning_effort' must be a string or a number");
    }
    json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return BAD(pe, "tools", "'tools' must be an array");
        json_t *tc = json_object_get(root, "tool_choice");
        if (!(json_is_string(tc) && !strcmp(json_string_value(tc), "none")) && json_array_size(tools)) co.tools = tools;
    }
    ink_err e = {0};
    if (co.effort) {
        double v;
        if (ink_chat_effort(co.effort, &v, &e))
            return BAD(pe, "reasoning_effort", "'reasoning_effort': %s", e.msg);
    }
    if (ink_chat_render_json(S->tok, msgs, &co, toks, &e)) {
        if (e.code == INK_E_NOMEM) {
            pe->status = 500;
            pe->body = srv_error_json(500, "server_error", NULL, NULL, "out of memory");
            return -1;
        }
        return BAD(pe, "messages", "%s", e.msg);
    }
    return 0;
}

srv_job *srv_parse_request(ink_server *S, int kind, const char *body, size_t len, int *status, char **err_body)
{
    perr pe = {0};
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    srv_job *j = calloc(1, sizeof *j);
    ink_tokens toks = {0};
    if (!j) {
        *status = 500;
        *err_body = srv_error_json(500, "server_error", NULL, NULL, "out of memory");
        json_decref(root);
        return NULL;
    }
    pthread_cond_init(&j->cv, NULL);
    j->kind = kind, j->refs = 1, j->fd = -1, j->status = 200;
    j->sampling = S->o.sampling;
    if (!root) {
        if (strstr(je.text, "JSON_ALLOW_NUL")) /* jansson's wording names its own flag */
            bad(&pe, NULL, "invalid JSON in the request body: strings must not contain U+0000 (line %d, column %d)",
                je.line, je.column);
        else
            bad(&pe, NULL, "invalid JSON in the request body: %s (line %d, column %d)", je.text, je.line, je.column);
        goto fail;
    }
    if (!json_is_object(root)) {
        bad(&pe, NULL, "the request body must be a JSON object");
        goto fail;
    }
    if (check_model(S, root, &pe) < 0 || parse_common(S, root, j, &pe) < 0) goto fail;
    if (kind == SRV_CHAT) {
        if (render_chat(S, root, &toks, &pe) < 0 || take_tokens(j, &toks, &pe) < 0) goto fail;
    } else {
        json_t *p = json_object_get(root, "prompt");
        if (json_is_array(p) && json_array_size(p) == 1 && (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
            p = json_array_get(p, 0);
        if (!p || json_is_null(p)) {
            bad(&pe, "prompt", "'prompt' is required");
            goto fail;
        }
        if (json_is_array(p) && json_array_size(p) && !json_is_integer(json_array_get(p, 0))) {
            bad(&pe, "prompt", "'prompt' must be a string, an array of token ids or an array with one of those "
                               "(batched prompts are not supported)");
            goto fail;
        }
        if (json_is_string(p)) {
            if (!S->tok) {
                bad(&pe, "prompt", "this model directory has no tokenizer.json: send 'prompt' as token ids");
                goto fail;
            }
            if (!json_string_length(p)) {
                bad(&pe, "prompt", "'prompt' is empty");
                goto fail;
            }
            ink_err e = {0};
            if (ink_tokenizer_encode(S->tok, json_string_value(p), json_string_length(p), INK_TOK_SPECIAL, &toks, &e)) {
                bad(&pe, "prompt", "%s", e.msg);
                goto fail;
            }
            if (take_tokens(j, &toks, &pe) < 0) goto fail;
        } else if (json_is_array(p)) {
            if (parse_prompt_ids(S, p, j, &pe) < 0) goto fail;
        } else {
            bad(&pe, "prompt", "'prompt' must be a string or an array of token ids");
            goto fail;
        }
        json_t *echo = json_object_get(root, "echo");
        if (json_is_true(echo)) {
            bad(&pe, "echo", "'echo' is not supported by this server");
            goto fail;
        }
        json_t *suf = json_object_get(root, "suffix");
        if (suf && !json_is_null(suf)) {
            bad(&pe, "suffix", "'suffix' is not supported by this server");
            goto fail;
        }
    }
    if (j->n_stops && !S->tok) {
        bad(&pe, "stop", "stop strings need a tokenizer; this model directory has none");
        goto fail;
    }
    if (j->n_prompt < 1) {
        bad(&pe, "prompt", "the prompt is empty");
        goto fail;
    }
    if (j->n_prompt >= S->n_ctx) {
        pe.status = 400;
        pe.body = srv_error_json(400, "invalid_request_error", "context_length_exceeded", kind == SRV_CHAT ? "messages" : "prompt",
                                 "the prompt has %d tokens; the context holds %d (start the server with a larger -c)",
                                 j->n_prompt, S->n_ctx);
        goto fail;
    }
    int room = S->n_ctx - j->n_prompt;
    if (j->max_tokens < 0 || j->max_tokens > room) j->max_tokens = room;
    json_decref(root);
    return j;
fail:
    ink_tokens_free(&toks);
    json_decref(root);
    srv_job_free(j);
    *status = pe.status ? pe.status : 400;
    *err_body = pe.body ? pe.body : srv_error_json(400, "invalid_request_error", NULL, NULL, "bad request");
    return NULL;
}

/* ---- /tokenize, /detokenize -------------------------------------------------------------- */

static char *dump_free(json_t *v)
{
    char *s = v ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    return s;
}

static int err_out(char **out, int status, const char *param, const char *msg)
{
    *out = srv_error_json(status, status == 400 ? "invalid_request_error" : "server_error", NULL, param, "%s", msg);
    return status;
}

static json_t *load_obj(const char *body, size_t len, char **out, int *st)
{
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    if (!root) {
        char m[300];
        snprintf(m, sizeof m, "invalid JSON in the request body: %s (line %d, column %d)",
                 strstr(je.text, "JSON_ALLOW_NUL") ? "strings must not contain U+0000" : je.text, je.line, je.column);
        *st = err_out(out, 400, NULL, m);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        *st = err_out(out, 400, NULL, "the request body must be a JSON object");
        return NULL;
    }
    return root;
}

int srv_tokenize(ink_server *S, const char *body, size_t len, char **out)
{
    int st = 0;
    json_t *root = load_obj(body, len, out, &st);
    if (!root) return st;
    if (!S->tok) {
        json_decref(root);
        return err_out(out, 400, NULL, "this model directory has no tokenizer.json");
    }
    perr pe = {0};
    ink_tokens toks = {0};
    int pieces = 0, special = 1;
    if (get_bool(root, "with_pieces", &pieces, &pe) < 0 || get_bool(root, "parse_special", &special, &pe) < 0) goto bad;
    if (json_object_get(root, "messages")) {
        if (render_chat(S, root, &toks, &pe) < 0) goto bad;
    } else {
        json_t *c = json_object_get(root, "content");
        if (!c) c = json_object_get(root, "prompt");
        if (!json_is_string(c)) {
            bad(&pe, "content", "'content' (or 'prompt') must be a string, or send 'messages'");
            goto bad;
        }
        ink_err e = {0};
        if (ink_tokenizer_encode(S->tok, json_string_value(c), json_string_length(c), special ? INK_TOK_SPECIAL : 0, &toks, &e)) {
            bad(&pe, "content", "%s", e.msg);
            goto bad;
        }
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < toks.n; i++) {
        if (!pieces) {
            json_array_append_new(arr, json_integer(toks.ids[i]));
            continue;
        }
        size_t pl = 0;
        const char *pc = ink_tokenizer_piece(S->tok, toks.ids[i], &pl);
        json_t *pj;
        if (pc && ink_utf8_valid_prefix((const unsigned char *)pc, pl) == pl) pj = json_stringn(pc, pl);
        else {
            pj = json_array();
            for (size_t k = 0; pc && k < pl; k++) json_array_append_new(pj, json_integer((unsigned char)pc[k]));
        }
        json_array_append_new(arr, json_pack("{s:i, s:o}", "id", toks.ids[i], "piece", pj));
    }
    json_t *doc = json_pack("{s:o, s:i, s:i}", "tokens", arr ? arr : json_array(), "count", (int)toks.n, "max_model_len", S->n_ctx);
    ink_tokens_free(&toks);
    json_decref(root);
    *out = dump_free(doc);
    return *out ? 200 : err_out(out, 500, NULL, "out of memory");
bad:
    ink_tokens_free(&toks);
    json_decref(root);
    *out = pe.body;
    return pe.status ? pe.status : 400;
}

int srv_detokenize(ink_server *S, const char *body, size_t len, char **out)
{
    int st = 0;
    json_t *root = load_obj(body, len, out, &st);
    if (!root) return st;
    if (!S->tok) {
        json_decref(root);
        return err_out(out, 400, NULL, "this model directory has no tokenizer.json");
    }
    json_t *t = json_object_get(root, "tokens");
    if (!json_is_array(t)) {
        json_decref(root);
        return err_out(out, 400, "tokens", "'tokens' must be an array of token ids");
    }
    size_t n = json_array_size(t);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) {
        json_decref(root);
        return err_out(out, 500, NULL, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(t, i);
        long long id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (id < 0 || id >= ink_tokenizer_n_vocab(S->tok)) {
            free(ids);
            json_decref(root);
            char m[128];
            snprintf(m, sizeof m, "'tokens[%zu]' is not a token id of this tokenizer", i);
            return err_out(out, 400, "tokens", m);
        }
        ids[i] = (int32_t)id;
    }
    char *txt = NULL;
    size_t tl = 0;
    ink_err e = {0};
    int rc = ink_tokenizer_decode(S->tok, ids, n, INK_DECODE_LOSSY, &txt, &tl, &e);
    free(ids);
    json_decref(root);
    if (rc) return err_out(out, 400, "tokens", e.msg);
    json_t *doc = json_pack("{s:s%, s:s%}", "content", txt, tl, "prompt", txt, tl);
    free(txt);
    *out = dump_free(doc);
    return *out ? 200 : err_out(out, 500, NULL, "out of memory");
}

/* ---- /v1/models, /metrics --------------------------------------------------------------- */

char *srv_models_json(ink_server *S)
{
    json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:{s:i, s:i, s:b, s:{s:s, s:i, s:o, s:s, s:b}}}", "id", S->model_id,
                          "object", "model", "created", (json_int_t)S->load_time, "owned_by", "inkling", "meta", "n_ctx",
                          S->n_ctx, "n_vocab", S->n_vocab, "chat", S->chat_ok, "speculative", "kind",
                          S->drafter ? "mtp" : "none", "depth", S->depth, "block_size",
                          S->drafter ? (S->o.block_size > 0 ? json_integer(S->o.block_size) : json_string("auto"))
                                     : json_integer(1),
                          "mtp_mode",
                          S->o.mtp_mode == INK_MTP_COMPAT ? "compat" : "per-depth", "default",
                          S->drafter && S->o.spec_default);
    return dump_free(json_pack("{s:s, s:[o]}", "object", "list", "data", m ? m : json_object()));
}

char *srv_metrics_text(ink_server *S)
{
    srv_buf b = {0};
    char line[512];
    pthread_mutex_lock(&S->mu);
    srv_metrics m = S->met;
    int processing = S->n_active, queued = S->q_len;
    pthread_mutex_unlock(&S->mu);
#define CNT(name, help, fmt, val)                                                                              \
    do {                                                                                                        \
        snprintf(line, sizeof line, "# HELP inkling:" name " " help "\n# TYPE inkling:" name " counter\ninkling:" name " " fmt "\n", val); \
        srv_buf_add(&b, line, strlen(line));                                                                    \
    } while (0)
#define GAUGE(name, help, fmt, val)                                                                            \
    do {                                                                                                        \
        snprintf(line, sizeof line, "# HELP inkling:" name " " help "\n# TYPE inkling:" name " gauge\ninkling:" name " " fmt "\n", val); \
        srv_buf_add(&b, line, strlen(line));                                                                    \
    } while (0)
    CNT("prompt_tokens_total", "Prompt tokens processed (not counting reused ones).", "%llu", m.prompt_tokens);
    CNT("prompt_tokens_reused_total", "Prompt tokens served from the session state (prefix reuse).", "%llu", m.reused_tokens);
    CNT("prompt_seconds_total", "Prompt processing time.", "%.6f", m.prompt_s);
    CNT("prompt_cache_hits_total", "Requests that resumed from the session state (prefix reuse or a checkpoint).", "%llu",
        m.cache_hits);
    CNT("tokens_predicted_total", "Generated tokens.", "%llu", m.predicted_tokens);
    CNT("tokens_predicted_seconds_total", "Generation time.", "%.6f", m.predicted_s);
    CNT("requests_total", "Generation requests run.", "%llu", m.requests);
    CNT("requests_ok_total", "Generation requests completed.", "%llu", m.ok);
    CNT("requests_cancelled_total", "Generation requests cancelled by a client disconnect.", "%llu", m.cancelled);
    CNT("requests_failed_total", "Generation requests that failed.", "%llu", m.errors);
    CNT("requests_rejected_total", "Requests rejected because the queue was full (429).", "%llu", m.rejected);
    GAUGE("requests_processing", "Requests being generated.", "%d", processing);
    GAUGE("requests_deferred", "Requests waiting in the queue.", "%d", queued);
    GAUGE("n_ctx", "Context size of the session.", "%d", S->n_ctx);
    CNT("spec_decode_num_drafts_total", "Speculative rounds (verify steps with drafts).", "%llu", m.spec_rounds);
    CNT("engine_steps_total", "Engine steps (one batched forward of every running slot's rows).", "%llu", m.steps);
    CNT("engine_steps_plain_total", "Engine steps in which the slots with an automatic draft length were held to plain "
        "steps because batched plain steps measured faster.", "%llu", m.capped_steps);
    CNT("spec_decode_num_draft_tokens_total", "Draft tokens proposed.", "%llu", m.draft_tokens);
    CNT("spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", "%llu", m.accepted_tokens);
    CNT("spec_decode_draft_seconds_total", "Time spent drafting.", "%.6f", m.draft_s);
    CNT("spec_decode_verify_seconds_total", "Time spent in verify forwards.", "%.6f", m.verify_s);
    CNT("spec_decode_rollback_seconds_total", "Time spent rolling back rejected drafts.", "%.6f", m.rollback_s);
    snprintf(line, sizeof line, "# HELP inkling:spec_decode_rounds_by_width_total Decode rounds by the verify width K "
                                "chosen (1: plain steps).\n# TYPE inkling:spec_decode_rounds_by_width_total counter\n");
    srv_buf_add(&b, line, strlen(line));
    for (int k = 1; k <= INK_MAX_BLOCK; k++)
        if (m.k_hist[k]) {
            snprintf(line, sizeof line, "inkling:spec_decode_rounds_by_width_total{k=\"%d\"} %llu\n", k, m.k_hist[k]);
            srv_buf_add(&b, line, strlen(line));
        }
    snprintf(line, sizeof line, "# HELP inkling:spec_decode_num_accepted_tokens_per_pos_total Draft tokens accepted at "
                                "each draft position.\n# TYPE inkling:spec_decode_num_accepted_tokens_per_pos_total counter\n");
    srv_buf_add(&b, line, strlen(line));
    int np = m.n_pos > 0 ? m.n_pos : S->depth;
    for (int p = 0; p < np && p < INK_MAX_DEPTH; p++) {
        snprintf(line, sizeof line, "inkling:spec_decode_num_accepted_tokens_per_pos_total{position=\"%d\"} %llu\n", p,
                 m.pos_accepted[p]);
        srv_buf_add(&b, line, strlen(line));
    }
    snprintf(line, sizeof line, "# HELP inkling:spec_decode_num_draft_tokens_per_pos_total Draft tokens proposed at "
                                "each draft position.\n# TYPE inkling:spec_decode_num_draft_tokens_per_pos_total counter\n");
    srv_buf_add(&b, line, strlen(line));
    for (int p = 0; p < np && p < INK_MAX_DEPTH; p++) {
        snprintf(line, sizeof line, "inkling:spec_decode_num_draft_tokens_per_pos_total{position=\"%d\"} %llu\n", p,
                 m.pos_proposed[p]);
        srv_buf_add(&b, line, strlen(line));
    }
#undef CNT
#undef GAUGE
    if (b.oom) {
        srv_buf_free(&b);
        return NULL;
    }
    return b.p;
}
