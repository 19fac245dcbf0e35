/* chat.c — Inkling chat format: rendering to ids, canonical JSON, output parsing (see chat.h). */
#include "tok/chat.h"

#include "base/buf.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- canonical JSON (Python json.dumps compatible) ------------------------------------------ */

static void py_float(ink_buf *b, double x)
{
    if (isnan(x)) {
        ink_buf_str(b, "NaN");
        return;
    }
    if (isinf(x)) {
        ink_buf_str(b, x < 0 ? "-Infinity" : "Infinity");
        return;
    }
    if (x == 0) {
        ink_buf_str(b, signbit(x) ? "-0.0" : "0.0");
        return;
    }
    char tmp[48];
    for (int p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, x);
        if (strtod(tmp, NULL) == x)
            break;
    }
    /* tmp = [-]d[.ddd]e(+|-)XX */
    const char *s = tmp;
    int neg = 0;
    if (*s == '-') {
        neg = 1;
        s++;
    }
    char dig[24];
    int nd = 0;
    while (*s && *s != 'e') {
        if (*s != '.')
            dig[nd++] = *s;
        s++;
    }
    int e = atoi(s + 1);
    while (nd > 1 && dig[nd - 1] == '0')
        nd--;
    dig[nd] = 0;
    int decpt = e + 1;
    char out[64];
    int o = 0;
    if (neg)
        out[o++] = '-';
    if (decpt <= -4 || decpt > 16) {
        out[o++] = dig[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, dig + 1, (size_t)nd - 1);
            o += nd - 1;
        }
        o += snprintf(out + o, sizeof out - (size_t)o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    } else if (decpt <= 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -decpt; i++)
            out[o++] = '0';
        memcpy(out + o, dig, (size_t)nd);
        o += nd;
    } else if (decpt >= nd) {
        memcpy(out + o, dig, (size_t)nd);
        o += nd;
        for (int i = nd; i < decpt; i++)
            out[o++] = '0';
        out[o++] = '.';
        out[o++] = '0';
    } else {
        memcpy(out + o, dig, (size_t)decpt);
        o += decpt;
        out[o++] = '.';
        memcpy(out + o, dig + decpt, (size_t)(nd - decpt));
        o += nd - decpt;
    }
    ink_buf_add(b, out, (size_t)o);
}

static void py_string(ink_buf *b, const char *s, size_t n)
{
    ink_buf_add(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (esc) {
            ink_buf_add(b, s + run, i - run);
            ink_buf_str(b, esc);
            run = i + 1;
        }
    }
    ink_buf_add(b, s + run, n - run);
    ink_buf_add(b, "\"", 1);
}

static int cmp_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int canon(ink_buf *b, json_t *v, int sort, int depth)
{
    if (depth > 200)
        return INK_E_INVAL;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        size_t n = json_object_size(v), i = 0;
        const char **keys = malloc((n ? n : 1) * sizeof *keys);
        if (!keys) {
            b->oom = 1;
            return INK_E_NOMEM;
        }
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) keys[i++] = k;
        if (sort)
            qsort(keys, n, sizeof *keys, cmp_keys);
        ink_buf_add(b, "{", 1);
        int rc = INK_OK;
        for (i = 0; i < n && !rc; i++) {
            if (i)
                ink_buf_add(b, ",", 1);
            py_string(b, keys[i], strlen(keys[i]));
            ink_buf_add(b, ":", 1);
            rc = canon(b, json_object_get(v, keys[i]), sort, depth + 1);
        }
        ink_buf_add(b, "}", 1);
        free(keys);
        return rc;
    }
    case JSON_ARRAY: {
        ink_buf_add(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                ink_buf_add(b, ",", 1);
            int rc = canon(b, json_array_get(v, i), sort, depth + 1);
            if (rc)
                return rc;
        }
        ink_buf_add(b, "]", 1);
        return INK_OK;
    }
    case JSON_STRING: py_string(b, json_string_value(v), json_string_length(v)); return INK_OK;
    case JSON_INTEGER: {
        char t[32];
        snprintf(t, sizeof t, "%lld", (long long)json_integer_value(v));
        ink_buf_str(b, t);
        return INK_OK;
    }
    case JSON_REAL: py_float(b, json_real_value(v)); return INK_OK;
    case JSON_TRUE: ink_buf_str(b, "true"); return INK_OK;
    case JSON_FALSE: ink_buf_str(b, "false"); return INK_OK;
    case JSON_NULL: ink_buf_str(b, "null"); return INK_OK;
    }
    return INK_E_INVAL;
}

int ink_json_canonical(json_t *v, int sort, char **out, size_t *len, ink_err *err)
{
    if (!v || !out)
        return ink_err_set(err, INK_E_INVAL, "ink_json_canonical: NULL argument");
    ink_buf b = {0};
    int rc = canon(&b, v, sort, 0);
    if (!rc && b.oom)
        rc = INK_E_NOMEM;
    if (!rc && !b.p)
        rc = INK_E_NOMEM;
    if (rc) {
        free(b.p);
        return ink_err_set(err, rc, rc == INK_E_NOMEM ? "chat: out of memory writing JSON"
                                                      : "chat: JSON nested too deeply");
    }
    *out = b.p;
    if (len)
        *len = b.n;
    return INK_OK;
}

/* ---- effort ---------------------------------------------------------------------------------- */

int ink_chat_effort(const char *s, double *out, ink_err *err)
{
    static const struct {
        const char *name;
        double v;
    } names[] = {{"none", 0},   {"minimal", 0.1}, {"low", 0.2}, {"medium", 0.7},
                 {"high", 0.9}, {"xhigh", 0.99},  {"max", 0.99}};
    if (!s) {
        *out = 0.9;
        return INK_OK;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].name)) {
            *out = names[i].v;
            return INK_OK;
        }
    char *end;
    double v = strtod(s, &end);
    if (end != s && *end == 0 && isfinite(v) && v >= 0 && v <= 0.99 + 1e-9) {
        *out = v;
        return INK_OK;
    }
    return ink_err_set(err, INK_E_INVAL,
                       "reasoning effort '%.64s' is not one of none, minimal, low, medium, high, xhigh, "
                       "max or a number in [0, 0.99]", s);
}

void ink_chat_effort_str(double v, char buf[8])
{
    snprintf(buf, 8, "%.2f", v);
    char *dot = strchr(buf, '.');
    if (dot) {
        char *e = buf + strlen(buf) - 1;
        while (e > dot && *e == '0')
            *e-- = 0;
        if (e == dot)
            *e = 0;
    }
}

/* ---- control tokens by spelling ------------------------------------------------------------ */

static int32_t special(const ink_tokenizer *tok, const char *s)
{
    int32_t id = ink_tokenizer_special_id(tok, s);
    return id >= 0 && ink_tokenizer_is_special(tok, id) ? id : -1;
}

int ink_chat_ids_get(const ink_tokenizer *tok, ink_chat_ids *ids, ink_err *err)
{
    if (!tok || !ids)
        return ink_err_set(err, INK_E_INVAL, "chat: NULL tokenizer");
    static const struct {
        const char *s;
        size_t off;
    } req[] = {
        {"<|message_user|>", offsetof(ink_chat_ids, msg_user)},
        {"<|message_model|>", offsetof(ink_chat_ids, msg_model)},
        {"<|message_system|>", offsetof(ink_chat_ids, msg_system)},
        {"<|message_tool|>", offsetof(ink_chat_ids, msg_tool)},
        {"<|content_text|>", offsetof(ink_chat_ids, text)},
        {"<|content_thinking|>", offsetof(ink_chat_ids, thinking)},
        {"<|end_message|>", offsetof(ink_chat_ids, end_message)},
        {"<|content_model_end_sampling|>", offsetof(ink_chat_ids, end_sampling)},
        {"<|content_invoke_tool_json|>", offsetof(ink_chat_ids, invoke_json)},
        {"<|content_invoke_tool_text|>", offsetof(ink_chat_ids, invoke_text)},
        {"<|content_tool_error|>", offsetof(ink_chat_ids, tool_error)},
        {"<|content_xml|>", offsetof(ink_chat_ids, xml)},
    }, opt[] = {
        {"<|endoftext|>", offsetof(ink_chat_ids, endoftext)},
        {"<|content_image|>", offsetof(ink_chat_ids, image)},
        {"<|unused_200054|>", offsetof(ink_chat_ids, image_patch)},
        {"<|content_audio_input|>", offsetof(ink_chat_ids, audio_input)},
        {"<|begin_of_text|>", offsetof(ink_chat_ids, begin_of_text)},
    };
    ink_chat_ids c;
    memset(&c, 0, sizeof c);
    char missing[512];
    size_t ml = 0;
    int n_missing = 0;
    missing[0] = 0;
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        int32_t id = special(tok, req[i].s);
        if (id < 0 && !strcmp(req[i].s, "<|content_xml|>"))
            id = special(tok, "<|unused_200024|>"); /* older tokenizer revisions */
        *(int32_t *)((char *)&c + req[i].off) = id;
        if (id < 0) {
            int w = snprintf(missing + ml, sizeof missing - ml, "%s%s", n_missing ? ", " : "", req[i].s);
            if (w > 0 && (size_t)w < sizeof missing - ml)
                ml += (size_t)w;
            n_missing++;
        }
    }
    if (n_missing)
        return ink_err_set(err, INK_E_UNSUPPORTED,
                           "chat: the tokenizer (%d tokens) lacks %d of the Inkling chat format's %zu "
                           "special tokens: %s", ink_tokenizer_n_vocab(tok), n_missing,
                           sizeof req / sizeof req[0], missing);
    for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++)
        *(int32_t *)((char *)&c + opt[i].off) = special(tok, opt[i].s);
    if (c.image < 0 || c.image_patch < 0)
        c.image = c.image_patch = -1;
    c.stops[c.n_stops++] = c.end_sampling;
    if (c.endoftext >= 0)
        c.stops[c.n_stops++] = c.endoftext;
    c.stops[c.n_stops++] = c.msg_user;
    *ids = c;
    return INK_OK;
}

size_t ink_chat_stop_ids(const ink_chat_ids *c, const int32_t **ids)
{
    if (ids)
        *ids = c->stops;
    return c->n_stops;
}

int ink_chat_is_stop(const ink_chat_ids *c, int32_t id)
{
    for (size_t i = 0; i < c->n_stops; i++)
        if (c->stops[i] == id)
            return 1;
    return 0;
}

int ink_chat_check_tokenizer(const ink_tokenizer *tok, ink_err *err)
{
    ink_chat_ids c;
    return ink_chat_ids_get(tok, &c, err);
}

/* ---- rendering ------------------------------------------------------------------------------- */

typedef struct rnd {
    const ink_tokenizer *tok;
    const ink_chat_ids *id;
    ink_tokens *out;
    ink_err *err;
} rnd;

static int emit(rnd *r, int32_t id) { return ink_tokens_push(r->out, id, r->err); }

static int emit_text(rnd *r, const char *s, size_t n)
{
    return n ? ink_tokenizer_encode(r->tok, s, n, 0, r->out, r->err) : INK_OK;
}

static int block(rnd *r, int32_t role, const char *header, int32_t kind, const char *payload, size_t n)
{
    int rc;
    if ((rc = emit(r, role)))
        return rc;
    if (header && (rc = emit_text(r, header, strlen(header))))
        return rc;
    if ((rc = emit(r, kind)) || (rc = emit_text(r, payload, n)))
        return rc;
    return emit(r, r->id->end_message);
}

static int render_tools(rnd *r, json_t *tools)
{
    if (!tools || json_is_null(tools))
        return INK_OK;
    if (!json_is_array(tools))
        return ink_err_set(r->err, INK_E_INVAL, "tools: not an array");
    if (!json_array_size(tools))
        return INK_OK;
    json_t *list = json_array();
    int rc = list ? INK_OK : ink_err_set(r->err, INK_E_NOMEM, "chat: out of memory");
    for (size_t i = 0; i < json_array_size(tools) && !rc; i++) {
        json_t *t = json_array_get(tools, i);
        if (!json_is_object(t)) {
            rc = ink_err_set(r->err, INK_E_INVAL, "tools[%zu]: not an object", i);
            break;
        }
        json_t *fn = json_object_get(t, "function");
        json_t *decl = json_object();
        if (!decl) {
            rc = ink_err_set(r->err, INK_E_NOMEM, "chat: out of memory");
            break;
        }
        if (json_is_object(fn)) {
            json_object_update(decl, fn);
            json_t *ty = json_object_get(t, "type");
            json_object_set_new(decl, "type", json_is_string(ty) ? json_incref(ty) : json_string("function"));
        } else {
            json_object_update(decl, t);
            if (!json_object_get(decl, "type"))
                json_object_set_new(decl, "type", json_string("function"));
        }
        if (!json_is_string(json_object_get(decl, "name")))
            rc = ink_err_set(r->err, INK_E_INVAL, "tools[%zu]: function.name missing", i);
        json_array_append_new(list, decl);
    }
    char *js = NULL;
    size_t jl = 0;
    if (!rc)
        rc = ink_json_canonical(list, 1, &js, &jl, r->err);
    json_decref(list);
    if (!rc)
        rc = block(r, r->id->msg_system, "tool_declare", r->id->xml, js, jl);
    free(js);
    return rc;
}

static int render_tool_call(rnd *r, size_t mi, size_t ci, const ink_chat_tool_call *tc)
{
    if (!tc->name || !*tc->name)
        return ink_err_set(r->err, INK_E_INVAL, "messages[%zu].tool_calls[%zu].function.name: missing", mi,
                           ci);
    json_t *args = tc->args, *owned = NULL;
    if (!args) {
        if (tc->arguments && *tc->arguments) {
            json_error_t je;
            owned = json_loads(tc->arguments, JSON_DECODE_ANY, &je);
            if (!owned)
                return ink_err_set(r->err, INK_E_INVAL,
                                   "messages[%zu].tool_calls[%zu].function.arguments: not valid JSON (%s)",
                                   mi, ci, je.text);
        } else
            owned = json_object();
        args = owned;
    }
    ink_buf b = {0};
    ink_buf_str(&b, "{\"name\":");
    py_string(&b, tc->name, strlen(tc->name));
    ink_buf_str(&b, ",\"args\":");
    char *as = NULL;
    size_t al = 0;
    int rc = ink_json_canonical(args, 1, &as, &al, r->err);
    json_decref(owned);
    if (!rc) {
        ink_buf_add(&b, as, al);
        ink_buf_str(&b, "}");
        free(as);
        rc = b.oom ? ink_err_set(r->err, INK_E_NOMEM, "chat: out of memory") : INK_OK;
    }
    if (!rc)
        rc = block(r, r->id->msg_model, tc->name, r->id->invoke_json, b.p, b.n);
    free(b.p);
    return rc;
}

static const char *tool_name_for(const ink_chat_msg *msgs, size_t upto, const char *call_id)
{
    if (!call_id)
        return NULL;
    for (size_t i = upto; i-- > 0;)
        if (msgs[i].role == INK_ROLE_ASSISTANT)
            for (size_t k = 0; k < msgs[i].n_tool_calls; k++)
                if (msgs[i].tool_calls[k].id && !strcmp(msgs[i].tool_calls[k].id, call_id))
                    return msgs[i].tool_calls[k].name;
    return NULL;
}

static int render_parts(rnd *r, size_t mi, const ink_chat_msg *m, int32_t role, const char *header,
                        int allow_image)
{
    int rc = INK_OK;
    if (!m->n_parts) {
        const char *c = m->content ? m->content : "";
        return block(r, role, header, r->id->text, c, strlen(c));
    }
    for (size_t p = 0; p < m->n_parts && !rc; p++) {
        const ink_chat_part *pt = &m->parts[p];
        if (pt->kind == INK_PART_TEXT) {
            const char *c = pt->text ? pt->text : "";
            rc = block(r, role, header, r->id->text, c, strlen(c));
        } else {
            if (!allow_image || role != r->id->msg_user || r->id->image < 0)
                return ink_err_set(r->err, INK_E_UNSUPPORTED,
                                   "messages[%zu].content[%zu]: image input is not supported by this "
                                   "text-only engine", mi, p);
            if (!(rc = emit(r, role)) && !(rc = emit(r, r->id->image)) && !(rc = emit(r, r->id->image_patch)))
                rc = emit(r, r->id->end_message);
        }
    }
    return rc;
}

static int render_msg(rnd *r, const ink_chat_msg *msgs, size_t i, const ink_chat_opts *o)
{
    const ink_chat_msg *m = &msgs[i];
    int rc = INK_OK;
    switch (m->role) {
    case INK_ROLE_SYSTEM:
    case INK_ROLE_DEVELOPER: return render_parts(r, i, m, r->id->msg_system, NULL, 0);
    case INK_ROLE_USER: return render_parts(r, i, m, r->id->msg_user, NULL, o->allow_image);
    case INK_ROLE_TOOL: {
        const char *name = m->name ? m->name : tool_name_for(msgs, i, m->tool_call_id);
        return render_parts(r, i, m, r->id->msg_tool, name ? name : "", 0);
    }
    case INK_ROLE_ASSISTANT:
        if (m->reasoning && *m->reasoning &&
            (rc = block(r, r->id->msg_model, NULL, r->id->thinking, m->reasoning, strlen(m->reasoning))))
            return rc;
        if (m->n_parts) {
            for (size_t p = 0; p < m->n_parts && !rc; p++) {
                const ink_chat_part *pt = &m->parts[p];
                if (pt->kind != INK_PART_TEXT)
                    return ink_err_set(r->err, INK_E_UNSUPPORTED,
                                       "messages[%zu].content[%zu]: assistant content must be text", i, p);
                if (pt->text && *pt->text)
                    rc = block(r, r->id->msg_model, NULL, r->id->text, pt->text, strlen(pt->text));
            }
        } else if (m->content && *m->content)
            rc = block(r, r->id->msg_model, NULL, r->id->text, m->content, strlen(m->content));
        for (size_t k = 0; k < m->n_tool_calls && !rc; k++)
            rc = render_tool_call(r, i, k, &m->tool_calls[k]);
        return rc ? rc : emit(r, r->id->end_sampling);
    }
    return ink_err_set(r->err, INK_E_INVAL, "messages[%zu]: unknown role %d", i, (int)m->role);
}

int ink_chat_render(const ink_tokenizer *tok, const ink_chat_msg *msgs, size_t n_msgs,
                    const ink_chat_opts *opts, ink_tokens *out, ink_err *err)
{
    static const ink_chat_opts dflt = {0};
    const ink_chat_opts *o = opts ? opts : &dflt;
    if (!out || (!msgs && n_msgs))
        return ink_err_set(err, INK_E_INVAL, "ink_chat_render: NULL argument");
    ink_chat_ids ids;
    int rc = ink_chat_ids_get(tok, &ids, err);
    if (rc)
        return rc;
    double effort;
    if ((rc = ink_chat_effort(o->effort, &effort, err)))
        return rc;
    char es[8], line[48];
    ink_chat_effort_str(effort, es);
    snprintf(line, sizeof line, "Thinking effort level: %s", es);
    size_t n0 = out->n;
    rnd r = {tok, &ids, out, err};
    rc = o->continuation ? INK_OK : render_tools(&r, o->tools);
    int effort_done = o->continuation;
    for (size_t i = 0; i < n_msgs && !rc; i++) {
        int sys = msgs[i].role == INK_ROLE_SYSTEM || msgs[i].role == INK_ROLE_DEVELOPER;
        if (!sys && !effort_done) {
            if ((rc = block(&r, ids.msg_system, NULL, ids.text, line, strlen(line))))
                break;
            effort_done = 1;
        }
        rc = render_msg(&r, msgs, i, o);
    }
    if (!rc && !effort_done)
        rc = block(&r, ids.msg_system, NULL, ids.text, line, strlen(line));
    if (!rc && !o->no_generation_prompt) {
        rc = emit(&r, ids.msg_model);
        if (!rc && o->text_prefill && effort == 0)
            rc = emit(&r, ids.text);
    }
    if (rc)
        out->n = n0;
    return rc;
}

/* ---- OpenAI-style JSON messages -------------------------------------------------------------- */

static const char *jstr(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int parse_parts(json_t *content, size_t mi, ink_chat_part **parts, size_t *n, ink_err *err)
{
    size_t np = json_array_size(content);
    *parts = calloc(np ? np : 1, sizeof **parts);
    if (!*parts)
        return ink_err_set(err, INK_E_NOMEM, "chat: out of memory");
    for (size_t p = 0; p < np; p++) {
        json_t *pt = json_array_get(content, p);
        const char *ty = json_is_string(pt) ? "text" : jstr(pt, "type");
        if (!ty)
            return ink_err_set(err, INK_E_INVAL, "messages[%zu].content[%zu]: part without a type", mi, p);
        if (!strcmp(ty, "text") || !strcmp(ty, "input_text")) {
            (*parts)[p].kind = INK_PART_TEXT;
            (*parts)[p].text = json_is_string(pt) ? json_string_value(pt) : jstr(pt, "text");
            if (!(*parts)[p].text)
                return ink_err_set(err, INK_E_INVAL, "messages[%zu].content[%zu].text: missing", mi, p);
        } else if (!strcmp(ty, "image_url") || !strcmp(ty, "image") || !strcmp(ty, "input_image")) {
            (*parts)[p].kind = INK_PART_IMAGE;
        } else
            return ink_err_set(err, INK_E_UNSUPPORTED,
                               "messages[%zu].content[%zu]: part type '%.32s' is not supported", mi, p, ty);
    }
    *n = np;
    return INK_OK;
}

int ink_chat_render_json(const ink_tokenizer *tok, json_t *messages, const ink_chat_opts *opts,
                         ink_tokens *out, ink_err *err)
{
    if (!json_is_array(messages))
        return ink_err_set(err, INK_E_INVAL, "messages: not an array");
    size_t n = json_array_size(messages);
    ink_chat_msg *msgs = calloc(n ? n : 1, sizeof *msgs);
    if (!msgs)
        return ink_err_set(err, INK_E_NOMEM, "chat: out of memory");
    int rc = INK_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        json_t *m = json_array_get(messages, i);
        const char *role = jstr(m, "role");
        if (!json_is_object(m) || !role) {
            rc = ink_err_set(err, INK_E_INVAL, "messages[%zu]: needs a string role", i);
            break;
        }
        ink_chat_msg *cm = &msgs[i];
        if (!strcmp(role, "system"))
            cm->role = INK_ROLE_SYSTEM;
        else if (!strcmp(role, "developer"))
            cm->role = INK_ROLE_DEVELOPER;
        else if (!strcmp(role, "user"))
            cm->role = INK_ROLE_USER;
        else if (!strcmp(role, "assistant") || !strcmp(role, "model"))
            cm->role = INK_ROLE_ASSISTANT;
        else if (!strcmp(role, "tool"))
            cm->role = INK_ROLE_TOOL;
        else {
            rc = ink_err_set(err, INK_E_INVAL, "messages[%zu].role: '%.32s' is not system, developer, user, "
                             "assistant or tool", i, role);
            break;
        }
        json_t *content = json_object_get(m, "content");
        if (json_is_string(content))
            cm->content = json_string_value(content);
        else if (json_is_array(content)) {
            ink_chat_part *parts = NULL;
            rc = parse_parts(content, i, &parts, &cm->n_parts, err);
            cm->parts = parts;
            if (rc)
                break;
        } else if (content && !json_is_null(content)) {
            rc = ink_err_set(err, INK_E_INVAL, "messages[%zu].content: must be a string, an array or null", i);
            break;
        }
        cm->reasoning = jstr(m, "reasoning_content");
        if (!cm->reasoning)
            cm->reasoning = jstr(m, "reasoning");
        cm->name = jstr(m, "name");
        cm->tool_call_id = jstr(m, "tool_call_id");
        json_t *tcs = json_object_get(m, "tool_calls");
        if (json_is_array(tcs) && json_array_size(tcs)) {
            size_t nt = json_array_size(tcs);
            ink_chat_tool_call *calls = calloc(nt, sizeof *calls);
            if (!calls) {
                rc = ink_err_set(err, INK_E_NOMEM, "chat: out of memory");
                break;
            }
            cm->tool_calls = calls;
            cm->n_tool_calls = nt;
            for (size_t k = 0; k < nt; k++) {
                json_t *tc = json_array_get(tcs, k);
                json_t *fn = json_object_get(tc, "function");
                if (!json_is_object(fn))
                    fn = tc;
                calls[k].id = jstr(tc, "id");
                calls[k].name = jstr(fn, "name");
                json_t *a = json_object_get(fn, "arguments");
                if (json_is_string(a))
                    calls[k].arguments = json_string_value(a);
                else if (a && !json_is_null(a))
                    calls[k].args = a;
            }
        } else if (tcs && !json_is_null(tcs) && !json_is_array(tcs)) {
            rc = ink_err_set(err, INK_E_INVAL, "messages[%zu].tool_calls: not an array", i);
            break;
        }
    }
    if (!rc)
        rc = ink_chat_render(tok, msgs, n, opts, out, err);
    for (size_t i = 0; i < n; i++) {
        free((void *)msgs[i].parts);
        free((void *)msgs[i].tool_calls);
    }
    free(msgs);
    return rc;
}

/* ---- output parsing -------------------------------------------------------------------------- */

enum { ST_HEADER, ST_BLOCK, ST_AFTER, ST_DONE };

struct ink_chat_parser {
    const ink_tokenizer *tok;
    ink_chat_ids id;
    ink_detok *body;
    int state;
    ink_block_kind kind;
    ink_buf header;
    char *name; /* name of the open block */
    char flush[8];
};

int ink_chat_parser_new(ink_chat_parser **out, const ink_tokenizer *tok, ink_err *err)
{
    if (!out || !tok)
        return ink_err_set(err, INK_E_INVAL, "ink_chat_parser_new: NULL argument");
    ink_chat_parser *p = calloc(1, sizeof *p);
    if (!p)
        return ink_err_set(err, INK_E_NOMEM, "chat: out of memory");
    int rc = ink_chat_ids_get(tok, &p->id, err);
    if (!rc)
        rc = ink_detok_new(&p->body, tok, 0, err);
    if (rc) {
        free(p);
        return rc;
    }
    p->tok = tok;
    p->state = ST_HEADER;
    *out = p;
    return INK_OK;
}

const ink_chat_ids *ink_chat_parser_ids(const ink_chat_parser *p) { return &p->id; }

void ink_chat_parser_free(ink_chat_parser *p)
{
    if (!p)
        return;
    ink_detok_free(p->body);
    free(p->header.p);
    free(p->name);
    free(p);
}

static int kind_of(const ink_chat_ids *c, int32_t id, ink_block_kind *k)
{
    if (id == c->text)
        *k = INK_BLOCK_TEXT;
    else if (id == c->thinking)
        *k = INK_BLOCK_THINKING;
    else if (id == c->invoke_json)
        *k = INK_BLOCK_TOOL_CALL;
    else if (id == c->invoke_text)
        *k = INK_BLOCK_TOOL_TEXT;
    else if (id == c->tool_error)
        *k = INK_BLOCK_TOOL_ERROR;
    else
        return 0;
    return 1;
}

/* Closes the open block: flushes the decoder into a DELTA, then BLOCK_END. */
static void close_block(ink_chat_parser *p, int closed, ink_chat_event *ev, size_t *n)
{
    const char *t;
    size_t l;
    ink_detok_flush(p->body, &t, &l);
    if (l) {
        memcpy(p->flush, t, l < sizeof p->flush ? l : sizeof p->flush - 1);
        ev[(*n)++] = (ink_chat_event){.type = INK_EV_DELTA, .kind = p->kind, .text = p->flush, .len = l};
    }
    ev[(*n)++] = (ink_chat_event){.type = INK_EV_BLOCK_END, .kind = p->kind, .closed = closed};
    p->state = ST_AFTER;
}

static int open_block(ink_chat_parser *p, ink_block_kind k, ink_chat_event *ev, size_t *n)
{
    free(p->name);
    p->name = strdup(p->header.p ? p->header.p : "");
    p->header.n = 0;
    if (p->header.p)
        p->header.p[0] = 0;
    if (!p->name)
        return INK_E_NOMEM;
    p->kind = k;
    p->state = ST_BLOCK;
    ev[(*n)++] = (ink_chat_event){.type = INK_EV_BLOCK_START, .kind = k, .name = p->name};
    return INK_OK;
}

int ink_chat_parser_feed(ink_chat_parser *p, int32_t id, ink_chat_event ev[4], size_t *n_ev, ink_err *err)
{
    *n_ev = 0;
    if (p->state == ST_DONE)
        return INK_OK;
    if (id < 0 || id >= ink_tokenizer_n_vocab(p->tok))
        return ink_err_set(err, INK_E_INVAL, "chat: id %d is not a token", (int)id);
    ink_block_kind k;
    if (ink_chat_is_stop(&p->id, id)) {
        if (p->state == ST_BLOCK)
            close_block(p, 0, ev, n_ev);
        else if (p->header.n) { /* bare text without a kind token */
            ev[(*n_ev)++] = (ink_chat_event){.type = INK_EV_BLOCK_START, .kind = INK_BLOCK_TEXT, .name = ""};
            ev[(*n_ev)++] = (ink_chat_event){.type = INK_EV_DELTA, .kind = INK_BLOCK_TEXT,
                                             .text = p->header.p, .len = p->header.n};
            ev[(*n_ev)++] = (ink_chat_event){.type = INK_EV_BLOCK_END, .kind = INK_BLOCK_TEXT, .closed = 0};
        }
        ev[(*n_ev)++] = (ink_chat_event){.type = INK_EV_STOP, .stop_id = id};
        p->state = ST_DONE;
        return INK_OK;
    }
    if (kind_of(&p->id, id, &k)) {
        if (p->state == ST_BLOCK)
            close_block(p, 0, ev, n_ev);
        if (open_block(p, k, ev, n_ev))
            return ink_err_set(err, INK_E_NOMEM, "chat: out of memory");
        return INK_OK;
    }
    if (id == p->id.end_message) {
        if (p->state == ST_BLOCK)
            close_block(p, 1, ev, n_ev);
        return INK_OK;
    }
    if (id == p->id.msg_model) {
        if (p->state == ST_BLOCK)
            close_block(p, 0, ev, n_ev);
        p->state = ST_HEADER;
        p->header.n = 0;
        if (p->header.p)
            p->header.p[0] = 0;
        return INK_OK;
    }
    int special = ink_tokenizer_is_special(p->tok, id);
    if (p->state == ST_BLOCK) {
        const char *t;
        size_t l;
        int rc = ink_detok_feed(p->body, id, &t, &l, err);
        if (rc)
            return rc;
        if (l)
            ev[(*n_ev)++] = (ink_chat_event){.type = INK_EV_DELTA, .kind = p->kind, .text = t, .len = l};
        return INK_OK;
    }
    if (special)
        return INK_OK; /* other control tokens between blocks carry nothing */
    size_t l;
    const char *piece = ink_tokenizer_piece(p->tok, id, &l);
    if (piece)
        ink_buf_add(&p->header, piece, l);
    if (p->header.oom)
        return ink_err_set(err, INK_E_NOMEM, "chat: out of memory");
    p->state = ST_HEADER;
    return INK_OK;
}

void ink_chat_parser_finish(ink_chat_parser *p, ink_chat_event ev[4], size_t *n_ev)
{
    *n_ev = 0;
    if (p->state == ST_BLOCK)
        close_block(p, 0, ev, n_ev);
    else if (p->state != ST_DONE && p->header.n) {
        ev[(*n_ev)++] = (ink_chat_event){.type = INK_EV_BLOCK_START, .kind = INK_BLOCK_TEXT, .name = ""};
        ev[(*n_ev)++] = (ink_chat_event){.type = INK_EV_DELTA, .kind = INK_BLOCK_TEXT, .text = p->header.p,
                                         .len = p->header.n};
        ev[(*n_ev)++] = (ink_chat_event){.type = INK_EV_BLOCK_END, .kind = INK_BLOCK_TEXT, .closed = 0};
        p->header.n = 0;
    }
    if (p->state != ST_DONE)
        p->state = ST_AFTER;
}

void ink_chat_output_free(ink_chat_output *o)
{
    if (!o)
        return;
    for (size_t i = 0; i < o->n; i++) {
        free(o->blocks[i].name);
        free(o->blocks[i].text);
    }
    free(o->blocks);
    memset(o, 0, sizeof *o);
}

static int apply(ink_chat_output *o, ink_buf *cur, const ink_chat_event *ev, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const ink_chat_event *e = &ev[i];
        if (e->type == INK_EV_BLOCK_START) {
            ink_chat_block *nb = realloc(o->blocks, (o->n + 1) * sizeof *nb);
            if (!nb)
                return INK_E_NOMEM;
            o->blocks = nb;
            nb[o->n] = (ink_chat_block){.kind = e->kind, .name = strdup(e->name ? e->name : "")};
            o->n++;
            if (!nb[o->n - 1].name)
                return INK_E_NOMEM;
            cur->n = 0;
            ink_buf_add(cur, "", 0);
        } else if (e->type == INK_EV_DELTA) {
            ink_buf_add(cur, e->text, e->len);
        } else if (e->type == INK_EV_BLOCK_END) {
            ink_chat_block *b = &o->blocks[o->n - 1];
            b->closed = e->closed;
            b->text = malloc(cur->n + 1);
            if (!b->text)
                return INK_E_NOMEM;
            memcpy(b->text, cur->p ? cur->p : "", cur->n);
            b->text[cur->n] = 0;
            b->len = cur->n;
        } else {
            o->stopped = 1;
            o->stop_id = e->stop_id;
        }
        if (cur->oom)
            return INK_E_NOMEM;
    }
    return INK_OK;
}

int ink_chat_parse(const ink_tokenizer *tok, const int32_t *ids, size_t n, ink_chat_output *out,
                   ink_err *err)
{
    if (!out || (!ids && n))
        return ink_err_set(err, INK_E_INVAL, "ink_chat_parse: NULL argument");
    ink_chat_parser *p;
    int rc = ink_chat_parser_new(&p, tok, err);
    if (rc)
        return rc;
    ink_chat_output o = {.stop_id = -1};
    ink_buf cur = {0};
    ink_chat_event ev[4];
    size_t ne;
    for (size_t i = 0; i < n && !rc; i++) {
        rc = ink_chat_parser_feed(p, ids[i], ev, &ne, err);
        if (!rc && apply(&o, &cur, ev, ne))
            rc = ink_err_set(err, INK_E_NOMEM, "chat: out of memory");
    }
    if (!rc) {
        ink_chat_parser_finish(p, ev, &ne);
        if (apply(&o, &cur, ev, ne))
            rc = ink_err_set(err, INK_E_NOMEM, "chat: out of memory");
    }
    ink_chat_parser_free(p);
    free(cur.p);
    if (rc) {
        ink_chat_output_free(&o);
        return rc;
    }
    *out = o;
    return INK_OK;
}
