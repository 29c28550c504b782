/*
 * Portable twin of mla_gemm_bf16tile__avx512_amx: the tile GEMM one element
 * at a time, each 16-pair step of k one TDPBF16PS as its twin
 * (tile_dpbf16ps.c) computes it, so any CPU can compute (and tests can
 * check) what the AMX kernel stores.
 */
#include "kernels/kernels.h"

enum { STEP_PAIRS = 16 }; /* pairs one TDPBF16PS takes from a 64-byte row */

void mla_gemm_bf16tile__ref(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t rs_a,
                            int64_t cs_a, const uint16_t *b, int64_t ldb, float *c, int64_t ldc,
                            const float *c_scale)
{
    const int64_t pairs = k / 2;
    uint16_t row[2 * STEP_PAIRS];
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            float acc = c_scale ? c_scale[i] * c[i * ldc + j] : 0.0f;
            for (int64_t p0 = 0; p0 < pairs; p0 += STEP_PAIRS) {
                const int64_t np = pairs - p0 < STEP_PAIRS ? pairs - p0 : STEP_PAIRS;
                for (int64_t q = 0; q < np; q++) {
                    const uint16_t *pair = a + 2 * (i * rs_a + (p0 + q) * cs_a);
                    row[2 * q] = pair[0];
                    row[2 * q + 1] = pair[1];
                }
                mla_tile_dpbf16ps__ref(1, 1, np, row, 0, b + p0 * ldb + 2 * j, ldb, &acc, 1);
            }
            c[i * ldc + j] = acc;
        }
    }
}
