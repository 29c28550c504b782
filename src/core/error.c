#include "error.h"

#include <stdarg.h>
#include <stdio.h>

#define MLA_ERROR_LEN 1024

static _Thread_local char last_error[MLA_ERROR_LEN];

mla_status mla_fail(mla_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

const char *mla_last_error(void)
{
    return last_error;
}

const char *mla_status_str(mla_status status)
{
    switch (status) {
    case MLA_OK: return "MLA_OK";
    case MLA_ERR_INVALID_ARGUMENT: return "MLA_ERR_INVALID_ARGUMENT";
    case MLA_ERR_OUT_OF_RANGE: return "MLA_ERR_OUT_OF_RANGE";
    case MLA_ERR_OVERFLOW: return "MLA_ERR_OVERFLOW";
    case MLA_ERR_UNSUPPORTED: return "MLA_ERR_UNSUPPORTED";
    case MLA_ERR_UNKNOWN_BACKEND: return "MLA_ERR_UNKNOWN_BACKEND";
    case MLA_ERR_BACKEND_INVALID: return "MLA_ERR_BACKEND_INVALID";
    case MLA_ERR_NO_BACKEND: return "MLA_ERR_NO_BACKEND";
    case MLA_ERR_ALREADY_EXISTS: return "MLA_ERR_ALREADY_EXISTS";
    case MLA_ERR_CAPACITY: return "MLA_ERR_CAPACITY";
    case MLA_ERR_BAD_ENV: return "MLA_ERR_BAD_ENV";
    }
    return "MLA_ERR_UNKNOWN_STATUS";
}
