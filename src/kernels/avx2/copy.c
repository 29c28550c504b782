/* AVX2 streaming copy: the cache lines wholly inside dst are written with
 * vmovntdq, so scattered cache-row writes do not read each line first. */
#include "kernels/kernels.h"
#include "kernels/transpose_pairs_body.h"

#include "util.h"

#include <immintrin.h>
#include <string.h>

void mla_copy_stream__avx2(void *dst, const void *src, int64_t bytes)
{
    char *d = dst;
    const char *s = src;
    int64_t head = (int64_t)(-(uintptr_t)d & 63);
    head = head < bytes ? head : bytes;
    memcpy(d, s, (size_t)head);
    for (int64_t i = head; i + 64 <= bytes; i += 64) {
        _mm256_stream_si256((__m256i *)(d + i), _mm256_loadu_si256((const __m256i *)(s + i)));
        _mm256_stream_si256((__m256i *)(d + i + 32), _mm256_loadu_si256((const __m256i *)(s + i + 32)));
    }
    int64_t tail = head + (bytes - head) / 64 * 64;
    memcpy(d + tail, s + tail, (size_t)(bytes - tail));
}

void mla_store_fence__avx2(void)
{
    _mm_sfence();
}

/* 16 pairs a step: unpacklo/hi pair up elements within each 128-bit lane
 * (0-3 and 8-11, 4-7 and 12-15), the lane permutes put them in order. */
void mla_interleave_u16__avx2(uint16_t *dst, const uint16_t *even, const uint16_t *odd, int64_t n)
{
    int64_t e = 0;
    for (; e + 16 <= n; e += 16) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(even + e));
        __m256i y = odd ? _mm256_loadu_si256((const __m256i *)(odd + e)) : _mm256_setzero_si256();
        __m256i lo = _mm256_unpacklo_epi16(x, y), hi = _mm256_unpackhi_epi16(x, y);
        _mm256_storeu_si256((__m256i *)(dst + 2 * e), _mm256_permute2x128_si256(lo, hi, 0x20));
        _mm256_storeu_si256((__m256i *)(dst + 2 * e + 16), _mm256_permute2x128_si256(lo, hi, 0x31));
    }
    mla_interleave_u16__ref(dst + 2 * e, even + e, odd ? odd + e : NULL, n - e);
}

/* x[i] word j -> x[j] word i: pairs of rows (unpack 32), groups of four
 * (unpack 64), then the two 128-bit halves. */
static void transpose_8x8(__m256i x[8])
{
    __m256i t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(x[i], x[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(x[i], x[i + 1]);
    }
    /* u[4g + c], half H: rows 4g .. 4g + 3 of word 4H + c */
    for (int g = 0; g < 8; g += 4) {
        u[g] = _mm256_unpacklo_epi64(t[g], t[g + 2]);
        u[g + 1] = _mm256_unpackhi_epi64(t[g], t[g + 2]);
        u[g + 2] = _mm256_unpacklo_epi64(t[g + 1], t[g + 3]);
        u[g + 3] = _mm256_unpackhi_epi64(t[g + 1], t[g + 3]);
    }
    for (int c = 0; c < 4; c++) {
        x[c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x20);
        x[4 + c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x31);
    }
}

/* 8 x 8 blocks through registers, edges through masked loads and stores. */
void mla_transpose_u32__avx2(uint32_t *dst, int64_t ld, const void *const *rows, int64_t m,
                             int64_t n)
{
    for (int64_t r0 = 0; r0 < m; r0 += 8) {
        const __m256i lanes = mla_first_lanes8(m - r0);
        for (int64_t p0 = 0; p0 < n; p0 += 8) {
            const int64_t words = n - p0 < 8 ? n - p0 : 8;
            const __m256i present = mla_first_lanes8(words);
            __m256i x[8];
            for (int i = 0; i < 8; i++)
                x[i] = r0 + i < m ? _mm256_maskload_epi32((const int *)((const char *)rows[r0 + i] + 4 * p0), present)
                                  : _mm256_setzero_si256();
            transpose_8x8(x);
            for (int64_t j = 0; j < words; j++)
                _mm256_maskstore_epi32((int *)(dst + (p0 + j) * ld + r0), lanes, x[j]);
        }
    }
}

void mla_transpose_pairs_bf16__avx2(uint32_t *dst, int64_t ld, const float *src, int64_t lds,
                                  int64_t m, int64_t n)
{
    mla_transpose_pairs_bf16_body(dst, ld, src, lds, m, n, mla_cvt_f32_bf16__avx2);
}
