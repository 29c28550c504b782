/* AVX2 + F16C merge_pair, bit-exact with the ref kernel: widened, weighted
 * and rounded back in registers (the rounding of avx2/convert.c), 32 bytes
 * of out a step, written with streaming stores when out is aligned to them
 * (no read-for-ownership of lines the merge overwrites whole). A tail of
 * less than a step goes to ref, which defines the same result. */
#include "kernels/kernels.h"

#include "util.h"

#include <immintrin.h>
#include <stdbool.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* (0 + w0 * p) + w1 * s, ref's expression (the zero makes a -0 sum +0). */
static ALWAYS_INLINE __m256 weighted(__m256 w0, __m256 p, __m256 w1, __m256 s)
{
    __m256 y = _mm256_add_ps(_mm256_setzero_ps(), _mm256_mul_ps(w0, p));
    return _mm256_add_ps(y, _mm256_mul_ps(w1, s));
}

/* 8 f16 elements of a row from element i as f32. */
static ALWAYS_INLINE __m256 load_f16(const void *row, int64_t i)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i)));
}

/* bf16 codes of a 256-bit vector as f32, code << 16, the low four codes of
 * each 128-bit lane (lo) or the high four (hi): elements 0-3 and 8-11, or
 * 4-7 and 12-15. packus_epi32 of the two halves' rounded codes puts them
 * back in order, so no lane crosses. */
static ALWAYS_INLINE __m256 bf16_lo(__m256i v)
{
    return _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), v));
}

static ALWAYS_INLINE __m256 bf16_hi(__m256i v)
{
    return _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), v));
}

/* 32 bytes of out from element i: the merge of 8 (f32) or 16 elements. */
static ALWAYS_INLINE __m256i merged_step(const void *prefix, const void *suffix, mla_dtype dtype,
                                         __m256 w0, __m256 w1, int64_t i)
{
    if (dtype == MLA_DTYPE_F32)
        return _mm256_castps_si256(weighted(w0, _mm256_loadu_ps((const float *)prefix + i), w1,
                                            _mm256_loadu_ps((const float *)suffix + i)));
    if (dtype == MLA_DTYPE_F16) {
        __m256 lo = weighted(w0, load_f16(prefix, i), w1, load_f16(suffix, i));
        __m256 hi = weighted(w0, load_f16(prefix, i + 8), w1, load_f16(suffix, i + 8));
        return _mm256_set_m128i(_mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT),
                                _mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT));
    }
    const __m256i p = _mm256_loadu_si256((const __m256i *)((const uint16_t *)prefix + i));
    const __m256i s = _mm256_loadu_si256((const __m256i *)((const uint16_t *)suffix + i));
    __m256 lo = weighted(w0, bf16_lo(p), w1, bf16_lo(s));
    __m256 hi = weighted(w0, bf16_hi(p), w1, bf16_hi(s));
    /* codes <= 0xffff, so the unsigned saturation keeps them */
    return _mm256_packus_epi32(mla_round_bf16_epi32x8(lo), mla_round_bf16_epi32x8(hi));
}

static ALWAYS_INLINE int64_t merge_pair(void *out, const void *prefix, const void *suffix,
                                        mla_dtype dtype, float w0, float w1, int64_t n)
{
    const __m256 a = _mm256_set1_ps(w0), b = _mm256_set1_ps(w1);
    const int64_t step = dtype == MLA_DTYPE_F32 ? 8 : 16; /* elements in 32 bytes */
    const bool aligned = (uintptr_t)out % 32 == 0;
    int64_t i = 0;
    for (; i + step <= n; i += step) {
        __m256i v = merged_step(prefix, suffix, dtype, a, b, i);
        __m256i *dst = (__m256i *)((char *)out + i * (dtype == MLA_DTYPE_F32 ? 4 : 2));
        if (aligned)
            _mm256_stream_si256(dst, v);
        else
            _mm256_storeu_si256(dst, v);
    }
    return i;
}

void mla_merge_pair__avx2(void *out, const void *prefix, const void *suffix, mla_dtype dtype,
                          float w0, float w1, int64_t n)
{
    int64_t i, size = dtype == MLA_DTYPE_F32 ? 4 : 2;
    switch (dtype) {
    case MLA_DTYPE_BF16: i = merge_pair(out, prefix, suffix, MLA_DTYPE_BF16, w0, w1, n); break;
    case MLA_DTYPE_F16: i = merge_pair(out, prefix, suffix, MLA_DTYPE_F16, w0, w1, n); break;
    default: i = merge_pair(out, prefix, suffix, MLA_DTYPE_F32, w0, w1, n); break;
    }
    mla_merge_pair__ref((char *)out + i * size, (const char *)prefix + i * size,
                        (const char *)suffix + i * size, dtype, w0, w1, n - i);
}
