/* buf.c — the growable byte buffer (see buf.h). Depends on libc only. */
#include "base/buf.h"

#include <stdlib.h>
#include <string.h>

void ink_buf_add(ink_buf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p, b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void ink_buf_str(ink_buf *b, const char *s) { ink_buf_add(b, s, strlen(s)); }

void ink_buf_free(ink_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}
