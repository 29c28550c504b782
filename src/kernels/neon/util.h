/* Helpers shared by the NEON micro-kernels. */
#ifndef MLA_NEON_UTIL_H
#define MLA_NEON_UTIL_H

#include <arm_neon.h>

/* 4 bf16 codes widened to f32, exactly (each code's bits << 16). */
static inline float32x4_t mla_widen_bf16_f32x4(uint16x4_t h)
{
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}

/* 4 floats rounded to bf16 codes (nearest even, denormals kept, NaNs
 * quieted): the rounding of mla_cvt_f32_bf16__ref. */
static inline uint16x4_t mla_round_bf16_u16x4(float32x4_t f)
{
    const uint32x4_t x = vreinterpretq_u32_f32(f);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(1));
    const uint32x4_t bias = vaddq_u32(vdupq_n_u32(0x7fff), lsb);
    const uint16x4_t rounded = vshrn_n_u32(vaddq_u32(x, bias), 16);
    const uint16x4_t quiet_nan = vorr_u16(vshrn_n_u32(x, 16), vdup_n_u16(0x40));
    const uint16x4_t is_num = vmovn_u32(vceqq_f32(f, f));
    return vbsl_u16(is_num, rounded, quiet_nan);
}

#endif
