/*
 * What every mla_bench command shares: helpers, timing, the output table, the
 * ceilings (FMA and AMX peaks, memcpy bandwidth), and the plan of backends
 * and thread counts a command covers.
 *
 * Only the public API, libc and OpenMP: the bench measures what a caller gets.
 */
#include "bench.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One probe run: long enough to hide fork/join and timer resolution, short
 * enough for reps x backends x thread counts to finish in seconds. */
#define PROBE_SECONDS 0.03
/* Ceilings one kernel is timed beside (decode: the FMA probe and memcpy). */
#define MAX_CEILINGS 2

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

/* The reps of one loop: every one counted in min, max, mean and the sum of
 * squared deviations (Welford), the first MAX_SAMPLES kept for the median
 * and later ones replacing a kept one at random (reservoir sampling), so the
 * kept ones stay a uniform sample of all. */
typedef struct samples {
    double *kept;
    int64_t n;
    double min, max, mean, m2;
    uint32_t rng;
} samples;

static bool samples_init(samples *s)
{
    *s = (samples){.kept = alloc(MAX_SAMPLES * sizeof *s->kept), .rng = 2463534242u};
    return s->kept != NULL;
}

static void samples_add(samples *s, double t)
{
    if (s->n < MAX_SAMPLES) {
        s->kept[s->n] = t;
    } else {
        uint64_t r = (uint64_t)xorshift32(&s->rng) << 32 | xorshift32(&s->rng);
        uint64_t j = r % (uint64_t)(s->n + 1);
        if (j < MAX_SAMPLES)
            s->kept[j] = t;
    }
    s->n++;
    s->min = s->n == 1 || t < s->min ? t : s->min;
    s->max = s->n == 1 || t > s->max ? t : s->max;
    double d = t - s->mean;
    s->mean += d / (double)s->n;
    s->m2 += d * (t - s->mean);
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median resists outliers (interrupts, other processes); the stddev is
 * the sample's (n - 1), 0 for one rep. Frees the kept times. */
static stats samples_done(samples *s)
{
    int64_t k = s->n < MAX_SAMPLES ? s->n : MAX_SAMPLES;
    qsort(s->kept, (size_t)k, sizeof *s->kept, compare_doubles);
    double median = k == 0 ? 0 : k % 2 ? s->kept[k / 2] : (s->kept[k / 2 - 1] + s->kept[k / 2]) / 2;
    stats t = {.median = median, .min = s->min, .max = s->max,
               .stddev = s->n > 1 ? sqrt(s->m2 / (double)(s->n - 1)) : 0, .reps = s->n};
    free(s->kept);
    return t;
}

/* Whether a loop that began at `start` and has timed `done` reps goes on. */
static bool more_reps(int64_t done, int reps, double seconds, double start)
{
    return seconds > 0 ? done == 0 || omp_get_wtime() - start < seconds : done < reps;
}

/* An untimed first run takes page faults, lazy initialization and clock
 * ramp-up out of the numbers. */
bool time_region(run_fn run, void *ctx, int reps, double seconds, stats *t)
{
    samples s;
    if (!samples_init(&s))
        return false;
    bool ok = run(ctx);
    double loop_start = omp_get_wtime();
    while (ok && more_reps(s.n, reps, seconds, loop_start)) {
        double start = omp_get_wtime();
        ok = run(ctx);
        samples_add(&s, omp_get_wtime() - start);
    }
    *t = samples_done(&s);
    return ok;
}

/* Alternating rep by rep means a noisy machine's slow spells hit both alike. */
bool time_interleaved(run_fn run, void *ctx, run_fn ref, void *ref_ctx, int reps, double seconds,
                      stats *t, stats *ref_t)
{
    samples s, r;
    if (!samples_init(&s))
        return false;
    if (!samples_init(&r)) {
        free(s.kept);
        return false;
    }
    bool ok = run(ctx) && ref(ref_ctx);
    double loop_start = omp_get_wtime();
    while (ok && more_reps(s.n, reps, seconds, loop_start)) {
        double start = omp_get_wtime();
        ok = ref(ref_ctx);
        double mid = omp_get_wtime();
        ok = ok && run(ctx);
        samples_add(&s, omp_get_wtime() - mid);
        samples_add(&r, mid - start);
    }
    *t = samples_done(&s);
    *ref_t = samples_done(&r);
    return ok;
}

/* Untimed time before each timed run of a round of time_beside: on the
 * Xeon (runs 52-55, bench/RESULTS.md) the AMX decode ran 1.3-1.9x slower
 * right after the 30 ms FMA probe than in a loop of its own, needing
 * 1.5-4 ms of calls to recover, and memcpy moved 55-80 GB/s there against
 * 121 alone; after a memcpy a kernel's inputs would also come from DRAM
 * where a loop of calls finds them in cache. */
#define SETTLE_SECONDS 0.01

/* One timed run of `run` after untimed ones for SETTLE_SECONDS (one at
 * least), so that it meets the clocks and caches a loop of its own would. */
static bool settled_run(run_fn run, void *ctx, samples *s)
{
    bool ok = true;
    for (double settle = omp_get_wtime(); ok && omp_get_wtime() - settle < SETTLE_SECONDS;)
        ok = run(ctx);
    double start = omp_get_wtime();
    ok = ok && run(ctx);
    samples_add(s, omp_get_wtime() - start);
    return ok;
}

static bool time_rounds(run_fn run, void *ctx, const ceiling *ceilings, int count, int reps,
                        double seconds, stats *t)
{
    samples s, c[MAX_CEILINGS];
    int ready = 0;
    if (count > MAX_CEILINGS || !samples_init(&s))
        return false;
    while (ready < count && samples_init(&c[ready]))
        ready++;
    bool ok = ready == count;
    double loop_start = omp_get_wtime();
    while (ok && more_reps(s.n, reps, seconds, loop_start)) {
        for (int i = 0; ok && i < count; i++)
            ok = settled_run(ceilings[i].run, ceilings[i].ctx, &c[i]);
        ok = ok && settled_run(run, ctx, &s);
    }
    *t = samples_done(&s);
    for (int i = 0; i < ready; i++)
        *ceilings[i].t = samples_done(&c[i]);
    return ok;
}

bool time_beside(const options *o, run_fn run, void *ctx, const ceiling *ceilings, int count,
                 stats *t)
{
    if (!o->no_probe)
        return time_rounds(run, ctx, ceilings, count, o->reps, o->seconds, t);
    for (int i = 0; i < count; i++)
        if (!time_region(ceilings[i].run, ceilings[i].ctx, o->reps, 0, ceilings[i].t))
            return false;
    return time_region(run, ctx, o->reps, o->seconds, t);
}

const char *probe_mode(const options *o)
{
    return o->no_probe ? "separate" : "interleaved";
}

stats scale_stats(stats s, double by)
{
    return (stats){.median = s.median * by, .min = s.min * by, .max = s.max * by,
                   .stddev = s.stddev * by, .reps = s.reps};
}

/* ---- output ---------------------------------------------------------------- */

void print_stats_json(const char *prefix, const stats *t)
{
    printf(",\"%smin_us\":%.3f,\"%smax_us\":%.3f,\"%sstddev_us\":%.3f,\"%sreps\":%lld", prefix,
           t->min * 1e6, prefix, t->max * 1e6, prefix, t->stddev * 1e6, prefix, (long long)t->reps);
}

void format_spread(const stats *t, char *range, size_t range_size, char *sd, size_t sd_size)
{
    double m = t->median > 0 ? t->median : 1;
    snprintf(range, range_size, "-%.1f/+%.1f", 100 * (m - t->min) / m, 100 * (t->max - m) / m);
    snprintf(sd, sd_size, "%.1f", 100 * t->stddev / m);
}

void print_header(bool json)
{
    if (!json)
        printf("%-26s %-12s %7s %10s %11s %11s %5s %9s %8s %9s %6s %9s %6s\n", "op", "backend",
               "threads", "n", "median_us", "min/max%", "sd%", "GFLOP/s", "GB/s", "peak", "%peak",
               "copy GB/s", "%copy");
}

void print_row(const row *r, bool json)
{
    double pct_peak = r->peak_gflops > 0 ? 100 * r->gflops / r->peak_gflops : 0;
    if (json) {
        printf("{\"op\":\"%s\",\"backend\":\"%s\",\"threads\":%d", r->op, r->backend, r->threads);
        if (r->n > 0)
            printf(",\"n\":%lld", (long long)r->n);
        printf(",\"median_us\":%.3f", r->time.median * 1e6);
        print_stats_json("", &r->time);
        printf(",\"gflops\":%.3f,\"gbps\":%.3f,\"peak_gflops\":%.3f,\"pct_peak\":%.2f", r->gflops,
               r->gbps, r->peak_gflops, pct_peak);
        if (r->copy_gbps > 0)
            printf(",\"copy_gbps\":%.3f,\"pct_copy\":%.2f", r->copy_gbps,
                   100 * r->gbps / r->copy_gbps);
        if (r->probe)
            printf(",\"probe\":\"%s\"", r->probe);
        printf("}\n");
        return;
    }
    char n[24] = "-", copy[24] = "-", pct_copy[24] = "-", range[32], sd[16];
    if (r->n > 0)
        snprintf(n, sizeof n, "%lld", (long long)r->n);
    if (r->copy_gbps > 0) {
        snprintf(copy, sizeof copy, "%.2f", r->copy_gbps);
        snprintf(pct_copy, sizeof pct_copy, "%.1f", 100 * r->gbps / r->copy_gbps);
    }
    format_spread(&r->time, range, sizeof range, sd, sizeof sd);
    printf("%-26s %-12s %7d %10s %11.1f %11s %5s %9.2f %8.2f %9.2f %6.1f %9s %6s\n", r->op,
           r->backend, r->threads, n, r->time.median * 1e6, range, sd, r->gflops, r->gbps,
           r->peak_gflops, pct_peak, copy, pct_copy);
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

static row measure_amx(bool fed, int threads, int reps)
{
    row r = {.op = fed ? "peak_amx_bf16_fed" : "peak_amx_bf16", .backend = "avx512_amx",
             .threads = threads};
#if defined(__x86_64__)
    bench_fma_probe_fn *probe = fed ? bench_amx_fed_probe : bench_amx_probe;
    float sink;
    if (probe(1, &sink) == 0)
        return r;
    probe_run run = {.probe = probe, .threads = threads, .iters = calibrate_probe(probe)};
    time_region(run_probe, &run, reps, 0, &r.time); /* run_probe cannot fail */
    r.gflops = r.peak_gflops = giga_per_s(run.flops, r.time.median);
#else
    (void)reps;
#endif
    return r;
}

row measure_amx_peak(int threads, int reps)
{
    return measure_amx(false, threads, reps);
}

row measure_amx_fed_peak(int threads, int reps)
{
    return measure_amx(true, threads, reps);
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
    stats t;
    time_region(run_copy, &run, reps, 0, &t); /* run_copy cannot fail */
    return (row){.op = "copy", .backend = "libc", .threads = threads, .n = (int64_t)bytes,
                 .time = t, .gbps = giga_per_s(2.0 * (double)bytes, t.median)};
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
            stats s;
            run.threads = p->threads[t];
            time_region(run_probe, &run, reps, 0, &s); /* run_probe cannot fail */
            double gflops = giga_per_s(run.flops, s.median);
            p->peaks[b * p->nthreads + t] = (row){
                .op = "peak_fma", .backend = p->backends[b]->name, .threads = run.threads,
                .time = s, .gflops = gflops, .peak_gflops = gflops};
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

/* ---- --cold ------------------------------------------------------------------------ */

/* Where the LLC size cannot be read (VMs, some AArch64 kernels). */
#define FALLBACK_LLC_BYTES ((int64_t)64 << 20)

/* sysfs writes the size as "491520K" (or M). */
static int64_t sysfs_llc_bytes(void)
{
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    long long n = 0;
    char unit = 0;
    int got = f ? fscanf(f, "%lld%c", &n, &unit) : 0;
    if (f)
        fclose(f);
    if (got < 1 || n <= 0)
        return 0;
    return unit == 'K' ? n << 10 : unit == 'M' ? n << 20 : unit == 'G' ? n << 30 : n;
}

int64_t llc_bytes(const options *o)
{
    if (o->llc_bytes > 0)
        return o->llc_bytes;
    long sc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (sc > 0)
        return sc;
    int64_t fs = sysfs_llc_bytes();
    return fs > 0 ? fs : FALLBACK_LLC_BYTES;
}

static size_t round_up_64(size_t bytes)
{
    return (bytes + 63) / 64 * 64;
}

/* Twice the LLC: an LRU-ish cache keeps none of what was read that long ago. */
bool cold_inputs_make(cold_inputs *c, const options *o, const void *const *src,
                      const size_t *bytes, int n, int threads)
{
    *c = (cold_inputs){0};
    if (!o->cold)
        return true;
    for (int i = 0; i < n; i++) {
        c->offset[i] = c->stride;
        c->stride += round_up_64(bytes[i]);
    }
    size_t target = 2 * (size_t)llc_bytes(o);
    c->count = c->stride > 0 ? (int64_t)((target + c->stride - 1) / c->stride) : 1;
    if (c->count <= 1) {
        c->count = 1;
        return true;
    }
    c->copies = alloc((size_t)c->count * c->stride);
    if (!c->copies)
        return false;
    /* each copy written by one thread: its pages land near it (first touch) */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t k = 0; k < c->count; k++)
        for (int i = 0; i < n; i++)
            memcpy(c->copies + (size_t)k * c->stride + c->offset[i], src[i], bytes[i]);
    return true;
}

bool cold_advance(cold_inputs *c)
{
    if (!c->copies)
        return false;
    c->next = (c->next + 1) % c->count;
    return true;
}

void *cold_input(const cold_inputs *c, int i)
{
    return c->copies + (size_t)c->next * c->stride + c->offset[i];
}

void cold_inputs_free(cold_inputs *c)
{
    free(c->copies);
    c->copies = NULL;
}
