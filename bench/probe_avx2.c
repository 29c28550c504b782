/* The AVX2 FMA-throughput probe. */
#include "probe.h"

#include <immintrin.h>

/* 12 independent chains cover FMA latency (4-5 cycles) x 2 ports. */
double bench_fma_probe__avx2(int64_t iters, float *sink)
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
