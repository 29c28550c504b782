/*
 * The twin of AMX-BF16's TDPBF16PS (mla_tile_dpbf16ps__ref) against what
 * the instruction stored on a Sapphire Rapids class Xeon for 2048 cases
 * (tests/tile_dpbf16ps_recorded.h: 1 to 16 pairs; random bits, normal
 * values with rounding at work, extreme exponents, denormals and zeros,
 * cancelling pairs), bit for bit (a NaN matches any NaN: payloads are not
 * modelled); and the twin's tile addressing: each element of a 16 x 16
 * tile with padded strides is its own 1 x 1 product.
 */
#include "kernels/kernels.h"
#include "support.h"
#include "tile_dpbf16ps_cases.h"
#include "tile_dpbf16ps_recorded.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static float f32_of(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static bool same(uint32_t x, uint32_t y)
{
    return x == y || (isnan(f32_of(x)) && isnan(f32_of(y)));
}

/* The twin on case t alone. */
static uint32_t twin_of(const tdp_case *t)
{
    float c = f32_of(t->c);
    mla_tile_dpbf16ps__ref(1, 1, t->pairs, t->a, 2 * TDP_MAX_PAIRS, t->b, 2, &c, 1);
    return bits_of(c);
}

static void test_recorded_cases(void **state)
{
    (void)state;
    int finite = 0, rounded = 0;
    for (int i = 0; i < TDP_CASES; i++) {
        const tdp_case t = tdp_make(i);
        const uint32_t got = twin_of(&t);
        if (!same(got, tdp_recorded[i]))
            fail_msg("case %d (%d pairs, c %a): twin %a (0x%08x), TDPBF16PS stored %a (0x%08x)",
                     i, t.pairs, (double)f32_of(t.c), (double)f32_of(got), got,
                     (double)f32_of(tdp_recorded[i]), tdp_recorded[i]);
        finite += isfinite(f32_of(got));
        /* the exact sum differs from the stored one: rounding was at work */
        double exact = f32_of(t.c);
        for (int k = 0; k < 2 * t.pairs; k++)
            exact += (double)f32_of((uint32_t)t.a[k] << 16) * f32_of((uint32_t)t.b[k] << 16);
        rounded += isfinite(f32_of(got)) && exact != (double)f32_of(got);
    }
    /* the recording exercises rounding, not only infinities and NaNs */
    assert_true(finite > TDP_CASES / 2);
    assert_true(rounded > TDP_CASES / 4);
}

/* A 16 x 16 tile of 16 pairs, rows of a and b padded: element (i, j) is the
 * product of row i and column j alone, its own c read and written. */
static void test_tile_addressing(void **state)
{
    (void)state;
    enum { M = 16, N = 16, Q = 16, LDA = 2 * Q + 6, LDB = 2 * N + 4, LDC = N + 3 };
    static uint16_t a[M * LDA], b[Q * LDB];
    static float c[M * LDC], want[M * LDC];
    for (int i = 0; i < M; i++) {
        const tdp_case t = tdp_make(16 * (4 * i + 1) + Q - 1); /* normal values, 16 pairs */
        memcpy(a + i * LDA, t.a, sizeof t.a);
    }
    for (int j = 0; j < N; j++) {
        const tdp_case t = tdp_make(16 * (4 * j + 3) + Q - 1); /* cancelling pairs */
        for (int q = 0; q < Q; q++)
            b[q * LDB + 2 * j] = t.b[2 * q], b[q * LDB + 2 * j + 1] = t.b[2 * q + 1];
    }
    for (int k = 0; k < M * LDC; k++)
        c[k] = want[k] = (float)(k % 7) - 3.0f;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            uint16_t column[2 * Q];
            for (int q = 0; q < Q; q++)
                column[2 * q] = b[q * LDB + 2 * j], column[2 * q + 1] = b[q * LDB + 2 * j + 1];
            mla_tile_dpbf16ps__ref(1, 1, Q, a + i * LDA, LDA, column, 2, want + i * LDC + j, 1);
        }
    mla_tile_dpbf16ps__ref(M, N, Q, a, LDA, b, LDB, c, LDC);
    assert_memory_equal(c, want, sizeof c); /* padding included: left alone */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recorded_cases),
        cmocka_unit_test(test_tile_addressing),
    };
    return cmocka_run_group_tests_name("tile_dpbf16ps", tests, NULL, NULL);
}
