#include "attention.h"

#include "core/policy.h"
#include "core/size.h"
#include "elementwise.h"
#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

void mla_attn_rows_start(const mla_attn_rows *st)
{
    for (int64_t r = 0; r < st->ld; r++) {
        st->m[r] = -INFINITY;
        st->l[r] = 0.0f;
    }
}

/* Rows r of S's key row j (key key0 + j) that the causal rule hides: the
 * first ones, as later rows see more keys. */
static int64_t hidden_rows(const mla_attn_causal *c, int64_t key, int64_t nr)
{
    int64_t first_seeing = (key - c->last_key0) * c->rows_per_query - c->row0;
    return first_seeing < 0 ? 0 : first_seeing < nr ? first_seeing : nr;
}

_Static_assert(MLA_ATTN_MAX_ROWS <= MLA_SOFTMAX_MAX_ROWS, "a pass's rows fit softmax_tile");

/* The mask as the kernel takes it: per key row, the rows that may not see
 * it. The online softmax itself is the backend's softmax_tile kernel, one
 * source built for each ISA (kernels/softmax_tile_body.h). */
void mla_attn_softmax_tile(const mla_kernels *k, const mla_attn_rows *st, float *s, int64_t n,
                           float score_scale, const mla_attn_causal *mask, int64_t key0)
{
    int64_t hidden[MLA_ATTN_TILE];
    for (int64_t j = 0; mask && j < n; j++)
        hidden[j] = hidden_rows(mask, key0 + j, st->nr);
    k->softmax_tile(s, n, st->ld, st->nr, score_scale, mask ? hidden : NULL, st->m, st->l,
                    st->alpha);
}

/* Keys of the tile [key0, key0 + n) that every row of the pass sees: the
 * first ones, up to the last key its first row sees. */
static int64_t seen_by_all(const mla_attn_causal *c, int64_t key0, int64_t n)
{
    int64_t seen = mla_attn_causal_end(c, 1) - key0; /* the first row's end */
    return seen < 0 ? 0 : seen < n ? seen : n;
}

/* Value row j of the tile: in its run, elem-byte elements. */
static const void *value_row(const mla_attn_values *v, int64_t j, int64_t elem)
{
    const mla_key_run *run = v->runs;
    while (j >= run->first + run->count)
        run++;
    return (const char *)run->rows + (j - run->first) * v->stride * elem;
}

/* Whether one of the n values at x (f32, bf16 or f16, at any byte address)
 * is an inf or NaN: x - x is not 0, or the exponent bits are all ones. */
static bool any_not_finite(const void *x, mla_dtype dtype, int64_t n)
{
    const size_t size = (size_t)mla_dtype_size(dtype);
    const char *p = x;
    int found = 0;
    if (dtype == MLA_DTYPE_F32) {
        for (int64_t i = 0; i < n; i++) {
            float f = mla_load_f32(p + i * size);
            found |= !(f - f == 0.0f);
        }
        return found;
    }
    const uint16_t all_ones = dtype == MLA_DTYPE_BF16 ? 0x7f80u : 0x7c00u;
    for (int64_t i = 0; i < n; i++)
        found |= (mla_load_u16(p + i * size) & all_ones) == all_ones;
    return found;
}

/* O = alpha O (0 on the pass's first tile, alpha NULL) for the values
 * product of a tile none of whose keys every row sees. */
static void rescale_only(const mla_attn_values *v)
{
    for (int64_t r = 0; r < v->ld; r++)
        for (int64_t e = 0; e < v->width; e++)
            v->o[r * v->ldo + e] = v->alpha ? v->alpha[r] * v->o[r * v->ldo + e] : 0.0f;
}

void mla_attn_tile_values(const mla_kernels *k, const mla_attn_route *route,
                          const mla_attn_values *v, const mla_attn_causal *mask, int64_t key0,
                          int64_t nr)
{
    const int64_t seen = mask ? seen_by_all(mask, key0, v->n) : v->n;
    const int64_t elem = mla_dtype_size(route->dtype);
    bool poisoned = false;
    for (int64_t j = seen; j < v->n && !poisoned; j++)
        poisoned = any_not_finite(value_row(v, j, elem), route->dtype, v->width);
    if (!poisoned) { /* a 0 in P times a finite V adds nothing */
        route->values(k, v);
        return;
    }
    mla_key_run runs[MLA_ATTN_TILE];
    mla_attn_values head = *v;
    head.n = seen;
    head.runs = runs;
    head.nruns = 0;
    for (int64_t q = 0; q < v->nruns && v->runs[q].first < seen; q++) {
        runs[head.nruns] = v->runs[q];
        if (runs[head.nruns].count > seen - runs[head.nruns].first)
            runs[head.nruns].count = seen - runs[head.nruns].first;
        head.nruns++;
    }
    if (seen > 0)
        route->values(k, &head);
    else
        rescale_only(v);
    float *row = v->scratch; /* route->values is done with it */
    for (int64_t j = seen; j < v->n; j++) {
        const float *vj = mla_widen_piece(k, value_row(v, j, elem), route->dtype, 0, v->width, row);
        for (int64_t r = hidden_rows(mask, key0 + j, nr); r < nr; r++)
            k->scale_add_f32(v->o + r * v->ldo, vj, v->s[j * v->ld + r], v->width);
    }
}

int64_t mla_attn_causal_end(const mla_attn_causal *c, int64_t nr)
{
    return c->last_key0 + (c->row0 + nr - 1) / c->rows_per_query + 1;
}

bool mla_attn_causal_straddles(const mla_attn_causal *c, int64_t key0, int64_t n)
{
    return key0 + n - 1 > c->last_key0 + c->row0 / c->rows_per_query;
}

float mla_attn_row_lse(float m, float l)
{
    return l == 0.0f ? -INFINITY : m + logf(l);
}

float mla_attn_finish_row(float *o, int64_t width, float m, float l, float scale)
{
    if (l == 0.0f) {
        memset(o, 0, (size_t)width * sizeof(float));
        return -INFINITY;
    }
    /* one division per row: a divide per element (512 of them a row) cost
     * decode's short splits 6% of their time */
    const float inv = scale / l;
    for (int64_t e = 0; e < width; e++)
        o[e] *= inv;
    return mla_attn_row_lse(m, l);
}

/* +inf is how FlashAttention-style code reports an empty row: empty here. */
static float empty_if_inf(float lse)
{
    return lse == INFINITY ? -INFINITY : lse;
}

/* exp(lse - mx) for a partial's LSE (empty read as -inf) against the
 * largest: exactly 1 for the largest itself, whose expf(0) is 1, without
 * calling expf (the merge computes two weights a row, and one is always
 * the largest's). A NaN mx still gives NaN. */
static float exp_below_max(float lse, float mx)
{
    const float v = empty_if_inf(lse);
    return v == mx ? 1.0f : expf(v - mx);
}

/* The largest LSE, empty ones read as -inf; NaN if any is NaN (a plain
 * `v > mx` would skip it, and a NaN beside empty partials would come out as
 * an empty row). */
static float merge_max(const float *lse, int64_t lse_stride, int64_t count)
{
    float mx = -INFINITY;
    for (int64_t q = 0; q < count; q++) {
        float v = empty_if_inf(lse[q * lse_stride]);
        mx = v > mx || isnan(v) ? v : mx; /* once NaN, stays NaN */
    }
    return mx;
}

float mla_attn_merge_row(const mla_kernels *k, float *dst, int64_t width, const float *o,
                         int64_t o_stride, const float *lse, const float *norm,
                         int64_t lse_stride, int64_t count, float scale)
{
    float mx = merge_max(lse, lse_stride, count);
    memset(dst, 0, (size_t)width * sizeof(float));
    if (mx == -INFINITY)
        return -INFINITY;
    /* a NaN max makes every weight, dst and the result NaN from here on */
    float sum = 0.0f;
    for (int64_t q = 0; q < count; q++)
        sum += exp_below_max(lse[q * lse_stride], mx);
    for (int64_t q = 0; q < count; q++) {
        float w = exp_below_max(lse[q * lse_stride], mx) / sum;
        if (norm && w != 0.0f) /* an empty row's l is 0 */
            w /= norm[q * lse_stride];
        w *= scale;
        /* the next partial's row, asked for while this one is added: the
         * rows were written by other threads, and a core keeps more of
         * their misses in flight this way (the combine of a 16-way split
         * reads 32 KB a row) */
        if (q + 1 < count)
            mla_prefetch_span(o + (q + 1) * o_stride, width * (int64_t)sizeof(float));
        k->scale_add_f32(dst, o + q * o_stride, w, width);
    }
    return mx + logf(sum);
}

float mla_attn_merge_weights(const float lse[2], float w[2])
{
    float mx = merge_max(lse, 1, 2);
    w[0] = w[1] = 0.0f;
    if (mx == -INFINITY)
        return -INFINITY;
    /* mla_attn_merge_row's expressions for count 2, each exp once */
    const float e0 = exp_below_max(lse[0], mx), e1 = exp_below_max(lse[1], mx);
    const float sum = 0.0f + e0 + e1;
    w[0] = e0 / sum;
    w[1] = e1 / sum;
    return mx + logf(sum);
}
