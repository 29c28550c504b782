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

#endif
