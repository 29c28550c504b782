/* AArch64 ASIMD fp8 conversions with a scale, bit-exact with the ref
 * kernels; avx2/fp8.c explains the method (e5m2 widens through FCVTL here).
 * Tails go to ref. */
#include "kernels/fp8_format.h"
#include "kernels/kernels.h"

#include "util.h"

#include <arm_neon.h>

/* 4 quotients -> 4 fp8 codes, one per 32-bit lane. */
static inline uint32x4_t round_to_fp8(const mla_fp8_format *c, float32x4_t q)
{
    const uint32x4_t x = vreinterpretq_u32_f32(q);
    const uint32x4_t abs = vandq_u32(x, vdupq_n_u32(0x7fffffff));
    /* saturate first: the largest finite value rounds to its own code */
    const uint32x4_t a = vminq_u32(abs, vdupq_n_u32((uint32_t)c->max_bits));
    const int32x4_t down = vdupq_n_s32(c->man_bits - 23); /* negative: shift right */
    const uint32x4_t lsb = vandq_u32(vshlq_u32(a, down), vdupq_n_u32(1));
    const uint32x4_t biased = vaddq_u32(a, vdupq_n_u32(mla_fp8_round_bias(c)));
    const uint32x4_t normal = vshlq_u32(vaddq_u32(biased, lsb), down);
    const float32x4_t magic = vdupq_n_f32(c->denormal_magic);
    const uint32x4_t denormal = vsubq_u32(vreinterpretq_u32_f32(vaddq_f32(vreinterpretq_f32_u32(a), magic)),
                                          vreinterpretq_u32_f32(magic));
    uint32x4_t code = vbslq_u32(vcltq_u32(a, vdupq_n_u32((uint32_t)c->min_normal)), denormal, normal);
    code = vbslq_u32(vcgtq_u32(abs, vdupq_n_u32(0x7f800000)), vdupq_n_u32((uint32_t)c->nan_code), code);
    return vorrq_u32(code, vandq_u32(vshrq_n_u32(x, 24), vdupq_n_u32(0x80)));
}

static inline void narrow(const mla_fp8_format *c, const float *src, uint8_t *dst, int64_t n, float scale)
{
    const float32x4_t s = vdupq_n_f32(scale);
    for (int64_t i = 0; i + 8 <= n; i += 8) {
        uint32x4_t lo = round_to_fp8(c, vdivq_f32(vld1q_f32(src + i), s));
        uint32x4_t hi = round_to_fp8(c, vdivq_f32(vld1q_f32(src + i + 4), s));
        vst1_u8(dst + i, vmovn_u16(vcombine_u16(vmovn_u32(lo), vmovn_u32(hi))));
    }
}

void mla_cvt_f32_e4m3__neon(const float *src, uint8_t *dst, int64_t n, float scale)
{
    int64_t body = n & ~(int64_t)7;
    narrow(&MLA_FP8_E4M3, src, dst, body, scale);
    mla_cvt_f32_e4m3__ref(src + body, dst + body, n - body, scale);
}

void mla_cvt_f32_e5m2__neon(const float *src, uint8_t *dst, int64_t n, float scale)
{
    int64_t body = n & ~(int64_t)7;
    narrow(&MLA_FP8_E5M2, src, dst, body, scale);
    mla_cvt_f32_e5m2__ref(src + body, dst + body, n - body, scale);
}

/* 4 e4m3 codes (widened to 32-bit lanes) -> 4 floats (unscaled). */
static inline float32x4_t widen_e4m3(uint32x4_t b)
{
    const uint32x4_t sign = vshlq_n_u32(vandq_u32(b, vdupq_n_u32(0x80)), 24);
    const uint32x4_t mag = vandq_u32(b, vdupq_n_u32(0x7f));
    const uint32x4_t normal = vaddq_u32(vshlq_n_u32(mag, 20), vdupq_n_u32(120u << 23));
    const uint32x4_t denormal = vreinterpretq_u32_f32(vmulq_f32(vcvtq_f32_u32(mag), vdupq_n_f32(0x1p-9f)));
    uint32x4_t v = vbslq_u32(vcltq_u32(mag, vdupq_n_u32(8)), denormal, normal);
    v = vbslq_u32(vceqq_u32(mag, vdupq_n_u32(0x7f)), vdupq_n_u32(0x7ff00000), v);
    return vreinterpretq_f32_u32(vorrq_u32(v, sign));
}

void mla_cvt_e4m3_f32__neon(const uint8_t *src, float *dst, int64_t n, float scale)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint16x8_t h = vmovl_u8(vld1_u8(src + i));
        vst1q_f32(dst + i, vmulq_n_f32(widen_e4m3(vmovl_u16(vget_low_u16(h))), scale));
        vst1q_f32(dst + i + 4, vmulq_n_f32(widen_e4m3(vmovl_high_u16(h)), scale));
    }
    mla_cvt_e4m3_f32__ref(src + i, dst + i, n - i, scale);
}

void mla_cvt_e5m2_f32__neon(const uint8_t *src, float *dst, int64_t n, float scale)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        /* each code is the high byte of an f16 */
        float16x8_t h = vreinterpretq_f16_u16(vshlq_n_u16(vmovl_u8(vld1_u8(src + i)), 8));
        vst1q_f32(dst + i, vmulq_n_f32(vcvt_f32_f16(vget_low_f16(h)), scale));
        vst1q_f32(dst + i + 4, vmulq_n_f32(vcvt_high_f32_f16(h), scale));
    }
    mla_cvt_e5m2_f32__ref(src + i, dst + i, n - i, scale);
}

/* Widened as above and rounded to bf16 in registers: no f32 row between. */
void mla_cvt_e4m3_bf16__neon(const uint8_t *src, uint16_t *dst, int64_t n, float scale)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint16x8_t h = vmovl_u8(vld1_u8(src + i));
        float32x4_t lo = vmulq_n_f32(widen_e4m3(vmovl_u16(vget_low_u16(h))), scale);
        float32x4_t hi = vmulq_n_f32(widen_e4m3(vmovl_high_u16(h)), scale);
        vst1q_u16(dst + i, vcombine_u16(mla_round_bf16_u16x4(lo), mla_round_bf16_u16x4(hi)));
    }
    mla_cvt_e4m3_bf16__ref(src + i, dst + i, n - i, scale);
}

void mla_cvt_e5m2_bf16__neon(const uint8_t *src, uint16_t *dst, int64_t n, float scale)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float16x8_t h = vreinterpretq_f16_u16(vshlq_n_u16(vmovl_u8(vld1_u8(src + i)), 8));
        float32x4_t lo = vmulq_n_f32(vcvt_f32_f16(vget_low_f16(h)), scale);
        float32x4_t hi = vmulq_n_f32(vcvt_high_f32_f16(h), scale);
        vst1q_u16(dst + i, vcombine_u16(mla_round_bf16_u16x4(lo), mla_round_bf16_u16x4(hi)));
    }
    mla_cvt_e5m2_bf16__ref(src + i, dst + i, n - i, scale);
}
