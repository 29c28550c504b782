/*
 * What every mla_bench command shares: helpers, timing, the output table, the
 * ceilings (FMA and AMX peaks, memcpy bandwidth), and the plan of backends
 * and thread counts a command covers.
 *
 * Only the public API, libc and OpenMP: the bench measures what a caller gets.
 */
#include "bench.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One probe run: long enough to hide fork/join and timer resolution, short
 * enough for reps x backends x thread counts to finish in seconds. */
#define PROBE_SECONDS 0.03

/* ---- helpers --------------------------------------------------------------- */

bool check(mla_status st, const char *what)
{
    if (st != MLA_OK)
        fprintf(stderr, "mla_bench: %s: %s: %s\n", what, mla_status_str(st), mla_last_error());
    return st == MLA_OK;
}

/* 64-byte aligned, as servers' tensors are: rows start on cache lines. */
void *alloc(size_t bytes)
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

double giga_per_s(double units, double seconds)
{
    return seconds > 0 ? units / seconds / 1e9 : 0;
}

uint32_t xorshift32(uint32_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 17;
    *state ^= *state << 5;
    return *state;
}

/* Fisher-Yates. */
void shuffle(int64_t *perm, int64_t n, uint32_t *rng)
{
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = xorshift32(rng) % (uint32_t)(i + 1), tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
}

/* ---- timing ------------------------------------------------------------------ */

/* An untimed first run takes page faults, lazy initialization and clock
 * ramp-up out of the numbers. */
bool time_region(run_fn run, void *ctx, int reps, double *median_s)
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

/* Alternating rep by rep means a noisy machine's slow spells hit both alike. */
bool time_interleaved(run_fn run, void *ctx, run_fn copy, void *copy_ctx, int reps,
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

void print_header(bool json)
{
    if (!json)
        printf("%-26s %-12s %7s %10s %11s %9s %8s %9s %6s %9s %6s\n", "op", "backend", "threads",
               "n", "median_us", "GFLOP/s", "GB/s", "peak", "%peak", "copy GB/s", "%copy");
}

void print_row(const row *r, bool json)
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

/* ---- FMA and AMX peaks ------------------------------------------------------- */

/* Every thread probes at once: the peak of the whole team, not one core x T
 * (shared cores, power limits and clock drops under load all show up). */
bool run_probe(void *ctx)
{
    probe_run *p = ctx;
    double flops = 0;
#pragma omp parallel num_threads(p->threads) reduction(+ : flops)
    {
        float sink; /* the probe is in another translation unit: it cannot be elided */
        flops += p->probe(p->iters, &sink);
    }
    p->flops = flops; /* summed over the threads the runtime actually gave */
    return true;
}

/* Iterations for one probe call to take about PROBE_SECONDS on one thread:
 * double until a call is long enough to time well, then scale. */
int64_t calibrate_probe(bench_fma_probe_fn *probe)
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

row measure_amx_peak(int threads, int reps)
{
    row r = {.op = "peak_amx_bf16", .backend = "avx512_amx", .threads = threads};
#if defined(__x86_64__)
    float sink;
    if (bench_amx_probe(1, &sink) == 0)
        return r;
    probe_run run = {.probe = bench_amx_probe, .threads = threads,
                     .iters = calibrate_probe(bench_amx_probe)};
    double s;
    time_region(run_probe, &run, reps, &s); /* run_probe cannot fail */
    r.median_us = s * 1e6;
    r.gflops = r.peak_gflops = giga_per_s(run.flops, s);
#else
    (void)reps;
#endif
    return r;
}

/* ---- memcpy bandwidth -------------------------------------------------------- */

/* Start of contiguous slice t of `parts` over `bytes`; slice t ends where t+1 starts. */
static size_t slice_start(size_t bytes, int parts, int t)
{
    return bytes * (size_t)t / (size_t)parts;
}

/* On NUMA machines pages land near the thread that first writes them. */
void first_touch(char *buf, size_t bytes, int threads)
{
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < threads; t++) {
        size_t begin = slice_start(bytes, threads, t), end = slice_start(bytes, threads, t + 1);
        memset(buf + begin, 0, end - begin);
    }
}

bool run_copy(void *ctx)
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

row measure_copy(char *dst, const char *src, size_t bytes, int threads, int reps)
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

/* The backend named `only` (an error if it cannot run here), else every
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

/* Calibrates each backend's probe once, then times it at every thread count. */
static bool measure_plan_peaks(plan *p, int reps)
{
    p->peaks = alloc((size_t)(p->nbackends * p->nthreads) * sizeof *p->peaks);
    if (!p->peaks)
        return false;
    for (int b = 0; b < p->nbackends; b++) {
        probe_run run = {.probe = bench_fma_probe_for(p->backends[b]->isa)};
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
    return true;
}

/* Every command reports against the peaks, so they come first. */
bool make_plan(const options *o, plan *p)
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
    return measure_plan_peaks(p, o->reps);
}

int most_threads(const plan *p)
{
    return p->threads[p->nthreads - 1];
}

void free_plan(plan *p)
{
    free(p->backends);
    free(p->peaks);
}

/* ---- backends ------------------------------------------------------------------ */

bool force_backend(mla_op op, const char *name)
{
    return check(mla_force_backend(op, name), "mla_force_backend");
}

bool ran_on(const mla_backend_desc *b, const char *op)
{
    if (strcmp(mla_last_backend(), b->name) != 0) {
        fprintf(stderr, "mla_bench: %s ran on backend '%s', not the forced '%s'\n", op,
                mla_last_backend(), b->name);
        return false;
    }
    return true;
}
