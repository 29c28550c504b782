/* Public varlen flash attention (docs/semantics.md §1.7): check every argument,
 * the sequence offsets and the overlap of outputs with inputs -> pick the
 * MLA_OP_PREFILL backend -> run the driver. */
#include "checks.h"
#include "dispatch.h"
#include "ops.h"
#include "trace.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/size.h"
#include "kernels/common/flash_attn.h"

#include <math.h>

static mla_status check_dims(const char *fn, const mla_flash_attn_args *a)
{
    if (!a)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: args is NULL", fn);
    if (a->num_seqs < 0 || a->num_heads < 1 || a->total_q < 0 || a->total_k < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: num_seqs %lld, num_heads %lld, total_q %lld, "
                        "total_k %lld (need >= 0, >= 1, >= 0, >= 0)", fn, (long long)a->num_seqs,
                        (long long)a->num_heads, (long long)a->total_q, (long long)a->total_k);
    /* it is cu_seqlens_q[B]; the workspace's units are counted from it */
    if (a->total_q > INT32_MAX)
        return mla_fail(MLA_ERR_OVERFLOW, "%s: total_q %lld does not fit int32 (cu_seqlens_q)", fn,
                        (long long)a->total_q);
    if (a->qk_dim < 1 || a->v_dim < 1)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: qk_dim %lld, v_dim %lld (need >= 1)", fn,
                        (long long)a->qk_dim, (long long)a->v_dim);
    if (a->qk_dim > MLA_FLASH_ATTN_MAX_DIM || a->v_dim > MLA_FLASH_ATTN_MAX_DIM)
        return mla_fail(MLA_ERR_UNSUPPORTED, "%s: qk_dim %lld, v_dim %lld (at most %d each)", fn,
                        (long long)a->qk_dim, (long long)a->v_dim, MLA_FLASH_ATTN_MAX_DIM);
    if (a->rope_dim < 0 || a->rope_dim >= a->qk_dim)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: rope_dim %lld (need 0 .. qk_dim - 1 = %lld)",
                        fn, (long long)a->rope_dim, (long long)(a->qk_dim - 1));
    if (!mla_dtype_is_float(a->dtype))
        return mla_fail(MLA_ERR_UNSUPPORTED, "%s: dtype %s (need f32, bf16 or f16)", fn,
                        mla_dtype_name(a->dtype));
    if (!isfinite(a->scale))
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: scale %g is not finite", fn, (double)a->scale);
    return MLA_OK;
}

/* cu[0] = 0, non-decreasing, cu[B] = total. */
static mla_status check_offsets(const char *fn, const char *what, const int32_t *cu, int64_t seqs,
                                int64_t total)
{
    if (!cu)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, what);
    if (cu[0] != 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: %s[0] = %d, not 0", fn, what, (int)cu[0]);
    for (int64_t b = 0; b < seqs; b++)
        if (cu[b + 1] < cu[b])
            return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: %s decreases at %lld (%d -> %d)", fn,
                            what, (long long)b, (int)cu[b], (int)cu[b + 1]);
    if (cu[seqs] != total)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: %s[%lld] = %d, not the total %lld", fn, what,
                        (long long)seqs, (int)cu[seqs], (long long)total);
    return MLA_OK;
}

static mla_status check_args(const char *fn, const mla_flash_attn_args *a)
{
    mla_status st = check_dims(fn, a);
    if (st != MLA_OK)
        return st;
    const int64_t T = a->total_q, S = a->total_k, H = a->num_heads, R = a->rope_dim;
    const int64_t nope = a->qk_dim - R;
    if ((st = check_offsets(fn, "cu_seqlens_q", a->cu_seqlens_q, a->num_seqs, T)) ||
        (st = check_offsets(fn, "cu_seqlens_k", a->cu_seqlens_k, a->num_seqs, S)) ||
        (st = mla_check_view(fn, "q", a->q, T, H, a->qk_dim, a->q_token_stride, a->q_head_stride,
                             a->dtype, false)) ||
        (st = mla_check_view(fn, "k", a->k, S, H, nope, a->k_token_stride, a->k_head_stride,
                             a->dtype, false)) ||
        (st = R > 0 ? mla_check_view(fn, "k_pe", a->k_pe, S, 1, R, a->k_pe_token_stride, 0,
                                     a->dtype, false)
                    : MLA_OK) ||
        (st = mla_check_view(fn, "v", a->v, S, H, a->v_dim, a->v_token_stride, a->v_head_stride,
                             a->dtype, false)) ||
        (st = mla_check_view(fn, "out", a->out, T, H, a->v_dim, a->out_token_stride,
                             a->out_head_stride, a->dtype, true)))
        return st;
    int64_t lse_count;
    if (!mla_mul_size(H, T, &lse_count) || lse_count > INT64_MAX / (int64_t)sizeof(float))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: lse of %lld x %lld overflows", fn, (long long)H,
                        (long long)T);
    const mla_span out = mla_view_span(a->out, T, H, a->v_dim, a->out_token_stride,
                                       a->out_head_stride, a->dtype);
    const mla_span lse = mla_view_span(a->lse, 1, 1, lse_count, 0, 0, MLA_DTYPE_F32);
    const struct {
        const char *name;
        mla_span span;
    } inputs[] = {
        {"q", mla_view_span(a->q, T, H, a->qk_dim, a->q_token_stride, a->q_head_stride, a->dtype)},
        {"k", mla_view_span(a->k, S, H, nope, a->k_token_stride, a->k_head_stride, a->dtype)},
        {"k_pe", R > 0 ? mla_view_span(a->k_pe, S, 1, R, a->k_pe_token_stride, 0, a->dtype)
                       : (mla_span){NULL, NULL}},
        {"v", mla_view_span(a->v, S, H, a->v_dim, a->v_token_stride, a->v_head_stride, a->dtype)},
    };
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++)
        if ((st = mla_check_apart(fn, "out", out, inputs[i].name, inputs[i].span)) ||
            (st = mla_check_apart(fn, "lse", lse, inputs[i].name, inputs[i].span)))
            return st;
    return mla_check_apart(fn, "lse", lse, "out", out);
}

mla_status mla_flash_attn_backend(const mla_flash_attn_args *a, const mla_kernels **k,
                                  const char **name)
{
    mla_config cfg = {.q_dtype = a->dtype, .cache_dtype = a->dtype,
                      .kv_lora_rank = a->qk_dim - a->rope_dim, .rope_dim = a->rope_dim,
                      .num_heads = a->num_heads, .block_size = 1};
    return mla_dispatch(MLA_OP_PREFILL, &cfg, k, name);
}

mla_status mla_flash_attn_varlen_workspace_size(const mla_flash_attn_args *args, int threads,
                                                int64_t *bytes)
{
    static const char fn[] = "mla_flash_attn_varlen_workspace_size";
    mla_status st = check_dims(fn, args);
    if (st != MLA_OK)
        return st;
    if (!bytes)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: bytes is NULL", fn);
    if (!mla_flash_attn_workspace(args, mla_resolve_threads(threads), bytes))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: workspace size overflows", fn);
    return MLA_OK;
}

static mla_status flash_attn_varlen(const mla_flash_attn_args *args, void *workspace,
                                    int64_t workspace_bytes, int threads)
{
    static const char fn[] = "mla_flash_attn_varlen";
    mla_status st = check_args(fn, args);
    if (st != MLA_OK)
        return st;
    int t = mla_resolve_threads(threads);
    int64_t need;
    if (!mla_flash_attn_workspace(args, t, &need))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: workspace size overflows", fn);
    if ((st = mla_check_workspace(fn, workspace, workspace_bytes, need)) != MLA_OK)
        return st;
    const mla_kernels *k;
    const char *backend;
    if ((st = mla_flash_attn_backend(args, &k, &backend)) != MLA_OK)
        return st;
    mla_flash_attn_run(k, args, workspace, t);
    mla_note_backend(backend);
    return MLA_OK;
}

mla_status mla_flash_attn_varlen(const mla_flash_attn_args *args, void *workspace,
                                 int64_t workspace_bytes, int threads)
{
    if (!mla_tracing())
        return flash_attn_varlen(args, workspace, workspace_bytes, threads);
    double start = mla_trace_begin();
    mla_status st = flash_attn_varlen(args, workspace, workspace_bytes, threads);
    mla_trace_flash_attn_varlen(start, st, args, threads);
    return st;
}
