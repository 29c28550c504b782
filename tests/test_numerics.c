/*
 * Numerics at the edges (docs/semantics.md §3.1, §4, §8), on every
 * attention route (routes.h) and the backends this CPU runs:
 *
 *   * extreme logits: |scale q.K| up to 1.5e4 from large q and large cache
 *     values (near f16's largest for f16, 2^40 and more for f32 and bf16)
 *     and scales of both signs, in decode (unsplit and split, s_q 1 and 2)
 *     and flash attention (causal and not): nothing overflows and the
 *     online softmax stays right, against the double-precision oracles with
 *     the dtypes' tolerances (decode_cases.h: the f32 LSE's own rounding,
 *     2^-24 |lse|, is the one allowance large logits add). The values are
 *     small integers times powers of two and the scale a power of two, so
 *     every logit is exact in f32 on every route: what is checked is the
 *     softmax, not the f32 rounding of a dot product of magnitude 1e4
 *     (about 1e-3, which any f32 implementation has).
 *   * inf and NaN in the cache (decode, mla_decode_forward), in q
 *     (mla_decode_forward) and in merge_attn_states' inputs stay in the rows
 *     that read them: every other request, head and query row is bit for
 *     bit what a run without them gives; the rows that read them get the
 *     oracle's plain arithmetic (test_causal_mask.c has q and the keys
 *     behind the causal mask);
 *   * the f32 route's scale folded into q (docs/semantics.md §8, logit
 *     arithmetic): a q element the scale takes to 0 times an infinite key
 *     element is NaN, where scale * (q.K) would give -inf;
 *   * fp8 saturation through mla_concat_and_cache (§3.1): values past the
 *     largest finite (448 e4m3, 57344 e5m2) and infinities store it with
 *     their sign, NaN stays NaN, read back as value * scale.
 */
#include "oracle.h"
#include "routes.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const float poisons[] = {NAN, INFINITY, -INFINITY};

/* ---- extreme logits ------------------------------------------------------------------ */

/* The dims that carry the large part of each logit: q is 2^10 times larger
 * there than elsewhere (4 .. 6) and the keys hold 4 or 5 (times their power
 * of two), the same for every key of a block of 16, so a row's logits sit
 * near +-2^6 * 8 * 5 * 4.5 = 1.2e4 (8e3 .. 1.5e4) and its running maximum
 * jumps by about 2.5e3 between blocks; the other dims move each logit by a
 * few units (q and keys uniform in -6 .. 6), so several keys weigh. */
#define BIG_DIMS 8

/* Exponents of q's and the keys' small integers: near the top of f16's
 * range (6 * 2^13 < 65504), 2^30 .. 2^50 for the others; fp8 caches get
 * 2^40 as their scale. The scale is -+2^-(eq + ek + 4). */
static int q_exponent(mla_dtype q_dtype)
{
    return q_dtype == MLA_DTYPE_F16 ? 3 : 30;
}

static int key_exponent(mla_dtype key_dtype)
{
    return key_dtype == MLA_DTYPE_F16 ? 12 : 40;
}

static float small_int(int64_t lo, int64_t hi, int exponent)
{
    return ldexpf((float)support_random_in(lo, hi), exponent);
}

static float key_value(int64_t j, int64_t d, int ek)
{
    return d < BIG_DIMS ? ldexpf((j / 16) % 2 ? 4.0f : 5.0f, ek) : small_int(-6, 6, ek);
}

static float query_value(int64_t d, int eq)
{
    return d < BIG_DIMS ? small_int(4, 6, eq + 10) : small_int(-6, 6, eq);
}

/* The largest |lse| of the oracle's finite ones: the case is as extreme as
 * it says. */
static void expect_extreme(const double *lse, int64_t n, const char *label)
{
    double most = 0.0;
    for (int64_t i = 0; i < n; i++)
        most = isfinite(lse[i]) && fabs(lse[i]) > most ? fabs(lse[i]) : most;
    if (most < 1e4)
        fail_msg("%s: largest |lse| %g: the logits are not extreme", label, most);
}

static void test_decode_extreme_logits(void **state)
{
    (void)state;
    routes_seen seen = {0};
    for (int d = 0; d < ROUTE_DECODE_DTYPES; d++)
        for (int64_t s_q = 1; s_q <= 2; s_q++)
            for (int sign = -1; sign <= 1; sign += 2) {
                const route_dtypes *dt = &route_decode_dtypes[d];
                dspec s = {.q_dtype = dt->q, .cache_dtype = dt->cache, .s_q = s_q, .H = 3,
                           .L = 40, .R = 8, .block_size = 16, .num_reqs = 5,
                           .lens = {1, 17, 130, 300, 33}, .form = (q_form)((d + s_q) % 3),
                           .pad = sign > 0, .lse = true, .bf16_compute = dt->bf16_compute};
                dcase c;
                dcase_make(&c, &s, false);
                const int eq = q_exponent(dt->q), ek = key_exponent(dt->cache);
                const bool fp8 = mla_dtype_size(dt->cache) == 1;
                c.pg.cache.scale = fp8 ? ldexpf(1.0f, ek) : 1.0f;
                for (int64_t b = 0; b < s.num_reqs; b++)
                    for (int64_t j = 0; j < s.lens[b]; j++)
                        for (int64_t e = 0; e < s.L + s.R; e++)
                            oracle_store(dt->cache, c.pg.cache.data, paged_row(&c.pg, b, j) + e,
                                         key_value(j, e, ek), c.pg.cache.scale);
                for (int64_t t = 0; t < s.num_reqs * s_q; t++)
                    for (int64_t h = 0; h < s.H; h++)
                        for (int64_t e = 0; e < s.L + s.R; e++)
                            dcase_store_q(&c, t, h, e, query_value(e, eq));
                c.args.scale = ldexpf((float)sign, -(eq + ek + 4));
                dcase_inputs_changed(&c);
                case_label_add(c.label, sizeof c.label, ", scale %g, logits near %c1e4",
                               (double)c.args.scale, sign > 0 ? '+' : '-');
                expect_extreme(c.want_lse, s.num_reqs * s.H * s_q, c.label);
                route_decode_everywhere(&c, true, &seen);
                dcase_free(&c);
            }
    route_expect_every(&seen, "decode, extreme logits");
}

/* The same values in flash attention: q and k_nope as above, k_pe and v
 * the keys' small integers. */
static void test_flash_extreme_logits(void **state)
{
    (void)state;
    routes_seen seen = {0};
    for (int d = 0; d < COUNT(route_flash_dtypes); d++)
        for (int causal = 0; causal <= 1; causal++)
            for (int sign = -1; sign <= 1; sign += 2) {
                const mla_dtype dtype = route_flash_dtypes[d];
                const int eq = q_exponent(dtype), ek = key_exponent(dtype);
                fa_spec s = {.dtype = dtype, .H = 2, .qk_dim = 40, .v_dim = 24, .rope_dim = 8,
                             .causal = causal, .scale = ldexpf((float)sign, -(eq + ek + 4)),
                             .num_seqs = 3, .q_lens = {5, 130, 1}, .k_lens = {40, 300, 17},
                             .layout = (fa_layout)((d + causal) % FA_LAYOUTS), .lse = true,
                             .threads = 2};
                fa_case c;
                fa_make(&c, &s, false);
                const mla_flash_attn_args *a = &c.args;
                const int64_t nope = s.qk_dim - s.rope_dim;
                for (int64_t t = 0; t < c.T; t++)
                    for (int64_t h = 0; h < s.H; h++)
                        for (int64_t e = 0; e < s.qk_dim; e++)
                            oracle_store(dtype, c.q, t * a->q_token_stride +
                                         h * a->q_head_stride + e, query_value(e, eq), 1.0f);
                for (int64_t b = 0; b < s.num_seqs; b++)
                    for (int64_t j = 0; j < s.k_lens[b]; j++) {
                        const int64_t key = c.cu_k[b] + j;
                        for (int64_t h = 0; h < s.H; h++) {
                            for (int64_t e = 0; e < nope; e++)
                                oracle_store(dtype, c.k, key * a->k_token_stride +
                                             h * a->k_head_stride + e, key_value(j, e, ek), 1.0f);
                            for (int64_t e = 0; e < s.v_dim; e++)
                                oracle_store(dtype, c.v, key * a->v_token_stride +
                                             h * a->v_head_stride + e, small_int(-6, 6, ek), 1.0f);
                        }
                        for (int64_t e = 0; e < s.rope_dim; e++)
                            oracle_store(dtype, c.k_pe, key * a->k_pe_token_stride + e,
                                         small_int(-6, 6, ek), 1.0f);
                    }
                c.inputs_sum = fa_inputs_checksum(&c);
                fa_oracle(&c);
                expect_extreme(c.want_lse, s.H * c.T, c.label);
                route_flash_everywhere(&c, &seen);
                fa_free(&c);
            }
    route_expect_every(&seen, "flash attention, extreme logits");
}

/* ---- inf and NaN stay in the rows that read them ----------------------------------- */

/* Elements a test poisons, with their clean bytes, so that runs alternate
 * between the clean inputs and the poisoned ones. */
#define MAX_POISONS 16
typedef struct poisoning {
    int n;
    unsigned char *at[MAX_POISONS];
    unsigned char clean[MAX_POISONS][4], bad[MAX_POISONS][4];
    size_t size[MAX_POISONS];
} poisoning;

static void poison_add(poisoning *p, mla_dtype dtype, void *array, int64_t i, float x, float scale)
{
    assert_true(p->n < MAX_POISONS);
    const size_t size = (size_t)mla_dtype_size(dtype);
    unsigned char *at = (unsigned char *)array + (size_t)i * size;
    memcpy(p->clean[p->n], at, size);
    route_store_poison(dtype, array, i, x, scale);
    memcpy(p->bad[p->n], at, size);
    p->at[p->n] = at;
    p->size[p->n++] = size;
}

static void poison_set(const poisoning *p, bool bad)
{
    for (int i = 0; i < p->n; i++)
        memcpy(p->at[i], bad ? p->bad[i] : p->clean[i], p->size[i]);
}

/* Where a decode-shaped result lies: out rows (t, h) of `width` elements,
 * lse [B, H, s_q], each inside its buffer's guard margins. */
typedef struct results {
    unsigned char *out_buf, *lse_buf;
    size_t out_bytes, lse_bytes;
    const unsigned char *out;
    int64_t token_stride, head_stride, width, elem;
    int64_t num_reqs, s_q, heads;
    bool lse;
} results;

static results dcase_results(const dcase *c)
{
    const mla_decode_args *a = &c->args;
    return (results){.out_buf = c->out_buf, .lse_buf = c->lse_buf, .out_bytes = c->out_bytes,
                     .lse_bytes = c->lse_bytes, .out = a->out,
                     .token_stride = a->out_token_stride, .head_stride = a->out_head_stride,
                     .width = a->kv_lora_rank, .elem = mla_dtype_size(a->q_dtype),
                     .num_reqs = a->num_reqs, .s_q = a->s_q, .heads = a->num_heads,
                     .lse = a->lse != NULL};
}

static results fcase_results(const fcase *c)
{
    const mla_decode_forward_args *f = &c->f;
    return (results){.out_buf = c->out_buf, .lse_buf = c->lse_buf, .out_bytes = c->out_bytes,
                     .lse_bytes = c->lse_bytes, .out = f->out,
                     .token_stride = f->out_token_stride, .head_stride = c->s.V,
                     .width = c->s.V, .elem = mla_dtype_size(c->s.q_dtype),
                     .num_reqs = c->s.num_reqs, .s_q = c->s.s_q, .heads = c->s.H,
                     .lse = f->lse != NULL};
}

/* Byte offsets of row (t, h) in out_buf and of its lse in lse_buf. */
static size_t out_at(const results *r, int64_t t, int64_t h)
{
    return (size_t)(r->out - r->out_buf) +
           (size_t)((t * r->token_stride + h * r->head_stride) * r->elem);
}

static size_t lse_at(const results *r, int64_t t, int64_t h)
{
    const int64_t b = t / r->s_q, i = t % r->s_q;
    return MARGIN + sizeof(float) * (size_t)((b * r->heads + h) * r->s_q + i);
}

typedef struct snapshot {
    unsigned char *out, *lse;
} snapshot;

static snapshot take(const results *r)
{
    snapshot s = {malloc(r->out_bytes), malloc(r->lse_bytes)};
    memcpy(s.out, r->out_buf, r->out_bytes);
    memcpy(s.lse, r->lse_buf, r->lse_bytes);
    return s;
}

static void drop(snapshot *s)
{
    free(s->out);
    free(s->lse);
}

/* The rows marked in `affected` ([Td * H]) blanked, in both snapshots. */
static void blank_rows(const results *r, const bool *affected, snapshot *x, snapshot *y)
{
    for (int64_t t = 0; t < r->num_reqs * r->s_q; t++)
        for (int64_t h = 0; h < r->heads; h++) {
            if (!affected[t * r->heads + h])
                continue;
            const size_t o = out_at(r, t, h), l = lse_at(r, t, h);
            memset(x->out + o, 0, (size_t)(r->width * r->elem));
            memset(y->out + o, 0, (size_t)(r->width * r->elem));
            memset(x->lse + l, 0, sizeof(float));
            memset(y->lse + l, 0, sizeof(float));
        }
}

/* Every byte of out's and lse's buffers outside the affected rows (the
 * margins and gaps included) is the clean run's. */
static void expect_contained(const results *r, const snapshot *clean, const bool *affected,
                             const char *what)
{
    snapshot now = take(r), was = {malloc(r->out_bytes), malloc(r->lse_bytes)};
    memcpy(was.out, clean->out, r->out_bytes);
    memcpy(was.lse, clean->lse, r->lse_bytes);
    blank_rows(r, affected, &now, &was);
    for (size_t i = 0; i < r->out_bytes; i++)
        if (now.out[i] != was.out[i])
            fail_msg("%s: out byte %zu (row %lld from the view's start) differs from the run "
                     "without inf and NaN", what, i,
                     (long long)(((int64_t)i - (r->out - r->out_buf)) /
                                 (r->token_stride * r->elem)));
    for (size_t i = 0; i < r->lse_bytes; i++)
        if (now.lse[i] != was.lse[i])
            fail_msg("%s: lse byte %zu differs from the run without inf and NaN", what, i);
    drop(&now);
    drop(&was);
}

/* Every element and lse of the affected rows is NaN. */
static void expect_nan_rows(const results *r, mla_dtype dtype, const bool *affected,
                            const char *what)
{
    for (int64_t t = 0; t < r->num_reqs * r->s_q; t++)
        for (int64_t h = 0; h < r->heads; h++) {
            if (!affected[t * r->heads + h])
                continue;
            for (int64_t e = 0; e < r->width; e++) {
                float x = oracle_load(dtype, r->out_buf + out_at(r, t, h), e, 1.0f);
                if (!isnan(x))
                    fail_msg("%s: token %lld head %lld: out[%lld] = %g, want NaN", what,
                             (long long)t, (long long)h, (long long)e, (double)x);
            }
            float lse;
            memcpy(&lse, r->lse_buf + lse_at(r, t, h), sizeof lse);
            if (r->lse && !isnan(lse))
                fail_msg("%s: token %lld head %lld: lse %g, want NaN", what, (long long)t,
                         (long long)h, (double)lse);
        }
}

/* A cache key every query of request b sees, or -1 when its queries see
 * none in common. */
static int64_t key_all_see(int64_t len, int64_t s_q)
{
    return len >= s_q && len > 0 ? (len - s_q) / 2 : -1;
}

/* Poisons, in each odd request, a key all its queries see: element d of its
 * row (the V part d < L, which K holds too, or the K-only rope part).
 * Marks every row of those requests. */
static void poison_cache(poisoning *p, const paged *pg, const int32_t *lens, int64_t B,
                         int64_t s_q, int64_t H, int64_t L, int64_t R, bool in_v, float poison,
                         bool *affected)
{
    for (int64_t b = 1; b < B; b += 2) {
        const int64_t j = key_all_see(lens[b], s_q);
        if (j < 0)
            continue;
        const int64_t d = in_v ? (b * 7) % L : L + (b * 3) % R;
        poison_add(p, pg->cache.dtype, pg->cache.data, paged_row(pg, b, j) + d, poison,
                   pg->cache.scale);
        for (int64_t x = b * s_q * H; x < (b + 1) * s_q * H; x++)
            affected[x] = true;
    }
    assert_true(p->n > 0);
}

static const mla_decode_sched_params *const schedules[] = {
    &route_unsplit, &route_splits[0], &route_splits[1],
};

typedef struct cache_run {
    dcase *c;
    const poisoning *p;
    const bool *affected;
    bool split_reads_inf_v; /* split runs: the oracle does not model their cut */
    routes_seen here, *seen;
} cache_run;

/* On backend b, each schedule: the clean inputs, then the poisoned ones,
 * which change only the affected rows and, where the oracle models the
 * run, give its answer. */
static void run_cache_poisoned(const mla_backend_desc *b, void *ctx)
{
    cache_run *r = ctx;
    dcase *c = r->c;
    const mla_config cfg = case_config_of(&c->args);
    if (!route_takes_case(b, &cfg, &r->here, r->seen))
        return;
    const results res = dcase_results(c);
    for (int k = 0; k < COUNT(schedules); k++) {
        c->args.sched = schedules[k];
        poison_set(r->p, false);
        c->inputs_sum = dcase_inputs_checksum(c);
        dcase_decode(c, b->name, 2, 0);
        support_expect_ran(b);
        snapshot clean = take(&res);
        poison_set(r->p, true);
        c->inputs_sum = dcase_inputs_checksum(c);
        dcase_decode(c, b->name, 2, 0);
        support_expect_ran(b);
        if (k == 0 || !r->split_reads_inf_v)
            dcase_check(c, b->name);
        char what[400];
        snprintf(what, sizeof what, "%s: %s, schedule %d", b->name, c->label, k);
        expect_contained(&res, &clean, r->affected, what);
        drop(&clean);
    }
    c->args.sched = NULL;
}

/* Decode: inf and NaN in a key of every odd request, in its V part or its
 * K-only part: only that request's rows change, to the oracle's answer
 * (split runs with an infinite V excepted: whether a split holding it
 * reads it, 0 * inf, depends on the cut, docs/semantics.md §8). */
static void test_decode_nonfinite_cache(void **state)
{
    (void)state;
    routes_seen seen = {0};
    for (int d = 0; d < ROUTE_DECODE_DTYPES; d++)
        for (int64_t s_q = 1; s_q <= 3; s_q += 2)
            for (int k = 0; k < COUNT(poisons); k++)
                for (int in_v = 0; in_v <= 1; in_v++) {
                    const route_dtypes *dt = &route_decode_dtypes[d];
                    dspec s = {.q_dtype = dt->q, .cache_dtype = dt->cache, .s_q = s_q, .H = 3,
                               .L = 40, .R = 8, .block_size = 16, .form = (q_form)(d % 3),
                               .pad = in_v, .lse = true, .bf16_compute = dt->bf16_compute};
                    dspec_edge_lens(&s);
                    dcase c;
                    dcase_make(&c, &s, false);
                    bool *affected = calloc((size_t)(s.num_reqs * s_q * s.H), sizeof(bool));
                    poisoning p = {0};
                    poison_cache(&p, &c.pg, c.lens, s.num_reqs, s_q, s.H, s.L, s.R, in_v,
                                 poisons[k], affected);
                    dcase_inputs_changed(&c);
                    case_label_add(c.label, sizeof c.label, ", %g in the %s of a key",
                                   (double)poisons[k], in_v ? "V part" : "rope part");
                    cache_run r = {.c = &c, .p = &p, .affected = affected,
                                   .split_reads_inf_v = in_v && isinf(poisons[k]), .seen = &seen};
                    const mla_config cfg = case_config_of(&c.args);
                    assert_true(support_each_backend(MLA_OP_DECODE, &cfg, run_cache_poisoned, &r) >
                                0);
                    free(affected);
                    dcase_free(&c);
                }
    route_expect_every(&seen, "decode, inf and NaN in the cache");
}

typedef struct forward_run {
    fcase *c;
    const poisoning *p;
    const bool *affected;
    bool nan;
    routes_seen here, *seen;
} forward_run;

static void forward_once(fcase *c, const mla_backend_desc *b)
{
    memset(c->out_buf, GUARD, c->out_bytes);
    memset(c->lse_buf, GUARD, c->lse_bytes);
    mla_status st = case_run_forward(&c->f, c->s.threads, 0, c->label);
    if (st != MLA_OK)
        fail_msg("%s: %s: mla_decode_forward: %s: %s", b->name, c->label, mla_status_str(st),
                 mla_last_error());
    support_expect_ran(b);
}

/* On backend b, unsplit and split: the poisoned inputs change only the
 * affected rows, and a NaN makes all of each NaN. */
static void run_forward_poisoned(const mla_backend_desc *b, void *ctx)
{
    forward_run *r = ctx;
    fcase *c = r->c;
    const mla_config cfg = case_config_of_forward(&c->f);
    if (!route_takes_case(b, &cfg, &r->here, r->seen))
        return;
    const results res = fcase_results(c);
    for (int k = 0; k < 2; k++) {
        c->f.sched = schedules[k];
        poison_set(r->p, false);
        forward_once(c, b);
        snapshot clean = take(&res);
        poison_set(r->p, true);
        forward_once(c, b);
        char what[400];
        snprintf(what, sizeof what, "%s: %s, schedule %d", b->name, c->label, k);
        expect_contained(&res, &clean, r->affected, what);
        if (r->nan)
            expect_nan_rows(&res, c->s.q_dtype, r->affected, what);
        drop(&clean);
    }
    c->f.sched = NULL;
}

typedef enum forward_site { IN_Q_NOPE, IN_Q_PE, IN_CACHE_V, IN_CACHE_ROPE } forward_site;
static const char *const site_names[] = {"q_nope", "q_pe", "the cache's V part",
                                         "the cache's rope part"};

/* mla_decode_forward: inf and NaN in one (token, head) row of q per odd
 * request (its q_nope, which the absorption spreads over the row's latent,
 * or its q_pe) change that row alone; in a key of the cache, that
 * request's rows alone. */
static void test_forward_nonfinite(void **state)
{
    (void)state;
    routes_seen seen = {0};
    for (int d = 0; d < ROUTE_DECODE_DTYPES; d++)
        for (int k = 0; k < COUNT(poisons); k++)
            for (int site = IN_Q_NOPE; site <= IN_CACHE_ROPE; site++) {
                const route_dtypes *dt = &route_decode_dtypes[d];
                fspec s = {.q_dtype = dt->q, .cache_dtype = dt->cache, .kvb_dtype = dt->q,
                           .w_dtype = dt->q == MLA_DTYPE_BF16 ? MLA_DTYPE_BF16 : MLA_DTYPE_F32,
                           .s_q = 2, .H = 3, .L = 40, .R = 8, .P = 24, .V = 16,
                           .block_size = 16, .num_reqs = 4, .lens = {1, 17, 40, 70},
                           .pad = true, .lse = true, .threads = 2};
                fcase c;
                fcase_make(&c, &s);
                c.f.bf16_compute = dt->bf16_compute;
                bool *affected = calloc((size_t)(s.num_reqs * s.s_q * s.H), sizeof(bool));
                poisoning p = {0};
                if (site == IN_CACHE_V || site == IN_CACHE_ROPE) {
                    poison_cache(&p, &c.pg, c.lens, s.num_reqs, s.s_q, s.H, s.L, s.R,
                                 site == IN_CACHE_V, poisons[k], affected);
                } else {
                    for (int64_t b = 1; b < s.num_reqs; b += 2) {
                        const int64_t t = b * s.s_q + b % s.s_q, h = b % s.H;
                        const int64_t e = site == IN_Q_NOPE ? (b * 5) % s.P : s.P + (b * 3) % s.R;
                        poison_add(&p, s.q_dtype, c.q, t * c.f.q_token_stride +
                                   h * c.f.q_head_stride + e, poisons[k], 1.0f);
                        affected[t * s.H + h] = true;
                    }
                }
                case_label_add(c.label, sizeof c.label, ", %g in %s", (double)poisons[k],
                               site_names[site]);
                forward_run r = {.c = &c, .p = &p, .affected = affected,
                                 .nan = isnan(poisons[k]), .seen = &seen};
                const mla_config cfg = case_config_of_forward(&c.f);
                assert_true(support_each_backend(MLA_OP_DECODE, &cfg, run_forward_poisoned, &r) >
                            0);
                free(affected);
                fcase_free(&c);
            }
    route_expect_every(&seen, "decode forward, inf and NaN in q and the cache");
}

/* ---- merge_attn_states --------------------------------------------------------------- */

#define MT 37 /* tokens */
#define MH 3  /* heads */
#define MD 20 /* head dim */
#define MK 30 /* tokens with context: the later ones take the suffix */

typedef struct merge_case {
    mla_dtype dtype;
    unsigned char *prefix, *suffix, *out_buf;
    float prefix_lse[MH * MT], suffix_lse[MH * MT], out_lse[MH * MT];
    size_t out_bytes;
    mla_merge_attn_args args;
} merge_case;

static void merge_make(merge_case *m, mla_dtype dtype)
{
    memset(m, 0, sizeof *m);
    m->dtype = dtype;
    const int64_t n = MT * MH * MD, size = mla_dtype_size(dtype);
    m->prefix = case_alloc((size_t)(n * size));
    m->suffix = case_alloc((size_t)(n * size));
    for (int64_t i = 0; i < n; i++) {
        case_put_random(dtype, m->prefix, i);
        case_put_random(dtype, m->suffix, i);
    }
    for (int64_t i = 0; i < MH * MT; i++) { /* weights well above 0 on both sides */
        m->prefix_lse[i] = (float)(3.0 * case_uniform());
        m->suffix_lse[i] = (float)(3.0 * case_uniform());
    }
    m->out_bytes = (size_t)(n * size) + 2 * MARGIN;
    m->out_buf = case_alloc(m->out_bytes);
    m->args = (mla_merge_attn_args){.num_tokens = MT, .num_heads = MH, .head_dim = MD,
                                    .dtype = dtype, .prefix = m->prefix, .suffix = m->suffix,
                                    .token_stride = MH * MD, .head_stride = MD,
                                    .prefix_lse = m->prefix_lse, .suffix_lse = m->suffix_lse,
                                    .out = m->out_buf + MARGIN, .out_token_stride = MH * MD,
                                    .out_head_stride = MD, .out_lse = m->out_lse,
                                    .prefill_tokens_with_context = MK};
}

static void merge_free(merge_case *m)
{
    free(m->prefix);
    free(m->suffix);
    free(m->out_buf);
}

/* Out and out_lse of one run (out's margins included). */
typedef struct merge_result {
    unsigned char out[MT * MH * MD * 4 + 2 * MARGIN];
    float lse[MH * MT];
} merge_result;

static void merge_run(merge_case *m, const char *backend, merge_result *r)
{
    memset(m->out_buf, GUARD, m->out_bytes);
    memset(m->out_lse, GUARD, sizeof m->out_lse);
    mla_status st = mla_merge_attn_states(&m->args, 2);
    if (st != MLA_OK)
        fail_msg("%s: mla_merge_attn_states: %s: %s", backend, mla_status_str(st),
                 mla_last_error());
    assert_string_equal(mla_last_backend(), backend);
    memcpy(r->out, m->out_buf, m->out_bytes);
    memcpy(r->lse, m->out_lse, sizeof r->lse);
}

/* What one poisoning of a merge should do to element (t, h, e). */
typedef enum merge_poison {
    NAN_PREFIX_LSE, /* row (t, h): out and out_lse all NaN                   */
    NAN_SUFFIX_LSE, /* the same                                              */
    INF_PREFIX,     /* element e: +inf (both weights above 0); lse unchanged */
    NAN_SUFFIX,     /* element e: NaN; lse unchanged                         */
    NAN_PAST_K,     /* NaN in the prefix and its lse of a row t >= K, which
                       takes the suffix: nothing changes                      */
    MERGE_POISONS
} merge_poison;

typedef struct merge_ctx {
    merge_case *m;
} merge_ctx;

static void run_merge_poisons(const mla_backend_desc *b, void *ctx)
{
    merge_case *m = ((merge_ctx *)ctx)->m;
    const int64_t size = mla_dtype_size(m->dtype);
    merge_result *clean = calloc(1, sizeof *clean), *got = calloc(1, sizeof *got);
    merge_run(m, b->name, clean);
    for (int k = 0; k < MERGE_POISONS; k++) {
        const int64_t t = k == NAN_PAST_K ? MK + 3 : 5 + 7 * k, h = k % MH, e = (3 * k) % MD;
        const int64_t row = t * MH * MD + h * MD, at = row + e, lse_at = h * MT + t;
        poisoning p = {0};
        if (k == NAN_PREFIX_LSE || k == NAN_PAST_K)
            poison_add(&p, MLA_DTYPE_F32, m->prefix_lse, lse_at, NAN, 1.0f);
        if (k == NAN_SUFFIX_LSE)
            poison_add(&p, MLA_DTYPE_F32, m->suffix_lse, lse_at, NAN, 1.0f);
        if (k == INF_PREFIX || k == NAN_PAST_K)
            poison_add(&p, m->dtype, m->prefix, at, k == INF_PREFIX ? INFINITY : NAN, 1.0f);
        if (k == NAN_SUFFIX)
            poison_add(&p, m->dtype, m->suffix, at, NAN, 1.0f);
        merge_run(m, b->name, got);
        poison_set(&p, false);
        /* what changes, and to what; then everything else is the clean run's */
        const bool whole_row = k == NAN_PREFIX_LSE || k == NAN_SUFFIX_LSE;
        for (int64_t x = whole_row ? 0 : e; k != NAN_PAST_K && x < (whole_row ? MD : e + 1); x++) {
            const size_t byte = MARGIN + (size_t)((row + x) * size);
            const float v = oracle_load(m->dtype, got->out + MARGIN, row + x, 1.0f);
            if (k == INF_PREFIX ? v != INFINITY : !isnan(v))
                fail_msg("%s: %s, poisoning %d: out[%lld][%lld][%lld] = %g", b->name,
                         mla_dtype_name(m->dtype), k, (long long)t, (long long)h, (long long)x,
                         (double)v);
            memcpy(got->out + byte, clean->out + byte, (size_t)size);
        }
        if (whole_row) {
            if (!isnan(got->lse[lse_at]))
                fail_msg("%s: %s, NaN lse: out_lse %g", b->name, mla_dtype_name(m->dtype),
                         (double)got->lse[lse_at]);
            got->lse[lse_at] = clean->lse[lse_at];
        }
        if (memcmp(got, clean, sizeof *got) != 0)
            fail_msg("%s: %s, poisoning %d (token %lld, head %lld): a byte of out or out_lse "
                     "outside what it reaches changed", b->name, mla_dtype_name(m->dtype), k,
                     (long long)t, (long long)h);
    }
    free(clean);
    free(got);
}

/* merge_attn_states (§4): a NaN LSE makes its row NaN, out and LSE; an inf
 * or NaN value reaches its own element only; a row past K ignores its
 * prefix; every other byte is what the run without them gives. */
static void test_merge_nonfinite(void **state)
{
    (void)state;
    for (int d = 0; d < COUNT(route_flash_dtypes); d++) {
        merge_case m;
        merge_make(&m, route_flash_dtypes[d]);
        const mla_config cfg = {.q_dtype = m.dtype, .cache_dtype = m.dtype, .kv_lora_rank = MD,
                                .num_heads = MH, .block_size = 1};
        merge_ctx ctx = {&m};
        assert_true(support_each_backend(MLA_OP_PREFILL, &cfg, run_merge_poisons, &ctx) > 0);
        merge_free(&m);
    }
}

/* ---- the f32 route's scale in q --------------------------------------------------------- */

/* f32 q: the f32 route multiplies q by the scale before the dot product
 * (docs/semantics.md §8). Row (0, 0)'s rope element d0 is the least
 * subnormal, which the scale 1/8 takes to 0; row (0, 1)'s is 2^-100, which
 * stays; every other row's 0.5. Key 2 of request 0 holds -inf there. The
 * plain arithmetic gives that key logit -inf, weight 0, in every row; the
 * route gives it 0 * -inf = NaN in row (0, 0), whose out and lse are then
 * NaN, and the oracle's answer everywhere else. */
static void test_decode_scaled_q_underflow(void **state)
{
    (void)state;
    dspec s = {.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_F32, .s_q = 1, .H = 2, .L = 16,
               .R = 8, .block_size = 16, .num_reqs = 2, .lens = {5, 20}, .form = Q_CONCAT,
               .lse = true};
    dcase c;
    dcase_make(&c, &s, false);
    const int64_t d0 = s.L + 3;
    for (int64_t t = 0; t < s.num_reqs; t++)
        for (int64_t h = 0; h < s.H; h++)
            dcase_store_q(&c, t, h, d0, t == 0 && h == 0 ? FLT_TRUE_MIN
                                        : t == 0 && h == 1 ? 0x1p-100f
                                                           : 0.5f);
    oracle_store(MLA_DTYPE_F32, c.pg.cache.data, paged_row(&c.pg, 0, 2) + d0, -INFINITY, 1.0f);
    c.args.scale = 0.125f;
    dcase_inputs_changed(&c);
    assert_true(isfinite(c.want_lse[0]) && isfinite(c.want_lse[1]));
    c.want_lse[0] = NAN; /* request 0, head 0, query 0 */
    for (int64_t l = 0; l < s.L; l++)
        c.want_out[l] = NAN;
    case_label_add(c.label, sizeof c.label, ", a q element the scale takes to 0 against -inf");
    routes_seen seen = {0};
    route_decode_everywhere(&c, true, &seen);
    assert_true(seen.ran[0]);
    dcase_free(&c);
}

/* The same in flash attention: row (token 1, head 0) against k_pe's -inf
 * in key 2, which every head of request 0 sees. */
static void test_flash_scaled_q_underflow(void **state)
{
    (void)state;
    fa_spec s = {.dtype = MLA_DTYPE_F32, .H = 2, .qk_dim = 24, .v_dim = 16, .rope_dim = 8,
                 .causal = false, .scale = 0.125f, .num_seqs = 2, .q_lens = {3, 4},
                 .k_lens = {6, 9}, .layout = FA_PADDED, .lse = true, .threads = 2};
    fa_case c;
    fa_make(&c, &s, false);
    const mla_flash_attn_args *a = &c.args;
    const int64_t d0 = s.qk_dim - s.rope_dim + 5, tiny_t = 1;
    for (int64_t t = 0; t < c.T; t++)
        for (int64_t h = 0; h < s.H; h++)
            oracle_store(MLA_DTYPE_F32, c.q, t * a->q_token_stride + h * a->q_head_stride + d0,
                         t == tiny_t && h == 0 ? FLT_TRUE_MIN : 0.5f, 1.0f);
    oracle_store(MLA_DTYPE_F32, c.k_pe, 2 * a->k_pe_token_stride + 5, -INFINITY, 1.0f);
    c.inputs_sum = fa_inputs_checksum(&c);
    fa_oracle(&c);
    assert_true(isfinite(c.want_lse[tiny_t]));
    c.want_lse[tiny_t] = NAN; /* head 0 */
    for (int64_t e = 0; e < s.v_dim; e++)
        c.want_out[tiny_t * s.H * s.v_dim + e] = NAN;
    case_label_add(c.label, sizeof c.label, ", a q element the scale takes to 0 against -inf");
    routes_seen seen = {0};
    route_flash_everywhere(&c, &seen);
    assert_true(seen.ran[0]);
    fa_free(&c);
}

/* ---- fp8 saturation ---------------------------------------------------------------------- */

/* Multiples of the format's largest finite value (times the scale) past
 * which rounding alone would go on (e4m3: 480 is no value, its code NaN;
 * e5m2: 65536 is inf), then values whose quotient by the scale overflows
 * f32, and the infinities. */
static const float past_max[] = {1.0f, 1.03f, 1.07f, 1.125f, 1.5f, 4.0f, 1e6f};
static const float scales_fp8[] = {1.0f, 0.25f, 3.0f};
#define FP8_VALUES (2 * (COUNT(past_max) + 2) + 1)

static void expect_saturated(const format8 *f, mla_dtype src, float scale, const float *x,
                             const uint8_t *code, const float *back, const char *backend)
{
    const float max = (float)oracle_fp8_value(f, f->max_code);
    for (int i = 0; i < FP8_VALUES; i++) {
        char what[200];
        snprintf(what, sizeof what, "%s: %s from %s, scale %g: %g", backend, f->name,
                 mla_dtype_name(src), (double)scale, (double)x[i]);
        if (isnan(x[i])) {
            const bool nan_code = f->dtype == MLA_DTYPE_FP8_E4M3 ? (code[i] & 0x7f) == 0x7f
                                                                 : (code[i] & 0x7f) > 0x7c;
            if (!nan_code || !isnan(back[i]))
                fail_msg("%s: stored 0x%02x, read back %g; want NaN", what, code[i],
                         (double)back[i]);
            continue;
        }
        /* the test's values: at or past the largest finite */
        assert_true(isinf(x[i]) || fabsf(x[i] / scale) >= max * (1.0f - 0x1p-5f));
        const uint8_t want = (uint8_t)((signbit(x[i]) ? 0x80 : 0) | f->max_code);
        const float want_back = copysignf(max * scale, x[i]);
        if (code[i] != want || back[i] != want_back)
            fail_msg("%s: stored 0x%02x, read back %g; want 0x%02x, %g", what, code[i],
                     (double)back[i], want, (double)want_back);
    }
}

/* One format, source dtype and scale: the values through concat_and_cache
 * into a one-row cache, then read back by gather_cache into f32. */
static void saturate_once(const format8 *f, mla_dtype src, float scale, const char *backend)
{
    float x[FP8_VALUES];
    void *kv_c = malloc(FP8_VALUES * 4);
    const float max = (float)oracle_fp8_value(f, f->max_code);
    int n = 0;
    for (int sign = -1; sign <= 1; sign += 2) {
        for (int i = 0; i < COUNT(past_max); i++)
            x[n++] = (float)sign * max * scale * past_max[i];
        x[n++] = (float)sign * FLT_MAX;
        x[n++] = (float)sign * INFINITY;
    }
    x[n++] = NAN;
    for (int i = 0; i < n; i++) { /* as src holds them */
        oracle_store(src, kv_c, i, x[i], 1.0f);
        x[i] = oracle_load(src, kv_c, i, 1.0f);
    }
    uint8_t code[FP8_VALUES];
    mla_kv_cache cache = {.data = code, .dtype = f->dtype, .num_blocks = 1, .block_size = 1,
                          .width = n, .scale = scale};
    const int64_t slot = 0;
    mla_status st = mla_concat_and_cache(&cache, kv_c, n, NULL, 0, src, n, 0, &slot, 1, 1);
    if (st != MLA_OK)
        fail_msg("%s: mla_concat_and_cache: %s: %s", backend, mla_status_str(st), mla_last_error());
    assert_string_equal(mla_last_backend(), backend);
    float back[FP8_VALUES];
    const int32_t table = 0, cu[2] = {0, 1}, to_seq = 0;
    const mla_gather_spec spec = {.block_table = &table, .block_table_cols = 1, .num_reqs = 1,
                                  .cu_seq_lens = cu};
    st = mla_gather_cache(&cache, &spec, &to_seq, 1, back, MLA_DTYPE_F32, n, 1);
    if (st != MLA_OK)
        fail_msg("%s: mla_gather_cache: %s: %s", backend, mla_status_str(st), mla_last_error());
    expect_saturated(f, src, scale, x, code, back, backend);
    free(kv_c);
}

static void run_saturation(const mla_backend_desc *b, void *ctx)
{
    (void)ctx;
    static const format8 *const formats[] = {&ORACLE_E4M3, &ORACLE_E5M2};
    for (int f = 0; f < COUNT(formats); f++)
        for (int s = 0; s < COUNT(case_q_dtypes); s++)
            for (int k = 0; k < COUNT(scales_fp8); k++)
                saturate_once(formats[f], case_q_dtypes[s], scales_fp8[k], b->name);
}

/* §3.1: byte = saturate(x / scale): values past the largest finite, and
 * the infinities, store it with their sign (e4m3 0x7e, e5m2 0x7b), NaN a
 * NaN; gather reads value * scale back. Every source dtype, on every
 * backend of the convert group. */
static void test_fp8_saturation(void **state)
{
    (void)state;
    assert_true(support_each_backend(MLA_OP_CONVERT, NULL, run_saturation, NULL) > 0);
}

int main(void)
{
    route_register_twins();
    const struct CMUnitTest tests[] = {
        CASE_TEST(test_decode_extreme_logits),
        FA_TEST(test_flash_extreme_logits),
        CASE_TEST(test_decode_nonfinite_cache),
        CASE_TEST(test_forward_nonfinite),
        FA_TEST(test_merge_nonfinite),
        CASE_TEST(test_decode_scaled_q_underflow),
        FA_TEST(test_flash_scaled_q_underflow),
        CASE_TEST(test_fp8_saturation),
    };
    case_apply_filter();
    return cmocka_run_group_tests_name("numerics", tests, NULL, NULL);
}
