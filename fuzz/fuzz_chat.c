/* fuzz_chat.c — OpenAI-style chat JSON through ink_chat_render_json on the test tokenizer, then
 * the rendered ids through the output parser (ink_chat_parse), and the input through the
 * canonical JSON writer. Input: a JSON array of messages, or an object {"messages": [...],
 * "tools": [...], "effort": "...", "no_generation_prompt": bool, "allow_image": bool,
 * "text_prefill": bool}. Property: the canonical JSON parses back to an equal value. */
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

#include "tok/chat.h"

int ink_fuzz_chat(const uint8_t *data, size_t n)
{
    const ink_tokenizer *t = fz_test_tokenizer();
    json_error_t je;
    json_t *root = json_loadb((const char *)data, n, 0, &je);
    if (!root) return 0;
    json_t *msgs = root;
    ink_chat_opts o = {0};
    if (json_is_object(root)) {
        msgs = json_object_get(root, "messages");
        json_t *tools = json_object_get(root, "tools");
        o.tools = json_is_null(tools) ? NULL : tools;
        o.effort = json_string_value(json_object_get(root, "effort"));
        o.no_generation_prompt = json_is_true(json_object_get(root, "no_generation_prompt"));
        o.allow_image = json_is_true(json_object_get(root, "allow_image"));
        o.text_prefill = json_is_true(json_object_get(root, "text_prefill"));
    }
    ink_tokens ids = {0};
    ink_err err = {0};
    int rc = ink_chat_render_json(t, msgs, &o, &ids, &err);
    if (rc) {
        if (!err.msg[0]) fz_fail("ink_chat_render_json failed (%d) without a message", rc);
        if (ids.n) fz_fail("failed render left %zu ids", ids.n);
    } else {
        int nv = ink_tokenizer_n_vocab(t);
        for (size_t i = 0; i < ids.n; i++)
            if (ids.ids[i] < 0 || ids.ids[i] >= nv) fz_fail("rendered id %d", ids.ids[i]);
        ink_chat_output out;
        if (ink_chat_parse(t, ids.ids, ids.n, &out, &err) == INK_OK) ink_chat_output_free(&out);
    }
    ink_tokens_free(&ids);

    char *canon = NULL;
    size_t cl = 0;
    ink_err e2 = {0};
    if (ink_json_canonical(root, 1, &canon, &cl, &e2) == INK_OK) {
        json_t *back = json_loadb(canon, cl, 0, &je);
        if (!back) fz_fail("canonical JSON does not parse: %s: %.200s", je.text, canon);
        if (!json_equal(back, root)) fz_fail("canonical JSON changes the value: %.200s", canon);
        json_decref(back);
        free(canon);
    }
    json_decref(root);
    return 0;
}
