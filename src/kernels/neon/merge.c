/* NEON merge_pair, bit-exact with the ref kernel: 4 elements a step,
 * widened, weighted and rounded back in registers (the rounding of
 * neon/convert.c). A tail of fewer than 4 goes to ref. */
#include "kernels/kernels.h"

#include "util.h"

#include <arm_neon.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE float32x4_t load_as_f32(const void *row, mla_dtype dtype, int64_t i)
{
    if (dtype == MLA_DTYPE_F32)
        return vld1q_f32((const float *)row + i);
    uint16x4_t h = vld1_u16((const uint16_t *)row + i);
    if (dtype == MLA_DTYPE_F16)
        return vcvt_f32_f16(vreinterpret_f16_u16(h));
    return mla_widen_bf16_f32x4(h);
}

static ALWAYS_INLINE void store_from_f32(void *row, mla_dtype dtype, int64_t i, float32x4_t y)
{
    if (dtype == MLA_DTYPE_F32)
        vst1q_f32((float *)row + i, y);
    else if (dtype == MLA_DTYPE_F16)
        vst1_u16((uint16_t *)row + i, vreinterpret_u16_f16(vcvt_f16_f32(y)));
    else
        vst1_u16((uint16_t *)row + i, mla_round_bf16_u16x4(y));
}

/* vmulq then vaddq, never vfmaq: ref's two roundings. */
static ALWAYS_INLINE int64_t merge_pair(void *out, const void *prefix, const void *suffix,
                                        mla_dtype dtype, float w0, float w1, int64_t n)
{
    const float32x4_t a = vdupq_n_f32(w0), b = vdupq_n_f32(w1);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t y = vaddq_f32(vdupq_n_f32(0.0f), vmulq_f32(a, load_as_f32(prefix, dtype, i)));
        y = vaddq_f32(y, vmulq_f32(b, load_as_f32(suffix, dtype, i)));
        store_from_f32(out, dtype, i, y);
    }
    return i;
}

void mla_merge_pair__neon(void *out, const void *prefix, const void *suffix, mla_dtype dtype,
                          float w0, float w1, int64_t n)
{
    int64_t i, size = dtype == MLA_DTYPE_F32 ? 4 : 2;
    switch (dtype) {
    case MLA_DTYPE_BF16: i = merge_pair(out, prefix, suffix, MLA_DTYPE_BF16, w0, w1, n); break;
    case MLA_DTYPE_F16: i = merge_pair(out, prefix, suffix, MLA_DTYPE_F16, w0, w1, n); break;
    default: i = merge_pair(out, prefix, suffix, MLA_DTYPE_F32, w0, w1, n); break;
    }
    mla_merge_pair__ref((char *)out + i * size, (const char *)prefix + i * size,
                        (const char *)suffix + i * size, dtype, w0, w1, n - i);
}
