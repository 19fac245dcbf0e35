/* test_mpi.c — expert parallelism over MPI (issue 19): `mpirun -np 2` and `-np 3` on localhost give
 * logits bitwise equal to one process (the golden MoE model, the bundled one and its MLX 4-bit and
 * NVFP4 quantizations), greedy speculative output and traces equal to one process and to plain
 * decoding; a killed rank, a rank that cannot load its share and mismatched checkpoints end the job
 * with a message naming the rank, never a hang (every mpirun runs under `timeout`). Each test
 * reports SKIPPED (never passed) where mpirun is missing or the binary was built without MPI. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support/util.h"

#include <jansson.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GOLDEN "tests/data/golden/tiny-moe"
#define KJV "models/inkling-kjv"
#define TIMEOUT "timeout 120 "

static char out[65536], err[65536], dir[512], mpirun[256];

static int run(const char *fmt, ...)
{
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = tu_run(cmd, out, sizeof out, err, sizeof err);
    if (rc) fprintf(stderr, "exit %d: %s\n%s\n", rc, cmd, err);
    return rc;
}

/* SKIPs the test unless mpirun exists and the binary has MPI; sets `mpirun` (localhost,
 * oversubscribed, as root where needed; leak checks off: Open MPI's own allocations are not ours). */
static void need_mpi(void)
{
    if (tu_run("command -v mpirun", out, sizeof out, err, sizeof err) != 0) {
        fprintf(stderr, "SKIP: mpirun not installed (apt-get install openmpi-bin libopenmpi-dev)\n");
        skip();
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s --version", tu_bin());
    if (tu_run(cmd, out, sizeof out, err, sizeof err) != 0 || !strstr(out, "expert parallel: MPI")) {
        fprintf(stderr, "SKIP: %s was built without MPI\n", tu_bin());
        skip();
    }
    snprintf(mpirun, sizeof mpirun, "ASAN_OPTIONS=detect_leaks=0 " TIMEOUT "mpirun --oversubscribe --bind-to none %s",
             geteuid() == 0 ? "--allow-run-as-root" : "");
}

/* 1 if files a and b hold the same bytes. */
static int same_file(const char *a, const char *b)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

static const char *golden_ids =
    "180,103,239,99,368,74,201,357,91,318,363,209,217,208,361,362,236,346,164,160,275,77,15,177,103,150,212,212,140,249,"
    "74,347,376,220,131,338,351,83,148,311";

static void logits_equal(const char *model, const char *ids, const char *tag)
{
    char one[600], many[600];
    snprintf(one, sizeof one, "%s/%s-1.npy", dir, tag);
    assert_int_equal(run("%s logits -m %s --prompt-ids %s -o %s -t 1", tu_bin(), model, ids, one), 0);
    for (int n = 2; n <= 3; n++) {
        snprintf(many, sizeof many, "%s/%s-%d.npy", dir, tag, n);
        assert_int_equal(run("%s -np %d %s logits -m %s --prompt-ids %s -o %s -t 1", mpirun, n, tu_bin(), model, ids, many), 0);
        assert_true(same_file(one, many));
        assert_non_null(strstr(err, "expert parallel:"));
        assert_non_null(strstr(err, "peak RSS"));
    }
}

static void test_logits_golden(void **state)
{
    (void)state;
    need_mpi();
    logits_equal(GOLDEN, golden_ids, "golden");
}

static void test_logits_bundled(void **state)
{
    (void)state;
    need_mpi();
    if (access(KJV "/model.safetensors", R_OK)) skip();
    logits_equal(KJV, "5,17,300,42,9,1000,77,2048,13,600,4000,250", "kjv");
}

/* Quantized weights (MLX 4-bit with int8 activations, NVFP4 routed experts) split bitwise too. */
static void test_logits_quantized(void **state)
{
    (void)state;
    need_mpi();
    if (access(KJV "/model.safetensors", R_OK)) skip();
    const char *modes[2][2] = {{"q4", "--bits 4"}, {"nvfp4", "--mode nvfp4"}};
    for (int i = 0; i < 2; i++) {
        char q[600];
        snprintf(q, sizeof q, "%s/%s", dir, modes[i][0]);
        assert_int_equal(run("%s quantize -m " KJV " -o %s %s --force", tu_bin(), q, modes[i][1]), 0);
        logits_equal(q, "5,17,300,42,9,1000,77,2048", modes[i][0]);
    }
}

/* Greedy MTP with a fixed block: ids and trace of N ranks equal one process's, ids equal plain. */
static void test_speculative(void **state)
{
    (void)state;
    need_mpi();
    const char *model = access(KJV "/mtp.safetensors", R_OK) ? GOLDEN : KJV;
    const char *g = "generate --prompt-ids 5,17,300,42 -n 40 --temp 0 --ignore-eos -t 1";
    char plain[65536], spec[65536], t1[600], tn[600];
    assert_int_equal(run("%s %s -m %s --draft-kind none", tu_bin(), g, model), 0);
    snprintf(plain, sizeof plain, "%s", out);
    snprintf(t1, sizeof t1, "%s/trace-1.json", dir);
    assert_int_equal(run("%s %s -m %s --draft-kind mtp --draft-block-size 3 --trace %s", tu_bin(), g, model, t1), 0);
    snprintf(spec, sizeof spec, "%s", out);
    assert_string_equal(plain, spec);
    for (int n = 2; n <= 3; n++) {
        char sj[600];
        snprintf(tn, sizeof tn, "%s/trace-%d.json", dir, n);
        snprintf(sj, sizeof sj, "%s/stats-%d.json", dir, n);
        assert_int_equal(run("%s -np %d %s %s -m %s --draft-kind mtp --draft-block-size 3 --trace %s --stats-json %s",
                             mpirun, n, tu_bin(), g, model, tn, sj), 0);
        assert_string_equal(out, plain);
        assert_true(same_file(t1, tn));
        json_error_t je;
        json_t *st = json_load_file(sj, 0, &je), *ep = json_object_get(st, "expert_parallel");
        assert_non_null(ep);
        assert_int_equal(json_integer_value(json_object_get(ep, "ranks")), n);
        assert_int_equal(json_array_size(json_object_get(ep, "per_rank")), n);
        assert_true(json_integer_value(json_object_get(json_array_get(json_object_get(ep, "per_rank"), n - 1),
                                                       "peak_rss_bytes")) > 0);
        json_decref(st);
        assert_int_equal(run("%s -np %d %s %s -m %s --draft-kind none --profile", mpirun, n, tu_bin(), g, model), 0);
        assert_string_equal(out, plain);
        assert_non_null(strstr(err, "expert exchange"));
    }
}

/* Rank 1 killed mid-generation: the job ends (not the timeout's 124) with a message naming rank 1. */
static void test_killed_rank(void **state)
{
    (void)state;
    need_mpi();
    const char *model = access(KJV "/model.safetensors", R_OK) ? GOLDEN : KJV;
    int rc = run("(d=%s; rm -f $d/pid.*; (%s -np 2 sh -c 'echo $$ > %s/pid.$OMPI_COMM_WORLD_RANK; exec \"$0\" \"$@\"' "
                 "%s generate -m %s --prompt-ids 5,6,7 -n 4000 -c 4096 --ignore-eos --draft-kind none -t 1 >/dev/null; "
                 "echo $? > $d/rc) & for i in $(seq 600); do [ -s $d/pid.1 ] && break; sleep 0.1; done; sleep 0.5; "
                 "kill -9 $(cat $d/pid.1); wait; exit $(cat $d/rc))",
                 dir, mpirun, dir, tu_bin(), model);
    assert_int_not_equal(rc, 0);
    assert_int_not_equal(rc, 124);
    if (!strstr(err, "rank 1")) fprintf(stderr, "stderr:\n%s\n", err);
    assert_non_null(strstr(err, "rank 1"));
}

/* Copies of the golden model: b with another config.json (same tensors), c with a corrupt header of
 * the same size. MPMD launches give rank 1 the copy. */
static void test_mismatch_and_load_failure(void **state)
{
    (void)state;
    need_mpi();
    assert_int_equal(run("d=%s; rm -rf $d/a $d/b $d/c; cp -r " GOLDEN " $d/a && cp -r " GOLDEN " $d/b && cp -r " GOLDEN
                         " $d/c && echo ' ' >> $d/b/config.json && printf XXXXXXXX | dd of=$d/c/model.safetensors "
                         "conv=notrunc 2>/dev/null", dir), 0);
    const char *g = "generate --prompt-ids 5,6,7 -n 4 -t 1";
    int rc = run("%s -np 1 %s %s -m %s/a : -np 1 %s %s -m %s/b", mpirun, tu_bin(), g, dir, tu_bin(), g, dir);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err, "rank 1: checkpoint"));
    assert_non_null(strstr(err, "differs from rank 0's"));
    rc = run("%s -np 1 %s %s -m %s/a : -np 1 %s %s -m %s/c", mpirun, tu_bin(), g, dir, tu_bin(), g, dir);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err, "rank 1: cannot load its share"));
    assert_non_null(strstr(err, "/c/model.safetensors"));
    assert_non_null(strstr(err, "rank 1 could not load its share"));
    /* a dense model has nothing to split */
    rc = run("%s -np 2 %s %s -m tests/data/golden/tiny-dense", mpirun, tu_bin(), g);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err, "0 MoE layers"));
}

/* Ranks > 0 need only config.json and the model's safetensors (no tokenizer, no MTP head): rank 1
 * and 2 get a directory holding just those (links), rank 0 the full one; greedy MTP output as one
 * process gives. */
static void test_worker_files(void **state)
{
    (void)state;
    need_mpi();
    if (access(KJV "/mtp.safetensors", R_OK)) skip();
    assert_int_equal(run("d=%s; rm -rf $d/w; mkdir $d/w && ln -s $PWD/" KJV "/config.json $PWD/" KJV
                         "/model.safetensors $d/w/", dir), 0);
    const char *g = "generate --prompt-ids 5,17,300,42 -n 24 --temp 0 --ignore-eos -t 1 --draft-kind mtp --draft-block-size 3";
    char one[65536];
    assert_int_equal(run("%s %s -m " KJV, tu_bin(), g), 0);
    snprintf(one, sizeof one, "%s", out);
    assert_int_equal(run("%s -np 1 %s %s -m " KJV " : -np 2 %s %s -m %s/w", mpirun, tu_bin(), g, tu_bin(), g, dir), 0);
    assert_string_equal(out, one);
}

/* --parallel expert with one rank (mpirun -np 1) runs as one process (same logits); another value is
 * the command's to refuse (serve's --parallel N is its slot count). */
static void test_parallel_flag_one_rank(void **state)
{
    (void)state;
    need_mpi();
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/one-a.npy", dir);
    snprintf(b, sizeof b, "%s/one-b.npy", dir);
    assert_int_equal(run("%s logits -m " GOLDEN " --prompt-ids %s -o %s -t 1", tu_bin(), golden_ids, a), 0);
    assert_int_equal(run("%s -np 1 %s logits --parallel expert -m " GOLDEN " --prompt-ids %s -o %s -t 1", mpirun, tu_bin(),
                         golden_ids, b), 0);
    assert_true(same_file(a, b));
    assert_int_equal(run("%s logits --parallel pipeline -m " GOLDEN " --prompt-ids 1 -o %s", tu_bin(), b), 2);
    assert_non_null(strstr(err, "--parallel"));
}

int main(void)
{
    if (tu_tmpdir(dir, sizeof dir, "mpi")) return 1;
    const struct CMUnitTest t[] = {
        cmocka_unit_test(test_logits_golden),
        cmocka_unit_test(test_logits_bundled),
        cmocka_unit_test(test_logits_quantized),
        cmocka_unit_test(test_speculative),
        cmocka_unit_test(test_killed_rank),
        cmocka_unit_test(test_mismatch_and_load_failure),
        cmocka_unit_test(test_worker_files),
        cmocka_unit_test(test_parallel_flag_one_rank),
    };
    return cmocka_run_group_tests(t, NULL, NULL);
}
