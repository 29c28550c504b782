/*
 * Portable twin of AMX-BF16's TDPBF16PS: what one tile instruction stores,
 * one element at a time, so that any CPU can compute (and tests can check)
 * what the AMX tile kernels will store.
 *
 * Intel's SDM describes TDPBF16PS as bf16 pair dot products accumulated
 * into f32 with round to nearest even, bf16 denormal inputs read as zero,
 * f32 denormal results flushed to zero, MXCSR not consulted. What it leaves
 * open (the order of the sums) was measured on Sapphire Rapids class Xeons
 * and fixed here, confirmed bit for bit on 2.7 million single-element cases
 * (1 to 16 pairs; random bit patterns, infinities, NaNs, denormals,
 * cancellation) and on the recorded cases of tests/test_tile_dpbf16ps.c:
 *   - two f32 lanes per element, both starting at +0: the even elements'
 *     products (pair element 0) accumulate in one, the odd ones in the
 *     other, pair by pair in order; each step adds the exact product and
 *     rounds once to nearest even, then flushes a denormal to zero of its
 *     sign;
 *   - then lanes = even + odd, rounded, flushed; then c = c + lanes,
 *     rounded, flushed, with c's own denormal read as zero of its sign;
 *   - zeros, infinities and NaNs as IEEE 754 has them (a product of an
 *     exact zero is a signed zero; inf * 0 and inf - inf are NaN). NaN
 *     payloads are not modelled: a NaN result is some NaN.
 * So the grouping of k into instructions matters: a k-loop over tiles of
 * 16 pairs gives c + (lanes of pairs 0..15), then + (lanes of 16..31), ...
 */
#include "bits.h"
#include "kernels/kernels.h"

#include <math.h>

/* A denormal as zero of its sign (bf16 inputs and c read, results stored). */
static float flush(float x)
{
    return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x;
}

/* lane + p (p an exact product of two bf16: 16 significant bits, any
 * exponent) rounded once to f32. The double sum may itself be rounded when
 * the exponents lie far apart; its error (TwoSum) settles the one case that
 * matters, a double sum exactly halfway between two floats. */
static float add_product(float lane, double p)
{
    const double s = (double)lane + p;
    if (!isfinite(s) || p == 0)
        return (float)s;
    const double back = s - lane, err = ((double)lane - (s - back)) + (p - back);
    float f = (float)s;
    if (err != 0 && (double)f != s) {
        const float below = (double)f < s ? f : nextafterf(f, -INFINITY);
        const float above = (double)f < s ? nextafterf(f, INFINITY) : f;
        if (s == ((double)below + (double)above) / 2)
            f = err > 0 ? above : below;
    }
    return f;
}

static float bf16_in(uint16_t h)
{
    return flush(mla_f32_from_bits((uint32_t)h << 16));
}

void mla_tile_dpbf16ps__ref(int64_t m, int64_t n, int64_t pairs, const uint16_t *a, int64_t lda,
                            const uint16_t *b, int64_t ldb, float *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float lane[2] = {0.0f, 0.0f};
            for (int64_t q = 0; q < pairs; q++)
                for (int e = 0; e < 2; e++) {
                    const double p = (double)bf16_in(a[i * lda + 2 * q + e]) *
                                     (double)bf16_in(b[q * ldb + 2 * j + e]);
                    lane[e] = flush(add_product(lane[e], p));
                }
            c[i * ldc + j] = flush(flush(c[i * ldc + j]) + flush(lane[0] + lane[1]));
        }
}
