/*
 * Absorbed MLA decode driver. All H heads (times s_q query tokens) of a
 * request share one latent KV row per token, so decode is two GEMMs per tile
 * of TILE cache rows, run by the backend's gemm_f32 micro-kernel:
 *
 *   scores  S[j][r] = sum_d K[j][d] * Qt[d][r]      (m = rows of the tile)
 *   P.V     O[r][l] = alpha[r] * O[r][l] + sum_j P[j][r] * K[j][l]
 *
 * Query rows r = i*H + h are packed transposed and pre-scaled (Qt, [D][MB])
 * so the scores come out with the query rows along the vector lanes, where
 * the online softmax (max, exp, sum) needs no horizontal reductions. Cache
 * rows are used in place when the cache is f32. Otherwise the scores GEMM
 * widens them to f32 CHUNK rows at a time just before it uses them, so they
 * are still in L1 (one conversion per row, shared by every query row), and
 * P.V reads the tile's widened rows. (Reading a bf16 cache in place with
 * gemm_bf16, which widens in registers, costs P.V 10-30% on Sapphire
 * Rapids, whose shifts and shuffles share ports with the FMAs.)
 *
 * A backend may have a half-precision route, taken when q and the cache
 * both have its dtype; cache rows are read in place, q is packed raw and the
 * scale applied to the scores, and P is rounded to that dtype:
 *   - bf16 dot (gemm_bf16dot: vdpbf16ps, BFDOT): queries, P and each tile's
 *     V rows packed as bf16 pairs along the GEMM depth;
 *   - f16 (gemm_f16f16: FMLAL): the f32 route's layouts with f16 elements,
 *     both GEMMs reading the cache rows in place.
 *
 * Work is cut by the split-KV schedule: a part is a run of (request, block
 * range) segments; a request with one split writes out and lse directly,
 * others write f32 partials that the combine merges by LSE (base e).
 * Everything a segment computes depends only on the request, its range and
 * the call's shapes, never on the thread or the batch around it, which is
 * what makes batch-invariant schedules bit-reproducible.
 */
#include "decode.h"

#include "core/policy.h"
#include "core/size.h"
#include "elementwise.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* Cache rows per tile: the P.V GEMM's depth and the scores GEMM's height.
 * 128 rather than 64: P.V reloads and stores its C (O) once per tile, which
 * at depth 64 held the avx512 kernel to ~86% of peak and at 128 to ~93%. */
#define TILE 128
/* Cache rows widened per scores GEMM call: 8 x 576 f32 (18 KiB) stays in L1. */
#define CHUNK 8
/* Query rows per pass over the cache: a multiple of 16 (every ISA's vector)
 * small enough that O [MB][L] stays in L2. */
#define MAX_MB 128
#define ALIGN 64

typedef struct decode_shape {
    int64_t rows;      /* M = s_q * H query rows per request               */
    int64_t mblocks;   /* passes over the cache per segment                */
    int64_t mb_rows;   /* real rows per pass (the last may have fewer)     */
    int64_t mb;        /* rows per pass padded to 16: Qt / S row length    */
    int64_t d, l;      /* L + R, L                                         */
} decode_shape;

/* Per-thread scratch, in floats. */
typedef struct scratch_layout {
    int64_t qt, s, o, kf, qrow, m, l, alpha, ones, p16, p_pairs, v_pairs, total;
} scratch_layout;

static decode_shape shape_of(const mla_decode_args *a)
{
    decode_shape s = {.rows = a->s_q * a->num_heads, .d = a->kv_lora_rank + a->rope_dim,
                      .l = a->kv_lora_rank};
    s.mblocks = (s.rows + MAX_MB - 1) / MAX_MB;
    s.mb_rows = (s.rows + s.mblocks - 1) / s.mblocks;
    s.mb = mla_round_up(s.mb_rows, 16);
    return s;
}

/* Offsets of each scratch array, each on its own 64-byte boundary. */
static scratch_layout scratch_of(const decode_shape *s)
{
    scratch_layout x;
    int64_t at = 0, step = ALIGN / (int64_t)sizeof(float);
#define PLACE(field, floats) x.field = at, at += mla_round_up(floats, step)
    PLACE(qt, s->d * s->mb);
    PLACE(s, TILE * s->mb);
    PLACE(o, s->mb * s->l);
    PLACE(kf, TILE * s->d);
    PLACE(qrow, s->d);
    PLACE(m, s->mb);
    PLACE(l, s->mb);
    PLACE(alpha, s->mb);
    PLACE(ones, s->mb);
    /* the half routes' P, and the bf16 dot route's packed P and V (two
     * 16-bit values per float) */
    PLACE(p16, TILE * s->mb / 2);
    PLACE(p_pairs, TILE * s->mb / 2);
    PLACE(v_pairs, TILE * s->l / 2);
#undef PLACE
    x.total = at;
    return x;
}

bool mla_decode_workspace(const mla_decode_args *a, int64_t slots, int threads, int64_t *bytes)
{
    decode_shape s = shape_of(a);
    scratch_layout x = scratch_of(&s);
    int64_t partial, lse, scratch, total;
    if (__builtin_mul_overflow(slots, s.rows * s.l, &partial) ||
        __builtin_mul_overflow(slots, s.rows, &lse) ||
        __builtin_mul_overflow(x.total, (int64_t)threads, &scratch))
        return false;
    partial = mla_round_up(partial, ALIGN / 4);
    lse = mla_round_up(lse, ALIGN / 4);
    if (__builtin_add_overflow(partial, lse, &total) || __builtin_add_overflow(total, scratch, &total) ||
        __builtin_mul_overflow(total, (int64_t)sizeof(float), &total) ||
        __builtin_add_overflow(total, (int64_t)ALIGN, &total))
        return false;
    *bytes = total;
    return true;
}

typedef enum decode_route {
    ROUTE_F32,      /* gemm_f32 on f32 (or widened) operands */
    ROUTE_BF16_DOT, /* gemm_bf16dot */
    ROUTE_F16,      /* gemm_f16f16 */
} decode_route;

static decode_route route_of(const mla_kernels *k, const mla_decode_args *a, const mla_kv_cache *cache)
{
    /* bf16 pairs along d must not straddle rows: even widths and row strides */
    if (k->gemm_bf16dot && a->q_dtype == MLA_DTYPE_BF16 && cache->dtype == MLA_DTYPE_BF16 &&
        (a->kv_lora_rank + a->rope_dim) % 2 == 0 && cache->entry_stride % 2 == 0)
        return ROUTE_BF16_DOT;
    if (k->gemm_f16f16 && a->q_dtype == MLA_DTYPE_F16 && cache->dtype == MLA_DTYPE_F16)
        return ROUTE_F16;
    return ROUTE_F32;
}

/* ---- one segment ------------------------------------------------------------ */

typedef struct decode_ctx {
    const mla_kernels *k;
    const mla_decode_args *a;
    const mla_kv_cache *cache;
    decode_shape shape;
    scratch_layout x;
    int64_t elem_q, elem_cache;
    decode_route route;
    float score_scale;  /* applied to scores: 1 where Qt carries the scale   */
    float *partial, *partial_lse; /* [slots][rows][L], [slots][rows] */
} decode_ctx;

/* A run of consecutive cache rows of one block. */
typedef struct row_run {
    const void *rows;
    int64_t count, first; /* rows, index of the first in the tile */
} row_run;

static const void *query_row(const decode_ctx *c, int64_t t, int64_t h, bool rope)
{
    const mla_decode_args *a = c->a;
    return rope ? (const char *)a->q_pe + (t * a->q_pe_token_stride + h * a->q_pe_head_stride) * c->elem_q
                : (const char *)a->q_nope + (t * a->q_nope_token_stride + h * a->q_nope_head_stride) * c->elem_q;
}

/* The pass's query rows, transposed for the scores GEMM: Qt[d][r] =
 * scale * q(row r0 + r)[d] in f32; for the f16 route the raw f16 q at
 * qt16[d*mb + r], for the bf16 dot route the raw bf16 q as pairs along d
 * (pair (d/2, r) at qt16[(d/2)*2*mb + 2r]). Padding rows are 0. */
static void pack_queries(const decode_ctx *c, float *ws, int64_t b, int64_t r0, int64_t nr)
{
    const mla_decode_args *a = c->a;
    const decode_shape *s = &c->shape;
    float *qt = ws + c->x.qt, *row = ws + c->x.qrow;
    uint16_t *qt16 = (uint16_t *)qt;
    memset(qt, 0, (size_t)(s->d * s->mb) * (c->route == ROUTE_F32 ? sizeof(float) : sizeof(uint16_t)));
    for (int64_t r = 0; r < nr; r++) {
        int64_t i = (r0 + r) / a->num_heads, h = (r0 + r) % a->num_heads, t = b * a->s_q + i;
        if (c->route != ROUTE_F32) {
            const uint16_t *nope = query_row(c, t, h, false), *pe = query_row(c, t, h, true);
            for (int64_t d = 0; d < s->d; d++) {
                int64_t at = c->route == ROUTE_F16 ? d * s->mb + r : (d / 2) * 2 * s->mb + 2 * r + d % 2;
                qt16[at] = d < s->l ? nope[d] : pe[d - s->l];
            }
            continue;
        }
        mla_convert_run(c->k, row, MLA_DTYPE_F32, query_row(c, t, h, false), a->q_dtype, s->l, 1.0f);
        if (a->rope_dim > 0)
            mla_convert_run(c->k, row + s->l, MLA_DTYPE_F32, query_row(c, t, h, true), a->q_dtype,
                            a->rope_dim, 1.0f);
        for (int64_t d = 0; d < s->d; d++)
            qt[d * s->mb + r] = a->scale * row[d];
    }
}

/* Splits cache rows [t, t + n) of request b into runs within blocks, which
 * point into the cache. Returns the number of runs. */
static int64_t split_tile(const decode_ctx *c, int64_t b, int64_t t, int64_t n, row_run *runs)
{
    const mla_kv_cache *cache = c->cache;
    const int32_t *table = c->a->block_table + b * c->a->block_table_cols;
    int64_t count = 0;
    for (int64_t j = 0; j < n;) {
        int64_t pos = t + j, off = pos % cache->block_size;
        int64_t len = cache->block_size - off < n - j ? cache->block_size - off : n - j;
        const char *src = (const char *)cache->data +
                          (table[pos / cache->block_size] * cache->block_stride + off * cache->entry_stride) * c->elem_cache;
        runs[count++] = (row_run){.rows = src, .count = len, .first = j};
        j += len;
    }
    return count;
}

/* Widens n rows (row stride `stride` elements) of the cache into dst [n][d]. */
static void widen_rows(const decode_ctx *c, float *dst, const char *src, int64_t n, int64_t stride)
{
    const mla_kv_cache *cache = c->cache;
    const int64_t d = c->shape.d;
    if (stride == d) {
        mla_convert_run(c->k, dst, MLA_DTYPE_F32, src, cache->dtype, n * d, cache->scale);
        return;
    }
    for (int64_t r = 0; r < n; r++)
        mla_convert_run(c->k, dst + r * d, MLA_DTYPE_F32, src + r * stride * c->elem_cache, cache->dtype,
                        d, cache->scale);
}

/* The next tile's cache rows, asked for ahead of their use so that they
 * stream in from DRAM while this tile computes (the blocks are scattered,
 * which the hardware prefetchers do not follow). The scores GEMM asks for
 * as many rows as it is about to compute on, so the requests trickle out
 * through the tile rather than stalling the core in one burst, and into L2
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

/* S[j][r] for the tile's rows, run by run. Rows the GEMM cannot read in
 * place are widened into kf CHUNK at a time. */
static void tile_scores(const decode_ctx *c, float *ws, const row_run *runs, int64_t nruns,
                        prefetch_cursor *pf)
{
    const decode_shape *s = &c->shape;
    const int64_t stride = c->cache->entry_stride;
    const float *qt = ws + c->x.qt;
    float *sc = ws + c->x.s, *kf = ws + c->x.kf;
    for (int64_t q = 0; q < nruns; q++) {
        const row_run *run = &runs[q];
        if (c->route != ROUTE_F32 || c->cache->dtype == MLA_DTYPE_F32)
            prefetch_rows(c, pf, run->count);
        if (c->route == ROUTE_BF16_DOT) {
            c->k->gemm_bf16dot(run->count, s->mb, s->d, run->rows, stride / 2, 1, (const uint16_t *)qt,
                               2 * s->mb, sc + run->first * s->mb, s->mb, NULL);
            continue;
        }
        if (c->route == ROUTE_F16) {
            c->k->gemm_f16f16(run->count, s->mb, s->d, run->rows, stride, 1, (const uint16_t *)qt, s->mb,
                              sc + run->first * s->mb, s->mb, NULL);
            continue;
        }
        if (c->cache->dtype == MLA_DTYPE_F32) {
            c->k->gemm_f32(run->count, s->mb, s->d, run->rows, stride, 1, qt, s->mb,
                           sc + run->first * s->mb, s->mb, NULL);
            continue;
        }
        for (int64_t j = 0; j < run->count; j += CHUNK) {
            int64_t n = run->count - j < CHUNK ? run->count - j : CHUNK;
            prefetch_rows(c, pf, n);
            float *rows = kf + (run->first + j) * s->d;
            widen_rows(c, rows, (const char *)run->rows + j * stride * c->elem_cache, n, stride);
            c->k->gemm_f32(n, s->mb, s->d, rows, s->d, 1, qt, s->mb, sc + (run->first + j) * s->mb,
                           s->mb, NULL);
        }
    }
}

/* dst[2e] = even[e], dst[2e + 1] = odd[e] (0 without an odd row). */
static void interleave_pairs(uint16_t *dst, const uint16_t *even, const uint16_t *odd, int64_t n)
{
    for (int64_t e = 0; e < n; e++) {
        dst[2 * e] = even[e];
        dst[2 * e + 1] = odd ? odd[e] : 0;
    }
}

/* O = alpha * O + P^T V over the tile's n rows. Rows read in place go run
 * by run (alpha applies once; later runs add to O). The dot route packs P
 * (rounded to bf16) and V as pairs along the tile's rows, a zero row
 * completing an odd tile. */
static void tile_values(const decode_ctx *c, float *ws, const row_run *runs, int64_t nruns,
                        int64_t n)
{
    const decode_shape *s = &c->shape;
    const int64_t stride = c->cache->entry_stride;
    float *sc = ws + c->x.s, *o = ws + c->x.o, *alpha = ws + c->x.alpha;
    const float *ones = ws + c->x.ones;
    uint16_t *p16 = (uint16_t *)(ws + c->x.p16);
    if (c->route == ROUTE_F32 && c->cache->dtype != MLA_DTYPE_F32) { /* rows widened by tile_scores */
        c->k->gemm_f32(s->mb, s->l, n, sc, 1, s->mb, ws + c->x.kf, s->d, o, s->l, alpha);
        return;
    }
    if (c->route == ROUTE_F32) {
        for (int64_t q = 0; q < nruns; q++)
            c->k->gemm_f32(s->mb, s->l, runs[q].count, sc + runs[q].first * s->mb, 1, s->mb,
                           runs[q].rows, stride, o, s->l, q == 0 ? alpha : ones);
        return;
    }
    if (c->route == ROUTE_F16) {
        c->k->cvt_f32_f16(sc, p16, n * s->mb);
        for (int64_t q = 0; q < nruns; q++)
            c->k->gemm_f16f16(s->mb, s->l, runs[q].count, p16 + runs[q].first * s->mb, 1, s->mb,
                              runs[q].rows, stride, o, s->l, q == 0 ? alpha : ones);
        return;
    }
    uint16_t *pp = (uint16_t *)(ws + c->x.p_pairs), *vp = (uint16_t *)(ws + c->x.v_pairs);
    c->k->cvt_f32_bf16(sc, p16, n * s->mb);
    const uint16_t *v[TILE];
    for (int64_t q = 0; q < nruns; q++)
        for (int64_t j = 0; j < runs[q].count; j++)
            v[runs[q].first + j] = (const uint16_t *)runs[q].rows + j * stride;
    for (int64_t j = 0; j < n; j += 2) {
        bool odd = j + 1 < n;
        interleave_pairs(pp + j * s->mb, p16 + j * s->mb, odd ? p16 + (j + 1) * s->mb : NULL, s->mb);
        interleave_pairs(vp + j * s->l, v[j], odd ? v[j + 1] : NULL, s->l);
    }
    c->k->gemm_bf16dot(s->mb, s->l, mla_round_up(n, 2), pp, 1, s->mb, vp, 2 * s->l, o, s->l, alpha);
}

/* Online-softmax step over a tile's scores s [n][mb] for the first nr rows:
 * scores times score_scale, new running max, s -> exp(s - max), alpha =
 * exp(old max - new max), and the running sums. A row whose max is still
 * -inf uses 0 as its max, so its exps are 0 and nothing becomes NaN. Every
 * loop runs along the rows r, which are contiguous, so that it vectorizes. */
static void softmax_tile(const decode_ctx *c, float *ws, int64_t n, int64_t nr)
{
    const int64_t mb = c->shape.mb;
    const float scale = c->score_scale;
    float *s = ws + c->x.s, *m = ws + c->x.m, *l = ws + c->x.l, *alpha = ws + c->x.alpha;
    float mx[MAX_MB], sum[MAX_MB];
    for (int64_t r = 0; r < mb; r++) {
        mx[r] = m[r];
        sum[r] = 0.0f;
    }
    for (int64_t j = 0; j < n; j++) {
        float *row = s + j * mb;
        if (scale != 1.0f)
            for (int64_t r = 0; r < nr; r++)
                row[r] *= scale;
        for (int64_t r = 0; r < nr; r++)
            mx[r] = row[r] > mx[r] ? row[r] : mx[r];
    }
    for (int64_t r = 0; r < mb; r++) {
        float use = mx[r] == -INFINITY ? 0.0f : mx[r];
        alpha[r] = m[r] - use; /* pad rows: -inf - 0 */
        m[r] = mx[r];
        mx[r] = use;
    }
    for (int64_t j = 0; j < n; j++)
        for (int64_t r = 0; r < mb; r++)
            s[j * mb + r] -= mx[r];
    c->k->exp_f32(s, s, n * mb);
    c->k->exp_f32(alpha, alpha, mb);
    for (int64_t j = 0; j < n; j++)
        for (int64_t r = 0; r < mb; r++)
            sum[r] += s[j * mb + r];
    for (int64_t r = 0; r < nr; r++)
        l[r] = l[r] * alpha[r] + sum[r];
}

/* Masks scores of rows that may not see a key: row r (query i) sees keys
 * up to last_key0 + i. */
static void mask_tile(const decode_ctx *c, float *s, int64_t t, int64_t n, int64_t r0, int64_t nr,
                      int64_t last_key0)
{
    const int64_t mb = c->shape.mb, heads = c->a->num_heads;
    for (int64_t j = 0; j < n; j++)
        for (int64_t r = 0; r < nr; r++)
            if (t + j > last_key0 + (r0 + r) / heads)
                s[j * mb + r] = -INFINITY;
}

/* Writes the pass's rows: out = O / l and lse = m + ln l (0 and -inf for a
 * row that saw no key), to out/lse when `slot` < 0, else to the partials. */
static void finish_rows(const decode_ctx *c, float *ws, int64_t b, int64_t r0, int64_t nr,
                        int64_t slot)
{
    const mla_decode_args *a = c->a;
    const decode_shape *s = &c->shape;
    float *o = ws + c->x.o, *m = ws + c->x.m, *l = ws + c->x.l;
    for (int64_t r = 0; r < nr; r++) {
        float *row = o + r * s->l;
        float lse = -INFINITY;
        if (l[r] > 0.0f) {
            for (int64_t e = 0; e < s->l; e++)
                row[e] /= l[r];
            lse = m[r] + logf(l[r]);
        } else {
            memset(row, 0, (size_t)s->l * sizeof(float));
        }
        int64_t rr = r0 + r, i = rr / a->num_heads, h = rr % a->num_heads;
        if (slot >= 0) {
            memcpy(c->partial + (slot * s->rows + rr) * s->l, row, (size_t)s->l * sizeof(float));
            c->partial_lse[slot * s->rows + rr] = lse;
            continue;
        }
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
    const int64_t seq = a->seq_lens[b], last_key0 = seq - a->s_q; /* query 0 sees keys <= this */
    float *sc = ws + c->x.s, *o = ws + c->x.o, *ones = ws + c->x.ones;
    row_run runs[TILE];
    for (int64_t r = 0; r < s->mb; r++)
        ones[r] = 1.0f;
    for (int64_t pass = 0; pass < s->mblocks; pass++) {
        int64_t r0 = pass * s->mb_rows;
        int64_t nr = s->rows - r0 < s->mb_rows ? s->rows - r0 : s->mb_rows;
        /* the pass's last query sees keys up to last_key0 + its index */
        int64_t end = last_key0 + (r0 + nr - 1) / a->num_heads + 1;
        end = end < t1 ? end : t1;
        pack_queries(c, ws, b, r0, nr);
        for (int64_t r = 0; r < s->mb; r++) {
            ws[c->x.m + r] = -INFINITY;
            ws[c->x.l + r] = 0.0f;
        }
        memset(o, 0, (size_t)(s->mb * s->l) * sizeof(float));
        for (int64_t t = t0; t < end; t += TILE) {
            int64_t n = end - t < TILE ? end - t : TILE;
            int64_t nruns = split_tile(c, b, t, n, runs);
            prefetch_cursor pf = {.b = b, .pos = t + n, .end = t + n + TILE < end ? t + n + TILE : end};
            tile_scores(c, ws, runs, nruns, &pf);
            if (t + n - 1 > last_key0 + r0 / a->num_heads)
                mask_tile(c, sc, t, n, r0, nr, last_key0);
            softmax_tile(c, ws, n, nr);
            tile_values(c, ws, runs, nruns, n);
        }
        finish_rows(c, ws, b, r0, nr, slot);
    }
}

/* ---- parts and combine ----------------------------------------------------- */

/* Every segment of one schedule part. In batch-invariant mode a part's range
 * of a request may hold several splits, cut at multiples of split_blocks. */
static void run_part(const decode_ctx *c, float *ws, const mla_sched_part *p, const int32_t *prefix,
                     int64_t block_n, int64_t split_blocks)
{
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

/* out/lse of query row rr of request b from its splits' partials, merged in
 * split order: weights e^(lse_s - max) / sum, lse = max + ln(sum). */
static void combine_row(const decode_ctx *c, float *tmp, int64_t b, int64_t rr, int64_t slot0,
                        int64_t splits)
{
    const mla_decode_args *a = c->a;
    const int64_t rows = c->shape.rows, len = c->shape.l;
    float mx = -INFINITY;
    for (int64_t q = 0; q < splits; q++) {
        float v = c->partial_lse[(slot0 + q) * rows + rr];
        mx = v > mx ? v : mx;
    }
    float lse = -INFINITY;
    memset(tmp, 0, (size_t)len * sizeof(float));
    if (mx != -INFINITY) {
        float sum = 0.0f;
        for (int64_t q = 0; q < splits; q++)
            sum += expf(c->partial_lse[(slot0 + q) * rows + rr] - mx);
        for (int64_t q = 0; q < splits; q++) {
            float w = expf(c->partial_lse[(slot0 + q) * rows + rr] - mx) / sum;
            const float *o = c->partial + ((slot0 + q) * rows + rr) * len;
            for (int64_t e = 0; e < len; e++)
                tmp[e] += w * o[e];
        }
        lse = mx + logf(sum);
    }
    int64_t i = rr / a->num_heads, h = rr % a->num_heads, t = b * a->s_q + i;
    mla_convert_run(c->k, (char *)a->out + (t * a->out_token_stride + h * a->out_head_stride) * c->elem_q,
                    a->q_dtype, tmp, MLA_DTYPE_F32, len, 1.0f);
    if (a->lse)
        a->lse[(b * a->num_heads + h) * a->s_q + i] = lse;
}

void mla_decode_run(const mla_kernels *k, const mla_decode_args *a, const mla_kv_cache *cache,
                    const mla_sched_part *parts, int64_t num_parts, const int32_t *split_prefix,
                    int64_t block_n, int64_t split_blocks, void *workspace, int threads)
{
    decode_ctx c = {.k = k, .a = a, .cache = cache, .shape = shape_of(a),
                    .elem_q = mla_dtype_size(a->q_dtype), .elem_cache = mla_dtype_size(cache->dtype),
                    .route = route_of(k, a, cache)};
    c.score_scale = c.route == ROUTE_F32 ? 1.0f : a->scale;
    c.x = scratch_of(&c.shape);
    const int64_t slots = split_prefix[a->num_reqs];
    float *base = (float *)(((uintptr_t)workspace + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1));
    c.partial = base;
    c.partial_lse = c.partial + mla_round_up(slots * c.shape.rows * c.shape.l, ALIGN / 4);
    float *scratch = c.partial_lse + mla_round_up(slots * c.shape.rows, ALIGN / 4);
    const int64_t combine_rows = a->num_reqs * c.shape.rows;
#pragma omp parallel num_threads(threads)
    {
        float *ws = scratch + omp_get_thread_num() * c.x.total;
#pragma omp for schedule(dynamic, 1)
        for (int64_t p = 0; p < num_parts; p++)
            if (parts[p].begin_req < a->num_reqs)
                run_part(&c, ws, &parts[p], split_prefix, block_n, split_blocks);
#pragma omp for schedule(static)
        for (int64_t q = 0; q < combine_rows; q++) {
            int64_t b = q / c.shape.rows, splits = split_prefix[b + 1] - split_prefix[b];
            if (splits > 1)
                combine_row(&c, ws + c.x.o, b, q % c.shape.rows, split_prefix[b], splits);
        }
    }
}
