/* config.c — config.json parsing and validation (see config.h; field table in inkling-text.md §1.2). */
#include "model/config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct ctx {
    const char *what; /* file name for messages */
    json_t *tc;       /* text config object */
    ink_err *err;
} ctx;

/* First present key among `names` (NULL-terminated); sets *which. JSON null counts as absent. */
static json_t *get_any(json_t *o, const char *const *names, const char **which)
{
    for (; *names; names++) {
        json_t *v = json_object_get(o, *names);
        if (v && !json_is_null(v)) {
            if (which) *which = *names;
            return v;
        }
    }
    return NULL;
}

#define NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Integer field: required (def ignored) or optional with default; range-checked. */
static int get_int(ctx *c, const char *const *names, int required, long long def, long long lo, long long hi,
                   int *out)
{
    const char *which = names[0];
    json_t *v = get_any(c->tc, names, &which);
    if (!v) {
        if (required)
            return ink_err_set(c->err, INK_E_FORMAT, "%s: required field text_config.%s is missing", c->what,
                               names[0]);
        *out = (int)def;
        return 0;
    }
    long long x;
    if (json_is_integer(v)) x = json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 1e15)
        x = (long long)json_real_value(v);
    else
        return ink_err_set(c->err, INK_E_FORMAT, "%s: field %s: expected an integer, found %s", c->what, which,
                           json_is_string(v) ? "a string" : json_is_boolean(v) ? "a boolean" : "another JSON type");
    if (x < lo || x > hi)
        return ink_err_set(c->err, INK_E_FORMAT, "%s: field %s = %lld is out of range (expected %lld..%lld)",
                           c->what, which, x, lo, hi);
    *out = (int)x;
    return 0;
}

static int get_num(ctx *c, const char *const *names, int required, double def, double lo, double hi, double *out,
                   int *present)
{
    const char *which = names[0];
    json_t *v = get_any(c->tc, names, &which);
    if (present) *present = v != NULL;
    if (!v) {
        if (required)
            return ink_err_set(c->err, INK_E_FORMAT, "%s: required field text_config.%s is missing", c->what,
                               names[0]);
        *out = def;
        return 0;
    }
    if (!json_is_number(v))
        return ink_err_set(c->err, INK_E_FORMAT, "%s: field %s: expected a number", c->what, which);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return ink_err_set(c->err, INK_E_FORMAT, "%s: field %s = %g is out of range (expected %g..%g)", c->what,
                           which, x, lo, hi);
    *out = x;
    return 0;
}

/* A fixed flag: absent is fine; present must equal the architecture's only value. */
static int check_bool(ctx *c, const char *name, int want)
{
    json_t *v = json_object_get(c->tc, name);
    if (!v) return 0;
    if (!json_is_boolean(v) || json_is_true(v) != want)
        return ink_err_set(c->err, INK_E_UNSUPPORTED, "%s: field %s must be %s for Inkling (found %s)", c->what,
                           name, want ? "true" : "false",
                           json_is_boolean(v) ? (json_is_true(v) ? "true" : "false") : "a non-boolean");
    return 0;
}

static int check_str(ctx *c, const char *name, const char *want)
{
    json_t *v = json_object_get(c->tc, name);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v) || strcmp(json_string_value(v), want))
        return ink_err_set(c->err, INK_E_UNSUPPORTED, "%s: field %s must be \"%s\" (found %s)", c->what, name, want,
                           json_is_string(v) ? json_string_value(v) : "a non-string");
    return 0;
}

static int int_list(ctx *c, json_t *o, const char *name, int *out, int cap, int lo, int hi, int *n)
{
    json_t *v = json_object_get(o, name);
    *n = 0;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_array(v))
        return ink_err_set(c->err, INK_E_FORMAT, "%s: field %s: expected a list of integers", c->what, name);
    if ((int)json_array_size(v) > cap)
        return ink_err_set(c->err, INK_E_FORMAT, "%s: field %s has %zu entries (at most %d)", c->what, name,
                           json_array_size(v), cap);
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_integer(e) || json_integer_value(e) < lo || json_integer_value(e) > hi)
            return ink_err_set(c->err, INK_E_FORMAT, "%s: field %s[%zu]: expected an integer in %d..%d", c->what,
                               name, i, lo, hi);
        out[(*n)++] = (int)json_integer_value(e);
    }
    return 1;
}

/* Refuses configs that are not an Inkling text model (Inkling 2, vision-only, other families). */
static int check_family(ctx *c, json_t *root, ink_config *cfg)
{
    json_t *a = json_object_get(root, "architectures");
    json_t *mt = json_object_get(root, "model_type");
    if (json_is_array(a) && json_is_string(json_array_get(a, 0)))
        snprintf(cfg->architecture, sizeof cfg->architecture, "%s", json_string_value(json_array_get(a, 0)));
    if (json_is_string(mt)) snprintf(cfg->model_type, sizeof cfg->model_type, "%s", json_string_value(mt));
    const char *arch = cfg->architecture, *type = cfg->model_type;
    if (strstr(arch, "Inkling2") || strstr(type, "inkling2") || strstr(type, "inkling_2"))
        return ink_err_set(c->err, INK_E_UNSUPPORTED,
                           "%s: %s (model_type %s) is Inkling 2, a different architecture; not supported", c->what,
                           *arch ? arch : "?", *type ? type : "?");
    if (!strcmp(type, "inkling_mtp"))
        return ink_err_set(c->err, INK_E_UNSUPPORTED,
                           "%s: model_type inkling_mtp is an mlx-vlm split MTP drafter (blocks.* tensors); it is not "
                           "supported: pass the original checkpoint directory (or config.json + mtp.safetensors) "
                           "as --draft-model", c->what);
    int ok_arch = !*arch || !strcmp(arch, "InklingForConditionalGeneration") || !strcmp(arch, "InklingForCausalLM");
    int ok_type = !*type || !strcmp(type, "inkling_mm_model") || !strcmp(type, "inkling_text") ||
                  !strcmp(type, "inkling");
    if (strstr(arch, "Vision") || strstr(type, "vision") || strstr(type, "audio"))
        return ink_err_set(c->err, INK_E_UNSUPPORTED,
                           "%s: %s (model_type %s) is a vision/audio-only model; inkling.c runs the text decoder",
                           c->what, *arch ? arch : "?", *type ? type : "?");
    if (!ok_arch || !ok_type || (!*arch && !*type))
        return ink_err_set(c->err, INK_E_UNSUPPORTED,
                           "%s: architecture '%s' (model_type '%s') is not an Inkling text model; expected "
                           "InklingForConditionalGeneration / inkling_mm_model or InklingForCausalLM",
                           c->what, *arch ? arch : "(none)", *type ? type : "(none)");
    return 0;
}

/* Dimensions, norm constants and the log-scaling fields, with the head-shape checks. */
static int parse_dims(ink_config *cfg, ctx *c)
{
    int e = 0;
    const int BIG = 1 << 20;
    e = e || get_int(c, NAMES("hidden_size"), 1, 0, 1, 65536, &cfg->hidden);
    e = e || get_int(c, NAMES("num_hidden_layers"), 1, 0, 1, INK_MAX_LAYERS, &cfg->n_layer);
    e = e || get_int(c, NAMES("vocab_size"), 1, 0, 1, 1 << 24, &cfg->vocab);
    e = e || get_int(c, NAMES("unpadded_vocab_size"), 0, cfg->vocab, 1, cfg->vocab, &cfg->vocab_unpadded);
    e = e || get_int(c, NAMES("num_attention_heads"), 1, 0, 1, 4096, &cfg->n_head);
    e = e || get_int(c, NAMES("num_key_value_heads"), 1, 0, 1, 4096, &cfg->n_kv);
    if (e) return c->err->code;
    e = e || get_int(c, NAMES("head_dim"), 0, cfg->hidden / cfg->n_head, 1, 4096, &cfg->head_dim);
    e = e || get_int(c, NAMES("swa_num_attention_heads"), 0, cfg->n_head, 1, 4096, &cfg->swa_n_head);
    e = e || get_int(c, NAMES("swa_num_key_value_heads"), 0, cfg->n_kv, 1, 4096, &cfg->swa_n_kv);
    e = e || get_int(c, NAMES("swa_head_dim"), 0, cfg->head_dim, 1, 4096, &cfg->swa_head_dim);
    e = e || get_int(c, NAMES("sliding_window_size", "sliding_window"), 1, 0, 1, BIG, &cfg->window);
    e = e || get_int(c, NAMES("rel_extent"), 1, 0, 1, BIG, &cfg->rel_extent);
    e = e || get_int(c, NAMES("d_rel"), 1, 0, 1, 1024, &cfg->d_rel);
    e = e || get_int(c, NAMES("sconv_kernel_size", "conv_kernel_size"), 1, 0, 1, 64, &cfg->conv_k);
    e = e || get_int(c, NAMES("model_max_length", "max_position_embeddings"), 0, 4096, 1, 1 << 30, &cfg->max_ctx);
    if (e) return c->err->code;
    double x;
    int present;
    e = e || get_num(c, NAMES("rms_norm_eps"), 1, 0, 1e-30, 0.5, &x, NULL);
    cfg->eps = (float)x;
    e = e || get_num(c, NAMES("logits_mup_width_multiplier", "embedding_multiplier"), 1, 0, 1e-6, 1e6, &x, NULL);
    cfg->mup = (float)x;
    e = e || get_num(c, NAMES("log_scaling_alpha"), 0, 0.1, -100, 100, &x, NULL);
    cfg->log_alpha = (float)x;
    e = e || get_num(c, NAMES("log_scaling_n_floor"), 0, 0, 1, 1e12, &cfg->log_floor, &present);
    if (e) return c->err->code;
    if (cfg->head_dim < 1 || cfg->swa_head_dim < 1)
        return ink_err_set(c->err, INK_E_FORMAT,
                           "%s: head_dim is absent and hidden_size / num_attention_heads = %d / %d gives no usable "
                           "default: set head_dim", c->what, cfg->hidden, cfg->n_head);
    if (cfg->n_head % cfg->n_kv || cfg->swa_n_head % cfg->swa_n_kv)
        return ink_err_set(c->err, INK_E_FORMAT,
                           "%s: query heads must be a multiple of KV heads (global %d/%d, sliding %d/%d)", c->what,
                           cfg->n_head, cfg->n_kv, cfg->swa_n_head, cfg->swa_n_kv);
    return INK_OK;
}

/* Flags fixed by the architecture must have their one value. */
static int check_fixed(ctx *c)
{
    json_t *tc = c->tc;
    int e = 0;
    e = e || check_str(c, "hidden_act", "silu") || check_str(c, "gate_activation", "sigmoid");
    e = e || check_bool(c, "use_embed_norm", 1) || check_bool(c, "use_sconv", 1) || check_bool(c, "use_gate_bias", 1) ||
        check_bool(c, "use_global_scale", 1) || check_bool(c, "norm_after_topk", 1) ||
        check_bool(c, "shared_expert_sink", 1) || check_bool(c, "q_bias", 0) || check_bool(c, "o_bias", 0) ||
        check_bool(c, "tie_word_embeddings", 0) || check_bool(c, "inference_moe_w13_interleaved", 1);
    if (e) return c->err->code;
    json_t *sc = json_object_get(tc, "final_logit_softcapping");
    if (sc && !json_is_null(sc))
        return ink_err_set(c->err, INK_E_UNSUPPORTED, "%s: final_logit_softcapping must be null for Inkling", c->what);
    return INK_OK;
}

/* Which layers slide (§1.3 rule 1) and which are MoE (rule 2). */
static int parse_layer_kinds(ink_config *cfg, ctx *c)
{
    json_t *tc = c->tc;
    int L = cfg->n_layer;
    json_t *lt = json_object_get(tc, "layer_types");
    int ids[INK_MAX_LAYERS];
    int n_ids = 0;
    if (json_is_array(lt)) {
        if ((int)json_array_size(lt) != L)
            return ink_err_set(c->err, INK_E_FORMAT, "%s: layer_types has %zu entries, num_hidden_layers is %d",
                               c->what, json_array_size(lt), L);
        for (int i = 0; i < L; i++) {
            const char *s = json_string_value(json_array_get(lt, (size_t)i));
            if (!s || (strcmp(s, "hybrid_sliding") && strcmp(s, "hybrid") && strcmp(s, "sliding_attention") &&
                       strcmp(s, "full_attention")))
                return ink_err_set(c->err, INK_E_FORMAT,
                                   "%s: layer_types[%d]: expected \"hybrid_sliding\" or \"hybrid\"", c->what, i);
            cfg->layers[i].sliding = !strcmp(s, "hybrid_sliding") || !strcmp(s, "sliding_attention");
        }
    } else {
        int r = int_list(c, tc, "local_layer_ids", ids, INK_MAX_LAYERS, 0, L - 1, &n_ids);
        if (r < 0) return r;
        if (c->err && c->err->code) return c->err->code;
        for (int i = 0; i < L; i++) cfg->layers[i].sliding = r ? 0 : (i + 1) % 6 != 0;
        for (int i = 0; i < n_ids; i++) cfg->layers[ids[i]].sliding = 1;
    }
    json_t *mt = json_object_get(tc, "mlp_layer_types");
    if (json_is_array(mt)) {
        if ((int)json_array_size(mt) != L)
            return ink_err_set(c->err, INK_E_FORMAT, "%s: mlp_layer_types has %zu entries, num_hidden_layers is %d",
                               c->what, json_array_size(mt), L);
        for (int i = 0; i < L; i++) {
            const char *s = json_string_value(json_array_get(mt, (size_t)i));
            if (!s || (strcmp(s, "dense") && strcmp(s, "sparse")))
                return ink_err_set(c->err, INK_E_FORMAT, "%s: mlp_layer_types[%d]: expected \"dense\" or \"sparse\"",
                                   c->what, i);
            cfg->layers[i].moe = !strcmp(s, "sparse");
        }
    } else {
        int dense_idx;
        if (get_int(c, NAMES("dense_mlp_idx", "first_k_dense_replace"), 0, 0, 0, L, &dense_idx)) return c->err->code;
        for (int i = 0; i < L; i++) cfg->layers[i].moe = i >= dense_idx;
    }
    for (int i = 0; i < L; i++) cfg->n_moe += cfg->layers[i].moe, cfg->n_sliding += cfg->layers[i].sliding;
    return INK_OK;
}

/* FFN widths (§1.3 rule 3), the expert counts, and each layer's attention shape. */
static int parse_widths(ink_config *cfg, ctx *c)
{
    json_t *tc = c->tc;
    int e = 0, L = cfg->n_layer;
    const int BIG = 1 << 20;
    double x = 0; /* route_scale reads it only where get_num stored it (else the parse fails) */
    int n_dense = L - cfg->n_moe;
    if (json_object_get(tc, "moe_intermediate_size")) {
        e = e || get_int(c, NAMES("intermediate_size"), n_dense > 0, 0, 1, BIG, &cfg->dense_inter);
        e = e || get_int(c, NAMES("moe_intermediate_size"), 1, 0, 1, BIG, &cfg->expert_inter);
    } else {
        e = e || get_int(c, NAMES("dense_intermediate_size"), n_dense > 0, 0, 1, BIG, &cfg->dense_inter);
        e = e || get_int(c, NAMES("intermediate_size"), cfg->n_moe > 0, 0, 1, BIG, &cfg->expert_inter);
    }
    if (e) return c->err->code;
    if (cfg->n_moe > 0) {
        e = e || get_int(c, NAMES("n_routed_experts", "num_local_experts"), 1, 0, 1, 65536, &cfg->n_expert);
        e = e || get_int(c, NAMES("num_experts_per_tok"), 1, 0, 1, INK_MAX_TOPK, &cfg->n_expert_used);
        e = e || get_int(c, NAMES("n_shared_experts"), 1, 0, 0, INK_MAX_SHARED, &cfg->n_shared);
        e = e || get_num(c, NAMES("route_scale", "routed_scaling_factor"), 1, 0, -1e6, 1e6, &x, NULL);
        cfg->route_scale = (float)x;
        if (e) return c->err->code;
        if (cfg->n_expert_used > cfg->n_expert)
            return ink_err_set(c->err, INK_E_FORMAT, "%s: num_experts_per_tok = %d exceeds n_routed_experts = %d",
                               c->what, cfg->n_expert_used, cfg->n_expert);
    }
    for (int i = 0; i < L; i++) {
        ink_layer_cfg *l = &cfg->layers[i];
        l->n_head = l->sliding ? cfg->swa_n_head : cfg->n_head;
        l->n_kv = l->sliding ? cfg->swa_n_kv : cfg->n_kv;
        l->head_dim = l->sliding ? cfg->swa_head_dim : cfg->head_dim;
        l->rel_extent = l->sliding ? cfg->window : cfg->rel_extent;
        l->window = l->sliding ? cfg->window : 0;
        l->log_scale = !l->sliding && cfg->log_floor > 0;
    }
    return INK_OK;
}

/* EOS: top level (int or list), else text_config. */
static int parse_eos(ink_config *cfg, json_t *root, ctx *c)
{
    json_t *tc = c->tc;
    json_t *eos = json_object_get(root, "eos_token_id");
    if (!eos || json_is_null(eos)) eos = json_object_get(tc, "eos_token_id");
    if (json_is_array(eos)) eos = json_array_get(eos, 0);
    cfg->eos = -1;
    if (json_is_integer(eos)) {
        json_int_t ev = json_integer_value(eos);
        if (ev < 0 || ev >= cfg->vocab)
            return ink_err_set(c->err, INK_E_FORMAT, "%s: eos_token_id = %lld is outside the vocabulary (0..%d)", c->what,
                               (long long)ev, cfg->vocab - 1);
        cfg->eos = (int)ev;
    }
    return INK_OK;
}

/* MTP fields (mtp_config, else text_config's num_mtp_layers ...) and the quantization marker. */
static int parse_mtp(ink_config *cfg, json_t *root, ctx *c)
{
    json_t *tc = c->tc;
    json_t *mc = json_object_get(root, "mtp_config");
    cfg->has_mtp_config = json_is_object(mc);
    ctx mctx = {c->what, json_is_object(mc) ? mc : tc, c->err};
    if (get_int(&mctx, json_is_object(mc) ? NAMES("num_nextn_predict_layers") : NAMES("num_mtp_layers"), 0, 0, 0, 64,
                &cfg->mtp_depth))
        return c->err->code;
    json_t *cpn = json_object_get(mctx.tc, "chain_hidden_post_norm");
    cfg->mtp_chain_post_norm = json_is_true(cpn);
    int r = int_list(&mctx, mctx.tc, json_is_object(mc) ? "local_layer_ids" : "mtp_local_layer_ids", cfg->mtp_local, 64,
                     0, 63, &cfg->mtp_n_local);
    if (r < 0 || (c->err && c->err->code)) return c->err->code;
    cfg->has_quant_config = json_object_get(root, "quantization") || json_object_get(root, "quantization_config");
    return INK_OK;
}

static int parse_root(ink_config *cfg, json_t *root, ctx *c)
{
    if (check_family(c, root, cfg)) return c->err ? c->err->code : INK_E_FORMAT;
    json_t *tc = json_object_get(root, "text_config");
    if (tc && !json_is_null(tc) && !json_is_object(tc))
        return ink_err_set(c->err, INK_E_FORMAT, "%s: text_config must be an object", c->what);
    if (!json_is_object(tc)) {
        if (json_object_get(root, "vision_config") && !json_object_get(root, "hidden_size"))
            return ink_err_set(c->err, INK_E_UNSUPPORTED, "%s: no text_config (vision-only checkpoint?)", c->what);
        tc = root, cfg->flat = 1;
    }
    c->tc = tc;
    int rc;
    if ((rc = parse_dims(cfg, c)) || (rc = check_fixed(c)) || (rc = parse_layer_kinds(cfg, c)) ||
        (rc = parse_widths(cfg, c)) || (rc = parse_eos(cfg, root, c)) || (rc = parse_mtp(cfg, root, c)))
        return rc;
    return INK_OK;
}

static int config_parse(ink_config *cfg, const char *text, size_t len, const char *what, ink_err *err);

int ink_config_parse(ink_config *cfg, const char *text, size_t len, const char *what, ink_err *out)
{
    /* parsed into a fresh ink_err: the parsers read err->code as their accumulator, so an error the
     * caller's ink_err still held from an earlier call would fail a valid config */
    ink_err local = {0}, *err = &local;
    int rc = config_parse(cfg, text, len, what, err);
    if (rc && out && !out->code) *out = local; /* the first error recorded wins, as ink_err_set keeps it */
    return rc;
}

static int config_parse(ink_config *cfg, const char *text, size_t len, const char *what, ink_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return ink_err_set(err, INK_E_FORMAT, "%s: invalid JSON at line %d column %d: %s", what, je.line, je.column,
                           je.text);
    int rc;
    if (!json_is_object(root)) rc = ink_err_set(err, INK_E_FORMAT, "%s: expected a JSON object", what);
    else {
        ctx c = {what, NULL, err};
        rc = parse_root(cfg, root, &c);
        if (rc == INK_OK && err->code) rc = err->code;
    }
    json_decref(root);
    return rc;
}

int ink_config_load(ink_config *cfg, const char *path, ink_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return ink_err_set(err, INK_E_IO, "%s: cannot open config: %s", path, "no such file or unreadable");
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 65536;
            if (cap > (64u << 20)) {
                free(buf);
                fclose(f);
                return ink_err_set(err, INK_E_FORMAT, "%s: config.json larger than 64 MiB", path);
            }
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return ink_err_set(err, INK_E_NOMEM, "out of memory");
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    fclose(f);
    int rc = ink_config_parse(cfg, buf, n, path, err);
    free(buf);
    return rc;
}

ink_layer_cfg ink_config_mtp_layer(const ink_config *c, int m)
{
    int sliding = 0;
    for (int i = 0; i < c->mtp_n_local; i++) sliding |= c->mtp_local[i] == m;
    ink_layer_cfg l = {0};
    l.sliding = sliding;
    l.moe = 0;
    l.n_head = sliding ? c->swa_n_head : c->n_head;
    l.n_kv = sliding ? c->swa_n_kv : c->n_kv;
    l.head_dim = sliding ? c->swa_head_dim : c->head_dim;
    l.rel_extent = sliding ? c->window : c->rel_extent;
    l.window = sliding ? c->window : 0;
    l.log_scale = !sliding && c->log_floor > 0;
    return l;
}
