/* What one public op lends another inside the dispatch floor: the prefill
 * op sizes the absorbed decode forward it runs for its short extends and
 * checks a packed kv_b_proj before it runs the up-projection. */
#ifndef MLA_DISPATCH_OPS_H
#define MLA_DISPATCH_OPS_H

#include "checks.h"
#include "mla.h"

/* Workspace bytes of mla_decode_forward for attention `shape` (its sizes,
 * q_dtype, seq_lens and sched are read; no other pointer) with GEMM dims
 * P and V. */
mla_status mla_decode_forward_bytes(const char *fn, const mla_decode_args *shape, int64_t P,
                                    int64_t V, int threads, int64_t *bytes);

/* a->kv_b_proj_packed (not NULL) was packed for a's shape and dtypes, in
 * this build's layout, on a route the backend mla_up_proj(a) picks has;
 * *span gets its bytes. a's shape must have passed the up-projection's
 * shape check. */
mla_status mla_up_proj_check_packed(const char *fn, const mla_up_proj_args *a, mla_span *span);

#endif
