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

/* 8 elements of a row from element i as f32. */
static ALWAYS_INLINE __m256 load_as_f32(const void *row, mla_dtype dtype, int64_t i)
{
    if (dtype == MLA_DTYPE_F32)
        return _mm256_loadu_ps((const float *)row + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + i));
    if (dtype == MLA_DTYPE_F16)
        return _mm256_cvtph_ps(h);
    return mla_widen_bf16_ps8(h);
}

/* (0 + w0 * prefix) + w1 * suffix, 8 elements from element i. */
static ALWAYS_INLINE __m256 merged(const void *prefix, const void *suffix, mla_dtype dtype,
                                   __m256 w0, __m256 w1, int64_t i)
{
    __m256 y = _mm256_add_ps(_mm256_setzero_ps(), _mm256_mul_ps(w0, load_as_f32(prefix, dtype, i)));
    return _mm256_add_ps(y, _mm256_mul_ps(w1, load_as_f32(suffix, dtype, i)));
}

static ALWAYS_INLINE __m128i narrowed(mla_dtype dtype, __m256 y)
{
    if (dtype == MLA_DTYPE_F16)
        return _mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT);
    /* codes <= 0xffff, so the unsigned saturation keeps them */
    __m256i r = mla_round_bf16_epi32x8(y);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

static ALWAYS_INLINE int64_t merge_pair(void *out, const void *prefix, const void *suffix,
                                        mla_dtype dtype, float w0, float w1, int64_t n)
{
    const __m256 a = _mm256_set1_ps(w0), b = _mm256_set1_ps(w1);
    const int64_t step = dtype == MLA_DTYPE_F32 ? 8 : 16; /* elements in 32 bytes */
    const bool aligned = (uintptr_t)out % 32 == 0;
    int64_t i = 0;
    for (; i + step <= n; i += step) {
        __m256 y = merged(prefix, suffix, dtype, a, b, i);
        __m256i v = _mm256_castps_si256(y);
        if (dtype != MLA_DTYPE_F32)
            v = _mm256_set_m128i(narrowed(dtype, merged(prefix, suffix, dtype, a, b, i + 8)),
                                 narrowed(dtype, y));
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
