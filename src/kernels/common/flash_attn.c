/*
 * Varlen flash attention driver. A unit of work is one head of one pass: up
 * to MLA_ATTN_MAX_ROWS consecutive queries of a request (a q-tile). Per
 * tile of the route's keys it runs the attention core, as decode does:
 *
 *   scores  S[j][r] = sum_d K[j][d] * Qt[d][r]      (keys along S's rows)
 *   softmax online over S's columns, masked on the causal diagonal
 *   P.V     O[r][e] = alpha[r] * O[r][e] + sum_j P[j][r] * V[j][e]
 *
 * with the attention route's kernels (attention_route.h): f32, or the
 * backend's bf16/f16 route when the inputs have its dtype. Keys and values
 * are read in place where the route's GEMMs can (f32 inputs; a half route's
 * own dtype); otherwise each tile's rows are widened to f32 once and shared
 * by all of the pass's query rows. MLA's shared k_pe is never broadcast:
 * the scores GEMM runs over k_nope, then continues each element's chain over
 * k_pe (an all-ones c_scale), which gives the bits of one concatenated key.
 *
 * Up to MLA_PREFILL_GROUP_BLOCKS consecutive blocks of one head walk the
 * keys together (a unit of work), so each key tile is fetched once for all
 * of them. A causal block stops at the last key its last query sees, so
 * tiles above the diagonal are skipped; the tile that straddles it is
 * masked by the softmax. Units are handed to threads costliest first
 * (dynamic), which keeps the long units at the bottom of a causal triangle
 * from finishing last; each block depends only on its inputs, so the
 * result is the same for any thread count or grouping.
 */
#include "flash_attn.h"

#include "attention.h"
#include "attention_route.h"
#include "core/parallel.h"
#include "core/policy.h"
#include "core/size.h"
#include "elementwise.h"

#include <stdlib.h>
#include <string.h>

/* Rows of a block, padded: the scratch arrays' row count. */
#define LD_MAX ((MLA_ATTN_MAX_ROWS + MLA_ATTN_ROW_MULTIPLE - 1) / MLA_ATTN_ROW_MULTIPLE * MLA_ATTN_ROW_MULTIPLE)
/* The all-ones array scales both S's rows (keys) and O's (queries). */
#define ONES (LD_MAX > MLA_ATTN_TILE ? LD_MAX : MLA_ATTN_TILE)
#define GROUP MLA_PREFILL_GROUP_BLOCKS

/* A unit of work: blocks [block0, block0 + blocks) of request `seq`, block
 * i holding its queries [i * block_rows, min((i + 1) * block_rows, n_q)). */
typedef struct fa_unit {
    int64_t seq, block0, blocks, block_rows, cost;
} fa_unit;

/* Per-thread scratch, offsets in floats; the per-block arrays GROUP times.
 * S is one block's: a block's scores are exp'd and consumed by its P.V
 * before the next block's are computed, and one S kept warm in L2 leaves
 * room for the group's Qt and O. */
typedef struct fa_scratch {
    int64_t qt, o, m, l, alpha;      /* per block, each `stride` floats on */
    int64_t qt_n, o_n, rows_n;       /* one block's share of each         */
    int64_t s, kf, vf, qrow, ones, route, total;
} fa_scratch;

static fa_scratch scratch_of(const mla_flash_attn_args *a)
{
    fa_scratch x;
    int64_t at = 0, step = MLA_ALIGN / (int64_t)sizeof(float);
    x.qt_n = mla_round_up(a->qk_dim * LD_MAX, step);
    x.o_n = mla_round_up(LD_MAX * a->v_dim, step);
    x.rows_n = mla_round_up(LD_MAX, step);
#define PLACE(field, floats) x.field = at, at += mla_round_up(floats, step)
    PLACE(qt, GROUP * x.qt_n);
    PLACE(o, GROUP * x.o_n);
    PLACE(m, GROUP * x.rows_n);
    PLACE(l, GROUP * x.rows_n);
    PLACE(alpha, GROUP * x.rows_n);
    PLACE(s, MLA_ATTN_TILE * LD_MAX);
    PLACE(kf, MLA_ATTN_TILE * a->qk_dim);
    PLACE(vf, MLA_ATTN_TILE * a->v_dim);
    PLACE(qrow, MLA_ATTN_PACK_ROWS * a->qk_dim);
    PLACE(ones, ONES);
    PLACE(route, mla_attn_route_scratch_floats(LD_MAX, a->v_dim));
#undef PLACE
    x.total = at;
    return x;
}

/* At most this many units: each request of n > 0 queries has
 * ceil(n / MLA_ATTN_MAX_ROWS) <= n / MLA_ATTN_MAX_ROWS + 1 blocks, so at most
 * that many units too. */
static int64_t max_units(const mla_flash_attn_args *a)
{
    int64_t nonempty = a->num_seqs < a->total_q ? a->num_seqs : a->total_q;
    return a->total_q / MLA_ATTN_MAX_ROWS + nonempty;
}

bool mla_flash_attn_workspace(const mla_flash_attn_args *a, int threads, int64_t *bytes)
{
    int64_t units, scratch, total;
    if (!mla_mul_size(max_units(a), (int64_t)sizeof(fa_unit), &units) ||
        !mla_mul_size(scratch_of(a).total, (int64_t)threads * (int64_t)sizeof(float), &scratch) ||
        __builtin_add_overflow(mla_round_up(units, MLA_ALIGN), scratch, &total) ||
        __builtin_add_overflow(total, (int64_t)MLA_ALIGN, &total))
        return false;
    *bytes = total;
    return true;
}

/* ---- one unit -------------------------------------------------------------- */

typedef struct fa_ctx {
    const mla_kernels *k;
    const mla_flash_attn_args *a;
    const mla_attn_route *route;
    fa_scratch x;
    int64_t elem, nope;  /* bytes per element; k_nope's width Dqk - R      */
    bool in_place;       /* the route's GEMMs read k and v as they are      */
    float score_scale;   /* applied to S: 1 where Qt carries the scale      */
} fa_ctx;

/* One block of a unit: its queries, causal rule and online-softmax state. */
typedef struct fa_block {
    int64_t t0, rows, ld, end; /* first query (of all T), rows, padded, keys seen */
    mla_attn_causal causal;
    mla_attn_rows st;
    void *qt;
    float *s, *o;
} fa_block;

static const char *row_of(const fa_ctx *c, const void *base, int64_t t, int64_t t_stride, int64_t h,
                          int64_t h_stride)
{
    return (const char *)base + (t * t_stride + h * h_stride) * c->elem;
}

/* Block g of unit u for head h in the thread's scratch: its queries packed
 * for the route's scores GEMM (Qt, ld rows, padding rows 0) and a fresh
 * online softmax. */
static fa_block start_block(const fa_ctx *c, float *ws, const fa_unit *u, int64_t g, int64_t h)
{
    const mla_flash_attn_args *a = c->a;
    const fa_scratch *x = &c->x;
    const int64_t n_q = a->cu_seqlens_q[u->seq + 1] - a->cu_seqlens_q[u->seq];
    const int64_t n_k = a->cu_seqlens_k[u->seq + 1] - a->cu_seqlens_k[u->seq];
    const int64_t row0 = (u->block0 + g) * u->block_rows;
    fa_block blk = {.t0 = a->cu_seqlens_q[u->seq] + row0,
                    .rows = n_q - row0 < u->block_rows ? n_q - row0 : u->block_rows,
                    /* bottom-right aligned: query i sees keys j <= n_k - n_q + i */
                    .causal = {.last_key0 = n_k - n_q, .row0 = row0, .rows_per_query = 1},
                    .qt = ws + x->qt + g * x->qt_n, .s = ws + x->s,
                    .o = ws + x->o + g * x->o_n};
    blk.ld = mla_round_up(blk.rows, MLA_ATTN_ROW_MULTIPLE);
    blk.end = a->causal ? mla_attn_causal_end(&blk.causal, blk.rows) : n_k;
    blk.end = blk.end < 0 ? 0 : blk.end < n_k ? blk.end : n_k;
    blk.st = (mla_attn_rows){.nr = blk.rows, .ld = blk.ld, .m = ws + x->m + g * x->rows_n,
                             .l = ws + x->l + g * x->rows_n, .alpha = ws + x->alpha + g * x->rows_n};
    memset(blk.qt, 0, (size_t)(a->qk_dim * blk.ld * c->route->q_elem));
    for (int64_t r = 0; r < blk.rows; r += MLA_ATTN_PACK_ROWS) {
        mla_attn_qblock q = {.r0 = r, .nr = blk.rows - r < MLA_ATTN_PACK_ROWS ? blk.rows - r : MLA_ATTN_PACK_ROWS,
                             .l = a->qk_dim, .dtype = a->dtype};
        for (int64_t i = 0; i < q.nr; i++)
            q.nope[i] = row_of(c, a->q, blk.t0 + r + i, a->q_token_stride, h, a->q_head_stride);
        c->route->pack_q(c->route, c->k, blk.qt, blk.ld, &q, a->scale, ws + x->qrow);
    }
    mla_attn_rows_start(&blk.st);
    return blk;
}

/* Asks for head h's k_nope and v rows of key j (k_pe's rows, shared by
 * the heads and contiguous, the hardware prefetchers find). */
static void prefetch_key(const fa_ctx *c, int64_t j, int64_t h)
{
    const mla_flash_attn_args *a = c->a;
    mla_prefetch_span(row_of(c, a->k, j, a->k_token_stride, h, a->k_head_stride), c->nope * c->elem);
    mla_prefetch_span(row_of(c, a->v, j, a->v_token_stride, h, a->v_head_stride), a->v_dim * c->elem);
}

/* Key and value rows [key, key + n) of head h as f32, into kf [n][Dqk]
 * (k_nope then k_pe) and vf [n][Dv]. */
static void widen_tile(const fa_ctx *c, float *ws, int64_t key, int64_t n, int64_t h)
{
    const mla_flash_attn_args *a = c->a;
    float *kf = ws + c->x.kf, *vf = ws + c->x.vf;
    for (int64_t j = key; j < key + n; j++, kf += a->qk_dim, vf += a->v_dim) {
        if (j + MLA_PREFILL_COPY_PREFETCH_ROWS < key + n)
            prefetch_key(c, j + MLA_PREFILL_COPY_PREFETCH_ROWS, h);
        mla_convert_run(c->k, kf, MLA_DTYPE_F32, row_of(c, a->k, j, a->k_token_stride, h, a->k_head_stride),
                        a->dtype, c->nope, 1.0f);
        if (a->rope_dim > 0)
            mla_convert_run(c->k, kf + c->nope, MLA_DTYPE_F32, row_of(c, a->k_pe, j, a->k_pe_token_stride, 0, 0),
                            a->dtype, a->rope_dim, 1.0f);
        mla_convert_run(c->k, vf, MLA_DTYPE_F32, row_of(c, a->v, j, a->v_token_stride, h, a->v_head_stride),
                        a->dtype, a->v_dim, 1.0f);
    }
}

/* The block's S for keys [key, key + n) of head h: over kf, or in place
 * over k_nope and then k_pe. */
static void tile_scores(const fa_ctx *c, float *ws, const fa_block *b, int64_t key, int64_t n, int64_t h)
{
    const mla_flash_attn_args *a = c->a;
    if (!c->in_place) {
        c->route->scores(c->k, n, b->ld, a->qk_dim, ws + c->x.kf, a->qk_dim, b->qt, b->s, NULL);
        return;
    }
    c->route->scores(c->k, n, b->ld, c->nope, row_of(c, a->k, key, a->k_token_stride, h, a->k_head_stride),
                     a->k_token_stride, b->qt, b->s, NULL);
    if (a->rope_dim > 0)
        c->route->scores(c->k, n, b->ld, a->rope_dim, row_of(c, a->k_pe, key, a->k_pe_token_stride, 0, 0),
                         a->k_pe_token_stride, (const char *)b->qt + c->nope * b->ld * c->route->q_elem,
                         b->s, ws + c->x.ones);
}

/* The block's O = alpha O + P^T V over values [key, key + n) of the
 * request whose keys start at k0, head h (O = P^T V on its first tile, key
 * 0); `mask` as the tile's softmax took it. */
static void tile_values(const fa_ctx *c, float *ws, const fa_block *b, int64_t k0, int64_t key,
                        int64_t n, int64_t h, const mla_attn_causal *mask)
{
    const mla_flash_attn_args *a = c->a;
    const mla_key_run run = {
        .rows = c->in_place ? row_of(c, a->v, k0 + key, a->v_token_stride, h, a->v_head_stride)
                            : (const void *)(ws + c->x.vf),
        .count = n, .first = 0};
    mla_attn_values values = {
        .ld = b->ld, .width = a->v_dim, .n = n, .s = b->s, .runs = &run, .nruns = 1,
        .stride = c->in_place ? a->v_token_stride : a->v_dim, .o = b->o, .ldo = a->v_dim,
        .alpha = key == 0 ? NULL : b->st.alpha,
        .ones = ws + c->x.ones, .scratch = ws + c->x.route,
    };
    mla_attn_tile_values(c->k, c->route, &values, mask, key, b->rows);
}

/* out and lse of the block's rows: O / l and m + ln l (0 and -inf for a row
 * that saw no key). */
static void finish_block(const fa_ctx *c, const fa_block *b, int64_t h)
{
    const mla_flash_attn_args *a = c->a;
    for (int64_t r = 0; r < b->rows; r++) {
        float *o = b->o + r * a->v_dim;
        float lse = mla_attn_finish_row(o, a->v_dim, b->st.m[r], b->st.l[r], 1.0f);
        char *dst = (char *)a->out + ((b->t0 + r) * a->out_token_stride + h * a->out_head_stride) * c->elem;
        mla_convert_run(c->k, dst, a->dtype, o, MLA_DTYPE_F32, a->v_dim, 1.0f);
        if (a->lse)
            a->lse[h * a->total_q + b->t0 + r] = lse;
    }
}

static void run_unit(const fa_ctx *c, float *ws, const fa_unit *u, int64_t h)
{
    const mla_flash_attn_args *a = c->a;
    const int64_t k0 = a->cu_seqlens_k[u->seq];
    fa_block blocks[GROUP];
    int64_t end = 0;
    for (int64_t g = 0; g < u->blocks; g++) {
        blocks[g] = start_block(c, ws, u, g, h);
        end = blocks[g].end > end ? blocks[g].end : end;
    }
    const int64_t tile = c->route->tile;
    for (int64_t key = 0; key < end; key += tile) {
        int64_t n = end - key < tile ? end - key : tile;
        if (!c->in_place)
            widen_tile(c, ws, k0 + key, n, h);
        for (int64_t g = 0; g < u->blocks; g++) {
            const fa_block *b = &blocks[g];
            if (key >= b->end)
                continue;
            int64_t nb = b->end - key < n ? b->end - key : n;
            const mla_attn_causal *mask =
                a->causal && mla_attn_causal_straddles(&b->causal, key, nb) ? &b->causal : NULL;
            tile_scores(c, ws, b, k0 + key, nb, h);
            mla_attn_softmax_tile(c->k, &b->st, b->s, nb, c->score_scale, mask, key);
            tile_values(c, ws, b, k0, key, nb, h, mask);
        }
    }
    for (int64_t g = 0; g < u->blocks; g++)
        finish_block(c, &blocks[g], h);
}

/* ---- units and threads ------------------------------------------------------ */

/* Every request's blocks (its queries split evenly, at most
 * MLA_ATTN_MAX_ROWS each), GROUP consecutive ones to a unit, with the unit's
 * cost: rows times the keys they walk, plus a tile's worth (the route's
 * `tile` keys) of fixed work per block. Returns how many. */
static int64_t plan_units(const mla_flash_attn_args *a, int64_t tile, fa_unit *out)
{
    int64_t count = 0;
    for (int64_t b = 0; b < a->num_seqs; b++) {
        int64_t n_q = a->cu_seqlens_q[b + 1] - a->cu_seqlens_q[b];
        int64_t n_k = a->cu_seqlens_k[b + 1] - a->cu_seqlens_k[b];
        if (n_q == 0)
            continue;
        int64_t blocks = mla_ceil_div(n_q, MLA_ATTN_MAX_ROWS), rows = mla_ceil_div(n_q, blocks);
        for (int64_t first = 0; first < blocks; first += GROUP) {
            fa_unit u = {.seq = b, .block0 = first, .block_rows = rows,
                         .blocks = blocks - first < GROUP ? blocks - first : GROUP};
            for (int64_t i = first; i < first + u.blocks; i++) {
                int64_t nr = n_q - i * rows < rows ? n_q - i * rows : rows, keys = n_k;
                if (a->causal) {
                    keys = n_k - n_q + i * rows + nr;
                    keys = keys < 0 ? 0 : keys < n_k ? keys : n_k;
                }
                u.cost += nr * (keys + tile);
            }
            out[count++] = u;
        }
    }
    return count;
}

static int costliest_first(const void *x, const void *y)
{
    const fa_unit *p = x, *q = y;
    if (p->cost != q->cost)
        return p->cost < q->cost ? 1 : -1;
    if (p->seq != q->seq)
        return p->seq < q->seq ? -1 : 1;
    return p->block0 < q->block0 ? -1 : p->block0 > q->block0;
}

/* Half routes pack k in pairs along the depth: k_nope's and k_pe's widths
 * and every key stride must be even. Returns the width to ask the route
 * table about (2 when all are even, else 1). */
static int64_t key_parity(const mla_flash_attn_args *a)
{
    int64_t nope = a->qk_dim - a->rope_dim;
    int64_t any = nope | a->rope_dim | a->k_token_stride | a->k_head_stride |
                  (a->rope_dim > 0 ? a->k_pe_token_stride : 0);
    return any % 2 == 0 ? 2 : 1;
}

/* A call on the threads: each task, with scratch of its own, takes the
 * (unit, head) items, costliest first, one at a time as it finishes the
 * last. */
typedef struct fa_run {
    const fa_ctx *c;
    const fa_unit *units;
    int64_t work;
    float *scratch;
    atomic_int_least64_t next;
} fa_run;

static void run_worker(int64_t worker, void *ctx)
{
    fa_run *r = ctx;
    const int64_t heads = r->c->a->num_heads;
    float *ws = r->scratch + worker * r->c->x.total;
    for (int64_t i = 0; i < ONES; i++)
        ws[r->c->x.ones + i] = 1.0f;
    for (int64_t w; (w = mla_parallel_claim(&r->next)) < r->work;)
        run_unit(r->c, ws, &r->units[w / heads], w % heads);
}

/* The call on the given route (the one mla_attn_route_for gives, or the
 * f32 route, which takes any input). */
static void run_on_route(const mla_kernels *k, const mla_flash_attn_args *a, void *workspace,
                         int threads, const mla_attn_route *route)
{
    fa_ctx c = {.k = k, .a = a, .x = scratch_of(a), .elem = mla_dtype_size(a->dtype),
                .nope = a->qk_dim - a->rope_dim, .route = route};
    c.in_place = c.route->dtype != MLA_DTYPE_F32;
    c.score_scale = c.route->q_scaled ? 1.0f : a->scale;
    fa_unit *units = mla_align_ptr(workspace);
    int64_t count = plan_units(a, route->tile, units);
    qsort(units, (size_t)count, sizeof *units, costliest_first);
    float *scratch = (float *)((char *)units + mla_round_up(max_units(a) * (int64_t)sizeof(fa_unit),
                                                            MLA_ALIGN));
    fa_run run = {.c = &c, .units = units, .work = count * a->num_heads, .scratch = scratch};
    atomic_init(&run.next, 0);
    const int64_t workers = run.work < threads ? run.work : threads;
    mla_parallel_for(workers, threads, run_worker, &run);
}

const mla_attn_route *mla_flash_attn_route(const mla_kernels *k, const mla_flash_attn_args *a)
{
    int64_t parity = key_parity(a);
    return mla_attn_route_for(k, a->dtype, a->dtype, parity, parity, false);
}

void mla_flash_attn_run(const mla_kernels *k, const mla_flash_attn_args *a, void *workspace,
                        int threads)
{
    run_on_route(k, a, workspace, threads, mla_flash_attn_route(k, a));
}

/* ---- the prefill route timing ------------------------------------------------- */

/* One causal request of PROBE_T tokens, one head, MLA's 192/128 with a
 * shared k_pe of 64: a few tiles of each kind (full, diagonal), ~21 MFLOP. */
enum { PROBE_T = 256, PROBE_QK = 192, PROBE_V = 128, PROBE_R = 64, PROBE_REPS = 3 };

/* The probe call on either route; the f32 route widens the same halves. */
typedef struct probe_call {
    const mla_flash_attn_args *a;
    void *workspace;
} probe_call;

static void run_probe(const mla_kernels *k, const mla_attn_route *route, void *ctx)
{
    const probe_call *p = ctx;
    run_on_route(k, p->a, p->workspace, 1, route);
}

double mla_flash_attn_route_speedup(const mla_kernels *k, const mla_attn_route *route)
{
    const int64_t T = PROBE_T, nope = PROBE_QK - PROBE_R;
    const int32_t cu[2] = {0, PROBE_T};
    const int64_t elems = T * (PROBE_QK + nope + PROBE_R + 2 * PROBE_V);
    mla_flash_attn_args a = {
        .num_seqs = 1, .num_heads = 1, .qk_dim = PROBE_QK, .v_dim = PROBE_V, .rope_dim = PROBE_R,
        .causal = true, .scale = 0.1f, .dtype = route->dtype, .total_q = T, .total_k = T,
        .cu_seqlens_q = cu, .cu_seqlens_k = cu,
        .q_token_stride = PROBE_QK, .q_head_stride = PROBE_QK,
        .k_token_stride = nope, .k_head_stride = nope, .k_pe_token_stride = PROBE_R,
        .v_token_stride = PROBE_V, .v_head_stride = PROBE_V,
        .out_token_stride = PROBE_V, .out_head_stride = PROBE_V};
    int64_t ws_bytes;
    if (!mla_flash_attn_workspace(&a, 1, &ws_bytes))
        return 0.0;
    uint16_t *data = malloc((size_t)elems * sizeof *data);
    void *workspace = malloc((size_t)ws_bytes);
    if (!data || !workspace) {
        free(data);
        free(workspace);
        return 0.0; /* unknown: keep the f32 route */
    }
    mla_attn_route_probe_values(route, data, elems);
    a.q = data;
    a.k = data + T * PROBE_QK;
    a.k_pe = (const uint16_t *)a.k + T * nope;
    a.v = (const uint16_t *)a.k_pe + T * PROBE_R;
    a.out = (uint16_t *)a.v + T * PROBE_V;
    probe_call p = {.a = &a, .workspace = workspace};
    double speedup = mla_attn_route_race(k, route, PROBE_REPS, run_probe, &p);
    free(data);
    free(workspace);
    return speedup;
}
