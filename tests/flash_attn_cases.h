/*
 * The flash-attention suites' case builder: varlen batches (cu_seqlens),
 * q, k (whole, or k_nope plus a shared k_pe) and v in the layouts callers
 * use with junk in every gap, outputs inside guard bytes, workspaces of
 * exactly the queried size, a double-precision oracle and the checks of
 * results against it.
 *
 * The oracle (docs/semantics.md §1.7): for query i of request b (n_q
 * queries, n_k keys) and head h, the visible keys are j < n_k, and with
 * causal only j <= n_k - n_q + i (bottom-right aligned); logits
 * scale * sum_d q(t,h,d) k(s,h,d) in double from the stored values (bf16 and
 * f16 widened exactly; k(s,h,d) for d >= Dqk - R is k_pe(s, d - Dqk + R)),
 * softmax in double, out = sum_j p_j v(j,h,:), lse = natural log of the sum
 * of exp(logit). A row that sees no key, or whose every logit is -inf,
 * gets out 0 and lse -inf. Non-finite inputs go through the plain IEEE
 * arithmetic (docs/semantics.md §8); the checks want NaN where it gives
 * NaN and the same infinity where it gives one.
 *
 * Tolerances mirror decode_cases.h (its derivations hold with Dqk <= 256):
 *   out: |got - oracle| <= tol * max|v| of the request (over its keys and
 *     heads); tol = 1e-5 + 2e-7 sqrt(keys) for f32 (near exact: f32 dot
 *     products, f32 softmax and sums), 1e-2 for bf16 and 2e-3 for f16 (out
 *     rounded to the dtype, and P rounded to it on the half-precision
 *     routes: each <= u of max|v|). A row that sees no key must be exactly 0.
 *   lse: 1e-4 absolute for every dtype, plus LSE_REL_TOL |lse| (its own f32
 *     rounding, which large logits make felt); exactly -inf for a row with
 *     no key.
 */
#ifndef MLA_TEST_FLASH_ATTN_CASES_H
#define MLA_TEST_FLASH_ATTN_CASES_H

#include "decode_cases.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FA_MAX_SEQS 12

/* How q, k, v and out lie in memory (each [tokens, H, width]). */
typedef enum fa_layout {
    FA_DENSE,       /* head stride width, token stride H * width                   */
    FA_PADDED,      /* head stride width + 3, token stride H * (width + 3) + 5      */
    FA_HEADS_OUTER, /* [H, tokens, width + 2]: token stride width + 2, head stride
                       tokens * (width + 2) + 1 (a head's rows are contiguous)     */
    FA_LAYOUTS
} fa_layout;

typedef struct fa_spec {
    mla_dtype dtype;
    int64_t H, qk_dim, v_dim, rope_dim; /* rope_dim > 0: k is k_nope + shared k_pe */
    bool causal;
    float scale;
    int64_t num_seqs;
    int32_t q_lens[FA_MAX_SEQS], k_lens[FA_MAX_SEQS];
    fa_layout layout; /* of q, k, v, out; k_pe rows are padded unless dense */
    bool lse;
    bool big;  /* the ref backend runs it only when no other backend can */
    int threads;
    junk_kind junk; /* what fills the gaps of the inputs */
} fa_spec;

typedef struct fa_case {
    fa_spec s;
    int64_t T, S;
    int32_t *cu_q, *cu_k;
    void *q, *k, *k_pe, *v;  /* the buffers (views start at their first element) */
    size_t q_bytes, k_bytes, kpe_bytes, v_bytes;
    unsigned char *out_buf, *lse_buf; /* the views inside MARGIN guard bytes */
    size_t out_bytes, lse_bytes;
    uint64_t inputs_sum;
    mla_flash_attn_args args;
    double *want_out; /* [T, H, Dv] */
    double *want_lse; /* [H, T] */
    double *max_v;    /* [B] */
    char label[256];
} fa_case;

/* Keys query i of a request with n_q queries and n_k keys sees. */
int64_t fa_visible(bool causal, int64_t n_q, int64_t n_k, int64_t i);

/* Builds the case (random inputs, junk gaps, guard-filled outputs) and, if
 * with_oracle, the oracle's answers. */
void fa_make(fa_case *c, const fa_spec *s, bool with_oracle);
/* The oracle's answers from the inputs as they are now (again, after a
 * test changed them); max|v| per request over its finite values. */
void fa_oracle(fa_case *c);
void fa_free(fa_case *c);
void fa_reset_outputs(fa_case *c);
uint64_t fa_inputs_checksum(const fa_case *c);
/* The mla_config the call dispatches on (what support_each_backend needs). */
mla_config fa_config(const fa_spec *s);

/* mla_flash_attn_varlen with a workspace of exactly the queried size,
 * ws_misalign bytes past 64, guard bytes right outside it (checked). */
mla_status fa_call(const mla_flash_attn_args *a, int threads, int64_t ws_misalign,
                   const char *what);
/* Outputs reset, then fa_call; fails, naming `backend`, unless it succeeds. */
void fa_run(fa_case *c, const char *backend, int threads, int64_t ws_misalign);
/* out and lse against the oracle; every other output byte untouched; the
 * inputs unchanged. */
void fa_check(const fa_case *c, const char *backend);
/* fa_run on the forced backend b, b the one that ran, fa_check. */
void fa_run_on(fa_case *c, const mla_backend_desc *b, int threads);
/* Runs the case (fa_run_on at its thread count) on every backend that can,
 * the ref backend skipped for big cases when another ran; returns how many
 * ran. */
int fa_run_everywhere(fa_case *c);
/* The worst errors fa_check saw, as [ ACCURACY ] lines. */
void fa_print_accuracy(void);

/* A failed test leaves its forced backend behind: every test starts clean. */
int fa_unforce(void **state);
#define FA_TEST(f) cmocka_unit_test_setup_teardown(f, fa_unforce, fa_unforce)

#endif
