/* MLA_VERBOSE's line for each metadata builder (src/core/trace.h says how
 * an entry point hands a call over): each function runs the builder of its
 * name with the same arguments, then writes the call's line. Builders run
 * on the calling thread, with no backend. */
#ifndef MLA_METADATA_TRACE_H
#define MLA_METADATA_TRACE_H

#include "core/trace.h"
#include "mla.h"

mla_status mla_trace_build_batch_metadata(const mla_request *reqs, int64_t num_reqs,
                                          const mla_block_layout *layout, mla_batch_metadata *md);
mla_status mla_trace_build_batch_metadata_append(const mla_request *reqs, int64_t num_reqs,
                                                 const mla_block_layout *layout,
                                                 const int64_t *first_new, int64_t *row_ids,
                                                 mla_batch_metadata *md);
mla_status mla_trace_append_block_table(const mla_request *reqs, int64_t num_reqs,
                                        const mla_block_layout *layout, const int64_t *first_new,
                                        int64_t *row_ids, int32_t *block_table);
mla_status mla_trace_update_block_table(const mla_request *reqs, int64_t num_reqs,
                                        const mla_block_layout *layout, mla_batch_metadata *md);
mla_status mla_trace_reorder_batch(const mla_request *reqs, int64_t num_reqs, int64_t threshold,
                                   int32_t *new_order, int64_t *region_counts);
mla_status mla_trace_split_batch(const int32_t *query_start_loc, int64_t num_reqs,
                                 int64_t threshold, bool require_uniform, mla_batch_split *out);
mla_status mla_trace_chunk_plan_create(const int32_t *context_lens, const int32_t *query_start_loc,
                                       int64_t num_prefills, int64_t workspace_tokens,
                                       int64_t block_size, int64_t workspace_width,
                                       mla_dtype workspace_dtype, mla_chunk_plan **plan);
mla_status mla_trace_chunk_plan_create_lean(const int32_t *context_lens,
                                            const int32_t *query_start_loc, int64_t num_prefills,
                                            int64_t workspace_tokens, int64_t block_size,
                                            int64_t workspace_width, mla_dtype workspace_dtype,
                                            mla_chunk_plan **plan);
mla_status mla_trace_chunk_token_to_seq(const mla_chunk_plan *plan, int64_t chunk, int32_t *out,
                                        int64_t out_len);
mla_status mla_trace_build_decode_sched(const int32_t *seq_lens, int64_t num_reqs,
                                        const mla_decode_sched_params *params,
                                        mla_sched_part *parts, int64_t parts_capacity,
                                        int64_t *num_parts, int32_t *split_prefix);

#endif
