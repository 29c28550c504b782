/* Reference vector exp. */
#include "kernels/kernels.h"

#include <math.h>

void mla_exp_f32__ref(const float *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = expf(src[i]);
}
