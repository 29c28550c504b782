/* Helpers shared by the AVX-512 micro-kernels. */
#ifndef MLA_AVX512_UTIL_H
#define MLA_AVX512_UTIL_H

#include <immintrin.h>
#include <stdint.h>

/* Lanes of a 16-wide step that are still inside the array. */
static inline __mmask16 mla_tail_mask16(int64_t left)
{
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

/* Lanes of a 32-wide step (16-bit lanes, or bytes) still inside the array. */
static inline __mmask32 mla_tail_mask32(int64_t left)
{
    return left >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << left) - 1u);
}

/* 16 bf16 codes widened to f32, exactly (each code's bits << 16). */
static inline __m512 mla_widen_bf16_ps(__m256i h)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* f32 lanes rounded to bf16 (nearest even, denormals kept, NaNs quieted),
 * each in the low half of its 32-bit lane with the high half 0: the
 * rounding of mla_cvt_f32_bf16__ref, in integer operations. */
static inline __m512i mla_round_bf16_epi32(__m512 f)
{
    const __m512i x = _mm512_castps_si512(f), hi = _mm512_srli_epi32(x, 16);
    const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                          _mm512_and_si512(hi, _mm512_set1_epi32(1)));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, bias), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    return _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
}

#endif
