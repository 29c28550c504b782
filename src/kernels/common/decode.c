/*
 * Absorbed MLA decode driver. All H heads (times s_q query tokens) of a
 * request share one latent KV row per token, so decode is two GEMMs per tile
 * of cache rows (the route's tile), run by the backend's gemm_f32 kernel:
 *
 *   scores  S[j][r] = sum_d K[j][d] * Qt[d][r]      (m = rows of the tile)
 *   P.V     O[r][l] = alpha[r] * O[r][l] + sum_j P[j][r] * K[j][l]
 *
 * Query rows r = i*H + h are packed transposed and pre-scaled (Qt, [D][mb])
 * so the scores come out with the query rows along the vector lanes, where
 * the online softmax (max, exp, sum) needs no horizontal reductions. Cache
 * rows are used in place when the cache is f32. Otherwise the scores GEMM
 * widens them to f32 MLA_ATTN_WIDEN_ROWS rows at a time just before it uses
 * them, so they are still in L1 (one conversion per row, shared by every
 * query row), and P.V reads the tile's widened rows. (Reading a bf16 cache
 * in place with gemm_bf16, which widens in registers, costs P.V 10-30% on
 * Sapphire Rapids, whose shifts and shuffles share ports with the FMAs.)
 * The bf16 routes read a bf16 cache in place and convert other rows to
 * bf16 a run at a time (the route's convert_rows).
 *
 * Which kernels run the two GEMMs, and how q, P and V are laid out for
 * them, is the attention route (attention_route.h): f32 as above, or a
 * backend's half-precision route when q and the cache both have its dtype.
 * The online softmax, the causal rule, row finishing and the LSE combine are
 * the shared attention core (attention.h).
 *
 * Work is cut by the split-KV schedule: a part is a run of (request, block
 * range) segments; a request with one split writes out and lse directly,
 * others leave f32 partials that the combine merges by LSE (base e), and
 * have their Qt packed once, by all threads, before the parts run. A
 * partial is the split's unfinished O with its m + ln l and l: the combine
 * divides each split's weight by its l instead of every element by l, and
 * a pass whose rows fill O accumulates it in the partial's rows in place,
 * so a split writes its O once and never copies it (at 16 threads on one
 * request, finishing and copying 16 x 256 KB took 12% of the call).
 * Everything a segment computes depends only on the request, its range and
 * the call's shapes, never on the thread or the batch around it, which is
 * what makes batch-invariant schedules bit-reproducible.
 */
#include "decode.h"

#include "attention.h"
#include "attention_route.h"
#include "core/dtype.h"
#include "core/parallel.h"
#include "core/policy.h"
#include "core/size.h"
#include "elementwise.h"

#include <math.h>
#include <string.h>

typedef struct decode_shape {
    int64_t rows;      /* M = s_q * H query rows per request               */
    int64_t mblocks;   /* passes over the cache per segment                */
    int64_t mb_rows;   /* real rows per pass (the last may have fewer)     */
    int64_t mb;        /* rows per pass, padded: Qt / S row length         */
    int64_t d, l;      /* L + R, L                                         */
    int64_t lo;        /* floats between O's rows (scratch and partials)   */
} decode_shape;

/* Per-thread scratch, in floats. */
typedef struct scratch_layout {
    int64_t qt, s, o, kf, qrow, m, l, alpha, ones, route, total;
} scratch_layout;

static decode_shape shape_of(const mla_decode_args *a)
{
    decode_shape s = {.rows = a->s_q * a->num_heads, .d = a->kv_lora_rank + a->rope_dim,
                      .l = a->kv_lora_rank,
                      /* the AMX kernel loads O's tiles in place: 15 % faster
                       * than staging them with the rows unaliased, no faster
                       * 2 KB apart (bench/RESULTS.md, run 72) */
                      .lo = mla_unaliased_row(a->kv_lora_rank, sizeof(float))};
    s.mblocks = mla_ceil_div(s.rows, MLA_ATTN_MAX_ROWS);
    s.mb_rows = mla_ceil_div(s.rows, s.mblocks);
    s.mb = mla_round_up(s.mb_rows, MLA_ATTN_ROW_MULTIPLE);
    return s;
}

/* Floats of one pass's Qt (d x mb elements of at most a float each), on
 * whole 64-byte lines. */
static int64_t qt_floats(int64_t d, int64_t mb)
{
    return mla_round_up(d * mb, MLA_ALIGN / (int64_t)sizeof(float));
}

/* Offsets of each scratch array, each on its own 64-byte boundary. */
static scratch_layout scratch_of(const decode_shape *s)
{
    scratch_layout x;
    int64_t at = 0, step = MLA_ALIGN / (int64_t)sizeof(float);
#define PLACE(field, floats) x.field = at, at += mla_round_up(floats, step)
    PLACE(qt, qt_floats(s->d, s->mb));
    PLACE(s, MLA_ATTN_TILE * s->mb);
    PLACE(o, s->mb * s->lo);
    PLACE(kf, MLA_ATTN_TILE * s->d);
    PLACE(qrow, MLA_ATTN_PACK_ROWS * s->d);
    PLACE(m, s->mb);
    PLACE(l, s->mb);
    PLACE(alpha, s->mb);
    PLACE(ones, s->mb);
    PLACE(route, mla_attn_route_scratch_floats(s->mb, s->l));
#undef PLACE
    x.total = at;
    return x;
}

bool mla_decode_workspace(const mla_decode_args *a, int64_t slots, int threads, int64_t *bytes)
{
    decode_shape s = shape_of(a);
    /* Scratch for the widest pass of any s_q up to this one: a pass's rows
     * are not monotone in s_q * H (128 rows make one pass of 128, 129 two
     * of 65), and a caller sizes once for its largest s_q (prefill's
     * pieces). */
    decode_shape widest = s;
    widest.mb = mla_round_up(s.rows < MLA_ATTN_MAX_ROWS ? s.rows : MLA_ATTN_MAX_ROWS,
                             MLA_ATTN_ROW_MULTIPLE);
    /* Each array scratch_of places (the route's included) is at most
     * MLA_ATTN_TILE x (D + MLA_ATTN_TILE) floats (a pass has at most
     * MLA_ATTN_TILE rows, L <= D) and there are fewer than 16: where 16 such
     * arrays a thread fit, scratch_of's sums and products are exact. */
    int64_t columns, partial, lse, scratch, split_qt, total;
    if (__builtin_add_overflow(s.d, (int64_t)MLA_ATTN_TILE, &columns) ||
        !mla_region_bytes(16 * MLA_ATTN_TILE, columns, threads, sizeof(float), &scratch))
        return false;
    scratch = scratch_of(&widest).total * threads * (int64_t)sizeof(float);
    /* partials and their LSEs and l, and the split requests' Qt (a split
     * request has two slots or more; a pass's Qt is at most d x widest.mb,
     * and widest.mb and mblocks only grow with s_q), as mla_decode_run
     * places them, in bytes */
    if (!mla_region_bytes(slots, s.rows, s.lo, sizeof(float), &partial) ||
        !mla_region_bytes(slots, s.rows, 2, sizeof(float), &lse) ||
        !mla_region_bytes(slots / 2, s.mblocks, qt_floats(s.d, widest.mb), sizeof(float), &split_qt) ||
        __builtin_add_overflow(partial, lse, &total) || __builtin_add_overflow(total, scratch, &total) ||
        __builtin_add_overflow(total, split_qt, &total) ||
        __builtin_add_overflow(total, (int64_t)MLA_ALIGN, &total))
        return false;
    *bytes = total;
    return true;
}

/* ---- one segment ------------------------------------------------------------ */

typedef struct decode_ctx {
    const mla_kernels *k;
    const mla_decode_args *a;
    const mla_kv_cache *cache;
    decode_shape shape;
    scratch_layout x;
    int64_t elem_q, elem_cache;
    const mla_attn_route *route;
    float score_scale;  /* applied to scores: 1 where Qt carries the scale,
                         * times an fp8 cache's scale (row_scale 1)          */
    float row_scale;    /* the cache's rows are converted with: 1 for fp8    */
    float value_scale;  /* applied to O where it is normalised (finish or
                         * combine): an fp8 cache's scale                   */
    float *partial, *partial_lse, *partial_l; /* [slots][rows][lo], [slots][rows] x 2 */
    const int32_t *split_prefix;              /* the schedule's slots per request */
    float *split_qt;                          /* [slots / 2][mblocks] Qt        */
} decode_ctx;

static const void *query_row(const decode_ctx *c, int64_t t, int64_t h, bool rope)
{
    const mla_decode_args *a = c->a;
    return rope ? (const char *)a->q_pe + (t * a->q_pe_token_stride + h * a->q_pe_head_stride) * c->elem_q
                : (const char *)a->q_nope + (t * a->q_nope_token_stride + h * a->q_nope_head_stride) * c->elem_q;
}

/* Real rows of pass `pass` (the last may have fewer than mb_rows). */
static int64_t pass_size(const decode_shape *s, int64_t pass)
{
    const int64_t r0 = pass * s->mb_rows;
    return s->rows - r0 < s->mb_rows ? s->rows - r0 : s->mb_rows;
}

/* Rows [from, to) of request b's pass at row r0, packed into its Qt for
 * the route's scores GEMM, a block at a time (stage: the pack's scratch). */
static void pack_query_rows(const decode_ctx *c, void *qt, int64_t b, int64_t r0, int64_t from,
                            int64_t to, float *stage)
{
    const mla_decode_args *a = c->a;
    const decode_shape *s = &c->shape;
    for (int64_t r = from; r < to; r += MLA_ATTN_PACK_ROWS) {
        mla_attn_qblock q = {.r0 = r, .nr = to - r < MLA_ATTN_PACK_ROWS ? to - r : MLA_ATTN_PACK_ROWS,
                             .l = s->l, .rope = a->rope_dim, .dtype = a->q_dtype};
        for (int64_t i = 0; i < q.nr; i++) {
            int64_t row = r0 + r + i, t = b * a->s_q + row / a->num_heads, h = row % a->num_heads;
            q.nope[i] = query_row(c, t, h, false);
            q.pe[i] = a->rope_dim > 0 ? query_row(c, t, h, true) : NULL;
        }
        c->route->pack_q(c->route, c->k, qt, s->mb, &q, a->scale, stage);
    }
}

/* Zeroes Qt's padding rows [nr, mb) (pack_q writes only the real ones):
 * `pair` elements of a row lie together, mb rows of them per pair of d. */
static void zero_padding_rows(const decode_ctx *c, void *qt, int64_t nr)
{
    const int64_t pair = c->route->pair, mb = c->shape.mb, elem = c->route->q_elem;
    for (int64_t g = 0; nr < mb && g < c->shape.d / pair; g++)
        memset((char *)qt + (g * mb + nr) * pair * elem, 0, (size_t)((mb - nr) * pair * elem));
}

/* A split request's Qt of pass `pass`, packed ahead by pack_split_queries:
 * such a request holds two slots or more, so split_prefix[b] / 2 tells it
 * from every other. */
static void *split_qt(const decode_ctx *c, int64_t b, int64_t pass)
{
    return c->split_qt + (c->split_prefix[b] / 2 * c->shape.mblocks + pass) *
                             qt_floats(c->shape.d, c->shape.mb);
}

static bool is_split(const decode_ctx *c, int64_t b)
{
    return c->split_prefix[b + 1] - c->split_prefix[b] > 1;
}

/* The pass's Qt: packed ahead for a split request, else here, into the
 * thread's scratch. */
static const void *pass_qt(const decode_ctx *c, float *ws, int64_t b, int64_t pass)
{
    if (is_split(c, b))
        return split_qt(c, b, pass);
    const int64_t nr = pass_size(&c->shape, pass);
    float *qt = ws + c->x.qt;
    zero_padding_rows(c, qt, nr);
    pack_query_rows(c, qt, b, pass * c->shape.mb_rows, 0, nr, ws + c->x.qrow);
    return qt;
}

/* Splits cache rows [t, t + n) of request b into runs within blocks, which
 * point into the cache. Returns the number of runs. */
static int64_t split_tile(const decode_ctx *c, int64_t b, int64_t t, int64_t n, mla_key_run *runs)
{
    const mla_kv_cache *cache = c->cache;
    const int32_t *table = c->a->block_table + b * c->a->block_table_cols;
    int64_t count = 0;
    for (int64_t j = 0; j < n;) {
        int64_t pos = t + j, off = pos % cache->block_size;
        int64_t len = cache->block_size - off < n - j ? cache->block_size - off : n - j;
        const char *src = (const char *)cache->data +
                          (table[pos / cache->block_size] * cache->block_stride + off * cache->entry_stride) * c->elem_cache;
        runs[count++] = (mla_key_run){.rows = src, .count = len, .first = j};
        j += len;
    }
    return count;
}

/* Converts n rows (row stride `stride` elements) of the cache into dst
 * [n][d] in the route's dtype (f32, or bf16 from fp8 or, opted in, f32 and
 * f16). */
static void convert_rows(const decode_ctx *c, void *dst, const char *src, int64_t n, int64_t stride)
{
    const mla_kv_cache *cache = c->cache;
    const int64_t d = c->shape.d;
    const mla_dtype to = c->route->dtype;
    if (stride == d) {
        mla_convert_run(c->k, dst, to, src, cache->dtype, n * d, c->row_scale);
        return;
    }
    for (int64_t r = 0; r < n; r++)
        mla_convert_run(c->k, (char *)dst + r * d * mla_dtype_size(to), to,
                        src + r * stride * c->elem_cache, cache->dtype, d, c->row_scale);
}

/* The next tile's cache rows, asked for ahead of their use so that they
 * stream in from DRAM while this tile computes (the blocks are scattered,
 * which the hardware prefetchers do not follow), on the routes where that
 * pays (prefetch_keys, attention_route.h). The scores GEMM asks for as many
 * rows as it is about to compute on, so the requests trickle out through
 * the tile rather than stalling the core in one burst, and into L2
 * (prefetcht2), since a tile of rows is larger than L1. */
typedef struct prefetch_cursor {
    int64_t b, pos, end; /* request, next row to ask for, end of the tile */
} prefetch_cursor;

static void prefetch_rows(const decode_ctx *c, prefetch_cursor *pf, int64_t n)
{
    const mla_kv_cache *cache = c->cache;
    const int32_t *table = c->a->block_table + pf->b * c->a->block_table_cols;
    const int64_t row_bytes = c->shape.d * c->elem_cache;
    for (; n > 0 && pf->pos < pf->end; n--, pf->pos++) {
        const char *row = (const char *)cache->data +
                          (table[pf->pos / cache->block_size] * cache->block_stride +
                           pf->pos % cache->block_size * cache->entry_stride) * c->elem_cache;
        for (int64_t at = 0; at < row_bytes; at += 64)
            __builtin_prefetch(row + at, 0, 1);
    }
}

/* Cache rows the route's GEMMs read in place; others are converted to the
 * route's dtype (widened to f32, or fp8 to bf16; an fp8 cache's scale is
 * left to S and O). */
static bool rows_in_place(const decode_ctx *c)
{
    return c->route->dtype == c->cache->dtype;
}

/* S[j][r] for the tile's rows, run by run. Rows the GEMM cannot read in
 * place are converted into kf first. */
static void tile_scores(const decode_ctx *c, float *ws, const void *qt, const mla_key_run *runs,
                        int64_t nruns, prefetch_cursor *pf)
{
    const decode_shape *s = &c->shape;
    const int64_t stride = c->cache->entry_stride;
    float *sc = ws + c->x.s;
    char *kf = (char *)(ws + c->x.kf);
    const int64_t row_bytes = s->d * mla_dtype_size(c->route->dtype);
    for (int64_t q = 0; q < nruns; q++) {
        const mla_key_run *run = &runs[q];
        if (rows_in_place(c)) {
            prefetch_rows(c, pf, run->count);
            c->route->scores(c->k, run->count, s->mb, s->d, run->rows, stride, qt,
                             sc + run->first * s->mb, NULL);
            continue;
        }
        const int64_t piece = c->route->convert_rows > 0 ? c->route->convert_rows : run->count;
        for (int64_t j = 0; j < run->count; j += piece) {
            int64_t n = run->count - j;
            n = n < piece ? n : piece;
            prefetch_rows(c, pf, n);
            char *rows = kf + (run->first + j) * row_bytes;
            convert_rows(c, rows, (const char *)run->rows + j * stride * c->elem_cache, n, stride);
            c->route->scores(c->k, n, s->mb, s->d, rows, s->d, qt, sc + (run->first + j) * s->mb,
                             NULL);
        }
    }
}

/* O = alpha * O + P^T V over the tile's n rows from key t (O = P^T V on
 * the pass's first tile): V is the first L values of each cache row, read
 * in place or from the rows tile_scores converted; `mask` as the tile's
 * softmax took it, for the pass's first nr rows. */
static void tile_values(const decode_ctx *c, float *ws, float *o, const mla_key_run *runs,
                        int64_t nruns, int64_t t, int64_t n, bool first,
                        const mla_attn_causal *mask, int64_t nr)
{
    const decode_shape *s = &c->shape;
    const mla_key_run converted = {.rows = ws + c->x.kf, .count = n, .first = 0};
    const bool in_place = rows_in_place(c);
    mla_attn_values v = {
        .ld = s->mb, .width = s->l, .n = n, .s = ws + c->x.s, .ldo = s->lo,
        .runs = in_place ? runs : &converted, .nruns = in_place ? nruns : 1,
        .stride = in_place ? c->cache->entry_stride : s->d,
        .o = o, .alpha = first ? NULL : ws + c->x.alpha, .ones = ws + c->x.ones,
        .scratch = ws + c->x.route,
    };
    mla_attn_tile_values(c->k, c->route, &v, mask, t, nr);
}

/* The pass's online-softmax state in the thread's scratch. */
static mla_attn_rows pass_rows(const decode_ctx *c, float *ws, int64_t nr)
{
    return (mla_attn_rows){.nr = nr, .ld = c->shape.mb, .m = ws + c->x.m, .l = ws + c->x.l,
                           .alpha = ws + c->x.alpha};
}

/* Where the pass accumulates O (rows [mb][L]): in the partial's rows when
 * it writes a partial and its rows fill O (padding rows would run into the
 * next pass's or slot's), else in the thread's scratch. */
static float *pass_o(const decode_ctx *c, float *ws, int64_t r0, int64_t nr, int64_t slot)
{
    if (slot >= 0 && nr == c->shape.mb)
        return c->partial + (slot * c->shape.rows + r0) * c->shape.lo;
    return ws + c->x.o;
}

/* Writes the pass's rows, O at o: to out/lse when `slot` < 0, out = O / l
 * and lse = m + ln l (0 and -inf for a row that saw no key); else to the
 * partials, O as it is (0 for a row that saw no key, whose O may hold
 * nothing or 0 x inf) with m + ln l and l. */
static void finish_rows(const decode_ctx *c, float *ws, float *o, int64_t b, int64_t r0,
                        int64_t nr, int64_t slot)
{
    const mla_decode_args *a = c->a;
    const decode_shape *s = &c->shape;
    const float *m = ws + c->x.m, *l = ws + c->x.l;
    for (int64_t r = 0; r < nr; r++) {
        const int64_t rr = r0 + r, i = rr / a->num_heads, h = rr % a->num_heads;
        if (slot >= 0) {
            const int64_t at = slot * s->rows + rr;
            float *dst = c->partial + at * s->lo;
            if (l[r] == 0.0f)
                memset(dst, 0, (size_t)s->l * sizeof(float));
            else if (dst != o + r * s->lo)
                memcpy(dst, o + r * s->lo, (size_t)s->l * sizeof(float));
            c->partial_lse[at] = mla_attn_row_lse(m[r], l[r]);
            c->partial_l[at] = l[r];
            continue;
        }
        float *row = o + r * s->lo;
        float lse = mla_attn_finish_row(row, s->l, m[r], l[r], c->value_scale);
        int64_t t = b * a->s_q + i;
        mla_convert_run(c->k, (char *)a->out + (t * a->out_token_stride + h * a->out_head_stride) * c->elem_q,
                        a->q_dtype, row, MLA_DTYPE_F32, s->l, 1.0f);
        if (a->lse)
            a->lse[(b * a->num_heads + h) * a->s_q + i] = lse;
    }
}

/* Attention of request b's query rows over its cache rows [t0, t1). */
static void run_segment(const decode_ctx *c, float *ws, int64_t b, int64_t t0, int64_t t1, int64_t slot)
{
    const mla_decode_args *a = c->a;
    const decode_shape *s = &c->shape;
    float *sc = ws + c->x.s, *ones = ws + c->x.ones;
    mla_key_run runs[MLA_ATTN_TILE];
    const int64_t tile = c->route->tile;
    for (int64_t r = 0; r < s->mb; r++)
        ones[r] = 1.0f;
    for (int64_t pass = 0; pass < s->mblocks; pass++) {
        const int64_t r0 = pass * s->mb_rows, nr = pass_size(s, pass);
        /* MTP: query i (H rows each) sees keys up to seq_len - s_q + i */
        const mla_attn_causal causal = {.last_key0 = a->seq_lens[b] - a->s_q, .row0 = r0,
                                        .rows_per_query = a->num_heads};
        const mla_attn_rows st = pass_rows(c, ws, nr);
        float *o = pass_o(c, ws, r0, nr, slot);
        int64_t end = mla_attn_causal_end(&causal, nr);
        end = end < t1 ? end : t1;
        const void *qt = pass_qt(c, ws, b, pass);
        mla_attn_rows_start(&st);
        for (int64_t t = t0; t < end; t += tile) {
            int64_t n = end - t < tile ? end - t : tile;
            int64_t nruns = split_tile(c, b, t, n, runs);
            int64_t next_end = t + n + tile < end ? t + n + tile : end;
            prefetch_cursor pf = {.b = b, .pos = t + n,
                                  .end = c->route->prefetch_keys ? next_end : t + n};
            const mla_attn_causal *mask = mla_attn_causal_straddles(&causal, t, n) ? &causal : NULL;
            tile_scores(c, ws, qt, runs, nruns, &pf);
            mla_attn_softmax_tile(c->k, &st, sc, n, c->score_scale, mask, t);
            tile_values(c, ws, o, runs, nruns, t, n, t == t0, mask, nr);
        }
        finish_rows(c, ws, o, b, r0, nr, slot);
    }
}

/* ---- parts and combine ----------------------------------------------------- */

/* Every segment of one schedule part. In batch-invariant mode a part's range
 * of a request may hold several splits, cut at multiples of split_blocks. */
static void run_part(const decode_ctx *c, float *ws, const mla_sched_part *p, int64_t block_n,
                     int64_t split_blocks)
{
    const int32_t *prefix = c->split_prefix;
    for (int64_t b = p->begin_req; b <= p->end_req; b++) {
        int64_t seq = c->a->seq_lens[b], splits = prefix[b + 1] - prefix[b];
        int64_t first = b == p->begin_req ? p->begin_block : 0;
        int64_t last = b == p->end_req ? p->end_block : mla_ceil_div(seq, block_n);
        int64_t split = b == p->begin_req ? p->begin_split : 0;
        for (int64_t blk = first;;) {
            int64_t stop = split_blocks > 0 ? (blk / split_blocks + 1) * split_blocks : last;
            stop = stop < last ? stop : last;
            if (split_blocks > 0)
                split = blk / split_blocks;
            int64_t t0 = blk * block_n, t1 = stop * block_n < seq ? stop * block_n : seq;
            run_segment(c, ws, b, t0 < t1 ? t0 : t1, t1, splits > 1 ? prefix[b] + split : -1);
            blk = stop;
            if (blk >= last)
                break;
        }
    }
}

/* out/lse of query row rr of request b: its splits' partials merged in
 * split order. */
static void combine_row(const decode_ctx *c, float *tmp, int64_t b, int64_t rr, int64_t slot0,
                        int64_t splits)
{
    const mla_decode_args *a = c->a;
    const int64_t rows = c->shape.rows, len = c->shape.l, lo = c->shape.lo;
    float lse = mla_attn_merge_row(c->k, tmp, len, c->partial + (slot0 * rows + rr) * lo,
                                   rows * lo, c->partial_lse + slot0 * rows + rr,
                                   c->partial_l + slot0 * rows + rr, rows, splits, c->value_scale);
    int64_t i = rr / a->num_heads, h = rr % a->num_heads, t = b * a->s_q + i;
    mla_convert_run(c->k, (char *)a->out + (t * a->out_token_stride + h * a->out_head_stride) * c->elem_q,
                    a->q_dtype, tmp, MLA_DTYPE_F32, len, 1.0f);
    if (a->lse)
        a->lse[(b * a->num_heads + h) * a->s_q + i] = lse;
}

const mla_attn_route *mla_decode_route(const mla_kernels *k, const mla_decode_args *a,
                                       const mla_kv_cache *cache)
{
    return mla_attn_route_for(k, a->q_dtype, cache->dtype, a->kv_lora_rank + a->rope_dim,
                              cache->entry_stride, a->bf16_compute);
}

/* A decode on the threads: where requests are split, `packers` tasks
 * first pack a range of their query units each; then `workers` tasks take
 * the schedule's parts one at a time, as they finish the last (parts differ
 * in cost), each with its own scratch; once all are done, `combiners` tasks
 * merge a slice of the split requests' rows each. */
typedef struct decode_run {
    const decode_ctx *c;
    const mla_sched_part *parts;
    int64_t num_parts, block_n, split_blocks, workers, combine_rows, combiners;
    int64_t pack_units, packers;
    float *scratch;
    atomic_int_least64_t next_part;
} decode_run;

/* A split request's query rows are packed once, before its splits run
 * (each split packing all of them again took 12% of a 16-way split call,
 * H=128 B=1 on 16 threads), in units of up to MLA_ATTN_PACK_ROWS rows of a
 * pass: the units of the split requests' passes in order, a range per
 * task. A unit is MLA_ATTN_PACK_ROWS columns of Qt, whole 64-byte lines
 * where a row's element is 32 bits (f32, bf16 pairs), so that two tasks
 * do not write one line. */
static int64_t split_units(const decode_ctx *c)
{
    int64_t split = 0;
    for (int64_t b = 0; b < c->a->num_reqs; b++)
        split += is_split(c, b);
    if (split == 0)
        return 0;
    /* every pass has mb_rows rows but the last (a size query may give
     * billions of passes: no loop over them) */
    const decode_shape *s = &c->shape;
    const int64_t last = pass_size(s, s->mblocks - 1);
    return split * ((s->mblocks - 1) * mla_ceil_div(s->mb_rows, MLA_ATTN_PACK_ROWS) +
                    mla_ceil_div(last, MLA_ATTN_PACK_ROWS));
}

/* Packs units [lo, hi) of split_units' order, with `stage` as scratch. */
static void pack_split_units(const decode_ctx *c, int64_t lo, int64_t hi, float *stage)
{
    const decode_shape *s = &c->shape;
    int64_t at = 0;
    for (int64_t b = 0; b < c->a->num_reqs && at < hi; b++) {
        for (int64_t pass = 0; is_split(c, b) && pass < s->mblocks && at < hi; pass++) {
            const int64_t nr = pass_size(s, pass), units = mla_ceil_div(nr, MLA_ATTN_PACK_ROWS);
            const int64_t from = (lo > at ? lo : at) - at, to = (hi < at + units ? hi : at + units) - at;
            if (from < to) {
                void *qt = split_qt(c, b, pass);
                if (from == 0)
                    zero_padding_rows(c, qt, nr);
                const int64_t last = to * MLA_ATTN_PACK_ROWS < nr ? to * MLA_ATTN_PACK_ROWS : nr;
                pack_query_rows(c, qt, b, pass * s->mb_rows, from * MLA_ATTN_PACK_ROWS, last, stage);
            }
            at += units;
        }
    }
}

static void pack_split_queries(int64_t packer, void *ctx)
{
    const decode_run *r = ctx;
    int64_t lo, hi;
    mla_part_range(r->pack_units, r->packers, packer, &lo, &hi);
    pack_split_units(r->c, lo, hi, r->scratch + packer * r->c->x.total + r->c->x.qrow);
}

static void run_parts(int64_t worker, void *ctx)
{
    decode_run *r = ctx;
    float *ws = r->scratch + worker * r->c->x.total;
    for (int64_t p; (p = mla_parallel_claim(&r->next_part)) < r->num_parts;)
        if (r->parts[p].begin_req < r->c->a->num_reqs)
            run_part(r->c, ws, &r->parts[p], r->block_n, r->split_blocks);
}

static void combine_slice(int64_t part, void *ctx)
{
    const decode_run *r = ctx;
    const decode_ctx *c = r->c;
    float *tmp = r->scratch + part * c->x.total + c->x.o;
    int64_t lo, hi;
    mla_part_range(r->combine_rows, r->combiners, part, &lo, &hi);
    for (int64_t q = lo; q < hi; q++) {
        const int64_t b = q / c->shape.rows;
        if (is_split(c, b))
            combine_row(c, tmp, b, q % c->shape.rows, c->split_prefix[b],
                        c->split_prefix[b + 1] - c->split_prefix[b]);
    }
}

void mla_decode_run(const mla_kernels *k, const mla_decode_args *a, const mla_kv_cache *cache,
                    const mla_sched_part *parts, int64_t num_parts, const int32_t *split_prefix,
                    int64_t block_n, int64_t split_blocks, void *workspace, int threads)
{
    decode_ctx c = {.k = k, .a = a, .cache = cache, .shape = shape_of(a),
                    .elem_q = mla_dtype_size(a->q_dtype), .elem_cache = mla_dtype_size(cache->dtype),
                    .route = mla_decode_route(k, a, cache), .split_prefix = split_prefix};
    /* An fp8 cache is read as code * scale (docs/semantics.md). Every fp8
     * value is exact in bf16 and f32, so its rows convert unscaled (on the
     * bf16 routes a table lookup on 16-bit lanes, 4x cheaper than a multiply
     * and a rounding per element) and the scale multiplies the scores and O
     * instead: S = (q . k) * scale, O = scale * sum p v. The rows then
     * round nothing, where each bf16 element was rounded after its multiply. */
    const bool fp8 = mla_dtype_is_fp8(cache->dtype);
    c.row_scale = fp8 ? 1.0f : cache->scale;
    c.value_scale = fp8 ? cache->scale : 1.0f;
    c.score_scale = (c.route->q_scaled ? 1.0f : a->scale) * c.value_scale;
    c.x = scratch_of(&c.shape);
    const int64_t slots = split_prefix[a->num_reqs];
    float *base = mla_align_ptr(workspace);
    c.partial = base;
    c.partial_lse = c.partial + mla_round_up(slots * c.shape.rows * c.shape.lo, MLA_ALIGN / 4);
    c.partial_l = c.partial_lse + slots * c.shape.rows;
    float *scratch = c.partial_lse + mla_round_up(2 * slots * c.shape.rows, MLA_ALIGN / 4);
    c.split_qt = scratch + threads * c.x.total;
    decode_run run = {.c = &c, .parts = parts, .num_parts = num_parts,
                      .block_n = block_n, .split_blocks = split_blocks, .scratch = scratch,
                      .combine_rows = a->num_reqs * c.shape.rows};
    atomic_init(&run.next_part, 0);
    run.pack_units = split_units(&c);
    run.packers = run.pack_units < threads ? run.pack_units : threads;
    run.workers = num_parts < threads ? num_parts : threads;
    run.combiners = run.combine_rows < threads ? run.combine_rows : threads;
    const mla_parallel_loop loops[] = {
        {run.packers, pack_split_queries}, {run.workers, run_parts}, {run.combiners, combine_slice}};
    /* without a split request there is nothing to pack or combine */
    if (run.pack_units == 0)
        mla_parallel_run(threads, loops + 1, 1, &run);
    else
        mla_parallel_run(threads, loops, 3, &run);
}
