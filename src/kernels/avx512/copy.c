/* The streaming copy of avx2/copy.c: a line written as two 32-byte
 * non-temporal stores streams as well as one 64-byte store, and every
 * AVX-512 CPU runs AVX2. */
#include "kernels/kernels.h"

void mla_copy_stream__avx512(void *dst, const void *src, int64_t bytes)
{
    mla_copy_stream__avx2(dst, src, bytes);
}

void mla_store_fence__avx512(void)
{
    mla_store_fence__avx2();
}
