/* AArch64 ASIMD GEMM micro-kernels, bit-exact with the ref kernels: each
 * element of C is one FMLA chain in k order, started from 0 or from
 * c_scale[i] * c (a rounded FMUL of its own), whatever the tiling.
 *
 * A register tile is MR rows x NV vectors of C. Each step p loads NV vectors
 * of B row p and MR scalars of A column p, and multiplies by element (FMLA
 * v.4s, v.4s, v.s[0]: no DUP) into MR * NV accumulators. 5 x 4 takes 20
 * accumulators + 4 B vectors + 5 A scalars = 29 of the 32 vector registers
 * (6 x 4 needs 34, and GCC then spills accumulators in the k loop); its 20
 * chains cover the 4-cycle FMA latency on 4 pipes (Neoverse V1/V2, Apple)
 * with 9 loads per 20 FMAs. Scalar A loads take any strides, so row- and
 * column-major A share one loop. One or two rows alone would leave only 4 or
 * 8 chains, so they get tiles of NV_THIN vectors.
 *
 * Column tiles are the outer loop: a tile's k x 16 panel of B (36 KiB at
 * k = 576) stays in L1 while every row block of A streams past it, so k is
 * not blocked. Rows left over get a shorter tile, vectors left over
 * one-vector tiles, and the last n % 4 columns go to ref. */
#include "kernels/kernels.h"
#include "row_tiles.h"
#include "util.h"

#include <arm_neon.h>
#include <stdbool.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum { MR = 5, NV = 4, NV_THIN = 8 };

/* A call's operands; b holds floats or bf16 codes. */
typedef struct {
    int64_t k;
    const float *a;
    int64_t rs_a, cs_a;
    const void *b;
    int64_t ldb;
    float *c;
    int64_t ldc;
    const float *c_scale;
} operands;

/* 4 B elements from element offset off; bf16 widens exactly (bits << 16). */
static ALWAYS_INLINE float32x4_t load_b(const void *b, bool bf16, int64_t off)
{
    if (bf16)
        return mla_widen_bf16_f32x4(vld1_u16((const uint16_t *)b + off));
    return vld1q_f32((const float *)b + off);
}

/* Rows i .. i+rows-1, columns j .. j+4*nv-1 of C. Always inlined with
 * constant rows, nv and bf16, so the loops unroll and acc lives in
 * registers. */
static ALWAYS_INLINE void tile(const operands *o, bool bf16, int rows, int nv, int64_t i, int64_t j)
{
    const float *a = o->a + i * o->rs_a;
    float *c = o->c + i * o->ldc + j;
    float32x4_t acc[8][NV_THIN]; /* MLA_NEON_ROW_TILES instantiates row counts up to 7 */
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++)
            acc[r][v] = o->c_scale ? vmulq_n_f32(vld1q_f32(c + r * o->ldc + 4 * v), o->c_scale[i + r])
                                   : vdupq_n_f32(0.0f);
    for (int64_t p = 0; p < o->k; p++) {
        float32x4_t bv[NV_THIN];
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++)
            bv[v] = load_b(o->b, bf16, p * o->ldb + j + 4 * v);
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++) {
            const float ar = mla_load_f32(a + r * o->rs_a + p * o->cs_a);
#pragma GCC unroll 8
            for (int v = 0; v < nv; v++)
                acc[r][v] = vfmaq_n_f32(acc[r][v], bv[v], ar);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++)
            vst1q_f32(c + r * o->ldc + 4 * v, acc[r][v]);
}

/* Columns j .. j+4*nv-1 of all m rows: one copy of the tile per row count. */
static ALWAYS_INLINE void column_tile(const operands *o, bool bf16, int nv, int64_t m, int64_t j)
{
#define TILE(rows, i) tile(o, bf16, rows, nv, i, j)
    MLA_NEON_ROW_TILES(m, MR, TILE);
#undef TILE
}

/* Columns 0 .. n4-1, n4 a multiple of 4. */
static ALWAYS_INLINE void gemm(const operands *o, bool bf16, int64_t m, int64_t n4)
{
    int64_t j = 0;
    if (m == 1 || m == 2) /* too few chains in a 4-vector tile */
        for (; j + 4 * NV_THIN <= n4; j += 4 * NV_THIN) {
            if (m == 1)
                tile(o, bf16, 1, NV_THIN, 0, j);
            else
                tile(o, bf16, 2, NV_THIN, 0, j);
        }
    for (; j + 4 * NV <= n4; j += 4 * NV)
        column_tile(o, bf16, NV, m, j);
    for (; j < n4; j += 4)
        column_tile(o, bf16, 1, m, j);
}

void mla_gemm_f32__neon(int64_t m, int64_t n, int64_t k, const float *a, int64_t rs_a, int64_t cs_a,
                        const float *b, int64_t ldb, float *c, int64_t ldc, const float *c_scale)
{
    const operands o = {k, a, rs_a, cs_a, b, ldb, c, ldc, c_scale};
    const int64_t n4 = n & ~(int64_t)3;
    gemm(&o, false, m, n4);
    mla_gemm_f32__ref(m, n - n4, k, a, rs_a, cs_a, b + n4, ldb, c + n4, ldc, c_scale);
}

void mla_gemm_bf16__neon(int64_t m, int64_t n, int64_t k, const float *a, int64_t rs_a, int64_t cs_a,
                         const uint16_t *b, int64_t ldb, float *c, int64_t ldc, const float *c_scale)
{
    const operands o = {k, a, rs_a, cs_a, b, ldb, c, ldc, c_scale};
    const int64_t n4 = n & ~(int64_t)3;
    gemm(&o, true, m, n4);
    mla_gemm_bf16__ref(m, n - n4, k, a, rs_a, cs_a, b + n4, ldb, c + n4, ldc, c_scale);
}
