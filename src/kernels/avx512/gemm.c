/* AVX-512 GEMM micro-kernels, bit-exact with the ref kernels: each element of
 * C is one FMA chain in k order, whatever the tiling (see mla_gemm_f32_fn).
 *
 * A register tile is rows x nv vectors of C. Each step p loads nv vectors of
 * B row p and broadcasts `rows` elements of A column p into rows * nv FMAs.
 * Full tiles are 8 x 3 (48 columns): 24 accumulators, 11 loads per 24 FMAs.
 * Narrower tiles (the last columns, or n < 48) get taller, up to 12 rows, so
 * that they still keep >= 12 accumulators in flight: Sapphire Rapids needs 8
 * (4-cycle FMA latency on 2 ports), and a 6 x 1 tile ran at ~65% of peak.
 * (6 x 4 would fit the 32 registers too, but GCC 12 then keeps its
 * accumulators in memory.) */
#include "kernels/kernels.h"

#include "util.h"

#include <stdbool.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum {
    NV = 3,      /* vectors of 16 columns per tile row, at most */
    ACC = 24,    /* accumulators per tile (of 32 registers), at most */
    MR_MAX = 12, /* tile rows, at most */
    /* k steps per block; later blocks resume from the f32 partial sums stored
     * in C, which is exact. Large on purpose: the B sliver of a tile column
     * (576 x 48 f32 for scores) streams from L2 fast enough on Zen 4 and
     * Sapphire Rapids, while L1-sized blocks (64) cost ~8% and ~10% of the
     * scores GEMM there in storing and reloading the partial sums. */
    KC = 1024,
};

/* Rows of a tile nv vectors wide. */
static inline int tile_height(int nv)
{
    return ACC / nv < MR_MAX ? ACC / nv : MR_MAX;
}

/* One tile's operands, already offset to row i0, column j0, step p0. */
typedef struct tile_args {
    const float *a;
    int64_t rs_a, cs_a;
    const void *b; /* f32 or bf16 */
    int64_t ldb;
    float *c;
    int64_t ldc;
    const float *c_scale; /* NULL: start from 0 (C is not read) */
    bool resume;          /* C holds the partial sums of earlier k blocks */
    int64_t kc;
    __mmask16 mask; /* lanes of the last vector that lie inside n */
} tile_args;

/* Vector v of B row pointer `row`; bf16 widens exactly (bits << 16). */
static ALWAYS_INLINE __m512 load_b(const void *row, int v, bool last, __mmask16 mask, bool bf16)
{
    if (bf16) {
        const uint16_t *h = (const uint16_t *)row + v * 16;
        __m256i x = last ? _mm256_maskz_loadu_epi16(mask, h) : _mm256_loadu_si256((const __m256i *)h);
        return mla_widen_bf16_ps(x);
    }
    const float *f = (const float *)row + v * 16;
    return last ? _mm512_maskz_loadu_ps(mask, f) : _mm512_loadu_ps(f);
}

/* rows x nv tile over t->kc steps. Always inlined with constant rows, nv and
 * bf16, so the loops unroll and the accumulators live in registers. */
static ALWAYS_INLINE void tile(const tile_args *t, int rows, int nv, bool bf16)
{
    __m512 acc[ACC]; /* row r, vector v at r * nv + v */
    /* C's lines, asked for now so that they arrive during the k loop: the
     * up-projection's C rows lie 8-16 KB apart in a 32 MB output, and its
     * tiles stalled on them at their final stores (+5-7% with this). */
    if (!t->resume && !t->c_scale)
        for (int r = 0; r < rows; r++)
            for (int v = 0; v < nv; v++)
                _mm_prefetch((const char *)(t->c + r * t->ldc + v * 16), _MM_HINT_T0);
    for (int r = 0; r < rows; r++) {
        for (int v = 0; v < nv; v++) {
            __mmask16 mask = v == nv - 1 ? t->mask : (__mmask16)0xffff;
            const float *c = t->c + r * t->ldc + v * 16;
            if (t->resume)
                acc[r * nv + v] = _mm512_maskz_loadu_ps(mask, c);
            else if (t->c_scale) /* a rounded multiply of its own, as in ref */
                acc[r * nv + v] = _mm512_mul_ps(_mm512_set1_ps(t->c_scale[r]), _mm512_maskz_loadu_ps(mask, c));
            else
                acc[r * nv + v] = _mm512_setzero_ps();
        }
    }
    const float *a = t->a;
    const char *b = t->b;
    const int64_t rs_a = t->rs_a, cs_a = t->cs_a, ldb_bytes = t->ldb * (bf16 ? 2 : 4);
    /* 4 steps an iteration: the 8 x 3 tile with operands in L1 went from
     * 85% to 89% of the FMA probe on Sapphire Rapids (less loop overhead
     * beside its 24 FMAs) */
#pragma GCC unroll 4
    for (int64_t p = 0; p < t->kc; p++) {
        __m512 bv[NV];
        for (int v = 0; v < nv; v++)
            bv[v] = load_b(b, v, v == nv - 1, t->mask, bf16);
        for (int r = 0; r < rows; r++) {
            __m512 ar = _mm512_set1_ps(mla_load_f32(a + r * rs_a));
            for (int v = 0; v < nv; v++)
                acc[r * nv + v] = _mm512_fmadd_ps(ar, bv[v], acc[r * nv + v]);
        }
        a += cs_a;
        b += ldb_bytes;
    }
    for (int r = 0; r < rows; r++) {
        for (int v = 0; v < nv; v++) {
            __mmask16 mask = v == nv - 1 ? t->mask : (__mmask16)0xffff;
            _mm512_mask_storeu_ps(t->c + r * t->ldc + v * 16, mask, acc[r * nv + v]);
        }
    }
}

/* One copy of the tile per (rows, nv) with rows <= tile_height(nv). */
static ALWAYS_INLINE void tile_rows(const tile_args *t, int rows, int nv, bool bf16)
{
    switch (rows) {
    case 1: tile(t, 1, nv, bf16); break;
    case 2: tile(t, 2, nv, bf16); break;
    case 3: tile(t, 3, nv, bf16); break;
    case 4: tile(t, 4, nv, bf16); break;
    case 5: tile(t, 5, nv, bf16); break;
    case 6: tile(t, 6, nv, bf16); break;
    case 7: if (7 * nv <= ACC) tile(t, 7, nv, bf16); break;
    case 8: if (8 * nv <= ACC) tile(t, 8, nv, bf16); break;
    case 9: if (9 * nv <= ACC) tile(t, 9, nv, bf16); break;
    case 10: if (10 * nv <= ACC) tile(t, 10, nv, bf16); break;
    case 11: if (11 * nv <= ACC) tile(t, 11, nv, bf16); break;
    default: if (12 * nv <= ACC) tile(t, 12, nv, bf16); break;
    }
}

static ALWAYS_INLINE void tile_any(const tile_args *t, int rows, int nv, bool bf16)
{
    switch (nv) {
    case 1: tile_rows(t, rows, 1, bf16); break;
    case 2: tile_rows(t, rows, 2, bf16); break;
    default: tile_rows(t, rows, 3, bf16); break;
    }
}

static ALWAYS_INLINE void gemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t rs_a,
                               int64_t cs_a, const void *b, int64_t ldb, float *c, int64_t ldc,
                               const float *c_scale, bool bf16)
{
    const int64_t b_size = bf16 ? 2 : 4;
    for (int64_t j0 = 0; j0 < n; j0 += NV * 16) {
        int64_t cols = n - j0 < NV * 16 ? n - j0 : NV * 16;
        int nv = (int)((cols + 15) / 16), mr = tile_height(nv);
        /* m split evenly into tiles of at most mr rows (9 = 5 + 4, not 8 + 1) */
        int64_t tiles = (m + mr - 1) / mr;
        tile_args t = {.rs_a = rs_a, .cs_a = cs_a, .ldb = ldb, .ldc = ldc,
                       .mask = mla_tail_mask16(cols - (nv - 1) * 16)};
        /* one block even when k = 0: C still gets c_scale * C or 0 */
        for (int64_t p0 = 0; p0 == 0 || p0 < k; p0 += KC) {
            t.kc = k - p0 < KC ? k - p0 : KC;
            t.resume = p0 > 0;
            t.b = (const char *)b + (p0 * ldb + j0) * b_size;
            for (int64_t q = 0, i0 = 0, rows; q < tiles; q++, i0 += rows) {
                rows = (m - i0) / (tiles - q);
                t.a = a + i0 * rs_a + p0 * cs_a;
                t.c = c + i0 * ldc + j0;
                t.c_scale = c_scale ? c_scale + i0 : NULL;
                tile_any(&t, (int)rows, nv, bf16);
            }
        }
    }
}

void mla_gemm_f32__avx512(int64_t m, int64_t n, int64_t k, const float *a, int64_t rs_a, int64_t cs_a,
                          const float *b, int64_t ldb, float *c, int64_t ldc, const float *c_scale)
{
    gemm(m, n, k, a, rs_a, cs_a, b, ldb, c, ldc, c_scale, false);
}

void mla_gemm_bf16__avx512(int64_t m, int64_t n, int64_t k, const float *a, int64_t rs_a,
                           int64_t cs_a, const uint16_t *b, int64_t ldb, float *c, int64_t ldc,
                           const float *c_scale)
{
    gemm(m, n, k, a, rs_a, cs_a, b, ldb, c, ldc, c_scale, true);
}
