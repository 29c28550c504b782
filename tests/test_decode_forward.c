/*
 * The absorbed decode forward (docs/semantics.md §1.3, §1.6):
 *   - mla_prepare_weights bit for bit against the plain index mapping;
 *   - mla_decode_forward on every backend this CPU can run, forced in turn,
 *     against the non-absorbed oracle of docs/semantics.md §1.7 item 7
 *     (oracle_decode_mha: k_nope and v up-projected per head, plain
 *     attention), so the absorption identities are tested too.
 * The case builder and the tolerances: decode_cases.h.
 */
#include "decode_cases.h"

#include "oracle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- mla_prepare_weights --------------------------------------------------------------- */

static void check_prepare(mla_dtype src, mla_dtype w, int64_t H, int64_t L, int64_t P, int64_t V,
                          int threads)
{
    const int64_t n = H * (P + V) * L, wsize = mla_dtype_size(w);
    void *kvb = case_random_kvb(src, n, 3.0);
    const size_t uk_bytes = (size_t)(H * P * L * wsize), uv_bytes = (size_t)(H * L * V * wsize);
    unsigned char *uk = case_alloc(uk_bytes + 2 * MARGIN), *uv = case_alloc(uv_bytes + 2 * MARGIN);
    unsigned char *want_uk = malloc(uk_bytes), *want_uv = malloc(uv_bytes);
    memset(uk, GUARD, uk_bytes + 2 * MARGIN);
    memset(uv, GUARD, uv_bytes + 2 * MARGIN);
    for (int64_t h = 0; h < H; h++)
        for (int64_t l = 0; l < L; l++) {
            for (int64_t p = 0; p < P; p++) /* w_uk_t[h][p][l] = kv_b_proj[h*(P+V) + p][l] */
                oracle_store(w, want_uk, (h * P + p) * L + l,
                             oracle_load(src, kvb, (h * (P + V) + p) * L + l, 1.0f), 1.0f);
            for (int64_t v = 0; v < V; v++) /* w_uv[h][l][v] = kv_b_proj[h*(P+V) + P + v][l] */
                oracle_store(w, want_uv, (h * L + l) * V + v,
                             oracle_load(src, kvb, (h * (P + V) + P + v) * L + l, 1.0f), 1.0f);
        }
    mla_status st =
        mla_prepare_weights(kvb, src, H, L, P, V, uk + MARGIN, uv + MARGIN, w, threads);
    if (st != MLA_OK)
        fail_msg("mla_prepare_weights %s -> %s: %s: %s", mla_dtype_name(src), mla_dtype_name(w),
                 mla_status_str(st), mla_last_error());
    char what[160];
    snprintf(what, sizeof what, "prepare %s -> %s, H %lld L %lld P %lld V %lld, %d threads",
             mla_dtype_name(src), mla_dtype_name(w), (long long)H, (long long)L, (long long)P,
             (long long)V, threads);
    for (int which = 0; which < 2; which++) {
        const unsigned char *got = (which ? uv : uk) + MARGIN, *want = which ? want_uv : want_uk;
        size_t bytes = which ? uv_bytes : uk_bytes;
        if (memcmp(got, want, bytes) != 0) {
            size_t e = 0;
            while (memcmp(got + e * (size_t)wsize, want + e * (size_t)wsize, (size_t)wsize) == 0)
                e++;
            int64_t h = which ? (int64_t)e / (L * V) : (int64_t)e / (P * L);
            int64_t i1 = which ? ((int64_t)e / V) % L : ((int64_t)e / L) % P;
            int64_t i2 = which ? (int64_t)e % V : (int64_t)e % L;
            fail_msg("%s: %s[%lld][%lld][%lld] = %g, want %g", what, which ? "w_uv" : "w_uk_t",
                     (long long)h, (long long)i1, (long long)i2,
                     oracle_load(w, got, (int64_t)e, 1.0f), oracle_load(w, want, (int64_t)e, 1.0f));
        }
        case_expect_guards((which ? uv : uk), MARGIN, what);
        case_expect_guards((which ? uv : uk) + MARGIN + bytes, MARGIN, what);
    }
    free(kvb);
    free(uk);
    free(uv);
    free(want_uk);
    free(want_uv);
}

static void test_prepare_weights(void **state)
{
    (void)state;
    static const mla_dtype w_dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16};
    for (int si = 0; si < COUNT(case_q_dtypes); si++)
        for (int wi = 0; wi < COUNT(w_dtypes); wi++)
            for (int threads = 1; threads <= 2; threads++)
                check_prepare(case_q_dtypes[si], w_dtypes[wi], 3, 40, 16, 8, threads);
    /* DeepSeek's per-head shape */
    check_prepare(MLA_DTYPE_F32, MLA_DTYPE_BF16, 2, 512, 128, 128, 0);
    check_prepare(MLA_DTYPE_BF16, MLA_DTYPE_F32, 1, 7, 3, 5, 1);
}

/* ---- mla_decode_forward ------------------------------------------------------------------- */

/* A backend that validates for the caller's config (q dtype, cache dtype, L,
 * R, H, block size) must run the forward call. Refusals are collected so the
 * other backends and cases still get checked; the test fails at the end if
 * there were any. */
typedef struct forward_run {
    fcase *c;
    int ran, refused;
    char first_refusal[400];
} forward_run;

static void run_forward_on(const mla_backend_desc *b, void *ctx)
{
    forward_run *r = ctx;
    fcase *c = r->c;
    memset(c->out_buf, GUARD, c->out_bytes);
    memset(c->lse_buf, GUARD, c->lse_bytes);
    mla_status st = case_run_forward(&c->f, c->s.threads, 0, c->label);
    if (st == MLA_ERR_BACKEND_INVALID) {
        if (r->refused++ == 0)
            snprintf(r->first_refusal, sizeof r->first_refusal, "%s: %s: %s", b->name, c->label,
                     mla_last_error());
        print_message("[ REFUSED  ] %s: %s: %s\n", b->name, c->label, mla_last_error());
        case_expect_guards(c->out_buf, c->out_bytes, "out after a refused forward call");
        return;
    }
    if (st != MLA_OK)
        fail_msg("%s: %s: mla_decode_forward: %s: %s", b->name, c->label, mla_status_str(st),
                 mla_last_error());
    support_expect_ran(b);
    fcase_check(c, b->name);
    r->ran++;
}

static void test_forward(void **state)
{
    (void)state;
    const mla_dtype F32 = MLA_DTYPE_F32, BF16 = MLA_DTYPE_BF16, F16 = MLA_DTYPE_F16;
    const mla_dtype E4M3 = MLA_DTYPE_FP8_E4M3, E5M2 = MLA_DTYPE_FP8_E5M2;
    const fspec specs[] = {
        {F32, F32, F32, F32, 2, 3, 32, 8, 16, 8, 16, 3, {1, 17, 40}, true, true, 1},
        {F32, BF16, F32, BF16, 1, 3, 32, 8, 16, 8, 1, 2, {5, 33}, false, true, 2},
        {BF16, BF16, BF16, BF16, 2, 3, 32, 8, 16, 8, 64, 3, {0, 2, 70}, true, false, 0},
        {F16, E4M3, F32, F32, 1, 3, 32, 8, 16, 8, 16, 2, {9, 16}, false, true, 2},
        {F32, F16, BF16, F32, 4, 3, 32, 8, 16, 8, 16, 3, {0, 3, 9}, true, true, 3},
        {F32, E5M2, F16, BF16, 1, 2, 24, 0, 16, 8, 16, 2, {7, 30}, false, true, 1},
        /* DeepSeek-like: 512 + 64 latent, 128 + 64 q, 128 v, 16 heads, short contexts */
        {F32, BF16, F32, BF16, 2, 16, 512, 64, 128, 128, 64, 2, {20, 45}, true, true, 0},
        {BF16, BF16, BF16, BF16, 1, 16, 512, 64, 128, 128, 64, 2, {33, 64}, false, true, 2},
    };
    forward_run r = {0};
    for (int k = 0; k < COUNT(specs); k++) {
        fcase c;
        fcase_make(&c, &specs[k]);
        mla_config cfg = case_config_of_forward(&c.f);
        r.c = &c;
        r.ran = 0;
        support_each_backend(MLA_OP_DECODE, &cfg, run_forward_on, &r);
        if (r.ran == 0)
            fail_msg("%s: no backend can run this", c.label);
        fcase_free(&c);
    }
    fcase_print_accuracy();
    if (r.refused > 0)
        fail_msg("%d forward call(s) refused by a forced backend that mla_backend_validate "
                 "accepts for the call's config; first: %s", r.refused, r.first_refusal);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        CASE_TEST(test_prepare_weights),
        CASE_TEST(test_forward),
    };
    case_apply_filter();
    return cmocka_run_group_tests_name("decode_forward", tests, NULL, NULL);
}
