/* Drivers of the paged-cache ops (docs/semantics.md §3): row addressing,
 * dtype conversion through the backend's kernels, rows split over threads
 * (core/parallel.h). Arguments arrive checked (src/dispatch/api_cache.c)
 * with the cache strides resolved. */
#ifndef MLA_COMMON_CACHE_H
#define MLA_COMMON_CACHE_H

#include "mla_backend.h"

/* docs/semantics.md §3.1 for num_tokens rows; slots already checked to be < capacity. */
void mla_cache_write(const mla_kernels *k, const mla_kv_cache *cache, const void *kv_c,
                     int64_t kv_c_stride, const void *k_pe, int64_t k_pe_stride,
                     mla_dtype src_dtype, int64_t kv_lora_rank, const int64_t *slot_mapping,
                     int64_t num_tokens, int threads);

/* docs/semantics.md §3.2; every row's indices already checked. */
void mla_cache_gather(const mla_kernels *k, const mla_kv_cache *cache, const mla_gather_spec *spec,
                      const int32_t *token_to_seq, int64_t num_tokens, void *dst,
                      mla_dtype dst_dtype, int64_t dst_stride, int threads);

/* docs/semantics.md §3.3; every request's blocks already checked. */
void mla_cache_cp_gather(const mla_kernels *k, const mla_kv_cache *cache,
                         const mla_gather_spec *spec, void *dst, int64_t dst_stride, int threads);

#endif
