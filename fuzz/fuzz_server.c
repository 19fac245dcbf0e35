/* fuzz_server.c — the request and response handling of `inkling serve` without sockets or a
 * model: a server object holding only what the request parser reads (options, the test tokenizer,
 * context and vocabulary sizes, whether an MTP head is loaded).
 *
 * server: first byte = endpoint (chat / completions / tokenize / detokenize) and flags (MTP head
 *   present, spec default, chat available, tiny context), the rest is the request body. A parsed
 *   job must have a prompt that fits the context and ids inside the vocabulary.
 * serverout: generated ids through the output mapping (srv_out: Inkling block parser, reasoning,
 *   tool calls, stop strings). Input: a first line of up to three stop strings separated by TAB
 *   (byte 0 of it: chat or plain), then ids as 3-byte big-endian units (modulo the vocabulary). Properties: the visible text never contains a stop
 *   string, and equals the concatenated content deltas. */
#include "fuzz.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"
#include "tok/chat.h"

static ink_server *fake_server(uint8_t flags)
{
    static ink_server S;
    static int init;
    static char dummy_drafter;
    if (!init) {
        memset(&S, 0, sizeof S);
        pthread_mutex_init(&S.mu, NULL);
        S.tok = (ink_tokenizer *)fz_test_tokenizer();
        S.model_id = "tiny";
        S.o.model_id = "tiny";
        S.o.sampling.temp = 0.8f, S.o.sampling.top_p = 0.95f;
        S.o.default_max_tokens = -1;
        S.n_vocab = ink_tokenizer_n_vocab(S.tok);
        S.eos = INK_ID_END_SAMPLING;
        S.state = INK_SERVER_READY;
        init = 1;
    }
    S.drafter = flags & 0x10 ? (ink_drafter *)(void *)&dummy_drafter : NULL; /* only tested against NULL */
    S.depth = S.drafter ? 2 : 0;
    S.o.spec_default = !!(flags & 0x20);
    S.chat_ok = !(flags & 0x40);
    snprintf(S.chat_why, sizeof S.chat_why, "%s", S.chat_ok ? "" : "the tokenizer lacks the control tokens");
    S.n_ctx = flags & 0x80 ? 16 : 4096;
    S.o.block_size = flags & 0x08 ? 3 : 0;
    return &S;
}

int ink_fuzz_server(const uint8_t *data, size_t n)
{
    if (n < 1) return 0;
    ink_server *S = fake_server(data[0]);
    const char *body = (const char *)data + 1;
    size_t len = n - 1;
    int which = data[0] & 3;
    if (which < 2) {
        int status = 0;
        char *err_body = NULL;
        srv_job *j = srv_parse_request(S, which == 0 ? SRV_CHAT : SRV_COMPLETION, body, len, &status, &err_body);
        if (j) {
            if (j->n_prompt < 1 || j->n_prompt > S->n_ctx) fz_fail("job with a prompt of %d (context %d)", j->n_prompt, S->n_ctx);
            for (int i = 0; i < j->n_prompt; i++)
                if (j->prompt[i] < 0 || j->prompt[i] >= S->n_vocab) fz_fail("prompt id %d", j->prompt[i]);
            if (j->use_draft && !S->drafter) fz_fail("drafting without an MTP head");
            srv_job_free(j);
        } else {
            if (status < 400 || status > 599 || !err_body) fz_fail("failed parse: status %d, body %p", status, (void *)err_body);
            json_t *e = json_loads(err_body, 0, NULL);
            if (!json_is_object(json_object_get(e, "error"))) fz_fail("error body is not an OpenAI error: %.200s", err_body);
            json_decref(e);
            free(err_body);
        }
    } else {
        char *out = NULL;
        int st = which == 2 ? srv_tokenize(S, body, len, &out) : srv_detokenize(S, body, len, &out);
        if (!out) fz_fail("tokenize/detokenize (%d) without a body", st);
        /* a token may decode to a NUL byte: "\u0000" is valid JSON (jansson wants JSON_ALLOW_NUL for it) */
        json_t *v = json_loads(out, JSON_ALLOW_NUL, NULL);
        if (!v) fz_fail("tokenize/detokenize answered invalid JSON: %.200s", out);
        json_decref(v);
        free(out);
    }
    return 0;
}

typedef struct acc {
    srv_buf content;
    int tools;
} acc;

static void on_delta(void *ud, int kind, const char *text, size_t len, json_t *tool, int index)
{
    acc *a = ud;
    (void)index;
    if (kind == SRV_D_CONTENT) srv_buf_add(&a->content, text, len);
    if (kind == SRV_D_TOOL && !json_is_object(tool)) fz_fail("tool delta without an object");
    a->tools += kind == SRV_D_TOOL;
}

static int contains(const char *h, size_t hn, const char *nd)
{
    size_t l = strlen(nd);
    if (!l || l > hn) return 0;
    for (size_t i = 0; i + l <= hn; i++)
        if (!memcmp(h + i, nd, l)) return 1;
    return 0;
}

int ink_fuzz_serverout(const uint8_t *data, size_t n)
{
    const ink_tokenizer *tok = fz_test_tokenizer();
    const uint8_t *nl = memchr(data, '\n', n);
    if (!nl || nl == data) return 0;
    int chat = data[0] & 1;
    char line[256];
    size_t ll = (size_t)(nl - data - 1) < sizeof line - 1 ? (size_t)(nl - data - 1) : sizeof line - 1;
    memcpy(line, data + 1, ll);
    line[ll] = '\0';
    char *stops[3];
    int n_stops = 0;
    for (char *p = line, *q; n_stops < 3 && *p; p = q + 1) {
        q = strchr(p, '\t');
        if (q) *q = '\0';
        if (*p) stops[n_stops++] = p;
        if (!q) break;
    }
    acc a = {{0}, 0};
    srv_out o;
    ink_err err = {0};
    if (srv_out_init(&o, chat, tok, stops, n_stops, "call_fz", on_delta, &a, &err)) fz_fail("srv_out_init: %s", err.msg);
    const uint8_t *p = nl + 1, *end = data + n;
    for (; end - p >= 3; p += 3) {
        uint32_t u = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
        int32_t id = (int32_t)(u % (uint32_t)ink_tokenizer_n_vocab(tok));
        if (srv_out_feed(&o, id)) break;
    }
    srv_out_finish(&o);
    size_t tl = 0;
    const char *text = srv_out_text(&o, &tl);
    for (int i = 0; i < n_stops; i++)
        if (contains(text, tl, stops[i])) fz_fail("visible text contains the stop string '%s'", stops[i]);
    if (a.content.n != tl || (tl && memcmp(a.content.p, text, tl)))
        fz_fail("content deltas (%zu bytes) differ from the visible text (%zu)", a.content.n, tl);
    srv_out_free(&o);
    srv_buf_free(&a.content);
    return 0;
}
