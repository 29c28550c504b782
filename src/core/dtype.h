/* Facts about element types that every layer asks: size and name
 * (mla_dtype_size / mla_dtype_name, public in mla.h and defined in
 * dtype.c), and the classes the checks and drivers branch on. */
#ifndef MLA_CORE_DTYPE_H
#define MLA_CORE_DTYPE_H

#include "mla.h"

#include <float.h>

static inline bool mla_dtype_is_fp8(mla_dtype dtype)
{
    return dtype == MLA_DTYPE_FP8_E4M3 || dtype == MLA_DTYPE_FP8_E5M2;
}

/* f32, bf16 or f16: the dtypes activations (q, kv_c, outputs, workspaces)
 * may have. */
static inline bool mla_dtype_is_float(mla_dtype dtype)
{
    return dtype == MLA_DTYPE_F32 || dtype == MLA_DTYPE_BF16 || dtype == MLA_DTYPE_F16;
}

/* An fp8 scale must be finite and > 0 (NaN fails too). */
static inline bool mla_fp8_scale_ok(float scale)
{
    return scale > 0.0f && scale <= FLT_MAX;
}

#endif
