/*
 * Reference dtype conversions: the bit-exact definition every ISA matches.
 * Round to nearest even; NaN stays NaN (quieted when narrowing or widening
 * f16, kept as-is for bf16 -> f32, which is a pure bit shift); infinities and
 * denormals are kept; overflow rounds to infinity.
 */
#include "bits.h"
#include "kernels/kernels.h"

static inline uint16_t f32_to_bf16(float f)
{
    uint32_t x = mla_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x0040u); /* quiet the NaN */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static inline uint16_t f32_to_f16(float f)
{
    uint32_t x = mla_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: quiet it, keep the top payload bits */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) { /* normal f16: rebias 127 -> 15, round 13 bits */
        uint32_t r = ax - 0x38000000u;
        return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
    }
    uint32_t e = ax >> 23;
    if (e < 102) /* below 2^-25: rounds to zero */
        return sign;
    /* f16 denormal: the value in units of 2^-24, rounded to nearest even */
    uint32_t shift = 126 - e, m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    q += (rem > half) || (rem == half && (q & 1u));
    return (uint16_t)(sign | q);
}

void mla_cvt_bf16_f32__ref(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = mla_f32_from_bits((uint32_t)src[i] << 16);
}

void mla_cvt_f32_bf16__ref(const float *src, uint16_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = f32_to_bf16(src[i]);
}

void mla_cvt_f16_f32__ref(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = mla_f16_to_f32(src[i]);
}

void mla_cvt_f32_f16__ref(const float *src, uint16_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = f32_to_f16(src[i]);
}
