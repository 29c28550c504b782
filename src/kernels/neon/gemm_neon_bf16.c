/* AArch64 BF16 (FEAT_BF16) GEMM micro-kernel: C = bf16 A times pair-packed
 * bf16 B, one BFDOT per k pair and 4 columns of C (see
 * mla_gemm_bf16dot__ref_bfdot for the arithmetic, which this reproduces bit
 * for bit whatever the tiling: each element of C is one chain of BFDOTs in
 * k order).
 *
 * BFDOT by element multiplies a B vector (4 column pairs of one k pair) by
 * one 32-bit A pair picked from a vector register, so A pairs are loaded 4 to
 * a vector, in one of two ways:
 *   - lanes are rows: the pairs of 4 adjacent rows at one k pair, when rows
 *     are adjacent (rs_a = 1: P in the decode's P.V). A tile of 8 rows x 3
 *     vectors takes 24 accumulators + 3 B + 2 A = 29 of the 32 registers.
 *   - lanes are k pairs: 4 consecutive pairs of one row (cs_a = 1: the cache
 *     rows of the scores; other strides gather), used for 4 steps. A tile of
 *     5 rows x 4 vectors takes 20 accumulators + 4 B + 5 A = 29.
 * Both keep 20+ independent chains in flight over the 4-cycle latency. The
 * last n % 4 columns go to the ref twin. */
#include "kernels/kernels.h"
#include "row_tiles.h"

#include <arm_neon.h>
#include <stdbool.h>
#include <string.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum { MR_ROWS = 8, NV_ROWS = 3, MR_PAIRS = 5, NV_PAIRS = 4 };

/* A call's operands, offset to a tile's first row and column by tile(). */
typedef struct operands {
    int64_t pairs; /* k / 2 */
    const uint16_t *a;
    int64_t rs_a, cs_a; /* in pairs */
    const uint16_t *b;
    int64_t ldb;
    float *c;
    int64_t ldc;
    const float *c_scale;
} operands;

/* n (1..4) 32-bit pairs from p, p + 2*stride, ... into lanes 0..n-1 (the
 * rest 0); one load when they are adjacent. */
static ALWAYS_INLINE bfloat16x8_t load_pairs(const uint16_t *p, int64_t stride, int n)
{
    if (n == 4 && stride == 1)
        return vreinterpretq_bf16_u16(vld1q_u16(p));
    uint32_t w[4] = {0, 0, 0, 0};
    for (int l = 0; l < n; l++)
        memcpy(&w[l], p + 2 * l * stride, sizeof w[l]);
    return vreinterpretq_bf16_u32(vld1q_u32(w));
}

static ALWAYS_INLINE bfloat16x8_t load_b(const operands *o, int64_t q, int64_t j, int v)
{
    return vreinterpretq_bf16_u16(vld1q_u16(o->b + q * o->ldb + 2 * j + 8 * v));
}

/* Rows i .. i+rows-1, columns j .. j+4*nv-1 of C. Always inlined with
 * constant lanes_rows, rows and nv, so the loops unroll, the BFDOT lanes are
 * constants and acc lives in registers. */
static ALWAYS_INLINE void tile(const operands *o, bool lanes_rows, int rows, int nv, int64_t i, int64_t j)
{
    const uint16_t *a = o->a + 2 * i * o->rs_a;
    float *c = o->c + i * o->ldc + j;
    float32x4_t acc[MR_ROWS][NV_PAIRS];
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            acc[r][v] = o->c_scale ? vmulq_n_f32(vld1q_f32(c + r * o->ldc + 4 * v), o->c_scale[i + r])
                                   : vdupq_n_f32(0.0f);
    if (lanes_rows) {
        for (int64_t q = 0; q < o->pairs; q++) {
            bfloat16x8_t bv[NV_PAIRS], av[MR_ROWS / 4];
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++)
                bv[v] = load_b(o, q, j, v);
#pragma GCC unroll 2
            for (int g = 0; 4 * g < rows; g++)
                av[g] = load_pairs(a + 2 * (4 * g * o->rs_a + q * o->cs_a), o->rs_a,
                                   rows - 4 * g < 4 ? rows - 4 * g : 4);
#pragma GCC unroll 8
            for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
                for (int v = 0; v < nv; v++)
                    acc[r][v] = vbfdotq_laneq_f32(acc[r][v], bv[v], av[r / 4], r % 4);
        }
    } else {
        for (int64_t q = 0; q < o->pairs; q += 4) {
            const int n = o->pairs - q < 4 ? (int)(o->pairs - q) : 4;
            bfloat16x8_t av[MR_ROWS]; /* MLA_NEON_ROW_TILES instantiates row counts up to 7 */
#pragma GCC unroll 8
            for (int r = 0; r < rows; r++)
                av[r] = load_pairs(a + 2 * (r * o->rs_a + q * o->cs_a), o->cs_a, n);
#pragma GCC unroll 4
            for (int l = 0; l < 4; l++) {
                if (l == n)
                    break;
                bfloat16x8_t bv[NV_PAIRS];
#pragma GCC unroll 4
                for (int v = 0; v < nv; v++)
                    bv[v] = load_b(o, q + l, j, v);
#pragma GCC unroll 8
                for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
                    for (int v = 0; v < nv; v++)
                        acc[r][v] = vbfdotq_laneq_f32(acc[r][v], bv[v], av[r], l);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            vst1q_f32(c + r * o->ldc + 4 * v, acc[r][v]);
}

/* Columns j .. j+4*nv-1 of all m rows: one copy of the tile per row count. */
static ALWAYS_INLINE void column_tile(const operands *o, bool lanes_rows, int nv, int64_t m, int64_t j)
{
#define TILE(rows, i) tile(o, lanes_rows, rows, nv, i, j)
    MLA_NEON_ROW_TILES(m, lanes_rows ? MR_ROWS : MR_PAIRS, TILE);
#undef TILE
}

/* Columns 0 .. n4-1, n4 a multiple of 4. */
static ALWAYS_INLINE void gemm(const operands *o, bool lanes_rows, int64_t m, int64_t n4)
{
    const int nv = lanes_rows ? NV_ROWS : NV_PAIRS;
    int64_t j = 0;
    for (; j + 4 * nv <= n4; j += 4 * nv)
        column_tile(o, lanes_rows, nv, m, j);
    for (; j < n4; j += 4)
        column_tile(o, lanes_rows, 1, m, j);
}

void mla_gemm_bf16dot__neon_bf16(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t rs_a,
                                int64_t cs_a, const uint16_t *b, int64_t ldb, float *c, int64_t ldc,
                                const float *c_scale)
{
    const operands o = {k / 2, a, rs_a, cs_a, b, ldb, c, ldc, c_scale};
    const int64_t n4 = n & ~(int64_t)3;
    if (rs_a == 1)
        gemm(&o, true, m, n4);
    else
        gemm(&o, false, m, n4);
    mla_gemm_bf16dot__ref_bfdot(m, n - n4, k, a, rs_a, cs_a, b + 2 * n4, ldb, c + n4, ldc, c_scale);
}
