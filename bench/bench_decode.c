/*
 * mla_bench decode: mla_decode (absorbed MLA over a paged latent cache)
 * against the FMA peak of the backend that runs it, and its cache read rate
 * against memcpy, both on as many threads in rounds with it (--no-probe:
 * before it); with --scaling also on one thread, to see how closely the
 * speedup follows the peak's. On the AMX route also against the AMX-BF16
 * probe, measured after it. --cold rotates through copies of the cache
 * larger than the last-level cache.
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* DeepSeek V3's: 192^-0.5 times the square of its YaRN mscale. */
#define SOFTMAX_SCALE 0.1352f
/* The memcpy the cache read rate is held against: large enough to miss
 * every cache level, as a long context's rows do. */
#define COPY_BYTES ((size_t)256 << 20)
/* Random data in [-1, 1) is stored as [-50, 50]: well inside e4m3 and e5m2. */
#define FP8_SCALE 0.02f
/* The random fill converts through an f32 buffer of this many values. */
#define FILL_CHUNK ((int64_t)1 << 20)

/* The route the decode kernels run (mla_backend_route): pct_peak is against
 * the f32 FMA probe either way, so a half-precision route that beats FMA
 * shows above it. */
static const char *decode_route(const char *backend, const mla_config *cfg)
{
    const char *route = mla_backend_route(backend, cfg);
    return route ? route : "?";
}

typedef struct decode_bench {
    mla_kv_cache cache;
    void *cache_data;     /* the cache as filled; cache.data: it or a --cold copy */
    cold_inputs cold;     /* --cold: copies of the cache */
    int32_t *block_table; /* [batch, ceil(ctx / block_size)]: a shuffle of every block */
    int32_t *seq_lens;    /* [batch]: all ctx */
    void *q;              /* [batch * sq, heads, L + R] */
    void *out;            /* [batch * sq, heads, L] */
    mla_decode_sched_params sched; /* with --parts */
    void *workspace;
    int64_t workspace_bytes;
    mla_decode_args args;
    int threads; /* of the next run */
} decode_bench;

/* Uniform in [-1, 1), a hash (splitmix64) of seed and index: the data is the
 * same whatever the thread count that fills it. */
static float uniform(uint64_t seed, int64_t i)
{
    uint64_t z = seed + (uint64_t)i * 0x9e3779b97f4a7c15u;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    z ^= z >> 31;
    return (float)(z >> 40) * 0x1p-23f - 1.0f;
}

/* n random values in [-1, 1) stored as dtype (fp8: divided by scale). */
static bool fill_random(void *dst, mla_dtype dtype, int64_t n, float scale, uint64_t seed,
                        int threads)
{
    bool f32 = dtype == MLA_DTYPE_F32;
    float *stage = f32 ? NULL : alloc(FILL_CHUNK * sizeof *stage);
    bool ok = f32 || stage;
    for (int64_t at = 0; ok && at < n; at += FILL_CHUNK) {
        int64_t len = n - at < FILL_CHUNK ? n - at : FILL_CHUNK;
        float *v = f32 ? (float *)dst + at : stage;
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int64_t i = 0; i < len; i++)
            v[i] = uniform(seed, at + i);
        if (!f32)
            ok = check(mla_convert_scaled(dtype, (char *)dst + at * mla_dtype_size(dtype),
                                          MLA_DTYPE_F32, v, len, scale, threads),
                       "mla_convert_scaled");
    }
    free(stage);
    return ok;
}

static bool is_fp8(mla_dtype dtype)
{
    return dtype == MLA_DTYPE_FP8_E4M3 || dtype == MLA_DTYPE_FP8_E5M2;
}

/* The cache holds exactly the batch's blocks, handed out in shuffled order
 * so that every request's rows are really scattered; the workspace fits a
 * call on each of the thread counts, the last of which is the largest. */
static bool decode_bench_init(decode_bench *db, const options *o, const mla_config *cfg,
                              const int *threads, int nthreads)
{
    int64_t L = cfg->kv_lora_rank, R = cfg->rope_dim, W = L + R, H = cfg->num_heads;
    int64_t bs = cfg->block_size, cols = (o->ctx + bs - 1) / bs, num_blocks = o->batch * cols;
    size_t cache_bytes = (size_t)(num_blocks * bs * W * mla_dtype_size(cfg->cache_dtype));
    int64_t tokens = o->batch * o->sq, q_size = mla_dtype_size(cfg->q_dtype);
    *db = (decode_bench){0};
    if (num_blocks > INT32_MAX) {
        fprintf(stderr, "mla_bench: %lld cache blocks: block ids are int32\n", (long long)num_blocks);
        return false;
    }
    db->cache = (mla_kv_cache){
        .data = alloc(cache_bytes),
        .dtype = cfg->cache_dtype, .num_blocks = num_blocks, .block_size = bs, .width = W,
        .scale = is_fp8(cfg->cache_dtype) ? FP8_SCALE : 1.0f};
    int64_t *perm = alloc((size_t)num_blocks * sizeof *perm);
    db->block_table = alloc((size_t)num_blocks * sizeof *db->block_table);
    db->seq_lens = alloc((size_t)o->batch * sizeof *db->seq_lens);
    db->q = alloc((size_t)(tokens * H * W * q_size));
    db->out = alloc((size_t)(tokens * H * L * q_size));
    bool ok = db->cache.data && perm && db->block_table && db->seq_lens && db->q && db->out;
    if (ok) {
        uint32_t rng = 4242;
        shuffle(perm, num_blocks, &rng);
        for (int64_t i = 0; i < num_blocks; i++)
            db->block_table[i] = (int32_t)perm[i];
        for (int64_t b = 0; b < o->batch; b++)
            db->seq_lens[b] = (int32_t)o->ctx;
        int fill_threads = threads[nthreads - 1];
        ok = fill_random(db->cache.data, cfg->cache_dtype, num_blocks * bs * W, db->cache.scale, 1,
                         fill_threads) &&
             fill_random(db->q, cfg->q_dtype, tokens * H * W, 1.0f, 2, fill_threads);
    }
    free(perm);
    db->cache_data = db->cache.data;
    const void *cold_src[] = {db->cache_data};
    if (!ok || !cold_inputs_make(&db->cold, o, cold_src, &cache_bytes, 1, threads[nthreads - 1]))
        return false;
    /* one concatenated q [batch * sq, heads, L + R]: q_pe is q + L */
    db->args = (mla_decode_args){
        .num_reqs = o->batch, .s_q = o->sq, .num_heads = H, .kv_lora_rank = L, .rope_dim = R,
        .scale = SOFTMAX_SCALE, .q_dtype = cfg->q_dtype,
        .q_nope = db->q, .q_nope_token_stride = H * W, .q_nope_head_stride = W,
        .q_pe = (char *)db->q + L * q_size, .q_pe_token_stride = H * W, .q_pe_head_stride = W,
        .cache = &db->cache, .block_table = db->block_table, .block_table_cols = cols,
        .seq_lens = db->seq_lens, .out = db->out, .out_token_stride = H * L, .out_head_stride = L,
        .bf16_compute = o->bf16_compute};
    if (o->parts > 0) {
        db->sched = (mla_decode_sched_params){.num_parts = o->parts, .block_n = 16, .overhead = 2};
        db->args.sched = &db->sched;
    }
    for (int t = 0; t < nthreads; t++) {
        int64_t bytes;
        if (!check(mla_decode_workspace_size(&db->args, threads[t], &bytes),
                   "mla_decode_workspace_size"))
            return false;
        if (bytes > db->workspace_bytes)
            db->workspace_bytes = bytes;
    }
    db->workspace = alloc((size_t)db->workspace_bytes);
    return db->workspace != NULL;
}

static void decode_bench_free(decode_bench *db)
{
    free(db->cache_data);
    cold_inputs_free(&db->cold);
    free(db->block_table);
    free(db->seq_lens);
    free(db->q);
    free(db->out);
    free(db->workspace);
}

static bool run_decode(void *ctx)
{
    decode_bench *db = ctx;
    if (cold_advance(&db->cold))
        db->cache.data = cold_input(&db->cold, 0);
    return check(mla_decode(&db->args, db->workspace, db->workspace_bytes, db->threads),
                 "mla_decode");
}

/* Keys the queries of one request see together: query i of sq sees cache
 * rows j <= ctx - sq + i (causal, aligned to the end). */
static double visible_keys(int64_t ctx, int64_t sq)
{
    double keys = 0;
    for (int64_t i = 0; i < sq; i++)
        keys += ctx - sq + 1 + i > 0 ? (double)(ctx - sq + 1 + i) : 0;
    return keys;
}

/* ---- output ---------------------------------------------------------------- */

static void print_decode_header(bool json)
{
    if (!json)
        printf("%-6s %-12s %-8s %7s %5s %5s %8s %4s %-4s %-8s %4s %11s %11s %5s %9s %9s %8s %9s %6s "
               "%9s %6s %9s %6s\n", "op", "backend", "route", "threads", "batch", "heads", "ctx",
               "sq", "q", "cache", "bs", "median_us", "min/max%", "sd%", "GFLOP/s", "cache_MB",
               "GB/s", "peak", "%peak", "amx_peak", "%amx", "copy GB/s", "%copy");
}

/* What the same run measured beside decode: the AMX-BF16 peak (0 off the
 * AMX route) and memcpy's GB/s (its reads and writes). */
typedef struct beside {
    double peak, amx_peak, copy_gbps;
} beside;

static double percent(double x, double of)
{
    return of > 0 ? 100 * x / of : 0;
}

/* The keys every decode JSON object shares after "threads". */
static void print_config_json(const options *o, const mla_config *cfg)
{
    printf(",\"batch\":%lld,\"heads\":%lld,\"ctx\":%lld,\"sq\":%lld,\"q_dtype\":\"%s\","
           "\"cache_dtype\":\"%s\",\"block_size\":%lld,\"kv_lora_rank\":%lld,\"rope_dim\":%lld",
           (long long)o->batch, (long long)cfg->num_heads, (long long)o->ctx, (long long)o->sq,
           mla_dtype_name(cfg->q_dtype), mla_dtype_name(cfg->cache_dtype),
           (long long)cfg->block_size, (long long)cfg->kv_lora_rank, (long long)cfg->rope_dim);
}

static void print_decode_row(const options *o, const mla_config *cfg, const decode_bench *db,
                             const char *backend, int threads, const stats *t, double flops,
                             double bytes, const beside *m)
{
    double gflops = giga_per_s(flops, t->median), gbps = giga_per_s(bytes, t->median);
    if (o->json) {
        printf("{\"op\":\"decode\",\"backend\":\"%s\",\"route\":\"%s\",\"threads\":%d", backend,
               decode_route(backend, cfg), threads);
        print_config_json(o, cfg);
        printf(",\"median_us\":%.3f", t->median * 1e6);
        print_stats_json("", t);
        printf(",\"gflops\":%.3f,\"bytes\":%.0f,\"gbps\":%.3f,"
               "\"peak_gflops\":%.3f,\"pct_peak\":%.2f,\"amx_peak_gflops\":%.3f,"
               "\"pct_amx_peak\":%.2f,\"copy_gbps\":%.3f,\"pct_copy\":%.2f,\"probe\":\"%s\","
               "\"cold_copies\":%lld}\n",
               gflops, bytes, gbps, m->peak, percent(gflops, m->peak), m->amx_peak,
               percent(gflops, m->amx_peak), m->copy_gbps, percent(gbps, m->copy_gbps),
               probe_mode(o), (long long)db->cold.count);
        return;
    }
    char range[32], sd[16];
    format_spread(t, range, sizeof range, sd, sizeof sd);
    printf("%-6s %-12s %-8s %7d %5lld %5lld %8lld %4lld %-4s %-8s %4lld %11.1f %11s %5s %9.2f "
           "%9.2f %8.2f %9.2f %6.1f %9.2f %6.1f %9.2f %6.1f\n",
           "decode", backend, decode_route(backend, cfg), threads, (long long)o->batch,
           (long long)cfg->num_heads, (long long)o->ctx, (long long)o->sq,
           mla_dtype_name(cfg->q_dtype), mla_dtype_name(cfg->cache_dtype),
           (long long)cfg->block_size, t->median * 1e6, range, sd, gflops, bytes / 1e6, gbps,
           m->peak, percent(gflops, m->peak), m->amx_peak, percent(gflops, m->amx_peak), m->copy_gbps,
           percent(gbps, m->copy_gbps));
}

/* How close the speedup from 1 to T threads comes to the FMA peak's. */
static void print_scaling(const options *o, const mla_config *cfg, const char *backend,
                          const int threads[2], const double seconds[2], const double peak[2])
{
    double speedup = seconds[0] / seconds[1], peak_ratio = peak[1] / peak[0];
    if (o->json) {
        printf("{\"op\":\"decode_scaling\",\"backend\":\"%s\",\"route\":\"%s\",\"threads\":%d",
               backend, decode_route(backend, cfg), threads[1]);
        print_config_json(o, cfg);
        printf(",\"t1_us\":%.3f,\"tT_us\":%.3f,\"speedup\":%.3f,\"peak1_gflops\":%.3f,"
               "\"peakT_gflops\":%.3f,\"peak_ratio\":%.3f,\"speedup_vs_peak\":%.3f}\n",
               seconds[0] * 1e6, seconds[1] * 1e6, speedup, peak[0], peak[1], peak_ratio,
               speedup / peak_ratio);
        return;
    }
    printf("\nscaling on %s, %d -> %d threads: speedup %.2f (t1/tT), peak ratio %.2f "
           "(peakT/peak1), speedup / peak ratio %.3f\n",
           backend, threads[0], threads[1], speedup, peak_ratio, speedup / peak_ratio);
}

/* ---- command ------------------------------------------------------------------- */

/* Times decode on each thread count with b's FMA probe and a memcpy on as
 * many threads, in rounds (time_beside): on a shared host all three then
 * see the same neighbours, so t1/tT meets the peak ratio, and the cache
 * read the memcpy, of the same moments. --no-probe times the probe and the
 * memcpy first and leaves decode's loop to itself. */
static bool time_decode(const options *o, const mla_config *cfg, const mla_backend_desc *b,
                        decode_bench *db, const int *threads, int nthreads)
{
    double flops = 2.0 * (double)(o->batch * cfg->num_heads) * visible_keys(o->ctx, o->sq) *
                   (double)(2 * cfg->kv_lora_rank + cfg->rope_dim);
    double bytes = (double)(o->batch * o->ctx * (cfg->kv_lora_rank + cfg->rope_dim) *
                            mla_dtype_size(cfg->cache_dtype));
    double seconds[2], peak[2];
    probe_run probe = {.probe = bench_fma_probe_for(b->isa)};
    probe.iters = calibrate_probe(probe.probe);
    const bool amx = strcmp(decode_route(b->name, cfg), "amx-bf16") == 0;
    char *src = alloc(COPY_BYTES), *dst = alloc(COPY_BYTES);
    if (!src || !dst) {
        free(src);
        free(dst);
        return false;
    }
    first_touch(src, COPY_BYTES, threads[nthreads - 1]);
    first_touch(dst, COPY_BYTES, threads[nthreads - 1]);
    print_decode_header(o->json);
    bool ok = true;
    for (int t = 0; ok && t < nthreads; t++) {
        stats time, probe_time, copy_time;
        db->threads = probe.threads = threads[t];
        copy_run copy = {dst, src, COPY_BYTES, threads[t]};
        const ceiling ceilings[] = {{run_probe, &probe, &probe_time}, {run_copy, &copy, &copy_time}};
        ok = time_beside(o, run_decode, db, ceilings, 2, &time) && ran_on(b, "decode");
        if (!ok)
            break;
        seconds[t] = time.median;
        peak[t] = giga_per_s(probe.flops, probe_time.median);
        const beside m = {
            .peak = peak[t],
            .amx_peak = amx ? measure_amx_peak(threads[t], o->reps).gflops : 0,
            .copy_gbps = giga_per_s(2.0 * (double)COPY_BYTES, copy_time.median),
        };
        print_decode_row(o, cfg, db, b->name, threads[t], &time, flops, bytes, &m);
    }
    free(src);
    free(dst);
    if (!ok)
        return false;
    if (o->scaling)
        print_scaling(o, cfg, b->name, threads, seconds, peak);
    return true;
}

int cmd_decode(const options *o, const plan *unused)
{
    (void)unused; /* decode measures its own backend's peak, alongside it */
    mla_config cfg = {.q_dtype = o->q_dtype < 0 ? MLA_DTYPE_F32 : (mla_dtype)o->q_dtype,
                      .cache_dtype = o->cache_dtype < 0 ? MLA_DTYPE_BF16 : (mla_dtype)o->cache_dtype,
                      .kv_lora_rank = o->kv_lora_rank, .rope_dim = o->rope_dim,
                      .num_heads = o->heads, .block_size = o->block_size,
                      .bf16_compute = o->bf16_compute};
    int threads[2], nthreads = 0;
    if (o->scaling)
        threads[nthreads++] = 1;
    threads[nthreads++] = o->threads > 0 ? o->threads : mla_default_threads();

    /* The selected backend is forced, so the one whose peak is measured is
     * the one that runs. */
    const mla_backend_desc *b;
    decode_bench db = {0};
    bool ok = (!o->backend || force_backend(MLA_OP_DECODE, o->backend)) &&
              check(mla_select_backend(MLA_OP_DECODE, &cfg, &b), "mla_select_backend") &&
              force_backend(MLA_OP_DECODE, b->name) &&
              decode_bench_init(&db, o, &cfg, threads, nthreads) &&
              time_decode(o, &cfg, b, &db, threads, nthreads);
    ok = force_backend(MLA_OP_DECODE, NULL) && ok;
    decode_bench_free(&db);
    return ok ? 0 : 1;
}
