/* The AVX-512 FMA-throughput probe. */
#include "probe.h"

#include <immintrin.h>

/* 16 independent chains cover FMA latency (4 cycles) x 2 ports with room. */
double bench_fma_probe__avx512(int64_t iters, float *sink)
{
    enum { CHAINS = 16 };
    __m512 acc[CHAINS];
    for (int c = 0; c < CHAINS; c++)
        acc[c] = _mm512_set1_ps((float)c);
    const __m512 mul = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-6f);
    for (int64_t i = 0; i < iters; i++)
        /* fully unrolled, so the chains live in registers, not on the stack */
#pragma GCC unroll 16
        for (int c = 0; c < CHAINS; c++)
            acc[c] = _mm512_fmadd_ps(acc[c], mul, add);
    __m512 sum = acc[0];
    for (int c = 1; c < CHAINS; c++)
        sum = _mm512_add_ps(sum, acc[c]);
    *sink = _mm512_reduce_add_ps(sum);
    return 2.0 * 16 * CHAINS * (double)iters;
}
