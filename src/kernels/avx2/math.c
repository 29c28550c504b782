/* AVX2 vector exp (exp_f32_poly.h, within 1 ulp) and scale-add. */
#include "kernels/exp_f32_poly.h"
#include "kernels/kernels.h"
#include "kernels/softmax_tile_body.h"

#include <immintrin.h>
#include <string.h>

/* 2^k for integer lanes k in [-126, 127], from its exponent bits. */
static inline __m256 pow2_ps(__m256i k)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

static inline __m256 exp_ps(__m256 x)
{
    const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(MLA_EXP_MIN), _CMP_NLT_UQ);
    x = _mm256_min_ps(_mm256_set1_ps(MLA_EXP_MAX), _mm256_and_ps(x, keep));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(MLA_EXP_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(MLA_EXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(MLA_EXP_LN2_LO), r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(MLA_EXP_C6), r, _mm256_set1_ps(MLA_EXP_C5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(MLA_EXP_C4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(MLA_EXP_C3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(MLA_EXP_C2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* n in [-150, 128] splits into two halves whose powers of two are
     * normal: the first product is exact, the second rounds once (into a
     * denormal, or to infinity) */
    const __m256i k = _mm256_cvtps_epi32(n), half = _mm256_srai_epi32(k, 1);
    const __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, pow2_ps(half)), pow2_ps(_mm256_sub_epi32(k, half)));
    return _mm256_and_ps(y, keep);
}

void mla_exp_f32__avx2(const float *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, exp_ps(_mm256_loadu_ps(src + i)));
    if (i < n) { /* the same vector routine on a padded tail */
        float tail[8] = {0};
        memcpy(tail, src + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(tail, exp_ps(_mm256_loadu_ps(tail)));
        memcpy(dst + i, tail, (size_t)(n - i) * sizeof(float));
    }
}

/* A separate multiply and add, never _mm256_fmadd_ps: ref's two roundings. */
void mla_scale_add_f32__avx2(float *y, const float *x, float w, int64_t n)
{
    const __m256 wv = _mm256_set1_ps(w);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i),
                                              _mm256_mul_ps(wv, _mm256_loadu_ps(x + i))));
    for (; i < n; i++) /* the same two roundings in scalar SSE */
        y[i] = y[i] + w * x[i];
}

void mla_softmax_tile__avx2(float *s, int64_t n, int64_t ld, int64_t nr, float score_scale,
                            const int64_t *hidden, float *m, float *l, float *alpha)
{
    mla_softmax_tile_body(s, n, ld, nr, score_scale, hidden, m, l, alpha, mla_exp_f32__avx2);
}
