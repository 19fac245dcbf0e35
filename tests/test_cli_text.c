/* test_cli_text.c — `inkling generate` with text: raw prompts on a small byte-level tokenizer (the
 * text printed equals the decoded greedy ids of the token interface), chat prompts on the Inkling
 * tokenizer (the rendered prompt length), the default model ($INKLING_MODEL), `inkling chat`
 * over two turns, and Ctrl-C (clean stop, statistics printed, exit 130). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support/ckpt.h"
#include "support/util.h"
#include "tok/chat.h"
#include "tok/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* GPT-2 byte-level spelling of byte b. */
static const char *byte_level(unsigned b, char out[3])
{
    int self = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    unsigned cp = b;
    if (!self) {
        unsigned n = 0;
        for (unsigned k = 0; k < b; k++) n += !((k >= 0x21 && k <= 0x7e) || (k >= 0xa1 && k <= 0xac) || k >= 0xae);
        cp = 256 + n;
    }
    if (cp < 0x80) out[0] = (char)cp, out[1] = 0;
    else out[0] = (char)(0xc0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3f)), out[2] = 0;
    return out;
}

/* A 256-byte-token BPE tokenizer with two merges and one special token (id 258). */
static void write_small_tokenizer(const char *dir)
{
    json_t *root = json_object(), *model = json_object(), *vocab = json_object();
    char b[3];
    for (unsigned i = 0; i < 256; i++) json_object_set_new(vocab, byte_level(i, b), json_integer(i));
    json_object_set_new(vocab, "he", json_integer(256));
    json_object_set_new(vocab, "ll", json_integer(257));
    json_object_set_new(model, "type", json_string("BPE"));
    json_object_set_new(model, "vocab", vocab);
    json_object_set_new(model, "merges", json_pack("[ss]", "h e", "l l"));
    json_object_set_new(root, "model", model);
    json_object_set_new(root, "normalizer", json_null());
    json_object_set_new(root, "pre_tokenizer",
                        json_pack("{s:s,s:[{s:s,s:{s:s},s:s,s:b},{s:s,s:b,s:b}]}", "type", "Sequence", "pretokenizers",
                                  "type", "Split", "pattern", "Regex", " ?\\p{L}+|\\s+(?!\\S)|\\s+|[^\\s\\p{L}]+",
                                  "behavior", "Isolated", "invert", 0, "type", "ByteLevel", "add_prefix_space", 0,
                                  "use_regex", 0));
    json_object_set_new(root, "decoder", json_pack("{s:s}", "type", "ByteLevel"));
    json_object_set_new(root, "added_tokens",
                        json_pack("[{s:i,s:s,s:b}]", "id", 258, "content", "<|endoftext|>", "special", 1));
    char p[400];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    assert_int_equal(json_dump_file(root, p, 0), 0);
    json_decref(root);
}

static void small_model(char *dir, size_t n)
{
    tiny_spec sp;
    tiny_default(&sp);
    sp.vocab = 264, sp.vocab_unpadded = 259, sp.eos = 258, sp.max_ctx = 2000000;
    sp.mtp_depth = 2, sp.n_mtp_local = 1, sp.mtp_file = 1;
    assert_int_equal(tu_tmpdir(dir, n, "text"), 0);
    assert_int_equal(tiny_write(dir, &sp), 0);
    write_small_tokenizer(dir);
}

static void test_raw_text_equals_token_path(void **state)
{
    (void)state;
    char dir[256], cmd[2048], out[8192], err[8192], ids[4096];
    small_model(dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "%s tokenize -m %s 'hello world'", tu_bin(), dir);
    assert_int_equal(tu_run(cmd, ids, sizeof ids, err, sizeof err), 0);
    ids[strcspn(ids, "\n")] = 0;
    assert_string_equal(ids, "256,257,111,32,119,111,114,108,100");
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids %s -n 12 --temp 0 --ids --ignore-eos", tu_bin(), dir, ids);
    assert_int_equal(tu_run(cmd, out, sizeof out, err, sizeof err), 0);
    out[strcspn(out, "\n")] = 0;
    /* decode those ids through the library (special tokens skipped, as generate prints them) */
    ink_tokenizer *t;
    ink_err e = {0};
    assert_int_equal(ink_tokenizer_open(&t, dir, &e), 0);
    int32_t gen[16];
    int ng = 0;
    for (char *p = out; *p && ng < 16;) {
        gen[ng++] = (int32_t)strtol(p, &p, 10);
        if (*p == ',') p++;
    }
    assert_int_equal(ng, 12);
    char *want;
    size_t wl;
    assert_int_equal(ink_tokenizer_decode(t, gen, 12, INK_DECODE_SKIP_SPECIAL | INK_DECODE_LOSSY, &want, &wl, &e), 0);
    snprintf(cmd, sizeof cmd, "%s generate -m %s --raw -p 'hello world' -n 12 --temp 0 --ignore-eos", tu_bin(), dir);
    assert_int_equal(tu_run(cmd, out, sizeof out, err, sizeof err), 0);
    size_t ol = strlen(out);
    if (ol && wl && out[ol - 1] == '\n') out[--ol] = 0; /* generate ends the reply with a newline */
    assert_string_equal(out, want);
    assert_non_null(strstr(err, "prompt eval: 9 tokens"));
    assert_non_null(strstr(err, "eval: 12 tokens"));
    free(want);
    /* -f FILE gives the same; a missing file is a clear error */
    char fp[300];
    snprintf(fp, sizeof fp, "%s/prompt.txt", dir);
    FILE *f = fopen(fp, "w");
    fputs("hello world", f);
    fclose(f);
    char out2[8192];
    snprintf(cmd, sizeof cmd, "%s generate -m %s --raw -f %s -n 12 --temp 0 --ignore-eos", tu_bin(), dir, fp);
    assert_int_equal(tu_run(cmd, out2, sizeof out2, err, sizeof err), 0);
    out2[strcspn(out2, "\n")] = 0;
    assert_string_equal(out2, out);
    snprintf(cmd, sizeof cmd, "%s generate -m %s --raw -f %s/nope.txt", tu_bin(), dir, dir);
    assert_int_equal(tu_run(cmd, out2, sizeof out2, err, sizeof err), 1);
    assert_non_null(strstr(err, "nope.txt"));
    /* a tokenizer without the chat tokens: -p is used as a plain prompt */
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p 'hello world' -n 12 --temp 0 --ignore-eos", tu_bin(), dir);
    assert_int_equal(tu_run(cmd, out2, sizeof out2, err, sizeof err), 0);
    out2[strcspn(out2, "\n")] = 0;
    assert_string_equal(out2, out);
    snprintf(cmd, sizeof cmd, "echo hi | %s chat -m %s", tu_bin(), dir);
    assert_int_equal(tu_run(cmd, out2, sizeof out2, err, sizeof err), 1);
    assert_non_null(strstr(err, "no Inkling chat format"));
    /* inkling.json names engine defaults: drafting with the model's MTP head; flags win */
    char sp[300];
    snprintf(sp, sizeof sp, "%s/inkling.json", dir);
    FILE *jf = fopen(sp, "w");
    fputs("{\"draft_kind\": \"mtp\", \"draft_block_size\": 3, \"draft_vocab\": 8}", jf);
    fclose(jf); /* draft_vocab: a default, skipped while the directory has no draft_vocab.json */
    snprintf(sp, sizeof sp, "%s/st.json", dir);
    snprintf(cmd, sizeof cmd, "%s generate -m %s --raw -p 'hello world' -n 12 --temp 0 --ignore-eos --stats-json %s",
             tu_bin(), dir, sp);
    assert_int_equal(tu_run(cmd, out2, sizeof out2, err, sizeof err), 0);
    out2[strcspn(out2, "\n")] = 0;
    assert_string_equal(out2, out); /* greedy: the same text with drafting */
    json_t *st = json_load_file(sp, 0, NULL);
    assert_true(json_integer_value(json_object_get(st, "rounds")) > 0);
    assert_int_equal(json_integer_value(json_object_get(st, "block_size")), 3);
    assert_int_equal(json_integer_value(json_object_get(st, "draft_vocab")), 0); /* no ranking here */
    json_decref(st);
    snprintf(cmd, sizeof cmd, "%s generate -m %s --raw -p 'hello world' -n 12 --temp 0 --draft-kind none --stats-json %s",
             tu_bin(), dir, sp);
    assert_int_equal(tu_run(cmd, out2, sizeof out2, err, sizeof err), 0);
    st = json_load_file(sp, 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(st, "rounds")), 0);
    json_decref(st);
    /* --draft-vocab given on the command line needs the file, and says which */
    snprintf(cmd, sizeof cmd, "%s generate -m %s --raw -p 'hello world' -n 4 --draft-vocab 8", tu_bin(), dir);
    assert_int_equal(tu_run(cmd, out2, sizeof out2, err, sizeof err), 1);
    assert_non_null(strstr(err, "draft_vocab.json"));
    snprintf(cmd, sizeof cmd, "%s generate -m %s --raw -p 'hello world' -n 4 --rollback undo", tu_bin(), dir);
    assert_int_equal(tu_run(cmd, out2, sizeof out2, err, sizeof err), 2);
    assert_non_null(strstr(err, "--rollback must be commit or replay"));
    /* with the ranking present, inkling.json's draft_vocab applies; greedy text is unchanged with
     * either rollback */
    snprintf(sp, sizeof sp, "%s/draft_vocab.json", dir);
    jf = fopen(sp, "w");
    fputs("{\"ids\": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}", jf);
    fclose(jf);
    for (int rb = 0; rb < 2; rb++) {
        snprintf(sp, sizeof sp, "%s/st.json", dir);
        snprintf(cmd, sizeof cmd, "%s generate -m %s --raw -p 'hello world' -n 12 --temp 0 --ignore-eos --rollback %s "
                 "--stats-json %s", tu_bin(), dir, rb ? "replay" : "commit", sp);
        assert_int_equal(tu_run(cmd, out2, sizeof out2, err, sizeof err), 0);
        out2[strcspn(out2, "\n")] = 0;
        assert_string_equal(out2, out);
        st = json_load_file(sp, 0, NULL);
        assert_int_equal(json_integer_value(json_object_get(st, "draft_vocab")), 8);
        assert_string_equal(json_string_value(json_object_get(st, "rollback")), rb ? "replay" : "commit");
        json_decref(st);
    }
    snprintf(sp, sizeof sp, "%s/draft_vocab.json", dir);
    unlink(sp);
    snprintf(sp, sizeof sp, "%s/inkling.json", dir);
    unlink(sp);
    /* the default (no inkling.json, no flags): the model's head drafts with auto K; the stats show the
     * widths chosen and the controller's estimates behind the choice */
    snprintf(sp, sizeof sp, "%s/st.json", dir);
    snprintf(cmd, sizeof cmd, "%s generate -m %s --raw -p 'hello world' -n 40 --temp 0 --ignore-eos --stats-json %s",
             tu_bin(), dir, sp);
    assert_int_equal(tu_run(cmd, out2, sizeof out2, err, sizeof err), 0);
    st = json_load_file(sp, 0, NULL);
    assert_non_null(st);
    const char *keys[] = {"prompt_tokens", "generated_tokens", "rounds", "drafted", "accepted", "mean_accepted_length",
                          "acceptance_per_depth", "prefill_tok_s", "decode_tok_s", "k_hist", "controller"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) assert_non_null(json_object_get(st, keys[k]));
    assert_string_equal(json_string_value(json_object_get(st, "block_size")), "auto");
    json_t *hist = json_object_get(st, "k_hist"), *ctl = json_object_get(st, "controller"), *hv;
    const char *hk;
    long steps = 0, spec_rounds = 0;
    json_object_foreach(hist, hk, hv) {
        steps += json_integer_value(hv);
        if (atoi(hk) > 1) spec_rounds += json_integer_value(hv);
    }
    assert_int_equal(spec_rounds, json_integer_value(json_object_get(st, "rounds")));
    assert_true(steps >= 1 && steps <= 39); /* 39 tokens after the first, each round emits >= 1 */
    json_t *range = json_object_get(ctl, "k_range"), *per_k = json_object_get(ctl, "per_k");
    assert_int_equal(json_integer_value(json_array_get(range, 1)), (long)json_array_size(per_k));
    assert_int_equal(json_array_size(json_object_get(ctl, "acceptance")), json_array_size(per_k) - 1);
    long k_best = json_integer_value(json_object_get(ctl, "k_best"));
    assert_true(k_best >= 1 && k_best <= (long)json_array_size(per_k));
    assert_true(json_number_value(json_object_get(ctl, "catch_up_ms_per_drafting_round")) >= 0);
    json_t *act = json_object_get(st, "activations");
    assert_string_equal(json_string_value(json_object_get(act, "float_weights")), "f32");
    assert_string_equal(json_string_value(json_object_get(act, "quantized_weights")), "int8");
    json_decref(st);
    /* --activations bf16 is reported as what ran */
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s --raw -p 'hello world' -n 4 --temp 0 --activations bf16 --draft-kind none --stats-json %s",
             tu_bin(), dir, sp);
    assert_int_equal(tu_run(cmd, out2, sizeof out2, err, sizeof err), 0);
    st = json_load_file(sp, 0, NULL);
    assert_non_null(st);
    act = json_object_get(st, "activations");
    assert_string_equal(json_string_value(json_object_get(act, "float_weights")), "bf16");
    json_decref(st);
    /* -m owner/name resolves to the download cache */
    char cache[300];
    snprintf(cache, sizeof cache, "%s-cache", dir);
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/models/acme/tiny/refs %s/models/acme/tiny/snapshots/abc123 && printf abc123 > "
             "%s/models/acme/tiny/refs/main && cp %s/config.json %s/model.safetensors %s/tokenizer.json "
             "%s/models/acme/tiny/snapshots/abc123/",
             cache, cache, cache, dir, dir, dir, cache);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "INKLING_CACHE_DIR=%s %s generate -m acme/tiny --prompt-ids %s -n 12 --temp 0 --ignore-eos",
             cache, tu_bin(), ids);
    char out3[8192];
    assert_int_equal(tu_run(cmd, out3, sizeof out3, err, sizeof err), 0);
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids %s -n 12 --temp 0 --ignore-eos", tu_bin(), dir, ids);
    assert_int_equal(tu_run(cmd, out2, sizeof out2, err, sizeof err), 0);
    assert_string_equal(out3, out2);
    snprintf(cmd, sizeof cmd, "INKLING_CACHE_DIR=%s %s info -m acme/other", cache, tu_bin());
    assert_int_equal(tu_run(cmd, out3, sizeof out3, err, sizeof err), 1);
    assert_non_null(strstr(err, "inkling download acme/other"));
    /* the default model: no -m */
    snprintf(cmd, sizeof cmd, "INKLING_MODEL=%s %s generate --prompt-ids %s -n 3 --temp 0", dir, tu_bin(), ids);
    assert_int_equal(tu_run(cmd, out2, sizeof out2, err, sizeof err), 0);
    ink_tokenizer_free(t);
}

/* Chat prompts on the Inkling tokenizer: the prompt the engine feeds is the chat rendering. */
static void test_chat_prompt(void **state)
{
    (void)state;
    char dir[256], cmd[2048], out[8192], err[8192], p[400];
    tiny_spec sp;
    tiny_default(&sp);
    sp.vocab = 200064, sp.vocab_unpadded = 200058, sp.hidden = 32, sp.bf16 = 1, sp.n_layer = 2, sp.dense_mlp_idx = 1;
    sp.n_local = 1, sp.local[0] = 0, sp.eos = 200006;
    assert_int_equal(tu_tmpdir(dir, sizeof dir, "chat"), 0);
    assert_int_equal(tiny_write(dir, &sp), 0);
    snprintf(cmd, sizeof cmd, "gzip -dc tests/data/tok/tokenizer.json.gz > %s/tokenizer.json", dir);
    assert_int_equal(system(cmd), 0);
    ink_tokenizer *t;
    ink_err e = {0};
    assert_int_equal(ink_tokenizer_open(&t, dir, &e), 0);
    ink_chat_msg msgs[2] = {{.role = INK_ROLE_SYSTEM, .content = "Be brief."}, {.role = INK_ROLE_USER, .content = "Hi <|end_message|>"}};
    ink_tokens v = {0};
    ink_chat_opts co = {.effort = "low"};
    assert_int_equal(ink_chat_render(t, msgs, 2, &co, &v, &e), 0);
    snprintf(p, sizeof p, "%s/stats.json", dir);
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s --system 'Be brief.' --reasoning-effort low -p 'Hi <|end_message|>' -n 6 --temp 0 "
             "--stats-json %s",
             tu_bin(), dir, p);
    assert_int_equal(tu_run(cmd, out, sizeof out, err, sizeof err), 0);
    json_t *st = json_load_file(p, 0, NULL);
    assert_non_null(st);
    assert_int_equal(json_integer_value(json_object_get(st, "prompt_tokens")), (json_int_t)v.n);
    json_decref(st);
    /* an unknown effort name is refused before the model loads (a usage error, like other bad values) */
    snprintf(cmd, sizeof cmd, "%s generate -m %s --reasoning-effort huge -p Hi -n 2", tu_bin(), dir);
    assert_int_equal(tu_run(cmd, out, sizeof out, err, sizeof err), 2);
    assert_non_null(strstr(err, "huge"));
    /* two chat turns from stdin */
    snprintf(cmd, sizeof cmd, "printf 'Hello\\nAgain\\n' | %s chat -m %s -n 4 --temp 0", tu_bin(), dir);
    assert_int_equal(tu_run(cmd, out, sizeof out, err, sizeof err), 0);
    int turns = 0;
    for (char *q = err; (q = strstr(q, "prompt eval:")); q++) turns++;
    assert_int_equal(turns, 2);
    ink_tokens_free(&v);
    ink_tokenizer_free(t);
}

/* SIGINT stops generation cleanly: statistics printed, exit code 130. The signal is sent once the
 * reply has started streaming (so the handler is installed whatever the machine's load). */
static void test_ctrl_c(void **state)
{
    (void)state;
    char dir[256], cmd[4096], out[8192], err[8192];
    small_model(dir, sizeof dir);
    snprintf(cmd, sizeof cmd,
             "(%s generate -m %s --raw -p hello -n 1000000 -c 1000100 --ignore-eos > %s/o.txt 2> %s/e.txt & pid=$!; "
             "i=0; while [ ! -s %s/o.txt ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; sleep 0.2; "
             "kill -INT $pid; wait $pid; rc=$?; cat %s/e.txt >&2; exit $rc)",
             tu_bin(), dir, dir, dir, dir, dir);
    int rc = tu_run(cmd, out, sizeof out, err, sizeof err);
    if (rc != 130 || !strstr(err, "(interrupted)")) fprintf(stderr, "rc %d, stderr: %s\n", rc, err);
    assert_int_equal(rc, 130);
    assert_non_null(strstr(err, "(interrupted)"));
    assert_non_null(strstr(err, "eval:"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_raw_text_equals_token_path),
        cmocka_unit_test(test_chat_prompt),
        cmocka_unit_test(test_ctrl_c),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
