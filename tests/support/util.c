/* util.c — see util.h. */
#include "support/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int tu_tmpdir(char *buf, size_t n, const char *tag)
{
    mkdir("tests/tmp", 0755);
    snprintf(buf, n, "tests/tmp/%s-XXXXXX", tag);
    return mkdtemp(buf) ? 0 : -1;
}

static void slurp(const char *path, char *buf, size_t cap)
{
    if (!buf || !cap) return;
    buf[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return;
    size_t r = fread(buf, 1, cap - 1, f);
    buf[r] = 0;
    fclose(f);
}

int tu_run(const char *cmd, char *out, size_t out_cap, char *err, size_t err_cap)
{
    char o[64], e[64];
    snprintf(o, sizeof o, "/tmp/ink-run-%d-o", (int)getpid());
    snprintf(e, sizeof e, "/tmp/ink-run-%d-e", (int)getpid());
    size_t n = strlen(cmd) + 160;
    char *full = malloc(n);
    if (!full) return -1;
    snprintf(full, n, "%s >%s 2>%s", cmd, o, e);
    int st = system(full);
    free(full);
    slurp(o, out, out_cap);
    slurp(e, err, err_cap);
    unlink(o);
    unlink(e);
    if (st == -1) return -1;
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    return 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

float tu_max_abs_diff(const float *a, const float *b, size_t n, float *max_ref)
{
    float m = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN propagates as a failure */
        if (fabsf(b[i]) > r) r = fabsf(b[i]);
    }
    if (max_ref) *max_ref = r;
    return m;
}

int tu_emulated(void)
{
    const char *r = getenv("INKLING_TEST_RUNNER");
    return r && *r;
}

int tu_sanitized(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return 1;
#else
    return 0;
#endif
}

int tu_scaled(int n, int div, int lo)
{
    if (!tu_emulated() && tu_sanitized() && div >= 2) div /= 2;
    else if (!tu_emulated()) return n;
    return n / div > lo ? n / div : lo;
}

const char *tu_bin(void)
{
    const char *b = getenv("INKLING_BIN");
    return b && *b ? b : "./inkling";
}
