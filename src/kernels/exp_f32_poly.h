/*
 * The vector exp of the x86 backends (mla_exp_f32_fn: within 1 ulp), its
 * constants shared by the AVX2 and AVX-512 kernels, which compute the same
 * steps at their widths:
 *
 *   x  below EXP_MIN (-inf included) is set aside: its lane computes
 *      e^0 and returns +0. Computing it would underflow, and each vector
 *      that underflows costs a microcode assist on Intel cores, which the
 *      causal mask's -inf scores would pay on every diagonal tile. x above
 *      EXP_MAX is clamped to it (NaN passes: min returns its second
 *      operand when one is NaN, and x is the second)
 *   n  = round(x * log2 e), to nearest
 *   r  = (x - n * LN2_HI) - n * LN2_LO: LN2_HI has 13 significant bits, so
 *      n * LN2_HI is exact for |n| <= 2^11 and so is the subtraction
 *      (Sterbenz); one rounding, in the second FMA, |r| <= ln2 / 2
 *   p  = 1 + r + r^2 (C2 + r (C3 + r (C4 + r (C5 + r C6)))), Horner's FMAs
 *   e^x = p * 2^n, with one rounding where the result is denormal or
 *      overflows (scalef on AVX-512; two exact power-of-two factors whose
 *      product rounds once on AVX2)
 *
 * C2-C6 were fitted to (e^r - 1 - r) / r^2 on [-ln2/2, ln2/2] by iterated
 * weighted least squares toward the minimax relative error of p, 3.8e-9
 * (0.06 ulp), then rounded to f32. Every float in [-110, 90] measured
 * against exp in double: worst 0.904 ulp on both kernels; below -104 the
 * result is +0, above 88.7229 +inf, as exp's rounded. Sleef's u10 expf,
 * which these replace, took 1.25-1.5x their time on Zen 4 and on the Xeon
 * (bench/RESULTS.md).
 */
#ifndef MLA_KERNELS_EXP_F32_POLY_H
#define MLA_KERNELS_EXP_F32_POLY_H

#define MLA_EXP_MIN (-104.0f) /* e^x below rounds to +0 (under half of 2^-149) */
#define MLA_EXP_MAX 89.0f     /* e^89 overflows to +inf                   */
#define MLA_EXP_LOG2E 0x1.715476p+0f
#define MLA_EXP_LN2_HI 0x1.62ep-1f
#define MLA_EXP_LN2_LO 0x1.0bfbe8p-15f /* ln 2 - LN2_HI, rounded */
#define MLA_EXP_C2 0x1.fffff8p-2f
#define MLA_EXP_C3 0x1.55548ep-3f
#define MLA_EXP_C4 0x1.555b58p-5f
#define MLA_EXP_C5 0x1.123bd8p-7f
#define MLA_EXP_C6 0x1.687da4p-10f

#endif
