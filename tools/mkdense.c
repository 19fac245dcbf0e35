/* mkdense.c — writes the dense BF16 Inkling model of scripts/bench-llamacpp (docs/benchmarks.md):
 * the shape of a small llama-style dense model, so that llama.cpp can be given the same matrices:
 *   hidden 1024, 5 decoder layers, every one with a dense SwiGLU MLP of 4096, 8 query heads / 2 KV
 *   heads of 128, vocab 32000 (untied unembedding), no MTP head; layers 0-3 sliding (window 512),
 *   layer 4 global. Weights uniform in [-0.03, 0.03] (tests/support/ckpt.h), ~283 MB on disk,
 *   ~218 MB read per decoded token (the embedding is read one row at a time).
 * Skips DIR when DIR/config.json already exists. Usage: mkdense DIR */
#include "support/ckpt.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void spec(tiny_spec *s)
{
    tiny_default(s);
    s->hidden = 1024, s->n_layer = 5, s->vocab = 32000, s->vocab_unpadded = 0;
    s->n_head = 8, s->n_kv = 2, s->head_dim = 128, s->swa_n_head = 8, s->swa_n_kv = 2, s->swa_head_dim = 128;
    s->window = 512, s->rel_extent = 64, s->d_rel = 16, s->conv_k = 4;
    /* dense_mlp_idx = n_layer: every layer is dense (the MoE fields are then unused) */
    s->dense_inter = 4096, s->expert_inter = 512, s->n_expert = 32, s->top_k = 4, s->n_shared = 1, s->dense_mlp_idx = 5;
    s->n_local = 4;
    for (int i = 0; i < 4; i++) s->local[i] = i;
    s->wscale = 0.03f, s->seed = 2027, s->bf16 = 1, s->naming = TINY_NAMES_RELEASE;
}

int main(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: mkdense DIR\n");
        return 2;
    }
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", argv[1]);
    if (access(cfg, R_OK) == 0) return 0;
    tiny_spec s;
    spec(&s);
    fprintf(stderr, "mkdense: writing %s\n", argv[1]);
    return tiny_write(argv[1], &s) ? 1 : 0;
}
