/*
 * tdir.h — the tensor directory of a model directory: every safetensors file a purpose needs,
 * merged into one sorted name table (formats.md §2.3-2.4).
 *
 *   INK_TDIR_TARGET: with model.safetensors.index.json, the shards its weight_map names (only
 *     those holding at least one backbone tensor); a stale index (missing shards plus unindexed
 *     files) falls back to every top-level *.safetensors with a warning in `warn`; an index whose
 *     shards are missing is an error listing them. Without an index: every *.safetensors.
 *     Registered: every name except model.mtp.*, mtp.*, model.visual.*, model.audio.*,
 *     *training_args*, *.input_amax, *.original_shape.
 *   INK_TDIR_MTP: only files that hold MTP tensors (from the index, plus unindexed files whose
 *     header holds such names); registered: names starting with "model.mtp." or "mtp.". Other
 *     shards are never opened.
 * Files are mapped lazily (ink_tdir_map), or read into memory of their own when `read` is set (see
 * safetensors.h: --no-mmap). A name present in two files is an error. Index file
 * names must be plain names (no '/', no '..').
 *
 * Ownership: ink_tdir_open fills a caller-owned struct; ink_tdir_close frees everything in it.
 */
#ifndef INK_TDIR_H
#define INK_TDIR_H

#include "load/safetensors.h"

enum { INK_TDIR_TARGET, INK_TDIR_MTP };

typedef struct ink_tref {
    const char *name;          /* borrowed from the file's tensor */
    int file;                  /* index into files[] */
    const ink_st_tensor *t;
} ink_tref;

typedef struct ink_tdir {
    char *dir;
    int n_files;
    ink_st_file *files;
    int n;
    ink_tref *refs;            /* sorted by name */
    int has_index;
    int read;                  /* 1: ink_tdir_map reads files instead of mapping them (--no-mmap) */
    char warn[512];            /* non-fatal notes (stale index); empty if none */
} ink_tdir;

int ink_tdir_open(ink_tdir *d, const char *dir, int purpose, ink_err *err);
void ink_tdir_close(ink_tdir *d);
const ink_tref *ink_tdir_find(const ink_tdir *d, const char *name);
/* Maps (or reads, with `read`) the file holding `r` once; afterwards r->t->data is valid. */
int ink_tdir_map(ink_tdir *d, const ink_tref *r, ink_err *err);
/* 1 if a tensor name belongs to the backbone (not skipped for INK_TDIR_TARGET). */
int ink_tdir_is_backbone_name(const char *name);
int ink_tdir_is_mtp_name(const char *name);

#endif
