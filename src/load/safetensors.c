/* safetensors.c — header parsing, validation and mmap (see safetensors.h for the rules). */
#include "load/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int64_t ink_st_numel(const ink_st_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i]; /* checked at parse time */
    return n;
}

static int dtype_parse(const char *s)
{
    for (int i = 0; i < INK_DT_COUNT; i++)
        if (!strcmp(s, ink_dtype_name(i))) return i;
    return -1;
}

static int cmp_begin(const void *a, const void *b)
{
    const ink_st_tensor *x = *(ink_st_tensor *const *)a, *y = *(ink_st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const ink_st_tensor *)a)->name, ((const ink_st_tensor *)b)->name);
}

static int read_full(int fd, void *buf, size_t n, uint64_t off)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r, n -= (size_t)r, off += (uint64_t)r;
    }
    return 0;
}

/* Parses one tensor entry; returns 0 or an error already recorded in err. */
static int parse_entry(ink_st_file *f, const char *name, json_t *v, ink_st_tensor *t, uint64_t data_len,
                       ink_err *err)
{
    const char *p = f->path;
    if (!json_is_object(v))
        return ink_err_set(err, INK_E_FORMAT, "%s: tensor '%s': expected an object, found a JSON %s", p,
                           name, json_is_array(v) ? "array" : "scalar");
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd))
        return ink_err_set(err, INK_E_FORMAT, "%s: tensor '%s': missing or non-string 'dtype'", p, name);
    t->dtype = dtype_parse(json_string_value(jd));
    if (t->dtype < 0)
        return ink_err_set(err, INK_E_FORMAT, "%s: tensor '%s': unknown dtype '%s'", p, name,
                           json_string_value(jd));
    if (!json_is_array(js))
        return ink_err_set(err, INK_E_FORMAT, "%s: tensor '%s': missing or non-array 'shape'", p, name);
    if (json_array_size(js) > INK_ST_MAX_DIMS)
        return ink_err_set(err, INK_E_FORMAT, "%s: tensor '%s': %zu dimensions (at most %d supported)", p,
                           name, json_array_size(js), INK_ST_MAX_DIMS);
    t->ndim = (int)json_array_size(js);
    unsigned __int128 numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        json_t *d = json_array_get(js, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return ink_err_set(err, INK_E_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer",
                               p, name, i);
        t->shape[i] = json_integer_value(d);
        numel *= (uint64_t)t->shape[i];
        if (numel > ((unsigned __int128)1 << 62))
            return ink_err_set(err, INK_E_FORMAT, "%s: tensor '%s': shape too large (element count overflows)",
                               p, name);
    }
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
        !json_is_integer(json_array_get(jo, 1)))
        return ink_err_set(err, INK_E_FORMAT, "%s: tensor '%s': 'data_offsets' must be [begin, end] integers",
                           p, name);
    json_int_t b = json_integer_value(json_array_get(jo, 0)), e = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || e < b)
        return ink_err_set(err, INK_E_FORMAT, "%s: tensor '%s': bad data_offsets [%lld, %lld]", p, name,
                           (long long)b, (long long)e);
    t->begin = (uint64_t)b, t->end = (uint64_t)e;
    if (t->end > data_len)
        return ink_err_set(err, INK_E_FORMAT,
                           "%s: tensor '%s': data_offsets end %llu is past the data buffer (%llu bytes): truncated file", p,
                           name, (unsigned long long)t->end, (unsigned long long)data_len);
    unsigned __int128 bits = numel * (unsigned)ink_dtype_bits(t->dtype);
    if (bits % 8 || (uint64_t)(bits / 8) != t->end - t->begin)
        return ink_err_set(err, INK_E_FORMAT,
                           "%s: tensor '%s': shape and dtype %s need %llu bytes but data_offsets span %llu",
                           p, name, ink_dtype_name(t->dtype), (unsigned long long)(bits / 8),
                           (unsigned long long)(t->end - t->begin));
    return 0;
}

/* Opens path into f (fd, size) and reads its header: *hdr_out (malloc'd, the caller frees it) of *n_out
 * bytes starting with '{'; f->data_off follows it. */
static int read_header(ink_st_file *f, const char *path, char **hdr_out, uint64_t *n_out, ink_err *err)
{
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        return ink_err_set(err, INK_E_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        return ink_err_set(err, INK_E_IO, "%s: not a regular file", path);
    }
    f->size = (size_t)st.st_size;
    uint8_t len8[8];
    if (f->size == 0) {
        return ink_err_set(err, INK_E_FORMAT, "%s: empty file (0 bytes)", path);
    }
    if (f->size < 8 || read_full(f->fd, len8, 8, 0)) {
        return ink_err_set(err, INK_E_FORMAT, "%s: truncated: %zu bytes, a safetensors file needs at least 8",
                         path, f->size);
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | len8[i];
    if (n > INK_ST_MAX_HEADER || n > f->size - 8) {
        return ink_err_set(err, INK_E_FORMAT, "%s: header length %llu is past the end of the file (%zu bytes)%s",
                         path, (unsigned long long)n, f->size, n > INK_ST_MAX_HEADER ? " or over 100 MB" : "");
    }
    if (n < 2) {
        return ink_err_set(err, INK_E_FORMAT, "%s: header of %llu bytes cannot hold a JSON object", path,
                         (unsigned long long)n);
    }
    f->data_off = 8 + n;
    char *hdr = *hdr_out = malloc(n);
    if (!hdr) {
        return ink_err_set(err, INK_E_NOMEM, "%s: cannot allocate %llu header bytes", path, (unsigned long long)n);
    }
    if (read_full(f->fd, hdr, n, 8)) {
        return ink_err_set(err, INK_E_IO, "%s: cannot read the header", path);
    }
    if (hdr[0] != '{') {
        return ink_err_set(err, INK_E_FORMAT, "%s: header does not start with '{'", path);
    }
    *n_out = n;
    return INK_OK;
}

/* The tensors must tile the data buffer: sorted by begin, no holes, no overlap, no tail. */
static int check_tiling(const ink_st_file *f, const char *path, uint64_t data_len, ink_err *err)
{
    ink_st_tensor **order = malloc((size_t)(f->n ? f->n : 1) * sizeof *order);
    if (!order) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    for (int i = 0; i < f->n; i++) order[i] = &f->t[i];
    qsort(order, (size_t)f->n, sizeof *order, cmp_begin);
    uint64_t at = 0;
    int rc = INK_OK;
    for (int i = 0; i < f->n && !rc; i++) {
        if (order[i]->begin < at)
            rc = ink_err_set(err, INK_E_FORMAT, "%s: tensor '%s' [%llu, %llu) overlaps the tensor before it", path,
                             order[i]->name, (unsigned long long)order[i]->begin, (unsigned long long)order[i]->end);
        else if (order[i]->begin > at)
            rc = ink_err_set(err, INK_E_FORMAT, "%s: gap of %llu bytes before tensor '%s'", path,
                             (unsigned long long)(order[i]->begin - at), order[i]->name);
        at = order[i]->end;
    }
    if (!rc && at != data_len)
        rc = ink_err_set(err, INK_E_FORMAT,
                         "%s: tensors cover %llu data bytes but the file holds %llu after the header", path,
                         (unsigned long long)at, (unsigned long long)data_len);
    free(order);
    return rc;
}

int ink_st_open(ink_st_file *f, const char *path, ink_err *err)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    int rc;
    json_t *root = NULL;
    char *hdr = NULL;
    f->path = strdup(path);
    if (!f->path) return ink_err_set(err, INK_E_NOMEM, "out of memory");
    uint64_t n = 0;
    if ((rc = read_header(f, path, &hdr, &n, err))) goto fail;
    json_error_t je;
    root = json_loadb(hdr, n, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        rc = ink_err_set(err, INK_E_FORMAT, "%s: header is not a valid JSON object: %s (byte %d)", path,
                         root ? "not an object" : je.text, root ? 0 : je.position);
        goto fail;
    }
    uint64_t data_len = f->size - f->data_off;
    size_t cnt = json_object_size(root);
    f->t = calloc(cnt ? cnt : 1, sizeof *f->t);
    if (!f->t) {
        rc = ink_err_set(err, INK_E_NOMEM, "out of memory");
        goto fail;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(val)) {
                rc = ink_err_set(err, INK_E_FORMAT, "%s: '__metadata__' must be an object of strings", path);
                goto fail;
            }
            continue;
        }
        ink_st_tensor *t = &f->t[f->n];
        if (parse_entry(f, key, val, t, data_len, err)) {
            rc = INK_E_FORMAT;
            goto fail;
        }
        t->name = strdup(key);
        if (!t->name) {
            rc = ink_err_set(err, INK_E_NOMEM, "out of memory");
            goto fail;
        }
        f->n++;
    }
    if ((rc = check_tiling(f, path, data_len, err))) goto fail;
    qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_name);
    free(hdr);
    json_decref(root);
    return INK_OK;
fail:
    free(hdr);
    json_decref(root);
    ink_st_close(f);
    return rc;
}

/* The whole file into memory of its own (page-aligned, as a mapping is), by pread in chunks of 64 MiB. */
static int read_whole(ink_st_file *f, ink_err *err)
{
    void *m = NULL;
    if (posix_memalign(&m, 4096, f->size ? f->size : 1))
        return ink_err_set(err, INK_E_NOMEM, "%s: cannot allocate %zu bytes to read it into (--no-mmap)", f->path,
                           f->size);
    size_t off = 0;
    while (off < f->size) {
        size_t want = f->size - off < ((size_t)64 << 20) ? f->size - off : (size_t)64 << 20;
        ssize_t r = pread(f->fd, (uint8_t *)m + off, want, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int rc = r < 0
                         ? ink_err_set(err, INK_E_IO, "%s: read failed at byte %zu: %s", f->path, off, strerror(errno))
                         : ink_err_set(err, INK_E_IO, "%s: file ended at byte %zu, expected %zu bytes (changed "
                                                      "since it was opened?)", f->path, off, f->size);
            free(m);
            return rc;
        }
        off += (size_t)r;
    }
    f->map = m;
    return INK_OK;
}

int ink_st_map(ink_st_file *f, ink_err *err)
{
    if (f->map) return INK_OK;
    if (f->read) {
        int rc = read_whole(f, err);
        if (rc) return rc;
    } else {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, f->fd, 0);
        if (m == MAP_FAILED) return ink_err_set(err, INK_E_IO, "%s: mmap failed: %s", f->path, strerror(errno));
        f->map = m;
    }
    for (int i = 0; i < f->n; i++) f->t[i].data = f->map + f->data_off + f->t[i].begin;
    return INK_OK;
}

void ink_st_close(ink_st_file *f)
{
    if (!f) return;
    if (f->map && f->read) free(f->map);
    else if (f->map) munmap(f->map, f->size);
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    free(f->path);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

const ink_st_tensor *ink_st_find(const ink_st_file *f, const char *name)
{
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(name, f->t[mid].name);
        if (!c) return &f->t[mid];
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}
