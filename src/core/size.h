/* Size arithmetic: products that report overflow instead of wrapping, the
 * rounding and alignment every workspace layout uses, and the cache lines a
 * span of bytes covers. */
#ifndef MLA_CORE_SIZE_H
#define MLA_CORE_SIZE_H

#include <stdbool.h>
#include <stdint.h>

/* Workspaces, plans, cache rows and scratch regions start on this boundary:
 * a cache line, and the widest SIMD load (AVX-512), so no kernel load is
 * split and no two threads share a line of output. */
#define MLA_ALIGN 64

/* Multiplies two non-negative sizes; false (and *out untouched) on overflow. */
static inline bool mla_mul_size(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

/* Bytes spanned by `rows` rows of `width` elements, `stride` apart; false on
 * overflow. */
static inline bool mla_span_bytes(int64_t rows, int64_t stride, int64_t width, int64_t elem_size,
                                  int64_t *bytes)
{
    int64_t elems = 0;
    if (rows > 0 && (__builtin_mul_overflow(rows - 1, stride, &elems) ||
                     __builtin_add_overflow(elems, width, &elems)))
        return false;
    return mla_mul_size(elems, elem_size, bytes);
}

/* a / b rounded up, for a >= 0 and b >= 1, without overflowing a + b. */
static inline int64_t mla_ceil_div(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

/* x rounded up to a multiple of `to` (x >= 0, to >= 1; the caller knows it
 * fits). */
static inline int64_t mla_round_up(int64_t x, int64_t to)
{
    return mla_ceil_div(x, to) * to;
}

/* Elements between the rows of a scratch matrix `elems` wide: whole lines
 * and one line more, so that rows a power of two of lines long (2 KB for
 * 512 floats) do not fall, 16 rows of a tile, into 2 of L1's 64 sets. */
static inline int64_t mla_unaliased_row(int64_t elems, int64_t elem_size)
{
    const int64_t line = MLA_ALIGN / elem_size;
    return mla_round_up(elems, line) + line;
}

/* Asks for every line of bytes [p, p + bytes) into L1, the last one too
 * where p is not on a line start; nothing when bytes <= 0. */
static inline void mla_prefetch_span(const void *p, int64_t bytes)
{
    const char *c = (const char *)p;
    for (int64_t at = 0; at < bytes; at += MLA_ALIGN)
        __builtin_prefetch(c + at, 0, 3);
    if (bytes > 0)
        __builtin_prefetch(c + bytes - 1, 0, 3);
}

/* *bytes = a * b * c * d rounded up to MLA_ALIGN (a workspace region);
 * false on overflow. */
static inline bool mla_region_bytes(int64_t a, int64_t b, int64_t c, int64_t d, int64_t *bytes)
{
    int64_t x;
    if (!mla_mul_size(a, b, &x) || !mla_mul_size(x, c, &x) || !mla_mul_size(x, d, &x) ||
        x > INT64_MAX - MLA_ALIGN)
        return false;
    *bytes = mla_round_up(x, MLA_ALIGN);
    return true;
}

/* p rounded up to the next MLA_ALIGN boundary (workspaces are sized with
 * MLA_ALIGN bytes of slack for this). */
static inline void *mla_align_ptr(void *p)
{
    return (void *)(((uintptr_t)p + MLA_ALIGN - 1) & ~(uintptr_t)(MLA_ALIGN - 1));
}

#endif
