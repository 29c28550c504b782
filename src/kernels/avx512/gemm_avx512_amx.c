/* AMX-BF16 GEMM micro-kernel: C = bf16 A times pair-packed bf16 B on tile
 * registers, one TDPBF16PS per 16-pair step of k (mla_gemm_bf16tile__ref is
 * the exact arithmetic, which this reproduces bit for bit).
 *
 * The eight tiles are all 16 rows x 64 bytes: C00 C01 C10 C11 (0-3) hold a
 * 32 x 32 block of C in f32, A0 A1 (4, 5) two 16-row strips of A (16 pairs
 * each), B0 B1 (6, 7) two 16-column strips of B (16 pair rows). Each step
 * loads four tiles and issues four TDPBF16PS, whose 16-cycle latency the
 * four independent accumulators cover; each load sits just before the
 * first product that reads it, so that it overlaps the products before it
 * (+5-6% for a block whose operands stream from L2 on Sapphire Rapids).
 *
 * Tiles load rows of 64 contiguous bytes at any stride, so A is read in
 * place when its pairs run along memory (cs_a = 1) in whole tiles, B when
 * it covers whole tiles, and C when it covers whole tiles and starts
 * unscaled. Everything else goes through staging buffers: a panel of A
 * (32 rows x up to PANEL_PAIRS pairs, once per panel, shared by every
 * column block), B's edge tiles and C's edge or rescaled tiles,
 * zero-padded. A zero pair adds +0 to lanes that start at +0 and are
 * never -0, so padding k to whole steps keeps the twin's bits.
 *
 * B is the operand that streams from L2 in every caller (the query pairs
 * of decode's scores, V's pairs of P.V, W's strips of the GEMM: 128-256
 * KB, read again for each row block), while A's 32-row panel serves
 * every column block: B's whole tiles load with the T1 hint
 * (TILELOADDT1: their lines need not stay in L1, where the panel should;
 * no PMU on the Xeon to count what it changes, only the time). On
 * the Xeon at 16 threads, with the two loads alternated call by call in
 * one process (three processes each), the GEMM ran 4-8 % faster, flash
 * attention 2-8 % and decode 2-6 % (bench/RESULTS.md, run 104).
 *
 * While a block's steps run, the next block's C lines are asked for in
 * ownership (PREFETCHW), a few a step, so that its tile stores do not
 * wait on them: decode's P.V writes O into split partials that other
 * cores' combine last read. In the same kind of A/B, decode bf16 H=128
 * B=4 C=4096 ran 1-13 % faster with it (fp8 cache 4-6 %), B=1 1-2 %;
 * H=16 B=32, whose O is no partial, 1 % slower (run 103).
 *
 * Linux must have granted this process the tile state (dispatch asks at
 * init); the kernel configures the tiles on entry and releases them on
 * exit, so nothing leaks into the caller's context switches.
 */
#include "kernels/kernels.h"

#include "util.h"

#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum {
    ROWS = 16,          /* rows of a tile                                 */
    STEP = 16,          /* pairs in a 64-byte A row or B column group     */
    BLOCK = 2 * ROWS,   /* rows (and columns) of C per block              */
    PANEL_PAIRS = 320,  /* pairs of A staged at once: decode's 576 in one  */
};

/* GCC's tile load and store intrinsics are asm statements that take the
 * address only, with no memory operand or clobber, so stores to a staging
 * buffer could sink below the tile load that reads it, or loads rise above
 * the tile store that writes it: the "memory" barriers order them. */
static ALWAYS_INLINE void memory_barrier(void)
{
    __asm__ volatile("" : : : "memory");
}

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

static void configure_tiles(void)
{
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = ROWS;
    }
    /* GCC 12 takes ldtilecfg for a read of nothing and drops the stores
     * above without this (cfg's address must escape into it too). */
    __asm__ volatile("" : : "r"(&cfg) : "memory");
    _tile_loadconfig(&cfg);
}

/* Tile numbers must be immediates: these fold once inlined with constants. */
static ALWAYS_INLINE void tile_load(int t, const void *p, int64_t stride)
{
    memory_barrier();
    switch (t) {
    case 0: _tile_loadd(0, p, stride); break;
    case 1: _tile_loadd(1, p, stride); break;
    case 2: _tile_loadd(2, p, stride); break;
    case 3: _tile_loadd(3, p, stride); break;
    case 4: _tile_loadd(4, p, stride); break;
    case 5: _tile_loadd(5, p, stride); break;
    case 6: _tile_loadd(6, p, stride); break;
    default: _tile_loadd(7, p, stride); break;
    }
}

/* B's tiles (6, 7), with the hint to keep their lines out of L1. */
static ALWAYS_INLINE void tile_stream_load(int t, const void *p, int64_t stride)
{
    memory_barrier();
    if (t == 6)
        _tile_stream_loadd(6, p, stride);
    else
        _tile_stream_loadd(7, p, stride);
}

static ALWAYS_INLINE void tile_store(int t, void *p, int64_t stride)
{
    switch (t) {
    case 0: _tile_stored(0, p, stride); break;
    case 1: _tile_stored(1, p, stride); break;
    case 2: _tile_stored(2, p, stride); break;
    default: _tile_stored(3, p, stride); break;
    }
    memory_barrier();
}

static ALWAYS_INLINE void tile_zero(int t)
{
    switch (t) {
    case 0: _tile_zero(0); break;
    case 1: _tile_zero(1); break;
    case 2: _tile_zero(2); break;
    default: _tile_zero(3); break;
    }
}

/* The operands, as the slot's contract addresses them (strides in pairs). */
typedef struct gemm {
    int64_t m, n, pairs;
    const uint16_t *a;
    int64_t rs_a, cs_a;
    const uint16_t *b;
    int64_t ldb;
    float *c;
    int64_t ldc;
    const float *c_scale;
} gemm;

/* Where a row panel's A tiles come from: row r, step s at
 * base + r * stride + 64 s bytes. */
typedef struct a_view {
    const char *base;
    int64_t stride;
} a_view;

static int64_t min64(int64_t x, int64_t y)
{
    return x < y ? x : y;
}

/* A's rows [i0, i0 + rows) x pairs [p0, p0 + np) as tiles can load them: in
 * place when they are whole tiles along memory, else copied into `panel`
 * (BLOCK rows of round_up(np, STEP) pairs, zero beyond the real ones). */
static a_view view_a(const gemm *g, int64_t i0, int64_t rows, int64_t p0, int64_t np,
                     uint32_t *panel)
{
    if (g->cs_a == 1 && rows % ROWS == 0 && np % STEP == 0)
        return (a_view){(const char *)(g->a + 2 * (i0 * g->rs_a + p0)), g->rs_a * 4};
    const int64_t width = (np + STEP - 1) / STEP * STEP;
    memset(panel, 0, (size_t)(BLOCK * width) * sizeof *panel);
    for (int64_t r = 0; r < rows; r++) {
        /* memcpy: pairs may be only 2-byte aligned */
        const uint16_t *src = g->a + 2 * ((i0 + r) * g->rs_a + p0 * g->cs_a);
        uint32_t *dst = panel + r * width;
        if (g->cs_a == 1) {
            memcpy(dst, src, (size_t)np * sizeof *dst);
            continue;
        }
        for (int64_t q = 0; q < np; q++)
            memcpy(dst + q, src + 2 * q * g->cs_a, sizeof *dst);
    }
    return (a_view){(const char *)panel, width * 4};
}

/* Loads B's pair rows [p, p + np) x columns [j, j + cols) into tile t, in
 * place (streamed) when they make a whole tile, else through `stage`. */
static ALWAYS_INLINE void load_b(int t, const gemm *g, int64_t p, int64_t np, int64_t j,
                                 int64_t cols, uint32_t *stage)
{
    const uint16_t *src = g->b + p * g->ldb + 2 * j;
    if (np == STEP && cols >= ROWS) {
        tile_stream_load(t, src, g->ldb * 2);
        return;
    }
    const __mmask16 mask = mla_tail_mask16(cols);
    for (int64_t q = 0; q < STEP; q++)
        _mm512_store_si512(stage + q * ROWS,
                           q < np ? _mm512_maskz_loadu_epi32(mask, src + q * g->ldb) : _mm512_setzero_si512());
    tile_load(t, stage, 64);
}

/* One C tile of a block: rows [i, i + rows) x columns [j, j + cols). */
typedef struct c_tile {
    int64_t i, j, rows, cols;
} c_tile;

static bool whole(const c_tile *ct)
{
    return ct->rows == ROWS && ct->cols == ROWS;
}

/* Starts tile t at C (rescaled on the first panel of k, or 0 without
 * c_scale), through `stage` unless C is read in place. */
static ALWAYS_INLINE void start_c(int t, const gemm *g, const c_tile *ct, bool first, float *stage)
{
    float *c = g->c + ct->i * g->ldc + ct->j;
    if (first && !g->c_scale) {
        tile_zero(t);
        return;
    }
    /* The lazy online softmax (mla_backend.h) scales almost every row by
     * exactly 1 after its first tile, and 1 * c is c (NaN payloads aside),
     * so such tiles load in place: 15 % faster than staging them on the
     * Xeon, unless C's rows are 2 KB apart (a tile's 16 rows in 2 of L1's
     * 64 sets; decode pads its O rows) (bench/RESULTS.md, run 72). */
    if (whole(ct) && (!first || _mm512_cmpeq_ps_mask(_mm512_loadu_ps(g->c_scale + ct->i),
                                                      _mm512_set1_ps(1.0f)) == 0xffff)) {
        tile_load(t, c, g->ldc * 4);
        return;
    }
    const __mmask16 mask = mla_tail_mask16(ct->cols);
    for (int64_t r = 0; r < ct->rows; r++) {
        __m512 row = _mm512_maskz_loadu_ps(mask, c + r * g->ldc);
        if (first) /* a rounded multiply of its own, as in the twin */
            row = _mm512_mul_ps(_mm512_set1_ps(g->c_scale[ct->i + r]), row);
        _mm512_store_ps(stage + r * ROWS, row);
    }
    tile_load(t, stage, 64);
}

static ALWAYS_INLINE void store_c(int t, const gemm *g, const c_tile *ct, float *stage)
{
    float *c = g->c + ct->i * g->ldc + ct->j;
    if (whole(ct)) {
        tile_store(t, c, g->ldc * 4);
        return;
    }
    tile_store(t, stage, 64);
    const __mmask16 mask = mla_tail_mask16(ct->cols);
    for (int64_t r = 0; r < ct->rows; r++)
        _mm512_mask_storeu_ps(c + r * g->ldc, mask, _mm512_load_ps(stage + r * ROWS));
}

/* The block after the one at (i0, j0) in a panel's order, the next column
 * block or the next row block's first: rows and cols are its size (rows 0
 * after the last). */
static c_tile next_block(const gemm *g, int64_t i0, int64_t j0)
{
    const bool row_end = j0 + BLOCK >= g->n;
    const int64_t i = row_end ? i0 + BLOCK : i0, j = row_end ? 0 : j0 + BLOCK;
    return (c_tile){i, j, i < g->m ? min64(BLOCK, g->m - i) : 0, min64(BLOCK, g->n - j)};
}

/* Asks for lines [from, to) of block `next`'s C in ownership: line q is
 * row q / per_row, the q % per_row-th 16 columns. */
static ALWAYS_INLINE void prefetch_lines(const gemm *g, const c_tile *next, int64_t per_row,
                                         int64_t from, int64_t to)
{
    for (int64_t q = from; q < to; q++)
        __builtin_prefetch(g->c + (next->i + q / per_row) * g->ldc + next->j + q % per_row * ROWS,
                           1, 3);
}

/* The block of C at rows [i0, i0 + rows), columns [j0, j0 + 32) over the
 * panel's pairs [p0, p0 + np), asking for block `next`'s C lines on the
 * way. */
static void block(const gemm *g, const a_view *av, int64_t i0, int64_t rows, int64_t j0,
                  int64_t p0, int64_t np, bool first, const c_tile *next)
{
    const int64_t cols = min64(BLOCK, g->n - j0);
    const bool two_rows = rows > ROWS, two_cols = cols > ROWS;
    const c_tile ct[4] = {
        {i0, j0, min64(rows, ROWS), min64(cols, ROWS)},
        {i0, j0 + ROWS, min64(rows, ROWS), cols - ROWS},
        {i0 + ROWS, j0, rows - ROWS, min64(cols, ROWS)},
        {i0 + ROWS, j0 + ROWS, rows - ROWS, cols - ROWS},
    };
    _Alignas(64) float c_stage[4][ROWS * ROWS];
    _Alignas(64) uint32_t b_stage[2][STEP * ROWS];
    const int64_t per_row = (next->cols + ROWS - 1) / ROWS, lines = next->rows * per_row;
    const int64_t steps = (np + STEP - 1) / STEP, per_step = (lines + steps - 1) / steps;
    start_c(0, g, &ct[0], first, c_stage[0]);
    if (two_cols)
        start_c(1, g, &ct[1], first, c_stage[1]);
    if (two_rows)
        start_c(2, g, &ct[2], first, c_stage[2]);
    if (two_rows && two_cols)
        start_c(3, g, &ct[3], first, c_stage[3]);
    for (int64_t s = 0, line = 0; s < np; s += STEP, line += per_step) {
        const int64_t ns = min64(STEP, np - s);
        prefetch_lines(g, next, per_row, min64(line, lines), min64(line + per_step, lines));
        tile_load(4, av->base + s * 4, av->stride);
        load_b(6, g, p0 + s, ns, j0, cols, b_stage[0]);
        _tile_dpbf16ps(0, 4, 6);
        if (two_cols) {
            load_b(7, g, p0 + s, ns, j0 + ROWS, cols - ROWS, b_stage[1]);
            _tile_dpbf16ps(1, 4, 7);
        }
        if (two_rows) {
            tile_load(5, av->base + ROWS * av->stride + s * 4, av->stride);
            _tile_dpbf16ps(2, 5, 6);
        }
        if (two_rows && two_cols)
            _tile_dpbf16ps(3, 5, 7);
    }
    store_c(0, g, &ct[0], c_stage[0]);
    if (two_cols)
        store_c(1, g, &ct[1], c_stage[1]);
    if (two_rows)
        store_c(2, g, &ct[2], c_stage[2]);
    if (two_rows && two_cols)
        store_c(3, g, &ct[3], c_stage[3]);
}

/* k = 0: C is its start, acc = c_scale * c or 0, with no step to flush it. */
static void start_only(const gemm *g)
{
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++)
            g->c[i * g->ldc + j] = g->c_scale ? g->c_scale[i] * g->c[i * g->ldc + j] : 0.0f;
}

void mla_gemm_bf16tile__avx512_amx(int64_t m, int64_t n, int64_t k, const uint16_t *a,
                                   int64_t rs_a, int64_t cs_a, const uint16_t *b, int64_t ldb,
                                   float *c, int64_t ldc, const float *c_scale)
{
    const gemm g = {.m = m, .n = n, .pairs = k / 2, .a = a, .rs_a = rs_a,
                    .cs_a = cs_a, .b = b, .ldb = ldb, .c = c, .ldc = ldc, .c_scale = c_scale};
    if (m <= 0 || n <= 0)
        return;
    if (g.pairs == 0) {
        start_only(&g);
        return;
    }
    _Alignas(64) uint32_t panel[BLOCK * PANEL_PAIRS];
    configure_tiles();
    for (int64_t p0 = 0; p0 < g.pairs; p0 += PANEL_PAIRS) {
        const int64_t np = min64(PANEL_PAIRS, g.pairs - p0);
        for (int64_t i0 = 0; i0 < m; i0 += BLOCK) {
            const int64_t rows = min64(BLOCK, m - i0);
            const a_view av = view_a(&g, i0, rows, p0, np, panel);
            for (int64_t j0 = 0; j0 < n; j0 += BLOCK) {
                const c_tile next = next_block(&g, i0, j0);
                block(&g, &av, i0, rows, j0, p0, np, p0 == 0, &next);
            }
        }
    }
    _tile_release();
}
