/* MLA_VERBOSE's lines of the metadata builders (src/core/trace.h): sizes
 * only, read from the arguments themselves, never from the arrays they
 * point to (a rejected call's may be anything). */
#include "trace.h"

#include "core/trace.h"

/* Builders run on the calling thread alone. */
#define BUILDER_THREADS 1

mla_status mla_trace_build_batch_metadata(const mla_request *reqs, int64_t num_reqs,
                                          const mla_block_layout *layout, mla_batch_metadata *md)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_build_batch_metadata(reqs, num_reqs, layout, md);
    mla_trace_end(t0, "mla_build_batch_metadata", NULL, NULL, BUILDER_THREADS, st, "B=%lld",
                  (long long)num_reqs);
    return st;
}

mla_status mla_trace_update_block_table(const mla_request *reqs, int64_t num_reqs,
                                        const mla_block_layout *layout, mla_batch_metadata *md)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_update_block_table(reqs, num_reqs, layout, md);
    mla_trace_end(t0, "mla_update_block_table", NULL, NULL, BUILDER_THREADS, st, "B=%lld",
                  (long long)num_reqs);
    return st;
}

mla_status mla_trace_build_batch_metadata_append(const mla_request *reqs, int64_t num_reqs,
                                                 const mla_block_layout *layout,
                                                 const int64_t *first_new, int64_t *row_ids,
                                                 mla_batch_metadata *md)
{
    double t0 = mla_trace_begin();
    mla_status st =
        mla_build_batch_metadata_append(reqs, num_reqs, layout, first_new, row_ids, md);
    mla_trace_end(t0, "mla_build_batch_metadata_append", NULL, NULL, BUILDER_THREADS, st,
                  "B=%lld", (long long)num_reqs);
    return st;
}

mla_status mla_trace_append_block_table(const mla_request *reqs, int64_t num_reqs,
                                        const mla_block_layout *layout, const int64_t *first_new,
                                        int64_t *row_ids, int32_t *block_table)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_append_block_table(reqs, num_reqs, layout, first_new, row_ids, block_table);
    mla_trace_end(t0, "mla_append_block_table", NULL, NULL, BUILDER_THREADS, st, "B=%lld",
                  (long long)num_reqs);
    return st;
}

mla_status mla_trace_reorder_batch(const mla_request *reqs, int64_t num_reqs, int64_t threshold,
                                   int32_t *new_order, int64_t *region_counts)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_reorder_batch(reqs, num_reqs, threshold, new_order, region_counts);
    mla_trace_end(t0, "mla_reorder_batch", NULL, NULL, BUILDER_THREADS, st, "B=%lld,threshold=%lld",
                  (long long)num_reqs, (long long)threshold);
    return st;
}

mla_status mla_trace_split_batch(const int32_t *query_start_loc, int64_t num_reqs,
                                 int64_t threshold, bool require_uniform, mla_batch_split *out)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_split_batch(query_start_loc, num_reqs, threshold, require_uniform, out);
    mla_trace_end(t0, "mla_split_batch", NULL, NULL, BUILDER_THREADS, st, "B=%lld,threshold=%lld",
                  (long long)num_reqs, (long long)threshold);
    return st;
}

/* A chunk plan builder's line: its sizes. */
static void chunk_plan_line(double t0, const char *fn, mla_status st, int64_t num_prefills,
                            int64_t workspace_tokens, int64_t block_size, int64_t workspace_width,
                            mla_dtype workspace_dtype)
{
    mla_trace_end(t0, fn, NULL, NULL, BUILDER_THREADS, st,
                  "B=%lld,W=%lld,block_size=%lld,width=%lld,dtype=%s", (long long)num_prefills,
                  (long long)workspace_tokens, (long long)block_size, (long long)workspace_width,
                  mla_dtype_name(workspace_dtype));
}

mla_status mla_trace_chunk_plan_create(const int32_t *context_lens, const int32_t *query_start_loc,
                                       int64_t num_prefills, int64_t workspace_tokens,
                                       int64_t block_size, int64_t workspace_width,
                                       mla_dtype workspace_dtype, mla_chunk_plan **plan)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_chunk_plan_create(context_lens, query_start_loc, num_prefills,
                                          workspace_tokens, block_size, workspace_width,
                                          workspace_dtype, plan);
    chunk_plan_line(t0, "mla_chunk_plan_create", st, num_prefills, workspace_tokens, block_size,
                    workspace_width, workspace_dtype);
    return st;
}

mla_status mla_trace_chunk_plan_create_lean(const int32_t *context_lens,
                                            const int32_t *query_start_loc, int64_t num_prefills,
                                            int64_t workspace_tokens, int64_t block_size,
                                            int64_t workspace_width, mla_dtype workspace_dtype,
                                            mla_chunk_plan **plan)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_chunk_plan_create_lean(context_lens, query_start_loc, num_prefills,
                                               workspace_tokens, block_size, workspace_width,
                                               workspace_dtype, plan);
    chunk_plan_line(t0, "mla_chunk_plan_create_lean", st, num_prefills, workspace_tokens,
                    block_size, workspace_width, workspace_dtype);
    return st;
}

mla_status mla_trace_chunk_token_to_seq(const mla_chunk_plan *plan, int64_t chunk, int32_t *out,
                                        int64_t out_len)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_chunk_token_to_seq(plan, chunk, out, out_len);
    mla_trace_end(t0, "mla_chunk_token_to_seq", NULL, NULL, BUILDER_THREADS, st,
                  "chunk=%lld,out_len=%lld", (long long)chunk, (long long)out_len);
    return st;
}

mla_status mla_trace_build_decode_sched(const int32_t *seq_lens, int64_t num_reqs,
                                        const mla_decode_sched_params *params,
                                        mla_sched_part *parts, int64_t parts_capacity,
                                        int64_t *num_parts, int32_t *split_prefix)
{
    double t0 = mla_trace_begin();
    mla_status st = mla_build_decode_sched(seq_lens, num_reqs, params, parts, parts_capacity,
                                           num_parts, split_prefix);
    mla_trace_end(t0, "mla_build_decode_sched", NULL, NULL, BUILDER_THREADS, st,
                  "B=%lld,parts_capacity=%lld", (long long)num_reqs, (long long)parts_capacity);
    return st;
}
