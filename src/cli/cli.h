/* cli.h — subcommand entry points of the `inkling` binary. Each returns the process exit code:
 * 0 success, 1 bad input / runtime failure (message on stderr), 2 usage error. Only src/cli/ may
 * call exit() or read the environment. */
#ifndef INK_CLI_H
#define INK_CLI_H

#include "inkling.h"

#include <stdio.h>

int cmd_info(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_chat(int argc, char **argv);
/* The bundled default model's directory (static buffer), or NULL if none is found. */
const char *ink_default_model_dir(void);
/* What -m ARG names: an existing path as is; an owner/name Hub id resolved to the local download
 * cache; NULL ARG: the default model. Static buffer. */
const char *ink_cli_model_dir(const char *arg);
int cmd_download(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_quantize(int argc, char **argv);


/* Expert parallelism over MPI (dist.c, docs/distributed.md). cli_dist_begin, first thing in main:
 * strips `--parallel expert` from argv; under mpirun (or with that flag) starts MPI, checks the ranks'
 * checkpoints and, on ranks > 0, loads and serves their share of the experts, setting *worker_rc to
 * the exit code that rank must return (else -1). Returns 0 to go on, or an exit code. cli_dist_end
 * (after the command, with its exit code) stops the serving ranks, prints the job's report on rank 0
 * and finalizes MPI; returns rc. cli_dist_transport: the transport rank 0's model is opened with
 * (NULL: one process). cli_dist_note_model: records rank 0's exchange statistics before the model
 * is freed. */
int cli_dist_begin(int *argc, char **argv, int *worker_rc);
int cli_dist_end(int rc);
const ink_ep_transport *cli_dist_transport(void);
void cli_dist_note_model(const ink_model *m);
/* Rank 0, an expert-parallel run: the "expert_parallel" member of --stats-json (every rank's experts,
 * peak RSS and requests; asks the other ranks), one line ending in ",\n". Nothing in one process. */
void cli_dist_json(FILE *f, ink_model *m);
/* "MPI (<library version>)" when built with MPI (static string), else NULL. */
const char *cli_dist_build(void);

#endif
