/* AVX2 vector exp (Sleef, 1-ulp) and the FMA-throughput probe. */
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

/* 12 independent chains cover FMA latency (4-5 cycles) x 2 ports. */
double mla_fma_probe_f32__avx2(int64_t iters, float *sink)
{
    enum { CHAINS = 12 };
    __m256 acc[CHAINS];
    for (int c = 0; c < CHAINS; c++)
        acc[c] = _mm256_set1_ps((float)c);
    const __m256 mul = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-6f);
    for (int64_t i = 0; i < iters; i++)
        /* fully unrolled, so the chains live in registers, not on the stack */
#pragma GCC unroll 16
        for (int c = 0; c < CHAINS; c++)
            acc[c] = _mm256_fmadd_ps(acc[c], mul, add);
    __m256 sum = acc[0];
    for (int c = 1; c < CHAINS; c++)
        sum = _mm256_add_ps(sum, acc[c]);
    *sink = _mm256_cvtss_f32(sum);
    return 2.0 * 8 * CHAINS * (double)iters;
}
