/*
 * The bf16 dot-product GEMMs, one flavour per instruction: vdpbf16ps
 * (AVX512_BF16), BFDOT (FEAT_BF16) and AMX-BF16's TDPBF16PS (the tile GEMM,
 * gemm_bf16tile), whose roundings differ. Each ref twin against answers
 * recorded from its instruction (TDPBF16PS's in test_tile_dpbf16ps.c) and
 * against a double-precision dot product; each kernel, where this CPU has it,
 * bit-exact against its twin over tile edges, the hot decode shapes, padded
 * strides, unaligned pointers, both c_scale modes, and values that reach
 * denormals, zeros of both signs, overflow, infinities and NaNs; nothing
 * outside the m x n submatrix of C written.
 */
#include "kernels/kernels.h"
#include "oracle.h"
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef mla_gemm_bf16dot_fn *gemm_bf16dot_fn;

/* One lane: acc, then B's pair and A's pair, low element first. */
typedef struct known {
    uint32_t acc;
    uint16_t b_lo, b_hi, a_lo, a_hi;
    uint32_t want;
    const char *what;
} known;

#define ONE 0x3f80
/* Recorded from vdpbf16ps on Zen 4. */
static const known vdpbf16ps_answers[] = {
    {0x3f800001, 0xb480, 0x3380, ONE, ONE, 0x3f800000, "high pair first: (1+2^-23) + 2^-24 - 2^-22"},
    {0xff7fffff, 0, 0x5f80, 0, 0x5f80, 0x73800000, "fused: product 2^128 exact, -FLT_MAX + 2^128 = 2^104"},
    {0x7f7fffff, 0, 0x7300, 0, ONE, 0x7f800000, "FLT_MAX + 2^103 is a tie: rounds to even (inf)"},
    {0x7f7fffff, 0, 0x7280, 0, ONE, 0x7f7fffff, "FLT_MAX + 2^102 rounds down"},
    {0x00800000, 0, 0x9a00, 0, 0x1a00, 0x00000000, "FLT_MIN - 2^-150: tiny after rounding, flushed"},
    {0x00800000, 0, 0x9a00, 0, 0x1980, 0x00800000, "FLT_MIN - 2^-151: a tie that rounds to FLT_MIN"},
    {0x80c00000, 0x00a0, 0, ONE, 0, 0x80000000, "-1.5 FLT_MIN + 1.25 FLT_MIN flushes to -0"},
    {0x80c00000, 0, 0x00a0, 0, ONE, 0x00000000, "flushed -0, then + (0 * 0) is +0"},
    {0x00c00000, 0, 0x80c0, 0, ONE, 0x00000000, "exact cancellation is +0"},
    {0x80000000, 0x8000, 0x8000, ONE, ONE, 0x80000000, "-0 + -0 + -0 stays -0"},
    {0x80000001, 0x8000, 0x8000, ONE, ONE, 0x80000000, "denormal acc reads as -0"},
    {0x00000001, 0, 0, 0, 0, 0x00000000, "denormal acc reads as +0"},
    {0x00000000, 0x0001, 0, 0x7180, 0, 0x00000000, "denormal bf16 times 2^100 is 0"},
    {0x3f800000, 0, 0x0001, 0, 0x7f80, 0xffc00000, "denormal bf16 times inf is inf * 0"},
    {0x00000000, 0, 0x7f80, 0, 0, 0xffc00000, "inf * 0: default NaN"},
    {0xff800000, 0, 0x7f80, 0, ONE, 0xffc00000, "-inf + inf: default NaN"},
    {0x00000000, 0x7f81, 0x7f80, 0, 0, 0x7fc10000, "inf * 0, then a NaN in the low pair wins"},
    {0x7fc00005, 0, 0x7f80, 0, 0, 0x7fc00005, "inf * 0 with a NaN acc: the acc"},
    {0x7fc00001, 0x7f81, 0x7f82, 0x7f83, 0x7f84, 0x7fc10000, "NaN priority: B low first"},
    {0x7fc00001, ONE, 0x7f82, 0x7f83, 0x7f84, 0x7fc30000, "NaN priority: then A low"},
    {0x7fc00001, ONE, 0x7f82, ONE, 0x7f84, 0x7fc20000, "NaN priority: then B high"},
    {0x7fc00001, ONE, ONE, ONE, 0x7f84, 0x7fc40000, "NaN priority: then A high"},
    {0xffc00007, ONE, ONE, ONE, ONE, 0xffc00007, "NaN priority: then acc"},
};

/* Worked from Arm's BFDotAdd pseudocode (FPCR.EBF = 0); BFDOT under
 * qemu-aarch64 -cpu max gives each of them. */
static const known bfdot_answers[] = {
    {0x3f800000, 0x3380, 0, ONE, 0, 0x3f800001, "1 + 2^-24 rounds to odd, not to even"},
    {0xbf800000, ONE, 0x3080, ONE, ONE, 0x34000000, "the pair sum rounds first: (1 + 2^-30 -> 1 + 2^-23) - 1"},
    {0x00000000, ONE, 0xb080, ONE, ONE, 0x3f7fffff, "1 - 2^-30 truncates to 1 - 2^-24, odd"},
    {0x3f800000, 0x8d80, 0, ONE, 0, 0x3f7fffff, "1 - 2^-100: far below the last bit, sticky"},
    {0x3f800000, 0x0d80, 0, ONE, 0, 0x3f800001, "1 + 2^-100: far below the last bit, sticky"},
    {0x7f7fffff, 0, 0x7300, 0, ONE, 0x7f7fffff, "FLT_MAX + 2^103 truncates to FLT_MAX, odd"},
    {0x7f7fffff, 0, 0x7f7f, 0, ONE, 0x7f800000, "FLT_MAX + 1.99 * 2^127 is past 2^128: inf"},
    {0x00800000, 0, 0x9a00, 0, 0x1a00, 0x00800000, "product -2^-150 is tiny: flushed before the sum"},
    {0x80c00000, 0x2020, 0, 0x2000, 0, 0x80000000, "-1.5 FLT_MIN + 1.25 FLT_MIN is tiny: -0"},
    {0x3f800000, 0xbf80, 0, ONE, 0, 0x00000000, "exact cancellation is +0"},
    {0x80000000, 0x8000, 0x8000, ONE, ONE, 0x80000000, "-0 + (-0 + -0) stays -0"},
    {0x80000001, 0x8000, 0x8000, ONE, ONE, 0x80000000, "denormal acc reads as -0"},
    {0x00000000, 0x0001, 0, 0x7180, 0, 0x00000000, "denormal bf16 times 2^100 is 0"},
    {0x3f800000, 0, 0x7f80, 0, ONE, 0x7f800000, "1 + inf"},
    {0x00000000, 0, 0x7f80, 0, 0, 0x7fc00000, "inf * 0: default NaN"},
    {0xff800000, 0, 0x7f80, 0, ONE, 0x7fc00000, "-inf + inf: default NaN"},
    {0x00000000, 0x7f81, 0, ONE, 0, 0x7fc00000, "a NaN input gives the default NaN"},
    {0xffc00007, ONE, ONE, ONE, ONE, 0x7fc00000, "a NaN acc gives the default NaN"},
};

/* An instruction's arithmetic: its portable twin, its kernel (NULL when not
 * compiled for this architecture or the CPU lacks it) and the most one
 * rounding may err, relative. */
typedef struct flavour {
    const char *name;
    gemm_bf16dot_fn twin, kernel;
    double rounding;
    const known *answers;
    size_t answer_count;
    bool nan_payloads; /* the twin gives the instruction's NaN bits too */
} flavour;

enum { FLAVOURS = 3 };

static void get_flavours(flavour f[FLAVOURS], bool report)
{
    support_use_cpu(NULL);
    const mla_caps caps = mla_cpu_caps();
    (void)caps; /* unused on other architectures */
    f[0] = (flavour){"avx512_bf16", mla_gemm_bf16dot__ref, NULL, 0x1p-24, vdpbf16ps_answers,
                     sizeof vdpbf16ps_answers / sizeof vdpbf16ps_answers[0], true};
    f[1] = (flavour){"neon_bf16", mla_gemm_bf16dot__ref_bfdot, NULL, 0x1p-23, bfdot_answers,
                     sizeof bfdot_answers / sizeof bfdot_answers[0], true};
    /* up to 2 roundings per element of k: the lanes', then each step's two */
    f[2] = (flavour){"avx512_amx", mla_gemm_bf16tile__ref, NULL, 0x1p-23, NULL, 0, false};
#if defined(__x86_64__)
    if (caps & MLA_CAP_AVX512_BF16)
        f[0].kernel = mla_gemm_bf16dot__avx512_bf16;
    if ((caps & MLA_CAP_AMX_TILE) && (caps & MLA_CAP_AMX_BF16))
        f[2].kernel = mla_gemm_bf16tile__avx512_amx;
#elif defined(__aarch64__)
    if (caps & MLA_CAP_NEON_BF16)
        f[1].kernel = mla_gemm_bf16dot__neon_bf16;
#endif
    for (int i = 0; i < FLAVOURS; i++)
        if (report && !f[i].kernel)
            print_message("[ SKIPPED  ] the %s kernel: not on this cpu (its twin is tested)\n", f[i].name);
}

static uint32_t one_lane(gemm_bf16dot_fn f, const known *t)
{
    uint16_t a[2] = {t->a_lo, t->a_hi}, b[2] = {t->b_lo, t->b_hi};
    float c = oracle_f32_from(t->acc), scale = 1.0f; /* 1 * acc is exact */
    f(1, 1, 2, a, 1, 1, b, 2, &c, 1, &scale);
    return oracle_f32_bits(c);
}

static void test_known_answers(void **state)
{
    (void)state;
    flavour fl[FLAVOURS];
    get_flavours(fl, true);
    for (int f = 0; f < FLAVOURS; f++) {
        for (size_t i = 0; i < fl[f].answer_count; i++) {
            const known *t = &fl[f].answers[i];
            uint32_t got = one_lane(fl[f].twin, t);
            if (got != t->want)
                fail_msg("%s twin: %s: got 0x%08x, want 0x%08x", fl[f].name, t->what, got, t->want);
            if (fl[f].kernel && (got = one_lane(fl[f].kernel, t)) != t->want)
                fail_msg("%s: %s: got 0x%08x, want 0x%08x", fl[f].name, t->what, got, t->want);
        }
    }
}

/* ---- random GEMMs -------------------------------------------------------------- */

typedef enum values {
    MODERATE, /* |x| in [2^-8, 2^9), some zeros and denormals: finite sums */
    TINY,     /* products and C near FLT_MIN: flush to zero, the FLT_MIN band */
    WIDE,     /* every finite exponent: overflow, inf - inf */
    SPECIAL,  /* MODERATE with infinities and NaNs */
} values;

typedef struct dot_case {
    int64_t m, n, k;
    int64_t pad_a, pad_b, pad_c; /* extra stride beyond k (or 2m), 2n, n; pad_a even */
    bool a_by_column;            /* A's pairs stored [k/2][m] (P in decode) */
    bool scaled;                 /* c_scale non-NULL */
    values values;
} dot_case;

static uint16_t random_bf16(values v)
{
    uint64_t r = support_random();
    uint16_t sign = (uint16_t)(r & 0x8000u), man = (uint16_t)(r >> 40 & 0x7fu);
    switch ((r >> 20) % 32) {
    case 0: return sign;                               /* zero, either sign */
    case 1: return (uint16_t)(sign | (man ? man : 1)); /* denormal */
    case 2: if (v == SPECIAL) return (uint16_t)(sign | 0x7f80u); break;
    case 3: if (v == SPECIAL) return (uint16_t)(sign | 0x7f80u | (man ? man : 1)); break;
    default: break;
    }
    uint64_t e = v == TINY ? 56 + (r >> 24) % 16 : v == WIDE ? 1 + (r >> 24) % 254 : 119 + (r >> 24) % 18;
    return (uint16_t)(sign | e << 7 | man);
}

/* C before a scaled call: |x| < 4, or near FLT_MIN (denormals included). */
static float random_c(values v)
{
    uint32_t r = (uint32_t)support_random();
    if (v == TINY)
        return oracle_f32_from((r & 0x80000000u) | (r >> 8 & 0x01ffffffu));
    return (float)(int32_t)r * 0x1p-29f;
}

typedef struct operands {
    int64_t rs_a, cs_a, ldb, ldc, c_len; /* rs_a, cs_a count pairs */
    uint16_t *a_mem, *a, *b_mem, *b;
    float *c_scale, *c_init;
} operands;

/* Element (i, p) of A: pair (i, p/2), half p%2. */
static int64_t a_index(const operands *o, int64_t i, int64_t p)
{
    return 2 * (i * o->rs_a + p / 2 * o->cs_a) + p % 2;
}

/* Allocations are offset by 1..7 elements: nothing is vector-aligned, and
 * odd offsets leave the bf16 pairs only 2-byte aligned. */
static operands make_operands(const dot_case *g)
{
    operands o;
    if (g->a_by_column) {
        o.rs_a = 1;
        o.cs_a = g->m + g->pad_a / 2;
    } else {
        o.rs_a = (g->k + g->pad_a) / 2;
        o.cs_a = 1;
    }
    o.ldb = 2 * g->n + g->pad_b;
    o.ldc = g->n + g->pad_c;
    int64_t a_len = a_index(&o, g->m, g->k) + 1, b_len = g->k / 2 * o.ldb + 1;
    o.a_mem = malloc((size_t)(a_len + 8) * sizeof *o.a);
    o.a = o.a_mem + support_random_in(1, 7);
    o.b_mem = malloc((size_t)(b_len + 8) * sizeof *o.b);
    o.b = o.b_mem + support_random_in(1, 7);
    for (int64_t i = 0; i < a_len; i++)
        o.a[i] = random_bf16(g->values);
    for (int64_t i = 0; i < b_len; i++)
        o.b[i] = random_bf16(g->values);
    o.c_scale = malloc((size_t)(g->m + 1) * sizeof *o.c_scale);
    for (int64_t i = 0; i < g->m; i++)
        o.c_scale[i] = g->values == TINY || i % 7 == 3 ? 1.0f : (float)(int32_t)support_random() * 0x1p-30f;
    o.c_len = 2 * SUPPORT_C_GUARD + g->m * o.ldc;
    o.c_init = malloc((size_t)o.c_len * sizeof *o.c_init);
    for (int64_t i = 0; i < o.c_len; i++)
        o.c_init[i] = oracle_f32_from(SUPPORT_C_GUARD_BITS);
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++)
            o.c_init[SUPPORT_C_GUARD + i * o.ldc + j] = g->scaled ? random_c(g->values) : NAN;
    return o;
}

static void free_operands(operands *o)
{
    free(o->a_mem);
    free(o->b_mem);
    free(o->c_scale);
    free(o->c_init);
}

/* Runs f on a fresh copy of C (guards included). */
static float *run(gemm_bf16dot_fn f, const dot_case *g, const operands *o)
{
    float *c = malloc((size_t)o->c_len * sizeof *c);
    memcpy(c, o->c_init, (size_t)o->c_len * sizeof *c);
    f(g->m, g->n, g->k, o->a, o->rs_a, o->cs_a, o->b, o->ldb, c + SUPPORT_C_GUARD, o->ldc, g->scaled ? o->c_scale : NULL);
    return c;
}

static void describe(char *buf, size_t size, const dot_case *g)
{
    static const char *names[] = {"moderate", "tiny", "wide", "special"};
    snprintf(buf, size, "m=%lld n=%lld k=%lld pad_a=%lld pad_b=%lld pad_c=%lld %s, %s values",
             (long long)g->m, (long long)g->n, (long long)g->k, (long long)g->pad_a,
             (long long)g->pad_b, (long long)g->pad_c, g->scaled ? "c_scale" : "no c_scale",
             names[g->values]);
}

/* The twin's result against the exact sum in double: each of the k + 1
 * roundings (BFDOT: k / 2 pair sums and k / 2 accumulations; its products
 * are exact) errs by at most `rounding` of a partial sum, no partial sum exceeds
 * the sum of the magnitudes, and each flushed result or denormal input read
 * as zero moves the sum by less than 2^-100 with these magnitudes. With
 * c_scale NULL no element may be NaN (C was NaN and must not have been read). */
static void check_twin_against_double(const flavour *fl, const dot_case *g, const operands *o,
                                      const float *c)
{
    for (int64_t i = 0; i < g->m; i++) {
        for (int64_t j = 0; j < g->n; j++) {
            double c0 = g->scaled ? (double)o->c_scale[i] * o->c_init[SUPPORT_C_GUARD + i * o->ldc + j] : 0.0;
            double sum = c0, mag = fabs(c0);
            for (int64_t p = 0; p < g->k; p++) {
                double term = (double)oracle_bf16_value(o->a[a_index(o, i, p)]) * oracle_bf16_value(o->b[p / 2 * o->ldb + 2 * j + p % 2]);
                sum += term;
                mag += fabs(term);
            }
            double got = c[SUPPORT_C_GUARD + i * o->ldc + j];
            double bound = (double)(g->k + 2) * fl->rounding * mag + (double)(g->k + 1) * 0x1p-100;
            if (!(fabs(got - sum) <= bound)) {
                char what[160];
                describe(what, sizeof what, g);
                fail_msg("%s twin %s: C[%lld][%lld] = %.9g, double sum %.9g, bound %.3g", fl->name, what, (long long)i,
                         (long long)j, got, sum, bound);
            }
        }
    }
}

/* Bit-exact with ref inside the submatrix, guard bits everywhere else. */
static void check_same(const char *who, const dot_case *g, const operands *o, const float *want,
                       const float *got)
{
    char what[160];
    describe(what, sizeof what, g);
    support_expect_c(who, what, g->m, g->n, o->ldc, o->c_len, want, got);
}

/* Every NaN inside the m x n submatrix as one NaN, for a twin that does
 * not model NaN payloads. */
static void same_nans(const dot_case *g, const operands *o, float *c)
{
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++)
            if (isnan(c[SUPPORT_C_GUARD + i * o->ldc + j]))
                c[SUPPORT_C_GUARD + i * o->ldc + j] = NAN;
}

/* The twin (guards, and against double for moderate values), then the
 * kernel bit-exact against the twin when there is one. */
static void check_case(const flavour *fl, const dot_case *g)
{
    operands o = make_operands(g);
    float *want = run(fl->twin, g, &o);
    check_same("twin", g, &o, want, want); /* guards only */
    if (g->values == MODERATE)
        check_twin_against_double(fl, g, &o, want);
    if (fl->kernel) {
        float *got = run(fl->kernel, g, &o);
        if (!fl->nan_payloads) {
            same_nans(g, &o, want);
            same_nans(g, &o, got);
        }
        check_same(fl->name, g, &o, want, got);
        free(got);
    }
    free(want);
    free_operands(&o);
}

static dot_case random_case(int64_t m, int64_t n, int64_t k)
{
    return (dot_case){
        .m = m, .n = n, .k = k,
        .pad_a = 2 * support_random_in(0, 1) * support_random_in(1, 5),
        .a_by_column = support_random_in(0, 1),
        .pad_b = support_random_in(0, 1) * support_random_in(1, 9),
        .pad_c = support_random_in(0, 1) * support_random_in(1, 9),
        .scaled = support_random() & 1,
        .values = (values)support_random_in(MODERATE, SPECIAL),
    };
}

/* On and around the tile edges (8 rows x 3 vectors of 16 columns). */
static const int64_t edge_m[] = {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 23, 24, 25};
static const int64_t edge_n[] = {0, 1, 2, 15, 16, 17, 31, 32, 33, 47, 48, 49, 63, 64, 65, 95, 96, 97};
static const int64_t edge_k[] = {0, 2, 4, 6, 30, 64, 66, 200};
#define COUNT(x) (int64_t)(sizeof x / sizeof x[0])

static void edges_of(const flavour *fl)
{
    for (int iter = 0; iter < 1500; iter++) {
        dot_case g = random_case(edge_m[support_random_in(0, COUNT(edge_m) - 1)],
                                 edge_n[support_random_in(0, COUNT(edge_n) - 1)],
                                 edge_k[support_random_in(0, COUNT(edge_k) - 1)]);
        check_case(fl, &g);
    }
}

/* Every (m, n) up to two tiles each way: all tails in both directions. */
static void all_small_shapes_of(const flavour *fl)
{
    for (int64_t m = 0; m <= 17; m++)
        for (int64_t n = 0; n <= 100; n++)
            check_case(fl, &(dot_case){.m = m, .n = n, .k = 10, .pad_c = n % 3, .scaled = n % 2,
                                           .values = (values)((m + n) % 4)});
}

/* The calls decode makes, at their real strides: scores (q rows of 576,
 * keys pair-packed 2n wide, C fresh) and P.V (P rows of 64, values
 * pair-packed 1024 wide, C rescaled), including their tails. */
static void hot_shapes_of(const flavour *fl)
{
    for (int64_t n = 16; n <= 128; n += 16)
        for (int v = MODERATE; v <= SPECIAL; v++)
            check_case(fl, &(dot_case){.m = 64, .n = n, .k = 576, .values = (values)v});
    check_case(fl, &(dot_case){.m = 1, .n = 128, .k = 576, .pad_a = 64});
    check_case(fl, &(dot_case){.m = 37, .n = 80, .k = 576, .pad_a = 64, .values = TINY});
    for (int64_t m = 16; m <= 128; m *= 2)
        for (int v = MODERATE; v <= SPECIAL; v++)
            check_case(fl, &(dot_case){.m = m, .n = 512, .k = 64, .scaled = true, .values = (values)v});
    check_case(fl, &(dot_case){.m = 48, .n = 512, .k = 30, .pad_a = 34, .scaled = true});
    check_case(fl, &(dot_case){.m = 128, .n = 512, .k = 64, .a_by_column = true, .scaled = true});
    check_case(fl, &(dot_case){.m = 16, .n = 512, .k = 30, .pad_a = 4, .a_by_column = true, .scaled = true});
    check_case(fl, &(dot_case){.m = 16, .n = 512, .k = 2, .pad_a = 62, .scaled = true});
}

/* Sums that land within 2^-149 of FLT_MIN, either sign: C one or two steps
 * of the grid above FLT_MIN, products of 2^-150 to 2^-135 (finer than the
 * grid), so flushing hangs on rounding with unbounded exponent. */
static void flush_band_of(const flavour *fl)
{
    for (int iter = 0; iter < 20; iter++) {
        dot_case g = {.m = 40, .n = 70, .k = 2, .scaled = true, .values = TINY};
        operands o = make_operands(&g);
        for (int64_t i = 0; i < a_index(&o, g.m, g.k); i++)
            o.a[i] = (uint16_t)((support_random() & 0x807fu) | (uint16_t)support_random_in(52, 59) << 7);
        for (int64_t i = 0; i < o.ldb; i++)
            o.b[i] = (uint16_t)((support_random() & 0x807fu) | (uint16_t)support_random_in(52, 59) << 7);
        for (int64_t i = 0; i < g.m; i++) {
            o.c_scale[i] = 1.0f;
            for (int64_t j = 0; j < g.n; j++)
                o.c_init[SUPPORT_C_GUARD + i * o.ldc + j] =
                    oracle_f32_from((uint32_t)(support_random() & 0x80000000u) | (0x00800000u + (uint32_t)support_random_in(0, 2)));
        }
        float *want = run(fl->twin, &g, &o);
        if (fl->kernel) {
            float *got = run(fl->kernel, &g, &o);
            check_same(fl->name, &g, &o, want, got);
            free(got);
        }
        free(want);
        free_operands(&o);
    }
}

/* Random shapes, strides and values. */
static void random_of(const flavour *fl)
{
    for (int iter = 0; iter < 1000; iter++) {
        dot_case g = random_case(support_random_in(0, 40), support_random_in(0, 150),
                                 2 * support_random_in(0, 60));
        check_case(fl, &g);
    }
    if (fl->kernel)
        print_message("[ KERNEL   ] %s: bit-exact with its ref twin\n", fl->name);
}

/* ---- the pair packing (interleave_u16) ------------------------------------------ */

/* n up to 100 straddles every vector width and tail, then long rows; the
 * pointers sit one element off alignment; guards around dst must stay. */
static void interleave_on(const mla_backend_desc *b, void *ctx)
{
    (void)ctx;
    enum { N = 1100, PAD = 9, GUARD = 0xa5a5 };
    uint16_t *even = malloc((N + 1) * sizeof *even), *odd = malloc((N + 1) * sizeof *odd);
    uint16_t *dst = malloc((2 * N + 2 * PAD) * sizeof *dst);
    assert_non_null(even);
    assert_non_null(odd);
    assert_non_null(dst);
    for (int64_t n = 0; n <= N; n = n < 100 ? n + 1 : n + 333) {
        for (int with_odd = 0; with_odd < 2; with_odd++) {
            for (int64_t i = 0; i <= N; i++) {
                even[i] = (uint16_t)support_random();
                odd[i] = (uint16_t)support_random();
            }
            for (int64_t i = 0; i < 2 * N + 2 * PAD; i++)
                dst[i] = GUARD;
            b->kernels.interleave_u16(dst + PAD, even + 1, with_odd ? odd + 1 : NULL, n);
            for (int64_t i = 0; i < 2 * N + 2 * PAD; i++) {
                int64_t e = (i - PAD) / 2;
                uint16_t want = i < PAD || i >= PAD + 2 * n ? GUARD
                                : (i - PAD) % 2 == 0      ? even[1 + e]
                                : with_odd                ? odd[1 + e]
                                                          : 0;
                if (dst[i] != want)
                    fail_msg("%s interleave_u16 n=%lld %s: dst[%lld] = 0x%04x, want 0x%04x",
                             b->name, (long long)n, with_odd ? "two rows" : "no odd row",
                             (long long)(i - PAD), dst[i], want);
            }
        }
    }
    free(even);
    free(odd);
    free(dst);
}

static void test_interleave(void **state)
{
    (void)state;
    support_use_cpu(NULL);
    assert_true(support_each_backend(MLA_OP_CONVERT, NULL, interleave_on, NULL) >= 1);
}

/* Runs each check for every flavour. */
#define FOR_EACH_FLAVOUR(check)                                                        \
    static void test_##check(void **state)                                           \
    {                                                                                \
        (void)state;                                                                 \
        flavour fl[FLAVOURS];                                                        \
        get_flavours(fl, false);                                                     \
        for (int f = 0; f < FLAVOURS; f++)                                           \
            check##_of(&fl[f]);                                                      \
    }
FOR_EACH_FLAVOUR(edges)
FOR_EACH_FLAVOUR(all_small_shapes)
FOR_EACH_FLAVOUR(hot_shapes)
FOR_EACH_FLAVOUR(flush_band)
FOR_EACH_FLAVOUR(random)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_answers),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_all_small_shapes),
        cmocka_unit_test(test_hot_shapes),
        cmocka_unit_test(test_flush_band),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_interleave),
    };
    return cmocka_run_group_tests_name("gemm_bf16dot", tests, NULL, NULL);
}
