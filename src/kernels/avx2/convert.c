/* AVX2 + F16C dtype conversions, bit-exact with the ref kernels. Tails of
 * fewer than one vector go to ref, which defines the same result. */
#include "kernels/kernels.h"

#include <immintrin.h>

void mla_cvt_bf16_f32__avx2(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(h, 16));
    }
    mla_cvt_bf16_f32__ref(src + i, dst + i, n - i);
}

/* 8 floats -> 8 bf16 codes in the low half of each 32-bit lane. */
static inline __m256i round_to_bf16(__m256 f)
{
    const __m256i x = _mm256_castps_si256(f);
    const __m256i hi = _mm256_srli_epi32(x, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, bias), 16);
    const __m256i quiet_nan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    const __m256 is_nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
    return _mm256_blendv_epi8(rounded, quiet_nan, _mm256_castps_si256(is_nan));
}

void mla_cvt_f32_bf16__avx2(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i lo = round_to_bf16(_mm256_loadu_ps(src + i));
        __m256i hi = round_to_bf16(_mm256_loadu_ps(src + i + 8));
        /* packus works per 128-bit lane; put the quarters back in order */
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
        _mm256_storeu_si256((__m256i *)(dst + i), packed);
    }
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
