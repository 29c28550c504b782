/* MLA_VERBOSE's lines of the ops (src/core/trace.h). The call has returned
 * when its line is made: only the argument structs themselves and the
 * cache descriptor are read, never the arrays they point to (a rejected
 * call's may be anything), and a rejected call names no backend or route. */
#include "trace.h"

#include "checks.h"
#include "dispatch.h"
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

/* The route it noted (the ops whose call settles it). */
static const char *ran_route(mla_status st)
{
    return st == MLA_OK ? mla_last_route() : NULL;
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

void mla_trace_convert(double start, mla_status st, mla_dtype dst_dtype, mla_dtype src_dtype,
                       int64_t n, int threads)
{
    mla_trace_end(start, "mla_convert", ran(st), NULL, mla_resolve_threads(threads), st,
                  "src=%s,dst=%s,n=%lld", mla_dtype_name(src_dtype), mla_dtype_name(dst_dtype),
                  (long long)n);
}

void mla_trace_convert_scaled(double start, mla_status st, mla_dtype dst_dtype,
                              mla_dtype src_dtype, int64_t n, float scale, int threads)
{
    mla_trace_end(start, "mla_convert_scaled", ran(st), NULL, mla_resolve_threads(threads), st,
                  "src=%s,dst=%s,n=%lld,scale=%g", mla_dtype_name(src_dtype),
                  mla_dtype_name(dst_dtype), (long long)n, (double)scale);
}

void mla_trace_exp_f32(double start, mla_status st, int64_t n, int threads)
{
    mla_trace_end(start, "mla_exp_f32", ran(st), NULL, mla_resolve_threads(threads), st,
                  "dtype=f32,n=%lld", (long long)n);
}

void mla_trace_concat_and_cache(double start, mla_status st, const mla_kv_cache *cache,
                                mla_dtype src_dtype, int64_t kv_lora_rank, int64_t rope_dim,
                                int64_t num_tokens, int threads)
{
    mla_trace_end(start, "mla_concat_and_cache", ran(st), NULL, mla_resolve_threads(threads), st,
                  "src=%s,cache=%s,T=%lld,L=%lld,R=%lld", mla_dtype_name(src_dtype),
                  cache_dtype(cache), (long long)num_tokens, (long long)kv_lora_rank,
                  (long long)rope_dim);
}

void mla_trace_gather_cache(double start, mla_status st, const mla_kv_cache *cache,
                            const mla_gather_spec *spec, int64_t num_tokens, mla_dtype dst_dtype,
                            int threads)
{
    mla_trace_end(start, "mla_gather_cache", ran(st), NULL, mla_resolve_threads(threads), st,
                  "cache=%s,dst=%s,B=%lld,T=%lld", cache_dtype(cache), mla_dtype_name(dst_dtype),
                  spec ? (long long)spec->num_reqs : -1LL, (long long)num_tokens);
}

void mla_trace_cp_gather_cache(double start, mla_status st, const mla_kv_cache *cache,
                               const mla_gather_spec *spec, int threads)
{
    mla_trace_end(start, "mla_cp_gather_cache", ran(st), NULL, mla_resolve_threads(threads), st,
                  "cache=%s,B=%lld", cache_dtype(cache), spec ? (long long)spec->num_reqs : -1LL);
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

void mla_trace_decode(double start, mla_status st, const mla_decode_args *args, int threads)
{
    const char *backend = ran(st);
    char fields[FIELDS_LEN];
    mla_trace_end(start, "mla_decode", backend, args ? decode_route(backend, args) : NULL,
                  mla_resolve_threads(threads), st, "%s",
                  args ? decode_fields(args, fields, sizeof fields) : "args=null");
}

void mla_trace_decode_forward(double start, mla_status st, const mla_decode_forward_args *args,
                              const mla_decode_args *attn, int threads)
{
    const char *backend = ran(st);
    char fields[FIELDS_LEN];
    if (!args)
        mla_trace_end(start, "mla_decode_forward", backend, NULL, mla_resolve_threads(threads),
                      st, "args=null");
    else
        mla_trace_end(start, "mla_decode_forward", backend, decode_route(backend, attn),
                      mla_resolve_threads(threads), st, "%s,w=%s,P=%lld,V=%lld",
                      decode_fields(attn, fields, sizeof fields), mla_dtype_name(args->w_dtype),
                      (long long)args->qk_nope_dim, (long long)args->v_head_dim);
}

void mla_trace_prepare_weights(double start, mla_status st, mla_dtype src_dtype,
                               int64_t num_heads, int64_t kv_lora_rank, int64_t qk_nope_dim,
                               int64_t v_head_dim, mla_dtype w_dtype, int threads)
{
    mla_trace_end(start, "mla_prepare_weights", ran(st), NULL, mla_resolve_threads(threads), st,
                  "src=%s,w=%s,H=%lld,L=%lld,P=%lld,V=%lld", mla_dtype_name(src_dtype),
                  mla_dtype_name(w_dtype), (long long)num_heads, (long long)kv_lora_rank,
                  (long long)qk_nope_dim, (long long)v_head_dim);
}

void mla_trace_flash_attn_varlen(double start, mla_status st, const mla_flash_attn_args *args,
                                 int threads)
{
    const char *backend = ran(st);
    const mla_kernels *k = kernels_of(backend);
    if (!args)
        mla_trace_end(start, "mla_flash_attn_varlen", backend, NULL, mla_resolve_threads(threads),
                      st, "args=null");
    else
        mla_trace_end(start, "mla_flash_attn_varlen", backend,
                      k ? mla_flash_attn_route(k, args)->name : NULL, mla_resolve_threads(threads),
                      st, "dtype=%s,B=%lld,T=%lld,S=%lld,H=%lld,Dqk=%lld,Dv=%lld,R=%lld,causal=%d",
                      mla_dtype_name(args->dtype), (long long)args->num_seqs,
                      (long long)args->total_q, (long long)args->total_k,
                      (long long)args->num_heads, (long long)args->qk_dim, (long long)args->v_dim,
                      (long long)args->rope_dim, (int)args->causal);
}

void mla_trace_merge_attn_states(double start, mla_status st, const mla_merge_attn_args *args,
                                 int threads)
{
    if (!args)
        mla_trace_end(start, "mla_merge_attn_states", ran(st), NULL, mla_resolve_threads(threads),
                      st, "args=null");
    else
        mla_trace_end(start, "mla_merge_attn_states", ran(st), NULL, mla_resolve_threads(threads),
                      st, "dtype=%s,T=%lld,H=%lld,D=%lld", mla_dtype_name(args->dtype),
                      (long long)args->num_tokens, (long long)args->num_heads,
                      (long long)args->head_dim);
}

void mla_trace_up_proj(double start, mla_status st, const mla_up_proj_args *args, int threads)
{
    if (!args)
        mla_trace_end(start, "mla_up_proj", ran(st), NULL, mla_resolve_threads(threads), st,
                      "args=null");
    else
        mla_trace_end(start, "mla_up_proj", ran(st), ran_route(st), mla_resolve_threads(threads), st,
                      "kv_c=%s,w=%s,out=%s,S=%lld,H=%lld,L=%lld,P=%lld,V=%lld,packed=%d",
                      mla_dtype_name(args->kv_c_dtype), mla_dtype_name(args->w_dtype),
                      mla_dtype_name(args->out_dtype), (long long)args->num_tokens,
                      (long long)args->num_heads, (long long)args->kv_lora_rank,
                      (long long)args->qk_nope_dim, (long long)args->v_head_dim,
                      args->kv_b_proj_packed != NULL);
}

void mla_trace_pack_kv_b_proj(double start, mla_status st, const mla_up_proj_args *args,
                              int threads)
{
    if (!args)
        mla_trace_end(start, "mla_pack_kv_b_proj", ran(st), NULL, mla_resolve_threads(threads), st,
                      "args=null");
    else
        mla_trace_end(start, "mla_pack_kv_b_proj", ran(st), ran_route(st),
                      mla_resolve_threads(threads), st, "kv_c=%s,w=%s,H=%lld,L=%lld,P=%lld,V=%lld", mla_dtype_name(args->kv_c_dtype),
                      mla_dtype_name(args->w_dtype), (long long)args->num_heads,
                      (long long)args->kv_lora_rank, (long long)args->qk_nope_dim,
                      (long long)args->v_head_dim);
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

void mla_trace_prefill(double start, mla_status st, const mla_prefill_args *args, int threads)
{
    static const char *const path_names[] = {"auto", "mha", "absorbed"};
    const char *backend = ran(st);
    if (!args)
        mla_trace_end(start, "mla_prefill", backend, NULL, mla_resolve_threads(threads), st,
                      "args=null");
    else
        mla_trace_end(start, "mla_prefill", backend, prefill_route(backend, args),
                      mla_resolve_threads(threads), st,
                      "dtype=%s,cache=%s,B=%lld,T=%lld,H=%lld,L=%lld,R=%lld,P=%lld,V=%lld,path=%s",
                      mla_dtype_name(args->dtype), cache_dtype(args->cache),
                      (long long)args->num_prefills, (long long)args->num_tokens,
                      (long long)args->num_heads, (long long)args->kv_lora_rank,
                      (long long)args->rope_dim, (long long)args->qk_nope_dim,
                      (long long)args->v_head_dim,
                      (unsigned)args->path < 3 ? path_names[args->path] : "?");
}
