/* The AArch64 ASIMD FMA-throughput probe. */
#include "probe.h"

#include <arm_neon.h>

/* 16 independent chains cover FMA latency (4 cycles) x up to 4 pipes. */
double bench_fma_probe__neon(int64_t iters, float *sink)
{
    enum { CHAINS = 16 };
    float32x4_t acc[CHAINS];
    for (int c = 0; c < CHAINS; c++)
        acc[c] = vdupq_n_f32((float)c);
    const float32x4_t mul = vdupq_n_f32(0.999999f), add = vdupq_n_f32(1e-6f);
    for (int64_t i = 0; i < iters; i++)
        /* fully unrolled, so the chains live in registers, not on the stack */
#pragma GCC unroll 16
        for (int c = 0; c < CHAINS; c++)
            acc[c] = vfmaq_f32(add, acc[c], mul);
    float32x4_t sum = acc[0];
    for (int c = 1; c < CHAINS; c++)
        sum = vaddq_f32(sum, acc[c]);
    *sink = vaddvq_f32(sum);
    return 2.0 * 4 * CHAINS * (double)iters;
}
