/* test_loader.c — bad input ends in a clear error naming the file / tensor / field, never a crash:
 * malformed safetensors, index files, config.json fields, missing / misshapen tensors, the model
 * detection table (`inkling info`), and the CLI's exit codes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "inkling.h"
#include "load/safetensors.h"
#include "load/tdir.h"
#include "model/config.h"
#include "support/ckpt.h"
#include "support/util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- safetensors ------------------------------------------------------------------------ */

typedef struct bad_st {
    const char *header;
    int64_t len_delta;    /* header length field = strlen(header) + delta */
    uint64_t data_len;
    const char *expect;   /* substring of the error */
} bad_st;

static void test_safetensors_malformed(void **state)
{
    (void)state;
    static const bad_st cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 1000, 8, "past the end of the file"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 0, 8, "not a valid JSON object"},
        {"[1,2]", 0, 0, "does not start with '{'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 0, 8, "past the data buffer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         0, 8, "overlaps"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 0, 8, "gap of 4 bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 0, 8, "cover 4 data bytes"},
        {"{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 8, "unknown dtype 'Q4'"},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,8]}}", 0, 8, "need 6 bytes but data_offsets span 8"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
         0, 8, "not a valid JSON object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 0, 8, "shape[0] is not a non-negative"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 0, 8, "bad data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 0, 8, "'data_offsets' must be"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}", 0, 8, "overflows"},
        {"{\"a\":[1]}", 0, 0, "expected an object"},
        {"{\"__metadata__\":3}", 0, 0, "__metadata__"},
        {"{}", 100000001ll - 2, 0, "over 100 MB"},
    };
    char dir[256], path[300];
    assert_int_equal(tu_tmpdir(dir, sizeof dir, "st"), 0);
    snprintf(path, sizeof path, "%s/x.safetensors", dir);
    uint8_t data[16] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bad_st *c = &cases[i];
        assert_int_equal(tiny_write_raw(path, c->header, (uint64_t)((int64_t)strlen(c->header) + c->len_delta), data,
                                        c->data_len), 0);
        ink_st_file f;
        ink_err e = {0};
        int rc = ink_st_open(&f, path, &e);
        if (rc == INK_OK || !strstr(e.msg, c->expect) || !strstr(e.msg, path))
            fprintf(stderr, "case %zu: rc %d msg '%s' (want '%s')\n", i, rc, e.msg, c->expect);
        assert_int_equal(rc, INK_E_FORMAT);
        assert_non_null(strstr(e.msg, c->expect));
        assert_non_null(strstr(e.msg, path));
    }
    /* truncated files */
    FILE *f = fopen(path, "wb");
    fwrite("abc", 1, 3, f);
    fclose(f);
    ink_st_file st;
    ink_err e = {0};
    assert_int_equal(ink_st_open(&st, path, &e), INK_E_FORMAT);
    assert_non_null(strstr(e.msg, "truncated"));
    /* a valid file with a scalar, an empty tensor and unaligned data parses */
    const char *ok = "{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},\"z\":{\"dtype\":\"BF16\",\"shape\":[0,3],"
                     "\"data_offsets\":[4,4]},\"u\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[4,7]}}";
    assert_int_equal(tiny_write_raw(path, ok, strlen(ok), data, 7), 0);
    ink_err e2 = {0};
    assert_int_equal(ink_st_open(&st, path, &e2), INK_OK);
    assert_int_equal(st.n, 3);
    assert_int_equal(ink_st_map(&st, &e2), INK_OK);
    assert_non_null(ink_st_find(&st, "u"));
    assert_int_equal(ink_st_numel(ink_st_find(&st, "s")), 1);
    ink_st_close(&st);
    ink_st_close(NULL);
    /* read instead of mapped (--no-mmap): the same bytes, in memory of its own */
    assert_int_equal(ink_st_open(&st, path, &e2), INK_OK);
    st.read = 1;
    assert_int_equal(ink_st_map(&st, &e2), INK_OK);
    ink_st_file mp;
    assert_int_equal(ink_st_open(&mp, path, &e2), INK_OK);
    assert_int_equal(ink_st_map(&mp, &e2), INK_OK);
    assert_int_equal(st.size, mp.size);
    assert_memory_equal(st.map, mp.map, st.size);
    assert_ptr_equal(ink_st_find(&st, "u")->data, st.map + st.data_off + 4);
    ink_st_close(&mp);
    ink_st_close(&st);
    /* a file that shrank between the header's parse and the read: an error naming it, not a short read */
    assert_int_equal(ink_st_open(&st, path, &e2), INK_OK);
    assert_int_equal(truncate(path, (off_t)st.size - 3), 0);
    st.read = 1;
    ink_err e3 = {0};
    assert_int_equal(ink_st_map(&st, &e3), INK_E_IO);
    assert_null(st.map);
    assert_non_null(strstr(e3.msg, path));
    assert_non_null(strstr(e3.msg, "file ended at byte"));
    ink_st_close(&st);
}

static void test_scalar_formats(void **state)
{
    (void)state;
    assert_float_equal(ink_e4m3_to_f32(0x38), 1.0, 0);
    assert_float_equal(ink_e4m3_to_f32(0x40), 2.0, 0);
    assert_float_equal(ink_e4m3_to_f32(0x7e), 448.0, 0);
    assert_float_equal(ink_e4m3_to_f32(0x08), 1.0 / 64, 0);
    assert_float_equal(ink_e4m3_to_f32(0x01), 1.0 / 512, 0);
    assert_float_equal(ink_e4m3_to_f32(0xb8), -1.0, 0);
    assert_true(ink_e4m3_to_f32(0x7f) != ink_e4m3_to_f32(0x7f)); /* NaN */
    assert_float_equal(ink_f16_to_f32(0x3c00), 1.0, 0);
    assert_float_equal(ink_f16_to_f32(0x0001), 5.960464477539063e-08, 0);
    assert_int_equal(ink_f32_to_f16(1.0f), 0x3c00);
    assert_float_equal(ink_bf16_to_f32(0x3f80), 1.0, 0);
    assert_int_equal(ink_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(ink_f32_to_bf16(1.00390625f), 0x3f80); /* tie rounds to even */
    assert_int_equal(ink_f32_to_bf16(1.01171875f), 0x3f82);
    for (uint32_t h = 0; h < 65536; h += 7) { /* f16 round trip of every finite value sampled */
        float f = ink_f16_to_f32((uint16_t)h);
        if (f == f && ((h >> 10) & 31) != 31) assert_int_equal(ink_f32_to_f16(f), h);
    }
}

/* ---- directories, index files ---------------------------------------------------------- */

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int open_err(const char *dir, ink_err *e)
{
    ink_model *m = NULL;
    memset(e, 0, sizeof *e);
    int rc = ink_model_open(&m, dir, NULL, e);
    ink_model_free(m);
    return rc;
}

static void test_index_files(void **state)
{
    (void)state;
    tiny_spec sp;
    tiny_default(&sp);
    sp.n_shards = 3, sp.mtp_depth = 1, sp.mtp_file = 1;
    char dir[256], p[400];
    assert_int_equal(tu_tmpdir(dir, sizeof dir, "idx"), 0);
    assert_int_equal(tiny_write(dir, &sp), 0);
    ink_err e;
    assert_int_equal(open_err(dir, &e), INK_OK);
    /* the drafter directory view opens only mtp.safetensors: corrupt every shard, it still works */
    for (int i = 1; i <= 3; i++) {
        snprintf(p, sizeof p, "%s/model-%05d-of-00003.safetensors", dir, i);
        write_text(p, "garbage that is not a safetensors file");
    }
    ink_tdir td;
    memset(&e, 0, sizeof e);
    assert_int_equal(ink_tdir_open(&td, dir, INK_TDIR_MTP, &e), INK_OK);
    assert_int_equal(td.n_files, 1);
    assert_non_null(ink_tdir_find(&td, "model.mtp.layers.0.input_proj.weight"));
    ink_tdir_close(&td);
    /* the target view now fails on the corrupted shard, naming it */
    assert_int_equal(open_err(dir, &e), INK_E_FORMAT);
    assert_non_null(strstr(e.msg, "model-00001-of-00003.safetensors"));
    /* missing shard: an error listing it */
    assert_int_equal(tu_tmpdir(dir, sizeof dir, "idx"), 0);
    assert_int_equal(tiny_write(dir, &sp), 0);
    snprintf(p, sizeof p, "%s/model-00002-of-00003.safetensors", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/mtp.safetensors", dir);
    unlink(p);
    assert_int_equal(open_err(dir, &e), INK_E_IO);
    assert_non_null(strstr(e.msg, "missing"));
    assert_non_null(strstr(e.msg, "model-00002-of-00003.safetensors"));
    /* an index naming a path outside the directory */
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    write_text(p, "{\"weight_map\":{\"model.llm.embed.weight\":\"../../etc/passwd\"}}");
    assert_int_equal(open_err(dir, &e), INK_E_FORMAT);
    assert_non_null(strstr(e.msg, "plain file name"));
    write_text(p, "{\"weight_map\": [1, 2]");
    assert_int_equal(open_err(dir, &e), INK_E_FORMAT);
    assert_non_null(strstr(e.msg, "model.safetensors.index.json"));
    /* a tensor in two files */
    assert_int_equal(tu_tmpdir(dir, sizeof dir, "dup"), 0);
    sp.n_shards = 1, sp.mtp_depth = 0;
    assert_int_equal(tiny_write(dir, &sp), 0);
    char cmd[800];
    snprintf(cmd, sizeof cmd, "cp %s/model.safetensors %s/copy.safetensors", dir, dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(open_err(dir, &e), INK_E_FORMAT);
    assert_non_null(strstr(e.msg, "appears in two files"));
    /* no model directory at all */
    assert_int_equal(open_err("tests/tmp/does-not-exist", &e), INK_E_IO);
    assert_non_null(strstr(e.msg, "does-not-exist"));
}

/* ---- config.json fields ---------------------------------------------------------------- */

static int config_with(const char *field, json_t *value, ink_config *c, ink_err *e)
{
    tiny_spec sp;
    tiny_default(&sp);
    char dir[256], p[400];
    assert_int_equal(tu_tmpdir(dir, sizeof dir, "cfg"), 0);
    assert_int_equal(tiny_write(dir, &sp), 0);
    snprintf(p, sizeof p, "%s/config.json", dir);
    json_t *root = json_load_file(p, 0, NULL);
    json_t *tc = json_object_get(root, "text_config");
    if (value) json_object_set_new(tc, field, value);
    else json_object_del(tc, field);
    char *txt = json_dumps(root, 0);
    json_decref(root);
    memset(e, 0, sizeof *e);
    int rc = ink_config_parse(c, txt, strlen(txt), "config.json", e);
    free(txt);
    return rc;
}

static void test_config_fields(void **state)
{
    (void)state;
    ink_config *c = malloc(sizeof *c);
    ink_err e;
    struct { const char *field; json_t *v; const char *expect; } cases[] = {
        {"hidden_size", NULL, "text_config.hidden_size is missing"},
        {"hidden_size", json_integer(0), "hidden_size = 0 is out of range"},
        {"num_hidden_layers", json_integer(-3), "num_hidden_layers = -3 is out of range"},
        {"num_attention_heads", json_string("four"), "expected an integer, found a string"},
        {"num_key_value_heads", json_integer(3), "multiple of KV heads"},
        {"rms_norm_eps", NULL, "rms_norm_eps is missing"},
        {"rms_norm_eps", json_real(-1), "rms_norm_eps = -1 is out of range"},
        {"unpadded_vocab_size", json_integer(1000), "unpadded_vocab_size = 1000 is out of range"},
        {"local_layer_ids", json_pack("[i,i]", 0, 9), "local_layer_ids[1]"},
        {"num_experts_per_tok", json_integer(9), "exceeds n_routed_experts"},
        {"gate_activation", json_string("softmax"), "gate_activation must be \"sigmoid\""},
        {"use_sconv", json_false(), "use_sconv must be true"},
        {"tie_word_embeddings", json_true(), "tie_word_embeddings must be false"},
        {"final_logit_softcapping", json_real(30), "final_logit_softcapping must be null"},
        {"layer_types", json_pack("[s]", "hybrid"), "layer_types has 1 entries"},
        {"sliding_window_size", NULL, "sliding_window_size is missing"},
        {"logits_mup_width_multiplier", NULL, "logits_mup_width_multiplier is missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = config_with(cases[i].field, cases[i].v, c, &e);
        if (rc == INK_OK || !strstr(e.msg, cases[i].expect))
            fprintf(stderr, "case %s: rc %d '%s' (want '%s')\n", cases[i].field, rc, e.msg, cases[i].expect);
        assert_true(rc != INK_OK);
        assert_non_null(strstr(e.msg, cases[i].expect));
    }
    /* HF spellings resolve like the native ones */
    assert_int_equal(config_with("sliding_window_size", NULL, c, &e) != INK_OK, 1);
    tiny_spec sp;
    tiny_default(&sp);
    const char *hf = "{\"architectures\":[\"InklingForCausalLM\"],\"model_type\":\"inkling_text\",\"hidden_size\":64,"
                     "\"num_hidden_layers\":6,\"vocab_size\":128,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
                     "\"head_dim\":16,\"sliding_window\":8,\"rel_extent\":16,\"d_rel\":4,\"conv_kernel_size\":4,"
                     "\"rms_norm_eps\":1e-6,\"embedding_multiplier\":4.0,\"intermediate_size\":96,"
                     "\"moe_intermediate_size\":32,\"num_local_experts\":8,\"num_experts_per_tok\":2,"
                     "\"n_shared_experts\":2,\"route_scale\":8.0,"
                     "\"layer_types\":[\"hybrid_sliding\",\"hybrid_sliding\",\"hybrid_sliding\",\"hybrid_sliding\","
                     "\"hybrid_sliding\",\"hybrid\"],\"mlp_layer_types\":[\"dense\",\"dense\",\"sparse\",\"sparse\","
                     "\"sparse\",\"sparse\"]}";
    memset(&e, 0, sizeof e);
    assert_int_equal(ink_config_parse(c, hf, strlen(hf), "hf.json", &e), INK_OK);
    assert_int_equal(c->flat, 1);
    assert_int_equal(c->window, 8);
    assert_int_equal(c->dense_inter, 96);
    assert_int_equal(c->expert_inter, 32);
    assert_int_equal(c->n_sliding, 5);
    assert_int_equal(c->n_moe, 4);
    assert_int_equal(c->layers[5].sliding, 0);
    assert_int_equal(c->layers[1].moe, 0);
    assert_float_equal(c->mup, 4.0, 0);
    /* default layer pattern (every 6th layer global) when neither list is given */
    json_t *root = json_loads(hf, 0, NULL);
    json_object_del(root, "layer_types");
    char *txt = json_dumps(root, 0);
    json_decref(root);
    assert_int_equal(ink_config_parse(c, txt, strlen(txt), "hf.json", &e), INK_OK);
    free(txt);
    assert_int_equal(c->n_sliding, 5);
    assert_int_equal(c->layers[5].sliding, 0);
    /* head_dim absent and hidden_size < heads: no usable default (found by the config fuzzer) */
    root = json_loads(hf, 0, NULL);
    json_object_del(root, "head_dim");
    json_object_set_new(root, "hidden_size", json_integer(2));
    txt = json_dumps(root, 0);
    json_decref(root);
    memset(&e, 0, sizeof e);
    assert_int_equal(ink_config_parse(c, txt, strlen(txt), "hf.json", &e), INK_E_FORMAT);
    assert_non_null(strstr(e.msg, "set head_dim"));
    free(txt);
    const char *bad = "{\"text_config\": {";
    memset(&e, 0, sizeof e);
    assert_int_equal(ink_config_parse(c, bad, strlen(bad), "broken.json", &e), INK_E_FORMAT);
    assert_non_null(strstr(e.msg, "broken.json: invalid JSON"));
    /* an ink_err that still holds that error does not fail a valid config (the parsers used the
     * caller's err->code as their accumulator), and keeps its first error */
    assert_int_equal(ink_config_parse(c, hf, strlen(hf), "hf.json", &e), INK_OK);
    assert_int_equal(c->n_moe, 4);
    assert_non_null(strstr(e.msg, "broken.json: invalid JSON"));
    free(c);
}

/* ---- detection table ------------------------------------------------------------------ */

static void detect_with_root(const char *key, json_t *value, ink_model_info *info, int *rc)
{
    tiny_spec sp;
    tiny_default(&sp);
    sp.mtp_depth = 2, sp.n_mtp_local = 1, sp.mtp_file = 1;
    char dir[256], p[400];
    assert_int_equal(tu_tmpdir(dir, sizeof dir, "det"), 0);
    assert_int_equal(tiny_write(dir, &sp), 0);
    if (key) {
        snprintf(p, sizeof p, "%s/config.json", dir);
        json_t *root = json_load_file(p, 0, NULL);
        json_object_set_new(root, key, value);
        json_dump_file(root, p, 0);
        json_decref(root);
    }
    ink_err e = {0};
    *rc = ink_model_detect(dir, info, &e);
}

static void test_detection_table(void **state)
{
    (void)state;
    ink_model_info info;
    int rc;
    detect_with_root(NULL, NULL, &info, &rc);
    assert_int_equal(rc, INK_OK);
    assert_int_equal(info.supported, 1);
    assert_string_equal(info.family, "Inkling");
    assert_string_equal(info.names, "release");
    assert_string_equal(info.quant, "none");
    assert_string_equal(info.dtype, "F32");
    assert_int_equal(info.n_layer, 6);
    assert_int_equal(info.n_global, 1);
    assert_int_equal(info.n_moe, 4);
    assert_int_equal(info.n_expert, 8);
    assert_int_equal(info.mtp_depth_config, 2);
    assert_int_equal(info.mtp_depth_tensors, 2);
    detect_with_root("architectures", json_pack("[s]", "Inkling2ForConditionalGeneration"), &info, &rc);
    assert_int_equal(rc, INK_OK);
    assert_int_equal(info.supported, 0);
    assert_non_null(strstr(info.reason, "Inkling 2"));
    detect_with_root("architectures", json_pack("[s]", "LlamaForCausalLM"), &info, &rc);
    assert_int_equal(info.supported, 0);
    assert_non_null(strstr(info.reason, "LlamaForCausalLM"));
    detect_with_root("model_type", json_string("inkling_vision"), &info, &rc);
    assert_int_equal(info.supported, 0);
    assert_non_null(strstr(info.reason, "vision"));
}

/* ---- tensors that disagree with the config, through the CLI ----------------------------- */

static void test_cli_errors(void **state)
{
    (void)state;
    tiny_spec sp;
    tiny_default(&sp);
    char dir[256], cmd[1200], out[4096], err[4096], p[400];
    assert_int_equal(tu_tmpdir(dir, sizeof dir, "cli"), 0);
    assert_int_equal(tiny_write(dir, &sp), 0);
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1,2,500 -n 2 --ids", tu_bin(), dir);
    int rc = tu_run(cmd, out, sizeof out, err, sizeof err);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err, "token id 500"));
    assert_string_equal(out, "");
    snprintf(cmd, sizeof cmd, "%s generate -m tests/tmp/nope --prompt-ids 1 -n 2 --ids", tu_bin());
    assert_int_equal(tu_run(cmd, out, sizeof out, err, sizeof err), 1);
    assert_non_null(strstr(err, "tests/tmp/nope"));
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1,x -n 2", tu_bin(), dir);
    assert_int_equal(tu_run(cmd, out, sizeof out, err, sizeof err), 2);
    snprintf(cmd, sizeof cmd, "%s logits -m %s --prompt-ids 1,2", tu_bin(), dir);
    assert_int_equal(tu_run(cmd, out, sizeof out, err, sizeof err), 2);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p hello", tu_bin(), dir); /* no tokenizer.json there */
    assert_int_equal(tu_run(cmd, out, sizeof out, err, sizeof err), 1);
    assert_non_null(strstr(err, "tokenizer.json"));
    snprintf(cmd, sizeof cmd, "%s info -m %s -c 100", tu_bin(), dir);
    assert_int_equal(tu_run(cmd, out, sizeof out, err, sizeof err), 0);
    assert_non_null(strstr(out, "supported:    yes"));
    assert_non_null(strstr(out, "context:      100 tokens"));
    /* a config that promises more layers than the file holds: the missing tensor is named */
    snprintf(p, sizeof p, "%s/config.json", dir);
    json_t *root = json_load_file(p, 0, NULL);
    json_object_set_new(json_object_get(root, "text_config"), "num_hidden_layers", json_integer(7));
    json_dump_file(root, p, 0);
    snprintf(cmd, sizeof cmd, "%s logits -m %s --prompt-ids 1,2 -o %s/o.npy", tu_bin(), dir, dir);
    assert_int_equal(tu_run(cmd, out, sizeof out, err, sizeof err), 1);
    assert_non_null(strstr(err, "required tensor model.llm.layers.6.attn_norm.weight is missing"));
    /* fewer layers than the file holds */
    json_object_set_new(json_object_get(root, "text_config"), "num_hidden_layers", json_integer(5));
    json_object_set_new(json_object_get(root, "text_config"), "local_layer_ids", json_pack("[i,i,i,i,i]", 0, 1, 2, 3, 4));
    json_dump_file(root, p, 0);
    assert_int_equal(tu_run(cmd, out, sizeof out, err, sizeof err), 1);
    assert_non_null(strstr(err, "belongs to layer 5"));
    /* a width that disagrees with the tensors: expected vs found */
    json_object_set_new(json_object_get(root, "text_config"), "num_hidden_layers", json_integer(6));
    json_object_set_new(json_object_get(root, "text_config"), "local_layer_ids", json_pack("[i,i,i,i,i]", 0, 1, 2, 3, 4));
    json_object_set_new(json_object_get(root, "text_config"), "intermediate_size", json_integer(48));
    json_dump_file(root, p, 0);
    assert_int_equal(tu_run(cmd, out, sizeof out, err, sizeof err), 1);
    assert_non_null(strstr(err, "expected shape [8, 96, 64] from config.json, found [8, 64, 64]"));
    json_decref(root);
    /* bad JSON in config.json */
    write_text(p, "{\"text_config\": {\"hidden_size\": 64,,}");
    assert_int_equal(tu_run(cmd, out, sizeof out, err, sizeof err), 1);
    assert_non_null(strstr(err, "config.json: invalid JSON"));
    /* a truncated weights file */
    assert_int_equal(tu_tmpdir(dir, sizeof dir, "cli"), 0);
    assert_int_equal(tiny_write(dir, &sp), 0);
    snprintf(cmd, sizeof cmd, "truncate -s 5000 %s/model.safetensors", dir);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s info -m %s", tu_bin(), dir);
    assert_int_equal(tu_run(cmd, out, sizeof out, err, sizeof err), 1);
    assert_non_null(strstr(err, "model.safetensors"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_safetensors_malformed),
        cmocka_unit_test(test_scalar_formats),
        cmocka_unit_test(test_index_files),
        cmocka_unit_test(test_config_fields),
        cmocka_unit_test(test_detection_table),
        cmocka_unit_test(test_cli_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
