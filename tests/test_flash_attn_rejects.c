/*
 * Bad input to mla_flash_attn_varlen and its workspace query: each call
 * returns the documented status with a message naming the problem and
 * leaves out and lse (guard bytes) and the inputs untouched. The good calls
 * next to them (lse NULL, no requests, requests without tokens, NULL
 * pointers of empty operands) succeed and match the oracle.
 *
 * Statuses follow mla.h's split: MLA_ERR_INVALID_ARGUMENT for NULL,
 * negative, zero or inconsistent sizes, offsets and strides, overlapping
 * outputs and a non-finite scale (as mla_decode and mla_prepare_weights
 * treat a zero width); MLA_ERR_UNSUPPORTED for a head dim past 256 and a
 * dtype other than f32, bf16, f16; MLA_ERR_OVERFLOW for spans past int64
 * and a total_q past int32 (in the workspace query too); MLA_ERR_CAPACITY
 * for a short workspace.
 */
#include "flash_attn_cases.h"

#include "oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct reject_env {
    fa_case c;
    unsigned char *ws;
    int64_t ws_bytes; /* plenty */
    int64_t need;     /* what the good call needs on 1 thread */
    int mismatches;   /* rejected, but with another status or a message not naming it */
    char mismatch_text[4096];
} reject_env;

/* B 2 (3 queries over 4 keys, then 2 over 2), H 2, Dqk 6 = k_nope 4 + k_pe 2,
 * Dv 4, f32, causal, dense, lse. */
static void env_init(reject_env *e)
{
    memset(e, 0, sizeof *e);
    fa_spec s = {.dtype = MLA_DTYPE_F32, .H = 2, .qk_dim = 6, .v_dim = 4, .rope_dim = 2,
                 .causal = true, .scale = 0.7f, .num_seqs = 2, .q_lens = {3, 2},
                 .k_lens = {4, 2}, .layout = FA_DENSE, .lse = true, .threads = 1};
    fa_make(&e->c, &s, true);
    assert_int_equal(mla_flash_attn_varlen_workspace_size(&e->c.args, 1, &e->need), MLA_OK);
    e->ws_bytes = e->need * 8 + (1 << 20);
    e->ws = case_alloc((size_t)e->ws_bytes);
}

static mla_status call(reject_env *e, const mla_flash_attn_args *a)
{
    return mla_flash_attn_varlen(a, e->ws, e->ws_bytes, 1);
}

/* True if text holds every '&'-separated word of needles. */
static bool says_all(const char *text, const char *needles)
{
    char words[128];
    snprintf(words, sizeof words, "%s", needles);
    for (char *save = NULL, *w = strtok_r(words, "&", &save); w; w = strtok_r(NULL, "&", &save))
        if (!strstr(text, w))
            return false;
    return true;
}

/* The call, given `what` (the bad input), failed with `status` and a
 * message naming the problem (every word of `needles`, '&'-separated), and
 * wrote nothing. Acceptance, an empty message or a write fail at once;
 * another status or a message without the words is collected and reported
 * at the end (env_finish), so every case runs. */
static void expect_rejected(reject_env *e, const char *what, mla_status got, mla_status status,
                            const char *needles)
{
    if (got == MLA_OK)
        fail_msg("%s: accepted, want %s (%s)", what, mla_status_str(status), needles);
    if (mla_last_error()[0] == '\0')
        fail_msg("%s: empty mla_last_error()", what);
    if (got != status || !says_all(mla_last_error(), needles)) {
        size_t used = strlen(e->mismatch_text);
        snprintf(e->mismatch_text + used, sizeof e->mismatch_text - used,
                 "\n  %s: %s (want %s naming \"%s\"): \"%s\"", what, mla_status_str(got),
                 mla_status_str(status), needles, mla_last_error());
        e->mismatches++;
    }
    if (getenv("TDEC_SHOW"))
        print_message("[ REJECTED ] %s: %s: %s\n", what, mla_status_str(got), mla_last_error());
    if (fa_inputs_checksum(&e->c) != e->c.inputs_sum)
        fail_msg("%s: an input changed", what);
    case_expect_guards(e->c.out_buf, e->c.out_bytes, "out after a rejected call");
    case_expect_guards(e->c.lse_buf, e->c.lse_bytes, "lse after a rejected call");
    support_note_reject("mla_flash_attn_varlen", what, status);
}

static void env_finish(reject_env *e)
{
    free(e->ws);
    fa_free(&e->c);
    if (e->mismatches > 0)
        fail_msg("%d rejection(s) with another status than documented or a message not naming "
                 "the problem:%s", e->mismatches, e->mismatch_text);
}

/* b: the good call's arguments but for one edit, which bad_input names. */
#define REJECT(bad_input, edit, status, needles)                                                   \
    do {                                                                                           \
        b = e.c.args;                                                                              \
        edit;                                                                                      \
        expect_rejected(&e, bad_input, call(&e, &b), status, needles);                             \
    } while (0)

static const mla_status INVALID = MLA_ERR_INVALID_ARGUMENT, UNSUPPORTED = MLA_ERR_UNSUPPORTED;

/* ---- the good calls next to the bad ones ------------------------------------------- */

static void test_good_calls(void **state)
{
    (void)state;
    reject_env e;
    env_init(&e);
    assert_int_equal(call(&e, &e.c.args), MLA_OK);
    fa_check(&e.c, mla_last_backend());
    /* lse NULL: the lse buffer untouched */
    mla_flash_attn_args b = e.c.args;
    b.lse = NULL;
    fa_reset_outputs(&e.c);
    assert_int_equal(call(&e, &b), MLA_OK);
    case_expect_guards(e.c.lse_buf, e.c.lse_bytes, "lse NULL: lse buffer");
    /* no requests, and requests without tokens: nothing written, and the
     * empty operands' pointers may be NULL */
    static const int32_t zeros[3] = {0, 0, 0};
    const struct {
        int64_t seqs, T, S;
        const int32_t *cu_q, *cu_k;
        bool null_views;
    } empty[] = {
        {0, 0, 0, zeros, zeros, false},
        {2, 0, 0, zeros, zeros, true},
        {2, 0, 6, zeros, e.c.cu_k, false}, /* keys, no queries */
    };
    for (int k = 0; k < COUNT(empty); k++) {
        b = e.c.args;
        b.num_seqs = empty[k].seqs;
        b.total_q = empty[k].T;
        b.total_k = empty[k].S;
        b.cu_seqlens_q = empty[k].cu_q;
        b.cu_seqlens_k = empty[k].cu_k;
        if (empty[k].null_views)
            b.q = b.k = b.k_pe = b.v = b.out = NULL;
        fa_reset_outputs(&e.c);
        mla_status st = call(&e, &b);
        if (st != MLA_OK)
            fail_msg("empty case %d: %s: %s", k, mla_status_str(st), mla_last_error());
        case_expect_guards(e.c.out_buf, e.c.out_bytes, "no queries: out");
        case_expect_guards(e.c.lse_buf, e.c.lse_bytes, "no queries: lse");
    }
    env_finish(&e);
}

/* ---- sequence offsets ------------------------------------------------------------------ */

static void test_offsets_rejected(void **state)
{
    (void)state;
    reject_env e;
    env_init(&e);
    fa_reset_outputs(&e.c);
    mla_flash_attn_args b;
    /* T = 5, S = 6 */
    REJECT("cu_seqlens_q decreasing", (b.cu_seqlens_q = (const int32_t[]){0, 6, 5}), INVALID,
           "cu_seqlens_q");
    REJECT("cu_seqlens_q[0] 1", (b.cu_seqlens_q = (const int32_t[]){1, 3, 5}), INVALID,
           "cu_seqlens_q");
    REJECT("cu_seqlens_q[0] -1", (b.cu_seqlens_q = (const int32_t[]){-1, 3, 5}), INVALID,
           "cu_seqlens_q");
    REJECT("cu_seqlens_q ending before total_q", (b.cu_seqlens_q = (const int32_t[]){0, 3, 4}),
           INVALID, "cu_seqlens_q");
    REJECT("cu_seqlens_q ending past total_q", (b.cu_seqlens_q = (const int32_t[]){0, 3, 6}),
           INVALID, "cu_seqlens_q");
    REJECT("total_q past the end of cu_seqlens_q", b.total_q = 6, INVALID, "cu_seqlens_q");
    REJECT("cu_seqlens_k decreasing", (b.cu_seqlens_k = (const int32_t[]){0, 7, 6}), INVALID,
           "cu_seqlens_k");
    REJECT("cu_seqlens_k[0] 2", (b.cu_seqlens_k = (const int32_t[]){2, 4, 6}), INVALID,
           "cu_seqlens_k");
    REJECT("cu_seqlens_k ending before total_k", (b.cu_seqlens_k = (const int32_t[]){0, 4, 5}),
           INVALID, "cu_seqlens_k");
    REJECT("total_k before the end of cu_seqlens_k", b.total_k = 5, INVALID, "cu_seqlens_k");
    REJECT("num_seqs 0 with total_q 5", b.num_seqs = 0, INVALID, "cu_seqlens_q"); /* [0] = 0 */
    REJECT("num_seqs -1", b.num_seqs = -1, INVALID, "num_seqs");
    REJECT("total_q -1", b.total_q = -1, INVALID, "total_q");
    REJECT("total_k -1", b.total_k = -1, INVALID, "total_k");
    env_finish(&e);
}

/* ---- NULLs, sizes, dims -------------------------------------------------------------- */

static void test_pointers_and_dims_rejected(void **state)
{
    (void)state;
    reject_env e;
    env_init(&e);
    fa_reset_outputs(&e.c);
    mla_flash_attn_args b;
    expect_rejected(&e, "args NULL", call(&e, NULL), INVALID, "args");
    REJECT("q NULL", b.q = NULL, INVALID, "q");
    REJECT("k NULL", b.k = NULL, INVALID, "k");
    REJECT("k_pe NULL with rope_dim 2", b.k_pe = NULL, INVALID, "k_pe"); /* rope_dim 2 */
    REJECT("v NULL", b.v = NULL, INVALID, "v");
    REJECT("out NULL", b.out = NULL, INVALID, "out");
    REJECT("cu_seqlens_q NULL", b.cu_seqlens_q = NULL, INVALID, "cu_seqlens_q");
    REJECT("cu_seqlens_k NULL", b.cu_seqlens_k = NULL, INVALID, "cu_seqlens_k");
    REJECT("num_heads 0", b.num_heads = 0, INVALID, "num_heads");
    REJECT("num_heads -3", b.num_heads = -3, INVALID, "num_heads");
    /* head dims: 0 is a bad size, past 256 an unsupported one */
    REJECT("qk_dim 0", (b.qk_dim = 0, b.rope_dim = 0), INVALID, "qk_dim");
    REJECT("qk_dim -1", b.qk_dim = -1, INVALID, "qk_dim");
    REJECT("v_dim 0", b.v_dim = 0, INVALID, "v_dim");
    REJECT("qk_dim 257", b.qk_dim = 257, UNSUPPORTED, "qk_dim");
    REJECT("v_dim 257", b.v_dim = 257, UNSUPPORTED, "v_dim");
    REJECT("rope_dim equal to qk_dim", b.rope_dim = 6, INVALID, "rope_dim"); /* = qk_dim */
    REJECT("rope_dim past qk_dim", b.rope_dim = 7, INVALID, "rope_dim");
    REJECT("rope_dim -1", b.rope_dim = -1, INVALID, "rope_dim");
    /* dtype, scale */
    REJECT("dtype fp8_e4m3", b.dtype = MLA_DTYPE_FP8_E4M3, UNSUPPORTED, "fp8_e4m3");
    REJECT("dtype fp8_e5m2", b.dtype = MLA_DTYPE_FP8_E5M2, UNSUPPORTED, "fp8_e5m2");
    REJECT("dtype not an mla_dtype", b.dtype = MLA_DTYPE_COUNT, UNSUPPORTED, "dtype");
    REJECT("scale NaN", b.scale = NAN, INVALID, "scale");
    REJECT("scale +inf", b.scale = INFINITY, INVALID, "scale");
    REJECT("scale -inf", b.scale = -INFINITY, INVALID, "scale");
    env_finish(&e);
}

/* ---- strides and overlaps ---------------------------------------------------------------- */

static void test_strides_rejected(void **state)
{
    (void)state;
    reject_env e;
    env_init(&e);
    fa_reset_outputs(&e.c);
    mla_flash_attn_args b;
    REJECT("q_token_stride negative", b.q_token_stride = -12, INVALID, "q&negative");
    REJECT("q_head_stride negative", b.q_head_stride = -6, INVALID, "q&negative");
    REJECT("k_token_stride negative", b.k_token_stride = -8, INVALID, "k&negative");
    REJECT("k_head_stride negative", b.k_head_stride = -1, INVALID, "k&negative");
    REJECT("k_pe_token_stride negative", b.k_pe_token_stride = -2, INVALID, "k_pe&negative");
    REJECT("v_token_stride negative", b.v_token_stride = -8, INVALID, "v&negative");
    REJECT("v_head_stride negative", b.v_head_stride = -4, INVALID, "v&negative");
    REJECT("out_token_stride negative", b.out_token_stride = -8, INVALID, "out&negative");
    REJECT("out_head_stride negative", b.out_head_stride = -4, INVALID, "out&negative");
    /* out's rows overlap each other: heads 3 apart at width 4; every token
     * on the same rows; token t head 1 = token t+1 head 0 */
    REJECT("out_head_stride below v_dim (heads overlap)", b.out_head_stride = 3, INVALID,
           "out&overlap");
    REJECT("out_token_stride 0 (tokens overlap)", b.out_token_stride = 0, INVALID, "out&overlap");
    REJECT("out token and head strides equal (rows overlap)",
           (b.out_token_stride = 4, b.out_head_stride = 4), INVALID, "out&overlap");
    /* out or lse over an input, lse over out */
    REJECT("out over q", b.out = (void *)b.q, INVALID, "out&overlap");
    REJECT("out over v", b.out = (void *)b.v, INVALID, "out&overlap");
    REJECT("lse over k", b.lse = (float *)(void *)b.k, INVALID, "lse&overlap");
    REJECT("lse over out", b.lse = (float *)b.out + 3, INVALID, "lse&overlap");
    /* spans past int64 */
    REJECT("q_token_stride whose span passes int64", b.q_token_stride = INT64_MAX / 2,
           MLA_ERR_OVERFLOW, "q");
    REJECT("v_head_stride whose span passes int64", b.v_head_stride = INT64_MAX / 2,
           MLA_ERR_OVERFLOW, "v");
    env_finish(&e);
}

/* ---- workspace and forced backends --------------------------------------------------------- */

static void test_workspace_rejected(void **state)
{
    (void)state;
    reject_env e;
    env_init(&e);
    fa_reset_outputs(&e.c);
    if (e.need > 0)
        expect_rejected(&e, "workspace 1 byte short",
                        mla_flash_attn_varlen(&e.c.args, e.ws, e.need - 1, 1), MLA_ERR_CAPACITY,
                        "workspace");
    expect_rejected(&e, "workspace NULL", mla_flash_attn_varlen(&e.c.args, NULL, e.need, 1),
                    INVALID, "workspace");
    const char *query = "mla_flash_attn_varlen_workspace_size";
    int64_t bytes = 0;
    support_expect_reject(query, "args NULL", mla_flash_attn_varlen_workspace_size(NULL, 1, &bytes),
                          INVALID, "args");
    support_expect_reject(query, "bytes NULL",
                          mla_flash_attn_varlen_workspace_size(&e.c.args, 1, NULL), INVALID,
                          "bytes");
    mla_flash_attn_args b = e.c.args;
    b.qk_dim = 257;
    support_expect_reject(query, "qk_dim 257", mla_flash_attn_varlen_workspace_size(&b, 1, &bytes),
                          UNSUPPORTED, "qk_dim");
    /* the query rejects what the call would (cu_seqlens_q[B] is int32)
     * before it counts units from it */
    b = e.c.args;
    b.num_seqs = b.total_q = INT64_MAX;
    support_expect_reject(query, "total_q INT64_MAX (past int32)",
                          mla_flash_attn_varlen_workspace_size(&b, 1, &bytes), MLA_ERR_OVERFLOW,
                          "total_q 9223372036854775807 does not fit");

    /* a backend that runs on this CPU but not this config (the bf16-only
     * ones with f32, the unfit one): an error listing the reasons, nothing
     * written */
    mla_config cfg = fa_config(&e.c.s);
    support_unfit_backend();
    int forced = 0;
    for (int i = 0; i < mla_backend_count(); i++) {
        const char *name = mla_backend_at(i)->name;
        mla_reasons cpu, why;
        assert_int_equal(mla_backend_validate(name, MLA_OP_PREFILL, NULL, &cpu), MLA_OK);
        assert_int_equal(mla_backend_validate(name, MLA_OP_PREFILL, &cfg, &why), MLA_OK);
        if (cpu.count > 0 || why.count == 0)
            continue;
        assert_int_equal(mla_force_backend(MLA_OP_PREFILL, name), MLA_OK);
        expect_rejected(&e, "forced backend that cannot run the config", call(&e, &e.c.args),
                        MLA_ERR_BACKEND_INVALID, why.text[0]);
        print_message("[ FORCED   ] %s cannot run f32 prefill: rejected with \"%s\"\n", name,
                      mla_last_error());
        forced++;
    }
    assert_true(forced >= 1);
    assert_int_equal(mla_force_backend(MLA_OP_PREFILL, NULL), MLA_OK);
    env_finish(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        FA_TEST(test_good_calls),
        FA_TEST(test_offsets_rejected),
        FA_TEST(test_pointers_and_dims_rejected),
        FA_TEST(test_strides_rejected),
        FA_TEST(test_workspace_rejected),
    };
    case_apply_filter();
    return cmocka_run_group_tests_name("flash_attn_rejects", tests, NULL, NULL);
}
