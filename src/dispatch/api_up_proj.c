/* Public kv_b_proj up-projection (mla.h, §1.7 step 1): check every argument
 * -> size the workspace -> pick the MLA_OP_PREFILL backend -> run the packed
 * GEMM driver. Nothing is written before every check has passed. And the
 * weight packed once (mla_pack_kv_b_proj): a header saying what it was
 * packed for, then the driver's packed W. */
#include "checks.h"
#include "dispatch.h"
#include "ops.h"
#include "trace.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/policy.h"
#include "core/size.h"
#include "kernels/common/gemm_packed.h"

#include <stddef.h>
#include <string.h>

/* Dims, dtypes and the sizes they imply: what the workspace query reads. */
static mla_status check_shape(const char *fn, const mla_up_proj_args *a)
{
    if (!a)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: args is NULL", fn);
    if (a->num_tokens < 0 || a->num_heads < 1 || a->kv_lora_rank < 0 || a->qk_nope_dim < 1 ||
        a->v_head_dim < 1)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: num_tokens %lld, num_heads %lld, "
                        "kv_lora_rank %lld, qk_nope_dim %lld, v_head_dim %lld (need >= 0, >= 1, "
                        ">= 0, >= 1, >= 1)", fn, (long long)a->num_tokens, (long long)a->num_heads,
                        (long long)a->kv_lora_rank, (long long)a->qk_nope_dim,
                        (long long)a->v_head_dim);
    const mla_dtype dtypes[] = {a->kv_c_dtype, a->w_dtype, a->out_dtype};
    const char *const names[] = {"kv_c", "kv_b_proj", "out"};
    for (int i = 0; i < 3; i++)
        if (!mla_dtype_is_float(dtypes[i]))
            return mla_fail(MLA_ERR_UNSUPPORTED, "%s: %s dtype %s (need f32, bf16 or f16)", fn,
                            names[i], mla_dtype_name(dtypes[i]));
    int64_t rows, bytes;
    if (__builtin_add_overflow(a->qk_nope_dim, a->v_head_dim, &rows) ||
        !mla_mul_size(rows, a->num_heads, &rows) ||
        !mla_span_bytes(rows, a->kv_lora_rank, a->kv_lora_rank, mla_dtype_size(a->w_dtype), &bytes))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: kv_b_proj of %lld heads x (%lld + %lld) rows x %lld "
                        "overflows", fn, (long long)a->num_heads, (long long)a->qk_nope_dim,
                        (long long)a->v_head_dim, (long long)a->kv_lora_rank);
    return MLA_OK;
}

/* ---- the packed weight ------------------------------------------------------ */

/* What a packed kv_b_proj was packed for, in its first PACK_HEADER bytes
 * (read and written with memcpy: the buffer need not be aligned). The
 * driver's tiling is recorded too, so a buffer saved by another build of
 * different strips is rejected, not misread. */
typedef struct pack_header {
    char magic[8];
    int64_t num_heads, kv_lora_rank, qk_nope_dim, v_head_dim;
    int32_t w_dtype, kv_c_dtype, dot, strip, segment, unused;
} pack_header;

enum { PACK_HEADER = 64 };
_Static_assert(sizeof(pack_header) == PACK_HEADER, "the header is one line");
static const char pack_magic[8] = "mlakvb1";

static pack_header header_of(const mla_up_proj_args *a, bool dot, int64_t strip)
{
    pack_header h = {.num_heads = a->num_heads, .kv_lora_rank = a->kv_lora_rank,
                     .qk_nope_dim = a->qk_nope_dim, .v_head_dim = a->v_head_dim,
                     .w_dtype = a->w_dtype, .kv_c_dtype = a->kv_c_dtype, .dot = dot,
                     .strip = (int32_t)strip, .segment = MLA_PACKED_GEMM_NC};
    memcpy(h.magic, pack_magic, sizeof h.magic);
    return h;
}

/* Bytes of the packing for a's shape on either route (checked shape). */
static bool packed_bytes(const mla_up_proj_args *a, bool dot, int64_t *bytes)
{
    int64_t elems;
    return mla_gemm_packed_w_elems(a->num_heads * (a->qk_nope_dim + a->v_head_dim),
                                   a->kv_lora_rank, &elems) &&
           mla_mul_size(elems, dot ? 2 : 4, bytes) &&
           !__builtin_add_overflow(*bytes, PACK_HEADER, bytes);
}

mla_status mla_up_proj_backend(const mla_up_proj_args *a, const mla_kernels **k,
                               const char **backend)
{
    /* the depth the kernels run, in whole bf16 pairs (at least one, as a
     * config needs), so the route dispatch weighs is the one the driver takes */
    int64_t depth = a->kv_lora_rank > 0 ? mla_round_up(a->kv_lora_rank, 2) : 2;
    mla_config cfg = {.q_dtype = a->kv_c_dtype, .cache_dtype = a->w_dtype,
                      .kv_lora_rank = depth, .rope_dim = 0, .num_heads = a->num_heads,
                      .block_size = 1};
    return mla_dispatch(MLA_OP_PREFILL, &cfg, k, backend);
}

mla_status mla_up_proj_check_packed(const char *fn, const mla_up_proj_args *a, mla_span *span)
{
    pack_header h, want;
    memcpy(&h, a->kv_b_proj_packed, sizeof h);
    want = header_of(a, h.dot == 1, h.strip);
    if (memcmp(h.magic, pack_magic, sizeof h.magic) != 0 || (h.dot != 0 && h.dot != 1) ||
        (h.strip != MLA_PACKED_GEMM_NR && h.strip != MLA_PACKED_GEMM_NC) ||
        h.segment != want.segment)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: kv_b_proj_packed was not made by "
                        "mla_pack_kv_b_proj of this build", fn);
    if (memcmp(&h, &want, sizeof h) != 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: kv_b_proj_packed is for %lld heads, L "
                        "%lld, P %lld, V %lld, kv_b_proj %s, kv_c %s; the call has %lld, %lld, "
                        "%lld, %lld, %s, %s", fn, (long long)h.num_heads,
                        (long long)h.kv_lora_rank, (long long)h.qk_nope_dim,
                        (long long)h.v_head_dim, mla_dtype_name((mla_dtype)h.w_dtype),
                        mla_dtype_name((mla_dtype)h.kv_c_dtype), (long long)a->num_heads,
                        (long long)a->kv_lora_rank, (long long)a->qk_nope_dim,
                        (long long)a->v_head_dim, mla_dtype_name(a->w_dtype),
                        mla_dtype_name(a->kv_c_dtype));
    const mla_kernels *k;
    const char *backend;
    mla_status st = mla_up_proj_backend(a, &k, &backend);
    if (st != MLA_OK)
        return st;
    if (h.dot && !k->gemm_bf16dot && !k->gemm_bf16tile)
        return mla_fail(MLA_ERR_UNSUPPORTED, "%s: kv_b_proj_packed holds bf16 pairs for a bf16 "
                        "pair route (dot product or AMX tiles), which backend %s has not (pack "
                        "it under the backend that runs the call)", fn, backend);
    const int64_t strip = mla_gemm_packed_strip(k, h.dot);
    if (h.strip != strip)
        return mla_fail(MLA_ERR_UNSUPPORTED, "%s: kv_b_proj_packed holds strips of %d columns; "
                        "backend %s's route takes %lld (pack it under the backend that runs "
                        "the call)", fn, (int)h.strip, backend, (long long)strip);
    int64_t bytes = 0;
    packed_bytes(a, h.dot, &bytes); /* fits: the header matches a checked shape */
    span->lo = (const char *)a->kv_b_proj_packed;
    span->hi = span->lo + bytes;
    return MLA_OK;
}

static mla_span k_nope_span(const mla_up_proj_args *a)
{
    return mla_view_span(a->k_nope, a->num_tokens, a->num_heads, a->qk_nope_dim,
                         a->k_nope_token_stride, a->k_nope_head_stride, a->out_dtype);
}

static mla_span v_span(const mla_up_proj_args *a)
{
    return mla_view_span(a->v, a->num_tokens, a->num_heads, a->v_head_dim, a->v_token_stride,
                         a->v_head_stride, a->out_dtype);
}

/* k_nope and v may share a buffer when their rows interleave, as a caller's
 * [S, H, P + V] buffer has them: the same strides, one's row ending before
 * the other's starts, and the two rows together not overlapping the next
 * (token, head) cell. */
static mla_status check_outputs_apart(const char *fn, const mla_up_proj_args *a)
{
    const int64_t S = a->num_tokens, H = a->num_heads, P = a->qk_nope_dim, V = a->v_head_dim;
    const mla_span k = k_nope_span(a), v = v_span(a);
    if (!(k.lo < v.hi && v.lo < k.hi))
        return MLA_OK;
    const int64_t size = mla_dtype_size(a->out_dtype);
    const ptrdiff_t gap = v.lo - k.lo;
    bool same_strides = a->k_nope_token_stride == a->v_token_stride &&
                        a->k_nope_head_stride == a->v_head_stride;
    if (same_strides && gap % size == 0 && gap / size >= P)
        return mla_check_view(fn, "k_nope and v", a->k_nope, S, H, gap / size + V,
                              a->v_token_stride, a->v_head_stride, a->out_dtype, true);
    if (same_strides && gap % size == 0 && -gap / size >= V)
        return mla_check_view(fn, "v and k_nope", a->v, S, H, -gap / size + P, a->v_token_stride,
                              a->v_head_stride, a->out_dtype, true);
    return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: k_nope and v rows overlap", fn);
}

/* Neither output may overlap an input (w: the weight the call reads): the
 * driver reads W while it writes. */
static mla_status check_inputs_apart(const char *fn, const mla_up_proj_args *a, mla_span w)
{
    const mla_span kv_c = mla_view_span(a->kv_c, a->num_tokens, 1, a->kv_lora_rank,
                                        a->kv_c_stride, 0, a->kv_c_dtype);
    const mla_span k = k_nope_span(a), v = v_span(a);
    mla_status st;
    const char *w_name = a->kv_b_proj_packed ? "kv_b_proj_packed" : "kv_b_proj";
    if ((st = mla_check_apart(fn, "k_nope", k, "kv_c", kv_c)) ||
        (st = mla_check_apart(fn, "k_nope", k, w_name, w)) ||
        (st = mla_check_apart(fn, "v", v, "kv_c", kv_c)))
        return st;
    return mla_check_apart(fn, "v", v, w_name, w);
}

/* Everything but the workspace. */
static mla_status check_args(const char *fn, const mla_up_proj_args *a)
{
    mla_status st = check_shape(fn, a);
    if (st != MLA_OK)
        return st;
    const int64_t S = a->num_tokens, H = a->num_heads, L = a->kv_lora_rank;
    const int64_t N = H * (a->qk_nope_dim + a->v_head_dim);
    mla_span w = mla_view_span(a->kv_b_proj, N, 1, L, L, 0, a->w_dtype);
    if (a->kv_b_proj_packed)
        st = mla_up_proj_check_packed(fn, a, &w);
    else
        st = mla_check_rows(fn, "kv_b_proj", a->kv_b_proj, N, L, L, a->w_dtype);
    if (st != MLA_OK ||
        (st = mla_check_rows(fn, "kv_c", a->kv_c, S, a->kv_c_stride, L, a->kv_c_dtype)) ||
        (st = mla_check_view(fn, "k_nope", a->k_nope, S, H, a->qk_nope_dim, a->k_nope_token_stride,
                             a->k_nope_head_stride, a->out_dtype, true)) ||
        (st = mla_check_view(fn, "v", a->v, S, H, a->v_head_dim, a->v_token_stride,
                             a->v_head_stride, a->out_dtype, true)))
        return st;
    if ((st = check_outputs_apart(fn, a)) != MLA_OK)
        return st;
    return check_inputs_apart(fn, a, w);
}

static mla_status workspace_bytes(const char *fn, const mla_up_proj_args *a, int threads,
                                  int64_t *bytes)
{
    int64_t n = a->num_heads * (a->qk_nope_dim + a->v_head_dim); /* checked in check_shape */
    if (!mla_gemm_packed_workspace(a->num_tokens, n, a->kv_lora_rank, a->kv_b_proj_packed != NULL,
                                   threads, bytes))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: workspace for %lld tokens x %lld overflows", fn,
                        (long long)a->num_tokens, (long long)a->kv_lora_rank);
    return MLA_OK;
}

mla_status mla_up_proj_workspace_size(const mla_up_proj_args *args, int threads, int64_t *bytes)
{
    static const char fn[] = "mla_up_proj_workspace_size";
    mla_status st = check_shape(fn, args);
    if (st != MLA_OK)
        return st;
    if (!bytes)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: bytes is NULL", fn);
    return workspace_bytes(fn, args, mla_resolve_threads(threads), bytes);
}

static mla_status up_proj(const mla_up_proj_args *args, void *workspace,
                          int64_t workspace_bytes_given, int threads)
{
    static const char fn[] = "mla_up_proj";
    mla_status st = check_args(fn, args);
    if (st != MLA_OK)
        return st;
    int t = mla_resolve_threads(threads);
    int64_t need;
    if ((st = workspace_bytes(fn, args, t, &need)) != MLA_OK ||
        (st = mla_check_workspace(fn, workspace, workspace_bytes_given, need)) != MLA_OK)
        return st;
    const mla_kernels *k;
    const char *backend;
    if ((st = mla_up_proj_backend(args, &k, &backend)) != MLA_OK)
        return st;
    pack_header h = {0};
    if (args->kv_b_proj_packed)
        memcpy(&h, args->kv_b_proj_packed, sizeof h);
    const bool dot = args->kv_b_proj_packed ? h.dot : mla_gemm_packed_dot(k, args->kv_c_dtype,
                                                                          args->w_dtype);
    mla_up_proj_run(k, args, args->kv_b_proj_packed ? (const char *)args->kv_b_proj_packed +
                    PACK_HEADER : NULL, h.dot, workspace, t);
    mla_note_backend(backend);
    mla_note_route(mla_gemm_packed_route_name(k, dot));
    return MLA_OK;
}

mla_status mla_up_proj(const mla_up_proj_args *args, void *workspace, int64_t workspace_bytes_given,
                       int threads)
{
    if (!mla_tracing())
        return up_proj(args, workspace, workspace_bytes_given, threads);
    double start = mla_trace_begin();
    mla_status st = up_proj(args, workspace, workspace_bytes_given, threads);
    mla_trace_up_proj(start, st, args, threads);
    return st;
}

/* The backend and route a packing takes, and its bytes. */
typedef struct pack_plan {
    const mla_kernels *kern;
    const char *backend;
    bool dot;
    int64_t bytes;
} pack_plan;

static mla_status plan_packing(const char *fn, const mla_up_proj_args *a, pack_plan *p)
{
    mla_status st = check_shape(fn, a);
    if (st != MLA_OK || (st = mla_up_proj_backend(a, &p->kern, &p->backend)) != MLA_OK)
        return st;
    p->dot = mla_gemm_packed_dot(p->kern, a->kv_c_dtype, a->w_dtype);
    if (!packed_bytes(a, p->dot, &p->bytes))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: the packing of %lld heads x %lld overflows", fn,
                        (long long)a->num_heads, (long long)a->kv_lora_rank);
    return MLA_OK;
}

mla_status mla_pack_kv_b_proj_size(const mla_up_proj_args *args, int64_t *bytes)
{
    static const char fn[] = "mla_pack_kv_b_proj_size";
    pack_plan p;
    mla_status st = plan_packing(fn, args, &p);
    if (st != MLA_OK)
        return st;
    if (!bytes)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: bytes is NULL", fn);
    *bytes = p.bytes;
    return MLA_OK;
}

static mla_status pack_kv_b_proj(const mla_up_proj_args *args, void *packed, int64_t bytes,
                                 int threads)
{
    static const char fn[] = "mla_pack_kv_b_proj";
    pack_plan p;
    mla_status st = plan_packing(fn, args, &p);
    if (st != MLA_OK)
        return st;
    const int64_t N = args->num_heads * (args->qk_nope_dim + args->v_head_dim),
                  L = args->kv_lora_rank;
    if ((st = mla_check_rows(fn, "kv_b_proj", args->kv_b_proj, N, L, L, args->w_dtype)) != MLA_OK)
        return st;
    if (!packed || bytes < p.bytes)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: packed is %s (%lld bytes; need %lld)", fn,
                        packed ? "too small" : "NULL", (long long)bytes, (long long)p.bytes);
    const mla_span out = {.lo = packed, .hi = (const char *)packed + p.bytes};
    if ((st = mla_check_apart(fn, "packed", out, "kv_b_proj",
                              mla_view_span(args->kv_b_proj, N, 1, L, L, 0, args->w_dtype))))
        return st;
    const pack_header h = header_of(args, p.dot, mla_gemm_packed_strip(p.kern, p.dot));
    memcpy(packed, &h, sizeof h);
    mla_up_proj_pack_run(p.kern, args, p.dot, (char *)packed + PACK_HEADER,
                         mla_resolve_threads(threads));
    mla_note_backend(p.backend);
    mla_note_route(mla_gemm_packed_route_name(p.kern, p.dot));
    return MLA_OK;
}

mla_status mla_pack_kv_b_proj(const mla_up_proj_args *args, void *packed, int64_t bytes,
                              int threads)
{
    if (!mla_tracing())
        return pack_kv_b_proj(args, packed, bytes, threads);
    double start = mla_trace_begin();
    mla_status st = pack_kv_b_proj(args, packed, bytes, threads);
    mla_trace_pack_kv_b_proj(start, st, args, threads);
    return st;
}
