/* MLA_VERBOSE's line for each op of mla.h (src/core/trace.h says how an
 * entry point hands a call over): each function runs the entry point of
 * its name with the same arguments, then writes the call's line with the
 * backend that ran it, its attention route where it has one, its dtypes and
 * sizes. */
#ifndef MLA_DISPATCH_TRACE_H
#define MLA_DISPATCH_TRACE_H

#include "core/trace.h"
#include "mla.h"

mla_status mla_trace_convert(mla_dtype dst_dtype, void *dst, mla_dtype src_dtype, const void *src,
                             int64_t n, int threads);
mla_status mla_trace_convert_scaled(mla_dtype dst_dtype, void *dst, mla_dtype src_dtype,
                                    const void *src, int64_t n, float scale, int threads);
mla_status mla_trace_exp_f32(float *dst, const float *src, int64_t n, int threads);
mla_status mla_trace_concat_and_cache(const mla_kv_cache *cache, const void *kv_c,
                                      int64_t kv_c_stride, const void *k_pe, int64_t k_pe_stride,
                                      mla_dtype src_dtype, int64_t kv_lora_rank, int64_t rope_dim,
                                      const int64_t *slot_mapping, int64_t num_tokens, int threads);
mla_status mla_trace_gather_cache(const mla_kv_cache *cache, const mla_gather_spec *spec,
                                  const int32_t *token_to_seq, int64_t num_tokens, void *dst,
                                  mla_dtype dst_dtype, int64_t dst_stride, int threads);
mla_status mla_trace_cp_gather_cache(const mla_kv_cache *cache, const mla_gather_spec *spec,
                                     void *dst, int64_t dst_stride, int threads);
mla_status mla_trace_decode(const mla_decode_args *args, void *workspace, int64_t workspace_bytes,
                            int threads);
mla_status mla_trace_prepare_weights(const void *kv_b_proj, mla_dtype src_dtype, int64_t num_heads,
                                     int64_t kv_lora_rank, int64_t qk_nope_dim,
                                     int64_t v_head_dim, void *w_uk_t, void *w_uv,
                                     mla_dtype w_dtype, int threads);
mla_status mla_trace_decode_forward(const mla_decode_forward_args *args, void *workspace,
                                    int64_t workspace_bytes, int threads);
mla_status mla_trace_flash_attn_varlen(const mla_flash_attn_args *args, void *workspace,
                                       int64_t workspace_bytes, int threads);
mla_status mla_trace_merge_attn_states(const mla_merge_attn_args *args, int threads);
mla_status mla_trace_up_proj(const mla_up_proj_args *args, void *workspace,
                             int64_t workspace_bytes, int threads);
mla_status mla_trace_pack_kv_b_proj(const mla_up_proj_args *args, void *packed, int64_t bytes,
                                    int threads);
mla_status mla_trace_prefill(const mla_prefill_args *args, void *workspace,
                             int64_t workspace_bytes, int threads);

#endif
