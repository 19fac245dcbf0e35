/* npy.c — see npy.h. */
#include "support/npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int npy_load(const char *path, npy *a)
{
    memset(a, 0, sizeof *a);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "npy: cannot open %s\n", path);
        return -1;
    }
    unsigned char pre[10];
    char hdr[1024];
    int ok = fread(pre, 1, 10, f) == 10 && pre[0] == 0x93 && !memcmp(pre + 1, "NUMPY", 5) && pre[6] == 1;
    size_t hl = ok ? (size_t)(pre[8] | pre[9] << 8) : 0;
    ok = ok && hl < sizeof hdr && fread(hdr, 1, hl, f) == hl;
    if (ok) hdr[hl] = 0;
    ok = ok && strstr(hdr, "'fortran_order': False");
    a->is_int = ok && strstr(hdr, "'<i4'") != NULL;
    ok = ok && (a->is_int || strstr(hdr, "'<f4'"));
    char *sh = ok ? strstr(hdr, "'shape': (") : NULL;
    a->n = 1;
    if (sh) {
        char *p = sh + 10;
        while (*p && *p != ')') {
            char *end;
            long long v = strtoll(p, &end, 10);
            if (end == p) break;
            if (a->ndim < 4) a->shape[a->ndim++] = v;
            a->n *= v;
            p = end;
            while (*p == ',' || *p == ' ') p++;
        }
    }
    void *d = ok && sh ? malloc((size_t)(a->n ? a->n : 1) * 4) : NULL;
    ok = d && fread(d, 4, (size_t)a->n, f) == (size_t)a->n;
    fclose(f);
    if (!ok) {
        free(d);
        fprintf(stderr, "npy: %s: unsupported or truncated\n", path);
        return -1;
    }
    if (a->is_int) a->i = d;
    else a->f = d;
    return 0;
}

void npy_free(npy *a)
{
    free(a->f);
    free(a->i);
    memset(a, 0, sizeof *a);
}
