/* fuzz_config.c — config.json text through ink_config_parse (validation of every field, both
 * layouts, mtp_config, the quantization block's presence). Properties on success: the counts the
 * loader relies on are within their documented limits. (head_dim may be 0: a default of
 * hidden / num_attention_heads is not range-checked; not a crash, reported to the config owner.) */
#include "fuzz.h"

#include <stdlib.h>

#include "model/config.h"

int ink_fuzz_config(const uint8_t *data, size_t n)
{
    ink_config *c = calloc(1, sizeof *c);
    if (!c) return 0;
    ink_err err = {0};
    int rc = ink_config_parse(c, (const char *)data, n, "config.json", &err);
    if (rc) {
        if (!err.msg[0]) fz_fail("ink_config_parse failed (%d) without a message", rc);
        free(c);
        return 0;
    }
    if (c->n_layer <= 0 || c->n_layer > INK_MAX_LAYERS) fz_fail("n_layer %d accepted", c->n_layer);
    if (c->hidden <= 0 || c->vocab <= 0 || c->vocab_unpadded <= 0 || c->vocab_unpadded > c->vocab)
        fz_fail("hidden %d vocab %d/%d accepted", c->hidden, c->vocab, c->vocab_unpadded);
    if (c->n_sliding < 0 || c->n_sliding > c->n_layer || c->n_moe < 0 || c->n_moe > c->n_layer)
        fz_fail("layer counts %d/%d of %d", c->n_sliding, c->n_moe, c->n_layer);
    if (c->n_expert_used > INK_MAX_TOPK || c->n_shared > INK_MAX_SHARED || c->n_expert_used > c->n_expert)
        fz_fail("experts %d of %d, shared %d accepted", c->n_expert_used, c->n_expert, c->n_shared);
    if (c->mtp_n_local < 0 || c->mtp_n_local > 64) fz_fail("mtp_n_local %d", c->mtp_n_local);
    for (int i = 0; i < c->n_layer; i++) {
        const ink_layer_cfg *l = &c->layers[i];
        if (l->n_head <= 0 || l->n_kv <= 0 || l->head_dim < 0 || l->n_head % l->n_kv)
            fz_fail("layer %d: heads %d/%d dim %d accepted", i, l->n_head, l->n_kv, l->head_dim);
    }
    for (int m = 0; m < c->mtp_depth && m < 64; m++) {
        ink_layer_cfg l = ink_config_mtp_layer(c, m);
        if (l.n_head <= 0 || l.n_kv <= 0 || l.head_dim < 0) fz_fail("mtp layer %d geometry", m);
    }
    free(c);
    return 0;
}
