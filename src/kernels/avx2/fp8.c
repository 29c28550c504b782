/* AVX2 fp8 conversions with a scale, bit-exact with the ref kernels.
 * Narrowing divides by the scale (multiplies, when that is exact), clamps to
 * the largest finite value, rounds normals by integer arithmetic on the f32
 * bits and denormals by one float add (the adder rounds to nearest even at
 * the denormal spacing). Widening rebiases a normal e4m3 code's exponent
 * in its f32 bits and converts a denormal's mantissa, then multiplies by the
 * scale once, and sends e5m2 through F16C, an e5m2 code being the top byte
 * of an f16. Tails go to ref. */
#include "kernels/fp8_format.h"
#include "kernels/kernels.h"

#include "util.h"

#include <immintrin.h>

/* 8 quotients -> 8 fp8 codes, one per 32-bit lane. */
static inline __m256i round_to_fp8(const mla_fp8_format *c, __m256 q)
{
    const __m256i x = _mm256_castps_si256(q);
    const __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    /* saturate first: the largest finite value rounds to its own code */
    const __m256i a = _mm256_min_epu32(abs, _mm256_set1_epi32(c->max_bits));
    const int shift = 23 - c->man_bits;
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(a, shift), _mm256_set1_epi32(1));
    const __m256i biased = _mm256_add_epi32(a, _mm256_set1_epi32((int32_t)mla_fp8_round_bias(c)));
    const __m256i normal = _mm256_srli_epi32(_mm256_add_epi32(biased, lsb), shift);
    const __m256 magic = _mm256_set1_ps(c->denormal_magic);
    const __m256i denormal = _mm256_sub_epi32(
        _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), magic)), _mm256_castps_si256(magic));
    const __m256i is_denormal = _mm256_cmpgt_epi32(_mm256_set1_epi32(c->min_normal), a);
    const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
    __m256i code = _mm256_blendv_epi8(normal, denormal, is_denormal);
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(c->nan_code), is_nan);
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(x, 24), _mm256_set1_epi32(0x80));
    return _mm256_or_si256(code, sign);
}

static inline void narrow(const mla_fp8_format *c, const float *src, uint8_t *dst, int64_t n, float scale)
{
    float inv;
    const bool multiply = mla_fp8_exact_reciprocal(scale, &inv);
    const __m256 s = _mm256_set1_ps(multiply ? inv : scale);
    for (int64_t i = 0; i + 16 <= n; i += 16) {
        __m256 x0 = _mm256_loadu_ps(src + i), x1 = _mm256_loadu_ps(src + i + 8);
        __m256i lo = round_to_fp8(c, multiply ? _mm256_mul_ps(x0, s) : _mm256_div_ps(x0, s));
        __m256i hi = round_to_fp8(c, multiply ? _mm256_mul_ps(x1, s) : _mm256_div_ps(x1, s));
        /* packus works per 128-bit lane; put the quarters back in order */
        __m256i words = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
        __m128i bytes = _mm_packus_epi16(_mm256_castsi256_si128(words),
                                         _mm256_extracti128_si256(words, 1));
        _mm_storeu_si128((__m128i *)(dst + i), bytes);
    }
}

void mla_cvt_f32_e4m3__avx2(const float *src, uint8_t *dst, int64_t n, float scale)
{
    int64_t body = n & ~(int64_t)15;
    narrow(&MLA_FP8_E4M3, src, dst, body, scale);
    mla_cvt_f32_e4m3__ref(src + body, dst + body, n - body, scale);
}

void mla_cvt_f32_e5m2__avx2(const float *src, uint8_t *dst, int64_t n, float scale)
{
    int64_t body = n & ~(int64_t)15;
    narrow(&MLA_FP8_E5M2, src, dst, body, scale);
    mla_cvt_f32_e5m2__ref(src + body, dst + body, n - body, scale);
}

/* 8 e4m3 codes -> 8 floats times scale, as neon/fp8.c: a normal code's
 * magnitude bits moved up 20 with the exponent rebiased by 120 are its f32,
 * a denormal's mantissa times 2^-9 is exact, and multiplying by scale rounds
 * once. Nothing on the way is an f32 denormal (a microcode assist on Intel
 * cores, and 0 under DAZ). */
static inline __m256 widen_e4m3(__m128i bytes, __m256 scale)
{
    const __m256i b = _mm256_cvtepu8_epi32(bytes);
    const __m256i mag = _mm256_and_si256(b, _mm256_set1_epi32(0x7f));
    const __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23));
    const __m256 denormal = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(0x1p-9f));
    const __m256i is_denormal = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag);
    __m256 v = _mm256_blendv_ps(_mm256_castsi256_ps(normal), denormal, _mm256_castsi256_ps(is_denormal));
    v = _mm256_mul_ps(v, scale);
    const __m256i is_nan = _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f));
    v = _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7ff00000)), _mm256_castsi256_ps(is_nan));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24);
    return _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(v), sign));
}

/* 8 e5m2 codes -> 8 floats (unscaled): each code is the high byte of an f16. */
static inline __m256 widen_e5m2(__m128i bytes)
{
    return _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(bytes), 8));
}

void mla_cvt_e4m3_f32__avx2(const uint8_t *src, float *dst, int64_t n, float scale)
{
    const __m256 s = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, widen_e4m3(_mm_loadl_epi64((const __m128i *)(src + i)), s));
    mla_cvt_e4m3_f32__ref(src + i, dst + i, n - i, scale);
}

void mla_cvt_e5m2_f32__avx2(const uint8_t *src, float *dst, int64_t n, float scale)
{
    const __m256 s = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_mul_ps(widen_e5m2(_mm_loadl_epi64((const __m128i *)(src + i))), s));
    mla_cvt_e5m2_f32__ref(src + i, dst + i, n - i, scale);
}

/* Widened as above and rounded to bf16 in registers: no f32 row between. */
void mla_cvt_e4m3_bf16__avx2(const uint8_t *src, uint16_t *dst, int64_t n, float scale)
{
    const __m256 s = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        mla_store_bf16x16(dst + i, widen_e4m3(_mm_loadl_epi64((const __m128i *)(src + i)), s),
                          widen_e4m3(_mm_loadl_epi64((const __m128i *)(src + i + 8)), s));
    mla_cvt_e4m3_bf16__ref(src + i, dst + i, n - i, scale);
}

void mla_cvt_e5m2_bf16__avx2(const uint8_t *src, uint16_t *dst, int64_t n, float scale)
{
    const __m256 s = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        mla_store_bf16x16(dst + i,
                          _mm256_mul_ps(widen_e5m2(_mm_loadl_epi64((const __m128i *)(src + i))), s),
                          _mm256_mul_ps(widen_e5m2(_mm_loadl_epi64((const __m128i *)(src + i + 8))), s));
    mla_cvt_e5m2_bf16__ref(src + i, dst + i, n - i, scale);
}
