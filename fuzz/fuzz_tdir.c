/* fuzz_tdir.c — a whole model directory written from the input, then the tensor directory
 * (ink_tdir_open for the backbone and for MTP), detection (ink_model_detect: config.json,
 * tensor naming, dtype / quantization summary) and binding (ink_model_open).
 *
 * Input: files, each introduced by a line "%%NAME\n" and running up to the next "\n%%" (or the
 * end). NAME is reduced to [A-Za-z0-9._-] (at most 64 bytes, no leading '.'); files whose name
 * ends in ".safetensors" go through fz_write_st (a header starting with '{' gets its length prefix
 * computed). At most 8 files. */
#include "fuzz.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "inkling.h"
#include "load/tdir.h"

static void check_tdir(const char *dir, int purpose)
{
    ink_tdir d;
    ink_err err = {0};
    if (ink_tdir_open(&d, dir, purpose, &err)) {
        if (!err.msg[0]) fz_fail("ink_tdir_open failed without a message");
        return;
    }
    for (int i = 0; i < d.n; i++) {
        const ink_tref *r = &d.refs[i];
        if (r->file < 0 || r->file >= d.n_files) fz_fail("ref %s: file %d of %d", r->name, r->file, d.n_files);
        if (i && strcmp(d.refs[i - 1].name, r->name) >= 0) fz_fail("refs not sorted / duplicate");
        if (ink_tdir_find(&d, r->name) != r) fz_fail("ink_tdir_find(%s) misses", r->name);
        int want = purpose == INK_TDIR_MTP ? ink_tdir_is_mtp_name(r->name) : ink_tdir_is_backbone_name(r->name);
        if (!want) fz_fail("ref %s registered for purpose %d", r->name, purpose);
        if (ink_tdir_map(&d, r, &err)) fz_fail("ink_tdir_map: %s", err.msg);
        size_t bytes = (size_t)(r->t->end - r->t->begin);
        const ink_st_file *f = &d.files[r->file];
        if (r->t->data < f->map || r->t->data + bytes > f->map + f->size) fz_fail("tensor %s outside its file", r->name);
    }
    ink_tdir_close(&d);
}

int ink_fuzz_tdir(const uint8_t *data, size_t n)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/model", fz_tmpdir());
    mkdir(dir, 0755);
    fz_clear_dir(dir);
    const uint8_t *p = data, *end = data + n;
    for (int files = 0; files < 8 && end - p >= 3 && p[0] == '%' && p[1] == '%'; files++) {
        p += 2;
        const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) break;
        char name[65];
        size_t k = 0;
        for (const uint8_t *q = p; q < nl && k < 64; q++) {
            char ch = (char)*q;
            int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                     ch == '_' || ch == '-';
            if (ok && !(k == 0 && ch == '.')) name[k++] = ch;
        }
        name[k] = '\0';
        const uint8_t *body = nl + 1;
        const uint8_t *next = NULL;
        for (const uint8_t *q = body; q + 2 < end; q++)
            if (q[0] == '\n' && q[1] == '%' && q[2] == '%') {
                next = q;
                break;
            }
        const uint8_t *stop = next ? next : end;
        if (k) {
            char path[700];
            snprintf(path, sizeof path, "%s/%s", dir, name);
            size_t l = strlen(name);
            int st = l >= 12 && !strcmp(name + l - 12, ".safetensors");
            int rc = st ? fz_write_st(path, body, (size_t)(stop - body)) : fz_write(path, body, (size_t)(stop - body));
            if (rc) fz_fail("cannot write %s", path);
        }
        p = next ? next + 1 : end;
    }
    check_tdir(dir, INK_TDIR_TARGET);
    check_tdir(dir, INK_TDIR_MTP);
    ink_model_info info;
    ink_err err = {0};
    if (ink_model_detect(dir, &info, &err) == INK_OK) {
        if (info.supported && info.reason[0]) fz_fail("supported but with a reason: %s", info.reason);
        if (info.supported) {
            ink_model *m = NULL;
            ink_model_opts mo = {.n_threads = 1};
            ink_err e2 = {0};
            if (ink_model_open(&m, dir, &mo, &e2) == INK_OK) {
                if (ink_model_n_vocab(m) <= 0 || ink_model_n_embd(m) <= 0) fz_fail("opened model without a size");
                ink_model_free(m);
            }
        }
    }
    return 0;
}
