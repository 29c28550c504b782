/* Reference copy: plain stores, so there is nothing to fence. */
#include "kernels/kernels.h"

#include <string.h>

void mla_copy_stream__ref(void *dst, const void *src, int64_t bytes)
{
    memcpy(dst, src, (size_t)bytes);
}

void mla_store_fence__ref(void)
{
}
