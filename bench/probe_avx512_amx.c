/* The AMX-BF16 throughput probes: TDPBF16PS on full tiles, bare and fed its
 * operand tiles from L1, the ceilings of kernels that run on the tile unit.
 * Called on any x86-64 CPU to find out whether AMX runs there, so it is
 * built with -mamx-tile -mamx-bf16 alone (isa_flags): no AVX instruction can
 * come before libmla's capability check. */
#include "probe.h"

#include "mla.h"

#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

enum { ROWS = 16, ROW_BYTES = 64 };

/* The 64-byte operand of LDTILECFG. */
typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* The tile intrinsics hand their asm only an address, so gcc 12 sees no read
 * of the bytes behind it and drops the stores that fill them; this makes
 * them visible first. */
static void publish(const void *p)
{
    __asm__ volatile("" : : "r"(p) : "memory");
}

/* Palette 1, tiles 0-7 all 16 rows x 64 bytes. */
static void configure_tiles(void)
{
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = ROWS;
        cfg.colsb[t] = ROW_BYTES;
    }
    publish(&cfg);
    _tile_loadconfig(&cfg);
}

/* Four independent accumulators C0-C3 (tmm0-3), each fed every round by one
 * of A0, A1 (tmm4-5) and one of B0, B1 (tmm6-7): four chains in flight cover
 * TDPBF16PS's latency at one issue per 16 cycles. `fed` loads the four
 * operand tiles every round, in the order the tile GEMM's 2 x 2 block loads
 * them, from 4 KB that stay in L1: the ceiling of a kernel that loads one
 * tile per product, as a 2 x 2 block must. Returns 0 where libmla runs no
 * AMX-BF16 (mla_cpu_caps: the CPU, the OS's tile state and Linux's
 * permission, which libmla's init asks for, and MLA_MAX_ISA). */
static double amx_rounds(int64_t iters, float *sink, bool fed)
{
    enum { CHAINS = 4, TILE_HALVES = ROWS * ROW_BYTES / 2 };
    if (!(mla_cpu_caps() & MLA_CAP_AMX_BF16))
        return 0;
    configure_tiles();

    /* A0 A1 bf16 1.0, B0 B1 2^-10: C grows by 2^-5 a round, far from overflow */
    _Alignas(64) uint16_t op[4][TILE_HALVES];
    for (int i = 0; i < TILE_HALVES; i++) {
        op[0][i] = op[1][i] = 0x3f80;
        op[2][i] = op[3][i] = 0x3a80;
    }
    publish(op);
    _tile_loadd(4, op[0], ROW_BYTES);
    _tile_loadd(5, op[1], ROW_BYTES);
    _tile_loadd(6, op[2], ROW_BYTES);
    _tile_loadd(7, op[3], ROW_BYTES);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    if (fed) {
        for (int64_t i = 0; i < iters; i++) {
            _tile_loadd(4, op[0], ROW_BYTES);
            _tile_loadd(6, op[2], ROW_BYTES);
            _tile_dpbf16ps(0, 4, 6);
            _tile_loadd(7, op[3], ROW_BYTES);
            _tile_dpbf16ps(1, 4, 7);
            _tile_loadd(5, op[1], ROW_BYTES);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    } else {
        for (int64_t i = 0; i < iters; i++) {
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    }

    float c[CHAINS][ROWS * ROW_BYTES / 4];
    _tile_stored(0, c[0], ROW_BYTES);
    _tile_stored(1, c[1], ROW_BYTES);
    _tile_stored(2, c[2], ROW_BYTES);
    _tile_stored(3, c[3], ROW_BYTES);
    _tile_release();
    float sum = 0;
    for (int t = 0; t < CHAINS; t++)
        sum += c[t][0];
    *sink = sum;
    /* each instruction: 16 x 16 outputs, 32 bf16 products each */
    return 2.0 * ROWS * ROWS * 32 * CHAINS * (double)iters;
}

double bench_amx_probe(int64_t iters, float *sink)
{
    return amx_rounds(iters, sink, false);
}

double bench_amx_fed_probe(int64_t iters, float *sink)
{
    return amx_rounds(iters, sink, true);
}
