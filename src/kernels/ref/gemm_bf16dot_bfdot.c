/*
 * Portable twin of mla_gemm_bf16dot__neon_bf16: the GEMM of
 * mla_gemm_bf16dot_fn with Arm's BFDOT arithmetic (FEAT_BF16 with
 * FPCR.EBF = 0: the BFDotAdd pseudocode, which is what QEMU emulates), bit
 * for bit, so any CPU can compute (and tests can check) what that kernel
 * stores. Each k pair does
 *   pair = lo(a) * lo(b) + hi(a) * hi(b);  acc = acc + pair
 * as two products, a sum and an accumulation, each rounded to odd
 * (truncated, then the last bit set if anything was lost), whatever FPCR
 * says, with:
 *   - denormal inputs (bf16 values, products, sums, acc) read as zero of the
 *     same sign;
 *   - results whose exact value is below FLT_MIN (tiny before rounding)
 *     flushed to zero of their sign, and those of 2^128 or more infinite;
 *   - x + (-x) = +0, -0 + -0 = -0;
 *   - every NaN result the default NaN 0x7fc00000 (inf * 0, inf - inf, or
 *     any NaN input).
 * Rounding to odd errs by up to one ulp where nearest-even errs by half.
 * Values are handled as sign, integer significand and exponent, so every
 * step is exact until the one rounding.
 */
#include "bits.h"
#include "kernels/kernels.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>

static const uint32_t SIGN = 0x80000000u, DEFAULT_NAN = 0x7fc00000u;

/* |x| = m * 2^e with m < 2^24: a finite, nonzero, normal f32. */
typedef struct unpacked {
    bool neg;
    uint64_t m;
    int e;
} unpacked;

static unpacked unpack(float x)
{
    uint32_t u = mla_f32_bits(x);
    return (unpacked){.neg = u >> 31, .m = (u & 0x7fffffu) | 0x800000u, .e = (int)(u >> 23 & 0xffu) - 150};
}

static float signed_zero(bool neg)
{
    return mla_f32_from_bits(neg ? SIGN : 0);
}

static float signed_inf(bool neg)
{
    return mla_f32_from_bits((neg ? SIGN : 0) | 0x7f800000u);
}

/* Denormals read as zero of the same sign. */
static float daz(float x)
{
    return fabsf(x) < FLT_MIN ? signed_zero(signbit(x)) : x;
}

/* The value (m + f) * 2^e, m > 0, where 0 < f < 1 if `sticky` and f = 0
 * otherwise, rounded to odd f32 with the flushes. */
static float round_odd(bool neg, uint64_t m, int e, bool sticky)
{
    int top = 63 - __builtin_clzll(m); /* the value lies in [2^(top+e), 2^(top+e+1)) */
    int exponent = top + e;
    if (exponent < -126)
        return signed_zero(neg);
    if (exponent > 127)
        return signed_inf(neg);
    uint32_t significand;
    if (top > 23) {
        uint64_t lost = m & ((1ull << (top - 23)) - 1);
        significand = (uint32_t)(m >> (top - 23)) | (lost || sticky);
    } else { /* sticky comes only with 62-bit m */
        significand = (uint32_t)(m << (23 - top));
    }
    return mla_f32_from_bits((neg ? SIGN : 0) | (uint32_t)(exponent + 127) << 23 | (significand & 0x7fffffu));
}

static float mul(float x, float y)
{
    x = daz(x);
    y = daz(y);
    bool neg = signbit(x) != signbit(y);
    if (isnan(x) || isnan(y) || (isinf(x) && y == 0.0f) || (x == 0.0f && isinf(y)))
        return mla_f32_from_bits(DEFAULT_NAN);
    if (isinf(x) || isinf(y))
        return signed_inf(neg);
    if (x == 0.0f || y == 0.0f)
        return signed_zero(neg);
    unpacked a = unpack(x), b = unpack(y);
    return round_odd(neg, a.m * b.m, a.e + b.e, false);
}

static float add(float x, float y)
{
    x = daz(x);
    y = daz(y);
    if (isnan(x) || isnan(y) || (isinf(x) && isinf(y) && signbit(x) != signbit(y)))
        return mla_f32_from_bits(DEFAULT_NAN);
    if (isinf(x))
        return x;
    if (isinf(y))
        return y;
    if (x == 0.0f && y == 0.0f)
        return signed_zero(signbit(x) && signbit(y));
    if (x == 0.0f)
        return y;
    if (y == 0.0f)
        return x;
    unpacked a = unpack(x), b = unpack(y);
    if (a.e < b.e || (a.e == b.e && a.m < b.m)) { /* a: the larger magnitude */
        unpacked t = a;
        a = b;
        b = t;
    }
    int gap = a.e - b.e;
    if (gap > 38) { /* b < 2^-14 of a's ulp: only a sticky fraction below a << 38 */
        uint64_t m = a.m << 38;
        return round_odd(a.neg, a.neg == b.neg ? m : m - 1, a.e - 38, true);
    }
    uint64_t big = a.m << gap;
    uint64_t m = a.neg == b.neg ? big + b.m : big - b.m;
    if (m == 0)
        return 0.0f; /* x + (-x) */
    return round_odd(a.neg, m, b.e, false);
}

static float bf16(uint16_t h)
{
    return mla_f32_from_bits((uint32_t)h << 16);
}

void mla_gemm_bf16dot__ref_bfdot(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t rs_a,
                                 int64_t cs_a, const uint16_t *b, int64_t ldb, float *c, int64_t ldc,
                                 const float *c_scale)
{
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            float acc = c_scale ? c_scale[i] * c[i * ldc + j] : 0.0f;
            for (int64_t p = 0; p < k; p += 2) {
                const uint16_t *ap = a + 2 * (i * rs_a + p / 2 * cs_a), *bp = b + (p / 2) * ldb + 2 * j;
                float pair = add(mul(bf16(ap[0]), bf16(bp[0])), mul(bf16(ap[1]), bf16(bp[1])));
                acc = add(acc, pair);
            }
            c[i * ldc + j] = acc;
        }
    }
}
