/* args.h — small argument helpers shared by the subcommands (strict number parsing, id lists). */
#ifndef INK_CLI_ARGS_H
#define INK_CLI_ARGS_H

#include "inkling.h"

#include <stdint.h>

/* Parses a decimal integer in [lo, hi]; on failure prints "inkling: FLAG: ..." and returns -1. */
int arg_int(const char *flag, const char *s, long lo, long hi, long *out);
int arg_float(const char *flag, const char *s, double lo, double hi, double *out);
/* "1,2,3" -> malloc'd array (caller frees); prints an error and returns -1 on bad input. */
int arg_ids(const char *flag, const char *s, int32_t **out, int *n);
/* Fetches the value of a flag taking one argument; prints an error if missing. */
const char *arg_value(int argc, char **argv, int *i);

/* Prints "inkling: <status>: <message>" for a library error and returns exit code 1. */
int cli_fail(const ink_err *e);

#endif
