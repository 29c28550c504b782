/* AArch64 ASIMD vector exp (Sleef, 1-ulp) and scale-add. */
#include "kernels/kernels.h"
#include "kernels/softmax_tile_body.h"

#include <arm_neon.h>
#include <sleef.h>
#include <string.h>

void mla_exp_f32__neon(const float *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(dst + i, Sleef_expf4_u10advsimd(vld1q_f32(src + i)));
    if (i < n) { /* the same vector routine on a padded tail */
        float tail[4] = {0};
        memcpy(tail, src + i, (size_t)(n - i) * sizeof(float));
        vst1q_f32(tail, Sleef_expf4_u10advsimd(vld1q_f32(tail)));
        memcpy(dst + i, tail, (size_t)(n - i) * sizeof(float));
    }
}

/* FMUL then FADD, never vfmaq_f32 (nor vmlaq_f32, which compilers may
 * fuse): ref's two roundings. */
void mla_scale_add_f32__neon(float *y, const float *x, float w, int64_t n)
{
    const float32x4_t wv = vdupq_n_f32(w);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, vaddq_f32(vld1q_f32(y + i), vmulq_f32(wv, vld1q_f32(x + i))));
    for (; i < n; i++) /* the same two roundings in scalar FP */
        y[i] = y[i] + w * x[i];
}

void mla_softmax_tile__neon(float *s, int64_t n, int64_t ld, int64_t nr, float score_scale,
                            const int64_t *hidden, float *m, float *l, float *alpha)
{
    mla_softmax_tile_body(s, n, ld, nr, score_scale, hidden, m, l, alpha, mla_exp_f32__neon);
}
