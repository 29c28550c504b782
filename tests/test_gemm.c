/*
 * GEMM micro-kernels of every backend this CPU can run, called directly:
 * gemm_f32, gemm_bf16 and, where a backend has it, gemm_f16f16 (whose ref
 * twin must equal gemm_f32 on the widened operands). Each must give the ref
 * kernel's bits (the contract of mla_gemm_f32_fn) for
 * shapes on and around the tile edges, the hot decode shapes, both layouts of
 * A, padded strides and both c_scale modes, and must write nothing outside
 * the m x n submatrix of C. The ref result itself is checked against a
 * double-precision dot product.
 */
#include "kernels/kernels.h"
#include "oracle.h"
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum gemm_kind {
    F32,    /* gemm_f32 */
    BF16,   /* gemm_bf16: B bf16 */
    F16F16, /* gemm_f16f16: A and B f16 */
    KINDS
} gemm_kind;

typedef struct gemm_case {
    int64_t m, n, k;
    bool col_major_a; /* rs_a = 1, cs_a >= m; else cs_a = 1, rs_a >= k */
    int64_t pad_a, pad_b, pad_c; /* extra stride beyond the minimum */
    bool scaled;                 /* c_scale non-NULL */
    gemm_kind kind;
} gemm_case;

/* Uniform in (-1, 1) with all 24 bits of mantissa in play, so that any
 * reordering or extra rounding shows in the result bits. */
static float random_f32(void)
{
    return (float)(int32_t)support_random() * 0x1p-31f;
}

/* A finite bf16 code in about [2^-8, 2^8), either sign. */
static uint16_t random_bf16(void)
{
    uint64_t r = support_random();
    return (uint16_t)((r & 0x8000u) | ((119u + (r >> 16) % 17u) << 7) | (r >> 40 & 0x7fu));
}

/* An f16 code in about [2^-8, 2^8), either sign; 1 in 16 a denormal. */
static uint16_t random_f16(void)
{
    uint64_t r = support_random();
    uint16_t sign = (uint16_t)(r & 0x8000u), man = (uint16_t)(r >> 40 & 0x3ffu);
    if ((r >> 20) % 16 == 0)
        return (uint16_t)(sign | (man ? man : 1));
    return (uint16_t)(sign | (7u + (r >> 24) % 17u) << 10 | man);
}

/* Operands of one case; c_init holds C (guards included) before the call.
 * bh holds B as bf16, ah and fh A and B as f16. */
typedef struct operands {
    int64_t rs_a, cs_a, ldb, ldc, a_len, b_len, c_len;
    float *a_mem, *a, *b_mem, *b, *c_scale, *c_init;
    uint16_t *bh_mem, *bh, *ah_mem, *ah, *fh_mem, *fh;
} operands;

/* Allocations are offset by 1..7 elements so nothing is vector-aligned. */
static operands make_operands(const gemm_case *g)
{
    operands o;
    o.rs_a = g->col_major_a ? 1 : g->k + g->pad_a;
    o.cs_a = g->col_major_a ? g->m + g->pad_a : 1;
    o.ldb = g->n + g->pad_b;
    o.ldc = g->n + g->pad_c;
    int64_t a_len = g->m == 0 || g->k == 0 ? 1 : (g->m - 1) * o.rs_a + (g->k - 1) * o.cs_a + 1;
    int64_t b_len = g->k * o.ldb + 1;
    o.a_len = a_len;
    o.b_len = b_len;
    int64_t off = support_random_in(1, 7);
    o.a_mem = malloc((size_t)(a_len + 8) * sizeof(float));
    o.a = o.a_mem + off;
    o.ah_mem = malloc((size_t)(a_len + 8) * sizeof(uint16_t));
    o.ah = o.ah_mem + off;
    for (int64_t i = 0; i < a_len; i++) {
        o.a[i] = random_f32();
        o.ah[i] = random_f16();
    }
    o.b_mem = malloc((size_t)(b_len + 8) * sizeof(float));
    o.b = o.b_mem + off;
    o.bh_mem = malloc((size_t)(b_len + 8) * sizeof(uint16_t));
    o.bh = o.bh_mem + off;
    o.fh_mem = malloc((size_t)(b_len + 8) * sizeof(uint16_t));
    o.fh = o.fh_mem + off;
    for (int64_t i = 0; i < b_len; i++) {
        o.b[i] = random_f32();
        o.bh[i] = random_bf16();
        o.fh[i] = random_f16();
    }
    o.c_scale = malloc((size_t)(g->m + 1) * sizeof(float));
    for (int64_t i = 0; i < g->m; i++)
        o.c_scale[i] = i % 7 == 3 ? 1.0f : random_f32() * 2.0f;
    o.c_len = 2 * SUPPORT_C_GUARD + g->m * o.ldc;
    o.c_init = malloc((size_t)o.c_len * sizeof(float));
    for (int64_t i = 0; i < o.c_len; i++)
        o.c_init[i] = oracle_f32_from(SUPPORT_C_GUARD_BITS);
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++)
            o.c_init[SUPPORT_C_GUARD + i * o.ldc + j] = g->scaled ? random_f32() * 4.0f : NAN;
    return o;
}

static void free_operands(operands *o)
{
    free(o->a_mem);
    free(o->b_mem);
    free(o->bh_mem);
    free(o->ah_mem);
    free(o->fh_mem);
    free(o->c_scale);
    free(o->c_init);
}

/* Runs one backend's kernel on c, a copy of C (guards included); the ref
 * table has no gemm_f16f16, so its twin stands in. */
static void call(const mla_kernels *kern, const gemm_case *g, const operands *o, float *c)
{
    const float *scale = g->scaled ? o->c_scale : NULL;
    float *cc = c + SUPPORT_C_GUARD;
    switch (g->kind) {
    case BF16: kern->gemm_bf16(g->m, g->n, g->k, o->a, o->rs_a, o->cs_a, o->bh, o->ldb, cc, o->ldc, scale); break;
    case F16F16:
        (kern->gemm_f16f16 ? kern->gemm_f16f16 : mla_gemm_f16f16__ref)(g->m, g->n, g->k, o->ah, o->rs_a, o->cs_a,
                                                                     o->fh, o->ldb, cc, o->ldc, scale);
        break;
    default: kern->gemm_f32(g->m, g->n, g->k, o->a, o->rs_a, o->cs_a, o->b, o->ldb, cc, o->ldc, scale); break;
    }
}

/* call() on a fresh copy of C. */
static float *run(const mla_kernels *kern, const gemm_case *g, const operands *o)
{
    float *c = malloc((size_t)o->c_len * sizeof(float));
    memcpy(c, o->c_init, (size_t)o->c_len * sizeof(float));
    call(kern, g, o, c);
    return c;
}

/* The bytes of src copied `shift` bytes into the fresh allocation *mem. */
static void *shifted(const void *src, size_t bytes, int shift, void **mem)
{
    *mem = malloc(bytes + (size_t)shift);
    assert_non_null(*mem);
    return memcpy((char *)*mem + shift, src, bytes);
}

/* run() with every operand and C `shift` bytes (1 to 3) past where
 * make_operands put them: off element alignment, as callers' buffers may
 * be (mla.h). C comes back at an aligned address. */
static float *run_shifted(const mla_kernels *kern, const gemm_case *g, const operands *o, int shift)
{
    operands s = *o;
    void *mem[6];
    s.a = shifted(o->a, (size_t)o->a_len * sizeof(float), shift, &mem[0]);
    s.ah = shifted(o->ah, (size_t)o->a_len * sizeof(uint16_t), shift, &mem[1]);
    s.b = shifted(o->b, (size_t)o->b_len * sizeof(float), shift, &mem[2]);
    s.bh = shifted(o->bh, (size_t)o->b_len * sizeof(uint16_t), shift, &mem[3]);
    s.fh = shifted(o->fh, (size_t)o->b_len * sizeof(uint16_t), shift, &mem[4]);
    const size_t c_bytes = (size_t)o->c_len * sizeof(float);
    float *c = shifted(o->c_init, c_bytes, shift, &mem[5]);
    call(kern, g, &s, c);
    float *got = malloc(c_bytes);
    memcpy(got, c, c_bytes);
    for (int i = 0; i < 6; i++)
        free(mem[i]);
    return got;
}

/* gemm_f16f16's twin is gemm_f32 on the widened operands, bit for bit. */
static void check_f16_twin_is_widened_f32(const gemm_case *g, const operands *o, const float *want)
{
    int64_t a_len = g->m == 0 || g->k == 0 ? 1 : (g->m - 1) * o->rs_a + (g->k - 1) * o->cs_a + 1;
    int64_t b_len = g->k * o->ldb + 1;
    float *aw = malloc((size_t)a_len * sizeof(float)), *bw = malloc((size_t)b_len * sizeof(float));
    mla_cvt_f16_f32__ref(o->ah, aw, a_len);
    mla_cvt_f16_f32__ref(o->fh, bw, b_len);
    float *c = malloc((size_t)o->c_len * sizeof(float));
    memcpy(c, o->c_init, (size_t)o->c_len * sizeof(float));
    mla_gemm_f32__ref(g->m, g->n, g->k, aw, o->rs_a, o->cs_a, bw, o->ldb, c + SUPPORT_C_GUARD, o->ldc,
                      g->scaled ? o->c_scale : NULL);
    assert_memory_equal(c, want, (size_t)o->c_len * sizeof(float));
    free(aw);
    free(bw);
    free(c);
}

static void describe(char *buf, size_t size, const gemm_case *g)
{
    static const char *const kinds[] = {"f32", "bf16", "f16f16"};
    snprintf(buf, size, "%s m=%lld n=%lld k=%lld %s pad_a=%lld pad_b=%lld pad_c=%lld %s",
             kinds[g->kind], (long long)g->m, (long long)g->n, (long long)g->k,
             g->col_major_a ? "col-major A" : "row-major A", (long long)g->pad_a,
             (long long)g->pad_b, (long long)g->pad_c, g->scaled ? "c_scale" : "no c_scale");
}

static double f16_value(uint16_t h)
{
    return oracle_f32_from(oracle_widen16(&ORACLE_F16, h));
}

/* The ref result against the sum in double: each of the k + 1 roundings of
 * the f32 chain errs by at most 2^-24 of a partial sum, and no partial sum
 * exceeds the sum of the magnitudes. With c_scale NULL no element may be NaN
 * (C was NaN and must not have been read). */
static void check_ref_against_double(const gemm_case *g, const operands *o, const float *c)
{
    for (int64_t i = 0; i < g->m; i++) {
        for (int64_t j = 0; j < g->n; j++) {
            double c0 = g->scaled ? (double)o->c_scale[i] * o->c_init[SUPPORT_C_GUARD + i * o->ldc + j] : 0.0;
            double sum = c0, mag = fabs(c0);
            for (int64_t p = 0; p < g->k; p++) {
                int64_t bi = p * o->ldb + j;
                int64_t ai = i * o->rs_a + p * o->cs_a;
                double term = g->kind == F16F16 ? f16_value(o->ah[ai]) * f16_value(o->fh[bi])
                              : g->kind == BF16 ? (double)o->a[ai] * oracle_bf16_value(o->bh[bi])
                                                : (double)o->a[ai] * o->b[bi];
                sum += term;
                mag += fabs(term);
            }
            double got = c[SUPPORT_C_GUARD + i * o->ldc + j];
            double bound = (double)(g->k + 2) * 0x1p-24 * mag + 0x1p-140;
            if (!(fabs(got - sum) <= bound)) {
                char what[160];
                describe(what, sizeof what, g);
                fail_msg("ref %s: C[%lld][%lld] = %.9g, double sum %.9g, bound %.3g", what, (long long)i,
                         (long long)j, got, sum, bound);
            }
        }
    }
}

/* Bit-exact with ref inside the submatrix, guard bits everywhere else. */
static void check_same(const char *backend, const gemm_case *g, const operands *o, const float *want,
                       const float *got)
{
    char what[160];
    describe(what, sizeof what, g);
    support_expect_c(backend, what, g->m, g->n, o->ldc, o->c_len, want, got);
}

static const mla_backend_desc *runnable[16];
static int num_runnable;

static void note_runnable(const mla_backend_desc *b, void *ctx)
{
    (void)ctx;
    if (strcmp(b->name, "ref") != 0 && num_runnable < 16)
        runnable[num_runnable++] = b;
}

/* The backends this CPU can run, other than ref (whose kernels are the
 * expected values). */
static void find_backends(void)
{
    num_runnable = 0;
    support_each_backend(MLA_OP_DECODE, NULL, note_runnable, NULL);
}

static void check_case(const gemm_case *g, bool check_ref)
{
    const mla_kernels *ref = &mla_backend_find("ref")->kernels;
    operands o = make_operands(g);
    float *want = run(ref, g, &o);
    check_same("ref", g, &o, want, want); /* guards only */
    for (int64_t i = 0; i < g->m; i++) /* finite inputs: a NaN means C was read */
        for (int64_t j = 0; j < g->n; j++)
            assert_false(isnan(want[SUPPORT_C_GUARD + i * o.ldc + j]));
    if (check_ref)
        check_ref_against_double(g, &o, want);
    if (g->kind == F16F16)
        check_f16_twin_is_widened_f32(g, &o, want);
    for (int r = 0; r < num_runnable; r++) {
        const mla_backend_desc *b = runnable[r];
        if (g->kind == F16F16 && !b->kernels.gemm_f16f16)
            continue;
        float *got = run(&b->kernels, g, &o);
        check_same(b->name, g, &o, want, got);
        free(got);
    }
    free(want);
    free_operands(&o);
}

/* Values on and around the tile edges: vector widths 8 and 16, n blocks of 24
 * and 48, tiles of 4 to 12 rows (split evenly), the k blocks of the n % 8
 * tail (128). */
static const int64_t edge_m[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 16, 17, 23, 24, 25, 37};
static const int64_t edge_n[] = {0,  1,  2,  7,  8,  9,  15, 16, 17, 23, 24,  25,  31, 32,
                                 33, 47, 48, 49, 63, 64, 65, 72, 80, 95, 96, 97, 127, 128, 129};
static const int64_t edge_k[] = {0, 1, 2, 3, 31, 63, 64, 65, 127, 128, 129, 255, 256, 257, 300};
#define COUNT(x) (int64_t)(sizeof x / sizeof x[0])

/* A random case of edge sizes, layout, padding, scaling and kind. */
static gemm_case edge_case(void)
{
    return (gemm_case){
        .m = edge_m[support_random_in(0, COUNT(edge_m) - 1)],
        .n = edge_n[support_random_in(0, COUNT(edge_n) - 1)],
        .k = edge_k[support_random_in(0, COUNT(edge_k) - 1)],
        .col_major_a = support_random() & 1,
        .pad_a = support_random_in(0, 1) * support_random_in(1, 9),
        .pad_b = support_random_in(0, 1) * support_random_in(1, 9),
        .pad_c = support_random_in(0, 1) * support_random_in(1, 9),
        .scaled = support_random() & 1,
        .kind = (gemm_kind)support_random_in(F32, KINDS - 1),
    };
}

static void test_edges(void **state)
{
    (void)state;
    find_backends();
    for (int iter = 0; iter < 600; iter++) {
        gemm_case g = edge_case();
        check_case(&g, iter % 4 == 0);
    }
    for (int r = 0; r < num_runnable; r++)
        print_message("[ BACKEND  ] %s: gemm_f32, gemm_bf16%s bit-exact with ref on 600 edge shapes\n",
                      runnable[r]->name, runnable[r]->kernels.gemm_f16f16 ? ", gemm_f16f16" : "");
}

/* Operands at any byte address: A, B and C 1 to 3 bytes past an element
 * boundary give the aligned call's bits on every backend, ref included. */
static void test_byte_misaligned(void **state)
{
    (void)state;
    find_backends();
    const mla_kernels *ref = &mla_backend_find("ref")->kernels;
    for (int iter = 0; iter < 120; iter++) {
        gemm_case g = edge_case();
        const int shift = 1 + iter % 3;
        operands o = make_operands(&g);
        float *want = run(ref, &g, &o);
        float *got = run_shifted(ref, &g, &o, shift);
        check_same("ref", &g, &o, want, got);
        free(got);
        for (int r = 0; r < num_runnable; r++) {
            if (g.kind == F16F16 && !runnable[r]->kernels.gemm_f16f16)
                continue;
            got = run_shifted(&runnable[r]->kernels, &g, &o, shift);
            check_same(runnable[r]->name, &g, &o, want, got);
            free(got);
        }
        free(want);
        free_operands(&o);
    }
}

/* Every (m, n) up to two or more tiles each way, at a k that crosses a k
 * block of the n % 8 tail: all tails and partial tiles in both directions. */
static void test_all_small_shapes(void **state)
{
    (void)state;
    find_backends();
    for (int64_t m = 0; m <= 25; m++) {
        for (int64_t n = 0; n <= 52; n++) {
            gemm_case g = {.m = m, .n = n, .k = 130, .col_major_a = (m + n) & 1, .pad_c = 3,
                           .scaled = n % 3 == 1, .kind = (gemm_kind)((n / 2) % KINDS)};
            check_case(&g, false);
        }
    }
}

/* k beyond one k block (1024): later blocks resume from the partial sums
 * in C. */
static void test_long_k(void **state)
{
    (void)state;
    find_backends();
    static const int64_t ks[] = {1023, 1024, 1025, 2100};
    for (int i = 0; i < 4; i++) {
        for (int s = 0; s < 2; s++) {
            gemm_case g = {.m = 7 + 6 * s, .n = 53 + 40 * s, .k = ks[i], .col_major_a = s, .pad_b = 3,
                           .pad_c = 2, .scaled = (i + s) & 1, .kind = (gemm_kind)((i + s) % KINDS)};
            check_case(&g, s == 0);
        }
    }
}

/* The shapes decode runs (scores, P.V, the absorptions), at their real
 * strides. */
static void test_hot_shapes(void **state)
{
    (void)state;
    find_backends();
    const gemm_case hot[] = {
        /* scores: q [m][576] . kv rows [576][n] */
        {.m = 64, .n = 128, .k = 576},
        {.m = 16, .n = 48, .k = 576, .pad_a = 64},
        {.m = 5, .n = 16, .k = 576},
        {.m = 64, .n = 16, .k = 576, .kind = F16F16},
        {.m = 13, .n = 128, .k = 576, .kind = F16F16},
        /* P.V: P column-major, V rows of the 576-wide cache, C rescaled */
        {.m = 128, .n = 512, .k = 64, .col_major_a = true, .pad_b = 64, .scaled = true},
        {.m = 16, .n = 512, .k = 48, .col_major_a = true, .pad_a = 112, .pad_b = 64, .scaled = true},
        {.m = 128, .n = 512, .k = 64, .col_major_a = true, .pad_b = 64, .scaled = true, .kind = F16F16},
        {.m = 16, .n = 512, .k = 33, .col_major_a = true, .pad_b = 64, .scaled = true, .kind = F16F16},
        /* absorptions: q_nope [m][128] x W_UK [128][512], latent [m][512] x W_UV [512][128] */
        {.m = 8, .n = 512, .k = 128, .pad_a = 128 * 192 - 128},
        {.m = 3, .n = 512, .k = 128, .pad_a = 128 * 192 - 128, .kind = BF16},
        {.m = 64, .n = 512, .k = 128, .kind = BF16},
        {.m = 8, .n = 128, .k = 512, .pad_a = 64},
        {.m = 8, .n = 128, .k = 512, .kind = BF16},
    };
    for (size_t i = 0; i < sizeof hot / sizeof hot[0]; i++)
        check_case(&hot[i], i % 3 == 0);
}

/* ---- the query packing (transpose_u32) ----------------------------------------- */

/* m rows of n words at 2-byte offsets from alignment into columns of dst
 * (ld = m + pad): shapes straddle every block (4, 8, 16) on both sides,
 * and dst's padding lanes and the guards around it must stay. */
static void transpose_on(const mla_backend_desc *b, void *ctx)
{
    (void)ctx;
    enum { M = 37, N = 300, PAD = 3, GUARD = 0x5eadbeef };
    static const int64_t ms[] = {0, 1, 3, 4, 7, 8, 15, 16, 17, 33, M};
    static const int64_t ns[] = {0, 1, 5, 8, 13, 16, 31, 64, 288, N};
    uint16_t *src = malloc((size_t)(M * (2 * N + 3)) * sizeof *src);
    uint32_t *dst = malloc((size_t)((N + 2) * (M + PAD)) * sizeof *dst);
    assert_non_null(src);
    assert_non_null(dst);
    for (int64_t i = 0; i < M * (2 * N + 3); i++)
        src[i] = (uint16_t)support_random();
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            const int64_t m = ms[mi], n = ns[ni], ld = m + PAD, len = (n + 2) * ld;
            const void *rows[M];
            for (int64_t r = 0; r < m; r++) /* odd 16-bit offsets: rows 2- not 4-byte aligned */
                rows[r] = src + 1 + r * (2 * n + 3);
            for (int64_t i = 0; i < len; i++)
                dst[i] = GUARD;
            b->kernels.transpose_u32(dst + ld, ld, rows, m, n);
            for (int64_t i = 0; i < len; i++) {
                int64_t p = i / ld - 1, r = i % ld;
                uint32_t want = GUARD;
                if (p >= 0 && p < n && r < m)
                    memcpy(&want, (const uint16_t *)rows[r] + 2 * p, sizeof want);
                if (dst[i] != want)
                    fail_msg("%s transpose_u32 m=%lld n=%lld: word %lld of row %lld = 0x%08x, want 0x%08x",
                             b->name, (long long)m, (long long)n, (long long)r, (long long)p, dst[i],
                             want);
            }
        }
    }
    free(src);
    free(dst);
}

static void test_transpose(void **state)
{
    (void)state;
    support_use_cpu(NULL);
    assert_true(support_each_backend(MLA_OP_CONVERT, NULL, transpose_on, NULL) >= 1);
}

/* ---- P as the bf16 GEMMs' A operand (transpose_pairs_bf16) ------------------------ */

/* Random bits, with ties, denormals, infinities, NaNs and -0 among them. */
static float awkward_float(void)
{
    static const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x00000001u, 0x807fffffu,
                                       0x7f800000u, 0xff800000u, 0x7fc00001u, 0xff800001u,
                                       0x80000000u, 0x7f7fffffu};
    uint32_t u = (uint32_t)support_random();
    if (u % 4 == 0)
        u = special[(u >> 8) % (sizeof special / sizeof special[0])];
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* n source rows of m floats (lds apart) into m rows of pairs (ld apart):
 * shapes straddle the 16-row and 16-pair blocks and odd n, and every word
 * beyond the pairs or rows (guards) must stay. */
static void transpose_pairs_on(const mla_backend_desc *b, void *ctx)
{
    (void)ctx;
    enum { M = 130, N = 257, PAD = 3, GUARD = 0x5eadbeef };
    static const int64_t ms[] = {0, 1, 3, 15, 16, 17, 33, 128, M};
    static const int64_t ns[] = {0, 1, 2, 3, 31, 32, 33, 64, 256, N};
    const int64_t lds = M + 5;
    float *src = malloc((size_t)(N * lds) * sizeof *src);
    uint32_t *dst = malloc((size_t)((M + 2) * ((N + 1) / 2 + PAD)) * sizeof *dst);
    assert_non_null(src);
    assert_non_null(dst);
    for (int64_t i = 0; i < N * lds; i++)
        src[i] = awkward_float();
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            const int64_t m = ms[mi], n = ns[ni], pairs = (n + 1) / 2, ld = pairs + PAD;
            const int64_t len = (m + 2) * ld;
            for (int64_t i = 0; i < len; i++)
                dst[i] = GUARD;
            b->kernels.transpose_pairs_bf16(dst + ld, ld, src + 1, lds, m, n);
            for (int64_t i = 0; i < len; i++) {
                int64_t r = i / ld - 1, p = i % ld;
                uint32_t want = GUARD;
                if (r >= 0 && r < m && p < pairs) {
                    want = oracle_narrow16(&ORACLE_BF16, src[1 + 2 * p * lds + r]);
                    if (2 * p + 1 < n)
                        want |= (uint32_t)oracle_narrow16(&ORACLE_BF16, src[1 + (2 * p + 1) * lds + r]) << 16;
                }
                if (dst[i] != want)
                    fail_msg("%s transpose_pairs_bf16 m=%lld n=%lld: pair %lld of row %lld = 0x%08x, want 0x%08x",
                             b->name, (long long)m, (long long)n, (long long)p, (long long)r, dst[i],
                             want);
            }
        }
    }
    free(src);
    free(dst);
}

static void test_transpose_pairs(void **state)
{
    (void)state;
    support_use_cpu(NULL);
    assert_true(support_each_backend(MLA_OP_CONVERT, NULL, transpose_pairs_on, NULL) >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_all_small_shapes),
        cmocka_unit_test(test_byte_misaligned),
        cmocka_unit_test(test_long_k),
        cmocka_unit_test(test_hot_shapes),
        cmocka_unit_test(test_transpose),
        cmocka_unit_test(test_transpose_pairs),
    };
    return cmocka_run_group_tests_name("gemm", tests, NULL, NULL);
}
