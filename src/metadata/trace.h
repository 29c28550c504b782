/* MLA_VERBOSE's line for each metadata builder (src/core/trace.h says where
 * an entry point calls it): each function writes the line of a call begun
 * at `start` that returned `st`, from the sizes the line names, and calls
 * no entry point. Builders have no backend. */
#ifndef MLA_METADATA_TRACE_H
#define MLA_METADATA_TRACE_H

#include "core/trace.h"
#include "mla.h"

/* The four batch builders' line (fn: the one called). */
void mla_trace_batch_builder(double start, const char *fn, mla_status st, int64_t num_reqs);
void mla_trace_reorder_batch(double start, mla_status st, int64_t num_reqs, int64_t threshold);
void mla_trace_split_batch(double start, mla_status st, int64_t num_reqs, int64_t threshold);
/* mla_chunk_plan_create's and _lean's line (fn: the one called). */
void mla_trace_chunk_plan_create(double start, const char *fn, mla_status st,
                                 int64_t num_prefills, int64_t workspace_tokens,
                                 int64_t block_size, int64_t workspace_width,
                                 mla_dtype workspace_dtype);
void mla_trace_chunk_token_to_seq(double start, mla_status st, int64_t chunk, int64_t out_len);
void mla_trace_build_decode_sched(double start, mla_status st, int64_t num_reqs,
                                  int64_t parts_capacity);

#endif
