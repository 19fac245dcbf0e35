/* test_cli_robust.c — issue 13 (CLI part): every failure is visible and the CLI is consistent.
 * Write errors on stdout and output files exit 1 with a message; empty and truncated safetensors
 * are named; --check-tensors names a NaN's tensor and index; invalid generation_config.json /
 * inkling.json / eos ids are errors naming file and field; options that do not apply are refused;
 * output files are checked before the run; --help exits 0 everywhere; --version; -t everywhere. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "inkling.h"
#include "load/safetensors.h"
#include "server/srv.h"
#include "support/ckpt.h"
#include "support/util.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char out[65536], err[65536];

static int run(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return tu_run(cmd, out, sizeof out, err, sizeof err);
}

static void expect_err(const char *needle)
{
    if (!strstr(err, needle)) fprintf(stderr, "expected '%s' in stderr:\n%s\n", needle, err);
    assert_non_null(strstr(err, needle));
}

static void tiny_model(char *dir, size_t n, const char *tag, int mtp_file)
{
    tiny_spec sp;
    tiny_default(&sp);
    sp.mtp_depth = 2, sp.n_mtp_local = 1, sp.mtp_file = mtp_file;
    assert_int_equal(tu_tmpdir(dir, n, tag), 0);
    assert_int_equal(tiny_write(dir, &sp), 0);
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void test_version_and_help(void **state)
{
    (void)state;
    assert_int_equal(run("%s --version", tu_bin()), 0);
    assert_non_null(strstr(out, INK_VERSION));
    assert_int_equal(run("%s -V", tu_bin()), 0);
    assert_non_null(strstr(out, INK_VERSION));
    const char *cmds[] = {"info", "logits", "generate", "chat", "download", "tokenize", "detokenize", "bench", "serve"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        for (int h = 0; h < 2; h++) {
            int rc = run("%s %s %s", tu_bin(), cmds[i], h ? "-h" : "--help");
            if (rc) fprintf(stderr, "%s %s: exit %d\n", cmds[i], h ? "-h" : "--help", rc);
            assert_int_equal(rc, 0);
            char want[64];
            snprintf(want, sizeof want, "inkling %s", cmds[i]);
            assert_non_null(strstr(out, want));
        }
    }
    /* chat's own usage, not generate's */
    assert_int_equal(run("%s chat --help", tu_bin()), 0);
    assert_null(strstr(out, "--prompt-ids"));
    /* -t is --threads everywhere, bench too (bad values are usage errors naming the flag) */
    assert_int_equal(run("%s bench -t abc", tu_bin()), 2);
    expect_err("-t: expected an integer");
    assert_int_equal(run("%s bench --threads 0", tu_bin()), 2);
    expect_err("--threads: expected an integer in 1..256");
    assert_int_equal(run("%s bench --activations fp8", tu_bin()), 2);
    expect_err("--activations must be auto, f32, int8 or bf16, found 'fp8'");
    assert_int_equal(run("%s generate --activations fp8 -p x", tu_bin()), 2);
    expect_err("--activations must be auto, f32, int8 or bf16, found 'fp8'");
}

static void test_write_errors(void **state)
{
    (void)state;
    if (access("/dev/full", W_OK) != 0) {
        print_message("/dev/full missing: write-error checks not run\n");
        fail();
    }
    char dir[256];
    tiny_model(dir, sizeof dir, "robust_w", 0);
    assert_int_equal(run("{ %s generate -m %s --prompt-ids 1,2,3 -n 4 > /dev/full; }", tu_bin(), dir), 1);
    expect_err("write error");
    assert_int_equal(run("{ %s generate -m %s --prompt-ids 1,2,3 -n 4 > /dev/null; }", tu_bin(), dir), 0);
    assert_int_equal(run("{ %s info -m %s > /dev/full; }", tu_bin(), dir), 1);
    expect_err("write error");
    assert_int_equal(run("%s logits -m %s --prompt-ids 1,2 -o /dev/full", tu_bin(), dir), 1);
    expect_err("/dev/full");
    /* output files are checked before the run */
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2,3 -n 4 --stats-json /nonexistent/x.json", tu_bin(), dir), 1);
    expect_err("--stats-json /nonexistent/x.json: cannot open for writing");
    assert_null(strstr(err, "prompt eval")); /* failed before generating */
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2,3 -n 4 --trace /nonexistent/t.jsonl", tu_bin(), dir), 1);
    expect_err("--trace /nonexistent/t.jsonl: cannot open for writing");
    assert_int_equal(run("%s logits -m %s --prompt-ids 1,2 -o /nonexistent/x.npy", tu_bin(), dir), 1);
    expect_err("-o /nonexistent/x.npy: cannot open for writing");
}

static void test_empty_and_truncated_files(void **state)
{
    (void)state;
    char dir[256], p[512];
    tiny_model(dir, sizeof dir, "robust_e", 1);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    assert_int_equal(truncate(p, 0), 0);
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 -n 2", tu_bin(), dir), 1);
    expect_err("model.safetensors: empty file (0 bytes)");
    assert_null(strstr(err, "MTP head"));

    tiny_model(dir, sizeof dir, "robust_e2", 1);
    snprintf(p, sizeof p, "%s/mtp.safetensors", dir);
    assert_int_equal(truncate(p, 0), 0);
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 -n 2 --draft-kind mtp", tu_bin(), dir), 1);
    expect_err("mtp.safetensors: empty file (0 bytes)");

    tiny_model(dir, sizeof dir, "robust_e3", 0);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    ink_st_file f;
    ink_err e = {0};
    assert_int_equal(ink_st_open(&f, p, &e), 0);
    size_t half = f.size / 2;
    ink_st_close(&f);
    assert_int_equal(truncate(p, (off_t)half), 0);
    assert_int_equal(run("%s info -m %s", tu_bin(), dir), 1);
    expect_err("truncated");
}

static void test_check_tensors(void **state)
{
    (void)state;
    char dir[256], p[512];
    tiny_model(dir, sizeof dir, "robust_nan", 0);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    ink_st_file f;
    ink_err e = {0};
    assert_int_equal(ink_st_open(&f, p, &e), 0);
    const ink_st_tensor *t = NULL;
    for (int i = 0; i < f.n; i++)
        if (f.t[i].dtype == INK_DT_F32 && !strcmp(f.t[i].name, "model.llm.embed.weight")) t = &f.t[i];
    assert_non_null(t);
    char name[256];
    snprintf(name, sizeof name, "%s", t->name);
    uint64_t at = f.data_off + t->begin + 4 * 5; /* element 5 */
    ink_st_close(&f);
    int fd = open(p, O_WRONLY);
    assert_true(fd >= 0);
    uint32_t nan = 0x7fc00000u;
    assert_int_equal(pwrite(fd, &nan, 4, (off_t)at), 4);
    close(fd);
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 -n 2 --check-tensors", tu_bin(), dir), 1);
    expect_err(name);
    expect_err("element 5 is NaN");
    assert_int_equal(run("%s info -m %s --check-tensors", tu_bin(), dir), 1);
    expect_err("element 5 is NaN");
    assert_int_equal(run("%s logits -m %s --prompt-ids 1 -o /dev/null --check-tensors", tu_bin(), dir), 1);
    expect_err("element 5 is NaN");
    char good[256];
    tiny_model(good, sizeof good, "robust_ok", 0);
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 -n 2 --check-tensors", tu_bin(), good), 0);
}

static void test_config_validation(void **state)
{
    (void)state;
    char dir[256];
    tiny_model(dir, sizeof dir, "robust_cfg", 0);
    write_text(dir, "generation_config.json", "{oops");
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 -n 2", tu_bin(), dir), 1);
    expect_err("generation_config.json: invalid JSON at line 1");
    write_text(dir, "generation_config.json", "{\"temperature\": \"hot\"}");
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 -n 2", tu_bin(), dir), 1);
    expect_err("generation_config.json: field temperature");
    write_text(dir, "generation_config.json", "{\"eos_token_id\": 999999}");
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 -n 2", tu_bin(), dir), 1);
    expect_err("generation_config.json: field eos_token_id");
    write_text(dir, "generation_config.json", "{\"temperature\": 0.5, \"eos_token_id\": [1, 2]}");
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 -n 2", tu_bin(), dir), 0);

    write_text(dir, "inkling.json", "{\"draft_kind\": \"xyz\"}");
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 -n 2", tu_bin(), dir), 1);
    expect_err("inkling.json: field draft_kind");
    expect_err("xyz");
    write_text(dir, "inkling.json", "{\"draft_block_size\": 999}");
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 -n 2", tu_bin(), dir), 1);
    expect_err("inkling.json: field draft_block_size");
    write_text(dir, "inkling.json", "{nope");
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 -n 2", tu_bin(), dir), 1);
    expect_err("inkling.json: invalid JSON");

    char d2[256];
    tiny_spec sp;
    tiny_default(&sp);
    sp.eos = 999999;
    assert_int_equal(tu_tmpdir(d2, sizeof d2, "robust_eos"), 0);
    assert_int_equal(tiny_write(d2, &sp), 0);
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 -n 2", tu_bin(), d2), 1);
    expect_err("eos_token_id = 999999 is outside the vocabulary");
}

static void test_options_that_do_not_apply(void **state)
{
    (void)state;
    char dir[256];
    tiny_model(dir, sizeof dir, "robust_opt", 0);
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 --system hi", tu_bin(), dir), 2);
    expect_err("--system does not apply with --prompt-ids");
    assert_int_equal(run("%s generate -m %s -p hi --raw --reasoning-effort high", tu_bin(), dir), 2);
    expect_err("--reasoning-effort does not apply with --raw");
    assert_int_equal(run("%s generate -m %s -p hi --reasoning-effort bogus", tu_bin(), dir), 2);
    expect_err("--reasoning-effort");
    expect_err("bogus");
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 --draft-kind none --draft-block-size 3", tu_bin(), dir), 2);
    expect_err("--draft-block-size needs a drafter");
    assert_int_equal(run("%s serve -m %s --draft-kind none --draft-block-size 3", tu_bin(), dir), 2);
    expect_err("--draft-block-size needs a drafter");
    /* the default drafts with the model's head where there is one; without one, drafting options are refused */
    char plain[256];
    tiny_spec sp;
    tiny_default(&sp);
    sp.mtp_depth = 0;
    assert_int_equal(tu_tmpdir(plain, sizeof plain, "robust_nohead"), 0);
    assert_int_equal(tiny_write(plain, &sp), 0);
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 -n 3", tu_bin(), plain), 0);
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 --draft-max 3", tu_bin(), plain), 2);
    expect_err("--draft-max needs a drafter");
    expect_err("has no MTP head");
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 --draft-kind mtp", tu_bin(), plain), 1);
    expect_err("no model.mtp.layers.* tensors");
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 --draft-block-size auto", tu_bin(), dir), 0);
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 --draft-block-size automatic", tu_bin(), dir), 2);
    /* one block-size range for the CLI and the server: 1..INK_MAX_BLOCK */
    char want[64];
    snprintf(want, sizeof want, "1..%d", INK_MAX_BLOCK);
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 --draft-block-size %d", tu_bin(), dir, INK_MAX_BLOCK + 1), 2);
    expect_err(want);
    assert_int_equal(run("%s serve -m %s --draft-block-size %d", tu_bin(), dir, INK_MAX_BLOCK + 1), 2);
    expect_err(want);
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2 -n 2 --draft-kind mtp --draft-block-size %d", tu_bin(), dir,
                         INK_MAX_BLOCK), 0);
    /* chat -p is refused with a pointer to what works */
    assert_int_equal(run("%s chat -m %s -p hello < /dev/null", tu_bin(), dir), 2);
    expect_err("inkling chat: -p is not a chat option");
    /* -n past the context: a warning with the numbers, not a silent clamp */
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2,3 -n 100 -c 32", tu_bin(), dir), 0);
    expect_err("3 prompt + 100 new tokens exceed the context of 32 tokens");
    /* -m names a missing directory */
    assert_int_equal(run("%s generate -m /nonexistent --prompt-ids 1", tu_bin()), 1);
    expect_err("-m /nonexistent: no such directory");
    assert_int_equal(run("%s info -m /nonexistent", tu_bin()), 1);
    expect_err("-m /nonexistent: no such directory");
    assert_int_equal(run("%s serve -m /nonexistent", tu_bin()), 1);
    expect_err("/nonexistent");
}

static void test_default_model_path_canonical(void **state)
{
    (void)state;
    if (run("env -u INKLING_MODEL %s info", tu_bin()) != 0) {
        print_message("no bundled default model: canonical-path check not run\n%s\n", err);
        fail();
    }
    assert_non_null(strstr(out, "model:        /"));
    assert_null(strstr(out, "/../"));
}

/* a U+0000 in a request body: the message says so, without jansson's flag name */
static void test_request_nul_message(void **state)
{
    (void)state;
    ink_server *S = calloc(1, sizeof *S);
    assert_non_null(S);
    const char body[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\\u0000b\"}]}";
    int st = 0;
    char *eb = NULL;
    assert_null(srv_parse_request(S, 0, body, sizeof body - 1, &st, &eb));
    assert_int_equal(st, 400);
    assert_non_null(eb);
    assert_non_null(strstr(eb, "strings must not contain U+0000"));
    assert_null(strstr(eb, "JSON_ALLOW_NUL"));
    free(eb);
    free(S);
}

/* --profile (issue 15): the same ids as without it; the table on stderr; in --stats-json a part
 * list whose times sum to no more than the decode time, with the matmul parts' weight bytes. */
static void test_profile(void **state)
{
    (void)state;
    char dir[256], sj[600];
    tiny_model(dir, sizeof dir, "prof", 1);
    snprintf(sj, sizeof sj, "%s/stats.json", dir);
    const char *bin = tu_bin();
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2,3 -n 24 --temp 0 --ids -t 1", bin, dir), 0);
    char plain[4096];
    snprintf(plain, sizeof plain, "%s", out);
    assert_int_equal(run("%s generate -m %s --prompt-ids 1,2,3 -n 24 --temp 0 --ids -t 1 --profile --stats-json %s", bin, dir, sj), 0);
    assert_string_equal(out, plain);
    expect_err("profile of decode");
    expect_err("routed experts");
    json_t *j = json_load_file(sj, 0, NULL);
    assert_non_null(j);
    json_t *pr = json_object_get(j, "profile"), *parts = json_object_get(pr, "parts");
    assert_true(json_array_size(parts) >= 10);
    double sum = 0, dec = json_real_value(json_object_get(j, "decode_s"));
    int bytes_parts = 0;
    size_t i;
    json_t *e;
    json_array_foreach(parts, i, e) {
        double sec = json_real_value(json_object_get(e, "seconds"));
        assert_true(sec >= 0);
        sum += sec;
        bytes_parts += json_integer_value(json_object_get(e, "weight_bytes")) > 0;
    }
    assert_true(bytes_parts >= 5); /* q k v r, o, router, experts, shared, dense, head */
    assert_true(sum > 0 && sum <= dec * 1.001 + 1e-6);
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_and_help),
        cmocka_unit_test(test_write_errors),
        cmocka_unit_test(test_empty_and_truncated_files),
        cmocka_unit_test(test_check_tensors),
        cmocka_unit_test(test_config_validation),
        cmocka_unit_test(test_options_that_do_not_apply),
        cmocka_unit_test(test_default_model_path_canonical),
        cmocka_unit_test(test_request_nul_message),
        cmocka_unit_test(test_profile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
