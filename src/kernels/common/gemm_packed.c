#include "gemm_packed.h"

#include "core/parallel.h"
#include "core/policy.h"
#include "core/size.h"
#include "elementwise.h"
#include "kernels/kernels.h"

#include <stddef.h>
#include <string.h>

enum {
    MC = MLA_PACKED_GEMM_MC,
    MC_MAX = MLA_PACKED_GEMM_MC > MLA_PACKED_GEMM_MC_TILE ? MLA_PACKED_GEMM_MC
                                                         : MLA_PACKED_GEMM_MC_TILE,
    KC = MLA_PACKED_GEMM_KC,
    NC = MLA_PACKED_GEMM_NC,
    MR = MLA_PACKED_GEMM_MR,
};

/* Elements widened per piece on the stack while packing; f32 rows
 * transposed per call. */
enum { PIECE = 256, TRANSPOSE_ROWS = 64 };

/* Floats of a region, rounded up to whole MLA_ALIGN lines. */
static int64_t aligned_floats(int64_t floats)
{
    return mla_round_up(floats, MLA_ALIGN / (int64_t)sizeof(float));
}

/* ---- the workspace ---------------------------------------------------------- */

/* [ones: MC_MAX | A: m x k2 | B: n x k2 unless packed ahead | per thread: C
 * tile MC_MAX x NC], in floats, k2 the depth in whole pairs; the bf16
 * routes' 16-bit A and B fit the same regions. */
typedef struct layout {
    int64_t k2, a, b, total;
} layout;

static bool layout_of(int64_t m, int64_t n, int64_t k, bool w_packed, int threads, layout *l)
{
    int64_t tiles, total;
    l->k2 = mla_round_up(k, 2);
    if (!mla_mul_size(m, l->k2, &l->a) || !mla_gemm_packed_w_elems(n, k, &l->b) ||
        l->a > INT64_MAX / 8 || l->b > INT64_MAX / 8 ||
        !mla_mul_size(aligned_floats(MC_MAX * NC), threads, &tiles))
        return false;
    l->a = aligned_floats(l->a);
    l->b = w_packed ? 0 : aligned_floats(l->b);
    return !__builtin_add_overflow(aligned_floats(MC_MAX) + l->a, l->b, &total) &&
           !__builtin_add_overflow(total, tiles, &total) &&
           mla_mul_size(total, sizeof(float), &total) &&
           !__builtin_add_overflow(total, MLA_ALIGN, &l->total);
}

bool mla_gemm_packed_workspace(int64_t m, int64_t n, int64_t k, bool w_packed, int threads,
                               int64_t *bytes)
{
    layout l;
    if (!layout_of(m, n, k, w_packed, threads, &l))
        return false;
    *bytes = l.total;
    return true;
}

bool mla_gemm_packed_w_elems(int64_t n, int64_t k, int64_t *elems)
{
    return mla_mul_size(n, mla_round_up(k, 2), elems);
}

/* ---- packing ------------------------------------------------------------------ */

/* dst[p * ld] = row[p] for p < k, widened to f32: one row of A into its
 * block's columns, or one W row into a strip's column. Rows and a packed
 * weight's dst are callers', at any byte (mla.h). */
static void scatter_f32(const mla_kernels *kern, const void *row, mla_dtype dtype, int64_t k,
                        float *dst, int64_t ld)
{
    float buf[PIECE];
    for (int64_t p0 = 0; p0 < k; p0 += PIECE) {
        int64_t n = k - p0 < PIECE ? k - p0 : PIECE;
        const float *x = mla_widen_piece(kern, row, dtype, p0, n, buf);
        for (int64_t p = 0; p < n; p++)
            mla_store_f32(dst + (p0 + p) * ld, mla_load_f32(x + p));
    }
}

/* `rows` rows of k elements (ld apart, dtype) into a [k][rows] block column
 * by column: f32, X(i, p) at blk[p * rows + i]; bf16 pairs, at
 * blk16[2 * (i + (p/2) * rows) + p%2]. A row block of A, or a strip of W.
 * f32 rows, and bf16 rows read as words of two elements, go through the
 * transpose_u32 kernel, TRANSPOSE_ROWS rows a call (a strided store per
 * element made packing W a fifth of a 16-thread GEMM); an odd k's last
 * pair is completed by a zero. */
static void pack_rows(const mla_kernels *kern, const void *src, mla_dtype dtype, int64_t ld,
                      int64_t rows, int64_t k, bool dot, void *blk)
{
    const int64_t size = mla_dtype_size(dtype);
    if (dot || dtype == MLA_DTYPE_F32) {
        const int64_t words = dot ? k / 2 : k;
        const void *row[TRANSPOSE_ROWS];
        for (int64_t i0 = 0; i0 < rows; i0 += TRANSPOSE_ROWS) {
            int64_t m = rows - i0 < TRANSPOSE_ROWS ? rows - i0 : TRANSPOSE_ROWS;
            for (int64_t i = 0; i < m; i++)
                row[i] = (const char *)src + (i0 + i) * ld * size;
            kern->transpose_u32((uint32_t *)blk + i0, rows, row, m, words);
        }
        for (int64_t i = 0; dot && k % 2 && i < rows; i++) {
            const uint16_t *row = (const uint16_t *)((const char *)src + i * ld * size);
            uint16_t *last = (uint16_t *)blk + 2 * (i + words * rows);
            mla_store_u16(last, mla_load_u16(row + k - 1));
            mla_store_u16(last + 1, 0);
        }
        return;
    }
    for (int64_t i = 0; i < rows; i++)
        scatter_f32(kern, (const char *)src + i * ld * size, dtype, k, (float *)blk + i, rows);
}

/* ---- the packed operands --------------------------------------------------------- */

/* Where the packed operands are, and how a call runs. Offsets count the
 * packed elements (floats, or bf16 halves on the dot route). */
typedef struct packed {
    const mla_kernels *kern;
    const mla_packed_gemm *g;
    bool dot;
    bool tile; /* the dot route on gemm_bf16tile: A's rows kept whole */
    int64_t mc; /* rows per row block */
    int64_t nr; /* columns per W strip (mla_gemm_packed_strip) */
    int64_t k2;
    void *a, *b;
    const float *ones;
} packed;

/* How g runs on kern's route (dot: a bf16 pair route): the tiling of its
 * kernel; the operands' places are the caller's to fill. */
static packed route_of(const mla_kernels *kern, const mla_packed_gemm *g, bool dot)
{
    const bool tile = dot && kern->gemm_bf16tile;
    return (packed){.kern = kern, .g = g, .dot = dot, .tile = tile,
                    .mc = tile ? MLA_PACKED_GEMM_MC_TILE : MC,
                    .nr = mla_gemm_packed_strip(kern, dot), .k2 = mla_round_up(g->k, 2)};
}

const char *mla_gemm_packed_route_name(const mla_kernels *kern, bool dot)
{
    return !dot ? "f32" : kern->gemm_bf16tile ? "amx-bf16" : "bf16-dot";
}

static void *at(const packed *pk, void *base, int64_t offset)
{
    return pk->dot ? (void *)((uint16_t *)base + offset) : (void *)((float *)base + offset);
}

static int64_t block_rows(const packed *pk, int64_t r)
{
    return pk->g->m - r * pk->mc < pk->mc ? pk->g->m - r * pk->mc : pk->mc;
}

static int64_t strip_width(const packed *pk, const mla_gemm_segment *s, int64_t j0)
{
    return s->width - j0 < pk->nr ? s->width - j0 : pk->nr;
}

/* Rows of A's micro-panel u (MR rows from u * MR). */
static int64_t panel_rows(const packed *pk, int64_t u)
{
    return pk->g->m - u * MR < MR ? pk->g->m - u * MR : MR;
}

/* Micro-panel u of A at offset u * MR * k2, [k][rows]; on the tile route its
 * rows whole, row i at i * k2 (pairs along the row, an odd k completed by a
 * zero). */
static void pack_a_panel(const packed *pk, int64_t u)
{
    const mla_packed_gemm *g = pk->g;
    const char *src = (const char *)g->a + u * MR * g->lda * mla_dtype_size(g->a_dtype);
    if (!pk->tile) {
        pack_rows(pk->kern, src, g->a_dtype, g->lda, panel_rows(pk, u), g->k, pk->dot,
                  at(pk, pk->a, u * MR * pk->k2));
        return;
    }
    for (int64_t i = 0; i < panel_rows(pk, u); i++) {
        uint16_t *dst = at(pk, pk->a, (u * MR + i) * pk->k2);
        memcpy(dst, (const uint16_t *)src + i * g->lda, (size_t)g->k * sizeof *dst);
        if (g->k % 2)
            dst[g->k] = 0;
    }
}

/* The segment's W rows, strip by strip: columns [col + j0, col + j0 + w) at
 * offset (col + j0) * k2, [k][w]. */
static void pack_segment(const packed *pk, const mla_gemm_segment *s)
{
    const mla_packed_gemm *g = pk->g;
    const int64_t size = mla_dtype_size(g->w_dtype);
    for (int64_t j0 = 0; j0 < s->width; j0 += pk->nr) {
        const int64_t w = strip_width(pk, s, j0);
        float *strip = at(pk, pk->b, (s->col + j0) * pk->k2);
        pack_rows(pk->kern, (const char *)s->w + j0 * g->ldw * size, g->w_dtype, g->ldw, w, g->k,
                  pk->dot, strip);
        /* An f32 strip never reads the pad row of an odd k (the dot route's
         * pair); zeroed, a packing's bytes depend on its weight alone, so a
         * server may checksum or cache them. */
        if (!pk->dot && pk->k2 > g->k)
            memset(strip + g->k * w, 0, (size_t)w * sizeof(float));
    }
}

/* ---- tiles ------------------------------------------------------------------- */

/* C rows of row block r of the segment, k block by k block, each an exact
 * resume of the last (one FMA chain, or one dot-product chain, per element);
 * within a k block strip by strip, so that each strip's block stays in L1
 * while the row block's micro-panels pass over it from L2. */
static void tile_product(const packed *pk, const mla_gemm_segment *s, int64_t r, float *c,
                         int64_t ldc)
{
    const int64_t depth = pk->dot ? pk->k2 : pk->g->k; /* the pad pair is the dot's */
    const int64_t u0 = r * (pk->mc / MR), u1 = mla_ceil_div(r * pk->mc + block_rows(pk, r), MR);
    for (int64_t p0 = 0; p0 == 0 || p0 < depth; p0 += KC) {
        int64_t kc = depth - p0 < KC ? depth - p0 : KC;
        const float *scale = p0 > 0 ? pk->ones : NULL;
        for (int64_t j0 = 0; j0 < s->width; j0 += pk->nr) {
            int64_t w = strip_width(pk, s, j0);
            const void *b = at(pk, pk->b, (s->col + j0) * pk->k2 + p0 * w);
            if (pk->tile) { /* the whole row block: tiles take 16 rows a load */
                const void *a = at(pk, pk->a, r * pk->mc * pk->k2 + p0);
                pk->kern->gemm_bf16tile(block_rows(pk, r), w, kc, a, pk->k2 / 2, 1, b, 2 * w,
                                        c + j0, ldc, scale);
                continue;
            }
            for (int64_t u = u0; u < u1; u++) {
                int64_t rows = panel_rows(pk, u);
                const void *a = at(pk, pk->a, u * MR * pk->k2 + p0 * rows);
                float *cu = c + (u - u0) * MR * ldc + j0;
                if (pk->dot)
                    pk->kern->gemm_bf16dot(rows, w, kc, a, 1, rows, b, 2 * w, cu, ldc, scale);
                else
                    pk->kern->gemm_f32(rows, w, kc, a, 1, rows, b, w, cu, ldc, scale);
            }
        }
    }
}

/* One tile, computed in the thread's f32 tile (it stays in L2) and then
 * streamed out row by row, rounded once to C's dtype. C is written once
 * and not read again by the call, so non-temporal stores spare each line's
 * read for ownership: 7% of a 16-thread up-projection on the Xeon, on the
 * f32 and the AMX routes alike (bench/RESULTS.md). */
static void run_tile(const packed *pk, const mla_gemm_segment *s, int64_t r, float *c_tile)
{
    const mla_packed_gemm *g = pk->g;
    const int64_t rows = block_rows(pk, r), size = mla_dtype_size(g->c_dtype);
    char *c = (char *)s->c + r * pk->mc * s->ldc * size;
    _Alignas(64) uint16_t narrow[NC]; /* a row rounded to bf16 or f16 */
    tile_product(pk, s, r, c_tile, s->width);
    for (int64_t i = 0; i < rows; i++) {
        const void *row = c_tile + i * s->width;
        if (g->c_dtype != MLA_DTYPE_F32) {
            mla_convert_run(pk->kern, narrow, g->c_dtype, row, MLA_DTYPE_F32, s->width, 1.0f);
            row = narrow;
        }
        pk->kern->copy_stream(c + i * s->ldc * size, row, s->width * size);
    }
}

bool mla_gemm_packed_dot(const mla_kernels *kern, mla_dtype a_dtype, mla_dtype w_dtype)
{
    return (kern->gemm_bf16tile || kern->gemm_bf16dot) && a_dtype == MLA_DTYPE_BF16 &&
           w_dtype == MLA_DTYPE_BF16;
}

_Static_assert(MLA_PACKED_GEMM_KC % 32 == 0, "the tile route's k blocks are whole 16-pair steps");

/* The tile route's call takes a whole segment's width, so that each A tile
 * loaded serves several column tiles; the register-tiled kernels take NR. */
int64_t mla_gemm_packed_strip(const mla_kernels *kern, bool dot)
{
    return dot && kern->gemm_bf16tile ? MLA_PACKED_GEMM_NC : MLA_PACKED_GEMM_NR;
}

/* A GEMM on the threads: `packers` tasks pack W's segments, unless packed
 * ahead, and A's micro-panels, taking them one at a time; once both
 * operands are whole, `parts` tasks run a slice each of the (row block,
 * segment) tiles, each in an f32 tile of its own.
 *
 * The slices run segments outer when the call packs W: a thread then reads
 * a few of W's segments, each staying in its L2 across the row blocks,
 * rather than all of W, which the packers have just written into other
 * cores' caches; A, half W's size at the kv_b_proj shapes, streams
 * instead. W packed ahead lies clean in L3, and row blocks outer then read
 * only the thread's own rows of the freshly packed A. Xeon, 16 threads,
 * 8 alternated rounds each (bench/RESULTS.md, runs 88-89): W packed in the
 * call, segments outer 7-13 % faster on the f32 route and 5-10 % on AMX
 * tiles; W packed ahead, row blocks outer 7 % faster on AMX tiles. */
typedef struct gemm_run {
    const packed *pk;
    bool segments_outer;
    int64_t blocks, segments, panels, packers, parts;
    float *c_tiles;
    atomic_int_least64_t next_piece;
} gemm_run;

/* W's segments (each as large as 16 of A's 8-row panels at the kv_b_proj
 * shapes) are handed out first, one at a time: a static split gave all of W
 * to the last two of 16 threads while the others waited at the barrier.
 * Where each piece is packed does not change its bytes. */
static void pack_pieces(int64_t packer, void *ctx)
{
    (void)packer;
    gemm_run *r = ctx;
    mla_gemm_segment s;
    for (int64_t q; (q = mla_parallel_claim(&r->next_piece)) < r->segments + r->panels;) {
        if (q < r->segments) {
            r->pk->g->segment(r->pk->g->ctx, q, &s);
            pack_segment(r->pk, &s);
        } else {
            pack_a_panel(r->pk, q - r->segments);
        }
    }
}

static void run_tiles(int64_t part, void *ctx)
{
    const gemm_run *r = ctx;
    const mla_packed_gemm *g = r->pk->g;
    float *c_tile = r->c_tiles + part * aligned_floats(MC_MAX * NC);
    mla_gemm_segment s;
    int64_t lo, hi;
    mla_part_range(r->blocks * g->segments, r->parts, part, &lo, &hi);
    for (int64_t q = lo; q < hi; q++) {
        const int64_t segment = r->segments_outer ? q / r->blocks : q % g->segments;
        g->segment(g->ctx, segment, &s);
        run_tile(r->pk, &s, r->segments_outer ? q % r->blocks : q / g->segments, c_tile);
    }
    r->pk->kern->store_fence(); /* C is whole once the call returns */
}

void mla_gemm_packed(const mla_kernels *kern, const mla_packed_gemm *g, void *workspace, int threads)
{
    layout l;
    if (g->m == 0 || g->segments == 0 || !layout_of(g->m, g->n, g->k, g->w_packed, threads, &l))
        return;
    float *ones = mla_align_ptr(workspace);
    for (int i = 0; i < MC_MAX; i++)
        ones[i] = 1.0f;
    float *a = ones + aligned_floats(MC_MAX), *b = a + l.a, *c_tiles = b + l.b;
    const bool dot = g->w_packed ? g->w_dot : mla_gemm_packed_dot(kern, g->a_dtype, g->w_dtype);
    packed pk = route_of(kern, g, dot);
    pk.a = a;
    pk.b = g->w_packed ? (void *)g->w_packed : b;
    pk.ones = ones;
    const int64_t blocks = mla_ceil_div(g->m, pk.mc), tiles = blocks * g->segments;
    gemm_run run = {.pk = &pk, .segments_outer = !g->w_packed, .blocks = blocks, .c_tiles = c_tiles,
                    /* k = 0 leaves nothing to pack, and A and W may then be NULL */
                    .panels = g->k ? mla_ceil_div(g->m, MR) : 0,
                    .segments = g->w_packed || !g->k ? 0 : g->segments,
                    .parts = tiles < threads ? tiles : threads};
    atomic_init(&run.next_piece, 0);
    run.packers = run.segments + run.panels < run.parts ? run.segments + run.panels : run.parts;
    const mla_parallel_loop loops[] = {{run.packers, pack_pieces}, {run.parts, run_tiles}};
    mla_parallel_run(threads, loops, 2, &run);
}

/* W's segments, packed on `threads` threads a slice each. */
typedef struct pack_run {
    const packed *pk;
    int64_t parts;
} pack_run;

static void pack_segments(int64_t part, void *ctx)
{
    const pack_run *r = ctx;
    const mla_packed_gemm *g = r->pk->g;
    mla_gemm_segment s;
    int64_t lo, hi;
    mla_part_range(g->segments, r->parts, part, &lo, &hi);
    for (int64_t q = lo; q < hi; q++) {
        g->segment(g->ctx, q, &s);
        pack_segment(r->pk, &s);
    }
}

void mla_gemm_pack_w(const mla_kernels *kern, const mla_packed_gemm *g, bool dot, void *dst,
                     int threads)
{
    packed pk = route_of(kern, g, dot);
    pk.b = dst;
    if (g->k == 0)
        return; /* nothing to pack, and W may be NULL */
    pack_run run = {.pk = &pk, .parts = g->segments < threads ? g->segments : threads};
    mla_parallel_for(run.parts, threads, pack_segments, &run);
}

/* ---- the up-projection ------------------------------------------------------ */

/* base + bytes, or NULL for a tensor the call does not have (W packed
 * ahead; the outputs while packing W ahead). */
static void *offset_or_null(const void *base, int64_t bytes)
{
    return base ? (char *)base + bytes : NULL;
}

/* Segment `index` of the up-projection: head index / pieces, then its k_nope
 * pieces before its v pieces (the W rows' order). */
static void up_proj_segment(const void *ctx, int64_t index, mla_gemm_segment *out)
{
    const mla_up_proj_args *a = ctx;
    const int64_t P = a->qk_nope_dim, V = a->v_head_dim, L = a->kv_lora_rank;
    const int64_t k_pieces = mla_ceil_div(P, NC), pieces = k_pieces + mla_ceil_div(V, NC);
    const int64_t h = index / pieces, q = index % pieces, size = mla_dtype_size(a->out_dtype);
    const bool is_k = q < k_pieces;
    const int64_t col = (is_k ? q : q - k_pieces) * NC, dim = is_k ? P : V;
    out->col = h * (P + V) + (is_k ? 0 : P) + col;
    out->w = offset_or_null(a->kv_b_proj, out->col * L * mla_dtype_size(a->w_dtype));
    out->c = is_k ? offset_or_null(a->k_nope, (h * a->k_nope_head_stride + col) * size)
                  : offset_or_null(a->v, (h * a->v_head_stride + col) * size);
    out->ldc = is_k ? a->k_nope_token_stride : a->v_token_stride;
    out->width = dim - col < NC ? dim - col : NC;
}

/* The up-projection's GEMM: columns h*(P+V) + j of kv_b_proj's rows. */
static mla_packed_gemm up_proj_gemm(const mla_up_proj_args *a)
{
    const int64_t P = a->qk_nope_dim, V = a->v_head_dim;
    return (mla_packed_gemm){
        .m = a->num_tokens, .n = a->num_heads * (P + V), .k = a->kv_lora_rank, .a = a->kv_c,
        .lda = a->kv_c_stride, .a_dtype = a->kv_c_dtype, .ldw = a->kv_lora_rank,
        .w_dtype = a->w_dtype, .c_dtype = a->out_dtype,
        .segments = a->num_heads * (mla_ceil_div(P, NC) + mla_ceil_div(V, NC)),
        .segment = up_proj_segment, .ctx = a,
    };
}

void mla_up_proj_run(const mla_kernels *kern, const mla_up_proj_args *a, const void *w_packed,
                     bool w_dot, void *workspace, int threads)
{
    mla_packed_gemm g = up_proj_gemm(a);
    g.w_packed = w_packed;
    g.w_dot = w_dot;
    mla_gemm_packed(kern, &g, workspace, threads);
}

void mla_up_proj_pack_run(const mla_kernels *kern, const mla_up_proj_args *a, bool dot, void *dst,
                          int threads)
{
    /* Packing reads W alone: the outputs, whose strides packing ahead does
     * not check, stay out of the segments' address arithmetic. */
    mla_up_proj_args w_only = *a;
    w_only.k_nope = w_only.v = NULL;
    w_only.k_nope_token_stride = w_only.k_nope_head_stride = 0;
    w_only.v_token_stride = w_only.v_head_stride = 0;
    const mla_packed_gemm g = up_proj_gemm(&w_only);
    mla_gemm_pack_w(kern, &g, dot, dst, threads);
}
