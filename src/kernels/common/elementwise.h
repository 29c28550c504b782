/* Driver for element-wise micro-kernels: splits n over OpenMP threads. */
#ifndef MLA_COMMON_ELEMENTWISE_H
#define MLA_COMMON_ELEMENTWISE_H

#include "mla.h"

typedef enum mla_elementwise_kind {
    MLA_EW_CVT_BF16_F32,
    MLA_EW_CVT_F32_BF16,
    MLA_EW_CVT_F16_F32,
    MLA_EW_CVT_F32_F16,
    MLA_EW_CVT_F32_E4M3,
    MLA_EW_CVT_E4M3_F32,
    MLA_EW_CVT_F32_E5M2,
    MLA_EW_CVT_E5M2_F32,
    MLA_EW_EXP_F32,
} mla_elementwise_kind;

/* The kind converting src_dtype to dst_dtype (one side f32); false if none. */
bool mla_conversion_kind(mla_dtype dst_dtype, mla_dtype src_dtype, mla_elementwise_kind *kind);

/* Runs the kernel of `kind` from table k over n elements, on this thread. */
void mla_elementwise_run(const mla_kernels *k, mla_elementwise_kind kind, void *dst, const void *src,
                         int64_t n, float scale);

/* Runs the kernel of `kind` from table k over [0, n) with up to `threads`
 * threads; arrays too small to amortize a parallel region run on one.
 * scale goes to the fp8 kernels (the others have none). */
void mla_elementwise(const mla_kernels *k, mla_elementwise_kind kind, void *dst, const void *src,
                     int64_t n, float scale, int threads);

#endif
