/* util.h — helpers shared by the tests: temporary directories and running the CLI. */
#ifndef INK_TEST_UTIL_H
#define INK_TEST_UTIL_H

#include <stddef.h>

/* Creates a fresh directory under tests/tmp/ (or $TMPDIR) and writes its path into buf. */
int tu_tmpdir(char *buf, size_t n, const char *tag);
/* Runs `cmd` through /bin/sh, captures stdout and stderr (each truncated to cap-1 bytes, NUL
 * terminated; either may be NULL), returns the exit status (128+signal if killed). */
int tu_run(const char *cmd, char *out, size_t out_cap, char *err, size_t err_cap);
/* The inkling binary under test: $INKLING_BIN (set by tests/run.sh) or ./inkling. */
const char *tu_bin(void);
/* max |a-b| over n floats and max |b|. */
float tu_max_abs_diff(const float *a, const float *b, size_t n, float *max_ref);

#endif
