/* AVX512_BF16 GEMM micro-kernel: C = bf16 A times pair-packed bf16 B, one
 * vdpbf16ps per k pair (see mla_gemm_bf16dot__ref for the exact arithmetic,
 * which this reproduces bit for bit whatever the tiling).
 *
 * A register tile is MR rows x NV vectors of 16 columns of C. Each k pair
 * loads NV vectors of B (16 column pairs each), broadcasts the MR A pairs
 * (32 bits each) and issues MR * NV vdpbf16ps. Each element of C is one
 * chain of dependent vdpbf16ps, so only independent tiles hide the latency:
 * 8 x 3 keeps 24 chains in flight at full width and still 8 when n is 16
 * (the narrowest scores tile), and 8 divides the m of the hot calls. Zen 4
 * issues one vdpbf16ps a cycle, which this reaches on both hot shapes. */
#include "kernels/kernels.h"

#include "util.h"

#include <string.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* The tile loops must unroll fully so the accumulators live in registers.
 * GCC does that only when told. Clang does it by itself once inlining makes
 * the counts constant; told, it unrolls them before inlining instead (by 8,
 * with a remainder loop), which leaves the whole tile in memory at a third
 * of the speed. */
#if defined(__clang__)
#define UNROLL
#else
#define UNROLL _Pragma("GCC unroll 8")
#endif

enum {
    MR = 8,
    NV = 3,
    NR = NV * 16,
};

/* One tile's operands, already offset to row i0 and column j0. */
typedef struct tile_args {
    const uint16_t *a;
    int64_t rs_a, cs_a; /* in pairs */
    const uint16_t *b;
    int64_t ldb;
    float *c;
    int64_t ldc;
    const float *c_scale; /* NULL: start from 0 (C is not read) */
    int64_t pairs;        /* k / 2 */
    __mmask16 mask;       /* lanes of the last vector that lie inside n */
} tile_args;

/* rows x nv tile. Always inlined with constant rows and nv, so the loops
 * unroll and the accumulators live in registers. The fields are copied out
 * first: the intrinsic stores may alias *t, which would reload them. */
static ALWAYS_INLINE void tile(const tile_args *t, int rows, int nv)
{
    const uint16_t *a = t->a, *b = t->b;
    const int64_t rs_a = t->rs_a, cs_a = t->cs_a, ldb = t->ldb, ldc = t->ldc, pairs = t->pairs;
    float *c = t->c;
    const float *c_scale = t->c_scale;
    const __mmask16 tail = t->mask;
    __m512 acc[MR][NV];
    UNROLL
    for (int r = 0; r < rows; r++) {
        UNROLL
        for (int v = 0; v < nv; v++) {
            __mmask16 mask = v == nv - 1 ? tail : (__mmask16)0xffff;
            if (c_scale) /* a rounded multiply of its own, as in ref */
                acc[r][v] = _mm512_mul_ps(_mm512_set1_ps(c_scale[r]),
                                          _mm512_maskz_loadu_ps(mask, c + r * ldc + v * 16));
            else
                acc[r][v] = _mm512_setzero_ps();
        }
    }
    for (int64_t q = 0; q < pairs; q++) {
        __m512i bv[NV];
        UNROLL
        for (int v = 0; v < nv; v++)
            bv[v] = v == nv - 1 ? _mm512_maskz_loadu_epi32(tail, b + v * 32) : _mm512_loadu_si512(b + v * 32);
        UNROLL
        for (int r = 0; r < rows; r++) {
            int32_t pair; /* memcpy: a may be only 2-byte aligned */
            memcpy(&pair, a + 2 * r * rs_a, sizeof pair);
            __m512bh ar = (__m512bh)_mm512_set1_epi32(pair);
            /* B is src1, A src2: the order the ref's NaN priority assumes */
            UNROLL
            for (int v = 0; v < nv; v++)
                acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)bv[v], ar);
        }
        a += 2 * cs_a;
        b += ldb;
    }
    UNROLL
    for (int r = 0; r < rows; r++) {
        UNROLL
        for (int v = 0; v < nv; v++)
            _mm512_mask_storeu_ps(c + r * ldc + v * 16, v == nv - 1 ? tail : (__mmask16)0xffff, acc[r][v]);
    }
}

static ALWAYS_INLINE void tile_rows(const tile_args *t, int rows, int nv)
{
    switch (rows) {
    case 1: tile(t, 1, nv); break;
    case 2: tile(t, 2, nv); break;
    case 3: tile(t, 3, nv); break;
    case 4: tile(t, 4, nv); break;
    case 5: tile(t, 5, nv); break;
    case 6: tile(t, 6, nv); break;
    case 7: tile(t, 7, nv); break;
    default: tile(t, MR, nv); break;
    }
}

/* One copy of the tile per (rows, nv): rows < MR and nv < NV are the edges. */
static void tile_any(const tile_args *t, int rows, int nv)
{
    switch (nv) {
    case 1: tile_rows(t, rows, 1); break;
    case 2: tile_rows(t, rows, 2); break;
    default: tile_rows(t, rows, NV); break;
    }
}

void mla_gemm_bf16dot__avx512_bf16(int64_t m, int64_t n, int64_t k, const uint16_t *a,
                                  int64_t rs_a, int64_t cs_a, const uint16_t *b, int64_t ldb,
                                  float *c, int64_t ldc, const float *c_scale)
{
    for (int64_t j0 = 0; j0 < n; j0 += NR) {
        int64_t cols = n - j0 < NR ? n - j0 : NR;
        int nv = (int)((cols + 15) / 16);
        tile_args t = {.rs_a = rs_a, .cs_a = cs_a, .b = b + 2 * j0, .ldb = ldb, .ldc = ldc, .pairs = k / 2,
                       .mask = mla_tail_mask16(cols - (nv - 1) * 16)};
        for (int64_t i0 = 0; i0 < m; i0 += MR) {
            t.a = a + 2 * i0 * rs_a;
            t.c = c + i0 * ldc + j0;
            t.c_scale = c_scale ? c_scale + i0 : NULL;
            tile_any(&t, m - i0 < MR ? (int)(m - i0) : MR, nv);
        }
    }
}
