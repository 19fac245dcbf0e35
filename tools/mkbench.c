/* mkbench.c — writes the two generated benchmark models of `make bench` (docs/benchmarks.md):
 *   DIR/bf16  Inkling-architecture model, BF16, ~630 MB (memory-bound: ~80x the L3 of the project box)
 *   DIR/q4    the same logical weights, MLX affine 4-bit g64 (embedding included), ~180 MB
 * Skips a model whose config.json already exists. Usage: mkbench DIR */
#include "support/ckpt.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void spec(tiny_spec *s)
{
    tiny_default(s);
    s->hidden = 1024, s->n_layer = 6, s->vocab = 32000, s->vocab_unpadded = 31990;
    s->n_head = 8, s->n_kv = 2, s->head_dim = 128, s->swa_n_head = 8, s->swa_n_kv = 2, s->swa_head_dim = 128;
    s->window = 512, s->rel_extent = 64, s->d_rel = 16, s->conv_k = 4;
    s->dense_inter = 4096, s->expert_inter = 512, s->n_expert = 32, s->top_k = 4, s->n_shared = 1, s->dense_mlp_idx = 2;
    s->n_local = 5;
    for (int i = 0; i < 5; i++) s->local[i] = i;
    s->wscale = 0.03f, s->seed = 2026, s->bf16 = 1, s->naming = TINY_NAMES_PRESPLIT;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: mkbench DIR\n");
        return 2;
    }
    mkdir(argv[1], 0755);
    for (int q = 0; q < 2; q++) {
        char dir[4096], cfg[4200];
        snprintf(dir, sizeof dir, "%s/%s", argv[1], q ? "q4" : "bf16");
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        if (access(cfg, R_OK) == 0) continue;
        tiny_spec s;
        spec(&s);
        if (q) s.qbits = 4, s.qgroup = 64, s.qembed = 1;
        fprintf(stderr, "mkbench: writing %s\n", dir);
        if (tiny_write(dir, &s)) return 1;
    }
    return 0;
}
