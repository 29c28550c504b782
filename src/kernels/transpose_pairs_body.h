/*
 * mla_transpose_pairs_bf16_fn (mla_backend.h) written once on an ISA's
 * cvt_f32_bf16 kernel, so its bits are that kernel's: each pair of source
 * rows is rounded a piece at a time into a buffer, then scattered down the
 * destination's rows. Built into the ref, AVX2 and NEON kernels, whose
 * backends pack P this way only on the bf16-dot route (BFDOT); AVX-512,
 * under AMX and vdpbf16ps, has a register-transposing kernel of its own.
 */
#ifndef MLA_KERNELS_TRANSPOSE_PAIRS_BODY_H
#define MLA_KERNELS_TRANSPOSE_PAIRS_BODY_H

#include "mla_backend.h"

static inline void mla_transpose_pairs_bf16_body(uint32_t *dst, int64_t ld, const float *src,
                                                 int64_t lds, int64_t m, int64_t n,
                                                 mla_cvt_f32_bf16_fn *cvt)
{
    enum { PIECE = 64 };
    uint16_t even[PIECE], odd[PIECE];
    for (int64_t p = 0; p < (n + 1) / 2; p++) {
        const bool has_odd = 2 * p + 1 < n;
        for (int64_t r0 = 0; r0 < m; r0 += PIECE) {
            const int64_t rows = m - r0 < PIECE ? m - r0 : PIECE;
            cvt(src + 2 * p * lds + r0, even, rows);
            if (has_odd)
                cvt(src + (2 * p + 1) * lds + r0, odd, rows);
            for (int64_t r = 0; r < rows; r++)
                dst[(r0 + r) * ld + p] = (uint32_t)even[r] | (has_odd ? (uint32_t)odd[r] << 16 : 0u);
        }
    }
}

#endif
