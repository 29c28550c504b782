/* AVX2 vector exp (Sleef, 1-ulp) and scale-add. */
#include "kernels/kernels.h"
#include "kernels/softmax_tile_body.h"

#include <immintrin.h>
#include <sleef.h>
#include <string.h>

void mla_exp_f32__avx2(const float *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, Sleef_expf8_u10avx2(_mm256_loadu_ps(src + i)));
    if (i < n) { /* the same vector routine on a padded tail */
        float tail[8] = {0};
        memcpy(tail, src + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(tail, Sleef_expf8_u10avx2(_mm256_loadu_ps(tail)));
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
