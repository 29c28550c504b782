/* AVX-512 (F/BW/VL/DQ) dtype conversions, bit-exact with the ref kernels.
 * Tails use masked loads and stores. vcvtneps2bf16 (AVX512_BF16) is not used:
 * it flushes denormals, and these conversions keep them. */
#include "kernels/kernels.h"

#include "util.h"

void mla_cvt_bf16_f32__avx512(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = mla_tail_mask16(n - i);
        _mm512_mask_storeu_ps(dst + i, m, mla_widen_bf16_ps(_mm256_maskz_loadu_epi16(m, src + i)));
    }
}

void mla_cvt_f32_bf16__avx512(const float *src, uint16_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = mla_tail_mask16(n - i);
        __m512i r = mla_round_bf16_epi32(_mm512_maskz_loadu_ps(m, src + i));
        _mm256_mask_storeu_epi16(dst + i, m, _mm512_cvtepi32_epi16(r));
    }
}

void mla_cvt_f16_f32__avx512(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = mla_tail_mask16(n - i);
        __m512 f = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + i));
        _mm512_mask_storeu_ps(dst + i, m, f);
    }
}

void mla_cvt_f32_f16__avx512(const float *src, uint16_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = mla_tail_mask16(n - i);
        __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_mask_storeu_epi16(dst + i, m, h);
    }
}
