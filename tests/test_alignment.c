/*
 * Callers' buffers at any byte address (mla.h, "Alignment"): each op, on
 * every backend this CPU can run, given its tensors 1 to 3 bytes past an
 * element boundary (and its workspace too), writes the bytes the same call
 * writes on element-aligned buffers. Built with -fsanitize=undefined, a
 * misaligned load or store anywhere on these paths fails the suite.
 */
#include "flash_attn_cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A copy of the bytes [src, src + bytes) `shift` bytes into the fresh
 * allocation *mem; returns the copy of src. */
static void *shifted(const void *src, size_t bytes, int shift, void **mem)
{
    *mem = malloc(bytes + (size_t)shift);
    assert_non_null(*mem);
    return memcpy((char *)*mem + shift, src, bytes);
}

/* Where p, a pointer into [from, ...), lies in the copy starting at to. */
static void *moved(const void *p, const void *from, void *to)
{
    return (char *)to + ((const char *)p - (const char *)from);
}

static void *copy_of(const void *src, size_t bytes)
{
    void *p = malloc(bytes);
    assert_non_null(p);
    return memcpy(p, src, bytes);
}

/* Two buffers' bytes, one after the other, in a fresh allocation. */
static unsigned char *joined(const void *x, size_t x_bytes, const void *y, size_t y_bytes,
                             size_t *bytes)
{
    *bytes = x_bytes + y_bytes;
    unsigned char *p = malloc(*bytes);
    assert_non_null(p);
    memcpy(p, x, x_bytes);
    memcpy(p + x_bytes, y, y_bytes);
    return p;
}

/* Runs an op on its buffers `shift` bytes past fresh allocations; returns
 * a copy of what it wrote, *bytes long. */
typedef unsigned char *shifted_run(void *ctx, int shift, size_t *bytes);

/* run at 1, 2 and 3 bytes off writes what it writes aligned, on backend b. */
static void expect_any_offset(shifted_run *run, void *ctx, const char *what,
                              const mla_backend_desc *b)
{
    size_t bytes, again;
    unsigned char *want = run(ctx, 0, &bytes);
    support_expect_ran(b);
    for (int shift = 1; shift <= 3; shift++) {
        unsigned char *got = run(ctx, shift, &again);
        if (again != bytes || memcmp(got, want, bytes) != 0)
            fail_msg("%s: %s, buffers %d bytes off: other bytes than aligned", b->name, what,
                     shift);
        free(got);
    }
    free(want);
}

/* ---- decode -------------------------------------------------------------------- */

/* out's buffer (guards included) and lse's. */
static unsigned char *run_decode(void *ctx, int shift, size_t *bytes)
{
    dcase *c = ctx;
    dcase_reset_outputs(c);
    mla_decode_args a = c->args;
    void *mem[4] = {NULL, NULL, NULL, NULL};
    void *qn = shifted(c->qn_base, c->qn_bytes, shift, &mem[0]);
    a.q_nope = moved(c->args.q_nope, c->qn_base, qn);
    if (a.q_pe && c->qp_base)
        a.q_pe = moved(c->args.q_pe, c->qp_base, shifted(c->qp_base, c->qp_bytes, shift, &mem[1]));
    else if (a.q_pe)
        a.q_pe = moved(c->args.q_pe, c->qn_base, qn);
    mla_kv_cache cache = c->pg.cache;
    cache.data = shifted(cache.data, c->pg.bytes, shift, &mem[2]);
    a.cache = &cache;
    unsigned char *out = shifted(c->out_buf, c->out_bytes, shift, &mem[3]);
    a.out = moved(c->args.out, c->out_buf, out);
    assert_int_equal(case_run_decode(&a, 2, shift, c->label), MLA_OK);
    unsigned char *got = joined(out, c->out_bytes, c->lse_buf, c->lse_bytes, bytes);
    for (int i = 0; i < 4; i++)
        free(mem[i]);
    return got;
}

static void decode_on(const mla_backend_desc *b, void *ctx)
{
    dcase *c = ctx;
    expect_any_offset(run_decode, c, c->label, b);
}

/* Two requests of 37 and 19 rows, blocks of 16, H = 3, lse asked. */
static dspec decode_spec(mla_dtype q, mla_dtype cache, int64_t s_q, int64_t L, int64_t R,
                         q_form form, bool pad)
{
    return (dspec){.q_dtype = q, .cache_dtype = cache, .s_q = s_q, .H = 3, .L = L, .R = R,
                   .block_size = 16, .num_reqs = 2, .lens = {37, 19}, .form = form, .pad = pad,
                   .lse = true, .threads = 2};
}

static void test_decode(void **state)
{
    (void)state;
    const mla_dtype F32 = MLA_DTYPE_F32, BF16 = MLA_DTYPE_BF16, F16 = MLA_DTYPE_F16;
    const dspec specs[] = {
        decode_spec(F32, F32, 2, 40, 8, Q_CONCAT, false),
        decode_spec(F32, BF16, 1, 40, 8, Q_SPLIT, true),
        decode_spec(BF16, BF16, 2, 40, 8, Q_VLLM, false),
        decode_spec(F16, MLA_DTYPE_FP8_E4M3, 1, 40, 8, Q_SPLIT, false),
        decode_spec(BF16, MLA_DTYPE_FP8_E5M2, 1, 40, 8, Q_CONCAT, true),
        decode_spec(F16, F16, 2, 40, 8, Q_CONCAT, true),
        /* R = 0: q_pe NULL (with q_nope's strides), never offset */
        decode_spec(F32, BF16, 2, 40, 0, Q_CONCAT, false),
        /* odd L, even L + R: the bf16-pair routes pack q element by element */
        decode_spec(BF16, BF16, 2, 39, 9, Q_SPLIT, false),
        decode_spec(BF16, MLA_DTYPE_FP8_E4M3, 2, 39, 9, Q_CONCAT, false),
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        dcase c;
        dcase_make(&c, &specs[i], false);
        mla_config cfg = case_config_of(&c.args);
        assert_true(support_each_backend(MLA_OP_DECODE, &cfg, decode_on, &c) >= 1);
        dcase_free(&c);
    }
}

/* ---- decode_forward -------------------------------------------------------------- */

/* out's buffer (guards included). */
static unsigned char *run_forward(void *ctx, int shift, size_t *bytes)
{
    fcase *c = ctx;
    mla_decode_forward_args f = c->f;
    void *mem[6];
    f.q = shifted(c->q, c->q_bytes, shift, &mem[0]);
    f.w_uk_t = shifted(c->w_uk_t, c->uk_bytes, shift, &mem[1]);
    f.w_uv = shifted(c->w_uv, c->uv_bytes, shift, &mem[2]);
    mla_kv_cache cache = c->pg.cache;
    cache.data = shifted(cache.data, c->pg.bytes, shift, &mem[3]);
    f.cache = &cache;
    memset(c->out_buf, GUARD, c->out_bytes);
    unsigned char *out = shifted(c->out_buf, c->out_bytes, shift, &mem[4]);
    f.out = moved(c->f.out, c->out_buf, out);
    int64_t ws_bytes;
    assert_int_equal(mla_decode_forward_workspace_size(&f, 2, &ws_bytes), MLA_OK);
    mem[5] = malloc((size_t)ws_bytes + 3);
    assert_non_null(mem[5]);
    assert_int_equal(mla_decode_forward(&f, (char *)mem[5] + shift, ws_bytes, 2), MLA_OK);
    *bytes = c->out_bytes;
    unsigned char *got = copy_of(out, c->out_bytes);
    for (int i = 0; i < 6; i++)
        free(mem[i]);
    return got;
}

static void forward_on(const mla_backend_desc *b, void *ctx)
{
    fcase *c = ctx;
    expect_any_offset(run_forward, c, c->label, b);
}

static void test_decode_forward(void **state)
{
    (void)state;
    const mla_dtype F32 = MLA_DTYPE_F32, BF16 = MLA_DTYPE_BF16, F16 = MLA_DTYPE_F16;
    const fspec specs[] = {
        {F32, F32, F32, F32, 2, 3, 32, 8, 16, 8, 16, 2, {17, 40}, true, false, 2},
        {BF16, BF16, BF16, BF16, 1, 3, 32, 8, 16, 8, 16, 2, {5, 33}, false, false, 2},
        {F16, MLA_DTYPE_FP8_E4M3, F32, BF16, 1, 3, 32, 8, 16, 8, 16, 2, {9, 16}, false, false, 2},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        fcase c;
        fcase_make(&c, &specs[i]);
        mla_config cfg = case_config_of_forward(&c.f);
        assert_true(support_each_backend(MLA_OP_DECODE, &cfg, forward_on, &c) >= 1);
        fcase_free(&c);
    }
}

/* ---- flash attention ------------------------------------------------------------ */

/* out's buffer (guards included) and lse's. */
static unsigned char *run_flash_attn(void *ctx, int shift, size_t *bytes)
{
    fa_case *c = ctx;
    fa_reset_outputs(c);
    mla_flash_attn_args a = c->args;
    void *mem[5] = {NULL, NULL, NULL, NULL, NULL};
    a.q = moved(c->args.q, c->q, shifted(c->q, c->q_bytes, shift, &mem[0]));
    a.k = moved(c->args.k, c->k, shifted(c->k, c->k_bytes, shift, &mem[1]));
    if (a.k_pe)
        a.k_pe = moved(c->args.k_pe, c->k_pe, shifted(c->k_pe, c->kpe_bytes, shift, &mem[2]));
    a.v = moved(c->args.v, c->v, shifted(c->v, c->v_bytes, shift, &mem[3]));
    unsigned char *out = shifted(c->out_buf, c->out_bytes, shift, &mem[4]);
    a.out = moved(c->args.out, c->out_buf, out);
    assert_int_equal(fa_call(&a, 2, shift, c->label), MLA_OK);
    unsigned char *got = joined(out, c->out_bytes, c->lse_buf, c->lse_bytes, bytes);
    for (int i = 0; i < 5; i++)
        free(mem[i]);
    return got;
}

static void flash_attn_on(const mla_backend_desc *b, void *ctx)
{
    fa_case *c = ctx;
    expect_any_offset(run_flash_attn, c, c->label, b);
}

static void test_flash_attn(void **state)
{
    (void)state;
    static const mla_dtype dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16};
    for (int d = 0; d < 3; d++) {
        for (int64_t rope = 0; rope <= 8; rope += 8) {
            fa_spec s = {.dtype = dtypes[d], .H = 2, .qk_dim = 24, .v_dim = 16, .rope_dim = rope,
                         .causal = true, .scale = 0.3f, .num_seqs = 2, .q_lens = {5, 9},
                         .k_lens = {7, 30}, .layout = FA_PADDED, .lse = true, .threads = 2};
            fa_case c;
            fa_make(&c, &s, false);
            mla_config cfg = fa_config(&s);
            assert_true(support_each_backend(MLA_OP_PREFILL, &cfg, flash_attn_on, &c) >= 1);
            fa_free(&c);
        }
    }
}

/* ---- cache ops ---------------------------------------------------------------------- */

enum { CACHE_BLOCKS = 3, CACHE_BS = 8, CACHE_L = 32, CACHE_R = 8, CACHE_W = CACHE_L + CACHE_R,
       CACHE_TOKENS = 13, CACHE_STRIDE = CACHE_W + 3 };

typedef struct cache_ops {
    mla_dtype src_dtype, cache_dtype;
    unsigned char *src; /* [CACHE_TOKENS, CACHE_STRIDE] in src_dtype */
} cache_ops;

/* The three cache ops in a row, on buffers at `shift` bytes past a fresh
 * allocation: concat_and_cache into the cache, then both gathers out of it.
 * Returns the cache and the two gathered tensors, one after another. */
static unsigned char *run_cache_ops(void *ctx, int shift, size_t *bytes)
{
    const cache_ops *o = ctx;
    static const int64_t slots[CACHE_TOKENS] = {3, 17, 8, -1, 0, 22, 9, 10, 23, 1, 16, -1, 12};
    static const int32_t table[2] = {2, 0}, cu[2] = {0, 2 * CACHE_BS}, to_seq[2 * CACHE_BS] = {0};
    const size_t src_size = (size_t)mla_dtype_size(o->src_dtype);
    const size_t cache_size = (size_t)mla_dtype_size(o->cache_dtype);
    const size_t cache_bytes = (size_t)(CACHE_BLOCKS * CACHE_BS * CACHE_W) * cache_size;
    const size_t gather_bytes = (size_t)(2 * CACHE_BS * CACHE_W) * src_size;
    const size_t cp_bytes = (size_t)(2 * CACHE_BS * CACHE_W) * cache_size;
    void *mem[4];
    const unsigned char *src =
        shifted(o->src, (size_t)(CACHE_TOKENS * CACHE_STRIDE) * src_size, shift, &mem[0]);
    unsigned char *zeros = calloc(1, cache_bytes + gather_bytes);
    assert_non_null(zeros);
    mla_kv_cache cache = {.dtype = o->cache_dtype, .num_blocks = CACHE_BLOCKS,
                          .block_size = CACHE_BS, .width = CACHE_W, .scale = 0.5f};
    cache.data = shifted(zeros, cache_bytes, shift, &mem[1]);
    unsigned char *gathered = shifted(zeros, gather_bytes, shift, &mem[2]);
    unsigned char *copied = shifted(zeros, cp_bytes, shift, &mem[3]);
    free(zeros);
    assert_int_equal(mla_concat_and_cache(&cache, src, CACHE_STRIDE, src + CACHE_L * src_size,
                                          CACHE_STRIDE, o->src_dtype, CACHE_L, CACHE_R, slots,
                                          CACHE_TOKENS, 2), MLA_OK);
    const mla_gather_spec spec = {.block_table = table, .block_table_cols = 2, .num_reqs = 1,
                                  .cu_seq_lens = cu};
    assert_int_equal(mla_gather_cache(&cache, &spec, to_seq, 2 * CACHE_BS, gathered, o->src_dtype,
                                      CACHE_W, 2), MLA_OK);
    assert_int_equal(mla_cp_gather_cache(&cache, &spec, copied, CACHE_W, 2), MLA_OK);
    *bytes = cache_bytes + gather_bytes + cp_bytes;
    unsigned char *all = malloc(*bytes);
    assert_non_null(all);
    memcpy(all, cache.data, cache_bytes);
    memcpy(all + cache_bytes, gathered, gather_bytes);
    memcpy(all + cache_bytes + gather_bytes, copied, cp_bytes);
    for (int i = 0; i < 4; i++)
        free(mem[i]);
    return all;
}

static void cache_ops_on(const mla_backend_desc *b, void *ctx)
{
    cache_ops *o = ctx;
    char what[64];
    snprintf(what, sizeof what, "cache ops %s -> %s", mla_dtype_name(o->src_dtype),
             mla_dtype_name(o->cache_dtype));
    expect_any_offset(run_cache_ops, o, what, b);
}

static void test_cache_ops(void **state)
{
    (void)state;
    static const mla_dtype srcs[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16};
    static const mla_dtype caches[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16,
                                       MLA_DTYPE_FP8_E4M3, MLA_DTYPE_FP8_E5M2};
    for (int s = 0; s < 3; s++) {
        cache_ops o = {.src_dtype = srcs[s]};
        const int64_t n = CACHE_TOKENS * CACHE_STRIDE;
        o.src = malloc((size_t)(n * mla_dtype_size(srcs[s])));
        assert_non_null(o.src);
        for (int64_t i = 0; i < n; i++)
            case_put_random(srcs[s], o.src, i);
        for (int c = 0; c < 5; c++) {
            o.cache_dtype = caches[c];
            assert_true(support_each_backend(MLA_OP_CONVERT, NULL, cache_ops_on, &o) >= 1);
        }
        free(o.src);
    }
}

/* ---- merge_attn_states ---------------------------------------------------------- */

enum { MERGE_T = 5, MERGE_H = 3, MERGE_D = 40 };

typedef struct merge_case {
    mla_dtype dtype;
    unsigned char *prefix, *suffix; /* [T, H, D] */
    float lse[2][MERGE_H * MERGE_T];
} merge_case;

/* out and out_lse of the merge with prefix, suffix and out `shift` bytes
 * past a fresh allocation, out's bytes first. */
static unsigned char *run_merge(void *ctx, int shift, size_t *written)
{
    const merge_case *m = ctx;
    const size_t bytes = (size_t)(MERGE_T * MERGE_H * MERGE_D * mla_dtype_size(m->dtype));
    void *mem[3];
    float out_lse[MERGE_H * MERGE_T];
    mla_merge_attn_args a = {.num_tokens = MERGE_T, .num_heads = MERGE_H, .head_dim = MERGE_D,
                             .dtype = m->dtype, .token_stride = MERGE_H * MERGE_D,
                             .head_stride = MERGE_D, .prefix_lse = m->lse[0],
                             .suffix_lse = m->lse[1], .out_token_stride = MERGE_H * MERGE_D,
                             .out_head_stride = MERGE_D, .out_lse = out_lse,
                             .prefill_tokens_with_context = MERGE_T - 1};
    a.prefix = shifted(m->prefix, bytes, shift, &mem[0]);
    a.suffix = shifted(m->suffix, bytes, shift, &mem[1]);
    a.out = shifted(m->prefix, bytes, shift, &mem[2]);
    assert_int_equal(mla_merge_attn_states(&a, 2), MLA_OK);
    *written = bytes + sizeof out_lse;
    unsigned char *got = malloc(*written);
    assert_non_null(got);
    memcpy(got, a.out, bytes);
    memcpy(got + bytes, out_lse, sizeof out_lse);
    for (int i = 0; i < 3; i++)
        free(mem[i]);
    return got;
}

static void merge_on(const mla_backend_desc *b, void *ctx)
{
    merge_case *m = ctx;
    char what[32];
    snprintf(what, sizeof what, "merge %s", mla_dtype_name(m->dtype));
    expect_any_offset(run_merge, m, what, b);
}

static void test_merge(void **state)
{
    (void)state;
    static const mla_dtype dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16};
    for (int d = 0; d < 3; d++) {
        merge_case m = {.dtype = dtypes[d]};
        const int64_t n = MERGE_T * MERGE_H * MERGE_D;
        m.prefix = malloc((size_t)(n * mla_dtype_size(m.dtype)));
        m.suffix = malloc((size_t)(n * mla_dtype_size(m.dtype)));
        assert_non_null(m.prefix);
        assert_non_null(m.suffix);
        for (int64_t i = 0; i < n; i++) {
            case_put_random(m.dtype, m.prefix, i);
            case_put_random(m.dtype, m.suffix, i);
        }
        for (int i = 0; i < MERGE_H * MERGE_T; i++) {
            m.lse[0][i] = (float)case_uniform() * 3.0f;
            m.lse[1][i] = (float)case_uniform() * 3.0f;
        }
        mla_config cfg = {.q_dtype = m.dtype, .cache_dtype = m.dtype, .kv_lora_rank = MERGE_D,
                          .rope_dim = 0, .num_heads = MERGE_H, .block_size = 1};
        assert_true(support_each_backend(MLA_OP_PREFILL, &cfg, merge_on, &m) >= 1);
        free(m.prefix);
        free(m.suffix);
    }
}

/* ---- up-projection ---------------------------------------------------------------- */

enum { UP_S = 7, UP_H = 2, UP_L = 32, UP_P = 16, UP_V = 12 };

typedef struct up_case {
    mla_dtype dtype;
    unsigned char *kv_c, *w; /* [S, L], [H*(P+V), L] */
    bool packed;             /* run on w packed by mla_pack_kv_b_proj */
} up_case;

/* k_nope and v, interleaved as [S, H, P + V], computed from kv_c and
 * kv_b_proj (or its packing) `shift` bytes past fresh allocations, into
 * such a buffer. */
static unsigned char *run_up_proj(void *ctx, int shift, size_t *bytes)
{
    const up_case *u = ctx;
    const size_t size = (size_t)mla_dtype_size(u->dtype);
    *bytes = (size_t)(UP_S * UP_H * (UP_P + UP_V)) * size;
    void *mem[4] = {NULL, NULL, NULL, NULL};
    unsigned char *zeros = calloc(1, *bytes);
    assert_non_null(zeros);
    mla_up_proj_args a = {.num_tokens = UP_S, .num_heads = UP_H, .kv_lora_rank = UP_L,
                          .qk_nope_dim = UP_P, .v_head_dim = UP_V, .kv_c_dtype = u->dtype,
                          .kv_c_stride = UP_L, .w_dtype = u->dtype, .out_dtype = u->dtype,
                          .k_nope_token_stride = UP_H * (UP_P + UP_V),
                          .k_nope_head_stride = UP_P + UP_V,
                          .v_token_stride = UP_H * (UP_P + UP_V), .v_head_stride = UP_P + UP_V};
    a.kv_c = shifted(u->kv_c, (size_t)(UP_S * UP_L) * size, shift, &mem[0]);
    a.kv_b_proj = shifted(u->w, (size_t)(UP_H * (UP_P + UP_V) * UP_L) * size, shift, &mem[1]);
    unsigned char *out = shifted(zeros, *bytes, shift, &mem[2]);
    free(zeros);
    a.k_nope = out;
    a.v = out + UP_P * size;
    if (u->packed) {
        int64_t pack_bytes;
        assert_int_equal(mla_pack_kv_b_proj_size(&a, &pack_bytes), MLA_OK);
        mem[3] = malloc((size_t)pack_bytes + 3);
        assert_non_null(mem[3]);
        assert_int_equal(mla_pack_kv_b_proj(&a, (char *)mem[3] + shift, pack_bytes, 2), MLA_OK);
        a.kv_b_proj_packed = (char *)mem[3] + shift;
        a.kv_b_proj = NULL;
    }
    int64_t ws_bytes;
    assert_int_equal(mla_up_proj_workspace_size(&a, 2, &ws_bytes), MLA_OK);
    char *ws = malloc((size_t)ws_bytes + 3);
    assert_non_null(ws);
    assert_int_equal(mla_up_proj(&a, ws + shift, ws_bytes, 2), MLA_OK);
    free(ws);
    unsigned char *got = copy_of(out, *bytes);
    for (int i = 0; i < 4; i++)
        free(mem[i]);
    return got;
}

static void up_proj_on(const mla_backend_desc *b, void *ctx)
{
    up_case *u = ctx;
    char what[48];
    for (int packed = 0; packed <= 1; packed++) {
        u->packed = packed;
        snprintf(what, sizeof what, "up_proj %s%s", mla_dtype_name(u->dtype),
                 packed ? ", packed weight" : "");
        expect_any_offset(run_up_proj, u, what, b);
    }
}

static void test_up_proj(void **state)
{
    (void)state;
    static const mla_dtype dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16};
    for (int d = 0; d < 3; d++) {
        up_case u = {.dtype = dtypes[d]};
        const int64_t nc = UP_S * UP_L, nw = UP_H * (UP_P + UP_V) * UP_L;
        u.kv_c = malloc((size_t)(nc * mla_dtype_size(u.dtype)));
        u.w = malloc((size_t)(nw * mla_dtype_size(u.dtype)));
        assert_non_null(u.kv_c);
        assert_non_null(u.w);
        for (int64_t i = 0; i < nc; i++)
            case_put_random(u.dtype, u.kv_c, i);
        for (int64_t i = 0; i < nw; i++)
            case_put_random(u.dtype, u.w, i);
        mla_config cfg = {.q_dtype = u.dtype, .cache_dtype = u.dtype, .kv_lora_rank = UP_L,
                          .rope_dim = 0, .num_heads = UP_H, .block_size = 1};
        assert_true(support_each_backend(MLA_OP_PREFILL, &cfg, up_proj_on, &u) >= 1);
        free(u.kv_c);
        free(u.w);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        CASE_TEST(test_decode),
        CASE_TEST(test_decode_forward),
        CASE_TEST(test_flash_attn),
        CASE_TEST(test_cache_ops),
        CASE_TEST(test_merge),
        CASE_TEST(test_up_proj),
    };
    return cmocka_run_group_tests_name("alignment", tests, NULL, NULL);
}
