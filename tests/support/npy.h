/* npy.h — minimal NPY v1 reader for the golden arrays ('<f4' and '<i4', C order). */
#ifndef INK_TEST_NPY_H
#define INK_TEST_NPY_H

#include <stdint.h>

typedef struct npy {
    int is_int;        /* 1: int32 data in .i, 0: float32 in .f */
    int ndim;
    int64_t shape[4];
    int64_t n;
    float *f;
    int32_t *i;
} npy;

/* Loads `path`; returns 0 or -1 (message on stderr). Free with npy_free. */
int npy_load(const char *path, npy *out);
void npy_free(npy *a);

#endif
