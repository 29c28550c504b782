/*
 * Variable-length flash attention forward (docs/semantics.md §1.7): the
 * prefill path's attention of each request's queries over its own keys,
 * every head with its own k and v. The public entry (dispatch/) checks the
 * arguments; this driver tiles and runs them on the attention core.
 */
#ifndef MLA_COMMON_FLASH_ATTN_H
#define MLA_COMMON_FLASH_ATTN_H

#include "attention_route.h"
#include "mla_backend.h"

/* Bytes of workspace a call with these shapes needs on `threads` threads
 * (reads only the sizes, dims and dtype of a); false on overflow. */
bool mla_flash_attn_workspace(const mla_flash_attn_args *a, int threads, int64_t *bytes);

/* The attention route mla_flash_attn_run takes for a. */
const mla_attn_route *mla_flash_attn_route(const mla_kernels *k, const mla_flash_attn_args *a);

/* Runs a checked call. workspace holds mla_flash_attn_workspace's bytes. */
void mla_flash_attn_run(const mla_kernels *k, const mla_flash_attn_args *a, void *workspace,
                        int threads);

/* Time of flash attention on the f32 route over `route`'s (a half route k
 * has, run on inputs of its dtype), one causal 256-token request of MLA's
 * 192/128 on one thread, measured on this CPU: > 1 when `route` is faster;
 * 0 when it could not be measured. Dispatch weighs prefill's routes by it,
 * as it weighs decode's by mla_attn_route_speedup. */
double mla_flash_attn_route_speedup(const mla_kernels *k, const mla_attn_route *route);

#endif
