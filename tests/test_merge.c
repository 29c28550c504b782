/*
 * merge_attn_states (docs/semantics.md §4) and the slots it runs on
 * (merge_pair; scale_add_f32, which the decode combine shares). Every case runs on every backend this CPU has and on 1, 2 and 3
 * threads, and each result must be bit for bit the spec's f32 arithmetic
 * written out here (the weights and the sum in f32, each product and sum
 * rounded once, as the slot's contract fixes), so all backends and thread
 * counts agree by construction. The same rows are also held to the spec's
 * formula in double: exactly where the case makes it exact (empty sides,
 * equal LSEs, huge LSE gaps, NaN, rows past K), within rounding elsewhere.
 * Bad input returns its status and message and writes nothing.
 */
#include "support.h"

#include "oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))
#define GUARD 0xab
#define MAX_THREADS 3

/* ---- the scale_add_f32 slot ------------------------------------------------ */

/* y + w * x with both roundings, as the slot's type states it (the suites
 * build with -ffp-contract=off, so this is not fused). */
static float scale_add_scalar(float y, float x, float w)
{
    float product = w * x;
    return y + product;
}

static bool same_f32(float want, float got)
{
    return (isnan(want) && isnan(got)) || oracle_f32_bits(want) == oracle_f32_bits(got);
}

/* Inputs with every special value among ordinary ones. */
static float slot_value(uint64_t r)
{
    static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -3e38f, 3e38f};
    return r % 5 == 0 ? special[(r >> 8) % COUNT(special)]
                      : (float)((int64_t)(r >> 11) % 20001 - 10000) / 1237.0f;
}

/* n up to 70 straddles every vector width and tail; the pointers are offset
 * by one float from alignment. Guards around y must stay. */
static void scale_add_on(const mla_backend_desc *b, void *ctx)
{
    (void)ctx;
    enum { N = 1030, PAD = 8 };
    static const float weights[] = {0.5f, -1.75f, 0.0f, 1.0f, 3.3e-3f, INFINITY, NAN};
    float *x = malloc((N + 2 * PAD) * sizeof(float)), *y = malloc((N + 2 * PAD) * sizeof(float));
    float *y0 = malloc(N * sizeof(float));
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(y0);
    for (int64_t n = 0; n <= N; n = n < 70 ? n + 1 : n + 480) {
        for (int wi = 0; wi < COUNT(weights); wi++) {
            const float w = weights[wi];
            for (int i = 0; i < N + 2 * PAD; i++) {
                x[i] = slot_value(support_random());
                y[i] = oracle_f32_from(0x7fa5a5a5u); /* guard: a NaN pattern */
            }
            for (int64_t i = 0; i < n; i++)
                y[PAD + 1 + i] = y0[i] = slot_value(support_random());
            b->kernels.scale_add_f32(y + PAD + 1, x + PAD + 1, w, n);
            for (int64_t i = 0; i < n; i++)
                if (!same_f32(scale_add_scalar(y0[i], x[PAD + 1 + i], w), y[PAD + 1 + i]))
                    fail_msg("%s scale_add_f32 n=%lld w=%g [%lld]: %a + %g * %a gave %a", b->name,
                             (long long)n, (double)w, (long long)i, (double)y0[i], (double)w,
                             (double)x[PAD + 1 + i], (double)y[PAD + 1 + i]);
            for (int i = 0; i < N + 2 * PAD; i++)
                if ((i <= PAD || i > PAD + n) && oracle_f32_bits(y[i]) != 0x7fa5a5a5u)
                    fail_msg("%s scale_add_f32 n=%lld wrote outside y at %d", b->name,
                             (long long)n, i - PAD - 1);
        }
        /* y == x: y[i] + w * y[i] */
        for (int64_t i = 0; i < n; i++)
            y[i] = y0[i] = slot_value(support_random());
        b->kernels.scale_add_f32(y, y, 0.75f, n);
        for (int64_t i = 0; i < n; i++)
            if (!same_f32(scale_add_scalar(y0[i], y0[i], 0.75f), y[i]))
                fail_msg("%s scale_add_f32 in place n=%lld [%lld]", b->name, (long long)n,
                         (long long)i);
    }
    free(x);
    free(y);
    free(y0);
}

static void test_scale_add_bit_exact(void **state)
{
    (void)state;
    assert_true(support_each_backend(MLA_OP_PREFILL, NULL, scale_add_on, NULL) >= 1);
}

/* ---- the merge_pair slot ---------------------------------------------------- */

/* The slot's contract restated: (0 + w0 * p) + w1 * s, each operation
 * rounded to f32, then rounded to the dtype by the oracle's conversion. */
static void merge_pair_expected(mla_dtype dtype, void *out, const void *p, const void *s, float w0,
                                float w1, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float y = 0.0f + w0 * oracle_load(dtype, p, i, 1.0f);
        float ws = w1 * oracle_load(dtype, s, i, 1.0f);
        oracle_store(dtype, out, i, y + ws, 1.0f);
    }
}

/* Element i of two arrays of dtype: the same bits, or both NaN. */
static bool same_element(mla_dtype dtype, const void *want, const void *got, int64_t i)
{
    const int64_t size = mla_dtype_size(dtype);
    if (memcmp((const char *)want + i * size, (const char *)got + i * size, (size_t)size) == 0)
        return true;
    return isnan(oracle_load(dtype, want, i, 1.0f)) && isnan(oracle_load(dtype, got, i, 1.0f));
}

/* One call at element offset `shift` from 64-byte alignment (0: the
 * streaming path; 1: unaligned stores), out apart from the inputs or one of
 * them; guard bytes around out must stay. */
static void merge_pair_case(const mla_backend_desc *b, mla_dtype dtype, int64_t n, int64_t shift,
                            int in_place, float w0, float w1)
{
    enum { PAD = 64 };
    const int64_t size = dtype == MLA_DTYPE_F32 ? 4 : 2, bytes = (n + shift) * size + 2 * PAD;
    char *p = aligned_alloc(64, (size_t)((bytes + 63) / 64 * 64));
    char *s = aligned_alloc(64, (size_t)((bytes + 63) / 64 * 64));
    char *o = aligned_alloc(64, (size_t)((bytes + 63) / 64 * 64));
    char *want = malloc((size_t)(n * size + 1));
    assert_non_null(p);
    assert_non_null(s);
    assert_non_null(o);
    assert_non_null(want);
    memset(o, GUARD, (size_t)bytes);
    char *pi = p + PAD + shift * size, *si = s + PAD + shift * size, *oi = o + PAD + shift * size;
    for (int64_t i = 0; i < n; i++) {
        oracle_store(dtype, pi, i, slot_value(support_random()), 1.0f);
        oracle_store(dtype, si, i, slot_value(support_random()), 1.0f);
    }
    merge_pair_expected(dtype, want, pi, si, w0, w1, n);
    char *dst = in_place == 1 ? pi : in_place == 2 ? si : oi;
    b->kernels.merge_pair(dst, pi, si, dtype, w0, w1, n);
    b->kernels.store_fence();
    for (int64_t i = 0; i < n; i++)
        if (!same_element(dtype, want, dst, i))
            fail_msg("%s merge_pair %s n=%lld shift=%lld in_place=%d w=(%g, %g) [%lld]: %a, %a gave %a",
                     b->name, mla_dtype_name(dtype), (long long)n, (long long)shift, in_place,
                     (double)w0, (double)w1, (long long)i, (double)oracle_load(dtype, pi, i, 1.0f),
                     (double)oracle_load(dtype, si, i, 1.0f), (double)oracle_load(dtype, dst, i, 1.0f));
    if (!in_place)
        for (int64_t at = 0; at < bytes; at++)
            if ((at < PAD + shift * size || at >= PAD + (shift + n) * size) && (uint8_t)o[at] != GUARD)
                fail_msg("%s merge_pair %s n=%lld shift=%lld wrote outside out at byte %lld", b->name,
                         mla_dtype_name(dtype), (long long)n, (long long)shift,
                         (long long)(at - PAD - shift * size));
    free(p);
    free(s);
    free(o);
    free(want);
}

/* n straddles every vector width, 64-byte step and tail; weights include 0,
 * infinity and NaN; inputs every special value. */
static void merge_pair_on(const mla_backend_desc *b, void *ctx)
{
    (void)ctx;
    static const mla_dtype dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16};
    static const float weights[][2] = {{0.25f, 0.75f}, {1.0f, 0.0f}, {0.0f, 1.0f}, {3.3e-3f, 0.9967f},
                                       {-1.75f, 2.5f}, {INFINITY, 0.5f}, {NAN, 0.5f}};
    for (int d = 0; d < COUNT(dtypes); d++)
        for (int64_t n = 0; n <= 1030; n = n < 70 ? n + 1 : n < 130 ? n + 29 : n + 900)
            for (int wi = 0; wi < COUNT(weights); wi++) {
                merge_pair_case(b, dtypes[d], n, 0, 0, weights[wi][0], weights[wi][1]);
                merge_pair_case(b, dtypes[d], n, 1, 0, weights[wi][0], weights[wi][1]);
            }
    for (int d = 0; d < COUNT(dtypes); d++)
        for (int64_t n = 1; n <= 200; n += 33) {
            merge_pair_case(b, dtypes[d], n, 0, 1, 0.4f, 0.6f);
            merge_pair_case(b, dtypes[d], n, 1, 2, 0.4f, 0.6f);
        }
}

static void test_merge_pair_bit_exact(void **state)
{
    (void)state;
    assert_true(support_each_backend(MLA_OP_PREFILL, NULL, merge_pair_on, NULL) >= 1);
}

/* ---- the softmax_tile slot --------------------------------------------------- */

/* The slot's contract restated value by value, with the backend's own exp
 * (one value per call), into the expected S, m, l and alpha. */
static void softmax_tile_expected(const mla_backend_desc *b, float *s, int64_t n, int64_t ld,
                                  int64_t nr, float scale, const int64_t *hidden, float *m,
                                  float *l, float *alpha)
{
    for (int64_t r = 0; r < ld; r++) {
        float mx = m[r], sum = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            float *v = &s[j * ld + r];
            if (scale != 1.0f && r < nr)
                *v *= scale;
            if (hidden && r < hidden[j])
                *v = -INFINITY;
            if (r < nr)
                mx = *v > mx ? *v : mx;
        }
        if (!(mx > m[r] + MLA_SOFTMAX_RESCALE_SLACK)) /* within the slack: m kept */
            mx = m[r];
        float use = mx == -INFINITY ? 0.0f : mx, a = m[r] - use;
        b->kernels.exp_f32(&a, &a, 1);
        for (int64_t j = 0; j < n; j++) {
            float *v = &s[j * ld + r];
            *v -= use;
            b->kernels.exp_f32(v, v, 1);
            sum += *v;
        }
        alpha[r] = a;
        m[r] = mx;
        if (r < nr)
            l[r] = l[r] * a + sum;
    }
}

/* Tiles of 1 to 256 keys over 16 to 128 rows (some padding), scales 1,
 * positive, 0 and negative, with and without a causal mask, rows whose max
 * is still -inf, and special scores: every value bit for bit (NaN as NaN). */
static void softmax_tile_on(const mla_backend_desc *b, void *ctx)
{
    (void)ctx;
    enum { N = 256, LD = 128 };
    static const int64_t ns[] = {1, 2, 15, 64, 129, 256};
    static const int64_t lds[] = {16, 48, 128};
    static const float scales[] = {1.0f, 0.1352f, 0.0f, -0.5f};
    float *s = malloc(N * LD * sizeof(float)), *want = malloc(N * LD * sizeof(float));
    float st[3][LD], want_st[3][LD]; /* m, l, alpha */
    int64_t hidden[N];
    assert_non_null(s);
    assert_non_null(want);
    for (int ni = 0; ni < COUNT(ns); ni++)
        for (int li = 0; li < COUNT(lds); li++)
            for (int si = 0; si < COUNT(scales); si++)
                for (int masked = 0; masked < 2; masked++) {
                    const int64_t n = ns[ni], ld = lds[li], nr = ld - (ni + si) % 7;
                    for (int64_t i = 0; i < n * ld; i++) {
                        uint64_t r = support_random();
                        s[i] = r % 61 == 0 ? slot_value(r) : (float)((int64_t)(r >> 11) % 2001 - 1000) / 97.0f;
                        want[i] = s[i];
                    }
                    for (int64_t r = 0; r < ld; r++) {
                        uint64_t x = support_random();
                        st[0][r] = x % 4 == 0 ? -INFINITY : (float)(x >> 40 & 0xff) / 17.0f;
                        st[1][r] = st[0][r] == -INFINITY ? 0.0f : (float)(x >> 20 & 0xfff) / 64.0f;
                        st[2][r] = 0.0f;
                        for (int q = 0; q < 3; q++)
                            want_st[q][r] = st[q][r];
                    }
                    for (int64_t j = 0; j < n; j++) /* the diagonal's shape: later keys hide more */
                        hidden[j] = j * nr / n;
                    const int64_t *h = masked ? hidden : NULL;
                    b->kernels.softmax_tile(s, n, ld, nr, scales[si], h, st[0], st[1], st[2]);
                    softmax_tile_expected(b, want, n, ld, nr, scales[si], h, want_st[0],
                                          want_st[1], want_st[2]);
                    for (int64_t i = 0; i < n * ld; i++)
                        if (!same_f32(want[i], s[i]))
                            fail_msg("%s softmax_tile n=%lld ld=%lld scale=%g%s: S[%lld][%lld] = %a, "
                                     "want %a", b->name, (long long)n, (long long)ld,
                                     (double)scales[si], masked ? " masked" : "",
                                     (long long)(i / ld), (long long)(i % ld), (double)s[i],
                                     (double)want[i]);
                    for (int q = 0; q < 3; q++)
                        for (int64_t r = 0; r < (q == 1 ? nr : ld); r++)
                            if (!same_f32(want_st[q][r], st[q][r]))
                                fail_msg("%s softmax_tile n=%lld ld=%lld scale=%g%s: %s[%lld] = %a, "
                                         "want %a", b->name, (long long)n, (long long)ld,
                                         (double)scales[si], masked ? " masked" : "",
                                         q == 0 ? "m" : q == 1 ? "l" : "alpha", (long long)r,
                                         (double)st[q][r], (double)want_st[q][r]);
                }
    free(s);
    free(want);
}

static void test_softmax_tile(void **state)
{
    (void)state;
    assert_true(support_each_backend(MLA_OP_PREFILL, NULL, softmax_tile_on, NULL) >= 1);
}

/* ---- merge cases ------------------------------------------------------------ */

/* LSE pairs of the edge cases; `exact`: the spec's formula in double,
 * rounded to the output dtype, is the row bit for bit (±0 aside). */
static const struct {
    float p, s;
    bool exact;
} edge_lse[] = {
    {1.5f, -0.25f, false},       {INFINITY, 2.0f, true},      {-INFINITY, 2.0f, true},
    {2.0f, INFINITY, true},      {2.0f, -INFINITY, true},     {INFINITY, INFINITY, true},
    {-INFINITY, -INFINITY, true}, {INFINITY, -INFINITY, true}, {-INFINITY, INFINITY, true},
    {NAN, 1.0f, true},           {1.0f, NAN, true},           {NAN, -INFINITY, true},
    {INFINITY, NAN, true},       {-INFINITY, NAN, true},      {NAN, NAN, true},
    {3.0f, 3.0f, true},          {-7.5f, -7.5f, true},        {100.0f, -100.0f, true},
    {-100.0f, 100.0f, true},     {3e38f, -3e38f, true},       {-3e38f, 3e38f, true},
    {88.5f, 87.0f, false},       {-0.0f, 0.0f, true},
};

typedef enum { OUT_OWN, OUT_IS_PREFIX, OUT_IS_SUFFIX } out_kind;
typedef enum { LSE_EDGE, LSE_RANDOM } lse_kind;

typedef struct merge_case {
    const char *name;
    mla_dtype dtype;
    int64_t T, H, D;
    int64_t ts, hs;   /* inputs' strides; 0: dense                      */
    int64_t ots, ohs; /* out's (OUT_OWN only); 0: dense                 */
    int64_t K;        /* as passed                                       */
    out_kind out;
    lse_kind lse;
    bool no_out_lse;
} merge_case;

/* A case's buffers: inputs as made (kept, since out may overwrite one), the
 * out buffer as it starts and as it must end (rows written, all else as it
 * was), and the same for out_lse. */
typedef struct merge_data {
    merge_case c;
    int64_t elem, in_elems, out_elems, lse_n, K;
    unsigned char *prefix0, *suffix0, *out0, *want, *buf;
    unsigned char *prefix, *suffix; /* what the call reads: fresh copies  */
    float *plse, *slse, *olse0, *want_lse, *olse;
    bool *row_exact; /* [H*T] the edge pair's flag                         */
} merge_data;

static int64_t in_index(const merge_case *c, int64_t t, int64_t h, int64_t e)
{
    return t * c->ts + h * c->hs + e;
}

static int64_t out_index(const merge_case *c, int64_t t, int64_t h, int64_t e)
{
    return t * c->ots + h * c->ohs + e;
}

static void fill_guard(void *p, size_t bytes)
{
    memset(p, GUARD, bytes);
}

static float random_row_value(void)
{
    return (float)support_random_in(-40000, 40000) / 9973.0f;
}

static float random_lse(void)
{
    int64_t r = support_random_in(0, 19);
    return r == 0 ? -INFINITY : r == 1 ? INFINITY : (float)support_random_in(-3000, 3000) / 97.0f;
}

/* The spec's merge of one row in f32, each operation rounded once: m and
 * the weights as §4 states them, out = 0 + wp * prefix, then + ws * suffix. */
static float spec_f32_row(float p, float s, const float *pr, const float *sr, int64_t D, float *row)
{
    bool p_empty = isinf(p), s_empty = isinf(s);
    if (isnan(p) || isnan(s)) {
        for (int64_t e = 0; e < D; e++)
            row[e] = NAN;
        return NAN;
    }
    if (p_empty && s_empty) {
        for (int64_t e = 0; e < D; e++)
            row[e] = 0.0f;
        return -INFINITY;
    }
    float m = p_empty ? s : s_empty ? p : p > s ? p : s;
    float wp = p_empty ? 0.0f : expf(p - m), ws = s_empty ? 0.0f : expf(s - m);
    float sum = wp + ws, a = wp / sum, b = ws / sum;
    for (int64_t e = 0; e < D; e++) {
        float x = 0.0f + a * pr[e];
        row[e] = x + b * sr[e];
    }
    return m + logf(sum);
}

/* The same in double: out = (wp/sum) prefix + (ws/sum) suffix. */
static double spec_double_row(double p, double s, const float *pr, const float *sr, int64_t D,
                              double *row)
{
    bool p_empty = isinf(p), s_empty = isinf(s);
    if (isnan(p) || isnan(s) || (p_empty && s_empty)) {
        for (int64_t e = 0; e < D; e++)
            row[e] = isnan(p) || isnan(s) ? NAN : 0.0;
        return isnan(p) || isnan(s) ? NAN : -INFINITY;
    }
    double m = p_empty ? s : s_empty ? p : fmax(p, s);
    double wp = p_empty ? 0.0 : exp(p - m), ws = s_empty ? 0.0 : exp(s - m), sum = wp + ws;
    for (int64_t e = 0; e < D; e++)
        row[e] = wp / sum * pr[e] + ws / sum * sr[e];
    return m + log(sum);
}

static void *alloc_bytes(int64_t bytes)
{
    void *p = malloc((size_t)(bytes > 0 ? bytes : 1));
    assert_non_null(p);
    return p;
}

static int64_t view_elems(int64_t T, int64_t H, int64_t D, int64_t ts, int64_t hs)
{
    return T == 0 ? 0 : (T - 1) * ts + (H - 1) * hs + D;
}

/* Row (t, h) of the prefix and suffix inputs, as f32. */
static void load_inputs(const merge_data *d, int64_t t, int64_t h, float *pr, float *sr)
{
    const merge_case *k = &d->c;
    for (int64_t e = 0; e < k->D; e++) {
        pr[e] = oracle_load(k->dtype, d->prefix0, in_index(k, t, h, e), 1.0f);
        sr[e] = oracle_load(k->dtype, d->suffix0, in_index(k, t, h, e), 1.0f);
    }
}

/* Resolves the case's strides, makes its inputs and its expected outputs. */
static void make_case(merge_data *d, const merge_case *c)
{
    memset(d, 0, sizeof *d);
    d->c = *c;
    merge_case *k = &d->c;
    if (!k->hs)
        k->hs = k->D;
    if (!k->ts)
        k->ts = k->H * k->hs;
    if (k->out != OUT_OWN) {
        k->ots = k->ts;
        k->ohs = k->hs;
    }
    if (!k->ohs)
        k->ohs = k->D;
    if (!k->ots)
        k->ots = k->H * k->ohs;
    d->elem = mla_dtype_size(k->dtype);
    d->in_elems = view_elems(k->T, k->H, k->D, k->ts, k->hs);
    d->out_elems = view_elems(k->T, k->H, k->D, k->ots, k->ohs);
    d->lse_n = k->H * k->T;
    d->K = k->K == MLA_MERGE_ALL_TOKENS ? k->T : k->K;
    d->prefix0 = alloc_bytes(d->in_elems * d->elem);
    d->suffix0 = alloc_bytes(d->in_elems * d->elem);
    d->prefix = alloc_bytes(d->in_elems * d->elem);
    d->suffix = alloc_bytes(d->in_elems * d->elem);
    d->out0 = alloc_bytes(d->out_elems * d->elem);
    d->want = alloc_bytes(d->out_elems * d->elem);
    d->buf = alloc_bytes(d->out_elems * d->elem);
    d->plse = alloc_bytes(d->lse_n * 4);
    d->slse = alloc_bytes(d->lse_n * 4);
    d->olse0 = alloc_bytes(d->lse_n * 4);
    d->want_lse = alloc_bytes(d->lse_n * 4);
    d->olse = alloc_bytes(d->lse_n * 4);
    d->row_exact = alloc_bytes(d->lse_n);
    fill_guard(d->prefix0, (size_t)(d->in_elems * d->elem));
    fill_guard(d->suffix0, (size_t)(d->in_elems * d->elem));
    fill_guard(d->olse0, (size_t)d->lse_n * 4);
    for (int64_t t = 0; t < k->T; t++)
        for (int64_t h = 0; h < k->H; h++) {
            for (int64_t e = 0; e < k->D; e++) {
                oracle_store(k->dtype, d->prefix0, in_index(k, t, h, e), random_row_value(), 1.0f);
                oracle_store(k->dtype, d->suffix0, in_index(k, t, h, e), random_row_value(), 1.0f);
            }
            int64_t at = h * k->T + t, pair = (t * k->H + h) % COUNT(edge_lse);
            bool edge = k->lse == LSE_EDGE;
            d->plse[at] = edge ? edge_lse[pair].p : random_lse();
            d->slse[at] = edge ? edge_lse[pair].s : random_lse();
            d->row_exact[at] = edge && edge_lse[pair].exact;
        }
    /* out starts as a guard-filled buffer, or as the input it is */
    if (k->out == OUT_OWN)
        fill_guard(d->out0, (size_t)(d->out_elems * d->elem));
    else
        memcpy(d->out0, k->out == OUT_IS_PREFIX ? d->prefix0 : d->suffix0,
               (size_t)(d->out_elems * d->elem));
    memcpy(d->want, d->out0, (size_t)(d->out_elems * d->elem));
    memcpy(d->want_lse, d->olse0, (size_t)d->lse_n * 4);
    float *pr = alloc_bytes(k->D * 4), *sr = alloc_bytes(k->D * 4), *row = alloc_bytes(k->D * 4);
    for (int64_t t = 0; t < k->T; t++)
        for (int64_t h = 0; h < k->H; h++) {
            int64_t at = h * k->T + t;
            load_inputs(d, t, h, pr, sr);
            float lse = d->slse[at];
            if (t < d->K)
                lse = spec_f32_row(d->plse[at], d->slse[at], pr, sr, k->D, row);
            for (int64_t e = 0; e < k->D; e++) /* rows past K: the suffix's bytes */
                if (t < d->K)
                    oracle_store(k->dtype, d->want, out_index(k, t, h, e), row[e], 1.0f);
                else
                    memcpy(d->want + out_index(k, t, h, e) * d->elem,
                           d->suffix0 + in_index(k, t, h, e) * d->elem, (size_t)d->elem);
            if (!k->no_out_lse)
                d->want_lse[at] = lse;
        }
    free(pr);
    free(sr);
    free(row);
}

static void free_case(merge_data *d)
{
    void *all[] = {d->prefix0, d->suffix0, d->prefix, d->suffix, d->out0, d->want, d->buf,
                   d->plse, d->slse, d->olse0, d->want_lse, d->olse, d->row_exact};
    for (int i = 0; i < COUNT(all); i++)
        free(all[i]);
}

/* The call's arguments, pointing at fresh copies of the inputs and of out's
 * and out_lse's starting contents. */
static mla_merge_attn_args fresh_args(merge_data *d)
{
    const merge_case *k = &d->c;
    memcpy(d->prefix, d->prefix0, (size_t)(d->in_elems * d->elem));
    memcpy(d->suffix, d->suffix0, (size_t)(d->in_elems * d->elem));
    memcpy(d->buf, d->out0, (size_t)(d->out_elems * d->elem));
    memcpy(d->olse, d->olse0, (size_t)d->lse_n * 4);
    void *out = k->out == OUT_IS_PREFIX ? d->prefix : k->out == OUT_IS_SUFFIX ? d->suffix : d->buf;
    return (mla_merge_attn_args){
        .num_tokens = k->T, .num_heads = k->H, .head_dim = k->D, .dtype = k->dtype,
        .prefix = d->prefix, .suffix = d->suffix, .token_stride = k->ts, .head_stride = k->hs,
        .prefix_lse = d->plse, .suffix_lse = d->slse, .out = out, .out_token_stride = k->ots,
        .out_head_stride = k->ohs, .out_lse = k->no_out_lse ? NULL : d->olse,
        .prefill_tokens_with_context = k->K};
}

/* The output rows against the spec's formula in double: exactly for the
 * exact edge pairs and for rows past K, within rounding elsewhere. */
static void expect_double_formula(const merge_data *d, const void *out, const char *who)
{
    const merge_case *k = &d->c;
    float *pr = alloc_bytes(k->D * 4), *sr = alloc_bytes(k->D * 4);
    double *row = alloc_bytes(k->D * 8);
    /* f32 rounding of the weights and sums, then the output dtype's */
    double rel = k->dtype == MLA_DTYPE_F32 ? 1e-6 : k->dtype == MLA_DTYPE_BF16 ? 8e-3 : 1e-3;
    for (int64_t t = 0; t < k->T; t++)
        for (int64_t h = 0; h < k->H; h++) {
            int64_t at = h * k->T + t;
            load_inputs(d, t, h, pr, sr);
            bool past = t >= d->K, exact = past || d->row_exact[at];
            double lse = past ? d->slse[at] : spec_double_row(d->plse[at], d->slse[at], pr, sr,
                                                                 k->D, row);
            for (int64_t e = 0; e < k->D; e++) {
                double want = past ? sr[e] : row[e];
                float got = oracle_load(k->dtype, out, out_index(k, t, h, e), 1.0f);
                unsigned char rounded[4];
                oracle_store(k->dtype, rounded, 0, (float)want, 1.0f);
                float want_stored = oracle_load(k->dtype, rounded, 0, 1.0f);
                bool ok = isnan(want) ? isnan(got)
                          : exact     ? got == want_stored
                                      : fabs(got - want) <= rel * (fabs(pr[e]) + fabs(sr[e]));
                if (!ok)
                    fail_msg("%s %s: row (t %lld, h %lld)[%lld] with LSEs %g, %g: got %.9g, the "
                             "formula gives %.9g", who, k->name, (long long)t, (long long)h,
                             (long long)e, (double)d->plse[at], (double)d->slse[at], (double)got,
                             want);
            }
            if (k->no_out_lse)
                continue;
            float got = d->olse[at];
            bool ok = isnan(lse) ? isnan(got)
                      : isinf(lse) || past ? got == (float)lse
                                           : fabs(got - lse) <= 1e-6 * (fabs(lse) + 1.0);
            if (!ok)
                fail_msg("%s %s: LSE (t %lld, h %lld) with %g, %g: got %.9g, the formula gives "
                         "%.9g", who, k->name, (long long)t, (long long)h, (double)d->plse[at],
                         (double)d->slse[at], (double)got, lse);
        }
    free(pr);
    free(sr);
    free(row);
}

/* The whole out buffer (rows and the bytes between them) and out_lse are
 * the expected ones; the input out did not alias is unchanged. */
static void expect_result(const merge_data *d, const mla_merge_attn_args *a, const char *who)
{
    const merge_case *k = &d->c;
    const unsigned char *out = a->out;
    for (int64_t i = 0; i < d->out_elems; i++)
        if (!same_element(d->c.dtype, d->want, out, i))
            fail_msg("%s %s: out element %lld is %g, want %g", who, k->name, (long long)i,
                     (double)oracle_load(k->dtype, out, i, 1.0f),
                     (double)oracle_load(k->dtype, d->want, i, 1.0f));
    for (int64_t i = 0; i < d->lse_n; i++)
        if (!same_f32(d->want_lse[i], d->olse[i]))
            fail_msg("%s %s: out_lse[%lld] = %a, want %a", who, k->name, (long long)i,
                     (double)d->olse[i], (double)d->want_lse[i]);
    if (k->out != OUT_IS_PREFIX)
        assert_memory_equal(d->prefix, d->prefix0, (size_t)(d->in_elems * d->elem));
    if (k->out != OUT_IS_SUFFIX)
        assert_memory_equal(d->suffix, d->suffix0, (size_t)(d->in_elems * d->elem));
    expect_double_formula(d, out, who);
}

static void merge_on(const mla_backend_desc *b, void *ctx)
{
    merge_data *d = ctx;
    for (int threads = 1; threads <= MAX_THREADS; threads++) {
        mla_merge_attn_args a = fresh_args(d);
        mla_status st = mla_merge_attn_states(&a, threads);
        if (st != MLA_OK)
            fail_msg("%s %s: %s (%s)", b->name, d->c.name, mla_status_str(st), mla_last_error());
        support_expect_ran(b);
        expect_result(d, &a, b->name);
    }
}

static void run_cases(const merge_case *cases, int count)
{
    static const mla_dtype dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16};
    for (int i = 0; i < count; i++)
        for (int di = 0; di < COUNT(dtypes); di++) {
            merge_case c = cases[i];
            c.dtype = dtypes[di];
            merge_data d;
            make_case(&d, &c);
            mla_config cfg = {.q_dtype = c.dtype, .cache_dtype = c.dtype, .kv_lora_rank = c.D,
                              .rope_dim = 0, .num_heads = c.H, .block_size = 1};
            assert_true(support_each_backend(MLA_OP_PREFILL, &cfg, merge_on, &d) >= 1);
            free_case(&d);
        }
}

/* Every edge pair of §4 (each row its own pair), with every K. */
static void test_edge_cases(void **state)
{
    (void)state;
    const int64_t ALL = MLA_MERGE_ALL_TOKENS;
    const merge_case cases[] = {
        {.name = "edges, K all", .T = 9, .H = 3, .D = 37, .K = ALL},
        {.name = "edges, K = T", .T = 9, .H = 3, .D = 37, .K = 9},
        {.name = "edges, K = 4", .T = 9, .H = 3, .D = 37, .K = 4},
        {.name = "edges, K = 0", .T = 9, .H = 3, .D = 37, .K = 0},
        {.name = "one row", .T = 1, .H = 1, .D = 1, .K = ALL},
        {.name = "no tokens", .T = 0, .H = 2, .D = 16, .K = ALL},
    };
    run_cases(cases, COUNT(cases));
}

/* Padded strides, out in its own layout (head-major) or as an input. */
static void test_layouts(void **state)
{
    (void)state;
    const int64_t ALL = MLA_MERGE_ALL_TOKENS;
    const merge_case cases[] = {
        {.name = "padded", .T = 6, .H = 4, .D = 20, .hs = 23, .ts = 4 * 23 + 5, .ohs = 21,
         .ots = 4 * 21 + 3, .K = ALL},
        {.name = "out head-major", .T = 6, .H = 4, .D = 20, .hs = 20, .ts = 80, .ots = 21,
         .ohs = 6 * 21 + 2, .K = 5},
        {.name = "out is prefix", .T = 6, .H = 4, .D = 19, .hs = 24, .ts = 100, .K = 5,
         .out = OUT_IS_PREFIX},
        {.name = "out is suffix", .T = 6, .H = 4, .D = 19, .hs = 24, .ts = 100, .K = 4,
         .out = OUT_IS_SUFFIX},
        {.name = "no out_lse", .T = 5, .H = 5, .D = 17, .K = 3, .no_out_lse = true},
        {.name = "random LSEs", .T = 11, .H = 3, .D = 64, .K = 9, .lse = LSE_RANDOM},
    };
    run_cases(cases, COUNT(cases));
}

/* Big enough that 2 and 3 threads fork; rows wider than a merge step. */
static void test_threads_and_wide_rows(void **state)
{
    (void)state;
    const int64_t ALL = MLA_MERGE_ALL_TOKENS;
    const merge_case cases[] = {
        {.name = "forking", .T = 97, .H = 5, .D = 131, .K = 90, .lse = LSE_RANDOM},
        {.name = "wide rows", .T = 15, .H = 4, .D = 2100, .K = ALL, .lse = LSE_RANDOM},
        {.name = "wide rows, edges", .T = 8, .H = 3, .D = 1500, .K = 7},
        {.name = "wide rows, out is suffix", .T = 5, .H = 2, .D = 1030, .K = ALL,
         .out = OUT_IS_SUFFIX, .lse = LSE_RANDOM},
    };
    run_cases(cases, COUNT(cases));
}

/* ---- bad input -------------------------------------------------------------- */

enum { BT = 4, BH = 2, BD = 8, BN = BT * BH * BD };

typedef struct bad_env {
    float prefix[BN], suffix[BN], out[BN + 16], plse[BH * BT + 4], slse[BH * BT], olse[BH * BT];
} bad_env;

/* A good call's arguments over env: dense f32, out_lse given. */
static mla_merge_attn_args good_args(bad_env *e)
{
    return (mla_merge_attn_args){
        .num_tokens = BT, .num_heads = BH, .head_dim = BD, .dtype = MLA_DTYPE_F32,
        .prefix = e->prefix, .suffix = e->suffix, .token_stride = BH * BD, .head_stride = BD,
        .prefix_lse = e->plse, .suffix_lse = e->slse, .out = e->out, .out_token_stride = BH * BD,
        .out_head_stride = BD, .out_lse = e->olse,
        .prefill_tokens_with_context = MLA_MERGE_ALL_TOKENS};
}

/* The k-th bad call: its arguments, what is wrong with them, the status
 * and a word of the message. false past the last. */
static bool bad_case(int k, bad_env *e, mla_merge_attn_args *a, const char **bad_input,
                     mla_status *st, const char **needle)
{
    *a = good_args(e);
    *st = MLA_ERR_INVALID_ARGUMENT;
    switch (k) {
    case 0: a->num_tokens = -1, *needle = "num_tokens", *bad_input = "num_tokens -1"; break;
    case 1: a->num_heads = 0, *needle = "num_heads", *bad_input = "num_heads 0"; break;
    case 2: a->head_dim = 0, *needle = "head_dim", *bad_input = "head_dim 0"; break;
    case 3:
        a->dtype = MLA_DTYPE_FP8_E4M3, *st = MLA_ERR_UNSUPPORTED, *needle = "fp8_e4m3",
        *bad_input = "dtype fp8_e4m3";
        break;
    case 4:
        a->dtype = (mla_dtype)77, *st = MLA_ERR_UNSUPPORTED, *needle = "dtype",
        *bad_input = "dtype not an mla_dtype";
        break;
    case 5:
        a->prefill_tokens_with_context = BT + 1, *needle = "prefill_tokens_with_context",
        *bad_input = "prefill_tokens_with_context past num_tokens";
        break;
    case 6:
        a->prefill_tokens_with_context = -2, *needle = "prefill_tokens_with_context",
        *bad_input = "prefill_tokens_with_context -2";
        break;
    case 7: a->prefix = NULL, *needle = "prefix is NULL", *bad_input = "prefix NULL"; break;
    case 8: a->suffix = NULL, *needle = "suffix is NULL", *bad_input = "suffix NULL"; break;
    case 9: a->out = NULL, *needle = "out is NULL", *bad_input = "out NULL"; break;
    case 10:
        a->prefix_lse = NULL, *needle = "prefix_lse is NULL", *bad_input = "prefix_lse NULL";
        break;
    case 11:
        a->suffix_lse = NULL, *needle = "suffix_lse is NULL", *bad_input = "suffix_lse NULL";
        break;
    case 12: a->head_stride = -BD, *needle = "negative", *bad_input = "head_stride negative"; break;
    case 13:
        a->out_token_stride = -1, *needle = "negative", *bad_input = "out_token_stride negative";
        break;
    case 14:
        a->out_head_stride = BD - 1, *needle = "out rows overlap",
        *bad_input = "out_head_stride below head_dim (rows overlap)";
        break;
    case 15:
        a->out = e->prefix + 1, *needle = "overlaps prefix",
        *bad_input = "out over prefix, one element off";
        break;
    case 16: /* the prefix itself, but with other strides */
        *bad_input = "out at prefix with other strides";
        a->out = e->prefix, a->out_head_stride = BD + 1, a->out_token_stride = BH * (BD + 1);
        *needle = "overlaps prefix";
        break;
    case 17:
        a->out = e->suffix + BD, *needle = "overlaps suffix",
        *bad_input = "out over suffix, one head off";
        break;
    case 18:
        a->prefix_lse = e->out + 3, *needle = "overlaps prefix_lse",
        *bad_input = "prefix_lse over out";
        break;
    case 19:
        a->out_lse = e->plse + 1, *needle = "out_lse overlaps prefix_lse",
        *bad_input = "out_lse over prefix_lse, one element off";
        break;
    case 20:
        a->out_lse = e->out + 4, *needle = "out_lse overlaps out", *bad_input = "out_lse over out";
        break;
    case 21:
        a->out_lse = e->suffix + 2, *needle = "out_lse overlaps suffix",
        *bad_input = "out_lse over suffix";
        break;
    case 22:
        *bad_input = "num_tokens whose span passes int64";
        a->num_tokens = INT64_MAX / 2, a->prefill_tokens_with_context = 0;
        *st = MLA_ERR_OVERFLOW, *needle = "overflows";
        break;
    case 23:
        a->token_stride = INT64_MAX / 2, *st = MLA_ERR_OVERFLOW, *needle = "overflows",
        *bad_input = "token_stride whose span passes int64";
        break;
    default: return false;
    }
    return true;
}

static void test_rejects(void **state)
{
    (void)state;
    bad_env *e = malloc(sizeof *e);
    assert_non_null(e);
    for (int i = 0; i < BN; i++)
        e->prefix[i] = e->suffix[i] = (float)i;
    for (int i = 0; i < BH * BT; i++)
        e->plse[i] = e->slse[i] = 0.5f;
    mla_merge_attn_args a;
    mla_status want;
    const char *bad_input = "", *needle = "";
    for (int k = 0; bad_case(k, e, &a, &bad_input, &want, &needle); k++) {
        fill_guard(e->out, sizeof e->out);
        fill_guard(e->olse, sizeof e->olse);
        uint64_t inputs = oracle_checksum(e->prefix, sizeof e->prefix) ^
                          oracle_checksum(e->suffix, sizeof e->suffix) ^
                          oracle_checksum(e->plse, sizeof e->plse);
        support_expect_reject("mla_merge_attn_states", bad_input, mla_merge_attn_states(&a, 2),
                              want, needle);
        assert_true(support_contains(mla_last_error(), "mla_merge_attn_states: "));
        for (size_t i = 0; i < sizeof e->out; i++)
            if (((unsigned char *)e->out)[i] != GUARD)
                fail_msg("bad case %d wrote out byte %zu", k, i);
        for (size_t i = 0; i < sizeof e->olse; i++)
            if (((unsigned char *)e->olse)[i] != GUARD)
                fail_msg("bad case %d wrote out_lse byte %zu", k, i);
        assert_true(inputs == (oracle_checksum(e->prefix, sizeof e->prefix) ^
                               oracle_checksum(e->suffix, sizeof e->suffix) ^
                               oracle_checksum(e->plse, sizeof e->plse)));
    }
    support_expect_reject("mla_merge_attn_states", "args NULL", mla_merge_attn_states(NULL, 1),
                          MLA_ERR_INVALID_ARGUMENT, "args is NULL");
    /* the good call next to them, and the allowed aliases */
    a = good_args(e);
    assert_int_equal(mla_merge_attn_states(&a, 1), MLA_OK);
    a.out = e->prefix, a.out_lse = e->plse;
    assert_int_equal(mla_merge_attn_states(&a, 1), MLA_OK);
    free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scale_add_bit_exact),
        cmocka_unit_test(test_merge_pair_bit_exact),
        cmocka_unit_test(test_softmax_tile),
        cmocka_unit_test(test_edge_cases),
        cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_threads_and_wide_rows),
        cmocka_unit_test(test_rejects),
    };
    return cmocka_run_group_tests_name("merge", tests, NULL, NULL);
}
