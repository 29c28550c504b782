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

/* 16 pairs a step: unpacklo/hi pair up elements within each 128-bit lane
 * (0-3 and 8-11, 4-7 and 12-15), the lane permutes put them in order. */
void mla_interleave_u16__avx2(uint16_t *dst, const uint16_t *even, const uint16_t *odd, int64_t n)
{
    int64_t e = 0;
    for (; e + 16 <= n; e += 16) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(even + e));
        __m256i y = odd ? _mm256_loadu_si256((const __m256i *)(odd + e)) : _mm256_setzero_si256();
        __m256i lo = _mm256_unpacklo_epi16(x, y), hi = _mm256_unpackhi_epi16(x, y);
        _mm256_storeu_si256((__m256i *)(dst + 2 * e), _mm256_permute2x128_si256(lo, hi, 0x20));
        _mm256_storeu_si256((__m256i *)(dst + 2 * e + 16), _mm256_permute2x128_si256(lo, hi, 0x31));
    }
    mla_interleave_u16__ref(dst + 2 * e, even + e, odd ? odd + e : NULL, n - e);
}
