/* Driver of merge_attn_states (docs/semantics.md §4): addressing and the
 * split over threads (core/parallel.h); the merge of a row is mla_attn_merge_row's. */
#ifndef MLA_COMMON_MERGE_H
#define MLA_COMMON_MERGE_H

#include "mla_backend.h"

/* Merges every (token, head) row of a checked call: rows t < with_context
 * from both partials, the rest copied from the suffix. with_context is
 * resolved (0 .. T, never MLA_MERGE_ALL_TOKENS). Runs on up to `threads`
 * threads; the result does not depend on how many. */
void mla_merge_run(const mla_kernels *k, const mla_merge_attn_args *a, int64_t with_context,
                   int threads);

#endif
