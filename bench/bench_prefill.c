/*
 * mla_bench prefill: mla_prefill of --batch requests, each --tokens new
 * tokens (default 64) after --ctx cached ones, --heads heads (default 16),
 * L = 512, R = 64, P = V = 128, q in --q-dtype over a --cache-dtype cache
 * (bf16), on the backends auto-selection picks, at --threads. Each path is
 * forced in turn and timed alternately rep by rep, then the path the cost
 * model picks is named: a sweep over --tokens and --ctx finds the crossover.
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { L = 512, R = 64, P = 128, V = 128, WIDTH = L + R };

typedef struct prefill_bench {
    mla_prefill_args args;
    void *workspace;
    int64_t bytes;
    int threads;
} prefill_bench;

static bool run_prefill(void *ctx)
{
    const prefill_bench *b = ctx;
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
    bool ok = qsl && ctx && table && perm && cache.data && q && kv_c && kvb && w_uk_t && w_uv && out;
    if (ok) {
        for (int64_t i = 0; i < blocks; i++)
            perm[i] = i;
        shuffle(perm, blocks, &rng);
        for (int64_t i = 0; i < blocks; i++)
            table[i] = (int32_t)perm[i];
        memset(cache.data, 0x3c, (size_t)(blocks * bs * WIDTH * mla_dtype_size(cache_dtype)));
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
        ok = check(mla_prepare_weights(kvb, w_dtype, H, L, P, V, w_uk_t, w_uv, w_dtype, 0),
                   "mla_prepare_weights") &&
             check(mla_pack_kv_b_proj_size(&u, &packed_bytes), "mla_pack_kv_b_proj_size") &&
             (kvb_packed = alloc((size_t)packed_bytes)) != NULL &&
             check(mla_pack_kv_b_proj(&u, kvb_packed, packed_bytes, threads),
                   "mla_pack_kv_b_proj") &&
             check(mla_chunk_workspace_tokens(C + n, B, bs, 0, &W), "mla_chunk_workspace_tokens") &&
             check(mla_chunk_plan_create(ctx, qsl, B, W, bs, WIDTH, dtype, &chunks),
                   "mla_chunk_plan_create");
    }
    prefill_bench pb[2];
    static const mla_prefill_path paths[2] = {MLA_PREFILL_PATH_MHA, MLA_PREFILL_PATH_ABSORBED};
    for (int i = 0; i < 2; i++) {
        pb[i] = (prefill_bench){
            .threads = threads,
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
    double s[2] = {0, 0};
    if (ok)
        ok = time_interleaved(run_prefill, &pb[0], run_prefill, &pb[1], o->reps, &s[0], &s[1]);
    if (ok) {
        mla_prefill_args a = pb[0].args;
        a.path = MLA_PREFILL_PATH_AUTO;
        const char *pick = mla_prefill_choose_path(&a, 0) == MLA_PREFILL_PATH_ABSORBED ? "absorbed"
                                                                                       : "mha";
        if (o->json)
            printf("{\"op\": \"prefill\", \"batch\": %lld, \"ctx\": %lld, \"new_tokens\": %lld, "
                   "\"heads\": %lld, \"threads\": %d, \"mha_us\": %.1f, \"absorbed_us\": %.1f, "
                   "\"faster\": \"%s\", \"model_picks\": \"%s\"}\n", (long long)B, (long long)C,
                   (long long)n, (long long)H, threads, s[0] * 1e6, s[1] * 1e6,
                   s[1] < s[0] ? "absorbed" : "mha", pick);
        else
            printf("prefill B=%lld ctx=%lld new=%lld H=%lld threads=%d: mha %.1f us, absorbed "
                   "%.1f us (absorbed/mha %.2f); faster: %s; the cost model picks: %s\n",
                   (long long)B, (long long)C, (long long)n, (long long)H, threads, s[0] * 1e6,
                   s[1] * 1e6, s[1] / s[0], s[1] < s[0] ? "absorbed" : "mha", pick);
    }
    mla_chunk_plan_destroy(chunks);
    void *bufs[] = {qsl, ctx, table, perm, cache.data, q, kv_c, kvb, kvb_packed, w_uk_t, w_uv,
                    out, pb[0].workspace, pb[1].workspace};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    return ok ? 0 : 1;
}
