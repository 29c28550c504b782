/* Reference merge_pair: the slot's contract (mla_backend.h) one element at a
 * time, widening and rounding as the ref conversions do. Built with
 * -ffp-contract=off, so the products and sums stay two roundings each. */
#include "bits.h"
#include "kernels/kernels.h"

static float load_as_f32(const void *row, mla_dtype dtype, int64_t i)
{
    switch (dtype) {
    case MLA_DTYPE_BF16: return mla_f32_from_bits((uint32_t)mla_load_u16((const uint16_t *)row + i) << 16);
    case MLA_DTYPE_F16: return mla_f16_to_f32(mla_load_u16((const uint16_t *)row + i));
    default: return mla_load_f32((const float *)row + i);
    }
}

static void store_from_f32(void *row, mla_dtype dtype, int64_t i, float y)
{
    switch (dtype) {
    case MLA_DTYPE_BF16: mla_store_u16((uint16_t *)row + i, mla_f32_to_bf16(y)); break;
    case MLA_DTYPE_F16: mla_store_u16((uint16_t *)row + i, mla_f32_to_f16(y)); break;
    default: mla_store_f32((float *)row + i, y); break;
    }
}

void mla_merge_pair__ref(void *out, const void *prefix, const void *suffix, mla_dtype dtype,
                         float w0, float w1, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float y = 0.0f + w0 * load_as_f32(prefix, dtype, i);
        y = y + w1 * load_as_f32(suffix, dtype, i);
        store_from_f32(out, dtype, i, y);
    }
}
