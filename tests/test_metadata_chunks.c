/*
 * Chunked-context prefill metadata (docs/semantics.md §2.6): workspace sizing, workspace
 * and KV-cache byte queries, and context-chunk plans. Plans are checked
 * against the docs/semantics.md §2.6 worked example value by value, then thousands of random
 * plans are checked against the properties a gather kernel relies on (each
 * request's context covered once, in order, within the workspace); a lean
 * plan and its per-chunk token_to_seq rows must be the dense plan exactly.
 * Every validation error is exercised and must leave the output untouched.
 */
#include "support.h"

#include <stdlib.h>
#include <string.h>

/* ---- helpers ----------------------------------------------------------------- */

static mla_chunk_plan *plan_ok(const int32_t *ctx, const int32_t *qsl, int64_t p, int64_t w,
                               int64_t bs, mla_chunk_plan_info *info)
{
    mla_chunk_plan *plan = NULL;
    mla_status st = mla_chunk_plan_create(ctx, qsl, p, w, bs, 0, MLA_DTYPE_BF16, &plan);
    if (st != MLA_OK)
        print_error("unexpected failure: %s\n", mla_last_error());
    assert_int_equal(st, MLA_OK);
    assert_non_null(plan);
    mla_chunk_plan_info_get(plan, info);
    return plan;
}

static void assert_row(const int32_t *got, const int32_t *want, size_t n)
{
    for (size_t k = 0; k < n; k++)
        assert_int_equal(got[k], want[k]);
}

/* ---- workspace and cache sizes ------------------------------------------------- */

static void test_workspace_tokens(void **state)
{
    (void)state;
    int64_t w = -1;
    /* the two docs/semantics.md examples */
    assert_int_equal(mla_chunk_workspace_tokens(163840, 256, 64, 0, &w), MLA_OK);
    assert_int_equal(w, 65536);
    assert_int_equal(mla_chunk_workspace_tokens(4096, 8, 16, 0, &w), MLA_OK);
    assert_int_equal(w, 32768);
    /* 4 pages per sequence wins over 8 * max_model_len */
    assert_int_equal(mla_chunk_workspace_tokens(50, 8, 16, -1, &w), MLA_OK);
    assert_int_equal(w, 512);
    /* the older cap */
    assert_int_equal(mla_chunk_workspace_tokens(163840, 256, 64, 128 * 1024, &w), MLA_OK);
    assert_int_equal(w, 131072);
    /* one page per sequence beats the cap */
    assert_int_equal(mla_chunk_workspace_tokens(163840, 1024, 128, 0, &w), MLA_OK);
    assert_int_equal(w, 131072);
    /* 8 * max_model_len past int64 only competes with the cap */
    assert_int_equal(mla_chunk_workspace_tokens(INT64_MAX / 2, 1, 16, 0, &w), MLA_OK);
    assert_int_equal(w, 65536);

    w = 7;
    support_expect_reject("mla_chunk_workspace_tokens", "tokens NULL",
                          mla_chunk_workspace_tokens(4096, 8, 16, 0, NULL),
                          MLA_ERR_INVALID_ARGUMENT, "NULL tokens");
    support_expect_reject("mla_chunk_workspace_tokens", "max_model_len 0",
                          mla_chunk_workspace_tokens(0, 8, 16, 0, &w), MLA_ERR_INVALID_ARGUMENT,
                          "max_model_len = 0");
    support_expect_reject("mla_chunk_workspace_tokens", "max_num_seqs -1",
                          mla_chunk_workspace_tokens(4096, -1, 16, 0, &w), MLA_ERR_INVALID_ARGUMENT,
                          "max_num_seqs = -1");
    support_expect_reject("mla_chunk_workspace_tokens", "block_size 0",
                          mla_chunk_workspace_tokens(4096, 8, 0, 0, &w), MLA_ERR_INVALID_ARGUMENT,
                          "block_size = 0");
    support_expect_reject("mla_chunk_workspace_tokens", "max_num_seqs x block_size past int64",
                          mla_chunk_workspace_tokens(4096, INT64_MAX / 2, 16, 0, &w),
                          MLA_ERR_OVERFLOW, "overflows int64");
    assert_int_equal(w, 7);
}

static void test_workspace_bytes(void **state)
{
    (void)state;
    int64_t bytes = -1, align = -1;
    assert_int_equal(mla_chunk_workspace_bytes(65536, 576, MLA_DTYPE_BF16, &bytes, &align), MLA_OK);
    assert_int_equal(bytes, 65536 * 576 * 2);
    assert_int_equal(align, 64);
    assert_int_equal(mla_chunk_workspace_bytes(3, 5, MLA_DTYPE_FP8_E4M3, &bytes, &align), MLA_OK);
    assert_int_equal(bytes, 15);
    assert_int_equal(mla_chunk_workspace_bytes(3, 5, MLA_DTYPE_F32, &bytes, &align), MLA_OK);
    assert_int_equal(bytes, 60);

    bytes = align = 7;
    support_expect_reject("mla_chunk_workspace_bytes", "bytes NULL",
                          mla_chunk_workspace_bytes(16, 576, MLA_DTYPE_BF16, NULL, &align),
                          MLA_ERR_INVALID_ARGUMENT, "NULL bytes");
    support_expect_reject("mla_chunk_workspace_bytes", "alignment NULL",
                          mla_chunk_workspace_bytes(16, 576, MLA_DTYPE_BF16, &bytes, NULL),
                          MLA_ERR_INVALID_ARGUMENT, "NULL alignment");
    support_expect_reject("mla_chunk_workspace_bytes", "tokens 0",
                          mla_chunk_workspace_bytes(0, 576, MLA_DTYPE_BF16, &bytes, &align),
                          MLA_ERR_INVALID_ARGUMENT, "tokens = 0");
    support_expect_reject("mla_chunk_workspace_bytes", "width -2",
                          mla_chunk_workspace_bytes(16, -2, MLA_DTYPE_BF16, &bytes, &align),
                          MLA_ERR_INVALID_ARGUMENT, "width = -2");
    support_expect_reject("mla_chunk_workspace_bytes", "dtype not an mla_dtype",
                          mla_chunk_workspace_bytes(16, 576, MLA_DTYPE_COUNT, &bytes, &align),
                          MLA_ERR_INVALID_ARGUMENT, "dtype 5 is not a valid mla_dtype");
    support_expect_reject("mla_chunk_workspace_bytes", "tokens x width past int64",
                          mla_chunk_workspace_bytes(INT64_MAX / 1024, 576, MLA_DTYPE_BF16, &bytes,
                                                    &align),
                          MLA_ERR_OVERFLOW, "overflows int64");
    support_expect_reject("mla_chunk_workspace_bytes", "tokens x dtype size past int64",
                          mla_chunk_workspace_bytes(INT64_MAX / 2, 1, MLA_DTYPE_F32, &bytes,
                                                    &align),
                          MLA_ERR_OVERFLOW, "overflows int64");
    assert_int_equal(bytes, 7);
    assert_int_equal(align, 7);
}

static void test_kv_cache_shape(void **state)
{
    (void)state;
    int64_t shape[3] = {-1, -1, -1}, bytes = -1, align = -1;
    assert_int_equal(mla_kv_cache_shape(1000, 64, 576, MLA_DTYPE_BF16, shape, &bytes, &align), MLA_OK);
    assert_int_equal(shape[0], 1000);
    assert_int_equal(shape[1], 64);
    assert_int_equal(shape[2], 576);
    assert_int_equal(bytes, 1000 * 64 * 576 * 2);
    assert_int_equal(align, 64);
    assert_int_equal(mla_kv_cache_shape(0, 16, 656, MLA_DTYPE_FP8_E4M3, shape, &bytes, &align), MLA_OK);
    assert_int_equal(shape[0], 0);
    assert_int_equal(bytes, 0);

    int64_t keep[3] = {11, 12, 13};
    memcpy(shape, keep, sizeof shape);
    bytes = align = 7;
    support_expect_reject("mla_kv_cache_shape", "shape NULL",
                          mla_kv_cache_shape(10, 16, 576, MLA_DTYPE_BF16, NULL, &bytes, &align),
                          MLA_ERR_INVALID_ARGUMENT, "NULL shape");
    support_expect_reject("mla_kv_cache_shape", "bytes NULL",
                          mla_kv_cache_shape(10, 16, 576, MLA_DTYPE_BF16, shape, NULL, &align),
                          MLA_ERR_INVALID_ARGUMENT, "NULL bytes");
    support_expect_reject("mla_kv_cache_shape", "alignment NULL",
                          mla_kv_cache_shape(10, 16, 576, MLA_DTYPE_BF16, shape, &bytes, NULL),
                          MLA_ERR_INVALID_ARGUMENT, "NULL alignment");
    support_expect_reject("mla_kv_cache_shape", "num_blocks -1",
                          mla_kv_cache_shape(-1, 16, 576, MLA_DTYPE_BF16, shape, &bytes, &align),
                          MLA_ERR_INVALID_ARGUMENT, "num_blocks = -1 is negative");
    support_expect_reject("mla_kv_cache_shape", "block_size 0",
                          mla_kv_cache_shape(10, 0, 576, MLA_DTYPE_BF16, shape, &bytes, &align),
                          MLA_ERR_INVALID_ARGUMENT, "block_size = 0");
    support_expect_reject("mla_kv_cache_shape", "width 0",
                          mla_kv_cache_shape(10, 16, 0, MLA_DTYPE_BF16, shape, &bytes, &align),
                          MLA_ERR_INVALID_ARGUMENT, "width = 0");
    support_expect_reject("mla_kv_cache_shape", "dtype -1",
                          mla_kv_cache_shape(10, 16, 576, (mla_dtype)-1, shape, &bytes, &align),
                          MLA_ERR_INVALID_ARGUMENT, "dtype -1 is not a valid mla_dtype");
    support_expect_reject("mla_kv_cache_shape", "num_blocks x block_size x width past int64",
                          mla_kv_cache_shape(INT64_MAX / 64, 64, 576, MLA_DTYPE_F32, shape, &bytes,
                                             &align),
                          MLA_ERR_OVERFLOW, "overflows int64");
    support_expect_reject("mla_kv_cache_shape", "cache bytes past int64 (elements fit)",
                          mla_kv_cache_shape(INT64_MAX / 64, 64, 1, MLA_DTYPE_F32, shape, &bytes,
                                             &align),
                          MLA_ERR_OVERFLOW, "overflows int64");
    assert_memory_equal(shape, keep, sizeof shape);
    assert_int_equal(bytes, 7);
    assert_int_equal(align, 7);
}

/* ---- plans: fixed cases -------------------------------------------------------- */

/* docs/semantics.md §2.6 worked example: W = 4096, bs = 16; A (ctx 5000, q 100),
 * C (ctx 1200, q 30), B (ctx 0, q 50). */
static void test_spec_example(void **state)
{
    (void)state;
    const int32_t ctx[3] = {5000, 1200, 0}, qsl[4] = {0, 100, 130, 180};
    mla_chunk_plan_info in;
    mla_chunk_plan *plan = plan_ok(ctx, qsl, 3, 4096, 16, &in);
    assert_int_equal(in.num_prefills, 3);
    assert_int_equal(in.num_with_context, 2);
    assert_int_equal(in.max_context_len, 5000);
    assert_int_equal(in.max_chunk_len, 2048);
    assert_int_equal(in.num_chunks, 3);
    const int32_t lens[3][3] = {{2048, 1200, 0}, {2048, 0, 0}, {904, 0, 0}};
    const int32_t cu[3][4] = {{0, 2048, 3248, 3248}, {0, 2048, 2048, 2048}, {0, 904, 904, 904}};
    const int32_t starts[3][3] = {{0, 0, 0}, {2048, 2048, 2048}, {4096, 4096, 4096}};
    const int32_t seq_tot[3] = {3248, 2048, 904}, max_seq_lens[3] = {2048, 2048, 904};
    assert_row(in.chunk_seq_lens, &lens[0][0], 9);
    assert_row(in.cu_seq_lens, &cu[0][0], 12);
    assert_row(in.starts, &starts[0][0], 9);
    assert_row(in.seq_tot, seq_tot, 3);
    assert_row(in.max_seq_lens, max_seq_lens, 3);
    assert_int_equal(in.prefill_tokens_with_context, 130);
    assert_int_equal(in.token_to_seq_stride, 3248);
    /* token_to_seq: 0 x2048 then 1 x1200; 0 x2048 then zeros; 0 x904 then zeros */
    for (int64_t t = 0; t < 3248; t++) {
        assert_int_equal(in.token_to_seq[t], t < 2048 ? 0 : 1);
        assert_int_equal(in.token_to_seq[3248 + t], 0);
        assert_int_equal(in.token_to_seq[2 * 3248 + t], 0);
    }
    assert_null(in.workspace);
    assert_int_equal(in.workspace_tokens, 4096);
    mla_chunk_plan_destroy(plan);
}

/* W / n_ctx = 333 is not a multiple of 16: M rounds down to 320. */
static void test_chunk_len_rounds_down(void **state)
{
    (void)state;
    const int32_t ctx[4] = {700, 5, 321, 0}, qsl[5] = {0, 10, 20, 30, 40};
    mla_chunk_plan_info in;
    mla_chunk_plan *plan = plan_ok(ctx, qsl, 4, 1000, 16, &in);
    assert_int_equal(in.num_with_context, 3);
    assert_int_equal(in.max_chunk_len, 320);
    assert_int_equal(in.num_chunks, 3);
    const int32_t lens[3][4] = {{320, 5, 320, 0}, {320, 0, 1, 0}, {60, 0, 0, 0}};
    const int32_t cu[3][5] = {{0, 320, 325, 645, 645}, {0, 320, 320, 321, 321}, {0, 60, 60, 60, 60}};
    const int32_t seq_tot[3] = {645, 321, 60}, max_seq_lens[3] = {320, 320, 60};
    assert_row(in.chunk_seq_lens, &lens[0][0], 12);
    assert_row(in.cu_seq_lens, &cu[0][0], 15);
    assert_row(in.seq_tot, seq_tot, 3);
    assert_row(in.max_seq_lens, max_seq_lens, 3);
    assert_int_equal(in.starts[4 * 2 + 3], 640);
    assert_int_equal(in.prefill_tokens_with_context, 30);
    assert_int_equal(in.token_to_seq_stride, 645);
    assert_int_equal(in.token_to_seq[645 + 320], 2); /* chunk 1: the last token of request 2 */
    assert_int_equal(in.token_to_seq[645 + 321], 0);
    mla_chunk_plan_destroy(plan);

    /* without rounding M would be 333; with bs = 1 it is */
    plan = plan_ok(ctx, qsl, 4, 1000, 1, &in);
    assert_int_equal(in.max_chunk_len, 333);
    mla_chunk_plan_destroy(plan);
}

static void test_no_context(void **state)
{
    (void)state;
    const int32_t ctx[3] = {0, 0, 0}, qsl[4] = {0, 7, 9, 20};
    mla_chunk_plan_info in;
    mla_chunk_plan *plan = plan_ok(ctx, qsl, 3, 4096, 16, &in);
    assert_int_equal(in.num_prefills, 3);
    assert_int_equal(in.num_with_context, 0);
    assert_int_equal(in.max_context_len, 0);
    assert_int_equal(in.max_chunk_len, 0);
    assert_int_equal(in.num_chunks, 0);
    assert_int_equal(in.token_to_seq_stride, 0);
    assert_int_equal(in.prefill_tokens_with_context, 0);
    mla_chunk_plan_destroy(plan);

    /* no prefills at all: the arrays may be NULL */
    plan = plan_ok(NULL, NULL, 0, 16, 16, &in);
    assert_int_equal(in.num_prefills, 0);
    assert_int_equal(in.num_chunks, 0);
    assert_int_equal(in.prefill_tokens_with_context, 0);
    mla_chunk_plan_destroy(plan);
    const int32_t qsl0[1] = {0};
    plan = plan_ok(NULL, qsl0, 0, 16, 16, &in);
    assert_int_equal(in.num_chunks, 0);
    mla_chunk_plan_destroy(plan);

    /* a workspace too small for a block per request matters only with context */
    plan = plan_ok(ctx, qsl, 3, 1, 16, &in);
    assert_int_equal(in.num_chunks, 0);
    mla_chunk_plan_destroy(plan);

    mla_chunk_plan_destroy(NULL);
    memset(&in, 0x5a, sizeof in);
    mla_chunk_plan_info_get(NULL, &in);
    assert_int_equal(in.num_chunks, 0);
    assert_null(in.starts);
}

/* Prefill order is not checked (vLLM does not); n_ctx still counts them all. */
static void test_context_after_plain_prefill(void **state)
{
    (void)state;
    const int32_t ctx[3] = {0, 40, 8}, qsl[4] = {0, 5, 11, 18};
    mla_chunk_plan_info in;
    mla_chunk_plan *plan = plan_ok(ctx, qsl, 3, 64, 16, &in);
    assert_int_equal(in.num_with_context, 2);
    assert_int_equal(in.max_chunk_len, 32);
    assert_int_equal(in.num_chunks, 2);
    const int32_t lens[2][3] = {{0, 32, 8}, {0, 8, 0}};
    assert_row(in.chunk_seq_lens, &lens[0][0], 6);
    assert_int_equal(in.token_to_seq[0], 1);
    assert_int_equal(in.token_to_seq[32], 2);
    assert_int_equal(in.prefill_tokens_with_context, 11); /* qsl_p[n_ctx], as vLLM */
    mla_chunk_plan_destroy(plan);
}

static void test_owned_workspace(void **state)
{
    (void)state;
    const int32_t ctx[2] = {100, 3}, qsl[3] = {0, 4, 8};
    const struct {
        int64_t w, width;
        mla_dtype dtype;
        int64_t bytes;
    } cases[] = {
        {4096, 576, MLA_DTYPE_BF16, 4096 * 576 * 2},
        {37, 3, MLA_DTYPE_FP8_E4M3, 111}, /* not a multiple of the alignment */
        {5, 1, MLA_DTYPE_F32, 20},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        mla_chunk_plan *plan = NULL;
        assert_int_equal(mla_chunk_plan_create(ctx, qsl, 2, cases[c].w, 1, cases[c].width,
                                               cases[c].dtype, &plan), MLA_OK);
        mla_chunk_plan_info in;
        mla_chunk_plan_info_get(plan, &in);
        assert_non_null(in.workspace);
        assert_int_equal((uintptr_t)in.workspace % 64, 0);
        assert_int_equal(in.workspace_tokens, cases[c].w);
        int64_t bytes, align;
        assert_int_equal(mla_chunk_workspace_bytes(cases[c].w, cases[c].width, cases[c].dtype,
                                                   &bytes, &align), MLA_OK);
        assert_int_equal(bytes, cases[c].bytes);
        assert_int_equal(align, 64);
        memset(in.workspace, 0xa5, (size_t)bytes); /* writable over its full size */
        assert_int_equal(((unsigned char *)in.workspace)[bytes - 1], 0xa5);
        mla_chunk_plan_destroy(plan);
    }
    /* the dtype is not looked at without a workspace */
    mla_chunk_plan *plan = NULL;
    assert_int_equal(mla_chunk_plan_create(ctx, qsl, 2, 64, 16, 0, MLA_DTYPE_COUNT, &plan), MLA_OK);
    mla_chunk_plan_info in;
    mla_chunk_plan_info_get(plan, &in);
    assert_null(in.workspace);
    mla_chunk_plan_destroy(plan);
}

/* ---- plans: random properties ------------------------------------------------- */

/* Everything a plan must satisfy, derived from the inputs alone. */
static void check_plan(const int32_t *ctx, const int32_t *qsl, int64_t p, int64_t w, int64_t bs,
                       const mla_chunk_plan_info *in)
{
    int64_t n_ctx = 0, c_max = 0;
    for (int64_t r = 0; r < p; r++) {
        n_ctx += ctx[r] > 0;
        c_max = ctx[r] > c_max ? ctx[r] : c_max;
    }
    assert_int_equal(in->num_prefills, p);
    assert_int_equal(in->num_with_context, n_ctx);
    assert_int_equal(in->max_context_len, c_max);
    assert_int_equal(in->prefill_tokens_with_context, qsl[n_ctx]);
    assert_int_equal(in->workspace_tokens, w);
    if (c_max == 0) {
        assert_int_equal(in->num_chunks, 0);
        assert_int_equal(in->max_chunk_len, 0);
        return;
    }
    int64_t m = in->max_chunk_len, n = in->num_chunks;
    /* M: the largest multiple of bs with n_ctx * M <= W */
    assert_true(m > 0 && m % bs == 0);
    assert_true(m * n_ctx <= w && (m + bs) * n_ctx > w);
    /* just enough chunks */
    assert_true(n * m >= c_max && (n - 1) * m < c_max);

    int64_t stride = 0;
    for (int64_t i = 0; i < n; i++)
        stride = in->seq_tot[i] > stride ? in->seq_tot[i] : stride;
    assert_int_equal(in->token_to_seq_stride, stride);

    /* each request's context is covered once, in order, contiguously */
    for (int64_t r = 0; r < p; r++) {
        int64_t covered = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t start = in->starts[i * p + r], len = in->chunk_seq_lens[i * p + r];
            assert_int_equal(start, i * m);
            assert_true(len >= 0 && len <= m);
            if (len > 0)
                assert_int_equal(start, covered);
            covered += len;
        }
        assert_int_equal(covered, ctx[r]);
    }
    for (int64_t i = 0; i < n; i++) {
        const int32_t *lens = in->chunk_seq_lens + i * p, *cu = in->cu_seq_lens + i * (p + 1);
        const int32_t *t2s = in->token_to_seq + i * stride;
        int64_t longest = 0;
        assert_int_equal(cu[0], 0);
        for (int64_t r = 0; r < p; r++) {
            assert_int_equal(cu[r + 1] - cu[r], lens[r]);
            longest = lens[r] > longest ? lens[r] : longest;
            for (int64_t t = cu[r]; t < cu[r + 1]; t++)
                assert_int_equal(t2s[t], r);
        }
        assert_int_equal(in->seq_tot[i], cu[p]);
        assert_int_equal(in->max_seq_lens[i], longest);
        assert_true(in->seq_tot[i] <= w && in->max_seq_lens[i] <= w); /* fits the workspace */
        for (int64_t t = cu[p]; t < stride; t++)
            assert_int_equal(t2s[t], 0);
    }
}

/* Random prefill batch: with-context prefills usually first, sometimes
 * not; contexts from tiny to a few thousand tokens; any block size. */
static int64_t random_batch(int32_t *ctx, int32_t *qsl, int64_t *bs)
{
    int64_t p = support_random_in(0, 10), longest = support_random_in(0, 3) == 0 ? 5 : support_random_in(1, 3000);
    const int64_t sizes[] = {1, 2, 3, 16, 64};
    *bs = support_random_in(0, 5) == 5 ? support_random_in(1, 100) : sizes[support_random_in(0, 4)];
    bool grouped = support_random_in(0, 9) < 7;
    int64_t with = grouped ? support_random_in(0, p) : 0;
    qsl[0] = 0;
    for (int64_t r = 0; r < p; r++) {
        bool has = grouped ? r < with : support_random_in(0, 2) > 0;
        ctx[r] = has ? (int32_t)support_random_in(1, longest) : 0;
        qsl[r + 1] = qsl[r] + (int32_t)support_random_in(0, 50);
    }
    return p;
}

enum { GUARD = 8, SENTINEL = 0x5a5a5a5a };

/* The lean plan of the same inputs has every array of the dense plan `in`
 * but token_to_seq, and mla_chunk_token_to_seq gives each of its rows: at
 * the stride (the row exactly), at seq_tot (the indices alone) and longer
 * (zeros after), writing nothing past out_len. */
static void check_lean_plan(const int32_t *ctx, const int32_t *qsl, int64_t p, int64_t w,
                            int64_t bs, const mla_chunk_plan_info *in)
{
    mla_chunk_plan *plan = NULL;
    assert_int_equal(mla_chunk_plan_create_lean(ctx, qsl, p, w, bs, 0, MLA_DTYPE_F32, &plan),
                     MLA_OK);
    mla_chunk_plan_info lean;
    mla_chunk_plan_info_get(plan, &lean);
    assert_null(lean.token_to_seq);
    int64_t n = in->num_chunks, stride = in->token_to_seq_stride;
    assert_int_equal(lean.num_prefills, in->num_prefills);
    assert_int_equal(lean.num_with_context, in->num_with_context);
    assert_int_equal(lean.max_context_len, in->max_context_len);
    assert_int_equal(lean.max_chunk_len, in->max_chunk_len);
    assert_int_equal(lean.num_chunks, n);
    assert_int_equal(lean.token_to_seq_stride, stride);
    assert_int_equal(lean.prefill_tokens_with_context, in->prefill_tokens_with_context);
    assert_int_equal(lean.workspace_tokens, in->workspace_tokens);
    size_t per_req = (size_t)(n * p) * sizeof(int32_t), per_chunk = (size_t)n * sizeof(int32_t);
    if (n > 0) {
        assert_memory_equal(lean.starts, in->starts, per_req);
        assert_memory_equal(lean.chunk_seq_lens, in->chunk_seq_lens, per_req);
        assert_memory_equal(lean.cu_seq_lens, in->cu_seq_lens, per_req + per_chunk);
        assert_memory_equal(lean.seq_tot, in->seq_tot, per_chunk);
        assert_memory_equal(lean.max_seq_lens, in->max_seq_lens, per_chunk);
    }

    int32_t *row = malloc((size_t)(stride + 2 * GUARD) * sizeof *row);
    assert_non_null(row);
    for (int64_t i = 0; i < n; i++) {
        const int32_t *dense = in->token_to_seq + i * stride;
        int64_t lens[3] = {stride, in->seq_tot[i], stride + GUARD};
        for (int c = 0; c < 3; c++) {
            for (int64_t t = 0; t < stride + 2 * GUARD; t++)
                row[t] = SENTINEL;
            assert_int_equal(mla_chunk_token_to_seq(plan, i, row, lens[c]), MLA_OK);
            for (int64_t t = 0; t < lens[c]; t++)
                assert_int_equal(row[t], t < stride ? dense[t] : 0);
            for (int64_t t = lens[c]; t < stride + 2 * GUARD; t++)
                assert_int_equal(row[t], SENTINEL);
        }
    }
    free(row);
    mla_chunk_plan_destroy(plan);
}

static void test_random_plans(void **state)
{
    (void)state;
    enum { PLANS = 5000 };
    int32_t ctx[10], qsl[11];
    int planned = 0, too_small = 0;
    for (int k = 0; k < PLANS; k++) {
        int64_t bs, p = random_batch(ctx, qsl, &bs), n_ctx = 0;
        for (int64_t r = 0; r < p; r++)
            n_ctx += ctx[r] > 0;
        int64_t unit = (n_ctx > 0 ? n_ctx : 1) * bs, w;
        bool small = unit > 1 && support_random_in(0, 9) == 0;
        w = small ? support_random_in(1, unit - 1) : unit * support_random_in(1, 40) + support_random_in(0, unit - 1);
        mla_chunk_plan *plan = NULL;
        mla_status st = mla_chunk_plan_create(ctx, qsl, p, w, bs, 0, MLA_DTYPE_F32, &plan);
        if (small && n_ctx > 0) {
            support_expect_reject("mla_chunk_plan_create",
                                  "workspace_tokens below one block per prefill with context", st,
                                  MLA_ERR_CAPACITY, "cannot hold one block");
            assert_null(plan);
            too_small++;
            continue;
        }
        assert_int_equal(st, MLA_OK);
        mla_chunk_plan_info in;
        mla_chunk_plan_info_get(plan, &in);
        check_plan(ctx, qsl, p, w, bs, &in);
        check_lean_plan(ctx, qsl, p, w, bs, &in);
        mla_chunk_plan_destroy(plan);
        planned++;
    }
    print_message("           %d random plans checked, %d rejected as too small for a block each\n",
                  planned, too_small);
    assert_true(planned > PLANS / 2 && too_small > 0);
}

/* ---- plans: bad input --------------------------------------------------------- */

typedef struct plan_args {
    const int32_t *ctx, *qsl;
    int64_t p, w, bs, width;
    mla_dtype dtype;
} plan_args;

static unsigned char sentinel_object;

/* The call, given bad_input, fails with `want` and a message containing
 * `msg`; *plan keeps whatever it held. The lean plan's builder rejects the
 * same, naming itself. */
static void expect_plan_error(const char *bad_input, plan_args a, mla_status want, const char *msg)
{
    mla_chunk_plan *const sentinel = (mla_chunk_plan *)(void *)&sentinel_object;
    mla_chunk_plan *plan = sentinel;
    support_expect_reject("mla_chunk_plan_create", bad_input,
                          mla_chunk_plan_create(a.ctx, a.qsl, a.p, a.w, a.bs, a.width, a.dtype,
                                                &plan),
                          want, msg);
    assert_ptr_equal(plan, sentinel);
    support_expect_reject("mla_chunk_plan_create_lean", bad_input,
                          mla_chunk_plan_create_lean(a.ctx, a.qsl, a.p, a.w, a.bs, a.width,
                                                     a.dtype, &plan),
                          want, msg);
    assert_true(support_contains(mla_last_error(), "mla_chunk_plan_create_lean"));
    assert_ptr_equal(plan, sentinel);
}

static void test_bad_input(void **state)
{
    (void)state;
    const int32_t ctx[3] = {5000, 1200, 0}, qsl[4] = {0, 100, 130, 180};
    const plan_args ok = {ctx, qsl, 3, 4096, 16, 0, MLA_DTYPE_BF16};
    plan_args a;

    support_expect_reject("mla_chunk_plan_create", "plan NULL",
                          mla_chunk_plan_create(ctx, qsl, 3, 4096, 16, 0, MLA_DTYPE_BF16, NULL),
                          MLA_ERR_INVALID_ARGUMENT, "NULL plan");

    a = ok, a.p = -1;
    expect_plan_error("num_prefills -1", a, MLA_ERR_INVALID_ARGUMENT,
                      "num_prefills = -1 is negative");
    a = ok, a.p = (int64_t)INT32_MAX + 1;
    expect_plan_error("num_prefills 2^31 (past int32)", a, MLA_ERR_OVERFLOW,
                      "num_prefills = 2147483648 does not fit in int32");
    a = ok, a.ctx = NULL;
    expect_plan_error("context_lens NULL", a, MLA_ERR_INVALID_ARGUMENT, "NULL context_lens");
    a = ok, a.qsl = NULL;
    expect_plan_error("query_start_loc NULL", a, MLA_ERR_INVALID_ARGUMENT, "NULL query_start_loc");
    a = ok, a.w = 0;
    expect_plan_error("workspace_tokens 0", a, MLA_ERR_INVALID_ARGUMENT,
                      "workspace_tokens = 0 must be >= 1");
    a = ok, a.w = -4096;
    expect_plan_error("workspace_tokens -4096", a, MLA_ERR_INVALID_ARGUMENT,
                      "workspace_tokens = -4096");
    a = ok, a.bs = 0;
    expect_plan_error("block_size 0", a, MLA_ERR_INVALID_ARGUMENT, "block_size = 0 must be >= 1");
    a = ok, a.width = -1;
    expect_plan_error("workspace_width -1", a, MLA_ERR_INVALID_ARGUMENT,
                      "workspace_width = -1 is negative");
    a = ok, a.width = 576, a.dtype = MLA_DTYPE_COUNT;
    expect_plan_error("dtype not an mla_dtype", a, MLA_ERR_INVALID_ARGUMENT,
                      "dtype 5 is not a valid mla_dtype");

    const int32_t neg_ctx[3] = {5000, 1200, -5};
    a = ok, a.ctx = neg_ctx;
    expect_plan_error("context_lens entry -5", a, MLA_ERR_INVALID_ARGUMENT,
                      "context_lens[2] = -5 is negative");
    const int32_t qsl_start[4] = {3, 100, 130, 180};
    a = ok, a.qsl = qsl_start;
    expect_plan_error("query_start_loc[0] 3", a, MLA_ERR_INVALID_ARGUMENT,
                      "query_start_loc[0] = 3, must be 0");
    a = ok, a.qsl = qsl_start, a.p = 0;
    expect_plan_error("query_start_loc[0] 3 with no prefills", a, MLA_ERR_INVALID_ARGUMENT,
                      "query_start_loc[0] = 3, must be 0");
    const int32_t qsl_down[4] = {0, 100, 90, 180};
    a = ok, a.qsl = qsl_down;
    expect_plan_error("query_start_loc decreasing", a, MLA_ERR_INVALID_ARGUMENT,
                      "query_start_loc[2] = 90 < query_start_loc[1] = 100 (decreasing)");

    /* W / n_ctx = 31 rounds down to 0 blocks of 32 */
    a = ok, a.w = 63, a.bs = 32;
    expect_plan_error("workspace_tokens below one block per prefill with context", a,
                      MLA_ERR_CAPACITY,
                      "workspace_tokens = 63 cannot hold one block of 32 tokens for each of the 2 "
                      "prefills with context");
    a = ok, a.w = 1;
    expect_plan_error("workspace_tokens 1", a, MLA_ERR_CAPACITY, "cannot hold one block");

    /* chunk 0 holds 2 * (2^31 - 1) tokens: cu_seq_lens cannot count them */
    const int32_t huge_ctx[2] = {INT32_MAX, INT32_MAX}, huge_qsl[3] = {0, 1, 2};
    a = (plan_args){huge_ctx, huge_qsl, 2, INT64_MAX, 1, 0, MLA_DTYPE_BF16};
    expect_plan_error("a chunk of more than int32 tokens", a, MLA_ERR_OVERFLOW,
                      "chunk 0 holds 4294967294 tokens, more than int32");

    /* workspace bytes past int64, and past it once rounded up to 64 */
    a = ok, a.w = INT64_MAX / 2, a.width = 576;
    expect_plan_error("workspace bytes past int64", a, MLA_ERR_OVERFLOW, "overflows int64 bytes");
    a = ok, a.w = INT64_MAX - 10, a.width = 1, a.dtype = MLA_DTYPE_FP8_E5M2;
    expect_plan_error("workspace bytes past int64 once aligned", a, MLA_ERR_OVERFLOW,
                      "overflows when aligned");
    /* 2^60 bytes: representable, but no address space holds it */
    a = (plan_args){NULL, NULL, 0, (int64_t)1 << 60, 16, 1, MLA_DTYPE_FP8_E4M3};
    expect_plan_error("workspace of 2^60 bytes (out of memory)", a, MLA_ERR_CAPACITY,
                      "out of memory allocating 1152921504606846976 bytes");
}

/* mla_chunk_token_to_seq on the §2.6 example (3 chunks, seq_tot 3248,
 * 2048, 904): every bad argument leaves out as it was. */
static void test_token_to_seq_bad_input(void **state)
{
    (void)state;
    const int32_t ctx[3] = {5000, 1200, 0}, qsl[4] = {0, 100, 130, 180};
    mla_chunk_plan *plan = NULL;
    assert_int_equal(mla_chunk_plan_create_lean(ctx, qsl, 3, 4096, 16, 0, MLA_DTYPE_BF16, &plan),
                     MLA_OK);
    static int32_t out[3248 + GUARD];
    for (size_t t = 0; t < sizeof out / sizeof out[0]; t++)
        out[t] = SENTINEL;
    const struct {
        const char *bad_input;
        const mla_chunk_plan *plan;
        int64_t chunk;
        int32_t *out;
        int64_t out_len;
        mla_status want;
        const char *msg;
    } cases[] = {
        {"plan NULL", NULL, 0, out, 3248, MLA_ERR_INVALID_ARGUMENT, "NULL plan"},
        {"chunk -1", plan, -1, out, 3248, MLA_ERR_OUT_OF_RANGE, "chunk = -1 is outside [0, 3)"},
        {"chunk num_chunks", plan, 3, out, 3248, MLA_ERR_OUT_OF_RANGE,
         "chunk = 3 is outside [0, 3)"},
        {"out_len below the chunk's seq_tot", plan, 1, out, 2047, MLA_ERR_CAPACITY,
         "out_len = 2047 is less than chunk 1's 2048 tokens"},
        {"out NULL", plan, 2, NULL, 904, MLA_ERR_INVALID_ARGUMENT, "NULL out with out_len = 904"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        support_expect_reject("mla_chunk_token_to_seq", cases[c].bad_input,
                              mla_chunk_token_to_seq(cases[c].plan, cases[c].chunk, cases[c].out,
                                                     cases[c].out_len),
                              cases[c].want, cases[c].msg);
        for (size_t t = 0; t < sizeof out / sizeof out[0]; t++)
            assert_int_equal(out[t], SENTINEL);
    }
    /* §2.6's rows: 2048 zeros then 1200 ones; 2048 zeros; 904 zeros */
    assert_int_equal(mla_chunk_token_to_seq(plan, 0, out, 3248), MLA_OK);
    for (int64_t t = 0; t < 3248; t++)
        assert_int_equal(out[t], t < 2048 ? 0 : 1);
    assert_int_equal(out[3248], SENTINEL);
    mla_chunk_plan_destroy(plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_workspace_tokens),
        cmocka_unit_test(test_workspace_bytes),
        cmocka_unit_test(test_kv_cache_shape),
        cmocka_unit_test(test_spec_example),
        cmocka_unit_test(test_chunk_len_rounds_down),
        cmocka_unit_test(test_no_context),
        cmocka_unit_test(test_context_after_plain_prefill),
        cmocka_unit_test(test_owned_workspace),
        cmocka_unit_test(test_random_plans),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_token_to_seq_bad_input),
    };
    return cmocka_run_group_tests_name("metadata_chunks", tests, NULL, NULL);
}
