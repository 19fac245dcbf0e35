/* out.c — stop strings and the mapping of generated ids to OpenAI output parts
 * (content, reasoning_content, tool_calls), shared by the streamed and the whole responses. */
#include "server/srv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- stop strings ------------------------------------------------------------------------- */

void srv_stopper_init(srv_stopper *st, char **stops, int n_stops)
{
    memset(st, 0, sizeof *st);
    st->stops = stops, st->n_stops = n_stops;
    for (int i = 0; i < n_stops; i++)
        if (strlen(stops[i]) > st->max_len) st->max_len = strlen(stops[i]);
}

static const char *find_bytes(const char *h, size_t hn, const char *nd, size_t nn)
{
    if (!nn || nn > hn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == nd[0] && !memcmp(h + i, nd, nn)) return h + i;
    return NULL;
}

int srv_stopper_push(srv_stopper *st, const char *s, size_t n, const char **out, size_t *out_n)
{
    *out = "", *out_n = 0;
    if (st->hit) return 1;
    srv_buf_add(&st->acc, s, n);
    if (st->acc.oom) return 0;
    /* a stop can only begin in the last max_len - 1 released bytes or in the new text */
    size_t from = st->sent > st->max_len ? st->sent - st->max_len : 0;
    size_t cut = (size_t)-1;
    for (int i = 0; i < st->n_stops; i++) {
        const char *p = find_bytes(st->acc.p + from, st->acc.n - from, st->stops[i], strlen(st->stops[i]));
        if (p && (size_t)(p - st->acc.p) < cut) cut = (size_t)(p - st->acc.p);
    }
    if (cut != (size_t)-1) {
        if (cut < st->sent) cut = st->sent; /* cannot happen: released text held no whole stop */
        st->acc.n = cut, st->acc.p[cut] = 0;
        st->hit = 1;
    }
    size_t safe = st->acc.n;
    if (!st->hit && st->max_len > 1) {
        safe = st->acc.n >= st->max_len - 1 ? st->acc.n - (st->max_len - 1) : 0;
        while (safe > st->sent && safe < st->acc.n && ((unsigned char)st->acc.p[safe] & 0xC0) == 0x80) safe--;
    }
    if (safe > st->sent) {
        *out = st->acc.p + st->sent, *out_n = safe - st->sent;
        st->sent = safe;
    }
    return st->hit;
}

void srv_stopper_flush(srv_stopper *st, const char **out, size_t *out_n)
{
    *out = "", *out_n = 0;
    if (st->acc.n > st->sent) {
        *out = st->acc.p + st->sent, *out_n = st->acc.n - st->sent;
        st->sent = st->acc.n;
    }
}

void srv_stopper_free(srv_stopper *st)
{
    srv_buf_free(&st->acc);
}

/* ---- output mapping --------------------------------------------------------------------- */

int srv_out_init(srv_out *o, int chat, const ink_tokenizer *tok, char **stops, int n_stops, const char *id_prefix,
                 srv_delta_fn fn, void *ud, ink_err *err)
{
    memset(o, 0, sizeof *o);
    o->chat = chat, o->tok = tok, o->fn = fn, o->ud = ud;
    snprintf(o->id_prefix, sizeof o->id_prefix, "%s", id_prefix ? id_prefix : "call");
    srv_stopper_init(&o->stop, stops, n_stops);
    if (!(o->tool_calls = json_array())) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    int rc = INK_OK;
    if (tok && chat) rc = ink_chat_parser_new(&o->parser, tok, err);
    else if (tok) rc = ink_detok_new(&o->detok, tok, INK_DECODE_SKIP_SPECIAL, err);
    if (rc) srv_out_free(o);
    return rc;
}

static void visible(srv_out *o, const char *s, size_t n)
{
    const char *r;
    size_t rn;
    srv_stopper_push(&o->stop, s, n, &r, &rn);
    if (rn && o->fn) o->fn(o->ud, SRV_D_CONTENT, r, rn, NULL, 0);
}

/* A tool-call block ended: {"name": N, "args": {...}} becomes an OpenAI tool call; anything
 * else is shown as text. */
static void tool_end(srv_out *o)
{
    o->in_tool = 0;
    json_error_t je;
    json_t *v = o->tool.n ? json_loadb(o->tool.p, o->tool.n, 0, &je) : NULL;
    json_t *name = json_object_get(v, "name"), *args = json_object_get(v, "args");
    if (!args) args = json_object_get(v, "arguments");
    const char *nm = json_is_string(name) ? json_string_value(name) : (o->tool_name && *o->tool_name ? o->tool_name : NULL);
    char *argtxt = NULL;
    if (json_is_string(args)) argtxt = strdup(json_string_value(args));
    else if (args) argtxt = json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY);
    else if (v && json_is_object(v) && nm) argtxt = strdup("{}");
    if (!v || !json_is_object(v) || !nm || !argtxt) {
        if (o->tool.n) visible(o, o->tool.p, o->tool.n);
    } else {
        int idx = (int)json_array_size(o->tool_calls);
        char id[80];
        snprintf(id, sizeof id, "%s_%d", o->id_prefix, idx);
        json_t *call = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function", "name", nm,
                                 "arguments", argtxt);
        if (call) {
            json_array_append(o->tool_calls, call);
            if (o->fn) o->fn(o->ud, SRV_D_TOOL, NULL, 0, call, idx);
            json_decref(call);
        }
    }
    free(argtxt);
    json_decref(v);
    o->tool.n = 0;
    free(o->tool_name);
    o->tool_name = NULL;
}

/* Appends s with every byte that does not start a valid UTF-8 sequence replaced by U+FFFD (JSON
 * strings must be valid UTF-8; a random or broken model can emit any bytes). */
static void add_clean(srv_buf *b, const char *s, size_t n)
{
    while (n) {
        size_t v = ink_utf8_valid_prefix((const unsigned char *)s, n);
        srv_buf_add(b, s, v);
        s += v, n -= v;
        if (n) srv_buf_add(b, "\xEF\xBF\xBD", 3), s++, n--;
    }
}

static void on_events(srv_out *o, const ink_chat_event *ev, size_t n_ev)
{
    srv_buf clean = {0};
    for (size_t i = 0; i < n_ev; i++) {
        ink_chat_event ce = ev[i];
        const ink_chat_event *e = &ce;
        if (e->type == INK_EV_DELTA && ink_utf8_valid_prefix((const unsigned char *)e->text, e->len) != e->len) {
            clean.n = 0;
            add_clean(&clean, e->text, e->len);
            if (clean.oom) continue;
            ce.text = clean.p, ce.len = clean.n;
        }
        if (e->type == INK_EV_BLOCK_START && e->name && ink_utf8_valid_prefix((const unsigned char *)e->name, strlen(e->name)) != strlen(e->name)) {
            clean.n = 0;
            add_clean(&clean, e->name, strlen(e->name));
            if (clean.oom) continue;
            ce.name = clean.p;
        }
        switch (e->type) {
        case INK_EV_BLOCK_START:
            if (e->kind == INK_BLOCK_TOOL_CALL) {
                o->in_tool = 1, o->tool.n = 0;
                free(o->tool_name);
                o->tool_name = strdup(e->name ? e->name : "");
            }
            break;
        case INK_EV_DELTA:
            if (o->in_tool) srv_buf_add(&o->tool, e->text, e->len);
            else if (e->kind == INK_BLOCK_THINKING) {
                srv_buf_add(&o->reasoning, e->text, e->len);
                if (o->fn && e->len) o->fn(o->ud, SRV_D_REASONING, e->text, e->len, NULL, 0);
            } else visible(o, e->text, e->len);
            break;
        case INK_EV_BLOCK_END:
            if (o->in_tool) tool_end(o);
            break;
        case INK_EV_STOP:
            o->stop_id_seen = 1;
            break;
        }
    }
    srv_buf_free(&clean);
}

int srv_out_feed(srv_out *o, int32_t id)
{
    if (o->finished || o->stop.hit || o->stop_id_seen) return 1;
    if (o->parser) {
        ink_chat_event ev[4];
        size_t n_ev = 0;
        if (ink_chat_parser_feed(o->parser, id, ev, &n_ev, NULL) == INK_OK) on_events(o, ev, n_ev);
    } else if (o->detok) {
        const char *t;
        size_t n;
        if (ink_detok_feed(o->detok, id, &t, &n, NULL) == INK_OK && n) visible(o, t, n);
    }
    if (o->parser && ink_chat_is_stop(ink_chat_parser_ids(o->parser), id)) o->stop_id_seen = 1;
    return o->stop.hit || o->stop_id_seen;
}

void srv_out_finish(srv_out *o)
{
    if (o->finished) return;
    o->finished = 1;
    if (o->parser && !o->stop.hit) {
        ink_chat_event ev[4];
        size_t n_ev = 0;
        ink_chat_parser_finish(o->parser, ev, &n_ev);
        on_events(o, ev, n_ev);
    } else if (o->detok && !o->stop.hit) {
        const char *t;
        size_t n;
        ink_detok_flush(o->detok, &t, &n);
        if (n) visible(o, t, n);
    }
    if (o->in_tool) tool_end(o);
    const char *r;
    size_t rn;
    srv_stopper_flush(&o->stop, &r, &rn);
    if (rn && o->fn) o->fn(o->ud, SRV_D_CONTENT, r, rn, NULL, 0);
}

const char *srv_out_text(const srv_out *o, size_t *len)
{
    *len = o->stop.sent;
    return o->stop.acc.p ? o->stop.acc.p : "";
}

void srv_out_free(srv_out *o)
{
    ink_chat_parser_free(o->parser);
    ink_detok_free(o->detok);
    srv_stopper_free(&o->stop);
    srv_buf_free(&o->reasoning);
    srv_buf_free(&o->tool);
    free(o->tool_name);
    json_decref(o->tool_calls);
    memset(o, 0, sizeof *o);
}
