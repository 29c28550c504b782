/*
 * The online softmax of one attention tile (mla_softmax_tile_fn in
 * mla_backend.h), written once and compiled into each ISA's softmax_tile
 * kernel under that ISA's flags, so the loops down the query rows
 * vectorize to its width (the attention core's other code is built for the
 * baseline ISA). Each value goes through the same operations in the same
 * order on every ISA (per row, keys in order, no reassociation), so the
 * kernels differ only where their exp_f32 kernels do.
 */
#ifndef MLA_KERNELS_SOFTMAX_TILE_BODY_H
#define MLA_KERNELS_SOFTMAX_TILE_BODY_H

#include "mla_backend.h"

#include <math.h>

static inline void mla_softmax_tile_body(float *s, int64_t n, int64_t ld, int64_t nr,
                                         float score_scale, const int64_t *hidden, float *m,
                                         float *l, float *alpha, mla_exp_f32_fn *exp_f32)
{
    float mx[MLA_SOFTMAX_MAX_ROWS], sum[MLA_SOFTMAX_MAX_ROWS];
    for (int64_t r = 0; r < ld; r++) {
        mx[r] = m[r];
        sum[r] = 0.0f;
    }
    for (int64_t j = 0; j < n; j++) {
        float *row = s + j * ld;
        if (score_scale != 1.0f)
            for (int64_t r = 0; r < nr; r++)
                row[r] *= score_scale;
        for (int64_t r = 0; hidden && r < hidden[j]; r++)
            row[r] = -INFINITY;
        for (int64_t r = 0; r < nr; r++)
            mx[r] = row[r] > mx[r] ? row[r] : mx[r];
    }
    for (int64_t r = 0; r < ld; r++) {
        /* a maximum within the slack of the running one is not taken, so
         * that P.V's tiles of C resume from O unscaled (mla_backend.h) */
        float top = mx[r] > m[r] + MLA_SOFTMAX_RESCALE_SLACK ? mx[r] : m[r];
        float use = top == -INFINITY ? 0.0f : top;
        alpha[r] = m[r] - use; /* pad rows: -inf - 0 */
        m[r] = top;
        mx[r] = use;
    }
    /* one pass per key row while it is in L1: a tile's S (up to 128 KB)
     * is larger, and a pass over all of it per step cost three trips */
    for (int64_t j = 0; j < n; j++) {
        float *row = s + j * ld;
        for (int64_t r = 0; r < ld; r++)
            row[r] -= mx[r];
        exp_f32(row, row, ld);
        for (int64_t r = 0; r < ld; r++)
            sum[r] += row[r];
    }
    exp_f32(alpha, alpha, ld);
    for (int64_t r = 0; r < nr; r++)
        l[r] = l[r] * alpha[r] + sum[r];
}

#endif
