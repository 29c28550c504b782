/* AVX2 streaming copy: the cache lines wholly inside dst are written with
 * vmovntdq, so scattered cache-row writes do not read each line first. */
#include "kernels/kernels.h"

#include <immintrin.h>
#include <string.h>

void mla_copy_stream__avx2(void *dst, const void *src, int64_t bytes)
{
    char *d = dst;
    const char *s = src;
    int64_t head = (int64_t)(-(uintptr_t)d & 63);
    head = head < bytes ? head : bytes;
    memcpy(d, s, (size_t)head);
    for (int64_t i = head; i + 64 <= bytes; i += 64) {
        _mm256_stream_si256((__m256i *)(d + i), _mm256_loadu_si256((const __m256i *)(s + i)));
        _mm256_stream_si256((__m256i *)(d + i + 32), _mm256_loadu_si256((const __m256i *)(s + i + 32)));
    }
    int64_t tail = head + (bytes - head) / 64 * 64;
    memcpy(d + tail, s + tail, (size_t)(bytes - tail));
}

void mla_store_fence__avx2(void)
{
    _mm_sfence();
}
