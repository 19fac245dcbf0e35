/* check.c — the load-time weight scan behind ink_model_opts.check_tensors (`--check-tensors`):
 * every floating-point tensor of the directory is read once and the first NaN or Inf is reported
 * with the tensor's name and flat element index. Integer (quantized) tensors are skipped. */
#include "model/check.h"
#include "model/model.h"

#include <stdint.h>
#include <string.h>

/* 1 NaN, 2 Inf, 0 finite, for element i of a tensor of dtype dt. */
static int nonfinite(int dt, const uint8_t *p, uint64_t i)
{
    switch (dt) {
    case INK_DT_F32: {
        uint32_t u;
        memcpy(&u, p + 4 * i, 4);
        return (u & 0x7f800000u) != 0x7f800000u ? 0 : (u & 0x007fffffu) ? 1 : 2;
    }
    case INK_DT_F64: {
        uint64_t u;
        memcpy(&u, p + 8 * i, 8);
        return (u & 0x7ff0000000000000ull) != 0x7ff0000000000000ull ? 0 : (u & 0x000fffffffffffffull) ? 1 : 2;
    }
    case INK_DT_BF16: {
        uint16_t u;
        memcpy(&u, p + 2 * i, 2);
        return (u & 0x7f80u) != 0x7f80u ? 0 : (u & 0x007fu) ? 1 : 2;
    }
    case INK_DT_F16: {
        uint16_t u;
        memcpy(&u, p + 2 * i, 2);
        return (u & 0x7c00u) != 0x7c00u ? 0 : (u & 0x03ffu) ? 1 : 2;
    }
    case INK_DT_F8_E4M3: return (p[i] & 0x7f) == 0x7f; /* no Inf in E4M3FN */
    case INK_DT_F8_E5M2: return (p[i] & 0x7c) != 0x7c ? 0 : (p[i] & 0x03) ? 1 : 2;
    default: return 0;
    }
}

static int elem_size(int dt)
{
    switch (dt) {
    case INK_DT_F32: return 4;
    case INK_DT_F64: return 8;
    case INK_DT_BF16:
    case INK_DT_F16: return 2;
    case INK_DT_F8_E4M3:
    case INK_DT_F8_E5M2: return 1;
    default: return 0;
    }
}

int ink_check_tensors(ink_tdir *td, ink_err *err)
{
    for (int k = 0; k < td->n; k++) {
        const ink_tref *r = &td->refs[k];
        int es = elem_size(r->t->dtype);
        if (!es) continue;
        int rc = ink_tdir_map(td, r, err);
        if (rc) return rc;
        uint64_t n = (r->t->end - r->t->begin) / (uint64_t)es;
        for (uint64_t i = 0; i < n; i++) {
            int bad = nonfinite(r->t->dtype, r->t->data, i);
            if (bad)
                return ink_err_set(err, INK_E_FORMAT, "--check-tensors: tensor %s (%s): element %llu is %s", r->name,
                                   td->files[r->file].path, (unsigned long long)i, bad == 1 ? "NaN" : "Inf");
        }
    }
    return INK_OK;
}

int ink_model_check_tensors(ink_model *m, ink_err *err) { return ink_check_tensors(&m->w.td, err); }
