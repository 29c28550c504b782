/* AVX-512 vector exp (Sleef, 1-ulp) and scale-add. */
#include "kernels/kernels.h"
#include "kernels/softmax_tile_body.h"

#include "util.h"

#include <immintrin.h>
#include <sleef.h>

void mla_exp_f32__avx512(const float *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = mla_tail_mask16(n - i);
        __m512 e = Sleef_expf16_u10avx512f(_mm512_maskz_loadu_ps(m, src + i));
        _mm512_mask_storeu_ps(dst + i, m, e);
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
