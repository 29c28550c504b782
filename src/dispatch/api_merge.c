/* Public merge_attn_states (docs/semantics.md §4): check every argument and
 * every overlap of an output with an input -> pick the MLA_OP_PREFILL
 * backend -> run the driver. */
#include "checks.h"
#include "dispatch.h"
#include "ops.h"
#include "trace.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/size.h"
#include "kernels/common/merge.h"

/* Sizes, dtype and K; *with_context gets K resolved. */
static mla_status check_sizes(const char *fn, const mla_merge_attn_args *a, int64_t *with_context)
{
    if (a->num_tokens < 0 || a->num_heads < 1 || a->head_dim < 1)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: num_tokens %lld, num_heads %lld, head_dim "
                        "%lld (need >= 0, >= 1, >= 1)", fn, (long long)a->num_tokens,
                        (long long)a->num_heads, (long long)a->head_dim);
    if (!mla_dtype_is_float(a->dtype))
        return mla_fail(MLA_ERR_UNSUPPORTED, "%s: dtype %s (need f32, bf16 or f16)", fn,
                        mla_dtype_name(a->dtype));
    int64_t k = a->prefill_tokens_with_context;
    if (k == MLA_MERGE_ALL_TOKENS)
        k = a->num_tokens;
    if (k < 0 || k > a->num_tokens)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: prefill_tokens_with_context %lld is outside "
                        "[0, num_tokens %lld] (or MLA_MERGE_ALL_TOKENS)", fn,
                        (long long)a->prefill_tokens_with_context, (long long)a->num_tokens);
    int64_t elems;
    if (!mla_mul_size(a->num_tokens, a->num_heads, &elems) ||
        !mla_mul_size(elems, a->head_dim, &elems) || !mla_mul_size(elems, 4, &elems))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: %lld tokens x %lld heads x %lld overflows", fn,
                        (long long)a->num_tokens, (long long)a->num_heads, (long long)a->head_dim);
    *with_context = k;
    return MLA_OK;
}

/* The three views and the LSE pointers the call reads and writes. */
static mla_status check_views(const char *fn, const mla_merge_attn_args *a)
{
    const int64_t t = a->num_tokens, h = a->num_heads, d = a->head_dim;
    mla_status st;
    if ((st = mla_check_view(fn, "prefix", a->prefix, t, h, d, a->token_stride, a->head_stride,
                             a->dtype, false)) ||
        (st = mla_check_view(fn, "suffix", a->suffix, t, h, d, a->token_stride, a->head_stride,
                             a->dtype, false)) ||
        (st = mla_check_view(fn, "out", a->out, t, h, d, a->out_token_stride, a->out_head_stride,
                             a->dtype, true)))
        return st;
    if (t > 0 && (!a->prefix_lse || !a->suffix_lse))
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                        a->prefix_lse ? "suffix_lse" : "prefix_lse");
    return MLA_OK;
}

/* out addresses row (t, h) where `in` does, for every row: the one overlap
 * merging allows, as each row is read before it is written. */
static bool same_rows(const mla_merge_attn_args *a, const void *in)
{
    return a->out == in && (a->num_tokens == 1 || a->out_token_stride == a->token_stride) &&
           (a->num_heads == 1 || a->out_head_stride == a->head_stride);
}

static mla_span lse_span(const float *lse, const mla_merge_attn_args *a)
{
    return mla_view_span(lse, a->num_heads, 1, a->num_tokens, a->num_tokens, 0, MLA_DTYPE_F32);
}

/* mla_check_apart, unless the output is that input itself (`same`). */
static mla_status apart_unless_same(const char *fn, bool same, const char *out, mla_span o,
                                    const char *in, mla_span i)
{
    return same ? MLA_OK : mla_check_apart(fn, out, o, in, i);
}

/* Outputs against inputs: out may be prefix or suffix row for row, out_lse
 * may be prefix_lse or suffix_lse itself; nothing else may share a byte. */
static mla_status check_overlaps(const char *fn, const mla_merge_attn_args *a)
{
    const int64_t t = a->num_tokens, h = a->num_heads, d = a->head_dim;
    mla_span prefix = mla_view_span(a->prefix, t, h, d, a->token_stride, a->head_stride, a->dtype);
    mla_span suffix = mla_view_span(a->suffix, t, h, d, a->token_stride, a->head_stride, a->dtype);
    mla_span out = mla_view_span(a->out, t, h, d, a->out_token_stride, a->out_head_stride, a->dtype);
    mla_span p_lse = lse_span(a->prefix_lse, a), s_lse = lse_span(a->suffix_lse, a);
    mla_span o_lse = lse_span(a->out_lse, a);
    mla_status st;
    if ((st = apart_unless_same(fn, same_rows(a, a->prefix), "out", out,
                                "prefix (allowed only row for row: same pointer and strides)",
                                prefix)) ||
        (st = apart_unless_same(fn, same_rows(a, a->suffix), "out", out,
                                "suffix (allowed only row for row: same pointer and strides)",
                                suffix)) ||
        (st = mla_check_apart(fn, "out", out, "prefix_lse", p_lse)) ||
        (st = mla_check_apart(fn, "out", out, "suffix_lse", s_lse)) ||
        (st = mla_check_apart(fn, "out_lse", o_lse, "prefix", prefix)) ||
        (st = mla_check_apart(fn, "out_lse", o_lse, "suffix", suffix)) ||
        (st = mla_check_apart(fn, "out_lse", o_lse, "out", out)) ||
        (st = apart_unless_same(fn, a->out_lse == a->prefix_lse, "out_lse", o_lse,
                                "prefix_lse (allowed only as the same pointer)", p_lse)) ||
        (st = apart_unless_same(fn, a->out_lse == a->suffix_lse, "out_lse", o_lse,
                                "suffix_lse (allowed only as the same pointer)", s_lse)))
        return st;
    return MLA_OK;
}

mla_status mla_merge_backend(const mla_merge_attn_args *a, const mla_kernels **k, const char **name)
{
    mla_config cfg = {.q_dtype = a->dtype, .cache_dtype = a->dtype, .kv_lora_rank = a->head_dim,
                      .rope_dim = 0, .num_heads = a->num_heads, .block_size = 1};
    return mla_dispatch(MLA_OP_PREFILL, &cfg, k, name);
}

static mla_status merge_attn_states(const mla_merge_attn_args *args, int threads)
{
    static const char fn[] = "mla_merge_attn_states";
    if (!args)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: args is NULL", fn);
    int64_t with_context = 0;
    mla_status st;
    if ((st = check_sizes(fn, args, &with_context)) || (st = check_views(fn, args)) ||
        (st = check_overlaps(fn, args)))
        return st;
    const mla_kernels *k;
    const char *backend;
    if ((st = mla_merge_backend(args, &k, &backend)) != MLA_OK)
        return st;
    mla_merge_run(k, args, with_context, mla_resolve_threads(threads));
    mla_note_backend(backend);
    return MLA_OK;
}

mla_status mla_merge_attn_states(const mla_merge_attn_args *args, int threads)
{
    if (!mla_tracing())
        return merge_attn_states(args, threads);
    double start = mla_trace_begin();
    mla_status st = merge_attn_states(args, threads);
    mla_trace_merge_attn_states(start, st, args, threads);
    return st;
}
