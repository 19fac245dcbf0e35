/* fuzz_safetensors.c — one safetensors file written from the input (fz_write_st), then
 * ink_st_open / ink_st_map / ink_st_find. Properties: every accepted tensor lies inside the
 * mapping, its byte size matches shape and dtype, the table is sorted and findable. */
#include "fuzz.h"

#include <stdio.h>
#include <string.h>

#include "load/safetensors.h"

int ink_fuzz_safetensors(const uint8_t *data, size_t n)
{
    char path[600];
    snprintf(path, sizeof path, "%s/f.safetensors", fz_tmpdir());
    if (fz_write_st(path, data, n)) fz_fail("cannot write %s", path);
    ink_st_file f;
    ink_err err = {0};
    if (ink_st_open(&f, path, &err)) {
        if (!err.code || !err.msg[0]) fz_fail("ink_st_open failed without a message");
        return 0;
    }
    if (ink_st_map(&f, &err)) fz_fail("ink_st_map: %s", err.msg);
    unsigned sum = 0;
    for (int i = 0; i < f.n; i++) {
        const ink_st_tensor *t = &f.t[i];
        if (t->dtype < 0 || t->dtype >= INK_DT_COUNT || t->ndim < 0 || t->ndim > INK_ST_MAX_DIMS)
            fz_fail("tensor %d: dtype %d ndim %d", i, t->dtype, t->ndim);
        uint64_t bytes = (uint64_t)ink_st_numel(t) * (uint64_t)ink_dtype_bits(t->dtype) / 8;
        if (t->end < t->begin || t->end - t->begin != bytes) fz_fail("tensor %s: size mismatch", t->name);
        if (f.data_off + t->end > f.size) fz_fail("tensor %s: past the end of the file", t->name);
        if (i && strcmp(f.t[i - 1].name, t->name) >= 0) fz_fail("tensor table not sorted / duplicate");
        if (ink_st_find(&f, t->name) != t) fz_fail("ink_st_find(%s) misses", t->name);
        if (bytes) sum += t->data[0] + t->data[bytes - 1];
    }
    if (ink_st_find(&f, "") && f.n == 0) fz_fail("found a tensor in an empty file");
    (void)sum;
    ink_st_close(&f);
    return 0;
}
