/* Public absorbed decode (docs/semantics.md §1.6, §5): check every argument and every
 * block id the call will read -> build the split-KV schedule in the
 * workspace -> pick the MLA_OP_DECODE backend -> run the driver. */
#include "checks.h"
#include "dispatch.h"
#include "ops.h"
#include "trace.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/policy.h"
#include "core/size.h"
#include "kernels/common/absorb.h"
#include "kernels/common/decode.h"
#include "metadata/metadata.h"

#include <math.h>

/* Every request's length fits its block table row, and every block id the
 * call will read (columns below ceil(len / block_size)) is a cache block. */
static mla_status check_requests(const char *fn, const mla_decode_args *a, const mla_kv_cache *c)
{
    for (int64_t b = 0; b < a->num_reqs; b++) {
        if (a->seq_lens[b] < 0)
            return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: seq_lens[%lld] = %lld is negative", fn,
                            (long long)b, (long long)a->seq_lens[b]);
        mla_status st = mla_check_request_blocks(fn, c, a->block_table, a->block_table_cols, b,
                                                 "seq_lens", a->seq_lens[b]);
        if (st != MLA_OK)
            return st;
    }
    return MLA_OK;
}

/* The sizes and q dtype of a call, and that its query rows (num_reqs x
 * s_q x num_heads) fit int64_t: what the workspace query reads, no
 * pointer among them. */
static mla_status check_sizes(const char *fn, const mla_decode_args *a)
{
    if (!a)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: args is NULL", fn);
    if (a->num_reqs < 0 || a->s_q < 1 || a->num_heads < 1 || a->kv_lora_rank < 1 || a->rope_dim < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: num_reqs %lld, s_q %lld, num_heads %lld, "
                        "kv_lora_rank %lld, rope_dim %lld (need >= 0, >= 1, >= 1, >= 1, >= 0)", fn,
                        (long long)a->num_reqs, (long long)a->s_q, (long long)a->num_heads,
                        (long long)a->kv_lora_rank, (long long)a->rope_dim);
    if (!mla_dtype_is_float(a->q_dtype))
        return mla_fail(MLA_ERR_UNSUPPORTED, "%s: q dtype %s (need f32, bf16 or f16)", fn,
                        mla_dtype_name(a->q_dtype));
    int64_t tokens, rows;
    if (!mla_mul_size(a->num_reqs, a->s_q, &tokens) || !mla_mul_size(a->s_q, a->num_heads, &rows) ||
        !mla_mul_size(tokens, a->num_heads, &rows))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: num_reqs x s_q x num_heads overflows", fn);
    return MLA_OK;
}

/* check_sizes, the scale and the cache: the part of check_args that reads
 * no pointer but the cache's. */
static mla_status check_shape(const char *fn, const mla_decode_args *a, mla_kv_cache *c)
{
    mla_status st = check_sizes(fn, a);
    if (st != MLA_OK)
        return st;
    if (!isfinite(a->scale))
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: scale %g is not finite", fn, (double)a->scale);
    if ((st = mla_check_cache(fn, a->cache, c)) != MLA_OK)
        return st;
    if (a->kv_lora_rank > c->width || a->rope_dim != c->width - a->kv_lora_rank)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: kv_lora_rank + rope_dim = %lld + %lld is not "
                        "the cache width %lld", fn, (long long)a->kv_lora_rank,
                        (long long)a->rope_dim, (long long)c->width);
    return MLA_OK;
}

static mla_status check_args(const char *fn, const mla_decode_args *a, mla_kv_cache *c)
{
    mla_status st = check_shape(fn, a, c);
    if (st != MLA_OK)
        return st;
    const int64_t tokens = a->num_reqs * a->s_q; /* fits: check_shape */
    if ((st = mla_check_view(fn, "q_nope", a->q_nope, tokens, a->num_heads, a->kv_lora_rank,
                         a->q_nope_token_stride, a->q_nope_head_stride, a->q_dtype, false)) ||
        (st = mla_check_view(fn, "q_pe", a->q_pe, tokens, a->num_heads, a->rope_dim,
                         a->q_pe_token_stride, a->q_pe_head_stride, a->q_dtype, false)) ||
        (st = mla_check_view(fn, "out", a->out, tokens, a->num_heads, a->kv_lora_rank,
                         a->out_token_stride, a->out_head_stride, a->q_dtype, true)))
        return st;
    if (a->num_reqs > 0 && !a->seq_lens)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: seq_lens is NULL", fn);
    if ((st = mla_check_block_table(fn, a->block_table, a->num_reqs, a->block_table_cols)))
        return st;
    return check_requests(fn, a, c);
}

/* The schedule parameters of a call: the caller's (a zeroed struct when
 * NULL: every default), with one part per thread unless it says otherwise.
 * mla_build_decode_sched resolves the other defaults. */
static mla_decode_sched_params sched_params(const mla_decode_args *a, int threads)
{
    mla_decode_sched_params p = a->sched ? *a->sched : (mla_decode_sched_params){0};
    if (p.num_parts <= 0)
        p.num_parts = threads;
    return p;
}

/* The partial-result rows the call's schedule hands out (reading seq_lens
 * in batch-invariant mode only), checking the schedule as the builder
 * will: one that would fail is rejected before anything is written. */
static mla_status call_slots(const char *fn, const mla_decode_args *a,
                             const mla_decode_sched_params *p, int64_t *slots)
{
    if (a->num_reqs > 0 && !a->seq_lens && mla_decode_sched_resolved(p).split_blocks > 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: seq_lens is NULL (a batch-invariant "
                        "schedule's workspace grows with the lengths; "
                        "mla_decode_workspace_bound needs only their maximum)", fn);
    return mla_decode_sched_check(fn, a->seq_lens, a->num_reqs, p, slots);
}

/* Workspace = [parts | split_prefix | driver scratch], each 64-byte aligned
 * from an aligned base. */
typedef struct ws_layout {
    int64_t parts_bytes, prefix_bytes, driver_bytes, total;
} ws_layout;

/* Lays the workspace out for a schedule of p (checked) handing out `slots`
 * partial rows. */
static mla_status layout_of(const char *fn, const mla_decode_args *a, const mla_decode_sched_params *p,
                            int64_t slots, int threads, ws_layout *w)
{
    /* the check bounds num_parts (2^20) and B (int32): these two are small */
    w->parts_bytes = mla_round_up(p->num_parts * (int64_t)sizeof(mla_sched_part), MLA_ALIGN);
    w->prefix_bytes = mla_round_up((a->num_reqs + 1) * (int64_t)sizeof(int32_t), MLA_ALIGN);
    w->total = MLA_ALIGN + w->parts_bytes + w->prefix_bytes;
    if (!mla_decode_workspace(a, slots, threads, &w->driver_bytes) ||
        __builtin_add_overflow(w->total, w->driver_bytes, &w->total))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: workspace for %lld split slots overflows", fn,
                        (long long)slots);
    return MLA_OK;
}

/* The call's schedule checked and its workspace laid out. */
static mla_status call_layout(const char *fn, const mla_decode_args *a, int threads,
                              mla_decode_sched_params *p, ws_layout *w)
{
    *p = sched_params(a, threads);
    int64_t slots;
    mla_status st = call_slots(fn, a, p, &slots);
    return st == MLA_OK ? layout_of(fn, a, p, slots, threads, w) : st;
}

/* Builds the schedule at the start of the workspace (any alignment, sized
 * by layout_of) and runs the driver behind it. */
static mla_status run_decode(const char *fn, const mla_decode_args *a, const mla_kv_cache *c,
                             const mla_kernels *k, void *workspace, int threads)
{
    mla_decode_sched_params p;
    ws_layout w;
    mla_status st = call_layout(fn, a, threads, &p, &w);
    if (st != MLA_OK)
        return st;
    char *base = mla_align_ptr(workspace);
    mla_sched_part *parts = (mla_sched_part *)base;
    int32_t *prefix = (int32_t *)(base + w.parts_bytes);
    int64_t num_parts;
    if ((st = mla_build_decode_sched(a->seq_lens, a->num_reqs, &p, parts, p.num_parts, &num_parts,
                                     prefix)) != MLA_OK)
        return st;
    const mla_decode_sched_params used = mla_decode_sched_resolved(&p);
    mla_decode_run(k, a, c, parts, num_parts, prefix, used.block_n, used.split_blocks,
                   base + w.parts_bytes + w.prefix_bytes, threads);
    return MLA_OK;
}

mla_status mla_decode_backend(const mla_decode_args *a, const mla_kv_cache *cache,
                              const mla_kernels **k, const char **name)
{
    mla_config cfg = {.q_dtype = a->q_dtype, .cache_dtype = cache->dtype,
                      .kv_lora_rank = a->kv_lora_rank, .rope_dim = a->rope_dim,
                      .num_heads = a->num_heads, .block_size = cache->block_size,
                      .bf16_compute = a->bf16_compute};
    return mla_dispatch(MLA_OP_DECODE, &cfg, k, name);
}

mla_status mla_decode_workspace_size(const mla_decode_args *args, int threads, int64_t *bytes)
{
    static const char fn[] = "mla_decode_workspace_size";
    mla_status st = check_sizes(fn, args);
    if (st != MLA_OK)
        return st;
    if (!bytes)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: bytes is NULL", fn);
    mla_decode_sched_params p;
    ws_layout w;
    if ((st = call_layout(fn, args, mla_resolve_threads(threads), &p, &w)) != MLA_OK)
        return st;
    *bytes = w.total;
    return MLA_OK;
}

static mla_status decode(const mla_decode_args *args, void *workspace, int64_t workspace_bytes,
                         int threads)
{
    static const char fn[] = "mla_decode";
    mla_kv_cache c;
    mla_status st = check_args(fn, args, &c);
    if (st != MLA_OK)
        return st;
    int t = mla_resolve_threads(threads);
    mla_decode_sched_params p;
    ws_layout w;
    if ((st = call_layout(fn, args, t, &p, &w)) != MLA_OK)
        return st;
    if ((st = mla_check_workspace(fn, workspace, workspace_bytes, w.total)) != MLA_OK)
        return st;
    const mla_kernels *k;
    const char *backend;
    if ((st = mla_decode_backend(args, &c, &k, &backend)) != MLA_OK)
        return st;
    if ((st = run_decode(fn, args, &c, k, workspace, t)) != MLA_OK)
        return st;
    mla_note_backend(backend);
    return MLA_OK;
}

mla_status mla_decode(const mla_decode_args *args, void *workspace, int64_t workspace_bytes,
                      int threads)
{
    if (!mla_tracing())
        return decode(args, workspace, workspace_bytes, threads);
    double start = mla_trace_begin();
    mla_status st = decode(args, workspace, workspace_bytes, threads);
    mla_trace_decode(start, st, args, threads);
    return st;
}

/* ---- weight preparation and the absorbed forward ---------------------------- */

static mla_status prepare_weights(const void *kv_b_proj, mla_dtype src_dtype, int64_t num_heads,
                                  int64_t kv_lora_rank, int64_t qk_nope_dim, int64_t v_head_dim,
                                  void *w_uk_t, void *w_uv, mla_dtype w_dtype, int threads)
{
    static const char fn[] = "mla_prepare_weights";
    if (num_heads < 1 || kv_lora_rank < 1 || qk_nope_dim < 1 || v_head_dim < 1)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: num_heads %lld, kv_lora_rank %lld, "
                        "qk_nope_dim %lld, v_head_dim %lld (need >= 1)", fn, (long long)num_heads,
                        (long long)kv_lora_rank, (long long)qk_nope_dim, (long long)v_head_dim);
    if (!mla_dtype_is_float(src_dtype))
        return mla_fail(MLA_ERR_UNSUPPORTED, "%s: kv_b_proj dtype %s (need f32, bf16 or f16)", fn,
                        mla_dtype_name(src_dtype));
    if (w_dtype != MLA_DTYPE_F32 && w_dtype != MLA_DTYPE_BF16)
        return mla_fail(MLA_ERR_UNSUPPORTED, "%s: weight dtype %s (need f32 or bf16)", fn,
                        mla_dtype_name(w_dtype));
    if (!kv_b_proj || !w_uk_t || !w_uv)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                        !kv_b_proj ? "kv_b_proj" : !w_uk_t ? "w_uk_t" : "w_uv");
    int64_t rows, elems, bytes;
    if (__builtin_add_overflow(qk_nope_dim, v_head_dim, &rows) || !mla_mul_size(rows, num_heads, &rows) ||
        !mla_mul_size(rows, kv_lora_rank, &elems) || !mla_mul_size(elems, 4, &bytes))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: kv_b_proj of %lld heads overflows", fn,
                        (long long)num_heads);
    const mla_kernels *k;
    const char *backend;
    mla_status st = mla_dispatch(MLA_OP_CONVERT, NULL, &k, &backend);
    if (st != MLA_OK)
        return st;
    mla_absorb_prepare_weights(k, kv_b_proj, src_dtype, num_heads, kv_lora_rank, qk_nope_dim,
                               v_head_dim, w_uk_t, w_uv, w_dtype, mla_resolve_threads(threads));
    mla_note_backend(backend);
    return MLA_OK;
}

mla_status mla_prepare_weights(const void *kv_b_proj, mla_dtype src_dtype, int64_t num_heads,
                               int64_t kv_lora_rank, int64_t qk_nope_dim, int64_t v_head_dim,
                               void *w_uk_t, void *w_uv, mla_dtype w_dtype, int threads)
{
    if (!mla_tracing())
        return prepare_weights(kv_b_proj, src_dtype, num_heads, kv_lora_rank, qk_nope_dim,
                               v_head_dim, w_uk_t, w_uv, w_dtype, threads);
    double start = mla_trace_begin();
    mla_status st = prepare_weights(kv_b_proj, src_dtype, num_heads, kv_lora_rank, qk_nope_dim,
                                    v_head_dim, w_uk_t, w_uv, w_dtype, threads);
    mla_trace_prepare_weights(start, st, src_dtype, num_heads, kv_lora_rank, qk_nope_dim,
                              v_head_dim, w_dtype, threads);
    return st;
}

/* The attention of a forward call as decode args: its sizes, dtype, cache,
 * table, lengths, lse and schedule, without query and output rows (the
 * trace names a forward's attention by it, too). */
static mla_decode_args decode_forward_shape(const mla_decode_forward_args *f)
{
    return (mla_decode_args){.num_reqs = f->num_reqs, .s_q = f->s_q, .num_heads = f->num_heads,
                             .kv_lora_rank = f->kv_lora_rank, .rope_dim = f->rope_dim,
                             .scale = f->scale, .q_dtype = f->dtype, .cache = f->cache,
                             .block_table = f->block_table, .block_table_cols = f->block_table_cols,
                             .seq_lens = f->seq_lens, .lse = f->lse, .sched = f->sched,
                             .bf16_compute = f->bf16_compute};
}

/* The attention of a forward call, over q_lat [Td, H, L+R] into o_lat
 * [Td, H, L], both dense in the activation dtype (H x (L + R) elements
 * checked to fit). */
static mla_decode_args forward_attention(const mla_decode_forward_args *f, const void *q_lat,
                                         void *o_lat)
{
    mla_decode_args a = decode_forward_shape(f);
    int64_t lat = a.kv_lora_rank + a.rope_dim;
    a.q_nope = q_lat;
    a.q_pe = q_lat ? (const char *)q_lat + a.kv_lora_rank * mla_dtype_size(a.q_dtype) : NULL;
    a.q_nope_token_stride = a.q_pe_token_stride = a.num_heads * lat;
    a.q_nope_head_stride = a.q_pe_head_stride = lat;
    a.out = o_lat;
    a.out_token_stride = a.num_heads * a.kv_lora_rank;
    a.out_head_stride = a.kv_lora_rank;
    return a;
}

/* Workspace of a forward call = [q_lat | o_lat | GEMM scratch per thread |
 * decode workspace]; sizes in bytes, 64-byte multiples. */
typedef struct forward_layout {
    int64_t q_lat, o_lat, gemm, total; /* the decode's part is the rest */
} forward_layout;

/* The forward's workspace for attention shape `a` (sizes and dtype
 * checked by check_sizes), the P, V of its GEMMs and a decode schedule
 * handing out `slots` partial rows. */
static mla_status forward_bytes(const char *fn, const mla_decode_args *a, int64_t P, int64_t V,
                                int64_t slots, int threads, forward_layout *w)
{
    const int64_t tokens = a->num_reqs * a->s_q; /* checked by the caller */
    const int64_t L = a->kv_lora_rank, size = mla_dtype_size(a->q_dtype), lat = L + a->rope_dim;
    mla_absorb_shape s = {.tokens = tokens, .heads = a->num_heads, .L = L, .R = a->rope_dim,
                          .P = P, .V = V};
    /* mla_absorb_scratch_floats is at most tokens * (P + V + 2L); q_lat
     * bounds tokens x H, and so the attention's query rows, before
     * layout_of forms them */
    int64_t widths = 0, bound;
    if (__builtin_add_overflow(P, V, &widths) || __builtin_add_overflow(widths, L, &widths) ||
        __builtin_add_overflow(widths, L, &widths) || !mla_mul_size(tokens, widths, &bound) ||
        !mla_region_bytes(tokens, a->num_heads, lat, size, &w->q_lat) ||
        !mla_region_bytes(tokens, a->num_heads, L, size, &w->o_lat) ||
        !mla_region_bytes(mla_absorb_scratch_floats(&s), threads, sizeof(float), 1, &w->gemm))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: workspace size overflows", fn);
    mla_decode_sched_params p = sched_params(a, threads);
    ws_layout dw;
    mla_status st = layout_of(fn, a, &p, slots, threads, &dw);
    if (st != MLA_OK)
        return st;
    if (__builtin_add_overflow(w->q_lat, MLA_ALIGN, &w->total) ||
        __builtin_add_overflow(w->total, w->o_lat, &w->total) ||
        __builtin_add_overflow(w->total, w->gemm, &w->total) ||
        __builtin_add_overflow(w->total, dw.total, &w->total))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: workspace size overflows", fn);
    return MLA_OK;
}

/* A forward's q_lat row, H x (L + R) elements, fits int64_t in bytes
 * (sizes checked by check_sizes). */
static mla_status check_latent_row(const char *fn, const mla_decode_args *a)
{
    int64_t row_bytes;
    if (!mla_mul_size(a->num_heads, a->kv_lora_rank + a->rope_dim, &row_bytes) ||
        !mla_mul_size(row_bytes, mla_dtype_size(a->q_dtype), &row_bytes))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: num_heads x (kv_lora_rank + rope_dim) overflows", fn);
    return MLA_OK;
}

/* What the forward's workspace query reads: P, V, the weight dtype and
 * the attention's sizes and dtype. */
static mla_status check_forward_sizes(const char *fn, const mla_decode_forward_args *f)
{
    if (!f)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: args is NULL", fn);
    if (f->qk_nope_dim < 1 || f->v_head_dim < 1)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: qk_nope_dim %lld, v_head_dim %lld (need >= 1)",
                        fn, (long long)f->qk_nope_dim, (long long)f->v_head_dim);
    if (f->w_dtype != MLA_DTYPE_F32 && f->w_dtype != MLA_DTYPE_BF16)
        return mla_fail(MLA_ERR_UNSUPPORTED, "%s: weight dtype %s (need f32 or bf16)", fn,
                        mla_dtype_name(f->w_dtype));
    const mla_decode_args shape = decode_forward_shape(f);
    mla_status st = check_sizes(fn, &shape);
    return st == MLA_OK ? check_latent_row(fn, &shape) : st;
}

static mla_status check_forward(const char *fn, const mla_decode_forward_args *f, int threads,
                                forward_layout *w)
{
    mla_status st = check_forward_sizes(fn, f);
    if (st != MLA_OK)
        return st;
    if (!f->w_uk_t || !f->w_uv)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, f->w_uk_t ? "w_uv" : "w_uk_t");
    if (f->num_reqs > 0 && (!f->q || !f->out))
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, f->q ? "out" : "q");
    /* the attention part, at stand-in pointers with the workspace's layout */
    mla_kv_cache c;
    mla_decode_args stand_in = forward_attention(f, f->q, f->out);
    if ((st = check_args(fn, &stand_in, &c)) != MLA_OK)
        return st;
    int64_t tokens = f->num_reqs * f->s_q, width, heads_v;
    if (!mla_mul_size(f->num_heads, f->v_head_dim, &heads_v) ||
        __builtin_add_overflow(f->qk_nope_dim, f->rope_dim, &width))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: num_heads x v_head_dim overflows", fn);
    if ((st = mla_check_view(fn, "q", f->q, tokens, f->num_heads, width, f->q_token_stride,
                         f->q_head_stride, f->dtype, false)) ||
        (st = mla_check_rows(fn, "out", f->out, tokens, f->out_token_stride, heads_v, f->dtype)))
        return st;
    mla_decode_sched_params p = sched_params(&stand_in, threads);
    int64_t slots;
    if ((st = call_slots(fn, &stand_in, &p, &slots)) != MLA_OK)
        return st;
    return forward_bytes(fn, &stand_in, f->qk_nope_dim, f->v_head_dim, slots, threads, w);
}

mla_status mla_decode_forward_bytes(const char *fn, const mla_decode_args *shape, int64_t P,
                                    int64_t V, int threads, int64_t *bytes)
{
    mla_decode_sched_params p = sched_params(shape, threads);
    int64_t slots;
    forward_layout w = {0};
    mla_status st = call_slots(fn, shape, &p, &slots);
    if (st == MLA_OK)
        st = forward_bytes(fn, shape, P, V, slots, threads, &w);
    if (st == MLA_OK)
        *bytes = w.total;
    return st;
}

mla_status mla_decode_forward_workspace_size(const mla_decode_forward_args *args, int threads,
                                             int64_t *bytes)
{
    static const char fn[] = "mla_decode_forward_workspace_size";
    mla_status st = check_forward_sizes(fn, args);
    if (st != MLA_OK)
        return st;
    if (!bytes)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: bytes is NULL", fn);
    const mla_decode_args shape = decode_forward_shape(args);
    int64_t need;
    if ((st = mla_decode_forward_bytes(fn, &shape, args->qk_nope_dim, args->v_head_dim,
                                       mla_resolve_threads(threads), &need)) != MLA_OK)
        return st;
    *bytes = need;
    return MLA_OK;
}

mla_status mla_decode_workspace_bound(const mla_decode_limits *lim, int64_t *bytes)
{
    static const char fn[] = "mla_decode_workspace_bound";
    if (!lim || !bytes)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, lim ? "bytes" : "limits");
    if (lim->qk_nope_dim < 0 || lim->v_head_dim < 0 || (lim->qk_nope_dim == 0) != (lim->v_head_dim == 0))
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: qk_nope_dim %lld, v_head_dim %lld (need "
                        "both >= 1, or both 0 for mla_decode alone)", fn,
                        (long long)lim->qk_nope_dim, (long long)lim->v_head_dim);
    const mla_decode_args shape = {.num_reqs = lim->max_reqs, .s_q = lim->max_s_q,
                                   .num_heads = lim->num_heads, .kv_lora_rank = lim->kv_lora_rank,
                                   .rope_dim = lim->rope_dim, .q_dtype = lim->q_dtype,
                                   .sched = lim->sched};
    mla_status st = check_sizes(fn, &shape);
    if (st != MLA_OK)
        return st;
    const int t = mla_resolve_threads(lim->max_threads);
    mla_decode_sched_params p = sched_params(&shape, t);
    int64_t slots;
    if ((st = mla_decode_sched_slot_bound(fn, shape.num_reqs, lim->max_seq_len, &p, &slots)) != MLA_OK)
        return st;
    if (lim->qk_nope_dim == 0) {
        ws_layout w;
        if ((st = layout_of(fn, &shape, &p, slots, t, &w)) == MLA_OK)
            *bytes = w.total;
        return st;
    }
    forward_layout w;
    if ((st = check_latent_row(fn, &shape)) == MLA_OK &&
        (st = forward_bytes(fn, &shape, lim->qk_nope_dim, lim->v_head_dim, slots, t, &w)) == MLA_OK)
        *bytes = w.total;
    return st;
}

static mla_status decode_forward(const mla_decode_forward_args *args, void *workspace,
                                 int64_t workspace_bytes, int threads)
{
    static const char fn[] = "mla_decode_forward";
    int t = mla_resolve_threads(threads);
    forward_layout w;
    mla_status st = check_forward(fn, args, t, &w);
    if (st != MLA_OK)
        return st;
    if ((st = mla_check_workspace(fn, workspace, workspace_bytes, w.total)) != MLA_OK)
        return st;
    char *base = mla_align_ptr(workspace);
    void *q_lat = base, *o_lat = base + w.q_lat;
    float *scratch = (float *)(base + w.q_lat + w.o_lat);
    mla_decode_args attn = forward_attention(args, q_lat, o_lat);
    mla_kv_cache c;
    mla_check_cache(fn, attn.cache, &c); /* checked above: resolves the strides */
    const mla_kernels *k;
    const char *backend;
    if ((st = mla_decode_backend(&attn, &c, &k, &backend)) != MLA_OK)
        return st;
    mla_absorb_shape s = {.tokens = attn.num_reqs * attn.s_q, .heads = attn.num_heads,
                          .L = attn.kv_lora_rank, .R = attn.rope_dim, .P = args->qk_nope_dim,
                          .V = args->v_head_dim};
    mla_absorb_queries(k, &s, args->q, args->q_token_stride, args->q_head_stride, attn.q_dtype,
                       args->w_uk_t, args->w_dtype, q_lat, scratch, t);
    if ((st = run_decode(fn, &attn, &c, k, base + w.q_lat + w.o_lat + w.gemm, t)) != MLA_OK)
        return st;
    mla_absorb_values(k, &s, o_lat, args->w_uv, args->w_dtype, args->out, args->out_token_stride,
                      attn.q_dtype, scratch, t);
    mla_note_backend(backend);
    return MLA_OK;
}

mla_status mla_decode_forward(const mla_decode_forward_args *args, void *workspace,
                              int64_t workspace_bytes, int threads)
{
    if (!mla_tracing())
        return decode_forward(args, workspace, workspace_bytes, threads);
    double start = mla_trace_begin();
    mla_status st = decode_forward(args, workspace, workspace_bytes, threads);
    /* the line names the forward's attention as a decode's */
    const mla_decode_args attn = args ? decode_forward_shape(args) : (mla_decode_args){0};
    mla_trace_decode_forward(start, st, args, args ? &attn : NULL, threads);
    return st;
}
