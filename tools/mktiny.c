/* mktiny.c — writes a tiny random Inkling checkpoint in the release format (the demo model used until
 * a trained one is bundled, and a fixture generator for manual testing).
 *   mktiny DIR [--seed N] [--bf16] [--mtp N] [--shards N] [--layers N] [--hidden N] [--vocab N]
 * The layer pattern follows the releases: every 6th layer global, the first two dense. */
#include "support/ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: mktiny DIR [--seed N] [--bf16] [--mtp N] [--shards N] [--layers N] [--hidden N] [--vocab N]\n");
        return 2;
    }
    tiny_spec s;
    tiny_default(&s);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--bf16")) s.bf16 = 1;
        else if (!strcmp(a, "--seed") && has) s.seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--mtp") && has) s.mtp_depth = atoi(argv[++i]), s.mtp_file = 1;
        else if (!strcmp(a, "--shards") && has) s.n_shards = atoi(argv[++i]);
        else if (!strcmp(a, "--layers") && has) s.n_layer = atoi(argv[++i]);
        else if (!strcmp(a, "--hidden") && has) s.hidden = atoi(argv[++i]);
        else if (!strcmp(a, "--vocab") && has) s.vocab = atoi(argv[++i]), s.vocab_unpadded = s.vocab - 8;
        else {
            fprintf(stderr, "mktiny: bad option %s\n", a);
            return 2;
        }
    }
    if (s.n_layer < 1 || s.n_layer > 64 || s.hidden < 8 || s.vocab < 16 || s.mtp_depth < 0 || s.mtp_depth > 16) {
        fprintf(stderr, "mktiny: sizes out of range\n");
        return 2;
    }
    s.n_local = 0;
    for (int i = 0; i < s.n_layer; i++)
        if ((i + 1) % 6 != 0) s.local[s.n_local++] = i;
    if (s.dense_mlp_idx > s.n_layer) s.dense_mlp_idx = s.n_layer;
    s.n_mtp_local = 0;
    for (int m = 0; m < s.mtp_depth; m++)
        if (m % 2 == 0) s.mtp_local[s.n_mtp_local++] = m;
    if (tiny_write(argv[1], &s)) return 1;
    printf("wrote %s\n", argv[1]);
    return 0;
}
