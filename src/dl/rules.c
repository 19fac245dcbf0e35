/* rules.c — repo-id syntax, path safety, the default allow/deny list of formats.md §6.5 and URL
 * percent-encoding. Depends on libc/POSIX only. */
#include "dl/hub.h"

#include <string.h>
#include <strings.h>

static int id_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
}

static int id_part_ok(const char *s, size_t n)
{
    if (n == 0 || n > 96) return 0;
    for (size_t i = 0; i < n; i++) {
        if (!id_char(s[i])) return 0;
        if (i + 1 < n && ((s[i] == '.' && s[i + 1] == '.') || (s[i] == '-' && s[i + 1] == '-')))
            return 0;
    }
    if (s[0] == '.' || s[0] == '-' || s[n - 1] == '.' || s[n - 1] == '-') return 0;
    return 1;
}

int ink_hub_is_repo_id(const char *s)
{
    if (!s) return 0;
    const char *slash = strchr(s, '/');
    if (!slash || strchr(slash + 1, '/')) return 0;
    return id_part_ok(s, (size_t)(slash - s)) && id_part_ok(slash + 1, strlen(slash + 1));
}

int ink_hub_path_safe(const char *path)
{
    size_t n = path ? strlen(path) : 0;
    if (n == 0 || n > 512) return 0;
    if (path[0] == '/' || path[n - 1] == '/' || strchr(path, '\\') || strstr(path, "//")) return 0;
    for (const char *c = path; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) return 0;
    const char *comp = path;
    while (1) {
        const char *end = strchr(comp, '/');
        size_t len = end ? (size_t)(end - comp) : strlen(comp);
        if ((len == 1 && comp[0] == '.') || (len == 2 && comp[0] == '.' && comp[1] == '.')) return 0;
        if (!end) break;
        comp = end + 1;
    }
    return 1;
}

static int ends_with_ci(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

static int starts_with_ci(const char *s, const char *prefix)
{
    return strncasecmp(s, prefix, strlen(prefix)) == 0;
}

static int denied(const char *path, const char *base)
{
    /* hidden files or directories anywhere (.git*, .huggingface*, .cache, ...) */
    if (base[0] == '.' || path[0] == '.' || strstr(path, "/.")) return 1;
    static const char *const docs[] = {"README", "LICENSE", "LICENCE", "NOTICE", "USAGE"};
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++)
        if (starts_with_ci(base, docs[i])) return 1;
    if (strcasecmp(base, "citation.cff") == 0) return 1;
    static const char *const ext[] = {".png",  ".jpg",  ".jpeg",    ".gif",  ".webp", ".svg",
                                      ".mp4",  ".mp3",  ".wav",     ".bin",  ".pt",   ".pth",
                                      ".ckpt", ".h5",   ".msgpack", ".ot",   ".onnx", ".tflite",
                                      ".gguf", ".ggml", ".py",      ".ipynb", ".md",  ".rst",
                                      ".yaml", ".yml",  ".toml",    ".lock", ".log"};
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
        if (ends_with_ci(base, ext[i])) return 1;
    return 0;
}

static int allowed(const char *base)
{
    if (ends_with_ci(base, ".safetensors") || ends_with_ci(base, ".tiktoken") ||
        ends_with_ci(base, ".jinja") || ends_with_ci(base, ".model"))
        return 1;
    if (ends_with_ci(base, ".json"))
        return !ends_with_ci(base, ".bin.index.json") && !ends_with_ci(base, ".pt.index.json");
    if (starts_with_ci(base, "vocab") || strcasecmp(base, "merges.txt") == 0) return 1;
    if (ends_with_ci(base, ".txt")) {
        /* *token*.txt */
        size_t n = strlen(base);
        for (size_t i = 0; i + 5 <= n - 4; i++)
            if (strncasecmp(base + i, "token", 5) == 0) return 1;
    }
    static const char *const bare[] = {"vocab",           "merges",           "added_tokens",
                                       "special_tokens_map", "tokenizer_config", "tokenizer",
                                       "generation_config", "preprocessor_config",
                                       "processor_config", "chat_template"};
    for (size_t i = 0; i < sizeof bare / sizeof bare[0]; i++)
        if (strcmp(base, bare[i]) == 0) return 1;
    return 0;
}

int ink_hub_path_wanted(const char *path)
{
    if (!ink_hub_path_safe(path)) return 0;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    return !denied(path, base) && allowed(base);
}

int ink_hub_urlencode(const char *s, int keep_slash, char *out, size_t n, ink_err *err)
{
    static const char dig[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int keep = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                   *p == '-' || *p == '_' || *p == '.' || *p == '~' || (keep_slash && *p == '/');
        if (o + (keep ? 1 : 3) >= n)
            return ink_err_set(err, INK_E_INVAL, "URL component too long: '%.80s...'", s);
        if (keep) {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%';
            out[o++] = dig[*p >> 4];
            out[o++] = dig[*p & 15];
        }
    }
    if (n == 0) return ink_err_set(err, INK_E_INVAL, "URL buffer of size 0");
    out[o] = '\0';
    return INK_OK;
}
