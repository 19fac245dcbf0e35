/* test_fuzz_regressions.c — replays, through the fuzz targets' own entry points (fuzz/fuzz.h),
 * every input kept in fuzz/regressions/<target>/ (inputs that once crashed, now fixed) and every
 * seed in fuzz/corpus/<target>/. A target that aborts or trips a sanitizer fails the binary
 * (tests/run.sh counts it); one cmocka test per target. Run from the repository root. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../fuzz/fuzz.h"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Replays every regular file of dir through fn; returns the number replayed. */
static int replay_dir(const char *dir, int (*fn)(const uint8_t *, size_t))
{
    DIR *dp = opendir(dir);
    if (!dp) return 0;
    char *names[4096];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dp)) && n < 4096)
        if (de->d_name[0] != '.') names[n++] = strdup(de->d_name);
    closedir(dp);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    int done = 0;
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(names[i]);
            continue;
        }
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        uint8_t *buf = malloc((size_t)st.st_size + 1);
        assert_non_null(buf);
        size_t got = fread(buf, 1, (size_t)st.st_size, f);
        fclose(f);
        assert_int_equal(got, (size_t)st.st_size);
        fn(buf, got);
        free(buf);
        free(names[i]);
        done++;
    }
    return done;
}

static void replay(void **state)
{
    const ink_fuzz_target *t = *state;
    char dir[256];
    snprintf(dir, sizeof dir, "fuzz/regressions/%s", t->name);
    int nreg = replay_dir(dir, t->fn);
    snprintf(dir, sizeof dir, "fuzz/corpus/%s", t->name);
    int nseed = replay_dir(dir, t->fn);
    printf("  %s: %d regression input(s), %d seed(s)\n", t->name, nreg, nseed);
    assert_true(nseed > 0);
}

int main(void)
{
    struct CMUnitTest tests[16];
    size_t n = 0;
    for (const ink_fuzz_target *t = ink_fuzz_targets; t->name && n < 16; t++)
        tests[n++] = (struct CMUnitTest){t->name, replay, NULL, NULL, (void *)t};
    return _cmocka_run_group_tests("fuzz_regressions", tests, n, NULL, NULL);
}
