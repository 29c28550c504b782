/* What one public op lends another inside the dispatch floor: the prefill
 * op sizes the absorbed decode forward it runs for its short extends,
 * checks a packed kv_b_proj before it runs the up-projection, and picks
 * the backend of every op it will run before it writes anything. */
#ifndef MLA_DISPATCH_OPS_H
#define MLA_DISPATCH_OPS_H

#include "checks.h"
#include "mla_backend.h"

/* Workspace bytes of mla_decode_forward for attention `shape` (its sizes,
 * q_dtype, seq_lens and sched are read; no other pointer) with GEMM dims
 * P and V; shape has a request, or s_q x H known to fit. */
mla_status mla_decode_forward_bytes(const char *fn, const mla_decode_args *shape, int64_t P,
                                    int64_t V, int threads, int64_t *bytes);

/* a->kv_b_proj_packed (not NULL) was packed for a's shape and dtypes, in
 * this build's layout, on a route the backend mla_up_proj(a) picks has;
 * *span gets its bytes. a's shape must have passed the up-projection's
 * shape check. */
mla_status mla_up_proj_check_packed(const char *fn, const mla_up_proj_args *a, mla_span *span);

/* The backend each op picks for args (their shapes and dtypes only, as
 * checked by the op; cache: the checked cache of a decode) and its
 * kernels, as mla_dispatch gives them. */
mla_status mla_up_proj_backend(const mla_up_proj_args *a, const mla_kernels **k, const char **name);
mla_status mla_flash_attn_backend(const mla_flash_attn_args *a, const mla_kernels **k,
                                  const char **name);
mla_status mla_merge_backend(const mla_merge_attn_args *a, const mla_kernels **k, const char **name);
mla_status mla_decode_backend(const mla_decode_args *a, const mla_kv_cache *cache,
                              const mla_kernels **k, const char **name);

#endif
