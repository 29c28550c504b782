/* Failure reporting: every layer records what went wrong here, and the
 * public mla_last_error() reads it back on the same thread. */
#ifndef MLA_CORE_ERROR_H
#define MLA_CORE_ERROR_H

#include "mla.h"

/* Records a printf-style message for mla_last_error() and returns status. */
mla_status mla_fail(mla_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
