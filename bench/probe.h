/* FMA-throughput probes, the roofline the benchmarks report against: one per
 * ISA, each compiled with that ISA's flags (the Makefile gives
 * bench/probe_<isa>.c the flags of src/kernels/<isa>/). */
#ifndef MLA_BENCH_PROBE_H
#define MLA_BENCH_PROBE_H

#include <stdint.h>

/* `iters` rounds of independent f32 multiply-adds on the ISA's widest
 * vectors; returns the FLOPs done and stores a value that depends on all of
 * them into *sink so the work cannot be elided. */
typedef double bench_fma_probe_fn(int64_t iters, float *sink);

bench_fma_probe_fn bench_fma_probe__ref;
#if defined(__x86_64__)
bench_fma_probe_fn bench_fma_probe__avx2;
bench_fma_probe_fn bench_fma_probe__avx512;
#elif defined(__aarch64__)
bench_fma_probe_fn bench_fma_probe__neon;
#endif

/* The probe of a backend's micro-kernel ISA ("avx512_bf16" runs on
 * AVX-512's FMA units, so it gets the avx512 probe); a custom ISA gets the
 * scalar one. */
bench_fma_probe_fn *bench_fma_probe_for(const char *isa);

#if defined(__x86_64__)
/* `iters` rounds of AMX-BF16 TDPBF16PS on four independent full-tile
 * accumulators: the ceiling of the tile kernels (route "amx-bf16"). Returns
 * the FLOPs done, or 0 without doing any where libmla runs no AMX-BF16
 * (mla_cpu_caps); safe to call on any x86-64 CPU. */
double bench_amx_probe(int64_t iters, float *sink);
/* The same rounds with their four operand tiles loaded each round from L1,
 * as the tile GEMM's 2 x 2 block loads them: the ceiling of a tile kernel
 * whose operands never leave L1. */
double bench_amx_fed_probe(int64_t iters, float *sink);
#endif

#endif
