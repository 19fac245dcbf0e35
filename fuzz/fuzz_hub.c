/* fuzz_hub.c — the Hub API answer (`GET /api/models/{repo}/revision/{rev}?blobs=true`) through the
 * downloader's listing parser and file selection. hub_list.c keeps them static, so this file includes
 * it (this object then stands in for hub_list.o wherever it is linked before libinkling.a).
 * Besides the Hub fields, the harness reads "x-include" / "x-exclude" (arrays of glob strings) from
 * the same object to drive --include / --exclude. Property: a selected file always has a safe
 * repository path (no absolute path, '..', backslash or empty component). */
#include "../src/dl/hub_list.c"

#include "fuzz.h"

static const char **globs(json_t *a, int *n)
{
    *n = 0;
    if (!json_is_array(a) || json_array_size(a) > 8) return NULL;
    const char **v = calloc(json_array_size(a) + 1, sizeof *v);
    if (!v) return NULL;
    for (size_t i = 0; i < json_array_size(a); i++) {
        const char *s = json_string_value(json_array_get(a, i));
        if (!s) continue;
        ink_err e = {0};
        if (ink_glob_check(s, &e)) continue; /* run() refuses these before any network */
        v[(*n)++] = s;
    }
    return v;
}

int ink_fuzz_hub(const uint8_t *data, size_t n)
{
    static FILE *devnull;
    if (!devnull) devnull = fopen("/dev/null", "w");
    char *body = malloc(n + 1);
    if (!body) return 0;
    memcpy(body, data, n);
    body[n] = '\0';
    json_t *extra = json_loads(body, 0, NULL);
    ink_hub_opts o = {0};
    const char **inc = globs(json_object_get(extra, "x-include"), &o.n_include);
    const char **exc = globs(json_object_get(extra, "x-exclude"), &o.n_exclude);
    o.include = inc;
    o.exclude = exc;
    hub h;
    memset(&h, 0, sizeof h);
    h.o = &o;
    h.log = devnull;
    h.repo = "fuzz/repo";
    ink_err err = {0};
    int rc = parse_listing(&h, body, &err);
    if (rc == INK_OK) {
        if (!hub_is_hex(h.commit, 40) || h.commit[40]) fz_fail("accepted commit '%.41s'", h.commit);
        ink_err e2 = {0};
        if (hub_select_files(&h, &e2) == INK_OK)
            for (int i = 0; i < h.n_files; i++)
                if (h.files[i].selected && !ink_hub_path_safe(h.files[i].path))
                    fz_fail("selected an unsafe path '%s'", h.files[i].path);
        char msg[700];
        list_candidates(&h, msg, sizeof msg);
        if (strlen(msg) >= sizeof msg) fz_fail("candidate list overflow");
    } else if (!err.msg[0]) {
        fz_fail("parse_listing failed without a message");
    }
    for (int i = 0; i < h.n_files; i++) free(h.files[i].path);
    free(h.files);
    free(inc);
    free(exc);
    json_decref(extra);
    free(body);
    return 0;
}
