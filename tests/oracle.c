#include "oracle.h"

#include <math.h>
#include <string.h>

const format16 ORACLE_F16 = {"f16", MLA_DTYPE_F16, 5, 10};
const format16 ORACLE_BF16 = {"bf16", MLA_DTYPE_BF16, 8, 7};
const format8 ORACLE_E4M3 = {"fp8_e4m3", MLA_DTYPE_FP8_E4M3, 4, 3, 0x7e, 0x7f};
const format8 ORACLE_E5M2 = {"fp8_e5m2", MLA_DTYPE_FP8_E5M2, 5, 2, 0x7b, 0x7e};

/* Magnitude of code in a format of exp_bits and man_bits (IEEE layout). */
static double magnitude(int exp_bits, int man_bits, unsigned code)
{
    int bias = (1 << (exp_bits - 1)) - 1;
    int e = (int)(code >> man_bits);
    double m = code & ((1u << man_bits) - 1u);
    if (e == 0)
        return ldexp(m, 1 - bias - man_bits);
    return ldexp(1.0 + m / (double)(1u << man_bits), e - bias);
}

/* The code in [0, hi] nearest to a (value(0) <= a < value(hi)), ties to the
 * even code: a search over the format's own values, not bit tricks. */
static unsigned nearest_code(int exp_bits, int man_bits, unsigned hi, double a)
{
    unsigned lo = 0;
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        if (magnitude(exp_bits, man_bits, mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double below = a - magnitude(exp_bits, man_bits, lo), above = magnitude(exp_bits, man_bits, hi) - a;
    return below < above ? lo : above < below ? hi : (lo & 1u) ? hi : lo;
}

uint16_t oracle_inf_code16(const format16 *f)
{
    return (uint16_t)(((1u << f->exp_bits) - 1u) << f->man_bits);
}

/* Magnitude of a non-negative code, reading the infinity code as the next
 * power of two after the largest finite value (where rounding ties to it). */
double oracle_value16(const format16 *f, uint16_t code)
{
    return magnitude(f->exp_bits, f->man_bits, code);
}

uint32_t oracle_f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

float oracle_f32_from(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* f32 -> 16-bit code, round to nearest, ties to even; NaN quieted. */
uint16_t oracle_narrow16(const format16 *f, float x)
{
    uint32_t u = oracle_f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 31) << 15);
    if (isnan(x)) /* keep the top payload bits, set the quiet bit */
        return (uint16_t)(sign | oracle_inf_code16(f) | (1u << (f->man_bits - 1)) |
                          ((u & 0x7fffffu) >> (23 - f->man_bits)));
    double a = fabs((double)x);
    if (a >= oracle_value16(f, oracle_inf_code16(f)))
        return (uint16_t)(sign | oracle_inf_code16(f));
    return (uint16_t)(sign | nearest_code(f->exp_bits, f->man_bits, oracle_inf_code16(f), a));
}

/* 16-bit code -> f32: exact; f16 NaNs come back quiet, bf16 NaNs unchanged. */
uint32_t oracle_widen16(const format16 *f, uint16_t code)
{
    uint32_t sign = (uint32_t)(code >> 15) << 31;
    uint16_t mag = code & 0x7fffu;
    if (mag > oracle_inf_code16(f)) {
        uint32_t payload = (uint32_t)(mag & ((1u << f->man_bits) - 1u)) << (23 - f->man_bits);
        uint32_t quiet = f->dtype == MLA_DTYPE_F16 ? 0x400000u : 0;
        return sign | 0x7f800000u | quiet | payload;
    }
    if (mag == oracle_inf_code16(f))
        return sign | 0x7f800000u;
    return sign | oracle_f32_bits((float)oracle_value16(f, mag));
}

/* Magnitude of a finite non-negative code. */
double oracle_fp8_value(const format8 *f, uint8_t code)
{
    return magnitude(f->exp_bits, f->man_bits, code);
}

/* f32 x -> fp8 of x / scale: the quotient rounded once to f32 (a double
 * quotient rounded to float is exactly that), then the nearest code, ties to
 * the even code, saturating at the largest finite value. */
uint8_t oracle_fp8_narrow(const format8 *f, float x, float scale)
{
    float q = (float)((double)x / (double)scale);
    uint8_t sign = signbit(q) ? 0x80 : 0;
    if (isnan(q))
        return sign | f->nan_code;
    double a = fabs((double)q);
    if (a >= oracle_fp8_value(f, f->max_code))
        return sign | f->max_code;
    return (uint8_t)(sign | nearest_code(f->exp_bits, f->man_bits, f->max_code, a));
}

/* fp8 code -> f32 bits of value * scale (the exact double product of two
 * floats, rounded once); NaNs quiet with the fp8 mantissa on top. */
uint32_t oracle_fp8_widen(const format8 *f, uint8_t code, float scale)
{
    uint32_t sign = (uint32_t)(code >> 7) << 31;
    uint8_t mag = code & 0x7f, man = mag & ((1u << f->man_bits) - 1u);
    bool e5m2 = f->dtype == MLA_DTYPE_FP8_E5M2;
    if (e5m2 ? mag > 0x7c : mag == 0x7f)
        return sign | 0x7fc00000u | ((uint32_t)man << (23 - f->man_bits));
    if (e5m2 && mag == 0x7c)
        return sign | 0x7f800000u;
    return sign | oracle_f32_bits((float)(oracle_fp8_value(f, mag) * (double)scale));
}

float oracle_load(mla_dtype dtype, const void *array, int64_t i, float scale)
{
    switch (dtype) {
    case MLA_DTYPE_F32:
        return ((const float *)array)[i];
    case MLA_DTYPE_BF16:
        return oracle_f32_from(oracle_widen16(&ORACLE_BF16, ((const uint16_t *)array)[i]));
    case MLA_DTYPE_F16:
        return oracle_f32_from(oracle_widen16(&ORACLE_F16, ((const uint16_t *)array)[i]));
    case MLA_DTYPE_FP8_E4M3:
        return oracle_f32_from(oracle_fp8_widen(&ORACLE_E4M3, ((const uint8_t *)array)[i], scale));
    default:
        return oracle_f32_from(oracle_fp8_widen(&ORACLE_E5M2, ((const uint8_t *)array)[i], scale));
    }
}

void oracle_store(mla_dtype dtype, void *array, int64_t i, float x, float scale)
{
    switch (dtype) {
    case MLA_DTYPE_F32:
        ((float *)array)[i] = x;
        break;
    case MLA_DTYPE_BF16:
        ((uint16_t *)array)[i] = oracle_narrow16(&ORACLE_BF16, x);
        break;
    case MLA_DTYPE_F16:
        ((uint16_t *)array)[i] = oracle_narrow16(&ORACLE_F16, x);
        break;
    case MLA_DTYPE_FP8_E4M3:
        ((uint8_t *)array)[i] = oracle_fp8_narrow(&ORACLE_E4M3, x, scale);
        break;
    default:
        ((uint8_t *)array)[i] = oracle_fp8_narrow(&ORACLE_E5M2, x, scale);
        break;
    }
}

uint64_t oracle_checksum(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
