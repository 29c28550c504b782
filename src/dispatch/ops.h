/* What one public op lends another inside the dispatch floor: the prefill
 * op sizes the absorbed decode forward it runs for its short extends. */
#ifndef MLA_DISPATCH_OPS_H
#define MLA_DISPATCH_OPS_H

#include "mla.h"

/* Workspace bytes of mla_decode_forward for attention `shape` (its sizes,
 * q_dtype, seq_lens and sched are read; no other pointer) with GEMM dims
 * P and V. */
mla_status mla_decode_forward_bytes(const char *fn, const mla_decode_args *shape, int64_t P,
                                    int64_t V, int threads, int64_t *bytes);

#endif
