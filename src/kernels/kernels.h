/*
 * Every micro-kernel, by ISA: the one list that the backend table, tests and
 * benchmarks draw from. Names say what, then how: mla_<op>_<dtype>__<isa>.
 * Signatures are the mla_*_fn types of mla.h.
 */
#ifndef MLA_KERNELS_H
#define MLA_KERNELS_H

#include "mla.h"

#define MLA_DECLARE_KERNELS(isa)                                                      \
    void mla_cvt_bf16_f32__##isa(const uint16_t *src, float *dst, int64_t n);         \
    void mla_cvt_f32_bf16__##isa(const float *src, uint16_t *dst, int64_t n);         \
    void mla_cvt_f16_f32__##isa(const uint16_t *src, float *dst, int64_t n);          \
    void mla_cvt_f32_f16__##isa(const float *src, uint16_t *dst, int64_t n);          \
    void mla_exp_f32__##isa(const float *src, float *dst, int64_t n);                 \
    double mla_fma_probe_f32__##isa(int64_t iters, float *sink);                      \
    void mla_cvt_f32_e4m3__##isa(const float *src, uint8_t *dst, int64_t n, float scale); \
    void mla_cvt_e4m3_f32__##isa(const uint8_t *src, float *dst, int64_t n, float scale); \
    void mla_cvt_f32_e5m2__##isa(const float *src, uint8_t *dst, int64_t n, float scale); \
    void mla_cvt_e5m2_f32__##isa(const uint8_t *src, float *dst, int64_t n, float scale); \
    void mla_copy_stream__##isa(void *dst, const void *src, int64_t bytes);                \
    void mla_store_fence__##isa(void);                                                     \
    void mla_gemm_f32__##isa(int64_t m, int64_t n, int64_t k, const float *a, int64_t rs_a,    \
                             int64_t cs_a, const float *b, int64_t ldb, float *c, int64_t ldc, \
                             const float *c_scale);                                            \
    void mla_gemm_bf16__##isa(int64_t m, int64_t n, int64_t k, const float *a, int64_t rs_a,   \
                              int64_t cs_a, const uint16_t *b, int64_t ldb, float *c,          \
                              int64_t ldc, const float *c_scale);

MLA_DECLARE_KERNELS(ref)
#if defined(__x86_64__)
MLA_DECLARE_KERNELS(avx2)
MLA_DECLARE_KERNELS(avx512)
#elif defined(__aarch64__)
MLA_DECLARE_KERNELS(neon)
#endif

/* The bf16 dot GEMM exists for AVX512_BF16 (vdpbf16ps) and FEAT_BF16
 * (BFDOT), whose arithmetic differs, and as a portable twin of each. */
#define MLA_DECLARE_GEMM_BF16DOT(isa)                                                          \
    void mla_gemm_bf16dot__##isa(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t rs_a, \
                                 int64_t cs_a, const uint16_t *b, int64_t ldb, float *c,       \
                                 int64_t ldc, const float *c_scale);
MLA_DECLARE_GEMM_BF16DOT(ref)       /* vdpbf16ps */
MLA_DECLARE_GEMM_BF16DOT(ref_bfdot) /* BFDOT */
#if defined(__x86_64__)
MLA_DECLARE_GEMM_BF16DOT(avx512bf16)
#elif defined(__aarch64__)
MLA_DECLARE_GEMM_BF16DOT(neonbf16)
#endif

/* The f16 x f16 GEMM: the ref twin, and FMLAL (FEAT_FHM). */
void mla_gemm_f16f16__ref(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t rs_a,
                          int64_t cs_a, const uint16_t *b, int64_t ldb, float *c, int64_t ldc,
                          const float *c_scale);
#if defined(__aarch64__)
void mla_gemm_f16f16__neonfp16(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t rs_a,
                               int64_t cs_a, const uint16_t *b, int64_t ldb, float *c, int64_t ldc,
                               const float *c_scale);
#endif

/* The full table of one ISA, for designated initializers. */
#define MLA_KERNEL_TABLE(isa, ...)                                                         \
    {                                                                                 \
        .cvt_bf16_f32 = mla_cvt_bf16_f32__##isa, .cvt_f32_bf16 = mla_cvt_f32_bf16__##isa, \
        .cvt_f16_f32 = mla_cvt_f16_f32__##isa, .cvt_f32_f16 = mla_cvt_f32_f16__##isa,     \
        .exp_f32 = mla_exp_f32__##isa, .fma_probe = mla_fma_probe_f32__##isa,            \
        .cvt_f32_e4m3 = mla_cvt_f32_e4m3__##isa, .cvt_e4m3_f32 = mla_cvt_e4m3_f32__##isa, \
        .cvt_f32_e5m2 = mla_cvt_f32_e5m2__##isa, .cvt_e5m2_f32 = mla_cvt_e5m2_f32__##isa, \
        .copy_stream = mla_copy_stream__##isa, .store_fence = mla_store_fence__##isa,     \
        .gemm_f32 = mla_gemm_f32__##isa, .gemm_bf16 = mla_gemm_bf16__##isa, __VA_ARGS__   \
    }

#endif
