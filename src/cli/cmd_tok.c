/* cmd_tok.c — `inkling tokenize` and `inkling detokenize` (docs/cli.md). */
#include "cli/cli.h"
#include "tok/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void tokenize_usage(FILE *f)
{
    fprintf(f, "usage: inkling tokenize -m DIR [--special] [--pieces] (TEXT | -f FILE)\n"
               "  -m, --model DIR   directory with tokenizer.json (+ tokenizer_config.json)\n"
               "  --special         match special-token spellings such as <|endoftext|> (default: plain text)\n"
               "  --pieces          print the tokens' byte-level spellings as a JSON array instead of ids\n"
               "  -f, --file FILE   read the text from FILE ('-' = stdin) instead of the argument\n");
}

static void detokenize_usage(FILE *f)
{
    fprintf(f, "usage: inkling detokenize -m DIR --ids 1,2,3 [--skip-special] [--raw]\n"
               "  -m, --model DIR   directory with tokenizer.json (+ tokenizer_config.json)\n"
               "  --ids LIST        comma-separated token ids\n"
               "  --skip-special    drop special tokens from the text\n"
               "  --raw             print exactly the decoded bytes (no newline, no U+FFFD repair)\n");
}

static int read_all(const char *path, char **out, size_t *len)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "inkling tokenize: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *nb = realloc(b, cap * 2);
        if (!nb)
            free(b);
        b = nb;
        cap *= 2;
    }
    int bad = !b || ferror(f);
    if (f != stdin)
        fclose(f);
    if (bad) {
        free(b);
        fprintf(stderr, "inkling tokenize: %s: read error\n", path);
        return -1;
    }
    *out = b;
    *len = n;
    return 0;
}

/* Byte-level spelling (GPT-2 alphabet) of raw bytes, JSON-escaped, to stdout. */
static void put_byte_level(const unsigned char *s, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned b = s[i], cp;
        if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae)
            cp = b;
        else {
            unsigned k = 0;
            for (unsigned x = 0; x < b; x++)
                if (!((x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) || x >= 0xae))
                    k++;
            cp = 256 + k;
        }
        if (cp == '"' || cp == '\\') {
            putchar('\\');
            putchar((int)cp);
        } else if (cp < 0x80)
            putchar((int)cp);
        else {
            putchar((int)(0xc0 | (cp >> 6)));
            putchar((int)(0x80 | (cp & 0x3f)));
        }
    }
    putchar('"');
}

static void put_json_text(const char *s, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

int cmd_tokenize(int argc, char **argv)
{
    const char *dir = NULL, *file = NULL, *text = NULL;
    int special = 0, pieces = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            tokenize_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "inkling tokenize: %s needs a value\n", a);
                tokenize_usage(stderr);
                return 2;
            }
            if (a[1] == 'm' || a[2] == 'm')
                dir = argv[++i];
            else
                file = argv[++i];
        } else if (!strcmp(a, "--special"))
            special = 1;
        else if (!strcmp(a, "--pieces"))
            pieces = 1;
        else if (!strcmp(a, "--")) {
            if (i + 1 < argc && !text)
                text = argv[++i];
            if (i + 1 < argc) {
                fprintf(stderr, "inkling tokenize: give the text as one argument (quote it)\n");
                return 2;
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "inkling tokenize: unknown option '%s'\n", a);
            tokenize_usage(stderr);
            return 2;
        } else if (text) {
            fprintf(stderr, "inkling tokenize: give the text as one argument (quote it)\n");
            return 2;
        } else
            text = a;
    }
    if (!dir || (!text && !file) || (text && file)) {
        fprintf(stderr, "inkling tokenize: %s\n",
                !dir ? "-m DIR is required" : text ? "give TEXT or -f FILE, not both" : "give TEXT or -f FILE");
        tokenize_usage(stderr);
        return 2;
    }
    char *buf = NULL;
    size_t len;
    if (file) {
        if (read_all(file, &buf, &len))
            return 1;
    } else
        len = strlen(text);
    ink_tokenizer *tok = NULL;
    ink_err err = {0};
    ink_tokens v = {0};
    int rc = ink_tokenizer_open(&tok, dir, &err);
    if (!rc)
        rc = ink_tokenizer_encode(tok, buf ? buf : text, len, special ? INK_TOK_SPECIAL : 0, &v, &err);
    if (rc) {
        fprintf(stderr, "inkling tokenize: %s\n", err.msg);
        free(buf);
        ink_tokenizer_free(tok);
        return 1;
    }
    if (pieces) {
        putchar('[');
        for (size_t i = 0; i < v.n; i++) {
            size_t pl;
            const char *p = ink_tokenizer_piece(tok, v.ids[i], &pl);
            if (i)
                putchar(',');
            if (ink_tokenizer_is_special(tok, v.ids[i]))
                put_json_text(p, pl); /* special tokens keep their spelling */
            else
                put_byte_level((const unsigned char *)p, pl);
        }
        printf("]\n");
    } else {
        for (size_t i = 0; i < v.n; i++)
            printf(i ? ",%d" : "%d", (int)v.ids[i]);
        putchar('\n');
    }
    ink_tokens_free(&v);
    ink_tokenizer_free(tok);
    free(buf);
    return fflush(stdout) == 0 ? 0 : 1;
}

/* "1,2,3" (spaces and surrounding [ ] allowed) -> ids. */
static int parse_ids(const char *s, ink_tokens *v)
{
    const char *p = s;
    while (*p == ' ' || *p == '[')
        p++;
    while (*p && *p != ']') {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX) {
            fprintf(stderr, "inkling detokenize: --ids: '%.20s' is not a token id\n", p);
            return -1;
        }
        if (ink_tokens_push(v, (int32_t)x, NULL))
            return -1;
        p = end;
        while (*p == ' ')
            p++;
        if (*p == ',') {
            p++;
            while (*p == ' ')
                p++;
            if (!*p || *p == ']') {
                fprintf(stderr, "inkling detokenize: --ids: trailing comma\n");
                return -1;
            }
        } else if (*p && *p != ']') {
            fprintf(stderr, "inkling detokenize: --ids: expected ',' at '%.20s'\n", p);
            return -1;
        }
    }
    return 0;
}

int cmd_detokenize(int argc, char **argv)
{
    const char *dir = NULL, *ids = NULL;
    int skip = 0, raw = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            detokenize_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--ids")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "inkling detokenize: %s needs a value\n", a);
                detokenize_usage(stderr);
                return 2;
            }
            if (!strcmp(a, "--ids"))
                ids = argv[++i];
            else
                dir = argv[++i];
        } else if (!strcmp(a, "--skip-special"))
            skip = 1;
        else if (!strcmp(a, "--raw"))
            raw = 1;
        else {
            fprintf(stderr, "inkling detokenize: unknown argument '%s'\n", a);
            detokenize_usage(stderr);
            return 2;
        }
    }
    if (!dir || !ids) {
        fprintf(stderr, "inkling detokenize: %s is required\n", !dir ? "-m DIR" : "--ids LIST");
        detokenize_usage(stderr);
        return 2;
    }
    ink_tokens v = {0};
    if (parse_ids(ids, &v)) {
        ink_tokens_free(&v);
        return 1;
    }
    ink_tokenizer *tok = NULL;
    ink_err err = {0};
    char *text = NULL;
    size_t len = 0;
    int flags = (skip ? INK_DECODE_SKIP_SPECIAL : 0) | (raw ? 0 : INK_DECODE_LOSSY);
    int rc = ink_tokenizer_open(&tok, dir, &err);
    if (!rc)
        rc = ink_tokenizer_decode(tok, v.ids, v.n, flags, &text, &len, &err);
    ink_tokens_free(&v);
    ink_tokenizer_free(tok);
    if (rc) {
        fprintf(stderr, "inkling detokenize: %s\n", err.msg);
        return 1;
    }
    fwrite(text, 1, len, stdout);
    if (!raw)
        putchar('\n');
    free(text);
    return fflush(stdout) == 0 ? 0 : 1;
}
