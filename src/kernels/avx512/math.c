/* AVX-512 vector exp (exp_f32_poly.h, within 1 ulp) and scale-add. */
#include "kernels/exp_f32_poly.h"
#include "kernels/kernels.h"
#include "kernels/softmax_tile_body.h"

#include "util.h"

#include <immintrin.h>

static inline __m512 exp_ps(__m512 x)
{
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(MLA_EXP_MIN), _CMP_NLT_UQ);
    x = _mm512_min_ps(_mm512_set1_ps(MLA_EXP_MAX), _mm512_maskz_mov_ps(keep, x));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(MLA_EXP_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(MLA_EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(MLA_EXP_LN2_LO), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(MLA_EXP_C6), r, _mm512_set1_ps(MLA_EXP_C5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MLA_EXP_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MLA_EXP_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MLA_EXP_C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(keep, p, n); /* p * 2^n, rounded once */
}

void mla_exp_f32__avx512(const float *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = mla_tail_mask16(n - i);
        _mm512_mask_storeu_ps(dst + i, m, exp_ps(_mm512_maskz_loadu_ps(m, src + i)));
    }
}

/* A separate multiply and add, never _mm512_fmadd_ps: ref's two roundings. */
void mla_scale_add_f32__avx512(float *y, const float *x, float w, int64_t n)
{
    const __m512 wv = _mm512_set1_ps(w);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = mla_tail_mask16(n - i);
        __m512 sum = _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i),
                                   _mm512_mul_ps(wv, _mm512_maskz_loadu_ps(m, x + i)));
        _mm512_mask_storeu_ps(y + i, m, sum);
    }
}

void mla_softmax_tile__avx512(float *s, int64_t n, int64_t ld, int64_t nr, float score_scale,
                              const int64_t *hidden, float *m, float *l, float *alpha)
{
    mla_softmax_tile_body(s, n, ld, nr, score_scale, hidden, m, l, alpha, mla_exp_f32__avx512);
}
