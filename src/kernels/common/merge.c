#include "merge.h"

#include "attention.h"
#include "elementwise.h"
#include "core/policy.h"

#include <stdint.h>

/* Row (t, h) of the inputs and of out, in bytes from their bases. */
static int64_t in_offset(const mla_merge_attn_args *a, int64_t t, int64_t h, int64_t elem)
{
    return (t * a->token_stride + h * a->head_stride) * elem;
}

static int64_t out_offset(const mla_merge_attn_args *a, int64_t t, int64_t h, int64_t elem)
{
    return (t * a->out_token_stride + h * a->out_head_stride) * elem;
}

/* Row (t, h) past the tokens with context: the suffix as it is. When out is
 * the suffix itself (the only overlap the checks allow) there is nothing to
 * move. */
static void copy_suffix_row(const mla_kernels *k, const mla_merge_attn_args *a, int64_t t,
                            int64_t h, int64_t elem)
{
    const char *src = (const char *)a->suffix + in_offset(a, t, h, elem);
    char *dst = (char *)a->out + out_offset(a, t, h, elem);
    if (dst != src)
        k->copy_stream(dst, src, a->head_dim * elem);
    if (a->out_lse)
        a->out_lse[h * a->num_tokens + t] = a->suffix_lse[h * a->num_tokens + t];
}

/* Row (t, h) with context, in MLA_MERGE_CHUNK pieces: each piece is merged
 * on the stack before the same piece of out is written, so out may be
 * either input exactly (same strides: piece for piece the same bytes). out
 * is written with streaming stores, as a memcpy of its size would be: no
 * read-for-ownership of lines the merge overwrites whole. */
static void merge_row(const mla_kernels *k, const mla_merge_attn_args *a, int64_t t, int64_t h,
                      int64_t elem)
{
    _Alignas(64) float in[2][MLA_MERGE_CHUNK], sum[MLA_MERGE_CHUNK];
    _Alignas(64) uint16_t half[MLA_MERGE_CHUNK];
    const char *p = (const char *)a->prefix + in_offset(a, t, h, elem);
    const char *s = (const char *)a->suffix + in_offset(a, t, h, elem);
    char *o = (char *)a->out + out_offset(a, t, h, elem);
    const int64_t at = h * a->num_tokens + t;
    const float lse[2] = {a->prefix_lse[at], a->suffix_lse[at]};
    float merged = 0.0f;
    for (int64_t e = 0; e < a->head_dim; e += MLA_MERGE_CHUNK) {
        int64_t n = a->head_dim - e < MLA_MERGE_CHUNK ? a->head_dim - e : MLA_MERGE_CHUNK;
        merged = mla_attn_merge_pair(k, sum, n, mla_widen_piece(k, p, a->dtype, e, n, in[0]),
                                     mla_widen_piece(k, s, a->dtype, e, n, in[1]), lse);
        const void *piece = sum;
        if (a->dtype != MLA_DTYPE_F32) {
            mla_convert_run(k, half, a->dtype, sum, MLA_DTYPE_F32, n, 1.0f);
            piece = half;
        }
        k->copy_stream(o + e * elem, piece, n * elem);
    }
    if (a->out_lse)
        a->out_lse[at] = merged;
}

void mla_merge_run(const mla_kernels *k, const mla_merge_attn_args *a, int64_t with_context,
                   int threads)
{
    const int64_t heads = a->num_heads, rows = a->num_tokens * heads;
    const int64_t elem = mla_dtype_size(a->dtype);
    /* rows are token-major, the order of [T, H, Dh] in memory */
    int team = mla_team_size(rows * a->head_dim, MLA_FORK_MIN_ELEMENTS, threads);
#pragma omp parallel num_threads(team)
    {
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            int64_t t = r / heads, h = r % heads;
            if (t < with_context)
                merge_row(k, a, t, h, elem);
            else
                copy_suffix_row(k, a, t, h, elem);
        }
        k->store_fence(); /* out is whole once the call returns */
    }
}
