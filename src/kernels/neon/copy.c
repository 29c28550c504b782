/* AArch64 copy: plain stores. Neoverse and Apple cores detect full-line
 * write streams and stop allocating them in cache by themselves, and STNP is
 * only a hint, so a streaming variant would buy nothing measurable. */
#include "kernels/kernels.h"

#include <string.h>

void mla_copy_stream__neon(void *dst, const void *src, int64_t bytes)
{
    memcpy(dst, src, (size_t)bytes);
}

void mla_store_fence__neon(void)
{
}
