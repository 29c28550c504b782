/* Helpers shared by the AVX2 micro-kernels. */
#ifndef MLA_AVX2_UTIL_H
#define MLA_AVX2_UTIL_H

#include <immintrin.h>
#include <stdint.h>

/* The vector mask of an 8-lane step: lane i all ones for i < count (the
 * form vpmaskmovd takes). */
static inline __m256i mla_first_lanes8(int64_t count)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#endif
