/* Thread-local failure messages behind mla_last_error(). */
#ifndef MLA_DISPATCH_ERROR_H
#define MLA_DISPATCH_ERROR_H

#include "mla.h"

/* Records a printf-style message for mla_last_error() and returns status. */
mla_status mla_fail(mla_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Multiplies two non-negative sizes; false (and *out untouched) on overflow. */
static inline bool mla_mul_size(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

#endif
