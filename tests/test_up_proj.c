/*
 * The kv_b_proj up-projection, mla_up_proj (mla.h): k_nope and v written per
 * head from kv_c [S, L] and kv_b_proj W [H*(P+V), L] by the packed GEMM
 * driver. Every case runs on every backend this CPU has, each on 1, 2, 3
 * and 5 threads and the default, and every output must be bit for bit what
 * the contract fixes: on the f32 route one chain of f32 fused multiply-adds
 * over the widened operands in l order from 0 (written out here with
 * fmaf), rounded once, to nearest even, to the output dtype; on a
 * backend's bf16 dot-product route (kv_c and W bf16) its instruction's
 * arithmetic, as that instruction's portable twin computes it over the
 * whole depth. Those expected values are held in turn to the sum in double,
 * within the roundings of their chains. Shapes: 1x1x1, primes, no depth
 * (L = 0), no tokens, and the driver's tile edges (64-row blocks, 512-deep k
 * blocks, 128-column segments, 48-column strips); layouts: padded kv_c
 * rows (their padding NaN, so a read of it shows), padded strides, heads
 * outside tokens, k_nope and v interleaved in one buffer either way round.
 * Nothing outside the outputs' elements changes, the inputs stay as they
 * were, and bad input returns its status and a message naming it, writing
 * nothing.
 */
#include "kernels/kernels.h"
#include "oracle.h"
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))
#define GUARD 0xab
/* Elements of guard before, between and after the outputs. */
#define GUARD_ELEMS 13

/* Every case runs on these; 0 is the default (mla_default_threads()). */
static const int thread_counts[] = {1, 2, 3, 5, 0};

/* Where k_nope and v live. */
typedef enum out_layout {
    SEPARATE,    /* dense [S, H, P] and [S, H, V]                          */
    PADDED,      /* [S, H, dim] with padded head and token strides          */
    HEADS_OUTER, /* [H, S, dim], strides padded                             */
    INTERLEAVED, /* one [S, H, P + V] buffer: v = k_nope + P                */
    V_FIRST,     /* one [S, H, V + P] buffer: k_nope = v + V                */
} out_layout;

typedef struct up_case {
    const char *name;
    int64_t S, L, H, P, V;
    int64_t kv_pad;    /* kv_c_stride - L                                   */
    out_layout layout;
    bool nulls;        /* NULL for every operand without elements           */
    mla_dtype a, w, o; /* of kv_c, kv_b_proj and the outputs: set per sweep */
} up_case;

/* A case's buffers: the inputs as passed (kv_c's padding NaN), widened to
 * f32, the output arena (k_nope and v among guard bytes) and the arena as
 * the f32 route must leave it. */
typedef struct up_data {
    up_case c;
    int64_t N, k2;                   /* W's rows; the depth in whole pairs */
    int64_t kts, khs, vts, vhs;      /* output strides                     */
    int64_t k_off, v_off, arena_len; /* in output elements                 */
    size_t kv_bytes, w_bytes, arena_bytes;
    unsigned char *kv_mem, *w_mem, *arena, *want_chain;
    const void *kv_c, *w;
    float *a32, *w32; /* [S][L], [N][L] */
    float *chain;     /* [S][N]: the f32 route's results */
    uint64_t inputs_sum;
    mla_up_proj_args args;
} up_data;

static void *alloc_bytes(size_t bytes)
{
    void *p = malloc(bytes > 0 ? bytes : 1);
    assert_non_null(p);
    return p;
}

/* Element i of an array of dtype, as its bits: f32 uniform in (-1, 1) with
 * every mantissa bit in play (so any reordering shows); bf16 and f16 normal
 * codes in [2^-6, 4), either sign, f16 1 in 16 a denormal (widened
 * exactly). Sums of a thousand products stay far inside f16's range, and
 * the bf16 dot route meets no denormal it would flush. */
static void put_random(mla_dtype dtype, void *array, int64_t i)
{
    uint64_t r = support_random();
    uint16_t sign = (uint16_t)(r & 0x8000u);
    switch (dtype) {
    case MLA_DTYPE_F32:
        ((float *)array)[i] = (float)(int32_t)r * 0x1p-31f;
        break;
    case MLA_DTYPE_BF16:
        ((uint16_t *)array)[i] =
            (uint16_t)(sign | (121u + (r >> 16) % 8u) << 7 | (r >> 40 & 0x7fu));
        break;
    default: {
        unsigned exponent = (r >> 20) % 16 == 0 ? 0u : 9u + (unsigned)((r >> 24) % 8u);
        ((uint16_t *)array)[i] = (uint16_t)(sign | exponent << 10 | (r >> 40 & 0x3ffu));
        break;
    }
    }
}

static int64_t view_span(int64_t S, int64_t H, int64_t dim, int64_t ts, int64_t hs)
{
    return S == 0 ? 0 : (S - 1) * ts + (H - 1) * hs + dim;
}

/* The outputs' strides and offsets in the arena for the case's layout. */
static void place_outputs(up_data *d)
{
    const up_case *c = &d->c;
    const int64_t S = c->S, H = c->H, P = c->P, V = c->V, G = GUARD_ELEMS;
    switch (c->layout) {
    case SEPARATE:
        d->khs = P, d->kts = H * P, d->vhs = V, d->vts = H * V;
        break;
    case PADDED:
        d->khs = P + 3, d->kts = H * (P + 3) + 5, d->vhs = V + 1, d->vts = H * (V + 1) + 2;
        break;
    case HEADS_OUTER:
        d->kts = P + 2, d->khs = S * (P + 2) + 1, d->vts = V, d->vhs = S * V + 3;
        break;
    default:
        d->khs = d->vhs = P + V, d->kts = d->vts = H * (P + V);
        break;
    }
    if (c->layout == INTERLEAVED || c->layout == V_FIRST) {
        d->k_off = c->layout == INTERLEAVED ? G : G + V;
        d->v_off = c->layout == INTERLEAVED ? G + P : G;
        d->arena_len = G + view_span(S, H, P + V, d->kts, d->khs) + G;
        return;
    }
    d->k_off = G;
    d->v_off = G + view_span(S, H, P, d->kts, d->khs) + G;
    d->arena_len = d->v_off + view_span(S, H, V, d->vts, d->vhs) + G;
}

/* Index in the arena of k_nope(s, h, col) (is_k) or v(s, h, col). */
static int64_t out_index(const up_data *d, bool is_k, int64_t s, int64_t h, int64_t col)
{
    return is_k ? d->k_off + s * d->kts + h * d->khs + col
                : d->v_off + s * d->vts + h * d->vhs + col;
}

/* The arena the call must leave: guards, and c32 [S][N] rounded once to the
 * output dtype at every element of k_nope and v. */
static unsigned char *expected_arena(const up_data *d, const float *c32)
{
    const up_case *c = &d->c;
    unsigned char *want = alloc_bytes(d->arena_bytes);
    memset(want, GUARD, d->arena_bytes);
    for (int64_t s = 0; s < c->S; s++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t n = 0; n < c->P + c->V; n++) {
                bool is_k = n < c->P;
                oracle_store(c->o, want, out_index(d, is_k, s, h, is_k ? n : n - c->P),
                             c32[s * d->N + h * (c->P + c->V) + n], 1.0f);
            }
    return want;
}

/* The f32 route's results: acc = fmaf(kv_c(s, l), W(n, l), acc) for l in
 * order from acc = 0, over the exactly widened operands. */
static float *chain_results(const up_data *d)
{
    const int64_t S = d->c.S, L = d->c.L, N = d->N;
    float *c32 = alloc_bytes((size_t)(S * N) * sizeof(float));
    for (int64_t s = 0; s < S; s++)
        for (int64_t n = 0; n < N; n++) {
            float acc = 0.0f;
            for (int64_t l = 0; l < L; l++)
                acc = fmaf(d->a32[s * L + l], d->w32[n * L + l], acc);
            c32[s * N + n] = acc;
        }
    return c32;
}

/* The bf16 dot route's results: the twin over the whole depth in one call,
 * kv_c's rows and W's pair-packed columns completed, like the driver's, by
 * a zero pair element when L is odd. */
static float *dot_results(const up_data *d, mla_gemm_bf16dot_fn *twin)
{
    const int64_t S = d->c.S, L = d->c.L, N = d->N, k2 = d->k2, stride = d->args.kv_c_stride;
    const uint16_t *kv_c = d->kv_c, *w = d->w;
    uint16_t *a = calloc((size_t)(S * k2 + 1), sizeof *a);
    uint16_t *b = calloc((size_t)(k2 * N + 1), sizeof *b);
    float *c32 = alloc_bytes((size_t)(S * N) * sizeof(float));
    assert_non_null(a);
    assert_non_null(b);
    for (int64_t s = 0; s < S; s++)
        for (int64_t l = 0; l < L; l++)
            a[s * k2 + l] = kv_c[s * stride + l];
    for (int64_t n = 0; n < N; n++)
        for (int64_t l = 0; l < L; l++)
            b[(l / 2) * 2 * N + 2 * n + l % 2] = w[n * L + l];
    twin(S, N, k2, a, k2 / 2, 1, b, 2 * N, c32, N, NULL);
    free(a);
    free(b);
    return c32;
}

static void describe(const up_data *d, char *buf, size_t size)
{
    const up_case *c = &d->c;
    snprintf(buf, size, "%s (S %lld, L %lld, H %lld, P %lld, V %lld; kv_c %s, W %s, out %s)",
             c->name, (long long)c->S, (long long)c->L, (long long)c->H, (long long)c->P,
             (long long)c->V, mla_dtype_name(c->a), mla_dtype_name(c->w), mla_dtype_name(c->o));
}

/* c32 against the sum in double: each of the `steps` roundings of a chain
 * errs by at most `unit` of a partial sum, and no partial sum exceeds the
 * sum of the magnitudes. */
static void expect_near_double(const up_data *d, const float *c32, int64_t steps, double unit,
                               const char *route)
{
    const int64_t S = d->c.S, L = d->c.L, N = d->N;
    for (int64_t s = 0; s < S; s++)
        for (int64_t n = 0; n < N; n++) {
            double sum = 0.0, mag = 0.0;
            for (int64_t l = 0; l < L; l++) {
                double term = (double)d->a32[s * L + l] * d->w32[n * L + l];
                sum += term;
                mag += fabs(term);
            }
            double bound = (double)(steps + 2) * unit * mag + 0x1p-100;
            if (!(fabs(c32[s * N + n] - sum) <= bound)) {
                char what[200];
                describe(d, what, sizeof what);
                fail_msg("%s route of %s: (s %lld, column %lld) = %.9g, double sum %.9g, bound "
                         "%.3g", route, what, (long long)s, (long long)n, (double)c32[s * N + n],
                         sum, bound);
            }
        }
}

/* Makes the case's inputs, its arguments and the f32 route's expectation
 * (held to the double sum). */
static void make_data(up_data *d, const up_case *c)
{
    memset(d, 0, sizeof *d);
    d->c = *c;
    const int64_t S = c->S, L = c->L, stride = L + c->kv_pad;
    const int64_t a_size = mla_dtype_size(c->a), w_size = mla_dtype_size(c->w);
    const int64_t o_size = mla_dtype_size(c->o);
    d->N = c->H * (c->P + c->V);
    d->k2 = L + L % 2;
    place_outputs(d);
    /* inputs start 1..7 elements past an allocation: no vector alignment */
    const int64_t a_skip = support_random_in(1, 7), w_skip = support_random_in(1, 7);
    const int64_t kv_elems = a_skip + view_span(S, 1, L, stride, 0), w_elems = w_skip + d->N * L;
    d->kv_bytes = (size_t)(kv_elems * a_size);
    d->w_bytes = (size_t)(w_elems * w_size);
    d->arena_bytes = (size_t)(d->arena_len * o_size);
    d->kv_mem = alloc_bytes(d->kv_bytes);
    d->w_mem = alloc_bytes(d->w_bytes);
    d->arena = alloc_bytes(d->arena_bytes);
    d->a32 = alloc_bytes((size_t)(S * L) * sizeof(float));
    d->w32 = alloc_bytes((size_t)(d->N * L) * sizeof(float));
    for (int64_t i = 0; i < kv_elems; i++)
        oracle_store(c->a, d->kv_mem, i, NAN, 1.0f);
    for (int64_t s = 0; s < S; s++)
        for (int64_t l = 0; l < L; l++) {
            put_random(c->a, d->kv_mem, a_skip + s * stride + l);
            d->a32[s * L + l] = oracle_load(c->a, d->kv_mem, a_skip + s * stride + l, 1.0f);
        }
    for (int64_t i = 0; i < d->N * L; i++) {
        put_random(c->w, d->w_mem, w_skip + i);
        d->w32[i] = oracle_load(c->w, d->w_mem, w_skip + i, 1.0f);
    }
    d->kv_c = d->kv_mem + a_skip * a_size;
    d->w = d->w_mem + w_skip * w_size;
    d->inputs_sum = oracle_checksum(d->kv_mem, d->kv_bytes) ^ oracle_checksum(d->w_mem, d->w_bytes);
    const bool no_in = c->nulls && (S == 0 || L == 0), no_out = c->nulls && S == 0;
    d->args = (mla_up_proj_args){
        .num_tokens = S, .num_heads = c->H, .kv_lora_rank = L, .qk_nope_dim = c->P,
        .v_head_dim = c->V, .kv_c = no_in ? NULL : d->kv_c, .kv_c_dtype = c->a,
        .kv_c_stride = stride, .kv_b_proj = c->nulls && L == 0 ? NULL : d->w, .w_dtype = c->w,
        .out_dtype = c->o, .k_nope = no_out ? NULL : d->arena + d->k_off * o_size,
        .k_nope_token_stride = d->kts, .k_nope_head_stride = d->khs,
        .v = no_out ? NULL : d->arena + d->v_off * o_size, .v_token_stride = d->vts,
        .v_head_stride = d->vhs};
    d->chain = chain_results(d);
    expect_near_double(d, d->chain, L, 0x1p-24, "f32");
    d->want_chain = expected_arena(d, d->chain);
}

static void free_data(up_data *d)
{
    void *all[] = {d->kv_mem, d->w_mem, d->arena, d->want_chain, d->a32, d->w32, d->chain};
    for (int i = 0; i < COUNT(all); i++)
        free(all[i]);
}

/* Names arena element e: an element of k_nope or v, or a guard. */
static void name_element(const up_data *d, int64_t e, char *buf, size_t size)
{
    const up_case *c = &d->c;
    snprintf(buf, size, "a guard element (%lld of the arena)", (long long)e);
    for (int is_k = 0; is_k < 2; is_k++)
        for (int64_t s = 0; s < c->S; s++)
            for (int64_t h = 0; h < c->H; h++)
                for (int64_t col = 0; col < (is_k ? c->P : c->V); col++)
                    if (out_index(d, is_k, s, h, col) == e)
                        snprintf(buf, size, "%s(s %lld, h %lld, %lld)", is_k ? "k_nope" : "v",
                                 (long long)s, (long long)h, (long long)col);
}

/* The arena is want, byte for byte; else names the first element that is
 * not. */
static void expect_arena(const up_data *d, const unsigned char *want, const char *who, int threads)
{
    if (memcmp(d->arena, want, d->arena_bytes) == 0)
        return;
    const int64_t size = mla_dtype_size(d->c.o);
    int64_t e = 0;
    while (memcmp(d->arena + e * size, want + e * size, (size_t)size) == 0)
        e++;
    char what[200], where[96];
    describe(d, what, sizeof what);
    name_element(d, e, where, sizeof where);
    fail_msg("%s, %d threads, %s: %s is %a, want %a", who, threads, what, where,
             (double)oracle_load(d->c.o, d->arena, e, 1.0f),
             (double)oracle_load(d->c.o, want, e, 1.0f));
}

/* kv_b_proj packed by mla_pack_kv_b_proj on `threads` threads (under the
 * backend forced now), in a buffer of exactly the size the query gives. */
static void *pack_weight(const up_data *d, int threads)
{
    int64_t bytes = -1;
    mla_status st = mla_pack_kv_b_proj_size(&d->args, &bytes);
    if (st != MLA_OK)
        fail_msg("pack size: %s (%s)", mla_status_str(st), mla_last_error());
    void *packed = alloc_bytes((size_t)bytes);
    if ((st = mla_pack_kv_b_proj(&d->args, packed, bytes, threads)) != MLA_OK)
        fail_msg("pack: %s (%s)", mla_status_str(st), mla_last_error());
    return packed;
}

/* One call on a guard-filled arena with a workspace of exactly the size
 * the query gives for `threads`, all NaN bits (f32 and bf16), so that
 * reading a part the driver did not write shows in the outputs. With
 * `packed`, kv_b_proj comes packed ahead and kv_b_proj itself is NULL. */
static void run_once(up_data *d, const mla_backend_desc *b, const unsigned char *want, int threads,
                     bool packed)
{
    char what[200];
    describe(d, what, sizeof what);
    mla_up_proj_args args = d->args;
    void *w_packed = NULL;
    if (packed) {
        args.kv_b_proj_packed = w_packed = pack_weight(d, threads);
        args.kv_b_proj = NULL;
    }
    memset(d->arena, GUARD, d->arena_bytes);
    int64_t need = -1;
    mla_status st = mla_up_proj_workspace_size(&args, threads, &need);
    if (st != MLA_OK)
        fail_msg("%s %s: workspace size: %s (%s)", b->name, what, mla_status_str(st),
                 mla_last_error());
    void *workspace = alloc_bytes((size_t)need);
    memset(workspace, 0xff, (size_t)need);
    st = mla_up_proj(&args, workspace, need, threads);
    if (st != MLA_OK)
        fail_msg("%s, %d threads, %s%s: %s (%s)", b->name, threads, what,
                 packed ? ", packed" : "", mla_status_str(st), mla_last_error());
    support_expect_ran(b);
    expect_arena(d, want, b->name, threads);
    if ((oracle_checksum(d->kv_mem, d->kv_bytes) ^ oracle_checksum(d->w_mem, d->w_bytes)) !=
        d->inputs_sum)
        fail_msg("%s, %d threads, %s: an input changed", b->name, threads, what);
    free(workspace);
    free(w_packed);
}

/* The twin of a backend's bf16 pair kernel: the tile GEMM's where it has
 * one (the driver prefers it), else the arithmetic of its ISA's dot. */
static mla_gemm_bf16dot_fn *dot_twin(const mla_backend_desc *b)
{
    if (b->kernels.gemm_bf16tile)
        return mla_gemm_bf16tile__ref;
    if (strcmp(b->isa, "avx512_bf16") == 0)
        return mla_gemm_bf16dot__ref;
    if (strcmp(b->isa, "neon_bf16") == 0)
        return mla_gemm_bf16dot__ref_bfdot;
    fail_msg("backend %s has a bf16 dot kernel of unknown arithmetic (isa %s)", b->name, b->isa);
    return NULL;
}

/* The case on backend b and every thread count: the f32 route's bits, or
 * the dot route's where the driver takes it (kv_c and W bf16 and b has the
 * kernel). */
static void up_on(const mla_backend_desc *b, void *ctx)
{
    up_data *d = ctx;
    const bool dot = (b->kernels.gemm_bf16dot || b->kernels.gemm_bf16tile) &&
                     d->c.a == MLA_DTYPE_BF16 && d->c.w == MLA_DTYPE_BF16;
    unsigned char *want = d->want_chain;
    if (dot) {
        float *c32 = dot_results(d, dot_twin(b));
        /* two roundings per pair on BFDOT, one per element on vdpbf16ps, up
         * to two per element on TDPBF16PS */
        expect_near_double(d, c32, d->k2, 0x1p-23, "bf16 dot");
        want = expected_arena(d, c32);
        free(c32);
    }
    for (int i = 0; i < COUNT(thread_counts); i++) {
        run_once(d, b, want, thread_counts[i], false);
        run_once(d, b, want, thread_counts[i], true);
    }
    if (dot)
        free(want);
}

/* Each case with each (kv_c, W, out) dtype triple, on every backend. */
static void run_cases(const up_case *cases, int count, const mla_dtype (*dtypes)[3], int triples)
{
    for (int i = 0; i < count; i++)
        for (int t = 0; t < triples; t++) {
            up_case c = cases[i];
            c.a = dtypes[t][0], c.w = dtypes[t][1], c.o = dtypes[t][2];
            up_data d;
            make_data(&d, &c);
            /* what mla_up_proj asks dispatch for: the depth in whole pairs */
            mla_config cfg = {.q_dtype = c.a, .cache_dtype = c.w,
                              .kv_lora_rank = c.L > 0 ? d.k2 : 2, .rope_dim = 0,
                              .num_heads = c.H, .block_size = 1};
            assert_true(support_each_backend(MLA_OP_PREFILL, &cfg, up_on, &d) >= 1);
            free_data(&d);
        }
}

static const mla_dtype f32_only[][3] = {{MLA_DTYPE_F32, MLA_DTYPE_F32, MLA_DTYPE_F32}};
/* f32; bf16 throughout (the dot route where a backend has it); mixed, each
 * input dtype and output rounding in play. */
static const mla_dtype three_triples[][3] = {
    {MLA_DTYPE_F32, MLA_DTYPE_F32, MLA_DTYPE_F32},
    {MLA_DTYPE_BF16, MLA_DTYPE_BF16, MLA_DTYPE_BF16},
    {MLA_DTYPE_F16, MLA_DTYPE_BF16, MLA_DTYPE_F16},
};

/* Every (kv_c, W, out) dtype triple of f32, bf16 and f16, on a prime shape
 * and one that crosses a k block and a strip. */
static void test_dtypes(void **state)
{
    (void)state;
    static const mla_dtype floats[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16};
    mla_dtype all[27][3];
    for (int i = 0; i < 27; i++)
        all[i][0] = floats[i / 9], all[i][1] = floats[i / 3 % 3], all[i][2] = floats[i % 3];
    const up_case cases[] = {
        {.name = "primes", .S = 7, .L = 13, .H = 3, .P = 5, .V = 11},
        {.name = "past a k block and a strip", .S = 9, .L = 515, .H = 2, .P = 50, .V = 49,
         .kv_pad = 3},
    };
    run_cases(cases, COUNT(cases), all, 27);
}

/* 1x1x1, odd and zero depths, no tokens (NULL operands where they have no
 * elements), and the driver's tile edges: row blocks of 64, k blocks of 512
 * (the dot route's depth is pairs, so 511 and 513 pad or split), segments
 * of 128 columns and strips of 48, 16 heads. */
static void test_edge_shapes(void **state)
{
    (void)state;
    const up_case cases[] = {
        {.name = "1x1x1", .S = 1, .L = 1, .H = 1, .P = 1, .V = 1},
        {.name = "odd depth", .S = 3, .L = 3, .H = 2, .P = 3, .V = 2, .kv_pad = 1},
        {.name = "no depth", .S = 5, .L = 0, .H = 2, .P = 3, .V = 4, .kv_pad = 2},
        {.name = "no depth, NULL inputs", .S = 5, .L = 0, .H = 2, .P = 3, .V = 4, .nulls = true},
        {.name = "no tokens", .S = 0, .L = 16, .H = 2, .P = 8, .V = 8},
        {.name = "no tokens, NULL kv_c and outputs", .S = 0, .L = 16, .H = 2, .P = 8, .V = 8,
         .nulls = true},
        {.name = "S 63", .S = 63, .L = 511, .H = 1, .P = 128, .V = 127},
        {.name = "S 64", .S = 64, .L = 512, .H = 3, .P = 48, .V = 49, .kv_pad = 1},
        {.name = "S 65", .S = 65, .L = 513, .H = 1, .P = 129, .V = 200},
        {.name = "S 129, L 1025", .S = 129, .L = 1025, .H = 1, .P = 47, .V = 96},
        /* the AMX tile route's row blocks are 256 rows */
        {.name = "S 256", .S = 256, .L = 70, .H = 1, .P = 33, .V = 20},
        {.name = "S 257", .S = 257, .L = 71, .H = 2, .P = 17, .V = 130},
        {.name = "16 heads", .S = 20, .L = 64, .H = 16, .P = 16, .V = 16},
        {.name = "16 heads, deep", .S = 3, .L = 1025, .H = 16, .P = 200, .V = 127},
    };
    run_cases(cases, COUNT(cases), three_triples, COUNT(three_triples));
}

/* DeepSeek's per-head dims on a few heads, bf16 as served. */
static void test_deepseek_shape(void **state)
{
    (void)state;
    static const mla_dtype bf16[][3] = {{MLA_DTYPE_BF16, MLA_DTYPE_BF16, MLA_DTYPE_BF16}};
    const up_case cases[] = {{.name = "deepseek", .S = 300, .L = 512, .H = 4, .P = 128, .V = 128}};
    run_cases(cases, 1, bf16, 1);
}

/* Every output layout, with padded kv_c rows, past a row block and a
 * segment: f32 outputs are written in place by the micro-kernel, the
 * others through a tile, so both paths meet every stride. */
static void test_layouts(void **state)
{
    (void)state;
    const up_case cases[] = {
        {.name = "separate", .S = 70, .L = 40, .H = 3, .P = 130, .V = 50, .kv_pad = 7},
        {.name = "padded", .S = 70, .L = 40, .H = 3, .P = 130, .V = 50, .kv_pad = 7,
         .layout = PADDED},
        {.name = "heads outer", .S = 70, .L = 40, .H = 3, .P = 130, .V = 50, .kv_pad = 7,
         .layout = HEADS_OUTER},
        {.name = "interleaved", .S = 70, .L = 40, .H = 3, .P = 130, .V = 50, .kv_pad = 7,
         .layout = INTERLEAVED},
        {.name = "v first", .S = 70, .L = 40, .H = 3, .P = 130, .V = 50, .kv_pad = 7,
         .layout = V_FIRST},
        {.name = "heads outer, one token", .S = 1, .L = 9, .H = 4, .P = 6, .V = 5,
         .layout = HEADS_OUTER},
    };
    run_cases(cases, COUNT(cases), three_triples, COUNT(three_triples));
    const up_case one[] = {{.name = "interleaved 1x1x1", .S = 1, .L = 1, .H = 1, .P = 1, .V = 1,
                            .layout = INTERLEAVED}};
    run_cases(one, 1, f32_only, 1);
}

/* ---- bad input -------------------------------------------------------------- */

enum { BS = 4, BH = 2, BP = 4, BV = 3, BL = 6, BN = BH * (BP + BV), BUF = 128 };

typedef struct bad_env {
    float kv_c[BUF], w[BUF], k[BUF], v[BUF];
    void *workspace;
    int64_t workspace_bytes; /* for 2 threads */
} bad_env;

/* A bad call: its arguments and workspace, what is wrong with them, the
 * status and a word of the message; `shape`: the workspace query must
 * reject it the same way. */
typedef struct bad_call {
    mla_up_proj_args a;
    void *workspace;
    int64_t workspace_bytes;
    int threads;
    const char *bad_input;
    mla_status st;
    const char *needle;
    bool shape;
} bad_call;

/* A good call's arguments over env: dense f32. */
static mla_up_proj_args good_args(bad_env *e)
{
    return (mla_up_proj_args){
        .num_tokens = BS, .num_heads = BH, .kv_lora_rank = BL, .qk_nope_dim = BP,
        .v_head_dim = BV, .kv_c = e->kv_c, .kv_c_dtype = MLA_DTYPE_F32, .kv_c_stride = BL,
        .kv_b_proj = e->w, .w_dtype = MLA_DTYPE_F32, .out_dtype = MLA_DTYPE_F32, .k_nope = e->k,
        .k_nope_token_stride = BH * BP, .k_nope_head_stride = BP, .v = e->v,
        .v_token_stride = BH * BV, .v_head_stride = BV};
}

/* A shape error: the status, the needle, checked by the query too. */
static void shape_error(bad_call *b, mla_status st, const char *needle)
{
    b->st = st, b->needle = needle, b->shape = true;
}

/* The k-th bad call; false past the last. Every pointer stays inside env's
 * buffers, so a missed check writes where the guards see it. */
static bool bad_case(int k, bad_env *e, bad_call *b)
{
    const mla_status INVALID = MLA_ERR_INVALID_ARGUMENT, UNSUPPORTED = MLA_ERR_UNSUPPORTED;
    const mla_status OVERFLOW = MLA_ERR_OVERFLOW;
    *b = (bad_call){.a = good_args(e), .workspace = e->workspace,
                    .workspace_bytes = e->workspace_bytes, .threads = 2, .st = INVALID};
    mla_up_proj_args *a = &b->a;
    switch (k) {
    case 0:
        b->bad_input = "num_tokens -1", a->num_tokens = -1,
        shape_error(b, INVALID, "num_tokens -1");
        break;
    case 1:
        b->bad_input = "num_heads 0", a->num_heads = 0, shape_error(b, INVALID, "num_heads 0");
        break;
    case 2:
        b->bad_input = "kv_lora_rank -1", a->kv_lora_rank = -1,
        shape_error(b, INVALID, "kv_lora_rank -1");
        break;
    case 3:
        b->bad_input = "qk_nope_dim 0", a->qk_nope_dim = 0,
        shape_error(b, INVALID, "qk_nope_dim 0");
        break;
    case 4:
        b->bad_input = "v_head_dim 0", a->v_head_dim = 0, shape_error(b, INVALID, "v_head_dim 0");
        break;
    case 5:
        b->bad_input = "kv_c_dtype fp8_e4m3";
        a->kv_c_dtype = MLA_DTYPE_FP8_E4M3, shape_error(b, UNSUPPORTED, "kv_c dtype fp8_e4m3");
        break;
    case 6:
        b->bad_input = "w_dtype fp8_e5m2";
        a->w_dtype = MLA_DTYPE_FP8_E5M2, shape_error(b, UNSUPPORTED, "kv_b_proj dtype fp8_e5m2");
        break;
    case 7:
        b->bad_input = "out_dtype fp8_e4m3", a->out_dtype = MLA_DTYPE_FP8_E4M3,
        shape_error(b, UNSUPPORTED, "out dtype");
        break;
    case 8:
        b->bad_input = "kv_c_dtype not an mla_dtype", a->kv_c_dtype = (mla_dtype)77,
        shape_error(b, UNSUPPORTED, "kv_c dtype");
        break;
    case 9:
        b->bad_input = "num_heads whose weight size passes int64", a->num_heads = INT64_MAX / 2,
        shape_error(b, OVERFLOW, "overflows");
        break;
    case 10:
        b->bad_input = "qk_nope_dim INT64_MAX", a->qk_nope_dim = INT64_MAX,
        shape_error(b, OVERFLOW, "overflows");
        break;
    case 11:
        b->bad_input = "kv_lora_rank whose weight size passes int64",
        a->kv_lora_rank = INT64_MAX / 8, shape_error(b, OVERFLOW, "overflows");
        break;
    case 12: b->bad_input = "kv_c NULL", a->kv_c = NULL, b->needle = "kv_c is NULL"; break;
    case 13:
        b->bad_input = "kv_b_proj NULL", a->kv_b_proj = NULL, b->needle = "kv_b_proj is NULL";
        break;
    case 14: /* W is read whether or not there are tokens */
        b->bad_input = "kv_b_proj NULL with no tokens";
        a->num_tokens = 0, a->kv_b_proj = NULL, b->needle = "kv_b_proj is NULL";
        break;
    case 15: b->bad_input = "k_nope NULL", a->k_nope = NULL, b->needle = "k_nope is NULL"; break;
    case 16: b->bad_input = "v NULL", a->v = NULL, b->needle = "v is NULL"; break;
    case 17:
        b->bad_input = "kv_c_stride below kv_lora_rank", a->kv_c_stride = BL - 1,
        b->needle = "kv_c row stride 5 < row width 6";
        break;
    case 18:
        b->bad_input = "k_nope_head_stride below qk_nope_dim (rows overlap)",
        a->k_nope_head_stride = 1, b->needle = "k_nope rows overlap";
        break;
    case 19:
        b->bad_input = "v_token_stride below num_heads x v_head_dim (rows overlap)",
        a->v_token_stride = BV, b->needle = "v rows overlap";
        break;
    case 20:
        b->bad_input = "k_nope_head_stride negative", a->k_nope_head_stride = -BP,
        b->needle = "negative";
        break;
    case 21:
        b->bad_input = "v_token_stride negative", a->v_token_stride = -1, b->needle = "negative";
        break;
    case 22: /* same strides, v's rows starting inside k_nope's */
        b->bad_input = "v rows inside k_nope's, same strides";
        a->v = e->k + 2, a->v_token_stride = BH * BP, a->v_head_stride = BP;
        b->needle = "k_nope and v rows overlap";
        break;
    case 23: /* interleaved, but the cells too short for P + V */
        b->bad_input = "k_nope and v interleaved in cells too short";
        a->v = e->k + BP, a->v_token_stride = a->k_nope_token_stride = BH * (BP + BV);
        a->v_head_stride = a->k_nope_head_stride = BP + BV - 1;
        b->needle = "k_nope and v rows overlap";
        break;
    case 24: /* interleaved, but v two bytes off an element: into the next cell */
        b->bad_input = "k_nope and v interleaved, v two bytes off an element";
        a->v = (char *)(e->k + BP) + 2, a->v_token_stride = a->k_nope_token_stride = BH * (BP + BV);
        a->v_head_stride = a->k_nope_head_stride = BP + BV;
        b->needle = "k_nope and v rows overlap";
        break;
    case 25: /* v's own strides, inside k_nope's span */
        b->bad_input = "v inside k_nope's span, own strides";
        a->v = e->k + 1, b->needle = "k_nope and v rows overlap";
        break;
    case 26:
        b->bad_input = "k_nope over kv_c", a->k_nope = e->kv_c + 5,
        b->needle = "k_nope overlaps kv_c";
        break;
    case 27:
        b->bad_input = "k_nope over kv_b_proj", a->k_nope = e->w + BN * BL - 1,
        b->needle = "k_nope overlaps kv_b_proj";
        break;
    case 28:
        b->bad_input = "v over kv_c", a->v = e->kv_c + BS * BL - 1, b->needle = "v overlaps kv_c";
        break;
    case 29:
        b->bad_input = "v over kv_b_proj", a->v = e->w + 10, b->needle = "v overlaps kv_b_proj";
        break;
    case 30:
        b->bad_input = "kv_c_stride whose span passes int64", a->kv_c_stride = INT64_MAX / 2,
        b->st = OVERFLOW, b->needle = "kv_c of";
        break;
    case 31:
        b->bad_input = "k_nope_token_stride whose span passes int64";
        a->k_nope_token_stride = INT64_MAX / 2, b->st = OVERFLOW, b->needle = "k_nope of";
        break;
    case 32:
        b->bad_input = "num_tokens whose span passes int64", a->num_tokens = INT64_MAX / 4,
        b->st = OVERFLOW, b->needle = "overflows";
        break;
    case 33:
        b->bad_input = "workspace NULL", b->workspace = NULL, b->needle = "workspace is NULL";
        break;
    case 34:
        b->bad_input = "workspace 1 byte short";
        b->workspace_bytes -= 1, b->st = MLA_ERR_CAPACITY, b->needle = "workspace of";
        break;
    case 35: /* sized for 2 threads: 5 need a C tile each */
        b->bad_input = "workspace sized for 2 threads, called with 5";
        b->threads = 5, b->st = MLA_ERR_CAPACITY, b->needle = "workspace of";
        break;
    default: return false;
    }
    return true;
}

/* The bytes of out, all GUARD. */
static void expect_guards(const void *out, size_t bytes, int k, const char *what)
{
    for (size_t i = 0; i < bytes; i++)
        if (((const unsigned char *)out)[i] != GUARD)
            fail_msg("bad case %d wrote %s byte %zu", k, what, i);
}

static uint64_t inputs_sum(const bad_env *e)
{
    return oracle_checksum(e->kv_c, sizeof e->kv_c) ^ oracle_checksum(e->w, sizeof e->w);
}

/* Each bad call fails with its status and message, writing nothing; the
 * query rejects the shape errors alike. */
static void rejects_on(const mla_backend_desc *b, void *ctx)
{
    (void)b;
    bad_env *e = ctx;
    bad_call c;
    for (int k = 0; bad_case(k, e, &c); k++) {
        memset(e->k, GUARD, sizeof e->k);
        memset(e->v, GUARD, sizeof e->v);
        const uint64_t inputs = inputs_sum(e);
        support_expect_reject("mla_up_proj", c.bad_input,
                              mla_up_proj(&c.a, c.workspace, c.workspace_bytes, c.threads), c.st,
                              c.needle);
        assert_true(support_contains(mla_last_error(), "mla_up_proj: "));
        expect_guards(e->k, sizeof e->k, k, "k_nope");
        expect_guards(e->v, sizeof e->v, k, "v");
        assert_true(inputs == inputs_sum(e));
        if (!c.shape)
            continue;
        int64_t bytes = -1;
        support_expect_reject("mla_up_proj_workspace_size", c.bad_input,
                              mla_up_proj_workspace_size(&c.a, 2, &bytes), c.st, c.needle);
        assert_true(support_contains(mla_last_error(), "mla_up_proj_workspace_size: "));
        assert_int_equal(bytes, -1);
    }
}

/* The bad-input environment: small integer inputs, no workspace yet. */
static bad_env *new_bad_env(void)
{
    bad_env *e = alloc_bytes(sizeof *e);
    for (int i = 0; i < BUF; i++)
        e->kv_c[i] = e->w[i] = (float)(i % 11) - 5.0f;
    return e;
}

static void test_rejects(void **state)
{
    (void)state;
    bad_env *e = new_bad_env();
    mla_up_proj_args a = good_args(e);
    assert_int_equal(mla_up_proj_workspace_size(&a, 2, &e->workspace_bytes), MLA_OK);
    e->workspace = alloc_bytes((size_t)e->workspace_bytes);
    mla_config cfg = {.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_F32, .kv_lora_rank = BL,
                      .rope_dim = 0, .num_heads = BH, .block_size = 1};
    assert_true(support_each_backend(MLA_OP_PREFILL, &cfg, rejects_on, e) >= 1);
    /* NULL args and out pointers */
    int64_t bytes = -1;
    const char *query = "mla_up_proj_workspace_size";
    support_expect_reject("mla_up_proj", "args NULL",
                          mla_up_proj(NULL, e->workspace, e->workspace_bytes, 1),
                          MLA_ERR_INVALID_ARGUMENT, "mla_up_proj: args is NULL");
    support_expect_reject(query, "args NULL", mla_up_proj_workspace_size(NULL, 1, &bytes),
                          MLA_ERR_INVALID_ARGUMENT, "mla_up_proj_workspace_size: args is NULL");
    support_expect_reject(query, "bytes NULL", mla_up_proj_workspace_size(&a, 1, NULL),
                          MLA_ERR_INVALID_ARGUMENT, "bytes is NULL");
    /* a workspace that overflows: the query says so rather than wrapping */
    a.num_tokens = INT64_MAX / 4;
    support_expect_reject(query, "workspace bytes past int64 (num_tokens INT64_MAX / 4)",
                          mla_up_proj_workspace_size(&a, 1, &bytes), MLA_ERR_OVERFLOW,
                          "workspace for");
    assert_int_equal(bytes, -1);
    /* the good call next to them */
    a = good_args(e);
    assert_int_equal(mla_up_proj(&a, e->workspace, e->workspace_bytes, 2), MLA_OK);
    free(e->workspace);
    free(e);
}

/* A packing given bad_input refused, with its status and needle, writing
 * nothing. */
static void expect_pack_rejected(const char *bad_input, const mla_up_proj_args *a, void *packed,
                                 int64_t bytes, mla_status want, const char *needle)
{
    unsigned char before[BUF * sizeof(float)] = {0};
    if (packed)
        memcpy(before, packed, sizeof before);
    support_expect_reject("mla_pack_kv_b_proj", bad_input, mla_pack_kv_b_proj(a, packed, bytes, 2),
                          want, needle);
    assert_true(support_contains(mla_last_error(), "mla_pack_kv_b_proj: "));
    assert_true(support_contains(mla_last_error(), needle));
    if (packed)
        assert_memory_equal(before, packed, sizeof before);
}

/* A call with a packed weight, given bad_input, refused with its status
 * and needle, writing no output. */
static void expect_call_rejected(bad_env *e, const char *bad_input, const mla_up_proj_args *a,
                                 mla_status want, const char *needle)
{
    memset(e->k, GUARD, sizeof e->k);
    memset(e->v, GUARD, sizeof e->v);
    support_expect_reject("mla_up_proj", bad_input,
                          mla_up_proj(a, e->workspace, e->workspace_bytes, 2), want, needle);
    assert_true(support_contains(mla_last_error(), "mla_up_proj: "));
    assert_true(support_contains(mla_last_error(), needle));
    expect_guards(e->k, sizeof e->k, -1, "k_nope");
    expect_guards(e->v, sizeof e->v, -1, "v");
}

/* bf16 pairs packed under a backend with a bf16 dot kernel (ref's twin with
 * ref's dot kernel where this CPU has none), then a call forced onto one
 * without: refused. */
static void dot_packing_elsewhere(bad_env *e)
{
    const mla_backend_desc *dot = NULL, *plain = NULL;
    mla_config cfg = {.q_dtype = MLA_DTYPE_BF16, .cache_dtype = MLA_DTYPE_BF16,
                      .kv_lora_rank = BL, .rope_dim = 0, .num_heads = BH, .block_size = 1};
    for (int i = 0; i < mla_backend_count(); i++) {
        const mla_backend_desc *b = mla_backend_at(i);
        mla_reasons why;
        if (mla_backend_validate(b->name, MLA_OP_PREFILL, &cfg, &why) != MLA_OK || why.count)
            continue;
        const bool pairs = b->kernels.gemm_bf16dot || b->kernels.gemm_bf16tile;
        if (pairs && !dot)
            dot = b;
        if (!pairs && !plain)
            plain = b;
    }
    assert_non_null(plain); /* ref */
    if (!dot) {
        mla_backend_desc twin = *mla_backend_find("ref");
        twin.name = "ref_bf16dot";
        twin.priority = -1;
        twin.kernels.gemm_bf16dot = mla_gemm_bf16dot__ref;
        assert_int_equal(mla_register_backend(&twin, false), MLA_OK);
        dot = mla_backend_find(twin.name);
    }
    mla_up_proj_args a = good_args(e);
    a.kv_c_dtype = a.w_dtype = MLA_DTYPE_BF16;
    int64_t bytes;
    assert_int_equal(mla_force_backend(MLA_OP_PREFILL, dot->name), MLA_OK);
    assert_int_equal(mla_pack_kv_b_proj_size(&a, &bytes), MLA_OK);
    void *packed = alloc_bytes((size_t)bytes);
    assert_int_equal(mla_pack_kv_b_proj(&a, packed, bytes, 2), MLA_OK);
    a.kv_b_proj_packed = packed;
    assert_int_equal(mla_force_backend(MLA_OP_PREFILL, plain->name), MLA_OK);
    expect_call_rejected(e, "kv_b_proj_packed in bf16 pairs, on a backend without that route", &a,
                         MLA_ERR_UNSUPPORTED, "has not");
    assert_int_equal(mla_force_backend(MLA_OP_PREFILL, dot->name), MLA_OK);
    memset(e->k, GUARD, sizeof e->k);
    assert_int_equal(mla_up_proj(&a, e->workspace, e->workspace_bytes, 2), MLA_OK);
    assert_int_equal(mla_force_backend(MLA_OP_PREFILL, NULL), MLA_OK);
    free(packed);
}

/* What packing reads (mla.h: shapes, dtypes, kv_b_proj), with kv_c, k_nope
 * and v NULL as a loader has them and their strides anything, on every backend: the packed weight
 * then serves a call, which gives the bits of the weight itself; and a call
 * with no tokens and NULL buffers writes nothing. No NULL buffer is offset
 * on the way (undefined; clang's -fsanitize=undefined sees it). */
static void pack_alone_on(const mla_backend_desc *b, void *ctx)
{
    (void)ctx;
    enum { S = 3, H = 2, L = 5, P = 3, V = 2 };
    float w[H * (P + V) * L], c[S * L], k1[S * H * P], v1[S * H * V], k2[S * H * P], v2[S * H * V];
    for (int i = 0; i < COUNT(w); i++)
        w[i] = (float)(i % 7) / 4.0f - 0.75f;
    for (int i = 0; i < COUNT(c); i++)
        c[i] = (float)(i % 5) / 2.0f - 1.0f;
    mla_up_proj_args a = {.num_heads = H, .kv_lora_rank = L, .qk_nope_dim = P, .v_head_dim = V,
                          .kv_b_proj = w, .w_dtype = MLA_DTYPE_F32, .kv_c_dtype = MLA_DTYPE_F32,
                          .kv_c_stride = L, .out_dtype = MLA_DTYPE_F32};
    int64_t bytes, need;
    assert_int_equal(mla_pack_kv_b_proj_size(&a, &bytes), MLA_OK);
    void *packed = alloc_bytes((size_t)bytes);
    assert_int_equal(mla_pack_kv_b_proj(&a, packed, bytes, 2), MLA_OK);
    support_expect_ran(b);
    /* the outputs' strides are not packing's to read: any values, the same
     * bytes (and under UBSan no address arithmetic on them) */
    mla_up_proj_args far = a;
    far.k_nope_token_stride = far.k_nope_head_stride = INT64_MAX;
    far.v_token_stride = far.v_head_stride = INT64_MAX;
    void *packed_far = alloc_bytes((size_t)bytes);
    assert_int_equal(mla_pack_kv_b_proj(&far, packed_far, bytes, 2), MLA_OK);
    assert_memory_equal(packed, packed_far, (size_t)bytes);
    free(packed_far);
    /* no tokens, every buffer NULL but the weight */
    assert_int_equal(mla_up_proj_workspace_size(&a, 2, &need), MLA_OK);
    void *ws = alloc_bytes((size_t)need + 1);
    assert_int_equal(mla_up_proj(&a, ws, need, 2), MLA_OK);
    a.kv_b_proj_packed = packed;
    assert_int_equal(mla_up_proj(&a, ws, need, 2), MLA_OK);
    free(ws);
    /* three tokens from the packing, then from the weight */
    a.num_tokens = S;
    a.kv_c = c;
    a.k_nope = k1, a.k_nope_token_stride = H * P, a.k_nope_head_stride = P;
    a.v = v1, a.v_token_stride = H * V, a.v_head_stride = V;
    assert_int_equal(mla_up_proj_workspace_size(&a, 2, &need), MLA_OK);
    ws = alloc_bytes((size_t)need + 1);
    assert_int_equal(mla_up_proj(&a, ws, need, 2), MLA_OK);
    a.kv_b_proj_packed = NULL;
    a.k_nope = k2, a.v = v2;
    assert_int_equal(mla_up_proj_workspace_size(&a, 2, &need), MLA_OK);
    free(ws);
    ws = alloc_bytes((size_t)need + 1);
    assert_int_equal(mla_up_proj(&a, ws, need, 2), MLA_OK);
    assert_memory_equal(k1, k2, sizeof k1);
    assert_memory_equal(v1, v2, sizeof v1);
    free(ws);
    free(packed);
}

static void test_pack_alone(void **state)
{
    (void)state;
    /* the config up_proj dispatches on: f32 operands, L = 5 in whole pairs */
    const mla_config cfg = {.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_F32,
                            .kv_lora_rank = 6, .num_heads = 2, .block_size = 1};
    assert_true(support_each_backend(MLA_OP_PREFILL, &cfg, pack_alone_on, NULL) >= 1);
}

/* Packing refuses bad arguments; a call refuses a packing made for another
 * shape or dtype, one not made by mla_pack_kv_b_proj, one an output
 * overlaps, and bf16 pairs on a backend without the dot route. */
static void test_packed_rejects(void **state)
{
    (void)state;
    bad_env *e = new_bad_env();
    mla_up_proj_args a = good_args(e);
    int64_t bytes = -1, small = -1;
    assert_int_equal(mla_pack_kv_b_proj_size(&a, &bytes), MLA_OK);
    unsigned char *packed = alloc_bytes((size_t)bytes + BUF * sizeof(float));
    memset(packed, GUARD, (size_t)bytes);
    expect_pack_rejected("packed NULL", &a, NULL, bytes, MLA_ERR_INVALID_ARGUMENT,
                         "packed is NULL");
    expect_pack_rejected("packed 1 byte short", &a, packed, bytes - 1, MLA_ERR_INVALID_ARGUMENT,
                         "too small");
    a.kv_b_proj = NULL;
    expect_pack_rejected("kv_b_proj NULL", &a, packed, bytes, MLA_ERR_INVALID_ARGUMENT,
                         "kv_b_proj is NULL");
    a = good_args(e);
    a.num_heads = 0;
    expect_pack_rejected("num_heads 0", &a, packed, bytes, MLA_ERR_INVALID_ARGUMENT, "num_heads 0");
    support_expect_reject("mla_pack_kv_b_proj_size", "num_heads 0",
                          mla_pack_kv_b_proj_size(&a, &small), MLA_ERR_INVALID_ARGUMENT,
                          "mla_pack_kv_b_proj_size: num_tokens 4, num_heads 0");
    a = good_args(e);
    expect_pack_rejected("packed over kv_b_proj", &a, e->w + 8, bytes, MLA_ERR_INVALID_ARGUMENT,
                         "packed overlaps kv_b_proj");
    support_expect_reject("mla_pack_kv_b_proj_size", "bytes NULL",
                          mla_pack_kv_b_proj_size(&a, NULL), MLA_ERR_INVALID_ARGUMENT, "bytes");

    assert_int_equal(mla_up_proj_workspace_size(&a, 2, &e->workspace_bytes), MLA_OK);
    e->workspace = alloc_bytes((size_t)e->workspace_bytes);
    /* packed for one head: another shape */
    a.num_heads = 1;
    assert_int_equal(mla_pack_kv_b_proj(&a, packed, bytes, 2), MLA_OK);
    a = good_args(e);
    a.kv_b_proj_packed = packed;
    expect_call_rejected(e, "kv_b_proj_packed for another shape", &a, MLA_ERR_INVALID_ARGUMENT,
                         "kv_b_proj_packed is for 1 heads");
    /* packed for bf16 latent rows: another dtype */
    a = good_args(e);
    a.kv_c_dtype = MLA_DTYPE_BF16;
    assert_int_equal(mla_pack_kv_b_proj(&a, packed, bytes, 2), MLA_OK);
    a = good_args(e);
    a.kv_b_proj_packed = packed;
    expect_call_rejected(e, "kv_b_proj_packed for another kv_c_dtype", &a, MLA_ERR_INVALID_ARGUMENT,
                         "kv_c bf16");
    /* the right packing, then a byte of its header changed */
    a.kv_b_proj_packed = NULL;
    assert_int_equal(mla_pack_kv_b_proj(&a, packed, bytes, 2), MLA_OK);
    a.kv_b_proj_packed = packed;
    packed[3] ^= 1;
    expect_call_rejected(e, "kv_b_proj_packed with a header byte changed", &a,
                         MLA_ERR_INVALID_ARGUMENT, "not made by mla_pack_kv_b_proj");
    packed[3] ^= 1;
    /* an output inside the packing */
    mla_up_proj_args in_packing = a;
    in_packing.v = (float *)(packed + bytes) - 4;
    expect_call_rejected(e, "v over kv_b_proj_packed", &in_packing, MLA_ERR_INVALID_ARGUMENT,
                         "v overlaps kv_b_proj_packed");
    /* the good call: the unpacked call's bits, without kv_b_proj */
    float want_k[BUF], want_v[BUF];
    mla_up_proj_args plain = good_args(e);
    assert_int_equal(mla_up_proj(&plain, e->workspace, e->workspace_bytes, 2), MLA_OK);
    memcpy(want_k, e->k, sizeof want_k);
    memcpy(want_v, e->v, sizeof want_v);
    a.kv_b_proj = NULL;
    memset(e->k, GUARD, sizeof e->k);
    memset(e->v, GUARD, sizeof e->v);
    assert_int_equal(mla_up_proj(&a, e->workspace, e->workspace_bytes, 2), MLA_OK);
    assert_memory_equal(want_k, e->k, BS * BH * BP * sizeof(float));
    assert_memory_equal(want_v, e->v, BS * BH * BV * sizeof(float));
    dot_packing_elsewhere(e);
    free(e->workspace);
    free(packed);
    free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_edge_shapes),
        cmocka_unit_test(test_deepseek_shape),
        cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_packed_rejects),
        cmocka_unit_test(test_pack_alone),
    };
    return cmocka_run_group_tests_name("up_proj", tests, NULL, NULL);
}
