/*
 * Portable twin of mla_gemm_bf16dot__avx512_bf16: the same GEMM written one
 * element at a time, emulating AVX512_BF16's vdpbf16ps bit for bit, so any
 * CPU can compute (and tests can check) what that kernel stores.
 *
 * One vdpbf16ps lane (Intel SDM, VDPBF16PS "Operation"; checked against the
 * instruction on Zen 4, edge cases included) is two f32 FMAs, the odd (high)
 * pair element first:
 *   acc = fma(src1.hi, src2.hi, acc);  acc = fma(src1.lo, src2.lo, acc)
 * each rounded once to nearest even, whatever MXCSR says, with:
 *   - denormal inputs (bf16 or acc) read as zero of the same sign (DAZ);
 *   - results that are tiny after rounding (rounding with unbounded exponent
 *     gives less than FLT_MIN) stored as zero of the result's sign (FTZ);
 *   - a NaN input comes back quieted, the first of src1, src2, acc;
 *     inf * 0 and inf - inf give x86's default NaN 0xffc00000.
 * The kernel passes B as src1 and the broadcast A pair as src2 (the operand
 * that may be an embedded broadcast), which fixes whose NaN wins. Like the
 * kernel's c_scale multiply, fmaf here rounds as the caller's rounding mode
 * says: the two agree in the default mode, round to nearest even.
 */
#include "bits.h"
#include "kernels/kernels.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>

static const uint32_t SIGN = 0x80000000u, QUIET = 0x00400000u, DEFAULT_NAN = 0xffc00000u;

static inline bool is_nan(uint32_t x)
{
    return (x & 0x7fffffffu) > 0x7f800000u;
}

/* DAZ: a denormal reads as zero of the same sign. */
static inline float daz(uint32_t x)
{
    return mla_f32_from_bits(x & 0x7f800000u ? x : x & SIGN);
}

/* acc + x * y as one vdpbf16ps half-step; x and y are bf16, acc f32 bits. */
static uint32_t fma_step(uint32_t acc, uint16_t x, uint16_t y)
{
    uint32_t xf = (uint32_t)x << 16, yf = (uint32_t)y << 16;
    if (is_nan(xf))
        return xf | QUIET;
    if (is_nan(yf))
        return yf | QUIET;
    if (is_nan(acc))
        return acc | QUIET;
    float fx = daz(xf), fy = daz(yf), facc = daz(acc);
    /* fmaf rounds the exact x * y + acc once, as the instruction does; only
     * results below FLT_MIN, or rounded up to it, need mending */
    float r = fmaf(fx, fy, facc);
    if (isnan(r))
        return DEFAULT_NAN;
    if (fabsf(r) < FLT_MIN)
        return mla_f32_bits(r) & SIGN;
    if (fabsf(r) == FLT_MIN) {
        /* fmaf rounds on the denormal grid, so a sum in
         * [FLT_MIN - 2^-150, FLT_MIN - 2^-151) comes out as FLT_MIN, while
         * rounding with unbounded exponent gives FLT_MIN - 2^-150: tiny, so
         * the instruction flushes it. Redo it 2^64 higher, where the grid is
         * the unbounded one. A sum this close to FLT_MIN has operands below
         * 2^64, so the scaling is exact (or a zero product, where any
         * overflow gives NaN and keeps r, which is then exact). */
        float s = fmaf(fx * 0x1p64f, fy, facc * 0x1p64f);
        if (fabsf(s) < FLT_MIN * 0x1p64f)
            return mla_f32_bits(r) & SIGN;
    }
    return mla_f32_bits(r);
}

void mla_gemm_bf16dot__ref(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t rs_a,
                           int64_t cs_a, const uint16_t *b, int64_t ldb, float *c, int64_t ldc,
                           const float *c_scale)
{
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            float acc0 = c_scale ? c_scale[i] * c[i * ldc + j] : 0.0f;
            uint32_t acc = mla_f32_bits(acc0);
            for (int64_t p = 0; p < k; p += 2) {
                const uint16_t *ap = a + 2 * (i * rs_a + p / 2 * cs_a), *bp = b + (p / 2) * ldb + 2 * j;
                acc = fma_step(acc, bp[1], ap[1]);
                acc = fma_step(acc, bp[0], ap[0]);
            }
            c[i * ldc + j] = mla_f32_from_bits(acc);
        }
    }
}
