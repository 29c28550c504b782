/*
 * Bad input to mla_prepare_weights, mla_decode and mla_decode_forward: each
 * call returns the documented status with a message naming the problem, and
 * leaves its outputs (guard bytes around them), its workspace (guard bytes
 * all through) and the cache untouched. The
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
        const char *needle, *bad_input;
    } bad[] = {
        {NULL, F32, F32, H, L, P, V, uk, uv, INVALID, "kv_b_proj", "kv_b_proj NULL"},
        {kvb, F32, F32, H, L, P, V, NULL, uv, INVALID, "w_uk_t", "w_uk_t NULL"},
        {kvb, F32, F32, H, L, P, V, uk, NULL, INVALID, "w_uv", "w_uv NULL"},
        {kvb, MLA_DTYPE_FP8_E4M3, F32, H, L, P, V, uk, uv, UNSUPPORTED, "fp8_e4m3",
         "src_dtype fp8_e4m3"},
        {kvb, F32, MLA_DTYPE_F16, H, L, P, V, uk, uv, UNSUPPORTED, "f16", "w_dtype f16"},
        {kvb, F32, MLA_DTYPE_FP8_E5M2, H, L, P, V, uk, uv, UNSUPPORTED, "fp8_e5m2",
         "w_dtype fp8_e5m2"},
        {kvb, F32, F32, 0, L, P, V, uk, uv, INVALID, "num_heads", "num_heads 0"},
        {kvb, F32, F32, H, 0, P, V, uk, uv, INVALID, "kv_lora_rank", "kv_lora_rank 0"},
        {kvb, F32, F32, H, L, 0, V, uk, uv, INVALID, "qk_nope_dim", "qk_nope_dim 0"},
        {kvb, F32, F32, H, L, P, -1, uk, uv, INVALID, "v_head_dim", "v_head_dim -1"},
        {kvb, F32, F32, INT64_MAX / 4, L, P, V, uk, uv, MLA_ERR_OVERFLOW, "overflows",
         "weight sizes past int64"},
    };
    for (int k = 0; k < COUNT(bad); k++) {
        mla_status st = mla_prepare_weights(bad[k].kvb, bad[k].src, bad[k].h, bad[k].l, bad[k].p,
                                            bad[k].v, bad[k].uk, bad[k].uv, bad[k].w, 1);
        support_expect_reject("mla_prepare_weights", bad[k].bad_input, st, bad[k].status,
                              bad[k].needle);
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
    memset(e->ws, GUARD, (size_t)e->ws_bytes);
}

/* A workspace of at least `bytes` (guard bytes refilled by bad_env_reset). */
static void bad_env_grow_ws(bad_env *e, int64_t bytes)
{
    if (bytes <= e->ws_bytes)
        return;
    free(e->ws);
    e->ws_bytes = bytes;
    e->ws = case_alloc((size_t)bytes);
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

/* The call to `entry`, given `bad_input`, failed with `status` and a
 * message naming the problem (says `needle`), and wrote nothing. Acceptance,
 * an empty message or a write fail at once; another failure status or a
 * message without the needle is collected and reported at the end
 * (bad_env_finish), so every case runs. */
static void expect_rejected(bad_env *e, const char *entry, const char *bad_input, mla_status got,
                            mla_status status, const char *needle)
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
    case_expect_guards(e->ws, (size_t)e->ws_bytes, "workspace after a rejected call");
    support_note_reject(entry, bad_input, status);
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
#define DECODE_REJECT(bad_input, edit, status, needle)                                             \
    do {                                                                                           \
        b = e.a;                                                                                   \
        edit;                                                                                      \
        expect_rejected(&e, "mla_decode", bad_input, decode_with(&e, &b), status, needle);         \
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
    expect_rejected(&e, "mla_decode", "seq_lens entry needing more blocks than block_table_cols",
                    decode_with(&e, &e.a), MLA_ERR_OUT_OF_RANGE, "seq_lens[1]");
    e.lens[1] = 9;
    /* request 1 needs 3 columns */
    DECODE_REJECT("block_table_cols 2 too few for a request",
                  (b.block_table_cols = 2, b.block_table = (const int32_t[]){4, 1, 0, 5}),
                  MLA_ERR_OUT_OF_RANGE, "seq_lens[1]");
    e.block_table[5] = 6; /* request 1, column 2: one past num_blocks */
    expect_rejected(&e, "mla_decode", "block_table id past num_blocks", decode_with(&e, &e.a),
                    MLA_ERR_OUT_OF_RANGE, "block_table[1][2]");
    e.block_table[5] = -1;
    expect_rejected(&e, "mla_decode", "block_table id -1", decode_with(&e, &e.a),
                    MLA_ERR_OUT_OF_RANGE, "block_table[1][2]");
    e.block_table[5] = 2;
    e.block_table[1] = INT32_MAX;
    expect_rejected(&e, "mla_decode", "block_table id INT32_MAX", decode_with(&e, &e.a),
                    MLA_ERR_OUT_OF_RANGE, "block_table[0][1]");
    e.block_table[1] = 1;
    e.lens[0] = -1;
    expect_rejected(&e, "mla_decode", "seq_lens entry -1", decode_with(&e, &e.a), INVALID,
                    "seq_lens[0]");
    e.lens[0] = 5;

    /* sizes */
    DECODE_REJECT("s_q 0", b.s_q = 0, INVALID, "s_q");
    DECODE_REJECT("s_q -2", b.s_q = -2, INVALID, "s_q");
    DECODE_REJECT("num_heads 0", b.num_heads = 0, INVALID, "num_heads");
    DECODE_REJECT("num_reqs -1", b.num_reqs = -1, INVALID, "num_reqs");
    /* L + R is still the width */
    DECODE_REJECT("kv_lora_rank 0 (L + R still the cache width)",
                  (b.kv_lora_rank = 0, b.rope_dim = 10), INVALID, "kv_lora_rank");
    DECODE_REJECT("rope_dim 3: L + R past the cache width", b.rope_dim = 3, INVALID, "width");
    DECODE_REJECT("kv_lora_rank 9: L + R past the cache width",
                  (b.kv_lora_rank = 9, b.rope_dim = 2), INVALID, "width");
    DECODE_REJECT("rope_dim -1 (L + R still the cache width)",
                  (b.rope_dim = -1, b.kv_lora_rank = 11), INVALID, "rope_dim");
    DECODE_REJECT("block_table_cols -1", b.block_table_cols = -1, INVALID, "block_table");
    DECODE_REJECT("q_nope_token_stride whose span passes int64",
                  b.q_nope_token_stride = INT64_MAX / 2, MLA_ERR_OVERFLOW, "q_nope");

    /* NULLs */
    DECODE_REJECT("q_nope NULL", b.q_nope = NULL, INVALID, "q_nope");
    DECODE_REJECT("q_pe NULL with rope_dim 2", b.q_pe = NULL, INVALID, "q_pe"); /* R = 2 */
    DECODE_REJECT("cache NULL", b.cache = NULL, INVALID, "cache");
    DECODE_REJECT("block_table NULL", b.block_table = NULL, INVALID, "block_table");
    DECODE_REJECT("seq_lens NULL", b.seq_lens = NULL, INVALID, "seq_lens");
    DECODE_REJECT("out NULL", b.out = NULL, INVALID, "out");
    expect_rejected(&e, "mla_decode", "args NULL", decode_with(&e, NULL), INVALID, "args");

    /* dtypes, scale, the cache descriptor */
    DECODE_REJECT("q_dtype fp8_e4m3", b.q_dtype = MLA_DTYPE_FP8_E4M3, MLA_ERR_UNSUPPORTED,
                  "fp8_e4m3");
    DECODE_REJECT("scale NaN", b.scale = NAN, INVALID, "scale");
    DECODE_REJECT("scale +inf", b.scale = INFINITY, INVALID, "scale");
    DECODE_REJECT("scale -inf", b.scale = -INFINITY, INVALID, "scale");
    mla_kv_cache bad_cache = e.cache;
    bad_cache.dtype = MLA_DTYPE_FP8_E4M3; /* same bytes seen as fp8, with no scale */
    bad_cache.scale = 0.0f;
    DECODE_REJECT("fp8 cache scale 0", b.cache = &bad_cache, INVALID, "scale");
    bad_cache = e.cache;
    bad_cache.block_size = 0;
    DECODE_REJECT("cache block_size 0", b.cache = &bad_cache, INVALID, "block_size");
    bad_cache = e.cache;
    bad_cache.data = NULL;
    DECODE_REJECT("cache data NULL", b.cache = &bad_cache, INVALID, "cache");

    /* schedule parameters: the call's own check, as mla_build_decode_sched's */
    mla_decode_sched_params huge = {.num_parts = INT64_C(1) << 40};
    DECODE_REJECT("sched num_parts 2^40", b.sched = &huge, INVALID, "num_parts");
    huge.num_parts = INT64_MAX; /* B + num_parts - 1 would overflow */
    DECODE_REJECT("sched num_parts INT64_MAX", b.sched = &huge, INVALID, "num_parts");
    mla_decode_sched_params heavy = {.overhead = (int64_t)INT32_MAX + 1};
    DECODE_REJECT("sched overhead past int32", b.sched = &heavy, MLA_ERR_OVERFLOW,
                  "overhead = 2147483648");
#undef DECODE_REJECT

    /* workspace */
    if (e.need > 0) {
        expect_rejected(&e, "mla_decode", "workspace 1 byte short",
                        mla_decode(&e.a, e.ws, e.need - 1, 1), MLA_ERR_CAPACITY, "workspace");
        expect_rejected(&e, "mla_decode", "workspace NULL", mla_decode(&e.a, NULL, e.need, 1),
                        MLA_ERR_INVALID_ARGUMENT, "workspace");
    }
    int64_t bytes = 0;
    support_expect_reject("mla_decode_workspace_size", "args NULL",
                          mla_decode_workspace_size(NULL, 1, &bytes), INVALID, "args");
    support_expect_reject("mla_decode_workspace_size", "bytes NULL",
                          mla_decode_workspace_size(&e.a, 1, NULL), INVALID, "bytes");
    /* the size query rejects what the call rejects */
    b = e.a;
    b.sched = &heavy;
    support_expect_reject("mla_decode_workspace_size", "sched overhead past int32",
                          mla_decode_workspace_size(&b, 1, &bytes), MLA_ERR_OVERFLOW, "overhead");
    b.sched = &huge;
    support_expect_reject("mla_decode_workspace_size", "sched num_parts INT64_MAX",
                          mla_decode_workspace_size(&b, 1, &bytes), INVALID, "num_parts");

    /* a forced backend that runs on this CPU but not this config (the
     * unfit one at least): an error listing the reasons, nothing written */
    mla_config cfg = case_config_of(&e.a);
    support_unfit_backend();
    int forced = 0;
    for (int i = 0; i < mla_backend_count(); i++) {
        const char *name = mla_backend_at(i)->name;
        mla_reasons cpu, why;
        assert_int_equal(mla_backend_validate(name, MLA_OP_DECODE, NULL, &cpu), MLA_OK);
        assert_int_equal(mla_backend_validate(name, MLA_OP_DECODE, &cfg, &why), MLA_OK);
        if (cpu.count > 0 || why.count == 0)
            continue;
        assert_int_equal(mla_force_backend(MLA_OP_DECODE, name), MLA_OK);
        expect_rejected(&e, "mla_decode", "forced backend that cannot run the config",
                        decode_with(&e, &e.a), MLA_ERR_BACKEND_INVALID, why.text[0]);
        print_message("[ FORCED   ] %s cannot run %s q / %s cache: rejected with \"%s\"\n", name,
                      mla_dtype_name(cfg.q_dtype), mla_dtype_name(cfg.cache_dtype),
                      mla_last_error());
        forced++;
    }
    assert_true(forced >= 1);
    assert_int_equal(mla_force_backend(MLA_OP_DECODE, NULL), MLA_OK);
    bad_env_finish(&e);
}

/* Sizes at the ends of int64. A cache of one block of INT64_MAX - 1 rows
 * (fp8, width 1) is legal: ceil(len / block_size) must be 1, not a negative
 * count from len + block_size - 1 overflowing, so the block ids a call reads
 * are checked (an id past the cache, or no table at all, is refused) and a
 * good call reads block 0 as a cache of 8-row blocks would. A workspace
 * that does not fit int64 (no requests, rows of 2^56) is an overflow, not a
 * negative byte count; s_q = INT64_MAX (one head) with no requests needs
 * no rows. */
static void test_extreme_sizes(void **state)
{
    (void)state;
    bad_env e;
    bad_env_init(&e);
    uint8_t rows[8];
    for (int i = 0; i < 8; i++)
        rows[i] = (uint8_t)(0x28 + 5 * i); /* fp8_e4m3 0.25 .. 4.5 */
    mla_kv_cache huge = {.data = rows, .dtype = MLA_DTYPE_FP8_E4M3, .num_blocks = 1,
                         .block_size = INT64_MAX - 1, .width = 1, .scale = 0.5f};
    mla_kv_cache small = huge;
    small.block_size = 8;
    const float q[2] = {0.7f, -1.3f};
    int32_t len = 5, table = 0;
    const mla_decode_args good = {.num_reqs = 1, .s_q = 1, .num_heads = 2, .kv_lora_rank = 1,
                                  .scale = 0.9f, .q_dtype = MLA_DTYPE_F32, .q_nope = q,
                                  .q_nope_token_stride = 2, .q_nope_head_stride = 1,
                                  .cache = &small, .block_table = &table, .block_table_cols = 1,
                                  .seq_lens = &len, .out = e.out + MARGIN, .out_token_stride = 2,
                                  .out_head_stride = 1};
    mla_decode_args a = good;
    assert_int_equal(decode_with(&e, &a), MLA_OK);
    float want[2];
    memcpy(want, e.out + MARGIN, sizeof want);
    a.cache = &huge;
    bad_env_reset(&e);
    assert_int_equal(decode_with(&e, &a), MLA_OK);
    assert_memory_equal(e.out + MARGIN, want, sizeof want);
    bad_env_reset(&e);

    int64_t bytes = 0;
    table = 7;
    /* the size query reads shapes only: the call refuses the id */
    assert_int_equal(mla_decode_workspace_size(&a, 1, &bytes), MLA_OK);
    expect_rejected(&e, "mla_decode", "block_table id past a one-block cache of INT64_MAX - 1 rows",
                    decode_with(&e, &a), MLA_ERR_OUT_OF_RANGE,
                    "block_table[0][0] = 7 is outside [0, 1)");
    table = 0;
    a.block_table = NULL;
    a.block_table_cols = 0;
    assert_int_equal(mla_decode_workspace_size(&a, 1, &bytes), MLA_OK);
    expect_rejected(&e, "mla_decode", "block_table NULL with 0 columns for a request of 5 tokens",
                    decode_with(&e, &a), MLA_ERR_OUT_OF_RANGE,
                    "seq_lens[0] = 5 needs 1 blocks of 9223372036854775806, past block_table_cols "
                    "0");
    /* the forward reads the same table */
    const float w[2] = {1.0f, 0.5f};
    mla_decode_forward_args f = case_forward_of(&good);
    f.qk_nope_dim = f.v_head_dim = 1;
    f.q = q;
    f.q_token_stride = 2;
    f.q_head_stride = 1;
    f.w_uk_t = f.w_uv = w;
    f.w_dtype = MLA_DTYPE_F32;
    f.out = e.out + MARGIN;
    f.out_token_stride = 2;
    f.cache = &huge;
    assert_int_equal(mla_decode_forward(&f, e.ws, e.ws_bytes, 1), MLA_OK);
    bad_env_reset(&e);
    table = 7;
    expect_rejected(&e, "mla_decode_forward",
                    "block_table id past a one-block cache of INT64_MAX - 1 rows",
                    mla_decode_forward(&f, e.ws, e.ws_bytes, 1), MLA_ERR_OUT_OF_RANGE,
                    "block_table[0][0] = 7");
    table = 0;

    /* no requests over rows of 2^56: the workspace does not fit int64 */
    mla_kv_cache wide = {.data = rows, .dtype = MLA_DTYPE_FP8_E4M3, .num_blocks = 0,
                         .block_size = 1, .width = INT64_C(1) << 56, .scale = 1.0f};
    const mla_decode_args none = {.num_reqs = 0, .s_q = 1, .num_heads = 1,
                                  .kv_lora_rank = INT64_C(1) << 56, .scale = 1.0f,
                                  .q_dtype = MLA_DTYPE_F32, .cache = &wide};
    bytes = -1;
    support_expect_reject("mla_decode_workspace_size",
                          "workspace bytes past int64 (no requests, rows of 2^56)",
                          mla_decode_workspace_size(&none, 1, &bytes), MLA_ERR_OVERFLOW,
                          "mla_decode_workspace_size: workspace");
    assert_int_equal(bytes, -1);
    expect_rejected(&e, "mla_decode", "workspace bytes past int64 (no requests, rows of 2^56)",
                    mla_decode(&none, e.ws, e.ws_bytes, 1), MLA_ERR_OVERFLOW, "workspace");
    const mla_decode_forward_args some = f;
    f = case_forward_of(&none); /* and the rest as before */
    f.qk_nope_dim = some.qk_nope_dim;
    f.v_head_dim = some.v_head_dim;
    f.q_token_stride = some.q_token_stride;
    f.q_head_stride = some.q_head_stride;
    f.w_uk_t = some.w_uk_t;
    f.w_uv = some.w_uv;
    f.w_dtype = some.w_dtype;
    f.out_token_stride = some.out_token_stride;
    support_expect_reject("mla_decode_forward_workspace_size",
                          "workspace bytes past int64 (no requests, rows of 2^56)",
                          mla_decode_forward_workspace_size(&f, 1, &bytes), MLA_ERR_OVERFLOW,
                          "workspace");
    expect_rejected(&e, "mla_decode_forward",
                    "workspace bytes past int64 (no requests, rows of 2^56)",
                    mla_decode_forward(&f, e.ws, e.ws_bytes, 1), MLA_ERR_OVERFLOW, "workspace");
    /* no requests of INT64_MAX queries each: nothing to do, a small workspace */
    a = good;
    a.num_reqs = 0;
    a.s_q = INT64_MAX;
    a.num_heads = 1;
    assert_int_equal(mla_decode_workspace_size(&a, 1, &bytes), MLA_OK);
    assert_true(bytes > 0 && bytes < e.ws_bytes);
    assert_int_equal(decode_with(&e, &a), MLA_OK);
    case_expect_guards(e.out, sizeof e.out, "no requests: out");
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
    mla_decode_forward_args good = case_forward_of(&e.a);
    good.qk_nope_dim = P;
    good.v_head_dim = V;
    good.q = q;
    good.q_token_stride = H * (P + 2);
    good.q_head_stride = P + 2;
    good.w_uk_t = w_uk_t;
    good.w_uv = w_uv;
    good.w_dtype = MLA_DTYPE_F32;
    good.out = e.out + MARGIN;
    good.out_token_stride = H * V;
    int64_t need = 0;
    assert_int_equal(mla_decode_forward_workspace_size(&good, 1, &need), MLA_OK);
    assert_true(need > 0); /* ql_nope and o_lat live there */
    bad_env_grow_ws(&e, need * 8 + (1 << 20));
    unsigned char *ws = e.ws;
    const int64_t ws_bytes = e.ws_bytes;
    assert_int_equal(mla_decode_forward(&good, ws, ws_bytes, 1), MLA_OK);
    bad_env_reset(&e);
    mla_decode_forward_args f;
#define FWD_REJECT(bad_input, edit, status, needle)                                                \
    do {                                                                                           \
        f = good;                                                                                  \
        edit;                                                                                      \
        expect_rejected(&e, "mla_decode_forward", bad_input,                                       \
                        mla_decode_forward(&f, ws, ws_bytes, 1), status, needle);                  \
    } while (0)
    FWD_REJECT("q NULL", f.q = NULL, MLA_ERR_INVALID_ARGUMENT, "q is NULL");
    FWD_REJECT("w_uk_t NULL", f.w_uk_t = NULL, MLA_ERR_INVALID_ARGUMENT, "w_uk_t");
    FWD_REJECT("w_uv NULL", f.w_uv = NULL, MLA_ERR_INVALID_ARGUMENT, "w_uv");
    FWD_REJECT("out NULL", f.out = NULL, MLA_ERR_INVALID_ARGUMENT, "out");
    FWD_REJECT("w_dtype f16", f.w_dtype = MLA_DTYPE_F16, MLA_ERR_UNSUPPORTED, "f16");
    FWD_REJECT("qk_nope_dim 0", f.qk_nope_dim = 0, MLA_ERR_INVALID_ARGUMENT, "qk_nope_dim");
    FWD_REJECT("v_head_dim 0", f.v_head_dim = 0, MLA_ERR_INVALID_ARGUMENT, "v_head_dim");
    FWD_REJECT("out_token_stride below num_heads x v_head_dim", f.out_token_stride = H * V - 1,
               MLA_ERR_INVALID_ARGUMENT, "stride");
    FWD_REJECT("dtype fp8_e4m3", f.dtype = MLA_DTYPE_FP8_E4M3, MLA_ERR_UNSUPPORTED, "fp8_e4m3");
    FWD_REJECT("num_heads 0", f.num_heads = 0, MLA_ERR_INVALID_ARGUMENT, "num_heads");
    FWD_REJECT("scale NaN", f.scale = NAN, MLA_ERR_INVALID_ARGUMENT, "scale");
    FWD_REJECT("cache NULL", f.cache = NULL, MLA_ERR_INVALID_ARGUMENT, "cache is NULL");
    FWD_REJECT("rope_dim 3 with a cache of width L + 2", f.rope_dim = 3, MLA_ERR_INVALID_ARGUMENT,
               "cache width");
    e.block_table[5] = 6;
    FWD_REJECT("block_table id past num_blocks", (void)0, MLA_ERR_OUT_OF_RANGE,
               "block_table[1][2]");
    e.block_table[5] = 2;
    e.lens[1] = 13;
    FWD_REJECT("seq_lens entry needing more blocks than block_table_cols", (void)0,
               MLA_ERR_OUT_OF_RANGE, "seq_lens[1]");
    e.lens[1] = 9;
    /* a schedule the attention would refuse is refused before ql_nope is
     * computed into the workspace, and by the size query too */
    mla_decode_sched_params heavy = {.overhead = (int64_t)INT32_MAX + 1};
    FWD_REJECT("sched overhead past int32", f.sched = &heavy, MLA_ERR_OVERFLOW,
               "overhead = 2147483648");
    f = good;
    f.sched = &heavy;
    int64_t bytes = 0;
    support_expect_reject("mla_decode_forward_workspace_size", "sched overhead past int32",
                          mla_decode_forward_workspace_size(&f, 1, &bytes), MLA_ERR_OVERFLOW,
                          "overhead");
#undef FWD_REJECT
    expect_rejected(&e, "mla_decode_forward", "args NULL",
                    mla_decode_forward(NULL, ws, ws_bytes, 1), MLA_ERR_INVALID_ARGUMENT, "args");
    expect_rejected(&e, "mla_decode_forward", "workspace 1 byte short",
                    mla_decode_forward(&good, ws, need - 1, 1), MLA_ERR_CAPACITY, "workspace");
    expect_rejected(&e, "mla_decode_forward", "workspace NULL",
                    mla_decode_forward(&good, NULL, need, 1), MLA_ERR_INVALID_ARGUMENT,
                    "workspace");
    bad_env_finish(&e);
}

/* The forward multiplies the attention's sizes into its workspace layout
 * (q_lat's strides, num_heads x (L + R)) only once they are checked: an
 * L of 2^62 or num_heads past what that stride can count is
 * MLA_ERR_OVERFLOW even with no requests, and no
 * requests with q and out NULL run nothing (q and out were offset per
 * head). The suites under -fsanitize=undefined see each. */
static void test_forward_sizes_checked_first(void **state)
{
    (void)state;
    bad_env e;
    bad_env_init(&e);
    float w[3 * 8 * 4];
    for (int i = 0; i < COUNT(w); i++)
        w[i] = (float)case_uniform();
    mla_decode_forward_args f = case_forward_of(&e.a);
    f.qk_nope_dim = 4;
    f.v_head_dim = 3;
    f.w_uk_t = f.w_uv = w;
    f.w_dtype = MLA_DTYPE_F32;
    f.out_token_stride = 3 * 3;
    f.lse = NULL;
    f.num_reqs = 0;
    int64_t bytes = -1;
    assert_int_equal(mla_decode_forward_workspace_size(&f, 1, &bytes), MLA_OK);
    assert_int_equal(mla_decode_forward(&f, e.ws, e.ws_bytes, 2), MLA_OK);
    case_expect_guards(e.out, sizeof e.out, "no requests: out");
    bad_env_reset(&e);

    f.kv_lora_rank = INT64_C(1) << 62;
    bytes = -1;
    expect_rejected(&e, "mla_decode_forward_workspace_size", "kv_lora_rank 2^62",
                    mla_decode_forward_workspace_size(&f, 1, &bytes), MLA_ERR_OVERFLOW,
                    "num_heads x (kv_lora_rank + rope_dim)");
    expect_rejected(&e, "mla_decode_forward", "kv_lora_rank 2^62",
                    mla_decode_forward(&f, e.ws, e.ws_bytes, 1), MLA_ERR_OVERFLOW,
                    "num_heads x (kv_lora_rank + rope_dim)");
    f.kv_lora_rank = 8;
    f.num_heads = INT64_C(1) << 61;
    expect_rejected(&e, "mla_decode_forward_workspace_size", "num_heads 2^61",
                    mla_decode_forward_workspace_size(&f, 1, &bytes), MLA_ERR_OVERFLOW,
                    "num_heads x (kv_lora_rank + rope_dim)");
    expect_rejected(&e, "mla_decode_forward", "num_heads 2^61",
                    mla_decode_forward(&f, e.ws, e.ws_bytes, 1), MLA_ERR_OVERFLOW,
                    "num_heads x (kv_lora_rank + rope_dim)");
    assert_int_equal(bytes, -1);
    bad_env_finish(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        CASE_TEST(test_prepare_weights_rejects),
        CASE_TEST(test_decode_rejects),
        CASE_TEST(test_extreme_sizes),
        CASE_TEST(test_workspace_covers_shorter_s_q),
        CASE_TEST(test_forward_rejects),
        CASE_TEST(test_forward_sizes_checked_first),
    };
    case_apply_filter();
    return cmocka_run_group_tests_name("decode_rejects", tests, NULL, NULL);
}
