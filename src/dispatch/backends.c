/*
 * The built-in backends, in priority order. Each names the ISA its
 * micro-kernels were compiled for and the capabilities that ISA needs.
 */
#include "dispatch.h"
#include "kernels/kernels.h"

#define ALL_OPS ((1u << MLA_OP_CONVERT) | (1u << MLA_OP_DECODE) | (1u << MLA_OP_PREFILL))
#define Q_DTYPES (MLA_DTYPE_BIT(MLA_DTYPE_F32) | MLA_DTYPE_BIT(MLA_DTYPE_BF16) | MLA_DTYPE_BIT(MLA_DTYPE_F16))
#define CACHE_DTYPES (Q_DTYPES | MLA_DTYPE_BIT(MLA_DTYPE_FP8_E4M3) | MLA_DTYPE_BIT(MLA_DTYPE_FP8_E5M2))
#define AVX512_CAPS (MLA_CAP_AVX512F | MLA_CAP_AVX512BW | MLA_CAP_AVX512VL | MLA_CAP_AVX512DQ)

static const mla_backend_desc builtin_backends[] = {
#if defined(__x86_64__)
    {
        /* AMX-BF16 tiles (TDPBF16PS) for QK and PV when q is bf16 and the
         * cache bf16 or fp8 (dequantised to bf16), or f32 q opted into bf16
         * compute with any cache (validated as bf16) */
        .size = sizeof(mla_backend_desc),
        .name = "avx512_amx",
        .isa = "avx512_amx",
        .priority = 50,
        .required_caps = AVX512_CAPS | MLA_CAP_AMX_TILE | MLA_CAP_AMX_BF16,
        .ops = ALL_OPS,
        .q_dtypes = MLA_DTYPE_BIT(MLA_DTYPE_BF16),
        .cache_dtypes = MLA_DTYPE_BIT(MLA_DTYPE_BF16) | MLA_DTYPE_BIT(MLA_DTYPE_FP8_E4M3) |
                        MLA_DTYPE_BIT(MLA_DTYPE_FP8_E5M2),
        .kernels = MLA_KERNEL_TABLE(avx512, .gemm_bf16tile = mla_gemm_bf16tile__avx512_amx),
    },
    {
        /* vdpbf16ps for QK and PV when both q and the cache are bf16 */
        .size = sizeof(mla_backend_desc),
        .name = "avx512_bf16",
        .isa = "avx512_bf16",
        .priority = 40,
        .required_caps = AVX512_CAPS | MLA_CAP_AVX512_BF16,
        .ops = ALL_OPS,
        .q_dtypes = MLA_DTYPE_BIT(MLA_DTYPE_BF16),
        .cache_dtypes = MLA_DTYPE_BIT(MLA_DTYPE_BF16),
        .kernels = MLA_KERNEL_TABLE(avx512, .gemm_bf16dot = mla_gemm_bf16dot__avx512_bf16),
    },
    {
        .size = sizeof(mla_backend_desc),
        .name = "avx512",
        .isa = "avx512",
        .priority = 30,
        .required_caps = AVX512_CAPS,
        .ops = ALL_OPS,
        .q_dtypes = Q_DTYPES,
        .cache_dtypes = CACHE_DTYPES,
        .kernels = MLA_KERNEL_TABLE(avx512),
    },
    {
        .size = sizeof(mla_backend_desc),
        .name = "avx2",
        .isa = "avx2",
        .priority = 20,
        .required_caps = MLA_CAP_AVX2 | MLA_CAP_FMA | MLA_CAP_F16C,
        .ops = ALL_OPS,
        .q_dtypes = Q_DTYPES,
        .cache_dtypes = CACHE_DTYPES,
        .kernels = MLA_KERNEL_TABLE(avx2),
    },
#elif defined(__aarch64__)
    {
        /* BFDOT for QK and PV when both q and the cache are bf16 */
        .size = sizeof(mla_backend_desc),
        .name = "neon_bf16",
        .isa = "neon_bf16",
        .priority = 30,
        .required_caps = MLA_CAP_NEON | MLA_CAP_NEON_BF16,
        .ops = ALL_OPS,
        .q_dtypes = MLA_DTYPE_BIT(MLA_DTYPE_BF16),
        .cache_dtypes = MLA_DTYPE_BIT(MLA_DTYPE_BF16),
        .kernels = MLA_KERNEL_TABLE(neon, .gemm_bf16dot = mla_gemm_bf16dot__neon_bf16),
    },
    {
        /* FMLAL for QK and PV when both q and the cache are f16 */
        .size = sizeof(mla_backend_desc),
        .name = "neon_fhm",
        .isa = "neon_fhm",
        .priority = 30,
        .required_caps = MLA_CAP_NEON | MLA_CAP_NEON_FHM,
        .ops = ALL_OPS,
        .q_dtypes = MLA_DTYPE_BIT(MLA_DTYPE_F16),
        .cache_dtypes = MLA_DTYPE_BIT(MLA_DTYPE_F16),
        .kernels = MLA_KERNEL_TABLE(neon, .gemm_f16f16 = mla_gemm_f16f16__neon_fhm),
    },
    {
        .size = sizeof(mla_backend_desc),
        .name = "neon",
        .isa = "neon",
        .priority = 20,
        .required_caps = MLA_CAP_NEON,
        .ops = ALL_OPS,
        .q_dtypes = Q_DTYPES,
        .cache_dtypes = CACHE_DTYPES,
        .kernels = MLA_KERNEL_TABLE(neon),
    },
#endif
    {
        .size = sizeof(mla_backend_desc),
        .name = "ref",
        .isa = "ref",
        .priority = 0,
        .required_caps = 0,
        .ops = ALL_OPS,
        .q_dtypes = Q_DTYPES,
        .cache_dtypes = CACHE_DTYPES,
        .kernels = MLA_KERNEL_TABLE(ref),
    },
};

const mla_backend_desc *mla_builtin_backends(int *count)
{
    *count = (int)(sizeof builtin_backends / sizeof builtin_backends[0]);
    return builtin_backends;
}
