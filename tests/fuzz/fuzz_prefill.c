/*
 * libFuzzer target: the prefill kernels and the prefill op (docs/semantics.md
 * §1.7, §4) through the MLA_OP_PREFILL backend (fuzz.h says what every
 * call is checked for).
 *
 *   flash    mla_flash_attn_varlen_workspace_size, mla_flash_attn_varlen:
 *            out and lse against a double-precision loop (causal bottom-right
 *            aligned, k whole or k_nope plus a shared k_pe)
 *   merge    mla_merge_attn_states (out in place too) against §4 in double
 *   up_proj  mla_up_proj_workspace_size, mla_up_proj against sums in
 *            double; mla_pack_kv_b_proj_size, mla_pack_kv_b_proj and the
 *            same call on the packed weight, which must give the same bits
 *   prefill  mla_prefill_workspace_size, mla_prefill (either path, or the
 *            cost model's choice: mla_prefill_choose_path) against the
 *            non-absorbed oracle of tests/oracle.c, request by request
 *
 * Tolerances: flash attention as tests/flash_attn_cases.h (out within
 * 1e-5 + 2e-7 sqrt(keys) (f32), 1e-2 (bf16), 2e-3 (f16) of max|v|; lse
 * 1e-4). merge: its f32 weighted sum and the output's rounding, 4 f32 ulps
 * plus u of the two terms' magnitudes. up_proj: (L + 2) 2^-23 of sum |a w|
 * (an FMA chain, or bf16 pairs) plus u of the result. prefill as
 * tests/test_prefill.c (2e-4 f32, 6u 16-bit, of max|v| of the request),
 * plus twice the score shift the 16-bit roundings of k_nope and of the
 * absorbed query can cause (decode_cases.c), times max|v|.
 */
#include "fuzz.h"

#include "oracle.h"

#include <math.h>
#include <string.h>

static const mla_dtype all_dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16,
                                       MLA_DTYPE_FP8_E4M3, MLA_DTYPE_FP8_E5M2};
static const mla_dtype float_dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16};

static bool is_float(mla_dtype dt)
{
    return dt == MLA_DTYPE_F32 || dt == MLA_DTYPE_BF16 || dt == MLA_DTYPE_F16;
}

static int64_t size_of(mla_dtype dt)
{
    return mla_dtype_size(dt) ? mla_dtype_size(dt) : 1;
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

static double maxd(double a, double b)
{
    return a > b ? a : b;
}

/* [0] = 0, then running sums of n[i] (i < count); (hostile) one entry off. */
static void offsets(fz *f, int32_t *cu, const int64_t *n, int64_t count)
{
    cu[0] = 0;
    for (int64_t i = 0; i < count; i++)
        cu[i + 1] = (int32_t)(cu[i] + n[i]);
    if (f->hostile && fz_u8(f) < 24)
        cu[fz_in(f, 0, count)] += (int32_t)fz_in(f, 1, 2) * (fz_bit(f) ? 1 : -1);
}

/* Offsets from 0, non-decreasing, ending at total. */
static bool offsets_ok(const int32_t *cu, int64_t count, int64_t total)
{
    if (cu[0] != 0)
        return false;
    for (int64_t i = 0; i < count; i++)
        if (cu[i + 1] < cu[i])
            return false;
    return cu[count] == total;
}

/* Fills a buffer's elements with random values of dtype. */
static void fill(fz *f, fz_buf *b, mla_dtype dt)
{
    if (is_float(dt))
        for (size_t i = 0; i < b->bytes / (size_t)size_of(dt); i++)
            fz_put_random(f, dt, b->p, (int64_t)i, 1.0f);
}

/* ---- flash attention ---------------------------------------------------------- */

#define FA_SEQS 4

static void run_flash(fz *f)
{
    const int64_t B = fz_edge(f, fz_in(f, 0, FA_SEQS)), H = fz_edge(f, fz_in(f, 1, 3));
    const int64_t qk = fz_edge(f, fz_in(f, 1, 40)), dv = fz_edge(f, fz_in(f, 1, 40));
    const int64_t R = fz_edge(f, fz_u8(f) < 128 || qk < 2 || qk > 40 ? 0 : fz_in(f, 1, qk - 1));
    const bool causal = fz_bit(f);
    const float scale = fz_float(f, -2.0f, 2.0f);
    const mla_dtype dt = fz_pick_dtype(f, float_dtypes, 3);
    const int threads = fz_threads(f);
    const int64_t Bn = B >= 0 && B <= FA_SEQS ? B : 0;
    int64_t nq[FA_SEQS] = {0}, nk[FA_SEQS] = {0};
    for (int64_t b = 0; b < Bn; b++)
        nq[b] = fz_in(f, 0, 6), nk[b] = fz_in(f, 0, 8);
    fz_buf *cuq_buf = fz_alloc("cu_seqlens_q", (FA_SEQS + 1) * 4, 0, false);
    fz_buf *cuk_buf = fz_alloc("cu_seqlens_k", (FA_SEQS + 1) * 4, 0, false);
    int32_t *cu_q = (int32_t *)cuq_buf->p, *cu_k = (int32_t *)cuk_buf->p;
    offsets(f, cu_q, nq, Bn);
    offsets(f, cu_k, nk, Bn);
    const int64_t T = fz_edge(f, cu_q[Bn] >= 0 ? cu_q[Bn] : 0);
    const int64_t S = fz_edge(f, cu_k[Bn] >= 0 ? cu_k[Bn] : 0);
    const int64_t nope = qk >= 1 && qk <= 256 && R >= 0 && R < qk ? qk - R : 1;
    int64_t q_ts, q_hs, k_ts, k_hs, v_ts, v_hs, o_ts, o_hs;
    fz_view_strides(f, T, H, qk, &q_ts, &q_hs);
    fz_view_strides(f, S, H, nope, &k_ts, &k_hs);
    fz_view_strides(f, S, H, dv, &v_ts, &v_hs);
    fz_view_strides(f, T, H, dv, &o_ts, &o_hs);
    const int64_t pe_ts = fz_edge(f, fz_pad(R, fz_in(f, 0, 3)));
    const bool with_lse = fz_bit(f), no_args = f->hostile && fz_null(f);
    const bool no_q = fz_null(f), no_k = fz_null(f), no_pe = fz_null(f), no_v = fz_null(f);
    const bool no_out = fz_null(f), no_cuq = fz_null(f), no_cuk = fz_null(f);
    const uint8_t alias = f->hostile ? fz_u8(f) : 255; /* < 8: out on q; < 16: lse on out */

    /* the model: mla.h's rules for mla_flash_attn_args */
    fz_expect dims = fz_unless(no_args || B < 0 || H < 1 || T < 0 || S < 0 || T > INT32_MAX ||
                                   qk < 1 || dv < 1 || qk > 256 || dv > 256 || R < 0 || R >= qk ||
                                   !is_float(dt) || !isfinite(scale),
                               FZ_OK);
    fz_expect e = dims;
    if (e != FZ_REJECT && (B > FA_SEQS || H > 3 || qk > 40 || dv > 40 || T > 24 || S > 32))
        return; /* valid, but larger than the harness's arrays */
    e = fz_unless(no_cuq || no_cuk, e);
    if (e != FZ_REJECT)
        e = fz_unless(!offsets_ok(cu_q, B, T) || !offsets_ok(cu_k, B, S), e);
    const int64_t q_el = fz_view_elems(T, H, qk, q_ts, q_hs);
    const int64_t k_el = fz_view_elems(S, H, nope, k_ts, k_hs);
    const int64_t pe_el = R > 0 ? fz_view_elems(S, 1, R, pe_ts, 0) : 0;
    const int64_t v_el = fz_view_elems(S, H, dv, v_ts, v_hs);
    const int64_t o_el = fz_view_elems(T, H, dv, o_ts, o_hs);
    if (e != FZ_REJECT) {
        e = fz_unless(q_el < 0 || k_el < 0 || pe_el < 0 || v_el < 0 || o_el < 0, e);
        e = fz_unless(fz_bytes(q_el, dt) < 0 || fz_bytes(k_el, dt) < 0 || fz_bytes(pe_el, dt) < 0 ||
                          fz_bytes(v_el, dt) < 0 || fz_bytes(o_el, dt) < 0,
                      e);
        e = fz_unless((T > 0 && (no_q || no_out)) || (S > 0 && (no_k || no_v || (R > 0 && no_pe))),
                      e);
        e = fz_and(e, fz_rows_verdict(T, H, dv, o_ts, o_hs));
    }
    const bool real = e != FZ_REJECT;
    const int64_t el = size_of(dt);
    if (real && (!fz_fits(fz_mul(q_el, el)) || !fz_fits(fz_mul(k_el, el)) ||
                 !fz_fits(fz_mul(v_el, el)) || !fz_fits(fz_mul(o_el, el)) ||
                 !fz_fits(fz_mul(pe_el, el))))
        return;
    fz_buf *q = fz_alloc("q", (size_t)(real ? q_el * el : 16), fz_u8(f), false);
    fz_buf *k = fz_alloc("k", (size_t)(real ? k_el * el : 16), fz_u8(f), false);
    fz_buf *pe = fz_alloc("k_pe", (size_t)(real ? pe_el * el : 16), fz_u8(f), false);
    fz_buf *v = fz_alloc("v", (size_t)(real ? v_el * el : 16), fz_u8(f), false);
    fz_buf *out = fz_alloc("out", (size_t)(real ? o_el * el : 16), alias < 16 ? 0 : fz_u8(f), true);
    fz_buf *lse = fz_alloc("lse", (size_t)(real ? H * T * 4 : 4), 0, true);
    if (!q || !k || !pe || !v || !out || !lse)
        return;
    fill(f, q, dt), fill(f, k, dt), fill(f, pe, dt), fill(f, v, dt);
    void *out_p = no_out ? NULL : out->p;
    float *lse_p = with_lse ? (float *)lse->p : NULL;
    if (alias < 8 && !no_q && T > 0 && q_el > 0 && o_el > 0) { /* out on q's first bytes */
        out_p = q->p;
        e = FZ_REJECT;
    } else if (alias >= 8 && alias < 16 && real && !no_out && T > 0 && o_el * el >= 4 * H * T) {
        lse_p = (float *)out->p; /* lse on out's first bytes */
        e = FZ_REJECT;
    }
    mla_flash_attn_args a = {
        .num_seqs = B, .num_heads = H, .qk_dim = qk, .v_dim = dv, .rope_dim = R, .causal = causal,
        .scale = scale, .dtype = dt, .total_q = T, .total_k = S,
        .cu_seqlens_q = no_cuq ? NULL : cu_q, .cu_seqlens_k = no_cuk ? NULL : cu_k,
        .q = no_q ? NULL : q->p, .q_token_stride = q_ts, .q_head_stride = q_hs,
        .k = no_k ? NULL : k->p, .k_token_stride = k_ts, .k_head_stride = k_hs,
        .k_pe = no_pe ? NULL : pe->p, .k_pe_token_stride = pe_ts, .v = no_v ? NULL : v->p,
        .v_token_stride = v_ts, .v_head_stride = v_hs, .out = out_p, .out_token_stride = o_ts,
        .out_head_stride = o_hs, .lse = lse_p};
    const mla_config cfg = {.q_dtype = dt, .cache_dtype = dt, .kv_lora_rank = nope, .rope_dim = R,
                            .num_heads = H, .block_size = 1};
    const char *backend = fz_backend_for(f, MLA_OP_PREFILL, dims == FZ_REJECT ? NULL : &cfg);
    fz_buf *bytes_buf = fz_alloc("bytes", 8, 0, true);
    const bool no_bytes = fz_null(f);
    if (dims != FZ_REJECT && !no_bytes)
        fz_allow(bytes_buf, 0, 8);
    fz_before();
    mla_status st = mla_flash_attn_varlen_workspace_size(no_args ? NULL : &a, threads,
                                                         no_bytes ? NULL : (int64_t *)bytes_buf->p);
    const bool sized = fz_after("mla_flash_attn_varlen_workspace_size", st,
                                fz_unless(no_bytes, dims), NULL);
    int64_t need = 0;
    if (sized)
        memcpy(&need, bytes_buf->p, 8);
    if ((sized && (need < 0 || !fz_fits(need))) || (!sized && e != FZ_REJECT))
        return;
    fz_workspace ws;
    if (!fz_call_workspace(f, sized, need, &e, &ws))
        return;
    e = fz_unless(e != FZ_REJECT && !fz_backend_takes(backend, MLA_OP_PREFILL, &cfg), e);
    if (e != FZ_REJECT) {
        fz_allow_view(out, T, H, dv, o_ts, o_hs, el);
        if (with_lse)
            fz_allow(lse, 0, lse->bytes);
    }
    fz_before();
    st = mla_flash_attn_varlen(no_args ? NULL : &a, ws.null ? NULL : ws.buf->p, ws.given, threads);
    if (!fz_after("mla_flash_attn_varlen", st, e, backend))
        return;

    /* the reference: softmax(scale q.k) v in double, per sequence, row, head */
    double logit[8];
    for (int64_t b = 0; b < B; b++) {
        const int64_t n_q = cu_q[b + 1] - cu_q[b], n_k = cu_k[b + 1] - cu_k[b];
        double max_v = 0.0;
        for (int64_t j = 0; j < n_k; j++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t d = 0; d < dv; d++)
                    max_v = maxd(max_v, fabs(fz_load(dt, v->p, (cu_k[b] + j) * v_ts + h * v_hs + d, 1.0f)));
        const double tol = (dt == MLA_DTYPE_F32 ? 1e-5 + 2e-7 * sqrt((double)n_k)
                            : dt == MLA_DTYPE_BF16 ? 1e-2
                                                   : 2e-3) * max_v +
                           fz_subnormal_error(dt);
        for (int64_t i = 0; i < n_q; i++) {
            const int64_t t = cu_q[b] + i;
            int64_t seen = causal ? n_k - n_q + i + 1 : n_k;
            seen = seen < 0 ? 0 : seen > n_k ? n_k : seen;
            for (int64_t h = 0; h < H; h++) {
                double m = -INFINITY, sum = 0.0;
                for (int64_t j = 0; j < seen; j++) {
                    const int64_t s = cu_k[b] + j;
                    double dot = 0.0;
                    for (int64_t d = 0; d < qk; d++) {
                        const double kd = d < nope ? fz_load(dt, k->p, s * k_ts + h * k_hs + d, 1.0f)
                                                   : fz_load(dt, pe->p, s * pe_ts + d - nope, 1.0f);
                        dot += fz_load(dt, q->p, t * q_ts + h * q_hs + d, 1.0f) * kd;
                    }
                    logit[j] = (double)scale * dot;
                    m = maxd(m, logit[j]);
                }
                for (int64_t j = 0; j < seen; j++)
                    sum += exp(logit[j] - m);
                for (int64_t d = 0; d < dv; d++) {
                    double want = 0.0;
                    for (int64_t j = 0; j < seen; j++)
                        want += exp(logit[j] - m) / sum *
                                fz_load(dt, v->p, (cu_k[b] + j) * v_ts + h * v_hs + d, 1.0f);
                    const double got = fz_load(dt, out->p, t * o_ts + h * o_hs + d, 1.0f);
                    if (seen == 0 ? got != 0.0 : !fz_close(want, got, tol))
                        fz_fail("mla_flash_attn_varlen (%s, %s, causal %d, scale %g): seq %lld "
                                "row %lld head %lld out[%lld] = %.9g, want %.9g (tol %.3g)",
                                backend, mla_dtype_name(dt), causal, (double)scale, (long long)b,
                                (long long)i, (long long)h, (long long)d, got, want, tol);
                }
                if (!with_lse)
                    continue;
                float got;
                memcpy(&got, lse->p + (h * T + t) * 4, 4);
                const double want = seen ? m + log(sum) : -INFINITY;
                if (seen == 0 ? !(isinf(got) && got < 0) : !fz_close(want, got, 1e-4))
                    fz_fail("mla_flash_attn_varlen (%s): seq %lld row %lld head %lld lse %.9g, "
                            "want %.9g", backend, (long long)b, (long long)i, (long long)h,
                            (double)got, want);
            }
        }
    }
}

/* ---- merge_attn_states ---------------------------------------------------------- */

/* An LSE: mostly a finite value, now and then an empty partial (+-inf) or NaN. */
static float random_lse(fz *f)
{
    const uint64_t r = fz_random(f) % 64;
    return r == 0 ? INFINITY : r == 1 ? -INFINITY : r == 2 ? NAN : (float)(4.0 * fz_uniform(f));
}

static void run_merge(fz *f)
{
    const int64_t T = fz_edge(f, fz_in(f, 0, 8)), H = fz_edge(f, fz_in(f, 1, 3));
    const int64_t D = fz_edge(f, fz_in(f, 1, 40));
    const mla_dtype dt = fz_pick_dtype(f, float_dtypes, 3);
    const int64_t K = fz_edge(f, fz_u8(f) < 64 ? MLA_MERGE_ALL_TOKENS : fz_in(f, 0, T >= 0 && T < 9 ? T : 0));
    const int threads = fz_threads(f);
    int64_t ts, hs, o_ts, o_hs;
    fz_view_strides(f, T, H, D, &ts, &hs);
    fz_view_strides(f, T, H, D, &o_ts, &o_hs);
    /* out on its own, or in place of prefix or suffix (the same strides;
     * hostile: other strides); out_lse on its own, absent, or in place */
    const uint8_t place = fz_u8(f), lse_place = fz_u8(f) % 4;
    const int in_place = place % 3; /* 0 own, 1 prefix, 2 suffix */
    const bool same_strides = !f->hostile || fz_u8(f) >= 40;
    if (in_place && same_strides)
        o_ts = ts, o_hs = hs;
    const bool no_args = f->hostile && fz_null(f), no_prefix = fz_null(f), no_suffix = fz_null(f);
    const bool no_out = fz_null(f), no_plse = fz_null(f), no_slse = fz_null(f);
    const bool lse_shift = f->hostile && fz_u8(f) < 24; /* out_lse one element into the other's */

    const int64_t kk = K == MLA_MERGE_ALL_TOKENS ? T : K;
    fz_expect e = fz_unless(no_args || T < 0 || H < 1 || D < 1 || !is_float(dt) || kk < 0 || kk > T ||
                                fz_mul(fz_mul(fz_mul(T, H), D), 4) < 0,
                            FZ_OK);
    if (e != FZ_REJECT && (T > 8 || H > 3 || D > 40))
        return;
    const int64_t v_el = fz_view_elems(T, H, D, ts, hs), o_el = fz_view_elems(T, H, D, o_ts, o_hs);
    const int64_t el = size_of(dt);
    if (e != FZ_REJECT) {
        e = fz_unless(v_el < 0 || o_el < 0 || fz_bytes(v_el, dt) < 0 || fz_bytes(o_el, dt) < 0, e);
        e = fz_unless(T > 0 && (no_prefix || no_suffix || no_out || no_plse || no_slse), e);
        e = fz_and(e, fz_rows_verdict(T, H, D, o_ts, o_hs));
    }
    const bool real = e != FZ_REJECT;
    if (real && (!fz_fits(fz_mul(v_el, el)) || !fz_fits(fz_mul(o_el, el))))
        return;
    const size_t vb = (size_t)(real ? v_el * el : 16), ob = (size_t)(real ? o_el * el : 16);
    const size_t lb = (size_t)(real ? T * H * 4 : 4);
    fz_buf *prefix = fz_alloc("prefix", in_place == 1 ? (vb > ob ? vb : ob) : vb, fz_u8(f), in_place == 1);
    fz_buf *suffix = fz_alloc("suffix", in_place == 2 ? (vb > ob ? vb : ob) : vb, fz_u8(f), in_place == 2);
    fz_buf *out = in_place ? NULL : fz_alloc("out", ob, fz_u8(f), true);
    fz_buf *plse = fz_alloc("prefix_lse", lb + 4, 0, lse_place == 2);
    fz_buf *slse = fz_alloc("suffix_lse", lb + 4, 0, lse_place == 3);
    fz_buf *olse = fz_alloc("out_lse", lb, 0, true);
    if (!prefix || !suffix || (!in_place && !out) || !plse || !slse || !olse)
        return;
    fill(f, prefix, dt);
    fill(f, suffix, dt);
    for (size_t i = 0; i < lb / 4; i++) {
        const float x = random_lse(f), y = random_lse(f);
        memcpy(plse->p + 4 * i, &x, 4);
        memcpy(slse->p + 4 * i, &y, 4);
    }
    fz_buf *ob_buf = in_place == 1 ? prefix : in_place == 2 ? suffix : out;
    fz_buf *lse_buf = lse_place == 0 ? NULL : lse_place == 1 ? olse : lse_place == 2 ? plse : slse;
    /* shifted, out_lse overlaps the other LSE without being it */
    const size_t lse_offset = lse_shift && lse_place >= 2 && real && T * H >= 1 ? 4 : 0;
    float *out_lse = lse_buf ? (float *)(lse_buf->p + lse_offset) : NULL;
    mla_merge_attn_args a = {
        .num_tokens = T, .num_heads = H, .head_dim = D, .dtype = dt,
        .prefix = no_prefix ? NULL : prefix->p, .suffix = no_suffix ? NULL : suffix->p,
        .token_stride = ts, .head_stride = hs, .prefix_lse = no_plse ? NULL : (float *)plse->p,
        .suffix_lse = no_slse ? NULL : (float *)slse->p, .out = no_out ? NULL : ob_buf->p,
        .out_token_stride = o_ts, .out_head_stride = o_hs, .out_lse = out_lse,
        .prefill_tokens_with_context = K};
    if (e != FZ_REJECT && T > 0) {
        /* in place must be row for row: the same pointer and strides where
         * there is more than one token or head */
        const bool rows_match = (T == 1 || o_ts == ts) && (H == 1 || o_hs == hs);
        e = fz_unless(in_place && !rows_match && o_el > 0 && v_el > 0, e);
        /* shifted by one element, out_lse overlaps the other only past one row */
        e = fz_unless(lse_shift && lse_place >= 2 && T * H > 1, e);
    }
    /* the reference, from the inputs as they are before the call */
    double *want = fz_scratch(sizeof(double) * (size_t)(T > 0 && real ? T * H * D : 1));
    double *want_lse = fz_scratch(sizeof(double) * (size_t)(T > 0 && real ? T * H : 1));
    double *mag = fz_scratch(sizeof(double) * (size_t)(T > 0 && real ? T * H : 1));
    for (int64_t t = 0; real && e != FZ_REJECT && t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            float p, s;
            memcpy(&p, plse->p + (h * T + t) * 4, 4);
            memcpy(&s, slse->p + (h * T + t) * 4, 4);
            const bool p_empty = isinf(p), s_empty = isinf(s);
            double wp = 0.0, ws = 1.0, lse = s;
            if (t < kk) {
                if (isnan(p) || isnan(s)) {
                    wp = ws = lse = NAN;
                } else if (p_empty && s_empty) {
                    wp = ws = 0.0, lse = -INFINITY;
                } else {
                    const double m = p_empty ? s : s_empty ? p : maxd(p, s);
                    wp = p_empty ? 0.0 : exp(p - m), ws = s_empty ? 0.0 : exp(s - m);
                    const double sum = wp + ws;
                    wp /= sum, ws /= sum, lse = log(sum) + m;
                }
            }
            want_lse[h * T + t] = lse;
            mag[h * T + t] = 0.0;
            for (int64_t d = 0; d < D; d++) {
                const double x = fz_load(dt, prefix->p, t * ts + h * hs + d, 1.0f);
                const double y = fz_load(dt, suffix->p, t * ts + h * hs + d, 1.0f);
                want[(t * H + h) * D + d] = t >= kk ? y : wp * x + ws * y;
                mag[h * T + t] = maxd(mag[h * T + t], fabs(wp * x) + fabs(ws * y));
            }
        }
    if (e != FZ_REJECT) {
        fz_allow_view(ob_buf, T, H, D, o_ts, o_hs, el);
        if (out_lse)
            fz_allow(lse_buf, lse_offset, lb);
    }
    const mla_config cfg = {.q_dtype = is_float(dt) ? dt : MLA_DTYPE_F32,
                            .cache_dtype = is_float(dt) ? dt : MLA_DTYPE_F32, .kv_lora_rank = 1,
                            .num_heads = 1, .block_size = 1};
    const char *backend = fz_backend_for(f, MLA_OP_PREFILL, &cfg);
    e = fz_unless(e != FZ_REJECT && !fz_backend_takes(backend, MLA_OP_PREFILL, &cfg), e);
    fz_before();
    mla_status st = mla_merge_attn_states(no_args ? NULL : &a, threads);
    if (!fz_after("mla_merge_attn_states", st, e, backend))
        return;
    const double u = dt == MLA_DTYPE_F32 ? 0.0 : fz_unit(dt);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            /* f32: the two weights' exps (each a few units of rounding), their
             * sum, the division, the products and the add */
            const double tol = (12 * 0x1p-24 + u) * mag[h * T + t] + fz_subnormal_error(dt);
            for (int64_t d = 0; d < D; d++) {
                const double got = fz_load(dt, ob_buf->p, t * o_ts + h * o_hs + d, 1.0f);
                const double w = want[(t * H + h) * D + d];
                if (!(t >= kk ? got == w || (isnan(got) && isnan(w)) : fz_close(w, got, tol)))
                    fz_fail("mla_merge_attn_states (%s, %s): token %lld head %lld out[%lld] = "
                            "%.9g, want %.9g (tol %.3g)", backend, mla_dtype_name(dt),
                            (long long)t, (long long)h, (long long)d, got, w, tol);
            }
            if (!out_lse)
                continue;
            float got;
            memcpy(&got, (const char *)out_lse + (h * T + t) * 4, 4);
            const double w = want_lse[h * T + t];
            if (!fz_close(w, got, 1e-6 * (1.0 + fabs(w))))
                fz_fail("mla_merge_attn_states (%s): token %lld head %lld out_lse %.9g, want %.9g",
                        backend, (long long)t, (long long)h, (double)got, w);
        }
}

/* ---- the up-projection ------------------------------------------------------------- */

static void run_up_proj(fz *f)
{
    const int64_t S = fz_edge(f, fz_in(f, 0, 10)), H = fz_edge(f, fz_in(f, 1, 3));
    const int64_t L = fz_edge(f, fz_in(f, 0, 40)), P = fz_edge(f, fz_in(f, 1, 24));
    const int64_t V = fz_edge(f, fz_in(f, 1, 24));
    const mla_dtype c_dt = fz_pick_dtype(f, float_dtypes, 3), w_dt = fz_pick_dtype(f, float_dtypes, 3);
    const mla_dtype o_dt = fz_pick_dtype(f, float_dtypes, 3);
    const int64_t c_stride = fz_edge(f, fz_pad(L, fz_in(f, 0, 3)));
    const bool interleaved = fz_bit(f), packed = fz_bit(f);
    const int threads = fz_threads(f);
    int64_t k_ts, k_hs, v_ts, v_hs;
    fz_view_strides(f, S, H, interleaved ? fz_add(P, V) : P, &k_ts, &k_hs);
    if (interleaved)
        v_ts = k_ts, v_hs = k_hs;
    else
        fz_view_strides(f, S, H, V, &v_ts, &v_hs);
    const bool no_args = f->hostile && fz_null(f), no_c = fz_null(f), no_w = fz_null(f);
    const bool no_k = fz_null(f), no_v = fz_null(f);
    const uint8_t alias = f->hostile ? fz_u8(f) : 255; /* < 8: v on k_nope; < 16: k_nope on kv_c */

    const int64_t N = fz_mul(fz_add(P, V), H);
    fz_expect shape = fz_unless(no_args || S < 0 || H < 1 || L < 0 || P < 1 || V < 1 ||
                                    !is_float(c_dt) || !is_float(w_dt) || !is_float(o_dt) || N < 0 ||
                                    fz_bytes(fz_mul(N, L), w_dt) < 0,
                                FZ_OK);
    fz_expect e = shape;
    if (e != FZ_REJECT && (S > 10 || H > 3 || L > 40 || P > 24 || V > 24))
        return;
    const int64_t c_el = S > 0 ? fz_add(fz_mul(S - 1, c_stride), L) : 0;
    const int64_t k_el = fz_view_elems(S, H, interleaved ? fz_add(P, V) : P, k_ts, k_hs);
    const int64_t v_el = interleaved ? 0 : fz_view_elems(S, H, V, v_ts, v_hs);
    if (e != FZ_REJECT) {
        e = fz_unless(c_stride < L || c_el < 0 || fz_bytes(c_el, c_dt) < 0, e);
        e = fz_unless(k_el < 0 || v_el < 0 || fz_bytes(k_el, o_dt) < 0 || fz_bytes(v_el, o_dt) < 0, e);
        e = fz_unless(S > 0 && ((no_c && L > 0) || no_k || no_v), e);
        e = fz_unless(!packed && no_w && N > 0 && L > 0, e);
        e = fz_and(e, fz_rows_verdict(S, H, interleaved ? P + V : P, k_ts, k_hs));
        if (!interleaved)
            e = fz_and(e, fz_rows_verdict(S, H, V, v_ts, v_hs));
    }
    const bool real = e != FZ_REJECT;
    const int64_t oe = size_of(o_dt);
    if (real && (!fz_fits(fz_mul(k_el, oe)) || !fz_fits(fz_mul(v_el, oe)) ||
                 !fz_fits(fz_mul(c_el, size_of(c_dt)))))
        return;
    fz_debug("up_proj: S %lld H %lld L %lld P %lld V %lld, kv_c %s stride %lld, w %s, out %s%s%s",
             (long long)S, (long long)H, (long long)L, (long long)P, (long long)V,
             mla_dtype_name(c_dt), (long long)c_stride, mla_dtype_name(w_dt), mla_dtype_name(o_dt),
             interleaved ? ", k_nope and v interleaved" : "", packed ? ", packed ahead" : "");
    fz_buf *c = fz_alloc("kv_c", (size_t)(real ? c_el * size_of(c_dt) : 16), fz_u8(f), false);
    /* the weight is read by the packing, which needs only a valid shape */
    const int64_t w_bytes = shape != FZ_REJECT ? fz_bytes(fz_mul(N, L), w_dt) : 16;
    if (!fz_fits(w_bytes))
        return; /* a valid packing of a weight too large to give it */
    fz_buf *w = fz_alloc("kv_b_proj", (size_t)w_bytes, fz_u8(f), false);
    fz_buf *kb = fz_alloc("k_nope", (size_t)(real ? k_el * oe : 16), fz_u8(f), true);
    fz_buf *vb = fz_alloc("v", (size_t)(real ? v_el * oe : 16), fz_u8(f), true);
    if (!c || !w || !kb || !vb)
        return;
    fill(f, c, c_dt);
    fill(f, w, w_dt);
    /* interleaved: v's columns follow k_nope's in one buffer (a stand-in
     * buffer when the call is refused, where P may be anything) */
    void *k_p = no_k ? NULL : kb->p;
    void *v_p = no_v ? NULL : interleaved ? kb->p + (real ? P * oe : 0) : vb->p;
    const void *c_p = no_c ? NULL : c->p;
    if (alias < 8 && real && S > 0 && k_p && v_p) { /* v's rows on k_nope's */
        v_p = k_p;
        e = FZ_REJECT;
    } else if (alias >= 8 && alias < 16 && real && S > 0 && L > 0 && k_p && c_p) {
        k_p = (void *)c_p; /* k_nope on kv_c */
        e = FZ_REJECT;
    }
    mla_up_proj_args a = {
        .num_tokens = S, .num_heads = H, .kv_lora_rank = L, .qk_nope_dim = P, .v_head_dim = V,
        .kv_c = c_p, .kv_c_dtype = c_dt, .kv_c_stride = c_stride,
        .kv_b_proj = no_w ? NULL : w->p, .w_dtype = w_dt, .out_dtype = o_dt, .k_nope = k_p,
        .k_nope_token_stride = k_ts, .k_nope_head_stride = k_hs, .v = v_p,
        .v_token_stride = v_ts, .v_head_stride = v_hs};
    const mla_config cfg = {.q_dtype = c_dt, .cache_dtype = w_dt,
                            .kv_lora_rank = L > 0 ? fz_pad(L, L % 2) : 2, .num_heads = H,
                            .block_size = 1};
    const bool cfg_ok = shape != FZ_REJECT;
    const char *backend = fz_backend_for(f, MLA_OP_PREFILL, cfg_ok ? &cfg : NULL);
    /* a forced backend that refuses the config fails the packing and the
     * call; the workspace query reads shapes only and still answers */
    const bool refused = cfg_ok && !fz_backend_takes(backend, MLA_OP_PREFILL, &cfg);
    if (refused)
        e = FZ_REJECT;
    const fz_expect planned = fz_unless(refused, shape);

    /* the weight packed first, when the input says so: its size, the
     * packing (NULL or short: refused), then the call reads it */
    fz_buf *pk = NULL;
    if (packed) {
        fz_buf *bytes_buf = fz_alloc("pack bytes", 8, 0, true);
        const bool no_bytes = fz_null(f);
        if (planned != FZ_REJECT && !no_bytes)
            fz_allow(bytes_buf, 0, 8);
        fz_before();
        mla_status st = mla_pack_kv_b_proj_size(no_args ? NULL : &a,
                                                no_bytes ? NULL : (int64_t *)bytes_buf->p);
        if (!fz_after("mla_pack_kv_b_proj_size", st, fz_unless(no_bytes, planned), NULL))
            return;
        int64_t pack_bytes;
        memcpy(&pack_bytes, bytes_buf->p, 8);
        if (!fz_fits(pack_bytes))
            return;
        const uint8_t short_by = f->hostile ? fz_u8(f) : 255;
        const int64_t given = short_by < 16 ? pack_bytes - 1 - short_by % 3 : pack_bytes;
        pk = fz_alloc("packed", (size_t)(given > 0 ? given : 0), fz_u8(f), true);
        if (!pk)
            return;
        const bool no_pk = fz_null(f);
        fz_expect pe = fz_unless(no_pk || given < pack_bytes || (N > 0 && L > 0 && no_w), planned);
        if (pe != FZ_REJECT)
            fz_allow(pk, 0, pk->bytes);
        fz_before();
        st = mla_pack_kv_b_proj(&a, no_pk ? NULL : pk->p, given, threads);
        if (!fz_after("mla_pack_kv_b_proj", st, pe, backend))
            return;
        memset(pk->allowed, 0, pk->total); /* an input from now on */
        pk->output = false;
        a.kv_b_proj_packed = pk->p;
        if (f->hostile && fz_u8(f) < 16) { /* a spoiled header or another shape */
            if (fz_bit(f)) {
                pk->p[fz_in(f, 0, 63)] ^= (unsigned char)(1 + fz_u8(f) % 255);
            } else {
                a.num_heads = fz_edge(f, H + 1);
            }
            /* another shape is refused; a spoiled byte may be one the check
             * does not read; either way a call refused already stays so */
            e = fz_and(e, a.num_heads == H ? FZ_EITHER : FZ_REJECT);
        }
        if (fz_bit(f))
            a.kv_b_proj = NULL; /* read from the packing instead */
    }

    fz_buf *bytes_buf = fz_alloc("bytes", 8, 0, true);
    const bool no_bytes = fz_null(f);
    if (shape != FZ_REJECT && !no_bytes)
        fz_allow(bytes_buf, 0, 8);
    fz_before();
    mla_status st = mla_up_proj_workspace_size(no_args ? NULL : &a, threads,
                                               no_bytes ? NULL : (int64_t *)bytes_buf->p);
    const bool sized = fz_after("mla_up_proj_workspace_size", st,
                                a.num_heads != H ? FZ_EITHER : fz_unless(no_bytes, shape), NULL);
    int64_t need = 0;
    if (sized)
        memcpy(&need, bytes_buf->p, 8);
    if ((sized && (need < 0 || !fz_fits(need))) || (!sized && e == FZ_OK))
        return;
    fz_workspace ws;
    if (!fz_call_workspace(f, sized, need, &e, &ws))
        return;
    if (e != FZ_REJECT) {
        if (interleaved) {
            fz_allow_view(kb, S, H, P + V, k_ts, k_hs, oe);
        } else {
            fz_allow_view(kb, S, H, P, k_ts, k_hs, oe);
            fz_allow_view(vb, S, H, V, v_ts, v_hs, oe);
        }
    }
    fz_before();
    st = mla_up_proj(no_args ? NULL : &a, ws.null ? NULL : ws.buf->p, ws.given, threads);
    if (!fz_after("mla_up_proj", st, e, backend))
        return;
    /* sums in double, each against (L + 2) 2^-23 of sum |a w| and u of itself */
    const double u = o_dt == MLA_DTYPE_F32 ? 0x1p-24 : fz_unit(o_dt);
    for (int64_t s = 0; s < S; s++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t e2 = 0; e2 < P + V; e2++) {
                double want = 0.0, mag = 0.0;
                for (int64_t l = 0; l < L; l++) {
                    const double x = fz_load(c_dt, c->p, s * c_stride + l, 1.0f) *
                                     fz_load(w_dt, w->p, (h * (P + V) + e2) * L + l, 1.0f);
                    want += x;
                    mag += fabs(x);
                }
                const bool is_k = e2 < P;
                const int64_t at = is_k ? s * k_ts + h * k_hs + e2
                                        : interleaved ? s * k_ts + h * k_hs + e2
                                                      : s * v_ts + h * v_hs + e2 - P;
                const double got = fz_load(o_dt, is_k || interleaved ? kb->p : vb->p, at, 1.0f);
                const double tol = (double)(L + 2) * 0x1p-23 * mag + u * fabs(want) +
                                   fz_subnormal_error(o_dt);
                if (!fz_close(want, got, tol))
                    fz_fail("mla_up_proj (%s, kv_c %s, w %s, out %s, %s): token %lld head %lld "
                            "%s[%lld] = %.9g, want %.9g (tol %.3g)", backend, mla_dtype_name(c_dt),
                            mla_dtype_name(w_dt), mla_dtype_name(o_dt),
                            a.kv_b_proj_packed ? "packed" : "unpacked", (long long)s, (long long)h,
                            is_k ? "k_nope" : "v", (long long)(is_k ? e2 : e2 - P), got, want, tol);
            }
    if (!pk || a.num_heads != H)
        return;
    /* the packed weight gives the bits of the weight itself */
    void *first_k = fz_aligned_copy(kb), *first_v = fz_aligned_copy(vb);
    a.kv_b_proj = w->p;
    a.kv_b_proj_packed = NULL;
    fz_before();
    st = mla_up_proj(&a, ws.buf->p, ws.given, threads);
    fz_after("mla_up_proj (the weight itself)", st, FZ_EITHER, backend);
    if (st == MLA_OK && (memcmp(first_k, kb->p, kb->bytes) || memcmp(first_v, vb->p, vb->bytes)))
        fz_fail("mla_up_proj (%s): the packed weight gives other bits than the weight itself",
                backend);
}

/* ---- the prefill op ------------------------------------------------------------ */

#define PF_REQS 3

static void destroy_plan(void *plan)
{
    mla_chunk_plan_destroy(plan);
}

/* kv_b_proj values exact in f32, bf16 and f16 alike (8 significant bits
 * within f16's range), so both paths multiply the same weights. */
static void fill_exact_weights(fz *f, fz_buf *b, mla_dtype dt)
{
    if (!is_float(dt))
        return;
    for (size_t i = 0; i < b->bytes / (size_t)size_of(dt); i++)
        fz_store(dt, b->p, (int64_t)i,
                 (float)ldexp((double)((int64_t)(fz_random(f) % 255) - 127), -7 - (int)(fz_random(f) % 4)),
                 1.0f);
}

static void run_prefill(fz *f)
{
    const int64_t B = fz_edge(f, fz_in(f, 0, PF_REQS)), H = fz_edge(f, fz_in(f, 1, 2));
    const int64_t L = fz_edge(f, fz_in(f, 1, 24)), R = fz_edge(f, fz_in(f, 0, 8));
    const int64_t P = fz_edge(f, fz_in(f, 1, 12)), V = fz_edge(f, fz_in(f, 1, 12));
    const mla_dtype dt = fz_pick_dtype(f, float_dtypes, 3);
    const float scale = fz_float(f, -1.0f, 1.0f) /
                        (float)sqrt(P >= 1 && P <= 12 && R >= 0 && R <= 8 ? (double)(P + R) : 1.0);
    const mla_prefill_path path = (mla_prefill_path)fz_edge(f, fz_in(f, 0, 2));
    const int threads = fz_threads(f);
    const int64_t Bn = B >= 0 && B <= PF_REQS ? B : 0;
    const bool dims_ok = H >= 1 && H <= 2 && L >= 1 && L <= 24 && R >= 0 && R <= 8 && P >= 1 &&
                         P <= 12 && V >= 1 && V <= 12;
    fz_cache k;
    fz_cache_shape(f, &k, all_dtypes, 5, dims_ok ? L + R : fz_add(L, R) > 0 ? L + R : 1, 12, 8);
    const mla_kv_cache *kc = &k.c;
    const int64_t bs = k.ok ? kc->block_size : 1, blocks = k.ok ? kc->num_blocks : 0;
    /* requests: those with context first; context + new tokens held by
     * their block table rows */
    fz_buf *qsl_buf = fz_alloc("query_start_loc", (PF_REQS + 1) * 4, 0, false);
    fz_buf *ctx_buf = fz_alloc("context_lens", PF_REQS * 4, 0, false);
    int32_t *qsl = (int32_t *)qsl_buf->p, *ctx = (int32_t *)ctx_buf->p;
    const int64_t with_ctx = fz_in(f, 0, Bn);
    int64_t news[PF_REQS] = {0}, cols = 0;
    for (int64_t r = 0; r < Bn; r++) {
        ctx[r] = (int32_t)(r < with_ctx && blocks > 0 ? fz_in(f, 1, 24) : 0);
        news[r] = blocks > 0 ? fz_in(f, 0, 6) : 0;
        if (ceil_div(ctx[r] + news[r], bs) > 12) /* at most 12 blocks; 12 bs - 6 >= 6 */
            ctx[r] = (int32_t)(12 * bs - news[r]);
        ctx[r] = (int32_t)fz_edge(f, ctx[r]);
        cols = cols > ceil_div(ctx[r] > 0 ? ctx[r] + news[r] : news[r], bs)
                   ? cols
                   : ceil_div(ctx[r] > 0 ? ctx[r] + news[r] : news[r], bs);
    }
    offsets(f, qsl, news, Bn);
    const int64_t T = fz_edge(f, qsl[Bn] >= 0 ? qsl[Bn] : 0);
    const int64_t table_cols = fz_edge(f, cols + fz_in(f, 0, 1));
    const int64_t tc = table_cols >= 0 && table_cols <= 16 ? table_cols : 0;
    fz_buf *table_buf = fz_alloc("block_table", (size_t)(Bn * tc + 1) * 4, 0, false);
    int32_t *table = (int32_t *)table_buf->p;
    for (int64_t i = 0; i < Bn * tc; i++)
        table[i] = (int32_t)fz_edge(f, fz_in(f, 0, 255) % (blocks > 0 ? blocks : 1));

    /* the model: shapes and the batch (mla.h, mla_prefill_args) */
    const bool no_args = f->hostile && fz_null(f), no_qsl = fz_null(f), no_ctx = fz_null(f);
    const bool no_cache = fz_null(f), no_table = fz_null(f);
    fz_expect e = fz_unless(no_args || B < 0 || T < 0 || H < 1 || L < 1 || R < 0 || P < 1 || V < 1,
                            FZ_OK);
    if (e != FZ_REJECT)
        e = fz_unless(P > 256 - R || V > 256 ||
                          fz_bytes(fz_mul(fz_mul(H, fz_add(P, V)), L), MLA_DTYPE_F32) < 0 ||
                          !is_float(dt) || path < MLA_PREFILL_PATH_AUTO ||
                          path > MLA_PREFILL_PATH_ABSORBED || !isfinite(scale),
                      e);
    const fz_expect shape = e;
    if (e != FZ_REJECT && (!dims_ok || B > PF_REQS || T > 24 || table_cols > 16))
        return;
    e = fz_unless(no_qsl || (B > 0 && no_ctx), e);
    if (e != FZ_REJECT) {
        e = fz_unless(qsl[0] != 0 || qsl[B] != T, e);
        for (int64_t r = 0; r < B && e != FZ_REJECT; r++)
            e = fz_unless(qsl[r + 1] < qsl[r] || ctx[r] < 0 ||
                              (int64_t)ctx[r] + qsl[r + 1] - qsl[r] > INT32_MAX ||
                              (r > 0 && ctx[r] > 0 && ctx[r - 1] == 0),
                          e);
    }
    e = fz_unless(!k.ok || no_cache, e);
    if (e != FZ_REJECT)
        e = fz_unless(kc->width != fz_add(L, R), e);
    const int64_t cells = fz_mul(B, table_cols);
    e = fz_unless(table_cols < 0 || cells < 0 || (cells > 0 && no_table), e);
    int64_t touched = 0;
    for (int64_t r = 0; r < B && e != FZ_REJECT; r++) {
        const int64_t len = (int64_t)ctx[r] + qsl[r + 1] - qsl[r];
        e = fz_unless(ceil_div(len, kc->block_size) > table_cols, e);
        for (int64_t j = 0; j < ceil_div(len, kc->block_size) && e != FZ_REJECT; j++)
            e = fz_unless(table[r * table_cols + j] < 0 || table[r * table_cols + j] >= kc->num_blocks,
                          e);
        for (int64_t j = 0; j < len && e != FZ_REJECT; j++)
            touched = fz_add(fz_cache_row(&k, table[r * table_cols + j / kc->block_size],
                                          j % kc->block_size), kc->width) > touched
                          ? fz_add(fz_cache_row(&k, table[r * table_cols + j / kc->block_size],
                                                j % kc->block_size), kc->width)
                          : touched;
    }
    const bool batch_ok = e != FZ_REJECT;
    if (!fz_cache_alloc(f, &k, touched, false))
        return;
    e = fz_unless(!k.ok, e);

    /* the paths the requests take (mla_prefill_choose_path reads shapes,
     * query_start_loc and context_lens only), and what each needs */
    const mla_prefill_args shapes = {.num_prefills = B, .num_tokens = T, .num_heads = H,
                                     .kv_lora_rank = L, .rope_dim = R, .qk_nope_dim = P,
                                     .v_head_dim = V, .dtype = dt, .query_start_loc = qsl,
                                     .context_lens = ctx, .path = path};
    bool mha = false, absorbed = false, mha_ctx = false;
    int64_t n_ctx = 0;
    for (int64_t r = 0; batch_ok && shape != FZ_REJECT && r < B; r++) {
        const mla_prefill_path p = mla_prefill_choose_path(&shapes, r);
        if (path != MLA_PREFILL_PATH_AUTO && p != path)
            fz_fail("mla_prefill_choose_path: path %d forced, %d chosen", (int)path, (int)p);
        n_ctx += ctx[r] > 0;
        if (qsl[r + 1] == qsl[r])
            continue;
        mha |= p == MLA_PREFILL_PATH_MHA;
        absorbed |= p == MLA_PREFILL_PATH_ABSORBED;
        mha_ctx |= p == MLA_PREFILL_PATH_MHA && ctx[r] > 0;
    }

    /* the buffers: q, kv_c and k_pe (the new tokens' cache rows), out */
    const int64_t el = size_of(dt), Tn = batch_ok ? T : 0;
    int64_t q_ts, q_hs;
    /* the harness's own arithmetic on dims that are small, or stand-ins */
    const int64_t Hc = dims_ok ? H : 1, Lc = dims_ok ? L : 1, Rc = dims_ok ? R : 0;
    const int64_t Pc = dims_ok ? P : 1, Vc = dims_ok ? V : 1;
    fz_view_strides(f, Tn, Hc, Pc + Rc, &q_ts, &q_hs);
    const int64_t c_stride = fz_edge(f, Lc + fz_in(f, 0, 2)), pe_stride = fz_edge(f, Rc + fz_in(f, 0, 2));
    const int64_t o_stride = fz_edge(f, Hc * Vc + fz_in(f, 0, 3));
    const int64_t q_el = fz_view_elems(Tn, Hc, Pc + Rc, q_ts, q_hs);
    const int64_t c_el = Tn > 0 ? fz_add(fz_mul(Tn - 1, c_stride), Lc) : 0;
    const int64_t pe_el = Tn > 0 && Rc > 0 ? fz_add(fz_mul(Tn - 1, pe_stride), Rc) : 0;
    const int64_t o_el = Tn > 0 ? fz_add(fz_mul(Tn - 1, o_stride), Hc * Vc) : 0;
    /* a negative stride or a span past int64_t fails (the views' own
     * rules); kv_c and k_pe are checked only where the MHA path reads them */
    const bool qo_ok = q_el >= 0 && o_el >= 0 && fz_bytes(q_el, dt) >= 0 && fz_bytes(o_el, dt) >= 0;
    const bool cp_ok = c_el >= 0 && pe_el >= 0 && fz_bytes(c_el, dt) >= 0 && fz_bytes(pe_el, dt) >= 0;
    if (e != FZ_REJECT)
        e = fz_unless(!qo_ok || (mha && !cp_ok), e);
    const bool real = e != FZ_REJECT;
    if (real && (!fz_fits(fz_mul(q_el, el)) || !fz_fits(fz_mul(o_el, el)) ||
                 (cp_ok && (!fz_fits(fz_mul(c_el, el)) || !fz_fits(fz_mul(pe_el, el))))))
        return;
    const bool real_cp = real && cp_ok;
    fz_buf *q = fz_alloc("q", (size_t)(real ? q_el * el : 16), fz_u8(f), false);
    fz_buf *c = fz_alloc("kv_c", (size_t)(real_cp ? c_el * el : 16), fz_u8(f), false);
    fz_buf *pe = fz_alloc("k_pe", (size_t)(real_cp ? pe_el * el : 16), fz_u8(f), false);
    fz_buf *out = fz_alloc("out", (size_t)(real ? o_el * el : 16), fz_u8(f), true);
    if (!q || !c || !pe || !out)
        return;
    fill(f, q, dt);
    for (int64_t r = 0; real_cp && r < B; r++) /* each new token's row, read back from the cache */
        for (int64_t i = 0; i < qsl[r + 1] - qsl[r]; i++) {
            const int64_t t = qsl[r] + i, pos = ctx[r] + i;
            const int64_t row = fz_cache_row(&k, table[r * table_cols + pos / kc->block_size],
                                             pos % kc->block_size);
            for (int64_t d = 0; d < L + R; d++) {
                const float x = fz_load(kc->dtype, k.buf->p, row + d, kc->scale);
                if (d < L)
                    fz_store(dt, c->p, t * c_stride + d, x, 1.0f);
                else
                    fz_store(dt, pe->p, t * pe_stride + d - L, x, 1.0f);
            }
        }
    /* weights: kv_b_proj (and packed, now and then), W_UK_T and W_UV */
    const mla_dtype kvb_dt = fz_pick_dtype(f, float_dtypes, 3), w_dt = fz_pick_dtype(f, float_dtypes, 2);
    const int64_t N = dims_ok ? H * (P + V) : 0;
    fz_buf *kvb = fz_alloc("kv_b_proj", (size_t)(N * L * size_of(kvb_dt)), fz_u8(f), false);
    fz_buf *uk = fz_alloc("w_uk_t", (size_t)(dims_ok ? H * P * L * size_of(w_dt) : 0), fz_u8(f), true);
    fz_buf *uv = fz_alloc("w_uv", (size_t)(dims_ok ? H * L * V * size_of(w_dt) : 0), fz_u8(f), true);
    if (!kvb || !uk || !uv)
        return;
    fill_exact_weights(f, kvb, kvb_dt);
    if (dims_ok && is_float(kvb_dt) && is_float(w_dt)) {
        if (mla_prepare_weights(kvb->p, kvb_dt, H, L, P, V, uk->p, uv->p, w_dt, 1) != MLA_OK)
            fz_fail("mla_prepare_weights: %s", mla_last_error());
    }
    uk->output = uv->output = false; /* inputs of the call from now on */
    const bool use_packed = fz_bit(f), no_kvb = fz_null(f), no_uk = fz_null(f), no_uv = fz_null(f);
    const bool no_q = fz_null(f), no_c = fz_null(f), no_pe = fz_null(f), no_out = fz_null(f);

    mla_prefill_args a = {
        .num_prefills = B, .num_tokens = T, .num_heads = H, .kv_lora_rank = L, .rope_dim = R,
        .qk_nope_dim = P, .v_head_dim = V, .scale = scale, .dtype = dt,
        .query_start_loc = no_qsl ? NULL : qsl, .context_lens = no_ctx ? NULL : ctx,
        .cache = no_cache ? NULL : kc, .block_table = no_table ? NULL : table,
        .block_table_cols = table_cols, .q = no_q ? NULL : q->p, .q_token_stride = q_ts,
        .q_head_stride = q_hs, .kv_c = no_c ? NULL : c->p, .kv_c_stride = c_stride,
        .k_pe = no_pe ? NULL : pe->p, .k_pe_stride = pe_stride,
        .kv_b_proj = no_kvb ? NULL : kvb->p, .kv_b_proj_dtype = kvb_dt,
        .w_uk_t = no_uk ? NULL : uk->p, .w_uv = no_uv ? NULL : uv->p, .w_dtype = w_dt,
        .out = no_out ? NULL : out->p, .out_token_stride = o_stride, .path = path};

    /* backends: prefill for the MHA steps, decode for the absorbed one */
    const mla_config cfg_up = {.q_dtype = dt, .cache_dtype = is_float(kvb_dt) ? kvb_dt : dt,
                               .kv_lora_rank = Lc + Lc % 2, .num_heads = H, .block_size = 1};
    const mla_config cfg_fa = {.q_dtype = dt, .cache_dtype = dt, .kv_lora_rank = P, .rope_dim = R,
                               .num_heads = H, .block_size = 1};
    const mla_config cfg_dec = {.q_dtype = dt, .cache_dtype = k.ok ? kc->dtype : dt,
                                .kv_lora_rank = L, .rope_dim = R, .num_heads = H,
                                .block_size = k.ok ? kc->block_size : 1};
    const bool cfg_ok = shape != FZ_REJECT && k.ok;
    const mla_config *const mha_cfgs[] = {&cfg_fa, &cfg_up};
    const char *pre = fz_backend_for_all(f, MLA_OP_PREFILL, mha_cfgs,
                                         cfg_ok ? (is_float(kvb_dt) ? 2 : 1) : 0);
    const char *dec = fz_backend_for(f, MLA_OP_DECODE, cfg_ok ? &cfg_dec : NULL);
    fz_backend(f, MLA_OP_CONVERT);
    /* the plan, for this batch and a workspace of L + R in dt (hostile:
     * none, or one of another width or dtype); or a lean plan with the
     * caller's context_workspace (hostile: over q) */
    mla_chunk_plan *plan = NULL;
    const uint8_t plan_mode = f->hostile ? fz_u8(f) % 8 : 7, rows_mode = fz_u8(f) % 4;
    const bool caller_rows = rows_mode >= 2, rows_over_q = rows_mode == 3 && f->hostile;
    fz_buf *rows = NULL;
    if (batch_ok && n_ctx > 0 && plan_mode > 0) {
        const int64_t W = fz_mul(fz_mul(n_ctx, bs), 1 + fz_in(f, 0, 3));
        if (W < 0 || W > 4096)
            return; /* an edge block size: a plan too large to make */
        const int64_t width = plan_mode == 1 ? L + R + 1 : L + R;
        const mla_dtype pdt = plan_mode == 2 ? (dt == MLA_DTYPE_F32 ? MLA_DTYPE_BF16 : MLA_DTYPE_F32) : dt;
        if ((caller_rows ? mla_chunk_plan_create_lean(ctx, qsl, B, W, bs, 0, dt, &plan)
                         : mla_chunk_plan_create(ctx, qsl, B, W, bs, width, pdt, &plan)) != MLA_OK)
            fz_fail("mla_chunk_plan_create%s: %s", caller_rows ? "_lean" : "", mla_last_error());
        fz_at_end(destroy_plan, plan);
        if (caller_rows && dims_ok && !(rows = fz_alloc("context_workspace",
                                                         (size_t)(W * (L + R) * el), fz_u8(f), true)))
            return;
    }
    a.plan = plan;
    if (rows)
        a.context_workspace = rows_over_q ? q->p : rows->p;
    if (use_packed && dims_ok && is_float(kvb_dt) && is_float(dt) && fz_backend_takes(pre, MLA_OP_PREFILL, &cfg_up)) {
        mla_up_proj_args u = {.num_heads = H, .kv_lora_rank = L, .qk_nope_dim = P, .v_head_dim = V,
                              .kv_b_proj = kvb->p, .w_dtype = kvb_dt, .kv_c_dtype = dt,
                              .out_dtype = dt};
        int64_t bytes;
        if (mla_pack_kv_b_proj_size(&u, &bytes) != MLA_OK || !fz_fits(bytes))
            fz_fail("mla_pack_kv_b_proj_size: %s", mla_last_error());
        void *packed = fz_scratch((size_t)bytes);
        if (mla_pack_kv_b_proj(&u, packed, bytes, 1) != MLA_OK)
            fz_fail("mla_pack_kv_b_proj: %s", mla_last_error());
        a.kv_b_proj_packed = packed;
    }
    if (e != FZ_REJECT) {
        e = fz_unless(Tn > 0 && (no_q || no_out) && (mha || absorbed), e);
        e = fz_unless(o_stride < H * V, e);
        if (mha) {
            e = fz_unless(!a.kv_b_proj && !a.kv_b_proj_packed, e);
            e = fz_unless(!is_float(kvb_dt) || c_stride < L || pe_stride < (R > 0 ? R : 0), e);
            e = fz_unless(Tn > 0 && (no_c || (R > 0 && no_pe)), e);
            e = fz_unless(!fz_backend_takes(pre, MLA_OP_PREFILL, &cfg_up) ||
                              !fz_backend_takes(pre, MLA_OP_PREFILL, &cfg_fa),
                          e);
        }
        if (mha_ctx)
            e = fz_unless(caller_rows ? plan_mode == 0 || !rows || (rows_over_q && !no_q)
                                      : plan_mode < 3,
                          e);
        if (absorbed) {
            e = fz_unless(no_uk || no_uv || (w_dt != MLA_DTYPE_F32 && w_dt != MLA_DTYPE_BF16), e);
            e = fz_unless(!fz_backend_takes(dec, MLA_OP_DECODE, &cfg_dec), e);
        }
    }
    if (e == FZ_REJECT && !f->hostile)
        fz_fail("harness: a clean prefill is invalid");

    fz_buf *bytes_buf = fz_alloc("bytes", 8, 0, true);
    const bool no_bytes = fz_null(f);
    if (shape != FZ_REJECT && !no_bytes)
        fz_allow(bytes_buf, 0, 8);
    fz_before();
    mla_status st = mla_prefill_workspace_size(no_args ? NULL : &a, threads,
                                               no_bytes ? NULL : (int64_t *)bytes_buf->p);
    const bool sized = fz_after("mla_prefill_workspace_size", st, fz_unless(no_bytes, shape), NULL);
    int64_t need = 0;
    if (sized)
        memcpy(&need, bytes_buf->p, 8);
    if ((sized && (need < 0 || !fz_fits(need))) || (!sized && e != FZ_REJECT))
        return;
    fz_workspace ws;
    if (!fz_call_workspace(f, sized, need, &e, &ws))
        return;
    if (e != FZ_REJECT)
        fz_allow_rows(out, 0, T, o_stride, H * V, el);
    if (e != FZ_REJECT && rows && !rows_over_q)
        fz_allow(rows, 0, rows->bytes);
    fz_before();
    st = mla_prefill(no_args ? NULL : &a, ws.null ? NULL : ws.buf->p, ws.given, threads);
    if (!fz_after("mla_prefill", st, e, absorbed ? dec : mha ? pre : NULL))
        return;

    /* request by request, the non-absorbed oracle over the weights as given */
    float *w_eff = fz_scratch(sizeof(float) * (size_t)(N * L + 1));
    for (int64_t i = 0; i < N * L; i++)
        w_eff[i] = fz_load(kvb_dt, kvb->p, i, 1.0f);
    void *q_copy = fz_aligned_copy(q), *cache_copy = fz_aligned_copy(k.buf);
    mla_kv_cache oc = *kc;
    oc.data = cache_copy;
    const double u = dt == MLA_DTYPE_F32 ? 0.0 : fz_unit(dt);
    const double rel = dt == MLA_DTYPE_F32 ? 2e-4 : 6 * u;
    for (int64_t r = 0; r < B; r++) {
        const int64_t n = qsl[r + 1] - qsl[r];
        const int32_t len = ctx[r] + (int32_t)n;
        if (n == 0)
            continue;
        mla_decode_forward_args fa = {
            .num_reqs = 1, .s_q = n, .num_heads = H, .kv_lora_rank = L, .rope_dim = R,
            .qk_nope_dim = P, .v_head_dim = V, .scale = scale, .dtype = dt,
            .q = (const char *)q_copy + qsl[r] * q_ts * el, .q_token_stride = q_ts,
            .q_head_stride = q_hs, .cache = &oc, .block_table = table + r * table_cols,
            .block_table_cols = table_cols, .seq_lens = &len};
        double *want = fz_scratch(sizeof(double) * (size_t)(n * H * V));
        double *want_lse = fz_scratch(sizeof(double) * (size_t)(n * H));
        double *o_lat = fz_scratch(sizeof(double) * (size_t)(n * H * L));
        oracle_decode_mha(&fa, w_eff, want, want_lse, o_lat);
        /* max over the request's keys, per head, of sum_l |c_l W_l| for v and
         * k_nope: what their roundings scale with (the cache rows rounded to
         * the compute dtype before the up-projection, whose sums may cancel) */
        for (int64_t h = 0; h < H; h++) {
            double max_v = 0.0, max_k = 0.0;
            for (int64_t j = 0; j < len; j++) {
                const int64_t row = fz_cache_row(&k, table[r * table_cols + j / kc->block_size],
                                                 j % kc->block_size);
                for (int64_t e2 = 0; e2 < P + V; e2++) {
                    double x = 0.0;
                    for (int64_t l = 0; l < L; l++)
                        x += fabs(fz_load(kc->dtype, cache_copy, row + l, kc->scale) *
                                  w_eff[(h * (P + V) + e2) * L + l]);
                    if (e2 < P)
                        max_k = maxd(max_k, fabs(x));
                    else
                        max_v = maxd(max_v, fabs(x));
                }
            }
            for (int64_t i = 0; i < n; i++) {
                const int64_t t = qsl[r] + i;
                double q1 = 0.0, qo2 = 0.0;
                for (int64_t p = 0; p < P; p++)
                    q1 += fabs(fz_load(dt, q_copy, t * q_ts + h * q_hs + p, 1.0f));
                for (int64_t l = 0; l < L; l++) {
                    double ql = 0.0;
                    for (int64_t p = 0; p < P; p++)
                        ql += fz_load(dt, q_copy, t * q_ts + h * q_hs + p, 1.0f) *
                              w_eff[(h * (P + V) + p) * L + l];
                    qo2 += ql * o_lat[(i * H + h) * L + l] * ql * o_lat[(i * H + h) * L + l];
                }
                const double shift = fabs((double)scale) * u * (q1 * max_k + 4.0 / sqrt(3.0) * sqrt(qo2));
                const double tol = (rel + 2.0 * shift) * max_v + fz_subnormal_error(dt);
                for (int64_t e2 = 0; e2 < V; e2++) {
                    const double got = fz_load(dt, out->p, t * o_stride + h * V + e2, 1.0f);
                    const double w = want[i * H * V + h * V + e2];
                    if (!fz_close(w, got, tol))
                        fz_fail("mla_prefill (%s / %s, %s, %s cache, path %d -> %s, B %lld H %lld L "
                                "%lld R %lld P %lld V %lld, scale %g): request %lld (context %d) "
                                "token %lld head %lld out[%lld] = %.9g, want %.9g (tol %.3g)", pre,
                                dec, mla_dtype_name(dt), mla_dtype_name(kc->dtype), (int)path,
                                mla_prefill_choose_path(&a, r) == MLA_PREFILL_PATH_MHA ? "mha"
                                                                                     : "absorbed",
                                (long long)B, (long long)H, (long long)L, (long long)R,
                                (long long)P, (long long)V, (double)scale, (long long)r, ctx[r],
                                (long long)i, (long long)h, (long long)e2, got, w, tol);
                }
            }
        }
    }
}

const fz_entry fz_entries[] = {
    {"flash", run_flash},
    {"merge", run_merge},
    {"up_proj", run_up_proj},
    {"prefill", run_prefill},
};
const int fz_entry_count = sizeof fz_entries / sizeof fz_entries[0];
