/* MLA_VERBOSE's lines of the metadata builders (src/core/trace.h): sizes
 * only, read from the arguments themselves, never from the arrays they
 * point to (a rejected call's may be anything). */
#include "trace.h"

#include "core/trace.h"

/* Builders take no threads argument and their lines say 1, though the
 * largest fills (a dense block table, a plan's token_to_seq) split over
 * OpenMP's default team (batch.c, chunks.c). */
#define BUILDER_THREADS 1

void mla_trace_batch_builder(double start, const char *fn, mla_status st, int64_t num_reqs)
{
    mla_trace_end(start, fn, NULL, NULL, BUILDER_THREADS, st, "B=%lld", (long long)num_reqs);
}

void mla_trace_reorder_batch(double start, mla_status st, int64_t num_reqs, int64_t threshold)
{
    mla_trace_end(start, "mla_reorder_batch", NULL, NULL, BUILDER_THREADS, st,
                  "B=%lld,threshold=%lld", (long long)num_reqs, (long long)threshold);
}

void mla_trace_split_batch(double start, mla_status st, int64_t num_reqs, int64_t threshold)
{
    mla_trace_end(start, "mla_split_batch", NULL, NULL, BUILDER_THREADS, st,
                  "B=%lld,threshold=%lld", (long long)num_reqs, (long long)threshold);
}

void mla_trace_chunk_plan_create(double start, const char *fn, mla_status st,
                                 int64_t num_prefills, int64_t workspace_tokens,
                                 int64_t block_size, int64_t workspace_width,
                                 mla_dtype workspace_dtype)
{
    mla_trace_end(start, fn, NULL, NULL, BUILDER_THREADS, st,
                  "B=%lld,W=%lld,block_size=%lld,width=%lld,dtype=%s", (long long)num_prefills,
                  (long long)workspace_tokens, (long long)block_size, (long long)workspace_width,
                  mla_dtype_name(workspace_dtype));
}

void mla_trace_chunk_token_to_seq(double start, mla_status st, int64_t chunk, int64_t out_len)
{
    mla_trace_end(start, "mla_chunk_token_to_seq", NULL, NULL, BUILDER_THREADS, st,
                  "chunk=%lld,out_len=%lld", (long long)chunk, (long long)out_len);
}

void mla_trace_build_decode_sched(double start, mla_status st, int64_t num_reqs,
                                  int64_t parts_capacity)
{
    mla_trace_end(start, "mla_build_decode_sched", NULL, NULL, BUILDER_THREADS, st,
                  "B=%lld,parts_capacity=%lld", (long long)num_reqs, (long long)parts_capacity);
}
