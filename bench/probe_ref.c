/* The scalar FMA-throughput probe: eight independent multiply-add chains
 * (no FMA instruction is assumed). */
#include "probe.h"

double bench_fma_probe__ref(int64_t iters, float *sink)
{
    enum { CHAINS = 8 };
    float acc[CHAINS];
    for (int c = 0; c < CHAINS; c++)
        acc[c] = (float)c;
    const float mul = 0.999999f, add = 1e-6f;
    for (int64_t i = 0; i < iters; i++)
        /* fully unrolled, so the chains live in registers, not on the stack */
#pragma GCC unroll 16
        for (int c = 0; c < CHAINS; c++)
            acc[c] = acc[c] * mul + add;
    float sum = 0.0f;
    for (int c = 0; c < CHAINS; c++)
        sum += acc[c];
    *sink = sum;
    return 2.0 * CHAINS * (double)iters;
}
