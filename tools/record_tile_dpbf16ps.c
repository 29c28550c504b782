/*
 * Records what TDPBF16PS stores for the cases of
 * tests/tile_dpbf16ps_cases.h, as the C array tests/tile_dpbf16ps_recorded.h
 * holds. Needs a CPU with AMX-BF16 and Linux 5.16+:
 *   cc -O2 -mamx-tile -mamx-bf16 -Itests tools/record_tile_dpbf16ps.c -o record
 *   ./record > tests/tile_dpbf16ps_recorded.h
 */
#include "tile_dpbf16ps_cases.h"

#include <immintrin.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };

/* Palette 1: tile 0 is c (1 x 1 f32), tile 1 a (1 row of `pairs` pairs),
 * tile 2 b (`pairs` rows of one pair). */
typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

static void configure(int pairs)
{
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    cfg.rows[0] = 1, cfg.colsb[0] = 4;
    cfg.rows[1] = 1, cfg.colsb[1] = (uint16_t)(4 * pairs);
    cfg.rows[2] = (uint8_t)pairs, cfg.colsb[2] = 4;
    /* gcc 12 treats ldtilecfg as reading nothing and drops the stores
     * above without this barrier */
    __asm__ volatile("" : : "r"(&cfg) : "memory");
    _tile_loadconfig(&cfg);
}

int main(void)
{
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        perror("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)");
        return 1;
    }
    printf("/* TDPBF16PS results for tests/tile_dpbf16ps_cases.h, recorded by\n"
           " * tools/record_tile_dpbf16ps.c on an AMX-BF16 CPU. Generated. */\n"
           "static const uint32_t tdp_recorded[TDP_CASES] = {\n");
    for (int i = 0; i < TDP_CASES; i++) {
        tdp_case t = tdp_make(i);
        uint32_t c = t.c;
        configure(t.pairs);
        /* the tile intrinsics' asm names no memory: order c, a and b's
         * stores before the loads and c's read after the store */
        __asm__ volatile("" : : "r"(&c), "r"(&t) : "memory");
        _tile_loadd(0, &c, 4);
        _tile_loadd(1, t.a, 4 * t.pairs);
        _tile_loadd(2, t.b, 4);
        _tile_dpbf16ps(0, 1, 2);
        _tile_stored(0, &c, 4);
        __asm__ volatile("" : : "r"(&c) : "memory");
        printf("%s0x%08x,%s", i % 8 ? " " : "    ", c, i % 8 == 7 ? "\n" : "");
    }
    _tile_release();
    printf("};\n");
    return 0;
}
