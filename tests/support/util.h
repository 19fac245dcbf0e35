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
/* 1 when the tests run under an emulator (INKLING_TEST_RUNNER set, `make cross-aarch64`): tests
 * whose cost is repetition (seeded chi-square runs, long generations) scale their counts down so
 * the whole suite fits in CI under qemu; what they assert stays the same. */
int tu_emulated(void);
/* 1 in a sanitizer build (ASan / UBSan / TSan: `make asan`, `make tsan`), where code runs 5-20x
 * slower and what is checked is memory and thread safety, not statistical power. */
int tu_sanitized(void);
/* n natively, n / div (at least lo) under an emulator, n / (div / 2) (at least lo) in a
 * sanitizer build. */
int tu_scaled(int n, int div, int lo);
/* max |a-b| over n floats and max |b|. */
float tu_max_abs_diff(const float *a, const float *b, size_t n, float *max_ref);

#endif
