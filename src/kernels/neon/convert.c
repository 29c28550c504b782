/* AArch64 ASIMD dtype conversions, bit-exact with the ref kernels.
 * FCVTL/FCVTN (f16 <-> f32) are base ASIMD; they round to nearest even and
 * quiet NaNs under Linux's default FPCR. Tails go to ref. */
#include "kernels/kernels.h"

#include "util.h"

#include <arm_neon.h>

void mla_cvt_bf16_f32__neon(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint16x8_t h = vld1q_u16(src + i);
        vst1q_f32(dst + i, mla_widen_bf16_f32x4(vget_low_u16(h)));
        vst1q_f32(dst + i + 4, mla_widen_bf16_f32x4(vget_high_u16(h)));
    }
    mla_cvt_bf16_f32__ref(src + i, dst + i, n - i);
}

void mla_cvt_f32_bf16__neon(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1_u16(dst + i, mla_round_bf16_u16x4(vld1q_f32(src + i)));
    mla_cvt_f32_bf16__ref(src + i, dst + i, n - i);
}

void mla_cvt_f16_f32__neon(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(dst + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(src + i))));
    mla_cvt_f16_f32__ref(src + i, dst + i, n - i);
}

void mla_cvt_f32_f16__neon(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1_u16(dst + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
    mla_cvt_f32_f16__ref(src + i, dst + i, n - i);
}
