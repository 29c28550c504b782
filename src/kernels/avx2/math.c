/* AVX2 vector exp (Sleef, 1-ulp). */
#include "kernels/kernels.h"

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
