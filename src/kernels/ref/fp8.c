/*
 * Reference fp8 conversions with a scale (the definition every ISA matches;
 * see mla_cvt_f32_fp8_fn in mla_backend.h): f32 -> fp8 rounds x / scale to nearest
 * even and saturates to the largest finite value; fp8 -> f32 is exact, then
 * one multiply by the scale.
 */
#include "bits.h"
#include "kernels/fp8_format.h"
#include "kernels/kernels.h"

static uint8_t f32_to_fp8(const mla_fp8_format *f, float x)
{
    uint32_t u = mla_f32_bits(x), a = u & 0x7fffffffu;
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    if (a > 0x7f800000u)
        return (uint8_t)(sign | f->nan_code);
    if (a >= (uint32_t)f->max_bits)
        return (uint8_t)(sign | f->max_code);
    uint32_t rebias = 127u - f->bias, e = a >> 23;
    if (e > rebias) { /* normal: rebias the exponent, round off 23 - m bits */
        uint32_t shift = 23u - f->man_bits;
        uint32_t r = a + (1u << (shift - 1)) - 1u + ((a >> shift) & 1u);
        return (uint8_t)(sign | ((r >> shift) - (rebias << f->man_bits)));
    }
    /* denormal (or rounding up to the smallest normal): the value in units
     * of the smallest denormal, 2^(1 - bias - man), rounded to nearest even */
    uint32_t shift = 151u - f->bias - f->man_bits - (e ? e : 1u);
    if (shift > 24u) /* below half the smallest denormal */
        return sign;
    uint32_t m = e ? (a & 0x7fffffu) | 0x800000u : a;
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    q += (rem > half) || (rem == half && (q & 1u));
    return (uint8_t)(sign | q);
}

static float fp8_to_f32(const mla_fp8_format *f, uint8_t code)
{
    uint32_t sign = (uint32_t)(code & 0x80u) << 24, mag = code & 0x7fu;
    uint32_t e = mag >> f->man_bits, m = mag & ((1u << f->man_bits) - 1u);
    uint32_t top_exp = (1u << (7 - f->man_bits)) - 1u;
    if (f->has_inf ? e == top_exp : mag == 0x7fu) { /* NaN comes back quiet */
        uint32_t payload = m << (23 - f->man_bits);
        return mla_f32_from_bits(sign | 0x7f800000u | payload | (m ? 0x400000u : 0u));
    }
    if (e != 0)
        return mla_f32_from_bits(sign | ((e + 127u - f->bias) << 23) | (m << (23 - f->man_bits)));
    float denormal = (float)m * mla_f32_from_bits((128u - f->bias - f->man_bits) << 23);
    return mla_f32_from_bits(sign | mla_f32_bits(denormal));
}

static void narrow(const mla_fp8_format *f, const float *src, uint8_t *dst, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = f32_to_fp8(f, mla_load_f32(src + i) / scale);
}

static void widen(const mla_fp8_format *f, const uint8_t *src, float *dst, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        mla_store_f32(dst + i, fp8_to_f32(f, src[i]) * scale);
}

static void widen_bf16(const mla_fp8_format *f, const uint8_t *src, uint16_t *dst, int64_t n,
                       float scale)
{
    for (int64_t i = 0; i < n; i++)
        mla_store_u16(dst + i, mla_f32_to_bf16(fp8_to_f32(f, src[i]) * scale));
}

void mla_cvt_f32_e4m3__ref(const float *src, uint8_t *dst, int64_t n, float scale)
{
    narrow(&MLA_FP8_E4M3, src, dst, n, scale);
}

void mla_cvt_e4m3_f32__ref(const uint8_t *src, float *dst, int64_t n, float scale)
{
    widen(&MLA_FP8_E4M3, src, dst, n, scale);
}

void mla_cvt_f32_e5m2__ref(const float *src, uint8_t *dst, int64_t n, float scale)
{
    narrow(&MLA_FP8_E5M2, src, dst, n, scale);
}

void mla_cvt_e5m2_f32__ref(const uint8_t *src, float *dst, int64_t n, float scale)
{
    widen(&MLA_FP8_E5M2, src, dst, n, scale);
}

void mla_cvt_e4m3_bf16__ref(const uint8_t *src, uint16_t *dst, int64_t n, float scale)
{
    widen_bf16(&MLA_FP8_E4M3, src, dst, n, scale);
}

void mla_cvt_e5m2_bf16__ref(const uint8_t *src, uint16_t *dst, int64_t n, float scale)
{
    widen_bf16(&MLA_FP8_E5M2, src, dst, n, scale);
}
