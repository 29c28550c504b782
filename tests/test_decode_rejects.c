/*
 * Bad input to mla_prepare_weights, mla_decode and mla_decode_forward: each
 * call returns the documented status with a message naming the problem, and
 * leaves its outputs (guard bytes around them) and the cache untouched. The
 * good calls next to them (ids in block-table columns that are never read,
 * a table filled exactly, lse NULL, no requests) succeed and match the
 * oracle.
 */
#include "decode_cases.h"

#include "oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_prepare_weights_rejects(void **state)
{
    (void)state;
    enum { H = 2, L = 8, P = 4, V = 3 };
    float kvb[H * (P + V) * L];
    for (int i = 0; i < H * (P + V) * L; i++)
        kvb[i] = (float)i;
    unsigned char uk[H * P * L * 4], uv[H * L * V * 4];
    memset(uk, GUARD, sizeof uk);
    memset(uv, GUARD, sizeof uv);
    const mla_dtype F32 = MLA_DTYPE_F32;
    const mla_status INVALID = MLA_ERR_INVALID_ARGUMENT, UNSUPPORTED = MLA_ERR_UNSUPPORTED;
    assert_int_equal(mla_prepare_weights(kvb, F32, H, L, P, V, uk, uv, F32, 1), MLA_OK);
    memset(uk, GUARD, sizeof uk);
    memset(uv, GUARD, sizeof uv);
    const struct {
        const void *kvb;
        mla_dtype src, w;
        int64_t h, l, p, v;
        void *uk, *uv;
        mla_status status;
        const char *needle;
    } bad[] = {
        {NULL, F32, F32, H, L, P, V, uk, uv, INVALID, "kv_b_proj"},
        {kvb, F32, F32, H, L, P, V, NULL, uv, INVALID, "w_uk_t"},
        {kvb, F32, F32, H, L, P, V, uk, NULL, INVALID, "w_uv"},
        {kvb, MLA_DTYPE_FP8_E4M3, F32, H, L, P, V, uk, uv, UNSUPPORTED, "fp8_e4m3"},
        {kvb, F32, MLA_DTYPE_F16, H, L, P, V, uk, uv, UNSUPPORTED, "f16"},
        {kvb, F32, MLA_DTYPE_FP8_E5M2, H, L, P, V, uk, uv, UNSUPPORTED, "fp8_e5m2"},
        {kvb, F32, F32, 0, L, P, V, uk, uv, INVALID, "num_heads"},
        {kvb, F32, F32, H, 0, P, V, uk, uv, INVALID, "kv_lora_rank"},
        {kvb, F32, F32, H, L, 0, V, uk, uv, INVALID, "qk_nope_dim"},
        {kvb, F32, F32, H, L, P, -1, uk, uv, INVALID, "v_head_dim"},
        {kvb, F32, F32, INT64_MAX / 4, L, P, V, uk, uv, MLA_ERR_OVERFLOW, ""},
    };
    for (int k = 0; k < COUNT(bad); k++) {
        mla_status st = mla_prepare_weights(bad[k].kvb, bad[k].src, bad[k].h, bad[k].l, bad[k].p,
                                            bad[k].v, bad[k].uk, bad[k].uv, bad[k].w, 1);
        if (st != bad[k].status)
            fail_msg("prepare_weights case %d: %s, want %s (%s)", k, mla_status_str(st),
                     mla_status_str(bad[k].status), mla_last_error());
        assert_true(mla_last_error()[0] != '\0');
        assert_true(support_contains(mla_last_error(), bad[k].needle));
        case_expect_guards(uk, sizeof uk, "w_uk_t after a rejected call");
        case_expect_guards(uv, sizeof uv, "w_uv after a rejected call");
    }
}

typedef struct bad_env {
    mla_kv_cache cache;
    uint16_t cache_data[6 * 4 * 10];
    uint64_t cache_sum;
    int32_t lens[2], block_table[6];
    float q[4 * 3 * 10];
    unsigned char out[MARGIN + 4 * 3 * 8 * 4 + MARGIN], lse[MARGIN + 12 * 4 + MARGIN];
    mla_decode_args a;
    unsigned char *ws;
    int64_t ws_bytes; /* plenty */
    int64_t need;     /* what the good call needs on 1 thread */
    int mismatches;   /* rejected, but with another status than documented */
    char mismatch_text[1024];
} bad_env;

static void bad_env_reset(bad_env *e)
{
    memset(e->out, GUARD, sizeof e->out);
    memset(e->lse, GUARD, sizeof e->lse);
}

/* B 2, s_q 2, H 3, L 8, R 2, bf16 cache of 6 blocks of 4 rows, 3 block-table
 * columns; lens 5 and 9: request 0 reads columns 0-1 (column 2 holds 1000,
 * which is never read), request 1 columns 0-2. */
static void bad_env_init(bad_env *e)
{
    memset(e, 0, sizeof *e);
    for (int i = 0; i < 6 * 4 * 10; i++)
        case_put_random(MLA_DTYPE_BF16, e->cache_data, i);
    e->cache = (mla_kv_cache){.data = e->cache_data, .dtype = MLA_DTYPE_BF16, .num_blocks = 6,
                              .block_size = 4, .width = 10, .scale = 1.0f};
    e->cache_sum = oracle_checksum(e->cache_data, sizeof e->cache_data);
    e->lens[0] = 5;
    e->lens[1] = 9;
    const int32_t bt[6] = {4, 1, 1000, 0, 5, 2};
    memcpy(e->block_table, bt, sizeof bt);
    for (int i = 0; i < 4 * 3 * 10; i++)
        e->q[i] = (float)case_uniform();
    e->a = (mla_decode_args){.num_reqs = 2, .s_q = 2, .num_heads = 3, .kv_lora_rank = 8,
                             .rope_dim = 2, .scale = 0.3f, .q_dtype = MLA_DTYPE_F32,
                             .q_nope = e->q, .q_nope_token_stride = 30, .q_nope_head_stride = 10,
                             .q_pe = e->q + 8, .q_pe_token_stride = 30, .q_pe_head_stride = 10,
                             .cache = &e->cache, .block_table = e->block_table,
                             .block_table_cols = 3, .seq_lens = e->lens, .out = e->out + MARGIN,
                             .out_token_stride = 24, .out_head_stride = 8,
                             .lse = (float *)(e->lse + MARGIN)};
    assert_int_equal(mla_decode_workspace_size(&e->a, 1, &e->need), MLA_OK);
    e->ws_bytes = e->need * 8 + (1 << 20);
    e->ws = case_alloc((size_t)e->ws_bytes);
    bad_env_reset(e);
}

/* The call failed with `status` and a message naming the problem (says
 * `needle`), and wrote nothing. Acceptance, an empty message or a write fail
 * at once; another failure status or a message without the needle is
 * collected and reported at the end (bad_env_finish), so every case runs. */
static void expect_rejected(bad_env *e, mla_status got, mla_status status, const char *needle)
{
    if (got == MLA_OK)
        fail_msg("accepted, want %s (%s)", mla_status_str(status), needle);
    if (mla_last_error()[0] == '\0')
        fail_msg("%s: empty mla_last_error()", needle);
    if (got != status || !strstr(mla_last_error(), needle)) {
        size_t used = strlen(e->mismatch_text);
        if (got != status)
            snprintf(e->mismatch_text + used, sizeof e->mismatch_text - used,
                     "%s%s, want %s: \"%s\"", e->mismatches ? "; " : "", mla_status_str(got),
                     mla_status_str(status), mla_last_error());
        else
            snprintf(e->mismatch_text + used, sizeof e->mismatch_text - used,
                     "%s\"%s\" does not say \"%s\"", e->mismatches ? "; " : "", mla_last_error(),
                     needle);
        e->mismatches++;
    }
    if (getenv("TDEC_SHOW"))
        print_message("[ REJECTED ] %s: %s\n", mla_status_str(got), mla_last_error());
    assert_true(oracle_checksum(e->cache_data, sizeof e->cache_data) == e->cache_sum);
    case_expect_guards(e->out, sizeof e->out, "out after a rejected call");
    case_expect_guards(e->lse, sizeof e->lse, "lse after a rejected call");
}

static void bad_env_finish(bad_env *e)
{
    free(e->ws);
    if (e->mismatches > 0)
        fail_msg("%d rejection(s) with another status than documented or a message not naming "
                 "the problem: %s", e->mismatches, e->mismatch_text);
}

static mla_status decode_with(bad_env *e, const mla_decode_args *a)
{
    return mla_decode(a, e->ws, e->ws_bytes, 1);
}

/* The good call's out and lse against the oracle (f32 tolerances). */
static void expect_good(bad_env *e, const mla_decode_args *a, const char *what)
{
    double want_out[4 * 3 * 8], want_lse[12];
    oracle_decode_latent(a, want_out, want_lse);
    for (int64_t t = 0; t < a->num_reqs * 2; t++)
        for (int64_t h = 0; h < 3; h++)
            for (int64_t l = 0; l < 8; l++) {
                double got = ((const float *)a->out)[t * 24 + h * 8 + l];
                double err = fabs(got - want_out[(t * 3 + h) * 8 + l]);
                if (!(err <= 1e-5))
                    fail_msg("%s: out[%lld][%lld][%lld] off by %g", what, (long long)t,
                             (long long)h, (long long)l, err);
            }
    for (int64_t i = 0; a->lse && i < a->num_reqs * 6; i++)
        if (!(fabs(a->lse[i] - want_lse[i]) <= LSE_TOL))
            fail_msg("%s: lse[%lld] = %g, want %g", what, (long long)i, a->lse[i], want_lse[i]);
    assert_true(oracle_checksum(e->cache_data, sizeof e->cache_data) == e->cache_sum);
}

static void test_decode_rejects(void **state)
{
    (void)state;
    bad_env e;
    bad_env_init(&e);
    mla_decode_args b;
    const mla_status INVALID = MLA_ERR_INVALID_ARGUMENT;
    /* b: the good call's arguments but for one edit */
#define DECODE_REJECT(edit, status, needle)                                                       \
    do {                                                                                          \
        b = e.a;                                                                                  \
        edit;                                                                                     \
        expect_rejected(&e, decode_with(&e, &b), status, needle);                                 \
    } while (0)

    /* the good calls: an out-of-range id in a column past ceil(len / bs) is
     * not read (1000, then -7); seq_len may fill the block table exactly;
     * lse may be NULL; no requests writes nothing */
    assert_int_equal(decode_with(&e, &e.a), MLA_OK);
    expect_good(&e, &e.a, "block_table[0][2] = 1000 past ceil(5 / 4) = 2 columns");
    e.block_table[2] = -7;
    bad_env_reset(&e);
    assert_int_equal(decode_with(&e, &e.a), MLA_OK);
    expect_good(&e, &e.a, "block_table[0][2] = -7 past ceil(5 / 4) = 2 columns");
    e.lens[1] = 12;
    b = e.a;
    b.lse = NULL;
    bad_env_reset(&e);
    assert_int_equal(decode_with(&e, &b), MLA_OK);
    expect_good(&e, &b, "seq_lens[1] = 12 = 3 columns x 4");
    case_expect_guards(e.lse, sizeof e.lse, "lse NULL: lse buffer");
    e.lens[1] = 9;
    b = e.a;
    b.num_reqs = 0;
    bad_env_reset(&e);
    assert_int_equal(decode_with(&e, &b), MLA_OK);
    case_expect_guards(e.out, sizeof e.out, "no requests: out");
    case_expect_guards(e.lse, sizeof e.lse, "no requests: lse");
    bad_env_reset(&e);

    /* block table and lengths */
    e.lens[1] = 13; /* 4 columns' worth, the table has 3 */
    expect_rejected(&e, decode_with(&e, &e.a), MLA_ERR_OUT_OF_RANGE, "seq_lens[1]");
    e.lens[1] = 9;
    /* request 1 needs 3 columns */
    DECODE_REJECT((b.block_table_cols = 2, b.block_table = (const int32_t[]){4, 1, 0, 5}),
                  MLA_ERR_OUT_OF_RANGE, "seq_lens[1]");
    e.block_table[5] = 6; /* request 1, column 2: one past num_blocks */
    expect_rejected(&e, decode_with(&e, &e.a), MLA_ERR_OUT_OF_RANGE, "block_table[1][2]");
    e.block_table[5] = -1;
    expect_rejected(&e, decode_with(&e, &e.a), MLA_ERR_OUT_OF_RANGE, "block_table[1][2]");
    e.block_table[5] = 2;
    e.block_table[1] = INT32_MAX;
    expect_rejected(&e, decode_with(&e, &e.a), MLA_ERR_OUT_OF_RANGE, "block_table[0][1]");
    e.block_table[1] = 1;
    e.lens[0] = -1;
    expect_rejected(&e, decode_with(&e, &e.a), INVALID, "seq_lens[0]");
    e.lens[0] = 5;

    /* sizes */
    DECODE_REJECT(b.s_q = 0, INVALID, "s_q");
    DECODE_REJECT(b.s_q = -2, INVALID, "s_q");
    DECODE_REJECT(b.num_heads = 0, INVALID, "num_heads");
    DECODE_REJECT(b.num_reqs = -1, INVALID, "num_reqs");
    /* L + R is still the width */
    DECODE_REJECT((b.kv_lora_rank = 0, b.rope_dim = 10), INVALID, "kv_lora_rank");
    DECODE_REJECT(b.rope_dim = 3, INVALID, "width");
    DECODE_REJECT((b.kv_lora_rank = 9, b.rope_dim = 2), INVALID, "width");
    DECODE_REJECT((b.rope_dim = -1, b.kv_lora_rank = 11), INVALID, "rope_dim");
    DECODE_REJECT(b.block_table_cols = -1, INVALID, "block_table");
    DECODE_REJECT(b.q_nope_token_stride = INT64_MAX / 2, MLA_ERR_OVERFLOW, "q_nope");

    /* NULLs */
    DECODE_REJECT(b.q_nope = NULL, INVALID, "q_nope");
    DECODE_REJECT(b.q_pe = NULL, INVALID, "q_pe"); /* R = 2 */
    DECODE_REJECT(b.cache = NULL, INVALID, "cache");
    DECODE_REJECT(b.block_table = NULL, INVALID, "block_table");
    DECODE_REJECT(b.seq_lens = NULL, INVALID, "seq_lens");
    DECODE_REJECT(b.out = NULL, INVALID, "out");
    expect_rejected(&e, decode_with(&e, NULL), INVALID, "args");

    /* dtypes, scale, the cache descriptor */
    DECODE_REJECT(b.q_dtype = MLA_DTYPE_FP8_E4M3, MLA_ERR_UNSUPPORTED, "fp8_e4m3");
    DECODE_REJECT(b.scale = NAN, INVALID, "scale");
    DECODE_REJECT(b.scale = INFINITY, INVALID, "scale");
    DECODE_REJECT(b.scale = -INFINITY, INVALID, "scale");
    mla_kv_cache bad_cache = e.cache;
    bad_cache.dtype = MLA_DTYPE_FP8_E4M3; /* same bytes seen as fp8, with no scale */
    bad_cache.scale = 0.0f;
    DECODE_REJECT(b.cache = &bad_cache, INVALID, "scale");
    bad_cache = e.cache;
    bad_cache.block_size = 0;
    DECODE_REJECT(b.cache = &bad_cache, INVALID, "block_size");
    bad_cache = e.cache;
    bad_cache.data = NULL;
    DECODE_REJECT(b.cache = &bad_cache, INVALID, "cache");

    /* schedule parameters */
    mla_decode_sched_params huge = {.num_parts = INT64_C(1) << 40, .overhead = -1};
    DECODE_REJECT(b.sched = &huge, INVALID, "num_parts");
#undef DECODE_REJECT

    /* workspace */
    if (e.need > 0) {
        expect_rejected(&e, mla_decode(&e.a, e.ws, e.need - 1, 1), MLA_ERR_CAPACITY, "workspace");
        expect_rejected(&e, mla_decode(&e.a, NULL, e.need, 1), MLA_ERR_INVALID_ARGUMENT,
                        "workspace");
    }
    int64_t bytes = 0;
    assert_int_equal(mla_decode_workspace_size(NULL, 1, &bytes), MLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mla_decode_workspace_size(&e.a, 1, NULL), MLA_ERR_INVALID_ARGUMENT);

    /* a forced backend that runs on this CPU but not this config: an error
     * listing the reasons, nothing written */
    mla_config cfg = case_config_of(&e.a);
    for (int i = 0; i < mla_backend_count(); i++) {
        const char *name = mla_backend_at(i)->name;
        mla_reasons cpu, why;
        assert_int_equal(mla_backend_validate(name, MLA_OP_DECODE, NULL, &cpu), MLA_OK);
        assert_int_equal(mla_backend_validate(name, MLA_OP_DECODE, &cfg, &why), MLA_OK);
        if (cpu.count > 0 || why.count == 0)
            continue;
        assert_int_equal(mla_force_backend(MLA_OP_DECODE, name), MLA_OK);
        expect_rejected(&e, decode_with(&e, &e.a), MLA_ERR_BACKEND_INVALID, why.text[0]);
        print_message("[ FORCED   ] %s cannot run %s q / %s cache: rejected with \"%s\"\n", name,
                      mla_dtype_name(cfg.q_dtype), mla_dtype_name(cfg.cache_dtype),
                      mla_last_error());
    }
    assert_int_equal(mla_force_backend(MLA_OP_DECODE, NULL), MLA_OK);
    bad_env_finish(&e);
}

/* A workspace sized for s_q fits every smaller s_q (prefill sizes its
 * absorbed pieces once, for the longest): with 64 heads, 2 queries make one
 * pass of 128 rows, 3 make two of 96, and the scratch must not shrink. */
static void test_workspace_covers_shorter_s_q(void **state)
{
    (void)state;
    bad_env e;
    bad_env_init(&e);
    mla_decode_args a = e.a;
    a.num_reqs = 1;
    a.num_heads = 64;
    a.q_nope_token_stride = a.q_pe_token_stride = 64 * 10;
    a.out_token_stride = 64 * 8;
    int64_t shorter = 0;
    for (a.s_q = 1; a.s_q <= e.lens[0]; a.s_q++) {
        int64_t bytes;
        assert_int_equal(mla_decode_workspace_size(&a, 1, &bytes), MLA_OK);
        if (bytes < shorter)
            fail_msg("s_q %lld needs %lld bytes, fewer than s_q %lld's %lld", (long long)a.s_q,
                     (long long)bytes, (long long)a.s_q - 1, (long long)shorter);
        shorter = bytes;
    }
    bad_env_finish(&e);
}

static void test_forward_rejects(void **state)
{
    (void)state;
    bad_env e;
    bad_env_init(&e);
    enum { H = 3, L = 8, P = 4, V = 3 };
    float q[4 * H * (P + 2)], w_uk_t[H * P * L], w_uv[H * L * V];
    for (int i = 0; i < COUNT(q); i++)
        q[i] = (float)case_uniform();
    for (int i = 0; i < COUNT(w_uk_t); i++)
        w_uk_t[i] = (float)case_uniform();
    for (int i = 0; i < COUNT(w_uv); i++)
        w_uv[i] = (float)case_uniform();
    mla_decode_forward_args good = {.qk_nope_dim = P, .v_head_dim = V, .q = q,
                                    .q_token_stride = H * (P + 2), .q_head_stride = P + 2,
                                    .w_uk_t = w_uk_t, .w_uv = w_uv, .w_dtype = MLA_DTYPE_F32,
                                    .out = e.out + MARGIN, .out_token_stride = H * V,
                                    .attn = e.a};
    good.attn.q_nope = good.attn.q_pe = NULL;
    good.attn.out = NULL;
    good.attn.q_nope_token_stride = good.attn.q_nope_head_stride = 0;
    good.attn.q_pe_token_stride = good.attn.q_pe_head_stride = 0;
    good.attn.out_token_stride = good.attn.out_head_stride = 0;
    int64_t need = 0;
    assert_int_equal(mla_decode_forward_workspace_size(&good, 1, &need), MLA_OK);
    assert_true(need > 0); /* ql_nope and o_lat live there */
    unsigned char *ws = case_alloc((size_t)need * 8 + (1 << 20));
    const int64_t ws_bytes = need * 8 + (1 << 20);
    assert_int_equal(mla_decode_forward(&good, ws, ws_bytes, 1), MLA_OK);
    bad_env_reset(&e);
    mla_decode_forward_args f;
#define FWD_REJECT(edit, status, needle)                                                          \
    do {                                                                                          \
        f = good;                                                                                 \
        edit;                                                                                     \
        expect_rejected(&e, mla_decode_forward(&f, ws, ws_bytes, 1), status, needle);             \
    } while (0)
    /* the caller's field is q (attn.q_nope is unused and must be left 0) */
    FWD_REJECT(f.q = NULL, MLA_ERR_INVALID_ARGUMENT, "q is NULL");
    FWD_REJECT(f.w_uk_t = NULL, MLA_ERR_INVALID_ARGUMENT, "w_uk_t");
    FWD_REJECT(f.w_uv = NULL, MLA_ERR_INVALID_ARGUMENT, "w_uv");
    FWD_REJECT(f.out = NULL, MLA_ERR_INVALID_ARGUMENT, "out");
    FWD_REJECT(f.w_dtype = MLA_DTYPE_F16, MLA_ERR_UNSUPPORTED, "f16");
    FWD_REJECT(f.qk_nope_dim = 0, MLA_ERR_INVALID_ARGUMENT, "qk_nope_dim");
    FWD_REJECT(f.v_head_dim = 0, MLA_ERR_INVALID_ARGUMENT, "v_head_dim");
    FWD_REJECT(f.out_token_stride = H * V - 1, MLA_ERR_INVALID_ARGUMENT, "stride");
    FWD_REJECT(f.attn.q_dtype = MLA_DTYPE_FP8_E4M3, MLA_ERR_UNSUPPORTED, "fp8_e4m3");
    FWD_REJECT(f.attn.num_heads = 0, MLA_ERR_INVALID_ARGUMENT, "num_heads");
    FWD_REJECT(f.attn.scale = NAN, MLA_ERR_INVALID_ARGUMENT, "scale");
    e.block_table[5] = 6;
    FWD_REJECT((void)0, MLA_ERR_OUT_OF_RANGE, "block_table[1][2]");
    e.block_table[5] = 2;
    e.lens[1] = 13;
    FWD_REJECT((void)0, MLA_ERR_OUT_OF_RANGE, "seq_lens[1]");
    e.lens[1] = 9;
#undef FWD_REJECT
    expect_rejected(&e, mla_decode_forward(NULL, ws, ws_bytes, 1), MLA_ERR_INVALID_ARGUMENT,
                    "args");
    expect_rejected(&e, mla_decode_forward(&good, ws, need - 1, 1), MLA_ERR_CAPACITY, "workspace");
    expect_rejected(&e, mla_decode_forward(&good, NULL, need, 1), MLA_ERR_INVALID_ARGUMENT,
                    "workspace");
    free(ws);
    bad_env_finish(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        CASE_TEST(test_prepare_weights_rejects),
        CASE_TEST(test_decode_rejects),
        CASE_TEST(test_workspace_covers_shorter_s_q),
        CASE_TEST(test_forward_rejects),
    };
    case_apply_filter();
    return cmocka_run_group_tests_name("decode_rejects", tests, NULL, NULL);
}
