/* Tuning choices, one home each, with the reason beside it. These are
 * decisions (a number a benchmark picked, a default a reference fixed), not
 * facts of a format: change one here and every layer follows. */
#ifndef MLA_CORE_POLICY_H
#define MLA_CORE_POLICY_H

#include <stdint.h>

/* ---- split-KV decode schedules ------------------------------------------ */

/* The default split-KV schedule, of mla_decode and mla_build_decode_sched
 * alike (a zero field of mla_decode_sched_params): 16-token blocks, a
 * segment costing about two of them (packing its queries, writing its
 * rows). Finer than FlashMLA's 64 + 5 (docs/semantics.md §5.3), which
 * leaves CPU threads up to 1/8 idle when each part holds only a few dozen
 * blocks; a caller wanting FlashMLA's cut points asks for 64 and 5. One
 * default for both, so that a schedule built for inspection is the one
 * mla_decode runs, and a batch-invariant mode keyed on block_n agrees. */
#define MLA_SCHED_BLOCK_N 16
#define MLA_SCHED_OVERHEAD 2

/* An explicit part count above this is a caller bug, not a machine size; it
 * also bounds the schedule's workspace before any size is formed. */
#define MLA_SCHED_MAX_PARTS (INT64_C(1) << 20)

/* ---- when a fork/join pays ------------------------------------------------ */
/* A parallel region costs a few microseconds to open and close; each limit is
 * the work one thread does in about that time. */

/* element-wise kernels (conversions, exp): elements per thread */
#define MLA_FORK_MIN_ELEMENTS 16384
/* cache writes and gathers: rows (each ~1 KiB) per thread */
#define MLA_FORK_MIN_ROWS 64
/* metadata fills: int32 entries in all (about what one thread writes in the
 * time a fork/join takes, at memory bandwidth) */
#define MLA_FORK_MIN_ENTRIES ((int64_t)1 << 18)

/* Threads worth starting for `work` units when each thread should get at
 * least `min_per_thread` of them: between 1 and `threads`. */
static inline int mla_team_size(int64_t work, int64_t min_per_thread, int threads)
{
    int64_t useful = work / min_per_thread;
    return useful < threads ? (useful > 1 ? (int)useful : 1) : threads;
}

/* ---- attention tiles (decode now, prefill next) ---------------------------- */

/* Key rows per tile, the most of any attention route (each route has its
 * own, mla_attn_route.tile): per-thread scratch is sized for it. */
#define MLA_ATTN_TILE 256
/* Key rows widened to f32 per scores GEMM call: 8 x 576 f32 (18 KiB) stays
 * in L1 until the GEMM reads it. */
#define MLA_ATTN_WIDEN_ROWS 8
/* Query rows per pass over the keys: small enough that O [rows][L] (256 KiB
 * at L = 512) stays in L2. */
#define MLA_ATTN_MAX_ROWS 128
/* Query rows are padded to this multiple. It is the widest f32 vector of any
 * backend (AVX-512: 16 lanes) and a multiple of the others (AVX2 8, NEON 4),
 * so one layout serves every ISA and each backend's softmax and exp run on
 * whole vectors; the padding rows cost at most 15 columns of the GEMMs. */
#define MLA_ATTN_ROW_MULTIPLE 16
/* Prefill: query blocks (of up to MLA_ATTN_MAX_ROWS rows) that share one
 * pass over a head's keys, so each key tile is fetched (and copied or
 * widened) once per group rather than once per block. Causal 192/128, H=16,
 * T=2048 on one Sapphire Rapids class core: 1 block per pass 94-103
 * GFLOP/s, 2 blocks 113. With the blocks sharing one S (flash_attn.c), 4
 * against 2 at H=128: 65.2-66.1 % of the FMA probe against 62.8-65.3 on 2
 * threads of Zen 4 (avx2), 150-169 against 162-179 ms on 16 of the Xeon
 * (avx512), the same within noise at H=16 and on AMX (bench/RESULTS.md).
 * The f32 route then touches about 0.85 MB of scratch a thread per tile. */
#define MLA_PREFILL_GROUP_BLOCKS 4
/* Prefill's f32 route copies each key tile's rows of one head, a token
 * stride apart (each row in a page of its own at H >= 16), which the
 * hardware prefetchers do not follow: the copy asks for the rows this far
 * ahead. Causal 192/128 T=2048 on 2 threads of Zen 4, avx2: H=16 62.5-71.6
 * % of the FMA probe at 8 rows (65.1-67.4 at 4) against 59.2-64.7 without;
 * the next tile's rows asked for a tile ahead gained nothing. */
#define MLA_PREFILL_COPY_PREFETCH_ROWS 8

/* ---- the packed GEMM (the kv_b_proj up-projection) ------------------------ */

/* Rows of A per row block: a block's widened A ([depth][rows], column by
 * column) is what one tile's micro-kernel calls broadcast from. */
#define MLA_PACKED_GEMM_MC 64
/* Rows per row block on the AMX tile route: each block streams all of W's
 * segments, and tiles run W's bytes 4x faster than the FMA kernels do, so
 * 64-row blocks left the tile GEMM waiting on W (24% of the AMX probe at
 * 2048 x 4096 x 512 on dev-spr, 128 MB of W traffic); 256 rows cut that
 * traffic 4x and a block's A (256 x 512 bf16) still sits in L2. */
#define MLA_PACKED_GEMM_MC_TILE 256
/* Depth per k block: later blocks resume from C with c_scale = ones. */
#define MLA_PACKED_GEMM_KC 512
/* Columns per segment piece, at most. */
#define MLA_PACKED_GEMM_NC 128
/* Rows per packed A micro-panel. */
#define MLA_PACKED_GEMM_MR 8
/* Columns per packed W strip. */
#define MLA_PACKED_GEMM_NR 48

/* ---- merge_attn_states ------------------------------------------------------ */

/* Rows ahead whose inputs a merging thread asks for: with both inputs read
 * in one pass the merge is bound by how many misses a core keeps in flight,
 * and the hardware prefetchers alone left bf16 rows (256 bytes each) at
 * 62-64% of memcpy on 2 threads of dev-spr; 2 or 4 rows ahead made it
 * 83-85%, 16 79%. */
#define MLA_MERGE_PREFETCH_ROWS 4

/* ---- the prefill op: which path a request takes ------------------------------ */

/* mla_prefill_choose_path prices each path in FLOPs divided by the fraction
 * of the FMA peak its kernels reach, plus the bytes it moves times the
 * machine's balance (FMA peak / memcpy bandwidth, in FLOP per byte). The
 * fractions are mla_bench's figures for H = 16..128 f32 (bench/RESULTS.md):
 * the packed GEMM ~0.6, flash attention ~0.7, the absorbed decode ~0.65;
 * the balance is ~15 on the 16-vCPU Xeon (1300 GFLOP/s, 86 GB/s) and ~16 on
 * the 2-core dev VM. */
#define MLA_PREFILL_COST_GEMM_EFF 0.60
#define MLA_PREFILL_COST_ATTN_EFF 0.70
#define MLA_PREFILL_COST_DECODE_EFF 0.65
#define MLA_PREFILL_COST_FLOP_PER_BYTE 16.0

#endif
