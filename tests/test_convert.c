/*
 * Conversions and exp on every backend this CPU can run, forced in turn.
 * The expected values come from double-precision oracles written the plain
 * way (nearest representable value by search, ties to the even code), not
 * from the ref kernels, so ref is tested too.
 */
#include "support.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- oracles ---------------------------------------------------------------- */

/* A 16-bit float format: f16 (5 exponent bits, 10 mantissa) or bf16 (8, 7). */
typedef struct format16 {
    const char *name;
    mla_dtype dtype;
    int exp_bits, man_bits;
} format16;

static const format16 F16 = {"f16", MLA_DTYPE_F16, 5, 10};
static const format16 BF16 = {"bf16", MLA_DTYPE_BF16, 8, 7};

static uint16_t inf_code(const format16 *f)
{
    return (uint16_t)(((1u << f->exp_bits) - 1u) << f->man_bits);
}

/* Magnitude of a non-negative code, reading the infinity code as the next
 * power of two after the largest finite value (where rounding ties to it). */
static double code_value(const format16 *f, uint16_t code)
{
    int bias = (1 << (f->exp_bits - 1)) - 1;
    int e = code >> f->man_bits;
    double m = code & ((1u << f->man_bits) - 1u);
    if (e == 0)
        return ldexp(m, 1 - bias - f->man_bits);
    return ldexp(1.0 + m / (double)(1u << f->man_bits), e - bias);
}

static uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float f32_from(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* f32 -> 16-bit code, round to nearest, ties to even; NaN quieted. */
static uint16_t oracle_narrow(const format16 *f, float x)
{
    uint32_t u = f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 31) << 15);
    if (isnan(x)) /* keep the top payload bits, set the quiet bit */
        return (uint16_t)(sign | inf_code(f) | (1u << (f->man_bits - 1)) |
                          ((u & 0x7fffffu) >> (23 - f->man_bits)));
    double a = fabs((double)x);
    if (a >= code_value(f, inf_code(f)))
        return (uint16_t)(sign | inf_code(f));
    uint16_t lo = 0, hi = inf_code(f); /* value(lo) <= a < value(hi) */
    while (hi - lo > 1) {
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (code_value(f, mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double below = a - code_value(f, lo), above = code_value(f, hi) - a;
    uint16_t pick = below < above ? lo : above < below ? hi : (lo & 1u) ? hi : lo;
    return (uint16_t)(sign | pick);
}

/* 16-bit code -> f32: exact; f16 NaNs come back quiet, bf16 NaNs unchanged. */
static uint32_t oracle_widen(const format16 *f, uint16_t code)
{
    uint32_t sign = (uint32_t)(code >> 15) << 31;
    uint16_t mag = code & 0x7fffu;
    if (mag > inf_code(f)) {
        uint32_t payload = (uint32_t)(mag & ((1u << f->man_bits) - 1u)) << (23 - f->man_bits);
        uint32_t quiet = f->dtype == MLA_DTYPE_F16 ? 0x400000u : 0;
        return sign | 0x7f800000u | quiet | payload;
    }
    if (mag == inf_code(f))
        return sign | 0x7f800000u;
    return sign | f32_bits((float)code_value(f, mag));
}

/* ---- inputs --------------------------------------------------------------- */

/* f32 values on and around every rounding boundary of the format (each
 * representable value, each midpoint and the floats either side of it),
 * both signs, plus specials and random bit patterns. */
static float *boundary_inputs(const format16 *f, int64_t *count)
{
    static const uint32_t specials[] = {
        0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001,
        0xff800001, 0x7fbfffff, 0x7fc12345, 0x7fa0e000, 0x00000001, 0x007fffff, 0x80000001,
        0x00800000, 0x7f7fffff, 0xff7fffff, 0x477fe000, 0x477fefff, 0x477ff000, 0x477fffff,
        0x33000000, 0x33000001, 0x32ffffff, 0x337fffff, 0x33800000, 0x7f7f8000, 0x7f7f7fff,
    };
    enum { RANDOM = 1 << 18 };
    int64_t codes = inf_code(f), n = 0;
    int64_t cap = codes * 8 + (int64_t)(sizeof specials / sizeof specials[0]) + RANDOM;
    float *x = malloc((size_t)cap * sizeof *x);
    for (int64_t c = 0; c < codes; c++) {
        double v = code_value(f, (uint16_t)c), mid = (v + code_value(f, (uint16_t)(c + 1))) / 2;
        float m = (float)mid; /* exact: f32 has more mantissa bits */
        float xs[4] = {(float)v, m, nextafterf(m, 0.0f), nextafterf(m, INFINITY)};
        for (int k = 0; k < 4; k++) {
            x[n++] = xs[k];
            x[n++] = -xs[k];
        }
    }
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
        x[n++] = f32_from(specials[i]);
    for (int i = 0; i < RANDOM; i++)
        x[n++] = f32_from((uint32_t)support_random());
    *count = n;
    return x;
}

/* ---- conversions on every backend ----------------------------------------- */

static int checked_backends;

static void check_narrow(const format16 *f, const char *backend)
{
    int64_t n;
    float *x = boundary_inputs(f, &n);
    uint16_t *got = malloc((size_t)n * sizeof *got);
    for (int threads = 1; threads <= 2; threads++) {
        memset(got, 0xab, (size_t)n * sizeof *got);
        assert_int_equal(mla_convert(f->dtype, got, MLA_DTYPE_F32, x, n, threads), MLA_OK);
        assert_string_equal(mla_last_backend(), backend);
        for (int64_t i = 0; i < n; i++) {
            uint16_t want = oracle_narrow(f, x[i]);
            if (got[i] != want)
                fail_msg("%s: f32 0x%08x -> %s: got 0x%04x, want 0x%04x", backend, f32_bits(x[i]),
                         f->name, got[i], want);
        }
    }
    free(got);
    free(x);
}

static void check_widen(const format16 *f, const char *backend)
{
    enum { N = 65536 };
    uint16_t *codes = malloc(N * sizeof *codes);
    float *got = malloc(N * sizeof *got);
    for (int i = 0; i < N; i++)
        codes[i] = (uint16_t)i;
    assert_int_equal(mla_convert(MLA_DTYPE_F32, got, f->dtype, codes, N, 1), MLA_OK);
    assert_string_equal(mla_last_backend(), backend);
    for (int i = 0; i < N; i++) {
        uint32_t want = oracle_widen(f, (uint16_t)i);
        if (f32_bits(got[i]) != want)
            fail_msg("%s: %s 0x%04x -> f32: got 0x%08x, want 0x%08x", backend, f->name, i,
                     f32_bits(got[i]), want);
    }
    free(got);
    free(codes);
}

/* Every length 0..67 at two alignments: vector bodies, tails, and guards
 * either side of the output that must stay untouched. */
static void check_tails(const format16 *f, const char *backend)
{
    enum { MAXN = 67, GUARD = 16 };
    float src[MAXN + 1], wide[MAXN + 2 * GUARD];
    uint16_t narrow[MAXN + 2 * GUARD], codes[MAXN + 1];
    for (int i = 0; i <= MAXN; i++) {
        src[i] = (float)(i - 30) * 1.37f;
        codes[i] = oracle_narrow(f, src[i]);
    }
    for (int off = 0; off < 2; off++) {
        for (int n = 0; n <= MAXN - off; n++) {
            memset(narrow, 0xab, sizeof narrow);
            memset(wide, 0xab, sizeof wide);
            assert_int_equal(mla_convert(f->dtype, narrow + GUARD, MLA_DTYPE_F32, src + off, n, 1), MLA_OK);
            assert_int_equal(mla_convert(MLA_DTYPE_F32, wide + GUARD, f->dtype, codes + off, n, 1), MLA_OK);
            assert_string_equal(mla_last_backend(), backend);
            for (int i = 0; i < MAXN + 2 * GUARD; i++) {
                bool inside = i >= GUARD && i < GUARD + n;
                uint16_t want16 = inside ? codes[off + i - GUARD] : 0xabab;
                uint32_t want32 = inside ? oracle_widen(f, codes[off + i - GUARD]) : 0xabababab;
                if (narrow[i] != want16 || f32_bits(wide[i]) != want32)
                    fail_msg("%s %s n=%d off=%d: element %d wrong or guard touched", backend,
                             f->name, n, off, i - GUARD);
            }
        }
    }
}

/* |got - e^x| in units of the float spacing at e^x. */
static double exp_ulp_error(float x, float got)
{
    double exact = exp((double)x);
    if (isinf(got))
        return exact > FLT_MAX ? 0.0 : INFINITY;
    float near = (float)exact;
    double ulp = near < FLT_MIN ? 0x1p-149 : (double)nextafterf(near, INFINITY) - near;
    return fabs((double)got - exact) / ulp;
}

static void check_exp(const char *backend)
{
    enum { N = (1 << 18) + 5 };
    float *x = malloc(N * sizeof *x), *got = malloc(N * sizeof *got), *again = malloc(N * sizeof *again);
    static const float edges[] = {0.0f, -0.0f, 1.0f, -1.0f, 88.72283f, 88.7229f, 89.0f, -87.33654f,
                                  -95.0f, -103.27893f, -103.9721f, -104.0f, -110.0f, 1e-30f, -1e-30f};
    int e = sizeof edges / sizeof edges[0];
    memcpy(x, edges, sizeof edges);
    for (int i = e; i < N; i++)
        x[i] = -104.0f + 193.0f * (float)((uint32_t)support_random() >> 8) * 0x1p-24f;
    assert_int_equal(mla_exp_f32(got, x, N, 1), MLA_OK);
    assert_string_equal(mla_last_backend(), backend);
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        double err = exp_ulp_error(x[i], got[i]);
        if (err > 1.0)
            fail_msg("%s: exp(%a) = %a, error %.3f ulp > 1", backend, (double)x[i], (double)got[i], err);
        worst = err > worst ? err : worst;
    }
    /* threads split the array but never change a lane's result */
    assert_int_equal(mla_exp_f32(again, x, N, 2), MLA_OK);
    assert_memory_equal(got, again, N * sizeof *got);
    /* in place */
    assert_int_equal(mla_exp_f32(x, x, N, 1), MLA_OK);
    assert_memory_equal(got, x, N * sizeof *got);

    float special[3] = {-INFINITY, INFINITY, NAN}, out[3];
    assert_int_equal(mla_exp_f32(out, special, 3, 1), MLA_OK);
    assert_true(out[0] == 0.0f && !signbit(out[0]));
    assert_true(isinf(out[1]) && out[1] > 0);
    assert_true(isnan(out[2]));
    print_message("           %s: exp worst error %.3f ulp over %d inputs\n", backend, worst, N);
    free(again);
    free(got);
    free(x);
}

static void test_every_backend(void **state)
{
    (void)state;
    checked_backends = 0;
    for (int i = 0; i < mla_backend_count(); i++) {
        if (!support_force_convert_backend(i))
            continue;
        const char *name = mla_backend_at(i)->name;
        check_widen(&BF16, name);
        check_widen(&F16, name);
        check_narrow(&BF16, name);
        check_narrow(&F16, name);
        check_tails(&BF16, name);
        check_tails(&F16, name);
        check_exp(name);
        checked_backends++;
        print_message("[ BACKEND  ] %s: conversions bit-exact, exp within 1 ulp\n", name);
    }
    mla_force_backend(MLA_OP_CONVERT, NULL);
    assert_true(checked_backends >= 1); /* ref always runs */
}

/* ---- bad input -------------------------------------------------------------- */

static void test_bad_input(void **state)
{
    (void)state;
    float src[8] = {1, 2, 3, 4, 5, 6, 7, 8}, dst[8];
    uint16_t h[8];
    memset(dst, 0x5a, sizeof dst);
    memset(h, 0x5a, sizeof h);
    assert_int_equal(mla_convert(MLA_DTYPE_BF16, h, MLA_DTYPE_F32, src, -1, 1), MLA_ERR_INVALID_ARGUMENT);
    assert_true(support_contains(mla_last_error(), "n = -1 < 0"));
    assert_int_equal(mla_convert(MLA_DTYPE_BF16, NULL, MLA_DTYPE_F32, src, 8, 1), MLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mla_convert(MLA_DTYPE_BF16, h, MLA_DTYPE_F32, NULL, 8, 1), MLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mla_convert(MLA_DTYPE_F16, h, MLA_DTYPE_BF16, h, 4, 1), MLA_ERR_UNSUPPORTED);
    assert_true(support_contains(mla_last_error(), "bf16 -> f16 not supported"));
    assert_int_equal(mla_convert(MLA_DTYPE_FP8_E4M3, h, MLA_DTYPE_F32, src, 4, 1), MLA_ERR_UNSUPPORTED);
    assert_int_equal(mla_convert(MLA_DTYPE_BF16, (uint16_t *)src + 2, MLA_DTYPE_F32, src, 4, 1),
                     MLA_ERR_INVALID_ARGUMENT);
    assert_true(support_contains(mla_last_error(), "overlap"));
    assert_int_equal(mla_convert(MLA_DTYPE_BF16, h, MLA_DTYPE_F32, src, INT64_MAX / 2, 1), MLA_ERR_OVERFLOW);
    assert_int_equal(mla_exp_f32(dst, src, -3, 1), MLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mla_exp_f32(NULL, src, 3, 1), MLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mla_exp_f32(src + 1, src, 4, 1), MLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mla_exp_f32(dst, src, INT64_MAX / 2, 1), MLA_ERR_OVERFLOW);
    for (int i = 0; i < 8; i++) { /* nothing was written */
        assert_int_equal(h[i], 0x5a5a);
        assert_int_equal(f32_bits(dst[i]), 0x5a5a5a5au);
    }
    assert_true(src[0] == 1.0f && src[7] == 8.0f);
    /* n == 0 with NULL pointers is a no-op */
    assert_int_equal(mla_convert(MLA_DTYPE_BF16, NULL, MLA_DTYPE_F32, NULL, 0, 1), MLA_OK);
    assert_int_equal(mla_exp_f32(NULL, NULL, 0, 0), MLA_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_backend),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests_name("convert", tests, NULL, NULL);
}
