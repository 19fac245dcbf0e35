/*
 * safetensors.h — one safetensors file: header parsing, validation and zero-copy mmap views.
 *
 * Format (formats.md §1): u64 LE header length N, N bytes of JSON (one object: tensor name ->
 * {dtype, shape, data_offsets}, optional "__metadata__" of strings), then the data buffer.
 * Every rule of formats.md §1.3 is enforced: N <= 100,000,000 and 8+N <= file size, the header is
 * a JSON object starting with '{', known dtypes, checked numel*bits/8 == end-begin (overflow
 * checked), tensors tile the data buffer exactly (no holes, overlaps, or trailing bytes), no
 * duplicate names. Knows nothing about Inkling. Depends on base (ink_err, dtype.h) and Jansson.
 *
 * Ownership: ink_st_open fills a caller-owned ink_st_file; ink_st_close releases its names, the
 * tensor table, the descriptor and the mapping. Tensor data pointers borrow the mapping.
 *
 * Mapped or read. By default the file is mapped (the page cache's pages, shared, never copied). With
 * `read` set before ink_st_map the whole file is read instead into memory of its own
 * (`--no-mmap`): it costs the file's size in RAM and a read at start-up, and avoids what some hosts do
 * to mapped page cache (on a 2-vCPU VM whose kernel runs a DAMON page-out scheme on file pages,
 * reading a mapped 1 GiB file stalled 100-450 ms every ~0.5 s; the same bytes read into anonymous
 * memory ran steadily; docs/benchmarks.md).
 */
#ifndef INK_SAFETENSORS_H
#define INK_SAFETENSORS_H

#include "base/dtype.h"
#include "inkling.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

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
    uint8_t *map;                    /* whole file, PROT_READ (mapped, or read: see `read`); NULL until mapped */
    int read;                        /* 1: ink_st_map reads the file into memory instead; set before it */
    size_t size;                     /* file size in bytes */
    uint64_t data_off;               /* 8 + N */
    int n;                           /* number of tensors */
    ink_st_tensor *t;                /* [n], sorted by name */
} ink_st_file;

/* Parses and validates the header of `path` (reads 8 + N bytes with pread; no mapping). */
int ink_st_open(ink_st_file *f, const char *path, ink_err *err);
/* Maps (or with f->read, reads) the file once and sets every tensor's data pointer. A read that
 * finds the file shorter than at ink_st_open fails with INK_E_IO naming the file. */
int ink_st_map(ink_st_file *f, ink_err *err);
void ink_st_close(ink_st_file *f);
/* Binary search by name; NULL if absent. */
const ink_st_tensor *ink_st_find(const ink_st_file *f, const char *name);

int64_t ink_st_numel(const ink_st_tensor *t);

#endif
