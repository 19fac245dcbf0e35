/*
 * safetensors.h — one safetensors file: header parsing, validation and zero-copy mmap views.
 *
 * Format (formats.md §1): u64 LE header length N, N bytes of JSON (one object: tensor name ->
 * {dtype, shape, data_offsets}, optional "__metadata__" of strings), then the data buffer.
 * Every rule of formats.md §1.3 is enforced: N <= 100,000,000 and 8+N <= file size, the header is
 * a JSON object starting with '{', known dtypes, checked numel*bits/8 == end-begin (overflow
 * checked), tensors tile the data buffer exactly (no holes, overlaps, or trailing bytes), no
 * duplicate names. Knows nothing about Inkling. Depends on base (ink_err) and Jansson.
 *
 * Ownership: ink_st_open fills a caller-owned ink_st_file; ink_st_close releases its names, the
 * tensor table, the descriptor and the mapping. Tensor data pointers borrow the mapping.
 */
#ifndef INK_SAFETENSORS_H
#define INK_SAFETENSORS_H

#include "inkling.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum ink_dtype {
    INK_DT_F32, INK_DT_F16, INK_DT_BF16, INK_DT_F64,
    INK_DT_U8, INK_DT_I8, INK_DT_U16, INK_DT_I16, INK_DT_U32, INK_DT_I32, INK_DT_U64, INK_DT_I64,
    INK_DT_BOOL, INK_DT_F8_E4M3, INK_DT_F8_E5M2, INK_DT_F8_E8M0,
    INK_DT_COUNT
};

#define INK_ST_MAX_DIMS 8
#define INK_ST_MAX_HEADER 100000000ull

typedef struct ink_st_tensor {
    char *name;                      /* owned by the file */
    int dtype;                       /* enum ink_dtype */
    int ndim;
    int64_t shape[INK_ST_MAX_DIMS];
    uint64_t begin, end;             /* byte range inside the data buffer */
    const uint8_t *data;             /* into the mapping (NULL until mapped) */
} ink_st_tensor;

typedef struct ink_st_file {
    char *path;                      /* owned */
    int fd;
    uint8_t *map;                    /* whole file, PROT_READ, MAP_PRIVATE; NULL until mapped */
    size_t size;                     /* file size in bytes */
    uint64_t data_off;               /* 8 + N */
    int n;                           /* number of tensors */
    ink_st_tensor *t;                /* [n], sorted by name */
} ink_st_file;

/* Parses and validates the header of `path` (reads 8 + N bytes with pread; no mapping). */
int ink_st_open(ink_st_file *f, const char *path, ink_err *err);
/* Maps the file (once) and sets every tensor's data pointer. */
int ink_st_map(ink_st_file *f, ink_err *err);
void ink_st_close(ink_st_file *f);
/* Binary search by name; NULL if absent. */
const ink_st_tensor *ink_st_find(const ink_st_file *f, const char *name);

const char *ink_dtype_name(int dtype);
int ink_dtype_bits(int dtype);
int64_t ink_st_numel(const ink_st_tensor *t);

/* Element i of a mapped array that may sit at any address (formats.md: a reader must not assume
 * tensor data are aligned): memcpy loads, no alignment UB; compilers emit one plain load. */
static inline uint16_t ink_ld_u16(const void *p, size_t i)
{
    uint16_t v;
    memcpy(&v, (const unsigned char *)p + 2 * i, sizeof v);
    return v;
}
static inline float ink_ld_f32(const void *p, size_t i)
{
    float v;
    memcpy(&v, (const unsigned char *)p + 4 * i, sizeof v);
    return v;
}

/* Scalar conversions used by loaders and reference kernels. */
static inline float ink_bf16_to_f32(uint16_t h)
{
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}
float ink_f16_to_f32(uint16_t h);
uint16_t ink_f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */
uint16_t ink_f32_to_f16(float f);  /* round to nearest even */
float ink_e4m3_to_f32(uint8_t b);

#endif
