/* The streaming copy of avx2/copy.c: a line written as two 32-byte
 * non-temporal stores streams as well as one 64-byte store, and every
 * AVX-512 CPU runs AVX2. */
#include "kernels/kernels.h"

#include "util.h"

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

/* 16 x 16 words of registers: rows r0 .. r0 + 15 (absent ones zero),
 * words p0 .. p0 + 15 (masked to the n - p0 that exist). */
static void load_block(__m512i x[16], const void *const *rows, int64_t r0, int64_t m, int64_t p0,
                       __mmask16 words)
{
    for (int i = 0; i < 16; i++)
        x[i] = r0 + i < m ? _mm512_maskz_loadu_epi32(words, (const char *)rows[r0 + i] + 4 * p0)
                          : _mm512_setzero_si512();
}

/* x[i] word j -> x[j] word i: pairs of rows within 128-bit lanes
 * (unpack 32), then groups of four (unpack 64), then the lanes of four
 * groups (two rounds of shuffle_i32x4). */
static void transpose_16x16(__m512i x[16])
{
    __m512i a[16], b[16];
    for (int i = 0; i < 16; i += 2) {
        a[i] = _mm512_unpacklo_epi32(x[i], x[i + 1]);
        a[i + 1] = _mm512_unpackhi_epi32(x[i], x[i + 1]);
    }
    /* b[4g + c], lane L: rows 4g .. 4g + 3 of word 4L + c */
    for (int g = 0; g < 16; g += 4) {
        b[g] = _mm512_unpacklo_epi64(a[g], a[g + 2]);
        b[g + 1] = _mm512_unpackhi_epi64(a[g], a[g + 2]);
        b[g + 2] = _mm512_unpacklo_epi64(a[g + 1], a[g + 3]);
        b[g + 3] = _mm512_unpackhi_epi64(a[g + 1], a[g + 3]);
    }
    for (int c = 0; c < 4; c++) {
        __m512i even01 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x88);  /* lanes 0, 2 of groups 0, 1 */
        __m512i odd01 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xdd);   /* lanes 1, 3 */
        __m512i even23 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x88);
        __m512i odd23 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xdd);
        x[c] = _mm512_shuffle_i32x4(even01, even23, 0x88);      /* word c      */
        x[4 + c] = _mm512_shuffle_i32x4(odd01, odd23, 0x88);    /* word 4 + c  */
        x[8 + c] = _mm512_shuffle_i32x4(even01, even23, 0xdd);  /* word 8 + c  */
        x[12 + c] = _mm512_shuffle_i32x4(odd01, odd23, 0xdd);   /* word 12 + c */
    }
}

/* 16 x 16 blocks through registers; each output row of a block is one
 * store masked to the block's rows. */
void mla_transpose_u32__avx512(uint32_t *dst, int64_t ld, const void *const *rows, int64_t m,
                               int64_t n)
{
    for (int64_t r0 = 0; r0 < m; r0 += 16) {
        const __mmask16 lanes = mla_tail_mask16(m - r0);
        for (int64_t p0 = 0; p0 < n; p0 += 16) {
            const int64_t words = n - p0 < 16 ? n - p0 : 16;
            __m512i x[16];
            load_block(x, rows, r0, m, p0, mla_tail_mask16(words));
            transpose_16x16(x);
            for (int64_t j = 0; j < words; j++)
                _mm512_mask_storeu_epi32(dst + (p0 + j) * ld + r0, lanes, x[j]);
        }
    }
}

/* Pair p of 16 rows from r0: source rows 2p and 2p + 1 rounded, the odd
 * one shifted into the high halves (0 past the last row). */
static __m512i pair_of(const float *src, int64_t lds, int64_t n, int64_t p, int64_t r0,
                       __mmask16 lanes)
{
    __m512i even = mla_round_bf16_epi32(_mm512_maskz_loadu_ps(lanes, src + 2 * p * lds + r0));
    if (2 * p + 1 >= n)
        return even;
    __m512i odd = mla_round_bf16_epi32(_mm512_maskz_loadu_ps(lanes, src + (2 * p + 1) * lds + r0));
    return _mm512_or_si512(even, _mm512_slli_epi32(odd, 16));
}

/* 16 rows x 16 pairs a block: 32 source rows rounded into 16 words per
 * row lane, transposed through registers, stored a destination row each. */
void mla_transpose_pairs_bf16__avx512(uint32_t *dst, int64_t ld, const float *src, int64_t lds,
                                      int64_t m, int64_t n)
{
    const int64_t pairs = (n + 1) / 2;
    for (int64_t r0 = 0; r0 < m; r0 += 16) {
        const int64_t rows = m - r0 < 16 ? m - r0 : 16;
        const __mmask16 lanes = mla_tail_mask16(rows);
        for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
            const __mmask16 words = mla_tail_mask16(pairs - p0);
            __m512i x[16];
            for (int64_t j = 0; j < 16; j++)
                x[j] = p0 + j < pairs ? pair_of(src, lds, n, p0 + j, r0, lanes) : _mm512_setzero_si512();
            transpose_16x16(x);
            for (int64_t r = 0; r < rows; r++)
                _mm512_mask_storeu_epi32(dst + (r0 + r) * ld + p0, words, x[r]);
        }
    }
}
