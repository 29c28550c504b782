/* Internals shared by the metadata builders. */
#ifndef MLA_METADATA_METADATA_H
#define MLA_METADATA_METADATA_H

#include <stdint.h>

/* Output entries (int32) below which a fill stays on the calling thread: a
 * fork/join costs a few microseconds, about what one thread writes in 256K
 * entries' worth of memory bandwidth. */
#define MLA_METADATA_PARALLEL_MIN ((int64_t)1 << 18)

/* a / b rounded up, for a >= 0 and b >= 1, without overflowing a + b. */
static inline int64_t mla_ceil_div(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

#endif
