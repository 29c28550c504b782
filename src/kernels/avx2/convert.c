/* AVX2 + F16C dtype conversions, bit-exact with the ref kernels. Tails of
 * fewer than one vector go to ref, which defines the same result. */
#include "kernels/kernels.h"

#include "util.h"

#include <immintrin.h>

void mla_cvt_bf16_f32__avx2(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, mla_widen_bf16_ps8(_mm_loadu_si128((const __m128i *)(src + i))));
    mla_cvt_bf16_f32__ref(src + i, dst + i, n - i);
}

void mla_cvt_f32_bf16__avx2(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        mla_store_bf16x16(dst + i, _mm256_loadu_ps(src + i), _mm256_loadu_ps(src + i + 8));
    mla_cvt_f32_bf16__ref(src + i, dst + i, n - i);
}

void mla_cvt_f16_f32__avx2(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    mla_cvt_f16_f32__ref(src + i, dst + i, n - i);
}

void mla_cvt_f32_f16__avx2(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(dst + i), h);
    }
    mla_cvt_f32_f16__ref(src + i, dst + i, n - i);
}
