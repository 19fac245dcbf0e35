/* cli.h — subcommand entry points of the `inkling` binary. Each returns the process exit code:
 * 0 success, 1 bad input / runtime failure (message on stderr), 2 usage error. Only src/cli/ may
 * call exit() or read the environment. */
#ifndef INK_CLI_H
#define INK_CLI_H

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

#endif
