/*
 * The library's micro-kernels, declared from the one kernel list
 * (MLA_KERNEL_SLOTS in mla_backend.h). Every ISA defines each base slot as
 * mla_<slot>__<isa>; route kernels exist where an ISA has the instruction
 * and are declared one by one below. MLA_KERNEL_TABLE(isa, ...) is an ISA's
 * whole table for the built-in backend list (src/dispatch/backends.c).
 * Below them, the scalar element access every ISA's kernels use on callers'
 * buffers.
 */
#ifndef MLA_KERNELS_H
#define MLA_KERNELS_H

#include "mla_backend.h"

#include <stdint.h>
#include <string.h>

#define MLA_SLOT_SKIP(slot, type, isa)
#define MLA_SLOT_DECLARE(slot, type, isa) type mla_##slot##__##isa;
#define MLA_SLOT_ENTRY(slot, type, isa) .slot = mla_##slot##__##isa,

/* Prototypes of every base slot of one ISA. */
#define MLA_DECLARE_KERNELS(isa) MLA_KERNEL_SLOTS(MLA_SLOT_DECLARE, MLA_SLOT_SKIP, isa)

/* The table of one ISA: its base kernels, then the route kernels given as
 * designated initializers (.gemm_bf16dot = ...). */
#define MLA_KERNEL_TABLE(isa, ...) \
    { MLA_KERNEL_SLOTS(MLA_SLOT_ENTRY, MLA_SLOT_SKIP, isa) __VA_ARGS__ }

MLA_DECLARE_KERNELS(ref)
#if defined(__x86_64__)
MLA_DECLARE_KERNELS(avx2)
MLA_DECLARE_KERNELS(avx512)
#elif defined(__aarch64__)
MLA_DECLARE_KERNELS(neon)
#endif

/* Route kernels. The bf16 dot GEMM exists for AVX512_BF16 (vdpbf16ps) and
 * FEAT_BF16 (BFDOT), whose arithmetic differs, and as a portable twin of
 * each (ref: vdpbf16ps, ref_bfdot: BFDOT); the f16 x f16 GEMM for FEAT_FHM
 * (FMLAL) and as its ref twin. */
mla_gemm_bf16dot_fn mla_gemm_bf16dot__ref;
mla_gemm_bf16dot_fn mla_gemm_bf16dot__ref_bfdot;
mla_gemm_f16f16_fn mla_gemm_f16f16__ref;
/* The portable twin of one AMX-BF16 TDPBF16PS on memory tiles (m, n and
 * pairs at most 16): for i < m, j < n, c[i*ldc + j] += the dot product of
 * row i of a (pairs bf16 pairs, lda elements apart) and pair column j of b
 * (pairs rows of n pairs, ldb elements apart), in the instruction's
 * arithmetic (src/kernels/ref/tile_dpbf16ps.c). */
void mla_tile_dpbf16ps__ref(int64_t m, int64_t n, int64_t pairs, const uint16_t *a, int64_t lda,
                            const uint16_t *b, int64_t ldb, float *c, int64_t ldc);
/* The tile GEMM's twin: TDPBF16PS's arithmetic, 16 pairs per step. */
mla_gemm_bf16tile_fn mla_gemm_bf16tile__ref;
#if defined(__x86_64__)
mla_gemm_bf16dot_fn mla_gemm_bf16dot__avx512_bf16;
mla_gemm_bf16tile_fn mla_gemm_bf16tile__avx512_amx;
#elif defined(__aarch64__)
mla_gemm_bf16dot_fn mla_gemm_bf16dot__neon_bf16;
mla_gemm_f16f16_fn mla_gemm_f16f16__neon_fhm;
#endif

/* An element of a caller's buffer, which may start at any byte (mla.h), so
 * it is read or written as bytes (the same load or store instruction). The
 * pointer comes in as void * so that no compiler assumes it aligned. */
static inline float mla_load_f32(const void *p)
{
    float f;
    memcpy(&f, p, sizeof f);
    return f;
}

static inline void mla_store_f32(void *p, float f)
{
    memcpy(p, &f, sizeof f);
}

static inline uint16_t mla_load_u16(const void *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return h;
}

static inline void mla_store_u16(void *p, uint16_t h)
{
    memcpy(p, &h, sizeof h);
}

#endif
