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

#endif
