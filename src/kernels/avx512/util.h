/* Helpers shared by the AVX-512 micro-kernels. */
#ifndef MLA_AVX512_UTIL_H
#define MLA_AVX512_UTIL_H

#include <immintrin.h>
#include <stdint.h>

/* Lanes of a 16-wide step that are still inside the array. */
static inline __mmask16 mla_tail_mask16(int64_t left)
{
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

#endif
