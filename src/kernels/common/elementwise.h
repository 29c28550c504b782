/* Driver for element-wise micro-kernels: splits n over threads (core/parallel.h). */
#ifndef MLA_COMMON_ELEMENTWISE_H
#define MLA_COMMON_ELEMENTWISE_H

#include "mla_backend.h"

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
    MLA_EW_CVT_E4M3_BF16,
    MLA_EW_CVT_E5M2_BF16,
} mla_elementwise_kind;

/* The kind converting src_dtype to dst_dtype (one side f32, or fp8 to
 * bf16); false if none. */
bool mla_conversion_kind(mla_dtype dst_dtype, mla_dtype src_dtype, mla_elementwise_kind *kind);

/* Runs the kernel of `kind` from table k over n elements, on this thread. */
void mla_elementwise_run(const mla_kernels *k, mla_elementwise_kind kind, void *dst, const void *src,
                         int64_t n, float scale);

/* Runs the kernel of `kind` from table k over [0, n) with up to `threads`
 * threads; arrays too small to amortize a parallel region run on one.
 * scale goes to the fp8 kernels (the others have none). */
void mla_elementwise(const mla_kernels *k, mla_elementwise_kind kind, void *dst, const void *src,
                     int64_t n, float scale, int threads);

/* Elements converted per staging piece when a conversion goes through f32
 * (16 KiB of f32: stays in L1 between its two kernels). */
#define MLA_CONVERT_STAGE 4096

/* Elements [first, first + n) of a row of dtype as f32: the row itself when
 * f32, else widened into buf (n floats). */
const float *mla_widen_piece(const mla_kernels *k, const void *row, mla_dtype dtype, int64_t first,
                             int64_t n, float *buf);

/* n elements src_dtype -> dst_dtype, on this thread: a copy when the dtypes
 * match, one kernel where the pair has one (mla_conversion_kind), else
 * through f32 in MLA_CONVERT_STAGE pieces. scale is the fp8 side's
 * (mla_cvt_f32_fp8_fn). */
void mla_convert_run(const mla_kernels *k, void *dst, mla_dtype dst_dtype, const void *src,
                     mla_dtype src_dtype, int64_t n, float scale);

#endif
