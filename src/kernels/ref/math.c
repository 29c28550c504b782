/* Reference vector exp and scale-add. */
#include "kernels/kernels.h"
#include "kernels/softmax_tile_body.h"

#include <math.h>

void mla_exp_f32__ref(const float *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = expf(src[i]);
}

/* Two roundings as written: the Makefile's -ffp-contract=off keeps the
 * compiler from fusing them into an FMA. */
void mla_scale_add_f32__ref(float *y, const float *x, float w, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = y[i] + w * x[i];
}

void mla_softmax_tile__ref(float *s, int64_t n, int64_t ld, int64_t nr, float score_scale,
                           const int64_t *hidden, float *m, float *l, float *alpha)
{
    mla_softmax_tile_body(s, n, ld, nr, score_scale, hidden, m, l, alpha, mla_exp_f32__ref);
}
