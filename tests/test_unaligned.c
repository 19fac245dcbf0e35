/* test_unaligned.c — tensor data at odd file offsets (legal: formats.md says a reader must not assume
 * alignment) are used in place, never copied: every weight, scale and bias pointer of the model lies
 * inside the file mapping, and the logits equal those of the aligned twin bitwise under every kernel
 * set this CPU has (and the int8 path for affine 4-bit). `make asan` runs this under UBSan, which
 * traps any misaligned scalar load. Also: the header-only open (`inkling info`) maps nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "inkling.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "support/ckpt.h"
#include "support/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { V_F32, V_BF16, V_Q4, V_NVFP4, V_COUNT };
static const char *const vname[V_COUNT] = {"f32", "bf16", "q4", "nvfp4"};

static void spec_of(int v, tiny_spec *sp)
{
    tiny_default(sp);
    if (v == V_BF16) sp->bf16 = 1;
    if (v == V_Q4) {
        sp->hidden = 128, sp->dense_inter = 128, sp->expert_inter = 64;
        sp->qbits = 4, sp->qgroup = 64, sp->qembed = 1;
        sp->naming = TINY_NAMES_PRESPLIT;
    }
    if (v == V_NVFP4) sp->nvfp4 = 1;
}

static ink_model *open_act(const char *dir, int act)
{
    ink_err e = {0};
    ink_model *m = NULL;
    ink_model_opts o = {.n_threads = 2, .activations = act};
    if (ink_model_open(&m, dir, &o, &e)) fail_msg("open %s: %s", dir, e.msg);
    return m;
}

static ink_model *write_open(const tiny_spec *sp, const char *tag, char *dir, size_t n)
{
    assert_int_equal(tu_tmpdir(dir, n, tag), 0);
    assert_int_equal(tiny_write(dir, sp), 0);
    return open_act(dir, INK_ACT_F32);
}

/* Is [p, p + 1) inside one of the model's file mappings? */
static int in_map(const ink_model *m, const void *p)
{
    const uint8_t *b = p;
    for (int i = 0; i < m->w.td.n_files; i++) {
        const ink_st_file *f = &m->w.td.files[i];
        if (f->map && b >= f->map && b < f->map + f->size) return 1;
    }
    return 0;
}

static void check_mat(const ink_model *m, const ink_mat *w, int *n_odd, int *n_checked)
{
    const void *p[3] = {w->data, w->scales, w->biases};
    for (int i = 0; i < 3; i++) {
        if (!p[i]) continue;
        if (!in_map(m, p[i])) fail_msg("a weight pointer (part %d) lies outside every file mapping: a copy", i);
        *n_odd += (int)((uintptr_t)p[i] & 1);
        ++*n_checked;
    }
}

/* Checks every matrix of the model; returns how many pointers are at odd addresses. */
static int check_in_place(const ink_model *m, int *n_checked)
{
    int odd = 0;
    *n_checked = 0;
    check_mat(m, &m->embed, &odd, n_checked);
    check_mat(m, &m->unembed, &odd, n_checked);
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const ink_layer_w *L = &m->layers[l];
        const ink_mat *a[] = {&L->at.wq, &L->at.wk, &L->at.wv, &L->at.wr, &L->at.wo};
        for (int i = 0; i < 5; i++) check_mat(m, a[i], &odd, n_checked);
        if (L->experts) {
            check_mat(m, &L->router, &odd, n_checked);
            for (int e = 0; e < m->cfg.n_expert; e++) {
                check_mat(m, &L->experts[e].gate, &odd, n_checked);
                check_mat(m, &L->experts[e].up, &odd, n_checked);
                check_mat(m, &L->experts[e].down, &odd, n_checked);
            }
        } else {
            check_mat(m, &L->dense.gate, &odd, n_checked);
            check_mat(m, &L->dense.down, &odd, n_checked);
        }
    }
    return odd;
}

static float *logits(ink_model *m, const int32_t *ids, int T)
{
    int V = ink_model_n_vocab(m);
    float *lg = malloc((size_t)T * V * sizeof(float));
    assert_non_null(lg);
    ink_session *s;
    ink_err e = {0};
    assert_int_equal(ink_session_create(&s, m, 256, &e), 0);
    ink_eval_out o = {.logits = lg, .all_logits = 1};
    if (ink_session_eval(s, ids, T, &o, &e)) fail_msg("eval: %s", e.msg);
    ink_session_free(s);
    return lg;
}

static void test_misaligned_in_place(void **state)
{
    (void)state;
    const ink_kernels *sets[3] = {ink_kernels_scalar(), ink_kernels_avx2(), ink_kernels_avx512()};
    int32_t ids[24];
    for (int t = 0; t < 24; t++) ids[t] = (int32_t)((t * 37 + 5) % 120);
    for (int v = 0; v < V_COUNT; v++) {
        tiny_spec sp;
        spec_of(v, &sp);
        char da[256], dm[256], tag[32];
        snprintf(tag, sizeof tag, "ua-%s", vname[v]);
        ink_model *ma = write_open(&sp, tag, da, sizeof da);
        sp.misalign = 1;
        ink_model *mm = write_open(&sp, tag, dm, sizeof dm);
        int na, nm;
        int odd_a = check_in_place(ma, &na), odd_m = check_in_place(mm, &nm);
        assert_int_equal(na, nm);
        assert_true(na > 20);
        assert_int_equal(odd_a, 0);
        if (odd_m != nm) fail_msg("%s: only %d of %d pointers at odd addresses", vname[v], odd_m, nm);
        assert_int_equal(ma->w.n_owned, mm->w.n_owned); /* same small f32 vectors, no extra buffers */
        int V = ink_model_n_vocab(ma);
        for (int k = 0; k < 3; k++) {
            if (!sets[k]) continue;
            for (int i8 = 0; i8 < 1 + (v == V_Q4); i8++) {
                ink_kernels_select(sets[k]);
                ink_model *a8 = i8 ? open_act(da, INK_ACT_INT8) : NULL, *m8 = i8 ? open_act(dm, INK_ACT_INT8) : NULL;
                float *la = logits(i8 ? a8 : ma, ids, 24), *lm = logits(i8 ? m8 : mm, ids, 24);
                ink_model_free(a8), ink_model_free(m8);
                if (memcmp(la, lm, (size_t)24 * V * sizeof(float)))
                    fail_msg("%s, kernel set %d, int8 %d: misaligned logits differ from the aligned twin", vname[v], k, i8);
                free(la), free(lm);
            }
        }
        ink_kernels_select(NULL);
        ink_model_free(ma), ink_model_free(mm);
    }
}

/* The header-only open maps no file, binds with the same checks, counts the same parameters, and
 * refuses to evaluate; `inkling info` uses it. */
static void test_header_only(void **state)
{
    (void)state;
    tiny_spec sp;
    spec_of(V_BF16, &sp);
    sp.misalign = 1;
    sp.n_shards = 3;
    char dir[256];
    ink_model *full = write_open(&sp, "ua-hdr", dir, sizeof dir);
    ink_model *h = NULL;
    ink_err e = {0};
    ink_model_opts o = {.n_threads = 1};
    if (ink_model_open_headers(&h, dir, &o, &e)) fail_msg("open headers: %s", e.msg);
    for (int i = 0; i < h->w.td.n_files; i++) assert_null(h->w.td.files[i].map);
    assert_true(h->info.n_params > 0);
    assert_true(h->info.n_params == full->info.n_params);
    ink_session *s;
    assert_int_equal(ink_session_create(&s, h, 64, &e), 0);
    int32_t id = 3;
    assert_int_equal(ink_session_eval(s, &id, 1, NULL, &e), INK_E_INVAL);
    assert_non_null(strstr(e.msg, "header-only"));
    ink_session_free(s);
    ink_model_free(h), ink_model_free(full);

    char cmd[600], out[8192];
    snprintf(cmd, sizeof cmd, "%s info -m %s", tu_bin(), dir);
    assert_int_equal(tu_run(cmd, out, sizeof out, NULL, 0), 0);
    assert_non_null(strstr(out, "supported:    yes"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_misaligned_in_place),
        cmocka_unit_test(test_header_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
