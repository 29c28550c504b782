/* AArch64 copies: plain stores. Neoverse and Apple cores detect full-line
 * write streams and stop allocating them in cache by themselves, and STNP is
 * only a hint, so a streaming variant would buy nothing measurable. */
#include "kernels/kernels.h"

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
