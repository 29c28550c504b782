/* The streaming copy of avx2/copy.c: a line written as two 32-byte
 * non-temporal stores streams as well as one 64-byte store, and every
 * AVX-512 CPU runs AVX2. */
#include "kernels/kernels.h"

#include <immintrin.h>

void mla_copy_stream__avx512(void *dst, const void *src, int64_t bytes)
{
    mla_copy_stream__avx2(dst, src, bytes);
}

void mla_store_fence__avx512(void)
{
    mla_store_fence__avx2();
}

/* 32 pairs a step, one vpermt2w per 32 output elements; the tail masked. */
void mla_interleave_u16__avx512(uint16_t *dst, const uint16_t *even, const uint16_t *odd, int64_t n)
{
    static const uint16_t order[64] = {
        0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
        8,  40, 9,  41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47,
        16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
        24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63,
    };
    const __m512i first = _mm512_loadu_si512(order), second = _mm512_loadu_si512(order + 32);
    for (int64_t e = 0; e < n; e += 32) {
        const __mmask32 in = n - e >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << (n - e)) - 1);
        const __mmask32 out_lo = n - e >= 16 ? ~(__mmask32)0 : (__mmask32)((1ull << 2 * (n - e)) - 1);
        const __mmask32 out_hi = n - e >= 32 ? ~(__mmask32)0
                                 : n - e <= 16 ? 0 : (__mmask32)((1ull << 2 * (n - e - 16)) - 1);
        __m512i x = _mm512_maskz_loadu_epi16(in, even + e);
        __m512i y = odd ? _mm512_maskz_loadu_epi16(in, odd + e) : _mm512_setzero_si512();
        _mm512_mask_storeu_epi16(dst + 2 * e, out_lo, _mm512_permutex2var_epi16(x, first, y));
        _mm512_mask_storeu_epi16(dst + 2 * e + 32, out_hi, _mm512_permutex2var_epi16(x, second, y));
    }
}
