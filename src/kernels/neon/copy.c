/* AArch64 copies: plain stores. Neoverse and Apple cores detect full-line
 * write streams and stop allocating them in cache by themselves, and STNP is
 * only a hint, so a streaming variant would buy nothing measurable. */
#include "kernels/kernels.h"
#include "kernels/transpose_pairs_body.h"

#include <arm_neon.h>
#include <string.h>

void mla_copy_stream__neon(void *dst, const void *src, int64_t bytes)
{
    memcpy(dst, src, (size_t)bytes);
}

void mla_store_fence__neon(void)
{
}

/* 8 pairs a step with ZIP1/ZIP2. */
void mla_interleave_u16__neon(uint16_t *dst, const uint16_t *even, const uint16_t *odd, int64_t n)
{
    int64_t e = 0;
    for (; e + 8 <= n; e += 8) {
        uint16x8_t x = vld1q_u16(even + e), y = odd ? vld1q_u16(odd + e) : vdupq_n_u16(0);
        vst1q_u16(dst + 2 * e, vzip1q_u16(x, y));
        vst1q_u16(dst + 2 * e + 8, vzip2q_u16(x, y));
    }
    mla_interleave_u16__ref(dst + 2 * e, even + e, odd ? odd + e : NULL, n - e);
}

/* Words [p0, p1) of rows [r0, r1), one at a time. */
static void transpose_words(uint32_t *dst, int64_t ld, const void *const *rows, int64_t r0,
                            int64_t r1, int64_t p0, int64_t p1)
{
    for (int64_t p = p0; p < p1; p++)
        for (int64_t r = r0; r < r1; r++)
            memcpy(&dst[p * ld + r], (const char *)rows[r] + 4 * p, sizeof *dst);
}

/* 4 x 4 blocks with TRN1/TRN2 on words, then on doublewords; the edges
 * word by word. */
void mla_transpose_u32__neon(uint32_t *dst, int64_t ld, const void *const *rows, int64_t m,
                             int64_t n)
{
    const int64_t m4 = m / 4 * 4, n4 = n / 4 * 4;
    for (int64_t r0 = 0; r0 < m4; r0 += 4) {
        for (int64_t p0 = 0; p0 < n4; p0 += 4) {
            uint32x4_t x[4];
            for (int i = 0; i < 4; i++)
                x[i] = vreinterpretq_u32_u8(vld1q_u8((const uint8_t *)rows[r0 + i] + 4 * p0));
            uint64x2_t t0 = vreinterpretq_u64_u32(vtrn1q_u32(x[0], x[1]));
            uint64x2_t t1 = vreinterpretq_u64_u32(vtrn2q_u32(x[0], x[1]));
            uint64x2_t t2 = vreinterpretq_u64_u32(vtrn1q_u32(x[2], x[3]));
            uint64x2_t t3 = vreinterpretq_u64_u32(vtrn2q_u32(x[2], x[3]));
            vst1q_u32(dst + p0 * ld + r0, vreinterpretq_u32_u64(vtrn1q_u64(t0, t2)));
            vst1q_u32(dst + (p0 + 1) * ld + r0, vreinterpretq_u32_u64(vtrn1q_u64(t1, t3)));
            vst1q_u32(dst + (p0 + 2) * ld + r0, vreinterpretq_u32_u64(vtrn2q_u64(t0, t2)));
            vst1q_u32(dst + (p0 + 3) * ld + r0, vreinterpretq_u32_u64(vtrn2q_u64(t1, t3)));
        }
        transpose_words(dst, ld, rows, r0, r0 + 4, n4, n);
    }
    transpose_words(dst, ld, rows, m4, m, 0, n);
}

void mla_transpose_pairs_bf16__neon(uint32_t *dst, int64_t ld, const float *src, int64_t lds,
                                  int64_t m, int64_t n)
{
    mla_transpose_pairs_bf16_body(dst, ld, src, lds, m, n, mla_cvt_f32_bf16__neon);
}
