/*
 * libFuzzer target: absorbed decode (docs/semantics.md §1.3, §1.6, §5)
 * through the MLA_OP_DECODE backend (fuzz.h says what every call is checked
 * for).
 *
 *   decode   mla_decode_workspace_size, then mla_decode with a workspace of
 *            that size (or less, or none): out and lse against the
 *            double-precision latent oracle (tests/oracle.c)
 *   forward  mla_prepare_weights, mla_decode_forward_workspace_size and
 *            mla_decode_forward: out and lse against the non-absorbed oracle
 *   weights  mla_prepare_weights alone: W_UK_T and W_UV element by element
 *
 * Shapes stay small (B <= 4, s_q <= 3, H <= 4, L <= 40, R <= 12, a cache of
 * at most 8 blocks of 8), with any block table, schedule parameters, q and
 * out layouts, cache dtype and strides. Block table columns past what a
 * request occupies hold ids far out of range, which must never be read.
 *
 * Tolerances are tests/decode_cases.h's: out within tol(dtype) x max|V| of
 * the request (f32 1e-5 + 2e-7 sqrt(len), bf16 1e-2, f16 2e-3), lse within
 * 1e-4. Where the route rounds q or the keys to bf16 (amx-bf16 with f32 q
 * opted in, fp8 keys), every score may move by 2^-9 |scale| sum|q| max|K|
 * per rounded operand: the lse bound grows by that, and out's by twice it
 * (times max|V|), what a shift d of the logits can do to a softmax-weighted
 * mean. The forward's out: 1e-4 (f32) or 4u (16-bit) of the larger of
 * max|out| and the bound sum_l |W_UV[l][v]| max|V| on any output (its
 * roundings of o_lat and out are relative to that bound, not to the output,
 * which may cancel), plus twice the score shift of rounding ql_nope (4
 * standard deviations, decode_cases.c) and of any bf16 route, times it.
 */
#include "fuzz.h"

#include "oracle.h"

#include <math.h>
#include <string.h>

static const mla_dtype all_dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16,
                                       MLA_DTYPE_FP8_E4M3, MLA_DTYPE_FP8_E5M2};
static const mla_dtype float_dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16};

#define MAX_B 4
#define MAX_COLS 24

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

/* ---- the attention part: cache, requests, schedule ---------------------------- */

typedef struct attn_case {
    int64_t B, s_q, H, L, R, T; /* T = B s_q, -1 when it overflows */
    mla_dtype q_dt;
    float scale;
    fz_cache k;
    bool no_cache, no_lens, no_table;
    int32_t *lens, *table;
    int64_t cols;
    mla_decode_sched_params sched;
    bool has_sched, bf16_compute;
    int threads;
    int64_t touched; /* cache elements the call may read */
    fz_expect e;     /* the model's verdict on all of it */
    fz_expect shape; /* on what the workspace queries read */
    bool skip;       /* valid, but larger than the harness's arrays */
} attn_case;

static void make_attention(fz *f, attn_case *c, int64_t max_L)
{
    memset(c, 0, sizeof *c);
    c->B = fz_edge(f, fz_in(f, 0, MAX_B));
    c->s_q = fz_edge(f, fz_in(f, 1, 3));
    c->H = fz_edge(f, fz_in(f, 1, 4));
    c->L = fz_edge(f, fz_in(f, 1, max_L));
    c->R = fz_edge(f, fz_in(f, 0, 12));
    c->q_dt = fz_pick_dtype(f, float_dtypes, 3);
    c->scale = fz_float(f, -2.0f, 2.0f);
    c->bf16_compute = fz_bit(f);
    c->threads = fz_threads(f);
    const int64_t width = fz_add(c->L, c->R);
    fz_cache_shape(f, &c->k, all_dtypes, 5, width > 0 ? width : 1, 8, 8);
    const mla_kv_cache *kc = &c->k.c;
    const int64_t Bn = c->B >= 0 && c->B <= MAX_B ? c->B : 0;
    const int64_t bs = c->k.ok ? kc->block_size : 1, blocks = c->k.ok ? kc->num_blocks : 0;
    /* lengths the cache can hold, and a table of them */
    int32_t lens[MAX_B] = {0};
    int64_t need = 0;
    for (int64_t b = 0; b < Bn; b++) {
        int64_t len = blocks > 0 ? fz_in(f, 0, 20) : 0;
        if (ceil_div(len, bs) > MAX_COLS - 2)
            len = (MAX_COLS - 2) * bs;
        lens[b] = (int32_t)fz_edge(f, len);
        need = need > ceil_div(len, bs) ? need : ceil_div(len, bs);
    }
    c->cols = fz_edge(f, need + fz_in(f, 0, 2));
    const int64_t cols = c->cols >= 0 && c->cols <= MAX_COLS ? c->cols : 0;
    fz_buf *lens_buf = fz_alloc("seq_lens", MAX_B * 4, 0, false);
    fz_buf *table_buf = fz_alloc("block_table", (size_t)(Bn * cols + 1) * 4, 0, false);
    c->lens = (int32_t *)lens_buf->p;
    c->table = (int32_t *)table_buf->p;
    memcpy(c->lens, lens, sizeof lens);
    for (int64_t b = 0; b < Bn; b++)
        for (int64_t j = 0; j < cols; j++) /* unread columns: far out of range */
            c->table[b * cols + j] = (int32_t)(j < ceil_div(lens[b] > 0 ? lens[b] : 0, bs)
                                                   ? fz_edge(f, fz_in(f, 0, 255) % (blocks ? blocks : 1))
                                                   : 1000000 + (int32_t)j);
    c->has_sched = fz_bit(f);
    c->sched = (mla_decode_sched_params){
        .num_parts = fz_edge(f, fz_in(f, -1, 5)), .block_n = fz_edge(f, fz_in(f, -1, 20)),
        .overhead = fz_edge(f, fz_in(f, -1, 4)),
        .split_blocks = fz_edge(f, fz_u8(f) < 128 ? 0 : fz_in(f, 1, 3))};
    c->no_cache = fz_null(f);
    c->no_lens = fz_null(f);
    c->no_table = fz_null(f);

    /* the model: mla.h's rules for mla_decode_args */
    fz_expect e = fz_unless(c->B < 0 || c->s_q < 1 || c->H < 1 || c->L < 1 || c->R < 0, FZ_OK);
    e = fz_unless(!is_float(c->q_dt) || !isfinite(c->scale) || !c->k.ok || c->no_cache, e);
    if (e != FZ_REJECT)
        e = fz_unless(c->L > kc->width || c->R != kc->width - c->L, e);
    c->T = fz_mul(c->B, c->s_q);
    e = fz_unless(c->T < 0 || fz_mul(c->T, c->H) < 0 || fz_mul(c->s_q, c->H) < 0, e);
    /* what the workspace queries read (mla.h): the sizes, the q dtype, the
     * schedule, and the lengths in batch-invariant mode alone; past the
     * harness's sizes a query may find its workspace past int64 */
    const bool invariant = c->has_sched && c->sched.split_blocks > 0;
    fz_expect shape = fz_unless(c->B < 0 || c->s_q < 1 || c->H < 1 || c->L < 1 || c->R < 0 ||
                                    !is_float(c->q_dt) || c->T < 0 || fz_mul(c->T, c->H) < 0 ||
                                    fz_mul(c->s_q, c->H) < 0 || c->B > INT32_MAX,
                                FZ_OK);
    shape = fz_unless(c->has_sched && (c->sched.num_parts > (1 << 20) ||
                                       c->sched.overhead > INT32_MAX ||
                                       (c->sched.overhead < 0 &&
                                        c->sched.overhead != MLA_SCHED_NO_OVERHEAD)),
                      shape);
    shape = fz_unless(invariant && c->B > 0 && c->no_lens, shape);
    for (int64_t b = 0; b < Bn && invariant && !c->no_lens; b++)
        shape = fz_unless(c->lens[b] < 0, shape);
    if (shape != FZ_REJECT && (c->B > MAX_B || c->s_q > 3 || c->H > 4 || c->L > max_L || c->R > 12))
        shape = FZ_EITHER;
    c->shape = shape;
    e = fz_unless(c->B > 0 && c->no_lens, e);
    const int64_t cells = fz_mul(c->B, c->cols);
    e = fz_unless(c->cols < 0 || cells < 0 || (cells > 0 && c->no_table), e);
    c->skip = e != FZ_REJECT && (c->B > MAX_B || c->cols > MAX_COLS || c->s_q > 3 || c->H > 4 ||
                                 c->L > max_L || c->R > 12);
    if (c->skip)
        return;
    for (int64_t b = 0; b < Bn && e != FZ_REJECT; b++) {
        e = fz_unless(c->lens[b] < 0, e);
        if (e == FZ_REJECT)
            break;
        const int64_t used = ceil_div(c->lens[b], kc->block_size);
        e = fz_unless(used > c->cols, e);
        for (int64_t j = 0; j < used && e != FZ_REJECT; j++) {
            const int32_t id = c->table[b * c->cols + j];
            e = fz_unless(id < 0 || id >= kc->num_blocks, e);
        }
        for (int64_t j = 0; j < c->lens[b] && e != FZ_REJECT; j++) {
            const int64_t end = fz_add(fz_cache_row(&c->k, c->table[b * c->cols + j / kc->block_size],
                                                    j % kc->block_size),
                                       kc->width);
            c->touched = end > c->touched ? end : c->touched;
        }
    }
    /* the schedule the call builds (mla.h: mla_build_decode_sched's rules;
     * no params or zero fields: one part per thread, block_n 16, overhead 2) */
    e = fz_and(e, shape);
    c->e = e;
}

/* The config the op dispatches on. */
static mla_config config_of(const attn_case *c)
{
    return (mla_config){.q_dtype = c->q_dt, .cache_dtype = c->k.c.dtype, .kv_lora_rank = c->L,
                        .rope_dim = c->R, .num_heads = c->H, .block_size = c->k.c.block_size,
                        .bf16_compute = c->bf16_compute};
}

/* Which operands the backend's route rounds to bf16 (decode_cases.c). */
typedef struct rounding {
    bool q, keys;
} rounding;

static rounding rounding_of(const attn_case *c, const char *backend)
{
    const mla_config cfg = config_of(c);
    const char *route = mla_backend_route(backend, &cfg);
    if (!route || strcmp(route, "f32") == 0)
        return (rounding){false, false};
    return (rounding){c->q_dt == MLA_DTYPE_F32, c->k.c.dtype != MLA_DTYPE_BF16};
}

/* Query i of a request of len keys and s_q queries sees this many (§5.2). */
static int64_t visible(int64_t len, int64_t s_q, int64_t i)
{
    const int64_t n = len - s_q + i + 1;
    return n < 0 ? 0 : n > len ? len : n;
}

/* max|V| and max|K| of request b's rows (dequantized, finite values). */
static void request_max(const attn_case *c, const mla_kv_cache *cache, int64_t b, double *max_v,
                        double *max_k)
{
    *max_v = *max_k = 0.0;
    const mla_kv_cache *kc = cache;
    for (int64_t j = 0; j < c->lens[b]; j++) {
        const int64_t row = fz_cache_row(&c->k, c->table[b * c->cols + j / kc->block_size],
                                         j % kc->block_size);
        for (int64_t d = 0; d < kc->width; d++) {
            double x = fabs((double)fz_load(kc->dtype, kc->data, row + d, kc->scale));
            x = isfinite(x) ? x : 0.0;
            *max_k = x > *max_k ? x : *max_k;
            if (d < c->L)
                *max_v = x > *max_v ? x : *max_v;
        }
    }
}

/* ---- mla_decode ---------------------------------------------------------------- */

static void run_decode(fz *f)
{
    attn_case c;
    make_attention(f, &c, 40);
    if (c.skip)
        return;
    if (c.e == FZ_REJECT && !f->hostile)
        fz_fail("harness: a clean attention case is invalid");
    const int64_t T = c.T >= 0 && c.T <= MAX_B * 3 ? c.T : 0, H = c.H >= 1 && c.H <= 4 ? c.H : 1;
    const int64_t L = c.L >= 1 && c.L <= 40 ? c.L : 1, R = c.R >= 0 && c.R <= 12 ? c.R : 0;
    const bool concat = fz_bit(f); /* one q [T, H, L+R], q_pe = q + L */
    int64_t qn_ts, qn_hs, qp_ts, qp_hs, o_ts, o_hs;
    fz_view_strides(f, T, H, concat ? L + R : L, &qn_ts, &qn_hs);
    if (concat)
        qp_ts = qn_ts, qp_hs = qn_hs;
    else
        fz_view_strides(f, T, H, R, &qp_ts, &qp_hs);
    fz_view_strides(f, T, H, L, &o_ts, &o_hs);
    const bool with_lse = fz_bit(f), no_qn = fz_null(f), no_qp = fz_null(f) || (R == 0 && fz_bit(f));
    const bool no_out = fz_null(f), no_args = f->hostile && fz_null(f);
    const mla_dtype qd = c.q_dt;
    /* the views (mla.h: non-NULL when they have elements, strides >= 0, spans
     * within int64_t, out's rows apart) */
    const int64_t qn_el = fz_view_elems(c.T, c.H, concat ? fz_add(c.L, c.R) : c.L, qn_ts, qn_hs);
    const int64_t qp_el = concat ? 0 : fz_view_elems(c.T, c.H, c.R, qp_ts, qp_hs);
    const int64_t o_el = fz_view_elems(c.T, c.H, c.L, o_ts, o_hs);
    fz_expect e = c.e;
    if (e != FZ_REJECT) {
        e = fz_unless(qn_el < 0 || qp_el < 0 || o_el < 0 || fz_bytes(qn_el, qd) < 0 ||
                          fz_bytes(qp_el, qd) < 0 || fz_bytes(o_el, qd) < 0,
                      e);
        e = fz_unless(c.T > 0 && ((no_qn && c.L > 0) || (no_qp && c.R > 0) || no_out), e);
        e = fz_and(e, fz_rows_verdict(c.T, c.H, c.L, o_ts, o_hs));
    }
    e = fz_unless(no_args, e);
    const bool real = e != FZ_REJECT; /* buffers of the real sizes; else stand-ins */
    const int64_t qe = size_of(qd);
    if (real && (!fz_fits(fz_mul(qn_el, qe)) || !fz_fits(fz_mul(o_el, qe))))
        return;
    fz_buf *qn = fz_alloc("q_nope", (size_t)(real ? qn_el * qe : 16), fz_u8(f), false);
    fz_buf *qp = fz_alloc("q_pe", (size_t)(real ? qp_el * qe : 16), fz_u8(f), false);
    fz_buf *out = fz_alloc("out", (size_t)(real ? o_el * qe : 16), fz_u8(f), true);
    fz_buf *lse = fz_alloc("lse", (size_t)(real ? c.B * c.H * c.s_q : 4) * 4, 0, true);
    if (!qn || !qp || !out || !lse || !fz_cache_alloc(f, &c.k, c.touched, false))
        return;
    e = fz_unless(!c.k.ok, e);
    if (is_float(qd)) {
        for (size_t i = 0; i < qn->bytes / (size_t)qe; i++)
            fz_put_random(f, qd, qn->p, (int64_t)i, 1.0f);
        for (size_t i = 0; i < qp->bytes / (size_t)qe; i++)
            fz_put_random(f, qd, qp->p, (int64_t)i, 1.0f);
    }
    mla_decode_args a = {
        .num_reqs = c.B, .s_q = c.s_q, .num_heads = c.H, .kv_lora_rank = c.L, .rope_dim = c.R,
        .scale = c.scale, .q_dtype = qd, .q_nope = no_qn ? NULL : qn->p,
        .q_nope_token_stride = qn_ts, .q_nope_head_stride = qn_hs,
        .q_pe = no_qp ? NULL : concat ? qn->p + L * qe : qp->p,
        .q_pe_token_stride = qp_ts, .q_pe_head_stride = qp_hs,
        .cache = c.no_cache ? NULL : &c.k.c, .block_table = c.no_table ? NULL : c.table,
        .block_table_cols = c.cols, .seq_lens = c.no_lens ? NULL : c.lens,
        .out = no_out ? NULL : out->p, .out_token_stride = o_ts, .out_head_stride = o_hs,
        .lse = with_lse ? (float *)lse->p : NULL, .sched = c.has_sched ? &c.sched : NULL,
        .bf16_compute = c.bf16_compute};
    const mla_config cfg = config_of(&c);
    const char *backend = fz_backend_for(f, MLA_OP_DECODE, &cfg);

    /* the workspace query: shapes only, no workspace, no backend */
    const fz_expect shape = fz_unless(no_args, c.shape);
    fz_buf *bytes_buf = fz_alloc("bytes", 8, 0, true);
    const bool no_bytes = fz_null(f);
    if (shape != FZ_REJECT && !no_bytes)
        fz_allow(bytes_buf, 0, 8);
    fz_before();
    mla_status st = mla_decode_workspace_size(no_args ? NULL : &a, c.threads,
                                              no_bytes ? NULL : (int64_t *)bytes_buf->p);
    const bool sized = fz_after("mla_decode_workspace_size", st, fz_unless(no_bytes, shape), NULL);
    int64_t need = 0;
    if (sized)
        memcpy(&need, bytes_buf->p, 8);
    if ((sized && (need < 0 || !fz_fits(need))) || (!sized && e != FZ_REJECT))
        return; /* too large to allocate (a large schedule), or not sized (bytes NULL) */
    fz_workspace ws;
    if (!fz_call_workspace(f, sized, need, &e, &ws))
        return;
    e = fz_unless(e != FZ_REJECT && !fz_backend_takes(backend, MLA_OP_DECODE, &cfg), e);
    if (e != FZ_REJECT) {
        fz_allow_view(out, c.T, c.H, c.L, o_ts, o_hs, qe);
        if (with_lse)
            fz_allow(lse, 0, lse->bytes);
    }
    fz_before();
    st = mla_decode(no_args ? NULL : &a, ws.null ? NULL : ws.buf->p, ws.given, c.threads);
    if (!fz_after("mla_decode", st, e, backend))
        return;

    /* the oracle, on aligned copies of q and the cache */
    void *qn_copy = fz_aligned_copy(qn), *qp_copy = fz_aligned_copy(qp);
    void *cache_copy = fz_aligned_copy(c.k.buf);
    mla_kv_cache oc = c.k.c;
    oc.data = cache_copy;
    mla_decode_args oa = a;
    oa.cache = &oc;
    oa.q_nope = qn_copy;
    oa.q_pe = concat ? (char *)qn_copy + L * qe : qp_copy;
    double *want = fz_scratch(sizeof(double) * (size_t)(T * H * L + 1));
    double *want_lse = fz_scratch(sizeof(double) * (size_t)(T * H + 1));
    oracle_decode_latent(&oa, want, want_lse);
    const rounding r = rounding_of(&c, backend);
    const mla_dtype td = r.q ? MLA_DTYPE_BF16 : qd;
    for (int64_t b = 0; b < c.B; b++) {
        double max_v, max_k;
        request_max(&c, &oc, b, &max_v, &max_k);
        const int64_t len = c.lens[b];
        const double base = td == MLA_DTYPE_F32   ? 1e-5 + 2e-7 * sqrt((double)len)
                            : td == MLA_DTYPE_BF16 ? 1e-2
                                                   : 2e-3;
        for (int64_t i = 0; i < c.s_q; i++) {
            const int64_t t = b * c.s_q + i, n = visible(len, c.s_q, i);
            for (int64_t h = 0; h < H; h++) {
                double q1 = 0.0;
                for (int64_t d = 0; d < L; d++)
                    q1 += fabs(fz_load(qd, oa.q_nope, t * qn_ts + h * qn_hs + d, 1.0f));
                for (int64_t d = 0; d < R; d++)
                    q1 += fabs(fz_load(qd, oa.q_pe, t * qp_ts + h * qp_hs + d, 1.0f));
                const double shift = (r.q + r.keys) * 0x1p-9 * fabs((double)c.scale) * q1 * max_k;
                const double tol = (base + 2.0 * shift) * max_v + fz_subnormal_error(qd);
                for (int64_t l = 0; l < L; l++) {
                    const double got = fz_load(qd, out->p, t * o_ts + h * o_hs + l, 1.0f);
                    const double w = want[(t * H + h) * L + l];
                    if (n == 0 ? got != 0.0 : !fz_close(w, got, tol))
                        fz_fail("mla_decode (%s, %s q, %s cache, B %lld s_q %lld H %lld L %lld "
                                "R %lld, scale %g): request %lld (len %lld) query %lld head %lld: "
                                "out[%lld] = %.9g, want %.9g (tol %.3g)", backend,
                                mla_dtype_name(qd), mla_dtype_name(c.k.c.dtype), (long long)c.B,
                                (long long)c.s_q, (long long)H, (long long)L, (long long)R,
                                (double)c.scale, (long long)b, (long long)len, (long long)i,
                                (long long)h, (long long)l, got, n ? w : 0.0, tol);
                }
                if (!with_lse)
                    continue;
                float got_lse;
                memcpy(&got_lse, lse->p + ((b * H + h) * c.s_q + i) * 4, 4);
                const double w = want_lse[(b * H + h) * c.s_q + i];
                if (n == 0 ? !(isinf(got_lse) && got_lse < 0) : !fz_close(w, got_lse, 1e-4 + shift))
                    fz_fail("mla_decode (%s): request %lld query %lld head %lld: lse %.9g, want "
                            "%.9g", backend, (long long)b, (long long)i, (long long)h,
                            (double)got_lse, n ? w : -INFINITY);
            }
        }
    }
}

/* ---- weights -------------------------------------------------------------------- */

typedef struct weights {
    int64_t H, L, P, V;
    mla_dtype src_dt, w_dt;
    fz_buf *kvb, *uk, *uv;
    float *w_eff; /* kv_b_proj as w_dtype holds it, f32 [H(P+V), L] */
} weights;

/* kv_b_proj values as the weights' dtype rounds them. */
static float *effective(const weights *w)
{
    const int64_t n = w->H * (w->P + w->V) * w->L;
    float *eff = fz_scratch(sizeof(float) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) {
        unsigned char x[4];
        float y = fz_load(w->src_dt, w->kvb->p, i, 1.0f);
        fz_store(w->w_dt, x, 0, y, 1.0f);
        eff[i] = fz_load(w->w_dt, x, 0, 1.0f);
    }
    return eff;
}

/* mla_prepare_weights of a kv_b_proj the input decodes (H, L given, or
 * decoded when < 0); the call's result is checked element by element. False
 * when the input made no valid weights (or too large ones). */
static bool make_weights(fz *f, weights *w, int64_t H, int64_t L, int threads)
{
    w->H = H >= 0 ? H : fz_edge(f, fz_in(f, 1, 4));
    w->L = L >= 0 ? L : fz_edge(f, fz_in(f, 1, 40));
    w->P = fz_edge(f, fz_in(f, 1, 24));
    w->V = fz_edge(f, fz_in(f, 1, 24));
    w->src_dt = fz_pick_dtype(f, float_dtypes, 3);
    w->w_dt = fz_pick_dtype(f, float_dtypes, 2);
    const bool no_src = fz_null(f), no_uk = fz_null(f), no_uv = fz_null(f);
    fz_expect e = fz_unless(w->H < 1 || w->L < 1 || w->P < 1 || w->V < 1, FZ_OK);
    e = fz_unless(!is_float(w->src_dt) || (w->w_dt != MLA_DTYPE_F32 && w->w_dt != MLA_DTYPE_BF16), e);
    e = fz_unless(no_src || no_uk || no_uv, e);
    const int64_t rows = fz_mul(fz_add(w->P, w->V), w->H), elems = fz_mul(rows, w->L);
    e = fz_unless(rows < 0 || elems < 0 || fz_mul(elems, 4) < 0, e);
    const bool real = e != FZ_REJECT;
    if (real && (w->H > 4 || w->L > 40 || w->P > 24 || w->V > 24))
        return false;
    const int64_t n = real ? elems : 4;
    w->kvb = fz_alloc("kv_b_proj", (size_t)(n * size_of(w->src_dt)), fz_u8(f), false);
    w->uk = fz_alloc("w_uk_t", (size_t)(real ? w->H * w->P * w->L * size_of(w->w_dt) : 16), fz_u8(f), true);
    w->uv = fz_alloc("w_uv", (size_t)(real ? w->H * w->L * w->V * size_of(w->w_dt) : 16), fz_u8(f), true);
    if (!w->kvb || !w->uk || !w->uv)
        return false;
    if (is_float(w->src_dt))
        for (int64_t i = 0; i < n; i++)
            fz_put_random(f, w->src_dt, w->kvb->p, i, 1.0f);
    if (real) {
        fz_allow(w->uk, 0, w->uk->bytes);
        fz_allow(w->uv, 0, w->uv->bytes);
    }
    const char *backend = fz_backend(f, MLA_OP_CONVERT);
    fz_before();
    mla_status st = mla_prepare_weights(no_src ? NULL : w->kvb->p, w->src_dt, w->H, w->L, w->P,
                                        w->V, no_uk ? NULL : w->uk->p, no_uv ? NULL : w->uv->p,
                                        w->w_dt, threads);
    if (!fz_after("mla_prepare_weights", st, e, backend))
        return false;
    w->w_eff = effective(w);
    const int64_t PV = w->P + w->V;
    for (int64_t h = 0; h < w->H; h++)
        for (int64_t l = 0; l < w->L; l++) {
            for (int64_t p = 0; p < w->P; p++) {
                const float got = fz_load(w->w_dt, w->uk->p, (h * w->P + p) * w->L + l, 1.0f);
                if (got != w->w_eff[(h * PV + p) * w->L + l])
                    fz_fail("mla_prepare_weights: w_uk_t[%lld][%lld][%lld] = %g, want %g",
                            (long long)h, (long long)p, (long long)l, (double)got,
                            (double)w->w_eff[(h * PV + p) * w->L + l]);
            }
            for (int64_t v = 0; v < w->V; v++) {
                const float got = fz_load(w->w_dt, w->uv->p, (h * w->L + l) * w->V + v, 1.0f);
                if (got != w->w_eff[(h * PV + w->P + v) * w->L + l])
                    fz_fail("mla_prepare_weights: w_uv[%lld][%lld][%lld] = %g, want %g",
                            (long long)h, (long long)l, (long long)v, (double)got,
                            (double)w->w_eff[(h * PV + w->P + v) * w->L + l]);
            }
        }
    return true;
}

static void run_weights(fz *f)
{
    weights w = {0};
    make_weights(f, &w, -1, -1, fz_threads(f));
}

/* ---- mla_decode_forward ------------------------------------------------------------ */

static void run_forward(fz *f)
{
    attn_case c;
    make_attention(f, &c, 40);
    if (c.skip)
        return;
    if (c.e == FZ_REJECT && !f->hostile)
        fz_fail("harness: a clean attention case is invalid");
    const int64_t H = c.H >= 1 && c.H <= 4 ? c.H : 1, L = c.L >= 1 && c.L <= 40 ? c.L : 1;
    weights w = {0};
    if (!make_weights(f, &w, H, L, 1 + fz_bit(f)))
        return;
    const int64_t P = w.P, V = w.V, R = c.R >= 0 && c.R <= 12 ? c.R : 0;
    /* the call's P and V: the weights', or (hostile) an edge value */
    const int64_t P_arg = fz_edge(f, P), V_arg = fz_edge(f, V);
    if ((P_arg != P && P_arg >= 1) || (V_arg != V && V_arg >= 1))
        return; /* other weights than these: not this harness's to try */
    const int64_t T = c.T >= 0 && c.T <= MAX_B * 3 ? c.T : 0;
    const mla_dtype qd = c.q_dt;
    const int64_t qe = size_of(qd);
    int64_t q_ts, q_hs;
    fz_view_strides(f, T, H, P + R, &q_ts, &q_hs);
    const int64_t o_ts = fz_edge(f, H * V + fz_in(f, 0, 3));
    const bool with_lse = fz_bit(f), no_q = fz_null(f), no_out = fz_null(f);
    const bool no_uk = fz_null(f), no_uv = fz_null(f), no_args = f->hostile && fz_null(f);
    const mla_dtype w_dt = fz_dtype(f, w.w_dt);
    fz_expect e = c.e;
    if (e != FZ_REJECT) {
        const int64_t q_el = fz_view_elems(c.T, c.H, fz_add(P, c.R), q_ts, q_hs);
        e = fz_unless(q_el < 0 || fz_bytes(q_el, qd) < 0, e);
        e = fz_unless(o_ts < H * V || (T > 0 && fz_bytes(fz_add(fz_mul(T - 1, o_ts), H * V), qd) < 0),
                      e);
        e = fz_unless(c.T > 0 && (no_q || no_out), e);
    }
    e = fz_unless(no_uk || no_uv || (w_dt != MLA_DTYPE_F32 && w_dt != MLA_DTYPE_BF16) || no_args ||
                      P_arg < 1 || V_arg < 1,
                  e);
    const bool real = e != FZ_REJECT;
    const int64_t q_el = real ? fz_view_elems(T, H, P + R, q_ts, q_hs) : 4;
    const int64_t o_el = real && T > 0 ? (T - 1) * o_ts + H * V : 4;
    if (real && (!fz_fits(fz_mul(q_el, qe)) || !fz_fits(fz_mul(o_el, qe))))
        return;
    fz_buf *q = fz_alloc("q", (size_t)(q_el * qe), fz_u8(f), false);
    fz_buf *out = fz_alloc("out", (size_t)(o_el * qe), fz_u8(f), true);
    fz_buf *lse = fz_alloc("lse", (size_t)(real ? c.B * c.H * c.s_q : 4) * 4, 0, true);
    if (!q || !out || !lse || !fz_cache_alloc(f, &c.k, c.touched, false))
        return;
    e = fz_unless(!c.k.ok, e);
    if (is_float(qd))
        for (int64_t i = 0; i < q_el; i++)
            fz_put_random(f, qd, q->p, i, 1.0f);
    mla_decode_forward_args fa = {
        .num_reqs = c.B, .s_q = c.s_q, .num_heads = c.H, .kv_lora_rank = c.L, .rope_dim = c.R,
        .qk_nope_dim = P_arg, .v_head_dim = V_arg, .scale = c.scale, .dtype = qd,
        .q = no_q ? NULL : q->p, .q_token_stride = q_ts, .q_head_stride = q_hs,
        .w_uk_t = no_uk ? NULL : w.uk->p, .w_uv = no_uv ? NULL : w.uv->p, .w_dtype = w_dt,
        .out = no_out ? NULL : out->p, .out_token_stride = o_ts,
        .lse = with_lse ? (float *)lse->p : NULL, .cache = c.no_cache ? NULL : &c.k.c,
        .block_table = c.no_table ? NULL : c.table, .block_table_cols = c.cols,
        .seq_lens = c.no_lens ? NULL : c.lens, .sched = c.has_sched ? &c.sched : NULL,
        .bf16_compute = c.bf16_compute};
    const mla_config cfg = config_of(&c);
    const char *backend = fz_backend_for(f, MLA_OP_DECODE, &cfg);
    /* the query reads shapes, P, V and w_dtype only */
    fz_expect shape = fz_unless(no_args || P_arg < 1 || V_arg < 1 ||
                                    (w_dt != MLA_DTYPE_F32 && w_dt != MLA_DTYPE_BF16),
                                c.shape);
    fz_buf *bytes_buf = fz_alloc("bytes", 8, 0, true);
    const bool no_bytes = fz_null(f);
    if (shape != FZ_REJECT && !no_bytes)
        fz_allow(bytes_buf, 0, 8);
    fz_before();
    mla_status st = mla_decode_forward_workspace_size(no_args ? NULL : &fa, c.threads,
                                                      no_bytes ? NULL : (int64_t *)bytes_buf->p);
    const bool sized = fz_after("mla_decode_forward_workspace_size", st, fz_unless(no_bytes, shape),
                                NULL);
    int64_t need = 0;
    if (sized)
        memcpy(&need, bytes_buf->p, 8);
    if ((sized && (need < 0 || !fz_fits(need))) || (!sized && e != FZ_REJECT))
        return;
    fz_workspace ws;
    if (!fz_call_workspace(f, sized, need, &e, &ws))
        return;
    e = fz_unless(e != FZ_REJECT && !fz_backend_takes(backend, MLA_OP_DECODE, &cfg), e);
    if (e != FZ_REJECT) {
        fz_allow_rows(out, 0, T, o_ts, H * V, qe);
        if (with_lse)
            fz_allow(lse, 0, lse->bytes);
    }
    fz_before();
    st = mla_decode_forward(no_args ? NULL : &fa, ws.null ? NULL : ws.buf->p, ws.given, c.threads);
    if (!fz_after("mla_decode_forward", st, e, backend))
        return;

    /* the non-absorbed oracle over the weights as w_dtype holds them */
    void *q_copy = fz_aligned_copy(q), *cache_copy = fz_aligned_copy(c.k.buf);
    mla_kv_cache oc = c.k.c;
    oc.data = cache_copy;
    mla_decode_forward_args of = fa;
    of.q = q_copy;
    of.cache = &oc;
    double *want = fz_scratch(sizeof(double) * (size_t)(T * H * V + 1));
    double *want_lse = fz_scratch(sizeof(double) * (size_t)(T * H + 1));
    double *o_lat = fz_scratch(sizeof(double) * (size_t)(T * H * L + 1));
    oracle_decode_mha(&of, w.w_eff, want, want_lse, o_lat);
    const rounding r = rounding_of(&c, backend);
    const mla_dtype td = r.q ? MLA_DTYPE_BF16 : qd;
    const double u = qd == MLA_DTYPE_F32 ? 0.0 : fz_unit(qd);
    const double rel = td == MLA_DTYPE_F32 ? 1e-4 : 4 * fz_unit(td);
    /* a bound on |out| over any weights a softmax may give: sum_l |W_UV| max|V| */
    double w_uv1 = 0.0;
    for (int64_t h = 0; h < H; h++)
        for (int64_t v = 0; v < V; v++) {
            double sum = 0.0;
            for (int64_t l = 0; l < L; l++)
                sum += fabs(w.w_eff[(h * (P + V) + P + v) * L + l]);
            w_uv1 = sum > w_uv1 ? sum : w_uv1;
        }
    for (int64_t b = 0; b < c.B; b++) {
        double max_v, max_k, max_out = 0.0;
        request_max(&c, &oc, b, &max_v, &max_k);
        const double bound = w_uv1 * max_v;
        for (int64_t i = 0; i < c.s_q * H * V; i++) {
            const double x = fabs(want[b * c.s_q * H * V + i]);
            max_out = isfinite(x) && x > max_out ? x : max_out;
        }
        for (int64_t i = 0; i < c.s_q; i++) {
            const int64_t t = b * c.s_q + i, n = visible(c.lens[b], c.s_q, i);
            for (int64_t h = 0; h < H; h++) {
                /* the absorbed query ql = q_nope W_UK_T[h] in double, and its
                 * share of the lse's rounding (decode_cases.c) */
                const int64_t PV = P + V;
                double ql1 = 0.0, qo2 = 0.0;
                for (int64_t l = 0; l < L; l++) {
                    double ql = 0.0;
                    for (int64_t p = 0; p < P; p++)
                        ql += (double)fz_load(qd, q_copy, t * q_ts + h * q_hs + p, 1.0f) *
                              w.w_eff[(h * PV + p) * L + l];
                    ql1 += fabs(ql);
                    qo2 += ql * o_lat[(t * H + h) * L + l] * ql * o_lat[(t * H + h) * L + l];
                }
                for (int64_t d = 0; d < R; d++)
                    ql1 += fabs(fz_load(qd, q_copy, t * q_ts + h * q_hs + P + d, 1.0f));
                const double shift = (r.q + r.keys) * 0x1p-9 * fabs((double)c.scale) * ql1 * max_k +
                                     4.0 * fabs((double)c.scale) * u / sqrt(3.0) * sqrt(qo2);
                const double tol = rel * (max_out > bound ? max_out : bound) + 2.0 * shift * bound +
                                   fz_subnormal_error(qd);
                for (int64_t v = h * V; v < h * V + V; v++) {
                    const double got = fz_load(qd, out->p, t * o_ts + v, 1.0f);
                    const double wv = want[t * H * V + v];
                    if (n == 0 ? got != 0.0 : !fz_close(wv, got, tol))
                        fz_fail("mla_decode_forward (%s, %s q, %s cache, %s weights, B %lld s_q "
                                "%lld H %lld L %lld R %lld P %lld V %lld, scale %g): token %lld "
                                "out[%lld] = %.9g, want %.9g (tol %.3g)", backend,
                                mla_dtype_name(qd), mla_dtype_name(c.k.c.dtype),
                                mla_dtype_name(w.w_dt), (long long)c.B, (long long)c.s_q,
                                (long long)H, (long long)L, (long long)R, (long long)P,
                                (long long)V, (double)c.scale, (long long)t, (long long)v, got,
                                n ? wv : 0.0, tol);
                }
                if (!with_lse)
                    continue;
                float got_lse;
                memcpy(&got_lse, lse->p + ((b * H + h) * c.s_q + i) * 4, 4);
                const double wl = want_lse[(b * H + h) * c.s_q + i];
                if (n == 0 ? !(isinf(got_lse) && got_lse < 0) : !fz_close(wl, got_lse, 1e-4 + shift))
                    fz_fail("mla_decode_forward (%s): request %lld query %lld head %lld: lse "
                            "%.9g, want %.9g (tol %.3g)", backend, (long long)b, (long long)i,
                            (long long)h, (double)got_lse, n ? wl : -INFINITY, 1e-4 + shift);
            }
        }
    }
}

const fz_entry fz_entries[] = {
    {"decode", run_decode},
    {"forward", run_forward},
    {"weights", run_weights},
};
const int fz_entry_count = sizeof fz_entries / sizeof fz_entries[0];
