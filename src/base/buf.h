/*
 * buf.h — a growable byte buffer, always NUL-terminated once anything was added: the one the chat
 * renderer (tok/chat.c) and the server's bodies and streams (server/, as srv_buf) build text in.
 *
 * A failed allocation sets `oom` and makes every later append a no-op, so builders append freely and
 * check once at the end. Ownership: the caller owns the struct and b.p; ink_buf_free releases p and
 * zeroes the struct (b.p may also be taken over and freed with free()). Depends on libc only.
 */
#ifndef INK_BUF_H
#define INK_BUF_H

#include <stddef.h>

typedef struct ink_buf {
    char *p;      /* NULL until the first append */
    size_t n, cap;
    int oom;      /* an append failed: the content is incomplete */
} ink_buf;

void ink_buf_add(ink_buf *b, const char *s, size_t n); /* appends s[0..n) (s may be NULL when n is 0) */
void ink_buf_str(ink_buf *b, const char *s);           /* appends a NUL-terminated string */
void ink_buf_free(ink_buf *b);

#endif
