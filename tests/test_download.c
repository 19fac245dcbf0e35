/* test_download.c — `inkling download` against a loopback mock Hub (tests/support/mock_hub.py,
 * started per test on ephemeral ports): listing, globs, cross-origin redirect without the token,
 * Range resume, dropped connections, wrong hashes, 401/403/404, disk full, progress output, the
 * CLI front end and the local cache resolution. No test touches the internet. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dl/hub.h"
#include "dl/sha.h"

/* The CLI front end is compiled in to test argument handling and the environment. */
#include "cli/cli.h"

#define MOCK "tests/support/mock_hub.py"

/* ---- fixture: a temp dir and a running mock hub ------------------------------------------ */

typedef struct fx {
    char root[256];   /* temp dir: origin/, requests.log, cache/ */
    char cache[320];
    char ep[64];
    pid_t pid;
    int stdin_w;
} fx;

static void rm_rf(const char *p)
{
    struct stat st;
    if (lstat(p, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(p);
        if (d) {
            struct dirent *de;
            while ((de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
                char q[1024];
                snprintf(q, sizeof q, "%s/%s", p, de->d_name);
                rm_rf(q);
            }
            closedir(d);
        }
        rmdir(p);
    } else {
        unlink(p);
    }
}

static int fx_setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    snprintf(f->root, sizeof f->root, "/tmp/inkdl.XXXXXX");
    assert_non_null(mkdtemp(f->root));
    snprintf(f->cache, sizeof f->cache, "%s/cache", f->root);
    int in[2], out[2];
    assert_int_equal(pipe(in), 0);
    assert_int_equal(pipe(out), 0);
    f->pid = fork();
    assert_true(f->pid >= 0);
    if (f->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        execl("/usr/bin/python3", "python3", MOCK, f->root, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    f->stdin_w = in[1];
    char line[128] = "";
    size_t n = 0;
    while (n < sizeof line - 1) {
        ssize_t r = read(out[0], line + n, 1);
        if (r <= 0 || line[n] == '\n') break;
        n++;
    }
    line[n] = '\0';
    close(out[0]);
    int hub = 0, cdn = 0;
    assert_int_equal(sscanf(line, "READY %d %d", &hub, &cdn), 2);
    snprintf(f->ep, sizeof f->ep, "http://127.0.0.1:%d/", hub); /* trailing '/' is stripped */
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx *f = *state;
    close(f->stdin_w);
    kill(f->pid, SIGTERM);
    waitpid(f->pid, NULL, 0);
    rm_rf(f->root);
    free(f);
    return 0;
}

static ink_hub_opts fx_opts(fx *f)
{
    ink_hub_opts o = {0};
    o.endpoint = f->ep;
    o.cache_dir = f->cache;
    o.backoff_s = 0.001;
    o.connect_timeout_s = 5;
    o.read_timeout_s = 5;
    return o;
}

/* ---- helpers ----------------------------------------------------------------------------- */

static char *slurp(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    assert_non_null(buf);
    size_t got = fread(buf, 1, (size_t)len, fp);
    fclose(fp);
    buf[got] = '\0';
    if (n) *n = got;
    return buf;
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(data, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
}

static int file_exists(const char *dir, const char *name)
{
    char p[1024];
    struct stat st;
    if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p) return 0;
    return stat(p, &st) == 0;
}

static int64_t file_size(const char *dir, const char *name)
{
    char p[1024];
    struct stat st;
    if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p) return -1;
    return stat(p, &st) == 0 ? (int64_t)st.st_size : -1;
}

/* The downloaded file equals the one the mock serves. */
static void assert_same_as_origin(fx *f, const char *dir, const char *name)
{
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/%s", dir, name);
    snprintf(b, sizeof b, "%s/origin/%s", f->root, name);
    size_t na = 0, nb = 0;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    if (!x) fail_msg("missing %s", a);
    assert_non_null(y);
    assert_int_equal(na, nb);
    assert_memory_equal(x, y, na);
    free(x);
    free(y);
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
    closedir(d);
    return n;
}

/* Counts logged requests on `port` ("hub"/"cdn") whose path contains `path_sub` (NULL: any). */
typedef struct req_filter {
    const char *port, *path_sub;
    int auth_mode;          /* 0 any, 1 must be absent, 2 must equal auth */
    const char *auth;
    int range_mode;         /* 0 any, 1 absent, 2 present */
} req_filter;

static int count_requests(fx *f, req_filter q)
{
    char p[512];
    snprintf(p, sizeof p, "%s/requests.log", f->root);
    char *log = slurp(p, NULL);
    if (!log) return 0;
    int n = 0;
    for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n")) {
        json_t *j = json_loads(line, 0, NULL);
        assert_non_null(j);
        const char *port = json_string_value(json_object_get(j, "port"));
        const char *path = json_string_value(json_object_get(j, "path"));
        const char *auth = json_string_value(json_object_get(j, "auth"));
        const char *range = json_string_value(json_object_get(j, "range"));
        int ok = (!q.port || !strcmp(port, q.port)) && (!q.path_sub || strstr(path, q.path_sub));
        if (q.auth_mode == 1 && auth) ok = 0;
        if (q.auth_mode == 2 && (!auth || strcmp(auth, q.auth))) ok = 0;
        if (q.range_mode == 1 && range) ok = 0;
        if (q.range_mode == 2 && !range) ok = 0;
        n += ok;
        json_decref(j);
    }
    free(log);
    return n;
}

static int count_all(fx *f) { return count_requests(f, (req_filter){0}); }

static void clear_log(fx *f)
{
    char p[512];
    snprintf(p, sizeof p, "%s/requests.log", f->root);
    unlink(p);
}

static const char *const ALL_WANTED[] = {
    "config.json", "generation_config.json", "model.safetensors.index.json",
    "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "mtp.safetensors",
    "tokenizer.json", "sub dir/extra.json",
};
#define N_WANTED 8

/* ---- pure functions ---------------------------------------------------------------------- */

static void sha_hex256(const void *p, size_t n, char out[65])
{
    ink_sha256 s;
    uint8_t d[32];
    ink_sha256_init(&s);
    ink_sha256_update(&s, p, n);
    ink_sha256_final(&s, d);
    ink_hex(d, 32, out);
}

static void test_sha_vectors(void **state)
{
    (void)state;
    char h[65];
    sha_hex256("", 0, h);
    assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha_hex256("abc", 3, h);
    assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha_hex256(m, strlen(m), h);
    assert_string_equal(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* streaming in odd pieces equals one shot, across block boundaries */
    static uint8_t buf[1000];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)(i * 7 + 3);
    char one[65], many[65];
    sha_hex256(buf, sizeof buf, one);
    ink_sha256 s;
    uint8_t d[32];
    ink_sha256_init(&s);
    for (size_t i = 0, step = 1; i < sizeof buf; i += step, step = step * 3 % 67 + 1)
        ink_sha256_update(&s, buf + i, i + step <= sizeof buf ? step : sizeof buf - i);
    ink_sha256_final(&s, d);
    ink_hex(d, 32, many);
    assert_string_equal(one, many);

    ink_sha1 s1;
    uint8_t d1[20];
    char h1[41];
    ink_sha1_init(&s1);
    ink_sha1_update(&s1, "abc", 3);
    ink_sha1_final(&s1, d1);
    ink_hex(d1, 20, h1);
    assert_string_equal(h1, "a9993e364706816aba3e25717850c26c9cd0d89d");
    ink_sha1_init(&s1);
    ink_sha1_update(&s1, m, strlen(m));
    ink_sha1_final(&s1, d1);
    ink_hex(d1, 20, h1);
    assert_string_equal(h1, "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
}

static void test_glob(void **state)
{
    (void)state;
    assert_true(ink_glob_match("*.json", "config.json"));
    assert_true(ink_glob_match("*.json", "sub/a.json")); /* '*' crosses '/' */
    assert_false(ink_glob_match("*.json", "config.json.bak"));
    assert_true(ink_glob_match("model-0000[1-3]-of-*", "model-00001-of-00032.safetensors"));
    assert_true(ink_glob_match("model-0000[1-3]-of-*", "model-00003-of-00032.safetensors"));
    assert_false(ink_glob_match("model-0000[1-3]-of-*", "model-00004-of-00032.safetensors"));
    assert_true(ink_glob_match("mtp.safetensors", "mtp.safetensors"));
    assert_false(ink_glob_match("MTP.safetensors", "mtp.safetensors"));
    assert_false(ink_glob_match("[!m]*.json", "model.safetensors.index.json"));
    assert_true(ink_glob_match("[!m]*.json", "config.json"));
    assert_true(ink_glob_match("?onfig.json", "config.json"));
    assert_true(ink_glob_match("a?b", "a/b"));
    assert_true(ink_glob_match("**/x.json", "x.json"));
    assert_true(ink_glob_match("**/x.json", "d/e/x.json"));
    assert_true(ink_glob_match("a/**/b", "a/b"));
    assert_true(ink_glob_match("a/**/b", "a/x/y/b"));
    assert_false(ink_glob_match("a/**/b", "a/xb"));
    assert_true(ink_glob_match("a/**", "a/x/y"));
    assert_true(ink_glob_match("**", "anything/at/all"));
    assert_true(ink_glob_match("[*]x", "*x"));
    assert_false(ink_glob_match("[*]x", "ax"));
    assert_true(ink_glob_match("[?]", "?"));
    assert_true(ink_glob_match("[[]", "["));
    assert_true(ink_glob_match("[]]", "]"));
    assert_true(ink_glob_match("[!]]", "a"));
    assert_false(ink_glob_match("[!]]", "]"));
    assert_true(ink_glob_match("a\\b", "a\\b")); /* no backslash escape */
    assert_true(ink_glob_match(".*", ".gitattributes")); /* leading '.' not special */
    assert_true(ink_glob_match("*", ""));
    assert_false(ink_glob_match("?", ""));
    /* a pathological pattern stays fast (memoised) */
    assert_false(ink_glob_match("*a*a*a*a*a*a*a*a*a*a*b",
                                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));

    ink_err e = {0};
    assert_int_equal(ink_glob_check("a/**/b", &e), INK_OK);
    assert_int_equal(ink_glob_check("**", &e), INK_OK);
    assert_int_equal(ink_glob_check("[]]", &e), INK_OK);
    assert_int_equal(ink_glob_check("**a", &e), INK_E_INVAL);
    assert_non_null(strstr(e.msg, "**"));
    e = (ink_err){0};
    assert_int_equal(ink_glob_check("a**", &e), INK_E_INVAL);
    e = (ink_err){0};
    assert_int_equal(ink_glob_check("***", &e), INK_E_INVAL);
    e = (ink_err){0};
    assert_int_equal(ink_glob_check("model-[0-9", &e), INK_E_INVAL);
    assert_non_null(strstr(e.msg, "unterminated"));
    e = (ink_err){0};
    assert_int_equal(ink_glob_check("", &e), INK_E_INVAL);
}

static void test_rules(void **state)
{
    (void)state;
    assert_false(ink_hub_path_wanted("README.md"));
    assert_false(ink_hub_path_wanted("model.bin.index.json"));
    assert_false(ink_hub_path_wanted("pytorch_model.bin"));
    assert_false(ink_hub_path_wanted(".gitattributes"));
    assert_false(ink_hub_path_wanted("LICENSE"));
    assert_false(ink_hub_path_wanted("modeling_inkling.py"));
    assert_false(ink_hub_path_wanted("assets/logo.png"));
    assert_true(ink_hub_path_wanted("tokenizer.model"));
    assert_true(ink_hub_path_wanted("chat_template.jinja"));
    assert_true(ink_hub_path_wanted("model-00001-of-00032.safetensors"));
    assert_true(ink_hub_path_wanted("mtp.safetensors"));
    assert_true(ink_hub_path_wanted("config.json"));
    assert_true(ink_hub_path_wanted("o200k_base.tiktoken"));
    assert_true(ink_hub_path_wanted("merges.txt"));
    assert_true(ink_hub_path_wanted("vocab.txt"));
    assert_true(ink_hub_path_wanted("added_tokens.txt"));
    assert_false(ink_hub_path_wanted("notes.txt"));

    assert_true(ink_hub_path_safe("a/b.json"));
    assert_false(ink_hub_path_safe("../x.safetensors"));
    assert_false(ink_hub_path_safe("a/../b"));
    assert_false(ink_hub_path_safe("./a"));
    assert_false(ink_hub_path_safe("/etc/passwd"));
    assert_false(ink_hub_path_safe("a//b"));
    assert_false(ink_hub_path_safe("a\\b"));
    assert_false(ink_hub_path_safe("a/"));
    assert_false(ink_hub_path_safe(""));
    assert_false(ink_hub_path_wanted("../config.json"));

    assert_true(ink_hub_is_repo_id("thinkingmachines/Inkling-Small"));
    assert_true(ink_hub_is_repo_id("mlx-community/Inkling-Small-4bit"));
    assert_false(ink_hub_is_repo_id("Inkling-Small"));
    assert_false(ink_hub_is_repo_id("a/b/c"));
    assert_false(ink_hub_is_repo_id("a/.."));
    assert_false(ink_hub_is_repo_id("../b"));
    assert_false(ink_hub_is_repo_id("a/b c"));
    assert_false(ink_hub_is_repo_id("/b"));

    char out[64];
    ink_err e = {0};
    assert_int_equal(ink_hub_urlencode("refs/pr/1", 0, out, sizeof out, &e), INK_OK);
    assert_string_equal(out, "refs%2Fpr%2F1");
    assert_int_equal(ink_hub_urlencode("sub dir/a+b.json", 1, out, sizeof out, &e), INK_OK);
    assert_string_equal(out, "sub%20dir/a%2Bb.json");
    char tiny[4];
    assert_int_equal(ink_hub_urlencode("abcdef", 0, tiny, sizeof tiny, &e), INK_E_INVAL);

    char dir[256];
    e = (ink_err){0};
    assert_int_equal(ink_hub_default_cache_dir("/c/", "/x", "/h", dir, sizeof dir, &e), INK_OK);
    assert_string_equal(dir, "/c");
    assert_int_equal(ink_hub_default_cache_dir(NULL, "/x", "/h", dir, sizeof dir, &e), INK_OK);
    assert_string_equal(dir, "/x/inkling");
    assert_int_equal(ink_hub_default_cache_dir(NULL, "", "/h", dir, sizeof dir, &e), INK_OK);
    assert_string_equal(dir, "/h/.cache/inkling");
    assert_int_equal(ink_hub_default_cache_dir(NULL, NULL, NULL, dir, sizeof dir, &e), INK_E_INVAL);
}

/* Errors that need no network: nothing is requested. */
static void test_offline_rejections(void **state)
{
    fx *f = *state;
    ink_hub_opts o = fx_opts(f);
    ink_hub_result r;
    ink_err e = {0};
    assert_int_equal(ink_hub_download("noslash", &o, &r, &e), INK_E_INVAL);
    const char *bad[] = {"**a"};
    o.include = bad;
    o.n_include = 1;
    e = (ink_err){0};
    assert_int_equal(ink_hub_download("org/model", &o, &r, &e), INK_E_INVAL);
    assert_non_null(strstr(e.msg, "**"));
    o = fx_opts(f);
    o.token = "has space";
    e = (ink_err){0};
    assert_int_equal(ink_hub_download("org/model", &o, &r, &e), INK_E_INVAL);
    assert_null(strstr(e.msg, "has space")); /* the token is never printed */
    o = fx_opts(f);
    o.endpoint = "http://hub.example.invalid";
    e = (ink_err){0};
    assert_int_equal(ink_hub_download("org/model", &o, &r, &e), INK_E_INVAL);
    assert_non_null(strstr(e.msg, "plain-http"));
    o = fx_opts(f);
    o.cache_dir = NULL;
    e = (ink_err){0};
    assert_int_equal(ink_hub_download("org/model", &o, &r, &e), INK_E_INVAL);
    assert_int_equal(count_all(f), 0);
}

/* ---- downloads --------------------------------------------------------------------------- */

static void test_full_download_token_not_forwarded(void **state)
{
    fx *f = *state;
    ink_hub_opts o = fx_opts(f);
    o.token = "hf_secret";
    ink_hub_result r;
    ink_err e = {0};
    int rc = ink_hub_download("org/model", &o, &r, &e);
    if (rc) fail_msg("%s", e.msg);
    assert_int_equal(r.n_files, N_WANTED);
    assert_int_equal(r.n_downloaded, N_WANTED);
    assert_int_equal(r.n_skipped, 0);
    assert_int_equal(strlen(r.commit), 40);
    for (int i = 0; i < N_WANTED; i++) assert_same_as_origin(f, r.dir, ALL_WANTED[i]);
    assert_false(file_exists(r.dir, "README.md"));
    assert_false(file_exists(r.dir, ".gitattributes"));
    assert_false(file_exists(r.dir, "pytorch_model.bin"));
    assert_int_equal(count_entries(r.dir), N_WANTED); /* 7 files + "sub dir" */
    /* cache layout and ref */
    char p[1024];
    snprintf(p, sizeof p, "%s/models/org/model/snapshots/%s", f->cache, r.commit);
    assert_string_equal(r.dir, p);
    snprintf(p, sizeof p, "%s/models/org/model/refs/main", f->cache);
    char *ref = slurp(p, NULL);
    assert_non_null(ref);
    assert_int_equal(strncmp(ref, r.commit, 40), 0);
    free(ref);
    /* the token went to every hub request and to no cdn request */
    int hub = count_requests(f, (req_filter){.port = "hub"});
    assert_true(hub >= 1 + N_WANTED);
    assert_int_equal(count_requests(f, (req_filter){.port = "hub", .auth_mode = 2,
                                                    .auth = "Bearer hf_secret"}),
                     hub);
    assert_int_equal(count_requests(f, (req_filter){.port = "cdn"}), 3);
    assert_int_equal(count_requests(f, (req_filter){.port = "cdn", .auth_mode = 1}), 3);
    assert_int_equal(count_requests(f, (req_filter){.path_sub = "README"}), 0);
    /* the relative same-origin redirect of tokenizer.json kept the token */
    assert_int_equal(count_requests(f, (req_filter){.path_sub = "tokenizer.json?moved=1", .auth_mode = 2,
                                                    .auth = "Bearer hf_secret"}),
                     1);
    /* the resolve URL percent-encodes the path */
    assert_int_equal(count_requests(f, (req_filter){.path_sub = "sub%20dir/extra.json"}), 1);

    /* the cache resolves the repo id to the snapshot */
    char dir[1024];
    e = (ink_err){0};
    assert_int_equal(ink_hub_resolve_local("org/model", f->cache, dir, sizeof dir, &e), INK_OK);
    assert_string_equal(dir, r.dir);

    /* a second run finds everything present and transfers nothing */
    clear_log(f);
    ink_hub_result r2;
    assert_int_equal(ink_hub_download("org/model", &o, &r2, &e), INK_OK);
    assert_int_equal(r2.n_skipped, N_WANTED);
    assert_int_equal(r2.n_downloaded, 0);
    assert_int_equal(count_requests(f, (req_filter){.path_sub = "/resolve/"}), 0);
    /* --force downloads again */
    o.force = 1;
    ink_hub_result r3;
    assert_int_equal(ink_hub_download("org/model", &o, &r3, &e), INK_OK);
    assert_int_equal(r3.n_downloaded, N_WANTED);
}

static void test_include_drafter_only(void **state)
{
    fx *f = *state;
    ink_hub_opts o = fx_opts(f);
    const char *inc[] = {"config.json", "mtp.safetensors"};
    o.include = inc;
    o.n_include = 2;
    ink_hub_result r;
    ink_err e = {0};
    int rc = ink_hub_download("org/model", &o, &r, &e);
    if (rc) fail_msg("%s", e.msg);
    assert_int_equal(r.n_files, 2);
    assert_int_equal(count_entries(r.dir), 2);
    assert_same_as_origin(f, r.dir, "config.json");
    assert_same_as_origin(f, r.dir, "mtp.safetensors");
    assert_int_equal(count_requests(f, (req_filter){.path_sub = "model-0000"}), 0);
    char dir[1024];
    assert_int_equal(ink_hub_resolve_local("org/model", f->cache, dir, sizeof dir, &e), INK_OK);
    assert_string_equal(dir, r.dir);
}

static void test_globs_select_and_exclude(void **state)
{
    fx *f = *state;
    ink_hub_opts o = fx_opts(f);
    char ld[512];
    snprintf(ld, sizeof ld, "%s/local", f->root);
    o.local_dir = ld;
    const char *inc[] = {"*.json"};
    const char *exc[] = {"[!c]*", "sub dir/**"};
    o.include = inc;
    o.n_include = 1;
    o.exclude = exc;
    o.n_exclude = 2;
    ink_hub_result r;
    ink_err e = {0};
    int rc = ink_hub_download("org/model", &o, &r, &e);
    if (rc) fail_msg("%s", e.msg);
    assert_string_equal(r.dir, ld);
    assert_int_equal(r.n_files, 1); /* only config.json survives */
    assert_int_equal(count_entries(ld), 1);
    assert_same_as_origin(f, ld, "config.json");
    /* --local-dir writes no ref */
    char p[1024];
    snprintf(p, sizeof p, "%s/models", f->cache);
    assert_int_equal(count_entries(p), -1);
}

static void test_glob_matches_nothing(void **state)
{
    fx *f = *state;
    ink_hub_opts o = fx_opts(f);
    const char *inc[] = {"config.json", "MTP.safetensors"};
    o.include = inc;
    o.n_include = 2;
    char *logbuf = NULL;
    size_t loglen = 0;
    o.log = open_memstream(&logbuf, &loglen);
    ink_hub_result r;
    ink_err e = {0};
    assert_int_equal(ink_hub_download("org/model", &o, &r, &e), INK_E_INVAL);
    fclose(o.log);
    assert_non_null(strstr(e.msg, "MTP.safetensors"));
    assert_non_null(strstr(e.msg, "matches no file"));
    assert_non_null(strstr(e.msg, "mtp.safetensors")); /* lists what the repo has */
    assert_non_null(strstr(e.msg, "model-00002-of-00002.safetensors"));
    assert_non_null(strstr(logbuf, "never downloaded"));
    assert_null(strstr(e.msg, "README"));
    free(logbuf);
    assert_int_equal(count_requests(f, (req_filter){.path_sub = "/resolve/"}), 0);

    /* an --include cannot re-admit a deny-listed file */
    const char *inc2[] = {"README.md"};
    o = fx_opts(f);
    o.include = inc2;
    o.n_include = 1;
    e = (ink_err){0};
    assert_int_equal(ink_hub_download("org/model", &o, &r, &e), INK_E_INVAL);
    /* an --exclude that matches nothing is an error too; excluding everything is as well */
    const char *exc[] = {"*.gguf"};
    o = fx_opts(f);
    o.exclude = exc;
    o.n_exclude = 1;
    e = (ink_err){0};
    assert_int_equal(ink_hub_download("org/model", &o, &r, &e), INK_E_INVAL);
    assert_non_null(strstr(e.msg, "--exclude '*.gguf'"));
    const char *exc2[] = {"*"};
    o.exclude = exc2;
    e = (ink_err){0};
    assert_int_equal(ink_hub_download("org/model", &o, &r, &e), INK_E_INVAL);
    assert_non_null(strstr(e.msg, "nothing to download"));
}

static void test_drop_midway_resumes(void **state)
{
    fx *f = *state;
    ink_hub_opts o = fx_opts(f);
    const char *inc[] = {"*.safetensors"};
    o.include = inc;
    o.n_include = 1;
    char *logbuf = NULL;
    size_t loglen = 0;
    o.log = open_memstream(&logbuf, &loglen);
    ink_hub_result r;
    ink_err e = {0};
    int rc = ink_hub_download("org/drop", &o, &r, &e);
    fclose(o.log);
    if (rc) fail_msg("%s", e.msg);
    assert_int_equal(r.n_downloaded, 3);
    assert_same_as_origin(f, r.dir, "mtp.safetensors");
    assert_same_as_origin(f, r.dir, "model-00001-of-00002.safetensors");
    assert_same_as_origin(f, r.dir, "model-00002-of-00002.safetensors");
    /* each file: one GET without a range (dropped), then one with Range: bytes=<half>- */
    assert_int_equal(count_requests(f, (req_filter){.port = "cdn", .range_mode = 1}), 3);
    assert_int_equal(count_requests(f, (req_filter){.port = "cdn", .range_mode = 2}), 3);
    assert_non_null(strstr(logbuf, "retrying"));
    assert_non_null(strstr(logbuf, "sha256 ok"));
    free(logbuf);
    assert_false(file_exists(r.dir, "mtp.safetensors.incomplete"));
    /* only about 1.5x the bytes travelled, not 2x */
    assert_true(r.bytes < 650000 * 3 / 2 + 10000);
}

static void test_drop_always_keeps_partial_then_resumes(void **state)
{
    fx *f = *state;
    ink_hub_opts o = fx_opts(f);
    const char *inc[] = {"mtp.safetensors"};
    o.include = inc;
    o.n_include = 1;
    o.max_retries = 2;
    ink_hub_result r;
    ink_err e = {0};
    assert_int_equal(ink_hub_download("org/dropall", &o, &r, &e), INK_E_NET);
    assert_non_null(strstr(e.msg, "resume"));
    /* each attempt made progress, so it went on until the remainder was too small to halve */
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/org/dropall/snapshots", f->cache);
    assert_int_equal(count_entries(dir), 1);
    DIR *d = opendir(dir);
    struct dirent *de;
    char snap[1400] = "";
    while ((de = readdir(d)))
        if (de->d_name[0] != '.') snprintf(snap, sizeof snap, "%s/%s", dir, de->d_name);
    closedir(d);
    int64_t part = file_size(snap, "mtp.safetensors.incomplete");
    assert_true(part > 0 && part < 150000);
    assert_false(file_exists(snap, "mtp.safetensors"));
    e = (ink_err){0};
    assert_int_equal(ink_hub_resolve_local("org/dropall", f->cache, dir, sizeof dir, &e), INK_E_IO);
}

/* A partial file from an earlier run is resumed with Range and the result is verified. */
static void test_resume_across_runs(void **state)
{
    fx *f = *state;
    ink_hub_opts o = fx_opts(f);
    char ld[512], p[1024], src[1024];
    snprintf(ld, sizeof ld, "%s/local", f->root);
    mkdir(ld, 0755);
    snprintf(src, sizeof src, "%s/origin/mtp.safetensors", f->root);
    size_t n = 0;
    char *data = slurp(src, &n);
    assert_int_equal(n, 150000);
    snprintf(p, sizeof p, "%s/mtp.safetensors.incomplete", ld);
    write_file(p, data, 50000);
    const char *inc[] = {"mtp.safetensors"};
    o.include = inc;
    o.n_include = 1;
    o.local_dir = ld;
    ink_hub_result r;
    ink_err e = {0};
    int rc = ink_hub_download("org/model", &o, &r, &e);
    if (rc) fail_msg("%s", e.msg);
    assert_same_as_origin(f, ld, "mtp.safetensors");
    assert_int_equal(r.bytes, 100000);
    assert_int_equal(count_requests(f, (req_filter){.port = "cdn", .path_sub = "mtp"}), 1);
    assert_int_equal(count_requests(f, (req_filter){.port = "cdn", .range_mode = 2}), 1);
    assert_false(file_exists(ld, "mtp.safetensors.incomplete"));

    /* a corrupted partial: verification fails, one clean download from 0 fixes it */
    unlink(p);
    snprintf(src, sizeof src, "%s/mtp.safetensors", ld);
    unlink(src);
    data[10] ^= 0x55;
    write_file(p, data, 60000);
    clear_log(f);
    e = (ink_err){0};
    rc = ink_hub_download("org/model", &o, &r, &e);
    if (rc) fail_msg("%s", e.msg);
    assert_same_as_origin(f, ld, "mtp.safetensors");
    assert_int_equal(count_requests(f, (req_filter){.port = "cdn", .range_mode = 2}), 1);
    assert_int_equal(count_requests(f, (req_filter){.port = "cdn", .range_mode = 1}), 1);

    /* a complete partial (interrupted before the rename) needs no request at all */
    unlink(src);
    data[10] ^= 0x55;
    write_file(p, data, n);
    clear_log(f);
    e = (ink_err){0};
    assert_int_equal(ink_hub_download("org/model", &o, &r, &e), INK_OK);
    assert_same_as_origin(f, ld, "mtp.safetensors");
    assert_int_equal(count_requests(f, (req_filter){.port = "cdn"}), 0);
    free(data);
}

static void test_server_ignores_range_or_lies(void **state)
{
    fx *f = *state;
    const char *repos[] = {"org/norange", "org/badrange"};
    for (int k = 0; k < 2; k++) {
        ink_hub_opts o = fx_opts(f);
        char ld[512], p[1024], src[1024];
        snprintf(ld, sizeof ld, "%s/local%d", f->root, k);
        mkdir(ld, 0755);
        snprintf(src, sizeof src, "%s/origin/mtp.safetensors", f->root);
        size_t n = 0;
        char *data = slurp(src, &n);
        snprintf(p, sizeof p, "%s/mtp.safetensors.incomplete", ld);
        write_file(p, data, 40000);
        free(data);
        const char *inc[] = {"mtp.safetensors"};
        o.include = inc;
        o.n_include = 1;
        o.local_dir = ld;
        ink_hub_result r;
        ink_err e = {0};
        int rc = ink_hub_download(repos[k], &o, &r, &e);
        if (rc) fail_msg("%s: %s", repos[k], e.msg);
        assert_same_as_origin(f, ld, "mtp.safetensors");
    }
}

static void test_wrong_hash(void **state)
{
    fx *f = *state;
    ink_hub_opts o = fx_opts(f);
    const char *inc[] = {"mtp.safetensors", "config.json"};
    o.include = inc;
    o.n_include = 2;
    ink_hub_result r;
    ink_err e = {0};
    assert_int_equal(ink_hub_download("org/badhash", &o, &r, &e), INK_E_FORMAT);
    assert_non_null(strstr(e.msg, "sha256"));
    assert_non_null(strstr(e.msg, "mtp.safetensors"));
    char snap[1024];
    snprintf(snap, sizeof snap, "%s/models/org/badhash/snapshots", f->cache);
    DIR *d = opendir(snap);
    assert_non_null(d);
    struct dirent *de;
    char dir[1400] = "";
    while ((de = readdir(d)))
        if (de->d_name[0] != '.') snprintf(dir, sizeof dir, "%s/%s", snap, de->d_name);
    closedir(d);
    assert_true(file_exists(dir, "config.json")); /* verified by its git blob id */
    assert_false(file_exists(dir, "mtp.safetensors"));
    assert_false(file_exists(dir, "mtp.safetensors.incomplete"));
}

static void test_transient_errors_retry(void **state)
{
    fx *f = *state;
    ink_hub_opts o = fx_opts(f);
    const char *inc[] = {"config.json", "mtp.safetensors"};
    o.include = inc;
    o.n_include = 2;
    ink_hub_result r;
    ink_err e = {0};
    int rc = ink_hub_download("org/flaky", &o, &r, &e);
    if (rc) fail_msg("%s", e.msg);
    assert_same_as_origin(f, r.dir, "mtp.safetensors");
    assert_int_equal(count_requests(f, (req_filter){.path_sub = "/api/models/"}), 2);
    assert_int_equal(count_requests(f, (req_filter){.port = "hub", .path_sub = "config.json"}), 2);

    /* a storage host refusing an expired pre-signed URL: resolve again, then it works */
    clear_log(f);
    const char *inc2[] = {"mtp.safetensors"};
    o.include = inc2;
    o.n_include = 1;
    e = (ink_err){0};
    rc = ink_hub_download("org/expired", &o, &r, &e);
    if (rc) fail_msg("%s", e.msg);
    assert_same_as_origin(f, r.dir, "mtp.safetensors");
    assert_int_equal(count_requests(f, (req_filter){.port = "hub", .path_sub = "/resolve/"}), 2);
}

static void test_auth_errors(void **state)
{
    fx *f = *state;
    ink_hub_opts o = fx_opts(f);
    ink_hub_result r;
    ink_err e = {0};
    assert_int_equal(ink_hub_download("org/gated", &o, &r, &e), INK_E_NET);
    assert_non_null(strstr(e.msg, "403"));
    assert_non_null(strstr(e.msg, "gated"));
    assert_non_null(strstr(e.msg, "request access"));

    e = (ink_err){0};
    assert_int_equal(ink_hub_download("org/private", &o, &r, &e), INK_E_NET);
    assert_non_null(strstr(e.msg, "401"));
    assert_non_null(strstr(e.msg, "HF_TOKEN"));

    /* listed as gated "manual", files refused: 401 without a token, 403 with one */
    e = (ink_err){0};
    assert_int_equal(ink_hub_download("org/manual", &o, &r, &e), INK_E_NET);
    assert_non_null(strstr(e.msg, "HTTP 401: org/manual is gated"));
    assert_non_null(strstr(e.msg, "no token was given"));
    o.token = "some-token";
    e = (ink_err){0};
    assert_int_equal(ink_hub_download("org/manual", &o, &r, &e), INK_E_NET);
    assert_non_null(strstr(e.msg, "HTTP 403: org/manual is gated"));
    assert_null(strstr(e.msg, "no token"));

    o.token = "bad-token";
    e = (ink_err){0};
    assert_int_equal(ink_hub_download("org/private", &o, &r, &e), INK_E_NET);
    assert_non_null(strstr(e.msg, "401"));
    assert_non_null(strstr(e.msg, "rejected"));

    o.token = "good-token";
    const char *inc[] = {"mtp.safetensors"};
    o.include = inc;
    o.n_include = 1;
    e = (ink_err){0};
    int rc = ink_hub_download("org/private", &o, &r, &e);
    if (rc) fail_msg("%s", e.msg);
    assert_same_as_origin(f, r.dir, "mtp.safetensors");
    assert_int_equal(count_requests(f, (req_filter){.port = "cdn", .auth_mode = 2,
                                                    .auth = "Bearer good-token"}),
                     0);
}

static void test_not_found(void **state)
{
    fx *f = *state;
    ink_hub_opts o = fx_opts(f);
    ink_hub_result r;
    ink_err e = {0};
    assert_int_equal(ink_hub_download("org/nope", &o, &r, &e), INK_E_NET);
    assert_non_null(strstr(e.msg, "repository org/nope not found"));

    o.revision = "nope";
    e = (ink_err){0};
    assert_int_equal(ink_hub_download("org/model", &o, &r, &e), INK_E_NET);
    assert_non_null(strstr(e.msg, "revision 'nope' not found"));

    o = fx_opts(f);
    const char *inc[] = {"missing.json"};
    o.include = inc;
    o.n_include = 1;
    e = (ink_err){0};
    assert_int_equal(ink_hub_download("org/ghost", &o, &r, &e), INK_E_NET);
    assert_non_null(strstr(e.msg, "file 'missing.json' not found"));
}

static void test_revision_encoding(void **state)
{
    fx *f = *state;
    ink_hub_opts o = fx_opts(f);
    o.revision = "refs/pr/1";
    const char *inc[] = {"config.json"};
    o.include = inc;
    o.n_include = 1;
    ink_hub_result r;
    ink_err e = {0};
    int rc = ink_hub_download("org/model", &o, &r, &e);
    if (rc) fail_msg("%s", e.msg);
    assert_int_equal(count_requests(f, (req_filter){.path_sub = "/revision/refs%2Fpr%2F1?blobs=true"}),
                     1);
    /* the download is pinned to the commit the listing returned */
    char sub[64];
    snprintf(sub, sizeof sub, "/resolve/%s/config.json", r.commit);
    assert_int_equal(count_requests(f, (req_filter){.path_sub = sub}), 1);
    char p[1024];
    snprintf(p, sizeof p, "%s/models/org/model/refs", f->cache);
    assert_true(file_exists(p, "refs%2Fpr%2F1"));
    /* a commit as revision writes no ref */
    o.revision = r.commit;
    e = (ink_err){0};
    assert_int_equal(ink_hub_download("org/model", &o, &r, &e), INK_OK);
    assert_int_equal(count_entries(p), 1);
}

static void test_disk_full_preflight(void **state)
{
    fx *f = *state;
    ink_hub_opts o = fx_opts(f);
    o.free_bytes_override = 1000;
    ink_hub_result r;
    ink_err e = {0};
    assert_int_equal(ink_hub_download("org/model", &o, &r, &e), INK_E_IO);
    assert_non_null(strstr(e.msg, "disk full"));
    assert_int_equal(count_requests(f, (req_filter){.path_sub = "/resolve/"}), 0);
}

/* Running out of space mid-transfer (a file-size limit stands in for a full disk): a clear error,
 * the partial file is kept, and the same call resumes once there is room. */
static void test_disk_full_during_transfer(void **state)
{
    fx *f = *state;
    ink_hub_opts o = fx_opts(f);
    char ld[512];
    snprintf(ld, sizeof ld, "%s/local", f->root);
    const char *inc[] = {"mtp.safetensors"};
    o.include = inc;
    o.n_include = 1;
    o.local_dir = ld;
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 100000;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    ink_hub_result r;
    ink_err e = {0};
    int rc = ink_hub_download("org/model", &o, &r, &e);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    assert_int_equal(rc, INK_E_IO);
    assert_non_null(strstr(e.msg, "disk full"));
    assert_non_null(strstr(e.msg, "resume"));
    assert_int_equal(file_size(ld, "mtp.safetensors.incomplete"), 100000);
    assert_false(file_exists(ld, "mtp.safetensors"));
    clear_log(f);
    e = (ink_err){0};
    rc = ink_hub_download("org/model", &o, &r, &e);
    if (rc) fail_msg("%s", e.msg);
    assert_same_as_origin(f, ld, "mtp.safetensors");
    assert_int_equal(count_requests(f, (req_filter){.port = "cdn", .range_mode = 2}), 1);
}

static void test_progress_output(void **state)
{
    fx *f = *state;
    const char *inc[] = {"config.json", "mtp.safetensors"};
    for (int tty = 0; tty < 2; tty++) {
        ink_hub_opts o = fx_opts(f);
        o.include = inc;
        o.n_include = 2;
        o.force = 1;
        o.tty = tty;
        char *buf = NULL;
        size_t len = 0;
        o.log = open_memstream(&buf, &len);
        ink_hub_result r;
        ink_err e = {0};
        int rc = ink_hub_download("org/model", &o, &r, &e);
        fclose(o.log);
        if (rc) fail_msg("%s", e.msg);
        if (getenv("SHOW_PROGRESS")) fprintf(stderr, "%s", buf);
        assert_non_null(strstr(buf, "[1/2] config.json  66 B  downloaded"));
        assert_non_null(strstr(buf, "git blob id ok"));
        assert_non_null(strstr(buf, "[2/2] mtp.safetensors  150 kB  downloaded"));
        assert_non_null(strstr(buf, "sha256 ok"));
        if (tty) {
            assert_non_null(strstr(buf, "\r[2/2] mtp.safetensors ["));
            assert_non_null(strstr(buf, "ETA"));
            assert_non_null(strstr(buf, "/s"));
        } else {
            assert_null(strchr(buf, '\r'));
            assert_null(strstr(buf, "\033["));
        }
        free(buf);
    }
}

static void test_resolve_local(void **state)
{
    fx *f = *state;
    char dir[1024];
    ink_err e = {0};
    assert_int_equal(ink_hub_resolve_local("not-an-id", f->cache, dir, sizeof dir, &e), INK_E_INVAL);
    e = (ink_err){0};
    assert_int_equal(ink_hub_resolve_local("org/model", f->cache, dir, sizeof dir, &e), INK_E_IO);
    assert_non_null(strstr(e.msg, "inkling download org/model"));

    /* an index naming a shard that is not there: incomplete */
    ink_hub_opts o = fx_opts(f);
    const char *inc[] = {"config.json", "model.safetensors.index.json", "model-00001-*"};
    o.include = inc;
    o.n_include = 3;
    ink_hub_result r;
    e = (ink_err){0};
    int rc = ink_hub_download("org/model", &o, &r, &e);
    if (rc) fail_msg("%s", e.msg);
    e = (ink_err){0};
    assert_int_equal(ink_hub_resolve_local("org/model", f->cache, dir, sizeof dir, &e), INK_E_IO);
    assert_non_null(strstr(e.msg, "model-00002-of-00002.safetensors"));

    /* fetching the rest completes it */
    const char *inc2[] = {"model-00002-*"};
    o.include = inc2;
    o.n_include = 1;
    e = (ink_err){0};
    assert_int_equal(ink_hub_download("org/model", &o, &r, &e), INK_OK);
    e = (ink_err){0};
    assert_int_equal(ink_hub_resolve_local("org/model", f->cache, dir, sizeof dir, &e), INK_OK);
    assert_string_equal(dir, r.dir);
    /* -m ARG: a directory wins, a repo id goes through the cache */
    char dir2[1024];
    e = (ink_err){0};
    assert_int_equal(ink_hub_model_arg("org/model", f->cache, dir2, sizeof dir2, &e), INK_OK);
    assert_string_equal(dir2, r.dir);
    assert_int_equal(ink_hub_model_arg(r.dir, NULL, dir2, sizeof dir2, &e), INK_OK);
    assert_string_equal(dir2, r.dir);
    assert_int_equal(ink_hub_model_arg("org/absent", f->cache, dir2, sizeof dir2, &e), INK_E_IO);
    e = (ink_err){0};
    assert_int_equal(ink_hub_model_arg("/no/such/dir", f->cache, dir2, sizeof dir2, &e), INK_E_IO);
    assert_non_null(strstr(e.msg, "no such directory"));
    char small[8];
    e = (ink_err){0};
    assert_int_equal(ink_hub_resolve_local("org/model", f->cache, small, sizeof small, &e),
                     INK_E_INVAL);
}

/* ---- the CLI ----------------------------------------------------------------------------- */

static int run_cli(int argc, const char *const *args)
{
    char *argv[16];
    for (int i = 0; i < argc; i++) argv[i] = (char *)args[i];
    argv[argc] = NULL;
    fflush(stdout);
    int saved = dup(1);
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1); /* the directory line would clutter the test output */
    close(devnull);
    int rc = cmd_download(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    return rc;
}

static void test_cli(void **state)
{
    fx *f = *state;
    setenv("HF_ENDPOINT", f->ep, 1);
    setenv("INKLING_CACHE_DIR", f->cache, 1);
    setenv("HF_TOKEN", "env-token", 1);
    const char *a1[] = {"download"};
    assert_int_equal(run_cli(1, a1), 2);
    const char *a2[] = {"download", "org/model", "--bogus"};
    assert_int_equal(run_cli(3, a2), 2);
    const char *a3[] = {"download", "not-a-repo"};
    assert_int_equal(run_cli(2, a3), 2);
    const char *a4[] = {"download", "org/model", "--include"};
    assert_int_equal(run_cli(3, a4), 2);
    const char *a5[] = {"download", "org/model", "--include", "a**"};
    assert_int_equal(run_cli(4, a5), 2);
    const char *a6[] = {"download", "org/model", "org/other"};
    assert_int_equal(run_cli(3, a6), 2);
    const char *a7[] = {"download", "--help"};
    assert_int_equal(run_cli(2, a7), 0);
    assert_int_equal(count_all(f), 0);

    const char *ok[] = {"download", "org/model", "--include", "config.json",
                        "--include=mtp.safetensors", "--quiet"};
    assert_int_equal(run_cli(6, ok), 0);
    assert_true(count_requests(f, (req_filter){.port = "hub", .auth_mode = 2,
                                               .auth = "Bearer env-token"}) >= 3);
    assert_int_equal(count_requests(f, (req_filter){.port = "cdn", .auth_mode = 1}), 1);
    char dir[1024];
    ink_err e = {0};
    assert_int_equal(ink_hub_resolve_local("org/model", f->cache, dir, sizeof dir, &e), INK_OK);
    assert_true(file_exists(dir, "mtp.safetensors"));

    /* --token wins over HF_TOKEN */
    clear_log(f);
    const char *tk[] = {"download", "org/private", "--token", "good-token", "--quiet",
                        "--include", "config.json"};
    assert_int_equal(run_cli(7, tk), 0);
    const char *gated[] = {"download", "org/gated", "--quiet"};
    assert_int_equal(run_cli(3, gated), 1);
    unsetenv("HF_ENDPOINT");
    unsetenv("INKLING_CACHE_DIR");
    unsetenv("HF_TOKEN");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha_vectors),
        cmocka_unit_test(test_glob),
        cmocka_unit_test(test_rules),
        cmocka_unit_test_setup_teardown(test_offline_rejections, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_full_download_token_not_forwarded, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_include_drafter_only, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_globs_select_and_exclude, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_glob_matches_nothing, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_drop_midway_resumes, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_drop_always_keeps_partial_then_resumes, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_resume_across_runs, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_server_ignores_range_or_lies, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_wrong_hash, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_transient_errors_retry, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_auth_errors, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_not_found, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_revision_encoding, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_disk_full_preflight, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_disk_full_during_transfer, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_progress_output, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_resolve_local, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_cli, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
