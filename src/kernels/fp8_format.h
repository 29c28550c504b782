/* The two fp8 formats, as every ISA's conversion kernels describe them. */
#ifndef MLA_FP8_FORMAT_H
#define MLA_FP8_FORMAT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

typedef struct mla_fp8_format {
    int man_bits, bias;
    int32_t min_normal;    /* f32 bits of the smallest normal                       */
    int32_t max_bits;      /* f32 bits of the largest finite value                  */
    int32_t max_code;      /* its code, where saturation lands                      */
    int32_t nan_code;      /* the NaN narrowing produces (sign added)               */
    float denormal_magic;  /* 2^k whose f32 spacing is the smallest denormal: adding
                              it rounds a magnitude to denormal steps, ties to even */
    bool has_inf;          /* e5m2 keeps IEEE infinities and NaNs; e4m3fn has only
                              the NaN 0x7f/0xff and no infinity                     */
} mla_fp8_format;

/* e4m3fn: bias 7, largest 448 (0x7e), smallest denormal 2^-9. */
static const mla_fp8_format MLA_FP8_E4M3 = {3, 7, 0x3c800000, 0x43e00000, 0x7e, 0x7f, 0x1p14f, false};
/* e5m2: bias 15, largest 57344 (0x7b), smallest denormal 2^-16. */
static const mla_fp8_format MLA_FP8_E5M2 = {2, 15, 0x38800000, 0x47600000, 0x7b, 0x7e, 0x1p7f, true};

/* 1/scale when dividing by scale is the same as multiplying by it: scale a
 * normal power of two (KV-cache scales are often 1). Both then round the same
 * real number once, and a multiply costs far less than a divide. */
static inline bool mla_fp8_exact_reciprocal(float scale, float *inv)
{
    uint32_t bits;
    memcpy(&bits, &scale, sizeof bits);
    uint32_t exponent = (bits >> 23) & 0xff;
    if ((bits & 0x807fffffu) != 0 || exponent == 0 || exponent == 0xff)
        return false;
    *inv = 1.0f / scale; /* exact: 2^-127 .. 2^126 */
    return true;
}

/* Added to |x|'s f32 bits, then shifted right by 23 - man_bits (with the
 * round-to-even bit added too): rounds to nearest and rebiases the exponent
 * of a normal fp8 value in one step. */
static inline uint32_t mla_fp8_round_bias(const mla_fp8_format *f)
{
    uint32_t shift = 23u - (uint32_t)f->man_bits;
    return (1u << (shift - 1)) - 1u - ((uint32_t)(127 - f->bias) << 23);
}

#endif
