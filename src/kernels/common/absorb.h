/* Drivers of the weight absorption around the decode (docs/semantics.md §1.3, §1.6).
 * Arguments arrive checked (src/dispatch/api_decode.c). */
#ifndef MLA_COMMON_ABSORB_H
#define MLA_COMMON_ABSORB_H

#include "mla_backend.h"

typedef struct mla_absorb_shape {
    int64_t tokens, heads; /* Td, H */
    int64_t L, R, P, V;
} mla_absorb_shape;

/* kv_b_proj [H*(P+V), L] -> W_UK_T [H, P, L], W_UV [H, L, V] in w_dtype. */
void mla_absorb_prepare_weights(const mla_kernels *k, const void *kv_b_proj, mla_dtype src_dtype,
                                int64_t heads, int64_t L, int64_t P, int64_t V, void *w_uk_t,
                                void *w_uv, mla_dtype w_dtype, int threads);

/* Floats of scratch each thread needs for the two calls below. */
int64_t mla_absorb_scratch_floats(const mla_absorb_shape *s);

/* q_lat [Td, H, L+R] = [q_nope . W_UK_T[h] | q_pe] per token and head, in
 * the activation dtype (q's). */
void mla_absorb_queries(const mla_kernels *k, const mla_absorb_shape *s, const void *q,
                        int64_t q_token_stride, int64_t q_head_stride, mla_dtype dtype,
                        const void *w_uk_t, mla_dtype w_dtype, void *q_lat, float *scratch,
                        int threads);

/* out[t, h*V + v] = o_lat[t, h] . W_UV[h], o_lat [Td, H, L] and out in the
 * activation dtype. */
void mla_absorb_values(const mla_kernels *k, const mla_absorb_shape *s, const void *o_lat,
                       const void *w_uv, mla_dtype w_dtype, void *out, int64_t out_token_stride,
                       mla_dtype dtype, float *scratch, int threads);

#endif
