/*
 * Attention routes: which GEMM kernels run the two products of an attention
 * tile (scores S = K Qt, then O = alpha O + P^T V), in which element type,
 * and how queries, P and V are laid out for them. One table, read by the
 * drivers (decode now, prefill next) and by dispatch, which times each
 * backend's half-precision route against its f32 route at init.
 *
 *   f32       gemm_f32: q packed as f32 with the softmax scale folded in;
 *             keys read in place when f32, else widened by the driver.
 *   bf16-dot  gemm_bf16dot (vdpbf16ps, BFDOT), when q and the keys are bf16:
 *             q, P (rounded to bf16) and V packed as bf16 pairs along the
 *             GEMM depth; keys read in place; the scale applied to S.
 *   amx-bf16  gemm_bf16tile (AMX-BF16 TDPBF16PS), when q is bf16 and the
 *             keys bf16 or fp8 (converted to bf16 rows once per tile,
 *             shared by both GEMMs, the fp8 scale left to S and O), or
 *             f32 q with any keys on the caller's bf16_compute opt-in (q
 *             and keys rounded to bf16): the bf16-dot route's layouts on
 *             tiles.
 *   f16       gemm_f16f16 (FMLAL), when q and the keys are f16: the f32
 *             route's layouts with f16 elements, keys and V read in place,
 *             P rounded to f16; the scale applied to S.
 */
#ifndef MLA_COMMON_ATTENTION_ROUTE_H
#define MLA_COMMON_ATTENTION_ROUTE_H

#include "mla_backend.h"

/* A run of consecutive key (or value) rows, `stride` elements apart in the
 * tile's layout; `first` is the index of its first row in the tile. */
typedef struct mla_key_run {
    const void *rows;
    int64_t count, first;
} mla_key_run;

/* The values product of one tile: O [ld][width] = alpha O + P^T V (O's
 * rows ldo floats apart), with P the exp'd scores S [n][ld] and V's rows
 * given as runs (alpha scales O once, on the first run; `ones` is alpha's
 * all-ones twin for later runs).
 * alpha NULL starts O from 0, unread: a pass's first tile. V's elements
 * have the route's dtype. Drivers run it through mla_attn_tile_values
 * (attention.h), which keeps a masked key's V out of the rows that may not
 * see it. */
typedef struct mla_attn_values {
    int64_t ld, width, n;
    float *s;
    const mla_key_run *runs;
    int64_t nruns, stride;
    float *o;
    int64_t ldo;
    const float *alpha, *ones;
    float *scratch; /* mla_attn_route_scratch_floats floats */
} mla_attn_values;

/* Query rows one pack_q call packs: a block the transposition keeps in
 * registers (MLA_ATTN_PACK_ROWS x 16 words on AVX-512). */
#define MLA_ATTN_PACK_ROWS 16

/* A block of query rows for pack_q: rows r0 .. r0 + nr - 1 of the packed
 * queries (nr at most MLA_ATTN_PACK_ROWS); row i is `l` values at nope[i]
 * then `rope` at pe[i] (pe unread when rope is 0), in `dtype`. */
typedef struct mla_attn_qblock {
    const void *nope[MLA_ATTN_PACK_ROWS], *pe[MLA_ATTN_PACK_ROWS];
    int64_t r0, nr, l, rope;
    mla_dtype dtype;
} mla_attn_qblock;

typedef struct mla_attn_route {
    const char *name;
    /* the dtype q and the keys must have; MLA_DTYPE_F32 takes any (widened) */
    mla_dtype dtype;
    /* other operands are converted to `dtype`: fp8 keys always (the driver
     * dequantises them into rows both GEMMs read), f32 q and f32 or f16
     * keys when the caller opted into bf16 compute */
    bool converts;
    /* key rows converted per scores call where the cache is not in `dtype`:
     * a few for f32 (MLA_ATTN_WIDEN_ROWS), so the FMA kernel finds them in
     * L1; 0 for a whole run, since tiles load 16 rows at a time and stream
     * them from L2 well */
    int64_t convert_rows;
    /* key rows per tile (at most MLA_ATTN_TILE): the P.V GEMM's depth and
     * the scores GEMM's height; P.V reloads and stores its C (O) once per
     * tile, which a deeper tile pays less often */
    int64_t tile;
    /* elements packed in pairs along the depth: widths and row strides must
     * be multiples of this */
    int64_t pair;
    /* bytes of one packed query element */
    int64_t q_elem;
    /* the softmax scale is folded into the packed queries (else applied to
     * the scores) */
    bool q_scaled;
    /* decode asks for the next tile's cache rows (prefetcht2) while this
     * tile's scores run: the FMA routes' H=16 decode runs 7-10% faster for
     * it on Zen 4; the tile route streams its rows as well without, and its
     * H=16 B=32 decode ran 14-19% slower with it at 16 threads on the Xeon */
    bool prefetch_keys;
    /* offset in mla_kernels of the route's GEMM slot (its NULL: no route) */
    size_t kernel;
    /* Puts the block's query rows into the packed queries qt (ld rows),
     * with the softmax scale where q_scaled. stage is
     * MLA_ATTN_PACK_ROWS * (l + rope) floats of scratch. */
    void (*pack_q)(const struct mla_attn_route *route, const mla_kernels *k, void *qt, int64_t ld,
                   const mla_attn_qblock *q, float scale, float *stage);
    /* S[j][r] for n key rows (stride elements apart, d wide) in place:
     * s + j * ld. c_scale NULL starts S from 0; an all-ones c_scale adds to
     * S, continuing each element's chain (keys split over two arrays, as
     * MLA's k_nope and shared k_pe, give the bits of one array). */
    void (*scores)(const mla_kernels *k, int64_t n, int64_t ld, int64_t d, const void *keys,
                   int64_t stride, const void *qt, float *s, const float *c_scale);
    void (*values)(const mla_kernels *k, const mla_attn_values *v);
} mla_attn_route;

/* Whether the caller's bf16_compute opt-in applies: it is for f32 q. */
static inline bool mla_attn_opted_in(mla_dtype q_dtype, bool bf16_compute)
{
    return bf16_compute && q_dtype == MLA_DTYPE_F32;
}

/* Whether table k has the route's kernel. */
bool mla_attn_route_available(const mla_kernels *k, const mla_attn_route *route);

/* The route for these operands: a half-precision route whose kernel k has
 * and whose dtype q and the keys both have (or that converts them: see
 * `converts`; bf16_compute is the caller's opt-in), else f32. width and
 * stride are the key rows' (pair-packed routes need both even). */
const mla_attn_route *mla_attn_route_for(const mla_kernels *k, mla_dtype q_dtype,
                                         mla_dtype key_dtype, int64_t width, int64_t stride,
                                         bool bf16_compute);

/* The half-precision routes, in the order mla_attn_route_for tries them
 * (*count gets MLA_ATTN_HALF_ROUTES): what dispatch times at init for each
 * backend whose table has their kernel. */
#define MLA_ATTN_HALF_ROUTES 3
const mla_attn_route *mla_attn_half_routes(int *count);

/* Floats of per-thread scratch the values product of any route needs for a
 * tile of MLA_ATTN_TILE keys, ld query rows and `width` value columns
 * (64-byte multiples). */
int64_t mla_attn_route_scratch_floats(int64_t ld, int64_t width);

/* n values of route's half dtype from 1 to 1.76: timing probes meet no
 * denormal or overflow slow path. */
void mla_attn_route_probe_values(const mla_attn_route *route, uint16_t *x, int64_t n);

/* run(k, f32 route, ctx) and run(k, route, ctx), alternated `reps` times so
 * both see the same clock and neighbours: the best f32 time over the best
 * `route` time (> 1 when `route` is faster). */
typedef void mla_attn_route_probe_fn(const mla_kernels *k, const mla_attn_route *route, void *ctx);
double mla_attn_route_race(const mla_kernels *k, const mla_attn_route *route, int reps,
                           mla_attn_route_probe_fn *run, void *ctx);

/* Time of the f32 route's scores over `route`'s on the decode scores shape
 * (64 keys x 128 rows x 576), measured on this CPU: > 1 when `route` is
 * faster; 0 when it could not be measured. k's kernels must run here. */
double mla_attn_route_speedup(const mla_kernels *k, const mla_attn_route *route);

#endif
