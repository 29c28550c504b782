/*
 * What mla_bench's commands share: their options, timing, the FMA peak and
 * memcpy ceilings they report against, and the output table (bench_common.c).
 * Each command lives in its own file; mla_bench.c parses the arguments and
 * runs one.
 */
#ifndef MLA_BENCH_H
#define MLA_BENCH_H

#include <mla.h>
#include <mla_backend.h>

#include "probe.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MAX_REPS 1000
/* A kernel loop keeps the time of each of its first MAX_SAMPLES reps, then a
 * uniform sample of that many (reservoir sampling) for the median; min, max
 * and stddev count every rep. Long --seconds loops stay at 512 KiB. */
#define MAX_SAMPLES 65536
#define MAX_SECONDS 3600.0

typedef struct options {
    const char *backend; /* NULL: every backend that can run here (decode: the selected one) */
    int threads;         /* 0: 1 and mla_default_threads() (decode: the latter) */
    int reps;
    int64_t n;
    int64_t tokens, block_size;   /* cache cases; block_size for decode too */
    int cache_dtype, other_dtype; /* cache cases; -1: all (decode: bf16 cache) */
    int64_t heads, batch, ctx, sq, kv_lora_rank, rope_dim; /* decode */
    int q_dtype;                                           /* decode; -1: f32 */
    int out_dtype;                                         /* gemm; -1: f32 */
    int64_t parts;   /* decode: schedule parts per call; 0: the op's default */
    bool scaling;                                          /* decode */
    bool bf16_compute;                                     /* decode */
    bool tokens_set, heads_set; /* given: gemm's own defaults differ */
    bool batch_set;                        /* given: attn's own default differs */
    int64_t qk_dim, v_dim;                 /* attn: Dqk and Dv (rope_dim of Dqk is k_pe) */
    bool causal, whole_k;                  /* attn: mask; k whole, not k_nope + k_pe */
    bool json;
    bool no_probe;     /* ceilings timed in a phase of their own, not rep by rep */
    double seconds;    /* > 0: each kernel loop runs for about this long, not --reps times */
    bool cold;         /* decode, prefill, attn: inputs rotated through copies past the LLC */
    int64_t llc_bytes; /* --llc-mib; 0: detected (llc_bytes()) */
    const char *command;
} options;

/* The times of a loop's reps, in seconds (reps: how many were timed). */
typedef struct stats {
    double median, min, max, stddev;
    int64_t reps;
} stats;

/* One line of output. n and copy_gbps are 0 where they do not apply; probe
 * (probe_mode()) is NULL for the ceilings themselves and ops without one. */
typedef struct row {
    const char *op, *backend, *probe;
    int threads;
    int64_t n;
    stats time;
    double gflops, gbps, peak_gflops, copy_gbps;
} row;

/* What a command covers, with the FMA peak of every (backend, threads) pair. */
typedef struct plan {
    const mla_backend_desc **backends;
    int nbackends;
    int threads[2];
    int nthreads;
    row *peaks; /* [backend * nthreads + thread index] */
} plan;

/* ---- helpers ---- */

/* True if st is MLA_OK; otherwise prints the library's message. */
bool check(mla_status st, const char *what);
/* 64-byte aligned; NULL (after saying so) when out of memory. */
void *alloc(size_t bytes);
/* Billions of units per second (GFLOP/s, GB/s). */
double giga_per_s(double units, double seconds);
/* xorshift32: deterministic, so every run benchmarks the same layout. */
uint32_t xorshift32(uint32_t *state);
/* perm = a random permutation of 0 .. n-1 drawn from *rng. */
void shuffle(int64_t *perm, int64_t n, uint32_t *rng);

/* ---- timing ---- */

/* One run of the code being timed; false (after printing why) if it failed. */
typedef bool (*run_fn)(void *ctx);
/* Wall times of `reps` runs after one untimed run; with seconds > 0, of as
 * many runs as fit in about `seconds` (at least one) instead. */
bool time_region(run_fn run, void *ctx, int reps, double seconds, stats *t);
/* Times of `run` and of `ref`, timed alternately rep by rep (seconds: as in
 * time_region, counting both). */
bool time_interleaved(run_fn run, void *ctx, run_fn ref, void *ref_ctx, int reps, double seconds,
                      stats *t, stats *ref_t);
/* A ceiling a kernel is reported against (the FMA probe, a memcpy): its
 * run and where its times go. */
typedef struct ceiling {
    run_fn run;
    void *ctx;
    stats *t;
} ceiling;
/* The kernel `run` and the `count` ceilings it is reported against, timed
 * in rounds: each ceiling, then the kernel, run untimed for SETTLE_SECONDS
 * (once at least) and then timed once, so that all see the same moments of
 * a shared host but each runs as a loop of its own finds the clocks and
 * caches, not as the one before it left them. With
 * --no-probe each ceiling's loop first (--reps times), then the kernel's
 * alone, so a profile of the kernel loop holds the kernel only. */
bool time_beside(const options *o, run_fn run, void *ctx, const ceiling *ceilings, int count,
                 stats *t);
/* How a row's ceiling was timed: "interleaved" (rep by rep with the
 * kernel) or "separate" (--no-probe: in a phase of its own). */
const char *probe_mode(const options *o);
/* Every time of s multiplied by `by` (reps unchanged). */
stats scale_stats(stats s, double by);

/* ---- output ---- */

/* The run's metadata (bench_meta.c), once, before any row: with --json the
 * object {"op":"meta",...}, else lines starting with '#'. */
void print_run_meta(const options *o, int argc, char **argv);
void print_header(bool json);
void print_row(const row *r, bool json);
/* ,"<prefix>min_us":..,"<prefix>max_us":..,"<prefix>stddev_us":..,"<prefix>reps":..
 * (the median goes under each command's own key). */
void print_stats_json(const char *prefix, const stats *t);
/* The table's compact spread: min and max as % of the median ("-1.2/+8.4")
 * and the stddev as % of the median. */
void format_spread(const stats *t, char *range, size_t range_size, char *sd, size_t sd_size);

/* ---- --cold: inputs rotated through copies that exceed the last-level cache ---- */

#define COLD_MAX_INPUTS 4

/* Copy k holds every input of a call, each 64-byte aligned; rep k reads copy
 * k % count, so the copies together (twice the LLC) leave none of a rep's
 * inputs in cache from an earlier one, as a 61-layer server's caches are
 * never found in L3. count <= 1: no copies (not --cold, or the inputs alone
 * exceed twice the LLC), the inputs are used in place. */
typedef struct cold_inputs {
    char *copies;
    size_t offset[COLD_MAX_INPUTS], stride;
    int64_t count, next;
} cold_inputs;

/* The last-level cache: --llc-mib, else sysconf(_SC_LEVEL3_CACHE_SIZE), else
 * /sys/devices/system/cpu/cpu0/cache/index3/size, else 64 MiB. */
int64_t llc_bytes(const options *o);
/* Without --cold c->count = 0 and nothing is copied; with it, count copies of
 * the n inputs src[i] of bytes[i] each, written by `threads` threads. */
bool cold_inputs_make(cold_inputs *c, const options *o, const void *const *src,
                      const size_t *bytes, int n, int threads);
/* Moves to the next copy (once per rep, before the call); false where there
 * are no copies and the inputs stay in place. */
bool cold_advance(cold_inputs *c);
/* Input i in the current copy. */
void *cold_input(const cold_inputs *c, int i);
void cold_inputs_free(cold_inputs *c);

/* ---- FMA and AMX peaks ---- */

/* A backend's FMA probe, `iters` rounds on each of `threads` threads. */
typedef struct probe_run {
    bench_fma_probe_fn *probe;
    int threads;
    int64_t iters;
    double flops; /* of the last run, all threads together */
} probe_run;

/* Iterations for one probe call to take about 30 ms on one thread. */
int64_t calibrate_probe(bench_fma_probe_fn *probe);
/* A run_fn: every thread of the team probes at once. */
bool run_probe(void *ctx);
/* The AMX-BF16 probe on `threads` threads at once (`reps` runs), as op
 * peak_amx_bf16; gflops is 0 where AMX is unavailable (always off x86-64). */
row measure_amx_peak(int threads, int reps);
/* The same with the operand tiles loaded from L1 each round (op
 * peak_amx_bf16_fed, bench_amx_fed_probe): the ceiling of the tile GEMM's
 * 2 x 2 block with nothing to wait for beyond L1. */
row measure_amx_fed_peak(int threads, int reps);

/* ---- memcpy bandwidth ---- */

/* Writes each page from the thread that will use it (NUMA first touch). */
void first_touch(char *buf, size_t bytes, int threads);

typedef struct copy_run {
    char *dst;
    const char *src;
    size_t bytes;
    int threads;
} copy_run;

bool run_copy(void *ctx);
/* memcpy of `bytes` split over `threads`; GB/s counts the read and the write. */
row measure_copy(char *dst, const char *src, size_t bytes, int threads, int reps);

/* ---- plan: backends, thread counts and their FMA peaks ---- */

/* Backends from --backend, threads from --threads, then the FMA peak of
 * every backend at every thread count. */
bool make_plan(const options *o, plan *p);
int most_threads(const plan *p);
void free_plan(plan *p);

/* ---- backends ---- */

/* Forces `op` onto the backend named `name` (NULL: back to auto-selection). */
bool force_backend(mla_op op, const char *name);
/* False, after saying so, if the last op ran on another backend than b. */
bool ran_on(const mla_backend_desc *b, const char *op);

/* ---- commands: exit status 0 on success ---- */

int cmd_peak(const options *o, const plan *p);     /* bench_convert.c */
int cmd_convert(const options *o, const plan *p);  /* bench_convert.c */
int cmd_metadata(const options *o, const plan *p); /* bench_metadata.c */
int cmd_cache_write(const options *o, const plan *p);  /* bench_cache.c */
int cmd_cache_gather(const options *o, const plan *p); /* bench_cache.c */
int cmd_decode(const options *o, const plan *p);   /* bench_decode.c */
int cmd_attn(const options *o, const plan *p);     /* bench_attn.c */
int cmd_gemm(const options *o, const plan *p);     /* bench_gemm.c */
int cmd_merge(const options *o, const plan *p);    /* bench_merge.c */
int cmd_prefill(const options *o, const plan *p);  /* bench_prefill.c */

#endif
