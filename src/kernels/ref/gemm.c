/* Portable GEMM: the element-by-element definition of mla_gemm_f32_fn, one
 * fmaf chain per output in k order (the bits every ISA's kernel reproduces). */
#include "kernels/kernels.h"
#include "bits.h"

#include <math.h>

void mla_gemm_f32__ref(int64_t m, int64_t n, int64_t k, const float *a, int64_t rs_a, int64_t cs_a,
                       const float *b, int64_t ldb, float *c, int64_t ldc, const float *c_scale)
{
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            float acc = c_scale ? c_scale[i] * mla_load_f32(c + i * ldc + j) : 0.0f;
            for (int64_t p = 0; p < k; p++)
                acc = fmaf(mla_load_f32(a + i * rs_a + p * cs_a), mla_load_f32(b + p * ldb + j), acc);
            mla_store_f32(c + i * ldc + j, acc);
        }
    }
}

/* Both operands f16: gemm_f32 on the exactly widened values. */
void mla_gemm_f16f16__ref(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t rs_a,
                          int64_t cs_a, const uint16_t *b, int64_t ldb, float *c, int64_t ldc,
                          const float *c_scale)
{
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            float acc = c_scale ? c_scale[i] * mla_load_f32(c + i * ldc + j) : 0.0f;
            for (int64_t p = 0; p < k; p++)
                acc = fmaf(mla_f16_to_f32(mla_load_u16(a + i * rs_a + p * cs_a)),
                           mla_f16_to_f32(mla_load_u16(b + p * ldb + j)), acc);
            mla_store_f32(c + i * ldc + j, acc);
        }
    }
}

void mla_gemm_bf16__ref(int64_t m, int64_t n, int64_t k, const float *a, int64_t rs_a, int64_t cs_a,
                        const uint16_t *b, int64_t ldb, float *c, int64_t ldc, const float *c_scale)
{
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            float acc = c_scale ? c_scale[i] * mla_load_f32(c + i * ldc + j) : 0.0f;
            for (int64_t p = 0; p < k; p++)
                acc = fmaf(mla_load_f32(a + i * rs_a + p * cs_a),
                           mla_f32_from_bits((uint32_t)mla_load_u16(b + p * ldb + j) << 16), acc);
            mla_store_f32(c + i * ldc + j, acc);
        }
    }
}
