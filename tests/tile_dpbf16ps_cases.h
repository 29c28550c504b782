/* The TDPBF16PS cases recorded on AMX hardware (tools/record_tile_dpbf16ps.c)
 * and replayed on the twin everywhere (tests/test_tile_dpbf16ps.c): case i
 * is one 1 x 1 tile product, c + a . b over 1 + i % 16 pairs, its inputs
 * made from i alone, so the recording stores only the results. */
#ifndef MLA_TEST_TILE_DPBF16PS_CASES_H
#define MLA_TEST_TILE_DPBF16PS_CASES_H

#include <stdint.h>

enum { TDP_CASES = 2048, TDP_MAX_PAIRS = 16 };

typedef struct tdp_case {
    int pairs;
    uint32_t c;                   /* f32 bits                              */
    uint16_t a[2 * TDP_MAX_PAIRS], b[2 * TDP_MAX_PAIRS]; /* bf16 bits       */
} tdp_case;

static uint64_t tdp_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A bf16 of the case's kind: 0 any bits; 1 normal, exponents within 2^+-12
 * (products and sums in range, rounding at work); 2 any exponent, one in
 * four denormal, one in nine zero (overflow, underflow, flushing). */
static uint16_t tdp_bf16(uint64_t *s, int kind)
{
    const uint16_t sign = tdp_next(s) & 1 ? 0x8000u : 0u, mant = tdp_next(s) & 0x7fu;
    if (kind == 0)
        return (uint16_t)tdp_next(s);
    if (kind == 1)
        return (uint16_t)(sign | (uint16_t)((115 + tdp_next(s) % 24) << 7) | mant);
    if (tdp_next(s) % 9 == 0)
        return sign;
    unsigned e = tdp_next(s) % 4 == 0 ? 0u : (unsigned)(tdp_next(s) % 255);
    return (uint16_t)(sign | (uint16_t)(e << 7) | mant);
}

/* Case i: its kind cycles with i / 16 over the three above and a fourth,
 * kind 1 with each pair's second product cancelling its first. */
static tdp_case tdp_make(int i)
{
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
    tdp_case t = {.pairs = 1 + i % TDP_MAX_PAIRS};
    const int kind = (i / TDP_MAX_PAIRS) % 4, values = kind == 3 ? 1 : kind;
    for (int k = 0; k < 2 * t.pairs; k++) {
        t.a[k] = tdp_bf16(&s, values);
        t.b[k] = tdp_bf16(&s, values);
        if (kind == 3 && k % 2)
            t.a[k] = t.a[k - 1], t.b[k] = t.b[k - 1] ^ 0x8000u;
    }
    const uint32_t bits = (uint32_t)tdp_next(&s);
    t.c = kind == 0 ? bits : kind == 2 ? (bits & 0x807fffffu) | ((bits >> 8) & 0x7f800000u)
                                       : (bits & 0x807fffffu) | ((uint32_t)(115 + bits % 24) << 23);
    return t;
}

#endif
