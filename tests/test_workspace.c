/*
 * Workspace queries (mla.h): each *_workspace_size reads shapes only, so a
 * server can size before it has any buffer (every data pointer NULL, every
 * stride anything), and gives what the call with its buffers needs; the
 * decode and prefill bounds cover every call within a server's limits, and
 * decode and the forward run in a workspace of exactly the bound.
 */
#include "decode_cases.h"

#include <stdlib.h>
#include <string.h>

/* Garbage for every stride a size query must not read. */
#define JUNK_STRIDE (-7)

/* a's sizes, q dtype and sched only, with seq_lens when with_lens; every
 * other pointer NULL, every stride junk. */
static mla_decode_args shape_of(const mla_decode_args *a, bool with_lens)
{
    return (mla_decode_args){
        .num_reqs = a->num_reqs, .s_q = a->s_q, .num_heads = a->num_heads,
        .kv_lora_rank = a->kv_lora_rank, .rope_dim = a->rope_dim, .q_dtype = a->q_dtype,
        .q_nope_token_stride = JUNK_STRIDE, .q_nope_head_stride = JUNK_STRIDE,
        .q_pe_token_stride = JUNK_STRIDE, .q_pe_head_stride = JUNK_STRIDE,
        .block_table_cols = JUNK_STRIDE, .out_token_stride = JUNK_STRIDE,
        .out_head_stride = JUNK_STRIDE, .seq_lens = with_lens ? a->seq_lens : NULL,
        .sched = a->sched};
}

static mla_decode_forward_args forward_shape_of(const mla_decode_forward_args *f, bool with_lens)
{
    return (mla_decode_forward_args){
        .num_reqs = f->num_reqs, .s_q = f->s_q, .num_heads = f->num_heads,
        .kv_lora_rank = f->kv_lora_rank, .rope_dim = f->rope_dim, .qk_nope_dim = f->qk_nope_dim,
        .v_head_dim = f->v_head_dim, .dtype = f->dtype, .q_token_stride = JUNK_STRIDE,
        .q_head_stride = JUNK_STRIDE, .w_dtype = f->w_dtype, .out_token_stride = JUNK_STRIDE,
        .block_table_cols = JUNK_STRIDE, .seq_lens = with_lens ? f->seq_lens : NULL,
        .sched = f->sched};
}

static const mla_decode_sched_params invariant = {.block_n = 16, .split_blocks = 2};
static const mla_decode_sched_params four_parts = {.num_parts = 4, .block_n = 64, .overhead = 5};

/* mla_decode with exactly `bytes` of workspace (guarded): MLA_OK and the
 * oracle's results; one byte less is MLA_ERR_CAPACITY where bytes is the
 * call's own size (`exact`). */
static void decode_in(dcase *c, int64_t bytes, bool exact, int threads)
{
    unsigned char *base = case_guarded_workspace(bytes);
    dcase_reset_outputs(c);
    if (exact)
        support_expect_reject("mla_decode", "workspace 1 byte below the queried size",
                              mla_decode(&c->args, base + MARGIN, bytes - 1, threads),
                              MLA_ERR_CAPACITY, "workspace");
    mla_status st = mla_decode(&c->args, base + MARGIN, bytes, threads);
    if (st != MLA_OK)
        fail_msg("%s: mla_decode in %lld bytes: %s: %s", c->label, (long long)bytes,
                 mla_status_str(st), mla_last_error());
    dcase_check(c, mla_last_backend());
    case_free_guarded_workspace(base, bytes, 0, c->label);
}

/* mla_decode_forward with exactly `bytes` of workspace (guarded): MLA_OK
 * and the oracle's results. */
static void forward_in(fcase *c, int64_t bytes, int threads)
{
    unsigned char *base = case_guarded_workspace(bytes);
    memset(c->out_buf, GUARD, c->out_bytes);
    memset(c->lse_buf, GUARD, c->lse_bytes);
    mla_status st = mla_decode_forward(&c->f, base + MARGIN, bytes, threads);
    if (st != MLA_OK)
        fail_msg("%s: mla_decode_forward in %lld bytes: %s: %s", c->label, (long long)bytes,
                 mla_status_str(st), mla_last_error());
    fcase_check(c, mla_last_backend());
    case_free_guarded_workspace(base, bytes, 0, c->label);
}

/* The decode and forward queries succeed with no data pointer (seq_lens
 * only in batch-invariant mode) and agree with the query of the full
 * args; the call runs in that many bytes. Before, a NULL q_nope (or out,
 * cache, block table) made the query fail. */
static void test_decode_sizes_need_shapes_only(void **state)
{
    (void)state;
    const mla_decode_sched_params *scheds[] = {NULL, &invariant, &four_parts};
    for (int k = 0; k < COUNT(scheds); k++) {
        dspec s = {.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_BF16, .s_q = 2, .H = 5,
                   .L = 32, .R = 8, .block_size = 16, .form = Q_SPLIT, .pad = true, .lse = true,
                   .threads = 3, .sched = scheds[k]};
        dspec_edge_lens(&s);
        dcase c;
        dcase_make(&c, &s, true);
        int64_t full = -1, shapes = -1;
        assert_int_equal(mla_decode_workspace_size(&c.args, 3, &full), MLA_OK);
        const bool invariant_mode = scheds[k] == &invariant;
        const mla_decode_args shape = shape_of(&c.args, invariant_mode);
        if (mla_decode_workspace_size(&shape, 3, &shapes) != MLA_OK)
            fail_msg("%s: shapes only: %s", c.label, mla_last_error());
        assert_int_equal(shapes, full);
        if (invariant_mode) {
            /* the lengths decide it: the query says so and where to go */
            const mla_decode_args no_lens = shape_of(&c.args, false);
            support_expect_reject("mla_decode_workspace_size",
                                  "seq_lens NULL in batch-invariant mode",
                                  mla_decode_workspace_size(&no_lens, 3, &shapes),
                                  MLA_ERR_INVALID_ARGUMENT, "mla_decode_workspace_bound");
        }
        decode_in(&c, full, true, 3);
        dcase_free(&c);
    }
    const fspec fs = {MLA_DTYPE_BF16, MLA_DTYPE_BF16, MLA_DTYPE_F32, MLA_DTYPE_BF16, 2, 3, 32, 8,
                      16, 8, 16, 3, {0, 17, 40}, true, true, 2};
    for (int k = 0; k < COUNT(scheds); k++) {
        fcase c;
        fcase_make(&c, &fs);
        c.f.sched = scheds[k];
        int64_t full = -1, shapes = -1;
        assert_int_equal(mla_decode_forward_workspace_size(&c.f, 2, &full), MLA_OK);
        const mla_decode_forward_args shape = forward_shape_of(&c.f, scheds[k] == &invariant);
        if (mla_decode_forward_workspace_size(&shape, 2, &shapes) != MLA_OK)
            fail_msg("%s: shapes only: %s", c.label, mla_last_error());
        assert_int_equal(shapes, full);
        forward_in(&c, full, 2);
        fcase_free(&c);
    }
}

/* The prefill-side queries read shapes only too: flash attention, the
 * up-projection and prefill with every pointer NULL (no plan: no context
 * workspace). */
static void test_prefill_sizes_need_shapes_only(void **state)
{
    (void)state;
    int64_t bytes = 0;
    const mla_flash_attn_args fa = {.num_seqs = 3, .num_heads = 4, .qk_dim = 24, .v_dim = 16,
                                    .rope_dim = 8, .causal = true, .scale = 0.2f,
                                    .dtype = MLA_DTYPE_BF16, .total_q = 40, .total_k = 90,
                                    .q_token_stride = JUNK_STRIDE, .k_token_stride = JUNK_STRIDE};
    assert_int_equal(mla_flash_attn_varlen_workspace_size(&fa, 2, &bytes), MLA_OK);
    assert_true(bytes > 0);
    const mla_up_proj_args up = {.num_tokens = 40, .num_heads = 4, .kv_lora_rank = 32,
                                 .qk_nope_dim = 16, .v_head_dim = 16,
                                 .kv_c_dtype = MLA_DTYPE_BF16, .kv_c_stride = JUNK_STRIDE,
                                 .w_dtype = MLA_DTYPE_BF16, .out_dtype = MLA_DTYPE_BF16};
    bytes = 0;
    assert_int_equal(mla_up_proj_workspace_size(&up, 2, &bytes), MLA_OK);
    assert_true(bytes > 0);
    const mla_prefill_args pa = {.num_prefills = 3, .num_tokens = 40, .num_heads = 4,
                                 .kv_lora_rank = 32, .rope_dim = 8, .qk_nope_dim = 16,
                                 .v_head_dim = 16, .scale = 0.2f, .dtype = MLA_DTYPE_BF16,
                                 .block_table_cols = JUNK_STRIDE, .q_token_stride = JUNK_STRIDE,
                                 .out_token_stride = JUNK_STRIDE};
    bytes = 0;
    assert_int_equal(mla_prefill_workspace_size(&pa, 2, &bytes), MLA_OK);
    assert_true(bytes > 0);
}

static int64_t random_in(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(support_random() % (uint64_t)(hi - lo + 1));
}

/* Random calls within the limits (batch, s_q, lengths, threads) never need
 * more than the bound, for decode and the forward, in each schedule mode;
 * a call at every maximum needs the bound exactly, and one past the
 * lengths' maximum in batch-invariant mode needs more (the bound reads
 * it). */
static void test_bound_covers_calls_within_limits(void **state)
{
    (void)state;
    enum { MAX_B = 6, MAX_S_Q = 3, MAX_LEN = 300, MAX_THREADS = 4 };
    const mla_decode_sched_params *scheds[] = {NULL, &invariant, &four_parts};
    const mla_dtype dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16};
    int32_t lens[MAX_B];
    for (int k = 0; k < COUNT(scheds) * COUNT(dtypes); k++) {
        const mla_decode_sched_params *sched = scheds[k % COUNT(scheds)];
        mla_decode_limits lim = {.max_reqs = MAX_B, .max_s_q = MAX_S_Q, .max_seq_len = MAX_LEN,
                                 .num_heads = 5, .kv_lora_rank = 32, .rope_dim = 8,
                                 .qk_nope_dim = 16, .v_head_dim = 12,
                                 .q_dtype = dtypes[k / COUNT(scheds)],
                                 .max_threads = MAX_THREADS, .sched = sched};
        int64_t bound = -1, decode_bound = -1;
        assert_int_equal(mla_decode_workspace_bound(&lim, &bound), MLA_OK);
        mla_decode_limits decode_only = lim;
        decode_only.qk_nope_dim = decode_only.v_head_dim = 0;
        assert_int_equal(mla_decode_workspace_bound(&decode_only, &decode_bound), MLA_OK);
        assert_true(decode_bound > 0 && decode_bound <= bound);
        mla_decode_args a = {.num_heads = 5, .kv_lora_rank = 32, .rope_dim = 8,
                             .q_dtype = lim.q_dtype, .seq_lens = lens, .sched = sched};
        for (int call = 0; call < 300; call++) {
            const bool at_max = call == 0;
            a.num_reqs = at_max ? MAX_B : random_in(0, MAX_B);
            a.s_q = at_max ? MAX_S_Q : random_in(1, MAX_S_Q);
            for (int64_t b = 0; b < a.num_reqs; b++)
                lens[b] = at_max ? MAX_LEN : (int32_t)random_in(0, MAX_LEN);
            const int threads = at_max ? MAX_THREADS : (int)random_in(1, MAX_THREADS);
            mla_decode_forward_args f = case_forward_of(&a);
            f.qk_nope_dim = lim.qk_nope_dim;
            f.v_head_dim = lim.v_head_dim;
            f.w_dtype = MLA_DTYPE_BF16;
            int64_t need = -1, forward_need = -1;
            assert_int_equal(mla_decode_workspace_size(&a, threads, &need), MLA_OK);
            assert_int_equal(mla_decode_forward_workspace_size(&f, threads, &forward_need), MLA_OK);
            if (need > decode_bound || forward_need > bound)
                fail_msg("B %lld, s_q %lld, threads %d: decode needs %lld (bound %lld), forward "
                         "%lld (bound %lld)", (long long)a.num_reqs, (long long)a.s_q, threads,
                         (long long)need, (long long)decode_bound, (long long)forward_need,
                         (long long)bound);
            if (at_max) {
                assert_int_equal(need, decode_bound);
                assert_int_equal(forward_need, bound);
            }
        }
        if (sched == &invariant) {
            a.num_reqs = 1;
            a.s_q = 1;
            lens[0] = MAX_LEN + 2 * 16 * 2; /* two more splits */
            int64_t need = -1;
            assert_int_equal(mla_decode_workspace_size(&a, 1, &need), MLA_OK);
            mla_decode_limits one = decode_only;
            one.max_reqs = one.max_s_q = one.max_threads = 1;
            int64_t one_bound = -1;
            assert_int_equal(mla_decode_workspace_bound(&one, &one_bound), MLA_OK);
            assert_true(need > one_bound);
        }
    }
}

/* A server that allocates the bound once runs decode and the forward in
 * exactly that many bytes, with results the oracle's. */
static void test_calls_run_in_the_bound(void **state)
{
    (void)state;
    const mla_decode_sched_params *scheds[] = {NULL, &invariant};
    for (int k = 0; k < COUNT(scheds); k++) {
        dspec s = {.q_dtype = MLA_DTYPE_BF16, .cache_dtype = MLA_DTYPE_BF16, .s_q = 2, .H = 5,
                   .L = 32, .R = 8, .block_size = 16, .form = Q_CONCAT, .lse = true,
                   .threads = 2, .sched = scheds[k]};
        dspec_edge_lens(&s);
        dcase c;
        dcase_make(&c, &s, true);
        int32_t longest = 0;
        for (int64_t b = 0; b < s.num_reqs; b++)
            longest = s.lens[b] > longest ? s.lens[b] : longest;
        const mla_decode_limits lim = {.max_reqs = s.num_reqs, .max_s_q = s.s_q,
                                       .max_seq_len = longest, .num_heads = s.H,
                                       .kv_lora_rank = s.L, .rope_dim = s.R,
                                       .q_dtype = s.q_dtype, .max_threads = 2,
                                       .sched = scheds[k]};
        int64_t bound = -1;
        assert_int_equal(mla_decode_workspace_bound(&lim, &bound), MLA_OK);
        decode_in(&c, bound, scheds[k] == NULL, 2);
        dcase_free(&c);
    }
    const fspec fs = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F32, MLA_DTYPE_F32, 2, 3, 32, 8,
                      16, 8, 16, 3, {1, 17, 40}, false, true, 2};
    for (int k = 0; k < COUNT(scheds); k++) {
        fcase c;
        fcase_make(&c, &fs);
        c.f.sched = scheds[k];
        const mla_decode_limits lim = {.max_reqs = fs.num_reqs, .max_s_q = fs.s_q,
                                       .max_seq_len = 40, .num_heads = fs.H,
                                       .kv_lora_rank = fs.L, .rope_dim = fs.R,
                                       .qk_nope_dim = fs.P, .v_head_dim = fs.V,
                                       .q_dtype = fs.q_dtype, .max_threads = 2,
                                       .sched = scheds[k]};
        int64_t bound = -1;
        assert_int_equal(mla_decode_workspace_bound(&lim, &bound), MLA_OK);
        forward_in(&c, bound, 2);
        fcase_free(&c);
    }
}

/* The prefill bound covers every call within the limits (any path, any
 * kv_b_proj dtype, packed ahead or not, any plan of at most W rows, any
 * thread count up to the limit), and equals the largest of them; bad
 * limits are refused with a message. */
static void test_prefill_bound_covers_calls_within_limits(void **state)
{
    (void)state;
    enum { MAX_B = 5, MAX_T = 300, MAX_W = 512, MAX_THREADS = 4 };
    const mla_dtype dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16};
    const mla_prefill_path paths[] = {MLA_PREFILL_PATH_AUTO, MLA_PREFILL_PATH_MHA,
                                      MLA_PREFILL_PATH_ABSORBED};
    static const char packed_stand_in; /* the size query reads whether it is set only */
    for (int d = 0; d < COUNT(dtypes); d++) {
        const mla_prefill_limits lim = {.max_prefills = MAX_B, .max_tokens = MAX_T,
                                        .context_workspace_tokens = MAX_W, .num_heads = 3,
                                        .kv_lora_rank = 64, .rope_dim = 16, .qk_nope_dim = 32,
                                        .v_head_dim = 24, .dtype = dtypes[d],
                                        .max_threads = MAX_THREADS};
        int64_t bound = -1, most = 0;
        assert_int_equal(mla_prefill_workspace_bound(&lim, &bound), MLA_OK);
        for (int call = 0; call < 200; call++) {
            const bool at_max = call < COUNT(dtypes);
            const int64_t W = at_max ? MAX_W : random_in(0, MAX_W);
            mla_chunk_plan *plan;
            assert_int_equal(mla_chunk_plan_create_lean(NULL, NULL, 0, W, 16, 0, dtypes[d], &plan),
                             MLA_OK);
            const mla_prefill_args a = {
                .num_prefills = at_max ? MAX_B : random_in(0, MAX_B),
                .num_tokens = at_max ? MAX_T : random_in(0, MAX_T), .num_heads = 3,
                .kv_lora_rank = 64, .rope_dim = 16, .qk_nope_dim = 32, .v_head_dim = 24,
                .scale = 0.5f, .dtype = dtypes[d], .plan = plan,
                .kv_b_proj_dtype = dtypes[at_max ? call : random_in(0, COUNT(dtypes) - 1)],
                .kv_b_proj_packed = !at_max && random_in(0, 1) ? &packed_stand_in : NULL,
                .path = paths[at_max ? 0 : random_in(0, COUNT(paths) - 1)]};
            const int threads = at_max ? MAX_THREADS : (int)random_in(1, MAX_THREADS);
            int64_t need = -1;
            assert_int_equal(mla_prefill_workspace_size(&a, threads, &need), MLA_OK);
            if (need > bound)
                fail_msg("%s: B %lld, T %lld, W %lld, path %d, threads %d: needs %lld, bound %lld",
                         mla_dtype_name(dtypes[d]), (long long)a.num_prefills,
                         (long long)a.num_tokens, (long long)W, (int)a.path, threads,
                         (long long)need, (long long)bound);
            most = need > most ? need : most;
            mla_chunk_plan_destroy(plan);
        }
        assert_int_equal(most, bound); /* reached by a call at the limits */
    }
    const mla_prefill_limits good = {.max_prefills = 2, .max_tokens = 8, .num_heads = 1,
                                     .kv_lora_rank = 8, .qk_nope_dim = 4, .v_head_dim = 4,
                                     .dtype = MLA_DTYPE_F32};
    mla_prefill_limits bad = good;
    int64_t bytes;
    bad.max_tokens = -1;
    support_expect_reject("mla_prefill_workspace_bound", "max_tokens -1",
                          mla_prefill_workspace_bound(&bad, &bytes), MLA_ERR_INVALID_ARGUMENT,
                          "mla_prefill_workspace_bound: max_prefills 2, max_tokens -1");
    bad = good;
    bad.dtype = MLA_DTYPE_FP8_E4M3;
    support_expect_reject("mla_prefill_workspace_bound", "dtype fp8_e4m3",
                          mla_prefill_workspace_bound(&bad, &bytes), MLA_ERR_UNSUPPORTED,
                          "fp8_e4m3");
    support_expect_reject("mla_prefill_workspace_bound", "limits NULL",
                          mla_prefill_workspace_bound(NULL, &bytes), MLA_ERR_INVALID_ARGUMENT,
                          "limits is NULL");
}

static void test_bound_rejects(void **state)
{
    (void)state;
    const mla_decode_limits good = {.max_reqs = 4, .max_s_q = 1, .max_seq_len = 100,
                                    .num_heads = 2, .kv_lora_rank = 16, .rope_dim = 4,
                                    .q_dtype = MLA_DTYPE_F32};
    int64_t bytes = -1;
    assert_int_equal(mla_decode_workspace_bound(&good, &bytes), MLA_OK);
    const mla_decode_sched_params heavy = {.overhead = (int64_t)INT32_MAX + 1};
    const struct {
        const char *bad_input;
        mla_decode_limits lim;
        mla_status status;
        const char *needle;
    } cases[] = {
        {"max_reqs -1", {-1, 1, 100, 2, 16, 4, 0, 0, MLA_DTYPE_F32, 0, NULL},
         MLA_ERR_INVALID_ARGUMENT, "num_reqs -1"},
        {"max_s_q 0", {4, 0, 100, 2, 16, 4, 0, 0, MLA_DTYPE_F32, 0, NULL},
         MLA_ERR_INVALID_ARGUMENT, "s_q 0"},
        {"max_reqs 2^31 (past the calls' int32)",
         {INT64_C(1) << 31, 1, 100, 1, 16, 4, 0, 0, MLA_DTYPE_F32, 0, NULL}, MLA_ERR_OVERFLOW,
         "num_reqs = 2147483648 does not fit int32"},
        {"max_seq_len -1", {4, 1, -1, 2, 16, 4, 0, 0, MLA_DTYPE_F32, 0, NULL},
         MLA_ERR_INVALID_ARGUMENT, "max_seq_len -1"},
        {"qk_nope_dim 16 without v_head_dim", {4, 1, 100, 2, 16, 4, 16, 0, MLA_DTYPE_F32, 0, NULL},
         MLA_ERR_INVALID_ARGUMENT, "v_head_dim 0"},
        {"q_dtype fp8_e4m3", {4, 1, 100, 2, 16, 4, 0, 0, MLA_DTYPE_FP8_E4M3, 0, NULL},
         MLA_ERR_UNSUPPORTED, "fp8_e4m3"},
        {"sched overhead past int32", {4, 1, 100, 2, 16, 4, 0, 0, MLA_DTYPE_F32, 0, &heavy},
         MLA_ERR_OVERFLOW, "overhead"},
        {"max_reqs x max_s_q x num_heads past int64",
         {INT64_C(1) << 40, INT64_C(1) << 20, 100, 1 << 10, 16, 4, 0, 0, MLA_DTYPE_F32, 0, NULL},
         MLA_ERR_OVERFLOW, "overflows"},
    };
    for (int k = 0; k < COUNT(cases); k++) {
        bytes = -1;
        support_expect_reject("mla_decode_workspace_bound", cases[k].bad_input,
                              mla_decode_workspace_bound(&cases[k].lim, &bytes), cases[k].status,
                              cases[k].needle);
        assert_int_equal(bytes, -1);
    }
    support_expect_reject("mla_decode_workspace_bound", "limits NULL",
                          mla_decode_workspace_bound(NULL, &bytes), MLA_ERR_INVALID_ARGUMENT,
                          "limits is NULL");
    support_expect_reject("mla_decode_workspace_bound", "bytes NULL",
                          mla_decode_workspace_bound(&good, NULL), MLA_ERR_INVALID_ARGUMENT,
                          "bytes is NULL");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        CASE_TEST(test_decode_sizes_need_shapes_only),
        CASE_TEST(test_prefill_sizes_need_shapes_only),
        CASE_TEST(test_bound_covers_calls_within_limits),
        CASE_TEST(test_calls_run_in_the_bound),
        CASE_TEST(test_bound_rejects),
        CASE_TEST(test_prefill_bound_covers_calls_within_limits),
    };
    case_apply_filter();
    return cmocka_run_group_tests_name("workspace", tests, NULL, NULL);
}
