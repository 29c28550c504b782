/* Bit views of floats for the ref kernels (memcpy: no aliasing games). */
#ifndef MLA_REF_BITS_H
#define MLA_REF_BITS_H

#include <stdint.h>
#include <string.h>

static inline uint32_t mla_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float mla_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* f16 -> f32, exact; NaNs made quiet as the hardware does. */
static inline float mla_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) /* infinity, or NaN made quiet as the hardware does */
        return mla_f32_from_bits(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
    if (e != 0)
        return mla_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
    float mag = (float)m * 0x1p-24f; /* denormal or zero: exact */
    return mla_f32_from_bits(sign | mla_f32_bits(mag));
}

/* f32 -> bf16, nearest even; NaNs made quiet. */
static inline uint16_t mla_f32_to_bf16(float f)
{
    uint32_t x = mla_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x0040u); /* quiet the NaN */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* f32 -> f16, nearest even, denormals kept, overflow to infinity; NaNs
 * made quiet with their top payload bits. */
static inline uint16_t mla_f32_to_f16(float f)
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

#endif
