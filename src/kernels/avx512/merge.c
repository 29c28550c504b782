/* AVX-512 merge_pair, bit-exact with the ref kernel: widened, weighted and
 * rounded back in registers (the rounding of avx512/convert.c), 64 bytes of
 * out a step, so that an aligned out is written in whole lines with
 * streaming stores (no read-for-ownership of lines the merge overwrites
 * whole); a tail of less than a line under masks. */
#include "kernels/kernels.h"

#include "util.h"

#include <stdbool.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* 16 elements of a row from element i as f32 (m: those inside it). */
static ALWAYS_INLINE __m512 load_as_f32(const void *row, mla_dtype dtype, int64_t i, __mmask16 m)
{
    if (dtype == MLA_DTYPE_F32)
        return _mm512_maskz_loadu_ps(m, (const float *)row + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + i);
    if (dtype == MLA_DTYPE_F16)
        return _mm512_cvtph_ps(h);
    return mla_widen_bf16_ps(h);
}

/* (0 + w0 * prefix) + w1 * suffix, 16 elements from element i. */
static ALWAYS_INLINE __m512 merged(const void *prefix, const void *suffix, mla_dtype dtype,
                                   __m512 w0, __m512 w1, int64_t i, __mmask16 m)
{
    __m512 y = _mm512_add_ps(_mm512_setzero_ps(), _mm512_mul_ps(w0, load_as_f32(prefix, dtype, i, m)));
    return _mm512_add_ps(y, _mm512_mul_ps(w1, load_as_f32(suffix, dtype, i, m)));
}

static ALWAYS_INLINE __m256i narrowed(mla_dtype dtype, __m512 y)
{
    return dtype == MLA_DTYPE_F16 ? _mm512_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT)
                                  : _mm512_cvtepi32_epi16(mla_round_bf16_epi32(y));
}

static ALWAYS_INLINE void merge_pair(void *out, const void *prefix, const void *suffix,
                                     mla_dtype dtype, float w0, float w1, int64_t n)
{
    const __m512 a = _mm512_set1_ps(w0), b = _mm512_set1_ps(w1);
    const int64_t step = dtype == MLA_DTYPE_F32 ? 16 : 32; /* elements in 64 bytes */
    const bool aligned = (uintptr_t)out % 64 == 0;
    int64_t i = 0;
    for (; i + step <= n; i += step) {
        __m512 y = merged(prefix, suffix, dtype, a, b, i, 0xffff);
        __m512i line = _mm512_castps_si512(y);
        if (dtype != MLA_DTYPE_F32) {
            __m512 y1 = merged(prefix, suffix, dtype, a, b, i + 16, 0xffff);
            line = _mm512_inserti64x4(_mm512_castsi256_si512(narrowed(dtype, y)), narrowed(dtype, y1), 1);
        }
        char *dst = (char *)out + i * (dtype == MLA_DTYPE_F32 ? 4 : 2);
        if (aligned)
            _mm512_stream_si512((__m512i *)dst, line);
        else
            _mm512_storeu_si512(dst, line);
    }
    for (; i < n; i += 16) {
        __mmask16 m = mla_tail_mask16(n - i);
        __m512 y = merged(prefix, suffix, dtype, a, b, i, m);
        if (dtype == MLA_DTYPE_F32)
            _mm512_mask_storeu_ps((float *)out + i, m, y);
        else
            _mm256_mask_storeu_epi16((uint16_t *)out + i, m, narrowed(dtype, y));
    }
}

void mla_merge_pair__avx512(void *out, const void *prefix, const void *suffix, mla_dtype dtype,
                            float w0, float w1, int64_t n)
{
    switch (dtype) {
    case MLA_DTYPE_BF16: merge_pair(out, prefix, suffix, MLA_DTYPE_BF16, w0, w1, n); break;
    case MLA_DTYPE_F16: merge_pair(out, prefix, suffix, MLA_DTYPE_F16, w0, w1, n); break;
    default: merge_pair(out, prefix, suffix, MLA_DTYPE_F32, w0, w1, n); break;
    }
}
