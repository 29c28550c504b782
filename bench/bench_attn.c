/*
 * mla_bench attn: mla_flash_attn_varlen, prefill's new-token attention
 * (docs/semantics.md §1.7 step 2), on --batch equal requests of --tokens
 * queries over as many keys, --heads heads, Dqk/Dv = --qk-dim/--v-dim
 * (192/128: MLA's q_nope 128 + q_pe 64 against k_nope 128 plus the shared
 * k_pe 64, as prefill has it; --whole-k gives k whole instead), causal
 * unless --no-causal. Each backend of the plan at each thread count, timed
 * alternately rep by rep with its FMA probe on as many threads, so %peak
 * compares moments with the same neighbours and clocks (--no-probe: the
 * probe just before). --cold rotates q, k, k_pe and v through copies larger
 * than the last-level cache.
 */
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* DeepSeek V3's: 192^-0.5 times the square of its YaRN mscale. */
#define ATTN_SCALE 0.1352f

typedef struct attn_bench {
    mla_flash_attn_args args;
    int32_t *cu;    /* [batch + 1]: the same offsets for q and k */
    void *q;        /* [T, H, Dqk]                               */
    void *k;        /* [S, H, Dqk - R]                           */
    void *k_pe;     /* [S, R]                                    */
    void *v;        /* [S, H, Dv]                                */
    void *out;      /* [T, H, Dv]                                */
    float *lse;     /* [H, T]: with context prefill wants it     */
    void *workspace;
    int64_t workspace_bytes;
    cold_inputs cold; /* --cold: copies of q, k, k_pe, v */
    int threads;    /* of the next run */
} attn_bench;

/* n random values in [-1, 1) stored as dtype, from a fixed seed: every run
 * benchmarks the same data. NULL after saying so when out of memory. */
static void *random_buffer(mla_dtype dtype, int64_t n, uint32_t seed)
{
    float *f = alloc((size_t)(n > 0 ? n : 1) * sizeof *f);
    if (!f)
        return NULL;
    for (int64_t i = 0; i < n; i++)
        f[i] = (float)(xorshift32(&seed) >> 8) * 0x1p-23f - 1.0f;
    if (dtype == MLA_DTYPE_F32)
        return f;
    void *d = alloc((size_t)((n > 0 ? n : 1) * mla_dtype_size(dtype)));
    if (d && !check(mla_convert(dtype, d, MLA_DTYPE_F32, f, n, 0), "mla_convert")) {
        free(d);
        d = NULL;
    }
    free(f);
    return d;
}

static mla_config attn_config(const mla_flash_attn_args *a)
{
    return (mla_config){.q_dtype = a->dtype, .cache_dtype = a->dtype,
                        .kv_lora_rank = a->qk_dim - a->rope_dim, .rope_dim = a->rope_dim,
                        .num_heads = a->num_heads, .block_size = 1};
}

static bool attn_bench_init(attn_bench *ab, const options *o, mla_dtype dtype, int64_t tokens,
                            const plan *p)
{
    const int64_t B = o->batch, T = B * tokens, H = o->heads, Dqk = o->qk_dim, Dv = o->v_dim;
    const int64_t R = o->whole_k ? 0 : o->rope_dim, nope = Dqk - R;
    *ab = (attn_bench){0};
    if (R >= Dqk) {
        fprintf(stderr, "mla_bench: attn: --rope-dim %lld must be below --qk-dim %lld\n",
                (long long)R, (long long)Dqk);
        return false;
    }
    if (T > INT32_MAX) {
        fprintf(stderr, "mla_bench: attn: %lld tokens: offsets are int32\n", (long long)T);
        return false;
    }
    ab->cu = alloc((size_t)(B + 1) * sizeof *ab->cu);
    ab->q = random_buffer(dtype, T * H * Dqk, 1);
    ab->k = random_buffer(dtype, T * H * nope, 2);
    ab->k_pe = random_buffer(dtype, T * R, 3);
    ab->v = random_buffer(dtype, T * H * Dv, 4);
    ab->out = alloc((size_t)(T * H * Dv * mla_dtype_size(dtype)));
    ab->lse = alloc((size_t)(H * T) * sizeof *ab->lse);
    if (!ab->cu || !ab->q || !ab->k || !ab->k_pe || !ab->v || !ab->out || !ab->lse)
        return false;
    for (int64_t b = 0; b <= B; b++)
        ab->cu[b] = (int32_t)(b * tokens);
    ab->args = (mla_flash_attn_args){
        .num_seqs = B, .num_heads = H, .qk_dim = Dqk, .v_dim = Dv, .rope_dim = R,
        .causal = o->causal, .scale = ATTN_SCALE, .dtype = dtype, .total_q = T, .total_k = T,
        .cu_seqlens_q = ab->cu, .cu_seqlens_k = ab->cu,
        .q = ab->q, .q_token_stride = H * Dqk, .q_head_stride = Dqk,
        .k = ab->k, .k_token_stride = H * nope, .k_head_stride = nope,
        .k_pe = R > 0 ? ab->k_pe : NULL, .k_pe_token_stride = R,
        .v = ab->v, .v_token_stride = H * Dv, .v_head_stride = Dv,
        .out = ab->out, .out_token_stride = H * Dv, .out_head_stride = Dv, .lse = ab->lse};
    const void *inputs[] = {ab->q, ab->k, ab->k_pe, ab->v};
    const size_t size = (size_t)mla_dtype_size(dtype);
    const size_t input_bytes[] = {(size_t)(T * H * Dqk) * size, (size_t)(T * H * nope) * size,
                                  (size_t)(T * R) * size, (size_t)(T * H * Dv) * size};
    if (!cold_inputs_make(&ab->cold, o, inputs, input_bytes, 4, p->threads[p->nthreads - 1]))
        return false;
    for (int t = 0; t < p->nthreads; t++) {
        int64_t bytes;
        if (!check(mla_flash_attn_varlen_workspace_size(&ab->args, p->threads[t], &bytes),
                   "mla_flash_attn_varlen_workspace_size"))
            return false;
        if (bytes > ab->workspace_bytes)
            ab->workspace_bytes = bytes;
    }
    ab->workspace = alloc((size_t)(ab->workspace_bytes > 0 ? ab->workspace_bytes : 1));
    return ab->workspace != NULL;
}

static void attn_bench_free(attn_bench *ab)
{
    free(ab->cu);
    free(ab->q);
    free(ab->k);
    free(ab->k_pe);
    free(ab->v);
    free(ab->out);
    free(ab->lse);
    free(ab->workspace);
    cold_inputs_free(&ab->cold);
}

static bool run_attn(void *ctx)
{
    attn_bench *ab = ctx;
    if (cold_advance(&ab->cold)) {
        ab->args.q = cold_input(&ab->cold, 0);
        ab->args.k = cold_input(&ab->cold, 1);
        ab->args.k_pe = ab->args.rope_dim > 0 ? cold_input(&ab->cold, 2) : NULL;
        ab->args.v = cold_input(&ab->cold, 3);
    }
    return check(mla_flash_attn_varlen(&ab->args, ab->workspace, ab->workspace_bytes,
                                       ab->threads),
                 "mla_flash_attn_varlen");
}

/* (query, key) pairs the mask lets through: T(T+1)/2 per causal request. */
static double attn_pairs(int64_t batch, int64_t tokens, bool causal)
{
    double n = (double)tokens;
    return (double)batch * (causal ? n * (n + 1) / 2 : n * n);
}

/* ---- output ------------------------------------------------------------------------- */

static void print_attn_header(bool json)
{
    if (!json)
        printf("%-5s %-12s %-8s %7s %5s %6s %5s %7s %-6s %-4s %11s %11s %5s %9s %9s %6s %9s %6s\n",
               "op", "backend", "route", "threads", "batch", "tokens", "heads", "dims", "mask",
               "dt", "median_us", "min/max%", "sd%", "GFLOP/s", "peak", "%peak", "amx_peak", "%amx");
}

/* peak: the FMA probe's; amx_peak: the AMX-BF16 probe's on the AMX route,
 * else 0. */
static void print_attn_row(const options *o, const attn_bench *ab, const char *backend,
                           int threads, const stats *t, double flops, double peak, double amx_peak)
{
    const double seconds = t->median;
    const mla_flash_attn_args *a = &ab->args;
    mla_config cfg = attn_config(a);
    const char *route = mla_backend_route(backend, &cfg);
    double gflops = giga_per_s(flops, seconds), pct_peak = peak > 0 ? 100 * gflops / peak : 0;
    double pct_amx = amx_peak > 0 ? 100 * gflops / amx_peak : 0;
    int64_t tokens = a->total_q / (a->num_seqs > 0 ? a->num_seqs : 1);
    if (o->json) {
        printf("{\"op\":\"attn\",\"backend\":\"%s\",\"route\":\"%s\",\"threads\":%d,"
               "\"batch\":%lld,\"tokens\":%lld,\"heads\":%lld,\"qk_dim\":%lld,\"v_dim\":%lld,"
               "\"rope_dim\":%lld,\"causal\":%s,\"dtype\":\"%s\",\"median_us\":%.3f",
               backend, route ? route : "?", threads, (long long)a->num_seqs, (long long)tokens,
               (long long)a->num_heads, (long long)a->qk_dim, (long long)a->v_dim,
               (long long)a->rope_dim, a->causal ? "true" : "false", mla_dtype_name(a->dtype),
               seconds * 1e6);
        print_stats_json("", t);
        printf(",\"gflops\":%.3f,\"peak_gflops\":%.3f,\"pct_peak\":%.2f,"
               "\"amx_peak_gflops\":%.3f,\"pct_amx_peak\":%.2f,\"probe\":\"%s\","
               "\"cold_copies\":%lld}\n",
               gflops, peak, pct_peak, amx_peak, pct_amx, probe_mode(o),
               (long long)ab->cold.count);
        return;
    }
    char dims[32], range[32], sd[16];
    snprintf(dims, sizeof dims, "%lld/%lld", (long long)a->qk_dim, (long long)a->v_dim);
    format_spread(t, range, sizeof range, sd, sizeof sd);
    printf("%-5s %-12s %-8s %7d %5lld %6lld %5lld %7s %-6s %-4s %11.1f %11s %5s %9.2f %9.2f %6.1f "
           "%9.2f %6.1f\n",
           "attn", backend, route ? route : "?", threads, (long long)a->num_seqs,
           (long long)tokens, (long long)a->num_heads, dims, a->causal ? "causal" : "full",
           mla_dtype_name(a->dtype), seconds * 1e6, range, sd, gflops, peak, pct_peak, amx_peak,
           pct_amx);
}

/* ---- command --------------------------------------------------------------------------- */

/* Times the call on backend b at every thread count of the plan, each
 * alternately with b's FMA probe on as many threads. */
static bool time_attn(const options *o, const plan *p, const mla_backend_desc *b,
                      attn_bench *ab, double flops)
{
    probe_run probe = {.probe = bench_fma_probe_for(b->isa)};
    probe.iters = calibrate_probe(probe.probe);
    mla_config cfg = attn_config(&ab->args);
    const char *route = mla_backend_route(b->name, &cfg);
    const bool amx = route && strcmp(route, "amx-bf16") == 0;
    for (int t = 0; t < p->nthreads; t++) {
        stats time, probe_time;
        ab->threads = probe.threads = p->threads[t];
        if (!time_beside(o, run_attn, ab, &(ceiling){run_probe, &probe, &probe_time}, 1, &time) ||
            !ran_on(b, "attn"))
            return false;
        double amx_peak = amx ? measure_amx_peak(p->threads[t], o->reps).gflops : 0;
        print_attn_row(o, ab, b->name, p->threads[t], &time, flops,
                       giga_per_s(probe.flops, probe_time.median), amx_peak);
    }
    return true;
}

int cmd_attn(const options *o, const plan *p)
{
    /* attn's own defaults where the shared options were not given: one
     * request of 2048 tokens, 16 heads */
    options shape = *o;
    shape.tokens = o->tokens_set ? o->tokens : 2048;
    shape.heads = o->heads_set ? o->heads : 16;
    shape.batch = o->batch_set ? o->batch : 1;
    mla_dtype dtype = o->q_dtype < 0 ? MLA_DTYPE_F32 : (mla_dtype)o->q_dtype;
    int64_t tokens = shape.tokens;
    attn_bench ab;
    bool ok = attn_bench_init(&ab, &shape, dtype, tokens, p);
    const mla_flash_attn_args *a = &ab.args;
    double flops = 2.0 * (double)a->num_heads * (double)(a->qk_dim + a->v_dim) *
                   attn_pairs(a->num_seqs, tokens, a->causal);
    mla_config cfg = attn_config(a);
    if (ok)
        print_attn_header(o->json);
    for (int i = 0; ok && i < p->nbackends; i++) {
        const mla_backend_desc *b = p->backends[i];
        mla_reasons why;
        ok = check(mla_backend_validate(b->name, MLA_OP_PREFILL, &cfg, &why),
                   "mla_backend_validate");
        if (ok && why.count > 0) {
            fprintf(stderr, "mla_bench: attn: skipping %s: %s\n", b->name, why.text[0]);
            continue;
        }
        ok = ok && force_backend(MLA_OP_PREFILL, b->name) && time_attn(o, p, b, &ab, flops);
    }
    ok = force_backend(MLA_OP_PREFILL, NULL) && ok;
    attn_bench_free(&ab);
    return ok ? 0 : 1;
}
