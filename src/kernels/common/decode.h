/* Driver of the absorbed latent-attention decode (docs/semantics.md §1.6, §5): split-KV
 * parts over threads (core/parallel.h), heads tiled so each cache row loaded serves all
 * query rows of a tile, online softmax, LSE combine. Arguments arrive checked
 * (src/dispatch/api_decode.c), the cache strides resolved. */
#ifndef MLA_COMMON_DECODE_H
#define MLA_COMMON_DECODE_H

#include "attention_route.h"
#include "mla_backend.h"

/* Bytes of workspace mla_decode_run needs for these args on `threads`
 * threads, 64 bytes of alignment slack included; false on int64 overflow.
 * `slots` is the schedule's partial-result rows (split_prefix[B]) or an
 * upper bound. */
bool mla_decode_workspace(const mla_decode_args *args, int64_t slots, int threads, int64_t *bytes);

/* The attention route mla_decode_run takes for these args and cache. */
const mla_attn_route *mla_decode_route(const mla_kernels *k, const mla_decode_args *args,
                                       const mla_kv_cache *cache);

/* Runs the decode with the schedule (parts, split_prefix) already built. */
void mla_decode_run(const mla_kernels *k, const mla_decode_args *args, const mla_kv_cache *cache,
                    const mla_sched_part *parts, int64_t num_parts, const int32_t *split_prefix,
                    int64_t block_n, int64_t split_blocks, void *workspace, int threads);

#endif
