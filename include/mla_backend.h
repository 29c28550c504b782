/*
 * libmla extension API: micro-kernel tables, backend descriptors and their
 * registry, and the CPU-reader seam. A server needs none of this to run the
 * ops of mla.h; it is for whoever adds or replaces kernels (a custom backend,
 * a tuned kernel for one slot) and for tests and tools that present a fake
 * CPU. The descriptor carries its own size, so this API can grow (new kernel
 * slots, new fields) without breaking a caller compiled against an older
 * header: see mla_backend_desc.size.
 */
#ifndef MLA_BACKEND_H
#define MLA_BACKEND_H

#include "mla.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when the extension API changes in a way a caller must know of.
 * 1: kernel slots up to gemm_f16f16, descriptor with a size field.
 * 2: the scale_add_f32 slot (merge_attn_states and the decode combine).
 * 3: the gemm_bf16tile route slot (AMX-BF16 tiles) and the interleave_u16
 *    slot (pair packing for the bf16 GEMMs).
 * 4: the transpose_u32 slot (query rows packed as the scores GEMM's
 *    columns) and the softmax_tile slot (the online softmax of a tile).
 * 5: the transpose_pairs_bf16 slot (a tile's probabilities packed as the
 *    bf16 GEMMs' A operand in one pass).
 * 6: the merge_pair slot (merge_attn_states' weighted sum of a row, read
 *    and written in the row's dtype in one pass). */
#define MLA_BACKEND_API_VERSION 6

/* ------------------------------------------------------------------------ */
/* The CPU-reader seam                                                       */
/* ------------------------------------------------------------------------ */

typedef enum mla_arch { MLA_ARCH_OTHER = 0, MLA_ARCH_X86_64, MLA_ARCH_AARCH64 } mla_arch;

/* The raw readings detection is made from. On x86-64: CPUID leaves and XCR0;
 * on AArch64: the AT_HWCAP / AT_HWCAP2 words. */
typedef struct mla_cpu_raw {
    mla_arch arch;
    uint32_t max_leaf;                      /* CPUID.0:EAX                   */
    uint32_t leaf1_ecx, leaf1_edx;          /* CPUID.1                       */
    uint32_t leaf7_ebx, leaf7_ecx, leaf7_edx; /* CPUID.(7,0)                 */
    uint32_t leaf7_1_eax;                   /* CPUID.(7,1)                   */
    uint64_t xcr0;                          /* XGETBV(0); 0 without OSXSAVE   */
    /* Linux had granted the process XTILEDATA state when this was read
     * (ARCH_GET_XCOMP_PERM); init requests it when an AMX backend can be
     * selected, so a reader reports what is already granted. */
    bool amx_permitted;
    uint64_t hwcap, hwcap2;                 /* AArch64 getauxval words        */
} mla_cpu_raw;

/* Fills *raw from the CPU. Replaceable so tests (or a server pinning a
 * feature level) can present any CPU. */
typedef void (*mla_cpu_reader)(mla_cpu_raw *raw);

/* Decodes raw readings into capability bits (pure; no CPU access). */
MLA_API mla_caps mla_cpu_caps_decode(const mla_cpu_raw *raw);

/* Replace the CPU reader (NULL restores the real one). Takes effect at the
 * next initialization, so call it before any other libmla function. */
MLA_API void mla_set_cpu_reader(mla_cpu_reader reader);

/* ------------------------------------------------------------------------ */
/* Micro-kernel signatures                                                   */
/* ------------------------------------------------------------------------ */

/* The ops hand kernels callers' tensors, which may start at any byte
 * (mla.h), through these element pointers: a kernel reads and writes them
 * with unaligned vector loads and stores or memcpy, never by dereferencing
 * a float or uint16_t pointer (C leaves that undefined off its alignment). */

/* Conversions round to nearest even and keep infinities and denormals; NaNs
 * stay NaN (quieted, except bf16 -> f32, a pure shift). */
typedef void mla_cvt_bf16_f32_fn(const uint16_t *src, float *dst, int64_t n);
typedef void mla_cvt_f32_bf16_fn(const float *src, uint16_t *dst, int64_t n);
typedef void mla_cvt_f16_f32_fn(const uint16_t *src, float *dst, int64_t n);
typedef void mla_cvt_f32_f16_fn(const float *src, uint16_t *dst, int64_t n);
/* dst[i] = e^src[i] within 1 ulp; dst may equal src. */
typedef void mla_exp_f32_fn(const float *src, float *dst, int64_t n);
/* fp8 (e4m3fn: bias 7, largest 448, no infinities; e5m2: bias 15, largest
 * 57344) with a scale, as KV caches store it. f32 -> fp8 stores
 * saturate(x / scale): the quotient is one f32 division, rounded to nearest
 * even; magnitudes beyond the largest finite value, infinities included,
 * become the largest finite value (CUDA's satfinite); NaN becomes the quiet
 * NaN code 0x7f (e4m3) or 0x7e (e5m2) with x's sign. fp8 -> f32 gives
 * value * scale (one f32 multiply); fp8 NaNs widen to quiet f32 NaNs with the
 * fp8 mantissa as the top payload bits, e5m2 infinities to infinities.
 * scale 1 is the plain conversion. */
typedef void mla_cvt_f32_fp8_fn(const float *src, uint8_t *dst, int64_t n, float scale);
typedef void mla_cvt_fp8_f32_fn(const uint8_t *src, float *dst, int64_t n, float scale);
/* fp8 -> bf16 in one pass: the f32 of mla_cvt_fp8_f32_fn (value * scale)
 * rounded to bf16 as mla_cvt_f32_bf16_fn rounds, the bits of the two
 * kernels in turn (the bf16 routes dequantise fp8 caches with it). */
typedef void mla_cvt_fp8_bf16_fn(const uint8_t *src, uint16_t *dst, int64_t n, float scale);
/* Copies bytes; whole 64-byte lines of dst may be written with streaming
 * (non-temporal) stores, which skip the read-for-ownership of lines that are
 * about to be overwritten. Call store_fence before other threads read dst. */
typedef void mla_copy_stream_fn(void *dst, const void *src, int64_t bytes);
/* Orders the calling thread's streaming stores before its later stores. */
typedef void mla_store_fence_fn(void);
/* GEMM with strided operands, the shape every attention step reduces to
 * (scores, P.V, the W_UK / W_UV absorptions). For i < m, j < n:
 *   acc = c_scale ? c_scale[i] * c[i*ldc + j] : 0   (c is not read when NULL)
 *   for p = 0 .. k-1 in order: acc = fma(a[i*rs_a + p*cs_a], b[p*ldb + j], acc)
 *   c[i*ldc + j] = acc
 * Each element is one chain of single-rounding f32 multiply-adds in that
 * order, so every ISA's kernel gives the ref kernel's bits (NaN payloads
 * aside), whatever m, n, the tiling or the addresses (what batch-invariant
 * decode relies on).
 * c must not overlap a or b. The bf16 variant reads b as bf16, widened
 * exactly. */
typedef void mla_gemm_f32_fn(int64_t m, int64_t n, int64_t k, const float *a, int64_t rs_a,
                             int64_t cs_a, const float *b, int64_t ldb, float *c, int64_t ldc,
                             const float *c_scale);
typedef void mla_gemm_bf16_fn(int64_t m, int64_t n, int64_t k, const float *a, int64_t rs_a,
                              int64_t cs_a, const uint16_t *b, int64_t ldb, float *c, int64_t ldc,
                              const float *c_scale);
/* bf16 dot-product GEMM, in the arithmetic of the ISA's bf16 dot
 * instruction: A and B bf16, k even, products taken in pairs along k.
 * A(i, p) = a[2*(i*rs_a + (p/2)*cs_a) + p%2] (strides count pairs);
 * B(p, j) = b[(p/2)*ldb + 2*j + p%2] (pair-packed rows; ldb counts
 * elements). For i < m, j < n: acc = c_scale ? c_scale[i] * c[i*ldc + j] : 0,
 * then for each pair q in order, with denormal inputs read as zero and tiny
 * results flushed to zero:
 *   x86 vdpbf16ps: acc = fma(A(i,2q+1), B(2q+1,j), acc), then
 *     acc = fma(A(i,2q), B(2q,j), acc), each rounded to nearest even;
 *   Arm BFDOT: acc = acc + (A(i,2q) B(2q,j) + A(i,2q+1) B(2q+1,j)), the sum
 *     and the accumulation each rounded to odd. */
typedef void mla_gemm_bf16dot_fn(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t rs_a,
                                 int64_t cs_a, const uint16_t *b, int64_t ldb, float *c,
                                 int64_t ldc, const float *c_scale);
/* f16 GEMM with f32 accumulation: mla_gemm_f32_fn with A and B read as f16,
 * each widened exactly, so it gives gemm_f32's bits on the widened operands
 * (f16 products are exact in f32; Arm's FMLAL rounds each step once). */
typedef void mla_gemm_f16f16_fn(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t rs_a,
                                int64_t cs_a, const uint16_t *b, int64_t ldb, float *c,
                                int64_t ldc, const float *c_scale);
/* bf16 tile GEMM, in the arithmetic of AMX-BF16's TDPBF16PS: the operands
 * of mla_gemm_bf16dot_fn (A and B bf16 in pairs along k, k even, the same
 * addressing). For i < m, j < n: acc = c_scale ? c_scale[i] * c[i*ldc + j]
 * : 0 (one rounded multiply), then for each step of 16 pairs (pairs 16s ..
 * 16s + 15 of k / 2; the last step may be shorter): two f32 lanes start at
 * +0 and add the exact products of the step's even elements (A(i,2q)
 * B(2q,j)) and odd elements (A(i,2q+1) B(2q+1,j)), pair by pair, each sum
 * rounded to nearest even, bf16 denormals read as zero, tiny results
 * flushed to zero of their sign; then acc = acc + (even + odd), the lanes'
 * sum and the accumulation rounded and flushed the same way, a denormal acc
 * read as zero. So the cut of k into 16-pair steps is part of the result;
 * m, n, the tiling and the addresses are not. NaN payloads are
 * unspecified. */
typedef mla_gemm_bf16dot_fn mla_gemm_bf16tile_fn;
/* Two rows of 16-bit values as pairs, the pair-packed operand of the bf16
 * GEMMs: dst[2e] = even[e], dst[2e + 1] = odd ? odd[e] : 0 for e < n. dst
 * must not overlap even or odd. */
typedef void mla_interleave_u16_fn(uint16_t *dst, const uint16_t *even, const uint16_t *odd,
                                   int64_t n);
/* Rows to columns, 32 bits at a time: dst[p * ld + r] = word p of rows[r]
 * for r < m, p < n, copied bit for bit (a word is an f32, or a pair of
 * 16-bit values). How every attention
 * route packs its queries: query rows become the scores GEMM's columns.
 * dst must not overlap the rows; nothing else of dst is written. */
typedef void mla_transpose_u32_fn(uint32_t *dst, int64_t ld, const void *const *rows, int64_t m,
                                  int64_t n);
/* Rows of f32 to columns of bf16 pairs, two rows at a time: for r < m and
 * p < ceil(n / 2), word p of dst row r (dst + r * ld) holds src[2p][r]
 * rounded to bf16 in its low half and src[2p + 1][r] in its high half (0
 * when 2p + 1 = n); src row j is at src + j * lds. Rounding as
 * mla_cvt_f32_bf16_fn. How the bf16 routes pack a tile's probabilities P
 * (S [keys][rows]) as their P.V GEMM's A operand, pairs along the keys.
 * dst must not overlap src; nothing else of dst is written. */
typedef void mla_transpose_pairs_bf16_fn(uint32_t *dst, int64_t ld, const float *src, int64_t lds,
                                         int64_t m, int64_t n);
/* The online softmax of one attention tile, the step decode and prefill
 * share. S is [n][ld] scores (key row j at s + j * ld; query rows along it,
 * rows r < nr real, ld a multiple of 16 and at most MLA_SOFTMAX_MAX_ROWS);
 * m, l and alpha hold ld running maxima, sums and rescale factors. Scores
 * are multiplied by score_scale (skipped when 1), then the first hidden[j]
 * rows of key row j become -inf (the causal mask; hidden NULL: none), so a
 * scale of 0 or below never turns a masked -inf into +inf or NaN. Per row,
 * with mx the larger of m and the tile's scores and u = mx (0 where mx is
 * -inf, so nothing becomes NaN): alpha = e^(m - u), m = mx, S = e^(S - u)
 * (exp by the table's exp_f32, over whole padded rows), and for r < nr
 * l = l * alpha + the sum of the row's S in key order. The running maximum
 * is lazy: where mx exceeds m by MLA_SOFTMAX_RESCALE_SLACK or less, mx is
 * taken to be m, so alpha is exactly 1 and the output's accumulators need
 * no rescale (S then reaches e^slack at most, which neither f32 nor f16
 * overflows; m + ln l is the same LSE either way). Each value's
 * operations are fixed, so two tables with the same exp_f32 give the same
 * bits. */
#define MLA_SOFTMAX_MAX_ROWS 128
#define MLA_SOFTMAX_RESCALE_SLACK 8.0f
typedef void mla_softmax_tile_fn(float *s, int64_t n, int64_t ld, int64_t nr, float score_scale,
                                 const int64_t *hidden, float *m, float *l, float *alpha);
/* y[i] = y[i] + w * x[i] for i < n: the product rounded to f32, then the
 * sum rounded to f32 (two roundings, never a fused multiply-add), so every
 * ISA's kernel gives the scalar expression's bits (NaN payloads aside). The
 * weighted sums of the LSE merge run on it. y and x may be equal, else they
 * must not overlap. */
typedef void mla_scale_add_f32_fn(float *y, const float *x, float w, int64_t n);
/* out[i] = (0 + w0 * prefix[i]) + w1 * suffix[i] for i < n, with the three
 * rows in dtype (f32, bf16 or f16): each input widened exactly to f32, the
 * products and sums rounded to f32 in that order (never fused: the bits of
 * two scale_add_f32 calls on a zeroed row), the result rounded to dtype as
 * the cvt_f32_bf16 / cvt_f32_f16 slots round. merge_attn_states' weighted
 * sum of a row, without an f32 copy of either input. Stores may be
 * streaming (non-temporal), as copy_stream's: the caller runs store_fence
 * before another thread reads out. out may be prefix or suffix itself (each
 * element is read before it is written); no other overlap. */
typedef void mla_merge_pair_fn(void *out, const void *prefix, const void *suffix, mla_dtype dtype,
                               float w0, float w1, int64_t n);

/* ------------------------------------------------------------------------ */
/* The kernel list                                                           */
/* ------------------------------------------------------------------------ */

/* Every kernel slot, once, in table order: BASE(slot, type, arg) for the
 * slots every backend has (a NULL one inherits the ref kernel, as BLIS
 * contexts start from reference kernels), ROUTE(slot, type, arg) for the
 * half-precision attention routes, whose NULL means the backend has no such
 * route. This list generates the mla_kernels struct below, the library's
 * kernel prototypes (mla_<slot>__<isa>), each backend's table, inheritance
 * from ref, and mla_kernel_slots(), which tests and tools loop over. New
 * slots are appended, so older descriptors stay valid. */
#define MLA_KERNEL_SLOTS(BASE, ROUTE, arg)             \
    BASE(cvt_bf16_f32, mla_cvt_bf16_f32_fn, arg)       \
    BASE(cvt_f32_bf16, mla_cvt_f32_bf16_fn, arg)       \
    BASE(cvt_f16_f32, mla_cvt_f16_f32_fn, arg)         \
    BASE(cvt_f32_f16, mla_cvt_f32_f16_fn, arg)         \
    BASE(exp_f32, mla_exp_f32_fn, arg)                 \
    BASE(cvt_f32_e4m3, mla_cvt_f32_fp8_fn, arg)        \
    BASE(cvt_e4m3_f32, mla_cvt_fp8_f32_fn, arg)        \
    BASE(cvt_f32_e5m2, mla_cvt_f32_fp8_fn, arg)        \
    BASE(cvt_e5m2_f32, mla_cvt_fp8_f32_fn, arg)        \
    BASE(copy_stream, mla_copy_stream_fn, arg)         \
    BASE(store_fence, mla_store_fence_fn, arg)         \
    BASE(gemm_f32, mla_gemm_f32_fn, arg)               \
    BASE(gemm_bf16, mla_gemm_bf16_fn, arg)             \
    ROUTE(gemm_bf16dot, mla_gemm_bf16dot_fn, arg)      \
    ROUTE(gemm_f16f16, mla_gemm_f16f16_fn, arg)        \
    BASE(scale_add_f32, mla_scale_add_f32_fn, arg)     \
    ROUTE(gemm_bf16tile, mla_gemm_bf16tile_fn, arg)    \
    BASE(interleave_u16, mla_interleave_u16_fn, arg)   \
    BASE(transpose_u32, mla_transpose_u32_fn, arg)     \
    BASE(softmax_tile, mla_softmax_tile_fn, arg)       \
    BASE(transpose_pairs_bf16, mla_transpose_pairs_bf16_fn, arg) \
    BASE(merge_pair, mla_merge_pair_fn, arg)           \
    BASE(cvt_e4m3_bf16, mla_cvt_fp8_bf16_fn, arg)      \
    BASE(cvt_e5m2_bf16, mla_cvt_fp8_bf16_fn, arg)

#define MLA_KERNEL_FIELD(slot, type, arg) type *slot;

/* A backend's micro-kernels, one pointer per slot of the list. */
typedef struct mla_kernels {
    MLA_KERNEL_SLOTS(MLA_KERNEL_FIELD, MLA_KERNEL_FIELD, )
} mla_kernels;

/* One slot of the list, for loops over every kernel of a table. */
typedef struct mla_kernel_slot {
    const char *name;  /* "gemm_f32"                                        */
    size_t offset;     /* of its pointer in mla_kernels                     */
    bool route;        /* NULL means "no such route" rather than "use ref's" */
} mla_kernel_slot;

/* The slots in table order; *count gets their number. */
MLA_API const mla_kernel_slot *mla_kernel_slots(int *count);

/* The kernel of `slot` in table k (NULL if the table has none). */
static inline void *mla_kernel_get(const mla_kernels *k, const mla_kernel_slot *slot)
{
    return *(void *const *)((const char *)k + slot->offset);
}

/* ------------------------------------------------------------------------ */
/* Backends                                                                  */
/* ------------------------------------------------------------------------ */

#define MLA_MAX_HEAD_DIMS 4

/* A backend: what it needs, what it accepts, and its micro-kernels. */
typedef struct mla_backend_desc {
    /* sizeof(mla_backend_desc) as the caller compiled it: registration reads
     * that many bytes and treats the rest (fields and kernel slots a newer
     * header added) as zero. Descriptors copied from mla_backend_find()
     * carry it already. */
    size_t size;
    const char *name;        /* unique, e.g. "avx512_bf16"                   */
    const char *isa;         /* ISA of its micro-kernels: "ref", "avx2", ...  */
    int priority;            /* auto-selection tries higher first            */
    mla_caps required_caps;  /* every bit must be in mla_cpu_caps()          */
    uint32_t ops;            /* bit (1u << mla_op) per op it implements      */
    uint32_t q_dtypes;       /* MLA_DTYPE_BIT set                            */
    uint32_t cache_dtypes;   /* MLA_DTYPE_BIT set                            */
    int64_t head_dims[MLA_MAX_HEAD_DIMS]; /* allowed L+R; all 0 = any        */
    int64_t block_size_multiple;          /* block_size % this == 0; 0/1 any */
    mla_kernels kernels;     /* last: new slots extend the descriptor's end  */
} mla_backend_desc;

/* Number of backends known (built-in that are compiled in, plus
 * registered), and the i-th in priority order. A descriptor these functions
 * or mla_select_backend give stays valid and unchanged for the life of the
 * process, even once a registration has replaced or moved it in the
 * order. */
MLA_API int mla_backend_count(void);
MLA_API const mla_backend_desc *mla_backend_at(int index);
/* NULL if no backend has that name. */
MLA_API const mla_backend_desc *mla_backend_find(const char *name);

/* The backend `op` will use for `cfg` (NULL: CPU checks only): the forced one
 * if valid, else the first valid in priority order. */
MLA_API mla_status mla_select_backend(mla_op op, const mla_config *cfg,
                                      const mla_backend_desc **out);

/* The attention route the named backend takes for cfg (decode now, prefill
 * next): "f32" (gemm_f32 on f32 or widened operands), "bf16-dot"
 * (gemm_bf16dot, when q and the cache are bf16) or "f16" (gemm_f16f16, when
 * both are f16). NULL for an unknown name or a NULL cfg. */
MLA_API const char *mla_backend_route(const char *name, const mla_config *cfg);

/* Add a backend (MLA_ERR_ALREADY_EXISTS if the name is taken), or replace an
 * existing one of the same name when `override` is true (a built-in too).
 * The descriptor and its strings are copied. NULL base kernels inherit
 * ref's; a NULL route kernel means the backend has no such route.
 * desc->size must be at least the size of the first version's descriptor
 * and at most sizeof(mla_backend_desc).
 * Safe while ops run on other threads, and against other registrations: an
 * op selects its backend once, from the registry as it stands then, and
 * runs on that backend's kernels to its end; ops that start after this
 * returns see the new registry. A replaced backend's descriptor and kernels
 * stay readable for the ops still running on them, so the registry never
 * reuses an entry: at most 32 backends are listed at once, and a process
 * makes at most 64 registrations (overrides included); past either limit
 * this fails with MLA_ERR_CAPACITY and changes nothing.
 * (mla_force_backend, by contrast, is not to be called while ops run.) */
MLA_API mla_status mla_register_backend(const mla_backend_desc *desc, bool override);

#ifdef __cplusplus
}
#endif

#endif /* MLA_BACKEND_H */
