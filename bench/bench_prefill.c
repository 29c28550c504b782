/*
 * mla_bench prefill: mla_prefill of --batch requests, each --tokens new
 * tokens (default 64) after --ctx cached ones, --heads heads (default 16),
 * L = 512, R = 64, P = V = 128, q in --q-dtype over a --cache-dtype cache
 * (bf16), on the backends auto-selection picks, at --threads. Each path is
 * forced in turn and timed alternately rep by rep (--no-probe: one loop
 * after the other), then the path the cost model picks is named: a sweep
 * over --tokens and --ctx finds the crossover. --cold rotates the cache, q
 * and kv_c through copies larger than the last-level cache.
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { L = 512, R = 64, P = 128, V = 128, WIDTH = L + R };

typedef struct prefill_bench {
    mla_prefill_args args;
    mla_kv_cache *cache; /* args.cache */
    cold_inputs *cold;   /* --cold: copies of the cache, q and kv_c, shared by both paths */
    void *workspace;
    int64_t bytes;
    int threads;
} prefill_bench;

static bool run_prefill(void *ctx)
{
    prefill_bench *b = ctx;
    if (cold_advance(b->cold)) {
        b->cache->data = cold_input(b->cold, 0);
        b->args.q = cold_input(b->cold, 1);
        b->args.kv_c = cold_input(b->cold, 2);
        b->args.k_pe = (const char *)b->args.kv_c + L * mla_dtype_size(b->args.dtype);
    }
    return check(mla_prefill(&b->args, b->workspace, b->bytes, b->threads), "mla_prefill");
}

/* n values uniform in [-amp, amp) stored as dtype. */
static void *random_values(mla_dtype dtype, int64_t n, float amp, uint32_t *rng)
{
    float *f = alloc((size_t)n * sizeof(float));
    void *x = alloc((size_t)(n * mla_dtype_size(dtype)));
    if (!f || !x) {
        free(f);
        free(x);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++)
        f[i] = amp * ((float)(xorshift32(rng) >> 8) / 8388608.0f - 1.0f);
    bool ok = dtype == MLA_DTYPE_F32 ? (memcpy(x, f, (size_t)n * sizeof(float)), true)
                                     : check(mla_convert(dtype, x, MLA_DTYPE_F32, f, n, 0),
                                             "mla_convert");
    free(f);
    if (!ok) {
        free(x);
        return NULL;
    }
    return x;
}

/* Each path's own arithmetic for `batch` requests of n new tokens after ctx
 * cached ones, whose queries see pairs = n * ctx + n(n+1)/2 keys (causal
 * among the new ones). MHA up-projects the ctx + n latent rows to k_nope and
 * v (P + V per head), then attends with Dqk = P + R, Dv = V; absorbed folds
 * W_UK into q (P -> L), attends in the latent space (L + R, then L) and
 * projects the output through W_UV (L -> V). */
static double prefill_flops(mla_prefill_path path, int64_t batch, int64_t ctx, int64_t n,
                            int64_t heads)
{
    double pairs = (double)n * (double)ctx + (double)n * (double)(n + 1) / 2, h = (double)heads;
    double per_request =
        path == MLA_PREFILL_PATH_MHA
            ? 2.0 * (double)(ctx + n) * L * h * (P + V) + 2.0 * h * pairs * (P + R + V)
            : 2.0 * (double)n * h * L * (P + V) + 2.0 * h * pairs * (2 * L + R);
    return (double)batch * per_request;
}

static void print_prefill(const options *o, const mla_prefill_args *a, int64_t ctx, int threads,
                          const stats t[2], int64_t cold_copies, mla_dtype cache_dtype)
{
    const int64_t B = a->num_prefills, n = a->num_tokens / B, H = a->num_heads;
    mla_prefill_args auto_args = *a;
    auto_args.path = MLA_PREFILL_PATH_AUTO;
    const char *pick = mla_prefill_choose_path(&auto_args, 0) == MLA_PREFILL_PATH_ABSORBED
                           ? "absorbed" : "mha";
    const char *faster = t[1].median < t[0].median ? "absorbed" : "mha";
    const char *backend = mla_last_backend();
    const mla_config cfg = {.q_dtype = a->dtype, .cache_dtype = cache_dtype, .kv_lora_rank = L,
                            .rope_dim = R, .num_heads = H, .block_size = a->cache->block_size};
    const char *route = mla_backend_route(backend, &cfg);
    const double flops[2] = {prefill_flops(MLA_PREFILL_PATH_MHA, B, ctx, n, H),
                             prefill_flops(MLA_PREFILL_PATH_ABSORBED, B, ctx, n, H)};
    if (o->json) {
        printf("{\"op\":\"prefill\",\"backend\":\"%s\",\"route\":\"%s\",\"threads\":%d,"
               "\"batch\":%lld,\"ctx\":%lld,\"new_tokens\":%lld,\"heads\":%lld,\"mha_us\":%.3f",
               backend, route ? route : "?", threads, (long long)B, (long long)ctx, (long long)n,
               (long long)H, t[0].median * 1e6);
        print_stats_json("mha_", &t[0]);
        printf(",\"absorbed_us\":%.3f", t[1].median * 1e6);
        print_stats_json("absorbed_", &t[1]);
        printf(",\"mha_flops\":%.0f,\"absorbed_flops\":%.0f,\"mha_gflops\":%.3f,"
               "\"absorbed_gflops\":%.3f,\"faster\":\"%s\",\"model_picks\":\"%s\",\"probe\":\"%s\","
               "\"cold_copies\":%lld}\n",
               flops[0], flops[1], giga_per_s(flops[0], t[0].median),
               giga_per_s(flops[1], t[1].median), faster, pick, probe_mode(o),
               (long long)cold_copies);
        return;
    }
    char range[2][32], sd[2][16];
    for (int i = 0; i < 2; i++)
        format_spread(&t[i], range[i], sizeof range[i], sd[i], sizeof sd[i]);
    printf("prefill B=%lld ctx=%lld new=%lld H=%lld threads=%d on %s (%s): mha %.1f us (%s%%, "
           "sd %s%%), absorbed %.1f us (%s%%, sd %s%%), absorbed/mha %.2f; faster: %s; the cost "
           "model picks: %s\n",
           (long long)B, (long long)ctx, (long long)n, (long long)H, threads, backend,
           route ? route : "?", t[0].median * 1e6, range[0], sd[0], t[1].median * 1e6, range[1],
           sd[1], t[1].median / t[0].median, faster, pick);
}

int cmd_prefill(const options *o, const plan *p)
{
    (void)p;
    const int64_t B = o->batch_set ? o->batch : 1, n = o->tokens_set ? o->tokens : 64;
    const int64_t H = o->heads_set ? o->heads : 16, C = o->ctx, bs = o->block_size;
    const mla_dtype dtype = o->q_dtype < 0 ? MLA_DTYPE_F32 : (mla_dtype)o->q_dtype;
    const mla_dtype cache_dtype = o->cache_dtype < 0 ? MLA_DTYPE_BF16 : (mla_dtype)o->cache_dtype;
    const mla_dtype w_dtype = dtype == MLA_DTYPE_BF16 ? MLA_DTYPE_BF16 : MLA_DTYPE_F32;
    const int threads = o->threads > 0 ? o->threads : mla_default_threads();
    const int64_t T = B * n, cols = (C + n + bs - 1) / bs, blocks = B * cols;
    uint32_t rng = 7;
    int32_t *qsl = alloc((size_t)(B + 1) * sizeof(int32_t)), *ctx = alloc((size_t)B * sizeof(int32_t));
    int32_t *table = alloc((size_t)blocks * sizeof(int32_t));
    int64_t *perm = alloc((size_t)blocks * sizeof(int64_t));
    mla_kv_cache cache = {.data = alloc((size_t)(blocks * bs * WIDTH * mla_dtype_size(cache_dtype))),
                          .dtype = cache_dtype, .num_blocks = blocks, .block_size = bs,
                          .width = WIDTH, .scale = 0.02f};
    void *q = random_values(dtype, T * H * (P + R), 1.0f, &rng);
    void *kv_c = random_values(dtype, T * WIDTH, 1.0f, &rng);
    void *kvb = random_values(w_dtype, H * (P + V) * L, 0.044f, &rng);
    void *w_uk_t = alloc((size_t)(H * P * L * mla_dtype_size(w_dtype)));
    void *w_uv = alloc((size_t)(H * L * V * mla_dtype_size(w_dtype)));
    void *out = alloc((size_t)(T * H * V * mla_dtype_size(dtype)));
    mla_chunk_plan *chunks = NULL;
    void *kvb_packed = NULL;
    cold_inputs cold = {0};
    bool ok = qsl && ctx && table && perm && cache.data && q && kv_c && kvb && w_uk_t && w_uv && out;
    if (ok) {
        for (int64_t i = 0; i < blocks; i++)
            perm[i] = i;
        shuffle(perm, blocks, &rng);
        for (int64_t i = 0; i < blocks; i++)
            table[i] = (int32_t)perm[i];
        memset(cache.data, 0x3c, (size_t)(blocks * bs * WIDTH * mla_dtype_size(cache_dtype)));
        const void *inputs[] = {cache.data, q, kv_c};
        const size_t input_bytes[] = {
            (size_t)(blocks * bs * WIDTH * mla_dtype_size(cache_dtype)),
            (size_t)(T * H * (P + R) * mla_dtype_size(dtype)),
            (size_t)(T * WIDTH * mla_dtype_size(dtype))};
        ok = cold_inputs_make(&cold, o, inputs, input_bytes, 3, threads);
        qsl[0] = 0;
        for (int64_t r = 0; r < B; r++) {
            ctx[r] = (int32_t)C;
            qsl[r + 1] = (int32_t)((r + 1) * n);
        }
        /* both paths' weights prepared once, as a server does at load */
        mla_up_proj_args u = {.num_heads = H, .kv_lora_rank = L, .qk_nope_dim = P,
                              .v_head_dim = V, .kv_b_proj = kvb, .w_dtype = w_dtype,
                              .kv_c_dtype = dtype};
        int64_t W = 0, packed_bytes = 0;
        ok = ok && check(mla_prepare_weights(kvb, w_dtype, H, L, P, V, w_uk_t, w_uv, w_dtype, 0),
                   "mla_prepare_weights") &&
             check(mla_pack_kv_b_proj_size(&u, &packed_bytes), "mla_pack_kv_b_proj_size") &&
             (kvb_packed = alloc((size_t)packed_bytes)) != NULL &&
             check(mla_pack_kv_b_proj(&u, kvb_packed, packed_bytes, threads),
                   "mla_pack_kv_b_proj") &&
             check(mla_chunk_workspace_tokens(C + n, B, bs, 0, &W), "mla_chunk_workspace_tokens") &&
             check(mla_chunk_plan_create(ctx, qsl, B, W, bs, WIDTH, dtype, &chunks),
                   "mla_chunk_plan_create");
    }
    void *cache_data = cache.data; /* --cold points cache.data at its copies */
    prefill_bench pb[2];
    static const mla_prefill_path paths[2] = {MLA_PREFILL_PATH_MHA, MLA_PREFILL_PATH_ABSORBED};
    for (int i = 0; i < 2; i++) {
        pb[i] = (prefill_bench){
            .threads = threads, .cache = &cache, .cold = &cold,
            .args = {.num_prefills = B, .num_tokens = T, .num_heads = H, .kv_lora_rank = L,
                     .rope_dim = R, .qk_nope_dim = P, .v_head_dim = V, .scale = 0.1352f,
                     .dtype = dtype, .query_start_loc = qsl, .context_lens = ctx,
                     .plan = C > 0 ? chunks : NULL, .cache = &cache, .block_table = table,
                     .block_table_cols = cols, .q = q, .q_token_stride = H * (P + R),
                     .q_head_stride = P + R, .kv_c = kv_c, .kv_c_stride = WIDTH,
                     .k_pe = (char *)kv_c + L * mla_dtype_size(dtype), .k_pe_stride = WIDTH,
                     .kv_b_proj_packed = kvb_packed, .kv_b_proj_dtype = w_dtype, .w_uk_t = w_uk_t,
                     .w_uv = w_uv, .w_dtype = w_dtype, .out = out, .out_token_stride = H * V,
                     .path = paths[i]}};
        ok = ok && check(mla_prefill_workspace_size(&pb[i].args, threads, &pb[i].bytes),
                         "mla_prefill_workspace_size") &&
             (pb[i].workspace = alloc((size_t)pb[i].bytes)) != NULL;
    }
    stats s[2];
    if (ok && o->no_probe)
        ok = time_region(run_prefill, &pb[0], o->reps, o->seconds, &s[0]) &&
             time_region(run_prefill, &pb[1], o->reps, o->seconds, &s[1]);
    else if (ok)
        ok = time_interleaved(run_prefill, &pb[0], run_prefill, &pb[1], o->reps, o->seconds, &s[0],
                              &s[1]);
    if (ok)
        print_prefill(o, &pb[0].args, C, threads, s, cold.count, cache_dtype);
    mla_chunk_plan_destroy(chunks);
    cold_inputs_free(&cold);
    void *bufs[] = {qsl, ctx, table, perm, cache_data, q, kv_c, kvb, kvb_packed, w_uk_t, w_uv,
                    out, pb[0].workspace, pb[1].workspace};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    return ok ? 0 : 1;
}
