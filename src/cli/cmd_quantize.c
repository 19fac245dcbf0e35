/* cmd_quantize.c — `inkling quantize`: a float checkpoint written as MLX affine (mlx-community
 * layout) or NVFP4 (release layout) with ink_quantize; progress on stderr. */
#include "cli/args.h"
#include "cli/cli.h"
#include "base/clock.h"
#include "inkling.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_RULES 64

static void quantize_usage(FILE *f)
{
    fprintf(f,
            "usage: inkling quantize -m SRC -o DST --bits B [--group-size G] [--mode affine|nvfp4]\n"
            "                        [--override GLOB=BITS[:GROUP]]... [--preset mixed_L_H] [--force]\n"
            "                        [--shard-size GB] [-t/--threads N] [-q/--quiet]\n"
            "  -m SRC            float checkpoint (BF16 release, transformers names, F32/F16); default: bundled model\n"
            "  -o DST            output directory (must be absent or empty unless --force)\n"
            "  --bits B          MLX affine bits: 2, 3, 4, 5, 6, 8 (default 4)\n"
            "  --group-size G    32, 64 or 128 (default 64)\n"
            "  --mode M          affine (mlx-community layout, default) or nvfp4 (routed experts, release layout)\n"
            "  --override G=B    modules whose path matches glob G get B bits (B may be 'float' to keep them;\n"
            "                    B:GROUP sets the group too); later overrides win\n"
            "  --preset P        an mlx-lm mixed recipe: mixed_2_6, mixed_3_4, mixed_3_5, mixed_3_6, mixed_3_8,\n"
            "                    mixed_4_6, mixed_4_8 (group 64; high bits for embeddings and some v/down projections)\n"
            "  --shard-size GB   largest backbone shard (default 5)\n"
            "  -t, --threads N   quantizing threads (default: online cores; the output is the same for any N)\n"
            "  --force           write into a non-empty DST (its safetensors files are replaced)\n");
}

/* GLOB=BITS[:GROUP], BITS a number or float/none/false/f32/bf16 (kept in float). */
static int parse_rule(const char *s, ink_quant_rule *r)
{
    const char *eq = strrchr(s, '=');
    if (!eq || eq == s || !eq[1]) {
        fprintf(stderr, "inkling quantize: --override %s: expected GLOB=BITS (e.g. '*.mlp.experts.*=3')\n", s);
        return -1;
    }
    static char globs[MAX_RULES][512];
    static int n_globs;
    if (n_globs >= MAX_RULES || (size_t)(eq - s) >= sizeof globs[0]) {
        fprintf(stderr, "inkling quantize: --override %s: too many overrides or too long a glob\n", s);
        return -1;
    }
    snprintf(globs[n_globs], sizeof globs[0], "%.*s", (int)(eq - s), s);
    r->glob = globs[n_globs++];
    const char *v = eq + 1;
    r->bits = 0, r->group = 0;
    if (!strcmp(v, "float") || !strcmp(v, "none") || !strcmp(v, "false") || !strcmp(v, "f32") || !strcmp(v, "bf16"))
        return 0;
    char *end;
    long b = strtol(v, &end, 10), g = 0;
    if (*end == ':') g = strtol(end + 1, &end, 10);
    if (*end || end == v || b < 2 || b > 8 || b == 7 || (g && g != 32 && g != 64 && g != 128)) {
        fprintf(stderr, "inkling quantize: --override %s: BITS must be 2, 3, 4, 5, 6, 8 or 'float', GROUP 32, 64 or 128\n", s);
        return -1;
    }
    r->bits = (int)b, r->group = (int)g;
    return 0;
}

typedef struct qprog {
    int quiet;
    double t0;
} qprog;

static void progress(void *ctx, const ink_quant_progress *p)
{
    qprog *q = ctx;
    if (q->quiet) return;
    double pct = p->total_in ? 100.0 * (double)p->bytes_in / (double)p->total_in : 100.0;
    if (p->index == p->count)
        fprintf(stderr, "inkling quantize: %d tensors, %.1f MB read, %.1f MB written (%.2fx smaller) in %.1f s\n", p->count,
                (double)p->total_in / 1e6, (double)p->total_out / 1e6,
                p->total_out ? (double)p->total_in / (double)p->total_out : 0.0, ink_now_s() - q->t0);
    else
        fprintf(stderr, "[%5d/%d] %5.1f%%  %-12s %s\n", p->index + 1, p->count, pct, p->what, p->name);
}

int cmd_quantize(int argc, char **argv)
{
    const char *src = NULL, *dst = NULL, *mode = "affine";
    ink_quant_rule rules[MAX_RULES];
    ink_quant_opts o = {0};
    qprog q = {0};
    long bits = 0, group = 0;
    double shard_gb = 5;
    o.rules = rules;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            quantize_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(src = arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(dst = arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--bits")) {
            if (!(v = arg_value(argc, argv, &i)) || arg_int(a, v, 2, 8, &bits)) return 2;
            if (bits == 7) return fprintf(stderr, "inkling quantize: --bits 7: MLX affine takes 2, 3, 4, 5, 6 or 8\n"), 2;
        } else if (!strcmp(a, "--group-size") || !strcmp(a, "--q-group-size")) {
            if (!(v = arg_value(argc, argv, &i)) || arg_int(a, v, 32, 128, &group)) return 2;
            if (group != 32 && group != 64 && group != 128)
                return fprintf(stderr, "inkling quantize: --group-size %ld: 32, 64 or 128\n", group), 2;
        } else if (!strcmp(a, "--mode")) {
            if (!(mode = arg_value(argc, argv, &i))) return 2;
            if (strcmp(mode, "affine") && strcmp(mode, "nvfp4"))
                return fprintf(stderr, "inkling quantize: --mode %s: affine or nvfp4\n", mode), 2;
        } else if (!strcmp(a, "--override")) {
            if (!(v = arg_value(argc, argv, &i))) return 2;
            if (o.n_rules >= MAX_RULES || parse_rule(v, &rules[o.n_rules])) return 2;
            o.n_rules++;
        } else if (!strcmp(a, "--preset")) {
            if (!(o.preset = arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--shard-size")) {
            if (!(v = arg_value(argc, argv, &i)) || arg_float(a, v, 1e-6, 1e6, &shard_gb)) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            long t;
            if (!(v = arg_value(argc, argv, &i)) || arg_int(a, v, 1, 1024, &t)) return 2;
            o.n_threads = (int)t;
        } else if (!strcmp(a, "--force")) {
            o.force = 1;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            q.quiet = 1;
        } else {
            fprintf(stderr, "inkling quantize: unknown option %s\n", a);
            quantize_usage(stderr);
            return 2;
        }
    }
    int nv = !strcmp(mode, "nvfp4");
    if (!dst) {
        fprintf(stderr, "inkling quantize: no output: pass -o DST\n");
        quantize_usage(stderr);
        return 2;
    }
    if (nv && (bits || group || o.preset || o.n_rules)) {
        fprintf(stderr, "inkling quantize: --mode nvfp4 is E2M1 in blocks of 16 with E4M3 scales: --bits, --group-size, "
                        "--preset and --override do not apply\n");
        return 2;
    }
    if (o.preset && bits) {
        fprintf(stderr, "inkling quantize: --preset %s sets the bits itself; drop --bits\n", o.preset);
        return 2;
    }
    if (!nv && !bits && !o.preset) {
        fprintf(stderr, "inkling quantize: pass --bits B (2, 3, 4, 5, 6, 8) or --preset\n");
        return 2;
    }
    src = ink_cli_model_dir(src);
    if (!src) {
        fprintf(stderr, "inkling quantize: no model: pass -m SRC (no bundled default model was found)\n");
        return 2;
    }
    if (arg_model_dir("-m", src)) return 1;
    o.mode = nv ? INK_QUANT_NVFP4 : INK_QUANT_AFFINE;
    o.bits = (int)bits, o.group = (int)group;
    o.shard_bytes = (uint64_t)(shard_gb * 1073741824.0);
    o.progress = progress, o.ctx = &q;
    q.t0 = ink_now_s();
    ink_err e = {0};
    if (ink_quantize(src, dst, &o, &e)) return cli_fail(&e);
    return 0;
}
