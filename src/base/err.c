/* err.c — ink_err recording (first error wins) and status names. Depends on libc only. */
#include "inkling.h"

#include <stdarg.h>
#include <stdio.h>

int ink_err_set(ink_err *e, int code, const char *fmt, ...)
{
    if (e && e->code == INK_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        e->code = code;
    }
    return code;
}

const char *ink_status_str(int code)
{
    switch (code) {
    case INK_OK: return "ok";
    case INK_E_IO: return "io error";
    case INK_E_FORMAT: return "format error";
    case INK_E_NOMEM: return "out of memory";
    case INK_E_INVAL: return "invalid argument";
    case INK_E_UNSUPPORTED: return "unsupported";
    case INK_E_CTX_FULL: return "context full";
    case INK_E_CANCELLED: return "cancelled";
    case INK_E_NET: return "network error";
    case INK_E_NUMERIC: return "numeric error";
    case INK_E_ABSENT: return "not present";
    default: return "unknown error";
    }
}
