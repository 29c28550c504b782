/* Reference copies: plain stores, so there is nothing to fence. */
#include "kernels/kernels.h"
#include "kernels/transpose_pairs_body.h"

#include <string.h>

void mla_copy_stream__ref(void *dst, const void *src, int64_t bytes)
{
    memcpy(dst, src, (size_t)bytes);
}

void mla_store_fence__ref(void)
{
}

void mla_interleave_u16__ref(uint16_t *dst, const uint16_t *even, const uint16_t *odd, int64_t n)
{
    for (int64_t e = 0; e < n; e++) {
        mla_store_u16(dst + 2 * e, mla_load_u16(even + e));
        mla_store_u16(dst + 2 * e + 1, odd ? mla_load_u16(odd + e) : 0);
    }
}

/* Column by column: dst is written in order, the m rows read a word each. */
void mla_transpose_u32__ref(uint32_t *dst, int64_t ld, const void *const *rows, int64_t m, int64_t n)
{
    for (int64_t p = 0; p < n; p++)
        for (int64_t r = 0; r < m; r++)
            memcpy(&dst[p * ld + r], (const char *)rows[r] + 4 * p, sizeof *dst);
}

void mla_transpose_pairs_bf16__ref(uint32_t *dst, int64_t ld, const float *src, int64_t lds,
                                  int64_t m, int64_t n)
{
    mla_transpose_pairs_bf16_body(dst, ld, src, lds, m, n, mla_cvt_f32_bf16__ref);
}
