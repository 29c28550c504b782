#include "dtype.h"

const char *mla_dtype_name(mla_dtype dtype)
{
    switch (dtype) {
    case MLA_DTYPE_F32: return "f32";
    case MLA_DTYPE_BF16: return "bf16";
    case MLA_DTYPE_F16: return "f16";
    case MLA_DTYPE_FP8_E4M3: return "fp8_e4m3";
    case MLA_DTYPE_FP8_E5M2: return "fp8_e5m2";
    case MLA_DTYPE_COUNT: break;
    }
    return "?";
}

int64_t mla_dtype_size(mla_dtype dtype)
{
    switch (dtype) {
    case MLA_DTYPE_F32: return 4;
    case MLA_DTYPE_BF16:
    case MLA_DTYPE_F16: return 2;
    case MLA_DTYPE_FP8_E4M3:
    case MLA_DTYPE_FP8_E5M2: return 1;
    case MLA_DTYPE_COUNT: break;
    }
    return 0;
}
