/* The public prefill op (mla.h, docs/semantics.md §1.7): check the batch, the
 * plan against it, every block id and every buffer -> choose each request's
 * path -> the MHA path for the requests that take it (up-projection and
 * causal attention of the new tokens; per context chunk: gather,
 * up-projection, attention, merge into the running result; the final merge
 * with prefill_tokens_with_context) -> the absorbed path (the decode forward,
 * causal, in pieces of MLA_PREFILL_ABSORBED_PIECE tokens) for the others.
 *
 * Each step is a public op of this floor, run on parts of the caller's
 * workspace. Everything those ops check is checked here first (the
 * backend each picks, and that the workspace overlaps no other buffer,
 * included), so none of them fails halfway and a bad call writes nothing. */
#include "checks.h"
#include "dispatch.h"
#include "ops.h"
#include "trace.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/policy.h"
#include "core/size.h"

#include <math.h>
#include <stdint.h>

enum { PIECE = MLA_PREFILL_ABSORBED_PIECE };

static int64_t new_tokens(const mla_prefill_args *a, int64_t r)
{
    return (int64_t)a->query_start_loc[r + 1] - a->query_start_loc[r];
}

static int64_t max64(int64_t x, int64_t y)
{
    return x > y ? x : y;
}

/* ---- the cost model ----------------------------------------------------------- */

/* Time in peak-FMA FLOPs (policy.h): FLOPs over the efficiency they run at,
 * bytes times the machine's balance. Both paths attend each new token to
 * C + its position keys; MHA up-projects all C + n latent rows (and writes
 * and reads back their k, v), the absorbed path reads the cache once per
 * piece and projects only the n queries in and out. */
mla_prefill_path mla_prefill_choose_path(const mla_prefill_args *a, int64_t r)
{
    if (a->path != MLA_PREFILL_PATH_AUTO)
        return a->path;
    const double H = (double)a->num_heads, L = (double)a->kv_lora_rank, R = (double)a->rope_dim,
                 P = (double)a->qk_nope_dim, V = (double)a->v_head_dim;
    const double n = (double)new_tokens(a, r), C = (double)a->context_lens[r];
    const double pairs = n * (C + (n + 1) / 2), elem = (double)mla_dtype_size(a->dtype);
    const double balance = MLA_PREFILL_COST_FLOP_PER_BYTE;
    const double mha = 2 * (C + n) * L * H * (P + V) / MLA_PREFILL_COST_GEMM_EFF +
                       2 * H * pairs * (P + R + V) / MLA_PREFILL_COST_ATTN_EFF +
                       balance * elem * (C * (L + R) + 2 * (C + n) * H * (P + V));
    const double absorbed = 2 * n * H * L * (P + V) / MLA_PREFILL_COST_GEMM_EFF +
                            2 * H * pairs * (2 * L + R) / MLA_PREFILL_COST_DECODE_EFF +
                            balance * elem * ceil(n / PIECE) * (C + n) * (L + R);
    return absorbed < mha ? MLA_PREFILL_PATH_ABSORBED : MLA_PREFILL_PATH_MHA;
}

/* ---- shapes and the workspace ------------------------------------------------ */

static mla_status check_shape(const char *fn, const mla_prefill_args *a)
{
    if (!a)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: args is NULL", fn);
    if (a->num_prefills < 0 || a->num_tokens < 0 || a->num_heads < 1 || a->kv_lora_rank < 1 ||
        a->rope_dim < 0 || a->qk_nope_dim < 1 || a->v_head_dim < 1)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: num_prefills %lld, num_tokens %lld, "
                        "num_heads %lld, kv_lora_rank %lld, rope_dim %lld, qk_nope_dim %lld, "
                        "v_head_dim %lld (need >= 0, >= 0, >= 1, >= 1, >= 0, >= 1, >= 1)", fn,
                        (long long)a->num_prefills, (long long)a->num_tokens,
                        (long long)a->num_heads, (long long)a->kv_lora_rank,
                        (long long)a->rope_dim, (long long)a->qk_nope_dim,
                        (long long)a->v_head_dim);
    if (a->qk_nope_dim > MLA_FLASH_ATTN_MAX_DIM - a->rope_dim ||
        a->v_head_dim > MLA_FLASH_ATTN_MAX_DIM)
        return mla_fail(MLA_ERR_UNSUPPORTED, "%s: qk_nope_dim + rope_dim = %lld + %lld and "
                        "v_head_dim %lld must be at most %d", fn, (long long)a->qk_nope_dim,
                        (long long)a->rope_dim, (long long)a->v_head_dim, MLA_FLASH_ATTN_MAX_DIM);
    /* the weights' rows, H(P + V) of L f32 at most, bound every per-head
     * width product the call forms (H V, H P L, H L V) */
    int64_t rows, bytes;
    if (!mla_mul_size(a->num_heads, a->qk_nope_dim + a->v_head_dim, &rows) ||
        !mla_span_bytes(rows, a->kv_lora_rank, a->kv_lora_rank, sizeof(float), &bytes))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: kv_b_proj of %lld heads x (%lld + %lld) rows x "
                        "%lld overflows", fn, (long long)a->num_heads, (long long)a->qk_nope_dim,
                        (long long)a->v_head_dim, (long long)a->kv_lora_rank);
    if (!mla_dtype_is_float(a->dtype))
        return mla_fail(MLA_ERR_UNSUPPORTED, "%s: dtype %s (need f32, bf16 or f16)", fn,
                        mla_dtype_name(a->dtype));
    if (a->path < MLA_PREFILL_PATH_AUTO || a->path > MLA_PREFILL_PATH_ABSORBED)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: path %d is not an mla_prefill_path", fn,
                        (int)a->path);
    if (!isfinite(a->scale))
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: scale %g is not finite", fn, (double)a->scale);
    return MLA_OK;
}

/* Byte offsets of the workspace's regions from its aligned base. The MHA
 * regions are empty when every request is absorbed, the absorbed scratch
 * when none is. Token results are [T, H, V] and LSEs [H, T], as the flash
 * attention and merge ops read them. */
typedef struct prefill_layout {
    int64_t kv_new, o_new, o_acc, o_chunk;    /* [T, H, P+V], [T, H, V] x 3 */
    int64_t lse_new, lse_acc, lse_chunk;      /* [H, T] f32 each             */
    int64_t kv_chunk, cu_k, token_to_seq;     /* [W, H, P+V], [B+1], [W]     */
    int64_t absorbed;                         /* [B] bytes: 1 = absorbed     */
    int64_t scratch, scratch_bytes, total;    /* the steps' own workspaces   */
} prefill_layout;

/* Appends a region of a * b * c elements of `elem` bytes at *total. */
static bool region(int64_t *total, int64_t a, int64_t b, int64_t c, int64_t elem, int64_t *offset)
{
    int64_t bytes;
    *offset = *total;
    return mla_region_bytes(a, b, c, elem, &bytes) && !__builtin_add_overflow(*total, bytes, total);
}

static int64_t plan_tokens(const mla_prefill_args *a)
{
    mla_chunk_plan_info info;
    mla_chunk_plan_info_get(a->plan, &info);
    return info.workspace_tokens;
}

/* The largest workspace of the steps: the packed GEMM over max(T, W) rows,
 * flash attention over T queries, the absorbed decode of one piece; W the
 * context chunks' rows. */
static mla_status scratch_bytes(const char *fn, const mla_prefill_args *a, int64_t W, int threads,
                                int64_t *bytes)
{
    const int64_t T = a->num_tokens, rows = max64(T, W);
    int64_t up = 0, attn = 0, absorbed = 0;
    mla_status st = MLA_OK;
    if (a->path != MLA_PREFILL_PATH_ABSORBED) {
        mla_up_proj_args u = {.num_tokens = rows, .num_heads = a->num_heads,
                              .kv_lora_rank = a->kv_lora_rank, .qk_nope_dim = a->qk_nope_dim,
                              .v_head_dim = a->v_head_dim, .kv_c_dtype = a->dtype,
                              .w_dtype = mla_dtype_is_float(a->kv_b_proj_dtype) ? a->kv_b_proj_dtype
                                                                                : a->dtype,
                              .out_dtype = a->dtype, .kv_b_proj_packed = a->kv_b_proj_packed};
        mla_flash_attn_args f = {.num_seqs = a->num_prefills, .num_heads = a->num_heads,
                                 .qk_dim = a->qk_nope_dim + a->rope_dim, .v_dim = a->v_head_dim,
                                 .rope_dim = a->rope_dim, .scale = a->scale, .dtype = a->dtype,
                                 .total_q = T, .total_k = rows};
        if ((st = mla_up_proj_workspace_size(&u, threads, &up)) != MLA_OK ||
            (st = mla_flash_attn_varlen_workspace_size(&f, threads, &attn)) != MLA_OK)
            return st;
    }
    if (a->path != MLA_PREFILL_PATH_MHA) {
        mla_decode_args shape = {.num_reqs = 1, .s_q = PIECE, .num_heads = a->num_heads,
                                 .kv_lora_rank = a->kv_lora_rank, .rope_dim = a->rope_dim,
                                 .q_dtype = a->dtype};
        if ((st = mla_decode_forward_bytes(fn, &shape, a->qk_nope_dim, a->v_head_dim, threads,
                                           &absorbed)) != MLA_OK)
            return st;
    }
    *bytes = max64(max64(up, attn), absorbed);
    return MLA_OK;
}

static mla_status layout_of(const char *fn, const mla_prefill_args *a, int64_t W, int threads,
                            prefill_layout *l)
{
    const int64_t T = a->num_tokens, H = a->num_heads, B = a->num_prefills;
    const int64_t PV = a->qk_nope_dim + a->v_head_dim, V = a->v_head_dim;
    const int64_t elem = mla_dtype_size(a->dtype), f32 = sizeof(float);
    const bool mha = a->path != MLA_PREFILL_PATH_ABSORBED;
    const int64_t t = mha ? T : 0, w = mha ? W : 0;
    mla_status st = scratch_bytes(fn, a, w, threads, &l->scratch_bytes);
    if (st != MLA_OK)
        return st;
    int64_t total = 0;
    if (!region(&total, t, H, PV, elem, &l->kv_new) || !region(&total, t, H, V, elem, &l->o_new) ||
        !region(&total, t, H, V, elem, &l->o_acc) || !region(&total, t, H, V, elem, &l->o_chunk) ||
        !region(&total, H, t, 1, f32, &l->lse_new) || !region(&total, H, t, 1, f32, &l->lse_acc) ||
        !region(&total, H, t, 1, f32, &l->lse_chunk) ||
        !region(&total, w, H, PV, elem, &l->kv_chunk) ||
        !region(&total, B + 1, 1, 1, sizeof(int32_t), &l->cu_k) ||
        !region(&total, w, 1, 1, sizeof(int32_t), &l->token_to_seq) ||
        !region(&total, B, 1, 1, 1, &l->absorbed) ||
        !region(&total, l->scratch_bytes, 1, 1, 1, &l->scratch) ||
        __builtin_add_overflow(total, MLA_ALIGN, &l->total))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: workspace for %lld tokens x %lld heads overflows",
                        fn, (long long)T, (long long)H);
    return MLA_OK;
}

mla_status mla_prefill_workspace_size(const mla_prefill_args *args, int threads, int64_t *bytes)
{
    static const char fn[] = "mla_prefill_workspace_size";
    mla_status st = check_shape(fn, args);
    if (st != MLA_OK)
        return st;
    if (!bytes)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: bytes is NULL", fn);
    prefill_layout l;
    if ((st = layout_of(fn, args, plan_tokens(args), mla_resolve_threads(threads), &l)) != MLA_OK)
        return st;
    *bytes = l.total;
    return MLA_OK;
}

mla_status mla_prefill_workspace_bound(const mla_prefill_limits *lim, int64_t *bytes)
{
    static const char fn[] = "mla_prefill_workspace_bound";
    if (!lim || !bytes)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, lim ? "bytes" : "limits");
    if (lim->max_prefills < 0 || lim->max_tokens < 0 || lim->context_workspace_tokens < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: max_prefills %lld, max_tokens %lld, "
                        "context_workspace_tokens %lld (need >= 0)", fn,
                        (long long)lim->max_prefills, (long long)lim->max_tokens,
                        (long long)lim->context_workspace_tokens);
    /* AUTO lays out both paths; kv_b_proj packed in the call, in whichever
     * dtype packs largest */
    mla_prefill_args a = {.num_prefills = lim->max_prefills, .num_tokens = lim->max_tokens,
                          .num_heads = lim->num_heads, .kv_lora_rank = lim->kv_lora_rank,
                          .rope_dim = lim->rope_dim, .qk_nope_dim = lim->qk_nope_dim,
                          .v_head_dim = lim->v_head_dim, .scale = 1.0f, .dtype = lim->dtype,
                          .path = MLA_PREFILL_PATH_AUTO};
    mla_status st = check_shape(fn, &a);
    const mla_dtype weights[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16};
    const int threads = mla_resolve_threads(lim->max_threads);
    int64_t most = 0;
    for (size_t i = 0; i < sizeof weights / sizeof weights[0] && st == MLA_OK; i++) {
        prefill_layout l;
        a.kv_b_proj_dtype = weights[i];
        if ((st = layout_of(fn, &a, lim->context_workspace_tokens, threads, &l)) == MLA_OK)
            most = max64(most, l.total);
    }
    if (st == MLA_OK)
        *bytes = most;
    return st;
}

/* ---- checks ---------------------------------------------------------------- */

/* query_start_loc from 0 to T, non-decreasing; context lengths >= 0, those
 * with context first (prefill_tokens_with_context relies on it). */
static mla_status check_batch(const char *fn, const mla_prefill_args *a)
{
    const int64_t B = a->num_prefills;
    if (!a->query_start_loc || (B > 0 && !a->context_lens))
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                        a->query_start_loc ? "context_lens" : "query_start_loc");
    if (a->query_start_loc[0] != 0 || a->query_start_loc[B] != a->num_tokens)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: query_start_loc runs from %d to %d, not 0 "
                        "to num_tokens %lld", fn, a->query_start_loc[0], a->query_start_loc[B],
                        (long long)a->num_tokens);
    for (int64_t r = 0; r < B; r++) {
        if (new_tokens(a, r) < 0)
            return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: query_start_loc decreases at %lld", fn,
                            (long long)r + 1);
        if (a->context_lens[r] < 0)
            return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: context_lens[%lld] = %d is negative",
                            fn, (long long)r, a->context_lens[r]);
        /* the sequence length, an int32 seq_lens entry of the absorbed path */
        if (a->context_lens[r] + new_tokens(a, r) > INT32_MAX)
            return mla_fail(MLA_ERR_OVERFLOW, "%s: request %lld has %d context + %lld new "
                            "tokens, past int32", fn, (long long)r, a->context_lens[r],
                            (long long)new_tokens(a, r));
        if (r > 0 && a->context_lens[r] > 0 && a->context_lens[r - 1] == 0)
            return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: request %lld has context after request "
                            "%lld without (prefills with context come first, as "
                            "mla_reorder_batch leaves them)", fn, (long long)r, (long long)r - 1);
    }
    return MLA_OK;
}

/* Every block a request's context and new tokens occupy is in its row of
 * the block table and names a cache block. */
static mla_status check_blocks(const char *fn, const mla_prefill_args *a, const mla_kv_cache *c)
{
    mla_status st = mla_check_block_table(fn, a->block_table, a->num_prefills, a->block_table_cols);
    for (int64_t r = 0; r < a->num_prefills && st == MLA_OK; r++)
        st = mla_check_request_blocks(fn, c, a->block_table, a->block_table_cols, r,
                                      "context_lens + new tokens",
                                      a->context_lens[r] + new_tokens(a, r));
    return st;
}

/* Where the context chunks are gathered: the caller's context_workspace,
 * else the plan's own. */
static void *gather_rows(const mla_prefill_args *a, const mla_chunk_plan_info *p)
{
    return a->context_workspace ? a->context_workspace : p->workspace;
}

/* The plan was made for this batch: the same prefills and with-context
 * count, prefill_tokens_with_context, each request's chunks tiling its
 * context from 0 in order, every chunk within the workspace W; without the
 * caller's context_workspace the plan has its own, of the cache rows'
 * width and the op's dtype. */
static mla_status check_plan(const char *fn, const mla_prefill_args *a, int64_t n_ctx)
{
    if (!a->plan)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: plan is NULL but %lld requests have "
                        "context for the MHA path", fn, (long long)n_ctx);
    mla_chunk_plan_info p;
    mla_chunk_plan_info_get(a->plan, &p);
    const int64_t B = a->num_prefills;
    if (p.num_prefills != B || p.num_with_context != n_ctx ||
        p.prefill_tokens_with_context != a->query_start_loc[n_ctx])
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: the plan is for %lld prefills, %lld with "
                        "context, %lld tokens with context; the batch has %lld, %lld, %d", fn,
                        (long long)p.num_prefills, (long long)p.num_with_context,
                        (long long)p.prefill_tokens_with_context, (long long)B, (long long)n_ctx,
                        a->query_start_loc[n_ctx]);
    for (int64_t r = 0; r < B; r++) {
        int64_t covered = 0;
        for (int64_t i = 0; i < p.num_chunks; i++) {
            int64_t len = p.chunk_seq_lens[i * B + r];
            if (len > 0 && p.starts[i * B + r] != covered)
                return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: the plan's chunk %lld of request "
                                "%lld starts at %d, not %lld", fn, (long long)i, (long long)r,
                                p.starts[i * B + r], (long long)covered);
            covered += len;
        }
        if (covered != a->context_lens[r])
            return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: the plan's chunks of request %lld cover "
                            "%lld tokens; its context has %d", fn, (long long)r,
                            (long long)covered, a->context_lens[r]);
    }
    for (int64_t i = 0; i < p.num_chunks; i++)
        if (p.seq_tot[i] > p.workspace_tokens)
            return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: the plan's chunk %lld has %d rows, "
                            "past its workspace of %lld", fn, (long long)i, p.seq_tot[i],
                            (long long)p.workspace_tokens);
    if (!a->context_workspace && (!p.workspace || p.workspace_width != a->kv_lora_rank + a->rope_dim ||
                                  p.workspace_dtype != a->dtype))
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: context_workspace is NULL, so the plan needs "
                        "a workspace of width %lld in %s (it has %s, width %lld, %s)", fn,
                        (long long)(a->kv_lora_rank + a->rope_dim), mla_dtype_name(a->dtype),
                        p.workspace ? "one" : "none", (long long)p.workspace_width,
                        mla_dtype_name(p.workspace_dtype));
    return MLA_OK;
}

/* The caller's buffers of the call, where a path taken uses them (empty
 * spans elsewhere). */
typedef struct prefill_buffers {
    mla_span q, out, kv_c, k_pe, w, w_uk_t, w_uv;
} prefill_buffers;

/* What the paths chosen need: q, out and the absorbed weights always when
 * taken; new-token latent rows and kv_b_proj for MHA. out shares no byte
 * with what it is computed from. *b gets the buffers' spans. */
static mla_status check_buffers(const char *fn, const mla_prefill_args *a, bool any_mha,
                                bool any_absorbed, prefill_buffers *b)
{
    const int64_t T = a->num_tokens, H = a->num_heads, L = a->kv_lora_rank, R = a->rope_dim;
    const int64_t P = a->qk_nope_dim, V = a->v_head_dim;
    mla_status st;
    if ((st = mla_check_view(fn, "q", a->q, T, H, P + R, a->q_token_stride, a->q_head_stride,
                             a->dtype, false)) ||
        (st = mla_check_rows(fn, "out", a->out, T, a->out_token_stride, H * V, a->dtype)))
        return st;
    b->out = mla_view_span(a->out, T, 1, H * V, a->out_token_stride, 0, a->dtype);
    b->q = mla_view_span(a->q, T, H, P + R, a->q_token_stride, a->q_head_stride, a->dtype);
    if ((st = mla_check_apart(fn, "out", b->out, "q", b->q)))
        return st;
    if (any_mha) {
        if (!a->kv_b_proj && !a->kv_b_proj_packed)
            return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: kv_b_proj and kv_b_proj_packed are "
                            "NULL and the MHA path is taken", fn);
        if (!mla_dtype_is_float(a->kv_b_proj_dtype))
            return mla_fail(MLA_ERR_UNSUPPORTED, "%s: kv_b_proj dtype %s (need f32, bf16 or "
                            "f16)", fn, mla_dtype_name(a->kv_b_proj_dtype));
        b->kv_c = mla_view_span(a->kv_c, T, 1, L, a->kv_c_stride, 0, a->dtype);
        b->k_pe = mla_view_span(a->k_pe, T, 1, R, a->k_pe_stride, 0, a->dtype);
        b->w = mla_view_span(a->kv_b_proj, H * (P + V), 1, L, L, 0, a->kv_b_proj_dtype);
        const mla_up_proj_args u = {.num_heads = H, .kv_lora_rank = L, .qk_nope_dim = P,
                                    .v_head_dim = V, .kv_c_dtype = a->dtype,
                                    .w_dtype = a->kv_b_proj_dtype,
                                    .kv_b_proj_packed = a->kv_b_proj_packed};
        if (a->kv_b_proj_packed && (st = mla_up_proj_check_packed(fn, &u, &b->w)) != MLA_OK)
            return st;
        if ((st = mla_check_rows(fn, "kv_c", a->kv_c, T, a->kv_c_stride, L, a->dtype)) ||
            (st = mla_check_rows(fn, "k_pe", a->k_pe, R > 0 ? T : 0, a->k_pe_stride, R, a->dtype)) ||
            (st = mla_check_apart(fn, "out", b->out, "kv_c", b->kv_c)) ||
            (st = mla_check_apart(fn, "out", b->out, "k_pe", b->k_pe)) ||
            (st = mla_check_apart(fn, "out", b->out, "kv_b_proj", b->w)))
            return st;
    }
    if (any_absorbed) {
        if (!a->w_uk_t || !a->w_uv)
            return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: %s is NULL and the absorbed path is "
                            "taken", fn, a->w_uk_t ? "w_uv" : "w_uk_t");
        if (a->w_dtype != MLA_DTYPE_F32 && a->w_dtype != MLA_DTYPE_BF16)
            return mla_fail(MLA_ERR_UNSUPPORTED, "%s: w_dtype %s (need f32 or bf16)", fn,
                            mla_dtype_name(a->w_dtype));
        b->w_uk_t = mla_view_span(a->w_uk_t, H * P, 1, L, L, 0, a->w_dtype);
        b->w_uv = mla_view_span(a->w_uv, H * L, 1, V, V, 0, a->w_dtype);
        if ((st = mla_check_apart(fn, "out", b->out, "w_uk_t", b->w_uk_t)) ||
            (st = mla_check_apart(fn, "out", b->out, "w_uv", b->w_uv)))
            return st;
    }
    return MLA_OK;
}

/* Which paths run: any request (with new tokens) on each, and any MHA one
 * with context (the only ones the plan's chunks are gathered for). */
typedef struct paths {
    bool mha, absorbed, mha_context;
    int64_t n_ctx;
} paths;

static paths paths_of(const mla_prefill_args *a)
{
    paths p = {0};
    for (int64_t r = 0; r < a->num_prefills; r++) {
        p.n_ctx += a->context_lens[r] > 0;
        if (new_tokens(a, r) == 0)
            continue;
        bool absorbed = mla_prefill_choose_path(a, r) == MLA_PREFILL_PATH_ABSORBED;
        p.absorbed |= absorbed;
        p.mha |= !absorbed;
        p.mha_context |= !absorbed && a->context_lens[r] > 0;
    }
    return p;
}

/* Every op the paths run picks its backend now, as it will when it runs (the
 * fields each choice reads, as the steps below set them), so that one a
 * forced backend cannot run fails before anything is written. */
static mla_status check_backends(const mla_prefill_args *a, const mla_kv_cache *c, const paths *p)
{
    const int64_t H = a->num_heads, L = a->kv_lora_rank, R = a->rope_dim;
    const mla_kernels *k;
    const char *name;
    mla_status st;
    if (p->mha) {
        const mla_up_proj_args u = {.num_heads = H, .kv_lora_rank = L, .kv_c_dtype = a->dtype,
                                    .w_dtype = a->kv_b_proj_dtype};
        const mla_flash_attn_args f = {.num_heads = H, .qk_dim = a->qk_nope_dim + R,
                                       .rope_dim = R, .dtype = a->dtype};
        const mla_merge_attn_args m = {.num_heads = H, .head_dim = a->v_head_dim,
                                       .dtype = a->dtype};
        if ((st = mla_up_proj_backend(&u, &k, &name)) ||
            (st = mla_flash_attn_backend(&f, &k, &name)) || (st = mla_merge_backend(&m, &k, &name)))
            return st;
    }
    if (p->mha_context && (st = mla_dispatch(MLA_OP_CONVERT, NULL, &k, &name)) != MLA_OK)
        return st;
    const mla_decode_args d = {.num_heads = H, .kv_lora_rank = L, .rope_dim = R,
                               .q_dtype = a->dtype};
    return p->absorbed ? mla_decode_backend(&d, c, &k, &name) : MLA_OK;
}

/* Everything but the workspace; *c gets the cache checked. */
static mla_status check_args(const char *fn, const mla_prefill_args *a, mla_kv_cache *c,
                             paths *p, prefill_buffers *b)
{
    mla_status st = check_shape(fn, a);
    if (st != MLA_OK || (st = check_batch(fn, a)) != MLA_OK)
        return st;
    if ((st = mla_check_cache(fn, a->cache, c)) != MLA_OK)
        return st;
    if (c->width != a->kv_lora_rank + a->rope_dim)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: kv_lora_rank + rope_dim = %lld + %lld is not "
                        "the cache width %lld", fn, (long long)a->kv_lora_rank,
                        (long long)a->rope_dim, (long long)c->width);
    if ((st = check_blocks(fn, a, c)) != MLA_OK)
        return st;
    *p = paths_of(a);
    if (p->mha_context && (st = check_plan(fn, a, p->n_ctx)) != MLA_OK)
        return st;
    if ((st = check_buffers(fn, a, p->mha, p->absorbed, b)) != MLA_OK)
        return st;
    return check_backends(a, c, p);
}

/* n int32s at p. */
static mla_span ints_span(const int32_t *p, int64_t n)
{
    return p && n > 0 ? (mla_span){(const char *)p, (const char *)(p + n)} : (mla_span){NULL, NULL};
}

/* The workspace, and the caller's context_workspace, share no byte with
 * any other buffer of the call: each step checks its operands, workspace
 * regions among them, only once the steps before it have written. */
static mla_status check_workspace_apart(const char *fn, const mla_prefill_args *a,
                                        const mla_kv_cache *c, const paths *p,
                                        const prefill_buffers *b, const void *workspace,
                                        int64_t bytes)
{
    const int64_t B = a->num_prefills, width = a->kv_lora_rank + a->rope_dim;
    mla_chunk_plan_info plan = {0};
    if (p->mha_context)
        mla_chunk_plan_info_get(a->plan, &plan);
    const struct {
        const char *name;
        mla_span span;
    } others[] = {
        {"q", b->q}, {"out", b->out}, {"kv_c", b->kv_c}, {"k_pe", b->k_pe}, {"kv_b_proj", b->w},
        {"w_uk_t", b->w_uk_t}, {"w_uv", b->w_uv},
        {"the cache", mla_view_span(c->data, c->num_blocks, c->block_size, c->width,
                                    c->block_stride, c->entry_stride, c->dtype)},
        {"query_start_loc", ints_span(a->query_start_loc, B + 1)},
        {"context_lens", ints_span(a->context_lens, B)},
        {"block_table", ints_span(a->block_table, B * a->block_table_cols)},
        {"the context workspace", mla_view_span(gather_rows(a, &plan), plan.workspace_tokens, 1,
                                                width, width, 0, a->dtype)},
    };
    enum { OTHERS = sizeof others / sizeof others[0], CONTEXT = OTHERS - 1 };
    const mla_span ws = {workspace, (const char *)workspace + bytes};
    mla_status st = MLA_OK;
    for (int i = 0; i < OTHERS && st == MLA_OK; i++)
        st = mla_check_apart(fn, "workspace", ws, others[i].name, others[i].span);
    /* the plan's own is the library's; the caller's may be anything */
    for (int i = 0; i < CONTEXT && st == MLA_OK && a->context_workspace; i++)
        st = mla_check_apart(fn, "context_workspace", others[CONTEXT].span, others[i].name,
                             others[i].span);
    return st;
}

/* ---- the paths ----------------------------------------------------------- */

/* Where a call's pieces are. */
typedef struct prefill_run {
    const mla_prefill_args *a;
    char *base;
    prefill_layout l;
    void *scratch;
    int threads;
} prefill_run;

static void *at(const prefill_run *x, int64_t offset)
{
    return x->base + offset;
}

/* kv_c rows (stride apart) -> [S, H, P+V] k_nope | v at kv. */
static mla_status up_project(const prefill_run *x, int64_t S, const void *kv_c, int64_t stride,
                             void *kv)
{
    const mla_prefill_args *a = x->a;
    const int64_t P = a->qk_nope_dim, PV = P + a->v_head_dim;
    mla_up_proj_args u = {
        .num_tokens = S, .num_heads = a->num_heads, .kv_lora_rank = a->kv_lora_rank,
        .qk_nope_dim = P, .v_head_dim = a->v_head_dim, .kv_c = kv_c, .kv_c_dtype = a->dtype,
        .kv_c_stride = stride, .kv_b_proj = a->kv_b_proj, .w_dtype = a->kv_b_proj_dtype,
        .kv_b_proj_packed = a->kv_b_proj_packed,
        .out_dtype = a->dtype, .k_nope = kv, .k_nope_token_stride = a->num_heads * PV,
        .k_nope_head_stride = PV, .v = (char *)kv + P * mla_dtype_size(a->dtype),
        .v_token_stride = a->num_heads * PV, .v_head_stride = PV};
    return mla_up_proj(&u, x->scratch, x->l.scratch_bytes, x->threads);
}

/* Every new token against keys [cu_k[r], cu_k[r+1]) of kv (up-projected
 * [S, H, P+V]) with k_pe rows, into out [T, H, V] and lse [H, T]. */
static mla_status attend(const prefill_run *x, bool causal, const int32_t *cu_k, int64_t S,
                         const void *kv, const void *k_pe, int64_t k_pe_stride, void *out,
                         float *lse)
{
    const mla_prefill_args *a = x->a;
    const int64_t H = a->num_heads, P = a->qk_nope_dim, PV = P + a->v_head_dim;
    mla_flash_attn_args f = {
        .num_seqs = a->num_prefills, .num_heads = H, .qk_dim = P + a->rope_dim,
        .v_dim = a->v_head_dim, .rope_dim = a->rope_dim, .causal = causal, .scale = a->scale,
        .dtype = a->dtype, .total_q = a->num_tokens, .total_k = S,
        .cu_seqlens_q = a->query_start_loc, .cu_seqlens_k = cu_k, .q = a->q,
        .q_token_stride = a->q_token_stride, .q_head_stride = a->q_head_stride, .k = kv,
        .k_token_stride = H * PV, .k_head_stride = PV, .k_pe = k_pe,
        .k_pe_token_stride = k_pe_stride, .v = (const char *)kv + P * mla_dtype_size(a->dtype),
        .v_token_stride = H * PV, .v_head_stride = PV, .out = out,
        .out_token_stride = H * a->v_head_dim, .out_head_stride = a->v_head_dim, .lse = lse};
    return mla_flash_attn_varlen(&f, x->scratch, x->l.scratch_bytes, x->threads);
}

/* out = merge(prefix, suffix) over [T, H, V] results, rows >= K taking
 * the suffix; out_lse may be NULL. */
static mla_status merge(const prefill_run *x, const void *prefix, const float *prefix_lse,
                        const void *suffix, const float *suffix_lse, void *out,
                        int64_t out_token_stride, float *out_lse, int64_t K)
{
    const mla_prefill_args *a = x->a;
    mla_merge_attn_args m = {
        .num_tokens = a->num_tokens, .num_heads = a->num_heads, .head_dim = a->v_head_dim,
        .dtype = a->dtype, .prefix = prefix, .suffix = suffix,
        .token_stride = a->num_heads * a->v_head_dim, .head_stride = a->v_head_dim,
        .prefix_lse = prefix_lse, .suffix_lse = suffix_lse, .out = out,
        .out_token_stride = out_token_stride, .out_head_stride = a->v_head_dim,
        .out_lse = out_lse, .prefill_tokens_with_context = K};
    return mla_merge_attn_states(&m, x->threads);
}

/* Chunk i's rows for the MHA requests with context: cu_k over every
 * request (the others get none), token_to_seq for the gather. Returns the
 * rows. */
static int64_t chunk_rows(const prefill_run *x, const mla_chunk_plan_info *p, int64_t i,
                          int32_t *cu_k, int32_t *token_to_seq)
{
    const mla_prefill_args *a = x->a;
    const unsigned char *absorbed = at(x, x->l.absorbed);
    cu_k[0] = 0;
    for (int64_t r = 0; r < a->num_prefills; r++) {
        int32_t len = absorbed[r] ? 0 : p->chunk_seq_lens[i * a->num_prefills + r];
        for (int32_t j = 0; j < len; j++)
            token_to_seq[cu_k[r] + j] = (int32_t)r;
        cu_k[r + 1] = cu_k[r] + len;
    }
    return cu_k[a->num_prefills];
}

/* The context, chunk by chunk, into o_acc / lse_acc. Returns K, the rows
 * the final merge takes from it (0 when no chunk had MHA rows). */
static mla_status run_context(const prefill_run *x, int64_t *K)
{
    const mla_prefill_args *a = x->a;
    const int64_t L = a->kv_lora_rank, width = L + a->rope_dim, elem = mla_dtype_size(a->dtype);
    mla_chunk_plan_info p;
    mla_chunk_plan_info_get(a->plan, &p);
    int32_t *cu_k = at(x, x->l.cu_k), *token_to_seq = at(x, x->l.token_to_seq);
    void *acc = at(x, x->l.o_acc), *chunk = at(x, x->l.o_chunk), *kv = at(x, x->l.kv_chunk);
    float *lse_acc = at(x, x->l.lse_acc), *lse_chunk = at(x, x->l.lse_chunk);
    bool first = true;
    mla_status st = MLA_OK;
    for (int64_t i = 0; i < p.num_chunks && st == MLA_OK; i++) {
        int64_t S = chunk_rows(x, &p, i, cu_k, token_to_seq);
        if (S == 0)
            continue;
        mla_gather_spec spec = {.block_table = a->block_table,
                                .block_table_cols = a->block_table_cols,
                                .num_reqs = a->num_prefills, .cu_seq_lens = cu_k,
                                .seq_starts = p.starts + i * a->num_prefills};
        const char *rows = gather_rows(a, &p);
        if ((st = mla_gather_cache(a->cache, &spec, token_to_seq, S, (void *)rows, a->dtype, width,
                                   x->threads)) != MLA_OK ||
            (st = up_project(x, S, rows, width, kv)) != MLA_OK ||
            (st = attend(x, false, cu_k, S, kv, rows + L * elem, width, first ? acc : chunk,
                         first ? lse_acc : lse_chunk)) != MLA_OK)
            break;
        if (!first)
            st = merge(x, acc, lse_acc, chunk, lse_chunk, acc, a->num_heads * a->v_head_dim,
                       lse_acc, a->num_tokens);
        first = false;
    }
    *K = first ? 0 : p.prefill_tokens_with_context;
    return st;
}

/* Every request as MHA: the absorbed ones' rows are overwritten after. */
static mla_status run_mha(const prefill_run *x, bool context)
{
    const mla_prefill_args *a = x->a;
    void *kv = at(x, x->l.kv_new), *o_new = at(x, x->l.o_new);
    float *lse_new = at(x, x->l.lse_new);
    int64_t K = 0;
    mla_status st;
    if ((st = up_project(x, a->num_tokens, a->kv_c, a->kv_c_stride, kv)) != MLA_OK ||
        (st = attend(x, true, a->query_start_loc, a->num_tokens, kv, a->k_pe, a->k_pe_stride,
                     o_new, lse_new)) != MLA_OK ||
        (context && (st = run_context(x, &K)) != MLA_OK))
        return st;
    return merge(x, at(x, x->l.o_acc), at(x, x->l.lse_acc), o_new, lse_new, a->out,
                 a->out_token_stride, NULL, K);
}

/* Each absorbed request's new tokens, PIECE at a time: piece [i0, i1) is
 * the decode forward with s_q = i1 - i0 over the request's first
 * context + i1 cache rows, whose causal rule (query i sees rows <=
 * seq_len - s_q + i) is the prefill's. */
static mla_status run_absorbed(const prefill_run *x)
{
    const mla_prefill_args *a = x->a;
    const unsigned char *absorbed = at(x, x->l.absorbed);
    const int64_t elem = mla_dtype_size(a->dtype);
    for (int64_t r = 0; r < a->num_prefills; r++) {
        const int64_t n = new_tokens(a, r);
        for (int64_t i0 = 0; absorbed[r] && i0 < n; i0 += PIECE) {
            const int64_t rows = n - i0 < PIECE ? n - i0 : PIECE, t0 = a->query_start_loc[r] + i0;
            const int32_t len = (int32_t)(a->context_lens[r] + i0 + rows);
            mla_decode_forward_args f = {
                .num_reqs = 1, .s_q = rows, .num_heads = a->num_heads,
                .kv_lora_rank = a->kv_lora_rank, .rope_dim = a->rope_dim,
                .qk_nope_dim = a->qk_nope_dim, .v_head_dim = a->v_head_dim, .scale = a->scale,
                .dtype = a->dtype, .q = (const char *)a->q + t0 * a->q_token_stride * elem,
                .q_token_stride = a->q_token_stride, .q_head_stride = a->q_head_stride,
                .w_uk_t = a->w_uk_t, .w_uv = a->w_uv, .w_dtype = a->w_dtype,
                .out = (char *)a->out + t0 * a->out_token_stride * elem,
                .out_token_stride = a->out_token_stride, .cache = a->cache,
                .block_table = a->block_table + r * a->block_table_cols,
                .block_table_cols = a->block_table_cols, .seq_lens = &len};
            mla_status st = mla_decode_forward(&f, x->scratch, x->l.scratch_bytes, x->threads);
            if (st != MLA_OK)
                return st;
        }
    }
    return MLA_OK;
}

static mla_status prefill(const mla_prefill_args *args, void *workspace, int64_t workspace_bytes,
                          int threads)
{
    static const char fn[] = "mla_prefill";
    mla_kv_cache c;
    paths p = {0};
    prefill_buffers b = {0};
    mla_status st = check_args(fn, args, &c, &p, &b);
    if (st != MLA_OK)
        return st;
    prefill_run x = {.a = args, .threads = mla_resolve_threads(threads)};
    if ((st = layout_of(fn, args, plan_tokens(args), x.threads, &x.l)) != MLA_OK ||
        (st = mla_check_workspace(fn, workspace, workspace_bytes, x.l.total)) != MLA_OK ||
        (st = check_workspace_apart(fn, args, &c, &p, &b, workspace, x.l.total)) != MLA_OK)
        return st;
    x.base = mla_align_ptr(workspace);
    x.scratch = at(&x, x.l.scratch);
    unsigned char *absorbed = at(&x, x.l.absorbed);
    for (int64_t r = 0; r < args->num_prefills; r++)
        absorbed[r] = mla_prefill_choose_path(args, r) == MLA_PREFILL_PATH_ABSORBED;
    if (p.mha && (st = run_mha(&x, p.mha_context)) != MLA_OK)
        return st;
    return p.absorbed ? run_absorbed(&x) : MLA_OK;
}

mla_status mla_prefill(const mla_prefill_args *args, void *workspace, int64_t workspace_bytes,
                       int threads)
{
    if (!mla_tracing())
        return prefill(args, workspace, workspace_bytes, threads);
    double start = mla_trace_begin();
    mla_status st = prefill(args, workspace, workspace_bytes, threads);
    mla_trace_prefill(start, st, args, threads);
    return st;
}
