/* util.c — helpers shared by the fuzz targets (see fuzz.h). */
#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const ink_fuzz_target ink_fuzz_targets[] = {
    {"safetensors", ink_fuzz_safetensors},
    {"tdir", ink_fuzz_tdir},
    {"config", ink_fuzz_config},
    {"tokenizer", ink_fuzz_tokenizer},
    {"encode", ink_fuzz_encode},
    {"chat", ink_fuzz_chat},
    {"hub", ink_fuzz_hub},
    {"server", ink_fuzz_server},
    {"serverout", ink_fuzz_serverout},
    {NULL, NULL},
};

void fz_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("fuzz property failed: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

static char g_tmp[512];

/* Removes the directory tree under `dir` (two levels are all the targets create). */
static void rm_tree(const char *dir)
{
    DIR *dp = opendir(dir);
    if (!dp) return;
    struct dirent *de;
    char p[1024];
    while ((de = readdir(dp))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            fz_clear_dir(p);
            rmdir(p);
        } else {
            unlink(p);
        }
    }
    closedir(dp);
}

static void cleanup(void)
{
    if (!g_tmp[0]) return;
    rm_tree(g_tmp);
    rmdir(g_tmp);
}

const char *fz_tmpdir(void)
{
    if (g_tmp[0]) return g_tmp;
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    snprintf(g_tmp, sizeof g_tmp, "%s/inkfuzz-XXXXXX", base);
    if (!mkdtemp(g_tmp)) fz_fail("mkdtemp %s: %s", g_tmp, strerror(errno));
    atexit(cleanup);
    return g_tmp;
}

int fz_write(const char *path, const void *data, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    const uint8_t *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            close(fd);
            return -1;
        }
        p += w, n -= (size_t)w;
    }
    return close(fd);
}

int fz_write_st(const char *path, const uint8_t *data, size_t n)
{
    if (!n || data[0] != '{') return fz_write(path, data, n);
    const uint8_t *nul = memchr(data, 0, n);
    size_t h = nul ? (size_t)(nul - data) : n;
    size_t rest = nul ? n - h - 1 : 0;
    uint8_t *buf = malloc(8 + h + rest);
    if (!buf) return -1;
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, data, h);
    if (rest) memcpy(buf + 8 + h, nul + 1, rest);
    int rc = fz_write(path, buf, 8 + h + rest);
    free(buf);
    return rc;
}

void fz_clear_dir(const char *dir)
{
    DIR *dp = opendir(dir);
    if (!dp) return;
    struct dirent *de;
    char p[1024];
    while ((de = readdir(dp))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    closedir(dp);
}

static ink_tokenizer *g_tok;

static void free_tok(void) { ink_tokenizer_free(g_tok); }

const ink_tokenizer *fz_test_tokenizer(void)
{
    if (g_tok) return g_tok;
    const char *dir = getenv("INK_FUZZ_TOKDIR");
    if (!dir || !*dir) dir = "tests/data/tok";
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "gzip -dc '%s/tokenizer.json.gz'", dir);
    FILE *p = popen(cmd, "r");
    if (!p) fz_fail("cannot run %s", cmd);
    size_t n = 0, cap = 1 << 20;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) fz_fail("out of memory");
        size_t r = fread(buf + n, 1, cap - n, p);
        n += r;
        if (n < cap) break;
        cap *= 2;
        buf = realloc(buf, cap);
    }
    if (pclose(p) != 0 || n == 0) fz_fail("%s failed (run the fuzzers from the repository root)", cmd);
    ink_err err = {0};
    if (ink_tokenizer_open_mem(&g_tok, buf, n, "tests/data/tok/tokenizer.json", &err))
        fz_fail("test tokenizer: %s", err.msg);
    free(buf);
    atexit(free_tok);
    return g_tok;
}
