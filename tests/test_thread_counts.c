/*
 * Thread counts (mla.h, mla_default_threads): every op and workspace query
 * takes any int. 0 and negative counts mean mla_default_threads(); a count
 * past the largest of that, the processor count and MLA_THREAD_CAP_MIN runs
 * on that largest.
 * Unclamped, threads = INT_MAX ran libgomp out of memory, 40000 failed its
 * thread creation and 80000 overflowed a stack, each ending the process.
 * Every op that takes threads, on tiny shapes, gives with each such count
 * the bits it gives on one thread (with the default schedules these shapes
 * split no request), and a workspace query answers for a huge count what it
 * answers for the bound.
 */
#include "decode_cases.h"

#include <limits.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static const int counts[] = {0, -1, INT_MIN, 40000, 80000, INT_MAX};

/* What a count past the bound runs on. */
static int bound(void)
{
    int usual = omp_get_max_threads(), procs = omp_get_num_procs();
    int most = usual > procs ? usual : procs;
    return most > MLA_THREAD_CAP_MIN ? most : MLA_THREAD_CAP_MIN;
}

/* An op run on `threads` into its outputs (out, bytes long), for one case. */
typedef mla_status run_fn(void *ctx, int threads);

/* run(ctx, t) for every count t gives out the bytes run(ctx, 1) gives; out
 * is refilled with guard bytes before each run. */
static void expect_same_bits(const char *op, run_fn *run, void *ctx, void *out, size_t bytes)
{
    unsigned char *want = malloc(bytes);
    assert_non_null(want);
    memset(out, GUARD, bytes);
    mla_status st = run(ctx, 1);
    if (st != MLA_OK)
        fail_msg("%s on 1 thread: %s: %s", op, mla_status_str(st), mla_last_error());
    memcpy(want, out, bytes);
    for (int i = 0; i < COUNT(counts); i++) {
        memset(out, GUARD, bytes);
        st = run(ctx, counts[i]);
        if (st != MLA_OK)
            fail_msg("%s, threads = %d: %s: %s", op, counts[i], mla_status_str(st),
                     mla_last_error());
        if (memcmp(out, want, bytes) != 0)
            fail_msg("%s, threads = %d: not the bits of one thread", op, counts[i]);
    }
    free(want);
}

/* A workspace query (size(ctx, threads, &bytes)) answers for a count past
 * the bound, and for counts <= 0, what it answers for the count they run on. */
typedef mla_status size_fn(const void *ctx, int threads, int64_t *bytes);

static int64_t size_at(const char *op, size_fn *size, const void *ctx, int threads)
{
    int64_t bytes = -1;
    mla_status st = size(ctx, threads, &bytes);
    if (st != MLA_OK)
        fail_msg("%s size, threads = %d: %s: %s", op, threads, mla_status_str(st),
                 mla_last_error());
    return bytes;
}

static void expect_sizes(const char *op, size_fn *size, const void *ctx)
{
    const int64_t at_bound = size_at(op, size, ctx, bound());
    const int64_t usual = size_at(op, size, ctx, omp_get_max_threads());
    for (int i = 0; i < COUNT(counts); i++) {
        int64_t got = size_at(op, size, ctx, counts[i]), want = counts[i] > 0 ? at_bound : usual;
        if (got != want)
            fail_msg("%s size, threads = %d: %lld bytes, want %lld", op, counts[i],
                     (long long)got, (long long)want);
    }
}

/* ---- element-wise ops ---------------------------------------------------- */

enum { EW_N = 40000 }; /* enough elements for a team of two */

typedef struct ew_case {
    float src[EW_N];
    unsigned char dst[EW_N * 4];
    int kind; /* 0 convert to bf16, 1 to fp8 scaled, 2 exp */
} ew_case;

static mla_status run_ew(void *ctx, int threads)
{
    ew_case *c = ctx;
    if (c->kind == 0)
        return mla_convert(MLA_DTYPE_BF16, c->dst, MLA_DTYPE_F32, c->src, EW_N, threads);
    if (c->kind == 1)
        return mla_convert_scaled(MLA_DTYPE_FP8_E4M3, c->dst, MLA_DTYPE_F32, c->src, EW_N, 0.25f,
                                  threads);
    return mla_exp_f32((float *)c->dst, c->src, EW_N, threads);
}

static void test_elementwise(void **state)
{
    (void)state;
    static ew_case c;
    for (int i = 0; i < EW_N; i++)
        c.src[i] = (float)(4 * case_uniform());
    static const char *const names[] = {"mla_convert", "mla_convert_scaled", "mla_exp_f32"};
    for (c.kind = 0; c.kind < 3; c.kind++)
        expect_same_bits(names[c.kind], run_ew, &c, c.dst, sizeof c.dst);
}

/* ---- cache ops ----------------------------------------------------------- */

enum { C_L = 6, C_R = 2, C_W = C_L + C_R, C_BS = 4, C_BLOCKS = 5, C_TOKENS = 11 };

typedef struct cache_case {
    float rows[C_TOKENS * C_W], cache_data[C_BLOCKS * C_BS * C_W], dst[C_TOKENS * C_W];
    mla_kv_cache cache;
    int64_t slots[C_TOKENS];
    int32_t table[C_BLOCKS], cu[2], tts[C_TOKENS];
    mla_gather_spec spec;
} cache_case;

static mla_status run_concat(void *ctx, int threads)
{
    cache_case *c = ctx;
    return mla_concat_and_cache(&c->cache, c->rows, C_W, c->rows + C_L, C_W, MLA_DTYPE_F32, C_L,
                                C_R, c->slots, C_TOKENS, threads);
}

static mla_status run_gather(void *ctx, int threads)
{
    cache_case *c = ctx;
    return mla_gather_cache(&c->cache, &c->spec, c->tts, C_TOKENS, c->dst, MLA_DTYPE_F32, C_W,
                            threads);
}

static mla_status run_cp_gather(void *ctx, int threads)
{
    cache_case *c = ctx;
    return mla_cp_gather_cache(&c->cache, &c->spec, c->dst, C_W, threads);
}

static void test_cache_ops(void **state)
{
    (void)state;
    static cache_case c;
    for (int i = 0; i < C_TOKENS * C_W; i++)
        c.rows[i] = (float)case_uniform();
    for (int i = 0; i < C_BLOCKS; i++)
        c.table[i] = (i * 3 + 1) % C_BLOCKS; /* a permutation */
    for (int t = 0; t < C_TOKENS; t++)
        c.slots[t] = (int64_t)c.table[t / C_BS] * C_BS + t % C_BS;
    c.cache = (mla_kv_cache){.data = c.cache_data, .dtype = MLA_DTYPE_F32,
                             .num_blocks = C_BLOCKS, .block_size = C_BS, .width = C_W,
                             .scale = 1.0f};
    c.cu[1] = C_TOKENS;
    c.spec = (mla_gather_spec){.block_table = c.table, .block_table_cols = C_BLOCKS,
                               .num_reqs = 1, .cu_seq_lens = c.cu};
    expect_same_bits("mla_concat_and_cache", run_concat, &c, c.cache_data, sizeof c.cache_data);
    assert_int_equal(run_concat(&c, 1), MLA_OK);
    expect_same_bits("mla_gather_cache", run_gather, &c, c.dst, sizeof c.dst);
    expect_same_bits("mla_cp_gather_cache", run_cp_gather, &c, c.dst, sizeof c.dst);
}

/* ---- decode, weights, the decode forward --------------------------------- */

static mla_status run_decode(void *ctx, int threads)
{
    dcase *c = ctx;
    return case_run_decode(&c->args, threads, 0, "mla_decode");
}

static mla_status decode_size(const void *ctx, int threads, int64_t *bytes)
{
    return mla_decode_workspace_size(&((const dcase *)ctx)->args, threads, bytes);
}

static void test_decode(void **state)
{
    (void)state;
    /* rows of one 16-token unit each: the default schedule splits none */
    dspec s = {.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_BF16, .s_q = 2, .H = 3,
               .L = 16, .R = 4, .block_size = 4, .num_reqs = 3, .lens = {5, 9, 16},
               .form = Q_CONCAT, .lse = true, .threads = 1};
    dcase c;
    dcase_make(&c, &s, false);
    /* out and lse have buffers of their own: one comparison each */
    expect_same_bits("mla_decode (out)", run_decode, &c, c.out_buf, c.out_bytes);
    expect_same_bits("mla_decode (lse)", run_decode, &c, c.lse_buf, c.lse_bytes);
    expect_sizes("mla_decode_workspace_size", decode_size, &c);
    dcase_free(&c);
}

typedef struct weights_case {
    fcase *f;
    unsigned char *uk, *uv; /* one buffer: w_uk_t, then w_uv */
} weights_case;

static mla_status run_prepare(void *ctx, int threads)
{
    weights_case *w = ctx;
    const fspec *s = &w->f->s;
    return mla_prepare_weights(w->f->kvb, s->kvb_dtype, s->H, s->L, s->P, s->V, w->uk, w->uv,
                               s->w_dtype, threads);
}

static mla_status run_forward(void *ctx, int threads)
{
    fcase *c = ctx;
    return case_run_forward(&c->f, threads, 0, "mla_decode_forward");
}

static mla_status forward_size(const void *ctx, int threads, int64_t *bytes)
{
    return mla_decode_forward_workspace_size(&((const fcase *)ctx)->f, threads, bytes);
}

static void test_weights_and_forward(void **state)
{
    (void)state;
    fspec s = {.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_BF16,
               .kvb_dtype = MLA_DTYPE_F32, .w_dtype = MLA_DTYPE_BF16, .s_q = 1, .H = 3,
               .L = 16, .R = 4, .P = 8, .V = 8, .block_size = 4, .num_reqs = 2,
               .lens = {5, 9}, .lse = true, .threads = 1};
    fcase c;
    fcase_make(&c, &s);
    const size_t uk = (size_t)(s.H * s.P * s.L * 2), uv = (size_t)(s.H * s.L * s.V * 2);
    weights_case w = {.f = &c};
    w.uk = case_alloc(uk + uv);
    w.uv = w.uk + uk;
    expect_same_bits("mla_prepare_weights", run_prepare, &w, w.uk, uk + uv);
    free(w.uk);
    expect_same_bits("mla_decode_forward (out)", run_forward, &c, c.out_buf, c.out_bytes);
    expect_same_bits("mla_decode_forward (lse)", run_forward, &c, c.lse_buf, c.lse_bytes);
    expect_sizes("mla_decode_forward_workspace_size", forward_size, &c);
    fcase_free(&c);
}

/* ---- the prefill kernels --------------------------------------------------- */

enum { P_H = 2, P_QK = 8, P_V = 4, P_T = 8, P_S = 10 };

typedef struct kernels_case {
    float q[P_T * P_H * P_QK], k[P_S * P_H * P_QK], v[P_S * P_H * P_V];
    float out[P_T * P_H * P_V + P_H * P_T]; /* out, then lse */
    int32_t cu_q[3], cu_k[3];
    mla_flash_attn_args fa;
    float kv_c[P_S * P_QK], kvb[P_H * (P_QK + P_V) * P_QK];
    float kv[P_S * P_H * (P_QK + P_V)];
    mla_up_proj_args up;
    unsigned char *packed;
    int64_t packed_bytes;
    float pre[P_T * P_H * P_V], suf[P_T * P_H * P_V], pre_lse[P_H * P_T], suf_lse[P_H * P_T];
    mla_merge_attn_args merge;
} kernels_case;

/* An op that takes a workspace, and running it in one of the size its
 * query gives for `threads`. */
typedef mla_status workspace_op_fn(void *ctx, void *ws, int64_t bytes, int threads);

static mla_status in_workspace(size_fn *size, workspace_op_fn *op, void *ctx, int threads)
{
    int64_t bytes = 0;
    mla_status st = size(ctx, threads, &bytes);
    if (st != MLA_OK)
        return st;
    void *ws = case_alloc((size_t)bytes);
    st = op(ctx, ws, bytes, threads);
    free(ws);
    return st;
}

static mla_status flash_size(const void *ctx, int threads, int64_t *bytes)
{
    return mla_flash_attn_varlen_workspace_size(&((const kernels_case *)ctx)->fa, threads, bytes);
}

static mla_status flash_op(void *ctx, void *ws, int64_t bytes, int threads)
{
    return mla_flash_attn_varlen(&((kernels_case *)ctx)->fa, ws, bytes, threads);
}

static mla_status run_flash(void *ctx, int threads)
{
    return in_workspace(flash_size, flash_op, ctx, threads);
}

static mla_status up_proj_size(const void *ctx, int threads, int64_t *bytes)
{
    return mla_up_proj_workspace_size(&((const kernels_case *)ctx)->up, threads, bytes);
}

static mla_status up_proj_op(void *ctx, void *ws, int64_t bytes, int threads)
{
    return mla_up_proj(&((kernels_case *)ctx)->up, ws, bytes, threads);
}

static mla_status run_up_proj(void *ctx, int threads)
{
    return in_workspace(up_proj_size, up_proj_op, ctx, threads);
}

static mla_status run_pack(void *ctx, int threads)
{
    kernels_case *c = ctx;
    return mla_pack_kv_b_proj(&c->up, c->packed, c->packed_bytes, threads);
}

static mla_status run_merge(void *ctx, int threads)
{
    kernels_case *c = ctx;
    return mla_merge_attn_states(&c->merge, threads);
}

static void test_prefill_kernels(void **state)
{
    (void)state;
    static kernels_case c;
    float *all[] = {c.q, c.k, c.v, c.kv_c, c.kvb, c.pre, c.suf, c.pre_lse, c.suf_lse};
    const size_t sizes[] = {sizeof c.q, sizeof c.k, sizeof c.v, sizeof c.kv_c, sizeof c.kvb,
                            sizeof c.pre, sizeof c.suf, sizeof c.pre_lse, sizeof c.suf_lse};
    for (int a = 0; a < COUNT(all); a++)
        for (size_t i = 0; i < sizes[a] / sizeof(float); i++)
            all[a][i] = (float)case_uniform();
    const int32_t cu_q[3] = {0, 3, P_T}, cu_k[3] = {0, 4, P_S};
    memcpy(c.cu_q, cu_q, sizeof cu_q);
    memcpy(c.cu_k, cu_k, sizeof cu_k);
    c.fa = (mla_flash_attn_args){
        .num_seqs = 2, .num_heads = P_H, .qk_dim = P_QK, .v_dim = P_V, .causal = true,
        .scale = 0.4f, .dtype = MLA_DTYPE_F32, .total_q = P_T, .total_k = P_S,
        .cu_seqlens_q = c.cu_q, .cu_seqlens_k = c.cu_k, .q = c.q,
        .q_token_stride = P_H * P_QK, .q_head_stride = P_QK, .k = c.k,
        .k_token_stride = P_H * P_QK, .k_head_stride = P_QK, .v = c.v,
        .v_token_stride = P_H * P_V, .v_head_stride = P_V, .out = c.out,
        .out_token_stride = P_H * P_V, .out_head_stride = P_V, .lse = c.out + P_T * P_H * P_V};
    expect_same_bits("mla_flash_attn_varlen", run_flash, &c, c.out, sizeof c.out);
    expect_sizes("mla_flash_attn_varlen_workspace_size", flash_size, &c);

    const int64_t PV = P_QK + P_V;
    c.up = (mla_up_proj_args){
        .num_tokens = P_S, .num_heads = P_H, .kv_lora_rank = P_QK, .qk_nope_dim = P_QK,
        .v_head_dim = P_V, .kv_c = c.kv_c, .kv_c_dtype = MLA_DTYPE_F32, .kv_c_stride = P_QK,
        .kv_b_proj = c.kvb, .w_dtype = MLA_DTYPE_F32, .out_dtype = MLA_DTYPE_F32, .k_nope = c.kv,
        .k_nope_token_stride = P_H * PV, .k_nope_head_stride = PV, .v = c.kv + P_QK,
        .v_token_stride = P_H * PV, .v_head_stride = PV};
    expect_same_bits("mla_up_proj", run_up_proj, &c, c.kv, sizeof c.kv);
    expect_sizes("mla_up_proj_workspace_size", up_proj_size, &c);
    assert_int_equal(mla_pack_kv_b_proj_size(&c.up, &c.packed_bytes), MLA_OK);
    c.packed = case_alloc((size_t)c.packed_bytes);
    expect_same_bits("mla_pack_kv_b_proj", run_pack, &c, c.packed, (size_t)c.packed_bytes);
    free(c.packed);

    c.merge = (mla_merge_attn_args){
        .num_tokens = P_T, .num_heads = P_H, .head_dim = P_V, .dtype = MLA_DTYPE_F32,
        .prefix = c.pre, .suffix = c.suf, .token_stride = P_H * P_V, .head_stride = P_V,
        .prefix_lse = c.pre_lse, .suffix_lse = c.suf_lse, .out = c.out,
        .out_token_stride = P_H * P_V, .out_head_stride = P_V,
        .out_lse = c.out + P_T * P_H * P_V, .prefill_tokens_with_context = 5};
    expect_same_bits("mla_merge_attn_states", run_merge, &c, c.out, sizeof c.out);
}

/* ---- the prefill op ------------------------------------------------------- */

enum { F_H = 2, F_L = 8, F_R = 2, F_P = 4, F_V = 4, F_BS = 4, F_BLOCKS = 5, F_T = 8 };

typedef struct prefill_case {
    float cache_data[F_BLOCKS * F_BS * (F_L + F_R)], q[F_T * F_H * (F_P + F_R)];
    float kv_c[F_T * F_L], k_pe[F_T * F_R], kvb[F_H * (F_P + F_V) * F_L];
    float w_uk_t[F_H * F_P * F_L], w_uv[F_H * F_L * F_V], out[F_T * F_H * F_V];
    mla_kv_cache cache;
    int32_t qsl[3], ctx[2], table[6];
    mla_chunk_plan *plan;
    mla_prefill_args a;
} prefill_case;

static mla_status prefill_size(const void *ctx, int threads, int64_t *bytes)
{
    return mla_prefill_workspace_size(&((const prefill_case *)ctx)->a, threads, bytes);
}

static mla_status prefill_op(void *ctx, void *ws, int64_t bytes, int threads)
{
    return mla_prefill(&((prefill_case *)ctx)->a, ws, bytes, threads);
}

static mla_status run_prefill(void *ctx, int threads)
{
    return in_workspace(prefill_size, prefill_op, ctx, threads);
}

static void test_prefill(void **state)
{
    (void)state;
    static prefill_case c;
    float *all[] = {c.cache_data, c.q, c.kv_c, c.k_pe, c.kvb};
    const size_t sizes[] = {sizeof c.cache_data, sizeof c.q, sizeof c.kv_c, sizeof c.k_pe,
                            sizeof c.kvb};
    for (int a = 0; a < COUNT(all); a++)
        for (size_t i = 0; i < sizes[a] / sizeof(float); i++)
            all[a][i] = (float)case_uniform();
    assert_int_equal(mla_prepare_weights(c.kvb, MLA_DTYPE_F32, F_H, F_L, F_P, F_V, c.w_uk_t,
                                         c.w_uv, MLA_DTYPE_F32, 1), MLA_OK);
    c.cache = (mla_kv_cache){.data = c.cache_data, .dtype = MLA_DTYPE_F32,
                             .num_blocks = F_BLOCKS, .block_size = F_BS, .width = F_L + F_R,
                             .scale = 1.0f};
    /* request 0: 6 cached + 3 new (3 blocks); request 1: 5 new (2 blocks) */
    const int32_t qsl[3] = {0, 3, F_T}, ctx[2] = {6, 0}, table[6] = {2, 0, 4, 1, 3, 0};
    memcpy(c.qsl, qsl, sizeof qsl);
    memcpy(c.ctx, ctx, sizeof ctx);
    memcpy(c.table, table, sizeof table);
    assert_int_equal(mla_chunk_plan_create(c.ctx, c.qsl, 2, 8, F_BS, F_L + F_R, MLA_DTYPE_F32,
                                           &c.plan), MLA_OK);
    c.a = (mla_prefill_args){
        .num_prefills = 2, .num_tokens = F_T, .num_heads = F_H, .kv_lora_rank = F_L,
        .rope_dim = F_R, .qk_nope_dim = F_P, .v_head_dim = F_V, .scale = 0.3f,
        .dtype = MLA_DTYPE_F32, .query_start_loc = c.qsl, .context_lens = c.ctx,
        .plan = c.plan, .cache = &c.cache, .block_table = c.table, .block_table_cols = 3,
        .q = c.q, .q_token_stride = F_H * (F_P + F_R), .q_head_stride = F_P + F_R,
        .kv_c = c.kv_c, .kv_c_stride = F_L, .k_pe = c.k_pe, .k_pe_stride = F_R,
        .kv_b_proj = c.kvb, .kv_b_proj_dtype = MLA_DTYPE_F32, .w_uk_t = c.w_uk_t,
        .w_uv = c.w_uv, .w_dtype = MLA_DTYPE_F32, .out = c.out, .out_token_stride = F_H * F_V};
    static const mla_prefill_path paths[] = {MLA_PREFILL_PATH_MHA, MLA_PREFILL_PATH_ABSORBED};
    static const char *const names[] = {"mla_prefill (mha)", "mla_prefill (absorbed)"};
    for (int p = 0; p < COUNT(paths); p++) {
        c.a.path = paths[p];
        expect_same_bits(names[p], run_prefill, &c, c.out, sizeof c.out);
        expect_sizes("mla_prefill_workspace_size", prefill_size, &c);
    }
    mla_chunk_plan_destroy(c.plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elementwise),     cmocka_unit_test(test_cache_ops),
        cmocka_unit_test(test_decode),          cmocka_unit_test(test_weights_and_forward),
        cmocka_unit_test(test_prefill_kernels), cmocka_unit_test(test_prefill),
    };
    return cmocka_run_group_tests_name("thread_counts", tests, NULL, NULL);
}
