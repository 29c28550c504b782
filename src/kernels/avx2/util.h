/* Helpers shared by the AVX2 micro-kernels. */
#ifndef MLA_AVX2_UTIL_H
#define MLA_AVX2_UTIL_H

#include <immintrin.h>
#include <stdint.h>

/* The vector mask of an 8-lane step: lane i all ones for i < count (the
 * form vpmaskmovd takes). */
static inline __m256i mla_first_lanes8(int64_t count)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* 8 bf16 codes widened to f32, exactly (each code's bits << 16). */
static inline __m256 mla_widen_bf16_ps8(__m128i h)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* 8 floats rounded to bf16 (nearest even, denormals kept, NaNs quieted),
 * each code in the low half of its 32-bit lane with the high half 0: the
 * rounding of mla_cvt_f32_bf16__ref. */
static inline __m256i mla_round_bf16_epi32x8(__m256 f)
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

/* 16 floats (lo, then hi) rounded to bf16 as mla_round_bf16_epi32x8 does,
 * stored at dst in order. */
static inline void mla_store_bf16x16(uint16_t *dst, __m256 lo, __m256 hi)
{
    /* packus works per 128-bit lane; put the quarters back in order */
    __m256i packed = _mm256_packus_epi32(mla_round_bf16_epi32x8(lo), mla_round_bf16_epi32x8(hi));
    _mm256_storeu_si256((__m256i *)dst, _mm256_permute4x64_epi64(packed, 0xd8));
}

#endif
