/*
 * mla_flash_attn_varlen (docs/semantics.md §1.7, §8) on every backend this
 * CPU can run, forced in turn, against a double-precision oracle (plain
 * loops from the stored values): varlen batches with requests of 0, 1, 2,
 * 127, 128 and 129 tokens (128 is the library's q-tile and key tile) and
 * random lengths up to 4096; q shorter than k (causal bottom-right) and
 * longer (leading rows see no key: out 0, lse -inf); causal and not; the
 * MLA shapes 192/128 with k whole and as k_nope 128 + shared k_pe 64, and
 * odd head dims; 1 to 128 heads; f32, bf16, f16; scales positive, 0 and
 * negative; dense, padded and head-outer layouts; lse or not; bit-identical
 * results for 1, 2, 3 and 5 threads; workspaces of exactly the queried size.
 * Outputs sit in guard bytes (and padded layouts have guards between rows);
 * every gap of the inputs holds +-1000 (NaN in one test), which would spoil
 * any result it got into. The case builder and tolerances: flash_attn_cases.h.
 */
#include "flash_attn_cases.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const mla_dtype dtypes[3] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16};

/* Lengths q/k of n requests, copied into the spec. */
static void set_lens(fa_spec *s, int n, const int32_t *q, const int32_t *k)
{
    assert_true(n <= FA_MAX_SEQS);
    s->num_seqs = n;
    memcpy(s->q_lens, q, sizeof(int32_t) * (size_t)n);
    memcpy(s->k_lens, k, sizeof(int32_t) * (size_t)n);
}

/* Makes the case, runs it on every backend that can, frees it. */
static void run_spec(const fa_spec *s)
{
    fa_case c;
    fa_make(&c, s, true);
    if (fa_run_everywhere(&c) == 0)
        fail_msg("%s: no backend can run this", c.label);
    fa_free(&c);
}

/* ---- every backend, forced, is the one that runs ---------------------------------- */

typedef struct ran_set {
    fa_case *c;
    const mla_backend_desc *ran[64];
    int count;
} ran_set;

static void run_and_note(const mla_backend_desc *b, void *ctx)
{
    ran_set *set = ctx;
    fa_run_on(set->c, b, 2);
    for (int i = 0; i < set->count; i++)
        if (set->ran[i] == b)
            return;
    if (set->count < COUNT(set->ran))
        set->ran[set->count++] = b;
}

static void test_every_backend(void **state)
{
    (void)state;
    ran_set set = {0};
    for (int d = 0; d < COUNT(dtypes); d++) {
        fa_spec s = {.dtype = dtypes[d], .H = 3, .qk_dim = 192, .v_dim = 128, .rope_dim = 64,
                     .causal = true, .scale = 1.0f / sqrtf(192.0f), .layout = FA_PADDED,
                     .lse = true, .threads = 2};
        set_lens(&s, 3, (const int32_t[]){5, 130, 1}, (const int32_t[]){5, 130, 9});
        fa_case c;
        fa_make(&c, &s, true);
        mla_config cfg = fa_config(&s);
        set.c = &c;
        assert_true(support_each_backend(MLA_OP_PREFILL, &cfg, run_and_note, &set) >= 1);
        /* auto-selection runs what mla_select_backend names */
        const mla_backend_desc *chosen = NULL;
        assert_int_equal(mla_select_backend(MLA_OP_PREFILL, &cfg, &chosen), MLA_OK);
        fa_run(&c, "auto-selected", 0, 0);
        support_expect_ran(chosen);
        fa_check(&c, chosen->name);
        fa_free(&c);
    }
    for (int i = 0; i < set.count; i++)
        print_message("[ BACKEND  ] %s: flash attention matches the oracle and is the backend "
                      "that ran\n", set.ran[i]->name);
    assert_true(set.count >= 1);
}

/* ---- edge lengths at the MLA shapes ---------------------------------------------- */

/* Requests of 0, 1, 2, 127, 128, 129 tokens (q = k), one with q shorter than
 * k, one longer, one with keys but no queries, one with queries but no keys;
 * every dtype, causal or not, k whole or k_nope + shared k_pe, each layout. */
static void test_edge_lengths(void **state)
{
    (void)state;
    static const int32_t q[] = {0, 1, 2, 127, 128, 129, 37, 150, 0, 5};
    static const int32_t k[] = {0, 1, 2, 127, 128, 129, 300, 40, 7, 0};
    for (int n = 0; n < 6; n++) {
        fa_spec s = {.dtype = dtypes[n % 3], .H = 3, .qk_dim = 192, .v_dim = 128,
                     .rope_dim = n % 2 ? 0 : 64, .causal = n < 3,
                     .scale = 1.5f / sqrtf(192.0f), .layout = (fa_layout)(n % FA_LAYOUTS),
                     .lse = n != 4, .threads = n == 5 ? 0 : 2};
        set_lens(&s, COUNT(q), q, k);
        run_spec(&s);
    }
    fa_print_accuracy();
}

/* ---- odd head dims --------------------------------------------------------------- */

static void test_odd_dims(void **state)
{
    (void)state;
    static const struct {
        int64_t qk, v, rope, H;
    } dims[] = {
        {1, 1, 0, 1}, {7, 5, 6, 16}, {33, 256, 1, 3}, {256, 1, 64, 3},
        {256, 256, 0, 1}, {2, 3, 1, 3}, {64, 64, 32, 3}, {1, 256, 0, 3},
    };
    for (int n = 0; n < COUNT(dims); n++) {
        fa_spec s = {.dtype = dtypes[n % 3], .H = dims[n].H, .qk_dim = dims[n].qk,
                     .v_dim = dims[n].v, .rope_dim = dims[n].rope, .causal = n % 2 == 0,
                     .scale = 2.0f / sqrtf((float)dims[n].qk),
                     .layout = (fa_layout)((n + 1) % FA_LAYOUTS), .lse = n % 4 != 3,
                     .threads = 2};
        int32_t r = (int32_t)support_random_in(2, 200);
        set_lens(&s, 5, (const int32_t[]){1, 129, 0, 64, r},
                 (const int32_t[]){1, 129, 3, 100, r});
        run_spec(&s);
    }
    fa_print_accuracy();
}

/* ---- many heads, long requests ---------------------------------------------------- */

static void test_many_heads(void **state)
{
    (void)state;
    for (int n = 0; n < 2; n++) {
        fa_spec s = {.dtype = dtypes[n], .H = 128, .qk_dim = 192, .v_dim = 128, .rope_dim = 64,
                     .causal = n == 0, .scale = 1.0f / sqrtf(192.0f),
                     .layout = n ? FA_HEADS_OUTER : FA_DENSE, .lse = true, .threads = 2,
                     .big = true};
        set_lens(&s, 4, (const int32_t[]){3, 17, 0, 1}, (const int32_t[]){5, 17, 2, 1});
        run_spec(&s);
    }
}

/* Few heads and small dims keep the oracle's O(n^2) affordable. */
static void test_long_requests(void **state)
{
    (void)state;
    fa_spec s = {.dtype = MLA_DTYPE_F32, .H = 1, .qk_dim = 8, .v_dim = 4, .rope_dim = 4,
                 .causal = true, .scale = 1.0f, .layout = FA_PADDED, .lse = true,
                 .threads = 2, .big = true};
    int32_t a = (int32_t)support_random_in(3000, 4096);
    set_lens(&s, 2, (const int32_t[]){a, 200}, (const int32_t[]){a, 4096});
    run_spec(&s);
    fa_spec t = {.dtype = MLA_DTYPE_BF16, .H = 2, .qk_dim = 12, .v_dim = 6, .rope_dim = 0,
                 .causal = false, .scale = 0.8f, .layout = FA_HEADS_OUTER, .lse = true,
                 .threads = 3, .big = true};
    int32_t b = (int32_t)support_random_in(1, 1500), k = (int32_t)support_random_in(1000, 2500);
    set_lens(&t, 3, (const int32_t[]){b, 700, 300}, (const int32_t[]){k, 1, 2000});
    run_spec(&t);
    fa_print_accuracy();
}

/* ---- scales ------------------------------------------------------------------------ */

/* 0: every visible key weighs the same (a masked one that became NaN or got
 * in shows); negative: masked keys set to -inf before the scale would turn
 * +inf; large: a wide spread of logits exercises the running max. Scales
 * are multiples of 1/sqrt(Dqk), so the logits stay within the f32
 * tolerance's reach (|logit| up to ~6 at 4x). */
static void test_scales(void **state)
{
    (void)state;
    static const float scales[] = {0.0f, -1.0f, -4.0f, 4.0f};
    for (int n = 0; n < COUNT(scales) * 3; n++) {
        const bool mla = n % 2 == 0;
        fa_spec s = {.dtype = dtypes[n % 3], .H = 3, .qk_dim = mla ? 192 : 40,
                     .v_dim = mla ? 128 : 24, .rope_dim = mla ? 64 : 0, .causal = n % 4 != 3,
                     .scale = scales[n / 3] / sqrtf(mla ? 192.0f : 40.0f), .layout = (fa_layout)(n % FA_LAYOUTS),
                     .lse = true, .threads = 2};
        set_lens(&s, 5, (const int32_t[]){1, 7, 129, 40, 100},
                 (const int32_t[]){1, 7, 129, 100, 40});
        run_spec(&s);
    }
    fa_print_accuracy();
}

/* ---- NaN in the gaps ----------------------------------------------------------------- */

static void test_nan_in_gaps(void **state)
{
    (void)state;
    for (int n = 0; n < 4; n++) {
        fa_spec s = {.dtype = dtypes[n % 3], .H = 3, .qk_dim = n < 2 ? 192 : 20,
                     .v_dim = n < 2 ? 128 : 12, .rope_dim = n < 2 ? 64 : 5, .causal = n != 2,
                     .scale = n == 3 ? -0.5f : 0.2f,
                     .layout = n % 2 ? FA_HEADS_OUTER : FA_PADDED, .lse = true, .threads = 2,
                     .junk = JUNK_NAN};
        set_lens(&s, 4, (const int32_t[]){9, 129, 0, 30}, (const int32_t[]){9, 129, 4, 70});
        run_spec(&s);
    }
}

/* ---- thread counts ------------------------------------------------------------------- */

typedef struct thread_run {
    fa_case *c;
    unsigned char *ref_out, *ref_lse;
    int compared;
} thread_run;

static void run_threads(const mla_backend_desc *b, void *ctx)
{
    thread_run *r = ctx;
    fa_case *c = r->c;
    static const int threads[] = {1, 2, 3, 5};
    for (int k = 0; k < COUNT(threads); k++) {
        fa_run(c, b->name, threads[k], 0);
        support_expect_ran(b);
        if (k == 0) {
            fa_check(c, b->name);
            memcpy(r->ref_out, c->out_buf, c->out_bytes);
            memcpy(r->ref_lse, c->lse_buf, c->lse_bytes);
            continue;
        }
        const char *which = memcmp(c->out_buf, r->ref_out, c->out_bytes) != 0   ? "out"
                            : memcmp(c->lse_buf, r->ref_lse, c->lse_bytes) != 0 ? "lse"
                                                                                : NULL;
        if (which)
            fail_msg("%s: %s: %s on %d threads differs from 1 thread's", b->name, c->label, which,
                     threads[k]);
        r->compared++;
    }
}

static void test_thread_counts(void **state)
{
    (void)state;
    int compared = 0;
    for (int n = 0; n < 3; n++) {
        fa_spec s = {.dtype = dtypes[n], .H = 3, .qk_dim = 192, .v_dim = 128,
                     .rope_dim = n == 1 ? 0 : 64, .causal = n != 2, .scale = 0.1f,
                     .layout = (fa_layout)n, .lse = true};
        set_lens(&s, 6, (const int32_t[]){129, 300, 1, 128, 40, 250},
                 (const int32_t[]){129, 300, 1, 128, 250, 40});
        fa_case c;
        fa_make(&c, &s, true);
        thread_run r = {.c = &c, .ref_out = malloc(c.out_bytes), .ref_lse = malloc(c.lse_bytes)};
        mla_config cfg = fa_config(&s);
        assert_true(support_each_backend(MLA_OP_PREFILL, &cfg, run_threads, &r) >= 1);
        compared += r.compared;
        free(r.ref_out);
        free(r.ref_lse);
        fa_free(&c);
    }
    assert_true(compared > 0);
}

/* ---- workspace ----------------------------------------------------------------------- */

static void test_workspace(void **state)
{
    (void)state;
    fa_spec s = {.dtype = MLA_DTYPE_BF16, .H = 4, .qk_dim = 192, .v_dim = 128, .rope_dim = 64,
                 .causal = true, .scale = 0.13f, .layout = FA_DENSE, .lse = true};
    set_lens(&s, 3, (const int32_t[]){200, 7, 0}, (const int32_t[]){200, 9, 3});
    fa_case c;
    fa_make(&c, &s, true);
    static const int64_t misaligns[] = {0, 1, 2, 4, 8, 36};
    static const int threads[] = {1, 4};
    for (int k = 0; k < COUNT(threads); k++) {
        /* only sizes, dims and dtype are read: no pointer */
        mla_flash_attn_args bare = {.num_seqs = 3, .num_heads = 4, .qk_dim = 192, .v_dim = 128,
                                    .rope_dim = 64, .causal = true, .scale = 0.13f,
                                    .dtype = MLA_DTYPE_BF16, .total_q = c.T, .total_k = c.S};
        int64_t bytes = -1, bare_bytes = -2;
        assert_int_equal(mla_flash_attn_varlen_workspace_size(&c.args, threads[k], &bytes),
                         MLA_OK);
        assert_int_equal(mla_flash_attn_varlen_workspace_size(&bare, threads[k], &bare_bytes),
                         MLA_OK);
        assert_int_equal(bytes, bare_bytes);
        assert_true(bytes >= 0);
        for (int m = 0; m < COUNT(misaligns); m++) {
            char what[400];
            snprintf(what, sizeof what, "%s, workspace of %lld bytes at +%lld", c.label,
                     (long long)bytes, (long long)misaligns[m]);
            fa_reset_outputs(&c);
            mla_status st = fa_call(&c.args, threads[k], misaligns[m], what);
            if (st != MLA_OK)
                fail_msg("%s: %s: %s", what, mla_status_str(st), mla_last_error());
            fa_check(&c, mla_last_backend());
        }
    }
    fa_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        FA_TEST(test_every_backend),
        FA_TEST(test_edge_lengths),
        FA_TEST(test_odd_dims),
        FA_TEST(test_many_heads),
        FA_TEST(test_long_requests),
        FA_TEST(test_scales),
        FA_TEST(test_nan_in_gaps),
        FA_TEST(test_thread_counts),
        FA_TEST(test_workspace),
    };
    case_apply_filter();
    return cmocka_run_group_tests_name("flash_attn", tests, NULL, NULL);
}
