/* The row loop every NEON GEMM kernel runs over one column block: register
 * tiles of mr rows, then one tile of the m % mr left (mr <= 8). Each TILE
 * call gets its row count as a literal, so an always-inlined tile function
 * unrolls into its own copy per count, accumulators in registers. */
#ifndef MLA_NEON_ROW_TILES_H
#define MLA_NEON_ROW_TILES_H

#define MLA_NEON_ROW_TILES(m, mr, TILE)               \
    do {                                              \
        int64_t i_ = 0;                               \
        for (; i_ + (mr) <= (m); i_ += (mr))          \
            TILE(mr, i_);                             \
        switch ((m) - i_) {                           \
        case 1: TILE(1, i_); break;                   \
        case 2: TILE(2, i_); break;                   \
        case 3: TILE(3, i_); break;                   \
        case 4: TILE(4, i_); break;                   \
        case 5: TILE(5, i_); break;                   \
        case 6: TILE(6, i_); break;                   \
        case 7: TILE(7, i_); break;                   \
        }                                             \
    } while (0)

#endif
