/* test_e2e_chat.c — the bundled model (models/inkling-kjv) speaks the Inkling chat format end to
 * end, with no -m anywhere: `inkling chat` driven through a pipe (multi-turn, prefix reuse,
 * /reset), and `inkling serve` driven by the official OpenAI Node SDK (tests/support/chat_sdk.cjs:
 * chat and completions, stream and not, stream_options.include_usage, reasoning_effort; greedy
 * stream == non-stream). The SDK test is SKIPPED (never passed) without node and the SDK. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "support/util.h"

static char g_out[65536], g_err[65536];

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* The n-th (0-based) line of s that starts with `prefix`, copied into buf. */
static const char *nth_line(const char *s, const char *prefix, int n, char *buf, size_t cap)
{
    for (const char *p = s; p && *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (!strncmp(p, prefix, strlen(prefix)) && n-- == 0) {
            snprintf(buf, cap, "%.*s", (int)len, p);
            return buf;
        }
        p = e ? e + 1 : NULL;
    }
    return NULL;
}

static void test_chat_pipe(void **state)
{
    (void)state;
    char cmd[1024], gen[8192], line[512];
    /* the first turn's reply is what `generate` prints for the same prompt */
    snprintf(cmd, sizeof cmd, "%s generate -p 'Who was Moses?' -n 16 --temp 0 --threads 1", tu_bin());
    assert_int_equal(tu_run(cmd, gen, sizeof gen, g_err, sizeof g_err), 0);
    size_t gl = strlen(gen);
    assert_true(gl > 1);
    snprintf(cmd, sizeof cmd,
             "printf 'Who was Moses?\\nAnd Aaron?\\n/reset\\nWho was Moses?\\n/exit\\nnot read\\n' | "
             "%s chat -n 16 --temp 0 --threads 1", tu_bin());
    int rc = tu_run(cmd, g_out, sizeof g_out, g_err, sizeof g_err);
    if (rc) fprintf(stderr, "# %s\n", g_err);
    assert_int_equal(rc, 0);
    /* three replies: R1 R2 R3, R1 == R3 == generate's text (after /reset the history is gone) */
    size_t ol = strlen(g_out);
    assert_true(ol > 2 * gl);
    assert_memory_equal(g_out, gen, gl);
    assert_memory_equal(g_out + ol - gl, gen, gl);
    assert_int_equal(count(g_err, "prompt eval:"), 3);
    assert_int_equal(count(g_err, "(conversation reset)"), 1);
    /* turn 2 feeds only its own tokens: the state holds turn 1 */
    assert_non_null(nth_line(g_err, "prompt eval:", 0, line, sizeof line));
    assert_null(strstr(line, "(prefix reused)"));
    int fed1 = atoi(line + strlen("prompt eval: "));
    assert_non_null(nth_line(g_err, "prompt eval:", 1, line, sizeof line));
    assert_non_null(strstr(line, "(prefix reused)"));
    int fed2 = atoi(line + strlen("prompt eval: "));
    assert_true(fed2 > 0 && fed2 < fed1);
    /* turn 3 (after /reset) starts over: the history is gone, but its prompt is turn 1's, so the prompt
     * cache resumes from turn 1's checkpoint and feeds only the last prompt token (same reply) */
    assert_non_null(nth_line(g_err, "prompt eval:", 2, line, sizeof line));
    assert_non_null(strstr(line, "(prefix reused)"));
    assert_int_equal(atoi(line + strlen("prompt eval: ")), 1);
    assert_true(fed1 > 1);
}

/* ---- inkling serve + the OpenAI Node SDK ------------------------------------------------------ */

static const char *npm_dir(void)
{
    const char *d = getenv("INKLING_NPM_DIR");
    return d && *d ? d : "/tmp/inkling-test-npm";
}

static void sleep_ms(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static void test_openai_sdk_bundled(void **state)
{
    (void)state;
    char cmd[2048], log[256];
    if (tu_run("command -v node", g_out, sizeof g_out, NULL, 0) != 0) {
        fprintf(stderr, "# node not found: the OpenAI SDK test is skipped\n");
        skip();
    }
    snprintf(cmd, sizeof cmd, "test -f %s/node_modules/openai/package.json || timeout 180 npm install --prefix %s "
                              "--no-audit --no-fund --loglevel=error openai@4", npm_dir(), npm_dir());
    if (tu_run(cmd, g_out, sizeof g_out, g_err, sizeof g_err) != 0) {
        fprintf(stderr, "# npm install openai failed (no network?): the OpenAI SDK test is skipped\n");
        skip();
    }
    /* no -m: the bundled default model */
    snprintf(log, sizeof log, "tests/tmp/e2e-serve-%d.log", (int)getpid());
    unlink(log);
    snprintf(cmd, sizeof cmd, "exec %s serve --port 0 --threads 1 </dev/null >/dev/null 2>%s", tu_bin(), log);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    assert_true(pid > 0);
    int port = 0;
    for (int i = 0; i < 6000 && !port; i++) {
        FILE *f = fopen(log, "r");
        if (f) {
            size_t n = fread(g_err, 1, sizeof g_err - 1, f);
            g_err[n] = 0;
            fclose(f);
            const char *p = strstr(g_err, "listening on http://127.0.0.1:");
            if (p) port = atoi(p + strlen("listening on http://127.0.0.1:"));
        }
        if (!port) sleep_ms(10);
    }
    if (!port) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("serve did not start: %s", g_err);
    }
    snprintf(cmd, sizeof cmd, "for i in $(seq 600); do curl -sf http://127.0.0.1:%d/health >/dev/null && exit 0; "
                              "sleep 0.1; done; exit 1", port);
    int ready = tu_run(cmd, g_out, sizeof g_out, NULL, 0);
    snprintf(cmd, sizeof cmd, "node tests/support/chat_sdk.cjs %s/node_modules/openai http://127.0.0.1:%d/v1", npm_dir(), port);
    int rc = ready ? -1 : tu_run(cmd, g_out, sizeof g_out, g_err, sizeof g_err);
    kill(pid, SIGTERM);
    int st = 0;
    waitpid(pid, &st, 0);
    if (rc) fprintf(stderr, "# sdk: %s\n%s\n", g_out, g_err);
    assert_int_equal(rc, 0);
    json_t *j = json_loads(g_out, 0, NULL);
    assert_non_null(j);
#define S(k) json_string_value(json_object_get(j, k))
#define I(o, k) json_integer_value(json_object_get(json_object_get(j, o), k))
    assert_string_equal(S("model"), "inkling-kjv");
    assert_string_equal(S("whole_role"), "assistant");
    assert_true(strlen(S("whole")) > 0);
    assert_string_equal(S("whole"), S("streamed"));
    assert_string_equal(S("whole_finish"), S("streamed_finish"));
    assert_int_equal(I("whole_usage", "completion_tokens"), I("streamed_usage", "completion_tokens"));
    assert_int_equal(I("whole_usage", "prompt_tokens"), I("streamed_usage", "prompt_tokens"));
    assert_true(I("whole_usage", "completion_tokens") > 0 && I("whole_usage", "completion_tokens") <= 24);
    assert_int_equal(I("whole_usage", "total_tokens"),
                     I("whole_usage", "prompt_tokens") + I("whole_usage", "completion_tokens"));
    assert_int_equal(json_integer_value(json_object_get(j, "streamed_roles")), 1);
    assert_true(json_is_true(json_object_get(j, "efforts_ok")));
    assert_int_equal(json_integer_value(json_object_get(j, "bad_effort_status")), 400);
    assert_string_equal(S("turn2_whole"), S("turn2_streamed"));
    assert_true(json_integer_value(json_object_get(j, "turn2_prompt_tokens")) > I("whole_usage", "prompt_tokens"));
    assert_true(json_integer_value(json_object_get(j, "system_prompt_tokens")) > I("whole_usage", "prompt_tokens"));
    assert_true(strlen(S("completion")) > 0);
    assert_string_equal(S("completion"), S("completion_streamed"));
    assert_int_equal(I("completion_usage", "completion_tokens"), 12);
    assert_int_equal(I("completion_streamed_usage", "completion_tokens"), 12);
    json_decref(j);
    /* the greedy chat answer is what `inkling generate` prints for the same prompt and effort */
    snprintf(cmd, sizeof cmd, "%s generate -p 'Who was Moses?' --reasoning-effort low -n 24 --temp 0 --threads 1", tu_bin());
    static char gen[65536];
    assert_int_equal(tu_run(cmd, gen, sizeof gen, g_err, sizeof g_err), 0);
    size_t gl = strlen(gen);
    if (gl && gen[gl - 1] == '\n') gen[--gl] = 0;
    j = json_loads(g_out, 0, NULL);
    assert_string_equal(S("whole"), gen);
    json_decref(j);
#undef S
#undef I
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_pipe),
        cmocka_unit_test(test_openai_sdk_bundled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
