/*
 * mla_bench: libmla's throughput next to what this machine can do.
 *
 *   mla_bench peak    [--threads N] [--backend NAME] [--reps R] [--json]
 *   mla_bench convert [--threads N] [--backend NAME] [--reps R] [--n N] [--json]
 *   mla_bench metadata [--threads N] [--reps R] [--json]
 *   mla_bench cache-write|cache-gather [--threads N] [--backend NAME] [--reps R]
 *             [--tokens T] [--block-size B] [--cache-dtype D] [--src-dtype D] [--json]
 *
 * `peak` measures two ceilings: the FMA throughput of each backend (its
 * fma_probe on every thread at once) and memcpy bandwidth. `convert` times
 * mla_convert and mla_exp_f32 on each backend; these ops are memory bound, so
 * each is printed next to a memcpy that moves the same number of bytes.
 *
 * Only the public API, libc and OpenMP: the bench measures what a caller gets.
 */
#include <mla.h>

#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_REPS 7
#define MAX_REPS 1000
#define MAX_THREADS 1024
#define DEFAULT_N ((int64_t)16 << 20)
#define MAX_N ((int64_t)1 << 40)
#define DEFAULT_TOKENS 16384
#define DEFAULT_BLOCK_SIZE 64
#define MAX_TOKENS ((int64_t)1 << 24)
/* Far beyond any last-level cache, so copy measures DRAM bandwidth. */
#define COPY_BYTES ((size_t)256 << 20)
/* One probe run: long enough to hide fork/join and timer resolution, short
 * enough for reps x backends x thread counts to finish in seconds. */
#define PROBE_SECONDS 0.03

static const char usage_text[] =
    "usage: mla_bench <command> [options]\n"
    "\n"
    "commands:\n"
    "  peak      FMA throughput of each backend's probe, run on all threads at once,\n"
    "            and memcpy bandwidth (256 MiB buffers)\n"
    "  convert   mla_convert (bf16, f16, fp8_e4m3, fp8_e5m2 <-> f32) and\n"
    "            mla_exp_f32, with the FMA peak and a memcpy of the same bytes\n"
    "  metadata  the per-step metadata builders for 256 requests with contexts up\n"
    "            to 128K tokens (block size 64): batch metadata, reorder + split,\n"
    "            chunk plan, decode schedule (parts = --threads), and all of them\n"
    "  cache-write   mla_concat_and_cache of --tokens tokens (576 = 512 + 64 wide)\n"
    "            into random blocks of a paged cache, per cache/source dtype pair\n"
    "  cache-gather  mla_gather_cache (dequantizing) and mla_cp_gather_cache of\n"
    "            --tokens rows of 16 requests' random blocks into a workspace\n"
    "\n"
    "options:\n"
    "  --threads N     only N threads (default: 1 and mla_default_threads())\n"
    "  --backend NAME  only this backend (default: every one this CPU can run)\n"
    "  --reps R        timed runs per case; the median is reported (default 7)\n"
    "  --n N           elements per convert case (default 16777216)\n"
    "  --tokens T      rows per cache case (default 16384)\n"
    "  --block-size B  cache block size of the cache cases (default 64)\n"
    "  --cache-dtype D only cache cases of this cache dtype (f32 bf16 f16 fp8_e4m3 fp8_e5m2)\n"
    "  --src-dtype D   only cache cases whose other side (source or workspace) is D\n"
    "  --json          one JSON object per case and line on stdout, nothing else\n"
    "  --help          this text\n"
    "\n"
    "GB/s counts bytes read + bytes written: a memcpy of B bytes moves 2B.\n"
    "Conversions and exp report 0 GFLOP/s (they are memory bound, not FLOPs);\n"
    "compare their GB/s with copy GB/s, a memcpy moving the same bytes on the same\n"
    "threads in the same run (%copy = 100 * GB/s / copy GB/s).\n"
    "%peak = 100 * GFLOP/s / peak, where peak is the same backend's FMA probe at\n"
    "the same thread count, measured first in the same process.\n"
    "JSON keys: op backend threads n median_us gflops gbps peak_gflops pct_peak\n"
    "copy_gbps pct_copy; n (elements; rows for cache ops; bytes for copy),\n"
    "copy_gbps and pct_copy only where they apply.\n";

typedef struct options {
    const char *backend; /* NULL: every backend that can run here */
    int threads;         /* 0: 1 and mla_default_threads() */
    int reps;
    int64_t n;
    int64_t tokens, block_size;   /* cache cases */
    int cache_dtype, other_dtype; /* cache cases; -1: all */
    bool json;
} options;

/* One line of output. n and copy_gbps are 0 where they do not apply. */
typedef struct row {
    const char *op, *backend;
    int threads;
    int64_t n;
    double median_us, gflops, gbps, peak_gflops, copy_gbps;
} row;

/* What a command covers, with the FMA peak of every (backend, threads) pair. */
typedef struct plan {
    const mla_backend_desc **backends;
    int nbackends;
    int threads[2];
    int nthreads;
    row *peaks; /* [backend * nthreads + thread index] */
} plan;

/* ---- helpers --------------------------------------------------------------- */

/* True if st is MLA_OK; otherwise prints the library's message. */
static bool check(mla_status st, const char *what)
{
    if (st != MLA_OK)
        fprintf(stderr, "mla_bench: %s: %s: %s\n", what, mla_status_str(st), mla_last_error());
    return st == MLA_OK;
}

/* 64-byte aligned, as servers' tensors are: rows start on cache lines. */
static void *alloc(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p)
        fprintf(stderr, "mla_bench: out of memory allocating %zu bytes\n", bytes);
    return p;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v. The median resists outliers (interrupts, other processes). */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, compare_doubles);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Billions of units per second (GFLOP/s, GB/s). */
static double giga_per_s(double units, double seconds)
{
    return seconds > 0 ? units / seconds / 1e9 : 0;
}

/* One run of the code being timed; false (after printing why) if it failed. */
typedef bool (*run_fn)(void *ctx);

/* Median wall time of `reps` runs. An untimed first run takes page faults,
 * lazy initialization and clock ramp-up out of the numbers. */
static bool time_region(run_fn run, void *ctx, int reps, double *median_s)
{
    double t[MAX_REPS];
    if (!run(ctx))
        return false;
    for (int i = 0; i < reps; i++) {
        double start = omp_get_wtime();
        if (!run(ctx))
            return false;
        t[i] = omp_get_wtime() - start;
    }
    *median_s = median(t, reps);
    return true;
}

/* Median times of `run` and of `copy`, timed alternately rep by rep, so
 * that a noisy machine's slow spells hit both alike. */
static bool time_interleaved(run_fn run, void *ctx, run_fn copy, void *copy_ctx, int reps,
                             double *median_s, double *copy_median_s)
{
    double t[MAX_REPS], c[MAX_REPS];
    if (!run(ctx) || !copy(copy_ctx))
        return false;
    for (int i = 0; i < reps; i++) {
        double start = omp_get_wtime();
        if (!copy(copy_ctx))
            return false;
        double mid = omp_get_wtime();
        if (!run(ctx))
            return false;
        t[i] = omp_get_wtime() - mid;
        c[i] = mid - start;
    }
    *median_s = median(t, reps);
    *copy_median_s = median(c, reps);
    return true;
}

/* ---- output ---------------------------------------------------------------- */

static void print_header(bool json)
{
    if (!json)
        printf("%-26s %-12s %7s %10s %11s %9s %8s %9s %6s %9s %6s\n", "op", "backend", "threads",
               "n", "median_us", "GFLOP/s", "GB/s", "peak", "%peak", "copy GB/s", "%copy");
}

static void print_row(const row *r, bool json)
{
    double pct_peak = r->peak_gflops > 0 ? 100 * r->gflops / r->peak_gflops : 0;
    if (json) {
        printf("{\"op\":\"%s\",\"backend\":\"%s\",\"threads\":%d", r->op, r->backend, r->threads);
        if (r->n > 0)
            printf(",\"n\":%lld", (long long)r->n);
        printf(",\"median_us\":%.3f,\"gflops\":%.3f,\"gbps\":%.3f,\"peak_gflops\":%.3f,"
               "\"pct_peak\":%.2f",
               r->median_us, r->gflops, r->gbps, r->peak_gflops, pct_peak);
        if (r->copy_gbps > 0)
            printf(",\"copy_gbps\":%.3f,\"pct_copy\":%.2f", r->copy_gbps, 100 * r->gbps / r->copy_gbps);
        printf("}\n");
        return;
    }
    char n[24] = "-", copy[24] = "-", pct_copy[24] = "-";
    if (r->n > 0)
        snprintf(n, sizeof n, "%lld", (long long)r->n);
    if (r->copy_gbps > 0) {
        snprintf(copy, sizeof copy, "%.2f", r->copy_gbps);
        snprintf(pct_copy, sizeof pct_copy, "%.1f", 100 * r->gbps / r->copy_gbps);
    }
    printf("%-26s %-12s %7d %10s %11.1f %9.2f %8.2f %9.2f %6.1f %9s %6s\n", r->op, r->backend,
           r->threads, n, r->median_us, r->gflops, r->gbps, r->peak_gflops, pct_peak, copy, pct_copy);
}

/* ---- FMA peak ---------------------------------------------------------------- */

typedef struct probe_run {
    mla_fma_probe_fn probe;
    int threads;
    int64_t iters;
    double flops; /* of the last run, all threads together */
} probe_run;

/* Every thread probes at once: the peak of the whole team, not one core x T
 * (shared cores, power limits and clock drops under load all show up). */
static bool run_probe(void *ctx)
{
    probe_run *p = ctx;
    double flops = 0;
#pragma omp parallel num_threads(p->threads) reduction(+ : flops)
    {
        float sink; /* the probe is an opaque library call: it cannot be elided */
        flops += p->probe(p->iters, &sink);
    }
    p->flops = flops; /* summed over the threads the runtime actually gave */
    return true;
}

/* Iterations for one probe call to take about PROBE_SECONDS on one thread:
 * double until a call is long enough to time well, then scale. */
static int64_t calibrate_probe(mla_fma_probe_fn probe)
{
    float sink;
    int64_t iters = 1024;
    for (; iters < ((int64_t)1 << 40); iters *= 2) {
        double start = omp_get_wtime();
        probe(iters, &sink);
        double seconds = omp_get_wtime() - start;
        if (seconds >= PROBE_SECONDS / 8)
            return (int64_t)((double)iters * PROBE_SECONDS / seconds) + 1;
    }
    return iters;
}

/* Calibrates each backend's probe once, then times it at every thread count. */
static void measure_peaks(plan *p, int reps)
{
    for (int b = 0; b < p->nbackends; b++) {
        probe_run run = {.probe = p->backends[b]->kernels.fma_probe};
        run.iters = calibrate_probe(run.probe);
        for (int t = 0; t < p->nthreads; t++) {
            double s;
            run.threads = p->threads[t];
            time_region(run_probe, &run, reps, &s); /* run_probe cannot fail */
            double gflops = giga_per_s(run.flops, s);
            p->peaks[b * p->nthreads + t] = (row){
                .op = "peak_fma", .backend = p->backends[b]->name, .threads = run.threads,
                .median_us = s * 1e6, .gflops = gflops, .peak_gflops = gflops};
        }
    }
}

/* ---- memcpy bandwidth -------------------------------------------------------- */

/* Start of contiguous slice t of `parts` over `bytes`; slice t ends where t+1 starts. */
static size_t slice_start(size_t bytes, int parts, int t)
{
    return bytes * (size_t)t / (size_t)parts;
}

/* Writes each page from the thread that will copy it, so that on NUMA
 * machines pages land near their thread (Linux places them on first touch). */
static void first_touch(char *buf, size_t bytes, int threads)
{
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < threads; t++) {
        size_t begin = slice_start(bytes, threads, t), end = slice_start(bytes, threads, t + 1);
        memset(buf + begin, 0, end - begin);
    }
}

typedef struct copy_run {
    char *dst;
    const char *src;
    size_t bytes;
    int threads;
} copy_run;

static bool run_copy(void *ctx)
{
    const copy_run *c = ctx;
#pragma omp parallel for num_threads(c->threads) schedule(static)
    for (int t = 0; t < c->threads; t++) {
        size_t begin = slice_start(c->bytes, c->threads, t);
        size_t end = slice_start(c->bytes, c->threads, t + 1);
        memcpy(c->dst + begin, c->src + begin, end - begin);
    }
    return true;
}

/* memcpy of `bytes` split over `threads`; GB/s counts the read and the write. */
static row measure_copy(char *dst, const char *src, size_t bytes, int threads, int reps)
{
    copy_run run = {dst, src, bytes, threads};
    double s;
    time_region(run_copy, &run, reps, &s); /* run_copy cannot fail */
    return (row){.op = "copy", .backend = "libc", .threads = threads, .n = (int64_t)bytes,
                 .median_us = s * 1e6, .gbps = giga_per_s(2.0 * (double)bytes, s)};
}

/* ---- plan: backends and thread counts ---------------------------------------- */

/* Why backend `name` cannot run on this CPU, joined into why ("" if it can).
 * False (message printed, listing valid names) if no backend has that name. */
static bool why_not(const char *name, char *why, size_t size)
{
    mla_reasons r;
    if (!check(mla_backend_validate(name, MLA_OP_CONVERT, NULL, &r), "mla_backend_validate"))
        return false;
    size_t len = 0;
    why[0] = '\0';
    for (int i = 0; i < r.count && len < size; i++)
        len += (size_t)snprintf(why + len, size - len, "%s%s", i ? "; " : "", r.text[i]);
    return true;
}

/* The backend named by --backend (an error if it cannot run here), else every
 * backend this CPU can run, in priority order. */
static bool select_backends(const char *only, plan *p)
{
    char why[MLA_MAX_REASONS * MLA_REASON_LEN];
    int count = mla_backend_count();
    p->backends = alloc((size_t)count * sizeof *p->backends);
    if (!p->backends)
        return false;
    if (only) {
        if (!why_not(only, why, sizeof why))
            return false;
        if (why[0]) {
            fprintf(stderr, "mla_bench: backend '%s' cannot run on this CPU: %s\n", only, why);
            return false;
        }
        p->backends[p->nbackends++] = mla_backend_find(only);
        return true;
    }
    for (int i = 0; i < count; i++) {
        const mla_backend_desc *b = mla_backend_at(i);
        if (!why_not(b->name, why, sizeof why))
            return false;
        if (why[0])
            fprintf(stderr, "mla_bench: skipping %s: %s\n", b->name, why);
        else
            p->backends[p->nbackends++] = b;
    }
    return true;
}

/* Chooses backends and thread counts, then measures their FMA peaks: every
 * command reports against them, so they come first. */
static bool make_plan(const options *o, plan *p)
{
    if (!select_backends(o->backend, p))
        return false;
    int max = mla_default_threads();
    if (o->threads > 0)
        p->threads[p->nthreads++] = o->threads;
    else {
        p->threads[p->nthreads++] = 1;
        if (max > 1)
            p->threads[p->nthreads++] = max;
    }
    p->peaks = alloc((size_t)(p->nbackends * p->nthreads) * sizeof *p->peaks);
    if (!p->peaks)
        return false;
    measure_peaks(p, o->reps);
    return true;
}

static int most_threads(const plan *p)
{
    return p->threads[p->nthreads - 1];
}

static void free_plan(plan *p)
{
    free(p->backends);
    free(p->peaks);
}

/* ---- commands ------------------------------------------------------------------ */

static int cmd_peak(const options *o, const plan *p)
{
    print_header(o->json);
    for (int i = 0; i < p->nbackends * p->nthreads; i++)
        print_row(&p->peaks[i], o->json);

    int status = 1;
    char *src = alloc(COPY_BYTES), *dst = alloc(COPY_BYTES);
    if (src && dst) {
        first_touch(src, COPY_BYTES, most_threads(p));
        first_touch(dst, COPY_BYTES, most_threads(p));
        for (int t = 0; t < p->nthreads; t++) {
            row r = measure_copy(dst, src, COPY_BYTES, p->threads[t], o->reps);
            print_row(&r, o->json);
        }
        status = 0;
    }
    free(src);
    free(dst);
    return status;
}

/* An element-wise op: a conversion src -> dst, or exp (f32 -> f32). */
typedef struct ew_case {
    const char *op;
    mla_dtype src, dst;
    bool exp;
} ew_case;

static const ew_case ew_cases[] = {
    {"convert_bf16_f32", MLA_DTYPE_BF16, MLA_DTYPE_F32, false},
    {"convert_f32_bf16", MLA_DTYPE_F32, MLA_DTYPE_BF16, false},
    {"convert_f16_f32", MLA_DTYPE_F16, MLA_DTYPE_F32, false},
    {"convert_f32_f16", MLA_DTYPE_F32, MLA_DTYPE_F16, false},
    {"convert_e4m3_f32", MLA_DTYPE_FP8_E4M3, MLA_DTYPE_F32, false},
    {"convert_f32_e4m3", MLA_DTYPE_F32, MLA_DTYPE_FP8_E4M3, false},
    {"convert_e5m2_f32", MLA_DTYPE_FP8_E5M2, MLA_DTYPE_F32, false},
    {"convert_f32_e5m2", MLA_DTYPE_F32, MLA_DTYPE_FP8_E5M2, false},
    {"exp_f32", MLA_DTYPE_F32, MLA_DTYPE_F32, true},
};

typedef struct ew_run {
    const ew_case *c;
    void *dst;
    const void *src;
    int64_t n;
    int threads;
} ew_run;

static bool run_ew(void *ctx)
{
    const ew_run *r = ctx;
    mla_status st = r->c->exp ? mla_exp_f32(r->dst, r->src, r->n, r->threads)
                              : mla_convert(r->c->dst, r->dst, r->c->src, r->src, r->n, r->threads);
    return check(st, r->c->op);
}

/* Forces backend b for MLA_OP_CONVERT. */
static bool force_convert(const mla_backend_desc *b)
{
    return check(mla_force_backend(MLA_OP_CONVERT, b->name), "mla_force_backend");
}

/* False, after saying so, if the last op ran on another backend than b. */
static bool ran_on(const mla_backend_desc *b, const char *op)
{
    if (strcmp(mla_last_backend(), b->name) != 0) {
        fprintf(stderr, "mla_bench: %s ran on backend '%s', not the forced '%s'\n", op,
                mla_last_backend(), b->name);
        return false;
    }
    return true;
}

/* Inputs of every source dtype, from one f32 ramp over [-8, 8): finite under
 * exp and in f16 range, so no case runs a special-value path. */
static bool make_inputs(float *f32, uint16_t *bf16, uint16_t *f16, uint8_t *e4m3, uint8_t *e5m2,
                        int64_t n, int threads)
{
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; i++)
        f32[i] = (float)(i % 2048 - 1024) / 128.0f;
    return check(mla_convert(MLA_DTYPE_BF16, bf16, MLA_DTYPE_F32, f32, n, threads), "mla_convert") &&
           check(mla_convert(MLA_DTYPE_F16, f16, MLA_DTYPE_F32, f32, n, threads), "mla_convert") &&
           check(mla_convert(MLA_DTYPE_FP8_E4M3, e4m3, MLA_DTYPE_F32, f32, n, threads), "mla_convert") &&
           check(mla_convert(MLA_DTYPE_FP8_E5M2, e5m2, MLA_DTYPE_F32, f32, n, threads), "mla_convert");
}

static int cmd_convert(const options *o, const plan *p)
{
    int64_t n = o->n;
    size_t max_bytes = (size_t)n * sizeof(float);
    float *f32 = alloc(max_bytes), *out = alloc(max_bytes);
    uint16_t *bf16 = alloc(max_bytes / 2), *f16 = alloc(max_bytes / 2);
    uint8_t *e4m3 = alloc(max_bytes / 4), *e5m2 = alloc(max_bytes / 4);
    const void *inputs[MLA_DTYPE_COUNT] = { /* source of each case, by its dtype */
        [MLA_DTYPE_F32] = f32, [MLA_DTYPE_BF16] = bf16, [MLA_DTYPE_F16] = f16,
        [MLA_DTYPE_FP8_E4M3] = e4m3, [MLA_DTYPE_FP8_E5M2] = e5m2};
    bool ok = f32 && out && bf16 && f16 && e4m3 && e5m2 &&
              make_inputs(f32, bf16, f16, e4m3, e5m2, n, most_threads(p));
    if (ok) {
        first_touch((char *)out, max_bytes, most_threads(p));
        print_header(o->json);
    }

    /* Backends innermost: a case's backends print side by side, and its
     * memcpy reference is measured once per thread count. */
    for (int t = 0; ok && t < p->nthreads; t++) {
        for (size_t c = 0; ok && c < sizeof ew_cases / sizeof ew_cases[0]; c++) {
            const ew_case *ec = &ew_cases[c];
            /* The memcpy reference moves as many bytes (read + written) as
             * the op does; it does not depend on the backend. */
            size_t traffic = (size_t)n * (size_t)(mla_dtype_size(ec->src) + mla_dtype_size(ec->dst));
            row copy = measure_copy((char *)out, (const char *)f32, traffic / 2, p->threads[t],
                                    o->reps);
            ew_run run = {ec, out, inputs[ec->src], n, p->threads[t]};
            for (int b = 0; ok && b < p->nbackends; b++) {
                double s;
                ok = force_convert(p->backends[b]) && time_region(run_ew, &run, o->reps, &s) &&
                     ran_on(p->backends[b], ec->op);
                if (!ok)
                    break;
                row r = {.op = ec->op, .backend = p->backends[b]->name, .threads = run.threads,
                         .n = n, .median_us = s * 1e6, .gbps = giga_per_s((double)traffic, s),
                         .peak_gflops = p->peaks[b * p->nthreads + t].gflops,
                         .copy_gbps = copy.gbps};
                print_row(&r, o->json);
            }
        }
    }
    ok = check(mla_force_backend(MLA_OP_CONVERT, NULL), "mla_force_backend") && ok;
    free(f32);
    free(out);
    free(bf16);
    free(f16);
    free(e4m3);
    free(e5m2);
    return ok ? 0 : 1;
}

/* ---- metadata ------------------------------------------------------------------- */

/* A decode-heavy step of a large server: 256 requests with contexts up to
 * 128K tokens in 64-token blocks, 248 decoding one token each and 8
 * prefilling 512 tokens on top of cached context (so chunking plans too). */
enum { META_REQS = 256, META_PREFILLS = 8, META_PREFILL_TOKENS = 512, META_BLOCK = 64,
       META_MAX_CTX = 128 * 1024, META_MAX_BLOCKS = META_MAX_CTX / META_BLOCK + 8,
       META_INNER = 20 /* builds per timed run: each takes microseconds */ };

typedef struct meta_step {
    mla_request reqs[META_REQS];
    int32_t *block_ids; /* every request's ids, back to back */
    mla_block_layout layout;
    mla_batch_metadata md;
    int32_t new_order[META_REQS], context_lens[META_PREFILLS], qsl_p[META_PREFILLS + 1];
    int64_t workspace_tokens;
    mla_sched_part *parts;
    int64_t parts_capacity;
    int32_t split_prefix[META_REQS + 1];
} meta_step;

static uint32_t meta_random(uint32_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 17;
    *state ^= *state << 5;
    return *state;
}

static bool meta_step_init(meta_step *m, int threads)
{
    uint32_t rng = 12345;
    int64_t tokens = 0, ids = 0;
    m->block_ids = alloc((size_t)META_REQS * META_MAX_BLOCKS * sizeof *m->block_ids);
    m->parts_capacity = threads;
    m->parts = alloc((size_t)threads * sizeof *m->parts);
    m->md.query_start_loc = alloc((META_REQS + 1) * sizeof(int32_t));
    m->md.seq_lens = alloc(META_REQS * sizeof(int32_t));
    m->md.positions = alloc((size_t)META_REQS * META_PREFILL_TOKENS * sizeof(int64_t));
    m->md.slot_mapping = alloc((size_t)META_REQS * META_PREFILL_TOKENS * sizeof(int64_t));
    m->md.block_table = alloc((size_t)META_REQS * META_MAX_BLOCKS * sizeof(int32_t));
    if (!m->block_ids || !m->parts || !m->md.query_start_loc || !m->md.seq_lens ||
        !m->md.positions || !m->md.slot_mapping || !m->md.block_table)
        return false;
    for (int r = 0; r < META_REQS; r++) {
        bool prefill = r >= META_REQS - META_PREFILLS; /* last: the reorder has work */
        int64_t scheduled = prefill ? META_PREFILL_TOKENS : 1;
        int64_t computed = 1 + meta_random(&rng) % (META_MAX_CTX - scheduled);
        int64_t nblk = (computed + scheduled + META_BLOCK - 1) / META_BLOCK;
        mla_request *q = &m->reqs[r];
        *q = (mla_request){.num_computed_tokens = computed, .num_scheduled_tokens = scheduled,
                           .num_prompt_tokens = prefill ? computed + scheduled : computed,
                           .block_ids = m->block_ids + ids, .num_block_ids = nblk};
        for (int64_t b = 0; b < nblk; b++)
            m->block_ids[ids + b] = (int32_t)(ids + b);
        ids += nblk;
        tokens += scheduled;
        if (prefill) {
            int p = r - (META_REQS - META_PREFILLS);
            m->context_lens[p] = (int32_t)computed;
            m->qsl_p[p + 1] = (int32_t)(m->qsl_p[p] + scheduled);
        }
    }
    m->layout = (mla_block_layout){.manager_block_size = META_BLOCK, .kernel_block_size = META_BLOCK,
                                   .max_blocks_per_req = META_MAX_BLOCKS, .cp_world_size = 1,
                                   .cp_interleave = 1};
    m->md.slot_mapping_len = tokens;
    return check(mla_chunk_workspace_tokens(META_MAX_CTX, META_REQS, META_BLOCK, 0,
                                            &m->workspace_tokens), "mla_chunk_workspace_tokens");
}

static void meta_step_free(meta_step *m)
{
    free(m->block_ids);
    free(m->parts);
    free(m->md.query_start_loc);
    free(m->md.seq_lens);
    free(m->md.positions);
    free(m->md.slot_mapping);
    free(m->md.block_table);
}

static bool meta_batch(meta_step *m)
{
    return check(mla_build_batch_metadata(m->reqs, META_REQS, &m->layout, &m->md),
                 "mla_build_batch_metadata");
}

static bool meta_reorder_split(meta_step *m)
{
    mla_batch_split split;
    return check(mla_reorder_batch(m->reqs, META_REQS, 1, m->new_order, NULL), "mla_reorder_batch") &&
           check(mla_split_batch(m->md.query_start_loc, META_REQS, 1, true, &split), "mla_split_batch");
}

static bool meta_chunk_plan(meta_step *m)
{
    mla_chunk_plan *plan;
    if (!check(mla_chunk_plan_create(m->context_lens, m->qsl_p, META_PREFILLS, m->workspace_tokens,
                                     META_BLOCK, 0, MLA_DTYPE_BF16, &plan),
               "mla_chunk_plan_create"))
        return false;
    mla_chunk_plan_destroy(plan);
    return true;
}

static bool meta_decode_sched(meta_step *m)
{
    mla_decode_sched_params params = {.num_parts = m->parts_capacity, .overhead = -1};
    int64_t parts;
    return check(mla_build_decode_sched(m->md.seq_lens, META_REQS - META_PREFILLS, &params, m->parts,
                                        m->parts_capacity, &parts, m->split_prefix),
                 "mla_build_decode_sched");
}

static bool meta_all(meta_step *m)
{
    return meta_batch(m) && meta_reorder_split(m) && meta_chunk_plan(m) && meta_decode_sched(m);
}

typedef struct meta_case {
    const char *op;
    bool (*build)(meta_step *m);
} meta_case;

static const meta_case meta_cases[] = {
    {"metadata_batch", meta_batch},           {"metadata_reorder_split", meta_reorder_split},
    {"metadata_chunk_plan", meta_chunk_plan}, {"metadata_decode_sched", meta_decode_sched},
    {"metadata_all", meta_all},
};

typedef struct meta_run {
    const meta_case *c;
    meta_step *m;
} meta_run;

static bool run_meta(void *ctx)
{
    const meta_run *r = ctx;
    for (int i = 0; i < META_INNER; i++)
        if (!r->c->build(r->m))
            return false;
    return true;
}

/* Metadata builders are single-threaded pure C: one row per builder, with
 * the decode schedule cut into as many parts as the thread count. */
static int cmd_metadata(const options *o, const plan *p)
{
    (void)p;
    int threads = o->threads > 0 ? o->threads : mla_default_threads();
    meta_step m = {0};
    bool ok = meta_step_init(&m, threads) && meta_all(&m); /* sizes the outputs once */
    if (ok)
        print_header(o->json);
    for (size_t c = 0; ok && c < sizeof meta_cases / sizeof meta_cases[0]; c++) {
        meta_run run = {&meta_cases[c], &m};
        double s;
        ok = time_region(run_meta, &run, o->reps, &s);
        row r = {.op = meta_cases[c].op, .backend = "ref", .threads = threads, .n = META_REQS,
                 .median_us = s * 1e6 / META_INNER};
        if (ok)
            print_row(&r, o->json);
    }
    meta_step_free(&m);
    return ok ? 0 : 1;
}

/* ---- cache ops ------------------------------------------------------------------ */

enum { CACHE_L = 512, CACHE_R = 64, CACHE_WIDTH = CACHE_L + CACHE_R, CACHE_REQS = 16 };

typedef enum cache_kind { CACHE_WRITE, CACHE_GATHER, CACHE_CP_GATHER } cache_kind;

/* One case: the cache dtype and the other side's (source or workspace). */
typedef struct cache_case {
    cache_kind kind;
    mla_dtype cache, other;
} cache_case;

static const cache_case write_cases[] = {
    {CACHE_WRITE, MLA_DTYPE_BF16, MLA_DTYPE_BF16},     {CACHE_WRITE, MLA_DTYPE_BF16, MLA_DTYPE_F32},
    {CACHE_WRITE, MLA_DTYPE_F32, MLA_DTYPE_F32},       {CACHE_WRITE, MLA_DTYPE_F16, MLA_DTYPE_F16},
    {CACHE_WRITE, MLA_DTYPE_FP8_E4M3, MLA_DTYPE_BF16}, {CACHE_WRITE, MLA_DTYPE_FP8_E5M2, MLA_DTYPE_F32},
};
static const cache_case gather_cases[] = {
    {CACHE_GATHER, MLA_DTYPE_BF16, MLA_DTYPE_BF16},        {CACHE_GATHER, MLA_DTYPE_BF16, MLA_DTYPE_F32},
    {CACHE_GATHER, MLA_DTYPE_F32, MLA_DTYPE_F32},          {CACHE_GATHER, MLA_DTYPE_FP8_E4M3, MLA_DTYPE_BF16},
    {CACHE_GATHER, MLA_DTYPE_FP8_E5M2, MLA_DTYPE_F32},     {CACHE_CP_GATHER, MLA_DTYPE_BF16, MLA_DTYPE_BF16},
    {CACHE_CP_GATHER, MLA_DTYPE_FP8_E4M3, MLA_DTYPE_FP8_E4M3},
};

/* Buffers of a cache case. Tokens fill random whole blocks, as a prefill's
 * or a chunk's do; the cache has twice the slots the tokens need. */
typedef struct cache_bench {
    const cache_case *c;
    int64_t tokens, block_size, num_blocks;
    mla_kv_cache cache;
    void *rows;       /* [tokens, 576] source (write) or workspace (gathers) */
    int64_t *slots;   /* [tokens] */
    int32_t *block_table, cu_seq_lens[CACHE_REQS + 1], *token_to_seq;
    mla_gather_spec spec;
    int threads;
} cache_bench;

static bool cache_bench_init(cache_bench *cb, const cache_case *c, int64_t tokens, int64_t bs,
                             int threads)
{
    uint32_t rng = 777;
    int64_t used_blocks = (tokens + bs - 1) / bs, cols = used_blocks / CACHE_REQS + 2;
    *cb = (cache_bench){.c = c, .tokens = tokens, .block_size = bs, .num_blocks = 2 * used_blocks,
                        .threads = threads};
    size_t cache_bytes = (size_t)(cb->num_blocks * bs * CACHE_WIDTH * mla_dtype_size(c->cache));
    size_t row_bytes = (size_t)(tokens * CACHE_WIDTH * mla_dtype_size(c->other));
    int64_t *perm = alloc((size_t)cb->num_blocks * sizeof *perm);
    cb->cache = (mla_kv_cache){.data = alloc(cache_bytes), .dtype = c->cache,
                               .num_blocks = cb->num_blocks, .block_size = bs,
                               .width = CACHE_WIDTH, .scale = 0.5f};
    cb->rows = alloc(row_bytes);
    cb->slots = alloc((size_t)tokens * sizeof *cb->slots);
    cb->block_table = alloc((size_t)(CACHE_REQS * cols) * sizeof *cb->block_table);
    cb->token_to_seq = alloc((size_t)tokens * sizeof *cb->token_to_seq);
    if (!perm || !cb->cache.data || !cb->rows || !cb->slots || !cb->block_table || !cb->token_to_seq) {
        free(perm);
        return false;
    }
    /* small finite values in every dtype; touched by the threads that use them */
    first_touch(cb->cache.data, cache_bytes, threads);
    first_touch(cb->rows, row_bytes, threads);
    memset(cb->cache.data, 0x3c, cache_bytes);
    memset(cb->rows, 0x3c, row_bytes);
    for (int64_t i = 0; i < cb->num_blocks; i++)
        perm[i] = i;
    for (int64_t i = cb->num_blocks - 1; i > 0; i--) {
        int64_t j = meta_random(&rng) % (uint32_t)(i + 1), tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
    for (int64_t t = 0; t < tokens; t++)
        cb->slots[t] = perm[t / bs] * bs + t % bs;
    /* CACHE_REQS equal requests; request r owns blocks r*cols/... of perm */
    for (int r = 0; r <= CACHE_REQS; r++)
        cb->cu_seq_lens[r] = (int32_t)(tokens * r / CACHE_REQS);
    for (int r = 0; r < CACHE_REQS; r++)
        for (int64_t k = 0; k < cols; k++)
            cb->block_table[r * cols + k] = (int32_t)perm[(r * cols + k) % cb->num_blocks];
    for (int r = 0; r < CACHE_REQS; r++)
        for (int64_t t = cb->cu_seq_lens[r]; t < cb->cu_seq_lens[r + 1]; t++)
            cb->token_to_seq[t] = r;
    cb->spec = (mla_gather_spec){.block_table = cb->block_table, .block_table_cols = cols,
                                 .num_reqs = CACHE_REQS, .cu_seq_lens = cb->cu_seq_lens};
    free(perm);
    return true;
}

static void cache_bench_free(cache_bench *cb)
{
    free(cb->cache.data);
    free(cb->rows);
    free(cb->slots);
    free(cb->block_table);
    free(cb->token_to_seq);
}

static bool run_cache(void *ctx)
{
    const cache_bench *cb = ctx;
    switch (cb->c->kind) {
    case CACHE_WRITE: {
        const char *src = cb->rows;
        return check(mla_concat_and_cache(&cb->cache, src, CACHE_WIDTH,
                                          src + CACHE_L * mla_dtype_size(cb->c->other), CACHE_WIDTH,
                                          cb->c->other, CACHE_L, CACHE_R, cb->slots, cb->tokens,
                                          cb->threads), "mla_concat_and_cache");
    }
    case CACHE_GATHER:
        return check(mla_gather_cache(&cb->cache, &cb->spec, cb->token_to_seq, cb->tokens, cb->rows,
                                      cb->c->other, CACHE_WIDTH, cb->threads), "mla_gather_cache");
    default:
        return check(mla_cp_gather_cache(&cb->cache, &cb->spec, cb->rows, CACHE_WIDTH, cb->threads),
                     "mla_cp_gather_cache");
    }
}

static bool cache_case_selected(const options *o, const cache_case *c)
{
    return (o->cache_dtype < 0 || o->cache_dtype == (int)c->cache) &&
           (o->other_dtype < 0 || o->other_dtype == (int)c->other);
}

/* Every selected case at every thread count on every backend, each timed
 * alternately with a memcpy of its traffic (bytes read + written) on as many
 * threads. */
static int run_cache_cases(const options *o, const plan *p, const cache_case *cases, int count)
{
    bool ok = true;
    print_header(o->json);
    for (int i = 0; ok && i < count; i++) {
        const cache_case *c = &cases[i];
        if (!cache_case_selected(o, c))
            continue;
        static const char *names[] = {"cache_write", "cache_gather", "cache_cp_gather"};
        char op[48];
        snprintf(op, sizeof op, "%s_%s_%s", names[c->kind],
                 mla_dtype_name(c->kind == CACHE_WRITE ? c->other : c->cache),
                 mla_dtype_name(c->kind == CACHE_WRITE ? c->cache : c->other));
        size_t traffic = (size_t)(o->tokens * CACHE_WIDTH *
                                  (mla_dtype_size(c->cache) + mla_dtype_size(c->other)));
        for (int t = 0; ok && t < p->nthreads; t++) {
            cache_bench cb;
            char *copy_src = alloc(traffic / 2), *copy_dst = alloc(traffic / 2);
            ok = copy_src && copy_dst &&
                 cache_bench_init(&cb, c, o->tokens, o->block_size, p->threads[t]);
            if (ok) {
                first_touch(copy_src, traffic / 2, p->threads[t]);
                first_touch(copy_dst, traffic / 2, p->threads[t]);
                copy_run copy = {copy_dst, copy_src, traffic / 2, p->threads[t]};
                for (int b = 0; ok && b < p->nbackends; b++) {
                    double s, copy_s;
                    ok = force_convert(p->backends[b]) &&
                         time_interleaved(run_cache, &cb, run_copy, &copy, o->reps, &s, &copy_s) &&
                         ran_on(p->backends[b], op);
                    row r = {.op = op, .backend = p->backends[b]->name, .threads = p->threads[t],
                             .n = o->tokens, .median_us = s * 1e6,
                             .gbps = giga_per_s((double)traffic, s),
                             .peak_gflops = p->peaks[b * p->nthreads + t].gflops,
                             .copy_gbps = giga_per_s((double)traffic, copy_s)};
                    if (ok)
                        print_row(&r, o->json);
                }
                cache_bench_free(&cb);
            }
            free(copy_src);
            free(copy_dst);
        }
    }
    ok = check(mla_force_backend(MLA_OP_CONVERT, NULL), "mla_force_backend") && ok;
    return ok ? 0 : 1;
}

static int cmd_cache_write(const options *o, const plan *p)
{
    return run_cache_cases(o, p, write_cases, (int)(sizeof write_cases / sizeof write_cases[0]));
}

static int cmd_cache_gather(const options *o, const plan *p)
{
    return run_cache_cases(o, p, gather_cases, (int)(sizeof gather_cases / sizeof gather_cases[0]));
}

static const struct command {
    const char *name;
    int (*run)(const options *o, const plan *p);
    bool per_backend; /* measures backends, so needs their FMA peaks first */
} commands[] = {
    {"peak", cmd_peak, true},
    {"convert", cmd_convert, true},
    {"metadata", cmd_metadata, false},
    {"cache-write", cmd_cache_write, true},
    {"cache-gather", cmd_cache_gather, true},
};

/* ---- arguments ------------------------------------------------------------------ */

/* Reads the value after flag argv[*i] as an integer in [min, max]. */
static bool int_arg(int argc, char **argv, int *i, long long min, long long max, long long *out)
{
    const char *flag = argv[*i];
    if (*i + 1 >= argc) {
        fprintf(stderr, "mla_bench: %s needs a value\n", flag);
        return false;
    }
    const char *text = argv[++*i];
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max) {
        fprintf(stderr, "mla_bench: %s %s: expected an integer in [%lld, %lld]\n", flag, text, min,
                max);
        return false;
    }
    *out = v;
    return true;
}

/* Reads the value after flag argv[*i] as a dtype name. */
static bool dtype_arg(int argc, char **argv, int *i, int *out)
{
    const char *flag = argv[*i];
    if (*i + 1 >= argc) {
        fprintf(stderr, "mla_bench: %s needs a value\n", flag);
        return false;
    }
    const char *text = argv[++*i];
    for (int d = 0; d < MLA_DTYPE_COUNT; d++) {
        if (strcmp(text, mla_dtype_name((mla_dtype)d)) == 0) {
            *out = d;
            return true;
        }
    }
    fprintf(stderr, "mla_bench: %s %s: expected f32, bf16, f16, fp8_e4m3 or fp8_e5m2\n", flag, text);
    return false;
}

/* Fills o from argv (flags may come before or after the command). Returns -1
 * to go on, else the exit status: 0 after --help, 2 after a usage error. */
static int parse_args(int argc, char **argv, options *o, const struct command **cmd)
{
    *o = (options){.reps = DEFAULT_REPS, .n = DEFAULT_N, .tokens = DEFAULT_TOKENS,
                   .block_size = DEFAULT_BLOCK_SIZE, .cache_dtype = -1, .other_dtype = -1};
    *cmd = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long long v;
        bool ok = true;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage_text, stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            o->json = true;
        } else if (strcmp(a, "--threads") == 0) {
            if ((ok = int_arg(argc, argv, &i, 1, MAX_THREADS, &v)))
                o->threads = (int)v;
        } else if (strcmp(a, "--reps") == 0) {
            if ((ok = int_arg(argc, argv, &i, 1, MAX_REPS, &v)))
                o->reps = (int)v;
        } else if (strcmp(a, "--n") == 0) {
            if ((ok = int_arg(argc, argv, &i, 1, MAX_N, &v)))
                o->n = v;
        } else if (strcmp(a, "--tokens") == 0) {
            if ((ok = int_arg(argc, argv, &i, 1, MAX_TOKENS, &v)))
                o->tokens = v;
        } else if (strcmp(a, "--block-size") == 0) {
            if ((ok = int_arg(argc, argv, &i, 1, MAX_TOKENS, &v)))
                o->block_size = v;
        } else if (strcmp(a, "--cache-dtype") == 0) {
            ok = dtype_arg(argc, argv, &i, &o->cache_dtype);
        } else if (strcmp(a, "--src-dtype") == 0) {
            ok = dtype_arg(argc, argv, &i, &o->other_dtype);
        } else if (strcmp(a, "--backend") == 0) {
            if ((ok = i + 1 < argc))
                o->backend = argv[++i];
            else
                fprintf(stderr, "mla_bench: --backend needs a value\n");
        } else if (a[0] != '-' && !*cmd) {
            for (size_t c = 0; c < sizeof commands / sizeof commands[0]; c++)
                if (strcmp(a, commands[c].name) == 0)
                    *cmd = &commands[c];
            if (!*cmd) {
                fprintf(stderr, "mla_bench: unknown command '%s'\n", a);
                ok = false;
            }
        } else {
            fprintf(stderr, "mla_bench: unexpected argument '%s'\n", a);
            ok = false;
        }
        if (!ok) {
            fputs(usage_text, stderr);
            return 2;
        }
    }
    if (!*cmd) {
        fprintf(stderr, "mla_bench: no command given\n");
        fputs(usage_text, stderr);
        return 2;
    }
    return -1;
}

int main(int argc, char **argv)
{
    options o;
    const struct command *cmd;
    int status = parse_args(argc, argv, &o, &cmd);
    if (status >= 0)
        return status;
    if (!check(mla_init(), "mla_init"))
        return 1;
    plan p = {0};
    status = !cmd->per_backend || make_plan(&o, &p) ? cmd->run(&o, &p) : 1;
    free_plan(&p);
    return status;
}
