/*
 * Reference dtype conversions: the bit-exact definition every ISA matches.
 * Round to nearest even; NaN stays NaN (quieted when narrowing or widening
 * f16, kept as-is for bf16 -> f32, which is a pure bit shift); infinities and
 * denormals are kept; overflow rounds to infinity.
 */
#include "bits.h"
#include "kernels/kernels.h"

void mla_cvt_bf16_f32__ref(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        mla_store_f32(dst + i, mla_f32_from_bits((uint32_t)mla_load_u16(src + i) << 16));
}

void mla_cvt_f32_bf16__ref(const float *src, uint16_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        mla_store_u16(dst + i, mla_f32_to_bf16(mla_load_f32(src + i)));
}

void mla_cvt_f16_f32__ref(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        mla_store_f32(dst + i, mla_f16_to_f32(mla_load_u16(src + i)));
}

void mla_cvt_f32_f16__ref(const float *src, uint16_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        mla_store_u16(dst + i, mla_f32_to_f16(mla_load_f32(src + i)));
}
