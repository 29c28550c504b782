/* AArch64 FHM (FEAT_FHM) GEMM micro-kernel: C = f16 A times f16 B in f32,
 * with FMLAL / FMLAL2, which widen f16 operands and multiply-add into f32
 * lanes with one rounding: f16 products are exact in f32, so each element is
 * the FMA chain of mla_gemm_f32_fn on the widened operands, bit for bit
 * (mla_gemm_f16f16__ref), whatever the tiling. Both operands are read as
 * stored: no widening pass, and half the bytes through the caches.
 *
 * One B load holds 8 columns of a row of B; FMLAL multiplies its low 4 and
 * FMLAL2 its high 4 by one f16 of A picked from a vector register, so A
 * values are loaded 8 to a vector, in one of two ways:
 *   - lanes are rows: 8 adjacent rows at one k, when rows are adjacent
 *     (rs_a = 1: P in the decode's P.V). A tile of 8 rows x 8 columns takes
 *     16 accumulators + 1 B + 1 A.
 *   - lanes are k: 8 consecutive k of one row (cs_a = 1: the cache rows of
 *     the scores; other strides gather), used for 8 steps. A tile of 5 rows
 *     x 16 columns takes 20 accumulators + 2 B + 5 A.
 * The last n % 8 columns go to the ref twin. */
#include "kernels/kernels.h"
#include "row_tiles.h"

#include <arm_neon.h>
#include <stdbool.h>
#include <string.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum { MR_ROWS = 8, NV_ROWS = 1, MR_K = 5, NV_K = 2 };

/* A call's operands. */
typedef struct operands {
    int64_t k;
    const uint16_t *a;
    int64_t rs_a, cs_a;
    const uint16_t *b;
    int64_t ldb;
    float *c;
    int64_t ldc;
    const float *c_scale;
} operands;

/* n (1..8) f16 values from p, p + stride, ... into lanes 0..n-1 (the rest
 * 0); one load when they are adjacent. */
static ALWAYS_INLINE float16x8_t load_halves(const uint16_t *p, int64_t stride, int n)
{
    if (n == 8 && stride == 1)
        return vreinterpretq_f16_u16(vld1q_u16(p));
    uint16_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int l = 0; l < n; l++)
        h[l] = p[l * stride];
    return vreinterpretq_f16_u16(vld1q_u16(h));
}

static ALWAYS_INLINE float16x8_t load_b(const operands *o, int64_t p, int64_t j, int v)
{
    return vreinterpretq_f16_u16(vld1q_u16(o->b + p * o->ldb + j + 8 * v));
}

/* Rows i .. i+rows-1, columns j .. j+8*nv-1 of C; lo and hi hold the low
 * and high 4 columns of each B vector. Always inlined with constant
 * lanes_rows, rows and nv, so the loops unroll, the FMLAL lanes are
 * constants and the accumulators live in registers. */
static ALWAYS_INLINE void tile(const operands *o, bool lanes_rows, int rows, int nv, int64_t i, int64_t j)
{
    const uint16_t *a = o->a + i * o->rs_a;
    float *c = o->c + i * o->ldc + j;
    float32x4_t lo[MR_ROWS][NV_K], hi[MR_ROWS][NV_K];
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) {
            float *cv = c + r * o->ldc + 8 * v;
            lo[r][v] = o->c_scale ? vmulq_n_f32(vld1q_f32(cv), o->c_scale[i + r]) : vdupq_n_f32(0.0f);
            hi[r][v] = o->c_scale ? vmulq_n_f32(vld1q_f32(cv + 4), o->c_scale[i + r]) : vdupq_n_f32(0.0f);
        }
    if (lanes_rows) {
        for (int64_t p = 0; p < o->k; p++) {
            float16x8_t bv[NV_K];
#pragma GCC unroll 2
            for (int v = 0; v < nv; v++)
                bv[v] = load_b(o, p, j, v);
            const float16x8_t av = load_halves(a + p * o->cs_a, o->rs_a, rows);
#pragma GCC unroll 8
            for (int r = 0; r < rows; r++)
#pragma GCC unroll 2
                for (int v = 0; v < nv; v++) {
                    lo[r][v] = vfmlalq_laneq_low_f16(lo[r][v], bv[v], av, r);
                    hi[r][v] = vfmlalq_laneq_high_f16(hi[r][v], bv[v], av, r);
                }
        }
    } else {
        for (int64_t p = 0; p < o->k; p += 8) {
            const int n = o->k - p < 8 ? (int)(o->k - p) : 8;
            float16x8_t av[MR_ROWS]; /* MLA_NEON_ROW_TILES instantiates row counts up to 7 */
#pragma GCC unroll 8
            for (int r = 0; r < rows; r++)
                av[r] = load_halves(a + r * o->rs_a + p * o->cs_a, o->cs_a, n);
#pragma GCC unroll 8
            for (int l = 0; l < 8; l++) {
                if (l == n)
                    break;
                float16x8_t bv[NV_K];
#pragma GCC unroll 2
                for (int v = 0; v < nv; v++)
                    bv[v] = load_b(o, p + l, j, v);
#pragma GCC unroll 8
                for (int r = 0; r < rows; r++)
#pragma GCC unroll 2
                    for (int v = 0; v < nv; v++) {
                        lo[r][v] = vfmlalq_laneq_low_f16(lo[r][v], bv[v], av[r], l);
                        hi[r][v] = vfmlalq_laneq_high_f16(hi[r][v], bv[v], av[r], l);
                    }
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) {
            vst1q_f32(c + r * o->ldc + 8 * v, lo[r][v]);
            vst1q_f32(c + r * o->ldc + 8 * v + 4, hi[r][v]);
        }
}

/* Columns j .. j+8*nv-1 of all m rows: one copy of the tile per row count. */
static ALWAYS_INLINE void column_tile(const operands *o, bool lanes_rows, int nv, int64_t m, int64_t j)
{
#define TILE(rows, i) tile(o, lanes_rows, rows, nv, i, j)
    MLA_NEON_ROW_TILES(m, lanes_rows ? MR_ROWS : MR_K, TILE);
#undef TILE
}

/* Columns 0 .. n8-1, n8 a multiple of 8. */
static ALWAYS_INLINE void gemm(const operands *o, bool lanes_rows, int64_t m, int64_t n8)
{
    const int nv = lanes_rows ? NV_ROWS : NV_K;
    int64_t j = 0;
    for (; j + 8 * nv <= n8; j += 8 * nv)
        column_tile(o, lanes_rows, nv, m, j);
    for (; j < n8; j += 8)
        column_tile(o, lanes_rows, 1, m, j);
}

void mla_gemm_f16f16__neon_fhm(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t rs_a,
                               int64_t cs_a, const uint16_t *b, int64_t ldb, float *c, int64_t ldc,
                               const float *c_scale)
{
    const operands o = {k, a, rs_a, cs_a, b, ldb, c, ldc, c_scale};
    const int64_t n8 = n & ~(int64_t)7;
    if (rs_a == 1)
        gemm(&o, true, m, n8);
    else
        gemm(&o, false, m, n8);
    mla_gemm_f16f16__ref(m, n - n8, k, a, rs_a, cs_a, b + n8, ldb, c + n8, ldc, c_scale);
}
