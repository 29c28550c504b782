/* The flash-attention suites' case builder and checks (flash_attn_cases.h
 * says what and how close). */
#include "flash_attn_cases.h"

#include "oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const layout_names[FA_LAYOUTS] = {"dense", "padded", "heads-outer"};

/* ---- tolerances and the accuracy seen ------------------------------------------- */

/* Largest |error| / max|v| per dtype and the largest lse error: printed, so
 * the margins are visible. */
static double fa_worst_out[MLA_DTYPE_COUNT], fa_worst_lse;

/* ---- layouts, values, junk -------------------------------------------------------- */

/* Strides of a [tokens, H, width] view laid out as l, and the elements its
 * buffer needs. */
static void layout_strides(fa_layout l, int64_t tokens, int64_t H, int64_t width, int64_t *ts,
                           int64_t *hs, int64_t *elems)
{
    switch (l) {
    case FA_DENSE:
        *hs = width;
        *ts = H * width;
        *elems = tokens * H * width;
        break;
    case FA_PADDED:
        *hs = width + 3;
        *ts = H * (width + 3) + 5;
        *elems = tokens * *ts;
        break;
    default:
        *ts = width + 2;
        *hs = tokens * (width + 2) + 1;
        *elems = H * *hs;
        break;
    }
}

/* n elements of junk: +-1000 alternating, or NaN. A kernel that reads a gap
 * into a result spoils it. */
static void fa_fill_junk(mla_dtype dtype, void *array, int64_t n, junk_kind kind)
{
    for (int64_t i = 0; i < n; i++)
        oracle_store(dtype, array, i, kind == JUNK_NAN ? NAN : (i & 1 ? -1000.0f : 1000.0f),
                     1.0f);
}

/* A buffer of `elems` elements (at least one), all junk. */
static void *junk_buffer(const fa_spec *s, int64_t elems, size_t *bytes)
{
    *bytes = (size_t)((elems + 1) * mla_dtype_size(s->dtype));
    void *p = case_alloc(*bytes);
    fa_fill_junk(s->dtype, p, elems + 1, s->junk);
    return p;
}

/* Random values into a view's elements (the gaps keep their junk). */
static void fill_view(const fa_spec *s, void *p, int64_t tokens, int64_t H, int64_t width,
                      int64_t ts, int64_t hs)
{
    for (int64_t t = 0; t < tokens; t++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t d = 0; d < width; d++)
                case_put_random(s->dtype, p, t * ts + h * hs + d);
}

/* A view's exact values, widened, into dense [tokens, H, width] floats at
 * `dense` (row stride dense_width, starting at column dense_col). */
static void widen_view(const fa_spec *s, const void *p, int64_t tokens, int64_t H, int64_t width,
                       int64_t ts, int64_t hs, float *dense, int64_t dense_width, int64_t dense_col)
{
    for (int64_t t = 0; t < tokens; t++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t d = 0; d < width; d++)
                dense[(t * H + h) * dense_width + dense_col + d] =
                    oracle_load(s->dtype, p, t * ts + h * hs + d, 1.0f);
}

int64_t fa_visible(bool causal, int64_t n_q, int64_t n_k, int64_t i)
{
    if (!causal)
        return n_k;
    int64_t n = n_k - n_q + i + 1;
    return n < 0 ? 0 : n > n_k ? n_k : n;
}

mla_config fa_config(const fa_spec *s)
{
    return (mla_config){.q_dtype = s->dtype, .cache_dtype = s->dtype,
                        .kv_lora_rank = s->qk_dim - s->rope_dim, .rope_dim = s->rope_dim,
                        .num_heads = s->H, .block_size = 1};
}

uint64_t fa_inputs_checksum(const fa_case *c)
{
    return oracle_checksum(c->q, c->q_bytes) ^ (oracle_checksum(c->k, c->k_bytes) * 3) ^
           (oracle_checksum(c->k_pe, c->kpe_bytes) * 5) ^ (oracle_checksum(c->v, c->v_bytes) * 7) ^
           (oracle_checksum(c->cu_q, sizeof(int32_t) * (size_t)(c->s.num_seqs + 1)) * 11) ^
           (oracle_checksum(c->cu_k, sizeof(int32_t) * (size_t)(c->s.num_seqs + 1)) * 13);
}

void fa_reset_outputs(fa_case *c)
{
    memset(c->out_buf, GUARD, c->out_bytes);
    memset(c->lse_buf, GUARD, c->lse_bytes);
}

/* ---- the oracle --------------------------------------------------------------------- */

/* The plain way, in double, from the widened inputs: qf [T, H, Dqk],
 * kf [S, H, Dqk] (k_pe already appended to every head), vf [S, H, Dv]. */
static void oracle_of(fa_case *c, const float *qf, const float *kf, const float *vf)
{
    const fa_spec *s = &c->s;
    const int64_t H = s->H, Dqk = s->qk_dim, Dv = s->v_dim, T = c->T;
    free(c->want_out);
    free(c->want_lse);
    free(c->max_v);
    c->want_out = calloc((size_t)(T * H * Dv + 1), sizeof(double));
    c->want_lse = malloc(sizeof(double) * (size_t)(H * T + 1));
    c->max_v = calloc((size_t)s->num_seqs + 1, sizeof(double));
    int64_t most = 1;
    for (int64_t b = 0; b < s->num_seqs; b++)
        most = s->k_lens[b] > most ? s->k_lens[b] : most;
    double *logit = malloc(sizeof(double) * (size_t)most);
    for (int64_t b = 0; b < s->num_seqs; b++) {
        const int64_t n_q = s->q_lens[b], n_k = s->k_lens[b], q0 = c->cu_q[b], k0 = c->cu_k[b];
        for (int64_t x = k0 * H * Dv; x < (k0 + n_k) * H * Dv; x++) /* finite values */
            c->max_v[b] = fabs(vf[x]) > c->max_v[b] && isfinite(vf[x]) ? fabs(vf[x]) : c->max_v[b];
        for (int64_t i = 0; i < n_q; i++) {
            const int64_t t = q0 + i, n = fa_visible(s->causal, n_q, n_k, i);
            for (int64_t h = 0; h < H; h++) {
                double *o = c->want_out + (t * H + h) * Dv;
                if (n == 0) {
                    c->want_lse[h * T + t] = -INFINITY;
                    continue;
                }
                const float *qr = qf + (t * H + h) * Dqk;
                double m = -INFINITY;
                bool empty = true;
                for (int64_t j = 0; j < n; j++) {
                    const float *kr = kf + ((k0 + j) * H + h) * Dqk;
                    double dot = 0.0;
                    for (int64_t d = 0; d < Dqk; d++)
                        dot += (double)qr[d] * (double)kr[d];
                    logit[j] = (double)s->scale * dot;
                    m = logit[j] > m ? logit[j] : m;
                    empty = empty && logit[j] == -INFINITY;
                }
                if (empty) { /* every logit -inf: no weight anywhere */
                    c->want_lse[h * T + t] = -INFINITY;
                    continue;
                }
                double sum = 0.0;
                for (int64_t j = 0; j < n; j++) {
                    double p = exp(logit[j] - m);
                    sum += p;
                    const float *vr = vf + ((k0 + j) * H + h) * Dv;
                    for (int64_t e = 0; e < Dv; e++)
                        o[e] += p * (double)vr[e];
                }
                for (int64_t e = 0; e < Dv; e++)
                    o[e] /= sum;
                c->want_lse[h * T + t] = m + log(sum);
            }
        }
    }
    free(logit);
}

void fa_oracle(fa_case *c)
{
    const fa_spec *s = &c->s;
    const mla_flash_attn_args *a = &c->args;
    const int64_t T = c->T, S = c->S, H = s->H, Dqk = s->qk_dim, Dv = s->v_dim, R = s->rope_dim;
    const int64_t nope = Dqk - R;
    float *qf = malloc(sizeof(float) * (size_t)(T * H * Dqk + 1));
    float *kf = malloc(sizeof(float) * (size_t)(S * H * Dqk + 1));
    float *vf = malloc(sizeof(float) * (size_t)(S * H * Dv + 1));
    widen_view(s, a->q, T, H, Dqk, a->q_token_stride, a->q_head_stride, qf, Dqk, 0);
    widen_view(s, a->k, S, H, nope, a->k_token_stride, a->k_head_stride, kf, Dqk, 0);
    for (int64_t h = 0; h < H && R > 0; h++) /* one k_pe row per key, in every head */
        widen_view(s, a->k_pe, S, 1, R, a->k_pe_token_stride, 0, kf + h * Dqk, H * Dqk, nope);
    widen_view(s, a->v, S, H, Dv, a->v_token_stride, a->v_head_stride, vf, Dv, 0);
    oracle_of(c, qf, kf, vf);
    free(qf);
    free(kf);
    free(vf);
}

/* ---- building a case ------------------------------------------------------------------ */

static void fa_label(fa_case *c)
{
    const fa_spec *s = &c->s;
    int used = snprintf(c->label, sizeof c->label,
                        "%s, H %lld, Dqk %lld (R %lld), Dv %lld, %s, scale %g, %s%s, %d threads, "
                        "lens (q/k)", mla_dtype_name(s->dtype), (long long)s->H,
                        (long long)s->qk_dim, (long long)s->rope_dim, (long long)s->v_dim,
                        s->causal ? "causal" : "not causal", (double)s->scale,
                        layout_names[s->layout], s->lse ? ", lse" : "", s->threads);
    for (int64_t b = 0; b < s->num_seqs && used < (int)sizeof c->label; b++)
        used += snprintf(c->label + used, sizeof c->label - (size_t)used, " %d/%d",
                         (int)s->q_lens[b], (int)s->k_lens[b]);
}

void fa_make(fa_case *c, const fa_spec *s, bool with_oracle)
{
    memset(c, 0, sizeof *c);
    c->s = *s;
    const int64_t B = s->num_seqs, H = s->H, Dqk = s->qk_dim, Dv = s->v_dim, R = s->rope_dim;
    const int64_t nope = Dqk - R, size = mla_dtype_size(s->dtype);
    assert_true(B <= FA_MAX_SEQS);
    c->cu_q = malloc(sizeof(int32_t) * (size_t)(B + 1));
    c->cu_k = malloc(sizeof(int32_t) * (size_t)(B + 1));
    c->cu_q[0] = c->cu_k[0] = 0;
    for (int64_t b = 0; b < B; b++) {
        c->cu_q[b + 1] = c->cu_q[b] + s->q_lens[b];
        c->cu_k[b + 1] = c->cu_k[b] + s->k_lens[b];
    }
    const int64_t T = c->T = c->cu_q[B], S = c->S = c->cu_k[B];
    mla_flash_attn_args *a = &c->args;
    *a = (mla_flash_attn_args){.num_seqs = B, .num_heads = H, .qk_dim = Dqk, .v_dim = Dv,
                               .rope_dim = R, .causal = s->causal, .scale = s->scale,
                               .dtype = s->dtype, .total_q = T, .total_k = S,
                               .cu_seqlens_q = c->cu_q, .cu_seqlens_k = c->cu_k};
    int64_t elems;
    layout_strides(s->layout, T, H, Dqk, &a->q_token_stride, &a->q_head_stride, &elems);
    c->q = junk_buffer(s, elems, &c->q_bytes);
    fill_view(s, c->q, T, H, Dqk, a->q_token_stride, a->q_head_stride);
    layout_strides(s->layout, S, H, nope, &a->k_token_stride, &a->k_head_stride, &elems);
    c->k = junk_buffer(s, elems, &c->k_bytes);
    fill_view(s, c->k, S, H, nope, a->k_token_stride, a->k_head_stride);
    a->k_pe_token_stride = R + (s->layout == FA_DENSE ? 0 : 3);
    c->k_pe = junk_buffer(s, S * a->k_pe_token_stride, &c->kpe_bytes);
    if (R > 0) { /* one row per key, shared by the heads */
        fill_view(s, c->k_pe, S, 1, R, a->k_pe_token_stride, 0);
        a->k_pe = c->k_pe;
    }
    layout_strides(s->layout, S, H, Dv, &a->v_token_stride, &a->v_head_stride, &elems);
    c->v = junk_buffer(s, elems, &c->v_bytes);
    fill_view(s, c->v, S, H, Dv, a->v_token_stride, a->v_head_stride);
    a->q = c->q;
    a->k = c->k;
    a->v = c->v;
    /* outputs inside guard bytes; padded layouts have guards between rows */
    layout_strides(s->layout, T, H, Dv, &a->out_token_stride, &a->out_head_stride, &elems);
    c->out_bytes = (size_t)(elems * size) + 2 * MARGIN;
    c->out_buf = case_alloc(c->out_bytes);
    a->out = c->out_buf + MARGIN;
    c->lse_bytes = (size_t)(H * T) * sizeof(float) + 2 * MARGIN;
    c->lse_buf = case_alloc(c->lse_bytes);
    a->lse = s->lse ? (float *)(c->lse_buf + MARGIN) : NULL;
    fa_reset_outputs(c);
    c->inputs_sum = fa_inputs_checksum(c);
    fa_label(c);
    if (with_oracle)
        fa_oracle(c);
}

void fa_free(fa_case *c)
{
    free(c->cu_q);
    free(c->cu_k);
    free(c->q);
    free(c->k);
    free(c->k_pe);
    free(c->v);
    free(c->out_buf);
    free(c->lse_buf);
    free(c->want_out);
    free(c->want_lse);
    free(c->max_v);
}

/* ---- running ----------------------------------------------------------------------------- */

mla_status fa_call(const mla_flash_attn_args *a, int threads, int64_t ws_misalign,
                   const char *what)
{
    int64_t bytes = -1;
    mla_status st = mla_flash_attn_varlen_workspace_size(a, threads, &bytes);
    if (st != MLA_OK)
        fail_msg("%s: mla_flash_attn_varlen_workspace_size: %s: %s", what, mla_status_str(st),
                 mla_last_error());
    assert_true(bytes >= 0);
    unsigned char *base = case_guarded_workspace(bytes);
    st = mla_flash_attn_varlen(a, base + MARGIN + ws_misalign, bytes, threads);
    case_free_guarded_workspace(base, bytes, ws_misalign, what);
    return st;
}

void fa_run(fa_case *c, const char *backend, int threads, int64_t ws_misalign)
{
    fa_reset_outputs(c);
    mla_status st = fa_call(&c->args, threads, ws_misalign, c->label);
    if (st != MLA_OK)
        fail_msg("%s: %s: mla_flash_attn_varlen: %s: %s", backend, c->label, mla_status_str(st),
                 mla_last_error());
}

void fa_check(const fa_case *c, const char *backend)
{
    const fa_spec *s = &c->s;
    const mla_flash_attn_args *a = &c->args;
    const int64_t H = s->H, Dv = s->v_dim, T = c->T, size = mla_dtype_size(s->dtype);
    unsigned char *mask = malloc(c->out_bytes);
    memcpy(mask, c->out_buf, c->out_bytes);
    for (int64_t b = 0; b < s->num_seqs; b++) {
        const int64_t n_q = s->q_lens[b], n_k = s->k_lens[b];
        for (int64_t i = 0; i < n_q; i++) {
            const int64_t t = c->cu_q[b] + i, n = fa_visible(s->causal, n_q, n_k, i);
            const double tol = case_out_tol(s->dtype, n) * c->max_v[b];
            for (int64_t h = 0; h < H; h++) {
                const int64_t at = t * a->out_token_stride + h * a->out_head_stride;
                double worst = 0.0;
                for (int64_t e = 0; e < Dv; e++) {
                    float got = oracle_load(s->dtype, a->out, at + e, 1.0f);
                    double want = c->want_out[(t * H + h) * Dv + e];
                    double err = isfinite(want) ? fabs((double)got - want) : 0.0;
                    if (n == 0 ? got != 0.0f : !case_close(want, got, tol))
                        fail_msg("%s: %s: request %lld (%lld queries, %lld keys) query %lld "
                                 "(sees %lld keys) head %lld: out[%lld] = %.9g, want %.9g "
                                 "(|err| %.3g > %.3g)", backend, c->label, (long long)b,
                                 (long long)n_q, (long long)n_k, (long long)i, (long long)n,
                                 (long long)h, (long long)e, got, want, err, n == 0 ? 0.0 : tol);
                    worst = err > worst ? err : worst;
                }
                if (n > 0 && c->max_v[b] > 0 && worst / c->max_v[b] > fa_worst_out[s->dtype])
                    fa_worst_out[s->dtype] = worst / c->max_v[b];
                memset(mask + MARGIN + at * size, GUARD, (size_t)(Dv * size));
                if (!a->lse)
                    continue;
                float got = a->lse[h * T + t];
                double want = c->want_lse[h * T + t];
                double err = isfinite(want) ? fabs((double)got - want) : 0.0;
                double lse_tol = LSE_TOL + (isfinite(want) ? LSE_REL_TOL * fabs(want) : 0.0);
                if (n == 0 ? !(isinf(got) && got < 0) : !case_close(want, got, lse_tol))
                    fail_msg("%s: %s: request %lld (%lld queries, %lld keys) query %lld (sees "
                             "%lld keys) head %lld: lse %.9g, want %.9g", backend, c->label,
                             (long long)b, (long long)n_q, (long long)n_k, (long long)i,
                             (long long)n, (long long)h, got, want);
                if (n > 0 && err > fa_worst_lse)
                    fa_worst_lse = err;
            }
        }
    }
    if (fa_inputs_checksum(c) != c->inputs_sum)
        fail_msg("%s: %s: an input changed", backend, c->label);
    char what[400];
    snprintf(what, sizeof what, "%s: %s: out buffer (%d-byte margins)", backend, c->label, MARGIN);
    case_expect_guards(mask, c->out_bytes, what);
    free(mask);
    snprintf(what, sizeof what, "%s: %s: lse buffer", backend, c->label);
    if (a->lse) {
        case_expect_guards(c->lse_buf, MARGIN, what);
        case_expect_guards(c->lse_buf + c->lse_bytes - MARGIN, MARGIN, what);
    } else {
        case_expect_guards(c->lse_buf, c->lse_bytes, what);
    }
}

void fa_run_on(fa_case *c, const mla_backend_desc *b, int threads)
{
    fa_run(c, b->name, threads, 0);
    support_expect_ran(b);
    fa_check(c, b->name);
}

typedef struct fa_everywhere {
    fa_case *c;
    int ran;
} fa_everywhere;

static void fa_run_one(const mla_backend_desc *b, void *ctx)
{
    fa_everywhere *e = ctx;
    if (strcmp(b->isa, "ref") == 0 && e->c->s.big && e->ran > 0)
        return;
    fa_run_on(e->c, b, e->c->s.threads);
    e->ran++;
}

int fa_run_everywhere(fa_case *c)
{
    fa_everywhere e = {.c = c};
    mla_config cfg = fa_config(&c->s);
    support_each_backend(MLA_OP_PREFILL, &cfg, fa_run_one, &e);
    return e.ran;
}

void fa_print_accuracy(void)
{
    print_message("[ ACCURACY ] flash attention, worst |out - oracle| / max|v|: f32 %.2e (tol >= "
                  "%.0e), bf16 %.2e (tol %.0e), f16 %.2e (tol %.0e); worst |lse - oracle| %.2e "
                  "(tol %.0e)\n", fa_worst_out[MLA_DTYPE_F32], case_out_tol(MLA_DTYPE_F32, 0),
                  fa_worst_out[MLA_DTYPE_BF16], case_out_tol(MLA_DTYPE_BF16, 0),
                  fa_worst_out[MLA_DTYPE_F16], case_out_tol(MLA_DTYPE_F16, 0), fa_worst_lse,
                  LSE_TOL);
}

int fa_unforce(void **state)
{
    (void)state;
    return mla_force_backend(MLA_OP_PREFILL, NULL) == MLA_OK ? 0 : -1;
}
