/* MLA_VERBOSE's lines of the ops (src/core/trace.h). The call has returned
 * when its line is made: only the argument structs themselves and the
 * cache descriptor are read, never the arrays they point to (a rejected
 * call's may be anything), and a rejected call names no backend or route. */
#include "trace.h"

#include "checks.h"
#include "ops.h"
#include "core/trace.h"
#include "kernels/common/decode.h"
#include "kernels/common/flash_attn.h"
#include "mla_backend.h"

#include <stdio.h>

#define FIELDS_LEN 160

/* The backend that ran a call: the thread's last, if the call succeeded. */
static const char *ran(mla_status st)
{
    return st == MLA_OK ? mla_last_backend() : NULL;
}

static const mla_kernels *kernels_of(const char *backend)
{
    const mla_backend_desc *b = backend ? mla_backend_find(backend) : NULL;
    return b ? &b->kernels : NULL;
}

static const char *cache_dtype(const mla_kv_cache *cache)
{
    return cache ? mla_dtype_name(cache->dtype) : "none";
}

/* The route decode's attention took for a (its cache checked by the call). */
static const char *decode_route(const char *backend, const mla_decode_args *a)
{
    const mla_kernels *k = kernels_of(backend);
    mla_kv_cache c;
    if (!k || mla_check_cache("mla_verbose", a->cache, &c) != MLA_OK)
        return NULL;
    return mla_decode_route(k, a, &c)->name;
}

mla_status mla_trace_convert(mla_dtype dst_dtype, void *dst, mla_dtype src_dtype, const void *src,
                             int64_t n, int threads)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_convert(dst_dtype, dst, src_dtype, src, n, threads);
    mla_trace_end(t0, "mla_convert", ran(st), NULL, mla_resolve_threads(threads), st,
                  "src=%s,dst=%s,n=%lld", mla_dtype_name(src_dtype), mla_dtype_name(dst_dtype),
                  (long long)n);
    return st;
}

mla_status mla_trace_convert_scaled(mla_dtype dst_dtype, void *dst, mla_dtype src_dtype,
                                    const void *src, int64_t n, float scale, int threads)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_convert_scaled(dst_dtype, dst, src_dtype, src, n, scale, threads);
    mla_trace_end(t0, "mla_convert_scaled", ran(st), NULL, mla_resolve_threads(threads), st,
                  "src=%s,dst=%s,n=%lld,scale=%g", mla_dtype_name(src_dtype),
                  mla_dtype_name(dst_dtype), (long long)n, (double)scale);
    return st;
}

mla_status mla_trace_exp_f32(float *dst, const float *src, int64_t n, int threads)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_exp_f32(dst, src, n, threads);
    mla_trace_end(t0, "mla_exp_f32", ran(st), NULL, mla_resolve_threads(threads), st,
                  "dtype=f32,n=%lld", (long long)n);
    return st;
}

mla_status mla_trace_concat_and_cache(const mla_kv_cache *cache, const void *kv_c,
                                      int64_t kv_c_stride, const void *k_pe, int64_t k_pe_stride,
                                      mla_dtype src_dtype, int64_t kv_lora_rank, int64_t rope_dim,
                                      const int64_t *slot_mapping, int64_t num_tokens, int threads)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_concat_and_cache(cache, kv_c, kv_c_stride, k_pe, k_pe_stride, src_dtype,
                                         kv_lora_rank, rope_dim, slot_mapping, num_tokens, threads);
    mla_trace_end(t0, "mla_concat_and_cache", ran(st), NULL, mla_resolve_threads(threads), st,
                  "src=%s,cache=%s,T=%lld,L=%lld,R=%lld", mla_dtype_name(src_dtype),
                  cache_dtype(cache), (long long)num_tokens, (long long)kv_lora_rank,
                  (long long)rope_dim);
    return st;
}

mla_status mla_trace_gather_cache(const mla_kv_cache *cache, const mla_gather_spec *spec,
                                  const int32_t *token_to_seq, int64_t num_tokens, void *dst,
                                  mla_dtype dst_dtype, int64_t dst_stride, int threads)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_gather_cache(cache, spec, token_to_seq, num_tokens, dst, dst_dtype,
                                     dst_stride, threads);
    mla_trace_end(t0, "mla_gather_cache", ran(st), NULL, mla_resolve_threads(threads), st,
                  "cache=%s,dst=%s,B=%lld,T=%lld", cache_dtype(cache), mla_dtype_name(dst_dtype),
                  spec ? (long long)spec->num_reqs : -1LL, (long long)num_tokens);
    return st;
}

mla_status mla_trace_cp_gather_cache(const mla_kv_cache *cache, const mla_gather_spec *spec,
                                     void *dst, int64_t dst_stride, int threads)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_cp_gather_cache(cache, spec, dst, dst_stride, threads);
    mla_trace_end(t0, "mla_cp_gather_cache", ran(st), NULL, mla_resolve_threads(threads), st,
                  "cache=%s,B=%lld", cache_dtype(cache), spec ? (long long)spec->num_reqs : -1LL);
    return st;
}

/* The fields of a decode's attention, dtypes then sizes. */
static const char *decode_fields(const mla_decode_args *a, char *buf, size_t size)
{
    snprintf(buf, size, "q=%s,cache=%s,B=%lld,s_q=%lld,H=%lld,L=%lld,R=%lld",
             mla_dtype_name(a->q_dtype), cache_dtype(a->cache), (long long)a->num_reqs,
             (long long)a->s_q, (long long)a->num_heads, (long long)a->kv_lora_rank,
             (long long)a->rope_dim);
    return buf;
}

mla_status mla_trace_decode(const mla_decode_args *args, void *workspace, int64_t workspace_bytes,
                            int threads)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_decode(args, workspace, workspace_bytes, threads);
    const char *backend = ran(st);
    char fields[FIELDS_LEN];
    mla_trace_end(t0, "mla_decode", backend, args ? decode_route(backend, args) : NULL,
                  mla_resolve_threads(threads), st, "%s",
                  args ? decode_fields(args, fields, sizeof fields) : "args=null");
    return st;
}

mla_status mla_trace_decode_forward(const mla_decode_forward_args *args, void *workspace,
                                    int64_t workspace_bytes, int threads)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_decode_forward(args, workspace, workspace_bytes, threads);
    const char *backend = ran(st);
    char fields[FIELDS_LEN];
    if (!args)
        mla_trace_end(t0, "mla_decode_forward", backend, NULL, mla_resolve_threads(threads), st,
                      "args=null");
    else {
        const mla_decode_args attn = mla_decode_forward_shape(args);
        mla_trace_end(t0, "mla_decode_forward", backend, decode_route(backend, &attn),
                      mla_resolve_threads(threads), st, "%s,w=%s,P=%lld,V=%lld",
                      decode_fields(&attn, fields, sizeof fields),
                      mla_dtype_name(args->w_dtype), (long long)args->qk_nope_dim,
                      (long long)args->v_head_dim);
    }
    return st;
}

mla_status mla_trace_prepare_weights(const void *kv_b_proj, mla_dtype src_dtype, int64_t num_heads,
                                     int64_t kv_lora_rank, int64_t qk_nope_dim,
                                     int64_t v_head_dim, void *w_uk_t, void *w_uv,
                                     mla_dtype w_dtype, int threads)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_prepare_weights(kv_b_proj, src_dtype, num_heads, kv_lora_rank, qk_nope_dim,
                                        v_head_dim, w_uk_t, w_uv, w_dtype, threads);
    mla_trace_end(t0, "mla_prepare_weights", ran(st), NULL, mla_resolve_threads(threads), st,
                  "src=%s,w=%s,H=%lld,L=%lld,P=%lld,V=%lld", mla_dtype_name(src_dtype),
                  mla_dtype_name(w_dtype), (long long)num_heads, (long long)kv_lora_rank,
                  (long long)qk_nope_dim, (long long)v_head_dim);
    return st;
}

mla_status mla_trace_flash_attn_varlen(const mla_flash_attn_args *args, void *workspace,
                                       int64_t workspace_bytes, int threads)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_flash_attn_varlen(args, workspace, workspace_bytes, threads);
    const char *backend = ran(st);
    const mla_kernels *k = kernels_of(backend);
    if (!args)
        mla_trace_end(t0, "mla_flash_attn_varlen", backend, NULL, mla_resolve_threads(threads),
                      st, "args=null");
    else
        mla_trace_end(t0, "mla_flash_attn_varlen", backend,
                      k ? mla_flash_attn_route(k, args)->name : NULL, mla_resolve_threads(threads),
                      st, "dtype=%s,B=%lld,T=%lld,S=%lld,H=%lld,Dqk=%lld,Dv=%lld,R=%lld,causal=%d",
                      mla_dtype_name(args->dtype), (long long)args->num_seqs,
                      (long long)args->total_q, (long long)args->total_k,
                      (long long)args->num_heads, (long long)args->qk_dim, (long long)args->v_dim,
                      (long long)args->rope_dim, (int)args->causal);
    return st;
}

mla_status mla_trace_merge_attn_states(const mla_merge_attn_args *args, int threads)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_merge_attn_states(args, threads);
    if (!args)
        mla_trace_end(t0, "mla_merge_attn_states", ran(st), NULL, mla_resolve_threads(threads), st,
                      "args=null");
    else
        mla_trace_end(t0, "mla_merge_attn_states", ran(st), NULL, mla_resolve_threads(threads), st,
                      "dtype=%s,T=%lld,H=%lld,D=%lld", mla_dtype_name(args->dtype),
                      (long long)args->num_tokens, (long long)args->num_heads,
                      (long long)args->head_dim);
    return st;
}

mla_status mla_trace_up_proj(const mla_up_proj_args *args, void *workspace,
                             int64_t workspace_bytes, int threads)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_up_proj(args, workspace, workspace_bytes, threads);
    if (!args)
        mla_trace_end(t0, "mla_up_proj", ran(st), NULL, mla_resolve_threads(threads), st,
                      "args=null");
    else
        mla_trace_end(t0, "mla_up_proj", ran(st), NULL, mla_resolve_threads(threads), st,
                      "kv_c=%s,w=%s,out=%s,S=%lld,H=%lld,L=%lld,P=%lld,V=%lld,packed=%d",
                      mla_dtype_name(args->kv_c_dtype), mla_dtype_name(args->w_dtype),
                      mla_dtype_name(args->out_dtype), (long long)args->num_tokens,
                      (long long)args->num_heads, (long long)args->kv_lora_rank,
                      (long long)args->qk_nope_dim, (long long)args->v_head_dim,
                      args->kv_b_proj_packed != NULL);
    return st;
}

mla_status mla_trace_pack_kv_b_proj(const mla_up_proj_args *args, void *packed, int64_t bytes,
                                    int threads)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_pack_kv_b_proj(args, packed, bytes, threads);
    if (!args)
        mla_trace_end(t0, "mla_pack_kv_b_proj", ran(st), NULL, mla_resolve_threads(threads), st,
                      "args=null");
    else
        mla_trace_end(t0, "mla_pack_kv_b_proj", ran(st), NULL, mla_resolve_threads(threads), st,
                      "kv_c=%s,w=%s,H=%lld,L=%lld,P=%lld,V=%lld", mla_dtype_name(args->kv_c_dtype),
                      mla_dtype_name(args->w_dtype), (long long)args->num_heads,
                      (long long)args->kv_lora_rank, (long long)args->qk_nope_dim,
                      (long long)args->v_head_dim);
    return st;
}

/* The route of a prefill's attention: its backend's for the call's dtypes
 * and sizes (the steps' own buffers are dense). */
static const char *prefill_route(const char *backend, const mla_prefill_args *a)
{
    if (!backend)
        return NULL;
    const mla_config cfg = {.q_dtype = a->dtype, .cache_dtype = a->cache->dtype,
                            .kv_lora_rank = a->kv_lora_rank, .rope_dim = a->rope_dim,
                            .num_heads = a->num_heads, .block_size = a->cache->block_size};
    return mla_backend_route(backend, &cfg);
}

mla_status mla_trace_prefill(const mla_prefill_args *args, void *workspace,
                             int64_t workspace_bytes, int threads)
{
    static const char *const path_names[] = {"auto", "mha", "absorbed"};
    double t0 = mla_trace_begin();
    mla_status st = mla_prefill(args, workspace, workspace_bytes, threads);
    const char *backend = ran(st);
    if (!args)
        mla_trace_end(t0, "mla_prefill", backend, NULL, mla_resolve_threads(threads), st,
                      "args=null");
    else
        mla_trace_end(t0, "mla_prefill", backend, prefill_route(backend, args),
                      mla_resolve_threads(threads), st,
                      "dtype=%s,cache=%s,B=%lld,T=%lld,H=%lld,L=%lld,R=%lld,P=%lld,V=%lld,path=%s",
                      mla_dtype_name(args->dtype), cache_dtype(args->cache),
                      (long long)args->num_prefills, (long long)args->num_tokens,
                      (long long)args->num_heads, (long long)args->kv_lora_rank,
                      (long long)args->rope_dim, (long long)args->qk_nope_dim,
                      (long long)args->v_head_dim,
                      (unsigned)args->path < 3 ? path_names[args->path] : "?");
    return st;
}
