/* Reference copies: plain stores, so there is nothing to fence. */
#include "kernels/kernels.h"

#include <string.h>

void mla_copy_stream__ref(void *dst, const void *src, int64_t bytes)
{
    memcpy(dst, src, (size_t)bytes);
}

void mla_store_fence__ref(void)
{
}

void mla_interleave_u16__ref(uint16_t *dst, const uint16_t *even, const uint16_t *odd, int64_t n)
{
    for (int64_t e = 0; e < n; e++) {
        dst[2 * e] = even[e];
        dst[2 * e + 1] = odd ? odd[e] : 0;
    }
}
