#include "attention_route.h"

#include "core/dtype.h"
#include "core/policy.h"
#include "core/size.h"
#include "elementwise.h"
#include "kernels/kernels.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- f32 ------------------------------------------------------------------ */

/* Qt[d][r] = scale * q[r][d] in f32: the rows widened and scaled in stage,
 * then transposed into Qt's columns. */
static void pack_q_f32(const mla_attn_route *route, const mla_kernels *k, void *qt, int64_t ld,
                       const mla_attn_qblock *q, float scale, float *stage)
{
    (void)route;
    const int64_t d = q->l + q->rope;
    const void *rows[MLA_ATTN_PACK_ROWS];
    for (int64_t r = 0; r < q->nr; r++) {
        float *row = stage + r * d;
        mla_convert_run(k, row, MLA_DTYPE_F32, q->nope[r], q->dtype, q->l, 1.0f);
        if (q->rope > 0)
            mla_convert_run(k, row + q->l, MLA_DTYPE_F32, q->pe[r], q->dtype, q->rope, 1.0f);
        for (int64_t e = 0; e < d; e++)
            row[e] *= scale;
        rows[r] = row;
    }
    k->transpose_u32((uint32_t *)qt + q->r0, ld, rows, q->nr, d);
}

static void scores_f32(const mla_kernels *k, int64_t n, int64_t ld, int64_t d, const void *keys,
                       int64_t stride, const void *qt, float *s, const float *c_scale)
{
    k->gemm_f32(n, ld, d, keys, stride, 1, qt, ld, s, ld, c_scale);
}

static void values_f32(const mla_kernels *k, const mla_attn_values *v)
{
    for (int64_t q = 0; q < v->nruns; q++)
        k->gemm_f32(v->ld, v->width, v->runs[q].count, v->s + v->runs[q].first * v->ld, 1, v->ld,
                    v->runs[q].rows, v->stride, v->o, v->ldo, q == 0 ? v->alpha : v->ones);
}

/* ---- half precision: q packed raw ------------------------------------------ */

/* Query rows as raw 16-bit values, the route's `pair` consecutive d per
 * row of Qt: element d of row r at qt[(d / pair) * pair * ld + pair * r +
 * d % pair] (f16, pair 1: Qt[d][r]; the bf16 routes, pair 2: bf16 pairs
 * along d, the transposition of the rows' 32-bit words); f32 q on a
 * converting route is rounded first, in stage. The scale is applied to the
 * scores instead. */
static void pack_q_raw(const mla_attn_route *route, const mla_kernels *k, void *qt, int64_t ld,
                       const mla_attn_qblock *q, float scale, float *stage)
{
    (void)scale;
    const int64_t pair = route->pair, l = q->l, rope = q->rope, d = l + rope;
    mla_attn_qblock rounded;
    if (q->dtype != route->dtype) { /* f32 q on a converting route: rounded */
        uint16_t *half = (uint16_t *)stage;
        rounded = (mla_attn_qblock){.r0 = q->r0, .nr = q->nr, .l = l, .rope = rope,
                                    .dtype = route->dtype};
        for (int64_t r = 0; r < q->nr; r++) {
            mla_convert_run(k, half + r * d, route->dtype, q->nope[r], q->dtype, l, 1.0f);
            if (rope > 0)
                mla_convert_run(k, half + r * d + l, route->dtype, q->pe[r], q->dtype, rope, 1.0f);
            rounded.nope[r] = half + r * d;
            rounded.pe[r] = half + r * d + l;
        }
        q = &rounded;
    }
    if (pair == 2 && l % 2 == 0) { /* each pair lies in one array: whole words */
        k->transpose_u32((uint32_t *)qt + q->r0, ld, q->nope, q->nr, l / 2);
        if (rope > 0)
            k->transpose_u32((uint32_t *)qt + l / 2 * ld + q->r0, ld, q->pe, q->nr, rope / 2);
        return;
    }
    uint16_t *out = qt;
    for (int64_t r = 0; r < q->nr; r++) {
        /* the caller's rows may start at any byte (mla.h) */
        const char *nope = q->nope[r], *pe = q->pe[r];
        for (int64_t e = 0; e < d; e++)
            out[(e / pair) * pair * ld + pair * (q->r0 + r) + e % pair] =
                mla_load_u16(e < l ? nope + 2 * e : pe + 2 * (e - l));
    }
}

/* ---- bf16 pairs: vdpbf16ps / BFDOT, and AMX tiles -------------------------------- */

/* The two bf16-pair routes share their layouts and differ in the GEMM: the
 * bf16 dot slot (one instruction per pair) or the tile slot (TDPBF16PS). */
static void scores_pairs(mla_gemm_bf16dot_fn *gemm, int64_t n, int64_t ld, int64_t d,
                         const void *keys, int64_t stride, const void *qt, float *s,
                         const float *c_scale)
{
    gemm(n, ld, d, keys, stride / 2, 1, qt, 2 * ld, s, ld, c_scale);
}

/* Scratch: P packed (ld rows of up to MLA_ATTN_TILE / 2 pairs, or the f16
 * route's P in f16), then V packed (MLA_ATTN_TILE / 2 pair rows). */
static int64_t p_region_floats(int64_t ld)
{
    return mla_round_up(MLA_ATTN_TILE * ld / 2, MLA_ALIGN / (int64_t)sizeof(float));
}

/* 16-bit values between V's pair rows (2 * width each): unaliased, as
 * decode H=16 B=32 on AMX tiles ran 6 % faster than with the rows 2 KB
 * apart (bench/RESULTS.md, run 69). */
static int64_t pair_row_halves(int64_t width)
{
    return mla_unaliased_row(2 * width, sizeof(uint16_t));
}

/* P (rounded to bf16) as A, ld rows of pairs along the tile's keys, and V
 * as B, pairs of rows along them, in one pass each; zero pairs complete
 * the depth to a multiple of `step` pairs (tiles load 16 pairs at a time,
 * and a zero pair adds nothing to the GEMM's sums). */
static void values_pairs(mla_gemm_bf16dot_fn *gemm, int64_t step, const mla_kernels *k,
                         const mla_attn_values *v)
{
    uint32_t *pa = (uint32_t *)v->scratch;
    uint16_t *vp = (uint16_t *)(v->scratch + p_region_floats(v->ld));
    const int64_t pairs = (v->n + 1) / 2, depth = mla_round_up(pairs, step);
    k->transpose_pairs_bf16(pa, depth, v->s, v->ld, v->ld, v->n);
    for (int64_t r = 0; depth > pairs && r < v->ld; r++)
        memset(pa + r * depth + pairs, 0, (size_t)(depth - pairs) * sizeof *pa);
    const uint16_t *rows[MLA_ATTN_TILE];
    for (int64_t q = 0; q < v->nruns; q++)
        for (int64_t j = 0; j < v->runs[q].count; j++)
            rows[v->runs[q].first + j] = (const uint16_t *)v->runs[q].rows + j * v->stride;
    const int64_t ldv = pair_row_halves(v->width);
    for (int64_t j = 0; j < v->n; j += 2)
        k->interleave_u16(vp + j / 2 * ldv, rows[j], j + 1 < v->n ? rows[j + 1] : NULL, v->width);
    for (int64_t p = pairs; p < depth; p++)
        memset(vp + p * ldv, 0, (size_t)(2 * v->width) * sizeof *vp);
    gemm(v->ld, v->width, 2 * depth, (const uint16_t *)pa, depth, 1, vp, ldv, v->o, v->ldo,
         v->alpha);
}

static void scores_bf16dot(const mla_kernels *k, int64_t n, int64_t ld, int64_t d, const void *keys,
                           int64_t stride, const void *qt, float *s, const float *c_scale)
{
    scores_pairs(k->gemm_bf16dot, n, ld, d, keys, stride, qt, s, c_scale);
}

static void values_bf16dot(const mla_kernels *k, const mla_attn_values *v)
{
    values_pairs(k->gemm_bf16dot, 1, k, v);
}

static void scores_bf16tile(const mla_kernels *k, int64_t n, int64_t ld, int64_t d,
                            const void *keys, int64_t stride, const void *qt, float *s,
                            const float *c_scale)
{
    scores_pairs(k->gemm_bf16tile, n, ld, d, keys, stride, qt, s, c_scale);
}

/* A whole 16-pair steps deep, so that tiles load P in place. */
static void values_bf16tile(const mla_kernels *k, const mla_attn_values *v)
{
    values_pairs(k->gemm_bf16tile, 16, k, v);
}

/* ---- f16 ------------------------------------------------------------------ */

static void scores_f16(const mla_kernels *k, int64_t n, int64_t ld, int64_t d, const void *keys,
                       int64_t stride, const void *qt, float *s, const float *c_scale)
{
    k->gemm_f16f16(n, ld, d, keys, stride, 1, qt, ld, s, ld, c_scale);
}

/* P rounded to f16; V read in place. */
static void values_f16(const mla_kernels *k, const mla_attn_values *v)
{
    uint16_t *p16 = (uint16_t *)v->scratch;
    k->cvt_f32_f16(v->s, p16, v->n * v->ld);
    for (int64_t q = 0; q < v->nruns; q++)
        k->gemm_f16f16(v->ld, v->width, v->runs[q].count, p16 + v->runs[q].first * v->ld, 1, v->ld,
                       v->runs[q].rows, v->stride, v->o, v->ldo, q == 0 ? v->alpha : v->ones);
}

/* ---- the table ---------------------------------------------------------------- */

static const mla_attn_route route_f32 = {
    /* 128 keys: at 64 the avx512 kernel's P.V ran at ~86% of peak, at 128
     * ~93%; 256 was 4% slower (its S no longer fits L1) */
    .name = "f32", .dtype = MLA_DTYPE_F32, .convert_rows = MLA_ATTN_WIDEN_ROWS, .tile = 128,
    .pair = 1, .q_elem = sizeof(float), .q_scaled = true, .prefetch_keys = true,
    .kernel = offsetof(mla_kernels, gemm_f32),
    .pack_q = pack_q_f32, .scores = scores_f32, .values = values_f32,
};

/* Half-precision routes, in the order a backend's kernels are looked at. */
static const mla_attn_route half_routes[] = {
    {
        /* 256 keys: P.V's C rescale through staging is ~30% of a 128-key
         * call; 256-key tiles ran decode 5-7% faster */
        .name = "amx-bf16", .dtype = MLA_DTYPE_BF16, .converts = true, .tile = 256, .pair = 2,
        .q_elem = sizeof(uint16_t),
        .kernel = offsetof(mla_kernels, gemm_bf16tile),
        .pack_q = pack_q_raw, .scores = scores_bf16tile, .values = values_bf16tile,
    },
    {
        .name = "bf16-dot", .dtype = MLA_DTYPE_BF16, .tile = 128, .pair = 2,
        .q_elem = sizeof(uint16_t), .prefetch_keys = true,
        .kernel = offsetof(mla_kernels, gemm_bf16dot),
        .pack_q = pack_q_raw, .scores = scores_bf16dot, .values = values_bf16dot,
    },
    {
        .name = "f16", .dtype = MLA_DTYPE_F16, .tile = 128, .pair = 1,
        .q_elem = sizeof(uint16_t), .prefetch_keys = true,
        .kernel = offsetof(mla_kernels, gemm_f16f16),
        .pack_q = pack_q_raw, .scores = scores_f16, .values = values_f16,
    },
};

#define HALF_ROUTES ((int)(sizeof half_routes / sizeof half_routes[0]))

bool mla_attn_route_available(const mla_kernels *k, const mla_attn_route *route)
{
    return mla_kernel_get(k, &(mla_kernel_slot){.offset = route->kernel}) != NULL;
}

const mla_attn_route *mla_attn_route_for(const mla_kernels *k, mla_dtype q_dtype,
                                         mla_dtype key_dtype, int64_t width, int64_t stride,
                                         bool bf16_compute)
{
    const bool opted_in = mla_attn_opted_in(q_dtype, bf16_compute);
    for (int i = 0; i < HALF_ROUTES; i++) {
        const mla_attn_route *r = &half_routes[i];
        bool query = q_dtype == r->dtype || (r->converts && opted_in);
        bool keys = key_dtype == r->dtype ||
                    (r->converts && (mla_dtype_is_fp8(key_dtype) || opted_in));
        if (mla_attn_route_available(k, r) && query && keys &&
            width % r->pair == 0 && stride % r->pair == 0)
            return r;
    }
    return &route_f32;
}

_Static_assert(HALF_ROUTES == MLA_ATTN_HALF_ROUTES, "MLA_ATTN_HALF_ROUTES counts half_routes[]");

const mla_attn_route *mla_attn_half_routes(int *count)
{
    *count = HALF_ROUTES;
    return half_routes;
}

int64_t mla_attn_route_scratch_floats(int64_t ld, int64_t width)
{
    /* the pair routes' needs cover f16's (P alone) and f32's (none) */
    return p_region_floats(ld) + mla_round_up(MLA_ATTN_TILE / 2 * pair_row_halves(width) / 2,
                                              MLA_ALIGN / (int64_t)sizeof(float));
}

/* ---- init-time timing ------------------------------------------------------------ */

/* vdpbf16ps runs at twice the f32 FMA's FLOP rate on Zen 4 but at about half
 * of it on Sapphire Rapids, and BFDOT and FMLAL against FMLA vary among Arm
 * cores too, so which route is faster is a property of the CPU, timed once
 * per backend on the decode scores shape. */
enum { PROBE_M = 64, PROBE_N = 128, PROBE_K = 576, PROBE_REPS = 5 };

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mla_attn_route_probe_values(const mla_attn_route *route, uint16_t *x, int64_t n)
{
    const bool bf16 = route->dtype == MLA_DTYPE_BF16;
    for (int64_t i = 0; i < n; i++)
        x[i] = (uint16_t)((bf16 ? 0x3f80u : 0x3c00u) + (unsigned)(i % 97) * (bf16 ? 1u : 8u));
}

double mla_attn_route_race(const mla_kernels *k, const mla_attn_route *route, int reps,
                           mla_attn_route_probe_fn *run, void *ctx)
{
    double best_f32 = 1e30, best_half = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        run(k, &route_f32, ctx);
        double t1 = now();
        run(k, route, ctx);
        double t2 = now();
        best_f32 = t1 - t0 < best_f32 ? t1 - t0 : best_f32;
        best_half = t2 - t1 < best_half ? t2 - t1 : best_half;
    }
    return best_f32 / best_half;
}

/* The scores shape's operands: f32 for the f32 route, halves for the other. */
typedef struct scores_probe {
    const float *a, *b;
    const uint16_t *a16, *b16;
    float *c;
} scores_probe;

static void run_scores(const mla_kernels *k, const mla_attn_route *route, void *ctx)
{
    const scores_probe *p = ctx;
    const bool f32 = route->dtype == MLA_DTYPE_F32;
    route->scores(k, PROBE_M, PROBE_N, PROBE_K, f32 ? (const void *)p->a : p->a16, PROBE_K,
                  f32 ? (const void *)p->b : p->b16, p->c, NULL);
}

double mla_attn_route_speedup(const mla_kernels *k, const mla_attn_route *route)
{
    enum { A = PROBE_M * PROBE_K, B = PROBE_N * PROBE_K, C = PROBE_M * PROBE_N };
    float *a = calloc(A + B + C, sizeof(float));
    uint16_t *a16 = calloc(A + B, sizeof(uint16_t));
    if (!a || !a16) {
        free(a);
        free(a16);
        return 0.0; /* unknown: keep the f32 route */
    }
    mla_attn_route_probe_values(route, a16, A + B);
    for (int i = 0; i < A + B; i++) /* the same 1 .. 1.76 */
        a[i] = 1.0f + (float)(i % 97) / 128.0f;
    scores_probe p = {.a = a, .b = a + A, .a16 = a16, .b16 = a16 + A, .c = a + A + B};
    double speedup = mla_attn_route_race(k, route, PROBE_REPS, run_scores, &p);
    free(a);
    free(a16);
    return speedup;
}
