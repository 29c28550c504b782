/* MLA_VERBOSE's line for each op of mla.h (src/core/trace.h says where an
 * entry point calls it): each function writes the line of a call begun at
 * `start` that returned `st`, with the backend that ran it, its attention
 * route where it has one, its dtypes and sizes. It takes the arguments the
 * line names, in the op's order, and calls no entry point. */
#ifndef MLA_DISPATCH_TRACE_H
#define MLA_DISPATCH_TRACE_H

#include "core/trace.h"
#include "mla.h"

void mla_trace_convert(double start, mla_status st, mla_dtype dst_dtype, mla_dtype src_dtype,
                       int64_t n, int threads);
void mla_trace_convert_scaled(double start, mla_status st, mla_dtype dst_dtype,
                              mla_dtype src_dtype, int64_t n, float scale, int threads);
void mla_trace_exp_f32(double start, mla_status st, int64_t n, int threads);
void mla_trace_concat_and_cache(double start, mla_status st, const mla_kv_cache *cache,
                                mla_dtype src_dtype, int64_t kv_lora_rank, int64_t rope_dim,
                                int64_t num_tokens, int threads);
void mla_trace_gather_cache(double start, mla_status st, const mla_kv_cache *cache,
                            const mla_gather_spec *spec, int64_t num_tokens, mla_dtype dst_dtype,
                            int threads);
void mla_trace_cp_gather_cache(double start, mla_status st, const mla_kv_cache *cache,
                               const mla_gather_spec *spec, int threads);
void mla_trace_decode(double start, mla_status st, const mla_decode_args *args, int threads);
void mla_trace_prepare_weights(double start, mla_status st, mla_dtype src_dtype,
                               int64_t num_heads, int64_t kv_lora_rank, int64_t qk_nope_dim,
                               int64_t v_head_dim, mla_dtype w_dtype, int threads);
/* attn: the forward's attention as a decode's (as mla_decode_forward's checks see it),
 * NULL with args */
void mla_trace_decode_forward(double start, mla_status st, const mla_decode_forward_args *args,
                              const mla_decode_args *attn, int threads);
void mla_trace_flash_attn_varlen(double start, mla_status st, const mla_flash_attn_args *args,
                                 int threads);
void mla_trace_merge_attn_states(double start, mla_status st, const mla_merge_attn_args *args,
                                 int threads);
void mla_trace_up_proj(double start, mla_status st, const mla_up_proj_args *args, int threads);
void mla_trace_pack_kv_b_proj(double start, mla_status st, const mla_up_proj_args *args,
                              int threads);
void mla_trace_prefill(double start, mla_status st, const mla_prefill_args *args, int threads);

#endif
