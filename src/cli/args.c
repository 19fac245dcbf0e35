/* args.c — see args.h. */
#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int arg_int(const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "inkling: %s: expected an integer in %ld..%ld, found '%s'\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int arg_float(const char *flag, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "inkling: %s: expected a number in %g..%g, found '%s'\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int arg_ids(const char *flag, const char *s, int32_t **out, int *n)
{
    int cap = 16, k = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    if (!v) return -1;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "inkling: %s: expected comma-separated non-negative token ids, found '%s'\n", flag, s);
            free(v);
            return -1;
        }
        if (k == cap) {
            int32_t *nv = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
        if (!*end) break;
        p = end + 1;
    }
    *out = v, *n = k;
    return 0;
}

const char *arg_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "inkling: option %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int cli_fail(const ink_err *e)
{
    fprintf(stderr, "inkling: %s: %s\n", ink_status_str(e->code), e->msg);
    return 1;
}
