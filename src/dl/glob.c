/* glob.c — `--include` / `--exclude` pattern matching, formats.md §6.6 (the semantics of the Rust
 * `glob` crate with default options): '?' one character, '*' any run (crossing '/'), '**' a whole
 * component meaning any number of components, [set] [a-z] [!set] with ']' literal in first
 * position, no backslash escape, case-sensitive, leading '.' not special. Depends on libc only. */
#include "dl/hub.h"

#include <stdlib.h>
#include <string.h>

/* End of a bracket expression starting at p[i] == '[': index just past ']', or 0 if unterminated. */
static size_t class_end(const char *p, size_t i)
{
    size_t q = i + 1;
    if (p[q] == '!') q++;
    if (p[q] == ']') q++; /* literal ']' in first position */
    while (p[q] && p[q] != ']') q++;
    return p[q] == ']' ? q + 1 : 0;
}

static int class_has(const char *p, size_t i, size_t end, unsigned char c)
{
    size_t q = i + 1;
    int neg = 0, hit = 0;
    if (p[q] == '!') {
        neg = 1;
        q++;
    }
    size_t last = end - 1; /* index of the closing ']' */
    int first = 1;
    while (q < last) {
        unsigned char lo = (unsigned char)p[q];
        if (lo == ']' && !first) break;
        first = 0;
        if (q + 2 < last && p[q + 1] == '-') {
            unsigned char hi = (unsigned char)p[q + 2];
            if (c >= lo && c <= hi) hit = 1;
            q += 3;
        } else {
            if (c == lo) hit = 1;
            q++;
        }
    }
    return hit != neg;
}

int ink_glob_check(const char *pat, ink_err *err)
{
    if (!pat || !*pat) return ink_err_set(err, INK_E_INVAL, "empty glob pattern");
    for (size_t i = 0; pat[i];) {
        if (pat[i] == '[') {
            size_t e = class_end(pat, i);
            if (!e)
                return ink_err_set(err, INK_E_INVAL, "invalid glob '%s': unterminated '[' at offset %zu",
                                   pat, i);
            i = e;
        } else if (pat[i] == '*') {
            size_t run = 0;
            while (pat[i + run] == '*') run++;
            if (run > 2)
                return ink_err_set(err, INK_E_INVAL, "invalid glob '%s': '%.*s' (use '*' or '**')", pat,
                                   (int)run, pat + i);
            if (run == 2 && ((i > 0 && pat[i - 1] != '/') || (pat[i + 2] && pat[i + 2] != '/')))
                return ink_err_set(err, INK_E_INVAL,
                                   "invalid glob '%s': '**' must be a whole path component "
                                   "(like 'a/**/b' or '**/x')",
                                   pat);
            i += run;
        } else {
            i++;
        }
    }
    return INK_OK;
}

typedef struct gm {
    const char *p, *s;
    size_t pl, sl;
    unsigned char *failed; /* memo of (pi, si) pairs known not to match, or NULL */
} gm;

static int gmatch(gm *g, size_t pi, size_t si)
{
    unsigned char *memo = g->failed ? &g->failed[pi * (g->sl + 1) + si] : NULL;
    if (memo && *memo) return 0;
    const char *p = g->p, *s = g->s;
    int r = 0;
    while (1) {
        if (pi == g->pl) {
            r = si == g->sl;
            break;
        }
        char c = p[pi];
        if (c == '*' && p[pi + 1] == '*') {
            if (pi + 2 == g->pl) { /* trailing '**': everything left */
                r = 1;
                break;
            }
            /* "**" followed by '/': zero or more whole components */
            if (gmatch(g, pi + 3, si)) {
                r = 1;
                break;
            }
            for (size_t j = si; j < g->sl; j++)
                if (s[j] == '/' && gmatch(g, pi + 3, j + 1)) {
                    r = 1;
                    break;
                }
            break;
        }
        if (c == '*') {
            for (size_t j = si; j <= g->sl; j++)
                if (gmatch(g, pi + 1, j)) {
                    r = 1;
                    break;
                }
            break;
        }
        if (si == g->sl) break;
        if (c == '?') {
            pi++;
            si++;
            continue;
        }
        if (c == '[') {
            size_t e = class_end(p, pi);
            if (e) {
                if (!class_has(p, pi, e, (unsigned char)s[si])) break;
                pi = e;
                si++;
                continue;
            }
        }
        if (c != s[si]) break;
        pi++;
        si++;
    }
    if (!r && memo) *memo = 1;
    return r;
}

int ink_glob_match(const char *pat, const char *s)
{
    gm g = {pat, s, strlen(pat), strlen(s), NULL};
    size_t cells = (g.pl + 1) * (g.sl + 1);
    if (g.pl <= 4096 && g.sl <= 4096) g.failed = calloc(cells, 1); /* NULL: unmemoised, still right */
    int r = gmatch(&g, 0, 0);
    free(g.failed);
    return r;
}
