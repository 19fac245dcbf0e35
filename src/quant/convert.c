/*
 * convert.c — ink_quantize (include/inkling.h): a float checkpoint directory rewritten as MLX
 * affine (mlx-community layout) or NVFP4 (release layout).
 *
 * Three steps. plan: every source tensor becomes one "unit" (copy, relayout, split half, quantize)
 * producing one to three output tensors with names, dtypes and shapes. layout: output tensors are
 * assigned to files (backbone shards of at most shard_bytes, mtp.safetensors for the head) and to
 * offsets, so every header is known before any data is written. write: each unit streams its rows
 * from the mapped source through the quantizer into its outputs with pwrite, so no tensor is ever
 * held in memory whole (a 975B expert stack is 19 GB); then the index, config.json and side files.
 * Ownership: everything allocated here is freed before ink_quantize returns.
 */
#define _GNU_SOURCE
#include "inkling.h"

#include "base/dtype.h"
#include "base/pool.h"
#include "load/safetensors.h"
#include "load/tdir.h"
#include "quant/quant.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { U_COPY, U_AFFINE, U_NVFP4 };                    /* what a unit does */
enum { SEL_ALL, SEL_EVEN, SEL_ODD, SEL_LOW, SEL_HIGH }; /* which rows of the source (fused gate/up) */
enum { F_MODEL, F_MTP };

typedef struct otensor {
    char *name;
    int dtype, ndim;
    int64_t shape[INK_ST_MAX_DIMS];
    uint64_t bytes, off; /* off: inside its file's data buffer */
    int file, shard;
} otensor;

typedef struct unit {
    const ink_st_tensor *src;
    int src_file;
    int kind, sel, bits, group;
    int out[3];          /* weight, scales, biases (affine) / codes, scale, scale2 (nvfp4); -1 unused */
    char what[32];
} unit;

typedef struct conv {
    const char *src, *dst;
    const ink_quant_opts *o;
    int bits, group, n_layer;
    int scales_dt;
    ink_st_file *files;
    int n_files;
    unit *u;
    int nu;
    otensor *t;
    int nt;
    json_t *overrides;   /* module path -> false / {group_size, bits} */
    int n_shards;        /* backbone shards */
    int has_mtp;
    uint64_t total_in, total_out, done_in, done_out;
    ink_pool *pool;
    float *rowf;         /* per thread: one source row as f32 */
    float *rs, *rb;      /* per thread: its scales / biases */
    uint8_t *blkq;       /* one block of rows: codes */
    uint16_t *blks, *blkb; /* affine scales / biases in the file's dtype */
    uint8_t *blks8;      /* NVFP4 block scales */
} conv;

static int is_float_dt(int dt) { return dt == INK_DT_F32 || dt == INK_DT_BF16 || dt == INK_DT_F16; }

static int ends(const char *s, const char *suf)
{
    size_t l = strlen(s), k = strlen(suf);
    return l >= k && !strcmp(s + l - k, suf);
}

/* ---- source ------------------------------------------------------------------------------ */

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every top-level *.safetensors of src, opened (headers) and mapped. */
static int open_sources(conv *c, ink_err *err)
{
    DIR *d = opendir(c->src);
    if (!d) return ink_err_set(err, INK_E_IO, "%s: cannot open directory: %s", c->src, strerror(errno));
    char **names = NULL;
    int n = 0, cap = 0, rc = INK_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !ends(e->d_name, ".safetensors")) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **nn = realloc(names, (size_t)cap * sizeof *nn);
            if (!nn) { rc = ink_err_set(err, INK_E_NOMEM, "out of memory"); break; }
            names = nn;
        }
        if (!(names[n] = strdup(e->d_name))) { rc = ink_err_set(err, INK_E_NOMEM, "out of memory"); break; }
        n++;
    }
    closedir(d);
    if (!rc && !n) rc = ink_err_set(err, INK_E_IO, "%s: no .safetensors files", c->src);
    if (!rc) {
        qsort(names, (size_t)n, sizeof *names, cmp_cstr);
        c->files = calloc((size_t)n, sizeof *c->files);
        if (!c->files) rc = ink_err_set(err, INK_E_NOMEM, "out of memory");
    }
    for (int i = 0; !rc && i < n; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", c->src, names[i]);
        c->files[i].fd = -1;
        rc = ink_st_open(&c->files[i], p, err);
        if (!rc) c->n_files = i + 1, rc = ink_st_map(&c->files[i], err);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

/* ---- plan -------------------------------------------------------------------------------- */

static int add_out(conv *c, const char *name, int dtype, int ndim, const int64_t *shape, ink_err *err)
{
    otensor *t = realloc(c->t, (size_t)(c->nt + 1) * sizeof *t);
    if (!t) return ink_err_set(err, INK_E_NOMEM, "out of memory"), -1;
    c->t = t;
    otensor *o = &t[c->nt];
    memset(o, 0, sizeof *o);
    if (!(o->name = strdup(name))) return ink_err_set(err, INK_E_NOMEM, "out of memory"), -1;
    o->dtype = dtype, o->ndim = ndim;
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) o->shape[i] = shape[i], n *= (uint64_t)shape[i];
    o->bytes = n * (uint64_t)ink_dtype_bits(dtype) / 8;
    o->file = ink_tdir_is_mtp_name(name) ? F_MTP : F_MODEL;
    if (o->file == F_MTP) c->has_mtp = 1;
    c->total_out += o->bytes;
    return c->nt++;
}

/* Fused gate/up stacks and renamed down stacks (affine mode): source suffix -> output suffixes. */
typedef struct rename_rule {
    const char *in, *a, *b; /* b NULL: a rename; else a split into gate (a) and up (b) */
    int half;               /* split by halves (transformers) instead of interleaved rows (release) */
} rename_rule;

static const rename_rule renames[] = {
    {"mlp.w13_dn.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", 0},
    {"mlp.gate_up_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", 1},
    {"mlp.experts.w13_weight", "mlp.experts.gate_proj.weight", "mlp.experts.up_proj.weight", 0},
    {"mlp.experts.gate_up_proj", "mlp.experts.gate_proj.weight", "mlp.experts.up_proj.weight", 1},
    {"mlp.shared_experts.shared_w13_weight", "mlp.shared_experts.gate_proj.weight", "mlp.shared_experts.up_proj.weight", 0},
    {"mlp.experts.w2_weight", "mlp.experts.down_proj.weight", NULL, 0},
    {"mlp.experts.down_proj", "mlp.experts.down_proj.weight", NULL, 0},
    {"mlp.shared_experts.shared_w2_weight", "mlp.shared_experts.down_proj.weight", NULL, 0},
};

/* Module path of an output weight: its name without ".weight". */
static void module_path(const char *name, char *out, size_t n)
{
    size_t l = strlen(name);
    snprintf(out, n, "%.*s", (int)(ends(name, ".weight") ? l - 7 : l), name);
}

/* Does this tensor get quantized at all (before group / rule checks)? formats.md §4.6. */
static int affine_candidate(const char *name, const ink_st_tensor *t)
{
    if (!is_float_dt(t->dtype) || t->ndim < 2) return 0;
    if (!ink_tdir_is_backbone_name(name) && !ink_tdir_is_mtp_name(name)) return 0; /* vision, audio: kept */
    return !(strstr(name, "sconv") || strstr(name, "conv1d") || strstr(name, "rel_logits_proj") ||
             strstr(name, "rel_proj") || ends(name, "mlp.gate.weight") || ends(name, "norm.weight"));
}

/* Layer index of a backbone module ("...layers.N..."), -1 if none or an MTP block. */
static int layer_index(const char *path)
{
    if (ink_tdir_is_mtp_name(path)) return -1;
    const char *p = strstr(path, "layers.");
    return p ? atoi(p + 7) : -1;
}

/* Bits and group for module `path` by preset and rules; bits 0 = left in float. */
static void choose_bits(const conv *c, const char *path, int *bits, int *group)
{
    *bits = c->bits, *group = c->group;
    const char *ps = c->o->preset;
    if (ps) {
        int lo = ps[6] - '0', hi = ps[8] - '0', L = c->n_layer, i = layer_index(path);
        int more = i >= 0 && (i < L / 8 || i >= 7 * L / 8 || (i - L / 8) % 3 == 2);
        int vd = strstr(path, "v_proj") || strstr(path, "wv_dv") || strstr(path, "down_proj") || strstr(path, "w2_md");
        int head = strstr(path, "embed") || strstr(path, "lm_head");
        *bits = (head || (vd && more)) ? hi : lo;
        *group = 64;
    }
    for (int r = 0; r < c->o->n_rules; r++)
        if (!fnmatch(c->o->rules[r].glob, path, 0)) {
            *bits = c->o->rules[r].bits;
            if (c->o->rules[r].group) *group = c->o->rules[r].group;
        }
}

static int plan_affine_out(conv *c, unit *u, const char *name, int ndim, const int64_t *shape, ink_err *err)
{
    char path[512];
    module_path(name, path, sizeof path);
    int bits = 0, group = 0, cols = (int)shape[ndim - 1];
    if (affine_candidate(name, u->src)) choose_bits(c, path, &bits, &group);
    if (bits && cols % group) bits = 0; /* MLX's rule: width not a multiple of the group stays float */
    int cand = affine_candidate(name, u->src);
    if (!bits) {
        if (cand && (c->o->preset || c->o->n_rules) && cols % (group ? group : 64) == 0)
            json_object_set_new(c->overrides, path, json_false());
        if ((u->out[0] = add_out(c, name, u->src->dtype, ndim, shape, err)) < 0) return err->code;
        return INK_OK;
    }
    if (bits != c->bits || group != c->group)
        json_object_set_new(c->overrides, path, json_pack("{s:i,s:i}", "group_size", group, "bits", bits));
    int64_t sh[INK_ST_MAX_DIMS];
    memcpy(sh, shape, sizeof(int64_t) * (size_t)ndim);
    u->kind = U_AFFINE, u->bits = bits, u->group = group;
    snprintf(u->what, sizeof u->what, "q%d g%d", bits, group);
    sh[ndim - 1] = (int64_t)cols * bits / 32;
    if ((u->out[0] = add_out(c, name, INK_DT_U32, ndim, sh, err)) < 0) return err->code;
    sh[ndim - 1] = cols / group;
    char n2[600];
    snprintf(n2, sizeof n2, "%s.scales", path);
    if ((u->out[1] = add_out(c, n2, c->scales_dt, ndim, sh, err)) < 0) return err->code;
    snprintf(n2, sizeof n2, "%s.biases", path);
    if ((u->out[2] = add_out(c, n2, c->scales_dt, ndim, sh, err)) < 0) return err->code;
    return INK_OK;
}

static unit *new_unit(conv *c, const ink_st_tensor *t, int file, int sel, ink_err *err)
{
    unit *u = realloc(c->u, (size_t)(c->nu + 1) * sizeof *u);
    if (!u) return ink_err_set(err, INK_E_NOMEM, "out of memory"), NULL;
    c->u = u;
    u = &c->u[c->nu++];
    memset(u, 0, sizeof *u);
    u->src = t, u->src_file = file, u->sel = sel, u->kind = U_COPY;
    u->out[0] = u->out[1] = u->out[2] = -1;
    snprintf(u->what, sizeof u->what, "copy");
    return u;
}

static int plan_affine(conv *c, const ink_st_tensor *t, int file, ink_err *err)
{
    const char *name = t->name;
    int64_t sh[INK_ST_MAX_DIMS];
    memcpy(sh, t->shape, sizeof sh);
    if (ink_tdir_is_mtp_name(name)) { /* the head keeps its release names and layout, quantized in place */
        unit *u = new_unit(c, t, file, SEL_ALL, err);
        return u ? plan_affine_out(c, u, name, t->ndim, sh, err) : err->code;
    }
    for (size_t r = 0; r < sizeof renames / sizeof renames[0]; r++) {
        const rename_rule *rr = &renames[r];
        if (!ends(name, rr->in) || t->ndim < 2) continue;
        char pfx[512], o[700];
        snprintf(pfx, sizeof pfx, "%.*s", (int)(strlen(name) - strlen(rr->in)), name);
        if (!rr->b) {
            snprintf(o, sizeof o, "%s%s", pfx, rr->a);
            unit *u = new_unit(c, t, file, SEL_ALL, err);
            return u ? plan_affine_out(c, u, o, t->ndim, sh, err) : err->code;
        }
        if (sh[t->ndim - 2] % 2)
            return ink_err_set(err, INK_E_FORMAT, "tensor %s: a fused gate/up stack needs an even row count, found %lld",
                               name, (long long)sh[t->ndim - 2]);
        sh[t->ndim - 2] /= 2;
        for (int half = 0; half < 2; half++) {
            int sel = rr->half ? (half ? SEL_HIGH : SEL_LOW) : (half ? SEL_ODD : SEL_EVEN);
            snprintf(o, sizeof o, "%s%s", pfx, half ? rr->b : rr->a);
            unit *u = new_unit(c, t, file, sel, err);
            if (!u) return err->code;
            int rc = plan_affine_out(c, u, o, t->ndim, sh, err);
            if (rc) return rc;
            snprintf(u->what + strlen(u->what), sizeof u->what - strlen(u->what), ", split");
        }
        return INK_OK;
    }
    unit *u = new_unit(c, t, file, SEL_ALL, err);
    if (!u) return err->code;
    if ((strstr(name, "sconv") || strstr(name, "conv1d")) && t->ndim == 3 && sh[1] == 1) {
        sh[1] = sh[2], sh[2] = 1; /* torch [C, 1, K] -> MLX [C, K, 1]: the same bytes */
        snprintf(u->what, sizeof u->what, "conv layout");
    }
    return plan_affine_out(c, u, name, t->ndim, sh, err);
}

static int plan_nvfp4(conv *c, const ink_st_tensor *t, int file, ink_err *err)
{
    unit *u = new_unit(c, t, file, SEL_ALL, err);
    if (!u) return err->code;
    const char *n = t->name;
    int expert = t->ndim == 3 && is_float_dt(t->dtype) && ink_tdir_is_backbone_name(n) && strstr(n, "mlp.experts.") &&
                 t->shape[2] % 16 == 0;
    if (!expert) return (u->out[0] = add_out(c, n, t->dtype, t->ndim, t->shape, err)) < 0 ? err->code : INK_OK;
    int64_t sh[3] = {t->shape[0], t->shape[1], t->shape[2] / 2};
    u->kind = U_NVFP4, u->bits = 4, u->group = 16;
    snprintf(u->what, sizeof u->what, "nvfp4");
    char n2[600];
    if ((u->out[0] = add_out(c, n, INK_DT_U8, 3, sh, err)) < 0) return err->code;
    sh[2] = t->shape[2] / 16;
    snprintf(n2, sizeof n2, "%s.scale", n);
    if ((u->out[1] = add_out(c, n2, INK_DT_F8_E4M3, 3, sh, err)) < 0) return err->code;
    snprintf(n2, sizeof n2, "%s.scale2", n);
    if ((u->out[2] = add_out(c, n2, INK_DT_F32, 1, sh, err)) < 0) return err->code;
    return INK_OK;
}

static int plan(conv *c, ink_err *err)
{
    int rc = INK_OK;
    for (int f = 0; !rc && f < c->n_files; f++)
        for (int i = 0; !rc && i < c->files[f].n; i++) {
            const ink_st_tensor *t = &c->files[f].t[i];
            if (ends(t->name, ".scales") || ends(t->name, ".scale") || ends(t->name, ".scale2") ||
                ((t->dtype == INK_DT_U32 || t->dtype == INK_DT_U8) && ink_tdir_is_backbone_name(t->name)))
                return ink_err_set(err, INK_E_INVAL, "%s: tensor %s (%s): the checkpoint is already quantized",
                                   c->files[f].path, t->name, ink_dtype_name(t->dtype));
            c->total_in += t->end - t->begin;
            rc = c->o->mode == INK_QUANT_NVFP4 ? plan_nvfp4(c, t, f, err) : plan_affine(c, t, f, err);
        }
    for (int i = 0; !rc && i < c->nt; i++) /* two sources producing one name (e.g. stale shards) */
        for (int j = i + 1; j < c->nt; j++)
            if (!strcmp(c->t[i].name, c->t[j].name))
                return ink_err_set(err, INK_E_FORMAT, "%s: two tensors would be written as %s (duplicate or stale files?)",
                                   c->src, c->t[i].name);
    return rc;
}

/* ---- layout ------------------------------------------------------------------------------ */

static const conv *sort_ctx;
static int cmp_out_name(const void *a, const void *b)
{
    return strcmp(sort_ctx->t[*(const int *)a].name, sort_ctx->t[*(const int *)b].name);
}
/* Within a file: widest elements first, so every tensor starts aligned to its element. */
static int cmp_out_align(const void *a, const void *b)
{
    const otensor *x = &sort_ctx->t[*(const int *)a], *y = &sort_ctx->t[*(const int *)b];
    int wx = ink_dtype_bits(x->dtype), wy = ink_dtype_bits(y->dtype);
    return wx != wy ? wy - wx : strcmp(x->name, y->name);
}

static int layout(conv *c, ink_err *err)
{
    int *ord = malloc((size_t)(c->nt ? c->nt : 1) * sizeof *ord);
    if (!ord) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    for (int i = 0; i < c->nt; i++) ord[i] = i;
    sort_ctx = c;
    qsort(ord, (size_t)c->nt, sizeof *ord, cmp_out_name);
    uint64_t cap = c->o->shard_bytes ? c->o->shard_bytes : (5ull << 30), used = 0;
    int shard = 0, any = 0;
    for (int k = 0; k < c->nt; k++) {
        otensor *t = &c->t[ord[k]];
        if (t->file == F_MTP) continue;
        if (any && used + t->bytes > cap) shard++, used = 0;
        t->shard = shard, used += t->bytes, any = 1;
    }
    c->n_shards = shard + 1;
    free(ord);
    return INK_OK;
}

/* Output indices of file (kind, shard) in write order, with offsets set; returns the count. */
static int file_members(conv *c, int kind, int shard, int *ord)
{
    int n = 0;
    for (int i = 0; i < c->nt; i++)
        if (c->t[i].file == kind && (kind == F_MTP || c->t[i].shard == shard)) ord[n++] = i;
    sort_ctx = c;
    qsort(ord, (size_t)n, sizeof *ord, cmp_out_align);
    uint64_t off = 0;
    for (int k = 0; k < n; k++) c->t[ord[k]].off = off, off += c->t[ord[k]].bytes;
    return n;
}

static void file_name(const conv *c, int kind, int shard, char *out, size_t n)
{
    if (kind == F_MTP) snprintf(out, n, "mtp.safetensors");
    else if (c->n_shards == 1) snprintf(out, n, "model.safetensors");
    else snprintf(out, n, "model-%05d-of-%05d.safetensors", shard + 1, c->n_shards);
}

/* ---- write ------------------------------------------------------------------------------- */

typedef struct ofile {
    int fd;
    uint64_t data_off; /* 8 + header */
    char path[4096], tmp[4096];
} ofile;

static int pwrite_all(const ofile *f, const void *p, size_t n, uint64_t at, ink_err *err)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = pwrite(f->fd, b, n, (off_t)(f->data_off + at));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return ink_err_set(err, INK_E_IO, "%s: write failed: %s", f->path, w < 0 ? strerror(errno) : "short write");
        b += w, n -= (size_t)w, at += (uint64_t)w;
    }
    return INK_OK;
}

static int open_out(conv *c, int kind, int shard, int *ord, int n, ofile *f, ink_err *err)
{
    char nm[256];
    file_name(c, kind, shard, nm, sizeof nm);
    snprintf(f->path, sizeof f->path, "%s/%s", c->dst, nm);
    snprintf(f->tmp, sizeof f->tmp, "%s/.%s.part", c->dst, nm);
    json_t *h = json_object();
    json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "mlx"));
    for (int k = 0; k < n; k++) {
        const otensor *t = &c->t[ord[k]];
        json_t *sh = json_array();
        for (int d = 0; d < t->ndim; d++) json_array_append_new(sh, json_integer((json_int_t)t->shape[d]));
        json_object_set_new(h, t->name, json_pack("{s:s,s:o,s:[I,I]}", "dtype", ink_dtype_name(t->dtype), "shape", sh,
                                                  "data_offsets", (json_int_t)t->off, (json_int_t)(t->off + t->bytes)));
    }
    char *hs = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    if (!hs) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    size_t hn = strlen(hs), pad = (8 - hn % 8) % 8;
    uint64_t hl = hn + pad, total = 0;
    for (int k = 0; k < n; k++) total += c->t[ord[k]].bytes;
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = INK_OK;
    if (f->fd < 0) rc = ink_err_set(err, INK_E_IO, "%s: cannot create: %s", f->tmp, strerror(errno));
    else if (ftruncate(f->fd, (off_t)(8 + hl + total)))
        rc = ink_err_set(err, INK_E_IO, "%s: cannot size to %llu bytes: %s", f->tmp, (unsigned long long)(8 + hl + total),
                         strerror(errno));
    if (!rc) {
        char *buf = malloc(8 + hl);
        if (!buf) rc = ink_err_set(err, INK_E_NOMEM, "out of memory");
        else {
            for (int i = 0; i < 8; i++) buf[i] = (char)(hl >> (8 * i));
            memcpy(buf + 8, hs, hn);
            memset(buf + 8 + hn, ' ', pad);
            f->data_off = 0;
            rc = pwrite_all(f, buf, 8 + hl, 0, err);
            f->data_off = 8 + hl;
            free(buf);
        }
    }
    free(hs);
    return rc;
}

/* Source row of output row r: rows of a [.., R, C] source as a flat list; a split keeps half of
 * each matrix's R rows (interleaved: 2j / 2j+1; halves: j / R/2 + j). */
static uint64_t src_row(const unit *u, uint64_t r)
{
    if (u->sel == SEL_ALL) return r;
    uint64_t R = (uint64_t)u->src->shape[u->src->ndim - 2], h = R / 2, e = r / h, j = r % h;
    switch (u->sel) {
    case SEL_EVEN: return e * R + 2 * j;
    case SEL_ODD: return e * R + 2 * j + 1;
    case SEL_LOW: return e * R + j;
    default: return e * R + h + j;
    }
}

static void widen(const ink_st_tensor *t, uint64_t row, int cols, float *out)
{
    size_t base = (size_t)row * (size_t)cols;
    for (int i = 0; i < cols; i++)
        out[i] = t->dtype == INK_DT_F32    ? ink_ld_f32(t->data, base + (size_t)i)
                 : t->dtype == INK_DT_BF16 ? ink_bf16_to_f32(ink_ld_u16(t->data, base + (size_t)i))
                                           : ink_f16_to_f32(ink_ld_u16(t->data, base + (size_t)i));
}

static uint16_t narrow(int dt, float v) { return dt == INK_DT_F16 ? ink_f32_to_f16(v) : ink_f32_to_bf16(v); }

static uint64_t n_rows(const ink_st_tensor *t, int sel)
{
    uint64_t r = 1;
    for (int i = 0; i < t->ndim - 1; i++) r *= (uint64_t)t->shape[i];
    return sel == SEL_ALL ? r : r / 2;
}

/* The file output tensor i lives in (the parts of one unit may sit in different shards). */
static const ofile *file_of(const conv *c, const ofile *files, int i)
{
    return &files[c->t[i].file == F_MTP ? c->n_shards : c->t[i].shard];
}

/* Rows [r0, r0 + n) of a unit, quantized into the block buffers by the pool (each row is a
 * function of its source row only, so the result does not depend on the threads). */
typedef struct qjob {
    conv *c;
    const unit *u;
    uint64_t r0;
    int cols;
    float s2;                /* NVFP4: the matrix's global scale */
    int sdt, bdt;            /* affine: dtypes of scales and biases */
} qjob;

static void quant_rows(void *ctx, int i0, int i1, int tid)
{
    qjob *j = ctx;
    conv *c = j->c;
    const unit *u = j->u;
    int cols = j->cols, G = cols / u->group;
    float *rowf = c->rowf + (size_t)tid * (size_t)cols, *rs = c->rs + (size_t)tid * (size_t)cols;
    float *rb = c->rb + (size_t)tid * (size_t)cols;
    for (int i = i0; i < i1; i++) {
        uint64_t r = j->r0 + (uint64_t)i;
        widen(u->src, src_row(u, r), cols, rowf);
        if (u->kind == U_NVFP4) {
            ink_qnvfp4_row(rowf, cols, j->s2, c->blkq + (size_t)i * (size_t)(cols / 2), c->blks8 + (size_t)i * (size_t)G);
            continue;
        }
        ink_qaffine_row(rowf, cols, u->bits, u->group, c->blkq + (size_t)i * (size_t)cols * (size_t)u->bits / 8, rs, rb);
        for (int g = 0; g < G; g++) {
            c->blks[(size_t)i * G + g] = narrow(j->sdt, rs[g]);
            c->blkb[(size_t)i * G + g] = narrow(j->bdt, rb[g]);
        }
    }
}

/* Rows per block: about BLOCK_BYTES of f32 source. */
#define BLOCK_BYTES (4u << 20)
static uint64_t block_rows(int cols) { uint64_t b = BLOCK_BYTES / ((uint64_t)cols * 4); return b ? b : 1; }

static int write_unit(conv *c, const unit *u, ofile *files, ink_err *err)
{
    const ink_st_tensor *s = u->src;
    int cols = s->ndim ? (int)s->shape[s->ndim - 1] : 1;
    uint64_t rows = s->ndim ? n_rows(s, u->sel) : 1;
    const otensor *o0 = &c->t[u->out[0]];
    const ofile *f = file_of(c, files, u->out[0]);
    int rc = INK_OK;
    if (u->kind == U_COPY) {
        size_t es = (size_t)ink_dtype_bits(s->dtype) / 8, rb = (size_t)cols * es;
        if (u->sel == SEL_ALL) return pwrite_all(f, s->data, s->end - s->begin, o0->off, err);
        for (uint64_t r = 0; !rc && r < rows; r++)
            rc = pwrite_all(f, s->data + src_row(u, r) * rb, rb, o0->off + r * rb, err);
        return rc;
    }
    const otensor *ts = &c->t[u->out[1]], *tb = &c->t[u->out[2]];
    const ofile *fs = file_of(c, files, u->out[1]), *fb = file_of(c, files, u->out[2]);
    qjob j = {.c = c, .u = u, .cols = cols, .sdt = ts->dtype, .bdt = tb->dtype};
    int G = cols / u->group;
    size_t qb = (size_t)cols * (size_t)u->bits / 8, sb = u->kind == U_NVFP4 ? (size_t)G : (size_t)G * 2;
    /* NVFP4 works matrix by matrix (its global scale is the matrix's amax); affine over all rows */
    uint64_t R = u->kind == U_NVFP4 ? (uint64_t)s->shape[1] : rows, E = rows / R, B = block_rows(cols);
    for (uint64_t e = 0; !rc && e < E; e++) {
        if (u->kind == U_NVFP4) {
            float amax = 0.0f;
            for (uint64_t r = 0; r < R; r++) {
                widen(s, e * R + r, cols, c->rowf);
                for (int i = 0; i < cols; i++) amax = fmaxf(amax, fabsf(c->rowf[i]));
            }
            j.s2 = ink_nvfp4_scale2(amax);
            rc = pwrite_all(fb, &j.s2, 4, tb->off + e * 4, err);
        }
        for (uint64_t r0 = e * R; !rc && r0 < (e + 1) * R; r0 += B) {
            uint64_t n = (e + 1) * R - r0 < B ? (e + 1) * R - r0 : B;
            j.r0 = r0;
            ink_pool_for(c->pool, (int)n, 4, quant_rows, &j);
            rc = pwrite_all(f, c->blkq, (size_t)n * qb, o0->off + r0 * qb, err);
            if (!rc) rc = pwrite_all(fs, u->kind == U_NVFP4 ? (void *)c->blks8 : (void *)c->blks, (size_t)n * sb,
                                     ts->off + r0 * sb, err);
            if (!rc && u->kind == U_AFFINE) rc = pwrite_all(fb, c->blkb, (size_t)n * sb, tb->off + r0 * sb, err);
        }
    }
    return rc;
}

static void report(conv *c, int index, const char *name, const char *what)
{
    if (!c->o->progress) return;
    ink_quant_progress p = {index, c->nu, name, what, c->done_in, c->total_in, c->done_out, c->total_out};
    c->o->progress(c->o->ctx, &p);
}

static int write_all(conv *c, ink_err *err)
{
    int nf = c->n_shards + 1, rc = INK_OK, maxc = 1;
    ofile *files = calloc((size_t)nf, sizeof *files);
    int *ord = malloc((size_t)(c->nt ? c->nt : 1) * sizeof *ord);
    for (int i = 0; i < c->nu; i++) {
        const ink_st_tensor *s = c->u[i].src;
        if (s->ndim && s->shape[s->ndim - 1] > maxc) maxc = (int)s->shape[s->ndim - 1];
    }
    /* per thread: one f32 row and its scales / biases; per block: its codes, scales and biases
     * (at most BLOCK_BYTES / 4 elements: codes <= 1 byte each, scales 2 bytes per group of >= 16) */
    int nth = c->pool ? ink_pool_size(c->pool) : 1;
    size_t blk = BLOCK_BYTES / 4 + (size_t)maxc;
    c->rowf = malloc((size_t)nth * (size_t)maxc * sizeof *c->rowf);
    c->rs = malloc((size_t)nth * (size_t)maxc * sizeof *c->rs), c->rb = malloc((size_t)nth * (size_t)maxc * sizeof *c->rb);
    c->blkq = malloc(blk), c->blks = malloc(blk / 8 + 8), c->blkb = malloc(blk / 8 + 8), c->blks8 = malloc(blk / 16 + 8);
    if (!files || !ord || !c->pool || !c->rowf || !c->rs || !c->rb || !c->blkq || !c->blks || !c->blkb || !c->blks8)
        rc = ink_err_set(err, INK_E_NOMEM, "out of memory");
    for (int i = 0; i < nf && files; i++) files[i].fd = -1;
    for (int i = 0; !rc && i < nf; i++) {
        int kind = i < c->n_shards ? F_MODEL : F_MTP;
        if (kind == F_MTP && !c->has_mtp) continue;
        int n = file_members(c, kind, i, ord);
        rc = open_out(c, kind, i, ord, n, &files[i], err);
    }
    for (int i = 0; !rc && i < c->nu; i++) {
        const unit *u = &c->u[i];
        report(c, i, c->t[u->out[0]].name, u->what);
        rc = write_unit(c, u, files, err);
        c->done_in += u->sel == SEL_ALL ? u->src->end - u->src->begin : (u->src->end - u->src->begin) / 2;
        for (int k = 0; k < 3; k++)
            if (u->out[k] >= 0) c->done_out += c->t[u->out[k]].bytes;
    }
    for (int i = 0; files && i < nf; i++) {
        if (files[i].fd < 0) continue;
        if (close(files[i].fd) && !rc) rc = ink_err_set(err, INK_E_IO, "%s: close failed: %s", files[i].tmp, strerror(errno));
        if (!rc && rename(files[i].tmp, files[i].path))
            rc = ink_err_set(err, INK_E_IO, "%s: cannot rename to %s: %s", files[i].tmp, files[i].path, strerror(errno));
        if (rc) unlink(files[i].tmp);
    }
    if (!rc) report(c, c->nu, "", "done");
    free(files), free(ord);
    return rc;
}

/* ---- side files -------------------------------------------------------------------------- */

static int write_index(conv *c, ink_err *err)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", c->dst);
    if (c->n_shards == 1) return INK_OK;
    json_t *wm = json_object();
    uint64_t total = 0;
    for (int i = 0; i < c->nt; i++) {
        if (c->t[i].file != F_MODEL) continue;
        char nm[256];
        file_name(c, F_MODEL, c->t[i].shard, nm, sizeof nm);
        json_object_set_new(wm, c->t[i].name, json_string(nm));
        total += c->t[i].bytes;
    }
    json_t *ix = json_pack("{s:{s:I},s:o}", "metadata", "total_size", (json_int_t)total, "weight_map", wm);
    int rc = json_dump_file(ix, p, JSON_INDENT(2) | JSON_SORT_KEYS) ? ink_err_set(err, INK_E_IO, "%s: cannot write", p) : 0;
    json_decref(ix);
    return rc;
}

static int write_config(conv *c, json_t *cfg, ink_err *err)
{
    char p[4096];
    json_t *levels[2] = {cfg, json_object_get(cfg, "text_config")};
    for (int i = 0; i < 2; i++)
        if (json_is_object(levels[i]))
            json_object_del(levels[i], "quantization"), json_object_del(levels[i], "quantization_config");
    if (c->o->mode == INK_QUANT_AFFINE) {
        json_t *q = json_pack("{s:i,s:i,s:s}", "group_size", c->group, "bits", c->bits, "mode", "affine");
        json_object_update(q, c->overrides);
        json_object_set_new(cfg, "quantization_config", json_deep_copy(q));
        json_object_set_new(cfg, "quantization", q);
    } else {
        snprintf(p, sizeof p, "%s/hf_quant_config.json", c->dst);
        json_t *h = json_pack("{s:{s:s,s:s},s:{s:s,s:i,s:n,s:[]}}", "producer", "name", "inkling.c", "version", INK_VERSION,
                              "quantization", "quant_algo", "NVFP4", "group_size", 16, "kv_cache_quant_algo",
                              "exclude_modules");
        int bad = !h || json_dump_file(h, p, JSON_INDENT(2));
        json_decref(h);
        if (bad) return ink_err_set(err, INK_E_IO, "%s: cannot write", p);
    }
    snprintf(p, sizeof p, "%s/config.json", c->dst);
    if (json_dump_file(cfg, p, JSON_INDENT(2))) return ink_err_set(err, INK_E_IO, "%s: cannot write", p);
    return INK_OK;
}

static int copy_file(const char *from, const char *to, ink_err *err)
{
    int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, rc = INK_OK;
    if (in < 0) return ink_err_set(err, INK_E_IO, "%s: cannot open: %s", from, strerror(errno));
    out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) rc = ink_err_set(err, INK_E_IO, "%s: cannot create: %s", to, strerror(errno));
    char buf[65536];
    while (!rc) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) rc = ink_err_set(err, INK_E_IO, "%s: read failed: %s", from, strerror(errno));
        if (n <= 0) break;
        for (ssize_t o = 0; !rc && o < n;) {
            ssize_t w = write(out, buf + o, (size_t)(n - o));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) rc = ink_err_set(err, INK_E_IO, "%s: write failed: %s", to, strerror(errno));
            else o += w;
        }
    }
    close(in);
    if (out >= 0 && close(out) && !rc) rc = ink_err_set(err, INK_E_IO, "%s: close failed: %s", to, strerror(errno));
    return rc;
}

/* Tokenizer, generation config, chat template, inkling.json, draft vocabulary: the top-level .json,
 * .jinja, .txt, .model and .tiktoken files. */
static int copy_side_files(conv *c, ink_err *err)
{
    DIR *d = opendir(c->src);
    if (!d) return ink_err_set(err, INK_E_IO, "%s: cannot open directory: %s", c->src, strerror(errno));
    struct dirent *e;
    int rc = INK_OK;
    while (!rc && (e = readdir(d))) {
        const char *n = e->d_name;
        int side = ends(n, ".json") || ends(n, ".jinja") || ends(n, ".txt") || ends(n, ".model") || ends(n, ".tiktoken");
        /* not: the weights, their index and quantization description, and expected.json (outputs of
         * the float weights, which the quantized ones would not reproduce) */
        if (n[0] == '.' || !side || !strcmp(n, "model.safetensors.index.json") || !strcmp(n, "config.json") ||
            !strcmp(n, "hf_quant_config.json") || !strcmp(n, "expected.json"))
            continue;
        char a[4096], b[4096];
        struct stat st;
        snprintf(a, sizeof a, "%s/%s", c->src, n);
        snprintf(b, sizeof b, "%s/%s", c->dst, n);
        if (stat(a, &st) || !S_ISREG(st.st_mode)) continue;
        rc = copy_file(a, b, err);
    }
    closedir(d);
    return rc;
}

/* ---- entry ------------------------------------------------------------------------------- */

static int prepare_dst(const conv *c, ink_err *err)
{
    struct stat a, b;
    if (!stat(c->dst, &b) && !stat(c->src, &a) && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return ink_err_set(err, INK_E_INVAL, "%s: the destination is the source directory", c->dst);
    if (mkdir(c->dst, 0755) && errno != EEXIST)
        return ink_err_set(err, INK_E_IO, "%s: cannot create directory: %s", c->dst, strerror(errno));
    DIR *d = opendir(c->dst);
    if (!d) return ink_err_set(err, INK_E_IO, "%s: cannot open directory: %s", c->dst, strerror(errno));
    struct dirent *e;
    int rc = INK_OK;
    while (!rc && (e = readdir(d))) {
        const char *n = e->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..")) continue;
        if (!c->o->force) {
            rc = ink_err_set(err, INK_E_INVAL, "%s: exists and is not empty (pass --force to write into it)", c->dst);
            break;
        }
        if (ends(n, ".safetensors") || !strcmp(n, "model.safetensors.index.json") || !strcmp(n, "hf_quant_config.json")) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", c->dst, n);
            if (unlink(p)) rc = ink_err_set(err, INK_E_IO, "%s: cannot remove: %s", p, strerror(errno));
        }
    }
    closedir(d);
    return rc;
}

static int check_opts(conv *c, ink_err *err)
{
    const ink_quant_opts *o = c->o;
    if (o->mode != INK_QUANT_AFFINE && o->mode != INK_QUANT_NVFP4)
        return ink_err_set(err, INK_E_INVAL, "quantize: unknown mode %d", o->mode);
    c->bits = o->bits ? o->bits : 4, c->group = o->group ? o->group : 64;
    if (o->preset) {
        static const char *const ok[] = {"mixed_2_6", "mixed_3_4", "mixed_3_5", "mixed_3_6", "mixed_3_8", "mixed_4_6", "mixed_4_8"};
        int found = 0;
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) found |= !strcmp(o->preset, ok[i]);
        if (!found)
            return ink_err_set(err, INK_E_INVAL, "quantize: unknown preset \"%s\" (mixed_2_6, mixed_3_4, mixed_3_5, "
                               "mixed_3_6, mixed_3_8, mixed_4_6, mixed_4_8)", o->preset);
        c->bits = o->preset[6] - '0', c->group = 64;
    }
    int b = c->bits, g = c->group;
    if (b < 2 || b > 8 || b == 7 || (g != 32 && g != 64 && g != 128))
        return ink_err_set(err, INK_E_INVAL, "quantize: bits %d group %d: MLX affine takes bits 2, 3, 4, 5, 6, 8 and groups 32, 64, 128", b, g);
    for (int i = 0; i < o->n_rules; i++) {
        int rb = o->rules[i].bits, rg = o->rules[i].group;
        if ((rb && (rb < 2 || rb > 8 || rb == 7)) || (rg && rg != 32 && rg != 64 && rg != 128) || !o->rules[i].glob)
            return ink_err_set(err, INK_E_INVAL, "quantize: override %s: bits %d group %d are not an MLX affine choice",
                               o->rules[i].glob ? o->rules[i].glob : "(null)", rb, rg);
    }
    return INK_OK;
}

int ink_quantize(const char *src, const char *dst, const ink_quant_opts *opts, ink_err *err)
{
    conv c = {.src = src, .dst = dst, .o = opts, .scales_dt = INK_DT_BF16};
    int rc = check_opts(&c, err);
    char p[4096];
    snprintf(p, sizeof p, "%s/config.json", src);
    json_error_t je;
    json_t *cfg = rc ? NULL : json_load_file(p, 0, &je);
    if (!rc && !cfg) rc = ink_err_set(err, INK_E_FORMAT, "%s: %s at line %d", p, je.text, je.line);
    if (!rc && !json_is_object(cfg)) rc = ink_err_set(err, INK_E_FORMAT, "%s: not a JSON object", p);
    if (!rc) {
        json_t *tc = json_object_get(cfg, "text_config"), *nl = json_object_get(json_is_object(tc) ? tc : cfg, "num_hidden_layers");
        c.n_layer = json_is_integer(nl) ? (int)json_integer_value(nl) : 0;
        if (opts->preset && c.n_layer <= 0) rc = ink_err_set(err, INK_E_FORMAT, "%s: no num_hidden_layers (the preset needs it)", p);
    }
    c.overrides = json_object();
    if (!rc) rc = open_sources(&c, err);
    for (int f = 0; !rc && f < c.n_files; f++) /* scales follow the source's half type */
        for (int i = 0; i < c.files[f].n; i++)
            if (c.files[f].t[i].dtype == INK_DT_F16) c.scales_dt = INK_DT_F16;
    if (!rc) rc = plan(&c, err);
    if (!rc) rc = layout(&c, err);
    if (!rc) rc = prepare_dst(&c, err);
    if (!rc) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        c.pool = ink_pool_create(opts->n_threads > 0 ? opts->n_threads : nc > 0 ? (int)nc : 1);
    }
    if (!rc) rc = write_all(&c, err);
    if (!rc) rc = write_index(&c, err);
    if (!rc) rc = copy_side_files(&c, err);
    if (!rc) rc = write_config(&c, cfg, err);
    json_decref(cfg), json_decref(c.overrides);
    for (int i = 0; i < c.n_files; i++) ink_st_close(&c.files[i]);
    for (int i = 0; i < c.nt; i++) free(c.t[i].name);
    free(c.files), free(c.u), free(c.t), free(c.rowf), free(c.rs), free(c.rb);
    free(c.blkq), free(c.blks), free(c.blkb), free(c.blks8);
    if (c.pool) ink_pool_free(c.pool);
    return rc;
}
