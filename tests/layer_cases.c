/*
 * A layer's step, shared by the thread suites (test_concurrency.c,
 * test_parallel_hook.c): B requests with cached context and new tokens, a
 * paged cache, and every op a step runs on them in order (the cache ops,
 * decode and decode_forward, the prefill kernels and mla_prefill on both
 * paths), later calls reading what earlier ones wrote. Everything the calls
 * write lies in one arena (the cache first, guard bytes elsewhere), so a
 * suite compares a call's effect whole, bit for bit.
 */
#include "layer_cases.h"

#include "oracle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const call_names[CALLS] = {
    "mla_concat_and_cache", "mla_gather_cache", "mla_cp_gather_cache", "mla_decode",
    "mla_decode_forward", "mla_up_proj", "mla_flash_attn_varlen", "mla_flash_attn_varlen (causal)",
    "mla_merge_attn_states", "mla_prefill (mha)", "mla_prefill (absorbed)",
};

static const mla_decode_sched_params split_sched = {.block_n = 16,
                                                    .split_blocks = 1};

void *layer_alloc_or_fail(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

/* n random values in [-1, 1) as dtype (fp8: with scale) stores them. */
void *layer_random_values(mla_dtype dtype, int64_t n, float scale)
{
    void *p = layer_alloc_or_fail((size_t)(n * mla_dtype_size(dtype)));
    for (int64_t i = 0; i < n; i++)
        oracle_store(dtype, p, i, (float)case_uniform(), scale);
    return p;
}

void *layer_carve(layer *ly, int64_t bytes)
{
    unsigned char *p = ly->end;
    ly->end += (bytes + 63) / 64 * 64;
    assert_true(ly->end <= ly->arena + ly->arena_bytes);
    return p;
}

/* The layer's workspace holds what each call asks (*bytes, by `st`). */
static void need_workspace(layer *ly, mla_status st, const int64_t *bytes)
{
    if (st != MLA_OK)
        fail_msg("workspace query: %s: %s", mla_status_str(st), mla_last_error());
    ly->ws_bytes = *bytes > ly->ws_bytes ? *bytes : ly->ws_bytes;
}

void layer_make(layer *ly, const layer_shape *shape, const layer_spec *s)
{
    memset(ly, 0, sizeof *ly);
    assert_true(shape->num_reqs <= LAYER_MAX_REQS);
    ly->s = *s;
    ly->shape = *shape;
    const int64_t B = shape->num_reqs, H = shape->H, L = shape->L, R = shape->R, P = shape->P,
                  V = shape->V, BS = shape->block_size, S_Q = shape->s_q;
    const int32_t *LENS = ly->shape.lens, *NEWS = ly->shape.news;
    const int64_t D = L + R, elem = ly->elem = mla_dtype_size(s->dtype);
    const mla_dtype dt = s->dtype;
    int64_t blocks = 0;
    for (int b = 0; b < B; b++) {
        ly->ctx[b] = LENS[b] - NEWS[b];
        ly->qsl[b + 1] = ly->qsl[b] + NEWS[b];
        ly->cu_ctx[b + 1] = ly->cu_ctx[b] + ly->ctx[b];
        const int64_t need = (LENS[b] + BS - 1) / BS;
        ly->cols = need > ly->cols ? need : ly->cols;
        blocks += need;
    }
    ly->td = B * S_Q;
    ly->tp = ly->qsl[B];
    ly->ctx_total = ly->cu_ctx[B];
    /* the block table: requests' blocks interleaved */
    ly->table = layer_alloc_or_fail(sizeof(int32_t) * (size_t)(B * ly->cols));
    int64_t next = 0;
    for (int64_t c = 0; c < ly->cols; c++)
        for (int b = 0; b < B; b++)
            if (c * BS < LENS[b])
                ly->table[b * ly->cols + c] = (int32_t)next++;
    ly->slots = layer_alloc_or_fail(sizeof(int64_t) * (size_t)ly->tp);
    for (int b = 0; b < B; b++)
        for (int32_t i = 0; i < NEWS[b]; i++) {
            const int64_t pos = ly->ctx[b] + i;
            ly->slots[ly->qsl[b] + i] = ly->table[b * ly->cols + pos / BS] * (int64_t)BS + pos % BS;
        }
    ly->to_seq = layer_alloc_or_fail(sizeof(int32_t) * (size_t)ly->ctx_total);
    for (int b = 0; b < B; b++)
        for (int32_t t = ly->cu_ctx[b]; t < ly->cu_ctx[b + 1]; t++)
            ly->to_seq[t] = b;

    /* inputs */
    ly->new_kv_c = layer_random_values(dt, ly->tp * L, 1.0f);
    ly->new_k_pe = layer_random_values(dt, ly->tp * R, 1.0f);
    ly->q_lat = layer_random_values(dt, ly->td * H * D, 1.0f);
    ly->q_fwd = layer_random_values(dt, ly->td * H * (P + R), 1.0f);
    ly->q_pre = layer_random_values(dt, ly->tp * H * (P + R), 1.0f);
    ly->kvb = layer_random_values(dt, H * (P + V) * L, 0.2f);
    ly->w_dtype = dt == MLA_DTYPE_BF16 ? MLA_DTYPE_BF16 : MLA_DTYPE_F32;
    const int64_t w_elem = mla_dtype_size(ly->w_dtype);
    ly->w_uk_t = layer_alloc_or_fail((size_t)(H * P * L * w_elem));
    ly->w_uv = layer_alloc_or_fail((size_t)(H * L * V * w_elem));
    assert_int_equal(mla_prepare_weights(ly->kvb, dt, H, L, P, V, ly->w_uk_t, ly->w_uv,
                                         ly->w_dtype, 1), MLA_OK);
    assert_int_equal(mla_chunk_plan_create(ly->ctx, ly->qsl, B, shape->chunk_tokens, BS, D, dt, &ly->plan),
                     MLA_OK);

    /* the arena: the cache, then every output */
    const int64_t cache_elem = mla_dtype_size(s->cache_dtype);
    const int64_t cache_bytes = blocks * BS * D * cache_elem;
    enum { REGIONS = 16 }; /* what carve hands out, each rounded up to 64 bytes */
    ly->arena_bytes = (size_t)(cache_bytes + ly->ctx_total * D * (elem + cache_elem) +
                               (ly->td * H * (L + V) + ly->ctx_total * H * (P + V) +
                                5 * ly->tp * H * V) * elem + 64 * REGIONS) +
                      sizeof(float) * (size_t)(2 * B * H * S_Q + 3 * H * ly->tp) +
                      (size_t)shape->extra_bytes;
    ly->arena = case_alloc(ly->arena_bytes);
    memset(ly->arena, GUARD, ly->arena_bytes);
    ly->end = ly->arena;
    ly->cache = (mla_kv_cache){.data = layer_carve(ly, cache_bytes), .dtype = s->cache_dtype,
                               .num_blocks = blocks, .block_size = BS, .width = D,
                               .scale = mla_dtype_size(s->cache_dtype) == 1 ? 0.05f : 1.0f};
    for (int64_t i = 0; i < blocks * BS * D; i++)
        oracle_store(s->cache_dtype, ly->cache.data, i, (float)case_uniform(), ly->cache.scale);

    ly->gather = (mla_gather_spec){.block_table = ly->table, .block_table_cols = ly->cols,
                                   .num_reqs = B, .cu_seq_lens = ly->cu_ctx};
    ly->gathered = layer_carve(ly, ly->ctx_total * D * elem);
    ly->cp_gathered = layer_carve(ly, ly->ctx_total * D * mla_dtype_size(s->cache_dtype));

    ly->decode = (mla_decode_args){
        .num_reqs = B, .s_q = S_Q, .num_heads = H, .kv_lora_rank = L, .rope_dim = R,
        .scale = 0.125f, .q_dtype = dt, .q_nope = ly->q_lat, .q_nope_token_stride = H * D,
        .q_nope_head_stride = D, .q_pe = (char *)ly->q_lat + L * elem, .q_pe_token_stride = H * D,
        .q_pe_head_stride = D, .cache = &ly->cache, .block_table = ly->table,
        .block_table_cols = ly->cols, .seq_lens = LENS, .out = layer_carve(ly, ly->td * H * L * elem),
        .out_token_stride = H * L, .out_head_stride = L,
        .lse = layer_carve(ly, sizeof(float) * B * H * S_Q), .bf16_compute = s->bf16_compute};
    ly->forward = case_forward_of(&ly->decode);
    ly->forward.lse = layer_carve(ly, sizeof(float) * B * H * S_Q);
    ly->forward.sched = &split_sched;
    ly->forward.qk_nope_dim = P;
    ly->forward.v_head_dim = V;
    ly->forward.q = ly->q_fwd;
    ly->forward.q_token_stride = H * (P + R);
    ly->forward.q_head_stride = P + R;
    ly->forward.w_uk_t = ly->w_uk_t;
    ly->forward.w_uv = ly->w_uv;
    ly->forward.w_dtype = ly->w_dtype;
    ly->forward.out = layer_carve(ly, ly->td * H * V * elem);
    ly->forward.out_token_stride = H * V;

    /* prefill kernels over the gathered context: k_nope and v up-projected
     * into one [S, H, P + V] buffer, attention of the new tokens' q over
     * it (k_pe read from the gathered rows), the two results merged */
    void *kv = layer_carve(ly, ly->ctx_total * H * (P + V) * elem);
    ly->up = (mla_up_proj_args){
        .num_tokens = ly->ctx_total, .num_heads = H, .kv_lora_rank = L, .qk_nope_dim = P,
        .v_head_dim = V, .kv_c = ly->gathered, .kv_c_dtype = dt, .kv_c_stride = D,
        .kv_b_proj = ly->kvb, .w_dtype = dt, .out_dtype = dt, .k_nope = kv,
        .k_nope_token_stride = H * (P + V), .k_nope_head_stride = P + V,
        .v = (char *)kv + P * elem, .v_token_stride = H * (P + V), .v_head_stride = P + V};
    for (int c = 0; c < 2; c++)
        ly->flash[c] = (mla_flash_attn_args){
            .num_seqs = B, .num_heads = H, .qk_dim = P + R, .v_dim = V, .rope_dim = R,
            .causal = c == 1, .scale = 0.125f, .dtype = dt, .total_q = ly->tp,
            .total_k = ly->ctx_total, .cu_seqlens_q = ly->qsl, .cu_seqlens_k = ly->cu_ctx,
            .q = ly->q_pre, .q_token_stride = H * (P + R), .q_head_stride = P + R, .k = kv,
            .k_token_stride = H * (P + V), .k_head_stride = P + V,
            .k_pe = (char *)ly->gathered + L * elem, .k_pe_token_stride = D,
            .v = (char *)kv + P * elem, .v_token_stride = H * (P + V), .v_head_stride = P + V,
            .out = layer_carve(ly, ly->tp * H * V * elem), .out_token_stride = H * V,
            .out_head_stride = V, .lse = layer_carve(ly, sizeof(float) * H * ly->tp)};
    ly->merge = (mla_merge_attn_args){
        .num_tokens = ly->tp, .num_heads = H, .head_dim = V, .dtype = dt,
        .prefix = ly->flash[0].out, .suffix = ly->flash[1].out, .token_stride = H * V,
        .head_stride = V, .prefix_lse = ly->flash[0].lse, .suffix_lse = ly->flash[1].lse,
        .out = layer_carve(ly, ly->tp * H * V * elem), .out_token_stride = H * V, .out_head_stride = V,
        .out_lse = layer_carve(ly, sizeof(float) * H * ly->tp),
        .prefill_tokens_with_context = MLA_MERGE_ALL_TOKENS};
    for (int p = 0; p < 2; p++)
        ly->prefill[p] = (mla_prefill_args){
            .num_prefills = B, .num_tokens = ly->tp, .num_heads = H, .kv_lora_rank = L,
            .rope_dim = R, .qk_nope_dim = P, .v_head_dim = V, .scale = 0.125f, .dtype = dt,
            .query_start_loc = ly->qsl, .context_lens = ly->ctx, .plan = ly->plan,
            .cache = &ly->cache, .block_table = ly->table, .block_table_cols = ly->cols,
            .q = ly->q_pre, .q_token_stride = H * (P + R), .q_head_stride = P + R,
            .kv_c = ly->new_kv_c, .kv_c_stride = L, .k_pe = ly->new_k_pe, .k_pe_stride = R,
            .kv_b_proj = ly->kvb, .kv_b_proj_dtype = dt, .w_uk_t = ly->w_uk_t, .w_uv = ly->w_uv,
            .w_dtype = ly->w_dtype, .out = layer_carve(ly, ly->tp * H * V * elem),
            .out_token_stride = H * V,
            .path = p == 0 ? MLA_PREFILL_PATH_MHA : MLA_PREFILL_PATH_ABSORBED};
    ly->initial = layer_alloc_or_fail(ly->arena_bytes);
    memcpy(ly->initial, ly->arena, ly->arena_bytes);

    int64_t n;
    const int t = s->threads;
    need_workspace(ly, mla_decode_workspace_size(&ly->decode, t, &n), &n);
    need_workspace(ly, mla_decode_forward_workspace_size(&ly->forward, t, &n), &n);
    need_workspace(ly, mla_up_proj_workspace_size(&ly->up, t, &n), &n);
    for (int c = 0; c < 2; c++)
        need_workspace(ly, mla_flash_attn_varlen_workspace_size(&ly->flash[c], t, &n), &n);
    for (int p = 0; p < 2; p++)
        need_workspace(ly, mla_prefill_workspace_size(&ly->prefill[p], t, &n), &n);
    ly->ws = case_alloc((size_t)ly->ws_bytes);
}

void layer_free(layer *ly)
{
    void *bufs[] = {ly->table, ly->to_seq, ly->slots, ly->new_kv_c, ly->new_k_pe, ly->q_lat,
                    ly->q_fwd, ly->q_pre, ly->kvb, ly->w_uk_t, ly->w_uv, ly->arena,
                    ly->initial, ly->ws};
    for (int i = 0; i < COUNT(bufs); i++)
        free(bufs[i]);
    for (int k = 0; k < CALLS; k++)
        free(ly->want[k]);
    mla_chunk_plan_destroy(ly->plan);
}

mla_status layer_call(layer *ly, call k, int threads)
{
    const int64_t L = ly->shape.L, R = ly->shape.R, D = L + R;
    switch (k) {
    case CONCAT:
        return mla_concat_and_cache(&ly->cache, ly->new_kv_c, L, ly->new_k_pe, R, ly->s.dtype, L,
                                    R, ly->slots, ly->tp, threads);
    case GATHER:
        return mla_gather_cache(&ly->cache, &ly->gather, ly->to_seq, ly->ctx_total, ly->gathered,
                                ly->s.dtype, D, threads);
    case CP_GATHER:
        return mla_cp_gather_cache(&ly->cache, &ly->gather, ly->cp_gathered, D, threads);
    case DECODE:
        return mla_decode(&ly->decode, ly->ws, ly->ws_bytes, threads);
    case FORWARD:
        return mla_decode_forward(&ly->forward, ly->ws, ly->ws_bytes, threads);
    case UP_PROJ:
        return mla_up_proj(&ly->up, ly->ws, ly->ws_bytes, threads);
    case FLASH:
    case FLASH_CAUSAL:
        return mla_flash_attn_varlen(&ly->flash[k - FLASH], ly->ws, ly->ws_bytes, threads);
    case MERGE:
        return mla_merge_attn_states(&ly->merge, threads);
    case PREFILL_MHA:
    case PREFILL_ABSORBED:
        return mla_prefill(&ly->prefill[k - PREFILL_MHA], ly->ws, ly->ws_bytes, threads);
    case CALLS:
        break;
    }
    return MLA_ERR_INVALID_ARGUMENT;
}

const char *layer_label(const layer *ly, char *buf, size_t size)
{
    snprintf(buf, size, "layer of %s, cache %s%s, %d threads", mla_dtype_name(ly->s.dtype),
             mla_dtype_name(ly->s.cache_dtype), ly->s.bf16_compute ? " (bf16 compute)" : "",
             ly->s.threads);
    return buf;
}
