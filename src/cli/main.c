/* main.c — `inkling` subcommand dispatch. */
#include "cli/cli.h"
#include "inkling.h"

#include <errno.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"info", cmd_info, "describe a model directory (family, variant, dtype, layers, KV memory)"},
    {"logits", cmd_logits, "write the logits of every prompt position to an .npy file"},
    {"generate", cmd_generate, "generate text or token ids from a prompt (plain or MTP speculative)"},
    {"chat", cmd_chat, "interactive multi-turn chat in the Inkling chat format"},
    {"download", cmd_download, "fetch model files from the Hugging Face Hub (resumable, verified)"},
    {"tokenize", cmd_tokenize, "print the token ids (or pieces) of a text"},
    {"detokenize", cmd_detokenize, "print the text of comma-separated token ids"},
    {"bench", cmd_bench, "measure the machine's ceilings, kernel roofline fractions, verify cost, tok/s"},
    {"quantize", cmd_quantize, "write a float checkpoint as MLX affine 2..8-bit or NVFP4 (mlx-community / release layout)"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server (chat, completions, SSE, MTP, metrics)"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: inkling COMMAND [options]   (inkling COMMAND --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].help);
}

/* Every command's output goes through stdout: a write error (full disk, closed pipe, /dev/full)
 * anywhere is an exit 1 with a message, never a silent 0. */
static int finish(int rc)
{
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        int en = errno;
        fprintf(stderr, "inkling: write error on standard output: %s\n", en ? strerror(en) : "I/O error");
        return rc ? rc : 1;
    }
    if (fflush(stderr) != 0 || ferror(stderr)) return rc ? rc : 1;
    return rc;
}

static int dispatch(int argc, char **argv);

int main(int argc, char **argv)
{
    int wrc, rc = cli_dist_begin(&argc, argv, &wrc);
    if (wrc >= 0) return finish(wrc); /* a rank > 0 of an expert-parallel job: done serving */
    if (rc) return finish(rc);
    return finish(cli_dist_end(dispatch(argc, argv)));
}

static int dispatch(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "-V") || !strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("inkling %s\n", INK_VERSION);
        if (cli_dist_build()) printf("expert parallel: %s (mpirun -np N inkling ..., docs/distributed.md)\n", cli_dist_build());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "inkling: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
