/* AVX2 GEMM micro-kernels, bit-exact with the ref kernels: each element of C
 * is one FMA chain in k order, whatever the tiling (see mla_gemm_f32_fn).
 *
 * A register tile is rows x nv vectors of C. Each step p loads nv vectors of
 * B row p and broadcasts `rows` elements of A column p into rows * nv FMAs.
 * Full tiles are 4 x 3 (24 columns): 12 of the 16 ymm registers accumulate
 * (>= 8 cover 4-cycle FMA latency on 2 ports), 7 loads per 12 FMAs. Narrower
 * tiles (the last columns, or small n) get taller to keep 12 accumulators.
 * The last n % 8 columns go through a masked tile that reads B from a
 * zero-padded copy, since AVX2 has no 16-bit masked load for bf16. */
#include "kernels/kernels.h"

#include "util.h"

#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum {
    NV = 3,      /* vectors of 8 columns per tile row, at most */
    ACC = 12,    /* accumulators per tile, at most */
    MR_MAX = 12, /* tile rows, at most */
    /* k steps per block; later blocks resume from the f32 partial sums stored
     * in C, which is exact. Large on purpose: the B sliver of a tile column
     * streams from L2 fast enough, while L1-sized blocks (64) cost 3-6% on
     * Zen 4 in storing and reloading the partial sums. */
    KC = 1024,
    /* k steps per block of the n % 8 tail, whose B is copied to the stack */
    KC_TAIL = 128,
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
    __m256i mask; /* masked tiles: lanes of C inside n */
} tile_args;

/* Vector v of B row pointer `row`; bf16 widens exactly (bits << 16). */
static ALWAYS_INLINE __m256 load_b(const void *row, int v, bool bf16)
{
    if (bf16) {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + v * 8));
        return mla_widen_bf16_ps8(h);
    }
    return _mm256_loadu_ps((const float *)row + v * 8);
}

static ALWAYS_INLINE __m256 load_c(const tile_args *t, const float *c, bool masked)
{
    return masked ? _mm256_maskload_ps(c, t->mask) : _mm256_loadu_ps(c);
}

/* rows x nv tile over t->kc steps. Always inlined with constant rows, nv,
 * masked and bf16, so the loops unroll and the accumulators live in
 * registers. A masked tile (nv = 1) reads and writes only the lanes of C in
 * t->mask. */
static ALWAYS_INLINE void tile(const tile_args *t, int rows, int nv, bool masked, bool bf16)
{
    __m256 acc[ACC]; /* row r, vector v at r * nv + v */
    for (int r = 0; r < rows; r++) {
        for (int v = 0; v < nv; v++) {
            const float *c = t->c + r * t->ldc + v * 8;
            if (t->resume)
                acc[r * nv + v] = load_c(t, c, masked);
            else if (t->c_scale) /* a rounded multiply of its own, as in ref */
                acc[r * nv + v] = _mm256_mul_ps(_mm256_set1_ps(t->c_scale[r]), load_c(t, c, masked));
            else
                acc[r * nv + v] = _mm256_setzero_ps();
        }
    }
    const float *a = t->a;
    const char *b = t->b;
    const int64_t rs_a = t->rs_a, cs_a = t->cs_a, ldb_bytes = t->ldb * (bf16 ? 2 : 4);
    for (int64_t p = 0; p < t->kc; p++) {
        __m256 bv[NV];
        for (int v = 0; v < nv; v++)
            bv[v] = load_b(b, v, bf16);
        for (int r = 0; r < rows; r++) {
            __m256 ar = _mm256_set1_ps(mla_load_f32(a + r * rs_a));
            for (int v = 0; v < nv; v++)
                acc[r * nv + v] = _mm256_fmadd_ps(ar, bv[v], acc[r * nv + v]);
        }
        a += cs_a;
        b += ldb_bytes;
    }
    for (int r = 0; r < rows; r++) {
        for (int v = 0; v < nv; v++) {
            float *c = t->c + r * t->ldc + v * 8;
            if (masked)
                _mm256_maskstore_ps(c, t->mask, acc[r * nv + v]);
            else
                _mm256_storeu_ps(c, acc[r * nv + v]);
        }
    }
}

/* One copy of the tile per (rows, nv) with rows <= tile_height(nv). */
static ALWAYS_INLINE void tile_rows(const tile_args *t, int rows, int nv, bool masked, bool bf16)
{
    switch (rows) {
    case 1: tile(t, 1, nv, masked, bf16); break;
    case 2: tile(t, 2, nv, masked, bf16); break;
    case 3: tile(t, 3, nv, masked, bf16); break;
    case 4: tile(t, 4, nv, masked, bf16); break;
    case 5: if (5 * nv <= ACC) tile(t, 5, nv, masked, bf16); break;
    case 6: if (6 * nv <= ACC) tile(t, 6, nv, masked, bf16); break;
    case 7: if (7 * nv <= ACC) tile(t, 7, nv, masked, bf16); break;
    case 8: if (8 * nv <= ACC) tile(t, 8, nv, masked, bf16); break;
    case 9: if (9 * nv <= ACC) tile(t, 9, nv, masked, bf16); break;
    case 10: if (10 * nv <= ACC) tile(t, 10, nv, masked, bf16); break;
    case 11: if (11 * nv <= ACC) tile(t, 11, nv, masked, bf16); break;
    default: if (12 * nv <= ACC) tile(t, 12, nv, masked, bf16); break;
    }
}

/* nv = 0 is the masked tile of the last n % 8 columns, whose B comes from a
 * padded f32 buffer. */
static ALWAYS_INLINE void tile_any(const tile_args *t, int rows, int nv, bool bf16)
{
    switch (nv) {
    case 0: tile_rows(t, rows, 1, true, false); break;
    case 1: tile_rows(t, rows, 1, false, bf16); break;
    case 2: tile_rows(t, rows, 2, false, bf16); break;
    default: tile_rows(t, rows, 3, false, bf16); break;
    }
}

/* The last cols (< 8) columns of kc rows of B as f32 rows of 8, zero-padded:
 * the masked tile then reads whole vectors and nothing past column n. */
static void pad_tail(const void *b, int64_t ldb, int64_t kc, int64_t cols, bool bf16, float pad[][8])
{
    for (int64_t p = 0; p < kc; p++) {
        for (int j = 0; j < 8; j++) {
            float x = 0.0f;
            if (j < cols && bf16) { /* widen exactly: bits << 16 */
                uint32_t bits = (uint32_t)mla_load_u16((const uint16_t *)b + p * ldb + j) << 16;
                memcpy(&x, &bits, sizeof x);
            } else if (j < cols) {
                x = mla_load_f32((const float *)b + p * ldb + j);
            }
            pad[p][j] = x;
        }
    }
}

static ALWAYS_INLINE void gemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t rs_a,
                               int64_t cs_a, const void *b, int64_t ldb, float *c, int64_t ldc,
                               const float *c_scale, bool bf16)
{
    const int64_t b_size = bf16 ? 2 : 4;
    float pad[KC_TAIL][8]; /* the last n % 8 columns of a k block of B, zero-padded */
    for (int64_t j0 = 0, cols; j0 < n; j0 += cols) {
        int nv = n - j0 >= NV * 8 ? NV : (int)((n - j0) / 8);
        cols = nv > 0 ? nv * 8 : n - j0;
        int mr = tile_height(nv > 0 ? nv : 1), kc_max = nv > 0 ? KC : KC_TAIL;
        /* m split evenly into tiles of at most mr rows (6 = 3 + 3, not 4 + 2) */
        int64_t tiles = (m + mr - 1) / mr;
        tile_args t = {.rs_a = rs_a, .cs_a = cs_a, .ldc = ldc,
                       .mask = mla_first_lanes8(cols)};
        /* one block even when k = 0: C still gets c_scale * C or 0 */
        for (int64_t p0 = 0; p0 == 0 || p0 < k; p0 += kc_max) {
            t.kc = k - p0 < kc_max ? k - p0 : kc_max;
            t.resume = p0 > 0;
            t.b = (const char *)b + (p0 * ldb + j0) * b_size;
            t.ldb = ldb;
            if (nv == 0) {
                pad_tail(t.b, ldb, t.kc, cols, bf16, pad);
                t.b = pad;
                t.ldb = 8;
            }
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

void mla_gemm_f32__avx2(int64_t m, int64_t n, int64_t k, const float *a, int64_t rs_a, int64_t cs_a,
                        const float *b, int64_t ldb, float *c, int64_t ldc, const float *c_scale)
{
    gemm(m, n, k, a, rs_a, cs_a, b, ldb, c, ldc, c_scale, false);
}

void mla_gemm_bf16__avx2(int64_t m, int64_t n, int64_t k, const float *a, int64_t rs_a, int64_t cs_a,
                         const uint16_t *b, int64_t ldb, float *c, int64_t ldc, const float *c_scale)
{
    gemm(m, n, k, a, rs_a, cs_a, b, ldb, c, ldc, c_scale, true);
}
